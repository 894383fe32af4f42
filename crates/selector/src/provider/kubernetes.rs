//! The Kubernetes provider: no cloud, only the Kubernetes API. One look-up per run, `GET /version`
//! for the API server's version; then each node is judged by [`kubernetes_rules::kubernetes_verdict`]:
//! kubelet minor version behind the API server's → `kubelet-version`; with `--max-age`, created
//! longer ago than that → `max-age`; a version that does not parse or a missing field → skip.
//! A node's group is the first configured group label present on it.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::Client;

use crate::api_calls::ApiCalls;
use crate::kube_retry::retry_transient;
use crate::plan::Candidate;
use crate::provider::kubernetes_rules;
use crate::provider::node_facts::{first_label, node_candidate};
use crate::provider::seam::ProviderError;

/// The Kubernetes provider's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesProvider {
    /// The max-age rule, when on.
    pub max_age: Option<Duration>,
    /// Node labels naming a node's group, first present wins.
    pub group_labels: Vec<String>,
}

impl KubernetesProvider {
    pub fn new(max_age: Option<Duration>, group_labels: Vec<String>) -> Self {
        KubernetesProvider {
            max_age,
            group_labels,
        }
    }

    /// Reads the API server's version (`GET /version`, counted as `get /version`).
    pub async fn assess(
        &self,
        client: &Client,
        calls: &mut ApiCalls,
        now: Timestamp,
    ) -> Result<KubernetesAssessor, ProviderError> {
        calls.kube("get /version");
        let info = retry_transient("get /version", || client.apiserver_version())
            .await
            .map_err(|source| ProviderError::Kube {
                what: "cannot read the API server's version (GET /version)".into(),
                source,
            })?;
        tracing::info!(
            control_plane = %info.git_version,
            max_age = ?self.max_age,
            "kubernetes provider: judging kubelets against the control plane version"
        );
        Ok(KubernetesAssessor {
            control_plane_version: info.git_version,
            provider: self.clone(),
            now,
        })
    }
}

/// The API server's version and the rules' settings: judges any node without I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesAssessor {
    /// `gitVersion` from `/version`, e.g. `v1.34.1` or `v1.34.1-eks-1234567`.
    pub control_plane_version: String,
    pub provider: KubernetesProvider,
    /// The time node ages are measured at.
    pub now: Timestamp,
}

impl KubernetesAssessor {
    /// The node as the planner sees it, with the Kubernetes rules' verdict.
    pub fn candidate(&self, node: &Node) -> Candidate {
        let verdict = kubernetes_rules::kubernetes_verdict(
            node,
            &self.control_plane_version,
            self.provider.max_age,
            self.now,
        );
        node_candidate(
            node,
            verdict,
            first_label(node, &self.provider.group_labels),
        )
    }
}

#[cfg(test)]
mod tests {
    use rotor_core::DrainReason;
    use serde_json::json;

    use super::*;
    use crate::verdict::{SkipReason, Verdict};

    fn node(kubelet: &str, created: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {
                "name": "n1",
                "creationTimestamp": created,
                "labels": {"sim.rotor.dev/node-group": "old", "topology.kubernetes.io/zone": "z1"},
            },
            "status": {"nodeInfo": {
                "architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                "kernelVersion": "", "kubeProxyVersion": "", "machineID": "",
                "operatingSystem": "linux", "osImage": "", "systemUUID": "",
                "kubeletVersion": kubelet,
            }},
        }))
        .unwrap()
    }

    fn assessor(version: &str, max_age: Option<Duration>) -> KubernetesAssessor {
        KubernetesAssessor {
            control_plane_version: version.into(),
            provider: KubernetesProvider::new(max_age, vec!["sim.rotor.dev/node-group".into()]),
            now: "2025-03-01T00:00:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn judges_kubelet_then_age() {
        let old = node("v1.33.2", "2025-01-01T00:00:00Z");
        let c = assessor("v1.34.1", None).candidate(&old);
        assert_eq!(
            c.verdict,
            Verdict::Drifted {
                reason: DrainReason::KubeletVersion,
                detail: "kubelet v1.33.2, control plane v1.34.1".into()
            }
        );
        assert_eq!(c.group.as_deref(), Some("old"));
        assert_eq!(c.zone.as_deref(), Some("z1"));

        let c = assessor("v1.33.4", Some(Duration::from_secs(30 * 86_400))).candidate(&old);
        assert_eq!(
            c.verdict,
            Verdict::Drifted {
                reason: DrainReason::MaxAge,
                detail: "created 59d ago, max age 30d".into()
            }
        );
        assert_eq!(
            assessor("v1.33.4", None).candidate(&old).verdict,
            Verdict::Current
        );
        assert_eq!(
            assessor("banana", None).candidate(&old).verdict,
            Verdict::skip(SkipReason::ControlPlaneVersionUnparsable {
                version: "banana".into()
            })
        );
    }
}
