//! The `scale` subresource of Deployments, ReplicaSets and StatefulSets (`kubectl scale`): an
//! `autoscaling/v1` Scale view of the object's replicas, written back as `spec.replicas`.

use serde_json::{Value, json};

use crate::meta::ApiError;

/// Kinds (by plural) that serve `/scale`.
pub fn serves_scale(group: &str, plural: &str) -> bool {
    group == "apps" && matches!(plural, "deployments" | "replicasets" | "statefulsets")
}

/// The Scale object for a workload's JSON.
pub fn scale_of(obj: &Value) -> Value {
    let m = &obj["metadata"];
    let selector = obj["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|l| {
            l.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m["name"],
            "namespace": m["namespace"],
            "uid": m["uid"],
            "resourceVersion": m["resourceVersion"],
            "creationTimestamp": m["creationTimestamp"],
        },
        "spec": {"replicas": obj["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {"replicas": obj["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector},
    })
}

/// The replica count a written Scale asks for, checking it is a non-negative integer.
pub fn requested_replicas(scale: &Value) -> Result<i64, ApiError> {
    let name = scale["metadata"]["name"].as_str().unwrap_or("");
    match scale["spec"]["replicas"].as_i64() {
        Some(n) if n >= 0 => Ok(n),
        _ => Err(ApiError::invalid(
            "Scale",
            name,
            "spec.replicas: Invalid value: must be a non-negative integer",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_reflects_replicas_and_selector() {
        let d = json!({"metadata": {"name": "web", "namespace": "shop", "resourceVersion": "7"},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}}}, "status": {"replicas": 3}});
        let s = scale_of(&d);
        assert_eq!(s["spec"]["replicas"], 4);
        assert_eq!(s["status"]["replicas"], 3);
        assert_eq!(s["status"]["selector"], "app=web");
        assert_eq!(s["metadata"]["resourceVersion"], "7");
        assert!(serves_scale("apps", "deployments") && !serves_scale("", "pods"));
    }

    #[test]
    fn negative_or_missing_replicas_are_invalid() {
        assert_eq!(
            requested_replicas(&json!({"spec": {"replicas": 2}})).unwrap(),
            2
        );
        assert_eq!(
            requested_replicas(&json!({"spec": {"replicas": -1}}))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            requested_replicas(&json!({"spec": {}})).unwrap_err().code,
            422
        );
    }
}
