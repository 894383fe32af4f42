//! The simulated kube-scheduler: binds pending pods to nodes that are Ready, schedulable, whose
//! taints the pod tolerates, that match its nodeSelector, have room for its requests and pod
//! count, and keep its hostname topology-spread constraints. Among the feasible nodes it prefers
//! the one with the fewest pods of the same controller (kube-scheduler's default spreading), then
//! the least allocated; equal nodes are told apart by where each pod's scan starts, a hash of its
//! name, as the real scheduler picks at random among equal scores. Placement is a pure function
//! over `NodeSlot`s; `Cluster::schedule` runs it at every step and binds at the pace
//! `timing.bindTime` allows.

// A file beside this one (not under it), so that mod.rs names it without naming this file.
#[path = "scheduler_memory.rs"]
pub(super) mod memory;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use rotor_apimachinery::conditions::pod_condition;
use rotor_apimachinery::labels::LabelSelector;

use super::objects::{
    RequestsMemo, Resources, WORK_PENDING, bind_and_start, controller_of, fnv, node_allocatable,
    node_name, node_ready, node_taints, node_unschedulable, pod_requests,
    set_pod_condition_with_reason, terminal, terminating,
};
use super::pods::Removal;
use super::priority;
use super::worker::midway;
use super::{Cluster, earliest};
use crate::meta::DeleteOptions;
use crate::store::ObjKey;

/// What the scheduler knows about one node.
#[derive(Clone, Debug)]
pub struct NodeSlot {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Ready, not cordoned, not being deleted.
    pub schedulable: bool,
    pub free: Resources,
    pub free_pods: i64,
    pub allocatable: Resources,
}

impl NodeSlot {
    pub fn from_node(node: &Node) -> Self {
        let (alloc, pods) = node_allocatable(node);
        NodeSlot {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: node_taints(node).to_vec(),
            schedulable: node_ready(node)
                && !node_unschedulable(node)
                && node.metadata.deletion_timestamp.is_none(),
            free: alloc,
            free_pods: pods,
            allocatable: alloc,
        }
    }

    /// Account for a pod already running here.
    pub fn take(&mut self, r: Resources) {
        self.free = self.free.minus(&r);
        self.free_pods -= 1;
    }
}

pub use rotor_apimachinery::taints::untolerated;

/// A hostname spread constraint a pod must keep.
#[derive(Clone, Debug)]
struct Spread {
    key: String,
    max_skew: i32,
    selector: LabelSelector,
}

fn hostname_spreads(pod: &Pod) -> Vec<Spread> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.topology_spread_constraints.iter().flatten())
        .filter(|c| {
            c.topology_key == "kubernetes.io/hostname" && c.when_unsatisfiable == "DoNotSchedule"
        })
        .filter_map(|c| {
            let v = serde_json::to_value(c.label_selector.as_ref()?).ok()?;
            let selector = LabelSelector::from_structured(&v).ok()?;
            Some(Spread {
                key: format!("{ns}|{v}"),
                max_skew: c.max_skew,
                selector,
            })
        })
        .collect()
}

/// Per-node counts of pods matching each spread constraint, built lazily.
#[derive(Default)]
pub struct SpreadCounts {
    counts: HashMap<String, HashMap<String, i32>>,
}

/// The scheduler's decision for one pod.
#[derive(Debug, PartialEq, Eq)]
pub enum Placement {
    Bind(String),
    Unschedulable(String),
}

pub struct Scheduler<'a> {
    pub slots: Vec<NodeSlot>,
    /// Pods already bound and not finished, used for spread counts.
    pub placed: &'a [&'a Pod],
    spread: SpreadCounts,
    /// Per controller (by uid), how many of its pods each node runs; counted on first use.
    siblings: Option<HashMap<String, HashMap<String, i32>>>,
    /// The victims of this pass's preemptions so far, `(namespace, name)`: still in `placed`,
    /// but their room is already counted for the pod that preempted them.
    preempted: HashSet<(String, String)>,
}

/// How many feasible nodes to compare before choosing. kube-scheduler compares every node of a
/// cluster under 100 nodes and at least 100 on larger ones (more by percentageOfNodesToScore:
/// 1,000 at 20,000 nodes); 100 keeps the simulator's placement cheap at that scale.
const NODES_TO_SCORE: usize = 100;

