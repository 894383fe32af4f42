//! What to evict next on a draining node, and when to try again: the eviction engine's policy,
//! with no I/O and no clock of its own (the time is an argument). The drain task asks the queue
//! about each pod the plan names ([`EvictionQueue::next_step`]), makes the call it is told to
//! (the wire is [`crate::drain::eviction_io`]), and hands back the answer ([`EvictionQueue::record`]). The
//! rules, each applied where it is written below:
//! - a pod whose eviction was accepted is not sent again; its deletion is awaited on the watch;
//! - a pod whose budget the budget cache says allows nothing now waits for the budget to move
//!   (or for `--budget-recheck`) instead of spending a request on a certain 429;
//! - a budget's 429 waits the same way; a 429 with Retry-After (a budget not processed yet, or
//!   API Priority and Fairness shedding the request) waits as long as it says, whatever budgets
//!   do meanwhile;
//! - several budgets over one pod (500) and an eviction refused by RBAC or admission (401, 403,
//!   or the 4xx an admission policy or webhook chose) block the node, naming who refused, until
//!   an operator acts, and are retried in case they did;
//! - other failures back off exponentially (2 s doubling to 30 s), per pod, and show on the node
//!   (after `--blocked-after`, as any wait) until the pod's eviction goes through: a webhook that
//!   times out or answers 500 is an outage the operator must be able to see;
//! - past `--force-after`, pods that their budgets hold are deleted instead of evicted, and past
//!   a node's replace-by time (`--enforce-replace-by`) those a budget can never let go; never a
//!   pod whose budget allows its eviction now: that pod is evicted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use jiff::Timestamp;
use rotor_core::duration::later;

use crate::drain::answers::EvictionOutcome;
use crate::drain::node_plan::Charge;
use crate::drain::pods::PodRef;

/// What to do about one pod now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing now: already evicted, or its next try is later (`Some(at)`: wake then).
    Skip(Option<Timestamp>),
    /// Its budget allows no eviction now: wait until `at` (or a budget change). `first` is true
    /// when this is news (worth a log line).
    WaitForBudget { at: Timestamp, first: bool },
    /// Post an eviction.
    Evict,
    /// Delete it: past `--force-after` its budget refused it and allows nothing now, or past the
    /// replace-by time no budget can ever let it go.
    Force,
}

/// What the queue concludes from an answer, for the task to report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// When to wake for this pod's next try, if it has one the task should wait for.
    pub wake: Option<Timestamp>,
    /// The pod had waited on its budget before this eviction went through (for the pace).
    pub waited: bool,
    /// This refusal is news (worth a log line).
    pub first_refusal: bool,
    /// The back-off before the next try, after a failure.
    pub backoff: Option<Duration>,
}

/// The per-pod history of one drain's evictions.
#[derive(Debug, Default)]
pub struct EvictionQueue {
    /// Pods whose eviction was accepted (their deletion is awaited through the watch).
    evicted: HashSet<String>,
    /// Earliest next attempt per pod uid.
    next_try: HashMap<String, Timestamp>,
    /// Budget refusals per pod uid (the blocker text).
    refused: BTreeMap<String, String>,
    /// Failures per pod uid, for the back-off.
    failures: HashMap<String, u32>,
    /// Blockers that only an operator can clear (several budgets, a denied eviction).
    fatal: BTreeMap<String, String>,
    /// Pods no budget can ever let go (one that never allows, or several), as the plan said.
    never_allowed: HashSet<String>,
    /// Pods whose last eviction failed (5xx, a timeout), with the failure: retried with back-off.
    failing: BTreeMap<String, String>,
}

/// The knobs the queue decides with.
#[derive(Clone, Copy, Debug)]
pub struct QueuePolicy {
    /// `--budget-recheck`: how long a budget wait lasts when no budget change ends it sooner.
    pub budget_recheck: Duration,
    /// From when pods that their budgets hold are deleted (`--force-after`); `None`: never.
    pub force_from: Option<Timestamp>,
    /// From when pods that no budget can ever let go are deleted besides `--force-after`
    /// (which deletes them too): a replace-by time under `--enforce-replace-by`; `None`: never.
    pub force_never_allowed_from: Option<Timestamp>,
}

