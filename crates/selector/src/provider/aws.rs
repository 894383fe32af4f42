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
//! only the groups naming it are skipped ([`concerns_only_the_request`]). Retiring a drained node
//! is `TerminateInstanceInAutoScalingGroup(ShouldDecrementDesiredCapacity=false)`, or `=true` when
//! it gives a group surge back; `--group-surge` also calls `CreateOrUpdateTags`,
//! `SetDesiredCapacity` and `DeleteTags` ([`crate::provider::aws_group_surge`]).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_autoscaling as autoscaling;
use aws_sdk_ec2 as ec2;
use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::SdkError;
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;

use crate::api_calls::{AWS, ApiCalls};
use crate::plan::Candidate;
use crate::provider::aws_group_surge::{GroupCapacity, GroupSurge, SURGE_BASE_TAG, SurgeStep};
use crate::provider::aws_model::{
    AutoScalingGroup, GroupInstance, InstanceDetails, LaunchTemplateInfo, LaunchTemplateSpec,
    MixedInstancesPolicy, Override, TemplateVersionImage, index_instance_details,
    index_template_images, index_templates,
};
use crate::provider::aws_rules::{
    DriftInputs, FailedLookup, InstanceVerdict, TagExclusion, failed_lookup_skips, fleet_verdicts,
    group_template_specs, node_verdict, resolve_group_version,
};
use crate::provider::node_facts::node_candidate;
use crate::provider::seam::{AwsSetupError, LookupFailure, ProviderError, Retirer};
use crate::verdict::SkipReason;

/// Most group names per `DescribeAutoScalingGroups` call (the API's limit).
pub const NAMES_PER_CALL: usize = 100;
/// `MaxRecords` of `DescribeAutoScalingGroups` (the API's maximum).
pub const GROUPS_PAGE_SIZE: i32 = 100;
/// `MaxResults` of `DescribeInstances` (the API's maximum).
pub const INSTANCES_PAGE_SIZE: i32 = 1000;
/// The tag every instance launched by a group carries.
pub const GROUP_NAME_TAG: &str = "aws:autoscaling:groupName";

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
    Judgement {
        fleet: fleet_verdicts(&inputs),
        lookup_failures,
    }
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

/// A failed AWS call, naming the operation: `DescribeAutoScalingGroups: AccessDenied: ...`.
pub fn aws_error<E>(operation: &'static str, error: E) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    ProviderError::Aws {
        operation,
        message: error_text(&error),
    }
}

/// The error code and message of a failed call, as [`aws_error`] words them.
fn error_text<E>(error: &E) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match error.code() {
        Some(code) => format!("{code}: {}", error.message().unwrap_or("(no message)")),
        None => DisplayErrorContext(error).to_string(),
    }
}

/// Error codes AWS services use for throttling.
const THROTTLING_CODES: [&str; 9] = [
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "BandwidthLimitExceeded",
    "SlowDown",
];

/// Error codes about the caller (permissions, credentials), not about what was asked.
const CALLER_CODES: [&str; 8] = [
    "UnauthorizedOperation",
    "AccessDenied",
    "AccessDeniedException",
    "AuthFailure",
    "ExpiredToken",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "OptInRequired",
];

/// Whether a failed call's error concerns only what was asked (a template that no longer
/// exists, an image alias that does not resolve) rather than the service, the account or the
/// caller (throttling, a server error, no answer at all, missing permissions). Only the former
/// may be confined to the groups using that template: the others would hit every group alike,
/// so they fail the run.
pub fn concerns_only_the_request<E>(error: &SdkError<E, HttpResponse>) -> bool
where
    E: ProvideErrorMetadata,
{
    let SdkError::ServiceError(service) = error else {
        return false;
    };
    !service.raw().status().is_server_error()
        && !service
            .err()
            .code()
            .is_some_and(|code| THROTTLING_CODES.contains(&code) || CALLER_CODES.contains(&code))
}

