//! Which tainted nodes may start draining now. [`choose_nodes_to_start`] takes every node of the
//! cluster as a [`NodeView`] and starts as many candidates as `--max-concurrent` and
//! `--max-unavailable` allow (unavailable as Karpenter counts it: NotReady, cordoned or deleting),
//! already-cordoned nodes first, then those whose pods' budgets let a drain proceed now (when the
//! controller has scored them), then the oldest; every candidate it holds back comes with why.
//!
//! A node that has not yet been Ready since it joined (a replacement still booting) is neither
//! unavailable nor part of the fleet's size for up to `--node-startup-grace`, as
//! cluster-autoscaler treats such nodes as "not started" rather than unready and Karpenter leaves
//! uninitialized nodes out of its budgets: it is capacity arriving, not capacity lost. Past the
//! grace it counts as NotReady, so replacements that never come up (a broken image) stop the
//! rotation.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use rotor_core::contract::{
    DrainPhase, find_drain_taint, node_drain_approved, node_opted_out, pre_drain_hooks,
};

use rotor_apimachinery::conditions::node_is_ready;
use rotor_apimachinery::taints::keeps_pods_off;
use rotor_core::NodeBudget;

use crate::fleet::held::{Held, HeldReason};
use crate::fleet::node_labels::{LabelKeys, LabelStrings, NodeLabels};
use crate::fleet::pools::{NO_POLICIES, Pool, PoolRef, Pools, allowance};
use crate::record::node::{DrainRecord, cordoned};

/// What the fleet decision needs to know about one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeView {
    pub name: String,
    /// Carries the drain taint.
    pub tainted: bool,
    /// The drain taint's effect keeps pods off the node (`NoSchedule` or `NoExecute`, not
    /// `PreferNoSchedule`): from then on only a scheduler with a stale cache can still bind one.
    pub taint_keeps_pods_off: bool,
    /// When this process first saw the drain taint keep pods off the node, continuously since
    /// (the controller carries it from one view of the node to the next, and starts it afresh
    /// at a re-list); what `--settle` counts from (see `drain::settled_at`). `None` otherwise.
    pub tainted_since: Option<std::time::Instant>,
    /// The drainer's record on the node.
    pub record: DrainRecord,
    /// Condition `Ready` is `True`.
    pub ready: bool,
    /// Ready now, or seen Ready earlier by this process (the controller carries it from one
    /// view of the node to the next). A NotReady node that never was is still starting.
    pub ever_ready: bool,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// Has a `deletionTimestamp`.
    pub deleting: bool,
    /// Carries `rotor.dev/do-not-disrupt: "true"`.
    pub opted_out: bool,
    /// The pre-drain hooks holding it (`pre-drain.hook.rotor.dev/<name>`; see
    /// [`rotor_core::contract::pre_drain_hooks`]).
    pub pre_drain_hooks: Vec<String>,
    /// Carries `rotor.dev/drain-approved: "true"`.
    pub drain_approved: bool,
    /// `--require-approval` is on and the node is not approved: its drain may not start (the
    /// controller sets it from `drain_approved`).
    pub awaiting_approval: bool,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// Pods a drain started now would wait for on their budgets
    /// ([`crate::drain::budgets::BudgetDemand::waits`]); the controller fills it in for the first few candidates
    /// when there is a choice to make, `None` elsewhere.
    pub budget_waits: Option<u32>,
    /// The node's place in the planned choice ([`crate::fleet::lookahead`]): 0 for the
    /// candidates whose start now is projected to keep the budgets busiest, counting up; it
    /// comes before `budget_waits`, which breaks its ties. The controller fills it in for the
    /// first few candidates when there is a choice to make, `None` elsewhere (after them).
    pub plan_rank: Option<u32>,
    /// How many more rounds of evictions (in hundredths) the busiest budget among this node's
    /// pods still has ahead of it across the fleet, counting how far it is into its current one
    /// (see `controller::choice`); among nodes with equal `budget_waits`, the one with the
    /// largest goes first, so that the budget that will take longest is never left idle. 0 when
    /// not known.
    pub budget_urgency: u32,
    /// Holds placeholders made ahead of its drain (`--surge`; the controller fills it in from
    /// what it reserved, which for a few seconds may still be on its way). Among nodes with equal `budget_waits` it goes first: its drain evicts
    /// at once, and passing it over would leave room already paid for unused.
    pub room_made_ahead: bool,
    /// The node's labels that RotationPolicies select by (the others are not kept).
    pub labels: NodeLabels,
    /// The drain taint's value (its reason slug); empty when untainted.
    pub reason: String,
    /// The pool that governs it (the machine assigns it from the policies it knows).
    pub pool: PoolRef,
}

impl NodeView {
    /// The view of a Node object, every label kept.
    pub fn of(node: &Node) -> Self {
        Self::with_strings(node, &LabelKeys::Every, &mut LabelStrings::default())
    }

    /// [`NodeView::of`] keeping only the labels with a key in `keys`, their strings shared
    /// through `strings` with the other nodes'.
    pub fn with_strings(node: &Node, keys: &LabelKeys, strings: &mut LabelStrings) -> Self {
        let ready = node_is_ready(node);
        NodeView {
            name: node.metadata.name.clone().unwrap_or_default(),
            tainted: find_drain_taint(node).is_some(),
            taint_keeps_pods_off: find_drain_taint(node).is_some_and(keeps_pods_off),
            tainted_since: None,
            record: DrainRecord::from_annotations(node.metadata.annotations.as_ref()),
            ready,
            ever_ready: ready,
            unschedulable: cordoned(node),
            deleting: node.metadata.deletion_timestamp.is_some(),
            opted_out: node_opted_out(&node.metadata),
            pre_drain_hooks: pre_drain_hooks(&node.metadata),
            drain_approved: node_drain_approved(&node.metadata),
            awaiting_approval: false,
            created: node.metadata.creation_timestamp.as_ref().map(|t| t.0),
            budget_waits: None,
            plan_rank: None,
            budget_urgency: 0,
            room_made_ahead: false,
            labels: NodeLabels::new(
                node.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
                keys,
                strings,
            ),
            reason: find_drain_taint(node)
                .and_then(|t| t.value.clone())
                .unwrap_or_default(),
            pool: PoolRef::Flags,
        }
    }

