//! The `rotor-selector` binary with the Kubernetes provider, against the simulator over HTTP.
//! Every test starts its own simulated cluster ([`common::FLEET`]: `old` nodes with kubelet
//! v1.33.2, `new` nodes with kubelet v1.34.1, control plane v1.33.4), runs the real binary
//! through a kubeconfig, and checks what it printed, what it wrote to the nodes, the Events it
//! recorded and the requests the simulator counted.

mod common;

use std::time::Duration;

use common::{TestCluster, run_bare, wait, wait_until};
use jiff::Timestamp;
use serde_json::json;

const K8S: [&str; 4] = ["--provider", "kubernetes", "--output", "json"];

fn flags<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut all = K8S.to_vec();
    all.extend_from_slice(extra);
    all
}

/// Runs the binary with the Kubernetes provider, JSON output and `extra`; it must exit 0.
async fn select(cluster: &TestCluster, extra: &[&str]) -> common::SelectorRun {
    let run = cluster.run(&flags(extra)).await;
    assert_eq!(run.code, 0, "{extra:?}: {}", run.stderr);
    run
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

const BEHIND: &str = "kubelet v1.33.2, control plane v1.34.1";

#[tokio::test]
async fn a_control_plane_bump_taints_the_oldest_lagging_kubelets_within_budget() {
    let cluster = TestCluster::start_fleet().await;

    // Same minor version everywhere: nothing to do.
    let run = select(&cluster, &[]).await;
    assert!(
        run.actions().iter().all(|(_, a)| a == "keep"),
        "{:?}",
        run.actions()
    );
    assert_eq!(cluster.requests("patch nodes"), 0);

    cluster.set_control_plane("v1.34.1").await;
    let before = Timestamp::from_second(Timestamp::now().as_second()).unwrap();
    let run = cluster.run(&flags(&["--max-tainted", "1"])).await;
    let after = Timestamp::now();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.actions(),
        pairs(&[
            ("new-0", "keep"),
            ("new-1", "keep"),
            ("old-0", "taint"),
            ("old-1", "keep"),
            ("old-2", "keep"),
            ("old-3", "keep"),
        ])
    );
    let mut old0 = run.node("old-0");
    assert!(
        old0["instance"].as_str().unwrap().starts_with("i-0"),
        "{old0}"
    );
    old0["instance"] = json!("i-…");
    assert_eq!(
        old0,
        json!({
            "node": "old-0", "instance": "i-…", "group": "old", "zone": "us-east-1a",
            "action": "taint", "reason": "kubelet-version", "detail": BEHIND,
            "result": {"outcome": "applied", "attempts": 1, "message": null},
        })
    );
    assert_eq!(run.node("old-1")["reason"], "kubelet-version");
    assert_eq!(run.node("old-1")["detail"], "budget: max-tainted 1 reached");
    assert_eq!(run.node("old-1")["result"], json!(null));
    assert_eq!(run.node("new-0")["reason"], json!(null));
    assert_eq!(run.node("new-0")["detail"], "up to date");
    assert_eq!(
        run.json()["summary"],
        json!({"nodes": 6, "taint": 1, "untaint": 0, "keep": 5, "skip": 0, "retire": 0,
               "applied": 1, "dropped": 0, "failed": 0})
    );
    assert_eq!(
        run.json()["apiCalls"],
        json!({"kubernetes": {"list nodes": 1, "get /version": 1, "patch nodes": 1, "create events": 1}})
    );
    assert_eq!(
        (run.json()["provider"].clone(), run.json()["dryRun"].clone()),
        (json!("kubernetes"), json!(false))
    );
    assert!(
        run.stderr
            .contains("plan: taint=1 untaint=0 keep=5 skip=0 retire=0"),
        "{}",
        run.stderr
    );

    // What is on the node: its own taint kept, rotor's added, the two selector annotations.
    assert_eq!(cluster.tainted().await, ["old-0"]);
    assert_eq!(
        cluster.taints("old-0").await,
        [
            "dedicated=batch:NoSchedule",
            "rotor.dev/drain=kubelet-version:NoSchedule"
        ]
    );
    let annotations = cluster.rotor_annotations("old-0").await;
    assert_eq!(
        annotations.keys().collect::<Vec<_>>(),
        ["rotor.dev/selected-at", "rotor.dev/selector-detail"]
    );
    assert_eq!(annotations["rotor.dev/selector-detail"], BEHIND);
    let selected_at: Timestamp = annotations["rotor.dev/selected-at"].parse().unwrap();
    assert!(
        before <= selected_at && selected_at <= after,
        "{selected_at} not in [{before}, {after}]"
    );
    assert!(annotations["rotor.dev/selected-at"].ends_with('Z'));
    assert_eq!(
        cluster.events("old-0").await,
        [(
            "DrainTaintAdded".to_owned(),
            "Taint".to_owned(),
            "rotor-selector".to_owned(),
            format!(
                "rotor-selector put the drain taint rotor.dev/drain=kubelet-version:NoSchedule on this node: {BEHIND}"
            )
        )]
    );
    assert_eq!(cluster.requests("patch nodes"), 1);
    assert_eq!(cluster.requests("create events"), 1);

    // A percentage: 50% of 6 nodes = 3 at once, and old-0 already counts, so two more. Zone b has
    // no tainted node yet, so its oldest (old-1) goes first; then old-2, older than old-3.
    let run = select(&cluster, &["--max-tainted", "50%"]).await;
    assert_eq!(
        run.actions(),
        pairs(&[
            ("new-0", "keep"),
            ("new-1", "keep"),
            ("old-0", "keep"),
            ("old-1", "taint"),
            ("old-2", "taint"),
            ("old-3", "keep"),
        ])
    );
    assert_eq!(
        run.node("old-0")["detail"],
        "already tainted (kubelet-version)"
    );
    assert_eq!(
        run.node("old-3")["detail"],
        "budget: max-tainted 50% (3 of 6 nodes) reached"
    );
    assert_eq!(cluster.tainted().await, ["old-0", "old-1", "old-2"]);
    assert_eq!(cluster.requests("patch nodes"), 3);

    // A second run with the same flags is idempotent: nothing written, nothing announced.
    let patches = cluster.requests("patch nodes");
    let events = cluster.requests("create events");
    let old0 = cluster.rotor_annotations("old-0").await;
    let run = select(&cluster, &["--max-tainted", "50%"]).await;
    assert!(
        run.actions().iter().all(|(_, a)| a == "keep"),
        "{:?}",
        run.actions()
    );
    assert_eq!(run.json()["summary"]["applied"], 0);
    assert_eq!(
        run.json()["apiCalls"],
        json!({"kubernetes": {"list nodes": 1, "get /version": 1}})
    );
    assert_eq!(cluster.requests("patch nodes"), patches);
    assert_eq!(cluster.requests("create events"), events);
    assert_eq!(cluster.rotor_annotations("old-0").await, old0);
    cluster.stop().await;
}