/// Records a failed look-up about `template` when the error concerns only that request;
/// otherwise the run fails.
fn confine<E>(
    operation: &'static str,
    template: &str,
    error: SdkError<E, HttpResponse>,
    failed: &mut BTreeMap<String, FailedLookup>,
) -> Result<(), ProviderError>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    if !concerns_only_the_request(&error) {
        return Err(aws_error(operation, error));
    }
    let failure = FailedLookup {
        operation,
        error: error_text(&error),
    };
    tracing::warn!(
        operation,
        template,
        error = %failure.error,
        "look-up failed; the groups using this template are skipped this run"
    );
    failed.insert(template.to_owned(), failure);
    Ok(())
}

fn count(calls: &mut ApiCalls, operation: &'static str) {
    calls.aws(operation);
    tracing::debug!(operation, "aws call");
}

/// `DescribeAutoScalingGroups`, every page.
pub async fn describe_groups(
    client: &autoscaling::Client,
    discovery: &GroupDiscovery,
    calls: &mut ApiCalls,
) -> Result<Vec<AutoScalingGroup>, ProviderError> {
    let requests: Vec<autoscaling::operation::describe_auto_scaling_groups::builders::DescribeAutoScalingGroupsFluentBuilder> =
        match discovery {
            GroupDiscovery::ClusterTag(cluster) => {
                let filter = autoscaling::types::Filter::builder()
                    .name("tag-key")
                    .set_values(Some(GroupDiscovery::cluster_tag_keys(cluster).to_vec()))
                    .build();
                vec![client.describe_auto_scaling_groups().filters(filter)]
            }
            GroupDiscovery::Names(names) => names
                .chunks(NAMES_PER_CALL)
                .map(|chunk| {
                    client
                        .describe_auto_scaling_groups()
                        .set_auto_scaling_group_names(Some(chunk.to_vec()))
                })
                .collect(),
        };
    let mut groups = Vec::new();
    let mut seen = BTreeSet::new();
    for request in requests {
        let mut token: Option<String> = None;
        loop {
            count(calls, op::DESCRIBE_GROUPS);
            let page = request
                .clone()
                .max_records(GROUPS_PAGE_SIZE)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| aws_error(op::DESCRIBE_GROUPS, e))?;
            for group in page.auto_scaling_groups() {
                let group = convert_group(group);
                if seen.insert(group.name.clone()) {
                    groups.push(group);
                }
            }
            match page.next_token().filter(|t| !t.is_empty()) {
                Some(next) => token = Some(next.to_owned()),
                None => break,
            }
        }
    }
    Ok(groups)
}

/// The distinct template ids the groups name (group, mixed policy, overrides), and the names of
/// templates named without an id.
pub fn template_references(groups: &[AutoScalingGroup]) -> (Vec<String>, Vec<String>) {
    let mut ids = BTreeSet::new();
    let mut names = BTreeSet::new();
    for group in groups {
        for spec in group_template_specs(group) {
            match (&spec.id, &spec.name) {
                (Some(id), _) => {
                    ids.insert(id.clone());
                }
                (None, Some(name)) => {
                    names.insert(name.clone());
                }
                (None, None) => {}
            }
        }
    }
    (ids.into_iter().collect(), names.into_iter().collect())
}

/// `DescribeLaunchTemplates` for these ids (one call, pages followed), and for these names when
/// any group names a template without its id. One unknown id fails the whole call
/// (`InvalidLaunchTemplateId.NotFound`), so when a batch fails with an error about the request
/// each template is asked for alone, and only the ones that still fail are recorded in `failed`
/// (their groups are skipped). Throttling, server and connection errors fail the run.
pub async fn describe_templates(
    client: &ec2::Client,
    ids: &[String],
    names: &[String],
    failed: &mut BTreeMap<String, FailedLookup>,
    calls: &mut ApiCalls,
) -> Result<Vec<LaunchTemplateInfo>, ProviderError> {
    let mut templates = Vec::new();
    for (references, by_id) in [(ids, true), (names, false)] {
        if references.is_empty() {
            continue;
        }
        let error = match templates_by(client, references, by_id, calls).await {
            Ok(found) => {
                templates.extend(found);
                continue;
            }
            Err(error) => error,
        };
        // Nothing to narrow down: one template only, or an error about every request alike
        // (then `confine` fails the run).
        if references.len() == 1 || !concerns_only_the_request(&error) {
            confine(op::DESCRIBE_TEMPLATES, &references[0], error, failed)?;
            continue;
        }
        for reference in references {
            match templates_by(client, std::slice::from_ref(reference), by_id, calls).await {
                Ok(found) => templates.extend(found),
                Err(error) => confine(op::DESCRIBE_TEMPLATES, reference, error, failed)?,
            }
        }
    }
    templates.sort_by(|a, b| a.id.cmp(&b.id));
    templates.dedup_by(|a, b| a.id == b.id);
    Ok(templates)
}

