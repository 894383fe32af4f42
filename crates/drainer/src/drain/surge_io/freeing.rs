//! Freeing a drain's room just before its evictions: once no other node's placeholders are
//! pending, the node's sets are scaled to zero and the evictions may go; the watch of its
//! placeholders then shows, beside them, that the ReplicaSet controller has removed them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use crate::drain::pods::is_finished;
use crate::drain::surge::{AHEAD_AFTER_FREED, placeholder_selector};
use crate::drain::watched::WatchedPods;
use crate::watch_backoff::WatchBackoffExt;

use crate::drain::surge_io::removal::delete_room;
use crate::drain::surge_io::room::{DrainRoom, SurgeRoom};

/// How long the ReplicaSet controller may take to remove the placeholders of sets a drain
/// scaled to zero before the drain deletes them itself: the controller does it within tens of
/// milliseconds, so only a controller that is down or far behind takes this long (a placeholder
/// that has ended, which the controller leaves, holds no room and is not waited for).
const FREED_WITHIN: Duration = Duration::from_secs(2);

/// How long a drain about to free its room waits at most for other nodes' pending placeholders
/// to be scheduled. Beside Karpenter's kwok provider a node comes within seconds (it batches
/// pending pods for 1 to 10 s, then the node registers), and most holds ended within 50 ms; a
/// cloud's node takes tens of seconds, and room that has not come by the cap must not hold
/// every drain, so there the cap is what a drain mostly waits.
const HOLD_FOR_OTHERS: Duration = Duration::from_secs(5);

/// How often a held drain looks again at the placeholders' ages while the watch is quiet.
const RECHECK: Duration = Duration::from_secs(1);

/// Frees the room `node`'s placeholders proved, just before the drain's first eviction, so
/// that the evicted pods' replacements land in free room at once. Left standing, each
/// placeholder would have to be preempted for a replacement, and in a full cluster the
/// replacement then waits a scheduling cycle and the scheduler's back-off (a second or more)
/// Pending. The room is proven, not held: a pod that is not the drain's may take it meanwhile,
/// and that pod needed room too. The `--max-surge` slot is kept until the release.
///
/// First the drain waits while other nodes' placeholders are pending
/// ([`hold_while_others_pending`]); false if it was cancelled or the drainer stops meanwhile
/// (nothing freed). Then the sets are scaled to zero (one patch each) and the drain goes on to
/// its evictions at once: the ReplicaSet controller deletes a set's surplus pods side by side,
/// and its queue holds the scale before the evicted pods' deletions, so the placeholders go
/// before it makes the first replacement. Waiting for them to go put the controller's queue
/// (0.15 to 0.24 s at C=3 on the real control plane) before every drain's first eviction. A
/// deletecollection would delete them one after another at the API server (258 ms for 20
/// placeholders). The empty sets go at the release. If a patch fails, the sets and then the
/// placeholders are deleted as a collection each before the evictions; if the controller has
/// not removed them within [`FREED_WITHIN`], the same deletions follow ([`see_removed`]); if
/// they fail too, the release removes what is left.
pub(super) async fn free_room(
    room: &Arc<SurgeRoom>,
    node: &str,
    sets: &[String],
    watch: PlaceholderWatch,
    abort: &CancellationToken,
    stop: &CancellationToken,
) -> bool {
    if !hold_while_others_pending(room, node, abort, stop).await {
        return false;
    }
    // The sets made at the start, and any other set whose placeholders stand (one made ahead
    // for pods the node no longer has).
    let mut sets: BTreeSet<String> = sets.iter().cloned().collect();
    sets.extend(watch.owners());
    // A placeholder no set owns (made one by one by an earlier build) is no controller's to
    // delete.
    let scaled = !watch.any_unowned() && scale_to_zero(room, node, &sets).await;
    if scaled {
        // Said before `see_removed` may say the sets are gone too, so that this cannot undo it.
        set_room(room, node, DrainRoom::Freed { sets_left: true }).await;
        // The evictions go now, beside the removal: the controller's queue takes the scale
        // before the evictions' replacements, so it deletes the placeholders first.
        tokio::spawn(see_removed(
            room.clone(),
            node.to_string(),
            watch,
            stop.clone(),
        ));
    } else if delete_room(room, node).await {
        set_room(room, node, DrainRoom::Freed { sets_left: false }).await;
    }
    room.hold_room_ahead(AHEAD_AFTER_FREED);
    true
}

/// Records where `node`'s room is, while its drain holds the node (after the release, nothing
/// is left to record).
pub(super) async fn set_room(room: &SurgeRoom, node: &str, now: DrainRoom) {
    if let Some(state) = room.owned_by_drain.lock().await.get_mut(node) {
        *state = now;
    }
}

