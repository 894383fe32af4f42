//! The machine with RotationPolicies: each pool at its own budget and schedule, overlaps held,
//! nothing started before the policies are known, statuses written on change and bounded.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use rotor_core::NodeBudget;
use rotor_policy::{PolicyBudget, RotationPolicy, RotationPolicySpec};

use super::status::{STATUS_AGAIN, STATUS_EVERY};
use super::tests::ahead;
use super::*;
use crate::fleet::held::{Held, HeldReason};
use crate::fleet::pools::{FlagDrain, Pool};

/// Saturday 2025-03-01, noon UTC.
fn wall() -> Timestamp {
    "2025-03-01T12:00:00Z".parse().unwrap()
}

fn config(max_concurrent: usize) -> MachineConfig {
    MachineConfig {
        limits: FleetLimits {
            max_concurrent,
            max_unavailable: NodeBudget::Count(1),
            startup_grace: Duration::from_secs(600),
        },
        flags: FlagPool {
            windows: Vec::new(),
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
        watch_policies: true,
    }
}

/// A policy over nodes labelled `pool=<pool>`, with budgets `(nodes, schedule, duration)`.
fn policy(name: &str, pool: &str, budgets: &[(&str, Option<(&str, &str)>)]) -> Pool {
    let mut p = RotationPolicy::new(
        name,
        RotationPolicySpec {
            node_selector: Default::default(),
            priority: 0,
            budgets: budgets
                .iter()
                .map(|(nodes, schedule)| PolicyBudget {
                    nodes: nodes.to_string(),
                    schedule: schedule.map(|(s, _)| s.to_string()),
                    duration: schedule.map(|(_, d)| d.to_string()),
                    ..Default::default()
                })
                .collect(),
            drain: None,
        },
    );
    p.spec
        .node_selector
        .match_labels
        .insert("pool".into(), pool.into());
    Pool::read(&p)
}

/// A Ready tainted node of `pool` ("" for none), `age_days` old.
fn tainted(name: &str, pool: &str, age_days: i64) -> NodeView {
    let mut v = NodeView {
        name: name.into(),
        ready: true,
        ever_ready: true,
        tainted: true,
        taint_keeps_pods_off: true,
        reason: "image".into(),
        created: Some(wall() - jiff::SignedDuration::from_hours(24 * age_days)),
        ..NodeView::default()
    };
    if !pool.is_empty() {
        v.labels = crate::fleet::node_labels::NodeLabels::of_pairs(&[("pool", pool)]);
    }
    v
}

fn pass(machine: &mut Machine, now: Instant) -> (Vec<Command>, Vec<Held>) {
    pass_at(machine, now, wall())
}

/// A leading pass at `now`, with the clock on the wall at `wall`.
fn pass_at(machine: &mut Machine, now: Instant, wall: Timestamp) -> (Vec<Command>, Vec<Held>) {
    machine.lease_step(now, wall, true, true);
    let (mut commands, round) = machine.act(now, wall, true);
    let round = round.expect("a leading pass proposes starts");
    let held = round.held.clone();
    commands.extend(machine.start(round, wall));
    (commands, held)
}

fn started(commands: &[Command]) -> Vec<(String, Option<String>)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Drain { node, policy, .. } => {
                Some((node.clone(), policy.as_ref().map(|p| p.name.clone())))
            }
            _ => None,
        })
        .collect()
}

/// The drains resumed, with the policy each runs under.
fn resumed(commands: &[Command]) -> Vec<(String, Option<String>)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Drain {
                node,
                intent: Intent::Resume,
                policy,
                ..
            } => Some((node.clone(), policy.as_ref().map(|p| p.name.clone()))),
            _ => None,
        })
        .collect()
}

fn held_text(held: &[Held], node: &str) -> String {
    held.iter()
        .find(|(n, _)| n == node)
        .map(|(_, why)| why.to_string())
        .unwrap_or_else(|| panic!("{node} is not held: {held:?}"))
}

fn statuses(commands: &[Command]) -> BTreeMap<String, rotor_policy::RotationPolicyStatus> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::WritePolicyStatus { policy, status } => Some((policy.clone(), status.clone())),
            _ => None,
        })
        .collect()
}

fn nodes() -> Vec<NodeView> {
    vec![
        tainted("sys-1", "system", 9),
        tainted("sys-2", "system", 8),
        tainted("gen-1", "general", 9),
        tainted("gen-2", "general", 8),
        tainted("gen-3", "general", 7),
        tainted("gen-4", "general", 6),
        tainted("other-1", "", 9),
        tainted("other-2", "", 8),
    ]
}

