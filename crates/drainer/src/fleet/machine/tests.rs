use std::str::FromStr;

use super::events::{gate_after, sight_taint};
use super::round::hold_starts;
use super::*;
use crate::drain::outcome::DrainResult;
use crate::drain::published::WorkloadRef;
use crate::fleet::held::{Held, HeldReason};
use crate::record::node::DrainRecord;
use crate::record::rotation::HaltState;
use rotor_core::NodeBudget;

use crate::fleet::pools::FlagDrain;
use crate::fleet::starts::choose_nodes_to_start;
use crate::fleet::window::MaintenanceWindow;

fn wall() -> Timestamp {
    "2025-03-01T12:00:00Z".parse().unwrap()
}

fn config(max_concurrent: usize, windows: &[&str]) -> MachineConfig {
    MachineConfig {
        limits: FleetLimits {
            max_concurrent,
            max_unavailable: NodeBudget::Count(max_concurrent as u32),
            startup_grace: Duration::from_secs(600),
        },
        flags: FlagPool {
            windows: windows
                .iter()
                .map(|w| MaintenanceWindow::from_str(w).unwrap())
                .collect(),
            require_approval: false,
            drain: FlagDrain {
                drain_timeout: Duration::from_secs(1800),
                ..FlagDrain::default()
            },
        },
        release_after: Duration::from_secs(30),
        reserve_ahead: 0,
        halt_after: None,
        halt_stops_drains: false,
        watch_policies: false,
    }
}

/// `config` with `--surge`: room made ahead for as many nodes as may drain at once.
fn surge_config(max_concurrent: usize, windows: &[&str]) -> MachineConfig {
    let base = config(max_concurrent, windows);
    MachineConfig {
        reserve_ahead: max_concurrent,
        flags: FlagPool {
            drain: FlagDrain {
                surge_timeout: Some(Duration::from_secs(300)),
                ..base.flags.drain.clone()
            },
            ..base.flags.clone()
        },
        ..base
    }
}

/// The room-ahead commands among `commands`.
pub(super) fn ahead(commands: &[Command]) -> Vec<Command> {
    commands
        .iter()
        .filter(|c| matches!(c, Command::ReserveAhead(_) | Command::ReleaseAhead(_)))
        .cloned()
        .collect()
}

/// The `AnnounceHeld` Events among `commands`, as `node: why`.
fn announced(commands: &[Command]) -> Vec<String> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::AnnounceHeld { node, why } => Some(format!("{node}: {why}")),
            _ => None,
        })
        .collect()
}

/// A Ready node, created `age_days` before [`wall`].
fn node(name: &str, age_days: i64) -> NodeView {
    NodeView {
        name: name.into(),
        ready: true,
        ever_ready: true,
        created: Some(wall() - jiff::SignedDuration::from_hours(24 * age_days)),
        ..NodeView::default()
    }
}

fn tainted(name: &str, age_days: i64) -> NodeView {
    NodeView {
        tainted: true,
        taint_keeps_pods_off: true,
        ..node(name, age_days)
    }
}

fn with_phase(mut view: NodeView, phase: DrainPhase) -> NodeView {
    view.record.phase = Some(phase);
    view
}

fn drain(node: &str, intent: Intent) -> (String, Intent) {
    (node.to_string(), intent)
}

/// The drains among `commands`, without their taint sighting.
fn drains(commands: &[Command]) -> Vec<(String, Intent)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Drain { node, intent, .. } => Some((node.clone(), *intent)),
            _ => None,
        })
        .collect()
}

fn others(commands: &[Command]) -> Vec<Command> {
    commands
        .iter()
        .filter(|c| !matches!(c, Command::Drain { .. } | Command::PublishPhases(_)))
        .cloned()
        .collect()
}

fn listed(cfg: MachineConfig, nodes: Vec<NodeView>, now: Instant) -> Machine {
    let mut machine = Machine::new(cfg);
    assert!(!machine.listed());
    assert!(machine.apply(Event::NodesListed(nodes), now).is_empty());
    assert!(machine.listed());
    machine
}

/// One leading pass: the lease step (ignored), the act, and the starts as the shell would take
/// them when the gate is open and the choice keeps the first decision.
fn leading_pass(machine: &mut Machine, now: Instant) -> (Vec<Command>, Vec<Held>) {
    machine.lease_step(now, wall(), true, true);
    let (mut commands, round) = machine.act(now, wall(), true);
    let round = round.expect("a leading pass proposes starts");
    let held = round.held.clone();
    commands.extend(machine.start(round, wall()));
    (commands, held)
}

#[test]
fn a_new_leader_undoes_resumes_then_starts_within_the_limits() {
    let t0 = Instant::now();
    let nodes = vec![
        // Rotor's cordon without the taint: undone.
        {
            let mut n = node("untainted-cordoned", 9);
            n.record.cordoned_by_rotor = true;
            n
        },
        // A drain recorded as started: resumed, and it takes the one slot.
        with_phase(tainted("evicting", 8), DrainPhase::Evicting),
        tainted("old", 7),
        tainted("young", 1),
        with_phase(tainted("drained", 10), DrainPhase::Drained),
    ];
    let mut machine = listed(config(2, &[]), nodes, t0);

    let (commands, held) = leading_pass(&mut machine, t0);
    assert_eq!(
        others(&commands),
        [
            Command::NewTerm,
            Command::CleanUp("untainted-cordoned".into())
        ]
    );
    assert_eq!(
        drains(&commands),
        [
            drain("evicting", Intent::Resume),
            drain("old", Intent::Start)
        ]
    );
    assert_eq!(
        held,
        [(
            "young".to_string(),
            HeldReason::MaxConcurrent {
                max_concurrent: 2,
                draining: 2
            }
        )]
    );

    // The next pass starts nothing twice: the tasks are still running.
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(1));
    assert_eq!(others(&commands), []);
    assert_eq!(drains(&commands), []);

    // The resumed drain ends drained: its slot frees, and the gate is armed with what it
    // evicted; the record it wrote stands even before the watch delivers it.
    let ended = machine.apply(
        Event::TaskEnded {
            node: "evicting".into(),
            result: DrainResult::Drained,
            record: Some(DrainRecord {
                phase: Some(DrainPhase::Drained),
                ..DrainRecord::default()
            }),
            evicted: vec![],
        },
        t0 + Duration::from_secs(2),
    );
    assert_eq!(
        ended,
        [Command::CountDrainEnd("drained"), Command::ArmGate(vec![])]
    );
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(3));
    assert_eq!(drains(&commands), [drain("young", Intent::Start)]);
}

#[test]
fn a_follower_publishes_and_does_nothing_else() {
    let t0 = Instant::now();
    let nodes = vec![
        with_phase(tainted("evicting", 8), DrainPhase::Evicting),
        tainted("old", 7),
    ];
    let mut machine = listed(config(2, &[]), nodes, t0);
    let (commands, round) = machine.act(t0, wall(), false);
    assert!(round.is_none());
    assert!(
        matches!(commands.as_slice(), [Command::PublishPhases(counts)] if counts["evicting"] == 1)
    );
}

