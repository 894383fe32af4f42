//! rotor against Karpenter's drift replacement (`--peer karpenter`, issue 20 item 3), on the
//! real control plane with Karpenter's kwok provider ([`Karpenter`]) making every node. For
//! each concurrency C and run, two fresh clusters, set up alike: rotor's RBAC, the scenario's
//! workloads and budgets, no node until Karpenter provisions them for the pending pods (one
//! NodePool of [`INSTANCE_TYPE`], its disruption budget `nodes: C`), every pod Ready. Then:
//!
//! - Karpenter: at t=0 the NodePool's template changes, so every node is Drifted; Karpenter
//!   launches a replacement, taints the old node `karpenter.sh/disrupted`, evicts its pods
//!   and deletes it, C nodes at a time. Makespan: t=0 until every original node is gone.
//! - rotor: Karpenter's drift disabled (a budget of 0 nodes for the reason Drifted) and the
//!   template changed before t=0, so Karpenter only launches nodes (from the new template) for
//!   pending pods; `rotor-drainer run --max-concurrent C --max-unavailable C` as the shipped
//!   ServiceAccount; at t=0 every original node gets `rotor.dev/drain=manual:NoSchedule`.
//!   Makespan: t=0 until every original node is marked `rotor.dev/phase=drained`. Then the
//!   drained nodes are retired through Karpenter (their NodeClaims deleted at once) and the
//!   time until they are gone is reported too, so that both contestants' "fleet replaced"
//!   times can be put side by side.
//!
//! Both runs record the same way ([`Recorder`]: when each node was closed, emptied, done), judge
//! the budgets with the same independent pod watch, and count requests from the audit log:
//! rotor's by its ServiceAccount, Karpenter's (it runs as the admin) by its User-Agent.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rotor_e2e::karpenter::{KARPENTER_VERSION, Karpenter, KarpenterOptions, karpenter_bin};
use rotor_e2e::real_cluster::ROTOR_NAMESPACE;
use rotor_e2e::wait_until;
use rotor_sim::scenario::Scenario;
use serde_json::{Value, json};
use tokio::runtime::Handle;

use crate::Args;
use crate::cluster::BenchCluster;
use crate::compare::{scenario_name, wait_for_nodes};
use crate::drainer::Bins;
use crate::real::{
    Preempted, RealBench, Requester, drainer_user, expected_pods, preempted_placeholders,
    wait_settled, workloads_yaml,
};
use crate::recorder::Recorder;
use crate::snapshot::Snapshot;
use crate::summary::median;
use crate::timeline::{NodeRow, Timeline};
use crate::{SETTLE_FLAG, secs_f, verdict};

/// The kwok provider's built-in type nearest the scenario's m5.xlarge (4 CPUs, 16 GiB, 58
/// pods): 4 CPUs, 16 GiB, 64 pods (3.9 CPUs allocatable). With 100m pods the CPU fills first
/// (about 38 pods a node), so the pod limit never binds.
pub const INSTANCE_TYPE: &str = "s-4x-amd64-linux";
/// Karpenter's requests, told apart by their User-Agent (it runs as the admin).
const KARPENTER_AGENT: &str = "karpenter/";
/// Room for every replacement while the drained nodes wait to be retired.
const CPU_LIMIT: u32 = 1000;
/// The target without surge: rotor's makespan at most this share of Karpenter's.
const TARGET_RATIO: f64 = 0.80;
/// The target with `--surge`, where rotor makes room first as Karpenter does: at most
/// this share of Karpenter's makespan, and no more Pending pod-seconds than Karpenter's.
const SURGE_TARGET_RATIO: f64 = 0.50;
/// How long the provisioning of the workload may take.
const PROVISION_TIMEOUT: Duration = Duration::from_secs(600);

