//! What to do with each pod of a draining node: kubectl drain's filters, done right. [`classify`]
//! gives one pod's [`PodVerdict`]; [`plan_node`] turns a node's pods and the cluster's
//! PodDisruptionBudgets into a [`NodePlan`]: what to evict now (one tier at a time, ordinary pods
//! before critical ones), what is already going, and what blocks the drain, named for an operator.
//! The budget arithmetic it uses is in [`crate::drain::budgets`].

use std::collections::BTreeMap;
use std::fmt;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use rotor_apimachinery::conditions::pod_is_ready;
use rotor_apimachinery::taints::tolerated_by_any;
use rotor_core::contract::pod_opt_out;

use crate::drain::budgets::{
    BudgetDemand, BudgetKey, BudgetView, budget_never_allows, budget_views, key_of,
    refusal_settles_at, unready_pod_passes,
};
use crate::drain::rules::PodRule;

/// Annotation the kubelet puts on mirror pods (static pods seen through the API).
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Priority classes whose pods are evicted last.
pub const CRITICAL_PRIORITY_CLASSES: [&str; 2] =
    ["system-cluster-critical", "system-node-critical"];

/// Pods with at least this priority are critical whatever their class name (the value of
/// `system-cluster-critical`; user priority classes cannot go above 1,000,000,000).
pub const CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Grace period the API server gives a pod that does not set `terminationGracePeriodSeconds`.
const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;

/// How the drain treats pods that kubectl drain refuses by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainOptions {
    /// Evict pods with `emptyDir` volumes (their data is lost). When false, such a pod blocks.
    pub evict_emptydir: bool,
    /// Evict pods that no controller recreates. When false, such a pod blocks.
    pub evict_unmanaged: bool,
    /// Cap on each pod's termination grace period, in seconds. Negative means no cap (like
    /// kubectl's `--grace-period=-1`); 0 is raised to 1, because a zero grace period deletes the
    /// pod without waiting for its containers to stop.
    pub max_grace_period: Option<i64>,
    /// The node's replace-by time has passed under `--enforce-replace-by`: a pod's opt-out no
    /// longer holds it (it is evicted like any other, through the API, with its grace period).
    pub override_opt_outs: bool,
    /// The time of this pass. A budget's never-verdict read from its pod count is trusted only
    /// once the budget has refused for [`crate::drain::budgets::POD_COUNT_SETTLE`]; `None`
    /// trusts every verdict at once.
    pub now: Option<Timestamp>,
}

impl Default for DrainOptions {
    fn default() -> Self {
        DrainOptions {
            evict_emptydir: true,
            evict_unmanaged: true,
            max_grace_period: None,
            override_opt_outs: false,
            now: None,
        }
    }
}

/// Why a pod is left alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IgnoreReason {
    /// Owned by a DaemonSet, which would put it straight back.
    DaemonSet,
    /// A static pod's mirror; the API cannot remove it.
    Mirror,
    /// `Succeeded` or `Failed`: nothing runs, nothing to wait for.
    Finished,
    /// Tolerates the drain taint, so it is meant to stay.
    ToleratesDrainTaint,
}

impl IgnoreReason {
    /// Short slug for logs and metric labels.
    pub const fn slug(self) -> &'static str {
        match self {
            IgnoreReason::DaemonSet => "daemonset",
            IgnoreReason::Mirror => "mirror",
            IgnoreReason::Finished => "finished",
            IgnoreReason::ToleratesDrainTaint => "tolerates-drain-taint",
        }
    }
}

/// Eviction order: every ordinary pod goes before any critical one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EvictionTier {
    /// Everything that is not critical.
    Ordinary,
    /// Priority class `system-cluster-critical` or `system-node-critical`, or priority of at least
    /// [`CRITICAL_PRIORITY`]: DNS, CNI and the like, kept until the rest is gone.
    Critical,
}

/// What to do with one pod of a draining node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodVerdict {
    /// Leave it.
    Ignore(IgnoreReason),
    /// Already terminating: do not evict again; it leaves by itself (the runtime bounds the wait).
    WaitGone,
    /// Evict it, in this tier, with this grace period (`None`: the pod's own).
    Evict {
        tier: EvictionTier,
        grace_period_seconds: Option<i64>,
    },
    /// It must not be evicted, and so the node cannot finish draining.
    Blocked(Blocker),
}

