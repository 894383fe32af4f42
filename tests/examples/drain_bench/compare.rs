//! rotor against the kubectl loop: for each backend, concurrency and run, each contestant on a
//! fresh cluster, every node tainted at t=0, the drains timed by the benchmark's record; the
//! table, the ratios against the loop and the lower bound, the timeline pictures, and the
//! figures of both backends side by side.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use rotor_e2e::{kubectl_command, run_with_timeout};
use rotor_sim::scenario::Scenario;
use tokio::runtime::Handle;

use crate::cluster::{Backend, BenchCluster};
use crate::drainer::{Bins, Drainer};
use crate::lower_bound::LowerBound;
use crate::recorder::Recorder;
use crate::sim::BenchSim;
use crate::snapshot::Snapshot;
use crate::summary::Table;
use crate::timeline::Timeline;
use crate::usage::UsageSampler;
use crate::{Args, SETTLE_FLAG, secs, secs_f};

/// The kubectl loop's per-node `--timeout`, and how long before a hung kubectl is killed.
const KUBECTL_DRAIN_TIMEOUT: &str = "10m";
const KUBECTL_KILL_AFTER: Duration = Duration::from_secs(11 * 60);
/// With `--surge`, at least this share fewer unschedulable pod-seconds than without.
const SURGE_PENDING_CUT: f64 = 0.8;

pub fn compare(
    args: &Args,
    bins: &Bins,
    runtime: &Handle,
    scratch: &Path,
    summary: &mut Vec<String>,
) -> anyhow::Result<()> {
    let scenario = Scenario::load(&args.scenario).map_err(|e| anyhow!("{e}"))?;
    let t = &scenario.timing;
    println!("== rotor-drainer against a kubectl drain loop ==");
    println!(
        "scenario {}: timing tick {}, podStartup {}, podShutdown {}, nodeStartup {}, scaleUpDelay {}, scaleDownDelay {}",
        args.scenario.display(),
        secs(t.tick),
        secs(t.pod_startup),
        secs(t.pod_shutdown),
        secs(t.node_startup),
        secs(t.scale_up_delay),
        secs(t.scale_down_delay),
    );
    println!(
        "rotor:   rotor-drainer run --max-concurrent C --max-unavailable C --settle {SETTLE_FLAG} (other flags at their defaults: --pending-grace 2m, --gate-timeout 15m, --budget-recheck 30s, --blocked-after 30s)"
    );
    if let Some(mu) = &args.rotor_max_unavailable {
        println!(
            "         (diagnostic run: rotor gets --max-unavailable {mu} instead of C; the targets are for --max-unavailable C)"
        );
    }
    println!(
        "kubectl: C workers, each running kubectl drain N --ignore-daemonsets --delete-emptydir-data --force --timeout={KUBECTL_DRAIN_TIMEOUT} on the next node"
    );
    println!(
        "backends: {}; {} run(s) of each contestant, each on a fresh cluster",
        args.backends
            .iter()
            .map(|b| b.name())
            .collect::<Vec<_>>()
            .join(", "),
        args.runs
    );
    std::fs::create_dir_all(&args.pictures)?;
    let mut table = Table::default();
    for &backend in &args.backends {
        for &c in &args.concurrency {
            for run in 1..=args.runs {
                println!();
                println!("-- {} C={c} run {run} of {} --", backend.name(), args.runs);
                let bench = Bench {
                    args,
                    bins,
                    runtime,
                    scenario: &scenario,
                };
                let one = |who: Contestant, wanted: bool| -> anyhow::Result<Option<RunResult>> {
                    if !wanted {
                        return Ok(None);
                    }
                    let dir =
                        scratch.join(format!("{}-{}-c{c}-run{run}", backend.slug(), who.slug()));
                    run_contestant(bench, who, backend, c, &dir).map(Some)
                };
                let rotor = one(Contestant::Rotor, args.rotor)?;
                let surged = one(Contestant::RotorSurge, args.rotor && args.surge)?;
                let kubectl = one(Contestant::Kubectl, args.kubectl)?;
                let bound = rotor
                    .as_ref()
                    .or(kubectl.as_ref())
                    .map(|r| &r.bound)
                    .expect("at least one contestant ran");
                bound.print(c, &scenario);
                println!();
                println!(
                    "{:<24} {:>10} {:>8} {:>11} {:>10} {:>10}  evictions by outcome",
                    "", "makespan", "drained", "budget viol", "requests", "req/node"
                );
                for r in rotor.iter().chain(surged.iter()).chain(kubectl.iter()) {
                    r.print_row();
                }
                for (who, r) in [
                    ("rotor", &rotor),
                    ("rotor --surge", &surged),
                    ("kubectl", &kubectl),
                ] {
                    for n in r.iter().flat_map(|r| &r.notes) {
                        println!("  {who}: {n}");
                    }
                }
                if let (Some(r), Some(s)) = (&rotor, &surged) {
                    surge_lines(c, r, s, summary);
                }
                print_requests(rotor.as_ref(), kubectl.as_ref());
                let picture = args
                    .pictures
                    .join(format!("{}-c{c}-run{run}.svg", backend.slug()));
                let lanes: Vec<(&str, &RunResult)> = rotor
                    .iter()
                    .map(|r| ("rotor-drainer", r))
                    .chain(surged.iter().map(|r| ("rotor-drainer --surge", r)))
                    .chain(kubectl.iter().map(|r| ("kubectl drain loop", r)))
                    .collect();
                let title = format!(
                    "{} on the {}, C={c}, run {run}",
                    scenario_name(&args.scenario),
                    backend.name()
                );
                std::fs::write(
                    &picture,
                    crate::timeline::render(
                        &title,
                        &lanes
                            .iter()
                            .map(|(l, r)| (*l, &r.timeline))
                            .collect::<Vec<_>>(),
                    ),
                )
                .with_context(|| format!("writing {}", picture.display()))?;
                println!("timeline: {}", picture.display());
                table.add(backend, c, rotor, kubectl);
            }
        }
    }
    table.print(args, summary);
    Ok(())
}

