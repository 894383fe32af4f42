//! A small cluster autoscaler for the real control plane: it adds a kwok node when a pod has
//! been found unschedulable, the way cluster-autoscaler or Karpenter would, so that tests can
//! see what rotor's surge makes an autoscaler do. Like cluster-autoscaler, it ignores pods
//! below the expendable priority cut-off (-10) and pods already nominated for a node by
//! preemption (room is being made for them); a new node takes `boot` to appear.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use rotor_sim::cluster::objects::{is_daemon, unschedulable};

use crate::real_cluster::{FakeNode, RealCluster};

/// cluster-autoscaler's default `--expendable-pods-priority-cutoff`.
pub const EXPENDABLE_CUTOFF: i64 = -10;

/// A node the autoscaler added, and when (after its boot delay, once it was Ready).
#[derive(Clone, Debug)]
pub struct Added {
    pub node: String,
    pub at: Instant,
    /// The pods it was added for, `namespace/name`.
    pub for_pods: Vec<String>,
}

/// Adds nodes shaped like `template` (named `<prefix>-1`, `-2`, ...) for unschedulable pods,
/// at most `max` of them, until stopped.
pub struct TestAutoscaler {
    pub template: FakeNode,
    pub prefix: String,
    pub max: usize,
    pub boot: Duration,
    stop: AtomicBool,
    added: Mutex<Vec<Added>>,
}

impl TestAutoscaler {
    pub fn new(template: FakeNode, prefix: &str, max: usize, boot: Duration) -> TestAutoscaler {
        TestAutoscaler {
            template,
            prefix: prefix.to_string(),
            max,
            boot,
            stop: AtomicBool::new(false),
            added: Mutex::new(Vec::new()),
        }
    }

    /// Runs until [`TestAutoscaler::stop`]: call it on a scoped thread.
    pub fn run(&self, cluster: &RealCluster) {
        while !self.stop.load(Ordering::Relaxed) {
            let waiting = unschedulable_pods(cluster);
            let count = self.added().len();
            if !waiting.is_empty() && count < self.max {
                // The pods stay unschedulable while the node boots; ask once per node.
                std::thread::sleep(self.boot);
                let mut node = self.template.clone();
                node.name = format!("{}-{}", self.prefix, count + 1);
                cluster.add_nodes(std::slice::from_ref(&node));
                self.added.lock().unwrap().push(Added {
                    node: node.name,
                    at: Instant::now(),
                    for_pods: waiting,
                });
                // Give the scheduler a moment to place what fits before judging again.
                std::thread::sleep(Duration::from_secs(2));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn added(&self) -> Vec<Added> {
        self.added.lock().unwrap().clone()
    }
}

/// Pods the scheduler found no room for, that an autoscaler would add a node for.
pub fn unschedulable_pods(cluster: &RealCluster) -> Vec<String> {
    let pods = cluster.kubectl_json(&[
        "get",
        "pods",
        "-A",
        "--field-selector",
        "status.phase=Pending",
    ]);
    let pods: Vec<Pod> =
        serde_json::from_value(pods["items"].clone()).expect("kubectl get pods lists Pods");
    pods.iter()
        .filter(|p| wants_a_node(p))
        .map(|p| {
            format!(
                "{}/{}",
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

/// A pod the scheduler found no room for, that an autoscaler adds a node for. Like
/// cluster-autoscaler: not one nominated for a node by preemption (room is being made for it),
/// not one being deleted, none below the expendable priority cut-off, and none of a DaemonSet's
/// (it is pinned to its node).
pub fn wants_a_node(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let unbound = spec
        .and_then(|s| s.node_name.as_deref())
        .is_none_or(str::is_empty);
    let nominated = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let priority = i64::from(spec.and_then(|s| s.priority).unwrap_or(0));
    unbound
        && unschedulable(pod)
        && !is_daemon(pod)
        && !nominated
        && pod.metadata.deletion_timestamp.is_none()
        && priority >= EXPENDABLE_CUTOFF
}
