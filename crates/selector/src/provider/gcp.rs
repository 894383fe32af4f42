//! The Google Cloud provider: thin I/O around the pure drift rules of
//! [`crate::provider::gcp_rules`], through Google's official Compute Engine client
//! (`google-cloud-compute-v1`, the instance group manager services only).
//!
//! Credentials are application default credentials (`google-cloud-auth`: `GOOGLE_APPLICATION_
//! CREDENTIALS`, gcloud's user credentials, workload identity federation, or the metadata server,
//! which is what GKE workload identity serves). The calls of a run, each counted in [`ApiCalls`]
//! under `gcp`:
//! - `instanceGroupManagers.aggregatedList` for the project (zonal and regional groups together),
//!   `maxResults=500`, following `nextPageToken`;
//! - one `listManagedInstances` per judged group that a node's instance name belongs to
//!   (`{baseInstanceName}-...` in the group's zone or region; a group without a
//!   `baseInstanceName` is always listed), zonal or regional. A group answers `PAGELESS` by
//!   default (all instances at once, page tokens ignored) or `PAGINATED`; `nextPageToken` is
//!   followed either way (absent when pageless), with `maxResults=500`.
//!
//! Groups skipped by a rule (excluded, GKE, PROACTIVE, canary in flight) are not listed. A
//! `listManagedInstances` that answers 404 (the group was deleted after the aggregated list) makes
//! only that group skipped, reported as a failed look-up, and so is each zone or region the
//! aggregated list names in `unreachables` (its groups are missing from the answer); any other
//! failed call fails the run before anything is written. Retries are the client's: its AIP-194
//! policy (503 and I/O errors on idempotent calls) extended to 429, with its exponential
//! back-off (it does not read `Retry-After`), at most [`ATTEMPTS`] attempts and
//! `--gcp-call-timeout` per call in all;
//! `listManagedInstances` is a POST the client would not retry, so it is marked idempotent (it
//! only reads). The endpoint can be replaced (`ROTOR_GCP_ENDPOINT`, for tests against a fake
//! server), which also switches to anonymous credentials.
//!
//! With `--retire-drained`, the [`GcpAssessor`] deletes a drained node's instance through its group
//! (`deleteInstances`, not retried: a POST that changes the group; the next run tries again).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use google_cloud_compute_v1::client::{InstanceGroupManagers, RegionInstanceGroupManagers};
use google_cloud_compute_v1::model;
use google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder;
use google_cloud_gax::options::RequestOptionsBuilder;
use google_cloud_gax::paginator::Paginator;
use google_cloud_gax::retry_policy::{Aip194Strict, RetryPolicyExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;

use crate::api_calls::{ApiCalls, GCP};
use crate::plan::Candidate;
use crate::provider::gcp_model::{
    GroupInstance, GroupScope, GroupVersion, InstanceRef, ManagedGroup,
};
use crate::provider::gcp_rules::{
    GroupRules, InstanceVerdict, Listing, fleet_verdicts, groups_to_list, node_verdict,
};
use crate::provider::node_facts::node_candidate;
use crate::provider::seam::{LookupFailure, ProviderError, Retirer};
use crate::verdict::SkipReason;

/// `maxResults` of both lists (the API's maximum).
pub const PAGE_SIZE: u32 = 500;
/// Most attempts of one call, the first included.
pub const ATTEMPTS: u32 = 5;
/// The default of `--gcp-call-timeout`.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Operation names, as counted in [`ApiCalls`] and named in errors.
pub mod op {
    pub const AGGREGATED_LIST: &str = "instanceGroupManagers.aggregatedList";
    pub const LIST_MANAGED_INSTANCES: &str = "instanceGroupManagers.listManagedInstances";
    pub const REGION_LIST_MANAGED_INSTANCES: &str =
        "regionInstanceGroupManagers.listManagedInstances";
    pub const DELETE_INSTANCES: &str = "instanceGroupManagers.deleteInstances";
    pub const REGION_DELETE_INSTANCES: &str = "regionInstanceGroupManagers.deleteInstances";
}

/// The Google Cloud provider's validated settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcpConfig {
    /// `--gcp-project` (or `GOOGLE_CLOUD_PROJECT`).
    pub project: String,
    /// `--exclude-group`: group names, or `{zone or region}/{name}`.
    pub excluded_names: BTreeSet<String>,
    /// `--include-gke-managed`.
    pub include_gke_managed: bool,
    /// `ROTOR_GCP_ENDPOINT` (tests): another endpoint, with anonymous credentials.
    pub endpoint: Option<String>,
    /// `--gcp-call-timeout`: one call, its retries included.
    pub call_timeout: Duration,
}

