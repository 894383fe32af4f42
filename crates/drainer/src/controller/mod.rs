//! The drainer's control loop: watch nodes (keeping only a small summary of each, not the
//! object), and on every change or tick decide what runs. Drains that were recorded as started
//! resume; drains whose taint disappeared are stopped and undone; new drains start only inside a
//! maintenance window, when the gate is open, and within the fleet limits the `fleet` module
//! computes. Every replica runs the loop; it contends for the leader lease while some node needs
//! rotor and acts only while it leads. While no node needs rotor it makes no API request besides
//! its watches, leader or not: the leader releases the lease after `--release-lease-after`.
//!
//! `start_gate` holds the next start until the cluster has absorbed the last drains; `choice`
//! orders the candidates by what their pods' budgets allow now.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use rotor_core::contract::DrainPhase;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::drain::{Ctx, DrainOutcome, DrainResult, clean_up, drain_node};
use crate::fleet::{
    FleetLimits, Limit, NodeView, choose_nodes_to_start, held_by_limit, start_block,
};
use crate::gate::Owner;
use crate::leader::Election;
use crate::metrics::PhaseLabel;
use crate::state::{Intent, retry_backoff};
use crate::window::any_open;
use crate::workloads::{WorkloadIndex, WorkloadUpdate};

use self::start_gate::Gate;

mod choice;
mod start_gate;

struct Running {
    abort: CancellationToken,
}

