//! Properties of providerID parsing (issue 18): any `spec.providerID` names an EC2 instance or
//! is refused, and what is accepted is exactly an instance ID found at the end of the input.
//! Each runs `PROPTEST_CASES` cases (256 by default); failures found so far are replayed first
//! from `proptest-regressions/provider_id/fuzz.txt`.

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

/// Schemes, slashes, zones, instance-ID-like words and near misses.
const TOKENS: &[&str] = &[
    "aws",
    "AWS",
    "gce",
    "://",
    ":/",
    "/",
    "//",
    "us-east-1a",
    "i-",
    "i-0abc",
    "0123456789abcdef",
    "ABC",
    "fargate-",
    "ip-10-0-0-1",
    " ",
    "\n",
    "é",
    "@",
    "?",
];

fn token_soup() -> impl Strategy<Value = String> {
    vec(prop::sample::select(TOKENS), 0..8).prop_map(|tokens| tokens.concat())
}

proptest! {
    /// Any text names an instance or is refused; an accepted one is `i-` and lowercase hex,
    /// ends the input, and is either the whole input or the last segment of an `aws:///` path.
    #[test]
    fn parse_never_panics(input in prop_oneof![any::<String>(), token_soup()]) {
        let parsed = parse_aws_provider_id(&input);
        prop_assert_eq!(&input.parse::<InstanceId>(), &parsed);
        if let Ok(id) = parsed {
            let id = id.as_str();
            prop_assert!(id.strip_prefix("i-").is_some_and(|hex| !hex.is_empty()
                && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))));
            let last_segment = input.starts_with("aws:///") && input.ends_with(&format!("/{id}"));
            prop_assert!(input == id || last_segment, "{:?} gave {}", input, id);
        }
    }

    /// Every shape the AWS cloud controller writes, with any zone, gives the instance back; a
    /// trailing slash, an uppercase digit or a blank is refused.
    #[test]
    fn aws_shapes_give_the_instance(zone in "[a-z0-9-]{0,15}", hex in "[0-9a-f]{1,17}") {
        let id = format!("i-{hex}");
        for input in [format!("aws:///{zone}/{id}"), format!("aws:///{id}"), id.clone()] {
            let parsed = parse_aws_provider_id(&input).map(InstanceId::into_string);
            prop_assert_eq!(parsed, Ok(id.clone()));
        }
        let upper = id.to_uppercase();
        let refused = [
            format!("aws:///{zone}/{id}/"),
            format!("{id} "),
            format!("aws:///{zone}/{upper}"),
        ];
        for refused in refused {
            prop_assert!(parse_aws_provider_id(&refused).is_err(), "{:?}", refused);
        }
    }
}
