//! Which candidates start when drain slots are free: the ones whose pods' budgets let a drain
//! proceed now, found by listing the candidates' pods (a few per pass, each node about once per
//! rotation) and weighing what each would ask of its budgets ([`BudgetDemand`]) against what the
//! budgets allow, less what running drains and earlier picks of the same pass have claimed.
//! Among nodes that would wait equally, the one whose busiest budget will finish last goes
//! first (the most rounds of evictions left, counting how far into its current round each
//! budget is, as [`crate::drain::pace`] measures it), so that the budget that takes longest never sits
//! idle.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Taint};
use kube::api::{Api, ListParams};
use rotor_core::contract::{DRAIN_TAINT_KEY, DrainPhase};

use crate::drain::budgets::{BudgetDemand, BudgetKey, DisruptionPace, budget_paces};
use crate::drain::budgets_io::BudgetWatch;
use crate::drain::pods::{DrainOptions, plan_node};
use crate::drain::published::Published;
use crate::fleet::starts::{
    FleetDecision, FleetLimits, NodeView, candidate_names, candidates_to_score,
    choose_nodes_to_start,
};
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

    fn get(&self, name: &str, now: Instant) -> Option<&BudgetDemand> {
        self.entries
            .get(name)
            .filter(|(at, _)| now.duration_since(*at) < DEMAND_TTL)
            .map(|(_, d)| d)
    }
}

/// What the choice reads: the candidates' pods, the budgets, and what the running drains claim.
pub(super) struct ChoiceReads {
    /// Lists the candidates' pods.
    pub client: kube::Client,
    pub budgets: BudgetWatch,
    pub published: Arc<Published>,
    /// The drain's pod filters: a candidate is weighed as its drain would plan it.
    pub options: DrainOptions,
}

