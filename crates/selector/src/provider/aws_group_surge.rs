//! Surge at the Auto Scaling group level (`--group-surge`, AWS provider): replacements are
//! launched before the nodes they replace are drained. Pure: the plan and the groups' capacity in,
//! the adjusted plan and one decision per group out.
//!
//! Per group, every run:
//! - *base* is the desired capacity before rotor raised it, kept in the group's tag
//!   [`SURGE_BASE_TAG`] (so a restarted or rescheduled CronJob finds it); without the tag it is the
//!   current desired capacity. The surge in effect is `desired - base`.
//! - *outstanding* are the group's nodes under rotation: tainted in this plan, or tainted before
//!   and not yet retired. The surge wanted is `min(outstanding, MaxSize - base)`.
//! - A drained node retired while surge is in effect is terminated with
//!   `ShouldDecrementDesiredCapacity=true`: its replacement is already running, so the group shrinks
//!   back by one instead of launching another. That is how the capacity is given back, one drained
//!   instance at a time, never by lowering the desired capacity and letting the group pick which
//!   (undrained) instance to terminate.
//! - When the surge in effect is below the surge wanted, the desired capacity is raised (the base
//!   tag written first) and this run's new taints wait; they also wait until the group counts as many
//!   `InService` instances as its desired capacity. The next run taints them.
//! - When nothing is outstanding and the surge is given back, the tag is removed.
//! - A raise is computed on the capacity this run's give-backs leave. Where some of them do not
//!   land (the retire failed, or was dropped because the node was taken back), the raise is held
//!   when it would not be above the capacity the group still has: sent, it would lower it.

use std::collections::BTreeMap;

use crate::plan::{Action, PlannedNode};
use crate::provider::aws_model::AutoScalingGroup;
use crate::report::{WriteOutcome, WriteResult};

/// Group tag holding the desired capacity before rotor raised it.
pub const SURGE_BASE_TAG: &str = "rotor.dev/surge-base";

/// `AutoScalingGroups[].LifecycleState` of an instance that serves.
pub const IN_SERVICE: &str = "InService";

/// What the surge rules read of one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupCapacity {
    /// `AutoScalingGroupName`.
    pub name: String,
    /// `DesiredCapacity`.
    pub desired: u32,
    /// `MaxSize`.
    pub max_size: u32,
    /// Instances in `InService`.
    pub in_service: u32,
    /// The [`SURGE_BASE_TAG`] value; `None` when absent or not a number.
    pub recorded_base: Option<u32>,
}

impl GroupCapacity {
    /// The capacity of a described group.
    pub fn of(group: &AutoScalingGroup) -> GroupCapacity {
        let count = |n: i32| u32::try_from(n).unwrap_or(0);
        GroupCapacity {
            name: group.name.clone(),
            desired: count(group.desired_capacity),
            max_size: count(group.max_size),
            in_service: group
                .instances
                .iter()
                .filter(|i| i.lifecycle_state == IN_SERVICE)
                .count() as u32,
            recorded_base: group
                .tags
                .get(SURGE_BASE_TAG)
                .and_then(|v| v.trim().parse().ok()),
        }
    }
}

/// What this run does about one group's surge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SurgeStep {
    /// Write the base tag, then raise the desired capacity to `to`; the group's new taints wait.
    Raise { to: u32 },
    /// A raise to `to` not sent: `missed` of this run's give-back retires did not land, so the
    /// desired capacity is still `desired`, and `to` would not be above it. The new taints wait.
    RaiseHeld { to: u32, desired: u32, missed: u32 },
    /// The surge is asked for; the group's new taints wait until `in_service` reaches `desired`.
    Wait { in_service: u32, desired: u32 },
    /// The surge instances serve; taints go ahead.
    Ready,
    /// `MaxSize` leaves no room above the base: taints go ahead without surge.
    NoRoom,
    /// Drained instances are retired with the desired capacity decremented, `count` of them.
    GiveBack { count: u32 },
    /// Nothing outstanding and no surge left: remove the base tag.
    Finish,
    /// Nothing outstanding (taints rolled back or removed by hand) but `extra` surge instances
    /// remain: rotor does not pick instances to terminate; the operator or an autoscaler does.
    Stranded { extra: u32 },
}