#[test]
fn a_taint_removed_stops_the_drain_and_one_gone_for_good_is_forgotten() {
    let t0 = Instant::now();
    let mut machine = listed(config(1, &[]), vec![tainted("a", 3)], t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), [drain("a", Intent::Start)]);

    let untainted = node("a", 3);
    assert!(machine.apply(Event::NodeApplied(untainted), t0).is_empty());
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(1));
    assert_eq!(others(&commands), [Command::Abort("a".into())]);

    assert_eq!(
        machine.apply(Event::NodeDeleted("a".into()), t0),
        [Command::ForgetDemand("a".into())]
    );
    assert!(!machine.nodes.contains_key("a"));
}

#[test]
fn a_node_deleted_once_its_drain_stopped_has_its_surge_room_released() {
    let t0 = Instant::now();
    let mut machine = listed(config(1, &[]), vec![tainted("a", 3)], t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), [drain("a", Intent::Start)]);
    // A halt (or a shutdown) stopped the drain where it was: its room stays for its resume.
    machine.apply(
        Event::TaskEnded {
            node: "a".into(),
            result: DrainResult::Interrupted,
            record: None,
            evicted: Vec::new(),
        },
        t0,
    );
    // The node goes (retired by someone else): no resume will come to release the room.
    assert_eq!(
        machine.apply(Event::NodeDeleted("a".into()), t0),
        [
            Command::ForgetDemand("a".into()),
            Command::ReleaseRoom("a".into())
        ]
    );
}

#[test]
fn starts_wait_for_a_burst_of_taints_and_for_a_window() {
    let t0 = Instant::now();
    let mut machine = listed(config(1, &[]), vec![node("a", 3), node("b", 2)], t0);
    // The first taint of a burst: forget what was known of the node's pods, hold the start.
    assert_eq!(
        machine.apply(Event::NodeApplied(tainted("a", 3)), t0),
        [Command::ForgetDemand("a".into())]
    );
    let (commands, held) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), []);
    assert_eq!(held, [("a".to_string(), HeldReason::TaintsArriving)]);
    assert_eq!(
        machine.burst_settles_at(t0),
        Some(t0 + Duration::from_millis(250))
    );
    // Settled: the oldest tainted node starts.
    let later = t0 + Duration::from_millis(300);
    let (commands, _) = leading_pass(&mut machine, later);
    assert_eq!(drains(&commands), [drain("a", Intent::Start)]);

    // Outside every window a tainted node does not start, nor does it make this replica
    // contend.
    let closed = config(1, &["0 3 * * * for 1h"]);
    let mut machine = listed(closed, vec![tainted("c", 1)], t0);
    assert_eq!(
        machine.lease_step(t0, wall(), false, false),
        [LeaseCommand::StandBy {
            waiting: vec!["c".into()]
        }]
    );
    let (commands, held) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), []);
    assert_eq!(held, [("c".to_string(), HeldReason::OutsideWindows)]);
}

#[test]
fn the_lease_is_sought_while_a_node_needs_rotor_and_given_back_once_idle() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let stand_down = |leading, idle| LeaseCommand::StandDown {
        leading,
        idle: Duration::from_secs(idle),
    };
    let mut machine = listed(config(1, &[]), vec![node("a", 3)], t0);
    // (when, contending, leading, an event before the step, the expected commands)
    type Step = (u64, bool, bool, Option<Event>, Vec<LeaseCommand>);
    let steps: Vec<Step> = vec![
        // Nothing tainted, not contending: stand by, said once.
        (
            0,
            false,
            false,
            None,
            vec![LeaseCommand::StandBy { waiting: vec![] }],
        ),
        (1, false, false, None, vec![]),
        // A taint: contend (once; the election keeps contending).
        (
            2,
            false,
            false,
            Some(Event::NodeApplied(tainted("a", 3))),
            vec![LeaseCommand::Contend(Need::Node(
                "a".into(),
                "it carries the drain taint",
            ))],
        ),
        (3, true, false, None, vec![]),
    ];
    for (s, contending, leading, event, expected) in steps {
        if let Some(event) = event {
            machine.apply(event, at(s));
        }
        assert_eq!(
            machine.lease_step(at(s), wall(), contending, leading),
            expected,
            "at {s}s"
        );
    }
    // Leading, it drains a; while the task runs, the lease is kept even with no node needing
    // rotor.
    let (commands, _) = leading_pass(&mut machine, at(4));
    assert_eq!(drains(&commands), [drain("a", Intent::Start)]);
    machine.apply(
        Event::NodeApplied(with_phase(tainted("a", 3), DrainPhase::Drained)),
        at(5),
    );
    assert_eq!(machine.lease_step(at(5), wall(), true, true), []);
    machine.apply(
        Event::TaskEnded {
            node: "a".into(),
            result: DrainResult::Drained,
            record: None,
            evicted: vec![],
        },
        at(6),
    );
    // Idle from here: the leader keeps the lease for --release-lease-after (30 s), then stands
    // down and stands by.
    assert_eq!(machine.lease_step(at(6), wall(), true, true), []);
    assert_eq!(machine.lease_step(at(35), wall(), true, true), []);
    assert_eq!(
        machine.lease_step(at(36), wall(), true, true),
        [
            stand_down(true, 30),
            LeaseCommand::StandBy { waiting: vec![] },
        ]
    );
    // A contender that never led gives up at once when no node needs rotor.
    let mut follower = listed(config(1, &[]), vec![node("b", 1)], t0);
    assert_eq!(
        follower.lease_step(at(0), wall(), true, false),
        [
            stand_down(false, 0),
            LeaseCommand::StandBy { waiting: vec![] },
        ]
    );
}

