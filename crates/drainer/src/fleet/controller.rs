//! The drainer's control loop: watch nodes (keeping only a small summary of each, and the
//! object only of those that carry the drain taint), and on every change or tick decide what
//! runs. Drains that were recorded as started resume; drains whose taint disappeared are
//! stopped and undone; new drains start only inside a maintenance window, when the gate is
//! open, and within the fleet limits the `fleet` module computes. Every replica runs the loop;
//! it contends for the leader lease while some node needs rotor (or a RotationPolicy's status is
//! out of date) and acts only while it leads. While neither holds it makes no API request
//! besides its watches, leader or not: the leader releases the lease after
//! `--release-lease-after`.
//!
//! The decisions are in `machine.rs` (a state machine, no I/O); this module only carries the
//! watches' events to it and runs its commands. `start_gate` holds the next start until the
//! cluster has absorbed the last drains; `choice` orders the candidates by what their pods'
//! budgets allow now; both read the cluster, so the shell asks them between the machine's steps.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::watcher;
use rotor_core::find_drain_taint;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::drain::outcome::{DrainOutcome, DrainResult};
use crate::drain::pods::DrainOptions;
use crate::drain::published::Published;
use crate::drain::shared::{Drains, Stops};
use crate::drain::surge::AheadQueue;
use crate::drain::surge_io::{release, release_ahead, release_if_held, reserve_ahead};
use crate::drain::task::drain_node;
use crate::error::RunError;
use crate::fleet::gate::GateConfig;
use crate::fleet::health::HealthConfig;
use crate::fleet::held::HeldReason;
use crate::fleet::node_labels::LabelStrings;
use crate::fleet::pools::{DrainPolicy, FlagDrain};
use crate::fleet::starts::{FleetLimits, NodeView, concurrency_note};
use crate::fleet::window::MaintenanceWindow;
use crate::fleet::workloads::{WorkloadIndex, WorkloadUpdate};
use crate::leader::election::Election;
use crate::metrics::{Metrics, PhaseLabel};
use crate::record::events::NodeEvent;
use crate::record::events_io::Announcer;
use crate::record::node::Intent;
use crate::record::node_io::{clean_up, forget_cordon, save};
use crate::record::notify::{Notice, NoticeKind};
use crate::record::rotation::{Enforced, Halt, RecordRef};
use crate::record::rotation_io::{watch_halt, write_enforced, write_halt, write_waiting};

use super::choice::DemandCache;
use super::choice_io::{ChoiceReads, rechoose};
use super::gate_io::{Gate, GateReads};
use super::health_io::HealthGate;
use super::held_log::HeldLog;
use super::machine::{
    Command, EndRewrite, Event, FlagPool, LeaseCommand, Machine, MachineConfig, Need, StartRound,
};
use super::tainted_nodes::TaintedNodes;
use crate::watch_backoff::WatchBackoffExt;

/// The loop's settings, from the flags (`crate::config`).
#[derive(Clone, Debug)]
pub struct FleetSettings {
    /// `--max-concurrent`, `--max-unavailable`, `--node-startup-grace`.
    pub limits: FleetLimits,
    /// `--window`: when drains may start.
    pub windows: Vec<MaintenanceWindow>,
    /// `--require-approval`.
    pub require_approval: bool,
    /// `--halt-after`: the circuit breaker, when on.
    pub halt_after: Option<Duration>,
    /// `--halt-stops-drains`.
    pub halt_stops_drains: bool,
    /// `--surge-ahead`: how many nodes next in line get room made ahead (0 without `--surge`).
    pub surge_ahead: usize,
    /// `--pending-grace` and what the gate ignores.
    pub gate: GateConfig,
    /// `--gate-timeout`.
    pub gate_timeout: Duration,
    /// The health gate, when a check is set.
    pub health: Option<HealthConfig>,
    /// The drain's pod filters: candidates are weighed as their drains would plan them.
    pub options: DrainOptions,
    /// What RotationPolicies' drain settings fall back to.
    pub flag_drain: FlagDrain,
    /// Watch RotationPolicies (off only in tests without the CRD's RBAC).
    pub watch_policies: bool,
}

