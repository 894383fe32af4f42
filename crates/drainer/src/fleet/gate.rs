//! The gate before the next node starts draining: the cluster must have absorbed the previous
//! one. [`pending_pod_blockers`] names pods the scheduler has failed to place for longer than the
//! grace period; [`workload_blockers`] names workloads evicted from the previous node that are
//! not Ready again. The gate is open when both are empty.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use rotor_apimachinery::conditions::{pod_conditions, pod_unschedulable};

use crate::drain::budgets::key_of;
use crate::drain::published::WorkloadRef;
use crate::fleet::workloads::{WorkloadCounts, WorkloadIndex, WorkloadKey, WorkloadKind};

/// What the gate checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GateConfig {
    /// How long a pod may stay unschedulable before it holds the gate.
    pub pending_grace: Duration,
    /// Namespaces whose pending pods are not looked at.
    pub ignored_namespaces: Vec<String>,
}

/// One reason the next drain may not start yet. `Display` is one line for the info log.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GateBlocker {
    /// A pod the scheduler cannot place.
    PendingPod {
        /// `namespace/name`.
        pod: String,
        /// Seconds since it became unschedulable (or was created).
        for_secs: u64,
        /// The scheduler's message, e.g. `0/5 nodes are available: ...`.
        reason: Option<String>,
    },
    /// A workload evicted from the previous node that is not Ready again.
    WorkloadNotReady {
        /// `Kind namespace/name`.
        workload: String,
        ready: i32,
        wanted: i32,
        /// Its pods evicted by drains still running, which may be missing meanwhile.
        in_flight: i32,
    },
}

impl GateBlocker {
    /// What holds the gate, without how much: the workload or the pod.
    pub fn subject(&self) -> String {
        match self {
            GateBlocker::PendingPod { pod, .. } => format!("pod {pod}"),
            GateBlocker::WorkloadNotReady { workload, .. } => workload.clone(),
        }
    }

    /// Short slug for metric labels.
    pub const fn slug(&self) -> &'static str {
        match self {
            GateBlocker::PendingPod { .. } => "pending-pod",
            GateBlocker::WorkloadNotReady { .. } => "workload-not-ready",
        }
    }
}

impl fmt::Display for GateBlocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateBlocker::PendingPod {
                pod,
                for_secs,
                reason,
            } => {
                write!(f, "pod {pod} has been unschedulable for {for_secs}s")?;
                if let Some(reason) = reason {
                    // Scheduler messages can span lines; keep the log line whole.
                    let reason = reason.split_whitespace().collect::<Vec<_>>().join(" ");
                    write!(f, ": {reason}")?;
                }
                Ok(())
            }
            GateBlocker::WorkloadNotReady {
                workload,
                ready,
                wanted,
                in_flight,
            } => {
                write!(f, "{workload} has {ready}/{wanted} replicas ready")?;
                if *in_flight > 0 {
                    write!(f, " ({in_flight} evicted by drains still running)")?;
                }
                Ok(())
            }
        }
    }
}

/// Pods that hold the gate because the scheduler cannot place them: phase `Pending`, no
/// `spec.nodeName`, not terminating, condition `PodScheduled` `False` with reason
/// `Unschedulable` (pods held by scheduling gates or not yet looked at do not count), for at
/// least `pending_grace` — counted from the condition's `lastTransitionTime`, else the pod's
/// creation; a pod with neither is not counted. Pods of `ignored_namespaces` are skipped. Sorted
/// by `namespace/name`.
pub fn pending_pod_blockers(pods: &[Pod], cfg: &GateConfig, now: Timestamp) -> Vec<GateBlocker> {
    PendingTally::of(pods, cfg, now).into_blockers()
}

/// Until when a read of pending pods made at `listed_at`, in which none held the gate, still
/// says so. A pod holds the gate `pending_grace` after the time [`pending_pod_blockers`] counts
/// from: its `PodScheduled` condition's transition, which a condition that only changes its
/// reason keeps, so no later than any such transition it already shows; its creation when a
/// condition has no time, or may come without one. A pod not pending at the read starts
/// counting after it. So the earliest of those times over the pods read, or the read itself,
/// plus the grace: before then a new read would find no blocker either, and the gate need not
/// send it.
pub fn pending_read_holds_until(pods: &[Pod], cfg: &GateConfig, listed_at: Timestamp) -> Timestamp {
    PendingTally::of(pods, cfg, listed_at).holds_until()
}