#[test]
fn a_moment_without_the_fence_while_drains_run_is_not_a_new_term() {
    let t0 = Instant::now();
    let mut machine = listed(config(1, &[]), vec![tainted("old-1", 20)], t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert!(commands.contains(&Command::NewTerm));
    assert_eq!(drains(&commands), vec![drain("old-1", Intent::Start)]);
    let (commands, round) = machine.act(t0, wall(), false);
    assert!(round.is_none());
    let (commands_after, _) = leading_pass(&mut machine, t0);
    assert!(
        !commands_after.contains(&Command::NewTerm),
        "a new term while old-1's drain runs: {commands:?} then {commands_after:?}"
    );
    assert!(drains(&commands_after).is_empty(), "{commands_after:?}");
}

#[test]
fn a_second_term_starts_afresh_and_a_drain_ending_arms_the_gate() {
    let t0 = Instant::now();
    let mut machine = listed(config(1, &[]), vec![], t0);
    let terms: Vec<bool> = [true, true, false, true]
        .into_iter()
        .map(|leading| {
            let (commands, _) = machine.act(t0, wall(), leading);
            commands.contains(&Command::NewTerm)
        })
        .collect();
    assert_eq!(terms, [true, false, false, true]);

    let web = || {
        vec![WorkloadRef {
            kind: "ReplicaSet".into(),
            namespace: "shop".into(),
            name: "web-1".into(),
        }]
    };
    let end = |result| Event::TaskEnded {
        node: "x".into(),
        result,
        record: None,
        evicted: web(),
    };
    assert_eq!(
        machine.apply(end(DrainResult::Cancelled), t0),
        [Command::CountDrainEnd("cancelled"), Command::ArmGate(web())]
    );
    assert_eq!(
        machine.apply(end(DrainResult::Interrupted), t0),
        [Command::ArmGate(web())]
    );
}

#[test]
fn a_taint_sighting_is_kept_until_the_taint_goes() {
    let t0 = Instant::now();
    let t = |s: u64| t0 + Duration::from_secs(s);
    let view = |tainted: bool| NodeView {
        name: "a".into(),
        tainted,
        taint_keeps_pods_off: tainted,
        ..NodeView::default()
    };
    // Each event's view of the node, sighted against the one before it.
    let mut last: Option<NodeView> = None;
    let mut seen = |mut v: NodeView, now: Instant| {
        sight_taint(last.as_ref(), &mut v, now);
        last = Some(v.clone());
        v.tainted_since
    };
    assert_eq!(seen(view(false), t(0)), None);
    assert_eq!(seen(view(true), t(1)), Some(t(1)));
    assert_eq!(
        seen(view(true), t(5)),
        Some(t(1)),
        "later events keep the first sighting"
    );
    // Removed and added again: counts from the new taint.
    assert_eq!(seen(view(false), t(6)), None);
    assert_eq!(seen(view(true), t(7)), Some(t(7)));
    // PreferNoSchedule keeps no pod off: no sighting, until it becomes NoSchedule.
    let preferred = NodeView {
        taint_keeps_pods_off: false,
        ..view(true)
    };
    assert_eq!(seen(preferred, t(8)), None);
    assert_eq!(seen(view(true), t(9)), Some(t(9)));
    // A re-list cannot tell whether the taint stayed while nobody watched: from the list.
    let mut relisted = view(true);
    sight_taint(None, &mut relisted, t(10));
    assert_eq!(relisted.tainted_since, Some(t(10)));
}

#[test]
fn a_drain_that_evicted_arms_the_gate_however_it_ends() {
    let web = || {
        vec![WorkloadRef {
            kind: "ReplicaSet".into(),
            namespace: "shop".into(),
            name: "web-1".into(),
        }]
    };
    assert_eq!(gate_after(&DrainResult::Drained, web()), Some(web()));
    // A drained node with nothing evicted still arms it (pending pods are checked).
    assert_eq!(gate_after(&DrainResult::Drained, vec![]), Some(vec![]));
    for ended in [
        DrainResult::Failed {
            error: crate::error::DrainError::PodWatchEnded { node: "n1".into() },
        },
        DrainResult::Cancelled,
        DrainResult::NodeGone,
        DrainResult::Interrupted,
    ] {
        assert_eq!(gate_after(&ended, web()), Some(web()));
    }
    assert_eq!(gate_after(&DrainResult::Cancelled, vec![]), None);
}

#[test]
fn a_node_needs_rotor_while_it_can_start_or_runs_or_has_state_to_undo() {
    let now: Timestamp = "2025-03-01T12:00:00Z".parse().unwrap();
    let node = |tainted: bool, phase: Option<DrainPhase>| {
        let mut n = NodeView {
            name: "n".into(),
            tainted,
            ..NodeView::default()
        };
        n.record.phase = phase;
        n
    };
    let needs = |n: &NodeView| needs_rotor(n, now, true, true).is_some();
    // Nothing to do: untouched nodes, and drained ones waiting to be retired.
    assert!(!needs(&node(false, None)));
    assert!(!needs(&node(true, Some(DrainPhase::Drained))));
    // Tainted and not drained: to start, or to resume.
    for phase in [
        None,
        Some(DrainPhase::Queued),
        Some(DrainPhase::Evicting),
        Some(DrainPhase::Blocked),
    ] {
        assert!(needs(&node(true, phase)), "{phase:?}");
    }
    // Outside every window (or halted) only a drain under way needs the leader; a new start
    // waits. A halt that stops the drains under way leaves nothing to do.
    assert_eq!(needs_rotor(&node(true, None), now, false, true), None);
    assert!(needs_rotor(&node(true, Some(DrainPhase::Evicting)), now, false, true).is_some());
    assert_eq!(
        needs_rotor(&node(true, Some(DrainPhase::Evicting)), now, false, false),
        None
    );
    // Failed: nothing until its retry is due.
    let mut failed = node(true, Some(DrainPhase::Failed));
    failed.record.attempts = 1;
    failed.record.deadline = Some(now - jiff::SignedDuration::from_secs(10));
    assert!(!needs(&failed), "backing off");
    failed.record.deadline = Some(now - jiff::SignedDuration::from_hours(24));
    assert!(needs(&failed), "retry due");
    // Opted out before its drain started: it waits for the opt-out to go (a node event).
    let mut opted_out = node(true, None);
    opted_out.opted_out = true;
    assert!(!needs(&opted_out));
    opted_out.record.phase = Some(DrainPhase::Evicting);
    assert!(needs(&opted_out));
    // Held by pre-drain hooks: a leader says who holds it (inside a window, like any start).
    let mut hooked = node(true, None);
    hooked.pre_drain_hooks = vec!["backup".into()];
    assert!(needs(&hooked));
    assert_eq!(needs_rotor(&hooked, now, false, true), None);
    // The taint went away: rotor's state (even a drained record, or only its cordon) is
    // undone.
    assert!(needs(&node(false, Some(DrainPhase::Drained))));
    let mut cordoned = node(false, None);
    cordoned.record.cordoned_by_rotor = true;
    assert!(needs(&cordoned));
}

#[test]
fn held_starts_take_the_nodes_held_by_the_limits_with_them() {
    let max_unavailable = HeldReason::MaxUnavailable {
        max_unavailable: NodeBudget::Count(2),
        unavailable: 2,
        total: 9,
    };
    let mut held = vec![
        (
            "c".to_string(),
            HeldReason::MaxConcurrent {
                max_concurrent: 2,
                draining: 2,
            },
        ),
        ("d".to_string(), HeldReason::OptedOut),
        ("e".to_string(), max_unavailable.clone()),
    ];
    let original = held.clone();
    let mut start = vec!["a".to_string(), "b".to_string()];
    hold_starts(&mut held, &mut start, HeldReason::OutsideWindows, true);
    assert!(start.is_empty());
    let why = |held: &[Held], n: &str| held.iter().find(|(h, _)| h == n).unwrap().1.clone();
    assert_eq!(why(&held, "a"), HeldReason::OutsideWindows);
    assert_eq!(why(&held, "c"), HeldReason::OutsideWindows);
    assert_eq!(why(&held, "e"), HeldReason::OutsideWindows);
    // A node held for its own sake keeps its reason.
    assert_eq!(why(&held, "d"), HeldReason::OptedOut);
    // When the nodes unavailable already fill max-unavailable (the start was a cordoned
    // node), that limit holds e whatever starts: it keeps its reason.
    let mut held = original;
    let mut start = vec!["cordoned".to_string()];
    hold_starts(&mut held, &mut start, HeldReason::OutsideWindows, false);
    assert_eq!(why(&held, "c"), HeldReason::OutsideWindows);
    assert_eq!(why(&held, "e"), max_unavailable);
}

#[test]
fn with_surge_the_next_in_line_gets_room_ahead_and_keeps_it_into_its_drain() {
    let t0 = Instant::now();
    let nodes = vec![tainted("a", 9), tainted("b", 8), tainted("c", 7)];
    let mut machine = listed(surge_config(1, &[]), nodes, t0);

    // a starts; b is next in line and gets its room now; c waits without any.
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), [drain("a", Intent::Start)]);
    assert_eq!(ahead(&commands), [Command::ReserveAhead("b".into())]);
    // Not asked twice.
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(1));
    assert_eq!(ahead(&commands), []);

    // a ends; b starts (its drain finds its room) and c becomes next in line.
    drained(&mut machine, "a", 9, t0 + Duration::from_secs(2));
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(3));
    assert_eq!(drains(&commands), [drain("b", Intent::Start)]);
    assert_eq!(ahead(&commands), [Command::ReserveAhead("c".into())]);
    // b's room is its drain's now: never released as "out of line".
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(4));
    assert_eq!(ahead(&commands), []);
}

