//! Maintenance windows: `--window "<5-field cron> for <duration> [in <IANA zone>]"`. A window
//! opens at each time its cron schedule fires (read on the wall clock of its zone, UTC by default)
//! and stays open for its duration: open at the start instant, closed exactly at start +
//! duration. Outside every configured window no new drain starts; no window means always open.

use std::fmt;
use std::str::FromStr;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::{Span, Timestamp, Zoned};

/// The syntax, shown in every parse error.
pub const WINDOW_SYNTAX: &str = "\"<minute> <hour> <day-of-month> <month> <day-of-week> for <duration> [in <IANA time zone>]\", e.g. \"0 22 * * 1-5 for 4h in Europe/Berlin\" or \"30 1 * * * for 90m\" (UTC)";

/// A recurring maintenance window.
#[derive(Clone, Debug)]
pub struct MaintenanceWindow {
    /// The schedule as written (fields separated by single spaces).
    schedule: String,
    cron: Cron,
    /// How long each opening lasts. Added on the zone's clock: hours and smaller units are
    /// exact elapsed time, days follow the calendar (`1d` ends at the same wall-clock time the
    /// next day, even across a DST change).
    duration: Span,
    /// The zone name as written; `None` for the UTC default.
    zone_name: Option<String>,
    zone: TimeZone,
}

/// A window specification that does not parse; the message says what is wrong and shows
/// [`WINDOW_SYNTAX`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid maintenance window {input:?}: {problem}; expected {WINDOW_SYNTAX}")]
pub struct ParseWindowError {
    /// The text that failed to parse.
    pub input: String,
    /// What is wrong with it.
    pub problem: String,
}

impl MaintenanceWindow {
    /// The cron schedule, as written.
    pub fn schedule(&self) -> &str {
        &self.schedule
    }

    /// How long each opening lasts.
    pub fn duration(&self) -> Span {
        self.duration
    }

    /// The time zone the schedule is read in.
    pub fn time_zone(&self) -> &TimeZone {
        &self.zone
    }

    /// The opening that contains `now`, as `(start, end)`: `start <= now < end`.
    ///
    /// Fails closed: if the schedule cannot be evaluated around `now` the window is closed. An
    /// opening whose end lies past the last instant a time can hold (`for 99999999h`) lasts
    /// until that instant.
    pub fn opening_at(&self, now: Timestamp) -> Option<(Timestamp, Timestamp)> {
        let here = now.to_zoned(self.zone.clone());
        // The latest start at or before now has the latest end, so it alone decides.
        let start = self.cron.find_previous_occurrence(&here, true).ok()?;
        let end = start
            .checked_add(self.duration)
            .map_or(Timestamp::MAX, |end| end.timestamp());
        (now < end).then(|| (start.timestamp(), end))
    }

    /// True when `now` lies inside an opening of the window.
    pub fn is_open(&self, now: Timestamp) -> bool {
        self.opening_at(now).is_some()
    }

    /// When the window closes, if it is open at `now`.
    pub fn closes_at(&self, now: Timestamp) -> Option<Timestamp> {
        self.opening_at(now).map(|(_, end)| end)
    }

    /// The earliest instant at or after `now` at which the window is open: `now` itself when it
    /// is open, else the next start. `None` when the schedule cannot be evaluated.
    pub fn next_open(&self, now: Timestamp) -> Option<Timestamp> {
        if self.is_open(now) {
            return Some(now);
        }
        let here = now.to_zoned(self.zone.clone());
        self.cron
            .find_next_occurrence(&here, false)
            .ok()
            .map(|start: Zoned| start.timestamp())
    }
}

/// True when `now` is inside at least one window; with no windows, always true.
pub fn any_open(windows: &[MaintenanceWindow], now: Timestamp) -> bool {
    windows.is_empty() || windows.iter().any(|w| w.is_open(now))
}

/// The earliest instant at or after `now` at which some window is open (`now` with no windows).
pub fn next_open_any(windows: &[MaintenanceWindow], now: Timestamp) -> Option<Timestamp> {
    if windows.is_empty() {
        return Some(now);
    }
    windows.iter().filter_map(|w| w.next_open(now)).min()
}

impl PartialEq for MaintenanceWindow {
    fn eq(&self, other: &Self) -> bool {
        self.schedule == other.schedule
            && self.duration.fieldwise() == other.duration.fieldwise()
            && self.zone_name == other.zone_name
    }
}

