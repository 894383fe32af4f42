//! A controller that does one thing at a time. kube-scheduler binds one pod after another and
//! the disruption controller syncs one budget after another, each item an API round trip and
//! some work, so a burst of items is done over a while rather than at once: on the real control
//! plane a drain's 20 evictions have their replacements bound over about half a second, and a
//! budget whose pod became Ready is counted only after the budgets queued before it.
//!
//! The simulator's controllers run once a tick. An item is written at the step nearest the time
//! the worker finishes it (at most half a tick early), so a cost below half a tick, with the
//! worker idle, changes nothing, and a queue of items spreads over the steps that follow.

use std::time::Duration;

use jiff::Timestamp;

fn plus(t: Timestamp, ms: i64) -> Timestamp {
    Timestamp::from_millisecond(t.as_millisecond() + ms).unwrap_or(t)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Halfway between two steps: when, on average, something a step finds happened since the
/// last one (a pod evicted, a replacement's start-up ended). A real controller would have had
/// it then, so its worker's time on it is counted from there.
pub fn midway(last_step: Timestamp, now: Timestamp) -> Timestamp {
    plus(
        last_step,
        (now.as_millisecond() - last_step.as_millisecond()) / 2,
    )
}

/// When the worker finishes what it has taken; `None` before its first item.
#[derive(Clone, Copy, Debug, Default)]
pub struct SerialWorker {
    busy_until: Option<Timestamp>,
}

impl SerialWorker {
    /// When the worker would finish one more item of `cost` that could start at `ready`.
    pub fn done_at(&self, cost: Duration, ready: Timestamp) -> Timestamp {
        let start = self.busy_until.map_or(ready, |b| b.max(ready));
        plus(start, ms(cost))
    }

    /// Takes the item if the worker finishes it by the step at `now` (steps `tick` apart):
    /// true means write it now. Zero cost always takes it.
    pub fn take(
        &mut self,
        cost: Duration,
        ready: Timestamp,
        now: Timestamp,
        tick: Duration,
    ) -> bool {
        if cost.is_zero() {
            return true;
        }
        let done = self.done_at(cost, ready);
        if done.as_millisecond() - now.as_millisecond() > ms(tick) / 2 {
            return false;
        }
        self.busy_until = Some(done);
        true
    }

    /// The step time from which an item of `cost` available at `ready` would be taken.
    pub fn wake_at(&self, cost: Duration, ready: Timestamp, tick: Duration) -> Timestamp {
        plus(self.done_at(cost, ready), -ms(tick) / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(100);

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    /// How many of `items` (all ready at t=0) each step from t=0 writes.
    fn per_step(cost_ms: u64, items: usize, steps: i64) -> Vec<usize> {
        let cost = Duration::from_millis(cost_ms);
        let mut w = SerialWorker::default();
        let mut left = items;
        (0..steps)
            .map(|s| {
                let now = at(s * 100);
                let mut n = 0;
                while left > 0 && w.take(cost, at(0), now, TICK) {
                    left -= 1;
                    n += 1;
                }
                n
            })
            .collect()
    }

    #[test]
    fn a_burst_is_spread_over_the_steps_at_the_workers_pace() {
        // 25 ms an item: done at 25, 50 | 75 .. 150 | 175 .. 250 | ...; each written at the
        // step within half a tick of it.
        assert_eq!(per_step(25, 10, 4), vec![2, 4, 4, 0]);
        // Slower than a tick: one item every other step, the first one a step late.
        assert_eq!(per_step(200, 3, 7), vec![0, 0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn zero_cost_takes_everything_at_once() {
        assert_eq!(per_step(0, 30, 2), vec![30, 0]);
    }

    #[test]
    fn an_idle_worker_starts_when_the_item_is_ready_not_when_it_last_worked() {
        let cost = Duration::from_millis(40);
        let mut w = SerialWorker::default();
        assert!(w.take(cost, at(0), at(0), TICK));
        // Idle since 40 ms: an item ready at 10 s is done at 10.04 s, not at 80 ms.
        assert_eq!(w.done_at(cost, at(10_000)), at(10_040));
        assert!(w.take(cost, at(10_000), at(10_000), TICK));
        // Busy until 10.04 s: the next item, ready earlier, queues behind it.
        assert_eq!(w.done_at(cost, at(9_000)), at(10_080));
        assert_eq!(w.wake_at(cost, at(9_000), TICK), at(10_030));
    }
}