type TemplatesError =
    SdkError<ec2::operation::describe_launch_templates::DescribeLaunchTemplatesError, HttpResponse>;

/// One `DescribeLaunchTemplates` request (by ids or by names), every page.
async fn templates_by(
    client: &ec2::Client,
    references: &[String],
    by_id: bool,
    calls: &mut ApiCalls,
) -> Result<Vec<LaunchTemplateInfo>, TemplatesError> {
    let request = if by_id {
        client
            .describe_launch_templates()
            .set_launch_template_ids(Some(references.to_vec()))
    } else {
        client
            .describe_launch_templates()
            .set_launch_template_names(Some(references.to_vec()))
    };
    let mut templates = Vec::new();
    let mut token: Option<String> = None;
    loop {
        count(calls, op::DESCRIBE_TEMPLATES);
        let page = request.clone().set_next_token(token.take()).send().await?;
        templates.extend(page.launch_templates().iter().filter_map(convert_template));
        match page.next_token().filter(|t| !t.is_empty()) {
            Some(next) => token = Some(next.to_owned()),
            None => return Ok(templates),
        }
    }
}

/// The resolved version of every template spec a group uses, by template id (what the image
/// rule compares against). Specs that do not resolve are left out (the rules skip them).
pub fn wanted_versions(
    groups: &[AutoScalingGroup],
    templates: &[LaunchTemplateInfo],
) -> BTreeMap<String, BTreeSet<i64>> {
    let index = index_templates(templates);
    let mut wanted: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for group in groups {
        for spec in group_template_specs(group) {
            let Ok(version) = resolve_group_version(spec, &index) else {
                continue;
            };
            let id = match &spec.id {
                Some(id) => id.clone(),
                None => match templates
                    .iter()
                    .find(|t| Some(&t.name) == spec.name.as_ref())
                {
                    Some(t) => t.id.clone(),
                    None => continue,
                },
            };
            wanted.entry(id).or_default().insert(version);
        }
    }
    wanted
}

/// `DescribeLaunchTemplateVersions(ResolveAlias=true)`: one call per template, for all its
/// wanted versions. A template whose call fails with an error about the request (the template
/// was deleted meanwhile, an image alias does not resolve) is recorded in `failed` and its groups
/// are skipped; throttling, server and connection errors fail the run.
pub async fn describe_template_images(
    client: &ec2::Client,
    wanted: &BTreeMap<String, BTreeSet<i64>>,
    failed: &mut BTreeMap<String, FailedLookup>,
    calls: &mut ApiCalls,
) -> Result<Vec<TemplateVersionImage>, ProviderError> {
    let mut images = Vec::new();
    for (id, versions) in wanted {
        match template_images(client, id, versions, calls).await {
            Ok(found) => images.extend(found),
            Err(error) => confine(op::DESCRIBE_TEMPLATE_VERSIONS, id, error, failed)?,
        }
    }
    Ok(images)
}

type VersionsError = SdkError<
    ec2::operation::describe_launch_template_versions::DescribeLaunchTemplateVersionsError,
    HttpResponse,
>;

/// The images of one template's versions, every page.
async fn template_images(
    client: &ec2::Client,
    id: &str,
    versions: &BTreeSet<i64>,
    calls: &mut ApiCalls,
) -> Result<Vec<TemplateVersionImage>, VersionsError> {
    let mut images = Vec::new();
    let mut token: Option<String> = None;
    loop {
        count(calls, op::DESCRIBE_TEMPLATE_VERSIONS);
        let page = client
            .describe_launch_template_versions()
            .launch_template_id(id)
            .set_versions(Some(versions.iter().map(i64::to_string).collect()))
            .resolve_alias(true)
            .set_next_token(token.take())
            .send()
            .await?;
        images.extend(
            page.launch_template_versions()
                .iter()
                .filter_map(convert_template_version),
        );
        match page.next_token().filter(|t| !t.is_empty()) {
            Some(next) => token = Some(next.to_owned()),
            None => return Ok(images),
        }
    }
}

