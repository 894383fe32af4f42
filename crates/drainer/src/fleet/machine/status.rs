//! When each RotationPolicy's status is written: what it says comes from
//! [`crate::fleet::pool_status`]; here, only whether the status the cluster holds is out of date
//! and this replica's last write of it is old enough.
//!
//! The rule is the cluster's copy, not this replica's memory of its writes: a status goes out of
//! date between rotations too (a window closes, a policy is edited or cannot be followed), and
//! then no replica leads. Every replica compares, and one that finds a policy's status out of
//! date contends for the lease to write it ([`StatusBook::out_of_date`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use rotor_policy::RotationPolicyStatus;

use crate::fleet::pool_status::pool_status;
use crate::fleet::pools::{Pool, PoolRef, Pools};
use crate::fleet::starts::NodeView;

/// The least time between two status writes of one policy.
pub(super) const STATUS_EVERY: Duration = Duration::from_secs(5);
/// A status written that the policy watch has not shown back after this long is written again
/// (the write failed, or something else wrote the status since).
pub(super) const STATUS_AGAIN: Duration = Duration::from_secs(30);

/// Each policy's status as this replica last wrote it in its term, and when.
#[derive(Default)]
pub(super) struct StatusBook {
    written: BTreeMap<String, (RotationPolicyStatus, Instant)>,
}

impl StatusBook {
    /// A new term writes what is out of date at once.
    pub(super) fn forget_all(&mut self) {
        self.written.clear();
    }

    /// The policy was deleted: a policy of that name made later is written afresh.
    pub(super) fn forget(&mut self, policy: &str) {
        self.written.remove(policy);
    }

    /// Each policy's status where the one stored is out of date and this replica's last write
    /// of it is at least [`STATUS_EVERY`] old ([`STATUS_AGAIN`] for the same status again),
    /// taken as written at `now`. `nodes` is the fleet as the status counts it (a drain started
    /// this pass as under way); `halt` the halt's reason.
    pub(super) fn take_due(
        &mut self,
        pools: &Pools,
        nodes: &[Cow<'_, NodeView>],
        halt: Option<&str>,
        now: Instant,
        wall: Timestamp,
    ) -> Vec<(String, RotationPolicyStatus)> {
        let mut due = Vec::new();
        for (pool, status) in self.computed(pools, nodes, halt, wall) {
            if pool.stored_status.as_ref() == Some(&status) {
                continue;
            }
            let is_due = self.written.get(&pool.name).is_none_or(|(written, at)| {
                let since = now.duration_since(*at);
                since >= STATUS_EVERY && (*written != status || since >= STATUS_AGAIN)
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

    /// The first policy whose stored status differs from what it would be written as, if any:
    /// a reason to lead, so that a status does not stay wrong between rotations.
    pub(super) fn out_of_date(
        &self,
        pools: &Pools,
        nodes: &[Cow<'_, NodeView>],
        halt: Option<&str>,
        wall: Timestamp,
    ) -> Option<String> {
        self.computed(pools, nodes, halt, wall)
            .into_iter()
            .find(|(pool, status)| pool.stored_status.as_ref() != Some(status))
            .map(|(pool, _)| pool.name.clone())
    }

    /// Each policy's status as it would be written now. A condition's transition time comes
    /// from this replica's last write in its term (the watch may not have shown it yet), else
    /// from the stored status.
    fn computed<'p>(
        &self,
        pools: &'p Pools,
        nodes: &[Cow<'_, NodeView>],
        halt: Option<&str>,
        wall: Timestamp,
    ) -> Vec<(&'p Pool, RotationPolicyStatus)> {
        // One pass over the fleet, which may hold thousands of nodes.
        let mut members: BTreeMap<&str, Vec<&NodeView>> = BTreeMap::new();
        let mut overlapping: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for n in nodes.iter().map(|n| n.as_ref()) {
            match &n.pool {
                PoolRef::Policy(policy) => members.entry(policy).or_default().push(n),
                PoolRef::Overlap(policies) => {
                    for policy in policies {
                        overlapping.entry(policy).or_default().push(&n.name);
                    }
                }
                PoolRef::Flags => {}
            }
        }
        pools
            .iter()
            .map(|pool| {
                let last = self
                    .written
                    .get(&pool.name)
                    .map(|(s, _)| s)
                    .or(pool.stored_status.as_ref());
                let name = pool.name.as_str();
                let status = pool_status(
                    pool,
                    members.get(name).map_or(&[][..], Vec::as_slice),
                    overlapping.get(name).map_or(&[][..], Vec::as_slice),
                    halt,
                    last,
                    wall,
                );
                (pool, status)
            })
            .collect()
    }
}
