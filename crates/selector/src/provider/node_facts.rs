//! What every provider reads alike from a Node ([`node_candidate`]): name, zone, group, creation
//! time, the current drain taint, the drain phase, the opt-out. A provider adds only its verdict
//! and, when it knows better than the labels, the group. How the facts are read:
//! - zone: label `topology.kubernetes.io/zone` (then the deprecated
//!   `failure-domain.beta.kubernetes.io/zone`);
//! - group: the first of the configured group labels present (`--group-label`, [`first_label`]);
//! - instance: the EC2 instance id when `spec.providerID` is an AWS one;
//! - drain started: `rotor.dev/phase` is present, whatever its value (the drainer writes `queued`
//!   before it cordons, and every later phase means it has acted; an unknown value is treated as
//!   started, which only ever keeps a taint);
//! - drained: phase `drained`, or `rotor.dev/drained-at` present;
//! - the drain taint: a node may carry the key more than once (one per effect); a value a
//!   person chose (`manual`, or not a rotor reason) stands for them all (`drain_taint_value`).

use k8s_openapi::api::core::v1::Node;
use rotor_core::contract::{DRAINED_AT_ANNOTATION, PHASE_ANNOTATION, SELECTED_AT_ANNOTATION};
use rotor_core::{DRAIN_TAINT_KEY, DrainPhase, node_opted_out, parse_aws_provider_id};

use crate::plan::{Candidate, persons_taint};
use crate::verdict::Verdict;

/// Zone label set by the cloud controller manager.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The deprecated zone label, read when [`ZONE_LABEL`] is absent.
pub const LEGACY_ZONE_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";

/// The provider-independent facts of a node, with `verdict` and `group` from the provider.
pub fn node_candidate(node: &Node, verdict: Verdict, group: Option<String>) -> Candidate {
    let meta = &node.metadata;
    let label = |key: &str| {
        meta.labels
            .as_ref()
            .and_then(|labels| labels.get(key))
            .filter(|value| !value.is_empty())
            .cloned()
    };
    let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key));
    let phase = annotation(PHASE_ANNOTATION);
    Candidate {
        node: meta.name.clone().unwrap_or_default(),
        instance: node
            .spec
            .as_ref()
            .and_then(|spec| spec.provider_id.as_deref())
            .and_then(|id| parse_aws_provider_id(id).ok())
            .map(|id| id.into_string()),
        group,
        zone: label(ZONE_LABEL).or_else(|| label(LEGACY_ZONE_LABEL)),
        created: meta.creation_timestamp.as_ref().map(|time| time.0),
        verdict,
        current_taint: drain_taint_value(node),
        drain_started: phase.is_some(),
        selected_by_selector: annotation(SELECTED_AT_ANNOTATION).is_some(),
        opted_out: node_opted_out(meta),
        drained: phase.is_some_and(|p| p == DrainPhase::Drained.slug())
            || annotation(DRAINED_AT_ANNOTATION).is_some(),
    }
}

/// The value of the node's drain taint as the plan weighs it. Kubernetes lets the key appear
/// once per effect, and an untaint removes every one of them: so when a person's taint (`manual`,
/// or a value that is not a rotor reason) stands beside rotor's, the person's is the one weighed,
/// which the plan never rolls back ([`persons_taint`]).
fn drain_taint_value(node: &Node) -> Option<String> {
    let values: Vec<&str> = node
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|taint| taint.key == DRAIN_TAINT_KEY)
        .map(|taint| taint.value.as_deref().unwrap_or_default())
        .collect();
    values
        .iter()
        .find(|value| persons_taint(value).is_some())
        .or(values.first())
        .map(|value| (*value).to_owned())
}

/// The value of the first of `keys` present (and not empty) on the node.
pub fn first_label(node: &Node, keys: &[String]) -> Option<String> {
    let labels = node.metadata.labels.as_ref()?;
    keys.iter()
        .find_map(|key| labels.get(key).filter(|value| !value.is_empty()))
        .cloned()
}

#[cfg(test)]
mod tests {
    use rotor_core::DrainReason;
    use serde_json::json;

    use super::*;

