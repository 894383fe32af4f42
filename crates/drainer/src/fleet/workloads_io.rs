//! The workload index's watches: cluster-wide list and watch of Deployments, ReplicaSets and
//! StatefulSets, each object reduced to its counts as it arrives ([`crate::fleet::workloads`]).

use std::time::Instant;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use kube::api::Api;
use kube::runtime::watcher;

use crate::fleet::workloads::{
    WorkloadCounts, WorkloadKey, WorkloadKind, WorkloadUpdate, of_deployment, of_replicaset,
    of_statefulset,
};
use crate::watch_backoff::WatchBackoffExt;

fn reduce<K, F>(
    kind: WorkloadKind,
    event: Result<watcher::Event<K>, watcher::Error>,
    entry: F,
) -> WorkloadUpdate
where
    F: Fn(&K) -> (WorkloadKey, WorkloadCounts),
{
    match event {
        Ok(watcher::Event::Init) => WorkloadUpdate::Init(kind),
        Ok(watcher::Event::InitApply(o)) => {
            let (k, c) = entry(&o);
            WorkloadUpdate::InitApply(k, c)
        }
        Ok(watcher::Event::InitDone) => WorkloadUpdate::InitDone(kind),
        Ok(watcher::Event::Apply(o)) => {
            let (k, c) = entry(&o);
            WorkloadUpdate::Apply(k, c)
        }
        Ok(watcher::Event::Delete(o)) => WorkloadUpdate::Delete(entry(&o).0),
        Err(e) => WorkloadUpdate::Failed {
            kind,
            error: e.to_string(),
            at: Instant::now(),
        },
    }
}

/// The three watches (cluster-wide list and watch of Deployments, ReplicaSets and
/// StatefulSets, in pages of 100) as one stream of updates. Failed watches restart with
/// back-off; the stream does not end on its own.
pub fn watch(client: kube::Client) -> impl Stream<Item = WorkloadUpdate> + Send {
    let config = || watcher::Config::default().page_size(100);
    let deployments = watcher(Api::<Deployment>::all(client.clone()), config())
        .watch_backoff()
        .map(|e| reduce(WorkloadKind::Deployment, e, of_deployment))
        .boxed();
    let replicasets = watcher(Api::<ReplicaSet>::all(client.clone()), config())
        .watch_backoff()
        .map(|e| reduce(WorkloadKind::ReplicaSet, e, of_replicaset))
        .boxed();
    let statefulsets = watcher(Api::<StatefulSet>::all(client), config())
        .watch_backoff()
        .map(|e| reduce(WorkloadKind::StatefulSet, e, of_statefulset))
        .boxed();
    futures::stream::select_all([deployments, replicasets, statefulsets])
}
