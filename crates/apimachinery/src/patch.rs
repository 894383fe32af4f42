//! The three patch types of `PATCH` requests, applied to a Kubernetes object held as JSON.
//!
//! Contract:
//! - [`apply_merge_patch`] (`application/merge-patch+json`, RFC 7386): objects merge
//!   recursively, `null` deletes, anything else (lists included) replaces.
//! - [`apply_json_patch`] (`application/json-patch+json`, RFC 6902, including `test`).
//! - [`apply_strategic_merge_patch`] (`application/strategic-merge-patch+json`): like a merge
//!   patch, but lists follow a [`StrategySchema`]: merged by a key, merged as a set of
//!   primitives, or replaced (atomic, the default). [`KubeStrategy`] gives the built-in Kubernetes
//!   rules for the kinds rotor touches. The `$patch`, `$deleteFromPrimitiveList/<f>`,
//!   `$setElementOrder/<f>` and `$retainKeys` directives are honoured, following
//!   `k8s.io/apimachinery/pkg/util/strategicpatch`.
//! - Every function leaves the target untouched when it returns an error.
//! - [`PatchError::status_code`] is the HTTP status the real kube-apiserver answers for each
//!   failure: 400 for a patch document that cannot be decoded, 422 for a patch that decodes but
//!   cannot be applied to this object, including a failed JSON-patch `test` operation (the
//!   apiserver answers 422 Unprocessable Entity for it, not 409 Conflict; 409 is only for a
//!   `metadata.resourceVersion` precondition that no longer holds, which is the server's check
//!   on the patched object, not the patch's).

use serde_json::{Map, Value};

/// Why a patch could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch document is malformed: not the JSON shape its patch type requires, or a
    /// directive with a bad value. The apiserver answers 400 Bad Request.
    #[error("invalid patch: {0}")]
    Invalid(String),
    /// A JSON-patch `test` operation found a different value, or no value, at its path. The
    /// apiserver answers 422 Unprocessable Entity.
    #[error("testing value {path} failed: test failed (operation {index})")]
    TestFailed {
        /// Index of the failing operation in the patch.
        index: usize,
        /// The operation's JSON pointer.
        path: String,
    },
    /// The patch is well-formed but does not apply to this object (a JSON-patch path that does
    /// not exist, an unknown op, a keyed list item without its merge key, ...). The apiserver
    /// answers 422 Unprocessable Entity.
    #[error("{0}")]
    Unprocessable(String),
}

impl PatchError {
    /// True for a failed JSON-patch `test` operation.
    pub fn is_test_failure(&self) -> bool {
        matches!(self, PatchError::TestFailed { .. })
    }

    /// The HTTP status kube-apiserver answers with: 400 for [`PatchError::Invalid`], 422
    /// otherwise.
    pub fn status_code(&self) -> u16 {
        match self {
            PatchError::Invalid(_) => 400,
            PatchError::TestFailed { .. } | PatchError::Unprocessable(_) => 422,
        }
    }
}

fn invalid(msg: impl Into<String>) -> PatchError {
    PatchError::Invalid(msg.into())
}

fn unprocessable(msg: impl Into<String>) -> PatchError {
    PatchError::Unprocessable(msg.into())
}

/// JSON equality where numbers compare by value (`1` equals `1.0`), as Go's decoded JSON does.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

// ---------------------------------------------------------------------------------------------
// JSON merge patch

/// Applies a JSON merge patch (RFC 7386): keys with `null` are removed, objects merge
/// recursively, every other value (lists included) replaces the target's.
///
/// The patch must be a JSON object ([`PatchError::Invalid`] otherwise: a Kubernetes object
/// cannot be replaced by a non-object); a non-object target is treated as `{}`.
pub fn apply_merge_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    if !patch.is_object() {
        return Err(invalid(format!(
            "a merge patch must be a JSON object, found {}",
            kind_name(patch)
        )));
    }
    json_patch::merge(target, patch);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// JSON patch

/// Applies a JSON patch (RFC 6902): `add`, `remove`, `replace`, `move`, `copy` and `test`, in
/// order, all or nothing.
///
/// Errors:
/// - [`PatchError::Invalid`] (400) when the patch is not a list of objects; the apiserver only
///   fails to decode a patch of the wrong shape.
/// - [`PatchError::TestFailed`] (422) when a `test` finds another value, or no value (a `test`
///   for `null` at a missing path passes, as in the Go library the apiserver uses).
/// - [`PatchError::Unprocessable`] (422) for an operation that is malformed (unknown `op`,
///   missing `path`/`value`/`from`) or does not apply (missing path, index out of bounds).
pub fn apply_json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let Value::Array(ops) = patch else {
        return Err(invalid(format!(
            "a JSON patch must be a list of operations, found {}",
            kind_name(patch)
        )));
    };
    if let Some(bad) = ops.iter().find(|op| !op.is_object()) {
        return Err(invalid(format!(
            "a JSON patch operation must be an object, found {bad}"
        )));
    }
    let mut work = target.clone();
    for (index, raw) in ops.iter().enumerate() {
        let op: json_patch::PatchOperation = serde_json::from_value(raw.clone())
            .map_err(|e| unprocessable(format!("operation {index} ({raw}) is invalid: {e}")))?;
        if let json_patch::PatchOperation::Test(test) = &op {
            let passed = match work.pointer(test.path.as_str()) {
                Some(actual) => json_eq(actual, &test.value),
                None => test.value.is_null(),
            };
            if !passed {
                return Err(PatchError::TestFailed {
                    index,
                    path: test.path.to_string(),
                });
            }
            continue;
        }
        json_patch::patch(&mut work, std::slice::from_ref(&op))
            .map_err(|e| unprocessable(format!("operation {index} ({raw}) failed: {}", e.kind)))?;
    }
    *target = work;
    Ok(())
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch: schema

