//! The planned choice: which candidate, started now, keeps the disruption budgets busiest over
//! the rounds ahead. A budget lets a few evictions through per round (a round is the time a
//! replacement takes to be Ready again), so the rotation cannot end before its busiest budget's
//! last round; every round in which a budget with pods left to move has none in a running drain
//! is a round lost to it. Choosing by what waits *now* ([`BudgetDemand::waits`]) misses the
//! rounds that follow: a node whose pods pass at once may hold a slot while the budget a running
//! drain is about to finish with has its next pods on a node still waiting.
//!
//! So each of the first few candidates is tried as the next start, and the rounds that follow
//! are played out ([`project`]): every budget serves the running drains in start order, a drain
//! ends in the round its last budgeted pod leaves, and each freed slot is filled greedily from
//! the waiting candidates. The candidate whose projection ends soonest goes first; candidates
//! projected to end in the same round keep the greedy order. Pure and bounded: at
//! most [`TRIED`] projections of at most [`HORIZON`] rounds over at most [`POOL`] waiting
//! nodes, whatever the fleet's size.

use std::collections::BTreeMap;

use crate::drain::budgets::{BudgetDemand, BudgetKey, DisruptionPace};

/// How many candidates, first in the greedy order, are tried as the next start.
pub(super) const TRIED: usize = 8;
/// How many waiting candidates, first in the greedy order, a projection fills later slots from.
pub(super) const POOL: usize = 64;
/// How many rounds a projection plays out; work left beyond it is estimated from the busiest
/// budget's rounds.
pub(super) const HORIZON: u32 = 64;

/// What a projection starts from.
pub(super) struct Ahead<'a> {
    /// What each running drain still needs from the budgets, in the order their evictions are
    /// served (the earliest start first).
    pub running: Vec<&'a BudgetDemand>,
    /// The candidates that may start later, first in the greedy order first.
    pub waiting: Vec<&'a BudgetDemand>,
    /// Each budget's pace; a budget without one (not yet in the budget watch) is not a limit.
    pub paces: &'a BTreeMap<BudgetKey, DisruptionPace>,
    /// How many drains may run at once (`--max-concurrent`).
    pub slots: usize,
}

/// A drain in a projection: the pods it has left per budget. A drain that would block holds
/// its slot and moves nothing.
struct Drain {
    pods: BTreeMap<BudgetKey, u32>,
    blocks: bool,
}

impl Drain {
    fn of(demand: &BudgetDemand) -> Self {
        Drain {
            pods: demand
                .pods
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| (k.clone(), *n))
                .collect(),
            blocks: demand.blocks,
        }
    }

    fn done(&self) -> bool {
        !self.blocks && self.pods.is_empty()
    }
}

impl Ahead<'_> {
    /// How many of `budget`'s pods pass in `round`: what it allows now in the first, a full
    /// round's worth after.
    fn capacity(&self, budget: &BudgetKey, round: u32) -> u64 {
        match self.paces.get(budget) {
            None => u64::MAX,
            Some(pace) if round == 0 => pace.allowed_now.max(0) as u64,
            Some(pace) => pace.per_round.max(1) as u64,
        }
    }

    fn per_round(&self, budget: &BudgetKey) -> u64 {
        self.paces
            .get(budget)
            .map_or(u64::MAX, |pace| pace.per_round.max(1) as u64)
    }
}