#[test]
fn room_made_ahead_goes_when_the_node_leaves_the_line() {
    let t0 = Instant::now();
    let nodes = vec![tainted("a", 9), tainted("b", 8)];
    let mut machine = listed(surge_config(1, &[]), nodes, t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(ahead(&commands), [Command::ReserveAhead("b".into())]);

    // b's taint is removed (a rollback): its room goes.
    machine.apply(Event::NodeApplied(node("b", 8)), t0);
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(1));
    assert_eq!(ahead(&commands), [Command::ReleaseAhead("b".into())]);

    // Opted out instead: the same.
    let mut machine = listed(
        surge_config(1, &[]),
        vec![tainted("a", 9), tainted("b", 8)],
        t0,
    );
    leading_pass(&mut machine, t0);
    let mut opted = tainted("b", 8);
    opted.opted_out = true;
    machine.apply(Event::NodeApplied(opted), t0);
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(1));
    assert_eq!(ahead(&commands), [Command::ReleaseAhead("b".into())]);
}

/// One leading pass in which the shell's budget-aware choice scores the candidates with
/// `waits` (a node left out stays unscored) and decides again, as `choice::rechoose` does.
fn weighed_pass(machine: &mut Machine, now: Instant, waits: &[(&str, u32)]) -> Vec<Command> {
    machine.lease_step(now, wall(), true, true);
    let (mut commands, round) = machine.act(now, wall(), true);
    let mut round = round.expect("a leading pass proposes starts");
    for v in round.view.iter_mut() {
        v.budget_waits = waits.iter().find(|(n, _)| *n == v.name).map(|(_, w)| *w);
    }
    let decision = choose_nodes_to_start(&round.view, &machine.cfg.limits, wall(), retry_backoff);
    machine.take_decision(&mut round, decision);
    commands.extend(machine.start(round, wall()));
    commands
}

/// `name`'s drain task ended with the node drained.
fn drained(machine: &mut Machine, name: &str, age_days: i64, now: Instant) {
    machine.apply(
        Event::TaskEnded {
            node: name.into(),
            result: DrainResult::Drained,
            record: Some(with_phase(node(name, age_days), DrainPhase::Drained).record),
            evicted: vec![],
        },
        now,
    );
}

#[test]
fn room_made_ahead_follows_the_budget_aware_choice() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let nodes = vec![
        tainted("a", 9),
        tainted("b", 8),
        tainted("c", 7),
        tainted("d", 6),
    ];
    let mut machine = listed(surge_config(1, &[]), nodes, t0);
    // a starts; by age, b is next in line and gets room.
    let commands = weighed_pass(&mut machine, t0, &[]);
    assert_eq!(drains(&commands), [drain("a", Intent::Start)]);
    assert_eq!(ahead(&commands), [Command::ReserveAhead("b".into())]);

    // a is drained. b's pods would wait on their budgets, c's and d's not: c starts, and b,
    // which its budgets keep waiting, gives its room to d, the choice's next.
    drained(&mut machine, "a", 9, at(1));
    let commands = weighed_pass(&mut machine, at(2), &[("b", 3), ("c", 0), ("d", 0)]);
    assert_eq!(drains(&commands), [drain("c", Intent::Start)]);
    assert_eq!(
        ahead(&commands),
        [
            Command::ReleaseAhead("b".into()),
            Command::ReserveAhead("d".into())
        ]
    );

    // c is drained. b waits no more, like d; d's room is made, so d goes first and keeps no
    // room idle, and b is next.
    drained(&mut machine, "c", 7, at(3));
    let commands = weighed_pass(&mut machine, at(4), &[("b", 0), ("d", 0)]);
    assert_eq!(drains(&commands), [drain("d", Intent::Start)]);
    assert_eq!(ahead(&commands), [Command::ReserveAhead("b".into())]);
}

#[test]
fn with_several_slots_room_moves_only_after_a_full_turn_of_starts_passed_it_over() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let nodes = ["a", "b", "c", "d", "e", "f", "g"]
        .iter()
        .enumerate()
        .map(|(i, n)| tainted(n, 20 - i as i64))
        .collect();
    let mut machine = listed(surge_config(2, &[]), nodes, t0);
    let commands = weighed_pass(&mut machine, t0, &[]);
    assert_eq!(
        drains(&commands),
        [drain("a", Intent::Start), drain("b", Intent::Start)]
    );
    assert_eq!(
        ahead(&commands),
        [
            Command::ReserveAhead("c".into()),
            Command::ReserveAhead("d".into())
        ]
    );
    // a is drained; c's budgets hold it: d (room made) starts, c is passed over once of two
    // and keeps its room; e takes d's place.
    drained(&mut machine, "a", 20, at(1));
    let waits = [("c", 3), ("d", 0), ("e", 0), ("f", 0), ("g", 0)];
    let commands = weighed_pass(&mut machine, at(2), &waits);
    assert_eq!(drains(&commands), [drain("d", Intent::Start)]);
    assert_eq!(ahead(&commands), [Command::ReserveAhead("e".into())]);
    // b is drained; c still waits: e starts, c has been passed over by a full turn and its room
    // goes to the two next in line.
    drained(&mut machine, "b", 19, at(3));
    let commands = weighed_pass(&mut machine, at(4), &waits);
    assert_eq!(drains(&commands), [drain("e", Intent::Start)]);
    assert_eq!(
        ahead(&commands),
        [
            Command::ReleaseAhead("c".into()),
            Command::ReserveAhead("f".into()),
            Command::ReserveAhead("g".into())
        ]
    );
}