/// How a strategic merge patch treats one list field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ListStrategy {
    /// The patch's list replaces the object's list (Kubernetes' default, "atomic").
    #[default]
    Replace,
    /// A list of objects merged by the named key (`patchStrategy:"merge"` with a
    /// `patchMergeKey`). A list of primitives under this strategy merges as a set.
    MergeByKey(String),
    /// A list of primitives merged as a set (`patchStrategy:"merge"` without a merge key, e.g.
    /// `metadata.finalizers`).
    MergePrimitives,
}

/// Answers how a list field merges, given the path of field names from the object root.
///
/// List items add nothing to the path: `spec.containers[*].env` is `["spec", "containers",
/// "env"]`. Any closure `Fn(&[&str]) -> ListStrategy` is a schema.
pub trait StrategySchema {
    /// The strategy for the list at `path`; [`ListStrategy::Replace`] for unknown lists.
    fn list_strategy(&self, path: &[&str]) -> ListStrategy;
}

impl<F: Fn(&[&str]) -> ListStrategy> StrategySchema for F {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        self(path)
    }
}

/// The built-in Kubernetes merge rules (the `patchStrategy`/`patchMergeKey` struct tags of
/// k8s.io/api) for Pod, Node, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob,
/// ReplicationController, PodTemplate, Service, PodDisruptionBudget, Lease and Event.
///
/// Rules are keyed by path alone; the paths of these kinds do not collide, so one value serves
/// every kind:
/// - object metadata (at `metadata`, and at the pod template's `metadata`):
///   `ownerReferences` by `uid`, `finalizers` as a primitive set;
/// - a pod spec (at `spec` of a Pod, `spec.template.spec` of workloads, `template.spec` of a
///   PodTemplate, `spec.jobTemplate.spec.template.spec` of a CronJob): `containers`,
///   `initContainers`, `ephemeralContainers`, `volumes`, `imagePullSecrets`,
///   `schedulingGates`, `resourceClaims` by `name`; `hostAliases` by `ip`;
///   `topologySpreadConstraints` by `topologyKey`; in each container `env` by `name`, `ports`
///   by `containerPort`, `volumeMounts` by `mountPath`, `volumeDevices` by `devicePath`;
///   `tolerations` is atomic (no merge key in Kubernetes);
/// - pod status: `conditions` by `type`, `podIPs`/`hostIPs` by `ip`, `resourceClaimStatuses` by
///   `name`; `containerStatuses` and friends are atomic;
/// - node: `spec.podCIDRs` as a primitive set, `status.conditions` and `status.addresses` by
///   `type`; `spec.taints` is atomic (no merge key in Kubernetes: a taints patch replaces the
///   whole list, which is why `kubectl taint` sends the full list);
/// - `status.conditions` of any other kind (workloads, Job, PDB, Service) by `type`;
/// - Service `spec.ports` by `port`.
///
/// Every other list is atomic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KubeStrategy;

impl StrategySchema for KubeStrategy {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        match path {
            ["metadata", rest @ ..] => object_meta_lists(rest),
            ["spec", "template", rest @ ..]
            | ["template", rest @ ..]
            | ["spec", "jobTemplate", "spec", "template", rest @ ..] => pod_template_lists(rest),
            ["spec", "jobTemplate", "metadata", rest @ ..] => object_meta_lists(rest),
            ["spec", "podCIDRs"] => ListStrategy::MergePrimitives,
            ["spec", "ports"] => by_key("port"),
            ["spec", rest @ ..] => pod_spec_lists(rest),
            ["status", "conditions"] | ["status", "addresses"] => by_key("type"),
            ["status", "podIPs"] | ["status", "hostIPs"] => by_key("ip"),
            ["status", "resourceClaimStatuses"] => by_key("name"),
            _ => ListStrategy::Replace,
        }
    }
}

fn by_key(key: &str) -> ListStrategy {
    ListStrategy::MergeByKey(key.to_string())
}

fn object_meta_lists(rest: &[&str]) -> ListStrategy {
    match rest {
        ["finalizers"] => ListStrategy::MergePrimitives,
        ["ownerReferences"] => by_key("uid"),
        _ => ListStrategy::Replace,
    }
}

fn pod_template_lists(rest: &[&str]) -> ListStrategy {
    match rest {
        ["metadata", rest @ ..] => object_meta_lists(rest),
        ["spec", rest @ ..] => pod_spec_lists(rest),
        _ => ListStrategy::Replace,
    }
}