/// Per controller uid, how many of its running pods each node holds, in one pass over `placed`
/// (uids are unique across namespaces).
fn count_siblings(placed: &[&Pod]) -> HashMap<String, HashMap<String, i32>> {
    let mut counts: HashMap<String, HashMap<String, i32>> = HashMap::new();
    for p in placed {
        let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let (Some(owner), Some(node), None) = (
            controller_of(&p.metadata),
            node,
            &p.metadata.deletion_timestamp,
        ) else {
            continue;
        };
        if !counts.contains_key(&owner.uid) {
            counts.insert(owner.uid.clone(), HashMap::new());
        }
        let per_node = counts.get_mut(&owner.uid).expect("inserted above");
        match per_node.get_mut(node) {
            Some(c) => *c += 1,
            None => {
                per_node.insert(node.to_string(), 1);
            }
        }
    }
    counts
}

impl<'a> Scheduler<'a> {
    pub fn new(slots: Vec<NodeSlot>, placed: &'a [&'a Pod]) -> Self {
        Scheduler {
            slots,
            placed,
            spread: SpreadCounts::default(),
            siblings: None,
            preempted: HashSet::new(),
        }
    }

    fn counts_for(&mut self, ns: &str, s: &Spread) -> &mut HashMap<String, i32> {
        let placed = self.placed;
        self.spread.counts.entry(s.key.clone()).or_insert_with(|| {
            let mut m = HashMap::new();
            let empty = BTreeMap::new();
            for p in placed {
                if p.metadata.namespace.as_deref() == Some(ns)
                    && p.metadata.deletion_timestamp.is_none()
                    && s.selector
                        .matches(p.metadata.labels.as_ref().unwrap_or(&empty))
                    && let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone())
                {
                    *m.entry(n).or_insert(0) += 1;
                }
            }
            m
        })
    }

    fn matches_selector(pod: &Pod, slot: &NodeSlot) -> bool {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_selector.as_ref())
            .is_none_or(|sel| sel.iter().all(|(k, v)| slot.labels.get(k) == Some(v)))
    }

    /// Picks a node for `pod` and records it there, or says why nothing fits.
    pub fn place(&mut self, pod: &Pod) -> Placement {
        let req = pod_requests(pod);
        let tolerations: Vec<Toleration> = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.clone())
            .unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let spreads = hostname_spreads(pod);
        // Minimum count per constraint over the nodes the pod could be placed on by selector
        // (taints ignored, as with the default nodeTaintsPolicy).
        let mut minimums = Vec::new();
        for s in &spreads {
            let names: Vec<String> = self
                .slots
                .iter()
                .filter(|sl| Self::matches_selector(pod, sl))
                .map(|sl| sl.name.clone())
                .collect();
            let counts = self.counts_for(&ns, s);
            let min = names
                .iter()
                .map(|n| counts.get(n).copied().unwrap_or(0))
                .min()
                .unwrap_or(0);
            minimums.push(min);
        }
        let controller = controller_of(&pod.metadata).map(|o| o.uid.clone());
        if controller.is_some() && self.siblings.is_none() {
            self.siblings = Some(count_siblings(self.placed));
        }
        let siblings = controller
            .as_ref()
            .and_then(|uid| self.siblings.as_ref()?.get(uid));
        let n = self.slots.len();
        let start = fnv(&format!(
            "{ns}/{}",
            pod.metadata.name.as_deref().unwrap_or("")
        )) as usize
            % n.max(1);
        // (fewest pods of the same controller, least allocated): higher is better.
        let mut best: Option<(usize, (i32, i128))> = None;
        let mut seen = 0;
        let mut reasons: BTreeMap<&'static str, usize> = BTreeMap::new();
        for i in 0..n {
            let idx = (start + i) % n;
            let slot = &self.slots[idx];
            let reason = if !slot.schedulable {
                Some("node(s) were unschedulable or not ready")
            } else if !Self::matches_selector(pod, slot) {
                Some("node(s) didn't match Pod's node affinity/selector")
            } else if untolerated(&tolerations, &slot.taints).is_some() {
                Some("node(s) had untolerated taint")
            } else if slot.free_pods <= 0 {
                Some("Too many pods")
            } else if !req.fits_within(&slot.free) {
                Some("Insufficient cpu or memory")
            } else {
                let mut skewed = false;
                for (s, min) in spreads.iter().zip(&minimums) {
                    let c = self
                        .spread
                        .counts
                        .get(&s.key)
                        .and_then(|m| m.get(&slot.name))
                        .copied()
                        .unwrap_or(0);
                    if c + 1 - min > s.max_skew {
                        skewed = true;
                    }
                }
                skewed.then_some("node(s) didn't match pod topology spread constraints")
            };
            if let Some(r) = reason {
                *reasons.entry(r).or_default() += 1;
                continue;
            }
            // Spread first, as kube-scheduler's default topology spreading outweighs its
            // resource scores; then least allocated, the most free relative to allocatable.
            let spread = -siblings
                .and_then(|m| m.get(&slot.name))
                .copied()
                .unwrap_or(0);
            let free = slot.free.cpu * 1000 / slot.allocatable.cpu.max(1)
                + slot.free.memory * 1000 / slot.allocatable.memory.max(1);
            let score = (spread, free);
            // The first of equal scores wins: the scan's start, a hash of the pod's name, is
            // the tie-break.
            if best.is_none_or(|(_, b)| score > b) {
                best = Some((idx, score));
            }
            seen += 1;
            if seen >= NODES_TO_SCORE {
                break;
            }
        }
        match best {
            Some((idx, _)) => {
                let name = self.slots[idx].name.clone();
                self.slots[idx].take(req);
                for s in &spreads {
                    *self.counts_for(&ns, s).entry(name.clone()).or_insert(0) += 1;
                }
                if let (Some(uid), Some(all)) = (controller, self.siblings.as_mut()) {
                    *all.entry(uid).or_default().entry(name.clone()).or_insert(0) += 1;
                }
                Placement::Bind(name)
            }
            None => {
                let detail = reasons
                    .iter()
                    .map(|(r, c)| format!("{c} {r}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                Placement::Unschedulable(format!("0/{n} nodes are available: {detail}."))
            }
        }
    }
}