/// What the loop over nodes works with, each handle for one job.
pub struct Fleet {
    /// The watches (nodes, workloads, the rotation record) and the leader's reads and writes.
    pub client: kube::Client,
    pub settings: FleetSettings,
    pub metrics: Metrics,
    /// The rotation's record beside the Lease (halt, health gate, waiting nodes).
    pub rotation: RecordRef,
    /// Events on nodes, and the webhooks.
    pub announcer: Announcer,
    /// What the drain tasks share; the loop starts them with it.
    pub drains: Arc<Drains>,
    /// What the running drains publish (their claims on the budgets, what they evicted).
    pub published: Arc<Published>,
    /// The loop's tasks beside the drains (record writes, Events, room made ahead): owned,
    /// so that a shutdown waits for them.
    pub tasks: TaskTracker,
}

/// Runs the control loop until `stop`. Every replica runs it: it watches, contends for the lease
/// in `election` while some node needs rotor, acts only while it leads, and releases the lease
/// once no node has needed rotor for `release_after` and nothing it started is still running.
pub async fn run(
    fleet: Arc<Fleet>,
    election: &mut Election,
    release_after: Duration,
    stop: CancellationToken,
) -> Result<(), RunError> {
    let mut node_events = watch_nodes(&fleet.client);
    let mut workload_events = super::workloads_io::watch(fleet.client.clone()).boxed();
    // The circuit breaker's halt lives in the rotation record; every replica follows it, so
    // that a new leader honours a halt and a resume reaches whoever leads.
    let mut halt_events = match fleet.settings.halt_after {
        Some(_) => watch_halt(fleet.client.clone(), &fleet.rotation).boxed(),
        None => futures::stream::pending().boxed(),
    };
    let mut policy_events = if fleet.settings.watch_policies {
        super::pools_io::watch(fleet.client.clone()).boxed()
    } else {
        futures::stream::pending().boxed()
    };
    let mut leading_changes = election.leading.clone();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let mut machine = Machine::new(MachineConfig {
        limits: fleet.settings.limits.clone(),
        flags: FlagPool {
            windows: fleet.settings.windows.clone(),
            require_approval: fleet.settings.require_approval,
            drain: fleet.settings.flag_drain.clone(),
        },
        release_after,
        reserve_ahead: fleet.settings.surge_ahead,
        halt_after: fleet.settings.halt_after,
        halt_stops_drains: fleet.settings.halt_stops_drains,
        watch_policies: fleet.settings.watch_policies,
    });
    let mut shell = Shell {
        fleet: fleet.clone(),
        stop: stop.clone(),
        tasks: JoinSet::new(),
        stoppers: HashMap::new(),
        // A new leader does not know what the last drains evicted (that was in the previous
        // leader's memory), so even its first start waits for the gate: the workload index
        // listed, and no pod unschedulable past --pending-grace.
        gate: Gate::new_term(),
        workloads: WorkloadIndex::default(),
        demand_cache: DemandCache::default(),
        tainted_nodes: TaintedNodes::default(),
        held_log: HeldLog::default(),
        ahead: AheadQueue::default(),
        gate_reads: GateReads {
            client: fleet.client.clone(),
            published: fleet.published.clone(),
            metrics: fleet.metrics.clone(),
            cfg: fleet.settings.gate.clone(),
            timeout: fleet.settings.gate_timeout,
            streaming: std::sync::atomic::AtomicBool::new(true),
        },
        choice_reads: ChoiceReads {
            client: fleet.client.clone(),
            pod_watches: fleet.drains.pod_watches.clone(),
            budgets: fleet.drains.budgets.clone(),
            published: fleet.published.clone(),
            options: fleet.settings.options.clone(),
        },
        health: match fleet.settings.health.clone() {
            Some(cfg) => Some(
                HealthGate::new(
                    cfg,
                    fleet.metrics.clone(),
                    fleet.client.clone(),
                    fleet.rotation.clone(),
                    fleet.tasks.clone(),
                )
                .map_err(RunError::HealthClient)?,
            ),
            None => None,
        },
    };
    // The node watch's initial list, gathered until it is complete.
    let mut listing: Vec<NodeView> = Vec::new();
    // The nodes' label strings, each kept once for all of them.
    let mut label_strings = LabelStrings::default();
    // The nodes are listed once the policies are known, so that the list keeps the label keys
    // their selectors need and is not read twice; at most this long, should the policy watch
    // keep failing (the tick polls again each second).
    let policies_awaited_until = Instant::now() + POLICIES_BEFORE_NODES;
    // Node events that arrived while the starts were weighed, taken before the watch's next.
    let mut stashed_node_events = VecDeque::new();
    let mut node_events_ended = false;
    loop {
        let burst_over = machine.burst_settles_at(Instant::now());
        let read_nodes = machine.policies_known() || Instant::now() >= policies_awaited_until;
        let event = tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => None,
            changed = leading_changes.changed() => if changed.is_err() {
                return Err(RunError::ElectionEnded);
            } else { None },
            _ = tokio::time::sleep_until(burst_over.unwrap_or_else(Instant::now).into()), if burst_over.is_some() => None,
            Some(read) = halt_events.next() => match read {
                Ok(state) => Some(Event::HaltRead(state)),
                Err(e) => { tracing::warn!(error = %e, configmap = %fleet.rotation.name, "watching the rotation record failed; it restarts with back-off (a halt or resume is seen once it does)"); None }
            },
            Some(event) = policy_events.next() => Some(event),
            Some(update) = workload_events.next() => {
                if let WorkloadUpdate::Failed { kind, error, .. } = &update {
                    tracing::warn!(kind = kind.as_str(), %error, "workload watch failed; it restarts with back-off, and the gate holds meanwhile");
                }
                let changed = shell.workloads.apply(update);
                // Only a change the held gate waits on is worth a pass over the fleet.
                if !shell.gate.waits_on(&changed, &shell.workloads) {
                    continue;
                }
                None
            }
            ev = next_node_event(&mut stashed_node_events, &mut node_events), if read_nodes => {
                if let Some(Ok(event)) = &ev {
                    shell.tainted_nodes.apply(event);
                }
                match ev {
                Some(Ok(watcher::Event::Init)) => { listing.clear(); continue }
                Some(Ok(watcher::Event::InitApply(n))) => { listing.push(NodeView::with_strings(&n, machine.label_keys(), &mut label_strings)); continue }
                Some(Ok(watcher::Event::InitDone)) => {
                    if !machine.listed()
                        && let Some(note) = concurrency_note(&fleet.settings.limits, listing.len())
                    {
                        tracing::warn!("{note}");
                    }
                    Some(Event::NodesListed(std::mem::take(&mut listing)))
                }
                Some(Ok(watcher::Event::Apply(n))) => Some(Event::NodeApplied(NodeView::with_strings(&n, machine.label_keys(), &mut label_strings))),
                Some(Ok(watcher::Event::Delete(n))) => Some(Event::NodeDeleted(n.metadata.name.unwrap_or_default())),
                Some(Err(e)) => { tracing::warn!(error = %e, "node watch failed; it restarts with back-off"); None }
                None => return Err(RunError::NodeWatchEnded),
            }},
            Some(done) = shell.tasks.join_next() => Some(shell.task_ended(done.map_err(RunError::TaskPanicked)?)),
        };
        if let Some(event) = event {
            for command in machine.apply(event, Instant::now()) {
                shell.run(command).await;
            }
            if machine.take_read_nodes_again() {
                // A new watch starts with a full list; the machine holds starts until it ends.
                tracing::info!(keys = %machine.label_keys().describe(), "a RotationPolicy selects nodes by a label the drainer did not keep: it reads every node again, and no drain starts or resumes until it has");
                node_events = watch_nodes(&fleet.client);
                (stashed_node_events, node_events_ended) = (VecDeque::new(), false);
                listing.clear();
            }
            // Every replica reports the halt it knows, so the figure survives a failover.
            fleet.metrics.halted.set(i64::from(machine.halted()));
            if let Some(room) = &fleet.drains.surge {
                room.set_fleet_size(machine.node_count());
            }
        }
        if !machine.listed() {
            continue;
        }
        let lease = machine.lease_step(
            Instant::now(),
            Timestamp::now(),
            election.is_contending(),
            election.is_leading(),
        );
        for command in lease {
            Shell::lease(election, command).await;
        }
        // The one reading of the election that decides whether this pass acts.
        let (commands, round) =
            machine.act(Instant::now(), Timestamp::now(), election.is_leading());
        for command in commands {
            shell.run(command).await;
        }
        let Some(round) = round else {
            // Only the leader asks the health checks: a replica that is not leading (any more)
            // reports the gate open, so that `min` over replicas is the leader's verdict.
            fleet.metrics.health_gate_open.set(1);
            shell.look_after_surge(election.is_leading());
            continue;
        };
        // Weighing may wait on the API for minutes (the gate's read of pending pods on a
        // starved API server). Meanwhile a shutdown or a lost lease ends it, and a node whose
        // taint went has its drain stopped at once; node events wait for the next passes.
        let aborts = shell.abort_tokens();
        let weighed = {
            let weighing = shell.weigh_starts(&machine, round);
            tokio::pin!(weighing);
            loop {
                tokio::select! {
                    round = &mut weighing => break Some(round),
                    _ = stop.cancelled() => break None,
                    changed = leading_changes.changed() => if changed.is_err() || !election.is_leading() {
                        break None;
                    },
                    ev = node_events.next(), if read_nodes && !node_events_ended => {
                        match &ev {
                            Some(Ok(event)) => abort_if_untainted(event, &aborts),
                            None => node_events_ended = true,
                            Some(Err(_)) => {}
                        }
                        stashed_node_events.push_back(ev);
                    }
                }
            }
        };
        // The gate and the choice may have waited on the API: act only if still leading.
        let Some(round) = weighed else { continue };
        if stop.is_cancelled() || !election.is_leading() {
            continue;
        }
        for command in machine.start(round, Timestamp::now()) {
            shell.run(command).await;
        }
        // After the starts: a drain this pass started holds the room made ahead off.
        shell.look_after_surge(election.is_leading());
    }
    // Shutdown: let running drains stop where they are; their state stays on the nodes.
    while shell.tasks.join_next().await.is_some() {}
    Ok(())
}

