//! The eviction pass's decisions, with no I/O. A pass over the node's pods asks, in order:
//! is the node drained ([`settle`]: empty, and unschedulable long enough); what to send now and
//! when to wake for the rest ([`choose_sends`], over the eviction queue); after the answers,
//! when `--force-after` needs a wake ([`force_wake`]); and what the node's record shows
//! ([`what_shows`]). Also which pods a replace-by time overrides, and what input is read
//! otherwise than its writer may have meant. The pass itself ([`crate::drain::pass_io`]) reads
//! the pods, sends what these say and reports the answers.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Taint};
use rotor_core::duration::later;

use crate::drain::eviction::{EvictionQueue, QueuePolicy, Step};
use crate::drain::node_plan::{Charge, NodePlan};
use crate::drain::pods::{Blocker, DrainOptions, PodRef, PodVerdict, classify};
use crate::drain::rules::PodRule;

/// Whether a node the plan finds empty is drained now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Empty, unschedulable for `--settle` and quiet: drained.
    Drained,
    /// Empty, but not for long enough: look again then.
    WaitUntil(Timestamp),
    /// Pods are left (or a refusal only an operator can clear).
    NotEmpty,
}

/// Whether the node is drained: `empty` (nothing left to evict, wait for or unblock, and no
/// fatal refusal), since `empty_since` (kept by the pass; set or cleared here), no earlier than
/// `settled` (see [`settled_at`]) and quiet for [`quiet`]`(settle_time)` (`--settle`).
pub fn settle(
    empty: bool,
    empty_since: &mut Option<Timestamp>,
    settled: Timestamp,
    settle_time: Duration,
    now: Timestamp,
) -> Settled {
    if !empty {
        *empty_since = None;
        return Settled::NotEmpty;
    }
    let since = *empty_since.get_or_insert(now);
    let ready_at = settled.max(later(since, quiet(settle_time)));
    if now >= ready_at {
        Settled::Drained
    } else {
        Settled::WaitUntil(ready_at)
    }
}

/// One eviction (or forced deletion) to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub pod: PodRef,
    /// The grace period to ask for (`None`: the pod's own).
    pub grace: Option<i64>,
    /// A deletion past `--force-after` (or the replace-by time), not an eviction.
    pub forced: bool,
    /// The budget the eviction is charged to, and what the budget cache says it allows now.
    pub charged: Option<Charge>,
}

/// What a pass sends now, and what it holds back.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sends {
    /// The pods the pass would act on: what the plan evicts now and, when forcing, what the
    /// budgets hold (for [`say_odd_input`]).
    pub targets: Vec<(PodRef, Option<i64>)>,
    /// What goes on the wire, in the plan's order.
    pub attempts: Vec<Attempt>,
    /// Pods whose budget allows no eviction now, newly (worth a log line), with the budget.
    pub newly_waiting: Vec<(PodRef, Option<Charge>)>,
    /// The earliest time a held-back pod is due again.
    pub wake: Option<Timestamp>,
}

