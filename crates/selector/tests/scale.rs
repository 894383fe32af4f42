//! How the Kubernetes provider behaves at 5,000 nodes (full-size Node objects, 40 images each):
//! API calls per run and wall time. Ignored by default (it needs a few hundred MB and tens of
//! seconds in a debug build); run with
//! `cargo test -p rotor-selector --test scale -- --ignored --nocapture`.

mod common;

use std::time::Instant;

use common::TestCluster;
use serde_json::json;

const SCALE: &str = r#"
controlPlaneVersion: v1.33.4
timing:
  tick: 1s
  nodeStartup: 1s
  scaleUpDelay: 1h
  scaleDownDelay: 1h
nodeGroups:
  - name: big
    zones: [us-east-1a, us-east-1b, us-east-1c]
    size: 5000
    template:
      kubeletVersion: v1.33.2
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale measurement; run explicitly"]
async fn five_thousand_nodes() {
    let cluster = TestCluster::start(SCALE).await;
    cluster.set_control_plane("v1.34.1").await;
    let flags = [
        "--provider",
        "kubernetes",
        "--output",
        "json",
        "--max-tainted",
        "1%",
    ];

    let start = Instant::now();
    let run = cluster.run(&flags).await;
    let first = start.elapsed();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["summary"]["applied"], 50);
    assert_eq!(
        run.json()["apiCalls"],
        json!({"kubernetes": {"list nodes": 10, "get /version": 1, "patch nodes": 50, "create events": 50}})
    );

    let start = Instant::now();
    let run = cluster.run(&flags).await;
    let second = start.elapsed();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.json()["apiCalls"],
        json!({"kubernetes": {"list nodes": 10, "get /version": 1}})
    );
    println!(
        "5,000 nodes: first run (50 taints) {:.1}s, second run (nothing to do) {:.1}s",
        first.as_secs_f64(),
        second.as_secs_f64()
    );
    cluster.stop().await;
}