#[tokio::test]
async fn b_dry_run_prints_the_plan_and_changes_nothing() {
    let cluster = TestCluster::start_fleet().await;
    cluster.set_control_plane("v1.34.1").await;

    let run = cluster
        .run(&[
            "--provider",
            "kubernetes",
            "--dry-run",
            "--max-tainted",
            "2",
        ])
        .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "\
NODE   GROUP  ZONE        ACTION  REASON           DETAIL                                  RESULT
new-0  new    us-east-1a  keep    -                up to date                              -
new-1  new    us-east-1a  keep    -                up to date                              -
old-0  old    us-east-1a  taint   kubelet-version  kubelet v1.33.2, control plane v1.34.1  dry-run
old-1  old    us-east-1b  taint   kubelet-version  kubelet v1.33.2, control plane v1.34.1  dry-run
old-2  old    us-east-1a  keep    kubelet-version  budget: max-tainted 2 reached           -
old-3  old    us-east-1b  keep    kubelet-version  budget: max-tainted 2 reached           -
plan: taint=2 untaint=0 keep=4 skip=0 retire=0; writes: applied=0 dropped=0 failed=0 (dry run: nothing was changed)
"
    );

    let run = select(&cluster, &["--dry-run", "--max-tainted", "2"]).await;
    assert_eq!(run.json()["dryRun"], true);
    assert_eq!(
        run.node("old-1")["result"],
        json!({"outcome": "dry-run", "attempts": 0, "message": null})
    );
    assert_eq!(
        run.json()["apiCalls"],
        json!({"kubernetes": {"list nodes": 1, "get /version": 1}})
    );

    assert_eq!(cluster.requests("patch nodes"), 0);
    assert_eq!(cluster.requests("create events"), 0);
    assert!(cluster.tainted().await.is_empty());
    assert!(cluster.rotor_annotations("old-0").await.is_empty());
    cluster.stop().await;
}

