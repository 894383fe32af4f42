//! Memory and API traffic as the cluster grows (issue 20, item 5): for each scale scenario
//! (1,000, 5,000 and 20,000 nodes, 30 pods a node, by default) a fresh `rotor-sim serve`, its
//! build time, RSS and bytes per pod; then rotor-drainer against it: its RSS idle, its start-up
//! and draining peaks, its requests while idle and to drain one node, and the drain's time.
//! One table at the end, with the 64 MiB target judged at the largest scale.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rotor_e2e::resident_memory;
use tokio::runtime::Handle;

use crate::drainer::{Bins, Drainer};
use crate::recorder::Recorder;
use crate::sim::{BenchSim, counts, delta};
use crate::{Args, SETTLE_FLAG, secs_f, verdict};

/// How long the drainer is left alone before its idle memory is read, and the idle request
/// window.
const IDLE_WAIT: Duration = Duration::from_secs(20);
const IDLE_WINDOW: Duration = Duration::from_secs(20);
/// The target from issue 4, judged at 20,000 nodes since issue 20.
const TARGET_RSS_MIB: f64 = 64.0;
/// Building 20,000 nodes and 600,000 pods takes minutes on the 2-core build machine.
const SIM_START_TIMEOUT: Duration = Duration::from_secs(1800);
/// Log lines of rotor-drainer's leader election that say a renewal did not go through.
const RENEWAL_MISSES: [&str; 2] = [
    "reading or renewing the leader lease timed out",
    "could not read or renew the leader lease",
];

/// One scale's figures.
pub struct ScaleResult {
    scenario: PathBuf,
    build: f64,
    nodes: u64,
    pods: u64,
    sim_rss: f64,
    sim_hwm: f64,
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
    /// Lease renewals that failed or timed out while draining.
    renewal_misses: usize,
    /// Why the drainer stopped before the drain was over, if it did.
    drainer_exit: Option<String>,
}

/// Every scale's figures, in the order measured.
pub struct MemoryResult(Vec<ScaleResult>);

pub fn memory(
    args: &Args,
    bins: &Bins,
    runtime: &Handle,
    dir: &Path,
) -> anyhow::Result<MemoryResult> {
    let mut results = Vec::new();
    for (i, scenario) in args.scale_scenarios.iter().enumerate() {
        let r = one_scale(scenario, bins, runtime, &dir.join(format!("scale-{i}")))
            .with_context(|| format!("measuring at the scale of {}", scenario.display()))?;
        r.print_one();
        results.push(r);
    }
    Ok(MemoryResult(results))
}

