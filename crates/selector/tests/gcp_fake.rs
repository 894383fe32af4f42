//! The Google Cloud provider end to end: the rotor-selector binary against the fake Compute
//! Engine API of `rotor_e2e::fake_gcp` (plain HTTP on loopback, found through
//! `ROTOR_GCP_ENDPOINT`) and the simulator, whose nodes carry `gce://` provider IDs. Given
//! managed instance groups like these, when the selector runs, then: instances on another
//! template are tainted (reason `instance-template`) within the budgets; groups Google Cloud or
//! GKE replaces itself are skipped and said so; paging is followed (aggregated list and
//! `PAGINATED` groups) and a `PAGELESS` group answers in one call; 429 and 503 are retried, an
//! expired token fails the run before anything is written; a group that vanishes between the
//! calls is skipped and reported; 5,000 instances in 50 groups cost 51 calls.

mod common;

use std::time::Instant;

use common::{SelectorRun, TestCluster};
use rotor_e2e::fake_gcp::{FakeGce, FakeGroup, provider_id};
use serde_json::{Value, json};

const ZONE: &str = "us-central1-a";

fn scenario(nodes: usize) -> String {
    format!(
        r#"
controlPlaneVersion: v1.33.4
timing:
  tick: 1s
  nodeStartup: 200ms
  scaleUpDelay: 1h
  scaleDownDelay: 1h
nodeGroups:
  - name: workers
    zones: [{ZONE}]
    size: {nodes}
    template:
      kubeletVersion: v1.33.4
      nodeName: "n-{{index}}"
"#
    )
}

/// Points each node `n-{i}` at `instances[i]` (zone, instance name).
fn map_nodes(cluster: &TestCluster, instances: &[(String, String)]) {
    for (i, (zone, name)) in instances.iter().enumerate() {
        let id = provider_id(zone, name);
        cluster.modify_node(&format!("n-{i}"), |n| {
            n.spec.get_or_insert_with(Default::default).provider_id = Some(id)
        });
    }
}

fn instances_of(groups: &[FakeGroup]) -> Vec<(String, String)> {
    groups
        .iter()
        .flat_map(|g| g.instances.iter().map(|i| (i.zone.clone(), i.name.clone())))
        .collect()
}

async fn select(cluster: &TestCluster, fake: &FakeGce, flags: &[&str]) -> SelectorRun {
    let env = fake.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut all = vec!["--provider", "gcp", "--output", "json"];
    all.extend_from_slice(flags);
    let run = cluster.run_env(&all, &env).await;
    println!(
        "selector {flags:?}: exit {}, calls {}",
        run.code,
        if run.code == 0 || !run.stdout.is_empty() {
            run.json()["apiCalls"].to_string()
        } else {
            String::new()
        }
    );
    run
}

fn entry(run: &SelectorRun, node: &str) -> Value {
    run.node(node)
}

/// workers: 4 instances, 0 and 1 on the old template; proactive, GKE and canary groups with an
/// old instance each; a group acting on its only (old) instance.
fn fleet() -> Vec<FakeGroup> {
    let mut workers = FakeGroup::zonal("workers", ZONE, "workers-v2", 4);
    for old in &mut workers.instances[..2] {
        old.template = Some("workers-v1".into());
    }
    let mut proactive = FakeGroup::zonal("proactive", ZONE, "p-v2", 1);
    proactive.update_policy = "PROACTIVE".into();
    proactive.instances[0].template = Some("p-v1".into());
    let mut gke = FakeGroup::zonal("gke-prod-default-pool-1a2b3c4d-grp", ZONE, "gke-v2", 1);
    gke.base_instance_name = "gke-prod-default-pool-1a2b3c4d".into();
    gke.instances[0].name = "gke-prod-default-pool-1a2b3c4d-x1".into();
    gke.instances[0].template = Some("gke-v1".into());
    let mut canary = FakeGroup::zonal("canary", ZONE, "c-v2", 1);
    canary.versions = vec![
        ("stable".into(), "c-v2".into()),
        ("next".into(), "c-v3".into()),
    ];
    canary.version_target_reached = false;
    canary.instances[0].template = Some("c-v1".into());
    let mut busy = FakeGroup::zonal("busy", ZONE, "b-v2", 1);
    busy.instances[0].template = Some("b-v1".into());
    busy.instances[0].action = "RECREATING".into();
    vec![workers, proactive, gke, canary, busy]
}

