//! With `--surge`, the watch of every placeholder rotor made, for what only it tells: which
//! placeholders still wait for a node (a drain about to free its room waits for them,
//! [`crate::drain::surge::PendingPlaceholders`]), and that the scheduler preempted one. A
//! placeholder is preempted when a pod of higher priority finds no other room, and that pod
//! waits a scheduling cycle and the scheduler's back-off for it. Most often it is an evicted
//! pod's replacement: after a `--surge-timeout`, as designed (the drain evicts with its
//! placeholders standing), or, in a cluster packed full (as Karpenter packs it), after a
//! placeholder still pending took the room a drain had just freed. Each one is counted
//! (`rotor_drainer_surge_placeholders_preempted_total`) and logged, the first at info with what
//! to do about it. Every replica watches, leading or not, as it watches the budgets: the
//! placeholders are the cluster's, not a term's.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;

use crate::drain::surge::{PreemptedPlaceholders, all_placeholders_selector, placeholder_node};
use crate::drain::surge_io::SurgeRoom;
use crate::watch_backoff::WatchBackoffExt;

/// Watches the placeholders in `room`'s namespace until `stop`: tells `room` which are pending,
/// and counts each one the scheduler preempted in `preempted`.
pub async fn watch_placeholders(
    client: kube::Client,
    room: Arc<SurgeRoom>,
    preempted: Counter,
    stop: CancellationToken,
) {
    let namespace = room.config().namespace.clone();
    let api: Api<Pod> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().labels(&all_placeholders_selector());
    let mut events = watcher(api, config).watch_backoff().boxed();
    let mut seen = PreemptedPlaceholders::default();
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            Some(Ok(event)) => {
                room.observe_placeholder(event.clone());
                let Some(pod) = seen.observe(event) else {
                    continue;
                };
                let name = pod.metadata.name.as_deref().unwrap_or_default();
                let node = placeholder_node(&pod).unwrap_or_default();
                if preempted.get() == 0 {
                    tracing::info!(%namespace, placeholder = %name, %node, "the scheduler preempted a placeholder: a pod of higher priority found no other room and waits for this one's. Expected after a surge timed out (SurgeTimedOut); beyond those, pending placeholders took room a drain had freed: --surge-ahead 0 makes each node's room only when its drain starts");
                } else {
                    tracing::debug!(%namespace, placeholder = %name, %node, "the scheduler preempted a placeholder");
                }
                preempted.inc();
            }
            Some(Err(e)) => {
                tracing::warn!(%namespace, error = %e, "the watch of the placeholders failed (rotor-drainer needs list and watch on pods in its namespace); it restarts with back-off")
            }
            None => return,
        }
    }
}