/// Plays out the rounds after `first` starts now beside the running drains (see the module
/// docs): the round after the last projected eviction. Past [`HORIZON`], the horizon plus the
/// rounds the busiest budget still has then.
pub(super) fn project(ahead: &Ahead<'_>, first: &BudgetDemand) -> u32 {
    let mut drains: Vec<Drain> = ahead.running.iter().map(|d| Drain::of(d)).collect();
    drains.push(Drain::of(first));
    let mut waiting: Vec<Option<&BudgetDemand>> = ahead
        .waiting
        .iter()
        .filter(|d| !d.blocks)
        .take(POOL)
        .map(|d| Some(*d))
        .collect();
    // Pods left to move under each budget, in the drains and the waiting candidates.
    let mut left: BTreeMap<BudgetKey, u64> = BTreeMap::new();
    for pods in drains
        .iter()
        .filter(|d| !d.blocks)
        .map(|d| &d.pods)
        .chain(waiting.iter().flatten().map(|d| &d.pods))
    {
        for (budget, n) in pods {
            *left.entry(budget.clone()).or_default() += u64::from(*n);
        }
    }
    for round in 0..HORIZON {
        // In round 0 too: the slots still free now go to this pass's later picks.
        fill_slots(ahead, round, &mut drains, &mut waiting, &left);
        if drains.is_empty() {
            return round;
        }
        // Each budget serves the drains in start order.
        let mut capacity: BTreeMap<&BudgetKey, u64> = BTreeMap::new();
        for drain in drains.iter_mut().filter(|d| !d.blocks) {
            for (budget, pods) in drain.pods.iter_mut() {
                let cap = capacity
                    .entry(budget)
                    .or_insert_with(|| ahead.capacity(budget, round));
                let moved = u64::from(*pods).min(*cap);
                *cap -= moved;
                *pods -= moved as u32;
                if let Some(n) = left.get_mut(budget) {
                    *n -= moved.min(*n);
                }
            }
        }
        for drain in drains.iter_mut() {
            drain.pods.retain(|_, n| *n > 0);
        }
        drains.retain(|d| !d.done());
        if drains.is_empty() && waiting.iter().all(Option::is_none) {
            return round + 1;
        }
    }
    let rest = left
        .iter()
        .map(|(budget, n)| n.div_ceil(ahead.per_round(budget)))
        .max()
        .unwrap_or(0);
    HORIZON.saturating_add(u32::try_from(rest).unwrap_or(u32::MAX))
}