/// Something that stops a node from draining until a person acts (or, for
/// [`Blocker::BudgetRefusing`], until the budget allows). `Display` is one line for operators that
/// names the pod or budget and says what to do.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Blocker {
    /// The pod carries an opt-out annotation.
    DoNotDisrupt {
        /// `namespace/name`.
        pod: String,
        /// The annotation that opts it out.
        annotation: &'static str,
    },
    /// The pod uses `emptyDir` and the drain is configured to refuse such pods.
    EmptyDirRefused { pod: String },
    /// No controller recreates the pod and the drain is configured to refuse such pods.
    UnmanagedRefused { pod: String },
    /// More than one budget covers the pod; the eviction API answers 500 for such pods.
    MultipleBudgets {
        pod: String,
        /// The budgets, sorted.
        budgets: Vec<BudgetKey>,
    },
    /// A budget covering a pod to evict can never allow an eviction.
    BudgetNeverAllows {
        budget: BudgetKey,
        /// Why, e.g. `maxUnavailable is 0`.
        reason: String,
    },
    /// The eviction API refused the pod for its budget (429); filled in by the runtime.
    BudgetRefusing {
        budget: BudgetKey,
        pod: String,
        /// The API server's message.
        message: String,
    },
}

impl Blocker {
    /// Short slug for metric labels and Event reasons.
    pub const fn slug(&self) -> &'static str {
        match self {
            Blocker::DoNotDisrupt { .. } => "do-not-disrupt",
            Blocker::EmptyDirRefused { .. } => "emptydir-refused",
            Blocker::UnmanagedRefused { .. } => "unmanaged-refused",
            Blocker::MultipleBudgets { .. } => "multiple-budgets",
            Blocker::BudgetNeverAllows { .. } => "budget-never-allows",
            Blocker::BudgetRefusing { .. } => "budget-refusing",
        }
    }

    /// True when only a person can clear it; false for a budget that may allow later.
    pub const fn needs_operator(&self) -> bool {
        !matches!(self, Blocker::BudgetRefusing { .. })
    }
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::DoNotDisrupt { pod, annotation } => write!(
                f,
                "pod {pod} has {annotation}=true and is never evicted: remove the annotation or move the workload off this node"
            ),
            Blocker::EmptyDirRefused { pod } => write!(
                f,
                "pod {pod} uses an emptyDir volume and evicting such pods is turned off: delete the pod yourself or allow evicting emptyDir pods"
            ),
            Blocker::UnmanagedRefused { pod } => write!(
                f,
                "pod {pod} has no controller to recreate it and evicting such pods is turned off: delete the pod yourself or allow evicting unmanaged pods"
            ),
            Blocker::MultipleBudgets { pod, budgets } => write!(
                f,
                "pod {pod} is covered by {} PodDisruptionBudgets ({}) and the eviction API refuses such pods: make the budgets' selectors disjoint",
                budgets.len(),
                budgets
                    .iter()
                    .map(BudgetKey::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Blocker::BudgetNeverAllows { budget, reason } => write!(
                f,
                "PodDisruptionBudget {budget} can never allow an eviction ({reason}): relax or delete the budget"
            ),
            Blocker::BudgetRefusing {
                budget,
                pod,
                message,
            } => write!(
                f,
                "PodDisruptionBudget {budget} refuses to evict pod {pod} ({message}): waiting until the budget allows it"
            ),
        }
    }
}

/// The controlling owner reference of an object, if it has a controller.
pub fn controller_ref(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
}

/// On every surge placeholder: which node's drain it makes room for
/// ([`crate::drain::surge`]).
pub const SURGE_FOR_LABEL: &str = "rotor.dev/surge-for";
/// The standard label naming the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "rotor-drainer";

/// True for a surge placeholder rotor made: room, not a workload (the gate ignores it while
/// Pending, and a drain evicts it even without an owner).
pub fn is_placeholder(pod: &Pod) -> bool {
    pod.metadata.labels.as_ref().is_some_and(|l| {
        l.contains_key(SURGE_FOR_LABEL)
            && l.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
    })
}

/// The controlling owner reference's kind, if the pod has a controller.
pub fn controller_kind(pod: &Pod) -> Option<&str> {
    controller_ref(&pod.metadata).map(|owner| owner.kind.as_str())
}

