//! Server-side printing: `kubectl get` asks for `meta.k8s.io/v1` Tables and prints the columns
//! the server chooses. Built from the JSON of a list or a single object, with the columns the
//! real apiserver prints for pods, nodes, deployments and budgets, and Name/Age for the rest.

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::rotor_kinds::printer_columns;

/// Whether the Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// Age as kubectl shows it: 45s, 12m, 3h4m, 5d.
pub fn human_age(created: Option<&str>, now: Timestamp) -> String {
    let Some(t) = created.and_then(|c| c.parse::<Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let s = (now.as_second() - t.as_second()).max(0);
    match s {
        0..120 => format!("{s}s"),
        120..600 => format!("{}m{}s", s / 60, s % 60),
        600..10800 => format!("{}m", s / 60),
        10800..172800 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d", s / 86400),
    }
}

fn col(name: &str, type_: &str, priority: i32) -> Value {
    json!({"name": name, "type": type_, "format": if name == "Name" { "name" } else { "" }, "description": "", "priority": priority})
}

fn pod_cells(o: &Value, age: String) -> Vec<Value> {
    let statuses = o["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let total = o["spec"]["containers"].as_array().map_or(0, |c| c.len());
    let ready = statuses.iter().filter(|s| s["ready"] == true).count();
    let restarts: i64 = statuses
        .iter()
        .filter_map(|s| s["restartCount"].as_i64())
        .sum();
    let phase = o["status"]["phase"].as_str().unwrap_or("Pending");
    let status = if o["metadata"]["deletionTimestamp"].is_string() {
        "Terminating".to_string()
    } else if phase == "Succeeded" {
        "Completed".to_string()
    } else if phase == "Failed" {
        "Error".to_string()
    } else {
        phase.to_string()
    };
    vec![
        o["metadata"]["name"].clone(),
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts),
        json!(age),
        json!(o["status"]["podIP"].as_str().unwrap_or("<none>")),
        json!(o["spec"]["nodeName"].as_str().unwrap_or("<none>")),
        json!("<none>"),
        json!("<none>"),
    ]
}

fn node_cells(o: &Value, age: String) -> Vec<Value> {
    let conds = o["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = conds
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    let mut status = if ready {
        "Ready".to_string()
    } else {
        "NotReady".to_string()
    };
    if o["spec"]["unschedulable"] == true {
        status.push_str(",SchedulingDisabled");
    }
    let addr = |t: &str| {
        o["status"]["addresses"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["type"] == t))
            .and_then(|x| x["address"].as_str())
            .unwrap_or("<none>")
            .to_string()
    };
    let info = &o["status"]["nodeInfo"];
    vec![
        o["metadata"]["name"].clone(),
        json!(status),
        json!("<none>"),
        json!(age),
        info["kubeletVersion"].clone(),
        json!(addr("InternalIP")),
        json!(addr("ExternalIP")),
        info["osImage"].clone(),
        info["kernelVersion"].clone(),
        info["containerRuntimeVersion"].clone(),
    ]
}

fn deployment_cells(o: &Value, age: String) -> Vec<Value> {
    let want = o["spec"]["replicas"].as_i64().unwrap_or(1);
    let ready = o["status"]["readyReplicas"].as_i64().unwrap_or(0);
    vec![
        o["metadata"]["name"].clone(),
        json!(format!("{ready}/{want}")),
        json!(o["status"]["updatedReplicas"].as_i64().unwrap_or(0)),
        json!(o["status"]["availableReplicas"].as_i64().unwrap_or(0)),
        json!(age),
    ]
}

fn pdb_cells(o: &Value, age: String) -> Vec<Value> {
    let show = |v: &Value| match v {
        Value::Null => "N/A".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    vec![
        o["metadata"]["name"].clone(),
        json!(show(&o["spec"]["minAvailable"])),
        json!(show(&o["spec"]["maxUnavailable"])),
        json!(o["status"]["disruptionsAllowed"].as_i64().unwrap_or(0)),
        json!(age),
    ]
}

/// A Table for the objects of one kind, from a list (`items`) or a single object.
pub fn to_table(kind: &str, doc: &Value, now: Timestamp) -> Value {
    let crd_columns = printer_columns(kind);
    let columns: Vec<Value> = match kind {
        "Pod" => vec![
            col("Name", "string", 0),
            col("Ready", "string", 0),
            col("Status", "string", 0),
            col("Restarts", "string", 0),
            col("Age", "string", 0),
            col("IP", "string", 1),
            col("Node", "string", 1),
            col("Nominated Node", "string", 1),
            col("Readiness Gates", "string", 1),
        ],
        "Node" => vec![
            col("Name", "string", 0),
            col("Status", "string", 0),
            col("Roles", "string", 0),
            col("Age", "string", 0),
            col("Version", "string", 0),
            col("Internal-IP", "string", 1),
            col("External-IP", "string", 1),
            col("OS-Image", "string", 1),
            col("Kernel-Version", "string", 1),
            col("Container-Runtime", "string", 1),
        ],
        "Deployment" => vec![
            col("Name", "string", 0),
            col("Ready", "string", 0),
            col("Up-to-date", "string", 0),
            col("Available", "string", 0),
            col("Age", "string", 0),
        ],
        "PodDisruptionBudget" => vec![
            col("Name", "string", 0),
            col("Min Available", "string", 0),
            col("Max Unavailable", "string", 0),
            col("Allowed Disruptions", "integer", 0),
            col("Age", "string", 0),
        ],
        _ => match crd_columns {
            Some(crd) => std::iter::once(col("Name", "string", 0))
                .chain(crd.iter().map(|c| col(&c.name, &c.type_, c.priority)))
                .collect(),
            None => vec![col("Name", "string", 0), col("Age", "string", 0)],
        },
    };
    let items: Vec<&Value> = match doc.get("items").and_then(Value::as_array) {
        Some(items) => items.iter().collect(),
        None => vec![doc],
    };
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let age = human_age(o["metadata"]["creationTimestamp"].as_str(), now);
            let cells = match kind {
                "Pod" => pod_cells(o, age),
                "Node" => node_cells(o, age),
                "Deployment" => deployment_cells(o, age),
                "PodDisruptionBudget" => pdb_cells(o, age),
                _ => match crd_columns {
                    Some(crd) => std::iter::once(o["metadata"]["name"].clone())
                        .chain(crd.iter().map(|c| match c.type_.as_str() {
                            "date" => json!(human_age(c.value_in(o).as_str(), now)),
                            _ => c.value_in(o).clone(),
                        }))
                        .collect(),
                    None => vec![o["metadata"]["name"].clone(), json!(age)],
                },
            };
            json!({
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]},
            })
        })
        .collect();
    let mut meta = json!({"resourceVersion": doc["metadata"]["resourceVersion"]});
    if let Some(c) = doc["metadata"].get("continue") {
        meta["continue"] = c.clone();
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": columns, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_accept_header_selects_tables() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
        assert!(!wants_table(
            "application/vnd.kubernetes.protobuf,application/json"
        ));
    }

    #[test]
    fn node_rows_show_cordon_and_version() {
        let node = json!({"metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.32.9"}}});
        let t = to_table(
            "Node",
            &json!({"metadata": {"resourceVersion": "5"}, "items": [node]}),
            "2026-01-01T00:05:00Z".parse().unwrap(),
        );
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "Ready,SchedulingDisabled");
        assert_eq!(cells[3], "5m0s");
        assert_eq!(cells[4], "v1.32.9");
        assert_eq!(t["metadata"]["resourceVersion"], "5");
    }

    #[test]
    fn rotation_policies_show_their_crds_columns() {
        let policy = json!({"metadata": {"name": "gpu", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"priority": 5}, "status": {"nodes": 4, "outOfDate": 2, "draining": 1, "budget": "1 of 4"}});
        let t = to_table(
            "RotationPolicy",
            &policy,
            "2026-01-01T00:00:30Z".parse().unwrap(),
        );
        let names: Vec<_> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names[..3], ["Name", "Priority", "Nodes"]);
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["gpu", 5, 4, 2, 1, null, null, "1 of 4", null, "30s"])
        );
    }

    #[test]
    fn terminating_pods_say_so() {
        let pod = json!({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"containers": [{}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": false, "restartCount": 0}]}});
        let t = to_table("Pod", &pod, Timestamp::now());
        assert_eq!(t["rows"][0]["cells"][1], "0/1");
        assert_eq!(t["rows"][0]["cells"][2], "Terminating");
    }
}