/// Fills the free slots at the start of `round` from `waiting`, as the greedy choice would:
/// fewest pods waiting on what their budgets have left this round after the running drains,
/// then the busiest budget (most rounds left), then the greedy order.
fn fill_slots(
    ahead: &Ahead<'_>,
    round: u32,
    drains: &mut Vec<Drain>,
    waiting: &mut [Option<&BudgetDemand>],
    left: &BTreeMap<BudgetKey, u64>,
) {
    while drains.len() < ahead.slots {
        let room = |budget: &BudgetKey| -> i64 {
            let held: u64 = drains
                .iter()
                .filter_map(|d| d.pods.get(budget))
                .map(|n| u64::from(*n))
                .sum();
            let cap = ahead.capacity(budget, round).min(i64::MAX as u64) as i64;
            cap.saturating_sub(held as i64)
        };
        let best = waiting
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.map(|d| (i, d)))
            .min_by_key(|(i, d)| {
                let waits: i64 = d
                    .pods
                    .iter()
                    .map(|(b, n)| (i64::from(*n) - room(b)).max(0))
                    .sum();
                let rounds = d
                    .pods
                    .keys()
                    .map(|b| {
                        left.get(b)
                            .copied()
                            .unwrap_or(0)
                            .div_ceil(ahead.per_round(b))
                    })
                    .max()
                    .unwrap_or(0);
                (waits, std::cmp::Reverse(rounds), *i)
            })
            .map(|(i, _)| i);
        let Some(i) = best else { return };
        if let Some(d) = waiting[i].take() {
            drains.push(Drain::of(d));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(pods: &[(&str, u32)]) -> BudgetDemand {
        BudgetDemand {
            blocks: false,
            pods: pods
                .iter()
                .map(|(b, n)| (BudgetKey::from(*b), *n))
                .collect(),
        }
    }

    /// Budgets that each let one pod through per round, one allowed now.
    fn one_a_round(budgets: &[&str]) -> BTreeMap<BudgetKey, DisruptionPace> {
        budgets
            .iter()
            .map(|b| {
                let pace = DisruptionPace {
                    allowed_now: 1,
                    per_round: 1,
                };
                (BudgetKey::from(*b), pace)
            })
            .collect()
    }

    #[test]
    fn a_budget_whose_next_pods_wait_on_a_node_not_started_loses_its_rounds() {
        // One slot free beside a drain that moves a's last pod in round 0 and then b's for two
        // more. x's pods pass at once under c; y and z hold a's next pods.
        let paces = one_a_round(&["a", "b", "c"]);
        let running = demand(&[("a", 1), ("b", 3)]);
        let (x, y, z) = (
            demand(&[("c", 2)]),
            demand(&[("a", 3)]),
            demand(&[("a", 2)]),
        );
        let ahead = |waiting| Ahead {
            running: vec![&running],
            waiting,
            paces: &paces,
            slots: 2,
        };
        // x first: a is idle in round 1 (its next pods are on y and z, which wait for a slot),
        // and its six pods take rounds 0, 2, 3, 4, 5, 6.
        let after_x = project(&ahead(vec![&y, &z]), &x);
        // y first: a moves in every round from 0 to 5, and x takes the slot the running drain
        // frees; only c, whose two pods wait until then, loses rounds (0 to 2).
        let after_y = project(&ahead(vec![&x, &z]), &y);
        assert_eq!(after_x, 7);
        assert_eq!(after_y, 6);
    }

    #[test]
    fn a_node_without_budgeted_pods_takes_one_round_and_frees_its_slot() {
        let paces = one_a_round(&["a"]);
        let free = demand(&[]);
        let busy = demand(&[("a", 2)]);
        let ahead = Ahead {
            running: vec![],
            waiting: vec![&busy],
            paces: &paces,
            slots: 1,
        };
        // Round 0: the free node; rounds 1 and 2: a's two pods.
        assert_eq!(project(&ahead, &free), 3);
    }

    #[test]
    fn a_blocking_drain_holds_its_slot_and_moves_nothing() {
        let paces = one_a_round(&["a"]);
        let mut stuck = demand(&[("a", 1)]);
        stuck.blocks = true;
        let next = demand(&[("a", 1)]);
        let ahead = Ahead {
            running: vec![&stuck],
            waiting: vec![&next],
            paces: &paces,
            slots: 2,
        };
        let p = project(&ahead, &demand(&[("a", 1)]));
        // The tried node moves a's pod in round 0, `next` in round 1; the stuck drain never
        // ends, so the projection runs to the horizon with nothing left to estimate.
        assert_eq!(p, HORIZON);
        // Blocking candidates are never started in a projection.
        let ahead = Ahead {
            running: vec![],
            waiting: vec![&stuck],
            paces: &paces,
            slots: 2,
        };
        assert_eq!(project(&ahead, &next), 1);
    }

    #[test]
    fn a_budget_that_allows_several_per_round_moves_them_together() {
        // Five a round, none allowed now (the last round's pods not yet replaced).
        let paces = BTreeMap::from([(
            BudgetKey::from("catalog"),
            DisruptionPace {
                allowed_now: 0,
                per_round: 5,
            },
        )]);
        let ahead = Ahead {
            running: vec![],
            waiting: vec![],
            paces: &paces,
            slots: 1,
        };
        assert_eq!(project(&ahead, &demand(&[("catalog", 7)])), 3);
        // A budget the watch has not seen yet is not a limit.
        assert_eq!(project(&ahead, &demand(&[("unknown", 7)])), 1);
    }

    #[test]
    fn work_beyond_the_horizon_is_estimated_from_the_busiest_budget() {
        let paces = one_a_round(&["a"]);
        let long = demand(&[("a", HORIZON + 10)]);
        let ahead = Ahead {
            running: vec![],
            waiting: vec![],
            paces: &paces,
            slots: 1,
        };
        assert_eq!(project(&ahead, &long), HORIZON + 10);
    }
}
