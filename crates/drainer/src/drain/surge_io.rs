//! The I/O of surge ([`crate::drain::surge`] decides): create a node's placeholder sets, wait
//! until the scheduler has placed their pods (an autoscaler adding nodes for them if it must),
//! free the room just before the evictions (the sets scaled to zero, the ReplicaSet controller
//! deleting the placeholders) or, after a time-out, hand the pods over (the sets deleted, their
//! pods left, so that a preempted placeholder is not made again), and remove what is left once
//! the node is drained, when its drain is cancelled, or, for a previous leader's leftovers,
//! when a new leader starts. A surge never
//! stops a drain: whatever fails, the drain goes on without the room and says why.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use prometheus_client::metrics::gauge::Gauge;
use tokio_util::sync::CancellationToken;

use rotor_core::find_drain_taint;

use crate::drain::lock;
use crate::drain::pods::{DrainOptions, is_finished};
use crate::drain::surge::{
    AHEAD_AFTER_FREED, AHEAD_AFTER_START, NOT_CREATED, Reservation, SurgeConfig,
    all_placeholders_selector, keeps_placeholders_off, may_surge, orphaned, placeholder_node,
    placeholder_selector, placeholder_sets, placeholders_wanted, pods_needing_room,
};
use crate::drain::watched::WatchedPods;
use crate::record::node::DrainRecord;
use crate::watch_backoff::WatchBackoffExt;

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

/// What surge's I/O works with: the client, the settings, the `--max-surge` slots and the
/// fleet's size they are a share of. One per drainer, shared by the drains (which make room)
/// and the loop over nodes (which makes room ahead, releases it and sweeps leftovers).
pub struct SurgeRoom {
    client: kube::Client,
    cfg: SurgeConfig,
    /// The drain's pod filters: room is made for the pods a drain would evict.
    options: DrainOptions,
    /// The nodes whose placeholders are outstanding, for `--max-surge`.
    held: Mutex<BTreeSet<String>>,
    /// How many nodes the cluster has, as the node watch last counted, for a `--max-surge`
    /// percentage.
    fleet_size: AtomicUsize,
    /// The `surge_nodes` gauge: how many slots are held.
    holding: Gauge,
    /// The nodes whose drain has taken over their room, and how far: what the loop over nodes
    /// does ahead of a drain (room made or released ahead) leaves them alone from then on.
    /// Held across the room made ahead's create and release, and while a drain takes its node
    /// over, so that nothing done ahead lands after the drain has taken over (a set made again
    /// after the room was freed would make placeholders again).
    owned_by_drain: tokio::sync::Mutex<BTreeMap<String, DrainRoom>>,
    /// Until when no room is made ahead: a drain just started may be about to free its room,
    /// or one freed it lately ([`AHEAD_AFTER_START`], [`AHEAD_AFTER_FREED`]).
    no_room_ahead_until: Mutex<Option<Instant>>,
    /// The nodes the loop over nodes wants room made ahead for, as it last said: set and
    /// cleared in its own order, before the tasks that make and remove the room run (in
    /// whatever order they get the lock), so a removal that runs first is not undone.
    wanted_ahead: Mutex<BTreeSet<String>>,
}

/// Where a drain's room is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DrainRoom {
    /// Its placeholders (if any) stand: the release removes them.
    Held,
    /// Its placeholders were removed just before its evictions. What the release has left to
    /// do: give back the `--max-surge` slot, and delete the sets if they were only scaled to
    /// zero.
    Freed { sets_left: bool },
}

impl SurgeRoom {
    pub fn new(
        client: kube::Client,
        cfg: SurgeConfig,
        options: DrainOptions,
        holding: Gauge,
    ) -> SurgeRoom {
        SurgeRoom {
            client,
            cfg,
            options,
            held: Mutex::default(),
            fleet_size: AtomicUsize::new(0),
            holding,
            owned_by_drain: tokio::sync::Mutex::default(),
            no_room_ahead_until: Mutex::default(),
            wanted_ahead: Mutex::default(),
        }
    }

    /// Whether room may be made ahead now: no drain started or freed its room lately, so the
    /// replacements of its evictions have had the time to take that room.
    pub fn quiet_for_room_ahead(&self) -> bool {
        lock(&self.no_room_ahead_until).is_none_or(|until| Instant::now() >= until)
    }

