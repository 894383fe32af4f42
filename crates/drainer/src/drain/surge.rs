//! Surge: room made for a node's pods before they are evicted, so that they do not wait Pending
//! for capacity. For the pods a controller will recreate, rotor creates placeholder pods that
//! request what the pods request, may go where the pods may go (except the node being drained
//! and any node carrying rotor's taint or cordoned), and have a low priority. A cluster
//! autoscaler or Karpenter adds nodes for pending placeholders; once they are all scheduled, the
//! drain removes them just before its evictions, so the replacements find the room free.
//!
//! Placeholders come in sets: the pods of a node whose placeholders would be the same (same
//! requests, same constraints) get one ReplicaSet of that many replicas, so a drain costs one
//! create per set rather than one per pod. The drain scales its sets to zero to free the room;
//! after a `--surge-timeout` it deletes them but leaves their pods (an orphaning delete): a
//! placeholder a replacement preempts must not be made again.
//!
//! Pure functions over pods and nodes; the creating, waiting and deleting are in
//! [`crate::drain::surge_io`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, Node, Pod, PodAffinityTerm, PodSpec, PodTemplateSpec,
    ResourceRequirements, SeccompProfile, SecurityContext, Taint, Toleration,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::Resource;
use kube::runtime::watcher;
use rotor_apimachinery::conditions::pod_condition;
use rotor_apimachinery::quantity::parse_quantity;
use rotor_apimachinery::scheduling::AUTOSCALER_EXPENDABLE_CUTOFF;
use rotor_apimachinery::taints::tolerates;
use rotor_core::NodeBudget;

use crate::drain::pods::{
    DrainOptions, MANAGED_BY, MANAGED_BY_LABEL, PodVerdict, SURGE_FOR_LABEL, classify,
    controller_kind, is_bound, is_placeholder,
};

/// On every placeholder: the drained node's full name (a label value holds only 63 characters).
pub const SURGE_NODE_ANNOTATION: &str = "rotor.dev/surge-node";
/// On every placeholder set and its pods: which set of the node's placeholders (a hash of
/// their template), so that two sets of one node never claim each other's pods.
pub const SURGE_GROUP_LABEL: &str = "rotor.dev/surge-group";
/// On every placeholder set: the pods it stands for, `namespace/name`, comma-separated.
pub const SURGE_PODS_ANNOTATION: &str = "rotor.dev/surge-for-pods";

/// The taint the node lifecycle controller's cordon implies: a placeholder must not tolerate it,
/// or it could be scheduled onto a cordoned node.
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// The surge flags, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SurgeConfig {
    /// Where placeholders are created (rotor's own namespace).
    pub namespace: String,
    /// The PriorityClass they run at: negative, above the autoscaler's expendable cut-off.
    pub priority_class: String,
    /// The image of their one container; it only has to start and sleep.
    pub image: String,
    /// How long a drain waits for its placeholders to be scheduled before evicting anyway.
    pub timeout: Duration,
    /// How many nodes' placeholders may be outstanding at once; `None`: one per running drain.
    pub max_surge: Option<NodeBudget>,
}

/// The label value naming `node`: its name when that is a valid label value (63 characters at
/// most, which most node names are), else a hash of it. The full name is in
/// [`SURGE_NODE_ANNOTATION`].
pub fn surge_label_value(node: &str) -> String {
    let valid = !node.is_empty()
        && node.len() <= 63
        && node
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && node.starts_with(|c: char| c.is_ascii_alphanumeric())
        && node.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        node.to_string()
    } else {
        format!("node-{:016x}", fnv1a(node.as_bytes()))
    }
}

/// The label selector of `node`'s placeholders.
pub fn placeholder_selector(node: &str) -> String {
    format!(
        "{SURGE_FOR_LABEL}={},{MANAGED_BY_LABEL}={MANAGED_BY}",
        surge_label_value(node)
    )
}

