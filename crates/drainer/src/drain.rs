//! One node's drain, as a task: record the start (or resume the recorded one), cordon, then
//! evict what the planner says, waking on the node's pod watch, on budget changes, or on the
//! next retry time, never on a fixed poll. Ends drained, failed at its deadline, or cleaned up
//! when the taint goes away (uncordoning only if rotor cordoned). Progress lives on the node
//! as annotations and is announced as Events, so a restarted drainer picks up where this left.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use rotor_apimachinery::taints::keeps_pods_off;
use rotor_core::contract::{DrainPhase, DrainReason, FIELD_MANAGER, find_drain_taint};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::budget_turns::BudgetTurns;
use crate::config::DrainerConfig;
use crate::deployments::{self, Read};
use crate::error::DrainError;
use crate::events::NodeEvent;
use crate::evict::{self, EvictionOutcome};
use crate::eviction_queue::{EvictionQueue, QueuePolicy, Step, later};
use crate::gate::WorkloadRef;
use crate::metrics::Metrics;
use crate::notify::{Notice, NoticeKind, Notifier};
use crate::pace::BudgetPace;
use crate::pods::{
    Blocker, BudgetDemand, BudgetKey, Charge, DisruptionPace, DrainOptions, EvictionTier, NodePlan,
    PodRef, budget_paces, eviction_tier, plan_node_withholding,
};
use crate::replace_by::{Announcement, ReplaceBy};
use crate::reserve::{SurgeOutcome, SurgeSlots, make_room};
use crate::restart::{News, Next, RolloutRestarts};
use crate::state::{
    DrainRecord, Intent, Transition, apply, begin_check, changes_nothing, misreadings,
    retry_backoff,
};
use crate::surge::SurgeConfig;
use crate::watched::WatchedPods;

/// How many of one drain's evictions may be in flight at once (see [`evict_pass`]).
const EVICTIONS_IN_FLIGHT: usize = 8;

/// Everything a drain task needs, shared by all of them.
pub struct Ctx {
    /// For reads, watches and node patches (kube's default retry on).
    pub client: kube::Client,
    /// For evictions and forced deletions: default retry off, so 429s reach us.
    pub evict_client: kube::Client,
    pub cfg: DrainerConfig,
    /// Who posts the drainer's Events (see [`announce`]).
    pub reporter: Reporter,
    pub metrics: Metrics,
    pub budgets: Store<PodDisruptionBudget>,
    /// Bumped on every budget change, to retry refused evictions at once.
    pub budget_changes: watch::Receiver<u64>,
    /// What the running drains still need from the budgets, for choosing the next node.
    pub claims: BudgetClaims,
    /// The gated workloads' pods the running drains have evicted, for the gate.
    pub in_flight: InFlight,
    /// When rotor's evictions took each budget's disruptions, for choosing the next node.
    pub pace: BudgetPace,
    /// Each budget's turn to have an eviction on the wire (see [`crate::budget_turns`]).
    pub budget_turns: BudgetTurns,
    /// The nodes holding placeholders, for `--max-surge`.
    pub surge_slots: SurgeSlots,
    /// How many nodes the cluster has, as the node watch last counted, for percentages.
    pub fleet_size: AtomicUsize,
    /// The rotation's record (see [`crate::rotation`]).
    pub rotation: crate::rotation::RecordRef,
    /// Where notices go (`--notify-webhook`; a no-op without).
    pub notifier: Notifier,
}

impl Ctx {
    pub fn fleet_size(&self) -> usize {
        self.fleet_size.load(Ordering::Relaxed)
    }

    /// The PodDisruptionBudgets of `pods`' namespaces as the budget watch knows them now, for
    /// [`plan_node`] (the eviction API consults no other). Only those are copied: a pass runs
    /// at every pod event, and a large cluster has thousands of budgets.
    pub fn budgets_for(&self, pods: &[Pod]) -> Vec<PodDisruptionBudget> {
        let namespaces: std::collections::BTreeSet<&str> = pods
            .iter()
            .filter_map(|p| p.metadata.namespace.as_deref())
            .collect();
        self.budgets
            .state()
            .iter()
            .filter(|b| {
                b.metadata
                    .namespace
                    .as_deref()
                    .is_some_and(|ns| namespaces.contains(ns))
            })
            .map(|b| (**b).clone())
            .collect()
    }
}

/// What each running drain publishes for the controller, by node. Drain tasks write their own
/// entry; the controller withdraws it when the task ends, however it ends.
pub struct PerDrain<T>(std::sync::Mutex<HashMap<String, T>>);

impl<T> Default for PerDrain<T> {
    fn default() -> Self {
        PerDrain(Default::default())
    }
}

impl<T> PerDrain<T> {
    /// Withdraws `node`'s entry (its drain ended) and returns it.
    pub(crate) fn take(&self, node: &str) -> Option<T> {
        self.lock().remove(node)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, T>> {
        // Entries are replaced or counted whole: a panicking writer cannot leave one half-made.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What each running drain still needs from the disruption budgets: the pods it has yet to
/// evict, per budget, published at every plan. The controller subtracts it from what the budgets
/// allow when it weighs the next candidates, so that it does not start a node whose pods would
/// queue behind a running drain's.
pub type BudgetClaims = PerDrain<BudgetDemand>;

impl PerDrain<BudgetDemand> {
    /// Publishes what the drain of `node` still needs (replacing what it published before).
    pub(crate) fn set(&self, node: &str, demand: BudgetDemand) {
        self.lock().insert(node.to_string(), demand);
    }

    /// Claims every running drain's demand from `allowed`.
    pub fn claim_from(&self, allowed: &mut BTreeMap<BudgetKey, i64>) {
        for demand in self.lock().values() {
            demand.claim(allowed);
        }
    }
}

/// The pods of each workload the gate follows that each running drain has evicted so far. When
/// the task ends, the gate waits for the workloads in its entry; until then it lets those pods be
/// missing from their workloads (see [`crate::gate::workload_blockers`]).
pub type InFlight = PerDrain<BTreeMap<WorkloadRef, i32>>;

impl PerDrain<BTreeMap<WorkloadRef, i32>> {
    /// The drain of `node` evicted a pod of `owner`.
    pub(crate) fn record(&self, node: &str, owner: &WorkloadRef) {
        let mut map = self.lock();
        *map.entry(node.to_string())
            .or_default()
            .entry(owner.clone())
            .or_default() += 1;
    }

    /// The running drains' evictions, summed per workload.
    pub fn totals(&self) -> BTreeMap<WorkloadRef, i32> {
        let mut totals = BTreeMap::new();
        for evicted in self.lock().values() {
            for (owner, n) in evicted {
                *totals.entry(owner.clone()).or_default() += n;
            }
        }
        totals
    }
}

/// How a drain task ended.
#[derive(Debug)]
pub enum DrainResult {
    /// Drained (the workloads its evictions touched are in [`Ctx::in_flight`], for the gate).
    Drained,
    Failed {
        error: DrainError,
    },
    /// The taint went away; rotor's cordon and annotations were undone.
    Cancelled,
    /// The node disappeared.
    NodeGone,
    /// The drainer is shutting down; the node keeps its recorded state for the next leader.
    Interrupted,
    /// Nothing to do: the node's record, read fresh, says the drain is already over or must
    /// wait (see [`crate::state::begin_check`]). Nothing was written.
    Skipped {
        why: &'static str,
    },
}

/// A drain task's result and the node's record as the task last wrote or read it, so the
/// controller can correct its watch cache before the watch catches up.
#[derive(Debug)]
pub struct DrainOutcome {
    pub result: DrainResult,
    pub record: Option<DrainRecord>,
}

fn node_ref(node: &Node) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: node.metadata.name.clone(),
        uid: node.metadata.uid.clone(),
        ..Default::default()
    }
}

pub(crate) async fn announce(ctx: &Ctx, node: &Node, event: NodeEvent, note: String) {
    // The webhooks hear of a node's end and of a failed drain, in the Event's words (a blocked
    // one only when waiting will not unblock it: see `record_blockers`).
    let notice = match event {
        NodeEvent::Drained => Some(NoticeKind::NodeDrained),
        NodeEvent::Failed => Some(NoticeKind::NodeStuck),
        _ => None,
    };
    if let Some(kind) = notice {
        ctx.notifier.send(Notice::new(
            kind,
            node.metadata.name.as_deref(),
            note.clone(),
        ));
    }
    publish(ctx, event, note, &node_ref(node)).await;
}

/// Posts a drainer Event on one of the node's pods (the replace-by warnings).
async fn announce_on_pod(ctx: &Ctx, pod: &PodRef, event: NodeEvent, note: String) {
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        uid: Some(pod.uid.clone()),
        ..Default::default()
    };
    publish(ctx, event, note, &reference).await;
}

