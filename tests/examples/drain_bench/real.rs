//! The real-control-plane backend: etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler from Kubernetes' own release, kwok playing the kubelets (rotor-e2e's
//! [`RealCluster`]), set up with the scenario's nodes and workloads, and the scenario's
//! autoscaler rules played by [`crate::real_autoscaler`].
//!
//! What kwok makes real: a pod turns Ready its start-up time after it is bound (the scenario's
//! `podStartup`, or the workload's `startup` through the `e2e.rotor.dev/startup` annotation); a
//! deleted pod is gone when its grace period runs out, so each pod's grace period is its
//! scenario shutdown time. What the real backend leaves out: mirror (static) pods, which only a
//! kubelet makes, and PersistentVolumeClaims, which need a provisioner (the StatefulSet keeps
//! its shape, its pods their start-up and shutdown).
//!
//! Counting: the API server's audit log gives every request by the contestant's own identity
//! (rotor-drainer's ServiceAccount, or the `bench-kubectl` ServiceAccount the kubectl loop uses),
//! and evictions by response code; budget violations come from rotor-e2e's [`BudgetWatch`], an
//! independent watch of every pod.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, ensure};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use rotor_drainer::drain::surge::placeholder_name_start;
use rotor_e2e::budget_watch::{BudgetWatch, WatchedBudget};
use rotor_e2e::real_cluster::{
    FakeNode, ROTOR_NAMESPACE, RealCluster, RealClusterOptions, is_ready,
};
use rotor_sim::cluster::objects::{SHUTDOWN_ANNOTATION, STARTUP_ANNOTATION};
use rotor_sim::scenario::{IntOrPercent, Scenario, WorkloadKind, WorkloadSpec};
use rotor_sim::seed::pod_template;
use serde_json::{Value, json};
use tokio::runtime::Handle;

use crate::cluster::list_in_pages;
use crate::real_autoscaler::{BOOTING_TAINT, Groups, RealAutoscaler, template};

/// The kwok stages' start-up and shutdown annotations (tests/kwok/stages.yaml).
const KWOK_STARTUP_ANNOTATION: &str = "e2e.rotor.dev/startup";
const KWOK_SHUTDOWN_ANNOTATION: &str = "e2e.rotor.dev/shutdown";
/// The ServiceAccount the kubectl loop runs as, so that its requests can be told apart.
const KUBECTL_ACCOUNT: &str = "bench-kubectl";
/// How long the workloads may go before t=0 without one more pod turning Ready (or a budget's
/// status catching up) before the set-up gives up. A deadline for the whole set-up would have
/// to guess kwok's pace (at 1,000 nodes it took 909 s once, and 1,800 s was not enough
/// another time); a stall says that waiting longer will not help.
const SETTLE_STALL: Duration = Duration::from_secs(300);

/// Progress of the set-up towards every pod Ready: when it last moved.
#[derive(Debug)]
struct SettleProgress {
    best: (usize, bool),
    since: Instant,
}

impl SettleProgress {
    fn new(now: Instant) -> SettleProgress {
        SettleProgress {
            best: (0, false),
            since: now,
        }
    }

    /// Takes in a look (`ready` pods, budgets current or not) at `now`; true while the set-up
    /// has moved within [`SETTLE_STALL`]. More pods Ready, or the budgets caught up, is progress.
    fn moving(&mut self, ready: usize, budgets_current: bool, now: Instant) -> bool {
        let (best_ready, best_current) = self.best;
        if ready > best_ready || (budgets_current && !best_current) {
            self.best = (ready.max(best_ready), budgets_current || best_current);
            self.since = now;
        }
        now.duration_since(self.since) < SETTLE_STALL
    }
}

pub struct RealBench {
    pub cluster: RealCluster,
    /// The admin's client: the benchmark's own taints and watches.
    pub client: kube::Client,
    runtime: Handle,
    /// The scenario's autoscaler rules; none when a peer provisions the nodes.
    autoscaler: Option<RealAutoscaler>,
    /// The audit log's length at the last [`RealBench::reset_counters`].
    audit_from: Mutex<u64>,
    budget_watch: Mutex<Option<BudgetWatch>>,
    pub kubectl_kubeconfig: PathBuf,
}

/// Who the contestant is in the audit log.
pub fn drainer_user() -> String {
    format!("system:serviceaccount:{ROTOR_NAMESPACE}:rotor-drainer")
}

pub fn kubectl_user() -> String {
    format!("system:serviceaccount:{ROTOR_NAMESPACE}:{KUBECTL_ACCOUNT}")
}

