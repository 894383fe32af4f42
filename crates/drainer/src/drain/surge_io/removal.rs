//! Removing a node's room: once its drain is over or cancelled, when the node leaves the line
//! before its drain starts, and, for an earlier leader's leftovers, the sweep a drainer runs as
//! it starts and again as it begins to lead. Also the deletions a drain falls back on when it
//! cannot scale its sets to zero, and hands its placeholders over with after a time-out.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};

use crate::drain::lock;
use crate::drain::surge::{
    SurgeConfig, all_placeholders_selector, orphaned, placeholder_node, placeholder_selector,
};
use crate::record::node::DrainRecord;

use crate::drain::surge_io::room::{DrainRoom, SurgeRoom};

/// Removes `node`'s room once its drain is over, cancelled, or its node cleaned up: the
/// placeholders (unless this drain freed them already) and the `--max-surge` slot, and the
/// node is no longer its drain's.
pub async fn release(room: &SurgeRoom, node: &str) {
    // Held across the removal: a drain's late look at whether the controller removed its
    // placeholders (`see_removed`) either ends first or finds the node released.
    let _node = room.lock_node(node).await;
    release_held(room, node).await;
}

/// [`release`], with `node`'s lock held.
async fn release_held(room: &SurgeRoom, node: &str) {
    let state = room.owned_by_drain.lock().await.get(node).copied();
    let removed = match state {
        Some(DrainRoom::Freed { sets_left: false }) => true,
        // Scaled to zero: the placeholders are gone (the slot with them), the empty sets go now.
        Some(DrainRoom::Freed { sets_left: true }) => {
            room.give_back(node);
            remove_sets(&room.client, &room.cfg, node).await
        }
        // The sets went at the hand-over; their pods, owned by no one since, go now.
        Some(DrainRoom::HandedOver) => remove_placeholders(&room.client, &room.cfg, node).await,
        Some(DrainRoom::Held) | None => delete_room(room, node).await,
    };
    room.owned_by_drain.lock().await.remove(node);
    // Rule: placeholders stand only within --max-surge. What could not be removed keeps its
    // slot and is tried again; nothing else removes it before the next term's sweep (handed
    // over, it is owned by no one, and a node that stays keeps its sets).
    if removed {
        room.give_back(node);
    } else {
        room.keep_for_removal(node, std::time::Instant::now());
    }
}

/// Releases `node`'s room only if this drainer holds some for it (a drain took it over, or a
/// slot is held) and its removal is not already waiting to be tried again: for a node deleted
/// while its drain was stopped (a halt), and at the end of a drain whose pool does not surge
/// (it may have been resumed under a policy that stopped surging). Sends nothing otherwise.
pub async fn release_if_held(room: &SurgeRoom, node: &str) {
    let _node = room.lock_node(node).await;
    let held = {
        let owned = room.owned_by_drain.lock().await;
        room.is_ours(&owned, node) && !room.awaits_removal(node)
    };
    if held {
        release_held(room, node).await;
    }
}

impl SurgeRoom {
    /// Tries again to remove the rooms whose removal failed at their release (the caller asks
    /// [`SurgeRoom::removals_due`] first). A room taken over since (a new drain of the node,
    /// or room made ahead for it) is left to whoever holds it now.
    pub async fn retry_removals(&self) {
        let nodes: Vec<String> = lock(&self.unremoved).iter().cloned().collect();
        for node in nodes {
            // Held across the removal, as the sweep holds it: no room for the node begins
            // meanwhile.
            let _node = self.lock_node(&node).await;
            let taken_over = self.owned_by_drain.lock().await.contains_key(&node);
            if taken_over || self.wants_ahead(&node) {
                lock(&self.unremoved).remove(&node);
            } else if delete_room(self, &node).await {
                lock(&self.unremoved).remove(&node);
                self.give_back(&node);
                tracing::info!(%node, "removed the node's placeholders on a later try");
            }
        }
    }
}