impl GcpConfig {
    fn rules(&self) -> GroupRules<'_> {
        GroupRules {
            excluded_names: &self.excluded_names,
            include_gke_managed: self.include_gke_managed,
        }
    }
}

/// The two clients (zonal and regional groups).
#[derive(Clone, Debug)]
pub struct GcpClients {
    pub zonal: InstanceGroupManagers,
    pub regional: RegionInstanceGroupManagers,
}

impl GcpClients {
    /// Clients with the retry policy above, application default credentials or (with an endpoint
    /// given) anonymous ones. Needs the process's rustls crypto provider installed
    /// ([`install_crypto_provider`]).
    pub async fn connect(config: &GcpConfig) -> Result<GcpClients, ProviderError> {
        let setup = |e: google_cloud_gax::client_builder::Error| ProviderError::Gcp {
            operation: "client setup",
            message: e.to_string(),
        };
        let retry = || {
            Aip194Strict
                .continue_on_too_many_requests()
                .with_attempt_limit(ATTEMPTS)
                .with_time_limit(config.call_timeout)
        };
        let backoff = || {
            ExponentialBackoffBuilder::new()
                .with_initial_delay(Duration::from_millis(500))
                .with_maximum_delay(Duration::from_secs(10))
                .build()
                .unwrap_or_default()
        };
        let mut zonal = InstanceGroupManagers::builder()
            .with_retry_policy(retry())
            .with_backoff_policy(backoff());
        let mut regional = RegionInstanceGroupManagers::builder()
            .with_retry_policy(retry())
            .with_backoff_policy(backoff());
        if let Some(endpoint) = &config.endpoint {
            let anonymous = google_cloud_auth::credentials::anonymous::Builder::new().build();
            zonal = zonal
                .with_endpoint(endpoint)
                .with_credentials(anonymous.clone());
            regional = regional.with_endpoint(endpoint).with_credentials(anonymous);
        }
        Ok(GcpClients {
            zonal: zonal.build().await.map_err(setup)?,
            regional: regional.build().await.map_err(setup)?,
        })
    }
}

/// Installs rustls's ring provider as the process default, which the Google clients use (the
/// build leaves out their aws-lc-rs default). Installing twice is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The Google Cloud provider, configured, and its clients once set up ([`GcpProvider::connect`]).
#[derive(Clone, Debug)]
pub struct GcpProvider {
    pub config: GcpConfig,
    clients: Option<GcpClients>,
}

/// What the calls returned, converted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcpSnapshot {
    /// Every group of the project.
    pub groups: Vec<ManagedGroup>,
    /// The groups listed, by key: their instances, or why not (404).
    pub listings: BTreeMap<String, Listing>,
    /// Zones or regions the aggregated list could not reach (`unreachables`).
    pub unreachable: Vec<String>,
}

impl GcpProvider {
    pub fn new(config: GcpConfig) -> GcpProvider {
        GcpProvider {
            config,
            clients: None,
        }
    }

    /// Sets the clients up (application default credentials unless an endpoint is given)
    /// unless done already: credentials that cannot be loaded are a configuration error, told
    /// before the cluster is contacted (exit 2).
    pub async fn connect(&mut self) -> Result<(), ProviderError> {
        if self.clients.is_none() {
            self.clients = Some(self.clients().await?);
        }
        Ok(())
    }

