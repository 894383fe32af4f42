//! rotor-drainer's `--surge` against the simulated cluster, whose scheduler honours pod priority
//! and preempts, and whose autoscaler adds nodes for pending pods (not for pods below the
//! expendable cut-off, nor for pods a preemption makes room for). The same behaviour on the
//! real control plane is in `tests/tests/real_surge.rs`.

mod common;

use common::{SimCluster, TestDrainer, WAIT, metric, wait_until};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::PostParams;
use rotor_apimachinery::conditions::pod_is_ready;
use rotor_drainer::drain::pods::is_bound;
use serde_json::json;

/// Two 2-CPU nodes full of `web` (four 450m pods each): a drained node's pods fit nowhere else
/// until the group scales up, which takes a second's delay and a second's boot.
const FULL: &str = r#"
timing: {tick: 50ms, nodeStartup: 1s, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 200ms, podShutdown: 100ms, bookmarkInterval: 1s}
namespaces: [rotor-system]
nodeGroups:
  - {name: g, size: 2, max: 4, template: {cpu: "2", memory: 8Gi, kubeletVersion: v1.32.9}}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 8, requests: {cpu: 450m}, startup: 200ms, shutdown: 100ms, pdb: {maxUnavailable: 1}}
"#;

const PLACEHOLDERS: &str = "rotor.dev/surge-for,app.kubernetes.io/managed-by=rotor-drainer";

fn is_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && pod_is_ready(pod)
}

/// The nodes whose placeholders exist now.
async fn holding_placeholders(cluster: &SimCluster) -> std::collections::BTreeSet<String> {
    cluster
        .pods_labelled("rotor-system", PLACEHOLDERS)
        .await
        .iter()
        .filter_map(|p| {
            p.metadata
                .labels
                .as_ref()?
                .get("rotor.dev/surge-for")
                .cloned()
        })
        .collect()
}

