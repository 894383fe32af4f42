//! rotor-drainer on a real Kubernetes control plane (etcd, kube-apiserver, controller-manager,
//! scheduler; kwok for the kubelets), running as the ServiceAccount `deploy/` ships under the
//! real RBAC authorizer. "No budget violated" is judged by an independent pod watch
//! ([`BudgetWatch`]) and "no pod deleted" by the apiserver's audit log.
//!
//! The control plane's binaries come from `tools/build.sh`; without them every test here fails
//! and says how to build them.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use rotor_e2e::budget_watch::BudgetVerdict;
use rotor_e2e::fault_proxy::{FaultProxy, Faults};
use rotor_e2e::manifests::{deployment, min_available_budget};
use rotor_e2e::{
    Background, BudgetWatch, FakeNode, RealCluster, WatchedBudget, wait_until, workspace_root,
};
use serde_json::Value;

use rotor_e2e::real_cluster::{ROTOR_NAMESPACE as NS, is_ready};
const DRAINER: &str = "system:serviceaccount:rotor-system:rotor-drainer";
const WAIT: Duration = Duration::from_secs(180);

/// Pods of tests/manifests/shop.yaml, the DaemonSet's excepted.
const SHOP_PODS: usize = 6 + 4 + 3;

/// The budgets of tests/manifests/shop.yaml as the independent watch judges them.
fn shop_budgets() -> Vec<WatchedBudget> {
    vec![
        // maxUnavailable 1 of 6 replicas.
        WatchedBudget::app("shop", "web", 5),
        WatchedBudget::app("shop", "api", 3),
        // minAvailable 66% of 3, rounded up.
        WatchedBudget::app("shop", "db", 2),
    ]
}

/// A real cluster with rotor's kubernetes overlay applied (server-side), the shop workload
/// Running and Ready on `old` nodes, then as many `new` nodes to move to.
struct Shop {
    cluster: RealCluster,
    old: Vec<String>,
}

impl Shop {
    fn start(old: usize) -> Shop {
        Shop::start_with(old, "")
    }

    /// With `extra` YAML applied beside the shop workload.
    fn start_with(old: usize, extra: &str) -> Shop {
        Shop::start_in("deploy/overlays/kubernetes", old, extra)
    }

    /// With rotor installed from `overlay` (a kustomization relative to the workspace root).
    fn start_in(overlay: &str, old: usize, extra: &str) -> Shop {
        Shop::start_on(RealCluster::start(), overlay, old, extra)
    }

    /// On a control plane whose kube-apiserver also gets `apiserver_flags`.
    fn start_with_apiserver_flags(old: usize, apiserver_flags: &[&str]) -> Shop {
        let cluster = RealCluster::start_with_apiserver_flags(Default::default(), apiserver_flags);
        Shop::start_on(cluster, "deploy/overlays/kubernetes", old, "")
    }

    fn start_on(cluster: RealCluster, overlay: &str, old: usize, extra: &str) -> Shop {
        cluster.apply_kustomize_ok(overlay);
        let old: Vec<String> = (1..=old).map(|i| format!("old-{i}")).collect();
        let nodes: Vec<FakeNode> = old.iter().map(|n| FakeNode::behind(n)).collect();
        cluster.add_nodes(&nodes);
        let shop = std::fs::read_to_string(workspace_root().join("tests/manifests/shop.yaml"))
            .expect("read shop.yaml");
        cluster.apply(&format!("{shop}\n---\n{extra}"));
        let expected = SHOP_PODS + old.len() + extra.matches("kind: Pod\n").count();
        wait_until("the shop's pods to be Ready", WAIT, || {
            (ready_pods(&cluster, "shop") >= expected).then_some(())
        });
        let new: Vec<FakeNode> = (1..=old.len())
            .map(|i| FakeNode::new(&format!("new-{i}")))
            .collect();
        cluster.add_nodes(&new);
        Shop { cluster, old }
    }

    fn drainer(&self, identity: &str, flags: &[&str]) -> Background {
        self.cluster.start_rotor_drainer(identity, flags)
    }

    fn taint(&self, node: &str) {
        self.cluster
            .kubectl_ok(&["taint", "node", node, "rotor.dev/drain=manual:NoSchedule"]);
    }

    fn watch(&self) -> BudgetWatch {
        BudgetWatch::start(
            &self.cluster.kubectl_bin(),
            self.cluster.admin_kubeconfig(),
            shop_budgets(),
        )
    }
}

fn ready_pods(cluster: &RealCluster, ns: &str) -> usize {
    cluster.kubectl_json(&["get", "pods", "-n", ns])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null() && is_ready(p))
        .count()
}

fn node(cluster: &RealCluster, name: &str) -> Value {
    cluster.kubectl_json(&["get", "node", name])
}

