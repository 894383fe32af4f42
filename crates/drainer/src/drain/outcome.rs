//! How a drain task ended, as the loop over nodes reads it. Plain data: the fleet's state
//! machine imports it without importing the task's I/O.

use crate::error::DrainError;
use crate::record::node::DrainRecord;

/// How a drain task ended.
#[derive(Debug)]
pub enum DrainResult {
    /// Drained (the workloads its evictions touched are in [`crate::drain::published::Published::in_flight`], for the gate).
    Drained,
    Failed {
        error: DrainError,
    },
    /// Blocked past park-after by what only a person can clear: set aside, rotor's cordon undone,
    /// retried after a back-off.
    Parked {
        blocker: String,
    },
    /// The taint went away; rotor's cordon and annotations were undone.
    Cancelled,
    /// The node disappeared.
    NodeGone,
    /// The drainer is shutting down; the node keeps its recorded state for the next leader.
    Interrupted,
    /// Nothing to do: the node's record, read fresh, says the drain is already over or must
    /// wait (see [`crate::record::node::begin_check`]). Nothing was written.
    Skipped {
        why: &'static str,
    },
}

/// A drain task's result and the node's record as the task last wrote or read it, so the
/// controller can correct its watch cache before the watch catches up.
#[derive(Debug)]
pub struct DrainOutcome {
    pub result: DrainResult,
    pub record: Option<DrainRecord>,
}