/// Runs the control loop until `stop`. Every replica runs it: it watches, contends for the lease
/// in `election` while some node needs rotor, acts only while it leads, and releases the lease
/// once no node has needed rotor for `release_after` and nothing it started is still running.
pub async fn run(
    ctx: Arc<Ctx>,
    election: &mut Election,
    release_after: Duration,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let nodes_api: Api<Node> = Api::all(ctx.client.clone());
    // Small pages: each listed Node is summarised and dropped at once, so the page is the
    // peak (500 full Nodes with their image lists are several MiB at 5,000 nodes).
    let mut node_events = watcher(nodes_api, watcher::Config::default().page_size(100))
        .default_backoff()
        .boxed();
    let mut nodes: BTreeMap<String, NodeView> = BTreeMap::new();
    let mut buffer: BTreeMap<String, NodeView> = BTreeMap::new();
    let mut listed = false;
    let mut running: HashMap<String, Running> = HashMap::new();
    let mut cleaning: HashSet<String> = HashSet::new();
    let mut tasks: JoinSet<(String, DrainOutcome)> = JoinSet::new();
    // A new leader does not know what the last drains evicted (that was in the previous
    // leader's memory), so even its first start waits for the gate: the workload index listed,
    // and no pod unschedulable past --pending-grace.
    let mut gate = Gate::default();
    gate.arm([]);
    let mut workload_events = crate::workloads::watch(ctx.client.clone()).boxed();
    let mut workloads = WorkloadIndex::default();
    let mut held_log = HeldLog::default();
    let mut burst = TaintBurst::default();
    let mut demand_cache = choice::DemandCache::default();
    let mut leading_changes = election.leading.clone();
    let mut was_leading = false;
    let mut idle_since: Option<Instant> = None;
    let mut standing_by = false;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_tick = Instant::now();
    loop {
        let burst_over = burst.settles_at(Instant::now());
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
            changed = leading_changes.changed() => if changed.is_err() {
                anyhow::bail!("the leader election task ended");
            },
            _ = tokio::time::sleep_until(burst_over.unwrap_or_else(Instant::now).into()), if burst_over.is_some() => {}
            Some(update) = workload_events.next() => {
                if let WorkloadUpdate::Failed { kind, error, .. } = &update {
                    tracing::warn!(kind = kind.as_str(), %error, "workload watch failed; it restarts with back-off, and the gate holds meanwhile");
                }
                let changed = workloads.apply(update);
                // Only a change the held gate waits on is worth a pass over the fleet.
                if !gate.waits_on(&changed, &workloads) {
                    continue;
                }
            }
            ev = node_events.next() => match ev {
                Some(Ok(watcher::Event::Init)) => buffer.clear(),
                Some(Ok(watcher::Event::InitApply(n))) => { let v = NodeView::of(&n); buffer.insert(v.name.clone(), v); }
                Some(Ok(watcher::Event::InitDone)) => {
                    let mut fresh = std::mem::take(&mut buffer);
                    let now = Instant::now();
                    for v in fresh.values_mut() {
                        carry_ever_ready(&nodes, v);
                        // Whether the taint stayed while nobody watched is unknown: from now.
                        sight_taint(None, v, now);
                    }
                    nodes = fresh;
                    listed = true;
                }
                Some(Ok(watcher::Event::Apply(n))) => {
                    let mut v = NodeView::of(&n);
                    carry_ever_ready(&nodes, &mut v);
                    sight_taint(nodes.get(&v.name), &mut v, Instant::now());
                    if v.tainted && nodes.get(&v.name).is_none_or(|old| !old.tainted) {
                        burst.taint_arrived(Instant::now());
                        // Pods may have arrived while it was untainted: read them afresh.
                        demand_cache.forget(&v.name);
                    }
                    nodes.insert(v.name.clone(), v);
                }
                Some(Ok(watcher::Event::Delete(n))) => {
                    let name = n.metadata.name.as_deref().unwrap_or("");
                    demand_cache.forget(name);
                    nodes.remove(name);
                }
                Some(Err(e)) => tracing::warn!(error = %e, "node watch failed; it restarts with back-off"),
                None => anyhow::bail!("the node watch ended"),
            },
            Some(done) = tasks.join_next() => {
                let (name, outcome) = done?;
                ctx.claims.take(&name);
                // Whatever the end, what the drain evicted must be Ready again before the next
                // start: its share of the disruption no longer counts as in flight.
                let evicted: Vec<Owner> = ctx
                    .in_flight
                    .take(&name)
                    .map(|counts| counts.into_keys().collect())
                    .unwrap_or_default();
                running.remove(&name);
                cleaning.remove(&name);
                // The watch has not necessarily delivered the task's last write yet; without
                // this the next pass would see the old phase and resume a finished drain.
                if let Some(record) = outcome.record
                    && let Some(view) = nodes.get_mut(&name)
                {
                    view.record = record;
                }
                match &outcome.result {
                    DrainResult::Drained => ctx.metrics.drain_finished("drained"),
                    DrainResult::Failed { .. } => ctx.metrics.drain_finished("failed"),
                    DrainResult::Cancelled => ctx.metrics.drain_finished("cancelled"),
                    DrainResult::Skipped { why } => tracing::debug!(node = %name, why, "drain task skipped"),
                    DrainResult::NodeGone | DrainResult::Interrupted => {}
                }
                if let Some(owners) = gate_after(&outcome.result, evicted) {
                    gate.arm(owners);
                }
            }
        }
        if !listed {
            continue;
        }
        let now = Timestamp::now();
        let window_open = any_open(&ctx.cfg.windows, now);
        let needed = nodes
            .values()
            .find_map(|n| needs_rotor(n, now, window_open).map(|why| (n.name.as_str(), why)));
        match needed {
            Some((node, why)) => {
                idle_since = None;
                if !election.is_contending() {
                    tracing::info!(%node, why, "a node needs rotor: contending for the leader lease");
                    election.contend();
                    standing_by = false;
                }
            }
            None if tasks.is_empty() => {
                let since = *idle_since.get_or_insert_with(Instant::now);
                let leading = election.is_leading();
                let release = !leading || since.elapsed() >= release_after;
                if release && election.is_contending() {
                    if leading {
                        tracing::info!(
                            idle_secs = since.elapsed().as_secs(),
                            "no node needs rotor: standing down, giving the leader lease back"
                        );
                    }
                    // Returns once this replica no longer leads and the lease is released.
                    election.stand_down().await;
                }
                if !standing_by && !election.is_contending() {
                    // Tainted nodes that only wait (for a window, a retry or an opt-out to go)
                    // are named, so that the quiet is not mistaken for "nothing tainted".
                    let waiting: Vec<&str> = nodes
                        .values()
                        .filter(|n| n.tainted && n.record.phase != Some(DrainPhase::Drained))
                        .map(|n| n.name.as_str())
                        .collect();
                    if waiting.is_empty() {
                        tracing::info!(
                            "no node needs rotor: standing by without the leader lease, watching for drain taints"
                        );
                    } else {
                        let shown: Vec<&str> = waiting.iter().take(5).copied().collect();
                        tracing::info!(
                            waiting = waiting.len(),
                            nodes = %shown.join(", "),
                            "no tainted node can start now: standing by without the leader lease until one can (a window opens, a retry falls due, an opt-out goes)"
                        );
                    }
                    standing_by = true;
                }
            }
            None => idle_since = None,
        }
        // Every replica reports the phases it sees on the nodes, so the figures survive a
        // release of the lease (a view of the cluster: the same from each replica).
        publish_phases(&ctx, &nodes);
        // The one reading of the election that decides whether this pass acts.
        let leading = election.is_leading();
        let new_term = leading && !was_leading;
        was_leading = leading;
        if !leading {
            continue;
        }
        if new_term {
            tracing::info!("leading: starting to drain tainted nodes");
            // What this replica knew from an earlier term (another replica may have led since)
            // is stale: like any new leader, its first start passes the gate.
            gate = Gate::default();
            gate.arm([]);
            demand_cache = choice::DemandCache::default();
            last_tick = Instant::now();
        }
        let elapsed = last_tick.elapsed();
        last_tick = Instant::now();
        // Stop drains whose taint went away or whose node is gone.
        for (name, r) in &running {
            if nodes.get(name).is_none_or(|n| !n.tainted) {
                r.abort.cancel();
            }
        }
        // Undo rotor's state on untainted nodes nobody is draining (e.g. while we were down).
        for n in nodes.values() {
            let ours = n.record.phase.is_some() || n.record.cordoned_by_rotor;
            if !n.tainted && ours && !running.contains_key(&n.name) && !cleaning.contains(&n.name) {
                cleaning.insert(n.name.clone());
                let (ctx2, name) = (ctx.clone(), n.name.clone());
                tasks.spawn(async move {
                    if let Err(e) = clean_up(&ctx2, &name).await {
                        tracing::warn!(node = %name, error = %e, "could not undo rotor's drain state");
                    }
                    let outcome = DrainOutcome { result: DrainResult::NodeGone, record: None };
                    (name, outcome)
                });
            }
        }
        // Resume drains recorded as started (a restart or a failover).
        for n in nodes.values() {
            if n.tainted
                && n.record.is_active()
                && !running.contains_key(&n.name)
                && !cleaning.contains(&n.name)
            {
                spawn_drain(
                    &ctx,
                    &mut tasks,
                    &mut running,
                    &n.name,
                    Intent::Resume,
                    n.tainted_since,
                    &stop,
                );
            }
        }
        // Start new drains.
        let mut view: Vec<NodeView> = nodes
            .values()
            .map(|n| {
                let mut v = n.clone();
                if running.contains_key(&n.name) && !v.record.is_active() {
                    v.record.phase = Some(DrainPhase::Queued);
                }
                v
            })
            .collect();
        let limits = FleetLimits {
            max_concurrent: ctx.cfg.max_concurrent,
            max_unavailable: ctx.cfg.max_unavailable,
            startup_grace: ctx.cfg.node_startup_grace,
        };
        let decision = choose_nodes_to_start(&view, &limits, Timestamp::now(), retry_backoff);
        let unavailable_room = decision.unavailable < decision.allowed_unavailable;
        let mut held = decision.held.clone();
        // A node whose clean-up is still running (untainted, then tainted again) waits for it.
        let mut start: Vec<String> = decision
            .start
            .into_iter()
            .filter(|n| !running.contains_key(n) && !cleaning.contains(n))
            .collect();
        if !start.is_empty() && !any_open(&ctx.cfg.windows, Timestamp::now()) {
            hold_starts(
                &mut held,
                &mut start,
                "outside every maintenance window",
                unavailable_room,
            );
        }
        if !start.is_empty() && burst.settles_at(Instant::now()).is_some() {
            hold_starts(
                &mut held,
                &mut start,
                "drain taints are still arriving; choosing once they settle",
                unavailable_room,
            );
        }
        if !start.is_empty() && gate.armed() {
            // Checked on the pass after a drain finishes, then on every change to a workload it
            // waits for (from the watches, so it opens as soon as the last one is Ready) and on
            // the tick.
            if let Err(why) = gate.check(&ctx, &workloads, elapsed).await {
                hold_starts(
                    &mut held,
                    &mut start,
                    &format!("gate: {why}"),
                    unavailable_room,
                );
            }
        }
        // A slot is free and the gate is open: if there is a choice, prefer the candidates whose
        // pods' budgets let a drain proceed now over one that would sit in the slot waiting.
        if !start.is_empty()
            && let Some(decision) =
                choice::rechoose(&ctx, &mut demand_cache, &mut view, &limits, start.len()).await
        {
            held = decision.held;
            start = decision
                .start
                .into_iter()
                .filter(|n| !running.contains_key(n) && !cleaning.contains(n))
                .collect();
        }
        held_log.update(held, Instant::now());
        // The gate and the choice may have waited on the API: act only if still leading.
        if stop.is_cancelled() || !election.is_leading() {
            continue;
        }
        for name in start {
            // Until the drain publishes its own claims (after listing its pods), the demand it
            // was chosen with stands for them, so the next choice does not overlook it.
            if let Some(demand) = demand_cache.take(&name) {
                ctx.claims.set(&name, demand);
            }
            let since = nodes.get(&name).and_then(|n| n.tainted_since);
            spawn_drain(
                &ctx,
                &mut tasks,
                &mut running,
                &name,
                Intent::Start,
                since,
                &stop,
            );
        }
    }
    // Shutdown: let running drains stop where they are; their state stays on the nodes.
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// What the next start waits for once a drain task ends (`None`: nothing new), given the
/// workloads it `evicted` from. A drained node always arms the gate; a drain that ended otherwise
/// (failed, stopped, its node gone) arms it only if it evicted something, whose workloads must be
/// Ready again just the same.
fn gate_after(result: &DrainResult, evicted: Vec<Owner>) -> Option<Vec<Owner>> {
    (matches!(result, DrainResult::Drained) || !evicted.is_empty()).then_some(evicted)
}

