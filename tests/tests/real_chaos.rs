//! A chaos run on the real control plane (issue 18, item 1): a full rotation of 30 nodes under
//! several PodDisruptionBudgets while kube-apiserver restarts, etcd restarts and compacts (the API
//! server's watch cache off, so that resumed watches expire with 410 Gone), the drainer leader
//! is SIGKILLed with a standby taking over, and every request of rotor's passes a fault proxy
//! (latency, 5xx, connection resets, partitions).
//!
//! What must hold, each judged independently of rotor's own account:
//! - no budget is ever below its minimum ([`BudgetWatch::start_resuming`]: kube's watcher,
//!   which resumes across the restarts);
//! - every tainted node is drained, and once drained never drained again (its `rotor.dev/phase`,
//!   polled throughout, never leaves `drained`);
//! - a cordon and a taint of someone else's stay when rotor undoes its own (the drain taints are
//!   taken off at the end, and rotor uncordons only the nodes it cordoned);
//! - rotor deletes no pod (the audit log: evictions only);
//! - the rotation completes.
//!
//! Every fault's moment comes from one seed (`ROTOR_CHAOS_SEED`, printed at the start), as the
//! number of nodes drained when it fires, so a run can be repeated. `chaos_in_ci` is the short
//! run; `chaos_long` (ignored; `cargo test -p rotor-e2e --test real_chaos -- --ignored`) doubles
//! the nodes and the faults.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use rotor_e2e::fault_proxy::{FaultProxy, Faults};
use rotor_e2e::manifests::{deployment, min_available_budget};
use rotor_e2e::real_cluster::{ROTOR_NAMESPACE as NS, RealClusterOptions};
use rotor_e2e::{Background, BudgetWatch, FakeNode, RealCluster, WatchedBudget, wait_until};
use serde_json::Value;

const DRAINER: &str = "system:serviceaccount:rotor-system:rotor-drainer";
const DRAIN_TAINT: &str = "rotor.dev/drain=chaos:NoSchedule";
const FOREIGN_TAINT: &str = "example.com/maintenance=true:NoSchedule";

/// How hard a run shakes the cluster.
struct Plan {
    nodes: usize,
    apiserver_restarts: usize,
    etcd_restarts: usize,
    leader_kills: usize,
    partitions: usize,
    partition: Duration,
    /// Between etcd compactions (each expires the watches that resume from before it).
    compact_every: Duration,
    proxy: Faults,
    /// The whole rotation must be done within this.
    limit: Duration,
}

/// One scheduled fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    RestartApiserver,
    RestartEtcd,
    KillLeader,
    Partition,
}

/// SplitMix64: the run's only source of chance, from the seed.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Each fault with the number of drained nodes it waits for, in firing order. Faults fire while
/// the rotation runs: from the first node drained to three nodes before the last.
fn schedule(plan: &Plan, dice: &mut Dice) -> Vec<(usize, Fault)> {
    let mut faults = Vec::new();
    for (fault, n) in [
        (Fault::RestartApiserver, plan.apiserver_restarts),
        (Fault::RestartEtcd, plan.etcd_restarts),
        (Fault::KillLeader, plan.leader_kills),
        (Fault::Partition, plan.partitions),
    ] {
        for _ in 0..n {
            faults.push((1 + dice.below(plan.nodes - 4), fault));
        }
    }
    faults.sort();
    faults
}

fn seed() -> u64 {
    match std::env::var("ROTOR_CHAOS_SEED") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("ROTOR_CHAOS_SEED={s:?} is not a number")),
        Err(_) => 20261126,
    }
}

/// The drainer replicas, as a Deployment of two would keep them: one that exits or is killed
/// is replaced by a new one with a new identity. Each reaches the API server through the proxy.
struct Replicas {
    proxy_url: String,
    flags: Vec<String>,
    running: Vec<(String, Background)>,
    started: usize,
}

