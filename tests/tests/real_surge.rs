//! `rotor-drainer --surge` on a real control plane (etcd, kube-apiserver, controller-manager,
//! scheduler; kwok for the kubelets), under the RBAC `deploy/` ships, with the real scheduler's
//! priorities and preemption and a small autoscaler ([`TestAutoscaler`]) that adds a kwok node
//! for unschedulable pods. The cluster is full: a drained node's pods fit nowhere else.
//!
//! The control plane's binaries come from `tools/build.sh`; without them every test here fails
//! and says how to build them.

use std::time::{Duration, Instant};

use rotor_e2e::autoscaler::TestAutoscaler;
use rotor_e2e::manifests::{SURGE_WEB, SURGE_WEB_REPLICAS, surge_node};
use rotor_e2e::{BudgetWatch, RealCluster, WatchedBudget, wait_until};
use serde_json::Value;

const DRAINER: &str = "system:serviceaccount:rotor-system:rotor-drainer";
/// kube-controller-manager's ReplicaSet controller, under its own service account.
const REPLICASET_CONTROLLER: &str = "system:serviceaccount:kube-system:replicaset-controller";
const WAIT: Duration = Duration::from_secs(180);
const PLACEHOLDERS: &str = "rotor.dev/surge-for,app.kubernetes.io/managed-by=rotor-drainer";

/// Two full old nodes running `web`, rotor's kubernetes overlay applied (the shipped drainer
/// scaled to zero: the tests run their own).
fn full_cluster() -> RealCluster {
    let cluster = RealCluster::start();
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    cluster.stop_shipped_drainer();
    cluster.add_nodes(&[surge_node("old-1"), surge_node("old-2")]);
    cluster.apply(SURGE_WEB);
    wait_until("web's 8 pods to be Ready", WAIT, || {
        (ready(&cluster, "shop", "app=web").len() == SURGE_WEB_REPLICAS).then_some(())
    });
    cluster
}

