//! What to do with each pod of a draining node: kubectl drain's filters, done right. [`classify`]
//! gives one pod's [`PodVerdict`]: leave it, wait for it, evict it (in which tier, with which
//! grace period), or what blocks it, named for an operator ([`Blocker`]). The node's plan, which
//! weighs the verdicts against the budgets, is [`crate::drain::node_plan`].

use std::fmt;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use rotor_apimachinery::taints::tolerated_by_any;
use rotor_core::contract::pod_opt_out;

use crate::drain::budgets::{BudgetKey, key_of};

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
/// (see [`crate::drain::node_plan::plan_node`]). Checks run in this order: DaemonSet, mirror, finished, terminating,
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

#[cfg(test)]
mod tests {
    use rotor_core::contract::{
        DO_NOT_DISRUPT_ANNOTATION, DRAIN_TAINT_KEY, DrainReason,
        KARPENTER_DO_NOT_DISRUPT_ANNOTATION, TaintEffect, drain_taint,
    };
    use serde_json::json;

    use super::*;
    use crate::drain::fixtures::{pod, taint};

    fn evict(grace: Option<i64>) -> PodVerdict {
        PodVerdict::Evict {
            tier: EvictionTier::Ordinary,
            grace_period_seconds: grace,
        }
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
}
