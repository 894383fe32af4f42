//! Properties of the three patch types, on hostile documents (issue 18): arbitrary JSON built
//! from the words the strategic merge patch reacts to (its directives, the keyed and primitive
//! lists of [`KubeStrategy`]), patches nested as deep as `serde_json` lets a request body be,
//! and agreement with RFC 7386 where the strategic patch must behave as a merge patch. Each runs
//! `PROPTEST_CASES` cases (256 by default, fewer for the costly ones); failures found so far are
//! replayed first from `proptest-regressions/patch/fuzz.txt`.

use std::collections::BTreeSet;

use proptest::collection::{btree_map, btree_set, vec};
use proptest::prelude::*;
use serde_json::json;

use super::*;

/// Field names that steer the strategic merge patch: directives, and the paths of
/// [`KubeStrategy`]'s keyed lists, primitive sets and atomic lists, with their merge keys.
const KEYS: &[&str] = &[
    "$patch",
    "$retainKeys",
    "$setElementOrder/containers",
    "$setElementOrder/finalizers",
    "$setElementOrder/conditions",
    "$deleteFromPrimitiveList/finalizers",
    "$deleteFromPrimitiveList/containers",
    "metadata",
    "spec",
    "status",
    "template",
    "containers",
    "env",
    "ports",
    "finalizers",
    "conditions",
    "taints",
    "name",
    "type",
    "containerPort",
    "value",
    "a",
];

/// Plain field names: no directive, no list the schema merges.
const PLAIN_KEYS: &[&str] = &["a", "b", "c", "d", "name", "value", "é", ""];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![Just(0i64), Just(1), any::<i64>()].prop_map(Value::from),
        Just(json!(1.0)),
        prop::sample::select(vec![
            "replace", "delete", "merge", "a", "b", "c", "x", "", "$patch",
        ])
        .prop_map(Value::from),
    ]
}

