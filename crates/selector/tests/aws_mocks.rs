//! The AWS provider's SDK plumbing against a mocked SDK (an interceptor in the manner of
//! aws-smithy-mocks): paging across `NextToken`, throttling recovered by the SDK's standard retry,
//! persistent throttling and access denied failing the run (nothing tainted), and the call plan at
//! 5,000 instances in 50 groups.

// The mocks return the SDK's own operation errors, which are large by the SDK's design.
#![allow(clippy::result_large_err)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_autoscaling::operation::describe_auto_scaling_groups::{
    DescribeAutoScalingGroupsError, DescribeAutoScalingGroupsInput, DescribeAutoScalingGroupsOutput,
};
use aws_sdk_autoscaling::types as asg;
use aws_sdk_ec2::operation::describe_instances::{
    DescribeInstancesError, DescribeInstancesInput, DescribeInstancesOutput,
};
use aws_sdk_ec2::operation::describe_launch_template_versions::{
    DescribeLaunchTemplateVersionsError, DescribeLaunchTemplateVersionsInput,
    DescribeLaunchTemplateVersionsOutput,
};
use aws_sdk_ec2::operation::describe_launch_templates::{
    DescribeLaunchTemplatesError, DescribeLaunchTemplatesInput, DescribeLaunchTemplatesOutput,
};
use aws_sdk_ec2::types as ec2t;
use aws_smithy_types::error::ErrorMetadata;
use aws_smithy_types::retry::RetryConfig;
use clap::Parser;
use common::{FLEET, TestCluster};
use mock::{Counter, Handler, on, on_slow};
use rotor_selector::api_calls::{AWS, ApiCalls};
use rotor_selector::cli::{Cli, SelectorConfig};
use rotor_selector::output;
use rotor_selector::provider::aws::{
    AwsClients, AwsConfig, AwsProvider, CallTimeouts, GroupDiscovery, fetch_snapshot,
    judge_snapshot, op,
};
use rotor_selector::provider::seam::LookupFailure;
use rotor_selector::provider::{Provider, ProviderConfig};
use rotor_selector::run::run_with;
use rotor_selector::verdict::Verdict;

/// A small SDK mock in the manner of aws-smithy-mocks (which cannot be used here, see the root
/// Cargo.toml): an interceptor answers each attempt of an operation with a modeled output or
/// error computed from the typed input, so the SDK's real retry classifier and retry loop run;
/// the HTTP client never reaches the network.
mod mock {
    use std::fmt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use aws_smithy_runtime_api::box_error::BoxError;
    use aws_smithy_runtime_api::client::http::{
        HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
    };
    use aws_smithy_runtime_api::client::interceptors::Intercept;
    use aws_smithy_runtime_api::client::interceptors::context::{
        BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextMut, Error,
        FinalizerInterceptorContextMut, Input, Output,
    };
    use aws_smithy_runtime_api::client::orchestrator::{
        HttpRequest, HttpResponse, OrchestratorError,
    };
    use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
    use aws_smithy_types::error::metadata::ProvideErrorMetadata;

    /// Answers one attempt: the HTTP status the connector answers with (200, the status of the
    /// error's code, see [`status_of`]) and the modeled output or error; `delay` holds the
    /// connector's answer back that long (a slow or hanging endpoint).
    #[derive(Clone)]
    pub struct Responder {
        answer: Arc<dyn Fn() -> (u16, Result<Output, Error>) + Send + Sync>,
        delay: Option<Duration>,
    }

    /// The attempt's answer, computed when the connector is called (so the status is the real
    /// response's and the SDK's status-code retry classifier sees it).
    #[derive(Debug)]
    struct Answer(Mutex<Option<Result<Output, Error>>>);

    impl Storable for Answer {
        type Storer = StoreReplace<Answer>;
    }

    /// The HTTP status AWS answers an error code with: 500 for `InternalError` /
    /// `InternalFailure`, 503 for `ServiceUnavailable` / `Unavailable`, 400 otherwise.
    pub fn status_of(code: Option<&str>) -> u16 {
        match code {
            Some("InternalError" | "InternalFailure") => 500,
            Some("ServiceUnavailable" | "Unavailable") => 503,
            _ => 400,
        }
    }

    const DELAY_HEADER: &str = "x-rotor-mock-delay-ms";
    const STATUS_HEADER: &str = "x-rotor-mock-status";