#[tokio::test]
async fn drift_is_tainted_within_budgets_and_groups_the_cloud_replaces_are_skipped() {
    let groups = fleet();
    let instances = instances_of(&groups);
    let fake = FakeGce::start(groups);
    let cluster = TestCluster::start(&scenario(instances.len())).await;
    map_nodes(&cluster, &instances);

    // Dry run, no budget to speak of: the two old workers would be tainted, nothing else.
    let dry = select(&cluster, &fake, &["--dry-run", "--max-tainted", "100%"]).await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    for node in ["n-0", "n-1"] {
        let e = entry(&dry, node);
        assert_eq!(e["action"], "taint", "{e}");
        assert_eq!(e["reason"], "instance-template", "{e}");
        assert_eq!(e["group"], "us-central1-a/workers", "{e}");
        assert!(
            e["detail"].as_str().unwrap().contains(
                "instance template workers-v1, group us-central1-a/workers targets workers-v2"
            ),
            "{e}"
        );
    }
    for node in ["n-2", "n-3"] {
        assert_eq!(entry(&dry, node)["action"], "keep");
    }
    let skipped = |run: &SelectorRun, node: &str, slug: &str| {
        let e = entry(run, node);
        assert_eq!(e["action"], "skip", "{node}: {e}");
        assert_eq!(e["reason"], slug, "{node}: {e}");
    };
    skipped(&dry, "n-4", "group-updating-itself");
    skipped(&dry, "n-5", "gke-managed");
    skipped(&dry, "n-6", "group-updating-itself");
    skipped(&dry, "n-7", "instance-action-in-progress");
    // One aggregated list; a listManagedInstances for the two judged groups only.
    assert_eq!(
        dry.json()["apiCalls"]["gcp"],
        json!({
            "instanceGroupManagers.aggregatedList": 1,
            "instanceGroupManagers.listManagedInstances": 2,
        })
    );
    assert_eq!(fake.count("listManagedInstances"), 2);
    assert_eq!(
        cluster.drain_taint("n-0").await,
        None,
        "a dry run writes nothing"
    );

    // --include-gke-managed judges the GKE pool too.
    let gke = select(
        &cluster,
        &fake,
        &[
            "--dry-run",
            "--max-tainted",
            "100%",
            "--include-gke-managed",
        ],
    )
    .await;
    assert_eq!(entry(&gke, "n-5")["action"], "taint");
    assert_eq!(entry(&gke, "n-5")["reason"], "instance-template");

    // For real, one at a time: one taint, then the budget is full.
    let first = select(&cluster, &fake, &["--max-tainted", "1"]).await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(first.json()["summary"]["applied"], 1, "{}", first.stdout);
    let mut tainted = 0;
    for node in ["n-0", "n-1"] {
        if cluster.drain_taint(node).await.as_deref() == Some("instance-template:NoSchedule") {
            tainted += 1;
        }
    }
    assert_eq!(tainted, 1, "{}", first.stdout);
    let second = select(&cluster, &fake, &["--max-tainted", "1"]).await;
    assert_eq!(second.json()["summary"]["applied"], 0, "{}", second.stdout);
    // A per-group budget of 2 lets the second old worker go too.
    let third = select(
        &cluster,
        &fake,
        &["--max-tainted", "100%", "--max-tainted-per-group", "2"],
    )
    .await;
    assert_eq!(third.json()["summary"]["applied"], 1, "{}", third.stdout);

    // Rolled forward: the group now targets workers-v1, so the taints go again (the drain has
    // not started).
    fake.with_groups(|groups| groups[0].template = "workers-v1".into());
    let back = select(&cluster, &fake, &["--max-tainted", "100%"]).await;
    assert_eq!(back.code, 0, "{}", back.stderr);
    for node in ["n-0", "n-1"] {
        assert_eq!(entry(&back, node)["action"], "untaint", "{}", back.stdout);
    }
    cluster.stop().await;
}

