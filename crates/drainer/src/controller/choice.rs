//! Which candidate starts when a drain slot is free: the ones whose pods' budgets let a drain
//! proceed now, found by listing the pods of a sample of candidates and scoring each with
//! [`budget_waits`].

use std::collections::HashMap;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Taint};
use kube::api::{Api, ListParams};
use rotor_core::contract::DRAIN_TAINT_KEY;

use crate::drain::Ctx;
use crate::fleet::{
    FleetDecision, FleetLimits, NodeView, candidates_to_score, choose_nodes_to_start,
};
use crate::pods::{budget_waits, plan_node};
use crate::state::retry_backoff;

/// Scores a sample of the candidates in `view` (writing their `budget_waits`) and decides again
/// with the scores, when the first decision started `starting` nodes. `None` when there is no
/// choice to make or nothing could be scored: the caller keeps its first decision.
pub(super) async fn rechoose(
    ctx: &Ctx,
    view: &mut [NodeView],
    limits: &FleetLimits,
    starting: usize,
) -> Option<FleetDecision> {
    let now = Timestamp::now();
    let names = candidates_to_score(
        view,
        now,
        retry_backoff,
        starting + SCORED_HEAD_EXTRA,
        SCORED_SPREAD,
    );
    if names.len() <= starting {
        return None;
    }
    let scores = score_candidates(ctx, &names).await;
    if scores.is_empty() {
        return None;
    }
    for v in view.iter_mut() {
        v.budget_waits = scores.get(&v.name).copied();
    }
    let decision = choose_nodes_to_start(view, limits, now, retry_backoff);
    tracing::debug!(?scores, chosen = ?decision.start, "candidates scored by the pods their budgets would hold");
    Some(decision)
}

/// Which candidates are scored before a start (see [`candidates_to_score`]): the free slots'
/// worth plus this many at the head of the order, and this many spread over the rest. Each
/// costs one list of a node's pods.
const SCORED_HEAD_EXTRA: usize = 2;
const SCORED_SPREAD: usize = 5;

/// Lists each candidate's pods and scores it with [`budget_waits`] against the budget cache.
/// Scoring only orders the candidates, so a node whose pods cannot be read is left unscored
/// (after the scored ones) rather than failing the pass.
async fn score_candidates(ctx: &Ctx, names: &[String]) -> HashMap<String, u32> {
    let taint = drain_taint_for_scoring();
    let budgets = ctx.budgets_now();
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let lists = futures::stream::iter(names.iter().cloned())
        .map(|name| {
            let pods = pods.clone();
            async move {
                let params = ListParams::default().fields(&format!("spec.nodeName={name}"));
                (name, pods.list(&params).await)
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<_>>()
        .await;
    let mut scores = HashMap::new();
    for (name, list) in lists {
        match list {
            Ok(list) => {
                let plan = plan_node(&list.items, &budgets, &taint, &ctx.cfg.options);
                scores.insert(name, budget_waits(&plan));
            }
            Err(e) => {
                tracing::debug!(node = %name, error = %e, "could not list the pods of a candidate; it is not scored")
            }
        }
    }
    scores
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