    impl fmt::Debug for Responder {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Responder")
        }
    }

    impl Storable for Responder {
        type Storer = StoreReplace<Responder>;
    }

    /// Attempts answered by one handler.
    #[derive(Clone, Debug, Default)]
    pub struct Counter(Arc<AtomicUsize>);

    impl Counter {
        pub fn get(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// Answers the operation whose input type is `I`, or passes (`None`).
    pub type Handler = Arc<dyn Fn(&Input) -> Option<Responder> + Send + Sync>;

    /// A handler for operation input `I`, answering every attempt with `respond(input)`, and its
    /// attempt counter.
    pub fn on<I, O, E>(
        respond: impl Fn(&I, usize) -> Result<O, E> + Send + Sync + 'static,
    ) -> (Handler, Counter)
    where
        I: Clone + fmt::Debug + Send + Sync + 'static,
        O: fmt::Debug + Send + Sync + 'static,
        E: std::error::Error + ProvideErrorMetadata + fmt::Debug + Send + Sync + 'static,
    {
        on_slow(|_: &I| None, respond)
    }

    /// [`on`], the connector holding back the answer to inputs for which `delay` says so.
    pub fn on_slow<I, O, E>(
        delay: impl Fn(&I) -> Option<Duration> + Send + Sync + 'static,
        respond: impl Fn(&I, usize) -> Result<O, E> + Send + Sync + 'static,
    ) -> (Handler, Counter)
    where
        I: Clone + fmt::Debug + Send + Sync + 'static,
        O: fmt::Debug + Send + Sync + 'static,
        E: std::error::Error + ProvideErrorMetadata + fmt::Debug + Send + Sync + 'static,
    {
        let respond = Arc::new(respond);
        let counter = Counter::default();
        let attempts = counter.clone();
        let handler: Handler = Arc::new(move |input: &Input| {
            let typed: I = input.downcast_ref::<I>()?.clone();
            let respond = respond.clone();
            let attempts = attempts.clone();
            let delay = delay(&typed);
            Some(Responder {
                answer: Arc::new(move || {
                    let attempt = attempts.0.fetch_add(1, Ordering::SeqCst);
                    match respond(&typed, attempt) {
                        Ok(out) => (200, Ok(Output::erase(out))),
                        Err(e) => (status_of(e.code()), Err(Error::erase(e))),
                    }
                }),
                delay,
            })
        });
        (handler, counter)
    }

    pub struct Interceptor(pub Vec<Handler>);

    impl fmt::Debug for Interceptor {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "Interceptor({} handlers)", self.0.len())
        }
    }

    impl Intercept for Interceptor {
        fn name(&self) -> &'static str {
            "rotor-test-mock"
        }

        fn read_before_serialization(
            &self,
            context: &BeforeSerializationInterceptorContextRef<'_>,
            _: &RuntimeComponents,
            cfg: &mut ConfigBag,
        ) -> Result<(), BoxError> {
            let input = context.input();
            let responder = self
                .0
                .iter()
                .find_map(|handler| handler(input))
                .ok_or_else(|| format!("no mock for {input:?}"))?;
            cfg.interceptor_state().store_put(responder);
            Ok(())
        }

        /// Tells the connector how long to wait and which status to answer with.
        fn modify_before_transmit(
            &self,
            context: &mut BeforeTransmitInterceptorContextMut<'_>,
            _: &RuntimeComponents,
            cfg: &mut ConfigBag,
        ) -> Result<(), BoxError> {
            let Some(responder) = cfg.load::<Responder>().cloned() else {
                return Ok(());
            };
            let (status, answer) = (responder.answer)();
            cfg.interceptor_state()
                .store_put(Answer(Mutex::new(Some(answer))));
            let headers = context.request_mut().headers_mut();
            headers.insert(STATUS_HEADER, status.to_string());
            if let Some(delay) = responder.delay {
                headers.insert(DELAY_HEADER, delay.as_millis().to_string());
            }
            Ok(())
        }

        fn modify_before_attempt_completion(
            &self,
            context: &mut FinalizerInterceptorContextMut<'_>,
            _: &RuntimeComponents,
            cfg: &mut ConfigBag,
        ) -> Result<(), BoxError> {
            // An attempt that timed out has no answer to replace: its timeout error stands.
            let answer = cfg
                .load::<Answer>()
                .and_then(|a| a.0.lock().unwrap().take());
            if let (Some(answer), true) = (answer, context.response().is_some()) {
                context
                    .inner_mut()
                    .set_output_or_error(answer.map_err(OrchestratorError::operation));
            }
            Ok(())
        }
    }

    /// An HTTP client that never leaves the process (the interceptor replaces its answer).
    #[derive(Clone, Debug)]
    pub struct Offline;

    impl HttpConnector for Offline {
        fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
            let header = |name: &str| -> Option<u64> { request.headers().get(name)?.parse().ok() };
            let status = header(STATUS_HEADER).unwrap_or(418) as u16;
            let delay = header(DELAY_HEADER).map(Duration::from_millis);
            HttpConnectorFuture::new(async move {
                if let Some(delay) = delay {
                    tokio::time::sleep(delay).await;
                }
                Ok(HttpResponse::new(
                    StatusCode::try_from(status).unwrap(),
                    SdkBody::from("mocked"),
                ))
            })
        }
    }

    impl HttpClient for Offline {
        fn http_connector(
            &self,
            _: &HttpConnectorSettings,
            _: &RuntimeComponents,
        ) -> SharedHttpConnector {
            SharedHttpConnector::new(Offline)
        }
    }
}

/// Tiny back-off so retries take milliseconds.
fn retry() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_millis(1))
        .with_max_backoff(Duration::from_millis(5))
}

fn clients(asg_handlers: &[&Handler], ec2_handlers: &[&Handler]) -> AwsClients {
    clients_within(asg_handlers, ec2_handlers, CallTimeouts::default())
}

/// [`clients`] with the selector's time limits set to `timeouts`.
fn clients_within(
    asg_handlers: &[&Handler],
    ec2_handlers: &[&Handler],
    timeouts: CallTimeouts,
) -> AwsClients {
    let creds = aws_sdk_ec2::config::Credentials::new("test", "test", None, None, "test");
    let autoscaling = aws_sdk_autoscaling::Client::from_conf(
        aws_sdk_autoscaling::Config::builder()
            .behavior_version(aws_sdk_autoscaling::config::BehaviorVersion::latest())
            .region(aws_sdk_autoscaling::config::Region::new("us-east-1"))
            .credentials_provider(creds.clone())
            .http_client(mock::Offline)
            .interceptor(mock::Interceptor(
                asg_handlers.iter().map(|h| (*h).clone()).collect(),
            ))
            .retry_config(retry())
            .timeout_config(timeouts.config())
            .build(),
    );
    let ec2 = aws_sdk_ec2::Client::from_conf(
        aws_sdk_ec2::Config::builder()
            .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
            .region(aws_sdk_ec2::config::Region::new("us-east-1"))
            .credentials_provider(creds)
            .http_client(mock::Offline)
            .interceptor(mock::Interceptor(
                ec2_handlers.iter().map(|h| (*h).clone()).collect(),
            ))
            .retry_config(retry())
            .timeout_config(timeouts.config())
            .build(),
    );
    AwsClients { autoscaling, ec2 }
}

fn config(image_drift: bool) -> AwsConfig {
    AwsConfig {
        discovery: GroupDiscovery::ClusterTag("prod".into()),
        excluded_names: BTreeSet::new(),
        excluded_tags: Vec::new(),
        include_eks_managed: false,
        image_drift,
        max_age: None,
        timeouts: CallTimeouts::default(),
    }
}

/// Template `lt-<t>` (latest 2, default 2); version 2 launches `ami-new-<t>`.
fn template_id(t: usize) -> String {
    format!("lt-{t:04}")
}

fn instance_id(g: usize, i: usize) -> String {
    format!("i-{:08x}{:04x}", g, i)
}

