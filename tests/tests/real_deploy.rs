//! The shipped `deploy/` and rotor-selector on a real Kubernetes control plane: every overlay is
//! accepted by the real apiserver (`--dry-run=server`, with its admission and schema
//! validation), the base applies for real, and the selector's `kubernetes` provider, running
//! as its own ServiceAccount under the real RBAC authorizer, taints exactly the nodes whose
//! kubelet is behind the server's version.
//!
//! The control plane's binaries come from `tools/build.sh`; without them every test here fails
//! and says how to build them.

use std::time::Duration;

use rotor_e2e::real_cluster::KUBERNETES_VERSION;
use rotor_e2e::{FakeNode, RealCluster, describe_output, wait_until};
use serde_json::Value;

use rotor_e2e::real_cluster::ROTOR_NAMESPACE as NS;

#[test]
fn every_overlay_passes_server_side_dry_run_and_the_base_applies_for_real() {
    let cluster = RealCluster::start();
    // A server-side dry run creates nothing, so namespaced objects cannot be checked before
    // their namespace exists: the real apiserver answers NotFound for each. The namespace is
    // made first, as `kubectl create namespace` would be in a fresh install.
    cluster.kubectl_ok(&["create", "namespace", NS]);
    for overlay in [
        "deploy/base",
        "deploy/overlays/kubernetes",
        "deploy/overlays/aws",
        "deploy/overlays/azure",
        "deploy/overlays/dry-run",
    ] {
        let out = cluster.apply_kustomize(overlay, &["--dry-run=server"]);
        assert!(
            out.status.success(),
            "{}",
            describe_output(
                &format!("kubectl apply --dry-run=server -k {overlay}"),
                &out
            )
        );
    }
    // Nothing was created by the dry runs.
    assert!(
        !cluster
            .kubectl(&["get", "deployment", "rotor-drainer", "-n", NS])
            .status
            .success()
    );
    assert!(
        !cluster
            .kubectl(&["get", "clusterrole", "rotor-drainer"])
            .status
            .success()
    );

    cluster.apply_kustomize_ok("deploy/base");
    for (kind, name) in [
        ("deployment", "rotor-drainer"),
        ("cronjob", "rotor-selector"),
        ("poddisruptionbudget", "rotor-drainer"),
        ("serviceaccount", "rotor-drainer"),
        ("serviceaccount", "rotor-selector"),
        ("role", "rotor-drainer-leader-election"),
    ] {
        cluster.kubectl_ok(&["get", kind, name, "-n", NS]);
    }
    for kind in ["clusterrole", "clusterrolebinding"] {
        for name in ["rotor-drainer", "rotor-selector"] {
            cluster.kubectl_ok(&["get", kind, name]);
        }
    }
    // Applying again changes nothing and conflicts with nothing.
    cluster.apply_kustomize_ok("deploy/base");
}

