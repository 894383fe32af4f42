//! The node groups of the real-control-plane backend: the simulator's autoscaler rules
//! (`crates/sim/src/cluster/autoscaler.rs`), played against kube-apiserver with kwok nodes, so
//! that both backends give a drainer the same capacity on the same timing.
//!
//! - A group keeps its desired number of nodes: a node removed below it is replaced.
//! - Pods unschedulable for `scaleUpDelay` raise the desired size (up to `max`) by as many nodes
//!   as they need, packed first-fit into the room of the nodes still booting, then of fresh
//!   nodes; at most one scale-up per `scaleUpDelay`.
//! - A launched node appears (kwok makes it Ready at once) `nodeStartup` after its launch.
//! - A node cordoned or carrying the drain taint that holds no workload pod for
//!   `scaleDownDelay` is removed, giving back a node of surge (desired above the configured
//!   size) if there is one.
//!
//! The decisions ([`Groups::step`]) are a pure function of what the benchmark's reflectors see;
//! the shell ([`RealAutoscaler`]) creates and deletes the Node objects.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use rotor_e2e::autoscaler::wants_a_node;
use rotor_e2e::real_cluster::FakeNode;
use rotor_sim::cluster::autoscaler::{Room, nodes_needed};
use rotor_sim::cluster::objects::{
    NODE_GROUP_LABEL, Resources, is_daemon, is_mirror, pod_requests, terminal,
};
use rotor_sim::scenario::{NodeGroupSpec, Timing};
use serde_json::json;
use tokio::runtime::Handle;

/// cluster-autoscaler's default `--expendable-pods-priority-cutoff`.
/// How often the autoscaler looks.
const INTERVAL: Duration = Duration::from_millis(100);
/// The taint a launched node starts with until its DaemonSet pods are bound, as cloud nodes
/// carry a start-up taint: without it the pending workload pods fill a new node before its
/// DaemonSet pod is created, and that pod never fits (the simulator binds DaemonSet pods with
/// the node). The real backend's DaemonSets tolerate it.
pub const BOOTING_TAINT: &str = "bench.rotor.dev/booting";

/// One group's state between steps.
struct Group {
    spec: NodeGroupSpec,
    template: FakeNode,
    desired: u32,
    next_index: u32,
    /// Launched nodes not yet created, and when they appear.
    booting: Vec<(String, Instant)>,
    /// Nodes created but not yet seen by the reflector: they count as live meanwhile.
    appearing: Vec<String>,
    last_scale_up: Option<Instant>,
}

/// What one step decided.
#[derive(Debug, Default, PartialEq)]
pub struct Actions {
    pub create: Vec<FakeNode>,
    pub delete: Vec<String>,
    /// Booted nodes whose DaemonSet pods are bound: their start-up taint comes off.
    pub untaint: Vec<String>,
}

/// The groups, and when each pod was first seen unschedulable and each node empty.
pub struct Groups {
    groups: Vec<Group>,
    timing: Timing,
    /// How many DaemonSets run a pod on every node.
    daemonsets: usize,
    unschedulable_since: HashMap<String, Instant>,
    empty_since: HashMap<String, Instant>,
}

impl Groups {
    /// `existing` names the nodes the cluster started with, per group, so new names follow on.
    pub fn new(
        specs: &[NodeGroupSpec],
        timing: &Timing,
        templates: Vec<FakeNode>,
        daemonsets: usize,
    ) -> Groups {
        Groups {
            groups: specs
                .iter()
                .zip(templates)
                .map(|(spec, template)| Group {
                    desired: spec.size,
                    next_index: spec.size,
                    spec: spec.clone(),
                    template,
                    booting: Vec::new(),
                    appearing: Vec::new(),
                    last_scale_up: None,
                })
                .collect(),
            timing: timing.clone(),
            daemonsets,
            unschedulable_since: HashMap::new(),
            empty_since: HashMap::new(),
        }
    }

