//! The AWS provider: thin I/O around the pure drift rules of [`crate::provider::aws_rules`].
//!
//! Credentials, region and endpoint come from the SDK's standard chain
//! (`aws_config::defaults(BehaviorVersion::latest())`: environment, shared config, IRSA web
//! identity, EKS Pod Identity, IMDS; `AWS_ENDPOINT_URL` points it at moto), with the SDK's standard
//! retry mode (`AWS_MAX_ATTEMPTS` / `AWS_RETRY_MODE` honoured) and time limits of our own
//! ([`CallTimeouts`]: `--aws-call-timeout`, 30 s a call, a third of it an attempt), so an AWS
//! endpoint that stops answering fails the run instead of holding the CronJob's Job until its
//! `activeDeadlineSeconds`. The calls, as the Amazon EC2 Auto
//! Scaling and Amazon EC2 API References define them, each at most once per run and paged:
//! - `DescribeAutoScalingGroups` by tag filter (`tag-key` = `kubernetes.io/cluster/<name>` or
//!   `k8s.io/cluster-autoscaler/<name>`) or by names (at most 100 per call), `MaxRecords=100`,
//!   following `NextToken`;
//! - `DescribeLaunchTemplates` with every distinct template id the groups name, in one call
//!   (following `NextToken`), plus one by name only when a group names a template without its id;
//! - only with the image or max-age rule: `DescribeLaunchTemplateVersions(ResolveAlias=true)` once
//!   per distinct template, for all the versions its groups resolve to, and `DescribeInstances`
//!   filtered by `tag-key=aws:autoscaling:groupName` and `instance-state-name=pending,running`,
//!   `MaxResults=1000`, following `NextToken`.
//!
//! Every call is counted in [`ApiCalls`] under `aws` by operation name. A failed call (after the
//! SDK's retries) fails the run before anything is written, naming the operation, except a call
//! about one launch template that failed with an error about that request (not throttling, not a
//! 5xx, not a lost connection): that template is recorded in [`AwsSnapshot::failed_templates`] and
//! only the groups naming it are skipped ([`errors::concerns_only_the_request`]). Retiring a
//! drained node is `TerminateInstanceInAutoScalingGroup(ShouldDecrementDesiredCapacity=false)`,
//! or `=true` when it gives a group surge back; `--group-surge` also calls `CreateOrUpdateTags`,
//! `SetDesiredCapacity` and `DeleteTags` ([`crate::provider::aws_group_surge`]).
//!
//! The calls are in [`describe`], how their errors are worded and which ones fail the run in
//! [`errors`], the SDK's types made into [`crate::provider::aws_model`]'s in [`convert`], and
//! the node verdicts and the Auto Scaling writes in [`assessor`].

pub mod assessor;
pub mod convert;
pub mod describe;
pub mod errors;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_autoscaling as autoscaling;
use aws_sdk_ec2 as ec2;
use jiff::Timestamp;

use crate::api_calls::ApiCalls;
pub use crate::provider::aws::assessor::{AwsAssessor, AwsGroupWriter};
use crate::provider::aws::describe::{
    describe_groups, describe_instances, describe_template_images, describe_templates,
    template_references, wanted_versions,
};
use crate::provider::aws_group_surge::GroupCapacity;
use crate::provider::aws_model::{
    AutoScalingGroup, InstanceDetails, LaunchTemplateInfo, TemplateVersionImage,
    index_instance_details, index_template_images, index_templates,
};
use crate::provider::aws_rules::{
    DriftInputs, FailedLookup, InstanceVerdict, TagExclusion, failed_lookup_skips, fleet_verdicts,
};
use crate::provider::seam::{AwsSetupError, LookupFailure, ProviderError};
use crate::verdict::SkipReason;