#[test]
fn nothing_starts_before_the_policies_are_known_and_without_a_crd_the_flags_govern() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    machine.apply(Event::NodesListed(nodes()), t0);
    let (commands, held) = pass(&mut machine, t0);
    assert_eq!(started(&commands), []);
    assert!(held_text(&held, "sys-1").contains("reading the RotationPolicies first"));
    // No CRD: one pool, the flags' --max-unavailable 1 over all eight nodes.
    machine.apply(Event::PoliciesAbsent, t0);
    let (commands, held) = pass(&mut machine, t0);
    // The oldest first (by name among equals).
    assert_eq!(started(&commands), [("gen-1".to_string(), None)]);
    assert!(held_text(&held, "sys-1").starts_with("max-unavailable 1 reached (1 of 8"));
}

#[test]
fn pools_rotate_side_by_side_each_at_its_own_budget() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    machine.apply(
        Event::PoliciesListed(vec![
            policy("system", "system", &[("1", None)]),
            policy("general", "general", &[("50%", None)]),
        ]),
        t0,
    );
    machine.apply(Event::NodesListed(nodes()), t0);
    let (commands, held) = pass(&mut machine, t0);
    // system: 1 of 2; general: 50% of 4 = 2; the rest (no policy): --max-unavailable 1 of 2.
    let mut starts = started(&commands);
    starts.sort();
    assert_eq!(
        starts,
        [
            ("gen-1".to_string(), Some("general".to_string())),
            ("gen-2".to_string(), Some("general".to_string())),
            ("other-1".to_string(), None),
            ("sys-1".to_string(), Some("system".to_string())),
        ]
    );
    assert_eq!(
        held_text(&held, "gen-3"),
        "RotationPolicy general: budget 50% = 2 of 4 reached (2 of its nodes unavailable)"
    );
    assert_eq!(
        held_text(&held, "sys-2"),
        "RotationPolicy system: budget 1 of 2 reached (1 of its nodes unavailable)"
    );
    assert!(held_text(&held, "other-2").starts_with("max-unavailable 1 reached (1 of 2"));
    // --max-concurrent stays the ceiling over every pool.
    let mut machine = Machine::new(config(2));
    machine.apply(
        Event::PoliciesListed(vec![policy("general", "general", &[("100%", None)])]),
        t0,
    );
    machine.apply(Event::NodesListed(nodes()), t0);
    let (commands, held) = pass(&mut machine, t0);
    assert_eq!(started(&commands).len(), 2);
    assert!(held_text(&held, "gen-3").starts_with("max-concurrent 2 reached"));
}

#[test]
fn a_closed_schedule_holds_its_pool_only_and_its_status_says_until_when() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    // Weeknights only; wall() is a Saturday.
    machine.apply(
        Event::PoliciesListed(vec![
            policy("system", "system", &[("1", Some(("0 22 * * 1-5", "6h")))]),
            policy("general", "general", &[("1", None)]),
        ]),
        t0,
    );
    machine.apply(Event::NodesListed(nodes()), t0);
    let (commands, held) = pass(&mut machine, t0);
    assert_eq!(
        started(&commands)
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["gen-1", "other-1"]
    );
    assert_eq!(
        held_text(&held, "sys-1"),
        "RotationPolicy system: outside every scheduled budget for this drain reason; the next opens at 2025-03-03T22:00:00Z"
    );
    let written = statuses(&commands);
    let system = &written["system"];
    assert_eq!(
        system.budget.as_deref(),
        Some("none (outside every schedule)")
    );
    assert_eq!(system.budget_until.as_deref(), Some("2025-03-03T22:00:00Z"));
    let closed = system
        .conditions
        .iter()
        .find(|c| c.type_ == "WindowClosed")
        .unwrap();
    assert_eq!(closed.status, "True");
    assert_eq!((system.nodes, system.out_of_date), (2, 2));
    let general = &written["general"];
    assert_eq!(
        (general.draining, general.budget.as_deref()),
        (1, Some("1 of 4"))
    );
}

#[test]
fn an_overlap_holds_the_node_and_shows_on_both_policies() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    let mut everything = policy("everything", "system", &[("1", None)]);
    everything.selector = rotor_apimachinery::labels::LabelSelector::everything();
    machine.apply(
        Event::PoliciesListed(vec![everything, policy("system", "system", &[("1", None)])]),
        t0,
    );
    // Only the overlapping nodes are tainted: nothing else would bring a leader.
    machine.apply(
        Event::NodesListed(vec![
            tainted("sys-1", "system", 9),
            tainted("sys-2", "system", 8),
        ]),
        t0,
    );
    // Held until a person acts, yet worth a leader: to say so on the node and the policies.
    assert!(matches!(
        machine.lease_step(t0, wall(), false, false).as_slice(),
        [LeaseCommand::Contend(Need::Node(..))]
    ));
    let (commands, held) = pass(&mut machine, t0);
    assert_eq!(
        held_text(&held, "sys-1"),
        "selected by RotationPolicies everything, system at the same priority: give one a higher priority or narrow their nodeSelectors"
    );
    assert!(!started(&commands).iter().any(|(n, _)| n.starts_with("sys")));
    // Said on the node too, once.
    let events: Vec<&String> = commands
        .iter()
        .filter_map(|c| match c {
            Command::AnnounceHeld { node, why } if node == "sys-1" => Some(why),
            _ => None,
        })
        .collect();
    assert_eq!(events.len(), 1, "{commands:?}");
    assert!(events[0].contains("same priority"), "{}", events[0]);
    for policy in ["everything", "system"] {
        let status = &statuses(&commands)[policy];
        let overlap = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Overlap")
            .unwrap();
        assert_eq!(overlap.status, "True", "{policy}");
        assert!(
            overlap.message.contains("sys-1, sys-2"),
            "{}",
            overlap.message
        );
    }
}

