//! Generic API verbs over one typed collection: list (selectors, paging), get, create, update,
//! patch (merge, strategic merge, JSON patch), delete (preconditions) and watch (resume by
//! resourceVersion, bookmarks, timeouts, 410 once compacted). Kind-specific behaviour, such as
//! graceful pod deletion or eviction, lives in `cluster` and calls into these.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};
use rotor_apimachinery::fields::FieldSelector;
use rotor_apimachinery::labels::LabelSelector;
use rotor_apimachinery::patch;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use crate::kinds::SimKind;
use crate::meta::{ApiError, DeleteOptions, generate_name};
use crate::store::{Change, ChangeType, Collection, ObjKey};

/// Which objects a list or watch selects.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn parse(
        namespace: Option<String>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Self, ApiError> {
        let labels = LabelSelector::parse(label_selector.unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = FieldSelector::parse(field_selector.unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(Filter {
            namespace,
            labels,
            fields,
        })
    }

    /// Rejects field selectors the real apiserver would reject for this kind.
    pub fn check_fields<K: SimKind>(&self) -> Result<(), ApiError> {
        for r in self.fields.requirements() {
            if !K::supports_field(&r.field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {}",
                    r.field
                )));
            }
        }
        Ok(())
    }

    pub fn matches<K: SimKind>(&self, obj: &K) -> bool {
        let m = obj.metadata();
        if let Some(ns) = &self.namespace
            && m.namespace.as_deref().unwrap_or("") != ns
        {
            return false;
        }
        let empty = BTreeMap::new();
        self.labels.matches(m.labels.as_ref().unwrap_or(&empty))
            && self.fields.matches(|f| obj.field(f))
    }
}

pub struct ListQuery {
    pub filter: Filter,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

pub struct WatchQuery {
    pub filter: Filter,
    /// `None` for an unset or "0" resourceVersion: start with the current state as ADDED events.
    pub resource_version: Option<u64>,
    pub bookmarks: bool,
    /// `sendInitialEvents=true` with `allowWatchBookmarks=true` (the WatchList feature): the
    /// ADDED events of the current state end with a BOOKMARK annotated
    /// `k8s.io/initial-events-end`, so the client knows the state is whole.
    pub initial_events_end: bool,
    pub timeout: Duration,
}

/// What a watch stream needs from the server beyond its collection.
#[derive(Clone)]
pub struct WatchContext {
    pub bookmark_interval: Duration,
    /// Bumped by the fault injector to cut every open watch stream.
    pub drop_signal: watch::Receiver<u64>,
    /// `kubectl get -w` asks for Tables; each event's object is then a one-row Table.
    pub as_table: bool,
}

/// Who writes and when, for managedFields and timestamps.
pub struct WriteContext<'a> {
    pub now: Timestamp,
    pub manager: &'a str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    StrategicMerge,
    Json,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Result<Self, ApiError> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::StrategicMerge),
            "application/json-patch+json" => Ok(PatchType::Json),
            _ => Err(ApiError::unsupported_media_type(ct)),
        }
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    ns: String,
    name: String,
}

fn encode_continue(rv: u64, key: &ObjKey) -> String {
    let t = ContinueToken {
        rv,
        ns: key.0.clone(),
        name: key.1.clone(),
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&t).unwrap_or_default())
}

fn decode_continue(s: &str) -> Result<ContinueToken, ApiError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| ApiError::bad_request(format!("continue key is not valid: {s:?}")))
}

fn to_json<K: serde::Serialize>(obj: &K) -> Vec<u8> {
    crate::managed_fields::to_vec(obj)
}