    /// One look at the cluster at `now`: the nodes to create and to delete.
    pub fn step(&mut self, nodes: &[Arc<Node>], pods: &[Arc<Pod>], now: Instant) -> Actions {
        let mut actions = Actions::default();
        let group_of = |n: &Node| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(NODE_GROUP_LABEL))
                .cloned()
        };
        // Nodes that booted appear.
        for g in &mut self.groups {
            g.appearing
                .retain(|a| !nodes.iter().any(|n| n.metadata.name.as_ref() == Some(a)));
            let (ready, still): (Vec<_>, Vec<_>) =
                g.booting.drain(..).partition(|(_, at)| *at <= now);
            g.booting = still;
            for (name, _) in ready {
                let mut node = g.template.clone();
                node.name = name.clone();
                actions.create.push(node);
                g.appearing.push(name);
            }
        }
        // A booted node takes workload pods once its DaemonSet pods are bound.
        for n in nodes {
            let booting = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == BOOTING_TAINT));
            let name = n.metadata.name.as_deref().unwrap_or_default();
            let daemons = pods
                .iter()
                .filter(|p| is_daemon(p))
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name))
                .count();
            if booting && daemons >= self.daemonsets {
                actions.untaint.push(name.to_string());
            }
        }
        // Keep each group at its desired size.
        for g in &mut self.groups {
            let live = nodes
                .iter()
                .filter(|n| group_of(n).as_deref() == Some(g.spec.name.as_str()))
                .filter(|n| n.metadata.deletion_timestamp.is_none())
                .count()
                + g.booting.len()
                + g.appearing.len();
            for _ in live as u32..g.desired {
                launch(g, now, self.timing.node_startup);
            }
        }
        // Scale up once a pod has been unschedulable for scaleUpDelay, sized for every pod
        // unschedulable now (as the simulator's autoscaler does).
        let mut waiting_now: Vec<String> = Vec::new();
        let mut waiting: Vec<Resources> = Vec::new();
        let mut one_due = false;
        for p in pods {
            if !wants_a_node(p) {
                continue;
            }
            let key = format!(
                "{}/{}",
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default()
            );
            let since = *self.unschedulable_since.entry(key.clone()).or_insert(now);
            waiting_now.push(key);
            one_due |= since + self.timing.scale_up_delay <= now;
            waiting.push(pod_requests(p));
        }
        self.unschedulable_since
            .retain(|k, _| waiting_now.contains(k));
        if one_due {
            let per_node = per_node_requests(nodes, pods);
            for g in &mut self.groups {
                if g.desired >= g.spec.max() {
                    continue;
                }
                if g.last_scale_up
                    .is_some_and(|t| t + self.timing.scale_up_delay > now)
                {
                    continue;
                }
                let fresh = fresh_room(&g.template, &per_node);
                let upcoming = vec![fresh; g.booting.len()];
                let count = nodes_needed(upcoming, fresh, &waiting)
                    .min(g.spec.max().saturating_sub(g.desired));
                if count == 0 {
                    continue;
                }
                g.last_scale_up = Some(now);
                g.desired += count;
                for _ in 0..count {
                    launch(g, now, self.timing.node_startup);
                }
                break;
            }
        }
        // Scale down nodes marked for draining that hold no workload pod.
        let mut busy: HashMap<&str, usize> = HashMap::new();
        for p in pods {
            if is_daemon(p) || is_mirror(p) || terminal(p) {
                continue;
            }
            if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                *busy.entry(n).or_default() += 1;
            }
        }
        let mut seen_empty = Vec::new();
        for n in nodes {
            let Some(group) = group_of(n) else { continue };
            let name = n.metadata.name.clone().unwrap_or_default();
            let marked = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
                || n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == "rotor.dev/drain"));
            if !marked
                || busy.contains_key(name.as_str())
                || n.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let since = *self.empty_since.entry(name.clone()).or_insert(now);
            seen_empty.push(name.clone());
            if since + self.timing.scale_down_delay > now {
                continue;
            }
            if let Some(g) = self.groups.iter_mut().find(|g| g.spec.name == group)
                && g.desired > g.spec.size.max(g.spec.min())
            {
                g.desired -= 1;
            }
            actions.delete.push(name);
        }
        self.empty_since.retain(|k, _| seen_empty.contains(k));
        for d in &actions.delete {
            self.empty_since.remove(d);
        }
        actions
    }
}

fn launch(g: &mut Group, now: Instant, startup: Duration) {
    let name = format!("{}-{}", g.spec.name, g.next_index);
    g.next_index += 1;
    g.booting.push((name, now + startup));
}

/// What the per-node pods (DaemonSet, mirror) of one Ready node take, as the simulator counts it.
fn per_node_requests(nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> Vec<Resources> {
    let Some(first) = nodes.iter().find_map(|n| n.metadata.name.clone()) else {
        return Vec::new();
    };
    pods.iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(first.as_str()))
        .filter(|p| (is_daemon(p) || is_mirror(p)) && !terminal(p))
        .map(|p| pod_requests(p))
        .collect()
}

fn fresh_room(template: &FakeNode, per_node: &[Resources]) -> Room {
    let node: Node = serde_json::from_value(template.to_json()).expect("a FakeNode is a Node");
    let mut room = Room::of(&node);
    for r in per_node {
        room.take(r);
    }
    room
}

