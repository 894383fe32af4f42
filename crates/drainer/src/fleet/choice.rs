//! Which candidates start when drain slots are free: the ones whose pods' budgets let a drain
//! proceed now, found by listing the candidates' pods ([`crate::fleet::choice_io`]: a few per
//! pass, each node about once per rotation) and weighing what each would ask of its budgets ([`BudgetDemand`]) against what the
//! budgets allow, less what running drains and earlier picks of the same pass have claimed.
//! Among nodes that would wait equally, the one whose busiest budget will finish last goes
//! first (the most rounds of evictions left, counting how far into its current round each
//! budget is, as [`crate::drain::pace`] measures it), so that the budget that takes longest never sits
//! idle.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Taint;
use rotor_core::contract::{DRAIN_TAINT_KEY, DrainPhase};

use crate::drain::budgets::{BudgetDemand, BudgetKey, DisruptionPace};
use crate::fleet::lookahead::{self, Ahead};
use crate::fleet::starts::{FleetDecision, FleetLimits, NodeView, PoolRules, choose_in_pools};
use crate::record::node::retry_backoff;

/// What candidates' drains would ask of the budgets, kept between passes. While a node carries
/// the drain taint (NoSchedule; pods that tolerate it are not evicted) its pods can only leave, so
/// its demand can only shrink: each node is listed once rather than at every start. Each start
/// pass lists a few unknown candidates, so a small fleet is known after a few starts and a large
/// one by a growing sample. An entry goes when its node gets the taint anew, goes away, starts
/// draining (its demand becomes the drain's claim) or stops being a candidate, and is refreshed
/// after [`DEMAND_TTL`].
#[derive(Default)]
pub(super) struct DemandCache {
    entries: HashMap<String, (Instant, BudgetDemand)>,
}

/// How long a listed node's demand is trusted: long enough to list each node about once per
/// rotation, short enough that pods deleted by others or budgets that changed are seen.
const DEMAND_TTL: Duration = Duration::from_secs(300);

impl DemandCache {
    /// Drops what is known of `name` (its taint was just added, or it is gone).
    pub(super) fn forget(&mut self, name: &str) {
        self.entries.remove(name);
    }

    /// Removes and returns `name`'s demand, for a drain starting now to claim.
    pub(super) fn take(&mut self, name: &str) -> Option<BudgetDemand> {
        self.entries.remove(name).map(|(_, demand)| demand)
    }

    /// Keeps only the entries of `candidates`.
    pub(super) fn keep_only(&mut self, candidates: &HashSet<String>) {
        self.entries.retain(|name, _| candidates.contains(name));
    }

    /// `name`'s demand, listed at `at`.
    pub(super) fn insert(&mut self, name: String, at: Instant, demand: BudgetDemand) {
        self.entries.insert(name, (at, demand));
    }

    /// The demands of `candidates` still trusted at `now`.
    pub(super) fn known(
        &self,
        candidates: &HashSet<String>,
        now: Instant,
    ) -> HashMap<String, BudgetDemand> {
        candidates
            .iter()
            .filter_map(|name| self.get(name, now).map(|d| (name.clone(), d.clone())))
            .collect()
    }

    pub(super) fn get(&self, name: &str, now: Instant) -> Option<&BudgetDemand> {
        self.entries
            .get(name)
            .filter(|(at, _)| now.duration_since(*at) < DEMAND_TTL)
            .map(|(_, d)| d)
    }
}

/// What the budgets allow now, as the choice weighs it.
pub(super) struct BudgetsNow {
    /// Each budget's pace (`budget_paces` over the budget watch).
    pub paces: BTreeMap<BudgetKey, DisruptionPace>,
    /// What each allows now, less what the running drains claim.
    pub allowed: BTreeMap<BudgetKey, i64>,
    /// How far each budget is from giving back its next disruption, in rounds
    /// ([`crate::drain::pace::delays`]).
    pub delays: BTreeMap<BudgetKey, f64>,
    /// What each running drain still needs (its pods still to evict, per budget), in the order
    /// the planned choice serves them (by node name: which drain's eviction a budget takes
    /// first is not decided here).
    pub running: Vec<BudgetDemand>,
}

