//! The Azure provider: thin I/O around the pure rules of [`crate::provider::azure_rules`].
//!
//! Plain ARM REST on rotor-core's hyper client ([`rotor_core::http::HttpClient::exchange`]),
//! api-version [`API_VERSION`], against `ROTOR_AZURE_ENDPOINT` (default
//! `https://management.azure.com`), with a bearer token from
//! [`crate::provider::azure_token::TokenSource`]. The calls, each counted in [`ApiCalls`] under
//! `azure`:
//! - `VirtualMachineScaleSets_ListAll`
//!   (`GET /subscriptions/{s}/providers/Microsoft.Compute/virtualMachineScaleSets`), or with
//!   `--azure-resource-group` `VirtualMachineScaleSets_List` per resource group, following
//!   `nextLink`;
//! - per scale set the rules judge (Uniform, `Manual` policy, not excluded nor an AKS pool)
//!   `VirtualMachineScaleSetVMs_List` with `$filter=properties/latestModelApplied eq false`,
//!   following `nextLink`: only the VMs off the latest model come back. With `--image-drift`, a
//!   scale set whose model asks for the `latest` image has every VM listed (no filter), to
//!   compare their image versions.
//!
//! Faults: a 429 or 503 (and 500, 502, 504) is retried after its `Retry-After` (or 1, 2, 4 s),
//! at most [`MAX_ATTEMPTS`] attempts and [`MAX_RETRY_AFTER`] a wait; a 401 fetches the token
//! again and retries once; a 404 on one scale set's VMs (it vanished between the calls) skips
//! that scale set (reason `lookup-failed`); a 404 on a resource group named by
//! `--azure-resource-group` is reported as a lookup failure (exit 1) while the others are
//! handled; anything else fails the run before any write.
//! A `nextLink` must stay on the configured endpoint (same scheme, host and port, `:443` written
//! or not, and a path under the endpoint's: the token is never sent elsewhere) and must not name
//! a page already read (the list would never end); either fails the run.
//!
//! With `--retire-drained`, a drained node's VM is deleted with
//! `VirtualMachineScaleSets_DeleteInstances` (`POST .../virtualMachineScaleSets/{name}/delete`,
//! `instanceIds`): the scale set's capacity drops by one. `--group-surge` is AWS only.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use rotor_core::http::HttpClient;
use serde::de::DeserializeOwned;

use crate::api_calls::ApiCalls;
use crate::plan::Candidate;
use crate::provider::azure_model::{Page, ScaleSet, ScaleSetVm};
use crate::provider::azure_rules::{
    AzureInputs, FailedScaleSet, ScaleSetJudgement, judge_scale_sets, lists_every_vm, node_verdict,
    scale_set_key, scale_set_label, scale_set_skip,
};
use crate::provider::azure_token::TokenSource;
use crate::provider::node_facts::node_candidate;
use crate::provider::seam::{LookupFailure, ProviderError, Retirer};

/// The API, as a key of [`ApiCalls`]; calls are keyed by ARM operation id.
pub const AZURE: &str = "azure";

/// The Microsoft.Compute api-version of every call.
pub const API_VERSION: &str = "2024-07-01";

/// What a request URL may not carry as it is: resource group names may hold letters beyond ASCII
/// (and names come into paths from IDs and provider IDs as written), so those bytes and the
/// characters a URI forbids are percent-encoded, which ARM decodes. `%` itself stays: the
/// filters are written encoded already.
const NOT_IN_A_URI: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'<')
    .add(b'>')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// The default ARM endpoint (`ROTOR_AZURE_ENDPOINT` overrides it, for tests and sovereign
/// clouds).
pub const DEFAULT_ENDPOINT: &str = "https://management.azure.com";

/// The environment variable of the ARM endpoint.
pub const ENDPOINT_ENV: &str = "ROTOR_AZURE_ENDPOINT";

/// Attempts per call (throttling and 5xx).
pub const MAX_ATTEMPTS: u32 = 4;

/// The longest `Retry-After` honoured; a longer one fails the call (the next run tries again).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How long one attempt may take.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest answer read (a page of 1,000 VMs is some 4 MB).
pub const MAX_BODY: usize = 64 << 20;

/// ARM operation ids, as counted and named in errors.
pub mod op {
    pub const LIST_ALL_SCALE_SETS: &str = "VirtualMachineScaleSets_ListAll";
    pub const LIST_SCALE_SETS: &str = "VirtualMachineScaleSets_List";
    pub const LIST_VMS: &str = "VirtualMachineScaleSetVMs_List";
    pub const DELETE_INSTANCES: &str = "VirtualMachineScaleSets_DeleteInstances";
}

