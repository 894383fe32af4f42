//! Reading the in-process simulated cluster into the progress model's [`Snapshot`]: nodes with
//! their drain taint and `rotor.dev/...` annotations, whether each was built from its group's
//! current template, the RotationPolicies' status as the drainer wrote it, and the simulator's
//! counters (evictions, budget refusals, violations, pods waiting for a node). Called with the
//! cluster lock held, so it must stay cheap.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
use rotor_apimachinery::labels::LabelSelector;
use rotor_core::contract::{BLOCKER_ANNOTATION, DRAIN_TAINT_KEY, PHASE_ANNOTATION};
use serde::Deserialize;

use super::progress::{NodeView, PoolStatus, PoolView, Snapshot};
use rotor_sim::cluster::Cluster;
use rotor_sim::cluster::objects::{node_group_of, node_ready, node_taints};
use rotor_sim::rotor_kinds::RotationPolicy;

/// Which node property the rotation changes, shown beside each node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    KubeletVersion,
    Image,
}

/// The cluster now, `at` seconds into the rotation.
pub fn snapshot(c: &Cluster, at: f64, shown: Shown) -> Snapshot {
    let mut nodes: Vec<NodeView> = c.nodes.values().map(|n| node_view(c, n, shown)).collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let count = |keys: &[&str]| -> u64 {
        keys.iter()
            .map(|k| c.stats.evictions.get(*k).copied().unwrap_or(0))
            .sum()
    };
    Snapshot {
        at,
        nodes,
        unschedulable_pods: c.unschedulable_pods(),
        // Outcomes as the simulator's eviction handler names them (cluster/stats.rs).
        evictions: count(&["success", "unhealthy-allowed", "bypass"]),
        refusals: count(&["budget", "budget-unprocessed", "multiple-pdbs"]),
        budget_violations: c.stats.budget_violations.len(),
        pools: pool_views(c),
    }
}

/// The fields of a RotationPolicy's status the demo shows (the CRD's `status`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenStatus {
    #[serde(default)]
    nodes: u32,
    #[serde(default)]
    out_of_date: u32,
    #[serde(default)]
    draining: u32,
    #[serde(default)]
    drained: u32,
    #[serde(default)]
    blocked: u32,
    budget: Option<String>,
    #[serde(default)]
    conditions: Vec<WrittenCondition>,
}

#[derive(Deserialize)]
struct WrittenCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(default)]
    message: String,
}

/// Each policy with the status the drainer wrote and the nodes it governs now.
fn pool_views(c: &Cluster) -> Vec<PoolView> {
    let policies: Vec<(&str, &RotationPolicy, i32, Option<LabelSelector>)> = c
        .rotation_policies
        .values()
        .map(|p| {
            let name = p.metadata.name.as_deref().unwrap_or_default();
            (name, &**p, priority(p), selector(p))
        })
        .collect();
    // Counted by the drainer's rule, as its status counts them: the selecting policy of highest
    // priority governs a node; a tie at the top is an overlap, which counts for none of them.
    let mut governs: BTreeMap<&str, u32> = BTreeMap::new();
    for n in c.nodes.values() {
        let labels = n.metadata.labels.as_ref();
        let winners = rotor_policy::highest_priority(
            policies
                .iter()
                .filter(|(_, _, _, s)| s.as_ref().is_some_and(|s| s.matches_opt(labels)))
                .map(|(name, _, priority, _)| (*name, *priority)),
        );
        if let [one] = winners.as_slice() {
            *governs.entry(one).or_default() += 1;
        }
    }
    policies
        .iter()
        .map(|(name, policy, _, selector)| PoolView {
            name: (*name).to_string(),
            status: written_status(policy),
            governs: selector
                .as_ref()
                .map(|_| governs.get(name).copied().unwrap_or(0)),
        })
        .collect()
}

/// The status as the drainer wrote it; one the demo cannot read is shown as none rather than
/// guessed at.
fn written_status(policy: &RotationPolicy) -> Option<PoolStatus> {
    policy
        .fields
        .get("status")
        .and_then(|s| WrittenStatus::deserialize(s).ok())
        .map(|s| PoolStatus {
            nodes: s.nodes,
            out_of_date: s.out_of_date,
            draining: s.draining,
            drained: s.drained,
            blocked: s.blocked,
            budget: s.budget,
            holding: s
                .conditions
                .into_iter()
                .filter(|c| c.status == "True")
                .map(|c| format!("{}: {}", c.type_, c.message))
                .collect(),
        })
}

/// The policy's priority; left out, 0, as the CRD defaults it.
fn priority(policy: &RotationPolicy) -> i32 {
    policy
        .fields
        .get("spec")
        .and_then(|s| s.get("priority"))
        .and_then(serde_json::Value::as_i64)
        .and_then(|p| i32::try_from(p).ok())
        .unwrap_or(0)
}

/// The policy's node selector; a missing one selects every node, as the drainer reads it.
/// `None` when it does not read (the CRD would have refused it).
fn selector(policy: &RotationPolicy) -> Option<LabelSelector> {
    policy
        .fields
        .get("spec")
        .and_then(|s| s.get("nodeSelector"))
        .map_or_else(
            || Ok(metav1::LabelSelector::default()),
            metav1::LabelSelector::deserialize,
        )
        .ok()
        .and_then(|s| LabelSelector::from_k8s(Some(&s)).ok())
}

