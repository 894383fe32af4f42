//! What the machine is told ([`Event`]) and how it takes each event in ([`Machine::apply`]):
//! the node watch's list and changes, the RotationPolicies', the rotation record's halt, and a
//! drain task's end. Taking an event in only updates what the machine knows (and asks for the
//! few things that cannot wait for the pass, such as forgetting a node's demand); starting
//! anything is the pass's.

use std::collections::BTreeMap;
use std::time::Instant;

use super::{Command, Machine};
use crate::drain::outcome::DrainResult;
use crate::drain::published::WorkloadRef;
use crate::fleet::pools::Pool;
use crate::fleet::starts::NodeView;
use crate::record::node::DrainRecord;
use crate::record::rotation::HaltState;

/// What the machine is told.
#[derive(Debug)]
pub(in crate::fleet) enum Event {
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

impl Machine {
    /// Takes in one event.
    pub(in crate::fleet) fn apply(&mut self, event: Event, now: Instant) -> Vec<Command> {
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
                    self.unwritten.carry(&mut view);
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
                self.unwritten.carry(&mut view);
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
                self.unwritten.forget(&name);
                // A running drain ends on the next pass and releases its own room.
                let release = (!self.busy(&name)).then(|| Command::ReleaseRoom(name.clone()));
                [Command::ForgetDemand(name)]
                    .into_iter()
                    .chain(release)
                    .collect()
            }
            Event::PoliciesListed(pools) => {
                self.policies.listed(pools);
                self.place_all();
                Vec::new()
            }
            Event::PolicyApplied(pool) => {
                if self.policies.applied(pool) {
                    self.place_all();
                }
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
                let shown = self.unwritten.forget(&node);
                // The watch has not necessarily delivered the task's last write yet; without
                // this the next pass would see the old phase and resume a finished drain.
                if let Some(record) = record
                    && let Some(view) = self.nodes.get_mut(&node)
                {
                    // An end the node may not show: a start the API refused is written
                    // nowhere, and an end write can fail past its retries (a webhook on nodes
                    // down). Kept here while the node shows what it showed, so that its next
                    // view does not resume a drain that ended nor take a back-off away.
                    if matches!(result, DrainResult::Drained | DrainResult::Failed { .. }) {
                        let on_node = shown.unwrap_or_else(|| view.record.clone());
                        self.unwritten.keep(&node, on_node, record.clone(), now);
                    }
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

    /// Every node placed afresh (the policies changed).
    fn place_all(&mut self) {
        for view in self.nodes.values_mut() {
            self.policies.place(view);
        }
    }
}

/// What the next start waits for once a drain task ends (`None`: nothing new), given the
/// workloads it `evicted` from. A drained node always arms the gate; a drain that ended otherwise
/// (failed, stopped, its node gone) arms it only if it evicted something, whose workloads must be
/// Ready again just the same.
pub(super) fn gate_after(
    result: &DrainResult,
    evicted: Vec<WorkloadRef>,
) -> Option<Vec<WorkloadRef>> {
    (matches!(result, DrainResult::Drained) || !evicted.is_empty()).then_some(evicted)
}

/// Sets `view.tainted_since` (see [`NodeView`]): kept from `old`, the last view of the node, while
/// its drain taint keeps pods off; `now` when that has just begun or nothing earlier is known;
/// `None` otherwise. So a taint that went and came back counts from its return, and the
/// monotonic clock keeps a step of the wall clock from making a new taint look old.
pub(super) fn sight_taint(old: Option<&NodeView>, view: &mut NodeView, now: Instant) {
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
