//! The RotationPolicies as the machine knows them: whether they have been read, which label
//! keys the nodes' summaries must carry for their selectors, which pool a node is in, and what
//! that pool allows now. Pure: the policy watch's events in, answers out.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::fleet::node_labels::LabelKeys;
use crate::fleet::pools::{DrainPolicy, FlagDrain, Pool, PoolRef, Pools, in_force};
use crate::fleet::starts::{NodeView, PoolRules};
use crate::fleet::window::{MaintenanceWindow, any_open};

/// The pool no RotationPolicy selects, as the flags set it; a policy's drain settings fall
/// back to these too.
#[derive(Clone, Debug)]
pub(in crate::fleet) struct FlagPool {
    /// The maintenance windows (`--window`).
    pub windows: Vec<MaintenanceWindow>,
    /// `--require-approval`: a drain starts only on a node approved by annotation.
    pub require_approval: bool,
    /// What policies' drain settings fall back to, and whether the drainer can surge.
    pub drain: FlagDrain,
}

/// The policies read, and the flags' pool beside them. The machine places every node afresh
/// after each change of the policies ([`PolicyBook::place`]).
pub(super) struct PolicyBook {
    pools: Pools,
    /// The policy watch has answered (listed, or found no CRD).
    known: bool,
    /// The label keys the nodes' summaries are read with from now on: those the policies'
    /// selectors name.
    label_keys: LabelKeys,
    /// Some summaries lack a key a policy now selects by: the nodes are being read again, and
    /// no drain starts or resumes until they have been (a node's pool may be wrong meanwhile).
    labels_stale: bool,
    /// The shell is to read every node again ([`PolicyBook::take_read_nodes_again`]).
    read_nodes_again: bool,
    flags: FlagPool,
}

impl PolicyBook {
    /// Nothing read yet; with no policy watch (`watch_policies` off, in tests), nothing to wait
    /// for either.
    pub(super) fn new(watch_policies: bool, flags: FlagPool) -> Self {
        PolicyBook {
            pools: Pools::default(),
            known: !watch_policies,
            label_keys: LabelKeys::default(),
            labels_stale: false,
            read_nodes_again: false,
            flags,
        }
    }

    /// The watch listed every policy.
    pub(super) fn listed(&mut self, pools: Vec<Pool>) {
        self.pools = Pools::new(pools.into_iter().map(|p| self.checked(p)));
        self.known = true;
        self.changed();
    }

    /// A policy was added or changed. Returns whether its spec may have changed, and with it
    /// which nodes it governs: not when only its status did (the same generation), as each
    /// status write brings back.
    pub(super) fn applied(&mut self, pool: Pool) -> bool {
        let pool = self.checked(pool);
        let same_spec = self
            .pools
            .get(&pool.name)
            .is_some_and(|old| old.generation.is_some() && old.generation == pool.generation);
        self.pools.insert(pool);
        if !same_spec {
            self.changed();
        }
        !same_spec
    }

    /// A policy was deleted.
    pub(super) fn deleted(&mut self, name: &str) {
        self.pools.remove(name);
        self.changed();
    }

    /// The RotationPolicy resource is not installed: every node follows the flags.
    pub(super) fn absent(&mut self) {
        self.pools = Pools::default();
        self.known = true;
        self.changed();
    }

    /// Whether the policy watch has answered (listed, or found no CRD), or none runs.
    pub(super) fn known(&self) -> bool {
        self.known
    }

    pub(super) fn pools(&self) -> &Pools {
        &self.pools
    }

    /// The label keys to read the nodes' summaries with.
    pub(super) fn label_keys(&self) -> &LabelKeys {
        &self.label_keys
    }

    /// Whether the nodes are being read again for a label key: until then a node's pool may be
    /// wrong.
    pub(super) fn labels_stale(&self) -> bool {
        self.labels_stale
    }

    /// The nodes have been listed with the keys asked for when the list began: every one now
    /// needed. Returns whether they were being read again for a key.
    pub(super) fn nodes_listed(&mut self) -> bool {
        std::mem::take(&mut self.labels_stale)
    }

    /// Whether the shell is to read every node again, now. Asked once.
    pub(super) fn take_read_nodes_again(&mut self) -> bool {
        std::mem::take(&mut self.read_nodes_again)
    }

    /// A policy checked against the flags it falls back to.
    fn checked(&self, mut pool: Pool) -> Pool {
        pool.check_against(&self.flags.drain);
        pool
    }