/// Ready pods matching `selector` in `namespace`, with the node each runs on.
fn ready(cluster: &RealCluster, namespace: &str, selector: &str) -> Vec<(String, String)> {
    pods(cluster, namespace, selector)
        .into_iter()
        .filter(|p| {
            p["metadata"]["deletionTimestamp"].is_null()
                && conditions(p).any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .map(|p| (text(&p["metadata"]["name"]), text(&p["spec"]["nodeName"])))
        .collect()
}

fn pods(cluster: &RealCluster, namespace: &str, selector: &str) -> Vec<Value> {
    let list = cluster.kubectl_json(&["get", "pods", "-n", namespace, "-l", selector]);
    list["items"].as_array().cloned().unwrap_or_default()
}

fn conditions(pod: &Value) -> impl Iterator<Item = &Value> {
    pod["status"]["conditions"].as_array().into_iter().flatten()
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn taint(cluster: &RealCluster, node: &str) {
    cluster.kubectl_ok(&["taint", "node", node, "rotor.dev/drain=manual:NoSchedule"]);
}

fn untaint(cluster: &RealCluster, node: &str) {
    cluster.kubectl_ok(&["taint", "node", node, "rotor.dev/drain-"]);
}

/// Waits until no placeholder is left and `node` is uncordoned, after `what`.
fn wait_released(cluster: &RealCluster, node: &str, what: &str) {
    wait_until(
        &format!("{node}'s placeholders to be removed after {what}"),
        WAIT,
        || {
            pods(cluster, "rotor-system", PLACEHOLDERS)
                .is_empty()
                .then_some(())
        },
    );
    wait_until(
        &format!("{node} to be uncordoned after {what}"),
        WAIT,
        || {
            let n = cluster.kubectl_json(&["get", "node", node]);
            (n["spec"]["unschedulable"] != true).then_some(())
        },
    );
}

fn phase(cluster: &RealCluster, node: &str) -> Option<String> {
    cluster.kubectl_json(&["get", "node", node])["metadata"]["annotations"]["rotor.dev/phase"]
        .as_str()
        .map(str::to_string)
}

/// The reasons of the Events rotor recorded on `node`, oldest first.
fn event_reasons(cluster: &RealCluster, node: &str) -> Vec<String> {
    cluster
        .node_events(node)
        .into_iter()
        .map(|(reason, _)| reason)
        .collect()
}

fn event_note(cluster: &RealCluster, node: &str, reason: &str) -> Option<String> {
    cluster.node_event_notes(node, reason).into_iter().next()
}

/// Audit records of `user`'s `verb` on pods (`subresource` or the pods themselves), with the
/// namespace and the time the apiserver received each, in order.
fn pod_requests(
    cluster: &RealCluster,
    user: &str,
    verb: &str,
    subresource: Option<&str>,
) -> Vec<(String, String, String)> {
    requests_on(cluster.audit_by(user), "pods", verb, subresource)
}

/// The successful `verb` requests on `resource` (`subresource` or the objects themselves)
/// among audit `records`: when the apiserver received each, the namespace and the name, in
/// order.
fn requests_on(
    records: Vec<Value>,
    resource: &str,
    verb: &str,
    subresource: Option<&str>,
) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = records
        .into_iter()
        .filter(|e| {
            e["verb"] == verb
                && e["objectRef"]["resource"] == resource
                && e["objectRef"]["subresource"].as_str() == subresource
                && e["responseStatus"]["code"]
                    .as_i64()
                    .is_some_and(|c| c < 300)
        })
        .map(|e| {
            (
                text(&e["requestReceivedTimestamp"]),
                text(&e["objectRef"]["namespace"]),
                text(&e["objectRef"]["name"]),
            )
        })
        .collect();
    out.sort();
    out
}

/// Room made before the first eviction, taken by the replacements without preempting; then a
/// placeholder that the scheduler does preempt, logged by the drainer.
#[test]
fn with_surge_an_autoscaler_adds_room_before_the_first_eviction_and_the_replacements_take_it_without_preempting()
 {
    let cluster = full_cluster();
    let watch = BudgetWatch::start(
        &cluster.kubectl_bin(),
        cluster.admin_kubeconfig(),
        vec![WatchedBudget::app("shop", "web", SURGE_WEB_REPLICAS - 1)],
    );
    let autoscaler =
        TestAutoscaler::new(surge_node("template"), "surge", 3, Duration::from_secs(3));
    let (drained_in, added, replacements, drainer) = std::thread::scope(|s| {
        s.spawn(|| autoscaler.run(&cluster));
        let drainer = cluster.start_rotor_drainer("surge-a", &["--surge", "--surge-timeout", "2m"]);
        let started = Instant::now();
        taint(&cluster, "old-1");
        wait_until("old-1 to be drained", WAIT, || {
            (phase(&cluster, "old-1").as_deref() == Some("drained")).then_some(())
        });
        let drained_in = started.elapsed();
        wait_until("web to be whole again", WAIT, || {
            let ready = ready(&cluster, "shop", "app=web");
            (ready.len() == SURGE_WEB_REPLICAS).then_some(())
        });
        autoscaler.stop();
        assert!(drainer.log().contains("placeholders"), "{}", drainer.log());
        let replacements: Vec<(String, String)> = ready(&cluster, "shop", "app=web")
            .into_iter()
            .filter(|(_, node)| node != "old-2")
            .collect();
        (drained_in, autoscaler.added(), replacements, drainer)
    });
    let verdict = watch.finish();
    assert!(
        verdict.violations.is_empty(),
        "budget violated: {:#?}",
        verdict.violations
    );

    // One node was added, for the placeholders (four 450m placeholders fit one 2-CPU node),
    // and none later for the evicted pods: they took the placeholders' room.
    assert_eq!(added.len(), 1, "nodes the autoscaler added: {added:?}");
    assert!(
        added[0]
            .for_pods
            .iter()
            .all(|p| p.starts_with("rotor-system/rotor-surge-old-1-")),
        "the node was added for the placeholders: {:?}",
        added[0].for_pods
    );
    let surge_node = &added[0].node;
    assert_eq!(replacements.len(), 4, "{replacements:?}");
    assert!(
        replacements.iter().all(|(_, node)| node == surge_node),
        "every replacement runs on the node added for the placeholders: {replacements:?}"
    );

    // The audit log: one placeholder set created by rotor and its four pods by the ReplicaSet
    // controller, then the first eviction only once the room was there: rotor scaled the set
    // to zero just before it, and the ReplicaSet controller removed the four placeholders
    // (side by side, where a deletecollection removes them one after another) before it made
    // the first replacement; the empty set deleted only after, and so no placeholder
    // preempted by the scheduler (a preempted placeholder's replacement waits a scheduling
    // cycle and the scheduler's back-off).
    let sets = requests_on(cluster.audit_by(DRAINER), "replicasets", "create", None);
    assert_eq!(sets.len(), 1, "placeholder sets created: {sets:?}");
    assert_eq!(sets[0].1, "rotor-system", "{sets:?}");
    assert_eq!(
        pod_requests(&cluster, DRAINER, "create", None),
        Vec::new(),
        "rotor-drainer creates no pod itself"
    );
    // Pods created in rotor-system once the set was (the shipped drainer's own, scaled to zero
    // at the start, came before).
    let created: Vec<_> = requests_on(cluster.audit_events(), "pods", "create", None)
        .into_iter()
        .filter(|(at, ns, _)| ns == "rotor-system" && at > &sets[0].0)
        .collect();
    assert_eq!(created.len(), 4, "placeholders created: {created:?}");
    let evictions = pod_requests(&cluster, DRAINER, "create", Some("eviction"));
    assert_eq!(evictions.len(), 4, "{evictions:?}");
    let first_eviction = &evictions[0].0;
    let scaled = requests_on(cluster.audit_by(DRAINER), "replicasets", "patch", None);
    assert!(
        scaled.iter().any(|(at, ns, name)| ns == "rotor-system"
            && name == &sets[0].2
            && at < first_eviction),
        "the set scaled to zero before the first eviction at {first_eviction}: {scaled:?}"
    );
    let removed_by_controller: Vec<_> = requests_on(
        cluster.audit_by(REPLICASET_CONTROLLER),
        "pods",
        "delete",
        None,
    )
    .into_iter()
    // Not the shipped drainer's pods, scaled to zero at the start.
    .filter(|(_, ns, name)| ns == "rotor-system" && name.starts_with("rotor-surge-old-1-"))
    .collect();
    assert_eq!(
        removed_by_controller.len(),
        4,
        "placeholders the ReplicaSet controller removed: {removed_by_controller:?}"
    );
    let replacements_made: Vec<_> = requests_on(
        cluster.audit_by(REPLICASET_CONTROLLER),
        "pods",
        "create",
        None,
    )
    .into_iter()
    .filter(|(at, ns, _)| ns == "shop" && at > first_eviction)
    .collect();
    let first_replacement = &replacements_made
        .first()
        .expect("the ReplicaSet controller made the evicted pods' replacements")
        .0;
    assert!(
        removed_by_controller
            .iter()
            .all(|(at, _, _)| at < first_replacement),
        "every placeholder removed before the first replacement was made at {first_replacement}: {removed_by_controller:?}"
    );
    let sets_deleted = requests_on(
        cluster.audit_by(DRAINER),
        "replicasets",
        "deletecollection",
        None,
    );
    assert!(
        sets_deleted
            .iter()
            .any(|(at, ns, _)| ns == "rotor-system" && at > first_eviction),
        "the empty set deleted at the release, after the evictions: {sets_deleted:?}"
    );
    assert_eq!(
        pod_requests(&cluster, DRAINER, "deletecollection", None),
        Vec::new(),
        "no placeholder was left for rotor to delete"
    );
    let node_created =
        text(&cluster.kubectl_json(&["get", "node", surge_node])["metadata"]["creationTimestamp"]);
    // Audit times have microseconds, creation times whole seconds: compare to the second.
    assert!(
        first_eviction[..19] >= node_created[..19],
        "first eviction at {first_eviction} before the room came at {node_created}"
    );
    // The harness's scheduler shares the admin's identity; its user agent tells it apart.
    let preempted: Vec<String> = cluster
        .audit_events()
        .into_iter()
        .filter(|e| {
            e["verb"] == "delete"
                && e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["namespace"] == "rotor-system"
                && e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("kube-scheduler/"))
                && e["responseStatus"]["code"] == 200
        })
        .map(|e| text(&e["objectRef"]["name"]))
        .collect();
    assert_eq!(
        preempted,
        Vec::<String>::new(),
        "the scheduler preempted no placeholder: the room was free when the replacements came"
    );
    let deleted_elsewhere: Vec<_> = pod_requests(&cluster, DRAINER, "delete", None)
        .into_iter()
        .filter(|(_, ns, _)| ns != "rotor-system")
        .collect();
    assert_eq!(
        deleted_elsewhere,
        Vec::new(),
        "rotor-drainer deleted workload pods"
    );
    assert_eq!(
        cluster.refusals(DRAINER, 0),
        Vec::<String>::new(),
        "the shipped RBAC refused requests"
    );

    let reasons = event_reasons(&cluster, "old-1");
    let position = |r: &str| reasons.iter().position(|x| x == r);
    assert!(
        position("SurgeReady").is_some() && position("SurgeReady") < position("Drained"),
        "events on old-1: {reasons:?}"
    );
    wait_until(
        "the placeholders to be removed",
        Duration::from_secs(30),
        || {
            pods(&cluster, "rotor-system", PLACEHOLDERS)
                .is_empty()
                .then_some(())
        },
    );
    eprintln!(
        "surge on the real control plane: old-1 drained in {:.1}s; placeholders {} ({} preempted by the scheduler); node {surge_node} added for them",
        drained_in.as_secs_f64(),
        created.len(),
        preempted.len()
    );

    // When the scheduler does preempt a placeholder, the drainer tells: one standing on a node
    // with room for it alone, then a pod of priority 0 that needs that room. The scheduler marks
    // the placeholder (DisruptionTarget, PreemptionByScheduler) before deleting it, and the
    // drainer's watch of the placeholders reads the mark.
    cluster.add_nodes(&[rotor_e2e::manifests::surge_node("spare")]);
    cluster.apply(PLACEHOLDER_BY_HAND);
    wait_until("the placeholder made by hand to be scheduled", WAIT, || {
        let pod = cluster.kubectl_json(&["get", "pod", "-n", "rotor-system", "by-hand"]);
        (pod["spec"]["nodeName"] == "spare").then_some(())
    });
    cluster.apply(NEEDS_THE_ROOM);
    let line = wait_until("the drainer to log the preemption", WAIT, || {
        drainer
            .log()
            .lines()
            .find(|l| l.contains("the scheduler preempted a placeholder"))
            .map(str::to_string)
    });
    assert!(line.contains("placeholder=by-hand"), "{line}");
    assert!(line.contains("--surge-ahead 0"), "says what to do: {line}");
    wait_until("the pod that needed the room to run on spare", WAIT, || {
        let pod = cluster.kubectl_json(&["get", "pod", "-n", "shop", "needs-the-room"]);
        (pod["spec"]["nodeName"] == "spare").then_some(())
    });
}

/// A pod shaped as rotor's placeholders are (labels, PriorityClass, the restricted Pod Security
/// Standard of rotor's namespace), made by hand, as much CPU as a 2-CPU node has room for once.
const PLACEHOLDER_BY_HAND: &str = r#"
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "by-hand", "namespace": "rotor-system",
   "labels": {"rotor.dev/surge-for": "spare", "app.kubernetes.io/managed-by": "rotor-drainer"},
   "annotations": {"rotor.dev/surge-node": "spare"}},
 "spec": {"priorityClassName": "rotor-surge", "terminationGracePeriodSeconds": 0,
   "securityContext": {"runAsNonRoot": true, "runAsUser": 65535, "seccompProfile": {"type": "RuntimeDefault"}},
   "containers": [{"name": "pause", "image": "pause:3",
     "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
     "resources": {"requests": {"cpu": "1500m", "memory": "64Mi"}}}]}}