/// Where a pod that fits nowhere could run if lower-priority pods made way: a node it may run
/// on (Ready, schedulable, selector, taints) where removing pods of lower priority, lowest
/// first, frees enough room. The node needing the fewest victims wins, then the one whose
/// highest victim priority is lowest. Like the real scheduler's preemption, simplified: no
/// PodDisruptionBudget preference, no topology spread.
#[derive(Debug, PartialEq, Eq)]
pub struct Preemption {
    pub node: String,
    /// The pods to remove, `(namespace, name)`.
    pub victims: Vec<(String, String)>,
}

impl Scheduler<'_> {
    /// Counts a preemption's outcome on its node for the rest of this pass: the victims' room
    /// freed, the preemptor's taken, so that no later pod takes what was made for it.
    pub fn reserve(&mut self, preemption: &Preemption, pod: &Pod) {
        let freed = preemption
            .victims
            .iter()
            .fold(Resources::default(), |acc, (ns, name)| {
                self.placed
                    .iter()
                    .find(|p| {
                        p.metadata.namespace.as_deref() == Some(ns.as_str())
                            && p.metadata.name.as_deref() == Some(name.as_str())
                    })
                    .map_or(acc, |p| acc.plus(&pod_requests(p)))
            });
        if let Some(slot) = self.slots.iter_mut().find(|s| s.name == preemption.node) {
            slot.free = slot.free.plus(&freed).minus(&pod_requests(pod));
            slot.free_pods += preemption.victims.len() as i64 - 1;
        }
        // A victim goes once: a later pod of this pass must not count its room again.
        self.preempted.extend(preemption.victims.iter().cloned());
    }

    pub fn preemption(&self, pod: &Pod) -> Option<Preemption> {
        if !super::priority::may_preempt(pod) {
            return None;
        }
        let req = pod_requests(pod);
        let own = super::priority::priority(pod);
        let tolerations: Vec<Toleration> = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.clone())
            .unwrap_or_default();
        let mut best: Option<(usize, i32, Preemption)> = None;
        for slot in &self.slots {
            if !slot.schedulable
                || !Self::matches_selector(pod, slot)
                || untolerated(&tolerations, &slot.taints).is_some()
            {
                continue;
            }
            let mut lower: Vec<&Pod> = self
                .placed
                .iter()
                .copied()
                .filter(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(slot.name.as_str())
                        && p.metadata.deletion_timestamp.is_none()
                        && super::priority::priority(p) < own
                        && !self.preempted.contains(&(
                            p.metadata.namespace.clone().unwrap_or_default(),
                            p.metadata.name.clone().unwrap_or_default(),
                        ))
                })
                .collect();
            lower.sort_by_key(|p| super::priority::priority(p));
            let (mut free, mut free_pods) = (slot.free, slot.free_pods);
            let mut victims = Vec::new();
            let mut highest = i32::MIN;
            for v in lower {
                if free_pods > 0 && req.fits_within(&free) {
                    break;
                }
                free = free.plus(&pod_requests(v));
                free_pods += 1;
                highest = highest.max(super::priority::priority(v));
                victims.push((
                    v.metadata.namespace.clone().unwrap_or_default(),
                    v.metadata.name.clone().unwrap_or_default(),
                ));
            }
            if victims.is_empty() || free_pods <= 0 || !req.fits_within(&free) {
                continue;
            }
            let better = best
                .as_ref()
                .is_none_or(|(n, h, _)| (victims.len(), highest) < (*n, *h));
            if better {
                best = Some((
                    victims.len(),
                    highest,
                    Preemption {
                        node: slot.name.clone(),
                        victims,
                    },
                ));
            }
        }
        best.map(|(_, _, p)| p)
    }
}

