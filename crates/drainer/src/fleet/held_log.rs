//! The "drains held" log lines: one per reason, naming a few nodes, repeated only when the
//! reasons change (or, for a change of nodes alone, at most once a minute); and when the same
//! news is written into the rotation record, for `status`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::fleet::held::Held;

/// What was last logged about held drains.
#[derive(Default)]
pub(super) struct HeldLog {
    held: Vec<Held>,
    reasons: BTreeSet<String>,
    logged_at: Option<Instant>,
    /// What was logged and is not yet in the rotation record.
    unwritten: Option<Vec<Held>>,
    written_at: Option<Instant>,
}

/// A change in which nodes wait (and not in why) is logged at most this often: when a whole
/// fleet is tainted at once, each node's taint arrives as its own event.
const HELD_NODES_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// The rotation record's waiting nodes are written at most this often. During a rotation the
/// reasons change at nearly every start (the gate holds, then the slots are full); a write
/// each time would cost about one request per drained node for a list `status` shows a few
/// seconds late just as well. The latest change is written once the interval has passed.
const WAITING_WRITE_INTERVAL: Duration = Duration::from_secs(10);

impl HeldLog {
    /// Logs the held drains when the reasons change, or when only the nodes changed and the
    /// last log is older than [`HELD_NODES_LOG_INTERVAL`]. Returns whether it logged; what it
    /// logged is next for the rotation record ([`HeldLog::take_due_write`]).
    pub(super) fn update(&mut self, held: Vec<Held>, now: Instant) -> bool {
        if held == self.held {
            return false;
        }
        let reasons: BTreeSet<String> = held.iter().map(|(_, why)| why.to_string()).collect();
        let due = self
            .logged_at
            .is_none_or(|at| now.duration_since(at) >= HELD_NODES_LOG_INTERVAL);
        if reasons != self.reasons || due {
            log_held(&held);
            self.reasons = reasons;
            self.logged_at = Some(now);
            self.unwritten = Some(held.clone());
            self.held = held;
            return true;
        }
        false
    }

    /// The held drains to write into the rotation record now: the last logged, if not yet
    /// written and the last write is [`WAITING_WRITE_INTERVAL`] old. Called at every pass (at
    /// least each second while leading), so the latest change is written soon after the
    /// interval.
    pub(super) fn take_due_write(&mut self, now: Instant) -> Option<Vec<Held>> {
        let due = self
            .written_at
            .is_none_or(|at| now.duration_since(at) >= WAITING_WRITE_INTERVAL);
        if !due {
            return None;
        }
        let held = self.unwritten.take()?;
        self.written_at = Some(now);
        Some(held)
    }
}

/// One info line per distinct reason, naming a few of the nodes it holds: with every node of a
/// fleet tainted, one line per node would bury the log at each change.
fn log_held(held: &[Held]) {
    let mut by_reason: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (node, why) in held {
        by_reason
            .entry(why.to_string())
            .or_default()
            .push(node.as_str());
    }
    for (why, nodes) in by_reason {
        let shown: Vec<&str> = nodes.iter().take(5).copied().collect();
        let more = nodes.len().saturating_sub(shown.len());
        let nodes = if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        };
        tracing::info!(nodes = %nodes, %why, "drains held");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::held::HeldReason;

    fn held(nodes: &[&str], why: HeldReason) -> Vec<Held> {
        nodes.iter().map(|n| (n.to_string(), why.clone())).collect()
    }

    #[test]
    fn held_drains_are_logged_when_why_changes_not_per_node() {
        let t0 = Instant::now();
        let mut log = HeldLog::default();
        let full = HeldReason::MaxConcurrent {
            max_concurrent: 1,
            draining: 1,
        };
        assert!(log.update(held(&["a"], full.clone()), t0));
        // A fleet tainted node by node: same reason, more nodes, no new line each time.
        for (i, nodes) in [&["a", "b"][..], &["a", "b", "c"]].iter().enumerate() {
            assert!(!log.update(
                held(nodes, full.clone()),
                t0 + Duration::from_millis(i as u64)
            ));
        }
        assert!(!log.update(held(&["a", "b", "c"], full), t0 + Duration::from_secs(5)));
        // A new reason is logged at once.
        let pending = HeldReason::Gate("pod p pending".into());
        assert!(log.update(
            held(&["a", "b", "c"], pending.clone()),
            t0 + Duration::from_secs(6)
        ));
        // Only the nodes changed, but the last line is older than the interval: logged.
        let later = t0 + Duration::from_secs(6) + HELD_NODES_LOG_INTERVAL;
        assert!(log.update(held(&["b", "c"], pending), later));
        // Nothing held any more is a change of reasons too.
        assert!(log.update(Vec::new(), later));
        assert!(!log.update(Vec::new(), later + Duration::from_secs(1)));
    }

    #[test]
    fn the_waiting_nodes_are_written_at_most_every_interval_the_latest_last() {
        let t0 = Instant::now();
        let mut log = HeldLog::default();
        let full = |draining| HeldReason::MaxConcurrent {
            max_concurrent: 3,
            draining,
        };
        let gate =
            HeldReason::Gate("workloads evicted by earlier drains are not Ready again".into());
        // The first news is written at once; nothing new, nothing to write.
        assert!(log.update(held(&["a", "b"], full(3)), t0));
        assert_eq!(log.take_due_write(t0), Some(held(&["a", "b"], full(3))));
        assert_eq!(log.take_due_write(t0 + Duration::from_secs(1)), None);
        // Reasons change twice within the interval: neither is written yet ...
        let soon = t0 + Duration::from_secs(2);
        assert!(log.update(held(&["a", "b"], gate.clone()), soon));
        assert_eq!(log.take_due_write(soon), None);
        assert!(log.update(held(&["b"], full(3)), soon + Duration::from_secs(1)));
        assert_eq!(log.take_due_write(t0 + Duration::from_secs(9)), None);
        // ... and at the interval, the latest is.
        let due = t0 + WAITING_WRITE_INTERVAL;
        assert_eq!(log.take_due_write(due), Some(held(&["b"], full(3))));
        assert_eq!(log.take_due_write(due + WAITING_WRITE_INTERVAL), None);
        // The end of the rotation (nothing held) is written too.
        assert!(log.update(Vec::new(), due + WAITING_WRITE_INTERVAL));
        assert_eq!(
            log.take_due_write(due + WAITING_WRITE_INTERVAL),
            Some(Vec::new())
        );
    }
}
