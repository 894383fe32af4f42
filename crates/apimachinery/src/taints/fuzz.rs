//! Properties of toleration matching (issue 18), on taints and tolerations as anyone may write
//! them on nodes and pods: unknown operators and effects, empty and near-miss keys and values.
//! Each runs `PROPTEST_CASES` cases (256 by default); failures found so far are replayed first
//! from `proptest-regressions/taints/fuzz.txt`.

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

fn text(words: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(words).prop_map(String::from),
        any::<String>(),
    ]
}

const KEYS: &[&str] = &[
    "rotor.dev/drain",
    "rotor.dev/drain ",
    "Rotor.dev/drain",
    "other",
    "",
];
const VALUES: &[&str] = &["ami", "manual", "Manual", ""];
const EFFECTS: &[&str] = &[
    "NoSchedule",
    "PreferNoSchedule",
    "NoExecute",
    "noschedule",
    "",
];
const OPERATORS: &[&str] = &["Equal", "Exists", "", "exists", "Gt", "In"];

fn taint() -> impl Strategy<Value = Taint> {
    (text(KEYS), prop::option::of(text(VALUES)), text(EFFECTS)).prop_map(|(key, value, effect)| {
        Taint {
            key,
            value,
            effect,
            time_added: None,
        }
    })
}

fn toleration() -> impl Strategy<Value = Toleration> {
    let some = |words| prop::option::of(text(words));
    (some(KEYS), some(OPERATORS), some(VALUES), some(EFFECTS)).prop_map(
        |(key, operator, value, effect)| Toleration {
            key,
            operator,
            value,
            effect,
            toleration_seconds: None,
        },
    )
}

proptest! {
    /// A toleration tolerates a taint exactly as `Toleration.ToleratesTaint` says, field by
    /// field; an absent field is the empty string.
    #[test]
    fn tolerations_match_field_by_field(t in toleration(), taint in taint()) {
        let field = |f: &Option<String>| f.clone().unwrap_or_default();
        let effect_fits = field(&t.effect).is_empty() || field(&t.effect) == taint.effect;
        let key_fits = field(&t.key).is_empty() || field(&t.key) == taint.key;
        let operator_fits = match field(&t.operator).as_str() {
            "" | "Equal" => field(&t.value) == field(&taint.value),
            "Exists" => true,
            _ => false,
        };
        prop_assert_eq!(tolerates(&t, &taint), effect_fits && key_fits && operator_fits);
        // The taint's own toleration, and a bare `Exists`, tolerate it.
        let own = Toleration {
            key: Some(taint.key.clone()),
            operator: Some("Equal".into()),
            value: taint.value.clone(),
            effect: Some(taint.effect.clone()),
            toleration_seconds: None,
        };
        prop_assert!(tolerates(&own, &taint));
        let everything = Toleration { operator: Some("Exists".into()), ..Toleration::default() };
        prop_assert!(tolerates(&everything, &taint));
    }

    /// The untolerated taint is the first that keeps pods off and that no toleration
    /// tolerates; with none, every such taint is tolerated.
    #[test]
    fn untolerated_is_the_first_that_keeps_pods_off(
        tolerations in vec(toleration(), 0..3),
        taints in vec(taint(), 0..4),
    ) {
        let found = untolerated(&tolerations, &taints);
        let expected = taints.iter().find(|t| {
            matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
                && !tolerations.iter().any(|tol| tolerates(tol, t))
        });
        prop_assert_eq!(found, expected);
    }
}