/// Group `g-<g>` using template `lt-<g % templates>` at `$Latest`, with `per_group` instances;
/// instance 0 of every group runs version 1 (drifted), the others version 2.
fn group(g: usize, per_group: usize, templates: usize) -> asg::AutoScalingGroup {
    let t = template_id(g % templates);
    let spec = |version: &str| {
        asg::LaunchTemplateSpecification::builder()
            .launch_template_id(&t)
            .launch_template_name(format!("name-{t}"))
            .version(version)
            .build()
    };
    let mut builder = asg::AutoScalingGroup::builder()
        .auto_scaling_group_name(format!("g-{g:03}"))
        .tags(
            asg::TagDescription::builder()
                .key("kubernetes.io/cluster/prod")
                .value("owned")
                .build(),
        )
        .launch_template(spec("$Latest"));
    for i in 0..per_group {
        builder = builder.instances(
            asg::Instance::builder()
                .instance_id(instance_id(g, i))
                .lifecycle_state(asg::LifecycleState::InService)
                .health_status("Healthy")
                .availability_zone(if i % 2 == 0 {
                    "us-east-1a"
                } else {
                    "us-east-1b"
                })
                .instance_type("m5.large")
                .launch_template(spec(if i == 0 { "1" } else { "2" }))
                .build(),
        );
    }
    builder.build()
}

type GroupsResult = Result<DescribeAutoScalingGroupsOutput, DescribeAutoScalingGroupsError>;
type InstancesResult = Result<DescribeInstancesOutput, DescribeInstancesError>;

/// DescribeAutoScalingGroups answering `groups` in pages of `page` groups (token = next index).
fn groups_mock(groups: Vec<asg::AutoScalingGroup>, page: usize) -> (Handler, Counter) {
    let groups = Arc::new(groups);
    on(
        move |input: &DescribeAutoScalingGroupsInput, _| -> GroupsResult {
            assert_eq!(input.max_records(), Some(100));
            let start: usize = input.next_token().map_or(0, |t| t.parse().unwrap());
            let end = (start + page).min(groups.len());
            Ok(DescribeAutoScalingGroupsOutput::builder()
                .set_auto_scaling_groups(Some(groups[start..end].to_vec()))
                .set_next_token((end < groups.len()).then(|| end.to_string()))
                .build())
        },
    )
}

fn templates_mock(templates: usize) -> (Handler, Counter) {
    templates_mock_without(templates, None)
}

/// DescribeLaunchTemplates for ids; a request naming `missing` fails as EC2 fails it, whole.
fn templates_mock_without(templates: usize, missing: Option<&'static str>) -> (Handler, Counter) {
    on(
        move |input: &DescribeLaunchTemplatesInput,
              _|
              -> Result<DescribeLaunchTemplatesOutput, DescribeLaunchTemplatesError> {
            let ids = input.launch_template_ids();
            assert!(ids.len() <= templates, "asked for {ids:?}");
            if missing.is_some_and(|missing| ids.iter().any(|id| id == missing)) {
                return Err(DescribeLaunchTemplatesError::generic(template_not_found()));
            }
            let mut out = DescribeLaunchTemplatesOutput::builder();
            for id in ids {
                out = out.launch_templates(
                    ec2t::LaunchTemplate::builder()
                        .launch_template_id(id)
                        .launch_template_name(format!("name-{id}"))
                        .latest_version_number(2)
                        .default_version_number(1)
                        .build(),
                );
            }
            Ok(out.build())
        },
    )
}

fn versions_mock() -> (Handler, Counter) {
    versions_mock_failing(None)
}

