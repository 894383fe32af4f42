//! rotor-drainer against the simulated cluster over HTTP: given a cluster like this, when a node
//! is tainted (or something else happens), then the drainer does exactly that.

mod common;

use common::{SimCluster, TestDrainer, WAIT, is_daemon_or_mirror, lease_holder, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;
use std::time::{Duration, Instant};

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

/// The node's `rotor.dev/last-error` once its drain has failed.
async fn last_error_once_failed(cluster: &SimCluster, node: &str) -> String {
    cluster.wait_phase(node, "failed").await;
    cluster
        .annotation(node, "rotor.dev/last-error")
        .await
        .expect("a failed drain records its error")
}

/// [`CLUSTER`] with web's budget allowing no eviction: a drain that reaches a web pod blocks until
/// the budget is relaxed or the taint removed.
fn stuck_cluster() -> String {
    CLUSTER.replace("pdb: {minAvailable: 3}", "pdb: {minAvailable: 4}")
}

/// Taints a node hosting web pods of a [`stuck_cluster`] and waits until its drain blocks on
/// web's budget; returns the node.
async fn block_a_web_node(cluster: &SimCluster) -> String {
    let node = wait_until("a node hosting web pods", WAIT, || async {
        cluster.nodes_hosting("web-").await.into_iter().next()
    })
    .await;
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "blocked").await;
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_tainted_node_when_the_drainer_runs_then_it_is_drained_within_budgets_and_recorded()
{
    let cluster = SimCluster::start(CLUSTER).await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    let node = cluster.node_names().await[0].clone();
    cluster.taint(&node, "manual").await;

    cluster.wait_phase(&node, "drained").await;
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
async fn given_a_node_tainted_longer_ago_than_the_settle_time_then_it_is_drained_once_empty() {
    const SETTLE: Duration = Duration::from_secs(5);
    let cluster = SimCluster::start(CLUSTER).await;
    let drainer = TestDrainer::start(&cluster, "a", &["--settle", "5s"]);
    let names = cluster.node_names().await;
    let (old, fresh) = (names[0].clone(), names[1].clone());

    // Tainted while opted out: the taint grows older than --settle while the node waits.
    const OPT_OUT: &str = "rotor.dev/do-not-disrupt";
    cluster.annotate(&old, OPT_OUT, Some("true")).await;
    cluster.taint(&old, "manual").await;
    tokio::time::sleep(SETTLE + Duration::from_secs(1)).await;
    assert_eq!(cluster.phase(&old).await, None);
    let released = Instant::now();
    cluster.annotate(&old, OPT_OUT, None).await;
    cluster.wait_phase(&old, "drained").await;
    let took = released.elapsed();
    // Waiting --settle with the node empty would take at least SETTLE from here.
    assert!(
        took < SETTLE - Duration::from_secs(1),
        "a node whose taint is older than --settle is drained once empty, took {took:?}"
    );

    // A taint that has just arrived still holds the drained mark for the full settle time.
    let tainted = Instant::now();
    cluster.taint(&fresh, "manual").await;
    cluster.wait_phase(&fresh, "drained").await;
    let took = tainted.elapsed();
    assert!(
        took >= SETTLE,
        "a freshly tainted node waits --settle after its taint, took {took:?}"
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_taint_is_removed_mid_drain_then_rotor_uncordons_only_what_it_cordoned() {
    // A budget that allows nothing keeps the drain going until the taint is removed.
    let cluster = SimCluster::start(&stuck_cluster()).await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    let names = cluster.node_names().await;
    let busy = block_a_web_node(&cluster).await;
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
        cluster.phase(&other).await.map(|_| ())
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
        cluster.phase(&other).await.is_none().then_some(())
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
    let cluster = SimCluster::start(&yaml).await;
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
        let phase = cluster.phase(&node).await;
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
async fn given_park_blocked_after_then_a_node_held_by_an_opt_out_gives_its_slot_back_and_the_next_drains()
 {
    let yaml = format!(
        "{CLUSTER}  - {{kind: Pod, name: precious, namespace: shop, annotations: {{rotor.dev/do-not-disrupt: \"true\"}}}}\n"
    );
    let cluster = SimCluster::start(&yaml).await;
    // --max-unavailable 1 (the default): without parking, the blocked node would hold the
    // only slot until someone acts.
    let drainer = TestDrainer::start(&cluster, "a", &["--park-blocked-after", "2s"]);
    let stuck = wait_until("the precious pod to run", WAIT, || async {
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(cluster.client.clone(), "shop");
        pods.get("precious")
            .await
            .ok()
            .and_then(|p| p.spec.and_then(|s| s.node_name))
    })
    .await;
    cluster.taint(&stuck, "manual").await;
    cluster.wait_phase(&stuck, "blocked").await;
    let other = cluster
        .nodes_hosting("")
        .await
        .into_iter()
        .find(|n| *n != stuck)
        .expect("another node");
    cluster.taint(&other, "manual").await;
    cluster.wait_phase(&stuck, "parked").await;
    let node = cluster.node(&stuck).await;
    assert_ne!(
        node.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "a parked node is uncordoned"
    );
    assert!(
        cluster
            .taints(&stuck)
            .await
            .iter()
            .any(|t| t.starts_with("rotor.dev/drain")),
        "the taint stays"
    );
    let blocker = cluster
        .annotation(&stuck, "rotor.dev/blocker")
        .await
        .unwrap_or_default();
    assert!(blocker.contains("shop/precious"), "{blocker}");
    // Its slot is given back: the next node drains.
    cluster.wait_phase(&other, "drained").await;
    assert_eq!(
        cluster.phase(&stuck).await.as_deref(),
        Some("parked"),
        "the parked node waits for its back-off"
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_replicas_then_they_contend_only_for_work_one_acts_and_the_other_takes_over() {
    // web's budget allows no eviction, so a node hosting web stays blocked: work that lasts.
    let cluster = SimCluster::start(&stuck_cluster()).await;
    let flags = ["--release-lease-after", "1s"];
    let a = TestDrainer::start(&cluster, "replica-a", &flags);
    let b = TestDrainer::start(&cluster, "replica-b", &flags);
    let holder = || lease_holder(&cluster);
    let lease_requests = || {
        let requests = &cluster.stats()["requests"];
        ["get leases", "create leases", "update leases"]
            .iter()
            .map(|k| requests[k].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    // Idle: both replicas watch, neither asks for the lease.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(lease_requests(), 0, "idle replicas touched the Lease");
    assert_eq!(holder().await, None);

    // A node needs rotor: both contend, one wins and drains, the other follows.
    let node = block_a_web_node(&cluster).await;
    let first = holder().await.expect("a leader while the node is blocked");
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        holder().await.as_deref(),
        Some(first.as_str()),
        "one leader"
    );
    let (leader, follower, next) = if first == "replica-a" {
        (a, b, "replica-b")
    } else {
        (b, a, "replica-a")
    };

    // The leader stops: it hands the lease over, and the follower resumes the drain and
    // finishes it once the budget allows.
    leader.stop().await.unwrap();
    wait_until("the follower to take the lease", WAIT, || async {
        (holder().await.as_deref() == Some(next)).then_some(())
    })
    .await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), "shop");
    let relax = serde_json::json!({"spec": {"minAvailable": 3}});
    pdbs.patch("web", &PatchParams::default(), &Patch::Merge(&relax))
        .await
        .unwrap();
    cluster.wait_phase(&node, "drained").await;
    assert_eq!(holder().await.as_deref(), Some(next));

    // Nothing left to do: after --release-lease-after the leader lets the lease go, and then
    // touches it no more.
    wait_until("the lease to be released", WAIT, || async {
        holder().await.is_none().then_some(())
    })
    .await;
    let released = lease_requests();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        lease_requests(),
        released,
        "Lease requests after the release"
    );

    // New work: the replica that stood down contends again, leads a new term and drains.
    let other = cluster
        .node_names()
        .await
        .into_iter()
        .find(|n| *n != node)
        .unwrap();
    cluster.taint(&other, "manual").await;
    cluster.wait_phase(&other, "drained").await;
    assert_eq!(holder().await.as_deref(), Some(next));
    follower.stop().await.unwrap();
    cluster.stop().await;
}

/// Drainer "a" leading a drain its budget blocks, once the Lease's updates answer `code`
/// (`after_serving`: applied first), `times` times (`None`: always).
async fn leading_a_blocked_drain_when_renewals_answer(
    code: u16,
    after_serving: bool,
    times: Option<u32>,
) -> (SimCluster, TestDrainer, String) {
    let cluster = SimCluster::start(&stuck_cluster()).await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    let node = block_a_web_node(&cluster).await;
    cluster.sim.sim.faults.lock().unwrap().rules = vec![rotor_sim::server::ErrorRule {
        verb: Some("update".into()),
        resource: Some("leases".into()),
        rate: 1.0,
        code,
        after_serving,
        times,
    }];
    (cluster, drainer, node)
}

/// A leader whose renewals fail (the API server answers 503, which kube's client retries) stops
/// acting and exits on its own, within a few lease durations, rather than hanging in retries
/// while another replica could take the lease over. Its drain stays recorded for the next leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_leader_cannot_renew_its_lease_then_it_stops_and_exits() {
    let (cluster, drainer, node) =
        leading_a_blocked_drain_when_renewals_answer(503, false, None).await;
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), drainer.handle)
        .await
        .expect("the drainer exits once it cannot renew (lease 2 s)")
        .expect("drainer task");
    let error = ended.expect_err("losing the lease is an error").to_string();
    assert!(error.contains("lost the leader lease"), "{error}");
    cluster.sim.sim.faults.lock().unwrap().rules.clear();
    assert_eq!(cluster.phase(&node).await.as_deref(), Some("blocked"));
    cluster.stop().await;
}

/// A renewal the API server applied but answered 504 is resent by kube's client, and the resend
/// conflicts (409) with the write it resends. The leader still holds the lease: it reads the
/// lease again and goes on leading, rather than taking the conflict for a lost lease and exiting
/// mid-drain. An annotation put on the Lease by hand conflicts the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_renewal_applied_but_answered_504_then_the_leader_keeps_leading() {
    let (cluster, drainer, node) =
        leading_a_blocked_drain_when_renewals_answer(504, true, Some(1)).await;
    // Several lease durations (2 s in the tests) past the fault.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let requests = &cluster.stats()["requests"];
    assert!(
        !drainer.handle.is_finished(),
        "the leader exited after one renewal answered 504 (requests: {requests})"
    );
    assert_eq!(lease_holder(&cluster).await.as_deref(), Some("a"));
    assert_eq!(cluster.phase(&node).await.as_deref(), Some("blocked"));
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_closed_maintenance_window_then_no_drain_starts() {
    let cluster = SimCluster::start(CLUSTER).await;
    // A window that opens once a year, for a minute, on a date that is not today.
    let now = jiff::Zoned::now().with_time_zone(jiff::tz::TimeZone::UTC);
    let other_month = if now.month() == 1 { 6 } else { 1 };
    let window = format!("0 0 1 {other_month} * for 1m");
    let drainer = TestDrainer::start(&cluster, "a", &["--window", &window]);
    let node = cluster.node_names().await[0].clone();
    cluster.taint(&node, "manual").await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(cluster.phase(&node).await, None);
    assert_ne!(
        cluster.node(&node).await.spec.unwrap().unschedulable,
        Some(true)
    );
    assert!(
        cluster.stats()["evictions"]
            .as_object()
            .is_none_or(|e| e.is_empty())
    );
    // A node that can only wait for a window does not need a leader: nobody contends.
    let requests = &cluster.stats()["requests"];
    for verb in ["get", "create", "update"] {
        assert_eq!(
            requests[format!("{verb} leases")],
            Value::Null,
            "{requests}"
        );
    }
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// Two web pods per node, a budget that allows one disruption at a time.
const TIGHT: &str = r#"
timing: {tick: 50ms, nodeStartup: 500ms, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 1s, podShutdown: 200ms, bookmarkInterval: 1s}
namespaces: [rotor-system]
nodeGroups:
  - {name: g, size: 3, max: 6, template: {cpu: "4", memory: 16Gi, kubeletVersion: v1.32.9}}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 6, requests: {cpu: 100m}, startup: 1s, shutdown: 200ms, pdb: {minAvailable: 5}}
"#;

async fn node_with_most_web_pods(cluster: &SimCluster) -> (String, usize) {
    let mut best = (String::new(), 0);
    for n in cluster.node_names().await {
        let c = cluster
            .pods_on(&n)
            .await
            .iter()
            .filter(|p| p.metadata.name.as_deref().unwrap_or("").starts_with("web-"))
            .count();
        if c > best.1 {
            best = (n, c);
        }
    }
    best
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_budget_that_refuses_then_allows_then_the_drain_retries_as_soon_as_it_allows() {
    let cluster = SimCluster::start(TIGHT).await;
    // The slow backstop is a minute: finishing in seconds proves the retry follows the budget.
    let drainer = TestDrainer::start(&cluster, "a", &["--budget-recheck", "60s"]);
    let (node, web) = node_with_most_web_pods(&cluster).await;
    assert!(
        web >= 2,
        "the scenario puts at least two web pods on a node"
    );
    let started = std::time::Instant::now();
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "drained").await;
    let took = started.elapsed();
    let stats = cluster.stats();
    assert!(
        stats["evictions"]["budget"].as_u64().unwrap_or(0) >= 1,
        "the budget refused at least once: {stats}"
    );
    assert_eq!(stats["budgetViolations"], 0, "{stats}");
    assert!(
        took < std::time::Duration::from_secs(20),
        "retried on the budget's change, not the 60 s backstop: {took:?}"
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_drainer_restarts_mid_drain_then_it_resumes_with_the_same_deadline() {
    let cluster = SimCluster::start(&stuck_cluster()).await;
    let first = TestDrainer::start(&cluster, "a", &["--drain-timeout", "1h"]);
    let node = block_a_web_node(&cluster).await;
    let deadline = cluster
        .annotation(&node, "rotor.dev/deadline")
        .await
        .unwrap();
    let attempts = cluster.annotation(&node, "rotor.dev/attempts").await;
    first.stop().await.unwrap();
    // The stopped drainer left its state: still cordoned, still blocked.
    assert_eq!(
        cluster.node(&node).await.spec.unwrap().unschedulable,
        Some(true)
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let second = TestDrainer::start(&cluster, "b", &["--drain-timeout", "1h"]);
    wait_until("the second drainer to pick the node up", WAIT, || async {
        (lease_holder(&cluster).await.as_deref() == Some("b")).then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        cluster
            .annotation(&node, "rotor.dev/deadline")
            .await
            .as_deref(),
        Some(deadline.as_str()),
        "the deadline survives the restart"
    );
    assert_eq!(
        cluster.annotation(&node, "rotor.dev/attempts").await,
        attempts,
        "a resume is not a new attempt"
    );
    assert_eq!(cluster.phase(&node).await.as_deref(), Some("blocked"));
    second.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_budget_that_never_allows_when_the_deadline_passes_then_the_node_fails_or_is_forced()
 {
    let cluster = SimCluster::start(&stuck_cluster()).await;
    let web_nodes = cluster.nodes_hosting("web-").await;
    let node = web_nodes[0].clone();

    // Without --force-after: marked failed at the deadline, with the reason.
    let drainer = TestDrainer::start(&cluster, "a", &["--drain-timeout", "2s"]);
    cluster.taint(&node, "manual").await;
    let error = last_error_once_failed(&cluster, &node).await;
    assert!(error.contains("deadline"), "{error}");
    assert_eq!(
        cluster.stats()["requests"].get("delete pods"),
        None,
        "nothing is deleted without --force-after"
    );
    drainer.stop().await.unwrap();
    cluster.untaint(&node).await;

    // With --force-after: the budget-held pods are deleted with a UID precondition.
    let forced = TestDrainer::start(
        &cluster,
        "b",
        &["--drain-timeout", "20s", "--force-after", "2s"],
    );
    let other = web_nodes.get(1).cloned().unwrap_or(node.clone());
    wait_until("the first node to be cleaned up", WAIT, || async {
        cluster.phase(&node).await.is_none().then_some(())
    })
    .await;
    cluster.taint(&other, "manual").await;
    cluster.wait_phase(&other, "drained").await;
    let stats = cluster.stats();
    assert!(
        stats["requests"]["delete pods"].as_u64().unwrap_or(0) >= 1,
        "{stats}"
    );
    assert!(
        stats["budgetViolations"].as_u64().unwrap_or(0) >= 1,
        "forcing breaks the budget, and the simulator sees it: {stats}"
    );
    forced.stop().await.unwrap();
    cluster.stop().await;
}

/// Past a node's replace-by time (`--enforce-replace-by`) only a budget that can never allow is
/// gone past: pods whose budget allows one eviction at a time wait their turn, as before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_passed_replace_by_time_then_a_budget_that_will_allow_is_waited_for_not_forced() {
    // Six web pods on three nodes, one disruption at a time: a node with two or more evicts
    // the second only once the first's replacement is Ready.
    let yaml = CLUSTER
        .replace("replicas: 4", "replicas: 6")
        .replace("pdb: {minAvailable: 3}", "pdb: {maxUnavailable: 1}");
    let cluster = SimCluster::start(&yaml).await;
    let mut by_count = Vec::new();
    for node in cluster.nodes_hosting("web-").await {
        let web = cluster
            .pods_on(&node)
            .await
            .iter()
            .filter(|p| p.metadata.name.as_deref().unwrap_or("").starts_with("web-"))
            .count();
        by_count.push((web, node));
    }
    by_count.sort();
    let (web, node) = by_count.pop().expect("a node hosting web pods");
    assert!(web >= 2, "{by_count:?}");
    // Its replace-by time passed an hour ago.
    let past = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
    cluster
        .annotate(&node, "rotor.dev/replace-by", Some(&past.to_string()))
        .await;
    let drainer = TestDrainer::start(&cluster, "a", &["--enforce-replace-by"]);
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "drained").await;
    let stats = cluster.stats();
    assert_eq!(
        stats["requests"].get("delete pods"),
        None,
        "every web pod is evicted in its budget's turn: {stats}"
    );
    assert_eq!(stats["budgetViolations"], 0, "{stats}");
    assert!(
        stats["requests"]["create pods/eviction"]
            .as_u64()
            .unwrap_or(0)
            >= web as u64,
        "{stats}"
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_statefulset_pod_when_it_is_recreated_under_the_same_name_then_the_drain_does_not_chase_it()
 {
    let yaml = r#"
timing: {tick: 50ms, nodeStartup: 500ms, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 300ms, podShutdown: 200ms}
namespaces: [rotor-system]
nodeGroups:
  - {name: g, size: 2, max: 4, template: {cpu: "4", memory: 16Gi}}
workloads:
  - {kind: StatefulSet, name: db, namespace: shop, replicas: 2, startup: 300ms, shutdown: 200ms, pdb: {maxUnavailable: 1}}
"#;
    let cluster = SimCluster::start(yaml).await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(cluster.client.clone(), "shop");
    let db0 = pods.get("db-0").await.unwrap();
    let node = db0.spec.as_ref().unwrap().node_name.clone().unwrap();
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "drained").await;
    let again = wait_until("db-0 to come back elsewhere", WAIT, || async {
        let p = pods.get("db-0").await.ok()?;
        (p.metadata.uid != db0.metadata.uid && p.spec.as_ref()?.node_name.is_some()).then_some(p)
    })
    .await;
    assert_ne!(
        again.spec.unwrap().node_name.as_deref(),
        Some(node.as_str())
    );
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let now = pods.get("db-0").await.unwrap();
    assert_eq!(
        now.metadata.uid, again.metadata.uid,
        "the recreated db-0 is left alone"
    );
    assert!(now.metadata.deletion_timestamp.is_none());
    assert_eq!(cluster.stats()["budgetViolations"], 0);
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_pod_under_two_budgets_then_the_node_blocks_naming_both() {
    let yaml = format!(
        "{CLUSTER}  - {{kind: Deployment, name: api, namespace: shop, replicas: 1, labels: {{tier: front}}, pdb: {{maxUnavailable: 1}}}}\n"
    );
    let cluster = SimCluster::start(&yaml).await;
    // A second budget over the same pod, by a shared label.
    let extra: k8s_openapi::api::policy::v1::PodDisruptionBudget =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "front", "namespace": "shop"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"tier": "front"}}},
        }))
        .unwrap();
    kube::Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(
        cluster.client.clone(),
        "shop",
    )
    .create(&Default::default(), &extra)
    .await
    .unwrap();
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    let node = wait_until("the api pod to run", WAIT, || async {
        let pods = cluster.pods_labelled("shop", "app=api").await;
        pods.first()
            .and_then(|p| p.spec.as_ref()?.node_name.clone())
    })
    .await;
    cluster.taint(&node, "manual").await;
    let blocker = wait_until(
        "the node to block on the overlapping budgets",
        WAIT,
        || async {
            let b = cluster.annotation(&node, "rotor.dev/blocker").await?;
            b.contains("shop/front").then_some(b)
        },
    )
    .await;
    assert!(
        blocker.contains("shop/api") && blocker.contains("shop/front"),
        "{blocker}"
    );
    assert_eq!(cluster.phase(&node).await.as_deref(), Some("blocked"));
    let api = cluster.pods_labelled("shop", "app=api").await;
    assert!(
        api[0].metadata.deletion_timestamp.is_none(),
        "a pod under two budgets is not evicted"
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_refuse_emptydir_then_a_pod_with_scratch_data_blocks_the_node() {
    let yaml = format!(
        "{CLUSTER}  - {{kind: Deployment, name: cache, namespace: shop, replicas: 1, volumes: [emptyDir]}}\n"
    );
    let cluster = SimCluster::start(&yaml).await;
    let drainer = TestDrainer::start(&cluster, "a", &["--refuse-emptydir"]);
    let node = wait_until("the cache pod to run", WAIT, || async {
        let pods = cluster.pods_labelled("shop", "app=cache").await;
        pods.first()
            .and_then(|p| p.spec.as_ref()?.node_name.clone())
    })
    .await;
    cluster.taint(&node, "manual").await;
    let blocker = wait_until("the node to block on the emptyDir pod", WAIT, || async {
        let b = cluster.annotation(&node, "rotor.dev/blocker").await?;
        b.contains("cache").then_some(b)
    })
    .await;
    assert!(blocker.contains("emptyDir"), "{blocker}");
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// The gate: a pod the scheduler cannot place for longer than `--pending-grace` holds the next
/// drain (the cluster has not absorbed the previous node), and the drain starts as soon as the
/// pod is gone. A pod in an ignored namespace does not hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_pod_pending_past_the_grace_then_the_next_drain_waits_for_it() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams};

    let yaml = CLUSTER.replace("size: 3", "size: 4").replace(
        "namespaces: [rotor-system]",
        "namespaces: [rotor-system, batch]",
    );
    let cluster = SimCluster::start(&yaml).await;
    let drainer = TestDrainer::start(
        &cluster,
        "a",
        &["--pending-grace", "500ms", "--gate-timeout", "1h"],
    );
    let names = cluster.node_names().await;
    let (first, second) = (&names[0], &names[1]);
    cluster.taint(first, "manual").await;
    cluster.wait_phase(first, "drained").await;
    // A pod no node (nor the node group's template) can hold stays Pending for good.
    let too_big = |name: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "batch"},
            "spec": {"containers": [{"name": "c", "image": "x",
                     "resources": {"requests": {"cpu": "64"}}}]}
        }))
        .unwrap()
    };
    Api::<Pod>::namespaced(cluster.client.clone(), "batch")
        .create(&Default::default(), &too_big("too-big"))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    cluster.taint(second, "manual").await;

    // Held: the second node is not touched while the pod stays unschedulable.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(cluster.phase(second).await, None);
    assert_ne!(
        cluster.node(second).await.spec.unwrap().unschedulable,
        Some(true)
    );

    Api::<Pod>::namespaced(cluster.client.clone(), "batch")
        .delete("too-big", &DeleteParams::default())
        .await
        .unwrap();
    cluster.wait_phase(second, "drained").await;
    assert_eq!(cluster.stats()["budgetViolations"], 0);
    drainer.stop().await.unwrap();

    // With the namespace ignored, a new drainer drains two nodes in a row while a pod in it
    // stays unschedulable (its gate is armed from the start, and again by the first of them).
    Api::<Pod>::namespaced(cluster.client.clone(), "batch")
        .create(&Default::default(), &too_big("too-big-again"))
        .await
        .unwrap();
    let drainer = TestDrainer::start(
        &cluster,
        "b",
        &[
            "--pending-grace",
            "500ms",
            "--gate-timeout",
            "1h",
            "--gate-ignore-namespace",
            "batch",
        ],
    );
    cluster.taint(&names[2], "manual").await;
    cluster.wait_phase(&names[2], "drained").await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    cluster.taint(&names[3], "manual").await;
    cluster.wait_phase(&names[3], "drained").await;
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_pod_pending_past_the_grace_when_the_drainer_starts_then_even_its_first_drain_waits()
 {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams};

    // A new leader (a restart, a failover) does not know what the last drains evicted; the
    // cluster must still look settled before it starts another node.
    let yaml = format!(
        "{}  - {{kind: Pod, name: too-big, namespace: batch, requests: {{cpu: \"64\"}}}}\n",
        CLUSTER
    );
    let cluster = SimCluster::start(&yaml).await;
    let node = cluster.node_names().await[0].clone();
    cluster.taint(&node, "manual").await;
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let drainer = TestDrainer::start(
        &cluster,
        "a",
        &["--pending-grace", "500ms", "--gate-timeout", "1h"],
    );
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(cluster.phase(&node).await, None);
    Api::<Pod>::namespaced(cluster.client.clone(), "batch")
        .delete("too-big", &DeleteParams::default())
        .await
        .unwrap();
    cluster.wait_phase(&node, "drained").await;
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// With several drains at once the gate leaves budget-covered workloads to their budget: the
/// next node starts while the replacements of the previous node's web pods are still starting
/// (8 s here), where one drain at a time would wait for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_several_drains_at_once_then_the_gate_leaves_budgeted_workloads_to_their_budget() {
    let yaml = r#"
