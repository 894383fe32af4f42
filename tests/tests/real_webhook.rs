//! rotor-drainer against a real validating admission webhook on `pods/eviction` (issue 44), as
//! policy engines (Kyverno, Gatekeeper) and PDB-aware webhooks register one: the real API server
//! calls it over HTTPS ([`AdmissionWebhook`]) for every eviction.
//!
//! - A webhook refusing one workload's evictions: that node blocks naming the webhook and its
//!   message (never RBAC: the authorizer allowed every refused request), the other node drains;
//!   with `failurePolicy: Ignore` and the webhook broken, evictions go through as if it were not
//!   there.
//! - A webhook that answers 500, then times out, with `failurePolicy: Fail`: evictions are
//!   retried with back-off (a bounded number of calls), the nodes say why, nothing is deleted,
//!   and the rotation finishes once the webhook recovers.
//!
//! No budget is violated in either (the independent watch), and no pod is deleted (the audit).

use std::time::Duration;

use rotor_e2e::manifests::{deployment, min_available_budget};
use rotor_e2e::webhook::{AdmissionWebhook, Review, Verdict};
use rotor_e2e::{BudgetWatch, FakeNode, RealCluster, WatchedBudget, wait_until};

const DRAINER: &str = "system:serviceaccount:rotor-system:rotor-drainer";
const WAIT: Duration = Duration::from_secs(180);

/// rotor installed (its own drainer stopped), two old nodes running `shop/web` (4 replicas, at
/// least 3 available) and `extra`, then two new nodes to move to.
fn cluster_with(extra: &str, extra_pods: usize) -> RealCluster {
    let cluster = RealCluster::start();
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    cluster.stop_shipped_drainer();
    cluster.add_nodes(&[FakeNode::behind("old-1"), FakeNode::behind("old-2")]);
    cluster.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: shop}}\n---\n{}---\n{}---\n{extra}",
        deployment("shop", "web", 4, None),
        min_available_budget("shop", "web", 3),
    ));
    wait_until("every pod to be Ready", WAIT, || {
        (ready_pods(&cluster) >= 4 + extra_pods).then_some(())
    });
    cluster.add_nodes(&[FakeNode::new("new-1"), FakeNode::new("new-2")]);
    cluster
}

fn ready_pods(cluster: &RealCluster) -> usize {
    cluster.kubectl_json(&["get", "pods", "-A"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["metadata"]["deletionTimestamp"].is_null()
                && rotor_e2e::real_cluster::is_ready(p)
                && p["metadata"]["namespace"] != "rotor-system"
        })
        .count()
}