#[test]
fn the_selectors_kubernetes_provider_taints_exactly_the_nodes_behind_the_server_and_rolls_back_only_its_own()
 {
    let cluster = RealCluster::start();
    let version: Value =
        serde_json::from_str(&cluster.kubectl_ok(&["get", "--raw", "/version"])).unwrap();
    assert_eq!(
        version["gitVersion"], KUBERNETES_VERSION,
        "the apiserver reports the release it was built from"
    );
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    let mut nodes = Vec::new();
    for (name, kubelet) in [
        ("behind-1", "v1.35.2"),
        ("behind-2", "v1.35.2"),
        ("current-1", KUBERNETES_VERSION),
    ] {
        let mut node = FakeNode::new(name);
        node.kubelet_version = kubelet.into();
        nodes.push(node);
    }
    cluster.add_nodes(&nodes);

    // The run also publishes the fleet's compliance: to a file and to a Pushgateway's API.
    let metrics_file = cluster.dir().join("selector.prom");
    let pushgateway = rotor_e2e::health_peers::TestEndpoint::start(200, "");
    let push_base = pushgateway.url().trim_end_matches("/ready").to_string();
    let out = cluster.run_rotor_selector(&[
        "--provider",
        "kubernetes",
        "--max-tainted",
        "100%",
        "--metrics-file",
        metrics_file.to_str().unwrap(),
        "--pushgateway",
        &push_base,
    ]);
    assert!(
        out.status.success(),
        "{}",
        describe_output("rotor-selector", &out)
    );
    let exposition = std::fs::read_to_string(&metrics_file).expect("the metrics file");
    assert_eq!(
        pushgateway.bodies(),
        std::slice::from_ref(&exposition),
        "the same figures were pushed"
    );
    // A real Prometheus scrapes the figures (served as a textfile collector would) and reads
    // two nodes out of date for kubelet-version.
    let served = rotor_e2e::health_peers::TestEndpoint::start(200, &exposition);
    let target = served
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/ready")
        .to_string();
    let prometheus = rotor_e2e::health_peers::Prometheus::start_scraping("", &[&target]);
    let outdated = wait_until(
        "Prometheus to scrape the selector's figures",
        Duration::from_secs(60),
        || {
            let samples = prometheus.query("rotor_selector_outdated_nodes");
            (!samples.is_empty()).then_some(samples)
        },
    );
    assert_eq!(outdated.len(), 1, "{outdated:?}");
    assert_eq!(outdated[0].0["reason"], "kubelet-version", "{outdated:?}");
    assert_eq!(outdated[0].1, 2.0, "{outdated:?}");
    let tainted = prometheus.query("rotor_selector_tainted_nodes");
    assert_eq!(tainted[0].1, 2.0, "{tainted:?}");
    let success = prometheus.query("rotor_selector_last_run_success");
    assert_eq!(success[0].1, 1.0, "{success:?}");
    // The report says the same, read-only.
    let report = cluster.run_rotor_selector(&[
        "--provider",
        "kubernetes",
        "--dry-run",
        "--output",
        "report",
    ]);
    let report_text = String::from_utf8_lossy(&report.stdout);
    assert!(
        report_text.contains("2 out of date") && report_text.contains("2 for kubelet-version"),
        "{report_text}"
    );

    let taint_of = |name: &str| -> Option<String> {
        let node = cluster.kubectl_json(&["get", "node", name]);
        node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["key"] == "rotor.dev/drain")
            .map(|t| {
                format!(
                    "{}:{}",
                    t["value"].as_str().unwrap_or(""),
                    t["effect"].as_str().unwrap_or("")
                )
            })
    };
    assert_eq!(
        taint_of("behind-1").as_deref(),
        Some("kubelet-version:NoSchedule")
    );
    assert_eq!(
        taint_of("behind-2").as_deref(),
        Some("kubelet-version:NoSchedule")
    );
    assert_eq!(taint_of("current-1"), None);

    // Rollback touches only the selector's own taints: a person drains current-1 by hand, and
    // behind-1 gets an up-to-date kubelet before any drain began. The next run takes its own
    // taint off behind-1 and leaves the person's on current-1.
    cluster.kubectl_ok(&[
        "taint",
        "node",
        "current-1",
        "rotor.dev/drain=manual:NoSchedule",
    ]);
    cluster.kubectl_ok(&[
        "patch",
        "node",
        "behind-1",
        "--subresource=status",
        "--type=merge",
        "-p",
        &format!(r#"{{"status":{{"nodeInfo":{{"kubeletVersion":"{KUBERNETES_VERSION}"}}}}}}"#),
    ]);
    let out = cluster.run_rotor_selector(&["--provider", "kubernetes", "--max-tainted", "100%"]);
    assert!(
        out.status.success(),
        "{}",
        describe_output("rotor-selector", &out)
    );
    assert_eq!(
        taint_of("behind-1"),
        None,
        "{}",
        describe_output("rotor-selector", &out)
    );
    assert_eq!(
        taint_of("behind-2").as_deref(),
        Some("kubelet-version:NoSchedule")
    );
    assert_eq!(taint_of("current-1").as_deref(), Some("manual:NoSchedule"));

    // The selector's RBAC was enough: the server refused none of its requests.
    let refused = cluster.refusals("system:serviceaccount:rotor-system:rotor-selector", 0);
    assert!(refused.is_empty(), "{refused:?}");
}
