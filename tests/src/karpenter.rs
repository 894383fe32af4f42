//! Karpenter beside a [`RealCluster`], as the peer rotor is benchmarked against: its kwok
//! provider (the `sigs.k8s.io/karpenter/kwok` main, pinned in `tools/karpenter` and built by
//! `tools/karpenter/build.sh`) runs out of cluster as a child process, with the cluster admin's
//! kubeconfig, and creates and deletes Nodes for its NodeClaims.
//!
//! - Installing: the CRDs that ship in the pinned module (NodePool, NodeClaim, NodeOverlay,
//!   CapacityBuffer, KWOKNodeClass), copied beside the binary by the build script; one
//!   KWOKNodeClass and one NodePool ([`KarpenterOptions`]).
//! - The nodes it makes are kwok's: Karpenter's kwok provider annotates every Node it creates
//!   `kwok.x-k8s.io/node=fake`, the annotation the cluster's kwok selects, so they turn Ready
//!   and run pods through the same stages as the nodes a test adds itself.
//! - Only drift replaces nodes: consolidation is off (`WhenEmpty` after `Never`), nodes never
//!   expire, and the NodePool's disruption budget is `nodes: <budget>`. [`Karpenter::drift_all`]
//!   changes a label of the NodePool's template, so every NodeClaim made before is Drifted (the
//!   template's hash no longer matches); [`Karpenter::disable_drift`] adds a budget of 0 nodes
//!   for the reason Drifted, after which Karpenter only provisions for pending pods, and rotor
//!   can do the replacing.
//! - [`Karpenter::fleet`] tells how far a replacement has come: which original nodes are left,
//!   and how many workload pods are Ready on which nodes.
//!
//! The process is killed on drop, its log (`karpenter.log` in the cluster's directory) printed
//! when the test is failing, and it gets SIGKILL if the test process dies.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::real_cluster::{RealCluster, built_by, free_port, is_ready};
use crate::{Background, wait_until};

/// The Karpenter release `tools/karpenter` pins.
pub const KARPENTER_VERSION: &str = "v1.14.1";

/// The label of the NodePool's template that [`Karpenter::drift_all`] changes.
pub const GENERATION_LABEL: &str = "e2e.rotor.dev/generation";

/// How long Karpenter may take to answer its readiness probe (CRDs found, caches synced).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The directory holding `karpenter-kwok` and `crds/`, or a panic saying how to build them.
///
/// `ROTOR_KARPENTER_BIN` wins; otherwise `tools/karpenter/build.sh --print` names the cache
/// entry for the pinned module, if it has been built.
pub fn karpenter_bin() -> PathBuf {
    let how = "build it with `tools/karpenter/build.sh` (Go >= 1.26.6 and the Go module proxy; \
               about 11 minutes cold on 2 cores, a second once cached), or point \
               ROTOR_KARPENTER_BIN at a directory holding karpenter-kwok and crds/";
    let dir = match std::env::var_os("ROTOR_KARPENTER_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => built_by("tools/karpenter/build.sh").unwrap_or_else(|| {
            panic!("Karpenter's kwok provider ({KARPENTER_VERSION}) is not built: {how}")
        }),
    };
    for needed in ["karpenter-kwok", "crds/karpenter.sh_nodepools.yaml"] {
        assert!(
            dir.join(needed).is_file(),
            "{needed} is missing from {}: {how}",
            dir.display()
        );
    }
    dir
}

/// How Karpenter is configured.
#[derive(Clone, Debug)]
pub struct KarpenterOptions {
    /// The NodePool's name (and the KWOKNodeClass's).
    pub node_pool: String,
    /// The only instance type the NodePool may launch, one of the kwok provider's built-in
    /// types (`c-4x-amd64-linux`: 4 CPUs, 8 GiB, of which 3.9 CPUs are allocatable).
    pub instance_type: String,
    /// The disruption budget, `nodes:` (a count or a percentage): how many of the NodePool's
    /// nodes Karpenter may be disrupting at once.
    pub budget: String,
    /// The KWOKNodeClass's `nodeRegistrationDelay`: how long a launched instance takes to
    /// register its Node (an instance's boot).
    pub registration_delay: Duration,
    /// Karpenter's `BATCH_IDLE_DURATION` and `BATCH_MAX_DURATION`: how long it gathers pending
    /// pods before it launches nodes for them (its defaults, 1 s and 10 s, when `None`).
    pub batch: Option<(Duration, Duration)>,
    /// The NodePool's `limits.cpu`: the most CPU its nodes may have in all.
    pub cpu_limit: u32,
}