/// Posts `event` with `note` about `regarding`. A recorder of its own for each Event: kube's
/// Recorder folds an Event into the last one of the same reason on the same object for minutes,
/// keeping the first note, so a second blocker, hold or forced pod would read as the first. The
/// callers post only what is news.
async fn publish(ctx: &Ctx, event: NodeEvent, note: String, regarding: &ObjectReference) {
    let reason = event.reason();
    let ev = Event {
        type_: if event.is_warning() {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(crate::events::event_note(note)),
        action: "Drain".into(),
        secondary: None,
    };
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    if let Err(e) = recorder.publish(&ev, regarding).await {
        tracing::warn!(kind = ?regarding.kind, name = ?regarding.name, %reason, error = %e, "could not record an Event");
    }
}

/// Writes the changed annotations of a record, unless nothing changed.
async fn save(
    nodes: &Api<Node>,
    name: &str,
    new: &DrainRecord,
    old: &DrainRecord,
) -> Result<(), kube::Error> {
    let patch = new.annotation_patch(old);
    if changes_nothing(&patch) {
        return Ok(());
    }
    nodes
        .patch(name, &patch_params(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// Records the drain's start and cordons the node in one write (the node then shows the whole
/// step or none of it), noting whether rotor placed the cordon: a node already cordoned keeps
/// `cordoned_by_rotor` false, so rotor never undoes someone else's cordon. `then` is a
/// transition folded into the same write (`Evicting` when no surge step comes between).
///
/// The write is guarded by resourceVersion so a cordon placed by someone else in between is
/// never claimed. It goes first over `read`, the node as the drain read it; a conflict re-reads.
/// It is made against the node's raw annotations, so values nobody can read are overwritten.
async fn start_and_cordon(
    nodes: &Api<Node>,
    name: &str,
    read: &Node,
    started: &DrainRecord,
    then: Option<Transition>,
) -> Result<DrainRecord, kube::Error> {
    let mut first = Some(read.clone());
    let attempt = || {
        let first = first.take();
        let then = then.clone();
        async move {
            let node = match first {
                Some(node) => node,
                None => nodes.get(name).await?,
            };
            let (next, patch) = start_write(&node, started, then);
            if let Some(patch) = patch {
                nodes
                    .patch(name, &patch_params(), &Patch::Merge(&patch))
                    .await?;
            }
            Ok(next)
        }
    };
    attempt.retry(conflict_backoff()).when(is_conflict).await
}

/// The record after the start and the cordon on `node` as read, and the guarded merge patch
/// that writes both (`None` when the node already shows all of it).
fn start_write(
    node: &Node,
    started: &DrainRecord,
    then: Option<Transition>,
) -> (DrainRecord, Option<serde_json::Value>) {
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let mut next = apply(
        started,
        Transition::Cordoned {
            by_rotor: !cordoned,
        },
    );
    if let Some(t) = then {
        next = apply(&next, t);
    }
    let mut patch = next.annotation_patch_for(node.metadata.annotations.as_ref());
    if cordoned && changes_nothing(&patch) {
        return (next, None);
    }
    patch["metadata"]["resourceVersion"] = json!(node.metadata.resource_version);
    if !cordoned {
        patch["spec"] = json!({"unschedulable": true});
    }
    (next, Some(patch))
}

/// Re-read and retry a guarded node write a few times when someone else wrote in between.
fn conflict_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(20))
        .with_max_delay(Duration::from_millis(500))
        .with_max_times(5)
        .with_jitter()
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Undoes what rotor did to a node whose taint went away: its own cordon, its annotations.
pub async fn clean_up(ctx: &Ctx, name: &str) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let attempt = || async {
        let Some(node) = nodes.get_opt(name).await? else {
            return Ok(None);
        };
        let record = DrainRecord::from_annotations(node.metadata.annotations.as_ref());
        let mut patch = DrainRecord::cleared().annotation_patch(&record);
        patch["metadata"]["resourceVersion"] = json!(node.metadata.resource_version);
        let uncordon = record.cordoned_by_rotor
            && node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false);
        if uncordon {
            patch["spec"] = json!({"unschedulable": false});
        }
        nodes
            .patch(name, &patch_params(), &Patch::Merge(&patch))
            .await?;
        Ok(Some((node, uncordon)))
    };
    if let Some((node, uncordon)) = attempt.retry(conflict_backoff()).when(is_conflict).await? {
        let what = if uncordon {
            "uncordoned it and cleared"
        } else {
            "cleared"
        };
        tracing::info!(
            node = name,
            "drain taint removed; {what} rotor's annotations"
        );
        announce(
            ctx,
            &node,
            NodeEvent::Cancelled,
            format!("The drain taint was removed; rotor {what} its drain state."),
        )
        .await;
    }
    Ok(())
}

/// Drains one node until it is drained, fails, loses its taint (`abort`) or the drainer stops
/// (`stop`). `tainted_since` is when this drainer first saw the node carry a drain taint that
/// keeps pods off, continuously since (see [`settled_at`]); `None` counts from the cordon.
pub async fn drain_node(
    ctx: Arc<Ctx>,
    name: String,
    intent: Intent,
    tainted_since: Option<std::time::Instant>,
    abort: CancellationToken,
    stop: CancellationToken,
) -> DrainOutcome {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node = match nodes.get_opt(&name).await {
        Ok(Some(n)) => n,
        Ok(None) => {
            return DrainOutcome {
                result: DrainResult::NodeGone,
                record: None,
            };
        }
        Err(e) => {
            return DrainOutcome {
                result: DrainResult::Failed {
                    error: DrainError::ReadNode {
                        node: name,
                        error: e,
                    },
                },
                record: None,
            };
        }
    };
    let before = DrainRecord::from_annotations(node.metadata.annotations.as_ref());
    let now = Timestamp::now();
    let Some(taint) = find_drain_taint(&node).cloned() else {
        return DrainOutcome {
            result: DrainResult::Cancelled,
            record: Some(before),
        };
    };
    // Shut down or lost the lease while the node was read: another replica may be acting now.
    if stop.is_cancelled() {
        return DrainOutcome {
            result: DrainResult::Interrupted,
            record: Some(before),
        };
    }
    if let Some(why) = begin_check(intent, &before, now, retry_backoff) {
        tracing::debug!(node = %name, why, "not draining: the node's record changed since the cache saw it");
        return DrainOutcome {
            result: DrainResult::Skipped { why },
            record: Some(before),
        };
    }
    announce_misreadings(&ctx, &node, now).await;
    let (result, record) = drain_fresh(
        &ctx,
        &nodes,
        &node,
        &name,
        taint,
        before,
        now,
        tainted_since,
        &abort,
        &stop,
    )
    .await;
    // The placeholders' work is done however the drain ended, except at a shutdown: the next
    // leader resumes this drain and finds them (or its sweep removes them).
    if let Some(surge) = &ctx.cfg.surge
        && !matches!(result, DrainResult::Interrupted)
    {
        crate::reserve::release(&ctx, surge, &name).await;
    }
    DrainOutcome {
        result,
        record: Some(record),
    }
}

/// The earliest time an empty node may be declared drained: `--settle` after the node became
/// unschedulable, given how long ago that was (`protected_for`: the age of a drain taint that
/// keeps pods off; `None` when only the cordon written at `now` does).
///
/// The settle time is there for a pod the scheduler bound from a stale cache just before the
/// node became unschedulable, which the drain's pod watch may not have shown yet. Such a
/// binding can only land shortly after that moment, so what matters is how long the node has
/// been unschedulable, not how long it has been empty: a node tainted long before its drain
/// (a selector run, then a queue of nodes waiting their turn) is not kept waiting, and one
/// tainted just now, or with `PreferNoSchedule` (which keeps no pod off), still waits the full
/// settle time. A pod created with `spec.nodeName` set skips the scheduler and every taint; for
/// one that its controller puts back at once, the node must also stay empty for [`quiet`].
pub fn settled_at(protected_for: Option<Duration>, now: Timestamp, settle: Duration) -> Timestamp {
    later(
        now,
        settle.saturating_sub(protected_for.unwrap_or_default()),
    )
}

/// How long an empty node must stay empty before it is declared drained: a quarter of
/// `--settle`. Long enough to see a pod that a controller binding pods itself (`spec.nodeName`)
/// puts back as soon as the last one is gone, which takes a watch event and a create; the
/// scheduler's race is covered by [`settled_at`].
pub fn quiet(settle: Duration) -> Duration {
    settle / 4
}

/// [`drain_node`] once the node is read and due: records the start, cordons, evicts, and
/// records how it ended. Returns the result and the last record written.
#[allow(clippy::too_many_arguments)]
async fn drain_fresh(
    ctx: &Ctx,
    nodes: &Api<Node>,
    node: &Node,
    name: &str,
    taint: Taint,
    before: DrainRecord,
    now: Timestamp,
    tainted_since: Option<std::time::Instant>,
    abort: &CancellationToken,
    stop: &CancellationToken,
) -> (DrainResult, DrainRecord) {
    let resumed = before.resumes(now, ctx.cfg.drain_timeout);
    let start = if matches!(before.phase, Some(DrainPhase::Failed)) {
        Transition::Retry {
            now,
            drain_timeout: ctx.cfg.drain_timeout,
        }
    } else {
        Transition::Start {
            now,
            drain_timeout: ctx.cfg.drain_timeout,
        }
    };
    let started = apply(&before, start);
    // With no surge step, evictions begin at once: the same write says so.
    let then = ctx.cfg.surge.is_none().then_some(Transition::Evicting);
    let mut record = match start_and_cordon(nodes, name, node, &started, then).await {
        Ok(r) => r,
        Err(e) => {
            let error = DrainError::Cordon {
                node: name.to_string(),
                error: e,
            };
            return (DrainResult::Failed { error }, before);
        }
    };
    let deadline = record
        .deadline
        .unwrap_or_else(|| later(now, ctx.cfg.drain_timeout));
    announce_start(ctx, node, &taint, deadline, resumed).await;
    if let Some(surge) = &ctx.cfg.surge {
        let outcome = make_room(ctx, surge, node, &taint, abort, stop).await;
        announce_surge(ctx, node, surge, &outcome).await;
        if outcome == SurgeOutcome::Interrupted {
            let result = if stop.is_cancelled() {
                DrainResult::Interrupted
            } else {
                DrainResult::Cancelled
            };
            return (result, record);
        }
    }
    let started = record.started_at.unwrap_or(now);
    // The taint's age counts only if the taint as read now keeps pods off; otherwise only the
    // cordon just written does, from now.
    let protected_for = tainted_since
        .filter(|_| keeps_pods_off(&taint))
        .map(|since| since.elapsed());
    let settled = settled_at(protected_for, Timestamp::now(), ctx.cfg.settle);
    let replace_by = ctx.cfg.replace_by.and_then(|warning| {
        match rotor_core::contract::replace_by(&node.metadata) {
            Ok(at) => at.map(|at| ReplaceBy::new(at, warning)),
            Err(value) => {
                // Never act on a guess: a time that does not parse is not enforced.
                tracing::warn!(node = %name, %value, "rotor.dev/replace-by is not an RFC 3339 time (e.g. 2026-12-01T00:00:00Z); it is not enforced");
                None
            }
        }
    });
    let task = Evicting {
        ctx,
        nodes,
        node,
        name: name.to_string(),
        taint: &taint,
        deadline,
        started,
        replace_by,
        settled,
    };
    let result = evict_until_drained(&task, &mut record, abort, stop).await;
    let record = record_end(&task, &result, record).await;
    (result, record)
}

/// Says which of the node's drain record annotations rotor disregards as this drain begins
/// (see [`crate::state::misreadings`]), in the log and as a Warning Event; nothing when all
/// are usable.
async fn announce_misreadings(ctx: &Ctx, node: &Node, now: Timestamp) {
    let found = misreadings(
        node.metadata.annotations.as_ref(),
        now,
        ctx.cfg.drain_timeout,
    );
    if found.is_empty() {
        return;
    }
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let list = found
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let note = format!(
        "rotor disregards drain record annotations it did not write: {list}. They count as absent: a drain under way with no usable deadline starts a new attempt, and rotor overwrites them now. Nothing is evicted on their account."
    );
    tracing::warn!(node = %name, "{note}");
    announce(ctx, node, NodeEvent::RecordIgnored, note).await;
}

/// Says that the drain starts (or resumes, after a restart or failover), in the log and as an
/// Event on the node.
async fn announce_start(ctx: &Ctx, node: &Node, taint: &Taint, deadline: Timestamp, resumed: bool) {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    if resumed {
        tracing::info!(node = %name, %deadline, "resuming the recorded drain");
        announce(
            ctx,
            node,
            NodeEvent::Resumed,
            format!("rotor resumed draining this node (deadline {deadline})."),
        )
        .await;
    } else {
        let value = taint.value.as_deref().unwrap_or_default();
        if value.parse::<DrainReason>().is_err() {
            tracing::info!(node = %name, value, "the drain taint's value is not one of rotor's reasons; draining anyway, as any value of {} asks for a drain", taint.key);
        }
        tracing::info!(node = %name, reason = ?taint.value, %deadline, "starting to drain");
        announce(
            ctx,
            node,
            NodeEvent::Started,
            format!(
                "rotor started draining this node (taint {}={}, deadline {deadline}).",
                taint.key,
                taint.value.clone().unwrap_or_default()
            ),
        )
        .await;
    }
}

/// Says how the surge went, in the log, the metrics and an Event on the node.
async fn announce_surge(ctx: &Ctx, node: &Node, surge: &SurgeConfig, outcome: &SurgeOutcome) {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let (metric, event, note) = match outcome {
        SurgeOutcome::Ready {
            placeholders,
            waited,
        } => (
            "ready",
            NodeEvent::SurgeReady,
            format!(
                "rotor made room for this node's pods: {placeholders} placeholder(s) scheduled in {}s; evicting now.",
                waited.as_secs()
            ),
        ),
        SurgeOutcome::NothingToReserve => (
            "nothing_to_reserve",
            NodeEvent::SurgeNothingToReserve,
            "No pod on this node needs room elsewhere (none is recreated by a controller, or none requests resources); evicting now.".to_string(),
        ),
        SurgeOutcome::TimedOut { scheduled, pending } => {
            let first = pending
                .first()
                .map(|(pod, why)| format!("; e.g. {pod}: {}", why.as_deref().unwrap_or("no reason given yet")))
                .unwrap_or_default();
            (
                "timed_out",
                NodeEvent::SurgeTimedOut,
                format!(
                    "{} of {} placeholder(s) were still unscheduled after --surge-timeout ({}s){first}. Evicting anyway: the pods may wait Pending. Check that a cluster autoscaler can add nodes for them (quotas, group maximum size).",
                    pending.len(),
                    pending.len() + scheduled,
                    surge.timeout.as_secs()
                ),
            )
        }
        SurgeOutcome::NoSlot => (
            "no_slot",
            NodeEvent::SurgeNoSlot,
            format!(
                "--max-surge nodes held placeholders for all of --surge-timeout ({}s); evicting without making room.",
                surge.timeout.as_secs()
            ),
        ),
        SurgeOutcome::Failed(why) => (
            "failed",
            NodeEvent::SurgeFailed,
            format!("{why}. Evicting without making room."),
        ),
        SurgeOutcome::Interrupted => return,
    };
    ctx.metrics.surge(metric);
    if event.is_warning() {
        tracing::warn!(node = %name, "{note}");
    } else {
        tracing::info!(node = %name, "{note}");
    }
    announce(ctx, node, event, note).await;
}

/// Records how the drain ended on the node (drained, or failed with its reason) and says so;
/// undoes rotor's state when the taint went away. Returns the record as last written.
async fn record_end(
    task: &Evicting<'_>,
    result: &DrainResult,
    mut record: DrainRecord,
) -> DrainRecord {
    let (ctx, nodes, node, name, started) = (
        task.ctx,
        task.nodes,
        task.node,
        task.name.as_str(),
        task.started,
    );
    match result {
        DrainResult::Drained => {
            let done = apply(
                &record,
                Transition::Drained {
                    now: Timestamp::now(),
                },
            );
            match save(nodes, name, &done, &record).await {
                Ok(()) => record = done,
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "could not record the drained phase")
                }
            }
            let secs = Timestamp::now()
                .duration_since(started)
                .as_secs_f64()
                .max(0.0);
            ctx.metrics.drain_duration.observe(secs);
            tracing::info!(node = %name, seconds = secs.round(), "node drained");
            announce(ctx, node, NodeEvent::Drained, format!("rotor drained this node in {:.0}s; it stays cordoned and tainted for retirement.", secs)).await;
        }
        DrainResult::Failed { error } => {
            let failed = apply(
                &record,
                Transition::Failed {
                    error: error.to_string(),
                    now: Timestamp::now(),
                },
            );
            match save(nodes, name, &failed, &record).await {
                Ok(()) => record = failed,
                Err(e) => tracing::warn!(node = %name, error = %e, "could not record the failure"),
            }
            tracing::warn!(node = %name, %error, "drain failed; it will be retried after a back-off");
            announce(ctx, node, NodeEvent::Failed, error.to_string()).await;
        }
        DrainResult::Cancelled => match clean_up(ctx, name).await {
            Ok(()) => record = DrainRecord::default(),
            Err(e) => {
                tracing::warn!(node = %name, error = %e, "could not undo rotor's drain state after the taint was removed")
            }
        },
        DrainResult::NodeGone | DrainResult::Interrupted | DrainResult::Skipped { .. } => {}
    }
    record
}

