//! How the selector behaves at 5,000 nodes (full-size Node objects, 40 images each): API calls
//! per run and wall time, for the Kubernetes provider against the simulator, and for the AWS
//! provider against moto (50 Auto Scaling groups of 100 instances, 5 launch templates) plus the
//! simulator. Ignored by default (a few hundred MB, and minutes with moto); run with
//! `cargo test -p rotor-selector --test scale -- --ignored --nocapture --test-threads 1`.

mod common;

use std::time::{Duration, Instant};

use common::TestCluster;
use rotor_e2e::moto::{
    create_group, create_template, instance_ids, new_default_version, start_moto, two_images,
};
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

const SCALE_AWS: &str = r#"
controlPlaneVersion: v1.33.4
timing:
  tick: 1s
  nodeStartup: 1s
  scaleUpDelay: 1h
  scaleDownDelay: 1h
nodeGroups:
  - name: big
    zones: [us-east-1a]
    size: 5000
    template:
      kubeletVersion: v1.33.4
      nodeName: "n-{index}"
"#;

const GROUPS: usize = 50;
const PER_GROUP: usize = 100;
const TEMPLATES: usize = 5;

/// One timed run of the binary against moto and the simulator.
async fn timed(
    cluster: &TestCluster,
    env: &[(&str, &str)],
    flags: &[&str],
) -> (common::SelectorRun, Duration) {
    let mut all = vec![
        "--provider",
        "aws",
        "--cluster-name",
        "scale",
        "--output",
        "json",
        // moto takes about 20 s a page of DescribeInstances at this size.
        "--aws-call-timeout",
        "10m",
    ];
    all.extend_from_slice(flags);
    let start = Instant::now();
    let run = cluster.run_env(&all, env).await;
    let elapsed = start.elapsed();
    assert_eq!(run.code, 0, "{flags:?}: {}", run.stderr);
    // The provider logs how long its AWS look-ups and judging took.
    let lookup = run
        .stderr
        .lines()
        .find(|line| line.contains("aws provider: described the groups"))
        .unwrap_or("(no look-up line)");
    println!(
        "aws {flags:?}: {:.1}s, summary {}, calls {}\n  {lookup}",
        elapsed.as_secs_f64(),
        run.json()["summary"],
        run.json()["apiCalls"]
    );
    (run, elapsed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale measurement with moto; run explicitly"]
async fn aws_five_thousand_nodes_in_fifty_groups() {
    let moto = start_moto().await;
    let aws = moto.clients().await;
    let (ami_old, ami_new) = two_images(&aws).await;

    // Set-up: 5 templates, 50 groups of 100 (each group launches its instances in one go).
    let start = Instant::now();
    let mut templates = Vec::new();
    for t in 0..TEMPLATES {
        templates.push(create_template(&aws, &format!("scale-{t}"), &ami_old).await);
    }
    for g in 0..GROUPS {
        let name = format!("scale-{g:02}");
        create_group(
            &aws,
            &name,
            &templates[g % TEMPLATES],
            "$Default",
            PER_GROUP as i32,
            "scale",
        )
        .await;
    }
    let aws_setup = start.elapsed();
    let start = Instant::now();
    let cluster = TestCluster::start(SCALE_AWS).await;
    for g in 0..GROUPS {
        let ids = instance_ids(&aws, &format!("scale-{g:02}")).await;
        assert_eq!(ids.len(), PER_GROUP);
        for (i, id) in ids.iter().enumerate() {
            cluster.set_instance(&format!("n-{}", g * PER_GROUP + i), id);
        }
    }
    let sim_setup = start.elapsed();
    println!(
        "set-up: moto {:.1}s (5 templates, 50 groups x 100 instances), simulator and providerIDs {:.1}s",
        aws_setup.as_secs_f64(),
        sim_setup.as_secs_f64()
    );
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();

    // Configuration drift alone: everything is current (moto reports each instance's template
    // and version from the group's current settings, so it cannot show version drift).
    let (config, _) = timed(&cluster, &env, &["--max-tainted", "1%"]).await;
    assert_eq!(config.json()["summary"]["keep"], 5000);
    assert_eq!(
        config.json()["apiCalls"]["aws"],
        json!({"DescribeAutoScalingGroups": 1, "DescribeLaunchTemplates": 1})
    );

    // A new image in every template: with the image rule all 5,000 are out of date, 1% tainted.
    for template in &templates {
        new_default_version(&aws, template, &ami_new).await;
    }
    let (image, _) = timed(&cluster, &env, &["--image-drift", "--max-tainted", "1%"]).await;
    assert_eq!(image.json()["summary"]["applied"], 50);
    let calls = &image.json()["apiCalls"]["aws"];
    assert_eq!(calls["DescribeAutoScalingGroups"], 1, "{calls}");
    assert_eq!(calls["DescribeLaunchTemplates"], 1, "{calls}");
    assert_eq!(
        calls["DescribeLaunchTemplateVersions"], TEMPLATES,
        "{calls}"
    );
    assert!(calls["DescribeInstances"].as_u64().unwrap() <= 5, "{calls}");

    // A second run has nothing to write.
    let (again, _) = timed(&cluster, &env, &["--image-drift", "--max-tainted", "1%"]).await;
    assert_eq!(again.json()["summary"]["taint"], 0);
    assert_eq!(
        again.json()["apiCalls"]["kubernetes"],
        json!({"list nodes": 10})
    );
    cluster.stop().await;
}