impl Cluster {
    /// How many pending pods the scheduler has found unschedulable.
    pub fn unschedulable_pods(&self) -> usize {
        self.scheduler.unschedulable_since.len()
    }

    /// When each pod the scheduler found unschedulable was first found so, by key.
    pub(super) fn unschedulable_since(&self) -> &BTreeMap<ObjKey, Timestamp> {
        &self.scheduler.unschedulable_since
    }

    /// The unschedulable pods that count as waiting: placeholders (priority below 0) wait for
    /// room on purpose; workloads' pods count.
    pub(super) fn pods_waiting(&self) -> usize {
        self.scheduler
            .unschedulable_since
            .keys()
            .filter(|(ns, name)| {
                self.pods
                    .get(ns, name)
                    .is_some_and(|p| priority::counts_as_waiting(p))
            })
            .count()
    }

    /// Binds every pending pod that fits somewhere, as fast as `timing.bindTime` lets the
    /// scheduler (a pod a client created since the last step is taken from its creation, one a
    /// controller created at this step from halfway since the last, one found earlier from
    /// that step); marks the rest Unschedulable with the scheduler's reason.
    /// Returns `next`, or the step at which the scheduler gets to the pods it had no time for.
    pub(super) fn schedule(
        &mut self,
        now: Timestamp,
        prev_step: Timestamp,
        settle: bool,
        mut next: Option<Timestamp>,
    ) -> Option<Timestamp> {
        let cost = if settle {
            Duration::ZERO
        } else {
            self.timing.bind_time
        };
        let pending: Vec<Arc<Pod>> = {
            let mut v: Vec<Arc<Pod>> = self
                .pods
                .indexed(self.pod_index.work, WORK_PENDING)
                .map(|(_, p)| p)
                .filter(|p| node_name(p).is_none() && !terminating(p) && !terminal(p))
                .cloned()
                .collect();
            // The scheduling queue: higher priority first, then oldest.
            v.sort_by_key(|p| {
                (
                    std::cmp::Reverse(priority::priority(p)),
                    p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                )
            });
            v
        };
        self.scheduler.unschedulable_since.retain(|k, _| {
            self.pods
                .get(&k.0, &k.1)
                .is_some_and(|p| node_name(p).is_none() && !terminating(p))
        });
        if pending.is_empty() {
            return next;
        }
        let mut slots: Vec<NodeSlot> = self
            .nodes
            .values()
            .map(|n| NodeSlot::from_node(n))
            .collect();
        let placed: Vec<&Pod> = self
            .pods
            .values()
            .map(|p| p.as_ref())
            .filter(|p| node_name(p).is_some() && !terminal(p))
            .collect();
        // Each node's running pods and their requests, recomputed only for nodes whose pods
        // were written since they were last summed.
        let by_node = self.pod_index.node;
        let mut requests = RequestsMemo::default();
        let current = self.rev.current();
        for slot in &mut slots {
            let written = self.pods.index_written(by_node, &slot.name);
            let cached = self.scheduler.node_usage.get(&slot.name).copied();
            let (used, count) = match cached {
                Some((at, used, count)) if written.is_none_or(|w| w <= at) => (used, count),
                _ => {
                    let mut used = Resources::default();
                    let mut count = 0;
                    for (_, p) in self.pods.indexed(by_node, &slot.name) {
                        if !terminal(p) {
                            used.add(requests.of(p));
                            count += 1;
                        }
                    }
                    self.scheduler
                        .node_usage
                        .insert(slot.name.clone(), (current, used, count));
                    (used, count)
                }
            };
            slot.free = slot.free.minus(&used);
            slot.free_pods -= count;
        }

        let mut decisions = Vec::new();
        let mut preemptions = Vec::new();
        {
            let mut sched = Scheduler::new(slots, &placed);
            for pod in &pending {
                let placement = sched.place(pod);
                // A pod already nominated waits for its victims to go rather than pick more.
                if matches!(placement, Placement::Unschedulable(_))
                    && priority::nominated_node(pod).is_none()
                    && let Some(p) = sched.preemption(pod)
                {
                    sched.reserve(&p, pod);
                    preemptions.push((pod.clone(), p));
                }
                decisions.push((pod.clone(), placement));
            }
        }
        for (pod, decision) in decisions {
            let key = (
                pod.metadata.namespace.clone().unwrap_or_default(),
                pod.metadata.name.clone().unwrap_or_default(),
            );
            let mut p = (*pod).clone();
            match decision {
                Placement::Bind(node) => {
                    let Some(n) = self.nodes.get("", &node).cloned() else {
                        continue;
                    };
                    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
                    let ready = match created {
                        // Made by a controller at this step (a replacement), for what happened
                        // since the last one: a real scheduler would have had it about as that
                        // happened, on average halfway between the steps.
                        Some(c) if c >= now => midway(prev_step, now),
                        Some(c) => c.max(prev_step),
                        None => prev_step,
                    };
                    if !self
                        .scheduler
                        .bind_worker
                        .take(cost, ready, now, self.timing.tick)
                    {
                        let wake =
                            self.scheduler
                                .bind_worker
                                .wake_at(cost, ready, self.timing.tick);
                        next = earliest(next, wake);
                        continue;
                    }
                    bind_and_start(&mut p, &n, now);
                    self.scheduler.unschedulable_since.remove(&key);
                    self.pods.put(p);
                }
                Placement::Unschedulable(why) => {
                    self.scheduler.unschedulable_since.entry(key).or_insert(now);
                    let already = pod_condition(&p, "PodScheduled", "False")
                        .is_some_and(|c| c.message.as_deref() == Some(why.as_str()));
                    if !already {
                        set_pod_condition_with_reason(
                            &mut p,
                            "PodScheduled",
                            false,
                            "Unschedulable",
                            why,
                            now,
                        );
                        self.pods.put(p);
                    }
                }
            }
        }
        for (pod, preemption) in preemptions {
            self.preempt(&pod, preemption, now);
        }
        next
    }

