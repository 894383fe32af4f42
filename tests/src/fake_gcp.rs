//! A fake Compute Engine API for the Google Cloud provider's tests: plain HTTP on 127.0.0.1 (the
//! official Rust client talks to any endpoint it is given, `http://` included, with anonymous
//! credentials), on its own thread and runtime, stopped on drop. It speaks the documented REST
//! shapes of the calls rotor makes, with answers shaped like the API reference's examples:
//! - `GET /compute/v1/projects/{p}/aggregated/instanceGroupManagers`: the groups under
//!   `items["zones/{z}"]` / `items["regions/{r}"]`, paged by `maxResults` (at most 500) and
//!   `pageToken` / `nextPageToken`, a `NO_RESULTS_ON_PAGE` warning for a scope without groups;
//! - `POST .../zones/{z}/instanceGroupManagers/{g}/listManagedInstances` and its `regions/`
//!   twin: `PAGELESS` groups (the API's default) answer every instance at once and ignore
//!   `maxResults` and `pageToken`; `PAGINATED` groups page by them;
//! - `POST .../instanceGroupManagers/{g}/deleteInstances` and its `regions/` twin, body
//!   `{"instances": [URL...], "skipInstancesOnValidationError"}`: the instances leave the group
//!   and its `targetSize` drops; the answer is a `compute#operation`. An instance the group does
//!   not hold is a 400 unless `skipInstancesOnValidationError` ([`FakeGce::deleted`] lists what
//!   was deleted);
//! - errors as the API's JSON error body (`{"error": {"code", "message", "status", "errors"}}`):
//!   404 for a group that does not exist (or vanished after the aggregated list was served),
//!   and injected faults: 429 or 503 with `Retry-After`, 401 for an expired token.
//!
//! Every request is logged ([`FakeGce::requests`]), so tests count calls as the API would.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::loopback_http::LoopbackHttp;

/// The project of the fake.
pub const PROJECT: &str = "rotor-test";

const API: &str = "https://www.googleapis.com/compute/v1";

/// A template URL of the project, `.../global/instanceTemplates/{name}`.
pub fn template(name: &str) -> String {
    format!("{API}/projects/{PROJECT}/global/instanceTemplates/{name}")
}

/// A node's `spec.providerID` for an instance of the project.
pub fn provider_id(zone: &str, instance: &str) -> String {
    format!("gce://{PROJECT}/{zone}/{instance}")
}

/// One managed instance of a fake group.
#[derive(Clone, Debug)]
pub struct FakeInstance {
    pub name: String,
    pub zone: String,
    /// `version.instanceTemplate` (a template name; `None`: not reported).
    pub template: Option<String>,
    /// `currentAction`.
    pub action: String,
}

/// One managed instance group.
#[derive(Clone, Debug)]
pub struct FakeGroup {
    pub name: String,
    /// `zones/{zone}` or `regions/{region}`.
    pub scope: String,
    pub base_instance_name: String,
    /// `instanceTemplate` (a template name).
    pub template: String,
    /// `versions[]` as (name, template name); empty: one version on `template`.
    pub versions: Vec<(String, String)>,
    /// `updatePolicy.type`.
    pub update_policy: String,
    pub version_target_reached: bool,
    /// `listManagedInstancesResults` is `PAGINATED` (else `PAGELESS`).
    pub paginated: bool,
    pub instances: Vec<FakeInstance>,
}

impl FakeGroup {
    /// A zonal group `name` in `zone` on template `template`, OPPORTUNISTIC, with `instances`
    /// instances `{name}-{i}`, all created from `template`.
    pub fn zonal(name: &str, zone: &str, template: &str, instances: usize) -> FakeGroup {
        FakeGroup {
            name: name.to_owned(),
            scope: format!("zones/{zone}"),
            base_instance_name: name.to_owned(),
            template: template.to_owned(),
            versions: Vec::new(),
            update_policy: "OPPORTUNISTIC".to_owned(),
            version_target_reached: true,
            paginated: false,
            instances: (0..instances)
                .map(|i| FakeInstance {
                    name: format!("{name}-{i}"),
                    zone: zone.to_owned(),
                    template: Some(template.to_owned()),
                    action: "NONE".to_owned(),
                })
                .collect(),
        }
    }