impl QueuePolicy {
    /// Whether pods that their budgets hold are deleted at `now` (`--force-after`).
    pub fn forcing(&self, now: Timestamp) -> bool {
        self.force_from.is_some_and(|t| now >= t)
    }

    /// When a wait on a budget that allows nothing, begun at `now`, ends: at the recheck, or
    /// when forcing begins if sooner, so the pod is deleted then, not a recheck later.
    fn budget_wait_until(&self, now: Timestamp) -> Timestamp {
        let recheck = later(now, self.budget_recheck);
        self.force_from
            .filter(|t| *t > now)
            .map_or(recheck, |t| t.min(recheck))
    }

    /// Whether pods that no budget can ever let go are deleted at `now`.
    pub fn forcing_never_allowed(&self, now: Timestamp) -> bool {
        self.forcing(now) || self.force_never_allowed_from.is_some_and(|t| now >= t)
    }
}

impl EvictionQueue {
    /// What to do about `pod` now. `charged` is the budget the eviction would be charged to, and
    /// how many disruptions the budget cache says it allows now.
    pub fn next_step(
        &mut self,
        pod: &PodRef,
        charged: Option<&Charge>,
        policy: QueuePolicy,
        now: Timestamp,
    ) -> Step {
        if self.evicted.contains(&pod.uid) {
            return Step::Skip(None);
        }
        if let Some(at) = self.next_try.get(&pod.uid)
            && *at > now
        {
            return Step::Skip(Some(*at));
        }
        // A deletion goes past the budget: never for a pod whose budget allows its eviction now
        // (the eviction is possible, so it is what goes). A refusal on record forces only while
        // a budget is still charged for the pod: one deleted since, or a pod its budget now lets
        // go unhealthy, is evicted.
        let allowed_now = charged.is_some_and(|c| c.allowed_now > 0);
        let still_refused = charged.is_some() && self.refused.contains_key(&pod.uid);
        let forced = !allowed_now
            && ((policy.forcing(now) && still_refused)
                || (policy.forcing_never_allowed(now) && self.never_allowed.contains(&pod.uid)));
        if forced {
            return Step::Force;
        }
        if let Some(Charge {
            budget,
            allowed_now: 0,
        }) = charged
        {
            // A refusal already on record (the API's own words) stays as it is.
            let first = !self.refused.contains_key(&pod.uid);
            self.refused.entry(pod.uid.clone()).or_insert_with(|| {
                format!("{pod}: disruption budget {budget} allows no eviction now")
            });
            let at = policy.budget_wait_until(now);
            self.next_try.insert(pod.uid.clone(), at);
            return Step::WaitForBudget { at, first };
        }
        Step::Evict
    }

    /// Once such pods are forced, a pod the plan says no budget can ever let go: recorded so
    /// that [`EvictionQueue::next_step`] forces it.
    pub fn never_allowed(&mut self, pod: &PodRef) {
        self.never_allowed.insert(pod.uid.clone());
        self.refused
            .entry(pod.uid.clone())
            .or_insert_with(|| format!("{pod}: held by its budget"));
    }