/// One drain's evictions, until the node is empty: what the node's eviction needs besides its
/// record (which it updates as the drain goes).
struct Evicting<'a> {
    ctx: &'a Ctx,
    nodes: &'a Api<Node>,
    node: &'a Node,
    name: String,
    taint: &'a Taint,
    /// The drain fails at this time.
    deadline: Timestamp,
    /// When the drain (this attempt) started: `--force-after` counts from it.
    started: Timestamp,
    /// The node's replace-by time, when `--enforce-replace-by` is on and the node has one.
    replace_by: Option<ReplaceBy>,
    /// The node is drained no earlier than this (see [`settled_at`]).
    settled: Timestamp,
}

/// What one attempt remembers from one pass over the node's pods to the next.
struct Memory {
    queue: EvictionQueue,
    /// Since when nothing has been left to evict: the node must stay so for the quiet time.
    empty_since: Option<Timestamp>,
    /// The node's replace-by time, with what has been said about it.
    replace_by: Option<ReplaceBy>,
    /// `--restart-single-replica`: what was decided for each pod of a ReplicaSet.
    restarts: Option<RolloutRestarts>,
    /// What this drain has already said about odd input (pods' opt-out values, grace periods
    /// that outlast the deadline), so each is said once.
    said: std::collections::HashSet<String>,
    /// When this drain last had an eviction accepted (or began evicting): a budget that only
    /// needs time shows as a blocker once nothing has gone for `--blocked-after`.
    progressed_at: Timestamp,
}