impl SurgeStep {
    /// `raise`, `raise-held`, `wait`, `ready`, `no-room`, `give-back`, `finish` or `stranded`.
    pub const fn kind(&self) -> &'static str {
        match self {
            SurgeStep::Raise { .. } => "raise",
            SurgeStep::RaiseHeld { .. } => "raise-held",
            SurgeStep::Wait { .. } => "wait",
            SurgeStep::Ready => "ready",
            SurgeStep::NoRoom => "no-room",
            SurgeStep::GiveBack { .. } => "give-back",
            SurgeStep::Finish => "finish",
            SurgeStep::Stranded { .. } => "stranded",
        }
    }

    /// Whether the step calls AWS (the others are decisions only).
    pub const fn writes(&self) -> bool {
        matches!(self, SurgeStep::Raise { .. } | SurgeStep::Finish)
    }
}

/// One group's surge decision, with the figures it was made on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSurge {
    pub group: String,
    /// Desired capacity before rotor raised it.
    pub base: u32,
    /// Desired capacity as described this run.
    pub desired: u32,
    pub max_size: u32,
    /// Nodes under rotation in the group (see the module documentation).
    pub outstanding: u32,
    pub step: SurgeStep,
}

impl GroupSurge {
    /// One line for logs and the text output.
    pub fn describe(&self) -> String {
        let GroupSurge {
            group,
            base,
            desired,
            max_size,
            outstanding,
            ..
        } = self;
        let figures = format!(
            "base {base}, desired {desired}, max {max_size}, {outstanding} node(s) under rotation"
        );
        match &self.step {
            SurgeStep::Raise { to } => format!(
                "group {group}: raising desired capacity to {to} ({figures}); new taints wait for the surge"
            ),
            SurgeStep::RaiseHeld {
                to,
                desired: still,
                missed,
            } => format!(
                "group {group}: not raising desired capacity to {to}: {missed} drained instance(s) that were to give surge back were not retired, so it is still {still}, and setting {to} would let the group terminate an instance of its choosing; new taints wait, the next run decides again ({figures})"
            ),
            SurgeStep::Wait {
                in_service,
                desired,
            } => format!(
                "group {group}: waiting for surge instances, {in_service} of {desired} InService ({figures})"
            ),
            SurgeStep::Ready => format!("group {group}: surge in service ({figures})"),
            SurgeStep::NoRoom => format!(
                "group {group}: no surge, MaxSize {max_size} leaves no room above {base}; drains go ahead without it"
            ),
            SurgeStep::GiveBack { count } => format!(
                "group {group}: retiring {count} drained instance(s) with the desired capacity decremented ({figures})"
            ),
            SurgeStep::Finish => {
                format!(
                    "group {group}: surge given back, removing tag {SURGE_BASE_TAG} ({figures})"
                )
            }
            SurgeStep::Stranded { extra } => format!(
                "group {group}: {extra} surge instance(s) left with no node under rotation; rotor does not choose instances to terminate: set the desired capacity to {base} or let the cluster autoscaler scale in ({figures})"
            ),
        }
    }
}

/// Applies the surge rules to `planned` (module documentation): holds new taints of groups whose
/// surge is not in service, marks retires that give surge back, and returns one decision per group
/// with anything to decide, in group name order. Nodes without a group, or in a group not among
/// `groups`, are left as planned.
pub fn plan_group_surge(planned: &mut [PlannedNode], groups: &[GroupCapacity]) -> Vec<GroupSurge> {
    let mut by_group: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (index, node) in planned.iter().enumerate() {
        if let Some(group) = &node.candidate.group {
            by_group.entry(group.clone()).or_default().push(index);
        }
    }
    let mut decisions = Vec::new();
    for group in groups {
        let members = by_group.get(&group.name).cloned().unwrap_or_default();
        // A group whose every node is skipped (excluded, opted out, not judged) is left alone.
        if !members.is_empty()
            && members
                .iter()
                .all(|&i| matches!(planned[i].action, Action::Skip { .. }))
        {
            continue;
        }
        if let Some(decision) = decide(group, &members, planned) {
            decisions.push(decision);
        }
    }
    decisions.sort_by(|a, b| a.group.cmp(&b.group));
    decisions
}