timing: {tick: 50ms, nodeStartup: 500ms, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 300ms, podShutdown: 200ms, bookmarkInterval: 1s}
namespaces: [rotor-system]
nodeGroups:
  - {name: g, size: 3, max: 6, template: {cpu: "4", memory: 16Gi, kubeletVersion: v1.32.9}}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 4, requests: {cpu: 100m}, startup: 8s, shutdown: 200ms, spreadMaxSkew: 1, pdb: {maxUnavailable: 2}}
"#;
    for (concurrency, waits) in [("1", true), ("2", false)] {
        let cluster = SimCluster::start(yaml).await;
        let drainer = TestDrainer::start(
            &cluster,
            "a",
            &["--max-concurrent", concurrency, "--max-unavailable", "2"],
        );
        let web = wait_until("web pods on a node", WAIT, || async {
            let hosts = cluster.nodes_hosting("web-").await;
            (!hosts.is_empty()).then_some(hosts)
        })
        .await;
        let names = cluster.node_names().await;
        let first = web[0].clone();
        let second = names.iter().find(|n| **n != first).unwrap().clone();
        cluster.taint(&first, "manual").await;
        cluster.wait_phase(&first, "drained").await;
        let drained_at = std::time::Instant::now();
        cluster.taint(&second, "manual").await;
        wait_until("the second drain to start", WAIT, || async {
            cluster.phase(&second).await
        })
        .await;
        let waited = drained_at.elapsed();
        if waits {
            assert!(
                waited >= std::time::Duration::from_secs(4),
                "C=1 waits for web to be Ready again: {waited:?}"
            );
        } else {
            assert!(
                waited < std::time::Duration::from_secs(4),
                "C=2 leaves web to its budget: {waited:?}"
            );
        }
        assert_eq!(cluster.stats()["budgetViolations"], 0);
        drainer.stop().await.unwrap();
        cluster.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_several_candidates_then_one_whose_budgets_let_it_drain_now_starts_first() {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::ListParams;

    let cluster = SimCluster::start(CLUSTER).await;
    // The drainer's default order: oldest first, then by name.
    let mut nodes: Vec<Node> = cluster
        .nodes()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    nodes.sort_by_key(|n| {
        (
            n.metadata.creation_timestamp.clone().map(|t| t.0),
            n.metadata.name.clone(),
        )
    });
    let first = nodes[0].metadata.name.clone().unwrap();
    let second = nodes[1].metadata.name.clone().unwrap();
    // A pod on the first node under a budget that can never allow its eviction: a drain of the
    // first node would block and hold the only drain slot.
    cluster
        .create_bare_pod("shop", "pinned", "pinned", &first)
        .await;
    cluster.create_budget("shop", "pinned", 1, 1).await;
    // Both tainted before the drainer starts, so it has a choice from its first pass.
    cluster.taint(&first, "manual").await;
    cluster.taint(&second, "manual").await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);

    cluster.wait_phase(&second, "drained").await;
    cluster.wait_phase(&first, "blocked").await;
    let drained_at = cluster
        .annotation(&second, "rotor.dev/drained-at")
        .await
        .unwrap();
    let started_at = cluster
        .annotation(&first, "rotor.dev/started-at")
        .await
        .unwrap();
    let ts = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
    assert!(
        ts(&started_at) >= ts(&drained_at),
        "the node that would block started only after the other drained: {started_at} < {drained_at}"
    );
    let blocker = cluster
        .annotation(&first, "rotor.dev/blocker")
        .await
        .unwrap();
    assert!(blocker.contains("shop/pinned"), "{blocker}");
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_every_watch_is_cut_and_its_history_compacted_mid_rotation_then_the_drainer_recovers()
{
    let cluster = SimCluster::start(CLUSTER).await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    let names = cluster.node_names().await;
    let (a, b) = (names[0].clone(), names[1].clone());
    cluster.taint(&a, "manual").await;
    cluster.taint(&b, "manual").await;
    let first = wait_until("one of the two nodes to be drained", WAIT, || async {
        for n in [&a, &b] {
            if cluster.phase(n).await.as_deref() == Some("drained") {
                return Some(n.clone());
            }
        }
        None
    })
    .await;
    let second = if first == a { b } else { a };
    // Every open watch (nodes, budgets, workloads, the pods of a drain) is cut, and the history
    // before the current revision is compacted away: each must open again (resuming, or
    // re-listing after a 410 Gone) and carry on.
    cluster.sim.sim.cluster.lock().unwrap().compact_all();
    cluster.sim.sim.drop_watches();
    cluster.wait_phase(&second, "drained").await;
    let resources = [
        "nodes",
        "poddisruptionbudgets",
        "deployments",
        "replicasets",
        "statefulsets",
    ];
    let stats = wait_until(
        "every watch of the drainer to be open again",
        WAIT,
        || async {
            let stats = cluster.stats();
            resources
                .iter()
                .all(|r| {
                    stats["requests"][format!("watch {r}")]
                        .as_u64()
                        .unwrap_or(0)
                        >= 2
                })
                .then_some(stats)
        },
    )
    .await;
    assert_eq!(stats["budgetViolations"], 0, "{stats}");
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// Two drain slots and a workload without a budget on a and b. a's drain evicts its pod first
/// and finishes while b's is still running: the next start (c) waits for a's replacement, and not
/// for b's, which b's own gate will wait for when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_several_drains_at_once_then_the_gate_waits_for_a_finished_drains_pods_not_a_running_ones()
 {
    let yaml = r#"
timing: {tick: 50ms, nodeStartup: 500ms, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 300ms, podShutdown: 200ms, bookmarkInterval: 1s}
namespaces: [rotor-system, shop]
nodeGroups:
  - {name: g, size: 4, max: 6, template: {cpu: "4", memory: 16Gi, kubeletVersion: v1.32.9}}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 2, requests: {cpu: 100m}, startup: 9s, shutdown: 200ms, spreadMaxSkew: 1}
"#;
    let cluster = SimCluster::start(yaml).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), "shop");
    let web_ready = || async {
        let d = deployments.get("web").await.unwrap();
        d.status.and_then(|s| s.ready_replicas).unwrap_or(0)
    };
    wait_until("web to be Ready", WAIT, || async {
        (web_ready().await == 2).then_some(())
    })
    .await;
    // web (no budget) has one pod on a and one on b; c holds none.
    let hosts = cluster.nodes_hosting("web-").await;
    assert_eq!(hosts.len(), 2, "{hosts:?}");
    let (a, b) = (hosts[0].clone(), hosts[1].clone());
    let names = cluster.node_names().await;
    let others: Vec<&String> = names.iter().filter(|n| !hosts.contains(n)).collect();
    let c = others[0].clone();
    // Replacements go to the fourth node only, so the nodes drained here keep the pods they
    // have.
    for node in [&a, &b, &c] {
        cluster.add_taint(node, "example.com/hold", "test").await;
    }
    // Slow pods keep a's drain going until after b's starts, and b's long after.
    let stop_in = |secs: &str| serde_json::json!({"sim.rotor.dev/shutdown": secs});
    cluster
        .create_bare_pod_with("shop", "slow-a", "slow", &a, stop_in("6s"))
        .await;
    cluster
        .create_bare_pod_with("shop", "slow-b", "slow", &b, stop_in("25s"))
        .await;
    let drainer = TestDrainer::start(
        &cluster,
        "d",
        &["--max-concurrent", "2", "--max-unavailable", "3"],
    );
    // a's web pod is evicted first, b's 4 s later: their replacements are Ready 9 s after each.
    cluster.taint(&a, "manual").await;
    wait_until("a to start", WAIT, || async { cluster.phase(&a).await }).await;
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    cluster.taint(&b, "manual").await;
    cluster.wait_phase(&a, "drained").await;
    assert_eq!(
        cluster.phase(&b).await.as_deref(),
        Some("evicting"),
        "b is still draining when a is done"
    );
    cluster.taint(&c, "manual").await;
    // c starts once a's replacement is Ready, and does not wait for b's: b, still draining,
    // accounts for that one.
    let ready_at_start = wait_until("c to start", WAIT, || async {
        let started = cluster.phase(&c).await.is_some();
        let ready = web_ready().await;
        started.then_some(ready)
    })
    .await;
    assert_eq!(
        ready_at_start, 1,
        "c started with web {ready_at_start}/2 Ready; it should start once a's replacement is back and b's is not yet"
    );
    assert_eq!(cluster.phase(&b).await.as_deref(), Some("evicting"));
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// Two drain slots and three candidates, oldest first: a and b each host a pod under budget x
/// (at least one of the two available; nothing recreates the pods, so it allows one eviction in
/// all), c a pod under budget y (none required). Scored all at once, a and b tie and are the
/// oldest; picked in turn, a claims x's one disruption, so the second slot goes to c rather than
/// to b, whose pod would queue behind a's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_free_slots_then_the_second_start_does_not_queue_on_the_first_ones_budget() {
    let yaml = r#"