/// What to send now: each pod the plan evicts now (and, once `policy` forces them, each that no
/// budget can ever let go, as a deletion) goes through the queue, which skips those evicted or
/// not due, holds those whose budget allows none, and lets the rest go.
pub fn choose_sends(
    plan: &NodePlan,
    queue: &mut EvictionQueue,
    policy: QueuePolicy,
    now: Timestamp,
) -> Sends {
    let mut sends = Sends {
        targets: plan.evict_now.clone(),
        ..Sends::default()
    };
    if policy.forcing_never_allowed(now) {
        for (pod, grace) in &plan.budget_blocked {
            queue.never_allowed(pod);
            sends.targets.push((pod.clone(), *grace));
        }
    }
    for (pod, grace) in &sends.targets {
        let charged = plan.charged.get(&pod.uid);
        let due = match queue.next_step(pod, charged, policy, now) {
            Step::Skip(at) => at,
            Step::WaitForBudget { at, first } => {
                if first {
                    sends.newly_waiting.push((pod.clone(), charged.cloned()));
                }
                Some(at)
            }
            step @ (Step::Evict | Step::Force) => {
                sends.attempts.push(Attempt {
                    pod: pod.clone(),
                    grace: *grace,
                    forced: step == Step::Force,
                    charged: charged.cloned(),
                });
                None
            }
        };
        sends.wake = match (sends.wake, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    sends
}

/// The pods a drain past its deadline names as left on the node: those it still had to move or
/// that hold it, not those it leaves there anyway (DaemonSet and mirror pods, finished ones,
/// those tolerating the drain taint, those a DrainRule skips). They are what an operator must
/// look at.
pub fn left_at_deadline<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    drain_taint: &Taint,
    options: &DrainOptions,
    rule_of: impl Fn(&Pod) -> PodRule,
) -> Vec<String> {
    pods.into_iter()
        .filter(|pod| !matches!(classify(pod, drain_taint, options), PodVerdict::Ignore(_)))
        .filter(|pod| !matches!(rule_of(pod), PodRule::Skip))
        .map(|pod| PodRef::of(pod).to_string())
        .collect()
}

/// How long a drain sleeps before its next pass, due at `wake`: until then, at least 50 ms (a
/// pass is not worth running more often), and no more than that once `wake` has passed (a pass
/// whose requests took long can name a time already gone).
pub fn sleep_until(wake: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(wake.duration_since(now))
        .unwrap_or(Duration::ZERO)
        .max(Duration::from_millis(50))
}

/// When the pass must wake for `--force-after` (at `force_at`): only while it is ahead and a
/// pod is held by its budget, the ones it would delete.
pub fn force_wake(
    force_at: Option<Timestamp>,
    now: Timestamp,
    queue: &EvictionQueue,
    plan: &NodePlan,
) -> Option<Timestamp> {
    force_at.filter(|t| *t > now && (queue.refused() > 0 || !plan.budget_blocked.is_empty()))
}

/// What the node's record shows after a pass, and when to look again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shown {
    /// The blocker to record (the node turns `blocked`); `None`: the node shows `evicting`.
    pub blocker: Option<String>,
    /// Waiting will not clear the first blocker: the webhooks hear of the node as stuck.
    pub needs_someone: bool,
    /// When a blocker held back now would be shown, if nothing changes before.
    pub look_again: Option<Timestamp>,
}

/// What the record shows of a pass's blockers: the plan's first, then the failed rollout
/// restarts', then the queue's refusals. The first needs someone when it is not a budget that
/// will allow in time (an opt-out, a refused pod kind, a budget that never allows, a failed
/// rollout restart, a refusal by the API server); it shows as [`shown_blocker`] says.
pub fn what_shows(
    plan: &NodePlan,
    restart_failures: &[String],
    queue: &EvictionQueue,
    progressed_at: Timestamp,
    now: Timestamp,
    blocked_after: Duration,
) -> Shown {
    let mut blockers: Vec<String> = plan.blockers.iter().map(Blocker::to_string).collect();
    blockers.extend(restart_failures.iter().cloned());
    blockers.extend(queue.blockers().cloned());
    // Nothing is evicted on a rule not known: a rule watch that never fills (no RBAC on
    // drainrules) must show, once the drain has gone `blocked_after` without progress.
    if !plan.undecided.is_empty() {
        blockers.push(format!(
            "{} pod(s) wait for the DrainRules, which the drainer has not read (check its RBAC on drainrules and namespaces, and its log)",
            plan.undecided.len()
        ));
    }
    let needs_someone = match plan.blockers.first() {
        Some(first) => !matches!(first, Blocker::BudgetRefusing { .. }),
        None => !restart_failures.is_empty() || queue.has_operator_problem(),
    };
    let every = every_blocker(&blockers);
    let shown = shown_blocker(
        every.as_ref(),
        needs_someone,
        progressed_at,
        now,
        blocked_after,
    );
    Shown {
        blocker: shown.blocker.cloned(),
        needs_someone,
        look_again: shown.look_again,
    }
}

/// How many distinct blockers the record names before "and N more".
pub const BLOCKERS_SHOWN: usize = 5;

/// Every distinct blocker, in order, as one text (`; ` between them): an operator clearing the
/// first must not find a second only afterwards. The first [`BLOCKERS_SHOWN`], then how many
/// more.
pub fn every_blocker(blockers: &[String]) -> Option<String> {
    let mut distinct: Vec<&String> = Vec::new();
    for b in blockers {
        if !distinct.contains(&b) {
            distinct.push(b);
        }
    }
    let (first, rest) = distinct.split_first()?;
    let mut text = (*first).clone();
    for b in rest.iter().take(BLOCKERS_SHOWN - 1) {
        text.push_str("; ");
        text.push_str(b);
    }
    if distinct.len() > BLOCKERS_SHOWN {
        text.push_str(&format!("; and {} more", distinct.len() - BLOCKERS_SHOWN));
    }
    Some(text)
}