/// Why `node` needs a leading drainer now, if it does: its drain is under way (to resume, after
/// a failover), it has rotor's drain state without the taint (to undo), or it carries the taint
/// and may start now: not drained, not opted out with `rotor.dev/do-not-disrupt`, not backing off
/// after a failure, and inside a maintenance window (`window_open`). A node that only waits (to
/// be retired, for its opt-out to go, for its retry time or for a window) needs nothing yet: the
/// node watch shows the first two change, and the once-a-second pass notices the others.
fn needs_rotor(node: &NodeView, now: Timestamp, window_open: bool) -> Option<&'static str> {
    if !node.tainted {
        return (node.record.phase.is_some() || node.record.cordoned_by_rotor)
            .then_some("it has rotor's drain state but no drain taint, to undo");
    }
    if node.record.is_active() {
        return Some("its drain is under way");
    }
    // The fleet's own test of whether a tainted node may start, so the two cannot drift apart.
    (window_open && start_block(node, now, retry_backoff).is_none())
        .then_some("it carries the drain taint")
}

/// Drain taints that arrive together (a selector run, or an operator tainting a list of nodes)
/// come as one watch event per node. Choosing at the first one would pick among the few seen so
/// far, and with several slots, often neighbours that queue on the same budgets; so new starts
/// wait until no new taint has arrived for [`TAINT_QUIET`], at most [`TAINT_BURST_MAX`] after the
/// first. Resumed drains and the taints found by the initial node list do not wait.
#[derive(Default)]
struct TaintBurst {
    first: Option<Instant>,
    last: Option<Instant>,
}

