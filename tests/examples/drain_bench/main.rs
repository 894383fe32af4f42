//! The drainer benchmark (issues 4 and 20): rotor-drainer against a loop of real `kubectl drain`
//! at equal concurrency on the same cluster, rotor against the scenario's lower bound, on
//! rotor-sim, on a real control plane, or both side by side; and rotor-drainer's memory and API
//! traffic, with the simulator's own memory, at 1,000, 5,000 and 20,000 nodes (30 pods a node).
//!
//! ```sh
//! cargo build --release -p rotor-sim -p rotor-drainer --bins
//! cargo run --release -p rotor-e2e --example drain_bench                      # C=1, then memory
//! cargo run --release -p rotor-e2e --example drain_bench -- --concurrency 1,3 # C=1 and C=3
//! tools/build.sh   # the real control plane, once
//! cargo run --release -p rotor-e2e --example drain_bench -- --backend sim,real --concurrency 1,3 --runs 3 --skip-memory
//! ```
//!
//! Flags: `--concurrency 1,3` (default 1), `--backend sim|real|sim,real` (default sim), `--runs N`
//! (default 1; the summary gives medians), `--pictures DIR` (the timeline SVGs; default
//! `target/drain-bench-pictures`), `--scenario FILE` (default
//! `examples/scenarios/bench-50.yaml`), `--scale 1k,5k,20k` (the default: the memory part runs
//! `examples/scenarios/scale-<each>.yaml`), `--scale-scenario FILE[,FILE]` (other scenarios
//! instead), `--only rotor|kubectl`, `--skip-compare`,
//! `--skip-memory`, `--run-timeout SECONDS` (default 1200, per contestant),
//! `--rotor-max-unavailable N|P%` (default C; a diagnostic, e.g. `100%` shows what waiting for
//! the autoscaler to retire drained nodes costs), `--surge` (also runs `rotor-drainer --surge`,
//! the PriorityClass `rotor-surge` created first, and compares its makespan and the seconds
//! workload pods spent unschedulable with rotor's without surge), `--surge-ahead N` (passed on
//! to rotor-drainer with `--surge`), `--peer karpenter` (only
//! the contest against Karpenter's drift replacement, on the real control plane, with
//! `tools/karpenter/build.sh` built: [`karpenter_peer`]; with `--surge` rotor runs
//! `--surge` and is held to half Karpenter's makespan and no more Pending pod-seconds; with
//! `--only rotor` Karpenter's drift is not run), `--taint N` (drain only N nodes,
//! spread evenly over the cluster in name order; the others stay untainted, with room for the
//! evicted pods, and the lower bound counts that: [`snapshot`]), `--idle SECONDS` (first, with
//! rotor-drainer standing by and nothing tainted, count its requests and read its memory for
//! that long). Each run also reports the CPU seconds and peak memory of rotor-drainer, of the
//! servers answering it ([`usage`]: the control plane's components and kwok, or rotor-sim) and
//! of the benchmark itself, and how busy the machine's cores were. Progress goes to
//! stderr, figures to stdout. A benchmark reports; it does not assert: targets missed are printed
//! as MISS and the exit status stays 0 (it is non-zero only when something could not run).
//! The scratch directory (each run's logs; on the real control plane its audit log too) is
//! removed at the end unless `ROTOR_E2E_KEEP` is set.
//!
//! For each backend, concurrency C, run and contestant a fresh cluster runs the scenario:
//! `rotor-sim serve`, or a real control plane with kwok nodes ([`real`]: the scenario's nodes,
//! workloads and budgets as real objects, its autoscaler rules played by [`real_autoscaler`]).
//! Before t=0 the benchmark lists the nodes, pods and budgets (the lower bound's input) and
//! opens a watch on each ([`recorder`]), which times every drain without any further request;
//! then it zeroes the counters and, at t=0, adds the taint `rotor.dev/drain=manual:NoSchedule`
//! to every node with one JSON patch each, sent in parallel. Then:
//!
//! - rotor: `rotor-drainer run --max-concurrent C --max-unavailable C --settle 1s`, started
//!   before t=0 and idle (leading, watches open), as a Deployment would be (on the real control
//!   plane as the shipped ServiceAccount, under the shipped RBAC); a node counts as drained when
//!   the watch shows `rotor.dev/phase=drained` on it, or when it is gone (the autoscaler removes
//!   drained, empty nodes after `scaleDownDelay`);
//! - kubectl: C workers, each taking the next node (by name) and running `kubectl drain N
//!   --ignore-daemonsets --delete-emptydir-data --force --timeout=10m` until none is left; a node
//!   counts as drained when its `kubectl drain` exits 0, or when it is gone.
//!
//! Makespan is t=0 until the last original node counts as drained. On rotor-sim, budget
//! violations are the simulator's `budgetViolations` and API requests its request counters, less
//! the benchmark's own taint patches. On the real control plane, violations come from an
//! independent watch of every pod (rotor-e2e's `BudgetWatch`) and requests from the API server's
//! audit log, by the contestant's own identity. Requests are divided by the number of nodes.
//! Each run also draws its timeline ([`timeline`]): a row per node (waiting, draining,
//! settling), the Pending pods and each budget's allowed disruptions over time.
//!
//! The lower bound (derived in [`LowerBound`]) is what no drainer that follows issue 4's rules
//! can beat on the scenario at concurrency C: the largest of a per-node bound (every node needs
//! its longest pod shutdown, C nodes at a time), one bound per PodDisruptionBudget (only
//! `allowed` pods can be down at once, and each needs a new node and its start-up time, plus
//! on the simulator one tick, to come back) and the gate's (the workloads evicted from a drained
//! node must be Ready again before the next start). The bound without the gate is printed too.
//!
//! The modules: `compare` runs the contestants on a `cluster` (`sim` or `real`), `snapshot`
//! reads the cluster at t=0 and `lower_bound` derives the bound from it (pure), `recorder` and
//! `timeline` keep and draw the run, `cycle` reads a budget's cycle from the watches and the
//! real control plane's audit log, `api_times` the real API server's time over requests,
//! `summary` gathers the runs, `memory` measures the simulator and the drainer at each scale
//! (watching its one drained node with `Recorder::one_node`); `drainer` runs the drainer;
//! `karpenter_peer` is the contest against Karpenter.

