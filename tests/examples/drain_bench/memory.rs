//! rotor-drainer's memory and idle API traffic in a 5,000-node / 150,000-pod simulation: idle,
//! at start-up, and while it drains one node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rotor_e2e::resident_memory;
use tokio::runtime::Handle;

use crate::drainer::{Bins, Drainer};
use crate::node_watch::NodeWatch;
use crate::sim::{BenchSim, counts, delta};
use crate::{Args, SETTLE_FLAG, secs_f, verdict};

/// How long the drainer is left alone before its idle memory is read, and the idle request
/// window.
const IDLE_WAIT: Duration = Duration::from_secs(20);
const IDLE_WINDOW: Duration = Duration::from_secs(20);
/// The target from issue 4.
const TARGET_RSS_MIB: f64 = 64.0;

pub struct MemoryResult {
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

pub fn memory(
    args: &Args,
    bins: &Bins,
    runtime: &Handle,
    dir: &Path,
) -> anyhow::Result<MemoryResult> {
    std::fs::create_dir_all(dir)?;
    eprintln!(
        "drain_bench: memory: starting rotor-sim on {} (about 30 s to build)",
        args.scale_scenario.display()
    );
    let started = Instant::now();
    let sim = BenchSim::start(runtime, &args.scale_scenario, dir, Duration::from_secs(600))?;
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
    let watch = NodeWatch::start(&sim, rv, Some(&name))?;

    // scale-5k.yaml has no rotor-system namespace; kube-system holds its DaemonSets.
    eprintln!("drain_bench: memory: starting rotor-drainer");
    let t_drainer = Instant::now();
    let mut drainer = Drainer::run(&bins.drainer, &sim, dir, "kube-system", &[])?;
    drainer.wait_standing_by(Duration::from_secs(120))?;
    let standing_by_after = t_drainer.elapsed().as_secs_f64();
    // The drainer's node watch opens once its initial list (5,000 nodes in pages) is read; the
    // benchmark's own watch is the other one.
    sim.wait_for_requests(
        &[("watch nodes", 2), ("watch poddisruptionbudgets", 1)],
        Duration::from_secs(300),
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
    eprintln!("drain_bench: memory: tainting {name} ({drained_pods} pods)");
    let before = counts(&sim.stats()?["requests"]);
    let t = Instant::now();
    sim.taint_all([(name.as_str(), taints.as_slice())])?;
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
                drainer.log_tail()
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
    pub fn print(&self, summary: &mut Vec<String>) {
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

/// (VmRSS, VmHWM) of a process, in KiB.
fn rss_kib(pid: u32) -> anyhow::Result<(u64, u64)> {
    let m = resident_memory(pid).with_context(|| format!("cannot read /proc/{pid}/status"))?;
    Ok((m.current_kib, m.peak_kib))
}
