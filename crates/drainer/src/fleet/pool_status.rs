//! A RotationPolicy's status from what the loop knows of its nodes: the pool's progress, the
//! budget in force and until when, and its conditions. Pure; the machine decides when to write
//! it (on change, at most every few seconds) and the shell writes it.

use jiff::Timestamp;
use rotor_core::contract::{DrainPhase, format_timestamp};
use rotor_policy::{PolicyCondition, RotationPolicyStatus};

use crate::fleet::pools::{Pool, allowance};
use crate::fleet::starts::NodeView;

/// The condition types, in the order they are written.
pub const CONDITIONS: [&str; 5] = ["Invalid", "Overlap", "Paused", "WindowClosed", "Halted"];

/// How many node names a condition's message lists before "and N more".
const NAMES_SHOWN: usize = 5;

/// The status of `pool`, whose nodes are `members`; `overlapping` are the nodes it selects
/// together with another policy at the same priority; `halted` the circuit breaker's reason
/// when the rotation is halted. A condition keeps its transition time from `last` while its
/// status stays.
pub fn pool_status(
    pool: &Pool,
    members: &[&NodeView],
    overlapping: &[&str],
    halted: Option<&str>,
    last: Option<&RotationPolicyStatus>,
    now: Timestamp,
) -> RotationPolicyStatus {
    let count = |f: &dyn Fn(&NodeView) -> bool| members.iter().filter(|n| f(n)).count() as u32;
    let stuck = |n: &NodeView| {
        n.tainted
            && matches!(
                n.record.phase,
                Some(DrainPhase::Blocked | DrainPhase::Failed | DrainPhase::Parked)
            )
    };
    // The budget shown is the one for the drain reason of the pool's next node, if any waits.
    let reason = members
        .iter()
        .find(|n| n.tainted && !n.is_drained() && !n.is_active())
        .map(|n| n.reason.as_str());
    let total = members.len();
    // The budget counts the nodes another policy selects too, as the starts do
    // (`PoolRef::counted_in`).
    let budgeted = total + overlapping.len();
    let in_force = allowance(&pool.budgets, reason, budgeted, now);
    let paused = in_force.paused();
    let closed = in_force.budget.is_none();

    let overlap_message = if overlapping.is_empty() {
        String::new()
    } else {
        format!(
            "{} also selected by another RotationPolicy at priority {}: they do not start until one policy wins (a higher priority, or narrower nodeSelectors)",
            names(overlapping),
            pool.priority
        )
    };
    let until = in_force.until.map(format_timestamp);
    let facts = [
        (
            pool.invalid.is_some(),
            "Unreadable",
            pool.invalid
                .clone()
                .map(|why| format!("the pool's nodes do not start: {why}"))
                .unwrap_or_default(),
        ),
        (
            !overlapping.is_empty(),
            "NodesSelectedTwice",
            overlap_message,
        ),
        (
            paused,
            "BudgetZero",
            match &until {
                Some(until) => format!("the budget in force allows 0 nodes until {until}"),
                None => "the budget in force allows 0 nodes".into(),
            },
        ),
        (
            closed,
            "OutsideSchedules",
            match &until {
                Some(until) => format!("no budget is in force; the next opens at {until}"),
                None => "no budget applies: no drain starts".into(),
            },
        ),
        (
            halted.is_some(),
            "CircuitBreaker",
            halted
                .map(|why| format!("{why}; no drain starts until `rotor-drainer resume`"))
                .unwrap_or_default(),
        ),
    ];
    let conditions = CONDITIONS
        .iter()
        .zip(facts)
        .map(|(type_, (holds, reason, message))| {
            let status = if holds { "True" } else { "False" };
            let since = last
                .and_then(|l| l.conditions.iter().find(|c| c.type_ == *type_))
                .filter(|c| c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| format_timestamp(now));
            PolicyCondition {
                type_: (*type_).to_string(),
                status: status.into(),
                reason: if holds {
                    reason.into()
                } else {
                    "No".to_string() + reason
                },
                message: if holds { message } else { String::new() },
                last_transition_time: since,
            }
        })
        .collect();
    RotationPolicyStatus {
        observed_generation: pool.generation,
        nodes: total as u32,
        out_of_date: count(&|n| n.tainted),
        draining: count(&|n| n.is_active() && !stuck(n)),
        drained: count(&|n| n.is_drained()),
        blocked: count(&stuck),
        budget: Some(in_force.shown(budgeted)),
        budget_until: until,
        conditions,
    }
}

