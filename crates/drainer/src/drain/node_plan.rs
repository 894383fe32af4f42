//! A node's plan: [`plan_node`] weighs the verdicts of a draining node's pods
//! ([`crate::drain::pods::classify`]) against the cluster's PodDisruptionBudgets and gives a
//! [`NodePlan`]: what to evict now (one tier at a time, ordinary pods before critical ones, by
//! DrainRule order), what is already going or withheld, and what blocks the drain. Which budgets
//! the Eviction API consults for a pod is decided here; the budget arithmetic it uses is in
//! [`crate::drain::budgets`].

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use rotor_apimachinery::conditions::pod_is_ready;

use crate::drain::budgets::{
    BudgetDemand, BudgetKey, BudgetView, budget_never_allows, budget_views, refusal_settles_at,
    unready_pod_passes,
};
use crate::drain::pods::{
    Blocker, DrainOptions, EvictionTier, PodRef, PodVerdict, classify, eviction_tier,
};
use crate::drain::rules::PodRule;

/// The next actions on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePlan {
    /// Pods to evict now, with the grace period for the eviction (`None`: the pod's own): those
    /// a budget is charged for first, then the rest, each by namespace/name. Only the lowest
    /// tier that still has pods to evict. All are sent in one go, so the order only saves the
    /// time of the requests ahead of a budgeted pod; but a budget's next eviction waits for the
    /// last one's replacement, so that time is worth saving.
    pub evict_now: Vec<(PodRef, Option<i64>)>,
    /// Pods already terminating.
    pub waiting_for: Vec<PodRef>,
    /// Pods the drain would evict that are withheld from eviction: a Deployment's rollout
    /// replaces them, or whether it will is not decided yet (`--restart-single-replica`). No
    /// budget is charged for them and they block nothing, but the node is not drained while one
    /// is left, and an ordinary one keeps the critical tier waiting as if it were evictable.
    pub withheld: Vec<PodRef>,
    /// Whether an ordinary pod is left that is not terminating (evictable, withheld or
    /// blocked): critical pods wait until none is.
    pub holds_critical: bool,
    /// Why the node cannot finish draining (deduplicated; a budget is named once).
    pub blockers: Vec<Blocker>,
    /// How many pods are left alone (DaemonSet, mirror, finished, tolerating the taint).
    pub ignored: usize,
    /// Pods not in their turn yet: of a later DrainRule order than a pod still on the node, or
    /// critical while an ordinary pod of their order is left. Neither evicted, forced nor
    /// restarted until their turn (not counted in `evict_now`, `withheld` or `budget_blocked`).
    pub deferred: Vec<PodRef>,
    /// Pods that could be evicted but for their budgets (never allowing, or several): what
    /// `--force-after` deletes. Never do-not-disrupt pods.
    pub budget_blocked: Vec<(PodRef, Option<i64>)>,
    /// Pods so blocked that are not in their turn yet (also in `deferred`): a replace-by time
    /// warns their owners ahead, as it does for those in their turn.
    pub budget_blocked_later: Vec<PodRef>,
    /// Pods a DrainRule says to wait for (`WaitCompleted`): never evicted; the node is not
    /// drained while one runs.
    pub waiting_completion: Vec<PodRef>,
    /// Pods whose DrainRule cannot be known yet (the rules or their namespace's labels not
    /// listed): neither evicted nor skipped until it is.
    pub undecided: Vec<PodRef>,
    /// Pods a DrainRule skips (`Skip`): left on the node, holding nothing.
    pub skipped: usize,
    /// For evictable pods (keyed by uid) that exactly one budget would be charged for: that
    /// budget and the disruptions its status allows now. The drainer waits on the budget watch
    /// instead of sending an eviction it knows would be refused, and with several drains at once
    /// leaves such pods' workloads to their budget rather than the gate.
    pub charged: BTreeMap<String, Charge>,
    /// When a budget that looks as if it never allows, but only from a pod count too fresh to
    /// trust, may be judged: the plan is made again then (meanwhile its pods wait on it as on
    /// any refusing budget).
    pub judge_budgets_at: Option<Timestamp>,
}

/// The one budget an eviction would be charged to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Charge {
    pub budget: BudgetKey,
    /// The disruptions its status allows now (`status.disruptionsAllowed`).
    pub allowed_now: i32,
}

impl NodePlan {
    /// True when nothing is left to evict, wait for or unblock.
    pub fn is_drained(&self) -> bool {
        self.evict_now.is_empty()
            && self.waiting_for.is_empty()
            && self.withheld.is_empty()
            && self.blockers.is_empty()
            && self.deferred.is_empty()
            && self.waiting_completion.is_empty()
            && self.undecided.is_empty()
    }
}

/// Plans the drain of one node from its pods and the PodDisruptionBudgets of the namespaces
/// involved (budgets of other namespaces are ignored).
///
/// Pods to evict that are covered by several budgets, or by a budget that can never allow an
/// eviction ([`budget_never_allows`], from the budget's own status), become blockers instead.
/// Critical pods are released only once no ordinary pod is left that is not already terminating;
/// until then they are `deferred`.
pub fn plan_node(
    pods: &[Pod],
    pdbs: &[PodDisruptionBudget],
    drain_taint: &Taint,
    opts: &DrainOptions,
) -> NodePlan {
    plan_node_withholding(pods, pdbs, drain_taint, opts, |_| false)
}

/// [`plan_node_with`] without DrainRules: every pod drains at order 0.
pub fn plan_node_withholding(
    pods: &[Pod],
    pdbs: &[PodDisruptionBudget],
    drain_taint: &Taint,
    opts: &DrainOptions,
    withheld: impl Fn(&str) -> bool,
) -> NodePlan {
    plan_node_with(pods, pdbs, drain_taint, opts, withheld, |_| {
        PodRule::Drain { order: 0 }
    })
}

