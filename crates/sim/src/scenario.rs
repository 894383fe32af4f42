//! Scenario files: the YAML that describes a simulated cluster (control-plane version, timing,
//! node groups with their templates, static pods, workloads, RotationPolicies). Unknown keys are rejected, so a
//! typo fails loudly instead of being silently ignored. The format is documented in
//! `examples/scenarios/README.md`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::rotor_kinds::{RotationPolicy, RotationPolicyKind, schema_problems};

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("scenario file {path} is not valid: {message}")]
    Parse { path: String, message: String },
    #[error("scenario {path}: {message}")]
    Invalid { path: String, message: String },
}

/// A duration written as `100ms`, `5s`, `2m`, `1h30m` or ISO 8601: rotor's one duration syntax
/// ([`rotor_core::duration`]).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    rotor_core::parse_duration(s).map_err(|e| e.to_string())
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s).map_err(serde::de::Error::custom)
}

fn de_opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    s.map(|s| parse_duration(&s).map_err(serde::de::Error::custom))
        .transpose()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// The API server's version, as `/version` reports it (e.g. `v1.33.4`).
    #[serde(default = "default_cp_version")]
    pub control_plane_version: String,
    #[serde(default)]
    pub timing: Timing,
    #[serde(default)]
    pub node_groups: Vec<NodeGroupSpec>,
    /// Static pods every node's kubelet runs; they appear as mirror pods.
    #[serde(default)]
    pub static_pods: Vec<StaticPodSpec>,
    /// Namespaces to create besides those the workloads name.
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub workloads: Vec<WorkloadSpec>,
    /// Start with every workload already scheduled, running and Ready (a settled cluster).
    #[serde(default = "yes")]
    pub start_settled: bool,
    /// RotationPolicies the cluster starts with (docs/policy.md), written as for `kubectl
    /// apply` (`apiVersion` and `kind` may be left out): the drainer finds them as it would on
    /// a cluster where someone had applied them.
    #[serde(default)]
    pub rotation_policies: Vec<RotationPolicy>,
}

