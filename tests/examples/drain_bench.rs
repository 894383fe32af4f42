//! The drainer benchmark (issue 4, item 8): rotor-drainer against a loop of real `kubectl drain`
//! at equal concurrency on the same simulated cluster, rotor against the scenario's lower bound,
//! and rotor-drainer's memory and idle API traffic in a 5,000-node / 150,000-pod simulation.
//!
//! ```sh
//! cargo build --release -p rotor-sim -p rotor-drainer --bins
//! cargo run --release -p rotor-e2e --example drain_bench                      # C=1, then memory
//! cargo run --release -p rotor-e2e --example drain_bench -- --concurrency 1,3 # C=1 and C=3
//! ```
//!
//! Flags: `--concurrency 1,3` (default 1), `--scenario FILE` (default
//! `examples/scenarios/bench-50.yaml`), `--scale-scenario FILE` (default
//! `examples/scenarios/scale-5k.yaml`), `--only rotor|kubectl`, `--skip-compare`,
//! `--skip-memory`, `--run-timeout SECONDS` (default 1200, per contestant),
//! `--rotor-max-unavailable N|P%` (default C; a diagnostic, e.g. `100%` shows what waiting for
//! the autoscaler to retire drained nodes costs). Progress goes to
//! stderr, figures to stdout. A benchmark reports; it does not assert: targets missed are printed
//! as MISS and the exit status stays 0 (it is non-zero only when something could not run).
//!
//! For each concurrency C and each contestant a fresh `rotor-sim serve` runs the scenario. Before
//! t=0 the benchmark lists the nodes and pods (the lower bound's input) and opens one watch on
//! nodes, which times every drain without any further request; then it zeroes the simulator's
//! counters and, at t=0, adds the taint `rotor.dev/drain=manual:NoSchedule` to every node with
//! one JSON patch each, sent in parallel. Then:
//!
//! - rotor: `rotor-drainer run --max-concurrent C --max-unavailable C --settle 1s`, started
//!   before t=0 and idle (leading, watches open), as a Deployment would be; a node counts as
//!   drained when the watch shows `rotor.dev/phase=drained` on it, or when it is gone (the
//!   simulated autoscaler removes drained, empty nodes after `scaleDownDelay`);
//! - kubectl: C workers, each taking the next node (by name) and running `kubectl drain N
//!   --ignore-daemonsets --delete-emptydir-data --force --timeout=10m` until none is left; a node
//!   counts as drained when its `kubectl drain` exits 0, or when it is gone.
//!
//! Makespan is t=0 until the last original node counts as drained. Budget violations are the
//! simulator's `budgetViolations`; API requests are its request counters at that moment, less
//! the benchmark's own taint patches (one per node), divided by the number of nodes.
//!
//! The lower bound (derived in [`LowerBound`]) is what no drainer that follows issue 4's rules
//! can beat on the scenario at concurrency C: the largest of a per-node bound (every node needs
//! its longest pod shutdown, C nodes at a time), one bound per PodDisruptionBudget (only
//! `allowed` pods can be down at once, and each needs a new node and its start-up time, plus
//! one simulator tick, to come back) and the gate's (the workloads evicted from a drained node
//! must be Ready again before the next start). The bound without the gate is printed too.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use rotor_e2e::{kubectl_path, run_with_timeout, workspace_root};
use rotor_sim::cluster::objects::{
    SHUTDOWN_ANNOTATION, STARTUP_ANNOTATION, annotation_duration, is_daemon, is_mirror, terminal,
};
use rotor_sim::cluster::pdb::{covers, eviction_selector};
use rotor_sim::scenario::{Scenario, WorkloadKind};
use serde_json::{Value, json};

/// rotor-drainer's `--settle`: how long a node must have been unschedulable before it is marked
/// drained (every node is tainted at t=0, so this only matters in the first second); it must also
/// stay empty for a quarter of it, which the lower bound leaves out (a bound for any drainer).
const SETTLE: Duration = Duration::from_secs(1);
const SETTLE_FLAG: &str = "1s";
/// How far off its tick grid the lower bound allows one step of the simulator's control loop
/// to run (see [`LowerBound`], 2.).
const STEP_JITTER: Duration = Duration::from_millis(20);
/// The kubectl loop's per-node `--timeout`, and how long before a hung kubectl is killed.
const KUBECTL_DRAIN_TIMEOUT: &str = "10m";
const KUBECTL_KILL_AFTER: Duration = Duration::from_secs(11 * 60);
/// How long a plain request to the simulator may take (lists of 1,100 pods included).
const HTTP_TIMEOUT: Duration = Duration::from_secs(60);
/// Targets from issue 4.
const TARGET_VS_KUBECTL: f64 = 0.7;
const TARGET_VS_BOUND: f64 = 1.25;
const TARGET_RSS_MIB: f64 = 64.0;
/// How long the drainer is left alone before its idle memory is read, and the idle request
/// window.
const IDLE_WAIT: Duration = Duration::from_secs(20);
const IDLE_WINDOW: Duration = Duration::from_secs(20);

fn main() {
    if let Err(e) = run() {
        eprintln!("drain_bench: {e:#}");
        std::process::exit(1);
    }
}

struct Args {
    concurrency: Vec<usize>,
    scenario: PathBuf,
    scale_scenario: PathBuf,
    rotor: bool,
    kubectl: bool,
    compare: bool,
    memory: bool,
    run_timeout: Duration,
    /// rotor's `--max-unavailable` when not C (a diagnostic: what the retirement of drained
    /// nodes costs).
    rotor_max_unavailable: Option<String>,
}

const USAGE: &str = "usage: drain_bench [--concurrency 1,3] [--scenario FILE] [--scale-scenario FILE] \
[--only rotor|kubectl] [--skip-compare] [--skip-memory] [--run-timeout SECONDS] \
[--rotor-max-unavailable N|P%]";

