//! The group surge rules on one Auto Scaling group's plans: raise, wait, no room, give back.

use rotor_core::DrainReason;

use super::*;
use crate::plan::{Candidate, PlanLimits, plan};
use crate::verdict::{SkipReason, Verdict};
use rotor_core::NodeBudget;

const GROUP: &str = "workers-asg";

/// A node of `GROUP`: `drifted` or current, with its drain state.
fn node(name: &str, drifted: bool, taint: Option<&str>, drained: bool) -> Candidate {
    Candidate {
        node: name.into(),
        instance: Some(format!("i-{name}")),
        group: Some(GROUP.into()),
        zone: Some("us-east-1a".into()),
        created: Some("2026-01-01T00:00:00Z".parse().unwrap()),
        verdict: if drifted {
            Verdict::Drifted {
                reason: DrainReason::Image,
                detail: "image ami-old, template lt-1 v2 has ami-new".into(),
            }
        } else {
            Verdict::Current
        },
        current_taint: taint.map(str::to_owned),
        drain_started: taint.is_some(),
        selected_by_selector: taint.is_some(),
        opted_out: false,
        drained,
    }
}

fn capacity(desired: u32, max_size: u32, in_service: u32, base: Option<u32>) -> GroupCapacity {
    GroupCapacity {
        name: GROUP.into(),
        desired,
        max_size,
        in_service,
        recorded_base: base,
    }
}

/// The selector's plan for `nodes` (everything within budget, retiring on), then the surge rules.
fn surge(nodes: Vec<Candidate>, group: GroupCapacity) -> (Vec<PlannedNode>, Vec<GroupSurge>) {
    let limits = PlanLimits {
        max_tainted: NodeBudget::Count(10),
        max_tainted_per_group: None,
        retire_drained: true,
    };
    let mut planned = plan(nodes, &limits);
    let decisions = plan_group_surge(&mut planned, &[group]);
    (planned, decisions)
}

fn kinds(planned: &[PlannedNode]) -> Vec<&'static str> {
    planned.iter().map(|p| p.action.kind()).collect()
}

fn step(decisions: &[GroupSurge]) -> &SurgeStep {
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    &decisions[0].step
}

#[test]
fn raises_by_the_new_taints_and_holds_them() {
    let nodes = vec![
        node("a", true, None, false),
        node("b", true, None, false),
        node("c", false, None, false),
    ];
    let (planned, decisions) = surge(nodes, capacity(3, 6, 3, None));
    assert_eq!(step(&decisions), &SurgeStep::Raise { to: 5 });
    assert_eq!(decisions[0].base, 3);
    assert_eq!(decisions[0].outstanding, 2);
    assert_eq!(kinds(&planned), ["keep", "keep", "keep"]);
    let Action::Keep { why } = &planned[0].action else {
        unreachable!()
    };
    assert!(
        why.contains("raising desired capacity to 5") && why.contains("new taints wait"),
        "{why}"
    );
}

#[test]
fn waits_until_the_surge_is_in_service_then_taints() {
    let nodes = || {
        vec![
            node("a", true, None, false),
            node("b", true, None, false),
            node("c", false, None, false),
        ]
    };
    // The next run: tag says 3, desired 5, one new instance still Pending.
    let (planned, decisions) = surge(nodes(), capacity(5, 6, 4, Some(3)));
    assert_eq!(
        step(&decisions),
        &SurgeStep::Wait {
            in_service: 4,
            desired: 5
        }
    );
    assert_eq!(kinds(&planned), ["keep", "keep", "keep"]);

    // Both InService: the taints go ahead, nothing is written to the group.
    let (planned, decisions) = surge(nodes(), capacity(5, 6, 5, Some(3)));
    assert_eq!(step(&decisions), &SurgeStep::Ready);
    assert!(!decisions[0].step.writes());
    assert_eq!(kinds(&planned), ["taint", "taint", "keep"]);
}

#[test]
fn nodes_already_tainted_count_and_do_not_wait() {
    // One node tainted in an earlier run is still draining; a second becomes out of date. Surge
    // in effect is 1, wanted 2: raise, and only the new taint waits.
    let nodes = vec![
        node("a", true, Some("image"), false),
        node("b", true, None, false),
    ];
    let (planned, decisions) = surge(nodes, capacity(4, 10, 4, Some(3)));
    assert_eq!(step(&decisions), &SurgeStep::Raise { to: 5 });
    assert_eq!(kinds(&planned), ["keep", "keep"]);
    assert_eq!(planned[0].candidate.current_taint.as_deref(), Some("image"));
}

