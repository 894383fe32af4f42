//! rotor against the kubectl loop: for each concurrency, each contestant on a fresh simulator,
//! every node tainted at t=0, the drains timed by the node watch; the table, the ratios against
//! the loop and the lower bound.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure};
use rotor_e2e::{kubectl_command, run_with_timeout};
use rotor_sim::scenario::Scenario;
use tokio::runtime::Handle;

use crate::drainer::{Bins, Drainer};
use crate::lower_bound::LowerBound;
use crate::node_watch::NodeWatch;
use crate::sim::{BenchSim, counts};
use crate::snapshot::Snapshot;
use crate::{Args, SETTLE_FLAG, secs, secs_f, verdict};

/// The kubectl loop's per-node `--timeout`, and how long before a hung kubectl is killed.
const KUBECTL_DRAIN_TIMEOUT: &str = "10m";
const KUBECTL_KILL_AFTER: Duration = Duration::from_secs(11 * 60);
/// Targets from issue 4.
const TARGET_VS_KUBECTL: f64 = 0.7;
const TARGET_VS_BOUND: f64 = 1.25;
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
                runtime,
                &scenario,
                &scratch.join(format!("rotor-c{c}")),
            )?)
        } else {
            None
        };
        let surged = if args.rotor && args.surge {
            Some(run_contestant(
                Contestant::RotorSurge,
                c,
                args,
                bins,
                runtime,
                &scenario,
                &scratch.join(format!("rotor-surge-c{c}")),
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
                runtime,
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
        for r in rotor.iter().chain(surged.iter()).chain(kubectl.iter()) {
            r.print_row();
        }
        if let Some(s) = &surged {
            for n in &s.notes {
                println!("  rotor --surge: {n}");
            }
        }
        if let (Some(r), Some(s)) = (&rotor, &surged) {
            surge_lines(c, r, s, summary);
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

/// rotor with `--surge` against rotor without: the seconds workload pods spent unschedulable
/// (the simulator leaves placeholders out) and the makespan.
fn surge_lines(c: usize, rotor: &RunResult, surged: &RunResult, summary: &mut Vec<String>) {
    let cut = if rotor.pending_seconds > 0.0 {
        format!(
            "{:.0} % less",
            100.0 * (1.0 - surged.pending_seconds / rotor.pending_seconds)
        )
    } else {
        "n/a (none without surge)".into()
    };
    let reached = rotor.pending_seconds > 0.0
        && surged.pending_seconds <= rotor.pending_seconds * (1.0 - SURGE_PENDING_CUT);
    let line = format!(
        "C={c}: unschedulable pod-seconds, rotor {:.0} -> with --surge {:.0}: {cut}  (target >= {:.0} % less)  {}",
        rotor.pending_seconds,
        surged.pending_seconds,
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
    /// Seconds workload pods spent unschedulable (placeholders left out).
    pending_seconds: f64,
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
    runtime: &Handle,
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
        Contestant::RotorSurge => format!("rotor --surge C={c}"),
        Contestant::Kubectl => format!("kubectl drain loop C={c}"),
    };
    eprintln!("drain_bench: {label}: starting rotor-sim");
    let sim = BenchSim::start(runtime, &args.scenario, dir, Duration::from_secs(120))?;
    let snap = Snapshot::take(&sim, scenario)?;
    let bound = LowerBound::derive(scenario, &snap)?;
    let watch = NodeWatch::start(&sim, &snap.resource_version, None)?;
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
            if who == Contestant::RotorSurge {
                create_surge_class(&sim, dir)?;
                flags.push("--surge");
            }
            let mut d = Drainer::run(&bins.drainer, &sim, dir, "rotor-system", &flags)?;
            d.wait_standing_by(Duration::from_secs(60))?;
            // Leading, then its budget and node watches open (the monitor holds one node watch).
            sim.wait_for_requests(
                &[("watch nodes", 2), ("watch poddisruptionbudgets", 1)],
                Duration::from_secs(60),
            )?;
            std::thread::sleep(Duration::from_secs(1));
            Some(d)
        }
        Contestant::Kubectl => {
            // A script's earlier kubectl calls would have filled the discovery cache.
            let out = run_with_timeout(
                kubectl_command(&sim.process).args(["get", "nodes"]),
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
    sim.reset_stats()?;
    let names: Vec<String> = snap.nodes.iter().map(|n| n.name.clone()).collect();
    let deadline = Instant::now() + args.run_timeout;

    // t=0: every node gets the drain taint.
    let t0 = Instant::now();
    sim.taint_all(
        snap.nodes
            .iter()
            .map(|n| (n.name.as_str(), n.taints.as_slice())),
    )?;
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
            let (done, failures) = kubectl_loop(&label, c, &sim, &watch, &names, t0, deadline);
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
        pending_seconds: stats["unschedulablePodSeconds"].as_f64().unwrap_or(0.0),
    })
}

/// The PriorityClass `deploy/` ships for `--surge`, created in the simulator.
fn create_surge_class(sim: &BenchSim, dir: &Path) -> anyhow::Result<()> {
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
                drainer.log_path().display(),
                drainer.log_tail()
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
fn kubectl_loop(
    label: &str,
    c: usize,
    sim: &BenchSim,
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
                        let out = kubectl_drain(sim, &node);
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

fn kubectl_drain(sim: &BenchSim, node: &str) -> std::process::Output {
    let mut cmd = kubectl_command(&sim.process);
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
