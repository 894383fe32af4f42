//! The simulated node groups and their autoscaler. Each group keeps its desired number of nodes,
//! always launching from its *current* template (so a template change takes effect on the next
//! replacement). Pods unschedulable for longer than `scaleUpDelay` raise a fitting group's
//! desired size (up to max) by as many nodes as they need, counting the room on nodes still
//! booting, as cluster-autoscaler sizes a scale-up for every pending pod at once; nodes that are cordoned or carry the drain taint and hold only
//! DaemonSet or mirror pods for longer than `scaleDownDelay` are removed. A removal first gives
//! back surge capacity (desired above the group's configured size); otherwise the group
//! replaces the node, as an Auto Scaling group does when an instance is terminated without
//! decrementing its capacity.

// A file beside this one (not under it), so that mod.rs names it without naming this file.
#[path = "autoscaler_memory.rs"]
pub(super) mod memory;
pub use memory::NodeGroup;

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use rotor_apimachinery::scheduling::AUTOSCALER_EXPENDABLE_CUTOFF;
use rotor_core::contract::DRAIN_TAINT_KEY;

use super::objects::{
    Resources, build_node, is_daemon, is_mirror, node_allocatable, node_group_of, node_name,
    node_ready, node_taints, node_unschedulable, pod_requests, terminal,
};
use super::scheduler::{NodeSlot, untolerated};
use super::{Cluster, add_secs, earliest, object_ref_node};
use crate::scenario::NodeGroupSpec;

/// Whether a fresh node from this template could run the pod.
fn template_fits(node: &Node, pod: &Pod) -> bool {
    let slot = NodeSlot::from_node(node);
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let selector_ok = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .is_none_or(|sel| sel.iter().all(|(k, v)| slot.labels.get(k) == Some(v)));
    let taints: Vec<_> = slot
        .taints
        .iter()
        .filter(|t| t.key != "node.kubernetes.io/not-ready")
        .cloned()
        .collect();
    selector_ok
        && untolerated(&tolerations, &taints).is_none()
        && pod_requests(pod).fits_within(&slot.allocatable)
}

/// Room for pods on one node: resources and pod slots.
#[derive(Clone, Copy, Debug)]
pub struct Room {
    pub free: Resources,
    pub pods: i64,
}

impl Room {
    pub fn of(node: &Node) -> Room {
        let (free, pods) = node_allocatable(node);
        Room { free, pods }
    }

    /// Places a pod here if it fits.
    pub fn take(&mut self, pod: &Resources) -> bool {
        if self.pods > 0 && pod.fits_within(&self.free) {
            self.free = self.free.minus(pod);
            self.pods -= 1;
            true
        } else {
            false
        }
    }
}

/// How many new nodes with room `fresh` the pods need once the room on `upcoming` nodes is used
/// up, placing each pod on the first node it fits (an estimate like cluster-autoscaler's: not
/// optimal packing, but one scale-up covers a burst of pending pods). Pods that fit nowhere,
/// not even on an empty new node, are left out.
/// Takes the pods' requests (see `pod_requests`).
pub fn nodes_needed(mut upcoming: Vec<Room>, fresh: Room, pods: &[Resources]) -> u32 {
    let mut new: Vec<Room> = Vec::new();
    for r in pods {
        if upcoming.iter_mut().any(|room| room.take(r)) || new.iter_mut().any(|room| room.take(r)) {
            continue;
        }
        let mut room = fresh;
        if room.take(r) {
            new.push(room);
        }
    }
    new.len() as u32
}

impl Cluster {
    /// The node groups, by name.
    pub fn node_groups(&self) -> &BTreeMap<String, NodeGroup> {
        &self.autoscaler.groups
    }

    /// A node group to change (its template: nodes launched from now on use it).
    pub fn node_group_mut(&mut self, name: &str) -> Option<&mut NodeGroup> {
        self.autoscaler.groups.get_mut(name)
    }

    /// Adds a node group at its configured size; launching its nodes is up to the caller.
    pub fn add_node_group(&mut self, spec: NodeGroupSpec) {
        let group = NodeGroup {
            desired: spec.size,
            next_index: 0,
            spec,
        };
        self.autoscaler
            .groups
            .insert(group.spec.name.clone(), group);
    }

