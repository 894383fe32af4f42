//! How fast each disruption budget gives its disruptions back, as rotor's own evictions show it.
//! Running drains record every eviction a budget was charged for; when a pod that had to wait
//! for its budget finally goes, the time since the eviction whose slot it took is one sample of
//! that budget's cycle (an evicted pod's replacement scheduled and Ready). The node choice uses
//! this to tell a budget about to give a disruption back from one that has just taken one, so
//! that the budget that will finish last is kept busy.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::drain::budgets::BudgetKey;
use crate::drain::lock;

/// How many of a budget's latest evictions are kept. A budget that lets more through at once is
/// never measured (its delay counts 0, as for an unknown pace).
const KEPT: usize = 64;

/// A budget rotor has not evicted under for this long is forgotten (budgets come and go with
/// their workloads).
const FORGET_AFTER: Duration = Duration::from_secs(3_600);

/// A sample this many times the current estimate is not a cycle: the pod waited for something
/// else (a budget that allowed nothing for a while, the slow recheck backstop).
const OUTLIER: f64 = 3.0;

/// Weight of the newest sample in a budget's cycle estimate.
const NEWEST_WEIGHT: f64 = 0.5;

/// A budget's recent evictions (newest last) and its estimated cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lane {
    pub evictions: VecDeque<Instant>,
    pub cycle: Option<Duration>,
}

/// Every budget's [`Lane`], by `namespace/name`, shared by the drains and the controller.
#[derive(Default)]
pub struct BudgetPace(Mutex<HashMap<BudgetKey, Lane>>);

impl BudgetPace {
    /// Records an eviction charged to `budget` at `at`. `per_round` is how many disruptions
    /// the budget allows at once; `waited` says the pod had been held by the budget until now,
    /// so its slot came back just now from the eviction `per_round` evictions ago.
    pub fn evicted(&self, budget: &BudgetKey, per_round: usize, at: Instant, waited: bool) {
        let mut lanes = lock(&self.0);
        let lane = lanes.entry(budget.clone()).or_default();
        let per_round = per_round.max(1);
        if waited && lane.evictions.len() >= per_round {
            let freed_by = lane.evictions[lane.evictions.len() - per_round];
            let sample = at.saturating_duration_since(freed_by);
            lane.cycle = match lane.cycle {
                Some(old) if sample.as_secs_f64() > old.as_secs_f64() * OUTLIER => Some(old),
                Some(old) => Some(old.mul_f64(1.0 - NEWEST_WEIGHT) + sample.mul_f64(NEWEST_WEIGHT)),
                None => Some(sample),
            };
        }
        lane.evictions.push_back(at);
        while lane.evictions.len() > KEPT {
            lane.evictions.pop_front();
        }
    }

    /// A copy of every lane, for one choice at `now`; lanes idle for [`FORGET_AFTER`] go.
    pub fn lanes(&self, now: Instant) -> HashMap<BudgetKey, Lane> {
        let mut lanes = lock(&self.0);
        lanes.retain(|_, lane| {
            lane.evictions
                .back()
                .is_some_and(|last| now.saturating_duration_since(*last) < FORGET_AFTER)
        });
        lanes.clone()
    }
}

/// How far, in rounds, `lane`'s budget is from giving back its next disruption at `now`: 0
/// while it has some to give (`left_now`, what it allows less what running drains and earlier
/// picks claim, is positive) or its pace is unknown; otherwise the time until the oldest of its
/// last `per_round` evictions is a cycle old, over the cycle (between 0 and 1).
pub fn rounds_until_free(lane: Option<&Lane>, left_now: i64, per_round: i64, now: Instant) -> f64 {
    if left_now > 0 {
        return 0.0;
    }
    let Some(lane) = lane else { return 0.0 };
    let Some(cycle) = lane.cycle.filter(|c| !c.is_zero()) else {
        return 0.0;
    };
    let per_round = usize::try_from(per_round.max(1)).unwrap_or(1);
    let Some(oldest) = lane
        .evictions
        .len()
        .checked_sub(per_round)
        .map(|i| lane.evictions[i])
    else {
        return 0.0;
    };
    let Some(free_at) = oldest.checked_add(cycle) else {
        return 0.0;
    };
    (free_at.saturating_duration_since(now).as_secs_f64() / cycle.as_secs_f64()).min(1.0)
}

