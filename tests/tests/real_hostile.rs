//! Bad input end to end (issue 18): malformed or hostile annotations on nodes and pods, a taint
//! value that is not one of rotor's reasons, budgets whose selectors match nothing or the whole
//! namespace, and a pod with an absurd grace period, all on one real control plane with one
//! rotor-drainer. Each case has its own node; every pod is a bare pod bound to it, so no
//! controller or scheduler moves anything but rotor's evictions.
//!
//! For every case: the drainer is still running at the end, it said what it made of the input
//! (an Event on the node or a log line naming the object), it did what docs/drainer.md ("Bad
//! input") says, and it never deleted a pod outside the Eviction API (audit log).

use std::time::{Duration, Instant};

use rotor_e2e::{FakeNode, RealCluster, wait_until};
use serde_json::{Value, json};

const DRAINER: &str = "system:serviceaccount:rotor-system:rotor-drainer";
const WAIT: Duration = Duration::from_secs(180);
const NS: &str = "hostile";
/// Short, so that the drain held by the absurd grace period fails within the test.
const DRAIN_TIMEOUT_S: u64 = 60;
/// 10 years, in seconds: the API allows any int64.
const TEN_YEARS_S: i64 = 10 * 365 * 24 * 3600;

/// A bare pod `name` in `namespace` bound to `node`, with `labels`, `annotations` and a grace
/// period, as JSON (one line: annotations may be long).
fn bare_pod(name: &str, namespace: &str, node: &str, annotations: Value, grace: i64) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": name},
            "annotations": annotations,
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "app", "image": "app:1"}],
        },
    })
}

fn pdb(name: &str, namespace: &str, selector: Value, rule: Value) -> Value {
    let mut spec = json!({"selector": selector});
    spec.as_object_mut()
        .unwrap()
        .extend(rule.as_object().unwrap().clone());
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

/// Writes `value` to a file in the cluster's directory and returns its path: patches too long
/// for a command line (one argument may hold at most 128 KiB).
fn file(cluster: &RealCluster, name: &str, value: &Value) -> String {
    let path = cluster.dir().join(name);
    std::fs::write(&path, value.to_string()).expect("write patch");
    path.display().to_string()
}

/// Puts `annotations` and the drain taint with `value` on `node` in one write, so the drainer
/// never sees the annotations on a node without the taint (it would clean them up).
fn taint_with(cluster: &RealCluster, node: &str, value: &str, annotations: Value) {
    let patch = json!({
        "metadata": {"annotations": annotations},
        "spec": {"taints": [{"key": "rotor.dev/drain", "value": value, "effect": "NoSchedule"}]},
    });
    let path = file(cluster, &format!("patch-{node}.json"), &patch);
    cluster.kubectl_ok(&[
        "patch",
        "node",
        node,
        "--type",
        "merge",
        "--patch-file",
        &path,
    ]);
}

fn annotations(cluster: &RealCluster, node: &str) -> Value {
    cluster.kubectl_json(&["get", "node", node])["metadata"]["annotations"].clone()
}

fn phase(cluster: &RealCluster, node: &str) -> Option<String> {
    annotations(cluster, node)["rotor.dev/phase"]
        .as_str()
        .map(str::to_string)
}

fn wait_phase(cluster: &RealCluster, node: &str, want: &str) {
    wait_until(&format!("{node} to reach phase {want}"), WAIT, || {
        (phase(cluster, node).as_deref() == Some(want)).then_some(())
    });
}

/// The first Event of `reason` on `node`, waited for.
fn node_event(cluster: &RealCluster, node: &str, reason: &str) -> String {
    wait_until(&format!("a {reason} Event on {node}"), WAIT, || {
        cluster.node_event_notes(node, reason).into_iter().next()
    })
}

/// Evictions of `namespace/pod` answered 201, and deletions of it, by the drainer.
fn evictions_and_deletes(audit: &[Value], namespace: &str, pod: &str) -> (usize, usize) {
    let of_pod = |e: &&Value| {
        e["objectRef"]["resource"] == "pods"
            && e["objectRef"]["namespace"] == namespace
            && e["objectRef"]["name"] == pod
    };
    let evictions = audit
        .iter()
        .filter(of_pod)
        .filter(|e| {
            e["verb"] == "create"
                && e["objectRef"]["subresource"] == "eviction"
                && e["responseStatus"]["code"] == 201
        })
        .count();
    let deletes = audit
        .iter()
        .filter(of_pod)
        .filter(|e| e["verb"] == "delete")
        .count();
    (evictions, deletes)
}

fn log_line_with<'a>(log: &'a str, parts: &[&str]) -> Option<&'a str> {
    log.lines().find(|l| parts.iter().all(|p| l.contains(p)))
}