/// Every 50 ms until all `nodes` are drained (at most twice [`WAIT`]), hands `sample` the nodes
/// holding placeholders and each node's `rotor.dev/phase`.
async fn sample_until_drained(
    cluster: &SimCluster,
    nodes: &[String],
    mut sample: impl FnMut(&std::collections::BTreeSet<String>, &[Option<String>]),
) {
    let deadline = std::time::Instant::now() + WAIT * 2;
    loop {
        let holding = holding_placeholders(cluster).await;
        let mut phases = Vec::new();
        for n in nodes {
            phases.push(cluster.phase(n).await);
        }
        sample(&holding, &phases);
        if phases.iter().all(|p| p.as_deref() == Some("drained")) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "all nodes drained in time"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Waits until all eight `web` pods are Ready again.
async fn web_whole(cluster: &SimCluster) {
    wait_until("web to be whole again", WAIT, || async {
        let ready = cluster
            .pods_labelled("shop", "app=web")
            .await
            .into_iter()
            .filter(is_ready)
            .count();
        (ready == 8).then_some(())
    })
    .await;
}

async fn create_surge_class(cluster: &SimCluster) {
    let class: PriorityClass = serde_json::from_value(json!({
        "metadata": {"name": "rotor-surge"},
        "value": -5,
        "preemptionPolicy": "Never",
        "globalDefault": false
    }))
    .unwrap();
    cluster
        .api::<PriorityClass>()
        .create(&PostParams::default(), &class)
        .await
        .expect("create the PriorityClass");
}

/// Drains one node of [`FULL`] with `flags`; returns the simulator's counters afterwards, the
/// cluster and the node.
async fn drain_one(flags: &[&str]) -> (serde_json::Value, SimCluster, String) {
    let cluster = SimCluster::start(FULL).await;
    create_surge_class(&cluster).await;
    let drainer = TestDrainer::start(&cluster, "s", flags);
    let node = cluster.nodes_hosting("web-").await[0].clone();
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "drained").await;
    web_whole(&cluster).await;
    drainer.stop().await.expect("the drainer stops cleanly");
    (cluster.stats(), cluster, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_surge_the_evicted_pods_never_wait_for_a_node_and_no_placeholder_is_left() {
    let (without, _, drained) = drain_one(&[]).await;
    let (with, cluster, node) = drain_one(&["--surge", "--surge-timeout", "30s"]).await;
    eprintln!(
        "unschedulable pod-seconds: without surge {}, with surge {}",
        without["unschedulablePodSeconds"], with["unschedulablePodSeconds"]
    );
    // Without surge each evicted pod waits for the scale-up (its delay and the node's boot);
    // with it the room is there before the first eviction.
    let waited = |stats: &serde_json::Value| stats["unschedulablePodSeconds"].as_f64().unwrap();
    assert!(waited(&without) >= 1.0, "{without}");
    assert!(waited(&with) < 0.5, "{with}");
    for stats in [&without, &with] {
        assert_eq!(stats["budgetViolations"], 0, "{stats}");
    }
    // One node added in both cases: for the evicted pods, or for the placeholders.
    for stats in [&without, &with] {
        assert_eq!(stats["nodeGroups"]["g"]["desired"], 3, "{stats}");
    }
    // The four pods' placeholders, made by one set, and no more; removed (set and pods) just
    // before the first eviction, so no replacement had to preempt one.
    let created = |stats: &serde_json::Value| stats["podsCreated"].as_u64().unwrap();
    assert_eq!(created(&with) - created(&without), 4, "{without}\n{with}");
    assert_eq!(with["podsPreempted"], 0, "{with}");
    // The node's pods are read twice with surge as without: the test's own list when it
    // picked the node, and the drain's watch; the surge step makes room for the pods that
    // watch listed.
    assert_eq!(without["nodePodReads"][&drained], 2, "{without}");
    assert_eq!(with["nodePodReads"][&node], 2, "{with}");
    // The set costs a create (no room was made ahead, so none is tried as an update first) and
    // the scale to zero before the evictions.
    assert_eq!(with["requests"]["create replicasets"], 1, "{with}");
    assert_eq!(with["requests"]["patch replicasets"], 1, "{with}");
    assert_no_sets_left(&cluster).await;
    wait_until("the placeholders to be gone", WAIT, || async {
        cluster
            .pods_labelled("rotor-system", PLACEHOLDERS)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_naming_an_unknown_priority_class_is_refused_and_the_drain_goes_on() {
    let cluster = SimCluster::start(FULL).await;
    // No PriorityClass: the drainer refuses to start with --surge.
    let refused = TestDrainer::start(&cluster, "r", &["--surge"]);
    let err = refused.handle.await.unwrap().expect_err("no PriorityClass");
    assert!(
        err.to_string()
            .contains("--surge needs the PriorityClass rotor-surge"),
        "{err}"
    );
    // The simulator refuses a pod naming an unknown class, as the Priority admission plugin does.
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "rotor-system"},
        "spec": {"priorityClassName": "missing", "containers": [{"name": "c", "image": "x"}]}
    }))
    .unwrap();
    let err = cluster
        .pods("rotor-system")
        .create(&PostParams::default(), &pod)
        .await
        .expect_err("an unknown class is refused");
    assert!(
        err.to_string()
            .contains("no PriorityClass with name missing was found"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_surge_lets_only_that_many_nodes_hold_placeholders_at_once() {
    let cluster = SimCluster::start(FULL).await;
    create_surge_class(&cluster).await;
    let drainer = TestDrainer::start(
        &cluster,
        "m",
        &[
            "--surge",
            "--max-surge",
            "1",
            "--max-concurrent",
            "2",
            "--max-unavailable",
            "2",
        ],
    );
    let nodes = cluster.nodes_hosting("web-").await;
    assert_eq!(nodes.len(), 2);
    for node in &nodes {
        cluster.taint(node, "manual").await;
    }
    // Sample which nodes hold placeholders until both are drained.
    let mut most = 0;
    let mut seen = std::collections::BTreeSet::new();
    sample_until_drained(&cluster, &nodes, |holding, _| {
        most = most.max(holding.len());
        seen.extend(holding.iter().cloned());
    })
    .await;
    drainer.stop().await.expect("the drainer stops cleanly");
    assert_eq!(most, 1, "at most one node held placeholders at a time");
    assert_eq!(
        seen.len(),
        2,
        "both nodes surged, one after the other: {seen:?}"
    );
    assert_eq!(cluster.stats()["budgetViolations"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_node_in_line_gets_its_room_while_the_one_before_drains() {
    let cluster = SimCluster::start(FULL).await;
    create_surge_class(&cluster).await;
    let drainer = TestDrainer::start(&cluster, "a", &["--surge", "--max-concurrent", "1"]);
    let nodes = cluster.nodes_hosting("web-").await;
    assert_eq!(nodes.len(), 2);
    for node in &nodes {
        cluster.taint(node, "manual").await;
    }
    // Sample: whose placeholders exist while that node's drain has not started yet.
    let mut ahead = std::collections::BTreeSet::new();
    sample_until_drained(&cluster, &nodes, |holding, phases| {
        for (n, phase) in nodes.iter().zip(phases) {
            if holding.contains(n) && phase.is_none() {
                ahead.insert(n.clone());
            }
        }
    })
    .await;
    drainer.stop().await.expect("the drainer stops cleanly");
    assert_eq!(
        ahead.len(),
        1,
        "the second node had placeholders before its drain started: {ahead:?}"
    );
    let stats = cluster.stats();
    assert_eq!(stats["budgetViolations"], 0, "{stats}");
    eprintln!(
        "two nodes in line: unschedulable pod-seconds {}",
        stats["unschedulablePodSeconds"]
    );
    wait_until("the placeholders to be gone", WAIT, || async {
        cluster
            .pods_labelled("rotor-system", PLACEHOLDERS)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
}

/// Room made ahead for the next node whose creation the API server holds (here 60 s, as kube
/// retries a create shed with 429 or 503 for minutes) holds up only that node: the drain under
/// way frees its own room and drains meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_making_of_room_ahead_does_not_hold_up_the_drain_under_way() {
    let cluster = SimCluster::start(FULL).await;
    create_surge_class(&cluster).await;
    let drainer = TestDrainer::start(&cluster, "s", &["--surge", "--max-concurrent", "1"]);
    let nodes = cluster.nodes_hosting("web-").await;
    for node in &nodes {
        cluster.taint(node, "manual").await;
    }
    // The first drain's set is made; from now on every create of a set is held.
    wait_until("the first drain's placeholder set", WAIT, || async {
        (cluster.requests("create replicasets") >= 1).then_some(())
    })
    .await;
    cluster
        .faults(json!({"delays": [
            {"verb": "create", "resource": "replicasets", "ms": 60_000},
        ]}))
        .await;
    let first = wait_until("a drain to be under way", WAIT, || async {
        for node in &nodes {
            if cluster.phase(node).await.is_some() {
                return Some(node.clone());
            }
        }
        None
    })
    .await;
    wait_until(
        "the drain under way to end while the next node's room is being made",
        std::time::Duration::from_secs(25),
        || async {
            let phase = cluster.phase(&first).await;
            (phase.as_deref() == Some("drained")).then_some(())
        },
    )
    .await;
    assert!(
        cluster.requests("create replicasets") >= 2,
        "the room ahead's create was asked for (and held) during the drain: {}",
        cluster.stats()
    );
    cluster.faults(json!({})).await;
    drainer.stop().await.expect("the drainer stops cleanly");
    assert_eq!(cluster.stats()["budgetViolations"], 0);
}

/// Two 2-CPU nodes of `web` pods (450m each, six in all), and no node can be added: beside a
/// node's pods the other has room for one more, not for two.
const PACKED: &str = r#"
timing: {tick: 50ms, nodeStartup: 1s, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 200ms, podShutdown: 100ms, bookmarkInterval: 1s}
namespaces: [rotor-system]
nodeGroups:
  - {name: g, size: 2, max: 2, template: {cpu: "2", memory: 8Gi, kubeletVersion: v1.32.9}}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 6, requests: {cpu: 450m}, startup: 200ms, shutdown: 100ms}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_the_scheduler_preempts_is_counted_in_the_drainers_metrics() {
    let cluster = SimCluster::start(PACKED).await;
    create_surge_class(&cluster).await;
    let (drainer, admin) =
        TestDrainer::start_serving(&cluster, "p", &["--surge", "--surge-timeout", "1s"]).await;
    // The node with the most `web` pods: the other has room for at least one placeholder.
    let mut hosting = std::collections::BTreeMap::<String, usize>::new();
    for pod in cluster.pods_labelled("shop", "app=web").await {
        let node = pod
            .spec
            .and_then(|s| s.node_name)
            .expect("web is scheduled");
        *hosting.entry(node).or_default() += 1;
    }
    let (node, _) = hosting
        .into_iter()
        .max_by_key(|(_, pods)| *pods)
        .expect("web runs");
    const SERIES: &str = "rotor_drainer_surge_placeholders_preempted_total";
    let before = wait_until("the drainer to serve /metrics", WAIT, || {
        metric(admin, SERIES)
    })
    .await;
    assert_eq!(before, 0.0, "none preempted before any drain");
    // Some placeholders find room, the others wait; after --surge-timeout the drain evicts with
    // them standing, and the replacements preempt those that hold room.
    cluster.taint(&node, "manual").await;
    let counted = wait_until("a preempted placeholder to be counted", WAIT, || async {
        metric(admin, SERIES).await.filter(|n| *n >= 1.0)
    })
    .await;
    // Every placeholder the simulated scheduler preempted, once each (only placeholders are
    // ever preempted here: every other pod has the same priority).
    let stats = cluster.stats();
    assert_eq!(Some(counted), stats["podsPreempted"].as_f64(), "{stats}");
    drainer.stop().await.expect("the drainer stops cleanly");
}

/// A new leader sweeps placeholders beside its first drains and the room it makes ahead, so the
/// sweep may list a set made a moment ago: it spares the room this drainer holds, and takes the
/// room an earlier term made ahead (which the new term's machine no longer counts as made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_spares_room_made_ahead_in_this_term_and_takes_an_earlier_terms() {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use prometheus_client::metrics::gauge::Gauge;
    use rotor_drainer::drain::pods::DrainOptions;
    use rotor_drainer::drain::surge::SurgeConfig;
    use rotor_drainer::drain::surge_io::{SurgeRoom, reserve_ahead};

    let cluster = SimCluster::start(FULL).await;
    create_surge_class(&cluster).await;
    let cfg = SurgeConfig {
        namespace: "rotor-system".into(),
        priority_class: "rotor-surge".into(),
        image: "registry.k8s.io/pause:3.10".into(),
        timeout: std::time::Duration::from_secs(30),
        max_surge: None,
    };
    let holding = Gauge::default();
    let client = kube::Client::try_from(cluster.config()).expect("a client for the simulator");
    let room = SurgeRoom::new(client, cfg, DrainOptions::default(), holding.clone());
    let node = cluster.nodes_hosting("web-").await[0].clone();
    cluster.taint(&node, "manual").await;
    let sets = || async {
        cluster
            .ns::<ReplicaSet>("rotor-system")
            .list(&Default::default())
            .await
            .expect("list the placeholder sets")
            .items
            .len()
    };

    room.want_ahead(&node);
    reserve_ahead(&room, &node).await;
    assert_eq!(sets().await, 1, "room made ahead: one set for the web pods");
    assert_eq!(holding.get(), 1);

    room.sweep().await;
    assert_eq!(
        sets().await,
        1,
        "the sweep spared this term's room made ahead"
    );
    assert_eq!(holding.get(), 1);

    room.new_term().await;
    assert_eq!(holding.get(), 0, "the earlier term's slot went back");
    room.sweep().await;
    assert_eq!(
        sets().await,
        0,
        "the sweep took the earlier term's room made ahead"
    );
}

/// Group `g` (general nodes, one more can be added) runs `web`; group `solo` (one node, never
/// more) runs `solo`, which only a `solo` node takes: once that node is drained, its pod's
/// placeholder stays pending.
const ONE_NEVER_PLACED: &str = r#"
timing: {tick: 50ms, nodeStartup: 1s, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 200ms, podShutdown: 100ms, bookmarkInterval: 1s}
namespaces: [rotor-system]
nodeGroups:
  - {name: g, size: 1, max: 2, template: {cpu: "2", memory: 8Gi, kubeletVersion: v1.32.9, labels: {tier: general}}}
  - {name: solo, size: 1, max: 1, template: {cpu: "2", memory: 8Gi, kubeletVersion: v1.32.9, labels: {tier: solo}}}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 4, requests: {cpu: 450m}, startup: 200ms, shutdown: 100ms, nodeSelector: {tier: general}}
  - {kind: Deployment, name: solo, namespace: shop, replicas: 1, requests: {cpu: 450m}, startup: 200ms, shutdown: 100ms, nodeSelector: {tier: solo}}
"#;

/// A drain whose room is ready holds it while another node's placeholder is pending (one
/// pending then would take the freed room before the replacements exist), and frees it after
/// 5 s when that placeholder is still pending: the other node's capacity never comes here, and
/// the drain must not wait for its `--surge-timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_holds_its_room_while_another_nodes_placeholder_is_pending_for_at_most_5s() {
    let cluster = SimCluster::start(ONE_NEVER_PLACED).await;
    create_surge_class(&cluster).await;
    let drainer = TestDrainer::start(
        &cluster,
        "h",
        &[
            "--surge",
            "--surge-timeout",
            "60s",
            "--max-concurrent",
            "2",
            "--max-unavailable",
            "2",
        ],
    );
    let general = cluster.nodes_hosting("web-").await;
    let solo = cluster.nodes_hosting("solo-").await;
    assert_eq!((general.len(), solo.len()), (1, 1), "{general:?} {solo:?}");
    let (general, solo) = (&general[0], &solo[0]);
    cluster.taint(general, "manual").await;
    cluster.taint(solo, "manual").await;
    // Sample the general node's placeholders: when all four are bound (the autoscaler added a
    // node for them), and when they are gone (its room freed for the evictions).
    let selector = placeholders_of(general);
    let start = std::time::Instant::now();
    let (mut all_bound, mut freed) = (None, None);
    while freed.is_none() {
        assert!(
            start.elapsed() < WAIT,
            "the general node's room was not freed in time"
        );
        let placeholders = cluster.pods_labelled("rotor-system", &selector).await;
        let bound = placeholders.iter().filter(|p| is_bound(p)).count();
        if all_bound.is_none() && placeholders.len() == 4 && bound == 4 {
            all_bound = Some(start.elapsed());
        }
        if all_bound.is_some() && placeholders.is_empty() {
            freed = Some(start.elapsed());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let held = freed.unwrap() - all_bound.unwrap();
    cluster.wait_phase(general, "drained").await;
    // Meanwhile the solo node's placeholder waited for a node that never comes.
    let solo_selector = placeholders_of(solo);
    let pending: Vec<_> = cluster
        .pods_labelled("rotor-system", &solo_selector)
        .await
        .into_iter()
        .filter(|p| !is_bound(p))
        .collect();
    assert_eq!(
        pending.len(),
        1,
        "the solo node's placeholder is still pending"
    );
    drainer.stop().await.expect("the drainer stops cleanly");
    // Held about 5 s (sampled every 50 ms, and a sample may lag on a loaded machine), not the
    // solo node's 60 s --surge-timeout, and not freed at once as without the hold (54 ms).
    assert!(
        held >= std::time::Duration::from_secs(4) && held < std::time::Duration::from_secs(15),
        "the room was held {held:?} after its placeholders were all bound"
    );
    assert_eq!(cluster.stats()["budgetViolations"], 0);
}

/// `node`'s placeholders, as the drain labels them.
fn placeholders_of(node: &str) -> String {
    format!("rotor.dev/surge-for={node},app.kubernetes.io/managed-by=rotor-drainer")
}

/// No placeholder set is left in rotor's namespace.
async fn assert_no_sets_left(cluster: &SimCluster) {
    let sets = cluster
        .ns::<k8s_openapi::api::apps::v1::ReplicaSet>("rotor-system")
        .list(&Default::default())
        .await
        .unwrap();
    assert!(
        sets.items.is_empty(),
        "placeholder sets left: {:?}",
        sets.items
    );
}

/// Waits until `web` is whole again, stops the drainer, and checks that no placeholder set is
/// left and that no budget was broken.
async fn settle_and_stop(cluster: &SimCluster, drainer: TestDrainer) {
    web_whole(cluster).await;
    drainer.stop().await.expect("the drainer stops cleanly");
    assert_no_sets_left(cluster).await;
    assert_eq!(cluster.stats()["budgetViolations"], 0);
}

/// A node none of whose pods needs room elsewhere (here they request nothing): the drain makes
/// no placeholder and says so; its release still removes the node's room by its label, once
/// (room an earlier term made for the node is not known to this drain).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_pods_need_no_room_gets_no_placeholder() {
    const UNREQUESTED: &str = r#"
timing: {tick: 50ms, nodeStartup: 1s, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 200ms, podShutdown: 100ms, bookmarkInterval: 1s}
namespaces: [rotor-system]
nodeGroups:
  - {name: g, size: 2, max: 3, template: {cpu: "2", memory: 8Gi, kubeletVersion: v1.32.9}}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 8, startup: 200ms, shutdown: 100ms, pdb: {maxUnavailable: 1}}
"#;
    let cluster = SimCluster::start(UNREQUESTED).await;
    create_surge_class(&cluster).await;
    let (drainer, admin) =
        TestDrainer::start_serving(&cluster, "u", &["--surge", "--surge-timeout", "30s"]).await;
    let node = cluster.nodes_hosting("web-").await[0].clone();
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "drained").await;
    let skipped = metric(
        admin,
        r#"rotor_drainer_surges_total{outcome="nothing_to_reserve"}"#,
    )
    .await
    .expect("the surge's outcome counted");
    assert_eq!(skipped, 1.0);
    settle_and_stop(&cluster, drainer).await;
    let stats = cluster.stats();
    for (key, count) in [
        ("create replicasets", 0),
        ("patch replicasets", 0),
        ("deletecollection replicasets", 1),
        ("deletecollection pods", 1),
    ] {
        assert_eq!(cluster.requests(key), count, "{key}: {stats}");
    }
    assert!(
        cluster.requests("create pods/eviction") >= 1,
        "the drain evicted: {stats}"
    );
}

/// A surge whose sets cannot be made (every ReplicaSet create fails): the drain removes the
/// node's room at once, one deletecollection each, evicts without room, and its release does
/// not delete the same again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_surge_that_cannot_make_its_sets_removes_the_room_once_and_the_drain_goes_on() {
    let cluster = SimCluster::start(FULL).await;
    create_surge_class(&cluster).await;
    cluster.fail_requests("create", "replicasets", 500).await;
    let (drainer, admin) =
        TestDrainer::start_serving(&cluster, "f", &["--surge", "--surge-timeout", "30s"]).await;
    let node = cluster.nodes_hosting("web-").await[0].clone();
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "drained").await;
    let failed = metric(admin, r#"rotor_drainer_surges_total{outcome="failed"}"#)
        .await
        .expect("the surge's outcome counted");
    assert_eq!(failed, 1.0);
    settle_and_stop(&cluster, drainer).await;
    let stats = cluster.stats();
    assert!(cluster.requests("create replicasets") >= 1, "{stats}");
    for key in ["deletecollection replicasets", "deletecollection pods"] {
        assert_eq!(cluster.requests(key), 1, "{key}: {stats}");
    }
}

/// A surge that times out hands its placeholders over (its sets deleted, their pods left in
/// case the capacity comes late); the release then removes only the placeholders: one
/// deletecollection of sets and one of pods in all, and nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_surges_release_removes_only_the_placeholders_it_handed_over() {
    let cluster = drain_a_timed_out_surge(json!({})).await;
    let stats = cluster.stats();
    for key in ["deletecollection replicasets", "deletecollection pods"] {
        assert_eq!(cluster.requests(key), 1, "{key}: {stats}");
    }
}

/// Drains a node of [`PACKED`] whose surge times out (`--surge-timeout 1s`), with `faults` set
/// before its taint; waits until its placeholders are gone, stops the drainer and checks that no
/// placeholder set is left.
async fn drain_a_timed_out_surge(faults: serde_json::Value) -> SimCluster {
    let cluster = SimCluster::start(PACKED).await;
    create_surge_class(&cluster).await;
    let drainer = TestDrainer::start(&cluster, "t", &["--surge", "--surge-timeout", "1s"]);
    let node = cluster.nodes_hosting("web-").await[0].clone();
    cluster.faults(faults).await;
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "drained").await;
    wait_until("the placeholders to be removed", WAIT, || async {
        cluster
            .pods_labelled("rotor-system", &placeholders_of(&node))
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    drainer.stop().await.expect("the drainer stops cleanly");
    assert_no_sets_left(&cluster).await;
    cluster
}

/// The release's removal fails (the API server answers 500 once): the node keeps its
/// `--max-surge` slot and the removal is tried again a few seconds later, instead of the
/// placeholders, owned by no one, standing until a next leader's sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholders_whose_removal_failed_are_removed_on_a_later_try() {
    let cluster = drain_a_timed_out_surge(json!({"errors": [
        {"verb": "deletecollection", "resource": "pods", "rate": 1.0, "code": 500, "times": 1},
    ]}))
    .await;
    let stats = cluster.stats();
    assert_eq!(
        cluster.requests("deletecollection pods"),
        2,
        "the failed removal and its later try: {stats}"
    );
}

/// A ReplicaSet controller that does not remove the placeholders of the sets a drain scaled to
/// zero (down, or far behind; here the simulated control plane is paused): 2 s after the scale
/// the drain deletes the sets and the placeholders itself, and its release, which has nothing
/// left to delete, does not delete the sets again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholders_the_controller_does_not_remove_are_deleted_by_the_drain_once() {
    let cluster = SimCluster::start(FULL).await;
    create_surge_class(&cluster).await;
    let node = cluster.nodes_hosting("web-").await[0].clone();
    // From here the controllers, the scheduler, the autoscaler and the kubelets run only when
    // the test steps them; the API serves as ever.
    cluster.pause(true).await;
    let drainer = TestDrainer::start(&cluster, "c", &["--surge", "--surge-timeout", "60s"]);
    cluster.taint(&node, "manual").await;
    let selector = placeholders_of(&node);
    // Stepped until the four placeholders are bound: the set's controller makes them, the
    // autoscaler adds a node, the scheduler binds them. No step after that one, so nothing
    // removes them once the drain has scaled the set to zero.
    wait_until("the placeholders to be bound", WAIT, || async {
        cluster.step().await;
        let placeholders = cluster.pods_labelled("rotor-system", &selector).await;
        let bound = placeholders.iter().filter(|p| is_bound(p)).count();
        (placeholders.len() == 4 && bound == 4).then_some(())
    })
    .await;
    let bound_at = std::time::Instant::now();
    wait_until("the drain to delete them itself", WAIT, || async {
        cluster
            .pods_labelled("rotor-system", &selector)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    let waited = bound_at.elapsed();
    // It scaled the set to zero first, and waited the controller's 2 s (less the moment
    // between the bind and the scale) before deleting.
    assert_eq!(cluster.requests("patch replicasets"), 1);
    assert!(
        waited >= std::time::Duration::from_millis(1500),
        "the placeholders were deleted {waited:?} after they were bound"
    );
    assert_eq!(cluster.requests("deletecollection pods"), 1);
    assert_eq!(cluster.requests("deletecollection replicasets"), 1);
    cluster.pause(false).await;
    cluster.wait_phase(&node, "drained").await;
    settle_and_stop(&cluster, drainer).await;
    // The release gave the slot back and deleted nothing: the sets were gone.
    assert_eq!(cluster.requests("deletecollection replicasets"), 1);
    assert_eq!(cluster.requests("deletecollection pods"), 1);
}

/// A set that cannot be scaled to zero (here every patch of a ReplicaSet fails): the drain
/// deletes its sets and its placeholders, one deletecollection each, before its evictions, and
/// its release has nothing left to delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_that_cannot_be_scaled_is_deleted_with_its_placeholders_before_the_evictions() {
    let cluster = SimCluster::start(FULL).await;
    create_surge_class(&cluster).await;
    cluster.fail_requests("patch", "replicasets", 500).await;
    let drainer = TestDrainer::start(&cluster, "p", &["--surge", "--surge-timeout", "30s"]);
    let node = cluster.nodes_hosting("web-").await[0].clone();
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "drained").await;
    settle_and_stop(&cluster, drainer).await;
    let stats = cluster.stats();
    assert!(cluster.requests("patch replicasets") >= 1, "{stats}");
    assert_eq!(
        cluster.requests("deletecollection replicasets"),
        1,
        "{stats}"
    );
    assert_eq!(cluster.requests("deletecollection pods"), 1, "{stats}");
    // Deleted before the first eviction, so no replacement had to preempt a placeholder.
    assert_eq!(stats["podsPreempted"], 0, "{stats}");
    assert!(
        cluster
            .pods_labelled("rotor-system", PLACEHOLDERS)
            .await
            .is_empty()
    );
}

/// Room made ahead for a node whose pool then stops surging (its RotationPolicy now says
/// `surge: false`) goes at once: that node's drain makes no room, so it would never remove it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_made_ahead_goes_when_the_nodes_policy_stops_surging() {
    use kube::api::{Patch, PatchParams};
    use rotor_policy::RotationPolicy;
    let cluster = SimCluster::start(FULL).await;
    create_surge_class(&cluster).await;
    let policies = cluster.api::<RotationPolicy>();
    let every_node: RotationPolicy = serde_json::from_value(json!({
        "apiVersion": "rotor.dev/v1alpha1",
        "kind": "RotationPolicy",
        "metadata": {"name": "all"},
        "spec": {"nodeSelector": {}, "budgets": [{"nodes": "1"}], "drain": {"surge": true}},
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &every_node)
        .await
        .expect("the simulator serves RotationPolicies");
    let drainer = TestDrainer::start(&cluster, "a", &["--surge"]);
    let nodes = cluster.nodes_hosting("web-").await;
    let (first, next) = (nodes[0].clone(), nodes[1].clone());
    // The first node's drain holds (an opted-out pod on it), so the next waits in line.
    cluster
        .create_bare_pod_with(
            "shop",
            "precious",
            "precious",
            &first,
            json!({"rotor.dev/do-not-disrupt": "true"}),
        )
        .await;
    cluster.taint(&first, "manual").await;
    cluster.wait_phase(&first, "blocked").await;
    cluster.taint(&next, "manual").await;
    wait_until("room made ahead for the next node", WAIT, || async {
        let made = cluster
            .pods_labelled("rotor-system", &placeholders_of(&next))
            .await;
        (!made.is_empty()).then_some(())
    })
    .await;

    let no_surge = json!({"spec": {"drain": {"surge": false}}});
    policies
        .patch("all", &PatchParams::default(), &Patch::Merge(&no_surge))
        .await
        .unwrap();
    wait_until("the room made ahead to go", WAIT, || async {
        let left = cluster
            .pods_labelled("rotor-system", &placeholders_of(&next))
            .await;
        left.is_empty().then_some(())
    })
    .await;
    // Its sets went with them (the first node's, scaled to zero, wait for its drain's end).
    let sets = cluster
        .ns::<k8s_openapi::api::apps::v1::ReplicaSet>("rotor-system")
        .list(&kube::api::ListParams::default().labels(&placeholders_of(&next)))
        .await
        .unwrap();
    assert!(sets.items.is_empty(), "{:?}", sets.items);
    assert_eq!(cluster.phase(&next).await, None);
    drainer.stop().await.expect("the drainer stops cleanly");
}
