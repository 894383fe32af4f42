//! What surge's I/O shares: [`SurgeRoom`] (the `--max-surge` slots, which node's room a drain
//! has taken over, the holds on room made ahead) and the creation of a node's placeholder sets,
//! which a drain and the room made ahead both do.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use prometheus_client::metrics::gauge::Gauge;

use crate::drain::lock;
use crate::drain::pods::DrainOptions;
use crate::drain::surge::{
    AHEAD_AFTER_START, PendingPlaceholders, SurgeConfig, may_surge, placeholder_sets,
    placeholders_wanted, pods_needing_room,
};
use crate::retry_later::RetryLater;

/// What surge's I/O works with: the client, the settings, the `--max-surge` slots and the
/// fleet's size they are a share of. One per drainer, shared by the drains (which make room)
/// and the loop over nodes (which makes room ahead, releases it and sweeps leftovers).
pub struct SurgeRoom {
    pub(super) client: kube::Client,
    pub(super) cfg: SurgeConfig,
    /// The drain's pod filters: room is made for the pods a drain would evict.
    pub(super) options: DrainOptions,
    /// The nodes whose placeholders are outstanding, for `--max-surge`.
    pub(super) held: Mutex<BTreeSet<String>>,
    /// How many nodes the cluster has, as the node watch last counted, for a `--max-surge`
    /// percentage.
    pub(super) fleet_size: AtomicUsize,
    /// The `surge_nodes` gauge: how many slots are held.
    pub(super) holding: Gauge,
    /// The nodes whose drain has taken over their room, and how far: what the loop over nodes
    /// does ahead of a drain (room made or released ahead) leaves them alone from then on.
    /// Locked only to read or change it, never across a request.
    pub(super) owned_by_drain: tokio::sync::Mutex<BTreeMap<String, DrainRoom>>,
    /// One lock per node whose room is being made, changed or removed
    /// ([`lock_node`](SurgeRoom::lock_node)): held across the room made ahead's create and
    /// release, the sweep's and a release's removals, and while a drain takes its node over,
    /// so that nothing done ahead lands after the drain has taken over (a set made again after
    /// the room was freed would make placeholders again). Per node, so that one node's slow
    /// request (kube retries a 429 or 503 for minutes) holds up no other node's room.
    pub(super) node_locks: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Until when no room is made ahead: a drain just started may be about to free its room,
    /// or one freed it lately ([`AHEAD_AFTER_START`],
    /// [`AHEAD_AFTER_FREED`](crate::drain::surge::AHEAD_AFTER_FREED)).
    pub(super) no_room_ahead_until: Mutex<Option<Instant>>,
    /// The nodes the loop over nodes wants room made ahead for, as it last said: set and
    /// cleared in its own order, before the tasks that make and remove the room run (in
    /// whatever order they get the lock), so a removal that runs first is not undone. A drain
    /// clears its node's as it begins, before its own making or removal of the room; the loop
    /// wants room for the node again only once that drain has ended.
    pub(super) wanted_ahead: Mutex<BTreeSet<String>>,
    /// Nodes whose room could not be removed at their release (a 5xx, a timeout, no RBAC):
    /// they keep their `--max-surge` slot until a later try removes it
    /// ([`retry_removals`](SurgeRoom::retry_removals)), so a removal that keeps failing stops
    /// surge instead of leaving more placeholders behind.
    pub(super) unremoved: Mutex<BTreeSet<String>>,
    /// When the rooms in `unremoved` are next tried.
    pub(super) removal_retry: Mutex<Option<RetryLater>>,
    /// Rotor's placeholders that wait for a node, as the watch of every placeholder shows them
    /// ([`observe_placeholder`](SurgeRoom::observe_placeholder)): a drain about to free its
    /// room waits for them.
    pub(super) pending: tokio::sync::watch::Sender<PendingPlaceholders>,
}

/// A node's lock, held ([`SurgeRoom::lock_node`]); dropped, it lets go and the lock is
/// forgotten unless someone else holds or waits for it.
pub(super) struct NodeGuard<'a> {
    room: &'a SurgeRoom,
    node: String,
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for NodeGuard<'_> {
    fn drop(&mut self) {
        // Let go first: the guard holds a clone of the lock.
        self.held.take();
        self.room.forget_node_lock(&self.node);
    }
}

/// How long after a failed removal of a node's room it is tried again; each further try waits
/// twice as long, up to [`REMOVAL_RETRY_AT_MOST`].
pub(super) const REMOVAL_RETRY_FIRST: Duration = Duration::from_secs(5);
pub(super) const REMOVAL_RETRY_AT_MOST: Duration = Duration::from_secs(300);

