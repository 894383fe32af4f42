//! A simulated cluster in the test's own process: rotor-sim's API server on a free port of
//! 127.0.0.1, a `kube::Client` for it built from the kubeconfig the simulator writes, a
//! kubeconfig file for a binary under test, the simulator's counters and its `/sim/v1` admin
//! API, and the reads and writes rotor's tests repeat (the drain taint, the `rotor.dev/`
//! annotations, bare pods and their budgets).
//!
//! [`SimProcess`](crate::SimProcess) is the other way to run the simulator: `rotor-sim serve`
//! as a child process, for tests of the binaries and of kubectl.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use rotor_sim::scenario::Scenario;
use rotor_sim::server::{RunningSim, StartOptions};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::TestDir;

/// The taint that asks rotor to drain a node.
pub const DRAIN_TAINT: &str = "rotor.dev/drain";

/// How long the harness's own waits (a budget counting its pods, a drain phase) may take.
const HARNESS_WAIT: Duration = Duration::from_secs(30);

/// rotor-sim serving `scenario` in this process, and a client for it.
pub struct SimCluster {
    pub sim: RunningSim,
    /// From the simulator's kubeconfig, with kube's retry of 429/503/504 turned off so every
    /// answer reaches the test as the server gave it.
    pub client: Client,
    kubeconfig: PathBuf,
    /// Holds the kubeconfig file; removed when the cluster is stopped or dropped.
    _scratch: TestDir,
}

impl SimCluster {
    /// Starts the simulator on the scenario `yaml`.
    pub async fn start(yaml: &str) -> SimCluster {
        SimCluster::start_with(yaml, StartOptions::default()).await
    }

    /// [`SimCluster::start`] with the simulator's options (e.g. the RBAC policy it enforces).
    pub async fn start_with(yaml: &str, options: StartOptions) -> SimCluster {
        let scenario = Scenario::from_yaml(yaml, "test").expect("test scenario is valid");
        let sim = rotor_sim::server::start_with(
            &scenario,
            "127.0.0.1:0".parse().expect("listen address"),
            CancellationToken::new(),
            options,
        )
        .await
        .expect("simulator starts");
        let client = client_for(&sim.url()).await;
        let scratch = TestDir::new("sim-kubeconfig");
        let kubeconfig = scratch.join("kubeconfig");
        rotor_sim::server::write_kubeconfig(&kubeconfig, &sim.url()).expect("kubeconfig");
        SimCluster {
            sim,
            client,
            kubeconfig,
            _scratch: scratch,
        }
    }

