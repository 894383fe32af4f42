//! One node's drain, as a task: record the start (or resume the recorded one), cordon, make
//! room first with `--surge`, then pass over the node's pods until it is empty
//! ([`crate::drain::pass_io`]), and record how it ended. Progress lives on the node as
//! annotations and is announced as Events, so a restarted drainer picks up where this left.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::Api;
use rotor_apimachinery::taints::keeps_pods_off;
use rotor_core::contract::{DrainReason, find_drain_taint, format_timestamp};
use rotor_core::duration::later;

use crate::drain::node_pods_io::{NodePods, NotListed};
use crate::drain::outcome::{DrainOutcome, DrainResult};
use crate::drain::pass::settled_at;
use crate::drain::pass_io::{Evicting, evict_until_drained};
use crate::drain::replace_by::ReplaceBy;
use crate::drain::shared::{Drains, Stops};
use crate::drain::surge::SurgeConfig;
use crate::drain::surge_io::{SurgeOutcome, SurgeRoom, make_room, release, release_if_held};
use crate::error::DrainError;
use crate::record::events::NodeEvent;
use crate::record::node::{
    DrainRecord, Intent, Transition, apply, begin_check, misreadings, retry_backoff, still_due,
};
use crate::record::node_io::{StartWrite, clean_up, park, save_end, start_and_cordon};

/// The node as the drain read it, due to start.
struct ReadNode<'a> {
    node: &'a Node,
    name: &'a str,
    intent: Intent,
    taint: Taint,
    record: DrainRecord,
    at: Timestamp,
}

/// Drains one node until it is drained, fails, loses its taint (`stops.abort`) or the drainer
/// stops (`stops.stop`). `tainted_since` is when this drainer first saw the node carry a drain
/// taint that keeps pods off, continuously since (see [`settled_at`]); `None` counts from the
/// cordon. `seen` is the node as the node watch last showed it, for a fresh start: its start
/// write is guarded by that copy's resourceVersion, so a node changed since is read again and
/// checked again before anything is written. Without it (a resume, whose record decides where
/// the drain picks up) the node is read first.
pub async fn drain_node(
    drains: Arc<Drains>,
    name: String,
    intent: Intent,
    tainted_since: Option<std::time::Instant>,
    seen: Option<Node>,
    stops: Stops,
) -> DrainOutcome {
    if let Some(room) = &drains.surge {
        // The loop over nodes no longer wants room made ahead for this node: a making still on
        // its way must not outlive this drain, which only releases what stands when it ends.
        room.unwant_ahead(&name);
    }
    let outcome = read_and_drain(&drains, &name, intent, tainted_since, seen, &stops).await;
    // The placeholders' work is done however the drain ended, even before its room was made
    // (room made ahead for the node goes, and its `--max-surge` slot), unless the drain is
    // still under way: stopped where it is (the next leader resumes it and finds its room, or
    // its sweep removes it), or a resume that could not read its node (the next pass resumes
    // it, and its drain takes the room over again).
    let under_way = match &outcome.result {
        DrainResult::Interrupted => true,
        DrainResult::Failed {
            error: DrainError::ReadNode { .. },
        } => intent == Intent::Resume,
        _ => false,
    };
    match (&drains.surge, &drains.fleet_room) {
        _ if under_way => {}
        (Some(room), _) => release(room, &name).await,
        // Its pool does not surge, but it may have once (a drain resumed after its policy
        // stopped surging): whatever surge still holds for the node goes.
        (None, Some(room)) => release_if_held(room, &name).await,
        (None, None) => {}
    }
    outcome
}

