//! Harness for the drainer's tests against the simulator over real HTTP: start a simulated
//! cluster in-process, run the drainer's real runtime against it, and wait for what it does.

#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use rotor_drainer::config::{DrainArgs, LeaderArgs};
use rotor_sim::scenario::Scenario;
use rotor_sim::server::RunningSim;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub const WAIT: Duration = Duration::from_secs(30);

pub struct TestCluster {
    pub sim: RunningSim,
    pub client: Client,
}

impl TestCluster {
    pub async fn start(yaml: &str) -> TestCluster {
        let scenario = Scenario::from_yaml(yaml, "test").expect("test scenario");
        let sim = rotor_sim::server::start(
            &scenario,
            "127.0.0.1:0".parse().unwrap(),
            CancellationToken::new(),
        )
        .await
        .expect("simulator starts");
        let client = Client::try_from(kube::Config::new(sim.url().parse().unwrap())).unwrap();
        TestCluster { sim, client }
    }

    pub fn config(&self) -> kube::Config {
        kube::Config::new(self.sim.url().parse().unwrap())
    }

    /// The simulator's counters (requests, evictions, budget violations, ...).
    pub fn stats(&self) -> Value {
        rotor_sim::admin::snapshot(&self.sim.sim.cluster.lock().unwrap())
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    pub async fn node(&self, name: &str) -> Node {
        self.nodes().get(name).await.unwrap()
    }

    pub async fn node_names(&self) -> Vec<String> {
        self.nodes()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect()
    }

    pub async fn pods_on(&self, node: &str) -> Vec<Pod> {
        Api::<Pod>::all(self.client.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await
            .unwrap()
            .items
    }

    pub async fn pods_on_label(&self, ns: &str, selector: &str) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap()
            .items
    }

    /// Puts the drain taint on a node, as `kubectl taint` would.
    /// Creates a pod labelled `app=<app>` bound to `node` that no controller owns (nothing
    /// recreates it once evicted).
    pub async fn create_bare_pod(&self, namespace: &str, name: &str, app: &str, node: &str) {
        self.create_bare_pod_with(namespace, name, app, node, Value::Null)
            .await
    }

    /// [`TestCluster::create_bare_pod`] with these annotations (e.g. the simulator's
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
        Api::<Pod>::namespaced(self.client.clone(), namespace)
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
        let pdbs = Api::<PodDisruptionBudget>::namespaced(self.client.clone(), namespace);
        pdbs.create(&PostParams::default(), &pdb).await.unwrap();
        wait_until(&format!("budget {app} to count its pods"), WAIT, || async {
            let status = pdbs.get(app).await.ok()?.status?;
            (status.expected_pods == pods && status.current_healthy == pods).then_some(status)
        })
        .await
    }

    pub async fn taint(&self, node: &str, reason: &str) {
        self.add_taint(node, "rotor.dev/drain", reason).await
    }

    /// Adds a NoSchedule taint `key=value` to the node.
    pub async fn add_taint(&self, node: &str, key: &str, value: &str) {
        let n = self.node(node).await;
        let mut taints = n.spec.and_then(|s| s.taints).unwrap_or_default();
        taints.push(k8s_openapi::api::core::v1::Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
        let patch = json!({"spec": {"taints": taints}});
        self.nodes()
            .patch(node, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .unwrap();
    }

    pub async fn untaint(&self, node: &str) {
        let n = self.node(node).await;
        let taints: Vec<_> = n
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.key != "rotor.dev/drain")
            .collect();
        let patch = json!({"spec": {"taints": taints}});
        self.nodes()
            .patch(node, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .unwrap();
    }

    pub async fn cordon(&self, node: &str) {
        let patch = json!({"spec": {"unschedulable": true}});
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

    /// Waits until the drainer records `phase` on the node.
    pub async fn wait_phase(&self, node: &str, phase: &str) {
        wait_until(
            &format!("node {node} to reach phase {phase}"),
            WAIT,
            || async {
                (self.annotation(node, "rotor.dev/phase").await.as_deref() == Some(phase))
                    .then_some(())
            },
        )
        .await
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

    pub async fn stop(self) {
        self.sim.stop().await;
    }
}

#[derive(Parser)]
struct DrainerCli {
    #[command(flatten)]
    drain: DrainArgs,
    #[command(flatten)]
    leader: LeaderArgs,
}

/// A drainer running in-process against the test cluster.
pub struct TestDrainer {
    pub stop: CancellationToken,
    pub handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl TestDrainer {
    /// Starts the drainer with these flags (plus a unique identity, a fast lease and, unless the
    /// flags set one, a short settle time).
    pub fn start(cluster: &TestCluster, identity: &str, flags: &[&str]) -> TestDrainer {
        let mut args = vec![
            "rotor-drainer",
            "--identity",
            identity,
            "--lease-duration",
            "2s",
        ];
        if !flags.iter().any(|f| f.starts_with("--settle")) {
            args.extend_from_slice(&["--settle", "300ms"]);
        }
        args.extend_from_slice(flags);
        let cli = DrainerCli::try_parse_from(args).expect("test flags parse");
        let cfg = cli.drain.validate().expect("test flags are valid");
        let stop = CancellationToken::new();
        let handle = tokio::spawn(rotor_drainer::runtime::run(
            cluster.config(),
            cfg,
            cli.leader,
            "127.0.0.1:0".parse().unwrap(),
            stop.clone(),
        ));
        TestDrainer { stop, handle }
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        self.handle.await.expect("drainer task")
    }
}

/// Polls `check` until it returns Some, or panics naming `what`.
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
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn is_daemon_or_mirror(p: &Pod) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
        || p.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "DaemonSet")
}
