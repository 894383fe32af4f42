//! The selector's own part of its tests' harness: the built `rotor-selector` run against a
//! simulated cluster (rotor-e2e's [`SimCluster`]) through a kubeconfig, what it printed, and the
//! Events it wrote; the fleet most tests start from.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ops::Deref;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams};
use rotor_e2e::SimCluster;
use serde_json::Value;

/// Two node groups: `old` (4 nodes, kubelet v1.33.2, zones a/b alternating, each with a
/// `dedicated=batch:NoSchedule` taint of its own) and `new` (2 nodes, kubelet v1.34.1, zone a),
/// control plane v1.33.4. The autoscaler never removes tainted nodes during a test.
pub const FLEET: &str = r#"
controlPlaneVersion: v1.33.4
timing:
  tick: 50ms
  nodeStartup: 200ms
  scaleUpDelay: 1h
  scaleDownDelay: 1h
nodeGroups:
  - name: old
    zones: [us-east-1a, us-east-1b]
    size: 4
    template:
      kubeletVersion: v1.33.2
      nodeName: "old-{index}"
      statusImages: 2
      taints: [{key: dedicated, value: batch, effect: NoSchedule}]
  - name: new
    zones: [us-east-1a]
    size: 2
    template:
      kubeletVersion: v1.34.1
      nodeName: "new-{index}"
      statusImages: 2
"#;

/// Node ages in days for [`FLEET`], set by [`TestCluster::start_fleet`]: the `new` nodes are the
/// oldest (but current), then old-0 (zone a), old-1 (b), old-2 (a), old-3 (b).
pub const AGES: [(&str, i64); 6] = [
    ("new-0", 60),
    ("new-1", 50),
    ("old-0", 40),
    ("old-1", 30),
    ("old-2", 20),
    ("old-3", 10),
];

/// A simulated cluster (rotor-e2e's [`SimCluster`], which this derefs to) that the built
/// `rotor-selector` runs against.
pub struct TestCluster {
    cluster: SimCluster,
}

impl Deref for TestCluster {
    type Target = SimCluster;

    fn deref(&self) -> &SimCluster {
        &self.cluster
    }
}