/// A read of pending pods taken one pod at a time, as the API server streams them, keeping only
/// what [`pending_pod_blockers`] and [`pending_read_holds_until`] answer from them: a read can
/// meet tens of thousands of pods (a cluster whose scheduler is behind), and they are not kept.
pub struct PendingTally<'a> {
    cfg: &'a GateConfig,
    listed_at: Timestamp,
    blockers: Vec<GateBlocker>,
    earliest: Timestamp,
}

impl<'a> PendingTally<'a> {
    /// A read made at `listed_at`, which has seen no pod yet.
    pub fn new(cfg: &'a GateConfig, listed_at: Timestamp) -> PendingTally<'a> {
        PendingTally {
            cfg,
            listed_at,
            blockers: Vec::new(),
            earliest: listed_at,
        }
    }

    fn of(pods: &[Pod], cfg: &'a GateConfig, listed_at: Timestamp) -> PendingTally<'a> {
        let mut tally = PendingTally::new(cfg, listed_at);
        pods.iter().for_each(|pod| tally.add(pod));
        tally
    }

    /// The read's next pod.
    pub fn add(&mut self, pod: &Pod) {
        if !may_hold_gate(pod, self.cfg) {
            return;
        }
        if let Some(blocker) = self.blocker(pod) {
            self.blockers.push(blocker);
        }
        if let Some(since) = counts_from_at_most(pod) {
            self.earliest = self.earliest.min(since);
        }
    }

    /// The pods seen that hold the gate, sorted by `namespace/name`.
    pub fn into_blockers(mut self) -> Vec<GateBlocker> {
        self.blockers.sort();
        self.blockers
    }

    /// [`pending_read_holds_until`] of the pods seen.
    pub fn holds_until(&self) -> Timestamp {
        rotor_core::duration::later(self.earliest, self.cfg.pending_grace)
    }

    fn blocker(&self, pod: &Pod) -> Option<GateBlocker> {
        let condition = pod_unschedulable(pod)?;
        let since = condition
            .last_transition_time
            .as_ref()
            .or(pod.metadata.creation_timestamp.as_ref())?
            .0;
        let for_secs = u64::try_from(self.listed_at.as_second() - since.as_second()).unwrap_or(0);
        (for_secs >= self.cfg.pending_grace.as_secs()).then(|| GateBlocker::PendingPod {
            pod: key_of(&pod.metadata),
            for_secs,
            reason: condition.message.clone().filter(|m| !m.is_empty()),
        })
    }
}

/// The earliest time a pending pod's grace may count from ([`pending_read_holds_until`]): its
/// `PodScheduled` transitions, and its creation when a condition has no time or none is there.
fn counts_from_at_most(pod: &Pod) -> Option<Timestamp> {
    let scheduled: Vec<Option<Timestamp>> = pod_conditions(pod)
        .filter(|c| c.type_ == "PodScheduled")
        .map(|c| c.last_transition_time.as_ref().map(|t| t.0))
        .collect();
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let untimed = scheduled.is_empty() || scheduled.iter().any(Option::is_none);
    scheduled
        .into_iter()
        .flatten()
        .chain(created.filter(|_| untimed))
        .min()
}

/// Whether a pod is one the gate weighs: pending and not bound to a node, not terminating,
/// not one of rotor's surge placeholders (they wait for capacity on purpose; they are not
/// workloads), outside the ignored namespaces.
fn may_hold_gate(pod: &Pod, cfg: &GateConfig) -> bool {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    !cfg.ignored_namespaces.iter().any(|ns| ns == namespace)
        && pod.metadata.deletion_timestamp.is_none()
        && !crate::drain::pods::is_placeholder(pod)
        && !crate::drain::pods::is_bound(pod)
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
}

/// Workloads evicted from the previous node that are not Ready again: each
/// `(kind, namespace, name)` owner of an evicted pod must have `status.readyReplicas >=
/// spec.replicas` (replicas default to 1), less the pods of it that drains still running have
/// evicted (`in_flight`): with several drains at once those are the running drains' share of the
/// disruption, which their own gates settle when they finish. So no workload is ever missing more
/// pods than the running drains took from it, and with nothing running (always, at
/// `--max-concurrent 1`) a workload must be fully Ready. A ReplicaSet owned by a Deployment is
/// judged by that Deployment (its own count changes during a rollout), with the in-flight pods of
/// all its ReplicaSets. The allowance is a count, not the pods themselves: a running drain's
/// replacement that is Ready already lends its place to a finished drain's pod that is not (and a
/// pod replaced and then evicted again by a second drain counts twice). That is why workloads
/// short within the allowance stay in `evicted_owners`, to be judged again at the next start and
/// once those drains end, when the allowance shrinks. Owners not in the index (deleted since) and
/// other kinds (Jobs, DaemonSets, bare pods) do not hold the gate; those and the workloads Ready
/// again leave `evicted_owners`, so they are not looked up again. Each workload is reported once,
/// sorted.
pub fn workload_blockers(
    evicted_owners: &mut BTreeSet<WorkloadRef>,
    index: &WorkloadIndex,
    in_flight: &BTreeMap<WorkloadRef, i32>,
) -> Vec<GateBlocker> {
    let mut allowance: BTreeMap<(WorkloadKind, &str, &str), i32> = BTreeMap::new();
    for (owner, n) in in_flight {
        if let Some((kind, name, _)) = judged(owner, index) {
            *allowance
                .entry((kind, owner.namespace.as_str(), name))
                .or_default() += n;
        }
    }
    let mut seen: BTreeSet<GateBlocker> = BTreeSet::new();
    evicted_owners.retain(|owner| {
        let Some((kind, name, counts)) = judged(owner, index) else {
            return false;
        };
        let namespace = owner.namespace.as_str();
        let in_flight = allowance
            .get(&(kind, namespace, name))
            .copied()
            .unwrap_or(0);
        if counts.ready >= counts.wanted {
            return false;
        }
        if counts.ready >= counts.wanted - in_flight {
            // Short, but within what the running drains took: judged again later.
            return true;
        }
        seen.insert(GateBlocker::WorkloadNotReady {
            workload: format!("{} {namespace}/{name}", kind.as_str()),
            ready: counts.ready,
            wanted: counts.wanted,
            in_flight,
        });
        true
    });
    seen.into_iter().collect()
}

/// The workload the gate judges for an evicted pod's owner, with its counts: the owner itself,
/// or the Deployment that controls a ReplicaSet. `None` for kinds the gate does not follow and
/// owners not in the index.
fn judged<'a>(
    WorkloadRef {
        kind,
        namespace,
        name,
    }: &'a WorkloadRef,
    index: &'a WorkloadIndex,
) -> Option<(WorkloadKind, &'a str, &'a WorkloadCounts)> {
    let kind = WorkloadKind::parse(kind)?;
    let own = index.get(kind, namespace, name)?;
    let parent = own.parent.as_deref().and_then(|deployment| {
        index
            .get(WorkloadKind::Deployment, namespace, deployment)
            .map(|counts| (WorkloadKind::Deployment, deployment, counts))
    });
    Some(parent.unwrap_or((kind, name.as_str(), own)))
}

/// Whether a change to the workloads `changed` can change the verdict on `owners`: one of them
/// changed, or the Deployment that owns one of them (a ReplicaSet).
pub fn concerns(
    owners: &BTreeSet<WorkloadRef>,
    changed: &[WorkloadKey],
    index: &WorkloadIndex,
) -> bool {
    changed.iter().any(|(kind, namespace, name)| {
        owners.iter().any(|owner| {
            let (owner_kind, owner_ns, owner_name) = (&owner.kind, &owner.namespace, &owner.name);
            if owner_ns != namespace {
                return false;
            }
            if owner_kind == kind.as_str() && owner_name == name {
                return true;
            }
            *kind == WorkloadKind::Deployment
                && owner_kind == "ReplicaSet"
                && index
                    .get(WorkloadKind::ReplicaSet, owner_ns, owner_name)
                    .and_then(|rs| rs.parent.as_deref())
                    == Some(name.as_str())
        })
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
    use serde_json::{Value, json};

    use super::*;
    use crate::drain::published::owner_of;
    use crate::fleet::workloads::{WorkloadUpdate, of_deployment, of_replicaset, of_statefulset};

    /// The index the watches would build from these objects.
    fn index(
        deployments: &[Deployment],
        statefulsets: &[StatefulSet],
        replicasets: &[ReplicaSet],
    ) -> WorkloadIndex {
        let mut index = WorkloadIndex::default();
        let entries = deployments
            .iter()
            .map(of_deployment)
            .chain(statefulsets.iter().map(of_statefulset))
            .chain(replicasets.iter().map(of_replicaset));
        for (k, c) in entries {
            index.apply(WorkloadUpdate::Apply(k, c));
        }
        index
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn now() -> Timestamp {
        ts("2025-03-01T12:10:00Z")
    }

    fn cfg(grace_secs: u64) -> GateConfig {
        GateConfig {
            pending_grace: Duration::from_secs(grace_secs),
            ignored_namespaces: vec!["batch".into()],
        }
    }

    /// An unschedulable pod created at 12:00, unschedulable since 12:01.
    fn pending(namespace: &str, name: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "creationTimestamp": "2025-03-01T12:00:00Z"},
            "spec": {"containers": [{"name": "app", "image": "web:1"}]},
            "status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "lastTransitionTime": "2025-03-01T12:01:00Z",
                "message": "0/5 nodes are available: 2 node(s) had untolerated taint {rotor.dev/drain: manual},\n3 Insufficient cpu."
            }]}
        })
    }

    fn pods(values: Vec<Value>) -> Vec<Pod> {
        values
            .into_iter()
            .map(|v| serde_json::from_value(v).unwrap())
            .collect()
    }

    #[test]
    fn a_read_with_no_pod_past_its_grace_stands_until_one_could_pass_it() {
        let listed_at = ts("2025-03-01T12:03:00Z");
        // Nothing pending: a pod that turns unschedulable after the read passes the grace no
        // sooner than the grace after the read.
        assert_eq!(
            pending_read_holds_until(&[], &cfg(300), listed_at),
            ts("2025-03-01T12:08:00Z")
        );
        // Unschedulable since 12:01: it would block at 12:06, and is not blocking at 12:03.
        let read = pods(vec![pending("shop", "web-1")]);
        assert!(pending_pod_blockers(&read, &cfg(300), listed_at).is_empty());
        assert_eq!(
            pending_read_holds_until(&read, &cfg(300), listed_at),
            ts("2025-03-01T12:06:00Z")
        );
        // Just before that time a read would still find nothing; at it, the pod blocks.
        assert!(pending_pod_blockers(&read, &cfg(300), ts("2025-03-01T12:05:59Z")).is_empty());
        assert_eq!(
            pending_pod_blockers(&read, &cfg(300), ts("2025-03-01T12:06:00Z")).len(),
            1
        );
        // Held by scheduling gates since 12:00:30: once released and found unschedulable, the
        // condition keeps its time (only its reason changes), so it counts from 12:00:30.
        let mut gated = pending("shop", "gated");
        gated["status"]["conditions"][0]["reason"] = json!("SchedulingGated");
        gated["status"]["conditions"][0]["lastTransitionTime"] = json!("2025-03-01T12:00:30Z");
        assert_eq!(
            pending_read_holds_until(
                &pods(vec![pending("shop", "web-1"), gated]),
                &cfg(300),
                listed_at
            ),
            ts("2025-03-01T12:05:30Z")
        );
        // Not looked at by the scheduler yet: its condition may come without a time, and then
        // it counts from its creation (12:00).
        let mut fresh = pending("shop", "fresh");
        fresh["status"]["conditions"] = json!([]);
        assert_eq!(
            pending_read_holds_until(&pods(vec![fresh]), &cfg(300), listed_at),
            ts("2025-03-01T12:05:00Z")
        );
        // Pods the gate does not weigh change nothing: an ignored namespace, a bound pod.
        let mut bound = pending("shop", "bound");
        bound["spec"]["nodeName"] = json!("node-1");
        bound["status"]["conditions"] = json!([]);
        assert_eq!(
            pending_read_holds_until(
                &pods(vec![pending("batch", "job-1"), bound]),
                &cfg(300),
                listed_at
            ),
            ts("2025-03-01T12:08:00Z")
        );
    }

    #[test]
    fn unschedulable_pod_past_its_grace_blocks_with_the_scheduler_message() {
        let blockers =
            pending_pod_blockers(&pods(vec![pending("shop", "web-1")]), &cfg(300), now());
        assert_eq!(blockers.len(), 1);
        let GateBlocker::PendingPod {
            pod,
            for_secs,
            reason,
        } = &blockers[0]
        else {
            panic!("{blockers:?}");
        };
        assert_eq!(pod, "shop/web-1");
        assert_eq!(*for_secs, 540);
        assert!(
            reason
                .as_deref()
                .unwrap()
                .starts_with("0/5 nodes are available")
        );
        let line = blockers[0].to_string();
        assert_eq!(
            line,
            "pod shop/web-1 has been unschedulable for 540s: 0/5 nodes are available: 2 node(s) had untolerated taint {rotor.dev/drain: manual}, 3 Insufficient cpu."
        );
    }

    #[test]
    fn grace_counts_from_the_condition_then_creation() {
        let p = pods(vec![pending("shop", "web-1")]);
        // Unschedulable for 540 s (created 600 s ago).
        assert_eq!(pending_pod_blockers(&p, &cfg(540), now()).len(), 1);
        assert!(pending_pod_blockers(&p, &cfg(541), now()).is_empty());
        let mut v = pending("shop", "web-1");
        v["status"]["conditions"][0]["lastTransitionTime"] = Value::Null;
        let p = pods(vec![v]);
        assert_eq!(pending_pod_blockers(&p, &cfg(600), now()).len(), 1);
        assert!(pending_pod_blockers(&p, &cfg(601), now()).is_empty());
    }

    #[test]
    fn only_unschedulable_unbound_live_pods_count() {
        let mut bound = pending("shop", "bound");
        bound["spec"]["nodeName"] = json!("node-2");
        let mut deleting = pending("shop", "deleting");
        deleting["metadata"]["deletionTimestamp"] = json!("2025-03-01T12:05:00Z");
        let mut gated = pending("shop", "gated");
        gated["status"]["conditions"][0]["reason"] = json!("SchedulingGated");
        let mut running = pending("shop", "running");
        running["status"]["phase"] = json!("Running");
        let mut fresh = pending("shop", "fresh");
        fresh["status"]["conditions"] = json!([]);
        let ignored = pending("batch", "job-1");
        let counted = pending("shop", "counted");
        let all = pods(vec![
            bound, deleting, gated, running, fresh, ignored, counted,
        ]);
        let blockers = pending_pod_blockers(&all, &cfg(60), now());
        let names: Vec<_> = blockers
            .iter()
            .map(|b| match b {
                GateBlocker::PendingPod { pod, .. } => pod.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(names, ["shop/counted"]);
    }

    fn deployment(name: &str, replicas: i32, ready: Option<i32>) -> Deployment {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "app", "image": "x"}]}}},
            "status": {"replicas": replicas, "readyReplicas": ready}
        }))
        .unwrap()
    }

    fn replicaset(name: &str, deployment: Option<&str>, replicas: i32, ready: i32) -> ReplicaSet {
        let owners = deployment.map(|d| {
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": d,
                    "uid": "d-uid", "controller": true}])
        });
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": "shop", "ownerReferences": owners},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "x"}}},
            "status": {"replicas": replicas, "readyReplicas": ready}
        }))
        .unwrap()
    }

    fn statefulset(name: &str, replicas: i32, ready: i32) -> StatefulSet {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"replicas": replicas, "serviceName": name,
                     "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "db", "image": "x"}]}}},
            "status": {"replicas": replicas, "readyReplicas": ready}
        }))
        .unwrap()
    }

    fn owner(kind: &str, name: &str) -> WorkloadRef {
        WorkloadRef {
            kind: kind.into(),
            namespace: "shop".into(),
            name: name.into(),
        }
    }

    fn none() -> BTreeMap<WorkloadRef, i32> {
        BTreeMap::new()
    }

    #[test]
    fn pods_evicted_by_running_drains_may_be_missing_and_no_more() {
        // web: 10 wanted. The finished drain evicted web pods; two drains still running have
        // evicted 2 (one through each of its ReplicaSets, mid-rollout) and 1 more.
        let replicasets = [
            replicaset("web-old", Some("web"), 4, 4),
            replicaset("web-new", Some("web"), 6, 5),
        ];
        let in_flight = BTreeMap::from([
            (owner("ReplicaSet", "web-old"), 2),
            (owner("ReplicaSet", "web-new"), 1),
            (owner("StatefulSet", "db"), 1),
        ]);
        let judge = |ready: i32| {
            let deployments = [deployment("web", 10, Some(ready))];
            let statefulsets = [statefulset("db", 3, 3)];
            let mut owners = BTreeSet::from([owner("ReplicaSet", "web-new")]);
            workload_blockers(
                &mut owners,
                &index(&deployments, &statefulsets, &replicasets),
                &in_flight,
            )
        };
        // 3 missing, all the running drains' share: the finished drain's pods are back, as far
        // as a count can tell. The workload is still short, so it stays to be judged again.
        let deployments = [deployment("web", 10, Some(7))];
        let mut owners = BTreeSet::from([owner("ReplicaSet", "web-new")]);
        let statefulsets = [statefulset("db", 3, 3)];
        let index_7 = index(&deployments, &statefulsets, &replicasets);
        assert!(workload_blockers(&mut owners, &index_7, &in_flight).is_empty());
        assert_eq!(
            owners.len(),
            1,
            "a workload short within the allowance stays"
        );
        // 4 missing, one more than the running drains took: the finished drain's pod is not.
        let blockers = judge(6);
        assert_eq!(
            blockers,
            [GateBlocker::WorkloadNotReady {
                workload: "Deployment shop/web".into(),
                ready: 6,
                wanted: 10,
                in_flight: 3,
            }]
        );
        assert_eq!(
            blockers[0].to_string(),
            "Deployment shop/web has 6/10 replicas ready (3 evicted by drains still running)"
        );
        // Without running drains, the workload must be whole again.
        let deployments = [deployment("web", 10, Some(9))];
        let mut owners = BTreeSet::from([owner("ReplicaSet", "web-new")]);
        let blockers = workload_blockers(
            &mut owners,
            &index(&deployments, &[], &replicasets),
            &none(),
        );
        assert_eq!(blockers.len(), 1);
        // In-flight pods of another workload lend nothing.
        let other = BTreeMap::from([(owner("StatefulSet", "db"), 5)]);
        let statefulsets = [statefulset("db", 3, 3)];
        let blockers = workload_blockers(
            &mut owners,
            &index(&deployments, &statefulsets, &replicasets),
            &other,
        );
        assert_eq!(blockers.len(), 1);
    }

    #[test]
    fn replicaset_owner_counts_via_its_deployment() {
        let deployments = [deployment("web", 3, Some(2))];
        // The new ReplicaSet alone looks fine; the Deployment is what must be whole again.
        let replicasets = [replicaset("web-7d9f", Some("web"), 1, 1)];
        let mut owners = BTreeSet::from([
            owner("ReplicaSet", "web-7d9f"),
            owner("ReplicaSet", "web-7d9f"),
        ]);
        let blockers = workload_blockers(
            &mut owners,
            &index(&deployments, &[], &replicasets),
            &none(),
        );
        assert_eq!(
            blockers,
            [GateBlocker::WorkloadNotReady {
                workload: "Deployment shop/web".into(),
                ready: 2,
                wanted: 3,
                in_flight: 0
            }]
        );
        assert_eq!(
            blockers[0].to_string(),
            "Deployment shop/web has 2/3 replicas ready"
        );

        assert_eq!(owners.len(), 1, "an owner still holding the gate stays");
        let whole = [deployment("web", 3, Some(3))];
        assert!(
            workload_blockers(&mut owners, &index(&whole, &[], &replicasets), &none()).is_empty()
        );
        assert!(owners.is_empty(), "an owner Ready again leaves");
    }

    #[test]
    fn bare_replicaset_and_statefulset_are_judged_themselves() {
        let replicasets = [replicaset("legacy", None, 2, 1)];
        let statefulsets = [statefulset("db", 3, 3), statefulset("cache", 2, 0)];
        let mut owners = BTreeSet::from([
            owner("ReplicaSet", "legacy"),
            owner("StatefulSet", "db"),
            owner("StatefulSet", "cache"),
            owner("Job", "nightly"),
            owner("StatefulSet", "deleted-since"),
        ]);
        let blockers = workload_blockers(
            &mut owners,
            &index(&[], &statefulsets, &replicasets),
            &none(),
        );
        assert_eq!(
            blockers,
            [
                GateBlocker::WorkloadNotReady {
                    workload: "ReplicaSet shop/legacy".into(),
                    ready: 1,
                    wanted: 2,
                    in_flight: 0
                },
                GateBlocker::WorkloadNotReady {
                    workload: "StatefulSet shop/cache".into(),
                    ready: 0,
                    wanted: 2,
                    in_flight: 0
                },
            ]
        );
    }

    #[test]
    fn missing_ready_count_means_none_ready_and_namespace_matters() {
        let deployments = [deployment("web", 1, None)];
        let blockers = workload_blockers(
            &mut BTreeSet::from([owner("Deployment", "web")]),
            &index(&deployments, &[], &[]),
            &none(),
        );
        assert_eq!(blockers.len(), 1);
        let mut elsewhere = BTreeSet::from([WorkloadRef {
            namespace: "other".into(),
            ..owner("Deployment", "web")
        }]);
        assert!(
            workload_blockers(&mut elsewhere, &index(&deployments, &[], &[]), &none()).is_empty()
        );
    }

    #[test]
    fn a_change_concerns_the_gate_when_it_touches_an_owner_or_its_deployment() {
        let deployments = [deployment("web", 3, Some(2)), deployment("api", 1, Some(1))];
        let replicasets = [replicaset("web-7d9f", Some("web"), 3, 2)];
        let idx = index(&deployments, &[], &replicasets);
        let owners: BTreeSet<_> = [owner("ReplicaSet", "web-7d9f")].into();
        let key = |kind, ns: &str, name: &str| (kind, ns.to_string(), name.to_string());
        for (changed, expected) in [
            (key(WorkloadKind::Deployment, "shop", "web"), true),
            (key(WorkloadKind::ReplicaSet, "shop", "web-7d9f"), true),
            (key(WorkloadKind::Deployment, "shop", "api"), false),
            (key(WorkloadKind::Deployment, "other", "web"), false),
            (key(WorkloadKind::StatefulSet, "shop", "web-7d9f"), false),
        ] {
            assert_eq!(
                concerns(&owners, std::slice::from_ref(&changed), &idx),
                expected,
                "{changed:?}"
            );
        }
        assert!(!concerns(&owners, &[], &idx));
    }

    #[test]
    fn owner_of_reads_the_controller_reference() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-7d9f-abcde", "namespace": "shop", "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"},
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "2",
                 "controller": true}]}
        }))
        .unwrap();
        assert_eq!(owner_of(&pod), Some(owner("ReplicaSet", "web-7d9f")));
        let bare: Pod = serde_json::from_value(json!({"metadata": {"name": "debug"}})).unwrap();
        assert_eq!(owner_of(&bare), None);
    }
}
