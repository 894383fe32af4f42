//! Drain taints that arrive together (a selector run, or an operator tainting a list of nodes)
//! come as one watch event per node. Choosing at the first one would pick among the few seen so
//! far, and with several slots, often neighbours that queue on the same budgets; so new starts
//! wait until no new taint has arrived for [`TAINT_QUIET`], at most [`TAINT_BURST_MAX`] after the
//! first. Resumed drains and the taints found by the initial node list do not wait.

use std::time::{Duration, Instant};

const TAINT_QUIET: Duration = Duration::from_millis(250);
const TAINT_BURST_MAX: Duration = Duration::from_secs(2);

/// The burst of taints under way, if any.
#[derive(Default)]
pub(super) struct TaintBurst {
    first: Option<Instant>,
    last: Option<Instant>,
}

impl TaintBurst {
    pub(super) fn taint_arrived(&mut self, now: Instant) {
        if self.settles_at(now).is_none() {
            self.first = Some(now);
        }
        self.last = Some(now);
    }

    /// When the burst under way at `now` is over; `None` when none is.
    pub(super) fn settles_at(&self, now: Instant) -> Option<Instant> {
        let (first, last) = (self.first?, self.last?);
        let over = (last + TAINT_QUIET).min(first + TAINT_BURST_MAX);
        (over > now).then_some(over)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_taints_settles_after_a_quiet_spell_or_at_most_the_cap() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut burst = TaintBurst::default();
        assert_eq!(burst.settles_at(t0), None);
        burst.taint_arrived(t0);
        assert_eq!(burst.settles_at(t0), Some(ms(250)));
        // Each taint within the quiet spell extends it...
        burst.taint_arrived(ms(200));
        assert_eq!(burst.settles_at(ms(200)), Some(ms(450)));
        assert_eq!(burst.settles_at(ms(449)), Some(ms(450)));
        assert_eq!(burst.settles_at(ms(450)), None);
        // ...up to the cap, so a steady trickle does not hold starts for ever.
        let mut trickle = TaintBurst::default();
        for i in 0..10 {
            trickle.taint_arrived(ms(i * 200));
        }
        assert_eq!(trickle.settles_at(ms(1_800)), Some(ms(2_000)));
        assert_eq!(trickle.settles_at(ms(2_000)), None);
        // A taint after the burst is over starts a new one.
        trickle.taint_arrived(ms(5_000));
        assert_eq!(trickle.settles_at(ms(5_000)), Some(ms(5_250)));
    }
}
