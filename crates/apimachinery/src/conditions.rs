//! Status conditions of pods and nodes, read as their writers set them: kubelet (`Ready`), the
//! scheduler (`PodScheduled`, and `DisruptionTarget` on a pod it preempts), the Eviction API
//! (`DisruptionTarget`), the node lifecycle controller (a node's `Ready`).
//!
//! A condition's `status` is a string, `"True"`, `"False"` or `"Unknown"`; only `"True"` is
//! true, so an `Unknown` readiness (a node that stopped reporting) is not ready.

use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, PodCondition};

/// The pod's conditions, none when its status has none yet (a pod just created).
pub fn pod_conditions(pod: &Pod) -> impl Iterator<Item = &PodCondition> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
}

/// The pod's condition of `type_` whose status is `status`, if it has one.
pub fn pod_condition<'a>(pod: &'a Pod, type_: &str, status: &str) -> Option<&'a PodCondition> {
    pod_conditions(pod).find(|c| c.type_ == type_ && c.status == status)
}

/// Whether kubelet reports the pod `Ready`.
pub fn pod_is_ready(pod: &Pod) -> bool {
    pod_condition(pod, "Ready", "True").is_some()
}

/// The scheduler's word that it found no node for the pod: `PodScheduled` `False` with reason
/// `Unschedulable` (a pod held by a scheduling gate says `SchedulingGated` instead, and one the
/// scheduler has not tried yet has no such condition).
pub fn pod_unschedulable(pod: &Pod) -> Option<&PodCondition> {
    pod_conditions(pod).find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    })
}

/// The node's conditions, none when its status has none yet.
pub fn node_conditions(node: &Node) -> impl Iterator<Item = &NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
}

/// Whether the node reports `Ready` (`Unknown`, a kubelet that stopped reporting, is not).
pub fn node_is_ready(node: &Node) -> bool {
    node_conditions(node).any(|c| c.type_ == "Ready" && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(conditions: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "shop"},
            "status": {"phase": "Pending", "conditions": conditions}
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_is_ready_only_when_its_ready_condition_is_true() {
        let ready = pod(json!([
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True"}
        ]));
        assert!(pod_is_ready(&ready));
        assert!(!pod_is_ready(&pod(
            json!([{"type": "Ready", "status": "False"}])
        )));
        assert!(!pod_is_ready(&pod(
            json!([{"type": "ContainersReady", "status": "True"}])
        )));
        let no_status: Pod = serde_json::from_value(json!({"metadata": {"name": "new"}})).unwrap();
        assert!(!pod_is_ready(&no_status));
        assert_eq!(pod_conditions(&no_status).count(), 0);
    }

    #[test]
    fn unschedulable_is_the_schedulers_reason_not_any_unscheduled_pod() {
        let unschedulable = pod(json!([{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient cpu."
        }]));
        assert_eq!(
            pod_unschedulable(&unschedulable).and_then(|c| c.message.as_deref()),
            Some("0/3 nodes are available: 3 Insufficient cpu.")
        );
        let gated = pod(json!([{
            "type": "PodScheduled", "status": "False", "reason": "SchedulingGated"
        }]));
        assert!(pod_unschedulable(&gated).is_none());
        assert!(pod_condition(&gated, "PodScheduled", "False").is_some());
        assert!(pod_condition(&gated, "PodScheduled", "True").is_none());
        assert!(pod_unschedulable(&pod(json!([]))).is_none());
    }

    #[test]
    fn a_node_reporting_unknown_is_not_ready() {
        let node = |status: &str| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "ip-10-0-1-7"},
                "status": {"conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": status}
                ]}
            }))
            .unwrap()
        };
        assert!(node_is_ready(&node("True")));
        assert!(!node_is_ready(&node("Unknown")));
        assert!(!node_is_ready(&node("False")));
    }
}