fn pod_spec_lists(rest: &[&str]) -> ListStrategy {
    match rest {
        ["containers" | "initContainers" | "ephemeralContainers"] => by_key("name"),
        [
            "containers" | "initContainers" | "ephemeralContainers",
            field,
        ] => match *field {
            "env" => by_key("name"),
            "ports" => by_key("containerPort"),
            "volumeMounts" => by_key("mountPath"),
            "volumeDevices" => by_key("devicePath"),
            _ => ListStrategy::Replace,
        },
        ["volumes" | "imagePullSecrets" | "schedulingGates" | "resourceClaims"] => by_key("name"),
        ["hostAliases"] => by_key("ip"),
        ["topologySpreadConstraints"] => by_key("topologyKey"),
        // Node taints and pod tolerations have no merge key: replaced whole.
        _ => ListStrategy::Replace,
    }
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch: application

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch, as kube-apiserver does for built-in kinds.
///
/// - Objects merge recursively; `null` deletes a field; scalars and mismatched types replace.
/// - Lists follow `schema` (see [`ListStrategy`]). In a keyed list a patch item merges into the
///   item with the same key, or is added; `{"$patch": "delete", <key>: v}` removes the items
///   with that key; a `{"$patch": "replace"}` item makes the rest of the patch list replace the
///   list. A primitive set gains the patch's values, without duplicates.
/// - Order, as apimachinery computes it: items named in the patch keep the patch's order,
///   other items keep the object's order and are interleaved where both orders know them. A
///   new item that the object did not have comes before the remaining object-only items (so
///   `{"metadata":{"finalizers":["c"]}}` on `["a","b"]` gives `["c","a","b"]`).
/// - `$setElementOrder/<f>: [...]` sets the relative order of the listed items in `f` (the
///   other items keep their place relative to each other); kubectl sends it with each keyed-list
///   change.
/// - `$deleteFromPrimitiveList/<f>: [...]` removes those values from the primitive list `f`.
/// - `$patch: replace` in an object replaces the object with the rest of the patch object;
///   `$patch: delete` deletes it (the field is removed; at the root the object becomes `{}`).
/// - `$retainKeys: [...]` is honoured: fields of the object not listed are cleared before the
///   patch merges, and a non-null patch field missing from the list is an error (400), as in
///   apimachinery.
/// - New content (a field or list item the object did not have) has its `null`s and directives
///   resolved, so none are stored; so do the items of an atomic list (their `null` fields are
///   dropped).
/// - A target that is not a JSON object is treated as `{}`.
pub fn apply_strategic_merge_patch(
    target: &mut Value,
    patch: &Value,
    schema: &dyn StrategySchema,
) -> Result<(), PatchError> {
    let Value::Object(patch) = patch else {
        return Err(invalid(format!(
            "a strategic merge patch must be a JSON object, found {}",
            kind_name(patch)
        )));
    };
    let mut work = match target {
        Value::Object(obj) => obj.clone(),
        _ => Map::new(),
    };
    let mut path = Vec::new();
    let merger = Merger { schema };
    if merger.merge_map(&mut work, patch, &mut path)? == Outcome::Delete {
        work.clear();
    }
    *target = Value::Object(work);
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Keep,
    Delete,
}

struct Merger<'s> {
    schema: &'s dyn StrategySchema,
}