type NodeEvents = futures::stream::BoxStream<'static, Result<watcher::Event<Node>, watcher::Error>>;
/// One answer of the node watch; `None` when it ended.
type NodeWatchItem = Option<Result<watcher::Event<Node>, watcher::Error>>;

/// The next node event: one kept while the starts were weighed, else the watch's next.
async fn next_node_event(
    stashed: &mut VecDeque<NodeWatchItem>,
    events: &mut NodeEvents,
) -> NodeWatchItem {
    match stashed.pop_front() {
        Some(kept) => kept,
        None => events.next().await,
    }
}

/// Stops the drain of a node that this event shows without the drain taint, or gone, as the
/// machine's [`Command::Abort`] would at the next pass: seen while the starts are weighed.
fn abort_if_untainted(event: &watcher::Event<Node>, aborts: &HashMap<String, CancellationToken>) {
    let gone = match event {
        watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
            find_drain_taint(n).is_none().then_some(n)
        }
        watcher::Event::Delete(n) => Some(n),
        watcher::Event::Init | watcher::Event::InitDone => None,
    };
    if let Some(abort) = gone
        .and_then(|n| n.metadata.name.as_deref())
        .and_then(|name| aborts.get(name))
    {
        abort.cancel();
    }
}

/// How long the first list of the nodes waits for the policy watch's answer.
const POLICIES_BEFORE_NODES: Duration = Duration::from_secs(10);

