//! Shared harness for the simulator's integration tests: start `rotor-sim` in-process on a free
//! port, talk to it with a real `kube::Client` over HTTP (built from the kubeconfig the simulator
//! writes), call the `/sim/v1` admin API over the same client, and wait for conditions by
//! polling with a deadline.

#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use axum::http::{Method, Request};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use kube::api::{ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::Status;
use kube::{Api, Client, Config};
use rotor_sim::scenario::Scenario;
use rotor_sim::server::RunningSim;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Timings that keep every test fast: a 20 ms control loop, pods that start and stop in about
/// 100 ms, nodes that boot in 300 ms.
pub const FAST_TIMING: &str = r#"
timing:
  tick: 20ms
  nodeStartup: 300ms
  scaleUpDelay: 300ms
  scaleDownDelay: 500ms
  bookmarkInterval: 200ms
  podStartup: 100ms
  podShutdown: 100ms
"#;

/// How long any single wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

pub struct TestSim {
    pub running: RunningSim,
    pub client: Client,
}

impl TestSim {
    /// Starts a simulator for `FAST_TIMING` plus `body` (node groups, workloads, ...).
    pub async fn start(body: &str) -> TestSim {
        let yaml = format!("{FAST_TIMING}{body}");
        let scenario = Scenario::from_yaml(&yaml, "test").expect("test scenario is valid");
        let running = rotor_sim::server::start(
            &scenario,
            "127.0.0.1:0".parse().expect("listen address"),
            CancellationToken::new(),
        )
        .await
        .expect("simulator starts");
        let client = client_for(&running.url()).await;
        TestSim { running, client }
    }

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

    pub fn pods(&self, ns: &str) -> Api<Pod> {
        self.ns(ns)
    }

    pub fn nodes(&self) -> Api<Node> {
        self.api()
    }

    /// The names of the cluster's nodes, sorted.
    pub async fn node_names(&self) -> std::collections::BTreeSet<String> {
        self.nodes()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|n| n.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    /// One node's name (the first in name order).
    pub async fn any_node(&self) -> String {
        self.node_names().await.pop_first().expect("a node")
    }

    pub fn pdbs(&self, ns: &str) -> Api<PodDisruptionBudget> {
        self.ns(ns)
    }

    /// `GET /sim/v1/<path>` as JSON.
    pub async fn admin_get(&self, path: &str) -> Value {
        let text = self.admin(Method::GET, path, None).await;
        serde_json::from_str(&text).expect("admin answer is JSON")
    }

    /// `POST /sim/v1/<path>` with a JSON body (or none); returns the body text.
    pub async fn admin_post(&self, path: &str, body: Option<Value>) -> String {
        self.admin(Method::POST, path, body).await
    }

    async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> String {
        let mut req = Request::builder()
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

    pub async fn stats(&self) -> Value {
        self.admin_get("stats").await
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

    /// Evicts a pod through the eviction subresource with a typed policy/v1 Eviction.
    pub async fn evict(&self, ns: &str, name: &str) -> Result<Status, kube::Error> {
        self.evict_with(ns, name, None).await
    }

    pub async fn evict_with(
        &self,
        ns: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<Status, kube::Error> {
        let eviction = Eviction {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(ns.to_string()),
                ..Default::default()
            },
            delete_options: uid.map(|uid| DeleteOptions {
                preconditions: Some(Preconditions {
                    uid: Some(uid.to_string()),
                    resource_version: None,
                }),
                ..Default::default()
            }),
        };
        self.pods(ns)
            .create_subresource::<Eviction, Status>(
                "eviction",
                name,
                &PostParams::default(),
                &eviction,
            )
            .await
    }

    /// Raw eviction POST, for what the typed client hides: the response headers.
    pub async fn evict_raw(&self, ns: &str, name: &str) -> axum::http::Response<Value> {
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
            "deleteOptions": {},
        });
        let req = Request::builder()
            .method(Method::POST)
            .uri(format!("/api/v1/namespaces/{ns}/pods/{name}/eviction"))
            .header("content-type", "application/json")
            .body(kube::client::Body::from(
                serde_json::to_vec(&body).expect("eviction body"),
            ))
            .expect("eviction request");
        let resp = self.client.send(req).await.expect("eviction is answered");
        let (parts, body) = resp.into_parts();
        let bytes = body.collect_bytes().await.expect("eviction body read");
        let v = serde_json::from_slice(&bytes).expect("eviction answer is JSON");
        axum::http::Response::from_parts(parts, v)
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

    pub async fn stop(self) {
        let stop = self.running.stop();
        let _ = tokio::time::timeout(Duration::from_secs(5), stop).await;
    }
}

/// A client built from the simulator's own kubeconfig, with kube's default retry of 429/503/504
/// turned off so every answer reaches the test as the server gave it.
pub async fn client_for(url: &str) -> Client {
    let yaml = rotor_sim::server::kubeconfig_yaml(url);
    let kubeconfig = Kubeconfig::from_yaml(&yaml).expect("kubeconfig parses");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig is usable");
    assert_eq!(config.cluster_url.to_string().trim_end_matches('/'), url);
    config.default_retry = false;
    Client::try_from(config).expect("client builds")
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

/// The API error inside a kube error, or a panic naming what was expected.
pub fn api_error(r: Result<impl std::fmt::Debug, kube::Error>) -> Box<Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

pub fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

pub fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone())
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

pub fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// `(currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed)`.
pub fn pdb_counts(pdb: &PodDisruptionBudget) -> (i32, i32, i32, i32) {
    let s = pdb.status.clone().unwrap_or_default();
    (
        s.current_healthy,
        s.desired_healthy,
        s.expected_pods,
        s.disruptions_allowed,
    )
}

pub fn disrupted_pods(pdb: &PodDisruptionBudget) -> Vec<String> {
    pdb.status
        .as_ref()
        .and_then(|s| s.disrupted_pods.as_ref())
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Whether a GET of the pod answers 404.
pub async fn pod_gone(api: &Api<Pod>, name: &str) -> bool {
    match api.get(name).await {
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Ok(_) => false,
        Err(e) => panic!("unexpected error reading pod {name}: {e}"),
    }
}