timing: {tick: 50ms, nodeStartup: 500ms, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 300ms, podShutdown: 3s, bookmarkInterval: 1s}
namespaces: [rotor-system, shop]
nodeGroups:
  - {name: g, size: 3, max: 3, template: {cpu: "4", memory: 16Gi, kubeletVersion: v1.32.9}}
"#;
    let cluster = SimCluster::start(yaml).await;
    // The drainer's default order among nodes created together: by name.
    let names = cluster.node_names().await;
    let mut sorted = names.clone();
    sorted.sort();
    let (a, b, c) = (sorted[0].clone(), sorted[1].clone(), sorted[2].clone());
    for (name, node, app) in [("on-a", &a, "x"), ("on-b", &b, "x"), ("on-c", &c, "y")] {
        cluster.create_bare_pod("shop", name, app, node).await;
    }
    for (app, pods) in [("x", 2), ("y", 1)] {
        let status = cluster.create_budget("shop", app, pods - 1, pods).await;
        assert_eq!(status.disruptions_allowed, 1, "budget {app}: {status:?}");
    }
    // All tainted before the drainer starts, so its first pass chooses among all three.
    for node in [&a, &b, &c] {
        cluster.taint(node, "manual").await;
    }
    let drainer = TestDrainer::start(
        &cluster,
        "d",
        // b's wait on x below only needs time in the drainer's eyes (x is a budget that
        // allows one): shown after --blocked-after without an eviction.
        &[
            "--max-concurrent",
            "2",
            "--max-unavailable",
            "2",
            "--blocked-after",
            "1s",
        ],
    );

    // Pods take 3 s to stop, so a and c hold both slots for that long: once both have started,
    // b must not have (without the claims it starts beside a, and c waits for a slot).
    wait_until("a and c to start", WAIT, || async {
        let a_started = cluster.phase(&a).await.is_some();
        let c_started = cluster.phase(&c).await.is_some();
        (a_started && c_started).then_some(())
    })
    .await;
    let b_phase = cluster.phase(&b).await;
    assert_eq!(b_phase, None, "b started while a and c held both slots");
    cluster.wait_phase(&a, "drained").await;
    cluster.wait_phase(&c, "drained").await;
    // b's pod now waits on x for good (its one disruption went to a's pod, which nothing
    // replaces).
    cluster.wait_phase(&b, "blocked").await;
    let blocker = cluster.annotation(&b, "rotor.dev/blocker").await.unwrap();
    assert!(blocker.contains("shop/x"), "{blocker}");
    assert_eq!(cluster.stats()["budgetViolations"], 0);
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// `workers` unbudgeted pods on a group of `nodes` nodes of `cpu` CPUs, each eviction answered
/// after `latency`, the workers all Running (as a drain finds them) and the nodes returned.
async fn workers_cluster(
    nodes: usize,
    cpu: &str,
    workers: usize,
    latency: &str,
) -> (SimCluster, Vec<String>) {
    let yaml = format!(
        r#"
timing: {{tick: 50ms, nodeStartup: 500ms, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 300ms, podShutdown: 200ms, bookmarkInterval: 1s, evictionLatency: {latency}}}
namespaces: [rotor-system, batch]
nodeGroups:
  - {{name: g, size: {nodes}, max: 6, template: {{cpu: "{cpu}", memory: 64Gi, kubeletVersion: v1.32.9}}}}
workloads:
  - {{kind: Deployment, name: worker, namespace: batch, replicas: {workers}, requests: {{cpu: 100m}}, startup: 300ms, shutdown: 200ms}}
"#
    );
    let cluster = SimCluster::start(&yaml).await;
    let names = cluster.node_names().await;
    wait_until("every worker Running", WAIT, || async {
        let mut running = 0;
        for node in &names {
            running += cluster
                .pods_on(node)
                .await
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
        }
        (running == workers).then_some(())
    })
    .await;
    (cluster, names)
}

