//! The two backends a contest runs on, behind one face: `rotor-sim` ([`BenchSim`]) and the
//! real control plane ([`RealBench`]). Each contestant gets a fresh cluster of either kind;
//! what differs is how the cluster is made and how requests and violations are counted.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use rotor_e2e::kubectl_command;
use rotor_sim::scenario::Scenario;
use serde_json::Value;
use tokio::runtime::Handle;

use crate::api_times;
use crate::drainer::{Bins, Drainer};
use crate::real::{
    RealBench, Requester, SCHEDULER_AGENT, answer_codes, drainer_user, kubectl_user, request_spans,
};
use crate::sim::{BenchSim, counts};
use crate::snapshot::Snapshot;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sim,
    Real,
}

impl Backend {
    pub fn slug(self) -> &'static str {
        match self {
            Backend::Sim => "sim",
            Backend::Real => "real",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Sim => "rotor-sim",
            Backend::Real => "real control plane",
        }
    }
}

pub enum BenchCluster {
    Sim(Box<BenchSim>),
    Real(Box<RealBench>),
}

/// What a contestant did, as the backend counted it.
pub struct Counted {
    /// `verb resource` to count: the contestant's own requests.
    pub requests: BTreeMap<String, u64>,
    pub evictions: BTreeMap<String, u64>,
    pub violations: Vec<String>,
    pub nodes_launched: u64,
    pub nodes_removed: u64,
}

impl BenchCluster {
    pub fn start(
        backend: Backend,
        runtime: &Handle,
        scenario_path: &Path,
        scenario: &Scenario,
        dir: &Path,
    ) -> anyhow::Result<BenchCluster> {
        Ok(match backend {
            Backend::Sim => BenchCluster::Sim(Box::new(BenchSim::start(
                runtime,
                scenario_path,
                dir,
                Duration::from_secs(120),
            )?)),
            Backend::Real => {
                BenchCluster::Real(Box::new(RealBench::start(runtime, scenario, dir)?))
            }
        })
    }

    pub fn client(&self) -> &kube::Client {
        match self {
            BenchCluster::Sim(s) => &s.client,
            BenchCluster::Real(r) => &r.client,
        }
    }

    pub fn runtime(&self) -> &Handle {
        match self {
            BenchCluster::Sim(s) => &s.runtime,
            BenchCluster::Real(r) => r.runtime(),
        }
    }

    /// The servers a run costs, by name and process id: rotor-sim, or kube-apiserver and etcd.
    pub fn servers(&self) -> Vec<(String, u32)> {
        match self {
            BenchCluster::Sim(s) => vec![("rotor-sim".into(), s.process.pid())],
            BenchCluster::Real(r) => [
                "kube-apiserver",
                "etcd",
                "kube-controller-manager",
                "kube-scheduler",
                "kwok",
            ]
            .into_iter()
            .filter_map(|name| {
                r.cluster
                    .component_pid(name)
                    .map(|pid| (name.to_string(), pid))
            })
            .collect(),
        }
    }

    /// The simulator's control-loop tick (the lower bound counts it); none on the real one.
    pub fn tick(&self, scenario: &Scenario) -> Option<Duration> {
        match self {
            BenchCluster::Sim(_) => Some(scenario.timing.tick),
            BenchCluster::Real(_) => None,
        }
    }

