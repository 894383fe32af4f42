//! The lower bound: what no drainer that follows issue 4's rules can beat on the scenario at
//! concurrency C, derived from the scenario's timing and the cluster at t=0 (pure), and its
//! explanation as the benchmark prints it.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, ensure};
use rotor_sim::scenario::{Scenario, WorkloadKind};

use crate::snapshot::Snapshot;
use crate::{SETTLE, secs, secs_f};

/// How far off its tick grid the lower bound allows one step of the simulator's control loop
/// to run (see [`LowerBound`], 2.).
const STEP_JITTER: Duration = Duration::from_millis(20);

/// A lower bound on the makespan of draining every node of the scenario at concurrency C,
/// whoever drains. It is the largest of:
///
/// 1. **Nodes.** A node is drained only once its last pod has exited, which takes that pod's
///    shutdown time after its eviction (at most its grace period); rotor also waits until the
///    drain taint is `--settle` old, which every node is after the first second (and a short
///    quiet time with the node empty, its own choice, left out here). So node i
///    occupies one of the C drain slots for at least d_i = (longest shutdown among its pods),
///    and the makespan is at least max(settle, max_i d_i, sum_i d_i / C) (the classic bound for
///    C parallel machines).
///
/// 2. **Budgets.** A PodDisruptionBudget whose workload has R pods and allows a disruptions
///    (a = R - desiredHealthy when all are healthy) lets an eviction through only while fewer
///    than a of its pods are unhealthy. An evicted pod's slot is given back only when a
///    replacement becomes Ready: a Deployment's replacement is created after the eviction, a
///    StatefulSet's only once the old pod has exited (shutdown h later), and either then needs
///    a node and its start-up time s. At t=0 every node carries the drain taint, so the first
///    replacement can only run on a new node, which is Ready at the earliest at
///    T_cap = nodeStartup + min(scaleUpDelay, shortest node emptying + scaleDownDelay): the
///    autoscaler adds a node for a pod pending scaleUpDelay, or replaces a removed node, and a
///    node is removed scaleDownDelay after it is empty. (With `--taint N`, some nodes stay
///    untainted and may have room: T_cap = 0, and R counts only the budget's pods on the nodes
///    to drain.) So no slot comes back before
///    F = max(T_cap, 0 for a Deployment | h for a StatefulSet) + s, and the evictions of wave
///    w >= 2 (the (w-1)a+1-th to the wa-th) each need one of the wave before to have been
///    replaced: they come at least c later, where c = h + s for a StatefulSet and s + tick for
///    a Deployment. The tick: a client can reach the simulator only through the Kubernetes API
///    (the benchmark never calls its `/sim/v1/step`), and the simulator creates replacements,
///    and finds them Ready, only in its control loop's steps, one per `tick`. A budget gives a
///    slot back at a step that finds a replacement Ready; the eviction that takes the slot is
///    served after that step, so its replacement is created at a later step, a tick on at
///    least, and is Ready s after that (start-up times are whole ticks in the scenarios).
///    Steps may run a little off the tick grid (tokio's 5 ms timer tolerance, and the cluster
///    lock, which requests hold for milliseconds at this size), so c is taken as
///    s + tick - [`STEP_JITTER`]. The last of the R evictions is in wave m = ceil(R / a), so it
///    cannot happen before F + (m - 2) c (when m >= 2), and its node is drained h later:
///    bound = F + (m - 2) c + h (h when m = 1).
///
/// 3. **The gate.** Issue 4 requires a drainer to wait, before it starts the next node, until
///    the workloads evicted from the nodes drained since are Ready again (rotor-drainer does;
///    with several drains at once it waits only for the workloads no budget covers, leaving the
///    others to their budgets, and the bound takes that weaker rule). Let r_i be when node i's
///    gated workloads can be Ready after its drain starts (a replacement's start-up, after the
///    old pod's shutdown for a StatefulSet; 0 if there are none). A slot that drained node i
///    takes its next node only after d_i and after r_i, so node i holds it for
///    g_i = max(d_i, r_i), except the last node of each slot (d_i). And any start after the
///    first C waits for some drained node's gate, whose workloads need a new node: at the
///    earliest G = min_i max over its gated pods of (max(T_cap, shutdown if a StatefulSet) +
///    start-up). So with the C nodes of largest g_i started at t=0 and the rest after G:
///    bound = G + (sum of the other g_i - C x max_i(g_i - d_i)) / C.
///
/// The scenario's `bindTime` and `budgetSyncTime` (the scheduler's and the disruption
/// controller's time per item on the simulator) are left out: they only ever delay, and an idle
/// worker with less than half a tick an item finishes within the step, as the bound's cycle
/// assumes. They make the budgets' cycles longer only under load, which the bound cannot see.
///
/// The bound is the largest of the three. It ignores, so a real run is always above it: how
/// much room the autoscaler adds after the first node (it sizes each scale-up for the pods
/// pending then, so a later eviction may wait scaleUpDelay + nodeStartup again), the
/// simulator's tick outside the budgets' cycles and API latencies, the interplay of budgets and
/// node slots (a node waiting on one budget holds its slot), and the time to retire drained
/// nodes.
pub struct LowerBound {
    settle: f64,
    /// Each node's d_i and its gated workloads' Ready times, for [`LowerBound::gated`].
    gate_inputs: Vec<GateInput>,
    node_sum: f64,
    node_max: f64,
    nodes: usize,
    /// Nodes by their d_i, for the explanation.
    node_costs: BTreeMap<String, usize>,
    t_cap: f64,
    /// Nodes left untainted, with room for replacements at once (`--taint N`).
    spare: usize,
    budgets: Vec<BudgetBound>,
    /// The simulator's control-loop tick; `None` on the real control plane, where
    /// controllers act on watch events rather than on a tick.
    tick: Option<Duration>,
}