/// A node's pass sends all its evictions together, not a few at a time: with each eviction
/// taking a second to answer, the simulator sees all twelve of the node's pods evicted at once.
/// (Sent eight at a time, as before, the last four went out a round later, and the next drain
/// waited that much longer for their replacements.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_node_of_unbudgeted_pods_then_its_evictions_are_all_in_flight_at_once() {
    let (cluster, nodes) = workers_cluster(1, "4", 12, "1s").await;
    let node = &nodes[0];
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    cluster.taint(node, "manual").await;
    cluster.wait_phase(node, "drained").await;
    assert_evictions(
        &cluster,
        12,
        12,
        "every eviction of the node's pass on the wire at once",
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// Two drains whose passes together want 80 evictions on the wire: at most 64 are in flight at
/// once, all drains together (each is a connection of its own over HTTP/1.1), and the rest go
/// as places free. Each eviction takes 3 s to answer, so the two passes overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_drains_of_80_pods_then_at_most_64_evictions_are_in_flight() {
    let (cluster, nodes) = workers_cluster(2, "16", 80, "3s").await;
    let drainer = TestDrainer::start(
        &cluster,
        "a",
        &["--max-concurrent", "2", "--max-unavailable", "2"],
    );
    for node in &nodes {
        cluster.taint(node, "manual").await;
    }
    for node in &nodes {
        cluster.wait_phase(node, "drained").await;
    }
    assert_evictions(&cluster, 80, 64, "the wire's cap across drains");
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// The simulator sent `sent` evictions in all, at most `peak` of them in flight at once (`why`).
/// Without a budget it counts them as `bypass`, so the request count is the one to read.
fn assert_evictions(cluster: &SimCluster, sent: u64, peak: u64, why: &str) {
    let stats = cluster.stats();
    assert_eq!(stats["requests"]["create pods/eviction"], sent, "{stats}");
    assert_eq!(stats["evictionsInFlightPeak"], peak, "{why}: {stats}");
}

/// One node whose three `logged` pods share a budget that allows all three: one pass sends
/// their evictions, which go out one after another (one per budget on the wire at a time), each
/// answered after the simulator's 700 ms.
const ANSWERED_APART: &str = r#"
timing: {tick: 50ms, nodeStartup: 500ms, scaleUpDelay: 500ms, scaleDownDelay: 10m, podStartup: 300ms, podShutdown: 200ms, bookmarkInterval: 1s, evictionLatency: 700ms}
namespaces: [rotor-system]
nodeGroups:
  - {name: g, size: 1, max: 2, template: {cpu: "4", memory: 16Gi, kubeletVersion: v1.32.9}}
workloads:
  - {kind: Deployment, name: logged, namespace: logged, replicas: 3, requests: {cpu: 100m}, startup: 300ms, shutdown: 200ms, pdb: {maxUnavailable: 3}}
"#;

/// The pods of the drainer's `evicted` log lines, each with when it was logged, from every test
/// of this file (each test's pods have names of their own).
static EVICTED_LINES: std::sync::Mutex<Vec<(String, Instant)>> = std::sync::Mutex::new(Vec::new());

/// Keeps the drainer's `evicted` lines in [`EVICTED_LINES`] as they are emitted.
struct EvictedLines;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for EvictedLines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        #[derive(Default)]
        struct Line {
            message: String,
            pod: String,
        }
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                match field.name() {
                    "message" => self.message = format!("{value:?}"),
                    "pod" => self.pod = format!("{value:?}"),
                    _ => {}
                }
            }
        }
        let mut line = Line::default();
        event.record(&mut line);
        if line.message == "evicted" {
            EVICTED_LINES
                .lock()
                .unwrap()
                .push((line.pod, Instant::now()));
        }
    }
}