fn annotation(cluster: &RealCluster, node_name: &str, key: &str) -> Option<String> {
    node(cluster, node_name)["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_string)
}

fn wait_phase(cluster: &RealCluster, node_name: &str, phase: &str, timeout: Duration) {
    wait_until(
        &format!("{node_name} to reach phase {phase}"),
        timeout,
        || {
            (annotation(cluster, node_name, "rotor.dev/phase").as_deref() == Some(phase))
                .then_some(())
        },
    );
}

/// Pods on `node_name` other than DaemonSet pods.
fn movable_pods_on(cluster: &RealCluster, node_name: &str) -> Vec<String> {
    cluster.kubectl_json(&[
        "get",
        "pods",
        "-A",
        "--field-selector",
        &format!("spec.nodeName={node_name}"),
    ])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            !p["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["kind"] == "DaemonSet")
        })
        .map(|p| {
            format!(
                "{}/{}",
                p["metadata"]["namespace"].as_str().unwrap_or("?"),
                p["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// What the drainer's identity did, from the audit log: (evictions answered 201, pod deletes,
/// requests answered 403).
fn drainer_audit(cluster: &RealCluster) -> (usize, usize, Vec<String>) {
    let records = cluster.audit_by(DRAINER);
    let is = |e: &Value, verb: &str, sub: Option<&str>| {
        e["verb"] == verb
            && e["objectRef"]["resource"] == "pods"
            && e["objectRef"]["subresource"].as_str() == sub
    };
    let evictions = records
        .iter()
        .filter(|e| is(e, "create", Some("eviction")) && e["responseStatus"]["code"] == 201)
        .count();
    let deletes = records.iter().filter(|e| is(e, "delete", None)).count();
    let forbidden = cluster.refusals(DRAINER, 0);
    (evictions, deletes, forbidden)
}

/// The drainer's pod lists the API server read through to etcd rather than from its watch
/// cache (no `resourceVersion=0`), by request URI, from the drainer's audit `records`. A
/// drain's first list, the candidates' listing and the gate's Pending pods are all meant to
/// come from the cache.
fn consistent_pod_lists(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .filter(|e| {
            e["verb"] == "list"
                && e["objectRef"]["resource"] == "pods"
                && e["stage"] == "ResponseComplete"
        })
        .map(|e| e["requestURI"].as_str().unwrap_or_default().to_string())
        .filter(|uri| {
            !uri.split(['?', '&'])
                .any(|part| part == "resourceVersion=0")
        })
        .collect()
}

/// How the drainer read `node`'s pods once its drain had started (its first node write), from
/// its audit `records`: the request URIs of its lists and of its watches, and the status codes
/// of those watches.
struct PodReads {
    lists: Vec<String>,
    watches: Vec<(String, i64)>,
}

fn pod_reads_after_start(records: &[Value], node: &str) -> PodReads {
    let started = first_write(records, node);
    let wanted = format!("fieldSelector=spec.nodeName={node}");
    let selects = |uri: &str| {
        let decoded = uri.replace("%3D", "=");
        decoded.split(['?', '&']).any(|part| part == wanted)
    };
    let reads: Vec<&Value> = records
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "pods"
                && e["stage"] == "ResponseComplete"
                && selects(e["requestURI"].as_str().unwrap_or_default())
                && received(e) >= started
        })
        .collect();
    let uri = |e: &&Value| e["requestURI"].as_str().unwrap_or_default().to_string();
    PodReads {
        lists: reads
            .iter()
            .filter(|e| e["verb"] == "list")
            .map(uri)
            .collect(),
        watches: reads
            .iter()
            .filter(|e| e["verb"] == "watch")
            .map(|e| {
                (
                    uri(e),
                    e["responseStatus"]["code"].as_i64().unwrap_or_default(),
                )
            })
            .collect(),
    }
}

/// The drainer's reads of `node`'s pods over the whole run, from all its audit `records` (every
/// stage): the URIs of its lists, and of its watches with when each began (its
/// `ResponseStarted` record, written as the watch opens, while it may still be open).
struct AllPodReads {
    lists: Vec<String>,
    watches: Vec<(String, String)>,
}

fn pod_reads(records: &[Value], node: &str) -> AllPodReads {
    let wanted = format!("spec.nodeName={node}");
    let of_node = |e: &&Value| {
        e["objectRef"]["resource"] == "pods"
            && selects(
                &e["requestURI"]
                    .as_str()
                    .unwrap_or_default()
                    .replace("%3D", "="),
                &format!("fieldSelector={wanted}"),
            )
    };
    let uri = |e: &Value| e["requestURI"].as_str().unwrap_or_default().to_string();
    AllPodReads {
        lists: records
            .iter()
            .filter(of_node)
            .filter(|e| e["verb"] == "list" && e["stage"] == "ResponseComplete")
            .map(uri)
            .collect(),
        watches: records
            .iter()
            .filter(of_node)
            .filter(|e| e["verb"] == "watch" && e["stage"] == "ResponseStarted")
            .map(|e| (uri(e), received(e)))
            .collect(),
    }
}

fn received(e: &Value) -> String {
    e["requestReceivedTimestamp"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn patches_node(e: &Value, node: &str) -> bool {
    e["verb"] == "patch" && e["objectRef"]["resource"] == "nodes" && e["objectRef"]["name"] == node
}

/// When the drainer first wrote `node` (its drain's start), from its audit `records`.
fn first_write(records: &[Value], node: &str) -> String {
    records
        .iter()
        .filter(|e| patches_node(e, node))
        .map(received)
        .min()
        .unwrap_or_else(|| panic!("the drainer never wrote {node}"))
}

/// The gate's reads of pending pods, from the drainer's audit `records`: each request's verb,
/// its URI with `=` and `,` decoded, and its status code.
fn gate_reads(records: &[Value]) -> Vec<(String, String, i64)> {
    records
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "pods")
        .map(|e| {
            let uri = e["requestURI"].as_str().unwrap_or_default();
            (
                e["verb"].as_str().unwrap_or_default().to_string(),
                uri.replace("%3D", "=").replace("%2C", ","),
                e["responseStatus"]["code"].as_i64().unwrap_or_default(),
            )
        })
        .filter(|(_, uri, _)| uri.contains("fieldSelector=status.phase=Pending"))
        .collect()
}

/// What the gate asks the API server for: Pending pods that no node holds.
const GATE_SELECTOR: &str = "fieldSelector=status.phase=Pending,spec.nodeName=";

fn selects(uri: &str, selector: &str) -> bool {
    uri.split(['?', '&']).any(|part| part == selector)
}

/// How many writes to `node` the API server accepted from the drainer, from its audit
/// `records`.
fn node_writes(records: &[Value], node: &str) -> usize {
    records
        .iter()
        .filter(|e| {
            patches_node(e, node)
                && e["stage"] == "ResponseComplete"
                && e["responseStatus"]["code"] == 200
        })
        .count()
}

fn assert_no_violation(verdict: &BudgetVerdict) {
    assert!(
        verdict.never_armed.is_empty(),
        "budgets never met before the drain (set-up error): {:?}",
        verdict.never_armed
    );
    assert!(
        verdict.violations.is_empty(),
        "budgets violated: {:#?}",
        verdict.violations
    );
}

#[test]
fn given_every_old_node_tainted_then_rotor_drains_them_all_within_every_budget_without_deleting_a_pod()
 {
    let shop = Shop::start(3);
    let cluster = &shop.cluster;
    let db_uids_before = pod_uids(cluster, "app=db");
    let watch = shop.watch();
    let drainer = shop.drainer("e2e-a", &["--max-concurrent", "2"]);
    let started = Instant::now();
    for n in &shop.old {
        shop.taint(n);
    }
    for n in &shop.old {
        wait_phase(cluster, n, "drained", WAIT);
    }
    let took = started.elapsed();
    let verdict = watch.finish();
    assert_no_violation(&verdict);

    for n in &shop.old {
        assert_eq!(
            movable_pods_on(cluster, n),
            Vec::<String>::new(),
            "{n} is empty"
        );
        let spec = &node(cluster, n)["spec"];
        assert_eq!(
            spec["unschedulable"], true,
            "{n} stays cordoned while tainted"
        );
    }
    // Every workload is whole again, on the new nodes.
    wait_until("the shop to be Ready again", WAIT, || {
        (ready_pods(cluster, "shop") >= SHOP_PODS + 2 * shop.old.len()).then_some(())
    });
    // The StatefulSet's pods came back under their own names, with new UIDs: rotor evicted
    // each once and did not chase the namesake.
    let db_uids_after = pod_uids(cluster, "app=db");
    let names = |v: &[(String, String)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&db_uids_before), names(&db_uids_after));
    assert!(
        db_uids_before
            .iter()
            .zip(&db_uids_after)
            .all(|(a, b)| a.1 != b.1),
        "every db pod was replaced: {db_uids_before:?} -> {db_uids_after:?}"
    );

    let (evictions, deletes, forbidden) = drainer_audit(cluster);
    assert!(
        evictions >= SHOP_PODS,
        "the audit log shows {evictions} evictions by rotor-drainer"
    );
    assert_eq!(
        deletes, 0,
        "rotor-drainer deleted pods outside the Eviction API"
    );
    assert_eq!(
        forbidden,
        Vec::<String>::new(),
        "the shipped RBAC refused requests"
    );
    let records = cluster.audit_by(DRAINER);
    assert_eq!(
        consistent_pod_lists(&records),
        Vec::<String>::new(),
        "pod lists read through to etcd instead of the watch cache"
    );
    let all_records: Vec<Value> = cluster
        .audit_events()
        .into_iter()
        .filter(|e| e["user"]["username"] == DRAINER)
        .collect();
    let mut weighed_before_start = 0;
    assert!(drainer.log().contains("drained"), "{}", drainer.log());
    // web's and api's budgets allow one eviction each, and a node holds two of their pods:
    // the drains waited on them (a budget the cache showed spent, or a 429) ...
    assert!(
        drainer.log().contains("waiting for it to allow one"),
        "no drain waited on a budget: {}",
        drainer.log()
    );
    // ... at the budgets' pace, which is not a block (--blocked-after, 30 s): no node turned
    // `blocked`, no DrainBlocked Warning Event, and each node was written twice, its start
    // with the cordon and its end.
    for n in &shop.old {
        assert_eq!(
            cluster.node_event_notes(n, "DrainBlocked"),
            Vec::<String>::new(),
            "{n}"
        );
        assert_eq!(node_writes(&records, n), 2, "writes to {n}");
        // The node's pods were read with one request in all, by the choice that weighed it
        // or by its drain: a watch that began with them, which the drain went on with.
        // (A watch that timed out or failed resumes from where it was, without its pods.)
        let reads = pod_reads(&all_records, n);
        assert_eq!(reads.lists, Vec::<String>::new(), "{n}'s pods listed");
        let streamed: Vec<&(String, String)> = reads
            .watches
            .iter()
            .filter(|(uri, _)| uri.contains("sendInitialEvents=true"))
            .collect();
        assert!(
            streamed.len() == 1,
            "{n}'s pods were not read with one streaming watch: {:?}",
            reads.watches
        );
        if streamed[0].1 < first_write(&records, n) {
            weighed_before_start += 1;
        }
    }
    // Two slots for three nodes: the choice weighed them, and the drains took its watches.
    assert!(
        weighed_before_start >= 1,
        "no node's pods were read before its drain started: the choice never weighed them"
    );
    eprintln!(
        "real control plane: {} nodes drained in {:.1}s, {evictions} evictions, 0 violations \
         ({} watch events, lowest healthy {:?})",
        shop.old.len(),
        took.as_secs_f64(),
        verdict.events,
        verdict.lowest
    );
}

/// Kubernetes 1.33, and any API server with the WatchList feature gate off, refuses a watch that
/// begins with the current objects; the drain must then list its node's pods and watch them.
#[test]
fn given_an_api_server_without_streaming_watches_then_the_drain_lists_its_pods_and_still_drains() {
    let shop = Shop::start_with_apiserver_flags(1, &["--feature-gates=WatchList=false"]);
    let cluster = &shop.cluster;
    let watch = shop.watch();
    let drainer = shop.drainer("e2e-a", &[]);
    let n = &shop.old[0];
    shop.taint(n);
    wait_phase(cluster, n, "drained", WAIT);
    assert_no_violation(&watch.finish());
    assert_eq!(
        movable_pods_on(cluster, n),
        Vec::<String>::new(),
        "{n} is empty"
    );

    let reads = pod_reads_after_start(&cluster.audit_by(DRAINER), n);
    let refused: Vec<&(String, i64)> = reads
        .watches
        .iter()
        .filter(|(uri, _)| uri.contains("sendInitialEvents=true"))
        .collect();
    assert!(
        !refused.is_empty() && refused.iter().all(|(_, code)| *code == 422),
        "the drain first asked for a streaming watch and was refused (422): {:?}",
        reads.watches
    );
    assert_eq!(
        reads.lists.len(),
        1,
        "then listed {n}'s pods once, from the watch cache: {:?}",
        reads.lists
    );
    assert!(
        reads.lists[0].contains("resourceVersion=0"),
        "{:?}",
        reads.lists
    );
    assert!(
        reads
            .watches
            .iter()
            .any(|(uri, code)| !uri.contains("sendInitialEvents") && *code == 200),
        "and watched them: {:?}",
        reads.watches
    );
    assert!(
        drainer
            .log()
            .contains("drains list each node's pods, then watch them"),
        "the fallback is logged once: {}",
        drainer.log()
    );

    // The gate's read of pending pods falls back the same way, to one list from the cache.
    let gate = gate_reads(&cluster.audit_by(DRAINER));
    let refused = gate.iter().position(|(verb, uri, code)| {
        verb == "watch" && uri.contains("sendInitialEvents=true") && *code == 422
    });
    let listed = gate.iter().position(|(verb, uri, code)| {
        verb == "list"
            && selects(uri, GATE_SELECTOR)
            && selects(uri, "resourceVersion=0")
            && *code == 200
    });
    assert!(
        matches!((refused, listed), (Some(r), Some(l)) if r < l),
        "the gate's streaming read was refused, then it listed: {gate:?}"
    );
    assert!(
        drainer
            .log()
            .contains("the gate lists the pending pods instead"),
        "{}",
        drainer.log()
    );
}

/// A fresh drain starts from the node watch's copy of its node, not a new read. When the node
/// changed after that copy, the start write (guarded by the copy's resourceVersion) conflicts;
/// the node is read again and started only if it still wants the drain. Here the copy is read,
/// then both nodes change: one only gains a label, the other also loses its drain taint.
#[test]
fn given_a_stale_copy_of_a_node_then_its_start_write_reads_it_again_and_checks_it_still_wants_the_drain()
 {
    use k8s_openapi::api::core::v1::Node;
    use rotor_drainer::record::node::{DrainRecord, Intent, Transition, apply, still_due};
    use rotor_drainer::record::node_io::{StartWrite, start_and_cordon};

    let cluster = RealCluster::start();
    let (due, untainted) = ("stale-due", "stale-untainted");
    cluster.add_nodes(&[FakeNode::new(due), FakeNode::new(untainted)]);
    for n in [due, untainted] {
        cluster.kubectl_ok(&["taint", "node", n, "rotor.dev/drain=manual:NoSchedule"]);
    }
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let nodes: kube::Api<Node> = runtime.block_on(async {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(cluster.admin_kubeconfig()).expect("kubeconfig"),
            &Default::default(),
        )
        .await
        .expect("an admin client config");
        kube::Api::all(kube::Client::try_from(config).expect("an admin client"))
    });
    let stale = |n: &str| runtime.block_on(nodes.get(n)).expect("read the node");
    let (stale_due, stale_untainted) = (stale(due), stale(untainted));
    cluster.kubectl_ok(&["label", "node", due, "changed=after-the-copy"]);
    cluster.kubectl_ok(&["label", "node", untainted, "changed=after-the-copy"]);
    cluster.kubectl_ok(&["taint", "node", untainted, "rotor.dev/drain-"]);

    let now = Timestamp::now();
    let started = apply(
        &DrainRecord::default(),
        Transition::Start {
            now,
            drain_timeout: Duration::from_secs(600),
        },
    );
    let start = |n: &str, copy: &Node| {
        runtime.block_on(start_and_cordon(&nodes, n, copy, &started, None, |fresh| {
            still_due(Intent::Start, fresh, now)
        }))
    };
    match start(due, &stale_due).expect("the start write") {
        StartWrite::Written(record) => assert!(record.cordoned_by_rotor, "{record:?}"),
        other => panic!("{due} still wants its drain: {other:?}"),
    }
    assert_eq!(node(&cluster, due)["spec"]["unschedulable"], true);
    assert!(annotation(&cluster, due, "rotor.dev/phase").is_some());
    assert_eq!(
        node(&cluster, due)["metadata"]["labels"]["changed"],
        "after-the-copy"
    );

    match start(untainted, &stale_untainted).expect("the start write") {
        StartWrite::NotDue(why) => assert_eq!(why, "the node's drain taint is gone"),
        other => panic!("{untainted} lost its taint, yet: {other:?}"),
    }
    assert_ne!(
        node(&cluster, untainted)["spec"]["unschedulable"],
        true,
        "not cordoned"
    );
    assert_eq!(
        annotation(&cluster, untainted, "rotor.dev/phase"),
        None,
        "no record written"
    );
}

fn pod_uids(cluster: &RealCluster, selector: &str) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = cluster
        .kubectl_json(&["get", "pods", "-n", "shop", "-l", selector])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                p["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Waits until `node` is blocked with `pod` the only movable pod left on it; its blocker.
fn blocked_on_only(cluster: &RealCluster, node: &str, pod: &str) -> String {
    wait_until(&format!("{node} to block on {pod}"), WAIT, || {
        let phase = annotation(cluster, node, "rotor.dev/phase");
        let left = movable_pods_on(cluster, node);
        (phase.as_deref() == Some("blocked") && left == [pod])
            .then(|| annotation(cluster, node, "rotor.dev/blocker"))
            .flatten()
    })
}

/// A pod named `name` on `node` that no controller owns, with `annotations`.
fn bare_pod(name: &str, node: &str, annotations: &str) -> String {
    pod_of_app(name, name, node, annotations)
}

/// A pod named `name`, labelled `app: {app}`, on `node`, that no controller owns.
fn pod_of_app(name: &str, app: &str, node: &str, annotations: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: shop
  labels: {{app: {app}}}
  annotations: {annotations}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers: [{{name: app, image: app:1}}]
"
    )
}

/// A pod of the `quorum` set (bare, so nothing replaces it) on `node`.
fn quorum_pod(name: &str, node: &str) -> String {
    pod_of_app(name, "quorum", node, "{}")
}

#[test]
fn given_a_budget_one_pod_short_for_a_moment_then_the_drain_waits_on_it_instead_of_calling_it_stuck()
 {
    // An integer minAvailable is measured against the pods the budget matches right now: three
    // pods under minAvailable 3 read as "can never allow" until a fourth arrives, as happens for
    // an instant whenever an evicted pod is gone before its replacement exists.
    let shop = Shop::start_with(1, &quorum_pod("quorum-1", "old-1"));
    let cluster = &shop.cluster;
    let webhook = rotor_e2e::health_peers::TestEndpoint::start(204, "");
    let drainer = shop.drainer("e2e-a", &["--notify-webhook", webhook.url()]);
    cluster.apply(&format!(
        "{}---\n{}---\n{}",
        quorum_pod("quorum-2", "new-1"),
        quorum_pod("quorum-3", "new-1"),
        min_available_budget("shop", "quorum", 3)
    ));
    wait_until(
        "the quorum budget to count three pods and allow none",
        WAIT,
        || {
            let status =
                cluster.kubectl_json(&["get", "pdb", "quorum", "-n", "shop"])["status"].clone();
            (status["expectedPods"] == 3 && status["disruptionsAllowed"] == 0).then_some(())
        },
    );
    shop.taint("old-1");
    // Once the drain has read the budget at three pods, the fourth arrives.
    let first_word = wait_until("the drain to read quorum-1's budget", WAIT, || {
        drainer
            .log()
            .lines()
            .find(|l| {
                (l.contains("shop/quorum-1") && l.contains("waiting for it to allow one"))
                    || (l.contains("drain blocked") && l.contains("shop/quorum"))
            })
            .map(str::to_owned)
    });
    assert!(
        first_word.contains("waiting for it to allow one"),
        "the drain should wait on the budget, not block: {first_word}"
    );
    cluster.apply(&quorum_pod("quorum-4", "new-1"));
    wait_phase(cluster, "old-1", "drained", WAIT);

    let blocked = cluster.node_event_notes("old-1", "DrainBlocked");
    assert!(
        blocked.iter().all(|b| !b.contains("never allow")),
        "a budget one pod short for seconds was called one that never allows: {blocked:?}"
    );
    assert!(
        webhook.bodies().iter().all(|b| !b.contains("NodeStuck")),
        "{:?}",
        webhook.bodies()
    );
    let quorum_1 = cluster.kubectl(&["get", "pod", "quorum-1", "-n", "shop"]);
    assert!(!quorum_1.status.success(), "quorum-1 was evicted");
}

#[test]
fn given_a_do_not_disrupt_pod_then_the_node_blocks_naming_it_until_the_opt_out_goes() {
    let shop = Shop::start_with(
        1,
        &bare_pod(
            "precious",
            "old-1",
            "{karpenter.sh/do-not-disrupt: \"true\"}",
        ),
    );
    let cluster = &shop.cluster;
    let webhook = rotor_e2e::health_peers::TestEndpoint::start(204, "");
    let _drainer = shop.drainer("e2e-a", &["--notify-webhook", webhook.url()]);
    shop.taint("old-1");
    let blocker = blocked_on_only(cluster, "old-1", "shop/precious");
    assert!(
        blocker.contains("shop/precious") && blocker.contains("karpenter.sh/do-not-disrupt"),
        "{blocker}"
    );
    // Waiting will not clear an opt-out: the webhook hears the node is stuck, and why.
    let stuck = wait_until("a NodeStuck notice", WAIT, || {
        webhook
            .bodies()
            .into_iter()
            .find(|b| b.contains("NodeStuck"))
    });
    let stuck: Value = serde_json::from_str(&stuck).expect("JSON");
    assert_eq!(stuck["node"], "old-1", "{stuck}");
    assert!(
        stuck["detail"].as_str().unwrap().contains("shop/precious"),
        "{stuck}"
    );
    let pod = cluster.kubectl_json(&["get", "pod", "precious", "-n", "shop"]);
    assert!(
        pod["metadata"]["deletionTimestamp"].is_null(),
        "a do-not-disrupt pod is never evicted"
    );

    // The opt-out is taken away: an unowned pod is then evicted like any other (nothing
    // recreates it, which is what the operator accepted by removing the annotation).
    cluster.kubectl_ok(&[
        "annotate",
        "pod",
        "precious",
        "-n",
        "shop",
        "karpenter.sh/do-not-disrupt-",
    ]);
    wait_phase(cluster, "old-1", "drained", WAIT);
    let (_, deletes, forbidden) = drainer_audit(cluster);
    assert_eq!((deletes, forbidden), (0, Vec::new()));
}

#[test]
fn given_a_replace_by_time_then_an_opted_out_pod_holds_the_node_only_until_it_passes() {
    let shop = Shop::start_with(
        1,
        &bare_pod("precious", "old-1", "{rotor.dev/do-not-disrupt: \"true\"}"),
    );
    let cluster = &shop.cluster;
    // The deadline is 40 s away: inside the hour of warning from the start.
    let replace_by = Timestamp::from_second(Timestamp::now().as_second() + 40).unwrap();
    cluster.kubectl_ok(&[
        "annotate",
        "node",
        "old-1",
        &format!("rotor.dev/replace-by={replace_by}"),
    ]);
    let _drainer = shop.drainer(
        "e2e-a",
        &["--enforce-replace-by", "--replace-by-warning", "1h"],
    );
    shop.taint("old-1");
    blocked_on_only(cluster, "old-1", "shop/precious");
    // Warned before, on the node and on the pod.
    let near = wait_until("a ReplaceByNear Event on the node", WAIT, || {
        let notes = cluster.node_event_notes("old-1", "ReplaceByNear");
        notes.into_iter().next()
    });
    assert!(
        near.contains(&replace_by.to_string()) && near.contains("shop/precious"),
        "{near}"
    );
    let on_pod = cluster.events_of("shop", "precious");
    assert!(
        on_pod.iter().any(|(reason, _)| reason == "ReplaceByNear"),
        "{on_pod:?}"
    );
    let pod = cluster.kubectl_json(&["get", "pod", "precious", "-n", "shop"]);
    assert!(
        pod["metadata"]["deletionTimestamp"].is_null(),
        "not before the deadline"
    );

    // Past it, the opt-out no longer holds: evicted through the API, never deleted.
    wait_phase(cluster, "old-1", "drained", WAIT);
    let passed = cluster.node_event_notes("old-1", "ReplaceByPassed");
    assert_eq!(passed.len(), 1, "{passed:?}");
    assert!(Timestamp::now() >= replace_by);
    let (_, deletes, forbidden) = drainer_audit(cluster);
    assert_eq!((deletes, forbidden), (0, Vec::new()));
}

/// A change freeze as clusters write it: a ValidatingAdmissionPolicy that refuses the eviction
/// of one pod. The API server answers 422 (the policy's default reason), naming the policy.
const FREEZE_POLICY: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: change-freeze}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods/eviction]}
  validations:
  - {expression: \"object.metadata.name != 'frozen'\", message: the change freeze holds this pod}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: change-freeze-all}
spec:
  policyName: change-freeze
  validationActions: [Deny]
";

#[test]
fn given_an_admission_policy_refusing_an_eviction_then_the_node_blocks_naming_the_policy_not_rbac()
{
    let shop = Shop::start_with(
        1,
        &format!(
            "{}\n---\n{FREEZE_POLICY}",
            bare_pod("frozen", "old-1", "{}")
        ),
    );
    let cluster = &shop.cluster;
    // The API server loads policies in the background: wait until it refuses a dry-run
    // eviction, so the drainer's first try meets the policy.
    let scratch = rotor_e2e::TestDir::new("freeze");
    let eviction = scratch.join("eviction.json");
    std::fs::write(
        &eviction,
        r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"frozen","namespace":"shop"}}"#,
    )
    .expect("write eviction.json");
    let path = "/api/v1/namespaces/shop/pods/frozen/eviction?dryRun=All";
    wait_until(
        "the freeze policy to refuse a dry-run eviction",
        WAIT,
        || {
            let out =
                cluster.kubectl(&["create", "--raw", path, "-f", &eviction.to_string_lossy()]);
            let said = String::from_utf8_lossy(&out.stderr).into_owned();
            (!out.status.success() && said.contains("change-freeze")).then_some(())
        },
    );

    let _drainer = shop.drainer("e2e-a", &[]);
    shop.taint("old-1");
    let blocker = blocked_on_only(cluster, "old-1", "shop/frozen");
    assert!(
        blocker.contains("shop/frozen")
            && blocker.contains("ValidatingAdmissionPolicy change-freeze refuses it")
            && blocker.contains("the change freeze holds this pod")
            && !blocker.contains("drainer-rbac"),
        "the blocker names the policy, not RBAC: {blocker}"
    );
    let events = cluster
        .node_event_notes("old-1", "DrainBlocked")
        .join(" | ");
    assert!(
        events.contains("change-freeze"),
        "a DrainBlocked Event names the policy: {events}"
    );

    // The freeze ends: the drain goes on, by eviction.
    cluster.kubectl_ok(&[
        "delete",
        "validatingadmissionpolicybinding",
        "change-freeze-all",
    ]);
    wait_phase(cluster, "old-1", "drained", WAIT);
    let (_, deletes, forbidden) = drainer_audit(cluster);
    assert_eq!((deletes, forbidden), (0, Vec::new()));
}

