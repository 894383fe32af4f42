//! The Kubernetes HTTP API the simulator serves: discovery (`/version`, `/api`, `/apis`, the
//! per-version resource lists `kubectl` reads), and the resource paths
//! `/api/v1/...` and `/apis/<group>/<version>/...` mapped onto the typed collections. Every
//! request is counted by verb and resource and may be delayed or failed by injected faults.

pub mod collection;
mod response;
pub mod scale;
pub mod table;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::cluster::Cluster;
use crate::cluster::pods::Removal;
use crate::meta::{ApiError, DeleteOptions};
use crate::request_info::{Route, Target, query_map, route, verb_of};
use crate::state::Sim;
use collection::{
    ApiCollection, Filter, ListQuery, PatchType, WatchContext, WatchQuery, WriteContext,
};

fn json_response(code: StatusCode, body: Vec<u8>) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn field_manager(q: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

/// Counts an eviction as answered when its request's handling ends, however it ends.
struct EvictionAnswered<'a>(&'a Sim);

impl Drop for EvictionAnswered<'_> {
    fn drop(&mut self) {
        if let Ok(mut c) = self.0.cluster.lock() {
            c.stats.eviction_answered();
        }
    }
}

pub async fn dispatch(
    State(sim): State<Arc<Sim>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let target = match route(uri.path()) {
        Route::Resource(t) => t,
        Route::ResourceList { group, version } => return resource_list(&group, &version),
        Route::Group(g) => return api_group(&g),
        Route::NotFound => {
            return ApiError {
                code: 404,
                reason: "NotFound",
                message: "the server could not find the requested resource".into(),
                details: None,
                retry_after: None,
            }
            .into_response();
        }
    };
    let q = query_map(&uri);
    let verb = verb_of(&method, &target, &q);
    let resource = match &target.subresource {
        Some(s) => format!("{}/{s}", target.plural),
        None => target.plural.clone(),
    };
    // Count, then apply the scenario's and the injected latency, and injected errors.
    let eviction = verb == "create" && resource == "pods/eviction";
    let _answering = eviction.then(|| EvictionAnswered(&sim));
    let (latency, injected) = {
        let mut c = sim.cluster.lock().expect("cluster lock");
        c.stats.count_request(verb, &resource);
        // A read of the pods: a list, or a watch that begins with them (a watch from a list's
        // version goes on from that read).
        let reads = verb == "list"
            || (verb == "watch" && q.get("sendInitialEvents").is_some_and(|v| v == "true"));
        if resource == "pods"
            && reads
            && let Some(fields) = q.get("fieldSelector")
        {
            c.stats.count_pod_read(fields);
        }
        if eviction {
            c.stats.eviction_arrived();
        }
        // A watch's events are not delayed: its latency is its stream's, not an answer's.
        let answer = match (verb, resource.as_str()) {
            ("watch", _) => Duration::ZERO,
            ("create", "pods/eviction") => {
                c.timing.eviction_latency.unwrap_or(c.timing.api_latency)
            }
            _ => c.timing.api_latency,
        };
        drop(c);
        let mut f = sim.faults.lock().expect("faults lock");
        (
            answer + f.latency + f.delay(verb, &resource),
            f.injected(verb, &resource),
        )
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match injected {
        Some(i) if !i.after_serving => i.error.into_response(),
        Some(i) => {
            // Served, its answer lost: the client sees only the error.
            let _ = handle(&sim, &method, &target, verb, &q, &headers, &body).await;
            i.error.into_response()
        }
        None => match handle(&sim, &method, &target, verb, &q, &headers, &body).await {
            Ok(r) => r,
            Err(e) => e.into_response(),
        },
    }
}

/// The collection serving `group/version/plural`, if the simulator serves it.
fn collection_serving<'a>(
    cluster: &'a mut Cluster,
    group: &str,
    version: &str,
    plural: &str,
) -> Option<&'a mut dyn ApiCollection> {
    Some(match (group, version, plural) {
        ("", "v1", "namespaces") => &mut cluster.namespaces,
        ("", "v1", "nodes") => &mut cluster.nodes,
        ("", "v1", "pods") => &mut cluster.pods,
        ("", "v1", "events") => &mut cluster.events,
        ("events.k8s.io", "v1", "events") => &mut cluster.events_v1,
        ("policy", "v1", "poddisruptionbudgets") => &mut cluster.pdbs,
        ("apps", "v1", "deployments") => &mut cluster.deployments,
        ("apps", "v1", "replicasets") => &mut cluster.replicasets,
        ("apps", "v1", "statefulsets") => &mut cluster.statefulsets,
        ("apps", "v1", "daemonsets") => &mut cluster.daemonsets,
        ("coordination.k8s.io", "v1", "leases") => &mut cluster.leases,
        ("scheduling.k8s.io", "v1", "priorityclasses") => &mut cluster.priority_classes,
        ("rotor.dev", "v1alpha1", "rotationpolicies") => &mut cluster.rotation_policies,
        ("rotor.dev", "v1alpha1", "drainrules") => &mut cluster.drain_rules,
        _ => return None,
    })
}

fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the request body is not valid JSON (the simulator accepts JSON only): {e}"
        ))
    })
}

/// One request to a resource path, as [`dispatch`] read it.
struct Call<'a> {
    method: &'a Method,
    target: &'a Target,
    verb: &'a str,
    query: &'a HashMap<String, String>,
    headers: &'a HeaderMap,
    body: &'a Bytes,
}

impl Call<'_> {
    fn namespace(&self) -> String {
        self.target.namespace.clone().unwrap_or_default()
    }

    fn name(&self) -> String {
        self.target.name.clone().unwrap_or_default()
    }

    fn subresource(&self) -> Option<&str> {
        self.target.subresource.as_deref()
    }

    fn header(&self, name: header::HeaderName) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn filter(&self) -> Result<Filter, ApiError> {
        Filter::parse(
            self.target.namespace.clone(),
            self.query.get("labelSelector").map(String::as_str),
            self.query.get("fieldSelector").map(String::as_str),
        )
    }
}

async fn handle(
    sim: &Arc<Sim>,
    method: &Method,
    t: &Target,
    verb: &str,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let call = Call {
        method,
        target: t,
        verb,
        query: q,
        headers,
        body,
    };
    refuse_dry_run(&call)?;
    let now = jiff::Timestamp::now();
    let manager = field_manager(q, headers);
    let (ns, name, sub) = (call.namespace(), call.name(), call.subresource());
    let mut guard = sim.cluster.lock().expect("cluster lock");
    let cluster = &mut *guard;
    let kind = check_target(cluster, &call)?;
    let ctx = WriteContext {
        now,
        manager: &manager,
    };
    if let Some(response) = serve_pod_verb(cluster, &call, now)? {
        return Ok(response);
    }
    if t.group.is_empty() && t.plural == "namespaces" && method == Method::DELETE {
        return Err(ApiError::method_not_allowed(
            "deleting namespaces is not simulated",
        ));
    }
    let current_rv = cluster.rev.current();
    let coll = collection_serving(cluster, &t.group, &t.version, &t.plural)
        .ok_or_else(|| ApiError::not_found(&t.group, &t.plural, &name))?;
    if sub == Some("scale") {
        let out = serve_scale(coll, verb, &ns, &name, headers, body, &ctx)?;
        return Ok(json_response(
            StatusCode::OK,
            serde_json::to_vec(&out).unwrap_or_default(),
        ));
    }
    let body_out = match (verb, sub) {
        ("list", None) => {
            let query = ListQuery {
                filter: call.filter()?,
                limit: q.get("limit").and_then(|l| l.parse().ok()),
                continue_token: q.get("continue").cloned(),
            };
            coll.list(&query, current_rv)?
        }
        ("watch", None) => {
            let rx = open_watch(sim, coll, &call)?;
            drop(guard);
            return Ok(watch_response(rx));
        }
        ("get", _) => coll.get_json(&ns, &name)?,
        ("create", None) => {
            let out = coll.create_json(&ns, parse_body(body)?, &ctx)?;
            return Ok(json_response(StatusCode::CREATED, out));
        }
        ("update", _) => coll.update_json(&ns, &name, parse_body(body)?, sub, &ctx)?,
        ("patch", _) => {
            let pt = PatchType::from_content_type(call.header(header::CONTENT_TYPE))?;
            coll.patch_json(&ns, &name, pt, &parse_body(body)?, sub, &ctx)?
        }
        ("delete", None) => {
            let opts = DeleteOptions::from_value(&parse_body(body)?);
            coll.delete_json(&ns, &name, &opts)?
        }
        // Every object the selectors match, each deleted as a single DELETE would, answered
        // with the list of what was deleted. Dependents are left alone (no garbage collector
        // here), which is what an orphaning delete asks for.
        ("deletecollection", None) => {
            let opts = DeleteOptions::from_value(&parse_body(body)?);
            let query = ListQuery {
                filter: call.filter()?,
                limit: None,
                continue_token: None,
            };
            let listed = coll.list(&query, current_rv)?;
            delete_each(&listed, |item_ns, item_name, out| {
                out.extend_from_slice(&coll.delete_json(item_ns, item_name, &opts)?);
                Ok(())
            })?
        }
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "{verb} is not supported on {}",
                t.plural
            )));
        }
    };
    drop(guard);
    if matches!(verb, "list" | "get") && table::wants_table(call.header(header::ACCEPT)) {
        let doc: Value =
            serde_json::from_slice(&body_out).map_err(|e| ApiError::internal(e.to_string()))?;
        let t = table::to_table(kind, &doc, now);
        return Ok(json_response(
            StatusCode::OK,
            serde_json::to_vec(&t).unwrap_or_default(),
        ));
    }
    Ok(json_response(StatusCode::OK, body_out))
}

