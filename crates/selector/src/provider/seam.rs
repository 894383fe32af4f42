//! The provider seam. A run lists the nodes (restricted by `--node-selector`), then asks the
//! configured [`Provider`](crate::provider::Provider) to look up what it needs once (the Kubernetes
//! provider reads `/version`; the AWS provider describes groups and instances) and gets back
//! an [`Assessor`](crate::provider::Assessor): everything the provider learned, able to judge
//! any node of the cluster without further I/O. The planner and the apply step only ever see
//! [`Candidate`]s, and when a write meets a conflict the apply step re-judges the re-read node
//! with the same assessor. This module is what every provider implements against; which
//! provider runs is decided in [`crate::provider`].
//!
//! What is read from the Node itself is the same for every provider and lives here
//! ([`node_candidate`]): name, zone, group, creation time, the current drain taint, the drain
//! phase, the opt-out. How the facts are read:
//! - zone: label `topology.kubernetes.io/zone` (then the deprecated
//!   `failure-domain.beta.kubernetes.io/zone`);
//! - group: the first of the configured group labels present (`--group-label`);
//! - instance: the EC2 instance id when `spec.providerID` is an AWS one;
//! - drain started: `rotor.dev/phase` is present, whatever its value (the drainer writes `queued`
//!   before it cordons, and every later phase means it has acted; an unknown value is treated as
//!   started, which only ever keeps a taint);
//! - drained: phase `drained`, or `rotor.dev/drained-at` present.

use std::future::Future;
use std::pin::Pin;

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, ListParams};
use rotor_core::contract::{DRAINED_AT_ANNOTATION, PHASE_ANNOTATION};
use rotor_core::{DrainPhase, find_drain_taint, node_opted_out, parse_aws_provider_id};

use crate::api_calls::ApiCalls;
use crate::kube_retry::retry_transient;
use crate::plan::Candidate;
use crate::verdict::Verdict;

/// Zone label set by the cloud controller manager.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The deprecated zone label, read when [`ZONE_LABEL`] is absent.
pub const LEGACY_ZONE_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";

/// Page size for listing nodes (what kubectl and kube's watchers use).
pub const LIST_PAGE_SIZE: u32 = 500;

/// The AWS settings cannot be used; a configuration error (exit 2), found before any call.
#[derive(Debug, thiserror::Error)]
pub enum AwsSetupError {
    /// No region in the environment, the shared config profile or the instance metadata.
    #[error(
        "--provider aws needs an AWS region and none was found: set AWS_REGION (or a region in the AWS config profile; on EC2 the instance metadata provides it)"
    )]
    RegionMissing,
}

/// Retires (terminates) the instance behind a drained node. Only cloud providers have one
/// ([`crate::provider::Assessor::retirer`]); the Kubernetes provider never retires.
pub trait Retirer: Send + Sync {
    /// (API, operation) counted in [`ApiCalls`] for each retire.
    fn call(&self) -> (&'static str, &'static str);

    /// Terminates `instance`, decrementing its group's desired capacity when `shrink_group`
    /// (a surge replacement already runs); on success, a line saying what was done.
    fn retire<'a>(
        &'a self,
        instance: &'a str,
        shrink_group: bool,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>>;
}

/// Looking up what a provider needs failed; the run fails and nothing is written.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// A Kubernetes API call failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was being read, e.g. `GET /version`.
        what: String,
        #[source]
        source: kube::Error,
    },
    /// An AWS call failed (after the SDK's retries).
    #[error("AWS {operation} failed: {message}")]
    Aws {
        /// The operation, e.g. `DescribeAutoScalingGroups`.
        operation: &'static str,
        /// The error code and message, e.g. `AccessDenied: User ... is not authorized`.
        message: String,
    },
    /// The AWS clients cannot be built (the binary checks this before any call).
    #[error(transparent)]
    AwsSetup(#[from] AwsSetupError),
}

/// A look-up that failed for part of the fleet only: the groups it concerns were skipped (their
/// nodes show `skip` with reason `lookup-failed`), the others were judged and planned. The run
/// reports it and exits 1 once the rest is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookupFailure {
    /// The operation, e.g. `DescribeLaunchTemplateVersions`.
    pub operation: &'static str,
    /// What it was about, e.g. a launch template id.
    pub subject: String,
    /// The error code and message.
    pub error: String,
    /// The groups skipped because of it.
    pub groups: Vec<String>,
}

impl std::fmt::Display for LookupFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} for {} failed: {}; skipped group(s) {}",
            self.operation,
            self.subject,
            self.error,
            self.groups.join(", ")
        )
    }
}

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
        current_taint: find_drain_taint(node).map(|taint| taint.value.clone().unwrap_or_default()),
        drain_started: phase.is_some(),
        opted_out: node_opted_out(meta),
        drained: phase.is_some_and(|p| p == DrainPhase::Drained.slug())
            || annotation(DRAINED_AT_ANNOTATION).is_some(),
    }
}

/// The value of the first of `keys` present (and not empty) on the node.
pub fn first_label(node: &Node, keys: &[String]) -> Option<String> {
    let labels = node.metadata.labels.as_ref()?;
    keys.iter()
        .find_map(|key| labels.get(key).filter(|value| !value.is_empty()))
        .cloned()
}

/// Lists the nodes matching `selector` (all when `None`), in pages of [`LIST_PAGE_SIZE`], sorted
/// by name. What no decision needs (`managedFields`, `status.images`) is dropped as pages
/// arrive: on large clusters those are most of a Node's size.
pub async fn list_nodes(
    client: &Client,
    selector: Option<&str>,
    calls: &mut ApiCalls,
) -> Result<Vec<Node>, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let mut params = ListParams::default().limit(LIST_PAGE_SIZE);
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    let mut nodes = Vec::new();
    loop {
        calls.kube("list nodes");
        let page = retry_transient("list nodes", || api.list(&params)).await?;
        nodes.extend(page.items.into_iter().map(slim));
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(nodes)
}

/// The node without what no decision needs.
pub fn slim(mut node: Node) -> Node {
    node.metadata.managed_fields = None;
    if let Some(status) = node.status.as_mut() {
        status.images = None;
    }
    node
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

    #[test]
    fn slim_drops_what_no_decision_needs() {
        let n = slim(node(json!({})));
        assert_eq!(n.metadata.managed_fields, None);
        assert_eq!(n.status.unwrap().images, None);
        assert_eq!(
            n.spec.unwrap().provider_id.as_deref(),
            Some("aws:///us-east-1a/i-0123456789abcdef0")
        );
    }
}
