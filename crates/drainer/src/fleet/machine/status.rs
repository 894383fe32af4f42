//! When each RotationPolicy's status is written: what it says comes from
//! [`crate::fleet::pool_status`]; here, only whether the status the cluster holds is out of date
//! and this replica's last write of it is old enough.
//!
//! The rule is the cluster's copy, not this replica's memory of its writes: a status goes out of
//! date between rotations too (a window closes, a policy is edited or cannot be followed), and
//! then no replica leads. Every replica compares, and one that finds a policy's status out of
//! date contends for the lease to write it ([`StatusBook::out_of_date`]). A write the policy
//! watch does not show back (refused, say, for want of RBAC on `rotationpolicies/status`) is
//! made again less and less often, and is no reason to lead meanwhile: a status that cannot be
//! written must not keep a replica leading.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use rotor_core::contract::DrainPhase;
use rotor_policy::RotationPolicyStatus;

use crate::fleet::pool_status::pool_status;
use crate::fleet::pools::{Pool, PoolRef, Pools};
use crate::fleet::starts::NodeView;

/// The least time between two status writes of one policy.
pub(super) const STATUS_EVERY: Duration = Duration::from_secs(5);
/// A status written that the policy watch has not shown back after this long is written again
/// (the write failed, or something else wrote the status since); each further time it is not
/// shown back, the wait doubles, up to [`STATUS_AGAIN_MAX`].
pub(super) const STATUS_AGAIN: Duration = Duration::from_secs(30);
const STATUS_AGAIN_MAX: Duration = Duration::from_secs(600);

/// The fleet grouped by policy, as the status counts it: a drain started this pass counts as
/// under way (queued) before its record says so.
pub(super) struct Grouped<'a> {
    members: BTreeMap<&'a str, Vec<&'a NodeView>>,
    overlapping: BTreeMap<&'a str, Vec<&'a str>>,
}

/// Copies, with the phase `Queued`, of the nodes this replica started draining whose record
/// does not say so yet: few, and none on a replica that does not lead.
pub(super) fn queued_copies(
    nodes: &BTreeMap<String, NodeView>,
    running: &BTreeSet<String>,
) -> Vec<NodeView> {
    running
        .iter()
        .filter_map(|name| nodes.get(name))
        .filter(|n| !n.record.is_active())
        .map(queued_copy)
        .collect()
}

/// A copy of `n`, whose drain this replica started, as under way (queued): its record does not
/// say so until the drain's first write.
pub(super) fn queued_copy(n: &NodeView) -> NodeView {
    let mut v = n.clone();
    v.record.phase = Some(DrainPhase::Queued);
    v
}

impl<'a> Grouped<'a> {
    /// One pass over the fleet, which may hold thousands of nodes; `queued` stands in for the
    /// nodes of the same name ([`queued_copies`]).
    pub(super) fn new(nodes: &'a BTreeMap<String, NodeView>, queued: &'a [NodeView]) -> Self {
        let mut grouped = Grouped {
            members: BTreeMap::new(),
            overlapping: BTreeMap::new(),
        };
        for n in nodes.values() {
            let n = queued.iter().find(|q| q.name == n.name).unwrap_or(n);
            match &n.pool {
                PoolRef::Policy(policy) => grouped.members.entry(policy).or_default().push(n),
                PoolRef::Overlap(policies) => {
                    for policy in policies {
                        grouped.overlapping.entry(policy).or_default().push(&n.name);
                    }
                }
                PoolRef::Flags => {}
            }
        }
        grouped
    }
}

/// A write not shown back yet: what it said (transition times left out, as a later term
/// computes them afresh), how many times it was made, and when it may be made next.
struct Unshown {
    content: RotationPolicyStatus,
    writes: u32,
    again_at: Instant,
}

/// `status` without its conditions' transition times.
fn content(status: &RotationPolicyStatus) -> RotationPolicyStatus {
    let mut content = status.clone();
    for condition in &mut content.conditions {
        condition.last_transition_time.clear();
    }
    content
}

/// Each policy's status as this replica last wrote it in its term, and when; and the writes
/// the policy watch has not shown back, across terms.
#[derive(Default)]
pub(super) struct StatusBook {
    written: BTreeMap<String, (RotationPolicyStatus, Instant)>,
    unshown: BTreeMap<String, Unshown>,
}

