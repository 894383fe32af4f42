//! One drain's passes over its node's pods, until the node is empty: each pass plans every pod
//! ([`crate::drain::node_plan`]), asks the eviction queue what to do with each
//! ([`crate::drain::eviction`]), sends the evictions ([`crate::drain::eviction_io`]), feeds the
//! answers back, and records what blocks the node ([`crate::drain::pass`] decides what shows).
//! A pass runs when the node's pod watch, a budget change or the next retry time wakes it,
//! never on a fixed poll.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::Api;
use rotor_core::contract::DrainPhase;
use rotor_core::duration::later;

use crate::drain::answers::EvictionOutcome;
use crate::drain::budgets::{BudgetDemand, BudgetKey, DisruptionPace, budget_paces};
use crate::drain::eviction::{EvictionQueue, QueuePolicy};
use crate::drain::eviction_io::EvictionWire;
use crate::drain::node_plan::{Charge, plan_node_with};
use crate::drain::node_pods_io::NodePods;
use crate::drain::outcome::DrainResult;
use crate::drain::pass::{
    Attempt, Settled, choose_sends, force_wake, left_at_deadline, park_at, replace_by_held,
    say_odd_input, settle, sleep_until, what_shows,
};
use crate::drain::pods::{DrainOptions, PodRef};
use crate::drain::published::owner_of;
use crate::drain::replace_by::{Announcement, ReplaceBy};
use crate::drain::restart::RolloutRestarts;
use crate::drain::restart_io::restart_lone_replicas;
use crate::drain::rules::PodRule;
use crate::drain::shared::{Drains, Stops};
use crate::error::DrainError;
use crate::record::events::NodeEvent;
use crate::record::node::{DrainRecord, Transition, apply};
use crate::record::node_io::save;
use crate::record::notify::{Notice, NoticeKind};

/// One drain's evictions, until the node is empty: what the node's eviction needs besides its
/// record (which it updates as the drain goes).
pub(crate) struct Evicting<'a> {
    pub drains: &'a Drains,
    pub nodes: &'a Api<Node>,
    pub node: &'a Node,
    pub name: String,
    pub taint: &'a Taint,
    /// The drain fails at this time.
    pub deadline: Timestamp,
    /// When the drain (this attempt) started: `--force-after` counts from it.
    pub started: Timestamp,
    /// The node's replace-by time, when `--enforce-replace-by` is on and the node has one.
    pub replace_by: Option<ReplaceBy>,
    /// The node is drained no earlier than this (see [`crate::drain::pass::settled_at`]).
    pub settled: Timestamp,
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
    /// Since when a blocker only a person can clear has held the drain, continuously.
    stuck_since: Option<Timestamp>,
    /// The blocker last announced (Event, webhook notice), whether or not its write landed.
    announced_blocker: Option<String>,
}

/// What one pass over the node's pods concluded.
struct Pass {
    /// Drained, or failed at the deadline.
    ended: Option<DrainResult>,
    /// When the next pass is due unless a pod or a budget changes first.
    wake: Timestamp,
}

pub(crate) async fn evict_until_drained(
    task: &Evicting<'_>,
    record: &mut DrainRecord,
    mut pods: NodePods,
    stops: &Stops,
) -> DrainResult {
    let drains = task.drains;
    let mut budget_changes = drains.budgets.changes();
    let mut reported = BlockedPodsGauge {
        metrics: &drains.metrics,
        reported: 0,
    };
    let mut memory = Memory {
        queue: EvictionQueue::default(),
        empty_since: None,
        replace_by: task.replace_by.clone(),
        restarts: drains
            .settings
            .restart_single_replica
            .then(RolloutRestarts::default),
        said: Default::default(),
        progressed_at: Timestamp::now(),
        stuck_since: None,
        // A resumed drain's blocker was announced by whoever wrote it.
        announced_blocker: record.blocker.clone(),
    };
    // A drain resumed past its deadline fails naming the pods left, so its watch gets a while
    // to list them first.
    let list_by = later(Timestamp::now(), FIRST_LIST_GRACE);
    loop {
        let mut wake = task.deadline;
        if let Some(pods) = pods.listed() {
            let pass = evict_pass(task, record, pods, &mut memory).await;
            reported.set(memory.queue.refused() as i64);
            if let Some(ended) = pass.ended {
                return ended;
            }
            wake = pass.wake;
        } else {
            // The deadline holds whether or not the pods were ever listed.
            wake = wake.max(list_by);
            if Timestamp::now() >= wake {
                let error = DrainError::PodsNotListed {
                    deadline: task.deadline,
                };
                return DrainResult::Failed { error };
            }
        }
        let sleep_for = sleep_until(wake, Timestamp::now());
        tokio::select! {
            _ = stops.stop.cancelled() => return DrainResult::Interrupted,
            _ = stops.abort.cancelled() => return DrainResult::Cancelled,
            _ = tokio::time::sleep(sleep_for) => {}
            changed = budget_changes.changed() => if changed.is_ok() {
                memory.queue.budget_moved();
            },
            fed = pods.next(drains) => match fed {
                Ok(gone) => {
                    for uid in &gone {
                        memory.queue.pod_gone(uid);
                    }
                }
                Err(error) => return DrainResult::Failed { error },
            },
        }
    }
}