    /// Tainted and mid-drain (queued, cordoned, evicting or blocked).
    pub fn is_active(&self) -> bool {
        self.tainted && self.record.is_active()
    }

    /// Tainted and drained by rotor: empty of workload pods, waiting to be retired.
    pub fn is_drained(&self) -> bool {
        self.tainted && self.record.phase == Some(DrainPhase::Drained)
    }

    /// Counts against `--max-unavailable`: NotReady, cordoned, deleting, or being drained.
    ///
    /// A node rotor has finished draining does not count while it waits for the autoscaler or
    /// the selector to retire it: its pods already run elsewhere (the gate checked they are
    /// Ready again), so holding the budget for it would only tie the rotation's pace to the
    /// retirement delay. Capacity shortfall is what the gate's pending-pod check is for, and the
    /// selector's `--max-tainted` bounds how many such nodes exist.
    pub fn is_unavailable(&self) -> bool {
        if self.is_drained() && !self.deleting && self.ready {
            return false;
        }
        !self.ready || self.unschedulable || self.deleting || self.is_active()
    }

    /// Whether a choice needs this node only as one more in its pool's size: untainted,
    /// available and not starting, so neither a candidate nor counted as unavailable, active or
    /// starting. A round counts such nodes per pool instead of copying their views: at 20,000
    /// nodes, a copy of every view each pass was most of what a draining drainer added to its
    /// memory.
    pub fn only_counts(&self, now: Timestamp, grace: Duration) -> bool {
        !self.tainted && !self.is_unavailable() && !self.is_starting(now, grace)
    }

    /// A node that joined less than `grace` ago and has not been Ready yet, and that nobody has
    /// cordoned, tainted for draining or started deleting: a replacement still booting. Nodes of
    /// unknown age never qualify, and a zero grace turns the rule off.
    pub fn is_starting(&self, now: Timestamp, grace: Duration) -> bool {
        let young = self.created.is_some_and(|created| {
            now.duration_since(created)
                .try_into()
                .is_ok_and(|age: Duration| age < grace)
        });
        young
            && !self.ready
            && !self.ever_ready
            && !self.unschedulable
            && !self.deleting
            && !self.tainted
    }
}

/// The fleet-wide limits on draining.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetLimits {
    /// Drains under way at once.
    pub max_concurrent: usize,
    /// Nodes unavailable at once, drains included.
    pub max_unavailable: NodeBudget,
    /// How long a new node that has not been Ready yet is left out of the count (see
    /// [`NodeView::is_starting`]).
    pub startup_grace: Duration,
}

/// What to tell an operator at start-up when `--max-concurrent` promises more drains at once
/// than `--max-unavailable` allows for a fleet of `nodes` (each drain takes a node out), or
/// `None`. Nodes RotationPolicies govern follow their own budgets.
pub fn concurrency_note(limits: &FleetLimits, nodes: usize) -> Option<String> {
    let allowed = limits.max_unavailable.resolve(nodes);
    (limits.max_concurrent > allowed.max(1)).then(|| {
        format!(
            "--max-concurrent {} is more than --max-unavailable {} allows for {nodes} node(s) ({allowed}): nodes no RotationPolicy governs drain at most {} at a time; raise --max-unavailable (or give their pools policies) to drain more at once",
            limits.max_concurrent,
            limits.max_unavailable,
            allowed.max(1).min(limits.max_concurrent)
        )
    })
}

/// Which nodes to start draining, and why the others wait.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetDecision {
    /// Node names to start, in the order chosen.
    pub start: Vec<String>,
    /// Tainted nodes that do not start now, with why (one line each, for logs and Events).
    pub held: Vec<Held>,
    /// Drains under way before this decision.
    pub active: usize,
    /// New nodes still starting, left out of `total` and `unavailable`.
    pub starting: usize,
    /// Nodes unavailable before this decision.
    pub unavailable: usize,
    /// `max_unavailable` resolved against the cluster size.
    pub allowed_unavailable: usize,
}

/// The candidates worth scoring with [`crate::drain::budgets::BudgetDemand::waits`] when drain slots are
/// free, leaving out those `known` already has a score for: the first `head` in
/// [`choose_nodes_to_start`]'s order, and `spread` more taken evenly from the rest. Neighbours in
/// age order often host the same workloads (they were filled together), so looking only at the
/// head would keep picking among nodes that wait on the same budget.
pub fn candidates_to_score(
    nodes: &[NodeView],
    now: Timestamp,
    retry_backoff: impl Fn(u32) -> Duration,
    head: usize,
    spread: usize,
    known: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut all = candidates(nodes, now, &retry_backoff, None);
    all.retain(|n| !known(&n.name));
    let mut picked: Vec<&NodeView> = all.iter().take(head).copied().collect();
    let rest = &all[picked.len()..];
    if spread > 0 && !rest.is_empty() {
        let step = (rest.len() as f64 / spread as f64).max(1.0);
        let mut i = 0.0;
        while (i as usize) < rest.len() && picked.len() < head + spread {
            picked.push(rest[i as usize]);
            i += step;
        }
    }
    picked.into_iter().map(|n| n.name.clone()).collect()
}

/// The names of every node that may start now, in the order they are taken (see
/// [`choose_nodes_to_start`]).
pub fn candidate_names(
    nodes: &[NodeView],
    now: Timestamp,
    retry_backoff: impl Fn(u32) -> Duration,
) -> Vec<String> {
    candidates(nodes, now, &retry_backoff, None)
        .into_iter()
        .map(|n| n.name.clone())
        .collect()
}