#[tokio::test]
async fn c_rollback_untaints_unless_the_drain_started_or_the_taint_is_manual() {
    let cluster = TestCluster::start_fleet().await;
    // Somebody drains old-2 by hand.
    cluster.mark("old-2", Some(("manual", "NoSchedule")), &[]);
    cluster.set_control_plane("v1.34.1").await;
    let run = select(&cluster, &["--max-tainted", "10"]).await;
    assert_eq!(
        cluster.tainted().await,
        ["old-0", "old-1", "old-2", "old-3"]
    );
    assert_eq!(run.node("old-2")["detail"], "already tainted (manual)");
    // The drainer has started on old-1.
    cluster.mark("old-1", None, &[("rotor.dev/phase", "cordoned")]);
    // A script taints new-0 with a rotor reason; no selector run placed it (no selected-at).
    cluster.mark("new-0", Some(("kubelet-version", "NoSchedule")), &[]);

    // The control-plane upgrade is rolled back.
    cluster.set_control_plane("v1.33.4").await;
    let patches = cluster.requests("patch nodes");
    let run = select(&cluster, &["--max-tainted", "10"]).await;
    assert_eq!(
        run.actions(),
        pairs(&[
            ("new-0", "keep"),
            ("new-1", "keep"),
            ("old-0", "untaint"),
            ("old-1", "keep"),
            ("old-2", "keep"),
            ("old-3", "untaint"),
        ])
    );
    let entry = |node: &str| {
        let n = run.node(node);
        (
            n["reason"].clone(),
            n["detail"].clone(),
            n["result"].clone(),
        )
    };
    assert_eq!(
        entry("old-0"),
        (
            json!("kubelet-version"),
            json!("no longer out of date (was kubelet-version)"),
            json!({"outcome": "applied", "attempts": 1, "message": null})
        )
    );
    assert_eq!(
        entry("old-1"),
        (
            json!("kubelet-version"),
            json!("no longer out of date (was kubelet-version), but the drain has started"),
            json!(null)
        )
    );
    assert_eq!(
        entry("old-2"),
        (
            json!("manual"),
            json!("taint reason manual is never removed by the selector"),
            json!(null)
        )
    );
    assert_eq!(
        entry("new-0"),
        (
            json!("kubelet-version"),
            json!(
                "no longer out of date (was kubelet-version), but the taint was not placed by rotor-selector (no rotor.dev/selected-at); left in place"
            ),
            json!(null)
        )
    );
    assert_eq!(cluster.requests("patch nodes") - patches, 2);

    // Only rotor's taint and the selector's annotations went; the node's own taint stayed, and
    // the script's taint too.
    assert_eq!(cluster.tainted().await, ["new-0", "old-1", "old-2"]);
    assert_eq!(
        cluster.taints("old-0").await,
        ["dedicated=batch:NoSchedule"]
    );
    assert!(cluster.rotor_annotations("old-0").await.is_empty());
    assert_eq!(
        cluster
            .rotor_annotations("old-1")
            .await
            .keys()
            .collect::<Vec<_>>(),
        [
            "rotor.dev/phase",
            "rotor.dev/selected-at",
            "rotor.dev/selector-detail"
        ]
    );
    assert_eq!(
        cluster.drain_taint("old-2").await.as_deref(),
        Some("manual:NoSchedule")
    );
    let events: Vec<String> = cluster
        .events("old-3")
        .await
        .into_iter()
        .map(|(reason, action, _, note)| format!("{reason}/{action}: {note}"))
        .collect();
    assert_eq!(
        events,
        [
            format!("DrainTaintAdded/Taint: rotor-selector put the drain taint rotor.dev/drain=kubelet-version:NoSchedule on this node: {BEHIND}"),
            "DrainTaintRemoved/Untaint: rotor-selector removed its drain taint from this node: no longer out of date (was kubelet-version)".to_owned(),
        ]
    );

    // And again: nothing left to do.
    let patches = cluster.requests("patch nodes");
    let run = select(&cluster, &["--max-tainted", "10"]).await;
    assert_eq!(run.json()["summary"]["untaint"], 0);
    assert_eq!(cluster.requests("patch nodes"), patches);
    cluster.stop().await;
}

