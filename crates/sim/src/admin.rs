//! The simulator's own admin API under `/sim/v1/`, outside the Kubernetes API: statistics,
//! actions that a cloud or an operator would take (raise the control-plane version, change a
//! node group's template), and fault injection.
//!
//! - `GET  /sim/v1/stats` (with `authorization`: 403 and 401 counts and the last denials, when
//!   a policy is enforced)
//! - `POST /sim/v1/control-plane-version` `{"version": "v1.34.1"}`
//! - `POST /sim/v1/node-groups/{name}/template` with template fields to change, e.g.
//!   `{"kubeletVersion": "v1.34.1", "image": "ami-..."}`
//! - `POST /sim/v1/faults` `{"errors": [{"verb": "create", "resource": "pods/eviction", "rate": 0.5, "code": 500}], "latencyMs": 20}`
//! - `POST /sim/v1/faults/drop-watches`, `POST /sim/v1/faults/expire-watches` (next resume gets 410)
//! - `POST /sim/v1/stats/reset`
//! - `POST /sim/v1/pause` `{"paused": true}` stops the simulated control plane (controllers,
//!   scheduler, kubelets, autoscaler) while the API keeps serving; `POST /sim/v1/step` runs it
//!   once. For tests that need a state to hold still, e.g. a budget not yet processed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::cluster::Cluster;
use crate::cluster::objects::{
    WORK_FINISHED, WORK_KUBELET, WORK_PENDING, node_group_of, node_name, node_ready, node_taints,
    node_unschedulable, pod_ready, terminal, terminating,
};
use crate::scenario::{NodeTemplate, version_minor};
use crate::state::{DelayRule, ErrorRule, Sim};

pub fn router() -> Router<Arc<Sim>> {
    Router::new()
        .route("/stats", get(stats))
        .route("/stats/reset", post(reset_stats))
        .route("/control-plane-version", post(set_version))
        .route("/node-groups/{name}/template", post(set_template))
        .route("/faults", post(set_faults))
        .route("/faults/drop-watches", post(drop_watches))
        .route("/faults/expire-watches", post(expire_watches))
        .route("/pause", post(pause))
        .route("/step", post(step))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PauseBody {
    paused: bool,
}

async fn pause(State(sim): State<Arc<Sim>>, Json(b): Json<PauseBody>) -> Response {
    sim.cluster
        .lock()
        .expect("cluster lock")
        .set_paused(b.paused);
    tracing::info!(paused = b.paused, "control plane pause changed");
    Json(json!({"paused": b.paused})).into_response()
}

async fn step(State(sim): State<Arc<Sim>>) -> Response {
    let mut c = sim.cluster.lock().expect("cluster lock");
    c.step_regardless(jiff::Timestamp::now());
    Json(json!({"resourceVersion": c.rev.current().to_string()})).into_response()
}

fn bad(msg: String) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({"error": msg}))).into_response()
}