    /// The loop over nodes wants room made ahead for `node` ([`reserve_ahead`] makes it).
    pub fn want_ahead(&self, node: &str) {
        lock(&self.wanted_ahead).insert(node.to_string());
    }

    /// The loop over nodes no longer wants room ahead for `node` (it left the line).
    pub fn unwant_ahead(&self, node: &str) {
        lock(&self.wanted_ahead).remove(node);
    }

    fn wants_ahead(&self, node: &str) -> bool {
        lock(&self.wanted_ahead).contains(node)
    }

    /// A drain starts on a node: its room, if made ahead and ready, is freed within moments.
    pub fn drain_starting(&self) {
        self.hold_room_ahead(AHEAD_AFTER_START);
    }

    /// No room is made ahead for `hold` from now (or longer, if already held longer).
    fn hold_room_ahead(&self, hold: Duration) {
        let mut until = lock(&self.no_room_ahead_until);
        let new = Instant::now() + hold;
        *until = Some(until.map_or(new, |u| u.max(new)));
    }

    pub fn config(&self) -> &SurgeConfig {
        &self.cfg
    }

    /// The node watch counted `nodes` nodes.
    pub fn set_fleet_size(&self, nodes: usize) {
        self.fleet_size.store(nodes, Ordering::Relaxed);
    }

    /// Takes a slot for `node` if it holds one already or one is free.
    fn take_slot(&self, node: &str) -> bool {
        let mut held = lock(&self.held);
        if held.contains(node) {
            return true;
        }
        let fleet_size = self.fleet_size.load(Ordering::Relaxed);
        let free = may_surge(self.cfg.max_surge, held.len(), fleet_size);
        if free {
            held.insert(node.to_string());
            self.holding.set(held.len() as i64);
        }
        free
    }

    fn give_back(&self, node: &str) {
        let mut held = lock(&self.held);
        held.remove(node);
        self.holding.set(held.len() as i64);
    }

    /// Whether `node`'s room is this drainer's: a drain has taken it over, or a slot is held
    /// for it (room being made, or made ahead). Read with `owned_by_drain` locked, as `owned`.
    fn is_ours(&self, owned: &BTreeMap<String, DrainRoom>, node: &str) -> bool {
        owned.contains_key(node) || lock(&self.held).contains(node)
    }

    /// [`sweep`] with this room's client (the leader's) and settings.
    pub async fn sweep(&self) {
        sweep(&self.client, self).await
    }

    /// [`sweep`] through `client` (the start-up sweep's, which is not fenced).
    pub async fn sweep_with(&self, client: &kube::Client) {
        sweep(client, self).await
    }

    /// A new term begins here. No drain of this replica runs (it stood down only with none
    /// running, and a lost lease ends the process), so every slot and ownership it keeps is an
    /// earlier term's: room made ahead (its machine starts with none) and the room of a drain a
    /// halt interrupted, whose release never ran. All go back, and the sweep that follows
    /// removes their sets unless their node's record says a drain is under way (which the new
    /// term resumes, making its room again).
    pub async fn new_term(&self) {
        let mut owned = self.owned_by_drain.lock().await;
        owned.clear();
        lock(&self.wanted_ahead).clear();
        let mut held = lock(&self.held);
        held.clear();
        self.holding.set(0);
    }
}

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

/// Whether a node's placeholder sets are expected to stand already: the first request for
/// each is a create when not, an update when they are (a drain whose room was made ahead), and
/// the other follows when the guess was wrong (a set made before a restart, or removed since).
#[derive(Clone, Copy, PartialEq, Eq)]
enum SetsStand {
    No,
    Likely,
}