fn default_cp_version() -> String {
    "v1.33.4".into()
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Timing {
    /// How often the simulated controllers run.
    #[serde(default = "d_tick", deserialize_with = "de_duration")]
    pub tick: Duration,
    /// From a node's creation to its Ready condition.
    #[serde(default = "d_node_startup", deserialize_with = "de_duration")]
    pub node_startup: Duration,
    /// How long a pod must be unschedulable before its group scales up; the scale-up is sized
    /// for every pod unschedulable then, also those that have waited less.
    #[serde(default = "d_scale_up", deserialize_with = "de_duration")]
    pub scale_up_delay: Duration,
    /// How long a cordoned or drain-tainted node must be empty before it is removed.
    #[serde(default = "d_scale_down", deserialize_with = "de_duration")]
    pub scale_down_delay: Duration,
    /// Interval between BOOKMARK events on watches that ask for them.
    #[serde(default = "d_bookmark", deserialize_with = "de_duration")]
    pub bookmark_interval: Duration,
    /// Default pod start-up time (bound to Ready) when a workload does not say.
    #[serde(default = "d_pod_startup", deserialize_with = "de_duration")]
    pub pod_startup: Duration,
    /// Default time a pod takes to exit after SIGTERM (capped by its grace period).
    #[serde(default = "d_pod_shutdown", deserialize_with = "de_duration")]
    pub pod_shutdown: Duration,
    /// How long the scheduler takes per pod it binds. It binds one pod after another, so the
    /// replacements of a burst of evictions are bound over this many times their number.
    /// Default 0: every pod that fits is bound at the step that finds it.
    #[serde(default, deserialize_with = "de_duration")]
    pub bind_time: Duration,
    /// How long the disruption controller takes per budget status it writes. It has one worker
    /// and syncs the budgets whose pods changed one after another, in the order they changed,
    /// so under load a budget counts a Ready pod only after the budgets queued before it; a
    /// sync that finds nothing to write costs nothing. Default 0: every budget is synced at the
    /// step that changed its pods.
    #[serde(default, deserialize_with = "de_duration")]
    pub budget_sync_time: Duration,
    /// How long the API server takes over a request before it answers: every verb but a watch,
    /// whose events are not delayed. A write takes effect at the end of it, as on a real API
    /// server, where the time goes to admission and storage, so a client that writes and then
    /// acts on the answer is as slow as on one. Default 0: answered at once.
    #[serde(default, deserialize_with = "de_duration")]
    pub api_latency: Duration,
    /// The API server's time over an eviction instead of `apiLatency`: it writes the budget's
    /// status and then the pod, so on a real control plane it takes several times longer than
    /// other requests. Default: `apiLatency`.
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub eviction_latency: Option<Duration>,
    /// Changes each kind keeps for watches to resume from; older versions get 410.
    #[serde(default)]
    pub watch_history: Option<usize>,
    /// Events kept before the oldest are dropped.
    #[serde(default = "d_max_events")]
    pub max_events: usize,
}

fn d_tick() -> Duration {
    Duration::from_millis(100)
}
fn d_node_startup() -> Duration {
    Duration::from_secs(5)
}
fn d_scale_up() -> Duration {
    Duration::from_secs(5)
}
fn d_scale_down() -> Duration {
    Duration::from_secs(5)
}
fn d_bookmark() -> Duration {
    Duration::from_secs(5)
}
fn d_pod_startup() -> Duration {
    Duration::from_secs(2)
}
fn d_pod_shutdown() -> Duration {
    Duration::from_secs(1)
}
fn d_max_events() -> usize {
    10_000
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            tick: d_tick(),
            node_startup: d_node_startup(),
            scale_up_delay: d_scale_up(),
            scale_down_delay: d_scale_down(),
            bookmark_interval: d_bookmark(),
            pod_startup: d_pod_startup(),
            pod_shutdown: d_pod_shutdown(),
            bind_time: Duration::ZERO,
            budget_sync_time: Duration::ZERO,
            api_latency: Duration::ZERO,
            eviction_latency: None,
            watch_history: None,
            max_events: d_max_events(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeGroupSpec {
    pub name: String,
    #[serde(default = "default_zones")]
    pub zones: Vec<String>,
    /// Nodes the group starts with and keeps (the autoscaler's desired size).
    pub size: u32,
    #[serde(default)]
    pub min: Option<u32>,
    #[serde(default)]
    pub max: Option<u32>,
    pub template: NodeTemplate,
}

fn default_zones() -> Vec<String> {
    vec![
        "us-east-1a".into(),
        "us-east-1b".into(),
        "us-east-1c".into(),
    ]
}

impl NodeGroupSpec {
    pub fn min(&self) -> u32 {
        self.min.unwrap_or(0)
    }
    pub fn max(&self) -> u32 {
        self.max
            .unwrap_or(self.size.saturating_mul(2).max(self.size + 1))
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeTemplate {
    #[serde(default = "default_instance_type")]
    pub instance_type: String,
    #[serde(default = "default_cpu")]
    pub cpu: String,
    #[serde(default = "default_memory")]
    pub memory: String,
    #[serde(default = "default_max_pods")]
    pub pods: u32,
    /// The kubelet version the group's nodes report (e.g. `v1.32.5`).
    #[serde(default = "default_kubelet")]
    pub kubelet_version: String,
    /// The machine image; written to the label named by `imageLabel`.
    #[serde(default = "default_image")]
    pub image: String,
    #[serde(default = "default_image_label")]
    pub image_label: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<TaintSpec>,
    /// `{zone}` and `{instance}` are replaced; the instance id is `i-` and 17 hex digits.
    #[serde(default = "default_provider_id")]
    pub provider_id: String,
    /// Node name pattern: `{group}`, `{index}`, `{ip}` (10-0-x-y) are replaced.
    #[serde(default = "default_node_name")]
    pub node_name: String,
    /// Number of container images listed in each node's `status.images` (real nodes list
    /// dozens; they dominate a Node's size).
    #[serde(default = "default_image_count")]
    pub status_images: u32,
}

fn default_instance_type() -> String {
    "m5.xlarge".into()
}
fn default_cpu() -> String {
    "4".into()
}
fn default_memory() -> String {
    "16Gi".into()
}
fn default_max_pods() -> u32 {
    58
}
fn default_kubelet() -> String {
    "v1.33.4".into()
}
fn default_image() -> String {
    "ami-0a1b2c3d4e5f60001".into()
}
fn default_image_label() -> String {
    "sim.rotor.dev/image".into()
}
fn default_provider_id() -> String {
    "aws:///{zone}/{instance}".into()
}
fn default_node_name() -> String {
    "ip-{ip}.ec2.internal".into()
}
fn default_image_count() -> u32 {
    40
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaintSpec {
    pub key: String,
    #[serde(default)]
    pub value: Option<String>,
    pub effect: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StaticPodSpec {
    pub name: String,
    #[serde(default = "default_system_ns")]
    pub namespace: String,
    #[serde(default)]
    pub requests: Requests,
}

fn default_system_ns() -> String {
    "kube-system".into()
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Requests {
    #[serde(default)]
    pub cpu: Option<String>,
    #[serde(default)]
    pub memory: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    /// Bare pods: nothing recreates them.
    Pod,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadSpec {
    pub kind: WorkloadKind,
    pub name: String,
    #[serde(default = "default_ns")]
    pub namespace: String,
    #[serde(default = "one")]
    pub replicas: u32,
    #[serde(default)]
    pub requests: Requests,
    /// Bound to Ready.
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub startup: Option<Duration>,
    /// SIGTERM to exit, capped by the grace period.
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub shutdown: Option<Duration>,
    #[serde(default)]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default)]
    pub pdb: Option<PdbSpec>,
    /// Spread over nodes (`kubernetes.io/hostname`) with this maxSkew, DoNotSchedule.
    #[serde(default)]
    pub spread_max_skew: Option<i32>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Pod annotations (e.g. `rotor.dev/do-not-disrupt: "true"`).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Volume kinds mounted by each pod: `emptyDir`, `persistentVolumeClaim`, `configMap`.
    #[serde(default)]
    pub volumes: Vec<String>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub tolerations: Vec<TolerationSpec>,
    /// Stamp out this many copies named `<name>-<i>` (for large scenarios).
    #[serde(default)]
    pub copies: Option<u32>,
    /// With `copies`: spread the copies round-robin over `<namespace>-<k>` for k below this.
    #[serde(default)]
    pub spread_namespaces: Option<u32>,
}

fn default_ns() -> String {
    "default".into()
}
fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PdbSpec {
    #[serde(default)]
    pub min_available: Option<IntOrPercent>,
    #[serde(default)]
    pub max_unavailable: Option<IntOrPercent>,
    #[serde(default)]
    pub unhealthy_pod_eviction_policy: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum IntOrPercent {
    Int(i32),
    Str(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TolerationSpec {
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub operator: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub effect: Option<String>,
}

impl Scenario {
    pub fn from_yaml(text: &str, path: &str) -> Result<Scenario, ScenarioError> {
        let mut s: Scenario = serde_saphyr::from_str(text).map_err(|e| ScenarioError::Parse {
            path: path.to_string(),
            message: e.to_string(),
        })?;
        s.expand_copies();
        s.validate().map_err(|message| ScenarioError::Invalid {
            path: path.to_string(),
            message,
        })?;
        Ok(s)
    }

    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: p.clone(),
            source,
        })?;
        Self::from_yaml(&text, &p)
    }

    /// Replaces each workload that asks for `copies` by its copies.
    fn expand_copies(&mut self) {
        let mut out = Vec::with_capacity(self.workloads.len());
        for w in self.workloads.drain(..) {
            let Some(n) = w.copies else {
                out.push(w);
                continue;
            };
            let width = n.saturating_sub(1).to_string().len();
            for i in 0..n {
                let mut c = w.clone();
                c.copies = None;
                c.spread_namespaces = None;
                c.name = format!("{}-{i:0width$}", w.name);
                if let Some(k) = w.spread_namespaces.filter(|k| *k > 0) {
                    let kw = k.saturating_sub(1).to_string().len();
                    c.namespace = format!("{}-{:0kw$}", w.namespace, i % k);
                }
                out.push(c);
            }
        }
        self.workloads = out;
    }

    fn validate(&self) -> Result<(), String> {
        use rotor_apimachinery::quantity::parse_quantity;
        let mut names = std::collections::BTreeSet::new();
        for g in &self.node_groups {
            if !names.insert(&g.name) {
                return Err(format!("node group {:?} is defined twice", g.name));
            }
            if g.zones.is_empty() {
                return Err(format!("node group {:?} needs at least one zone", g.name));
            }
            if g.min() > g.size || g.size > g.max() {
                return Err(format!(
                    "node group {:?}: size {} must lie within min {} and max {}",
                    g.name,
                    g.size,
                    g.min(),
                    g.max()
                ));
            }
            for (what, q) in [("cpu", &g.template.cpu), ("memory", &g.template.memory)] {
                parse_quantity(q)
                    .map_err(|e| format!("node group {:?}: template {what} {q:?}: {e}", g.name))?;
            }
            if !g.template.provider_id.contains("{instance}") {
                return Err(format!(
                    "node group {:?}: providerID pattern {:?} must contain {{instance}}",
                    g.name, g.template.provider_id
                ));
            }
            version_minor(&g.template.kubelet_version).ok_or_else(|| {
                format!(
                    "node group {:?}: kubeletVersion {:?} is not a version like v1.33.4",
                    g.name, g.template.kubelet_version
                )
            })?;
        }
        version_minor(&self.control_plane_version).ok_or_else(|| {
            format!(
                "controlPlaneVersion {:?} is not a version like v1.33.4",
                self.control_plane_version
            )
        })?;
        self.validate_policies()?;
        let mut workloads = std::collections::BTreeSet::new();
        for w in &self.workloads {
            if !workloads.insert((&w.namespace, &w.name)) {
                return Err(format!(
                    "workload {}/{} is defined twice",
                    w.namespace, w.name
                ));
            }
            for q in [&w.requests.cpu, &w.requests.memory].into_iter().flatten() {
                parse_quantity(q).map_err(|e| {
                    format!("workload {}/{}: request {q:?}: {e}", w.namespace, w.name)
                })?;
            }
            for v in &w.volumes {
                if !["emptyDir", "persistentVolumeClaim", "configMap"].contains(&v.as_str()) {
                    return Err(format!(
                        "workload {}/{}: unknown volume kind {v:?} (use emptyDir, persistentVolumeClaim or configMap)",
                        w.namespace, w.name
                    ));
                }
            }
            if let Some(p) = &w.pdb {
                if p.min_available.is_some() == p.max_unavailable.is_some() {
                    return Err(format!(
                        "workload {}/{}: pdb needs exactly one of minAvailable and maxUnavailable",
                        w.namespace, w.name
                    ));
                }
                if w.kind == WorkloadKind::DaemonSet {
                    return Err(format!(
                        "workload {}/{}: a PDB on a DaemonSet is not supported by the simulator",
                        w.namespace, w.name
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Scenario {
    /// Each policy has a name of its own and a spec its CRD's schema takes; no status, which
    /// only the drainer writes. What the drainer alone judges (a budget's cron schedule, say)
    /// is left to it: it marks such a policy Invalid and holds its nodes, as on a cluster.
    fn validate_policies(&self) -> Result<(), String> {
        let mut names = std::collections::BTreeSet::new();
        for (i, policy) in self.rotation_policies.iter().enumerate() {
            let name = policy.metadata.name.as_deref().unwrap_or_default();
            if name.is_empty() {
                return Err(format!("rotationPolicies[{i}] needs metadata.name"));
            }
            if !names.insert(name) {
                return Err(format!("RotationPolicy {name:?} is defined twice"));
            }
            if policy.metadata.namespace.is_some() {
                return Err(format!(
                    "RotationPolicy {name:?}: the kind is cluster-scoped; leave metadata.namespace out"
                ));
            }
            if policy.fields.contains_key("status") {
                return Err(format!(
                    "RotationPolicy {name:?}: leave status out; rotor-drainer writes it"
                ));
            }
            if !policy.fields.contains_key("spec") {
                return Err(format!(
                    "RotationPolicy {name:?} needs a spec (nodeSelector, budgets, drain)"
                ));
            }
            // What the API server's schema refuses; and what it would drop silently, where a
            // typo is better refused.
            let written = serde_json::to_value(policy).map_err(|e| e.to_string())?;
            let problems = schema_problems::<RotationPolicyKind>(&written);
            if !problems.is_empty() {
                return Err(format!(
                    "RotationPolicy {name:?}: {} (docs/policy.md and deploy/base/crds/rotationpolicies.rotor.dev.yaml describe the fields)",
                    problems.join("; ")
                ));
            }
        }
        Ok(())
    }
}

/// The minor number of a version like `v1.33.4` or `1.33`.
pub fn version_minor(v: &str) -> Option<u32> {
    let v = v.trim().trim_start_matches('v');
    let mut parts = v.split('.');
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts
        .next()?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    (major == 1).then_some(minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nodes and workload pods (DaemonSet pods left out) a scenario asks for.
    fn size(s: &Scenario) -> (u32, u32) {
        let nodes = s.node_groups.iter().map(|g| g.size).sum();
        let pods = s
            .workloads
            .iter()
            .filter(|w| w.kind != WorkloadKind::DaemonSet)
            .map(|w| w.replicas)
            .sum();
        (nodes, pods)
    }

    #[test]
    fn every_example_scenario_loads_and_the_benches_have_the_sizes_their_docs_give() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios");
        let mut loaded = BTreeMap::new();
        for entry in std::fs::read_dir(&dir).expect("examples/scenarios") {
            let path = entry.expect("a directory entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let scenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                loaded.insert(name, size(&scenario));
            }
        }
        // docs/benchmarks.md and examples/scenarios/README.md give these sizes.
        assert_eq!(loaded.get("bench-50.yaml"), Some(&(50, 1_000)));
        assert_eq!(loaded.get("bench-100.yaml"), Some(&(100, 2_000)));
        assert_eq!(loaded.get("bench-200.yaml"), Some(&(200, 4_000)));
        // The real control plane at scale (DaemonSet pods are not counted here): real-1k's
        // Deployments and budgets on 1,000 nodes and on 5,000 (real-5k-nodes), and five times
        // their pods on 5,000 (real-5k).
        assert_eq!(loaded.get("real-1k.yaml"), Some(&(1_000, 28_000)));
        assert_eq!(loaded.get("real-5k-nodes.yaml"), Some(&(5_000, 28_000)));
        assert_eq!(loaded.get("real-5k.yaml"), Some(&(5_000, 140_000)));
    }

    #[test]
    fn parses_a_small_scenario_with_defaults() {
        let s = Scenario::from_yaml(
            r#"
controlPlaneVersion: v1.33.2
timing: {tick: 50ms, nodeStartup: 2s}
nodeGroups:
  - name: general
    size: 3
    template: {kubeletVersion: v1.32.9, cpu: "2", memory: 8Gi}
workloads:
  - kind: Deployment
    name: web
    namespace: shop
    replicas: 4
    requests: {cpu: 250m, memory: 256Mi}
    startup: 1s
    pdb: {minAvailable: 3}
"#,
            "inline",
        )
        .unwrap();
        assert_eq!(s.timing.tick, Duration::from_millis(50));
        assert_eq!(s.timing.scale_up_delay, Duration::from_secs(5));
        assert_eq!(s.node_groups[0].max(), 6);
        assert_eq!(s.workloads[0].startup, Some(Duration::from_secs(1)));
        assert!(s.start_settled);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_rejected_with_the_reason() {
        let err = Scenario::from_yaml("nodeGroup: []", "x.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("x.yaml") && err.contains("nodeGroup"), "{err}");
        let err = Scenario::from_yaml(
            "workloads: [{kind: Deployment, name: a, requests: {cpu: lots}}]",
            "x.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("lots"), "{err}");
        let err = Scenario::from_yaml(
            "workloads: [{kind: Deployment, name: a, pdb: {minAvailable: 1, maxUnavailable: 1}}]",
            "x.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("exactly one"), "{err}");
        let err = Scenario::from_yaml("timing: {tick: soon}", "x.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("soon"), "{err}");
    }

    #[test]
    fn rotation_policies_are_read_and_a_bad_one_is_refused_with_the_reason() {
        let s = Scenario::from_yaml(
            r#"
rotationPolicies:
  - metadata: {name: system}
    spec: {nodeSelector: {matchLabels: {pool: system}}, budgets: [{nodes: "1"}]}
  - apiVersion: rotor.dev/v1alpha1
    kind: RotationPolicy
    metadata: {name: general}
    spec: {budgets: [{nodes: "25%"}], drain: {timeout: 30m}}
"#,
            "x.yaml",
        )
        .unwrap();
        let names: Vec<_> = s
            .rotation_policies
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["system", "general"]);
        assert_eq!(
            s.rotation_policies[1].fields["spec"]["drain"]["timeout"],
            "30m"
        );

        let refused = |yaml: &str| {
            Scenario::from_yaml(&format!("rotationPolicies: [{yaml}]"), "x.yaml")
                .unwrap_err()
                .to_string()
        };
        let err = refused("{metadata: {name: a}, spec: {budgets: [{node: '1'}]}}");
        assert!(
            err.contains("x.yaml") && err.contains("spec.budgets[0].node: unknown field"),
            "{err}"
        );
        let err = refused("{metadata: {name: a}, spec: {budgets: [{nodes: 1}]}}");
        assert!(
            err.contains("RotationPolicy \"a\": spec.budgets[0].nodes: 1 is not a string"),
            "{err}"
        );
        let err = refused("{metadata: {name: a}}");
        assert!(err.contains("needs a spec"), "{err}");
        let err = refused("{metadata: {name: a}, spec: {}}, {spec: {}}");
        assert!(
            err.contains("rotationPolicies[1] needs metadata.name"),
            "{err}"
        );
        let err = refused("{metadata: {name: a}, spec: {budgets: [{}]}}");
        assert!(err.contains("spec.budgets[0].nodes: required"), "{err}");
        let err = refused("{metadata: {name: a}, spec: {}}, {metadata: {name: a}, spec: {}}");
        assert!(err.contains("defined twice"), "{err}");
        let err = refused("{kind: DrainRule, metadata: {name: a}, spec: {}}");
        assert!(err.contains("DrainRule"), "{err}");
        let err = refused("{metadata: {name: a}, spec: {}, status: {nodes: 3}}");
        assert!(err.contains("leave status out"), "{err}");
    }

    #[test]
    fn copies_expand_over_namespaces() {
        let s = Scenario::from_yaml(
            "workloads: [{kind: Deployment, name: svc, namespace: team, copies: 12, spreadNamespaces: 5}]",
            "t",
        )
        .unwrap();
        assert_eq!(s.workloads.len(), 12);
        assert_eq!(
            (
                s.workloads[0].name.as_str(),
                s.workloads[0].namespace.as_str()
            ),
            ("svc-00", "team-0")
        );
        assert_eq!(
            (
                s.workloads[11].name.as_str(),
                s.workloads[11].namespace.as_str()
            ),
            ("svc-11", "team-1")
        );
    }

    #[test]
    fn versions_parse_to_minor() {
        assert_eq!(version_minor("v1.33.4"), Some(33));
        assert_eq!(version_minor("1.29"), Some(29));
        assert_eq!(version_minor("v1.30.2-eks-1234"), Some(30));
        assert_eq!(version_minor("v2.1.0"), None);
        assert_eq!(version_minor("latest"), None);
    }
}
