//! Per-pool policy, as the loop over nodes decides with it: each `RotationPolicy` read into a
//! [`Pool`], which pool governs a node ([`Pools::assign`]), and how many of a pool's nodes may
//! be disrupted now ([`allowance`]). Pure: the policies come from a watch (`pools_io.rs`).
//!
//! The rules, stated once here and in docs/policy.md:
//! - A node follows the selecting policy of highest `priority`; several at the highest is an
//!   overlap, which holds the node (never guessed). A node no policy selects follows the flags.
//! - Of a pool's budgets, those whose `reasons` are empty or name the node's drain reason apply.
//!   While one or more applying scheduled budgets are active, the tightest of them is in force;
//!   outside every scheduled budget, the tightest budget without a schedule; with none, the pool
//!   is closed (a schedule allows; it never leaves unbounded disruption outside it).
//! - A percentage is of the pool's nodes, rounded up; `nodes: 0` pauses the pool.
//! - A policy that cannot be read (a schedule that never fires, an unknown time zone, settings
//!   that contradict the flags) holds its nodes and says why: fail closed.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use rotor_apimachinery::labels::LabelSelector;
use rotor_core::NodeBudget;
use rotor_policy::{PolicyBudget, PoolDrainSettings, RotationPolicy, RotationPolicyStatus};

use crate::drain::shared::DrainSettings;
use crate::fleet::node_labels::{LabelKeys, NodeLabels};
use crate::fleet::window::MaintenanceWindow;

/// Which pool governs a node.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum PoolRef {
    /// No policy selects it: the drainer's flags are its policy.
    #[default]
    Flags,
    /// The RotationPolicy of this name.
    Policy(String),
    /// Several policies select it at the same, highest priority (their names, sorted).
    Overlap(Vec<String>),
}

impl PoolRef {
    /// The pools whose budgets a node of this pool counts in. Rule: a node several policies
    /// select counts in each of them: it starts no drain of its own, but one under way when the
    /// policies came to overlap (or a node cordoned or not ready) still disrupts each pool, and
    /// must not free a slot in any.
    pub fn counted_in(&self) -> Vec<PoolRef> {
        match self {
            PoolRef::Overlap(names) => names.iter().cloned().map(PoolRef::Policy).collect(),
            pool => vec![pool.clone()],
        }
    }

    /// The policy's name, for a node one policy governs.
    pub fn policy(&self) -> Option<&str> {
        match self {
            PoolRef::Policy(name) => Some(name),
            _ => None,
        }
    }
}

impl fmt::Display for PoolRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolRef::Flags => f.write_str("the drainer's flags"),
            PoolRef::Policy(name) => write!(f, "RotationPolicy {name}"),
            PoolRef::Overlap(names) => write!(f, "RotationPolicies {}", names.join(", ")),
        }
    }
}

/// One budget of a pool, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    pub nodes: NodeBudget,
    /// When it is active; `None`: always (an unscheduled budget).
    pub schedule: Option<MaintenanceWindow>,
    /// The drain reasons it applies to; every reason when empty.
    pub reasons: Vec<String>,
}

impl Budget {
    /// Whether this budget, one of the pool's `budgets`, applies to a drain of `reason`. `None`
    /// (what a pool's status shows when no node of it waits): the budgets for any reason,
    /// those without `reasons`, or every budget when each names reasons. A reason-limited
    /// pause (`{nodes: "0", reasons: [max-age]}`) does not make an idle pool read as paused.
    fn applies_to(&self, reason: Option<&str>, budgets: &[Budget]) -> bool {
        match reason {
            Some(reason) => self.reasons.is_empty() || self.reasons.iter().any(|r| r == reason),
            None => self.reasons.is_empty() || budgets.iter().all(|b| !b.reasons.is_empty()),
        }
    }
}

/// A pool's drain settings, read; `None` follows the flag.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolDrain {
    pub timeout: Option<Duration>,
    pub force_after: Option<Duration>,
    pub max_grace_period: Option<Duration>,
    pub require_approval: Option<bool>,
    pub restart_single_replica: Option<bool>,
    pub surge: Option<bool>,
    /// `Some(ZERO)`: never park.
    pub park_after: Option<Duration>,
}