/// `DescribeInstances` of every pending or running group instance, every page.
pub async fn describe_instances(
    client: &ec2::Client,
    calls: &mut ApiCalls,
) -> Result<Vec<InstanceDetails>, ProviderError> {
    let filters = vec![
        ec2::types::Filter::builder()
            .name("tag-key")
            .values(GROUP_NAME_TAG)
            .build(),
        ec2::types::Filter::builder()
            .name("instance-state-name")
            .values("pending")
            .values("running")
            .build(),
    ];
    let mut details = Vec::new();
    let mut token: Option<String> = None;
    loop {
        count(calls, op::DESCRIBE_INSTANCES);
        let page = client
            .describe_instances()
            .set_filters(Some(filters.clone()))
            .max_results(INSTANCES_PAGE_SIZE)
            .set_next_token(token.take())
            .send()
            .await
            .map_err(|e| aws_error(op::DESCRIBE_INSTANCES, e))?;
        for reservation in page.reservations() {
            details.extend(reservation.instances().iter().filter_map(convert_instance));
        }
        match page.next_token().filter(|t| !t.is_empty()) {
            Some(next) => token = Some(next.to_owned()),
            None => break,
        }
    }
    Ok(details)
}

// ---- Conversions: SDK types → aws_model (pure). ----

/// An Auto Scaling group.
pub fn convert_group(group: &autoscaling::types::AutoScalingGroup) -> AutoScalingGroup {
    AutoScalingGroup {
        name: group
            .auto_scaling_group_name()
            .unwrap_or_default()
            .to_owned(),
        tags: group
            .tags()
            .iter()
            .filter_map(|t| {
                Some((
                    t.key()?.to_owned(),
                    t.value().unwrap_or_default().to_owned(),
                ))
            })
            .collect(),
        status: group.status().filter(|s| !s.is_empty()).map(str::to_owned),
        launch_configuration_name: group.launch_configuration_name().map(str::to_owned),
        launch_template: group.launch_template().map(convert_spec),
        mixed_instances_policy: group
            .mixed_instances_policy()
            .and_then(|p| p.launch_template())
            .map(|lt| MixedInstancesPolicy {
                launch_template: lt
                    .launch_template_specification()
                    .map(convert_spec)
                    .unwrap_or_default(),
                overrides: lt
                    .overrides()
                    .iter()
                    .map(|o| Override {
                        instance_type: o.instance_type().map(str::to_owned),
                        launch_template: o.launch_template_specification().map(convert_spec),
                        has_instance_requirements: o.instance_requirements().is_some(),
                    })
                    .collect(),
            }),
        instances: group
            .instances()
            .iter()
            .map(convert_group_instance)
            .collect(),
        desired_capacity: group.desired_capacity().unwrap_or_default(),
        max_size: group.max_size().unwrap_or_default(),
    }
}

/// A launch template reference.
pub fn convert_spec(spec: &autoscaling::types::LaunchTemplateSpecification) -> LaunchTemplateSpec {
    LaunchTemplateSpec {
        id: spec.launch_template_id().map(str::to_owned),
        name: spec.launch_template_name().map(str::to_owned),
        version: spec.version().map(str::to_owned),
    }
}

/// One instance of a group.
pub fn convert_group_instance(inst: &autoscaling::types::Instance) -> GroupInstance {
    GroupInstance {
        instance_id: inst.instance_id().unwrap_or_default().to_owned(),
        lifecycle_state: inst
            .lifecycle_state()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default(),
        health_status: inst.health_status().unwrap_or_default().to_owned(),
        availability_zone: inst.availability_zone().unwrap_or_default().to_owned(),
        instance_type: inst.instance_type().map(str::to_owned),
        launch_template: inst.launch_template().map(convert_spec),
        launch_configuration_name: inst.launch_configuration_name().map(str::to_owned),
        protected_from_scale_in: inst.protected_from_scale_in().unwrap_or(false),
    }
}