/// The label selector of every placeholder rotor made.
pub fn all_placeholders_selector() -> String {
    format!("{SURGE_FOR_LABEL},{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// The drained node a placeholder, or a placeholder set, stands in for.
pub fn placeholder_node<K: Resource>(object: &K) -> Option<&str> {
    object
        .meta()
        .annotations
        .as_ref()?
        .get(SURGE_NODE_ANNOTATION)
        .map(String::as_str)
}

/// The pods on a node that need room elsewhere: those the drain will evict and that a
/// controller recreates. A pod nobody recreates (a bare pod) needs no room; a pod that stays
/// (DaemonSet, mirror, tolerating the taint, opted out) neither.
pub fn pods_needing_room<'a>(
    pods: &'a [Pod],
    drain_taint: &Taint,
    opts: &DrainOptions,
) -> Vec<&'a Pod> {
    pods.iter()
        .filter(|pod| !is_placeholder(pod))
        .filter(|pod| matches!(classify(pod, drain_taint, opts), PodVerdict::Evict { .. }))
        .filter(|pod| controller_kind(pod).is_some())
        .collect()
}

/// What the scheduler reserves for `pod`, per resource, in thousandths: the larger of its
/// containers' requests together (with sidecars, init containers that keep running) and its
/// largest ordinary init container, plus its overhead. Quantities that do not parse count as
/// zero (the API server has already validated them).
pub fn effective_requests(pod: &Pod) -> BTreeMap<String, i128> {
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeMap::new();
    };
    let requests = |c: &Container| -> BTreeMap<String, i128> {
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .map(|r| {
                r.iter()
                    .map(|(k, q)| (k.clone(), parse_quantity(&q.0).map_or(0, |q| q.to_milli())))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut running: BTreeMap<String, i128> = BTreeMap::new();
    let mut init_peak: BTreeMap<String, i128> = BTreeMap::new();
    let inits = spec.init_containers.iter().flatten();
    for c in inits {
        if c.restart_policy.as_deref() == Some("Always") {
            for (k, v) in requests(c) {
                *running.entry(k).or_default() += v;
            }
        } else {
            for (k, v) in requests(c) {
                let peak = init_peak.entry(k).or_default();
                *peak = (*peak).max(v);
            }
        }
    }
    for c in &spec.containers {
        for (k, v) in requests(c) {
            *running.entry(k).or_default() += v;
        }
    }
    for (k, v) in init_peak {
        let total = running.entry(k).or_default();
        *total = (*total).max(v);
    }
    for (k, q) in spec.overhead.iter().flatten() {
        *running.entry(k.clone()).or_default() += parse_quantity(&q.0).map_or(0, |q| q.to_milli());
    }
    running.retain(|_, v| *v > 0);
    running
}

/// A quantity in thousandths as the API writes it back: whole units when it has no fraction,
/// else milli-units (CPU is always written in millicores).
fn quantity_of(milli: i128) -> Quantity {
    if milli % 1000 == 0 {
        Quantity((milli / 1000).to_string())
    } else {
        Quantity(format!("{milli}m"))
    }
}

/// The placeholder sets for `pods` (those that need room, see [`pods_needing_room`]) on
/// `node`'s drain (whose taint is `drain_taint`): one ReplicaSet per group of pods whose
/// placeholders would be the same, with one replica per pod, in the order of each group's first
/// pod. Pods that request nothing need no room and are left out.
pub fn placeholder_sets(
    pods: &[&Pod],
    node: &Node,
    drain_taint: &Taint,
    cfg: &SurgeConfig,
) -> Vec<ReplicaSet> {
    let node_name = node.metadata.name.clone().unwrap_or_default();
    // The group key is the template itself: equal templates are interchangeable room.
    let mut groups: Vec<(String, PodTemplateSpec, Vec<String>)> = Vec::new();
    for pod in pods {
        let Some(template) = placeholder_template(pod, node, drain_taint, cfg) else {
            continue;
        };
        let key = serde_json::to_string(&template).unwrap_or_default();
        let who = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        match groups.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, _, members)) => members.push(who),
            None => groups.push((key, template, vec![who])),
        }
    }
    groups
        .into_iter()
        .map(|(key, mut template, members)| {
            let group = format!("{:016x}", fnv1a(key.as_bytes()));
            let mut labels = template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.clone())
                .unwrap_or_default();
            labels.insert(SURGE_GROUP_LABEL.to_string(), group.clone());
            if let Some(meta) = template.metadata.as_mut() {
                meta.labels = Some(labels.clone());
            }
            let annotations = BTreeMap::from([
                (SURGE_NODE_ANNOTATION.to_string(), node_name.clone()),
                (SURGE_PODS_ANNOTATION.to_string(), members.join(",")),
            ]);
            ReplicaSet {
                metadata: ObjectMeta {
                    name: Some(placeholder_set_name(&node_name, &group)),
                    namespace: Some(cfg.namespace.clone()),
                    labels: Some(labels.clone()),
                    annotations: Some(annotations),
                    // Owned by the drained node: when the node is deleted, the garbage
                    // collector removes the set, and its placeholders, if rotor did not.
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: node_name.clone(),
                        uid: node.metadata.uid.clone().unwrap_or_default(),
                        controller: Some(true),
                        block_owner_deletion: None,
                    }]),
                    ..ObjectMeta::default()
                },
                spec: Some(ReplicaSetSpec {
                    replicas: Some(members.len() as i32),
                    selector: LabelSelector {
                        match_labels: Some(labels),
                        ..LabelSelector::default()
                    },
                    template: Some(template),
                    ..ReplicaSetSpec::default()
                }),
                status: None,
            }
        })
        .collect()
}

