//! The circuit breaker's state as the machine holds it: the halt read from the rotation record,
//! or tripped here and not yet written there. When it trips is [`crate::fleet::breaker`]'s
//! decision; what a halt stops is the machine's.

use std::time::{Duration, Instant};

use jiff::Timestamp;

use crate::record::rotation::{Halt, HaltState};
use crate::retry_later::RetryLater;

/// How long after a trip its write is first sent again if the record has not shown it; each
/// further send waits twice as long, up to [`REWRITE_AT_MOST`].
const REWRITE_FIRST: Duration = Duration::from_secs(5);
const REWRITE_AT_MOST: Duration = Duration::from_secs(60);

/// The halt in force, whether the record has been read, and whether it showed the halt.
#[derive(Default)]
pub(super) struct HaltBook {
    /// From the rotation record, or tripped here.
    state: HaltState,
    /// The record's watch has answered once (with `--halt-after`, nothing starts before: a
    /// halt written by an earlier leader must hold this one too).
    known: bool,
    /// The record showed a halt at its last read: its going away is a resume. A halt tripped
    /// here and not yet written is lifted only by a resume written after it.
    in_record: bool,
    /// A halt tripped here that the record has not shown yet: when its write goes out again.
    rewrite: Option<RetryLater>,
}

impl HaltBook {
    /// The halt in force, if any.
    pub(super) fn halted(&self) -> Option<&Halt> {
        self.state.halted.as_ref()
    }

    /// When a halt was last lifted, as the record says.
    pub(super) fn resumed_at(&self) -> Option<Timestamp> {
        self.state.resumed_at
    }

    /// Whether the record's watch has answered.
    pub(super) fn known(&self) -> bool {
        self.known
    }

    /// Takes in the record's halt as read; returns whether that lifted the halt in force.
    pub(super) fn read(&mut self, state: HaltState) -> bool {
        self.known = true;
        if state.halted.is_some() {
            // Ours landed, or another replica's did first: either way the record holds a halt.
            self.rewrite = None;
        }
        let was_in_record = std::mem::replace(&mut self.in_record, state.halted.is_some());
        let lifted = match (&self.state.halted, &state.halted) {
            (Some(halt), None) => {
                was_in_record || state.resumed_at.is_some_and(|r| r >= halt.since)
            }
            _ => false,
        };
        if state.halted.is_some() || self.state.halted.is_none() || lifted {
            if lifted {
                self.rewrite = None;
            }
            self.state = state;
        } else {
            // A halt tripped here whose write has not shown yet: it stands.
            self.state.resumed_at = state.resumed_at;
        }
        lifted
    }

    /// Halts the rotation for `reason`, from `wall` (`now` on the monotonic clock); the shell
    /// writes it into the record.
    pub(super) fn trip(&mut self, reason: String, wall: Timestamp, now: Instant) -> Halt {
        let halt = Halt {
            since: wall,
            reason,
        };
        self.state.halted = Some(halt.clone());
        self.rewrite = Some(RetryLater::after(now, REWRITE_FIRST, REWRITE_AT_MOST));
        halt
    }

    /// Whether a halt tripped here has yet to show in the record. Until it does, a new leader
    /// would not know of it, so this replica keeps the lease.
    pub(super) fn unwritten(&self) -> bool {
        self.rewrite.is_some()
    }

    /// The halt tripped here, to write again, if the record has not shown it by `now` since
    /// the last write: a write that failed (a 5xx, a timeout) is not left at that. Writing it
    /// twice is harmless: the second apply finds the same keys.
    pub(super) fn due_rewrite(&mut self, now: Instant) -> Option<Halt> {
        if self.rewrite.as_mut()?.due(now) {
            self.state.halted.clone()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minutes: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + minutes * 60).unwrap()
    }

