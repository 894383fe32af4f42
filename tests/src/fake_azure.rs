//! A fake Azure Resource Manager for the Azure provider's tests: plain HTTP on 127.0.0.1 with a
//! free port, on a thread of its own, stopped on drop. It answers the calls rotor-selector makes,
//! in the documented REST shapes (Compute api-version 2024-07-01):
//! - `GET /subscriptions/{s}/providers/Microsoft.Compute/virtualMachineScaleSets`
//!   (`VirtualMachineScaleSets_ListAll`) and
//!   `GET /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets`
//!   (`_List`);
//! - `GET .../virtualMachineScaleSets/{name}/virtualMachines` (`VirtualMachineScaleSetVMs_List`)
//!   with `$filter=properties/latestModelApplied eq false|true` (any other filter is a 400, as
//!   ARM refuses filters it does not know);
//! - `POST .../virtualMachineScaleSets/{name}/delete` (`VirtualMachineScaleSets_DeleteInstances`)
//!   with `{"instanceIds": [...]}`: the VMs leave the scale set (its capacity drops) and the answer
//!   is ARM's 202 with `Location` and `Azure-AsyncOperation`; an instance id the scale set does
//!   not hold is a 400 `InvalidParameter` ([`FakeAzure::deleted`] lists what was deleted);
//!
//! every list paged by `nextLink` (`$skiptoken`) at [`FakeAzure::set_page_size`] items, names
//! compared case-insensitively, a missing `api-version` refused (400), a wrong bearer token
//! refused (401), an unknown resource 404 `ResourceNotFound` / `ResourceGroupNotFound`. Faults:
//! the next N answers 429 or 503 with a `Retry-After` ([`FakeAzure::throttle`]), the next answer
//! a 401 `ExpiredAuthenticationToken` ([`FakeAzure::expire_token_once`]), a scale set that
//! vanishes once the scale-set list has been answered ([`FakeAzure::vanish_after_list`]).
//! Every request is counted by operation ([`FakeAzure::calls`]).
//!
//! What it cannot show: real ARM's throttling buckets, eventual consistency between the list
//! calls, the exact error bodies of every failure, and how Azure sets `latestModelApplied` (the
//! test sets it).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use serde_json::{Value, json};

use crate::loopback_http::LoopbackHttp;

/// The bearer token the fake accepts (give it to the selector as `ROTOR_AZURE_TOKEN`).
pub const TOKEN: &str = "fake-arm-token";

/// One VM of a fake scale set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeVm {
    pub instance_id: String,
    pub latest_model_applied: bool,
    pub provisioning_state: String,
    /// `storageProfile.imageReference.exactVersion`.
    pub exact_version: String,
}

impl FakeVm {
    /// A `Succeeded` VM on the latest model or not.
    pub fn new(instance_id: impl Into<String>, latest_model_applied: bool) -> FakeVm {
        FakeVm {
            instance_id: instance_id.into(),
            latest_model_applied,
            provisioning_state: "Succeeded".into(),
            exact_version: if latest_model_applied {
                "24.04.202410010".into()
            } else {
                "24.04.202409120".into()
            },
        }
    }
}

/// One fake scale set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeScaleSet {
    pub resource_group: String,
    pub name: String,
    /// `Uniform` or `Flexible`.
    pub orchestration_mode: String,
    /// `Manual`, `Automatic` or `Rolling`.
    pub upgrade_mode: String,
    pub tags: BTreeMap<String, String>,
    /// The model's `imageReference.version`: `latest` or a pinned version.
    pub image_version: String,
    pub vms: Vec<FakeVm>,
}

impl FakeScaleSet {
    /// A Uniform scale set with a Manual upgrade policy.
    pub fn uniform(resource_group: &str, name: &str, vms: Vec<FakeVm>) -> FakeScaleSet {
        FakeScaleSet {
            resource_group: resource_group.into(),
            name: name.into(),
            orchestration_mode: "Uniform".into(),
            upgrade_mode: "Manual".into(),
            tags: BTreeMap::new(),
            image_version: "latest".into(),
            vms,
        }
    }

    /// The providerID of its VM `instance_id` in `subscription`.
    pub fn provider_id(&self, subscription: &str, instance_id: &str) -> String {
        format!(
            "azure:///subscriptions/{subscription}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachineScaleSets/{}/virtualMachines/{instance_id}",
            self.resource_group, self.name
        )
    }
}