/// The API verbs every collection answers, object-safe so the router can pick a collection by
/// resource name at run time.
pub trait ApiCollection: Send {
    fn list(&self, q: &ListQuery, current_rv: u64) -> Result<Vec<u8>, ApiError>;
    fn get_json(&self, ns: &str, name: &str) -> Result<Vec<u8>, ApiError>;
    fn create_json(
        &mut self,
        ns: &str,
        body: Value,
        ctx: &WriteContext,
    ) -> Result<Vec<u8>, ApiError>;
    fn update_json(
        &mut self,
        ns: &str,
        name: &str,
        body: Value,
        subresource: Option<&str>,
        ctx: &WriteContext,
    ) -> Result<Vec<u8>, ApiError>;
    fn patch_json(
        &mut self,
        ns: &str,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        subresource: Option<&str>,
        ctx: &WriteContext,
    ) -> Result<Vec<u8>, ApiError>;
    fn delete_json(
        &mut self,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Vec<u8>, ApiError>;
    fn watch(&self, q: WatchQuery, ctx: WatchContext) -> Result<mpsc::Receiver<Bytes>, ApiError>;
}

impl<K: SimKind> ApiCollection for Collection<K> {
    fn list(&self, q: &ListQuery, current_rv: u64) -> Result<Vec<u8>, ApiError> {
        q.filter.check_fields::<K>()?;
        let (list_rv, after) = match &q.continue_token {
            Some(t) if !t.is_empty() => {
                let t = decode_continue(t)?;
                (t.rv, Some((t.ns, t.name)))
            }
            _ => (current_rv, None),
        };
        let ns = q.filter.namespace.as_deref().filter(|_| K::NAMESPACED);
        let limit = q.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(64 * 1024);
        out.extend_from_slice(b"{\"kind\":\"");
        out.extend_from_slice(K::KIND.as_bytes());
        out.extend_from_slice(b"List\",\"apiVersion\":\"");
        out.extend_from_slice(K::API_VERSION.as_bytes());
        out.extend_from_slice(b"\",\"items\":[");
        let mut n = 0usize;
        let mut last_key: Option<&ObjKey> = None;
        let mut more = false;
        for (key, obj) in self.select(&q.filter, ns, after.as_ref()) {
            if !q.filter.matches(obj.as_ref()) {
                continue;
            }
            if n == limit {
                more = true;
                break;
            }
            if n > 0 {
                out.push(b',');
            }
            crate::managed_fields::write_json(&mut out, obj.as_ref())
                .map_err(|e| ApiError::internal(e.to_string()))?;
            n += 1;
            last_key = Some(key);
        }
        out.extend_from_slice(b"],\"metadata\":");
        let mut meta = json!({"resourceVersion": list_rv.to_string()});
        if more && let Some(k) = last_key {
            meta["continue"] = json!(encode_continue(list_rv, k));
        }
        serde_json::to_writer(&mut out, &meta).map_err(|e| ApiError::internal(e.to_string()))?;
        out.push(b'}');
        Ok(out)
    }

    fn get_json(&self, ns: &str, name: &str) -> Result<Vec<u8>, ApiError> {
        let ns = if K::NAMESPACED { ns } else { "" };
        self.get(ns, name)
            .map(|o| to_json(o.as_ref()))
            .ok_or_else(|| ApiError::not_found(K::GROUP, K::URL_PATH_SEGMENT, name))
    }

    fn create_json(
        &mut self,
        ns: &str,
        body: Value,
        ctx: &WriteContext,
    ) -> Result<Vec<u8>, ApiError> {
        let obj = create_typed::<K>(self, ns, body, ctx)?;
        Ok(to_json(obj.as_ref()))
    }

    fn update_json(
        &mut self,
        ns: &str,
        name: &str,
        body: Value,
        subresource: Option<&str>,
        ctx: &WriteContext,
    ) -> Result<Vec<u8>, ApiError> {
        let obj = update_typed::<K>(self, ns, name, body, subresource, ctx)?;
        Ok(to_json(obj.as_ref()))
    }

    fn patch_json(
        &mut self,
        ns: &str,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        subresource: Option<&str>,
        ctx: &WriteContext,
    ) -> Result<Vec<u8>, ApiError> {
        let obj = patch_typed::<K>(self, ns, name, patch_type, patch, subresource, ctx)?;
        Ok(to_json(obj.as_ref()))
    }

