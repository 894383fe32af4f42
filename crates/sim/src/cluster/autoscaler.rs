//! The simulated node groups and their autoscaler. Each group keeps its desired number of nodes,
//! always launching from its *current* template (so a template change takes effect on the next
//! replacement). Pods unschedulable for longer than `scaleUpDelay` raise a fitting group's
//! desired size (up to max); nodes that are cordoned or carry the drain taint and hold only
//! DaemonSet or mirror pods for longer than `scaleDownDelay` are removed. A removal first gives
//! back surge capacity (desired above the group's configured size); otherwise the group
//! replaces the node, as an Auto Scaling group does when an instance is terminated without
//! decrementing its capacity.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use rotor_core::contract::DRAIN_TAINT_KEY;

use super::objects::{
    build_node, is_daemon, is_mirror, node_group_of, node_name, node_taints, node_unschedulable,
    pod_requests, terminal,
};
use super::scheduler::{NodeSlot, untolerated};
use super::{Cluster, add_secs, object_ref_node};

fn earliest(a: Option<Timestamp>, b: Timestamp) -> Option<Timestamp> {
    Some(a.map_or(b, |a| a.min(b)))
}

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

impl Cluster {
    /// Creates one node of `group` from its current template.
    pub fn launch_node(&mut self, group: &str, now: Timestamp, ready: bool) -> Option<String> {
        let g = self.node_groups.get_mut(group)?;
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
            self.empty_since.remove(name);
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
                .iter()
                .filter(|(_, p)| node_name(p) == Some(name))
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
        let groups: Vec<String> = self.node_groups.keys().cloned().collect();
        // Keep every group at its desired size.
        for g in &groups {
            let live = self
                .nodes
                .values()
                .filter(|n| node_group_of(n) == Some(g.as_str()))
                .count() as u32;
            let desired = self.node_groups[g].desired;
            for _ in live..desired {
                self.launch_node(g, now, false);
            }
        }
        // Scale up for pods that have waited too long.
        let delay = self.timing.scale_up_delay.as_secs_f64();
        let waiting: Vec<(String, String)> = self
            .unschedulable_since
            .iter()
            .filter(|(_, since)| {
                let due = add_secs(**since, delay);
                if due > now {
                    next = earliest(next, due);
                    false
                } else {
                    true
                }
            })
            .map(|(k, _)| k.clone())
            .collect();
        for (ns, name) in waiting {
            let Some(pod) = self.pods.get(&ns, &name).cloned() else {
                continue;
            };
            let booting = |c: &Cluster, g: &str| {
                c.nodes
                    .values()
                    .any(|n| node_group_of(n) == Some(g) && !super::objects::node_ready(n))
            };
            let candidate = groups.iter().find(|g| {
                let grp = &self.node_groups[*g];
                grp.desired < grp.spec.max()
                    && template_fits(&build_node(&grp.spec, u64::MAX, now, true), &pod)
            });
            let Some(g) = candidate.cloned() else {
                continue;
            };
            if booting(self, &g) {
                continue;
            }
            let last = self.last_scale_up.get(&g).copied();
            if last.is_some_and(|t| add_secs(t, delay) > now) {
                next = earliest(next, add_secs(last.unwrap_or(now), delay));
                continue;
            }
            self.last_scale_up.insert(g.clone(), now);
            if let Some(grp) = self.node_groups.get_mut(&g) {
                grp.desired += 1;
            }
            if let Some(node) = self.launch_node(&g, now, false) {
                tracing::info!(group = %g, node = %node, pod = %format!("{ns}/{name}"), "scaling up for an unschedulable pod");
            }
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
                && !self.pods.values().any(|p| {
                    node_name(p) == Some(name.as_str())
                        && !is_daemon(p)
                        && !is_mirror(p)
                        && !terminal(p)
                });
            if !empty {
                self.empty_since.remove(&name);
                continue;
            }
            let since = *self.empty_since.entry(name.clone()).or_insert(now);
            let due = add_secs(since, down_delay);
            if due > now {
                next = earliest(next, due);
                continue;
            }
            if let Some(g) = self.node_groups.get_mut(&group)
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