impl RealBench {
    /// A fresh control plane in `dir` with the scenario's nodes and workloads, every pod
    /// scheduled and Ready, rotor's RBAC from `deploy/` and the autoscaler running.
    pub fn start(runtime: &Handle, scenario: &Scenario, dir: &Path) -> anyhow::Result<RealBench> {
        let started = Instant::now();
        let mut bench = RealBench::start_bare(runtime, scenario, dir)?;
        let (cluster, client) = (&bench.cluster, &bench.client);
        let templates: Vec<FakeNode> = scenario.node_groups.iter().map(template).collect();
        let mut nodes = Vec::new();
        for (spec, t) in scenario.node_groups.iter().zip(&templates) {
            for i in 0..spec.size {
                let mut n = t.clone();
                n.name = format!("{}-{i}", spec.name);
                nodes.push(n);
            }
        }
        cluster.add_nodes(&nodes);
        cluster.apply(&workloads_yaml(scenario)?);
        let expected = expected_pods(scenario, nodes.len());
        wait_settled(runtime, client, expected)?;
        eprintln!(
            "drain_bench: real control plane with {} nodes and {expected} pods Ready in {:.0} s",
            nodes.len(),
            started.elapsed().as_secs_f64()
        );
        let autoscaler = RealAutoscaler::start(
            client.clone(),
            runtime,
            Groups::new(
                &scenario.node_groups,
                &scenario.timing,
                templates,
                scenario
                    .workloads
                    .iter()
                    .filter(|w| w.kind == WorkloadKind::DaemonSet)
                    .count(),
            ),
        );
        bench.autoscaler = Some(autoscaler);
        Ok(bench)
    }

    /// A fresh control plane in `dir` with rotor's RBAC from `deploy/` (the shipped drainer
    /// scaled to zero) and the kubectl loop's ServiceAccount, but no nodes, no workloads and no
    /// autoscaler: for a peer that provisions the nodes itself.
    pub fn start_bare(
        runtime: &Handle,
        scenario: &Scenario,
        dir: &Path,
    ) -> anyhow::Result<RealBench> {
        let cluster = RealCluster::start_with(RealClusterOptions {
            pod_startup: scenario.timing.pod_startup,
            dir: Some(dir.join("cluster")),
            watch_cache: true,
        });
        cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
        cluster.stop_shipped_drainer();
        cluster.kubectl_ok(&[
            "create",
            "serviceaccount",
            KUBECTL_ACCOUNT,
            "-n",
            ROTOR_NAMESPACE,
        ]);
        cluster.kubectl_ok(&[
            "create",
            "clusterrolebinding",
            KUBECTL_ACCOUNT,
            "--clusterrole=cluster-admin",
            &format!("--serviceaccount={ROTOR_NAMESPACE}:{KUBECTL_ACCOUNT}"),
        ]);
        let kubectl_kubeconfig =
            cluster.service_account_kubeconfig(ROTOR_NAMESPACE, KUBECTL_ACCOUNT);
        let client = runtime.block_on(client_from(cluster.admin_kubeconfig()))?;
        Ok(RealBench {
            cluster,
            client,
            runtime: runtime.clone(),
            autoscaler: None,
            audit_from: Mutex::new(0),
            budget_watch: Mutex::new(None),
            kubectl_kubeconfig,
        })
    }

    pub fn runtime(&self) -> &Handle {
        &self.runtime
    }

    /// From now on, count the contestant's requests, and judge the budgets (each must keep
    /// what it allowed at t=0: `budgets` maps `namespace/name` to expected pods and allowed
    /// disruptions).
    pub fn reset_counters(&self, budgets: &BTreeMap<String, (i64, i64)>) {
        let len = std::fs::metadata(self.cluster.dir().join("audit.log"))
            .map(|m| m.len())
            .unwrap_or(0);
        *self.audit_from.lock().expect("audit offset") = len;
        let watched = budgets
            .iter()
            .filter(|(_, (expected, _))| *expected > 0)
            .map(|(key, (expected, allowed))| {
                let (ns, name) = key.split_once('/').unwrap_or(("", key));
                WatchedBudget::app(ns, name, (expected - allowed).max(0) as usize)
            })
            .collect();
        *self.budget_watch.lock().expect("budget watch") = Some(BudgetWatch::start_resuming(
            self.cluster.admin_kubeconfig(),
            watched,
        ));
    }

