//! The choice's reads: reads the pods of candidates not yet known (a few per pass) from watches
//! kept for their drains ([`crate::drain::kept_watches_io`]), reads the budget watch and what the
//! running drains claim, and asks [`crate::fleet::choice`] to weigh them.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::drain::budgets::{BudgetDemand, BudgetKey, budget_paces};
use crate::drain::budgets_io::BudgetWatch;
use crate::drain::node_plan::plan_node;
use crate::drain::pods::DrainOptions;
use crate::drain::published::Published;
use crate::drain::watched_io::PodWatches;
use crate::fleet::choice::{
    BudgetsNow, DemandCache, SCORED_HEAD_EXTRA, SCORED_SPREAD, drain_taint_for_scoring, weigh,
};
use crate::fleet::starts::{
    FleetDecision, FleetLimits, NodeView, PoolRules, candidate_names, candidates_to_score,
};
use crate::record::node::retry_backoff;

/// What the choice reads: the candidates' pods, the budgets, and what the running drains claim.
pub(super) struct ChoiceReads {
    /// Lists the candidates' pods when no more watches can be kept.
    pub client: kube::Client,
    /// The candidates' pod watches, kept for their drains.
    pub pod_watches: Arc<PodWatches>,
    pub budgets: BudgetWatch,
    pub published: Arc<Published>,
    /// The drain's pod filters: a candidate is weighed as its drain would plan it.
    pub options: DrainOptions,
}

/// Scores the candidates in `view` and decides again with the scores, when the first decision
/// started `starting` nodes. Candidates not in `cache` are read, a sample of them per pass
/// ([`candidates_to_score`]). `None` when there is no choice to make or nothing could be
/// scored: the caller keeps its first decision.
pub(super) async fn rechoose(
    reads: &ChoiceReads,
    cache: &mut DemandCache,
    view: &mut [NodeView],
    limits: &FleetLimits,
    rules: PoolRules<'_>,
    starting: usize,
) -> Option<FleetDecision> {
    let now = Timestamp::now();
    let clock = Instant::now();
    let candidates: HashSet<String> = candidate_names(view, now, retry_backoff)
        .into_iter()
        .collect();
    cache.keep_only(&candidates);
    reads.pod_watches.kept().keep_only(&candidates);
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
        cache.insert(name, clock, demand);
    }
    let demands = cache.known(&candidates, clock);
    if demands.is_empty() {
        return None;
    }
    let paces = budget_paces(reads.budgets.all().iter().map(|b| b.as_ref()));
    let mut allowed: BTreeMap<BudgetKey, i64> = paces
        .iter()
        .map(|(key, pace)| (key.clone(), pace.allowed_now))
        .collect();
    // One read of what the running drains claim: `allowed` is net of it, and `weigh` counts
    // the same drains' pods left.
    let running = reads.published.claims.each();
    for demand in &running {
        demand.claim(&mut allowed);
    }
    let delays =
        crate::drain::pace::delays(&reads.published.pace.lanes(clock), &allowed, &paces, clock);
    let budgets = BudgetsNow {
        paces,
        allowed,
        delays,
        running,
    };
    let decision = weigh(view, limits, rules, now, &demands, budgets);
    tracing::debug!(listed = to_list.len(), known = demands.len(), chosen = ?decision.start, "candidates weighed by what their pods' budgets allow");
    Some(decision)
}

/// Reads each node's pods and plans its drain against the budget cache: what it would ask of
/// each budget. The pods come from a watch kept for the node's drain, so a node chosen after it
/// was weighed costs one read of its pods, not a list and then its drain's watch; past the
/// kept watches' limit they are listed. Scoring only orders the candidates, so a node whose
/// pods cannot be read is left out (unscored, after the scored ones) rather than failing the
/// pass.
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
                let read = match reads.pod_watches.pods_to_weigh(&name).await {
                    Ok(Some(kept)) => Ok(kept),
                    Ok(None) => {
                        // From the API server's watch cache: a list a moment old changes a
                        // score at most, and a consistent read of each candidate waits for the
                        // cache to catch up.
                        let params = ListParams::default()
                            .fields(&format!("spec.nodeName={name}"))
                            .match_any();
                        pods.list(&params)
                            .await
                            .map(|list| list.items)
                            .map_err(|e| e.to_string())
                    }
                    Err(e) => Err(e),
                };
                (name, read)
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<_>>()
        .await;
    let mut demands = Vec::new();
    for (name, list) in lists {
        match list {
            Ok(pods) => {
                let budgets = reads.budgets.for_pods(&pods);
                let plan = plan_node(&pods, &budgets, &taint, &reads.options);
                demands.push((name, BudgetDemand::of(&plan, |_| true)));
            }
            Err(e) => {
                tracing::debug!(node = %name, error = %e, "could not read the pods of a candidate; it is not scored")
            }
        }
    }
    demands
}