#[tokio::test]
async fn d_node_selector_restricts_the_nodes_considered() {
    let cluster = TestCluster::start_fleet().await;
    cluster.set_control_plane("v1.34.1").await;

    // Percentages are of the selected nodes: 50% of the 2 nodes in zone b is 1.
    let run = select(
        &cluster,
        &[
            "--node-selector",
            "topology.kubernetes.io/zone=us-east-1b",
            "--max-tainted",
            "50%",
            "--taint-effect",
            "PreferNoSchedule",
        ],
    )
    .await;
    assert_eq!(
        run.actions(),
        pairs(&[("old-1", "taint"), ("old-3", "keep")])
    );
    assert_eq!(
        run.node("old-3")["detail"],
        "budget: max-tainted 50% (1 of 2 nodes) reached"
    );
    assert_eq!(cluster.tainted().await, ["old-1"]);
    assert_eq!(
        cluster.drain_taint("old-1").await.as_deref(),
        Some("kubelet-version:PreferNoSchedule")
    );
    assert_eq!(
        cluster.events("old-1").await[0].3,
        format!(
            "rotor-selector put the drain taint rotor.dev/drain=kubelet-version:PreferNoSchedule on this node: {BEHIND}"
        )
    );

    // Set-based requirements too.
    let run = select(
        &cluster,
        &[
            "--dry-run",
            "--node-selector",
            "sim.rotor.dev/node-group in (old),topology.kubernetes.io/zone notin (us-east-1b)",
        ],
    )
    .await;
    assert_eq!(
        run.actions(),
        pairs(&[("old-0", "taint"), ("old-2", "keep")])
    );

    // Nothing matches: an empty plan is a completed run.
    let run = select(&cluster, &["--node-selector", "team=nobody"]).await;
    assert_eq!(run.json()["nodes"], json!([]));
    cluster.stop().await;
}

#[tokio::test]
async fn e_do_not_disrupt_nodes_are_skipped() {
    let cluster = TestCluster::start_fleet().await;
    cluster.mark("old-0", None, &[("rotor.dev/do-not-disrupt", "true")]);
    // Only exactly "true" opts out.
    cluster.mark("old-1", None, &[("rotor.dev/do-not-disrupt", "True")]);
    cluster.set_control_plane("v1.34.1").await;

    let run = select(&cluster, &["--max-tainted", "2"]).await;
    assert_eq!(
        run.actions(),
        pairs(&[
            ("new-0", "keep"),
            ("new-1", "keep"),
            ("old-0", "skip"),
            ("old-1", "taint"),
            ("old-2", "taint"),
            ("old-3", "keep"),
        ])
    );
    assert_eq!(run.node("old-0")["reason"], "opted-out");
    assert_eq!(
        run.node("old-0")["detail"],
        "node opted out (rotor.dev/do-not-disrupt=true)"
    );
    assert_eq!(cluster.tainted().await, ["old-1", "old-2"]);
    assert!(cluster.events("old-0").await.is_empty());
    cluster.stop().await;
}