pub(crate) fn scenario_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// rotor with `--surge` against rotor without: the seconds workload pods spent unschedulable
/// (the simulator leaves placeholders out) and the makespan.
fn surge_lines(c: usize, rotor: &RunResult, surged: &RunResult, summary: &mut Vec<String>) {
    let cut = if rotor.unschedulable_seconds > 0.0 {
        format!(
            "{:.0} % less",
            100.0 * (1.0 - surged.unschedulable_seconds / rotor.unschedulable_seconds)
        )
    } else {
        "n/a (none without surge)".into()
    };
    let reached = rotor.unschedulable_seconds > 0.0
        && surged.unschedulable_seconds <= rotor.unschedulable_seconds * (1.0 - SURGE_PENDING_CUT);
    let line = format!(
        "C={c}: unschedulable pod-seconds, rotor {:.0} -> with --surge {:.0}: {cut}  (target >= {:.0} % less)  {}",
        rotor.unschedulable_seconds,
        surged.unschedulable_seconds,
        SURGE_PENDING_CUT * 100.0,
        if reached { "PASS" } else { "MISS" }
    );
    println!("{line}");
    summary.push(line);
    let line = match (rotor.makespan, surged.makespan) {
        (Some(r), Some(s)) => format!(
            "C={c}: makespan with --surge / without  {:.2}  ({} / {}; target <= 1.00)  {}",
            s / r,
            secs_f(s),
            secs_f(r),
            if s <= r { "PASS" } else { "MISS" }
        ),
        _ => format!("C={c}: makespan with --surge / without  n/a: a run did not finish  MISS"),
    };
    println!("{line}");
    summary.push(line);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Contestant {
    Rotor,
    RotorSurge,
    Kubectl,
}

impl Contestant {
    fn slug(self) -> &'static str {
        match self {
            Contestant::Rotor => "rotor",
            Contestant::RotorSurge => "rotor-surge",
            Contestant::Kubectl => "kubectl",
        }
    }
}