/// Makes the placeholder sets for those of `pods` (the node's) that need room. A set made
/// earlier (ahead of the drain, or before a restart) has the same name; it is brought to the
/// node's pods as they are now, its replicas and the pods it stands for, so a set made ahead
/// while the node had fewer or more pods serves the drain exactly. Returns how many
/// placeholders the node needs, in which sets; on an error, says what failed and what rotor
/// needs.
async fn create_placeholders(
    room: &SurgeRoom,
    node: &Node,
    drain_taint: &Taint,
    pods: &[Pod],
    stand: SetsStand,
) -> Result<MadeSets, String> {
    let cfg = &room.cfg;
    let needing = pods_needing_room(pods, drain_taint, &room.options);
    let wanted = placeholder_sets(&needing, node, drain_taint, cfg);
    let sets: Api<ReplicaSet> = Api::namespaced(room.client.clone(), &cfg.namespace);
    for set in &wanted {
        // One request in the usual case.
        let first = match stand {
            SetsStand::No => create_set(&sets, set).await,
            SetsStand::Likely => update_set(&sets, set).await,
        };
        let outcome = match first {
            Err(kube::Error::Api(s)) if stand == SetsStand::No && s.code == 409 => {
                update_set(&sets, set).await
            }
            Err(kube::Error::Api(s)) if stand == SetsStand::Likely && s.code == 404 => {
                create_set(&sets, set).await
            }
            other => other,
        };
        if let Err(e) = outcome {
            let set_name = set.metadata.name.as_deref().unwrap_or_default();
            return Err(format!(
                "cannot create or update placeholder set {}/{set_name}: {e} (rotor-drainer needs create and patch on replicasets in {})",
                cfg.namespace, cfg.namespace
            ));
        }
    }
    Ok(MadeSets {
        placeholders: placeholders_wanted(&wanted),
        sets: wanted
            .iter()
            .filter_map(|set| set.metadata.name.clone())
            .collect(),
    })
}

/// The pods on node `name`, read for room made ahead (a drain has its own watch of them).
async fn pods_on(room: &SurgeRoom, name: &str) -> Result<Vec<Pod>, String> {
    let on_node: Api<Pod> = Api::all(room.client.clone());
    on_node
        .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
        .await
        .map(|list| list.items)
        .map_err(|e| format!("cannot list the pods on node {name}: {e}"))
}

/// A node's placeholder sets, as made.
struct MadeSets {
    /// How many placeholders they make in all.
    placeholders: usize,
    /// Their names.
    sets: Vec<String>,
}

async fn create_set(sets: &Api<ReplicaSet>, set: &ReplicaSet) -> Result<(), kube::Error> {
    sets.create(&PostParams::default(), set).await.map(|_| ())
}

/// Brings an existing set to `set`'s replicas and the pods it stands for (a merge patch).
async fn update_set(sets: &Api<ReplicaSet>, set: &ReplicaSet) -> Result<(), kube::Error> {
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let patch = serde_json::json!({
        "metadata": {"annotations": set.metadata.annotations},
        "spec": {"replicas": set.spec.as_ref().and_then(|s| s.replicas)},
    });
    sets.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Makes room ahead for `node`, next in line to drain ([`SurgeRoom::want_ahead`] said so first):
/// takes a `--max-surge` slot if one is free and creates its placeholders, without waiting for
/// them. Its drain finds them (and the slot) when it starts; the machine releases them if the
/// node leaves the line first.
pub async fn reserve_ahead(room: &SurgeRoom, name: &str) {
    let nodes: Api<Node> = Api::all(room.client.clone());
    let node = match nodes.get_opt(name).await {
        Ok(Some(node)) => node,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(node = %name, error = %e, "cannot read the node to make room ahead of its drain; its drain makes the room when it starts");
            return;
        }
    };
    let Some(taint) = find_drain_taint(&node).cloned() else {
        return;
    };
    if !keeps_placeholders_off(&node, &taint) {
        tracing::debug!(node = %name, effect = %taint.effect, "the drain taint does not keep placeholders off the node and it is not cordoned yet: its drain makes the room after the cordon");
        return;
    }
    let owned = room.owned_by_drain.lock().await;
    // Its drain has taken over, or the node left the line while this was on its way (the
    // removal may have run first and found nothing).
    if owned.contains_key(name) || !room.wants_ahead(name) {
        return;
    }
    if !room.take_slot(name) {
        tracing::debug!(node = %name, "no --max-surge slot free: no room made ahead");
        return;
    }
    let made = match pods_on(room, name).await {
        Ok(pods) => create_placeholders(room, &node, &taint, &pods, SetsStand::No).await,
        Err(why) => Err(why),
    };
    match made {
        Ok(made) if made.placeholders == 0 => room.give_back(name),
        Ok(made) => {
            tracing::info!(node = %name, placeholders = made.placeholders, "next in line: made room ahead of its drain")
        }
        Err(why) => {
            tracing::warn!(node = %name, "could not make room ahead of the drain: {why}; its drain tries again when it starts");
            remove_room(room, name).await;
        }
    }
}

