//! rotor-drainer with a RotationPolicy on the simulated cluster, which serves rotor's resources
//! as if their CRDs were installed: the policy governs its pool, its changes reach the drainer
//! through the watch, and the drainer writes the pool's status. The policies' rules in full are
//! tested without sockets (`fleet::pools`, `fleet::machine::policies`) and on the real control
//! plane (`tests/tests/real_pools.rs`).

mod common;

use common::{SimCluster, TestDrainer, WAIT, lease_holder, wait_until};
use kube::api::{Patch, PatchParams, PostParams};
use rotor_policy::{RotationPolicy, RotationPolicyStatus};
use serde_json::json;
use std::time::Duration;

/// Two nodes labelled `pool: batch`, two without the label; one web pod a node or so.
const CLUSTER: &str = r#"
timing: {tick: 50ms, nodeStartup: 500ms, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 300ms, podShutdown: 200ms, bookmarkInterval: 1s}
namespaces: [rotor-system]
nodeGroups:
  - {name: batch, size: 2, max: 4, template: {cpu: "4", memory: 16Gi, labels: {pool: batch}}}
  - {name: general, size: 2, max: 4, template: {cpu: "4", memory: 16Gi}}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 4, requests: {cpu: 100m}, startup: 300ms, shutdown: 200ms, pdb: {maxUnavailable: 1}}
"#;

/// The nodes with and without the `pool: batch` label.
async fn batch_and_general(cluster: &SimCluster) -> (Vec<String>, Vec<String>) {
    let mut batch = Vec::new();
    let mut general = Vec::new();
    for name in cluster.node_names().await {
        let node = cluster.node(&name).await;
        let labels = node.metadata.labels.unwrap_or_default();
        match labels.get("pool").map(String::as_str) {
            Some("batch") => batch.push(name),
            _ => general.push(name),
        }
    }
    (batch, general)
}