/// What one pass over the node's pods concluded.
struct Pass {
    /// Drained, or failed at the deadline.
    ended: Option<DrainResult>,
    /// When the next pass is due unless a pod or a budget changes first.
    wake: Timestamp,
}

#[allow(clippy::too_many_arguments)]
async fn evict_until_drained(
    task: &Evicting<'_>,
    record: &mut DrainRecord,
    abort: &CancellationToken,
    stop: &CancellationToken,
) -> DrainResult {
    let ctx = task.ctx;
    let pods_api: Api<Pod> = Api::all(ctx.client.clone());
    let selector = format!("spec.nodeName={}", task.name);
    // kube-runtime's watcher, with its default back-off between failed attempts. Its lists are
    // served from the API server's watch cache (`any_semantic`, resourceVersion 0) rather than
    // read through to etcd: a drain's evictions wait for that first list, and a consistent read
    // costs tens of milliseconds at every start. A cached list may lag etcd by moments; the
    // watch goes on from the list's version, so a pod the list missed arrives as an event just
    // after it, like a pod bound just after a consistent list would: the race `--settle` and
    // the node's quiet time before it counts as drained are there for. One node's pods need no
    // pages, and kube sends no resourceVersion 0 on a list with a page size.
    let mut config = watcher::Config::default().fields(&selector).any_semantic();
    config.page_size = None;
    let mut pod_events = watcher(pods_api, config).default_backoff().boxed();
    let mut budget_changes = ctx.budget_changes.clone();
    let mut pods = WatchedPods::default();
    let mut reported = BlockedPodsGauge { ctx, reported: 0 };
    let mut memory = Memory {
        queue: EvictionQueue::default(),
        empty_since: None,
        replace_by: task.replace_by.clone(),
        restarts: ctx
            .cfg
            .restart_single_replica
            .then(RolloutRestarts::default),
        said: Default::default(),
        progressed_at: Timestamp::now(),
    };
    loop {
        let mut wake = task.deadline;
        if let Some(pods) = pods.listed() {
            let pass = evict_pass(task, record, pods, &mut memory).await;
            reported.set(memory.queue.refused() as i64);
            if let Some(ended) = pass.ended {
                return ended;
            }
            wake = pass.wake;
        }
        let sleep_for = wake
            .duration_since(Timestamp::now())
            .unsigned_abs()
            .max(Duration::from_millis(50));
        tokio::select! {
            _ = stop.cancelled() => return DrainResult::Interrupted,
            _ = abort.cancelled() => return DrainResult::Cancelled,
            _ = tokio::time::sleep(sleep_for) => {}
            changed = budget_changes.changed() => if changed.is_ok() {
                memory.queue.budget_moved();
            },
            ev = pod_events.next() => match ev {
                Some(Ok(event)) => if let Some(uid) = pods.apply(event) {
                    memory.queue.pod_gone(&uid);
                },
                Some(Err(e)) => tracing::warn!(node = %task.name, error = %e, "watching the node's pods failed; it restarts with back-off"),
                None => return DrainResult::Failed { error: DrainError::PodWatchEnded { node: task.name.clone() } },
            },
        }
    }
}