impl Replicas {
    /// Replaces the replicas that have exited; returns how many had.
    fn keep_two(&mut self, cluster: &RealCluster) -> usize {
        let before = self.running.len();
        self.running.retain_mut(|(_, d)| d.is_running());
        let gone = before - self.running.len();
        while self.running.len() < 2 {
            self.started += 1;
            let identity = format!("chaos-{}", self.started);
            let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
            let drainer = cluster.start_rotor_drainer_with(&identity, &flags, |kubeconfig| {
                let mut cmd = Command::new(rotor_e2e::binary("rotor-drainer"));
                cmd.env("RUST_LOG", "info");
                (cmd, cluster.kubeconfig_via(kubeconfig, &self.proxy_url))
            });
            self.running.push((identity, drainer));
        }
        gone
    }

    /// SIGKILLs the replica holding the lease, if one of ours does; returns its identity.
    fn kill_leader(&mut self, cluster: &RealCluster) -> Option<String> {
        let holder = lease_holder(cluster)?;
        let at = self.running.iter().position(|(id, _)| *id == holder)?;
        let (id, mut drainer) = self.running.remove(at);
        drainer.kill();
        Some(id)
    }

    fn logs(&self, cluster: &RealCluster) -> Vec<PathBuf> {
        (1..=self.started)
            .map(|i| cluster.dir().join(format!("rotor-drainer-chaos-{i}.log")))
            .collect()
    }
}

fn lease_holder(cluster: &RealCluster) -> Option<String> {
    let out = cluster.kubectl(&["get", "lease", "rotor-drainer", "-n", NS, "-o", "json"]);
    let lease: Value = serde_json::from_slice(&out.stdout).ok()?;
    lease["spec"]["holderIdentity"]
        .as_str()
        .filter(|h| !h.is_empty())
        .map(str::to_string)
}

/// What the run reads of a node.
struct NodeNow {
    /// `rotor.dev/phase`, empty without.
    phase: String,
    unschedulable: bool,
    /// The taints' keys.
    taints: Vec<String>,
}

