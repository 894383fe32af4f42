//! The control loop's decisions, as a state machine with no I/O: events in (the node watch's
//! list and changes, a drain task's end, a wake-up), commands out (contend for the lease or
//! stand down, publish the phases, undo, resume or start a drain). The shell in
//! [`super::controller::run`] only carries events in and runs the commands; the order of a pass is here:
//!
//! 0. Between passes, [`Machine::apply`] takes each event in ([`events`]).
//! 1. [`Machine::lease_step`]: contend while some node needs rotor, or a policy's status as
//!    stored is out of date; give the lease back once neither has held for
//!    `--release-lease-after` and nothing rotor started still runs.
//! 2. [`Machine::act`] (every replica publishes; only the leader goes on): a new term forgets
//!    what an earlier one knew; drains whose taint went are stopped; rotor's state on untainted
//!    nodes is undone; drains recorded as started resume; then the fleet limits, the maintenance
//!    windows and the taint burst decide which candidates may start ([`StartRound`], in
//!    [`round`]).
//! 3. The shell asks the start gate and the budget-aware choice about the round (both read the
//!    cluster), then [`Machine::start`] turns what is left into drains and room made ahead.
//!
//! This file holds the machine's state and the pass's spine (steps 1 and 2, the circuit
//! breaker, the rotation's notices, the policies' status writes). The machine's parts that keep
//! state of their own are its children, each pure: the policies
//! and the pools the nodes are in ([`policies`]), the lease ([`lease`]), the circuit breaker's
//! halt ([`halt`]), room made ahead ([`ahead`]), the policies' status writes ([`status`]),
//! holds said on the nodes ([`announced`]) and the burst of taints ([`taint_burst`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use rotor_core::contract::DrainPhase;

use crate::drain::published::WorkloadRef;
use crate::fleet::breaker::{rotation_began, stalled_replacement};
use crate::fleet::node_labels::LabelKeys;
use crate::fleet::pools::{DrainPolicy, PoolRef};
use crate::fleet::starts::{FleetLimits, NodeView, PoolRules, start_block};
use crate::record::node::{Intent, retry_backoff};
use crate::record::notify::NoticeKind;
use crate::record::rotation::Halt;

mod ahead;
mod announced;
mod events;
mod halt;
mod lease;
mod policies;
mod round;
mod status;
mod taint_burst;
mod unwritten;