    /// `GET path` as JSON, as the benchmark itself.
    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        match self {
            BenchCluster::Sim(s) => s.get(path),
            BenchCluster::Real(r) => {
                let request = http::Request::get(path).body(Vec::new())?;
                let text = r
                    .runtime()
                    .block_on(r.client.request_text(request))
                    .with_context(|| format!("GET {path}"))?;
                serde_json::from_str(&text).with_context(|| format!("GET {path}: not JSON"))
            }
        }
    }

    /// The list at `path`; from a real API server read a page at a time ([`list_in_pages`]),
    /// its pages' items in one list with the first page's metadata (its resourceVersion, which
    /// every page was read at).
    pub fn get_list(&self, path: &str) -> anyhow::Result<Value> {
        let BenchCluster::Real(r) = self else {
            return self.get(path);
        };
        let mut list: Option<Value> = None;
        r.runtime()
            .block_on(list_in_pages(&r.client, path, |mut page| match &mut list {
                None => {
                    // The merged list is whole: no page follows it.
                    if let Some(meta) = page["metadata"].as_object_mut() {
                        meta.remove("continue");
                        meta.remove("remainingItemCount");
                    }
                    list = Some(page)
                }
                Some(list) => {
                    if let (Value::Array(items), Value::Array(more)) =
                        (&mut list["items"], page["items"].take())
                    {
                        items.extend(more);
                    }
                }
            }))?;
        list.with_context(|| format!("GET {path}: no answer"))
    }

    /// Adds the drain taint to every node at once (`nodes`: each name and its taints before).
    /// t=0 of a run: every original node of `snap` gets the drain taint at once, over the
    /// taints it had.
    pub fn taint_originals(&self, snap: &Snapshot) -> anyhow::Result<()> {
        crate::sim::taint_all(
            self.client(),
            self.runtime(),
            snap.nodes
                .iter()
                .map(|n| (n.name.as_str(), n.taints.as_slice())),
        )
    }

    /// `rotor-drainer run` with `flags`: against the simulator as the admin, on the real control
    /// plane as the shipped ServiceAccount with the shipped RBAC.
    pub fn start_drainer(
        &self,
        bins: &Bins,
        dir: &Path,
        flags: &[&str],
    ) -> anyhow::Result<Drainer> {
        match self {
            BenchCluster::Sim(s) => Drainer::run(&bins.drainer, s, dir, "rotor-system", flags),
            BenchCluster::Real(r) => Ok(Drainer {
                process: r
                    .cluster
                    .start_rotor_drainer_with("bench", flags, |kubeconfig| {
                        (Command::new(&bins.drainer), kubeconfig.to_path_buf())
                    }),
            }),
        }
    }

    /// Waits until the drainer's watches are open: its budget watch and its node watches (on
    /// the simulator two, the monitor holding one; the API server logs a watch once it is
    /// served, and those of the standing-by replica are what it holds before t=0).
    pub fn wait_drainer_watching(&self, timeout: Duration) -> anyhow::Result<()> {
        match self {
            BenchCluster::Sim(s) => s.wait_for_requests(
                &[("watch nodes", 2), ("watch poddisruptionbudgets", 1)],
                timeout,
            ),
            BenchCluster::Real(r) => {
                let want = [("watch nodes", 1), ("watch poddisruptionbudgets", 1)];
                let deadline = Instant::now() + timeout;
                loop {
                    let (requests, _) = r.requests_of(&drainer_user())?;
                    if want
                        .iter()
                        .all(|(k, n)| requests.get(*k).copied().unwrap_or(0) >= *n)
                    {
                        return Ok(());
                    }
                    ensure!(
                        Instant::now() < deadline,
                        "timed out waiting for rotor-drainer's watches; its requests so far: {requests:?}"
                    );
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
    }

    /// `kubectl` as the kubectl loop runs it.
    pub fn kubectl(&self) -> Command {
        match self {
            BenchCluster::Sim(s) => kubectl_command(&s.process),
            BenchCluster::Real(r) => {
                let mut cmd = Command::new(r.cluster.kubectl_bin());
                cmd.arg("--kubeconfig")
                    .arg(&r.kubectl_kubeconfig)
                    .env_remove("KUBECONFIG");
                cmd
            }
        }
    }

    /// Zeroes the counters just before t=0; on the real control plane, the budget watch starts
    /// judging each budget against what it allowed in `budgets` (expected pods, allowed).
    pub fn reset_counters(&self, budgets: &BTreeMap<String, (i64, i64)>) -> anyhow::Result<()> {
        match self {
            BenchCluster::Sim(s) => s.reset_stats(),
            BenchCluster::Real(r) => {
                r.reset_counters(budgets);
                Ok(())
            }
        }
    }

    /// On the real control plane, read from the audit log since the reset: where the cycle of
    /// the budget that allows one disruption and saw the most evictions went
    /// ([`crate::cycle`]), and how long the API server took over the contestant's requests
    /// (`rotor` says who it was). Nothing on the simulator, whose controllers all act at its
    /// steps and which answers at once.
    pub fn audit_readings(&self, snap: &Snapshot, rotor: bool) -> anyhow::Result<Vec<String>> {
        let BenchCluster::Real(r) = self else {
            return Ok(Vec::new());
        };
        let audit = r.audit_since_reset()?;
        let calls = crate::cycle::AuditCalls::parse(audit.lines());
        let mut lines = match crate::cycle::busiest(&snap.budgets, |name| calls.budget_cycles(name))
        {
            Some((name, cycles)) => crate::cycle::CycleParts::of(&cycles).lines(name, "audit log"),
            None => Vec::new(),
        };
        let user = if rotor {
            drainer_user()
        } else {
            kubectl_user()
        };
        let spans = |who: &Requester| request_spans(audit.lines(), who);
        lines.extend(api_times::contestant_lines(&spans(&Requester::User(&user))));
        // The two controllers whose pace sets a budget's cycle, the simulator's `bindTime`
        // and `budgetSyncTime`.
        let workers = [
            (
                "the scheduler's bindings",
                spans(&Requester::Agent(SCHEDULER_AGENT)).remove("create pods/binding"),
            ),
            (
                "the disruption controller's budget status writes",
                spans(&Requester::User(DISRUPTION_CONTROLLER))
                    .remove("update poddisruptionbudgets/status"),
            ),
        ];
        for (what, spans) in workers {
            lines.extend(api_times::worker_line(what, &spans.unwrap_or_default()));
        }
        let handler = Requester::User(EVICTION_HANDLER);
        lines.extend(api_times::budget_write_line(&answer_codes(
            audit.lines(),
            &handler,
            "update poddisruptionbudgets/status",
        )));
        Ok(lines)
    }

    /// What the contestant did since the reset. `rotor` says who it was (on the simulator every
    /// request is counted, less the benchmark's `taints` node patches).
    pub fn counted(&self, rotor: bool, taints: u64) -> anyhow::Result<(Counted, Option<Value>)> {
        match self {
            BenchCluster::Sim(s) => {
                let stats = s.stats()?;
                let mut requests = counts(&stats["requests"]);
                if let Some(n) = requests.get_mut("patch nodes") {
                    *n = n.saturating_sub(taints);
                    if *n == 0 {
                        requests.remove("patch nodes");
                    }
                }
                let violations = match stats["budgetViolations"].as_u64().unwrap_or(0) {
                    0 => Vec::new(),
                    n => vec![format!(
                        "{n}: {}",
                        serde_json::to_string(&stats["budgetViolationList"]).unwrap_or_default()
                    )],
                };
                Ok((
                    Counted {
                        requests,
                        evictions: counts(&stats["evictions"]),
                        violations,
                        nodes_launched: stats["nodesLaunched"].as_u64().unwrap_or(0),
                        nodes_removed: stats["nodesRemoved"].as_u64().unwrap_or(0),
                    },
                    Some(stats),
                ))
            }
            BenchCluster::Real(r) => {
                let user = if rotor {
                    drainer_user()
                } else {
                    kubectl_user()
                };
                let (requests, evictions) = r.requests_of(&user)?;
                let (nodes_launched, nodes_removed) = r.nodes_launched_removed();
                Ok((
                    Counted {
                        requests,
                        evictions,
                        violations: r.violations(),
                        nodes_launched,
                        nodes_removed,
                    },
                    None,
                ))
            }
        }
    }

    /// The PriorityClass `deploy/` ships for `--surge` (the real cluster has it from `deploy/`).
    pub fn create_surge_class(&self, dir: &Path) -> anyhow::Result<()> {
        match self {
            BenchCluster::Sim(s) => crate::compare::create_surge_class(s, dir),
            BenchCluster::Real(_) => Ok(()),
        }
    }
}

/// kube-controller-manager runs each controller as its own ServiceAccount.
const DISRUPTION_CONTROLLER: &str = "system:serviceaccount:kube-system:disruption-controller";
/// Who the API server's eviction handler writes a budget's status as.
const EVICTION_HANDLER: &str = "system:apiserver";

/// Fails unless `backend` can run here.
pub fn check(backend: Backend) -> anyhow::Result<()> {
    match backend {
        Backend::Sim => Ok(()),
        Backend::Real => crate::real::check_built(),
    }
}

pub fn parse_backends(v: &str) -> anyhow::Result<Vec<Backend>> {
    v.split(',')
        .map(|b| match b.trim() {
            "sim" => Ok(Backend::Sim),
            "real" => Ok(Backend::Real),
            other => bail!("--backend takes sim, real or both (sim,real), not {other:?}"),
        })
        .collect()
}

/// Reads the list at `path` from a real API server 2,000 items at a time, each page handed to
/// `visit` as it comes: at 150,000 pods one answer ran past the server's time limit. Every page
/// is read at the first page's resourceVersion.
pub(crate) async fn list_in_pages(
    client: &kube::Client,
    path: &str,
    mut visit: impl FnMut(Value),
) -> anyhow::Result<()> {
    let request = kube::core::Request::new(path);
    let mut params = kube::api::ListParams::default().limit(2000);
    loop {
        let text = client
            .request_text(
                request
                    .list(&params)
                    .with_context(|| format!("GET {path}: building the request"))?,
            )
            .await
            .with_context(|| format!("GET {path}"))?;
        let page: Value =
            serde_json::from_str(&text).with_context(|| format!("GET {path}: not JSON"))?;
        let next = page["metadata"]["continue"].as_str().map(str::to_string);
        visit(page);
        match next.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}