/// One node as the gate bound sees it.
struct GateInput {
    d: f64,
    /// r_i and node i's earliest gate opening, at C=1 (every replaced workload) and at C>1
    /// (those no budget covers).
    ready_all: f64,
    first_all: f64,
    ready_unbudgeted: f64,
    first_unbudgeted: f64,
}

struct BudgetBound {
    /// The budgets with these same figures (copies of one workload).
    names: Vec<String>,
    kind: WorkloadKind,
    pods: i64,
    allowed: i64,
    startup: f64,
    shutdown: f64,
    first: f64,
    cycle: f64,
    waves: i64,
    seconds: f64,
}

impl LowerBound {
    /// The bound on `scenario` as `snap` found it, for a backend whose controllers step every
    /// `tick` (the simulator) or act on events (`None`: the real control plane, where a
    /// Deployment's replacement is created as its pod is evicted, and the budget's cycle is
    /// the start-up alone).
    pub fn derive(
        scenario: &Scenario,
        snap: &Snapshot,
        tick: Option<Duration>,
    ) -> anyhow::Result<LowerBound> {
        let t = &scenario.timing;
        let settle = SETTLE.as_secs_f64();
        let (tick_s, jitter) = match tick {
            Some(d) => (d.as_secs_f64(), STEP_JITTER.as_secs_f64()),
            None => (0.0, 0.0),
        };
        let mut node_costs: BTreeMap<String, usize> = BTreeMap::new();
        let (mut node_sum, mut node_max) = (0.0f64, 0.0f64);
        let mut shortest_emptying = f64::INFINITY;
        for n in &snap.nodes {
            let d = n.longest_shutdown;
            node_sum += d;
            node_max = node_max.max(d);
            shortest_emptying = shortest_emptying.min(n.longest_shutdown);
            *node_costs.entry(format!("{d:.1} s")).or_default() += 1;
        }
        // With nodes left untainted (`--taint N`), a replacement may find room at once.
        let t_cap = if snap.spare == 0 {
            t.node_startup.as_secs_f64()
                + t.scale_up_delay
                    .as_secs_f64()
                    .min(shortest_emptying + t.scale_down_delay.as_secs_f64())
        } else {
            0.0
        };
        let gate_inputs = snap
            .nodes
            .iter()
            .map(|n| {
                let d = n.longest_shutdown;
                let ready = |only_unbudgeted: bool| {
                    let gated = n
                        .replaced
                        .iter()
                        .filter(|r| !only_unbudgeted || !r.budgeted);
                    gated.fold((0.0f64, 0.0f64), |(ready, first), r| {
                        (
                            ready.max(r.created_after + r.startup),
                            first.max(t_cap.max(r.created_after) + r.startup),
                        )
                    })
                };
                let (ready_all, first_all) = ready(false);
                let (ready_unbudgeted, first_unbudgeted) = ready(true);
                GateInput {
                    d,
                    ready_all,
                    first_all,
                    ready_unbudgeted,
                    first_unbudgeted,
                }
            })
            .collect();
        let mut groups: BTreeMap<String, BudgetBound> = BTreeMap::new();
        for w in &scenario.workloads {
            if w.pdb.is_none()
                || !matches!(w.kind, WorkloadKind::Deployment | WorkloadKind::StatefulSet)
            {
                continue;
            }
            // The scenario's budget as the simulated disruption controller computed it at t=0,
            // with every pod healthy: its pods R and the disruptions it allows a.
            let key = format!("{}/{}", w.namespace, w.name);
            let Some(&(expected, allowed)) = snap.budgets.get(&key) else {
                bail!("the scenario's budget {key} is not in the cluster");
            };
            // Only the pods on the nodes to drain move (all of them when every node drains).
            let pods = if snap.spare == 0 {
                expected
            } else {
                snap.moved.get(&key).copied().unwrap_or(0)
            };
            if pods == 0 {
                continue;
            }
            ensure!(
                allowed > 0,
                "the budget of {}/{} never allows an eviction: no drainer can finish",
                w.namespace,
                w.name
            );
            let grace = w.termination_grace_period_seconds.unwrap_or(30).max(0) as f64;
            let startup = w.startup.unwrap_or(t.pod_startup).as_secs_f64();
            let shutdown = w
                .shutdown
                .unwrap_or(t.pod_shutdown)
                .as_secs_f64()
                .min(grace);
            let (first, cycle) = match w.kind {
                WorkloadKind::StatefulSet => (t_cap.max(shutdown) + startup, shutdown + startup),
                _ => (
                    t_cap + startup,
                    whole_ticks(startup, tick_s) + tick_s - jitter,
                ),
            };
            let waves = (pods + allowed - 1) / allowed;
            let last_eviction = if waves >= 2 {
                first + (waves - 2) as f64 * cycle
            } else {
                0.0
            };
            let seconds = (last_eviction + shutdown).max(settle);
            let key = format!("{:?}|{pods}|{allowed}|{startup}|{shutdown}", w.kind);
            let b = groups.entry(key).or_insert(BudgetBound {
                names: Vec::new(),
                kind: w.kind,
                pods,
                allowed,
                startup,
                shutdown,
                first,
                cycle,
                waves,
                seconds,
            });
            b.names.push(format!("{}/{}", w.namespace, w.name));
        }
        let mut budgets: Vec<BudgetBound> = groups.into_values().collect();
        budgets.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        Ok(LowerBound {
            settle,
            gate_inputs,
            node_sum,
            node_max,
            nodes: snap.nodes.len(),
            node_costs,
            t_cap,
            spare: snap.spare,
            budgets,
            tick,
        })
    }

