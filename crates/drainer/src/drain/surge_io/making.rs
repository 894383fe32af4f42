//! A drain's room: take a `--max-surge` slot, create or update the node's placeholder sets,
//! wait on a watch of the placeholders until the scheduler has placed every one, then free the
//! room just before the evictions ([`super::freeing`]), or after `--surge-timeout` hand the
//! placeholders over.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, DeleteParams, ListParams};
use tokio_util::sync::CancellationToken;

use crate::drain::lock;
use crate::drain::surge::{NOT_CREATED, Reservation, placeholder_selector};

use crate::drain::surge_io::freeing::{PlaceholderWatch, free_room, set_room, sets_owning};
use crate::drain::surge_io::removal::{delete_sets, remove_room};
use crate::drain::surge_io::room::{DrainRoom, SetsStand, SurgeRoom, create_placeholders};

/// How often a drain waiting for a `--max-surge` slot looks again (the slots are in memory).
const POLL: Duration = Duration::from_secs(1);

/// How long placeholders a set should have made may be missing before the drain reads the
/// sets for the reason (a quota, an admission webhook): a set makes its pods within
/// milliseconds, so only a refusal lasts this long.
const MISSING_FOR: Duration = Duration::from_secs(2);

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
    room: &Arc<SurgeRoom>,
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
        // Wait out whatever is being done ahead for the node; nothing starts after this (the
        // drain took back the wish for room ahead as it began: `drain_node`).
        let _node = tokio::select! {
            node = room.lock_node(&name) => node,
            _ = abort.cancelled() => return SurgeOutcome::Interrupted,
            _ = stop.cancelled() => return SurgeOutcome::Interrupted,
        };
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
                remove_now(room, &name).await;
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
    // Within --surge-timeout, like the rest of the surge: kube retries a create the API
    // server sheds (429, 503) for minutes.
    let making = create_placeholders(room, node, drain_taint, &pods, stand);
    let made = match tokio::time::timeout_at(give_up_at.into(), making).await {
        Ok(made) => made,
        Err(_) => Err(format!(
            "the placeholder sets were not made within --surge-timeout ({:?}): the API server did not answer in time",
            cfg.timeout
        )),
    };
    let (wanted, sets) = match made {
        Ok(made) if made.placeholders == 0 => {
            // Room made ahead for pods that have left the node since is no one's now. Without
            // it the release still removes the node's room by its label: what an earlier term
            // made for the node (ahead, or for a drain this one resumes) is not known here.
            if made_ahead {
                remove_now(room, &name).await;
            } else {
                room.give_back(&name);
            }
            return SurgeOutcome::NothingToReserve;
        }
        Ok(made) => (made.placeholders, made.sets),
        Err(why) => {
            remove_now(room, &name).await;
            return SurgeOutcome::Failed(why);
        }
    };
    tracing::info!(node = %name, placeholders = wanted, "placeholders in place; waiting for them to be scheduled");
    let mut watch = PlaceholderWatch::open(room, &name);
    let waited = Wanted {
        placeholders: wanted,
        sets: &sets,
    };
    match wait_until_scheduled(room, &mut watch, &name, waited, give_up_at, abort, stop).await {
        Waited::Scheduled => {
            if !free_room(room, &name, &sets, watch, abort, stop).await {
                return SurgeOutcome::Interrupted;
            }
            SurgeOutcome::Ready {
                placeholders: wanted,
                waited: started.elapsed(),
            }
        }
        Waited::TimedOut(reservation) => {
            // The pending placeholders stay, in case the capacity comes late; the set must not
            // replace the scheduled ones the evictions' replacements preempt.
            if hand_over(room, &name).await {
                set_room(room, &name, DrainRoom::HandedOver).await;
            }
            SurgeOutcome::TimedOut {
                scheduled: reservation.scheduled,
                pending: reservation.pending,
            }
        }
        Waited::Refused(why) => {
            remove_now(room, &name).await;
            SurgeOutcome::Failed(why)
        }
        Waited::Interrupted => SurgeOutcome::Interrupted,
    }
}

/// Removes `node`'s room while its drain holds the node (a surge that failed, or room made
/// ahead that its pods no longer need). Once the removal is answered nothing of the node's
/// stands, so its release has only the slot to give back, not the same two deletions again.
async fn remove_now(room: &SurgeRoom, node: &str) {
    if remove_room(room, node).await {
        set_room(room, node, DrainRoom::Freed { sets_left: false }).await;
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
async fn hand_over(room: &SurgeRoom, node: &str) -> bool {
    delete_sets(
        &room.client,
        &room.cfg,
        node,
        &DeleteParams::orphan(),
        "could not hand the placeholders over (rotor-drainer needs deletecollection on replicasets in its namespace): a placeholder preempted during the drain is made again, pending, until the drain ends",
    )
    .await
}

/// How the wait for a node's placeholders ended.
enum Waited {
    Scheduled,
    TimedOut(Reservation),
    /// A set could not make its placeholders, for this reason.
    Refused(String),
    Interrupted,
}

/// The placeholders a drain waits for: how many its sets make, and the sets.
struct Wanted<'a> {
    placeholders: usize,
    sets: &'a [String],
}

impl Wanted<'_> {
    /// Whether the drain waits for `placeholder`: one of its sets' (or one no set owns, made
    /// by an earlier build). A set made ahead for pods that have left the node since is not
    /// the drain's to wait for: its placeholders may never find room; the room is freed with
    /// them all the same.
    fn waits_for(&self, placeholder: &Pod) -> bool {
        let mut owners = sets_owning(placeholder).peekable();
        owners.peek().is_none() || owners.any(|set| self.sets.iter().any(|s| s == set))
    }
}

/// Waits on a watch of `node`'s placeholders until every one is bound, so the drain evicts the
/// moment the scheduler has placed the last (a poll would add up to its period to every drain).
/// Until the watch has listed, and while it fails, nothing counts as scheduled.
async fn wait_until_scheduled(
    room: &SurgeRoom,
    watch: &mut PlaceholderWatch,
    node: &str,
    wanted: Wanted<'_>,
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
            Reservation::of(
                placeholders.values().filter(|p| wanted.waits_for(p)),
                wanted.placeholders,
            )
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
    use crate::drain::surge_io::freeing::tests::placeholder as owned_by;
    use crate::drain::watched::tests::pod;

    #[test]
    fn a_drain_waits_for_its_own_sets_placeholders_not_for_a_stale_set_made_ahead() {
        let sets = ["rotor-surge-n-a".to_string()];
        let wanted = Wanted {
            placeholders: 1,
            sets: &sets,
        };
        assert!(wanted.waits_for(&owned_by("1", "rotor-surge-n-a")));
        // Made ahead for pods that have left the node: not waited for.
        assert!(!wanted.waits_for(&owned_by("2", "rotor-surge-n-b")));
        // Made one by one by an earlier build, with no set: waited for, as before.
        assert!(wanted.waits_for(&pod("3")));
        let listed = [
            owned_by("1", "rotor-surge-n-a"),
            owned_by("2", "rotor-surge-n-b"),
        ];
        let mut bound = listed[0].clone();
        bound.spec.get_or_insert_default().node_name = Some("node-9".into());
        let reservation = Reservation::of(
            [&bound, &listed[1]]
                .into_iter()
                .filter(|p| wanted.waits_for(p)),
            wanted.placeholders,
        );
        assert!(reservation.complete(), "{reservation:?}");
    }
}