/// The Azure provider's validated settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureConfig {
    /// `--azure-subscription`.
    pub subscription: String,
    /// `--azure-resource-group`: only these resource groups' scale sets; empty means all.
    pub resource_groups: Vec<String>,
    /// `--exclude-group`: scale sets by name.
    pub excluded_names: BTreeSet<String>,
    /// `--include-aks-managed`.
    pub include_aks_managed: bool,
    /// `--image-drift`: image versions of scale sets whose model asks for `latest`.
    pub image_drift: bool,
}

/// A failed ARM call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArmError {
    /// 404: the resource is gone.
    NotFound(String),
    /// Anything else, after the retries.
    Failed(String),
}

impl ArmError {
    fn message(&self) -> &str {
        match self {
            ArmError::NotFound(m) | ArmError::Failed(m) => m,
        }
    }
}

/// ARM GETs with a token, retries and call counting.
#[derive(Clone)]
pub struct ArmClient {
    http: HttpClient,
    endpoint: String,
    tokens: TokenSource,
}

impl std::fmt::Debug for ArmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArmClient")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl ArmClient {
    /// A client for `endpoint` (no trailing slash needed).
    pub fn new(http: HttpClient, endpoint: &str, tokens: TokenSource) -> ArmClient {
        ArmClient {
            http,
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            tokens,
        }
    }

    /// From the environment: `ROTOR_AZURE_ENDPOINT` and the token chain.
    pub fn from_env() -> Result<ArmClient, String> {
        let http = HttpClient::new().map_err(|e| e.to_string())?;
        let endpoint = std::env::var(ENDPOINT_ENV)
            .ok()
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        endpoint
            .trim()
            .parse::<http::Uri>()
            .ok()
            .filter(|u| u.scheme().is_some() && u.authority().is_some())
            .ok_or_else(|| format!("{ENDPOINT_ENV} {endpoint:?} is not an absolute URL"))?;
        let tokens = TokenSource::from_env(http.clone()).map_err(|e| e.to_string())?;
        Ok(ArmClient::new(http, endpoint.trim(), tokens))
    }

    /// Every item of a list, following `nextLink`; each page counted as one `operation` call.
    pub async fn list<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        path_and_query: &str,
        calls: &mut ApiCalls,
    ) -> Result<Vec<T>, ArmError> {
        let mut url = format!("{}{path_and_query}", self.endpoint);
        let mut followed = std::collections::HashSet::new();
        let mut items = Vec::new();
        loop {
            calls.count(AZURE, operation);
            let body = self.send(http::Method::GET, &url, Bytes::new()).await?;
            let page: Page<T> = serde_json::from_slice(&body).map_err(|e| {
                ArmError::Failed(format!("{operation}: the answer is not a list page: {e}"))
            })?;
            items.extend(page.value);
            match page.next_link.filter(|l| !l.is_empty()) {
                None => return Ok(items),
                Some(next) => {
                    if !link_stays_on(&self.endpoint, &next) {
                        return Err(ArmError::Failed(format!(
                            "{operation}: nextLink {next} leaves {} (another scheme, host, port \
                             or path); not followed, as the bearer token goes to the configured \
                             endpoint only; if ARM moved, set {ENDPOINT_ENV} to its endpoint",
                            self.endpoint
                        )));
                    }
                    // A link already followed would page forever over the same items.
                    if !followed.insert(next.clone()) {
                        return Err(ArmError::Failed(format!(
                            "{operation}: nextLink names a page already read ({next}); not \
                             followed, as the list would never end"
                        )));
                    }
                    url = next;
                }
            }
        }
    }

    /// `POST {path_and_query}` with a JSON body; the body of the 2xx answer (often empty: ARM
    /// accepts long-running operations with 202).
    pub async fn post(
        &self,
        path_and_query: &str,
        json: &serde_json::Value,
    ) -> Result<Bytes, ArmError> {
        let url = format!("{}{path_and_query}", self.endpoint);
        self.send(http::Method::POST, &url, Bytes::from(json.to_string()))
            .await
    }

    /// One request with the retries described at the top of this module; the body of a 2xx.
    /// Only for requests that may be repeated (reads, and deletes of named VMs).
    async fn send(&self, method: http::Method, url: &str, body: Bytes) -> Result<Bytes, ArmError> {
        let url = utf8_percent_encode(url, NOT_IN_A_URI).to_string();
        let mut token = self.tokens.token().await.map_err(ArmError::Failed)?;
        let mut refreshed = false;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let request = http::Request::builder()
                .method(method.clone())
                .uri(url.as_str())
                .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
                .header(http::header::ACCEPT, "application/json")
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
                .map_err(|e| ArmError::Failed(format!("bad request URL {url:?}: {e}")))?;
            let answer = self.http.exchange(request, ATTEMPT_TIMEOUT, MAX_BODY).await;
            let answer = match answer {
                Ok(answer) => answer,
                Err(error) if attempt < MAX_ATTEMPTS => {
                    tracing::warn!(%error, attempt, "azure: no answer, retrying");
                    tokio::time::sleep(backoff(attempt)).await;
                    continue;
                }
                Err(error) => return Err(ArmError::Failed(error.to_string())),
            };
            match answer.status {
                200..=299 => return Ok(answer.body),
                401 if !refreshed => {
                    refreshed = true;
                    tracing::info!("azure: 401, fetching the token again");
                    token = self.tokens.token().await.map_err(ArmError::Failed)?;
                }
                404 => return Err(ArmError::NotFound(arm_error_text(404, &answer.body))),
                429 | 500 | 502 | 503 | 504 if attempt < MAX_ATTEMPTS => {
                    let wait = retry_after(&answer.headers).unwrap_or_else(|| backoff(attempt));
                    if wait > MAX_RETRY_AFTER {
                        return Err(ArmError::Failed(format!(
                            "{}; Retry-After {}s is longer than {}s",
                            arm_error_text(answer.status, &answer.body),
                            wait.as_secs(),
                            MAX_RETRY_AFTER.as_secs()
                        )));
                    }
                    tracing::warn!(
                        status = answer.status,
                        wait_ms = wait.as_millis() as u64,
                        attempt,
                        "azure: throttled or unavailable, retrying"
                    );
                    tokio::time::sleep(wait).await;
                }
                status => {
                    let mut text = arm_error_text(status, &answer.body);
                    if matches!(status, 429 | 500..=599) {
                        text.push_str(&format!(" (after {attempt} attempts)"));
                    }
                    return Err(ArmError::Failed(text));
                }
            }
        }
    }
}