pub struct RunResult {
    label: String,
    pub makespan: Option<f64>,
    drained: usize,
    pub nodes: usize,
    pub violations: usize,
    requests: BTreeMap<String, u64>,
    evictions: BTreeMap<String, u64>,
    notes: Vec<String>,
    pub bound: LowerBound,
    /// Seconds workload pods spent Pending after the scheduler had found no room for them
    /// (placeholders left out): the simulator's own count, or on the real control plane the
    /// benchmark's record of their `PodScheduled` condition. The scheduler's latency for a pod
    /// it places at its first try is not in it.
    unschedulable_seconds: f64,
    /// The mean number of pods a drain must evict per original node (DaemonSet and mirror pods
    /// left out): the request target is this + 5.
    pub evictable_per_node: f64,
    pub timeline: Timeline,
}

impl RunResult {
    pub fn requests_total(&self) -> u64 {
        self.requests.values().sum()
    }

    pub fn requests_per_node(&self) -> f64 {
        self.requests_total() as f64 / self.nodes.max(1) as f64
    }

    fn print_row(&self) {
        let evictions: Vec<String> = self
            .evictions
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!(
            "{:<24} {:>10} {:>8} {:>11} {:>10} {:>10.1}  {}",
            self.label,
            self.makespan
                .map(secs_f)
                .unwrap_or_else(|| "unfinished".into()),
            format!("{}/{}", self.drained, self.nodes),
            self.violations,
            self.requests_total(),
            self.requests_per_node(),
            evictions.join(", ")
        );
    }
}

fn print_requests(rotor: Option<&RunResult>, kubectl: Option<&RunResult>) {
    let mut keys: Vec<&String> = rotor
        .iter()
        .chain(kubectl.iter())
        .flat_map(|r| r.requests.keys())
        .collect();
    keys.sort();
    keys.dedup();
    println!("API requests by verb and resource (per drained node):");
    println!("  {:<34} {:>16} {:>16}", "", "rotor", "kubectl loop");
    let cell = |r: Option<&RunResult>, k: &String| match r {
        Some(r) => {
            let n = r.requests.get(k).copied().unwrap_or(0);
            format!("{n} ({:.1})", n as f64 / r.nodes.max(1) as f64)
        }
        None => "-".into(),
    };
    for k in keys {
        println!(
            "  {:<34} {:>16} {:>16}",
            k,
            cell(rotor, k),
            cell(kubectl, k)
        );
    }
}

/// What every contestant's run shares: the flags, the binaries, the runtime the clusters' clients
/// run on, and the scenario.
#[derive(Clone, Copy)]
struct Bench<'a> {
    args: &'a Args,
    bins: &'a Bins,
    runtime: &'a Handle,
    scenario: &'a Scenario,
}

/// `--idle`: what rotor-drainer asks of the API server for `idle` while nothing carries the
/// drain taint (its watches open; it holds no Lease while no node needs it), and its resident
/// memory then.
fn idle_reading(
    cluster: &BenchCluster,
    snap: &Snapshot,
    drainer: &Drainer,
    idle: Duration,
) -> anyhow::Result<String> {
    cluster.reset_counters(&snap.budgets)?;
    std::thread::sleep(idle);
    let (counted, _) = cluster.counted(true, 0)?;
    let total: u64 = counted.requests.values().sum();
    let kinds: Vec<String> = counted
        .requests
        .iter()
        .map(|(kind, n)| format!("{kind} {n}"))
        .collect();
    let rss = crate::usage::rss_mib(drainer.process.pid());
    Ok(format!(
        "idle for {} s before t=0: {total} requests ({:.1} a minute: {}), RSS {rss:.1} MiB",
        idle.as_secs(),
        total as f64 * 60.0 / idle.as_secs_f64(),
        kinds.join(", ")
    ))
}