#[test]
fn a_policy_that_cannot_be_followed_holds_its_nodes_and_its_drains_take_its_settings() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    // Surge without --surge: fail closed, saying how to fix it.
    let mut system = policy("system", "system", &[("1", None)]);
    system.drain.surge = Some(true);
    let mut general = policy("general", "general", &[("1", None)]);
    general.drain = crate::fleet::pools::PoolDrain {
        timeout: Some(Duration::from_secs(7200)),
        ..Default::default()
    };
    machine.apply(Event::PoliciesListed(vec![system, general]), t0);
    machine.apply(Event::NodesListed(nodes()), t0);
    let (commands, held) = pass(&mut machine, t0);
    let why = held_text(&held, "sys-1");
    assert!(why.contains("runs without --surge"), "{why}");
    let invalid = &statuses(&commands)["system"].conditions[0];
    assert_eq!(
        (invalid.type_.as_str(), invalid.status.as_str()),
        ("Invalid", "True")
    );
    let general = commands
        .iter()
        .find_map(|c| match c {
            Command::Drain {
                node,
                policy: Some(policy),
                ..
            } if node == "gen-1" => Some(policy.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(general.drain.timeout, Some(Duration::from_secs(7200)));
    assert!(!general.surge);
}

#[test]
fn statuses_are_written_on_change_at_most_every_few_seconds() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    machine.apply(
        Event::PoliciesListed(vec![policy("general", "general", &[("1", None)])]),
        t0,
    );
    machine.apply(Event::NodesListed(nodes()), t0);
    let (commands, _) = pass(&mut machine, t0);
    assert_eq!(statuses(&commands)["general"].draining, 1);
    // Nothing changed: nothing written.
    let (commands, _) = pass(&mut machine, t0 + Duration::from_secs(1));
    assert!(statuses(&commands).is_empty());
    // A change a second later waits for the interval.
    machine.apply(Event::NodeApplied(tainted("gen-5", "general", 1)), t0);
    let (commands, _) = pass(&mut machine, t0 + Duration::from_secs(2));
    assert!(statuses(&commands).is_empty());
    let (commands, _) = pass(&mut machine, t0 + STATUS_EVERY);
    assert_eq!(statuses(&commands)["general"].nodes, 5);
}

/// What the policy watch shows after the statuses in `commands` were written: each policy
/// with its status as stored.
fn show_written(machine: &mut Machine, policies: &[Pool], commands: &[Command], now: Instant) {
    for (name, status) in statuses(commands) {
        let mut pool = policies.iter().find(|p| p.name == name).unwrap().clone();
        pool.stored_status = Some(status);
        machine.apply(Event::PolicyApplied(pool), now);
    }
}

#[test]
fn a_status_out_of_date_between_rotations_brings_a_leader_to_write_it_and_no_longer() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    // Weeknights only (wall() is a Saturday noon), and an unscheduled budget.
    let policies = vec![
        policy("system", "system", &[("1", Some(("0 22 * * 1-5", "6h")))]),
        policy("general", "general", &[("1", None)]),
    ];
    machine.apply(Event::PoliciesListed(policies.clone()), t0);
    // No node is tainted: nothing but the statuses, never written, needs a leader.
    let untainted = nodes()
        .into_iter()
        .map(|mut v| {
            v.tainted = false;
            v
        })
        .collect();
    machine.apply(Event::NodesListed(untainted), t0);
    assert_eq!(
        machine.lease_step(t0, wall(), false, false),
        [LeaseCommand::Contend(Need::PolicyStatus("general".into()))]
    );
    let (commands, _) = pass(&mut machine, t0);
    let written = statuses(&commands);
    assert_eq!(written.keys().collect::<Vec<_>>(), ["general", "system"]);
    assert_eq!(
        written["system"].budget_until.as_deref(),
        Some("2025-03-03T22:00:00Z")
    );
    // Once the watch shows them, nothing needs a leader: it lets the lease go in time.
    show_written(&mut machine, &policies, &commands, t0);
    let later = t0 + Duration::from_secs(1);
    assert_eq!(machine.status_out_of_date(later, wall()), None);
    assert_eq!(machine.lease_step(later, wall(), true, true), []);
    let (commands, _) = pass(&mut machine, later);
    assert!(statuses(&commands).is_empty(), "{commands:?}");
    let idle = later + Duration::from_secs(30);
    assert!(matches!(
        machine.lease_step(idle, wall(), true, true).as_slice(),
        [
            LeaseCommand::StandDown { leading: true, .. },
            LeaseCommand::StandBy { .. }
        ]
    ));
    machine.act(idle, wall(), false);
    // Monday night the system pool's schedule opens, with no node tainted and no leader: its
    // status (the window closed, until then) is out of date, and a replica contends to say so.
    let monday_night: Timestamp = "2025-03-03T22:00:01Z".parse().unwrap();
    let at = idle + Duration::from_secs(1);
    assert_eq!(machine.lease_step(at, wall(), false, false), []);
    assert_eq!(
        machine.lease_step(at, monday_night, false, false),
        [LeaseCommand::Contend(Need::PolicyStatus("system".into()))]
    );
}

