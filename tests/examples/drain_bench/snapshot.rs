//! The cluster at t=0, as the lower bound needs it: each node's longest pod shutdown and the
//! pods a controller replaces, each budget's figures. By default every node is drained; with
//! `--taint N` only N of them, spread evenly over the nodes in name order (so over every node
//! group), and the others stay as they are, with room for the evicted pods.

use std::collections::BTreeMap;

use anyhow::{Context, anyhow, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use rotor_sim::cluster::objects::{
    SHUTDOWN_ANNOTATION, STARTUP_ANNOTATION, annotation_duration, is_daemon, is_mirror, terminal,
};
use rotor_sim::cluster::pdb::{covers, selector};
use rotor_sim::scenario::Scenario;
use serde_json::Value;

use crate::cluster::BenchCluster;
use crate::recorder::Listed;

pub struct OriginalNode {
    pub name: String,
    pub taints: Vec<Value>,
    /// The longest shutdown among the pods a drain must remove from it (seconds).
    pub longest_shutdown: f64,
    /// The pods on it that a controller replaces, for the gate.
    pub replaced: Vec<Replaced>,
    pub pods: usize,
}

/// A pod a controller replaces once it is evicted: when its replacement can be Ready.
pub struct Replaced {
    /// How long after the eviction the replacement is created: 0 for a Deployment's, the old
    /// pod's shutdown for a StatefulSet's (same name, so only once the old one is gone).
    pub created_after: f64,
    pub startup: f64,
    /// A PodDisruptionBudget covers it.
    pub budgeted: bool,
}

pub struct Snapshot {
    /// The nodes to drain: every node, or the `--taint N` picked.
    pub nodes: Vec<OriginalNode>,
    /// How many nodes are left untainted (none without `--taint`).
    pub spare: usize,
    /// `namespace/name` of every PodDisruptionBudget: (status.expectedPods,
    /// status.disruptionsAllowed) with every pod healthy.
    pub budgets: BTreeMap<String, (i64, i64)>,
    /// `namespace/name` of every PodDisruptionBudget: how many of its pods run on the nodes to
    /// drain.
    pub moved: BTreeMap<String, i64>,
    /// The lists as read, for the benchmark's record of the run.
    pub listed: Listed,
}

impl Snapshot {
    /// Lists nodes and pods before t=0 (these requests are not counted: the counters are
    /// zeroed afterwards). `taint`: how many nodes to drain, `None` for all.
    pub fn take(
        sim: &BenchCluster,
        scenario: &Scenario,
        taint: Option<usize>,
    ) -> anyhow::Result<Snapshot> {
        let list = sim.get("/api/v1/nodes")?;
        let resource_version = list["metadata"]["resourceVersion"]
            .as_str()
            .ok_or_else(|| anyhow!("node list without resourceVersion"))?
            .to_string();
        let mut nodes: BTreeMap<String, OriginalNode> = BTreeMap::new();
        for n in list["items"].as_array().into_iter().flatten() {
            let name = n["metadata"]["name"].as_str().unwrap_or("").to_string();
            let taints = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
            ensure!(
                taints.iter().all(|t| t["key"] != "rotor.dev/drain"),
                "node {name} is already tainted"
            );
            nodes.insert(
                name.clone(),
                OriginalNode {
                    name,
                    taints,
                    longest_shutdown: 0.0,
                    replaced: Vec::new(),
                    pods: 0,
                },
            );
        }
        let keep = picked(nodes.len(), taint);
        let spare = nodes.len() - keep.len();
        let mut index = 0;
        nodes.retain(|_, _| {
            index += 1;
            keep.contains(&(index - 1))
        });
        // Every budget: its figures, and its selector as the eviction subresource reads it, to
        // tell which pods it covers (the simulator's own matching).
        let mut budgets = BTreeMap::new();
        let mut covering = Vec::new();
        let budget_list = sim.get("/apis/policy/v1/poddisruptionbudgets")?;
        for b in budget_list["items"].as_array().into_iter().flatten() {
            let pdb: PodDisruptionBudget =
                serde_json::from_value(b.clone()).context("a budget from the list")?;
            let key = format!(
                "{}/{}",
                pdb.metadata.namespace.as_deref().unwrap_or(""),
                pdb.metadata.name.as_deref().unwrap_or("")
            );
            let status = pdb.status.as_ref();
            budgets.insert(
                key.clone(),
                (
                    status.map_or(0, |s| i64::from(s.expected_pods)),
                    status.map_or(0, |s| i64::from(s.disruptions_allowed)),
                ),
            );
            let sel = selector(&pdb);
            covering.push((key, pdb, sel));
        }
        let mut moved: BTreeMap<String, i64> = BTreeMap::new();
        let pods = sim.get_list("/api/v1/pods")?;
        let default_shutdown = scenario.timing.pod_shutdown;
        let mut listed_pods = Vec::new();
        for item in pods["items"].as_array().into_iter().flatten() {
            let pod: Pod = serde_json::from_value(item.clone()).context("a pod from the list")?;
            listed_pods.push(pod.clone());
            if is_daemon(&pod) || is_mirror(&pod) || terminal(&pod) {
                continue;
            }
            let spec = pod.spec.as_ref();
            let Some(node) = spec.and_then(|s| s.node_name.as_deref()) else {
                bail!(
                    "pod {:?} is not scheduled at t=0: the scenario should start settled",
                    pod.metadata.name
                );
            };
            let grace = spec
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30)
                .max(0) as f64;
            let shutdown = annotation_duration(&pod.metadata, SHUTDOWN_ANNOTATION)
                .unwrap_or(default_shutdown)
                .as_secs_f64()
                .min(grace);
            let startup = annotation_duration(&pod.metadata, STARTUP_ANNOTATION)
                .unwrap_or(scenario.timing.pod_startup)
                .as_secs_f64();
            let controller = pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
                .map(|o| o.kind.as_str());
            let created_after = match controller {
                Some("StatefulSet") => Some(shutdown),
                Some(_) => Some(0.0),
                None => None, // nobody replaces a bare pod; the gate does not wait for it
            };
            let covered_by: Vec<&String> = covering
                .iter()
                .filter(|(_, pdb, selector)| covers(pdb, selector.as_ref(), &pod))
                .map(|(key, _, _)| key)
                .collect();
            let budgeted = !covered_by.is_empty();
            if let Some(n) = nodes.get_mut(node) {
                for key in covered_by {
                    *moved.entry(key.clone()).or_default() += 1;
                }
                n.longest_shutdown = n.longest_shutdown.max(shutdown);
                if let Some(created_after) = created_after {
                    n.replaced.push(Replaced {
                        created_after,
                        startup,
                        budgeted,
                    });
                }
                n.pods += 1;
            }
        }
        let version = |list: &Value| {
            list["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow!("a list without resourceVersion"))
        };
        let listed = Listed {
            pods: listed_pods,
            budgets: covering.iter().map(|(_, pdb, _)| pdb.clone()).collect(),
            versions: (resource_version, version(&pods)?, version(&budget_list)?),
        };
        Ok(Snapshot {
            nodes: nodes.into_values().collect(),
            spare,
            budgets,
            moved,
            listed,
        })
    }
}

/// Which of `total` nodes (by index in name order) to drain: all, or `taint` of them spread
/// evenly, the first included.
pub fn picked(total: usize, taint: Option<usize>) -> std::collections::BTreeSet<usize> {
    let n = taint.unwrap_or(total).min(total);
    (0..n).map(|i| i * total / n).collect()
}

#[cfg(test)]
mod tests {
    use super::picked;

    #[test]
    fn every_node_without_a_count_and_an_even_spread_with_one() {
        assert_eq!(
            picked(4, None).into_iter().collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(picked(4, Some(9)).len(), 4);
        assert_eq!(
            picked(1000, Some(100))
                .into_iter()
                .take(3)
                .collect::<Vec<_>>(),
            [0, 10, 20]
        );
        assert_eq!(picked(1000, Some(100)).len(), 100);
        // Uneven: still N distinct nodes, spread over the whole list.
        let seven = picked(10, Some(7));
        assert_eq!(seven.len(), 7);
        assert_eq!(seven.last(), Some(&8));
        assert!(picked(5, Some(0)).is_empty());
    }
}