/// How long a drain's pod watch may take to list the node's pods before a deadline already
/// passed fails the drain without them.
const FIRST_LIST_GRACE: Duration = Duration::from_secs(10);

/// The `budget_blocked_pods` gauge's share of one drain: kept equal to its refused pods, and
/// given back whole when the drain ends, however it ends.
struct BlockedPodsGauge<'a> {
    metrics: &'a crate::metrics::Metrics,
    reported: i64,
}

impl BlockedPodsGauge<'_> {
    fn set(&mut self, refused: i64) {
        if refused != self.reported {
            self.metrics
                .budget_blocked_pods
                .inc_by(refused - self.reported);
            self.reported = refused;
        }
    }
}

impl Drop for BlockedPodsGauge<'_> {
    fn drop(&mut self) {
        self.metrics.budget_blocked_pods.dec_by(self.reported);
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
    let (drains, name) = (task.drains, task.name.as_str());
    let Memory {
        queue,
        empty_since,
        replace_by,
        restarts,
        said,
        progressed_at,
        stuck_since,
        announced_blocker,
    } = memory;
    let now = Timestamp::now();
    let mut wake = task.deadline;
    // The pass reads the watch's pods where they are: a copy of each at every pass was most of
    // a drain's memory churn.
    let budgets = drains.budgets.for_pods(pods.values());
    // Past the node's replace-by time (--enforce-replace-by), opt-outs no longer hold it.
    let past_replace_by = replace_by.as_ref().is_some_and(|d| d.passed(now));
    let options = DrainOptions {
        override_opt_outs: past_replace_by,
        now: Some(now),
        ..drains.settings.options.clone()
    };
    // --restart-single-replica: what a Deployment's rollout replaces is withheld from the plan
    // (never evicted, no budget charged); the node is drained once it is gone.
    // What DrainRules say about each pod; nothing is evicted on a rule not known yet.
    let (rules, namespaces) = drains.rules.now();
    let no_labels = BTreeMap::new();
    let node_labels = task.node.metadata.labels.as_ref().unwrap_or(&no_labels);
    let node_rules = rules
        .as_ref()
        .map(|r| r.on_node(node_labels, namespaces.as_deref()));
    let rule_of = |pod: &Pod| match &node_rules {
        None => PodRule::Unknown,
        Some(rules) => {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            let labels = pod.metadata.labels.as_ref().unwrap_or(&no_labels);
            rules.rule_of(namespace, labels).0
        }
    };
    if now >= task.deadline {
        let error = DrainError::DeadlinePassed {
            deadline: task.deadline,
            pods: left_at_deadline(pods.values(), task.taint, &options, rule_of),
        };
        return Pass {
            ended: Some(DrainResult::Failed { error }),
            wake: now,
        };
    }
    let plan_now = |restarts: &Option<RolloutRestarts>| {
        plan_node_with(
            pods.values(),
            &budgets,
            task.taint,
            &options,
            |uid| restarts.as_ref().is_some_and(|r| r.withheld(uid)),
            rule_of,
        )
    };
    let mut plan = plan_now(restarts);
    if let Some(lone) = restarts.as_mut() {
        lone.keep_only(pods.values());
        if restart_lone_replicas(drains, task.node, lone, pods, &plan, now).await {
            plan = plan_now(restarts);
        }
    }
    if let Some(at) = restarts.as_ref().and_then(|r| r.next_look(now)) {
        wake = wake.min(at);
    }
    // A budget judged too early to say it never allows: look again when it can be said.
    if let Some(at) = plan.judge_budgets_at {
        wake = wake.min(at);
    }
    // Rules not known yet: look again soon (the watches fill them in).
    if !plan.undecided.is_empty() {
        wake = wake.min(later(now, Duration::from_secs(1)));
    }
    for pod in &plan.waiting_completion {
        if said.insert(format!("wait-completed {}", pod.uid)) {
            tracing::info!(node = %name, %pod, "a DrainRule says to wait for this pod to complete; it is not evicted");
        }
    }
    match settle(
        plan.is_drained() && !queue.has_fatal(),
        empty_since,
        task.settled,
        drains.settings.settle,
        now,
    ) {
        Settled::Drained => {
            return Pass {
                ended: Some(DrainResult::Drained),
                wake: now,
            };
        }
        Settled::WaitUntil(at) => wake = wake.min(at),
        Settled::NotEmpty => {}
    }
    if let Some(deadline) = replace_by.as_mut() {
        let held = replace_by_held(pods.values(), &plan);
        if let Some(said) = deadline.announce(now, &held) {
            announce_replace_by(task, &said, pods.values()).await;
        }
        if let Some(at) = deadline.next_wake(now) {
            wake = wake.min(at);
        }
    }
    let force_at = drains.settings.force_after.map(|f| later(task.started, f));
    let policy = QueuePolicy {
        budget_recheck: drains.settings.budget_recheck,
        force_from: force_at,
        // Past the replace-by time, only a budget that never allows is overridden, as
        // --force-after would: the last resort, a deletion with the pod's grace period. A
        // budget that will allow is waited for.
        force_never_allowed_from: replace_by.as_ref().map(ReplaceBy::at),
    };
    // Published before the evictions too: the requests below take a while, and a start chosen
    // meanwhile must see that these pods are about to take their disruptions.
    drains
        .published
        .claims
        .set(name, BudgetDemand::of(&plan, |uid| !queue.evicted(uid)));
    let sends = choose_sends(&plan, queue, policy, now);
    say_odd_input(name, &sends.targets, pods, said);
    for (pod, charged) in &sends.newly_waiting {
        let budget = charged.as_ref().map(|c| &c.budget);
        tracing::info!(node = %name, pod = %pod, budget = ?budget, "its disruption budget allows no eviction now; waiting for it to allow one");
    }
    if let Some(at) = sends.wake {
        wake = wake.min(at);
    }
    let outcomes = send_all(&drains.wire, name, &sends.attempts).await;
    let facts = PassFacts {
        pods,
        paces: &budget_paces(&budgets),
        policy,
    };
    for (attempt, (outcome, answered_at)) in sends.attempts.iter().zip(outcomes) {
        if outcome == EvictionOutcome::Evicted {
            *progressed_at = now;
        }
        let at = answered(task, &facts, queue, attempt, outcome, answered_at).await;
        if queue.evicted(&attempt.pod.uid) && said.insert(format!("grace {}", attempt.pod.uid)) {
            warn_long_grace(task, pods, &attempt.pod, attempt.grace, now).await;
        }
        if let Some(at) = at {
            wake = wake.min(at);
        }
    }
    if let Some(at) = force_wake(force_at, now, queue, &plan) {
        wake = wake.min(at);
    }
    drains
        .published
        .claims
        .set(name, BudgetDemand::of(&plan, |uid| !queue.evicted(uid)));
    let restart_failures = restarts
        .as_ref()
        .map(RolloutRestarts::failures)
        .unwrap_or_default();
    let shown = what_shows(
        &plan,
        &restart_failures,
        queue,
        *progressed_at,
        now,
        drains.settings.blocked_after,
    );
    if let Some(at) = shown.look_again {
        wake = wake.min(at);
    }
    let stuck = shown.needs_someone && shown.blocker.is_some();
    *stuck_since = stuck.then(|| stuck_since.unwrap_or(now));
    let (blocker, needs_someone) = (shown.blocker.clone(), shown.needs_someone);
    record_blockers(task, record, announced_blocker, blocker, needs_someone).await;
    // Parked past park-after: the node gives its slot back rather than hold the pool.
    if let Some(at) = park_at(*stuck_since, drains.settings.park_after) {
        if now >= at {
            return Pass {
                ended: Some(DrainResult::Parked {
                    blocker: shown.blocker.unwrap_or_default(),
                }),
                wake: now,
            };
        }
        wake = wake.min(at);
    }
    Pass { ended: None, wake }
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
        .and_then(|pod| crate::drain::pods::grace_outlasts(pod, grace, left))
    else {
        return;
    };
    let note = format!(
        "Evicted pod {pod_ref} with a grace period of {seconds}s, longer than the {}s this drain has left: if it uses all of it, the drain fails at its deadline ({}) and retries. rotor does not delete it outside the Eviction API; --max-grace-period caps grace periods.",
        left.as_secs(),
        task.deadline
    );
    tracing::warn!(node = %task.name, pod = %pod_ref, grace_s = seconds, left_s = left.as_secs(), "{note}");
    task.drains
        .announcer
        .on_node(task.node, NodeEvent::GraceOutlastsDrain, note.clone())
        .await;
    task.drains
        .announcer
        .on_pod(
            &pod_ref.object_reference(),
            NodeEvent::GraceOutlastsDrain,
            note,
        )
        .await;
}