#[derive(Default)]
struct State {
    scale_sets: Vec<FakeScaleSet>,
    page_size: usize,
    /// (status, Retry-After seconds) of the next answers, first first.
    throttle: Vec<(u16, u64)>,
    expire_once: bool,
    vanish: Vec<String>,
    /// Every list's `nextLink` names the page it is on, so paging would never end.
    paging_stuck: bool,
    calls: BTreeMap<String, u64>,
    faults_served: BTreeMap<String, u64>,
    /// (scale set, instance id) deleted by `VirtualMachineScaleSets_DeleteInstances`.
    deleted: Vec<(String, String)>,
    /// (scale set, `$filter`) of every first page of `VirtualMachineScaleSetVMs_List`.
    vm_lists: Vec<(String, Option<String>)>,
}

/// The fake ARM server; stopped on drop.
pub struct FakeAzure {
    state: Arc<Mutex<State>>,
    pub subscription: String,
    pub url: String,
    _server: LoopbackHttp,
}

impl FakeAzure {
    /// Starts an empty fake for `subscription`, 1,000 items a page (ARM's usual page).
    pub fn start(subscription: &str) -> FakeAzure {
        let state = Arc::new(Mutex::new(State {
            page_size: 1000,
            ..State::default()
        }));
        let (shared, sub) = (state.clone(), subscription.to_owned());
        let server = LoopbackHttp::start("fake-azure", move |url| {
            let base = url.to_owned();
            move |req| handle(&shared, &sub, &base, &req)
        });
        FakeAzure {
            state,
            subscription: subscription.to_owned(),
            url: server.url.clone(),
            _server: server,
        }
    }

    /// The environment that points rotor-selector at this fake.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("ROTOR_AZURE_ENDPOINT", self.url.clone()),
            ("ROTOR_AZURE_TOKEN", TOKEN.to_owned()),
            ("AZURE_SUBSCRIPTION_ID", self.subscription.clone()),
        ]
    }

    pub fn add(&self, set: FakeScaleSet) {
        self.state.lock().unwrap().scale_sets.push(set);
    }

    /// Changes a scale set (found case-insensitively by name).
    pub fn modify(&self, name: &str, change: impl FnOnce(&mut FakeScaleSet)) {
        let mut state = self.state.lock().unwrap();
        let set = state
            .scale_sets
            .iter_mut()
            .find(|s| s.name.eq_ignore_ascii_case(name))
            .unwrap_or_else(|| panic!("no scale set {name}"));
        change(set);
    }

    pub fn set_page_size(&self, size: usize) {
        self.state.lock().unwrap().page_size = size.max(1);
    }

    /// The next `count` answers are `status` (429 or 503) with `Retry-After: retry_after`.
    pub fn throttle(&self, count: usize, status: u16, retry_after: u64) {
        let mut state = self.state.lock().unwrap();
        state
            .throttle
            .extend(std::iter::repeat_n((status, retry_after), count));
    }

    /// No more injected answers.
    pub fn clear_faults(&self) {
        let mut state = self.state.lock().unwrap();
        state.throttle.clear();
        state.expire_once = false;
        state.vanish.clear();
        state.paging_stuck = false;
    }

    /// The next answer is a 401 `ExpiredAuthenticationToken`, whatever the token.
    pub fn expire_token_once(&self) {
        self.state.lock().unwrap().expire_once = true;
    }

    /// From now on every list page's `nextLink` points at the page it is on (past the first,
    /// the same URL again): a server bug a client must not follow forever.
    pub fn stick_paging(&self) {
        self.state.lock().unwrap().paging_stuck = true;
    }

    /// Scale set `name` disappears right after the next scale-set list was answered.
    pub fn vanish_after_list(&self, name: &str) {
        self.state.lock().unwrap().vanish.push(name.to_owned());
    }

    /// (scale set, `$filter`) of every VM list asked for (first pages only).
    pub fn vm_lists(&self) -> Vec<(String, Option<String>)> {
        self.state.lock().unwrap().vm_lists.clone()
    }

    /// (scale set, instance id) of every VM deleted so far.
    pub fn deleted(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().deleted.clone()
    }

    /// Requests answered, by operation (`VirtualMachineScaleSets_ListAll`, ...; faults
    /// included).
    pub fn calls(&self) -> BTreeMap<String, u64> {
        self.state.lock().unwrap().calls.clone()
    }

    /// Fault answers served, by kind (`429`, `503`, `401`).
    pub fn faults_served(&self) -> BTreeMap<String, u64> {
        self.state.lock().unwrap().faults_served.clone()
    }

    /// Every request answered.
    pub fn total_calls(&self) -> u64 {
        self.calls().values().sum()
    }

    pub fn reset_counts(&self) {
        let mut state = self.state.lock().unwrap();
        state.calls.clear();
        state.faults_served.clear();
    }
}

