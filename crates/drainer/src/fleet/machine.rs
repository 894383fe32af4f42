//! The control loop's decisions, as a state machine with no I/O: events in (the node watch's
//! list and changes, a drain task's end, a wake-up), commands out (contend for the lease or
//! stand down, publish the phases, undo, resume or start a drain). The shell in
//! [`super::controller::run`] only carries events in and runs the commands; the order of a pass is here:
//!
//! 1. [`Machine::lease_step`]: contend while some node needs rotor; give the lease back once
//!    none has for `--release-lease-after` and nothing rotor started still runs.
//! 2. [`Machine::act`] (every replica publishes; only the leader goes on): a new term forgets
//!    what an earlier one knew; drains whose taint went are stopped; rotor's state on untainted
//!    nodes is undone; drains recorded as started resume; then the fleet limits, the maintenance
//!    windows and the taint burst decide which candidates may start ([`StartRound`]).
//! 3. The shell asks the start gate and the budget-aware choice about the round (both read the
//!    cluster), then [`Machine::start`] turns what is left into drains.
//!
//! The machine's parts that keep state of their own are its children, each pure: the policies
//! and the pools the nodes are in ([`policies`]), the lease ([`lease`]), the circuit breaker's
//! halt ([`halt`]), room made ahead ([`ahead`]), the policies' status writes ([`status`]),
//! holds said on the nodes ([`announced`]) and the burst of taints ([`taint_burst`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use rotor_core::contract::DrainPhase;

use crate::drain::outcome::DrainResult;
use crate::drain::published::WorkloadRef;
use crate::fleet::breaker::{gate_trip, rotation_began, stalled_replacement};
use crate::fleet::held::{Held, HeldReason, Limit};
use crate::fleet::node_labels::LabelKeys;
use crate::fleet::pools::{DrainPolicy, Pool, PoolRef};
use crate::fleet::starts::{
    FleetDecision, FleetLimits, NodeView, PoolRules, candidate_names, choose_in_pools, start_block,
};
use crate::record::node::{DrainRecord, Intent, retry_backoff};
use crate::record::notify::NoticeKind;
use crate::record::rotation::{Halt, HaltState};

mod ahead;
mod announced;
mod halt;
mod lease;
mod policies;
mod status;
mod taint_burst;

use ahead::RoomAhead;
use announced::HoldsAnnounced;
use halt::HaltBook;
pub(super) use lease::LeaseCommand;
use lease::{LeasePass, LeaseWatch, needs_rotor};
pub(super) use policies::FlagPool;
use policies::PolicyBook;
use status::StatusBook;
use taint_burst::TaintBurst;

/// What the machine is told.
#[derive(Debug)]
pub(super) enum Event {
    /// The node watch listed every node (at start, or a re-list after the watch lost its place).
    NodesListed(Vec<NodeView>),
    /// A node was added or changed.
    NodeApplied(NodeView),
    /// A node was deleted.
    NodeDeleted(String),
    /// The rotation record's halt changed (the record watch, with `--halt-after`).
    HaltRead(HaltState),
    /// The RotationPolicy watch listed every policy (at start, or a re-list).
    PoliciesListed(Vec<Pool>),
    /// A policy was added or changed.
    PolicyApplied(Pool),
    /// A policy was deleted.
    PolicyDeleted(String),
    /// The RotationPolicy resource is not installed (no CRD): every node follows the flags.
    PoliciesAbsent,
    /// A drain or clean-up task ended. `record` is what the task last wrote on the node (the
    /// watch may not have delivered it yet); `evicted` the gated workloads it evicted from.
    TaskEnded {
        node: String,
        result: DrainResult,
        record: Option<DrainRecord>,
        evicted: Vec<WorkloadRef>,
    },
}