/// A dry run must change nothing; the simulator does not implement one, so it refuses rather
/// than act for real (in the query for writes, in DeleteOptions for deletes and evictions).
fn refuse_dry_run(call: &Call) -> Result<(), ApiError> {
    let body_dry_run = matches!(*call.method, Method::DELETE | Method::POST)
        && serde_json::from_slice::<Value>(call.body).is_ok_and(|v| {
            DeleteOptions::dry_run(&v) || DeleteOptions::dry_run(&v["deleteOptions"])
        });
    if call.query.get("dryRun").is_some_and(|v| !v.is_empty()) || body_dry_run {
        return Err(ApiError::bad_request(
            "dryRun is not supported by the simulator; nothing was changed",
        ));
    }
    Ok(())
}

/// Checks that the simulator serves the resource and subresource addressed, and that a
/// namespaced create has its namespace; returns the resource's kind.
fn check_target(cluster: &Cluster, call: &Call) -> Result<&'static str, ApiError> {
    let t = call.target;
    let (namespaced, kind, has_status) = crate::kinds::all()
        .iter()
        .find(|r| r.group == t.group && r.version == t.version && r.plural == t.plural)
        .map(|r| (r.namespaced, r.kind, r.has_status))
        .ok_or_else(|| ApiError {
            code: 404,
            reason: "NotFound",
            message: format!(
                "the server could not find the requested resource ({} {})",
                call.verb, t.plural
            ),
            details: None,
            retry_after: None,
        })?;
    if !namespaced && t.namespace.is_some() {
        return Err(ApiError::bad_request(format!(
            "{} is not a namespaced resource",
            t.plural
        )));
    }
    let sub = call.subresource();
    if let Some(s) = sub
        && !(s == "status" && has_status)
        && !(t.plural == "pods" && s == "eviction")
        && !(s == "scale" && scale::serves_scale(&t.group, &t.plural))
    {
        return Err(ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("the simulator does not serve {}/{s}", t.plural),
            details: None,
            retry_after: None,
        });
    }
    // An Eviction is only ever created: the subresource serves no read or write of the pod.
    if sub == Some("eviction") && call.verb != "create" {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({} pods/eviction)",
            call.verb
        )));
    }
    let ns = call.namespace();
    if namespaced
        && call.verb == "create"
        && cluster.namespaces.get("", &ns).is_none()
        && !(t.plural == "pods" && sub == Some("eviction"))
    {
        return Err(ApiError::not_found("", "namespaces", &ns));
    }
    Ok(kind)
}