/// A held node is untouched: not cordoned, no drain recorded, its pods still there.
fn assert_untouched(cluster: &RealCluster, name: &str, stage: &str) {
    let held = node(cluster, name);
    assert!(held["spec"]["unschedulable"].is_null(), "{stage}: {held}");
    assert_eq!(
        annotation(cluster, name, "rotor.dev/phase"),
        None,
        "{stage}"
    );
    assert!(!movable_pods_on(cluster, name).is_empty(), "{stage}");
}

/// The messages of the DrainHeld Events posted on `node` so far.
fn held_events(cluster: &RealCluster, node: &str) -> Vec<String> {
    cluster.node_event_notes(node, "DrainHeld")
}

#[test]
fn given_a_pre_drain_hook_and_required_approval_then_the_drain_waits_untouched_saying_why_until_both_go()
 {
    let shop = Shop::start(1);
    let cluster = &shop.cluster;
    let hook = "pre-drain.hook.rotor.dev/volume-backup";
    cluster.kubectl_ok(&[
        "annotate",
        "node",
        "old-1",
        &format!("{hook}=backup-operator"),
    ]);
    let _drainer = shop.drainer("e2e-a", &["--require-approval"]);
    shop.taint("old-1");
    let said = wait_until("a DrainHeld Event naming the hook", WAIT, || {
        let events = held_events(cluster, "old-1");
        (!events.is_empty()).then_some(events)
    });
    assert!(
        said[0].contains("volume-backup (owner backup-operator)"),
        "the Event names the hook and its owner: {said:?}"
    );
    assert_untouched(cluster, "old-1", "held by the hook");

    // The hook's owner is done; the node still waits for its approval, and says so.
    cluster.kubectl_ok(&["annotate", "node", "old-1", &format!("{hook}-")]);
    let approval = "annotate the node rotor.dev/drain-approved=true";
    wait_until("a second DrainHeld Event, for the approval", WAIT, || {
        let events = held_events(cluster, "old-1");
        (events.len() >= 2 && events.iter().any(|m| m.contains(approval))).then_some(())
    });
    assert_untouched(cluster, "old-1", "waiting for approval");

    // Approved: the drain starts and completes.
    cluster.kubectl_ok(&["annotate", "node", "old-1", "rotor.dev/drain-approved=true"]);
    wait_phase(cluster, "old-1", "drained", WAIT);
}