#[test]
fn a_paused_pools_waiting_node_brings_a_leader_only_for_its_status_until_the_pool_opens() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    let paused = vec![policy("general", "general", &[("0", None)])];
    machine.apply(Event::PoliciesListed(paused.clone()), t0);
    machine.apply(Event::NodesListed(vec![tainted("gen-1", "general", 9)]), t0);
    // Nothing may start: only the status, never written, needs a leader.
    assert_eq!(
        machine.lease_step(t0, wall(), false, false),
        [LeaseCommand::Contend(Need::PolicyStatus("general".into()))]
    );
    let (commands, held) = pass(&mut machine, t0);
    assert!(held_text(&held, "gen-1").contains("paused"), "{held:?}");
    assert_eq!(
        statuses(&commands)["general"].budget.as_deref(),
        Some("0 (paused)")
    );
    // Shown back, the status says why the node waits: the lease goes, as for a closed window.
    show_written(&mut machine, &paused, &commands, t0);
    assert_eq!(machine.status_out_of_date(t0, wall()), None);
    assert_eq!(machine.lease_step(t0, wall(), true, true), []);
    assert!(matches!(
        machine
            .lease_step(t0 + Duration::from_secs(30), wall(), true, true)
            .as_slice(),
        [
            LeaseCommand::StandDown { leading: true, .. },
            LeaseCommand::StandBy { .. }
        ]
    ));
    // The policy lets one go: the node needs rotor again.
    machine.apply(
        Event::PolicyApplied(policy("general", "general", &[("1", None)])),
        t0,
    );
    assert_eq!(
        machine.lease_step(t0 + Duration::from_secs(31), wall(), false, false),
        [LeaseCommand::Contend(Need::Node(
            "gen-1".into(),
            "it carries the drain taint"
        ))]
    );
}

#[test]
fn a_status_written_by_another_replica_since_this_ones_term_is_no_reason_to_lead() {
    let t0 = Instant::now();
    // Weeknights only: closed on Saturday noon, open on Monday night.
    let policies = vec![policy(
        "system",
        "system",
        &[("1", Some(("0 22 * * 1-5", "6h")))],
    )];
    let untainted = || {
        vec![NodeView {
            tainted: false,
            ..tainted("sys-1", "system", 9)
        }]
    };
    let replica = || {
        let mut machine = Machine::new(config(10));
        machine.apply(Event::PoliciesListed(policies.clone()), t0);
        machine.apply(Event::NodesListed(untainted()), t0);
        machine
    };
    let (mut a, mut b) = (replica(), replica());
    // a writes the status (the window closed) in a term of its own, then stands down.
    let (commands, _) = pass(&mut a, t0);
    assert_eq!(statuses(&commands).len(), 1, "{commands:?}");
    show_written(&mut a, &policies, &commands, t0);
    show_written(&mut b, &policies, &commands, t0);
    a.act(t0, wall(), false);
    // Monday night b leads and writes the window open, with its own transition time.
    let monday_night: Timestamp = "2025-03-03T22:00:01Z".parse().unwrap();
    let later = t0 + Duration::from_secs(60);
    let (commands, _) = pass_at(&mut b, later, monday_night);
    assert_eq!(statuses(&commands).len(), 1, "{commands:?}");
    show_written(&mut a, &policies, &commands, later);
    // a reads it as b wrote it, not against its own old write: nothing to lead for.
    let after = monday_night + jiff::SignedDuration::from_secs(5);
    assert_eq!(a.status_out_of_date(later, after), None);
    let lease = a.lease_step(later, after, false, false);
    assert!(
        !lease.iter().any(|c| matches!(c, LeaseCommand::Contend(_))),
        "{lease:?}"
    );
}