/// Arbitrary JSON over [`KEYS`].
fn hostile_json() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(5, 48, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            btree_map(
                prop::sample::select(KEYS).prop_map(String::from),
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// JSON objects without lists and without directives: where a strategic merge patch is a
/// plain merge patch.
fn plain_object() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-c]{0,2}".prop_map(Value::from),
    ];
    let object = leaf.prop_recursive(4, 32, 4, |inner| {
        btree_map(
            prop::sample::select(PLAIN_KEYS).prop_map(String::from),
            inner,
            0..4,
        )
        .prop_map(|m| Value::Object(m.into_iter().collect()))
    });
    btree_map(
        prop::sample::select(PLAIN_KEYS).prop_map(String::from),
        object,
        0..4,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// A keyed list of objects with distinct keys, each built by `item` from its key.
fn keyed<S: Strategy<Value = Value>>(
    names: impl Strategy<Value = BTreeSet<String>>,
    item: impl Fn(String) -> S,
) -> impl Strategy<Value = Value> {
    names
        .prop_flat_map(move |names| names.into_iter().map(&item).collect::<Vec<_>>())
        .prop_map(Value::Array)
}

/// A Pod-shaped document as a client would patch it, or as the server holds it
/// (`with_nulls: false`): labels, finalizers, containers by name with env by name, atomic
/// tolerations.
fn pod_like(with_nulls: bool) -> impl Strategy<Value = Value> {
    let text = move || {
        if with_nulls {
            prop_oneof![Just(Value::Null), "[a-c]{1,2}".prop_map(Value::from)].boxed()
        } else {
            "[a-c]{1,2}".prop_map(Value::from).boxed()
        }
    };
    let env = keyed(btree_set("[A-C]", 0..3), move |name| {
        text().prop_map(move |value| json!({"name": name, "value": value}))
    })
    .boxed();
    let containers = keyed(btree_set("[p-s]", 0..3), move |name| {
        (text(), prop::option::of(env.clone())).prop_map(move |(image, env)| {
            let mut c = json!({"name": name, "image": image});
            if let Some(env) = env {
                c["env"] = env;
            }
            c
        })
    });
    (
        btree_map("[k-m]", text(), 0..3),
        prop::option::of(btree_set("[x-z]", 0..3)),
        prop::option::of(containers),
        prop::option::of(vec(Just(json!({"key": "k", "operator": "Exists"})), 0..2)),
    )
        .prop_map(|(labels, finalizers, containers, tolerations)| {
            let mut doc = json!({"metadata": {"labels": labels}, "spec": {}});
            if let Some(finalizers) = finalizers {
                doc["metadata"]["finalizers"] = json!(finalizers);
            }
            if let Some(containers) = containers {
                doc["spec"]["containers"] = containers;
            }
            if let Some(tolerations) = tolerations {
                doc["spec"]["tolerations"] = json!(tolerations);
            }
            doc
        })
}

/// A value nested `depth` levels deep, through objects or through keyed lists.
fn nested(depth: usize, through_lists: bool) -> Value {
    let mut v = json!({"name": "x", "$patch": "replace"});
    for level in 0..depth {
        v = if through_lists && level % 2 == 1 {
            json!([v])
        } else {
            json!({ "containers": v, "name": "x" })
        };
    }
    v
}

/// What a patch of [`pod_like`] shape must do, written out field by field: labels merge (null
/// deletes), finalizers gain the patch's values, containers merge by name and their env by
/// name (null deletes a field, a new item keeps no null), tolerations are replaced. Lists come
/// back sorted (see [`sorted_lists`]), since their order has rules of its own.
fn pod_like_reference(target: &Value, patch: &Value) -> Value {
    fn merge_fields(into: &mut Map<String, Value>, patch: &Map<String, Value>) {
        for (k, v) in patch {
            if v.is_null() {
                into.remove(k);
            } else {
                into.insert(k.clone(), v.clone());
            }
        }
    }
    fn merge_by_name(target: Option<&Value>, patch: &Value, nested: Option<&str>) -> Value {
        let mut items: Vec<Map<String, Value>> = target
            .and_then(Value::as_array)
            .map(|l| l.iter().map(|v| v.as_object().unwrap().clone()).collect())
            .unwrap_or_default();
        for p in patch.as_array().unwrap() {
            let p = p.as_object().unwrap();
            let position = items.iter().position(|i| i["name"] == p["name"]);
            let item = match position {
                Some(i) => &mut items[i],
                None => {
                    items.push(Map::new());
                    items.last_mut().unwrap()
                }
            };
            let mut flat = p.clone();
            if let Some(field) = nested {
                flat.remove(field);
            }
            merge_fields(item, &flat);
            if let Some(field) = nested
                && let Some(list) = p.get(field)
            {
                let merged = merge_by_name(item.get(field), list, None);
                item.insert(field.to_string(), merged);
            }
        }
        items.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        Value::Array(items.into_iter().map(Value::Object).collect())
    }
    let mut out = target.clone();
    let labels = out["metadata"]["labels"].as_object_mut().unwrap();
    merge_fields(labels, patch["metadata"]["labels"].as_object().unwrap());
    if let Some(added) = patch["metadata"].get("finalizers") {
        let all: BTreeSet<String> = out["metadata"]
            .get("finalizers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .chain(added.as_array().unwrap())
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        out["metadata"]["finalizers"] = json!(all);
    }
    if let Some(containers) = patch["spec"].get("containers") {
        out["spec"]["containers"] =
            merge_by_name(target["spec"].get("containers"), containers, Some("env"));
    } else if let Some(containers) = target["spec"].get("containers") {
        out["spec"]["containers"] = merge_by_name(Some(containers), &json!([]), Some("env"));
    }
    if let Some(tolerations) = patch["spec"].get("tolerations") {
        out["spec"]["tolerations"] = tolerations.clone();
    }
    sorted_lists(out)
}

/// [`pod_like`] lists in the reference's order.
fn sorted_lists(mut doc: Value) -> Value {
    if let Some(finalizers) = doc["metadata"]
        .get_mut("finalizers")
        .and_then(Value::as_array_mut)
    {
        finalizers.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    }
    if let Some(containers) = doc["spec"]
        .get_mut("containers")
        .and_then(Value::as_array_mut)
    {
        containers.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        for c in containers {
            if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
                env.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            }
        }
    }
    doc
}

/// Every list merged by the key `name` (or as a set of primitives): the widest use of the
/// merge code a schema can ask for.
fn merge_everything(_: &[&str]) -> ListStrategy {
    ListStrategy::MergeByKey("name".into())
}

fn apply(target: &Value, patch: &Value, schema: &dyn StrategySchema) -> Result<Value, PatchError> {
    let mut doc = target.clone();
    let result = apply_strategic_merge_patch(&mut doc, patch, schema);
    match result {
        Ok(()) => Ok(doc),
        Err(e) => {
            assert_eq!(&doc, target, "{e} left the target changed");
            Err(e)
        }
    }
}

proptest! {
    /// Hostile documents are applied or refused, never a panic; a refusal leaves the target
    /// as it was (checked in `apply`) and a success leaves an object.
    #[test]
    fn strategic_merge_patch_never_panics(target in hostile_json(), patch in hostile_json()) {
        for schema in [&KubeStrategy as &dyn StrategySchema, &merge_everything] {
            if let Ok(doc) = apply(&target, &patch, schema) {
                prop_assert!(doc.is_object());
            }
        }
    }

    /// A strategic merge patch without lists and directives is an RFC 7386 merge patch.
    #[test]
    fn without_lists_it_is_a_merge_patch(target in hostile_json(), patch in plain_object()) {
        let strategic = apply(&target, &patch, &KubeStrategy);
        let mut merged = target.clone();
        apply_merge_patch(&mut merged, &patch).unwrap();
        prop_assert_eq!(strategic, Ok(merged));
    }

    /// Applying the same patch twice changes nothing the first application did not: what
    /// `kubectl apply` and every retried PATCH rely on.
    #[test]
    fn a_patch_applied_twice_is_applied_once(target in pod_like(false), patch in pod_like(true)) {
        let once = apply(&target, &patch, &KubeStrategy);
        prop_assert!(once.is_ok(), "{once:?}");
        let once = once.unwrap();
        prop_assert_eq!(apply(&once, &patch, &KubeStrategy), Ok(once.clone()));
    }

    /// A Pod-shaped patch does, field by field, what Kubernetes' merge rules say (see
    /// `pod_like_reference`).
    #[test]
    fn keyed_lists_and_sets_merge_as_kubernetes_says(
        target in pod_like(false),
        patch in pod_like(true),
    ) {
        let merged = apply(&target, &patch, &KubeStrategy);
        prop_assert!(merged.is_ok(), "{merged:?}");
        prop_assert_eq!(sorted_lists(merged.unwrap()), pod_like_reference(&target, &patch));
    }

    /// JSON patches of any shape are applied or refused, never a panic, all or nothing.
    #[test]
    fn json_patch_never_panics(
        target in hostile_json(),
        ops in vec(
            (
                prop::sample::select(vec!["add", "remove", "replace", "move", "copy", "test", "x"]),
                prop::sample::select(vec![
                    "", "/", "/a", "/a/0", "/a/-", "/a/99999999999999999999", "/~0", "/~1",
                    "/~2", "a", "/metadata/finalizers/0", "/spec/containers/-",
                ]),
                hostile_json(),
            ),
            0..4,
        ),
    ) {
        let ops: Vec<Value> = ops
            .into_iter()
            .map(|(op, path, value)| json!({"op": op, "path": path, "from": path, "value": value}))
            .collect();
        let mut doc = target.clone();
        if apply_json_patch(&mut doc, &Value::Array(ops)).is_err() {
            prop_assert_eq!(doc, target);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: ProptestConfig::default().cases / 8,
        ..ProptestConfig::default()
    })]

    /// A patch nested as deep as `serde_json` decodes a request body (128 levels) is applied
    /// without exhausting the stack, through objects and through keyed lists.
    #[test]
    fn deep_patches_fit_the_stack(depth in 1usize..127, through_lists in any::<bool>()) {
        let patch = nested(depth, through_lists);
        // Built as text and decoded, as a request body is.
        let text = patch.to_string();
        let Ok(decoded) = serde_json::from_str::<Value>(&text) else {
            return Ok(());
        };
        let target = nested(depth, !through_lists);
        let _ = apply(&target, &json!({ "spec": decoded.clone() }), &KubeStrategy);
        let _ = apply(&target, &json!({ "spec": decoded.clone() }), &merge_everything);
        let _ = apply(&json!({}), &json!({ "spec": decoded }), &merge_everything);
    }
}
