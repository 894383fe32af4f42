//! A shutdown during a drain (the stop token cancelled, as `rotor_core::shutdown` does on the
//! first SIGTERM or SIGINT): the drainer returns cleanly with no task of its own left running,
//! and the node's record is whole, the drain still recorded as under way so that the next
//! leader resumes it.

mod common;

use std::time::{Duration, Instant};

use common::{SimCluster, WAIT, wait_until};
use rotor_core::contract::DrainPhase;
use rotor_drainer::error::RunError;
use rotor_drainer::record::node::{DrainRecord, misreadings};
use tokio_util::sync::CancellationToken;

/// Web's budget never allows an eviction: a drain that reaches a web pod stays blocked.
const STUCK: &str = r#"
timing: {tick: 50ms, nodeStartup: 500ms, scaleUpDelay: 1s, scaleDownDelay: 10m, podStartup: 300ms, podShutdown: 200ms, bookmarkInterval: 1s}
namespaces: [rotor-system]
nodeGroups:
  - {name: g, size: 3, max: 6, template: {cpu: "4", memory: 16Gi, kubeletVersion: v1.32.9}}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 4, requests: {cpu: 100m}, startup: 300ms, shutdown: 200ms, pdb: {minAvailable: 4}}
  - {kind: DaemonSet, name: agent, namespace: kube-system}
"#;

/// How long the connections of dropped clients may take to close after `run` returns. A task
/// the drainer started and forgot (a watch, a notifier, a record write) would outlive it.
const SETTLE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_drain_under_way_when_the_drainer_stops_then_no_task_is_left_and_the_record_is_whole()
 {
    let cluster = SimCluster::start(STUCK).await;
    // A webhook nobody listens on: the notifier retries it with back-off when the drain starts
    // (a notice per node), so a stop finds it busy.
    let unreachable = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let webhook = format!("http://{}/hook", unreachable.local_addr().unwrap());
    drop(unreachable);
    let (cfg, leader) = common::settings(
        "a",
        &["--drain-timeout", "1h", "--notify-webhook", &webhook],
    );
    let stop = CancellationToken::new();
    let (config, thread_stop) = (cluster.config(), stop.clone());
    // The drainer on a runtime of its own, so that its tasks are counted apart from the
    // simulator's.
    let drainer = std::thread::spawn(move || -> (Result<(), RunError>, usize) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let result = runtime.block_on(rotor_drainer::runtime::run(
            config,
            cfg,
            leader,
            "127.0.0.1:0".parse().unwrap(),
            thread_stop,
        ));
        let deadline = Instant::now() + SETTLE;
        let mut alive = runtime.metrics().num_alive_tasks();
        while alive > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            alive = runtime.metrics().num_alive_tasks();
        }
        (result, alive)
    });

    let node = wait_until("a node hosting web pods", WAIT, || async {
        cluster.nodes_hosting("web-").await.into_iter().next()
    })
    .await;
    cluster.taint(&node, "manual").await;
    cluster.wait_phase(&node, "blocked").await;

    let stopped_at = Instant::now();
    stop.cancel();
    let (result, alive) = tokio::task::spawn_blocking(move || drainer.join().expect("no panic"))
        .await
        .unwrap();
    result.expect("a stop is a clean exit");
    assert_eq!(
        alive, 0,
        "tasks of the drainer still running {SETTLE:?} after it returned"
    );
    assert!(
        stopped_at.elapsed() < Duration::from_secs(10) + SETTLE,
        "the stop took {:?}",
        stopped_at.elapsed()
    );

    // The record is whole: readable, the drain under way with its start and deadline, the
    // cordon rotor's own. A new leader resumes it (drain.rs, the restart scenario).
    let object = cluster.node(&node).await;
    let annotations = object.metadata.annotations.as_ref();
    let now = jiff::Timestamp::now();
    assert!(
        misreadings(annotations, now, Duration::from_secs(3600)).is_empty(),
        "{annotations:?}"
    );
    let record = DrainRecord::from_annotations(annotations);
    assert_eq!(record.phase, Some(DrainPhase::Blocked), "{record:?}");
    assert!(
        record.started_at.is_some() && record.deadline.is_some(),
        "{record:?}"
    );
    assert!(record.cordoned_by_rotor, "{record:?}");
    assert_eq!(object.spec.unwrap().unschedulable, Some(true));
    assert!(record.is_active());
    cluster.stop().await;
}