/// Whether `link` (a `nextLink`) stays on `endpoint`: the same scheme, the same host in any
/// case, the same port (443 for https, 80 for http when not written: ARM writes `:443`), and a
/// path under the endpoint's without `..` segments. The bearer token goes with every page, so a
/// link anywhere else is not followed. URLs that do not parse are not followed either.
pub fn link_stays_on(endpoint: &str, link: &str) -> bool {
    match (url_parts(endpoint), url_parts(link)) {
        (Some(endpoint), Some(link)) => {
            let base = endpoint.path.trim_end_matches('/');
            let under = link
                .path
                .strip_prefix(base)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
            endpoint.scheme == link.scheme
                && endpoint.host == link.host
                && endpoint.port == link.port
                && under
                && !link.path.split('/').any(|segment| segment == "..")
        }
        _ => false,
    }
}

/// What [`link_stays_on`] compares, normalised: scheme and host lower-cased, the port made
/// explicit.
struct UrlParts {
    scheme: String,
    host: String,
    port: u16,
    path: String,
}

/// Parsed as [`ArmClient::send`] would send it (percent-encoded first).
fn url_parts(url: &str) -> Option<UrlParts> {
    let uri: http::Uri = utf8_percent_encode(url.trim(), NOT_IN_A_URI)
        .to_string()
        .parse()
        .ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let port = match (uri.port_u16(), scheme.as_str()) {
        (Some(port), _) => port,
        (None, "https") => 443,
        (None, "http") => 80,
        (None, _) => return None,
    };
    Some(UrlParts {
        host: uri.host()?.to_ascii_lowercase(),
        port,
        path: uri.path().to_owned(),
        scheme,
    })
}

/// 1, 2, 4 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1 << (attempt.saturating_sub(1)).min(5))
}