/// What one run of the binary did.
#[derive(Debug)]
pub struct SelectorRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl SelectorRun {
    /// stdout as JSON (for `--output json`).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    /// (node, action) for every node of the JSON output.
    pub fn actions(&self) -> Vec<(String, String)> {
        self.json()["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| {
                (
                    n["node"].as_str().unwrap().to_owned(),
                    n["action"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// The JSON output's entry for `node`.
    pub fn node(&self, node: &str) -> Value {
        self.json()["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .find(|n| n["node"] == node)
            .unwrap_or_else(|| panic!("{node} is not in the output"))
            .clone()
    }
}

impl TestCluster {
    pub async fn start(yaml: &str) -> TestCluster {
        TestCluster {
            cluster: SimCluster::start(yaml).await,
        }
    }

    /// [`FLEET`] with the node ages of [`AGES`].
    pub async fn start_fleet() -> TestCluster {
        let cluster = TestCluster::start(FLEET).await;
        let now = jiff::Timestamp::now();
        for (node, days) in AGES {
            let created = now - jiff::SignedDuration::from_hours(24 * days);
            cluster.modify_node(node, |n| {
                n.metadata.creation_timestamp = Some(Time(created))
            });
        }
        cluster
    }

    /// Sets a node's `spec.providerID` to the AWS form for `instance` in us-east-1a, directly in
    /// the store.
    pub fn set_instance(&self, node: &str, instance: &str) {
        let id = format!("aws:///us-east-1a/{instance}");
        self.modify_node(node, |n| {
            n.spec.get_or_insert_with(Default::default).provider_id = Some(id)
        });
    }

    /// Adds a taint and annotations to a node, directly in the store.
    pub fn mark(&self, name: &str, taint: Option<(&str, &str)>, annotations: &[(&str, &str)]) {
        self.modify_node(name, |n| {
            if let Some((value, effect)) = taint {
                let spec = n.spec.get_or_insert_with(Default::default);
                spec.taints
                    .get_or_insert_with(Vec::new)
                    .push(k8s_openapi::api::core::v1::Taint {
                        key: "rotor.dev/drain".into(),
                        value: Some(value.into()),
                        effect: effect.into(),
                        time_added: None,
                    });
            }
            let map = n.metadata.annotations.get_or_insert_with(BTreeMap::new);
            for (key, value) in annotations {
                map.insert((*key).into(), (*value).into());
            }
        });
    }

    /// Runs the built `rotor-selector` against this cluster with these flags.
    pub async fn run(&self, flags: &[&str]) -> SelectorRun {
        run_to_end(self.command(flags)).await
    }

    /// Runs the built `rotor-selector` against this cluster with these flags and extra
    /// environment variables (e.g. `AWS_ENDPOINT_URL`).
    pub async fn run_env(&self, flags: &[&str], env: &[(&str, &str)]) -> SelectorRun {
        let mut command = bare_command(flags, env);
        command.arg("--kubeconfig").arg(self.kubeconfig());
        run_to_end(command).await
    }

    /// Starts the built `rotor-selector` against this cluster without waiting for it.
    pub fn spawn(&self, flags: &[&str]) -> tokio::process::Child {
        self.command(flags).spawn().expect("rotor-selector starts")
    }

    fn command(&self, flags: &[&str]) -> tokio::process::Command {
        let mut command = bare_command(flags, &[]);
        command.arg("--kubeconfig").arg(self.kubeconfig());
        command
    }

    /// (reason, action, reporting controller, note) of the events.k8s.io/v1 Events about a node.
    pub async fn events(&self, node: &str) -> Vec<(String, String, String, String)> {
        Api::<Event>::namespaced(self.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node)
                    && e.reporting_controller.as_deref() == Some("rotor-selector")
            })
            .map(|e| {
                (
                    e.reason.unwrap_or_default(),
                    e.action.unwrap_or_default(),
                    e.reporting_controller.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect()
    }

    pub async fn stop(self) {
        self.cluster.stop().await;
    }
}

/// Runs the built `rotor-selector` with these flags and environment variables only (no
/// kubeconfig of the harness; the caller's `ROTOR_*`, `AWS_*`, `KUBECONFIG` and `POD_NAME`
/// removed).
pub async fn run_bare(flags: &[&str], env: &[(&str, &str)]) -> SelectorRun {
    run_to_end(bare_command(flags, env)).await
}

/// The longest a test waits for one run: a run that pages or retries forever fails its test
/// instead of hanging the suite (the child is killed on drop).
const RUN_BOUND: Duration = Duration::from_secs(600);

async fn run_to_end(mut command: tokio::process::Command) -> SelectorRun {
    let output = tokio::time::timeout(RUN_BOUND, command.output())
        .await
        .unwrap_or_else(|_| panic!("rotor-selector did not finish within {RUN_BOUND:?}"))
        .expect("rotor-selector runs");
    finished(output)
}

fn bare_command(flags: &[&str], env: &[(&str, &str)]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_rotor-selector"));
    for (key, _) in std::env::vars() {
        // The developer's AWS settings (region, profile, credentials) must not leak into a test.
        if key.starts_with("ROTOR_")
            || key.starts_with("AWS_")
            || key == "KUBECONFIG"
            || key == "POD_NAME"
        {
            command.env_remove(key);
        }
    }
    command
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Waits for a spawned run to finish.
pub async fn wait(child: tokio::process::Child) -> SelectorRun {
    finished(
        child
            .wait_with_output()
            .await
            .expect("rotor-selector finishes"),
    )
}

fn finished(output: std::process::Output) -> SelectorRun {
    SelectorRun {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Polls `check` every 2 ms until it holds, or panics naming `what`.
pub async fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// rotor-selector on a real control plane as its own ServiceAccount (`kubeconfig`), with
/// `--provider provider`, every node in budget and JSON output, plus `extra`; the test fails
/// unless it exits 0.
pub async fn run_cloud_selector(
    kubeconfig: &str,
    provider: &str,
    env: &[(&'static str, String)],
    extra: &[&str],
) -> SelectorRun {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut flags = vec![
        "--kubeconfig",
        kubeconfig,
        "--provider",
        provider,
        "--max-tainted",
        "100%",
        "--output",
        "json",
    ];
    flags.extend_from_slice(extra);
    let run = run_bare(&flags, &env).await;
    assert_eq!(
        run.code, 0,
        "{flags:?}\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    run
}

/// A `--retire-drained` run retired exactly `retired` (applied, one `operation` call each, an
/// `InstanceRetired` Event whose message holds each node's `event_says`) and kept `kept`.
pub fn assert_retired(
    run: &SelectorRun,
    retired: &[(&str, String)],
    kept: &str,
    (api, operation): (&str, &str),
    node_events: impl Fn(&str) -> Vec<(String, String)>,
) {
    for (node, event_says) in retired {
        let entry = run.node(node);
        assert_eq!(entry["action"], "retire", "{entry}");
        assert_eq!(entry["result"]["outcome"], "applied", "{entry}");
        let events = node_events(node);
        assert!(
            events
                .iter()
                .any(|(reason, message)| reason == "InstanceRetired"
                    && message.contains(event_says.as_str())),
            "{node}: no InstanceRetired Event saying {event_says:?}: {events:?}"
        );
    }
    assert_eq!(run.node(kept)["action"], "keep");
    assert_eq!(
        run.json()["apiCalls"][api][operation],
        retired.len(),
        "{operation} calls"
    );
}