/// A snapshot of what the simulator counts and the state of nodes and pods.
pub fn snapshot(c: &Cluster) -> Value {
    let drain_key = rotor_core::contract::DRAIN_TAINT_KEY;
    let mut nodes = BTreeMap::<&str, u64>::new();
    let mut groups = BTreeMap::<String, Value>::new();
    for n in c.nodes.values() {
        *nodes.entry("total").or_default() += 1;
        *nodes
            .entry(if node_ready(n) { "ready" } else { "notReady" })
            .or_default() += 1;
        if node_unschedulable(n) {
            *nodes.entry("cordoned").or_default() += 1;
        }
        if node_taints(n).iter().any(|t| t.key == drain_key) {
            *nodes.entry("drainTainted").or_default() += 1;
        }
    }
    for (name, g) in c.node_groups() {
        let live: Vec<_> = c
            .nodes
            .values()
            .filter(|n| node_group_of(n) == Some(name.as_str()))
            .collect();
        let current = live
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.node_info.as_ref())
                    .map(|i| i.kubelet_version.as_str())
                    == Some(g.spec.template.kubelet_version.as_str())
                    && n.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(&g.spec.template.image_label))
                        == Some(&g.spec.template.image)
            })
            .count();
        groups.insert(
            name.clone(),
            json!({"desired": g.desired(), "nodes": live.len(), "fromCurrentTemplate": current, "template": g.spec.template}),
        );
    }
    let mut pods = BTreeMap::<&str, u64>::new();
    // Pods running and Ready, most of them, are in none of the work index's classes: count the
    // others one by one, and those as the rest.
    let index = c.pod_index;
    let mut others = 0u64;
    for class in [WORK_PENDING, WORK_KUBELET, WORK_FINISHED] {
        for (_, p) in c.pods.indexed(index.work, class) {
            others += 1;
            let key = if terminating(p) {
                "terminating"
            } else if terminal(p) {
                "finished"
            } else if node_name(p).is_none() {
                "pending"
            } else if pod_ready(p) {
                "ready"
            } else {
                "starting"
            };
            *pods.entry(key).or_default() += 1;
        }
    }
    let total = c.pods.len() as u64;
    for (key, n) in [
        ("total", total),
        ("ready", total - others),
        (
            "daemonOrMirror",
            c.pods.index_len(index.node_agent, "") as u64,
        ),
    ] {
        if n > 0 {
            *pods.entry(key).or_default() += n;
        }
    }
    let s = &c.stats;
    json!({
        "resourceVersion": c.rev.current().to_string(),
        "controlPlaneVersion": c.control_plane_version,
        "requests": s.requests,
        "requestsTotal": s.total_requests(),
        "evictions": s.evictions,
        "budgetViolations": s.budget_violations.len(),
        "budgetViolationList": s.budget_violations,
        "unschedulablePods": c.unschedulable_pods(),
        "unschedulablePodSeconds": (s.unschedulable_pod_seconds * 1000.0).round() / 1000.0,
        "nodes": nodes,
        "nodeGroups": groups,
        "pods": pods,
        "nodesLaunched": s.nodes_launched,
        "nodesRemoved": s.nodes_removed,
        "podsCreated": s.pods_created,
        "podsPreempted": s.pods_preempted,
        "evictionsInFlightPeak": s.evictions_in_flight_peak,
        "nodePodReads": s.node_pod_reads,
        "paused": c.paused(),
    })
}

async fn stats(State(sim): State<Arc<Sim>>) -> Response {
    let mut out = snapshot(&sim.cluster.lock().expect("cluster lock"));
    // Present only when a policy is enforced: what it refused.
    if let Some(a) = &sim.authz {
        out["authorization"] = a.stats_json();
    }
    Json(out).into_response()
}

