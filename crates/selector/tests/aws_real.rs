//! The AWS provider end to end on a real Kubernetes control plane: kwok nodes whose
//! `providerID`s name moto's instances, the selector and the drainer running as the
//! ServiceAccounts of `deploy/overlays/aws` under the real RBAC authorizer. Image drift (a new
//! default template version with a new AMI) taints the old instances' nodes, rotor-drainer
//! drains them, and `--retire-drained` terminates their instances in their group, which
//! launches replacements.
//!
//! Needs moto (`python3 -m pip install 'moto[server]'`) and the control plane's binaries
//! (`tools/build.sh`); each missing one fails the test with how to get it (in CI moto must run).

mod common;

use std::time::Duration;

use common::run_cloud_selector;
use rotor_e2e::moto::{
    create_group, create_template, group_instances, instance_ids, new_default_version, start_moto,
    two_images,
};
use rotor_e2e::{FakeNode, RealCluster, wait_until};

use rotor_e2e::real_cluster::ROTOR_NAMESPACE as NS;
const GROUP: &str = "workers-asg";
const CLUSTER: &str = "real";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_drift_on_kwok_nodes_is_tainted_drained_and_retired_through_the_group() {
    let moto = start_moto().await;
    let aws = moto.clients().await;
    let (ami_old, ami_new) = two_images(&aws).await;
    let template = create_template(&aws, "workers", &ami_old).await;
    create_group(&aws, GROUP, &template, "$Latest", 2, CLUSTER).await;
    let old = instance_ids(&aws, GROUP).await;
    assert_eq!(old.len(), 2);
    new_default_version(&aws, &template, &ami_new).await;

    let cluster = RealCluster::start();
    cluster.apply_kustomize_ok("deploy/overlays/aws");
    cluster.stop_shipped_drainer();
    let nodes: Vec<FakeNode> = old
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let mut node = FakeNode::new(&format!("ip-10-0-0-{}", i + 1));
            node.provider_id = Some(format!("aws:///us-east-1a/{id}"));
            node
        })
        .collect();
    cluster.add_nodes(&nodes);

    let _drainer = cluster.start_rotor_drainer("e2e", &["--max-concurrent", "2"]);

    let selector_kubeconfig = cluster.service_account_kubeconfig(NS, "rotor-selector");
    let kubeconfig = selector_kubeconfig.display().to_string();
    let env = moto.env();
    let select = |extra: &'static [&'static str]| {
        let flags: Vec<&str> = ["--cluster-name", CLUSTER, "--image-drift"]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        let (kubeconfig, env) = (&kubeconfig, &env);
        async move { run_cloud_selector(kubeconfig, "aws", env, &flags).await }
    };

    let taint = select(&[]).await;
    for node in &nodes {
        let entry = taint.node(&node.name);
        assert_eq!(entry["action"], "taint", "{entry}");
        assert_eq!(entry["reason"], "image", "{entry}");
    }
    for node in &nodes {
        wait_until(
            &format!("{} to be drained", node.name),
            Duration::from_secs(120),
            || {
                let n = cluster.kubectl_json(&["get", "node", &node.name]);
                (n["metadata"]["annotations"]["rotor.dev/phase"] == "drained").then_some(())
            },
        );
    }

    let retire = select(&["--retire-drained"]).await;
    for node in &nodes {
        let entry = retire.node(&node.name);
        assert_eq!(entry["action"], "retire", "{entry}");
        assert_eq!(entry["result"]["outcome"], "applied", "{entry}");
    }
    let after = group_instances(&aws, GROUP).await;
    for id in &old {
        assert!(
            after
                .iter()
                .all(|(i, state)| i != id || state.starts_with("Terminating")),
            "{id} was not terminated: {after:?}"
        );
    }
    assert_eq!(
        after.iter().filter(|(_, s)| s == "InService").count(),
        2,
        "the group launched replacements: {after:?}"
    );
    // The selector's and the drainer's identities were refused nothing.
    for user in ["rotor-selector", "rotor-drainer"] {
        let refused = cluster.refusals(&format!("system:serviceaccount:{NS}:{user}"), 0);
        assert!(refused.is_empty(), "{user}: {refused:?}");
    }
}