fn answer(status: u16, body: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "application/json; charset=utf-8")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

fn error(status: u16, code: &str, message: &str) -> Response<Full<Bytes>> {
    answer(status, json!({"error": {"code": code, "message": message}}))
}

/// `%XX` and `+` decoded.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn handle(
    state: &Mutex<State>,
    subscription: &str,
    base: &str,
    req: &Request<Bytes>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let query: BTreeMap<String, String> = req
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect();
    // A request target is ASCII (RFC 9112); a name beyond it must come percent-encoded.
    if !path.is_ascii() {
        return error(
            400,
            "InvalidRequestUri",
            &format!("{path:?} is not percent-encoded"),
        );
    }
    // Segments stay encoded until split, and the names in them are decoded as ARM does.
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let eq = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    // (operation, resource group, scale set)
    let route: Option<(&str, Option<String>, Option<String>)> = match parts.as_slice() {
        [s, _, p, ns, v]
            if eq(s, "subscriptions")
                && eq(p, "providers")
                && eq(ns, "Microsoft.Compute")
                && eq(v, "virtualMachineScaleSets") =>
        {
            Some(("VirtualMachineScaleSets_ListAll", None, None))
        }
        [s, _, r, rg, p, ns, v]
            if eq(s, "subscriptions")
                && eq(r, "resourceGroups")
                && eq(p, "providers")
                && eq(ns, "Microsoft.Compute")
                && eq(v, "virtualMachineScaleSets") =>
        {
            Some(("VirtualMachineScaleSets_List", Some(decode(rg)), None))
        }
        [s, _, r, rg, p, ns, v, name, tail]
            if eq(s, "subscriptions")
                && eq(r, "resourceGroups")
                && eq(p, "providers")
                && eq(ns, "Microsoft.Compute")
                && eq(v, "virtualMachineScaleSets") =>
        {
            let operation = match *tail {
                "delete" => Some("VirtualMachineScaleSets_DeleteInstances"),
                vm if eq(vm, "virtualMachines") => Some("VirtualMachineScaleSetVMs_List"),
                _ => None,
            };
            operation.map(|op| (op, Some(decode(rg)), Some(decode(name))))
        }
        _ => None,
    };
    let mut state = state.lock().unwrap();
    let operation = route.as_ref().map_or("unknown", |r| r.0);
    *state.calls.entry(operation.to_owned()).or_default() += 1;
    let wanted_method = if operation == "VirtualMachineScaleSets_DeleteInstances" {
        http::Method::POST
    } else {
        http::Method::GET
    };
    if req.method() != wanted_method {
        return error(
            405,
            "MethodNotAllowed",
            &format!("{operation} is a {wanted_method}"),
        );
    }
    // Faults first: an expired token, then throttling.
    if state.expire_once {
        state.expire_once = false;
        *state.faults_served.entry("401".into()).or_default() += 1;
        return error(
            401,
            "ExpiredAuthenticationToken",
            "The access token expiry UTC time is earlier than current UTC time.",
        );
    }
    let auth = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if auth != format!("Bearer {TOKEN}") {
        return error(
            401,
            "AuthenticationFailed",
            "Authentication failed. The 'Authorization' header is missing or invalid.",
        );
    }
    if !state.throttle.is_empty() {
        let (status, retry_after) = state.throttle.remove(0);
        *state.faults_served.entry(status.to_string()).or_default() += 1;
        let mut response = if status == 429 {
            error(
                429,
                "TooManyRequests",
                "The request is being throttled as the limit has been reached for operation type - Read_30Min.",
            )
        } else {
            error(
                status,
                "ServiceUnavailable",
                "The service is temporarily unavailable.",
            )
        };
        response
            .headers_mut()
            .insert("retry-after", retry_after.to_string().parse().unwrap());
        return response;
    }
    let Some((operation, rg, name)) = route else {
        return error(404, "InvalidResourceType", &format!("no route for {path}"));
    };
    if !eq(parts[1], subscription) {
        return error(
            404,
            "SubscriptionNotFound",
            &format!("The subscription '{}' could not be found.", parts[1]),
        );
    }
    if query.get("api-version").is_none_or(|v| v.is_empty()) {
        return error(
            400,
            "MissingApiVersionParameter",
            "The api-version query parameter (?api-version=) is required for all requests.",
        );
    }
    let skip: usize = query
        .get("$skiptoken")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let page_size = state.page_size;
    let next_skip = if state.paging_stuck {
        skip
    } else {
        skip + page_size
    };
    let next_link = |total: usize, extra: &[(&str, &str)]| -> Option<String> {
        (skip + page_size < total).then(|| {
            let mut q = format!(
                "api-version={}",
                encode(
                    query
                        .get("api-version")
                        .map(String::as_str)
                        .unwrap_or_default()
                )
            );
            for (k, v) in extra {
                q.push_str(&format!("&{}={}", encode(k), encode(v)));
            }
            q.push_str(&format!("&%24skiptoken={next_skip}"));
            format!("{base}{path}?{q}")
        })
    };
    match (operation, name) {
        ("VirtualMachineScaleSets_DeleteInstances", Some(name)) => {
            let rg = rg.unwrap_or_default();
            let ids: Vec<String> = serde_json::from_slice::<Value>(req.body())
                .ok()
                .and_then(|b| {
                    b.get("instanceIds")?
                        .as_array()?
                        .iter()
                        .map(|i| i.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if ids.is_empty() {
                return error(
                    400,
                    "InvalidParameter",
                    "The request body must list instanceIds.",
                );
            }
            let Some(set) = state
                .scale_sets
                .iter_mut()
                .find(|s| eq(&s.resource_group, &rg) && eq(&s.name, &name))
            else {
                return error(
                    404,
                    "ResourceNotFound",
                    &format!(
                        "The Resource 'Microsoft.Compute/virtualMachineScaleSets/{name}' under resource group '{rg}' was not found."
                    ),
                );
            };
            if let Some(unknown) = ids
                .iter()
                .find(|id| !set.vms.iter().any(|vm| &vm.instance_id == *id))
            {
                return error(
                    400,
                    "InvalidParameter",
                    &format!("The instance id {unknown} is not a VM of scale set {name}."),
                );
            }
            set.vms.retain(|vm| !ids.contains(&vm.instance_id));
            let set_name = set.name.clone();
            state
                .deleted
                .extend(ids.into_iter().map(|id| (set_name.clone(), id)));
            let operation_url = format!(
                "{base}/subscriptions/{subscription}/providers/Microsoft.Compute/locations/westeurope/operations/00000000-0000-0000-0000-000000000001?api-version=2024-07-01"
            );
            let mut accepted = answer(202, Value::Null);
            *accepted.body_mut() = Full::new(Bytes::new());
            for header in ["location", "azure-asyncoperation"] {
                accepted
                    .headers_mut()
                    .insert(header, operation_url.parse().unwrap());
            }
            accepted
        }
        ("VirtualMachineScaleSetVMs_List", Some(name)) => {
            let rg = rg.unwrap_or_default();
            let Some(set) = state
                .scale_sets
                .iter()
                .find(|s| eq(&s.resource_group, &rg) && eq(&s.name, &name))
                .cloned()
            else {
                return error(
                    404,
                    "ResourceNotFound",
                    &format!(
                        "The Resource 'Microsoft.Compute/virtualMachineScaleSets/{name}' under resource group '{rg}' was not found."
                    ),
                );
            };
            let filter = query.get("$filter").cloned();
            if skip == 0 {
                state.vm_lists.push((set.name.clone(), filter.clone()));
            }
            let wanted: Option<bool> = match filter.as_deref().map(str::trim) {
                None => None,
                Some("properties/latestModelApplied eq false") => Some(false),
                Some("properties/latestModelApplied eq true") => Some(true),
                Some(other) => {
                    return error(
                        400,
                        "InvalidParameter",
                        &format!("The value '{other}' of parameter '$filter' is not allowed."),
                    );
                }
            };
            let vms: Vec<&FakeVm> = set
                .vms
                .iter()
                .filter(|vm| wanted.is_none_or(|w| vm.latest_model_applied == w))
                .collect();
            let page: Vec<Value> = vms
                .iter()
                .skip(skip)
                .take(page_size)
                .map(|vm| vm_json(subscription, &set, vm))
                .collect();
            let extra: Vec<(&str, &str)> = filter
                .as_deref()
                .map(|f| vec![("$filter", f)])
                .unwrap_or_default();
            let mut body = json!({"value": page});
            if let Some(link) = next_link(vms.len(), &extra) {
                body["nextLink"] = json!(link);
            }
            answer(200, body)
        }
        (_, _) => {
            let sets: Vec<FakeScaleSet> = state
                .scale_sets
                .iter()
                .filter(|s| rg.as_deref().is_none_or(|rg| eq(&s.resource_group, rg)))
                .cloned()
                .collect();
            if let Some(rg) = &rg
                && sets.is_empty()
                && !state.scale_sets.iter().any(|s| eq(&s.resource_group, rg))
            {
                return error(
                    404,
                    "ResourceGroupNotFound",
                    &format!("Resource group '{rg}' could not be found."),
                );
            }
            let page: Vec<Value> = sets
                .iter()
                .skip(skip)
                .take(page_size)
                .map(|s| scale_set_json(subscription, s))
                .collect();
            let link = next_link(sets.len(), &[]);
            let mut body = json!({"value": page});
            match link {
                Some(link) => body["nextLink"] = json!(link),
                None => {
                    // The last page answered: scale sets due to vanish do so now.
                    let vanish = std::mem::take(&mut state.vanish);
                    state
                        .scale_sets
                        .retain(|s| !vanish.iter().any(|v| eq(v, &s.name)));
                }
            }
            answer(200, body)
        }
    }
}

/// A scale set as `VirtualMachineScaleSets_ListAll` shows it (the published example, reduced).
fn scale_set_json(subscription: &str, set: &FakeScaleSet) -> Value {
    json!({
        "name": set.name,
        "id": format!("/subscriptions/{subscription}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachineScaleSets/{}", set.resource_group, set.name),
        "type": "Microsoft.Compute/virtualMachineScaleSets",
        "location": "westeurope",
        "tags": set.tags,
        "sku": {"name": "Standard_D4s_v5", "tier": "Standard", "capacity": set.vms.len()},
        "properties": {
            "singlePlacementGroup": false,
            "orchestrationMode": set.orchestration_mode,
            "upgradePolicy": {"mode": set.upgrade_mode},
            "virtualMachineProfile": {"storageProfile": {"imageReference": {
                "publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": set.image_version
            }}},
            "provisioningState": "Succeeded",
            "uniqueId": format!("00000000-0000-0000-0000-{:012}", set.name.len())
        }
    })
}

/// A VM as `VirtualMachineScaleSetVMs_List` shows it (the published example, reduced).
fn vm_json(subscription: &str, set: &FakeScaleSet, vm: &FakeVm) -> Value {
    json!({
        "name": format!("{}_{}", set.name, vm.instance_id),
        "id": format!("/subscriptions/{subscription}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachineScaleSets/{}/virtualMachines/{}", set.resource_group, set.name, vm.instance_id),
        "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
        "instanceId": vm.instance_id,
        "location": "westeurope",
        "sku": {"name": "Standard_D4s_v5", "tier": "Standard"},
        "properties": {
            "latestModelApplied": vm.latest_model_applied,
            "vmId": format!("vm-{}-{}", set.name, vm.instance_id),
            "hardwareProfile": {"vmSize": "Standard_D4s_v5"},
            "storageProfile": {"imageReference": {
                "publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server",
                "version": set.image_version, "exactVersion": vm.exact_version
            }},
            "osProfile": {"computerName": format!("{}{:06}", set.name, vm.instance_id.parse::<u64>().unwrap_or(0))},
            "provisioningState": vm.provisioning_state
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_and_encoding_round_trip() {
        let filter = "properties/latestModelApplied eq false";
        assert_eq!(decode(&encode(filter)), filter);
        assert_eq!(decode("a+b%2Fc"), "a b/c");
        assert_eq!(decode("100%"), "100%");
    }
}