/// How long a policy's drain stays blocked by what only a person can clear before it is parked,
/// when neither the policy nor `--park-blocked-after` says.
pub const POLICY_PARK_AFTER: Duration = Duration::from_secs(15 * 60);

impl PoolDrain {
    /// The drain settings of a node of this pool: the pool's where it sets them, else `base`
    /// (the flags').
    pub fn over(&self, base: &DrainSettings) -> DrainSettings {
        let mut settings = base.clone();
        settings.drain_timeout = self.timeout.unwrap_or(base.drain_timeout);
        settings.force_after = self.force_after.or(base.force_after);
        if let Some(cap) = self.max_grace_period {
            settings.options.max_grace_period = Some(cap.as_secs() as i64);
        }
        settings.restart_single_replica = self
            .restart_single_replica
            .unwrap_or(base.restart_single_replica);
        // A pool parks stuck nodes unless it says not to: one stuck node must not hold it.
        settings.park_after = match self.park_after {
            Some(after) if after.is_zero() => None,
            Some(after) => Some(after),
            None => base.park_after.or(Some(POLICY_PARK_AFTER)),
        };
        settings
    }
}

/// What a drain of a policy's node runs with: the policy's name, its drain settings and
/// whether it makes room first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainPolicy {
    pub name: String,
    pub drain: PoolDrain,
    pub surge: bool,
}

/// A RotationPolicy, read.
#[derive(Clone, Debug)]
pub struct Pool {
    pub name: String,
    pub generation: Option<i64>,
    pub selector: LabelSelector,
    pub priority: i32,
    pub budgets: Vec<Budget>,
    pub drain: PoolDrain,
    /// Why the policy cannot be followed, when it cannot: its nodes are held.
    pub invalid: Option<String>,
    /// The status as the cluster holds it (as last written, by any replica), to tell whether
    /// it is out of date.
    pub stored_status: Option<RotationPolicyStatus>,
}

impl Pool {
    /// Reads a policy. What does not read makes the pool invalid (its nodes held) rather than
    /// an error: its selector still says which nodes it holds.
    pub fn read(policy: &RotationPolicy) -> Pool {
        let name = policy.metadata.name.clone().unwrap_or_default();
        let spec = &policy.spec;
        let mut problems = Vec::new();
        let selector = spec.node_selector.to_selector().unwrap_or_else(|e| {
            problems.push(format!("nodeSelector: {e}"));
            // Holds every node while it cannot say which it governs.
            LabelSelector::everything()
        });
        let budgets = spec
            .budgets
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                read_budget(b)
                    .map_err(|e| problems.push(format!("budgets[{i}]: {e}")))
                    .ok()
            })
            .collect();
        let drain = spec
            .drain
            .as_ref()
            .map(read_drain)
            .transpose()
            .unwrap_or_else(|e| {
                problems.push(format!("drain: {e}"));
                None
            })
            .unwrap_or_default();
        Pool {
            name,
            generation: policy.metadata.generation,
            selector,
            priority: spec.priority,
            budgets,
            drain,
            invalid: (!problems.is_empty()).then(|| problems.join("; ")),
            stored_status: policy.status.clone(),
        }
    }
}

/// What a pool's drain settings fall back to (the flags), and what this drainer can do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlagDrain {
    /// `--drain-timeout`.
    pub drain_timeout: Duration,
    /// `--force-after`.
    pub force_after: Option<Duration>,
    /// `--surge-timeout` when the drainer runs with `--surge` (its placeholders' PriorityClass
    /// checked at start-up); `None` without.
    pub surge_timeout: Option<Duration>,
}

