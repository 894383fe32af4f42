//! What a failed watch of one of rotor's own resources (RotationPolicies, DrainRules) means
//! for the drains, and when to say so. Both watchers follow the same rule: a `404` before the
//! first list is a CRD not installed (the flags, or no rules, apply), but once listed it is an
//! API server that has not synced its CRDs yet, and what was last listed stands; removing the
//! CRD deletes its objects first, which the watch has seen.

use kube::runtime::watcher;

/// What one failure of the watch says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrdWatchFailure {
    /// `404` before anything was listed: the CRD is not installed.
    NotInstalled,
    /// `404` after a list: the objects as last listed stand.
    NotSyncedYet,
    /// `403`: the drainer's RBAC lacks the resource; never taken for "none exist".
    Forbidden,
    /// Anything else (timeouts, 5xx, a broken stream): retried with back-off.
    Other,
}

/// A watcher's memory of its failures: whether it has listed once, and the last failure's code,
/// so each kind of failure in a row is logged once.
#[derive(Debug, Default)]
pub struct CrdWatchState {
    listed_once: bool,
    last_failure: Option<u16>,
}

impl CrdWatchState {
    /// The list completed: later failures are news again.
    pub fn listed(&mut self) {
        self.listed_once = true;
        self.last_failure = None;
    }

    pub fn listed_once(&self) -> bool {
        self.listed_once
    }

    /// What `error` means, and whether it is news (another kind than the failure before).
    pub fn failed(&mut self, error: &watcher::Error) -> (CrdWatchFailure, bool) {
        self.failed_with(rotor_core::watch_failure_status(error))
    }

    fn failed_with(&mut self, code: Option<u16>) -> (CrdWatchFailure, bool) {
        let news = self.last_failure != Some(code.unwrap_or(0));
        self.last_failure = Some(code.unwrap_or(0));
        let failure = match code {
            Some(404) if self.listed_once => CrdWatchFailure::NotSyncedYet,
            Some(404) => CrdWatchFailure::NotInstalled,
            Some(403) => CrdWatchFailure::Forbidden,
            _ => CrdWatchFailure::Other,
        };
        (failure, news)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_404_means_not_installed_only_until_the_first_list() {
        let mut state = CrdWatchState::default();
        assert_eq!(
            state.failed_with(Some(404)),
            (CrdWatchFailure::NotInstalled, true)
        );
        assert_eq!(
            state.failed_with(Some(404)),
            (CrdWatchFailure::NotInstalled, false),
            "the same failure again is not news"
        );
        state.listed();
        assert!(state.listed_once());
        assert_eq!(
            state.failed_with(Some(404)),
            (CrdWatchFailure::NotSyncedYet, true),
            "after a list, a 404 is news again and keeps what was listed"
        );
        assert_eq!(
            state.failed_with(Some(403)),
            (CrdWatchFailure::Forbidden, true)
        );
        assert_eq!(state.failed_with(None), (CrdWatchFailure::Other, true));
        assert_eq!(state.failed_with(Some(500)), (CrdWatchFailure::Other, true));
        assert_eq!(
            state.failed_with(Some(500)),
            (CrdWatchFailure::Other, false)
        );
    }
}