/// Operation names, as counted in [`ApiCalls`] and named in errors.
pub mod op {
    pub const DESCRIBE_GROUPS: &str = "DescribeAutoScalingGroups";
    pub const DESCRIBE_TEMPLATES: &str = "DescribeLaunchTemplates";
    pub const DESCRIBE_TEMPLATE_VERSIONS: &str = "DescribeLaunchTemplateVersions";
    pub const DESCRIBE_INSTANCES: &str = "DescribeInstances";
    pub const TERMINATE: &str = "TerminateInstanceInAutoScalingGroup";
    pub const CREATE_OR_UPDATE_TAGS: &str = "CreateOrUpdateTags";
    pub const SET_DESIRED_CAPACITY: &str = "SetDesiredCapacity";
    pub const DELETE_TAGS: &str = "DeleteTags";
}

/// How the groups are found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupDiscovery {
    /// Groups tagged `kubernetes.io/cluster/<name>` or `k8s.io/cluster-autoscaler/<name>`.
    ClusterTag(String),
    /// Groups by name.
    Names(Vec<String>),
}

impl GroupDiscovery {
    /// The tag keys that mark a cluster's groups.
    pub fn cluster_tag_keys(cluster: &str) -> [String; 2] {
        [
            format!("kubernetes.io/cluster/{cluster}"),
            format!("k8s.io/cluster-autoscaler/{cluster}"),
        ]
    }
}

/// How long one AWS call may take, the SDK's retries included (the operation timeout of the
/// SDK's `TimeoutConfig`), and each attempt of it (the operation attempt timeout). The SDK sets
/// neither by default, so without them a call to an endpoint that accepts the connection and
/// never answers would wait forever. The connect timeout stays the SDK's default (3.1 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallTimeouts {
    pub attempt: Duration,
    pub operation: Duration,
}

/// The default of `--aws-call-timeout`.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl CallTimeouts {
    /// A call may take `operation`; each attempt a third of it (the SDK's standard retry makes
    /// 3 attempts), at least one second unless the call itself is shorter.
    pub fn within(operation: Duration) -> CallTimeouts {
        CallTimeouts {
            attempt: (operation / 3).max(Duration::from_secs(1)).min(operation),
            operation,
        }
    }

    /// As the SDK takes them.
    pub fn config(self) -> aws_smithy_types::timeout::TimeoutConfig {
        aws_smithy_types::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation)
            .build()
    }
}

impl Default for CallTimeouts {
    fn default() -> CallTimeouts {
        CallTimeouts::within(DEFAULT_CALL_TIMEOUT)
    }
}

/// The AWS provider's validated settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwsConfig {
    pub discovery: GroupDiscovery,
    pub excluded_names: BTreeSet<String>,
    pub excluded_tags: Vec<TagExclusion>,
    pub include_eks_managed: bool,
    /// Rule 5 (opt-in).
    pub image_drift: bool,
    /// Rule 6 (opt-in).
    pub max_age: Option<Duration>,
    /// `--aws-call-timeout`: the time limits of every AWS call.
    pub timeouts: CallTimeouts,
}

impl AwsConfig {
    /// Whether `DescribeInstances` is needed (rules 5 and 6).
    pub fn needs_instance_details(&self) -> bool {
        self.image_drift || self.max_age.is_some()
    }
}

/// The two SDK clients.
#[derive(Clone, Debug)]
pub struct AwsClients {
    pub autoscaling: autoscaling::Client,
    pub ec2: ec2::Client,
}

impl AwsClients {
    /// Clients from the standard chain (credentials, region, endpoint, retry settings) with
    /// these time limits, over rustls with ring. The region is resolved here, so a missing one
    /// is a configuration error before any call; credentials are resolved on the first call.
    pub async fn from_env(timeouts: CallTimeouts) -> Result<AwsClients, AwsSetupError> {
        let clients = AwsClients::from_loader(
            aws_config::defaults(BehaviorVersion::latest()).timeout_config(timeouts.config()),
        )
        .await;
        match clients.ec2.config().region() {
            Some(_) => Ok(clients),
            None => Err(AwsSetupError::RegionMissing),
        }
    }

    /// Clients from a config loader (tests set endpoint, region and credentials on it), over
    /// rustls with ring.
    pub async fn from_loader(loader: aws_config::ConfigLoader) -> AwsClients {
        let shared = loader.http_client(http_client()).load().await;
        AwsClients {
            autoscaling: autoscaling::Client::new(&shared),
            ec2: ec2::Client::new(&shared),
        }
    }
}