/// Every node by name, or `None` while the API server is away.
fn nodes_now(cluster: &RealCluster) -> Option<BTreeMap<String, NodeNow>> {
    let out = cluster.kubectl(&["get", "nodes", "-o", "json"]);
    let list: Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(
        list["items"]
            .as_array()?
            .iter()
            .map(|n| {
                let name = n["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let phase = n["metadata"]["annotations"]["rotor.dev/phase"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let unschedulable = n["spec"]["unschedulable"].as_bool().unwrap_or(false);
                let taints = n["spec"]["taints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t["key"].as_str().map(str::to_string))
                    .collect();
                (
                    name,
                    NodeNow {
                        phase,
                        unschedulable,
                        taints,
                    },
                )
            })
            .collect(),
    )
}

/// The workload: four Deployments and their budgets, as the independent watch judges them, and
/// how many pods in all.
fn workload() -> (String, Vec<WatchedBudget>, usize) {
    let apps = [
        ("web", 24, 21),
        ("api", 16, 14),
        ("worker", 12, 10),
        ("cache", 6, 5),
    ];
    let mut yaml = "apiVersion: v1\nkind: Namespace\nmetadata: {name: chaos}\n".to_string();
    let mut budgets = Vec::new();
    for (app, replicas, min) in apps {
        let _ = write!(
            yaml,
            "---\n{}---\n{}",
            deployment("chaos", app, replicas, None),
            min_available_budget("chaos", app, min)
        );
        budgets.push(WatchedBudget::app("chaos", app, min as usize));
    }
    let pods = apps.iter().map(|(_, replicas, _)| *replicas as usize).sum();
    (yaml, budgets, pods)
}

fn ready_pods(cluster: &RealCluster) -> usize {
    let pods = cluster.kubectl_json(&["get", "pods", "-n", "chaos"]);
    pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| rotor_e2e::real_cluster::is_ready(p))
        .count()
}

/// Whether kwok has stopped starting pods: a pod of the workload scheduled more than 20 s ago
/// (it turns Ready 1 s after scheduling) is still not Ready.
fn kwok_stalled(cluster: &RealCluster) -> bool {
    let out = cluster.kubectl(&["get", "pods", "-n", "chaos", "-o", "json"]);
    let Ok(pods) = serde_json::from_slice::<Value>(&out.stdout) else {
        return false;
    };
    let now = jiff::Timestamp::now();
    pods["items"].as_array().into_iter().flatten().any(|p| {
        let conditions = p["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let ready = conditions
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let scheduled_at = conditions
            .iter()
            .find(|c| c["type"] == "PodScheduled" && c["status"] == "True")
            .and_then(|c| {
                c["lastTransitionTime"]
                    .as_str()?
                    .parse::<jiff::Timestamp>()
                    .ok()
            });
        !ready
            && p["metadata"]["deletionTimestamp"].is_null()
            && scheduled_at.is_some_and(|at| now.duration_since(at).as_secs() > 20)
    })
}

/// Counts the lines of the drainers' logs that say a watch expired (410 Gone: "The
/// resourceVersion for the provided watch is too old").
fn expired_watches(logs: &[PathBuf]) -> usize {
    logs.iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .map(|log| {
            log.lines()
                .filter(|l| l.contains("is too old") || l.contains("too old resource version"))
                .count()
        })
        .sum()
}

fn run(plan: Plan) {
    let seed = seed();
    let mut dice = Dice(seed);
    let faults = schedule(&plan, &mut dice);
    eprintln!(
        "chaos: seed {seed} (ROTOR_CHAOS_SEED), {} nodes, faults at nodes drained: {faults:?}",
        plan.nodes
    );

    let mut cluster = RealCluster::start_with(RealClusterOptions {
        watch_cache: false,
        ..RealClusterOptions::default()
    });
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    let old: Vec<String> = (1..=plan.nodes).map(|i| format!("old-{i}")).collect();
    cluster.add_nodes(&old.iter().map(|n| FakeNode::behind(n)).collect::<Vec<_>>());
    let (yaml, budgets, expected) = workload();
    cluster.apply(&yaml);
    wait_until("the workload to be Ready", Duration::from_secs(300), || {
        (ready_pods(&cluster) >= expected).then_some(())
    });
    let new: Vec<String> = (1..=plan.nodes / 3).map(|i| format!("new-{i}")).collect();
    cluster.add_nodes(&new.iter().map(|n| FakeNode::new(n)).collect::<Vec<_>>());

    // Someone else's marks, which rotor must leave: a cordon on an old node before rotor's
    // taint, a cordon on a new node, a taint on an old node.
    let (foreign_cordon, foreign_taint) = (old[4].clone(), old[6].clone());
    cluster.kubectl_ok(&["cordon", &foreign_cordon]);
    cluster.kubectl_ok(&["cordon", &new[1]]);
    cluster.kubectl_ok(&["taint", "node", &foreign_taint, FOREIGN_TAINT]);

    let watch = BudgetWatch::start_resuming(cluster.admin_kubeconfig(), budgets);
    let proxy = FaultProxy::in_front_of(&cluster, seed);
    proxy.set_faults(plan.proxy.clone());
    let mut replicas = Replicas {
        proxy_url: proxy.url(),
        flags: [
            "--max-concurrent",
            "3",
            // Someone else's two cordons count as unavailable too.
            "--max-unavailable",
            "5",
            "--lease-duration",
            "6s",
            "--budget-recheck",
            "5s",
        ]
        .map(String::from)
        .to_vec(),
        running: Vec::new(),
        started: 0,
    };
    replicas.keep_two(&cluster);
    for node in &old {
        cluster.kubectl_ok(&["taint", "node", node, DRAIN_TAINT]);
    }

    // The run: poll the nodes, fire each fault when its number of drained nodes is reached,
    // compact etcd every so often, and keep two replicas.
    let started = Instant::now();
    let mut report = Report::default();
    let mut pending = faults.into_iter().peekable();
    let mut phases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut last_compaction = Instant::now();
    let mut last_kwok_check = Instant::now();
    loop {
        assert!(
            started.elapsed() < plan.limit,
            "the rotation did not complete within {:?} (seed {seed}); phases seen: {phases:#?}",
            plan.limit
        );
        report.replaced += replicas.keep_two(&cluster);
        let Some(nodes) = nodes_now(&cluster) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        for name in &old {
            let phase = nodes.get(name).map(|n| n.phase.clone()).unwrap_or_default();
            let seen = phases.entry(name.clone()).or_default();
            if seen.last() != Some(&phase) {
                seen.push(phase);
            }
        }
        let drained = old
            .iter()
            .filter(|n| nodes.get(*n).is_some_and(|n| n.phase == "drained"))
            .count();
        if drained == old.len() && pending.peek().is_none() {
            break;
        }
        while let Some(&(at, fault)) = pending.peek() {
            if drained < at {
                break;
            }
            match fault {
                Fault::RestartApiserver => {
                    report
                        .apiserver_down
                        .push(cluster.restart("kube-apiserver", true));
                    // A compaction right after would expire the budget watch's own resume.
                    last_compaction = Instant::now();
                }
                Fault::RestartEtcd => report.etcd_down.push(cluster.restart("etcd", false)),
                Fault::KillLeader => match replicas.kill_leader(&cluster) {
                    Some(id) => report.killed.push(id),
                    // Between terms: try again on the next poll.
                    None => break,
                },
                Fault::Partition => {
                    proxy.partition(plan.partition);
                    report.partitions += 1;
                }
            }
            eprintln!(
                "chaos: {fault:?} at {drained} drained, {:?} in",
                started.elapsed()
            );
            pending.next();
        }
        // kwok 0.8, the kubelets' stand-in, sometimes stops starting pods after kube-apiserver
        // restarts (its pod watch does not come back); real kubelets reconnect. Restart it then.
        if last_kwok_check.elapsed() >= Duration::from_secs(5) {
            last_kwok_check = Instant::now();
            if kwok_stalled(&cluster) {
                cluster.restart("kwok", true);
                report.kwok_restarts += 1;
                eprintln!(
                    "chaos: kwok restarted (a pod waited 20 s to start), {:?} in",
                    started.elapsed()
                );
            }
        }
        if last_compaction.elapsed() >= plan.compact_every {
            cluster.compact_etcd();
            report.compactions += 1;
            last_compaction = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let makespan = started.elapsed();

    // Drained exactly once: no node's phase ever left `drained`.
    for (node, seen) in &phases {
        let first = seen.iter().position(|p| p == "drained");
        assert!(
            first.is_some_and(|i| i == seen.len() - 1),
            "{node} left `drained` or never reached it: {seen:?} (seed {seed})"
        );
    }

    // Take rotor's taints off under the same faults: rotor undoes its own cordons only.
    for node in &old {
        cluster.kubectl_ok(&["taint", "node", node, "rotor.dev/drain-"]);
    }
    let nodes = wait_until(
        "rotor to undo its state on every old node",
        plan.limit,
        || {
            report.replaced += replicas.keep_two(&cluster);
            let nodes = nodes_now(&cluster)?;
            old.iter()
                .all(|n| {
                    nodes.get(n).is_some_and(|node| {
                        node.phase.is_empty() && (*n == foreign_cordon || !node.unschedulable)
                    })
                })
                .then_some(nodes)
        },
    );
    assert!(
        nodes[&foreign_cordon].unschedulable,
        "{foreign_cordon}: someone else's cordon was undone"
    );
    assert!(
        nodes[&new[1]].unschedulable,
        "{}: someone else's cordon was undone",
        new[1]
    );
    assert!(
        nodes[&foreign_taint]
            .taints
            .iter()
            .any(|t| t == "example.com/maintenance"),
        "{foreign_taint}: someone else's taint went: {:?}",
        nodes[&foreign_taint].taints
    );

    let verdict = watch.finish();
    let stats = proxy.stats();
    let deletes = cluster
        .audit_by(DRAINER)
        .iter()
        .filter(|e| e["verb"] == "delete" && e["objectRef"]["resource"] == "pods")
        .count();
    let evictions = cluster
        .audit_by(DRAINER)
        .iter()
        .filter(|e| {
            e["objectRef"]["subresource"] == "eviction" && e["responseStatus"]["code"] == 201
        })
        .count();
    let expired = expired_watches(&replicas.logs(&cluster));
    eprintln!(
        "chaos: seed {seed}: {} nodes drained in {makespan:.1?} at 3 at a time, {evictions} evictions accepted, 0 pod deletes\n\
         chaos: kube-apiserver restarted {} times (unavailable {:.1?}), etcd restarted {} times ({:.1?}), etcd compacted {} times; {} watch expiries (410) in the drainers' logs\n\
         chaos: leader SIGKILLed {} times ({:?}); {} replicas replaced in all (killed or stepped down); {} partitions of {:?}\n\
         chaos: proxy: {} requests forwarded, {} delayed, {} answered 5xx {:?}, {} connections reset, {} requests and {} connections held by a partition\n\
         chaos: budget watch: {} events, {} watch errors, {} relists, lowest healthy {:?}; {} violations; kwok restarted {} times",
        old.len(),
        report.apiserver_down.len(),
        report.apiserver_down,
        report.etcd_down.len(),
        report.etcd_down,
        report.compactions,
        expired,
        report.killed.len(),
        report.killed,
        report.replaced,
        report.partitions,
        plan.partition,
        stats.forwarded,
        stats.delayed,
        stats.error_total(),
        stats.errors,
        stats.resets,
        stats.partitioned_requests,
        stats.partitioned_connections,
        verdict.events,
        verdict.watch_errors,
        verdict.relists,
        verdict.lowest,
        verdict.violations.len(),
        report.kwok_restarts,
    );
    assert!(verdict.never_armed.is_empty(), "{:?}", verdict.never_armed);
    assert!(
        verdict.violations.is_empty(),
        "budgets violated (seed {seed}): {:#?}",
        verdict.violations
    );
    assert_eq!(deletes, 0, "rotor deleted pods outside the Eviction API");
    assert!(
        evictions >= expected / 2,
        "only {evictions} evictions accepted"
    );
    // The faults were real: every kind was injected.
    assert_eq!(report.killed.len(), plan.leader_kills);
    assert!(stats.error_total() > 0 && stats.resets > 0, "{stats:?}");
    assert_eq!(report.partitions, plan.partitions);
}

/// What a run injected.
#[derive(Default)]
struct Report {
    apiserver_down: Vec<Duration>,
    etcd_down: Vec<Duration>,
    compactions: usize,
    killed: Vec<String>,
    replaced: usize,
    partitions: usize,
    kwok_restarts: usize,
}

#[test]
fn chaos_in_ci() {
    run(Plan {
        nodes: 30,
        apiserver_restarts: 2,
        etcd_restarts: 1,
        leader_kills: 2,
        partitions: 1,
        partition: Duration::from_secs(3),
        compact_every: Duration::from_secs(15),
        proxy: Faults {
            latency: Some((Duration::ZERO, Duration::from_millis(30))),
            error_rate: 0.02,
            reset_rate: 0.01,
            only: None,
        },
        limit: Duration::from_secs(900),
    });
}

#[test]
#[ignore = "the long chaos run, on demand: cargo test -p rotor-e2e --test real_chaos -- --ignored"]
fn chaos_long() {
    run(Plan {
        nodes: 60,
        apiserver_restarts: 5,
        etcd_restarts: 2,
        leader_kills: 5,
        partitions: 3,
        // Longer than the renew deadline (4 s): the leader steps down and is replaced.
        partition: Duration::from_secs(6),
        compact_every: Duration::from_secs(10),
        proxy: Faults {
            latency: Some((Duration::ZERO, Duration::from_millis(80))),
            error_rate: 0.05,
            reset_rate: 0.02,
            only: None,
        },
        limit: Duration::from_secs(1800),
    });
}
