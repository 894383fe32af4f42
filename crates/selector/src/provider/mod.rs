//! Providers: what tells the selector whether a node is out of date. A run lists the nodes
//! ([`crate::node_list`]), then asks the configured [`Provider`] to look up what it needs once
//! (the Kubernetes provider reads `/version`; the AWS provider describes groups and instances)
//! and gets back an [`Assessor`]: everything the provider learned, able to judge any node of the
//! cluster without further I/O. The planner and the apply step only ever see
//! [`Candidate`]s, and when a write meets a conflict the apply step re-judges the re-read node
//! with the same assessor.
//!
//! Each provider is a thin I/O module beside its pure rules (no async, no API client), unit-tested
//! on plain data:
//! - [`kubernetes`] (`GET /version`) and [`kubernetes_rules`] (kubelet behind the control plane,
//!   node age);
//! - [`aws`] (Auto Scaling and EC2 Describe calls, retiring, the group surge's writes),
//!   [`aws_model`] (what the Describe calls return, as plain data), [`aws_rules`] (the drift and
//!   skip rules, first match wins) and [`aws_group_surge`] (`--group-surge`: raising an Auto
//!   Scaling group ahead of its drains, giving the surge back through retires);
//! - [`gcp`] (Compute Engine managed instance groups: `aggregatedList`, `listManagedInstances`),
//!   [`gcp_model`] (their answers as plain data) and [`gcp_rules`] (instance template drift,
//!   the groups Google Cloud or GKE replaces itself).
//!
//! - [`azure`] (ARM list calls for VM scale sets and their VMs off the latest model),
//!   [`azure_model`] (the ARM answers as plain data), [`azure_rules`] (skip and drift rules) and
//!   [`azure_token`] (where ARM tokens come from).
//!
//! What they share: [`seam`] (the errors, the look-ups that failed for part of the fleet,
//! retiring) and [`node_facts`] (what every provider reads alike from a Node).
//!
//! Adding a provider: a `<name>.rs` for its look-ups and an assessor that judges a Node with
//! [`node_facts::node_candidate`]; a `<name>_rules.rs` for its pure rules (and a
//! `<name>_model.rs` when its API's answers need plain types); then, below, a variant in
//! [`ProviderKind`] (the `--provider` value), [`ProviderConfig`] (its validated settings, built
//! by [`crate::cli`] from its flags), [`Provider`] and [`Assessor`], which dispatch to it.

pub mod aws;
pub mod aws_group_surge;
pub mod aws_model;
pub mod aws_rules;
pub mod azure;
pub mod azure_model;
pub mod azure_rules;
pub mod azure_token;
pub mod gcp;
pub mod gcp_model;
pub mod gcp_rules;
pub mod kubernetes;
pub mod kubernetes_rules;
pub mod node_facts;
pub mod seam;

use std::fmt;
use std::time::Duration;

use clap::ValueEnum;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::Client;

use crate::api_calls::ApiCalls;
use crate::plan::Candidate;
use crate::provider::aws::{AwsAssessor, AwsConfig, AwsProvider};
use crate::provider::azure::{AzureAssessor, AzureConfig, AzureProvider};
use crate::provider::gcp::{GcpAssessor, GcpConfig, GcpProvider};
use crate::provider::kubernetes::{KubernetesAssessor, KubernetesProvider};
use crate::provider::seam::{LookupFailure, ProviderError, Retirer};

/// Where the verdicts come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProviderKind {
    /// From the Kubernetes API alone: kubelet minor version behind the API server's, and (with
    /// --max-age) nodes older than the maximum age.
    Kubernetes,
    /// From AWS: the instance no longer matches its Auto Scaling group.
    Aws,
    /// From Azure: the VM does not run its scale set's latest model.
    Azure,
    /// From Google Cloud: the instance runs another template than its managed instance group
    /// targets.
    Gcp,
}