/// `rotor-drainer <args>` run by an operator: as the admin, killed after 30 s.
fn drainer_cli(cluster: &RealCluster, args: &[&str]) -> std::process::Output {
    rotor_e2e::run_with_timeout(
        std::process::Command::new(rotor_e2e::binary("rotor-drainer"))
            .arg("--kubeconfig")
            .arg(cluster.admin_kubeconfig())
            .args(args),
        Duration::from_secs(30),
    )
}

/// `rotor-drainer status --output json`, run as the admin.
fn status_json(cluster: &RealCluster) -> Value {
    let out = drainer_cli(
        cluster,
        &["status", "--output", "json", "--lease-namespace", NS],
    );
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("status --output json is JSON")
}

/// The health gate's reason as `status` shows it, once it is closed.
fn health_gate_closed(cluster: &RealCluster, what: &str, until: impl Fn(&str) -> bool) -> String {
    wait_until(what, WAIT, || {
        let gate = &status_json(cluster)["rotation"]["healthGate"];
        let reason = gate["reason"].as_str().unwrap_or_default().to_string();
        (gate["open"] == false && until(&reason)).then_some(reason)
    })
}

#[test]
fn given_a_firing_alert_or_an_unhealthy_url_then_no_drain_starts_until_both_are_healthy() {
    let shop = Shop::start(1);
    let cluster = &shop.cluster;
    // Watchdog always fires in kube-prometheus; the default selector leaves it out.
    let watchdog = "- alert: Watchdog\n  expr: vector(1)\n";
    let burning =
        "- alert: CheckoutErrorBudgetBurn\n  expr: vector(1)\n  labels:\n    severity: critical\n";
    let mut prometheus =
        rotor_e2e::health_peers::Prometheus::start(&format!("{watchdog}{burning}"));
    prometheus.wait_firing(&["CheckoutErrorBudgetBurn", "Watchdog"]);
    let url = rotor_e2e::health_peers::TestEndpoint::start(503, "schema migration in progress\n");
    // Credentials in a URL are sent, never shown.
    let with_password = url.url().replace("http://", "http://probe:s3cret@");
    let drainer = shop.drainer(
        "e2e-a",
        &[
            "--health-prometheus",
            prometheus.url(),
            "--health-url",
            &with_password,
            "--health-interval",
            "1s",
            "--health-timeout",
            "1s",
        ],
    );
    shop.taint("old-1");
    let reason = health_gate_closed(
        cluster,
        "status to show the gate closed by both checks",
        |r| r.contains("CheckoutErrorBudgetBurn") && r.contains("schema migration in progress"),
    );
    assert!(!reason.contains("Watchdog"), "{reason}");
    assert!(reason.contains("answered 503"), "{reason}");
    // The node's own row says why it waits, as the leader last judged.
    let row = wait_until("old-1's status row to say why it waits", WAIT, || {
        let status = status_json(cluster);
        let detail = status["nodes"][0]["detail"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        detail
            .starts_with("waiting: health gate closed")
            .then_some(detail)
    });
    assert!(row.contains("CheckoutErrorBudgetBurn"), "{row}");
    assert_untouched(cluster, "old-1", "alert firing and URL unhealthy");

    // The alert resolves: the URL alone still holds the drain.
    prometheus.set_rules(watchdog);
    prometheus.wait_firing(&["Watchdog"]);
    let reason = health_gate_closed(cluster, "the gate closed by the URL alone", |r| {
        !r.contains("CheckoutErrorBudgetBurn")
    });
    assert!(reason.contains("schema migration in progress"), "{reason}");
    assert_untouched(cluster, "old-1", "URL unhealthy");

    // Healthy: the drain starts and completes; the record says open.
    url.answer(200, "ok");
    wait_phase(cluster, "old-1", "drained", WAIT);
    let gate = &status_json(cluster)["rotation"]["healthGate"];
    assert_eq!(gate["open"], true, "{gate}");
    let record = cluster.kubectl_json(&["get", "configmap", "rotor-drainer-rotation", "-n", NS]);
    assert_eq!(record["data"]["healthGate"], "open", "{record}");
    assert!(url.requests() >= 3, "the URL was asked at each stage");
    let log = drainer.log();
    assert!(log.contains("health gate closed"), "{log}");
    assert!(log.contains("health gate open"), "{log}");
    for seen in [log, record.to_string(), reason] {
        assert!(!seen.contains("s3cret"), "a credential leaked: {seen}");
    }
}

/// A Deployment whose one pod may run only on `node`: once that node is drained, its
/// replacement stays unschedulable.
fn pinned_to(node: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: pinned
  namespace: shop
spec:
  replicas: 1
  selector:
    matchLabels: {{app: pinned}}
  template:
    metadata:
      labels: {{app: pinned}}
    spec:
      nodeSelector:
        kubernetes.io/hostname: {node}
      containers:
        - name: app
          image: registry.k8s.io/pause:3.10
"
    )
}