"#;

/// A pod of priority 0 that fits only where [`PLACEHOLDER_BY_HAND`] stands.
const NEEDS_THE_ROOM: &str = r#"
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "needs-the-room", "namespace": "shop"},
 "spec": {"terminationGracePeriodSeconds": 0,
   "containers": [{"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "1500m", "memory": "64Mi"}}}]}}
"#;

#[test]
fn without_room_a_surge_times_out_the_drain_goes_on_and_no_placeholder_outlives_an_abort_or_a_crash()
 {
    let cluster = full_cluster();

    // Without its PriorityClass, --surge stops the drainer at start, saying how to get it.
    cluster.kubectl_ok(&["delete", "priorityclass", "rotor-surge"]);
    let mut refused = cluster.start_rotor_drainer("surge-0", &["--surge"]);
    let status = wait_until("the drainer to exit", Duration::from_secs(60), || {
        refused.exit_status()
    });
    let log = refused.log();
    assert!(!status.contains("exit status: 0"), "{status}\n{log}");
    assert!(
        log.contains(
            "--surge needs the PriorityClass rotor-surge, which does not exist; apply deploy/"
        ),
        "{log}"
    );
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    cluster.stop_shipped_drainer();

    let mut drainer = cluster.start_rotor_drainer("surge-b", &["--surge", "--surge-timeout", "5s"]);

    // No autoscaler: the placeholders wait, the surge gives up after 5 s and says so, and the
    // drain evicts anyway (as far as the budget lets it: the first replacement has no room).
    taint(&cluster, "old-1");
    let note = wait_until("a SurgeTimedOut Event on old-1", WAIT, || {
        event_note(&cluster, "old-1", "SurgeTimedOut")
    });
    assert!(
        note.contains("4 of 4 placeholder(s) were still unscheduled"),
        "{note}"
    );
    assert!(
        note.contains("Insufficient cpu"),
        "the scheduler's reason is quoted: {note}"
    );
    assert_eq!(pods(&cluster, "rotor-system", PLACEHOLDERS).len(), 4);
    wait_until("an eviction after the time-out", WAIT, || {
        (!pod_requests(&cluster, DRAINER, "create", Some("eviction")).is_empty()).then_some(())
    });

    // Abort: the taint goes while the drain runs; the placeholders go with rotor's cordon.
    untaint(&cluster, "old-1");
    wait_released(&cluster, "old-1", "the abort");
    // Removed by their label in one request each time the drain let go, never one by one.
    let collections = pod_requests(&cluster, DRAINER, "deletecollection", None);
    assert!(
        !collections.is_empty() && collections.iter().all(|(_, ns, _)| ns == "rotor-system"),
        "old-1's placeholders removed by deletecollection in rotor-system: {collections:?}"
    );
    assert_eq!(
        pod_requests(&cluster, DRAINER, "delete", None),
        Vec::new(),
        "pods deleted one by one"
    );

    // Crash: the drainer dies while old-2's placeholders wait; the taint is removed meanwhile.
    // The next drainer removes them: with old-2's drain started, as it undoes rotor's state on
    // old-2; with old-2 still held by the gate (its room made ahead, nothing on the node), in
    // the sweep every drainer runs as it starts.
    taint(&cluster, "old-2");
    wait_until("old-2's placeholders", WAIT, || {
        (pods(&cluster, "rotor-system", PLACEHOLDERS).len() == 4).then_some(())
    });
    drainer.kill();
    untaint(&cluster, "old-2");
    let next = cluster.start_rotor_drainer("surge-c", &["--surge", "--surge-timeout", "5s"]);
    wait_released(&cluster, "old-2", "the next drainer's clean-up");
    // The clean-up's log line may follow the release by a few milliseconds: wait for it.
    wait_until(
        "the next drainer to log the placeholders' removal",
        WAIT,
        || {
            let log = next.log();
            (log.contains("removed the node's placeholders")
                || log.contains("removed placeholders left by an earlier leader"))
            .then_some(())
        },
    );
    assert_eq!(
        cluster.refusals(DRAINER, 0),
        Vec::<String>::new(),
        "the shipped RBAC refused requests"
    );

    // A quota: rotor's namespace may hold 2 pods, so the third placeholder is refused. The
    // surge fails, says why, removes the two it made, and the drain goes on.
    cluster.apply(
        r#"{"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "two-pods", "namespace": "rotor-system"},
            "spec": {"hard": {"pods": "2"}}}"#,
    );
    wait_until("the quota to be counted", WAIT, || {
        let q = cluster.kubectl_json(&["get", "resourcequota", "two-pods", "-n", "rotor-system"]);
        (q["status"]["hard"]["pods"] == "2").then_some(())
    });
    let evictions_before = pod_requests(&cluster, DRAINER, "create", Some("eviction")).len();
    taint(&cluster, "old-1");
    let note = wait_until("a SurgeFailed Event on old-1", WAIT, || {
        event_note(&cluster, "old-1", "SurgeFailed")
    });
    assert!(note.contains("exceeded quota"), "{note}");
    assert!(note.contains("Evicting without making room"), "{note}");
    wait_until("an eviction after the failed surge", WAIT, || {
        (pod_requests(&cluster, DRAINER, "create", Some("eviction")).len() > evictions_before)
            .then_some(())
    });
    assert_eq!(
        pods(&cluster, "rotor-system", PLACEHOLDERS).len(),
        0,
        "the placeholders made before the refusal are removed"
    );
}