/// True for a pod the scheduler (or its creator) has bound to a node.
pub fn is_bound(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// True for a pod the kubelet mirrors from a static manifest.
pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
}

/// True when the pod's phase is `Succeeded` or `Failed`.
pub fn is_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// True when the pod uses at least one `emptyDir` volume.
pub fn uses_emptydir(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.volumes.as_ref())
        .is_some_and(|volumes| volumes.iter().any(|v| v.empty_dir.is_some()))
}

/// True when one of the pod's tolerations tolerates `taint`.
pub fn tolerates_taint(pod: &Pod, taint: &Taint) -> bool {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.tolerations.as_ref())
        .is_some_and(|ts| tolerated_by_any(ts, taint))
}

/// The pod's eviction tier (see [`EvictionTier::Critical`]).
pub fn eviction_tier(pod: &Pod) -> EvictionTier {
    let Some(spec) = pod.spec.as_ref() else {
        return EvictionTier::Ordinary;
    };
    let by_class = spec
        .priority_class_name
        .as_deref()
        .is_some_and(|class| CRITICAL_PRIORITY_CLASSES.contains(&class));
    let by_value = spec.priority.is_some_and(|p| p >= CRITICAL_PRIORITY);
    if by_class || by_value {
        EvictionTier::Critical
    } else {
        EvictionTier::Ordinary
    }
}

/// The grace period to put in the eviction's delete options: `None` (the pod's own) unless
/// `max_grace_period` is below the pod's `terminationGracePeriodSeconds` (30 when unset), then
/// the cap, at least 1.
pub fn grace_period(pod: &Pod, max_grace_period: Option<i64>) -> Option<i64> {
    let cap = max_grace_period.filter(|cap| *cap >= 0)?.max(1);
    let own = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS);
    (own > cap).then_some(cap)
}

/// The grace period, in seconds, an eviction of `pod` with `grace` (from [`grace_period`]:
/// `None` for the pod's own) gives it, when that is longer than `left` (the time to the drain's
/// deadline): the pod may then still be terminating when the deadline comes, and the drain
/// fails. `None` when the pod is gone in time. rotor still evicts such a pod through the API,
/// never deletes it; only `--max-grace-period` shortens the wait.
pub fn grace_outlasts(pod: &Pod, grace: Option<i64>, left: std::time::Duration) -> Option<i64> {
    let seconds = grace.unwrap_or_else(|| {
        pod.spec
            .as_ref()
            .and_then(|spec| spec.termination_grace_period_seconds)
            .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
    });
    (u64::try_from(seconds).unwrap_or(0) > left.as_secs()).then_some(seconds)
}

/// The opt-out annotations on `pod` whose value is neither `"true"` nor `"false"` (`"True"`,
/// `"yes"`, `""`, ...), with their values: they do not opt the pod out, though whoever wrote
/// them may have meant to, so the drain says so when it evicts the pod.
pub fn opt_outs_not_honoured(pod: &Pod) -> Vec<(&'static str, &str)> {
    [
        rotor_core::contract::DO_NOT_DISRUPT_ANNOTATION,
        rotor_core::contract::KARPENTER_DO_NOT_DISRUPT_ANNOTATION,
    ]
    .into_iter()
    .filter_map(|key| {
        let value = pod.metadata.annotations.as_ref()?.get(key)?;
        (value != "true" && value != "false").then_some((key, value.as_str()))
    })
    .collect()
}