/// [`drain_node`] up to its release: reads the node (or takes the watch's copy) and, if it is
/// still tainted and due, drains it.
async fn read_and_drain(
    drains: &Drains,
    name: &str,
    intent: Intent,
    tainted_since: Option<std::time::Instant>,
    seen: Option<Node>,
    stops: &Stops,
) -> DrainOutcome {
    let nodes: Api<Node> = Api::all(drains.client.clone());
    let fetched = match seen {
        Some(node) => Ok(Some(node)),
        None => nodes.get_opt(name).await,
    };
    let node = match fetched {
        Ok(Some(n)) => n,
        Ok(None) => {
            return DrainOutcome {
                result: DrainResult::NodeGone,
                record: None,
            };
        }
        Err(e) => {
            let error = DrainError::ReadNode {
                node: name.to_string(),
                error: e,
            };
            // Nothing was written, so nothing else says it.
            tracing::warn!("{error}; trying again");
            return DrainOutcome {
                result: DrainResult::Failed { error },
                record: None,
            };
        }
    };
    let before = DrainRecord::from_annotations(node.metadata.annotations.as_ref());
    let now = Timestamp::now();
    let Some(taint) = find_drain_taint(&node).cloned() else {
        return DrainOutcome {
            result: DrainResult::Cancelled,
            record: Some(before),
        };
    };
    // Shut down or lost the lease while the node was read: another replica may be acting now.
    if stops.stop.is_cancelled() {
        return DrainOutcome {
            result: DrainResult::Interrupted,
            record: Some(before),
        };
    }
    if let Some(why) = begin_check(intent, &before, now, retry_backoff) {
        tracing::debug!(node = %name, why, "not draining: the node's record changed since the cache saw it");
        return DrainOutcome {
            result: DrainResult::Skipped { why },
            record: Some(before),
        };
    }
    announce_misreadings(drains, &node, now).await;
    let read = ReadNode {
        node: &node,
        name,
        intent,
        taint,
        record: before,
        at: now,
    };
    let (result, record) = drain_fresh(drains, &nodes, read, tainted_since, stops).await;
    DrainOutcome {
        result,
        record: Some(record),
    }
}

/// [`drain_node`] once the node is read and due: records the start, cordons, evicts, and
/// records how it ended. Returns the result and the last record written (or, when the start
/// itself could not be written, the failed attempt as only this drainer knows it).
async fn drain_fresh(
    drains: &Drains,
    nodes: &Api<Node>,
    read: ReadNode<'_>,
    tainted_since: Option<std::time::Instant>,
    stops: &Stops,
) -> (DrainResult, DrainRecord) {
    let ReadNode {
        node,
        name,
        intent,
        taint,
        record: before,
        at: now,
    } = read;
    let resumed = before.resumes(now, drains.settings.drain_timeout);
    let start = if before.waits_to_retry() {
        Transition::Retry {
            now,
            drain_timeout: drains.settings.drain_timeout,
        }
    } else {
        Transition::Start {
            now,
            drain_timeout: drains.settings.drain_timeout,
        }
    };
    let started = apply(&before, start);
    // With no surge step, evictions begin at once: the same write says so.
    let then = drains.surge.is_none().then_some(Transition::Evicting);
    // A node read again after a conflict goes through the checks this one passed.
    let still_due = |fresh: &Node| still_due(intent, fresh, now);
    let mut record = match start_and_cordon(nodes, name, node, &started, then, still_due).await {
        Ok(StartWrite::Written(r)) => r,
        Ok(StartWrite::NotDue(why)) => {
            tracing::debug!(node = %name, why, "not draining: the node changed before its start was written");
            return (DrainResult::Skipped { why }, before);
        }
        Err(e) => {
            let error = DrainError::Cordon {
                node: name.to_string(),
                error: e,
            };
            // The node's record could not be written, so neither it nor an Event can say so:
            // the log does. The record handed back says the attempt failed, though it is only
            // this drainer's: the next start waits out the retry back-off instead of sending
            // the same refused write every second.
            tracing::warn!("{error}; trying again after the retry back-off");
            let failed = apply(
                &started,
                Transition::Failed {
                    error: error.to_string(),
                    now,
                },
            );
            return (DrainResult::Failed { error }, failed);
        }
    };
    let deadline = record
        .deadline
        .unwrap_or_else(|| later(now, drains.settings.drain_timeout));
    // One watch of the node's pods, opened after the cordon, for the surge step and the
    // evictions alike.
    let mut pods = NodePods::open(drains, name);
    if let Some(room) = &drains.surge {
        // The start's Event goes beside the surge step, which the evictions wait for.
        let (_, outcome) = tokio::join!(
            announce_start(drains, node, &taint, deadline, resumed),
            surge_step(drains, room, node, &taint, &mut pods, stops),
        );
        // A pod watch that ended fails the drain at its first pass, with its own record and
        // Event: no surge outcome to tell then.
        if !pods.ended() {
            announce_surge(drains, node, room.config(), &outcome).await;
        }
        if outcome == SurgeOutcome::Interrupted {
            let result = if stops.stop.is_cancelled() {
                DrainResult::Interrupted
            } else {
                DrainResult::Cancelled
            };
            return (result, record);
        }
    } else {
        announce_start(drains, node, &taint, deadline, resumed).await;
    }
    let started = record.started_at.unwrap_or(now);
    // The taint's age counts only if the taint as read now keeps pods off; otherwise only the
    // cordon just written does, from now.
    let protected_for = tainted_since
        .filter(|_| keeps_pods_off(&taint))
        .map(|since| since.elapsed());
    let settled = settled_at(protected_for, Timestamp::now(), drains.settings.settle);
    let replace_by = drains.settings.replace_by.and_then(|warning| {
        match rotor_core::contract::replace_by(&node.metadata) {
            Ok(at) => at.map(|at| ReplaceBy::new(at, warning)),
            Err(value) => {
                // Never act on a guess: a time that does not parse is not enforced.
                tracing::warn!(node = %name, %value, "rotor.dev/replace-by is not an RFC 3339 time (e.g. 2026-12-01T00:00:00Z); it is not enforced");
                None
            }
        }
    });
    let task = Evicting {
        drains,
        nodes,
        node,
        name: name.to_string(),
        taint: &taint,
        deadline,
        started,
        replace_by,
        settled,
    };
    let result = evict_until_drained(&task, &mut record, pods, stops).await;
    let record = record_end(&task, &result, record).await;
    (result, record)
}