/// What keeps a tainted node from starting to drain now, whatever the fleet limits say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartBlock {
    /// The node carries `rotor.dev/do-not-disrupt`.
    OptedOut,
    /// Pre-drain hooks hold it ([`NodeView::pre_drain_hooks`]); only a start, never a drain
    /// under way.
    PreDrainHooks,
    /// Not approved under `--require-approval` ([`NodeView::awaiting_approval`]); only a start.
    AwaitingApproval,
    /// Its drain is under way.
    Draining,
    /// It is drained, waiting to be retired.
    Drained,
    /// Its last attempt failed; the next may start at this time.
    BackingOff(Timestamp),
}

/// What keeps the tainted `node` from starting now (see [`StartBlock`]); `None` when it may.
pub fn start_block(
    node: &NodeView,
    now: Timestamp,
    retry_backoff: impl Fn(u32) -> Duration,
) -> Option<StartBlock> {
    if node.opted_out {
        return Some(StartBlock::OptedOut);
    }
    if node.is_active() {
        return Some(StartBlock::Draining);
    }
    let block = match node.record.phase {
        Some(DrainPhase::Drained) => Some(StartBlock::Drained),
        Some(DrainPhase::Failed | DrainPhase::Parked) => node
            .record
            .backing_off_until(now, retry_backoff)
            .map(StartBlock::BackingOff),
        _ => None,
    };
    block
        .or_else(|| (!node.pre_drain_hooks.is_empty()).then_some(StartBlock::PreDrainHooks))
        .or_else(|| {
            node.awaiting_approval
                .then_some(StartBlock::AwaitingApproval)
        })
}

/// Tainted nodes that may start (not opted out, not held by pre-drain hooks, not draining or drained, not backing off), in
/// the order they are taken; those held for their own sake go to `held`.
fn candidates<'a>(
    nodes: &'a [NodeView],
    now: Timestamp,
    retry_backoff: &impl Fn(u32) -> Duration,
    mut held: Option<&mut Vec<Held>>,
) -> Vec<&'a NodeView> {
    let mut hold = |name: &str, why: HeldReason| {
        if let Some(held) = held.as_mut() {
            held.push((name.to_string(), why));
        }
    };
    let mut candidates = Vec::new();
    for node in nodes.iter().filter(|n| n.tainted) {
        match start_block(node, now, retry_backoff) {
            None => candidates.push(node),
            Some(StartBlock::OptedOut) => hold(&node.name, HeldReason::OptedOut),
            Some(StartBlock::AwaitingApproval) => hold(&node.name, HeldReason::AwaitingApproval),
            Some(StartBlock::PreDrainHooks) => hold(
                &node.name,
                HeldReason::PreDrainHooks(node.pre_drain_hooks.clone()),
            ),
            Some(StartBlock::BackingOff(retry_at))
                if node.record.phase == Some(DrainPhase::Parked) =>
            {
                hold(
                    &node.name,
                    HeldReason::Parked {
                        blocker: node.record.blocker.clone().unwrap_or_default(),
                        retry_at,
                    },
                )
            }
            Some(StartBlock::BackingOff(retry_at)) => hold(
                &node.name,
                HeldReason::BackingOff {
                    attempts: node.record.attempts,
                    retry_at,
                },
            ),
            Some(StartBlock::Draining | StartBlock::Drained) => {}
        }
    }
    // Cordoned first (they cost no budget), then the planned choice's order, then those whose
    // pods' budgets let their drain proceed now, then those whose room is made, then the budget
    // that will finish last, then the oldest.
    candidates.sort_by(|a, b| {
        let key = |n: &'a NodeView| {
            (
                !n.unschedulable,
                n.plan_rank.unwrap_or(u32::MAX),
                n.budget_waits.unwrap_or(u32::MAX),
                !n.room_made_ahead,
                std::cmp::Reverse(n.budget_urgency),
                n.created.is_none(),
                n.created,
                &n.name,
            )
        };
        key(a).cmp(&key(b))
    });
    candidates
}

/// Chooses the tainted nodes that may start draining now.
///
/// Candidates: tainted, not opted out, not already draining, not drained, and — when failed —
/// only once `retry_backoff(attempts)` has passed since the failure (the record's `deadline`,
/// which [`crate::record::node::apply`] sets to the failure time; `started_at` if it has none). Opted-out
/// nodes and failed nodes still backing off are reported in `held` too.
///
/// Candidates are taken cordoned first (they are unavailable already), then by `plan_rank`, then by fewest
/// `budget_waits` (unscored nodes after scored ones), then those with `room_made_ahead`, then
/// largest `budget_urgency`, then oldest `created` (unknown last), then by name. Each start needs a free `max_concurrent` slot, and one unit of
/// `max_unavailable` unless the node is already unavailable (cordoned, NotReady or deleting). A
/// budget that resolves to zero starts nothing, even cordoned nodes (fail closed). Nodes still
/// starting ([`NodeView::is_starting`]) count neither as unavailable nor in the fleet's size.
pub fn choose_nodes_to_start(
    nodes: &[NodeView],
    limits: &FleetLimits,
    now: Timestamp,
    retry_backoff: impl Fn(u32) -> Duration,
) -> FleetDecision {
    choose_in_pools(nodes, limits, PoolRules::flags_only(), now, retry_backoff)
}

/// What a choice applies besides the fleet limits: the RotationPolicies, whether the flags'
/// `--window`s are open (they govern only the nodes no policy selects), and the nodes left out
/// of the view because they count only towards their pool's size ([`NodeView::only_counts`]).
#[derive(Clone, Copy, Debug)]
pub struct PoolRules<'a> {
    pub pools: &'a Pools,
    pub flags_open: bool,
    pub counted_beside: &'a BTreeMap<PoolRef, usize>,
}

/// No node left out of the view.
static NONE_BESIDE: BTreeMap<PoolRef, usize> = BTreeMap::new();

impl PoolRules<'static> {
    /// No policies and the flags' windows open: every node follows `--max-unavailable`.
    pub fn flags_only() -> Self {
        PoolRules {
            pools: &NO_POLICIES,
            flags_open: true,
            counted_beside: &NONE_BESIDE,
        }
    }
}