/// Every node, listed then watched. Small pages: each listed Node is summarised and dropped at
/// once, so the page is the peak (500 full Nodes with their image lists are several MiB at
/// 5,000 nodes).
fn watch_nodes(client: &kube::Client) -> NodeEvents {
    let nodes: Api<Node> = Api::all(client.clone());
    watcher(nodes, watcher::Config::default().page_size(100))
        .watch_backoff()
        .boxed()
}

/// What the shell holds besides the machine: the tasks it runs, and the parts of the decision
/// that read the cluster (the start gate, the workload index it reads, the demand cache).
struct Shell {
    fleet: Arc<Fleet>,
    stop: CancellationToken,
    tasks: JoinSet<(String, DrainOutcome)>,
    /// How to stop each running drain.
    stoppers: HashMap<String, Stops>,
    gate: Gate,
    gate_reads: GateReads,
    choice_reads: ChoiceReads,
    workloads: WorkloadIndex,
    demand_cache: DemandCache,
    tainted_nodes: TaintedNodes,
    held_log: HeldLog,
    /// `--surge`: the nodes next in line whose room made ahead waits while a drain's room
    /// changes hands (a drain just started, or one freed its room lately).
    ahead: AheadQueue,
    /// `--health-prometheus`, `--health-url`: none when no check is set.
    health: Option<HealthGate>,
}