    /// The clients set up by [`GcpProvider::connect`], or set up now for a caller that did not
    /// connect first.
    async fn clients(&self) -> Result<GcpClients, ProviderError> {
        match &self.clients {
            Some(clients) => Ok(clients.clone()),
            None => {
                install_crypto_provider();
                GcpClients::connect(&self.config).await
            }
        }
    }

    /// Lists the groups and the instances of those the nodes may belong to, judges them, and
    /// returns an assessor that joins nodes to those verdicts.
    pub async fn assess(
        &self,
        nodes: &[Node],
        calls: &mut ApiCalls,
        _now: Timestamp,
    ) -> Result<GcpAssessor, ProviderError> {
        let clients = self.clients().await?;
        let started = std::time::Instant::now();
        let node_instances: Vec<InstanceRef> = nodes
            .iter()
            .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref())
            .filter_map(InstanceRef::from_provider_id)
            .collect();
        let snapshot = fetch_snapshot(&clients, &self.config, &node_instances, calls).await?;
        let mut assessor = GcpAssessor::of(&snapshot, &self.config);
        assessor.clients = Some(clients);
        tracing::info!(
            groups = snapshot.groups.len(),
            listed = snapshot.listings.len(),
            instances = assessor.fleet.len(),
            unreachable = snapshot.unreachable.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "gcp provider: listed the managed instance groups"
        );
        Ok(assessor)
    }
}

/// A failed call, naming the operation: `instanceGroupManagers.aggregatedList: ...`.
pub fn gcp_error(operation: &'static str, error: &google_cloud_compute_v1::Error) -> ProviderError {
    ProviderError::Gcp {
        operation,
        message: error.to_string(),
    }
}

fn count(calls: &mut ApiCalls, operation: &'static str) {
    calls.count(GCP, operation);
    tracing::debug!(operation, "gcp call");
}

/// Runs the call plan.
pub async fn fetch_snapshot(
    clients: &GcpClients,
    config: &GcpConfig,
    nodes: &[InstanceRef],
    calls: &mut ApiCalls,
) -> Result<GcpSnapshot, ProviderError> {
    let (groups, unreachable) = list_groups(&clients.zonal, &config.project, calls).await?;
    let mut listings = BTreeMap::new();
    for group in groups_to_list(&groups, &config.rules(), nodes) {
        let listing = list_instances(clients, &config.project, group, calls).await?;
        listings.insert(group.key(), listing);
    }
    Ok(GcpSnapshot {
        groups,
        listings,
        unreachable,
    })
}

/// `aggregatedList`, every page.
pub async fn list_groups(
    client: &InstanceGroupManagers,
    project: &str,
    calls: &mut ApiCalls,
) -> Result<(Vec<ManagedGroup>, Vec<String>), ProviderError> {
    let mut pages = client
        .aggregated_list()
        .set_project(project)
        .set_max_results(PAGE_SIZE)
        .by_page();
    let mut groups = Vec::new();
    let mut unreachable = Vec::new();
    loop {
        let Some(page) = pages.next().await else {
            break;
        };
        count(calls, op::AGGREGATED_LIST);
        let page = page.map_err(|e| gcp_error(op::AGGREGATED_LIST, &e))?;
        let last = page
            .next_page_token
            .as_deref()
            .unwrap_or_default()
            .is_empty();
        read_aggregated_page(page, &mut groups, &mut unreachable);
        if last {
            break;
        }
    }
    groups.sort_by_key(ManagedGroup::key);
    // Every page may repeat the zones it could not reach.
    unreachable.sort();
    unreachable.dedup();
    Ok((groups, unreachable))
}

/// One `aggregatedList` page: its groups, by the zone or region of their key, and its
/// `unreachables` (`zones/{zone}` or `regions/{region}`), as the API writes them.
pub fn read_aggregated_page(
    page: model::InstanceGroupManagerAggregatedList,
    groups: &mut Vec<ManagedGroup>,
    unreachable: &mut Vec<String>,
) {
    unreachable.extend(page.unreachables);
    for (key, scoped) in page.items {
        let Some(scope) = GroupScope::from_key(&key) else {
            continue;
        };
        groups.extend(
            scoped
                .instance_group_managers
                .iter()
                .filter_map(|g| convert_group(g, scope.clone())),
        );
    }
}