impl Merger<'_> {
    /// Merges `patch` into `orig`; `Delete` when the patch object says `$patch: delete`.
    fn merge_map<'p>(
        &self,
        orig: &mut Map<String, Value>,
        patch: &'p Map<String, Value>,
        path: &mut Vec<&'p str>,
    ) -> Result<Outcome, PatchError> {
        if let Some(directive) = patch.get(DIRECTIVE) {
            match directive.as_str() {
                Some("replace") => orig.clear(),
                Some("delete") => return Ok(Outcome::Delete),
                _ => {
                    return Err(invalid(format!(
                        "unexpected patch type {directive} in object {}",
                        path_string(path)
                    )));
                }
            }
        }

        if let Some(retain) = patch.get(RETAIN_KEYS) {
            self.retain_keys(orig, patch, retain, path)?;
        }

        let mut ordered: Vec<&'p str> = Vec::new();
        for (key, order) in patch {
            if let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) {
                path.push(field);
                let result = self.set_element_order(orig, patch, field, order, path);
                path.pop();
                result?;
                ordered.push(field);
            }
        }

        for (key, value) in patch {
            let key = key.as_str();
            if key == DIRECTIVE
                || key == RETAIN_KEYS
                || key.starts_with(SET_ELEMENT_ORDER)
                || ordered.contains(&key)
            {
                continue;
            }
            if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
                delete_from_primitive_list(orig, field, value, path)?;
                continue;
            }
            path.push(key);
            let result = self.merge_field(orig, key, value, path);
            path.pop();
            result?;
        }
        Ok(Outcome::Keep)
    }

    /// Merges one field; `path` already ends with `key`.
    fn merge_field<'p>(
        &self,
        orig: &mut Map<String, Value>,
        key: &str,
        value: &'p Value,
        path: &mut Vec<&'p str>,
    ) -> Result<(), PatchError> {
        if value.is_null() {
            orig.remove(key);
            return Ok(());
        }
        match (orig.get_mut(key), value) {
            (Some(Value::Object(o)), Value::Object(p)) => {
                if self.merge_map(o, p, path)? == Outcome::Delete {
                    orig.remove(key);
                }
            }
            (Some(Value::Array(o)), Value::Array(p)) => self.merge_list(o, p, path)?,
            _ => match self.fresh(value, path)? {
                Some(v) => {
                    orig.insert(key.to_string(), v);
                }
                None => {
                    orig.remove(key);
                }
            },
        }
        Ok(())
    }

    /// New content: the patch value merged into nothing, so nulls and directives resolve.
    /// `None` for an object that deletes itself.
    fn fresh<'p>(
        &self,
        value: &'p Value,
        path: &mut Vec<&'p str>,
    ) -> Result<Option<Value>, PatchError> {
        match value {
            Value::Object(p) => {
                let mut m = Map::new();
                Ok(match self.merge_map(&mut m, p, path)? {
                    Outcome::Keep => Some(Value::Object(m)),
                    Outcome::Delete => None,
                })
            }
            Value::Array(p) => {
                let mut list = Vec::new();
                self.merge_list(&mut list, p, path)?;
                Ok(Some(Value::Array(list)))
            }
            other => Ok(Some(other.clone())),
        }
    }

    fn merge_list<'p>(
        &self,
        orig: &mut Vec<Value>,
        patch: &'p [Value],
        path: &mut Vec<&'p str>,
    ) -> Result<(), PatchError> {
        let strategy = self.schema.list_strategy(path);
        if strategy == ListStrategy::Replace {
            *orig = patch.iter().map(discard_nulls).collect();
            return Ok(());
        }
        if orig.is_empty() && patch.is_empty() {
            return Ok(());
        }
        let element = element_kind(orig, patch, path)?;
        if element != ElementKind::Object {
            // A primitive set (also for a keyed list of primitives, as apimachinery does).
            let mut merged: Vec<Value> = Vec::with_capacity(orig.len() + patch.len());
            for v in orig.iter().chain(patch) {
                if !merged.iter().any(|m| json_eq(m, v)) {
                    merged.push(v.clone());
                }
            }
            *orig = order_merged(merged, patch, orig, None, path)?;
            return Ok(());
        }
        let ListStrategy::MergeByKey(key) = strategy else {
            return Err(unprocessable(format!(
                "cannot merge lists without merge key for {}",
                path_string(path)
            )));
        };

        // Special items first: deletions by key, and a replace marker.
        let mut items: Vec<&'p Map<String, Value>> = Vec::new();
        let mut replace = false;
        let mut base: Vec<Value> = orig.clone();
        for item in patch {
            let Value::Object(item) = item else {
                unreachable!("element kinds were checked");
            };
            let Some(directive) = item.get(DIRECTIVE) else {
                items.push(item);
                continue;
            };
            match directive.as_str() {
                Some("delete") => {
                    let wanted = item
                        .get(&key)
                        .ok_or_else(|| no_merge_key(item, &key, path))?;
                    base.retain(|v| !v.get(&key).is_some_and(|k| json_eq(k, wanted)));
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(invalid(format!(
                        "merging lists cannot yet be specified in the patch ({})",
                        path_string(path)
                    )));
                }
                _ => {
                    return Err(invalid(format!(
                        "unexpected patch type {directive} in list {}",
                        path_string(path)
                    )));
                }
            }
        }

        if replace {
            let mut fresh = Vec::with_capacity(items.len());
            for item in &items {
                let mut m = Map::new();
                if self.merge_map(&mut m, item, path)? == Outcome::Keep {
                    fresh.push(Value::Object(m));
                }
            }
            *orig = fresh;
            return Ok(());
        }

        let mut merged = base.clone();
        for item in &items {
            let wanted = item
                .get(&key)
                .ok_or_else(|| no_merge_key(item, &key, path))?;
            let existing = merged
                .iter_mut()
                .find(|v| v.get(&key).is_some_and(|k| json_eq(k, wanted)));
            match existing {
                Some(Value::Object(existing)) => {
                    // A `$patch` item never reaches here, so the outcome is always Keep.
                    self.merge_map(existing, item, path)?;
                }
                _ => {
                    let mut m = Map::new();
                    self.merge_map(&mut m, item, path)?;
                    merged.push(Value::Object(m));
                }
            }
        }
        let patch_items: Vec<Value> = items.iter().map(|m| Value::Object((*m).clone())).collect();
        *orig = order_merged(merged, &patch_items, &base, Some(&key), path)?;
        Ok(())
    }

    fn set_element_order<'p>(
        &self,
        orig: &mut Map<String, Value>,
        patch: &'p Map<String, Value>,
        field: &'p str,
        order: &'p Value,
        path: &mut Vec<&'p str>,
    ) -> Result<(), PatchError> {
        let Value::Array(order) = order else {
            return Err(invalid(format!(
                "{SET_ELEMENT_ORDER}{field} must be a list, found {}",
                kind_name(order)
            )));
        };
        let server: Vec<Value> = match orig.get(field) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => list.clone(),
            Some(other) => {
                return Err(unprocessable(format!(
                    "{} is not a list in the object but {}",
                    path_string(path),
                    kind_name(other)
                )));
            }
        };
        let merged = match patch.get(field) {
            None => {
                if !orig.contains_key(field) {
                    return Ok(());
                }
                server.clone()
            }
            Some(Value::Array(list)) => {
                let mut merged = server.clone();
                self.merge_list(&mut merged, list, path)?;
                merged
            }
            Some(other) => {
                return Err(invalid(format!(
                    "{} must be a list when {SET_ELEMENT_ORDER}{field} is given, found {}",
                    path_string(path),
                    kind_name(other)
                )));
            }
        };
        let key = match self.schema.list_strategy(path) {
            ListStrategy::MergeByKey(key) => Some(key),
            _ => None,
        };
        let objects = merged.iter().any(Value::is_object);
        let result = match (&key, objects) {
            (Some(key), true) => order_merged(merged, order, &server, Some(key), path)?,
            (_, false) => order_merged(merged, order, &server, None, path)?,
            // Ordering objects needs a merge key; without one the order is left as merged.
            (None, true) => merged,
        };
        orig.insert(field.to_string(), Value::Array(result));
        Ok(())
    }

    fn retain_keys(
        &self,
        orig: &mut Map<String, Value>,
        patch: &Map<String, Value>,
        retain: &Value,
        path: &[&str],
    ) -> Result<(), PatchError> {
        let bad = || {
            invalid(format!(
                "invalid patch format of retainKeys in {}",
                path_string(path)
            ))
        };
        let Value::Array(retain) = retain else {
            return Err(bad());
        };
        let retain: Vec<&str> = retain
            .iter()
            .map(|v| v.as_str().ok_or_else(bad))
            .collect::<Result<_, _>>()?;
        for (k, v) in patch {
            if v.is_null() || k.starts_with('$') {
                continue;
            }
            if !retain.contains(&k.as_str()) {
                return Err(bad());
            }
        }
        orig.retain(|k, _| retain.contains(&k.as_str()));
        Ok(())
    }
}

fn delete_from_primitive_list(
    orig: &mut Map<String, Value>,
    field: &str,
    values: &Value,
    path: &[&str],
) -> Result<(), PatchError> {
    let Value::Array(values) = values else {
        return Err(invalid(format!(
            "{DELETE_FROM_PRIMITIVE_LIST}{field} in {} must be a list, found {}",
            path_string(path),
            kind_name(values)
        )));
    };
    if values.iter().any(|v| v.is_object() || v.is_array()) {
        return Err(invalid(format!(
            "{DELETE_FROM_PRIMITIVE_LIST}{field} in {} must list primitive values",
            path_string(path)
        )));
    }
    if let Some(Value::Array(list)) = orig.get_mut(field) {
        list.retain(|v| !values.iter().any(|d| json_eq(d, v)));
    }
    Ok(())
}

/// Removes `null` fields from objects, recursively (content of atomic lists).
fn discard_nulls(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), discard_nulls(v)))
                .collect(),
        ),
        Value::Array(list) => Value::Array(list.iter().map(discard_nulls).collect()),
        other => other.clone(),
    }
}

