//! What the demo does to the in-process cluster, playing the parts a real cluster's owner, cloud
//! and workloads would play: upgrade the control plane, move node groups to a new template,
//! finish batch jobs, and (for the AWS variant) tie nodes to their instances. Each is the same
//! change the `/sim/v1` admin API or a kubelet would make, applied under the cluster lock.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use rotor_sim::cluster::Cluster;
use rotor_sim::cluster::objects::{mark_pod_ready, node_name, node_taints, terminal, terminating};
use rotor_sim::scenario::{parse_duration, version_minor};

/// Pod annotation read by the demo: the pod is a batch job with this much work left once its
/// node gets the drain taint (e.g. `15s`); the demo then completes it (phase `Succeeded`), as
/// the job's container exiting would. Scenario files set it under a workload's `annotations`.
pub const FINISHES_AFTER_ANNOTATION: &str = "demo.rotor.dev/finishes-after";

/// The first release of the next minor version: `v1.33.4` gives `v1.34.0` (the selector
/// compares minor versions only).
pub fn next_minor(version: &str) -> Option<String> {
    version_minor(version).map(|m| format!("v1.{}.0", m + 1))
}

/// Raises the version `/version` reports, as upgrading the control plane does.
pub fn set_control_plane_version(c: &mut Cluster, version: &str) {
    c.control_plane_version = version.to_owned();
}

/// Points every node group at a template with this kubelet version and/or image; nodes launched
/// from now on use it. Returns the groups changed.
pub fn set_templates(c: &mut Cluster, kubelet: Option<&str>, image: Option<&str>) -> Vec<String> {
    let names: Vec<String> = c.node_groups().keys().cloned().collect();
    for name in &names {
        let Some(g) = c.node_group_mut(name) else {
            continue;
        };
        if let Some(k) = kubelet {
            g.spec.template.kubelet_version = k.to_owned();
        }
        if let Some(i) = image {
            g.spec.template.image = i.to_owned();
        }
    }
    names
}

/// Sets each node's image label to `image` (the AMI its instance really runs, once the AWS
/// variant has bound it to one).
pub fn relabel_images(c: &mut Cluster, image: &str) {
    let nodes: Vec<_> = c.nodes.values().cloned().collect();
    for n in nodes {
        let Some(label) = rotor_sim::cluster::objects::node_group_of(&n)
            .and_then(|g| c.node_groups().get(g))
            .map(|g| g.spec.template.image_label.clone())
        else {
            continue;
        };
        c.nodes.modify(&n, |n| {
            n.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(label, image.to_owned());
        });
    }
}

/// Sets a node's `spec.providerID` (the cloud's half of registering a node).
pub fn set_provider_id(c: &mut Cluster, node: &str, provider_id: &str) -> bool {
    let Some(n) = c.nodes.get("", node).cloned() else {
        return false;
    };
    c.nodes.modify(&n, |n| {
        n.spec.get_or_insert_with(Default::default).provider_id = Some(provider_id.to_owned())
    });
    true
}

/// Completes every running pod carrying [`FINISHES_AFTER_ANNOTATION`] whose node has carried the
/// drain taint for at least that long. `tainted_at` gives, per node, when the taint was first
/// seen. Returns `namespace/name` of the pods completed.
pub fn finish_jobs(
    c: &mut Cluster,
    tainted_for: impl Fn(&str) -> Option<Duration>,
    now: Timestamp,
) -> Vec<String> {
    let due: Vec<_> = c
        .pods
        .values()
        .filter(|p| !terminal(p) && !terminating(p))
        .filter_map(|p| {
            let work = p
                .metadata
                .annotations
                .as_ref()?
                .get(FINISHES_AFTER_ANNOTATION)
                .and_then(|v| parse_duration(v).ok())?;
            let node = node_name(p)?;
            let tainted = c.nodes.get("", node).is_some_and(|n| {
                node_taints(n)
                    .iter()
                    .any(|t| t.key == rotor_core::contract::DRAIN_TAINT_KEY)
            });
            (tainted && tainted_for(node)? >= work).then(|| p.clone())
        })
        .collect();
    let mut done = Vec::new();
    for p in due {
        let updated = c.pods.modify(&p, |p| complete(p, now));
        done.push(format!(
            "{}/{}",
            updated.metadata.namespace.as_deref().unwrap_or_default(),
            updated.metadata.name.as_deref().unwrap_or_default()
        ));
    }
    done
}

