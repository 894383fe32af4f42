//! rotor's per-pool policy API. [`resource`] defines the `RotationPolicy` resource
//! (`rotor.dev/v1alpha1`), [`drain_rule`] the `DrainRule`; [`crds`] renders their
//! CustomResourceDefinitions, which `deploy/` and the Helm chart ship (a test keeps the committed
//! files equal to them); [`priority`] settles which policy governs a node several select. How
//! the drainer reads a policy is the drainer's business (`rotor_drainer::fleet::pools`).

pub mod drain_rule;
pub mod priority;
pub mod resource;

pub use drain_rule::{DrainBehavior, DrainRule, DrainRuleSpec, NodeSelection, PodSelection};
pub use priority::highest_priority;
pub use resource::{
    LabelRequirement, LabelSelectorSpec, PolicyBudget, PolicyCondition, PoolDrainSettings,
    RotationPolicy, RotationPolicySpec, RotationPolicyStatus, SelectorOperator,
};

use kube::CustomResourceExt;

/// Where the generated CRDs are committed, relative to the workspace root: the kustomize base
/// and the Helm chart's `crds/` (which Helm installs before the templates and never deletes).
pub const CRD_DIRS: [&str; 2] = ["deploy/base/crds", "deploy/helm/rotor/crds"];

/// Each CRD as `(file name, YAML)`, the YAML with a header saying it is generated.
pub fn crds() -> Vec<(String, String)> {
    [RotationPolicy::crd(), DrainRule::crd()]
        .into_iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let yaml = serde_saphyr::to_string(&crd).expect("a CRD serialises to YAML");
            let text = format!(
                "# Generated from crates/policy/src; do not edit. Regenerate with\n\
                 # `ROTOR_WRITE_CRDS=1 cargo test -p rotor-policy --test crd`.\n{yaml}"
            );
            (format!("{name}.yaml"), text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::Value;

    use crate::{DrainRule, RotationPolicy};

    /// Every integer in the CRDs' schemas as `(CRD, path, minimum, maximum)`, a bound `None`
    /// where the schema lacks it.
    fn integers() -> Vec<(String, String, Option<f64>, Option<f64>)> {
        fn walk(schema: &Value, path: &str, out: &mut Vec<(String, Option<f64>, Option<f64>)>) {
            match schema {
                Value::Object(fields) => {
                    if fields.get("type").and_then(Value::as_str) == Some("integer") {
                        let bound = |key: &str| fields.get(key).and_then(Value::as_f64);
                        out.push((path.to_string(), bound("minimum"), bound("maximum")));
                    }
                    for (key, value) in fields {
                        walk(value, &format!("{path}.{key}"), out);
                    }
                }
                Value::Array(items) => {
                    for (i, value) in items.iter().enumerate() {
                        walk(value, &format!("{path}[{i}]"), out);
                    }
                }
                _ => {}
            }
        }
        let mut all = Vec::new();
        for crd in [RotationPolicy::crd(), DrainRule::crd()] {
            let name = crd.metadata.name.clone().unwrap_or_default();
            for version in &crd.spec.versions {
                let schema = version
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref());
                let schema = serde_json::to_value(schema).expect("a schema serialises");
                let mut found = Vec::new();
                walk(&schema, "", &mut found);
                all.extend(
                    found
                        .into_iter()
                        .map(|(path, min, max)| (name.clone(), path, min, max)),
                );
            }
        }
        all
    }

    #[test]
    fn every_integer_field_of_the_crds_is_bounded() {
        let integers = integers();
        let unbounded: Vec<_> = integers
            .iter()
            .filter(|(_, _, min, max)| min.is_none() || max.is_none())
            .map(|(crd, path, _, _)| format!("{crd}: {path}"))
            .collect();
        assert!(
            unbounded.is_empty(),
            "an integer field without both a minimum and a maximum: the API server stores any \
             value there, and a value the Rust type cannot hold fails the drainer's decoding of \
             the whole list; give it #[schemars(range(min = ..., max = ...))]: {unbounded:#?}"
        );
        // The walk found the fields (it did not pass by finding none).
        let paths: Vec<&str> = integers.iter().map(|(_, p, _, _)| p.as_str()).collect();
        for field in [
            ".properties.spec.properties.priority",
            ".properties.spec.properties.order",
            ".properties.status.properties.nodes",
            ".properties.status.properties.observedGeneration",
        ] {
            assert!(paths.contains(&field), "{field} not among {paths:#?}");
        }
    }

    #[test]
    fn priority_and_order_are_bounded_to_the_i32_range() {
        let bounds = |field: &str| {
            integers()
                .into_iter()
                .find(|(_, path, _, _)| path.ends_with(&format!(".spec.properties.{field}")))
                .map(|(_, _, min, max)| (min, max))
        };
        let i32_range = Some((Some(f64::from(i32::MIN)), Some(f64::from(i32::MAX))));
        assert_eq!(bounds("priority"), i32_range);
        assert_eq!(bounds("order"), i32_range);
    }

    /// The schema's bounds are exactly what the types decode: a value at a bound reads, one
    /// past it fails, as it would fail the drainer's decoding of the list.
    #[test]
    fn the_bounds_are_what_the_drainer_can_decode() {
        /// `object` with `value` at the schema path `path` (`.properties.spec.properties.x`),
        /// making the objects, lists (one item) and map entries on the way.
        fn with(mut object: Value, path: &str, value: i64) -> Value {
            let mut at = &mut object;
            for segment in path
                .split('.')
                .filter(|s| !s.is_empty() && *s != "properties")
            {
                at = match segment {
                    "items" => {
                        if at.as_array().is_none_or(Vec::is_empty) {
                            *at = serde_json::json!([{}]);
                        }
                        &mut at[0]
                    }
                    "additionalProperties" => &mut at["key"],
                    field => {
                        if !at.is_object() {
                            *at = serde_json::json!({});
                        }
                        &mut at[field]
                    }
                };
            }
            *at = value.into();
            object
        }
        for (crd, path, min, max) in integers() {
            let (min, max) = (min.unwrap() as i64, max.unwrap() as i64);
            let decodes = |value: i64| {
                if crd.starts_with("drainrules.") {
                    let base = serde_json::json!({
                        "apiVersion": "rotor.dev/v1alpha1", "kind": "DrainRule",
                        "metadata": {"name": "r"},
                        "spec": {"behavior": "Drain", "pods": [{"selector": {}}]},
                    });
                    serde_json::from_value::<DrainRule>(with(base, &path, value)).is_ok()
                } else {
                    let base = serde_json::json!({
                        "apiVersion": "rotor.dev/v1alpha1", "kind": "RotationPolicy",
                        "metadata": {"name": "p"}, "spec": {},
                    });
                    serde_json::from_value::<RotationPolicy>(with(base, &path, value)).is_ok()
                }
            };
            assert!(
                decodes(min) && decodes(max),
                "{crd} {path}: a bound does not decode"
            );
            // observedGeneration's bound is tighter than its i64, on purpose (see its doc).
            if !path.ends_with(".observedGeneration") {
                assert!(
                    !decodes(min - 1) && !decodes(max + 1),
                    "{crd} {path}: the type decodes beyond the schema's bounds"
                );
            }
        }
    }
}