#[tokio::test]
async fn f_bad_flags_exit_2_before_any_request() {
    let cluster = TestCluster::start_fleet().await;
    let cases: [(&[&str], &str); 10] = [
        (
            &["--provider", "kubernetes", "--max-tainted", "150%"],
            "--max-tainted",
        ),
        (
            &[
                "--provider",
                "kubernetes",
                "--pushgateway",
                "pushgateway:9091",
            ],
            "--pushgateway",
        ),
        (
            &["--provider", "kubernetes", "--node-selector", "a in ("],
            "--node-selector",
        ),
        (
            &["--provider", "aws"],
            "--provider aws needs --cluster-name",
        ),
        (
            &["--provider", "kubernetes", "--max-age", "0s"],
            "--max-age",
        ),
        (
            &["--provider", "kubernetes", "--taint-effect", "NoExecute"],
            "--taint-effect",
        ),
        (
            &["--provider", "kubernetes", "--group-label", "bad key"],
            "--group-label",
        ),
        // A per-group budget over no groups would hold nothing back.
        (
            &[
                "--provider",
                "kubernetes",
                "--group-label",
                "",
                "--max-tainted-per-group",
                "1",
            ],
            "--max-tainted-per-group needs groups",
        ),
        // The cloud's groups decide; a label list would be silently ignored.
        (
            &[
                "--provider",
                "aws",
                "--cluster-name",
                "c",
                "--group-label",
                "team",
            ],
            "--provider aws groups nodes by their Auto Scaling group",
        ),
        (&["--max-tainted", "1"], "--provider"),
    ];
    for (args, message) in cases {
        let run = cluster.run(args).await;
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(message), "{args:?}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{args:?}");
    }
    assert_eq!(
        cluster.requests_total(),
        0,
        "{}",
        cluster.stats()["requests"]
    );

    // Google Cloud credentials that cannot be loaded are configuration too: told before the
    // cluster is contacted, as AWS's and Azure's are.
    let garbled =
        std::env::temp_dir().join(format!("rotor-garbled-adc-{}.json", std::process::id()));
    std::fs::write(&garbled, "{ not json").unwrap();
    let run = cluster
        .run_env(
            &["--provider", "gcp", "--gcp-project", "p"],
            &[("GOOGLE_APPLICATION_CREDENTIALS", garbled.to_str().unwrap())],
        )
        .await;
    let _ = std::fs::remove_file(&garbled);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("Google Cloud client setup failed")
            && run.stderr.contains("GOOGLE_APPLICATION_CREDENTIALS"),
        "{}",
        run.stderr
    );
    assert_eq!(
        cluster.requests_total(),
        0,
        "{}",
        cluster.stats()["requests"]
    );

    // A kubeconfig that cannot be read is configuration too.
    let run = run_bare(
        &[
            "--provider",
            "kubernetes",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ],
        &[],
    )
    .await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("/nonexistent/kubeconfig"),
        "{}",
        run.stderr
    );
    // Flags come from the environment as well, and are validated the same way.
    let run = run_bare(
        &[],
        &[
            ("ROTOR_PROVIDER", "kubernetes"),
            ("ROTOR_MAX_TAINTED", "101%"),
        ],
    )
    .await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--max-tainted"), "{}", run.stderr);

    // --help explains every flag and its environment variable.
    let run = cluster.run(&["--help"]).await;
    assert_eq!(run.code, 0);
    for text in [
        "--provider",
        "ROTOR_PROVIDER",
        "--dry-run",
        "ROTOR_DRY_RUN",
        "--output",
        "ROTOR_OUTPUT",
        "--max-tainted <COUNT|PERCENT>",
        "ROTOR_MAX_TAINTED",
        "--max-tainted-per-group",
        "ROTOR_MAX_TAINTED_PER_GROUP",
        "--taint-effect",
        "ROTOR_TAINT_EFFECT",
        "--node-selector",
        "ROTOR_NODE_SELECTOR",
        "--max-age",
        "ROTOR_MAX_AGE",
        "--group-label",
        "ROTOR_GROUP_LABELS",
        "--kubeconfig",
        "ROTOR_KUBECONFIG",
        "--log-format",
        "ROTOR_LOG_FORMAT",
        "Exit status",
    ] {
        assert!(
            run.stdout.contains(text),
            "--help lacks {text}:\n{}",
            run.stdout
        );
    }
    assert_eq!(cluster.requests_total(), 0);
    cluster.stop().await;
}

/// Every API request waits this long in the simulator, so a test can change a node between the
/// selector's read and its write.
const LATENCY: u64 = 300;

