//! From verdicts to actions, within budgets: which nodes to taint (already tainted ones count,
//! new ones oldest first, spread across zones), which taints to roll back (only before the drain
//! starts, never `manual` or foreign ones), which drained nodes to retire, and why every other
//! node is left alone. Pure: the same candidates and limits always give the same plan.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use jiff::Timestamp;
use rotor_core::DrainReason;
use rotor_core::contract::{DO_NOT_DISRUPT_ANNOTATION, SELECTED_AT_ANNOTATION};

use rotor_core::NodeBudget;

use crate::verdict::Verdict;

/// One node the selector considered, with its verdict and the drain state read from the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Node name.
    pub node: String,
    /// EC2 instance id (AWS provider).
    pub instance: Option<String>,
    /// Auto Scaling group name (AWS provider); the per-group budget applies to nodes with one.
    pub group: Option<String>,
    /// Availability zone, for spreading new taints.
    pub zone: Option<String>,
    /// When the node (or instance) was created; oldest are tainted first.
    pub created: Option<Timestamp>,
    /// The provider's verdict.
    pub verdict: Verdict,
    /// The value of the node's drain taint, when it has one (any value, any effect).
    pub current_taint: Option<String>,
    /// The drainer has started: `rotor.dev/phase` is present, whatever its value (`queued`
    /// included: the drainer has taken the node on).
    pub drain_started: bool,
    /// The node carries `rotor.dev/selected-at`, which a selector run writes with every taint
    /// it places: only such a taint may a run take back.
    pub selected_by_selector: bool,
    /// The node carries `rotor.dev/do-not-disrupt=true`.
    pub opted_out: bool,
    /// The drainer finished: the node's phase is `drained` or it carries `rotor.dev/drained-at`
    /// ([`DRAINED_AT_ANNOTATION`](rotor_core::contract::DRAINED_AT_ANNOTATION)).
    pub drained: bool,
}

/// The limits a plan stays within.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanLimits {
    /// Tainted nodes at once, including those already tainted; a percentage is of all candidates.
    pub max_tainted: NodeBudget,
    /// Tainted nodes at once per group, on top of `max_tainted`; a percentage is of the group's
    /// candidates.
    pub max_tainted_per_group: Option<NodeBudget>,
    /// Retire (terminate in its group) drained nodes, at most `max_tainted` per run.
    pub retire_drained: bool,
}

/// What to do with one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Put the drain taint on it, with the reason slug; `detail` goes into the detail annotation.
    Taint { reason: DrainReason, detail: String },
    /// Remove its drain taint: it is no longer out of date and the drain has not started.
    Untaint { why: String },
    /// Leave it as it is (tainted or not).
    Keep { why: String },
    /// Not eligible (opted out, or the provider could not judge it); left as it is.
    Skip { why: String },
    /// Terminate its instance in its group. The group replaces it, unless `shrink_group`: then
    /// the desired capacity is decremented, the replacement having been launched ahead
    /// ([`crate::provider::aws_group_surge`]).
    Retire { shrink_group: bool },
}

impl Action {
    /// `taint`, `untaint`, `keep`, `skip` or `retire`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Action::Taint { .. } => "taint",
            Action::Untaint { .. } => "untaint",
            Action::Keep { .. } => "keep",
            Action::Skip { .. } => "skip",
            Action::Retire { .. } => "retire",
        }
    }
}

/// A candidate and the action planned for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedNode {
    /// The node as considered.
    pub candidate: Candidate,
    /// What to do with it.
    pub action: Action,
}

