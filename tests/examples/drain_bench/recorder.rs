//! The benchmark's clock and its record of a run, the same on both backends: three watches
//! (nodes, pods, PodDisruptionBudgets) opened before t=0, so that they cost no counted request,
//! noting when each node was cordoned, emptied and drained (or removed), how many workload pods
//! were Pending, and each budget's allowed disruptions, over time, and when each workload pod was
//! evicted, bound and Ready and each budget counted more healthy pods (the [`Moment`]s a budget's
//! cycle is read from, [`crate::cycle`]). The timeline picture ([`crate::timeline`]) is drawn from
//! it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::WatchEvent;
use rotor_sim::cluster::objects::{pod_ready, unschedulable};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::cycle::{Cycle, Happened, Moment};

/// What the record saw of one node.
#[derive(Clone, Debug, Default)]
pub struct NodeTimes {
    /// First seen closed to new pods (the cordon every drainer starts with; see [`closed`]).
    pub cordoned: Option<Instant>,
    /// Last moment its workload pods went to none (cleared if one comes back).
    pub emptied: Option<Instant>,
    /// First seen `rotor.dev/phase=drained`.
    pub drained: Option<Instant>,
    pub gone: Option<Instant>,
}

impl NodeTimes {
    /// When the node counts as drained: marked drained or gone, whichever came first.
    pub fn done(&self) -> Option<Instant> {
        match (self.drained, self.gone) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[derive(Clone, Debug)]
struct PodSeen {
    node: Option<String>,
    pending: bool,
    /// Pending, and the scheduler found no room for it (`PodScheduled` False, `Unschedulable`).
    unschedulable: bool,
    ready: bool,
    deleting: bool,
}

#[derive(Default)]
struct State {
    nodes: HashMap<String, NodeTimes>,
    /// Workload pods (not DaemonSet, mirror or rotor's placeholders), not finished.
    pods: HashMap<String, PodSeen>,
    on_node: HashMap<String, usize>,
    pending: usize,
    pending_series: Vec<(Instant, usize)>,
    unschedulable: usize,
    unschedulable_series: Vec<(Instant, usize)>,
    budget_series: BTreeMap<String, Vec<(Instant, i64)>>,
    /// Each budget's healthy pods as last seen, by `namespace/name`.
    healthy: HashMap<String, i32>,
    /// What the watches saw happen to pods and budgets, with the budget's or pod's name.
    moments: Vec<(Instant, Happened, String)>,
    ended: Option<String>,
}

/// The three watches, read on the benchmark's runtime until dropped.
pub struct Recorder {
    state: Arc<Mutex<State>>,
    readers: Vec<JoinHandle<()>>,
}

/// A copy of what was recorded, for the report and the picture.
pub struct Record {
    pub nodes: HashMap<String, NodeTimes>,
    pub pending: Vec<(Instant, usize)>,
    /// Of those, the ones the scheduler had found no room for.
    pub unschedulable: Vec<(Instant, usize)>,
    pub budgets: BTreeMap<String, Vec<(Instant, i64)>>,
    moments: Vec<(Instant, Happened, String)>,
}

impl Record {
    /// The cycles of budget `budget` as the watches saw them: its pods' evictions (deletion
    /// begun), bindings and Ready, and its count of healthy pods rising.
    pub fn budget_cycles(&self, budget: &str) -> Vec<Cycle> {
        let Some(base) = self.moments.iter().map(|(at, ..)| *at).min() else {
            return Vec::new();
        };
        let moments: Vec<Moment> = self
            .moments
            .iter()
            .map(|(at, what, name)| {
                let secs = at.duration_since(base).as_secs_f64();
                Moment {
                    sent: secs,
                    at: secs,
                    what: *what,
                    name: name.clone(),
                }
            })
            .collect();
        crate::cycle::cycles_of(budget, &moments)
    }
}

impl Recorder {
    /// Seeds the record with the cluster as `listed` just before (pods on their nodes, each
    /// budget's allowed disruptions), then opens the watches from the lists' resourceVersions and
    /// returns once the server has answered each, so the watches are counted before any later
    /// request.
    pub fn start(
        client: &kube::Client,
        runtime: &Handle,
        listed: &Listed,
    ) -> anyhow::Result<Recorder> {
        let at = Instant::now();
        let mut s = State::default();
        for p in &listed.pods {
            apply_pod(&mut s, p, false, None);
        }
        for b in &listed.budgets {
            apply_budget(&mut s, b, at, false);
        }
        s.pending_series.push((at, s.pending));
        s.unschedulable_series.push((at, s.unschedulable));
        let state = Arc::new(Mutex::new(s));
        let readers = vec![
            watch::<Node>(
                client,
                runtime,
                "/api/v1/nodes?",
                &listed.versions.0,
                &state,
                on_node,
            )?,
            watch::<Pod>(
                client,
                runtime,
                "/api/v1/pods?",
                &listed.versions.1,
                &state,
                on_pod,
            )?,
            watch::<PodDisruptionBudget>(
                client,
                runtime,
                "/apis/policy/v1/poddisruptionbudgets?",
                &listed.versions.2,
                &state,
                on_budget,
            )?,
        ];
        Ok(Recorder { state, readers })
    }

    /// Only the node `name` (a field selector), from `resource_version`: when it is cordoned
    /// and drained, and nothing of pods or budgets. The memory runs use it, where watching
    /// every pod of 20,000 nodes would weigh on the simulator more than the drainer does.
    pub fn one_node(
        client: &kube::Client,
        runtime: &Handle,
        name: &str,
        resource_version: &str,
    ) -> anyhow::Result<Recorder> {
        let state = Arc::new(Mutex::new(State::default()));
        let reader = watch::<Node>(
            client,
            runtime,
            &format!("/api/v1/nodes?fieldSelector=metadata.name%3D{name}&"),
            resource_version,
            &state,
            on_node,
        )?;
        Ok(Recorder {
            state,
            readers: vec![reader],
        })
    }

    pub fn ended(&self) -> Option<String> {
        self.state.lock().expect("record").ended.clone()
    }

    pub fn done_at(&self, node: &str) -> Option<Instant> {
        self.state
            .lock()
            .expect("record")
            .nodes
            .get(node)
            .and_then(NodeTimes::done)
    }

    /// Nodes drained or gone, or (for kubectl) whose `kubectl drain` succeeded.
    pub fn done_count(&self, nodes: &[String], also: Option<&HashMap<String, Instant>>) -> usize {
        let s = self.state.lock().expect("record");
        nodes
            .iter()
            .filter(|n| {
                s.nodes.get(*n).and_then(NodeTimes::done).is_some()
                    || also.is_some_and(|a| a.contains_key(*n))
            })
            .count()
    }

    pub fn record(&self) -> Record {
        let s = self.state.lock().expect("record");
        Record {
            nodes: s.nodes.clone(),
            pending: s.pending_series.clone(),
            unschedulable: s.unschedulable_series.clone(),
            budgets: s.budget_series.clone(),
            moments: s.moments.clone(),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for r in &self.readers {
            r.abort();
        }
    }
}

/// The cluster as listed before t=0, and each list's resourceVersion (nodes, pods, budgets).
pub struct Listed {
    pub pods: Vec<Pod>,
    pub budgets: Vec<PodDisruptionBudget>,
    pub versions: (String, String, String),
}

fn watch<K>(
    client: &kube::Client,
    runtime: &Handle,
    query: &str,
    resource_version: &str,
    state: &Arc<Mutex<State>>,
    apply: fn(&mut State, WatchEvent<K>, Instant),
) -> anyhow::Result<JoinHandle<()>>
where
    K: DeserializeOwned + Clone + Send + 'static,
{
    // No timeoutSeconds (kube's `Api::watch` always sends one): the simulator keeps a watch for
    // 30 minutes, kube-apiserver for 30 to 60, longer than any run. `query` ends in `?` or `&`.
    let request = http::Request::get(format!(
        "{query}watch=true&resourceVersion={resource_version}"
    ))
    .body(Vec::new())
    .context("a watch request")?;
    let events = runtime
        .block_on(client.request_events::<K>(request))
        .with_context(|| format!("the benchmark's watch {query}"))?;
    let st = state.clone();
    let what = query.trim_end_matches(['?', '&']).to_string();
    Ok(runtime.spawn(async move {
        let mut events = std::pin::pin!(events);
        let why = loop {
            match events.try_next().await {
                Ok(Some(event)) => apply(&mut st.lock().expect("record"), event, Instant::now()),
                Ok(None) => break format!("the watch on {what} closed"),
                Err(e) => break format!("the watch on {what}: {e}"),
            }
        };
        st.lock().expect("record").ended.get_or_insert(why);
    }))
}

fn on_node(s: &mut State, event: WatchEvent<Node>, now: Instant) {
    let (node, deleted) = match event {
        WatchEvent::Added(n) | WatchEvent::Modified(n) => (n, false),
        WatchEvent::Deleted(n) => (n, true),
        WatchEvent::Bookmark(_) => return,
        WatchEvent::Error(e) => {
            s.ended
                .get_or_insert_with(|| format!("node watch error: {e}"));
            return;
        }
    };
    let Some(name) = node.metadata.name.clone() else {
        return;
    };
    let seen = s.nodes.entry(name).or_default();
    if deleted {
        seen.gone.get_or_insert(now);
        return;
    }
    if closed(&node) {
        seen.cordoned.get_or_insert(now);
    }
    let phase = node.metadata.annotations.as_ref();
    if phase
        .and_then(|a| a.get("rotor.dev/phase"))
        .is_some_and(|p| p == "drained")
    {
        seen.drained.get_or_insert(now);
    }
}

/// The taint Karpenter closes a node with, where other drainers cordon it.
const KARPENTER_DISRUPTED: &str = "karpenter.sh/disrupted";

/// Whether a drain has closed the node to new pods: cordoned, or (Karpenter) tainted
/// [`KARPENTER_DISRUPTED`].
fn closed(node: &Node) -> bool {
    let spec = node.spec.as_ref();
    spec.and_then(|s| s.unschedulable) == Some(true)
        || spec
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == KARPENTER_DISRUPTED))
}

fn on_pod(s: &mut State, event: WatchEvent<Pod>, now: Instant) {
    match event {
        WatchEvent::Added(p) | WatchEvent::Modified(p) => apply_pod(s, &p, false, Some(now)),
        WatchEvent::Deleted(p) => apply_pod(s, &p, true, Some(now)),
        WatchEvent::Bookmark(_) => return,
        WatchEvent::Error(e) => {
            s.ended
                .get_or_insert_with(|| format!("pod watch error: {e}"));
            return;
        }
    }
    for (node, count) in &s.on_node {
        let times = s.nodes.entry(node.clone()).or_default();
        if *count == 0 {
            times.emptied.get_or_insert(now);
        } else {
            times.emptied = None;
        }
    }
    s.on_node.retain(|_, c| *c > 0);
    note_count(&mut s.pending_series, s.pending, now);
    note_count(&mut s.unschedulable_series, s.unschedulable, now);
}

/// Appends `count` to `series` at `now` if it changed.
fn note_count(series: &mut Vec<(Instant, usize)>, count: usize, now: Instant) {
    if series.last().map(|(_, n)| *n) != Some(count) {
        series.push((now, count));
    }
}

/// Whether the benchmark follows this pod: a workload's, not a DaemonSet's or mirror pod (a
/// drain leaves those) nor one of rotor's surge placeholders.
fn is_workload(p: &Pod) -> bool {
    let daemon = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "DaemonSet");
    let mirror = p
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let placeholder = p
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key("rotor.dev/surge-for"));
    !daemon && !mirror && !placeholder
}

