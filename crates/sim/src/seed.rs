//! Turns a scenario into a running cluster: namespaces, node groups at their size, workload
//! objects with their pod templates and budgets, then (by default) settles it so that every pod
//! is scheduled, running and Ready before the first client connects.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec, StatefulSet, StatefulSetSpec,
};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EmptyDirVolumeSource, PersistentVolumeClaimVolumeSource,
    PodSpec, PodTemplateSpec, ResourceRequirements, Toleration, TopologySpreadConstraint, Volume,
    VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::cluster::Cluster;
use crate::cluster::objects::{SHUTDOWN_ANNOTATION, STARTUP_ANNOTATION, pod_from_template};
use crate::scenario::{IntOrPercent, Scenario, WorkloadKind, WorkloadSpec};

fn meta(ns: &str, name: &str, now: Timestamp, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        uid: Some(uuid::Uuid::new_v4().to_string()),
        creation_timestamp: Some(Time(now)),
        generation: Some(1),
        labels: Some(labels),
        ..Default::default()
    }
}

fn fmt_duration(d: std::time::Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// The pod template a scenario workload describes.
pub fn pod_template(w: &WorkloadSpec) -> PodTemplateSpec {
    let mut labels = BTreeMap::from([("app".to_string(), w.name.clone())]);
    labels.extend(w.labels.clone());
    let mut annotations = w.annotations.clone();
    if let Some(d) = w.startup {
        annotations.insert(STARTUP_ANNOTATION.into(), fmt_duration(d));
    }
    if let Some(d) = w.shutdown {
        annotations.insert(SHUTDOWN_ANNOTATION.into(), fmt_duration(d));
    }
    let mut requests = BTreeMap::new();
    if let Some(c) = &w.requests.cpu {
        requests.insert("cpu".to_string(), Quantity(c.clone()));
    }
    if let Some(m) = &w.requests.memory {
        requests.insert("memory".to_string(), Quantity(m.clone()));
    }
    let volumes: Vec<Volume> = w
        .volumes
        .iter()
        .enumerate()
        .map(|(i, kind)| {
            let name = format!("{}-{i}", kind.to_lowercase());
            match kind.as_str() {
                "emptyDir" => Volume {
                    name,
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                },
                "persistentVolumeClaim" => Volume {
                    name,
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: format!("data-{}", w.name),
                        read_only: None,
                    }),
                    ..Default::default()
                },
                _ => Volume {
                    name,
                    config_map: Some(ConfigMapVolumeSource {
                        name: w.name.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            }
        })
        .collect();
    let mounts: Vec<VolumeMount> = volumes
        .iter()
        .map(|v| VolumeMount {
            name: v.name.clone(),
            mount_path: format!("/data/{}", v.name),
            ..Default::default()
        })
        .collect();
    let spread = w.spread_max_skew.map(|skew| {
        vec![TopologySpreadConstraint {
            max_skew: skew,
            topology_key: "kubernetes.io/hostname".into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".into(), w.name.clone())])),
                match_expressions: None,
            }),
            ..Default::default()
        }]
    });
    let tolerations: Vec<Toleration> = w
        .tolerations
        .iter()
        .map(|t| Toleration {
            key: t.key.clone(),
            operator: t.operator.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
            toleration_seconds: None,
        })
        .collect();
    let priority = match w.priority_class_name.as_deref() {
        Some("system-node-critical") => Some(2_000_001_000),
        Some("system-cluster-critical") => Some(2_000_000_000),
        _ => None,
    };
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: w.name.clone(),
                image: Some(format!(
                    "registry.example.com/{}/{}:1.0.0",
                    w.namespace, w.name
                )),
                resources: Some(ResourceRequirements {
                    requests: (!requests.is_empty()).then_some(requests),
                    ..Default::default()
                }),
                volume_mounts: (!mounts.is_empty()).then_some(mounts),
                ..Default::default()
            }],
            volumes: (!volumes.is_empty()).then_some(volumes),
            termination_grace_period_seconds: Some(
                w.termination_grace_period_seconds.unwrap_or(30),
            ),
            topology_spread_constraints: spread,
            tolerations: (!tolerations.is_empty()).then_some(tolerations),
            node_selector: (!w.node_selector.is_empty()).then(|| w.node_selector.clone()),
            priority_class_name: w.priority_class_name.clone(),
            priority,
            ..Default::default()
        }),
    }
}

