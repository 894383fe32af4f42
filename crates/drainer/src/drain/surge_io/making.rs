//! A drain's room: take a `--max-surge` slot, create or update the node's placeholder sets,
//! wait on a watch of the placeholders until the scheduler has placed every one, then free the
//! room just before the evictions, or after `--surge-timeout` hand the placeholders over.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use crate::drain::lock;
use crate::drain::pods::is_finished;
use crate::drain::surge::{AHEAD_AFTER_FREED, NOT_CREATED, Reservation, placeholder_selector};
use crate::drain::watched::WatchedPods;
use crate::watch_backoff::WatchBackoffExt;

use crate::drain::surge_io::removal::{delete_room, delete_sets, remove_room};
use crate::drain::surge_io::room::{DrainRoom, SetsStand, SurgeRoom, create_placeholders};

/// How often a drain waiting for a `--max-surge` slot looks again (the slots are in memory).
const POLL: Duration = Duration::from_secs(1);

/// How long placeholders a set should have made may be missing before the drain reads the
/// sets for the reason (a quota, an admission webhook): a set makes its pods within
/// milliseconds, so only a refusal lasts this long.
const MISSING_FOR: Duration = Duration::from_secs(2);

/// How long a drain waits for the ReplicaSet controller to remove the placeholders of sets it
/// scaled to zero before it deletes them itself: the controller does it within tens of
/// milliseconds, so only a controller that is down or far behind takes this long (a placeholder
/// that has ended, which the controller leaves, holds no room and is not waited for).
const FREED_WITHIN: Duration = Duration::from_secs(2);

/// How a node's surge went.
#[derive(Debug, PartialEq, Eq)]
pub enum SurgeOutcome {
    /// Every placeholder has a node: there is room for the pods.
    Ready {
        placeholders: usize,
        waited: Duration,
    },
    /// No pod on the node needs room (nothing a controller recreates, or nothing requested).
    NothingToReserve,
    /// `--surge-timeout` passed with placeholders still pending; they stay until the drain
    /// ends, in case the capacity arrives late.
    TimedOut {
        scheduled: usize,
        pending: Vec<(String, Option<String>)>,
    },
    /// `--max-surge` nodes held placeholders until `--surge-timeout` (counted from the drain's
    /// first read of its pods) passed.
    NoSlot,
    /// The node's pods were not read, or the placeholders could not be created or read; those
    /// created, and room made ahead, were removed.
    Failed(String),
    /// The drain was cancelled or the drainer is stopping.
    Interrupted,
}

/// Makes room for `node`'s pods before they are evicted: takes a `--max-surge` slot, creates the
/// placeholder sets for the pods that need room (`listed`: the pods as the drain's watch listed
/// them, or why they could not be read), waits until all their pods are scheduled, for at most
/// `--surge-timeout` from `started` (when the drain began reading the pods) in all, then frees
/// the room for the evictions (all scheduled) or hands what stands over to the drain (timed
/// out). Without the pods, room made ahead for the node is removed and the drain goes on
/// without room.
pub async fn make_room(
    room: &SurgeRoom,
    node: &Node,
    drain_taint: &Taint,
    listed: Result<Vec<Pod>, String>,
    started: Instant,
    abort: &CancellationToken,
    stop: &CancellationToken,
) -> SurgeOutcome {
    let cfg = &room.cfg;
    let name = node.metadata.name.clone().unwrap_or_default();
    let give_up_at = started + cfg.timeout;
    {
        // Wait out whatever is being done ahead for the node; nothing starts after this.
        room.owned_by_drain
            .lock()
            .await
            .insert(name.clone(), DrainRoom::Held);
    }
    // Room made ahead holds its slot until the drain takes it.
    let made_ahead = lock(&room.held).contains(&name);
    let pods = match listed {
        Ok(pods) => pods,
        Err(why) => {
            // Left standing through the evictions, placeholders made ahead would be preempted
            // by the replacements and made again, pending.
            if made_ahead {
                remove_room(room, &name).await;
            }
            return SurgeOutcome::Failed(why);
        }
    };
    // Then its sets stand.
    let stand = if made_ahead {
        SetsStand::Likely
    } else {
        SetsStand::No
    };
    while !room.take_slot(&name) {
        if Instant::now() >= give_up_at {
            return SurgeOutcome::NoSlot;
        }
        if !pause(abort, stop).await {
            return SurgeOutcome::Interrupted;
        }
    }
    let (wanted, sets) = match create_placeholders(room, node, drain_taint, &pods, stand).await {
        Ok(made) if made.placeholders == 0 => {
            room.give_back(&name);
            return SurgeOutcome::NothingToReserve;
        }
        Ok(made) => (made.placeholders, made.sets),
        Err(why) => {
            remove_room(room, &name).await;
            return SurgeOutcome::Failed(why);
        }
    };
    tracing::info!(node = %name, placeholders = wanted, "placeholders in place; waiting for them to be scheduled");
    let mut watch = PlaceholderWatch::open(room, &name);
    match wait_until_scheduled(room, &mut watch, &name, wanted, give_up_at, abort, stop).await {
        Waited::Scheduled => {
            free_room(room, &name, &sets, &mut watch).await;
            SurgeOutcome::Ready {
                placeholders: wanted,
                waited: started.elapsed(),
            }
        }
        Waited::TimedOut(reservation) => {
            // The pending placeholders stay, in case the capacity comes late; the set must not
            // replace the scheduled ones the evictions' replacements preempt.
            hand_over(room, &name).await;
            SurgeOutcome::TimedOut {
                scheduled: reservation.scheduled,
                pending: reservation.pending,
            }
        }
        Waited::Refused(why) => {
            remove_room(room, &name).await;
            SurgeOutcome::Failed(why)
        }
        Waited::Interrupted => SurgeOutcome::Interrupted,
    }
}