/// What to do with `pod`, a pod of a node carrying `drain_taint`. Budgets are not looked at here
/// (see [`plan_node`]). Checks run in this order: DaemonSet, mirror, finished, terminating,
/// tolerates the drain taint, do-not-disrupt, emptyDir refused, unmanaged refused.
pub fn classify(pod: &Pod, drain_taint: &Taint, opts: &DrainOptions) -> PodVerdict {
    if controller_kind(pod) == Some("DaemonSet") {
        return PodVerdict::Ignore(IgnoreReason::DaemonSet);
    }
    if is_mirror(pod) {
        return PodVerdict::Ignore(IgnoreReason::Mirror);
    }
    if is_finished(pod) {
        return PodVerdict::Ignore(IgnoreReason::Finished);
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return PodVerdict::WaitGone;
    }
    if tolerates_taint(pod, drain_taint) {
        return PodVerdict::Ignore(IgnoreReason::ToleratesDrainTaint);
    }
    let pod_key = key_of(&pod.metadata);
    if let Some(annotation) = pod_opt_out(&pod.metadata)
        && !opts.override_opt_outs
    {
        return PodVerdict::Blocked(Blocker::DoNotDisrupt {
            pod: pod_key,
            annotation,
        });
    }
    if !opts.evict_emptydir && uses_emptydir(pod) {
        return PodVerdict::Blocked(Blocker::EmptyDirRefused { pod: pod_key });
    }
    // A placeholder rotor handed over has no owner any more, but it is no one's bare pod:
    // evicting it only gives back the room it holds.
    if !opts.evict_unmanaged && controller_kind(pod).is_none() && !is_placeholder(pod) {
        return PodVerdict::Blocked(Blocker::UnmanagedRefused { pod: pod_key });
    }
    PodVerdict::Evict {
        tier: eviction_tier(pod),
        grace_period_seconds: grace_period(pod, opts.max_grace_period),
    }
}