/// The HTTPS client: rustls with ring (the same crypto as the Kubernetes client), web PKI roots
/// from the platform.
pub fn http_client() -> ec2::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// The AWS provider, configured; clients are built on first use unless given.
#[derive(Clone, Debug)]
pub struct AwsProvider {
    pub config: AwsConfig,
    pub clients: Option<AwsClients>,
}

/// What the Describe calls returned, converted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AwsSnapshot {
    pub groups: Vec<AutoScalingGroup>,
    pub templates: Vec<LaunchTemplateInfo>,
    /// `None` unless the image rule is on.
    pub template_images: Option<Vec<TemplateVersionImage>>,
    /// `None` unless the image or max-age rule is on.
    pub instance_details: Option<Vec<InstanceDetails>>,
    /// Look-ups about one template that failed, by the template id or name asked for.
    pub failed_templates: BTreeMap<String, FailedLookup>,
}

impl AwsProvider {
    pub fn new(config: AwsConfig) -> AwsProvider {
        AwsProvider {
            config,
            clients: None,
        }
    }

    /// With given clients (tests: aws-smithy-mocks).
    pub fn with_clients(config: AwsConfig, clients: AwsClients) -> AwsProvider {
        AwsProvider {
            config,
            clients: Some(clients),
        }
    }

    /// Builds the clients from the standard chain unless given ([`AwsClients::from_env`]).
    pub async fn connect(&mut self) -> Result<(), AwsSetupError> {
        if self.clients.is_none() {
            self.clients = Some(AwsClients::from_env(self.config.timeouts).await?);
        }
        Ok(())
    }

    /// Describes groups, templates (and with rules 5/6 template versions and instances), judges
    /// every instance, and returns an assessor that joins nodes to those verdicts.
    pub async fn assess(
        &self,
        calls: &mut ApiCalls,
        now: Timestamp,
    ) -> Result<AwsAssessor, ProviderError> {
        let clients = match &self.clients {
            Some(clients) => clients.clone(),
            None => AwsClients::from_env(self.config.timeouts)
                .await
                .map_err(ProviderError::AwsSetup)?,
        };
        let started = std::time::Instant::now();
        let snapshot = fetch_snapshot(&clients, &self.config, calls).await?;
        let Judgement {
            fleet,
            lookup_failures,
        } = judge_snapshot(&snapshot, &self.config, now);
        tracing::info!(
            groups = snapshot.groups.len(),
            instances = fleet.len(),
            templates = snapshot.templates.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "aws provider: described the groups"
        );
        Ok(AwsAssessor {
            fleet: Arc::new(fleet),
            lookup_failures,
            capacities: snapshot.groups.iter().map(GroupCapacity::of).collect(),
            groups: AwsGroupWriter {
                autoscaling: clients.autoscaling,
            },
        })
    }
}

/// What the drift rules made of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// Every instance of the selected groups, by instance id.
    pub fleet: BTreeMap<String, InstanceVerdict>,
    /// The failed template look-ups with the groups they made the rules skip.
    pub lookup_failures: Vec<LookupFailure>,
}

/// Every instance of the snapshot judged by the drift rules, and the groups skipped for a failed
/// look-up.
pub fn judge_snapshot(snapshot: &AwsSnapshot, config: &AwsConfig, now: Timestamp) -> Judgement {
    let templates = index_templates(&snapshot.templates);
    let images = snapshot
        .template_images
        .as_deref()
        .map(index_template_images);
    let details = snapshot
        .instance_details
        .as_deref()
        .map(index_instance_details);
    let inputs = DriftInputs {
        groups: &snapshot.groups,
        templates: &templates,
        template_images: images.as_ref(),
        instance_details: details.as_ref(),
        max_age: config.max_age,
        now,
        excluded_names: &config.excluded_names,
        excluded_tags: &config.excluded_tags,
        include_eks_managed: config.include_eks_managed,
        failed_templates: &snapshot.failed_templates,
    };
    let mut lookup_failures: Vec<LookupFailure> = Vec::new();
    for skip in failed_lookup_skips(&inputs) {
        let SkipReason::LookupFailed {
            group,
            operation,
            template,
            error,
        } = skip
        else {
            continue;
        };
        match lookup_failures
            .iter_mut()
            .find(|f| f.operation == operation && f.subject == template)
        {
            Some(failure) => failure.groups.push(group),
            None => lookup_failures.push(LookupFailure {
                operation,
                subject: template,
                error,
                groups: vec![group],
            }),
        }
    }
    lookup_failures.extend(missing_named_groups(snapshot, &config.discovery));
    Judgement {
        fleet: fleet_verdicts(&inputs),
        lookup_failures,
    }
}