#[test]
fn surge_ahead_sets_how_many_nodes_get_room_ahead_and_zero_makes_none() {
    let t0 = Instant::now();
    let nodes = || {
        ["a", "b", "c", "d", "e"]
            .iter()
            .enumerate()
            .map(|(i, n)| tainted(n, 20 - i as i64))
            .collect()
    };
    let with_ahead = |reserve_ahead| MachineConfig {
        reserve_ahead,
        ..surge_config(2, &[])
    };
    // `--surge-ahead 1` with two slots: room for the one node next in line only.
    let mut machine = listed(with_ahead(1), nodes(), t0);
    let commands = weighed_pass(&mut machine, t0, &[]);
    assert_eq!(
        drains(&commands),
        [drain("a", Intent::Start), drain("b", Intent::Start)]
    );
    assert_eq!(ahead(&commands), [Command::ReserveAhead("c".into())]);
    // `--surge-ahead 0`: the drains start as before; no node gets room ahead, now or as the
    // drains end.
    let mut machine = listed(with_ahead(0), nodes(), t0);
    let commands = weighed_pass(&mut machine, t0, &[]);
    assert_eq!(
        drains(&commands),
        [drain("a", Intent::Start), drain("b", Intent::Start)]
    );
    assert_eq!(ahead(&commands), []);
    drained(&mut machine, "a", 20, t0 + Duration::from_secs(1));
    let commands = weighed_pass(&mut machine, t0 + Duration::from_secs(2), &[]);
    assert_eq!(drains(&commands), [drain("c", Intent::Start)]);
    assert_eq!(ahead(&commands), []);
}

#[test]
fn room_made_ahead_stays_with_a_node_the_choice_could_not_weigh() {
    let t0 = Instant::now();
    let nodes = vec![tainted("a", 9), tainted("b", 8), tainted("c", 7)];
    let mut machine = listed(surge_config(1, &[]), nodes, t0);
    weighed_pass(&mut machine, t0, &[]);
    drained(&mut machine, "a", 9, t0 + Duration::from_secs(1));
    // b's pods could not be listed (unscored, so after c): c starts, b keeps its room; with the
    // one place taken, nothing more is reserved.
    let commands = weighed_pass(&mut machine, t0 + Duration::from_secs(2), &[("c", 0)]);
    assert_eq!(drains(&commands), [drain("c", Intent::Start)]);
    assert_eq!(ahead(&commands), []);
}

#[test]
fn pre_drain_hooks_hold_a_node_and_are_announced_once_per_change() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let hooked = |hooks: &[&str]| NodeView {
        pre_drain_hooks: hooks.iter().map(|h| h.to_string()).collect(),
        ..tainted("a", 9)
    };
    let mut machine = listed(config(2, &[]), vec![hooked(&["backup (owner ops)"])], t0);
    let (commands, held) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), []);
    assert!(matches!(&held[..], [(n, HeldReason::PreDrainHooks(_))] if n == "a"));
    assert_eq!(
        announced(&commands),
        [
            "a: held by pre-drain hook(s) backup (owner ops) until their owners remove the \
          pre-drain.hook.rotor.dev/<name> annotation(s)"
        ]
    );
    // Still held by the same hooks: nothing new to say.
    let (commands, _) = leading_pass(&mut machine, at(1));
    assert_eq!(announced(&commands), Vec::<String>::new());
    // A second hook: said again, naming both.
    machine.apply(
        Event::NodeApplied(hooked(&["backup (owner ops)", "freeze"])),
        at(2),
    );
    let (commands, _) = leading_pass(&mut machine, at(3));
    assert_eq!(announced(&commands).len(), 1);
    assert!(announced(&commands)[0].contains("backup (owner ops), freeze"));
    // Both removed: the drain starts.
    machine.apply(Event::NodeApplied(hooked(&[])), at(4));
    let (commands, _) = leading_pass(&mut machine, at(5));
    assert_eq!(drains(&commands), [drain("a", Intent::Start)]);
    assert_eq!(announced(&commands), Vec::<String>::new());
}

#[test]
fn with_require_approval_a_node_waits_for_its_approval_and_says_so_once() {
    let t0 = Instant::now();
    let base = config(2, &[]);
    let cfg = MachineConfig {
        flags: FlagPool {
            require_approval: true,
            ..base.flags.clone()
        },
        ..base
    };
    let approved = |name: &str, age: i64| NodeView {
        drain_approved: true,
        ..tainted(name, age)
    };
    let mut machine = listed(cfg, vec![tainted("a", 9), approved("b", 8)], t0);
    let (commands, held) = leading_pass(&mut machine, t0);
    // b was approved: it starts; a waits, and an Event says what for.
    assert_eq!(drains(&commands), [drain("b", Intent::Start)]);
    assert_eq!(held, [("a".to_string(), HeldReason::AwaitingApproval)]);
    let said = announced(&commands);
    assert!(
        matches!(&said[..], [one] if one.starts_with("a: ") && one.contains("rotor.dev/drain-approved=true")),
        "{said:?}"
    );
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(1));
    assert_eq!(announced(&commands), Vec::<String>::new());
    // Approved: a starts.
    machine.apply(
        Event::NodeApplied(approved("a", 9)),
        t0 + Duration::from_secs(2),
    );
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(3));
    assert_eq!(drains(&commands), [drain("a", Intent::Start)]);

    // Without the flag, the annotation changes nothing.
    let mut machine = listed(config(2, &[]), vec![tainted("a", 9)], t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), [drain("a", Intent::Start)]);
}

#[test]
fn no_room_ahead_without_surge_or_outside_the_windows() {
    let t0 = Instant::now();
    let nodes = || vec![tainted("a", 9), tainted("b", 8)];
    let mut machine = listed(config(1, &[]), nodes(), t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), [drain("a", Intent::Start)]);
    assert_eq!(ahead(&commands), []);

    // A window that is closed at wall() (12:00 UTC).
    let mut machine = listed(surge_config(1, &["0 3 * * * for 1h"]), nodes(), t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), []);
    assert_eq!(ahead(&commands), []);

    // No drain running: a node held only while its burst of taints settles makes its own room
    // when it starts, once.
    let mut machine = listed(surge_config(1, &[]), vec![node("a", 3)], t0);
    machine.apply(Event::NodeApplied(tainted("a", 3)), t0);
    let (commands, held) = leading_pass(&mut machine, t0);
    assert_eq!(held, [("a".to_string(), HeldReason::TaintsArriving)]);
    assert_eq!(ahead(&commands), []);
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_millis(300));
    assert_eq!(drains(&commands), [drain("a", Intent::Start)]);
    assert_eq!(ahead(&commands), []);
}