const TAINT_QUIET: Duration = Duration::from_millis(250);
const TAINT_BURST_MAX: Duration = Duration::from_secs(2);

impl TaintBurst {
    fn taint_arrived(&mut self, now: Instant) {
        if self.settles_at(now).is_none() {
            self.first = Some(now);
        }
        self.last = Some(now);
    }

    /// When the burst under way at `now` is over; `None` when none is.
    fn settles_at(&self, now: Instant) -> Option<Instant> {
        let (first, last) = (self.first?, self.last?);
        let over = (last + TAINT_QUIET).min(first + TAINT_BURST_MAX);
        (over > now).then_some(over)
    }
}

/// Holds this pass's starts for `why`. The nodes the fleet limits held were held counting those
/// starts as drains ("max-concurrent 3 reached (3 draining)" while none is); with the starts
/// held, those that only the starts kept out wait for `why` first, and say so. There was a free
/// slot (something was starting), so that is every node held by max-concurrent, and those held
/// by max-unavailable when the nodes unavailable before the starts left room
/// (`unavailable_room`); otherwise that limit holds them whatever starts.
fn hold_starts(
    held: &mut Vec<(String, String)>,
    start: &mut Vec<String>,
    why: &str,
    unavailable_room: bool,
) {
    for (_, reason) in held.iter_mut() {
        let only_the_starts = match held_by_limit(reason) {
            Some(Limit::MaxConcurrent) => true,
            Some(Limit::MaxUnavailable) => unavailable_room,
            None => false,
        };
        if only_the_starts {
            *reason = why.to_string();
        }
    }
    held.extend(start.drain(..).map(|n| (n, why.to_string())));
}