/// `Retry-After` in seconds (ARM sends seconds; an HTTP date is not honoured: back-off instead).
pub fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// `404 ResourceNotFound: The Resource ... was not found.` from ARM's error body
/// (`{"error": {"code", "message"}}`), or the status alone.
pub fn arm_error_text(status: u16, body: &[u8]) -> String {
    let parsed: Option<(String, String)> = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            Some((
                e.get("code")?.as_str()?.to_owned(),
                e.get("message")
                    .and_then(|m| m.as_str())
                    .unwrap_or_default()
                    .to_owned(),
            ))
        });
    match parsed {
        Some((code, message)) => format!("{status} {code}: {message}"),
        None => format!("HTTP {status}"),
    }
}

/// The Azure provider, configured; the ARM client is built on first use unless given.
#[derive(Clone, Debug)]
pub struct AzureProvider {
    pub config: AzureConfig,
    /// Shared: the hyper client inside is large, and the provider is one variant of an enum.
    pub client: Option<Arc<ArmClient>>,
}

/// What the list calls returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AzureSnapshot {
    pub scale_sets: Vec<ScaleSet>,
    /// Per judged scale set (by key): its VMs off the latest model.
    pub outdated_vms: BTreeMap<String, Vec<ScaleSetVm>>,
    /// Per scale set (by key): the look-up that failed for it alone.
    pub failed: BTreeMap<String, FailedScaleSet>,
    /// Resource groups named by `--azure-resource-group` that do not exist (404), with ARM's
    /// message.
    pub missing_resource_groups: BTreeMap<String, String>,
}

impl AzureProvider {
    pub fn new(config: AzureConfig) -> AzureProvider {
        AzureProvider {
            config,
            client: None,
        }
    }

    /// Builds the ARM client from the environment unless given; a bad endpoint or a
    /// credential that cannot be set up is a configuration error (exit 2).
    pub fn connect(&mut self) -> Result<(), String> {
        if self.client.is_none() {
            self.client = Some(Arc::new(ArmClient::from_env()?));
        }
        Ok(())
    }