/// With the control plane at v1.34.1 and every request slowed by [`LATENCY`], runs the selector
/// (`--max-tainted 1`, so it patches old-0), makes `change` while its first patch is in flight,
/// and returns the run, which must exit 0.
async fn with_a_write_in_flight(
    cluster: &TestCluster,
    change: impl FnOnce(),
) -> common::SelectorRun {
    cluster.set_control_plane("v1.34.1").await;
    cluster.faults(json!({"latencyMs": LATENCY})).await;
    let child = cluster.spawn(&flags(&["--max-tainted", "1"]));
    wait_until(
        "the selector's first patch",
        Duration::from_secs(30),
        || cluster.requests("patch nodes") >= 1,
    )
    .await;
    change();
    let run = wait(child).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    run
}

#[tokio::test]
async fn g_a_conflicting_write_is_reread_rechecked_and_retried() {
    let cluster = TestCluster::start_fleet().await;
    // Another writer changes old-0 while the selector's patch is in flight.
    let run = with_a_write_in_flight(&cluster, || {
        cluster.modify_node("old-0", |n| {
            n.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("team".into(), "web".into());
        })
    })
    .await;
    assert_eq!(
        run.node("old-0")["result"],
        json!({"outcome": "applied", "attempts": 2, "message": null})
    );
    assert_eq!(
        run.json()["apiCalls"],
        json!({"kubernetes": {"list nodes": 1, "get /version": 1, "patch nodes": 2, "get nodes": 1, "create events": 1}})
    );
    assert_eq!(cluster.requests("patch nodes"), 2);
    assert!(run.stderr.contains("conflict"), "{}", run.stderr);
    // Both writes are on the node: nothing was lost.
    let node = cluster.node("old-0").await;
    assert_eq!(node.metadata.labels.unwrap()["team"], "web");
    assert_eq!(
        cluster.drain_taint("old-0").await.as_deref(),
        Some("kubelet-version:NoSchedule")
    );
    cluster.stop().await;
}

#[tokio::test]
async fn g_a_write_that_no_longer_applies_after_a_conflict_is_dropped() {
    let cluster = TestCluster::start_fleet().await;
    // Somebody taints old-0 by hand meanwhile.
    let run = with_a_write_in_flight(&cluster, || {
        cluster.mark("old-0", Some(("manual", "NoSchedule")), &[])
    })
    .await;
    assert_eq!(
        run.node("old-0")["result"],
        json!({"outcome": "dropped", "attempts": 1, "message":
            "no longer applies after a concurrent change to the node (now keep: already tainted (manual))"})
    );
    assert_eq!(run.json()["summary"]["dropped"], 1);
    assert_eq!(cluster.requests("patch nodes"), 1);
    assert_eq!(cluster.requests("get nodes"), 1);
    assert_eq!(
        cluster.taints("old-0").await,
        [
            "dedicated=batch:NoSchedule",
            "rotor.dev/drain=manual:NoSchedule"
        ]
    );
    assert!(cluster.rotor_annotations("old-0").await.is_empty());
    assert!(cluster.events("old-0").await.is_empty());
    cluster.stop().await;
}

#[tokio::test]
async fn g_failed_writes_exit_1_naming_the_node() {
    let cluster = TestCluster::start_fleet().await;
    cluster.set_control_plane("v1.34.1").await;
    cluster.fail_requests("patch", "nodes", 500).await;

    let run = cluster.run(&flags(&["--max-tainted", "2"])).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(
        run.node("old-0")["result"],
        json!({"outcome": "failed", "attempts": 1, "message": "500 InternalError: injected fault: patch nodes"})
    );
    assert_eq!(run.json()["summary"]["failed"], 2);
    assert!(
        run.stderr.contains(
            "2 of 2 writes failed (taint old-0: 500 InternalError: injected fault: patch nodes; taint old-1: 500 InternalError: injected fault: patch nodes)"
        ),
        "{}",
        run.stderr
    );
    assert!(cluster.tainted().await.is_empty());
    assert_eq!(cluster.requests("create events"), 0);

    // A failed look-up fails the run before anything is written.
    cluster.fail_requests("list", "nodes", 500).await;
    let patches = cluster.requests("patch nodes");
    let run = cluster.run(&flags(&["--max-tainted", "2"])).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.contains(
            "cannot list nodes: 500 InternalError: injected fault: list nodes; nothing was written"
        ),
        "{}",
        run.stderr
    );
    assert_eq!(cluster.requests("patch nodes"), patches);
    cluster.stop().await;
}