/// A node once seen Ready stays "has been Ready" across its later views, so that going NotReady
/// makes it unavailable rather than "still starting" (see [`NodeView::is_starting`]). Only for
/// the same node: a new one that reuses the name (IP-based names are reused) starts afresh.
/// Sets `view.tainted_since` (see [`NodeView`]): kept from `old`, the last view of the node, while
/// its drain taint keeps pods off; `now` when that has just begun or nothing earlier is known;
/// `None` otherwise. So a taint that went and came back counts from its return, and the
/// monotonic clock keeps a step of the wall clock from making a new taint look old.
fn sight_taint(old: Option<&NodeView>, view: &mut NodeView, now: Instant) {
    view.tainted_since = (view.tainted && view.taint_keeps_pods_off)
        .then(|| old.and_then(|o| o.tainted_since).unwrap_or(now));
}

fn carry_ever_ready(known: &BTreeMap<String, NodeView>, view: &mut NodeView) {
    if known
        .get(&view.name)
        .is_some_and(|old| old.ever_ready && old.created == view.created)
    {
        view.ever_ready = true;
    }
}

fn spawn_drain(
    ctx: &Arc<Ctx>,
    tasks: &mut JoinSet<(String, DrainOutcome)>,
    running: &mut HashMap<String, Running>,
    name: &str,
    intent: Intent,
    tainted_since: Option<Instant>,
    stop: &CancellationToken,
) {
    let abort = CancellationToken::new();
    running.insert(
        name.to_string(),
        Running {
            abort: abort.clone(),
        },
    );
    let (ctx, name, stop) = (ctx.clone(), name.to_string(), stop.clone());
    tasks.spawn(async move {
        let r = drain_node(ctx, name.clone(), intent, tainted_since, abort, stop).await;
        (name, r)
    });
}