fn selector(w: &WorkloadSpec) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([("app".into(), w.name.clone())])),
        match_expressions: None,
    }
}

fn int_or_percent(v: &IntOrPercent) -> IntOrString {
    match v {
        IntOrPercent::Int(i) => IntOrString::Int(*i),
        IntOrPercent::Str(s) => IntOrString::String(s.clone()),
    }
}

/// Adds one workload (and its budget) to the cluster.
pub fn add_workload(c: &mut Cluster, w: &WorkloadSpec, now: Timestamp) {
    c.ensure_namespace(&w.namespace, now);
    let labels = BTreeMap::from([("app".to_string(), w.name.clone())]);
    let template = pod_template(w);
    match w.kind {
        WorkloadKind::Deployment => {
            c.deployments.put(Deployment {
                metadata: meta(&w.namespace, &w.name, now, labels),
                spec: Some(DeploymentSpec {
                    replicas: Some(w.replicas as i32),
                    selector: selector(w),
                    template,
                    ..Default::default()
                }),
                status: None,
            });
        }
        WorkloadKind::StatefulSet => {
            c.statefulsets.put(StatefulSet {
                metadata: meta(&w.namespace, &w.name, now, labels),
                spec: Some(StatefulSetSpec {
                    replicas: Some(w.replicas as i32),
                    selector: selector(w),
                    template,
                    service_name: Some(w.name.clone()),
                    ..Default::default()
                }),
                status: None,
            });
        }
        WorkloadKind::DaemonSet => {
            c.daemonsets.put(DaemonSet {
                metadata: meta(&w.namespace, &w.name, now, labels),
                spec: Some(DaemonSetSpec {
                    selector: selector(w),
                    template,
                    ..Default::default()
                }),
                status: None,
            });
        }
        WorkloadKind::Pod => {
            for i in 0..w.replicas {
                let name = if w.replicas == 1 {
                    w.name.clone()
                } else {
                    format!("{}-{i}", w.name)
                };
                let mut pod =
                    pod_from_template(&template, &w.namespace, &name, Default::default(), now);
                pod.metadata.owner_references = None;
                c.pods.put(pod);
            }
        }
    }
    if let Some(p) = &w.pdb {
        c.pdbs.put(PodDisruptionBudget {
            metadata: meta(&w.namespace, &w.name, now, BTreeMap::new()),
            spec: Some(PodDisruptionBudgetSpec {
                min_available: p.min_available.as_ref().map(int_or_percent),
                max_unavailable: p.max_unavailable.as_ref().map(int_or_percent),
                selector: Some(selector(w)),
                unhealthy_pod_eviction_policy: p.unhealthy_pod_eviction_policy.clone(),
            }),
            status: None,
        });
    }
}

