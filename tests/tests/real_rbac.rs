//! The RBAC `deploy/` ships is minimal on the real RBAC authorizer: for each rule of rotor's
//! roles, a cluster where only that rule is missing refuses the step that needs it (the
//! apiserver's audit log shows the 403 for the rule's resource), and rotor's own output names
//! the missing permission. (That it is sufficient is shown by every other real-cluster test:
//! they all run rotor under these roles and assert no 403.)
//!
//! One control plane serves every case: the role is re-applied without the rule, rotor runs
//! against a fresh node until the refusal shows, then the role is put back. A RotationPolicy
//! governs every node (with room for all of them), so that the drainer lists and watches the
//! policies and its leader writes the policy's status: the rules on `rotationpolicies` and
//! `rotationpolicies/status` are proven needed like the others.

use std::time::Duration;

use rotor_e2e::manifests::rotation_policy;
use rotor_e2e::{FakeNode, RealCluster, describe_output, kustomize, wait_until};
use serde_json::{Value, json};

/// The kubernetes overlay with every optional component that grants rights (the
/// restart-single-replica one), so that each of their rules is proven needed too.
const OVERLAY: &str = "tests/kustomize/restart-single-replica";

/// The rendered [`OVERLAY`]'s object of `kind` named `name`.
fn rendered(kind: &str, name: &str) -> Value {
    let objects: Vec<Value> =
        serde_saphyr::from_multiple(&kustomize(OVERLAY)).expect("the rendered overlay parses");
    objects
        .into_iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the overlay"))
}

/// `role` with rule `i` removed, applied server-side (the rules list is atomic: replaced whole).
fn apply_role(cluster: &RealCluster, role: &Value) {
    cluster.apply(&role.to_string());
}

fn without_rule(role: &Value, i: usize) -> Value {
    let mut edited = role.clone();
    edited["rules"]
        .as_array_mut()
        .expect("a role has rules")
        .remove(i);
    edited
}

/// What a rule grants, as its refusal names it: a resource (`pods/eviction` with its
/// subresource) or a non-resource URL.
fn rule_resources(rule: &Value) -> Vec<String> {
    if let Some(urls) = rule["nonResourceURLs"].as_array() {
        return urls
            .iter()
            .filter_map(|u| u.as_str().map(String::from))
            .collect();
    }
    rule["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(String::from))
        .collect()
}

/// Whether rotor's output names `resource` the way the apiserver's refusal does
/// (`cannot list resource "nodes"`), quoted plainly or escaped inside a debug-printed error.
fn names(text: &str, resource: &str) -> bool {
    text.contains(&format!("\"{resource}\"")) || text.contains(&format!("\\\"{resource}\\\""))
}

/// A RotationPolicy over every node that lets all of them drain at once: it changes nothing of
/// what the cases do, but the drainer follows it, so it reads the policies and writes the
/// policy's status.
fn every_node_policy() -> String {
    rotation_policy(POLICY, r#"{nodeSelector: {}, budgets: [{nodes: "100%"}]}"#)
}

/// The name of [`every_node_policy`].
const POLICY: &str = "rbac-cases";

/// A fresh kwok node with two pods that nothing protects, so the drainer (with `--surge` and
/// `--restart-single-replica`) walks every step it needs a permission for: watch, lease,
/// cordon, a placeholder for each pod, evict one, restart the other's Deployment, record. One
/// pod belongs to a ReplicaSet, the other to a Deployment of one replica (surge makes room only
/// for pods a controller recreates); both are pinned to the node, so their placeholders never
/// fit and the surge times out, and the restarted Deployment's new pod stays Pending, so the
/// drain fails at `--drain-timeout` and its release removes the placeholders left standing.
fn node_with_a_pod(cluster: &RealCluster, n: usize) -> String {
    let node = format!("case-{n}");
    let fake = FakeNode::behind(&node);
    cluster.add_nodes(&[fake]);
    let labels = json!({"case": n.to_string()});
    cluster.apply(
        &json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": format!("rs-{n}"), "namespace": "default"},
                "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels},
                                      "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                               "terminationGracePeriodSeconds": 0,
                                               "containers": [{"name": "app", "image": "app:1",
                                                               "resources": {"requests": {"cpu": "100m"}}}]}}}})
        .to_string(),
    );
    let solo = json!({"case": n.to_string(), "solo": "true"});
    cluster.apply(
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": format!("solo-{n}"), "namespace": "default"},
                "spec": {"replicas": 1, "selector": {"matchLabels": solo},
                         "template": {"metadata": {"labels": solo},
                                      "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                               "terminationGracePeriodSeconds": 0,
                                               "containers": [{"name": "app", "image": "app:1"}]}}}})
        .to_string(),
    );
    wait_until(
        &format!("the pods of rs-{n} and solo-{n} on {node}"),
        Duration::from_secs(60),
        || {
            let pods =
                cluster.kubectl_json(&["get", "pods", "-n", "default", "-l", &format!("case={n}")]);
            let on_node = pods["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["spec"]["nodeName"] == node.as_str())
                .count();
            (on_node == 2).then_some(())
        },
    );
    node
}