/// A template id and the error every request about it gets.
type FailingTemplate = (&'static str, fn() -> ErrorMetadata);

/// DescribeLaunchTemplateVersions; requests for template `failing.0` fail with `failing.1`.
fn versions_mock_failing(failing: Option<FailingTemplate>) -> (Handler, Counter) {
    on(
        move |input: &DescribeLaunchTemplateVersionsInput,
              _|
              -> Result<
            DescribeLaunchTemplateVersionsOutput,
            DescribeLaunchTemplateVersionsError,
        > {
            assert_eq!(input.resolve_alias(), Some(true));
            let id = input.launch_template_id().unwrap().to_owned();
            if let Some((template, error)) = failing
                && template == id
            {
                return Err(DescribeLaunchTemplateVersionsError::generic(error()));
            }
            let mut out = DescribeLaunchTemplateVersionsOutput::builder();
            for version in input.versions() {
                out = out.launch_template_versions(
                    ec2t::LaunchTemplateVersion::builder()
                        .launch_template_id(&id)
                        .version_number(version.parse().unwrap())
                        .launch_template_data(
                            ec2t::ResponseLaunchTemplateData::builder()
                                .image_id(format!("ami-v{version}"))
                                .build(),
                        )
                        .build(),
                );
            }
            Ok(out.build())
        },
    )
}

/// DescribeInstances over `ids` in pages of at most `MaxResults` (token = next index); instance
/// 1 of every group runs an old image.
fn instances_mock(ids: Vec<String>) -> (Handler, Counter) {
    let ids = Arc::new(ids);
    on(
        move |input: &DescribeInstancesInput, _| -> InstancesResult {
            let names: Vec<&str> = input.filters().iter().filter_map(|f| f.name()).collect();
            assert_eq!(names, ["tag-key", "instance-state-name"]);
            let page = input.max_results().unwrap() as usize;
            assert_eq!(page, 1000);
            let start: usize = input.next_token().map_or(0, |t| t.parse().unwrap());
            let end = (start + page).min(ids.len());
            let mut reservation = ec2t::Reservation::builder();
            for id in &ids[start..end] {
                let image = if id.ends_with("0001") {
                    "ami-old"
                } else {
                    "ami-v2"
                };
                reservation = reservation.instances(
                    ec2t::Instance::builder()
                        .instance_id(id)
                        .image_id(image)
                        .launch_time(aws_smithy_types::DateTime::from_secs(1_700_000_000))
                        .build(),
                );
            }
            Ok(DescribeInstancesOutput::builder()
                .reservations(reservation.build())
                .set_next_token((end < ids.len()).then(|| end.to_string()))
                .build())
        },
    )
}

/// An AWS error's code and message, as a service answers them.
fn meta(code: &str, message: &str) -> ErrorMetadata {
    ErrorMetadata::builder().code(code).message(message).build()
}

fn throttling() -> DescribeAutoScalingGroupsError {
    DescribeAutoScalingGroupsError::generic(meta("Throttling", "Rate exceeded"))
}

/// What EC2 answers for a template id it does not know.
fn template_not_found() -> ErrorMetadata {
    meta(
        "InvalidLaunchTemplateId.NotFound",
        "At least one of the launch templates specified in the request does not exist.",
    )
}

/// A validated configuration from selector flags, and the AWS provider with these clients.
fn aws_provider(args: &[&str], clients: AwsClients) -> (SelectorConfig, Provider) {
    let mut argv = vec!["rotor-selector"];
    argv.extend_from_slice(args);
    let config = Cli::try_parse_from(argv)
        .unwrap()
        .select
        .validate()
        .unwrap();
    let ProviderConfig::Aws(aws) = config.provider.clone() else {
        panic!("not an AWS configuration: {args:?}")
    };
    (
        config,
        Provider::Aws(AwsProvider::with_clients(aws, clients)),
    )
}

/// Mocks of every Describe call for `groups` groups of `per_group` instances over `templates`
/// templates (see [`group`]), the groups answered `group_page` a page.
struct MockFleet {
    groups: (Handler, Counter),
    templates: (Handler, Counter),
    versions: (Handler, Counter),
    instances: (Handler, Counter),
}

impl MockFleet {
    fn new(groups: usize, per_group: usize, templates: usize, group_page: usize) -> MockFleet {
        MockFleet {
            groups: groups_mock(
                (0..groups)
                    .map(|g| group(g, per_group, templates))
                    .collect(),
                group_page,
            ),
            templates: templates_mock(templates),
            versions: versions_mock(),
            instances: instances_mock(instance_ids(groups, per_group)),
        }
    }

    fn clients(&self) -> AwsClients {
        clients(
            &[&self.groups.0],
            &[&self.templates.0, &self.versions.0, &self.instances.0],
        )
    }
}

#[tokio::test]
async fn groups_and_instances_are_paged_across_next_token() {
    let fleet = MockFleet::new(5, 3, 2, 2);
    let mut calls = ApiCalls::default();
    let snapshot = fetch_snapshot(&fleet.clients(), &config(true), &mut calls)
        .await
        .unwrap();
    assert_eq!(snapshot.groups.len(), 5);
    assert_eq!(snapshot.instance_details.as_ref().unwrap().len(), 15);
    assert_eq!(calls.get(AWS, op::DESCRIBE_GROUPS), 3, "{calls}");
    assert_eq!(calls.get(AWS, op::DESCRIBE_TEMPLATES), 1, "{calls}");
    assert_eq!(calls.get(AWS, op::DESCRIBE_TEMPLATE_VERSIONS), 2, "{calls}");
    assert_eq!(calls.get(AWS, op::DESCRIBE_INSTANCES), 1, "{calls}");
    assert_eq!(fleet.groups.1.get(), 3);
}

/// A service that answers every page with the token it was given (a fault seen in paginated
/// APIs) ends the paging after that page instead of looping the selector forever.
#[tokio::test]
async fn a_next_token_handed_back_unchanged_ends_the_paging() {
    let mut fleet = MockFleet::new(4, 2, 1, 2);
    let all: Vec<_> = (0..4).map(|g| group(g, 2, 1)).collect();
    fleet.groups = on(
        move |input: &DescribeAutoScalingGroupsInput, _| -> GroupsResult {
            let start: usize = input.next_token().map_or(0, |t| t.parse().unwrap());
            Ok(DescribeAutoScalingGroupsOutput::builder()
                .set_auto_scaling_groups(Some(all[start..start + 2].to_vec()))
                .next_token("2")
                .build())
        },
    );
    let mut calls = ApiCalls::default();
    let snapshot = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        fetch_snapshot(&fleet.clients(), &config(true), &mut calls),
    )
    .await
    .expect("paging ends")
    .unwrap();
    // Pages with no token, then "2", then "2" again: the repeat ends it.
    assert_eq!(fleet.groups.1.get(), 2);
    assert_eq!(calls.get(AWS, op::DESCRIBE_GROUPS), 2, "{calls}");
    assert_eq!(snapshot.groups.len(), 4);
}

#[tokio::test]
async fn instances_page_across_next_token() {
    let fleet = MockFleet::new(3, 900, 1, 100);
    let mut calls = ApiCalls::default();
    let snapshot = fetch_snapshot(&fleet.clients(), &config(true), &mut calls)
        .await
        .unwrap();
    assert_eq!(snapshot.instance_details.as_ref().unwrap().len(), 2700);
    assert_eq!(calls.get(AWS, op::DESCRIBE_INSTANCES), 3, "{calls}");
    assert_eq!(fleet.instances.1.get(), 3);
}

#[tokio::test]
async fn throttling_then_success_is_retried_by_the_sdk() {
    let (g, g_calls) = on(
        |_: &DescribeAutoScalingGroupsInput, attempt| -> GroupsResult {
            if attempt < 2 {
                return Err(throttling());
            }
            Ok(DescribeAutoScalingGroupsOutput::builder()
                .auto_scaling_groups(group(0, 2, 1))
                .build())
        },
    );
    let (t, _) = templates_mock(1);
    let (i, i_calls) = on(|_: &DescribeInstancesInput, attempt| -> InstancesResult {
        if attempt == 0 {
            return Err(DescribeInstancesError::generic(meta(
                "RequestLimitExceeded",
                "Request limit exceeded.",
            )));
        }
        Ok(DescribeInstancesOutput::builder().build())
    });
    let clients = clients(&[&g], &[&t, &i]);
    let mut calls = ApiCalls::default();
    let mut config = config(false);
    config.max_age = Some(Duration::from_secs(86_400));
    let snapshot = fetch_snapshot(&clients, &config, &mut calls)
        .await
        .expect("the standard retry recovers");
    assert_eq!(snapshot.groups.len(), 1);
    assert_eq!(g_calls.get(), 3, "two throttled attempts, then success");
    assert_eq!(i_calls.get(), 2, "one RequestLimitExceeded, then success");
    // One call as the selector counts them; the SDK's retries are its own.
    assert_eq!(calls.get(AWS, op::DESCRIBE_GROUPS), 1);
    assert_eq!(calls.get(AWS, op::DESCRIBE_INSTANCES), 1);
}