/// How many placeholders `sets` ask for in all.
pub fn placeholders_wanted(sets: &[ReplicaSet]) -> usize {
    sets.iter()
        .filter_map(|s| s.spec.as_ref()?.replicas)
        .map(|r| r.max(0) as usize)
        .sum()
}

/// The placeholder template for `pod`, on `node`'s drain; `None` when the pod requests
/// nothing, so there is nothing to reserve.
fn placeholder_template(
    pod: &Pod,
    node: &Node,
    drain_taint: &Taint,
    cfg: &SurgeConfig,
) -> Option<PodTemplateSpec> {
    let requests = effective_requests(pod);
    if requests.is_empty() {
        return None;
    }
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let pod_namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let labels = BTreeMap::from([
        (SURGE_FOR_LABEL.to_string(), surge_label_value(&node_name)),
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
    ]);
    let annotations = BTreeMap::from([(SURGE_NODE_ANNOTATION.to_string(), node_name.clone())]);
    Some(PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            priority_class_name: Some(cfg.priority_class.clone()),
            // Preempted at once when a real pod needs the room.
            termination_grace_period_seconds: Some(0),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            node_selector: spec.node_selector.clone(),
            affinity: placeholder_affinity(spec.affinity.clone(), &pod_namespace),
            tolerations: placeholder_tolerations(spec.tolerations.as_deref(), drain_taint),
            // Topology spread is left out: it counts pods in the placeholder's own namespace,
            // where the workload's pods are not, so it could not constrain anything.
            containers: vec![Container {
                name: "reserve".into(),
                image: Some(cfg.image.clone()),
                resources: Some(ResourceRequirements {
                    requests: Some(
                        requests
                            .into_iter()
                            .map(|(k, v)| (k, quantity_of(v)))
                            .collect(),
                    ),
                    ..ResourceRequirements::default()
                }),
                // What the Pod Security Standards' "restricted" level asks, which rotor's
                // namespace enforces.
                security_context: Some(SecurityContext {
                    run_as_non_root: Some(true),
                    run_as_user: Some(65_535),
                    seccomp_profile: Some(SeccompProfile {
                        type_: "RuntimeDefault".into(),
                        ..SeccompProfile::default()
                    }),
                    allow_privilege_escalation: Some(false),
                    read_only_root_filesystem: Some(true),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".into()]),
                        ..Capabilities::default()
                    }),
                    ..SecurityContext::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    })
}

/// A name that is the same every time for the same node and set, so that creating the sets
/// again (ahead of the drain, then at its start, or after a restart) finds them (409) instead
/// of doubling them.
pub fn placeholder_set_name(node: &str, group: &str) -> String {
    let hash = fnv1a(format!("{node}\n{group}").as_bytes());
    format!("{}{hash:016x}", placeholder_name_start(node))
}

/// How the names of `node`'s placeholder sets, and so of their pods, begin: `rotor-surge-`, at
/// most the node name's first 40 characters, ending in a letter or digit, and `-` (53 at most,
/// within the 58 characters the API server keeps of a pod's `generateName`, the set's name,
/// before the random suffix).
pub fn placeholder_name_start(node: &str) -> String {
    let prefix: String = node.chars().take(40).collect();
    let prefix = prefix.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("rotor-surge-{prefix}-")
}

/// The pod's affinity, with its pod (anti-)affinity terms pinned to the pod's namespace (a
/// term without namespaces means the pod's own namespace, which for the placeholder would be
/// rotor's). Nothing names the drained node: the placeholder stays off it, and off every
/// cordoned or draining node, because it tolerates neither rotor's taint nor the cordon
/// ([`placeholder_tolerations`]). A `matchFields` term on `metadata.name`, or a
/// `kubernetes.io/hostname` requirement, would make Karpenter ignore the placeholder (it
/// rejects both in a pod's node affinity), and it would never get a node.
fn placeholder_affinity(affinity: Option<Affinity>, pod_namespace: &str) -> Option<Affinity> {
    let mut affinity = affinity?;
    if let Some(pa) = affinity.pod_affinity.as_mut() {
        pin_terms(
            &mut pa.required_during_scheduling_ignored_during_execution,
            &mut pa.preferred_during_scheduling_ignored_during_execution,
            pod_namespace,
        );
    }
    if let Some(pa) = affinity.pod_anti_affinity.as_mut() {
        pin_terms(
            &mut pa.required_during_scheduling_ignored_during_execution,
            &mut pa.preferred_during_scheduling_ignored_during_execution,
            pod_namespace,
        );
    }
    Some(affinity)
}

/// Whether `node` keeps placeholders off itself: its drain taint forbids scheduling
/// (`NoSchedule`, `NoExecute`) or it is cordoned. Placeholders name no node
/// ([`placeholder_affinity`]), so room is made ahead only for such a node: with a
/// `PreferNoSchedule` drain taint and no cordon yet, a placeholder could land on the node it
/// stands in for. Its drain makes the room after its cordon.
pub fn keeps_placeholders_off(node: &Node, drain_taint: &Taint) -> bool {
    matches!(drain_taint.effect.as_str(), "NoSchedule" | "NoExecute")
        || crate::record::node::cordoned(node)
}

/// Gives each pod (anti-)affinity term without namespaces the pod's own namespace, which is
/// what such a term meant for the pod.
fn pin_terms(
    required: &mut Option<Vec<PodAffinityTerm>>,
    preferred: &mut Option<Vec<WeightedPodAffinityTerm>>,
    pod_namespace: &str,
) {
    let pin = |term: &mut PodAffinityTerm| {
        let has_namespaces = term.namespaces.as_ref().is_some_and(|n| !n.is_empty());
        if !has_namespaces && term.namespace_selector.is_none() {
            term.namespaces = Some(vec![pod_namespace.to_string()]);
        }
    };
    required.iter_mut().flatten().for_each(pin);
    preferred
        .iter_mut()
        .flatten()
        .for_each(|w| pin(&mut w.pod_affinity_term));
}

/// The pod's tolerations, less any that would let the placeholder onto a node being drained
/// (rotor's taint) or a cordoned one: room there is about to go.
fn placeholder_tolerations(
    tolerations: Option<&[Toleration]>,
    drain_taint: &Taint,
) -> Option<Vec<Toleration>> {
    let cordoned = Taint {
        key: UNSCHEDULABLE_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    let kept: Vec<Toleration> = tolerations?
        .iter()
        .filter(|t| !tolerates(t, drain_taint) && !tolerates(t, &cordoned))
        .cloned()
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// How far a node's reservation has got.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reservation {
    /// Placeholders that exist and are bound to a node.
    pub scheduled: usize,
    /// Placeholders that exist and wait for a node (`namespace/name`, the scheduler's reason).
    pub pending: Vec<(String, Option<String>)>,
}

/// What a placeholder its set has not made yet is listed as, while the drain waits for it.
pub const NOT_CREATED: &str = "(not created yet)";

impl Reservation {
    /// Reads the placeholders of one node, of which its sets want `wanted`: those the sets have
    /// not made yet count as pending. One that is gone once made (preempted already, or
    /// deleted) no longer holds room and is not waited for: `wanted` is only a floor on how
    /// many must have been seen.
    pub fn of<'a>(placeholders: impl IntoIterator<Item = &'a Pod>, wanted: usize) -> Reservation {
        let mut r = Reservation::default();
        let mut seen = 0;
        for p in placeholders
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            seen += 1;
            if is_bound(p) {
                r.scheduled += 1;
            } else {
                let reason =
                    pod_condition(p, "PodScheduled", "False").and_then(|c| c.message.clone());
                r.pending.push((
                    format!(
                        "{}/{}",
                        p.metadata.namespace.as_deref().unwrap_or_default(),
                        p.metadata.name.as_deref().unwrap_or_default()
                    ),
                    reason,
                ));
            }
        }
        for _ in seen..wanted {
            r.pending.push((NOT_CREATED.to_string(), None));
        }
        r
    }

    /// Every placeholder that still exists has a node.
    pub fn complete(&self) -> bool {
        self.pending.is_empty()
    }
}