/// Plans every candidate, in input order. Rules, per node:
/// - opted out → Skip; a skip verdict → Skip with its reason (an existing taint stays);
/// - tainted and drained, with `retire_drained` and an instance → Retire, oldest first, at most
///   `max_tainted` per run;
/// - tainted and current → Untaint, unless the taint is `manual` or not a rotor reason, or the
///   drain has started (then Keep);
/// - tainted and drifted → Keep;
/// - untainted and current → Keep;
/// - untainted and drifted → Taint while the budgets allow, else Keep with the budget that stops
///   it. Every tainted node (whatever its verdict) uses budget, including those untainted in this
///   plan: freed slots are used by the next run. New taints go oldest first, each next one from
///   the zone with the fewest tainted nodes so far (round-robin across zones).
pub fn plan(candidates: Vec<Candidate>, limits: &PlanLimits) -> Vec<PlannedNode> {
    let total = candidates.len();
    let max_tainted = limits.max_tainted.resolve(total);
    let mut actions: Vec<Option<Action>> = vec![None; total];
    let mut to_retire = Vec::new();
    let mut to_taint = Vec::new();

    for (index, candidate) in candidates.iter().enumerate() {
        let action = match (&candidate.verdict, &candidate.current_taint) {
            _ if candidate.opted_out => Some(Action::Skip {
                why: format!("node opted out ({DO_NOT_DISRUPT_ANNOTATION}=true)"),
            }),
            (Verdict::Skip { why }, _) => Some(Action::Skip {
                why: why.to_string(),
            }),
            (_, Some(_)) if candidate.drained && limits.retire_drained => {
                if candidate.instance.is_some() {
                    to_retire.push(index);
                    None
                } else {
                    Some(keep("drained, but there is no instance to retire"))
                }
            }
            (Verdict::Current, Some(taint)) => Some(rollback(taint, candidate)),
            (Verdict::Drifted { .. }, Some(taint)) => {
                Some(keep(format!("already tainted ({taint})")))
            }
            (Verdict::Current, None) => Some(keep("up to date")),
            (Verdict::Drifted { .. }, None) => {
                to_taint.push(index);
                None
            }
        };
        actions[index] = action;
    }

    // Retire, oldest first.
    to_retire.sort_by(|&a, &b| age_key(&candidates[a]).cmp(&age_key(&candidates[b])));
    for (position, &index) in to_retire.iter().enumerate() {
        actions[index] = Some(if position < max_tainted {
            Action::Retire {
                shrink_group: false,
            }
        } else {
            keep(format!(
                "budget: retire max-tainted {} reached",
                limits.max_tainted.describe(total)
            ))
        });
    }

    // New taints, within the global and per-group budgets.
    let tainted: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| c.current_taint.is_some())
        .collect();
    let mut slots = max_tainted.saturating_sub(tainted.len());
    let mut group_slots: BTreeMap<&str, (usize, String)> = BTreeMap::new();
    if let Some(per_group) = limits.max_tainted_per_group {
        let mut sizes: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for candidate in &candidates {
            if let Some(group) = candidate.group.as_deref() {
                let (size, tainted) = sizes.entry(group).or_default();
                *size += 1;
                *tainted += usize::from(candidate.current_taint.is_some());
            }
        }
        for (group, (size, tainted)) in sizes {
            let slots = per_group.resolve(size).saturating_sub(tainted);
            group_slots.insert(group, (slots, per_group.describe(size)));
        }
    }
    for index in taint_order(&candidates, &to_taint, &tainted) {
        let candidate = &candidates[index];
        let Verdict::Drifted { reason, detail } = &candidate.verdict else {
            unreachable!("only drifted candidates are queued for tainting");
        };
        let group = candidate
            .group
            .as_deref()
            .and_then(|g| group_slots.get_mut(g).map(|slot| (g, slot)));
        actions[index] = Some(match group {
            _ if slots == 0 => keep(format!(
                "budget: max-tainted {} reached",
                limits.max_tainted.describe(total)
            )),
            Some((name, (0, budget))) => keep(format!(
                "budget: max-tainted-per-group {budget} reached in group {name}"
            )),
            group => {
                slots -= 1;
                if let Some((_, (group_slots, _))) = group {
                    *group_slots -= 1;
                }
                Action::Taint {
                    reason: *reason,
                    detail: detail.clone(),
                }
            }
        });
    }

    candidates
        .into_iter()
        .zip(actions)
        .map(|(candidate, action)| PlannedNode {
            candidate,
            action: action.expect("every candidate gets an action"),
        })
        .collect()
}

