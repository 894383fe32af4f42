//! The simulator as the benchmark uses it: one `rotor-sim serve` child (rotor-e2e's
//! [`SimProcess`]) per run, its counters, and kube's client for the benchmark's own writes.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, ensure};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use rotor_e2e::sim_cluster::client_for;
use rotor_e2e::{SimOptions, SimProcess};
use serde_json::{Value, json};
use tokio::runtime::Handle;

/// A `rotor-sim serve` child on a free port of 127.0.0.1, killed on drop, and a client for it.
pub struct BenchSim {
    pub process: SimProcess,
    pub client: kube::Client,
    pub runtime: Handle,
}

impl BenchSim {
    /// Starts `rotor-sim serve --scenario <scenario>` with its files (kubeconfig, log) in `dir`,
    /// allowing it `timeout` to build the scenario and listen.
    pub fn start(
        runtime: &Handle,
        scenario: &Path,
        dir: &Path,
        timeout: Duration,
    ) -> anyhow::Result<BenchSim> {
        let process = SimProcess::start_with(
            scenario,
            SimOptions {
                start_timeout: Some(timeout),
                dir: Some(dir.to_path_buf()),
                ..SimOptions::default()
            },
        );
        // Without kube's retries, so each taint is one request in the counters.
        let client = runtime.block_on(client_for(process.url()));
        Ok(BenchSim {
            process,
            client,
            runtime: runtime.clone(),
        })
    }

    pub fn kubeconfig(&self) -> &Path {
        self.process.kubeconfig()
    }

    /// `GET path` as JSON; an error unless the answer is 2xx.
    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        let r = self.process.request("GET", path, None);
        ensure!(
            (200..300).contains(&r.status),
            "GET {path} answered {}: {}",
            r.status,
            r.body
        );
        Ok(r.json())
    }

    pub fn stats(&self) -> anyhow::Result<Value> {
        self.get("/sim/v1/stats")
    }

    pub fn reset_stats(&self) -> anyhow::Result<()> {
        let r = self
            .process
            .request("POST", "/sim/v1/stats/reset", Some(&json!({})));
        ensure!(
            (200..300).contains(&r.status),
            "POST /sim/v1/stats/reset answered {}: {}",
            r.status,
            r.body
        );
        Ok(())
    }

    /// Polls the simulator's request counters until each `(key, at least)` holds.
    pub fn wait_for_requests(&self, want: &[(&str, u64)], timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let stats = self.stats()?;
            if want
                .iter()
                .all(|(k, n)| stats["requests"][*k].as_u64().unwrap_or(0) >= *n)
            {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "timed out waiting for requests {want:?}; requests so far: {}",
                stats["requests"]
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Adds the drain taint to every node at once (see [`taint_all`]).
    pub fn taint_all<'a>(
        &self,
        nodes: impl IntoIterator<Item = (&'a str, &'a [Value])>,
    ) -> anyhow::Result<()> {
        taint_all(&self.client, &self.runtime, nodes)
    }
}

/// Adds the drain taint to every node at once: one JSON patch per node, in parallel. `nodes`
/// holds each node's name and its taints before.
pub fn taint_all<'a>(
    client: &kube::Client,
    runtime: &Handle,
    nodes: impl IntoIterator<Item = (&'a str, &'a [Value])>,
) -> anyhow::Result<()> {
    let patches: Vec<_> = nodes
        .into_iter()
        .map(|(name, taints)| {
            runtime.spawn(taint(client.clone(), name.to_string(), taints.to_vec()))
        })
        .collect();
    runtime.block_on(async {
        for patch in patches {
            patch
                .await
                .map_err(|_| anyhow!("a taint task panicked"))??;
        }
        Ok(())
    })
}

/// Adds `rotor.dev/drain=manual:NoSchedule` to the node's taints `existing`, with one JSON patch.
async fn taint(client: kube::Client, node: String, existing: Vec<Value>) -> anyhow::Result<()> {
    let mut taints = existing;
    taints.push(json!({"key": "rotor.dev/drain", "value": "manual", "effect": "NoSchedule"}));
    let patch = json!([{"op": "add", "path": "/spec/taints", "value": taints}]);
    Api::<Node>::all(client)
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(patch).context("a JSON patch")?),
        )
        .await
        .with_context(|| format!("tainting {node}"))?;
    Ok(())
}

/// `after - before` for every counter that changed.
pub fn delta(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, i64> {
    after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                *v as i64 - before.get(k).copied().unwrap_or(0) as i64,
            )
        })
        .filter(|(_, d)| *d != 0)
        .collect()
}

/// A JSON object of counters (`requests`, `evictions` in the simulator's stats).
pub fn counts(v: &Value) -> BTreeMap<String, u64> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}
