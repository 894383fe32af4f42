//! Durations as rotor's flags and scenario files write them, parsed by one function so that every
//! flag accepts the same forms: jiff's friendly format (`500ms`, `90s`, `15m`, `1h30m`, `30d`,
//! `2w`) or ISO 8601 (`PT15M`, `P30D`), a day being 24 hours. Months and years are refused (their
//! length varies), and so is a negative duration. [`later`] adds one to a point in time.

use std::time::Duration;

/// A duration that cannot be used, with the text as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error(
        "invalid duration {text:?} (expected e.g. 500ms, 30s, 15m, 2h, 30d, or ISO 8601 such as PT15M): {problem}"
    )]
    Syntax { text: String, problem: String },
    #[error(
        "duration {text:?} uses months or years, whose length varies; use days or weeks (e.g. 30d)"
    )]
    VariableLength { text: String },
    #[error("duration {text:?} must not be negative")]
    Negative { text: String },
}

/// `now + d`, or `now` when that cannot be represented (a duration past jiff's range, which only
/// a flag far beyond any sensible value reaches).
pub fn later(now: jiff::Timestamp, d: Duration) -> jiff::Timestamp {
    now.checked_add(jiff::SignedDuration::try_from(d).unwrap_or_default())
        .unwrap_or(now)
}

/// Parses `text` (see the module header).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let span: jiff::Span = text
        .trim()
        .parse()
        .map_err(|e: jiff::Error| DurationError::Syntax {
            text: text.to_owned(),
            problem: e.to_string(),
        })?;
    let signed = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|_| DurationError::VariableLength {
            text: text.to_owned(),
        })?;
    Duration::try_from(signed).map_err(|_| DurationError::Negative {
        text: text.to_owned(),
    })
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn friendly_and_iso_forms_agree() {
        let secs = |s: &str| parse_duration(s).map(|d| d.as_secs_f64());
        for (text, expected) in [
            ("500ms", 0.5),
            ("90s", 90.0),
            ("15m", 900.0),
            ("1h30m", 5_400.0),
            ("PT15M", 900.0),
            ("30d", 2_592_000.0),
            ("P30D", 2_592_000.0),
            ("2w", 1_209_600.0),
            (" 0s ", 0.0),
        ] {
            assert_eq!(secs(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn what_cannot_be_a_duration_says_why() {
        let err = |s: &str| parse_duration(s).unwrap_err();
        assert!(matches!(err("ten minutes"), DurationError::Syntax { .. }));
        assert!(err("").to_string().contains("expected e.g."));
        assert!(matches!(err("1mo"), DurationError::VariableLength { .. }));
        assert!(matches!(err("P1Y"), DurationError::VariableLength { .. }));
        assert!(matches!(err("-5m"), DurationError::Negative { .. }));
        assert!(matches!(err("5m ago"), DurationError::Negative { .. }));
    }
}