/// Why a drain taint with this value is a person's, which the selector never removes:
/// `manual`, or a value that is not a rotor reason. `None` for one of the selector's reasons.
pub fn persons_taint(taint: &str) -> Option<String> {
    match taint.parse::<DrainReason>() {
        Ok(DrainReason::Manual) => {
            Some("taint reason manual is never removed by the selector".to_owned())
        }
        Err(_) => Some(format!(
            "taint value {taint:?} is not a rotor reason; left in place"
        )),
        Ok(_) => None,
    }
}

/// A tainted node that is no longer out of date. Rule: the selector takes back only a taint
/// a selector run placed (it carries `rotor.dev/selected-at`), never another tool's or a
/// person's, even with a rotor reason for its value.
fn rollback(taint: &str, candidate: &Candidate) -> Action {
    if let Some(why) = persons_taint(taint) {
        keep(why)
    } else if !candidate.selected_by_selector {
        keep(format!(
            "no longer out of date (was {taint}), but the taint was not placed by rotor-selector \
             (no {SELECTED_AT_ANNOTATION}); left in place"
        ))
    } else if candidate.drain_started {
        keep(format!(
            "no longer out of date (was {taint}), but the drain has started"
        ))
    } else {
        Action::Untaint {
            why: format!("no longer out of date (was {taint})"),
        }
    }
}

fn keep(why: impl Into<String>) -> Action {
    Action::Keep { why: why.into() }
}

/// Oldest first; unknown creation times last; then by node name.
fn age_key(candidate: &Candidate) -> (bool, Option<Timestamp>, &str) {
    (
        candidate.created.is_none(),
        candidate.created,
        candidate.node.as_str(),
    )
}

/// The order in which drifted, untainted candidates get taint slots: each step takes the oldest
/// remaining node of the zone with the fewest tainted nodes so far (already tainted ones included),
/// ties going to the zone whose next node is older.
fn taint_order(candidates: &[Candidate], queued: &[usize], tainted: &[&Candidate]) -> Vec<usize> {
    let mut zones: BTreeMap<Option<&str>, (usize, VecDeque<usize>)> = BTreeMap::new();
    for candidate in tainted {
        zones.entry(candidate.zone.as_deref()).or_default().0 += 1;
    }
    let mut queued = queued.to_vec();
    queued.sort_by(|&a, &b| age_key(&candidates[a]).cmp(&age_key(&candidates[b])));
    for index in queued {
        let zone = candidates[index].zone.as_deref();
        zones.entry(zone).or_default().1.push_back(index);
    }

    let mut order = Vec::new();
    loop {
        let next = zones
            .iter_mut()
            .filter_map(|(_, (load, queue))| {
                let head = *queue.front()?;
                Some((*load, age_key(&candidates[head]), load, queue))
            })
            .min_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let Some((_, _, load, queue)) = next else {
            break;
        };
        order.extend(queue.pop_front());
        *load += 1;
    }
    order
}

/// How many nodes get each action; `Display` is the one-line log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanSummary {
    pub taint: usize,
    pub untaint: usize,
    pub keep: usize,
    pub skip: usize,
    pub retire: usize,
}

/// Counts the actions of a plan.
pub fn summary(plan: &[PlannedNode]) -> PlanSummary {
    let mut summary = PlanSummary::default();
    for planned in plan {
        *match planned.action {
            Action::Taint { .. } => &mut summary.taint,
            Action::Untaint { .. } => &mut summary.untaint,
            Action::Keep { .. } => &mut summary.keep,
            Action::Skip { .. } => &mut summary.skip,
            Action::Retire { .. } => &mut summary.retire,
        } += 1;
    }
    summary
}