/// Frees the room `node`'s placeholders proved, just before the drain's first eviction, so
/// that the evicted pods' replacements land in free room at once. Left standing, each
/// placeholder would have to be preempted for a replacement, and in a full cluster the
/// replacement then waits a scheduling cycle and the scheduler's back-off (a second or more)
/// Pending. The room is proven, not held: a pod that is not the drain's may take it meanwhile,
/// and that pod needed room too. The `--max-surge` slot is kept until the release.
///
/// The sets are scaled to zero (one patch each), and the drain waits on its placeholders'
/// watch until they are gone: the ReplicaSet controller deletes a set's surplus pods side by
/// side. A deletecollection deletes them one after another at the API server, and the drain's
/// first eviction waited for all of them (258 ms for 20 placeholders, the median at C=3 on the
/// real control plane). The empty sets go at the release. If a patch fails or the controller
/// does not remove them within [`FREED_WITHIN`], the sets and then the placeholders are deleted
/// as a collection each; if that fails too, the release removes what is left.
async fn free_room(room: &SurgeRoom, node: &str, sets: &[String], watch: &mut PlaceholderWatch) {
    // The sets made at the start, and any other set whose placeholders stand (one made ahead
    // for pods the node no longer has).
    let mut sets: BTreeSet<String> = sets.iter().cloned().collect();
    sets.extend(watch.owners());
    // A placeholder no set owns (made one by one by an earlier build) is no controller's to
    // delete.
    let scaled = !watch.any_unowned() && scale_to_zero(room, node, &sets).await;
    let freed = if scaled && watch.until_none_left(FREED_WITHIN).await {
        Some(DrainRoom::Freed { sets_left: true })
    } else {
        if scaled {
            tracing::info!(%node, within = ?FREED_WITHIN, "the ReplicaSet controller has not removed the placeholders of the sets scaled to zero; deleting them");
        }
        delete_room(room, node)
            .await
            .then_some(DrainRoom::Freed { sets_left: false })
    };
    room.hold_room_ahead(AHEAD_AFTER_FREED);
    if let Some(freed) = freed
        && let Some(state) = room.owned_by_drain.lock().await.get_mut(node)
    {
        *state = freed;
    }
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
fn sets_owning(pod: &Pod) -> impl Iterator<Item = &str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|owner| owner.kind == "ReplicaSet")
        .map(|owner| owner.name.as_str())
}

/// The watch of one node's placeholders, open from the wait for their scheduling until their
/// room is freed.
struct PlaceholderWatch {
    events: futures::stream::BoxStream<'static, Result<watcher::Event<Pod>, watcher::Error>>,
    placeholders: WatchedPods,
}