#[test]
fn a_status_write_never_shown_back_is_made_less_and_less_often_and_is_no_reason_to_lead_meanwhile()
{
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    let policies = vec![policy("general", "general", &[("1", None)])];
    machine.apply(Event::PoliciesListed(policies.clone()), t0);
    let untainted = vec![NodeView {
        tainted: false,
        ..tainted("gen-1", "general", 9)
    }];
    machine.apply(Event::NodesListed(untainted), t0);
    let at = |s: u64| t0 + Duration::from_secs(s);
    let writes = |machine: &mut Machine, s: u64| statuses(&pass(machine, at(s)).0).len();
    // Refused each time (no RBAC on rotationpolicies/status, say): written at 0 s, again at
    // 30 s, then after 60 s more, then 120 s more.
    let written_at: Vec<u64> = (0..=300)
        .step_by(5)
        .filter(|&s| writes(&mut machine, s) > 0)
        .collect();
    assert_eq!(written_at, [0, 30, 90, 210]);
    // Between retries it is no reason to lead: the lease goes.
    assert_eq!(machine.status_out_of_date(at(211), wall()), None);
    machine.act(at(211), wall(), false);
    let lease = machine.lease_step(at(211), wall(), false, false);
    assert!(
        !lease.iter().any(|c| matches!(c, LeaseCommand::Contend(_))),
        "{lease:?}"
    );
    assert_eq!(
        machine.lease_step(at(451), wall(), false, false),
        [LeaseCommand::Contend(Need::PolicyStatus("general".into()))],
        "due again 240 s after the last write"
    );
}

#[test]
fn a_status_that_changes_before_its_last_write_is_shown_back_is_written_again_in_time() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    let policies = vec![policy("general", "general", &[("1", None)])];
    machine.apply(Event::PoliciesListed(policies.clone()), t0);
    machine.apply(Event::NodesListed(vec![tainted("gen-1", "general", 9)]), t0);
    let (commands, _) = pass(&mut machine, t0);
    assert_eq!(statuses(&commands)["general"].draining, 1);
    // Drained before the watch showed that write back (a loaded API server, say).
    let mut drained = tainted("gen-1", "general", 9);
    drained.record.phase = Some(DrainPhase::Drained);
    machine.apply(Event::NodeApplied(drained), t0);
    machine.apply(
        Event::TaskEnded {
            node: "gen-1".into(),
            result: crate::drain::outcome::DrainResult::Drained,
            record: None,
            evicted: Vec::new(),
        },
        t0,
    );
    // What is to be said now is a reason to lead, and is written at the usual pace.
    let soon = t0 + Duration::from_secs(2);
    assert_eq!(
        machine.status_out_of_date(soon, wall()),
        Some("general".into())
    );
    let (commands, _) = pass(&mut machine, t0 + STATUS_EVERY);
    assert_eq!(statuses(&commands)["general"].drained, 1, "{commands:?}");
}

#[test]
fn a_status_write_the_watch_does_not_show_back_is_made_again_later_not_each_pass() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    let policies = vec![policy("general", "general", &[("1", None)])];
    machine.apply(Event::PoliciesListed(policies.clone()), t0);
    machine.apply(Event::NodesListed(nodes()), t0);
    let (commands, _) = pass(&mut machine, t0);
    assert_eq!(statuses(&commands)["general"].draining, 1);
    // The watch has not shown it: not written again until STATUS_AGAIN (the write may have
    // failed, or something else wrote the status since).
    let (commands, _) = pass(&mut machine, t0 + STATUS_EVERY);
    assert!(statuses(&commands).is_empty(), "{commands:?}");
    let (commands, _) = pass(&mut machine, t0 + STATUS_AGAIN);
    assert_eq!(statuses(&commands)["general"].draining, 1);
    // Shown back: never again while nothing changes.
    show_written(&mut machine, &policies, &commands, t0 + STATUS_AGAIN);
    let (commands, _) = pass(&mut machine, t0 + 3 * STATUS_AGAIN);
    assert!(statuses(&commands).is_empty(), "{commands:?}");
}

/// `nodes` as the shell reads them with no label kept (before any policy names a key).
fn without_labels(nodes: Vec<NodeView>) -> Vec<NodeView> {
    nodes
        .into_iter()
        .map(|mut v| {
            v.labels = Default::default();
            v
        })
        .collect()
}

#[test]
fn a_policy_selecting_by_a_label_not_kept_has_the_nodes_read_again_and_holds_until_then() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    assert_eq!(machine.label_keys(), &LabelKeys::default(), "no key kept");
    // The nodes listed before the policies: read without their labels.
    machine.apply(Event::NodesListed(without_labels(nodes())), t0);
    machine.apply(
        Event::PoliciesListed(vec![policy("general", "general", &[("1", None)])]),
        t0,
    );
    assert_eq!(
        machine.label_keys(),
        &LabelKeys::Only(["pool".to_string()].into())
    );
    assert!(machine.take_read_nodes_again(), "the nodes are read again");
    assert!(!machine.take_read_nodes_again(), "asked once");
    // Meanwhile every node looks unselected: nothing starts, and no status is written.
    let (commands, held) = pass(&mut machine, t0);
    assert_eq!(started(&commands), []);
    assert!(statuses(&commands).is_empty(), "{commands:?}");
    assert!(
        held_text(&held, "gen-1").contains("reading the nodes again"),
        "{held:?}"
    );
    // Read again with the key: the policy governs its nodes.
    machine.apply(Event::NodesListed(nodes()), t0);
    let (commands, _) = pass(&mut machine, t0);
    assert!(
        started(&commands).contains(&("gen-1".to_string(), Some("general".to_string()))),
        "{commands:?}"
    );
    assert_eq!(statuses(&commands)["general"].draining, 1);
    // A second policy by the same key needs no new read; neither does one going away.
    machine.apply(
        Event::PolicyApplied(policy("system", "system", &[("1", None)])),
        t0,
    );
    assert!(!machine.take_read_nodes_again());
    machine.apply(Event::PolicyDeleted("system".into()), t0);
    assert!(!machine.take_read_nodes_again());
    // No policy left: no key kept, and nothing to read.
    machine.apply(Event::PolicyDeleted("general".into()), t0);
    assert_eq!(machine.label_keys(), &LabelKeys::default());
    assert!(!machine.take_read_nodes_again());
}