/// [`plan_node`], with the evictable pods for which `withheld` (given the pod's UID) is true
/// set aside in [`NodePlan::withheld`] instead of evicted, and each pod's DrainRule from
/// `rule_of`.
///
/// A rule applies to pods the drain would evict or that would block it (DaemonSet, mirror,
/// finished, terminating and tolerating pods are what they are): `Skip` leaves the pod,
/// `WaitCompleted` waits for it, a rule not known yet waits too (nothing is guessed). `Drain`
/// pods go by ascending order: while a pod of a lower order is left (to evict, withheld,
/// blocked or terminating), higher orders are deferred; within an order, ordinary pods before
/// critical ones.
pub fn plan_node_with<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    pdbs: &[PodDisruptionBudget],
    drain_taint: &Taint,
    opts: &DrainOptions,
    withheld: impl Fn(&str) -> bool,
    rule_of: impl Fn(&Pod) -> PodRule,
) -> NodePlan {
    let budgets = budget_views(pdbs);
    let mut sorted: Vec<&Pod> = pods.into_iter().collect();
    sorted.sort_by_key(|pod| PodRef::of(pod));

    let mut plan = NodePlan::default();
    let mut evictable: Vec<(i32, EvictionTier, PodRef, Option<i64>)> = Vec::new();
    let mut not_evictable: Vec<(i32, EvictionTier, NotEvictable)> = Vec::new();
    // Ordinary pods that still hold back the critical tier: evictable or blocked, not
    // terminating; by order.
    let mut ordinary_left = false;
    let mut ordinary_left_in: std::collections::BTreeSet<i32> = Default::default();
    // The lowest order with a pod left on the node (terminating ones included).
    let mut lowest_left: Option<i32> = None;

    for pod in sorted {
        let pod_ref = PodRef::of(pod);
        let verdict = classify(pod, drain_taint, opts);
        let order = match (&verdict, rule_of(pod)) {
            (PodVerdict::Ignore(_), _) => {
                plan.ignored += 1;
                continue;
            }
            (PodVerdict::WaitGone, PodRule::Drain { order }) => {
                lowest_left = Some(lowest_left.map_or(order, |l| l.min(order)));
                plan.waiting_for.push(pod_ref);
                continue;
            }
            (PodVerdict::WaitGone, _) => {
                plan.waiting_for.push(pod_ref);
                continue;
            }
            (_, PodRule::Skip) => {
                plan.skipped += 1;
                continue;
            }
            (_, PodRule::WaitCompleted) => {
                plan.waiting_completion.push(pod_ref);
                continue;
            }
            (_, PodRule::Unknown) => {
                // Rule: order is never guessed. A pod whose rule is not known yet may come
                // first and may be ordinary: nothing after the lowest possible order goes, nor
                // a critical pod, until it is known.
                lowest_left = Some(i32::MIN);
                ordinary_left = true;
                ordinary_left_in.insert(i32::MIN);
                plan.undecided.push(pod_ref);
                continue;
            }
            (_, PodRule::Drain { order }) => order,
        };
        lowest_left = Some(lowest_left.map_or(order, |l| l.min(order)));
        match verdict {
            PodVerdict::Ignore(_) | PodVerdict::WaitGone => {}
            PodVerdict::Blocked(blocker) => {
                if eviction_tier(pod) == EvictionTier::Ordinary {
                    ordinary_left = true;
                    ordinary_left_in.insert(order);
                }
                push_unique(&mut plan.blockers, blocker);
            }
            PodVerdict::Evict {
                tier,
                grace_period_seconds,
            } => {
                if tier == EvictionTier::Ordinary {
                    ordinary_left = true;
                    ordinary_left_in.insert(order);
                }
                if withheld(&pod_ref.uid) {
                    not_evictable.push((order, tier, NotEvictable::Withheld(pod_ref)));
                    continue;
                }
                let consulted = consulted_budgets(pod, &pod_ref, &budgets);
                match budget_blocker(&pod_ref, &consulted, opts.now, &mut plan.judge_budgets_at) {
                    Some(blocker) => {
                        push_unique(&mut plan.blockers, blocker);
                        not_evictable.push((
                            order,
                            tier,
                            NotEvictable::BudgetBlocked(pod_ref, grace_period_seconds),
                        ));
                    }
                    None => {
                        if let Consulted::One(budget) = consulted {
                            let allowed = budget
                                .pdb
                                .status
                                .as_ref()
                                .map_or(0, |s| s.disruptions_allowed);
                            let charge = Charge {
                                budget: budget.key.clone(),
                                allowed_now: allowed,
                            };
                            plan.charged.insert(pod_ref.uid.clone(), charge);
                        }
                        evictable.push((order, tier, pod_ref, grace_period_seconds));
                    }
                }
            }
        }
    }

    plan.holds_critical = ordinary_left;
    let not_in_turn = |order: i32, tier: EvictionTier| {
        lowest_left.is_some_and(|lowest| order > lowest)
            || (tier == EvictionTier::Critical && ordinary_left_in.contains(&order))
    };
    for (order, tier, pod_ref, grace) in evictable {
        if not_in_turn(order, tier) {
            plan.deferred.push(pod_ref);
        } else {
            plan.evict_now.push((pod_ref, grace));
        }
    }
    // Rule: what acts on a pod other than its eviction (a rollout restart of a withheld pod,
    // `--force-after`'s deletion of a budget-blocked one) waits for the pod's turn too, so the
    // order of DrainRules and of the critical tier holds through them.
    for (order, tier, held) in not_evictable {
        match held {
            NotEvictable::BudgetBlocked(pod_ref, _) if not_in_turn(order, tier) => {
                plan.budget_blocked_later.push(pod_ref.clone());
                plan.deferred.push(pod_ref)
            }
            NotEvictable::Withheld(pod_ref) if not_in_turn(order, tier) => {
                plan.deferred.push(pod_ref)
            }
            NotEvictable::Withheld(pod_ref) => plan.withheld.push(pod_ref),
            NotEvictable::BudgetBlocked(pod_ref, grace) => {
                plan.budget_blocked.push((pod_ref, grace))
            }
        }
    }
    // Stable: each group keeps the namespace/name order.
    plan.evict_now
        .sort_by_key(|(pod, _)| !plan.charged.contains_key(&pod.uid));
    plan
}

