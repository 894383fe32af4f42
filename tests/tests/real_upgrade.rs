//! A rolling upgrade of rotor-drainer in the middle of a rotation, surge on, on a real control
//! plane (issue 44): the Deployment's new replica starts beside the old one, the old one is
//! stopped as Kubernetes stops a container (SIGTERM, then SIGKILL after the grace period), and
//! the new one takes the Lease and carries on from what the old one recorded on the nodes.
//!
//! The two replicas run two copies of the binary from two directories, as two images would
//! ship it; both are today's build. What a changed record format must keep reading is pinned
//! separately by the golden records under `tests/cases/records/` (crates/drainer/tests/records.rs).
//!
//! Shown: no node drained twice (one `DrainStarted` and one `Drained` per node, at most one
//! `DrainResumed`; no pod evicted twice), none forgotten (every tainted node drained, every
//! placeholder gone), no budget violated (the independent watch), no workload pod deleted.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rotor_e2e::autoscaler::TestAutoscaler;
use rotor_e2e::manifests::{SURGE_WEB, SURGE_WEB_REPLICAS, surge_node};
use rotor_e2e::{BudgetWatch, RealCluster, WatchedBudget, binary, wait_until};
use serde_json::Value;

const DRAINER: &str = "system:serviceaccount:rotor-system:rotor-drainer";
const WAIT: Duration = Duration::from_secs(240);
const PLACEHOLDERS: &str = "rotor.dev/surge-for,app.kubernetes.io/managed-by=rotor-drainer";
const OLD: [&str; 2] = ["old-1", "old-2"];

fn ready_web(cluster: &RealCluster) -> usize {
    cluster.kubectl_json(&["get", "pods", "-n", "shop", "-l", "app=web"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["metadata"]["deletionTimestamp"].is_null() && rotor_e2e::real_cluster::is_ready(p)
        })
        .count()
}

fn phase(cluster: &RealCluster, node: &str) -> Option<String> {
    cluster.kubectl_json(&["get", "node", node])["metadata"]["annotations"]["rotor.dev/phase"]
        .as_str()
        .map(str::to_string)
}

