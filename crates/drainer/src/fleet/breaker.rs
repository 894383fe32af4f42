//! The circuit breaker's decisions (`--halt-after`), with no I/O. A rotation halts, and stays
//! halted until someone resumes it, when what it replaced does not come back:
//!
//! - the start gate has held the next drain for `--halt-after`: the workloads evicted by the
//!   last drains are not Ready again (their new pods crash-loop or stay unready), or pods stay
//!   unschedulable;
//! - a node that joined after the rotation began (a replacement) has not been Ready for
//!   `--halt-after` since it joined.
//!
//! Both clocks start again at the last resume, so a resumed rotation gets a full `--halt-after`
//! before the same cause halts it again. Only nodes this drainer has watched since they joined
//! count as replacements: it knows whether they have ever been Ready (a restarted drainer would
//! take a node that was Ready for hours and then failed for one that never came up).

use std::time::Duration;

use crate::fleet::starts::NodeView;
use jiff::Timestamp;

/// The halt reason when the start gate has held for `held_for`, for `why`, and that is past
/// `halt_after`.
pub fn gate_trip(held_for: Duration, halt_after: Duration, why: &str) -> Option<String> {
    (held_for >= halt_after).then(|| {
        format!(
            "the cluster has not absorbed the last drains for {}s (--halt-after {}s): {why}",
            held_for.as_secs(),
            halt_after.as_secs()
        )
    })
}

/// When the rotation began: the earliest drain start recorded on a node that still carries the
/// taint (drained nodes of this rotation wait there to be retired). `None` while none does.
pub fn rotation_began<'a>(nodes: impl IntoIterator<Item = &'a NodeView>) -> Option<Timestamp> {
    nodes
        .into_iter()
        .filter(|n| n.tainted)
        .filter_map(|n| n.record.started_at)
        .min()
}

/// The halt reason when a replacement never came up: a node created after `joined_after` (the
/// rotation's start, or when this drainer began watching, whichever is later) that has not been
/// Ready for `halt_after`, counted from when it joined or from `resumed_at`, whichever is later.
/// The oldest such node is named.
pub fn stalled_replacement<'a>(
    nodes: impl IntoIterator<Item = &'a NodeView>,
    joined_after: Timestamp,
    resumed_at: Option<Timestamp>,
    now: Timestamp,
    halt_after: Duration,
) -> Option<String> {
    let limit = jiff::SignedDuration::try_from(halt_after).ok()?;
    nodes
        .into_iter()
        .filter(|n| !n.ever_ready && !n.deleting && !n.tainted)
        .filter_map(|n| n.created.filter(|c| *c > joined_after).map(|c| (c, n)))
        .filter(|(created, _)| {
            let from = resumed_at.map_or(*created, |r| r.max(*created));
            now.duration_since(from) >= limit
        })
        .min_by_key(|(created, _)| *created)
        .map(|(created, n)| {
            format!(
                "node {} joined at {created}, after the rotation began, and has not been Ready since (--halt-after {}s): replacements are not coming up",
                n.name,
                halt_after.as_secs()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::node::DrainRecord;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn node(name: &str, created: &str, ever_ready: bool) -> NodeView {
        NodeView {
            name: name.into(),
            created: Some(at(created)),
            ever_ready,
            ready: ever_ready,
            ..NodeView::default()
        }
    }

    fn draining(name: &str, started: &str) -> NodeView {
        NodeView {
            tainted: true,
            record: DrainRecord {
                started_at: Some(at(started)),
                ..DrainRecord::default()
            },
            ..node(name, "2026-01-01T00:00:00Z", true)
        }
    }

    const HALT_AFTER: Duration = Duration::from_secs(600);

    #[test]
    fn the_rotation_begins_at_its_first_recorded_start_on_a_tainted_node() {
        let mut retired_taint = draining("old-0", "2026-11-20T10:00:00Z");
        retired_taint.tainted = false;
        let nodes = [
            draining("old-1", "2026-11-26T10:05:00Z"),
            draining("old-2", "2026-11-26T10:00:00Z"),
            node("new-1", "2026-11-26T10:01:00Z", true),
            retired_taint,
        ];
        assert_eq!(rotation_began(&nodes), Some(at("2026-11-26T10:00:00Z")));
        assert_eq!(rotation_began(&nodes[2..]), None);
    }

    #[test]
    fn after_a_resume_a_stuck_replacement_gets_a_full_halt_after_again() {
        let began = at("2026-11-26T10:00:00Z");
        let stuck = [node("stuck", "2026-11-26T10:05:00Z", false)];
        let now = at("2026-11-26T10:30:00Z");
        assert!(stalled_replacement(&stuck, began, None, now, HALT_AFTER).is_some());
        let resumed = Some(at("2026-11-26T10:25:00Z"));
        assert_eq!(
            stalled_replacement(&stuck, began, resumed, now, HALT_AFTER),
            None
        );
        let later = at("2026-11-26T10:35:00Z");
        assert!(stalled_replacement(&stuck, began, resumed, later, HALT_AFTER).is_some());
    }

    #[test]
    fn a_replacement_never_ready_past_the_limit_halts_naming_the_oldest() {
        let began = at("2026-11-26T10:00:00Z");
        let now = at("2026-11-26T10:20:00Z");
        let nodes = [
            // Joined before the rotation: not a replacement.
            node("before", "2026-11-26T09:59:00Z", false),
            node("late", "2026-11-26T10:15:00Z", false),
            node("stuck-b", "2026-11-26T10:08:00Z", false),
            node("stuck-a", "2026-11-26T10:05:00Z", false),
            node("fine", "2026-11-26T10:01:00Z", true),
        ];
        let reason = stalled_replacement(&nodes, began, None, now, HALT_AFTER).unwrap();
        assert_eq!(
            reason,
            "node stuck-a joined at 2026-11-26T10:05:00Z, after the rotation began, and has not been Ready since (--halt-after 600s): replacements are not coming up"
        );
        // Within the limit, or Ready once: no halt.
        assert_eq!(
            stalled_replacement(&nodes[1..2], began, None, now, HALT_AFTER),
            None
        );
        assert_eq!(
            stalled_replacement(&nodes[4..], began, None, now, HALT_AFTER),
            None
        );
        assert_eq!(
            stalled_replacement(&nodes[..1], began, None, now, HALT_AFTER),
            None
        );
    }

    #[test]
    fn nodes_going_away_or_being_drained_are_not_replacements() {
        let began = at("2026-11-26T10:00:00Z");
        let now = at("2026-11-26T11:00:00Z");
        let mut leaving = node("leaving", "2026-11-26T10:05:00Z", false);
        leaving.deleting = true;
        let mut tainted = node("tainted", "2026-11-26T10:05:00Z", false);
        tainted.tainted = true;
        assert_eq!(
            stalled_replacement(&[leaving, tainted], began, None, now, HALT_AFTER),
            None
        );
    }

    #[test]
    fn the_gate_trips_the_breaker_only_past_the_limit() {
        assert_eq!(gate_trip(Duration::from_secs(599), HALT_AFTER, "x"), None);
        assert_eq!(
            gate_trip(
                Duration::from_secs(601),
                HALT_AFTER,
                "Deployment shop/api has 1/3 replicas ready"
            )
            .unwrap(),
            "the cluster has not absorbed the last drains for 601s (--halt-after 600s): Deployment shop/api has 1/3 replicas ready"
        );
    }
}