/// One contestant's run.
#[derive(Clone, Debug, Default)]
pub struct PeerRun {
    /// Original nodes (Karpenter provisioned them for the workload).
    pub nodes: usize,
    /// Karpenter: until every original node is gone; rotor: until every one is drained.
    pub makespan: Option<f64>,
    /// Until the last original node had no workload pod left.
    pub emptied: Option<f64>,
    /// Until every original node is gone (rotor: retired through Karpenter after the drain).
    pub replaced: Option<f64>,
    pub violations: Vec<String>,
    /// The contestant's own requests, and Karpenter's beside rotor (provisioning, retiring).
    pub requests: u64,
    pub karpenter_requests: Option<u64>,
    pub evictions: Vec<(String, u64)>,
    /// The most original nodes closed but not yet done at once.
    pub peak_disrupting: usize,
    pub pending_seconds: f64,
    pub launched: usize,
    pub provisioned_in: f64,
    pub timeline: Timeline,
    /// rotor with `--surge`: the placeholders the scheduler preempted.
    pub preempted: Option<Preempted>,
}

impl PeerRun {
    fn per_node(&self, n: u64) -> f64 {
        n as f64 / self.nodes.max(1) as f64
    }
}

/// The most rows in their drain (closed, not yet done) at the same moment.
pub fn peak_disrupting(rows: &[NodeRow]) -> usize {
    let mut edges: Vec<(f64, i32)> = Vec::new();
    for r in rows {
        if let Some(s) = r.started {
            edges.push((s, 1));
            edges.push((r.done.unwrap_or(f64::INFINITY).max(s), -1));
        }
    }
    // At equal times an end comes before a start: a node done as the next closes is not overlap.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    peak as usize
}

/// The runs of both contestants at one concurrency, as the summary lines: medians and the
/// issue's targets.
pub fn target_lines(
    c: usize,
    karpenter: &[PeerRun],
    rotor: &[PeerRun],
    surge: bool,
) -> Vec<String> {
    let med = |runs: &[PeerRun], f: fn(&PeerRun) -> Option<f64>| -> Option<f64> {
        let v: Vec<Option<f64>> = runs.iter().map(f).collect();
        if v.iter().any(Option::is_none) {
            None
        } else {
            median(v.into_iter().flatten().collect())
        }
    };
    let show = |v: Option<f64>| v.map_or_else(|| "unfinished".into(), secs_f);
    if karpenter.is_empty() {
        let pending = median(rotor.iter().map(|r| r.pending_seconds).collect());
        return vec![format!(
            "C={c}: median over {} run(s): rotor (every original node drained) {}, gone after retiring through Karpenter {}; Pending pod-seconds {}; Karpenter's drift not run (--only rotor)",
            rotor.len(),
            show(med(rotor, |r| r.makespan)),
            show(med(rotor, |r| r.replaced)),
            pending.map_or_else(|| "n/a".into(), |p| format!("{p:.0}")),
        )];
    }
    let target = if surge {
        SURGE_TARGET_RATIO
    } else {
        TARGET_RATIO
    };
    let k = med(karpenter, |r| r.makespan);
    let r = med(rotor, |r| r.makespan);
    let r_replaced = med(rotor, |r| r.replaced);
    let mut lines = vec![format!(
        "C={c}: median makespan over {} run(s): Karpenter drift (every original node gone) {}; rotor (every original node drained) {}, gone after retiring through Karpenter {}",
        karpenter.len().max(rotor.len()),
        show(k),
        show(r),
        show(r_replaced)
    )];
    lines.push(match (r, k) {
        (Some(r), Some(k)) if k > 0.0 => {
            let ratio = r / k;
            format!(
                "C={c}: rotor / Karpenter drift makespan {ratio:.2}  (target <= {target:.2})  {}",
                verdict(ratio <= target, ratio, target)
            )
        }
        _ => format!(
            "C={c}: rotor / Karpenter drift makespan n/a: a run did not finish  (target <= {target:.2})  MISS"
        ),
    });
    if surge {
        let pending = |runs: &[PeerRun]| median(runs.iter().map(|r| r.pending_seconds).collect());
        lines.push(match (pending(rotor), pending(karpenter)) {
            (Some(r), Some(k)) => format!(
                "C={c}: Pending pod-seconds, rotor --surge {r:.0} against Karpenter's {k:.0} (medians; target: no more)  {}",
                if r <= k { "PASS" } else { "MISS" }
            ),
            _ => format!("C={c}: Pending pod-seconds n/a  MISS"),
        });
    }
    if let (Some(r), Some(k)) = (r_replaced, k) {
        lines.push(format!(
            "C={c}: (information) rotor drained + retired / Karpenter drift makespan {:.2}",
            r / k
        ));
    }
    let worst = rotor.iter().map(|r| r.violations.len()).max();
    let karpenter_worst = karpenter.iter().map(|r| r.violations.len()).max();
    lines.push(format!(
        "C={c}: rotor violations {}  (target 0)  {}; Karpenter's {}",
        worst.map_or("n/a".into(), |w| w.to_string()),
        if worst == Some(0) { "PASS" } else { "MISS" },
        karpenter_worst.map_or("n/a".into(), |w| w.to_string())
    ));
    lines
}