    fn resource(&self) -> Value {
        let (scope_kind, scope_name) = self.scope.split_once('/').expect("zones/.. or regions/..");
        let versions: Vec<Value> = if self.versions.is_empty() {
            vec![json!({"name": "", "instanceTemplate": template(&self.template)})]
        } else {
            self.versions
                .iter()
                .map(|(name, t)| json!({"name": name, "instanceTemplate": template(t)}))
                .collect()
        };
        let self_link = format!(
            "{API}/projects/{PROJECT}/{}/instanceGroupManagers/{}",
            self.scope, self.name
        );
        let mut group = json!({
            "kind": "compute#instanceGroupManager",
            "id": "4512345678901234567",
            "creationTimestamp": "2026-01-05T10:00:00.000-08:00",
            "name": self.name,
            "instanceTemplate": template(&self.template),
            "versions": versions,
            "instanceGroup": format!("{API}/projects/{PROJECT}/{}/instanceGroups/{}", self.scope, self.name),
            "baseInstanceName": self.base_instance_name,
            "fingerprint": "Vf8Wq3Jw0kQ=",
            "currentActions": {"none": self.instances.len(), "creating": 0, "recreating": 0, "deleting": 0},
            "status": {
                "isStable": self.instances.iter().all(|i| i.action == "NONE"),
                "versionTarget": {"isReached": self.version_target_reached},
                "stateful": {"hasStatefulConfig": false, "perInstanceConfigs": {"allEffective": true}},
            },
            "targetSize": self.instances.len(),
            "listManagedInstancesResults": if self.paginated { "PAGINATED" } else { "PAGELESS" },
            "selfLink": self_link,
            "updatePolicy": {
                "type": self.update_policy,
                "minimalAction": "REPLACE",
                "maxSurge": {"fixed": 1, "calculated": 1},
                "maxUnavailable": {"fixed": 0, "calculated": 0},
                "replacementMethod": "SUBSTITUTE",
            },
        });
        let key = if scope_kind == "zones" {
            "zone"
        } else {
            "region"
        };
        group[key] = json!(format!(
            "{API}/projects/{PROJECT}/{scope_kind}/{scope_name}"
        ));
        group
    }

    fn managed_instance(&self, instance: &FakeInstance, id: usize) -> Value {
        let mut value = json!({
            "instance": format!("{API}/projects/{PROJECT}/zones/{}/instances/{}", instance.zone, instance.name),
            "id": format!("{}", 1_000_000 + id),
            "instanceStatus": "RUNNING",
            "currentAction": instance.action,
            "lastAttempt": {},
        });
        if let Some(t) = &instance.template {
            value["version"] = json!({"instanceTemplate": template(t), "name": ""});
        }
        value
    }
}

/// A fault answered instead of the next matching request.
#[derive(Clone, Debug)]
pub struct Fault {
    /// The request path must contain this.
    pub path_contains: String,
    pub status: u16,
    /// `Retry-After`, in seconds.
    pub retry_after: Option<u32>,
}

#[derive(Default)]
struct State {
    groups: Vec<FakeGroup>,
    faults: VecDeque<Fault>,
    /// Groups removed once the aggregated list has been served (they "vanish between calls").
    vanish: BTreeSet<String>,
    /// Every request is answered 401 (an expired token).
    expired_token: bool,
    requests: Vec<(String, String)>,
    /// (group key `{zone or region}/{name}`, instance name) deleted by `deleteInstances`.
    deleted: Vec<(String, String)>,
}

/// The fake, on 127.0.0.1; stopped on drop.
pub struct FakeGce {
    state: Arc<Mutex<State>>,
    pub url: String,
    _server: LoopbackHttp,
}

impl FakeGce {
    /// Starts the fake with these groups.
    pub fn start(groups: Vec<FakeGroup>) -> FakeGce {
        let state = Arc::new(Mutex::new(State {
            groups,
            ..State::default()
        }));
        let shared = state.clone();
        let server = LoopbackHttp::start("fake-gce", move |_| move |req| answer(&shared, req));
        FakeGce {
            state,
            url: server.url.clone(),
            _server: server,
        }
    }