/// `config` with the circuit breaker: `--halt-after 10m`, and `--halt-stops-drains` if `stops`.
fn breaker_config(max_concurrent: usize, stops: bool) -> MachineConfig {
    MachineConfig {
        halt_after: Some(Duration::from_secs(600)),
        halt_stops_drains: stops,
        ..config(max_concurrent, &[])
    }
}

fn halts(commands: &[Command]) -> Vec<String> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Halt(halt) => Some(halt.reason.clone()),
            _ => None,
        })
        .collect()
}

/// A node whose drain was recorded as started `minutes` before [`wall`].
fn started(name: &str, phase: DrainPhase, minutes: i64) -> NodeView {
    let mut view = with_phase(tainted(name, 30), phase);
    view.record.started_at = Some(wall() - jiff::SignedDuration::from_mins(minutes));
    view
}

#[test]
fn a_gate_held_past_halt_after_halts_the_rotation_until_it_is_resumed() {
    let t0 = Instant::now();
    let nodes = vec![
        started("old-1", DrainPhase::Drained, 30),
        tainted("old-2", 20),
        tainted("old-3", 10),
    ];
    let mut machine = listed(breaker_config(1, false), nodes, t0);
    // With --halt-after nothing starts before the record has been read.
    let (_, held) = leading_pass(&mut machine, t0);
    assert!(
        held.iter().all(|(_, why)| why
            .to_string()
            .contains("reading the rotation record first")),
        "{held:?}"
    );
    machine.apply(Event::HaltRead(HaltState::default()), t0);
    let gate_pass = |machine: &mut Machine, held_secs: u64| {
        let (mut commands, round) = machine.act(t0, wall(), true);
        let mut round = round.unwrap();
        round.gate_held = Some((
            Duration::from_secs(held_secs),
            "Deployment shop/api has 1/3 replicas ready".into(),
        ));
        round.hold(HeldReason::Gate(
            "Deployment shop/api has 1/3 replicas ready".into(),
        ));
        commands.extend(machine.start(round, wall()));
        commands
    };
    // Within --halt-after the gate only holds.
    assert!(halts(&gate_pass(&mut machine, 599)).is_empty());
    // Past it, the breaker trips, once, and says why.
    let tripped = halts(&gate_pass(&mut machine, 601));
    assert_eq!(
        tripped,
        [
            "the cluster has not absorbed the last drains for 601s (--halt-after 600s): Deployment shop/api has 1/3 replicas ready"
        ]
    );
    assert!(
        halts(&gate_pass(&mut machine, 700)).is_empty(),
        "tripped once"
    );
    // Halted: nothing starts even with the gate open, and each candidate says why.
    let (commands, held) = leading_pass(&mut machine, t0);
    assert!(drains(&commands).is_empty(), "{commands:?}");
    assert!(
        held.iter().all(|(_, why)| why
            .to_string()
            .starts_with("rotation halted until `rotor-drainer resume`")),
        "{held:?}"
    );
    // Until the record shows the halt, the leader keeps the lease (a new one would not know of
    // the halt) and writes it again: the first write may have failed.
    assert_eq!(
        machine.lease_step(t0, wall(), false, false),
        vec![LeaseCommand::Contend(Need::HaltRecord)]
    );
    let rewrites = |commands: &[Command]| {
        commands
            .iter()
            .filter(|c| matches!(c, Command::RewriteHalt(_)))
            .count()
    };
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(4));
    assert_eq!(rewrites(&commands), 0, "{commands:?}");
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(6));
    assert_eq!(rewrites(&commands), 1, "{commands:?}");
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(7));
    assert_eq!(rewrites(&commands), 0, "backs off: {commands:?}");
    let halted_at = wall();
    machine.apply(
        Event::HaltRead(HaltState {
            halted: Some(Halt {
                since: halted_at,
                reason: tripped[0].clone(),
            }),
            resumed_at: None,
        }),
        t0,
    );
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(60));
    assert_eq!(rewrites(&commands), 0, "shown in the record: {commands:?}");
    // A halted rotation whose record shows the halt does not keep the lease for waiting nodes.
    assert_eq!(
        machine.lease_step(t0, wall(), false, false),
        vec![LeaseCommand::StandBy {
            waiting: vec!["old-2".into(), "old-3".into()]
        }]
    );
    // The record's halt is lifted (a resume): the gate's clock restarts and old-2 starts.
    let resumed = machine.apply(
        Event::HaltRead(HaltState {
            halted: None,
            resumed_at: Some(wall()),
        }),
        t0,
    );
    assert_eq!(resumed, vec![Command::Resumed]);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), vec![drain("old-2", Intent::Start)]);
}

