//! The simulated workload controllers. Deployments own one ReplicaSet per template; ReplicaSets
//! replace missing pods under new names; StatefulSets recreate `name-N` under the same name,
//! one at a time and in order; DaemonSets keep one pod on every node whose taints they
//! tolerate (cordon included); every node's kubelet keeps its static pods' mirror pods.

// A file beside this one (not under it), so that mod.rs names it without naming this file.
#[path = "workloads_memory.rs"]
pub(super) mod memory;

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{
    DaemonSetStatus, DeploymentStatus, ReplicaSet, ReplicaSetCondition, ReplicaSetSpec,
    ReplicaSetStatus, StatefulSetStatus,
};
use k8s_openapi::api::core::v1::{
    Container, Node, Pod, PodSpec, PodTemplateSpec, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use super::Cluster;
use super::objects::{
    MIRROR_ANNOTATION, bind_and_start, controller_of, mark_pod_ready, node_taints,
    pod_from_template, pod_ready, terminal, terminating,
};
use super::pods::Removal;
use super::scheduler::untolerated;
use crate::meta::{DeleteOptions, NAME_ALPHABET, generate_name};

fn owner(api_version: &str, kind: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A short stable hash of a pod template, like the `pod-template-hash` label.
fn template_hash(t: &PodTemplateSpec) -> String {
    let s = serde_json::to_string(t).unwrap_or_default();
    let mut h = s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    (0..10)
        .map(|_| {
            let c = NAME_ALPHABET[(h % NAME_ALPHABET.len() as u64) as usize] as char;
            h /= NAME_ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// The pods a controller (by uid) owns, in key order.
fn pods_of(c: &Cluster, uid: &str) -> Vec<Arc<Pod>> {
    c.pods
        .indexed(c.pod_index.controller, uid)
        .map(|(_, p)| p.clone())
        .collect()
}

fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("")
}

fn active(p: &Pod) -> bool {
    !terminating(p) && !terminal(p)
}

/// Tolerations the DaemonSet controller adds to every daemon pod.
fn daemon_tolerations() -> Vec<Toleration> {
    let t = |key: &str, effect: &str| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Default::default()
    };
    vec![
        t("node.kubernetes.io/not-ready", "NoExecute"),
        t("node.kubernetes.io/unreachable", "NoExecute"),
        t("node.kubernetes.io/disk-pressure", "NoSchedule"),
        t("node.kubernetes.io/memory-pressure", "NoSchedule"),
        t("node.kubernetes.io/pid-pressure", "NoSchedule"),
        t("node.kubernetes.io/unschedulable", "NoSchedule"),
    ]
}

impl Cluster {
    pub(super) fn create_pod(&mut self, pod: Pod) {
        self.stats.pods_created += 1;
        self.pods.put(pod);
    }

    pub(super) fn reconcile_deployments(&mut self, now: Timestamp) {
        // A Deployment reads itself and its ReplicaSets: skip namespaces neither changed in.
        let since = std::mem::replace(&mut self.workloads.deployments, self.rev.current());
        let deployments: Vec<_> = self
            .deployments
            .values()
            .filter(|d| {
                let ns = namespace_of(&d.metadata);
                self.deployments.written_since(ns, since)
                    || self.replicasets.written_since(ns, since)
            })
            .cloned()
            .collect();
        for d in deployments {
            let ns = d.metadata.namespace.clone().unwrap_or_default();
            let Some(spec) = d.spec.as_ref() else {
                continue;
            };
            let replicas = spec.replicas.unwrap_or(1);
            let hash = template_hash(&spec.template);
            let dname = d.metadata.name.clone().unwrap_or_default();
            let rs_name = format!("{dname}-{hash}");
            let d_uid = d.metadata.uid.clone().unwrap_or_default();
            // Scale every other ReplicaSet of this Deployment to zero (a replace, not a rolling update).
            let owned: Vec<Arc<ReplicaSet>> = self
                .replicasets
                .range(Some(&ns), None)
                .map(|(_, r)| r.clone())
                .filter(|r| controller_of(&r.metadata).is_some_and(|o| o.uid == d_uid))
                .collect();
            for r in &owned {
                if r.metadata.name.as_deref() != Some(&rs_name)
                    && r.spec.as_ref().and_then(|s| s.replicas) != Some(0)
                {
                    let mut r = (**r).clone();
                    if let Some(s) = r.spec.as_mut() {
                        s.replicas = Some(0);
                    }
                    r.metadata.generation = Some(r.metadata.generation.unwrap_or(1) + 1);
                    self.replicasets.put(r);
                }
            }
            match self.replicasets.get(&ns, &rs_name).cloned() {
                None => {
                    let mut template = spec.template.clone();
                    let meta = template.metadata.get_or_insert_with(Default::default);
                    meta.labels
                        .get_or_insert_with(BTreeMap::new)
                        .insert("pod-template-hash".into(), hash.clone());
                    let mut selector = spec.selector.clone();
                    selector
                        .match_labels
                        .get_or_insert_with(BTreeMap::new)
                        .insert("pod-template-hash".into(), hash.clone());
                    let rs = ReplicaSet {
                        metadata: ObjectMeta {
                            name: Some(rs_name.clone()),
                            namespace: Some(ns.clone()),
                            uid: Some(uuid::Uuid::new_v4().to_string()),
                            creation_timestamp: Some(Time(now)),
                            generation: Some(1),
                            labels: meta.labels.clone(),
                            annotations: Some(BTreeMap::from([(
                                "deployment.kubernetes.io/desired-replicas".into(),
                                replicas.to_string(),
                            )])),
                            owner_references: Some(vec![owner(
                                "apps/v1",
                                "Deployment",
                                &d.metadata,
                            )]),
                            ..Default::default()
                        },
                        spec: Some(ReplicaSetSpec {
                            replicas: Some(replicas),
                            selector,
                            template: Some(template),
                            min_ready_seconds: None,
                        }),
                        status: None,
                    };
                    self.replicasets.put(rs);
                }
                Some(rs) if rs.spec.as_ref().and_then(|s| s.replicas) != Some(replicas) => {
                    let mut rs = (*rs).clone();
                    if let Some(s) = rs.spec.as_mut() {
                        s.replicas = Some(replicas);
                    }
                    rs.metadata.generation = Some(rs.metadata.generation.unwrap_or(1) + 1);
                    self.replicasets.put(rs);
                }
                Some(_) => {}
            }
            // Status from the current ReplicaSet.
            let (ready, total) = self
                .replicasets
                .get(&ns, &rs_name)
                .and_then(|r| r.status.as_ref())
                .map(|s| (s.ready_replicas.unwrap_or(0), s.replicas))
                .unwrap_or((0, 0));
            let status = DeploymentStatus {
                observed_generation: d.metadata.generation,
                replicas: Some(total),
                updated_replicas: Some(total),
                ready_replicas: Some(ready),
                available_replicas: Some(ready),
                unavailable_replicas: Some((replicas - ready).max(0)),
                ..Default::default()
            };
            self.deployments.modify(&d, |d| d.status = Some(status));
        }
    }

    pub(super) fn reconcile_replicasets(&mut self, now: Timestamp) {
        // A ReplicaSet reads itself and its pods: skip namespaces neither changed in.
        let since = std::mem::replace(&mut self.workloads.replicasets, self.rev.current());
        let sets: Vec<_> = self
            .replicasets
            .values()
            .filter(|r| {
                let ns = namespace_of(&r.metadata);
                self.replicasets.written_since(ns, since) || self.pods.written_since(ns, since)
            })
            .cloned()
            .collect();
        for rs in sets {
            let ns = rs.metadata.namespace.clone().unwrap_or_default();
            let name = rs.metadata.name.clone().unwrap_or_default();
            let uid = rs.metadata.uid.clone().unwrap_or_default();
            let want = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let owned = pods_of(self, &uid);
            let pods = &owned;
            let mut live: Vec<&Arc<Pod>> = pods.iter().filter(|p| active(p)).collect();
            let have = live.len() as i32;
            let mut refused = None;
            if have < want
                && let Some(template) = rs.spec.as_ref().and_then(|s| s.template.clone())
            {
                for _ in have..want {
                    let pod = pod_from_template(
                        &template,
                        &ns,
                        &generate_name(&format!("{name}-")),
                        owner("apps/v1", "ReplicaSet", &rs.metadata),
                        now,
                    );
                    // The controller's creates go through admission like anyone's: the pod's
                    // priority comes from its class, and a refusal is the set's ReplicaFailure.
                    let mut pod = pod;
                    match self.admit_priority_of(&mut pod) {
                        Ok(()) => self.create_pod(pod),
                        Err(why) => {
                            refused = Some(why.message);
                            break;
                        }
                    }
                }
            } else if have > want {
                // Remove unscheduled, then not Ready, then newest pods first.
                live.sort_by_key(|p| {
                    (
                        super::objects::node_name(p).is_some(),
                        pod_ready(p),
                        std::cmp::Reverse(p.metadata.creation_timestamp.as_ref().map(|t| t.0)),
                    )
                });
                for p in live.iter().take((have - want) as usize) {
                    let pname = p.metadata.name.clone().unwrap_or_default();
                    let _ = self.delete_pod(
                        &ns,
                        &pname,
                        &DeleteOptions::default(),
                        Removal::System,
                        now,
                    );
                }
            }
            let ready = pods.iter().filter(|p| active(p) && pod_ready(p)).count() as i32;
            let total = pods.iter().filter(|p| active(p)).count() as i32;
            let status = ReplicaSetStatus {
                replicas: total,
                ready_replicas: Some(ready),
                available_replicas: Some(ready),
                fully_labeled_replicas: Some(total),
                observed_generation: rs.metadata.generation,
                conditions: refused.map(|message| {
                    vec![ReplicaSetCondition {
                        type_: "ReplicaFailure".into(),
                        status: "True".into(),
                        reason: Some("FailedCreate".into()),
                        message: Some(message),
                        last_transition_time: Some(Time(now)),
                    }]
                }),
                ..Default::default()
            };
            self.replicasets.modify(&rs, |r| r.status = Some(status));
        }
    }

    pub(super) fn reconcile_statefulsets(&mut self, now: Timestamp) {
        // A StatefulSet reads itself and the pods of its namespace: skip namespaces neither
        // changed in.
        let since = std::mem::replace(&mut self.workloads.statefulsets, self.rev.current());
        let sets: Vec<_> = self
            .statefulsets
            .values()
            .filter(|s| {
                let ns = namespace_of(&s.metadata);
                self.statefulsets.written_since(ns, since) || self.pods.written_since(ns, since)
            })
            .cloned()
            .collect();
        for sts in sets {
            let ns = sts.metadata.namespace.clone().unwrap_or_default();
            let name = sts.metadata.name.clone().unwrap_or_default();
            let Some(spec) = sts.spec.as_ref() else {
                continue;
            };
            let want = spec.replicas.unwrap_or(1);
            // OrderedReady: create the lowest missing ordinal once all lower ones are Ready;
            // a pod still terminating under the same name blocks its own recreation.
            for i in 0..want {
                let pname = format!("{name}-{i}");
                match self.pods.get(&ns, &pname) {
                    Some(p) if pod_ready(p) && !terminating(p) => continue,
                    Some(_) => break,
                    None => {
                        let mut template = spec.template.clone();
                        let meta = template.metadata.get_or_insert_with(Default::default);
                        let labels = meta.labels.get_or_insert_with(BTreeMap::new);
                        labels.insert("statefulset.kubernetes.io/pod-name".into(), pname.clone());
                        labels.insert("apps.kubernetes.io/pod-index".into(), i.to_string());
                        let mut pod = pod_from_template(
                            &template,
                            &ns,
                            &pname,
                            owner("apps/v1", "StatefulSet", &sts.metadata),
                            now,
                        );
                        if let Some(ps) = pod.spec.as_mut() {
                            ps.hostname = Some(pname.clone());
                        }
                        self.create_pod(pod);
                        break;
                    }
                }
            }
            // Scale down from the highest ordinal.
            let uid = sts.metadata.uid.clone().unwrap_or_default();
            let mut extra: Vec<(i32, String)> = self
                .pods
                .range(Some(&ns), None)
                .filter(|(_, p)| {
                    controller_of(&p.metadata).is_some_and(|o| o.uid == uid) && active(p)
                })
                .filter_map(|(k, _)| {
                    let ord: i32 = k.1.rsplit('-').next()?.parse().ok()?;
                    (ord >= want).then(|| (ord, k.1.clone()))
                })
                .collect();
            extra.sort();
            if let Some((_, pname)) = extra.last() {
                let _ =
                    self.delete_pod(&ns, pname, &DeleteOptions::default(), Removal::System, now);
            }
            let owned: Vec<&Arc<Pod>> = self
                .pods
                .range(Some(&ns), None)
                .map(|(_, p)| p)
                .filter(|p| controller_of(&p.metadata).is_some_and(|o| o.uid == uid) && active(p))
                .collect();
            let ready = owned.iter().filter(|p| pod_ready(p)).count() as i32;
            let total = owned.len() as i32;
            let status = StatefulSetStatus {
                replicas: total,
                ready_replicas: Some(ready),
                available_replicas: Some(ready),
                current_replicas: Some(total),
                updated_replicas: Some(total),
                observed_generation: sts.metadata.generation,
                ..Default::default()
            };
            self.statefulsets.modify(&sts, |s| s.status = Some(status));
        }
    }

    pub(super) fn reconcile_daemonsets(&mut self, now: Timestamp) {
        // A DaemonSet reads itself, every node and its pods: skip it unless one changed.
        let since = std::mem::replace(&mut self.workloads.daemonsets, self.rev.current());
        let nodes_changed = self.nodes.any_written_since(since);
        let sets: Vec<_> = self
            .daemonsets
            .values()
            .filter(|d| {
                let ns = namespace_of(&d.metadata);
                nodes_changed
                    || self.daemonsets.written_since(ns, since)
                    || self.pods.written_since(ns, since)
            })
            .cloned()
            .collect();
        if sets.is_empty() {
            return;
        }
        let nodes: Vec<Arc<Node>> = self.nodes.values().cloned().collect();
        for ds in sets {
            let ns = ds.metadata.namespace.clone().unwrap_or_default();
            let name = ds.metadata.name.clone().unwrap_or_default();
            let uid = ds.metadata.uid.clone().unwrap_or_default();
            let Some(spec) = ds.spec.as_ref() else {
                continue;
            };
            let mut template = spec.template.clone();
            let tspec = template.spec.get_or_insert_with(Default::default);
            let tolerations = tspec.tolerations.get_or_insert_with(Vec::new);
            tolerations.extend(daemon_tolerations());
            let tolerations = tolerations.clone();
            let node_selector = tspec.node_selector.clone().unwrap_or_default();
            let owned = pods_of(self, &uid);
            let pods = &owned;
            let covered: std::collections::HashSet<&str> = pods
                .iter()
                .filter_map(|p| super::objects::node_name(p))
                .collect();
            let mut desired = 0;
            for node in &nodes {
                let nname = node.metadata.name.as_deref().unwrap_or("");
                let labels = node.metadata.labels.as_ref();
                if node.metadata.deletion_timestamp.is_some()
                    || !node_selector
                        .iter()
                        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
                    || untolerated(&tolerations, node_taints(node)).is_some()
                {
                    continue;
                }
                desired += 1;
                if !covered.contains(nname) {
                    let mut pod = pod_from_template(
                        &template,
                        &ns,
                        &generate_name(&format!("{name}-")),
                        owner("apps/v1", "DaemonSet", &ds.metadata),
                        now,
                    );
                    bind_and_start(&mut pod, node, now);
                    self.create_pod(pod);
                }
            }
            let ready = pods.iter().filter(|p| active(p) && pod_ready(p)).count() as i32;
            let scheduled = pods.iter().filter(|p| active(p)).count() as i32;
            let status = DaemonSetStatus {
                desired_number_scheduled: desired,
                current_number_scheduled: scheduled,
                number_ready: ready,
                number_available: Some(ready),
                updated_number_scheduled: Some(scheduled),
                number_misscheduled: 0,
                observed_generation: ds.metadata.generation,
                ..Default::default()
            };
            self.daemonsets.modify(&ds, |d| d.status = Some(status));
        }
    }

    /// Every node's kubelet keeps a mirror pod for each static pod.
    pub(super) fn reconcile_mirror_pods(&mut self, now: Timestamp) {
        if self.static_pods.is_empty() {
            return;
        }
        // The kubelets read their node and the mirror pods: skip unless one changed.
        let since = std::mem::replace(&mut self.workloads.mirror_pods, self.rev.current());
        let changed = since == 0
            || self.nodes.any_written_since(since)
            || self
                .static_pods
                .iter()
                .any(|sp| self.pods.written_since(&sp.namespace, since));
        if !changed {
            return;
        }
        let nodes: Vec<Arc<Node>> = self.nodes.values().cloned().collect();
        let statics = self.static_pods.clone();
        for node in nodes {
            let nname = node.metadata.name.clone().unwrap_or_default();
            for sp in &statics {
                let pname = format!("{}-{}", sp.name, nname);
                if self.pods.get(&sp.namespace, &pname).is_some() {
                    continue;
                }
                let mut requests = BTreeMap::new();
                if let Some(c) = &sp.requests.cpu {
                    requests.insert("cpu".to_string(), Quantity(c.clone()));
                }
                if let Some(m) = &sp.requests.memory {
                    requests.insert("memory".to_string(), Quantity(m.clone()));
                }
                let template = PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(BTreeMap::from([
                            ("component".into(), sp.name.clone()),
                            ("tier".into(), "node".into()),
                        ])),
                        annotations: Some(BTreeMap::from([
                            (
                                MIRROR_ANNOTATION.to_string(),
                                format!("{:032x}", pname.len() * 7919),
                            ),
                            (
                                "kubernetes.io/config.source".to_string(),
                                "file".to_string(),
                            ),
                        ])),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: sp.name.clone(),
                            image: Some(format!("registry.k8s.io/{}:v1.33.0", sp.name)),
                            resources: Some(ResourceRequirements {
                                requests: Some(requests),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }],
                        priority_class_name: Some("system-node-critical".into()),
                        priority: Some(2_000_001_000),
                        host_network: Some(true),
                        tolerations: Some(vec![Toleration {
                            operator: Some("Exists".into()),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                };
                let owner = OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: nname.clone(),
                    uid: node.metadata.uid.clone().unwrap_or_default(),
                    controller: Some(true),
                    block_owner_deletion: None,
                };
                let mut pod = pod_from_template(&template, &sp.namespace, &pname, owner, now);
                bind_and_start(&mut pod, &node, now);
                mark_pod_ready(&mut pod, true, now);
                self.create_pod(pod);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_hash_is_stable_and_changes_with_the_template() {
        let a = PodTemplateSpec::default();
        let b = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(BTreeMap::from([("v".into(), "2".into())])),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(template_hash(&a), template_hash(&a));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a).len(), 10);
    }
}