/// The autoscaler running against the cluster until dropped: two reflectors and a loop.
pub struct RealAutoscaler {
    stop: Arc<AtomicBool>,
    pub launched: Arc<AtomicU64>,
    pub removed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RealAutoscaler {
    pub fn start(client: kube::Client, runtime: &Handle, mut groups: Groups) -> RealAutoscaler {
        let stop = Arc::new(AtomicBool::new(false));
        let launched = Arc::new(AtomicU64::new(0));
        let removed = Arc::new(AtomicU64::new(0));
        let (nodes, nodes_writer) = reflector::store::<Node>();
        let (pods, pods_writer) = reflector::store::<Pod>();
        let node_api: Api<Node> = Api::all(client.clone());
        let pod_api: Api<Pod> = Api::all(client);
        runtime.spawn(
            watcher(node_api.clone(), watcher::Config::default())
                .default_backoff()
                .reflect(nodes_writer)
                .for_each(|_| async {}),
        );
        runtime.spawn(
            watcher(pod_api, watcher::Config::default())
                .default_backoff()
                .reflect(pods_writer)
                .for_each(|_| async {}),
        );
        let (st, l, r) = (stop.clone(), launched.clone(), removed.clone());
        let task = runtime.spawn(async move {
            let _ = nodes.wait_until_ready().await;
            let _ = pods.wait_until_ready().await;
            while !st.load(Ordering::Relaxed) {
                let actions = groups.step(&nodes.state(), &pods.state(), Instant::now());
                apply(&node_api, actions, &l, &r).await;
                tokio::time::sleep(INTERVAL).await;
            }
        });
        RealAutoscaler {
            stop,
            launched,
            removed,
            task,
        }
    }
}

impl Drop for RealAutoscaler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.abort();
    }
}

async fn apply(api: &Api<Node>, actions: Actions, launched: &AtomicU64, removed: &AtomicU64) {
    for node in actions.create {
        let mut json = node.to_json();
        json["spec"]["taints"] = json!([{"key": BOOTING_TAINT, "effect": "NoSchedule"}]);
        let object: Node = serde_json::from_value(json).expect("a FakeNode is a Node");
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {
                launched.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => eprintln!("drain_bench: autoscaler: creating node {}: {e}", node.name),
        }
    }
    for name in actions.untaint {
        let patch = Patch::Merge(json!({"spec": {"taints": null}}));
        if let Err(e) = api.patch(&name, &PatchParams::default(), &patch).await {
            eprintln!("drain_bench: autoscaler: untainting booted node {name}: {e}");
        }
    }
    for name in actions.delete {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                removed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => eprintln!("drain_bench: autoscaler: removing node {name}: {e}"),
        }
    }
}