    fn record(halted_at: Option<i64>, resumed_at: Option<i64>) -> HaltState {
        HaltState {
            halted: halted_at.map(|m| Halt {
                since: at(m),
                reason: "a replacement never came up".into(),
            }),
            resumed_at: resumed_at.map(at),
        }
    }

    #[test]
    fn a_halt_tripped_here_stands_until_a_resume_written_after_it() {
        let mut book = HaltBook::default();
        assert!(!book.read(record(None, None)));
        book.trip(
            "the gate held past --halt-after".into(),
            at(10),
            Instant::now(),
        );
        // The record has not shown the write yet, and its old resume predates the halt.
        assert!(!book.read(record(None, Some(5))));
        assert_eq!(book.halted().map(|h| h.since), Some(at(10)));
        assert_eq!(book.resumed_at(), Some(at(5)));
        // A resume written after the trip lifts it.
        assert!(book.read(record(None, Some(11))));
        assert!(book.halted().is_none());
    }

    #[test]
    fn a_halt_tripped_here_is_written_again_until_the_record_shows_it() {
        let t0 = Instant::now();
        let secs = |s| t0 + Duration::from_secs(s);
        let mut book = HaltBook::default();
        book.read(record(None, None));
        assert!(!book.unwritten());
        book.trip("the gate held past --halt-after".into(), at(10), t0);
        assert!(book.unwritten());
        // The first write is the trip's own; the next goes after 5 s, then 10, 20, 40, 60, 60.
        assert_eq!(book.due_rewrite(secs(4)), None);
        let mut sent = Vec::new();
        for s in 5..=200 {
            if let Some(halt) = book.due_rewrite(secs(s)) {
                assert_eq!(halt.since, at(10));
                sent.push(s);
            }
        }
        assert_eq!(sent, [5, 15, 35, 75, 135, 195]);
        // A read that does not show it yet changes nothing.
        assert!(!book.read(record(None, Some(5))));
        assert!(book.unwritten());
        // Once the record shows it, it is not written again.
        assert!(!book.read(record(Some(10), None)));
        assert!(!book.unwritten());
        assert_eq!(book.due_rewrite(secs(1000)), None);
    }

    #[test]
    fn a_halt_lifted_before_its_write_landed_is_not_written_again() {
        let t0 = Instant::now();
        let mut book = HaltBook::default();
        book.trip("the gate held past --halt-after".into(), at(10), t0);
        // A resume written after the trip (someone ran `resume` on the record as it was).
        assert!(book.read(record(None, Some(11))));
        assert!(!book.unwritten());
        assert_eq!(book.due_rewrite(t0 + Duration::from_secs(60)), None);
    }

    #[test]
    fn a_resume_at_the_very_time_of_the_halt_lifts_it() {
        let mut book = HaltBook::default();
        book.trip(
            "the gate held past --halt-after".into(),
            at(10),
            Instant::now(),
        );
        assert!(book.read(record(None, Some(10))));
        assert!(book.halted().is_none());
    }

    #[test]
    fn a_halt_in_the_record_replaces_one_tripped_here() {
        let mut book = HaltBook::default();
        book.trip("tripped here".into(), at(10), Instant::now());
        // Another replica's halt reached the record first: the record's stands.
        assert!(!book.read(record(Some(9), None)));
        assert_eq!(book.halted().map(|h| h.since), Some(at(9)));
        // Gone from the record: lifted, as any halt the record showed.
        assert!(book.read(record(None, None)));
        assert!(book.halted().is_none());
    }

    #[test]
    fn a_halt_in_the_record_is_lifted_when_it_goes_from_the_record() {
        let mut book = HaltBook::default();
        assert!(!book.known());
        assert!(!book.read(record(Some(10), None)));
        assert!(book.known());
        assert!(book.halted().is_some());
        // Removed from the record (by `rotor-drainer resume` or by hand), even without a
        // resume time: lifted.
        assert!(book.read(record(None, None)));
        assert!(book.halted().is_none());
    }
}
