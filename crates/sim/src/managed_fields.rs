//! managedFields kept once for every object that carries the same ones.
//!
//! A stored pod's two managedFields entries (the controller's and the kubelet's) hold
//! `fieldsV1` trees that are the same for every pod the simulator makes, and a JSON tree costs a
//! B-tree node of about 640 bytes per object in it: about 8 KB a pod, more than half of it. The
//! store therefore keeps each distinct `fieldsV1` tree once, in a table shared by every
//! collection, and leaves in the object only a placeholder, a number no client writes
//! (`PLACEHOLDER_BASE` plus the tree's index). Whatever the simulator writes out (API
//! answers, watch events, tables) goes through [`write_json`] or [`to_value`], which put the
//! trees back: clients see the objects exactly as before.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ObjectMeta};
use serde::Serialize;
use serde_json::Value;

/// Placeholders are `PLACEHOLDER_BASE + index`: negative numbers near `i64::MIN`, never a
/// `fieldsV1` (a real one is a JSON object).
const PLACEHOLDER_BASE: i64 = i64::MIN / 2;

#[derive(Default)]
struct Table {
    /// Each distinct tree, with its compact JSON.
    trees: Vec<(Arc<Value>, Arc<[u8]>)>,
    /// A tree's compact JSON to its index.
    index: HashMap<Arc<[u8]>, usize>,
}

static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(Mutex::default);

fn table() -> std::sync::MutexGuard<'static, Table> {
    // The table is only ever appended to: a panic elsewhere cannot leave it inconsistent.
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn placeholder_index(v: &Value) -> Option<usize> {
    let n = v.as_i64()?;
    let i = n.checked_sub(PLACEHOLDER_BASE)?;
    (n < 0 && (0..1 << 40).contains(&i)).then_some(i as usize)
}

/// Replaces every `fieldsV1` tree in `meta` with its placeholder, adding new trees to the table.
pub fn compact(meta: &mut ObjectMeta) {
    let Some(entries) = meta.managed_fields.as_mut() else {
        return;
    };
    for e in entries {
        let Some(FieldsV1(v)) = e.fields_v1.as_mut() else {
            continue;
        };
        if placeholder_index(v).is_some() {
            continue;
        }
        let json: Arc<[u8]> = serde_json::to_vec(v).unwrap_or_default().into();
        let mut t = table();
        let i = match t.index.get(&json) {
            Some(i) => *i,
            None => {
                let i = t.trees.len();
                let tree = Arc::new(std::mem::take(v));
                t.trees.push((tree, json.clone()));
                t.index.insert(json, i);
                i
            }
        };
        *v = Value::from(PLACEHOLDER_BASE + i as i64);
    }
}

/// The tree a placeholder stands for.
fn tree(i: usize) -> Option<(Arc<Value>, Arc<[u8]>)> {
    table().trees.get(i).cloned()
}

/// Puts the trees back into `meta` (the inverse of [`compact`]).
pub fn expand(meta: &mut ObjectMeta) {
    for e in meta.managed_fields.iter_mut().flatten() {
        if let Some(FieldsV1(v)) = e.fields_v1.as_mut()
            && let Some((t, _)) = placeholder_index(v).and_then(tree)
        {
            *v = (*t).clone();
        }
    }
}

/// A stored object as JSON, with its managedFields trees in place.
pub fn to_value<K: Serialize>(obj: &K) -> serde_json::Result<Value> {
    let mut v = serde_json::to_value(obj)?;
    if let Some(entries) = v
        .get_mut("metadata")
        .and_then(|m| m.get_mut("managedFields"))
        .and_then(Value::as_array_mut)
    {
        for e in entries {
            if let Some(f) = e.get_mut("fieldsV1")
                && let Some((t, _)) = placeholder_index(f).and_then(tree)
            {
                *f = (*t).clone();
            }
        }
    }
    Ok(v)
}

/// Appends a stored object's JSON to `out`, with its managedFields trees in place.
///
/// The placeholders are found in the output: in serde_json's compact output `"fieldsV1":` can
/// only be an object key (inside a string its quotes would be escaped), and a placeholder is
/// the number that follows it.
pub fn write_json<K: Serialize>(out: &mut Vec<u8>, obj: &K) -> serde_json::Result<()> {
    const KEY: &[u8] = b"\"fieldsV1\":";
    let start = out.len();
    serde_json::to_writer(&mut *out, obj)?;
    if !out[start..].windows(KEY.len()).any(|w| w == KEY) {
        return Ok(());
    }
    let written = out.split_off(start);
    let mut rest = &written[..];
    while let Some(at) = rest.windows(KEY.len()).position(|w| w == KEY) {
        let value_at = at + KEY.len();
        out.extend_from_slice(&rest[..value_at]);
        rest = &rest[value_at..];
        let len = rest
            .iter()
            .position(|b| !(b.is_ascii_digit() || *b == b'-'))
            .unwrap_or(rest.len());
        let tree = std::str::from_utf8(&rest[..len])
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .and_then(|n| placeholder_index(&Value::from(n)))
            .and_then(tree);
        if let Some((_, json)) = tree {
            out.extend_from_slice(&json);
            rest = &rest[len..];
        }
    }
    out.extend_from_slice(rest);
    Ok(())
}

/// A stored object's JSON, with its managedFields trees in place.
pub fn to_vec<K: Serialize>(obj: &K) -> Vec<u8> {
    let mut out = Vec::with_capacity(2048);
    let _ = write_json(&mut out, obj);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use serde_json::json;

    fn pod(fields: Value) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                annotations: Some([("note".to_string(), "\"fieldsV1\":-1".to_string())].into()),
                managed_fields: Some(vec![
                    ManagedFieldsEntry {
                        manager: Some("kubelet".into()),
                        fields_v1: Some(FieldsV1(fields)),
                        ..Default::default()
                    },
                    ManagedFieldsEntry {
                        manager: Some("other".into()),
                        fields_v1: Some(FieldsV1(json!({"f:spec": {"f:x": {}}}))),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn compacted_objects_write_out_as_before() {
        let original = pod(json!({"f:status": {"f:phase": {}, "f:conditions": {".": {}}}}));
        let mut stored = original.clone();
        compact(&mut stored.metadata);
        assert_ne!(stored, original);
        let f = |p: &Pod| p.metadata.managed_fields.as_ref().unwrap()[0].clone();
        assert!(f(&stored).fields_v1.unwrap().0.is_i64());
        assert_eq!(to_vec(&stored), serde_json::to_vec(&original).unwrap());
        assert_eq!(
            to_value(&stored).unwrap(),
            serde_json::to_value(&original).unwrap()
        );
        let mut back = stored.clone();
        expand(&mut back.metadata);
        assert_eq!(back, original);
        // Compacting again changes nothing; the same tree elsewhere shares its entry.
        let again = {
            let mut p = stored.clone();
            compact(&mut p.metadata);
            p
        };
        assert_eq!(again, stored);
        let mut twin = original.clone();
        compact(&mut twin.metadata);
        assert_eq!(twin, stored);
    }

    #[test]
    fn numbers_a_client_wrote_are_kept() {
        let original = pod(json!(-5));
        let mut stored = original.clone();
        compact(&mut stored.metadata);
        assert_eq!(to_vec(&stored), serde_json::to_vec(&original).unwrap());
        let mut out = b"[".to_vec();
        write_json(&mut out, &stored).unwrap();
        out.push(b']');
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v[0], serde_json::to_value(&original).unwrap());
    }
}