    /// The requests of `user` since the reset, as `verb resource[/subresource]` to count, and
    /// the evictions among them by outcome (the simulator's names).
    pub fn requests_of(
        &self,
        user: &str,
    ) -> anyhow::Result<(BTreeMap<String, u64>, BTreeMap<String, u64>)> {
        self.requests_by(&Requester::User(user))
    }

    /// [`RealBench::requests_of`] for any [`Requester`].
    pub fn requests_by(
        &self,
        who: &Requester,
    ) -> anyhow::Result<(BTreeMap<String, u64>, BTreeMap<String, u64>)> {
        Ok(count_requests(self.audit_since_reset()?.lines(), who))
    }

    /// The audit log's records since the last [`RealBench::reset_counters`].
    pub fn audit_since_reset(&self) -> anyhow::Result<String> {
        let from = *self.audit_from.lock().expect("audit offset");
        let text = std::fs::read(self.cluster.dir().join("audit.log")).context("the audit log")?;
        Ok(String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default()).into_owned())
    }

    /// Stops the budget watch: the violations it saw, described.
    pub fn violations(&self) -> Vec<String> {
        let Some(watch) = self.budget_watch.lock().expect("budget watch").take() else {
            return Vec::new();
        };
        let verdict = watch.finish();
        let mut v = verdict.violations;
        v.extend(
            verdict
                .never_armed
                .into_iter()
                .map(|b| format!("budget {b} never reached its minimum: the watch judged nothing")),
        );
        v
    }

    pub fn nodes_launched_removed(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering;
        self.autoscaler.as_ref().map_or((0, 0), |a| {
            (
                a.launched.load(Ordering::Relaxed),
                a.removed.load(Ordering::Relaxed),
            )
        })
    }
}

/// Whose requests the audit log is searched for.
pub enum Requester<'a> {
    /// An authenticated user, e.g. a ServiceAccount.
    User(&'a str),
    /// A client that runs as the admin, told apart by how its User-Agent starts (Karpenter's
    /// is `karpenter/<version> ...`).
    Agent(&'a str),
}

impl Requester<'_> {
    /// Text every record of theirs holds, to skip the others before parsing.
    fn hint(&self) -> &str {
        match self {
            Requester::User(u) => u,
            Requester::Agent(a) => a,
        }
    }

    fn made(&self, record: &Value) -> bool {
        match self {
            Requester::User(u) => record["user"]["username"] == *u,
            Requester::Agent(a) => record["userAgent"]
                .as_str()
                .is_some_and(|agent| agent.starts_with(a)),
        }
    }
}

/// The audit records (one JSON document a line) of `who`, each request once, by its audit ID
/// (a watch at `ResponseStarted`, as it may still be open; any other at `ResponseComplete`).
fn requests_made<'a>(
    lines: impl Iterator<Item = &'a str> + 'a,
    who: &'a Requester<'a>,
) -> impl Iterator<Item = Value> + 'a {
    let mut seen: HashSet<String> = HashSet::new();
    lines
        // Most records are the controllers' and kwok's: skip those before parsing.
        .filter(|line| line.contains(who.hint()))
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| who.made(e))
        .filter(move |e| {
            let counted_stage = if e["verb"] == "watch" {
                "ResponseStarted"
            } else {
                "ResponseComplete"
            };
            e["stage"] == counted_stage
                && seen.insert(e["auditID"].as_str().unwrap_or_default().to_string())
        })
}

/// A request's kind, `verb resource[/subresource]` (or `verb path` for a non-resource URL).
fn kind_of(e: &Value) -> String {
    let r = &e["objectRef"];
    let what = match (r["resource"].as_str(), r["subresource"].as_str()) {
        (Some(res), Some(sub)) => format!("{res}/{sub}"),
        (Some(res), None) => res.to_string(),
        (None, _) => e["requestURI"]
            .as_str()
            .unwrap_or_default()
            .split('?')
            .next()
            .unwrap_or_default()
            .to_string(),
    };
    format!("{} {what}", e["verb"].as_str().unwrap_or_default())
}

/// Counts the requests of `who` by kind, and its evictions by outcome (the simulator's names).
pub fn count_requests<'a>(
    lines: impl Iterator<Item = &'a str> + 'a,
    who: &'a Requester<'a>,
) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let mut requests: BTreeMap<String, u64> = BTreeMap::new();
    let mut evictions: BTreeMap<String, u64> = BTreeMap::new();
    for e in requests_made(lines, who) {
        let kind = kind_of(&e);
        if kind == "create pods/eviction" {
            let outcome = match e["responseStatus"]["code"].as_i64() {
                Some(200..=299) => "success",
                Some(429) => "budget",
                Some(500) => "multiple-pdbs",
                Some(404) => "not-found",
                Some(409) => "conflict",
                _ => "other",
            };
            *evictions.entry(outcome.into()).or_default() += 1;
        }
        *requests.entry(kind).or_default() += 1;
    }
    (requests, evictions)
}

