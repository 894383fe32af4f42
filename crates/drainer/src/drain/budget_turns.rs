//! One eviction per disruption budget on the wire at a time, across all of the drainer's drains.
//!
//! The API server's eviction handler reads the pod's budget, checks that it allows one more
//! disruption, and writes the budget's status back (one disruption fewer, the pod among its
//! disrupted pods). Two evictions under one budget at once race for that write: the loser's
//! write conflicts, and the handler tries it again only after half a second. On the real control
//! plane with three drains at once, one eviction in ten took 0.4 s or more that way, against
//! 20 to 70 ms for one that does not wait. Sent one after another they do not conflict with
//! each other (the disruption controller's own status writes still can, far more rarely).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as TurnLock, OwnedMutexGuard};

use crate::drain::budgets::BudgetKey;
use crate::drain::lock;

/// The budgets with an eviction on the wire or waiting for one, each with its turn.
#[derive(Default)]
pub struct BudgetTurns(Mutex<HashMap<BudgetKey, Arc<TurnLock<()>>>>);

/// A budget's turn: while it is held, no other eviction under the budget is sent.
pub struct Turn {
    _held: OwnedMutexGuard<()>,
}

impl BudgetTurns {
    /// Waits for `budget`'s turn (in the order asked; tokio's lock is fair) and holds it until
    /// the returned [`Turn`] drops.
    pub async fn take(&self, budget: &BudgetKey) -> Turn {
        let lock = {
            let mut turns = lock(&self.0);
            // Budgets come and go with their workloads: keep only those in use.
            turns.retain(|_, lock| in_use(lock));
            turns.entry(budget.clone()).or_default().clone()
        };
        Turn {
            _held: lock.lock_owned().await,
        }
    }

    /// How many budgets have an eviction on the wire or waiting.
    #[cfg(test)]
    fn in_use(&self) -> usize {
        let turns = lock(&self.0);
        turns.values().filter(|lock| in_use(lock)).count()
    }
}

/// Whether someone holds or waits for the turn: each holds a clone of its lock beside the map's.
fn in_use(lock: &Arc<TurnLock<()>>) -> bool {
    Arc::strong_count(lock) > 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn a_budget_s_evictions_wait_for_each_other_and_other_budgets_do_not() {
        let turns = BudgetTurns::default();
        let (web, db) = (BudgetKey::from("shop/web"), BudgetKey::from("data/db"));
        let first = turns.take(&web).await;

        let mut second = Box::pin(turns.take(&web));
        assert!(
            (&mut second).now_or_never().is_none(),
            "a second eviction under shop/web must wait while the first is on the wire"
        );
        let other = turns
            .take(&db)
            .now_or_never()
            .expect("another budget's eviction does not wait");
        assert_eq!(turns.in_use(), 2);

        drop(first);
        let second = second
            .now_or_never()
            .expect("the waiting eviction goes once the first is answered");
        drop((second, other));
        assert_eq!(
            turns.in_use(),
            0,
            "no turn is held once every eviction is answered"
        );
    }

    #[tokio::test]
    async fn budgets_no_eviction_waits_for_are_forgotten() {
        let turns = BudgetTurns::default();
        for n in 0..100 {
            drop(
                turns
                    .take(&BudgetKey::from(format!("ns/b{n}").as_str()))
                    .await,
            );
        }
        let kept = turns.0.lock().unwrap().len();
        assert!(
            kept <= 1,
            "only the last budget may linger until the next take; kept {kept}"
        );
    }
}
