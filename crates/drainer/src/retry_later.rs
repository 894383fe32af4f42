//! A write or removal that failed and is tried again later, less and less often: the first try
//! `first` after the failure, each wait after that twice the one before, up to `at_most`. The
//! caller asks [`RetryLater::due`] on its own clock (pure, so its tests need no timer); the
//! waits are backon's exponential curve without jitter.

use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// When the next try is due, and the waits after it.
#[derive(Debug)]
pub struct RetryLater {
    next_at: Instant,
    waits: ExponentialBackoff,
}

impl RetryLater {
    /// A failure at `now`: tried again at `now + first`, then after waits doubling up to
    /// `at_most`.
    pub fn after(now: Instant, first: Duration, at_most: Duration) -> Self {
        let mut waits = ExponentialBuilder::default()
            .with_min_delay(first)
            .with_factor(2.0)
            .with_max_delay(at_most)
            .without_max_times()
            .build();
        // The curve starts at `first`: that wait is the one before the first try.
        let first = waits.next().unwrap_or(first);
        Self {
            next_at: now + first,
            waits,
        }
    }

    /// Whether a try is due at `now`. When it is, the caller makes it, and the next one waits
    /// longer (from `now`, so a late look does not bunch the tries up).
    pub fn due(&mut self, now: Instant) -> bool {
        if now < self.next_at {
            return false;
        }
        let wait = self.waits.next().unwrap_or(Duration::MAX);
        self.next_at = now.checked_add(wait).unwrap_or(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seconds at which a retry made at 0 is due, looked at every second up to `until`.
    fn tries(first: u64, at_most: u64, until: u64) -> Vec<u64> {
        let t0 = Instant::now();
        let secs = |s| t0 + Duration::from_secs(s);
        let mut retry =
            RetryLater::after(t0, Duration::from_secs(first), Duration::from_secs(at_most));
        (0..=until).filter(|s| retry.due(secs(*s))).collect()
    }

    #[test]
    fn tries_come_first_after_the_first_wait_then_twice_as_far_apart_up_to_the_cap() {
        assert_eq!(tries(5, 60, 200), [5, 15, 35, 75, 135, 195]);
        assert_eq!(tries(5, 300, 700), [5, 15, 35, 75, 155, 315, 615]);
    }

    #[test]
    fn a_late_look_makes_one_try_and_the_next_wait_counts_from_it() {
        let t0 = Instant::now();
        let mut retry = RetryLater::after(t0, Duration::from_secs(5), Duration::from_secs(60));
        assert!(!retry.due(t0 + Duration::from_secs(4)));
        assert!(retry.due(t0 + Duration::from_secs(100)), "overdue: one try");
        assert!(
            !retry.due(t0 + Duration::from_secs(101)),
            "not one per missed wait"
        );
        assert!(!retry.due(t0 + Duration::from_secs(109)));
        assert!(
            retry.due(t0 + Duration::from_secs(110)),
            "10 s after the late try"
        );
    }
}