pub fn contest(
    args: &Args,
    bins: &Bins,
    runtime: &Handle,
    scratch: &std::path::Path,
    summary: &mut Vec<String>,
) -> anyhow::Result<()> {
    std::panic::catch_unwind(karpenter_bin).map_err(|_| {
        anyhow!("Karpenter's kwok provider is not built: run tools/karpenter/build.sh first")
    })?;
    let scenario = Scenario::load(&args.scenario).map_err(|e| anyhow!("{e}"))?;
    let t = &scenario.timing;
    println!("== rotor-drainer against Karpenter {KARPENTER_VERSION}'s drift replacement ==");
    println!(
        "scenario {}: its workloads and budgets; the nodes are Karpenter's, provisioned for the pending pods (the scenario's node groups are not used); podStartup {}, podShutdown {}, nodeStartup {} (Karpenter's nodeRegistrationDelay)",
        args.scenario.display(),
        secs_f(t.pod_startup.as_secs_f64()),
        secs_f(t.pod_shutdown.as_secs_f64()),
        secs_f(t.node_startup.as_secs_f64()),
    );
    println!(
        "Karpenter: kwok provider, out of cluster as the admin, batching at its defaults (1 s idle, 10 s max); one NodePool: instance type {INSTANCE_TYPE} (4 CPU, 16 GiB, 64 pods; the scenario's m5.xlarge has 58), on-demand, expireAfter Never, consolidation off (WhenEmpty after Never), limits cpu {CPU_LIMIT}, disruption budget nodes: C"
    );
    println!(
        "  drift run: at t=0 the template's label e2e.rotor.dev/generation changes; makespan until every original node is gone"
    );
    println!(
        "  rotor run: budgets [{{nodes: 0, reasons: [Drifted]}}, {{nodes: C}}] and the template changed before t=0 (Karpenter provisions only, from the new template)"
    );
    println!(
        "rotor: rotor-drainer run --max-concurrent C --max-unavailable C --settle {SETTLE_FLAG}, as the shipped ServiceAccount under the shipped RBAC; at t=0 every original node tainted rotor.dev/drain=manual:NoSchedule; makespan until every original node is marked drained; then its NodeClaims deleted (retired through Karpenter) and the time until they are gone reported"
    );
    println!(
        "fair: same control plane, workload, budgets, instance type and provisioner (Karpenter) for both; Karpenter's makespan includes deleting the nodes, rotor's does not (see the retire figure); Karpenter starts each node's replacement before it drains it, {}",
        if args.surge {
            "rotor with --surge too (its placeholders pending, Karpenter provisions for them before the drain evicts)"
        } else {
            "rotor drains first and Karpenter provisions for the evicted pods"
        }
    );
    std::fs::create_dir_all(&args.pictures)?;
    for &c in &args.concurrency {
        let (mut ks, mut rs) = (Vec::new(), Vec::new());
        for run in 1..=args.runs {
            println!();
            println!("-- Karpenter peer C={c} run {run} of {} --", args.runs);
            let dir = scratch.join(format!("karpenter-c{c}-run{run}"));
            // `--only rotor` leaves Karpenter's drift out (its figures from earlier runs stand).
            let k = if args.kubectl {
                Some(karpenter_drift(
                    c,
                    args,
                    runtime,
                    &scenario,
                    &dir.join("karpenter"),
                    run,
                )?)
            } else {
                None
            };
            let r = rotor_beside(c, args, bins, runtime, &scenario, &dir.join("rotor"))?;
            print_run(c, k.as_ref(), &r, args.surge);
            let picture = args.pictures.join(format!("karpenter-c{c}-run{run}.svg"));
            let title = format!(
                "{} on the real control plane, Karpenter's nodes, C={c}, run {run}",
                scenario_name(&args.scenario)
            );
            let rotor_label = if args.surge {
                "rotor-drainer --surge, Karpenter provisioning (done = drained)"
            } else {
                "rotor-drainer, Karpenter provisioning (done = drained)"
            };
            let mut rows = Vec::new();
            if let Some(k) = &k {
                rows.push(("Karpenter drift (done = node gone)", &k.timeline));
            }
            rows.push((rotor_label, &r.timeline));
            let svg = crate::timeline::render(&title, &rows);
            std::fs::write(&picture, svg)
                .with_context(|| format!("writing {}", picture.display()))?;
            println!("timeline: {}", picture.display());
            ks.extend(k);
            rs.push(r);
        }
        println!();
        for line in target_lines(c, &ks, &rs, args.surge) {
            println!("{line}");
            summary.push(line);
        }
    }
    Ok(())
}