impl Eq for MaintenanceWindow {}

impl fmt::Display for MaintenanceWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} for {:#}", self.schedule, self.duration)?;
        if let Some(zone) = &self.zone_name {
            write!(f, " in {zone}")?;
        }
        Ok(())
    }
}

impl FromStr for MaintenanceWindow {
    type Err = ParseWindowError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = |problem: String| ParseWindowError {
            input: input.to_owned(),
            problem,
        };
        let tokens: Vec<&str> = input.split_whitespace().collect();
        let Some(for_at) = tokens.iter().position(|t| *t == "for") else {
            return Err(error(
                "missing \"for <duration>\" after the cron schedule".into(),
            ));
        };
        let (fields, rest) = (&tokens[..for_at], &tokens[for_at + 1..]);
        if fields.len() != 5 {
            return Err(error(format!(
                "the cron schedule {:?} has {} field(s), it needs exactly 5 (no seconds, no year)",
                fields.join(" "),
                fields.len()
            )));
        }
        // croner reads an empty list item as nothing (`,` is an empty set, `1,,15` is `1,15`);
        // cron refuses it, and so does rotor, before croner searches years for a first start.
        if let Some(field) = fields.iter().find(|f| f.split(',').any(str::is_empty)) {
            return Err(error(format!(
                "the cron field {field:?} has an empty item between commas"
            )));
        }
        let schedule = fields.join(" ");
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(&schedule)
            .map_err(|e| error(format!("bad cron schedule {schedule:?}: {e}")))?;

        let (duration_tokens, zone_tokens) = match rest.iter().position(|t| *t == "in") {
            Some(in_at) => (&rest[..in_at], Some(&rest[in_at + 1..])),
            None => (rest, None),
        };
        if duration_tokens.is_empty() {
            return Err(error("missing the duration after \"for\"".into()));
        }
        let duration_text = duration_tokens.join(" ");
        let duration: Span = duration_text
            .parse()
            .map_err(|e| error(format!("bad duration {duration_text:?}: {e}")))?;
        if !duration.is_positive() {
            return Err(error(format!(
                "the duration {duration_text:?} must be positive"
            )));
        }

        let (zone_name, zone) = match zone_tokens {
            None => (None, TimeZone::UTC),
            Some([name]) => {
                let zone = TimeZone::get(name).map_err(|e| {
                    error(format!(
                        "unknown time zone {name:?} (use an IANA name such as Europe/Berlin or UTC): {e}"
                    ))
                })?;
                (Some((*name).to_owned()), zone)
            }
            Some([]) => return Err(error("missing the time zone after \"in\"".into())),
            Some(more) => {
                return Err(error(format!(
                    "expected one time zone after \"in\", found {:?}",
                    more.join(" ")
                )));
            }
        };