impl Shell {
    /// Makes room ahead for `node`, beside the drains: best effort, a failure only means the
    /// node's own drain makes its room when it starts.
    fn make_room_ahead(&mut self, node: String) {
        if let Some(room) = self.fleet.drains.surge.clone() {
            room.want_ahead(&node);
            self.fleet
                .tasks
                .spawn(async move { reserve_ahead(&room, &node).await });
        }
    }

    /// Makes the room ahead that waited while a drain's room changed hands, once it may be
    /// made, and tries again to remove the rooms whose removal failed, when due; only while
    /// `leading`.
    fn look_after_surge(&mut self, leading: bool) {
        let quiet = match &self.fleet.drains.surge {
            Some(room) if leading => {
                if room.removals_due(Instant::now()) {
                    let room = room.clone();
                    self.fleet
                        .tasks
                        .spawn(async move { room.retry_removals().await });
                }
                room.quiet_for_room_ahead()
            }
            _ => return,
        };
        for node in self.ahead.due(quiet) {
            self.make_room_ahead(node);
        }
    }

    /// The handles a drain runs with: the flags' settings, or its policy's over them.
    fn drains_for(&self, policy: Option<&DrainPolicy>) -> Arc<Drains> {
        let base = &self.fleet.drains;
        match policy {
            None => base.clone(),
            Some(policy) => {
                Arc::new(base.with_settings(policy.drain.over(&base.settings), policy.surge))
            }
        }
    }

    /// A task ended: withdraw what it published for the controller, as an event.
    fn task_ended(&mut self, (node, outcome): (String, DrainOutcome)) -> Event {
        self.stoppers.remove(&node);
        self.fleet.published.claims.take(&node);
        // A drain that ended before its evictions (refused, held, its node gone) never took
        // the watch the choice kept for it.
        self.fleet.drains.pod_watches.kept().release(&node);
        // Whatever the end, what the drain evicted must be Ready again before the next start:
        // its share of the disruption no longer counts as in flight.
        let evicted = self
            .fleet
            .published
            .in_flight
            .take(&node)
            .map(|counts| counts.into_keys().collect())
            .unwrap_or_default();
        if let DrainResult::Skipped { why } = &outcome.result {
            tracing::debug!(%node, why, "drain task skipped");
        }
        Event::TaskEnded {
            node,
            result: outcome.result,
            record: outcome.record,
            evicted,
        }
    }

    /// Writes the halt into the rotation record in the background. A failure is logged; the
    /// machine sends it again until the record's watch shows it.
    fn spawn_halt_write(&self, halt: Halt) {
        let (client, record) = (self.fleet.client.clone(), self.fleet.rotation.clone());
        self.fleet.tasks.spawn(async move {
            if let Err(e) = write_halt(&client, &record, &halt).await {
                tracing::error!(configmap = %record.name, namespace = %record.namespace, error = %e, "could not write the halt into the rotation record (written again in a few seconds, this replica holding the leader lease meanwhile): until it lands, `status` does not show the halt and a new leader would not know of it (check the drainer's RBAC on configmaps)");
            }
        });
    }

    /// Runs the lease step's commands.
    async fn lease(election: &mut Election, command: LeaseCommand) {
        match command {
            LeaseCommand::Contend(Need::Node(node, why)) => {
                tracing::info!(%node, why, "a node needs rotor: contending for the leader lease");
                election.contend();
            }
            LeaseCommand::Contend(Need::HaltRecord) => {
                tracing::warn!(
                    "the rotation is halted here but its record does not show the halt yet: holding the leader lease until it does"
                );
                election.contend();
            }
            LeaseCommand::Contend(Need::EndRecord(node)) => {
                tracing::warn!(%node, "the node does not show its drain's end yet: holding the leader lease until it does");
                election.contend();
            }
            LeaseCommand::Contend(Need::PolicyStatus(policy)) => {
                tracing::info!(%policy, "a RotationPolicy's status is out of date: contending for the leader lease to write it");
                election.contend();
            }
            LeaseCommand::StandDown { leading, idle } => {
                if leading {
                    tracing::info!(
                        idle_secs = idle.as_secs(),
                        "nothing needs a leader (no node needs rotor, every RotationPolicy's status is up to date): standing down, giving the leader lease back"
                    );
                }
                // Returns once this replica no longer leads and the lease is released.
                election.stand_down().await;
            }
            LeaseCommand::StandBy { waiting } => {
                if waiting.is_empty() {
                    tracing::info!(
                        "no node needs rotor: standing by without the leader lease, watching for drain taints"
                    );
                } else {
                    let shown: Vec<&str> = waiting.iter().take(5).map(String::as_str).collect();
                    tracing::info!(
                        waiting = waiting.len(),
                        nodes = %shown.join(", "),
                        "no tainted node can start now: standing by without the leader lease until one can (a window opens, a RotationPolicy lets it, a retry falls due, an opt-out goes)"
                    );
                }
            }
        }
    }