#[test]
fn given_replacements_that_never_come_back_then_the_rotation_halts_until_resumed_and_says_so() {
    let shop = Shop::start_with(2, &pinned_to("old-1"));
    let cluster = &shop.cluster;
    // The webhook drops the first two POSTs: notices are retried, and arrive in order.
    let webhook = rotor_e2e::health_peers::TestEndpoint::start(200, "ok");
    webhook.fail_next(2);
    let secret_path = webhook.url().replace("/ready", "/services/T0/B0/s3cret");
    // Through a proxy that can fail the rotation record's writes.
    let proxy = FaultProxy::in_front_of(cluster, 43);
    let flags = [
        "--halt-after",
        "5s",
        "--pending-grace",
        "1s",
        "--notify-webhook",
        &secret_path,
        "--notify-cluster",
        "e2e",
    ];
    let drainer = cluster.start_rotor_drainer_with("e2e-a", &flags, |kubeconfig| {
        (
            std::process::Command::new(rotor_e2e::binary("rotor-drainer")),
            cluster.kubeconfig_via(kubeconfig, &proxy.url()),
        )
    });
    shop.taint("old-1");
    wait_phase(cluster, "old-1", "drained", WAIT);
    // The halt's first write fails (an API server restarting): it is written again once the
    // record's writes go through, and the leader holds the lease meanwhile.
    proxy.set_faults(Faults {
        error_rate: 1.0,
        only: Some((http::Method::PATCH, "/configmaps/".into())),
        ..Faults::default()
    });
    // old-1's pinned pod is now unschedulable: the next start waits on the gate, then halts.
    shop.taint("old-2");
    wait_until("the halt's write to fail", WAIT, || {
        drainer
            .log()
            .contains("could not write the halt into the rotation record")
            .then_some(())
    });
    proxy.set_faults(Faults::default());
    let halted = wait_until("status to show the rotation halted", WAIT, || {
        let rotation = status_json(cluster)["rotation"].clone();
        rotation["halted"]["reason"].as_str().map(str::to_string)
    });
    assert!(halted.contains("--halt-after 5s"), "{halted}");
    assert!(
        halted.contains("Deployment shop/pinned has 0/1 replicas ready"),
        "the reason names the workload that did not come back: {halted}"
    );
    let record = cluster.kubectl_json(&["get", "configmap", "rotor-drainer-rotation", "-n", NS]);
    assert_eq!(record["data"]["halted"], "true", "{record}");
    assert_untouched(cluster, "old-2", "halted");

    // The cause goes, but a halt stays until someone resumes it.
    cluster.kubectl_ok(&[
        "delete",
        "deployment",
        "pinned",
        "-n",
        "shop",
        "--wait=true",
    ]);
    std::thread::sleep(Duration::from_secs(8));
    assert_untouched(cluster, "old-2", "cause gone, not resumed");

    let resume = drainer_cli(cluster, &["resume", "--lease-namespace", NS]);
    let said = String::from_utf8_lossy(&resume.stdout);
    assert!(resume.status.success(), "{resume:?}");
    assert!(
        said.starts_with("resumed the rotation halted since"),
        "{said}"
    );
    // resumedAt is the API server's time (its answer's Date), as the nodes' creation times are.
    assert!(!said.contains("carried no date"), "{said}");
    wait_phase(cluster, "old-2", "drained", WAIT);
    let rotation = status_json(cluster)["rotation"].clone();
    assert!(rotation["halted"].is_null(), "{rotation}");
    assert!(rotation["resumedAt"].is_string(), "{rotation}");
    // The leader wrote, as its term began, that it holds drains by a halt (--halt-after) and
    // by no health check.
    assert_eq!(
        rotation["enforced"],
        serde_json::json!({"halt": true, "healthGate": false}),
        "{rotation}"
    );
    let log = drainer.log();
    assert!(log.contains("rotation halted"), "{log}");
    assert!(
        log.contains("the rotation record does not show the halt yet: writing it again"),
        "{log}"
    );
    assert!(log.contains("rotation resumed"), "{log}");
    assert!(
        !log.contains("s3cret"),
        "the webhook's path is its secret: {log}"
    );

    // Two rotations (old-1 alone, then old-2 once tainted), the halt in between.
    let expected = [
        ("RotationStarted", None),
        ("NodeDrained", Some("old-1")),
        ("RotationFinished", None),
        ("RotationHalted", None),
        ("RotationStarted", None),
        ("NodeDrained", Some("old-2")),
        ("RotationFinished", None),
    ];
    let notices = wait_until("every notice to reach the webhook", WAIT, || {
        let delivered: Vec<Value> = webhook
            .bodies()
            .iter()
            .skip(2) // the two refused, sent again
            .map(|b| serde_json::from_str(b).expect("a notice is JSON"))
            .collect();
        (delivered.len() >= expected.len()).then_some(delivered)
    });
    let seen: Vec<(&str, Option<&str>)> = notices
        .iter()
        .map(|n| (n["event"].as_str().unwrap(), n["node"].as_str()))
        .collect();
    assert_eq!(seen, expected, "{notices:?}");
    assert!(
        notices[3]["text"]
            .as_str()
            .unwrap()
            .starts_with("rotor [e2e]: rotation HALTED: the cluster has not absorbed"),
        "{}",
        notices[3]
    );
    assert_eq!(
        webhook.bodies()[0],
        webhook.bodies()[2],
        "the refused notice was sent again"
    );
    // A second resume has nothing to lift.
    let again = drainer_cli(cluster, &["resume", "--lease-namespace", NS]);
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("not halted"),
        "{again:?}"
    );
}