/// An audit record's time stamp `key` (e.g. `requestReceivedTimestamp`), in seconds since the
/// epoch.
pub fn audit_seconds(record: &Value, key: &str) -> Option<f64> {
    let t: jiff::Timestamp = record[key].as_str()?.parse().ok()?;
    Some(t.as_nanosecond() as f64 / 1e9)
}

/// Each request of `who` as its arrival and its answer at the API server (seconds since the
/// epoch), by kind, in the order they arrived; watches, which stay open, left out.
pub fn request_spans<'a>(
    lines: impl Iterator<Item = &'a str> + 'a,
    who: &'a Requester<'a>,
) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut spans: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for e in requests_made(lines, who).filter(|e| e["verb"] != "watch") {
        let at = |key: &str| audit_seconds(&e, key);
        if let (Some(came), Some(answered)) = (at("requestReceivedTimestamp"), at("stageTimestamp"))
        {
            spans.entry(kind_of(&e)).or_default().push((came, answered));
        }
    }
    for v in spans.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    spans
}

/// The placeholders the scheduler preempted in a run, and how many of them before their node's
/// drain began.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Preempted {
    pub total: usize,
    /// Preempted before the drain of the node they were made for began, so made ahead of it (a
    /// lower bound of the room made ahead that was preempted: room made ahead and preempted once
    /// its drain began counts in the total only).
    pub made_ahead: usize,
}

/// The placeholders the scheduler preempted, read from the audit log: rotor's placeholder pods
/// the scheduler (user agent `kube-scheduler/`) deleted. Each is told apart by how its name
/// begins ([`placeholder_name_start`] of the node it was made for) and counted as made ahead
/// when deleted before that node's drain began: `began` holds, for each node whose drain began
/// (first seen cordoned), when (seconds since the epoch). A name that no node in `began`
/// matches, or more than one, counts in the total only. Counted per delete request answered.
pub fn preempted_placeholders<'a>(
    lines: impl Iterator<Item = &'a str> + 'a,
    began: &BTreeMap<String, f64>,
) -> Preempted {
    let starts: Vec<(String, f64)> = began
        .iter()
        .map(|(node, at)| (placeholder_name_start(node), *at))
        .collect();
    let mut preempted = Preempted::default();
    for e in requests_made(lines, &Requester::Agent(SCHEDULER_AGENT)) {
        let target = &e["objectRef"];
        let Some(name) = target["name"]
            .as_str()
            .filter(|n| n.starts_with("rotor-surge-"))
        else {
            continue;
        };
        if e["verb"] != "delete" || target["resource"] != "pods" || !target["subresource"].is_null()
        {
            continue;
        }
        preempted.total += 1;
        let mut made_for = starts
            .iter()
            .filter(|(start, _)| name.starts_with(start.as_str()));
        if let (Some((_, began_at)), None, Some(at)) = (
            made_for.next(),
            made_for.next(),
            audit_seconds(&e, "requestReceivedTimestamp"),
        ) && at < *began_at
        {
            preempted.made_ahead += 1;
        }
    }
    preempted
}

/// The scheduler's requests, told by their user agent (it runs as the admin here).
pub const SCHEDULER_AGENT: &str = "kube-scheduler/";

/// How the API server answered `who`'s requests of one `kind`, as a count per status code.
pub fn answer_codes<'a>(
    lines: impl Iterator<Item = &'a str> + 'a,
    who: &'a Requester<'a>,
    kind: &str,
) -> BTreeMap<u16, usize> {
    let mut codes: BTreeMap<u16, usize> = BTreeMap::new();
    for e in requests_made(lines, who).filter(|e| kind_of(e) == kind) {
        let code = e["responseStatus"]["code"].as_u64().unwrap_or(0);
        *codes.entry(u16::try_from(code).unwrap_or(0)).or_default() += 1;
    }
    codes
}

async fn client_from(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig)
            .with_context(|| format!("reading {}", kubeconfig.display()))?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .context("the admin kubeconfig")?;
    kube::Client::try_from(config).context("a client for the real control plane")
}