/// What the machine asks the shell to do.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Command {
    /// Forget the budget demand known for this node (its pods may have changed).
    ForgetDemand(String),
    /// Count a drain's end in the metrics, by how it ended.
    CountDrainEnd(&'static str),
    /// The next start waits for these workloads to be Ready again (and pending pods to clear).
    ArmGate(Vec<WorkloadRef>),
    /// Publish how many nodes are in each drain phase.
    PublishPhases(BTreeMap<&'static str, i64>),
    /// This replica has just become the leader: what it knew from an earlier term is stale
    /// (the start gate and the demand cache start afresh).
    NewTerm,
    /// Stop the drain of this node: its taint went away or the node is gone.
    Abort(String),
    /// Undo rotor's state on this untainted node (nobody is draining it).
    CleanUp(String),
    /// Run this node's drain, with the drain settings of `policy` (the flags' when `None`).
    Drain {
        node: String,
        intent: Intent,
        tainted_since: Option<Instant>,
        policy: Option<DrainPolicy>,
    },
    /// Make room for this node's pods ahead of its drain (`--surge`): it is next in line.
    ReserveAhead(String),
    /// Remove the room made ahead for this node: it is no longer in line.
    ReleaseAhead(String),
    /// Say on this node (an Event) that pre-drain hooks, a missing approval, RotationPolicies
    /// overlapping on it or its policy being unreadable hold it, in `why`'s words.
    AnnounceHeld { node: String, why: String },
    /// The circuit breaker tripped: write the halt into the rotation record and say so.
    Halt(Halt),
    /// Stop this node's drain where it is, its state kept on the node (`--halt-stops-drains`).
    Pause(String),
    /// The halt was lifted: the breaker's clocks start afresh.
    Resumed,
    /// Tell the webhooks (`--notify-webhook`).
    Notify { kind: NoticeKind, detail: String },
    /// Write this policy's status (the pool's progress; at most every [`status::STATUS_EVERY`]).
    WritePolicyStatus {
        policy: String,
        status: rotor_policy::RotationPolicyStatus,
    },
}

/// The starts a pass proposes, before the start gate and the budget-aware choice have their say.
#[derive(Debug)]
pub(super) struct StartRound {
    /// Nodes to start, in order.
    pub start: Vec<String>,
    /// Tainted nodes that do not start, and why.
    pub held: Vec<Held>,
    /// The fleet as the choice sees it: nodes with a drain task that has not yet recorded its
    /// start count as queued. Nodes that only count towards their pool's size are left out.
    pub view: Vec<NodeView>,
    /// The nodes left out of `view`, counted by pool.
    pub counted_beside: BTreeMap<PoolRef, usize>,
    /// Time since the last pass while leading (counts towards the gate's blocked-seconds).
    pub elapsed: Duration,
    /// How long the start gate has held, and why, when it holds (set by the shell; what the
    /// circuit breaker judges).
    pub gate_held: Option<(Duration, String)>,
    /// Whether the nodes unavailable before this round left room under `--max-unavailable`.
    unavailable_room: bool,
    /// When the round was proposed.
    pub wall: Timestamp,
    now: Instant,
}

impl StartRound {
    /// Holds this round's starts for `why` (see [`hold_starts`]).
    pub(super) fn hold(&mut self, why: HeldReason) {
        hold_starts(&mut self.held, &mut self.start, why, self.unavailable_room);
    }
}

/// The fleet's configuration, as far as the machine decides with it.
#[derive(Clone, Debug)]
pub(super) struct MachineConfig {
    pub limits: FleetLimits,
    /// The pool no RotationPolicy selects: the windows, approval and drain settings of the flags.
    pub flags: FlagPool,
    /// `--release-lease-after`.
    pub release_after: Duration,
    /// How many nodes next in line get room made ahead of their drain: `--surge-ahead` (by
    /// default `--max-concurrent`) with `--surge`, 0 without.
    pub reserve_ahead: usize,
    /// `--halt-after`: the circuit breaker, when on.
    pub halt_after: Option<Duration>,
    /// `--halt-stops-drains`.
    pub halt_stops_drains: bool,
    /// RotationPolicies are watched: nothing starts before the watch has answered (a policy
    /// tighter than the flags must not be missed). Off only where no watch runs (tests).
    pub watch_policies: bool,
}

/// What the control loop knows between events.
pub(super) struct Machine {
    cfg: MachineConfig,
    /// Every node, summarised; empty until the node watch has listed them.
    nodes: BTreeMap<String, NodeView>,
    listed: bool,
    /// Nodes with a drain task; nodes with a clean-up task.
    running: BTreeSet<String>,
    cleaning: BTreeSet<String>,
    /// Nodes not yet draining that had room made ahead ([`Command::ReserveAhead`]; the shell
    /// may hold its making a few seconds while a drain's room changes hands).
    ahead: RoomAhead,
    /// What was last said on each node that only a person can free ([`Command::AnnounceHeld`]).
    holds_announced: HoldsAnnounced,
    /// The circuit breaker's state, from the rotation record or tripped here.
    halt: HaltBook,
    /// When this process first listed the nodes: only nodes created since are watched from
    /// their start, so only they can be known never to have been Ready.
    watching_since: Option<Timestamp>,
    /// Running drains told to stop for the halt.
    paused: BTreeSet<String>,
    /// The rotation under way, as the notices tell it: from the first start while no tainted
    /// node had a drain record, to no tainted node left undrained; `None` between rotations.
    rotation: Option<Rotation>,
    burst: TaintBurst,
    /// The RotationPolicies, read, and the pools the nodes are in.
    policies: PolicyBook,
    /// Each policy's status as last written.
    statuses: StatusBook,
    was_leading: bool,
    /// Since when nothing has needed a leader, and whether standing by was said.
    lease: LeaseWatch,
    last_pass: Option<Instant>,
}

impl Machine {
    pub(super) fn new(cfg: MachineConfig) -> Self {
        Machine {
            policies: PolicyBook::new(cfg.watch_policies, cfg.flags.clone()),
            cfg,
            nodes: BTreeMap::new(),
            listed: false,
            running: BTreeSet::new(),
            cleaning: BTreeSet::new(),
            ahead: RoomAhead::default(),
            holds_announced: HoldsAnnounced::default(),
            halt: HaltBook::default(),
            watching_since: None,
            paused: BTreeSet::new(),
            rotation: None,
            burst: TaintBurst::default(),
            statuses: StatusBook::default(),
            was_leading: false,
            lease: LeaseWatch::default(),
            last_pass: None,
        }
    }

    /// How many nodes the watch knows.
    pub(super) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the node watch has listed the nodes: no pass runs before.
    pub(super) fn listed(&self) -> bool {
        self.listed
    }

    /// Whether the policy watch has answered (listed, or found no CRD), or none runs.
    pub(super) fn policies_known(&self) -> bool {
        self.policies.known()
    }

    /// The label keys to read the nodes' summaries with.
    pub(super) fn label_keys(&self) -> &LabelKeys {
        self.policies.label_keys()
    }

    /// Whether the shell is to read every node again, now: a policy selects by a label key
    /// the summaries were read without. Asked once; the next [`Event::NodesListed`] ends the
    /// wait it causes.
    pub(super) fn take_read_nodes_again(&mut self) -> bool {
        self.policies.take_read_nodes_again()
    }

    /// When the taint burst under way settles, for the shell to wake then.
    pub(super) fn burst_settles_at(&self, now: Instant) -> Option<Instant> {
        self.burst.settles_at(now)
    }

    /// Takes in one event.
    pub(super) fn apply(&mut self, event: Event, now: Instant) -> Vec<Command> {
        match event {
            Event::NodesListed(listed) => {
                // A list this machine asked for (new label keys) follows a watch that ran until
                // it began: a taint seen then has stayed. After a watch that lost its place,
                // whether the taint stayed while nobody watched is unknown: from now.
                let watched_until_now = self.policies.nodes_listed();
                let mut fresh = BTreeMap::new();
                for mut view in listed {
                    self.policies.place(&mut view);
                    carry_ever_ready(&self.nodes, &mut view);
                    let old = self.nodes.get(&view.name).filter(|_| watched_until_now);
                    sight_taint(old, &mut view, now);
                    fresh.insert(view.name.clone(), view);
                }
                self.nodes = fresh;
                self.listed = true;
                Vec::new()
            }
            Event::NodeApplied(mut view) => {
                self.policies.place(&mut view);
                let old = self.nodes.get(&view.name);
                carry_ever_ready(&self.nodes, &mut view);
                sight_taint(old, &mut view, now);
                let mut commands = Vec::new();
                if view.tainted && old.is_none_or(|old| !old.tainted) {
                    self.burst.taint_arrived(now);
                    // Pods may have arrived while it was untainted: read them afresh.
                    commands.push(Command::ForgetDemand(view.name.clone()));
                }
                self.nodes.insert(view.name.clone(), view);
                commands
            }
            Event::NodeDeleted(name) => {
                self.nodes.remove(&name);
                vec![Command::ForgetDemand(name)]
            }
            Event::PoliciesListed(pools) => {
                self.policies.listed(pools);
                self.place_all();
                Vec::new()
            }
            Event::PolicyApplied(pool) => {
                self.policies.applied(pool);
                self.place_all();
                Vec::new()
            }
            Event::PolicyDeleted(name) => {
                self.policies.deleted(&name);
                self.statuses.forget(&name);
                self.place_all();
                Vec::new()
            }
            Event::PoliciesAbsent => {
                self.policies.absent();
                self.place_all();
                Vec::new()
            }
            Event::HaltRead(state) => {
                let lifted = self.halt.read(state);
                if lifted {
                    self.paused.clear();
                    vec![Command::Resumed]
                } else {
                    Vec::new()
                }
            }
            Event::TaskEnded {
                node,
                result,
                record,
                evicted,
            } => {
                self.running.remove(&node);
                self.cleaning.remove(&node);
                self.paused.remove(&node);
                // The watch has not necessarily delivered the task's last write yet; without
                // this the next pass would see the old phase and resume a finished drain.
                if let Some(record) = record
                    && let Some(view) = self.nodes.get_mut(&node)
                {
                    view.record = record;
                }
                let mut commands = Vec::new();
                match &result {
                    DrainResult::Drained => {
                        commands.push(Command::CountDrainEnd("drained"));
                        if let Some(rotation) = &mut self.rotation {
                            rotation.drained += 1;
                        }
                    }
                    DrainResult::Failed { .. } => commands.push(Command::CountDrainEnd("failed")),
                    DrainResult::Parked { .. } => commands.push(Command::CountDrainEnd("parked")),
                    DrainResult::Cancelled => commands.push(Command::CountDrainEnd("cancelled")),
                    DrainResult::Skipped { .. }
                    | DrainResult::NodeGone
                    | DrainResult::Interrupted => {}
                }
                if let Some(owners) = gate_after(&result, evicted) {
                    commands.push(Command::ArmGate(owners));
                }
                commands
            }
        }
    }

    /// The lease half of a pass. `contending` and `leading` are the election's state now. The
    /// shell runs the commands (a stand-down returns once the lease is released) before
    /// [`Machine::act`].
    pub(super) fn lease_step(
        &mut self,
        now: Instant,
        wall: Timestamp,
        contending: bool,
        leading: bool,
    ) -> Vec<LeaseCommand> {
        let may_resume = !self.drains_halted();
        let needed = self.nodes.values().find_map(|n| {
            // A node its policies hold until a person acts needs a leader too: to say so on the
            // node and in the policies' status, as for pre-drain hooks.
            let may_start = self.halt.halted().is_none()
                && (self.policies.pool_open(n, wall) || self.policies.holds_for_a_person(n));
            needs_rotor(n, wall, may_start, may_resume).map(|why| (n.name.clone(), why))
        });
        let tasks_run = !self.running.is_empty() || !self.cleaning.is_empty();
        // Tainted nodes that only wait (for a window, a retry or an opt-out to go) are named
        // when standing by, so that the quiet is not mistaken for "nothing tainted".
        let waiting = || {
            self.nodes
                .values()
                .filter(|n| n.tainted && !n.is_drained())
                .map(|n| n.name.clone())
                .collect()
        };
        let pass = LeasePass {
            now,
            contending,
            leading,
            release_after: self.cfg.release_after,
        };
        self.lease.step(needed, tasks_run, waiting, pass)
    }

    /// The acting half of a pass, given whether this replica leads now (read once, after the
    /// lease step). Returns the commands to run at once and, while leading, the round of starts.
    pub(super) fn act(
        &mut self,
        now: Instant,
        wall: Timestamp,
        leading: bool,
    ) -> (Vec<Command>, Option<StartRound>) {
        self.watching_since.get_or_insert(wall);
        // Every replica reports the phases it sees on the nodes, so the figures survive a
        // release of the lease (a view of the cluster: the same from each replica).
        let mut commands = vec![Command::PublishPhases(phase_counts(&self.nodes))];
        let new_term = leading && !self.was_leading;
        self.was_leading = leading;
        if !leading {
            // A later term tells the rotation from what it finds then.
            self.rotation = None;
            return (commands, None);
        }
        if new_term {
            // What this replica knew from an earlier term (another replica may have led since)
            // is stale: like any new leader, its first start passes the gate.
            commands.push(Command::NewTerm);
            self.last_pass = None;
            // Whatever an earlier term wrote may have been changed since: write afresh.
            self.statuses.forget_all();
            // The new term's sweep removes placeholders of nodes not draining, those made
            // ahead included.
            self.ahead.forget_all();
            // Taking over a rotation under way: it was announced by the leader that began it.
            if self.rotation.is_none() && self.nodes.values().any(NodeView::is_active) {
                self.rotation = Some(Rotation::default());
            }
        }
        let elapsed = self
            .last_pass
            .map_or(Duration::ZERO, |at| now.duration_since(at));
        self.last_pass = Some(now);
        // Stop drains whose taint went away or whose node is gone.
        for name in &self.running {
            if self.nodes.get(name).is_none_or(|n| !n.tainted) {
                commands.push(Command::Abort(name.clone()));
            }
        }
        // Undo rotor's state on untainted nodes nobody is draining (e.g. while we were down).
        for n in self.nodes.values() {
            let ours = n.record.phase.is_some() || n.record.cordoned_by_rotor;
            if !n.tainted && ours && !self.busy(&n.name) {
                commands.push(Command::CleanUp(n.name.clone()));
            }
        }
        // Room made ahead for a node that is no longer in line goes; a node that started its
        // drain owns its room now.
        let nodes = &self.nodes;
        let no_longer_in_line = self.ahead.sort_out(&self.running, |name| {
            nodes
                .get(name)
                .is_some_and(|n| n.tainted && start_block(n, wall, retry_backoff).is_none())
        });
        commands.extend(no_longer_in_line.into_iter().map(Command::ReleaseAhead));
        commands.extend(self.breaker_step(wall));
        commands.extend(self.rotation_finished());
        // Resume drains recorded as started (a restart or a failover), unless a halt stopped
        // them. A resumed drain runs with its pool's settings, so not before the policies are
        // read, nor while the nodes are read again: until then its pool may be wrong.
        for n in self.nodes.values() {
            if n.tainted
                && n.record.is_active()
                && !self.busy(&n.name)
                && !self.drains_halted()
                && self.policies.known()
                && !self.policies.labels_stale()
            {
                commands.push(Command::Drain {
                    node: n.name.clone(),
                    intent: Intent::Resume,
                    tainted_since: n.tainted_since,
                    policy: self.policies.drain_policy(&n.pool),
                });
            }
        }
        for command in &commands {
            match command {
                Command::CleanUp(name) => self.cleaning.insert(name.clone()),
                Command::Drain { node, .. } => self.running.insert(node.clone()),
                _ => false,
            };
        }
        let round = self.propose_starts(now, wall, elapsed);
        (commands, Some(round))
    }

    /// `n` as the limits and the policies' status count it: a drain started this pass counts as
    /// under way (queued) before its record says so. Copied only then.
    fn as_seen<'a>(&self, n: &'a NodeView) -> Cow<'a, NodeView> {
        if self.running.contains(&n.name) && !n.record.is_active() {
            let mut v = n.clone();
            v.record.phase = Some(DrainPhase::Queued);
            Cow::Owned(v)
        } else {
            Cow::Borrowed(n)
        }
    }

    /// The fleet limits' choice among the candidates, then the holds that apply to every start:
    /// the maintenance windows and a burst of taints still arriving.
    fn propose_starts(&self, now: Instant, wall: Timestamp, elapsed: Duration) -> StartRound {
        let mut view: Vec<NodeView> = Vec::new();
        let mut counted_beside: BTreeMap<PoolRef, usize> = BTreeMap::new();
        for n in self.nodes.values() {
            let reserved = self.ahead.contains(&n.name);
            if !reserved
                && !self.running.contains(&n.name)
                && n.only_counts(wall, self.cfg.limits.startup_grace)
            {
                *counted_beside.entry(n.pool.clone()).or_default() += 1;
                continue;
            }
            let mut v = self.as_seen(n).into_owned();
            v.room_made_ahead = reserved;
            view.push(v);
        }
        let decision = choose_in_pools(
            &view,
            &self.cfg.limits,
            self.pool_rules(wall, &counted_beside),
            wall,
            retry_backoff,
        );
        let mut round = StartRound {
            unavailable_room: decision.unavailable < decision.allowed_unavailable,
            start: Vec::new(),
            held: Vec::new(),
            view,
            counted_beside,
            elapsed,
            gate_held: None,
            wall,
            now,
        };
        self.take_decision(&mut round, decision);
        if !round.start.is_empty() && !self.policies.known() {
            round.hold(HeldReason::Gate(
                "reading the RotationPolicies first: a policy's budget must not be missed".into(),
            ));
        } else if !round.start.is_empty() && self.policies.labels_stale() {
            round.hold(HeldReason::Gate(
                "reading the nodes again: a RotationPolicy selects by a label the drainer had not kept, so a node's pool may be wrong until then".into(),
            ));
        }
        if !round.start.is_empty() && self.burst.settles_at(now).is_some() {
            round.hold(HeldReason::TaintsArriving);
        }
        if let Some(halt) = self.halt.halted() {
            round.hold(HeldReason::Halted(halt.reason.clone()));
        } else if self.cfg.halt_after.is_some() && !self.halt.known() {
            round.hold(HeldReason::Gate(
                "reading the rotation record first (--halt-after): a halt there holds every start"
                    .into(),
            ));
        }
        round
    }

    /// Whether the rotation is halted (for the `halted` gauge, on every replica).
    pub(super) fn halted(&self) -> bool {
        self.halt.halted().is_some()
    }

    /// Tainted nodes not drained yet: what the rotation still has to do.
    fn undrained(&self) -> usize {
        self.nodes
            .values()
            .filter(|n| n.tainted && !n.is_drained())
            .count()
    }

    /// The rotation is over when no tainted node is left undrained and nothing runs.
    fn rotation_finished(&mut self) -> Option<Command> {
        if self.rotation.is_none() || !self.running.is_empty() || self.undrained() > 0 {
            return None;
        }
        let drained = self.rotation.take().map_or(0, |r| r.drained);
        let retiring = self.nodes.values().filter(|n| n.is_drained()).count();
        Some(Command::Notify {
            kind: NoticeKind::RotationFinished,
            detail: format!(
                "every tainted node is drained: {drained} by this leader in this rotation; {retiring} drained node(s) wait to be retired"
            ),
        })
    }

    /// Whether a halt stops the drains under way (`--halt-stops-drains`).
    fn drains_halted(&self) -> bool {
        self.cfg.halt_stops_drains && self.halt.halted().is_some()
    }

    /// The circuit breaker's part of a pass: trip on a replacement that never came up, and stop
    /// the drains under way if the halt says so.
    fn breaker_step(&mut self, wall: Timestamp) -> Vec<Command> {
        let mut commands = Vec::new();
        if let Some(halt_after) = self.cfg.halt_after
            && self.halt.halted().is_none()
            && let Some(began) = rotation_began(self.nodes.values())
            && let Some(reason) = stalled_replacement(
                self.nodes.values(),
                self.watching_since.map_or(began, |w| w.max(began)),
                self.halt.resumed_at(),
                wall,
                halt_after,
            )
        {
            commands.push(Command::Halt(self.halt.trip(reason, wall)));
        }
        if self.drains_halted() {
            for name in &self.running {
                if self.paused.insert(name.clone()) {
                    commands.push(Command::Pause(name.clone()));
                }
            }
        }
        commands
    }

    /// Puts a fleet decision (the first, or the budget-aware choice's) into `round`. A node
    /// whose clean-up is still running (untainted, then tainted again) waits for it.
    pub(super) fn take_decision(&self, round: &mut StartRound, decision: FleetDecision) {
        round.held = decision.held;
        round.start = decision
            .start
            .into_iter()
            .filter(|n| !self.busy(n))
            .collect();
    }

    /// The round's starts, as drains to run, then room made ahead for the nodes next in line;
    /// the shell calls it only while it still leads.
    pub(super) fn start(&mut self, round: StartRound) -> Vec<Command> {
        // The gate held past --halt-after: what the last drains evicted is not coming back.
        if let (Some(halt_after), Some((held_for, why)), None) =
            (self.cfg.halt_after, &round.gate_held, self.halt.halted())
            && let Some(reason) = gate_trip(*held_for, halt_after, why)
        {
            return vec![Command::Halt(self.halt.trip(reason, round.wall))];
        }
        let mut commands = Vec::new();
        if let Some(first) = round.start.first()
            && self.rotation.is_none()
        {
            self.rotation = Some(Rotation::default());
            commands.push(Command::Notify {
                kind: NoticeKind::RotationStarted,
                detail: format!(
                    "{} tainted node(s) to drain, {} at a time at most; starting with {first}",
                    self.undrained(),
                    self.cfg.limits.max_concurrent
                ),
            });
        }
        commands.extend(round.start.iter().map(|node| {
            self.running.insert(node.clone());
            self.ahead.taken_by_drain(node);
            let view = self.nodes.get(node);
            Command::Drain {
                tainted_since: view.and_then(|n| n.tainted_since),
                policy: view.and_then(|n| self.policies.drain_policy(&n.pool)),
                node: node.clone(),
                intent: Intent::Start,
            }
        }));
        if !self.policies.labels_stale() {
            // Both follow the nodes' pools, which are not known until the nodes are read again.
            commands.extend(self.reserve_ahead(&round));
            commands.extend(self.announce_holds(&round));
        }
        commands.extend(self.status_writes(round.now, round.wall));
        commands
    }

    /// An Event on each node that pre-drain hooks, a missing approval or its policies hold,
    /// when it is news (see [`HoldsAnnounced`]).
    fn announce_holds(&mut self, round: &StartRound) -> Vec<Command> {
        let news = self.holds_announced.take_news(&round.held);
        news.into_iter()
            .map(|(node, why)| Command::AnnounceHeld { node, why })
            .collect()
    }

    /// With `--surge`, the candidates that would start next (in the round's order, up to
    /// `reserve_ahead` at once) get their room made while the drains before them run, so their
    /// own drains need not wait for an autoscaler. Only behind a running drain: with none, the
    /// next candidate is held for moments at most (a burst of taints settling, the gate) and
    /// makes its own room when it starts; reserving for it too would create every placeholder
    /// twice. Not outside the maintenance windows: room that no drain may use yet only costs.
    /// When room moves from one waiting node to another is [`RoomAhead::after_round`]'s rule.
    fn reserve_ahead(&mut self, round: &StartRound) -> Vec<Command> {
        if self.cfg.reserve_ahead == 0 || self.running.is_empty() {
            return Vec::new();
        }
        // Only nodes whose pool surges and may start now: room no drain may use yet only costs.
        let next_in_line: Vec<String> = candidate_names(&round.view, round.wall, retry_backoff)
            .into_iter()
            .filter(|name| {
                !self.busy(name)
                    && self.nodes.get(name).is_some_and(|n| {
                        self.policies.surges(&n.pool) && self.policies.pool_open(n, round.wall)
                    })
            })
            .take(self.cfg.reserve_ahead)
            .collect();
        let weighed = |name: &str| {
            round
                .view
                .iter()
                .any(|v| v.name == name && v.budget_waits.is_some())
        };
        let changes = self.ahead.after_round(
            next_in_line,
            weighed,
            round.start.len(),
            self.cfg.reserve_ahead,
        );
        let release = changes.release.into_iter().map(Command::ReleaseAhead);
        release
            .chain(changes.reserve.into_iter().map(Command::ReserveAhead))
            .collect()
    }

    fn busy(&self, name: &str) -> bool {
        self.running.contains(name) || self.cleaning.contains(name)
    }

    /// The pools' rules at `wall`, for a choice among the candidates (this one's and the
    /// budget-aware one's alike), with a round's nodes `counted_beside` its view.
    pub(super) fn pool_rules<'a>(
        &'a self,
        wall: Timestamp,
        counted_beside: &'a BTreeMap<PoolRef, usize>,
    ) -> PoolRules<'a> {
        self.policies.rules(wall, counted_beside)
    }

    /// Every node placed afresh (the policies changed).
    fn place_all(&mut self) {
        for view in self.nodes.values_mut() {
            self.policies.place(view);
        }
    }

    /// The policies' status writes that are due; none while the nodes are read again (the
    /// members are not known until then).
    fn status_writes(&mut self, now: Instant, wall: Timestamp) -> Vec<Command> {
        if self.policies.labels_stale() || self.policies.pools().is_empty() {
            return Vec::new();
        }
        // Borrowed but for drains started this pass (the fleet may hold thousands of nodes,
        // read once a pass).
        let seen: Vec<Cow<'_, NodeView>> = self.nodes.values().map(|n| self.as_seen(n)).collect();
        let halt = self.halt.halted().map(|h| h.reason.as_str());
        let due = self
            .statuses
            .take_due(self.policies.pools(), &seen, halt, now, wall);
        due.into_iter()
            .map(|(policy, status)| Command::WritePolicyStatus { policy, status })
            .collect()
    }
}