    /// The API server's base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        self.sim.url()
    }

    /// A client configuration with kube's defaults, as a binary under test builds its own.
    pub fn config(&self) -> Config {
        Config::new(self.url().parse().expect("the simulator's URL"))
    }

    /// A kubeconfig file pointing at this cluster, for a binary under test; removed with the
    /// cluster.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub async fn stop(self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.sim.stop()).await;
    }

    // --- The simulator itself: counters, store, admin API ---

    /// The simulator's counters (requests, evictions, budget violations, ...), read from its
    /// store without a request.
    pub fn stats(&self) -> Value {
        rotor_sim::admin::snapshot(&self.sim.sim.cluster.lock().unwrap())
    }

    /// Requests counted so far for `verb resource` (e.g. `patch nodes`).
    pub fn requests(&self, key: &str) -> u64 {
        self.stats()["requests"][key].as_u64().unwrap_or(0)
    }

    /// Every request counted so far.
    pub fn requests_total(&self) -> u64 {
        self.stats()["requestsTotal"].as_u64().unwrap()
    }

    /// Changes a node in the simulator's store directly (no HTTP request, so no counter moves);
    /// its resourceVersion changes as with any write.
    pub fn modify_node(&self, name: &str, change: impl FnOnce(&mut Node)) {
        let mut cluster = self.sim.sim.cluster.lock().unwrap();
        let node = cluster
            .nodes
            .get("", name)
            .cloned()
            .unwrap_or_else(|| panic!("no node {name}"));
        cluster.nodes.modify(&node, change);
    }

    /// `GET /sim/v1/<path>` as JSON.
    pub async fn admin_get(&self, path: &str) -> Value {
        let text = self.admin(http::Method::GET, path, None).await;
        serde_json::from_str(&text).expect("admin answer is JSON")
    }

    /// `POST /sim/v1/<path>` with a JSON body (or none); returns the body text. Panics unless
    /// the answer is 2xx.
    pub async fn admin_post(&self, path: &str, body: Option<Value>) -> String {
        self.admin(http::Method::POST, path, body).await
    }

    async fn admin(&self, method: http::Method, path: &str, body: Option<Value>) -> String {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("/sim/v1/{path}"));
        let bytes = match body {
            Some(b) => {
                req = req.header("content-type", "application/json");
                serde_json::to_vec(&b).expect("body serialises")
            }
            None => Vec::new(),
        };
        self.client
            .request_text(req.body(bytes).expect("admin request"))
            .await
            .unwrap_or_else(|e| panic!("admin call /sim/v1/{path} failed: {e}"))
    }

    /// Injects faults through the admin API (replacing the faults set before).
    pub async fn faults(&self, faults: Value) {
        self.admin_post("faults", Some(faults)).await;
    }

    /// Makes every `verb resource` request fail with `code`, through the admin API (replacing
    /// the faults set before).
    pub async fn fail_requests(&self, verb: &str, resource: &str, code: u16) {
        self.faults(
            json!({"errors": [{"verb": verb, "resource": resource, "rate": 1.0, "code": code}]}),
        )
        .await;
    }

    /// Sets what `/version` reports, through the admin API.
    pub async fn set_control_plane(&self, version: &str) {
        self.admin_post("control-plane-version", Some(json!({ "version": version })))
            .await;
    }

    /// Stops (or resumes) the simulated control plane; the API keeps serving.
    pub async fn pause(&self, paused: bool) {
        let out = self
            .admin_post("pause", Some(json!({ "paused": paused })))
            .await;
        let v: Value = serde_json::from_str(&out).expect("pause answer");
        assert_eq!(v["paused"], paused);
    }

    /// Runs the control plane once (useful while paused).
    pub async fn step(&self) {
        self.admin_post("step", None).await;
    }

    // --- The Kubernetes API ---

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::all(self.client.clone())
    }

    pub fn ns<K>(&self, ns: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), ns)
    }

    pub fn nodes(&self) -> Api<Node> {
        self.api()
    }

    pub fn pods(&self, ns: &str) -> Api<Pod> {
        self.ns(ns)
    }

    pub fn pdbs(&self, ns: &str) -> Api<PodDisruptionBudget> {
        self.ns(ns)
    }

    pub async fn node(&self, name: &str) -> Node {
        self.nodes().get(name).await.unwrap()
    }

    /// The names of the cluster's nodes, sorted.
    pub async fn node_names(&self) -> Vec<String> {
        self.names_of_nodes(|_| true).await
    }

    /// The names of the nodes that `keep` accepts, sorted.
    async fn names_of_nodes(&self, keep: impl Fn(&Node) -> bool) -> Vec<String> {
        let mut names: Vec<String> = self
            .nodes()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|n| keep(n))
            .filter_map(|n| n.metadata.name)
            .collect();
        names.sort();
        names
    }

    /// The pods bound to `node`, in every namespace.
    pub async fn pods_on(&self, node: &str) -> Vec<Pod> {
        Api::<Pod>::all(self.client.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await
            .unwrap()
            .items
    }

    /// Pods matching a label selector in a namespace, sorted by name.
    pub async fn pods_labelled(&self, ns: &str, selector: &str) -> Vec<Pod> {
        let mut pods = self
            .pods(ns)
            .list(&ListParams::default().labels(selector))
            .await
            .expect("list pods")
            .items;
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        pods
    }

    /// Nodes running at least one pod whose name starts with `prefix`, in node-name order.
    pub async fn nodes_hosting(&self, prefix: &str) -> Vec<String> {
        let mut out = Vec::new();
        for n in self.node_names().await {
            if self
                .pods_on(&n)
                .await
                .iter()
                .any(|p| p.metadata.name.as_deref().unwrap_or("").starts_with(prefix))
            {
                out.push(n);
            }
        }
        out
    }

    /// Creates a pod labelled `app=<app>` bound to `node` that no controller owns (nothing
    /// recreates it once evicted).
    pub async fn create_bare_pod(&self, namespace: &str, name: &str, app: &str, node: &str) {
        self.create_bare_pod_with(namespace, name, app, node, Value::Null)
            .await
    }

    /// [`SimCluster::create_bare_pod`] with these annotations (e.g. the simulator's
    /// `sim.rotor.dev/shutdown`).
    pub async fn create_bare_pod_with(
        &self,
        namespace: &str,
        name: &str,
        app: &str,
        node: &str,
        annotations: Value,
    ) {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": app},
                         "annotations": annotations},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:1"}]}
        }))
        .unwrap();
        self.pods(namespace)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
    }

    /// Creates the budget `app` over the pods labelled `app=<app>` with an integer minAvailable
    /// (what pods without a controller need), and waits until its status counts `pods` pods,
    /// all healthy. Returns that status.
    pub async fn create_budget(
        &self,
        namespace: &str,
        app: &str,
        min_available: i32,
        pods: i32,
    ) -> PodDisruptionBudgetStatus {
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": app, "namespace": namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}
        }))
        .unwrap();
        let pdbs = self.pdbs(namespace);
        pdbs.create(&PostParams::default(), &pdb).await.unwrap();
        wait_until(
            &format!("budget {app} to count its pods"),
            HARNESS_WAIT,
            || async {
                let status = pdbs.get(app).await.ok()?.status?;
                (status.expected_pods == pods && status.current_healthy == pods).then_some(status)
            },
        )
        .await
    }

    // --- Nodes as rotor marks them ---

    /// Puts the drain taint on a node with this reason, as `kubectl taint` would.
    pub async fn taint(&self, node: &str, reason: &str) {
        self.add_taint(node, DRAIN_TAINT, reason).await
    }

    async fn node_taints(&self, node: &str) -> Vec<Taint> {
        self.node(node)
            .await
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
    }

    /// Adds a NoSchedule taint `key=value` to the node.
    pub async fn add_taint(&self, node: &str, key: &str, value: &str) {
        let mut taints = self.node_taints(node).await;
        taints.push(Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
        self.patch_node(node, json!({"spec": {"taints": taints}}))
            .await
    }

    /// Removes the drain taint from the node.
    pub async fn untaint(&self, node: &str) {
        let taints: Vec<_> = self
            .node_taints(node)
            .await
            .into_iter()
            .filter(|t| t.key != DRAIN_TAINT)
            .collect();
        self.patch_node(node, json!({"spec": {"taints": taints}}))
            .await
    }

    pub async fn cordon(&self, node: &str) {
        self.patch_node(node, json!({"spec": {"unschedulable": true}}))
            .await
    }

    async fn patch_node(&self, node: &str, patch: Value) {
        self.nodes()
            .patch(node, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .unwrap();
    }

    /// Sets the node's annotation `key` to `value`, or removes it (`None`).
    pub async fn annotate(&self, node: &str, key: &str, value: Option<&str>) {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        self.nodes()
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    pub async fn annotation(&self, node: &str, key: &str) -> Option<String> {
        self.node(node)
            .await
            .metadata
            .annotations
            .and_then(|a| a.get(key).cloned())
    }

    /// The node's drain phase (`rotor.dev/phase`), if rotor has written one.
    pub async fn phase(&self, node: &str) -> Option<String> {
        self.annotation(node, "rotor.dev/phase").await
    }

    /// The node's annotations under `rotor.dev/`.
    pub async fn rotor_annotations(&self, name: &str) -> BTreeMap<String, String> {
        self.node(name)
            .await
            .metadata
            .annotations
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| k.starts_with("rotor.dev/"))
            .collect()
    }

    /// Waits until the drainer records `phase` on the node.
    pub async fn wait_phase(&self, node: &str, phase: &str) {
        wait_until(
            &format!("node {node} to reach phase {phase}"),
            HARNESS_WAIT,
            || async {
                (self.annotation(node, "rotor.dev/phase").await.as_deref() == Some(phase))
                    .then_some(())
            },
        )
        .await
    }

    /// The node's drain taint as `value:effect`.
    pub async fn drain_taint(&self, name: &str) -> Option<String> {
        self.node_taints(name)
            .await
            .into_iter()
            .find(|t| t.key == DRAIN_TAINT)
            .map(|t| format!("{}:{}", t.value.unwrap_or_default(), t.effect))
    }

    /// Every taint of the node as `key=value:effect`.
    pub async fn taints(&self, name: &str) -> Vec<String> {
        self.node_taints(name)
            .await
            .into_iter()
            .map(|t| format!("{}={}:{}", t.key, t.value.unwrap_or_default(), t.effect))
            .collect()
    }

    /// Names of the nodes carrying the drain taint, sorted.
    pub async fn tainted(&self) -> Vec<String> {
        self.names_of_nodes(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == DRAIN_TAINT))
        })
        .await
    }
}

/// The client configuration of the simulator's own kubeconfig for `url`, with kube's default
/// retry of 429/503/504 turned off so every answer reaches the caller as the server gave it.
pub async fn config_for(url: &str) -> Config {
    let mut config = config_from_kubeconfig_yaml(&rotor_sim::server::kubeconfig_yaml(url)).await;
    assert_eq!(config.cluster_url.to_string().trim_end_matches('/'), url);
    config.default_retry = false;
    config
}

/// A client from [`config_for`].
pub async fn client_for(url: &str) -> Client {
    Client::try_from(config_for(url).await).expect("client builds")
}

/// A client from a kubeconfig's text (e.g. a ServiceAccount's, as the simulator writes it),
/// with kube's default retry turned off.
pub async fn client_from_kubeconfig_yaml(yaml: &str) -> Client {
    let mut config = config_from_kubeconfig_yaml(yaml).await;
    config.default_retry = false;
    Client::try_from(config).expect("client builds")
}

async fn config_from_kubeconfig_yaml(yaml: &str) -> Config {
    let kubeconfig = Kubeconfig::from_yaml(yaml).expect("kubeconfig parses");
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig is usable")
}

/// Polls `check` every 20 ms until it yields a value; panics naming `what` after `timeout`.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