    /// Takes in the answer to the eviction (or deletion) of `pod`.
    pub fn record(
        &mut self,
        pod: &PodRef,
        outcome: &EvictionOutcome,
        policy: QueuePolicy,
        now: Timestamp,
    ) -> Recorded {
        let uid = &pod.uid;
        let mut recorded = Recorded {
            wake: None,
            waited: false,
            first_refusal: false,
            backoff: None,
        };
        match outcome {
            EvictionOutcome::Evicted | EvictionOutcome::Gone => {
                recorded.waited = self.refused.contains_key(uid);
                self.evicted.insert(uid.clone());
                self.never_allowed.remove(uid);
                self.refused.remove(uid);
                self.fatal.remove(uid);
                self.failing.remove(uid);
            }
            EvictionOutcome::BudgetRefused { message } => {
                recorded.first_refusal = !self.refused.contains_key(uid);
                self.refused
                    .insert(uid.clone(), format!("{pod}: {message}"));
                // The budget answered: the request passed authorization and admission, so a
                // refusal by them, or a failure, recorded before is over (fixed by someone).
                self.fatal.remove(uid);
                self.failing.remove(uid);
                self.failures.remove(uid);
                recorded.wake = Some(self.retry_at(uid, policy.budget_wait_until(now)));
            }
            EvictionOutcome::RetryLater { after, .. } => {
                // The server's wait stands: no longer a budget's refusal, so a budget that
                // moves does not send it again early (see `budget_moved`).
                self.refused.remove(uid);
                recorded.wake = Some(self.retry_at(uid, later(now, *after)));
            }
            EvictionOutcome::MultipleBudgets { message } => {
                self.fatal.insert(
                    uid.clone(),
                    format!("{pod}: {message} Remove the overlap between the budgets."),
                );
                // Retried at the recheck pace, but nothing to wake for sooner.
                self.retry_at(uid, later(now, policy.budget_recheck));
            }
            EvictionOutcome::Denied { .. } | EvictionOutcome::Failed { .. } => {
                if let EvictionOutcome::Denied { by, message } = outcome {
                    // Only people can lift a refusal: say on the node at once who refused and
                    // what to change, instead of retrying silently until the deadline. Still
                    // retried, in case they did.
                    self.fatal.insert(
                        uid.clone(),
                        format!(
                            "{pod}: the API server refused the eviction ({message}); {}",
                            by.remedy()
                        ),
                    );
                }
                let failures = self.failures.entry(uid.clone()).or_insert(0);
                *failures += 1;
                let backoff = failure_backoff(*failures);
                if let EvictionOutcome::Failed { message, .. } = outcome {
                    // Worded the same on every failure, so that the record is written once, not
                    // at each retry.
                    self.failing.insert(
                        uid.clone(),
                        format!("{pod}: the eviction keeps failing ({message}); retried with back-off up to every 30s"),
                    );
                }
                recorded.backoff = Some(backoff);
                recorded.wake = Some(self.retry_at(uid, later(now, backoff)));
            }
        }
        recorded
    }

    /// A budget moved: every refused pod is reconsidered at once against the budgets as they
    /// are now (and sent only if its budget allows one, see [`EvictionQueue::next_step`]).
    pub fn budget_moved(&mut self) {
        for uid in self.refused.keys() {
            self.next_try.remove(uid);
        }
    }

    /// The pod is gone from the node: nothing more to wait for.
    pub fn pod_gone(&mut self, uid: &str) {
        self.next_try.remove(uid);
        self.refused.remove(uid);
        self.fatal.remove(uid);
        self.failing.remove(uid);
        self.never_allowed.remove(uid);
    }

    /// Whether the eviction of `uid` was accepted.
    pub fn evicted(&self, uid: &str) -> bool {
        self.evicted.contains(uid)
    }

    /// Pods waiting on a budget's refusal now.
    pub fn refused(&self) -> usize {
        self.refused.len()
    }

    /// Whether something only an operator can clear holds the node.
    pub fn has_fatal(&self) -> bool {
        !self.fatal.is_empty()
    }

    /// What holds the node, beyond the plan's own blockers: the operator's problems first,
    /// then failing evictions, then the budgets' refusals.
    pub fn blockers(&self) -> impl Iterator<Item = &String> {
        self.fatal
            .values()
            .chain(self.failing.values())
            .chain(self.refused.values())
    }

    /// Whether a refusal only an operator can clear (not a budget's) holds a pod.
    pub fn has_operator_problem(&self) -> bool {
        !self.fatal.is_empty()
    }

    fn retry_at(&mut self, uid: &str, at: Timestamp) -> Timestamp {
        self.next_try.insert(uid.to_string(), at);
        at
    }
}

