//! The Google Cloud provider end to end on a real Kubernetes control plane: kwok nodes whose
//! `providerID`s (`gce://...`) name the fake Compute Engine API's instances, the selector and
//! the drainer running as the ServiceAccounts of `deploy/overlays/gcp` under the real RBAC
//! authorizer. Instances on an old instance template are tainted (`instance-template`), the one
//! on the group's template is not, and rotor-drainer drains the tainted nodes; a run with
//! `--retire-drained` then deletes the drained nodes' instances from their group.
//!
//! Needs the control plane's binaries (`tools/build.sh`); a missing one fails the test with how
//! to get it.

mod common;

use std::time::Duration;

use common::{assert_retired, run_cloud_selector};
use rotor_e2e::fake_gcp::{FakeGce, FakeGroup, provider_id};
use rotor_e2e::real_cluster::ROTOR_NAMESPACE as NS;
use rotor_e2e::{FakeNode, RealCluster, wait_until};

const ZONE: &str = "us-central1-a";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_drift_on_kwok_nodes_is_tainted_and_drained() {
    let mut group = FakeGroup::zonal("workers", ZONE, "workers-v2", 3);
    for old in &mut group.instances[..2] {
        old.template = Some("workers-v1".into());
    }
    let names: Vec<String> = group.instances.iter().map(|i| i.name.clone()).collect();
    let fake = FakeGce::start(vec![group]);

    let cluster = RealCluster::start();
    cluster.apply_kustomize_ok("deploy/overlays/gcp");
    cluster.stop_shipped_drainer();
    let nodes: Vec<FakeNode> = names
        .iter()
        .map(|name| {
            let mut node = FakeNode::new(name);
            node.provider_id = Some(provider_id(ZONE, name));
            node
        })
        .collect();
    cluster.add_nodes(&nodes);
    let _drainer = cluster.start_rotor_drainer("e2e", &["--max-concurrent", "2"]);

    let kubeconfig = cluster
        .service_account_kubeconfig(NS, "rotor-selector")
        .display()
        .to_string();
    let run = run_cloud_selector(&kubeconfig, "gcp", &fake.env(), &[]).await;
    for name in &names[..2] {
        let entry = run.node(name);
        assert_eq!(entry["action"], "taint", "{entry}");
        assert_eq!(entry["reason"], "instance-template", "{entry}");
        assert_eq!(entry["group"], "us-central1-a/workers", "{entry}");
    }
    assert_eq!(run.node(&names[2])["action"], "keep");
    for name in &names[..2] {
        wait_until(
            &format!("{name} to be drained"),
            Duration::from_secs(120),
            || {
                let n = cluster.kubectl_json(&["get", "node", name]);
                (n["metadata"]["annotations"]["rotor.dev/phase"] == "drained").then_some(())
            },
        );
    }
    let n = cluster.kubectl_json(&["get", "node", &names[2]]);
    assert!(
        n["metadata"]["annotations"]["rotor.dev/phase"].is_null(),
        "the current node is left alone: {n}"
    );

    // Retiring: the drained nodes' instances leave the group through deleteInstances, one call
    // each, with an Event on each node; the current instance stays.
    let retire = run_cloud_selector(&kubeconfig, "gcp", &fake.env(), &["--retire-drained"]).await;
    let says = |name: &str| {
        format!(
            "deleted instance {name} from managed instance group {ZONE}/workers (instanceGroupManagers.deleteInstances; the group's target size drops by one"
        )
    };
    assert_retired(
        &retire,
        &[(&names[0], says(&names[0])), (&names[1], says(&names[1]))],
        &names[2],
        ("gcp", "instanceGroupManagers.deleteInstances"),
        |node| cluster.node_events(node),
    );
    let mut deleted = fake.deleted();
    deleted.sort();
    assert_eq!(
        deleted,
        names[..2]
            .iter()
            .map(|n| (format!("{ZONE}/workers"), n.clone()))
            .collect::<Vec<_>>()
    );
    // The selector's and the drainer's identities were refused nothing.
    for user in ["rotor-selector", "rotor-drainer"] {
        let refused = cluster.refusals(&format!("system:serviceaccount:{NS}:{user}"), 0);
        assert!(refused.is_empty(), "{user}: {refused:?}");
    }
}