impl Default for KarpenterOptions {
    fn default() -> Self {
        KarpenterOptions {
            node_pool: "rotor-peer".into(),
            instance_type: "c-4x-amd64-linux".into(),
            budget: "1".into(),
            registration_delay: Duration::ZERO,
            batch: None,
            cpu_limit: 200,
        }
    }
}

/// The workload whose pods a replacement must keep and move: the pods in `namespace` that
/// `selector` (a label selector, e.g. `app=web`) selects, `replicas` of them.
#[derive(Clone, Debug)]
pub struct Workload {
    pub namespace: String,
    pub selector: String,
    pub replicas: usize,
}

/// Where a replacement stands ([`Karpenter::fleet`]).
#[derive(Clone, Debug, Default)]
pub struct Fleet {
    /// The original nodes that still exist (cordoned, draining or being deleted included).
    pub original_left: Vec<String>,
    /// Workload pods Ready (and not terminating) on nodes that are not original.
    pub ready_elsewhere: usize,
    /// Workload pods, Ready or not, still bound to an original node.
    pub on_original: usize,
    /// Workload pods with no node yet.
    pub pending: usize,
    /// The NodePool's nodes that are not original.
    pub new_nodes: Vec<String>,
}

impl Fleet {
    /// Every workload pod Ready on a new node, none left on an original one: the workload has
    /// moved (the original nodes may still exist, drained).
    pub fn moved(&self, workload: &Workload) -> bool {
        self.on_original == 0 && self.pending == 0 && self.ready_elsewhere == workload.replicas
    }

    /// [`Fleet::moved`], and every original node gone: the fleet is replaced.
    pub fn replaced(&self, workload: &Workload) -> bool {
        self.moved(workload) && self.original_left.is_empty()
    }
}

/// A running Karpenter (see the module docs).
pub struct Karpenter<'c> {
    cluster: &'c RealCluster,
    options: KarpenterOptions,
    process: Background,
    health: String,
    generation: u32,
}