/// The template of a group's nodes as kwok nodes: the scenario's capacity and kubelet, and the
/// group label both backends read.
pub fn template(spec: &NodeGroupSpec) -> FakeNode {
    let mut labels = serde_json::Map::new();
    for (k, v) in &spec.template.labels {
        labels.insert(k.clone(), json!(v));
    }
    labels.insert(NODE_GROUP_LABEL.into(), json!(spec.name));
    FakeNode {
        name: String::new(),
        labels: serde_json::Value::Object(labels),
        kubelet_version: spec.template.kubelet_version.clone(),
        provider_id: None,
        cpu: spec.template.cpu.clone(),
        memory: spec.template.memory.clone(),
        pods: spec.template.pods,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests as the simulator counts them: thousandths of a core and of a byte.
    fn res(cpu_milli: i128) -> Resources {
        Resources {
            cpu: cpu_milli,
            memory: (256 << 20) * 1000,
        }
    }

    #[test]
    fn pending_pods_are_packed_after_the_booting_room() {
        let fresh = Room {
            free: Resources {
                cpu: 3_950,
                memory: (16 << 30) * 1000,
            },
            pods: 57,
        };
        let pods: Vec<Resources> = (0..60).map(|_| res(100)).collect();
        // 39 pods of 100m fill 3,950m: 60 need two fresh nodes, one once a node is booting.
        assert_eq!(nodes_needed(Vec::new(), fresh, &pods), 2);
        assert_eq!(nodes_needed(vec![fresh], fresh, &pods), 1);
        assert_eq!(nodes_needed(Vec::new(), fresh, &[]), 0);
    }

    fn spec() -> NodeGroupSpec {
        serde_json::from_value(json!({
            "name": "general", "size": 2, "max": 4,
            "template": {"cpu": "4", "memory": "16Gi", "pods": 58}
        }))
        .unwrap()
    }

    fn timing() -> Timing {
        serde_json::from_value(json!({
            "tick": "100ms", "nodeStartup": "2s", "scaleUpDelay": "2s", "scaleDownDelay": "2s",
            "podStartup": "2s", "podShutdown": "1s"
        }))
        .unwrap()
    }

    fn node(name: &str, cordoned: bool) -> Arc<Node> {
        let mut n = template(&spec());
        n.name = name.into();
        let mut v = n.to_json();
        v["spec"]["unschedulable"] = json!(cordoned);
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn pod(name: &str, node: Option<&str>, unschedulable: bool) -> Arc<Pod> {
        let mut p = json!({
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Pending"}
        });
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
            p["status"]["phase"] = json!("Running");
        }
        if unschedulable {
            p["status"]["conditions"] =
                json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]);
        }
        Arc::new(serde_json::from_value(p).unwrap())
    }

    fn groups() -> Groups {
        Groups::new(&[spec()], &timing(), vec![template(&spec())], 0)
    }

    #[test]
    fn a_drained_empty_node_goes_after_the_delay_and_is_replaced_after_the_boot() {
        let mut g = groups();
        let t0 = Instant::now();
        let nodes = vec![node("general-0", true), node("general-1", false)];
        let pods = vec![pod("a", Some("general-1"), false)];
        assert_eq!(g.step(&nodes, &pods, t0), Actions::default());
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        assert_eq!(g.step(&nodes, &pods, at(1.9)), Actions::default());
        let gone = g.step(&nodes, &pods, at(2.0));
        assert_eq!(gone.delete, vec!["general-0".to_string()]);
        // At its configured size, the group replaces the node: launched now, there 2 s later.
        let nodes = vec![node("general-1", false)];
        assert!(g.step(&nodes, &pods, at(2.1)).create.is_empty());
        let created = g.step(&nodes, &pods, at(4.2));
        assert_eq!(
            created
                .create
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>(),
            ["general-2"]
        );
        // Not seen by the reflector yet, it still counts: no second launch.
        assert_eq!(g.step(&nodes, &pods, at(6.5)), Actions::default());
    }

    /// A group at its size of two full nodes, and a clock from now (seconds to an instant).
    fn two_full_nodes() -> (Groups, Vec<Arc<Node>>, impl Fn(f64) -> Instant) {
        let t0 = Instant::now();
        let nodes = vec![node("general-0", false), node("general-1", false)];
        (groups(), nodes, move |s| t0 + Duration::from_secs_f64(s))
    }

    /// `n` unschedulable pods of one CPU each.
    fn unschedulable(n: usize) -> Vec<Arc<Pod>> {
        (0..n).map(|i| pod(&format!("p{i}"), None, true)).collect()
    }

    #[test]
    fn pods_unschedulable_for_the_delay_get_as_many_nodes_as_they_need_up_to_max() {
        let (mut g, nodes, at) = two_full_nodes();
        // 5 pods of one CPU: a fresh 4-CPU node holds 4, so 2 nodes.
        let pods = unschedulable(5);
        assert_eq!(g.step(&nodes, &pods, at(0.0)), Actions::default());
        assert_eq!(g.step(&nodes, &pods, at(1.0)), Actions::default());
        // Launched at 2 s, when the delay is up; created once booted, at 4 s.
        assert_eq!(g.step(&nodes, &pods, at(2.0)), Actions::default());
        let created = g.step(&nodes, &pods, at(4.0));
        assert_eq!(created.create.len(), 2);
        // At max (4), no further scale-up however long they wait.
        let nodes: Vec<_> = ["general-0", "general-1", "general-2", "general-3"]
            .into_iter()
            .map(|n| node(n, false))
            .collect();
        assert!(g.step(&nodes, &pods, at(10.0)).create.is_empty());
    }

    #[test]
    fn one_scale_up_is_sized_for_every_pod_unschedulable_when_the_first_is_due() {
        let (mut g, nodes, at) = two_full_nodes();
        // One pod of one CPU, then four more 0.3 s later (a drain's evictions come spread out).
        assert_eq!(
            g.step(&nodes, &unschedulable(1), at(0.0)),
            Actions::default()
        );
        let pods = unschedulable(5);
        assert_eq!(g.step(&nodes, &pods, at(0.3)), Actions::default());
        // The first is due at 2 s: the scale-up counts all five (2 nodes of 4 CPUs), where
        // sized for the first alone it would launch one and wait out scaleUpDelay for the rest.
        assert_eq!(g.step(&nodes, &pods, at(2.0)), Actions::default());
        assert_eq!(g.step(&nodes, &pods, at(4.0)).create.len(), 2);
    }
}