fn decide(
    group: &GroupCapacity,
    members: &[usize],
    planned: &mut [PlannedNode],
) -> Option<GroupSurge> {
    // A base above the desired capacity means someone lowered it since: start from what it is.
    let base = group
        .recorded_base
        .map_or(group.desired, |b| b.min(group.desired));
    let in_effect = group.desired - base;

    let retiring: Vec<usize> = members
        .iter()
        .copied()
        .filter(|&i| matches!(planned[i].action, Action::Retire { .. }))
        .collect();
    let outstanding = members
        .iter()
        .filter(|&&i| {
            let node = &planned[i];
            match node.action {
                Action::Taint { .. } => true,
                Action::Keep { .. } => node.candidate.current_taint.is_some(),
                _ => false,
            }
        })
        .count() as u32;

    // Each retire gives one surge instance back, while there is surge to give back.
    let give_back = in_effect.min(retiring.len() as u32);
    for &i in retiring.iter().take(give_back as usize) {
        planned[i].action = Action::Retire { shrink_group: true };
    }
    let in_effect_after = in_effect - give_back;
    let desired_after = group.desired - give_back;

    let surge = |step| GroupSurge {
        group: group.name.clone(),
        base,
        desired: group.desired,
        max_size: group.max_size,
        outstanding,
        step,
    };
    if outstanding == 0 {
        return match (give_back, in_effect_after, group.recorded_base) {
            (1.., _, _) => Some(surge(SurgeStep::GiveBack { count: give_back })),
            (0, 1.., _) => Some(surge(SurgeStep::Stranded {
                extra: in_effect_after,
            })),
            (0, 0, Some(_)) => Some(surge(SurgeStep::Finish)),
            (0, 0, None) => None,
        };
    }
    let wanted = outstanding.min(group.max_size.saturating_sub(base));
    let step = if wanted == 0 {
        SurgeStep::NoRoom
    } else if in_effect_after < wanted {
        SurgeStep::Raise { to: base + wanted }
    } else {
        // Instances being retired this run leave InService; do not count them.
        let in_service = group.in_service.saturating_sub(retiring.len() as u32);
        if in_service < desired_after {
            SurgeStep::Wait {
                in_service,
                desired: desired_after,
            }
        } else if give_back > 0 {
            SurgeStep::GiveBack { count: give_back }
        } else {
            SurgeStep::Ready
        }
    };
    if let SurgeStep::Raise { .. } | SurgeStep::Wait { .. } = step {
        let why = surge(step.clone()).describe();
        for &i in members {
            if let Action::Taint { .. } = planned[i].action {
                planned[i].action = Action::Keep { why: why.clone() };
            }
        }
    }
    Some(surge(step))
}

/// Holds each raise that this run's give-backs, as they turned out, would make a lowering.
///
/// A raise's target was computed on the desired capacity left once every planned give-back retire
/// has decremented it. Each that failed or was dropped left its instance and the capacity as they
/// were; a target not above the capacity the group still has would then lower it, and the group
/// would pick which instance to terminate, drained or not. rotor never lowers a desired capacity
/// (module documentation), so such a raise becomes [`SurgeStep::RaiseHeld`]. `writes` are the
/// node writes' results, index for index with `planned`.
pub fn hold_raises_over_missed_give_backs(
    surges: &mut [GroupSurge],
    planned: &[PlannedNode],
    writes: &[Option<WriteResult>],
) {
    for surge in surges {
        let SurgeStep::Raise { to } = surge.step else {
            continue;
        };
        let (mut give_backs, mut landed) = (0u32, 0u32);
        for (node, write) in planned.iter().zip(writes) {
            if node.candidate.group.as_deref() != Some(surge.group.as_str())
                || node.action != (Action::Retire { shrink_group: true })
            {
                continue;
            }
            give_backs += 1;
            // A dry run plans as if every write landed.
            if let Some(WriteResult {
                outcome: WriteOutcome::Applied | WriteOutcome::DryRun,
                ..
            }) = write
            {
                landed += 1;
            }
        }
        let desired = surge.desired.saturating_sub(landed);
        if to <= desired {
            surge.step = SurgeStep::RaiseHeld {
                to,
                desired,
                missed: give_backs - landed,
            };
        }
    }
}

#[cfg(test)]
mod tests;