    fn delete_json(
        &mut self,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Vec<u8>, ApiError> {
        let ns = if K::NAMESPACED { ns } else { "" };
        let current = self
            .get(ns, name)
            .ok_or_else(|| ApiError::not_found(K::GROUP, K::URL_PATH_SEGMENT, name))?;
        opts.check(current.metadata(), K::GROUP, K::URL_PATH_SEGMENT)?;
        let gone = self.remove(ns, name).expect("object present under lock");
        Ok(to_json(gone.as_ref()))
    }

    fn watch(&self, q: WatchQuery, ctx: WatchContext) -> Result<mpsc::Receiver<Bytes>, ApiError> {
        q.filter.check_fields::<K>()?;
        let filter = &q.filter;
        let ns = filter.namespace.as_deref().filter(|_| K::NAMESPACED);
        let (initial, rv) = match q.resource_version {
            Some(rv) => (Vec::new(), rv),
            None => {
                let items: Vec<Arc<K>> = self
                    .select(filter, ns, None)
                    .filter(|(_, o)| filter.matches(o.as_ref()))
                    .map(|(_, o)| o.clone())
                    .collect();
                (items, self.current_rv())
            }
        };
        let (backlog, live) = self
            .subscribe(rv)
            .map_err(|e| ApiError::expired(e.requested, e.oldest))?;
        let start = WatchStart {
            initial,
            backlog,
            live,
            rv,
        };
        let (tx, out) = mpsc::channel(256);
        tokio::spawn(stream_watch::<K>(q, start, ctx, tx));
        Ok(out)
    }
}

impl<K: SimKind> Collection<K> {
    fn current_rv(&self) -> u64 {
        self.revision().current()
    }

    /// The objects a list or watch must look at, in key order, after `after`: those an index
    /// holds under a field selector's `field=value` when the collection keeps one for that field
    /// (`spec.nodeName=N` for pods), otherwise the namespace's or all. A superset of the
    /// selection: the caller still applies the whole filter.
    fn select<'a>(
        &'a self,
        filter: &Filter,
        ns: Option<&str>,
        after: Option<&ObjKey>,
    ) -> Box<dyn Iterator<Item = (&'a ObjKey, &'a Arc<K>)> + 'a> {
        let indexed = filter.fields.requirements().iter().find_map(|r| {
            let value = filter.fields.required_value(&r.field)?;
            let id = self.index_for_field(&r.field)?;
            // An empty value selects the objects the index leaves out.
            (!value.is_empty()).then_some((id, value))
        });
        match indexed {
            Some((id, value)) => {
                let after = after.cloned();
                let ns = ns.map(str::to_string);
                Box::new(self.indexed(id, value).filter(move |(k, _)| {
                    after.as_ref().is_none_or(|a| *k > a)
                        && ns.as_deref().is_none_or(|ns| k.0 == ns)
                }))
            }
            None => self.range(ns, after),
        }
    }
}

fn object_line<K: SimKind>(kind: &str, obj: &K, as_table: bool) -> Bytes {
    if as_table {
        let v = crate::managed_fields::to_value(obj).unwrap_or_default();
        let table = super::table::to_table(K::KIND, &v, jiff::Timestamp::now());
        return watch_line(kind, &table);
    }
    watch_line(kind, obj)
}

