//! A pass's round of starts: what the fleet limits, the windows and the holds propose
//! ([`Machine::propose_starts`]), what the start gate and the budget-aware choice leave of it
//! ([`Machine::take_decision`]), and the drains and the room made ahead it turns into
//! ([`Machine::start`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::{Command, Machine, Rotation};
use crate::fleet::breaker::gate_trip;
use crate::fleet::held::{Held, HeldReason, Limit};
use crate::fleet::pools::PoolRef;
use crate::fleet::starts::{FleetDecision, NodeView, candidate_names, choose_in_pools};
use crate::record::node::{Intent, retry_backoff};
use crate::record::notify::NoticeKind;

/// The starts a pass proposes, before the start gate and the budget-aware choice have their say.
#[derive(Debug)]
pub(in crate::fleet) struct StartRound {
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
    pub(in crate::fleet) fn hold(&mut self, why: HeldReason) {
        hold_starts(&mut self.held, &mut self.start, why, self.unavailable_room);
    }
}

impl Machine {
    /// The fleet limits' choice among the candidates, then the holds that apply to every start:
    /// the maintenance windows and a burst of taints still arriving.
    pub(super) fn propose_starts(
        &self,
        now: Instant,
        wall: Timestamp,
        elapsed: Duration,
    ) -> StartRound {
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

    /// Puts a fleet decision (the first, or the budget-aware choice's) into `round`. A node
    /// whose clean-up is still running (untainted, then tainted again) waits for it.
    pub(in crate::fleet) fn take_decision(&self, round: &mut StartRound, decision: FleetDecision) {
        round.held = decision.held;
        round.start = decision
            .start
            .into_iter()
            .filter(|n| !self.busy(n))
            .collect();
    }

    /// The round's starts, as drains to run, then room made ahead for the nodes next in line;
    /// the shell calls it only while it still leads, at `wall`, after weighing the round.
    pub(in crate::fleet) fn start(
        &mut self,
        mut round: StartRound,
        wall: Timestamp,
    ) -> Vec<Command> {
        // The gate held past --halt-after: what the last drains evicted is not coming back.
        if let (Some(halt_after), Some((held_for, why)), None) =
            (self.cfg.halt_after, &round.gate_held, self.halt.halted())
            && let Some(reason) = gate_trip(*held_for, halt_after, why)
        {
            return vec![Command::Halt(self.halt.trip(reason, round.wall, round.now))];
        }
        self.recheck_the_clock(&mut round, wall);
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

    /// Weighing a round can take minutes (the gate's read of the Pending pods in a large
    /// cluster, the health checks, the choice's reads). A node whose window closed, or whose
    /// policy's budget in force changed, meanwhile does not start on the old decision: it is
    /// decided again on the next pass, which holds it with the reason then true. The round's
    /// time becomes `wall`, for the room made ahead.
    fn recheck_the_clock(&self, round: &mut StartRound, wall: Timestamp) {
        let (still, changed): (Vec<String>, Vec<String>) = std::mem::take(&mut round.start)
            .into_iter()
            .partition(|name| {
                self.nodes
                    .get(name)
                    .is_none_or(|n| !self.policies.time_rules_changed(n, round.wall, wall))
            });
        for node in changed {
            tracing::info!(
                %node,
                weighed_for = ?wall.duration_since(round.wall),
                "not starting: its maintenance window or its RotationPolicy's budget in force changed while the start was weighed; it is decided again on the next pass"
            );
        }
        round.start = still;
        round.wall = wall;
    }

    /// An Event on each node that pre-drain hooks, a missing approval or its policies hold,
    /// when it is news (see [`HoldsAnnounced`](super::announced::HoldsAnnounced)).
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
    /// twice. Not outside the maintenance windows, nor for a paused pool or while the rotation
    /// is halted: room that no drain may use yet only costs.
    /// When room moves from one waiting node to another is
    /// [`RoomAhead::after_round`](super::ahead::RoomAhead::after_round)'s rule.
    fn reserve_ahead(&mut self, round: &StartRound) -> Vec<Command> {
        if self.cfg.reserve_ahead == 0 || self.running.is_empty() || self.halted() {
            return Vec::new();
        }
        let next_in_line: Vec<String> = candidate_names(&round.view, round.wall, retry_backoff)
            .into_iter()
            .filter(|name| {
                !self.busy(name)
                    && self
                        .nodes
                        .get(name)
                        .is_some_and(|n| self.policies.room_ahead_pays(n, round.wall))
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
}

/// Holds this round's starts for `why`. The nodes the fleet limits held were held counting those
/// starts as drains ("max-concurrent 3 reached (3 draining)" while none is); with the starts
/// held, those that only the starts kept out wait for `why` first, and say so. There was a free
/// slot (something was starting), so that is every node held by max-concurrent, and those held
/// by max-unavailable when the nodes unavailable before the starts left room
/// (`unavailable_room`); otherwise that limit holds them whatever starts.
pub(super) fn hold_starts(
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