    /// Removes the victims (each with its own grace period) and nominates the node for the
    /// pod, which is bound there once the room is free.
    fn preempt(&mut self, pod: &Pod, preemption: Preemption, now: Timestamp) {
        let (ns, name) = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        tracing::debug!(pod = %format!("{ns}/{name}"), node = %preemption.node, victims = ?preemption.victims, "preempting lower-priority pods");
        self.stats.pods_preempted += preemption.victims.len() as u64;
        let scheduler = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler");
        for (vns, vname) in &preemption.victims {
            // As the real scheduler does before it deletes a victim.
            self.mark_disruption_target(
                vns,
                vname,
                "PreemptionByScheduler",
                format!("{scheduler}: preempting to accommodate a higher priority pod"),
                now,
            );
            let _ = self.delete_pod(
                vns,
                vname,
                &DeleteOptions::default(),
                Removal::Preempted,
                now,
            );
        }
        let Some(current) = self.pods.get(&ns, &name) else {
            return;
        };
        let mut p = (**current).clone();
        // Victims without a grace period are gone at once, and the real scheduler binds the
        // pod in its next cycle, milliseconds later: bind now. Otherwise the pod waits,
        // nominated, until the victims have terminated.
        let gone = preemption
            .victims
            .iter()
            .all(|(vns, vname)| self.pods.get(vns, vname).is_none());
        if gone && let Some(node) = self.nodes.get("", &preemption.node).cloned() {
            bind_and_start(&mut p, &node, now);
            self.scheduler.unschedulable_since.remove(&(ns, name));
        } else {
            p.status
                .get_or_insert_with(Default::default)
                .nominated_node_name = Some(preemption.node);
        }
        self.pods.put(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, PodSpec, ResourceRequirements, TopologySpreadConstraint,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as K8sSel, ObjectMeta};
    use serde_json::json;

    use crate::scenario::Scenario;

    fn slot(name: &str, cpu_m: i128, pods: i64) -> NodeSlot {
        let r = Resources {
            cpu: cpu_m * 1000 / 1000,
            memory: 8 << 40,
        };
        NodeSlot {
            name: name.into(),
            labels: BTreeMap::new(),
            taints: vec![],
            schedulable: true,
            free: r,
            free_pods: pods,
            allocatable: r,
        }
    }

    fn pod(name: &str, cpu: &str, spread: Option<i32>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(BTreeMap::from([("cpu".into(), Quantity(cpu.into()))])),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                topology_spread_constraints: spread.map(|s| {
                    vec![TopologySpreadConstraint {
                        max_skew: s,
                        topology_key: "kubernetes.io/hostname".into(),
                        when_unsatisfiable: "DoNotSchedule".into(),
                        label_selector: Some(K8sSel {
                            match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                            match_expressions: None,
                        }),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some("x".into()),
            effect: effect.into(),
            time_added: None,
        }
    }

    #[test]
    fn requests_must_fit_and_cordoned_or_tainted_nodes_are_skipped() {
        let mut cordoned = slot("a", 4000, 10);
        cordoned.schedulable = false;
        let mut tainted = slot("b", 4000, 10);
        tainted.taints.push(taint("rotor.dev/drain", "NoSchedule"));
        let small = slot("c", 100, 10);
        let ok = slot("d", 1000, 10);
        let mut s = Scheduler::new(vec![cordoned, tainted, small, ok], &[]);
        assert_eq!(
            s.place(&pod("p", "500m", None)),
            Placement::Bind("d".into())
        );
        assert_eq!(
            s.place(&pod("q", "500m", None)),
            Placement::Bind("d".into())
        );
        match s.place(&pod("r", "500m", None)) {
            Placement::Unschedulable(why) => {
                assert!(why.starts_with("0/4 nodes are available"), "{why}");
                assert!(
                    why.contains("untolerated taint") && why.contains("Insufficient"),
                    "{why}"
                );
            }
            other => panic!("expected unschedulable, got {other:?}"),
        }
    }

    #[test]
    fn hostname_spread_limits_skew_counting_cordoned_nodes() {
        // Three nodes; the third is cordoned and empty, so it holds the minimum at 0.
        let mut c = slot("c", 4000, 10);
        c.schedulable = false;
        let mut s = Scheduler::new(vec![slot("a", 4000, 10), slot("b", 4000, 10), c], &[]);
        assert!(matches!(
            s.place(&pod("p1", "100m", Some(1))),
            Placement::Bind(_)
        ));
        assert!(matches!(
            s.place(&pod("p2", "100m", Some(1))),
            Placement::Bind(_)
        ));
        // Both schedulable nodes hold one pod; one more would make skew 2 against the empty
        // cordoned node.
        assert!(matches!(
            s.place(&pod("p3", "100m", Some(1))),
            Placement::Unschedulable(_)
        ));
        // Without the constraint it fits.
        assert!(matches!(
            s.place(&pod("p4", "100m", None)),
            Placement::Bind(_)
        ));
    }

    #[test]
    fn pod_count_limit_applies() {
        let mut s = Scheduler::new(vec![slot("a", 4000, 1)], &[]);
        assert!(matches!(
            s.place(&pod("p1", "10m", None)),
            Placement::Bind(_)
        ));
        assert!(matches!(
            s.place(&pod("p2", "10m", None)),
            Placement::Unschedulable(_)
        ));
    }

    /// `pod` owned by the controller with `uid`.
    fn owned(name: &str, uid: &str) -> Pod {
        let mut p = pod(name, "100m", None);
        p.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "web".into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: None,
            },
        ]);
        p
    }

    fn bound(placement: Placement) -> String {
        match placement {
            Placement::Bind(node) => node,
            other => panic!("expected a bind, got {other:?}"),
        }
    }

    #[test]
    fn one_controllers_pods_spread_before_the_least_allocated_node_is_preferred() {
        // b and c are half full: by allocation alone a would take all three.
        let half_full = |name| {
            let mut s = slot(name, 4000, 10);
            s.free.cpu = 2000;
            s
        };
        let slots = vec![slot("a", 4000, 10), half_full("b"), half_full("c")];
        let mut s = Scheduler::new(slots.clone(), &[]);
        let mut nodes: Vec<String> = (0..3)
            .map(|i| bound(s.place(&owned(&format!("web-{i}"), "rs-1"))))
            .collect();
        nodes.sort();
        assert_eq!(nodes, ["a", "b", "c"]);
        // Pods of another controller do not count against these, and running pods do.
        let running = {
            let mut p = owned("web-9", "rs-1");
            p.spec.as_mut().unwrap().node_name = Some("a".into());
            p
        };
        let placed = [&running];
        let mut s = Scheduler::new(slots, &placed);
        assert_eq!(bound(s.place(&owned("api-0", "rs-2"))), "a");
        assert_ne!(bound(s.place(&owned("web-10", "rs-1"))), "a");
    }

    #[test]
    fn equal_nodes_are_told_apart_by_the_pods_name_not_by_node_order() {
        let slots: Vec<NodeSlot> = (0..8).map(|i| slot(&format!("n{i}"), 4000, 10)).collect();
        let choose =
            |name: &str| bound(Scheduler::new(slots.clone(), &[]).place(&pod(name, "100m", None)));
        let chosen: std::collections::BTreeSet<String> =
            (0..8).map(|i| choose(&format!("p{i}"))).collect();
        assert!(
            chosen.len() >= 3,
            "8 pods on 8 equal nodes chose only {chosen:?}"
        );
        assert_eq!(choose("p1"), choose("p1"), "the choice is deterministic");
    }

    #[test]
    fn every_node_of_a_cluster_under_100_nodes_is_scored() {
        // One node of 60 is empty, the others half full; wherever the scan starts it is found.
        let mut slots: Vec<NodeSlot> = (0..60)
            .map(|i| {
                let mut s = slot(&format!("n{i:02}"), 4000, 10);
                s.free.cpu = 2000;
                s
            })
            .collect();
        slots[37] = slot("empty", 4000, 10);
        for i in 0..20 {
            let mut s = Scheduler::new(slots.clone(), &[]);
            assert_eq!(
                bound(s.place(&pod(&format!("p{i}"), "100m", None))),
                "empty"
            );
        }
    }

    /// `pod` with a priority (and, for placeholders, `preemptionPolicy: Never`), bound to `node`
    /// when given.
    fn ranked(name: &str, cpu: &str, priority: i32, node: Option<&str>, never: bool) -> Pod {
        let mut p = pod(name, cpu, None);
        let spec = p.spec.as_mut().unwrap();
        spec.priority = Some(priority);
        spec.node_name = node.map(str::to_string);
        spec.preemption_policy = never.then(|| "Never".to_string());
        p
    }

    #[test]
    fn preemption_takes_the_node_with_the_fewest_lower_priority_victims() {
        // a: two 500m placeholders; b: one 1000m placeholder and a 0-priority pod; both full.
        let placed_pods = [
            ranked("ph-1", "500m", -5, Some("a"), true),
            ranked("ph-2", "500m", -5, Some("a"), true),
            ranked("ph-3", "1000m", -5, Some("b"), true),
            ranked("web-0", "1000m", 0, Some("b"), false),
        ];
        let placed: Vec<&Pod> = placed_pods.iter().collect();
        let mut a = slot("a", 1000, 10);
        a.free.cpu = 0;
        let mut b = slot("b", 2000, 10);
        b.free.cpu = 0;
        let s = Scheduler::new(vec![a, b], &placed);
        let web = ranked("web-1", "900m", 0, None, false);
        assert_eq!(
            s.preemption(&web),
            Some(Preemption {
                node: "b".into(),
                victims: vec![("ns".into(), "ph-3".into())],
            }),
            "one victim on b beats two on a; the equal-priority pod is never a victim"
        );
        // A placeholder never preempts, and nothing preempts pods of its own priority.
        assert_eq!(s.preemption(&ranked("ph-4", "100m", -5, None, true)), None);
        assert_eq!(s.preemption(&ranked("low", "100m", -5, None, false)), None);
        // Too big even with every lower-priority pod gone.
        assert_eq!(s.preemption(&ranked("huge", "1500m", 0, None, false)), None);
    }

    #[test]
    fn a_preempted_pod_is_marked_as_the_real_scheduler_marks_it_before_it_goes() {
        // One 2-CPU node; a placeholder holds 1500m of it; a pod of priority 0 needs as much.
        let yaml = r#"
timing: {tick: 100ms, podStartup: 1s, podShutdown: 1s}
nodeGroups: [{name: g, size: 1, max: 1, template: {cpu: "2", memory: 8Gi}}]
"#;
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let mut c = crate::seed::build(&Scenario::from_yaml(yaml, "t").unwrap(), t0);
        let node = c
            .nodes
            .values()
            .next()
            .and_then(|n| n.metadata.name.clone())
            .expect("one node");
        let mut placeholder = ranked("ph", "1500m", -5, Some(&node), true);
        // A grace period keeps the victim terminating, so its last state can be read.
        placeholder
            .spec
            .as_mut()
            .unwrap()
            .termination_grace_period_seconds = Some(30);
        c.pods.put(placeholder);
        c.pods.put(ranked("web", "1500m", 0, None, false));
        c.step(t0 + Duration::from_secs(1), false);

        let victim = c
            .pods
            .get("ns", "ph")
            .expect("the victim terminates for 30 s");
        assert!(terminating(victim), "the placeholder was preempted");
        let condition =
            rotor_apimachinery::conditions::pod_condition(victim, "DisruptionTarget", "True")
                .expect("a DisruptionTarget condition, True, on the victim");
        assert_eq!(condition.reason.as_deref(), Some("PreemptionByScheduler"));
        assert_eq!(
            condition.message.as_deref(),
            Some("default-scheduler: preempting to accommodate a higher priority pod")
        );
        // The pod of higher priority waits for that node.
        let web = c.pods.get("ns", "web").unwrap();
        assert_eq!(priority::nominated_node(web), Some(node.as_str()));
    }

    #[test]
    fn a_victim_makes_room_for_one_preemptor_of_a_pass_not_for_each() {
        // a: one 1000m placeholder, nothing free. Two pods of priority 0 need 900m each.
        let placed_pods = [ranked("ph", "1000m", -5, Some("a"), true)];
        let placed: Vec<&Pod> = placed_pods.iter().collect();
        let mut a = slot("a", 1000, 10);
        a.free.cpu = 0;
        let mut s = Scheduler::new(vec![a], &placed);
        let first = ranked("web-1", "900m", 0, None, false);
        let p = s.preemption(&first).expect("the placeholder makes way");
        assert_eq!(p.victims, vec![("ns".to_string(), "ph".to_string())]);
        s.reserve(&p, &first);
        // The placeholder's room is the first pod's now; nothing is left to preempt.
        assert_eq!(s.preemption(&ranked("web-2", "900m", 0, None, false)), None);
    }

    /// Evicts the 10 pods of a Deployment at once, then steps every tick: how many of their
    /// replacements each step binds.
    fn binds_per_step(bind_time: &str) -> Vec<usize> {
        let yaml = format!(
            r#"
timing: {{tick: 100ms, podStartup: 1s, podShutdown: 0s, bindTime: {bind_time}}}
nodeGroups: [{{name: g, size: 2, template: {{cpu: "16", memory: 64Gi}}}}]
workloads: [{{kind: Deployment, name: web, namespace: shop, replicas: 10}}]
"#
        );
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let mut c = crate::seed::build(&Scenario::from_yaml(&yaml, "t").unwrap(), t0);
        let now = t0 + Duration::from_secs(1);
        c.step(now, false);
        let old: Vec<String> = c
            .pods
            .range(Some("shop"), None)
            .map(|(_, p)| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(old.len(), 10);
        for name in &old {
            c.evict_pod("shop", name, &json!({}), now).unwrap();
        }
        let bound = |c: &crate::cluster::Cluster| {
            c.pods
                .range(Some("shop"), None)
                .filter(|(k, p)| !old.contains(&k.1) && node_name(p).is_some())
                .count()
        };
        let mut before = 0;
        (1..=5)
            .map(|k| {
                c.step(now + Duration::from_millis(100 * k), false);
                let after = bound(&c);
                let n = after - before;
                before = after;
                n
            })
            .collect()
    }

    #[test]
    fn with_a_bind_time_a_burst_of_replacements_is_bound_at_the_schedulers_pace() {
        // 25 ms a pod: each step binds what the scheduler finishes within half a tick of it,
        // the replacements taken from halfway since the step before the one that made them.
        assert_eq!(binds_per_step("25ms"), vec![4, 4, 2, 0, 0]);
    }

    #[test]
    fn without_a_bind_time_every_replacement_is_bound_at_the_step_that_creates_it() {
        assert_eq!(binds_per_step("0s"), vec![10, 0, 0, 0, 0]);
    }
}