/// The pending-pod gate on the real API server: a pod no node can take holds the next start past
/// `--pending-grace`, and the gate names it; the start follows once the pod is gone. The gate
/// asks the API server only for pods no node holds: a bound pod never holds it, and while
/// thousands of nodes start their pods those would make the answer huge.
#[test]
fn given_a_pod_no_node_can_take_then_no_drain_starts_until_it_goes_and_the_gate_reads_only_unbound_pods()
 {
    let shop = Shop::start(1);
    let cluster = &shop.cluster;
    cluster.apply(
        "apiVersion: v1
kind: Pod
metadata: {name: unplaceable, namespace: shop}
spec:
  nodeSelector: {e2e.rotor.dev/nowhere: \"true\"}
  containers: [{name: app, image: app:1}]
",
    );
    wait_until("the scheduler to give up on unplaceable", WAIT, || {
        let pod = cluster.kubectl_json(&["get", "pod", "unplaceable", "-n", "shop"]);
        let conditions = pod["status"]["conditions"].as_array().cloned();
        conditions
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "PodScheduled" && c["reason"] == "Unschedulable")
            .then_some(())
    });
    // Past its grace before the drainer looks: a pod unschedulable for less holds nothing yet.
    std::thread::sleep(Duration::from_secs(2));
    let drainer = shop.drainer("e2e-a", &["--pending-grace", "1s", "--gate-timeout", "1h"]);
    shop.taint("old-1");
    let held = wait_until("the gate to hold the start", WAIT, || {
        let log = drainer.log();
        log.lines()
            .find(|l| l.contains("waiting for the cluster to settle"))
            .map(str::to_owned)
    });
    assert!(
        held.contains("pod shop/unplaceable has been unschedulable for"),
        "{held}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_untouched(cluster, "old-1", "held by an unschedulable pod");

    cluster.kubectl_ok(&["delete", "pod", "unplaceable", "-n", "shop", "--wait=true"]);
    wait_phase(cluster, "old-1", "drained", WAIT);
    // Each read of the gate was one watch that began with the pending pods no node holds.
    let gate = gate_reads(&cluster.audit_by(DRAINER));
    assert!(!gate.is_empty(), "the gate never read pending pods");
    for (verb, uri, code) in &gate {
        assert!(
            verb == "watch"
                && selects(uri, GATE_SELECTOR)
                && selects(uri, "sendInitialEvents=true")
                && *code == 200,
            "{verb} {uri} answered {code}"
        );
    }
}

fn ready_replicas(cluster: &RealCluster, deployment: &str) -> i64 {
    let d = cluster.kubectl_json(&["get", "deployment", deployment, "-n", "shop"]);
    d["status"]["readyReplicas"].as_i64().unwrap_or(0)
}

fn only_pod(cluster: &RealCluster, app: &str) -> Value {
    let pods = cluster.kubectl_json(&["get", "pods", "-n", "shop", "-l", &format!("app={app}")]);
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "one pod of {app}: {items:?}");
    items[0].clone()
}