    fn nodes_bound(&self, c: usize) -> f64 {
        (self.node_sum / c as f64)
            .max(self.node_max)
            .max(self.settle)
    }

    /// The gate's bound at concurrency C (see 3. above), with the figures it came from:
    /// (bound, G, sum of the g_i after the first C, C x max(g_i - d_i)).
    fn gated(&self, c: usize) -> (f64, f64, f64, f64) {
        let pick = |n: &GateInput| {
            if c == 1 {
                (n.ready_all, n.first_all)
            } else {
                (n.ready_unbudgeted, n.first_unbudgeted)
            }
        };
        let mut g: Vec<f64> = self
            .gate_inputs
            .iter()
            .map(|n| n.d.max(pick(n).0))
            .collect();
        if g.len() <= c {
            return (0.0, 0.0, 0.0, 0.0);
        }
        // A node without gated workloads opens the gate at once: then G is 0.
        let first_gate = self
            .gate_inputs
            .iter()
            .map(|n| pick(n).1)
            .fold(f64::INFINITY, f64::min);
        let last_slack = self
            .gate_inputs
            .iter()
            .map(|n| n.d.max(pick(n).0) - n.d)
            .fold(0.0, f64::max)
            * c as f64;
        g.sort_by(|a, b| b.total_cmp(a));
        let rest: f64 = g[c..].iter().sum();
        let bound = first_gate + (rest - last_slack).max(0.0) / c as f64;
        (bound, first_gate, rest, last_slack)
    }