/// What was last logged about held drains.
#[derive(Default)]
struct HeldLog {
    held: Vec<(String, String)>,
    reasons: BTreeSet<String>,
    logged_at: Option<Instant>,
}

/// A change in which nodes wait (and not in why) is logged at most this often: when a whole
/// fleet is tainted at once, each node's taint arrives as its own event.
const HELD_NODES_LOG_INTERVAL: Duration = Duration::from_secs(60);

impl HeldLog {
    /// Logs the held drains when the reasons change, or when only the nodes changed and the
    /// last log is older than [`HELD_NODES_LOG_INTERVAL`]. Returns whether it logged.
    fn update(&mut self, held: Vec<(String, String)>, now: Instant) -> bool {
        if held == self.held {
            return false;
        }
        let reasons: BTreeSet<String> = held.iter().map(|(_, why)| why.clone()).collect();
        let due = self
            .logged_at
            .is_none_or(|at| now.duration_since(at) >= HELD_NODES_LOG_INTERVAL);
        if reasons != self.reasons || due {
            log_held(&held);
            self.reasons = reasons;
            self.logged_at = Some(now);
            self.held = held;
            return true;
        }
        false
    }
}

/// One info line per distinct reason, naming a few of the nodes it holds: with every node of a
/// fleet tainted, one line per node would bury the log at each change.
fn log_held(held: &[(String, String)]) {
    let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (node, why) in held {
        by_reason
            .entry(why.as_str())
            .or_default()
            .push(node.as_str());
    }
    for (why, nodes) in by_reason {
        let shown: Vec<&str> = nodes.iter().take(5).copied().collect();
        let more = nodes.len().saturating_sub(shown.len());
        let nodes = if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        };
        tracing::info!(nodes = %nodes, %why, "drains held");
    }
}