impl StatusBook {
    /// A term begins or ends: what this replica wrote may have been changed since by another.
    pub(super) fn forget_written(&mut self) {
        self.written.clear();
    }

    /// The policy was deleted: a policy of that name made later is written afresh.
    pub(super) fn forget(&mut self, policy: &str) {
        self.written.remove(policy);
        self.unshown.remove(policy);
    }

    /// Each policy's status where the one stored is out of date and this replica's last write
    /// of it is at least [`STATUS_EVERY`] old (the same status not shown back, not before its
    /// retry time), taken as written at `now`. `halt` is the halt's reason.
    pub(super) fn take_due(
        &mut self,
        pools: &Pools,
        fleet: &Grouped<'_>,
        halt: Option<&str>,
        now: Instant,
        wall: Timestamp,
    ) -> Vec<(String, RotationPolicyStatus)> {
        let mut due = Vec::new();
        for pool in pools.iter() {
            let status = self.computed(pool, fleet, halt, wall);
            if !self.stale(pool, &status) || self.retry_waits(pool, &status, now) {
                continue;
            }
            let is_due = self
                .written
                .get(&pool.name)
                .is_none_or(|(_, at)| now.duration_since(*at) >= STATUS_EVERY);
            if is_due {
                due.push((pool.name.clone(), status));
            }
        }
        for (policy, status) in &due {
            self.written.insert(policy.clone(), (status.clone(), now));
            let content = content(status);
            let unshown = self.unshown.entry(policy.clone()).or_insert(Unshown {
                content: content.clone(),
                writes: 0,
                again_at: now,
            });
            if unshown.content != content {
                // Something else to say: its retries count afresh.
                unshown.content = content;
                unshown.writes = 0;
            }
            unshown.writes += 1;
            let wait = STATUS_AGAIN.saturating_mul(1 << (unshown.writes - 1).min(5));
            unshown.again_at = now + wait.min(STATUS_AGAIN_MAX);
        }
        due
    }

    /// The first policy whose stored status differs from what it would be written as, and
    /// which is not waiting to retry a write not shown back: a reason to lead, so that a status
    /// does not stay wrong between rotations.
    pub(super) fn out_of_date(
        &mut self,
        pools: &Pools,
        fleet: &Grouped<'_>,
        halt: Option<&str>,
        now: Instant,
        wall: Timestamp,
    ) -> Option<String> {
        pools.iter().find_map(|pool| {
            let status = self.computed(pool, fleet, halt, wall);
            (self.stale(pool, &status) && !self.retry_waits(pool, &status, now))
                .then(|| pool.name.clone())
        })
    }

    /// Whether `status` is what a write of `pool`'s not shown back said, and its retry time
    /// has not come. Something else to say is written at once.
    fn retry_waits(&self, pool: &Pool, status: &RotationPolicyStatus, now: Instant) -> bool {
        self.unshown
            .get(&pool.name)
            .is_some_and(|u| now < u.again_at && u.content == content(status))
    }

    /// Whether `pool`'s stored status differs from `status`. One that does not is shown back:
    /// its retries are over.
    fn stale(&mut self, pool: &Pool, status: &RotationPolicyStatus) -> bool {
        let stale = pool.stored_status.as_ref() != Some(status);
        if !stale {
            self.unshown.remove(&pool.name);
        }
        stale
    }

    /// A policy's status as it would be written now. A condition's transition time comes from
    /// this replica's last write in its term (the watch may not have shown it yet), else from
    /// the stored status.
    fn computed(
        &self,
        pool: &Pool,
        fleet: &Grouped<'_>,
        halt: Option<&str>,
        wall: Timestamp,
    ) -> RotationPolicyStatus {
        let last = self
            .written
            .get(&pool.name)
            .map(|(s, _)| s)
            .or(pool.stored_status.as_ref());
        let name = pool.name.as_str();
        pool_status(
            pool,
            fleet.members.get(name).map_or(&[][..], Vec::as_slice),
            fleet.overlapping.get(name).map_or(&[][..], Vec::as_slice),
            halt,
            last,
            wall,
        )
    }
}