#[test]
fn a_drain_under_way_resumes_only_once_its_node_is_in_its_pool() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    let mut evicting = tainted("gen-1", "general", 9);
    evicting.record.phase = Some(DrainPhase::Evicting);
    machine.apply(
        Event::NodesListed(without_labels(vec![evicting.clone()])),
        t0,
    );
    machine.apply(
        Event::PoliciesListed(vec![policy("general", "general", &[("1", None)])]),
        t0,
    );
    // Its labels not read yet: it would resume with the flags' settings.
    let (commands, _) = pass(&mut machine, t0);
    assert_eq!(resumed(&commands), []);
    machine.apply(Event::NodesListed(vec![evicting]), t0);
    let (commands, _) = pass(&mut machine, t0);
    assert_eq!(
        resumed(&commands),
        [("gen-1".to_string(), Some("general".to_string()))]
    );
}

#[test]
fn a_drain_under_way_resumes_only_once_the_policies_are_read() {
    // A restart: the nodes were listed before the policy watch answered (the controller waits
    // for it only so long). The drain recorded on gen-1 must not go on under the flags'
    // settings while its policy is unread.
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    let evicting = || {
        let mut n = tainted("gen-1", "general", 9);
        n.record.phase = Some(DrainPhase::Evicting);
        n
    };
    machine.apply(Event::NodesListed(without_labels(vec![evicting()])), t0);
    let (commands, _) = pass(&mut machine, t0);
    assert_eq!(resumed(&commands), [], "{commands:?}");
    machine.apply(
        Event::PoliciesListed(vec![policy("general", "general", &[("1", None)])]),
        t0,
    );
    assert!(machine.take_read_nodes_again(), "the policy's key is read");
    machine.apply(Event::NodesListed(vec![evicting()]), t0);
    let (commands, _) = pass(&mut machine, t0);
    assert_eq!(
        resumed(&commands),
        [("gen-1".to_string(), Some("general".to_string()))]
    );
}

#[test]
fn a_policy_by_a_key_already_kept_places_the_nodes_at_once() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    machine.apply(
        Event::PoliciesListed(vec![policy("general", "general", &[("1", None)])]),
        t0,
    );
    assert!(machine.take_read_nodes_again());
    machine.apply(Event::NodesListed(nodes()), t0);
    machine.apply(
        Event::PolicyApplied(policy("system", "system", &[("1", None)])),
        t0,
    );
    assert!(!machine.take_read_nodes_again(), "the key is kept already");
    let (commands, _) = pass(&mut machine, t0);
    let mut starts = started(&commands);
    starts.sort();
    assert_eq!(
        starts,
        [
            ("gen-1".to_string(), Some("general".to_string())),
            ("other-1".to_string(), None),
            ("sys-1".to_string(), Some("system".to_string())),
        ]
    );
}

#[test]
fn a_read_the_machine_asked_for_keeps_the_settle_clock_and_a_lost_watch_restarts_it() {
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(20);
    let mut machine = Machine::new(config(10));
    machine.apply(Event::PoliciesAbsent, t0);
    machine.apply(Event::NodesListed(without_labels(nodes())), t0);
    let since = |m: &Machine| m.nodes["gen-1"].tainted_since;
    assert_eq!(since(&machine), Some(t0));
    // A policy by a new key, then the nodes read again 20 s later: the taint was watched all
    // along.
    machine.apply(
        Event::PolicyApplied(policy("general", "general", &[("1", None)])),
        later,
    );
    machine.apply(Event::NodesListed(nodes()), later);
    assert_eq!(since(&machine), Some(t0));
    // A list after the watch lost its place: counted from then.
    machine.apply(Event::NodesListed(nodes()), later);
    assert_eq!(since(&machine), Some(later));
}