/// Sends a pass's evictions together and returns their answers in the attempts' order. Each is
/// a round trip to the API server (100 ms and more on a busy one): a node's pods a few at a time
/// would start the last replacement rounds after the first, and the next drain waits for it
/// (the gate). Sending them at once takes nothing from the budgets: evictions under one budget
/// go one after another in its turn, and the API server checks each against its budget
/// atomically, so one the budget no longer allows is refused (429) and waits for it to move.
/// The wire caps what all drains have in flight together
/// ([`crate::drain::eviction_io::EVICTIONS_IN_FLIGHT`]). They are answered in any order (one may
/// wait for its budget's turn behind another drain's). Each answer comes with the time it
/// arrived, and each eviction is logged as its answer arrives: a pass's answers can come seconds
/// apart, and the log's time should be the eviction's, not the pass's end.
async fn send_all(
    wire: &EvictionWire,
    node: &str,
    attempts: &[Attempt],
) -> Vec<(EvictionOutcome, Timestamp)> {
    futures::future::join_all(attempts.iter().map(|a| async move {
        let budget = a.charged.as_ref().map(|c| &c.budget);
        let outcome = wire.send(&a.pod, a.grace, a.forced, budget).await;
        // A forced deletion is said (a warning and an Event) with the rest of its answer.
        if outcome == EvictionOutcome::Evicted && !a.forced {
            let budget = budget.map(ToString::to_string);
            tracing::info!(node = %node, pod = %a.pod, budget = budget.as_deref().unwrap_or("none"), "evicted");
        }
        (outcome, Timestamp::now())
    }))
    .await
}