impl Pool {
    /// Checks the pool's settings together with the flags they fall back to; what contradicts
    /// makes the pool invalid (its nodes held), as the flags' own validation would refuse it.
    pub fn check_against(&mut self, flags: &FlagDrain) {
        let mut problems: Vec<String> = self.invalid.take().into_iter().collect();
        let timeout = self.drain.timeout.unwrap_or(flags.drain_timeout);
        let force_after = self.drain.force_after.or(flags.force_after);
        if let Some(force_after) = force_after
            && force_after >= timeout
        {
            problems.push(format!(
                "drain: forceAfter ({}s) is not shorter than timeout ({}s), counting the flags it falls back to",
                force_after.as_secs(),
                timeout.as_secs()
            ));
        }
        // Only the policy's own park time: the flag's, or the default, over a policy's shorter
        // timeout is nobody's choice for this pool (its drains just never park), and must not
        // hold a pool its author never set it for.
        if let Some(park_after) = self.drain.park_after
            && !park_after.is_zero()
            && park_after >= timeout
        {
            problems.push(format!(
                "drain: parkBlockedAfter ({}s) is not shorter than timeout ({}s), counting the flags it falls back to: the drain fails at its deadline before it could park (\"0s\" turns parking off)",
                park_after.as_secs(),
                timeout.as_secs()
            ));
        }
        match (self.surges(flags), flags.surge_timeout) {
            (true, None) => problems.push(
                "drain.surge is true, but rotor-drainer runs without --surge (which checks the placeholders' PriorityClass at start-up): start it with --surge, or set surge: false".into(),
            ),
            (true, Some(surge_timeout)) if surge_timeout >= timeout => problems.push(format!(
                "drain: timeout ({}s) must be longer than the drainer's --surge-timeout ({}s)",
                timeout.as_secs(),
                surge_timeout.as_secs()
            )),
            _ => {}
        }
        self.invalid = (!problems.is_empty()).then(|| problems.join("; "));
    }

    /// Whether the pool's drains make room first: its `drain.surge`, else the drainer's `--surge`.
    pub fn surges(&self, flags: &FlagDrain) -> bool {
        self.drain.surge.unwrap_or(flags.surge_timeout.is_some())
    }
}

fn read_budget(b: &PolicyBudget) -> Result<Budget, String> {
    let nodes: NodeBudget = b.nodes.parse().map_err(|e| format!("nodes: {e}"))?;
    let schedule = match (&b.schedule, &b.duration) {
        (Some(schedule), Some(duration)) => {
            let zone = b
                .time_zone
                .as_deref()
                .map(|z| format!(" in {z}"))
                .unwrap_or_default();
            let window: MaintenanceWindow = format!("{schedule} for {duration}{zone}")
                .parse()
                .map_err(|e: crate::fleet::window::ParseWindowError| e.problem)?;
            Some(window)
        }
        (None, None) if b.time_zone.is_none() => None,
        _ => return Err("schedule and duration go together, and timeZone needs them".into()),
    };
    Ok(Budget {
        nodes,
        schedule,
        reasons: b.reasons.clone(),
    })
}

fn read_drain(d: &PoolDrainSettings) -> Result<PoolDrain, String> {
    let duration = |field: &str, value: &Option<String>| {
        value
            .as_deref()
            .map(|v| {
                rotor_core::parse_duration(v)
                    .map_err(|e| format!("{field}: {e}"))
                    .and_then(|d| {
                        (!d.is_zero())
                            .then_some(d)
                            .ok_or_else(|| format!("{field} must be more than 0"))
                    })
            })
            .transpose()
    };
    Ok(PoolDrain {
        timeout: duration("timeout", &d.timeout)?,
        force_after: duration("forceAfter", &d.force_after)?,
        max_grace_period: duration("maxGracePeriod", &d.max_grace_period)?,
        require_approval: d.require_approval,
        restart_single_replica: d.restart_single_replica,
        surge: d.surge,
        // "0s" is allowed here: it turns parking off.
        park_after: d
            .park_blocked_after
            .as_deref()
            .map(|v| rotor_core::parse_duration(v).map_err(|e| format!("parkBlockedAfter: {e}")))
            .transpose()?,
    })
}

/// Every policy the drainer knows, by name.
#[derive(Clone, Debug, Default)]
pub struct Pools {
    pools: BTreeMap<String, Pool>,
}

/// No policy at all: every node follows the flags.
pub static NO_POLICIES: Pools = Pools {
    pools: BTreeMap::new(),
};

impl Pools {
    pub fn new(pools: impl IntoIterator<Item = Pool>) -> Pools {
        Pools {
            pools: pools.into_iter().map(|p| (p.name.clone(), p)).collect(),
        }
    }

    pub fn insert(&mut self, pool: Pool) {
        self.pools.insert(pool.name.clone(), pool);
    }

    pub fn remove(&mut self, name: &str) {
        self.pools.remove(name);
    }

    pub fn get(&self, name: &str) -> Option<&Pool> {
        self.pools.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Pool> {
        self.pools.values()
    }

    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }

    /// The label keys the policies' selectors read, the policies that cannot be followed
    /// included: their selectors still say which nodes they hold.
    pub fn label_keys(&self) -> LabelKeys {
        LabelKeys::Only(
            self.pools
                .values()
                .flat_map(|p| p.selector.requirements())
                .map(|r| r.key().to_string())
                .collect(),
        )
    }

    /// The pool that governs a node with these labels: the selecting policy of highest
    /// priority; an overlap when several share it; the flags when none selects it.
    pub fn assign(&self, labels: &NodeLabels) -> PoolRef {
        let names = rotor_policy::highest_priority(
            self.pools
                .values()
                .filter(|p| p.selector.matches_lookup(|key| labels.get(key)))
                .map(|p| (p.name.as_str(), p.priority)),
        );
        match names.as_slice() {
            [] => PoolRef::Flags,
            [one] => PoolRef::Policy((*one).to_string()),
            _ => PoolRef::Overlap(names.iter().map(ToString::to_string).collect()),
        }
    }
}

/// How many of a pool's nodes may be unavailable now, for one drain reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowance {
    /// The budget in force; `None` when the pool is closed (outside every scheduled budget,
    /// with none unscheduled, or no budget applies to the reason).
    pub budget: Option<NodeBudget>,
    /// What it comes to for the pool's size.
    pub allowed: usize,
    /// When this changes next (a scheduled budget starts or ends), when a schedule decides.
    pub until: Option<Timestamp>,
}

impl Allowance {
    /// Whether the budget in force lets no node go (`0` or `0%`), whatever the pool's size: the
    /// pool is paused. (A pool of no nodes is allowed 0 under any budget, and is not paused.)
    pub fn paused(&self) -> bool {
        self.budget.is_some_and(|b| b.lets_none())
    }

    /// The budget as an operator reads it: `1 of 12`, `20% = 3 of 12`, `0 (paused)`,
    /// `none (outside every schedule)`.
    pub fn shown(&self, total: usize) -> String {
        match self.budget {
            None => "none (outside every schedule)".into(),
            Some(_) if self.paused() => "0 (paused)".into(),
            Some(NodeBudget::Count(_)) => format!("{} of {total}", self.allowed),
            Some(NodeBudget::Percent(p)) => format!("{p}% = {} of {total}", self.allowed),
        }
    }
}

/// Which of `budgets` are in force at `now` for a drain of `reason`, by index: the scheduled
/// ones open now, or with none open the unscheduled ones (see the rules atop this file).
pub fn in_force(budgets: &[Budget], reason: Option<&str>, now: Timestamp) -> Vec<usize> {
    let applying = || {
        budgets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.applies_to(reason, budgets))
    };
    let open: Vec<usize> = applying()
        .filter(|(_, b)| b.schedule.as_ref().is_some_and(|w| w.is_open(now)))
        .map(|(i, _)| i)
        .collect();
    if !open.is_empty() {
        return open;
    }
    applying()
        .filter(|(_, b)| b.schedule.is_none())
        .map(|(i, _)| i)
        .collect()
}

/// The budget in force for a node of a pool of `total` nodes whose drain reason is `reason`
/// (see the rules atop this file). Ties between budgets resolving to the same count keep the
/// first written.
pub fn allowance(
    budgets: &[Budget],
    reason: Option<&str>,
    total: usize,
    now: Timestamp,
) -> Allowance {
    let applying: Vec<&Budget> = budgets
        .iter()
        .filter(|b| b.applies_to(reason, budgets))
        .collect();
    let in_force: Vec<&Budget> = in_force(budgets, reason, now)
        .into_iter()
        .map(|i| &budgets[i])
        .collect();
    // The next change: an active schedule closing, or an inactive one opening.
    let until = applying
        .iter()
        .filter_map(|b| b.schedule.as_ref())
        .filter_map(|w| match w.closes_at(now) {
            Some(end) => Some(end),
            None => w.next_open(now),
        })
        .min();
    let tightest = in_force
        .iter()
        .min_by_key(|b| b.nodes.resolve(total))
        .map(|b| b.nodes);
    Allowance {
        budget: tightest,
        allowed: tightest.map_or(0, |b| b.resolve(total)),
        until,
    }
}