fn publish_phases(ctx: &Ctx, nodes: &BTreeMap<String, NodeView>) {
    let mut counts: BTreeMap<&'static str, i64> =
        DrainPhase::ALL.iter().map(|p| (p.slug(), 0)).collect();
    for n in nodes.values() {
        if let Some(p) = n.record.phase {
            *counts.entry(p.slug()).or_default() += 1;
        }
    }
    for (phase, c) in counts {
        ctx.metrics
            .nodes_by_phase
            .get_or_create(&PhaseLabel {
                phase: phase.to_string(),
            })
            .set(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(nodes: &[&str], why: &str) -> Vec<(String, String)> {
        nodes
            .iter()
            .map(|n| (n.to_string(), why.to_string()))
            .collect()
    }

    #[test]
    fn a_taint_sighting_is_kept_until_the_taint_goes() {
        let t0 = Instant::now();
        let t = |s: u64| t0 + Duration::from_secs(s);
        let view = |tainted: bool| NodeView {
            name: "a".into(),
            tainted,
            taint_keeps_pods_off: tainted,
            ..NodeView::default()
        };
        // Each event's view of the node, sighted against the one before it.
        let mut last: Option<NodeView> = None;
        let mut seen = |mut v: NodeView, now: Instant| {
            sight_taint(last.as_ref(), &mut v, now);
            last = Some(v.clone());
            v.tainted_since
        };
        assert_eq!(seen(view(false), t(0)), None);
        assert_eq!(seen(view(true), t(1)), Some(t(1)));
        assert_eq!(
            seen(view(true), t(5)),
            Some(t(1)),
            "later events keep the first sighting"
        );
        // Removed and added again: counts from the new taint.
        assert_eq!(seen(view(false), t(6)), None);
        assert_eq!(seen(view(true), t(7)), Some(t(7)));
        // PreferNoSchedule keeps no pod off: no sighting, until it becomes NoSchedule.
        let preferred = NodeView {
            taint_keeps_pods_off: false,
            ..view(true)
        };
        assert_eq!(seen(preferred, t(8)), None);
        assert_eq!(seen(view(true), t(9)), Some(t(9)));
        // A re-list cannot tell whether the taint stayed while nobody watched: from the list.
        let mut relisted = view(true);
        sight_taint(None, &mut relisted, t(10));
        assert_eq!(relisted.tainted_since, Some(t(10)));
    }

    #[test]
    fn a_drain_that_evicted_arms_the_gate_however_it_ends() {
        let web = || {
            vec![(
                "ReplicaSet".to_string(),
                "shop".to_string(),
                "web-1".to_string(),
            )]
        };
        assert_eq!(gate_after(&DrainResult::Drained, web()), Some(web()));
        // A drained node with nothing evicted still arms it (pending pods are checked).
        assert_eq!(gate_after(&DrainResult::Drained, vec![]), Some(vec![]));
        for ended in [
            DrainResult::Failed {
                error: "deadline".into(),
            },
            DrainResult::Cancelled,
            DrainResult::NodeGone,
            DrainResult::Interrupted,
        ] {
            assert_eq!(gate_after(&ended, web()), Some(web()));
        }
        assert_eq!(gate_after(&DrainResult::Cancelled, vec![]), None);
    }

    #[test]
    fn a_node_needs_rotor_while_it_can_start_or_runs_or_has_state_to_undo() {
        let now: Timestamp = "2025-03-01T12:00:00Z".parse().unwrap();
        let node = |tainted: bool, phase: Option<DrainPhase>| {
            let mut n = NodeView {
                name: "n".into(),
                tainted,
                ..NodeView::default()
            };
            n.record.phase = phase;
            n
        };
        let needs = |n: &NodeView| needs_rotor(n, now, true).is_some();
        // Nothing to do: untouched nodes, and drained ones waiting to be retired.
        assert!(!needs(&node(false, None)));
        assert!(!needs(&node(true, Some(DrainPhase::Drained))));
        // Tainted and not drained: to start, or to resume.
        for phase in [
            None,
            Some(DrainPhase::Queued),
            Some(DrainPhase::Evicting),
            Some(DrainPhase::Blocked),
        ] {
            assert!(needs(&node(true, phase)), "{phase:?}");
        }
        // Outside every window only a drain under way needs the leader; a new start waits.
        assert_eq!(needs_rotor(&node(true, None), now, false), None);
        assert!(needs_rotor(&node(true, Some(DrainPhase::Evicting)), now, false).is_some());
        // Failed: nothing until its retry is due.
        let mut failed = node(true, Some(DrainPhase::Failed));
        failed.record.attempts = 1;
        failed.record.deadline = Some(now - jiff::SignedDuration::from_secs(10));
        assert!(!needs(&failed), "backing off");
        failed.record.deadline = Some(now - jiff::SignedDuration::from_hours(24));
        assert!(needs(&failed), "retry due");
        // Opted out before its drain started: it waits for the opt-out to go (a node event).
        let mut opted_out = node(true, None);
        opted_out.opted_out = true;
        assert!(!needs(&opted_out));
        opted_out.record.phase = Some(DrainPhase::Evicting);
        assert!(needs(&opted_out));
        // The taint went away: rotor's state (even a drained record, or only its cordon) is
        // undone.
        assert!(needs(&node(false, Some(DrainPhase::Drained))));
        let mut cordoned = node(false, None);
        cordoned.record.cordoned_by_rotor = true;
        assert!(needs(&cordoned));
    }

    #[test]
    fn a_burst_of_taints_settles_after_a_quiet_spell_or_at_most_the_cap() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut burst = TaintBurst::default();
        assert_eq!(burst.settles_at(t0), None);
        burst.taint_arrived(t0);
        assert_eq!(burst.settles_at(t0), Some(ms(250)));
        // Each taint within the quiet spell extends it...
        burst.taint_arrived(ms(200));
        assert_eq!(burst.settles_at(ms(200)), Some(ms(450)));
        assert_eq!(burst.settles_at(ms(449)), Some(ms(450)));
        assert_eq!(burst.settles_at(ms(450)), None);
        // ...up to the cap, so a steady trickle does not hold starts for ever.
        let mut trickle = TaintBurst::default();
        for i in 0..10 {
            trickle.taint_arrived(ms(i * 200));
        }
        assert_eq!(trickle.settles_at(ms(1_800)), Some(ms(2_000)));
        assert_eq!(trickle.settles_at(ms(2_000)), None);
        // A taint after the burst is over starts a new one.
        trickle.taint_arrived(ms(5_000));
        assert_eq!(trickle.settles_at(ms(5_000)), Some(ms(5_250)));
    }

    #[test]
    fn held_starts_take_the_nodes_held_by_the_limits_with_them() {
        let mut held = vec![
            (
                "c".to_string(),
                "max-concurrent 2 reached (2 draining)".to_string(),
            ),
            (
                "d".to_string(),
                "node has rotor.dev/do-not-disrupt=true".to_string(),
            ),
            (
                "e".to_string(),
                "max-unavailable 2 reached (2 of 9 nodes unavailable)".to_string(),
            ),
        ];
        let original = held.clone();
        let mut start = vec!["a".to_string(), "b".to_string()];
        hold_starts(
            &mut held,
            &mut start,
            "outside every maintenance window",
            true,
        );
        assert!(start.is_empty());
        let why = |held: &[(String, String)], n: &str| {
            held.iter().find(|(h, _)| h == n).unwrap().1.clone()
        };
        assert_eq!(why(&held, "a"), "outside every maintenance window");
        assert_eq!(why(&held, "c"), "outside every maintenance window");
        assert_eq!(why(&held, "e"), "outside every maintenance window");
        // A node held for its own sake keeps its reason.
        assert_eq!(why(&held, "d"), "node has rotor.dev/do-not-disrupt=true");
        // When the nodes unavailable already fill max-unavailable (the start was a cordoned
        // node), that limit holds e whatever starts: it keeps its reason.
        let mut held = original;
        let mut start = vec!["cordoned".to_string()];
        hold_starts(
            &mut held,
            &mut start,
            "outside every maintenance window",
            false,
        );
        assert_eq!(why(&held, "c"), "outside every maintenance window");
        assert_eq!(
            why(&held, "e"),
            "max-unavailable 2 reached (2 of 9 nodes unavailable)"
        );
    }

    #[test]
    fn held_drains_are_logged_when_why_changes_not_per_node() {
        let t0 = Instant::now();
        let mut log = HeldLog::default();
        let full = "max-concurrent 1 reached (1 draining)";
        assert!(log.update(held(&["a"], full), t0));
        // A fleet tainted node by node: same reason, more nodes, no new line each time.
        for (i, nodes) in [&["a", "b"][..], &["a", "b", "c"]].iter().enumerate() {
            assert!(!log.update(held(nodes, full), t0 + Duration::from_millis(i as u64)));
        }
        assert!(!log.update(held(&["a", "b", "c"], full), t0 + Duration::from_secs(5)));
        // A new reason is logged at once.
        assert!(log.update(
            held(&["a", "b", "c"], "gate: pod p pending"),
            t0 + Duration::from_secs(6)
        ));
        // Only the nodes changed, but the last line is older than the interval: logged.
        let later = t0 + Duration::from_secs(6) + HELD_NODES_LOG_INTERVAL;
        assert!(log.update(held(&["b", "c"], "gate: pod p pending"), later));
        // Nothing held any more is a change of reasons too.
        assert!(log.update(Vec::new(), later));
        assert!(!log.update(Vec::new(), later + Duration::from_secs(1)));
    }
}