/// Removes `node`'s placeholder sets, then its placeholders, and gives back its `--max-surge`
/// slot: a deletecollection of each by the node's label, in rotor's own namespace; true when
/// both deletions were answered. The sets go
/// first, handed over or not (a set left standing would make its pods again, and which this
/// drainer handed over or freed is not known after a failover); the pods left are those a
/// timed-out surge left pending or the evicted pods did not already preempt. Errors are
/// logged: the next leader's [`sweep`] removes what is left (and the garbage collector, once
/// the node is deleted, what was not handed over).
pub(super) async fn remove_room(room: &SurgeRoom, node: &str) -> bool {
    // The slot only once the room is gone (or its removal failed): given back first, another
    // drain could make room of its own while this node's still stands, one node past
    // `--max-surge`.
    let gone = delete_room(room, node).await;
    room.give_back(node);
    gone
}

/// Deletes `node`'s placeholder sets, then its placeholders, both attempted whatever the other
/// did; true when both deletions were answered.
pub(super) async fn delete_room(room: &SurgeRoom, node: &str) -> bool {
    let sets_gone = remove_sets(&room.client, &room.cfg, node).await;
    let pods_gone = remove_placeholders(&room.client, &room.cfg, node).await;
    sets_gone && pods_gone
}

/// Deletes `node`'s placeholders: one deletecollection by the node's label. False if it failed
/// (logged).
async fn remove_placeholders(client: &kube::Client, cfg: &SurgeConfig, node: &str) -> bool {
    let selector = ListParams::default().labels(&placeholder_selector(node));
    let placeholders: Api<Pod> = Api::namespaced(client.clone(), &cfg.namespace);
    match placeholders
        .delete_collection(&DeleteParams::default(), &selector)
        .await
    {
        Ok(answer) => {
            // The deleted pods, or a bare Status when there were none.
            let removed = answer.left().map_or(0, |gone| gone.items.len());
            if removed > 0 {
                tracing::info!(%node, removed, "removed the node's placeholders");
            }
            true
        }
        Err(e) => {
            tracing::warn!(%node, namespace = %cfg.namespace, error = %e, "could not remove the node's placeholders (rotor-drainer needs deletecollection on pods in its namespace); tried again with back-off while this replica leads, their --max-surge slot kept meanwhile, else the next leader's sweep removes them");
            false
        }
    }
}

/// Deletes `node`'s placeholder sets, and with them (the garbage collector's background
/// deletion) the placeholders they still own: one deletecollection by the node's label.
async fn remove_sets(client: &kube::Client, cfg: &SurgeConfig, node: &str) -> bool {
    delete_sets(
        client,
        cfg,
        node,
        &DeleteParams::background(),
        "could not remove the node's placeholder sets (rotor-drainer needs deletecollection on replicasets in its namespace); tried again with back-off while this replica leads, else the next leader or the node's deletion removes them",
    )
    .await
}

/// Deletes `node`'s placeholder sets with `params` (whether their pods go with them): one
/// deletecollection by the node's label. False if it failed, logged as `failed` says.
pub(super) async fn delete_sets(
    client: &kube::Client,
    cfg: &SurgeConfig,
    node: &str,
    params: &DeleteParams,
    failed: &str,
) -> bool {
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &cfg.namespace);
    let selector = ListParams::default().labels(&placeholder_selector(node));
    match sets.delete_collection(params, &selector).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(%node, namespace = %cfg.namespace, error = %e, "{failed}");
            false
        }
    }
}

impl SurgeRoom {
    /// [`sweep`] with this room's client (the leader's) and settings.
    pub async fn sweep(&self) {
        sweep(&self.client, self).await
    }

    /// [`sweep`] through `client` (the start-up sweep's, which is not fenced).
    pub async fn sweep_with(&self, client: &kube::Client) {
        sweep(client, self).await
    }
}