#[tokio::test]
async fn paging_is_followed_and_a_pageless_group_answers_at_once() {
    // 501 groups: the aggregated list takes two pages of 500. Nodes only on three of them.
    let mut groups: Vec<FakeGroup> = (0..501)
        .map(|i| FakeGroup::zonal(&format!("g{i:03}"), ZONE, "t-v2", 0))
        .collect();
    // g000: PAGINATED, 1,200 instances (3 pages of 500), 1 old; g001 PAGELESS 1,200 (1 call).
    for (i, paginated) in [(0usize, true), (1, false)] {
        let mut g = FakeGroup::zonal(&format!("g{i:03}"), ZONE, "t-v2", 1200);
        g.paginated = paginated;
        g.instances[1100].template = Some("t-v1".into());
        groups[i] = g;
    }
    groups[500] = FakeGroup::zonal("g500", ZONE, "t-v2", 1);
    let mapped = vec![
        (ZONE.to_owned(), "g000-1100".to_owned()),
        (ZONE.to_owned(), "g001-1100".to_owned()),
        (ZONE.to_owned(), "g500-0".to_owned()),
    ];
    let fake = FakeGce::start(groups);
    let cluster = TestCluster::start(&scenario(mapped.len())).await;
    map_nodes(&cluster, &mapped);
    let run = select(&cluster, &fake, &["--dry-run", "--max-tainted", "100%"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(entry(&run, "n-0")["reason"], "instance-template");
    assert_eq!(entry(&run, "n-1")["reason"], "instance-template");
    assert_eq!(entry(&run, "n-2")["action"], "keep");
    assert_eq!(
        run.json()["apiCalls"]["gcp"],
        json!({
            "instanceGroupManagers.aggregatedList": 2,
            "instanceGroupManagers.listManagedInstances": 5,
        })
    );
    assert_eq!(fake.count("/g000/listManagedInstances"), 3);
    assert_eq!(fake.count("/g001/listManagedInstances"), 1);
    cluster.stop().await;
}

#[tokio::test]
async fn throttling_is_retried_and_failures_write_nothing() {
    let groups = fleet();
    let instances = instances_of(&groups);
    let fake = FakeGce::start(groups);
    let cluster = TestCluster::start(&scenario(instances.len())).await;
    map_nodes(&cluster, &instances);

    // 429 on the aggregated list, 503 on a listing, each with Retry-After: retried, the run
    // completes. The selector counts the calls it made; the fake sees the retries too.
    fake.fail_next("aggregated", 429, Some(1));
    fake.fail_next("listManagedInstances", 503, Some(1));
    fake.clear_requests();
    let run = select(&cluster, &fake, &["--dry-run", "--max-tainted", "100%"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(entry(&run, "n-0")["action"], "taint");
    assert_eq!(fake.count("aggregated"), 2);
    assert_eq!(fake.count("listManagedInstances"), 3);

    // Throttled past the bound (5 attempts): the run fails before anything is written.
    for _ in 0..10 {
        fake.fail_next("listManagedInstances", 429, Some(1));
    }
    fake.clear_requests();
    let throttled = select(&cluster, &fake, &["--max-tainted", "100%"]).await;
    fake.clear_faults();
    assert_eq!(
        fake.count("listManagedInstances"),
        5,
        "{:?}",
        fake.requests()
    );
    assert_eq!(throttled.code, 1, "{}", throttled.stderr);
    assert!(
        throttled
            .stderr
            .contains("instanceGroupManagers.listManagedInstances"),
        "{}",
        throttled.stderr
    );
    assert!(
        throttled.stderr.contains("nothing was written"),
        "{}",
        throttled.stderr
    );
    assert_eq!(cluster.drain_taint("n-0").await, None);

    // An expired token: 401, not retried; nothing written, the operation named.
    fake.expire_token(true);
    let expired = select(&cluster, &fake, &["--max-tainted", "100%"]).await;
    assert_eq!(expired.code, 1, "{}", expired.stderr);
    assert!(
        expired
            .stderr
            .contains("instanceGroupManagers.aggregatedList"),
        "{}",
        expired.stderr
    );
    assert_eq!(cluster.drain_taint("n-0").await, None);
    fake.expire_token(false);

    // The workers group vanishes between the aggregated list and its listing: its nodes are
    // skipped (lookup-failed), the run says so and exits 1; nothing of it is tainted.
    fake.vanish_after_listing("workers");
    let vanished = select(&cluster, &fake, &["--max-tainted", "100%"]).await;
    assert_eq!(vanished.code, 1, "{}", vanished.stderr);
    for node in ["n-0", "n-1", "n-2", "n-3"] {
        let e = entry(&vanished, node);
        assert_eq!(e["action"], "skip", "{e}");
        assert_eq!(e["reason"], "lookup-failed", "{e}");
    }
    assert_eq!(
        vanished.json()["lookupFailures"][0]["groups"],
        json!(["us-central1-a/workers"])
    );
    assert_eq!(cluster.drain_taint("n-0").await, None);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_instances_in_fifty_groups_cost_fifty_one_calls() {
    let groups: Vec<FakeGroup> = (0..50)
        .map(|g| {
            let mut group = FakeGroup::zonal(&format!("pool{g:02}"), ZONE, "t-v2", 100);
            group.instances[0].template = Some("t-v1".into());
            group
        })
        .collect();
    let instances = instances_of(&groups);
    assert_eq!(instances.len(), 5000);
    let fake = FakeGce::start(groups);
    let cluster = TestCluster::start(&scenario(instances.len())).await;
    map_nodes(&cluster, &instances);
    let started = Instant::now();
    let run = select(&cluster, &fake, &["--dry-run", "--max-tainted", "100%"]).await;
    let elapsed = started.elapsed();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.json()["summary"]["taint"],
        50,
        "{}",
        run.json()["summary"]
    );
    let gcp = &run.json()["apiCalls"]["gcp"];
    assert_eq!(
        gcp,
        &json!({
            "instanceGroupManagers.aggregatedList": 1,
            "instanceGroupManagers.listManagedInstances": 50,
        })
    );
    println!(
        "5,000 instances in 50 groups: {elapsed:?} for the whole run (51 Compute Engine calls)"
    );
    cluster.stop().await;
}

/// A drained node taken back while the run looks its groups up (its taint removed, its drain
/// rolled back, as `kubectl taint node X rotor.dev/drain-` and the drainer do): the plan, made
/// on the nodes as listed, says retire, but the selector reads the node again before it
/// terminates an instance and drops it instead. The node beside it, still drained, is retired;
/// so is a drained node whose Node object was deleted meanwhile (no pod can run there, and no
/// later run would list it).
#[tokio::test]
async fn a_drained_node_taken_back_during_the_run_is_not_retired() {
    let mut workers = FakeGroup::zonal("workers", ZONE, "workers-v2", 3);
    for old in &mut workers.instances {
        old.template = Some("workers-v1".into());
    }
    let groups = vec![workers];
    let instances = instances_of(&groups);
    let fake = FakeGce::start(groups);
    let cluster = TestCluster::start(&scenario(instances.len())).await;
    map_nodes(&cluster, &instances);
    let drained = [
        ("rotor.dev/phase", "drained"),
        ("rotor.dev/drained-at", "2026-01-01T00:00:00Z"),
    ];
    for node in ["n-0", "n-1", "n-2"] {
        cluster.mark(node, Some(("instance-template", "NoSchedule")), &drained);
    }
    // The run lists the nodes, then looks the groups up (the first throttled once); n-0 is taken
    // back and n-2's Node deleted meanwhile. Every request to the API server takes 300 ms, so
    // the selector's read before a retire, sent after the look-ups, is answered after those
    // changes however fast the look-ups go.
    cluster.faults(json!({"latencyMs": 300})).await;
    fake.fail_next("aggregated", 503, Some(2));
    let take_back = async {
        while fake.count("aggregated") == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        cluster.modify_node("n-0", |n| {
            if let Some(spec) = n.spec.as_mut() {
                spec.taints = None;
                spec.unschedulable = None;
            }
            if let Some(annotations) = n.metadata.annotations.as_mut() {
                annotations.retain(|key, _| !key.starts_with("rotor.dev/"));
            }
        });
        cluster
            .api::<k8s_openapi::api::core::v1::Node>()
            .delete("n-2", &Default::default())
            .await
            .expect("n-2's Node deleted");
    };
    let (run, ()) = tokio::join!(
        select(
            &cluster,
            &fake,
            &["--retire-drained", "--max-tainted", "100%"]
        ),
        take_back
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let taken_back = entry(&run, "n-0");
    assert_eq!(
        taken_back["action"], "retire",
        "planned on the listed node: {taken_back}"
    );
    assert_eq!(taken_back["result"]["outcome"], "dropped", "{taken_back}");
    assert_eq!(entry(&run, "n-1")["result"]["outcome"], "applied");
    assert_eq!(entry(&run, "n-2")["result"]["outcome"], "applied");
    let deleted: Vec<String> = fake.deleted().into_iter().map(|(_, i)| i).collect();
    assert_eq!(
        deleted,
        vec![instances[1].1.clone(), instances[2].1.clone()],
        "n-1's and n-2's instances, not n-0's"
    );
}
