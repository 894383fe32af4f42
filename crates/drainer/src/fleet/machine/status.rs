//! When each RotationPolicy's status is written: what it says comes from
//! [`crate::fleet::pool_status`]; here, only whether it changed since its last write and that
//! write is old enough.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use rotor_policy::RotationPolicyStatus;

use crate::fleet::pool_status::pool_status;
use crate::fleet::pools::{PoolRef, Pools};
use crate::fleet::starts::NodeView;

/// The least time between two status writes of one policy.
pub(super) const STATUS_EVERY: Duration = Duration::from_secs(5);

/// Each policy's status as last written, and when.
#[derive(Default)]
pub(super) struct StatusBook {
    written: BTreeMap<String, (RotationPolicyStatus, Instant)>,
}

impl StatusBook {
    /// Whatever an earlier term wrote may have been changed since: write afresh.
    pub(super) fn forget_all(&mut self) {
        self.written.clear();
    }

    /// The policy was deleted: a policy of that name made later is written afresh.
    pub(super) fn forget(&mut self, policy: &str) {
        self.written.remove(policy);
    }

    /// Each policy's status where it changed since its last write and that write is at least
    /// [`STATUS_EVERY`] old, taken as written at `now`. `nodes` is the fleet as the status
    /// counts it (a drain started this pass as under way); `halt` the halt's reason.
    pub(super) fn take_due(
        &mut self,
        pools: &Pools,
        nodes: &[Cow<'_, NodeView>],
        halt: Option<&str>,
        now: Instant,
        wall: Timestamp,
    ) -> Vec<(String, RotationPolicyStatus)> {
        let mut due = Vec::new();
        for pool in pools.iter() {
            let members: Vec<&NodeView> = nodes
                .iter()
                .map(|n| n.as_ref())
                .filter(|n| n.pool.policy() == Some(pool.name.as_str()))
                .collect();
            let overlapping: Vec<&str> = nodes
                .iter()
                .filter(
                    |n| matches!(&n.pool, PoolRef::Overlap(names) if names.contains(&pool.name)),
                )
                .map(|n| n.name.as_str())
                .collect();
            let last = self.written.get(&pool.name);
            let status = pool_status(
                pool,
                &members,
                &overlapping,
                halt,
                last.map(|(s, _)| s),
                wall,
            );
            let is_due = last.is_none_or(|(written, at)| {
                *written != status && now.duration_since(*at) >= STATUS_EVERY
            });
            if is_due {
                due.push((pool.name.clone(), status));
            }
        }
        for (policy, status) in &due {
            self.written.insert(policy.clone(), (status.clone(), now));
        }
        due
    }
}