#[tokio::test]
async fn persistent_throttling_fails_the_run_and_taints_nothing() {
    let cluster = TestCluster::start(FLEET).await;
    let (g, g_calls) =
        on(|_: &DescribeAutoScalingGroupsInput, _| -> GroupsResult { Err(throttling()) });
    let (config, provider) = aws_provider(
        &[
            "--provider",
            "aws",
            "--cluster-name",
            "prod",
            "--max-tainted",
            "100%",
        ],
        clients(&[&g], &[]),
    );
    let error = run_with(&cluster.client, &config, &provider, jiff::Timestamp::now())
        .await
        .expect_err("persistent throttling fails the run");
    assert_eq!(
        error.to_string(),
        "AWS DescribeAutoScalingGroups failed: Throttling: Rate exceeded"
    );
    assert_eq!(g_calls.get(), 3, "the SDK's standard retry tried 3 times");
    assert!(cluster.tainted().await.is_empty());
    assert_eq!(cluster.requests("patch nodes"), 0);
    cluster.stop().await;
}

#[tokio::test]
async fn access_denied_fails_naming_the_operation() {
    let ((g, _), (t, _)) = (groups_mock(vec![group(0, 2, 1)], 100), templates_mock(1));
    let (denied, denied_calls) = on(|_: &DescribeInstancesInput, _| -> InstancesResult {
        Err(DescribeInstancesError::generic(meta(
            "UnauthorizedOperation",
            "You are not authorized to perform this operation.",
        )))
    });
    let clients = clients(&[&g], &[&t, &denied]);
    let mut config = config(false);
    config.max_age = Some(Duration::from_secs(86_400));
    let error = fetch_snapshot(&clients, &config, &mut ApiCalls::default())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "AWS DescribeInstances failed: UnauthorizedOperation: You are not authorized to perform this operation."
    );
    assert_eq!(denied_calls.get(), 1, "access denied is not retried");
}

/// 5,000 instances in 50 groups (5 templates, 100 instances per group): config drift takes
/// DescribeAutoScalingGroups ×1 (50 groups, MaxRecords=100) + DescribeLaunchTemplates ×1; with the
/// image rule, DescribeInstances ×5 (MaxResults=1000) + DescribeLaunchTemplateVersions ×5 (one per
/// template, for the version its groups resolve to).
#[tokio::test]
async fn call_plan_at_5000_instances_in_50_groups() {
    const GROUPS: usize = 50;
    const PER_GROUP: usize = 100;
    const TEMPLATES: usize = 5;
    // Config drift only.
    let fleet = MockFleet::new(GROUPS, PER_GROUP, TEMPLATES, 100);
    let mut calls = ApiCalls::default();
    let started = std::time::Instant::now();
    let snapshot = fetch_snapshot(&fleet.clients(), &config(false), &mut calls)
        .await
        .unwrap();
    let fleet = judge_snapshot(&snapshot, &config(false), jiff::Timestamp::now()).fleet;
    println!("config drift: {calls} ({:?} with mocks)", started.elapsed());
    assert_eq!(fleet.len(), GROUPS * PER_GROUP);
    let drifted = |fleet: &std::collections::BTreeMap<
        _,
        rotor_selector::provider::aws_rules::InstanceVerdict,
    >,
                   reason: &str| {
        fleet
            .values()
            .filter(
                |v| matches!(&v.verdict, Verdict::Drifted { reason: r, .. } if r.slug() == reason),
            )
            .count()
    };
    assert_eq!(drifted(&fleet, "launch-template-version"), GROUPS);
    assert_eq!(calls.total(AWS), 2, "{calls}");
    assert!(calls.total(AWS) <= 3);
    assert_eq!(calls.get(AWS, op::DESCRIBE_GROUPS), 1);
    assert_eq!(calls.get(AWS, op::DESCRIBE_TEMPLATES), 1);

    // The same fleet in pages of 25 groups: still within 3.
    let mut calls = ApiCalls::default();
    let paged = MockFleet::new(GROUPS, PER_GROUP, TEMPLATES, 25);
    fetch_snapshot(&paged.clients(), &config(false), &mut calls)
        .await
        .unwrap();
    assert_eq!(calls.total(AWS), 3, "{calls}");

    // With the image rule.
    let mut calls = ApiCalls::default();
    let started = std::time::Instant::now();
    let image = MockFleet::new(GROUPS, PER_GROUP, TEMPLATES, 100);
    let snapshot = fetch_snapshot(&image.clients(), &config(true), &mut calls)
        .await
        .unwrap();
    let fleet = judge_snapshot(&snapshot, &config(true), jiff::Timestamp::now()).fleet;
    println!("image drift: {calls} ({:?} with mocks)", started.elapsed());
    assert_eq!(drifted(&fleet, "launch-template-version"), GROUPS);
    assert_eq!(drifted(&fleet, "image"), GROUPS, "instance 1 of each group");
    assert_eq!(calls.get(AWS, op::DESCRIBE_INSTANCES), 5, "{calls}");
    assert_eq!(
        calls.get(AWS, op::DESCRIBE_TEMPLATE_VERSIONS),
        TEMPLATES as u64
    );
    assert_eq!(calls.total(AWS), 2 + 5 + TEMPLATES as u64, "{calls}");
    assert!(calls.total(AWS) <= 3 + 5 + TEMPLATES as u64);
}

/// Instances `(g, i)` for `i` in `0..per_group` of groups `0..groups`.
fn instance_ids(groups: usize, per_group: usize) -> Vec<String> {
    (0..groups)
        .flat_map(|g| (0..per_group).map(move |i| instance_id(g, i)))
        .collect()
}

/// Puts old-0..old-3 of [`FLEET`] on instances (0,0), (0,1), (1,0), (1,1): group g-000 (template
/// lt-0000) and group g-001 (lt-0001).
fn place_old_nodes(cluster: &TestCluster) {
    for (node, (g, i)) in
        ["old-0", "old-1", "old-2", "old-3"]
            .into_iter()
            .zip([(0, 0), (0, 1), (1, 0), (1, 1)])
    {
        let id = format!("aws:///us-east-1a/{}", instance_id(g, i));
        cluster.modify_node(node, |n| {
            n.spec.get_or_insert_with(Default::default).provider_id = Some(id)
        });
    }
}