    /// The environment that points rotor-selector at the fake.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("ROTOR_GCP_ENDPOINT", self.url.clone()),
            ("ROTOR_GCP_PROJECT", PROJECT.to_owned()),
        ]
    }

    /// Changes the groups.
    pub fn with_groups(&self, change: impl FnOnce(&mut Vec<FakeGroup>)) {
        change(&mut self.state.lock().unwrap().groups);
    }

    /// Answers the next request whose path contains `path_contains` with `status` (429, 503,
    /// 401...) and, when given, `Retry-After`.
    pub fn fail_next(&self, path_contains: &str, status: u16, retry_after: Option<u32>) {
        self.state.lock().unwrap().faults.push_back(Fault {
            path_contains: path_contains.to_owned(),
            status,
            retry_after,
        });
    }

    /// Drops the faults not yet answered.
    pub fn clear_faults(&self) {
        self.state.lock().unwrap().faults.clear();
    }

    /// The group `name` disappears once the aggregated list has named it.
    pub fn vanish_after_listing(&self, name: &str) {
        self.state.lock().unwrap().vanish.insert(name.to_owned());
    }

    /// Every request is answered 401 UNAUTHENTICATED (or no longer).
    pub fn expire_token(&self, expired: bool) {
        self.state.lock().unwrap().expired_token = expired;
    }

    /// Every request so far, as (method, path and query).
    pub fn requests(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().requests.clone()
    }

    /// How many requests so far whose path contains `part`.
    pub fn count(&self, part: &str) -> usize {
        self.requests()
            .iter()
            .filter(|(_, p)| p.contains(part))
            .count()
    }

    /// (group `{zone or region}/{name}`, instance name) of every instance deleted so far.
    pub fn deleted(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().deleted.clone()
    }

    /// Forgets the requests so far.
    pub fn clear_requests(&self) {
        self.state.lock().unwrap().requests.clear();
    }
}

fn query(req: &Request<Bytes>) -> BTreeMap<String, String> {
    req.uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.replace("%2F", "/")))
        .collect()
}

fn error(status: u16, reason: &str, grpc: &str, message: &str) -> Value {
    json!({"error": {
        "code": status,
        "message": message,
        "errors": [{"message": message, "domain": "global", "reason": reason}],
        "status": grpc,
    }})
}

fn reply(status: u16, body: &Value, retry_after: Option<u32>) -> Response<Full<Bytes>> {
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(status).expect("a status code"))
        .header("content-type", "application/json; charset=UTF-8");
    if let Some(seconds) = retry_after {
        builder = builder.header("retry-after", seconds.to_string());
    }
    builder
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a valid response")
}

/// The API's 404 for a group that does not exist.
fn group_not_found(scope: &str, name: &str) -> Response<Full<Bytes>> {
    let message = format!(
        "The resource 'projects/{PROJECT}/{scope}/instanceGroupManagers/{name}' was not found"
    );
    reply(404, &error(404, "notFound", "NOT_FOUND", &message), None)
}