#[test]
fn a_halt_read_from_the_record_holds_a_new_leader_and_can_stop_the_drains_under_way() {
    let t0 = Instant::now();
    let nodes = vec![
        started("old-1", DrainPhase::Evicting, 5),
        tainted("old-2", 20),
    ];
    let halt = HaltState {
        halted: Some(Halt {
            since: wall(),
            reason: "node new-9 joined ...".into(),
        }),
        resumed_at: None,
    };
    // Finishing the drains under way (the default): old-1 resumes, old-2 waits.
    let mut machine = listed(breaker_config(2, false), nodes.clone(), t0);
    assert!(machine.apply(Event::HaltRead(halt.clone()), t0).is_empty());
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), vec![drain("old-1", Intent::Resume)]);
    // With --halt-stops-drains: nothing resumes...
    let mut machine = listed(breaker_config(2, true), nodes.clone(), t0);
    machine.apply(Event::HaltRead(halt.clone()), t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert!(drains(&commands).is_empty(), "{commands:?}");
    // ...and a drain running when the halt arrives is stopped, once.
    let mut machine = listed(breaker_config(2, true), nodes, t0);
    machine.apply(Event::HaltRead(HaltState::default()), t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(
        drains(&commands),
        vec![
            drain("old-1", Intent::Resume),
            drain("old-2", Intent::Start)
        ]
    );
    machine.apply(Event::HaltRead(halt), t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    let mut paused: Vec<&Command> = commands
        .iter()
        .filter(|c| matches!(c, Command::Pause(_)))
        .collect();
    paused.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(
        paused,
        [
            &Command::Pause("old-1".into()),
            &Command::Pause("old-2".into())
        ]
    );
    let (again, _) = leading_pass(&mut machine, t0);
    assert!(
        !again.iter().any(|c| matches!(c, Command::Pause(_))),
        "{again:?}"
    );
}

#[test]
fn a_replacement_that_never_comes_up_halts_the_rotation() {
    let t0 = Instant::now();
    let mut stuck = node("new-1", 0);
    stuck.created = Some(wall() - jiff::SignedDuration::from_mins(15));
    stuck.ready = false;
    stuck.ever_ready = false;
    let nodes = vec![
        started("old-1", DrainPhase::Drained, 30),
        tainted("old-2", 20),
        stuck.clone(),
    ];
    // A drainer watching since before new-1 joined: it knows new-1 was never Ready.
    let watching = |nodes: Vec<NodeView>, halt: HaltState| {
        let mut machine = listed(breaker_config(1, false), vec![], t0);
        machine.apply(Event::HaltRead(halt), t0);
        machine.act(t0, wall() - jiff::SignedDuration::from_mins(20), true);
        machine.apply(Event::NodesListed(nodes), t0);
        machine
    };
    let mut machine = watching(nodes.clone(), HaltState::default());
    let (commands, _) = leading_pass(&mut machine, t0);
    let reasons = halts(&commands);
    assert_eq!(reasons.len(), 1, "{commands:?}");
    assert!(
        reasons[0].starts_with("node new-1 joined at"),
        "{reasons:?}"
    );
    assert!(drains(&commands).is_empty(), "{commands:?}");
    // Resumed 5 minutes ago: the node gets a full --halt-after from then.
    let mut machine = watching(
        nodes.clone(),
        HaltState {
            halted: None,
            resumed_at: Some(wall() - jiff::SignedDuration::from_mins(5)),
        },
    );
    let (commands, held) = leading_pass(&mut machine, t0);
    assert!(halts(&commands).is_empty(), "{commands:?}");
    // Not halted, but the NotReady node past --node-startup-grace still counts as unavailable.
    assert!(
        held.iter()
            .any(|(n, why)| n == "old-2" && why.to_string().contains("max-unavailable")),
        "{held:?}"
    );
    // A drainer that started after new-1 joined cannot tell it was never Ready: no halt.
    let mut machine = listed(breaker_config(1, false), nodes.clone(), t0);
    machine.apply(Event::HaltRead(HaltState::default()), t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert!(halts(&commands).is_empty(), "{commands:?}");
    // Without the breaker nothing halts.
    let mut machine = listed(config(1, &[]), nodes, t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert!(halts(&commands).is_empty());
}

fn notices(commands: &[Command]) -> Vec<String> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Notify { kind, detail } => Some(format!("{}: {detail}", kind.name())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_rotation_is_announced_when_its_first_drain_starts_and_when_no_tainted_node_is_left() {
    let t0 = Instant::now();
    let nodes = vec![tainted("old-1", 20), tainted("old-2", 10), node("new-1", 1)];
    let mut machine = listed(config(1, &[]), nodes, t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(
        notices(&commands),
        ["RotationStarted: 2 tainted node(s) to drain, 1 at a time at most; starting with old-1"]
    );
    drained(&mut machine, "old-1", 20, t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), vec![drain("old-2", Intent::Start)]);
    assert!(
        notices(&commands).is_empty(),
        "announced once: {commands:?}"
    );
    // old-2's drain still runs: not finished.
    let (commands, _) = leading_pass(&mut machine, t0);
    assert!(notices(&commands).is_empty(), "{commands:?}");
    drained(&mut machine, "old-2", 10, t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(
        notices(&commands),
        [
            "RotationFinished: every tainted node is drained: 2 by this leader in this rotation; 2 drained node(s) wait to be retired"
        ]
    );
    let (commands, _) = leading_pass(&mut machine, t0);
    assert!(notices(&commands).is_empty(), "finished once: {commands:?}");
}

#[test]
fn a_new_leader_taking_over_a_rotation_does_not_announce_it_again() {
    let t0 = Instant::now();
    let nodes = vec![
        with_phase(tainted("old-1", 20), DrainPhase::Evicting),
        tainted("old-2", 10),
    ];
    let mut machine = listed(config(1, &[]), nodes, t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), vec![drain("old-1", Intent::Resume)]);
    assert!(notices(&commands).is_empty(), "{commands:?}");
    drained(&mut machine, "old-1", 20, t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), vec![drain("old-2", Intent::Start)]);
    assert!(notices(&commands).is_empty(), "{commands:?}");
    drained(&mut machine, "old-2", 10, t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(
        notices(&commands).len(),
        1,
        "but it does say it finished: {commands:?}"
    );
    // Drained nodes of an earlier rotation, waiting to be retired, are not a rotation under way.
    let nodes = vec![
        with_phase(tainted("old-1", 20), DrainPhase::Drained),
        tainted("old-2", 10),
    ];
    let mut machine = listed(config(1, &[]), nodes, t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert!(
        notices(&commands)[0].starts_with("RotationStarted"),
        "{commands:?}"
    );
    // A follower says nothing.
    let mut follower = listed(config(1, &[]), vec![tainted("old-3", 5)], t0);
    let (commands, round) = follower.act(t0, wall(), false);
    assert!(round.is_none() && notices(&commands).is_empty());
}

#[test]
fn a_start_weighed_across_a_windows_end_is_decided_again() {
    let t0 = Instant::now();
    // Open 11:00 to 12:30 UTC; the round is proposed at wall(), 12:00.
    let window = config(2, &["0 11 * * * for 90m"]);
    let mut machine = listed(window.clone(), vec![tainted("a", 3), tainted("b", 2)], t0);
    machine.lease_step(t0, wall(), true, true);
    let (_, round) = machine.act(t0, wall(), true);
    let round = round.expect("a leading pass proposes starts");
    assert_eq!(round.start, ["a", "b"]);
    // The gate and the choice took 31 minutes: the window closed while they weighed.
    let closed = wall() + jiff::SignedDuration::from_mins(31);
    assert_eq!(drains(&machine.start(round, closed)), []);
    // Neither counts as draining; the next pass holds both for the window.
    let later = t0 + Duration::from_secs(31 * 60);
    machine.lease_step(later, closed, true, true);
    let (commands, round) = machine.act(later, closed, true);
    assert_eq!(drains(&commands), []);
    let round = round.expect("a leading pass proposes starts");
    assert_eq!(round.start, Vec::<String>::new());
    assert_eq!(
        round.held,
        [
            ("a".to_string(), HeldReason::OutsideWindows),
            ("b".to_string(), HeldReason::OutsideWindows)
        ]
    );

    // Weighed for 29 minutes, inside the window: the decision stands.
    let mut machine = listed(window, vec![tainted("a", 3), tainted("b", 2)], t0);
    machine.lease_step(t0, wall(), true, true);
    let (_, round) = machine.act(t0, wall(), true);
    let round = round.expect("a leading pass proposes starts");
    let open = wall() + jiff::SignedDuration::from_mins(29);
    assert_eq!(
        drains(&machine.start(round, open)),
        [drain("a", Intent::Start), drain("b", Intent::Start)]
    );
}

/// Rule: rotor undoes only a cordon it placed. A failed drain's node that someone uncordoned
/// has its record's cordon forgotten, once, and not while it is still cordoned, nor when the
/// cordon was never rotor's.
#[test]
fn a_cordon_of_rotors_that_someone_undid_is_forgotten_once() {
    let t0 = Instant::now();
    let failed = |name: &str, by_rotor: bool, cordoned: bool| {
        let mut n = with_phase(tainted(name, 5), DrainPhase::Failed);
        n.record.cordoned_by_rotor = by_rotor;
        n.record.deadline = Some(wall());
        n.record.attempts = 1;
        n.unschedulable = cordoned;
        n
    };
    let nodes = vec![
        failed("uncordoned-by-someone", true, false),
        failed("still-rotors-cordon", true, true),
        failed("someone-elses-cordon", false, true),
    ];
    let mut machine = listed(config(3, &[]), nodes, t0);

    let (commands, _) = leading_pass(&mut machine, t0);
    let forgotten = |commands: &[Command]| {
        commands
            .iter()
            .filter(|c| matches!(c, Command::ForgetCordon(_)))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        forgotten(&commands),
        [Command::ForgetCordon("uncordoned-by-someone".into())]
    );
    assert!(
        !drains(&commands)
            .iter()
            .any(|(n, _)| n == "uncordoned-by-someone"),
        "not started while its record is being written"
    );
    // While the write runs, not asked for again.
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(1));
    assert!(forgotten(&commands).is_empty(), "{commands:?}");
    // Written: the record handed back no longer claims the cordon.
    let mut record = machine.nodes["uncordoned-by-someone"].record.clone();
    record.cordoned_by_rotor = false;
    machine.apply(
        Event::TaskEnded {
            node: "uncordoned-by-someone".into(),
            result: DrainResult::Skipped {
                why: "rotor's cordon was undone by someone else",
            },
            record: Some(record),
            evicted: Vec::new(),
        },
        t0 + Duration::from_secs(2),
    );
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(3));
    assert!(forgotten(&commands).is_empty(), "{commands:?}");
}

/// A start the API refused is written nowhere: a later view of the node, which still shows no
/// drain, keeps its back-off; once the node's record changes (someone wrote it), that counts.
#[test]
fn a_refused_start_keeps_its_back_off_through_new_views_of_the_node() {
    let t0 = Instant::now();
    let mut machine = listed(config(1, &[]), vec![tainted("a", 5)], t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), [drain("a", Intent::Start)]);
    let failed = DrainRecord {
        phase: Some(DrainPhase::Failed),
        attempts: 1,
        deadline: Some(wall()),
        ..DrainRecord::default()
    };
    let status = kube::core::Status::failure("denied by webhook", "BadRequest").with_code(400);
    machine.apply(
        Event::TaskEnded {
            node: "a".into(),
            result: DrainResult::Failed {
                error: crate::error::DrainError::Cordon {
                    node: "a".into(),
                    error: kube::Error::Api(Box::new(status)),
                },
            },
            record: Some(failed.clone()),
            evicted: vec![],
        },
        t0 + Duration::from_secs(1),
    );
    // A label changed: a new view, the node's record still empty.
    machine.apply(
        Event::NodeApplied(tainted("a", 5)),
        t0 + Duration::from_secs(2),
    );
    assert_eq!(machine.nodes["a"].record, failed);
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(3));
    assert!(drains(&commands).is_empty(), "{commands:?}");
    // Someone wrote the node's record (here another replica's start): it counts.
    let written = with_phase(tainted("a", 5), DrainPhase::Evicting);
    machine.apply(
        Event::NodeApplied(written.clone()),
        t0 + Duration::from_secs(4),
    );
    assert_eq!(machine.nodes["a"].record, written.record);
    machine.apply(
        Event::NodeApplied(tainted("a", 5)),
        t0 + Duration::from_secs(5),
    );
    assert_eq!(machine.nodes["a"].record, DrainRecord::default());
}

/// A drain that ended but could not write its end on the node (a webhook on nodes down past
/// the write's retries) is not drained again: the node's next views, still showing the drain
/// under way, keep the end; once the node shows another record, that counts.
#[test]
fn an_end_the_node_could_not_show_is_kept_through_new_views_of_the_node() {
    let t0 = Instant::now();
    let under_way = with_phase(tainted("a", 5), DrainPhase::Evicting);
    let mut machine = listed(config(1, &[]), vec![under_way.clone()], t0);
    let (commands, _) = leading_pass(&mut machine, t0);
    assert_eq!(drains(&commands), [drain("a", Intent::Resume)]);
    let drained = DrainRecord {
        phase: Some(DrainPhase::Drained),
        ..under_way.record.clone()
    };
    machine.apply(
        Event::TaskEnded {
            node: "a".into(),
            result: DrainResult::Drained,
            record: Some(drained.clone()),
            evicted: vec![],
        },
        t0 + Duration::from_secs(1),
    );
    // The kubelet's status update: a new view, the node's record still saying evicting.
    machine.apply(
        Event::NodeApplied(under_way.clone()),
        t0 + Duration::from_secs(2),
    );
    assert_eq!(machine.nodes["a"].record, drained);
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(3));
    assert!(drains(&commands).is_empty(), "drained again: {commands:?}");
    // Nothing else would write the drained end: the leader writes it again, over what the
    // node shows, 30 s after the drain ended (its own write had been retried).
    let rewrites = |commands: &[Command]| -> Vec<EndRewrite> {
        commands
            .iter()
            .filter_map(|c| match c {
                Command::RewriteEnd(r) => Some(r.clone()),
                _ => None,
            })
            .collect()
    };
    assert!(rewrites(&commands).is_empty());
    // Meanwhile the leader keeps the lease: the next one would drain the node again.
    assert_eq!(
        machine.lease_step(t0 + Duration::from_secs(3), wall(), false, false),
        vec![LeaseCommand::Contend(Need::EndRecord("a".into()))]
    );
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(31));
    assert_eq!(
        rewrites(&commands),
        [EndRewrite {
            node: "a".into(),
            end: drained.clone(),
            over: under_way.record.clone(),
        }]
    );
    // A failed end is kept the same way: the retry waits out its back-off.
    let failed = DrainRecord {
        phase: Some(DrainPhase::Failed),
        attempts: 2,
        deadline: Some(wall()),
        ..under_way.record.clone()
    };
    let mut machine = listed(config(1, &[]), vec![under_way.clone()], t0);
    leading_pass(&mut machine, t0);
    machine.apply(
        Event::TaskEnded {
            node: "a".into(),
            result: DrainResult::Failed {
                error: crate::error::DrainError::PodWatchEnded { node: "a".into() },
            },
            record: Some(failed.clone()),
            evicted: vec![],
        },
        t0 + Duration::from_secs(1),
    );
    machine.apply(
        Event::NodeApplied(under_way.clone()),
        t0 + Duration::from_secs(2),
    );
    assert_eq!(machine.nodes["a"].record, failed);
    let (commands, _) = leading_pass(&mut machine, t0 + Duration::from_secs(3));
    assert!(
        drains(&commands).is_empty(),
        "retried at once: {commands:?}"
    );
    // The node shows another record (the write landed late, or someone wrote it): it counts.
    let cleared = tainted("a", 5);
    machine.apply(Event::NodeApplied(cleared), t0 + Duration::from_secs(4));
    assert_eq!(machine.nodes["a"].record, DrainRecord::default());
}