/// `listManagedInstances` of one group, every page; `Err` in the listing when the group is gone
/// (404).
pub async fn list_instances(
    clients: &GcpClients,
    project: &str,
    group: &ManagedGroup,
    calls: &mut ApiCalls,
) -> Result<Listing, ProviderError> {
    let mut instances = Vec::new();
    macro_rules! pages {
        ($builder:expr, $operation:expr) => {{
            let operation = $operation;
            let mut pages = $builder
                .set_project(project)
                .set_instance_group_manager(&group.name)
                .set_max_results(PAGE_SIZE)
                .with_idempotency(true)
                .by_page();
            loop {
                let Some(page) = pages.next().await else {
                    break;
                };
                count(calls, operation);
                match page {
                    Ok(page) => {
                        instances
                            .extend(page.managed_instances.iter().filter_map(convert_instance));
                        if page
                            .next_page_token
                            .as_deref()
                            .unwrap_or_default()
                            .is_empty()
                        {
                            break;
                        }
                    }
                    Err(e) if e.http_status_code() == Some(404) => {
                        return Ok(Err(format!("{operation}: {e}")));
                    }
                    Err(e) => return Err(gcp_error(operation, &e)),
                }
            }
        }};
    }
    match &group.scope {
        GroupScope::Zone(zone) => pages!(
            clients.zonal.list_managed_instances().set_zone(zone),
            op::LIST_MANAGED_INSTANCES
        ),
        GroupScope::Region(region) => pages!(
            clients.regional.list_managed_instances().set_region(region),
            op::REGION_LIST_MANAGED_INSTANCES
        ),
    }
    Ok(Ok(instances))
}

// ---- Conversions from the client's types. ----