/// Decides the starts again with the candidates' `demands` scored against `budgets`: each
/// candidate's urgency (the rounds its busiest budget has left, counting every known
/// candidate's pods), then the picks in turn ([`choose_in_turn`]).
pub(super) fn weigh(
    view: &mut [NodeView],
    limits: &FleetLimits,
    rules: PoolRules<'_>,
    now: Timestamp,
    demands: &HashMap<String, BudgetDemand>,
    budgets: BudgetsNow,
) -> FleetDecision {
    let BudgetsNow {
        paces,
        allowed,
        delays,
        running,
    } = budgets;
    // Pods left to evict under each budget, as negative counts claimed from zero: the running
    // drains' and every candidate's that can finish.
    let mut claimed = BTreeMap::new();
    for demand in &running {
        demand.claim(&mut claimed);
    }
    // A node that would block never gets through its budgets' rounds: it adds none.
    for demand in demands.values().filter(|d| !d.blocks) {
        demand.claim(&mut claimed);
    }
    for v in view.iter_mut() {
        v.budget_urgency = demands
            .get(&v.name)
            .map_or(0, |d| urgency(d, &claimed, &paces, &delays));
    }
    let ahead = Lookahead {
        running: running.iter().collect(),
        paces: &paces,
    };
    choose_in_turn(view, limits, rules, now, demands, allowed, ahead)
}

/// How many rounds the busiest budget among a node's pods still has ahead of it, in hundredths:
/// the pods left to evict under that budget across the known candidates and running drains
/// (`left`, as negative counts claimed from zero) divided by how many it lets through per round,
/// plus how far it is from giving back its next disruption (`delays`, in rounds, from
/// [`crate::drain::pace::delays`]). A budget with nothing left counts 0.
fn urgency(
    demand: &BudgetDemand,
    left: &BTreeMap<BudgetKey, i64>,
    paces: &BTreeMap<BudgetKey, DisruptionPace>,
    delays: &BTreeMap<BudgetKey, f64>,
) -> u32 {
    demand
        .pods
        .keys()
        .map(|budget| {
            let pods = (-left.get(budget).copied().unwrap_or(0)).max(0) as u64;
            if pods == 0 {
                return 0;
            }
            let per_round = paces.get(budget).map_or(1, |pace| pace.per_round).max(1) as u64;
            let rounds =
                pods.div_ceil(per_round) as f64 + delays.get(budget).copied().unwrap_or(0.0);
            (rounds * 100.0).round().min(f64::from(u32::MAX)) as u32
        })
        .max()
        .unwrap_or(0)
}

/// What the planned choice plays out from: the running drains' demands (earlier picks of the
/// pass join them) and the budgets' paces.
struct Lookahead<'a> {
    running: Vec<&'a BudgetDemand>,
    paces: &'a BTreeMap<BudgetKey, DisruptionPace>,
}

/// Picks the nodes to start one at a time: each pick is the first of
/// [`choose_in_pools`]'s order (every pool's rules kept) with the first candidates ranked by
/// the planned choice ([`plan_ranks`]) and every candidate scored by [`BudgetDemand::waits`]
/// against `allowed`, after which its demand is claimed from `allowed`, it joins the running
/// drains of the lookahead and it counts as draining. So two starts in one pass do not both go
/// to nodes whose pods queue on the same budget when another node's pods would not. Unscored
/// candidates (no entry in `demands`) come after scored ones, as before.
fn choose_in_turn<'a>(
    view: &mut [NodeView],
    limits: &FleetLimits,
    rules: PoolRules<'_>,
    now: Timestamp,
    demands: &'a HashMap<String, BudgetDemand>,
    mut allowed: BTreeMap<BudgetKey, i64>,
    mut ahead: Lookahead<'a>,
) -> FleetDecision {
    let mut picked: Vec<String> = Vec::new();
    let mut first: Option<FleetDecision> = None;
    loop {
        for v in view.iter_mut() {
            v.budget_waits = demands.get(&v.name).map(|d| d.waits(&allowed));
        }
        plan_ranks(view, demands, &ahead, limits.max_concurrent, &picked);
        let decision = choose_in_pools(view, limits, rules, now, retry_backoff);
        let Some(next) = decision.start.first().cloned() else {
            // The counts are those before any pick; the held nodes those after the last.
            let mut result = first.unwrap_or_else(|| decision.clone());
            result.start = picked;
            result.held = decision.held;
            return result;
        };
        if let Some(demand) = demands.get(&next) {
            demand.claim(&mut allowed);
            ahead.running.push(demand);
        }
        if let Some(v) = view.iter_mut().find(|v| v.name == next) {
            v.record.phase = Some(DrainPhase::Queued);
        }
        picked.push(next);
        first.get_or_insert(decision);
    }
}

