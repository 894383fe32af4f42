//! What the disruption controller remembers between steps: its queue of budgets and its worker.

use std::collections::{HashSet, VecDeque};

use jiff::Timestamp;

use crate::cluster::worker::SerialWorker;
use crate::store::ObjKey;

/// What the disruption controller keeps from one step to the next.
#[derive(Debug, Default)]
pub struct DisruptionMemory {
    pub(super) queue: BudgetQueue,
    /// The one worker that syncs the queue (`timing.budgetSyncTime` a sync).
    pub(super) worker: SerialWorker,
    /// The resourceVersion at which it last ran: the next run looks only at what was written
    /// since.
    pub(super) last_run: u64,
}

/// Budgets waiting for the disruption controller's worker, each once, oldest first, with the
/// time each was queued.
#[derive(Debug, Default)]
pub(super) struct BudgetQueue {
    order: VecDeque<(ObjKey, Timestamp)>,
    queued: HashSet<ObjKey>,
}

impl BudgetQueue {
    /// Queues `key` unless it is already waiting (it keeps its place, as in a work queue).
    pub(super) fn push(&mut self, key: ObjKey, at: Timestamp) {
        if self.queued.insert(key.clone()) {
            self.order.push_back((key, at));
        }
    }

    pub(super) fn front(&self) -> Option<Timestamp> {
        self.order.front().map(|(_, at)| *at)
    }

    /// The queued budgets, oldest first.
    pub(super) fn keys(&self) -> impl Iterator<Item = &ObjKey> {
        self.order.iter().map(|(key, _)| key)
    }

    pub(super) fn pop(&mut self) -> Option<ObjKey> {
        let (key, _) = self.order.pop_front()?;
        self.queued.remove(&key);
        Some(key)
    }
}