/// A pod by identity: the UID goes into the eviction's precondition, so a pod recreated under the
/// same name (a StatefulSet's) is never mistaken for the one evicted.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodRef {
    /// The reference to `pod` (missing fields become empty strings).
    pub fn of(pod: &Pod) -> Self {
        PodRef {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }

    /// What an Event about this pod is regarding.
    pub fn object_reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: Some(self.uid.clone()),
            ..Default::default()
        }
    }
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

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
    /// Critical pods that wait until no ordinary pod is left (not counted in `evict_now`).
    pub deferred: Vec<PodRef>,
    /// Pods that could be evicted but for their budgets (never allowing, or several): what
    /// `--force-after` deletes. Never do-not-disrupt pods.
    pub budget_blocked: Vec<(PodRef, Option<i64>)>,
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
                    plan.withheld.push(pod_ref);
                    continue;
                }
                let consulted = consulted_budgets(pod, &pod_ref, &budgets);
                match budget_blocker(&pod_ref, &consulted, opts.now, &mut plan.judge_budgets_at) {
                    Some(blocker) => {
                        push_unique(&mut plan.blockers, blocker);
                        plan.budget_blocked.push((pod_ref, grace_period_seconds));
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
    for (order, tier, pod_ref, grace) in evictable {
        let later_order = lowest_left.is_some_and(|lowest| order > lowest);
        if later_order || (tier == EvictionTier::Critical && ordinary_left_in.contains(&order)) {
            plan.deferred.push(pod_ref);
        } else {
            plan.evict_now.push((pod_ref, grace));
        }
    }
    // Stable: each group keeps the namespace/name order.
    plan.evict_now
        .sort_by_key(|(pod, _)| !plan.charged.contains_key(&pod.uid));
    plan
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
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;

    use crate::drain::budgets::{DisruptionPace, WOULD_BLOCK, budget_paces};
    use rotor_core::contract::{
        DO_NOT_DISRUPT_ANNOTATION, DRAIN_TAINT_KEY, DrainReason,
        KARPENTER_DO_NOT_DISRUPT_ANNOTATION, TaintEffect, drain_taint,
    };
    use serde_json::{Value, json};

    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn taint() -> Taint {
        drain_taint(DrainReason::Manual, TaintEffect::NoSchedule)
    }

    /// A running ReplicaSet pod on node-1; `extra` is merged into the object (objects merge
    /// recursively, other values replace).
    fn pod(name: &str, extra: Value) -> Pod {
        let mut base = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "shop",
                "uid": format!("uid-{name}"),
                "labels": {"app": "web"},
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f",
                    "uid": "rs-uid", "controller": true, "blockOwnerDeletion": true
                }]
            },
            "spec": {
                "nodeName": "node-1",
                "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "app", "image": "web:1"}],
                "tolerations": [
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                     "effect": "NoExecute", "tolerationSeconds": 300}
                ]
            },
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True"}
            ]}
        });
        merge(&mut base, extra);
        serde_json::from_value(base).expect("valid pod")
    }

    fn merge(base: &mut Value, extra: Value) {
        match (base, extra) {
            (Value::Object(b), Value::Object(e)) => {
                for (k, v) in e {
                    merge(b.entry(k).or_insert(Value::Null), v);
                }
            }
            (b, e) => *b = e,
        }
    }

    fn pdb(name: &str, spec: Value, status: Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "shop", "generation": 1},
            "spec": spec,
            "status": status
        }))
        .expect("valid pdb")
    }

    fn status(expected: i32, allowed: i32) -> Value {
        json!({"observedGeneration": 1, "expectedPods": expected, "currentHealthy": expected,
               "desiredHealthy": expected - allowed, "disruptionsAllowed": allowed})
    }

    fn evict(grace: Option<i64>) -> PodVerdict {
        PodVerdict::Evict {
            tier: EvictionTier::Ordinary,
            grace_period_seconds: grace,
        }
    }

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
    fn ordinary_replicaset_pod_is_evicted_with_its_own_grace_period() {
        let verdict = classify(&pod("web-1", json!({})), &taint(), &DrainOptions::default());
        assert_eq!(verdict, evict(None));
    }

    #[test]
    fn daemonset_pods_are_ignored_even_with_do_not_disrupt() {
        let p = pod(
            "fluentd-x",
            json!({"metadata": {
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                    "name": "fluentd", "uid": "ds", "controller": true}],
                "annotations": {DO_NOT_DISRUPT_ANNOTATION: "true"}
            }}),
        );
        assert_eq!(
            classify(&p, &taint(), &DrainOptions::default()),
            PodVerdict::Ignore(IgnoreReason::DaemonSet)
        );
    }

    #[test]
    fn non_controller_daemonset_owner_does_not_count() {
        let p = pod(
            "odd",
            json!({"metadata": {"ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x", "uid": "ds"}
            ]}}),
        );
        let opts = DrainOptions {
            evict_unmanaged: false,
            ..DrainOptions::default()
        };
        // The only owner is not the controller: the pod is unmanaged.
        assert_eq!(
            classify(&p, &taint(), &opts),
            PodVerdict::Blocked(Blocker::UnmanagedRefused {
                pod: "shop/odd".into()
            })
        );
    }

    #[test]
    fn mirror_pods_are_ignored() {
        let p = pod(
            "kube-apiserver-node-1",
            json!({"metadata": {
                "namespace": "kube-system",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node-1",
                                     "uid": "node-uid", "controller": true}],
                "annotations": {"kubernetes.io/config.mirror": "abc123",
                                "kubernetes.io/config.source": "file"}
            }}),
        );
        assert_eq!(
            classify(&p, &taint(), &DrainOptions::default()),
            PodVerdict::Ignore(IgnoreReason::Mirror)
        );
    }

    #[test]
    fn finished_pods_are_ignored_even_when_terminating() {
        for phase in ["Succeeded", "Failed"] {
            let p = pod(
                "job-1",
                json!({"metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z"},
                       "status": {"phase": phase}}),
            );
            assert_eq!(
                classify(&p, &taint(), &DrainOptions::default()),
                PodVerdict::Ignore(IgnoreReason::Finished),
                "{phase}"
            );
        }
    }

    #[test]
    fn terminating_pods_are_waited_for_not_evicted_again() {
        let p = pod(
            "web-1",
            json!({"metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z",
                                "annotations": {KARPENTER_DO_NOT_DISRUPT_ANNOTATION: "true"}}}),
        );
        assert_eq!(
            classify(&p, &taint(), &DrainOptions::default()),
            PodVerdict::WaitGone
        );
    }

    #[test]
    fn toleration_of_the_drain_taint_leaves_the_pod() {
        let cases = [
            (
                json!({"key": DRAIN_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}),
                true,
            ),
            (json!({"key": DRAIN_TAINT_KEY, "operator": "Exists"}), true),
            (json!({"operator": "Exists"}), true),
            (json!({"operator": "Exists", "effect": "NoSchedule"}), true),
            (
                json!({"key": DRAIN_TAINT_KEY, "value": "manual", "effect": "NoSchedule"}),
                true,
            ),
            (
                json!({"key": DRAIN_TAINT_KEY, "operator": "Equal", "value": "manual"}),
                true,
            ),
            (
                json!({"key": DRAIN_TAINT_KEY, "operator": "Equal", "value": "max-age"}),
                false,
            ),
            (
                json!({"key": DRAIN_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}),
                false,
            ),
            (
                json!({"operator": "Exists", "effect": "PreferNoSchedule"}),
                false,
            ),
            (
                json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}),
                false,
            ),
        ];
        for (toleration, left) in cases {
            let p = pod(
                "web-1",
                json!({"spec": {"tolerations": [toleration.clone()]}}),
            );
            let verdict = classify(&p, &taint(), &DrainOptions::default());
            let expected = if left {
                PodVerdict::Ignore(IgnoreReason::ToleratesDrainTaint)
            } else {
                evict(None)
            };
            assert_eq!(verdict, expected, "{toleration}");
        }
    }

    #[test]
    fn prefer_no_schedule_taint_needs_a_matching_effect() {
        let prefer = drain_taint(DrainReason::MaxAge, TaintEffect::PreferNoSchedule);
        let p = pod(
            "web-1",
            json!({"spec": {"tolerations": [
                {"key": DRAIN_TAINT_KEY, "operator": "Exists", "effect": "PreferNoSchedule"}
            ]}}),
        );
        assert_eq!(
            classify(&p, &prefer, &DrainOptions::default()),
            PodVerdict::Ignore(IgnoreReason::ToleratesDrainTaint)
        );
        assert_eq!(
            classify(&p, &taint(), &DrainOptions::default()),
            evict(None)
        );
    }

    #[test]
    fn do_not_disrupt_blocks_and_names_the_annotation() {
        for annotation in [
            DO_NOT_DISRUPT_ANNOTATION,
            KARPENTER_DO_NOT_DISRUPT_ANNOTATION,
        ] {
            let p = pod(
                "db-0",
                json!({"metadata": {"annotations": {annotation: "true"}}}),
            );
            let verdict = classify(&p, &taint(), &DrainOptions::default());
            assert_eq!(
                verdict,
                PodVerdict::Blocked(Blocker::DoNotDisrupt {
                    pod: "shop/db-0".into(),
                    annotation
                })
            );
        }
        let p = pod(
            "db-0",
            json!({"metadata": {"annotations": {DO_NOT_DISRUPT_ANNOTATION: "false"}}}),
        );
        assert_eq!(
            classify(&p, &taint(), &DrainOptions::default()),
            evict(None)
        );
    }

    #[test]
    fn past_its_replace_by_time_an_opted_out_pod_is_evicted_like_any_other() {
        let opted_out = pod(
            "precious",
            json!({"metadata": {"annotations": {"rotor.dev/do-not-disrupt": "true"}}}),
        );
        assert!(matches!(
            classify(&opted_out, &taint(), &DrainOptions::default()),
            PodVerdict::Blocked(Blocker::DoNotDisrupt { .. })
        ));
        let overridden = DrainOptions {
            override_opt_outs: true,
            ..DrainOptions::default()
        };
        assert!(matches!(
            classify(&opted_out, &taint(), &overridden),
            PodVerdict::Evict { .. }
        ));
    }

    #[test]
    fn emptydir_and_unmanaged_block_only_when_refused() {
        let scratch = pod(
            "cache-1",
            json!({"spec": {"volumes": [{"name": "tmp", "emptyDir": {}},
                                        {"name": "cfg", "configMap": {"name": "cfg"}}]}}),
        );
        let bare = pod("debug", json!({"metadata": {"ownerReferences": null}}));
        let defaults = DrainOptions::default();
        assert_eq!(classify(&scratch, &taint(), &defaults), evict(None));
        assert_eq!(classify(&bare, &taint(), &defaults), evict(None));

        let strict = DrainOptions {
            evict_emptydir: false,
            evict_unmanaged: false,
            max_grace_period: None,
            override_opt_outs: false,
            now: None,
        };
        assert_eq!(
            classify(&scratch, &taint(), &strict),
            PodVerdict::Blocked(Blocker::EmptyDirRefused {
                pod: "shop/cache-1".into()
            })
        );
        assert_eq!(
            classify(&bare, &taint(), &strict),
            PodVerdict::Blocked(Blocker::UnmanagedRefused {
                pod: "shop/debug".into()
            })
        );
        let plain = pod(
            "web-1",
            json!({"spec": {"volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}]}}),
        );
        assert_eq!(classify(&plain, &taint(), &strict), evict(None));
        // Another node's surge placeholder, handed over by its drain (no owner any more): it
        // holds room, not a workload, and is evicted rather than blocking this drain.
        let placeholder = pod(
            "rotor-surge-n1-0123456789abcdef-x7k2q",
            json!({"metadata": {"ownerReferences": null, "labels": {
                "rotor.dev/surge-for": "n1", "app.kubernetes.io/managed-by": "rotor-drainer"}}}),
        );
        assert_eq!(classify(&placeholder, &taint(), &strict), evict(None));
    }

    #[test]
    fn grace_period_is_capped_only_when_longer() {
        let long = pod(
            "slow",
            json!({"spec": {"terminationGracePeriodSeconds": 600}}),
        );
        let short = pod(
            "quick",
            json!({"spec": {"terminationGracePeriodSeconds": 10}}),
        );
        let unset = pod(
            "unset",
            json!({"spec": {"terminationGracePeriodSeconds": null}}),
        );
        let capped = |cap| DrainOptions {
            max_grace_period: cap,
            ..DrainOptions::default()
        };
        assert_eq!(classify(&long, &taint(), &capped(None)), evict(None));
        assert_eq!(
            classify(&long, &taint(), &capped(Some(120))),
            evict(Some(120))
        );
        assert_eq!(classify(&short, &taint(), &capped(Some(120))), evict(None));
        // Unset means the server's default of 30 s.
        assert_eq!(
            classify(&unset, &taint(), &capped(Some(20))),
            evict(Some(20))
        );
        assert_eq!(classify(&unset, &taint(), &capped(Some(40))), evict(None));
        // Zero would delete without a graceful stop; negative means no cap.
        assert_eq!(classify(&long, &taint(), &capped(Some(0))), evict(Some(1)));
        assert_eq!(classify(&long, &taint(), &capped(Some(-1))), evict(None));
    }

    #[test]
    fn critical_tier_by_class_or_priority() {
        let by_class = pod(
            "coredns-1",
            json!({"spec": {"priorityClassName": "system-cluster-critical", "priority": 2000000000}}),
        );
        let node_critical = pod(
            "kube-proxy-x",
            json!({"spec": {"priorityClassName": "system-node-critical"}}),
        );
        let by_value = pod("x", json!({"spec": {"priority": 2000000500}}));
        let high_user = pod(
            "y",
            json!({"spec": {"priorityClassName": "high", "priority": 1000000000}}),
        );
        assert_eq!(eviction_tier(&by_class), EvictionTier::Critical);
        assert_eq!(eviction_tier(&node_critical), EvictionTier::Critical);
        assert_eq!(eviction_tier(&by_value), EvictionTier::Critical);
        assert_eq!(eviction_tier(&high_user), EvictionTier::Ordinary);
        assert!(EvictionTier::Ordinary < EvictionTier::Critical);
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
    fn never_allowing_budgets() {
        let sel = json!({"matchLabels": {"app": "web"}});
        let cases: [(Value, Value, Option<i32>, Option<&str>); 12] = [
            (
                json!({"maxUnavailable": 0}),
                status(3, 0),
                None,
                Some("maxUnavailable is 0"),
            ),
            (
                json!({"maxUnavailable": "0%"}),
                status(3, 0),
                None,
                Some("maxUnavailable is 0%"),
            ),
            (json!({"maxUnavailable": 1}), status(3, 0), None, None),
            (json!({"maxUnavailable": "10%"}), status(3, 0), None, None),
            (
                json!({"minAvailable": "100%"}),
                status(3, 0),
                None,
                Some("minAvailable is 100%"),
            ),
            (
                json!({"minAvailable": 3}),
                status(3, 0),
                None,
                Some("minAvailable 3 leaves no pod to spare out of 3 expected"),
            ),
            (json!({"minAvailable": 2}), status(3, 0), None, None),
            (
                json!({"minAvailable": 2}),
                status(3, 0),
                Some(2),
                Some("minAvailable 2 leaves no pod to spare out of 2 expected"),
            ),
            // ceil(0.9 * 3) = 3: nothing to spare.
            (
                json!({"minAvailable": "90%"}),
                status(3, 0),
                None,
                Some("minAvailable 90% of 3 expected pods is 3: none to spare"),
            ),
            (json!({"minAvailable": "50%"}), status(3, 0), None, None),
            // Unknown expected count: an integer minAvailable cannot be judged.
            (
                json!({"minAvailable": 5}),
                json!({"expectedPods": 0, "disruptionsAllowed": 0}),
                None,
                None,
            ),
            // The budget allows a disruption right now, whatever the spec says.
            (json!({"maxUnavailable": 0}), status(4, 1), None, None),
        ];
        for (mut spec, status, hint, expected) in cases {
            spec["selector"] = sel.clone();
            let budget = pdb("web", spec.clone(), status);
            assert_eq!(
                budget_never_allows(&budget, hint)
                    .map(|n| n.reason)
                    .as_deref(),
                expected,
                "{spec} hint {hint:?}"
            );
        }
    }

    #[test]
    fn stale_budget_status_is_not_trusted_for_counts() {
        let mut budget = pdb(
            "web",
            json!({"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}}),
            status(3, 0),
        );
        assert!(budget_never_allows(&budget, None).is_some());
        budget.metadata.generation = Some(2);
        assert_eq!(budget_never_allows(&budget, None), None);
        // The spec alone still decides for maxUnavailable 0.
        budget.spec.as_mut().unwrap().min_available = None;
        budget.spec.as_mut().unwrap().max_unavailable = Some(IntOrString::Int(0));
        assert!(budget_never_allows(&budget, None).is_some());
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
    fn blocker_lines_name_the_pod_and_the_remedy() {
        let lines = [
            Blocker::DoNotDisrupt {
                pod: "shop/db-0".into(),
                annotation: KARPENTER_DO_NOT_DISRUPT_ANNOTATION,
            }
            .to_string(),
            Blocker::BudgetRefusing {
                budget: "shop/web".into(),
                pod: "shop/web-1".into(),
                message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
            }
            .to_string(),
        ];
        assert!(
            lines[0].contains("shop/db-0") && lines[0].contains("karpenter.sh/do-not-disrupt=true")
        );
        assert!(lines[0].contains("remove the annotation"));
        assert!(
            lines[1].contains("shop/web-1") && lines[1].contains("PodDisruptionBudget shop/web")
        );
        assert!(lines.iter().all(|l| !l.contains('\n')));
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

    #[test]
    fn a_grace_period_longer_than_the_drain_has_left_is_named() {
        let ten_years = 10 * 365 * 24 * 3600;
        let absurd = pod(
            "slow",
            json!({"spec": {"terminationGracePeriodSeconds": ten_years}}),
        );
        let left = std::time::Duration::from_secs(600);
        assert_eq!(grace_outlasts(&absurd, None, left), Some(ten_years));
        // Capped by --max-grace-period: gone in time.
        let capped = grace_period(&absurd, Some(60));
        assert_eq!(capped, Some(60));
        assert_eq!(grace_outlasts(&absurd, capped, left), None);
        // 30 s against a drain with 10 s left.
        let plain = pod("plain", json!({}));
        assert_eq!(
            grace_outlasts(&plain, None, std::time::Duration::from_secs(10)),
            Some(30)
        );
        assert_eq!(grace_outlasts(&plain, None, left), None);
    }

    #[test]
    fn opt_outs_that_are_not_exactly_true_are_named() {
        let p = pod(
            "p",
            json!({"metadata": {"annotations": {
                DO_NOT_DISRUPT_ANNOTATION: "True",
                KARPENTER_DO_NOT_DISRUPT_ANNOTATION: "yes",
            }}}),
        );
        assert_eq!(
            opt_outs_not_honoured(&p),
            [
                (DO_NOT_DISRUPT_ANNOTATION, "True"),
                (KARPENTER_DO_NOT_DISRUPT_ANNOTATION, "yes")
            ]
        );
        assert!(matches!(
            classify(&p, &taint(), &DrainOptions::default()),
            PodVerdict::Evict { .. }
        ));
        for value in ["true", "false"] {
            let p = pod(
                "p",
                json!({"metadata": {"annotations": {DO_NOT_DISRUPT_ANNOTATION: value}}}),
            );
            assert!(opt_outs_not_honoured(&p).is_empty(), "{value}");
        }
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
    }
}