/// Scores the candidates in `view` and decides again with the scores, when the first decision
/// started `starting` nodes. Candidates not in `cache` are listed, a sample of them per pass
/// ([`candidates_to_score`]). `None` when there is no choice to make or nothing could be
/// scored: the caller keeps its first decision.
pub(super) async fn rechoose(
    reads: &ChoiceReads,
    cache: &mut DemandCache,
    view: &mut [NodeView],
    limits: &FleetLimits,
    starting: usize,
) -> Option<FleetDecision> {
    let now = Timestamp::now();
    let clock = Instant::now();
    let candidates: HashSet<String> = candidate_names(view, now, retry_backoff)
        .into_iter()
        .collect();
    cache.entries.retain(|name, _| candidates.contains(name));
    if candidates.len() <= starting {
        return None;
    }
    let to_list = candidates_to_score(
        view,
        now,
        retry_backoff,
        starting + SCORED_HEAD_EXTRA,
        SCORED_SPREAD,
        |name| cache.get(name, clock).is_some(),
    );
    for (name, demand) in list_demands(reads, &to_list).await {
        cache.entries.insert(name, (clock, demand));
    }
    let demands: HashMap<String, BudgetDemand> = candidates
        .iter()
        .filter_map(|name| cache.get(name, clock).map(|d| (name.clone(), d.clone())))
        .collect();
    if demands.is_empty() {
        return None;
    }
    let paces = budget_paces(reads.budgets.all().iter().map(|b| b.as_ref()));
    let mut allowed: BTreeMap<BudgetKey, i64> = paces
        .iter()
        .map(|(key, pace)| (key.clone(), pace.allowed_now))
        .collect();
    reads.published.claims.claim_from(&mut allowed);
    let mut left = BTreeMap::new();
    reads.published.claims.claim_from(&mut left);
    // A node that would block never gets through its budgets' rounds: it adds none.
    for demand in demands.values().filter(|d| !d.blocks) {
        demand.claim(&mut left);
    }
    let delays =
        crate::drain::pace::delays(&reads.published.pace.lanes(clock), &allowed, &paces, clock);
    for v in view.iter_mut() {
        v.budget_urgency = demands
            .get(&v.name)
            .map_or(0, |d| urgency(d, &left, &paces, &delays));
    }
    let decision = choose_in_turn(view, limits, now, &demands, allowed);
    tracing::debug!(listed = to_list.len(), known = demands.len(), chosen = ?decision.start, "candidates weighed by what their pods' budgets allow");
    Some(decision)
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

/// Picks the nodes to start one at a time: each pick is the first of
/// [`choose_nodes_to_start`]'s order with every candidate scored by
/// [`BudgetDemand::waits`] against `allowed`, after which its demand is claimed from `allowed`
/// and it counts as draining. So two starts in one pass do not both go to nodes whose pods
/// queue on the same budget when another node's pods would not. Unscored candidates (no entry
/// in `demands`) come after scored ones, as before.
pub(super) fn choose_in_turn(
    view: &mut [NodeView],
    limits: &FleetLimits,
    now: Timestamp,
    demands: &HashMap<String, BudgetDemand>,
    mut allowed: BTreeMap<BudgetKey, i64>,
) -> FleetDecision {
    let mut picked: Vec<String> = Vec::new();
    let mut first: Option<FleetDecision> = None;
    loop {
        for v in view.iter_mut() {
            v.budget_waits = demands.get(&v.name).map(|d| d.waits(&allowed));
        }
        let decision = choose_nodes_to_start(view, limits, now, retry_backoff);
        let Some(next) = decision.start.first().cloned() else {
            // The counts are those before any pick; the held nodes those after the last.
            let mut result = first.unwrap_or_else(|| decision.clone());
            result.start = picked;
            result.held = decision.held;
            return result;
        };
        if let Some(demand) = demands.get(&next) {
            demand.claim(&mut allowed);
        }
        if let Some(v) = view.iter_mut().find(|v| v.name == next) {
            v.record.phase = Some(DrainPhase::Queued);
        }
        picked.push(next);
        first.get_or_insert(decision);
    }
}

/// Which candidates not yet known are listed in one pass (see [`candidates_to_score`]): the
/// free slots' worth plus this many at the head of the order, and this many spread over the
/// rest. Each costs one list of a node's pods.
const SCORED_HEAD_EXTRA: usize = 2;
const SCORED_SPREAD: usize = 5;

/// Lists each node's pods and plans its drain against the budget cache: what it would ask of
/// each budget. Scoring only orders the candidates, so a node whose pods cannot be read is left
/// out (unscored, after the scored ones) rather than failing the pass.
async fn list_demands(reads: &ChoiceReads, names: &[String]) -> Vec<(String, BudgetDemand)> {
    if names.is_empty() {
        return Vec::new();
    }
    let taint = drain_taint_for_scoring();
    let pods: Api<Pod> = Api::all(reads.client.clone());
    let lists = futures::stream::iter(names.iter().cloned())
        .map(|name| {
            let pods = pods.clone();
            async move {
                // From the API server's watch cache: a list a moment old changes a score at
                // most, and a consistent read of each candidate waits for the cache to catch up.
                let params = ListParams::default()
                    .fields(&format!("spec.nodeName={name}"))
                    .match_any();
                (name, pods.list(&params).await)
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<_>>()
        .await;
    let mut demands = Vec::new();
    for (name, list) in lists {
        match list {
            Ok(list) => {
                let budgets = reads.budgets.for_pods(&list.items);
                let plan = plan_node(&list.items, &budgets, &taint, &reads.options);
                demands.push((name, BudgetDemand::of(&plan, |_| true)));
            }
            Err(e) => {
                tracing::debug!(node = %name, error = %e, "could not list the pods of a candidate; it is not scored")
            }
        }
    }
    demands
}

/// The drain taint as a pod's tolerations are matched against it when scoring a candidate (the
/// drain itself uses the node's own taint).
fn drain_taint_for_scoring() -> Taint {
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
        let allowed = one_each(&[
            "checkout-0",
            "checkout-1",
            "checkout-2",
            "checkout-3",
            "checkout-4",
        ]);
        let decision = choose_in_turn(
            &mut view.clone(),
            &limits(2),
            now(),
            &demands,
            allowed.clone(),
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
        let decision = choose_in_turn(&mut view, &limits(3), now(), &demands, allowed);
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
        demand(&["web"]).claim(&mut allowed);
        let decision = choose_in_turn(&mut view, &limits(1), now(), &demands, allowed);
        assert_eq!(decision.start, ["c"]);
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
        let decision = choose_in_turn(&mut view, &limits(2), now(), &demands, allowed);
        assert_eq!(decision.start, ["a", "b"]);
        assert_eq!(decision.held.len(), 1);
    }
}