/// The pod as its kubelet reports it once every container exited 0.
fn complete(p: &mut k8s_openapi::api::core::v1::Pod, now: Timestamp) {
    mark_pod_ready(p, false, now);
    let st = p.status.get_or_insert_with(Default::default);
    st.phase = Some("Succeeded".into());
    for cs in st.container_statuses.iter_mut().flatten() {
        cs.started = Some(false);
        cs.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".into()),
                finished_at: Some(Time(now)),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
}

/// Per-node first-taint times as durations before `now_secs` (both in seconds since the
/// rotation started).
pub fn tainted_durations(
    tainted_at: &BTreeMap<String, f64>,
    now_secs: f64,
) -> impl Fn(&str) -> Option<Duration> + '_ {
    move |node| {
        tainted_at
            .get(node)
            .map(|t| Duration::from_secs_f64((now_secs - t).max(0.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rotor_sim::scenario::Scenario;

    fn cluster() -> Cluster {
        let s = Scenario::from_yaml(
            r#"
nodeGroups: [{name: g, size: 2, template: {kubeletVersion: v1.33.4, nodeName: 'n-{index}'}}]
workloads:
  - {kind: Pod, name: report, namespace: batch, annotations: {rotor.dev/do-not-disrupt: "true", demo.rotor.dev/finishes-after: 10s}}
  - {kind: Pod, name: shell, namespace: default}
"#,
            "t",
        )
        .unwrap();
        rotor_sim::seed::build(&s, Timestamp::now())
    }

    fn taint(c: &mut Cluster, node: &str) {
        let n = c.nodes.get("", node).unwrap().clone();
        c.nodes.modify(&n, |n| {
            n.spec.get_or_insert_with(Default::default).taints =
                Some(vec![rotor_core::contract::drain_taint(
                    rotor_core::contract::DrainReason::Manual,
                    Default::default(),
                )])
        });
    }

    #[test]
    fn next_minor_moves_one_minor_up() {
        assert_eq!(next_minor("v1.33.4").as_deref(), Some("v1.34.0"));
        assert_eq!(next_minor("1.29"), Some("v1.30.0".into()));
        assert_eq!(next_minor("latest"), None);
    }

    #[test]
    fn a_job_finishes_only_after_its_node_was_tainted_long_enough() {
        let mut c = cluster();
        let report = c.pods.get("batch", "report").unwrap().clone();
        let node = node_name(&report).unwrap().to_owned();
        let now = Timestamp::now();
        let mut tainted_at = BTreeMap::new();
        // Not tainted: nothing happens, however long.
        tainted_at.insert(node.clone(), 0.0);
        assert!(finish_jobs(&mut c, tainted_durations(&tainted_at, 60.0), now).is_empty());
        taint(&mut c, &node);
        assert!(finish_jobs(&mut c, tainted_durations(&tainted_at, 9.5), now).is_empty());
        assert_eq!(
            finish_jobs(&mut c, tainted_durations(&tainted_at, 10.0), now),
            ["batch/report"]
        );
        let done = c.pods.get("batch", "report").unwrap();
        assert!(terminal(done));
        assert!(!rotor_sim::cluster::objects::pod_ready(done));
        // The pod without the annotation is left alone, and a finished job is not finished twice.
        assert!(!terminal(c.pods.get("default", "shell").unwrap()));
        assert!(finish_jobs(&mut c, tainted_durations(&tainted_at, 99.0), now).is_empty());
    }

    #[test]
    fn templates_and_versions_change_for_new_nodes() {
        let mut c = cluster();
        set_control_plane_version(&mut c, "v1.34.0");
        assert_eq!(
            set_templates(&mut c, Some("v1.34.0"), Some("ami-new")),
            ["g"]
        );
        assert_eq!(c.control_plane_version, "v1.34.0");
        let t = &c.node_groups()["g"].spec.template;
        assert_eq!(
            (t.kubelet_version.as_str(), t.image.as_str()),
            ("v1.34.0", "ami-new")
        );
        relabel_images(&mut c, "ami-x");
        assert!(
            c.nodes
                .values()
                .all(|n| { n.metadata.labels.as_ref().unwrap()["sim.rotor.dev/image"] == "ami-x" })
        );
        assert!(set_provider_id(&mut c, "n-0", "aws:///us-east-1a/i-0123"));
        assert!(!set_provider_id(&mut c, "nope", "x"));
        let n = c.nodes.get("", "n-0").unwrap();
        assert_eq!(
            n.spec.as_ref().unwrap().provider_id.as_deref(),
            Some("aws:///us-east-1a/i-0123")
        );
    }
}