fn no_merge_key(item: &Map<String, Value>, key: &str, path: &[&str]) -> PatchError {
    unprocessable(format!(
        "map: {} does not contain declared merge key: {key} (in list {})",
        Value::Object(item.clone()),
        path_string(path)
    ))
}

fn path_string(path: &[&str]) -> String {
    if path.is_empty() {
        "the object root".to_string()
    } else {
        path.join(".")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ElementKind {
    Null,
    Bool,
    Number,
    String,
    Object,
}

/// All items of both lists must have one kind, and lists of lists cannot merge.
fn element_kind(orig: &[Value], patch: &[Value], path: &[&str]) -> Result<ElementKind, PatchError> {
    let mut kind = None;
    for v in orig.iter().chain(patch) {
        let k = match v {
            Value::Null => ElementKind::Null,
            Value::Bool(_) => ElementKind::Bool,
            Value::Number(_) => ElementKind::Number,
            Value::String(_) => ElementKind::String,
            Value::Object(_) => ElementKind::Object,
            Value::Array(_) => {
                return Err(unprocessable(format!(
                    "lists of lists are not supported ({})",
                    path_string(path)
                )));
            }
        };
        match kind {
            None => kind = Some(k),
            Some(prev) if prev != k => {
                return Err(unprocessable(format!(
                    "list element types are not identical in {}",
                    path_string(path)
                )));
            }
            Some(_) => {}
        }
    }
    Ok(kind.unwrap_or(ElementKind::Null))
}

/// Position of `item` in `list`, by merge key (objects) or by value (primitives).
fn index_in(list: &[Value], item: &Value, key: Option<&str>) -> Option<usize> {
    match key {
        Some(key) => {
            let wanted = item.get(key)?;
            list.iter()
                .position(|v| v.get(key).is_some_and(|k| json_eq(k, wanted)))
        }
        None => list.iter().position(|v| json_eq(v, item)),
    }
}

/// apimachinery's order normalisation: split `merged` into the items named in `patch_order`
/// and the server-only items; sort the first by `patch_order` and the second by
/// `server_order`; then interleave them, taking a server-only item first only when both
/// items are in `server_order` and the server-only one comes earlier there.
fn order_merged(
    merged: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
    path: &[&str],
) -> Result<Vec<Value>, PatchError> {
    if let Some(key) = key {
        for item in merged.iter().chain(patch_order) {
            if item.get(key).is_none() {
                let obj = item.as_object().cloned().unwrap_or_default();
                return Err(no_merge_key(&obj, key, path));
            }
        }
    }
    let (mut from_patch, mut server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|v| index_in(patch_order, v, key).is_some());
    from_patch.sort_by_key(|v| index_in(patch_order, v, key).unwrap_or(usize::MAX));
    server_only.sort_by_key(|v| index_in(server_order, v, key).unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(from_patch.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = from_patch.into_iter().peekable();
    loop {
        match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => out.extend(left.next()),
            (None, Some(_)) => out.extend(right.next()),
            (Some(l), Some(r)) => {
                let li = index_in(server_order, l, key);
                let ri = index_in(server_order, r, key);
                match (li, ri) {
                    (Some(li), Some(ri)) if li < ri => out.extend(left.next()),
                    _ => out.extend(right.next()),
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(target: Value, patch: Value) -> Value {
        let mut doc = target;
        apply_strategic_merge_patch(&mut doc, &patch, &KubeStrategy)
            .unwrap_or_else(|e| panic!("patch {patch} failed: {e}"));
        doc
    }

    fn smp_err(target: Value, patch: Value) -> PatchError {
        let mut doc = target.clone();
        let err = apply_strategic_merge_patch(&mut doc, &patch, &KubeStrategy).unwrap_err();
        assert_eq!(doc, target, "target must be untouched on error");
        err
    }

    fn node() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "n1",
                "resourceVersion": "42",
                "labels": {"kubernetes.io/hostname": "n1"},
            },
            "spec": {
                "providerID": "aws:///us-east-1a/i-0123",
                "taints": [{"effect": "NoSchedule", "key": "old", "value": "x"}],
            },
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.1"},
                    {"type": "Hostname", "address": "n1"},
                ],
            },
        })
    }

    fn pod() -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "default", "finalizers": ["a", "b"]},
            "spec": {
                "nodeName": "n1",
                "containers": [
                    {
                        "name": "app",
                        "image": "app:1",
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    },
                    {"name": "sidecar", "image": "proxy:1"},
                ],
                "tolerations": [{"key": "a", "operator": "Exists"}],
                "volumes": [{"name": "data", "emptyDir": {}}],
            },
        })
    }

    // ---- merge patch ----

    #[test]
    fn merge_patch_merges_and_null_deletes() {
        let mut doc = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": [1, 2]}});
        apply_merge_patch(
            &mut doc,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"x": [3]}}),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"x": [3]}})
        );
    }

    #[test]
    fn merge_patch_rejects_non_object() {
        let mut doc = json!({"a": 1});
        let err = apply_merge_patch(&mut doc, &json!([1])).unwrap_err();
        assert_eq!(err.status_code(), 400);
        assert_eq!(doc, json!({"a": 1}));
    }

    // ---- JSON patch ----

    #[test]
    fn json_patch_test_on_resource_version_passes() {
        let mut doc = node();
        apply_json_patch(
            &mut doc,
            &json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/spec/unschedulable", "value": true},
                {"op": "remove", "path": "/spec/taints/0"},
                {"op": "add", "path": "/metadata/labels/drain", "value": "yes"},
            ]),
        )
        .unwrap();
        let mut expected = node();
        expected["spec"]["unschedulable"] = json!(true);
        expected["spec"]["taints"] = json!([]);
        expected["metadata"]["labels"]["drain"] = json!("yes");
        assert_eq!(doc, expected);
    }

    #[test]
    fn json_patch_test_failure_is_422_and_leaves_target() {
        let mut doc = node();
        let err = apply_json_patch(
            &mut doc,
            &json!([
                {"op": "add", "path": "/spec/unschedulable", "value": true},
                {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
            ]),
        )
        .unwrap_err();
        assert_eq!(
            err,
            PatchError::TestFailed {
                index: 1,
                path: "/metadata/resourceVersion".into()
            }
        );
        assert!(err.is_test_failure());
        assert_eq!(err.status_code(), 422);
        assert_eq!(doc, node());
    }

    #[test]
    fn json_patch_test_on_missing_path() {
        let mut doc = node();
        let err = apply_json_patch(
            &mut doc,
            &json!([{"op": "test", "path": "/spec/unschedulable", "value": true}]),
        )
        .unwrap_err();
        assert!(err.is_test_failure());
        apply_json_patch(
            &mut doc,
            &json!([{"op": "test", "path": "/spec/unschedulable", "value": null}]),
        )
        .unwrap();
        assert_eq!(doc, node());
    }

    #[test]
    fn json_patch_number_test_compares_by_value() {
        let mut doc = json!({"spec": {"replicas": 3}});
        apply_json_patch(
            &mut doc,
            &json!([{"op": "test", "path": "/spec/replicas", "value": 3.0}]),
        )
        .unwrap();
    }

    #[test]
    fn json_patch_all_ops() {
        let mut doc = json!({"a": {"b": 1}, "l": [1, 2, 3]});
        apply_json_patch(
            &mut doc,
            &json!([
                {"op": "copy", "from": "/a", "path": "/c"},
                {"op": "move", "from": "/a/b", "path": "/d"},
                {"op": "add", "path": "/l/-", "value": 4},
                {"op": "add", "path": "/l/0", "value": 0},
                {"op": "remove", "path": "/l/2"},
                {"op": "replace", "path": "/c/b", "value": "x"},
                {"op": "add", "path": "/metadata~1name", "value": "esc"},
            ]),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"a": {}, "c": {"b": "x"}, "d": 1, "l": [0, 1, 3, 4], "metadata/name": "esc"})
        );
    }

    #[test]
    fn json_patch_errors_classified() {
        let original = json!({"a": 1});
        let mut doc = original.clone();
        for bad_doc in [json!({"op": "add"}), json!("x"), json!([1])] {
            let err = apply_json_patch(&mut doc, &bad_doc).unwrap_err();
            assert!(matches!(err, PatchError::Invalid(_)), "{bad_doc}: {err:?}");
            assert_eq!(err.status_code(), 400);
        }
        for bad_op in [
            json!([{"op": "frobnicate", "path": "/a"}]),
            json!([{"op": "add", "value": 1}]),
            json!([{"op": "remove", "path": "/missing"}]),
            json!([{"op": "replace", "path": "/x/y", "value": 1}]),
            json!([{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/zz"}]),
        ] {
            let err = apply_json_patch(&mut doc, &bad_op).unwrap_err();
            assert!(
                matches!(err, PatchError::Unprocessable(_)),
                "{bad_op}: {err:?}"
            );
            assert_eq!(err.status_code(), 422);
        }
        assert_eq!(doc, original);
    }

    // ---- strategic merge patch: kubectl requests ----

    #[test]
    fn kubectl_cordon() {
        let out = smp(node(), json!({"spec": {"unschedulable": true}}));
        let mut expected = node();
        expected["spec"]["unschedulable"] = json!(true);
        assert_eq!(out, expected);
        // kubectl uncordon sends {"spec":{"unschedulable":null}}
        let back = smp(out, json!({"spec": {"unschedulable": null}}));
        assert_eq!(back, node());
    }

    #[test]
    fn kubectl_taint_replaces_the_whole_list() {
        let out = smp(
            node(),
            json!({"spec": {"taints": [{"effect": "NoSchedule", "key": "k", "value": "v"}]}}),
        );
        let mut expected = node();
        expected["spec"]["taints"] = json!([{"effect": "NoSchedule", "key": "k", "value": "v"}]);
        assert_eq!(out, expected);
    }

    #[test]
    fn tolerations_are_atomic() {
        let out = smp(
            pod(),
            json!({"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}),
        );
        assert_eq!(
            out["spec"]["tolerations"],
            json!([{"key": "b", "operator": "Exists"}])
        );
    }

    #[test]
    fn kubectl_label() {
        let out = smp(node(), json!({"metadata": {"labels": {"a": "b"}}}));
        let mut expected = node();
        expected["metadata"]["labels"]["a"] = json!("b");
        assert_eq!(out, expected);
        // kubectl label node n1 a-
        let back = smp(out, json!({"metadata": {"labels": {"a": null}}}));
        assert_eq!(back, node());
    }

    #[test]
    fn kubectl_set_image_with_set_element_order() {
        let out = smp(
            pod(),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
                "containers": [{"image": "app:2", "name": "app"}],
            }}),
        );
        let mut expected = pod();
        expected["spec"]["containers"][0]["image"] = json!("app:2");
        assert_eq!(out, expected);
    }

    #[test]
    fn set_element_order_reorders() {
        let out = smp(
            pod(),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "new"}, {"name": "app"}],
                "containers": [{"name": "new", "image": "new:1"}],
            }}),
        );
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["sidecar", "new", "app"]);
        assert_eq!(
            out["spec"]["containers"][1],
            json!({"name": "new", "image": "new:1"})
        );
        assert_eq!(out["spec"]["containers"][2], pod()["spec"]["containers"][0]);
    }

    #[test]
    fn deployment_template_containers_merge_by_name() {
        let deploy = json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": 2, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "nginx", "image": "nginx:1.26", "env": [{"name": "A", "value": "1"}]},
                    {"name": "log", "image": "fluent:1"},
                ]},
            }},
        });
        // kubectl set image deployment/web nginx=nginx:1.27
        let out = smp(
            deploy.clone(),
            json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "nginx"}, {"name": "log"}],
                "containers": [{"image": "nginx:1.27", "name": "nginx"}],
            }}}}),
        );
        let mut expected = deploy.clone();
        expected["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
        assert_eq!(out, expected);
        // kubectl set env deployment/web B=2 (env merges by name inside the container)
        let out = smp(
            deploy.clone(),
            json!({"spec": {"template": {"spec": {"containers": [{
                "name": "nginx",
                "$setElementOrder/env": [{"name": "A"}, {"name": "B"}],
                "env": [{"name": "B", "value": "2"}],
            }]}}}}),
        );
        let mut expected = deploy;
        expected["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]);
        assert_eq!(out, expected);
    }

    #[test]
    fn status_conditions_update_by_type() {
        // The kubelet's node status patch: one condition changes, order is kept.
        let out = smp(
            node(),
            json!({"status": {
                "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
                "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}],
            }}),
        );
        let mut expected = node();
        expected["status"]["conditions"][1] =
            json!({"type": "Ready", "status": "False", "reason": "KubeletNotReady"});
        assert_eq!(out, expected);
        // Without an order directive, an updated condition keeps its place.
        let out = smp(
            node(),
            json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "Unknown", "reason": "KubeletReady"},
            ])
        );
    }

    #[test]
    fn pod_condition_added_and_pdb_conditions() {
        // A DisruptionTarget condition added to a pod with no conditions.
        let out = smp(
            json!({"metadata": {"name": "p"}, "status": {"phase": "Running"}}),
            json!({"status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "lastTransitionTime": null}]}}),
        );
        assert_eq!(
            out,
            json!({"metadata": {"name": "p"}, "status": {"phase": "Running", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
            ]}})
        );
        let pdb =
            json!({"status": {"conditions": [{"type": "DisruptionAllowed", "status": "True"}]}});
        let out = smp(
            pdb,
            json!({"status": {"conditions": [{"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods"}]}}),
        );
        assert_eq!(
            out,
            json!({"status": {"conditions": [{"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods"}]}})
        );
    }

    #[test]
    fn node_addresses_merge_by_type() {
        let out = smp(
            node(),
            json!({"status": {"addresses": [{"type": "ExternalIP", "address": "1.2.3.4"}]}}),
        );
        assert_eq!(
            out["status"]["addresses"],
            json!([
                {"type": "ExternalIP", "address": "1.2.3.4"},
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "Hostname", "address": "n1"},
            ])
        );
    }

    #[test]
    fn new_keyed_items_go_before_server_only_items() {
        // As in the Kubernetes docs' "kubectl patch" task: the new container comes first.
        let out = smp(
            pod(),
            json!({"spec": {"containers": [{"name": "new", "image": "redis"}]}}),
        );
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["new", "app", "sidecar"]);
        // Items known to both orders interleave by the object's order.
        let out = smp(
            pod(),
            json!({"spec": {"containers": [{"name": "sidecar", "image": "proxy:2"}, {"name": "new"}]}}),
        );
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["app", "sidecar", "new"]);
    }

    #[test]
    fn finalizers_merge_as_a_set_and_delete() {
        let out = smp(pod(), json!({"metadata": {"finalizers": ["b", "c"]}}));
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
        let out = smp(pod(), json!({"metadata": {"finalizers": ["c"]}}));
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));
        let out = smp(
            pod(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        let out = smp(
            pod(),
            json!({"metadata": {
                "$setElementOrder/finalizers": ["b", "c"],
                "$deleteFromPrimitiveList/finalizers": ["a"],
                "finalizers": ["c"],
            }}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "c"]));
        // Deleting from a missing list is a no-op.
        let out = smp(
            node(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        );
        assert_eq!(out, node());
    }

    #[test]
    fn owner_references_merge_by_uid() {
        let rs = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1", "controller": true}
        ]}});
        let out = smp(
            rs,
            json!({"metadata": {"ownerReferences": [{"uid": "u1", "blockOwnerDeletion": true}]}}),
        );
        assert_eq!(
            out,
            json!({"metadata": {"ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1", "controller": true, "blockOwnerDeletion": true}
            ]}})
        );
    }

    #[test]
    fn delete_directive_in_keyed_list() {
        let out = smp(
            pod(),
            json!({"spec": {"containers": [{"$patch": "delete", "name": "sidecar"}]}}),
        );
        let mut expected = pod();
        expected["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .remove(1);
        assert_eq!(out, expected);
        let err = smp_err(
            pod(),
            json!({"spec": {"containers": [{"$patch": "delete", "image": "x"}]}}),
        );
        assert_eq!(err.status_code(), 422);
    }

    #[test]
    fn replace_directive_in_keyed_list() {
        let out = smp(
            pod(),
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x", "args": null}]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "only", "image": "x"}])
        );
    }

    #[test]
    fn nested_keyed_lists_env_and_ports() {
        let out = smp(
            pod(),
            json!({"spec": {"containers": [{
                "name": "app",
                "env": [{"name": "A", "value": "9"}, {"name": "C", "value": "3"}, {"name": "B", "$patch": "delete"}],
                "ports": [{"containerPort": 80, "name": "http"}],
                "volumeMounts": [{"mountPath": "/data", "name": "data"}],
            }]}}),
        );
        assert_eq!(
            out["spec"]["containers"][0],
            json!({
                "name": "app",
                "image": "app:1",
                "env": [{"name": "A", "value": "9"}, {"name": "C", "value": "3"}],
                "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}],
                "volumeMounts": [{"mountPath": "/data", "name": "data"}],
            })
        );
        assert_eq!(out["spec"]["containers"][1], pod()["spec"]["containers"][1]);
    }

    #[test]
    fn map_directives() {
        let base = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "name": "x"}});
        let out = smp(
            base.clone(),
            json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
        );
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"c": "3"}, "name": "x"}})
        );
        let out = smp(
            base.clone(),
            json!({"metadata": {"labels": {"$patch": "delete"}}}),
        );
        assert_eq!(out, json!({"metadata": {"name": "x"}}));
        let out = smp(base.clone(), json!({"$patch": "delete"}));
        assert_eq!(out, json!({}));
        let err = smp_err(base, json!({"metadata": {"labels": {"$patch": "frob"}}}));
        assert_eq!(err.status_code(), 400);
    }

    #[test]
    fn retain_keys_clears_unlisted_fields() {
        let deploy = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let out = smp(
            deploy.clone(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": null}}}),
        );
        assert_eq!(out, json!({"spec": {"strategy": {"type": "Recreate"}}}));
        let err = smp_err(
            deploy,
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {"maxSurge": 2}}}}),
        );
        assert_eq!(err.status_code(), 400);
    }

    #[test]
    fn new_content_drops_nulls_and_directives() {
        let out = smp(
            json!({"metadata": {"name": "n"}}),
            json!({"spec": {
                "a": null,
                "b": {"c": null, "d": 1},
                "containers": [{"name": "x", "env": [{"name": "E", "value": null}]}],
                "gone": {"$patch": "delete"},
            }}),
        );
        assert_eq!(
            out,
            json!({"metadata": {"name": "n"}, "spec": {
                "b": {"d": 1},
                "containers": [{"name": "x", "env": [{"name": "E"}]}],
            }})
        );
    }

    #[test]
    fn empty_patch_list_is_a_no_op_for_merge_lists_but_clears_atomic_ones() {
        let out = smp(
            pod(),
            json!({"spec": {"containers": [], "tolerations": []}}),
        );
        let mut expected = pod();
        expected["spec"]["tolerations"] = json!([]);
        assert_eq!(out, expected);
    }

    #[test]
    fn type_mismatch_replaces() {
        let out = smp(
            json!({"spec": {"x": {"a": 1}, "y": [1]}}),
            json!({"spec": {"x": "s", "y": {"k": "v"}}}),
        );
        assert_eq!(out, json!({"spec": {"x": "s", "y": {"k": "v"}}}));
    }

    #[test]
    fn errors_leave_target_untouched() {
        // Keyed item without its merge key, after another field already changed.
        let err = smp_err(
            pod(),
            json!({"metadata": {"labels": {"z": "1"}}, "spec": {"containers": [{"image": "x"}]}}),
        );
        assert!(matches!(err, PatchError::Unprocessable(_)), "{err:?}");
        let err = smp_err(pod(), json!(["not", "an", "object"]));
        assert_eq!(err.status_code(), 400);
        let err = smp_err(
            pod(),
            json!({"metadata": {"$setElementOrder/finalizers": "a"}}),
        );
        assert_eq!(err.status_code(), 400);
        let err = smp_err(
            pod(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
        );
        assert_eq!(err.status_code(), 400);
        // A list of objects with a primitive-set strategy cannot merge.
        let err = smp_err(pod(), json!({"metadata": {"finalizers": [{"a": 1}]}}));
        assert_eq!(err.status_code(), 422);
    }

    #[test]
    fn custom_schema_closure() {
        let schema = |path: &[&str]| match path {
            ["items"] => ListStrategy::MergeByKey("id".into()),
            _ => ListStrategy::Replace,
        };
        let mut doc = json!({"items": [{"id": 1, "v": "a"}], "other": [1]});
        apply_strategic_merge_patch(
            &mut doc,
            &json!({"items": [{"id": 1.0, "w": "b"}], "other": [2]}),
            &schema,
        )
        .unwrap();
        // The key matched by numeric value; the patch's value then replaces the field.
        assert_eq!(
            doc,
            json!({"items": [{"id": 1.0, "v": "a", "w": "b"}], "other": [2]})
        );
    }

    #[test]
    fn kube_strategy_paths() {
        let s = KubeStrategy;
        let key = |k: &str| ListStrategy::MergeByKey(k.into());
        assert_eq!(s.list_strategy(&["spec", "taints"]), ListStrategy::Replace);
        assert_eq!(
            s.list_strategy(&["spec", "tolerations"]),
            ListStrategy::Replace
        );
        assert_eq!(
            s.list_strategy(&["spec", "podCIDRs"]),
            ListStrategy::MergePrimitives
        );
        assert_eq!(
            s.list_strategy(&["metadata", "finalizers"]),
            ListStrategy::MergePrimitives
        );
        assert_eq!(
            s.list_strategy(&["metadata", "ownerReferences"]),
            key("uid")
        );
        assert_eq!(s.list_strategy(&["spec", "containers"]), key("name"));
        assert_eq!(
            s.list_strategy(&["spec", "initContainers", "env"]),
            key("name")
        );
        assert_eq!(
            s.list_strategy(&["spec", "ephemeralContainers", "volumeMounts"]),
            key("mountPath")
        );
        assert_eq!(
            s.list_strategy(&["spec", "template", "spec", "containers", "ports"]),
            key("containerPort")
        );
        assert_eq!(
            s.list_strategy(&["spec", "template", "metadata", "finalizers"]),
            ListStrategy::MergePrimitives
        );
        assert_eq!(
            s.list_strategy(&["spec", "jobTemplate", "spec", "template", "spec", "volumes"]),
            key("name")
        );
        assert_eq!(s.list_strategy(&["spec", "imagePullSecrets"]), key("name"));
        assert_eq!(s.list_strategy(&["status", "conditions"]), key("type"));
        assert_eq!(s.list_strategy(&["status", "addresses"]), key("type"));
        assert_eq!(
            s.list_strategy(&["status", "containerStatuses"]),
            ListStrategy::Replace
        );
        assert_eq!(
            s.list_strategy(&["spec", "containers", "args"]),
            ListStrategy::Replace
        );
        assert_eq!(s.list_strategy(&["spec", "ports"]), key("port"));
    }
}
