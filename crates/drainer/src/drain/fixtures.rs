//! Pods and budgets shaped like the API server's answers, for the tests of what a drain decides
//! about them ([`crate::drain::pods`], [`crate::drain::node_plan`], [`crate::drain::budgets`]).

use k8s_openapi::api::core::v1::{Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use rotor_core::contract::{DrainReason, TaintEffect, drain_taint};
use serde_json::{Value, json};

pub(crate) fn taint() -> Taint {
    drain_taint(DrainReason::Manual, TaintEffect::NoSchedule)
}

/// A running ReplicaSet pod on node-1; `extra` is merged into the object (objects merge
/// recursively, other values replace).
pub(crate) fn pod(name: &str, extra: Value) -> Pod {
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

pub(crate) fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

pub(crate) fn pdb(name: &str, spec: Value, status: Value) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "shop", "generation": 1},
        "spec": spec,
        "status": status
    }))
    .expect("valid pdb")
}

pub(crate) fn status(expected: i32, allowed: i32) -> Value {
    json!({"observedGeneration": 1, "expectedPods": expected, "currentHealthy": expected,
           "desiredHealthy": expected - allowed, "disruptionsAllowed": allowed})
}