/// Ranks the first [`lookahead::TRIED`] candidates of the greedy order (fewest waits, then the
/// most urgent, then the oldest) by what starting each now is projected to lead to
/// ([`lookahead::project`]), the others waiting behind it; every other node's rank is cleared.
/// Candidates whose drain would block, and those `picked` earlier in the pass, are not ranked.
fn plan_ranks(
    view: &mut [NodeView],
    demands: &HashMap<String, BudgetDemand>,
    ahead: &Lookahead<'_>,
    slots: usize,
    picked: &[String],
) {
    let mut order: Vec<(usize, &BudgetDemand)> = view
        .iter()
        .enumerate()
        .filter(|(_, v)| !picked.contains(&v.name))
        .filter_map(|(i, v)| demands.get(&v.name).map(|d| (i, d)))
        .filter(|(_, d)| !d.blocks)
        .collect();
    order.sort_by_key(|(i, _)| {
        let v = &view[*i];
        (
            v.budget_waits.unwrap_or(u32::MAX),
            std::cmp::Reverse(v.budget_urgency),
            v.created.is_none(),
            v.created,
            v.name.clone(),
        )
    });
    let projections: Vec<(usize, u32)> = order
        .iter()
        .take(lookahead::TRIED)
        .map(|(i, demand)| {
            let waiting = order
                .iter()
                .filter(|(j, _)| j != i)
                .map(|(_, d)| *d)
                .collect();
            let from = Ahead {
                running: ahead.running.clone(),
                waiting,
                paces: ahead.paces,
                slots,
            };
            (*i, lookahead::project(&from, demand))
        })
        .collect();
    // Ranked by the projected end alone: the plan overrides the greedy order only where it
    // projects a whole round saved, and candidates projected alike keep that order.
    let mut distinct: Vec<u32> = projections.iter().map(|(_, finish)| *finish).collect();
    distinct.sort_unstable();
    distinct.dedup();
    for v in view.iter_mut() {
        v.plan_rank = None;
    }
    for (i, finish) in projections {
        view[i].plan_rank = distinct
            .binary_search(&finish)
            .ok()
            .and_then(|rank| u32::try_from(rank).ok());
    }
}

/// Which candidates not yet known are read in one pass (see
/// [`crate::fleet::starts::candidates_to_score`]): the free slots' worth plus this many at the
/// head of the order, and this many spread over the rest. Each costs one read of a node's pods
/// (a watch kept for its drain, [`crate::drain::kept_watches_io`]).
pub(super) const SCORED_HEAD_EXTRA: usize = 2;
pub(super) const SCORED_SPREAD: usize = 5;