/// When a drain blocked by what only a person can clear (`stuck_since`) is parked: at
/// `park_after` past it; `None` when it is not stuck or parking is off (`None` or zero).
pub fn park_at(stuck_since: Option<Timestamp>, park_after: Option<Duration>) -> Option<Timestamp> {
    Some(later(stuck_since?, park_after.filter(|d| !d.is_zero())?))
}

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
/// allows an eviction (or that several budgets cover), in their turn or not yet, as
/// namespace/name.
pub fn replace_by_held<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    plan: &NodePlan,
) -> Vec<String> {
    let mut held: Vec<String> = pods
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| rotor_core::contract::pod_opt_out(&p.metadata).is_some())
        .map(|p| PodRef::of(p).to_string())
        .collect();
    held.extend(plan.budget_blocked.iter().map(|(pod, _)| pod.to_string()));
    held.extend(plan.budget_blocked_later.iter().map(PodRef::to_string));
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

    #[test]
    fn a_wake_time_already_gone_means_the_next_pass_at_once() {
        let now = at("2026-11-28T10:00:00Z");
        let later_by = |secs: i64| now + jiff::SignedDuration::from_secs(secs);
        assert_eq!(sleep_until(later_by(2), now), Duration::from_secs(2));
        assert_eq!(sleep_until(now, now), Duration::from_millis(50));
        // Eight seconds overdue: not eight more seconds of sleep.
        assert_eq!(sleep_until(later_by(-8), now), Duration::from_millis(50));
    }

    #[test]
    fn past_the_deadline_only_the_pods_the_drain_had_to_move_are_named() {
        use crate::drain::fixtures::{pod, taint};
        use serde_json::json;
        let web = pod("web-1", json!({}));
        let agent = pod(
            "agent-x",
            json!({"metadata": {"namespace": "kube-system", "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                "uid": "ds-uid", "controller": true
            }]}}),
        );
        let done = pod("report-1", json!({"status": {"phase": "Succeeded"}}));
        let skipped = pod("cache-1", json!({}));
        let held = pod(
            "precious",
            json!({"metadata": {"annotations": {"rotor.dev/do-not-disrupt": "true"}}}),
        );
        let rule_of = |p: &Pod| match p.metadata.name.as_deref() {
            Some("cache-1") => PodRule::Skip,
            _ => PodRule::Drain { order: 0 },
        };
        let left = left_at_deadline(
            [&web, &agent, &done, &skipped, &held],
            &taint(),
            &DrainOptions::default(),
            rule_of,
        );
        assert_eq!(left, ["shop/web-1", "shop/precious"]);
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn every_distinct_blocker_shows_the_first_few_then_how_many_more() {
        let blockers: Vec<String> = ["a", "b", "a", "c"].iter().map(|b| b.to_string()).collect();
        assert_eq!(every_blocker(&blockers).as_deref(), Some("a; b; c"));
        let many: Vec<String> = (0..8)
            .map(|i| format!("pod shop/p-{i} is opted out"))
            .collect();
        let text = every_blocker(&many).unwrap();
        assert!(
            text.starts_with("pod shop/p-0 is opted out; pod shop/p-1"),
            "{text}"
        );
        assert!(
            text.ends_with("pod shop/p-4 is opted out; and 3 more"),
            "{text}"
        );
        assert_eq!(every_blocker(&[]), None);
    }

    #[test]
    fn a_drain_stuck_for_park_after_is_parked_and_never_without_it() {
        let since = at("2026-11-28T10:00:00Z");
        let after = Some(Duration::from_secs(900));
        assert_eq!(
            park_at(Some(since), after),
            Some(at("2026-11-28T10:15:00Z"))
        );
        assert_eq!(park_at(None, after), None);
        assert_eq!(park_at(Some(since), None), None);
        // `--park-blocked-after 0s`, or a policy's "0s": never.
        assert_eq!(park_at(Some(since), Some(Duration::ZERO)), None);
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

    fn pod(name: &str) -> PodRef {
        PodRef {
            namespace: "shop".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    fn budget(name: &str) -> crate::drain::budgets::BudgetKey {
        let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "shop"}
            }))
            .unwrap();
        crate::drain::budgets::BudgetKey::of(&pdb)
    }

    fn charge(name: &str, allowed_now: i32) -> Charge {
        Charge {
            budget: budget(name),
            allowed_now,
        }
    }

    fn policy(forcing: bool) -> QueuePolicy {
        QueuePolicy {
            budget_recheck: Duration::from_secs(10),
            force_from: forcing.then_some(Timestamp::MIN),
            force_never_allowed_from: None,
        }
    }

    #[test]
    fn an_empty_node_is_drained_once_settled_and_quiet() {
        let settle_for = Duration::from_secs(4); // quiet: 1 s
        let t0 = at("2026-11-28T10:00:00Z");
        // (empty, empty since, settled at, now) -> outcome, empty since after
        let cases = [
            (false, Some(t0), t0, t0, Settled::NotEmpty, None),
            (
                true,
                None,
                t0,
                t0,
                Settled::WaitUntil(at("2026-11-28T10:00:01Z")),
                Some(t0),
            ),
            (
                true,
                Some(t0),
                t0,
                at("2026-11-28T10:00:01Z"),
                Settled::Drained,
                Some(t0),
            ),
            // Tainted just now: the settle time, not the quiet time, decides.
            (
                true,
                Some(t0),
                at("2026-11-28T10:00:04Z"),
                at("2026-11-28T10:00:02Z"),
                Settled::WaitUntil(at("2026-11-28T10:00:04Z")),
                Some(t0),
            ),
        ];
        for (empty, since, settled, now, want, since_after) in cases {
            let mut empty_since = since;
            assert_eq!(
                settle(empty, &mut empty_since, settled, settle_for, now),
                want,
                "empty={empty} since={since:?} now={now}"
            );
            assert_eq!(empty_since, since_after);
        }
    }

    #[test]
    fn the_pass_sends_what_the_queue_lets_go_and_wakes_for_the_rest() {
        let now = at("2026-11-28T10:00:00Z");
        let plan = NodePlan {
            evict_now: vec![
                (pod("web-1"), None),
                (pod("db-0"), Some(30)),
                (pod("job-1"), None),
            ],
            charged: [
                ("uid-web-1".to_string(), charge("web", 1)),
                ("uid-db-0".to_string(), charge("db", 0)),
            ]
            .into(),
            ..NodePlan::default()
        };
        let mut queue = EvictionQueue::default();
        let sends = choose_sends(&plan, &mut queue, policy(false), now);
        // web-1's budget allows one, job-1 has none: both go, in the plan's order. db-0's
        // budget allows none: it waits (news, once) and the pass wakes at the recheck.
        assert_eq!(
            sends.attempts,
            vec![
                Attempt {
                    pod: pod("web-1"),
                    grace: None,
                    forced: false,
                    charged: Some(charge("web", 1)),
                },
                Attempt {
                    pod: pod("job-1"),
                    grace: None,
                    forced: false,
                    charged: None,
                },
            ]
        );
        assert_eq!(
            sends.newly_waiting,
            vec![(pod("db-0"), Some(charge("db", 0)))]
        );
        assert_eq!(sends.wake, Some(at("2026-11-28T10:00:10Z")));
        assert_eq!(sends.targets.len(), 3);
        // The next pass, a second later: web-1 and job-1 were evicted, db-0 is not due yet
        // and no longer news.
        for p in ["web-1", "job-1"] {
            queue.record(
                &pod(p),
                &crate::drain::answers::EvictionOutcome::Evicted,
                policy(false),
                now,
            );
        }
        let later_on = at("2026-11-28T10:00:01Z");
        let sends = choose_sends(&plan, &mut queue, policy(false), later_on);
        assert!(sends.attempts.is_empty(), "{sends:?}");
        assert!(sends.newly_waiting.is_empty());
        assert_eq!(sends.wake, Some(at("2026-11-28T10:00:10Z")));
    }

    #[test]
    fn forcing_deletes_what_the_budgets_hold() {
        let now = at("2026-11-28T11:00:00Z");
        let plan = NodePlan {
            budget_blocked: vec![(pod("pinned-0"), Some(5))],
            blockers: vec![Blocker::BudgetNeverAllows {
                budget: budget("pinned"),
                reason: "maxUnavailable is 0".into(),
            }],
            ..NodePlan::default()
        };
        let mut queue = EvictionQueue::default();
        // Not forcing: nothing to send, nothing to wake for.
        let sends = choose_sends(&plan, &mut queue, policy(false), now);
        assert_eq!(sends, Sends::default());
        // Past --force-after: the held pod is deleted, with its grace period.
        let sends = choose_sends(&plan, &mut queue, policy(true), now);
        assert_eq!(
            sends.attempts,
            vec![Attempt {
                pod: pod("pinned-0"),
                grace: Some(5),
                forced: true,
                charged: None,
            }]
        );
    }

    #[test]
    fn force_after_wakes_the_pass_only_while_ahead_and_something_is_held() {
        let now = at("2026-11-28T10:00:00Z");
        let force_at = Some(at("2026-11-28T10:30:00Z"));
        let held = NodePlan {
            budget_blocked: vec![(pod("pinned-0"), None)],
            ..NodePlan::default()
        };
        let queue = EvictionQueue::default();
        assert_eq!(force_wake(force_at, now, &queue, &held), force_at);
        assert_eq!(
            force_wake(force_at, now, &queue, &NodePlan::default()),
            None
        );
        assert_eq!(force_wake(None, now, &queue, &held), None);
        assert_eq!(
            force_wake(force_at, at("2026-11-28T10:30:00Z"), &queue, &held),
            None,
            "already due: the pass forces now"
        );
    }

    #[test]
    fn the_record_shows_the_first_blocker_and_whether_it_needs_someone() {
        let now = at("2026-11-28T10:00:05Z");
        let progressed = at("2026-11-28T10:00:00Z");
        let after = Duration::from_secs(30);
        let opt_out = Blocker::DoNotDisrupt {
            pod: "shop/db-0".into(),
            annotation: "rotor.dev/do-not-disrupt",
        };
        let refusing = Blocker::BudgetRefusing {
            budget: budget("web"),
            pod: "shop/web-1".into(),
            message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        };
        let queue = EvictionQueue::default();
        let plan_with = |blockers: Vec<Blocker>| NodePlan {
            blockers,
            ..NodePlan::default()
        };
        // An opt-out needs someone and shows at once.
        let shown = what_shows(
            &plan_with(vec![opt_out.clone()]),
            &[],
            &queue,
            progressed,
            now,
            after,
        );
        assert_eq!(shown.blocker, Some(opt_out.to_string()));
        assert!(shown.needs_someone);
        // A budget that refuses only needs time: held back until --blocked-after.
        let shown = what_shows(
            &plan_with(vec![refusing.clone()]),
            &[],
            &queue,
            progressed,
            now,
            after,
        );
        assert_eq!(
            shown,
            Shown {
                blocker: None,
                needs_someone: false,
                look_again: Some(at("2026-11-28T10:00:30Z")),
            }
        );
        // A failed rollout restart comes after the plan's blockers and needs someone.
        let failure = vec!["shop/api-0: could not restart Deployment api: forbidden".to_string()];
        let shown = what_shows(
            &NodePlan::default(),
            &failure,
            &queue,
            progressed,
            now,
            after,
        );
        assert_eq!(shown.blocker, Some(failure[0].clone()));
        assert!(shown.needs_someone);
        // Pods waiting for DrainRules not read yet: shown once --blocked-after has gone by
        // without progress, not at once (the rule watch usually fills within a second).
        let undecided = NodePlan {
            undecided: vec![PodRef {
                namespace: "shop".into(),
                name: "web-1".into(),
                uid: "u1".into(),
            }],
            ..NodePlan::default()
        };
        let shown = what_shows(&undecided, &[], &queue, progressed, now, after);
        assert_eq!(shown.blocker, None);
        assert_eq!(shown.look_again, Some(at("2026-11-28T10:00:30Z")));
        let later_on = at("2026-11-28T10:00:31Z");
        let shown = what_shows(&undecided, &[], &queue, progressed, later_on, after);
        assert_eq!(
            shown.blocker.as_deref(),
            Some(
                "1 pod(s) wait for the DrainRules, which the drainer has not read (check its RBAC on drainrules and namespaces, and its log)"
            )
        );
        // Nothing blocks: the node shows evicting.
        let shown = what_shows(&NodePlan::default(), &[], &queue, progressed, now, after);
        assert_eq!(
            shown,
            Shown {
                blocker: None,
                needs_someone: false,
                look_again: None,
            }
        );
    }
}
