//! Properties of `--window` (issue 18): any text is a window or a refusal that shows the
//! syntax; a window prints back to itself; and its openings are consistent, in every kind of
//! zone, with a brute-force scan of the minutes its schedule matches where the clock has no
//! jumps. Each runs `PROPTEST_CASES` cases (256 by default, fewer for the scans); failures
//! found so far are replayed first from `proptest-regressions/window/fuzz.txt`.

use proptest::prelude::*;

use super::*;

/// Cron fields croner accepts, for each position: lists, ranges, steps, names, and the `L`, `W`,
/// `#` and `?` extensions.
fn valid_field(position: usize) -> impl Strategy<Value = &'static str> {
    let fields: &'static [&'static str] = match position {
        0 => &["*", "0", "30", "59", "*/15", "5-10", "0,30", "1-59/7"],
        1 => &["*", "0", "2", "22", "23", "*/6", "1-5", "0-23/5"],
        2 => &[
            "*", "?", "1", "15", "28", "29", "30", "31", "L", "15W", "1-31/2",
        ],
        3 => &["*", "1", "2", "12", "JAN", "feb", "*/3", "2-4"],
        _ => &[
            "*", "?", "0", "1-5", "6", "7", "SAT", "5#3", "5L", "MON-FRI", "sun",
        ],
    };
    prop::sample::select(fields)
}

/// Cron fields, valid and not: steps of zero, reversed ranges, empty list items, out-of-range
/// and overflowing numbers.
fn cron_field(position: usize) -> impl Strategy<Value = &'static str> {
    let hostile = [
        "-1",
        "*/0",
        "a",
        "99999999999",
        "1-",
        ",",
        "1,,2",
        "60",
        "24",
        "32",
        "13",
        "8",
        "10-5",
        "5#6",
        "DEC-JAN",
        "LW",
    ];
    prop_oneof![
        valid_field(position),
        prop::sample::select(hostile.to_vec()),
    ]
}

const DURATIONS: &[&str] = &[
    "1m",
    "30m",
    "1h",
    "90m",
    "4h",
    "1h30m",
    "1d",
    "2d",
    "1w",
    "PT5M",
    "1mo",
    "1y",
    "2 days",
    "99999999h",
    "1.5h",
];

const BAD_DURATIONS: &[&str] = &["0h", "-1h", "4h ago", "175307617h", "", "in", "for"];

/// Zones with and without summer time, some of whose clocks jump by half an hour.
const ZONES: &[&str] = &[
    "UTC",
    "utc",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/St_Johns",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Etc/GMT-14",
];

const BAD_ZONES: &[&str] = &[
    "Mars/Olympus",
    "../../../../etc/passwd",
    "/etc/localtime",
    "Europe/../Europe/Berlin",
    "",
];

fn spec(
    field: fn(usize) -> BoxedStrategy<&'static str>,
    durations: Vec<&'static str>,
    zones: Vec<&'static str>,
) -> impl Strategy<Value = String> {
    (
        (field(0), field(1), field(2), field(3), field(4)),
        prop::sample::select(durations),
        prop::option::of(prop::sample::select(zones)),
    )
        .prop_map(|((m, h, dom, mon, dow), duration, zone)| {
            let zone = zone.map(|z| format!(" in {z}")).unwrap_or_default();
            format!("{m} {h} {dom} {mon} {dow} for {duration}{zone}")
        })
}

/// Specifications with hostile parts among valid ones.
fn hostile_spec() -> impl Strategy<Value = String> {
    spec(
        |p| cron_field(p).boxed(),
        [DURATIONS, BAD_DURATIONS].concat(),
        [ZONES, BAD_ZONES].concat(),
    )
}

/// Windows that parse (all but those that never fire), in every kind of zone.
fn window() -> impl Strategy<Value = MaintenanceWindow> {
    spec(
        |p| valid_field(p).boxed(),
        DURATIONS.to_vec(),
        ZONES.to_vec(),
    )
    .prop_filter_map("never fires", |s| s.parse().ok())
}

/// An instant between 2000 and 2040, to the millisecond.
fn instant() -> impl Strategy<Value = Timestamp> {
    (946_684_800_000i64..2_208_988_800_000).prop_map(|ms| Timestamp::from_millisecond(ms).unwrap())
}

proptest! {
    /// Any text is a window or a refusal that shows the syntax; a window prints a text that
    /// parses back to it.
    #[test]
    fn parse_never_panics_and_what_parses_prints_back(
        input in prop_oneof![any::<String>(), hostile_spec()],
    ) {
        match input.parse::<MaintenanceWindow>() {
            Ok(w) => {
                let printed = w.to_string();
                prop_assert_eq!(printed.parse::<MaintenanceWindow>(), Ok(w), "{}", printed);
            }
            Err(e) => prop_assert!(e.to_string().contains(WINDOW_SYNTAX)),
        }
    }

    /// Openings are consistent, whatever the zone does to its clock: an opening holds `now`,
    /// the next opening is not in the past, and the window is open then.
    #[test]
    fn openings_are_consistent(w in window(), now in instant()) {
        if let Some((start, end)) = w.opening_at(now) {
            prop_assert!(start <= now && now < end, "{w}: {start}..{end} at {now}");
            prop_assert_eq!(w.closes_at(now), Some(end));
            prop_assert_eq!(w.next_open(now), Some(now));
        } else if let Some(next) = w.next_open(now) {
            prop_assert!(next > now, "{w}: next {next} at {now}");
            prop_assert!(w.is_open(next), "{w}: closed at its next opening {next} (at {now})");
        }
    }
}

/// Zones whose clock never jumps between 2000 and 2040, where every opening is a minute the
/// schedule matches on the wall clock.
const STEADY_ZONES: &[&str] = &["UTC", "Asia/Kolkata", "Asia/Kathmandu", "Etc/GMT-14"];

proptest! {
    #![proptest_config(ProptestConfig {
        cases: ProptestConfig::default().cases / 4,
        ..ProptestConfig::default()
    })]

    /// In a zone without jumps, the window is open exactly when a minute the schedule matches
    /// lies within its duration before `now`, and the next opening is the next such minute.
    #[test]
    fn openings_agree_with_a_minute_by_minute_scan(
        fields in (valid_field(0), valid_field(1), valid_field(2), valid_field(3), valid_field(4)),
        minutes in 1i64..360,
        zone in prop::sample::select(STEADY_ZONES),
        now in instant(),
    ) {
        let (m, h, dom, mon, dow) = fields;
        let spec = format!("{m} {h} {dom} {mon} {dow} for {minutes}m in {zone}");
        let Ok(w) = spec.parse::<MaintenanceWindow>() else {
            return Ok(());
        };
        let matches = |t: Timestamp| w.cron.is_time_matching(&t.to_zoned(w.zone.clone())).unwrap();
        let minute = |n: i64| Timestamp::from_second(n * 60).unwrap();
        let this_minute = now.as_second().div_euclid(60);
        let open = (this_minute - minutes + 1..=this_minute).rev().find(|&n| matches(minute(n)));
        prop_assert_eq!(
            w.opening_at(now),
            open.map(|n| (minute(n), minute(n + minutes))),
            "{} at {}", w, now
        );
        if open.is_none() {
            let next = (this_minute + 1..=this_minute + 8 * 1440).find(|&n| matches(minute(n)));
            match next {
                Some(n) => prop_assert_eq!(w.next_open(now), Some(minute(n)), "{} at {}", w, now),
                None => {
                    let horizon = minute(this_minute + 8 * 1440);
                    prop_assert!(w.next_open(now).is_none_or(|t| t > horizon));
                }
            }
        }
    }
}