/// Watches the ReplicaSet controller remove the placeholders of `node`'s sets scaled to zero,
/// while the drain evicts; if it has not within [`FREED_WITHIN`] (a controller down or far
/// behind), deletes the sets and the placeholders itself, so that the release does not delete
/// the sets again.
async fn see_removed(
    room: Arc<SurgeRoom>,
    node: String,
    mut watch: PlaceholderWatch,
    stop: CancellationToken,
) {
    let removed = tokio::select! {
        _ = stop.cancelled() => return,
        removed = watch.until_none_left(FREED_WITHIN) => removed,
    };
    if removed {
        return;
    }
    // Held across the deletion. Only while the drain's sets are still to be deleted: once its
    // release has begun (or a later drain of the node has made room of its own), they are not
    // this look's.
    let _node = room.lock_node(&node).await;
    let state = room.owned_by_drain.lock().await.get(&node).copied();
    if state != Some(DrainRoom::Freed { sets_left: true }) {
        return;
    }
    tracing::info!(%node, within = ?FREED_WITHIN, "the ReplicaSet controller has not removed the placeholders of the sets scaled to zero; deleting them");
    // The sets went with them: the release has only the slot left to give back.
    if delete_room(&room, &node).await {
        set_room(&room, &node, DrainRoom::Freed { sets_left: false }).await;
    }
}

/// Waits, before `node`'s drain frees room, while placeholders of other nodes are pending (made
/// less than `--surge-timeout` ago), for at most [`HOLD_FOR_OTHERS`]. One pending when the room
/// is freed is scheduled into it within milliseconds, before the first replacement exists: the
/// scheduler has it queued already, and the ReplicaSet controller makes the replacement only
/// after the eviction. Where the nodes are packed full that replacement then finds no room,
/// preempts a placeholder and waits a scheduling cycle and the scheduler's back-off. The wait
/// ends as soon as the watch of every placeholder shows none pending; before that watch has
/// listed, it does not begin. False when the drain is cancelled or the drainer stops.
async fn hold_while_others_pending(
    room: &SurgeRoom,
    node: &str,
    abort: &CancellationToken,
    stop: &CancellationToken,
) -> bool {
    let mut pending = room.pending.subscribe();
    let began = tokio::time::Instant::now();
    let deadline = began + HOLD_FOR_OTHERS;
    let mut first_seen = None;
    loop {
        let others =
            pending
                .borrow_and_update()
                .besides(node, jiff::Timestamp::now(), room.cfg.timeout);
        let Some(others) = others.filter(|o| o.placeholders > 0) else {
            break;
        };
        first_seen.get_or_insert(others);
        tokio::select! {
            _ = stop.cancelled() => return false,
            _ = abort.cancelled() => return false,
            _ = tokio::time::sleep_until(deadline) => {
                tracing::info!(%node, waited = ?HOLD_FOR_OTHERS, "other nodes' placeholders are still pending: freeing the room anyway, and an evicted pod may wait for one of them to be preempted");
                return true;
            }
            changed = pending.changed() => if changed.is_err() {
                break;
            },
            // A placeholder that turns too old to wait for changes nothing on the watch.
            _ = tokio::time::sleep(RECHECK) => {}
        }
    }
    if let Some(first) = first_seen {
        tracing::info!(%node, held = ?began.elapsed(), placeholders = first.placeholders, nodes = first.nodes, "held the room until other nodes' pending placeholders were scheduled, so that they do not take it from the evicted pods");
    }
    true
}

/// Scales `node`'s placeholder sets to zero: one merge patch each, side by side. False if one
/// failed (logged).
async fn scale_to_zero(room: &SurgeRoom, node: &str, sets: &BTreeSet<String>) -> bool {
    let api: Api<ReplicaSet> = Api::namespaced(room.client.clone(), &room.cfg.namespace);
    let zero = serde_json::json!({"spec": {"replicas": 0}});
    let patches = sets.iter().map(|set| {
        let (api, zero) = (&api, &zero);
        async move {
            let patched = api
                .patch(set, &PatchParams::default(), &Patch::Merge(zero))
                .await;
            (set, patched)
        }
    });
    let mut all = true;
    for (set, patched) in futures::future::join_all(patches).await {
        if let Err(e) = patched {
            tracing::warn!(%node, namespace = %room.cfg.namespace, set, error = %e, "could not scale a placeholder set to zero (rotor-drainer needs patch on replicasets in its namespace); deleting the placeholders instead");
            all = false;
        }
    }
    all
}

/// The names of the ReplicaSets among `pod`'s owners.
pub(super) fn sets_owning(pod: &Pod) -> impl Iterator<Item = &str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|owner| owner.kind == "ReplicaSet")
        .map(|owner| owner.name.as_str())
}

/// The watch of one node's placeholders, open from the wait for their scheduling until their
/// room is freed.
pub(super) struct PlaceholderWatch {
    pub(super) events:
        futures::stream::BoxStream<'static, Result<watcher::Event<Pod>, watcher::Error>>,
    pub(super) placeholders: WatchedPods,
}