/// The drain taint as a pod's tolerations are matched against it when scoring a candidate (the
/// drain itself uses the node's own taint).
pub(super) fn drain_taint_for_scoring() -> Taint {
    Taint {
        key: DRAIN_TAINT_KEY.to_string(),
        effect: "NoSchedule".to_string(),
        value: None,
        time_added: None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use rotor_core::NodeBudget;

    fn now() -> Timestamp {
        "2025-03-01T12:00:00Z".parse().unwrap()
    }

    /// A Ready, tainted node created `age_days` before `now` (older first in the order).
    fn tainted(name: &str, age_days: i64) -> NodeView {
        NodeView {
            name: name.into(),
            tainted: true,
            ready: true,
            ever_ready: true,
            created: Some(now() - jiff::SignedDuration::from_hours(24 * age_days)),
            ..NodeView::default()
        }
    }

    fn limits(slots: usize) -> FleetLimits {
        FleetLimits {
            max_concurrent: slots,
            max_unavailable: NodeBudget::Count(slots as u32),
            startup_grace: Duration::from_secs(600),
        }
    }

    fn demand(budgets: &[&str]) -> BudgetDemand {
        BudgetDemand {
            blocks: false,
            pods: budgets.iter().map(|b| (BudgetKey::from(*b), 1)).collect(),
        }
    }

    fn one_each(budgets: &[&str]) -> BTreeMap<BudgetKey, i64> {
        budgets.iter().map(|b| (BudgetKey::from(*b), 1)).collect()
    }

    /// Budgets that let one pod through a round, one allowed now.
    fn one_a_round(budgets: &[&str]) -> BTreeMap<BudgetKey, DisruptionPace> {
        let pace = DisruptionPace {
            allowed_now: 1,
            per_round: 1,
        };
        budgets
            .iter()
            .map(|b| (BudgetKey::from(*b), pace))
            .collect()
    }

    fn nothing_running(paces: &BTreeMap<BudgetKey, DisruptionPace>) -> Lookahead<'_> {
        Lookahead {
            running: vec![],
            paces,
        }
    }

    /// [`choose_in_turn`] with `slots` drain slots, no policies and the windows open.
    fn choose<'a>(
        view: &mut [NodeView],
        slots: usize,
        demands: &'a HashMap<String, BudgetDemand>,
        allowed: BTreeMap<BudgetKey, i64>,
        ahead: Lookahead<'a>,
    ) -> FleetDecision {
        let rules = PoolRules::flags_only();
        choose_in_turn(view, &limits(slots), rules, now(), demands, allowed, ahead)
    }

    #[test]
    fn starts_in_one_pass_do_not_queue_on_the_same_budget() {
        // As the benchmark's nodes are filled: neighbours in age order share their budgets.
        let mut view = vec![
            tainted("a", 9),
            tainted("b", 8),
            tainted("c", 7),
            tainted("d", 6),
        ];
        let demands = HashMap::from([
            ("a".to_string(), demand(&["checkout-0", "checkout-3"])),
            ("b".to_string(), demand(&["checkout-0", "checkout-3"])),
            ("c".to_string(), demand(&["checkout-1", "checkout-4"])),
            ("d".to_string(), demand(&["checkout-0", "checkout-2"])),
        ]);
        let checkout = [
            "checkout-0",
            "checkout-1",
            "checkout-2",
            "checkout-3",
            "checkout-4",
        ];
        let allowed = one_each(&checkout);
        let paces = one_a_round(&checkout);
        let decision = choose(
            &mut view.clone(),
            2,
            &demands,
            allowed.clone(),
            nothing_running(&paces),
        );
        // Scored all at once, a and b tie (nothing waits) and b is older than c: a, b. In turn,
        // a claims checkout-0 and checkout-3, so b's pods would queue and c goes next.
        assert_eq!(decision.start, ["a", "c"]);
        assert!(
            decision
                .held
                .iter()
                .any(|(n, why)| n == "b" && why.to_string().contains("max-concurrent"))
        );
        assert_eq!(decision.active, 0, "counts are those before the picks");
        // A third slot: d waits for one pod (checkout-0, claimed by a), b for two.
        let decision = choose(&mut view, 3, &demands, allowed, nothing_running(&paces));
        assert_eq!(decision.start, ["a", "c", "d"]);
    }

    #[test]
    fn running_drains_claims_count_and_blocking_nodes_go_last() {
        let mut view = vec![tainted("a", 9), tainted("b", 8), tainted("c", 7)];
        let mut blocking = demand(&[]);
        blocking.blocks = true;
        let demands = HashMap::from([
            ("a".to_string(), blocking),
            ("b".to_string(), demand(&["web"])),
            ("c".to_string(), demand(&["api"])),
        ]);
        // A running drain still has one web pod to evict: it takes web's one disruption.
        let mut allowed = one_each(&["web", "api"]);
        let running = demand(&["web"]);
        running.claim(&mut allowed);
        let paces = one_a_round(&["web", "api"]);
        let ahead = Lookahead {
            running: vec![&running],
            paces: &paces,
        };
        let decision = choose(&mut view, 1, &demands, allowed, ahead);
        assert_eq!(decision.start, ["c"]);
    }

    #[test]
    fn a_start_that_waits_now_goes_first_when_it_keeps_a_budget_busy_later() {
        // r is draining: a's last pod of its own this round, then b's for two more rounds.
        // x's two pods would pass under c, which no one else needs; y and z hold a's next pods.
        let mut running_node = tainted("r", 10);
        running_node.record.phase = Some(DrainPhase::Evicting);
        let mut view = vec![
            running_node,
            tainted("x", 9),
            tainted("y", 8),
            tainted("z", 7),
        ];
        let mut c = demand(&["c"]);
        c.pods.insert("c".into(), 2);
        let mut a3 = demand(&["a"]);
        a3.pods.insert("a".into(), 3);
        let mut a2 = demand(&["a"]);
        a2.pods.insert("a".into(), 2);
        let demands = HashMap::from([
            ("x".to_string(), c),
            ("y".to_string(), a3),
            ("z".to_string(), a2),
        ]);
        let running = BudgetDemand {
            blocks: false,
            pods: BTreeMap::from([("a".into(), 1), ("b".into(), 3)]),
        };
        let mut allowed = one_each(&["a", "b", "c"]);
        running.claim(&mut allowed);
        let paces = one_a_round(&["a", "b", "c"]);
        let ahead = Lookahead {
            running: vec![&running],
            paces: &paces,
        };
        // Waits now alone would take x: one pod waits, against y's three and z's two.
        let mut greedy = view.clone();
        for v in greedy.iter_mut() {
            v.budget_waits = demands.get(&v.name).map(|d| d.waits(&allowed));
        }
        let by_waits = choose_in_pools(
            &greedy,
            &limits(2),
            PoolRules::flags_only(),
            now(),
            retry_backoff,
        );
        assert_eq!(by_waits.start, ["x"]);
        // But then a sits idle in round 1 while x holds the slot. Started now, y or z keeps a
        // busy from round 1 and the rotation ends a round sooner; they tie, and z waits less.
        let decision = choose(&mut view, 2, &demands, allowed, ahead);
        assert_eq!(decision.start, ["z"]);
    }

    #[test]
    fn urgency_is_the_rounds_left_on_the_busiest_budget() {
        let no_delays = BTreeMap::new();
        // 20 checkout pods left at one per round, 50 catalog pods at five per round.
        let mut left = BTreeMap::new();
        for _ in 0..20 {
            demand(&["checkout"]).claim(&mut left);
        }
        for _ in 0..50 {
            demand(&["catalog"]).claim(&mut left);
        }
        let pace = |n| DisruptionPace {
            allowed_now: n,
            per_round: n,
        };
        let paces = BTreeMap::from([("checkout".into(), pace(1)), ("catalog".into(), pace(5))]);
        assert_eq!(
            urgency(&demand(&["catalog"]), &left, &paces, &no_delays),
            1_000
        );
        assert_eq!(
            urgency(&demand(&["catalog", "checkout"]), &left, &paces, &no_delays),
            2_000
        );
        // A budget nobody else needs, or none at all: nothing urgent.
        assert_eq!(urgency(&demand(&["search"]), &left, &paces, &no_delays), 0);
        assert_eq!(urgency(&demand(&[]), &left, &paces, &no_delays), 0);
        // Equal rounds left, but checkout took its disruption a moment ago while cart is about
        // to give its back: checkout will finish last, so its nodes go first.
        demand(&["cart"]).claim(&mut left);
        let none_now = DisruptionPace {
            allowed_now: 0,
            per_round: 1,
        };
        let paces = BTreeMap::from([("checkout".into(), none_now), ("cart".into(), none_now)]);
        let mut cart_left = left.clone();
        for _ in 0..19 {
            demand(&["cart"]).claim(&mut cart_left);
        }
        let delays = BTreeMap::from([("checkout".into(), 0.9), ("cart".into(), 0.1)]);
        assert_eq!(
            urgency(&demand(&["checkout"]), &cart_left, &paces, &delays),
            2_090
        );
        assert_eq!(
            urgency(&demand(&["cart"]), &cart_left, &paces, &delays),
            2_010
        );
    }

    #[test]
    fn limits_still_bound_the_picks() {
        let mut view = vec![tainted("a", 9), tainted("b", 8), tainted("c", 7)];
        let demands = HashMap::from([
            ("a".to_string(), demand(&["web"])),
            ("b".to_string(), demand(&["api"])),
            ("c".to_string(), demand(&["db"])),
        ]);
        let allowed = one_each(&["web", "api", "db"]);
        let paces = one_a_round(&["web", "api", "db"]);
        let decision = choose(&mut view, 2, &demands, allowed, nothing_running(&paces));
        assert_eq!(decision.start, ["a", "b"]);
        assert_eq!(decision.held.len(), 1);
    }

    #[test]
    fn the_picks_keep_every_pools_rules_and_the_flags_windows() {
        use crate::fleet::pools::{PoolRef, Pools, one_node_at_a_time};
        // `a` follows the flags, whose windows are closed; `b` a policy of one node at a time
        // with `c` in it too; every budget of the pods allows.
        let pools = Pools::new([one_node_at_a_time("gpu")]);
        let mut view = vec![tainted("a", 9), tainted("b", 8), tainted("c", 7)];
        for v in view.iter_mut().skip(1) {
            v.pool = PoolRef::Policy("gpu".into());
            v.reason = "image".into();
        }
        let demands = HashMap::from([
            ("a".to_string(), demand(&["web"])),
            ("b".to_string(), demand(&["api"])),
            ("c".to_string(), demand(&["db"])),
        ]);
        let rules = PoolRules {
            pools: &pools,
            flags_open: false,
            ..PoolRules::flags_only()
        };
        let allowed = one_each(&["web", "api", "db"]);
        let paces = one_a_round(&["web", "api", "db"]);
        let decision = choose_in_turn(
            &mut view,
            &limits(3),
            rules,
            now(),
            &demands,
            allowed,
            nothing_running(&paces),
        );
        assert_eq!(decision.start, ["b"]);
        let held: Vec<String> = decision
            .held
            .iter()
            .map(|(n, why)| format!("{n}: {why}"))
            .collect();
        assert_eq!(
            held,
            [
                "a: outside every maintenance window",
                "c: RotationPolicy gpu: budget 1 of 2 reached (1 of its nodes unavailable)"
            ]
        );
    }

    #[test]
    fn weighing_counts_the_running_drains_and_every_candidate_that_can_finish() {
        let mut view = vec![tainted("a", 9), tainted("b", 8), tainted("c", 7)];
        let mut blocking = demand(&["slow"]);
        blocking.blocks = true;
        let demands = HashMap::from([
            ("a".to_string(), demand(&["slow"])),
            ("b".to_string(), demand(&["fast"])),
            ("c".to_string(), blocking),
        ]);
        let budgets = BudgetsNow {
            paces: BTreeMap::new(),
            allowed: one_each(&["slow", "fast"]),
            delays: BTreeMap::new(),
            // The running drains still have two pods to evict under `slow`.
            running: vec![BudgetDemand {
                blocks: false,
                pods: BTreeMap::from([(BudgetKey::from("slow"), 2)]),
            }],
        };
        let decision = weigh(
            &mut view,
            &limits(1),
            PoolRules::flags_only(),
            now(),
            &demands,
            budgets,
        );
        // `slow` has three pods left, one a round: the running drains' two and a's; c would
        // block, so its pod never gets through and adds no round. `fast` has b's one.
        let urgency: Vec<(&str, u32)> = view
            .iter()
            .map(|v| (v.name.as_str(), v.budget_urgency))
            .collect();
        assert_eq!(urgency, vec![("a", 300), ("b", 100), ("c", 300)]);
        // Every budget here is unpaced, so the projection sees no round to save either way, and
        // the greedy order decides: neither waits, and a's `slow` has the most rounds left.
        assert_eq!(decision.start, ["a"], "{decision:?}");
    }
}