fn parse_args() -> anyhow::Result<Args> {
    let root = workspace_root();
    let mut a = Args {
        concurrency: vec![1],
        scenario: root.join("examples/scenarios/bench-50.yaml"),
        scale_scenario: root.join("examples/scenarios/scale-5k.yaml"),
        rotor: true,
        kubectl: true,
        compare: true,
        memory: true,
        run_timeout: Duration::from_secs(1200),
        rotor_max_unavailable: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| anyhow!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--concurrency" => {
                a.concurrency = value()?
                    .split(',')
                    .map(|c| c.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| anyhow!("--concurrency takes numbers like 1,3: {e}"))?;
                ensure!(
                    a.concurrency.iter().all(|c| *c >= 1),
                    "--concurrency must be at least 1"
                );
            }
            "--scenario" => a.scenario = PathBuf::from(value()?),
            "--scale-scenario" => a.scale_scenario = PathBuf::from(value()?),
            "--only" => match value()?.as_str() {
                "rotor" => a.kubectl = false,
                "kubectl" => a.rotor = false,
                other => bail!("--only takes rotor or kubectl, not {other:?}"),
            },
            "--rotor-max-unavailable" => a.rotor_max_unavailable = Some(value()?),
            "--skip-compare" => a.compare = false,
            "--skip-memory" => a.memory = false,
            "--run-timeout" => {
                a.run_timeout = Duration::from_secs(
                    value()?
                        .parse()
                        .map_err(|e| anyhow!("--run-timeout takes seconds: {e}"))?,
                )
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown flag {other:?}\n{USAGE}"),
        }
    }
    Ok(a)
}