impl PlaceholderWatch {
    /// kube-runtime's watcher of `node`'s placeholders, retried after a failure with the
    /// drainer's watch back-off.
    fn open(room: &SurgeRoom, node: &str) -> PlaceholderWatch {
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

/// After a timed-out surge, deletes `node`'s placeholder sets and leaves their pods (the
/// pending ones may still get the capacity late, the scheduled ones hold room): from now on a
/// placeholder the scheduler preempts for an evicted pod's replacement is gone for good, as it
/// must be (a set would make it again, pending, and an autoscaler would add a node for it). One request, an
/// orphaning deletecollection by the node's label; the garbage collector takes the sets' owner
/// references off the pods. If it fails, the drain goes on: preempted placeholders come back
/// pending until the drain ends and removes them. Without an owner, the placeholders are no
/// longer removed with the node: the release, or a later leader's sweep, removes them, and a
/// drain of the node they run on evicts them like any pod ([`crate::drain::pods::classify`]).
async fn hand_over(room: &SurgeRoom, node: &str) {
    delete_sets(
        &room.client,
        &room.cfg,
        node,
        &DeleteParams::orphan(),
        "could not hand the placeholders over (rotor-drainer needs deletecollection on replicasets in its namespace): a placeholder preempted during the drain is made again, pending, until the drain ends",
    )
    .await;
}

/// How the wait for a node's placeholders ended.
enum Waited {
    Scheduled,
    TimedOut(Reservation),
    /// A set could not make its placeholders, for this reason.
    Refused(String),
    Interrupted,
}

/// Waits on a watch of `node`'s placeholders until every one is bound, so the drain evicts the
/// moment the scheduler has placed the last (a poll would add up to its period to every drain).
/// Until the watch has listed, and while it fails, nothing counts as scheduled.
async fn wait_until_scheduled(
    room: &SurgeRoom,
    watch: &mut PlaceholderWatch,
    node: &str,
    wanted: usize,
    give_up_at: Instant,
    abort: &CancellationToken,
    stop: &CancellationToken,
) -> Waited {
    let PlaceholderWatch {
        events,
        placeholders,
    } = watch;
    let mut last_error: Option<String> = None;
    let deadline = tokio::time::Instant::from_std(give_up_at);
    // Since when placeholders the sets should have made are missing, and when the sets were
    // last read for the reason.
    let mut missing_since: Option<tokio::time::Instant> = None;
    let mut sets_read_at: Option<tokio::time::Instant> = None;
    loop {
        let reservation = if let Some(placeholders) = placeholders.listed() {
            Reservation::of(placeholders.values(), wanted)
        } else {
            Reservation {
                scheduled: 0,
                pending: vec![(
                    "(not read yet)".into(),
                    last_error
                        .clone()
                        .or_else(|| Some("the placeholders' watch has not listed".into())),
                )],
            }
        };
        if reservation.complete() {
            return Waited::Scheduled;
        }
        let now = tokio::time::Instant::now();
        let missing = reservation.pending.iter().any(|(p, _)| p == NOT_CREATED);
        missing_since = if missing {
            missing_since.or(Some(now))
        } else {
            None
        };
        // Read the sets once placeholders have been missing for a while, then every while.
        let read_sets_at = missing_since.map(|since| {
            (since + MISSING_FOR).max(sets_read_at.map_or(now, |at| at + MISSING_FOR))
        });
        if read_sets_at.is_some_and(|at| at <= now) {
            sets_read_at = Some(now);
            // A slow read must not hold the drain past its deadline or a stop.
            tokio::select! {
                _ = stop.cancelled() => return Waited::Interrupted,
                _ = abort.cancelled() => return Waited::Interrupted,
                _ = tokio::time::sleep_until(deadline) => return Waited::TimedOut(reservation),
                why = refusal(room, node) => if let Some(why) = why {
                    return Waited::Refused(why);
                },
            }
            continue;
        }
        let check = read_sets_at.unwrap_or(deadline).min(deadline);
        tokio::select! {
            _ = stop.cancelled() => return Waited::Interrupted,
            _ = abort.cancelled() => return Waited::Interrupted,
            _ = tokio::time::sleep_until(deadline) => return Waited::TimedOut(reservation),
            _ = tokio::time::sleep_until(check), if check < deadline => {}
            ev = events.next() => match ev {
                Some(Ok(event)) => {
                    placeholders.apply(event);
                }
                Some(Err(e)) => {
                    tracing::warn!(%node, error = %e, "watching the placeholders failed; it restarts with back-off");
                    last_error = Some(e.to_string());
                }
                // The watcher's stream does not end; if it did, time out rather than spin.
                None => {
                    tokio::time::sleep_until(deadline).await;
                    return Waited::TimedOut(reservation);
                }
            },
        }
    }
}

/// Why `node`'s sets cannot make their placeholders, if one says so: the ReplicaSet controller
/// records a refused create (a quota, an admission webhook, a missing PriorityClass) as the
/// set's `ReplicaFailure` condition.
async fn refusal(room: &SurgeRoom, node: &str) -> Option<String> {
    let cfg = &room.cfg;
    let sets: Api<ReplicaSet> = Api::namespaced(room.client.clone(), &cfg.namespace);
    let listed = sets
        .list(&ListParams::default().labels(&placeholder_selector(node)))
        .await;
    let sets = match listed {
        Ok(list) => list.items,
        Err(e) => {
            tracing::warn!(%node, namespace = %cfg.namespace, error = %e, "cannot read the placeholder sets (rotor-drainer needs list on replicasets in its namespace); waiting on");
            return None;
        }
    };
    if sets.is_empty() {
        return Some(format!(
            "the placeholder sets of node {node} in {} are gone (deleted by someone else?)",
            cfg.namespace
        ));
    }
    sets.iter().find_map(|set| {
        let failure = set
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")?;
        Some(format!(
            "placeholder set {}/{} cannot make its pods: {}",
            cfg.namespace,
            set.metadata.name.as_deref().unwrap_or_default(),
            failure.message.as_deref().unwrap_or("no reason given")
        ))
    })
}

/// Waits one poll; false when the drain is cancelled or the drainer stops.
async fn pause(abort: &CancellationToken, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(POLL) => true,
        _ = abort.cancelled() => false,
        _ = stop.cancelled() => false,
    }
}

#[cfg(test)]
mod tests {
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

    fn placeholder(uid: &str, set: &str) -> Pod {
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