fn watch_line(kind: &str, object: &impl serde::Serialize) -> Bytes {
    let mut buf = Vec::with_capacity(2048);
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(kind.as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    let _ = crate::managed_fields::write_json(&mut buf, object);
    buf.extend_from_slice(b"}\n");
    Bytes::from(buf)
}

/// What a filtered watcher sees of one change: objects entering the selection are ADDED,
/// objects leaving it are DELETED, as the apiserver's watch cache reports them.
fn visible_change<K: SimKind>(filter: &Filter, c: &Change<K>) -> Option<ChangeType> {
    let now = c.change != ChangeType::Deleted && filter.matches(c.obj.as_ref());
    let before = c.prev.as_ref().is_some_and(|p| filter.matches(p.as_ref()));
    match (c.change, before, now) {
        (ChangeType::Deleted, true, _) => Some(ChangeType::Deleted),
        (ChangeType::Deleted, false, _) => None,
        (_, false, true) => Some(ChangeType::Added),
        (_, true, true) => Some(ChangeType::Modified),
        (_, true, false) => Some(ChangeType::Deleted),
        (_, false, false) => None,
    }
}

/// Where a watch stream starts: the objects it opens with as ADDED (when no resourceVersion was
/// asked for), the changes after the version it starts from still in the log, and the live
/// changes after those.
struct WatchStart<K: SimKind> {
    initial: Vec<Arc<K>>,
    backlog: Vec<Arc<Change<K>>>,
    live: broadcast::Receiver<Arc<Change<K>>>,
    rv: u64,
}

async fn stream_watch<K: SimKind>(
    q: WatchQuery,
    start: WatchStart<K>,
    mut ctx: WatchContext,
    tx: mpsc::Sender<Bytes>,
) {
    let WatchQuery {
        filter,
        bookmarks,
        initial_events_end,
        timeout,
        ..
    } = q;
    let WatchStart {
        initial,
        backlog,
        live: mut rx,
        rv: mut last_rv,
    } = start;
    for obj in initial {
        if tx
            .send(object_line::<K>("ADDED", obj.as_ref(), ctx.as_table))
            .await
            .is_err()
        {
            return;
        }
    }
    if initial_events_end {
        let obj = json!({
            "kind": K::KIND,
            "apiVersion": K::API_VERSION,
            "metadata": {
                "resourceVersion": last_rv.to_string(),
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        });
        if tx.send(watch_line("BOOKMARK", &obj)).await.is_err() {
            return;
        }
    }
    for c in backlog {
        last_rv = c.rv;
        if let Some(t) = visible_change(&filter, &c)
            && tx
                .send(object_line::<K>(t.as_str(), c.obj.as_ref(), ctx.as_table))
                .await
                .is_err()
        {
            return;
        }
    }
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut bookmark = tokio::time::interval(ctx.bookmark_interval);
    bookmark.tick().await;
    loop {
        tokio::select! {
            _ = &mut deadline => return,
            _ = ctx.drop_signal.changed() => return,
            _ = bookmark.tick(), if bookmarks => {
                let obj = json!({
                    "kind": K::KIND,
                    "apiVersion": K::API_VERSION,
                    "metadata": {"resourceVersion": last_rv.to_string()},
                });
                if tx.send(watch_line("BOOKMARK", &obj)).await.is_err() {
                    return;
                }
            }
            msg = rx.recv() => match msg {
                Ok(c) => {
                    if c.rv <= last_rv {
                        continue;
                    }
                    last_rv = c.rv;
                    if let Some(t) = visible_change(&filter, &c)
                        && tx.send(object_line::<K>(t.as_str(), c.obj.as_ref(), ctx.as_table)).await.is_err()
                    {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let status = ApiError::expired(last_rv, last_rv).status_json();
                    let _ = tx.send(watch_line("ERROR", &status)).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}

/// An error event for a watch that cannot start (410 for a compacted version), sent in-stream
/// as the apiserver does.
pub fn watch_error_line(err: &ApiError) -> Bytes {
    watch_line("ERROR", &err.status_json())
}

/// Records which top-level fields a manager wrote, so objects carry managedFields shaped (and
/// sized) like a real apiserver's.
pub fn stamp_managed_fields(
    meta: &mut ObjectMeta,
    manager: &str,
    api_version: &str,
    written: &Value,
    subresource: Option<&str>,
    now: Timestamp,
) {
    fn shape(v: &Value, depth: usize) -> Value {
        match v {
            Value::Object(m) if depth > 0 => Value::Object(
                m.iter()
                    .filter(|(k, _)| !k.starts_with('$') && k.as_str() != "managedFields")
                    .map(|(k, v)| (format!("f:{k}"), shape(v, depth - 1)))
                    .collect(),
            ),
            _ => json!({}),
        }
    }
    let mut fields = shape(written, 3);
    if let Value::Object(m) = &mut fields {
        m.remove("f:apiVersion");
        m.remove("f:kind");
    }
    let entry = ManagedFieldsEntry {
        manager: Some(manager.to_string()),
        operation: Some("Update".into()),
        api_version: Some(api_version.to_string()),
        time: Some(Time(now)),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
            fields,
        )),
        subresource: subresource.map(str::to_string),
    };
    let list = meta.managed_fields.get_or_insert_with(Vec::new);
    list.retain(|e| {
        e.manager.as_deref() != Some(manager) || e.subresource.as_deref() != subresource
    });
    list.push(entry);
}

pub fn create_typed<K: SimKind>(
    coll: &mut Collection<K>,
    ns: &str,
    mut body: Value,
    ctx: &WriteContext,
) -> Result<Arc<K>, ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    let meta = body
        .as_object_mut()
        .and_then(|o| o.get_mut("metadata"))
        .and_then(Value::as_object_mut);
    let mut name = meta
        .as_ref()
        .and_then(|m| m["name"].as_str())
        .unwrap_or("")
        .to_string();
    let generate = meta
        .as_ref()
        .and_then(|m| m.get("generateName"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if name.is_empty() {
        if generate.is_empty() {
            return Err(ApiError::invalid(
                K::KIND,
                "",
                "metadata.name: Required value: name or generateName is required",
            ));
        }
        name = generate_name(&generate);
    }
    if K::NAMESPACED {
        let body_ns = body["metadata"]["namespace"].as_str().unwrap_or("");
        if !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({ns})"
            )));
        }
    }
    let ns_key = if K::NAMESPACED { ns } else { "" };
    if coll.get(ns_key, &name).is_some() {
        return Err(ApiError::already_exists(
            K::GROUP,
            K::URL_PATH_SEGMENT,
            &name,
        ));
    }
    let written = body.clone();
    let mut obj: K = serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("invalid {} object: {e}", K::KIND)))?;
    let m = obj.metadata_mut();
    m.name = Some(name);
    m.namespace = K::NAMESPACED.then(|| ns.to_string());
    m.uid = Some(uuid::Uuid::new_v4().to_string());
    m.creation_timestamp = Some(Time(ctx.now));
    m.deletion_timestamp = None;
    m.generation = K::HAS_SPEC.then_some(1);
    stamp_managed_fields(m, ctx.manager, K::API_VERSION, &written, None, ctx.now);
    obj.on_create(ctx.now);
    Ok(coll.put(obj))
}