/// Notes a pod as listed or (with `seen`, when its watch event came) as changed.
fn apply_pod(s: &mut State, p: &Pod, deleted: bool, seen: Option<Instant>) {
    if !is_workload(p) {
        return;
    }
    let name = p.metadata.name.as_deref().unwrap_or_default();
    let key = format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        name
    );
    let finished = p
        .status
        .as_ref()
        .and_then(|st| st.phase.as_deref())
        .is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
    let before = s.pods.remove(&key);
    if let Some(b) = &before {
        if let Some(n) = &b.node {
            *s.on_node.entry(n.clone()).or_default() -= 1;
        }
        if b.pending {
            s.pending -= 1;
        }
        if b.unschedulable {
            s.unschedulable -= 1;
        }
    }
    let node = p
        .spec
        .as_ref()
        .and_then(|sp| sp.node_name.clone())
        .filter(|n| !n.is_empty());
    let now = PodSeen {
        pending: node.is_none(),
        unschedulable: node.is_none() && unschedulable(p),
        node,
        ready: pod_ready(p),
        deleting: deleted || p.metadata.deletion_timestamp.is_some(),
    };
    if let Some(at) = seen {
        let mut note = |what| s.moments.push((at, what, name.to_string()));
        let was = before.as_ref();
        if now.deleting && was.is_some_and(|b| !b.deleting) {
            note(Happened::Evicted);
        }
        // Seen bound, either after Pending or on its first appearance.
        if now.node.is_some() && was.is_none_or(|b| b.pending) {
            note(Happened::Bound);
        }
        if now.ready && was.is_none_or(|b| !b.ready) {
            note(Happened::Ready);
        }
    }
    if deleted || finished {
        // Touch the node so that its emptying is noted.
        if let Some(n) = before.and_then(|b| b.node) {
            s.on_node.entry(n).or_default();
        }
        return;
    }
    if let Some(n) = &now.node {
        *s.on_node.entry(n.clone()).or_default() += 1;
    }
    if now.pending {
        s.pending += 1;
    }
    if now.unschedulable {
        s.unschedulable += 1;
    }
    s.pods.insert(key, now);
}