#[test]
fn given_hostile_input_then_the_drainer_says_what_it_made_of_it_acts_as_documented_and_stays_up() {
    let began = Instant::now();
    let cluster = RealCluster::start();
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    cluster.stop_shipped_drainer();
    let nodes = [
        "odd-reason",
        "garbage-record",
        "future-record",
        "past-record",
        "failed-future",
        "odd-pods",
        "slow-pod",
        "budgets",
    ];
    cluster.add_nodes(&nodes.map(FakeNode::new));

    // The pods, one or more per node; the budgets of the two budget namespaces.
    let huge_opt_out = "y".repeat(100 * 1024);
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pdb-none"}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pdb-all"}}),
    ];
    for node in [
        "odd-reason",
        "garbage-record",
        "future-record",
        "past-record",
        "failed-future",
    ] {
        objects.push(bare_pod(&format!("{node}-p"), NS, node, json!({}), 1));
    }
    objects.extend([
        bare_pod(
            "opt-capital",
            NS,
            "odd-pods",
            json!({"rotor.dev/do-not-disrupt": "True"}),
            1,
        ),
        bare_pod(
            "opt-yes",
            NS,
            "odd-pods",
            json!({"karpenter.sh/do-not-disrupt": "yes"}),
            1,
        ),
        bare_pod(
            "opt-huge",
            NS,
            "odd-pods",
            json!({"rotor.dev/do-not-disrupt": huge_opt_out}),
            1,
        ),
        bare_pod("slow", NS, "slow-pod", json!({}), TEN_YEARS_S),
        bare_pod("a", "pdb-none", "budgets", json!({}), 1),
        bare_pod("b", "pdb-all", "budgets", json!({}), 1),
        // Matches nothing: a label no pod has.
        pdb(
            "nobody",
            "pdb-none",
            json!({"matchLabels": {"app": "nobody"}}),
            json!({"minAvailable": 1}),
        ),
        // Empty selector: in policy/v1 it covers every pod of the namespace, for the
        // disruption controller and (as this test found) for the Eviction API too.
        pdb(
            "everything",
            "pdb-all",
            json!({}),
            json!({"maxUnavailable": 0}),
        ),
    ]);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let path = file(&cluster, "hostile.json", &list);
    cluster.kubectl_ok(&["create", "-f", &path]);
    let pods: [(&str, &str); 9] = [
        (NS, "odd-reason-p"),
        (NS, "garbage-record-p"),
        (NS, "future-record-p"),
        (NS, "past-record-p"),
        (NS, "failed-future-p"),
        (NS, "opt-capital"),
        (NS, "opt-yes"),
        (NS, "opt-huge"),
        ("pdb-none", "a"),
    ];
    wait_until("every pod to run", WAIT, || {
        let running = cluster.kubectl_json(&["get", "pods", "-A"])["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                p["status"]["phase"] == "Running"
                    && [NS, "pdb-none", "pdb-all"]
                        .contains(&p["metadata"]["namespace"].as_str().unwrap_or_default())
            })
            .count();
        (running >= pods.len() + 2).then_some(())
    });

    // A taint value the API server refuses (not a label value): nothing for rotor to read.
    let refused = cluster.kubectl(&[
        "taint",
        "node",
        "odd-reason",
        "rotor.dev/drain={\"json\":1}:NoSchedule",
    ]);
    assert!(
        !refused.status.success(),
        "the API server took a taint value that is not a label value"
    );

    // The hostile nodes, each tainted in the same write as its annotations.
    taint_with(&cluster, "odd-reason", "Not.A-Reason_9", json!({}));
    let huge_phase = "x".repeat(200 * 1024);
    taint_with(
        &cluster,
        "garbage-record",
        "manual",
        json!({
            "rotor.dev/phase": huge_phase,
            "rotor.dev/started-at": "-1",
            "rotor.dev/deadline": "{\"at\":\"2030-01-01T00:00:00Z\"}",
            "rotor.dev/attempts": "-3",
            "rotor.dev/cordoned-by-rotor": "yes",
            "rotor.dev/drained-at": "9999-12-31T23:59:59Z",
            "rotor.dev/last-error": "12345",
        }),
    );
    taint_with(
        &cluster,
        "future-record",
        "manual",
        json!({
            "rotor.dev/phase": "evicting",
            "rotor.dev/started-at": "9999-12-30T00:00:00Z",
            "rotor.dev/deadline": "9999-12-30T00:00:00Z",
            "rotor.dev/attempts": "1",
        }),
    );
    taint_with(
        &cluster,
        "past-record",
        "manual",
        json!({
            "rotor.dev/phase": "evicting",
            "rotor.dev/started-at": "1970-01-01T00:00:00Z",
            "rotor.dev/deadline": "1970-01-01T00:00:00Z",
            "rotor.dev/attempts": "1",
        }),
    );
    taint_with(
        &cluster,
        "failed-future",
        "manual",
        json!({
            "rotor.dev/phase": "failed",
            "rotor.dev/deadline": "9999-12-30T00:00:00Z",
            "rotor.dev/attempts": "3",
            "rotor.dev/last-error": "an old failure",
        }),
    );
    for node in ["odd-pods", "slow-pod", "budgets"] {
        taint_with(&cluster, node, "manual", json!({}));
    }

    let timeout = format!("{DRAIN_TIMEOUT_S}s");
    let mut drainer = cluster.start_rotor_drainer(
        "e2e-hostile",
        &[
            "--max-concurrent",
            "10",
            "--max-unavailable",
            "100%",
            "--drain-timeout",
            &timeout,
        ],
    );

    // Every node but the slow pod's and the empty budget's drains as documented, whatever its
    // annotations said.
    for node in [
        "odd-reason",
        "garbage-record",
        "future-record",
        "failed-future",
        "odd-pods",
    ] {
        wait_phase(&cluster, node, "drained");
    }

    // The slow pod: evicted through the API at once, with a warning that its grace period
    // outlasts the drain; the drain then fails at its deadline naming it.
    let grace = node_event(&cluster, "slow-pod", "GracePeriodTooLong");
    assert!(
        grace.contains("hostile/slow") && grace.contains(&format!("{TEN_YEARS_S}s")),
        "{grace}"
    );
    assert!(grace.contains("--max-grace-period"), "{grace}");
    let on_pod = cluster.events_of(NS, "slow");
    assert!(
        on_pod.iter().any(|(r, _)| r == "GracePeriodTooLong"),
        "{on_pod:?}"
    );
    let failed = node_event(&cluster, "slow-pod", "DrainFailed");
    assert!(
        failed.contains("passed with 1 pod(s) left: hostile/slow"),
        "{failed}"
    );
    let slow = cluster.kubectl_json(&["get", "pod", "slow", "-n", NS]);
    assert!(
        !slow["metadata"]["deletionTimestamp"].is_null(),
        "the slow pod was evicted: {slow}"
    );

    // A deadline long past: taken as it is, the attempt fails at once without evicting, and the
    // retry after the back-off (1 minute) drains the node.
    let past = node_event(&cluster, "past-record", "DrainFailed");
    assert!(
        past.contains("1970-01-01T00:00:00Z") && past.contains("hostile/past-record-p"),
        "{past}"
    );
    wait_phase(&cluster, "past-record", "drained");

    let log = drainer.log();
    let audit = cluster.audit_by(DRAINER);

    // The taint value that is no reason: drained, and said so.
    let started = node_event(&cluster, "odd-reason", "DrainStarted");
    assert!(
        started.contains("rotor.dev/drain=Not.A-Reason_9"),
        "{started}"
    );
    assert!(
        log_line_with(&log, &["odd-reason", "not one of rotor's reasons"]).is_some(),
        "no log line about the taint value:\n{log}"
    );

    // Garbage in rotor's own record: named, disregarded, overwritten; a new attempt drained.
    let ignored = node_event(&cluster, "garbage-record", "DrainRecordIgnored");
    assert!(
        ignored.contains("rotor.dev/phase=\"xxxx") && ignored.contains("(204800 bytes)"),
        "{ignored}"
    );
    assert!(ignored.len() <= 1024, "{} bytes", ignored.len());
    let said = log_line_with(&log, &["garbage-record", "disregards"])
        .unwrap_or_else(|| panic!("no log line about garbage-record's record:\n{log}"));
    for key in [
        "rotor.dev/phase",
        "rotor.dev/started-at=\"-1\"",
        "rotor.dev/deadline=",
        "rotor.dev/attempts=\"-3\"",
        "rotor.dev/cordoned-by-rotor=\"yes\"",
        "rotor.dev/drained-at=\"9999-12-31T23:59:59Z\"",
    ] {
        assert!(said.contains(key), "{key} not named in: {said}");
    }
    assert!(
        !said.contains(&"x".repeat(100)),
        "the log line quotes 200 KiB"
    );
    let record = annotations(&cluster, "garbage-record");
    assert_eq!(record["rotor.dev/attempts"], "1", "{record}");
    assert_eq!(record["rotor.dev/cordoned-by-rotor"], "true", "{record}");
    assert!(record["rotor.dev/last-error"].is_null(), "{record}");
    for key in ["rotor.dev/started-at", "rotor.dev/drained-at"] {
        let at = record[key].as_str().unwrap_or_default();
        assert!(at.starts_with("20"), "{key} was not rewritten: {at:?}");
    }

    // Times rotor cannot have written: a new attempt with a real deadline, not a resume that
    // never times out, and a failure in 9999 does not back off until then.
    for node in ["future-record", "failed-future"] {
        let ignored = node_event(&cluster, node, "DrainRecordIgnored");
        assert!(
            ignored.contains("rotor.dev/deadline=\"9999-12-30T00:00:00Z\"")
                && ignored.contains("--drain-timeout") == (node == "future-record"),
            "{node}: {ignored}"
        );
        assert!(
            cluster.node_event_notes(node, "DrainResumed").is_empty(),
            "{node} resumed a drain on a deadline in year 9999"
        );
        let deadline = annotations(&cluster, node)["rotor.dev/deadline"].clone();
        assert!(
            deadline.as_str().is_some_and(|d| d.starts_with("20")),
            "{node}: {deadline}"
        );
    }
    assert_eq!(
        annotations(&cluster, "future-record")["rotor.dev/attempts"],
        "2"
    );
    assert_eq!(
        annotations(&cluster, "failed-future")["rotor.dev/attempts"],
        "4"
    );

    // Opt-out values that are not exactly "true": evicted, as documented, and each said.
    for (pod, annotation) in [
        ("opt-capital", "rotor.dev/do-not-disrupt"),
        ("opt-yes", "karpenter.sh/do-not-disrupt"),
        ("opt-huge", "rotor.dev/do-not-disrupt"),
    ] {
        let line = log_line_with(
            &log,
            &[&format!("hostile/{pod}"), annotation, "is not \"true\""],
        )
        .unwrap_or_else(|| panic!("no log line about {pod}'s {annotation}:\n{log}"));
        assert!(line.len() < 2000, "the log line quotes the whole value");
    }

    // Budgets: the one matching nothing covers no pod (evicted without a budget); the empty
    // one covers pdb-all/b, so the node blocks naming the budget, which can never allow with
    // maxUnavailable 0, and fails at its deadline.
    // Nothing is deleted.
    assert!(
        log_line_with(&log, &["evicted", "pdb-none/a", "budget=\"none\""]).is_some(),
        "no eviction line for pdb-none/a:\n{log}"
    );
    let blocked = node_event(&cluster, "budgets", "DrainBlocked");
    assert!(
        blocked.contains("pdb-all/everything") && blocked.contains("can never allow"),
        "{blocked}"
    );
    let failed = node_event(&cluster, "budgets", "DrainFailed");
    assert!(failed.contains("pdb-all/b"), "{failed}");
    let b = cluster.kubectl_json(&["get", "pod", "b", "-n", "pdb-all"]);
    assert!(b["metadata"]["deletionTimestamp"].is_null(), "{b}");
    let (_, deletes) = evictions_and_deletes(&audit, "pdb-all", "b");
    assert_eq!(deletes, 0);
    // rotor's reading is the API server's: an eviction of pdb-all/b, asked by the test as the
    // admin, is refused by the budget with the empty selector.
    let eviction = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "b", "namespace": "pdb-all"},
    });
    let path = file(&cluster, "evict-b.json", &eviction);
    let out = cluster.kubectl(&[
        "create",
        "--raw",
        "/api/v1/namespaces/pdb-all/pods/b/eviction",
        "-f",
        &path,
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("disruption budget"),
        "the API server let pdb-all/b go past its empty-selector budget: {said}"
    );

    // Every pod the drains moved went through the Eviction API; none was deleted by rotor.
    for (namespace, pod) in pods.iter().chain(&[(NS, "slow")]) {
        let (evictions, deletes) = evictions_and_deletes(&audit, namespace, pod);
        assert!(evictions >= 1, "{namespace}/{pod} was not evicted");
        assert_eq!(deletes, 0, "{namespace}/{pod} was deleted by rotor-drainer");
    }
    // The past deadline failed its first attempt before any eviction: one, in the retry.
    assert_eq!(
        evictions_and_deletes(&audit, NS, "past-record-p").0,
        1,
        "past-record-p"
    );
    assert_eq!(
        cluster.refusals(DRAINER, 0),
        Vec::<String>::new(),
        "the shipped RBAC refused requests"
    );

    // Still running, and no panic on the way.
    assert!(
        drainer.is_running(),
        "rotor-drainer exited ({:?}):\n{log}",
        drainer.exit_status()
    );
    assert!(!log.contains("panicked"), "{log}");
    eprintln!(
        "hostile input: {} nodes, done in {:.0}s",
        nodes.len(),
        began.elapsed().as_secs_f64()
    );
}
