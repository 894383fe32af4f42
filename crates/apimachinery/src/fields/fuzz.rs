//! Properties of the field selector parser, on arbitrary and on hostile input (issue 18). Each
//! runs `PROPTEST_CASES` cases (256 by default); failures found so far are replayed first from
//! `proptest-regressions/fields/fuzz.txt`.

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

/// Operators, escapes (good and bad), separators and non-ASCII around field-like words.
const TOKENS: &[&str] = &[
    "spec.nodeName",
    "metadata.name",
    "a",
    "=",
    "==",
    "!=",
    "!",
    ",",
    "\\",
    "\\\\",
    "\\,",
    "\\=",
    "\\n",
    " ",
    "é",
    "\u{1F600}",
    "\0",
    ".",
];

fn token_soup() -> impl Strategy<Value = String> {
    vec(prop::sample::select(TOKENS), 0..16).prop_map(|tokens| tokens.concat())
}

fn requirement() -> impl Strategy<Value = FieldRequirement> {
    (
        "[A-Za-z][A-Za-z0-9._-]{0,20}",
        prop::sample::select(vec![FieldOp::Equals, FieldOp::NotEquals]),
        prop_oneof![
            any::<String>(),
            vec(
                prop::sample::select(vec!["\\", ",", "=", "a", "!", " "]),
                0..8
            )
            .prop_map(|v| v.concat()),
        ],
    )
        .prop_map(|(field, op, value)| FieldRequirement { field, op, value })
}

/// The requirements in a fixed order: a selector is a conjunction, so the order of its terms
/// carries no meaning (apimachinery keeps them in the order of the sorted raw terms, and so
/// `a==x,a=b` prints as `a=x,a=b`, which sorts differently).
fn terms(selector: &FieldSelector) -> Vec<(String, bool, String)> {
    let mut terms: Vec<_> = selector
        .requirements()
        .iter()
        .map(|r| (r.field.clone(), r.op == FieldOp::Equals, r.value.clone()))
        .collect();
    terms.sort();
    terms
}

proptest! {
    /// Any text either parses or is refused with an error; what parses prints a form (values
    /// escaped) that parses back to the same terms.
    #[test]
    fn parse_never_panics_and_what_parses_prints_back(
        input in prop_oneof![any::<String>(), token_soup()],
    ) {
        if let Ok(selector) = FieldSelector::parse(&input) {
            let printed = selector.to_string();
            let reparsed = FieldSelector::parse(&printed);
            prop_assert!(reparsed.is_ok(), "{input:?} printed as {printed:?}: {reparsed:?}");
            prop_assert_eq!(terms(&reparsed.unwrap()), terms(&selector), "{:?}", printed);
        }
    }

    /// Every value, whatever it holds (`\`, `,`, `=`, non-ASCII), survives escaping: a selector
    /// printed from requirements parses back to them, and matches exactly the values they ask
    /// for.
    #[test]
    fn escaped_values_round_trip(requirements in vec(requirement(), 0..5)) {
        let printed = requirements
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let parsed = FieldSelector::parse(&printed);
        prop_assert!(parsed.is_ok(), "{printed:?}: {parsed:?}");
        let parsed = parsed.unwrap();
        let expected = FieldSelector { requirements: requirements.clone() };
        prop_assert_eq!(terms(&parsed), terms(&expected));
        for r in &requirements {
            prop_assert_eq!(r.matches(Some(&r.value)), r.op == FieldOp::Equals);
            let value = parsed.required_value(&r.field);
            if r.op == FieldOp::Equals {
                prop_assert!(value.is_some());
            }
        }
    }
}
