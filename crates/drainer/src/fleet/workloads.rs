//! The gate's view of workloads: the wanted and Ready replica counts of every Deployment,
//! ReplicaSet and StatefulSet, kept from three watches. Each object is reduced to a few numbers
//! as it arrives and dropped, so the index costs a few dozen bytes per workload, and the gate
//! learns that a workload is Ready again from the event that says so, without polling.
//!
//! [`WorkloadIndex`] is plain data updated by [`WorkloadIndex::apply`];
//! [`crate::fleet::workloads_io::watch`] turns the three watches into one stream of
//! [`WorkloadUpdate`]s for the controller.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};

/// The workload kinds the gate judges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    Deployment,
    ReplicaSet,
    StatefulSet,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 3] = [
        WorkloadKind::Deployment,
        WorkloadKind::ReplicaSet,
        WorkloadKind::StatefulSet,
    ];

    /// The kind of an owner reference, if the gate judges it.
    pub fn parse(kind: &str) -> Option<Self> {
        match kind {
            "Deployment" => Some(WorkloadKind::Deployment),
            "ReplicaSet" => Some(WorkloadKind::ReplicaSet),
            "StatefulSet" => Some(WorkloadKind::StatefulSet),
            _ => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::ReplicaSet => "ReplicaSet",
            WorkloadKind::StatefulSet => "StatefulSet",
        }
    }
}

/// `(kind, namespace, name)` of one workload.
pub type WorkloadKey = (WorkloadKind, String, String);

/// What the gate needs of one workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadCounts {
    /// `spec.replicas` (1 when unset, as the API defaults it).
    pub wanted: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// For a ReplicaSet, the Deployment that controls it: the gate judges that one, since a
    /// ReplicaSet's own count changes during a rollout.
    pub parent: Option<String>,
}

fn counts(replicas: Option<i32>, ready: Option<i32>) -> WorkloadCounts {
    WorkloadCounts {
        wanted: replicas.unwrap_or(1),
        ready: ready.unwrap_or(0),
        parent: None,
    }
}