/// A group named by `--group` that `DescribeAutoScalingGroups` did not return (AWS answers an
/// unknown name with nothing, not an error). Reported as a look-up failure, so that the run
/// exits 1 and a mistyped name does not pass for a fleet with nothing out of date; the groups
/// found are still handled.
fn missing_named_groups(snapshot: &AwsSnapshot, discovery: &GroupDiscovery) -> Vec<LookupFailure> {
    let GroupDiscovery::Names(names) = discovery else {
        return Vec::new();
    };
    let found: BTreeSet<&str> = snapshot.groups.iter().map(|g| g.name.as_str()).collect();
    names
        .iter()
        .filter(|name| !found.contains(name.as_str()))
        .map(|name| LookupFailure {
            operation: op::DESCRIBE_GROUPS,
            subject: format!("Auto Scaling group {name}"),
            error: "no group of that name in this account and region; check --group (names are case-sensitive) and AWS_REGION (nodes there are skipped as instance-not-in-groups)".to_owned(),
            groups: Vec::new(),
        })
        .collect()
}

/// Runs the call plan.
pub async fn fetch_snapshot(
    clients: &AwsClients,
    config: &AwsConfig,
    calls: &mut ApiCalls,
) -> Result<AwsSnapshot, ProviderError> {
    let groups = describe_groups(&clients.autoscaling, &config.discovery, calls).await?;
    let (ids, names) = template_references(&groups);
    let mut failed_templates = BTreeMap::new();
    let templates =
        describe_templates(&clients.ec2, &ids, &names, &mut failed_templates, calls).await?;
    let template_images = if config.image_drift {
        let wanted = wanted_versions(&groups, &templates);
        Some(describe_template_images(&clients.ec2, &wanted, &mut failed_templates, calls).await?)
    } else {
        None
    };
    let instance_details = if config.needs_instance_details() {
        Some(describe_instances(&clients.ec2, calls).await?)
    } else {
        None
    };
    Ok(AwsSnapshot {
        groups,
        templates,
        template_images,
        instance_details,
        failed_templates,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_named_by_flag_and_not_described_is_a_lookup_failure() {
        let snapshot = AwsSnapshot {
            groups: vec![AutoScalingGroup {
                name: "workers".into(),
                ..AutoScalingGroup::default()
            }],
            ..AwsSnapshot::default()
        };
        let names = GroupDiscovery::Names(vec!["workers".into(), "Workers-b".into()]);
        let missing = missing_named_groups(&snapshot, &names);
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert_eq!(missing[0].operation, "DescribeAutoScalingGroups");
        assert_eq!(missing[0].subject, "Auto Scaling group Workers-b");
        assert!(missing[0].error.contains("--group"), "{}", missing[0].error);
        // Groups found by the cluster's tag: none was named, none is missing.
        let tagged = GroupDiscovery::ClusterTag("prod".into());
        assert!(missing_named_groups(&AwsSnapshot::default(), &tagged).is_empty());
    }

    #[test]
    fn cluster_tag_keys() {
        assert_eq!(
            GroupDiscovery::cluster_tag_keys("prod"),
            [
                "kubernetes.io/cluster/prod".to_owned(),
                "k8s.io/cluster-autoscaler/prod".to_owned()
            ]
        );
    }
}