fn one_scale(
    scenario: &Path,
    bins: &Bins,
    runtime: &Handle,
    dir: &Path,
) -> anyhow::Result<ScaleResult> {
    std::fs::create_dir_all(dir)?;
    eprintln!(
        "drain_bench: memory: starting rotor-sim on {}",
        scenario.display()
    );
    let started = Instant::now();
    let sim = BenchSim::start(runtime, scenario, dir, SIM_START_TIMEOUT)?;
    let build = started.elapsed().as_secs_f64();
    let (sim_rss, sim_hwm) = rss_kib(sim.process.pid())?;
    let stats = sim.stats()?;
    let nodes = stats["nodes"]["total"].as_u64().unwrap_or(0);
    let pods = stats["pods"]["total"].as_u64().unwrap_or(0);
    eprintln!(
        "drain_bench: memory: {nodes} nodes, {pods} pods built in {build:.1} s; rotor-sim RSS {} MiB",
        sim_rss / 1024
    );
    let first = sim.get("/api/v1/nodes?limit=1")?;
    let node = &first["items"][0];
    let name = node["metadata"]["name"]
        .as_str()
        .ok_or_else(|| anyhow!("no node in {}", scenario.display()))?
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
    let watch = Recorder::one_node(&sim.client, &sim.runtime, &name, rv)?;

    // The scale scenarios have no rotor-system namespace; kube-system holds their DaemonSets.
    eprintln!("drain_bench: memory: starting rotor-drainer");
    let t_drainer = Instant::now();
    let mut drainer = Drainer::run(&bins.drainer, &sim, dir, "kube-system", &[])?;
    drainer.wait_standing_by(Duration::from_secs(600))?;
    let standing_by_after = t_drainer.elapsed().as_secs_f64();
    // The drainer's node watch opens once its initial list (every node, in pages) is read; the
    // benchmark's own watch is the other one.
    sim.wait_for_requests(
        &[("watch nodes", 2), ("watch poddisruptionbudgets", 1)],
        Duration::from_secs(600),
    )?;
    let listed_after = t_drainer.elapsed().as_secs_f64();
    eprintln!(
        "drain_bench: memory: standing by after {standing_by_after:.1} s, nodes listed after {listed_after:.1} s; idle for {} s",
        IDLE_WAIT.as_secs()
    );
    std::thread::sleep(IDLE_WAIT);
    let pid = drainer.process.pid();
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
    let misses_before = renewal_misses(&drainer);
    eprintln!("drain_bench: memory: tainting {name} ({drained_pods} pods)");
    let before = counts(&sim.stats()?["requests"]);
    let t = Instant::now();
    sim.taint_all([(name.as_str(), taints.as_slice())])?;
    let deadline = t + Duration::from_secs(300);
    let mut drain_seconds = None;
    let mut drainer_exit = None;
    while Instant::now() < deadline {
        if let Some(at) = watch.done_at(&name) {
            drain_seconds = Some(at.duration_since(t).as_secs_f64());
            break;
        }
        if let Some(e) = watch.ended() {
            bail!("the benchmark's node watch ended: {e}");
        }
        if let Some(s) = drainer.exited() {
            eprintln!(
                "drain_bench: memory: rotor-drainer exited ({s}) before {name} was drained; its log:\n{}",
                drainer.log_tail()
            );
            drainer_exit = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Whatever the drainer does right after (its Events, a repeated drain), then the peak.
    std::thread::sleep(Duration::from_secs(5));
    let drain_hwm = rss_kib(pid).map(|(_, hwm)| hwm).unwrap_or(0);
    let mut drain_requests = delta(&before, &counts(&sim.stats()?["requests"]));
    // Not the drainer's: the benchmark's taint.
    if let Some(n) = drain_requests.get_mut("patch nodes") {
        *n -= 1;
    }
    drain_requests.retain(|_, v| *v != 0);
    stop.store(true, Ordering::Relaxed);
    let sampled = sampler.join().unwrap_or(0);
    let renewal_misses = renewal_misses(&drainer) - misses_before;
    drop(drainer);
    drop(sim);
    let mib = |k: u64| k as f64 / 1024.0;
    Ok(ScaleResult {
        scenario: scenario.to_path_buf(),
        build,
        nodes,
        pods,
        sim_rss: mib(sim_rss),
        sim_hwm: mib(sim_hwm),
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
        renewal_misses,
        drainer_exit,
    })
}

fn renewal_misses(drainer: &Drainer) -> usize {
    RENEWAL_MISSES.iter().map(|m| drainer.log_count(m)).sum()
}

/// `k=v, k=v` for a set of counters, or `none`.
fn listed(m: &BTreeMap<String, i64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl ScaleResult {
    /// The draining peak: VmHWM after the reset, or the sampled VmRSS maximum without one.
    fn drain_peak(&self) -> f64 {
        if self.hwm_reset {
            self.drain_hwm
        } else {
            self.drain_sampled_max
        }
    }

    fn idle_besides_watches(&self) -> i64 {
        self.idle_requests
            .iter()
            .filter(|(k, _)| !k.starts_with("watch "))
            .map(|(_, v)| *v)
            .sum()
    }

    fn bytes_per_pod(&self) -> f64 {
        self.sim_rss * 1048576.0 / self.pods.max(1) as f64
    }

    /// The details behind one row of the table, printed as soon as the scale is measured.
    fn print_one(&self) {
        println!();
        println!(
            "== {}: {} nodes, {} pods ==",
            self.scenario.display(),
            self.nodes,
            self.pods
        );
        println!(
            "rotor-sim: built and listening in {:.1} s; RSS {:.0} MiB (peak while building {:.0} MiB), {:.0} bytes per pod",
            self.build,
            self.sim_rss,
            self.sim_hwm,
            self.bytes_per_pod()
        );
        println!(
            "rotor-drainer run --lease-namespace kube-system --settle {SETTLE_FLAG}: standing by after {:.1} s, node list read after {:.1} s, then left idle {} s",
            self.standing_by_after,
            self.listed_after,
            IDLE_WAIT.as_secs()
        );
        println!(
            "  RSS idle {:.1} MiB, start-up peak (VmHWM) {:.1} MiB, draining peak ({}) {:.1} MiB; VmRSS sampled every 20 ms while draining peaked at {:.1} MiB",
            self.idle_rss,
            self.startup_hwm,
            if self.hwm_reset {
                "VmHWM after resetting it through /proc/PID/clear_refs"
            } else {
                "could not reset VmHWM: the sampled VmRSS maximum"
            },
            self.drain_peak(),
            self.drain_sampled_max
        );
        println!(
            "  requests in {} idle seconds: {}",
            IDLE_WINDOW.as_secs(),
            listed(&self.idle_requests)
        );
        println!(
            "  one node {} ({} pods incl. DaemonSet and mirror pods) drained in {}",
            self.drained_node,
            self.drained_pods,
            self.drain_time()
        );
        println!(
            "  requests from the taint until 5 s after the drain: {}",
            listed(&self.drain_requests)
        );
        println!(
            "  Lease renewals missed while draining: {}{}",
            self.renewal_misses,
            self.drainer_exit
                .as_deref()
                .map(|e| format!("; rotor-drainer exited: {e}"))
                .unwrap_or_default()
        );
    }

    fn drain_time(&self) -> String {
        match (self.drain_seconds, &self.drainer_exit) {
            (Some(s), _) => secs_f(s),
            (None, Some(_)) => "-- (rotor-drainer exited)".into(),
            (None, None) => "-- (not drained within 300 s)".into(),
        }
    }
}

impl MemoryResult {
    pub fn print(&self, summary: &mut Vec<String>) {
        println!();
        println!("== memory and requests by scale ==");
        println!(
            "| nodes | pods | rotor-sim build | rotor-sim RSS | bytes per pod | drainer RSS idle | start-up peak | draining peak | idle requests besides watches | requests to drain one node | drain time | Lease renewals missed |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        for r in &self.0 {
            let drain_total: i64 = r.drain_requests.values().sum();
            println!(
                "| {} | {} | {:.1} s | {:.0} MiB | {:.0} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {} | {} | {} | {} |",
                r.nodes,
                r.pods,
                r.build,
                r.sim_rss,
                r.bytes_per_pod(),
                r.idle_rss,
                r.startup_hwm,
                r.drain_peak(),
                r.idle_besides_watches(),
                drain_total,
                r.drain_time(),
                r.renewal_misses
            );
        }
        // The target holds at the largest scale measured (20,000 nodes by default).
        let Some(largest) = self.0.iter().max_by_key(|r| r.nodes) else {
            return;
        };
        let ok = |v: f64| {
            if v <= TARGET_RSS_MIB {
                "PASS".to_string()
            } else {
                verdict(false, v, TARGET_RSS_MIB)
            }
        };
        let at = format!("{} nodes / {} pods", largest.nodes, largest.pods);
        for (what, v) in [
            ("idle RSS", largest.idle_rss),
            ("start-up peak", largest.startup_hwm),
            ("draining peak", largest.drain_peak()),
        ] {
            let line = format!(
                "{at}: rotor-drainer {what:<14} {v:>7.1} MiB  (target <= {TARGET_RSS_MIB:.0} MiB)  {}",
                ok(v)
            );
            println!("{line}");
            summary.push(line);
        }
        for r in &self.0 {
            let besides = r.idle_besides_watches();
            let line = format!(
                "{} nodes: idle requests besides watches {besides} (target 0)  {}",
                r.nodes,
                if besides == 0 { "PASS" } else { "MISS" }
            );
            println!("{line}");
            summary.push(line);
            let line = format!(
                "{} nodes: one node drained {}, Lease renewals missed {} (target: drained, none missed)  {}",
                r.nodes,
                r.drain_time(),
                r.renewal_misses,
                if r.drain_seconds.is_some() && r.renewal_misses == 0 {
                    "PASS"
                } else {
                    "MISS"
                }
            );
            println!("{line}");
            summary.push(line);
        }
    }
}

/// (VmRSS, VmHWM) of a process, in KiB.
fn rss_kib(pid: u32) -> anyhow::Result<(u64, u64)> {
    let m = resident_memory(pid).with_context(|| format!("cannot read /proc/{pid}/status"))?;
    Ok((m.current_kib, m.peak_kib))
}