/// Creates the RotationPolicy `batch`, which selects the `pool: batch` nodes with a budget of
/// 0 (paused); returns the policies' API.
async fn pause_the_batch_pool(cluster: &SimCluster) -> kube::Api<RotationPolicy> {
    let policies = cluster.api::<RotationPolicy>();
    let paused: RotationPolicy = serde_json::from_value(json!({
        "apiVersion": "rotor.dev/v1alpha1",
        "kind": "RotationPolicy",
        "metadata": {"name": "batch"},
        "spec": {"nodeSelector": {"matchLabels": {"pool": "batch"}}, "budgets": [{"nodes": "0"}]},
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &paused)
        .await
        .expect("the simulator serves RotationPolicies");
    policies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_policy_pausing_its_pool_then_only_other_nodes_drain_until_it_allows_one() {
    let cluster = SimCluster::start(CLUSTER).await;
    let (batch, general) = batch_and_general(&cluster).await;
    assert_eq!(
        (batch.len(), general.len()),
        (2, 2),
        "{batch:?} {general:?}"
    );
    let policies = pause_the_batch_pool(&cluster).await;

    let drainer = TestDrainer::start(&cluster, "a", &["--max-concurrent", "2"]);
    cluster.taint(&batch[0], "manual").await;
    cluster.taint(&general[0], "manual").await;
    cluster.wait_phase(&general[0], "drained").await;

    // The pool's budget of 0 holds its node: not started, not even cordoned.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(cluster.phase(&batch[0]).await, None);
    assert_ne!(
        cluster.node(&batch[0]).await.spec.unwrap().unschedulable,
        Some(true)
    );
    // The drainer wrote what it sees of the pool, for the generation it read.
    let status = wait_until("the pool's status", WAIT, || async {
        let status = policies.get("batch").await.ok()?.status?;
        (status.nodes == 2 && status.out_of_date == 1).then_some(status)
    })
    .await;
    assert_eq!(status.observed_generation, Some(1), "{status:?}");
    assert_eq!((status.draining, status.drained), (0, 0), "{status:?}");
    assert_eq!(status.budget.as_deref(), Some("0 (paused)"), "{status:?}");
    let paused_condition = status.conditions.iter().find(|c| c.type_ == "Paused");
    assert_eq!(
        paused_condition.map(|c| c.status.as_str()),
        Some("True"),
        "{status:?}"
    );

    // The policy's change reaches the drainer through its watch: one node at a time now.
    let one = json!({"spec": {"budgets": [{"nodes": "1"}]}});
    policies
        .patch("batch", &PatchParams::default(), &Patch::Merge(&one))
        .await
        .unwrap();
    cluster.wait_phase(&batch[0], "drained").await;
    let status = wait_until("the pool's status after the change", WAIT, || async {
        let status = policies.get("batch").await.ok()?.status?;
        (status.observed_generation == Some(2) && status.drained == 1).then_some(status)
    })
    .await;
    assert_eq!(status.budget.as_deref(), Some("1 of 2"), "{status:?}");

    let stats = cluster.stats();
    assert_eq!(stats["budgetViolations"], 0, "{stats}");
    // Served, each is read once and then watched, not listed again and again as a failing
    // list would be.
    for list in ["list rotationpolicies", "list drainrules"] {
        let sent = stats["requests"][list].as_u64();
        assert!(matches!(sent, Some(1..=2)), "{list}: {sent:?} in {stats}");
    }
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_policy_changed_while_no_node_is_tainted_then_a_replica_leads_to_write_its_status_and_lets_go()
 {
    let cluster = SimCluster::start(CLUSTER).await;
    let drainer = TestDrainer::start(&cluster, "a", &["--release-lease-after", "1s"]);
    let requests = |key: &str| cluster.stats()["requests"][key].as_u64().unwrap_or(0);
    let policies = cluster.api::<RotationPolicy>();
    let status_where = |generation: i64, invalid: &'static str| {
        let policies = policies.clone();
        move || {
            let policies = policies.clone();
            async move {
                let status: RotationPolicyStatus = policies.get("batch").await.ok()?.status?;
                let condition = status.conditions.iter().find(|c| c.type_ == "Invalid")?;
                (status.observed_generation == Some(generation) && condition.status == invalid)
                    .then_some(status)
            }
        }
    };
    // Nothing tainted, no policy: the drainer only watches.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(requests("update leases") + requests("create leases"), 0);

    // A policy that cannot be followed (surge, which this drainer runs without): no node needs
    // rotor, yet its status is written, saying why.
    let surging: RotationPolicy = serde_json::from_value(json!({
        "apiVersion": "rotor.dev/v1alpha1",
        "kind": "RotationPolicy",
        "metadata": {"name": "batch"},
        "spec": {
            "nodeSelector": {"matchLabels": {"pool": "batch"}},
            "budgets": [{"nodes": "1"}],
            "drain": {"surge": true},
        },
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &surging)
        .await
        .expect("the simulator serves RotationPolicies");
    let status = wait_until("the invalid policy's status", WAIT, status_where(1, "True")).await;
    assert_eq!((status.nodes, status.out_of_date), (2, 0), "{status:?}");
    let invalid = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Invalid")
        .unwrap();
    assert!(invalid.message.contains("--surge"), "{invalid:?}");

    // Written and seen back, nothing needs a leader: the lease goes, and stays untouched.
    wait_until("the lease to be released", WAIT, || async {
        lease_holder(&cluster).await.is_none().then_some(())
    })
    .await;
    let (lease_writes, status_writes) = (
        requests("update leases"),
        requests("patch rotationpolicies/status"),
    );
    assert!(status_writes >= 1, "{}", cluster.stats());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        (
            requests("update leases"),
            requests("patch rotationpolicies/status")
        ),
        (lease_writes, status_writes),
        "requests once the status was up to date"
    );

    // Fixed while still nothing is tainted: written again, for the new generation.
    let fixed = json!({"spec": {"drain": null}});
    policies
        .patch("batch", &PatchParams::default(), &Patch::Merge(&fixed))
        .await
        .unwrap();
    wait_until("the fixed policy's status", WAIT, status_where(2, "False")).await;
    assert_eq!(cluster.stats()["budgetViolations"], 0);
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// An API server that has not synced its CRDs yet answers 404 for RotationPolicies: once the
/// drainer has listed them, that does not count as "not installed". The pool the policy closes
/// stays closed while the watch lists again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_policies_answer_404_after_they_were_listed_then_the_pool_stays_closed() {
    let cluster = SimCluster::start(CLUSTER).await;
    let (batch, _) = batch_and_general(&cluster).await;
    let policies = pause_the_batch_pool(&cluster).await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    cluster.taint(&batch[0], "manual").await;
    // Listed: the drainer writes the pool's status, with the tainted node out of date.
    wait_until("the pool's status", WAIT, || async {
        let status = policies.get("batch").await.ok()?.status?;
        (status.out_of_date == 1).then_some(())
    })
    .await;
    // Every watch is cut, and the policies' next requests answer 404 for a while.
    let requests =
        cluster.requests("list rotationpolicies") + cluster.requests("watch rotationpolicies");
    cluster
        .faults(json!({"errors": [
            {"resource": "rotationpolicies", "rate": 1.0, "code": 404, "times": 3},
        ]}))
        .await;
    cluster.admin_post("faults/drop-watches", None).await;
    wait_until(
        "the policies' watch to meet the 404s and list again",
        WAIT,
        || async {
            let now = cluster.requests("list rotationpolicies")
                + cluster.requests("watch rotationpolicies");
            (now >= requests + 4).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        cluster.phase(&batch[0]).await,
        None,
        "the paused pool's node started draining"
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}