/// Where a drain's room is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DrainRoom {
    /// Its placeholders (if any) stand: the release removes them.
    Held,
    /// Its placeholders were removed just before its evictions, or its room was removed
    /// while it held the node (a surge that failed). What the release has left to do: give
    /// back the `--max-surge` slot, and delete the sets if they were only scaled to zero.
    Freed { sets_left: bool },
    /// Its surge timed out and its sets were deleted, their placeholders left standing (in
    /// case the capacity comes late): the release removes the placeholders.
    HandedOver,
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
            node_locks: Mutex::default(),
            no_room_ahead_until: Mutex::default(),
            wanted_ahead: Mutex::default(),
            unremoved: Mutex::default(),
            removal_retry: Mutex::default(),
            pending: tokio::sync::watch::Sender::new(PendingPlaceholders::default()),
        }
    }

    /// Waits for `node`'s lock (see `node_locks`) and holds it until the guard is dropped.
    pub(super) async fn lock_node(&self, node: &str) -> NodeGuard<'_> {
        let node_lock = lock(&self.node_locks)
            .entry(node.to_string())
            .or_default()
            .clone();
        NodeGuard {
            room: self,
            node: node.to_string(),
            held: Some(node_lock.lock_owned().await),
        }
    }

    /// Forgets `node`'s lock once no one holds or waits for it (each holds a clone): taken from
    /// the map and cloned under the same mutex, so no one can be about to. The map keeps only
    /// the nodes whose room is being worked on.
    fn forget_node_lock(&self, node: &str) {
        let mut locks = lock(&self.node_locks);
        if locks
            .get(node)
            .is_some_and(|node_lock| Arc::strong_count(node_lock) == 1)
        {
            locks.remove(node);
        }
    }

    /// `node`'s room could not be removed: it keeps its slot, and is tried again after the
    /// current wait (the first [`REMOVAL_RETRY_FIRST`]).
    pub(super) fn keep_for_removal(&self, node: &str, now: Instant) {
        lock(&self.unremoved).insert(node.to_string());
        lock(&self.removal_retry).get_or_insert_with(|| {
            RetryLater::after(now, REMOVAL_RETRY_FIRST, REMOVAL_RETRY_AT_MOST)
        });
    }

    /// Whether the rooms that could not be removed are due to be tried again at `now`: the
    /// caller tries them then, and the next try, if one is still needed, waits twice as long.
    pub fn removals_due(&self, now: Instant) -> bool {
        let mut retry = lock(&self.removal_retry);
        if lock(&self.unremoved).is_empty() {
            *retry = None;
            return false;
        }
        retry.as_mut().is_some_and(|retry| retry.due(now))
    }

    /// Whether `node`'s room waits to be removed again.
    pub(crate) fn awaits_removal(&self, node: &str) -> bool {
        lock(&self.unremoved).contains(node)
    }

    /// Takes in one event of the watch of every placeholder, waking the drains that wait for
    /// pending ones.
    pub fn observe_placeholder(&self, event: watcher::Event<Pod>) {
        self.pending.send_modify(|pending| pending.observe(event));
    }

    /// Whether room may be made ahead now: no drain started or freed its room lately, so the
    /// replacements of its evictions have had the time to take that room.
    pub fn quiet_for_room_ahead(&self) -> bool {
        lock(&self.no_room_ahead_until).is_none_or(|until| Instant::now() >= until)
    }

    /// The loop over nodes wants room made ahead for `node`
    /// ([`reserve_ahead`](super::reserve_ahead) makes it).
    pub fn want_ahead(&self, node: &str) {
        lock(&self.wanted_ahead).insert(node.to_string());
    }

    /// Room ahead is no longer wanted for `node`: it left the line, or its drain begins.
    pub fn unwant_ahead(&self, node: &str) {
        lock(&self.wanted_ahead).remove(node);
    }

    pub(crate) fn wants_ahead(&self, node: &str) -> bool {
        lock(&self.wanted_ahead).contains(node)
    }

    /// A drain starts on a node: its room, if made ahead and ready, is freed within moments.
    pub fn drain_starting(&self) {
        self.hold_room_ahead(AHEAD_AFTER_START);
    }

    /// No room is made ahead for `hold` from now (or longer, if already held longer).
    pub(super) fn hold_room_ahead(&self, hold: Duration) {
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
    pub(crate) fn take_slot(&self, node: &str) -> bool {
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

    pub(super) fn give_back(&self, node: &str) {
        let mut held = lock(&self.held);
        held.remove(node);
        self.holding.set(held.len() as i64);
    }

    /// Whether `node` holds a `--max-surge` slot.
    #[cfg(test)]
    pub(crate) fn holds_slot(&self, node: &str) -> bool {
        lock(&self.held).contains(node)
    }

    /// A room on [`offline_client`](crate::drain::shared::offline_client).
    #[cfg(test)]
    pub(crate) fn offline() -> std::sync::Arc<SurgeRoom> {
        std::sync::Arc::new(SurgeRoom::new(
            crate::drain::shared::offline_client(),
            crate::drain::surge::tests::cfg(),
            DrainOptions::default(),
            Gauge::default(),
        ))
    }

    /// Whether `node`'s room is this drainer's: a drain has taken it over, or a slot is held
    /// for it (room being made, or made ahead). Read with `owned_by_drain` locked, as `owned`
    /// (and the node's lock held, so that it stays true or false while the caller acts).
    pub(super) fn is_ours(&self, owned: &BTreeMap<String, DrainRoom>, node: &str) -> bool {
        owned.contains_key(node) || lock(&self.held).contains(node)
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
        // What could not be removed is an earlier term's too: the sweep removes it.
        lock(&self.unremoved).clear();
        *lock(&self.removal_retry) = None;
        let mut held = lock(&self.held);
        held.clear();
        self.holding.set(0);
    }
}

/// Whether a node's placeholder sets are expected to stand already: the first request for
/// each is a create when not, an update when they are (a drain whose room was made ahead), and
/// the other follows when the guess was wrong (a set made before a restart, or removed since).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum SetsStand {
    No,
    Likely,
}

/// Makes the placeholder sets for those of `pods` (the node's) that need room. A set made
/// earlier (ahead of the drain, or before a restart) has the same name; it is brought to the
/// node's pods as they are now, its replicas and the pods it stands for, so a set made ahead
/// while the node had fewer or more pods serves the drain exactly. Returns how many
/// placeholders the node needs, in which sets; on an error, says what failed and what rotor
/// needs.
pub(super) async fn create_placeholders(
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

/// A node's placeholder sets, as made.
pub(super) struct MadeSets {
    /// How many placeholders they make in all.
    pub(super) placeholders: usize,
    /// Their names.
    pub(super) sets: Vec<String>,
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