/// The placeholders (or placeholder sets) no drain needs any more: those whose node is gone or is not being drained
/// (`draining` says whether a node's drain is active). A new leader removes them, so a crash
/// between creating placeholders and removing them leaves nothing behind for long.
pub fn orphaned<K: Resource>(placeholders: &[K], draining: impl Fn(&str) -> bool) -> Vec<&K> {
    placeholders
        .iter()
        .filter(|p| placeholder_node(*p).is_none_or(|node| !draining(node)))
        .collect()
}

/// The reason the scheduler gives on a pod it preempts: it sets the pod's `DisruptionTarget`
/// condition with it before it deletes the pod.
const PREEMPTED_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// Whether the scheduler preempted `pod` (its `DisruptionTarget` condition says so).
pub fn preempted_by_scheduler(pod: &Pod) -> bool {
    pod_condition(pod, "DisruptionTarget", "True")
        .is_some_and(|c| c.reason.as_deref() == Some(PREEMPTED_BY_SCHEDULER))
}

/// The placeholders a watch of them has shown preempted, each counted once however often it is
/// shown: the scheduler's status patch, the deletion, and any relist while it terminates.
#[derive(Debug, Default)]
pub struct PreemptedPlaceholders {
    /// The UIDs of those counted that the watch may show again (not yet shown deleted).
    counted: BTreeSet<String>,
    /// While the watch lists again, the UIDs listed so far.
    relisted: Option<BTreeSet<String>>,
}