fn key(kind: WorkloadKind, meta: &kube::api::ObjectMeta) -> WorkloadKey {
    (
        kind,
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The index entry of a Deployment.
pub fn of_deployment(d: &Deployment) -> (WorkloadKey, WorkloadCounts) {
    let c = counts(
        d.spec.as_ref().and_then(|s| s.replicas),
        d.status.as_ref().and_then(|s| s.ready_replicas),
    );
    (key(WorkloadKind::Deployment, &d.metadata), c)
}

/// The index entry of a ReplicaSet, with its controlling Deployment.
pub fn of_replicaset(rs: &ReplicaSet) -> (WorkloadKey, WorkloadCounts) {
    let mut c = counts(
        rs.spec.as_ref().and_then(|s| s.replicas),
        rs.status.as_ref().and_then(|s| s.ready_replicas),
    );
    c.parent = crate::drain::pods::controller_ref(&rs.metadata)
        .filter(|o| o.kind == "Deployment")
        .map(|o| o.name.clone());
    (key(WorkloadKind::ReplicaSet, &rs.metadata), c)
}

/// The index entry of a StatefulSet.
pub fn of_statefulset(s: &StatefulSet) -> (WorkloadKey, WorkloadCounts) {
    let c = counts(
        s.spec.as_ref().and_then(|s| s.replicas),
        s.status.as_ref().and_then(|s| s.ready_replicas),
    );
    (key(WorkloadKind::StatefulSet, &s.metadata), c)
}

/// One event of one of the three watches, already reduced to index entries.
#[derive(Debug)]
pub enum WorkloadUpdate {
    /// A (re-)list of `kind` begins.
    Init(WorkloadKind),
    InitApply(WorkloadKey, WorkloadCounts),
    /// The (re-)list of `kind` is complete: it replaces what the index knew of that kind.
    InitDone(WorkloadKind),
    Apply(WorkloadKey, WorkloadCounts),
    Delete(WorkloadKey),
    /// The watch of `kind` failed at `at`; it restarts with back-off.
    Failed {
        kind: WorkloadKind,
        error: String,
        at: Instant,
    },
}

/// How long after its last error a failed watch keeps the index unusable. A watch that resumes
/// where it stopped sends nothing until something changes, so recovery cannot be seen; but a
/// watch that keeps failing reports an error at least every 30 s (the longest back-off), so
/// a minute without one means it is running again.
pub const FAILURE_HOLD: Duration = Duration::from_secs(60);

/// Why the index cannot be trusted now; the gate holds (fails closed) while it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IndexUnusable {
    /// The watch of `kind` failed less than [`FAILURE_HOLD`] ago.
    #[error("the {} watch failed: {error}", kind.as_str())]
    WatchFailed { kind: WorkloadKind, error: String },
    /// The first list of `kind` has not completed.
    #[error("the {}s are not listed yet", .0.as_str())]
    NotListed(WorkloadKind),
}

/// Replica counts of every Deployment, ReplicaSet and StatefulSet, from their watches.
#[derive(Debug, Default)]
pub struct WorkloadIndex {
    entries: HashMap<WorkloadKey, WorkloadCounts>,
    /// Entries of a re-list under way, by kind.
    relisting: HashMap<WorkloadKind, HashMap<WorkloadKey, WorkloadCounts>>,
    /// Kinds listed at least once.
    listed: HashSet<WorkloadKind>,
    /// Kinds whose watch failed and has not delivered anything since, with the last error and
    /// when it came.
    failing: HashMap<WorkloadKind, (String, Instant)>,
}

impl WorkloadIndex {
    /// Applies one update. Returns the workloads whose entry changed (for a re-list, those of
    /// its kind that appeared, changed or went away), so the caller can tell whether it cares.
    pub fn apply(&mut self, update: WorkloadUpdate) -> Vec<WorkloadKey> {
        match update {
            WorkloadUpdate::Init(kind) => {
                self.failing.remove(&kind);
                self.relisting.insert(kind, HashMap::new());
                Vec::new()
            }
            WorkloadUpdate::InitApply(key, counts) => {
                self.failing.remove(&key.0);
                self.relisting.entry(key.0).or_default().insert(key, counts);
                Vec::new()
            }
            WorkloadUpdate::InitDone(kind) => {
                self.failing.remove(&kind);
                self.listed.insert(kind);
                let fresh = self.relisting.remove(&kind).unwrap_or_default();
                let mut changed: Vec<WorkloadKey> = self
                    .entries
                    .iter()
                    .filter(|(k, v)| k.0 == kind && fresh.get(*k) != Some(*v))
                    .map(|(k, _)| k.clone())
                    .collect();
                changed.extend(
                    fresh
                        .iter()
                        .filter(|(k, v)| self.entries.get(*k) != Some(*v))
                        .map(|(k, _)| k.clone()),
                );
                self.entries.retain(|k, _| k.0 != kind);
                self.entries.extend(fresh);
                changed.sort();
                changed.dedup();
                changed
            }
            WorkloadUpdate::Apply(key, counts) => {
                self.failing.remove(&key.0);
                if self.entries.get(&key) == Some(&counts) {
                    return Vec::new();
                }
                self.entries.insert(key.clone(), counts);
                vec![key]
            }
            WorkloadUpdate::Delete(key) => {
                self.failing.remove(&key.0);
                match self.entries.remove(&key) {
                    Some(_) => vec![key],
                    None => Vec::new(),
                }
            }
            WorkloadUpdate::Failed { kind, error, at } => {
                self.failing.insert(kind, (error, at));
                Vec::new()
            }
        }
    }

    /// Why the index cannot be trusted now, if it cannot: a kind not listed yet, or a watch
    /// that failed less than [`FAILURE_HOLD`] ago and has delivered nothing since. The gate
    /// holds (fails closed) while this is `Some`.
    pub fn unusable(&self, now: Instant) -> Option<IndexUnusable> {
        for kind in WorkloadKind::ALL {
            if let Some((error, at)) = self.failing.get(&kind)
                && now.saturating_duration_since(*at) < FAILURE_HOLD
            {
                return Some(IndexUnusable::WatchFailed {
                    kind,
                    error: error.clone(),
                });
            }
            if !self.listed.contains(&kind) {
                return Some(IndexUnusable::NotListed(kind));
            }
        }
        None
    }

    /// The entry of one workload.
    pub fn get(&self, kind: WorkloadKind, namespace: &str, name: &str) -> Option<&WorkloadCounts> {
        self.entries
            .get(&(kind, namespace.to_string(), name.to_string()))
    }

    /// Number of workloads known.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(ns: &str, name: &str, replicas: i32, ready: i32) -> Deployment {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "app", "image": "web:1"}]}}},
            "status": {"replicas": replicas, "readyReplicas": ready}
        }))
        .unwrap()
    }

    fn listed_all(index: &mut WorkloadIndex) {
        for kind in WorkloadKind::ALL {
            index.apply(WorkloadUpdate::Init(kind));
            index.apply(WorkloadUpdate::InitDone(kind));
        }
    }

    #[test]
    fn objects_reduce_to_their_counts() {
        let (k, c) = of_deployment(&deployment("shop", "web", 3, 2));
        assert_eq!(k, (WorkloadKind::Deployment, "shop".into(), "web".into()));
        assert_eq!((c.wanted, c.ready, c.parent), (3, 2, None));

        let rs: ReplicaSet = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-7d9f", "namespace": "shop", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1",
                 "controller": true}]},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"replicas": 3}
        }))
        .unwrap();
        let (k, c) = of_replicaset(&rs);
        assert_eq!(k.0, WorkloadKind::ReplicaSet);
        assert_eq!(
            (c.wanted, c.ready),
            (3, 0),
            "no readyReplicas means none ready"
        );
        assert_eq!(c.parent.as_deref(), Some("web"));

        // spec.replicas unset means 1, as the API defaults it.
        let sts: StatefulSet = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "data"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "serviceName": "db",
                     "template": {"metadata": {"labels": {"app": "db"}},
                                  "spec": {"containers": [{"name": "db", "image": "pg:16"}]}}},
            "status": {"replicas": 1, "readyReplicas": 1}
        }))
        .unwrap();
        let (_, c) = of_statefulset(&sts);
        assert_eq!((c.wanted, c.ready), (1, 1));
    }

    #[test]
    fn the_index_is_unusable_until_every_kind_is_listed_and_while_a_watch_fails() {
        let t0 = Instant::now();
        let mut index = WorkloadIndex::default();
        assert_eq!(
            index.unusable(t0),
            Some(IndexUnusable::NotListed(WorkloadKind::Deployment))
        );
        index.apply(WorkloadUpdate::Init(WorkloadKind::Deployment));
        index.apply(WorkloadUpdate::InitDone(WorkloadKind::Deployment));
        assert_eq!(
            index.unusable(t0).unwrap().to_string(),
            "the ReplicaSets are not listed yet"
        );
        listed_all(&mut index);
        assert_eq!(index.unusable(t0), None);

        let failed = |at| WorkloadUpdate::Failed {
            kind: WorkloadKind::StatefulSet,
            error: "connection refused".into(),
            at,
        };
        index.apply(failed(t0));
        assert_eq!(
            index
                .unusable(t0 + Duration::from_secs(1))
                .map(|why| why.to_string())
                .as_deref(),
            Some("the StatefulSet watch failed: connection refused")
        );
        // A re-list (or any event) shows the watch is back.
        index.apply(WorkloadUpdate::Init(WorkloadKind::StatefulSet));
        assert_eq!(index.unusable(t0 + Duration::from_secs(1)), None);
        // A watch that resumed silently: usable once no error came for FAILURE_HOLD; one that
        // keeps failing stays unusable.
        index.apply(failed(t0));
        assert!(
            index
                .unusable(t0 + FAILURE_HOLD - Duration::from_secs(1))
                .is_some()
        );
        assert_eq!(index.unusable(t0 + FAILURE_HOLD), None);
        index.apply(failed(t0 + FAILURE_HOLD));
        assert!(index.unusable(t0 + FAILURE_HOLD).is_some());
    }

    #[test]
    fn updates_report_what_changed() {
        let mut index = WorkloadIndex::default();
        listed_all(&mut index);
        let (k, c) = of_deployment(&deployment("shop", "web", 3, 2));
        let changed = index.apply(WorkloadUpdate::Apply(k.clone(), c.clone()));
        assert_eq!(changed, std::slice::from_ref(&k));
        // The same counts again (e.g. a change of some other field): nothing changed.
        assert!(index.apply(WorkloadUpdate::Apply(k.clone(), c)).is_empty());
        let (_, ready) = of_deployment(&deployment("shop", "web", 3, 3));
        let changed = index.apply(WorkloadUpdate::Apply(k.clone(), ready));
        assert_eq!(changed, std::slice::from_ref(&k));
        assert_eq!(
            index
                .get(WorkloadKind::Deployment, "shop", "web")
                .unwrap()
                .ready,
            3
        );
        let changed = index.apply(WorkloadUpdate::Delete(k.clone()));
        assert_eq!(changed, std::slice::from_ref(&k));
        assert!(index.get(WorkloadKind::Deployment, "shop", "web").is_none());
        assert!(index.apply(WorkloadUpdate::Delete(k)).is_empty());
    }

    #[test]
    fn a_relist_replaces_its_kind_only_and_reports_the_difference() {
        let mut index = WorkloadIndex::default();
        listed_all(&mut index);
        let (web, web_c) = of_deployment(&deployment("shop", "web", 3, 3));
        let (api, api_c) = of_deployment(&deployment("shop", "api", 2, 2));
        let (gone, gone_c) = of_deployment(&deployment("shop", "old", 1, 1));
        let sts = (
            WorkloadKind::StatefulSet,
            "data".to_string(),
            "db".to_string(),
        );
        for (k, c) in [
            (web.clone(), web_c.clone()),
            (api.clone(), api_c.clone()),
            (gone.clone(), gone_c),
            (sts.clone(), counts(Some(1), Some(1))),
        ] {
            index.apply(WorkloadUpdate::Apply(k, c));
        }
        // After a watch gap: web unchanged, api lost a replica, old was deleted meanwhile.
        index.apply(WorkloadUpdate::Init(WorkloadKind::Deployment));
        index.apply(WorkloadUpdate::InitApply(web.clone(), web_c));
        let (_, api_now) = of_deployment(&deployment("shop", "api", 2, 1));
        index.apply(WorkloadUpdate::InitApply(api.clone(), api_now));
        // Nothing changes until the list is complete.
        assert_eq!(
            index
                .get(WorkloadKind::Deployment, "shop", "api")
                .unwrap()
                .ready,
            2
        );
        let mut changed = index.apply(WorkloadUpdate::InitDone(WorkloadKind::Deployment));
        changed.sort();
        let mut expected = vec![api.clone(), gone.clone()];
        expected.sort();
        assert_eq!(changed, expected);
        assert_eq!(
            index
                .get(WorkloadKind::Deployment, "shop", "api")
                .unwrap()
                .ready,
            1
        );
        assert!(index.get(WorkloadKind::Deployment, "shop", "old").is_none());
        // The StatefulSet, another kind, is untouched.
        assert!(index.get(WorkloadKind::StatefulSet, "data", "db").is_some());
        assert_eq!(index.len(), 3);
    }
}