async fn reset_stats(State(sim): State<Arc<Sim>>) -> Response {
    sim.cluster.lock().expect("cluster lock").stats.reset();
    if let Some(a) = &sim.authz {
        a.reset_stats();
    }
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VersionBody {
    version: String,
}

async fn set_version(State(sim): State<Arc<Sim>>, Json(b): Json<VersionBody>) -> Response {
    if version_minor(&b.version).is_none() {
        return bad(format!(
            "version {:?} is not a Kubernetes version like v1.34.1",
            b.version
        ));
    }
    let mut c = sim.cluster.lock().expect("cluster lock");
    tracing::info!(from = %c.control_plane_version, to = %b.version, "control-plane version changed");
    c.control_plane_version = b.version;
    Json(json!({"controlPlaneVersion": c.control_plane_version})).into_response()
}

async fn set_template(
    State(sim): State<Arc<Sim>>,
    Path(name): Path<String>,
    Json(changes): Json<Value>,
) -> Response {
    let mut c = sim.cluster.lock().expect("cluster lock");
    let Some(g) = c.node_group_mut(&name) else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("no node group named {name:?}")})),
        )
            .into_response();
    };
    let mut t = serde_json::to_value(&g.spec.template).unwrap_or_default();
    json_patch::merge(&mut t, &changes);
    match serde_json::from_value::<NodeTemplate>(t) {
        Ok(t) => {
            if version_minor(&t.kubelet_version).is_none() {
                return bad(format!(
                    "kubeletVersion {:?} is not a version like v1.34.1",
                    t.kubelet_version
                ));
            }
            g.spec.template = t;
            tracing::info!(group = %name, "node group template changed; new nodes use it");
            Json(json!({"group": name, "template": g.spec.template})).into_response()
        }
        Err(e) => bad(format!("invalid template for node group {name:?}: {e}")),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FaultsBody {
    #[serde(default)]
    errors: Vec<ErrorRule>,
    #[serde(default)]
    latency_ms: u64,
    #[serde(default)]
    delays: Vec<DelayRule>,
}

/// The verbs a request is logged and matched under (`request_info::verb_of`).
const VERBS: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// What a fault rule must be to fire as asked: a rate, a code the simulator answers, and a
/// verb the API logs (a misspelt one would match nothing, silently).
fn check_rule(r: &ErrorRule) -> Result<(), String> {
    if !(0.0..=1.0).contains(&r.rate) {
        return Err(format!("rate {} must be between 0 and 1", r.rate));
    }
    check_verb(&r.verb)?;
    if ![404, 429, 500, 503, 504].contains(&r.code) {
        return Err(format!(
            "code {} must be one of 404, 429, 500, 503, 504",
            r.code
        ));
    }
    Ok(())
}

/// A rule's verb, if given, is one the API logs (a misspelt one would match nothing).
fn check_verb(verb: &Option<String>) -> Result<(), String> {
    match verb {
        Some(verb) if !VERBS.contains(&verb.as_str()) => Err(format!(
            "verb {verb:?} must be one of {} (or left out for any)",
            VERBS.join(", ")
        )),
        _ => Ok(()),
    }
}

async fn set_faults(State(sim): State<Arc<Sim>>, Json(b): Json<FaultsBody>) -> Response {
    if let Some(why) = b.errors.iter().find_map(|r| check_rule(r).err()) {
        return bad(why);
    }
    if let Some(why) = b.delays.iter().find_map(|d| check_verb(&d.verb).err()) {
        return bad(why);
    }
    let mut f = sim.faults.lock().expect("faults lock");
    f.rules = b.errors;
    f.latency = Duration::from_millis(b.latency_ms);
    f.delays = b.delays;
    Json(json!({"errors": f.rules, "latencyMs": b.latency_ms, "delays": f.delays})).into_response()
}

async fn drop_watches(State(sim): State<Arc<Sim>>) -> Response {
    sim.drop_watches();
    StatusCode::NO_CONTENT.into_response()
}

async fn expire_watches(State(sim): State<Arc<Sim>>) -> Response {
    sim.cluster.lock().expect("cluster lock").compact_all();
    sim.drop_watches();
    StatusCode::NO_CONTENT.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_rule_that_could_not_fire_as_asked_is_refused() {
        let rule = |verb: &str, rate: f64, code: u16| ErrorRule {
            verb: Some(verb.into()),
            resource: Some("pods/eviction".into()),
            rate,
            code,
            after_serving: false,
            times: None,
        };
        assert_eq!(check_rule(&rule("create", 0.5, 429)), Ok(()));
        assert!(
            check_rule(&rule("evict", 0.5, 429))
                .unwrap_err()
                .contains("verb \"evict\"")
        );
        assert!(
            check_rule(&rule("create", 1.5, 429))
                .unwrap_err()
                .contains("rate")
        );
        assert!(
            check_rule(&rule("create", 0.5, 409))
                .unwrap_err()
                .contains("code 409")
        );
    }
}