#[test]
fn nodes_that_only_count_are_left_out_of_the_round_yet_size_their_pool() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    machine.apply(
        Event::PoliciesListed(vec![policy("general", "general", &[("25%", None)])]),
        t0,
    );
    // Two tainted nodes and six untainted, Ready ones.
    let mut nodes = vec![
        tainted("gen-1", "general", 9),
        tainted("gen-2", "general", 8),
    ];
    for i in 3..=8 {
        let mut v = tainted(&format!("gen-{i}"), "general", 7);
        v.tainted = false;
        v.taint_keeps_pods_off = false;
        v.reason.clear();
        nodes.push(v);
    }
    // One more that is not Ready: unavailable, so it stays in the view and counts as such.
    let mut down = tainted("gen-9", "general", 7);
    down.tainted = false;
    down.ready = false;
    nodes.push(down);
    machine.apply(Event::NodesListed(nodes), t0);
    machine.lease_step(t0, wall(), true, true);
    let (_, round) = machine.act(t0, wall(), true);
    let round = round.expect("a leading pass proposes starts");
    let mut in_view: Vec<&str> = round.view.iter().map(|v| v.name.as_str()).collect();
    in_view.sort();
    assert_eq!(in_view, ["gen-1", "gen-2", "gen-9"]);
    assert_eq!(
        round.counted_beside,
        BTreeMap::from([(PoolRef::Policy("general".into()), 6)])
    );
    // 25% of 9 rounds up to 3, and gen-9 takes one: both tainted nodes start. Without the six
    // left out it would be 25% of 3, taken by gen-9: none would.
    let mut starts = started(&machine.start(round, wall()));
    starts.sort();
    assert_eq!(
        starts,
        [
            ("gen-1".to_string(), Some("general".to_string())),
            ("gen-2".to_string(), Some("general".to_string())),
        ]
    );
}

/// The general nodes under `general` (one at a time, surging) with room made ahead for one
/// node: the first pass starts gen-1, and gen-2, next in line, gets its room.
fn gen_2_has_room_ahead(general: Pool, t0: Instant) -> Machine {
    let mut cfg = config(10);
    cfg.reserve_ahead = 1;
    cfg.flags.drain.surge_timeout = Some(Duration::from_secs(300));
    let mut machine = Machine::new(cfg);
    machine.apply(Event::PoliciesListed(vec![general]), t0);
    let general: Vec<NodeView> = nodes()
        .into_iter()
        .filter(|n| n.name.starts_with("gen-"))
        .collect();
    machine.apply(Event::NodesListed(general), t0);
    let (commands, _) = pass(&mut machine, t0);
    assert_eq!(
        started(&commands),
        [("gen-1".into(), Some("general".into()))]
    );
    assert_eq!(ahead(&commands), [Command::ReserveAhead("gen-2".into())]);
    machine
}

#[test]
fn room_made_ahead_goes_when_the_nodes_pool_stops_surging() {
    let t0 = Instant::now();
    let surging = |surge: bool| {
        let mut general = policy("general", "general", &[("1", None)]);
        general.drain.surge = Some(surge);
        general
    };
    let mut machine = gen_2_has_room_ahead(surging(true), t0);

    // The policy stops surging: gen-2's drain will make no room and release none, so the room
    // made ahead goes now, and none is made again.
    machine.apply(Event::PoliciesListed(vec![surging(false)]), t0);
    let (commands, _) = pass(&mut machine, t0 + Duration::from_secs(1));
    assert_eq!(ahead(&commands), [Command::ReleaseAhead("gen-2".into())]);
    let (commands, _) = pass(&mut machine, t0 + Duration::from_secs(2));
    assert_eq!(ahead(&commands), []);
}

#[test]
fn room_made_ahead_goes_when_the_nodes_pool_is_paused() {
    let t0 = Instant::now();
    let paused = |nodes: &str| {
        let mut general = policy("general", "general", &[(nodes, None)]);
        general.drain.surge = Some(true);
        general
    };
    let mut machine = gen_2_has_room_ahead(paused("1"), t0);

    // The policy's budget becomes 0 while gen-1 drains: gen-2 cannot start until someone lifts
    // the pause, so its room goes, and none is made again meanwhile.
    machine.apply(Event::PoliciesListed(vec![paused("0")]), t0);
    let (commands, held) = pass(&mut machine, t0 + Duration::from_secs(1));
    assert_eq!(ahead(&commands), [Command::ReleaseAhead("gen-2".into())]);
    assert!(held_text(&held, "gen-2").contains("paused"), "{held:?}");
    let (commands, _) = pass(&mut machine, t0 + Duration::from_secs(2));
    assert_eq!(ahead(&commands), []);
}

#[test]
fn room_made_ahead_goes_while_the_rotation_is_halted() {
    use crate::record::rotation::{Halt, HaltState};
    let t0 = Instant::now();
    let mut general = policy("general", "general", &[("1", None)]);
    general.drain.surge = Some(true);
    let mut machine = gen_2_has_room_ahead(general, t0);

    // Halted while gen-1 drains (which finishes): nothing starts until a person resumes the
    // rotation, maybe hours later, so gen-2's room goes and none is made meanwhile.
    let halt = HaltState {
        halted: Some(Halt {
            since: wall(),
            reason: "node gen-9 joined NotReady".into(),
        }),
        resumed_at: None,
    };
    machine.apply(Event::HaltRead(halt), t0);
    let (commands, _) = pass(&mut machine, t0 + Duration::from_secs(1));
    assert_eq!(ahead(&commands), [Command::ReleaseAhead("gen-2".into())]);
    let (commands, _) = pass(&mut machine, t0 + Duration::from_secs(2));
    assert_eq!(ahead(&commands), []);
    // Resumed: room is made ahead again.
    machine.apply(Event::HaltRead(HaltState::default()), t0);
    let (commands, _) = pass(&mut machine, t0 + Duration::from_secs(3));
    assert_eq!(ahead(&commands), [Command::ReserveAhead("gen-2".into())]);
}