/// A taint the API server made but whose answer was lost (a 504 after the write): the retry
/// meets a conflict with the run's own write, which is reported as made, with its Event, not as
/// dropped for a concurrent change.
#[tokio::test]
async fn g_a_taint_made_whose_answer_was_lost_is_reported_as_made() {
    let cluster = TestCluster::start_fleet().await;
    cluster.set_control_plane("v1.34.1").await;
    cluster
        .faults(
            json!({"errors": [{"verb": "patch", "resource": "nodes", "rate": 1.0,
            "code": 504, "afterServing": true, "times": 1}]}),
        )
        .await;
    let run = select(&cluster, &["--max-tainted", "1"]).await;
    let tainted = cluster.tainted().await;
    assert_eq!(tainted.len(), 1, "{tainted:?}");
    let node = &tainted[0];
    assert_eq!(
        run.node(node)["result"],
        json!({"outcome": "applied", "attempts": 1, "message": null}),
        "{}",
        run.stdout
    );
    // The write, its retry answered 409, and no third.
    assert_eq!(cluster.requests("patch nodes"), 2);
    let events = cluster.events(node).await;
    assert!(
        events
            .iter()
            .any(|(reason, ..)| reason == "DrainTaintAdded"),
        "{events:?}"
    );
}

#[tokio::test]
async fn g_an_unavailable_api_server_is_retried_briefly_then_the_run_fails() {
    let cluster = TestCluster::start_fleet().await;
    cluster.set_control_plane("v1.34.1").await;
    cluster.fail_requests("patch", "nodes", 503).await;

    let started = std::time::Instant::now();
    let run = cluster.run(&flags(&["--max-tainted", "1"])).await;
    let elapsed = started.elapsed();
    assert_eq!(run.code, 1, "{}", run.stderr);
    // Three attempts (0.5 s and 2 s apart), not kube's fifteen with back-off towards 1000 s.
    assert_eq!(cluster.requests("patch nodes"), 3);
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert_eq!(
        run.node("old-0")["result"]["message"],
        "503 ServiceUnavailable: injected fault: patch nodes"
    );

    assert!(cluster.tainted().await.is_empty());
    cluster.stop().await;
}

#[tokio::test]
async fn h_max_age_and_per_group_budgets() {
    let cluster = TestCluster::start_fleet().await;

    // Control plane unchanged: only age matters. new-0 (60d) and new-1 (50d) are too old.
    let run = select(&cluster, &["--max-age", "45d", "--max-tainted", "1"]).await;
    let new0 = run.node("new-0");
    assert_eq!(
        (
            new0["action"].clone(),
            new0["reason"].clone(),
            new0["detail"].clone()
        ),
        (
            json!("taint"),
            json!("max-age"),
            json!("created 60d ago, max age 45d")
        )
    );
    assert_eq!(run.node("new-1")["detail"], "budget: max-tainted 1 reached");
    assert_eq!(
        cluster.drain_taint("new-0").await.as_deref(),
        Some("max-age:NoSchedule")
    );

    // Per group: at most one tainted node in each group, whatever the global budget.
    cluster.set_control_plane("v1.34.1").await;
    let run = select(
        &cluster,
        &[
            "--max-age",
            "45d",
            "--max-tainted",
            "10",
            "--max-tainted-per-group",
            "1",
        ],
    )
    .await;
    // Zone a already has new-0 tainted, so zone b's oldest (old-1) takes group old's one slot.
    assert_eq!(
        run.actions(),
        pairs(&[
            ("new-0", "keep"),
            ("new-1", "keep"),
            ("old-0", "keep"),
            ("old-1", "taint"),
            ("old-2", "keep"),
            ("old-3", "keep"),
        ])
    );
    assert_eq!(run.node("new-0")["detail"], "already tainted (max-age)");
    assert_eq!(
        run.node("new-1")["detail"],
        "budget: max-tainted-per-group 1 reached in group new"
    );
    assert_eq!(
        run.node("old-0")["detail"],
        "budget: max-tainted-per-group 1 reached in group old"
    );
    assert_eq!(cluster.tainted().await, ["new-0", "old-1"]);
    cluster.stop().await;
}