/// The pods the cluster holds when settled: every workload's, and a DaemonSet pod per node.
pub(crate) fn expected_pods(scenario: &Scenario, nodes: usize) -> usize {
    scenario
        .workloads
        .iter()
        .map(|w| match w.kind {
            WorkloadKind::DaemonSet => nodes,
            _ => w.replicas as usize,
        })
        .sum()
}

/// Waits until `expected` pods are bound and Ready, and every budget's status has caught up.
pub(crate) fn wait_settled(
    runtime: &Handle,
    client: &kube::Client,
    expected: usize,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut progress = SettleProgress::new(started);
    // Each look reads every pod, a page at a time: at 150,000 pods one list of them all was
    // cut off mid-answer. At thousands of pods, look less often.
    let every = Duration::from_secs(1).max(Duration::from_millis(expected as u64));
    let budgets: Api<PodDisruptionBudget> = Api::all(client.clone());
    loop {
        let look = runtime.block_on(async {
            let mut ready = 0;
            list_in_pages(client, "/api/v1/pods", |page| {
                let items = page["items"].as_array().into_iter().flatten();
                ready += items.filter(|p| is_ready(p)).count();
            })
            .await?;
            // Every budget over pods (the shipped drainer's has none: it is scaled to zero).
            let current = budgets
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .all(|b| {
                    b.status.as_ref().is_some_and(|s| {
                        s.observed_generation == b.metadata.generation
                            && s.current_healthy == s.expected_pods
                            && (s.expected_pods == 0 || s.disruptions_allowed > 0)
                    })
                });
            anyhow::Ok((ready, current))
        });
        // A look that fails (a busy server) is no progress; the stall below still bounds it.
        let (ready, budgets_current) = match look {
            Ok(look) => look,
            Err(e) => {
                eprintln!("drain_bench: reading the pods and budgets failed, trying again: {e:#}");
                (0, false)
            }
        };
        if ready >= expected && budgets_current {
            return Ok(());
        }
        ensure!(
            progress.moving(ready, budgets_current, Instant::now()),
            "the workloads stopped settling: no pod turned Ready and no budget caught up for {} s ({} of {expected} pods Ready at best after {:.0} s, budgets current at some look: {})",
            SETTLE_STALL.as_secs(),
            progress.best.0,
            started.elapsed().as_secs_f64(),
            progress.best.1
        );
        std::thread::sleep(every);
    }
}

