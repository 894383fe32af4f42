//! The Helm chart on a real control plane: every example's rendering accepted by the API server
//! (`--dry-run=server`), then `helm install` and `helm upgrade` of a release, after which
//! rotor-drainer drains a node and rotor-selector runs as the chart's ServiceAccounts, under
//! the chart's RBAC on the real authorizer (no request refused), and `helm uninstall` leaves
//! none of rotor's cluster-wide objects behind.
//!
//! Helm and the control plane come from `tools/build.sh`; without them this test fails and
//! says how to build them.

use std::time::Duration;

use rotor_e2e::helm::{CHART, NAMESPACE, RELEASE, examples, helm_ok, template};
use rotor_e2e::manifests::deployment;
use rotor_e2e::{FakeNode, RealCluster, describe_output, wait_until, workspace_root};
use serde_json::Value;

const DRAINER: &str = "system:serviceaccount:rotor-system:rotor-drainer";
const SELECTOR: &str = "system:serviceaccount:rotor-system:rotor-selector";
const WAIT: Duration = Duration::from_secs(180);

/// `helm <args>` against the cluster, as its admin.
fn helm_on(cluster: &RealCluster, args: &[&str]) -> String {
    let kubeconfig = cluster.admin_kubeconfig().display().to_string();
    let mut all = args.to_vec();
    all.extend(["--kubeconfig", &kubeconfig]);
    helm_ok(&all)
}

#[test]
fn the_chart_installs_upgrades_and_rotor_drains_under_its_rbac() {
    let cluster = RealCluster::start();
    let crd =
        std::fs::read_to_string(workspace_root().join("tests/manifests/prometheusrule-crd.yaml"))
            .expect("read the PrometheusRule and PodMonitor CRD stand-ins");
    cluster.apply(&crd);
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/prometheusrules.monitoring.coreos.com",
        "crd/podmonitors.monitoring.coreos.com",
        "--timeout=60s",
    ]);
    cluster.kubectl_ok(&["create", "namespace", NAMESPACE]);
    // The chart's CRDs, which `helm install` applies before the templates: the examples'
    // RotationPolicies need them to pass the dry run (which checks them against the CRD's
    // schema and CEL rules). The install below finds them there and leaves them as they are.
    cluster.kubectl_ok(&[
        "apply",
        "--server-side",
        "-f",
        &workspace_root()
            .join(CHART)
            .join("crds")
            .display()
            .to_string(),
    ]);
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/rotationpolicies.rotor.dev",
        "--timeout=60s",
    ]);

    // 1. Every example, as the API server would take it.
    for example in examples() {
        let out = template(&[&example], &[]);
        assert!(
            out.status.success(),
            "{}",
            describe_output("helm template", &out)
        );
        let file = cluster.dir().join("rendered.yaml");
        std::fs::write(&file, &out.stdout).expect("write the rendering");
        let path = file.display().to_string();
        let out = cluster.kubectl(&["apply", "--dry-run=server", "--server-side", "-f", &path]);
        assert!(
            out.status.success(),
            "{}",
            describe_output(&format!("kubectl apply --dry-run=server ({example})"), &out)
        );
    }

    // 2. Install with the defaults, then upgrade: restarts of one-replica Deployments on,
    // the chart's own drainer replicas off (this test runs the drainer under the chart's
    // ServiceAccount itself), the selector's schedule suspended (its Job pods would land on
    // this test's nodes).
    let defaults = format!("{CHART}/examples/kubernetes.yaml");
    let release = |verb: &str, sets: &[&str]| {
        let mut args = vec![
            verb,
            RELEASE,
            CHART,
            "--namespace",
            NAMESPACE,
            "--values",
            &defaults,
        ];
        for set in sets {
            args.extend(["--set", set]);
        }
        helm_on(&cluster, &args)
    };
    release("install", &[]);
    assert!(
        !cluster
            .kubectl(&["get", "clusterrole", "rotor-drainer-restart"])
            .status
            .success(),
        "no restart rights before they are asked for"
    );
    release(
        "upgrade",
        &[
            "drainer.flags.restart-single-replica=true",
            "drainer.replicas=0",
            "selector.suspend=true",
        ],
    );
    let history: Value = serde_json::from_str(&helm_on(
        &cluster,
        &[
            "history",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--output",
            "json",
        ],
    ))
    .expect("helm history is JSON");
    let revisions = history.as_array().expect("a list of revisions");
    assert_eq!(revisions.len(), 2, "{history}");
    assert_eq!(revisions[1]["status"], "deployed", "{history}");
    let drainer = cluster.kubectl_json(&["get", "deployment", "rotor-drainer", "-n", NAMESPACE]);
    assert_eq!(drainer["spec"]["replicas"], 0);
    let args = drainer["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--restart-single-replica"), "{args}");
    cluster.kubectl_ok(&["get", "clusterrole", "rotor-drainer-restart"]);
    let cronjob = cluster.kubectl_json(&["get", "cronjob", "rotor-selector", "-n", NAMESPACE]);
    assert_eq!(cronjob["spec"]["suspend"], true);

    // 3. A rotation under the chart's RBAC: one node with a two-replica and a one-replica
    // Deployment, drained onto a new node.
    let old = FakeNode::behind("old-1");
    cluster.add_nodes(&[old]);
    cluster.apply(&format!(
        "{}---\n{}",
        deployment("default", "web", 2, None),
        deployment("default", "solo", 1, None)
    ));
    wait_until("web and solo Ready on old-1", WAIT, || {
        let pods = cluster.kubectl_json(&["get", "pods", "-n", "default"]);
        let ready = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["spec"]["nodeName"] == "old-1")
            .filter(|p| rotor_e2e::real_cluster::is_ready(p))
            .count();
        (ready == 3).then_some(())
    });
    cluster.add_nodes(&[FakeNode::new("new-1")]);
    let drainer = cluster.start_rotor_drainer("helm-a", &["--restart-single-replica"]);
    cluster.kubectl_ok(&[
        "taint",
        "node",
        "old-1",
        "rotor.dev/drain=manual:NoSchedule",
    ]);
    wait_until("old-1 drained", WAIT, || {
        let node = cluster.kubectl_json(&["get", "node", "old-1"]);
        (node["metadata"]["annotations"]["rotor.dev/phase"] == "drained").then_some(())
    });
    drop(drainer);
    let restarted = cluster.node_event_notes("old-1", "RolloutRestarted");
    assert_eq!(restarted.len(), 1, "solo was restarted: {restarted:?}");
    let selector = cluster.run_rotor_selector(&["--provider", "kubernetes", "--dry-run"]);
    assert!(
        selector.status.success(),
        "{}",
        describe_output("rotor-selector --dry-run", &selector)
    );
    for user in [DRAINER, SELECTOR] {
        assert_eq!(
            cluster.refusals(user, 0),
            Vec::<String>::new(),
            "the chart's RBAC refused requests of {user}"
        );
    }

    // 4. Uninstalled, nothing cluster-wide of rotor's is left (but the RotationPolicy CRD:
    // Helm never deletes a chart's CRDs, nor the objects they hold).
    helm_on(&cluster, &["uninstall", RELEASE, "--namespace", NAMESPACE]);
    let left = cluster.kubectl_json(&[
        "get",
        "clusterroles,clusterrolebindings,priorityclasses",
        "-l",
        "app.kubernetes.io/part-of=rotor",
    ]);
    assert_eq!(left["items"].as_array().map(Vec::len), Some(0), "{left}");
}
