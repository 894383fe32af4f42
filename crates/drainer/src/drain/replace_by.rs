//! The replace-by deadline (`--enforce-replace-by`), decided without I/O for one drain attempt:
//! whether the node's `rotor.dev/replace-by` time has passed, so that pod opt-outs and budgets
//! that never allow stop holding its drain, and what to say, once each, before and when that
//! happens. A node must not outlive its patch deadline because one pod opted out.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// One drain attempt's view of the node's replace-by time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplaceBy {
    at: Timestamp,
    warning: Duration,
    warned: bool,
    passed_said: bool,
}

/// What one pass should say about the deadline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Announcement {
    /// Within the warning period: at `at`, these pods will no longer hold the node.
    Near { at: Timestamp, pods: Vec<String> },
    /// Passed: these pods no longer hold the node.
    Passed { at: Timestamp, pods: Vec<String> },
}

impl ReplaceBy {
    /// `at` is the node's replace-by time; `warning` is `--replace-by-warning`.
    pub fn new(at: Timestamp, warning: Duration) -> ReplaceBy {
        ReplaceBy {
            at,
            warning,
            warned: false,
            passed_said: false,
        }
    }

    /// The node's replace-by time.
    pub fn at(&self) -> Timestamp {
        self.at
    }

    /// Whether the deadline has passed at `now`: overrides apply.
    pub fn passed(&self, now: Timestamp) -> bool {
        now >= self.at
    }

    /// When the next pass must run for the deadline: the warning's start, then the deadline.
    pub fn next_wake(&self, now: Timestamp) -> Option<Timestamp> {
        let warn_from = self
            .at
            .checked_sub(SignedDuration::try_from(self.warning).unwrap_or(SignedDuration::MAX))
            .unwrap_or(Timestamp::MIN);
        [warn_from, self.at].into_iter().find(|t| *t > now)
    }

    /// What to say at `now`, given the pods the deadline overrides (`held`, as namespace/name:
    /// opt-outs and pods whose budget never allows). Each is said once per attempt, and only
    /// when some pod is concerned: a node nothing holds needs no warning.
    pub fn announce(&mut self, now: Timestamp, held: &[String]) -> Option<Announcement> {
        if held.is_empty() {
            return None;
        }
        if self.passed(now) {
            if self.passed_said {
                return None;
            }
            self.passed_said = true;
            self.warned = true;
            return Some(Announcement::Passed {
                at: self.at,
                pods: held.to_vec(),
            });
        }
        if self.warned || self.next_wake(now) != Some(self.at) {
            return None;
        }
        self.warned = true;
        Some(Announcement::Near {
            at: self.at,
            pods: held.to_vec(),
        })
    }
}

impl Announcement {
    /// The note of the node's Event.
    pub fn node_note(&self) -> String {
        match self {
            Announcement::Near { at, pods } => format!(
                "this node must be replaced by {at} (rotor.dev/replace-by): from then on rotor evicts {} despite its opt-out or budget (--enforce-replace-by); move or approve them before",
                pods.join(", ")
            ),
            Announcement::Passed { at, pods } => format!(
                "replace-by {at} has passed: rotor now evicts {} despite its opt-out, deleting a pod whose budget never allows as the last resort (--enforce-replace-by)",
                pods.join(", ")
            ),
        }
    }

    /// The note of each concerned pod's Event.
    pub fn pod_note(&self, node: &str) -> String {
        match self {
            Announcement::Near { at, .. } => format!(
                "node {node} must be replaced by {at}: from then on rotor evicts this pod despite its opt-out or budget (--enforce-replace-by)"
            ),
            Announcement::Passed { at, .. } => format!(
                "node {node} had to be replaced by {at}: rotor evicts this pod despite its opt-out or budget (--enforce-replace-by)"
            ),
        }
    }

    pub fn pods(&self) -> &[String] {
        match self {
            Announcement::Near { pods, .. } | Announcement::Passed { pods, .. } => pods,
        }
    }

    pub fn passed(&self) -> bool {
        matches!(self, Announcement::Passed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn it_warns_once_within_the_warning_then_says_once_that_it_passed() {
        let mut deadline = ReplaceBy::new(at("2026-11-27T12:00:00Z"), DAY);
        let held = vec!["shop/precious".to_string()];
        // Before the warning: nothing, and the next wake is the warning's start.
        let early = at("2026-11-26T00:00:00Z");
        assert_eq!(deadline.announce(early, &held), None);
        assert_eq!(deadline.next_wake(early), Some(at("2026-11-26T12:00:00Z")));
        assert!(!deadline.passed(early));
        // Within it: one warning.
        let near = at("2026-11-27T00:00:00Z");
        assert_eq!(
            deadline.announce(near, &held),
            Some(Announcement::Near {
                at: at("2026-11-27T12:00:00Z"),
                pods: held.clone()
            })
        );
        assert_eq!(deadline.announce(near, &held), None);
        assert_eq!(deadline.next_wake(near), Some(at("2026-11-27T12:00:00Z")));
        // Passed: overrides apply, said once.
        let late = at("2026-11-27T12:00:01Z");
        assert!(deadline.passed(late));
        let passed = deadline.announce(late, &held).unwrap();
        assert!(passed.passed());
        assert!(
            passed.node_note().starts_with(
                "replace-by 2026-11-27T12:00:00Z has passed: rotor now evicts shop/precious"
            ),
            "{}",
            passed.node_note()
        );
        assert_eq!(deadline.announce(late, &held), None);
        assert_eq!(deadline.next_wake(late), None);
    }

    #[test]
    fn nothing_is_said_while_nothing_is_held_and_a_late_start_says_only_that_it_passed() {
        let mut deadline = ReplaceBy::new(at("2026-11-27T12:00:00Z"), DAY);
        assert_eq!(deadline.announce(at("2026-11-27T11:00:00Z"), &[]), None);
        // The attempt started after the deadline: no warning first.
        let mut late = ReplaceBy::new(at("2026-11-27T12:00:00Z"), DAY);
        let said = late
            .announce(at("2026-11-28T00:00:00Z"), &["a/b".into()])
            .unwrap();
        assert!(said.passed());
        assert_eq!(
            said.pod_note("old-1"),
            "node old-1 had to be replaced by 2026-11-27T12:00:00Z: rotor evicts this pod despite its opt-out or budget (--enforce-replace-by)"
        );
    }
}