/// The pod verbs with semantics of their own: an eviction (through the disruption budgets)
/// and a delete (with a grace period). `None` for any other request.
fn serve_pod_verb(
    cluster: &mut Cluster,
    call: &Call,
    now: jiff::Timestamp,
) -> Result<Option<Response>, ApiError> {
    let t = call.target;
    if !(t.group.is_empty() && t.plural == "pods") {
        return Ok(None);
    }
    let (ns, name) = (call.namespace(), call.name());
    match (call.method.as_str(), call.subresource()) {
        ("POST", None) => {
            let mut v = parse_body(call.body)?;
            cluster.admit_priority(&mut v)?;
            let ctx = WriteContext {
                now,
                manager: &field_manager(call.query, call.headers),
            };
            let out = ApiCollection::create_json(&mut cluster.pods, &ns, v, &ctx)?;
            Ok(Some(json_response(StatusCode::CREATED, out)))
        }
        ("POST", Some("eviction")) => {
            let v = parse_body(call.body)?;
            if v.get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k != "Eviction")
            {
                return Err(ApiError::bad_request(
                    "the eviction body must be a policy/v1 Eviction",
                ));
            }
            let out = cluster.evict_pod(&ns, &name, &v, now)?;
            Ok(Some(json_response(
                StatusCode::CREATED,
                serde_json::to_vec(&out).unwrap_or_default(),
            )))
        }
        ("DELETE", None) if t.name.is_some() => {
            let mut opts = DeleteOptions::from_value(&parse_body(call.body)?);
            if let Some(g) = call
                .query
                .get("gracePeriodSeconds")
                .and_then(|g| g.parse().ok())
            {
                opts.grace_period_seconds = Some(g);
            }
            let pod = cluster.delete_pod(&ns, &name, &opts, Removal::ApiDelete, now)?;
            Ok(Some(json_response(
                StatusCode::OK,
                crate::managed_fields::to_vec(pod.as_ref()),
            )))
        }
        // deletecollection: every pod the selectors match, each deleted as a single DELETE would
        // (its grace period), answered with the list of what was deleted.
        ("DELETE", None) => {
            let opts = DeleteOptions::from_value(&parse_body(call.body)?);
            let query = ListQuery {
                filter: call.filter()?,
                limit: None,
                continue_token: None,
            };
            let listed = ApiCollection::list(&cluster.pods, &query, cluster.rev.current())?;
            let out = delete_each(&listed, |pod_ns, pod_name, out| {
                let gone = cluster.delete_pod(pod_ns, pod_name, &opts, Removal::ApiDelete, now)?;
                // Written as a list is (`managed_fields::write_json`): the store keeps
                // managedFields apart from the objects.
                crate::managed_fields::write_json(out, gone.as_ref())
                    .map_err(|e| ApiError::internal(e.to_string()))
            })?;
            Ok(Some(json_response(StatusCode::OK, out)))
        }
        _ => Ok(None),
    }
}