    /// Lists the scale sets and the VMs off their latest model, judges them, and returns an
    /// assessor that joins nodes to those verdicts.
    pub async fn assess(
        &self,
        calls: &mut ApiCalls,
        _now: Timestamp,
    ) -> Result<AzureAssessor, ProviderError> {
        let client = match &self.client {
            Some(client) => client.clone(),
            None => Arc::new(
                ArmClient::from_env().map_err(|message| ProviderError::Azure {
                    operation: "setup",
                    message,
                })?,
            ),
        };
        let started = Instant::now();
        let snapshot = fetch_snapshot(&client, &self.config, calls).await?;
        let judged = judge_snapshot(&snapshot, &self.config);
        let missing = snapshot
            .missing_resource_groups
            .iter()
            .map(|(rg, message)| LookupFailure {
                operation: op::LIST_SCALE_SETS,
                subject: format!("resource group {rg}"),
                error: format!(
                    "{message}; check --azure-resource-group (nodes there are skipped as instance-not-in-groups)"
                ),
                groups: Vec::new(),
            });
        let lookup_failures = snapshot
            .failed
            .iter()
            .filter_map(|(key, failure)| {
                let set = judged.get(key)?;
                Some(LookupFailure {
                    operation: failure.operation,
                    subject: set.group.clone(),
                    error: failure.error.clone(),
                    groups: vec![set.group.clone()],
                })
            })
            .chain(missing)
            .collect();
        tracing::info!(
            scale_sets = snapshot.scale_sets.len(),
            outdated_vms = snapshot.outdated_vms.values().map(Vec::len).sum::<usize>(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "azure provider: listed the scale sets"
        );
        Ok(AzureAssessor {
            client: Some(client),
            subscription: self.config.subscription.clone(),
            judged: Arc::new(judged),
            lookup_failures,
        })
    }
}

/// Every listed scale set judged.
pub fn judge_snapshot(
    snapshot: &AzureSnapshot,
    config: &AzureConfig,
) -> BTreeMap<String, ScaleSetJudgement> {
    judge_scale_sets(&AzureInputs {
        scale_sets: &snapshot.scale_sets,
        outdated_vms: &snapshot.outdated_vms,
        failed: &snapshot.failed,
        excluded_names: &config.excluded_names,
        include_aks_managed: config.include_aks_managed,
        image_drift: config.image_drift,
    })
}

/// A failed call, naming what it was about (the subscription, a resource group, a scale set).
fn fail(operation: &'static str, subject: &str, error: ArmError) -> ProviderError {
    ProviderError::Azure {
        operation,
        message: format!("{subject}: {}", error.message()),
    }
}

/// Runs the call plan.
pub async fn fetch_snapshot(
    client: &ArmClient,
    config: &AzureConfig,
    calls: &mut ApiCalls,
) -> Result<AzureSnapshot, ProviderError> {
    let sub = &config.subscription;
    let mut scale_sets: Vec<ScaleSet> = Vec::new();
    let mut missing_resource_groups = BTreeMap::new();
    if config.resource_groups.is_empty() {
        let path = format!(
            "/subscriptions/{sub}/providers/Microsoft.Compute/virtualMachineScaleSets?api-version={API_VERSION}"
        );
        scale_sets = client
            .list(op::LIST_ALL_SCALE_SETS, &path, calls)
            .await
            .map_err(|e| fail(op::LIST_ALL_SCALE_SETS, &format!("subscription {sub}"), e))?;
    } else {
        for rg in &config.resource_groups {
            let path = format!(
                "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets?api-version={API_VERSION}"
            );
            match client.list(op::LIST_SCALE_SETS, &path, calls).await {
                Ok(sets) => scale_sets.extend(sets),
                // A resource group that does not exist has no scale sets to judge; the others
                // are judged, and the run reports it and exits 1 so that a mistyped name does
                // not pass as a fleet with nothing out of date.
                Err(ArmError::NotFound(message)) => {
                    missing_resource_groups.insert(rg.clone(), message);
                }
                Err(e) => {
                    return Err(fail(
                        op::LIST_SCALE_SETS,
                        &format!("resource group {rg}"),
                        e,
                    ));
                }
            }
        }
    }
    let no_failures = BTreeMap::new();
    let no_vms = BTreeMap::new();
    let inputs = AzureInputs {
        scale_sets: &[],
        outdated_vms: &no_vms,
        failed: &no_failures,
        excluded_names: &config.excluded_names,
        include_aks_managed: config.include_aks_managed,
        image_drift: config.image_drift,
    };
    let mut outdated_vms = BTreeMap::new();
    let mut failed = BTreeMap::new();
    for set in &scale_sets {
        if scale_set_skip(set, &inputs).is_some() {
            continue;
        }
        let rg = set.resource_group();
        let key = scale_set_key(rg, &set.name);
        // Only the VMs off the latest model, unless the image rule needs them all.
        let filter = if lists_every_vm(set, config.image_drift) {
            ""
        } else {
            "&%24filter=properties%2FlatestModelApplied%20eq%20false"
        };
        let path = format!(
            "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{}/virtualMachines?api-version={API_VERSION}{filter}",
            set.name
        );
        match client.list::<ScaleSetVm>(op::LIST_VMS, &path, calls).await {
            Ok(vms) => {
                outdated_vms.insert(key, vms);
            }
            Err(ArmError::NotFound(error)) => {
                failed.insert(
                    key,
                    FailedScaleSet {
                        operation: op::LIST_VMS,
                        error,
                    },
                );
            }
            Err(e) => {
                return Err(fail(
                    op::LIST_VMS,
                    &format!("scale set {}", scale_set_label(set)),
                    e,
                ));
            }
        }
    }
    Ok(AzureSnapshot {
        scale_sets,
        outdated_vms,
        failed,
        missing_resource_groups,
    })
}

/// The scale sets' verdicts; judges nodes without I/O.
#[derive(Clone, Debug)]
pub struct AzureAssessor {
    /// The client that listed, for retiring; `None` in tests that judge without I/O.
    pub client: Option<Arc<ArmClient>>,
    pub subscription: String,
    pub judged: Arc<BTreeMap<String, ScaleSetJudgement>>,
    /// Scale sets that vanished between the calls (their nodes are skipped).
    pub lookup_failures: Vec<LookupFailure>,
}

impl AzureAssessor {
    /// The node joined to its VM's verdict through `spec.providerID`.
    pub fn candidate(&self, node: &Node) -> Candidate {
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        let joined = node_verdict(provider_id, &self.subscription, &self.judged);
        let mut candidate = node_candidate(node, joined.verdict, joined.group);
        candidate.instance = joined.instance;
        candidate
    }
}

/// Retires a drained node's VM: `VirtualMachineScaleSets_DeleteInstances` with its instance id.
/// The VM is deleted and the scale set's capacity drops by one, so Azure does not replace it;
/// a cluster autoscaler (or you) raises the capacity again. Reimaging would keep the capacity,
/// but not under a new model, and it brings back the same node name, cordoned and tainted.
impl Retirer for AzureAssessor {
    fn call(&self, _: &Candidate) -> (&'static str, &'static str) {
        (AZURE, op::DELETE_INSTANCES)
    }

