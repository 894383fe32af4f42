//! Properties of the label selector parsers, on arbitrary and on hostile input (issue 18). Each
//! runs `PROPTEST_CASES` cases (256 by default); failures found so far are replayed first from
//! `proptest-regressions/labels/fuzz.txt`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::json;

use super::*;

/// Pieces of the grammar and what lies around it: operators, keywords, every kind of space
/// (only ' ', '\t', '\r' and '\n' separate tokens in apimachinery), non-ASCII, NUL, integers
/// that do not fit an i64.
const TOKENS: &[&str] = &[
    "a",
    "app",
    "x.io/k",
    "A/b",
    "in",
    "notin",
    "=",
    "==",
    "!=",
    "!",
    "(",
    ")",
    ",",
    ">",
    "<",
    " ",
    "\t",
    "\n",
    "\r",
    "\u{a0}",
    "\u{3000}",
    "\u{b}",
    "\u{c}",
    "\u{85}",
    "é",
    "-1",
    "7",
    "9223372036854775808",
    "\0",
    "/",
    ".",
    "_",
    "-",
];

fn token_soup() -> impl Strategy<Value = String> {
    vec(prop::sample::select(TOKENS), 0..16).prop_map(|tokens| tokens.concat())
}

/// A qualified name: an optional DNS subdomain prefix and a name, both at their length limits
/// sometimes; `in` and `notin` are keys too.
fn key() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        "[A-Za-z0-9]([-A-Za-z0-9_.]{0,8}[A-Za-z0-9])?",
        "[a-z][a-z0-9]{62}",
        Just("in".to_string()),
        Just("notin".to_string()),
    ];
    let prefix = prop_oneof![
        Just(None),
        "[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?){0,3}"
            .prop_map(Some),
    ];
    (prefix, name).prop_map(|(prefix, name)| match prefix {
        Some(prefix) => format!("{prefix}/{name}"),
        None => name,
    })
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[A-Za-z0-9]([-A-Za-z0-9_.]{0,8}[A-Za-z0-9])?",
        "[A-Za-z0-9]{63}",
        Just("in".to_string()),
    ]
}

fn requirement() -> impl Strategy<Value = Requirement> {
    let exact = prop::sample::select(vec![
        Operator::Equals,
        Operator::DoubleEquals,
        Operator::NotEquals,
    ]);
    let set = prop::sample::select(vec![Operator::In, Operator::NotIn]);
    let unary = prop::sample::select(vec![Operator::Exists, Operator::DoesNotExist]);
    let compare = prop::sample::select(vec![Operator::GreaterThan, Operator::LessThan]);
    prop_oneof![
        (key(), exact, value()).prop_map(|(k, op, v)| Requirement::new(&k, op, [v])),
        (key(), set, vec(value(), 1..4)).prop_map(|(k, op, vs)| Requirement::new(&k, op, vs)),
        (key(), unary).prop_map(|(k, op)| Requirement::new(&k, op, Vec::<String>::new())),
        (key(), compare, 0..=i64::MAX).prop_map(|(k, op, n)| Requirement::new(
            &k,
            op,
            [n.to_string()]
        )),
    ]
    .prop_map(|r| r.expect("generated requirements are valid"))
}

/// The structured form, as an API object carries it, with hostile keys and values among valid
/// ones.
fn structured() -> impl Strategy<Value = metav1::LabelSelector> {
    let text = prop_oneof![key(), value(), any::<String>()];
    let operator = prop_oneof![
        prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist"]).prop_map(String::from),
        prop::sample::select(vec!["in", "Equals", "", "Gt"]).prop_map(String::from),
    ];
    let expression = (
        prop_oneof![key(), any::<String>()],
        operator,
        prop::option::of(vec(text.clone(), 0..3)),
    )
        .prop_map(|(key, operator, values)| metav1::LabelSelectorRequirement {
            key,
            operator,
            values,
        });
    (
        prop::option::of(btree_map(prop_oneof![key(), any::<String>()], text, 0..3)),
        prop::option::of(vec(expression, 0..3)),
    )
        .prop_map(|(match_labels, match_expressions)| metav1::LabelSelector {
            match_labels,
            match_expressions,
        })
}

/// Arbitrary JSON, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![key(), any::<String>()].prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(
                prop_oneof![
                    prop::sample::select(vec![
                        "matchLabels",
                        "matchExpressions",
                        "key",
                        "operator",
                        "values",
                    ])
                    .prop_map(String::from),
                    key(),
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Any text either parses or is refused with an error; what parses prints a form that parses
    /// back to the same selector, and holds only ASCII (keys, values and the grammar are ASCII,
    /// and only ASCII spaces separate tokens, as in apimachinery's lexer).
    #[test]
    fn parse_never_panics_and_what_parses_prints_back(
        input in prop_oneof![any::<String>(), token_soup()],
    ) {
        if let Ok(selector) = LabelSelector::parse(&input) {
            prop_assert!(input.is_ascii(), "accepted non-ASCII {input:?} as {selector}");
            let printed = selector.to_string();
            prop_assert_eq!(LabelSelector::parse(&printed), Ok(selector), "{:?}", printed);
        }
    }

    /// Every selector made of valid requirements prints a string that parses back to it.
    #[test]
    fn valid_selectors_round_trip(requirements in vec(requirement(), 0..5)) {
        let selector = LabelSelector::from_requirements(requirements);
        let printed = selector.to_string();
        prop_assert_eq!(LabelSelector::parse(&printed), Ok(selector), "{:?}", printed);
    }

    /// The typed structured form (`from_k8s`) and its JSON (`from_structured`) give the same
    /// selector or the same error, and an accepted structured selector prints a string form that
    /// parses to it.
    #[test]
    fn structured_forms_agree(selector in structured()) {
        let typed = LabelSelector::from_k8s(Some(&selector));
        let as_json = serde_json::to_value(&selector).unwrap();
        prop_assert_eq!(&typed, &LabelSelector::from_structured(&as_json));
        if let Ok(typed) = typed {
            prop_assert_eq!(LabelSelector::parse(&typed.to_string()), Ok(typed));
        }
    }

    /// Hostile JSON in place of a selector is refused, never a panic.
    #[test]
    fn from_structured_never_panics(value in json_value()) {
        let _ = LabelSelector::from_structured(&value);
        let _ = LabelSelector::from_structured(&json!({ "matchExpressions": [value.clone()] }));
        let _ = LabelSelector::from_structured(&json!({ "matchLabels": value }));
    }
}