#[test]
fn max_size_bounds_the_surge_and_no_room_means_no_wait() {
    let nodes = || vec![node("a", true, None, false), node("b", true, None, false)];
    let (_, decisions) = surge(nodes(), capacity(3, 4, 3, None));
    assert_eq!(step(&decisions), &SurgeStep::Raise { to: 4 });
    // One surge instance serves two rotating nodes: that is all MaxSize allows.
    let (planned, decisions) = surge(nodes(), capacity(4, 4, 4, Some(3)));
    assert_eq!(step(&decisions), &SurgeStep::Ready);
    assert_eq!(kinds(&planned), ["taint", "taint"]);

    let (planned, decisions) = surge(nodes(), capacity(3, 3, 3, None));
    assert_eq!(step(&decisions), &SurgeStep::NoRoom);
    assert_eq!(kinds(&planned), ["taint", "taint"]);
    assert!(decisions[0].describe().contains("no room above 3"));
}

#[test]
fn retires_give_the_surge_back_one_instance_each() {
    let nodes = || {
        vec![
            node("a", true, Some("image"), true),
            node("b", true, Some("image"), true),
        ]
    };
    let (planned, decisions) = surge(nodes(), capacity(5, 6, 5, Some(3)));
    assert_eq!(step(&decisions), &SurgeStep::GiveBack { count: 2 });
    for p in &planned {
        assert_eq!(p.action, Action::Retire { shrink_group: true });
    }
    // Only one surge instance left: one retire shrinks the group, the other is replaced.
    let (planned, decisions) = surge(nodes(), capacity(4, 6, 4, Some(3)));
    assert_eq!(step(&decisions), &SurgeStep::GiveBack { count: 1 });
    assert_eq!(
        planned.iter().map(|p| p.action.clone()).collect::<Vec<_>>(),
        [
            Action::Retire { shrink_group: true },
            Action::Retire {
                shrink_group: false
            }
        ]
    );
    // Without surge in effect a retire is the plain one.
    let (planned, decisions) = surge(nodes(), capacity(3, 6, 3, None));
    assert!(decisions.is_empty());
    assert_eq!(
        planned[0].action,
        Action::Retire {
            shrink_group: false
        }
    );
}

#[test]
fn a_retire_and_a_new_taint_in_one_run() {
    // a is drained and retired (gives one back); b is still draining; c becomes out of date.
    let nodes = vec![
        node("a", true, Some("image"), true),
        node("b", true, Some("image"), false),
        node("c", true, None, false),
    ];
    // Base 3, surge 2 in effect: after the give-back 1 remains, wanted is 2 (b and c): raise.
    let (planned, decisions) = surge(nodes, capacity(5, 10, 5, Some(3)));
    assert_eq!(step(&decisions), &SurgeStep::Raise { to: 5 });
    assert_eq!(planned[0].action, Action::Retire { shrink_group: true });
    assert_eq!(kinds(&planned), ["retire", "keep", "keep"]);
}

#[test]
fn finishes_by_removing_the_tag_once_all_is_given_back() {
    let done = vec![node("a", false, None, false), node("b", false, None, false)];
    let (_, decisions) = surge(done.clone(), capacity(3, 6, 3, Some(3)));
    assert_eq!(step(&decisions), &SurgeStep::Finish);
    assert!(decisions[0].step.writes());
    // No tag, nothing under rotation: nothing to say.
    let (_, decisions) = surge(done, capacity(3, 6, 3, None));
    assert!(decisions.is_empty());
}

#[test]
fn surge_left_without_rotation_is_reported_never_scaled_in() {
    // The taints were rolled back before any drain: two surge instances are left.
    let nodes = vec![node("a", false, None, false), node("b", false, None, false)];
    let (planned, decisions) = surge(nodes, capacity(5, 6, 5, Some(3)));
    assert_eq!(step(&decisions), &SurgeStep::Stranded { extra: 2 });
    assert!(
        !decisions[0].step.writes(),
        "rotor never lowers the capacity"
    );
    assert!(
        decisions[0]
            .describe()
            .contains("set the desired capacity to 3")
    );
    assert_eq!(kinds(&planned), ["keep", "keep"]);
}

