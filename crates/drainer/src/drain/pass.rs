//! The eviction pass's decisions, with no I/O: when an empty node counts as drained (the
//! settle and quiet times), which pods a replace-by time overrides, what the node's record
//! shows of a pass's blockers, and what input is read otherwise than its writer may have meant.
//! The pass itself ([`crate::drain::pass_io`]) only carries them out.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use rotor_core::duration::later;

use crate::drain::pods::{NodePlan, PodRef};

/// The earliest time an empty node may be declared drained: `--settle` after the node became
/// unschedulable, given how long ago that was (`protected_for`: the age of a drain taint that
/// keeps pods off; `None` when only the cordon written at `now` does).
///
/// The settle time is there for a pod the scheduler bound from a stale cache just before the
/// node became unschedulable, which the drain's pod watch may not have shown yet. Such a
/// binding can only land shortly after that moment, so what matters is how long the node has
/// been unschedulable, not how long it has been empty: a node tainted long before its drain
/// (a selector run, then a queue of nodes waiting their turn) is not kept waiting, and one
/// tainted just now, or with `PreferNoSchedule` (which keeps no pod off), still waits the full
/// settle time. A pod created with `spec.nodeName` set skips the scheduler and every taint; for
/// one that its controller puts back at once, the node must also stay empty for [`quiet`].
pub fn settled_at(protected_for: Option<Duration>, now: Timestamp, settle: Duration) -> Timestamp {
    later(
        now,
        settle.saturating_sub(protected_for.unwrap_or_default()),
    )
}

/// How long an empty node must stay empty before it is declared drained: a quarter of
/// `--settle`. Long enough to see a pod that a controller binding pods itself (`spec.nodeName`)
/// puts back as soon as the last one is gone, which takes a watch event and a create; the
/// scheduler's race is covered by [`settled_at`].
pub fn quiet(settle: Duration) -> Duration {
    settle / 4
}

/// Logs, once per drain, the input about to be evicted on that the drain reads otherwise than
/// its writer may have meant: an opt-out annotation that is not exactly `"true"` (the pod is
/// evicted).
pub fn say_odd_input(
    node: &str,
    targets: &[(PodRef, Option<i64>)],
    pods: &HashMap<String, Pod>,
    said: &mut HashSet<String>,
) {
    for (pod_ref, _) in targets {
        let Some(pod) = pods.get(&pod_ref.uid) else {
            continue;
        };
        for (annotation, value) in crate::drain::pods::opt_outs_not_honoured(pod) {
            if said.insert(format!("opt-out {} {annotation}", pod_ref.uid)) {
                tracing::warn!(node, pod = %pod_ref, annotation, value = %crate::record::node::shorten(value), "the pod's {annotation} is not \"true\", so it does not opt the pod out and the pod is evicted; set it to \"true\" to keep the pod, or remove it");
            }
        }
    }
}

/// The pods a replace-by time overrides: those that opted out, and those whose budget never
/// allows an eviction (or that several budgets cover), as namespace/name.
pub fn replace_by_held(pods: &[Pod], plan: &NodePlan) -> Vec<String> {
    let mut held: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| rotor_core::contract::pod_opt_out(&p.metadata).is_some())
        .map(|p| PodRef::of(p).to_string())
        .collect();
    held.extend(plan.budget_blocked.iter().map(|(pod, _)| pod.to_string()));
    held.sort();
    held.dedup();
    held
}

/// What the node's record shows of a pass's first blocker, and when to look again.
#[derive(Debug, PartialEq, Eq)]
pub struct ShownBlocker<'a> {
    /// The blocker to record (the node turns `blocked`); `None`: the node shows `evicting`.
    pub blocker: Option<&'a String>,
    /// When a blocker held back now would be shown, if nothing changes before.
    pub look_again: Option<Timestamp>,
}

/// A blocker that waiting will not clear (`needs_someone`) shows at once. One that only needs
/// time (a budget whose pods evicted before are not Ready again yet) is the budget's ordinary
/// pace: it shows only once the drain has had no eviction accepted for `blocked_after` (since
/// `progressed_at`). Otherwise a drain paced by its budgets would flip between `blocked` and
/// `evicting` at every turn, each flip a node write and a Warning Event about nothing wrong.
pub fn shown_blocker(
    blocker: Option<&String>,
    needs_someone: bool,
    progressed_at: Timestamp,
    now: Timestamp,
    blocked_after: Duration,
) -> ShownBlocker<'_> {
    let due = later(progressed_at, blocked_after);
    match blocker {
        Some(b) if needs_someone || now >= due => ShownBlocker {
            blocker: Some(b),
            look_again: None,
        },
        Some(_) => ShownBlocker {
            blocker: None,
            look_again: Some(due),
        },
        None => ShownBlocker {
            blocker: None,
            look_again: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_budget_that_only_needs_time_shows_once_nothing_was_evicted_for_blocked_after() {
        let budget =
            "shop/web-1: The disruption budget web needs 3 healthy pods and has 2 currently"
                .to_string();
        let opt_out =
            "pod shop/db-0 has rotor.dev/do-not-disrupt=true and is never evicted".to_string();
        let evicted = at("2026-11-27T10:00:00Z");
        let after = Duration::from_secs(30);
        // The budget's ordinary pace: 5 s after the last accepted eviction the node still shows
        // `evicting`, and the pass looks again when the wait would be worth showing.
        let shown = shown_blocker(
            Some(&budget),
            false,
            evicted,
            at("2026-11-27T10:00:05Z"),
            after,
        );
        assert_eq!(
            shown,
            ShownBlocker {
                blocker: None,
                look_again: Some(at("2026-11-27T10:00:30Z"))
            }
        );
        // 30 s with nothing evicted: the budget is named.
        let shown = shown_blocker(
            Some(&budget),
            false,
            evicted,
            at("2026-11-27T10:00:30Z"),
            after,
        );
        assert_eq!(shown.blocker, Some(&budget));
        assert_eq!(shown.look_again, None);
        // What waiting will not clear is named at once.
        let shown = shown_blocker(
            Some(&opt_out),
            true,
            evicted,
            at("2026-11-27T10:00:01Z"),
            after,
        );
        assert_eq!(shown.blocker, Some(&opt_out));
        // With 0, every wait at once; with no blocker, nothing to show or to look at.
        let shown = shown_blocker(Some(&budget), false, evicted, evicted, Duration::ZERO);
        assert_eq!(shown.blocker, Some(&budget));
        let shown = shown_blocker(None, false, evicted, at("2026-11-27T11:00:00Z"), after);
        assert_eq!(
            shown,
            ShownBlocker {
                blocker: None,
                look_again: None
            }
        );
    }

    #[test]
    fn settle_counts_from_when_the_node_became_unschedulable() {
        let settle = Duration::from_secs(3);
        let now = at("2026-11-22T10:00:00Z");
        // Tainted an hour ago: an empty node is drained at once.
        assert_eq!(
            settled_at(Some(Duration::from_secs(3_600)), now, settle),
            now
        );
        // Tainted a second ago: two more seconds.
        assert_eq!(
            settled_at(Some(Duration::from_secs(1)), now, settle),
            at("2026-11-22T10:00:02Z")
        );
        // Only the cordon, written now: the full settle time.
        assert_eq!(settled_at(None, now, settle), at("2026-11-22T10:00:03Z"));
        assert_eq!(quiet(settle), Duration::from_millis(750));
    }
}