/// Makes room for the node's pods as its pod watch first lists them, reading the watch on
/// while the room is made. The pods come from the API server's watch cache, as the evictions
/// read them: a pod bound in the moments before the cordon that the cache has not shown yet
/// gets no placeholder (the drain still evicts it). A watch that has not listed within
/// `--surge-timeout`, or whose stream ended, fails the surge step: the drain goes on without
/// room, and an ended watch then fails it as the evictions find the stream gone.
async fn surge_step(
    drains: &Drains,
    room: &Arc<SurgeRoom>,
    node: &Node,
    taint: &Taint,
    pods: &mut NodePods,
    stops: &Stops,
) -> SurgeOutcome {
    let started = std::time::Instant::now();
    let timeout = room.config().timeout;
    let listed = match tokio::time::timeout(timeout, pods.until_listed(drains, stops)).await {
        Ok(Ok(listed)) => Ok(listed),
        Ok(Err(NotListed::Interrupted)) => return SurgeOutcome::Interrupted,
        Ok(Err(NotListed::Ended(error))) => Err(error.to_string()),
        Err(_) => Err(format!(
            "the node's pods were not listed within --surge-timeout ({timeout:?}): its pod watch is slow or failing (the drainer's log says if it failed)"
        )),
    };
    let making = make_room(
        room,
        node,
        taint,
        listed,
        started,
        &stops.abort,
        &stops.stop,
    );
    pods.read_while(drains, making).await
}