mod api_times;
mod cluster;
mod compare;
mod cycle;
mod drainer;
mod karpenter_peer;
mod lower_bound;
mod memory;
mod real;
mod real_autoscaler;
mod recorder;
mod sim;
mod snapshot;
mod summary;
mod timeline;
mod usage;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail, ensure};
use rotor_e2e::workspace_root;

use crate::cluster::{Backend, parse_backends};
use crate::drainer::Bins;

/// rotor-drainer's `--settle`: how long a node must have been unschedulable before it is marked
/// drained (every node is tainted at t=0, so this only matters in the first second); it must also
/// stay empty for a quarter of it, which the lower bound leaves out (a bound for any drainer).
const SETTLE: Duration = Duration::from_secs(1);
const SETTLE_FLAG: &str = "1s";

fn main() {
    if let Err(e) = run() {
        eprintln!("drain_bench: {e:#}");
        std::process::exit(1);
    }
}

struct Args {
    concurrency: Vec<usize>,
    scenario: PathBuf,
    /// The memory part's scenarios, smallest first.
    scale_scenarios: Vec<PathBuf>,
    rotor: bool,
    kubectl: bool,
    compare: bool,
    memory: bool,
    run_timeout: Duration,
    /// rotor's `--max-unavailable` when not C (a diagnostic: what the retirement of drained
    /// nodes costs).
    rotor_max_unavailable: Option<String>,
    /// Also run rotor with `--surge`.
    surge: bool,
    /// `--surge-ahead N`: passed on to rotor-drainer with `--surge`.
    surge_ahead: Option<usize>,
    /// Where the contests run: rotor-sim, the real control plane, or both.
    backends: Vec<Backend>,
    /// Runs of each contestant per backend and concurrency.
    runs: usize,
    /// Where the timeline pictures go.
    pictures: PathBuf,
    /// `--peer karpenter`: only the contest against Karpenter's drift replacement.
    karpenter_peer: bool,
    /// `--taint N`: drain only N of the nodes (spread over them), the others left with room.
    taint: Option<usize>,
    /// `--idle SECONDS`: first measure rotor-drainer idle for this long.
    idle: Option<Duration>,
}

const USAGE: &str = "usage: drain_bench [--concurrency 1,3] [--scenario FILE] [--scale 1k,5k,20k] \
[--scale-scenario FILE[,FILE]] \
[--only rotor|kubectl] [--skip-compare] [--skip-memory] [--run-timeout SECONDS] \
[--rotor-max-unavailable N|P%] [--surge] [--surge-ahead N] [--backend sim|real|sim,real] [--runs N] [--pictures DIR] \
[--peer karpenter] [--taint N] [--idle SECONDS]";