/// Installs [`EvictedLines`] for this test binary, once, for the drain's info lines only.
fn keep_evicted_lines() {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let only_the_pass = tracing_subscriber::filter::Targets::new()
            .with_target("rotor_drainer::drain::pass_io", tracing::Level::INFO);
        let subscriber =
            tracing_subscriber::registry().with(EvictedLines.with_filter(only_the_pass));
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other test of this file installs a subscriber");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_pass_whose_evictions_are_answered_apart_then_each_is_logged_as_it_is_answered() {
    keep_evicted_lines();
    let cluster = SimCluster::start(ANSWERED_APART).await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    let node = cluster.node_names().await[0].clone();
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "drained").await;

    let logged: Vec<Instant> = EVICTED_LINES
        .lock()
        .unwrap()
        .iter()
        .filter(|(pod, _)| pod.starts_with("logged/"))
        .map(|(_, at)| *at)
        .collect();
    assert_eq!(logged.len(), 3, "one line per evicted pod");
    // Answered about 0.7 s apart: logged when the pass had all three answers, the lines would
    // come within milliseconds of each other.
    let spread = logged[2].duration_since(logged[0]);
    assert!(
        spread >= Duration::from_millis(1000),
        "the three evictions were logged {spread:?} apart"
    );
    let stats = cluster.stats();
    assert_eq!(stats["budgetViolations"], 0, "{stats}");
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// A drain whose node's pods can no longer be listed (here, after a restart, every pod list
/// and watch fails, as with a 403 once the RBAC lost pods or a proxy that refuses watches) still
/// ends at its deadline, failed with the reason on the node, instead of showing `evicting` for
/// ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_pods_that_cannot_be_listed_when_the_deadline_passes_then_the_node_fails() {
    let cluster = SimCluster::start(&stuck_cluster()).await;
    let node = cluster.nodes_hosting("web-").await[0].clone();
    let flags = ["--drain-timeout", "6s"];
    let first = TestDrainer::start(&cluster, "a", &flags);
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "evicting").await;
    first.stop().await.unwrap();
    cluster
        .faults(serde_json::json!({"errors": [
            {"verb": "list", "resource": "pods", "rate": 1.0, "code": 500},
            {"verb": "watch", "resource": "pods", "rate": 1.0, "code": 500},
        ]}))
        .await;
    let second = TestDrainer::start(&cluster, "b", &flags);
    let error = last_error_once_failed(&cluster, &node).await;
    assert!(
        error.contains("before the node's pods could be listed"),
        "{error}"
    );
    second.stop().await.unwrap();
    cluster.stop().await;
}