/// Says which of the node's drain record annotations rotor disregards as this drain begins
/// (see [`crate::record::node::misreadings`]), in the log and as a Warning Event; nothing when all
/// are usable.
async fn announce_misreadings(drains: &Drains, node: &Node, now: Timestamp) {
    let found = misreadings(
        node.metadata.annotations.as_ref(),
        now,
        drains.settings.drain_timeout,
    );
    if found.is_empty() {
        return;
    }
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let list = found
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let note = format!(
        "rotor disregards drain record annotations it did not write: {list}. They count as absent: a drain under way with no usable deadline starts a new attempt, and rotor overwrites them now. Nothing is evicted on their account."
    );
    tracing::warn!(node = %name, "{note}");
    drains
        .announcer
        .on_node(node, NodeEvent::RecordIgnored, note)
        .await;
}

/// Says that the drain starts (or resumes, after a restart or failover), in the log and as an
/// Event on the node.
async fn announce_start(
    drains: &Drains,
    node: &Node,
    taint: &Taint,
    deadline: Timestamp,
    resumed: bool,
) {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    if resumed {
        tracing::info!(node = %name, %deadline, "resuming the recorded drain");
        drains
            .announcer
            .on_node(
                node,
                NodeEvent::Resumed,
                format!("rotor resumed draining this node (deadline {deadline})."),
            )
            .await;
    } else {
        let value = taint.value.as_deref().unwrap_or_default();
        if value.parse::<DrainReason>().is_err() {
            tracing::info!(node = %name, value, "the drain taint's value is not one of rotor's reasons; draining anyway, as any value of {} asks for a drain", taint.key);
        }
        tracing::info!(node = %name, reason = ?taint.value, %deadline, "starting to drain");
        drains
            .announcer
            .on_node(
                node,
                NodeEvent::Started,
                format!(
                    "rotor started draining this node (taint {}={}, deadline {deadline}).",
                    taint.key,
                    taint.value.clone().unwrap_or_default()
                ),
            )
            .await;
    }
}

/// Says how the surge went, in the log, the metrics and an Event on the node.
async fn announce_surge(drains: &Drains, node: &Node, surge: &SurgeConfig, outcome: &SurgeOutcome) {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let (metric, event, note) = match outcome {
        SurgeOutcome::Ready {
            placeholders,
            waited,
        } => (
            "ready",
            NodeEvent::SurgeReady,
            format!(
                "rotor made room for this node's pods: {placeholders} placeholder(s) scheduled in {}s; their sets are scaled to zero so that the evicted pods find the room free; evicting now.",
                waited.as_secs()
            ),
        ),
        SurgeOutcome::NothingToReserve => (
            "nothing_to_reserve",
            NodeEvent::SurgeNothingToReserve,
            "No pod on this node needs room elsewhere (none is recreated by a controller, or none requests resources); evicting now.".to_string(),
        ),
        SurgeOutcome::TimedOut { scheduled, pending } => {
            let first = pending
                .first()
                .map(|(pod, why)| format!("; e.g. {pod}: {}", why.as_deref().unwrap_or("no reason given yet")))
                .unwrap_or_default();
            (
                "timed_out",
                NodeEvent::SurgeTimedOut,
                format!(
                    "{} of {} placeholder(s) were still unscheduled after --surge-timeout ({}s){first}. Evicting anyway: the pods may wait Pending. Check that a cluster autoscaler can add nodes for them (quotas, group maximum size).",
                    pending.len(),
                    pending.len() + scheduled,
                    surge.timeout.as_secs()
                ),
            )
        }
        SurgeOutcome::NoSlot => (
            "no_slot",
            NodeEvent::SurgeNoSlot,
            format!(
                "--max-surge nodes held placeholders for all of --surge-timeout ({}s); evicting without making room.",
                surge.timeout.as_secs()
            ),
        ),
        SurgeOutcome::Failed(why) => (
            "failed",
            NodeEvent::SurgeFailed,
            format!("{why}. Evicting without making room."),
        ),
        SurgeOutcome::Interrupted => return,
    };
    drains.metrics.surge(metric);
    if event.is_warning() {
        tracing::warn!(node = %name, "{note}");
    } else {
        tracing::info!(node = %name, "{note}");
    }
    drains.announcer.on_node(node, event, note).await;
}