/// A launch template; `None` when a field the rules need is missing.
pub fn convert_template(template: &ec2::types::LaunchTemplate) -> Option<LaunchTemplateInfo> {
    Some(LaunchTemplateInfo {
        id: template.launch_template_id()?.to_owned(),
        name: template
            .launch_template_name()
            .unwrap_or_default()
            .to_owned(),
        latest_version: template.latest_version_number()?,
        default_version: template.default_version_number()?,
    })
}

/// A template version's image; `None` without an image id (the rule then skips, fail safe).
pub fn convert_template_version(
    version: &ec2::types::LaunchTemplateVersion,
) -> Option<TemplateVersionImage> {
    Some(TemplateVersionImage {
        template_id: version.launch_template_id()?.to_owned(),
        version: version.version_number()?,
        image_id: version.launch_template_data()?.image_id()?.to_owned(),
    })
}

/// An EC2 instance's image and launch time; `None` when either is missing.
pub fn convert_instance(inst: &ec2::types::Instance) -> Option<InstanceDetails> {
    let launch = inst.launch_time()?;
    Some(InstanceDetails {
        instance_id: inst.instance_id()?.to_owned(),
        image_id: inst.image_id()?.to_owned(),
        launch_time: Timestamp::new(launch.secs(), launch.subsec_nanos() as i32).ok()?,
    })
}

// ---- Judging nodes and retiring. ----

/// The fleet's verdicts; judges nodes without I/O, and retires instances.
#[derive(Clone, Debug)]
pub struct AwsAssessor {
    pub fleet: Arc<BTreeMap<String, InstanceVerdict>>,
    /// Look-ups that failed for some groups only (those groups' nodes are skipped).
    pub lookup_failures: Vec<LookupFailure>,
    /// Every described group's capacity, for `--group-surge`.
    pub capacities: Vec<GroupCapacity>,
    /// Retires instances and changes groups' capacity.
    pub groups: AwsGroupWriter,
}

impl AwsAssessor {
    /// The node joined to its instance's verdict through `spec.providerID`.
    pub fn candidate(&self, node: &Node) -> Candidate {
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        let joined = node_verdict(provider_id, &self.fleet);
        let mut candidate = node_candidate(node, joined.verdict, joined.group);
        if candidate.zone.is_none() {
            candidate.zone = joined.zone;
        }
        candidate
    }
}

/// The Auto Scaling writes: terminating drained instances in their group, and the group
/// surge's capacity changes.
#[derive(Clone, Debug)]
pub struct AwsGroupWriter {
    pub autoscaling: autoscaling::Client,
}

impl AwsGroupWriter {
    /// Carries out a [`SurgeStep`] that writes (every call counted in `calls`); on success, a
    /// line saying what was done. The base tag is written before the capacity is raised, so a
    /// run that stops in between leaves a tag the next run reads, never a raise without its base.
    pub async fn apply_surge(
        &self,
        surge: &GroupSurge,
        calls: &mut ApiCalls,
    ) -> Result<String, String> {
        let group = surge.group.as_str();
        match surge.step {
            SurgeStep::Raise { to } => {
                count(calls, op::CREATE_OR_UPDATE_TAGS);
                self.autoscaling
                    .create_or_update_tags()
                    .tags(surge_base_tag(group, Some(surge.base)))
                    .send()
                    .await
                    .map_err(|e| aws_error(op::CREATE_OR_UPDATE_TAGS, e).to_string())?;
                count(calls, op::SET_DESIRED_CAPACITY);
                self.autoscaling
                    .set_desired_capacity()
                    .auto_scaling_group_name(group)
                    .desired_capacity(to as i32)
                    .honor_cooldown(false)
                    .send()
                    .await
                    .map_err(|e| aws_error(op::SET_DESIRED_CAPACITY, e).to_string())?;
                Ok(format!(
                    "group {group}: desired capacity set to {to} (tag {SURGE_BASE_TAG}={})",
                    surge.base
                ))
            }
            SurgeStep::Finish => {
                count(calls, op::DELETE_TAGS);
                self.autoscaling
                    .delete_tags()
                    .tags(surge_base_tag(group, None))
                    .send()
                    .await
                    .map_err(|e| aws_error(op::DELETE_TAGS, e).to_string())?;
                Ok(format!("group {group}: removed tag {SURGE_BASE_TAG}"))
            }
            _ => Err(format!(
                "group {group}: surge step {} writes nothing",
                surge.step.kind()
            )),
        }
    }
}