#[tokio::test]
async fn a_failed_version_lookup_skips_only_the_groups_using_that_template() {
    let cluster = TestCluster::start(FLEET).await;
    place_old_nodes(&cluster);
    // old-2 was tainted by an earlier run: a skipped group neither gains nor loses taints.
    cluster.mark("old-2", Some(("image", "NoSchedule")), &[]);
    let ((g, _), (t, _), (v, v_calls), (i, _)) = (
        groups_mock((0..2).map(|g| group(g, 2, 2)).collect(), 100),
        templates_mock(2),
        versions_mock_failing(Some(("lt-0001", template_not_found))),
        instances_mock(instance_ids(2, 2)),
    );
    let (config, provider) = aws_provider(&IMAGE_RUN, clients(&[&g], &[&t, &v, &i]));
    let report = run_with(&cluster.client, &config, &provider, jiff::Timestamp::now())
        .await
        .expect("a failure about one template does not fail the look-up");

    let error = "InvalidLaunchTemplateId.NotFound: At least one of the launch templates specified in the request does not exist.";
    assert_eq!(
        report.lookup_failures,
        [LookupFailure {
            operation: op::DESCRIBE_TEMPLATE_VERSIONS,
            subject: "lt-0001".into(),
            error: error.into(),
            groups: vec!["g-001".into()],
        }]
    );
    assert_eq!(report.exit_code(), 1, "the run reports the skipped group");
    assert_eq!(
        v_calls.get(),
        2,
        "an answer about the request is not retried"
    );

    let json = output::to_json(&report);
    let entry = |node: &str| {
        json["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == node)
            .unwrap()
            .clone()
    };
    for node in ["old-2", "old-3"] {
        let entry = entry(node);
        assert_eq!(entry["action"], "skip", "{entry}");
        assert_eq!(entry["reason"], "lookup-failed", "{entry}");
        assert_eq!(
            entry["detail"],
            format!(
                "DescribeLaunchTemplateVersions for lt-0001 failed: {error}; group g-001 is not judged this run"
            ),
        );
    }
    // The other group is judged and written: version drift on old-0, image drift on old-1.
    assert_eq!(entry("old-0")["reason"], "launch-template-version");
    assert_eq!(entry("old-1")["reason"], "image");
    assert_eq!(
        json["lookupFailures"][0]["groups"],
        serde_json::json!(["g-001"])
    );
    assert_eq!(cluster.tainted().await, ["old-0", "old-1", "old-2"]);
    assert_eq!(
        cluster.drain_taint("old-2").await.as_deref(),
        Some("image:NoSchedule")
    );
    cluster.stop().await;
}

#[tokio::test]
async fn a_template_that_fails_the_batch_is_asked_for_alone_and_skips_only_its_groups() {
    let ((g, _), (t, t_calls)) = (
        groups_mock((0..4).map(|g| group(g, 2, 2)).collect(), 100),
        templates_mock_without(2, Some("lt-0001")),
    );
    let mut calls = ApiCalls::default();
    let snapshot = fetch_snapshot(&clients(&[&g], &[&t]), &config(false), &mut calls)
        .await
        .expect("one unknown template does not fail the look-up");
    assert_eq!(
        calls.get(AWS, op::DESCRIBE_TEMPLATES),
        3,
        "the batch, then each template alone: {calls}"
    );
    assert_eq!(t_calls.get(), 3);
    assert_eq!(
        snapshot
            .templates
            .iter()
            .map(|t| t.id.as_str())
            .collect::<Vec<_>>(),
        ["lt-0000"]
    );
    let judged = judge_snapshot(&snapshot, &config(false), jiff::Timestamp::now());
    assert_eq!(
        judged.lookup_failures,
        [LookupFailure {
            operation: op::DESCRIBE_TEMPLATES,
            subject: "lt-0001".into(),
            error: "InvalidLaunchTemplateId.NotFound: At least one of the launch templates specified in the request does not exist.".into(),
            groups: vec!["g-001".into(), "g-003".into()],
        }]
    );
    let slug = |g, i| match &judged.fleet[&instance_id(g, i)].verdict {
        Verdict::Drifted { reason, .. } => reason.slug().to_owned(),
        Verdict::Skip { why } => why.slug().to_owned(),
        Verdict::Current => "current".to_owned(),
    };
    assert_eq!(slug(0, 0), "launch-template-version");
    assert_eq!(slug(2, 1), "current");
    assert_eq!(slug(1, 0), "lookup-failed");
    assert_eq!(slug(3, 1), "lookup-failed");
}

#[tokio::test]
async fn throttling_or_a_permission_error_in_a_template_lookup_fails_the_run() {
    let cases: [(FailingTemplate, usize, &str); 2] = [
        (
            ("lt-0001", || {
                meta("RequestLimitExceeded", "Request limit exceeded.")
            }),
            3,
            "RequestLimitExceeded: Request limit exceeded.",
        ),
        (
            ("lt-0001", || {
                meta(
                    "UnauthorizedOperation",
                    "You are not authorized to perform this operation.",
                )
            }),
            1,
            "UnauthorizedOperation: You are not authorized to perform this operation.",
        ),
    ];
    for (failing, attempts, error) in cases {
        let ((g, _), (t, _), (v, v_calls)) = (
            groups_mock((0..2).map(|g| group(g, 2, 2)).collect(), 100),
            templates_mock(2),
            versions_mock_failing(Some(failing)),
        );
        let failed = fetch_snapshot(
            &clients(&[&g], &[&t, &v]),
            &config(true),
            &mut ApiCalls::default(),
        )
        .await
        .expect_err("it concerns every group alike: the run fails");
        assert_eq!(
            failed.to_string(),
            format!("AWS DescribeLaunchTemplateVersions failed: {error}")
        );
        assert_eq!(v_calls.get(), 1 + attempts, "lt-0000 once, then lt-0001");
    }
}

#[tokio::test]
async fn a_missing_region_exits_2_before_any_request() {
    let cluster = TestCluster::start(FLEET).await;
    // No region anywhere: not in the environment, no config profile, no instance metadata.
    let run = cluster
        .run_env(
            &["--provider", "aws", "--cluster-name", "prod"],
            &[
                ("AWS_CONFIG_FILE", "/nonexistent/aws/config"),
                (
                    "AWS_SHARED_CREDENTIALS_FILE",
                    "/nonexistent/aws/credentials",
                ),
                ("AWS_EC2_METADATA_DISABLED", "true"),
                ("AWS_ACCESS_KEY_ID", "testing"),
                ("AWS_SECRET_ACCESS_KEY", "testing"),
                // Where a call would go if one were made: nothing listens there.
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
            ],
        )
        .await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("--provider aws needs an AWS region and none was found: set AWS_REGION"),
        "{}",
        run.stderr
    );
    assert_eq!(run.stdout, "");
    assert_eq!(
        cluster.requests_total(),
        0,
        "{}",
        cluster.stats()["requests"]
    );
    cluster.stop().await;
}