/// Records how the drain ended on the node (drained, or failed with its reason) and says so;
/// undoes rotor's state when the taint went away. Returns the record as the drain ended it:
/// a drained or failed end even when the node refused its write, so the fleet neither resumes
/// a drain that ended nor skips the retry back-off.
async fn record_end(
    task: &Evicting<'_>,
    result: &DrainResult,
    mut record: DrainRecord,
) -> DrainRecord {
    let (drains, nodes, node, name, started) = (
        task.drains,
        task.nodes,
        task.node,
        task.name.as_str(),
        task.started,
    );
    match result {
        DrainResult::Drained => {
            let done = apply(
                &record,
                Transition::Drained {
                    now: Timestamp::now(),
                },
            );
            if let Err(e) = save_end(nodes, name, &done, &record).await {
                tracing::warn!(node = %name, error = %e, "could not record the drained phase on the node; this drainer goes on from what it knows (the node drained) until someone writes the node's record, and a next leader that reads it as draining resumes the drain, which finds nothing to evict");
            }
            // The drain did end: what is handed back says so even when the node could not.
            record = done;
            let secs = Timestamp::now()
                .duration_since(started)
                .as_secs_f64()
                .max(0.0);
            drains.metrics.drain_duration.observe(secs);
            tracing::info!(node = %name, seconds = secs.round(), "node drained");
            drains.announcer.on_node(node, NodeEvent::Drained, format!("rotor drained this node in {:.0}s; it stays cordoned and tainted for retirement.", secs)).await;
        }
        DrainResult::Failed { error } => {
            let failed = apply(
                &record,
                Transition::Failed {
                    error: error.to_string(),
                    now: Timestamp::now(),
                },
            );
            if let Err(e) = save_end(nodes, name, &failed, &record).await {
                tracing::warn!(node = %name, error = %e, "could not record the failure on the node");
            }
            // Handed back as written or not: the retry waits out its back-off either way.
            record = failed;
            tracing::warn!(node = %name, %error, "drain failed; it will be retried after a back-off");
            drains
                .announcer
                .on_node(node, NodeEvent::Failed, error.to_string())
                .await;
        }
        DrainResult::Parked { blocker } => {
            let parked = apply(
                &record,
                Transition::Parked {
                    blocker: blocker.clone(),
                    now: Timestamp::now(),
                },
            );
            let retry_at = parked
                .retry_at(retry_backoff(parked.attempts))
                .map(format_timestamp)
                .unwrap_or_default();
            match park(nodes, name, &parked, &record).await {
                Ok(uncordoned) => {
                    record = parked;
                    let cordon = if uncordoned {
                        "rotor's cordon undone"
                    } else {
                        "no cordon of rotor's to undo"
                    };
                    let note = format!(
                        "rotor parked this drain: blocked for longer than park-after by what only a person can clear ({blocker}). The taint stays, {cordon}, and the node no longer counts against the budgets; the drain starts again at {retry_at}, or sooner once the blocker is cleared and the node is untainted and tainted again."
                    );
                    tracing::warn!(node = %name, %blocker, %retry_at, "drain parked");
                    drains
                        .announcer
                        .on_node(node, NodeEvent::Parked, note)
                        .await;
                }
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "could not park the drain; it stays blocked and is tried again")
                }
            }
        }
        DrainResult::Cancelled => match clean_up(&drains.client, &drains.announcer, name).await {
            // Cleared, or as the node shows it when it was tainted again meanwhile.
            Ok(after) => record = after,
            Err(e) => {
                tracing::warn!(node = %name, error = %e, "could not undo rotor's drain state after the taint was removed")
            }
        },
        DrainResult::NodeGone | DrainResult::Interrupted | DrainResult::Skipped { .. } => {}
    }
    record
}

#[cfg(test)]
mod tests {
    use tokio_util::sync::CancellationToken;
    use tokio_util::task::TaskTracker;

    use super::*;
    use crate::drain::surge::tests as surge_tests;

    /// A drain's handles on an offline client, with `--surge`, and the tasks they run.
    struct Offline {
        drains: Arc<Drains>,
        stops: Stops,
        tasks: TaskTracker,
        stop: CancellationToken,
    }