fn annotation(cluster: &RealCluster, node: &str, key: &str) -> Option<String> {
    cluster.kubectl_json(&["get", "node", node])["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_string)
}

fn wait_phase(cluster: &RealCluster, node: &str, phase: &str) {
    wait_until(&format!("{node} to reach phase {phase}"), WAIT, || {
        (annotation(cluster, node, "rotor.dev/phase").as_deref() == Some(phase)).then_some(())
    });
}

/// Waits until `node` is blocked by a blocker containing `needle`; the blocker.
fn blocked_by(cluster: &RealCluster, node: &str, needle: &str) -> String {
    wait_until(&format!("{node} to block on {needle:?}"), WAIT, || {
        (annotation(cluster, node, "rotor.dev/phase").as_deref() == Some("blocked"))
            .then(|| annotation(cluster, node, "rotor.dev/blocker"))
            .flatten()
            .filter(|b| b.contains(needle))
    })
}

fn taint(cluster: &RealCluster, node: &str) {
    cluster.kubectl_ok(&["taint", "node", node, "rotor.dev/drain=manual:NoSchedule"]);
}

/// Registers (or replaces) the webhook's `ValidatingWebhookConfiguration`.
fn register(cluster: &RealCluster, webhook: &AdmissionWebhook, failure_policy: &str, timeout: u32) {
    let registration = webhook.registration("eviction-guard", failure_policy, timeout);
    cluster.apply(&registration.to_string());
}

/// Waits until the API server calls the webhook for a dry-run eviction of `namespace/pod` (it
/// loads registrations in the background), so the drainer's first try meets it.
fn wait_for_the_api_server_to_call(
    cluster: &RealCluster,
    webhook: &AdmissionWebhook,
    namespace: &str,
    pod: &str,
) {
    let scratch = rotor_e2e::TestDir::new("eviction");
    let eviction = scratch.join("eviction.json");
    std::fs::write(
        &eviction,
        format!(r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{pod}","namespace":"{namespace}"}}}}"#),
    )
    .expect("write eviction.json");
    let path = format!("/api/v1/namespaces/{namespace}/pods/{pod}/eviction?dryRun=All");
    wait_until("the API server to call the webhook", WAIT, || {
        let before = webhook.reviews().len();
        let _ = cluster.kubectl(&["create", "--raw", &path, "-f", &eviction.to_string_lossy()]);
        (webhook.reviews().len() > before).then_some(())
    });
}

fn drainer_reviews(webhook: &AdmissionWebhook) -> Vec<Review> {
    webhook
        .reviews()
        .into_iter()
        .filter(|r| r.user == DRAINER)
        .collect()
}

/// The drainer's pod deletes, and its refused requests whose refusal came from RBAC (the audit
/// log's authorization decision), from the audit log.
fn deletes_and_rbac_refusals(cluster: &RealCluster) -> (usize, Vec<String>) {
    let records = cluster.audit_by(DRAINER);
    let deletes = records
        .iter()
        .filter(|e| {
            e["verb"] == "delete"
                && e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["subresource"].is_null()
        })
        .count();
    let rbac: Vec<String> = records
        .iter()
        .filter(|e| e["annotations"]["authorization.k8s.io/decision"] == "forbid")
        .map(|e| e["requestURI"].as_str().unwrap_or_default().to_string())
        .collect();
    (deletes, rbac)
}

fn assert_no_violation(watch: BudgetWatch) {
    let verdict = watch.finish();
    assert!(
        verdict.never_armed.is_empty() && verdict.violations.is_empty(),
        "budgets never met {:?} or violated {:#?}",
        verdict.never_armed,
        verdict.violations
    );
}

#[test]
fn given_a_webhook_refusing_one_workloads_evictions_then_that_node_blocks_naming_it_and_ignore_lets_them_through()
 {
    let ledger = "apiVersion: v1
kind: Namespace
metadata: {name: guarded}
---
apiVersion: v1
kind: Pod
metadata: {name: ledger, namespace: guarded, labels: {app: ledger}}
spec:
  nodeName: old-1
  terminationGracePeriodSeconds: 1
  containers: [{name: app, image: app:1}]
";
    let cluster = cluster_with(ledger, 1);
    let webhook = AdmissionWebhook::start(&cluster);
    let message = "evicting the ledger needs a change ticket (ask #payments)";
    webhook.set("guarded", Verdict::Refuse(message.into()));
    register(&cluster, &webhook, "Fail", 5);
    wait_for_the_api_server_to_call(&cluster, &webhook, "guarded", "ledger");

    let watch = BudgetWatch::start(
        &cluster.kubectl_bin(),
        cluster.admin_kubeconfig(),
        vec![WatchedBudget::app("shop", "web", 3)],
    );
    let drainer = cluster.start_rotor_drainer(
        "e2e-webhook",
        &["--max-concurrent", "2", "--max-unavailable", "100%"],
    );
    taint(&cluster, "old-1");
    taint(&cluster, "old-2");

    // (a) The node holding the guarded pod blocks, naming the webhook and its message; the
    // other drains.
    let blocker = blocked_by(&cluster, "old-1", "guarded/ledger");
    println!("old-1's blocker while the webhook refuses: {blocker}");
    assert!(
        blocker.contains("admission webhook eviction-guard.rotor.test refuses it")
            && blocker.contains(message)
            && blocker.contains("rotor's RBAC is not at fault")
            && !blocker.contains("drainer-rbac"),
        "the blocker names the webhook and its message, not RBAC: {blocker}"
    );
    let events = cluster
        .node_event_notes("old-1", "DrainBlocked")
        .join(" | ");
    assert!(
        events.contains("eviction-guard.rotor.test") && events.contains(message),
        "a DrainBlocked Event names the webhook and its message: {events}"
    );
    wait_phase(&cluster, "old-2", "drained");
    let refused = drainer_reviews(&webhook)
        .iter()
        .filter(|r| r.namespace == "guarded" && matches!(r.verdict, Verdict::Refuse(_)))
        .count();
    assert!(
        refused >= 1,
        "the drainer's evictions of the ledger met the webhook"
    );

    // (c) failurePolicy Ignore, the webhook broken: no effect, the ledger is evicted.
    webhook.set("guarded", Verdict::Error500);
    register(&cluster, &webhook, "Ignore", 5);
    wait_phase(&cluster, "old-1", "drained");
    let broken_but_ignored = drainer_reviews(&webhook)
        .iter()
        .filter(|r| r.namespace == "guarded" && r.verdict == Verdict::Error500)
        .count();
    assert!(
        broken_but_ignored >= 1,
        "the last eviction of the ledger went through the broken webhook: {:?}",
        drainer_reviews(&webhook)
    );
    let pods = cluster.kubectl_json(&["get", "pods", "-n", "guarded"]);
    assert_eq!(pods["items"].as_array().map(Vec::len), Some(0), "{pods}");

    let (deletes, rbac) = deletes_and_rbac_refusals(&cluster);
    assert_eq!(deletes, 0, "the drainer deleted pods");
    assert!(rbac.is_empty(), "RBAC refused the drainer: {rbac:?}");
    drop(drainer);
    assert_no_violation(watch);
}

#[test]
fn given_a_failing_then_hanging_webhook_then_evictions_back_off_the_nodes_say_why_and_finish_once_it_recovers()
 {
    let cluster = cluster_with("", 0);
    let webhook = AdmissionWebhook::start(&cluster);
    webhook.set_default(Verdict::Error500);
    register(&cluster, &webhook, "Fail", 2);
    let web = cluster.kubectl_json(&["get", "pods", "-n", "shop", "-o", "json"]);
    let first = web["items"][0]["metadata"]["name"]
        .as_str()
        .expect("a web pod")
        .to_string();
    wait_for_the_api_server_to_call(&cluster, &webhook, "shop", &first);

    let watch = BudgetWatch::start(
        &cluster.kubectl_bin(),
        cluster.admin_kubeconfig(),
        vec![WatchedBudget::app("shop", "web", 3)],
    );
    let drainer = cluster.start_rotor_drainer(
        "e2e-webhook",
        &[
            "--max-concurrent",
            "2",
            "--max-unavailable",
            "100%",
            // A failing eviction is a wait like a budget's: shown after --blocked-after.
            "--blocked-after",
            "5s",
        ],
    );
    taint(&cluster, "old-1");
    taint(&cluster, "old-2");

    // (b) The webhook answers 500: a node whose pods the drainer tries says the eviction keeps
    // failing, and why.
    let (node, blocker) = wait_until("a node to block on the failing webhook", WAIT, || {
        ["old-1", "old-2"].into_iter().find_map(|node| {
            (annotation(&cluster, node, "rotor.dev/phase").as_deref() == Some("blocked"))
                .then(|| annotation(&cluster, node, "rotor.dev/blocker"))
                .flatten()
                .filter(|b| b.contains("the eviction keeps failing"))
                .map(|b| (node, b))
        })
    });
    println!("{node}'s blocker while the webhook answers 500: {blocker}");
    assert!(
        blocker.contains("failed calling webhook") && blocker.contains("eviction-guard.rotor.test"),
        "the blocker says the webhook fails: {blocker}"
    );
    std::thread::sleep(Duration::from_secs(20));

    // Then it hangs past its 2 s timeout.
    webhook.set_default(Verdict::Hang);
    let hang_began = webhook.reviews().len();
    std::thread::sleep(Duration::from_secs(40));
    let blocker = annotation(&cluster, node, "rotor.dev/blocker").unwrap_or_default();
    println!("{node}'s blocker while the webhook hangs: {blocker}");
    assert!(
        blocker.contains("failed calling webhook"),
        "{node} still says the webhook fails: {blocker}"
    );
    // The drainer made no eviction before the outage.
    let during = drainer_reviews(&webhook);
    assert!(
        webhook.reviews()[hang_began..]
            .iter()
            .any(|r| r.verdict == Verdict::Hang),
        "the webhook hung at least once"
    );
    // Back-off per pod (2 s doubling to 30 s): about 6 calls each in the minute, where a loop
    // without back-off would make hundreds.
    let mut per_pod: std::collections::BTreeMap<String, usize> = Default::default();
    for r in &during {
        *per_pod.entry(r.name.clone()).or_default() += 1;
    }
    println!(
        "during the webhook's outage: {} calls from the drainer for {} pods ({per_pod:?})",
        during.len(),
        per_pod.len()
    );
    assert!(
        !per_pod.is_empty(),
        "the drainer tried to evict during the outage"
    );
    assert!(
        per_pod.values().all(|&n| n <= 10),
        "evictions were retried without back-off: {per_pod:?}"
    );
    let pods_before = cluster.kubectl_json(&["get", "pods", "-n", "shop"])["items"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(pods_before, 4, "no web pod is gone while the webhook fails");

    // It recovers: the rotation finishes, by eviction.
    webhook.set_default(Verdict::Allow);
    wait_phase(&cluster, "old-1", "drained");
    wait_phase(&cluster, "old-2", "drained");
    let (deletes, rbac) = deletes_and_rbac_refusals(&cluster);
    assert_eq!(deletes, 0, "the drainer deleted pods");
    assert!(rbac.is_empty(), "RBAC refused the drainer: {rbac:?}");
    let allowed = drainer_reviews(&webhook)
        .iter()
        .filter(|r| r.verdict == Verdict::Allow)
        .count();
    assert!(
        allowed >= 4,
        "every web pod on the old nodes was evicted through the webhook: {allowed}"
    );
    drop(drainer);
    assert_no_violation(watch);
}