impl<'c> Karpenter<'c> {
    /// Installs the CRDs, the KWOKNodeClass and the NodePool, starts Karpenter's kwok provider
    /// and waits until it answers its readiness probe. Panics, with its log, if it exits first.
    pub fn start(cluster: &'c RealCluster, options: KarpenterOptions) -> Karpenter<'c> {
        let bin = karpenter_bin();
        install_crds(cluster, &bin.join("crds"));
        let generation = 1;
        cluster.apply(&node_class(&options).to_string());
        cluster.apply(&node_pool(&options, generation).to_string());

        let metrics = free_port();
        let probe = free_port();
        let mut cmd = Command::new(bin.join("karpenter-kwok"));
        cmd.current_dir(cluster.dir())
            .env("KUBECONFIG", cluster.admin_kubeconfig())
            // One replica: no Lease to win first.
            .env("DISABLE_LEADER_ELECTION", "true")
            .env("METRICS_PORT", metrics.to_string())
            .env("HEALTH_PROBE_PORT", probe.to_string())
            .env("LOG_LEVEL", "debug")
            // Its log goes to stdout by default; Background keeps stderr.
            .env("LOG_OUTPUT_PATHS", "stderr")
            .env("LOG_ERROR_OUTPUT_PATHS", "stderr");
        if let Some((idle, max)) = options.batch {
            cmd.env("BATCH_IDLE_DURATION", go_duration(idle))
                .env("BATCH_MAX_DURATION", go_duration(max));
        }
        let process = Background::spawn(
            "karpenter (kwok provider)",
            &mut cmd,
            cluster.dir().join("karpenter.log"),
        );
        let mut karpenter = Karpenter {
            cluster,
            options,
            process,
            health: format!("127.0.0.1:{probe}"),
            generation,
        };
        karpenter.wait_ready();
        karpenter
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.process.exit_status() {
                panic!(
                    "Karpenter exited ({status}) before it was ready; its log {}:\n{}",
                    self.process.log_path().display(),
                    crate::tail(self.process.log_path(), 60)
                );
            }
            if crate::http_get(&self.health, "/readyz").is_ok_and(|r| r.status == 200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Karpenter did not answer /readyz on {} within {START_TIMEOUT:?}; its log {}:\n{}",
                self.health,
                self.process.log_path().display(),
                crate::tail(self.process.log_path(), 60)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The cluster it runs beside.
    pub fn cluster(&self) -> &'c RealCluster {
        self.cluster
    }

    /// The options it was started with.
    pub fn options(&self) -> &KarpenterOptions {
        &self.options
    }

    /// Everything Karpenter has logged so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// The file Karpenter logs to.
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// The NodePool's Nodes, by name (deleting ones included).
    pub fn nodes(&self) -> Vec<String> {
        self.node_objects()
            .iter()
            .map(|n| text(&n["metadata"]["name"]))
            .collect()
    }

    /// The NodePool's Nodes that can take pods: Ready, initialized by Karpenter, not being
    /// deleted, not cordoned and not tainted for disruption.
    pub fn ready_nodes(&self) -> Vec<String> {
        self.node_objects()
            .iter()
            .filter(|n| {
                is_ready(n)
                    && n["metadata"]["labels"]["karpenter.sh/initialized"] == "true"
                    && n["metadata"]["deletionTimestamp"].is_null()
                    && n["spec"]["unschedulable"] != true
                    && !n["spec"]["taints"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|t| t["effect"] == "NoSchedule" || t["effect"] == "NoExecute")
            })
            .map(|n| text(&n["metadata"]["name"]))
            .collect()
    }

    /// Waits until the NodePool has `count` [`Karpenter::ready_nodes`] and returns them.
    pub fn wait_for_ready_nodes(&self, count: usize, timeout: Duration) -> Vec<String> {
        let what = format!(
            "Karpenter's NodePool {} to have {count} Ready nodes (its log: {})",
            self.options.node_pool,
            self.log_path().display()
        );
        wait_until(&what, timeout, || {
            let ready = self.ready_nodes();
            (ready.len() == count).then_some(ready)
        })
    }

    fn node_objects(&self) -> Vec<Value> {
        let selector = format!("karpenter.sh/nodepool={}", self.options.node_pool);
        self.cluster
            .kubectl_json(&["get", "nodes", "-l", &selector])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The NodePool's NodeClaims, as the API returns them.
    pub fn node_claims(&self) -> Vec<Value> {
        let selector = format!("karpenter.sh/nodepool={}", self.options.node_pool);
        self.cluster
            .kubectl_json(&["get", "nodeclaims", "-l", &selector])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The names of the nodes whose NodeClaim has the condition Drifted=True.
    pub fn drifted(&self) -> Vec<String> {
        self.node_claims()
            .iter()
            .filter(|c| {
                c["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Drifted" && c["status"] == "True")
            })
            .map(|c| text(&c["status"]["nodeName"]))
            .collect()
    }

    /// Changes the NodePool's template (its [`GENERATION_LABEL`]): every NodeClaim made from
    /// the template before becomes Drifted, and Karpenter replaces them as its budgets allow
    /// (unless [`Karpenter::disable_drift`]).
    pub fn drift_all(&mut self) {
        self.generation += 1;
        let patch = json!({"spec": {"template": {"metadata": {"labels": {
            GENERATION_LABEL: self.generation.to_string()
        }}}}});
        self.patch_node_pool(&patch);
    }

    /// Lets Karpenter disrupt no node for drift (a budget of 0 nodes for the reason Drifted;
    /// the other reasons keep `budget`): it still launches nodes for pending pods and deletes
    /// the NodeClaims it is told to ([`Karpenter::retire`]), so rotor can do the replacing.
    pub fn disable_drift(&self) {
        let patch = json!({"spec": {"disruption": {"budgets": [
            {"nodes": "0", "reasons": ["Drifted"]},
            {"nodes": self.options.budget},
        ]}}});
        self.patch_node_pool(&patch);
    }

    /// Sets the NodePool's budget back to `nodes: <budget>` for every reason.
    pub fn enable_drift(&self) {
        let patch = json!({"spec": {"disruption": {"budgets": [{"nodes": self.options.budget}]}}});
        self.patch_node_pool(&patch);
    }

    fn patch_node_pool(&self, patch: &Value) {
        self.cluster.kubectl_ok(&[
            "patch",
            "nodepool",
            &self.options.node_pool,
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ]);
    }

    /// Deletes the NodeClaims of `nodes`, as the end of a rotation retires drained nodes:
    /// Karpenter drains what is left on them (through the Eviction API) and deletes them.
    pub fn retire(&self, nodes: &[String]) {
        let claims: Vec<String> = self
            .node_claims()
            .iter()
            .filter(|c| nodes.contains(&text(&c["status"]["nodeName"])))
            .map(|c| text(&c["metadata"]["name"]))
            .collect();
        assert_eq!(
            claims.len(),
            nodes.len(),
            "not every node to retire has a NodeClaim of NodePool {}: {nodes:?} -> {claims:?}",
            self.options.node_pool
        );
        let mut args = vec!["delete", "nodeclaims", "--wait=false"];
        args.extend(claims.iter().map(String::as_str));
        self.cluster.kubectl_ok(&args);
    }

    /// How far the replacement of `original` has come for `workload` (see [`Fleet`]).
    pub fn fleet(&self, original: &[String], workload: &Workload) -> Fleet {
        let nodes = self.nodes();
        let pods = self.cluster.kubectl_json(&[
            "get",
            "pods",
            "-n",
            &workload.namespace,
            "-l",
            &workload.selector,
        ]);
        let mut fleet = Fleet {
            original_left: original
                .iter()
                .filter(|n| nodes.contains(n))
                .cloned()
                .collect(),
            new_nodes: nodes
                .iter()
                .filter(|n| !original.contains(n))
                .cloned()
                .collect(),
            ..Fleet::default()
        };
        for pod in pods["items"].as_array().into_iter().flatten() {
            let node = text(&pod["spec"]["nodeName"]);
            if node.is_empty() {
                fleet.pending += 1;
            } else if original.contains(&node) {
                fleet.on_original += 1;
            } else if is_ready(pod) && pod["metadata"]["deletionTimestamp"].is_null() {
                fleet.ready_elsewhere += 1;
            }
        }
        fleet
    }

    /// Waits until `check` holds of [`Karpenter::fleet`] and returns that fleet; the panic
    /// after `timeout` names `what` and the fleet as last seen.
    pub fn wait_for_fleet(
        &self,
        what: &str,
        original: &[String],
        workload: &Workload,
        timeout: Duration,
        check: impl Fn(&Fleet) -> bool,
    ) -> Fleet {
        let deadline = Instant::now() + timeout;
        loop {
            let fleet = self.fleet(original, workload);
            if check(&fleet) {
                return fleet;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}; last seen {fleet:#?} \
                 (Karpenter's log: {})",
                self.log_path().display()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Applies the CRDs in `dir` and waits until the API serves them.
fn install_crds(cluster: &RealCluster, dir: &Path) {
    let dir = dir.display().to_string();
    cluster.kubectl_ok(&[
        "apply",
        "--server-side",
        "--field-manager=rotor-e2e",
        "-f",
        &dir,
    ]);
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "-f",
        &dir,
    ]);
}

fn node_class(options: &KarpenterOptions) -> Value {
    json!({
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": options.node_pool},
        "spec": {"nodeRegistrationDelay": go_duration(options.registration_delay)},
    })
}

/// The NodePool: one instance type, on-demand, never expiring, consolidation off (only empty
/// nodes could be consolidated, and never), the budget for every reason.
fn node_pool(options: &KarpenterOptions, generation: u32) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": options.node_pool},
        "spec": {
            "template": {
                "metadata": {"labels": {GENERATION_LABEL: generation.to_string()}},
                "spec": {
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In",
                         "values": [options.instance_type]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In",
                         "values": ["on-demand"]},
                    ],
                    "nodeClassRef": {
                        "group": "karpenter.kwok.sh",
                        "kind": "KWOKNodeClass",
                        "name": options.node_pool,
                    },
                    "expireAfter": "Never",
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": "Never",
                "budgets": [{"nodes": options.budget}],
            },
            "limits": {"cpu": options.cpu_limit.to_string()},
        },
    })
}

/// A duration as Go's `time.ParseDuration` and the CRDs' `^([0-9]+(s|m|h))+$` take it, to the
/// millisecond (whole seconds for the CRDs: the callers pass whole seconds there).
fn go_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_writes_them() {
        assert_eq!(go_duration(Duration::ZERO), "0s");
        assert_eq!(go_duration(Duration::from_secs(5)), "5s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn the_node_pool_turns_off_everything_but_drift() {
        let pool = node_pool(&KarpenterOptions::default(), 3);
        let disruption = &pool["spec"]["disruption"];
        assert_eq!(disruption["consolidateAfter"], "Never");
        assert_eq!(disruption["budgets"], json!([{"nodes": "1"}]));
        assert_eq!(pool["spec"]["template"]["spec"]["expireAfter"], "Never");
        assert_eq!(
            pool["spec"]["template"]["metadata"]["labels"][GENERATION_LABEL],
            "3"
        );
    }

    #[test]
    fn a_fleet_is_replaced_once_its_pods_moved_and_its_nodes_went() {
        let web = Workload {
            namespace: "shop".into(),
            selector: "app=web".into(),
            replicas: 2,
        };
        let mut fleet = Fleet {
            original_left: vec!["old".into()],
            ready_elsewhere: 2,
            ..Fleet::default()
        };
        assert!(fleet.moved(&web) && !fleet.replaced(&web));
        fleet.original_left.clear();
        assert!(fleet.replaced(&web));
        fleet.pending = 1;
        assert!(!fleet.moved(&web));
    }
}
