//! The simulated cluster's state: every collection, timing, the counters the admin API reports,
//! and what each simulated controller remembers between steps. One `Cluster` sits behind one mutex; API handlers and the control
//! loop take turns on it, so every request and every controller step is atomic.

pub mod autoscaler;
pub mod disruption;
pub mod lifecycle;
pub mod objects;
pub mod pdb;
pub mod pods;
pub mod priority;
pub mod scheduler;
pub mod stats;
pub mod worker;
pub mod workloads;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Namespace, Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};

use crate::rotor_kinds::{DrainRule, RotationPolicy};
use crate::scenario::{StaticPodSpec, Timing};
use crate::store::{Collection, IndexId, Revision};
pub use stats::Stats;

/// The pod indexes the controllers and the API read instead of scanning every pod.
#[derive(Clone, Copy, Debug)]
pub struct PodIndexes {
    /// By `spec.nodeName` (bound pods only); also answers `fieldSelector=spec.nodeName=N`.
    pub node: IndexId,
    /// By the uid of the controlling owner.
    pub controller: IndexId,
    /// Pods the kubelets or the scheduler still have to act on, by what they wait for: see
    /// [`objects::pod_work`].
    pub work: IndexId,
    /// DaemonSet and mirror pods, under "".
    pub node_agent: IndexId,
}

/// The simulated cluster: the objects every controller and the API read and write, the
/// scenario's settings and counters, and what each simulated controller remembers between steps
/// (kept in that controller's module).
pub struct Cluster {
    pub rev: Revision,
    pub namespaces: Collection<Namespace>,
    pub nodes: Collection<Node>,
    pub pods: Collection<Pod>,
    pub events: Collection<CoreEvent>,
    pub events_v1: Collection<EventsV1Event>,
    pub pdbs: Collection<PodDisruptionBudget>,
    pub deployments: Collection<Deployment>,
    pub replicasets: Collection<ReplicaSet>,
    pub statefulsets: Collection<StatefulSet>,
    pub daemonsets: Collection<DaemonSet>,
    pub leases: Collection<Lease>,
    pub priority_classes: Collection<PriorityClass>,
    pub rotation_policies: Collection<RotationPolicy>,
    pub drain_rules: Collection<DrainRule>,
    pub pod_index: PodIndexes,

    pub timing: Timing,
    pub control_plane_version: String,
    /// Static pods the kubelet of every node runs (as mirror pods), by name prefix.
    pub static_pods: Vec<StaticPodSpec>,
    pub stats: Stats,

    control_loop: lifecycle::memory::ControlLoopMemory,
    scheduler: scheduler::memory::SchedulerMemory,
    workloads: workloads::memory::WorkloadsMemory,
    disruption: disruption::memory::DisruptionMemory,
    autoscaler: autoscaler::memory::AutoscalerMemory,
}

/// How many changes each kind keeps for watches to resume from.
const DEFAULT_LOG_CAP: usize = 20_000;

impl Cluster {
    pub fn new(timing: Timing, control_plane_version: String) -> Self {
        let rev = Revision::default();
        let cap = timing.watch_history.unwrap_or(DEFAULT_LOG_CAP);
        let mut pods = Collection::new(rev.clone(), cap.max(100_000));
        let pod_index = PodIndexes {
            node: pods.add_index(objects::node_name, Some("spec.nodeName")),
            controller: pods.add_index(objects::controller_uid, None),
            work: pods.add_index(objects::pod_work, None),
            node_agent: pods.add_index(objects::node_agent, None),
        };
        Cluster {
            namespaces: Collection::new(rev.clone(), cap),
            nodes: Collection::new(rev.clone(), cap),
            pods,
            events: Collection::new(rev.clone(), cap),
            events_v1: Collection::new(rev.clone(), cap),
            pdbs: Collection::new(rev.clone(), cap),
            deployments: Collection::new(rev.clone(), cap),
            replicasets: Collection::new(rev.clone(), cap),
            statefulsets: Collection::new(rev.clone(), cap),
            daemonsets: Collection::new(rev.clone(), cap),
            leases: Collection::new(rev.clone(), cap),
            priority_classes: Collection::new(rev.clone(), cap),
            rotation_policies: Collection::new(rev.clone(), cap),
            drain_rules: Collection::new(rev.clone(), cap),
            rev,
            pod_index,
            timing,
            control_plane_version,
            static_pods: Vec::new(),
            stats: Stats::default(),
            control_loop: Default::default(),
            scheduler: Default::default(),
            workloads: Default::default(),
            disruption: Default::default(),
            autoscaler: Default::default(),
        }
    }