    impl Offline {
        fn new(room: &Arc<SurgeRoom>) -> Offline {
            let (tasks, stop) = (TaskTracker::new(), CancellationToken::new());
            let drains = Arc::new(Drains::offline(Some(room.clone()), &tasks, &stop));
            let stops = Stops {
                abort: CancellationToken::new(),
                stop: CancellationToken::new(),
            };
            Offline {
                drains,
                stops,
                tasks,
                stop,
            }
        }

        /// Starts a drain of `node` seen without its taint: it ends cancelled, before its room.
        async fn start_untainted(&self, node: &str) {
            let outcome = drain_node(
                self.drains.clone(),
                node.into(),
                Intent::Start,
                None,
                Some(surge_tests::node(node)),
                self.stops.clone(),
            )
            .await;
            assert!(
                matches!(outcome.result, DrainResult::Cancelled),
                "{:?}",
                outcome.result
            );
        }

        async fn close(self) {
            self.stop.cancel();
            self.tasks.close();
            self.tasks.wait().await;
        }
    }

    #[tokio::test]
    async fn a_drain_that_ends_before_making_its_room_gives_back_the_room_made_ahead() {
        let room = SurgeRoom::offline();
        // The node is next in line and its room was made ahead: the loop over nodes wished for
        // it and the making took a --max-surge slot.
        room.want_ahead("n");
        assert!(room.take_slot("n"));
        let offline = Offline::new(&room);
        // Its taint went between the loop's choice and the drain's start: the drain ends before
        // it reaches its room.
        offline.start_untainted("n").await;
        // The room made ahead is removed with the drain's end. Its removal's requests fail
        // here: the slot stays held, so that no placeholder stands beyond --max-surge, and the
        // removal waits to be tried again.
        assert!(room.holds_slot("n"));
        assert!(
            room.awaits_removal("n"),
            "the room made ahead was not released with the drain"
        );
        // And a making of room ahead still on its way makes nothing: no one would remove it.
        assert!(!room.wants_ahead("n"));
        offline.close().await;
    }

    #[tokio::test]
    async fn a_drain_whose_pool_stopped_surging_releases_the_room_its_node_still_holds() {
        let room = SurgeRoom::offline();
        // The node's drain began while its pool surged: its room holds a --max-surge slot.
        assert!(room.take_slot("n"));
        let mut offline = Offline::new(&room);
        // It goes on under a RotationPolicy that no longer surges: no room of its own.
        let settings = offline.drains.settings.clone();
        offline.drains = Arc::new(offline.drains.with_settings(settings, false));
        assert!(offline.drains.surge.is_none());
        offline.start_untainted("n").await;
        // Its end releases what surge still holds for the node. The removal's requests fail
        // here, so the slot stays and the removal waits to be tried again: it was released.
        assert!(
            room.awaits_removal("n"),
            "the room made before the pool stopped surging was not released"
        );
        assert!(room.holds_slot("n"));
        offline.close().await;
    }

    #[tokio::test]
    async fn a_resumed_drain_that_cannot_read_its_node_keeps_its_room() {
        let room = SurgeRoom::offline();
        // The drain under way holds its room (a --max-surge slot and its placeholders).
        assert!(room.take_slot("n"));
        let offline = Offline::new(&room);
        // A resume reads its node; the API server does not answer.
        let outcome = drain_node(
            offline.drains.clone(),
            "n".into(),
            Intent::Resume,
            None,
            None,
            offline.stops.clone(),
        )
        .await;
        assert!(
            matches!(
                outcome.result,
                DrainResult::Failed {
                    error: DrainError::ReadNode { .. }
                }
            ),
            "{:?}",
            outcome.result
        );
        // Its drain is still under way, and the next pass resumes it: its room stays for it.
        assert!(
            room.holds_slot("n"),
            "a failed read removed the room of a drain under way"
        );
        offline.close().await;
    }
}