impl PreemptedPlaceholders {
    /// Reads one event of the watch: the placeholder it shows preempted for the first time.
    pub fn observe(&mut self, event: watcher::Event<Pod>) -> Option<Pod> {
        match event {
            watcher::Event::Init => {
                self.relisted = Some(BTreeSet::new());
                None
            }
            watcher::Event::InitApply(pod) => {
                if let (Some(listed), Some(uid)) = (&mut self.relisted, &pod.metadata.uid) {
                    listed.insert(uid.clone());
                }
                self.first_sight(pod)
            }
            watcher::Event::InitDone => {
                // One deleted while the watch was down is never shown deleted.
                if let Some(listed) = self.relisted.take() {
                    self.counted.retain(|uid| listed.contains(uid));
                }
                None
            }
            watcher::Event::Apply(pod) => self.first_sight(pod),
            watcher::Event::Delete(pod) => {
                let uid = pod.metadata.uid.clone();
                let preempted = self.first_sight(pod);
                if let Some(uid) = uid {
                    self.counted.remove(&uid);
                }
                preempted
            }
        }
    }

    fn first_sight(&mut self, pod: Pod) -> Option<Pod> {
        let uid = pod.metadata.uid.clone()?;
        (preempted_by_scheduler(&pod) && self.counted.insert(uid)).then_some(pod)
    }
}

/// Whether another node may reserve room now: fewer than `--max-surge` nodes hold
/// placeholders (`holding`), the cap read against the fleet's size.
pub fn may_surge(max_surge: Option<NodeBudget>, holding: usize, fleet_size: usize) -> bool {
    max_surge.is_none_or(|cap| holding < cap.resolve(fleet_size).max(1))
}