/// The `budget_blocked_pods` gauge's share of one drain: kept equal to its refused pods, and
/// given back whole when the drain ends, however it ends.
struct BlockedPodsGauge<'a> {
    ctx: &'a Ctx,
    reported: i64,
}

impl BlockedPodsGauge<'_> {
    fn set(&mut self, refused: i64) {
        if refused != self.reported {
            self.ctx
                .metrics
                .budget_blocked_pods
                .inc_by(refused - self.reported);
            self.reported = refused;
        }
    }
}

impl Drop for BlockedPodsGauge<'_> {
    fn drop(&mut self) {
        self.ctx.metrics.budget_blocked_pods.dec_by(self.reported);
    }
}

/// One pass over the node's pods: fail at the deadline, finish once empty and settled, else
/// plan, ask the queue about each pod, evict, and record what blocks the node.
async fn evict_pass(
    task: &Evicting<'_>,
    record: &mut DrainRecord,
    pods: &HashMap<String, Pod>,
    memory: &mut Memory,
) -> Pass {
    let (ctx, name) = (task.ctx, task.name.as_str());
    let Memory {
        queue,
        empty_since,
        replace_by,
        restarts,
        said,
        progressed_at,
    } = memory;
    let now = Timestamp::now();
    if now >= task.deadline {
        let error = DrainError::DeadlinePassed {
            deadline: task.deadline,
            pods: pods.values().map(|p| PodRef::of(p).to_string()).collect(),
        };
        return Pass {
            ended: Some(DrainResult::Failed { error }),
            wake: now,
        };
    }
    let mut wake = task.deadline;
    let pod_list: Vec<Pod> = pods.values().cloned().collect();
    let budgets = ctx.budgets_for(&pod_list);
    // Past the node's replace-by time (--enforce-replace-by), opt-outs no longer hold it.
    let past_replace_by = replace_by.as_ref().is_some_and(|d| d.passed(now));
    let options = DrainOptions {
        override_opt_outs: past_replace_by,
        ..ctx.cfg.options.clone()
    };
    // --restart-single-replica: what a Deployment's rollout replaces is withheld from the plan
    // (never evicted, no budget charged); the node is drained once it is gone.
    let plan_now = |restarts: &Option<RolloutRestarts>| {
        plan_node_withholding(&pod_list, &budgets, task.taint, &options, |uid| {
            restarts.as_ref().is_some_and(|r| r.withheld(uid))
        })
    };
    let mut plan = plan_now(restarts);
    if let Some(lone) = restarts.as_mut() {
        lone.keep_only(&pod_list);
        if restart_lone_replicas(task, lone, pods, &plan, now).await {
            plan = plan_now(restarts);
        }
    }
    if let Some(at) = restarts.as_ref().and_then(RolloutRestarts::next_look) {
        wake = wake.min(at);
    }
    if plan.is_drained() && !queue.has_fatal() {
        let since = *empty_since.get_or_insert(now);
        let ready_at = task.settled.max(later(since, quiet(ctx.cfg.settle)));
        if now >= ready_at {
            return Pass {
                ended: Some(DrainResult::Drained),
                wake: now,
            };
        }
        wake = wake.min(ready_at);
    } else {
        *empty_since = None;
    }
    if let Some(deadline) = replace_by.as_mut() {
        let held = replace_by_held(&pod_list, &plan);
        if let Some(said) = deadline.announce(now, &held) {
            announce_replace_by(task, &said, &pod_list).await;
        }
        if let Some(at) = deadline.next_wake(now) {
            wake = wake.min(at);
        }
    }
    let force_at = ctx.cfg.force_after.map(|f| later(task.started, f));
    let policy = QueuePolicy {
        budget_recheck: ctx.cfg.budget_recheck,
        // Past the replace-by time, a budget that never allows is overridden as --force-after
        // would: the last resort, a deletion with the pod's grace period.
        forcing: force_at.is_some_and(|t| now >= t) || past_replace_by,
    };
    // Published before the evictions too: the requests below take a while, and a start chosen
    // meanwhile must see that these pods are about to take their disruptions.
    ctx.claims
        .set(name, BudgetDemand::of(&plan, |uid| !queue.evicted(uid)));
    // Evict what the plan allows now; past --force-after, also delete what budgets hold.
    let mut targets: Vec<(PodRef, Option<i64>)> = plan.evict_now.clone();
    if policy.forcing {
        for (pod, grace) in &plan.budget_blocked {
            queue.held_by_budget(pod);
            targets.push((pod.clone(), *grace));
        }
    }
    say_odd_input(name, &targets, pods, said);
    let paces = budget_paces(&budgets);
    let mut attempts: Vec<Attempt<'_>> = Vec::new();
    for (pod, grace) in &targets {
        let charged = plan.charged.get(&pod.uid);
        let step = queue.next_step(pod, charged, policy, now);
        let at = match step {
            Step::Skip(at) => at,
            Step::WaitForBudget { at, first } => {
                if first {
                    let budget = charged.map(|c| &c.budget);
                    tracing::info!(node = %name, pod = %pod, budget = ?budget, "its disruption budget allows no eviction now; waiting for it to allow one");
                }
                Some(at)
            }
            Step::Evict | Step::Force => {
                attempts.push(Attempt {
                    pod,
                    grace: *grace,
                    forced: step == Step::Force,
                    charged,
                });
                None
            }
        };
        if let Some(at) = at {
            wake = wake.min(at);
        }
    }
    // The pass's evictions go out together, a few at a time: each is a round trip to the API
    // server (100 ms and more on a busy one), and a node's pods one after another would hold its
    // drain for seconds. Sending them at once takes nothing from the budgets: the plan charged
    // each budget no more than it allows, and the API server checks every eviction against its
    // budget atomically. They are answered in any order (one may wait for its budget's turn
    // behind another drain's) and then taken in the plan's order.
    // (The futures are collected first: a closure in the stream's type trips the compiler's
    // check that the spawned drain task is Send.)
    let sends: Vec<_> = attempts
        .iter()
        .enumerate()
        .map(|(i, a)| async move { (i, send(task, a).await) })
        .collect();
    let mut answers: Vec<(usize, EvictionOutcome)> = futures::stream::iter(sends)
        .buffer_unordered(EVICTIONS_IN_FLIGHT)
        .collect()
        .await;
    answers.sort_by_key(|(i, _)| *i);
    let outcomes = answers.into_iter().map(|(_, outcome)| outcome);
    for (attempt, outcome) in attempts.into_iter().zip(outcomes) {
        if outcome == EvictionOutcome::Evicted {
            *progressed_at = now;
        }
        let (pod, grace) = (attempt.pod, attempt.grace);
        let at = answered(task, pods, queue, &paces, attempt, outcome, policy, now).await;
        if queue.evicted(&pod.uid) && said.insert(format!("grace {}", pod.uid)) {
            warn_long_grace(task, pods, pod, grace, now).await;
        }
        if let Some(at) = at {
            wake = wake.min(at);
        }
    }
    if let Some(t) = force_at
        && t > now
        && (queue.refused() > 0 || !plan.budget_blocked.is_empty())
    {
        wake = wake.min(t);
    }
    ctx.claims
        .set(name, BudgetDemand::of(&plan, |uid| !queue.evicted(uid)));
    let mut blockers: Vec<String> = plan.blockers.iter().map(Blocker::to_string).collect();
    let restart_failures = restarts
        .as_ref()
        .map(RolloutRestarts::failures)
        .unwrap_or_default();
    blockers.extend(restart_failures.iter().cloned());
    blockers.extend(queue.blockers().cloned());
    // The first blocker (the one recorded and announced) needs someone when it is not a budget
    // that will allow in time: an opt-out, a refused pod kind, a budget that never allows, a
    // failed rollout restart, a refusal by the API server. The plan's blockers come first, then
    // the restarts', then the queue's refusals.
    let needs_someone = match plan.blockers.first() {
        Some(first) => !matches!(first, Blocker::BudgetRefusing { .. }),
        None => !restart_failures.is_empty() || queue.has_operator_problem(),
    };
    let shown = shown_blocker(
        blockers.first(),
        needs_someone,
        *progressed_at,
        now,
        ctx.cfg.blocked_after,
    );
    if let Some(at) = shown.look_again {
        wake = wake.min(at);
    }
    record_blockers(task, record, shown.blocker, needs_someone).await;
    Pass { ended: None, wake }
}