/// The scenario's namespaces, workloads and budgets as Kubernetes objects, YAML (JSON) for
/// `kubectl apply`.
pub(crate) fn workloads_yaml(scenario: &Scenario) -> anyhow::Result<String> {
    let mut items = Vec::new();
    let namespaces: BTreeSet<&str> = scenario
        .workloads
        .iter()
        .map(|w| w.namespace.as_str())
        .chain(scenario.namespaces.iter().map(String::as_str))
        .collect();
    for ns in namespaces {
        items.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    for w in &scenario.workloads {
        items.extend(workload_objects(w, scenario)?);
    }
    Ok(json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())
}

/// One workload of the scenario as the objects a real cluster runs it from: its pod template
/// as the simulator builds it, with kwok's start-up and shutdown annotations, the shutdown time
/// rounded up as the grace period, and without PersistentVolumeClaims.
fn workload_objects(w: &WorkloadSpec, scenario: &Scenario) -> anyhow::Result<Vec<Value>> {
    let template = pod_template(w);
    let mut template = serde_json::to_value(&template).context("a pod template")?;
    let startup = w.startup.unwrap_or(scenario.timing.pod_startup);
    let shutdown = w.shutdown.unwrap_or(scenario.timing.pod_shutdown);
    // The simulator's annotations stay: the benchmark's snapshot reads them on both backends.
    let annotations = &mut template["metadata"]["annotations"];
    if annotations.is_null() {
        *annotations = json!({});
    }
    annotations[STARTUP_ANNOTATION] = json!(format!("{}ms", startup.as_millis()));
    annotations[SHUTDOWN_ANNOTATION] = json!(format!("{}ms", shutdown.as_millis()));
    annotations[KWOK_STARTUP_ANNOTATION] = json!(format!("{}ms", startup.as_millis()));
    // The pod exits this long after its deletion, as on the simulator. Without it kwok removes
    // it at its deletionTimestamp, which the API server keeps to the second: a pod with 1 s of
    // grace went 0.03 to 1 s after its eviction (median 0.6 s), not 1 s.
    annotations[KWOK_SHUTDOWN_ANNOTATION] = json!(format!("{}ms", shutdown.as_millis()));
    let spec = &mut template["spec"];
    spec["terminationGracePeriodSeconds"] = json!(shutdown.as_secs_f64().ceil() as i64);
    if let Some(volumes) = spec["volumes"].as_array_mut() {
        volumes.retain(|v| v.get("persistentVolumeClaim").is_none());
        let kept: BTreeSet<String> = volumes
            .iter()
            .filter_map(|v| v["name"].as_str().map(str::to_string))
            .collect();
        for c in spec["containers"].as_array_mut().into_iter().flatten() {
            if let Some(mounts) = c["volumeMounts"].as_array_mut() {
                mounts.retain(|m| m["name"].as_str().is_some_and(|n| kept.contains(n)));
            }
        }
    }
    // A DaemonSet's pods go on a node before its start-up taint comes off (see BOOTING_TAINT).
    if w.kind == WorkloadKind::DaemonSet {
        let toleration =
            json!({"key": BOOTING_TAINT, "operator": "Exists", "effect": "NoSchedule"});
        match spec["tolerations"].as_array_mut() {
            Some(t) => t.push(toleration),
            None => spec["tolerations"] = json!([toleration]),
        }
    }
    // The scheduler and the API server set these themselves.
    if let Some(s) = spec.as_object_mut() {
        s.remove("priority");
    }
    let meta =
        |name: &str| json!({"name": name, "namespace": w.namespace, "labels": {"app": w.name}});
    let selector = json!({"matchLabels": {"app": w.name}});
    let mut out = Vec::new();
    match w.kind {
        WorkloadKind::Deployment => out.push(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(&w.name),
            "spec": {"replicas": w.replicas, "selector": selector, "template": template},
        })),
        WorkloadKind::StatefulSet => out.push(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta(&w.name),
            "spec": {"replicas": w.replicas, "selector": selector, "template": template,
                     "serviceName": w.name, "podManagementPolicy": "OrderedReady"},
        })),
        WorkloadKind::DaemonSet => out.push(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta(&w.name),
            "spec": {"selector": selector, "template": template},
        })),
        WorkloadKind::Pod => {
            for i in 0..w.replicas {
                let name = if w.replicas == 1 {
                    w.name.clone()
                } else {
                    format!("{}-{i}", w.name)
                };
                let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": template["metadata"].clone(), "spec": template["spec"].clone()});
                pod["metadata"]["name"] = json!(name);
                pod["metadata"]["namespace"] = json!(w.namespace);
                out.push(pod);
            }
        }
    }
    if let Some(p) = &w.pdb {
        let value = |v: &IntOrPercent| match v {
            IntOrPercent::Int(i) => json!(i),
            IntOrPercent::Str(s) => json!(s),
        };
        let mut spec = json!({"selector": selector});
        if let Some(m) = &p.min_available {
            spec["minAvailable"] = value(m);
        }
        if let Some(m) = &p.max_unavailable {
            spec["maxUnavailable"] = value(m);
        }
        if let Some(policy) = &p.unhealthy_pod_eviction_policy {
            spec["unhealthyPodEvictionPolicy"] = json!(policy);
        }
        out.push(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": w.name, "namespace": w.namespace}, "spec": spec,
        }));
    }
    ensure!(
        !out.is_empty(),
        "workload {}/{} made no objects",
        w.namespace,
        w.name
    );
    Ok(out)
}