/// A drain of a web node whose next `times` node writes fail with a 500, from the moment it
/// evicts: with [`CLUSTER`]'s budgets the next writes are its end's. Returns the cluster, the
/// node, the drainer and the node writes counted before.
async fn drain_failing_its_end_write(times: u32) -> (SimCluster, String, TestDrainer, u64) {
    let cluster = SimCluster::start(CLUSTER).await;
    let node = cluster.nodes_hosting("web-").await[0].clone();
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "evicting").await;
    let patched = cluster.requests("patch nodes");
    cluster
        .faults(serde_json::json!({"errors": [
            {"verb": "patch", "resource": "nodes", "rate": 1.0, "code": 500, "times": times},
        ]}))
        .await;
    (cluster, node, drainer, patched)
}

/// The write that records a drain's end fails twice (a restarting or throttled API server):
/// it is tried again until it lands, and the drain is not resumed and drained a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_end_write_fails_for_a_moment_then_it_lands_and_the_drain_is_not_resumed() {
    let (cluster, node, drainer, patched) = drain_failing_its_end_write(2).await;
    cluster.wait_phase(&node, "drained").await;
    assert!(
        cluster.requests("patch nodes") >= patched + 3,
        "the end write failed twice and then landed"
    );
    // Long enough for the fleet to have resumed the drain had it read the node as draining.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let reasons = event_reasons(&cluster, &node).await;
    assert!(reasons.iter().any(|r| r == "Drained"), "{reasons:?}");
    assert!(!reasons.iter().any(|r| r == "DrainResumed"), "{reasons:?}");
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// A taint removed and put back at once (say, to change its reason) does not wipe the drain:
/// the clean-up reads the node fresh, finds it tainted again, and leaves rotor's record and
/// cordon for the drain to resume, with no `DrainCancelled` Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_taint_is_put_back_before_the_clean_up_then_the_drain_is_resumed_not_wiped() {
    let cluster = SimCluster::start(&stuck_cluster()).await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    let node = block_a_web_node(&cluster).await;
    let started_at = cluster.annotation(&node, "rotor.dev/started-at").await;
    // The clean-up's read of the node waits 2 s; the taint changes in the simulator's store
    // directly, so this test's own steps wait for nothing.
    cluster
        .faults(serde_json::json!({"delays": [{"verb": "get", "resource": "nodes", "ms": 2000}]}))
        .await;
    let taint_of = |n: &k8s_openapi::api::core::v1::Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
    };
    let taints = taint_of(&cluster.node(&node).await);
    cluster.modify_node(&node, |n| {
        n.spec.as_mut().unwrap().taints = Some(vec![]);
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.modify_node(&node, |n| {
        n.spec.as_mut().unwrap().taints = Some(taints.clone());
    });
    // The clean-up has read the node (2 s), and the drain resumed.
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.faults(serde_json::json!({})).await;
    cluster.wait_phase(&node, "blocked").await;
    let reasons = event_reasons(&cluster, &node).await;
    assert!(
        !reasons.iter().any(|r| r == "DrainCancelled"),
        "{reasons:?}"
    );
    let after = cluster.node(&node).await;
    assert_eq!(after.spec.as_ref().unwrap().unschedulable, Some(true));
    assert_eq!(
        cluster.annotation(&node, "rotor.dev/started-at").await,
        started_at,
        "the same attempt goes on"
    );
    assert!(!taint_of(&after).is_empty());
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// The reasons of the Events about `node`, oldest first.
async fn event_reasons(cluster: &SimCluster, node: &str) -> Vec<String> {
    use k8s_openapi::api::events::v1::Event;
    let events: Api<Event> = Api::all(cluster.client.clone());
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node))
        .filter_map(|e| e.reason)
        .collect()
}