    /// Each running drain's abort, for use while the shell is busy.
    fn abort_tokens(&self) -> HashMap<String, CancellationToken> {
        self.stoppers
            .iter()
            .map(|(node, stops)| (node.clone(), stops.abort.clone()))
            .collect()
    }

    /// Asks the start gate, then the budget-aware choice, about the machine's round of starts.
    async fn weigh_starts(&mut self, machine: &Machine, mut round: StartRound) -> StartRound {
        if !round.start.is_empty() && self.gate.armed() {
            // Checked on the pass after a drain finishes, then on every change to a workload it
            // waits for (from the watches, so it opens as soon as the last one is Ready) and on
            // the tick.
            if let Err(why) = self
                .gate
                .check(&self.gate_reads, &self.workloads, round.elapsed)
                .await
            {
                round.gate_held = self.gate.holding();
                round.hold(HeldReason::Gate(why));
            }
        }
        // The cluster has absorbed the last drains; the world outside must be healthy too.
        // Asked only when something would start, so an idle drainer sends nothing.
        if !round.start.is_empty()
            && let Some(health) = &mut self.health
            && let Err(why) = health.check().await
        {
            round.hold(HeldReason::Health(why));
        }
        // A slot is free and the gate is open: if there is a choice, prefer the candidates whose
        // pods' budgets let a drain proceed now over one that would sit in the slot waiting.
        if !round.start.is_empty() {
            let limits = self.fleet.settings.limits.clone();
            let starting = round.start.len();
            // The same pools' rules and windows as the first decision: the choice only orders.
            let rules = machine.pool_rules(round.wall, &round.counted_beside);
            if let Some(decision) = rechoose(
                &self.choice_reads,
                &mut self.demand_cache,
                &mut round.view,
                &limits,
                rules,
                starting,
            )
            .await
            {
                machine.take_decision(&mut round, decision);
            }
        }
        self.held_log.update(round.held.clone(), Instant::now());
        if let Some(held) = self.held_log.take_due_write(Instant::now()) {
            // For `status`: why each waiting node waits, beside the drains' own records.
            let waiting = held
                .iter()
                .map(|(node, why)| (node.clone(), why.to_string()))
                .collect();
            let (client, record) = (self.fleet.client.clone(), self.fleet.rotation.clone());
            self.fleet.tasks.spawn(async move {
                if let Err(e) = write_waiting(&client, &record, &waiting).await {
                    tracing::debug!(error = %e, "could not write the waiting nodes into the rotation record");
                }
            });
        }
        round
    }