/// Logs, once per drain, the input about to be evicted on that the drain reads otherwise than
/// its writer may have meant: an opt-out annotation that is not exactly `"true"` (the pod is
/// evicted).
fn say_odd_input(
    node: &str,
    targets: &[(PodRef, Option<i64>)],
    pods: &HashMap<String, Pod>,
    said: &mut std::collections::HashSet<String>,
) {
    for (pod_ref, _) in targets {
        let Some(pod) = pods.get(&pod_ref.uid) else {
            continue;
        };
        for (annotation, value) in crate::pods::opt_outs_not_honoured(pod) {
            if said.insert(format!("opt-out {} {annotation}", pod_ref.uid)) {
                tracing::warn!(node, pod = %pod_ref, annotation, value = %crate::state::shorten(value), "the pod's {annotation} is not \"true\", so it does not opt the pod out and the pod is evicted; set it to \"true\" to keep the pod, or remove it");
            }
        }
    }
}

/// Warns, in the log and as Events on the node and the pod, when the pod just evicted may take
/// longer to stop than the drain has left: its grace period outlasts the deadline.
async fn warn_long_grace(
    task: &Evicting<'_>,
    pods: &HashMap<String, Pod>,
    pod_ref: &PodRef,
    grace: Option<i64>,
    now: Timestamp,
) {
    let left = task.deadline.duration_since(now).unsigned_abs();
    let Some(seconds) = pods
        .get(&pod_ref.uid)
        .and_then(|pod| crate::pods::grace_outlasts(pod, grace, left))
    else {
        return;
    };
    let note = format!(
        "Evicted pod {pod_ref} with a grace period of {seconds}s, longer than the {}s this drain has left: if it uses all of it, the drain fails at its deadline ({}) and retries. rotor does not delete it outside the Eviction API; --max-grace-period caps grace periods.",
        left.as_secs(),
        task.deadline
    );
    tracing::warn!(node = %task.name, pod = %pod_ref, grace_s = seconds, left_s = left.as_secs(), "{note}");
    announce(
        task.ctx,
        task.node,
        NodeEvent::GraceOutlastsDrain,
        note.clone(),
    )
    .await;
    announce_on_pod(task.ctx, pod_ref, NodeEvent::GraceOutlastsDrain, note).await;
}

/// One eviction (or forced deletion) to make.
struct Attempt<'a> {
    pod: &'a PodRef,
    grace: Option<i64>,
    forced: bool,
    /// The budget the eviction is charged to, and what the budget cache says it allows now.
    charged: Option<&'a Charge>,
}

/// The wire call of one attempt: an eviction, or past `--force-after` a deletion.
async fn send(task: &Evicting<'_>, attempt: &Attempt<'_>) -> EvictionOutcome {
    let ctx = task.ctx;
    if attempt.forced {
        return evict::force_delete(&ctx.evict_client, attempt.pod, attempt.grace).await;
    }
    // An eviction charged to a budget writes the budget's status: it waits until no other of
    // rotor's evictions under that budget is on the wire, as two at once conflict and the
    // loser is retried half a second later. A deletion and an uncharged eviction write none.
    let _turn = match attempt.charged {
        Some(charge) => Some(ctx.budget_turns.take(&charge.budget).await),
        None => None,
    };
    evict::evict(&ctx.evict_client, attempt.pod, attempt.grace).await
}

/// Takes the answer to one eviction or forced deletion: feeds it to the queue, and counts it in
/// the metrics, the budget's pace and the gate's in-flight workloads. Returns when to try the
/// pod again, if the task should wake for it.
#[allow(clippy::too_many_arguments)]
async fn answered(
    task: &Evicting<'_>,
    pods: &HashMap<String, Pod>,
    queue: &mut EvictionQueue,
    paces: &BTreeMap<BudgetKey, DisruptionPace>,
    attempt: Attempt<'_>,
    outcome: EvictionOutcome,
    policy: QueuePolicy,
    now: Timestamp,
) -> Option<Timestamp> {
    let (ctx, name, pod) = (task.ctx, task.name.as_str(), attempt.pod);
    if attempt.forced && outcome == EvictionOutcome::Evicted {
        ctx.metrics.eviction("forced");
        tracing::warn!(node = %name, pod = %pod, "deleted the pod past --force-after, against its disruption budget");
        announce(ctx, task.node, NodeEvent::PodForced, format!("Deleted pod {pod} after --force-after: its disruption budget kept refusing eviction.")).await;
    }
    let recorded = queue.record(pod, &outcome, policy, now);
    match &outcome {
        EvictionOutcome::Evicted => {
            if !attempt.forced {
                ctx.metrics.eviction("evicted");
            }
            let budget = attempt.charged.map(|c| c.budget.to_string());
            tracing::info!(node = %name, pod = %pod, budget = budget.as_deref().unwrap_or("none"), "evicted");
            if let Some(Charge { budget, .. }) = attempt.charged
                && !attempt.forced
            {
                let per_round = paces.get(budget).map_or(1, |pace| pace.per_round);
                ctx.pace.evicted(
                    budget,
                    usize::try_from(per_round).unwrap_or(1),
                    std::time::Instant::now(),
                    recorded.waited,
                );
            }
            // The gate waits for this pod's workload to be Ready again before the next node
            // starts. With several drains at once, a workload a budget covers is left to its
            // budget, which already refuses any eviction that would take it below what its
            // owner declared it tolerates, and paces the drains evicting from it.
            let leave_to_budget = ctx.cfg.max_concurrent > 1 && attempt.charged.is_some();
            if let Some(owner) = pods
                .get(&pod.uid)
                .and_then(crate::gate::owner_of)
                .filter(|_| !leave_to_budget)
            {
                ctx.in_flight.record(name, &owner);
            }
        }
        EvictionOutcome::Gone => ctx.metrics.eviction("gone"),
        EvictionOutcome::BudgetRefused { message } => {
            ctx.metrics.eviction("budget");
            if recorded.first_refusal {
                tracing::info!(node = %name, pod = %pod, %message, "disruption budget refuses the eviction; waiting for it to allow one");
            }
        }
        EvictionOutcome::RetryLater { after, message } => {
            ctx.metrics.eviction("retry");
            tracing::info!(node = %name, pod = %pod, %message, retry_in_s = after.as_secs(), "eviction asked to retry later");
        }
        EvictionOutcome::MultipleBudgets { .. } => ctx.metrics.eviction("multiple_budgets"),
        EvictionOutcome::Denied { by, message } => {
            ctx.metrics.eviction("denied");
            let retry_in_s = recorded.backoff.unwrap_or_default().as_secs();
            tracing::warn!(node = %name, pod = %pod, ?by, %message, retry_in_s, "eviction refused: {}", by.remedy());
        }
        EvictionOutcome::Failed { code, message } => {
            ctx.metrics.eviction("failed");
            let retry_in_s = recorded.backoff.unwrap_or_default().as_secs();
            tracing::warn!(node = %name, pod = %pod, ?code, %message, retry_in_s, "eviction failed");
        }
    }
    recorded.wake
}