#[test]
fn given_a_one_replica_deployment_then_its_rollout_is_restarted_and_it_is_never_left_without_a_replica()
 {
    // `solo` keeps the API's default strategy (a surge of one for one replica) and a budget of
    // minAvailable 1, which no eviction could ever pass. `once` is Recreate: a restart would
    // stop its pod first, so it is evicted, saying why.
    let extra = format!(
        "{}---\n{}---\n{}",
        deployment("shop", "solo", 1, Some("{type: RollingUpdate}")),
        deployment("shop", "once", 1, Some("{type: Recreate}")),
        min_available_budget("shop", "solo", 1)
    );
    let shop = Shop::start_in("tests/kustomize/restart-single-replica", 1, &extra);
    let cluster = &shop.cluster;
    wait_until("solo and once to be Ready", WAIT, || {
        (ready_replicas(cluster, "solo") == 1 && ready_replicas(cluster, "once") == 1).then_some(())
    });
    let old_solo = only_pod(cluster, "solo");
    let old_solo_name = old_solo["metadata"]["name"].as_str().unwrap().to_string();
    let old_once = only_pod(cluster, "once")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(old_solo["spec"]["nodeName"], "old-1");
    let watch = BudgetWatch::start(
        &cluster.kubectl_bin(),
        cluster.admin_kubeconfig(),
        vec![WatchedBudget::app("shop", "solo", 1)],
    );
    let _drainer = shop.drainer("e2e-a", &["--restart-single-replica"]);
    shop.taint("old-1");
    wait_phase(cluster, "old-1", "drained", WAIT);
    let verdict = watch.finish();
    assert_no_violation(&verdict);

    // solo moved by its own rollout: stamped by rotor, a new pod Ready on the new node.
    let solo = cluster.kubectl_json(&["get", "deployment", "solo", "-n", "shop"]);
    let stamp = &solo["spec"]["template"]["metadata"]["annotations"]["rotor.dev/restarted-at"];
    assert!(stamp.is_string(), "{solo}");
    let new_solo = wait_until("solo's new pod alone and Ready", WAIT, || {
        let pods = cluster.kubectl_json(&["get", "pods", "-n", "shop", "-l", "app=solo"]);
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        (items.len() == 1 && ready_replicas(cluster, "solo") == 1).then(|| items[0].clone())
    });
    assert_ne!(new_solo["metadata"]["name"], old_solo_name.as_str());
    assert_eq!(new_solo["spec"]["nodeName"], "new-1");
    let restarted = cluster.node_event_notes("old-1", "RolloutRestarted");
    assert_eq!(restarted.len(), 1, "{restarted:?}");
    assert!(
        restarted[0].contains("shop/solo") && restarted[0].contains(&old_solo_name),
        "{restarted:?}"
    );
    let on_pod = cluster.events_of("shop", &old_solo_name);
    assert!(
        on_pod
            .iter()
            .any(|(reason, _)| reason == "RolloutRestarted"),
        "{on_pod:?}"
    );
    // once was evicted, with the reason it was not restarted.
    let refused = cluster.node_event_notes("old-1", "RolloutRestartRefused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("shop/once") && refused[0].contains("Recreate"),
        "{refused:?}"
    );
    let once = cluster.kubectl_json(&["get", "deployment", "once", "-n", "shop"]);
    assert!(
        once["spec"]["template"]["metadata"]["annotations"].is_null(),
        "a refused Deployment is not stamped: {once}"
    );
    // The drainer evicted once's pod, and never evicted nor deleted solo's: its Deployment
    // controller removed it.
    let audit = cluster.audit_by(DRAINER);
    let touched = |pod: &str, code: Option<i64>| {
        audit.iter().any(|e| {
            e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["name"].as_str() == Some(pod)
                && e["verb"] != "list"
                && e["verb"] != "watch"
                && code.is_none_or(|c| e["responseStatus"]["code"] == c)
        })
    };
    assert!(touched(&old_once, Some(201)), "{old_once} was evicted");
    assert!(
        !touched(&old_solo_name, None),
        "rotor-drainer touched {old_solo_name}"
    );
    let (_, deletes, forbidden) = drainer_audit(cluster);
    assert_eq!((deletes, forbidden), (0, Vec::new()));
}

