//! Which pods a PodDisruptionBudget covers (policy/v1), as the disruption controller (counting
//! the pods for the budget's status) and the Eviction API (consulting the budgets covering a pod
//! before it lets the pod go) both read the selector: a null selector covers no pod, an empty one
//! (`{}`) every pod of the budget's namespace. (Releases that still served policy/v1beta1 had the
//! Eviction API skip empty selectors; the 1.36 API server refuses an eviction under a `{}` budget
//! with 429, as `tests/tests/real_hostile.rs` shows.)
//!
//! A budget covers only pods of its own namespace; an invalid selector covers nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::labels::LabelSelector;

/// The budget's selector; `None` when it covers no pod at all.
pub fn budget_selector(pdb: &PodDisruptionBudget) -> Option<LabelSelector> {
    let selector = pdb.spec.as_ref().and_then(|spec| spec.selector.as_ref());
    let selector = LabelSelector::from_k8s(selector).ok()?;
    if selector.is_nothing() {
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

    fn covers(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
        budget_selector(pdb).is_some_and(|s| budget_covers(pdb, &s, pod))
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
            // The two readers agree; the table keeps a column for each, which the real control
            // plane answers.
            for field in ["controller", "eviction"] {
                let mut covered: Vec<&str> = pods
                    .iter()
                    .filter(|p| covers(&budget, p))
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
    fn the_selector_is_read_as_kubernetes_reads_it() {
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
        // (budget selector, pod namespace, pod app, covered)
        let cases = [
            (web(), "shop", "web", true),
            (web(), "shop", "api", false),
            (web(), "other", "web", false),
            (not_web.clone(), "shop", "api", true),
            (not_web, "shop", "web", false),
            // Empty: every pod of the namespace, for the Eviction API too.
            (Some(K8sSelector::default()), "shop", "web", true),
            (Some(K8sSelector::default()), "other", "web", false),
            (None, "shop", "web", false),
        ];
        for (selector, namespace, app, covered) in cases {
            let (budget, pod) = (pdb(selector), pod(namespace, app));
            assert_eq!(
                covers(&budget, &pod),
                covered,
                "{:?} over {namespace}/{app}",
                budget.spec.as_ref().unwrap().selector
            );
        }
    }
}
