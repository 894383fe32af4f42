//! What the scheduler remembers between steps: unschedulable pods, node usage, its bind worker.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;

use crate::cluster::objects::Resources;
use crate::cluster::worker::SerialWorker;
use crate::store::ObjKey;

/// What the scheduler keeps from one step to the next.
#[derive(Debug, Default)]
pub struct SchedulerMemory {
    /// When each pending pod was first found unschedulable.
    pub(super) unschedulable_since: BTreeMap<ObjKey, Timestamp>,
    /// Each node's requested resources and running pods, and the resourceVersion they were
    /// summed at: the scheduler sums again only nodes whose pods were written since.
    pub(super) node_usage: HashMap<String, (u64, Resources, i64)>,
    /// The scheduler's binds, one after another (`timing.bindTime` each).
    pub(super) bind_worker: SerialWorker,
}
