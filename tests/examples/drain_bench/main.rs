//! The drainer benchmark (issue 4, item 8): rotor-drainer against a loop of real `kubectl drain`
//! at equal concurrency on the same simulated cluster, rotor against the scenario's lower bound,
//! and rotor-drainer's memory and API traffic, with the simulator's own memory, at 1,000, 5,000
//! and 20,000 nodes (30 pods a node).
//!
//! ```sh
//! cargo build --release -p rotor-sim -p rotor-drainer --bins
//! cargo run --release -p rotor-e2e --example drain_bench                      # C=1, then memory
//! cargo run --release -p rotor-e2e --example drain_bench -- --concurrency 1,3 # C=1 and C=3
//! ```
//!
//! Flags: `--concurrency 1,3` (default 1), `--scenario FILE` (default
//! `examples/scenarios/bench-50.yaml`), `--scale 1k,5k,20k` (the default: the memory part runs
//! `examples/scenarios/scale-<each>.yaml`), `--scale-scenario FILE[,FILE]` (other scenarios
//! instead), `--only rotor|kubectl`, `--skip-compare`,
//! `--skip-memory`, `--run-timeout SECONDS` (default 1200, per contestant),
//! `--rotor-max-unavailable N|P%` (default C; a diagnostic, e.g. `100%` shows what waiting for
//! the autoscaler to retire drained nodes costs), `--surge` (also runs `rotor-drainer --surge`,
//! the PriorityClass `rotor-surge` created first, and compares its makespan and the seconds
//! workload pods spent unschedulable with rotor's without surge). Progress goes to
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
//!
//! The modules: `compare` runs the contestants, `snapshot` reads the cluster at t=0 and
//! `lower_bound` derives the bound from it (pure), `memory` measures the simulator and the
//! drainer at each scale;
//! `sim`, `drainer` and `node_watch` are the simulator, the drainer and the benchmark's node
//! watch as both measurements use them.

mod compare;
mod drainer;
mod lower_bound;
mod memory;
mod node_watch;
mod sim;
mod snapshot;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail, ensure};
use rotor_e2e::workspace_root;

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
}

const USAGE: &str = "usage: drain_bench [--concurrency 1,3] [--scenario FILE] [--scale 1k,5k,20k] \
[--scale-scenario FILE[,FILE]] \
[--only rotor|kubectl] [--skip-compare] [--skip-memory] [--run-timeout SECONDS] \
[--rotor-max-unavailable N|P%] [--surge]";

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
    let args = parse_args()?;
    let bins = Bins::locate()?;
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
    let mut summary: Vec<String> = Vec::new();
    if args.compare {
        compare::compare(&args, &bins, runtime.handle(), &scratch, &mut summary)?;
    }
    if args.memory {
        let m = memory::memory(&args, &bins, runtime.handle(), &scratch.join("memory"))?;
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