/// A deletecollection's work and answer: `delete` deletes each object of the `listed` list (as
/// a single DELETE of it would) and writes what it deleted; the answer is the list of those.
fn delete_each(
    listed: &[u8],
    mut delete: impl FnMut(&str, &str, &mut Vec<u8>) -> Result<(), ApiError>,
) -> Result<Vec<u8>, ApiError> {
    let listed: Value =
        serde_json::from_slice(listed).map_err(|e| ApiError::internal(e.to_string()))?;
    let head = json!({"kind": listed["kind"], "apiVersion": listed["apiVersion"]});
    let mut out = serde_json::to_vec(&head).map_err(|e| ApiError::internal(e.to_string()))?;
    out.pop(); // the closing brace: the metadata and items follow
    out.extend_from_slice(br#","metadata":{},"items":["#);
    for (i, item) in listed["items"].as_array().into_iter().flatten().enumerate() {
        let meta = &item["metadata"];
        if i > 0 {
            out.push(b',');
        }
        delete(
            meta["namespace"].as_str().unwrap_or_default(),
            meta["name"].as_str().unwrap_or_default(),
            &mut out,
        )?;
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// Opens a watch on `coll` from the request's resourceVersion. A version too old is answered
/// as the real server does: a 200 whose only event is an ERROR with the 410 Status.
fn open_watch(
    sim: &Sim,
    coll: &mut dyn ApiCollection,
    call: &Call,
) -> Result<tokio::sync::mpsc::Receiver<Bytes>, ApiError> {
    let q = call.query;
    // sendInitialEvents as kube-apiserver (1.34 on) validates it; the initial state is then the
    // current one, which is as fresh as any resourceVersion asked for.
    let send_initial = q.get("sendInitialEvents").map(String::as_str);
    let rv_match = q
        .get("resourceVersionMatch")
        .map(String::as_str)
        .filter(|m| !m.is_empty());
    let initial_events = send_initial == Some("true");
    if send_initial.is_some() && rv_match != Some("NotOlderThan") {
        return Err(ApiError::invalid(
            "ListOptions.meta.k8s.io",
            "",
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    let rv = q
        .get("resourceVersion")
        .filter(|v| !initial_events && !v.is_empty() && v.as_str() != "0")
        .map(|v| {
            v.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {v:?}")))
        })
        .transpose()?;
    if send_initial.is_none() && rv_match.is_some() {
        return Err(ApiError::invalid(
            "ListOptions.meta.k8s.io",
            "",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|v| v == "true");
    let query = WatchQuery {
        filter: call.filter()?,
        resource_version: rv,
        bookmarks,
        // The watch cache marks the end of the initial events only for a client that asked for
        // bookmarks: one that did not is never told its state is whole.
        initial_events_end: initial_events && bookmarks,
        timeout: Duration::from_secs(
            q.get("timeoutSeconds")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1800),
        ),
    };
    let context = WatchContext {
        bookmark_interval: sim.bookmark_interval,
        // Subscribed at the open: a drop from now on cuts this stream, even one that comes
        // while its first events are still being sent.
        drop_signal: sim.drop_tx.subscribe(),
        as_table: table::wants_table(call.header(header::ACCEPT)),
    };
    match coll.watch(query, context) {
        Ok(rx) => Ok(rx),
        Err(e) if e.code == 410 => {
            let line = collection::watch_error_line(&e);
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            let _ = tx.try_send(line);
            Ok(rx)
        }
        Err(e) => Err(e),
    }
}

/// A watch's events as a streamed response, one JSON line each.
fn watch_response(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Response {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .expect("static response parts")
}

/// GET, PUT and PATCH of `<workload>/scale`: read or write `spec.replicas` through a Scale.
fn serve_scale(
    coll: &mut dyn ApiCollection,
    verb: &str,
    ns: &str,
    name: &str,
    headers: &HeaderMap,
    body: &Bytes,
    ctx: &WriteContext,
) -> Result<Value, ApiError> {
    let parse = |b: Vec<u8>| -> Result<Value, ApiError> {
        serde_json::from_slice(&b).map_err(|e| ApiError::internal(e.to_string()))
    };
    let current = scale::scale_of(&parse(coll.get_json(ns, name)?)?);
    let wanted = match verb {
        "get" => return Ok(current),
        "update" => parse_body(body)?,
        "patch" => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let mut doc = current.clone();
            let patch_doc = parse_body(body)?;
            match PatchType::from_content_type(ct)? {
                PatchType::Json => {
                    rotor_apimachinery::patch::apply_json_patch(&mut doc, &patch_doc)
                }
                _ => rotor_apimachinery::patch::apply_merge_patch(&mut doc, &patch_doc),
            }
            .map_err(|e| ApiError::unprocessable(e.to_string()))?;
            doc
        }
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "{verb} is not supported on scale"
            )));
        }
    };
    let rv = wanted["metadata"]["resourceVersion"]
        .as_str()
        .filter(|r| !r.is_empty());
    if rv.is_some_and(|rv| Some(rv) != current["metadata"]["resourceVersion"].as_str()) {
        return Err(ApiError::conflict("apps", "scale", name));
    }
    let replicas = scale::requested_replicas(&wanted)?;
    let out = coll.patch_json(
        ns,
        name,
        PatchType::Merge,
        &json!({"spec": {"replicas": replicas}}),
        None,
        ctx,
    )?;
    Ok(scale::scale_of(&parse(out)?))
}

fn resource_list(group: &str, version: &str) -> Response {
    let mut resources = Vec::new();
    let all = crate::kinds::all();
    let served: Vec<_> = all
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if served.is_empty() {
        return ApiError { code: 404, reason: "NotFound", message: format!("the server could not find the requested resource (group {group:?} version {version:?})"), details: None, retry_after: None }
            .into_response();
    }
    for r in served {
        resources.push(json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            "shortNames": r.short_names,
        }));
        if r.has_status {
            resources.push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}));
        }
        if scale::serves_scale(group, r.plural) {
            resources.push(json!({"name": format!("{}/scale", r.plural), "singularName": "", "namespaced": true, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
        }
        if r.plural == "pods" && group.is_empty() {
            resources.push(json!({"name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let body = json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources});
    json_response(
        StatusCode::OK,
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

fn groups() -> Vec<(&'static str, &'static str)> {
    let mut g: Vec<(&'static str, &'static str)> = crate::kinds::all()
        .iter()
        .filter(|r| !r.group.is_empty())
        .map(|r| (r.group, r.version))
        .collect();
    g.dedup();
    g.sort();
    g.dedup();
    g
}

fn group_json(group: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
}

fn api_group(group: &str) -> Response {
    match groups().into_iter().find(|(g, _)| *g == group) {
        Some((g, v)) => {
            let mut body = group_json(g, v);
            body["kind"] = json!("APIGroup");
            body["apiVersion"] = json!("v1");
            json_response(
                StatusCode::OK,
                serde_json::to_vec(&body).unwrap_or_default(),
            )
        }
        None => ApiError::not_found("", "groups", group).into_response(),
    }
}

pub async fn api_versions() -> Response {
    let body = json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:0"}]});
    json_response(
        StatusCode::OK,
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

pub async fn api_group_list() -> Response {
    let list: Vec<Value> = groups()
        .into_iter()
        .map(|(g, v)| group_json(g, v))
        .collect();
    let body = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list});
    json_response(
        StatusCode::OK,
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

pub async fn version(State(sim): State<Arc<Sim>>) -> Response {
    let v = sim
        .cluster
        .lock()
        .expect("cluster lock")
        .control_plane_version
        .clone();
    let minor = crate::scenario::version_minor(&v).unwrap_or(0);
    let body = json!({
        "major": "1",
        "minor": minor.to_string(),
        "gitVersion": v,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    });
    json_response(
        StatusCode::OK,
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse_like_the_apiserver() {
        let r = route("/api/v1/namespaces/shop/pods/web-1/eviction");
        let Route::Resource(t) = r else { panic!() };
        assert_eq!(
            (
                t.namespace.as_deref(),
                t.plural.as_str(),
                t.name.as_deref(),
                t.subresource.as_deref()
            ),
            (Some("shop"), "pods", Some("web-1"), Some("eviction"))
        );
        let Route::Resource(t) = route("/api/v1/namespaces/shop") else {
            panic!()
        };
        assert_eq!(
            (t.namespace, t.plural.as_str(), t.name.as_deref()),
            (None, "namespaces", Some("shop"))
        );
        let Route::Resource(t) = route("/apis/policy/v1/poddisruptionbudgets") else {
            panic!()
        };
        assert_eq!((t.group.as_str(), t.namespace), ("policy", None));
        let Route::Resource(t) = route("/api/v1/nodes/n1/status") else {
            panic!()
        };
        assert_eq!(
            (t.plural.as_str(), t.subresource.as_deref()),
            ("nodes", Some("status"))
        );
        assert_eq!(
            route("/api/v1"),
            Route::ResourceList {
                group: String::new(),
                version: "v1".into()
            }
        );
        assert_eq!(route("/apis/apps"), Route::Group("apps".into()));
        assert_eq!(route("/healthz"), Route::NotFound);
    }

    #[test]
    fn query_strings_decode() {
        let uri: Uri =
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&labelSelector=app+in+(a%2Cb)&watch=1"
                .parse()
                .unwrap();
        let q = query_map(&uri);
        assert_eq!(q["fieldSelector"], "spec.nodeName=n1");
        assert_eq!(q["labelSelector"], "app in (a,b)");
        assert_eq!(q["watch"], "1");
    }
}
