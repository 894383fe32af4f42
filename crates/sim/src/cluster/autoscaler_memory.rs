//! What the autoscaler remembers between steps: its node groups, its scale-up and scale-down times.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::scenario::NodeGroupSpec;

/// A node group as the autoscaler sees it: its current template and target size.
#[derive(Clone, Debug)]
pub struct NodeGroup {
    pub spec: NodeGroupSpec,
    pub(super) desired: u32,
    /// Sequence for node names and instance ids, never reused.
    pub(super) next_index: u64,
}

impl NodeGroup {
    /// How many nodes the group keeps.
    pub fn desired(&self) -> u32 {
        self.desired
    }
}

/// What the autoscaler keeps from one step to the next.
#[derive(Debug, Default)]
pub struct AutoscalerMemory {
    pub(super) groups: BTreeMap<String, NodeGroup>,
    /// When each drained node was first seen empty (for scale-down).
    pub(super) empty_since: BTreeMap<String, Timestamp>,
    /// When each group last asked for a new node because of unschedulable pods.
    pub(super) last_scale_up: BTreeMap<String, Timestamp>,
}