/// [`choose_nodes_to_start`] with each node's pool: a node no policy selects is held by
/// `--max-unavailable` (over those nodes alone) and the flags' windows; a node a policy governs
/// by that policy's budget in force (over the policy's nodes, see
/// [`crate::fleet::pools::allowance`]); a node several policies select at one priority, and a
/// node whose policy cannot be followed, never start. `--max-concurrent` bounds every start.
pub fn choose_in_pools(
    nodes: &[NodeView],
    limits: &FleetLimits,
    rules: PoolRules<'_>,
    now: Timestamp,
    retry_backoff: impl Fn(u32) -> Duration,
) -> FleetDecision {
    let counted = |n: &&NodeView| !n.is_starting(now, limits.startup_grace);
    let starting = nodes.len() - nodes.iter().filter(counted).count();
    let mut pool_total: BTreeMap<PoolRef, usize> = BTreeMap::new();
    for (pool, count) in rules.counted_beside {
        for pool in pool.counted_in() {
            *pool_total.entry(pool).or_default() += count;
        }
    }
    let mut pool_unavailable: BTreeMap<PoolRef, usize> = BTreeMap::new();
    for n in nodes.iter().filter(counted) {
        for pool in n.pool.counted_in() {
            *pool_total.entry(pool.clone()).or_default() += 1;
            if n.is_unavailable() {
                *pool_unavailable.entry(pool).or_default() += 1;
            }
        }
    }
    let flags = PoolRef::Flags;
    let total = pool_total.get(&flags).copied().unwrap_or(0);
    let unavailable = pool_unavailable.get(&flags).copied().unwrap_or(0);
    let active = nodes.iter().filter(|n| n.is_active()).count();
    let allowed_unavailable = limits.max_unavailable.resolve(total);
    let mut decision = FleetDecision {
        active,
        starting,
        unavailable,
        allowed_unavailable,
        ..FleetDecision::default()
    };

    let candidates = candidates(nodes, now, &retry_backoff, Some(&mut decision.held));

    let mut started = 0;
    // Nodes this decision makes unavailable, by pool.
    let mut newly: BTreeMap<&PoolRef, usize> = BTreeMap::new();
    for node in candidates {
        let already_unavailable = node.is_unavailable();
        let draining = active + started;
        let unavailable_now = pool_unavailable.get(&node.pool).copied().unwrap_or(0)
            + newly.get(&node.pool).copied().unwrap_or(0);
        let slots_full = (draining >= limits.max_concurrent).then_some(HeldReason::MaxConcurrent {
            max_concurrent: limits.max_concurrent,
            draining,
        });
        let why = match &node.pool {
            PoolRef::Flags => {
                if !rules.flags_open {
                    Some(HeldReason::OutsideWindows)
                } else if allowed_unavailable == 0 {
                    Some(HeldReason::NoneAllowed {
                        max_unavailable: limits.max_unavailable,
                        total,
                    })
                } else if slots_full.is_some() {
                    slots_full
                } else if !already_unavailable && unavailable_now >= allowed_unavailable {
                    Some(HeldReason::MaxUnavailable {
                        max_unavailable: limits.max_unavailable,
                        unavailable: unavailable_now,
                        total,
                    })
                } else {
                    None
                }
            }
            PoolRef::Overlap(names) => Some(HeldReason::PolicyOverlap(names.clone())),
            PoolRef::Policy(name) => {
                let pool_size = pool_total.get(&node.pool).copied().unwrap_or(0);
                match rules.pools.get(name) {
                    None => Some(HeldReason::PolicyInvalid {
                        policy: name.clone(),
                        why: "the drainer no longer knows it".into(),
                    }),
                    Some(pool) => {
                        policy_hold(pool, node, pool_size, unavailable_now, now).or(slots_full)
                    }
                }
            }
        };
        match why {
            Some(why) => decision.held.push((node.name.clone(), why)),
            None => {
                started += 1;
                if !already_unavailable {
                    *newly.entry(&node.pool).or_default() += 1;
                }
                decision.start.push(node.name.clone());
            }
        }
    }
    decision
}

/// What a policy's own rules say about starting `node` now, in a pool of `pool_size` nodes of
/// which `unavailable` are out: invalid, closed and paused hold even a cordoned node (fail
/// closed); the budget holds only a node its start would take out.
fn policy_hold(
    pool: &Pool,
    node: &NodeView,
    pool_size: usize,
    unavailable: usize,
    now: Timestamp,
) -> Option<HeldReason> {
    let policy = pool.name.clone();
    if let Some(why) = &pool.invalid {
        return Some(HeldReason::PolicyInvalid {
            policy,
            why: why.clone(),
        });
    }
    let allowance = allowance(&pool.budgets, Some(&node.reason), pool_size, now);
    if allowance.budget.is_none() {
        return Some(HeldReason::PolicyClosed {
            policy,
            opens: allowance.until,
        });
    }
    if allowance.paused() {
        return Some(HeldReason::PolicyPaused {
            policy,
            until: allowance.until,
        });
    }
    (!node.is_unavailable() && unavailable >= allowance.allowed).then(|| HeldReason::PolicyBudget {
        policy,
        budget: allowance.shown(pool_size),
        unavailable,
    })
}

#[cfg(test)]
mod tests {
    use rotor_core::contract::DrainPhase;
    use serde_json::json;

    use super::*;
    use crate::fleet::held::Limit;
    use crate::record::node::{Transition, apply, retry_backoff};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn now() -> Timestamp {
        ts("2025-03-01T12:00:00Z")
    }

    fn node(name: &str) -> NodeView {
        NodeView {
            name: name.into(),
            ready: true,
            ever_ready: true,
            created: Some(ts("2025-01-01T00:00:00Z")),
            ..NodeView::default()
        }
    }

    fn tainted(name: &str) -> NodeView {
        NodeView {
            tainted: true,
            ..node(name)
        }
    }

    fn draining(name: &str, phase: DrainPhase) -> NodeView {
        let mut n = tainted(name);
        n.record.phase = Some(phase);
        n.record.deadline = Some(ts("2025-03-01T13:00:00Z"));
        n
    }

