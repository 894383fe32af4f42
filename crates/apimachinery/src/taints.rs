//! Taints and tolerations, as Kubernetes matches them (`Toleration.ToleratesTaint` in
//! k8s.io/api core/v1, and the scheduler's TaintToleration filter): used by the drainer to leave
//! pods that tolerate the drain taint, and by rotor-sim's scheduler and autoscaler to place pods.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Whether `toleration` tolerates `taint`: its effect is empty or the taint's, its key is empty
/// or the taint's, and then operator `Exists`, or `Equal` (the default) with the same value. An
/// unknown operator tolerates nothing. An empty key with `Exists` therefore tolerates every
/// taint.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// Whether any of `tolerations` tolerates `taint`.
pub fn tolerated_by_any(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// Whether a taint keeps pods that do not tolerate it off the node: `NoSchedule` and
/// `NoExecute` do; `PreferNoSchedule` only asks the scheduler to avoid the node.
pub fn keeps_pods_off(taint: &Taint) -> bool {
    matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
}

/// The first of `taints` that keeps pods off and that none of `tolerations` tolerates: what
/// makes the scheduler refuse the node ("node(s) had untolerated taint").
pub fn untolerated<'a>(tolerations: &[Toleration], taints: &'a [Taint]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| keeps_pods_off(t))
        .find(|t| !tolerated_by_any(tolerations, t))
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Toleration {
            key: some(key),
            operator: some(operator),
            value: some(value),
            effect: some(effect),
            toleration_seconds: None,
        }
    }

    #[test]
    fn tolerations_match_as_kubernetes_does() {
        let drain = taint("rotor.dev/drain", Some("ami"), "NoSchedule");
        // (key, operator, value, effect, tolerates the drain taint)
        let cases = [
            ("", "Exists", "", "", true),
            ("", "Exists", "", "NoSchedule", true),
            ("", "Exists", "", "NoExecute", false),
            ("rotor.dev/drain", "Exists", "", "", true),
            ("rotor.dev/drain", "Exists", "other", "", true),
            ("rotor.dev/drain", "", "ami", "", true),
            ("rotor.dev/drain", "Equal", "ami", "NoSchedule", true),
            ("rotor.dev/drain", "Equal", "kubelet", "", false),
            ("rotor.dev/drain", "Equal", "", "", false),
            ("other", "Exists", "", "", false),
            // An empty key with Equal compares values only (admission refuses it; the matcher
            // is still defined for it).
            ("", "Equal", "ami", "", true),
            ("rotor.dev/drain", "Gt", "ami", "", false),
        ];
        for (key, operator, value, effect, expected) in cases {
            let t = toleration(key, operator, value, effect);
            assert_eq!(tolerates(&t, &drain), expected, "{t:?}");
        }
        assert!(tolerates(
            &toleration("k", "Equal", "", ""),
            &taint("k", None, "NoSchedule")
        ));
    }

    /// The shared case table (`tests/cases/semantics.json`), which rotor-sim and the real control
    /// plane also answer (`tests/tests/semantics.rs`).
    #[test]
    fn the_shared_toleration_cases() {
        let table: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/cases/semantics.json")).unwrap();
        let taint: Taint = serde_json::from_value(table["taint"].clone()).unwrap();
        let cases = table["tolerations"].as_array().unwrap();
        assert!(cases.len() >= 10);
        for case in cases {
            let tolerations: Vec<Toleration> = case["toleration"]
                .as_object()
                .map(|t| vec![serde_json::from_value(t.clone().into()).unwrap()])
                .unwrap_or_default();
            assert_eq!(
                tolerated_by_any(&tolerations, &taint),
                case["tolerates"].as_bool().unwrap(),
                "{}",
                case["name"]
            );
        }
    }

    #[test]
    fn only_taints_that_keep_pods_off_can_be_untolerated() {
        let prefer = taint("a", None, "PreferNoSchedule");
        let no_execute = taint("b", None, "NoExecute");
        let taints = [prefer.clone(), no_execute.clone()];
        assert_eq!(untolerated(&[], &taints), Some(&no_execute));
        let tolerate_b = [toleration("b", "Exists", "", "")];
        assert_eq!(untolerated(&tolerate_b, &taints), None);
        assert!(!keeps_pods_off(&prefer));
    }
}