use ahead::RoomAhead;
use announced::HoldsAnnounced;
pub(super) use events::Event;
use halt::HaltBook;
pub(super) use lease::{LeaseCommand, Need};
use lease::{LeasePass, LeaseWatch, needs_rotor};
pub(super) use policies::FlagPool;
use policies::PolicyBook;
pub(super) use round::StartRound;
use status::{Grouped, StatusBook, queued_copies, queued_copy};
use taint_burst::TaintBurst;
pub(super) use unwritten::EndRewrite;
use unwritten::UnwrittenEnds;

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
    /// Forget rotor's cordon of this node, which someone uncordoned while nobody drained it.
    ForgetCordon(String),
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
    /// This node is gone and nothing drains it: release whatever surge still holds for it (the
    /// room of a drain a halt stopped), if anything.
    ReleaseRoom(String),
    /// Say on this node (an Event) that pre-drain hooks, a missing approval, RotationPolicies
    /// overlapping on it or its policy being unreadable hold it, in `why`'s words.
    AnnounceHeld { node: String, why: String },
    /// The circuit breaker tripped: write the halt into the rotation record and say so.
    Halt(Halt),
    /// Write the halt tripped here into the rotation record again: the record has not shown it
    /// since it was last sent.
    RewriteHalt(Halt),
    /// Write a drain's drained end on its node again: the node has not shown it since the
    /// drain's own write failed.
    RewriteEnd(EndRewrite),
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
    /// Drains' ends the node may not show (a refused start write, an end write that failed
    /// past its retries), carried over the node's views while it shows what it showed; a
    /// drained one is written again until it shows.
    unwritten: UnwrittenEnds,
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
            unwritten: UnwrittenEnds::default(),
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
        let needed = self
            .nodes
            .values()
            .find_map(|n| {
                // A node its policies hold until a person acts needs a leader too: to say so on
                // the node, as for pre-drain hooks. One whose pool is closed or paused waits
                // without one: its policy's status, which says why, brings a leader when it
                // goes out of date.
                let may_start = !self.halted()
                    && (self.policies.pool_lets_start(n, wall)
                        || self.policies.holds_for_a_person(n));
                needs_rotor(n, wall, may_start, may_resume)
                    .map(|why| Need::Node(n.name.clone(), why))
            })
            .or_else(|| self.halt.unwritten().then_some(Need::HaltRecord))
            .or_else(|| {
                self.unwritten
                    .awaiting_rewrite()
                    .map(|node| Need::EndRecord(node.to_string()))
            })
            .or_else(|| self.status_out_of_date(now, wall).map(Need::PolicyStatus));
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
        // Rule: a term ends only with no drain or clean-up running (a stand-down waits for
        // them; a lost lease ends the process). Not leading while they run is a renewal
        // answered late, the fence closed for a moment: they are still this term's, and what
        // the term knows (the rotation, the rooms its drains hold) stays.
        let work_under_way = !self.running.is_empty() || !self.cleaning.is_empty();
        if !leading && work_under_way {
            return (commands, None);
        }
        let new_term = leading && !self.was_leading;
        self.was_leading = leading;
        if !leading {
            // A later term tells the rotation from what it finds then; another replica may
            // write the statuses meanwhile.
            self.rotation = None;
            self.statuses.forget_written();
            return (commands, None);
        }
        if new_term {
            // What this replica knew from an earlier term (another replica may have led since)
            // is stale: like any new leader, its first start passes the gate.
            commands.push(Command::NewTerm);
            self.last_pass = None;
            // Whatever an earlier term wrote may have been changed since: write afresh.
            self.statuses.forget_written();
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
        // Rule: rotor undoes only a cordon it placed. A tainted node its record says rotor
        // cordoned, seen uncordoned while no drain runs, is no longer cordoned by rotor: a later
        // cordon is someone else's.
        for n in self.nodes.values() {
            if n.tainted
                && n.record.cordoned_by_rotor
                && !n.unschedulable
                && !n.deleting
                && !self.busy(&n.name)
            {
                commands.push(Command::ForgetCordon(n.name.clone()));
            }
        }
        // Room made ahead for a node that is no longer in line goes, and so does the room of a
        // node whose pool no longer surges (its policy changed, or it moved to another pool):
        // its drain makes no room, so it would not release any. So does the room of a node
        // whose window has closed, whose policy has no budget in force or a budget of 0, or
        // any while the rotation is halted: no drain may use it until the pool opens again or
        // a person acts, maybe hours later. A node that started its drain owns its room now.
        let (nodes, policies) = (&self.nodes, &self.policies);
        let halted = self.halt.halted().is_some();
        let no_longer_in_line = self.ahead.sort_out(&self.running, |name| {
            nodes.get(name).is_some_and(|n| {
                !halted
                    && n.tainted
                    && start_block(n, wall, retry_backoff).is_none()
                    && (policies.labels_stale() || policies.room_ahead_pays(n, wall))
            })
        });
        commands.extend(no_longer_in_line.into_iter().map(Command::ReleaseAhead));
        commands.extend(self.breaker_step(now, wall));
        let (running, cleaning) = (&self.running, &self.cleaning);
        let rewrites = self
            .unwritten
            .due_rewrites(now, |n| running.contains(n) || cleaning.contains(n));
        commands.extend(rewrites.into_iter().map(Command::RewriteEnd));
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
                Command::CleanUp(name) | Command::ForgetCordon(name) => {
                    self.cleaning.insert(name.clone())
                }
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
            Cow::Owned(queued_copy(n))
        } else {
            Cow::Borrowed(n)
        }
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

    /// The circuit breaker's part of a pass: trip on a replacement that never came up, write a
    /// halt tripped here again while the record does not show it, and stop the drains under way
    /// if the halt says so.
    fn breaker_step(&mut self, now: Instant, wall: Timestamp) -> Vec<Command> {
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
            commands.push(Command::Halt(self.halt.trip(reason, wall, now)));
        }
        commands.extend(self.halt.due_rewrite(now).map(Command::RewriteHalt));
        if self.drains_halted() {
            for name in &self.running {
                if self.paused.insert(name.clone()) {
                    commands.push(Command::Pause(name.clone()));
                }
            }
        }
        commands
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

    /// The policies' status writes that are due; none while the nodes are read again (the
    /// members are not known until then).
    fn status_writes(&mut self, now: Instant, wall: Timestamp) -> Vec<Command> {
        if !self.statuses_knowable() {
            return Vec::new();
        }
        let queued = queued_copies(&self.nodes, &self.running);
        let fleet = Grouped::new(&self.nodes, &queued);
        let halt = self.halt.halted().map(|h| h.reason.as_str());
        let due = self
            .statuses
            .take_due(self.policies.pools(), &fleet, halt, now, wall);
        due.into_iter()
            .map(|(policy, status)| Command::WritePolicyStatus { policy, status })
            .collect()
    }

    /// A policy whose status as the cluster holds it is out of date, if any.
    fn status_out_of_date(&mut self, now: Instant, wall: Timestamp) -> Option<String> {
        if !self.statuses_knowable() {
            return None;
        }
        let queued = queued_copies(&self.nodes, &self.running);
        let fleet = Grouped::new(&self.nodes, &queued);
        let halt = self.halt.halted().map(|h| h.reason.as_str());
        self.statuses
            .out_of_date(self.policies.pools(), &fleet, halt, now, wall)
    }

    /// Whether the policies' status can be told: there are policies, and each node's pool is
    /// known (it is not while the nodes are read again for a label key).
    fn statuses_knowable(&self) -> bool {
        self.policies.known() && !self.policies.labels_stale() && !self.policies.pools().is_empty()
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

/// A rotation under way, for its notices.
#[derive(Debug, Default)]
struct Rotation {
    /// Nodes this leader drained in it.
    drained: usize,
}

#[cfg(test)]
mod pool_tests;
#[cfg(test)]
mod tests;