    /// Keep the label keys the selectors name, and ask for the nodes again when that adds one.
    fn changed(&mut self) {
        let needed = self.pools.label_keys();
        if !self.label_keys.covers(&needed) {
            // Also while the first list is under way: part of it was read without the key.
            self.labels_stale = true;
            self.read_nodes_again = true;
        }
        // Narrowing needs no read: summaries with a key no longer needed only hold more.
        self.label_keys = needed;
    }

    /// Puts a node in its pool; whether it awaits approval follows the pool's setting.
    pub(super) fn place(&self, view: &mut NodeView) {
        view.pool = self.pools.assign(&view.labels);
        let require_approval = match view.pool.policy().and_then(|p| self.pools.get(p)) {
            Some(pool) => pool
                .drain
                .require_approval
                .unwrap_or(self.flags.require_approval),
            None => self.flags.require_approval,
        };
        view.awaiting_approval = require_approval && !view.drain_approved;
    }

    /// The pools' rules at `wall`, for a choice among the candidates, with a round's nodes
    /// `counted_beside` its view.
    pub(super) fn rules<'a>(
        &'a self,
        wall: Timestamp,
        counted_beside: &'a BTreeMap<PoolRef, usize>,
    ) -> PoolRules<'a> {
        PoolRules {
            pools: &self.pools,
            flags_open: any_open(&self.flags.windows, wall),
            counted_beside,
        }
    }

    /// Whether the pool of `node` lets a drain start now, as far as its rules decide: for a
    /// node no policy selects, the flags' windows open; for a policy's node, the policy
    /// readable and a budget in force for its drain reason, none of them `0` (a pause holds
    /// every node of the pool until a person changes the policy or a schedule ends it). An
    /// overlap never may.
    pub(super) fn pool_lets_start(&self, node: &NodeView, wall: Timestamp) -> bool {
        match &node.pool {
            PoolRef::Flags => any_open(&self.flags.windows, wall),
            PoolRef::Overlap(_) => false,
            PoolRef::Policy(name) => self.pools.get(name).is_some_and(|pool| {
                let budgets = in_force(&pool.budgets, Some(&node.reason), wall);
                pool.invalid.is_none()
                    && !budgets.is_empty()
                    && !budgets.iter().any(|&i| pool.budgets[i].nodes.lets_none())
            }),
        }
    }

    /// Whether room made ahead of `node`'s drain is worth having now: its pool surges and lets
    /// a drain start now ([`Self::pool_lets_start`]). Room no drain may use yet only costs:
    /// placeholders, and the nodes an autoscaler keeps for them.
    pub(super) fn room_ahead_pays(&self, node: &NodeView, wall: Timestamp) -> bool {
        self.surges(&node.pool) && self.pool_lets_start(node, wall)
    }

    /// Whether what time decides about starting `node` differs between `then` and `now`: the
    /// flags' windows open or closed, or other budgets of its policy in force (or none). A
    /// start weighed at `then` and made at `now` stands only if it does not; the rest of what
    /// decided it is the machine's own state, which does not change while a round is weighed.
    pub(super) fn time_rules_changed(
        &self,
        node: &NodeView,
        then: Timestamp,
        now: Timestamp,
    ) -> bool {
        match &node.pool {
            PoolRef::Flags => {
                any_open(&self.flags.windows, then) != any_open(&self.flags.windows, now)
            }
            PoolRef::Overlap(_) => false,
            PoolRef::Policy(name) => self.pools.get(name).is_some_and(|pool| {
                let at = |t| in_force(&pool.budgets, Some(&node.reason), t);
                at(then) != at(now)
            }),
        }
    }

    /// What a drain of a node of `pool` runs with, when a policy governs it.
    pub(super) fn drain_policy(&self, pool: &PoolRef) -> Option<DrainPolicy> {
        let pool = self.pools.get(pool.policy()?)?;
        Some(DrainPolicy {
            name: pool.name.clone(),
            drain: pool.drain.clone(),
            surge: pool.surges(&self.flags.drain),
        })
    }

    /// Whether the node's policies hold it until a person acts: an overlap, or its policy
    /// cannot be followed.
    pub(super) fn holds_for_a_person(&self, node: &NodeView) -> bool {
        match &node.pool {
            PoolRef::Overlap(_) => true,
            PoolRef::Policy(name) => self.pools.get(name).is_none_or(|p| p.invalid.is_some()),
            PoolRef::Flags => false,
        }
    }

    /// Whether drains of this pool make room first.
    pub(super) fn surges(&self, pool: &PoolRef) -> bool {
        match pool.policy().and_then(|p| self.pools.get(p)) {
            Some(pool) => pool.surges(&self.flags.drain),
            None => self.flags.drain.surge_timeout.is_some(),
        }
    }
}