/// Builds the cluster a scenario describes.
pub fn build(s: &Scenario, now: Timestamp) -> Cluster {
    let mut c = Cluster::new(s.timing.clone(), s.control_plane_version.clone());
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        c.ensure_namespace(ns, now);
    }
    for ns in &s.namespaces {
        c.ensure_namespace(ns, now);
    }
    c.static_pods = s.static_pods.clone();
    for g in &s.node_groups {
        c.add_node_group(g.clone());
        for _ in 0..g.size {
            c.launch_node(&g.name, now, s.start_settled);
        }
    }
    for w in &s.workloads {
        add_workload(&mut c, w, now);
    }
    // As a create through the API would store them (no managedFields: nobody applied them).
    for policy in &s.rotation_policies {
        let mut policy = policy.clone();
        let m = &mut policy.metadata;
        m.uid = Some(uuid::Uuid::new_v4().to_string());
        m.creation_timestamp = Some(Time(now));
        m.generation = Some(1);
        crate::kinds::SimKind::on_create(&mut policy, now);
        c.rotation_policies.put(policy);
    }
    if s.start_settled {
        // Controllers create pods, the scheduler binds them, settle makes them Ready: a few
        // passes reach the steady state (StatefulSets add one pod per pass).
        let max_sts = s
            .workloads
            .iter()
            .filter(|w| w.kind == WorkloadKind::StatefulSet)
            .map(|w| w.replicas)
            .max()
            .unwrap_or(0);
        for _ in 0..(6 + max_sts as usize * 2) {
            c.step(now, true);
            // Drop each pass's history at once: keeping every intermediate version of
            // 150,000 pods until the end would double the peak memory.
            c.compact_all();
        }
        // Settled pods were never unschedulable for long; start the counters clean.
        c.stats.unschedulable_pod_seconds = 0.0;
        // The history of building the cluster is not worth keeping for watchers.
        c.compact_all();
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::objects::{node_name, pod_ready};

    #[test]
    fn a_scenarios_rotation_policies_are_stored_as_a_create_would_store_them() {
        let s = Scenario::from_yaml(
            "rotationPolicies: [{metadata: {name: gpu, labels: {team: ml}}, spec: {budgets: [{nodes: '1'}]}}]",
            "t",
        )
        .unwrap();
        let c = build(&s, Timestamp::now());
        let gpu = c
            .rotation_policies
            .get("", "gpu")
            .expect("stored, cluster-scoped");
        let m = &gpu.metadata;
        assert!(m.uid.is_some() && m.creation_timestamp.is_some() && m.resource_version.is_some());
        assert_eq!(m.generation, Some(1), "the drainer's status echoes it");
        assert_eq!(m.labels.as_ref().unwrap()["team"], "ml");
        assert_eq!(gpu.fields["spec"]["budgets"][0]["nodes"], "1");
        assert!(
            !gpu.fields.contains_key("status"),
            "only the drainer writes it"
        );
    }

    #[test]
    fn a_settled_scenario_runs_every_pod() {
        let s = Scenario::from_yaml(
            r#"
nodeGroups: [{name: g, size: 3, template: {cpu: "4", memory: 16Gi}}]
staticPods: [{name: kube-proxy}]
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 4, requests: {cpu: 500m}, pdb: {minAvailable: 3}, spreadMaxSkew: 1}
  - {kind: StatefulSet, name: db, namespace: shop, replicas: 3, pdb: {maxUnavailable: 1}}
  - {kind: DaemonSet, name: agent, namespace: kube-system}
  - {kind: Pod, name: lonely, namespace: shop}
"#,
            "t",
        )
        .unwrap();
        let c = build(&s, Timestamp::now());
        assert_eq!(c.nodes.len(), 3);
        // 4 web + 3 db + 3 agent + 3 mirror + 1 bare
        assert_eq!(c.pods.len(), 14);
        assert!(
            c.pods
                .values()
                .all(|p| node_name(p).is_some() && pod_ready(p))
        );
        let web = c.pdbs.get("shop", "web").unwrap().status.clone().unwrap();
        assert_eq!(
            (
                web.current_healthy,
                web.desired_healthy,
                web.disruptions_allowed
            ),
            (4, 3, 1)
        );
        let db = c.pdbs.get("shop", "db").unwrap().status.clone().unwrap();
        assert_eq!(
            (db.expected_pods, db.desired_healthy, db.disruptions_allowed),
            (3, 2, 1)
        );
        assert!(c.pods.get("shop", "db-0").is_some() && c.pods.get("shop", "db-2").is_some());
    }
}
