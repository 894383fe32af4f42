//! Where the simulator's memory and control-loop time go, measured in-process: it builds a
//! scenario's cluster with a counting allocator, then reports the live heap per pod (and what one
//! settled pod's parts cost), the process RSS, and how long the control loop's steps take when
//! nothing changed and after one eviction.
//!
//! cargo build --release -p rotor-sim --example sim_profile
//! target/release/examples/sim_profile examples/scenarios/scale-5k.yaml

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use rotor_sim::cluster::objects::{is_daemon, is_mirror, node_name};
use rotor_sim::scenario::Scenario;

/// The system allocator, counting the bytes and blocks it hands out and takes back.
struct Counting;

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
static LIVE_BLOCKS: AtomicI64 = AtomicI64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        LIVE_BLOCKS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        LIVE_BLOCKS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> (i64, i64) {
    (
        LIVE_BYTES.load(Ordering::Relaxed),
        LIVE_BLOCKS.load(Ordering::Relaxed),
    )
}

/// Heap bytes and blocks a value owns, measured by cloning it.
fn heap_of<T: Clone>(v: &T) -> (i64, i64) {
    let (b0, n0) = live();
    let c = v.clone();
    let (b1, n1) = live();
    drop(c);
    (b1 - b0, n1 - n0)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// One step's time, writes, and the controllers that took more than a millisecond.
fn print_step(
    what: &str,
    c: &rotor_sim::cluster::Cluster,
    from: Timestamp,
    at: Timestamp,
    took: Duration,
    rv_before: u64,
) {
    let phases: Vec<String> = c
        .last_step_times()
        .iter()
        .filter(|(_, d)| *d >= Duration::from_millis(1))
        .map(|(p, d)| format!("{p} {}", ms(*d)))
        .collect();
    println!(
        "{what} (+{:.1} s): {}, {} writes; {}",
        (at.as_millisecond() - from.as_millisecond()) as f64 / 1000.0,
        ms(took),
        c.rev.current() - rv_before,
        phases.join(", ")
    );
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "examples/scenarios/scale-5k.yaml".into());
    let scenario = Scenario::load(std::path::Path::new(&path))?;
    let (b0, n0) = live();
    let t = Instant::now();
    let mut c = rotor_sim::seed::build(&scenario, Timestamp::now());
    let build = t.elapsed();
    let (b1, n1) = live();
    let pods = c.pods.len() as i64;
    let nodes = c.nodes.len() as i64;
    println!("scenario {path}: {nodes} nodes, {pods} pods, built in {build:.1?}");
    println!(
        "live heap {:.0} MiB in {} blocks; RSS {} MiB; per pod (all state / pods) {} B in {} blocks, RSS {} B",
        (b1 - b0) as f64 / 1048576.0,
        n1 - n0,
        rss_kib() / 1024,
        (b1 - b0) / pods.max(1),
        (n1 - n0) / pods.max(1),
        rss_kib() as i64 * 1024 / pods.max(1),
    );
    let workload: Option<Pod> = c
        .pods
        .values()
        .find(|p| !is_daemon(p) && !is_mirror(p) && node_name(p).is_some())
        .map(|p| (**p).clone());
    if let Some(p) = &workload {
        let json = serde_json::to_vec(p)?.len();
        let mut no_mf = p.clone();
        no_mf.metadata.managed_fields = None;
        let json_no_mf = serde_json::to_vec(&no_mf)?.len();
        println!("one Deployment pod: JSON {json} B ({json_no_mf} B without managedFields); heap:");
        let parts: [(&str, (i64, i64)); 6] = [
            ("whole pod", heap_of(p)),
            (
                "metadata.managedFields",
                heap_of(&p.metadata.managed_fields),
            ),
            ("metadata, the rest", heap_of(&no_mf.metadata)),
            ("spec", heap_of(&p.spec)),
            ("status", heap_of(&p.status)),
            (
                "status.containerStatuses",
                heap_of(&p.status.as_ref().and_then(|s| s.container_statuses.clone())),
            ),
        ];
        for (what, (b, n)) in parts {
            println!("  {what:<26} {b:>6} B in {n:>4} blocks");
        }
        println!(
            "  (plus the Pod struct itself, {} B, in its Arc)",
            std::mem::size_of::<Pod>()
        );
    }

    // The control loop: a quiet step, then the steps after one eviction, until quiet again.
    let now = Timestamp::now();
    c.step(now, false);
    let t = Instant::now();
    c.step(now, false);
    println!("quiet step (nothing changed): {}", ms(t.elapsed()));
    let victim = c
        .pods
        .values()
        .find(|p| !is_daemon(p) && !is_mirror(p) && node_name(p).is_some())
        .map(|p| {
            (
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default(),
            )
        });
    if let Some((ns, name)) = victim {
        let t = Instant::now();
        let r = c.evict_pod(&ns, &name, &serde_json::json!({}), now);
        println!(
            "evict {ns}/{name}: {:?} in {}",
            r.map(|_| "201").map_err(|e| e.code),
            ms(t.elapsed())
        );
        let mut at = now;
        for i in 0..12 {
            at = Timestamp::from_millisecond(at.as_millisecond() + 1100).unwrap_or(at);
            let rv = c.rev.current();
            let t = Instant::now();
            c.step(at, false);
            print_step(&format!("  step {i}"), &c, now, at, t.elapsed(), rv);
        }
    }

    // What the drain benchmark does: taint a node, then evict every pod on it at once.
    let node = c
        .nodes
        .values()
        .next()
        .and_then(|n| n.metadata.name.clone())
        .unwrap_or_default();
    let t = Instant::now();
    if let Some(n) = c.nodes.get("", &node).cloned() {
        let mut n = (*n).clone();
        let spec = n.spec.get_or_insert_with(Default::default);
        spec.taints
            .get_or_insert_with(Vec::new)
            .push(k8s_openapi::api::core::v1::Taint {
                key: "rotor.dev/drain".into(),
                value: Some("manual".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            });
        c.nodes.put(n);
    }
    let on_node: Vec<(String, String)> = c
        .pods
        .indexed(c.pod_index.node, &node)
        .map(|(k, _)| k.clone())
        .collect();
    let mut evicted = 0;
    for (ns, name) in &on_node {
        if c.evict_pod(ns, name, &serde_json::json!({}), now).is_ok() {
            evicted += 1;
        }
    }
    println!(
        "taint {node} and evict its {} pods: {evicted} evicted in {}",
        on_node.len(),
        ms(t.elapsed())
    );
    let start = Timestamp::from_millisecond(now.as_millisecond() + 60_000).unwrap_or(now);
    let mut at = start;
    for i in 0..8 {
        at = Timestamp::from_millisecond(at.as_millisecond() + 1100).unwrap_or(at);
        let rv = c.rev.current();
        let t = Instant::now();
        c.step(at, false);
        print_step(&format!("  step {i}"), &c, start, at, t.elapsed(), rv);
    }
    Ok(())
}