/// The common tail of update and patch: keep identity fields, honour the status split, bump
/// generation on spec changes, and skip no-op writes (they keep their resourceVersion).
fn commit_update<K: SimKind>(
    coll: &mut Collection<K>,
    current: &Arc<K>,
    mut new: Value,
    subresource: Option<&str>,
    written: &Value,
    ctx: &WriteContext,
) -> Result<Arc<K>, ApiError> {
    let name = current.metadata().name.clone().unwrap_or_default();
    let old = crate::managed_fields::to_value(current.as_ref())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    if K::HAS_STATUS {
        match subresource {
            Some("status") => {
                let status = new.get("status").cloned();
                new = old.clone();
                match status {
                    Some(s) => new["status"] = s,
                    None => {
                        if let Some(o) = new.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
            _ => match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            },
        }
    }
    // Identity and server-owned metadata cannot be changed by clients.
    for f in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
    ] {
        match old["metadata"].get(f) {
            Some(v) => new["metadata"][f] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(f);
                }
            }
        }
    }
    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    new["metadata"]["managedFields"] = old["metadata"]["managedFields"].clone();
    if new == old {
        return Ok(current.clone());
    }
    let spec_changed = K::HAS_SPEC && new.get("spec") != old.get("spec");
    let mut obj: K = serde_json::from_value(new)
        .map_err(|e| ApiError::invalid(K::KIND, &name, e.to_string()))?;
    let m = obj.metadata_mut();
    if spec_changed {
        m.generation = Some(m.generation.unwrap_or(0) + 1);
    }
    stamp_managed_fields(
        m,
        ctx.manager,
        K::API_VERSION,
        written,
        subresource,
        ctx.now,
    );
    Ok(coll.put(obj))
}