fn parse_args() -> anyhow::Result<Args> {
    let root = workspace_root();
    let mut a = Args {
        concurrency: vec![1],
        scenario: root.join("examples/scenarios/bench-50.yaml"),
        scale_scenarios: scale_scenarios(&root, "1k,5k,20k")?,
        rotor: true,
        kubectl: true,
        compare: true,
        memory: true,
        run_timeout: Duration::from_secs(1200),
        rotor_max_unavailable: None,
        surge: false,
        surge_ahead: None,
        backends: vec![Backend::Sim],
        runs: 1,
        pictures: PathBuf::new(),
        karpenter_peer: false,
        taint: None,
        idle: None,
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
            "--scale" => a.scale_scenarios = scale_scenarios(&root, &value()?)?,
            "--scale-scenario" => {
                a.scale_scenarios = value()?.split(',').map(PathBuf::from).collect()
            }
            "--only" => match value()?.as_str() {
                "rotor" => a.kubectl = false,
                "kubectl" => a.rotor = false,
                other => bail!("--only takes rotor or kubectl, not {other:?}"),
            },
            "--rotor-max-unavailable" => a.rotor_max_unavailable = Some(value()?),
            "--skip-compare" => a.compare = false,
            "--surge" => a.surge = true,
            "--surge-ahead" => {
                a.surge_ahead = Some(
                    value()?
                        .parse()
                        .map_err(|e| anyhow!("--surge-ahead takes a number of nodes: {e}"))?,
                )
            }
            "--backend" => a.backends = parse_backends(&value()?)?,
            "--runs" => {
                a.runs = value()?
                    .parse()
                    .map_err(|e| anyhow!("--runs takes a number: {e}"))?;
                ensure!(a.runs >= 1, "--runs must be at least 1");
            }
            "--pictures" => a.pictures = PathBuf::from(value()?),
            "--peer" => match value()?.as_str() {
                "karpenter" => a.karpenter_peer = true,
                other => bail!("--peer takes karpenter, not {other:?}"),
            },
            "--skip-memory" => a.memory = false,
            "--taint" => {
                let n: usize = value()?
                    .parse()
                    .map_err(|e| anyhow!("--taint takes a number of nodes: {e}"))?;
                ensure!(n >= 1, "--taint must be at least 1");
                a.taint = Some(n);
            }
            "--idle" => {
                let s: u64 = value()?
                    .parse()
                    .map_err(|e| anyhow!("--idle takes seconds: {e}"))?;
                ensure!(s >= 1, "--idle must be at least 1 second");
                a.idle = Some(Duration::from_secs(s));
            }
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
    ensure!(
        a.surge || a.surge_ahead.is_none(),
        "--surge-ahead is rotor-drainer's --surge-ahead and needs --surge"
    );
    Ok(a)
}

/// `examples/scenarios/scale-<s>.yaml` for each of `1k,5k,20k`.
fn scale_scenarios(root: &std::path::Path, list: &str) -> anyhow::Result<Vec<PathBuf>> {
    list.split(',')
        .map(|s| {
            let s = s.trim();
            let p = root.join(format!("examples/scenarios/scale-{s}.yaml"));
            ensure!(
                p.is_file(),
                "--scale {s}: there is no {}; the scales are 1k, 5k and 20k",
                p.display()
            );
            Ok(p)
        })
        .collect()
}

fn run() -> anyhow::Result<()> {
    let mut args = parse_args()?;
    let bins = Bins::locate()?;
    if args.karpenter_peer {
        // Only this contest, on the real control plane.
        args.backends = vec![Backend::Real];
        args.compare = false;
        args.memory = false;
    }
    for b in &args.backends {
        cluster::check(*b)?;
    }
    // kube's client (the taints, the node watch) runs here; the rest of the benchmark is threads.
    let runtime = tokio::runtime::Runtime::new().context("cannot start a tokio runtime")?;
    let scratch = std::env::temp_dir().join(format!("rotor-drain-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("cannot create {}", scratch.display()))?;
    eprintln!(
        "drain_bench: binaries from {}, logs under {}",
        bins.dir.display(),
        scratch.display()
    );
    if args.pictures.as_os_str().is_empty() {
        // Outside the scratch directory, which is removed at the end.
        args.pictures = workspace_root().join("target/drain-bench-pictures");
    }
    let mut summary: Vec<String> = Vec::new();
    if args.karpenter_peer {
        karpenter_peer::contest(&args, &bins, runtime.handle(), &scratch, &mut summary)?;
    }
    if args.compare {
        compare::compare(&args, &bins, runtime.handle(), &scratch, &mut summary)?;
    }
    if args.memory {
        let m = memory::memory(&args, &bins, runtime.handle(), &scratch.join("memory"))?;
        m.print(&mut summary);
    }
    if !summary.is_empty() {
        println!();
        println!("== targets ==");
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

/// `2s`, `500ms` as seconds with one decimal.
fn secs(d: Duration) -> String {
    secs_f(d.as_secs_f64())
}

fn secs_f(s: f64) -> String {
    format!("{s:.1} s")
}