/// `--restart-single-replica`: looks up the pods of ReplicaSets that `plan` would evict now (or
/// withholds), each when it is due, restarting the rollout of each one-replica Deployment
/// whose strategy starts the new pod first, and says what it did on the node and the pod.
/// Returns whether it looked up any pod (the plan must then be made again).
async fn restart_lone_replicas(
    task: &Evicting<'_>,
    restarts: &mut RolloutRestarts,
    pods: &HashMap<String, Pod>,
    plan: &NodePlan,
    now: Timestamp,
) -> bool {
    let (ctx, name) = (task.ctx, task.name.as_str());
    // The critical tier waits for the ordinary one here too: a critical pod is not restarted
    // before its turn to be evicted.
    let blocked_in_turn = plan
        .budget_blocked
        .iter()
        .map(|(pod, _)| pod)
        .filter(|pod| {
            !plan.holds_critical
                || pods
                    .get(&pod.uid)
                    .is_some_and(|p| eviction_tier(p) == EvictionTier::Ordinary)
        });
    let due: Vec<&Pod> = plan
        .evict_now
        .iter()
        .map(|(pod, _)| pod)
        .chain(blocked_in_turn)
        .chain(&plan.withheld)
        .filter(|pod| restarts.due(&pod.uid, now))
        .filter_map(|pod| pods.get(&pod.uid))
        .filter(|pod| crate::restart::replicaset_of(pod).is_some())
        .collect();
    for pod in &due {
        let pod_ref = PodRef::of(pod);
        let news = match deployments::read(&ctx.client, pod).await {
            Read::NotLone => {
                restarts.not_lone(pod_ref.clone());
                None
            }
            Read::Failed(failure) => Some(restarts.read_failed(pod_ref.clone(), failure, now)),
            Read::Judged {
                deployment,
                judgement,
            } => match restarts.judged(pod_ref.clone(), &deployment, judgement, now) {
                Next::Tell(news) => news,
                Next::Stamp { resource_version } => {
                    let answer =
                        deployments::stamp(&ctx.client, &deployment, &resource_version, now).await;
                    restarts.stamp_answered(&pod_ref.uid, &deployment, answer, now)
                }
            },
        };
        let Some(news) = news else { continue };
        match news {
            News::Restarted { deployment } => {
                ctx.metrics.rollout_restart("restarted");
                tracing::info!(node = %name, pod = %pod_ref, %deployment, "restarted the rollout of the pod's one-replica Deployment instead of evicting the pod; waiting for its new pod to be Ready elsewhere and this one to go");
                let note = format!(
                    "Restarted the rollout of Deployment {deployment} (one replica) instead of evicting pod {pod_ref}: its new pod starts on another node before this one stops."
                );
                announce(ctx, task.node, NodeEvent::RolloutRestarted, note.clone()).await;
                announce_on_pod(ctx, &pod_ref, NodeEvent::RolloutRestarted, note).await;
            }
            News::RollingOut { deployment } => {
                ctx.metrics.rollout_restart("rolling_out");
                tracing::info!(node = %name, pod = %pod_ref, %deployment, "the pod's one-replica Deployment is rolling out already; waiting for the rollout to replace the pod");
            }
            News::Refused {
                deployment,
                refusal,
            } => {
                ctx.metrics.rollout_restart("refused");
                tracing::warn!(node = %name, pod = %pod_ref, %deployment, %refusal, "not restarting the pod's one-replica Deployment; evicting the pod, which leaves it with no replica until the new one is Ready");
                let note = format!(
                    "Evicting pod {pod_ref} of one-replica Deployment {deployment} instead of restarting its rollout: {refusal}. It has no replica until the new pod is Ready."
                );
                announce(
                    ctx,
                    task.node,
                    NodeEvent::RolloutRestartRefused,
                    note.clone(),
                )
                .await;
                announce_on_pod(ctx, &pod_ref, NodeEvent::RolloutRestartRefused, note).await;
            }
            News::Failed { failure } => {
                ctx.metrics.rollout_restart("failed");
                tracing::warn!(node = %name, pod = %pod_ref, %failure, "could not decide whether to restart the pod's Deployment; the pod is not evicted meanwhile");
            }
        }
    }
    !due.is_empty()
}

/// The pods a replace-by time overrides: those that opted out, and those whose budget never
/// allows an eviction (or that several budgets cover), as namespace/name.
fn replace_by_held(pods: &[Pod], plan: &NodePlan) -> Vec<String> {
    let mut held: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| rotor_core::contract::pod_opt_out(&p.metadata).is_some())
        .map(|p| PodRef::of(p).to_string())
        .collect();
    held.extend(plan.budget_blocked.iter().map(|(pod, _)| pod.to_string()));
    held.sort();
    held.dedup();
    held
}

/// Says what the replace-by time is about to override, or has: a Warning on the node and on each
/// pod concerned, and the log.
async fn announce_replace_by(task: &Evicting<'_>, said: &Announcement, pods: &[Pod]) {
    let event = if said.passed() {
        NodeEvent::ReplaceByPassed
    } else {
        NodeEvent::ReplaceByNear
    };
    let note = said.node_note();
    tracing::warn!(node = %task.name, pods = ?said.pods(), "{note}");
    announce(task.ctx, task.node, event, note).await;
    for pod in pods {
        let pod_ref = PodRef::of(pod);
        if said.pods().contains(&pod_ref.to_string()) {
            announce_on_pod(task.ctx, &pod_ref, event, said.pod_note(&task.name)).await;
        }
    }
}

/// What the node's record shows of a pass's first blocker, and when to look again.
#[derive(Debug, PartialEq, Eq)]
struct ShownBlocker<'a> {
    /// The blocker to record (the node turns `blocked`); `None`: the node shows `evicting`.
    blocker: Option<&'a String>,
    /// When a blocker held back now would be shown, if nothing changes before.
    look_again: Option<Timestamp>,
}