#[test]
fn removing_any_one_rule_of_the_drainers_roles_makes_the_step_that_needs_it_fail_naming_it() {
    let cluster = RealCluster::start();
    cluster.apply_kustomize_ok(OVERLAY);
    cluster.stop_shipped_drainer();
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/rotationpolicies.rotor.dev",
        "--timeout=60s",
    ]);
    cluster.apply(&every_node_policy());
    let user = "system:serviceaccount:rotor-system:rotor-drainer";
    // A health check and the circuit breaker, so that the leader writes the rotation record
    // and every replica watches it (configmaps).
    let healthy = rotor_e2e::health_peers::TestEndpoint::start(200, "ok");
    // The Lease Role first: `create leases` is only needed while the Lease does not exist.
    let roles = [
        rendered("Role", "rotor-drainer-leader-election"),
        rendered("Role", "rotor-drainer-surge"),
        rendered("ClusterRole", "rotor-drainer"),
        rendered("ClusterRole", "rotor-drainer-restart"),
    ];
    let mut case = 0;
    let mut report = Vec::new();
    for role in &roles {
        let rules = role["rules"].as_array().expect("rules").len();
        for i in 0..rules {
            case += 1;
            let rule = &role["rules"][i];
            apply_role(&cluster, &without_rule(role, i));
            // The authorizer reads roles through an informer: give it a moment.
            std::thread::sleep(Duration::from_secs(2));
            let node = node_with_a_pod(&cluster, case);
            let from = cluster.audit_by(user).len();
            let drainer = cluster.start_rotor_drainer(
                &format!("case-{case}"),
                &[
                    "--lease-duration",
                    "2s",
                    // The drain never ends by itself (the restarted pod stays Pending), and
                    // its release is what removes the timed-out surge's placeholders (pods
                    // deletecollection): it must fail well within the wait below.
                    "--drain-timeout",
                    "20s",
                    "--surge",
                    "--surge-timeout",
                    "5s",
                    "--health-url",
                    healthy.url(),
                    "--halt-after",
                    "10m",
                    "--restart-single-replica",
                ],
            );
            cluster.kubectl_ok(&["taint", "node", &node, "rotor.dev/drain=manual:NoSchedule"]);
            let resources = rule_resources(rule);
            let (refused, named) = wait_until(
                &format!("a refusal of {rule} to show in the audit log and the drainer's log"),
                Duration::from_secs(60),
                || {
                    let refused: Vec<String> = cluster
                        .refusals(user, from)
                        .into_iter()
                        .filter(|r| resources.iter().any(|res| r.ends_with(res.as_str())))
                        .collect();
                    let text = drainer.log();
                    let named = resources.iter().find(|res| names(&text, res));
                    (!refused.is_empty() && named.is_some())
                        .then(|| (refused, named.cloned().unwrap_or_default()))
                },
            );
            drop(drainer);
            apply_role(&cluster, role);
            cluster.kubectl_ok(&["taint", "node", &node, "rotor.dev/drain-"]);
            // Its evicted pod comes back pinned to a cordoned node: gone, so that it cannot
            // hold the next case's gate as an unschedulable pod.
            for workload in [format!("rs/rs-{case}"), format!("deployment/solo-{case}")] {
                cluster.kubectl_ok(&["delete", &workload, "-n", "default", "--wait=false"]);
            }
            report.push(format!(
                "without {rule}: refused {refused:?}; log names {named}"
            ));
        }
    }
    // With every rule in place the leader wrote the policy's status (the rule's sufficiency).
    let policy = cluster.kubectl_json(&["get", "rotationpolicy", POLICY]);
    assert!(
        policy["status"]["nodes"].as_u64().unwrap_or(0) > 0,
        "no status written on the RotationPolicy: {policy}"
    );
    eprintln!("{}", report.join("\n"));
}

#[test]
fn removing_any_one_rule_of_the_selectors_role_makes_its_run_fail_naming_it() {
    let cluster = RealCluster::start();
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    let user = "system:serviceaccount:rotor-system:rotor-selector";
    let role = rendered("ClusterRole", "rotor-selector");
    let rules = role["rules"].as_array().expect("rules").len();
    let mut report = Vec::new();
    for i in 0..rules {
        let rule = &role["rules"][i];
        apply_role(&cluster, &without_rule(&role, i));
        std::thread::sleep(Duration::from_secs(2));
        // A node behind the server, so that the run has something to taint and record.
        let fake = FakeNode::behind(&format!("behind-{i}"));
        cluster.add_nodes(&[fake]);
        let from = cluster.audit_by(user).len();
        let out =
            cluster.run_rotor_selector(&["--provider", "kubernetes", "--max-tainted", "100%"]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let resources = rule_resources(rule);
        let refused: Vec<String> = cluster
            .refusals(user, from)
            .into_iter()
            .filter(|r| resources.iter().any(|res| r.ends_with(res.as_str())))
            .collect();
        assert!(
            !refused.is_empty(),
            "without {rule} the server refused nothing of it: {}",
            describe_output("rotor-selector", &out)
        );
        assert!(
            resources.iter().any(|res| names(&text, res)),
            "without {rule} the selector's output does not name {resources:?}:\n{}",
            describe_output("rotor-selector", &out)
        );
        report.push(format!(
            "without {rule}: {} , refused {refused:?}",
            out.status
        ));
        apply_role(&cluster, &role);
        // Start the next case from untainted nodes.
        let nodes = cluster.kubectl_json(&["get", "nodes"]);
        for n in nodes["items"].as_array().into_iter().flatten() {
            let name = n["metadata"]["name"].as_str().unwrap_or_default();
            let _ = cluster.kubectl(&["taint", "node", name, "rotor.dev/drain-"]);
        }
    }
    eprintln!("{}", report.join("\n"));
}
