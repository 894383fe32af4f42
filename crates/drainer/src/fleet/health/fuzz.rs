//! Properties of `--health-alert-selector` (issue 18): any text is a selector or a refusal;
//! a value is read as PromQL reads a string literal, and the alerts query carries it so that
//! Prometheus reads the same value back. Each runs `PROPTEST_CASES` cases (256 by default);
//! failures found so far are replayed first from `proptest-regressions/health/fuzz.txt`.

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

const TOKENS: &[&str] = &[
    "severity",
    "alertstate",
    "_a1",
    "1a",
    "=",
    "!=",
    "=~",
    "!~",
    "==",
    "\"",
    "'",
    "`",
    "\\",
    "\\\\",
    "\\\"",
    "\\n",
    "\\x41",
    "\\u00e9",
    "\\.",
    ",",
    "{",
    "}",
    " ",
    "\n",
    "é",
    "crit.*",
];

fn token_soup() -> impl Strategy<Value = String> {
    vec(prop::sample::select(TOKENS), 0..12).prop_map(|tokens| tokens.concat())
}

/// `value` as a PromQL (Go) string literal in `quote`s: `\\`, the quote and every control
/// character escaped, the rest as it is.
fn promql_quoted(value: &str, quote: char) -> String {
    let mut out = String::from(quote);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// The selector an alerts query carries, read back through the parser.
fn read_back(query: &str) -> Result<AlertSelector, String> {
    query
        .strip_prefix(r#"ALERTS{alertstate="firing""#)
        .and_then(|q| q.strip_suffix('}'))
        .ok_or_else(|| format!("not an alerts query: {query}"))?
        .trim_start_matches(',')
        .parse()
}

fn matcher() -> impl Strategy<Value = (String, &'static str, String)> {
    (
        prop_oneof!["[a-zA-Z_][a-zA-Z0-9_]{0,10}", Just("severity".to_string())]
            .prop_filter("set by rotor", |l| l != "alertstate"),
        prop::sample::select(vec!["=", "!=", "=~", "!~"]),
        prop_oneof![
            any::<String>(),
            vec(
                prop::sample::select(vec![
                    "a", "\\", "\"", "'", "\n", "\t", "\u{0}", "\u{7f}", ".", "é"
                ]),
                0..6
            )
            .prop_map(|v| v.concat()),
        ],
    )
}

proptest! {
    /// Any text is a selector or a refusal, never a panic; the query of a selector holds no raw
    /// control character (PromQL refuses a raw newline in a string) and reads back, through
    /// the same parser, as the same selector.
    #[test]
    fn parse_never_panics_and_the_query_reads_back(
        input in prop_oneof![any::<String>(), token_soup()],
    ) {
        if let Ok(selector) = input.parse::<AlertSelector>() {
            let query = selector.query();
            prop_assert!(!query.chars().any(char::is_control), "{:?}", query);
            prop_assert_eq!(read_back(&query), Ok(selector), "{}", query);
        }
    }

    /// Matchers written as in PromQL, whatever their values hold (quotes, backslashes, control
    /// characters, non-ASCII) and in either quote, give those values, and the query carries
    /// them to Prometheus unchanged.
    #[test]
    fn promql_values_round_trip(
        matchers in vec(matcher(), 1..4),
        single_quotes in any::<bool>(),
        braces in any::<bool>(),
    ) {
        let quote = if single_quotes { '\'' } else { '"' };
        let written = matchers
            .iter()
            .map(|(label, op, value)| format!("{label}{op}{}", promql_quoted(value, quote)))
            .collect::<Vec<_>>()
            .join(", ");
        let written = if braces { format!("{{{written}}}") } else { written };
        let parsed = written.parse::<AlertSelector>();
        prop_assert!(parsed.is_ok(), "{written:?}: {parsed:?}");
        let parsed = parsed.unwrap();
        let expected: Vec<Matcher> = matchers
            .iter()
            .map(|(label, op, value)| Matcher { label: label.clone(), op, value: value.clone() })
            .collect();
        prop_assert_eq!(&parsed.0, &expected, "{}", written);
        prop_assert_eq!(read_back(&parsed.query()), Ok(parsed), "{}", written);
    }
}