    fn limits(max_concurrent: usize, max_unavailable: &str) -> FleetLimits {
        FleetLimits {
            max_concurrent,
            max_unavailable: max_unavailable.parse().unwrap(),
            startup_grace: Duration::from_secs(600),
        }
    }

    fn held_text(d: &FleetDecision) -> Vec<(String, String)> {
        d.held
            .iter()
            .map(|(n, why)| (n.clone(), why.to_string()))
            .collect()
    }

    fn held_names(d: &FleetDecision) -> Vec<&str> {
        d.held.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// A node two policies came to select while its drain was under way starts nothing, but
    /// its drain still counts in each policy's budget: the pool does not start another.
    #[test]
    fn a_node_in_an_overlap_counts_in_each_of_its_policies_budgets() {
        use crate::fleet::pools::{Pools, one_node_at_a_time};
        let pools = Pools::new([one_node_at_a_time("general"), one_node_at_a_time("east")]);
        let overlap = PoolRef::Overlap(vec!["east".into(), "general".into()]);
        let mut under_way = draining("gen-3", DrainPhase::Evicting);
        under_way.pool = overlap;
        let mut view = vec![under_way];
        for (name, pool) in [
            ("gen-5", "general"),
            ("east-1", "east"),
            ("gen-7", "general"),
        ] {
            let mut n = tainted(name);
            n.pool = PoolRef::Policy(pool.into());
            n.reason = "image".into();
            view.push(n);
        }
        let rules = PoolRules {
            pools: &pools,
            ..PoolRules::flags_only()
        };
        let decision = choose_in_pools(&view, &limits(5, "100%"), rules, now(), retry_backoff);
        assert!(decision.start.is_empty(), "{:?}", decision.start);
        let held = held_text(&decision);
        assert!(
            held.iter().any(|(n, why)| n == "gen-5"
                && why.contains("RotationPolicy general: budget 1 of 3 reached")),
            "{held:?}"
        );
        assert!(
            held.iter()
                .any(|(n, why)| n == "east-1" && why.contains("RotationPolicy east")),
            "{held:?}"
        );
    }

    #[test]
    fn node_view_reads_a_node_object() {
        let n: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "ip-10-0-0-1", "creationTimestamp": "2025-01-02T03:04:05Z",
                         "labels": {"pool": "gpu"},
                         "annotations": {"rotor.dev/phase": "evicting", "rotor.dev/do-not-disrupt": "true"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "rotor.dev/drain", "value": "max-age", "effect": "NoSchedule"}]},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let view = NodeView::of(&n);
        assert_eq!(
            view,
            NodeView {
                name: "ip-10-0-0-1".into(),
                tainted: true,
                taint_keeps_pods_off: true,
                tainted_since: None,
                record: DrainRecord {
                    phase: Some(DrainPhase::Evicting),
                    ..DrainRecord::default()
                },
                ready: true,
                ever_ready: true,
                unschedulable: true,
                deleting: false,
                opted_out: true,
                pre_drain_hooks: vec![],
                drain_approved: false,
                awaiting_approval: false,
                created: Some(ts("2025-01-02T03:04:05Z")),
                budget_waits: None,
                plan_rank: None,
                budget_urgency: 0,
                room_made_ahead: false,
                labels: NodeLabels::of_pairs(&[("pool", "gpu")]),
                reason: "max-age".into(),
                pool: PoolRef::Flags,
            }
        );
        // PreferNoSchedule only asks the scheduler to avoid the node.
        let preferred: Node = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"taints": [{"key": "rotor.dev/drain", "value": "ami", "effect": "PreferNoSchedule"}]}
        }))
        .unwrap();
        let view = NodeView::of(&preferred);
        assert!(view.tainted && !view.taint_keeps_pods_off);
        let bare: Node = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        let view = NodeView::of(&bare);
        assert!(!view.ready && !view.tainted && !view.unschedulable);
    }

    #[test]
    fn max_concurrent_counts_active_drains() {
        let nodes = [
            draining("a", DrainPhase::Evicting),
            tainted("b"),
            tainted("c"),
            node("d"),
        ];
        let d = choose_nodes_to_start(&nodes, &limits(1, "100%"), now(), retry_backoff);
        assert!(d.start.is_empty());
        assert_eq!(
            held_text(&d),
            [
                (
                    "b".to_string(),
                    "max-concurrent 1 reached (1 draining)".to_string()
                ),
                (
                    "c".to_string(),
                    "max-concurrent 1 reached (1 draining)".to_string()
                ),
            ]
        );
        assert_eq!(d.active, 1);

        let d = choose_nodes_to_start(&nodes, &limits(2, "100%"), now(), retry_backoff);
        assert_eq!(d.start, ["b"]);
        assert_eq!(
            d.held[0].1.to_string(),
            "max-concurrent 2 reached (2 draining)"
        );
        assert_eq!(d.held[0].1.limit(), Some(Limit::MaxConcurrent));
    }

    #[test]
    fn drained_and_failed_nodes_do_not_occupy_slots() {
        let mut failed = draining("f", DrainPhase::Failed);
        failed.record.attempts = 1;
        failed.record.deadline = Some(ts("2025-03-01T11:59:30Z"));
        let nodes = [draining("d", DrainPhase::Drained), failed, tainted("x")];
        let d = choose_nodes_to_start(&nodes, &limits(1, "100%"), now(), retry_backoff);
        assert_eq!(d.active, 0);
        assert_eq!(d.start, ["x"]);
        assert_eq!(held_names(&d), ["f"]);
        assert!(
            d.held[0]
                .1
                .to_string()
                .contains("retrying at 2025-03-01T12:00:30Z"),
            "{}",
            d.held[0].1
        );
    }

    #[test]
    fn failed_node_is_retried_after_its_backoff() {
        let failed = {
            let r = apply(
                &DrainRecord::default(),
                Transition::Start {
                    now: ts("2025-03-01T10:00:00Z"),
                    drain_timeout: Duration::from_secs(3600),
                },
            );
            let r = apply(
                &r,
                Transition::Failed {
                    error: "deadline".into(),
                    now: ts("2025-03-01T11:00:00Z"),
                },
            );
            let r = apply(
                &r,
                Transition::Retry {
                    now: ts("2025-03-01T11:01:00Z"),
                    drain_timeout: Duration::from_secs(60),
                },
            );
            let r = apply(
                &r,
                Transition::Failed {
                    error: "deadline".into(),
                    now: ts("2025-03-01T11:02:00Z"),
                },
            );
            NodeView {
                record: r,
                ..tainted("f")
            }
        };
        assert_eq!(failed.record.attempts, 2);
        let l = limits(1, "1");
        // Two failures: back-off of 2 minutes from 11:02.
        let d = choose_nodes_to_start(
            std::slice::from_ref(&failed),
            &l,
            ts("2025-03-01T11:03:59Z"),
            retry_backoff,
        );
        assert!(d.start.is_empty());
        let d = choose_nodes_to_start(
            std::slice::from_ref(&failed),
            &l,
            ts("2025-03-01T11:04:00Z"),
            retry_backoff,
        );
        assert_eq!(d.start, ["f"]);
    }

    #[test]
    fn max_unavailable_counts_not_ready_cordoned_and_deleting_nodes() {
        let nodes = [
            NodeView {
                ready: false,
                ..node("sick")
            },
            NodeView {
                unschedulable: true,
                ..node("cordoned-by-someone")
            },
            NodeView {
                deleting: true,
                ..node("going")
            },
            tainted("t1"),
            tainted("t2"),
            node("n1"),
            node("n2"),
            node("n3"),
            node("n4"),
            node("n5"),
        ];
        // 40% of 10 = 4; 3 unavailable: one start.
        let d = choose_nodes_to_start(&nodes, &limits(5, "40%"), now(), retry_backoff);
        assert_eq!(d.unavailable, 3);
        assert_eq!(d.allowed_unavailable, 4);
        assert_eq!(d.start, ["t1"]);
        assert_eq!(
            held_text(&d),
            [(
                "t2".to_string(),
                "max-unavailable 40% reached (4 of 10 nodes unavailable)".to_string()
            )]
        );
        assert_eq!(d.held[0].1.limit(), Some(Limit::MaxUnavailable));
        assert_eq!(HeldReason::OptedOut.limit(), None);
        let d = choose_nodes_to_start(&nodes, &limits(5, "3"), now(), retry_backoff);
        assert!(d.start.is_empty());
    }

    #[test]
    fn a_replacement_still_booting_is_capacity_arriving_not_capacity_lost() {
        let booting = |name: &str, age_secs: i64| NodeView {
            ready: false,
            ever_ready: false,
            created: Some(now() - jiff::SignedDuration::from_secs(age_secs)),
            ..node(name)
        };
        let nodes = [
            draining("a", DrainPhase::Evicting),
            tainted("b"),
            node("c"),
            booting("new-1", 30),
        ];
        // One drain under way and a replacement booting: with --max-unavailable 2 the next
        // drain may start; the booting node is not part of the fleet's size either.
        let d = choose_nodes_to_start(&nodes, &limits(2, "2"), now(), retry_backoff);
        assert_eq!((d.unavailable, d.starting), (1, 1));
        assert_eq!(d.start, ["b"]);
        // 60% of the 3 nodes that count is 2 (of all 4 it would be 3).
        let d = choose_nodes_to_start(&nodes, &limits(2, "60%"), now(), retry_backoff);
        assert_eq!(d.allowed_unavailable, 2);

        // Past --node-startup-grace it is a node that never came up: it counts, and holds.
        let nodes = [
            draining("a", DrainPhase::Evicting),
            tainted("b"),
            node("c"),
            booting("new-1", 601),
        ];
        let d = choose_nodes_to_start(&nodes, &limits(2, "2"), now(), retry_backoff);
        assert_eq!((d.unavailable, d.starting), (2, 0));
        assert!(d.start.is_empty());
        assert_eq!(
            d.held[0].1.to_string(),
            "max-unavailable 2 reached (2 of 4 nodes unavailable)"
        );

        // A young node that was Ready and went NotReady is broken, not starting; so is a
        // booting node someone cordoned, is deleting, or tainted for draining; and a zero grace
        // turns the rule off.
        let broken = NodeView {
            ever_ready: true,
            ..booting("new-2", 30)
        };
        let cordoned = NodeView {
            unschedulable: true,
            ..booting("new-3", 30)
        };
        let deleting = NodeView {
            deleting: true,
            ..booting("new-4", 30)
        };
        let unknown_age = NodeView {
            created: None,
            ..booting("new-5", 30)
        };
        for n in [&broken, &cordoned, &deleting, &unknown_age] {
            assert!(
                !n.is_starting(now(), Duration::from_secs(600)),
                "{}",
                n.name
            );
            assert!(n.is_unavailable(), "{}", n.name);
        }
        assert!(booting("new-6", 30).is_starting(now(), Duration::from_secs(600)));
        assert!(!booting("new-6", 30).is_starting(now(), Duration::ZERO));
        let mut l = limits(2, "2");
        l.startup_grace = Duration::ZERO;
        let nodes = [
            draining("a", DrainPhase::Evicting),
            tainted("b"),
            booting("new-1", 30),
        ];
        let d = choose_nodes_to_start(&nodes, &l, now(), retry_backoff);
        assert_eq!((d.unavailable, d.starting), (2, 0));
        assert!(d.start.is_empty());
    }

    #[test]
    fn a_concurrency_the_unavailable_budget_cannot_give_is_said_at_start_up() {
        let note = concurrency_note(&limits(2, "1"), 10).unwrap();
        assert!(
            note.starts_with(
                "--max-concurrent 2 is more than --max-unavailable 1 allows for 10 node(s) (1)"
            ),
            "{note}"
        );
        assert!(note.contains("at most 1 at a time"), "{note}");
        assert_eq!(concurrency_note(&limits(2, "2"), 10), None);
        // 10% of 30 nodes is 3: enough for 3 at once.
        assert_eq!(concurrency_note(&limits(3, "10%"), 30), None);
        assert!(concurrency_note(&limits(3, "10%"), 10).is_some());
    }

    #[test]
    fn a_parked_node_gives_its_slot_back_and_waits_for_its_back_off() {
        // Parked a minute ago (back-off after one attempt: 1 minute); rotor's cordon undone.
        let mut parked = tainted("stuck");
        parked.record.phase = Some(DrainPhase::Parked);
        parked.record.attempts = 1;
        parked.record.blocker = Some("pod shop/db-0 has rotor.dev/do-not-disrupt=true".into());
        parked.record.deadline = Some(now() - jiff::SignedDuration::from_secs(30));
        assert!(!parked.is_unavailable() && !parked.is_active());
        let nodes = [parked.clone(), tainted("next"), node("c")];
        let d = choose_nodes_to_start(&nodes, &limits(1, "1"), now(), retry_backoff);
        assert_eq!(d.start, ["next"]);
        let held = held_text(&d);
        assert_eq!(held[0].0, "stuck");
        assert!(
            held[0].1.starts_with(
                "parked (rotor's cordon undone, its slot given back) while blocked: pod shop/db-0"
            ),
            "{}",
            held[0].1
        );
        // After its back-off it is a candidate again.
        parked.record.deadline = Some(now() - jiff::SignedDuration::from_secs(120));
        let d = choose_nodes_to_start(&[parked], &limits(1, "1"), now(), retry_backoff);
        assert_eq!(d.start, ["stuck"]);
    }

    #[test]
    fn drained_nodes_waiting_for_retirement_do_not_hold_the_budget() {
        let mut drained = draining("done", DrainPhase::Drained);
        drained.unschedulable = true;
        let nodes = [drained.clone(), tainted("next"), node("c"), node("d")];
        let d = choose_nodes_to_start(&nodes, &limits(1, "1"), now(), retry_backoff);
        assert_eq!(d.unavailable, 0);
        assert_eq!(d.start, ["next"]);

        // Once it is being deleted (or goes NotReady) it counts again.
        let mut going = drained.clone();
        going.deleting = true;
        let nodes = [going, tainted("next"), node("c"), node("d")];
        let d = choose_nodes_to_start(&nodes, &limits(1, "1"), now(), retry_backoff);
        assert_eq!(d.unavailable, 1);
        assert!(d.start.is_empty());

        // A drained record on a node whose taint was removed is not ours to discount.
        let mut stale = drained;
        stale.tainted = false;
        let nodes = [stale, tainted("next"), node("c")];
        let d = choose_nodes_to_start(&nodes, &limits(1, "1"), now(), retry_backoff);
        assert_eq!(d.unavailable, 1);
        assert!(d.start.is_empty());
    }

    #[test]
    fn an_active_cordoned_node_counts_once() {
        let mut active = draining("a", DrainPhase::Cordoned);
        active.unschedulable = true;
        let nodes = [active, tainted("b"), node("c")];
        let d = choose_nodes_to_start(&nodes, &limits(2, "2"), now(), retry_backoff);
        assert_eq!(d.unavailable, 1);
        assert_eq!(d.start, ["b"]);
    }

    #[test]
    fn cordoned_candidates_go_first_and_cost_no_budget() {
        let old = ts("2024-01-01T00:00:00Z");
        let nodes = [
            NodeView {
                created: Some(old),
                ..tainted("oldest")
            },
            NodeView {
                unschedulable: true,
                ..tainted("zz-cordoned")
            },
            NodeView {
                created: None,
                ..tainted("aa-unknown-age")
            },
            tainted("middle"),
            NodeView {
                unschedulable: true,
                ..node("someone-elses")
            },
        ];
        // Budget 3, two nodes cordoned already: the cordoned candidate starts for free, then
        // one more, oldest first.
        let d = choose_nodes_to_start(&nodes, &limits(10, "3"), now(), retry_backoff);
        assert_eq!(d.unavailable, 2);
        assert_eq!(d.start, ["zz-cordoned", "oldest"]);
        assert_eq!(held_names(&d), ["middle", "aa-unknown-age"]);
        // A cordoned candidate may start even when the unavailable budget is used up.
        for budget in ["2", "1"] {
            let d = choose_nodes_to_start(&nodes, &limits(10, budget), now(), retry_backoff);
            assert_eq!(d.start, ["zz-cordoned"], "{budget}");
        }
    }

    #[test]
    fn nodes_whose_budgets_allow_a_drain_now_go_first_within_their_cordon_class() {
        let at = |day: &str| Some(ts(&format!("2024-01-{day}T00:00:00Z")));
        let scored = |name: &str, day: &str, waits: u32| NodeView {
            created: at(day),
            budget_waits: Some(waits),
            ..tainted(name)
        };
        let nodes = [
            scored("oldest-waits-2", "01", 2),
            scored("second-waits-0", "02", 0),
            scored("third-waits-0", "03", 0),
            NodeView {
                created: at("04"),
                ..tainted("unscored")
            },
            NodeView {
                unschedulable: true,
                ..scored("cordoned-waits-5", "05", 5)
            },
        ];
        let d = choose_nodes_to_start(&nodes, &limits(3, "100%"), now(), retry_backoff);
        // The cordoned node first whatever its score, then the scored ones by waits then age.
        assert_eq!(
            d.start,
            ["cordoned-waits-5", "second-waits-0", "third-waits-0"]
        );
        assert_eq!(held_names(&d), ["oldest-waits-2", "unscored"]);
        assert_eq!(
            candidates_to_score(&nodes, now(), retry_backoff, 10, 0, |_| false),
            [
                "cordoned-waits-5",
                "second-waits-0",
                "third-waits-0",
                "oldest-waits-2",
                "unscored"
            ]
        );
        // Without scores the order is by age alone.
        let unscored: Vec<NodeView> = nodes
            .iter()
            .map(|n| NodeView {
                budget_waits: None,
                ..n.clone()
            })
            .collect();
        assert_eq!(
            candidates_to_score(&unscored, now(), retry_backoff, 3, 0, |_| false),
            ["cordoned-waits-5", "oldest-waits-2", "second-waits-0"]
        );
        // Candidates already scored are left out of the sample.
        assert_eq!(
            candidates_to_score(&unscored, now(), retry_backoff, 3, 0, |n| n
                .starts_with("o")),
            ["cordoned-waits-5", "second-waits-0", "third-waits-0"]
        );
        // Among equal waits, the node whose busiest budget has more rounds left goes first.
        let urgent = [
            scored("old-routine", "01", 0),
            NodeView {
                budget_urgency: 19,
                ..scored("young-urgent", "09", 0)
            },
            scored("waits", "02", 1),
        ];
        let d = choose_nodes_to_start(&urgent, &limits(2, "100%"), now(), retry_backoff);
        assert_eq!(d.start, ["young-urgent", "old-routine"]);
        // Room made ahead outranks urgency among equal waits, never fewer waits.
        let mut with_room = urgent.clone();
        with_room[0].room_made_ahead = true;
        with_room[2].room_made_ahead = true;
        let d = choose_nodes_to_start(&with_room, &limits(3, "100%"), now(), retry_backoff);
        assert_eq!(d.start, ["old-routine", "young-urgent", "waits"]);
        // The planned choice's rank comes before all of these; equal ranks keep them.
        let mut planned = with_room.clone();
        planned[2].plan_rank = Some(0);
        planned[0].plan_rank = Some(1);
        planned[1].plan_rank = Some(1);
        let d = choose_nodes_to_start(&planned, &limits(3, "100%"), now(), retry_backoff);
        assert_eq!(d.start, ["waits", "old-routine", "young-urgent"]);
    }

    #[test]
    fn scoring_looks_at_the_head_and_evenly_across_the_rest() {
        let nodes: Vec<NodeView> = (0..20)
            .map(|i| NodeView {
                created: Some(ts(&format!("2024-01-{:02}T00:00:00Z", i + 1))),
                ..tainted(&format!("n{i:02}"))
            })
            .collect();
        assert_eq!(
            candidates_to_score(&nodes, now(), retry_backoff, 2, 3, |_| false),
            ["n00", "n01", "n02", "n08", "n14"]
        );
        // Fewer candidates than asked for: each once.
        assert_eq!(
            candidates_to_score(&nodes[..4], now(), retry_backoff, 2, 5, |_| false),
            ["n00", "n01", "n02", "n03"]
        );
        assert_eq!(
            candidates_to_score(&nodes, now(), retry_backoff, 0, 0, |_| false),
            Vec::<String>::new()
        );
    }

    #[test]
    fn zero_budgets_start_nothing() {
        let nodes = [
            NodeView {
                unschedulable: true,
                ..tainted("a")
            },
            tainted("b"),
        ];
        for l in [limits(0, "100%"), limits(3, "0"), limits(3, "0%")] {
            let d = choose_nodes_to_start(&nodes, &l, now(), retry_backoff);
            assert!(d.start.is_empty(), "{l:?}");
            assert_eq!(held_names(&d), ["a", "b"]);
        }
        let d = choose_nodes_to_start(&nodes, &limits(3, "0"), now(), retry_backoff);
        assert_eq!(
            d.held[0].1.to_string(),
            "max-unavailable 0 allows no node of 2 to be disrupted"
        );
    }

    #[test]
    fn opted_out_and_untainted_nodes_never_start() {
        let nodes = [
            NodeView {
                opted_out: true,
                ..tainted("pinned")
            },
            node("plain"),
            NodeView {
                opted_out: true,
                ..node("pinned-untainted")
            },
        ];
        let d = choose_nodes_to_start(&nodes, &limits(5, "100%"), now(), retry_backoff);
        assert!(d.start.is_empty());
        assert_eq!(
            held_text(&d),
            [(
                "pinned".to_string(),
                "node has rotor.dev/do-not-disrupt=true".to_string()
            )]
        );
    }

    #[test]
    fn pre_drain_hooks_hold_a_start_naming_their_owners_but_never_a_drain_under_way() {
        let hooks = vec!["volume-backup (owner backup-operator)".to_string()];
        let nodes = [
            NodeView {
                pre_drain_hooks: hooks.clone(),
                ..tainted("hooked")
            },
            NodeView {
                pre_drain_hooks: hooks.clone(),
                ..draining("evicting", DrainPhase::Evicting)
            },
            tainted("free"),
        ];
        let d = choose_nodes_to_start(&nodes, &limits(5, "100%"), now(), retry_backoff);
        assert_eq!(d.start, ["free"]);
        assert_eq!(
            held_text(&d),
            [(
                "hooked".to_string(),
                "held by pre-drain hook(s) volume-backup (owner backup-operator) until their \
                 owners remove the pre-drain.hook.rotor.dev/<name> annotation(s)"
                    .to_string()
            )]
        );
        assert_eq!(
            start_block(&nodes[1], now(), retry_backoff),
            Some(StartBlock::Draining)
        );
        // A node failed and backing off says so first; once its back-off is over, the hooks.
        let mut failed = nodes[0].clone();
        failed.record.phase = Some(DrainPhase::Failed);
        failed.record.attempts = 1;
        failed.record.deadline = Some(now());
        assert!(matches!(
            start_block(&failed, now(), retry_backoff),
            Some(StartBlock::BackingOff(_))
        ));
        let later = now() + jiff::SignedDuration::from_hours(24);
        assert_eq!(
            start_block(&failed, later, retry_backoff),
            Some(StartBlock::PreDrainHooks)
        );
    }

    #[test]
    fn untainted_node_with_stale_phase_is_not_active() {
        // The taint was removed but the annotations not yet cleaned up.
        let mut stale = draining("old", DrainPhase::Evicting);
        stale.tainted = false;
        let nodes = [stale, tainted("new")];
        let d = choose_nodes_to_start(&nodes, &limits(1, "100%"), now(), retry_backoff);
        assert_eq!(d.active, 0);
        assert_eq!(d.start, ["new"]);
    }
}