/// Rule: a blocker is announced once. While the node refuses the write that says the drain is
/// blocked (a webhook on nodes down), each pass tries it again without posting its Warning
/// again; once the write lands, the node shows the blocker, still with one Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_blocked_write_fails_then_the_blocker_is_announced_once() {
    let cluster = SimCluster::start(&stuck_cluster()).await;
    let node = wait_until("a node hosting web pods", WAIT, || async {
        cluster.nodes_hosting("web-").await.into_iter().next()
    })
    .await;
    let flags = ["--blocked-after", "1s", "--budget-recheck", "1s"];
    let drainer = TestDrainer::start(&cluster, "a", &flags);
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "evicting").await;
    let patched = cluster.requests("patch nodes");
    cluster.fail_requests("patch", "nodes", 500).await;
    wait_until("three tries of the blocked write", WAIT, || async {
        (cluster.requests("patch nodes") >= patched + 3).then_some(())
    })
    .await;
    cluster.faults(serde_json::json!({})).await;
    cluster.wait_phase(&node, "blocked").await;
    let reasons = event_reasons(&cluster, &node).await;
    let blocked = reasons.iter().filter(|r| *r == "DrainBlocked").count();
    assert_eq!(blocked, 1, "{reasons:?}");
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// The end write fails past its retries (a webhook on nodes down for a while): the drain is not
/// resumed nor drained again while the node shows it under way, and the leader writes the end
/// again later, so the node comes to show it drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_end_write_fails_past_its_retries_then_the_leader_writes_it_later() {
    // The drain's own write is tried five times in about 15 s: every one fails.
    let (cluster, node, drainer, patched) = drain_failing_its_end_write(5).await;
    wait_until(
        "the node to show the drain drained",
        Duration::from_secs(90),
        || async {
            let phase = cluster.phase(&node).await;
            (phase.as_deref() == Some("drained")).then_some(())
        },
    )
    .await;
    assert_eq!(
        cluster.requests("patch nodes"),
        patched + 6,
        "five failed tries of the drain's write, then the leader's"
    );
    let reasons = event_reasons(&cluster, &node).await;
    assert!(!reasons.iter().any(|r| r == "DrainResumed"), "{reasons:?}");
    assert_eq!(
        reasons.iter().filter(|r| *r == "Drained").count(),
        1,
        "{reasons:?}"
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// Rule: rotor undoes only a cordon it placed. A drain fails and leaves rotor's cordon; a person
/// uncordons the node during the back-off and another tool cordons it again: when the taint
/// goes, that cordon stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_rotors_cordon_undone_and_another_placed_when_the_taint_goes_then_the_other_stays() {
    let cluster = SimCluster::start(&stuck_cluster()).await;
    let node = cluster.nodes_hosting("web-").await[0].clone();
    let drainer = TestDrainer::start(&cluster, "a", &["--drain-timeout", "2s"]);
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "failed").await;
    let key = "rotor.dev/cordoned-by-rotor";
    assert_eq!(
        cluster.annotation(&node, key).await.as_deref(),
        Some("true")
    );
    let uncordon = serde_json::json!({"spec": {"unschedulable": false}});
    cluster
        .nodes()
        .patch(&node, &PatchParams::default(), &Patch::Merge(&uncordon))
        .await
        .unwrap();
    wait_until("rotor to forget its cordon", WAIT, || async {
        cluster.annotation(&node, key).await.is_none().then_some(())
    })
    .await;
    cluster.cordon(&node).await;
    cluster.untaint(&node).await;
    wait_until("rotor's drain state to be cleared", WAIT, || async {
        cluster.phase(&node).await.is_none().then_some(())
    })
    .await;
    let spec = cluster.node(&node).await.spec.unwrap_or_default();
    assert_eq!(
        spec.unschedulable,
        Some(true),
        "the other tool's cordon stays"
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// A start write the API refuses (here every node patch fails, as behind a failing admission
/// webhook) cannot be recorded on the node: the drainer logs it and tries again after the retry
/// back-off, not every second, nor at the next change of the node (a label, a kubelet status).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_node_the_drainer_cannot_patch_then_its_start_is_tried_again_after_the_back_off() {
    let cluster = SimCluster::start(CLUSTER).await;
    let node = cluster.node_names().await[0].clone();
    cluster.taint(&node, "manual").await;
    let tainted = cluster.requests("patch nodes");
    cluster.fail_requests("patch", "nodes", 500).await;
    let drainer = TestDrainer::start(&cluster, "a", &[]);
    wait_until("the drainer's start write", WAIT, || async {
        (cluster.requests("patch nodes") > tainted).then_some(())
    })
    .await;
    // The node changes, as nodes do: a new view of it, still without the drain's record.
    cluster.modify_node(&node, |n| {
        n.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("example.com/changed".into(), "yes".into());
    });
    // Five passes of the fleet's loop later, still the one refused write.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(cluster.requests("patch nodes"), tainted + 1);
    let spec = cluster.node(&node).await.spec.unwrap_or_default();
    assert_ne!(spec.unschedulable, Some(true), "nothing was written");
    assert_eq!(
        cluster.stats()["requests"].get("create pods/eviction"),
        None
    );
    drainer.stop().await.unwrap();
    cluster.stop().await;
}

