//! The PodDisruptionBudgets as the drains and the choice read them: cached cluster-wide by a
//! watch every replica keeps (leading or not, so a new leader starts warm), with a counter
//! bumped on every change so that drains waiting on a refused eviction retry at once.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::watch_backoff::WatchBackoffExt;

/// The cluster's budgets, kept by a watch.
#[derive(Clone)]
pub struct BudgetWatch {
    store: Store<PodDisruptionBudget>,
    changes: watch::Receiver<u64>,
}

impl BudgetWatch {
    /// Starts the watch on `tasks`; it runs until `stop`.
    pub fn start(
        client: kube::Client,
        tasks: &TaskTracker,
        stop: CancellationToken,
    ) -> BudgetWatch {
        let (store, writer) = reflector::store::<PodDisruptionBudget>();
        let (changes_tx, changes) = watch::channel(0u64);
        // The cache holds every budget of the cluster (thousands in a large one), and the
        // drainer reads only their names, selectors, generations and status: the managed fields
        // and annotations (a kubectl last-applied copy of the spec) go before they are stored.
        let budgets = watcher(
            Api::<PodDisruptionBudget>::all(client),
            watcher::Config::default(),
        )
        .modify(|pdb| {
            pdb.metadata.managed_fields = None;
            pdb.metadata.annotations = None;
        });
        let stream = reflector(writer, budgets).watch_backoff().touched_objects();
        tasks.spawn(async move {
            let mut stream = stream.boxed();
            loop {
                let ev = tokio::select! {
                    _ = stop.cancelled() => return,
                    ev = stream.next() => ev,
                };
                match ev {
                    Some(Ok(_)) => changes_tx.send_modify(|n| *n += 1),
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "PodDisruptionBudget watch failed; it restarts with back-off")
                    }
                    None => return,
                }
            }
        });
        BudgetWatch { store, changes }
    }

    /// Waits until the watch has listed every budget once.
    pub async fn wait_until_ready(
        &self,
    ) -> Result<(), kube::runtime::reflector::store::WriterDropped> {
        self.store.wait_until_ready().await
    }

    /// Every budget the watch knows now.
    pub fn all(&self) -> Vec<Arc<PodDisruptionBudget>> {
        self.store.state()
    }

    /// Bumped on every budget change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    /// The budgets of `pods`' namespaces as the watch knows them now, for planning a node (the
    /// Eviction API consults no other). Only those are copied: a pass runs at every pod event,
    /// and a large cluster has thousands of budgets.
    pub fn for_pods<'a>(
        &self,
        pods: impl IntoIterator<Item = &'a Pod>,
    ) -> Vec<PodDisruptionBudget> {
        let namespaces: BTreeSet<&str> = pods
            .into_iter()
            .filter_map(|p| p.metadata.namespace.as_deref())
            .collect();
        self.store
            .state()
            .iter()
            .filter(|b| {
                b.metadata
                    .namespace
                    .as_deref()
                    .is_some_and(|ns| namespaces.contains(ns))
            })
            .map(|b| (**b).clone())
            .collect()
    }
}