fn answer(state: &Mutex<State>, req: Request<Bytes>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let method = req.method().to_string();
    let params = query(&req);
    let mut state = state.lock().unwrap();
    let shown = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    state.requests.push((method.clone(), shown));
    if state.expired_token {
        return reply(
            401,
            &error(
                401,
                "authError",
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
            ),
            None,
        );
    }
    if let Some(at) = state
        .faults
        .iter()
        .position(|f| path.contains(&f.path_contains))
    {
        let fault = state.faults.remove(at).expect("the fault found");
        let (reason, grpc, message) = match fault.status {
            429 => (
                "rateLimitExceeded",
                "RESOURCE_EXHAUSTED",
                "Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute'",
            ),
            503 => (
                "backendError",
                "UNAVAILABLE",
                "The service is currently unavailable.",
            ),
            401 => (
                "authError",
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials.",
            ),
            _ => ("backendError", "INTERNAL", "Internal error."),
        };
        return reply(
            fault.status,
            &error(fault.status, reason, grpc, message),
            fault.retry_after,
        );
    }
    let prefix = format!("/compute/v1/projects/{PROJECT}/");
    let Some(rest) = path.strip_prefix(&prefix) else {
        return reply(
            404,
            &error(
                404,
                "notFound",
                "NOT_FOUND",
                "The requested URL was not found.",
            ),
            None,
        );
    };
    let max_results: usize = params
        .get("maxResults")
        .and_then(|m| m.parse().ok())
        .unwrap_or(500)
        .clamp(1, 500);
    let offset: usize = params
        .get("pageToken")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    if method == "GET" && rest == "aggregated/instanceGroupManagers" {
        let page: Vec<FakeGroup> = state
            .groups
            .iter()
            .skip(offset)
            .take(max_results)
            .cloned()
            .collect();
        let mut items = serde_json::Map::new();
        for group in &page {
            let entry = items
                .entry(group.scope.clone())
                .or_insert_with(|| json!({"instanceGroupManagers": []}));
            entry["instanceGroupManagers"]
                .as_array_mut()
                .expect("an array")
                .push(group.resource());
        }
        items.insert(
            "zones/us-east1-b".to_owned(),
            json!({"warning": {
                "code": "NO_RESULTS_ON_PAGE",
                "message": "There are no results for scope 'zones/us-east1-b' on this page.",
                "data": [{"key": "scope", "value": "zones/us-east1-b"}],
            }}),
        );
        let mut body = json!({
            "kind": "compute#instanceGroupManagerAggregatedList",
            "id": format!("projects/{PROJECT}/aggregated/instanceGroupManagers"),
            "items": items,
            "selfLink": format!("{API}/projects/{PROJECT}/aggregated/instanceGroupManagers"),
        });
        if offset + max_results < state.groups.len() {
            body["nextPageToken"] = json!((offset + max_results).to_string());
        }
        let vanish = std::mem::take(&mut state.vanish);
        state.groups.retain(|g| !vanish.contains(&g.name));
        return reply(200, &body, None);
    }
    // {zones|regions}/{scope}/instanceGroupManagers/{name}/{deleteInstances|listManagedInstances}
    let parts: Vec<&str> = rest.split('/').collect();
    if method == "POST"
        && let [kind, scope, "instanceGroupManagers", name, verb] = parts[..]
        && matches!(verb, "deleteInstances" | "listManagedInstances")
    {
        let scope = format!("{kind}/{scope}");
        let Some(at) = state
            .groups
            .iter()
            .position(|g| g.scope == scope && g.name == name)
        else {
            return group_not_found(&scope, name);
        };
        if verb == "listManagedInstances" {
            let group = &state.groups[at];
            let all: Vec<Value> = group
                .instances
                .iter()
                .enumerate()
                .map(|(i, inst)| group.managed_instance(inst, i))
                .collect();
            if !group.paginated {
                // PAGELESS: maxResults and pageToken are ignored.
                return reply(200, &json!({"managedInstances": all}), None);
            }
            let page: Vec<Value> = all.iter().skip(offset).take(max_results).cloned().collect();
            let mut body = json!({"managedInstances": page});
            if offset + max_results < all.len() {
                body["nextPageToken"] = json!((offset + max_results).to_string());
            }
            return reply(200, &body, None);
        }
        let body: Value = serde_json::from_slice(req.body()).unwrap_or(Value::Null);
        let skip_invalid = body["skipInstancesOnValidationError"].as_bool() == Some(true);
        let wanted: Vec<String> = body["instances"]
            .as_array()
            .map(|urls| {
                urls.iter()
                    .filter_map(|u| u.as_str()?.rsplit('/').next().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let group = &mut state.groups[at];
        if wanted.is_empty() {
            return reply(
                400,
                &error(
                    400,
                    "invalid",
                    "INVALID_ARGUMENT",
                    "Required field 'instances' not specified",
                ),
                None,
            );
        }
        if !skip_invalid
            && let Some(stranger) = wanted
                .iter()
                .find(|w| !group.instances.iter().any(|i| &i.name == *w))
        {
            let message = format!(
                "Instance '{stranger}' does not belong to the instance group manager '{name}'"
            );
            return reply(
                400,
                &error(400, "invalid", "INVALID_ARGUMENT", &message),
                None,
            );
        }
        group.instances.retain(|i| !wanted.contains(&i.name));
        let key = format!(
            "{}/{name}",
            scope.split_once('/').map_or(scope.as_str(), |(_, s)| s)
        );
        state
            .deleted
            .extend(wanted.into_iter().map(|w| (key.clone(), w)));
        let self_link = format!("{API}/projects/{PROJECT}/{scope}/instanceGroupManagers/{name}");
        let operation = json!({
            "kind": "compute#operation",
            "id": "7281390152730947234",
            "name": "operation-1764379800000-62e1c0a7b9f3e-4c1a2b3d-5e6f7a8b",
            "operationType": "compute.instanceGroupManagers.deleteInstances",
            "targetLink": self_link,
            "status": "DONE",
            "progress": 100,
            "insertTime": "2026-11-29T02:00:00.000-08:00",
            "selfLink": format!("{API}/projects/{PROJECT}/{scope}/operations/operation-1764379800000-62e1c0a7b9f3e-4c1a2b3d-5e6f7a8b"),
        });
        return reply(200, &operation, None);
    }
    reply(
        404,
        &error(
            404,
            "notFound",
            "NOT_FOUND",
            "The requested URL was not found.",
        ),
        None,
    )
}
