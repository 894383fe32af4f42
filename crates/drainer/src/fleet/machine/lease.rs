//! When this replica seeks the leader lease and when it gives it back: it contends while some
//! node needs a leading drainer, or a RotationPolicy's status is out of date, and stands down
//! once neither has held for `--release-lease-after` and no task it started still runs. Which
//! node needs one, and why, is [`needs_rotor`].

use std::time::{Duration, Instant};

use jiff::Timestamp;

use crate::fleet::starts::{NodeView, StartBlock, start_block};
use crate::record::node::retry_backoff;

/// What the lease step asks of the shell.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::fleet) enum LeaseCommand {
    /// Contend for the leader lease, for what needs a leader.
    Contend(Need),
    /// Stop contending and release the lease (the shell waits until it is released); `idle` is
    /// how long nothing has needed a leader.
    StandDown { leading: bool, idle: Duration },
    /// Log that this replica stands by without the lease; `waiting` names tainted nodes that
    /// only wait (empty: nothing is tainted).
    StandBy { waiting: Vec<String> },
}

/// What needs a leading drainer.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::fleet) enum Need {
    /// The node needs rotor, for the reason given.
    Node(String, &'static str),
    /// The RotationPolicy's status is out of date, and only a leader writes it.
    PolicyStatus(String),
    /// The circuit breaker tripped here and the rotation record does not show the halt yet:
    /// a leader that stood down now would leave the next one draining, unaware of it.
    HaltRecord,
    /// This node's drain drained it, and the node does not show it yet: a leader that stood
    /// down now would leave the next one to drain it again.
    EndRecord(String),
}

/// The election's state at a pass, with `--release-lease-after` (a flag, not state).
pub(super) struct LeasePass {
    pub now: Instant,
    pub contending: bool,
    pub leading: bool,
    /// `--release-lease-after`.
    pub release_after: Duration,
}

/// Since when nothing has needed a leader, and whether standing by was said.
#[derive(Default)]
pub(super) struct LeaseWatch {
    idle_since: Option<Instant>,
    standing_by: bool,
}

impl LeaseWatch {
    /// The lease's part of a pass. `needed` says what needs a leader now, if anything;
    /// `tasks_run` says whether a drain or clean-up this replica started still runs (the lease
    /// is kept for it); `waiting` lists the tainted nodes that only wait, asked only when
    /// standing by is said.
    pub(super) fn step(
        &mut self,
        needed: Option<Need>,
        tasks_run: bool,
        waiting: impl FnOnce() -> Vec<String>,
        pass: LeasePass,
    ) -> Vec<LeaseCommand> {
        let mut commands = Vec::new();
        match needed {
            Some(need) => {
                self.idle_since = None;
                if !pass.contending {
                    commands.push(LeaseCommand::Contend(need));
                    self.standing_by = false;
                }
            }
            None if !tasks_run => {
                let idle = pass
                    .now
                    .duration_since(*self.idle_since.get_or_insert(pass.now));
                let release = !pass.leading || idle >= pass.release_after;
                let mut still_contending = pass.contending;
                if release && pass.contending {
                    commands.push(LeaseCommand::StandDown {
                        leading: pass.leading,
                        idle,
                    });
                    still_contending = false;
                }
                if !self.standing_by && !still_contending {
                    commands.push(LeaseCommand::StandBy { waiting: waiting() });
                    self.standing_by = true;
                }
            }
            None => self.idle_since = None,
        }
        commands
    }
}

/// Why `node` needs a leading drainer now, if it does: its drain is under way (to resume, after
/// a failover), it has rotor's drain state without the taint (to undo), or it carries the taint
/// and may start now: not drained, not opted out with `rotor.dev/do-not-disrupt`, not backing off
/// after a failure, inside a maintenance window, its pool open and not paused, and not halted
/// (`may_start`). A drain under way
/// needs it unless a halt stopped it (`may_resume`). A node that only waits (to be retired, for
/// its opt-out to go, for its retry time, a window or a resume) needs nothing yet: the node
/// watch shows the first two change, and the once-a-second pass notices the others.
pub(super) fn needs_rotor(
    node: &NodeView,
    now: Timestamp,
    may_start: bool,
    may_resume: bool,
) -> Option<&'static str> {
    if !node.tainted {
        return (node.record.phase.is_some() || node.record.cordoned_by_rotor)
            .then_some("it has rotor's drain state but no drain taint, to undo");
    }
    if node.record.is_active() {
        return may_resume.then_some("its drain is under way");
    }
    // The fleet's own test of whether a tainted node may start, so the two cannot drift apart.
    // A node its pre-drain hooks hold needs a leader too: to say on the node who holds it.
    match start_block(node, now, retry_backoff) {
        _ if !may_start => None,
        None => Some("it carries the drain taint"),
        Some(StartBlock::PreDrainHooks | StartBlock::AwaitingApproval) => {
            Some("it carries the drain taint and waits for its hooks or approval, to report")
        }
        Some(_) => None,
    }
}