fn print_run(c: usize, k: Option<&PeerRun>, r: &PeerRun, surge: bool) {
    let opt = |v: Option<f64>| v.map_or_else(|| "unfinished".into(), secs_f);
    println!(
        "{:<34} {:>14} {:>14} {:>14} {:>6} {:>10} {:>9} {:>11}",
        "",
        "makespan",
        "last emptied",
        "nodes gone",
        "nodes",
        "budget viol",
        "req/node",
        "peak nodes"
    );
    let rotor = format!("rotor-drainer C={c}{}", if surge { " --surge" } else { "" });
    let runs: Vec<(String, &str, &PeerRun)> = k
        .map(|k| (format!("Karpenter drift, budget {c}"), "Karpenter", k))
        .into_iter()
        .chain([(rotor, "rotor", r)])
        .collect();
    for (label, _, run) in &runs {
        println!(
            "{:<34} {:>14} {:>14} {:>14} {:>6} {:>10} {:>9.1} {:>11}",
            label,
            opt(run.makespan),
            opt(run.emptied),
            opt(run.replaced),
            run.nodes,
            run.violations.len(),
            run.per_node(run.requests),
            run.peak_disrupting
        );
    }
    for (_, who, run) in &runs {
        let evictions: Vec<String> = run
            .evictions
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!(
            "  {who}: provisioned in {:.0} s; evictions {}; {} requests ({:.1} per node){}; {} nodes launched after t=0; pending pod-seconds {:.0} (of them unschedulable {:.0})",
            run.provisioned_in,
            if evictions.is_empty() {
                "none".into()
            } else {
                evictions.join(", ")
            },
            run.requests,
            run.per_node(run.requests),
            run.karpenter_requests
                .map(|n| format!(
                    "; Karpenter's beside it (provisioning, retiring) {n} ({:.1} per node)",
                    run.per_node(n)
                ))
                .unwrap_or_default(),
            run.launched,
            run.pending_seconds,
            run.timeline.unschedulable_seconds()
        );
        if let Some(p) = run.preempted {
            println!(
                "  {who}: placeholders the scheduler preempted {} ({} of them before their node's drain began: room made ahead)",
                p.total, p.made_ahead
            );
        }
        for v in &run.violations {
            println!("  {who}: budget violation: {v}");
        }
    }
}

fn options(c: usize, scenario: &Scenario) -> KarpenterOptions {
    KarpenterOptions {
        node_pool: "rotor-peer".into(),
        instance_type: INSTANCE_TYPE.into(),
        budget: c.to_string(),
        registration_delay: scenario.timing.node_startup,
        batch: None,
        cpu_limit: CPU_LIMIT,
    }
}

