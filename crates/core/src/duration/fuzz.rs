//! Properties of [`parse_duration`], the one duration syntax of every flag (issue 18): any text
//! is a duration or a refusal that quotes it, and the value is the exact sum of its units. Each
//! runs `PROPTEST_CASES` cases (256 by default); failures found so far are replayed first from
//! `proptest-regressions/duration/fuzz.txt`.

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

/// Numbers (some too large for any unit), signs, both syntaxes' units and designators.
const TOKENS: &[&str] = &[
    "0",
    "1",
    "5",
    "90",
    "1.5",
    ",5",
    "9223372036854775807",
    "99999999999999999999",
    "-",
    "+",
    "P",
    "T",
    "W",
    "D",
    "H",
    "M",
    "S",
    "w",
    "d",
    "h",
    "m",
    "s",
    "ms",
    "us",
    "µs",
    "ns",
    "mo",
    "y",
    "days",
    " ",
    "ago",
    ":",
    "é",
];

fn token_soup() -> impl Strategy<Value = String> {
    vec(prop::sample::select(TOKENS), 0..10).prop_map(|tokens| tokens.concat())
}

/// Weeks, days, hours, minutes, seconds and milliseconds.
fn parts() -> impl Strategy<Value = [u64; 6]> {
    [
        0u64..3000,
        0u64..3000,
        0u64..3000,
        0u64..3000,
        0u64..3000,
        0u64..1000,
    ]
}

fn exact(parts: [u64; 6]) -> Duration {
    let [w, d, h, m, s, ms] = parts;
    Duration::from_secs(w * 604_800 + d * 86_400 + h * 3_600 + m * 60 + s)
        + Duration::from_millis(ms)
}

/// The friendly form (`2w 3d 4h 5m 6s 7ms`), units with a zero left out, spaced or not.
fn friendly(parts: [u64; 6], spaced: bool) -> String {
    let written: Vec<String> = parts
        .iter()
        .zip(["w", "d", "h", "m", "s", "ms"])
        .filter(|(n, _)| **n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    if written.is_empty() {
        return "0s".into();
    }
    written.join(if spaced { " " } else { "" })
}

proptest! {
    /// Any text is a duration or a refusal that quotes it; never a panic.
    #[test]
    fn parse_never_panics(input in prop_oneof![any::<String>(), token_soup()]) {
        if let Err(e) = parse_duration(&input) {
            prop_assert!(e.to_string().contains(&format!("{input:?}")), "{}", e);
        }
    }

    /// The friendly and the ISO 8601 forms of the same parts give their exact sum, a day being
    /// 24 hours and a week 7 days.
    #[test]
    fn both_forms_give_the_exact_sum(parts in parts(), spaced in any::<bool>()) {
        let expected = exact(parts);
        let text = friendly(parts, spaced);
        prop_assert_eq!(parse_duration(&text), Ok(expected), "{}", text);
        let [w, d, h, m, s, ms] = parts;
        let iso = format!("P{}DT{h}H{m}M{s}.{ms:03}S", w * 7 + d);
        prop_assert_eq!(parse_duration(&iso), Ok(expected), "{}", iso);
    }

    /// Months and years are refused as such, and a negative duration as negative, however
    /// they are written.
    #[test]
    fn variable_and_negative_lengths_are_refused(parts in parts(), n in 1u32..500) {
        for text in [format!("{n}mo"), format!("{n}y"), format!("P{n}M"), format!("P{n}Y"),
                     format!("{n} months {}", friendly(parts, true))] {
            prop_assert_eq!(
                parse_duration(&text),
                Err(DurationError::VariableLength { text: text.clone() })
            );
        }
        if exact(parts) > Duration::ZERO {
            let negatives = [
                format!("-{}", friendly(parts, false)),
                format!("{} ago", friendly(parts, true)),
            ];
            for text in negatives {
                prop_assert_eq!(
                    parse_duration(&text),
                    Err(DurationError::Negative { text: text.clone() })
                );
            }
        }
    }
}
