//! The Azure provider end to end on a real Kubernetes control plane: kwok nodes whose
//! `providerID`s name VMs of the fake ARM server's scale sets, the selector and the drainer
//! running as the ServiceAccounts of `deploy/overlays/azure` under the real RBAC authorizer. VMs
//! off their scale set's latest model are tainted (reason `model`) and rotor-drainer drains
//! their nodes. Retiring is AWS only, so the test ends at the drain.
//!
//! Needs the control plane's binaries (`tools/build.sh`); a missing one fails the test with how
//! to get it.

mod common;

use std::time::Duration;

use common::{assert_retired, run_cloud_selector};
use rotor_e2e::fake_azure::{FakeAzure, FakeScaleSet, FakeVm};
use rotor_e2e::{FakeNode, RealCluster, wait_until};

use rotor_e2e::real_cluster::ROTOR_NAMESPACE as NS;

const SUB: &str = "00000000-0000-0000-0000-0000000e2e00";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_drift_on_kwok_nodes_is_tainted_and_drained() {
    let fake = FakeAzure::start(SUB);
    let set = FakeScaleSet::uniform(
        "rg-nodes",
        "workers",
        vec![
            FakeVm::new("0", false),
            FakeVm::new("1", false),
            FakeVm::new("2", true),
        ],
    );
    fake.add(set.clone());

    let cluster = RealCluster::start();
    cluster.apply_kustomize_ok("deploy/overlays/azure");
    cluster.stop_shipped_drainer();
    let nodes: Vec<FakeNode> = (0..3)
        .map(|i| {
            let mut node = FakeNode::new(&format!("workers{i:06}"));
            // The providerID spells the resource group in another case than ARM does.
            node.provider_id = Some(
                set.provider_id(SUB, &i.to_string())
                    .replace("rg-nodes", "RG-NODES"),
            );
            node
        })
        .collect();
    cluster.add_nodes(&nodes);

    let _drainer = cluster.start_rotor_drainer("e2e", &["--max-concurrent", "2"]);

    let selector_kubeconfig = cluster.service_account_kubeconfig(NS, "rotor-selector");
    let kubeconfig = selector_kubeconfig.display().to_string();
    let run = run_cloud_selector(&kubeconfig, "azure", &fake.env(), &[]).await;
    for node in &nodes[..2] {
        let entry = run.node(&node.name);
        assert_eq!(entry["action"], "taint", "{entry}");
        assert_eq!(entry["reason"], "model", "{entry}");
    }
    assert_eq!(run.node(&nodes[2].name)["action"], "keep");
    for node in &nodes[..2] {
        wait_until(
            &format!("{} to be drained", node.name),
            Duration::from_secs(120),
            || {
                let n = cluster.kubectl_json(&["get", "node", &node.name]);
                (n["metadata"]["annotations"]["rotor.dev/phase"] == "drained").then_some(())
            },
        );
    }
    let current = cluster.kubectl_json(&["get", "node", &nodes[2].name]);
    assert!(
        current["spec"]["taints"]
            .as_array()
            .is_none_or(|t| t.iter().all(|t| t["key"] != "rotor.dev/drain")),
        "{current}"
    );

    // Retiring: the drained nodes' VMs leave the scale set through DeleteInstances, one call
    // each, with an Event on each node; the current VM stays.
    let retire = run_cloud_selector(&kubeconfig, "azure", &fake.env(), &["--retire-drained"]).await;
    let says = |id: &str| {
        format!(
            "deleted VM {id} of scale set rg-nodes/workers (VirtualMachineScaleSets_DeleteInstances; the scale set's capacity drops by one"
        )
    };
    assert_retired(
        &retire,
        &[(&nodes[0].name, says("0")), (&nodes[1].name, says("1"))],
        &nodes[2].name,
        ("azure", "VirtualMachineScaleSets_DeleteInstances"),
        |node| cluster.node_events(node),
    );
    let mut deleted = fake.deleted();
    deleted.sort();
    assert_eq!(
        deleted,
        vec![
            ("workers".to_owned(), "0".to_owned()),
            ("workers".to_owned(), "1".to_owned())
        ]
    );
    // The selector's and the drainer's identities were refused nothing.
    for user in ["rotor-selector", "rotor-drainer"] {
        let refused = cluster.refusals(&format!("system:serviceaccount:{NS}:{user}"), 0);
        assert!(refused.is_empty(), "{user}: {refused:?}");
    }
}