    /// Runs one of the machine's commands.
    async fn run(&mut self, command: Command) {
        match command {
            Command::ForgetDemand(node) => self.demand_cache.forget(&node),
            Command::CountDrainEnd(how) => self.fleet.metrics.drain_finished(how),
            Command::ArmGate(owners) => self.gate.arm(owners),
            Command::NewTerm => {
                tracing::info!("leading: starting to drain tainted nodes");
                self.gate = std::mem::take(&mut self.gate).next_term();
                self.demand_cache = DemandCache::default();
                if let Some(health) = &mut self.health {
                    health.new_term();
                }
                // For `status`: a halt or closed gate an earlier leader recorded binds this
                // one only with --halt-after or health checks.
                let enforced = Enforced {
                    halt: self.fleet.settings.halt_after.is_some(),
                    health_gate: self.health.is_some(),
                };
                let (client, record) = (self.fleet.client.clone(), self.fleet.rotation.clone());
                self.fleet.tasks.spawn(async move {
                    if let Err(e) = write_enforced(&client, &record, enforced).await {
                        tracing::warn!(configmap = %record.name, namespace = %record.namespace, error = %e, "could not write which holds this leader enforces into the rotation record; `rotor-drainer status` may show a halt or closed gate as enforced or not as the previous leader did (check the drainer's RBAC on configmaps)");
                    }
                });
                // A previous leader may have stopped between creating placeholders and
                // removing them; those of nodes no longer draining go now. The earlier term's
                // room made ahead goes back first, before this term makes any (which the
                // sweep spares).
                self.ahead.clear();
                if let Some(room) = self.fleet.drains.surge.clone() {
                    room.new_term().await;
                    self.fleet.tasks.spawn(async move { room.sweep().await });
                }
            }
            Command::PublishPhases(counts) => {
                for (phase, count) in counts {
                    self.fleet
                        .metrics
                        .nodes_by_phase
                        .get_or_create(&PhaseLabel {
                            phase: phase.to_string(),
                        })
                        .set(count);
                }
            }
            Command::Abort(node) => {
                if let Some(stoppers) = self.stoppers.get(&node) {
                    stoppers.abort.cancel();
                }
            }
            Command::Pause(node) => {
                tracing::warn!(%node, "rotation halted: stopping this drain where it is (--halt-stops-drains); it resumes after `rotor-drainer resume`");
                if let Some(stoppers) = self.stoppers.get(&node) {
                    stoppers.stop.cancel();
                }
            }
            Command::Halt(halt) => {
                tracing::error!(reason = %halt.reason, "rotation halted: no drain starts until `rotor-drainer resume` (fix the cause first)");
                self.fleet.announcer.notifier().send(Notice::new(
                    NoticeKind::RotationHalted,
                    None,
                    format!(
                        "{}; no drain starts until `rotor-drainer resume`",
                        halt.reason
                    ),
                ));
                self.spawn_halt_write(halt);
            }
            Command::RewriteEnd(rewrite) => {
                tracing::warn!(node = %rewrite.node, "the node does not show its drain's end yet: writing it again");
                let nodes: Api<Node> = Api::all(self.fleet.client.clone());
                self.fleet.tasks.spawn(async move {
                    let EndRewrite { node, end, over } = rewrite;
                    if let Err(e) = save(&nodes, &node, &end, &over).await {
                        tracing::warn!(%node, error = %e, "could not write the drain's end on the node; tried again later (check admission webhooks on nodes and the drainer's RBAC)");
                    }
                });
            }
            Command::RewriteHalt(halt) => {
                tracing::warn!(configmap = %self.fleet.rotation.name, "the rotation record does not show the halt yet: writing it again");
                self.spawn_halt_write(halt);
            }
            Command::WritePolicyStatus { policy, status } => {
                let client = self.fleet.client.clone();
                self.fleet.tasks.spawn(async move {
                    if let Err(e) = super::pools_io::write_status(client, &policy, &status).await {
                        tracing::warn!(%policy, error = %e, "could not write the RotationPolicy's status (tried again in 30 s, then less and less often, while it is out of date; check the drainer's RBAC on rotationpolicies/status)");
                    }
                });
            }
            Command::Notify { kind, detail } => {
                self.fleet
                    .announcer
                    .notifier()
                    .send(Notice::new(kind, None, detail));
            }
            Command::Resumed => {
                tracing::info!("rotation resumed: drains may start again");
                self.gate.restart_clock();
            }
            Command::CleanUp(node) => {
                let fleet = self.fleet.clone();
                self.tasks.spawn(async move {
                    // The record as it stands after, so the loop need not wait for the watch
                    // to see the clean-up (and send another).
                    let record = match clean_up(&fleet.client, &fleet.announcer, &node).await {
                        Ok(after) => Some(after),
                        Err(e) => {
                            tracing::warn!(%node, error = %e, "could not undo rotor's drain state");
                            None
                        }
                    };
                    // Placeholders are rotor's drain state too (a drain interrupted by a
                    // restart leaves them until its node is cleaned up or drained).
                    if let Some(room) = &fleet.drains.surge {
                        release(room, &node).await;
                    }
                    let outcome = DrainOutcome {
                        result: DrainResult::NodeGone,
                        record,
                    };
                    (node, outcome)
                });
            }
            Command::ForgetCordon(node) => {
                let client = self.fleet.client.clone();
                self.tasks.spawn(async move {
                    let record = match forget_cordon(&client, &node).await {
                        Ok(Some(record)) => {
                            tracing::info!(%node, "the node was uncordoned by someone else: rotor no longer counts a cordon on it as its own");
                            Some(record)
                        }
                        Ok(None) => None,
                        Err(e) => {
                            tracing::warn!(%node, error = %e, "could not record that rotor's cordon was undone by someone else (tried again at the next pass)");
                            None
                        }
                    };
                    let outcome = DrainOutcome {
                        result: DrainResult::Skipped {
                            why: "rotor's cordon was undone by someone else",
                        },
                        record,
                    };
                    (node, outcome)
                });
            }
            // Made at once, or once no drain's room is changing hands ([`AheadQueue`]).
            Command::ReserveAhead(node) => {
                if let Some(room) = &self.fleet.drains.surge
                    && let Some(node) = self.ahead.reserve(node, room.quiet_for_room_ahead())
                {
                    self.make_room_ahead(node);
                }
            }
            // Beside the drains, like every Event: a failure is only logged.
            Command::AnnounceHeld { node, why } => {
                tracing::info!(%node, %why, "drain held");
                let (client, announcer) = (self.fleet.client.clone(), self.fleet.announcer.clone());
                self.fleet.tasks.spawn(async move {
                    let nodes: Api<Node> = Api::all(client);
                    match nodes.get_opt(&node).await {
                        Ok(Some(object)) => {
                            announcer.on_node(&object, NodeEvent::HeldByHooks, why).await
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(%node, error = %e, "could not read the node to post its DrainHeld Event")
                        }
                    }
                });
            }
            // Room still waiting to be made ahead is only forgotten.
            Command::ReleaseRoom(node) => {
                if let Some(room) = self.fleet.drains.surge.clone() {
                    self.fleet
                        .tasks
                        .spawn(async move { release_if_held(&room, &node).await });
                }
            }
            Command::ReleaseAhead(node) => {
                if let Some(room) = self.fleet.drains.surge.clone() {
                    room.unwant_ahead(&node);
                    if self.ahead.release(&node) {
                        self.fleet
                            .tasks
                            .spawn(async move { release_ahead(&room, &node).await });
                    }
                }
            }
            Command::Drain {
                node,
                intent,
                tainted_since,
                policy,
            } => {
                self.ahead.started(&node);
                // Before the same pass asks for room ahead: this drain may free its room now.
                if let Some(room) = &self.fleet.drains.surge {
                    room.drain_starting();
                }
                // Until the drain publishes its own claims (after listing its pods), the demand
                // it was chosen with stands for them, so the next choice does not overlook it.
                if let Some(demand) = self.demand_cache.take(&node) {
                    self.fleet.published.claims.set(&node, demand);
                }
                // The pod watch the choice weighed it with, kept for this drain to go on with.
                self.fleet.drains.pod_watches.kept().claim(&node);
                let stops = Stops {
                    abort: CancellationToken::new(),
                    // A halt stops the drain as a shutdown would: where it is, state kept.
                    stop: self.stop.child_token(),
                };
                self.stoppers.insert(node.clone(), stops.clone());
                let drains = self.drains_for(policy.as_ref());
                // A fresh start begins from the watch's copy of its node (its start write is
                // guarded by it); a resume reads the node, whose record says where it stands.
                let seen = match intent {
                    Intent::Start => self.tainted_nodes.get(&node),
                    Intent::Resume => None,
                };
                self.tasks.spawn(async move {
                    let outcome =
                        drain_node(drains, node.clone(), intent, tainted_since, seen, stops).await;
                    (node, outcome)
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, tainted: bool) -> Node {
        let taints = tainted.then(|| {
            vec![rotor_core::drain_taint(
                rotor_core::DrainReason::Manual,
                rotor_core::TaintEffect::NoSchedule,
            )]
        });
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"taints": taints},
        }))
        .unwrap()
    }

    #[test]
    fn a_drain_is_stopped_by_its_nodes_loss_of_the_taint_or_its_deletion_only() {
        let aborts: HashMap<String, CancellationToken> = ["a", "b", "c"]
            .map(|n| (n.to_string(), CancellationToken::new()))
            .into();
        abort_if_untainted(&watcher::Event::Apply(node("a", true)), &aborts);
        abort_if_untainted(&watcher::Event::Apply(node("b", false)), &aborts);
        abort_if_untainted(&watcher::Event::Delete(node("c", true)), &aborts);
        abort_if_untainted(&watcher::Event::Apply(node("other", false)), &aborts);
        let stopped = |n: &str| aborts[n].is_cancelled();
        assert!(!stopped("a"), "still tainted");
        assert!(stopped("b"), "its taint went");
        assert!(stopped("c"), "the node went");
    }
}