#[test]
fn given_a_budget_that_never_allows_then_the_node_reports_it_and_fails_at_the_deadline() {
    // minAvailable 1 over one pod: no eviction can ever pass.
    let frozen = min_available_budget("shop", "frozen", 1);
    let shop = Shop::start_with(
        1,
        &format!("{}---\n{frozen}", bare_pod("frozen", "old-1", "{}")),
    );
    let cluster = &shop.cluster;
    let _drainer = shop.drainer("e2e-a", &["--drain-timeout", "20s"]);
    shop.taint("old-1");
    let blocker = wait_until("old-1 to name the frozen budget", WAIT, || {
        annotation(cluster, "old-1", "rotor.dev/blocker").filter(|b| b.contains("shop/frozen"))
    });
    assert!(blocker.contains("frozen"), "{blocker}");
    wait_phase(cluster, "old-1", "failed", Duration::from_secs(90));
    let error = annotation(cluster, "old-1", "rotor.dev/last-error").unwrap_or_default();
    assert!(error.contains("deadline"), "{error}");
    let pod = cluster.kubectl_json(&["get", "pod", "frozen", "-n", "shop"]);
    assert!(
        pod["metadata"]["deletionTimestamp"].is_null(),
        "the budget held"
    );
    let (_, deletes, _) = drainer_audit(cluster);
    assert_eq!(deletes, 0, "nothing deleted without --force-after");
}

#[test]
fn given_the_drainer_is_killed_mid_drain_then_a_new_one_resumes_with_the_same_deadline() {
    let shop = Shop::start(2);
    let cluster = &shop.cluster;
    let watch = shop.watch();
    let mut first = shop.drainer("e2e-a", &["--lease-duration", "3s"]);
    for n in &shop.old {
        shop.taint(n);
    }
    let (node_name, deadline) = wait_until("a drain to be under way", WAIT, || {
        shop.old.iter().find_map(|n| {
            let phase = annotation(cluster, n, "rotor.dev/phase");
            matches!(phase.as_deref(), Some("cordoned" | "evicting"))
                .then(|| annotation(cluster, n, "rotor.dev/deadline").map(|d| (n.clone(), d)))
                .flatten()
        })
    });
    first.kill();
    let _second = shop.drainer("e2e-b", &["--lease-duration", "3s"]);
    for n in &shop.old {
        wait_phase(cluster, n, "drained", WAIT);
    }
    assert_eq!(
        annotation(cluster, &node_name, "rotor.dev/deadline"),
        Some(deadline),
        "the resumed drain kept its deadline"
    );
    let lease = cluster.kubectl_json(&["get", "lease", "rotor-drainer", "-n", NS]);
    assert_eq!(lease["spec"]["holderIdentity"], "e2e-b", "{lease}");
    assert_no_violation(&watch.finish());
}

#[test]
fn given_two_replicas_then_one_leads_and_the_other_takes_over_when_it_dies() {
    let shop = Shop::start(2);
    let cluster = &shop.cluster;
    let watch = shop.watch();
    let mut a = shop.drainer("e2e-a", &["--lease-duration", "3s"]);
    let mut b = shop.drainer("e2e-b", &["--lease-duration", "3s"]);
    shop.taint(&shop.old[0]);
    let holder = wait_until("a leader", WAIT, || {
        let lease = cluster.kubectl(&["get", "lease", "rotor-drainer", "-n", NS, "-o", "json"]);
        let lease: Value = serde_json::from_slice(&lease.stdout).ok()?;
        lease["spec"]["holderIdentity"].as_str().map(str::to_string)
    });
    wait_phase(cluster, &shop.old[0], "drained", WAIT);
    let (leader, standby, survivor) = if holder == "e2e-a" {
        (&mut a, &mut b, "e2e-b")
    } else {
        (&mut b, &mut a, "e2e-a")
    };
    leader.kill();
    shop.taint(&shop.old[1]);
    wait_phase(cluster, &shop.old[1], "drained", WAIT);
    let lease = cluster.kubectl_json(&["get", "lease", "rotor-drainer", "-n", NS]);
    assert_eq!(lease["spec"]["holderIdentity"], survivor, "{lease}");
    assert!(standby.is_running());
    assert_no_violation(&watch.finish());
}

#[test]
fn given_someone_elses_cordon_then_rotor_leaves_it_and_undoes_only_its_own() {
    let shop = Shop::start(2);
    let cluster = &shop.cluster;
    let _drainer = shop.drainer("e2e-a", &[]);
    // old-1: cordoned by an operator before rotor came; old-2: cordoned by rotor.
    cluster.kubectl_ok(&["cordon", "old-1"]);
    shop.taint("old-1");
    shop.taint("old-2");
    wait_phase(cluster, "old-1", "drained", WAIT);
    wait_phase(cluster, "old-2", "drained", WAIT);
    assert_eq!(
        annotation(cluster, "old-2", "rotor.dev/cordoned-by-rotor").as_deref(),
        Some("true")
    );
    assert_eq!(
        annotation(cluster, "old-1", "rotor.dev/cordoned-by-rotor"),
        None
    );
    // The selector (here, a person) takes the taint back: rotor clears its state and undoes its
    // own cordon only.
    for n in ["old-1", "old-2"] {
        cluster.kubectl_ok(&["taint", "node", n, "rotor.dev/drain-"]);
    }
    wait_until("rotor to clear its state", WAIT, || {
        ["old-1", "old-2"]
            .iter()
            .all(|n| annotation(cluster, n, "rotor.dev/phase").is_none())
            .then_some(())
    });
    wait_until("old-2 to be uncordoned", WAIT, || {
        node(cluster, "old-2")["spec"]["unschedulable"]
            .as_bool()
            .is_none_or(|u| !u)
            .then_some(())
    });
    assert_eq!(
        node(cluster, "old-1")["spec"]["unschedulable"],
        true,
        "the operator's cordon stays"
    );
}

#[test]
fn kubectl_drain_on_the_same_workload_for_comparison() {
    let shop = Shop::start(3);
    let cluster = &shop.cluster;
    let watch = shop.watch();
    let started = Instant::now();
    for n in &shop.old {
        let out = cluster.kubectl(&[
            "drain",
            n,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=170s",
        ]);
        assert!(
            out.status.success(),
            "{}",
            rotor_e2e::describe_output("kubectl drain", &out)
        );
    }
    let took = started.elapsed();
    let verdict = watch.finish();
    assert_no_violation(&verdict);
    for n in &shop.old {
        assert_eq!(movable_pods_on(cluster, n), Vec::<String>::new());
    }
    eprintln!(
        "real control plane: kubectl drain, one node after another, {} nodes in {:.1}s, 0 violations",
        shop.old.len(),
        took.as_secs_f64()
    );
}
