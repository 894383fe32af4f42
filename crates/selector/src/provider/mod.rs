//! The configured provider: which of the providers a run uses ([`Provider`], built from the
//! validated flags) and what it learned ([`Assessor`]), each dispatching to the provider's own
//! module. The seam every provider implements (its errors, the node facts every provider reads
//! alike, retiring) is [`crate::provider::seam`]; a provider plugs in by adding a variant to both
//! enums here.

pub mod aws;
pub mod aws_group_surge;
pub mod aws_model;
pub mod aws_rules;
pub mod kubernetes;
pub mod kubernetes_rules;
pub mod seam;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::Client;

use crate::api_calls::ApiCalls;
use crate::cli::ProviderConfig;
use crate::plan::Candidate;
use crate::provider::aws::{AwsAssessor, AwsProvider};
use crate::provider::kubernetes::{KubernetesAssessor, KubernetesProvider};
use crate::provider::seam::{LookupFailure, ProviderError, Retirer};

/// A provider, configured.
#[derive(Clone, Debug)]
pub enum Provider {
    /// Kubelet version and node age, from the Kubernetes API alone.
    Kubernetes(KubernetesProvider),
    /// Drift of instances from their Auto Scaling groups.
    Aws(AwsProvider),
}

impl Provider {
    /// The provider for a validated configuration.
    pub fn new(config: &ProviderConfig, group_labels: Vec<String>) -> Provider {
        match config {
            ProviderConfig::Kubernetes { max_age } => {
                Provider::Kubernetes(KubernetesProvider::new(*max_age, group_labels))
            }
            ProviderConfig::Aws(config) => Provider::Aws(AwsProvider::new(config.clone())),
        }
    }

    /// `kubernetes` or `aws`.
    pub fn name(&self) -> &'static str {
        match self {
            Provider::Kubernetes(_) => "kubernetes",
            Provider::Aws(_) => "aws",
        }
    }

    /// Does the provider's look-ups for these nodes (every call counted in `calls`) and returns
    /// what it learned, ready to judge nodes at `now`.
    pub async fn assess(
        &self,
        client: &Client,
        _nodes: &[Node],
        calls: &mut ApiCalls,
        now: Timestamp,
    ) -> Result<Assessor, ProviderError> {
        match self {
            Provider::Kubernetes(provider) => provider
                .assess(client, calls, now)
                .await
                .map(Assessor::Kubernetes),
            Provider::Aws(provider) => provider.assess(calls, now).await.map(Assessor::Aws),
        }
    }
}

/// What a provider learned in one run; judges nodes without I/O.
#[derive(Clone, Debug)]
pub enum Assessor {
    /// See [`KubernetesAssessor`].
    Kubernetes(KubernetesAssessor),
    /// See [`AwsAssessor`].
    Aws(AwsAssessor),
}

impl Assessor {
    /// The node as the planner sees it, with the provider's verdict.
    pub fn candidate(&self, node: &Node) -> Candidate {
        match self {
            Assessor::Kubernetes(assessor) => assessor.candidate(node),
            Assessor::Aws(assessor) => assessor.candidate(node),
        }
    }

    /// Look-ups that failed for part of the fleet (only the AWS provider has such).
    pub fn lookup_failures(&self) -> &[LookupFailure] {
        match self {
            Assessor::Kubernetes(_) => &[],
            Assessor::Aws(assessor) => &assessor.lookup_failures,
        }
    }

    /// What retires drained nodes; `None` for providers that never retire (Kubernetes).
    pub fn retirer(&self) -> Option<&dyn Retirer> {
        match self {
            Assessor::Kubernetes(_) => None,
            Assessor::Aws(assessor) => Some(&assessor.groups),
        }
    }
}