pub fn update_typed<K: SimKind>(
    coll: &mut Collection<K>,
    ns: &str,
    name: &str,
    body: Value,
    subresource: Option<&str>,
    ctx: &WriteContext,
) -> Result<Arc<K>, ApiError> {
    let ns = if K::NAMESPACED { ns } else { "" };
    let current = coll
        .get(ns, name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(K::GROUP, K::URL_PATH_SEGMENT, name))?;
    let body_name = body["metadata"]["name"].as_str().unwrap_or("");
    if body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    match body["metadata"]["resourceVersion"]
        .as_str()
        .filter(|rv| !rv.is_empty())
    {
        Some(rv) if Some(rv) != current.metadata().resource_version.as_deref() => {
            return Err(ApiError::conflict(K::GROUP, K::URL_PATH_SEGMENT, name));
        }
        Some(_) => {}
        None if !K::UNCONDITIONAL_UPDATE => {
            return Err(ApiError::invalid(
                K::KIND,
                name,
                "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
            ));
        }
        _ => {}
    }
    commit_update(coll, &current, body.clone(), subresource, &body, ctx)
}

pub fn patch_typed<K: SimKind>(
    coll: &mut Collection<K>,
    ns: &str,
    name: &str,
    patch_type: PatchType,
    patch_doc: &Value,
    subresource: Option<&str>,
    ctx: &WriteContext,
) -> Result<Arc<K>, ApiError> {
    if patch_type == PatchType::StrategicMerge && !K::STRATEGIC_MERGE_PATCH {
        return Err(ApiError::strategic_merge_of_custom_resource());
    }
    let ns = if K::NAMESPACED { ns } else { "" };
    let current = coll
        .get(ns, name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(K::GROUP, K::URL_PATH_SEGMENT, name))?;
    let mut doc = crate::managed_fields::to_value(current.as_ref())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let current_rv = current
        .metadata()
        .resource_version
        .clone()
        .unwrap_or_default();
    match patch_type {
        PatchType::Merge => patch::apply_merge_patch(&mut doc, patch_doc),
        PatchType::StrategicMerge => {
            patch::apply_strategic_merge_patch(&mut doc, patch_doc, &patch::KubeStrategy)
        }
        PatchType::Json => patch::apply_json_patch(&mut doc, patch_doc),
    }
    .map_err(|e| match e.status_code() {
        422 => ApiError::unprocessable(format!(
            "the server rejected our request due to an error in our request: {e}"
        )),
        _ => ApiError::bad_request(e.to_string()),
    })?;
    // A patch that carries (or tests) a resourceVersion is a precondition on it.
    if doc["metadata"]["resourceVersion"].as_str().unwrap_or("") != current_rv {
        return Err(ApiError::conflict(K::GROUP, K::URL_PATH_SEGMENT, name));
    }
    commit_update(coll, &current, doc, subresource, patch_doc, ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Revision;
    use k8s_openapi::api::core::v1::Node;

    fn ctx() -> WriteContext<'static> {
        WriteContext {
            now: Timestamp::now(),
            manager: "test",
        }
    }

    fn nodes() -> Collection<Node> {
        Collection::new(Revision::default(), 100)
    }

    #[test]
    fn create_fills_server_fields_and_rejects_duplicates() {
        let mut c = nodes();
        let n = create_typed(&mut c, "", json!({"metadata": {"name": "n1"}}), &ctx()).unwrap();
        assert!(n.metadata.uid.is_some());
        assert!(n.metadata.creation_timestamp.is_some());
        assert_eq!(n.metadata.resource_version.as_deref(), Some("1"));
        assert_eq!(n.metadata.managed_fields.as_ref().unwrap().len(), 1);
        let err =
            create_typed(&mut c, "", json!({"metadata": {"name": "n1"}}), &ctx()).unwrap_err();
        assert_eq!((err.code, err.reason), (409, "AlreadyExists"));
    }

    #[test]
    fn patch_with_stale_resource_version_conflicts() {
        let mut c = nodes();
        create_typed(&mut c, "", json!({"metadata": {"name": "n1"}}), &ctx()).unwrap();
        let p = json!({"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": true}});
        let n = patch_typed(&mut c, "", "n1", PatchType::Merge, &p, None, &ctx()).unwrap();
        assert_eq!(n.spec.as_ref().unwrap().unschedulable, Some(true));
        assert_eq!(n.metadata.resource_version.as_deref(), Some("2"));
        let err = patch_typed(&mut c, "", "n1", PatchType::Merge, &p, None, &ctx()).unwrap_err();
        assert_eq!(err.code, 409);
    }

    #[test]
    fn noop_patch_keeps_resource_version() {
        let mut c = nodes();
        create_typed(&mut c, "", json!({"metadata": {"name": "n1"}}), &ctx()).unwrap();
        let p = json!({"spec": {"unschedulable": true}});
        patch_typed(
            &mut c,
            "",
            "n1",
            PatchType::StrategicMerge,
            &p,
            None,
            &ctx(),
        )
        .unwrap();
        let again = patch_typed(
            &mut c,
            "",
            "n1",
            PatchType::StrategicMerge,
            &p,
            None,
            &ctx(),
        )
        .unwrap();
        assert_eq!(again.metadata.resource_version.as_deref(), Some("2"));
    }

    #[test]
    fn main_resource_writes_do_not_touch_status() {
        let mut c = nodes();
        create_typed(&mut c, "", json!({"metadata": {"name": "n1"}}), &ctx()).unwrap();
        let p = json!({"status": {"phase": "Running"}});
        let n = patch_typed(&mut c, "", "n1", PatchType::Merge, &p, None, &ctx()).unwrap();
        assert!(n.status.is_none());
        let n = patch_typed(
            &mut c,
            "",
            "n1",
            PatchType::Merge,
            &p,
            Some("status"),
            &ctx(),
        )
        .unwrap();
        assert_eq!(n.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    }

    #[test]
    fn list_pages_with_continue_tokens() {
        let mut c = nodes();
        for i in 0..5 {
            create_typed(
                &mut c,
                "",
                json!({"metadata": {"name": format!("n{i}")}}),
                &ctx(),
            )
            .unwrap();
        }
        let mut names = Vec::new();
        let mut token = None;
        loop {
            let q = ListQuery {
                filter: Filter::default(),
                limit: Some(2),
                continue_token: token,
            };
            let page: Value = serde_json::from_slice(&c.list(&q, 5).unwrap()).unwrap();
            assert_eq!(page["kind"], "NodeList");
            for item in page["items"].as_array().unwrap() {
                names.push(item["metadata"]["name"].as_str().unwrap().to_string());
            }
            token = page["metadata"]["continue"].as_str().map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        assert_eq!(names, vec!["n0", "n1", "n2", "n3", "n4"]);
    }

    #[test]
    fn an_update_without_a_resource_version_overwrites_a_node_but_not_a_lease() {
        use k8s_openapi::api::coordination::v1::Lease;
        let mut c = nodes();
        create_typed(&mut c, "", json!({"metadata": {"name": "n1"}}), &ctx()).unwrap();
        let body = json!({"metadata": {"name": "n1", "labels": {"a": "b"}}});
        update_typed(&mut c, "", "n1", body, None, &ctx()).unwrap();
        let mut leases: Collection<Lease> = Collection::new(Revision::default(), 100);
        let lease =
            json!({"metadata": {"name": "l", "namespace": "ns"}, "spec": {"holderIdentity": "a"}});
        create_typed(&mut leases, "ns", lease, &ctx()).unwrap();
        let body =
            json!({"metadata": {"name": "l", "namespace": "ns"}, "spec": {"holderIdentity": "b"}});
        let err = update_typed(&mut leases, "ns", "l", body, None, &ctx()).unwrap_err();
        assert_eq!(err.code, 422, "{}", err.message);
        assert!(
            err.message.contains("must be specified for an update"),
            "{}",
            err.message
        );
    }

    #[test]
    fn delete_honours_uid_precondition() {
        let mut c = nodes();
        create_typed(&mut c, "", json!({"metadata": {"name": "n1"}}), &ctx()).unwrap();
        let opts = DeleteOptions {
            uid: Some("other".into()),
            ..Default::default()
        };
        let err = c.delete_json("", "n1", &opts).unwrap_err();
        assert_eq!(err.code, 409);
        assert!(
            err.message
                .contains("the UID in the precondition (other) does not match")
        );
        c.delete_json("", "n1", &DeleteOptions::default()).unwrap();
        assert!(c.get("", "n1").is_none());
    }
}