/// One contestant on a fresh cluster: set up, taint every node at t=0 (or `--taint N` of them),
/// drain, measure.
fn run_contestant(
    bench: Bench<'_>,
    who: Contestant,
    backend: Backend,
    c: usize,
    dir: &Path,
) -> anyhow::Result<RunResult> {
    let Bench {
        args,
        bins,
        runtime,
        scenario,
    } = bench;
    std::fs::create_dir_all(dir)?;
    let max_unavailable = args
        .rotor_max_unavailable
        .clone()
        .unwrap_or_else(|| c.to_string());
    let label = match who {
        Contestant::Rotor if args.rotor_max_unavailable.is_some() => {
            format!("rotor C={c} max-unav {max_unavailable}")
        }
        Contestant::Rotor => format!("rotor-drainer C={c}"),
        Contestant::RotorSurge => format!("rotor --surge C={c}"),
        Contestant::Kubectl => format!("kubectl drain loop C={c}"),
    };
    eprintln!("drain_bench: {label}: starting a fresh {}", backend.name());
    let cluster = BenchCluster::start(backend, runtime, &args.scenario, scenario, dir)?;
    let snap = Snapshot::take(&cluster, scenario, args.taint)?;
    let bound = LowerBound::derive(scenario, &snap, cluster.tick(scenario))?;
    let recorder = Recorder::start(cluster.client(), cluster.runtime(), &snap.listed)?;
    let mut notes = Vec::new();

    // Before t=0: the contestant ready and idle, the counters zeroed.
    let mut drainer = match who {
        Contestant::Rotor | Contestant::RotorSurge => {
            let cs = c.to_string();
            let mut flags = vec![
                "--max-concurrent",
                &cs,
                "--max-unavailable",
                &max_unavailable,
            ];
            let ahead = args.surge_ahead.map(|n| n.to_string());
            if who == Contestant::RotorSurge {
                cluster.create_surge_class(dir)?;
                flags.push("--surge");
                if let Some(ahead) = &ahead {
                    flags.extend(["--surge-ahead", ahead]);
                }
            }
            let mut d = cluster.start_drainer(bins, dir, &flags)?;
            d.wait_standing_by(Duration::from_secs(60))?;
            cluster.wait_drainer_watching(Duration::from_secs(60))?;
            std::thread::sleep(Duration::from_secs(1));
            Some(d)
        }
        Contestant::Kubectl => {
            // A script's earlier kubectl calls would have filled the discovery cache.
            let out = run_with_timeout(
                cluster.kubectl().args(["get", "nodes"]),
                Duration::from_secs(60),
            );
            ensure!(
                out.status.success(),
                "kubectl get nodes failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            None
        }
    };
    if let (Some(d), Some(idle)) = (&drainer, args.idle) {
        notes.push(idle_reading(&cluster, &snap, d, idle)?);
        eprintln!("drain_bench: {label}: {}", notes[notes.len() - 1]);
    }
    cluster.reset_counters(&snap.budgets)?;
    let names: Vec<String> = snap.nodes.iter().map(|n| n.name.clone()).collect();
    let deadline = Instant::now() + args.run_timeout;
    let mut processes: Vec<(String, u32)> = drainer
        .iter()
        .map(|d| ("rotor-drainer".to_string(), d.process.pid()))
        .collect();
    processes.extend(cluster.servers());
    // The benchmark's own watches of every pod and node, and the test cluster's autoscaler.
    processes.push(("drain_bench".to_string(), std::process::id()));
    let sampler = UsageSampler::start(processes);

    // t=0: every node gets the drain taint.
    let t0 = Instant::now();
    cluster.taint_originals(&snap)?;
    eprintln!(
        "drain_bench: {label}: tainted {} nodes in {:.2} s",
        names.len(),
        t0.elapsed().as_secs_f64()
    );

    let kubectl_done = match &mut drainer {
        Some(d) => {
            wait_for_nodes(&label, Some(d), &recorder, &names, t0, deadline)?;
            HashMap::new()
        }
        None => {
            let (done, failures) =
                kubectl_loop(&label, c, &cluster, &recorder, &names, t0, deadline);
            notes.extend(failures);
            done
        }
    };
    let (usage, load) = sampler.finish();
    let lines = usage
        .iter()
        .map(ToString::to_string)
        .chain(load.map(|l| l.to_string()));
    for line in lines {
        eprintln!("drain_bench: {label}: {line}");
        notes.push(line);
    }
    let (counted, sim_stats) = cluster.counted(who != Contestant::Kubectl, names.len() as u64)?;
    let readings = cluster.audit_readings(&snap, who != Contestant::Kubectl)?;
    for line in &readings {
        eprintln!("drain_bench: {label}: {line}");
    }
    notes.extend(readings);
    let record = recorder.record();
    drop(recorder);
    // The same cycle from the benchmark's own watches, on both backends alike.
    if let Some((name, cycles)) =
        crate::cycle::busiest(&snap.budgets, |budget| record.budget_cycles(budget))
    {
        for line in crate::cycle::CycleParts::of(&cycles).lines(name, "watches") {
            eprintln!("drain_bench: {label}: {line}");
            notes.push(line);
        }
    }
    let timeline = Timeline::from_record(&record, &names, &kubectl_done, t0);
    let drained = timeline.done_count();
    let makespan = timeline.makespan();
    if makespan.is_none() {
        notes.push(format!(
            "only {drained} of {} nodes drained within --run-timeout {} s",
            names.len(),
            args.run_timeout.as_secs()
        ));
    }
    if let Some(d) = &drainer {
        let starts = d.log_count("starting to drain");
        let resumes = d.log_count("resuming the recorded drain");
        let gate = d.log_count("waiting for the cluster to settle");
        let warnings = d.log_count(" WARN ");
        notes.push(format!(
            "{starts} drain starts and {resumes} resumes for {} nodes; {gate} gate holds logged; {warnings} warnings in its log",
            names.len()
        ));
    }
    drop(drainer);
    if !counted.violations.is_empty() {
        notes.push(format!(
            "budget violations: {}",
            counted.violations.join("; ")
        ));
    }
    let pending_seconds = timeline.pending_seconds();
    let unschedulable_seconds = timeline.unschedulable_seconds();
    notes.push(format!(
        "pending pod-seconds {pending_seconds:.0} (of them unschedulable {unschedulable_seconds:.0}){}, nodes launched {}, removed {}",
        sim_stats
            .as_ref()
            .map(|s| format!(
                " (the simulator's unschedulable pod-seconds {:.0})",
                s["unschedulablePodSeconds"].as_f64().unwrap_or(0.0)
            ))
            .unwrap_or_default(),
        counted.nodes_launched,
        counted.nodes_removed
    ));
    eprintln!(
        "drain_bench: {label}: {}",
        makespan
            .map(|m| format!("makespan {m:.1} s"))
            .unwrap_or_else(|| "unfinished".into())
    );
    let evictable: usize = snap.nodes.iter().map(|n| n.pods).sum();
    Ok(RunResult {
        label,
        makespan,
        drained,
        nodes: names.len(),
        violations: counted.violations.len(),
        requests: counted.requests,
        evictions: counted.evictions,
        notes,
        bound,
        // What surge is for: no evicted pod waiting for room. Its replacements still wait their
        // turn at the scheduler (tens of milliseconds each on the real control plane), which
        // `pending_seconds` counts and no drainer can remove.
        unschedulable_seconds: match &sim_stats {
            Some(s) => s["unschedulablePodSeconds"].as_f64().unwrap_or(0.0),
            None => unschedulable_seconds,
        },
        evictable_per_node: evictable as f64 / names.len().max(1) as f64,
        timeline,
    })
}

/// The PriorityClass `deploy/` ships for `--surge`, created in the simulator.
pub fn create_surge_class(sim: &BenchSim, dir: &Path) -> anyhow::Result<()> {
    let path = dir.join("rotor-surge.json");
    let class = serde_json::json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "rotor-surge"}, "value": -5, "preemptionPolicy": "Never"
    });
    std::fs::write(&path, class.to_string())?;
    let out = run_with_timeout(
        kubectl_command(&sim.process)
            .args(["create", "--validate=false", "-f"])
            .arg(&path),
        Duration::from_secs(60),
    );
    ensure!(
        out.status.success(),
        "creating the PriorityClass rotor-surge failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Waits until every original node is done (drained or gone), or the deadline; fails if the
/// benchmark's watch ends or `drainer`, when there is one, exits.
pub(crate) fn wait_for_nodes(
    label: &str,
    mut drainer: Option<&mut Drainer>,
    watch: &Recorder,
    names: &[String],
    t0: Instant,
    deadline: Instant,
) -> anyhow::Result<()> {
    let mut last_report = Instant::now();
    loop {
        let done = watch.done_count(names, None);
        if done == names.len() || Instant::now() >= deadline {
            return Ok(());
        }
        if let Some(e) = watch.ended() {
            bail!("the benchmark's watch ended: {e}");
        }
        if let Some(drainer) = drainer.as_deref_mut()
            && let Some(status) = drainer.exited()
        {
            bail!(
                "rotor-drainer exited ({status}); its log {}:\n{}",
                drainer.log_path().display(),
                drainer.log_tail()
            );
        }
        if last_report.elapsed() >= Duration::from_secs(15) {
            last_report = Instant::now();
            eprintln!(
                "drain_bench: {label}: {:.0} s, {done}/{} nodes done",
                t0.elapsed().as_secs_f64(),
                names.len()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// C workers, each running `kubectl drain` on the next node until none is left (or the
/// deadline); returns when each node's drain succeeded, and the failures.
fn kubectl_loop(
    label: &str,
    c: usize,
    cluster: &BenchCluster,
    watch: &Recorder,
    names: &[String],
    t0: Instant,
    deadline: Instant,
) -> (HashMap<String, Instant>, Vec<String>) {
    let queue: Mutex<VecDeque<String>> = Mutex::new(names.iter().cloned().collect());
    let done: Mutex<HashMap<String, Instant>> = Mutex::new(HashMap::new());
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..c)
            .map(|_| {
                s.spawn(|| {
                    while Instant::now() < deadline {
                        let Some(node) = queue.lock().expect("queue").pop_front() else {
                            break;
                        };
                        let out = kubectl_drain(cluster, &node);
                        if out.status.success() {
                            done.lock().expect("done").insert(node, Instant::now());
                        } else {
                            let err = String::from_utf8_lossy(&out.stderr);
                            let last = err.lines().last().unwrap_or("").to_string();
                            failures.lock().expect("failures").push(format!(
                                "kubectl drain {node} failed ({}): {last}",
                                out.status
                            ));
                        }
                    }
                })
            })
            .collect();
        s.spawn(|| {
            let mut last_report = Instant::now();
            while !finished.load(Ordering::Relaxed) {
                if last_report.elapsed() >= Duration::from_secs(15) {
                    last_report = Instant::now();
                    let n = watch.done_count(names, Some(&*done.lock().expect("done")));
                    eprintln!(
                        "drain_bench: {label}: {:.0} s, {n}/{} nodes drained",
                        t0.elapsed().as_secs_f64(),
                        names.len()
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        for w in workers {
            let _ = w.join();
        }
        finished.store(true, Ordering::Relaxed);
    });
    (
        done.into_inner().expect("done"),
        failures.into_inner().expect("failures"),
    )
}

fn kubectl_drain(cluster: &BenchCluster, node: &str) -> std::process::Output {
    let mut cmd = cluster.kubectl();
    cmd.args([
        "drain",
        node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--force",
        &format!("--timeout={KUBECTL_DRAIN_TIMEOUT}"),
    ]);
    run_with_timeout(&mut cmd, KUBECTL_KILL_AFTER)
}