/// What a pass knows while it takes its evictions' answers.
struct PassFacts<'a> {
    pods: &'a HashMap<String, Pod>,
    paces: &'a BTreeMap<BudgetKey, DisruptionPace>,
    policy: QueuePolicy,
}

/// Takes the answer to one eviction or forced deletion: feeds it to the queue, and counts it in
/// the metrics, the budget's pace and the gate's in-flight workloads. Returns when to try the
/// pod again, if the task should wake for it.
async fn answered(
    task: &Evicting<'_>,
    facts: &PassFacts<'_>,
    queue: &mut EvictionQueue,
    attempt: &Attempt,
    outcome: EvictionOutcome,
    answered_at: Timestamp,
) -> Option<Timestamp> {
    let (drains, name, pod) = (task.drains, task.name.as_str(), &attempt.pod);
    let PassFacts {
        pods,
        paces,
        policy,
    } = *facts;
    if attempt.forced && outcome == EvictionOutcome::Evicted {
        drains.metrics.eviction("forced");
        // Said by what forced it: --force-after, or else the node's replace-by time.
        let (after, why) = if policy.forcing(answered_at) {
            (
                "--force-after",
                "its disruption budget kept refusing eviction",
            )
        } else {
            (
                "the node's replace-by time (--enforce-replace-by)",
                "no disruption budget covering it can ever allow its eviction",
            )
        };
        tracing::warn!(node = %name, pod = %pod, "deleted the pod past {after}, against its disruption budget");
        drains
            .announcer
            .on_node(
                task.node,
                NodeEvent::PodForced,
                format!("Deleted pod {pod} after {after}: {why}."),
            )
            .await;
    }
    // A wait counts from the answer, not from the pass's start: a pass's sends can take seconds
    // on a loaded server, and a Retry-After counted from before the request was sent would send
    // it again early.
    let recorded = queue.record(pod, &outcome, policy, answered_at);
    match &outcome {
        EvictionOutcome::Evicted => {
            if !attempt.forced {
                drains.metrics.eviction("evicted");
            }
            if let Some(Charge { budget, .. }) = &attempt.charged
                && !attempt.forced
            {
                let per_round = paces.get(budget).map_or(1, |pace| pace.per_round);
                drains.published.pace.evicted(
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
            let leave_to_budget = drains.settings.several_at_once && attempt.charged.is_some();
            if let Some(owner) = pods
                .get(&pod.uid)
                .and_then(owner_of)
                .filter(|_| !leave_to_budget)
            {
                drains.published.in_flight.record(name, &owner);
            }
        }
        EvictionOutcome::Gone => drains.metrics.eviction("gone"),
        EvictionOutcome::BudgetRefused { message } => {
            drains.metrics.eviction("budget");
            if recorded.first_refusal {
                tracing::info!(node = %name, pod = %pod, %message, "disruption budget refuses the eviction; waiting for it to allow one");
            }
        }
        EvictionOutcome::RetryLater { after, message } => {
            drains.metrics.eviction("retry");
            tracing::info!(node = %name, pod = %pod, %message, retry_in_s = after.as_secs(), "eviction asked to retry later");
        }
        EvictionOutcome::MultipleBudgets { .. } => drains.metrics.eviction("multiple_budgets"),
        EvictionOutcome::Denied { by, message } => {
            drains.metrics.eviction("denied");
            let retry_in_s = recorded.backoff.unwrap_or_default().as_secs();
            tracing::warn!(node = %name, pod = %pod, ?by, %message, retry_in_s, "eviction refused: {}", by.remedy());
        }
        EvictionOutcome::Failed { code, message } => {
            drains.metrics.eviction("failed");
            let retry_in_s = recorded.backoff.unwrap_or_default().as_secs();
            tracing::warn!(node = %name, pod = %pod, ?code, %message, retry_in_s, "eviction failed");
        }
    }
    recorded.wake
}

/// Says what the replace-by time is about to override, or has: a Warning on the node and on each
/// pod concerned, and the log.
async fn announce_replace_by(
    task: &Evicting<'_>,
    said: &Announcement,
    pods: impl IntoIterator<Item = &Pod>,
) {
    let event = if said.passed() {
        NodeEvent::ReplaceByPassed
    } else {
        NodeEvent::ReplaceByNear
    };
    let note = said.node_note();
    tracing::warn!(node = %task.name, pods = ?said.pods(), "{note}");
    task.drains.announcer.on_node(task.node, event, note).await;
    for pod in pods {
        let pod_ref = PodRef::of(pod);
        if said.pods().contains(&pod_ref.to_string()) {
            task.drains
                .announcer
                .on_pod(
                    &pod_ref.object_reference(),
                    event,
                    said.pod_note(&task.name),
                )
                .await;
        }
    }
}

/// Records on the node what blocks its drain (the first blocker), or that it is evicting again;
/// a new blocker is also announced as a Warning Event, and, when it `needs_someone` (waiting
/// will not clear it), to the webhooks as the node stuck.
async fn record_blockers(
    task: &Evicting<'_>,
    record: &mut DrainRecord,
    announced: &mut Option<String>,
    blocker: Option<String>,
    needs_someone: bool,
) {
    let next = match blocker {
        Some(b) => apply(record, Transition::Blocked(b)),
        None => apply(record, Transition::Evicting),
    };
    if next == *record {
        return;
    }
    // Rule: a blocker is announced once, as it first shows. A save that fails is tried again
    // at the next pass, which does not announce it again (one 503 is not a second Event and
    // stuck notice).
    let new_blocker = next.blocker != *announced;
    *announced = next.blocker.clone();
    if next.phase == Some(DrainPhase::Blocked) && new_blocker {
        tracing::info!(node = %task.name, blocker = ?next.blocker, "drain blocked");
        let note = next.blocker.clone().unwrap_or_default();
        if needs_someone {
            task.drains.announcer.notifier().send(Notice::new(
                NoticeKind::NodeStuck,
                Some(&task.name),
                note.clone(),
            ));
        }
        task.drains
            .announcer
            .on_node(task.node, NodeEvent::Blocked, note)
            .await;
    }
    match save(task.nodes, &task.name, &next, record).await {
        Ok(()) => *record = next,
        Err(e) => tracing::warn!(node = %task.name, error = %e, "could not record drain progress"),
    }
}