fn node_view(c: &Cluster, n: &Node, shown: Shown) -> NodeView {
    let labels = n.metadata.labels.as_ref();
    let annotation = |key: &str| {
        n.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .cloned()
    };
    let kubelet = n
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.kubelet_version.clone())
        .unwrap_or_default();
    let group = node_group_of(n).and_then(|g| c.node_groups().get(g));
    let image = group
        .and_then(|g| labels.and_then(|l| l.get(&g.spec.template.image_label)))
        .cloned()
        .unwrap_or_default();
    // A node is current when it matches what its group launches now; nodes outside any group
    // are never rotated.
    let outdated = group.is_some_and(|g| {
        kubelet != g.spec.template.kubelet_version || image != g.spec.template.image
    });
    NodeView {
        name: n.metadata.name.clone().unwrap_or_default(),
        group: node_group_of(n).unwrap_or_default().to_string(),
        zone: labels
            .and_then(|l| l.get("topology.kubernetes.io/zone"))
            .cloned()
            .unwrap_or_default(),
        version: match shown {
            Shown::KubeletVersion => kubelet,
            Shown::Image => image,
        },
        outdated,
        ready: node_ready(n),
        taint: node_taints(n)
            .iter()
            .find(|t| t.key == DRAIN_TAINT_KEY)
            .map(|t| t.value.clone().unwrap_or_default()),
        phase: annotation(PHASE_ANNOTATION),
        blocker: annotation(BLOCKER_ANNOTATION),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rotor_sim::scenario::Scenario;

    fn cluster() -> Cluster {
        let s = Scenario::from_yaml(
            "nodeGroups: [{name: g, size: 2, zones: [us-east-1a, us-east-1b], template: {kubeletVersion: v1.33.4, image: ami-old, nodeName: 'n-{index}'}}]",
            "t",
        )
        .unwrap();
        rotor_sim::seed::build(&s, jiff::Timestamp::now())
    }

    #[test]
    fn nodes_are_outdated_once_their_group_template_moves_on() {
        let mut c = cluster();
        let s = snapshot(&c, 0.0, Shown::KubeletVersion);
        assert_eq!(s.nodes.len(), 2);
        assert!(s.nodes.iter().all(|n| !n.outdated && n.ready));
        assert_eq!(s.nodes[0].version, "v1.33.4");
        assert_eq!(s.nodes[1].zone, "us-east-1b");

        c.node_group_mut("g").unwrap().spec.template.image = "ami-new".into();
        let s = snapshot(&c, 1.0, Shown::Image);
        assert!(s.nodes.iter().all(|n| n.outdated));
        assert_eq!(s.nodes[0].version, "ami-old");
    }

    #[test]
    fn taint_and_rotor_annotations_are_read() {
        let mut c = cluster();
        let n = c.nodes.get("", "n-0").unwrap().clone();
        c.nodes.modify(&n, |n| {
            n.spec.get_or_insert_with(Default::default).taints =
                Some(vec![rotor_core::contract::drain_taint(
                    rotor_core::contract::DrainReason::Image,
                    Default::default(),
                )]);
            n.metadata.annotations = Some(
                [
                    (PHASE_ANNOTATION.to_string(), "blocked".to_string()),
                    (BLOCKER_ANNOTATION.to_string(), "pod a/b".to_string()),
                ]
                .into(),
            );
        });
        c.stats.count_eviction("success");
        c.stats.count_eviction("budget");
        c.stats.count_eviction("budget");
        let s = snapshot(&c, 0.0, Shown::KubeletVersion);
        assert_eq!(s.nodes[0].taint.as_deref(), Some("image"));
        assert_eq!(s.nodes[0].phase.as_deref(), Some("blocked"));
        assert_eq!(s.nodes[0].blocker.as_deref(), Some("pod a/b"));
        assert_eq!(s.nodes[1].taint, None);
        assert_eq!((s.evictions, s.refusals), (1, 2));
    }

    #[test]
    fn pools_show_the_status_the_drainer_wrote() {
        let s = Scenario::from_yaml(
            "nodeGroups: [{name: g, size: 3, template: {labels: {pool: g}}}, {name: h, size: 1, template: {}}]
rotationPolicies: [{metadata: {name: b}, spec: {}},
  {metadata: {name: a}, spec: {nodeSelector: {matchLabels: {pool: g}}}}]",
            "t",
        )
        .unwrap();
        let mut c = rotor_sim::seed::build(&s, jiff::Timestamp::now());
        let a = c.rotation_policies.get("", "a").unwrap().clone();
        c.rotation_policies.modify(&a, |p| {
            p.fields.insert(
                "status".into(),
                serde_json::json!({
                    "nodes": 2, "outOfDate": 2, "draining": 1, "budget": "1 of 2",
                    "conditions": [
                        {"type": "Paused", "status": "False", "reason": "Open", "message": "open"},
                        {"type": "Halted", "status": "True", "reason": "Breaker", "message": "a replacement never came up"}
                    ]
                }),
            );
        });
        let snap = snapshot(&c, 0.0, Shown::KubeletVersion);
        let shown: Vec<String> = snap.pools.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "pool a: 2 nodes, 2 out of date, 1 draining, 0 drained, 0 blocked, budget 1 of 2; Halted: a replacement never came up",
                "pool b: no status from the drainer yet",
            ]
        );
        // What each governs now, to tell a status written before the last node came or went:
        // at the same priority, g's three nodes are an overlap and count for neither policy.
        let governs = |snap: &Snapshot| snap.pools.iter().map(|p| p.governs).collect::<Vec<_>>();
        assert_eq!(governs(&snap), [Some(0), Some(1)]);
        // Above b, a governs g's nodes; b keeps h's.
        let a = c.rotation_policies.get("", "a").unwrap().clone();
        c.rotation_policies.modify(&a, |p| {
            p.fields["spec"]["priority"] = serde_json::json!(10);
        });
        assert_eq!(
            governs(&snapshot(&c, 0.0, Shown::KubeletVersion)),
            [Some(3), Some(1)]
        );
    }
}