/// Removes the placeholders and placeholder sets whose drain is over (their node is gone, or not
/// being drained): a previous leader's leftovers. Every drainer runs it once as it starts, and a
/// new leader once more. It runs beside the first drains and the room made ahead, so it may
/// list a set made a moment ago: each node's room is removed with the node's lock held and only
/// if it is not `room`'s own ([`SurgeRoom::is_ours`]), which making room ahead takes (and a
/// drain's start marks) under the same lock before it creates anything.
async fn sweep(client: &kube::Client, room: &SurgeRoom) {
    let cfg = &room.cfg;
    let selector = ListParams::default().labels(&all_placeholders_selector());
    let placeholders: Api<Pod> = Api::namespaced(client.clone(), &cfg.namespace);
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &cfg.namespace);
    let (pods, sets) = match (
        placeholders.list(&selector).await,
        sets.list(&selector).await,
    ) {
        (Ok(pods), Ok(sets)) => (pods.items, sets.items),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(namespace = %cfg.namespace, error = %e, "could not list placeholders left by an earlier leader (rotor-drainer needs list on pods and replicasets in its namespace)");
            return;
        }
    };
    if pods.is_empty() && sets.is_empty() {
        return;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let mut draining: BTreeMap<String, bool> = BTreeMap::new();
    let named = pods
        .iter()
        .filter_map(placeholder_node)
        .chain(sets.iter().filter_map(placeholder_node));
    for node in named {
        if draining.contains_key(node) {
            continue;
        }
        let active = match nodes.get_opt(node).await {
            Ok(Some(n)) => {
                DrainRecord::from_annotations(n.metadata.annotations.as_ref()).is_active()
            }
            Ok(None) => false,
            // Unknown: keep them; the next leader, or the node's deletion, removes them.
            Err(_) => true,
        };
        draining.insert(node.to_string(), active);
    }
    let is_draining = |node: &str| draining.get(node).copied().unwrap_or(false);
    let set_nodes: BTreeSet<&str> = orphaned(&sets, is_draining)
        .into_iter()
        .filter_map(placeholder_node)
        .collect();
    let mut orphans: BTreeMap<&str, Vec<&Pod>> =
        set_nodes.iter().map(|node| (*node, Vec::new())).collect();
    for pod in orphaned(&pods, is_draining) {
        orphans
            .entry(placeholder_node(pod).unwrap_or_default())
            .or_default()
            .push(pod);
    }
    // Node by node, with its lock held so that no room for the node begins meanwhile: its sets
    // first (a set left standing would make the pods removed after it again), then its pods.
    let mut removed = 0;
    for (node, pods) in orphans {
        let _node = room.lock_node(node).await;
        if room.is_ours(&*room.owned_by_drain.lock().await, node) {
            continue;
        }
        if set_nodes.contains(node) {
            remove_sets(client, cfg, node).await;
        }
        removed += delete_all(client, cfg, pods.into_iter()).await;
    }
    if removed > 0 {
        tracing::info!(removed, "removed placeholders left by an earlier leader");
    }
}

/// Deletes `pods` (placeholders, never workloads); returns how many went.
async fn delete_all<'a>(
    client: &kube::Client,
    cfg: &SurgeConfig,
    pods: impl Iterator<Item = &'a Pod>,
) -> usize {
    let api: Api<Pod> = Api::namespaced(client.clone(), &cfg.namespace);
    let mut removed = 0;
    for pod in pods {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => removed += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                tracing::warn!(namespace = %cfg.namespace, pod = name, error = %e, "could not remove a placeholder")
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::drain::surge_io::room::SurgeRoom;

    #[tokio::test]
    async fn a_nodes_lock_is_kept_only_while_held_or_awaited() {
        let room = SurgeRoom::offline();
        let held = room.lock_node("a").await;
        let waiting = {
            let room = room.clone();
            tokio::spawn(async move {
                let _again = room.lock_node("a").await;
            })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one holder at a time");
        drop(held);
        waiting.await.unwrap();
        assert!(
            room.node_locks.lock().unwrap().is_empty(),
            "forgotten once no one holds or waits for it"
        );
    }

    #[tokio::test]
    async fn a_room_that_could_not_be_removed_is_tried_again_with_back_off_until_it_goes() {
        let room = SurgeRoom::offline();
        let t0 = Instant::now();
        let secs = |s| t0 + Duration::from_secs(s);
        assert!(!room.removals_due(secs(1000)), "nothing to remove");
        assert!(room.take_slot("a"));
        room.keep_for_removal("a", t0);
        assert!(room.holds_slot("a"), "kept until it goes");
        let due: Vec<u64> = (0..=700).filter(|s| room.removals_due(secs(*s))).collect();
        assert_eq!(due, [5, 15, 35, 75, 155, 315, 615]);
        // Gone on a later try: nothing is due any more.
        room.unremoved.lock().unwrap().clear();
        assert!(!room.removals_due(secs(2000)));
        assert!(room.removal_retry.lock().unwrap().is_none());
    }
}