        let window = MaintenanceWindow {
            schedule,
            cron,
            duration,
            zone_name,
            zone,
        };
        // A schedule such as "0 0 30 2 *" is valid cron but never fires: say so now rather than
        // waiting forever for a window.
        let reference = Timestamp::UNIX_EPOCH.to_zoned(window.zone.clone());
        if window.cron.find_next_occurrence(&reference, true).is_err() {
            return Err(error(format!(
                "the cron schedule {:?} never fires",
                window.schedule
            )));
        }
        Ok(window)
    }
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn window(s: &str) -> MaintenanceWindow {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    fn problem(s: &str) -> String {
        let e = s.parse::<MaintenanceWindow>().unwrap_err();
        let message = e.to_string();
        assert!(message.contains(WINDOW_SYNTAX), "{message}");
        e.problem
    }

    #[test]
    fn parses_and_round_trips() {
        for (text, shown) in [
            (
                "0 22 * * 1-5 for 4h in Europe/Berlin",
                "0 22 * * 1-5 for 4h in Europe/Berlin",
            ),
            ("30 1 * * * for 90m", "30 1 * * * for 90m"),
            (
                "  0  2 * * SAT   for 1h30m in UTC ",
                "0 2 * * SAT for 1h 30m in UTC",
            ),
            ("0 0 * * 6 for 2 days", "0 0 * * 6 for 2d"),
            ("*/15 * * * * for PT5M", "*/15 * * * * for 5m"),
        ] {
            let w = window(text);
            assert_eq!(w.to_string(), shown);
            assert_eq!(window(&w.to_string()), w, "{text}");
        }
        assert_ne!(
            window("30 1 * * * for 90m"),
            window("30 1 * * * for 90m in UTC")
        );
        assert_ne!(window("30 1 * * * for 90m"), window("30 1 * * * for 1h30m"));
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let cases = [
            ("0 22 * * 1-5", "missing \"for <duration>\""),
            ("0 22 * * for 4h", "has 4 field(s), it needs exactly 5"),
            ("0 0 22 * * 1-5 for 4h", "has 6 field(s)"),
            ("0 25 * * * for 4h", "bad cron schedule \"0 25 * * *\""),
            ("0 22 * * 1-5 for", "missing the duration"),
            ("0 22 * * 1-5 for in UTC", "missing the duration"),
            ("0 22 * * 1-5 for four hours", "bad duration \"four hours\""),
            ("0 22 * * 1-5 for 0h", "must be positive"),
            ("0 22 * * 1-5 for 4h ago", "must be positive"),
            ("0 22 * * 1-5 for 4h in", "missing the time zone"),
            (
                "0 22 * * 1-5 for 4h in Mars/Olympus",
                "unknown time zone \"Mars/Olympus\"",
            ),
            (
                "0 22 * * 1-5 for 4h in Europe/Berlin now",
                "expected one time zone",
            ),
            ("0 0 30 2 * for 1h", "never fires"),
            // Found by the properties in `fuzz.rs`: croner reads these as empty lists, and its
            // search for a first start took seconds before "never fires".
            (", * * */3 1-5 for 1h", "field \",\" has an empty item"),
            ("0 22 1,,15 * * for 1h", "field \"1,,15\" has an empty item"),
            ("0 22 * * 1-5, for 1h", "has an empty item"),
        ];
        for (text, expected) in cases {
            let p = problem(text);
            assert!(p.contains(expected), "{text}: {p}");
        }
    }

    #[test]
    fn open_at_the_start_and_closed_exactly_at_the_end() {
        let w = window("30 1 * * * for 90m");
        assert!(!w.is_open(ts("2025-06-10T01:29:59.999Z")));
        assert!(w.is_open(ts("2025-06-10T01:30:00Z")));
        assert!(w.is_open(ts("2025-06-10T02:59:59.999Z")));
        assert!(!w.is_open(ts("2025-06-10T03:00:00Z")));
        assert_eq!(
            w.closes_at(ts("2025-06-10T02:00:00Z")),
            Some(ts("2025-06-10T03:00:00Z"))
        );
        assert_eq!(w.closes_at(ts("2025-06-10T03:00:00Z")), None);
    }

    #[test]
    fn next_open_is_now_when_open_else_the_next_start() {
        let w = window("30 1 * * * for 90m");
        let inside = ts("2025-06-10T02:00:00Z");
        assert_eq!(w.next_open(inside), Some(inside));
        assert_eq!(
            w.next_open(ts("2025-06-10T03:00:00Z")),
            Some(ts("2025-06-11T01:30:00Z"))
        );
        assert_eq!(
            w.next_open(ts("2025-06-10T01:29:59.5Z")),
            Some(ts("2025-06-10T01:30:00Z"))
        );
    }

    #[test]
    fn window_spanning_midnight_in_a_zone() {
        // Weekdays 22:00-02:00 Berlin time (CET, UTC+1, in January).
        let w = window("0 22 * * 1-5 for 4h in Europe/Berlin");
        // Friday 2025-01-10 22:00 CET = 21:00Z.
        assert!(!w.is_open(ts("2025-01-10T20:59:59Z")));
        assert!(w.is_open(ts("2025-01-10T21:00:00Z")));
        // Saturday 01:59 CET: still the Friday opening.
        assert!(w.is_open(ts("2025-01-11T00:59:59Z")));
        assert!(!w.is_open(ts("2025-01-11T01:00:00Z")));
        // Saturday 22:00 CET: no opening at the weekend.
        assert!(!w.is_open(ts("2025-01-11T21:30:00Z")));
        assert_eq!(
            w.next_open(ts("2025-01-11T01:00:00Z")),
            Some(ts("2025-01-13T21:00:00Z"))
        );
        // In summer (CEST, UTC+2) the same wall-clock window is an hour earlier in UTC.
        assert!(w.is_open(ts("2025-07-01T20:00:00Z")));
        assert!(!w.is_open(ts("2025-07-01T19:59:59Z")));
    }

    #[test]
    fn hours_are_elapsed_time_across_the_spring_forward() {
        // Berlin skips 02:00-03:00 on Sunday 2025-03-30 (01:00Z): 22:00 CET + 4h ends 03:00 CEST.
        let w = window("0 22 * * * for 4h in Europe/Berlin");
        assert!(w.is_open(ts("2025-03-29T21:00:00Z")));
        assert!(w.is_open(ts("2025-03-30T00:59:59Z")));
        assert!(!w.is_open(ts("2025-03-30T01:00:00Z")));
        // That evening is summer time: 22:00 CEST = 20:00Z.
        assert_eq!(
            w.next_open(ts("2025-03-30T01:00:00Z")),
            Some(ts("2025-03-30T20:00:00Z"))
        );
    }

    #[test]
    fn start_in_the_skipped_hour_opens_right_after_the_gap() {
        // 02:30 does not exist in Berlin on 2025-03-30; the opening starts at 03:00 CEST (01:00Z).
        let w = window("30 2 * * * for 1h in Europe/Berlin");
        assert_eq!(
            w.next_open(ts("2025-03-29T23:00:00Z")),
            Some(ts("2025-03-30T01:00:00Z"))
        );
        assert!(w.is_open(ts("2025-03-30T01:00:00Z")));
        assert!(!w.is_open(ts("2025-03-30T02:00:00Z")));
        // Normal days: 02:30 CET = 01:30Z before, 02:30 CEST = 00:30Z after.
        assert!(w.is_open(ts("2025-03-29T01:30:00Z")));
        assert!(w.is_open(ts("2025-03-31T00:30:00Z")));
    }

    #[test]
    fn days_follow_the_calendar_across_the_fall_back() {
        // Saturday 00:00 for 2 days spans the end of summer time (2025-10-26): 49 hours.
        let w = window("0 0 * * 6 for 2d in Europe/Berlin");
        assert!(w.is_open(ts("2025-10-24T22:00:00Z")));
        assert_eq!(
            w.closes_at(ts("2025-10-25T12:00:00Z")),
            Some(ts("2025-10-26T23:00:00Z"))
        );
    }

    #[test]
    fn repeated_hour_in_autumn_opens_once() {
        // 02:30 happens twice in Berlin on 2025-10-26; the window opens at the first (00:30Z).
        let w = window("30 2 * * * for 30m in Europe/Berlin");
        assert_eq!(
            w.next_open(ts("2025-10-25T23:00:00Z")),
            Some(ts("2025-10-26T00:30:00Z"))
        );
        assert!(w.is_open(ts("2025-10-26T00:45:00Z")));
        assert!(!w.is_open(ts("2025-10-26T01:45:00Z")));
    }

    #[test]
    fn no_windows_means_always_open() {
        let now = ts("2025-06-10T12:00:00Z");
        assert!(any_open(&[], now));
        assert_eq!(next_open_any(&[], now), Some(now));
        let windows = [window("0 1 * * * for 1h"), window("0 20 * * * for 1h")];
        assert!(!any_open(&windows, now));
        assert!(any_open(&windows, ts("2025-06-10T20:30:00Z")));
        assert_eq!(
            next_open_any(&windows, now),
            Some(ts("2025-06-10T20:00:00Z"))
        );
    }

    /// Found by the properties in `fuzz.rs`: an opening whose end overflowed the time range
    /// counted as closed, so `for 99999999h` never opened while `next_open` kept announcing an
    /// opening a minute away.
    #[test]
    fn an_opening_past_the_end_of_time_lasts_until_then() {
        let now = ts("2025-06-10T12:34:56Z");
        for text in ["* * * * * for 99999999h", "0 0 * * * for 19998y"] {
            let w = window(text);
            assert!(w.is_open(now), "{text}");
            assert_eq!(w.closes_at(now), Some(Timestamp::MAX), "{text}");
            assert_eq!(w.next_open(now), Some(now), "{text}");
        }
    }

    #[test]
    fn window_longer_than_its_period_is_always_open() {
        let w = window("0 * * * * for 2h");
        assert!(w.is_open(ts("2025-06-10T12:34:56Z")));
        assert_eq!(
            w.closes_at(ts("2025-06-10T12:34:56Z")),
            Some(ts("2025-06-10T14:00:00Z"))
        );
    }
}
