//! Properties of `--exclude-tag` (issue 18): any text is a tag exclusion or a refusal, it
//! prints back to itself, and it excludes exactly the groups with that tag (and value). Each
//! runs `PROPTEST_CASES` cases (256 by default); failures found so far are replayed first from
//! `proptest-regressions/provider/aws_rules/fuzz.txt`.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

use super::*;

fn token_soup() -> impl Strategy<Value = String> {
    vec(
        prop::sample::select(vec!["=", "==", "k", "team", " ", "é", "", "a=b"]),
        0..6,
    )
    .prop_map(|tokens| tokens.concat())
}

proptest! {
    /// Any text is an exclusion or a refusal quoting it; what parses prints back to itself.
    #[test]
    fn parse_never_panics(input in prop_oneof![any::<String>(), token_soup()]) {
        match input.parse::<TagExclusion>() {
            Ok(exclusion) => {
                prop_assert!(!exclusion.key.is_empty() && !exclusion.key.contains('='));
                prop_assert_eq!(exclusion.to_string(), input);
            }
            Err(e) => prop_assert_eq!(e.value, input),
        }
    }

    /// `key` excludes a group that has the tag, with any value; `key=value` only with that
    /// value (values may hold `=`).
    #[test]
    fn exclusions_match_their_tag(
        key in "[a-zA-Z:/._-]{1,8}",
        value in prop::option::of(any::<String>()),
        tags in btree_map(
            "[a-zA-Z:/._-]{1,8}",
            prop_oneof![any::<String>(), Just("v=1".to_string())],
            0..4,
        ),
    ) {
        let text = match &value {
            Some(v) => format!("{key}={v}"),
            None => key.clone(),
        };
        let exclusion: TagExclusion = text.parse().unwrap();
        prop_assert_eq!(&exclusion, &TagExclusion { key: key.clone(), value: value.clone() });
        let group = AutoScalingGroup { tags: tags.clone(), ..AutoScalingGroup::default() };
        let expected = tags
            .get(&key)
            .filter(|v| value.as_ref().is_none_or(|wanted| wanted == *v))
            .map(|v| (key.as_str(), v.as_str()));
        prop_assert_eq!(exclusion.matches(&group), expected);
    }
}