/// Removes the room made ahead for `node`, which left the line before its drain started (or
/// whose budgets keep it waiting): nothing, if its drain has taken the room over since.
pub async fn release_ahead(room: &SurgeRoom, node: &str) {
    // Held across the removal: a drain that starts meanwhile waits for it.
    let owned = room.owned_by_drain.lock().await;
    if owned.contains_key(node) {
        return;
    }
    remove_room(room, node).await;
}

/// Waits one poll; false when the drain is cancelled or the drainer stops.
async fn pause(abort: &CancellationToken, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(POLL) => true,
        _ = abort.cancelled() => false,
        _ = stop.cancelled() => false,
    }
}

/// Removes `node`'s room once its drain is over, cancelled, or its node cleaned up: the
/// placeholders (unless this drain freed them already) and the `--max-surge` slot, and the
/// node is no longer its drain's.
pub async fn release(room: &SurgeRoom, node: &str) {
    // Not held across the removal (other drains start and end meanwhile); the node stays its
    // drain's until the end, so nothing is made ahead for it in between.
    let state = room.owned_by_drain.lock().await.get(node).copied();
    match state {
        Some(DrainRoom::Freed { sets_left: false }) => room.give_back(node),
        // Scaled to zero: the placeholders are gone, the empty sets go now.
        Some(DrainRoom::Freed { sets_left: true }) => {
            room.give_back(node);
            remove_sets(&room.client, &room.cfg, node).await;
        }
        Some(DrainRoom::Held) | None => remove_room(room, node).await,
    }
    room.owned_by_drain.lock().await.remove(node);
}

/// Removes `node`'s placeholder sets, then its placeholders, and gives back its `--max-surge`
/// slot: a deletecollection of each by the node's label, in rotor's own namespace. The sets go
/// first, handed over or not (a set left standing would make its pods again, and which this
/// drainer handed over or freed is not known after a failover); the pods left are those a
/// timed-out surge left pending or the evicted pods did not already preempt. Errors are
/// logged: the next leader's [`sweep`] removes what is left (and the garbage collector, once
/// the node is deleted, what was not handed over).
async fn remove_room(room: &SurgeRoom, node: &str) {
    room.give_back(node);
    delete_room(room, node).await;
}

/// Deletes `node`'s placeholder sets, then its placeholders, both attempted whatever the other
/// did; true when both deletions were answered.
async fn delete_room(room: &SurgeRoom, node: &str) -> bool {
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
            tracing::warn!(%node, namespace = %cfg.namespace, error = %e, "could not remove the node's placeholders (rotor-drainer needs deletecollection on pods in its namespace); the next leader's sweep removes them");
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
        "could not remove the node's placeholder sets (rotor-drainer needs deletecollection on replicasets in its namespace); the next leader or the node's deletion removes them",
    )
    .await
}

/// Deletes `node`'s placeholder sets with `params` (whether their pods go with them): one
/// deletecollection by the node's label. False if it failed, logged as `failed` says.
async fn delete_sets(
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

/// Removes the placeholders and placeholder sets whose drain is over (their node is gone, or not
/// being drained): a previous leader's leftovers. Every drainer runs it once as it starts, and a
/// new leader once more. It runs beside the first drains and the room made ahead, so it may
/// list a set made a moment ago: each node's room is removed with `owned_by_drain` locked and
/// only if it is not `room`'s own ([`SurgeRoom::is_ours`]), which making room ahead takes (and
/// a drain's start marks) under the same lock before it creates anything.
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
    // Node by node, with the lock held so that no room for the node begins meanwhile: its sets
    // first (a set left standing would make the pods removed after it again), then its pods.
    let mut removed = 0;
    for (node, pods) in orphans {
        let owned = room.owned_by_drain.lock().await;
        if room.is_ours(&owned, node) {
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
