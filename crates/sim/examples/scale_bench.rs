//! Scale benchmark for the simulator itself: start `rotor-sim serve` on a large scenario, then
//! report its build time, resident memory, and how fast a real kube client can page through
//! every pod and list one node's pods by field selector.
//!
//! cargo build --release -p rotor-sim --bins --examples
//! target/release/examples/scale_bench examples/scenarios/scale-5k.yaml

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use rotor_e2e::{SimOptions, SimProcess, resident_memory};

/// (VmRSS, VmHWM) of the simulator in KiB, zero when unreadable.
fn rss_kib(sim: &SimProcess) -> (u64, u64) {
    let m = resident_memory(sim.pid()).unwrap_or_default();
    (m.current_kib, m.peak_kib)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let scenario = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "examples/scenarios/scale-5k.yaml".into());
    let started = Instant::now();
    // rotor-e2e finds rotor-sim next to this example (`target/<profile>/`).
    let sim = SimProcess::start_with(
        &scenario,
        SimOptions {
            start_timeout: Some(Duration::from_secs(600)),
            ..SimOptions::default()
        },
    );
    let build = started.elapsed();
    let (rss_ready, hwm_ready) = rss_kib(&sim);

    let client = kube::Client::try_from(kube::Config::new(sim.url().parse()?))?;
    let pods: Api<Pod> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());

    // Every pod, 500 per page, as kubectl and kube's watcher page.
    let mut page_times = Vec::new();
    let mut total = 0usize;
    let mut token: Option<String> = None;
    let all_started = Instant::now();
    loop {
        let mut lp = ListParams::default().limit(500);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let t0 = Instant::now();
        let page = pods.list(&lp).await?;
        page_times.push(t0.elapsed());
        total += page.items.len();
        token = page.metadata.continue_.filter(|c| !c.is_empty());
        if token.is_none() {
            break;
        }
    }
    let all_pods = all_started.elapsed();
    page_times.sort();

    let t0 = Instant::now();
    let node_list = nodes.list(&ListParams::default()).await?;
    let nodes_unpaged = t0.elapsed();

    let mut by_node = Vec::new();
    for n in node_list
        .items
        .iter()
        .step_by((node_list.items.len() / 20).max(1))
        .take(20)
    {
        let name = n.metadata.name.clone().unwrap_or_default();
        let t0 = Instant::now();
        let l = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await?;
        by_node.push((t0.elapsed(), l.items.len()));
    }
    let mut by_node_times: Vec<Duration> = by_node.iter().map(|x| x.0).collect();
    by_node_times.sort();

    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_after, hwm_after) = rss_kib(&sim);
    drop(sim);

    println!("scenario                     {scenario}");
    println!("nodes                        {}", node_list.items.len());
    println!("pods                         {total}");
    println!("build + settle + listen      {:.1} s", build.as_secs_f64());
    println!(
        "sim RSS when ready           {} MiB (peak {} MiB)",
        rss_ready / 1024,
        hwm_ready / 1024
    );
    println!(
        "sim RSS after the lists      {} MiB (peak {} MiB)",
        rss_after / 1024,
        hwm_after / 1024
    );
    println!(
        "all pods, pages of 500       {:.2} s in {} pages; per page p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        all_pods.as_secs_f64(),
        page_times.len(),
        percentile(&page_times, 0.5).as_secs_f64() * 1e3,
        percentile(&page_times, 0.99).as_secs_f64() * 1e3,
        page_times.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
    println!(
        "all nodes, one page          {:.1} ms",
        nodes_unpaged.as_secs_f64() * 1e3
    );
    println!(
        "pods of one node (field sel) p50 {:.1} ms, max {:.1} ms ({} pods on the first sampled node)",
        percentile(&by_node_times, 0.5).as_secs_f64() * 1e3,
        by_node_times
            .last()
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3,
        by_node.first().map(|x| x.1).unwrap_or(0)
    );
    Ok(())
}