/// A fresh control plane with no node, rotor's RBAC, the shipped drainer gone (a Pending pod
/// of its would get a node of its own).
fn bare(
    runtime: &Handle,
    scenario: &Scenario,
    dir: &std::path::Path,
) -> anyhow::Result<BenchCluster> {
    std::fs::create_dir_all(dir)?;
    let bench = RealBench::start_bare(runtime, scenario, dir)?;
    wait_until(
        "the shipped drainer's pods to be gone",
        Duration::from_secs(60),
        || {
            let pods = bench
                .cluster
                .kubectl_json(&["get", "pods", "-n", ROTOR_NAMESPACE]);
            pods["items"]
                .as_array()
                .is_none_or(|p| p.is_empty())
                .then_some(())
        },
    );
    Ok(BenchCluster::Real(Box::new(bench)))
}

fn real(cluster: &BenchCluster) -> &RealBench {
    match cluster {
        BenchCluster::Real(r) => r,
        BenchCluster::Sim(_) => unreachable!("the Karpenter peer runs on the real control plane"),
    }
}

/// Applies the scenario's workloads and waits until Karpenter has made nodes for them and
/// every pod (a DaemonSet pod on each node included) is Ready; returns the seconds it took.
fn provision(cluster: &BenchCluster, scenario: &Scenario) -> anyhow::Result<f64> {
    let bench = real(cluster);
    let started = Instant::now();
    let workloads = node_critical_daemons(&workloads_yaml(scenario)?)?;
    bench.cluster.apply(&workloads);
    let deadline = started + PROVISION_TIMEOUT;
    loop {
        let nodes = cluster.get("/api/v1/nodes")?;
        let nodes = nodes["items"].as_array().map_or(0, Vec::len);
        let pods = cluster.get("/api/v1/pods")?;
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        let unbound = items
            .iter()
            .filter(|p| p["spec"]["nodeName"].as_str().is_none_or(str::is_empty))
            .count();
        if nodes > 0 && unbound == 0 && items.len() < expected_pods(scenario, nodes) {
            // A DaemonSet pod preempted a bare pod (nothing recreates it) on a node that
            // filled before the DaemonSet's pod was placed: apply again to make it anew.
            eprintln!(
                "drain_bench: {} of {} pods after provisioning (a bare pod preempted by a DaemonSet pod): applying the workloads again",
                items.len(),
                expected_pods(scenario, nodes)
            );
            bench.cluster.apply(&workloads);
        } else if nodes > 0 && unbound == 0 {
            wait_settled(
                bench.runtime(),
                &bench.client,
                expected_pods(scenario, nodes),
            )?;
            // A node launched after the count would bring a DaemonSet pod more: count again.
            let again = cluster.get("/api/v1/nodes")?;
            if again["items"].as_array().map_or(0, Vec::len) == nodes {
                let took = started.elapsed().as_secs_f64();
                eprintln!(
                    "drain_bench: Karpenter provisioned {nodes} nodes, every pod Ready, in {took:.0} s"
                );
                return Ok(took);
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "the workload was not provisioned within {} s: {nodes} nodes, {unbound} pods unbound",
                PROVISION_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The workloads with each DaemonSet's pods `system-node-critical`, as node agents are: the
/// pods pending before Karpenter's nodes register would otherwise fill a node before its
/// DaemonSet pod is placed (Karpenter counts the DaemonSet's requests, the scheduler does not
/// place it first), and it would stay Pending; at this priority it takes its place.
fn node_critical_daemons(workloads: &str) -> anyhow::Result<String> {
    let mut list: Value = serde_json::from_str(workloads).context("the workloads as JSON")?;
    for item in list["items"].as_array_mut().into_iter().flatten() {
        if item["kind"] == "DaemonSet" {
            item["spec"]["template"]["spec"]["priorityClassName"] = json!("system-node-critical");
        }
    }
    Ok(list.to_string())
}

/// Karpenter replaces every node through drift, its budget C nodes.
fn karpenter_drift(
    c: usize,
    args: &Args,
    runtime: &Handle,
    scenario: &Scenario,
    dir: &std::path::Path,
    run: usize,
) -> anyhow::Result<PeerRun> {
    let label = format!("Karpenter drift C={c}");
    eprintln!("drain_bench: {label}: starting a fresh real control plane");
    let cluster = bare(runtime, scenario, dir)?;
    let bench = real(&cluster);
    let mut karpenter = Karpenter::start(&bench.cluster, options(c, scenario));
    let provisioned_in = provision(&cluster, scenario)?;
    if run == 1 {
        print_node_pool(&karpenter, "drift run, before t=0");
    }
    let snap = Snapshot::take(&cluster, scenario, None)?;
    let recorder = Recorder::start(cluster.client(), cluster.runtime(), &snap.listed)?;
    let names: Vec<String> = snap.nodes.iter().map(|n| n.name.clone()).collect();
    cluster.reset_counters(&snap.budgets)?;
    let deadline = Instant::now() + args.run_timeout;

    let t0 = Instant::now();
    karpenter.drift_all();
    wait_for_nodes(&label, None, &recorder, &names, t0, deadline)?;

    let (requests, evictions) = bench.requests_by(&Requester::Agent(KARPENTER_AGENT))?;
    let violations = bench.violations();
    let record = recorder.record();
    drop(recorder);
    let timeline = Timeline::from_record(&record, &names, &Default::default(), t0);
    let makespan = timeline.makespan();
    let run = PeerRun {
        nodes: names.len(),
        makespan,
        emptied: timeline.all_emptied(),
        replaced: makespan,
        violations,
        requests: requests.values().sum(),
        karpenter_requests: None,
        evictions: evictions.into_iter().collect(),
        peak_disrupting: peak_disrupting(&timeline.rows),
        pending_seconds: timeline.pending_seconds(),
        launched: record.nodes.keys().filter(|n| !names.contains(n)).count(),
        provisioned_in,
        timeline,
        preempted: None,
    };
    eprintln!(
        "drain_bench: {label}: {}",
        makespan.map_or_else(|| "unfinished".into(), |m| format!("makespan {m:.1} s"))
    );
    Ok(run)
}

/// rotor drains every node, Karpenter provisioning for the evicted pods; then the drained
/// nodes are retired through Karpenter.
fn rotor_beside(
    c: usize,
    args: &Args,
    bins: &Bins,
    runtime: &Handle,
    scenario: &Scenario,
    dir: &std::path::Path,
) -> anyhow::Result<PeerRun> {
    let label = format!(
        "rotor-drainer C={c}{} beside Karpenter",
        if args.surge { " --surge" } else { "" }
    );
    eprintln!("drain_bench: {label}: starting a fresh real control plane");
    let cluster = bare(runtime, scenario, dir)?;
    let bench = real(&cluster);
    let mut karpenter = Karpenter::start(&bench.cluster, options(c, scenario));
    let provisioned_in = provision(&cluster, scenario)?;
    let snap = Snapshot::take(&cluster, scenario, None)?;
    let names: Vec<String> = snap.nodes.iter().map(|n| n.name.clone()).collect();
    // Drifted in Karpenter's eyes but held by its budget, so that what it launches is the new
    // template, as in the drift run.
    karpenter.disable_drift();
    karpenter.drift_all();
    wait_until(
        "Karpenter to find every original node drifted",
        Duration::from_secs(120),
        || {
            let drifted = karpenter.drifted();
            names.iter().all(|n| drifted.contains(n)).then_some(())
        },
    );
    let recorder = Recorder::start(cluster.client(), cluster.runtime(), &snap.listed)?;
    let cs = c.to_string();
    let mut flags = vec!["--max-concurrent", &cs, "--max-unavailable", &cs];
    let ahead = args.surge_ahead.map(|n| n.to_string());
    if args.surge {
        // The PriorityClass rotor-surge comes with deploy/, as the RBAC does.
        flags.push("--surge");
        if let Some(ahead) = &ahead {
            flags.extend(["--surge-ahead", ahead]);
        }
    }
    let mut drainer = cluster.start_drainer(bins, dir, &flags)?;
    drainer.wait_standing_by(Duration::from_secs(60))?;
    cluster.wait_drainer_watching(Duration::from_secs(60))?;
    std::thread::sleep(Duration::from_secs(1));
    cluster.reset_counters(&snap.budgets)?;
    let deadline = Instant::now() + args.run_timeout;

    let t0 = Instant::now();
    let t0_epoch = jiff::Timestamp::now().as_nanosecond() as f64 / 1e9;
    cluster.taint_originals(&snap)?;
    wait_for_nodes(&label, Some(&mut drainer), &recorder, &names, t0, deadline)?;
    let (requests, evictions) = bench.requests_of(&drainer_user())?;
    let drained_at = Instant::now();
    let all_drained = recorder.done_count(&names, None) == names.len();
    let drained_record = recorder.record();

    // The end of the rotation: the drained nodes retired through Karpenter.
    let replaced = if all_drained {
        karpenter.retire(&names);
        let gone_deadline = Instant::now() + args.run_timeout;
        loop {
            let record = recorder.record();
            let gone: Vec<Instant> = names
                .iter()
                .filter_map(|n| record.nodes.get(n).and_then(|t| t.gone))
                .collect();
            if gone.len() == names.len() {
                break gone
                    .iter()
                    .max()
                    .map(|t| t.duration_since(t0).as_secs_f64());
            }
            if Instant::now() >= gone_deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    } else {
        None
    };
    let (karpenter_requests, _) = bench.requests_by(&Requester::Agent(KARPENTER_AGENT))?;
    let violations = bench.violations();
    drop(drainer);
    let final_record = recorder.record();
    drop(recorder);
    let timeline = Timeline::from_record(&drained_record, &names, &Default::default(), t0);
    let makespan = timeline.makespan();
    let preempted = if args.surge {
        let began: BTreeMap<String, f64> = timeline
            .rows
            .iter()
            .filter_map(|row| Some((row.name.clone(), t0_epoch + row.started?)))
            .collect();
        Some(preempted_placeholders(
            bench.audit_since_reset()?.lines(),
            &began,
        ))
    } else {
        None
    };
    eprintln!(
        "drain_bench: {label}: {}; retired through Karpenter {}",
        makespan.map_or_else(|| "unfinished".into(), |m| format!("makespan {m:.1} s")),
        replaced.map_or_else(
            || "unfinished".into(),
            |r| format!(
                "{:.1} s after the drain",
                r - drained_at.duration_since(t0).as_secs_f64()
            )
        )
    );
    Ok(PeerRun {
        nodes: names.len(),
        makespan,
        emptied: timeline.all_emptied(),
        replaced,
        violations,
        requests: requests.values().sum(),
        karpenter_requests: Some(karpenter_requests.values().sum()),
        evictions: evictions.into_iter().collect(),
        peak_disrupting: peak_disrupting(&timeline.rows),
        pending_seconds: timeline.pending_seconds(),
        launched: final_record
            .nodes
            .keys()
            .filter(|n| !names.contains(n))
            .count(),
        provisioned_in,
        timeline,
        preempted,
    })
}

fn print_node_pool(karpenter: &Karpenter, when: &str) {
    let pool =
        karpenter
            .cluster()
            .kubectl_json(&["get", "nodepool", &karpenter.options().node_pool]);
    println!("NodePool spec ({when}): {}", pool["spec"]);
    let class =
        karpenter
            .cluster()
            .kubectl_json(&["get", "kwoknodeclass", &karpenter.options().node_pool]);
    println!("KWOKNodeClass spec: {}", class["spec"]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(started: Option<f64>, done: Option<f64>) -> NodeRow {
        NodeRow {
            name: "n".into(),
            started,
            emptied: None,
            done,
        }
    }

    #[test]
    fn only_daemon_set_pods_are_made_node_critical() {
        let list = json!({"items": [
            {"kind": "DaemonSet", "spec": {"template": {"spec": {}}}},
            {"kind": "Deployment", "spec": {"template": {"spec": {}}}},
        ]});
        let out: Value =
            serde_json::from_str(&node_critical_daemons(&list.to_string()).unwrap()).unwrap();
        assert_eq!(
            out["items"][0]["spec"]["template"]["spec"]["priorityClassName"],
            "system-node-critical"
        );
        assert!(out["items"][1]["spec"]["template"]["spec"]["priorityClassName"].is_null());
    }

    #[test]
    fn the_peak_counts_nodes_in_their_drain_at_once_and_a_handover_is_not_overlap() {
        let rows = [
            row(Some(0.0), Some(10.0)),
            row(Some(10.0), Some(20.0)),
            row(Some(5.0), Some(12.0)),
            row(None, None),
        ];
        assert_eq!(peak_disrupting(&rows), 2);
        assert_eq!(peak_disrupting(&[row(Some(1.0), None)]), 1);
        assert_eq!(peak_disrupting(&[]), 0);
    }

    fn run(makespan: Option<f64>, replaced: Option<f64>, violations: usize) -> PeerRun {
        PeerRun {
            makespan,
            replaced,
            violations: vec!["v".into(); violations],
            ..PeerRun::default()
        }
    }

    #[test]
    fn the_target_compares_medians_and_wants_no_violation_from_rotor() {
        let k = [
            run(Some(100.0), Some(100.0), 0),
            run(Some(120.0), Some(120.0), 1),
        ];
        let r = [
            run(Some(70.0), Some(80.0), 0),
            run(Some(90.0), Some(95.0), 0),
        ];
        let lines = target_lines(3, &k, &r, false);
        assert!(
            lines[1].contains("0.73") && lines[1].ends_with("PASS"),
            "{}",
            lines[1]
        );
        assert!(lines[2].contains("0.80"), "{}", lines[2]);
        assert!(
            lines[3].contains("rotor violations 0") && lines[3].contains("PASS; Karpenter's 1")
        );

        let slow = [run(Some(100.0), None, 2)];
        let lines = target_lines(1, &k[..1], &slow, false);
        assert!(
            lines[1].contains("1.00") && lines[1].contains("MISS"),
            "{}",
            lines[1]
        );
        assert!(lines.iter().all(|l| !l.contains("information")));
        assert!(lines.last().unwrap().contains("MISS"));

        let unfinished = [run(None, None, 0)];
        assert!(target_lines(1, &k, &unfinished, false)[1].contains("n/a"));
    }

    fn pending(makespan: f64, pending_seconds: f64) -> PeerRun {
        PeerRun {
            pending_seconds,
            ..run(Some(makespan), Some(makespan), 0)
        }
    }

    #[test]
    fn with_surge_the_target_is_half_the_makespan_and_no_more_pending_time() {
        let k = [
            pending(300.0, 30.0),
            pending(320.0, 35.0),
            pending(340.0, 40.0),
        ];
        // 0.60 of Karpenter's makespan meets issue 20's target but not surge's 0.50.
        let r = [
            pending(190.0, 20.0),
            pending(192.0, 36.0),
            pending(200.0, 50.0),
        ];
        let lines = target_lines(3, &k, &r, true);
        assert!(
            lines[1].contains("0.60")
                && lines[1].contains("target <= 0.50")
                && lines[1].contains("MISS"),
            "{}",
            lines[1]
        );
        // Medians: 36 against 35.
        let pending_line = lines.iter().find(|l| l.contains("Pending")).unwrap();
        assert!(
            pending_line.contains("36 against Karpenter's 35") && pending_line.ends_with("MISS"),
            "{pending_line}"
        );

        let r = [
            pending(150.0, 10.0),
            pending(155.0, 30.0),
            pending(160.0, 60.0),
        ];
        let lines = target_lines(3, &k, &r, true);
        assert!(
            lines[1].contains("0.48") && lines[1].ends_with("PASS"),
            "{}",
            lines[1]
        );
        let pending_line = lines.iter().find(|l| l.contains("Pending")).unwrap();
        assert!(pending_line.ends_with("PASS"), "{pending_line}");
    }

    #[test]
    fn without_karpenter_runs_the_summary_gives_rotors_medians_and_no_verdict() {
        let r = [pending(150.0, 10.0), pending(170.0, 30.0)];
        let lines = target_lines(1, &[], &r, true);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("160.0 s")
                && lines[0].contains("Pending pod-seconds 20")
                && lines[0].contains("not run"),
            "{}",
            lines[0]
        );
        assert!(!lines[0].contains("PASS") && !lines[0].contains("MISS"));
    }
}