/// A 5xx as the service words it: `InternalFailure` (500) or `ServiceUnavailable` (503).
fn server_error(code: &str) -> ErrorMetadata {
    meta(code, "Please try again later.")
}

/// Groups g-000 and g-001 (2 instances each, templates lt-0000 and lt-0001), one group a page,
/// every request for the second page failing with `code` until attempt `recovers_at` (counted
/// over second-page requests only).
fn groups_failing_on_page_two(code: &'static str, recovers_at: usize) -> (Handler, Counter) {
    let groups = Arc::new((0..2).map(|g| group(g, 2, 2)).collect::<Vec<_>>());
    let second_page = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    on(
        move |input: &DescribeAutoScalingGroupsInput, _| -> GroupsResult {
            let start: usize = input.next_token().map_or(0, |t| t.parse().unwrap());
            if start == 1
                && second_page.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < recovers_at
            {
                return Err(DescribeAutoScalingGroupsError::generic(server_error(code)));
            }
            Ok(DescribeAutoScalingGroupsOutput::builder()
                .auto_scaling_groups(groups[start].clone())
                .set_next_token((start == 0).then(|| "1".to_owned()))
                .build())
        },
    )
}

/// DescribeInstances over groups g-000 and g-001, one instance a page (asked for with
/// `MaxResults=1000`, answered short as EC2 may), every later page failing with `code`.
fn instances_failing_after_page_one(code: &'static str) -> (Handler, Counter) {
    let ids = Arc::new(instance_ids(2, 2));
    on(
        move |input: &DescribeInstancesInput, _| -> InstancesResult {
            let start: usize = input.next_token().map_or(0, |t| t.parse().unwrap());
            if start > 0 {
                return Err(DescribeInstancesError::generic(server_error(code)));
            }
            Ok(DescribeInstancesOutput::builder()
                .reservations(
                    ec2t::Reservation::builder()
                        .instances(
                            ec2t::Instance::builder()
                                .instance_id(&ids[0])
                                .image_id("ami-v2")
                                .launch_time(aws_smithy_types::DateTime::from_secs(1_700_000_000))
                                .build(),
                        )
                        .build(),
                )
                .next_token("1")
                .build())
        },
    )
}

const IMAGE_RUN: [&str; 7] = [
    "--provider",
    "aws",
    "--cluster-name",
    "prod",
    "--image-drift",
    "--max-tainted",
    "100%",
];

/// Given old-0..old-3 on the instances of g-000 and g-001 (both out of date), when a 5xx keeps
/// failing the second page of DescribeAutoScalingGroups or of DescribeInstances, then the run
/// fails naming the operation (exit 1) and nothing is tainted from the first page.
#[tokio::test]
async fn a_persistent_5xx_on_a_later_page_fails_the_run_and_taints_nothing() {
    for (operation, code, status) in [
        (op::DESCRIBE_GROUPS, "InternalFailure", 500),
        (op::DESCRIBE_INSTANCES, "Unavailable", 503),
    ] {
        assert_eq!(mock::status_of(Some(code)), status);
        let cluster = TestCluster::start(FLEET).await;
        place_old_nodes(&cluster);
        let (g, g_calls) = if operation == op::DESCRIBE_GROUPS {
            groups_failing_on_page_two(code, usize::MAX)
        } else {
            groups_mock((0..2).map(|g| group(g, 2, 2)).collect(), 1)
        };
        let (i, i_calls) = if operation == op::DESCRIBE_INSTANCES {
            instances_failing_after_page_one(code)
        } else {
            instances_mock(instance_ids(2, 2))
        };
        let ((t, _), (v, _)) = (templates_mock(2), versions_mock());
        let (config, provider) = aws_provider(&IMAGE_RUN, clients(&[&g], &[&t, &v, &i]));
        let error = run_with(&cluster.client, &config, &provider, jiff::Timestamp::now())
            .await
            .expect_err("a 5xx that outlasts the retries fails the run");
        assert_eq!(
            error.to_string(),
            format!("AWS {operation} failed: {code}: Please try again later.")
        );
        assert_eq!(error.exit_code(), 1);
        if operation == op::DESCRIBE_GROUPS {
            assert_eq!(g_calls.get(), 1 + 3, "page 1, then page 2 tried 3 times");
        } else {
            assert_eq!(i_calls.get(), 1 + 3, "page 1, then page 2 tried 3 times");
        }
        assert!(cluster.tainted().await.is_empty(), "{operation}");
        assert_eq!(cluster.requests("patch nodes"), 0, "{operation}");
        cluster.stop().await;
    }
}

/// A 5xx the SDK's standard retry outlasts: the second page comes on the third attempt, and the
/// snapshot is whole.
#[tokio::test]
async fn a_transient_5xx_on_a_later_page_is_retried_by_the_sdk() {
    for code in ["InternalFailure", "ServiceUnavailable"] {
        let ((g, g_calls), (t, _)) = (groups_failing_on_page_two(code, 2), templates_mock(2));
        let mut calls = ApiCalls::default();
        let snapshot = fetch_snapshot(&clients(&[&g], &[&t]), &config(false), &mut calls)
            .await
            .expect("the standard retry recovers from a transient 5xx");
        assert_eq!(snapshot.groups.len(), 2, "{code}");
        assert_eq!(g_calls.get(), 1 + 3, "{code}: two 5xx, then the page");
        assert_eq!(calls.get(AWS, op::DESCRIBE_GROUPS), 2, "{calls}");
    }
}