    fn node(extra: serde_json::Value) -> Node {
        let mut node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "ip-10-0-1-23.ec2.internal",
                "creationTimestamp": "2025-01-02T03:04:05Z",
                "labels": {
                    "topology.kubernetes.io/zone": "us-east-1a",
                    "eks.amazonaws.com/nodegroup": "general",
                },
                "annotations": {},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}],
            },
            "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"},
            "status": {"images": [{"names": ["a"], "sizeBytes": 1}]},
        });
        merge(&mut node, extra);
        serde_json::from_value(node).unwrap()
    }

    fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
        match (into, from) {
            (serde_json::Value::Object(into), serde_json::Value::Object(from)) => {
                for (key, value) in from {
                    if value.is_null() {
                        into.remove(&key);
                    } else {
                        merge(into.entry(key).or_insert(serde_json::Value::Null), value);
                    }
                }
            }
            (into, from) => *into = from,
        }
    }

    #[test]
    fn reads_the_facts_of_a_plain_node() {
        let candidate = node_candidate(&node(json!({})), Verdict::Current, Some("g".into()));
        assert_eq!(
            candidate,
            Candidate {
                node: "ip-10-0-1-23.ec2.internal".into(),
                instance: Some("i-0123456789abcdef0".into()),
                group: Some("g".into()),
                zone: Some("us-east-1a".into()),
                created: Some("2025-01-02T03:04:05Z".parse().unwrap()),
                verdict: Verdict::Current,
                current_taint: None,
                drain_started: false,
                selected_by_selector: false,
                opted_out: false,
                drained: false,
            }
        );
    }

    #[test]
    fn reads_taint_phase_and_opt_out() {
        let n = node(json!({
            "metadata": {"annotations": {
                "rotor.dev/phase": "queued",
                "rotor.dev/do-not-disrupt": "true",
            }},
            "spec": {"taints": [
                {"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
                {"key": "rotor.dev/drain", "value": "manual", "effect": "PreferNoSchedule"},
            ]},
        }));
        let c = node_candidate(&n, Verdict::Current, None);
        assert_eq!(c.current_taint.as_deref(), Some("manual"));
        assert!(c.drain_started, "any phase, queued included, means started");
        assert!(c.opted_out);
        assert!(!c.drained);

        let drained = node(json!({"metadata": {"annotations": {"rotor.dev/phase": "drained"}}}));
        assert!(node_candidate(&drained, Verdict::Current, None).drained);
        let drained_at = node(
            json!({"metadata": {"annotations": {"rotor.dev/drained-at": "2025-01-02T03:04:05Z"}}}),
        );
        assert!(node_candidate(&drained_at, Verdict::Current, None).drained);

        let no_value = node(json!({"spec": {"taints": [
            {"key": "rotor.dev/drain", "effect": "NoSchedule"},
        ]}}));
        assert_eq!(
            node_candidate(&no_value, Verdict::Current, None)
                .current_taint
                .as_deref(),
            Some("")
        );
        assert_eq!(DrainReason::Manual.slug(), "manual");
    }

    #[test]
    fn a_persons_drain_taint_beside_rotors_is_the_one_weighed() {
        let both = |first: &str, second: &str| {
            node(json!({"spec": {"taints": [
                {"key": "rotor.dev/drain", "value": first, "effect": "PreferNoSchedule"},
                {"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
                {"key": "rotor.dev/drain", "value": second, "effect": "NoSchedule"},
            ]}}))
        };
        let weighed = |n: &Node| node_candidate(n, Verdict::Current, None).current_taint;
        // rotor's `image` first, a person's `manual` after it (as `kubectl taint` appends).
        assert_eq!(weighed(&both("image", "manual")).as_deref(), Some("manual"));
        assert_eq!(
            weighed(&both("image", "ours-not-rotors")).as_deref(),
            Some("ours-not-rotors")
        );
        assert_eq!(weighed(&both("image", "")).as_deref(), Some(""));
        // Two rotor reasons: the first, as before.
        assert_eq!(
            weighed(&both("image", "kubelet-version")).as_deref(),
            Some("image")
        );
    }

    #[test]
    fn zone_falls_back_to_the_legacy_label_and_foreign_provider_ids_have_no_instance() {
        let n = node(json!({
            "metadata": {"labels": {
                "topology.kubernetes.io/zone": null,
                "failure-domain.beta.kubernetes.io/zone": "eu-west-1b",
            }},
            "spec": {"providerID": "gce://project/europe-west1-b/vm-1"},
        }));
        let c = node_candidate(&n, Verdict::Current, None);
        assert_eq!(c.zone.as_deref(), Some("eu-west-1b"));
        assert_eq!(c.instance, None);
    }

    #[test]
    fn first_present_group_label_wins() {
        let n = node(json!({"metadata": {"labels": {"karpenter.sh/nodepool": "default"}}}));
        let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            first_label(
                &n,
                &keys(&["karpenter.sh/nodepool", "eks.amazonaws.com/nodegroup"])
            ),
            Some("default".into())
        );
        assert_eq!(
            first_label(&n, &keys(&["missing", "eks.amazonaws.com/nodegroup"])),
            Some("general".into())
        );
        assert_eq!(first_label(&n, &keys(&["missing"])), None);
        assert_eq!(first_label(&n, &[]), None);
    }
}