/// Weighing the next starts may wait on the API server for a long time (here every read of pods
/// is held 60 s, as a starved API server holds a large read): a drain whose taint goes
/// meanwhile stops and gives its node back at once, and a shutdown ends the drainer, neither
/// waiting for the weighing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_next_starts_are_weighed_slowly_when_a_drains_taint_goes_then_it_stops_at_once() {
    let cluster = SimCluster::start(&stuck_cluster()).await;
    let drainer = TestDrainer::start(
        &cluster,
        "a",
        &["--max-concurrent", "2", "--max-unavailable", "3"],
    );
    let blocked = block_a_web_node(&cluster).await;
    assert_eq!(
        cluster.node(&blocked).await.spec.unwrap().unschedulable,
        Some(true)
    );
    let held = Duration::from_secs(60);
    cluster
        .faults(serde_json::json!({"delays": [
            {"verb": "list", "resource": "pods", "ms": held.as_millis()},
            {"verb": "watch", "resource": "pods", "ms": held.as_millis()},
        ]}))
        .await;
    // Two candidates for the one free slot: the choice reads their pods, and waits.
    let read_pods = || cluster.requests("list pods") + cluster.requests("watch pods");
    let before = read_pods();
    for node in cluster.node_names().await {
        if node != blocked {
            cluster.taint(&node, "manual").await;
        }
    }
    wait_until(
        "the choice to ask for the candidates' pods",
        WAIT,
        || async { (read_pods() > before).then_some(()) },
    )
    .await;
    let asked = Instant::now();
    cluster.untaint(&blocked).await;
    wait_until(
        "the drain to stop and uncordon its node while the reads are held",
        held / 3,
        || async {
            let node = cluster.node(&blocked).await;
            (node.spec.unwrap().unschedulable != Some(true)).then_some(())
        },
    )
    .await;
    // A shutdown while the reads are still held ends the drainer without waiting for them.
    assert!(asked.elapsed() < held / 2, "the reads are still held");
    let stopping = Instant::now();
    drainer.stop().await.unwrap();
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "stopped in {:?}, without waiting for the held reads",
        stopping.elapsed()
    );
    cluster.stop().await;
}