fn run() -> anyhow::Result<()> {
    let args = parse_args()?;
    let bins = Bins::locate()?;
    let scratch = std::env::temp_dir().join(format!("rotor-drain-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("cannot create {}", scratch.display()))?;
    eprintln!(
        "drain_bench: binaries from {}, logs under {}",
        bins.dir.display(),
        scratch.display()
    );
    let mut summary: Vec<String> = Vec::new();
    if args.compare {
        compare(&args, &bins, &scratch, &mut summary)?;
    }
    if args.memory {
        let m = memory(&args, &bins, &scratch.join("memory"))?;
        m.print(&mut summary);
    }
    if !summary.is_empty() {
        println!();
        println!("== targets (issue 4) ==");
        for line in &summary {
            println!("{line}");
        }
    }
    if std::env::var_os("ROTOR_E2E_KEEP").is_some() {
        eprintln!("drain_bench: kept {}", scratch.display());
    } else {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// rotor against the kubectl loop

fn compare(
    args: &Args,
    bins: &Bins,
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
        "rotor:   rotor-drainer run --max-concurrent C --max-unavailable C --settle {SETTLE_FLAG} (other flags at their defaults: --pending-grace 2m, --gate-timeout 15m, --budget-recheck 30s)"
    );
    if let Some(mu) = &args.rotor_max_unavailable {
        println!(
            "         (diagnostic run: rotor gets --max-unavailable {mu} instead of C; the targets are for --max-unavailable C)"
        );
    }
    println!(
        "kubectl: C workers, each running kubectl drain N --ignore-daemonsets --delete-emptydir-data --force --timeout={KUBECTL_DRAIN_TIMEOUT} on the next node"
    );
    for &c in &args.concurrency {
        println!();
        println!("-- concurrency C={c} --");
        let rotor = if args.rotor {
            Some(run_contestant(
                Contestant::Rotor,
                c,
                args,
                bins,
                &scenario,
                &scratch.join(format!("rotor-c{c}")),
            )?)
        } else {
            None
        };
        let kubectl = if args.kubectl {
            Some(run_contestant(
                Contestant::Kubectl,
                c,
                args,
                bins,
                &scenario,
                &scratch.join(format!("kubectl-c{c}")),
            )?)
        } else {
            None
        };
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
        for r in rotor.iter().chain(kubectl.iter()) {
            r.print_row();
        }
        if let Some(r) = &rotor {
            for n in &r.notes {
                println!("  rotor: {n}");
            }
        }
        if let Some(k) = &kubectl {
            for n in &k.notes {
                println!("  kubectl: {n}");
            }
        }
        let lb = bound.total(c);
        if let (Some(r), Some(k)) = (&rotor, &kubectl) {
            match (r.makespan, k.makespan) {
                (Some(rm), Some(km)) => {
                    let ratio = rm / km;
                    let line = format!(
                        "C={c}: rotor / kubectl loop makespan  {ratio:.2}  (target <= {TARGET_VS_KUBECTL:.2})  {}",
                        verdict(ratio <= TARGET_VS_KUBECTL, ratio, TARGET_VS_KUBECTL)
                    );
                    println!("{line}");
                    summary.push(line);
                }
                _ => {
                    let line = format!(
                        "C={c}: rotor / kubectl loop makespan  n/a: a run did not finish  MISS"
                    );
                    println!("{line}");
                    summary.push(line);
                }
            }
        }
        if let Some(r) = &rotor {
            let line = match r.makespan {
                Some(rm) => {
                    let ratio = rm / lb;
                    format!(
                        "C={c}: rotor / lower bound            {ratio:.2}  (target <= {TARGET_VS_BOUND:.2}; {} / {})  {}",
                        secs_f(rm),
                        secs_f(lb),
                        verdict(ratio <= TARGET_VS_BOUND, ratio, TARGET_VS_BOUND)
                    )
                }
                None => format!("C={c}: rotor / lower bound  n/a: rotor did not finish  MISS"),
            };
            println!("{line}");
            summary.push(line);
            if let Some(rm) = r.makespan {
                let free = bound.without_gate(c);
                let line = format!(
                    "C={c}: rotor / bound without the gate {:.2}  (information; {} / {})",
                    rm / free,
                    secs_f(rm),
                    secs_f(free)
                );
                println!("{line}");
                summary.push(line);
            }
            let line = format!(
                "C={c}: rotor budget violations        {}  (target 0)  {}",
                r.violations,
                if r.violations == 0 { "PASS" } else { "MISS" }
            );
            summary.push(line);
        }
        print_requests(rotor.as_ref(), kubectl.as_ref());
    }
    Ok(())
}

fn verdict(ok: bool, value: f64, target: f64) -> String {
    if ok {
        "PASS".into()
    } else {
        format!(
            "MISS by {:.2} ({:.0}% over)",
            value - target,
            (value / target - 1.0) * 100.0
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Contestant {
    Rotor,
    Kubectl,
}

struct RunResult {
    label: String,
    makespan: Option<f64>,
    drained: usize,
    nodes: usize,
    violations: u64,
    requests: BTreeMap<String, u64>,
    evictions: BTreeMap<String, u64>,
    notes: Vec<String>,
    bound: LowerBound,
}

impl RunResult {
    fn requests_total(&self) -> u64 {
        self.requests.values().sum()
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
            self.requests_total() as f64 / self.nodes.max(1) as f64,
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

/// One contestant on a fresh simulator: set up, taint every node at t=0, drain, measure.
fn run_contestant(
    who: Contestant,
    c: usize,
    args: &Args,
    bins: &Bins,
    scenario: &Scenario,
    dir: &Path,
) -> anyhow::Result<RunResult> {
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
        Contestant::Kubectl => format!("kubectl drain loop C={c}"),
    };
    eprintln!("drain_bench: {label}: starting rotor-sim");
    let sim = Sim::start(&bins.sim, &args.scenario, dir, Duration::from_secs(120))?;
    let snap = Snapshot::take(&sim, scenario)?;
    let bound = LowerBound::derive(scenario, &snap)?;
    let watch = NodeWatch::start(&sim.host, &snap.resource_version, None)?;
    let mut notes = Vec::new();

    // Before t=0: the contestant ready and idle, the counters zeroed.
    let kube_cache = dir.join("kube-cache");
    let mut drainer = match who {
        Contestant::Rotor => {
            let cs = c.to_string();
            let mut d = Drainer::start(
                &bins.drainer,
                &sim.kubeconfig,
                &dir.join("rotor-drainer.log"),
                &[
                    "run",
                    "--admin-listen",
                    "127.0.0.1:0",
                    "--lease-namespace",
                    "rotor-system",
                    "--max-concurrent",
                    &cs,
                    "--max-unavailable",
                    &max_unavailable,
                    "--settle",
                    SETTLE_FLAG,
                ],
            )?;
            d.wait_standing_by(Duration::from_secs(60))?;
            // Leading, then its budget and node watches open (the monitor holds one node watch).
            wait_for_requests(
                &sim,
                &[("watch nodes", 2), ("watch poddisruptionbudgets", 1)],
                Duration::from_secs(60),
            )?;
            std::thread::sleep(Duration::from_secs(1));
            Some(d)
        }
        Contestant::Kubectl => {
            // A script's earlier kubectl calls would have filled the discovery cache.
            let out = kubectl_cmd(&sim, &kube_cache, &["get", "nodes"]);
            ensure!(
                out.status.success(),
                "kubectl get nodes failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            None
        }
    };
    sim.reset_stats()?;
    let names: Vec<String> = snap.nodes.iter().map(|n| n.name.clone()).collect();
    let deadline = Instant::now() + args.run_timeout;

    // t=0: every node gets the drain taint.
    let t0 = Instant::now();
    taint_all(&sim.host, &snap.nodes)?;
    eprintln!(
        "drain_bench: {label}: tainted {} nodes in {:.2} s",
        names.len(),
        t0.elapsed().as_secs_f64()
    );

    let kubectl_done = match &mut drainer {
        Some(d) => {
            wait_for_rotor(&label, d, &watch, &names, t0, deadline)?;
            HashMap::new()
        }
        None => {
            let (done, failures) =
                kubectl_loop(&label, c, &sim, &kube_cache, &watch, &names, t0, deadline);
            notes.extend(failures);
            done
        }
    };
    let stats = sim.stats()?;
    let done: Vec<Option<Instant>> = names
        .iter()
        .map(|n| {
            let k = kubectl_done.get(n).copied();
            let w = watch.done_at(n);
            match (k, w) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        })
        .collect();
    let drained = done.iter().filter(|d| d.is_some()).count();
    let makespan = if drained == names.len() {
        done.iter()
            .flatten()
            .max()
            .map(|t| t.duration_since(t0).as_secs_f64())
    } else {
        notes.push(format!(
            "only {drained} of {} nodes drained within --run-timeout {} s",
            names.len(),
            args.run_timeout.as_secs()
        ));
        None
    };
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

    let mut requests = counts(&stats["requests"]);
    // The benchmark's own taint patches are not the contestant's.
    if let Some(n) = requests.get_mut("patch nodes") {
        *n = n.saturating_sub(names.len() as u64);
        if *n == 0 {
            requests.remove("patch nodes");
        }
    }
    let evictions = counts(&stats["evictions"]);
    let violations = stats["budgetViolations"].as_u64().unwrap_or(0);
    if violations > 0 {
        let list = &stats["budgetViolationList"];
        notes.push(format!(
            "budget violations: {}",
            serde_json::to_string(list).unwrap_or_default()
        ));
    }
    notes.push(format!(
        "unschedulable pod-seconds {:.0}, nodes launched {}, removed {}",
        stats["unschedulablePodSeconds"].as_f64().unwrap_or(0.0),
        stats["nodesLaunched"],
        stats["nodesRemoved"]
    ));
    eprintln!(
        "drain_bench: {label}: {}",
        makespan
            .map(|m| format!("makespan {m:.1} s"))
            .unwrap_or_else(|| "unfinished".into())
    );
    Ok(RunResult {
        label,
        makespan,
        drained,
        nodes: names.len(),
        violations,
        requests,
        evictions,
        notes,
        bound,
    })
}

/// Waits until every original node is drained or gone, or the deadline.
fn wait_for_rotor(
    label: &str,
    drainer: &mut Drainer,
    watch: &NodeWatch,
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
            bail!("the benchmark's node watch ended: {e}");
        }
        if let Some(status) = drainer.exited() {
            bail!(
                "rotor-drainer exited ({status}); its log {}:\n{}",
                drainer.log.display(),
                tail(&drainer.log, 30)
            );
        }
        if last_report.elapsed() >= Duration::from_secs(15) {
            last_report = Instant::now();
            eprintln!(
                "drain_bench: {label}: {:.0} s, {done}/{} nodes drained",
                t0.elapsed().as_secs_f64(),
                names.len()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// C workers, each running `kubectl drain` on the next node until none is left (or the
/// deadline); returns when each node's drain succeeded, and the failures.
#[allow(clippy::too_many_arguments)]
fn kubectl_loop(
    label: &str,
    c: usize,
    sim: &Sim,
    cache: &Path,
    watch: &NodeWatch,
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
                        let out = kubectl_drain(sim, cache, &node);
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

fn kubectl_cmd(sim: &Sim, cache: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(kubectl_path());
    cmd.arg("--kubeconfig")
        .arg(&sim.kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .env_remove("KUBECONFIG");
    run_with_timeout(&mut cmd, Duration::from_secs(60))
}

fn kubectl_drain(sim: &Sim, cache: &Path, node: &str) -> std::process::Output {
    let mut cmd = Command::new(kubectl_path());
    cmd.arg("--kubeconfig")
        .arg(&sim.kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args([
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            &format!("--timeout={KUBECTL_DRAIN_TIMEOUT}"),
        ])
        .env_remove("KUBECONFIG");
    run_with_timeout(&mut cmd, KUBECTL_KILL_AFTER)
}

/// Polls the simulator's request counters until each `(key, at least)` holds.
fn wait_for_requests(sim: &Sim, want: &[(&str, u64)], timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let stats = sim.stats()?;
        if want
            .iter()
            .all(|(k, n)| stats["requests"][*k].as_u64().unwrap_or(0) >= *n)
        {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "timed out waiting for requests {want:?}; requests so far: {}",
            stats["requests"]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Adds the drain taint to every node at once: one JSON patch per node, in parallel.
fn taint_all(host: &str, nodes: &[OriginalNode]) -> anyhow::Result<()> {
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|n| s.spawn(move || taint(host, &n.name, &n.taints)))
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow!("a taint thread panicked"))??;
        }
        Ok(())
    })
}

fn taint(host: &str, node: &str, existing: &[Value]) -> anyhow::Result<()> {
    let mut taints = existing.to_vec();
    taints.push(json!({"key": "rotor.dev/drain", "value": "manual", "effect": "NoSchedule"}));
    let patch = json!([{"op": "add", "path": "/spec/taints", "value": taints}]);
    let (status, body) = http(
        host,
        "PATCH",
        &format!("/api/v1/nodes/{node}"),
        Some(("application/json-patch+json", &patch.to_string())),
        HTTP_TIMEOUT,
    )?;
    ensure!(status == 200, "tainting {node} answered {status}: {body}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The cluster at t=0 and the lower bound

struct OriginalNode {
    name: String,
    taints: Vec<Value>,
    /// The longest shutdown among the pods a drain must remove from it (seconds).
    longest_shutdown: f64,
    /// The pods on it that a controller replaces, for the gate.
    replaced: Vec<Replaced>,
    pods: usize,
}

/// A pod a controller replaces once it is evicted: when its replacement can be Ready.
struct Replaced {
    /// How long after the eviction the replacement is created: 0 for a Deployment's, the old
    /// pod's shutdown for a StatefulSet's (same name, so only once the old one is gone).
    created_after: f64,
    startup: f64,
    /// A PodDisruptionBudget covers it.
    budgeted: bool,
}

struct Snapshot {
    resource_version: String,
    nodes: Vec<OriginalNode>,
    /// `namespace/name` of every PodDisruptionBudget: (status.expectedPods,
    /// status.disruptionsAllowed) with every pod healthy.
    budgets: HashMap<String, (i64, i64)>,
}

impl Snapshot {
    /// Lists nodes and pods before t=0 (these requests are not counted: the counters are
    /// zeroed afterwards).
    fn take(sim: &Sim, scenario: &Scenario) -> anyhow::Result<Snapshot> {
        let list = sim.get("/api/v1/nodes")?;
        let resource_version = list["metadata"]["resourceVersion"]
            .as_str()
            .ok_or_else(|| anyhow!("node list without resourceVersion"))?
            .to_string();
        let mut nodes: BTreeMap<String, OriginalNode> = BTreeMap::new();
        for n in list["items"].as_array().into_iter().flatten() {
            let name = n["metadata"]["name"].as_str().unwrap_or("").to_string();
            let taints = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
            ensure!(
                taints.iter().all(|t| t["key"] != "rotor.dev/drain"),
                "node {name} is already tainted"
            );
            nodes.insert(
                name.clone(),
                OriginalNode {
                    name,
                    taints,
                    longest_shutdown: 0.0,
                    replaced: Vec::new(),
                    pods: 0,
                },
            );
        }
        // Every budget: its figures, and its selector as the eviction subresource reads it, to
        // tell which pods it covers (the simulator's own matching).
        let mut budgets = HashMap::new();
        let mut covering = Vec::new();
        for b in sim.get("/apis/policy/v1/poddisruptionbudgets")?["items"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let pdb: PodDisruptionBudget =
                serde_json::from_value(b.clone()).context("a budget from the list")?;
            let key = format!(
                "{}/{}",
                pdb.metadata.namespace.as_deref().unwrap_or(""),
                pdb.metadata.name.as_deref().unwrap_or("")
            );
            let status = pdb.status.as_ref();
            budgets.insert(
                key,
                (
                    status.map_or(0, |s| i64::from(s.expected_pods)),
                    status.map_or(0, |s| i64::from(s.disruptions_allowed)),
                ),
            );
            let selector = eviction_selector(&pdb);
            covering.push((pdb, selector));
        }
        let pods = sim.get("/api/v1/pods")?;
        let default_shutdown = scenario.timing.pod_shutdown;
        for item in pods["items"].as_array().into_iter().flatten() {
            let pod: Pod = serde_json::from_value(item.clone()).context("a pod from the list")?;
            if is_daemon(&pod) || is_mirror(&pod) || terminal(&pod) {
                continue;
            }
            let spec = pod.spec.as_ref();
            let Some(node) = spec.and_then(|s| s.node_name.as_deref()) else {
                bail!(
                    "pod {:?} is not scheduled at t=0: the scenario should start settled",
                    pod.metadata.name
                );
            };
            let grace = spec
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30)
                .max(0) as f64;
            let shutdown = annotation_duration(&pod.metadata, SHUTDOWN_ANNOTATION)
                .unwrap_or(default_shutdown)
                .as_secs_f64()
                .min(grace);
            let startup = annotation_duration(&pod.metadata, STARTUP_ANNOTATION)
                .unwrap_or(scenario.timing.pod_startup)
                .as_secs_f64();
            let controller = pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
                .map(|o| o.kind.as_str());
            let created_after = match controller {
                Some("StatefulSet") => Some(shutdown),
                Some(_) => Some(0.0),
                None => None, // nobody replaces a bare pod; the gate does not wait for it
            };
            let budgeted = covering
                .iter()
                .any(|(pdb, selector)| covers(pdb, selector.as_ref(), &pod));
            if let Some(n) = nodes.get_mut(node) {
                n.longest_shutdown = n.longest_shutdown.max(shutdown);
                if let Some(created_after) = created_after {
                    n.replaced.push(Replaced {
                        created_after,
                        startup,
                        budgeted,
                    });
                }
                n.pods += 1;
            }
        }
        Ok(Snapshot {
            resource_version,
            nodes: nodes.into_values().collect(),
            budgets,
        })
    }
}

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
///    node is removed scaleDownDelay after it is empty. So no slot comes back before
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
/// The bound is the largest of the three. It ignores, so a real run is always above it: how
/// much room the autoscaler adds after the first node (it sizes each scale-up for the pods
/// pending then, so a later eviction may wait scaleUpDelay + nodeStartup again), the
/// simulator's tick outside the budgets' cycles and API latencies, the interplay of budgets and
/// node slots (a node waiting on one budget holds its slot), and the time to retire drained
/// nodes.
struct LowerBound {
    settle: f64,
    /// Each node's d_i and its gated workloads' Ready times, for [`LowerBound::gated`].
    gate_inputs: Vec<GateInput>,
    node_sum: f64,
    node_max: f64,
    nodes: usize,
    /// Nodes by their d_i, for the explanation.
    node_costs: BTreeMap<String, usize>,
    t_cap: f64,
    budgets: Vec<BudgetBound>,
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
    fn derive(scenario: &Scenario, snap: &Snapshot) -> anyhow::Result<LowerBound> {
        let t = &scenario.timing;
        let settle = SETTLE.as_secs_f64();
        let tick = t.tick.as_secs_f64();
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
        let t_cap = t.node_startup.as_secs_f64()
            + t.scale_up_delay
                .as_secs_f64()
                .min(shortest_emptying + t.scale_down_delay.as_secs_f64());
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
            let Some(&(pods, allowed)) = snap.budgets.get(&key) else {
                bail!("the scenario's budget {key} is not in the cluster");
            };
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
                    whole_ticks(startup, tick) + tick - STEP_JITTER.as_secs_f64(),
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
            budgets,
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
    fn without_gate(&self, c: usize) -> f64 {
        self.budgets
            .iter()
            .map(|b| b.seconds)
            .fold(self.nodes_bound(c), f64::max)
    }

    fn total(&self, c: usize) -> f64 {
        self.without_gate(c).max(self.gated(c).0)
    }

    fn print(&self, c: usize, scenario: &Scenario) {
        let t = &scenario.timing;
        println!(
            "lower bound at C={c}: {} (the largest of the bounds below; see LowerBound in tests/examples/drain_bench.rs)",
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
        println!(
            "  budgets: first new node Ready at T_cap = nodeStartup {} + min(scaleUpDelay {}, first node empty + scaleDownDelay {}) = {}",
            secs(t.node_startup),
            secs(t.scale_up_delay),
            secs(t.scale_down_delay),
            secs_f(self.t_cap)
        );
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
        println!(
            "  ignores: the room the autoscaler adds after its first node, the tick (every {}) outside budget cycles and API latency, \
nodes held by one budget while others wait, retiring drained nodes (scaleDownDelay {})",
            secs(t.tick),
            secs(t.scale_down_delay)
        );
        println!(
            "  without the gate (information): {}",
            secs_f(self.without_gate(c))
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Memory and idle traffic at 5,000 nodes

struct MemoryResult {
    scenario: PathBuf,
    build: f64,
    nodes: u64,
    pods: u64,
    standing_by_after: f64,
    listed_after: f64,
    idle_rss: f64,
    startup_hwm: f64,
    idle_requests: BTreeMap<String, i64>,
    drained_node: String,
    drained_pods: usize,
    drain_seconds: Option<f64>,
    /// The simulator's request counters over the drain (and 5 s after), by verb and resource.
    drain_requests: BTreeMap<String, i64>,
    drain_hwm: f64,
    drain_sampled_max: f64,
    hwm_reset: bool,
}

fn memory(args: &Args, bins: &Bins, dir: &Path) -> anyhow::Result<MemoryResult> {
    std::fs::create_dir_all(dir)?;
    eprintln!(
        "drain_bench: memory: starting rotor-sim on {} (about 30 s to build)",
        args.scale_scenario.display()
    );
    let started = Instant::now();
    let sim = Sim::start(
        &bins.sim,
        &args.scale_scenario,
        dir,
        Duration::from_secs(600),
    )?;
    let build = started.elapsed().as_secs_f64();
    let stats = sim.stats()?;
    let nodes = stats["nodes"]["total"].as_u64().unwrap_or(0);
    let pods = stats["pods"]["total"].as_u64().unwrap_or(0);
    let first = sim.get("/api/v1/nodes?limit=1")?;
    let node = &first["items"][0];
    let name = node["metadata"]["name"]
        .as_str()
        .ok_or_else(|| anyhow!("no node in {}", args.scale_scenario.display()))?
        .to_string();
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let on_node = sim.get(&format!(
        "/api/v1/pods?fieldSelector=spec.nodeName%3D{name}"
    ))?;
    let drained_pods = on_node["items"].as_array().map_or(0, Vec::len);
    // Opened now, so that it is not counted in the idle window; from the list's version (a
    // node's own may have left the watch history).
    let rv = first["metadata"]["resourceVersion"].as_str().unwrap_or("0");
    let watch = NodeWatch::start(&sim.host, rv, Some(&name))?;

    // scale-5k.yaml has no rotor-system namespace; kube-system holds its DaemonSets.
    eprintln!("drain_bench: memory: starting rotor-drainer");
    let t_drainer = Instant::now();
    let mut drainer = Drainer::start(
        &bins.drainer,
        &sim.kubeconfig,
        &dir.join("rotor-drainer.log"),
        &[
            "run",
            "--admin-listen",
            "127.0.0.1:0",
            "--lease-namespace",
            "kube-system",
            "--settle",
            SETTLE_FLAG,
        ],
    )?;
    drainer.wait_standing_by(Duration::from_secs(120))?;
    let standing_by_after = t_drainer.elapsed().as_secs_f64();
    // The drainer's node watch opens once its initial list (5,000 nodes in pages) is read; the
    // benchmark's own watch is the other one.
    wait_for_requests(
        &sim,
        &[("watch nodes", 2), ("watch poddisruptionbudgets", 1)],
        Duration::from_secs(300),
    )?;
    let listed_after = t_drainer.elapsed().as_secs_f64();
    eprintln!(
        "drain_bench: memory: standing by after {standing_by_after:.1} s, nodes listed after {listed_after:.1} s; idle for {} s",
        IDLE_WAIT.as_secs()
    );
    std::thread::sleep(IDLE_WAIT);
    let pid = drainer.child.id();
    let (idle_rss, startup_hwm) = rss_kib(pid)?;

    eprintln!(
        "drain_bench: memory: counting requests over {} idle seconds",
        IDLE_WINDOW.as_secs()
    );
    let before = counts(&sim.stats()?["requests"]);
    std::thread::sleep(IDLE_WINDOW);
    let after = counts(&sim.stats()?["requests"]);
    let idle_requests = delta(&before, &after);

    // Draining peak: reset the high-water mark (clear_refs 5), then sample too.
    let hwm_reset = std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut max = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if let Ok((rss, _)) = rss_kib(pid) {
                    max = max.max(rss);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            max
        })
    };
    eprintln!("drain_bench: memory: tainting {name} ({drained_pods} pods)");
    let before = counts(&sim.stats()?["requests"]);
    let t = Instant::now();
    taint(&sim.host, &name, &taints)?;
    let deadline = t + Duration::from_secs(300);
    let mut drain_seconds = None;
    while Instant::now() < deadline {
        if let Some(at) = watch.done_at(&name) {
            drain_seconds = Some(at.duration_since(t).as_secs_f64());
            break;
        }
        if let Some(e) = watch.ended() {
            bail!("the benchmark's node watch ended: {e}");
        }
        if let Some(s) = drainer.exited() {
            bail!(
                "rotor-drainer exited ({s}); its log:\n{}",
                tail(&drainer.log, 30)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Whatever the drainer does right after (its Events, a repeated drain), then the peak.
    std::thread::sleep(Duration::from_secs(5));
    let (_, drain_hwm) = rss_kib(pid)?;
    let mut drain_requests = delta(&before, &counts(&sim.stats()?["requests"]));
    // Not the drainer's: the benchmark's taint.
    if let Some(n) = drain_requests.get_mut("patch nodes") {
        *n -= 1;
    }
    drain_requests.retain(|_, v| *v != 0);
    stop.store(true, Ordering::Relaxed);
    let sampled = sampler.join().unwrap_or(0);
    drop(drainer);
    drop(sim);
    let mib = |k: u64| k as f64 / 1024.0;
    Ok(MemoryResult {
        scenario: args.scale_scenario.clone(),
        build,
        nodes,
        pods,
        standing_by_after,
        listed_after,
        idle_rss: mib(idle_rss),
        startup_hwm: mib(startup_hwm),
        idle_requests,
        drained_node: name,
        drained_pods,
        drain_seconds,
        drain_requests,
        drain_hwm: mib(drain_hwm),
        drain_sampled_max: mib(sampled),
        hwm_reset,
    })
}

impl MemoryResult {
    fn print(&self, summary: &mut Vec<String>) {
        let ok = |v: f64| {
            if v <= TARGET_RSS_MIB {
                "PASS".to_string()
            } else {
                verdict(false, v, TARGET_RSS_MIB)
            }
        };
        println!();
        println!("== rotor-drainer memory and idle traffic ==");
        println!(
            "scenario {}: {} nodes, {} pods; simulator built and listening in {:.1} s",
            self.scenario.display(),
            self.nodes,
            self.pods,
            self.build
        );
        println!(
            "rotor-drainer run --lease-namespace kube-system --settle {SETTLE_FLAG}: standing by after {:.1} s, node list read after {:.1} s, then left idle {} s",
            self.standing_by_after,
            self.listed_after,
            IDLE_WAIT.as_secs()
        );
        let line = format!(
            "idle RSS (VmRSS)                       {:>7.1} MiB  (target <= {TARGET_RSS_MIB:.0} MiB)  {}",
            self.idle_rss,
            ok(self.idle_rss)
        );
        println!("{line}");
        summary.push(format!("5k nodes: {line}"));
        let line = format!(
            "start-up peak (VmHWM, initial lists)   {:>7.1} MiB  (target <= {TARGET_RSS_MIB:.0} MiB)  {}",
            self.startup_hwm,
            ok(self.startup_hwm)
        );
        println!("{line}");
        summary.push(format!("5k nodes: {line}"));
        let how = if self.hwm_reset {
            "VmHWM after resetting it through /proc/PID/clear_refs"
        } else {
            "could not reset VmHWM; this is the sampled VmRSS maximum"
        };
        let peak = if self.hwm_reset {
            self.drain_hwm
        } else {
            self.drain_sampled_max
        };
        let line = format!(
            "draining peak ({how})  {peak:.1} MiB  (target <= {TARGET_RSS_MIB:.0} MiB)  {}",
            ok(peak)
        );
        println!("{line}");
        summary.push(format!("5k nodes: {line}"));
        println!(
            "  one node {} ({} pods incl. DaemonSet and mirror pods) drained in {}; VmRSS sampled every 20 ms peaked at {:.1} MiB",
            self.drained_node,
            self.drained_pods,
            self.drain_seconds
                .map(secs_f)
                .unwrap_or_else(|| "-- (not drained within 300 s)".into()),
            self.drain_sampled_max
        );
        let during: Vec<String> = self
            .drain_requests
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!(
            "  requests from the taint until 5 s after the drain: {}",
            during.join(", ")
        );
        let listed: Vec<String> = self
            .idle_requests
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!(
            "requests in {} idle seconds, by verb and resource: {}",
            IDLE_WINDOW.as_secs(),
            if listed.is_empty() {
                "none".to_string()
            } else {
                listed.join(", ")
            }
        );
        let besides_watches: i64 = self
            .idle_requests
            .iter()
            .filter(|(k, _)| !k.starts_with("watch "))
            .map(|(_, v)| *v)
            .sum();
        let lease: i64 = self
            .idle_requests
            .iter()
            .filter(|(k, _)| k.ends_with(" leases"))
            .map(|(_, v)| *v)
            .sum();
        let line = format!(
            "idle requests besides watches          {besides_watches:>7}  (target 0)  {}",
            if besides_watches == 0 { "PASS" } else { "MISS" }
        );
        println!("{line}");
        summary.push(format!("5k nodes: {line}"));
        if lease > 0 {
            let other = besides_watches - lease;
            let line = format!(
                "  of which Lease get/update (leader election renews every lease-duration/3 = 5 s): {lease}; \
any other non-watch request: {other}  {}",
                if other == 0 { "PASS" } else { "MISS" }
            );
            println!("{line}");
            summary.push(format!("5k nodes: {line}"));
        }
    }
}

/// `after - before` for every counter that changed.
fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, i64> {
    after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                *v as i64 - before.get(k).copied().unwrap_or(0) as i64,
            )
        })
        .filter(|(_, d)| *d != 0)
        .collect()
}

/// A JSON object of counters (`requests`, `evictions` in the simulator's stats).
fn counts(v: &Value) -> BTreeMap<String, u64> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

/// (VmRSS, VmHWM) of a process, in KiB.
fn rss_kib(pid: u32) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read /proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((field("VmRSS:"), field("VmHWM:")))
}

// ---------------------------------------------------------------------------------------------
// Processes and HTTP

/// rotor-sim and rotor-drainer, built next to this example (`target/<profile>/`).
struct Bins {
    dir: PathBuf,
    sim: PathBuf,
    drainer: PathBuf,
}

impl Bins {
    fn locate() -> anyhow::Result<Bins> {
        let exe = std::env::current_exe()?;
        // target/<profile>/examples/drain_bench -> target/<profile>/
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .ok_or_else(|| anyhow!("cannot find the target directory from {}", exe.display()))?
            .to_path_buf();
        let release = dir.file_name().is_some_and(|n| n == "release");
        let find = |name: &str| -> anyhow::Result<PathBuf> {
            let p = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
            ensure!(
                p.is_file(),
                "{name} not found at {}: build the binaries first, with the same profile as this benchmark: \
cargo build {}-p rotor-sim -p rotor-drainer --bins",
                p.display(),
                if release { "--release " } else { "" }
            );
            Ok(p)
        };
        let (sim, drainer) = (find("rotor-sim")?, find("rotor-drainer")?);
        if !release {
            eprintln!(
                "drain_bench: warning: not a release build; the figures are only meaningful with --release"
            );
        }
        Ok(Bins { dir, sim, drainer })
    }
}

/// A `rotor-sim serve` child on a free port of 127.0.0.1, killed on drop.
struct Sim {
    child: Child,
    host: String,
    kubeconfig: PathBuf,
}

impl Sim {
    fn start(bin: &Path, scenario: &Path, dir: &Path, timeout: Duration) -> anyhow::Result<Sim> {
        let kubeconfig = dir.join("kubeconfig");
        let log = dir.join("rotor-sim.log");
        let mut child = Command::new(bin)
            .arg("serve")
            .arg("--scenario")
            .arg(scenario)
            .args(["--listen", "127.0.0.1:0"])
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(&log)?)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + timeout;
        let url = loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => {
                    if let Some(u) = line.strip_prefix("listening on ") {
                        break u.trim().to_string();
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                    bail!(
                        "rotor-sim serve --scenario {} did not start listening ({}; {status}); its log {}:\n{}",
                        scenario.display(),
                        if matches!(e, mpsc::RecvTimeoutError::Timeout) {
                            format!("timed out after {} s", timeout.as_secs())
                        } else {
                            "it exited".into()
                        },
                        log.display(),
                        tail(&log, 30)
                    );
                }
            }
        };
        let host = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !kubeconfig.is_file() {
            ensure!(
                Instant::now() < deadline,
                "rotor-sim wrote no kubeconfig at {}",
                kubeconfig.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Sim {
            child,
            host,
            kubeconfig,
        })
    }

    fn call(&self, method: &str, path: &str, body: Option<&str>) -> anyhow::Result<Value> {
        let (status, text) = http(
            &self.host,
            method,
            path,
            body.map(|b| ("application/json", b)),
            HTTP_TIMEOUT,
        )?;
        ensure!(
            (200..300).contains(&status),
            "{method} {path} answered {status}: {text}"
        );
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).with_context(|| format!("{method} {path}: not JSON"))
    }

    fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call("GET", path, None)
    }

    fn stats(&self) -> anyhow::Result<Value> {
        self.get("/sim/v1/stats")
    }

    fn reset_stats(&self) -> anyhow::Result<()> {
        self.call("POST", "/sim/v1/stats/reset", Some("{}"))
            .map(drop)
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `rotor-drainer` child with its stderr in a file, killed on drop.
struct Drainer {
    child: Child,
    log: PathBuf,
}

impl Drainer {
    fn start(bin: &Path, kubeconfig: &Path, log: &Path, args: &[&str]) -> anyhow::Result<Drainer> {
        let child = Command::new(bin)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .env("NO_COLOR", "1")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(log)?)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        Ok(Drainer {
            child,
            log: log.to_path_buf(),
        })
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(s)) => Some(s.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("cannot wait: {e}")),
        }
    }

    /// Waits until the drainer has listed the cluster and stands by: it contends for the lease
    /// only once a node needs it, so that is when it is ready for the taints.
    fn wait_standing_by(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log_count("standing by") > 0 {
                return Ok(());
            }
            if let Some(s) = self.exited() {
                bail!(
                    "rotor-drainer exited ({s}) before standing by; its log {}:\n{}",
                    self.log.display(),
                    tail(&self.log, 30)
                );
            }
            ensure!(
                Instant::now() < deadline,
                "rotor-drainer did not stand by within {} s; its log {}:\n{}",
                timeout.as_secs(),
                self.log.display(),
                tail(&self.log, 30)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_count(&self, needle: &str) -> usize {
        std::fs::read(&self.log)
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .lines()
                    .filter(|l| l.contains(needle))
                    .count()
            })
            .unwrap_or(0)
    }
}

impl Drop for Drainer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[derive(Default)]
struct NodeSeen {
    drained: Option<Instant>,
    gone: Option<Instant>,
}

#[derive(Default)]
struct WatchState {
    nodes: HashMap<String, NodeSeen>,
    ended: Option<String>,
}

/// One watch on nodes, opened before t=0 so that it costs no counted request, recording when
/// each node first shows `rotor.dev/phase=drained` and when it is deleted.
struct NodeWatch {
    state: Arc<Mutex<WatchState>>,
    stream: TcpStream,
}

impl NodeWatch {
    /// Watches every node from `resource_version`, or only `only` (a field selector on its
    /// name).
    fn start(host: &str, resource_version: &str, only: Option<&str>) -> anyhow::Result<NodeWatch> {
        let mut stream = TcpStream::connect(host)?;
        let selector = only
            .map(|n| format!("&fieldSelector=metadata.name%3D{n}"))
            .unwrap_or_default();
        // No timeoutSeconds: the simulator keeps the watch for 30 minutes.
        write!(
            stream,
            "GET /api/v1/nodes?watch=true&resourceVersion={resource_version}{selector} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
        )?;
        let reader = stream.try_clone()?;
        let state = Arc::new(Mutex::new(WatchState::default()));
        let st = state.clone();
        std::thread::spawn(move || {
            let why = match read_watch(reader, &st) {
                Ok(()) => "the stream closed".to_string(),
                Err(e) => format!("{e:#}"),
            };
            st.lock().expect("watch state").ended.get_or_insert(why);
        });
        Ok(NodeWatch { state, stream })
    }

    fn ended(&self) -> Option<String> {
        self.state.lock().expect("watch state").ended.clone()
    }

    fn done_at(&self, node: &str) -> Option<Instant> {
        let s = self.state.lock().expect("watch state");
        let n = s.nodes.get(node)?;
        match (n.drained, n.gone) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Nodes drained or gone, or (for kubectl) whose `kubectl drain` succeeded.
    fn done_count(&self, nodes: &[String], also: Option<&HashMap<String, Instant>>) -> usize {
        nodes
            .iter()
            .filter(|n| self.done_at(n).is_some() || also.is_some_and(|a| a.contains_key(*n)))
            .count()
    }
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

fn read_watch(stream: TcpStream, state: &Mutex<WatchState>) -> anyhow::Result<()> {
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    r.read_line(&mut line)?;
    ensure!(
        line.split_whitespace().nth(1) == Some("200"),
        "the node watch answered {}",
        line.trim()
    );
    let mut chunked = false;
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let l = line.trim();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':')
            && k.eq_ignore_ascii_case("transfer-encoding")
            && v.trim().eq_ignore_ascii_case("chunked")
        {
            chunked = true;
        }
    }
    let mut pending: Vec<u8> = Vec::new();
    let mut feed = |bytes: &[u8]| {
        pending.extend_from_slice(bytes);
        while let Some(i) = pending.iter().position(|b| *b == b'\n') {
            let event: Vec<u8> = pending.drain(..=i).collect();
            on_watch_event(&event, state);
        }
    };
    if chunked {
        loop {
            line.clear();
            if r.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let size_text = line.trim().split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| anyhow!("bad chunk size {size_text:?}"))?;
            if size == 0 {
                return Ok(());
            }
            let mut buf = vec![0u8; size];
            r.read_exact(&mut buf)?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)?;
            feed(&buf);
        }
    } else {
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            feed(&buf[..n]);
        }
    }
}

fn on_watch_event(bytes: &[u8], state: &Mutex<WatchState>) {
    let Ok(ev) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    let now = Instant::now();
    let mut s = state.lock().expect("watch state");
    let kind = ev["type"].as_str().unwrap_or("");
    if kind == "ERROR" {
        s.ended
            .get_or_insert_with(|| format!("watch error: {}", ev["object"]));
        return;
    }
    let Some(name) = ev["object"]["metadata"]["name"].as_str() else {
        return;
    };
    let seen = s.nodes.entry(name.to_string()).or_default();
    if kind == "DELETED" {
        seen.gone.get_or_insert(now);
    } else if ev["object"]["metadata"]["annotations"]["rotor.dev/phase"] == "drained" {
        seen.drained.get_or_insert(now);
    }
}

/// One HTTP/1.1 request with `Connection: close`; returns the status and the body.
fn http(
    host: &str,
    method: &str,
    path: &str,
    body: Option<(&str, &str)>,
    timeout: Duration,
) -> anyhow::Result<(u16, String)> {
    let mut stream =
        TcpStream::connect(host).with_context(|| format!("cannot connect to {host}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\nConnection: close\r\n"
    );
    let text = body.map_or("", |b| b.1);
    if let Some((content_type, _)) = body {
        let _ = write!(req, "Content-Type: {content_type}\r\n");
    }
    let _ = write!(req, "Content-Length: {}\r\n\r\n", text.len());
    stream.write_all(req.as_bytes())?;
    stream.write_all(text.as_bytes())?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("{method} {path}: reading the response"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("{method} {path}: no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut rest = &raw[split + 4..];
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("{method} {path}: bad status line"))?;
    let chunked = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let body = if chunked {
        let mut out = Vec::new();
        loop {
            let eol = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or_else(|| anyhow!("{method} {path}: truncated chunk"))?;
            let size_text = String::from_utf8_lossy(&rest[..eol]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| anyhow!("{method} {path}: bad chunk size {size_text:?}"))?;
            rest = &rest[eol + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(
                rest.get(..size)
                    .ok_or_else(|| anyhow!("{method} {path}: truncated chunk"))?,
            );
            rest = rest.get(size + 2..).unwrap_or(&[]);
        }
        out
    } else {
        rest.to_vec()
    };
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// `2s`, `500ms` as seconds with one decimal.
fn secs(d: Duration) -> String {
    secs_f(d.as_secs_f64())
}

/// `s` rounded up to whole ticks (a time the simulator can only reach at a tick).
fn whole_ticks(s: f64, tick: f64) -> f64 {
    if tick <= 0.0 {
        return s;
    }
    // The small margin keeps 2.0 s at 0.1 s ticks from rounding up to 2.1 s.
    (s / tick - 1e-9).ceil() * tick
}

fn secs_f(s: f64) -> String {
    format!("{s:.1} s")
}
