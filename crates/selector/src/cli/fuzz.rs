//! Properties of `--max-age` and `--replace-within` (issue 18): any text is a positive
//! duration or a refusal, and the value is [`rotor_core::parse_duration`]'s. Each runs
//! `PROPTEST_CASES` cases (256 by default); failures found so far are replayed first from
//! `proptest-regressions/cli/fuzz.txt`.

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

fn token_soup() -> impl Strategy<Value = String> {
    vec(
        prop::sample::select(vec![
            "0",
            "1",
            "30",
            "d",
            "w",
            "h",
            "m",
            "s",
            "mo",
            "P",
            "T",
            "D",
            "-",
            " ",
            "ago",
            "1.5",
            "99999999999999999999",
        ]),
        0..8,
    )
    .prop_map(|tokens| tokens.concat())
}

proptest! {
    /// Any text is a positive duration (the one `parse_duration` reads) or a refusal; zero and
    /// negative durations are refused as not positive.
    #[test]
    fn max_age_is_a_positive_duration(input in prop_oneof![any::<String>(), token_soup()]) {
        match (parse_max_age(&input), rotor_core::parse_duration(&input)) {
            (Ok(age), Ok(duration)) => prop_assert!(age == duration && !age.is_zero()),
            (Err(e), Ok(duration)) => {
                prop_assert!(duration.is_zero() && e.contains("must be positive"), "{}", e)
            }
            (Err(e), Err(rotor_core::DurationError::Negative { .. })) => {
                prop_assert!(e.contains("must be positive"), "{}", e)
            }
            (Err(e), Err(other)) => prop_assert_eq!(e, other.to_string()),
            (Ok(age), Err(e)) => prop_assert!(false, "{input:?}: {age:?} but {e}"),
        }
    }
}
