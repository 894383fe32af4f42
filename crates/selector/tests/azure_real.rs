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

use common::run_bare;
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
    let env = fake.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let run = run_bare(
        &[
            "--kubeconfig",
            kubeconfig.as_str(),
            "--provider",
            "azure",
            "--max-tainted",
            "100%",
            "--output",
            "json",
        ],
        &env,
    )
    .await;
    assert_eq!(
        run.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
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
    // The selector's and the drainer's identities were refused nothing.
    for user in ["rotor-selector", "rotor-drainer"] {
        let refused = cluster.refusals(&format!("system:serviceaccount:{NS}:{user}"), 0);
        assert!(refused.is_empty(), "{user}: {refused:?}");
    }
}