/// An evictable pod the drain does not evict now for a reason of its own.
enum NotEvictable {
    /// Left to its Deployment's rollout.
    Withheld(PodRef),
    /// Its budgets never allow it (or are several), with its grace period.
    BudgetBlocked(PodRef, Option<i64>),
}

fn push_unique(blockers: &mut Vec<Blocker>, blocker: Blocker) {
    if !blockers.contains(&blocker) {
        blockers.push(blocker);
    }
}

impl BudgetDemand {
    /// The demand of a plan, counting only the charged pods `keep` says are still to evict.
    pub fn of(plan: &NodePlan, keep: impl Fn(&str) -> bool) -> BudgetDemand {
        let mut pods: BTreeMap<BudgetKey, u32> = BTreeMap::new();
        for (uid, charge) in &plan.charged {
            if keep(uid) {
                *pods.entry(charge.budget.clone()).or_default() += 1;
            }
        }
        BudgetDemand {
            blocks: !plan.blockers.is_empty(),
            pods,
        }
    }
}

/// The budgets the eviction subresource consults for a pod, as it decides.
enum Consulted<'a> {
    /// None: no budget covers the pod, it is `Pending` (deleted without consulting budgets), or
    /// it is not Ready under a single budget that lets such pods through without consuming a
    /// disruption (`unhealthyPodEvictionPolicy: AlwaysAllow`, or the budget is healthy:
    /// `currentHealthy >= desiredHealthy > 0`).
    Nothing,
    /// Exactly one budget, charged one disruption.
    One(&'a BudgetView<'a>),
    /// Several budgets: the API refuses with a 500.
    Several(Vec<&'a BudgetView<'a>>),
}

fn consulted_budgets<'a>(
    pod: &Pod,
    pod_ref: &PodRef,
    budgets: &'a [BudgetView<'a>],
) -> Consulted<'a> {
    if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending") {
        return Consulted::Nothing;
    }
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let mut matching: Vec<&BudgetView<'_>> = budgets
        .iter()
        .filter(|b| b.namespace == pod_ref.namespace && b.selector.matches(labels))
        .collect();
    match matching.len() {
        0 => Consulted::Nothing,
        1 if !pod_is_ready(pod) && unready_pod_passes(matching[0].pdb) => Consulted::Nothing,
        1 => Consulted::One(matching.remove(0)),
        _ => Consulted::Several(matching),
    }
}