/// A group; `None` without a name.
pub fn convert_group(
    group: &model::InstanceGroupManager,
    scope: GroupScope,
) -> Option<ManagedGroup> {
    let status = group.status.as_ref();
    Some(ManagedGroup {
        name: group.name.clone()?,
        scope,
        base_instance_name: group.base_instance_name.clone(),
        instance_template: group.instance_template.clone(),
        versions: group
            .versions
            .iter()
            .map(|v| GroupVersion {
                name: v.name.clone(),
                instance_template: v.instance_template.clone(),
            })
            .collect(),
        update_policy_type: group
            .update_policy
            .as_ref()
            .and_then(|p| p.r#type.as_ref())
            .and_then(|t| t.name())
            .map(str::to_owned),
        is_stable: status.and_then(|s| s.is_stable),
        version_target_reached: status
            .and_then(|s| s.version_target.as_ref())
            .and_then(|t| t.is_reached),
        list_managed_instances_results: group
            .list_managed_instances_results
            .as_ref()
            .and_then(|r| r.name())
            .map(str::to_owned),
        target_size: group.target_size.unwrap_or_default(),
    })
}

/// A managed instance; `None` without its URL.
pub fn convert_instance(instance: &model::ManagedInstance) -> Option<GroupInstance> {
    Some(GroupInstance {
        instance: instance.instance.clone()?,
        current_action: instance
            .current_action
            .as_ref()
            .and_then(|a| a.name())
            .map(str::to_owned),
        instance_status: instance
            .instance_status
            .as_ref()
            .and_then(|s| s.name())
            .map(str::to_owned),
        version_template: instance
            .version
            .as_ref()
            .and_then(|v| v.instance_template.clone()),
    })
}

// ---- Judging nodes. ----

/// An `unreachables` entry of the aggregated list (`zones/us-central1-b`, `regions/us-central1`)
/// as a failed look-up: the groups there were not listed, so the nodes there cannot be judged.
pub fn unreachable_scope_failure(entry: &str) -> LookupFailure {
    let subject = match GroupScope::from_key(entry) {
        Some(GroupScope::Zone(zone)) => format!("zone {zone}"),
        Some(GroupScope::Region(region)) => format!("region {region}"),
        None => entry.to_owned(),
    };
    LookupFailure {
        operation: op::AGGREGATED_LIST,
        error: format!(
            "Google Cloud reported {subject} unreachable, so its groups were not listed and its \
             nodes are skipped as instance-not-in-groups; retry the run (if it persists, check \
             the Google Cloud status dashboard)"
        ),
        subject,
        groups: Vec::new(),
    }
}

/// The fleet's verdicts; judges nodes without I/O.
#[derive(Clone, Debug)]
pub struct GcpAssessor {
    pub fleet: Arc<BTreeMap<InstanceRef, InstanceVerdict>>,
    pub groups: Arc<Vec<ManagedGroup>>,
    pub excluded_names: BTreeSet<String>,
    pub include_gke_managed: bool,
    /// Groups whose listing failed (404), with the skip their nodes get.
    pub failed: BTreeMap<String, SkipReason>,
    /// The same, as the run reports them.
    pub lookup_failures: Vec<LookupFailure>,
    /// The project the groups were listed in, where retiring deletes.
    pub project: String,
    /// The clients that listed the fleet; retiring (`--retire-drained`) deletes through them.
    pub clients: Option<GcpClients>,
}

impl GcpAssessor {
    /// Judges a snapshot.
    pub fn of(snapshot: &GcpSnapshot, config: &GcpConfig) -> GcpAssessor {
        let mut failed = BTreeMap::new();
        let mut lookup_failures = Vec::new();
        for (key, listing) in &snapshot.listings {
            if let Err(error) = listing {
                let operation = match snapshot.groups.iter().find(|g| &g.key() == key) {
                    Some(ManagedGroup {
                        scope: GroupScope::Region(_),
                        ..
                    }) => op::REGION_LIST_MANAGED_INSTANCES,
                    _ => op::LIST_MANAGED_INSTANCES,
                };
                let error =
                    format!("{error} (the group was deleted after the aggregated list named it)");
                failed.insert(
                    key.clone(),
                    SkipReason::LookupFailed {
                        group: key.clone(),
                        operation,
                        template: key.clone(),
                        error: error.clone(),
                    },
                );
                lookup_failures.push(LookupFailure {
                    operation,
                    subject: key.clone(),
                    error,
                    groups: vec![key.clone()],
                });
            }
        }
        // Their groups are missing from the answer, so their nodes would pass as in no group.
        lookup_failures.extend(
            snapshot
                .unreachable
                .iter()
                .map(|entry| unreachable_scope_failure(entry)),
        );
        GcpAssessor {
            fleet: Arc::new(fleet_verdicts(&snapshot.groups, &snapshot.listings)),
            groups: Arc::new(snapshot.groups.clone()),
            excluded_names: config.excluded_names.clone(),
            include_gke_managed: config.include_gke_managed,
            failed,
            lookup_failures,
            project: config.project.clone(),
            clients: None,
        }
    }

    /// The node joined to its instance's verdict through `spec.providerID`.
    pub fn candidate(&self, node: &Node) -> Candidate {
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        let rules = GroupRules {
            excluded_names: &self.excluded_names,
            include_gke_managed: self.include_gke_managed,
        };
        let (at, group, verdict) =
            node_verdict(provider_id, &self.fleet, &self.groups, &rules, &self.failed);
        let mut candidate = node_candidate(node, verdict, group);
        if let Some(at) = at {
            if candidate.zone.is_none() {
                candidate.zone = Some(at.zone.clone());
            }
            candidate.instance = Some(at.name);
        }
        candidate
    }
}

impl GcpAssessor {
    /// The node's group and instance, as listed in this run.
    fn retire_target(
        &self,
        candidate: &Candidate,
    ) -> Result<(&ManagedGroup, &InstanceRef), String> {
        let name = candidate.instance.as_deref().unwrap_or_default();
        let key = candidate.group.as_deref().unwrap_or_default();
        let group = self
            .groups
            .iter()
            .find(|g| g.key() == key)
            .ok_or_else(|| format!("instance {name}: its group {key:?} was not listed"))?;
        let (at, _) = self
            .fleet
            .iter()
            .find(|(at, v)| at.name == name && v.group == key)
            .ok_or_else(|| format!("instance {name} is not listed in group {key}"))?;
        Ok((group, at))
    }
}

/// Retires a drained node's instance with its group's `deleteInstances`: the instance is deleted
/// and the group's target size drops by one, so the group does not recreate it; a cluster
/// autoscaler (or you) grows the group again. `recreateInstances` would keep the size, but it
/// brings the instance back under the same name, and the old Node object, cordoned and tainted,
/// with it.
impl Retirer for GcpAssessor {
    fn call(&self, candidate: &Candidate) -> (&'static str, &'static str) {
        match self.retire_target(candidate) {
            Ok((
                ManagedGroup {
                    scope: GroupScope::Region(_),
                    ..
                },
                _,
            )) => (GCP, op::REGION_DELETE_INSTANCES),
            _ => (GCP, op::DELETE_INSTANCES),
        }
    }

    fn retire<'a>(
        &'a self,
        candidate: &'a Candidate,
        shrink_group: bool,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>> {
        Box::pin(async move {
            let (group, at) = self.retire_target(candidate)?;
            let clients = self
                .clients
                .as_ref()
                .ok_or_else(|| format!("instance {}: no GCP client to retire it with", at.name))?;
            let url = format!(
                "projects/{}/zones/{}/instances/{}",
                at.project, at.zone, at.name
            );
            // false: an instance the group no longer holds is an error to report, not a no-op.
            let body = model::InstanceGroupManagersDeleteInstancesRequest::new()
                .set_instances([url.clone()])
                .set_skip_instances_on_validation_error(false);
            let (operation, sent) = match &group.scope {
                GroupScope::Zone(zone) => (
                    op::DELETE_INSTANCES,
                    clients
                        .zonal
                        .delete_instances()
                        .set_project(&self.project)
                        .set_zone(zone)
                        .set_instance_group_manager(&group.name)
                        .set_body(body)
                        .send()
                        .await,
                ),
                GroupScope::Region(region) => {
                    let body = model::RegionInstanceGroupManagersDeleteInstancesRequest::new()
                        .set_instances([url.clone()])
                        .set_skip_instances_on_validation_error(false);
                    (
                        op::REGION_DELETE_INSTANCES,
                        clients
                            .regional
                            .delete_instances()
                            .set_project(&self.project)
                            .set_region(region)
                            .set_instance_group_manager(&group.name)
                            .set_body(body)
                            .send()
                            .await,
                    )
                }
            };
            let done = sent.map_err(|e| format!("{operation} on group {}: {e}", group.key()))?;
            let how = if shrink_group {
                "its surge replacement already runs"
            } else {
                "the group's target size drops by one; it does not recreate the instance"
            };
            Ok(format!(
                "deleted instance {} from managed instance group {} ({operation}; {how}): operation {}",
                at.name,
                group.key(),
                done.name.as_deref().unwrap_or("started")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Report;

    #[test]
    fn an_unreachable_zone_in_the_aggregated_list_is_a_lookup_failure_and_exits_1() {
        // Shaped like Compute Engine's instanceGroupManagers.aggregatedList answer when one zone
        // does not answer: the zone is named in `unreachables`, and no groups come from it.
        let page: model::InstanceGroupManagerAggregatedList =
            serde_json::from_value(serde_json::json!({
                "kind": "compute#instanceGroupManagerAggregatedList",
                "id": "projects/p/aggregated/instanceGroupManagers",
                "items": {
                    "zones/us-central1-a": {"instanceGroupManagers": [{
                        "kind": "compute#instanceGroupManager",
                        "name": "nodes-a",
                        "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a",
                        "baseInstanceName": "nodes-a",
                        "instanceTemplate": "https://www.googleapis.com/compute/v1/projects/p/global/instanceTemplates/nodes-v2",
                        "targetSize": 3
                    }]},
                    "zones/us-central1-c": {"warning": {
                        "code": "NO_RESULTS_ON_PAGE",
                        "message": "There are no results for scope 'zones/us-central1-c' on this page.",
                        "data": [{"key": "scope", "value": "zones/us-central1-c"}]
                    }}
                },
                "unreachables": ["zones/us-central1-b"],
                "selfLink": "https://www.googleapis.com/compute/v1/projects/p/aggregated/instanceGroupManagers"
            }))
            .unwrap();
        let mut groups = Vec::new();
        let mut unreachable = Vec::new();
        read_aggregated_page(page, &mut groups, &mut unreachable);
        assert_eq!(groups.len(), 1);
        let snapshot = GcpSnapshot {
            groups,
            listings: BTreeMap::new(),
            unreachable,
        };
        let config = GcpConfig {
            project: "p".into(),
            excluded_names: BTreeSet::new(),
            include_gke_managed: false,
            endpoint: None,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        };
        let assessor = GcpAssessor::of(&snapshot, &config);
        assert_eq!(
            assessor
                .lookup_failures
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            [
                "instanceGroupManagers.aggregatedList for zone us-central1-b failed: Google Cloud \
              reported zone us-central1-b unreachable, so its groups were not listed and its nodes \
              are skipped as instance-not-in-groups; retry the run (if it persists, check the \
              Google Cloud status dashboard)"
            ]
        );
        let report = Report {
            provider: "gcp",
            dry_run: true,
            nodes: Vec::new(),
            api_calls: ApiCalls::default(),
            lookup_failures: assessor.lookup_failures,
            group_surges: Vec::new(),
        };
        assert_eq!(report.exit_code(), 1);
        // A region is named as one.
        assert_eq!(
            unreachable_scope_failure("regions/us-central1").subject,
            "region us-central1"
        );
    }

    #[test]
    fn converts_the_clients_types_from_the_api_json() {
        // Shaped like the Compute Engine API reference's InstanceGroupManager resource.
        let group: model::InstanceGroupManager = serde_json::from_value(serde_json::json!({
            "kind": "compute#instanceGroupManager",
            "name": "nodes-us-central1-a",
            "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a",
            "baseInstanceName": "nodes",
            "instanceTemplate": "https://www.googleapis.com/compute/v1/projects/p/global/instanceTemplates/nodes-v2",
            "versions": [{"name": "v2", "instanceTemplate": "https://www.googleapis.com/compute/v1/projects/p/global/instanceTemplates/nodes-v2"}],
            "updatePolicy": {"type": "OPPORTUNISTIC", "minimalAction": "REPLACE"},
            "status": {"isStable": true, "versionTarget": {"isReached": false}},
            "listManagedInstancesResults": "PAGINATED",
            "targetSize": 3
        }))
        .unwrap();
        let converted = convert_group(&group, GroupScope::Zone("us-central1-a".into())).unwrap();
        assert_eq!(converted.key(), "us-central1-a/nodes-us-central1-a");
        assert_eq!(
            converted.update_policy_type.as_deref(),
            Some("OPPORTUNISTIC")
        );
        assert_eq!(converted.version_target_reached, Some(false));
        assert_eq!(converted.is_stable, Some(true));
        assert_eq!(
            converted.list_managed_instances_results.as_deref(),
            Some("PAGINATED")
        );
        assert_eq!(converted.versions.len(), 1);
        assert_eq!(converted.target_size, 3);
        let instance: model::ManagedInstance = serde_json::from_value(serde_json::json!({
            "instance": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/instances/nodes-x1",
            "id": "123",
            "instanceStatus": "RUNNING",
            "currentAction": "NONE",
            "version": {"instanceTemplate": "https://www.googleapis.com/compute/v1/projects/p/global/instanceTemplates/nodes-v1"}
        }))
        .unwrap();
        let converted = convert_instance(&instance).unwrap();
        assert_eq!(converted.current_action.as_deref(), Some("NONE"));
        assert_eq!(converted.instance_status.as_deref(), Some("RUNNING"));
        assert!(converted.version_template.unwrap().ends_with("/nodes-v1"));
    }
}
