//! rotor-drainer against the simulated cluster over HTTP: given a cluster like this, when a node
//! is tainted (or something else happens), then the drainer does exactly that.

mod common;

use common::{TestCluster, TestDrainer, WAIT, is_daemon_or_mirror, wait_until};

const CLUSTER: &str = r#"
timing: {tick: 50ms, nodeStartup: 500ms, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 300ms, podShutdown: 200ms, bookmarkInterval: 1s}
namespaces: [rotor-system]
nodeGroups:
  - {name: g, size: 3, max: 6, template: {cpu: "4", memory: 16Gi, kubeletVersion: v1.32.9}}
staticPods: [{name: kube-proxy}]
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 4, requests: {cpu: 100m}, startup: 300ms, shutdown: 200ms, pdb: {minAvailable: 3}}
  - {kind: StatefulSet, name: db, namespace: shop, replicas: 2, startup: 300ms, shutdown: 200ms, pdb: {maxUnavailable: 1}}
  - {kind: DaemonSet, name: agent, namespace: kube-system}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_tainted_node_when_the_drainer_runs_then_it_is_drained_within_budgets_and_recorded()
{
    let cluster = TestCluster::start(CLUSTER).await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    let node = cluster.node_names().await[0].clone();
    cluster.taint(&node, "manual").await;

    wait_until("the node to be marked drained", WAIT, || async {
        (cluster
            .annotation(&node, "rotor.dev/phase")
            .await
            .as_deref()
            == Some("drained"))
        .then_some(())
    })
    .await;
    let n = cluster.node(&node).await;
    assert_eq!(
        n.spec.as_ref().unwrap().unschedulable,
        Some(true),
        "a drained node stays cordoned"
    );
    let ann = n.metadata.annotations.clone().unwrap();
    assert_eq!(
        ann.get("rotor.dev/cordoned-by-rotor").map(String::as_str),
        Some("true")
    );
    assert!(ann.contains_key("rotor.dev/drained-at") && ann.contains_key("rotor.dev/started-at"));
    assert!(
        n.spec
            .as_ref()
            .unwrap()
            .taints
            .iter()
            .flatten()
            .any(|t| t.key == "rotor.dev/drain"),
        "the taint stays for retirement"
    );
    let left = cluster.pods_on(&node).await;
    assert!(
        !left.is_empty() && left.iter().all(is_daemon_or_mirror),
        "only DaemonSet and mirror pods remain: {:?}",
        left.iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let stats = cluster.stats();
    assert_eq!(stats["budgetViolations"], 0, "{stats}");
    assert!(
        stats["evictions"]["success"].as_u64().unwrap_or(0) >= 1,
        "{stats}"
    );
    assert!(
        stats["requests"].get("delete pods").is_none(),
        "pods are evicted, never deleted: {stats}"
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_taint_is_removed_mid_drain_then_rotor_uncordons_only_what_it_cordoned() {
    // A budget that allows nothing keeps the drain going until the taint is removed.
    let yaml = CLUSTER.replace("pdb: {minAvailable: 3}", "pdb: {minAvailable: 4}");
    let cluster = TestCluster::start(&yaml).await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    let names = cluster.node_names().await;
    let busy = wait_until("a node hosting web pods", WAIT, || async {
        for n in &names {
            if cluster
                .pods_on(n)
                .await
                .iter()
                .any(|p| p.metadata.name.as_deref().unwrap_or("").starts_with("web-"))
            {
                return Some(n.clone());
            }
        }
        None
    })
    .await;
    cluster.taint(&busy, "manual").await;
    wait_until("the drain to be blocked by the budget", WAIT, || async {
        (cluster
            .annotation(&busy, "rotor.dev/phase")
            .await
            .as_deref()
            == Some("blocked"))
        .then_some(())
    })
    .await;
    let blocker = cluster
        .annotation(&busy, "rotor.dev/blocker")
        .await
        .unwrap();
    // minAvailable 4 of 4 replicas can never allow an eviction: said at once, naming the budget.
    assert!(
        blocker.contains("shop/web") && blocker.contains("never allow"),
        "{blocker}"
    );
    cluster.untaint(&busy).await;
    wait_until("rotor to undo its cordon and annotations", WAIT, || async {
        let n = cluster.node(&busy).await;
        let clean = n
            .metadata
            .annotations
            .as_ref()
            .is_none_or(|a| !a.keys().any(|k| k.starts_with("rotor.dev/")));
        (clean && n.spec.as_ref().unwrap().unschedulable != Some(true)).then_some(())
    })
    .await;

    // A node someone else cordoned stays cordoned after its taint comes and goes.
    let other = names.iter().find(|n| **n != busy).unwrap().clone();
    cluster.cordon(&other).await;
    cluster.taint(&other, "manual").await;
    wait_until("the second drain to start", WAIT, || async {
        cluster
            .annotation(&other, "rotor.dev/phase")
            .await
            .map(|_| ())
    })
    .await;
    assert_eq!(
        cluster
            .annotation(&other, "rotor.dev/cordoned-by-rotor")
            .await,
        None
    );
    cluster.untaint(&other).await;
    wait_until("rotor to clear its annotations", WAIT, || async {
        cluster
            .annotation(&other, "rotor.dev/phase")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        cluster.node(&other).await.spec.unwrap().unschedulable,
        Some(true),
        "a cordon rotor did not place is never undone"
    );
    assert_eq!(cluster.stats()["budgetViolations"], 0);
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_do_not_disrupt_pod_then_the_node_blocks_and_names_it() {
    let yaml = format!(
        "{CLUSTER}  - {{kind: Pod, name: precious, namespace: shop, annotations: {{karpenter.sh/do-not-disrupt: \"true\"}}}}\n"
    );
    let cluster = TestCluster::start(&yaml).await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    let node = wait_until("the precious pod to run", WAIT, || async {
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(cluster.client.clone(), "shop");
        pods.get("precious")
            .await
            .ok()
            .and_then(|p| p.spec.and_then(|s| s.node_name))
    })
    .await;
    cluster.taint(&node, "manual").await;
    let blocker = wait_until("the node to block on the pod", WAIT, || async {
        let phase = cluster.annotation(&node, "rotor.dev/phase").await;
        let other_pods_gone = cluster
            .pods_on(&node)
            .await
            .iter()
            .all(|p| is_daemon_or_mirror(p) || p.metadata.name.as_deref() == Some("precious"));
        if phase.as_deref() == Some("blocked") && other_pods_gone {
            cluster.annotation(&node, "rotor.dev/blocker").await
        } else {
            None
        }
    })
    .await;
    assert!(
        blocker.contains("shop/precious") && blocker.contains("karpenter.sh/do-not-disrupt"),
        "{blocker}"
    );
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(cluster.client.clone(), "shop");
    assert!(
        pods.get("precious")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none(),
        "a do-not-disrupt pod is never evicted"
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_replicas_then_only_the_leader_acts_and_the_other_takes_over() {
    let cluster = TestCluster::start(CLUSTER).await;
    let a = TestDrainer::start(&cluster, "replica-a", &[]);
    let holder = wait_until("a leader", WAIT, || async {
        let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(cluster.client.clone(), "rotor-system");
        leases
            .get_opt("rotor-drainer")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec.and_then(|s| s.holder_identity))
    })
    .await;
    assert_eq!(holder, "replica-a");
    let b = TestDrainer::start(&cluster, "replica-b", &[]);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(cluster.client.clone(), "rotor-system");
    let spec = leases.get("rotor-drainer").await.unwrap().spec.unwrap();
    assert_eq!(
        spec.holder_identity.as_deref(),
        Some("replica-a"),
        "the second replica follows"
    );
    // The leader stops: it hands the lease over and the follower drains.
    a.stop().await.unwrap();
    let node = cluster.node_names().await[1].clone();
    cluster.taint(&node, "manual").await;
    wait_until("the follower to take over and drain", WAIT, || async {
        (cluster
            .annotation(&node, "rotor.dev/phase")
            .await
            .as_deref()
            == Some("drained"))
        .then_some(())
    })
    .await;
    let spec = leases.get("rotor-drainer").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-b"));
    b.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_closed_maintenance_window_then_no_drain_starts() {
    let cluster = TestCluster::start(CLUSTER).await;
    // A window that opens once a year, for a minute, on a date that is not today.
    let now = jiff::Zoned::now().with_time_zone(jiff::tz::TimeZone::UTC);
    let other_month = if now.month() == 1 { 6 } else { 1 };
    let window = format!("0 0 1 {other_month} * for 1m");
    let drainer = TestDrainer::start(&cluster, "a", &["--window", &window]);
    let node = cluster.node_names().await[0].clone();
    cluster.taint(&node, "manual").await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(cluster.annotation(&node, "rotor.dev/phase").await, None);
    assert_ne!(
        cluster.node(&node).await.spec.unwrap().unschedulable,
        Some(true)
    );
    assert!(
        cluster.stats()["evictions"]
            .as_object()
            .is_none_or(|e| e.is_empty())
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}
