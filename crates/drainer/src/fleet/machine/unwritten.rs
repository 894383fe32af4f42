//! Drains' ends the node may not show: a start the API refused (written nowhere), or an end
//! whose write failed past its retries (a webhook on nodes down). Each is carried over the
//! node's next views while the node still shows what it showed when the drain ended, so the
//! loop neither resumes a drain that ended nor takes a retry's back-off away; once anyone
//! writes the node, its own record counts. A drained end is written again, less and less
//! often, until the node shows it: nothing else would (a failed end is rewritten by its retry,
//! and a refused start has nothing to show).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rotor_core::contract::DrainPhase;

use crate::fleet::starts::NodeView;
use crate::record::node::DrainRecord;
use crate::retry_later::RetryLater;

/// How long after a drained end was left unwritten it is written again (the drain's own write
/// has already been retried for about 15 s); each further write waits twice as long, up to
/// [`REWRITE_AT_MOST`].
const REWRITE_FIRST: Duration = Duration::from_secs(30);
const REWRITE_AT_MOST: Duration = Duration::from_secs(300);

/// One end the node may not show.
#[derive(Debug)]
struct UnwrittenEnd {
    /// The record as the node showed it when the drain ended.
    on_node: DrainRecord,
    /// The end: drained, or failed (the attempt the retry's back-off counts from).
    end: DrainRecord,
    /// For a drained end: when it is written again.
    rewrite: Option<RetryLater>,
}

/// A write of a drained end the node has not shown: `end` over what the node shows, `over`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::fleet) struct EndRewrite {
    pub node: String,
    pub end: DrainRecord,
    pub over: DrainRecord,
}

/// The ends the nodes may not show, by node.
#[derive(Debug, Default)]
pub(super) struct UnwrittenEnds {
    ends: BTreeMap<String, UnwrittenEnd>,
}

impl UnwrittenEnds {
    /// Keeps `end` for `node`, whose record showed `on_node` when its drain ended; nothing
    /// when the node shows the end already (the watch brought its write first).
    pub(super) fn keep(
        &mut self,
        node: &str,
        on_node: DrainRecord,
        end: DrainRecord,
        now: Instant,
    ) {
        if on_node == end {
            self.ends.remove(node);
            return;
        }
        let rewrite = (end.phase == Some(DrainPhase::Drained))
            .then(|| RetryLater::after(now, REWRITE_FIRST, REWRITE_AT_MOST));
        self.ends.insert(
            node.to_string(),
            UnwrittenEnd {
                on_node,
                end,
                rewrite,
            },
        );
    }

    /// Forgets `node`'s end (its drain or clean-up ended anew, or it is gone); returns what the
    /// node showed when it was kept.
    pub(super) fn forget(&mut self, node: &str) -> Option<DrainRecord> {
        self.ends.remove(node).map(|kept| kept.on_node)
    }

    /// Puts the end back into a new view of its node while the node still shows what it
    /// showed; once its record changed (someone wrote it), the node's own is what counts.
    pub(super) fn carry(&mut self, view: &mut NodeView) {
        match self.ends.get(&view.name) {
            Some(kept) if kept.on_node == view.record => view.record = kept.end.clone(),
            Some(_) => {
                self.ends.remove(&view.name);
            }
            None => {}
        }
    }

    /// A node whose drained end waits to be written again, if any.
    pub(super) fn awaiting_rewrite(&self) -> Option<&str> {
        self.ends
            .iter()
            .find(|(_, kept)| kept.rewrite.is_some())
            .map(|(node, _)| node.as_str())
    }

    /// The drained ends due to be written again at `now`, but not for nodes `busy` says a task
    /// works on (its own write decides).
    pub(super) fn due_rewrites(
        &mut self,
        now: Instant,
        busy: impl Fn(&str) -> bool,
    ) -> Vec<EndRewrite> {
        self.ends
            .iter_mut()
            .filter(|(node, _)| !busy(node))
            .filter_map(|(node, kept)| {
                kept.rewrite.as_mut()?.due(now).then(|| EndRewrite {
                    node: node.clone(),
                    end: kept.end.clone(),
                    over: kept.on_node.clone(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(phase: DrainPhase) -> DrainRecord {
        DrainRecord {
            phase: Some(phase),
            attempts: 1,
            ..DrainRecord::default()
        }
    }

    fn view(name: &str, record: DrainRecord) -> NodeView {
        NodeView {
            name: name.into(),
            record,
            ..NodeView::default()
        }
    }

    #[test]
    fn a_drained_end_is_written_again_less_and_less_often_until_the_node_shows_it() {
        let t0 = Instant::now();
        let secs = |s| t0 + Duration::from_secs(s);
        let mut ends = UnwrittenEnds::default();
        let (evicting, drained) = (record(DrainPhase::Evicting), record(DrainPhase::Drained));
        ends.keep("a", evicting.clone(), drained.clone(), t0);
        // A failed end is not rewritten: its retry writes.
        ends.keep("b", evicting.clone(), record(DrainPhase::Failed), t0);
        let due: Vec<u64> = (0..=700)
            .filter(|s| !ends.due_rewrites(secs(*s), |_| false).is_empty())
            .collect();
        assert_eq!(due, [30, 90, 210, 450]);
        assert_eq!(
            ends.due_rewrites(secs(1000), |_| false),
            [EndRewrite {
                node: "a".into(),
                end: drained.clone(),
                over: evicting.clone(),
            }]
        );
        // Not while a task works on the node.
        assert!(ends.due_rewrites(secs(2000), |n| n == "a").is_empty());
        // The node still shows the drain under way: the end is carried into its view.
        let mut still = view("a", evicting.clone());
        ends.carry(&mut still);
        assert_eq!(still.record, drained);
        // The write landed (or someone wrote the node): its own record counts, and nothing is
        // written again.
        let mut shown = view("a", drained.clone());
        ends.carry(&mut shown);
        let mut later = view("a", evicting);
        ends.carry(&mut later);
        assert_eq!(later.record.phase, Some(DrainPhase::Evicting));
        assert!(ends.due_rewrites(secs(5000), |_| false).is_empty());
        // An end the node shows already (the watch brought its write before the drain's end
        // was taken in) is not kept: nothing to write, and no lease to hold for it.
        ends.keep("c", drained.clone(), drained, t0);
        assert_eq!(ends.awaiting_rewrite(), None);
    }
}