/// A blocker that waiting will not clear (`needs_someone`) shows at once. One that only needs
/// time (a budget whose pods evicted before are not Ready again yet) is the budget's ordinary
/// pace: it shows only once the drain has had no eviction accepted for `blocked_after` (since
/// `progressed_at`). Otherwise a drain paced by its budgets would flip between `blocked` and
/// `evicting` at every turn, each flip a node write and a Warning Event about nothing wrong.
fn shown_blocker(
    blocker: Option<&String>,
    needs_someone: bool,
    progressed_at: Timestamp,
    now: Timestamp,
    blocked_after: Duration,
) -> ShownBlocker<'_> {
    let due = later(progressed_at, blocked_after);
    match blocker {
        Some(b) if needs_someone || now >= due => ShownBlocker {
            blocker: Some(b),
            look_again: None,
        },
        Some(_) => ShownBlocker {
            blocker: None,
            look_again: Some(due),
        },
        None => ShownBlocker {
            blocker: None,
            look_again: None,
        },
    }
}

/// Records on the node what blocks its drain (the first blocker), or that it is evicting again;
/// a new blocker is also announced as a Warning Event, and, when it `needs_someone` (waiting
/// will not clear it), to the webhooks as the node stuck.
async fn record_blockers(
    task: &Evicting<'_>,
    record: &mut DrainRecord,
    blocker: Option<&String>,
    needs_someone: bool,
) {
    let next = match blocker {
        Some(b) => apply(record, Transition::Blocked(b.clone())),
        None => apply(record, Transition::Evicting),
    };
    if next == *record {
        return;
    }
    if next.phase == Some(DrainPhase::Blocked) && next.blocker != record.blocker {
        tracing::info!(node = %task.name, blocker = ?next.blocker, "drain blocked");
        let note = next.blocker.clone().unwrap_or_default();
        if needs_someone {
            task.ctx.notifier.send(Notice::new(
                NoticeKind::NodeStuck,
                Some(&task.name),
                note.clone(),
            ));
        }
        announce(task.ctx, task.node, NodeEvent::Blocked, note).await;
    }
    match save(task.nodes, &task.name, &next, record).await {
        Ok(()) => *record = next,
        Err(e) => tracing::warn!(node = %task.name, error = %e, "could not record drain progress"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn node_read(unschedulable: bool, annotations: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "resourceVersion": "42", "annotations": annotations},
            "spec": {"unschedulable": unschedulable}
        }))
        .unwrap()
    }

    fn started_record() -> DrainRecord {
        apply(
            &DrainRecord::default(),
            Transition::Start {
                now: at("2026-11-27T10:00:00Z"),
                drain_timeout: Duration::from_secs(3600),
            },
        )
    }

    #[test]
    fn a_budget_that_only_needs_time_shows_once_nothing_was_evicted_for_blocked_after() {
        let budget =
            "shop/web-1: The disruption budget web needs 3 healthy pods and has 2 currently"
                .to_string();
        let opt_out =
            "pod shop/db-0 has rotor.dev/do-not-disrupt=true and is never evicted".to_string();
        let evicted = at("2026-11-27T10:00:00Z");
        let after = Duration::from_secs(30);
        // The budget's ordinary pace: 5 s after the last accepted eviction the node still shows
        // `evicting`, and the pass looks again when the wait would be worth showing.
        let shown = shown_blocker(
            Some(&budget),
            false,
            evicted,
            at("2026-11-27T10:00:05Z"),
            after,
        );
        assert_eq!(
            shown,
            ShownBlocker {
                blocker: None,
                look_again: Some(at("2026-11-27T10:00:30Z"))
            }
        );
        // 30 s with nothing evicted: the budget is named.
        let shown = shown_blocker(
            Some(&budget),
            false,
            evicted,
            at("2026-11-27T10:00:30Z"),
            after,
        );
        assert_eq!(shown.blocker, Some(&budget));
        assert_eq!(shown.look_again, None);
        // What waiting will not clear is named at once.
        let shown = shown_blocker(
            Some(&opt_out),
            true,
            evicted,
            at("2026-11-27T10:00:01Z"),
            after,
        );
        assert_eq!(shown.blocker, Some(&opt_out));
        // With 0, every wait at once; with no blocker, nothing to show or to look at.
        let shown = shown_blocker(Some(&budget), false, evicted, evicted, Duration::ZERO);
        assert_eq!(shown.blocker, Some(&budget));
        let shown = shown_blocker(None, false, evicted, at("2026-11-27T11:00:00Z"), after);
        assert_eq!(
            shown,
            ShownBlocker {
                blocker: None,
                look_again: None
            }
        );
    }

    #[test]
    fn the_start_and_the_cordon_go_in_one_guarded_write() {
        let node = node_read(false, json!({"rotor.dev/phase": "no-such-phase"}));
        let (next, patch) = start_write(&node, &started_record(), Some(Transition::Evicting));
        let patch = patch.expect("an uncordoned node is written");
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["spec"]["unschedulable"], true);
        let annotations = &patch["metadata"]["annotations"];
        assert_eq!(
            annotations["rotor.dev/phase"], "evicting",
            "garbage is overwritten"
        );
        assert_eq!(annotations["rotor.dev/cordoned-by-rotor"], "true");
        assert_eq!(annotations["rotor.dev/started-at"], "2026-11-27T10:00:00Z");
        assert_eq!(annotations["rotor.dev/deadline"], "2026-11-27T11:00:00Z");
        assert_eq!(next.phase, Some(DrainPhase::Evicting));
        assert!(next.cordoned_by_rotor);
    }

    #[test]
    fn someone_elses_cordon_is_recorded_as_not_rotors_and_left_alone() {
        let node = node_read(true, json!({}));
        let (next, patch) = start_write(&node, &started_record(), None);
        let patch = patch.expect("the start is still recorded");
        assert!(
            patch.get("spec").is_none(),
            "the cordon is not written again"
        );
        assert!(
            patch["metadata"]["annotations"]
                .get("rotor.dev/cordoned-by-rotor")
                .is_none()
        );
        assert_eq!(
            patch["metadata"]["annotations"]["rotor.dev/phase"],
            "cordoned"
        );
        assert!(!next.cordoned_by_rotor);
    }

    #[test]
    fn a_resumed_drain_that_shows_everything_already_writes_nothing() {
        let started = started_record();
        let on_node = apply(
            &apply(&started, Transition::Cordoned { by_rotor: true }),
            Transition::Evicting,
        );
        let annotations: serde_json::Map<String, serde_json::Value> = on_node
            .to_annotations()
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), json!(v))))
            .collect();
        let node = node_read(true, serde_json::Value::Object(annotations));
        let (next, patch) = start_write(&node, &on_node, Some(Transition::Evicting));
        assert_eq!(patch, None);
        assert_eq!(next, on_node);
    }

    #[test]
    fn settle_counts_from_when_the_node_became_unschedulable() {
        let settle = Duration::from_secs(3);
        let now = at("2026-11-22T10:00:00Z");
        // Tainted an hour ago: an empty node is drained at once.
        assert_eq!(
            settled_at(Some(Duration::from_secs(3_600)), now, settle),
            now
        );
        // Tainted a second ago: two more seconds.
        assert_eq!(
            settled_at(Some(Duration::from_secs(1)), now, settle),
            at("2026-11-22T10:00:02Z")
        );
        // Only the cordon, written now: the full settle time.
        assert_eq!(settled_at(None, now, settle), at("2026-11-22T10:00:03Z"));
        assert_eq!(quiet(settle), Duration::from_millis(750));
    }
}