    /// The bound without the gate.
    pub fn without_gate(&self, c: usize) -> f64 {
        self.budgets
            .iter()
            .map(|b| b.seconds)
            .fold(self.nodes_bound(c), f64::max)
    }

    pub fn total(&self, c: usize) -> f64 {
        self.without_gate(c).max(self.gated(c).0)
    }

    pub fn print(&self, c: usize, scenario: &Scenario) {
        let t = &scenario.timing;
        println!(
            "lower bound at C={c}: {} (the largest of the bounds below; see LowerBound in tests/examples/drain_bench/lower_bound.rs)",
            secs_f(self.total(c))
        );
        let costs: Vec<String> = self
            .node_costs
            .iter()
            .map(|(d, n)| format!("{d} on {n}"))
            .collect();
        println!(
            "  nodes:   each needs its longest pod shutdown ({}); {} nodes, C={c} at a time: max(settle {}, {}, {} / {c}) = {}",
            costs.join(", "),
            self.nodes,
            secs_f(self.settle),
            secs_f(self.node_max),
            secs_f(self.node_sum),
            secs_f(self.nodes_bound(c))
        );
        if self.spare > 0 {
            println!(
                "  budgets: T_cap = 0: {} nodes stay untainted, and a replacement may find room on one at once; only the pods on the {} nodes to drain move",
                self.spare, self.nodes
            );
        } else {
            println!(
                "  budgets: first new node Ready at T_cap = nodeStartup {} + min(scaleUpDelay {}, first node empty + scaleDownDelay {}) = {}",
                secs(t.node_startup),
                secs(t.scale_up_delay),
                secs(t.scale_down_delay),
                secs_f(self.t_cap)
            );
        }
        for b in &self.budgets {
            let who = if b.names.len() == 1 {
                b.names[0].clone()
            } else {
                format!("{} (and {} like it)", b.names[0], b.names.len() - 1)
            };
            let kind = match b.kind {
                WorkloadKind::StatefulSet => "StatefulSet",
                _ => "Deployment",
            };
            let formula = if b.waves >= 2 {
                format!(
                    "{} + {} x {:.2} s + {}",
                    secs_f(b.first),
                    b.waves - 2,
                    b.cycle,
                    secs_f(b.shutdown),
                )
            } else {
                secs_f(b.shutdown)
            };
            let cycle = match b.kind {
                WorkloadKind::StatefulSet => "cycle shutdown + start-up".to_string(),
                _ if self.tick.is_none() => "cycle start-up".to_string(),
                _ => format!("cycle start-up + one tick - {} ms", STEP_JITTER.as_millis()),
            };
            println!(
                "           {who}: {kind}, {} pods, {} at a time, start-up {}, shutdown {}: {} waves, {cycle}: {formula} = {}",
                b.pods,
                b.allowed,
                secs_f(b.startup),
                secs_f(b.shutdown),
                b.waves,
                secs_f(b.seconds)
            );
        }
        let (gated, first_gate, rest, last_slack) = self.gated(c);
        let which = if c == 1 {
            "every replaced workload"
        } else {
            "the workloads no budget covers"
        };
        println!(
            "  gate:    g_i = max(d_i, Ready time of {which}); first gate G = {}; G + (sum of g_i after the {c} largest {} - {}) / {c} = {}",
            secs_f(first_gate),
            secs_f(rest),
            secs_f(last_slack),
            secs_f(gated)
        );
        let latency = match self.tick {
            Some(tick) => format!(
                "the tick (every {}) outside budget cycles and API latency",
                secs(tick)
            ),
            None => "the controllers' reaction times and API latency".to_string(),
        };
        println!(
            "  ignores: the room the autoscaler adds after its first node, {latency}, \
nodes held by one budget while others wait, retiring drained nodes (scaleDownDelay {})",
            secs(t.scale_down_delay)
        );
        println!(
            "  without the gate (information): {}",
            secs_f(self.without_gate(c))
        );
    }
}

/// `s` rounded up to whole ticks (a time the simulator can only reach at a tick).
fn whole_ticks(s: f64, tick: f64) -> f64 {
    if tick <= 0.0 {
        return s;
    }
    // The small margin keeps 2.0 s at 0.1 s ticks from rounding up to 2.1 s.
    (s / tick - 1e-9).ceil() * tick
}