/// [`rounds_until_free`] for every budget in `paces` (`namespace/name` to its
/// [`crate::drain::budgets::DisruptionPace`], as [`crate::drain::budgets::budget_paces`] gives them), with `left_now`
/// what each has left after the claims of running drains and earlier picks.
pub fn delays(
    lanes: &HashMap<BudgetKey, Lane>,
    left_now: &BTreeMap<BudgetKey, i64>,
    paces: &BTreeMap<BudgetKey, crate::drain::budgets::DisruptionPace>,
    now: Instant,
) -> BTreeMap<BudgetKey, f64> {
    paces
        .iter()
        .map(|(budget, pace)| {
            let left = left_now.get(budget).copied().unwrap_or(0);
            let d = rounds_until_free(lanes.get(budget), left, pace.per_round, now);
            (budget.clone(), d)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_waiting_pods_eviction_measures_the_cycle_and_others_do_not() {
        let pace = BudgetPace::default();
        let t0 = Instant::now();
        pace.evicted(&"shop/checkout".into(), 1, t0, false);
        // Went at once (the budget had room): not a cycle.
        pace.evicted(&"shop/checkout".into(), 1, t0 + ms(500), false);
        assert_eq!(
            pace.lanes(t0)[&BudgetKey::from("shop/checkout")].cycle,
            None
        );
        // Waited for the budget: 2 s since the eviction whose slot it took.
        pace.evicted(&"shop/checkout".into(), 1, t0 + ms(2_500), true);
        assert_eq!(
            pace.lanes(t0)[&BudgetKey::from("shop/checkout")].cycle,
            Some(ms(2_000))
        );
        // The estimate follows new samples halfway.
        pace.evicted(&"shop/checkout".into(), 1, t0 + ms(5_500), true);
        assert_eq!(
            pace.lanes(t0)[&BudgetKey::from("shop/checkout")].cycle,
            Some(ms(2_500))
        );
        // With 3 at a time, the slot came from the eviction three back.
        for i in 0..3 {
            pace.evicted(&"shop/catalog".into(), 3, t0 + ms(i * 10), false);
        }
        pace.evicted(&"shop/catalog".into(), 3, t0 + ms(2_000), true);
        assert_eq!(
            pace.lanes(t0)[&BudgetKey::from("shop/catalog")].cycle,
            Some(ms(2_000))
        );
        // A first eviction that waited has nothing to measure against.
        pace.evicted(&"data/db".into(), 1, t0, true);
        assert_eq!(pace.lanes(t0)[&BudgetKey::from("data/db")].cycle, None);
        // A wait far longer than the cycle is not a cycle.
        pace.evicted(&"shop/checkout".into(), 1, t0 + ms(30_000), true);
        assert_eq!(
            pace.lanes(t0)[&BudgetKey::from("shop/checkout")].cycle,
            Some(ms(2_500))
        );
        // Budgets rotor has not evicted under for an hour are forgotten.
        let later = t0 + FORGET_AFTER + ms(30_001);
        pace.evicted(&"shop/catalog".into(), 3, later, false);
        assert_eq!(
            pace.lanes(later).keys().collect::<Vec<_>>(),
            [&BudgetKey::from("shop/catalog")]
        );
    }

    #[test]
    fn a_budget_that_just_took_a_disruption_is_a_round_away_and_one_about_to_give_it_back_is_not() {
        // Far enough from the process's start that subtracting stays in range.
        let now = Instant::now() + ms(60_000);
        let lane = |ago: u64| Lane {
            evictions: [now - ms(ago)].into(),
            cycle: Some(ms(2_000)),
        };
        assert_eq!(rounds_until_free(Some(&lane(0)), 0, 1, now), 1.0);
        assert_eq!(rounds_until_free(Some(&lane(1_500)), 0, 1, now), 0.25);
        assert_eq!(rounds_until_free(Some(&lane(3_000)), 0, 1, now), 0.0);
        // Room now, or nothing known: no delay.
        assert_eq!(rounds_until_free(Some(&lane(0)), 1, 1, now), 0.0);
        assert_eq!(rounds_until_free(None, 0, 1, now), 0.0);
        let unmeasured = Lane {
            cycle: None,
            ..lane(0)
        };
        assert_eq!(rounds_until_free(Some(&unmeasured), 0, 1, now), 0.0);
        // Fewer evictions recorded than the round: the slot is not rotor's to track.
        assert_eq!(rounds_until_free(Some(&lane(0)), 0, 3, now), 0.0);
    }
}