impl fmt::Display for PlanSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "plan: taint={} untaint={} keep={} skip={} retire={}",
            self.taint, self.untaint, self.keep, self.skip, self.retire
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::SkipReason;

    fn drifted() -> Verdict {
        Verdict::Drifted {
            reason: DrainReason::LaunchTemplateVersion,
            detail: "lt-0abc: instance version 3, group wants 5 ($Latest)".into(),
        }
    }

    /// A drifted, untainted node in `zone`, created `day` days into 2025 (older = smaller).
    fn node(name: &str, zone: &str, day: i64) -> Candidate {
        Candidate {
            node: name.into(),
            instance: Some(format!("i-{name}")),
            group: None,
            zone: Some(zone.into()),
            created: Some(
                Timestamp::from_second(1_735_689_600 + day * 86_400).expect("valid timestamp"),
            ),
            verdict: drifted(),
            current_taint: None,
            drain_started: false,
            selected_by_selector: false,
            opted_out: false,
            drained: false,
        }
    }

    fn limits(max_tainted: &str) -> PlanLimits {
        PlanLimits {
            max_tainted: max_tainted.parse().unwrap(),
            max_tainted_per_group: None,
            retire_drained: false,
        }
    }

    /// (node, action kind) for every planned node, in input order.
    fn kinds(plan: &[PlannedNode]) -> Vec<(&str, &str)> {
        plan.iter()
            .map(|p| (p.candidate.node.as_str(), p.action.kind()))
            .collect()
    }

    fn tainted_in_order(candidates: Vec<Candidate>, limits: &PlanLimits) -> Vec<String> {
        let order: Vec<usize> = {
            let queued: Vec<usize> = (0..candidates.len())
                .filter(|&i| candidates[i].current_taint.is_none())
                .collect();
            let tainted: Vec<&Candidate> = candidates
                .iter()
                .filter(|c| c.current_taint.is_some())
                .collect();
            taint_order(&candidates, &queued, &tainted)
        };
        let planned = plan(candidates, limits);
        order
            .into_iter()
            .filter(|&i| matches!(planned[i].action, Action::Taint { .. }))
            .map(|i| planned[i].candidate.node.clone())
            .collect()
    }

    #[test]
    fn oldest_first_within_count_budget() {
        let plan = plan(
            vec![
                node("n-new", "a", 40),
                node("n-oldest", "a", 1),
                node("n-mid", "a", 20),
                node("n-old", "a", 10),
            ],
            &limits("2"),
        );
        assert_eq!(
            kinds(&plan),
            [
                ("n-new", "keep"),
                ("n-oldest", "taint"),
                ("n-mid", "keep"),
                ("n-old", "taint"),
            ]
        );
        assert_eq!(
            plan[1].action,
            Action::Taint {
                reason: DrainReason::LaunchTemplateVersion,
                detail: "lt-0abc: instance version 3, group wants 5 ($Latest)".into()
            }
        );
        assert_eq!(
            plan[0].action,
            Action::Keep {
                why: "budget: max-tainted 2 reached".into()
            }
        );
    }

    #[test]
    fn percent_budget_rounds_up_and_counts_every_candidate() {
        // 25% of 5 candidates (the current one included) = 1.25 → 2.
        let mut current = node("current", "a", 0);
        current.verdict = Verdict::Current;
        let plan = plan(
            vec![
                node("d1", "a", 1),
                node("d2", "a", 2),
                node("d3", "a", 3),
                node("d4", "a", 4),
                current,
            ],
            &limits("25%"),
        );
        assert_eq!(
            kinds(&plan),
            [
                ("d1", "taint"),
                ("d2", "taint"),
                ("d3", "keep"),
                ("d4", "keep"),
                ("current", "keep"),
            ]
        );
        assert_eq!(
            plan[2].action,
            Action::Keep {
                why: "budget: max-tainted 25% (2 of 5 nodes) reached".into()
            }
        );
        assert_eq!(
            plan[4].action,
            Action::Keep {
                why: "up to date".into()
            }
        );
    }

    #[test]
    fn zero_budget_taints_nothing() {
        let plan = plan(vec![node("d1", "a", 1)], &limits("0"));
        assert_eq!(
            plan[0].action,
            Action::Keep {
                why: "budget: max-tainted 0 reached".into()
            }
        );
    }

    #[test]
    fn round_robin_across_zones_oldest_first() {
        let candidates = vec![
            node("a1", "us-east-1a", 1),
            node("a2", "us-east-1a", 2),
            node("a3", "us-east-1a", 3),
            node("b1", "us-east-1b", 5),
            node("b2", "us-east-1b", 6),
            node("c1", "us-east-1c", 4),
        ];
        assert_eq!(
            tainted_in_order(candidates.clone(), &limits("5")),
            ["a1", "c1", "b1", "a2", "b2"]
        );
        assert_eq!(
            kinds(&plan(candidates, &limits("3"))),
            [
                ("a1", "taint"),
                ("a2", "keep"),
                ("a3", "keep"),
                ("b1", "taint"),
                ("b2", "keep"),
                ("c1", "taint"),
            ]
        );
    }

    #[test]
    fn already_tainted_count_and_weigh_on_their_zone() {
        let mut tainted = node("a-tainted", "us-east-1a", 30);
        tainted.current_taint = Some("launch-template-version".into());
        tainted.selected_by_selector = true;
        let candidates = vec![
            tainted,
            node("a1", "us-east-1a", 1),
            node("b1", "us-east-1b", 10),
            node("b2", "us-east-1b", 11),
        ];
        // Zone a already has one tainted node, so zone b goes first despite a1 being oldest.
        assert_eq!(
            tainted_in_order(candidates.clone(), &limits("10")),
            ["b1", "a1", "b2"]
        );
        let plan = plan(candidates, &limits("2"));
        assert_eq!(
            kinds(&plan),
            [
                ("a-tainted", "keep"),
                ("a1", "keep"),
                ("b1", "taint"),
                ("b2", "keep"),
            ]
        );
        assert_eq!(
            plan[0].action,
            Action::Keep {
                why: "already tainted (launch-template-version)".into()
            }
        );
    }

    #[test]
    fn unknown_zone_and_creation_time_sort_last() {
        let mut no_zone = node("no-zone", "x", 1);
        no_zone.zone = None;
        let mut no_time = node("no-time", "a", 0);
        no_time.created = None;
        let candidates = vec![no_time, node("a1", "a", 5), no_zone];
        assert_eq!(
            tainted_in_order(candidates, &limits("3")),
            ["no-zone", "a1", "no-time"]
        );
    }

    #[test]
    fn a_taint_with_a_rotor_reason_that_no_selector_run_placed_is_not_taken_back() {
        // Another tool (a script, a second selector) tainted the node with a rotor reason,
        // without rotor.dev/selected-at: this run judges the node up to date but leaves it.
        let mut theirs = node("theirs", "a", 1);
        theirs.verdict = Verdict::Current;
        theirs.current_taint = Some("kubelet-version".into());
        let mut ours = theirs.clone();
        ours.node = "ours".into();
        ours.selected_by_selector = true;
        let plan = plan(vec![theirs, ours], &limits("10"));
        assert_eq!(
            plan[0].action,
            keep(
                "no longer out of date (was kubelet-version), but the taint was not placed by \
                 rotor-selector (no rotor.dev/selected-at); left in place"
            )
        );
        assert_eq!(
            plan[1].action,
            Action::Untaint {
                why: "no longer out of date (was kubelet-version)".into()
            }
        );
    }

    #[test]
    fn rollback_untaints_unless_started_manual_or_foreign() {
        let tainted = |name: &str, value: &str, started: bool| {
            let mut c = node(name, "a", 1);
            c.verdict = Verdict::Current;
            c.current_taint = Some(value.into());
            c.selected_by_selector = true;
            c.drain_started = started;
            c.selected_by_selector = true;
            c
        };
        let plan = plan(
            vec![
                tainted("rollback", "launch-template-version", false),
                tainted("started", "image", true),
                tainted("manual", "manual", false),
                tainted("manual-started", "manual", true),
                tainted("foreign", "because-i-said-so", false),
                tainted("empty", "", false),
            ],
            &limits("10"),
        );
        let actions: Vec<&Action> = plan.iter().map(|p| &p.action).collect();
        assert_eq!(
            actions,
            [
                &Action::Untaint {
                    why: "no longer out of date (was launch-template-version)".into()
                },
                &Action::Keep {
                    why: "no longer out of date (was image), but the drain has started".into()
                },
                &Action::Keep {
                    why: "taint reason manual is never removed by the selector".into()
                },
                &Action::Keep {
                    why: "taint reason manual is never removed by the selector".into()
                },
                &Action::Keep {
                    why: "taint value \"because-i-said-so\" is not a rotor reason; left in place"
                        .into()
                },
                &Action::Keep {
                    why: "taint value \"\" is not a rotor reason; left in place".into()
                },
            ]
        );
    }

    #[test]
    fn untainted_nodes_still_use_budget_this_run() {
        let mut rolled_back = node("rolled-back", "a", 1);
        rolled_back.verdict = Verdict::Current;
        rolled_back.current_taint = Some("image".into());
        rolled_back.selected_by_selector = true;
        let plan = plan(vec![rolled_back, node("d1", "b", 2)], &limits("1"));
        assert_eq!(kinds(&plan), [("rolled-back", "untaint"), ("d1", "keep")]);
    }

    #[test]
    fn opted_out_and_skipped_nodes_are_skipped_with_reason() {
        let mut opted_out = node("opted-out", "a", 1);
        opted_out.opted_out = true;
        let mut opted_out_tainted = node("opted-out-tainted", "a", 1);
        opted_out_tainted.opted_out = true;
        opted_out_tainted.current_taint = Some("launch-template".into());
        opted_out_tainted.selected_by_selector = true;
        let mut standby = node("standby", "a", 1);
        standby.verdict = Verdict::skip(SkipReason::NotInService {
            state: "Standby".into(),
        });
        standby.current_taint = Some("launch-template".into());
        standby.selected_by_selector = true;
        let plan = plan(
            vec![
                opted_out,
                opted_out_tainted,
                standby,
                node("d1", "a", 5),
                node("d2", "b", 6),
            ],
            &limits("3"),
        );
        assert_eq!(
            plan[0].action,
            Action::Skip {
                why: "node opted out (rotor.dev/do-not-disrupt=true)".into()
            }
        );
        assert_eq!(plan[1].action, plan[0].action);
        assert_eq!(
            plan[2].action,
            Action::Skip {
                why: "instance is Standby, not InService".into()
            }
        );
        // Two tainted nodes (one opted out, one skipped) use two of the three slots; both are in
        // zone a, so the last slot goes to zone b.
        assert_eq!(kinds(&plan)[3..], [("d1", "keep"), ("d2", "taint")]);
    }

    #[test]
    fn per_group_limit_applies_on_top() {
        let in_group = |name: &str, group: &str, zone: &str, day: i64| {
            let mut c = node(name, zone, day);
            c.group = Some(group.into());
            c
        };
        let mut g1_tainted = in_group("g1-tainted", "g1", "a", 50);
        g1_tainted.current_taint = Some("image".into());
        g1_tainted.selected_by_selector = true;
        let candidates = vec![
            g1_tainted,
            in_group("g1-a", "g1", "a", 1),
            in_group("g1-b", "g1", "b", 2),
            in_group("g1-c", "g1", "c", 3),
            in_group("g2-a", "g2", "a", 4),
            in_group("g2-b", "g2", "b", 5),
            in_group("g2-c", "g2", "c", 6),
            node("ungrouped", "c", 7),
        ];
        let mut limits = limits("10");
        limits.max_tainted_per_group = Some(NodeBudget::Count(2));
        // Zone a already has g1-tainted, so zones b and c come first: g1-b, g1-c (group full),
        // g1-a (group full), g2-b, g2-c, g2-a (group full), ungrouped.
        let planned = plan(candidates.clone(), &limits);
        assert_eq!(
            kinds(&planned),
            [
                ("g1-tainted", "keep"),
                ("g1-a", "keep"),
                ("g1-b", "taint"),
                ("g1-c", "keep"),
                ("g2-a", "keep"),
                ("g2-b", "taint"),
                ("g2-c", "taint"),
                ("ungrouped", "taint"),
            ]
        );
        assert_eq!(
            planned[1].action,
            Action::Keep {
                why: "budget: max-tainted-per-group 2 reached in group g1".into()
            }
        );

        // 50% of g1's 4 nodes = 2, of g2's 3 nodes = 1.5 → 2; the global budget still applies.
        limits.max_tainted = NodeBudget::Count(3);
        limits.max_tainted_per_group = Some(NodeBudget::Percent(50));
        let planned = plan(candidates, &limits);
        assert_eq!(
            kinds(&planned),
            [
                ("g1-tainted", "keep"),
                ("g1-a", "keep"),
                ("g1-b", "taint"),
                ("g1-c", "keep"),
                ("g2-a", "keep"),
                ("g2-b", "taint"),
                ("g2-c", "keep"),
                ("ungrouped", "keep"),
            ]
        );
        assert_eq!(
            planned[3].action,
            Action::Keep {
                why: "budget: max-tainted-per-group 50% (2 of 4 nodes) reached in group g1".into()
            }
        );
        assert_eq!(
            planned[4].action,
            Action::Keep {
                why: "budget: max-tainted 3 reached".into()
            }
        );
    }

    #[test]
    fn retire_drained_nodes_oldest_first_within_budget() {
        let drained = |name: &str, day: i64, verdict: Verdict| {
            let mut c = node(name, "a", day);
            c.verdict = verdict;
            c.current_taint = Some("launch-template-version".into());
            c.selected_by_selector = true;
            c.drain_started = true;
            c.drained = true;
            c
        };
        let mut no_instance = drained("no-instance", 0, drifted());
        no_instance.instance = None;
        let candidates = vec![
            drained("young", 9, drifted()),
            drained("old", 1, drifted()),
            drained("current", 2, Verdict::Current),
            no_instance,
        ];
        let mut limits = limits("2");
        limits.retire_drained = true;
        let planned = plan(candidates.clone(), &limits);
        assert_eq!(
            kinds(&planned),
            [
                ("young", "keep"),
                ("old", "retire"),
                ("current", "retire"),
                ("no-instance", "keep"),
            ]
        );
        assert_eq!(
            planned[0].action,
            Action::Keep {
                why: "budget: retire max-tainted 2 reached".into()
            }
        );
        assert_eq!(
            planned[3].action,
            Action::Keep {
                why: "drained, but there is no instance to retire".into()
            }
        );

        limits.retire_drained = false;
        let planned = plan(candidates, &limits);
        assert_eq!(
            kinds(&planned),
            [
                ("young", "keep"),
                ("old", "keep"),
                ("current", "keep"),
                ("no-instance", "keep"),
            ]
        );
        assert_eq!(
            planned[2].action,
            Action::Keep {
                why:
                    "no longer out of date (was launch-template-version), but the drain has started"
                        .into()
            }
        );
    }

    #[test]
    fn summary_counts_actions() {
        let mut current = node("current", "a", 1);
        current.verdict = Verdict::Current;
        let mut rollback = node("rollback", "a", 1);
        rollback.verdict = Verdict::Current;
        rollback.current_taint = Some("image".into());
        rollback.selected_by_selector = true;
        let mut opted_out = node("opted-out", "a", 1);
        opted_out.opted_out = true;
        let mut drained = node("drained", "a", 1);
        drained.current_taint = Some("image".into());
        drained.selected_by_selector = true;
        drained.drained = true;
        let mut limits = limits("4");
        limits.retire_drained = true;
        let planned = plan(
            vec![
                node("d1", "a", 1),
                node("d2", "b", 2),
                node("d3", "c", 3),
                current,
                rollback,
                opted_out,
                drained,
            ],
            &limits,
        );
        let counts = summary(&planned);
        assert_eq!(
            counts,
            PlanSummary {
                taint: 2,
                untaint: 1,
                keep: 2,
                skip: 1,
                retire: 1
            }
        );
        assert_eq!(
            counts.to_string(),
            "plan: taint=2 untaint=1 keep=2 skip=1 retire=1"
        );
        assert_eq!(
            summary(&[]).to_string(),
            "plan: taint=0 untaint=0 keep=0 skip=0 retire=0"
        );
    }
}