fn on_budget(s: &mut State, event: WatchEvent<PodDisruptionBudget>, now: Instant) {
    match event {
        WatchEvent::Added(b) | WatchEvent::Modified(b) => apply_budget(s, &b, now, true),
        WatchEvent::Error(e) => {
            s.ended
                .get_or_insert_with(|| format!("budget watch error: {e}"));
        }
        WatchEvent::Deleted(_) | WatchEvent::Bookmark(_) => {}
    }
}

/// Notes a budget as listed or (`watched`) as changed at `now`.
fn apply_budget(s: &mut State, b: &PodDisruptionBudget, now: Instant, watched: bool) {
    // A budget over no pods (the shipped drainer's, scaled to zero here) says nothing.
    if b.status.as_ref().is_some_and(|st| st.expected_pods == 0) {
        return;
    }
    let name = b.metadata.name.as_deref().unwrap_or_default();
    let key = format!(
        "{}/{}",
        b.metadata.namespace.as_deref().unwrap_or_default(),
        name
    );
    let allowed = b
        .status
        .as_ref()
        .map_or(0, |st| i64::from(st.disruptions_allowed));
    let healthy = b.status.as_ref().map_or(0, |st| st.current_healthy);
    let before = s.healthy.insert(key.clone(), healthy);
    let series = s.budget_series.entry(key).or_default();
    if series.last().map(|(_, a)| *a) != Some(allowed) {
        series.push((now, allowed));
    }
    if watched && before.is_some_and(|h| healthy > h) {
        s.moments.push((now, Happened::Counted, name.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use rotor_sim::cluster::objects::{set_pod_condition, set_pod_condition_with_reason};

    use super::*;

    fn pod(name: &str, node: Option<&str>, ready: bool, deleting: bool) -> Pod {
        let mut p = Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("shop".into()),
                deletion_timestamp: deleting.then_some(Time(jiff::Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                ..Default::default()
            }),
            status: None,
        };
        set_pod_condition(&mut p, "Ready", ready, jiff::Timestamp::UNIX_EPOCH);
        p
    }

    fn budget(name: &str, healthy: i32) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("shop".into()),
                ..Default::default()
            },
            status: Some(PodDisruptionBudgetStatus {
                current_healthy: healthy,
                desired_healthy: 1,
                expected_pods: 2,
                disruptions_allowed: healthy - 1,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A pod with no node whose `PodScheduled` condition is False for `reason`.
    fn not_scheduled(name: &str, reason: &str) -> Pod {
        let mut p = pod(name, None, false, false);
        set_pod_condition_with_reason(
            &mut p,
            "PodScheduled",
            false,
            reason,
            format!("not scheduled: {reason}"),
            jiff::Timestamp::UNIX_EPOCH,
        );
        p
    }

    #[test]
    fn a_pod_counts_unschedulable_only_from_the_schedulers_no_room_to_its_binding() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut s = State::default();
        // Created: Pending, not yet tried by the scheduler.
        on_pod(
            &mut s,
            WatchEvent::Added(pod("web-b", None, false, false)),
            at(100),
        );
        let no_room = not_scheduled("web-b", "Unschedulable");
        on_pod(&mut s, WatchEvent::Modified(no_room.clone()), at(300));
        // Bound. The condition may still say False (rotor-sim sets it True later); a node ends
        // both counts whatever it says.
        let mut bound = no_room.clone();
        bound.spec.as_mut().unwrap().node_name = Some("n3".into());
        on_pod(&mut s, WatchEvent::Modified(bound), at(1300));
        // Another pod, unschedulable, then deleted before it was ever placed.
        let mut gone = no_room;
        gone.metadata.name = Some("web-c".into());
        on_pod(&mut s, WatchEvent::Added(gone.clone()), at(1500));
        on_pod(&mut s, WatchEvent::Deleted(gone), at(1700));
        // A pod held by a scheduling gate waits for no room: Pending, not unschedulable.
        let gated = not_scheduled("web-d", "SchedulingGated");
        on_pod(&mut s, WatchEvent::Added(gated), at(2000));
        assert_eq!(
            s.pending_series,
            vec![
                (at(100), 1),
                (at(1300), 0),
                (at(1500), 1),
                (at(1700), 0),
                (at(2000), 1)
            ],
            "Pending from its creation"
        );
        assert_eq!(
            s.unschedulable_series,
            vec![
                (at(100), 0),
                (at(300), 1),
                (at(1300), 0),
                (at(1500), 1),
                (at(1700), 0)
            ],
            "unschedulable from the scheduler's answer to the binding or the deletion"
        );
    }

    #[test]
    fn the_watches_give_each_evictions_bind_ready_count_and_next_eviction() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut s = State::default();
        // Listed before the run: two Ready pods under a budget of one disruption.
        apply_pod(&mut s, &pod("web-a", Some("n1"), true, false), false, None);
        apply_pod(&mut s, &pod("web-c", Some("n2"), true, false), false, None);
        apply_budget(&mut s, &budget("web", 2), t0, false);
        on_pod(
            &mut s,
            WatchEvent::Modified(pod("web-a", Some("n1"), false, true)),
            at(0),
        );
        on_budget(&mut s, WatchEvent::Modified(budget("web", 1)), at(50));
        on_pod(
            &mut s,
            WatchEvent::Added(pod("web-b", None, false, false)),
            at(100),
        );
        on_pod(
            &mut s,
            WatchEvent::Modified(pod("web-b", Some("n3"), false, false)),
            at(300),
        );
        on_pod(
            &mut s,
            WatchEvent::Deleted(pod("web-a", Some("n1"), false, true)),
            at(1000),
        );
        on_pod(
            &mut s,
            WatchEvent::Modified(pod("web-b", Some("n3"), true, false)),
            at(2300),
        );
        // Another budget's count is not this one's.
        on_budget(&mut s, WatchEvent::Modified(budget("db", 2)), at(2400));
        on_budget(&mut s, WatchEvent::Modified(budget("web", 2)), at(2500));
        on_pod(
            &mut s,
            WatchEvent::Modified(pod("web-c", Some("n2"), false, true)),
            at(2800),
        );

        let record = Record {
            nodes: HashMap::new(),
            pending: Vec::new(),
            unschedulable: Vec::new(),
            budgets: BTreeMap::new(),
            moments: s.moments.clone(),
        };
        let cycles = record.budget_cycles("web");
        // The second eviction's replacement never came: one cycle, whose `next` is that eviction.
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        let first = &cycles[0];
        assert!(close(first.bound, 0.3), "{first:?}");
        assert!(close(first.ready.unwrap(), 2.3), "{first:?}");
        assert!(close(first.counted.unwrap(), 0.2), "{first:?}");
        assert!(close(first.next.unwrap(), 0.3), "{first:?}");
        assert_eq!(
            s.moments
                .iter()
                .filter(|m| m.1 == Happened::Evicted)
                .count(),
            2
        );
        assert_eq!(
            s.moments
                .iter()
                .filter(|m| m.1 == Happened::Counted)
                .count(),
            1
        );
    }
}