impl ProviderKind {
    /// `kubernetes`, `aws`, `azure` or `gcp`.
    pub const fn name(self) -> &'static str {
        match self {
            ProviderKind::Kubernetes => "kubernetes",
            ProviderKind::Aws => "aws",
            ProviderKind::Azure => "azure",
            ProviderKind::Gcp => "gcp",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The provider to use, with its own settings. Only providers this build has can be named here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderConfig {
    /// The Kubernetes-only provider.
    Kubernetes {
        /// The max-age rule, when on.
        max_age: Option<Duration>,
    },
    /// The AWS provider.
    Aws(AwsConfig),
    /// The Azure provider.
    Azure(AzureConfig),
    /// The Google Cloud provider.
    Gcp(GcpConfig),
}

impl ProviderConfig {
    /// `kubernetes`, `aws`, `azure` or `gcp`.
    pub const fn name(&self) -> &'static str {
        match self {
            ProviderConfig::Kubernetes { .. } => ProviderKind::Kubernetes.name(),
            ProviderConfig::Aws(_) => ProviderKind::Aws.name(),
            ProviderConfig::Azure(_) => ProviderKind::Azure.name(),
            ProviderConfig::Gcp(_) => ProviderKind::Gcp.name(),
        }
    }
}

/// A provider, configured.
#[derive(Clone, Debug)]
pub enum Provider {
    /// Kubelet version and node age, from the Kubernetes API alone.
    Kubernetes(KubernetesProvider),
    /// Drift of instances from their Auto Scaling groups.
    Aws(AwsProvider),
    /// VMs off their scale sets' latest model.
    Azure(AzureProvider),
    /// Drift of instances from their managed instance groups.
    Gcp(GcpProvider),
}

impl Provider {
    /// The provider for a validated configuration.
    pub fn new(config: &ProviderConfig, group_labels: Vec<String>) -> Provider {
        match config {
            ProviderConfig::Kubernetes { max_age } => {
                Provider::Kubernetes(KubernetesProvider::new(*max_age, group_labels))
            }
            ProviderConfig::Aws(config) => Provider::Aws(AwsProvider::new(config.clone())),
            ProviderConfig::Azure(config) => Provider::Azure(AzureProvider::new(config.clone())),
            ProviderConfig::Gcp(config) => Provider::Gcp(GcpProvider::new(config.clone())),
        }
    }

    /// `kubernetes`, `aws`, `azure` or `gcp`.
    pub fn name(&self) -> &'static str {
        match self {
            Provider::Kubernetes(_) => ProviderKind::Kubernetes.name(),
            Provider::Aws(_) => ProviderKind::Aws.name(),
            Provider::Azure(_) => ProviderKind::Azure.name(),
            Provider::Gcp(_) => ProviderKind::Gcp.name(),
        }
    }

    /// Does the provider's look-ups for these nodes (every call counted in `calls`) and returns
    /// what it learned, ready to judge nodes at `now`.
    pub async fn assess(
        &self,
        client: &Client,
        nodes: &[Node],
        calls: &mut ApiCalls,
        now: Timestamp,
    ) -> Result<Assessor, ProviderError> {
        match self {
            Provider::Kubernetes(provider) => provider
                .assess(client, calls, now)
                .await
                .map(Assessor::Kubernetes),
            Provider::Aws(provider) => provider.assess(calls, now).await.map(Assessor::Aws),
            Provider::Azure(provider) => provider.assess(calls, now).await.map(Assessor::Azure),
            Provider::Gcp(provider) => provider.assess(nodes, calls, now).await.map(Assessor::Gcp),
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
    /// See [`AzureAssessor`].
    Azure(AzureAssessor),
    /// See [`GcpAssessor`].
    Gcp(GcpAssessor),
}

impl Assessor {
    /// The node as the planner sees it, with the provider's verdict.
    pub fn candidate(&self, node: &Node) -> Candidate {
        match self {
            Assessor::Kubernetes(assessor) => assessor.candidate(node),
            Assessor::Aws(assessor) => assessor.candidate(node),
            Assessor::Azure(assessor) => assessor.candidate(node),
            Assessor::Gcp(assessor) => assessor.candidate(node),
        }
    }

    /// Look-ups that failed for part of the fleet (only the cloud providers have such).
    pub fn lookup_failures(&self) -> &[LookupFailure] {
        match self {
            Assessor::Kubernetes(_) => &[],
            Assessor::Aws(assessor) => &assessor.lookup_failures,
            Assessor::Azure(assessor) => &assessor.lookup_failures,
            Assessor::Gcp(assessor) => &assessor.lookup_failures,
        }
    }

    /// What retires drained nodes; `None` for the Kubernetes provider, which never retires.
    pub fn retirer(&self) -> Option<&dyn Retirer> {
        match self {
            Assessor::Kubernetes(_) => None,
            Assessor::Aws(assessor) => Some(&assessor.groups),
            Assessor::Azure(assessor) => Some(assessor),
            Assessor::Gcp(assessor) => Some(assessor),
        }
    }
}