/// The budget problem that stops a pod from being evicted, if any: several budgets, or a single
/// one that can never allow an eviction (so neither a Pending pod nor a not-Ready pod a budget
/// lets through is ever blocked by one). A never-verdict read from a pod count younger than
/// [`crate::drain::budgets::POD_COUNT_SETTLE`] at `now` is not trusted yet: `judge_at` says
/// when it will be.
fn budget_blocker(
    pod_ref: &PodRef,
    consulted: &Consulted<'_>,
    now: Option<Timestamp>,
    judge_at: &mut Option<Timestamp>,
) -> Option<Blocker> {
    match consulted {
        Consulted::Nothing => None,
        Consulted::One(budget) => {
            let never = budget_never_allows(budget.pdb, None)?;
            let settles_at = now
                .filter(|_| never.from_pod_count)
                .and_then(|now| refusal_settles_at(budget.pdb, now));
            if let Some(at) = settles_at {
                *judge_at = Some(judge_at.map_or(at, |t| t.min(at)));
                return None;
            }
            Some(Blocker::BudgetNeverAllows {
                budget: budget.key.clone(),
                reason: never.reason,
            })
        }
        Consulted::Several(several) => {
            let mut names: Vec<BudgetKey> = several.iter().map(|b| b.key.clone()).collect();
            names.sort();
            Some(Blocker::MultipleBudgets {
                pod: pod_ref.to_string(),
                budgets: names,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use rotor_core::contract::DO_NOT_DISRUPT_ANNOTATION;
    use serde_json::{Value, json};

    use crate::drain::budgets::{DisruptionPace, WOULD_BLOCK, budget_paces};
    use crate::drain::fixtures::{merge, pdb, pod, status, taint};
    use crate::drain::pods::MIRROR_POD_ANNOTATION;

    use super::*;

    fn names(refs: &[PodRef]) -> Vec<&str> {
        refs.iter().map(|r| r.name.as_str()).collect()
    }

    fn evict_names(plan: &NodePlan) -> Vec<&str> {
        plan.evict_now
            .iter()
            .map(|(r, _)| r.name.as_str())
            .collect()
    }

    #[test]
    fn plan_evicts_ordinary_pods_first_in_name_order() {
        let pods = [
            pod("web-b", json!({})),
            pod(
                "coredns",
                json!({"metadata": {"namespace": "kube-system"},
                                  "spec": {"priorityClassName": "system-cluster-critical"}}),
            ),
            pod("web-a", json!({})),
            pod("api", json!({"metadata": {"namespace": "alpha"}})),
            pod(
                "fluentd",
                json!({"metadata": {"ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "fluentd", "uid": "d",
                 "controller": true}]}}),
            ),
        ];
        let plan = plan_node(&pods, &[], &taint(), &DrainOptions::default());
        assert_eq!(evict_names(&plan), ["api", "web-a", "web-b"]);
        assert_eq!(names(&plan.deferred), ["coredns"]);
        assert_eq!(plan.ignored, 1);
        assert!(plan.blockers.is_empty());
        assert!(!plan.is_drained());
        assert_eq!(plan.evict_now[0].0.uid, "uid-api");
    }

    #[test]
    fn critical_pods_go_once_ordinary_ones_are_terminating() {
        let gone = json!({"metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z"}});
        let critical = json!({"metadata": {"namespace": "kube-system"},
                              "spec": {"priorityClassName": "system-node-critical"}});
        let pods = [
            pod("web-a", gone.clone()),
            pod("web-b", gone),
            pod("dns", critical),
        ];
        let plan = plan_node(&pods, &[], &taint(), &DrainOptions::default());
        assert_eq!(evict_names(&plan), ["dns"]);
        assert_eq!(names(&plan.waiting_for), ["web-a", "web-b"]);
        assert!(plan.deferred.is_empty());
    }

    #[test]
    fn a_blocked_ordinary_pod_still_holds_back_critical_pods() {
        let pods = [
            pod(
                "db-0",
                json!({"metadata": {"annotations": {DO_NOT_DISRUPT_ANNOTATION: "true"}}}),
            ),
            pod(
                "dns",
                json!({"spec": {"priorityClassName": "system-cluster-critical"}}),
            ),
        ];
        let plan = plan_node(&pods, &[], &taint(), &DrainOptions::default());
        assert!(plan.evict_now.is_empty());
        assert_eq!(names(&plan.deferred), ["dns"]);
        assert_eq!(
            plan.blockers,
            [Blocker::DoNotDisrupt {
                pod: "shop/db-0".into(),
                annotation: DO_NOT_DISRUPT_ANNOTATION
            }]
        );
        assert!(!plan.is_drained());
    }

    #[test]
    fn a_withheld_pod_is_neither_evicted_nor_charged_but_holds_the_node_and_the_critical_tier() {
        // web-a is withheld (its Deployment's rollout replaces it) under a budget that never
        // allows: no eviction, no charge, no blocker for it. The critical pod waits for web-a
        // as for any ordinary pod.
        let frozen = pdb(
            "web",
            json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}),
            status(2, 0),
        );
        let dns = pod(
            "dns",
            json!({"metadata": {"labels": {"app": "dns"}},
                   "spec": {"priorityClassName": "system-cluster-critical"}}),
        );
        let pods = [pod("web-a", json!({})), dns.clone()];
        let withheld = |uid: &str| uid == "uid-web-a";
        let plan = plan_node_withholding(
            &pods,
            std::slice::from_ref(&frozen),
            &taint(),
            &DrainOptions::default(),
            withheld,
        );
        assert_eq!(names(&plan.withheld), ["web-a"]);
        assert!(plan.evict_now.is_empty() && plan.budget_blocked.is_empty());
        assert!(plan.charged.is_empty() && plan.blockers.is_empty());
        assert_eq!(names(&plan.deferred), ["dns"]);
        assert!(plan.holds_critical);
        assert!(!plan.is_drained());
        // Not withheld, the same pod is blocked by its budget.
        let plain = plan_node(&pods, &[frozen], &taint(), &DrainOptions::default());
        assert_eq!(plain.budget_blocked.len(), 1);
        assert!(matches!(
            plain.blockers[..],
            [Blocker::BudgetNeverAllows { .. }]
        ));
        // Once it is gone, the critical pod goes.
        let plan = plan_node_withholding(&[dns], &[], &taint(), &DrainOptions::default(), withheld);
        assert_eq!(evict_names(&plan), ["dns"]);
        assert!(!plan.holds_critical);
    }

    #[test]
    fn plan_with_only_ignored_and_finished_pods_is_drained() {
        let pods = [
            pod("job-1", json!({"status": {"phase": "Succeeded"}})),
            pod(
                "mirror",
                json!({"metadata": {"annotations": {MIRROR_POD_ANNOTATION: "x"}}}),
            ),
        ];
        let plan = plan_node(&pods, &[], &taint(), &DrainOptions::default());
        assert!(plan.is_drained(), "{plan:?}");
        assert_eq!(plan.ignored, 2);
        assert!(plan_node(&[], &[], &taint(), &DrainOptions::default()).is_drained());
    }

    #[test]
    fn terminating_pods_keep_the_node_from_being_drained() {
        let pods = [pod(
            "web-a",
            json!({"metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z"}}),
        )];
        let plan = plan_node(&pods, &[], &taint(), &DrainOptions::default());
        assert!(plan.evict_now.is_empty());
        assert_eq!(names(&plan.waiting_for), ["web-a"]);
        assert!(!plan.is_drained());
    }

    #[test]
    fn two_budgets_over_one_pod_block_it_by_name() {
        let pdbs = [
            pdb(
                "web-b",
                json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
                status(3, 2),
            ),
            pdb(
                "web-a",
                json!({"maxUnavailable": 1, "selector": {"matchExpressions": [
                {"key": "app", "operator": "In", "values": ["web", "api"]}]}}),
                status(3, 1),
            ),
        ];
        let pods = [
            pod("web-1", json!({})),
            pod("other", json!({"metadata": {"labels": {"app": "other"}}})),
        ];
        let plan = plan_node(&pods, &pdbs, &taint(), &DrainOptions::default());
        assert_eq!(evict_names(&plan), ["other"]);
        assert_eq!(
            plan.blockers,
            [Blocker::MultipleBudgets {
                pod: "shop/web-1".into(),
                budgets: vec!["shop/web-a".into(), "shop/web-b".into()]
            }]
        );
        let line = plan.blockers[0].to_string();
        assert!(
            line.contains("shop/web-1") && line.contains("shop/web-a, shop/web-b"),
            "{line}"
        );
    }

    #[test]
    fn budgets_that_eviction_ignores_do_not_count_but_an_empty_selector_covers_every_pod() {
        let web = pdb(
            "web",
            json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
            status(3, 1),
        );
        let ignored = [
            // No selector at all.
            pdb("nothing", json!({"maxUnavailable": 0}), status(0, 0)),
            // Invalid selector: the API server skips it.
            pdb(
                "broken",
                json!({"maxUnavailable": 0, "selector": {"matchExpressions": [
                {"key": "app", "operator": "In", "values": []}]}}),
                status(0, 0),
            ),
        ];
        let mut other_ns = pdb(
            "web",
            json!({"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}),
            status(3, 0),
        );
        other_ns.metadata.namespace = Some("elsewhere".into());
        let all: Vec<_> = [web.clone()]
            .into_iter()
            .chain(ignored)
            .chain([other_ns])
            .collect();
        let plan = plan_node(
            &[pod("web-1", json!({}))],
            &all,
            &taint(),
            &DrainOptions::default(),
        );
        assert!(plan.blockers.is_empty(), "{:?}", plan.blockers);
        assert_eq!(evict_names(&plan), ["web-1"]);

        // Empty selector: every pod of the namespace, as the Eviction API applies it.
        let everything = pdb(
            "everything",
            json!({"maxUnavailable": 0, "selector": {}}),
            status(3, 0),
        );
        let plan = plan_node(
            &[pod("web-1", json!({}))],
            &[web, everything],
            &taint(),
            &DrainOptions::default(),
        );
        assert!(evict_names(&plan).is_empty(), "{plan:?}");
        assert!(
            format!("{:?}", plan.blockers).contains("everything"),
            "{:?}",
            plan.blockers
        );
    }

    #[test]
    fn budget_that_never_allows_blocks_once_per_budget() {
        let pdbs = [pdb(
            "web",
            json!({"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}),
            status(3, 0),
        )];
        let pods = [pod("web-1", json!({})), pod("web-2", json!({}))];
        let plan = plan_node(&pods, &pdbs, &taint(), &DrainOptions::default());
        assert!(plan.evict_now.is_empty());
        assert_eq!(
            plan.blockers,
            [Blocker::BudgetNeverAllows {
                budget: "shop/web".into(),
                reason: "maxUnavailable is 0".into()
            }]
        );
        assert!(plan.blockers[0].to_string().contains("shop/web"));
    }

    #[test]
    fn never_allowing_budget_over_an_ignored_pod_is_not_a_blocker() {
        let pdbs = [pdb(
            "agent",
            json!({"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}),
            status(3, 0),
        )];
        let pods = [pod(
            "agent-x",
            json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "d",
             "controller": true}]}}),
        )];
        let plan = plan_node(&pods, &pdbs, &taint(), &DrainOptions::default());
        assert!(plan.is_drained(), "{plan:?}");
    }

    #[test]
    fn pending_pods_bypass_budgets_like_the_eviction_api() {
        let sel = json!({"matchLabels": {"app": "web"}});
        let pdbs = [
            pdb(
                "a",
                json!({"maxUnavailable": 0, "selector": sel}),
                status(3, 0),
            ),
            pdb(
                "b",
                json!({"maxUnavailable": 1, "selector": sel}),
                status(3, 1),
            ),
        ];
        let pulling = pod(
            "web-1",
            json!({"status": {"phase": "Pending", "conditions": [
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]}}),
        );
        let plan = plan_node(&[pulling], &pdbs, &taint(), &DrainOptions::default());
        assert!(plan.blockers.is_empty(), "{:?}", plan.blockers);
        assert_eq!(evict_names(&plan), ["web-1"]);
    }

    #[test]
    fn unready_pod_passes_a_strict_budget_only_when_the_api_would_let_it() {
        let crashing = pod(
            "web-1",
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        );
        let strict = |policy: Option<&str>, healthy: i32| {
            let mut spec =
                json!({"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}});
            if let Some(policy) = policy {
                spec["unhealthyPodEvictionPolicy"] = json!(policy);
            }
            pdb(
                "web",
                spec,
                json!({"observedGeneration": 1, "expectedPods": 3,
                "currentHealthy": healthy, "desiredHealthy": 3, "disruptionsAllowed": 0}),
            )
        };
        let plan_with = |budget| {
            plan_node(
                std::slice::from_ref(&crashing),
                &[budget],
                &taint(),
                &DrainOptions::default(),
            )
        };
        // AlwaysAllow: an unready pod is evicted whatever the budget's health.
        assert_eq!(
            evict_names(&plan_with(strict(Some("AlwaysAllow"), 2))),
            ["web-1"]
        );
        // A healthy budget (3 of 3 other pods Ready, e.g. during a surge) lets it through too.
        assert_eq!(evict_names(&plan_with(strict(None, 3))), ["web-1"]);
        // An unhealthy budget without AlwaysAllow refuses it, and always will.
        let plan = plan_with(strict(Some("IfHealthyBudget"), 2));
        assert!(plan.evict_now.is_empty());
        assert_eq!(plan.blockers.len(), 1, "{plan:?}");
        // A Ready pod never passes a maxUnavailable 0 budget.
        let ready = pod("web-2", json!({}));
        let plan = plan_node(
            &[ready],
            &[strict(Some("AlwaysAllow"), 3)],
            &taint(),
            &DrainOptions::default(),
        );
        assert!(matches!(
            plan.blockers[..],
            [Blocker::BudgetNeverAllows { .. }]
        ));
    }

    #[test]
    fn a_pod_count_that_just_dipped_is_not_taken_for_a_budget_that_never_allows() {
        // Four replicas under minAvailable 3: an eviction took the last disruption at 12:00:00,
        // and the evicted pod is gone before its replacement exists, so the budget matches three
        // pods. Read at that moment, the count says "never"; fifteen seconds on, it is believed.
        let refusing = |since: &str| {
            let mut st = status(3, 0);
            st["conditions"] = json!([{"type": "DisruptionAllowed", "status": "False",
                "reason": "InsufficientPods", "message": "", "lastTransitionTime": since}]);
            pdb(
                "api",
                json!({"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}}),
                st,
            )
        };
        let dipped = refusing("2026-11-29T12:00:00Z");
        let pods = [pod("web-a", json!({}))];
        let at = |now: &str| DrainOptions {
            now: Some(now.parse().unwrap()),
            ..DrainOptions::default()
        };
        let early = plan_node(
            &pods,
            std::slice::from_ref(&dipped),
            &taint(),
            &at("2026-11-29T12:00:01Z"),
        );
        assert!(early.blockers.is_empty(), "{:?}", early.blockers);
        assert!(early.budget_blocked.is_empty());
        // The pod waits on the budget as on any that refuses, and the plan says when to judge.
        assert_eq!(evict_names(&early), ["web-a"]);
        assert_eq!(early.charged["uid-web-a"].allowed_now, 0);
        assert_eq!(
            early.judge_budgets_at,
            Some("2026-11-29T12:00:15Z".parse().unwrap())
        );

        let settled = plan_node(
            &pods,
            std::slice::from_ref(&dipped),
            &taint(),
            &at("2026-11-29T12:00:15Z"),
        );
        assert!(matches!(
            settled.blockers[..],
            [Blocker::BudgetNeverAllows { .. }]
        ));
        assert_eq!(settled.budget_blocked.len(), 1);
        assert_eq!(settled.judge_budgets_at, None);

        // A budget that has refused for long is judged at once; so is one whose status carries
        // no condition, and a verdict from the spec alone never waits.
        let long = refusing("2026-11-28T09:00:00Z");
        let bare = pdb(
            "api",
            json!({"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}}),
            status(3, 0),
        );
        let mut zero = refusing("2026-11-29T12:00:00Z");
        let spec = zero.spec.as_mut().unwrap();
        spec.min_available = None;
        spec.max_unavailable = Some(IntOrString::Int(0));
        // A percentage is measured against the workloads' scale, which does not dip.
        let mut whole = refusing("2026-11-29T12:00:00Z");
        whole.spec.as_mut().unwrap().min_available = Some(IntOrString::String("100%".into()));
        for budget in [long, bare, zero, whole] {
            let plan = plan_node(&pods, &[budget], &taint(), &at("2026-11-29T12:00:01Z"));
            assert_eq!(plan.budget_blocked.len(), 1, "{plan:?}");
            assert_eq!(plan.judge_budgets_at, None);
        }
    }

    #[test]
    fn the_plan_names_the_one_budget_eviction_would_charge() {
        let charged = |pods: &[Pod], pdbs: &[PodDisruptionBudget]| {
            plan_node(pods, pdbs, &taint(), &DrainOptions::default()).charged
        };
        let one = |budget: &str, allowed: i32| {
            let charge = Charge {
                budget: budget.into(),
                allowed_now: allowed,
            };
            BTreeMap::from([("uid-web-1".to_string(), charge)])
        };
        let web = pdb(
            "web",
            json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
            status(3, 0),
        );
        let ready = pod("web-1", json!({}));
        assert_eq!(
            charged(std::slice::from_ref(&ready), std::slice::from_ref(&web)),
            one("shop/web", 0)
        );
        let allowing = pdb(
            "web",
            json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
            status(3, 1),
        );
        assert_eq!(
            charged(
                std::slice::from_ref(&ready),
                std::slice::from_ref(&allowing)
            ),
            one("shop/web", 1)
        );
        // No budget, another app's, or two budgets: no single budget is charged.
        assert!(charged(std::slice::from_ref(&ready), &[]).is_empty());
        let other = pod("o", json!({"metadata": {"labels": {"app": "other"}}}));
        assert!(charged(&[other], std::slice::from_ref(&web)).is_empty());
        let overlap = pdb(
            "web-2",
            json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
            status(3, 2),
        );
        assert!(charged(std::slice::from_ref(&ready), &[web.clone(), overlap]).is_empty());
        // A Pending pod is deleted without consulting budgets.
        let pending = pod("p", json!({"status": {"phase": "Pending"}}));
        assert!(charged(&[pending], std::slice::from_ref(&web)).is_empty());
    }

    fn allowed_now(pdbs: &[PodDisruptionBudget]) -> BTreeMap<BudgetKey, i64> {
        budget_paces(pdbs)
            .into_iter()
            .map(|(key, pace)| (key, pace.allowed_now))
            .collect()
    }

    #[test]
    fn budget_waits_count_the_pods_beyond_what_each_budget_allows_now() {
        let waits = |pods: &[Pod], pdbs: &[PodDisruptionBudget]| {
            let plan = plan_node(pods, pdbs, &taint(), &DrainOptions::default());
            BudgetDemand::of(&plan, |_| true).waits(&allowed_now(pdbs))
        };
        let web = |allowed| {
            pdb(
                "web",
                json!({"maxUnavailable": 3, "selector": {"matchLabels": {"app": "web"}}}),
                status(6, allowed),
            )
        };
        let api = |allowed| {
            pdb(
                "api",
                json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "api"}}}),
                status(3, allowed),
            )
        };
        let webs: Vec<Pod> = ["web-1", "web-2", "web-3"]
            .iter()
            .map(|n| pod(n, json!({})))
            .collect();
        let api_pod = pod("api-1", json!({"metadata": {"labels": {"app": "api"}}}));
        let mut all = webs.clone();
        all.push(api_pod);
        // Three web pods under a budget allowing 1: two would wait; allowing 3 or more: none.
        assert_eq!(waits(&webs, &[web(1)]), 2);
        assert_eq!(waits(&webs, &[web(3)]), 0);
        assert_eq!(waits(&webs, &[web(0)]), 3);
        // Budgets add up; pods without a budget never wait.
        assert_eq!(waits(&all, &[web(1), api(0)]), 3);
        assert_eq!(waits(&all, &[web(3), api(1)]), 0);
        assert_eq!(waits(&all, &[]), 0);
        // A node that would block goes last.
        let pinned = pod(
            "pinned",
            json!({"metadata": {"labels": {"app": "other"},
                                "annotations": {"rotor.dev/do-not-disrupt": "true"}}}),
        );
        assert_eq!(waits(&[pinned], &[]), WOULD_BLOCK);
    }

    #[test]
    fn pods_a_budget_is_charged_for_are_evicted_first() {
        let web = pdb(
            "web",
            json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
            status(3, 1),
        );
        let free = |name: &str| pod(name, json!({"metadata": {"labels": {"app": "batch"}}}));
        let pods = [
            free("a-worker"),
            pod("m-web", json!({})),
            free("z-worker"),
            pod("b-web", json!({})),
        ];
        let plan = plan_node(&pods, &[web], &taint(), &DrainOptions::default());
        assert_eq!(
            evict_names(&plan),
            ["b-web", "m-web", "a-worker", "z-worker"]
        );
    }

    #[test]
    fn claimed_disruptions_make_later_demands_on_the_same_budget_wait() {
        let web = pdb(
            "web",
            json!({"maxUnavailable": 2, "selector": {"matchLabels": {"app": "web"}}}),
            status(6, 2),
        );
        let node_a: Vec<Pod> = ["web-1", "web-2"]
            .iter()
            .map(|n| pod(n, json!({})))
            .collect();
        let plan_a = plan_node(
            &node_a,
            std::slice::from_ref(&web),
            &taint(),
            &DrainOptions::default(),
        );
        let node_b = [pod("web-3", json!({}))];
        let plan_b = plan_node(
            &node_b,
            std::slice::from_ref(&web),
            &taint(),
            &DrainOptions::default(),
        );
        let (a, b) = (
            BudgetDemand::of(&plan_a, |_| true),
            BudgetDemand::of(&plan_b, |_| true),
        );
        assert_eq!(a.pods, BTreeMap::from([("shop/web".into(), 2)]));
        let paces = budget_paces(std::slice::from_ref(&web));
        assert_eq!(
            paces,
            BTreeMap::from([(
                "shop/web".into(),
                DisruptionPace {
                    allowed_now: 2,
                    per_round: 2
                }
            )])
        );
        let mut allowed = allowed_now(std::slice::from_ref(&web));
        assert_eq!(b.waits(&allowed), 0);
        // Once node a has claimed both disruptions, b's pod queues behind them; a third claim
        // puts one more in front.
        a.claim(&mut allowed);
        assert_eq!(b.waits(&allowed), 1);
        b.claim(&mut allowed);
        assert_eq!(a.waits(&allowed), 3);
        // Pods already evicted are no longer demanded.
        let evicted = plan_a.evict_now[0].0.uid.clone();
        let rest = BudgetDemand::of(&plan_a, |uid| uid != evicted);
        assert_eq!(rest.pods, BTreeMap::from([("shop/web".into(), 1)]));
    }

    /// The rule each pod's `rule` label names: `skip`, `wait`, `unknown`, or an order.
    fn by_label(pod: &Pod) -> PodRule {
        let label = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("rule"))
            .map(String::as_str);
        match label {
            Some("skip") => PodRule::Skip,
            Some("wait") => PodRule::WaitCompleted,
            Some("unknown") => PodRule::Unknown,
            Some(order) => PodRule::Drain {
                order: order.parse().unwrap(),
            },
            None => PodRule::Drain { order: 0 },
        }
    }

    fn ruled(rule: &str, extra: Value) -> Value {
        let mut base = json!({"metadata": {"labels": {"app": "web", "rule": rule}}});
        merge(&mut base, extra);
        base
    }

    #[test]
    fn drain_rules_order_the_groups_skip_and_wait_for_pods() {
        let gone = json!({"metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z"}});
        let critical = json!({"spec": {"priorityClassName": "system-node-critical"}});
        let opted_out = json!({"metadata": {"annotations": {"rotor.dev/do-not-disrupt": "true"}}});
        let plan_of = |pods: &[Pod]| {
            plan_node_with(
                pods,
                &[],
                &taint(),
                &DrainOptions::default(),
                |_| false,
                by_label,
            )
        };
        // Order -5 first; order 0 (no rule) and its critical pod wait; order 10 waits longer.
        let pods = [
            pod("cache", ruled("-5", json!({}))),
            pod("web", json!({})),
            pod("dns", critical.clone()),
            pod("db", ruled("10", json!({}))),
            pod("canary", ruled("skip", opted_out.clone())),
            pod("etl", ruled("wait", json!({}))),
        ];
        let plan = plan_of(&pods);
        assert_eq!(evict_names(&plan), ["cache"]);
        assert_eq!(names(&plan.deferred), ["db", "dns", "web"]);
        // A skipped pod holds nothing, opted out or not; a pod waited for is never evicted.
        assert_eq!(plan.skipped, 1);
        assert!(plan.blockers.is_empty());
        assert_eq!(names(&plan.waiting_completion), ["etl"]);
        // The -5 group terminating still holds the next group: it must be gone first.
        let pods = [
            pod("cache", ruled("-5", gone.clone())),
            pod("web", json!({})),
            pod("dns", critical.clone()),
            pod("db", ruled("10", json!({}))),
        ];
        let plan = plan_of(&pods);
        assert_eq!(evict_names(&plan), Vec::<&str>::new());
        assert_eq!(names(&plan.waiting_for), ["cache"]);
        // Gone: order 0 goes, ordinary before critical; order 10 still waits.
        let pods = [
            pod("web", json!({})),
            pod("dns", critical.clone()),
            pod("db", ruled("10", json!({}))),
        ];
        let plan = plan_of(&pods);
        assert_eq!(evict_names(&plan), ["web"]);
        assert_eq!(names(&plan.deferred), ["db", "dns"]);
        // A blocked pod holds its order's followers as it holds the critical tier.
        let pods = [pod("web", opted_out), pod("db", ruled("10", json!({})))];
        let plan = plan_of(&pods);
        assert_eq!(evict_names(&plan), Vec::<&str>::new());
        assert_eq!(names(&plan.deferred), ["db"]);
        assert_eq!(plan.blockers.len(), 1);
        // The node is not drained while a pod is waited for, or its rule is not known.
        let plan = plan_of(&[pod("etl", ruled("wait", json!({})))]);
        assert!(!plan.is_drained());
        let plan = plan_of(&[pod(
            "etl",
            ruled("wait", json!({"status": {"phase": "Succeeded"}})),
        )]);
        assert!(plan.is_drained());
        let plan = plan_of(&[pod("x", ruled("unknown", json!({})))]);
        assert_eq!(
            (names(&plan.undecided), plan.is_drained()),
            (vec!["x"], false)
        );
        assert!(plan.evict_now.is_empty());
        // A pod whose rule is not known yet (its namespace's labels not seen) may come first:
        // the databases of order 10, the pods without a rule and the critical ones all wait.
        let pods = [
            pod("ml", ruled("unknown", json!({}))),
            pod("db", ruled("10", json!({}))),
            pod("web", json!({})),
            pod("dns", critical.clone()),
        ];
        let plan = plan_of(&pods);
        assert_eq!(evict_names(&plan), Vec::<&str>::new());
        assert_eq!(names(&plan.deferred), ["db", "dns", "web"]);
        assert_eq!(names(&plan.undecided), ["ml"]);
        assert!(plan.holds_critical);
    }

    #[test]
    fn a_pod_not_in_its_turn_is_neither_forced_nor_restarted() {
        // db (order 10) sits under a budget that never allows, cache (order 10) is left to
        // its rollout, dns is critical under a never-allowing budget too; web (order 0) is
        // still on the node. `--force-after` deletes the budget-blocked pods and rollout
        // restarts act on the withheld ones: neither may reach a pod before its turn.
        let frozen = |app: &str| {
            pdb(
                app,
                json!({"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}),
                status(1, 0),
            )
        };
        let labelled = |app: &str, extra: Value| {
            let mut base = json!({"metadata": {"labels": {"app": app}}});
            merge(&mut base, extra);
            base
        };
        let critical = json!({"spec": {"priorityClassName": "system-node-critical"}});
        let pods = [
            pod("web", json!({})),
            pod(
                "db",
                labelled("db", json!({"metadata": {"labels": {"rule": "10"}}})),
            ),
            pod(
                "cache",
                labelled("cache", json!({"metadata": {"labels": {"rule": "10"}}})),
            ),
            pod("dns", labelled("dns", critical)),
        ];
        let budgets = [frozen("db"), frozen("dns")];
        let plan_of = |pods: &[Pod]| {
            plan_node_with(
                pods,
                &budgets,
                &taint(),
                &DrainOptions::default(),
                |uid| uid == "uid-cache",
                by_label,
            )
        };
        let plan = plan_of(&pods);
        assert_eq!(evict_names(&plan), ["web"]);
        assert!(plan.budget_blocked.is_empty(), "{plan:?}");
        assert!(plan.withheld.is_empty(), "{plan:?}");
        assert_eq!(names(&plan.deferred), ["cache", "db", "dns"]);
        assert_eq!(names(&plan.budget_blocked_later), ["db", "dns"]);
        // The blockers still say what will hold the node.
        assert_eq!(plan.blockers.len(), 2, "{plan:?}");
        // web gone: dns's turn (order 0, critical, no ordinary pod of order 0 left).
        let blocked = |plan: &NodePlan| -> Vec<String> {
            plan.budget_blocked
                .iter()
                .map(|(p, _)| p.name.clone())
                .collect()
        };
        let plan = plan_of(&pods[1..]);
        assert_eq!(blocked(&plan), ["dns"]);
        assert_eq!(names(&plan.deferred), ["cache", "db"]);
        // dns gone too: order 10's turn, db forced if it must be, cache restarted.
        let plan = plan_of(&pods[1..3]);
        assert_eq!(blocked(&plan), ["db"]);
        assert_eq!(names(&plan.withheld), ["cache"]);
        assert!(plan.deferred.is_empty());
    }
}