/// The group's [`SURGE_BASE_TAG`], with its value when writing it; never propagated to instances.
fn surge_base_tag(group: &str, base: Option<u32>) -> autoscaling::types::Tag {
    autoscaling::types::Tag::builder()
        .resource_type("auto-scaling-group")
        .resource_id(group)
        .key(SURGE_BASE_TAG)
        .set_value(base.map(|b| b.to_string()))
        .propagate_at_launch(false)
        .build()
}

impl Retirer for AwsGroupWriter {
    fn call(&self, _: &Candidate) -> (&'static str, &'static str) {
        (AWS, op::TERMINATE)
    }

    fn retire<'a>(
        &'a self,
        candidate: &'a Candidate,
        shrink_group: bool,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>> {
        Box::pin(async move {
            let instance = candidate.instance.as_deref().unwrap_or_default();
            let out = self
                .autoscaling
                .terminate_instance_in_auto_scaling_group()
                .instance_id(instance)
                .should_decrement_desired_capacity(shrink_group)
                .send()
                .await
                .map_err(|e| aws_error(op::TERMINATE, e).to_string())?;
            let activity = out
                .activity()
                .and_then(|a| a.description())
                .unwrap_or("termination started");
            let how = if shrink_group {
                "ShouldDecrementDesiredCapacity=true, its surge replacement already runs"
            } else {
                "ShouldDecrementDesiredCapacity=false, the group replaces it"
            };
            Ok(format!(
                "terminated instance {instance} in its Auto Scaling group ({how}): {activity}"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use autoscaling::types as asg;
    use ec2::types as ec2t;

    use super::*;

    fn spec(id: &str, version: Option<&str>) -> asg::LaunchTemplateSpecification {
        asg::LaunchTemplateSpecification::builder()
            .launch_template_id(id)
            .launch_template_name("workers")
            .set_version(version.map(str::to_owned))
            .build()
    }

    #[test]
    fn converts_a_group_with_instances_tags_and_a_mixed_policy() {
        let group = asg::AutoScalingGroup::builder()
            .auto_scaling_group_name("g1")
            .tags(
                asg::TagDescription::builder()
                    .key("team")
                    .value("core")
                    .build(),
            )
            .tags(
                asg::TagDescription::builder()
                    .key("eks:nodegroup-name")
                    .build(),
            )
            .status("Delete in progress")
            .desired_capacity(2)
            .max_size(5)
            .mixed_instances_policy(
                asg::MixedInstancesPolicy::builder()
                    .launch_template(
                        asg::LaunchTemplate::builder()
                            .launch_template_specification(spec("lt-0abc", Some("$Latest")))
                            .overrides(
                                asg::LaunchTemplateOverrides::builder()
                                    .instance_type("m5.large")
                                    .build(),
                            )
                            .overrides(
                                asg::LaunchTemplateOverrides::builder()
                                    .instance_type("m6g.large")
                                    .launch_template_specification(spec("lt-0arm", None))
                                    .build(),
                            )
                            .build(),
                    )
                    .build(),
            )
            .instances(
                asg::Instance::builder()
                    .instance_id("i-0abc")
                    .lifecycle_state(asg::LifecycleState::InService)
                    .health_status("Healthy")
                    .availability_zone("us-east-1a")
                    .instance_type("m5.large")
                    .launch_template(spec("lt-0abc", Some("3")))
                    .protected_from_scale_in(true)
                    .build(),
            )
            .instances(
                asg::Instance::builder()
                    .instance_id("i-0def")
                    .lifecycle_state(asg::LifecycleState::TerminatingWait)
                    .launch_configuration_name("lc-1")
                    .build(),
            )
            .build();
        let converted = convert_group(&group);
        let expected: AutoScalingGroup = serde_json::from_value(serde_json::json!({
            "AutoScalingGroupName": "g1",
            "Tags": [{"Key": "team", "Value": "core"}, {"Key": "eks:nodegroup-name", "Value": ""}],
            "Status": "Delete in progress",
            "DesiredCapacity": 2, "MaxSize": 5,
            "MixedInstancesPolicy": {"LaunchTemplate": {
                "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0abc", "LaunchTemplateName": "workers", "Version": "$Latest"},
                "Overrides": [
                    {"InstanceType": "m5.large"},
                    {"InstanceType": "m6g.large", "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0arm", "LaunchTemplateName": "workers"}}
                ]
            }},
            "Instances": [
                {"InstanceId": "i-0abc", "LifecycleState": "InService", "HealthStatus": "Healthy",
                 "AvailabilityZone": "us-east-1a", "InstanceType": "m5.large",
                 "LaunchTemplate": {"LaunchTemplateId": "lt-0abc", "LaunchTemplateName": "workers", "Version": "3"},
                 "ProtectedFromScaleIn": true},
                {"InstanceId": "i-0def", "LifecycleState": "Terminating:Wait", "HealthStatus": "",
                 "AvailabilityZone": "", "LaunchConfigurationName": "lc-1"}
            ]
        }))
        .unwrap();
        assert_eq!(converted, expected);
        let (ids, names) = template_references(&[converted]);
        assert_eq!(ids, ["lt-0abc", "lt-0arm"]);
        assert!(names.is_empty());
    }

    #[test]
    fn converts_templates_versions_and_instances() {
        let t = ec2t::LaunchTemplate::builder()
            .launch_template_id("lt-1")
            .launch_template_name("n")
            .latest_version_number(5)
            .default_version_number(4)
            .build();
        assert_eq!(
            convert_template(&t),
            Some(LaunchTemplateInfo {
                id: "lt-1".into(),
                name: "n".into(),
                latest_version: 5,
                default_version: 4
            })
        );
        assert_eq!(
            convert_template(
                &ec2t::LaunchTemplate::builder()
                    .launch_template_id("x")
                    .build()
            ),
            None
        );
        let v = ec2t::LaunchTemplateVersion::builder()
            .launch_template_id("lt-1")
            .version_number(5)
            .launch_template_data(
                ec2t::ResponseLaunchTemplateData::builder()
                    .image_id("ami-1")
                    .build(),
            )
            .build();
        assert_eq!(
            convert_template_version(&v),
            Some(TemplateVersionImage {
                template_id: "lt-1".into(),
                version: 5,
                image_id: "ami-1".into()
            })
        );
        let i = ec2t::Instance::builder()
            .instance_id("i-1")
            .image_id("ami-1")
            .launch_time(aws_smithy_types::DateTime::from_secs_and_nanos(
                1_700_000_000,
                5,
            ))
            .build();
        assert_eq!(
            convert_instance(&i),
            Some(InstanceDetails {
                instance_id: "i-1".into(),
                image_id: "ami-1".into(),
                launch_time: Timestamp::new(1_700_000_000, 5).unwrap(),
            })
        );
        assert_eq!(
            convert_instance(&ec2t::Instance::builder().instance_id("i-2").build()),
            None
        );
    }

    #[test]
    fn wanted_versions_resolve_aliases_per_template() {
        let groups: Vec<AutoScalingGroup> = serde_json::from_value(serde_json::json!([
            {"AutoScalingGroupName": "a", "LaunchTemplate": {"LaunchTemplateId": "lt-1", "Version": "$Latest"}},
            {"AutoScalingGroupName": "b", "LaunchTemplate": {"LaunchTemplateId": "lt-1"}},
            {"AutoScalingGroupName": "c", "LaunchTemplate": {"LaunchTemplateName": "named", "Version": "2"}},
            {"AutoScalingGroupName": "d", "LaunchTemplate": {"LaunchTemplateId": "lt-gone"}},
        ]))
        .unwrap();
        let templates = vec![
            LaunchTemplateInfo {
                id: "lt-1".into(),
                name: "one".into(),
                latest_version: 5,
                default_version: 4,
            },
            LaunchTemplateInfo {
                id: "lt-2".into(),
                name: "named".into(),
                latest_version: 3,
                default_version: 3,
            },
        ];
        let wanted = wanted_versions(&groups, &templates);
        assert_eq!(
            wanted,
            BTreeMap::from([
                ("lt-1".to_owned(), BTreeSet::from([4, 5])),
                ("lt-2".to_owned(), BTreeSet::from([2])),
            ])
        );
        let (ids, names) = template_references(&groups);
        assert_eq!(ids, ["lt-1", "lt-gone"]);
        assert_eq!(names, ["named"]);
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