impl PlaceholderWatch {
    /// kube-runtime's watcher of `node`'s placeholders, retried after a failure with the
    /// drainer's watch back-off.
    pub(super) fn open(room: &SurgeRoom, node: &str) -> PlaceholderWatch {
        let api: Api<Pod> = Api::namespaced(room.client.clone(), &room.cfg.namespace);
        let selector = placeholder_selector(node);
        PlaceholderWatch {
            events: watcher(api, watcher::Config::default().labels(&selector))
                .watch_backoff()
                .boxed(),
            placeholders: WatchedPods::default(),
        }
    }

    /// The placeholders the watch has listed that hold room: a Failed or Succeeded pod holds
    /// none (the scheduler does not count it), and a ReplicaSet scaled down leaves it.
    fn standing(&self) -> Option<impl Iterator<Item = &Pod>> {
        let pods = self.placeholders.listed()?;
        Some(pods.values().filter(|pod| !is_finished(pod)))
    }

    /// The sets that own the standing placeholders.
    fn owners(&self) -> impl Iterator<Item = String> + '_ {
        self.standing()
            .into_iter()
            .flatten()
            .flat_map(sets_owning)
            .map(str::to_string)
    }

    /// Whether a standing placeholder has no set.
    fn any_unowned(&self) -> bool {
        self.standing()
            .into_iter()
            .flatten()
            .any(|pod| sets_owning(pod).next().is_none())
    }

    /// Whether the watch has seen every placeholder go (or end), waiting at most `within`.
    async fn until_none_left(&mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self
                .standing()
                .is_some_and(|mut left| left.next().is_none())
            {
                return true;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return false,
                ev = self.events.next() => match ev {
                    Some(Ok(event)) => {
                        self.placeholders.apply(event);
                    }
                    // The watcher lists again after a failure; its answer says what is left.
                    Some(Err(_)) => {}
                    None => return false,
                },
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::drain::watched::tests::pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    type Feed =
        futures::channel::mpsc::UnboundedSender<Result<watcher::Event<Pod>, watcher::Error>>;

    /// A placeholder watch fed by hand, listed with `pods`.
    fn listed_with(pods: Vec<Pod>) -> (Feed, PlaceholderWatch) {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
        for p in pods {
            tx.unbounded_send(Ok(watcher::Event::InitApply(p))).unwrap();
        }
        tx.unbounded_send(Ok(watcher::Event::InitDone)).unwrap();
        let watch = PlaceholderWatch {
            events: rx.boxed(),
            placeholders: WatchedPods::default(),
        };
        (tx, watch)
    }

    /// A placeholder `uid` owned by the ReplicaSet `set`.
    pub(in crate::drain::surge_io) fn placeholder(uid: &str, set: &str) -> Pod {
        let mut p = pod(uid);
        p.metadata.owner_references = Some(vec![OwnerReference {
            kind: "ReplicaSet".into(),
            name: set.into(),
            ..OwnerReference::default()
        }]);
        p
    }

    #[tokio::test]
    async fn the_room_is_free_once_the_watch_has_seen_every_placeholder_go() {
        let (tx, mut watch) =
            listed_with(vec![placeholder("a", "set-1"), placeholder("b", "set-2")]);
        // Still standing: not free.
        assert!(!watch.until_none_left(Duration::from_millis(50)).await);
        let mut owners: Vec<String> = watch.owners().collect();
        owners.sort();
        assert_eq!(owners, ["set-1", "set-2"], "the sets that own what stands");
        // The controller deletes them side by side; the room is free after the last.
        tx.unbounded_send(Ok(watcher::Event::Delete(placeholder("a", "set-1"))))
            .unwrap();
        assert!(!watch.until_none_left(Duration::from_millis(50)).await);
        tx.unbounded_send(Ok(watcher::Event::Delete(placeholder("b", "set-2"))))
            .unwrap();
        assert!(watch.until_none_left(Duration::from_millis(50)).await);
    }

    #[tokio::test]
    async fn a_placeholder_that_has_ended_holds_no_room_and_one_without_a_set_is_no_controllers() {
        let mut ended = placeholder("a", "set-1");
        ended.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        });
        let (_tx, mut watch) = listed_with(vec![ended]);
        assert!(watch.until_none_left(Duration::from_millis(50)).await);
        assert_eq!(
            watch.owners().count(),
            0,
            "an ended pod's set needs no scaling"
        );
        assert!(!watch.any_unowned());
        let (_tx, mut watch) = listed_with(vec![placeholder("b", "set-1"), pod("one-by-one")]);
        assert!(!watch.until_none_left(Duration::from_millis(50)).await);
        assert!(watch.any_unowned());
    }

    #[tokio::test]
    async fn a_watch_that_has_not_listed_does_not_say_the_room_is_free() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut watch = PlaceholderWatch {
            events: rx.boxed(),
            placeholders: WatchedPods::default(),
        };
        tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
        // Nothing seen yet is not nothing standing.
        assert!(!watch.until_none_left(Duration::from_millis(50)).await);
        tx.unbounded_send(Ok(watcher::Event::InitDone)).unwrap();
        assert!(watch.until_none_left(Duration::from_millis(50)).await);
    }
}