    /// Drop every kind's change log: the next watch resuming from an older version gets 410.
    pub fn compact_all(&mut self) {
        self.namespaces.compact_all();
        self.nodes.compact_all();
        self.pods.compact_all();
        self.events.compact_all();
        self.events_v1.compact_all();
        self.pdbs.compact_all();
        self.deployments.compact_all();
        self.replicasets.compact_all();
        self.statefulsets.compact_all();
        self.daemonsets.compact_all();
        self.leases.compact_all();
        self.priority_classes.compact_all();
        self.rotation_policies.compact_all();
        self.drain_rules.compact_all();
    }

    pub fn ensure_namespace(&mut self, name: &str, now: Timestamp) {
        if self.namespaces.get("", name).is_none() {
            let mut ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    uid: Some(uuid::Uuid::new_v4().to_string()),
                    creation_timestamp: Some(Time(now)),
                    labels: Some(BTreeMap::from([(
                        "kubernetes.io/metadata.name".to_string(),
                        name.to_string(),
                    )])),
                    ..Default::default()
                },
                ..Default::default()
            };
            crate::kinds::SimKind::on_create(&mut ns, now);
            self.namespaces.put(ns);
        }
    }

    /// Records a core/v1 Event about an object, as the simulated controllers would.
    pub fn record_event(
        &mut self,
        regarding: ObjectReference,
        type_: &str,
        reason: &str,
        message: String,
        component: &str,
        now: Timestamp,
    ) {
        let ns = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let base = regarding.name.clone().unwrap_or_default();
        let ev = CoreEvent {
            metadata: ObjectMeta {
                name: Some(crate::meta::generate_name(&format!("{base}.sim-"))),
                namespace: Some(ns),
                uid: Some(uuid::Uuid::new_v4().to_string()),
                creation_timestamp: Some(Time(now)),
                ..Default::default()
            },
            involved_object: regarding,
            reason: Some(reason.to_string()),
            message: Some(message),
            type_: Some(type_.to_string()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            count: Some(1),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some(component.to_string()),
                host: None,
            }),
            reporting_component: Some(component.to_string()),
            ..Default::default()
        };
        self.events.put(ev);
        self.trim_events();
    }

    /// Keeps the event store bounded, oldest first, like the apiserver's event TTL.
    fn trim_events(&mut self) {
        let cap = self.timing.max_events;
        while self.events.len() > cap {
            let Some(oldest) = self
                .events
                .values()
                .min_by_key(|e| {
                    e.metadata
                        .resource_version
                        .as_deref()
                        .and_then(|r| r.parse::<u64>().ok())
                })
                .map(|e| {
                    (
                        e.metadata.namespace.clone().unwrap_or_default(),
                        e.metadata.name.clone().unwrap_or_default(),
                    )
                })
            else {
                break;
            };
            self.events.remove(&oldest.0, &oldest.1);
        }
    }

    pub fn tick_interval(&self) -> Duration {
        self.timing.tick
    }
}

pub fn object_ref_node(node: &Node) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: node.metadata.name.clone(),
        uid: node.metadata.uid.clone(),
        ..Default::default()
    }
}

pub fn object_ref_pod(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// Seconds between two instants as a float (negative when `b` is before `a`).
pub fn secs_between(a: Timestamp, b: Timestamp) -> f64 {
    (b.as_millisecond() - a.as_millisecond()) as f64 / 1000.0
}

pub fn add_secs(t: Timestamp, secs: f64) -> Timestamp {
    Timestamp::from_millisecond(t.as_millisecond() + (secs * 1000.0) as i64).unwrap_or(t)
}

/// The earlier of a wake-up time already due, if any, and `b`.
fn earliest(a: Option<Timestamp>, b: Timestamp) -> Option<Timestamp> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// Keeps `Arc` imports tidy for submodules that hand objects around.
pub type Shared<T> = Arc<T>;