/// The drainer's accepted evictions, by pod name, in order.
fn evictions(cluster: &RealCluster) -> Vec<String> {
    cluster
        .audit_by(DRAINER)
        .into_iter()
        .filter(|e| {
            e["verb"] == "create"
                && e["objectRef"]["subresource"] == "eviction"
                && e["responseStatus"]["code"] == 201
        })
        .map(|e| {
            e["objectRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

fn placeholders(cluster: &RealCluster) -> usize {
    cluster.kubectl_json(&["get", "pods", "-n", "rotor-system", "-l", PLACEHOLDERS])["items"]
        .as_array()
        .map_or(0, Vec::len)
}

/// A copy of today's rotor-drainer in `<dir>/<version>/`, as an image of that version would
/// ship it.
fn shipped(cluster: &RealCluster, version: &str) -> PathBuf {
    let dir = cluster.dir().join(version);
    std::fs::create_dir_all(&dir).expect("create the version's directory");
    let path = dir.join("rotor-drainer");
    std::fs::copy(binary("rotor-drainer"), &path).expect("copy rotor-drainer");
    path
}

#[test]
fn given_a_rolling_upgrade_mid_rotation_with_surge_then_no_node_is_drained_twice_or_forgotten() {
    let cluster = RealCluster::start();
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    cluster.stop_shipped_drainer();
    cluster.add_nodes(&OLD.map(surge_node));
    cluster.apply(SURGE_WEB);
    wait_until("web's 8 pods to be Ready", WAIT, || {
        (ready_web(&cluster) == SURGE_WEB_REPLICAS).then_some(())
    });
    let watch = BudgetWatch::start(
        &cluster.kubectl_bin(),
        cluster.admin_kubeconfig(),
        vec![WatchedBudget::app("shop", "web", SURGE_WEB_REPLICAS - 1)],
    );
    let autoscaler =
        TestAutoscaler::new(surge_node("template"), "surge", 4, Duration::from_secs(3));
    let flags = ["--surge", "--surge-timeout", "2m"];
    let (v1_log, v1_exit, v2_log) = std::thread::scope(|s| {
        s.spawn(|| autoscaler.run(&cluster));
        let (v1, v2) = (shipped(&cluster, "v1"), shipped(&cluster, "v2"));
        let mut old = cluster.start_rotor_drainer_with("v1", &flags, |kubeconfig| {
            (Command::new(&v1), kubeconfig.to_path_buf())
        });
        for node in OLD {
            cluster.kubectl_ok(&["taint", "node", node, "rotor.dev/drain=manual:NoSchedule"]);
        }
        // Mid-rotation: the first drain has made its surge room and waits for the autoscaler's
        // node, nothing evicted yet.
        wait_until("the first drain's placeholders", WAIT, || {
            (placeholders(&cluster) > 0).then_some(())
        });
        let evicted_by_v1 = evictions(&cluster).len();
        // The Deployment's rolling update: the new replica starts (and stands by), then the
        // old one is stopped.
        let new = cluster.start_rotor_drainer_with("v2", &flags, |kubeconfig| {
            (Command::new(&v2), kubeconfig.to_path_buf())
        });
        std::thread::sleep(Duration::from_secs(2));
        let v1_exit = old.terminate(Duration::from_secs(30));
        println!(
            "at the upgrade: {} placeholders, {evicted_by_v1} pods evicted; v1 ended: {v1_exit}",
            placeholders(&cluster)
        );
        for node in OLD {
            wait_until(&format!("{node} to be drained"), WAIT, || {
                (phase(&cluster, node).as_deref() == Some("drained")).then_some(())
            });
        }
        wait_until("web to be whole again", WAIT, || {
            (ready_web(&cluster) == SURGE_WEB_REPLICAS).then_some(())
        });
        wait_until("every placeholder to be removed", WAIT, || {
            (placeholders(&cluster) == 0).then_some(())
        });
        autoscaler.stop();
        (old.log(), v1_exit, new.log())
    });
    let verdict = watch.finish();
    assert!(
        verdict.never_armed.is_empty() && verdict.violations.is_empty(),
        "budgets never met {:?} or violated {:#?}",
        verdict.never_armed,
        verdict.violations
    );
    assert!(
        v1_exit.contains("exit status: 0"),
        "v1 stops cleanly on SIGTERM: {v1_exit}\n{v1_log}"
    );
    assert!(
        v2_log.contains("acquired the leader lease")
            && v1_log.contains("released the leader lease"),
        "v1 released the Lease on SIGTERM and v2 took it:\n{v1_log}\n{v2_log}"
    );

    // No node drained twice, none forgotten; the drain in flight at the upgrade was resumed.
    let mut resumed = 0;
    for node in OLD {
        let reasons: Vec<String> = cluster
            .node_events(node)
            .into_iter()
            .map(|(reason, _)| reason)
            .collect();
        let count = |r: &str| reasons.iter().filter(|x| *x == r).count();
        assert_eq!(
            (count("DrainStarted"), count("Drained")),
            (1, 1),
            "{node} was started and drained once: {reasons:?}"
        );
        println!(
            "{node}: {reasons:?}; surge skipped: {:?}",
            cluster.node_event_notes(node, "SurgeSkipped")
        );
        resumed += count("DrainResumed");
    }
    assert_eq!(resumed, 1, "v2 resumed the drain v1 had under way, once");
    let evicted = evictions(&cluster);
    let mut distinct = evicted.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        (evicted.len(), distinct.len()),
        (SURGE_WEB_REPLICAS, SURGE_WEB_REPLICAS),
        "each of the old nodes' pods evicted once: {evicted:?}"
    );
    let created: Vec<String> = cluster
        .audit_by(DRAINER)
        .into_iter()
        .filter(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["subresource"].is_null()
        })
        .map(|e| format!("{} {}", e["responseStatus"]["code"], e["objectRef"]["name"]))
        .collect();
    println!("placeholder creates (code, name): {created:?}");
    let deleted_workloads: Vec<Value> = cluster
        .audit_by(DRAINER)
        .into_iter()
        .filter(|e| {
            e["verb"] == "delete"
                && e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["namespace"] != "rotor-system"
        })
        .collect();
    assert!(deleted_workloads.is_empty(), "{deleted_workloads:?}");
    assert_eq!(cluster.refusals(DRAINER, 0), Vec::<String>::new());
}