/// `a, b and c`, or the first few and how many more.
fn names(nodes: &[&str]) -> String {
    let shown = nodes.iter().take(NAMES_SHOWN).copied().collect::<Vec<_>>();
    let more = nodes.len().saturating_sub(NAMES_SHOWN);
    let noun = if nodes.len() == 1 { "node" } else { "nodes" };
    if more > 0 {
        format!("{noun} {} and {more} more are", shown.join(", "))
    } else if nodes.len() == 1 {
        format!("{noun} {} is", shown.join(", "))
    } else {
        format!("{noun} {} are", shown.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::pools::Pools;
    use rotor_policy::{PolicyBudget, RotationPolicy, RotationPolicySpec};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pool(budgets: &[(&str, Option<(&str, &str)>)]) -> Pool {
        let spec = RotationPolicySpec {
            node_selector: Default::default(),
            priority: 3,
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
        };
        let pools = Pools::new([Pool::read(&RotationPolicy::new("gpu", spec))]);
        pools.get("gpu").unwrap().clone()
    }

    fn view(name: &str, tainted: bool, phase: Option<DrainPhase>) -> NodeView {
        let mut v = NodeView {
            name: name.into(),
            tainted,
            ready: true,
            reason: "image".into(),
            ..NodeView::default()
        };
        v.record.phase = phase;
        v
    }

    fn condition<'a>(s: &'a RotationPolicyStatus, type_: &str) -> &'a PolicyCondition {
        s.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn counts_follow_the_nodes_phases() {
        let nodes = [
            view("a", false, None),
            view("b", true, None),
            view("c", true, Some(DrainPhase::Evicting)),
            view("d", true, Some(DrainPhase::Blocked)),
            view("e", true, Some(DrainPhase::Drained)),
            view("f", true, Some(DrainPhase::Failed)),
        ];
        let members: Vec<&NodeView> = nodes.iter().collect();
        let s = pool_status(
            &pool(&[("50%", None)]),
            &members,
            &[],
            None,
            None,
            ts("2026-11-28T12:00:00Z"),
        );
        assert_eq!(
            (s.nodes, s.out_of_date, s.draining, s.drained, s.blocked),
            (6, 5, 1, 1, 2)
        );
        assert_eq!(s.budget.as_deref(), Some("50% = 3 of 6"));
        assert_eq!(s.budget_until, None);
        for type_ in CONDITIONS {
            assert_eq!(condition(&s, type_).status, "False", "{type_}");
        }
    }

    #[test]
    fn a_pool_is_paused_by_a_budget_of_zero_not_by_having_no_nodes() {
        let now = ts("2026-11-28T12:00:00Z");
        // A policy made before its nodes join: allowed 0 of 0, yet not paused.
        let empty = pool_status(&pool(&[("20%", None)]), &[], &[], None, None, now);
        assert_eq!(empty.budget.as_deref(), Some("20% = 0 of 0"));
        assert_eq!(condition(&empty, "Paused").status, "False");
        let nodes = [view("a", true, None)];
        let members: Vec<&NodeView> = nodes.iter().collect();
        for zero in ["0", "0%"] {
            let paused = pool_status(&pool(&[(zero, None)]), &members, &[], None, None, now);
            assert_eq!(paused.budget.as_deref(), Some("0 (paused)"), "{zero}");
            assert_eq!(condition(&paused, "Paused").status, "True", "{zero}");
        }
    }

    #[test]
    fn conditions_say_what_holds_the_pool_and_keep_their_transition_time() {
        let nodes = [view("a", true, None)];
        let members: Vec<&NodeView> = nodes.iter().collect();
        // Weekend nights only; Monday noon UTC is outside.
        let gpu = pool(&[("1", Some(("0 22 * * 6,0", "8h")))]);
        let monday = ts("2026-11-30T12:00:00Z");
        let s = pool_status(
            &gpu,
            &members,
            &["x", "y"],
            Some("replacement never Ready"),
            None,
            monday,
        );
        let closed = condition(&s, "WindowClosed");
        assert_eq!(closed.status, "True");
        assert!(
            closed.message.contains("2026-12-05T22:00:00Z"),
            "{}",
            closed.message
        );
        assert_eq!(s.budget.as_deref(), Some("none (outside every schedule)"));
        assert_eq!(s.budget_until.as_deref(), Some("2026-12-05T22:00:00Z"));
        let overlap = condition(&s, "Overlap");
        assert!(
            overlap.message.starts_with("nodes x, y are also selected"),
            "{}",
            overlap.message
        );
        assert_eq!(condition(&s, "Halted").status, "True");
        // An hour later nothing changed: the same status, times kept.
        let later = pool_status(
            &gpu,
            &members,
            &["x", "y"],
            Some("replacement never Ready"),
            Some(&s),
            ts("2026-11-30T13:00:00Z"),
        );
        assert_eq!(later, s);
        // Saturday night the window opens: WindowClosed turns False, at that time.
        let saturday = ts("2026-12-05T23:00:00Z");
        let open = pool_status(&gpu, &members, &[], None, Some(&s), saturday);
        let closed = condition(&open, "WindowClosed");
        assert_eq!(
            (closed.status.as_str(), closed.last_transition_time.as_str()),
            ("False", "2026-12-05T23:00:00Z")
        );
        assert_eq!(open.budget.as_deref(), Some("1 of 1"));
        // Paused: a budget of 0 in force.
        let paused = pool_status(&pool(&[("0", None)]), &members, &[], None, None, monday);
        assert_eq!(condition(&paused, "Paused").status, "True");
        assert_eq!(paused.budget.as_deref(), Some("0 (paused)"));
    }
}
