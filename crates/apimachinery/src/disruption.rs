//! Which pods a PodDisruptionBudget covers (policy/v1). Two readers of the same selector differ,
//! and both are written here once:
//! - the disruption controller, which counts the pods for the budget's status: a null selector
//!   covers no pod, an empty one (`{}`) every pod of the budget's namespace;
//! - the Eviction API, which consults the budgets covering a pod before it lets the pod go: it
//!   skips empty selectors ("it should match nothing, not everything"), so a budget with `{}`
//!   reports a status but never refuses an eviction.
//!
//! A budget covers only pods of its own namespace; an invalid selector covers nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::labels::LabelSelector;

/// Who reads a budget's selector (see the module header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectorReader {
    DisruptionController,
    Eviction,
}

/// The budget's selector as `reader` reads it; `None` when it covers no pod at all.
pub fn budget_selector(pdb: &PodDisruptionBudget, reader: SelectorReader) -> Option<LabelSelector> {
    let selector = pdb.spec.as_ref().and_then(|spec| spec.selector.as_ref());
    let selector = LabelSelector::from_k8s(selector).ok()?;
    if selector.is_nothing() || (reader == SelectorReader::Eviction && selector.is_empty()) {
        return None;
    }
    Some(selector)
}

/// Whether `pdb`, read through `selector` (from [`budget_selector`]), covers `pod`.
pub fn budget_covers(pdb: &PodDisruptionBudget, selector: &LabelSelector, pod: &Pod) -> bool {
    let empty = BTreeMap::new();
    pdb.metadata.namespace == pod.metadata.namespace
        && selector.matches(pod.metadata.labels.as_ref().unwrap_or(&empty))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelector as K8sSelector, LabelSelectorRequirement, ObjectMeta,
    };
    use serde_json::json;

    use super::*;
    use SelectorReader::{DisruptionController, Eviction};

    fn pod(namespace: &str, app: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": namespace, "labels": {"app": app}}
        }))
        .unwrap()
    }

    fn pdb(selector: Option<K8sSelector>) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("b".into()),
                namespace: Some("shop".into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec {
                selector,
                ..Default::default()
            }),
            status: None,
        }
    }

    fn covers(pdb: &PodDisruptionBudget, reader: SelectorReader, pod: &Pod) -> bool {
        budget_selector(pdb, reader).is_some_and(|s| budget_covers(pdb, &s, pod))
    }

    /// The shared case table (`tests/cases/semantics.json`), which rotor-sim and the real control
    /// plane also answer (`tests/tests/semantics.rs`).
    #[test]
    fn the_shared_budget_cases() {
        let table: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/cases/semantics.json")).unwrap();
        let budgets = &table["budgets"];
        let pods: Vec<Pod> = budgets["pods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                serde_json::from_value(json!({"metadata": {
                    "name": p["name"], "namespace": p["namespace"], "labels": p["labels"]}}))
                .unwrap()
            })
            .collect();
        for case in budgets["cases"].as_array().unwrap() {
            let budget: PodDisruptionBudget = serde_json::from_value(json!({
                "metadata": {"name": case["name"], "namespace": budgets["namespace"]},
                "spec": {"selector": case["selector"], "minAvailable": 0}
            }))
            .unwrap();
            for (reader, field) in [(DisruptionController, "controller"), (Eviction, "eviction")] {
                let mut covered: Vec<&str> = pods
                    .iter()
                    .filter(|p| covers(&budget, reader, p))
                    .map(|p| p.metadata.name.as_deref().unwrap())
                    .collect();
                covered.sort();
                let expected: Vec<&str> = case[field]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n.as_str().unwrap())
                    .collect();
                assert_eq!(covered, expected, "{} for the {field}", case["name"]);
            }
        }
    }

    #[test]
    fn each_reader_sees_the_selector_as_kubernetes_does() {
        let web = || {
            Some(K8sSelector {
                match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                match_expressions: None,
            })
        };
        let not_web = Some(K8sSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: "NotIn".into(),
                values: Some(vec!["web".into()]),
            }]),
        });
        // (budget selector, pod namespace, pod app, covered for the controller, for eviction)
        let cases = [
            (web(), "shop", "web", true, true),
            (web(), "shop", "api", false, false),
            (web(), "other", "web", false, false),
            (not_web.clone(), "shop", "api", true, true),
            (not_web, "shop", "web", false, false),
            (Some(K8sSelector::default()), "shop", "web", true, false),
            (None, "shop", "web", false, false),
        ];
        for (selector, namespace, app, controller, eviction) in cases {
            let (budget, pod) = (pdb(selector), pod(namespace, app));
            assert_eq!(
                (
                    covers(&budget, DisruptionController, &pod),
                    covers(&budget, Eviction, &pod)
                ),
                (controller, eviction),
                "{:?} over {namespace}/{app}",
                budget.spec.as_ref().unwrap().selector
            );
        }
    }
}