    /// The room group `g` offers waiting pods: on each of its nodes still booting (not cordoned,
    /// tainted for draining or being deleted: those will not take pods), and on a fresh node from
    /// `template`. Both lose what the per-node pods (DaemonSet and mirror pods) of one of the
    /// group's Ready nodes take; a booting node also what is already bound to it. With no Ready
    /// node to look at, the per-node pods are not counted and the estimate may come out short;
    /// the next scale-up makes up for it.
    fn group_room(&self, g: &str, template: &Node) -> (Vec<Room>, Room) {
        let bound = |name: String| {
            self.pods
                .values()
                .filter(move |p| node_name(p) == Some(name.as_str()) && !terminal(p))
        };
        let in_group = |n: &&Arc<Node>| node_group_of(n) == Some(g);
        let per_node: Vec<Resources> = self
            .nodes
            .values()
            .filter(in_group)
            .find(|n| node_ready(n))
            .map(|node| {
                bound(node.metadata.name.clone().unwrap_or_default())
                    .filter(|p| is_daemon(p) || is_mirror(p))
                    .map(|p| pod_requests(p))
                    .collect()
            })
            .unwrap_or_default();
        let less_per_node = |mut room: Room| {
            for r in &per_node {
                room.take(r);
            }
            room
        };
        let fresh = less_per_node(Room::of(template));
        let upcoming = self
            .nodes
            .values()
            .filter(in_group)
            .filter(|n| {
                !node_ready(n)
                    && !node_unschedulable(n)
                    && n.metadata.deletion_timestamp.is_none()
                    && !node_taints(n).iter().any(|t| t.key == DRAIN_TAINT_KEY)
            })
            .map(|n| {
                let mut room = less_per_node(Room::of(n));
                for p in bound(n.metadata.name.clone().unwrap_or_default())
                    .filter(|p| !is_daemon(p) && !is_mirror(p))
                {
                    room.take(&pod_requests(p));
                }
                room
            })
            .collect();
        (upcoming, fresh)
    }

    /// Creates one node of `group` from its current template.
    pub fn launch_node(&mut self, group: &str, now: Timestamp, ready: bool) -> Option<String> {
        let g = self.autoscaler.groups.get_mut(group)?;
        let index = g.next_index;
        g.next_index += 1;
        let node = build_node(&g.spec, index, now, ready);
        let name = node.metadata.name.clone();
        self.stats.nodes_launched += 1;
        self.nodes.put(node);
        name
    }

    /// Removes a node and, as the pod GC would, everything bound to it.
    pub fn remove_node(&mut self, name: &str, reason: &str, now: Timestamp) {
        if let Some(node) = self.nodes.remove("", name) {
            self.stats.nodes_removed += 1;
            self.autoscaler.empty_since.remove(name);
            self.record_event(
                object_ref_node(&node),
                "Normal",
                "RemovingNode",
                format!("Simulated autoscaler removed node {name}: {reason}"),
                "cluster-autoscaler",
                now,
            );
            let bound: Vec<(String, String)> = self
                .pods
                .indexed(self.pod_index.node, name)
                .map(|(k, _)| k.clone())
                .collect();
            for (ns, pod) in bound {
                self.pods.remove(&ns, &pod);
            }
        }
    }

