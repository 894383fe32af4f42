//! The simulator's own part of its tests' harness: rotor-e2e's [`SimCluster`] on fast timings,
//! evictions as a client sends them, and readers of pod and budget state.

#![allow(dead_code)]

use std::ops::Deref;
use std::time::Duration;

use axum::http::{Method, Request};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use kube::Api;
use kube::api::PostParams;
use kube::core::Status;
pub use rotor_e2e::sim_cluster::{SimCluster, wait_until};
use serde_json::{Value, json};

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

/// A [`SimCluster`] (which this derefs to) on [`FAST_TIMING`].
pub struct TestSim {
    cluster: SimCluster,
}

impl Deref for TestSim {
    type Target = SimCluster;

    fn deref(&self) -> &SimCluster {
        &self.cluster
    }
}

impl TestSim {
    /// Starts a simulator for `FAST_TIMING` plus `body` (node groups, workloads, ...).
    pub async fn start(body: &str) -> TestSim {
        TestSim::start_timed(FAST_TIMING, body).await
    }

    /// Starts a simulator for `timing` (a scenario's `timing:` section) plus `body`.
    pub async fn start_timed(timing: &str, body: &str) -> TestSim {
        TestSim {
            cluster: SimCluster::start(&format!("{timing}{body}")).await,
        }
    }

    /// One node's name (the first in name order).
    pub async fn any_node(&self) -> String {
        self.node_names().await.swap_remove(0)
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

    pub async fn stop(self) {
        self.cluster.stop().await;
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
    rotor_apimachinery::conditions::pod_is_ready(pod)
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