#[test]
fn a_start_weighed_while_its_policys_budget_grew_is_decided_again() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    // `general` allows one node, and two from 12:30 UTC for an hour: the pool is open either way.
    machine.apply(
        Event::PoliciesListed(vec![policy(
            "general",
            "general",
            &[("2", Some(("30 12 * * *", "60m"))), ("1", None)],
        )]),
        t0,
    );
    let general: Vec<NodeView> = nodes()
        .into_iter()
        .filter(|n| n.name.starts_with("gen-"))
        .collect();
    machine.apply(Event::NodesListed(general), t0);
    machine.lease_step(t0, wall(), true, true);
    let (_, round) = machine.act(t0, wall(), true);
    let round = round.expect("a leading pass proposes starts");
    assert_eq!(round.start, ["gen-1"]);
    // Started 31 minutes later, once the wider budget is in force: the round was weighed under
    // the other, so it is weighed again rather than trusted.
    let late = wall() + jiff::SignedDuration::from_mins(31);
    assert_eq!(started(&machine.start(round, late)), []);
    let later = t0 + Duration::from_secs(31 * 60);
    machine.lease_step(later, late, true, true);
    let (_, round) = machine.act(later, late, true);
    let round = round.expect("a leading pass proposes starts");
    assert_eq!(
        started(&machine.start(round, late)),
        [
            ("gen-1".to_string(), Some("general".to_string())),
            ("gen-2".to_string(), Some("general".to_string()))
        ]
    );
}

#[test]
fn a_start_weighed_while_its_policys_budget_changed_is_decided_again() {
    let t0 = Instant::now();
    let mut machine = Machine::new(config(10));
    // `general` allows one node from 11:00 to 12:30 UTC and none otherwise; `system` always
    // allows one.
    machine.apply(
        Event::PoliciesListed(vec![
            policy(
                "general",
                "general",
                &[("1", Some(("0 11 * * *", "90m"))), ("0", None)],
            ),
            policy("system", "system", &[("1", None)]),
        ]),
        t0,
    );
    machine.apply(Event::NodesListed(nodes()), t0);
    machine.lease_step(t0, wall(), true, true);
    let (_, round) = machine.act(t0, wall(), true);
    let round = round.expect("a leading pass proposes starts");
    assert_eq!(round.start, ["gen-1", "other-1", "sys-1"]);
    // Started 31 minutes later: `general`'s scheduled budget has closed, `system`'s is the same.
    let late = wall() + jiff::SignedDuration::from_mins(31);
    assert_eq!(
        started(&machine.start(round, late)),
        [
            ("other-1".to_string(), None),
            ("sys-1".to_string(), Some("system".to_string()))
        ]
    );
    let later = t0 + Duration::from_secs(31 * 60);
    machine.lease_step(later, late, true, true);
    let (_, round) = machine.act(later, late, true);
    let round = round.expect("a leading pass proposes starts");
    let gen_1 = round.held.iter().find(|(n, _)| n == "gen-1");
    assert_eq!(
        gen_1.map(|(_, why)| why),
        Some(&HeldReason::PolicyPaused {
            policy: "general".into(),
            until: Some("2025-03-02T11:00:00Z".parse().unwrap()),
        })
    );
}

#[test]
fn room_made_ahead_goes_when_the_nodes_pool_closes() {
    let t0 = Instant::now();
    // One general node at a time, from 11:00 to 12:30 UTC only; wall() is 12:00.
    let mut general = policy("general", "general", &[("1", Some(("0 11 * * *", "90m")))]);
    general.drain.surge = Some(true);
    let mut machine = gen_2_has_room_ahead(general, t0);

    // Still open ten minutes later: the room stays.
    let (later, open) = (
        t0 + Duration::from_secs(600),
        wall() + jiff::SignedDuration::from_mins(10),
    );
    machine.lease_step(later, open, true, true);
    let (commands, _) = machine.act(later, open, true);
    assert_eq!(ahead(&commands), []);
    // The schedule has closed while gen-1 drains: gen-2 cannot start before tomorrow's, so its
    // room goes.
    let (later, closed) = (
        t0 + Duration::from_secs(1860),
        wall() + jiff::SignedDuration::from_mins(31),
    );
    machine.lease_step(later, closed, true, true);
    let (commands, _) = machine.act(later, closed, true);
    assert_eq!(ahead(&commands), [Command::ReleaseAhead("gen-2".into())]);
}