#[test]
fn a_base_above_the_desired_capacity_is_read_as_the_desired_capacity() {
    // Someone lowered the group to 2 after rotor recorded 4.
    let nodes = vec![node("a", true, None, false)];
    let (_, decisions) = surge(nodes, capacity(2, 6, 2, Some(4)));
    assert_eq!(decisions[0].base, 2);
    assert_eq!(step(&decisions), &SurgeStep::Raise { to: 3 });
}

#[test]
fn groups_entirely_skipped_and_nodes_of_other_groups_are_left_alone() {
    let mut skipped = node("a", true, None, false);
    skipped.verdict = Verdict::Skip {
        why: SkipReason::GroupExcludedByName {
            group: GROUP.into(),
        },
    };
    let mut other = node("b", true, None, false);
    other.group = Some("other-asg".into());
    let (planned, decisions) = surge(vec![skipped, other], capacity(3, 6, 3, Some(3)));
    assert!(decisions.is_empty(), "{decisions:?}");
    assert_eq!(kinds(&planned), ["skip", "taint"]);
}

#[test]
fn capacity_is_read_from_the_describe_answer() {
    let group: AutoScalingGroup = serde_json::from_value(serde_json::json!({
        "AutoScalingGroupName": GROUP,
        "MinSize": 1, "MaxSize": 6, "DesiredCapacity": 5,
        "Instances": [
            {"InstanceId": "i-1", "LifecycleState": "InService", "HealthStatus": "Healthy", "AvailabilityZone": "us-east-1a"},
            {"InstanceId": "i-2", "LifecycleState": "Pending", "HealthStatus": "Healthy", "AvailabilityZone": "us-east-1a"},
            {"InstanceId": "i-3", "LifecycleState": "InService", "HealthStatus": "Healthy", "AvailabilityZone": "us-east-1b"},
        ],
        "Tags": [{"Key": "rotor.dev/surge-base", "Value": "3", "ResourceId": GROUP,
                  "ResourceType": "auto-scaling-group", "PropagateAtLaunch": false}],
    }))
    .unwrap();
    assert_eq!(GroupCapacity::of(&group), capacity(5, 6, 2, Some(3)));
    let mut untagged = group;
    untagged
        .tags
        .insert(SURGE_BASE_TAG.into(), "not a number".into());
    assert_eq!(GroupCapacity::of(&untagged).recorded_base, None);
}

#[test]
fn a_raise_is_held_when_the_give_backs_it_counted_on_did_not_land() {
    // Base 3, surge 2 in effect. a and b are drained and give it back; c is still draining.
    // Planned on both give-backs landing: desired 3 after them, 1 wanted, so raise to 4.
    let nodes = || {
        vec![
            node("a", true, Some("image"), true),
            node("b", true, Some("image"), true),
            node("c", true, Some("image"), false),
        ]
    };
    let result = |outcome: WriteOutcome| {
        Some(WriteResult {
            outcome,
            attempts: 1,
        })
    };
    let failed = || {
        result(WriteOutcome::Failed {
            error: "TerminateInstanceInAutoScalingGroup: throttled".into(),
        })
    };
    let dropped = || {
        result(WriteOutcome::Dropped {
            why: "taken back: the drain taint is gone".into(),
        })
    };
    let after = |writes: Vec<Option<WriteResult>>| {
        let (planned, mut decisions) = surge(nodes(), capacity(5, 10, 5, Some(3)));
        assert_eq!(step(&decisions), &SurgeStep::Raise { to: 4 });
        hold_raises_over_missed_give_backs(&mut decisions, &planned, &writes);
        decisions.remove(0).step
    };

    // Neither landed: desired is still 5, and 4 would make the group terminate one it picks.
    assert_eq!(
        after(vec![failed(), dropped(), None]),
        SurgeStep::RaiseHeld {
            to: 4,
            desired: 5,
            missed: 2
        }
    );
    assert!(!after(vec![failed(), dropped(), None]).writes());
    // One landed: desired 4, and setting 4 changes nothing: held too.
    assert_eq!(
        after(vec![result(WriteOutcome::Applied), failed(), None]),
        SurgeStep::RaiseHeld {
            to: 4,
            desired: 4,
            missed: 1
        }
    );
    // Both landed, or a dry run: desired 3, the raise goes as planned.
    assert_eq!(
        after(vec![
            result(WriteOutcome::Applied),
            result(WriteOutcome::Applied),
            None
        ]),
        SurgeStep::Raise { to: 4 }
    );
    assert_eq!(
        after(vec![
            result(WriteOutcome::DryRun),
            result(WriteOutcome::DryRun),
            None
        ]),
        SurgeStep::Raise { to: 4 }
    );
}
