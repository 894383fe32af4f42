//! The Events rotor-drainer posts on nodes, named once: each reason with its type. The table of
//! Events in `docs/operating.md` is tested against [`NodeEvent::ALL`].

/// One kind of Event the drainer posts on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// Something only a person can clear holds the node's start: pre-drain hooks, a missing
    /// approval, overlapping or unreadable RotationPolicies (posted when that changes).
    HeldByHooks,
    Started,
    Resumed,
    Drained,
    Cancelled,
    Blocked,
    Failed,
    /// Blocked past park-after: set aside, rotor's cordon undone, retried after a back-off.
    Parked,
    PodForced,
    SurgeReady,
    /// No pod on the node needs room elsewhere: nothing to wait for.
    SurgeNothingToReserve,
    /// `--max-surge` left no slot for all of `--surge-timeout`.
    SurgeNoSlot,
    SurgeTimedOut,
    SurgeFailed,
    /// `--enforce-replace-by`: the node's replace-by time is near, and pods will be overridden
    /// (posted on the node and on those pods).
    ReplaceByNear,
    /// `--enforce-replace-by`: the replace-by time passed; opt-outs and never-allowing budgets
    /// are overridden (on the node and on those pods).
    ReplaceByPassed,
    /// `--restart-single-replica`: rotor restarted the rollout of a one-replica Deployment
    /// instead of evicting its pod (on the node and on the pod).
    RolloutRestarted,
    /// `--restart-single-replica`: a one-replica Deployment's strategy does not allow a restart
    /// without a moment with no replica, so its pod is evicted (on the node and on the pod).
    RolloutRestartRefused,
    /// Drain record annotations on the node that rotor cannot use (garbage, or times it cannot
    /// have written) were disregarded when the drain started.
    RecordIgnored,
    /// An evicted pod's grace period outlasts the drain's deadline (on the node and on the pod).
    GraceOutlastsDrain,
}

impl NodeEvent {
    pub const ALL: [NodeEvent; 20] = [
        NodeEvent::HeldByHooks,
        NodeEvent::Started,
        NodeEvent::Resumed,
        NodeEvent::Drained,
        NodeEvent::Cancelled,
        NodeEvent::Blocked,
        NodeEvent::Failed,
        NodeEvent::Parked,
        NodeEvent::PodForced,
        NodeEvent::SurgeReady,
        NodeEvent::SurgeNothingToReserve,
        NodeEvent::SurgeNoSlot,
        NodeEvent::SurgeTimedOut,
        NodeEvent::SurgeFailed,
        NodeEvent::ReplaceByNear,
        NodeEvent::ReplaceByPassed,
        NodeEvent::RolloutRestarted,
        NodeEvent::RolloutRestartRefused,
        NodeEvent::RecordIgnored,
        NodeEvent::GraceOutlastsDrain,
    ];

    /// The Event's `reason`, what `kubectl get events` shows and alerts match on.
    pub const fn reason(self) -> &'static str {
        match self {
            NodeEvent::HeldByHooks => "DrainHeld",
            NodeEvent::Started => "DrainStarted",
            NodeEvent::Resumed => "DrainResumed",
            NodeEvent::Drained => "Drained",
            NodeEvent::Cancelled => "DrainCancelled",
            NodeEvent::Blocked => "DrainBlocked",
            NodeEvent::Failed => "DrainFailed",
            NodeEvent::Parked => "DrainParked",
            NodeEvent::PodForced => "PodForced",
            NodeEvent::SurgeReady => "SurgeReady",
            NodeEvent::SurgeNothingToReserve | NodeEvent::SurgeNoSlot => "SurgeSkipped",
            NodeEvent::SurgeTimedOut => "SurgeTimedOut",
            NodeEvent::SurgeFailed => "SurgeFailed",
            NodeEvent::ReplaceByNear => "ReplaceByNear",
            NodeEvent::ReplaceByPassed => "ReplaceByPassed",
            NodeEvent::RolloutRestarted => "RolloutRestarted",
            NodeEvent::RolloutRestartRefused => "RolloutRestartRefused",
            NodeEvent::RecordIgnored => "DrainRecordIgnored",
            NodeEvent::GraceOutlastsDrain => "GracePeriodTooLong",
        }
    }

    /// Warning for what an operator may have to act on; Normal for progress.
    pub const fn is_warning(self) -> bool {
        matches!(
            self,
            NodeEvent::Blocked
                | NodeEvent::Failed
                | NodeEvent::Parked
                | NodeEvent::PodForced
                | NodeEvent::SurgeNoSlot
                | NodeEvent::SurgeTimedOut
                | NodeEvent::SurgeFailed
                | NodeEvent::ReplaceByNear
                | NodeEvent::ReplaceByPassed
                | NodeEvent::RolloutRestartRefused
                | NodeEvent::RecordIgnored
                | NodeEvent::GraceOutlastsDrain
        )
    }
}

/// The longest Event note the API server accepts (events.k8s.io/v1 `note`: 1 kB); a longer one
/// is refused with 422 and the Event is lost.
pub const NOTE_LIMIT: usize = 1024;

/// `note` cut to [`NOTE_LIMIT`] bytes at a character boundary, ending in `...` when cut, so that
/// an Event quoting something long (a list of pods, a server's message) is still posted.
pub fn event_note(mut note: String) -> String {
    if note.len() <= NOTE_LIMIT {
        return note;
    }
    let mut end = NOTE_LIMIT - 3;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note.truncate(end);
    note.push_str("...");
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_to_what_the_api_server_accepts() {
        assert_eq!(event_note("short".into()), "short");
        let exact = "x".repeat(NOTE_LIMIT);
        assert_eq!(event_note(exact.clone()), exact);
        let cut = event_note("é".repeat(NOTE_LIMIT));
        assert!(
            cut.len() <= NOTE_LIMIT && cut.ends_with("..."),
            "{}",
            cut.len()
        );
        assert!(cut.starts_with("éé"));
    }
}