/// The error a benchmark that needs the control plane gives when it is not built.
pub fn check_built() -> anyhow::Result<()> {
    rotor_e2e::real_cluster::built_by("tools/build.sh")
        .map(|_| ())
        .ok_or_else(|| anyhow!("the real control plane is not built: run tools/build.sh first (about 20 minutes cold)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_up_gives_up_only_when_it_stops_moving() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut progress = SettleProgress::new(t0);
        // Slow but moving: an hour in, still waiting.
        for minute in 1..=60 {
            assert!(progress.moving(minute * 400, false, at(minute as u64 * 60)));
        }
        // The budgets catching up is progress too, however many pods are Ready.
        assert!(progress.moving(24_000, true, at(3_899)));
        // Then nothing moves: a pod fewer Ready, the budgets behind again, is no progress.
        assert!(progress.moving(23_999, false, at(3_899 + 299)));
        assert!(!progress.moving(24_000, true, at(3_899 + 300)));
    }

    #[test]
    fn audit_records_count_once_each_with_evictions_by_code() {
        let user = drainer_user();
        let rec = |id: &str, stage: &str, verb: &str, res: &str, sub: Option<&str>, code: i64| {
            let mut r = json!({"auditID": id, "stage": stage, "verb": verb,
                "user": {"username": user}, "objectRef": {"resource": res},
                "responseStatus": {"code": code}});
            if let Some(s) = sub {
                r["objectRef"]["subresource"] = json!(s);
            }
            r.to_string()
        };
        let lines = [
            rec("a", "ResponseStarted", "watch", "nodes", None, 200),
            rec("a", "ResponseComplete", "watch", "nodes", None, 200),
            rec(
                "b",
                "ResponseComplete",
                "create",
                "pods",
                Some("eviction"),
                201,
            ),
            rec(
                "c",
                "ResponseComplete",
                "create",
                "pods",
                Some("eviction"),
                429,
            ),
            rec("d", "ResponseComplete", "patch", "nodes", None, 200),
            json!({"auditID": "e", "stage": "ResponseComplete", "verb": "get",
                   "user": {"username": "someone-else"}, "objectRef": {"resource": "nodes"}})
            .to_string(),
        ];
        let (requests, evictions) =
            count_requests(lines.iter().map(String::as_str), &Requester::User(&user));
        assert_eq!(
            requests,
            BTreeMap::from([
                ("watch nodes".to_string(), 1),
                ("create pods/eviction".to_string(), 2),
                ("patch nodes".to_string(), 1),
            ])
        );
        assert_eq!(
            evictions,
            BTreeMap::from([("success".to_string(), 1), ("budget".to_string(), 1)])
        );
        // One kind's answers by status code (how the budget writes' conflicts are read).
        let codes = answer_codes(
            lines.iter().map(String::as_str),
            &Requester::User(&user),
            "create pods/eviction",
        );
        assert_eq!(codes, BTreeMap::from([(201, 1), (429, 1)]));
    }

    #[test]
    fn request_spans_are_the_api_servers_from_arrival_to_answer_without_watches() {
        let user = drainer_user();
        let rec = |id: &str, stage: &str, verb: &str, res: &str, from: &str, to: &str| {
            json!({"auditID": id, "stage": stage, "verb": verb,
                "user": {"username": user}, "objectRef": {"resource": res},
                "requestReceivedTimestamp": format!("2026-11-27T10:00:{from}Z"),
                "stageTimestamp": format!("2026-11-27T10:00:{to}Z")})
            .to_string()
        };
        let lines = [
            // A watch stays open: its time is not a round trip.
            rec("a", "ResponseStarted", "watch", "nodes", "00.000", "00.001"),
            rec(
                "a",
                "ResponseComplete",
                "watch",
                "nodes",
                "00.000",
                "30.000",
            ),
            rec("b", "ResponseStarted", "patch", "nodes", "01.000", "01.002"),
            rec(
                "b",
                "ResponseComplete",
                "patch",
                "nodes",
                "01.000",
                "01.040",
            ),
            rec(
                "c",
                "ResponseComplete",
                "patch",
                "nodes",
                "02.000",
                "02.010",
            ),
            rec("d", "ResponseComplete", "list", "pods", "03.000", "03.005"),
        ];
        let spans = request_spans(lines.iter().map(String::as_str), &Requester::User(&user));
        let secs = |v: &[(f64, f64)]| -> Vec<i64> {
            v.iter()
                .map(|(a, b)| ((b - a) * 1e3).round() as i64)
                .collect()
        };
        assert_eq!(spans.len(), 2, "{spans:?}");
        assert_eq!(secs(&spans["patch nodes"]), [40, 10], "{spans:?}");
        assert_eq!(secs(&spans["list pods"]), [5], "{spans:?}");
    }

    #[test]
    fn placeholders_the_scheduler_deleted_are_counted_and_those_made_ahead_told_apart() {
        let rec = |id: &str, stage: &str, agent: &str, verb: &str, name: &str, at: &str| {
            json!({"auditID": id, "stage": stage, "verb": verb,
                "user": {"username": "rotor-e2e-admin"}, "userAgent": agent,
                "objectRef": {"resource": "pods", "namespace": "rotor-system", "name": name},
                "requestReceivedTimestamp": format!("2026-12-01T17:43:{at}Z")})
            .to_string()
        };
        let scheduler = "kube-scheduler/v0.0.0 (linux/amd64) kubernetes/$Format/scheduler";
        let a = "kwok-rotor-peer-48tmq-legsribbon-2-ytgex6iek1-3303561717";
        let b = "kwok-rotor-peer-d5f8l-molemirage-46-evrvgmkop9-1153900174";
        // As the audit log names them: the set's name cut to 58 characters, a random suffix.
        let on_a = "rotor-surge-kwok-rotor-peer-48tmq-legsribbon-2-ytgex-40fe2ggpxx";
        let on_b = "rotor-surge-kwok-rotor-peer-d5f8l-molemirage-46-evrv-8a0c1q2w3e";
        assert!(on_a.starts_with(&placeholder_name_start(a)));
        assert!(on_b.starts_with(&placeholder_name_start(b)));
        let lines = [
            // Preempted at 03.5, before a's drain began at 04.0: made ahead. Counted once, at
            // the end of the request.
            rec("1", "RequestReceived", scheduler, "delete", on_a, "03.500"),
            rec("1", "ResponseComplete", scheduler, "delete", on_a, "03.500"),
            // Preempted at 09.0, after b's drain began at 08.0: its own room.
            rec("2", "ResponseComplete", scheduler, "delete", on_b, "09.000"),
            // kwok's final deletion of a placeholder, and the scheduler's binding of one: not
            // preemptions.
            rec(
                "3",
                "ResponseComplete",
                "kwok/v0.8.0 (linux/amd64)",
                "delete",
                on_a,
                "10.000",
            ),
            json!({"auditID": "4", "stage": "ResponseComplete", "verb": "create",
                "user": {"username": "rotor-e2e-admin"}, "userAgent": scheduler,
                "objectRef": {"resource": "pods", "subresource": "binding",
                    "namespace": "rotor-system", "name": on_b},
                "requestReceivedTimestamp": "2026-12-01T17:43:02.000Z"})
            .to_string(),
            // A workload pod the scheduler preempted: not rotor's.
            rec(
                "5",
                "ResponseComplete",
                scheduler,
                "delete",
                "web-5d8f-x2x9q",
                "05.000",
            ),
        ];
        let epoch = |at: &str| -> f64 {
            let t: jiff::Timestamp = format!("2026-12-01T17:43:{at}Z").parse().unwrap();
            t.as_nanosecond() as f64 / 1e9
        };
        let count = |began: &[(&str, &str)]| {
            let began: BTreeMap<String, f64> = began
                .iter()
                .map(|(node, at)| (node.to_string(), epoch(at)))
                .collect();
            preempted_placeholders(lines.iter().map(String::as_str), &began)
        };
        let preempted = |total, made_ahead| Preempted { total, made_ahead };
        assert_eq!(count(&[(a, "04.000"), (b, "08.000")]), preempted(2, 1));
        // Had b's drain begun only at 10.0, its placeholder too was made ahead.
        assert_eq!(count(&[(a, "04.000"), (b, "10.000")]), preempted(2, 2));
        // Without a's start (its drain never began, or it is not one of the run's nodes), its
        // placeholder counts in the total only.
        assert_eq!(count(&[(b, "10.000")]), preempted(2, 1));
        // Two nodes whose names share their first 40 characters: which one a placeholder was
        // made for is not known, so it counts in the total only.
        let twin = "kwok-rotor-peer-48tmq-legsribbon-2-ytgex6-other";
        assert_eq!(placeholder_name_start(twin), placeholder_name_start(a));
        assert_eq!(
            count(&[(a, "04.000"), (twin, "04.000"), (b, "08.000")]),
            preempted(2, 0)
        );
    }

    #[test]
    fn a_client_running_as_the_admin_is_told_apart_by_its_user_agent() {
        let rec = |id: &str, agent: &str| {
            json!({"auditID": id, "stage": "ResponseComplete", "verb": "create",
                "user": {"username": "admin"}, "userAgent": agent,
                "objectRef": {"resource": "pods", "subresource": "eviction"},
                "responseStatus": {"code": 201}})
            .to_string()
        };
        let lines = [
            rec("a", "karpenter/v1.14.1 (linux/amd64) karpenter.sh"),
            rec("b", "kubectl/v1.36.3 (linux/amd64) kubernetes/abcdef"),
        ];
        let (requests, evictions) = count_requests(
            lines.iter().map(String::as_str),
            &Requester::Agent("karpenter/"),
        );
        assert_eq!(
            requests,
            BTreeMap::from([("create pods/eviction".to_string(), 1)])
        );
        assert_eq!(evictions, BTreeMap::from([("success".to_string(), 1)]));
    }
}