    fn retire<'a>(
        &'a self,
        candidate: &'a Candidate,
        shrink_group: bool,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>> {
        Box::pin(async move {
            let vm = candidate.instance.as_deref().unwrap_or_default();
            let client = self
                .client
                .as_ref()
                .ok_or_else(|| format!("VM {vm}: no Azure client to retire it with"))?;
            let (scale_set, instance_id) = vm
                .rsplit_once("/virtualMachines/")
                .filter(|(set, id)| !set.is_empty() && !id.is_empty())
                .ok_or_else(|| format!("{vm:?} does not name a scale-set VM"))?;
            let path = format!("{scale_set}/delete?api-version={API_VERSION}");
            client
                .post(&path, &serde_json::json!({ "instanceIds": [instance_id] }))
                .await
                .map_err(|e| format!("{} on {scale_set}: {}", op::DELETE_INSTANCES, e.message()))?;
            let how = if shrink_group {
                "its surge replacement already runs"
            } else {
                "the scale set's capacity drops by one; Azure does not replace the VM"
            };
            Ok(format!(
                "deleted VM {instance_id} of scale set {} ({}; {how})",
                candidate.group.as_deref().unwrap_or(scale_set),
                op::DELETE_INSTANCES
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_only() {
        let mut h = http::HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(http::header::RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(
            http::header::RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), None);
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
    }

    /// A `nextLink` as ARM writes it: the default port spelled out, `$skiptoken` last.
    const ARM_NEXT_LINK: &str = "https://management.azure.com:443/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-aks/providers/Microsoft.Compute/virtualMachineScaleSets/vmss-a/virtualMachines?api-version=2024-07-01&$filter=properties%2FlatestModelApplied%20eq%20false&$skiptoken=Mjs0MDAwMA==";

    #[test]
    fn a_next_link_with_the_default_port_is_followed() {
        assert!(link_stays_on(DEFAULT_ENDPOINT, ARM_NEXT_LINK));
        let page_2 = ARM_NEXT_LINK.replace(":443", "");
        assert!(link_stays_on(DEFAULT_ENDPOINT, &page_2));
        // Hosts compare in any case; an endpoint may name the port itself.
        assert!(link_stays_on(
            DEFAULT_ENDPOINT,
            &page_2.replace("management.azure.com", "Management.Azure.com")
        ));
        assert!(link_stays_on("https://management.azure.com:443", &page_2));
        // A test server's endpoint with a path prefix, and its own links.
        assert!(link_stays_on(
            "http://127.0.0.1:8443/arm",
            "http://127.0.0.1:8443/arm/subscriptions/s/providers/Microsoft.Compute/virtualMachineScaleSets?api-version=2024-07-01&%24skiptoken=2"
        ));
    }

    #[test]
    fn a_next_link_to_another_host_port_or_scheme_is_refused() {
        let path = "/subscriptions/s/providers/Microsoft.Compute/virtualMachineScaleSets?api-version=2024-07-01&$skiptoken=2";
        for link in [
            format!("https://management.azure.com.evil.example{path}"),
            format!("https://evil.example{path}"),
            format!("https://management.azure.com:443@evil.example{path}"),
            format!("https://management.azure.com:8443{path}"),
            format!("http://management.azure.com{path}"),
            format!("http://management.azure.com:443{path}"),
            path.to_owned(),
            "not a url".to_owned(),
        ] {
            assert!(!link_stays_on(DEFAULT_ENDPOINT, &link), "followed {link}");
        }
        // Out of the endpoint's path.
        for link in [
            "http://127.0.0.1:8443/other/subscriptions/s?%24skiptoken=2",
            "http://127.0.0.1:8443/armory/subscriptions/s?%24skiptoken=2",
            "http://127.0.0.1:8443/arm/../other/subscriptions/s?%24skiptoken=2",
        ] {
            assert!(
                !link_stays_on("http://127.0.0.1:8443/arm", link),
                "followed {link}"
            );
        }
    }

    #[test]
    fn arm_errors_name_code_and_message() {
        assert_eq!(
            arm_error_text(
                404,
                br#"{"error":{"code":"ResourceNotFound","message":"The Resource 'x' was not found."}}"#
            ),
            "404 ResourceNotFound: The Resource 'x' was not found."
        );
        assert_eq!(arm_error_text(502, b"<html>"), "HTTP 502");
    }
}