fn phase_counts(nodes: &BTreeMap<String, NodeView>) -> BTreeMap<&'static str, i64> {
    let mut counts: BTreeMap<&'static str, i64> =
        DrainPhase::ALL.iter().map(|p| (p.slug(), 0)).collect();
    for n in nodes.values() {
        if let Some(p) = n.record.phase {
            *counts.entry(p.slug()).or_default() += 1;
        }
    }
    counts
}

/// What the next start waits for once a drain task ends (`None`: nothing new), given the
/// workloads it `evicted` from. A drained node always arms the gate; a drain that ended otherwise
/// (failed, stopped, its node gone) arms it only if it evicted something, whose workloads must be
/// Ready again just the same.
fn gate_after(result: &DrainResult, evicted: Vec<WorkloadRef>) -> Option<Vec<WorkloadRef>> {
    (matches!(result, DrainResult::Drained) || !evicted.is_empty()).then_some(evicted)
}

/// A rotation under way, for its notices.
#[derive(Debug, Default)]
struct Rotation {
    /// Nodes this leader drained in it.
    drained: usize,
}

/// Holds this round's starts for `why`. The nodes the fleet limits held were held counting those
/// starts as drains ("max-concurrent 3 reached (3 draining)" while none is); with the starts
/// held, those that only the starts kept out wait for `why` first, and say so. There was a free
/// slot (something was starting), so that is every node held by max-concurrent, and those held
/// by max-unavailable when the nodes unavailable before the starts left room
/// (`unavailable_room`); otherwise that limit holds them whatever starts.
fn hold_starts(
    held: &mut Vec<Held>,
    start: &mut Vec<String>,
    why: HeldReason,
    unavailable_room: bool,
) {
    for (_, reason) in held.iter_mut() {
        let only_the_starts = match reason.limit() {
            Some(Limit::MaxConcurrent) => true,
            Some(Limit::MaxUnavailable) => unavailable_room,
            None => false,
        };
        if only_the_starts {
            *reason = why.clone();
        }
    }
    held.extend(start.drain(..).map(|n| (n, why.clone())));
}

/// Sets `view.tainted_since` (see [`NodeView`]): kept from `old`, the last view of the node, while
/// its drain taint keeps pods off; `now` when that has just begun or nothing earlier is known;
/// `None` otherwise. So a taint that went and came back counts from its return, and the
/// monotonic clock keeps a step of the wall clock from making a new taint look old.
fn sight_taint(old: Option<&NodeView>, view: &mut NodeView, now: Instant) {
    view.tainted_since = (view.tainted && view.taint_keeps_pods_off)
        .then(|| old.and_then(|o| o.tainted_since).unwrap_or(now));
}

/// A node once seen Ready stays "has been Ready" across its later views, so that going NotReady
/// makes it unavailable rather than "still starting" (see [`NodeView::is_starting`]). Only for
/// the same node: a new one that reuses the name (IP-based names are reused) starts afresh.
fn carry_ever_ready(known: &BTreeMap<String, NodeView>, view: &mut NodeView) {
    if known
        .get(&view.name)
        .is_some_and(|old| old.ever_ready && old.created == view.created)
    {
        view.ever_ready = true;
    }
}

#[cfg(test)]
mod pool_tests;
#[cfg(test)]
mod tests;