/// The back-off after a pod's `failures`-th failed eviction: 2 s, doubling, at most 30 s.
pub fn failure_backoff(failures: u32) -> Duration {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(2))
        .with_factor(2.0)
        .with_max_delay(Duration::from_secs(30))
        .without_max_times()
        .build()
        .nth(failures.saturating_sub(1) as usize)
        .unwrap_or(Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn charge(budget: &str, allowed_now: i32) -> Charge {
        Charge {
            budget: budget.into(),
            allowed_now,
        }
    }

    fn pod(name: &str) -> PodRef {
        PodRef {
            namespace: "shop".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    const POLICY: QueuePolicy = QueuePolicy {
        budget_recheck: Duration::from_secs(60),
        force_from: None,
        force_never_allowed_from: None,
    };

    #[test]
    fn each_answer_of_the_eviction_api_sets_the_next_try() {
        let t0 = at("2025-03-01T12:00:00Z");
        let secs = |s: i64| t0 + jiff::SignedDuration::from_secs(s);
        // (the answer, the next try, whether the node is held for an operator)
        let cases: Vec<(EvictionOutcome, Option<Timestamp>, bool)> = vec![
            (EvictionOutcome::Evicted, None, false),
            (EvictionOutcome::Gone, None, false),
            (
                EvictionOutcome::BudgetRefused {
                    message: "Cannot evict pod as it would violate the pod's disruption budget."
                        .into(),
                },
                Some(secs(60)),
                false,
            ),
            (
                EvictionOutcome::RetryLater {
                    after: Duration::from_secs(10),
                    message: "too many requests".into(),
                },
                Some(secs(10)),
                false,
            ),
            (
                EvictionOutcome::MultipleBudgets {
                    message: "This pod has more than one PodDisruptionBudget.".into(),
                },
                None,
                true,
            ),
            (
                EvictionOutcome::Denied {
                    by: crate::drain::answers::Denial::Policy("no-evictions".into()),
                    message: "denied request".into(),
                },
                Some(secs(2)),
                true,
            ),
            (
                EvictionOutcome::Failed {
                    code: Some(400),
                    message: "bad request".into(),
                },
                Some(secs(2)),
                false,
            ),
            (
                EvictionOutcome::Failed {
                    code: Some(500),
                    message: "etcd timeout".into(),
                },
                Some(secs(2)),
                false,
            ),
        ];
        for (outcome, wake, fatal) in cases {
            let mut queue = EvictionQueue::default();
            let web = pod("web-1");
            assert_eq!(queue.next_step(&web, None, POLICY, t0), Step::Evict);
            let recorded = queue.record(&web, &outcome, POLICY, t0);
            assert_eq!(recorded.wake, wake, "{outcome:?}");
            assert_eq!(queue.has_fatal(), fatal, "{outcome:?}");
            let done = matches!(outcome, EvictionOutcome::Evicted | EvictionOutcome::Gone);
            assert_eq!(queue.evicted(&web.uid), done, "{outcome:?}");
            // Never sent again once accepted; otherwise not before its next try.
            let expected = if done {
                Step::Skip(None)
            } else if matches!(outcome, EvictionOutcome::MultipleBudgets { .. }) {
                Step::Skip(Some(secs(60)))
            } else {
                Step::Skip(wake)
            };
            assert_eq!(
                queue.next_step(&web, None, POLICY, t0),
                expected,
                "{outcome:?}"
            );
        }
    }

    #[test]
    fn a_budget_refusal_after_a_denial_clears_it_and_waits_only_until_forcing() {
        let t0 = at("2025-03-01T12:00:00Z");
        let secs = |s: i64| t0 + jiff::SignedDuration::from_secs(s);
        let forcing = QueuePolicy {
            force_from: Some(secs(10)),
            ..POLICY
        };
        let refused = EvictionOutcome::BudgetRefused {
            message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        };
        let mut queue = EvictionQueue::default();
        let web = pod("web-1");
        // A webhook refused; someone fixed it; the budget now answers (429). The budget
        // answering proves the webhook let it through: no operator problem is left.
        let denied = EvictionOutcome::Denied {
            by: crate::drain::answers::Denial::Webhook("freeze.example.com".into()),
            message: "denied".into(),
        };
        queue.record(&web, &denied, forcing, t0);
        assert!(queue.has_operator_problem());
        let recorded = queue.record(&web, &refused, forcing, t0);
        assert!(!queue.has_operator_problem(), "{queue:?}");
        // The budget wait ends when forcing begins (10 s), not at the recheck (60 s).
        assert_eq!(recorded.wake, Some(secs(10)));
        // Forcing begun: the pod its budget still holds is deleted...
        let held = charge("shop/web", 0);
        assert_eq!(
            queue.next_step(&web, Some(&held), forcing, secs(10)),
            Step::Force
        );
        // ...but once no budget is charged for it (the budget was deleted), it is evicted:
        // the eviction is possible, so no deletion.
        let mut queue = EvictionQueue::default();
        queue.record(&web, &refused, forcing, t0);
        queue.budget_moved();
        assert_eq!(queue.next_step(&web, None, forcing, secs(20)), Step::Evict);
    }

    #[test]
    fn a_failing_eviction_shows_as_a_blocker_until_it_goes_through() {
        let t0 = at("2025-03-01T12:00:00Z");
        let mut queue = EvictionQueue::default();
        let web = pod("web-1");
        // What the API server answers when a webhook with failurePolicy Fail times out.
        let timed_out = EvictionOutcome::Failed {
            code: Some(500),
            message: "Internal error occurred: failed calling webhook \"evictions.example.com\": context deadline exceeded (InternalError)".into(),
        };
        let first = queue.record(&web, &timed_out, POLICY, t0);
        let second = queue.record(&web, &timed_out, POLICY, t0);
        assert_eq!(
            (first.backoff, second.backoff),
            (Some(Duration::from_secs(2)), Some(Duration::from_secs(4)))
        );
        let shown: Vec<_> = queue.blockers().cloned().collect();
        assert_eq!(shown.len(), 1, "{shown:?}");
        assert!(
            shown[0].starts_with("shop/web-1: the eviction keeps failing (Internal error occurred: failed calling webhook \"evictions.example.com\""),
            "{shown:?}"
        );
        // Transient: not a problem only an operator can clear.
        assert!(!queue.has_operator_problem());
        queue.record(&web, &EvictionOutcome::Evicted, POLICY, t0);
        assert_eq!(queue.blockers().count(), 0);
    }

    #[test]
    fn a_shed_eviction_waits_out_retry_after_even_when_a_budget_moves() {
        let t0 = at("2025-03-01T12:00:00Z");
        let mut queue = EvictionQueue::default();
        let web = pod("web-1");
        // First refused by its budget, then shed by the API server for 32 s.
        queue.record(
            &web,
            &EvictionOutcome::BudgetRefused {
                message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
            },
            POLICY,
            t0,
        );
        let shed = queue.record(
            &web,
            &EvictionOutcome::RetryLater {
                after: Duration::from_secs(32),
                message: "Too many requests, please try again later.".into(),
            },
            POLICY,
            t0,
        );
        let until = t0 + jiff::SignedDuration::from_secs(32);
        assert_eq!(shed.wake, Some(until));
        queue.budget_moved();
        assert_eq!(
            queue.next_step(&web, None, POLICY, t0),
            Step::Skip(Some(until))
        );
    }

    #[test]
    fn a_budget_that_allows_nothing_is_waited_for_and_a_change_ends_the_wait() {
        let t0 = at("2025-03-01T12:00:00Z");
        let mut queue = EvictionQueue::default();
        let web = pod("web-1");
        let wait = queue.next_step(&web, Some(&charge("shop/web", 0)), POLICY, t0);
        assert_eq!(
            wait,
            Step::WaitForBudget {
                at: t0 + jiff::SignedDuration::from_secs(60),
                first: true
            }
        );
        assert_eq!(queue.refused(), 1);
        assert_eq!(
            queue.blockers().collect::<Vec<_>>(),
            ["shop/web-1: disruption budget shop/web allows no eviction now"]
        );
        // The budget moved and now allows one: sent at once.
        queue.budget_moved();
        assert_eq!(
            queue.next_step(&web, Some(&charge("shop/web", 1)), POLICY, t0),
            Step::Evict
        );
        let recorded = queue.record(&web, &EvictionOutcome::Evicted, POLICY, t0);
        assert!(recorded.waited, "it had waited on its budget");
        assert_eq!(queue.refused(), 0);
    }

    #[test]
    fn past_force_after_a_refused_pod_is_deleted() {
        let t0 = at("2025-03-01T12:00:00Z");
        let forcing = QueuePolicy {
            force_from: Some(t0),
            ..POLICY
        };
        let mut queue = EvictionQueue::default();
        let db = pod("db-0");
        // Not refused yet: evicted as usual even when forcing.
        assert_eq!(queue.next_step(&db, None, forcing, t0), Step::Evict);
        queue.never_allowed(&db);
        assert_eq!(queue.next_step(&db, None, forcing, t0), Step::Force);
        queue.pod_gone(&db.uid);
        assert_eq!(queue.refused(), 0);
        // A pod its budget refused once, and holds still.
        let web = pod("web-1");
        assert!(matches!(
            queue.next_step(&web, Some(&charge("shop/web", 0)), POLICY, t0),
            Step::WaitForBudget { .. }
        ));
        queue.budget_moved();
        assert_eq!(
            queue.next_step(&web, Some(&charge("shop/web", 0)), forcing, t0),
            Step::Force
        );
    }

    #[test]
    fn a_pod_whose_budget_allows_its_eviction_is_evicted_even_when_forcing() {
        let t0 = at("2025-03-01T12:00:00Z");
        let forcing = QueuePolicy {
            force_from: Some(t0),
            ..POLICY
        };
        let mut queue = EvictionQueue::default();
        let web = pod("web-1");
        // Refused while its budget was at zero, before --force-after passed.
        assert!(matches!(
            queue.next_step(&web, Some(&charge("shop/web", 0)), POLICY, t0),
            Step::WaitForBudget { first: true, .. }
        ));
        queue.budget_moved();
        // Past --force-after, the budget allows one again: the eviction is possible, so it is
        // what goes, not a deletion.
        assert_eq!(
            queue.next_step(&web, Some(&charge("shop/web", 1)), forcing, t0),
            Step::Evict
        );
    }

    #[test]
    fn past_the_replace_by_time_only_a_pod_no_budget_can_let_go_is_deleted() {
        let t0 = at("2025-03-01T12:00:00Z");
        let replace_by = QueuePolicy {
            force_never_allowed_from: Some(t0),
            ..POLICY
        };
        let mut queue = EvictionQueue::default();
        // Its budget allows none now but will (a replacement not Ready yet): it waits for its
        // budget, past the replace-by time too, for as long as a budget recheck.
        let web = pod("web-1");
        let waiting = Some(charge("shop/web", 0));
        assert_eq!(
            queue.next_step(&web, waiting.as_ref(), replace_by, t0),
            Step::WaitForBudget {
                at: t0 + jiff::SignedDuration::from_secs(60),
                first: true
            }
        );
        queue.budget_moved();
        assert!(matches!(
            queue.next_step(&web, waiting.as_ref(), replace_by, t0),
            Step::WaitForBudget { first: false, .. }
        ));
        // One whose budget never allows is deleted: the last resort the replace-by time brings.
        let db = pod("db-0");
        queue.never_allowed(&db);
        assert_eq!(queue.next_step(&db, None, replace_by, t0), Step::Force);
        // Before the replace-by time, not even that one.
        let mut queue = EvictionQueue::default();
        queue.never_allowed(&db);
        let early = t0 - jiff::SignedDuration::from_secs(1);
        assert_eq!(queue.next_step(&db, None, replace_by, early), Step::Evict);
    }

    #[test]
    fn a_budget_wait_ends_when_forcing_begins() {
        let t0 = at("2025-03-01T12:00:00Z");
        let force_from = t0 + jiff::SignedDuration::from_secs(5);
        let policy = QueuePolicy {
            force_from: Some(force_from),
            ..POLICY
        };
        let mut queue = EvictionQueue::default();
        let web = pod("web-1");
        let refused = Some(charge("shop/web", 0));
        // The recheck would be a minute away; forcing begins in five seconds.
        assert_eq!(
            queue.next_step(&web, refused.as_ref(), policy, t0),
            Step::WaitForBudget {
                at: force_from,
                first: true
            }
        );
        assert!(matches!(
            queue.next_step(&web, refused.as_ref(), policy, t0 + jiff::SignedDuration::from_secs(1)),
            Step::Skip(Some(t)) if t == force_from
        ));
        assert_eq!(
            queue.next_step(&web, refused.as_ref(), policy, force_from),
            Step::Force
        );
    }

    #[test]
    fn failures_back_off_from_two_seconds_to_thirty() {
        let schedule: Vec<u64> = (1..=7).map(|n| failure_backoff(n).as_secs()).collect();
        assert_eq!(schedule, [2, 4, 8, 16, 30, 30, 30]);
    }
}