/// Given the selector's time limits (here 100 ms an attempt, 400 ms a call, so the test is fast;
/// the selector's default is 10 s and 30 s), when the endpoint holds back the second page of
/// DescribeAutoScalingGroups or DescribeInstances for a minute, then the run fails within the
/// call's limit, saying the call timed out and which call, and nothing is tainted.
#[tokio::test]
async fn a_page_that_does_not_come_fails_the_run_within_the_call_timeout() {
    assert_eq!(
        CallTimeouts::default(),
        CallTimeouts {
            attempt: Duration::from_secs(10),
            operation: Duration::from_secs(30)
        }
    );
    let timeouts = CallTimeouts {
        attempt: Duration::from_millis(100),
        operation: Duration::from_millis(400),
    };
    let hang = Duration::from_secs(60);
    for operation in [op::DESCRIBE_GROUPS, op::DESCRIBE_INSTANCES] {
        let cluster = TestCluster::start(FLEET).await;
        place_old_nodes(&cluster);
        let groups = Arc::new((0..2).map(|g| group(g, 2, 2)).collect::<Vec<_>>());
        let slow_groups = operation == op::DESCRIBE_GROUPS;
        let (g, g_calls) = on_slow(
            move |input: &DescribeAutoScalingGroupsInput| {
                (slow_groups && input.next_token().is_some()).then_some(hang)
            },
            move |input: &DescribeAutoScalingGroupsInput, _| -> GroupsResult {
                let start: usize = input.next_token().map_or(0, |t| t.parse().unwrap());
                Ok(DescribeAutoScalingGroupsOutput::builder()
                    .auto_scaling_groups(groups[start].clone())
                    .set_next_token((start == 0).then(|| "1".to_owned()))
                    .build())
            },
        );
        let ids = instance_ids(2, 2);
        let (i, _) = on_slow(
            move |input: &DescribeInstancesInput| {
                (!slow_groups && input.next_token().is_some()).then_some(hang)
            },
            move |input: &DescribeInstancesInput, _| -> InstancesResult {
                let start: usize = input.next_token().map_or(0, |t| t.parse().unwrap());
                Ok(DescribeInstancesOutput::builder()
                    .reservations(
                        ec2t::Reservation::builder()
                            .instances(
                                ec2t::Instance::builder()
                                    .instance_id(&ids[start])
                                    .image_id("ami-v2")
                                    .launch_time(aws_smithy_types::DateTime::from_secs(
                                        1_700_000_000,
                                    ))
                                    .build(),
                            )
                            .build(),
                    )
                    .set_next_token((start + 1 < ids.len()).then(|| (start + 1).to_string()))
                    .build())
            },
        );
        let ((t, _), (v, _)) = (templates_mock(2), versions_mock());
        let (config, provider) =
            aws_provider(&IMAGE_RUN, clients_within(&[&g], &[&t, &v, &i], timeouts));
        let started = std::time::Instant::now();
        let error = run_with(&cluster.client, &config, &provider, jiff::Timestamp::now())
            .await
            .expect_err("a call that does not answer fails the run");
        let elapsed = started.elapsed();
        let text = error.to_string();
        assert!(
            text.starts_with(&format!("AWS {operation} failed: ")) && text.contains("timed out"),
            "{text}"
        );
        assert!(elapsed < Duration::from_secs(5), "{operation}: {elapsed:?}");
        assert_eq!(error.exit_code(), 1);
        if slow_groups {
            assert!(g_calls.get() >= 2, "page 1 answered, page 2 asked for");
        }
        assert!(cluster.tainted().await.is_empty(), "{operation}: {text}");
        assert_eq!(cluster.requests("patch nodes"), 0);
        cluster.stop().await;
    }
}

/// Given g-000 and g-001 listed by DescribeAutoScalingGroups, when g-001 is deleted before the
/// next calls (its template is gone: InvalidLaunchTemplateId.NotFound; or its instances are no
/// longer running), then g-001's nodes are skipped (reason lookup-failed) and not tainted, g-000
/// is handled, and the run exits 1.
#[tokio::test]
async fn a_group_deleted_between_calls_is_skipped_and_the_run_exits_1() {
    // Its template was deleted with it.
    let cluster = TestCluster::start(FLEET).await;
    place_old_nodes(&cluster);
    let ((g, _), (t, _), (v, _), (i, _)) = (
        groups_mock((0..2).map(|g| group(g, 2, 2)).collect(), 100),
        templates_mock_without(2, Some("lt-0001")),
        versions_mock(),
        instances_mock(instance_ids(2, 2)),
    );
    let (config, provider) = aws_provider(&IMAGE_RUN, clients(&[&g], &[&t, &v, &i]));
    let report = run_with(&cluster.client, &config, &provider, jiff::Timestamp::now())
        .await
        .expect("one group's template is gone: only that group is skipped");
    assert_eq!(report.lookup_failures.len(), 1);
    assert_eq!(report.lookup_failures[0].operation, op::DESCRIBE_TEMPLATES);
    assert_eq!(report.lookup_failures[0].groups, ["g-001"]);
    assert_eq!(report.exit_code(), 1);
    assert_eq!(cluster.tainted().await, ["old-0", "old-1"]);
    cluster.stop().await;

    // Its instances are gone: DescribeInstances returns only g-000's. g-001's listing is stale,
    // so old-2 (launch template version 1 in that listing) is not tainted from it either.
    let cluster = TestCluster::start(FLEET).await;
    place_old_nodes(&cluster);
    let ((g, _), (t, _), (v, _), (i, _)) = (
        groups_mock((0..2).map(|g| group(g, 2, 2)).collect(), 100),
        templates_mock(2),
        versions_mock(),
        instances_mock(instance_ids(1, 2)),
    );
    let (config, provider) = aws_provider(&IMAGE_RUN, clients(&[&g], &[&t, &v, &i]));
    let report = run_with(&cluster.client, &config, &provider, jiff::Timestamp::now())
        .await
        .expect("one group is gone: only that group is skipped");
    assert_eq!(
        report.lookup_failures,
        [LookupFailure {
            operation: op::DESCRIBE_INSTANCES,
            subject: "g-001".into(),
            error: "none of the group's 2 InService instances is pending or running any more (the group was deleted or emptied after DescribeAutoScalingGroups listed it)".into(),
            groups: vec!["g-001".into()],
        }]
    );
    assert_eq!(report.exit_code(), 1);
    let json = output::to_json(&report);
    for node in ["old-2", "old-3"] {
        let entry = json["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == node)
            .unwrap();
        assert_eq!(entry["reason"], "lookup-failed", "{entry}");
    }
    assert_eq!(cluster.tainted().await, ["old-0", "old-1"]);
    cluster.stop().await;
}