/// What is wrong with a placeholder priority of `value`, if anything: placeholders must be
/// preempted by ordinary pods (priority 0 by default) and must still make an autoscaler act.
pub fn priority_warning(value: i32) -> Option<String> {
    if value >= 0 {
        Some(format!(
            "the surge PriorityClass has value {value}: pods of priority 0 (the default) cannot preempt its placeholders, so evicted pods may wait for the room the placeholders hold; use a negative value such as -5"
        ))
    } else if value < AUTOSCALER_EXPENDABLE_CUTOFF {
        Some(format!(
            "the surge PriorityClass has value {value}, below cluster-autoscaler's default expendable cut-off ({AUTOSCALER_EXPENDABLE_CUTOFF}): it adds no node for such pending placeholders; use a value from {AUTOSCALER_EXPENDABLE_CUTOFF} to -1"
        ))
    } else {
        None
    }
}

/// How long after a drain freed its room no room is made ahead: the evicted pods' replacements
/// are made and scheduled within about a second of it. A placeholder pending meanwhile would be
/// scheduled into the freed room first (where nodes are packed full, the only room there is),
/// and each replacement that then finds none preempts it and waits the scheduler's back-off.
pub const AHEAD_AFTER_FREED: Duration = Duration::from_secs(2);

/// How long after a drain starts no room is made ahead: a drain whose room was made ahead and
/// is ready frees it a few hundred milliseconds in (and then [`AHEAD_AFTER_FREED`] holds on from
/// there). One whose room is not ready waits for the provisioner, and room made ahead meanwhile
/// is pending beside its own: still pending when the drain's own are placed, it takes the room
/// the drain frees. Holding it off until the drain has freed its room did not measurably change
/// that (one run): it can then take the room freed for pods the budgets still hold back
/// (docs/benchmarks.md, "Where the room made ahead goes at one node at a time").
pub const AHEAD_AFTER_START: Duration = Duration::from_secs(1);

/// The nodes next in line whose room made ahead waits while a drain's room changes hands
/// ([`AHEAD_AFTER_START`], [`AHEAD_AFTER_FREED`]), in the order they were asked for. The wait
/// has no cap: the room it protects is what surge is for. Where drains start or free their room
/// less than a couple of seconds apart it may never end, and nodes start as with
/// `--surge-ahead 0` (each drain makes its own room); a node whose drain starts leaves the queue.
#[derive(Debug, Default)]
pub struct AheadQueue {
    waiting: Vec<String>,
}

impl AheadQueue {
    /// `node` is next in line: returned when its room may be made now (no drain's room is
    /// changing hands, `quiet`, and nothing waits before it), else queued.
    pub fn reserve(&mut self, node: String, quiet: bool) -> Option<String> {
        if quiet && self.waiting.is_empty() {
            return Some(node);
        }
        if !self.waiting.contains(&node) {
            self.waiting.push(node);
        }
        None
    }

    /// `node` left the line: true when its room may have been made and must be removed, false
    /// when it was still waiting here (nothing was made; it is forgotten).
    pub fn release(&mut self, node: &str) -> bool {
        let before = self.waiting.len();
        self.waiting.retain(|n| n != node);
        self.waiting.len() == before
    }

    /// `node`'s drain starts: it makes its own room, so nothing is made ahead for it any more.
    pub fn started(&mut self, node: &str) {
        self.waiting.retain(|n| n != node);
    }

    /// The nodes whose room may be made now: all that wait, once it is `quiet`.
    pub fn due(&mut self, quiet: bool) -> Vec<String> {
        if quiet {
            std::mem::take(&mut self.waiting)
        } else {
            Vec::new()
        }
    }

    /// A new term: the earlier term's line is gone.
    pub fn clear(&mut self) {
        self.waiting.clear();
    }
}

/// FNV-1a, 64 bits: a hash that stays the same across rotor versions and platforms, for names.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

mod pending;
pub use pending::{OthersPending, PendingPlaceholders};

#[cfg(test)]
pub(crate) mod tests;