/// For tests: a policy over every node, one node at a time.
#[cfg(test)]
pub(crate) fn one_node_at_a_time(name: &str) -> Pool {
    Pool::read(&RotationPolicy::new(
        name,
        rotor_policy::RotationPolicySpec {
            node_selector: Default::default(),
            priority: 0,
            budgets: vec![PolicyBudget {
                nodes: "1".into(),
                ..Default::default()
            }],
            drain: None,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rotor_policy::{LabelRequirement, RotationPolicySpec, SelectorOperator};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn budget(nodes: &str, schedule: Option<&str>, reasons: &[&str]) -> Budget {
        Budget {
            nodes: nodes.parse().unwrap(),
            schedule: schedule.map(|s| s.parse().unwrap()),
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
        }
    }

    fn policy(name: &str, priority: i32, labels: &[(&str, &str)]) -> RotationPolicy {
        let mut p = RotationPolicy::new(
            name,
            RotationPolicySpec {
                node_selector: Default::default(),
                priority,
                budgets: vec![PolicyBudget {
                    nodes: "1".into(),
                    ..Default::default()
                }],
                drain: None,
            },
        );
        p.spec.node_selector.match_labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        p
    }

    fn labels(pairs: &[(&str, &str)]) -> NodeLabels {
        NodeLabels::of_pairs(pairs)
    }

    #[test]
    fn percentages_round_up_and_the_tightest_unscheduled_budget_applies() {
        let budgets = [budget("20%", None, &[]), budget("3", None, &[])];
        let now = ts("2026-11-28T12:00:00Z");
        // 20% of 12 is 2.4: 3 nodes, as Karpenter rounds.
        let a = allowance(&budgets, Some("image"), 12, now);
        assert_eq!((a.budget, a.allowed), (Some(NodeBudget::Percent(20)), 3));
        assert_eq!(a.shown(12), "20% = 3 of 12");
        // 20% of 4 is 0.8: 1 node, tighter than 3.
        let a = allowance(&budgets, Some("image"), 4, now);
        assert_eq!((a.allowed, a.until), (1, None));
        // 10% of 1 node is 1, never 0.
        assert_eq!(
            allowance(&[budget("10%", None, &[])], Some("x"), 1, now).allowed,
            1
        );
        assert_eq!(
            allowance(&[budget("0", None, &[])], Some("x"), 5, now).shown(5),
            "0 (paused)"
        );
    }

    #[test]
    fn a_schedule_allows_inside_it_and_outside_every_schedule_the_unscheduled_budgets_apply() {
        // A freeze on weekdays 08:00-18:00 Berlin time; otherwise 2 at a time.
        let budgets = [
            budget("0", Some("0 8 * * 1-5 for 10h in Europe/Berlin"), &[]),
            budget("2", None, &[]),
        ];
        // Friday 2026-11-27 10:00 Berlin (09:00 UTC): the freeze is active and in force,
        // though the unscheduled budget is looser.
        let a = allowance(&budgets, Some("image"), 10, ts("2026-11-27T09:00:00Z"));
        assert_eq!((a.allowed, a.shown(10).as_str()), (0, "0 (paused)"));
        assert_eq!(a.until, Some(ts("2026-11-27T17:00:00Z")));
        // Friday 19:00 Berlin: outside, the unscheduled budget; until Monday 08:00 Berlin.
        let a = allowance(&budgets, Some("image"), 10, ts("2026-11-27T18:00:00Z"));
        assert_eq!(a.allowed, 2);
        assert_eq!(a.until, Some(ts("2026-11-30T07:00:00Z")));
    }

    #[test]
    fn with_only_scheduled_budgets_the_pool_is_closed_outside_them() {
        // A GPU pool: one node at a time on Saturday and Sunday nights, 22:00 for 8h.
        let budgets = [budget(
            "1",
            Some("0 22 * * 6,0 for 8h in America/New_York"),
            &[],
        )];
        // Saturday 2026-11-28 23:00 New York (04:00 UTC Sunday): open.
        let a = allowance(&budgets, Some("image"), 4, ts("2026-11-29T04:00:00Z"));
        assert_eq!((a.allowed, a.until), (1, Some(ts("2026-11-29T11:00:00Z"))));
        // Monday noon: closed until Saturday 22:00 New York.
        let a = allowance(&budgets, Some("image"), 4, ts("2026-11-30T17:00:00Z"));
        assert_eq!((a.budget, a.allowed), (None, 0));
        assert_eq!(a.shown(4), "none (outside every schedule)");
        assert_eq!(a.until, Some(ts("2026-12-06T03:00:00Z")));
    }

    #[test]
    fn schedules_follow_their_zone_across_daylight_saving_changes() {
        // 02:30 every night for 1h in Berlin. On 2026-03-29 02:30 does not exist (clocks go
        // from 02:00 to 03:00); on 2026-10-25 it happens twice.
        let budgets = [budget("1", Some("30 2 * * * for 1h in Europe/Berlin"), &[])];
        // Summer: 02:30 CEST is 00:30 UTC.
        assert_eq!(
            allowance(&budgets, Some("x"), 3, ts("2026-07-01T00:45:00Z")).allowed,
            1
        );
        assert_eq!(
            allowance(&budgets, Some("x"), 3, ts("2026-07-01T01:45:00Z")).allowed,
            0
        );
        // Winter: 02:30 CET is 01:30 UTC.
        assert_eq!(
            allowance(&budgets, Some("x"), 3, ts("2026-12-01T01:45:00Z")).allowed,
            1
        );
        assert_eq!(
            allowance(&budgets, Some("x"), 3, ts("2026-12-01T00:45:00Z")).allowed,
            0
        );
        // The spring gap: whatever the cron library does with the missing 02:30, the budget
        // is never open for more than its hour around it, and opens again the next night.
        let open_minutes = (0..24 * 60)
            .filter(|m| {
                let at = ts("2026-03-28T22:00:00Z") + jiff::SignedDuration::from_mins(*m);
                allowance(&budgets, Some("x"), 3, at).allowed == 1
            })
            .count();
        assert!(open_minutes <= 60, "{open_minutes}");
        assert_eq!(
            allowance(&budgets, Some("x"), 3, ts("2026-03-30T00:45:00Z")).allowed,
            1
        );
    }

    #[test]
    fn budgets_apply_by_drain_reason() {
        // Drift one at a time; age-based rotation paused.
        let budgets = [budget("0", None, &["max-age"]), budget("1", None, &[])];
        let now = ts("2026-11-28T12:00:00Z");
        assert_eq!(allowance(&budgets, Some("max-age"), 5, now).allowed, 0);
        assert_eq!(
            allowance(&budgets, Some("launch-template"), 5, now).allowed,
            1
        );
        // No budget for the reason: closed.
        let a = allowance(&[budget("2", None, &["image"])], Some("manual"), 5, now);
        assert_eq!(a.budget, None);
        // No node waits (the status of an idle pool): the budgets for any reason, so the
        // pause of age-based rotation does not show the pool as paused.
        let idle = allowance(&budgets, None, 5, now);
        assert_eq!((idle.allowed, idle.paused()), (1, false));
        // Every budget names reasons: they all count, the tightest shown.
        let only_limited = [
            budget("0", None, &["max-age"]),
            budget("2", None, &["image"]),
        ];
        assert_eq!(allowance(&only_limited, None, 5, now).allowed, 0);
    }

    #[test]
    fn the_highest_priority_wins_and_a_tie_is_an_overlap_never_a_guess() {
        let pools = Pools::new([
            Pool::read(&policy("all", 0, &[])),
            Pool::read(&policy("gpu", 10, &[("pool", "gpu")])),
            Pool::read(&policy(
                "gpu-east",
                10,
                &[("zone", "east"), ("pool", "gpu")],
            )),
            Pool::read(&policy("system", 5, &[("pool", "system")])),
        ]);
        assert_eq!(
            pools.assign(&labels(&[("pool", "system")])),
            PoolRef::Policy("system".into())
        );
        assert_eq!(
            pools.assign(&labels(&[("pool", "general")])),
            PoolRef::Policy("all".into())
        );
        assert_eq!(
            pools.assign(&labels(&[("pool", "gpu"), ("zone", "west")])),
            PoolRef::Policy("gpu".into())
        );
        assert_eq!(
            pools.assign(&labels(&[("pool", "gpu"), ("zone", "east")])),
            PoolRef::Overlap(vec!["gpu".into(), "gpu-east".into()])
        );
        assert_eq!(Pools::default().assign(&labels(&[])), PoolRef::Flags);
    }

    #[test]
    fn a_policy_that_does_not_read_is_invalid_and_says_where() {
        let mut p = policy("gpu", 0, &[]);
        p.spec.budgets = vec![
            PolicyBudget {
                nodes: "1".into(),
                schedule: Some("0 0 30 2 *".into()),
                duration: Some("1h".into()),
                ..Default::default()
            },
            PolicyBudget {
                nodes: "1".into(),
                schedule: Some("0 22 * * *".into()),
                duration: Some("8h".into()),
                time_zone: Some("Mars/Olympus".into()),
                ..Default::default()
            },
        ];
        p.spec.node_selector.match_expressions = vec![LabelRequirement {
            key: "pool".into(),
            operator: SelectorOperator::In,
            values: vec![],
        }];
        let pool = Pool::read(&p);
        let why = pool.invalid.unwrap();
        assert!(why.contains("nodeSelector"), "{why}");
        assert!(
            why.contains("budgets[0]") && why.contains("never fires"),
            "{why}"
        );
        assert!(
            why.contains("budgets[1]") && why.contains("Mars/Olympus"),
            "{why}"
        );
        // Holding every node beats guessing which it governs.
        let other = labels(&[("pool", "other")]);
        assert!(pool.selector.matches_lookup(|key| other.get(key)));

        let mut p = policy("ok", 0, &[]);
        p.spec.drain = Some(PoolDrainSettings {
            timeout: Some("1h".into()),
            force_after: Some("30m".into()),
            ..Default::default()
        });
        let pool = Pool::read(&p);
        assert_eq!(pool.invalid, None);
        assert_eq!(pool.drain.force_after, Some(Duration::from_secs(1800)));
    }

    #[test]
    fn parking_that_a_drains_deadline_would_come_before_is_refused_and_0s_never_parks() {
        let with_drain = |drain: PoolDrainSettings| {
            let mut p = policy("gpu", 0, &[]);
            p.spec.drain = Some(drain);
            Pool::read(&p)
        };
        let mins = |m: u64| Duration::from_secs(60 * m);
        let flags = FlagDrain {
            drain_timeout: mins(30),
            ..FlagDrain::default()
        };
        // The pool's own park time past its timeout.
        let mut pool = with_drain(PoolDrainSettings {
            timeout: Some("20m".into()),
            park_blocked_after: Some("25m".into()),
            ..Default::default()
        });
        pool.check_against(&flags);
        let why = pool.invalid.clone().unwrap_or_default();
        assert!(why.contains("parkBlockedAfter (1500s)"), "{why}");
        // Its own, past the flags' timeout it falls back to.
        let mut pool = with_drain(PoolDrainSettings {
            park_blocked_after: Some("45m".into()),
            ..Default::default()
        });
        pool.check_against(&flags);
        assert!(pool.invalid.is_some());
        // The flag's, or the default 15m, over a pool's shorter timeout is nobody's choice for
        // that pool: not a problem (its drains just never park).
        let mut pool = with_drain(PoolDrainSettings {
            timeout: Some("10m".into()),
            ..Default::default()
        });
        pool.check_against(&flags);
        assert_eq!(pool.invalid, None);
    }

    #[test]
    fn the_label_keys_kept_are_those_every_policys_selector_names() {
        let by_labels = policy("by-labels", 0, &[("pool", "gpu"), ("team", "ml")]);
        let mut by_expression = policy("by-expression", 0, &[]);
        by_expression.spec.node_selector.match_expressions = vec![LabelRequirement {
            key: "topology.kubernetes.io/zone".into(),
            operator: SelectorOperator::NotIn,
            values: vec!["us-east-1c".into()],
        }];
        let pools = Pools::new([Pool::read(&by_labels), Pool::read(&by_expression)]);
        let keys = |k: &[&str]| LabelKeys::Only(k.iter().map(|k| k.to_string()).collect());
        assert_eq!(
            pools.label_keys(),
            keys(&["pool", "team", "topology.kubernetes.io/zone"])
        );
        // A selector that selects every node names no key.
        let pools = Pools::new([Pool::read(&policy("all", 0, &[]))]);
        assert_eq!(pools.label_keys(), keys(&[]));
        assert_eq!(NO_POLICIES.label_keys(), keys(&[]));
    }
}