    pub(super) fn autoscale(
        &mut self,
        now: Timestamp,
        mut next: Option<Timestamp>,
    ) -> Option<Timestamp> {
        let groups: Vec<String> = self.autoscaler.groups.keys().cloned().collect();
        // Keep every group at its desired size.
        for g in &groups {
            let live = self
                .nodes
                .values()
                .filter(|n| node_group_of(n) == Some(g.as_str()))
                .count() as u32;
            let desired = self.autoscaler.groups[g].desired;
            for _ in live..desired {
                self.launch_node(g, now, false);
            }
        }
        // Scale up once a pod has waited scaleUpDelay. Like cluster-autoscaler, one scale-up
        // is sized for every pod unschedulable at that moment, also those that have waited
        // less (its scan counts every unschedulable pod): they are packed first into the room
        // left on the group's nodes still booting (upcoming nodes), then into as many new nodes
        // from the template as they need. A group scales up at most once per scaleUpDelay.
        let delay = self.timing.scale_up_delay.as_secs_f64();
        // Shared, not copied: most steps find no pod due and drop the list.
        let mut waiting: Vec<Arc<Pod>> = Vec::new();
        let mut one_due = false;
        for ((ns, name), since) in self.unschedulable_since() {
            let Some(pod) = self.pods.get(ns, name) else {
                continue;
            };
            // Like cluster-autoscaler: no node for expendable pods, nor for pods a
            // preemption is already making room for.
            let expendable = super::priority::priority(pod) < AUTOSCALER_EXPENDABLE_CUTOFF;
            if expendable || super::priority::nominated_node(pod).is_some() {
                continue;
            }
            let due = add_secs(*since, delay);
            if due > now {
                next = earliest(next, due);
            } else {
                one_due = true;
            }
            waiting.push(Arc::clone(pod));
        }
        if !one_due {
            waiting.clear();
        }
        for g in &groups {
            if waiting.is_empty() {
                break;
            }
            let grp = &self.autoscaler.groups[g];
            if grp.desired >= grp.spec.max() {
                continue;
            }
            let template = build_node(&grp.spec, u64::MAX, now, true);
            let (fits, rest): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) = std::mem::take(&mut waiting)
                .into_iter()
                .partition(|p| template_fits(&template, p));
            waiting = rest;
            if fits.is_empty() {
                continue;
            }
            if let Some(last) = self.autoscaler.last_scale_up.get(g)
                && add_secs(*last, delay) > now
            {
                next = earliest(next, add_secs(*last, delay));
                continue;
            }
            let (upcoming, fresh) = self.group_room(g, &template);
            let grp = &self.autoscaler.groups[g];
            let requests: Vec<Resources> = fits.iter().map(|p| pod_requests(p)).collect();
            let count = nodes_needed(upcoming, fresh, &requests)
                .min(grp.spec.max().saturating_sub(grp.desired));
            if count == 0 {
                continue;
            }
            self.autoscaler.last_scale_up.insert(g.clone(), now);
            if let Some(grp) = self.autoscaler.groups.get_mut(g) {
                grp.desired += count;
            }
            let mut launched = Vec::new();
            for _ in 0..count {
                launched.extend(self.launch_node(g, now, false));
            }
            tracing::info!(group = %g, nodes = ?launched, pods = fits.len(), "scaling up for unschedulable pods");
        }
        // Scale down drained nodes.
        let down_delay = self.timing.scale_down_delay.as_secs_f64();
        let nodes: Vec<_> = self.nodes.values().cloned().collect();
        for node in nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            let Some(group) = node_group_of(&node).map(str::to_string) else {
                continue;
            };
            let marked = node_unschedulable(&node)
                || node_taints(&node).iter().any(|t| t.key == DRAIN_TAINT_KEY);
            let empty = marked
                && !self.pods.indexed(self.pod_index.node, &name).any(|(_, p)| {
                    node_name(p) == Some(name.as_str())
                        && !is_daemon(p)
                        && !is_mirror(p)
                        && !terminal(p)
                });
            if !empty {
                self.autoscaler.empty_since.remove(&name);
                continue;
            }
            let since = *self
                .autoscaler
                .empty_since
                .entry(name.clone())
                .or_insert(now);
            let due = add_secs(since, down_delay);
            if due > now {
                next = earliest(next, due);
                continue;
            }
            if let Some(g) = self.autoscaler.groups.get_mut(&group)
                && g.desired > g.spec.size.max(g.spec.min())
            {
                g.desired -= 1;
            }
            tracing::info!(group = %group, node = %name, "removing drained empty node");
            self.remove_node(&name, "drained and empty", now);
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]}
        }))
        .unwrap()
    }

    fn room(cpu_milli: i128, pods: i64) -> Room {
        Room {
            free: Resources {
                cpu: cpu_milli,
                memory: 1 << 50,
            },
            pods,
        }
    }

    #[test]
    fn a_burst_of_pending_pods_is_packed_first_fit_after_the_upcoming_room() {
        let fresh = room(3_850, 58);
        let small: Vec<Resources> = (0..60).map(|_| pod_requests(&pod("100m"))).collect();
        // 38 pods of 100m fill a fresh node's 3,850m: 60 need two.
        assert_eq!(nodes_needed(Vec::new(), fresh, &small), 2);
        // A booting node with room for 30 takes those first.
        assert_eq!(nodes_needed(vec![room(3_000, 58)], fresh, &small), 1);
        // The pod limit counts as well as CPU.
        assert_eq!(nodes_needed(Vec::new(), room(3_850, 10), &small), 6);
        // Big pods one per node; a pod no node can hold asks for none.
        let big = [pod("3"), pod("3"), pod("3"), pod("5")].map(|p| pod_requests(&p));
        assert_eq!(nodes_needed(Vec::new(), fresh, &big), 3);
        assert_eq!(nodes_needed(Vec::new(), fresh, &[]), 0);
    }
}
