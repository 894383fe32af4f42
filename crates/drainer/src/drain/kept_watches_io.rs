//! Pod watches opened to weigh a candidate and kept for its drain.
//!
//! The choice reads a candidate's pods to score it, and the drain that starts on it then reads
//! them again to evict them. A kept watch makes that one request: the choice opens the node's
//! pod watch (the same one a drain opens) and reads its pods from it; when the node is chosen,
//! its drain takes the watch over, beginning from the pods it holds (replayed as its first
//! list, [`WatchedPods::replay`]) and going on with its stream.
//!
//! A kept watch costs an open watch on the API server, as each kubelet holds one, and memory:
//! its pods and its connection's buffers (on rotor-sim's bench-50, keeping one for every
//! candidate raised the drainer's peak from 28 to 41 MiB, about 260 KiB a watch). So at most
//! [`KEPT_MAX`] are kept: a new one closes the candidate's watch read longest ago (its read has
//! served its score; if that node is chosen after all, its drain opens a watch of its own, as
//! before). A watch no choice has read for [`KEPT_IDLE`] closes itself, and one whose node is
//! no longer a candidate is closed at the next choice. The choice reads the whole fleet within
//! a few starts, so on bench-50 about two drains in three open a watch of their own. (Keeping
//! only the nodes the planned choice ranked first kept fewer of those it then chose: 1.8 pod
//! reads a node against 1.7. Reading only as many candidates as watches can be kept took it to
//! 1.1 to 1.2, but the choice, knowing a dozen nodes rather than the fleet, made rotations
//! about 3 s longer: docs/benchmarks.md, "The choice's read kept for the drain".)

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::drain::lock;
use crate::drain::watched::{PodEvents, WatchedPods};

/// At most this many watches are kept, claimed ones included: about 3 MiB at the size above,
/// within the drainer's 64 MiB at 20,000 nodes (56.8 MiB draining). Keeping every candidate's
/// saves another 0.5 reads a drained node on bench-50, at 10 MiB more.
pub const KEPT_MAX: usize = 12;
/// A kept watch that no choice has read for this long closes (a claimed one waits for its
/// drain, which takes or releases it): as long as the choice trusts a demand it read (`DEMAND_TTL` in `crate::fleet::choice`), since it
/// reads a candidate again only after that.
pub const KEPT_IDLE: Duration = Duration::from_secs(300);
/// How long a claimed watch stays open at most: its drain takes or releases it long before.
const CLAIMED_FOR: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long the choice waits for a new kept watch's first list before leaving the node
/// unscored.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(30);

/// Where a kept watch's first list stands.
#[derive(Clone, Debug)]
enum Listing {
    Waiting,
    Listed,
    /// No first list: the watch is closed.
    Failed(KeptFailure),
}

/// Why a kept watch has no pods to give.
#[derive(Clone, Debug)]
pub enum KeptFailure {
    /// The watch failed before its first list ended.
    Watch(Arc<watcher::Error>),
    /// It ended or went idle first, or its first list took too long.
    Other(String),
}

impl std::fmt::Display for KeptFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeptFailure::Watch(e) => write!(f, "{e}"),
            KeptFailure::Other(why) => f.write_str(why),
        }
    }
}

/// One kept watch, as its owner holds it. Dropping it closes the watch.
struct Kept {
    /// How long an unread watch stays open.
    idle: Duration,
    pods: Arc<Mutex<WatchedPods>>,
    listing: watch::Receiver<Listing>,
    /// Asks the task for its stream, ending it; dropped, it ends the task too.
    take: oneshot::Sender<oneshot::Sender<PodEvents>>,
    /// Until when the watch is wanted (moved on by each read and by a claim).
    wanted_until: Arc<Mutex<Instant>>,
}

impl Kept {
    /// Opens the watch `events` in a task of its own.
    fn spawn(node: &str, events: PodEvents, idle: Duration) -> Kept {
        let pods = Arc::new(Mutex::new(WatchedPods::default()));
        let (listing_tx, listing) = watch::channel(Listing::Waiting);
        let (take, asked) = oneshot::channel();
        let wanted_until = Arc::new(Mutex::new(Instant::now() + idle));
        tokio::spawn(keep(
            node.to_string(),
            events,
            pods.clone(),
            listing_tx,
            asked,
            wanted_until.clone(),
        ));
        Kept {
            idle,
            pods,
            listing,
            take,
            wanted_until,
        }
    }

    /// Keeps the watch open for another idle period from now.
    fn wanted(&self) {
        self.wanted_for(self.idle);
    }

    fn wanted_for(&self, d: Duration) {
        let mut until = lock(&self.wanted_until);
        *until = (*until).max(Instant::now() + d);
    }

    /// Whether the task is gone (idle, failed or ended): the entry is only in the way.
    fn ended(&self) -> bool {
        self.take.is_closed()
    }

    fn read_until(&self) -> Instant {
        *lock(&self.wanted_until)
    }

    /// The pods once the first list has ended, waiting for it at most `wait`.
    async fn pods(&mut self, wait: Duration) -> Result<Vec<Pod>, KeptFailure> {
        self.wanted();
        let settled = tokio::time::timeout(
            wait,
            self.listing.wait_for(|l| !matches!(l, Listing::Waiting)),
        )
        .await;
        let listing = match settled {
            Ok(Ok(l)) => l.clone(),
            // The task ended without a word: it went idle or its stream ended.
            Ok(Err(_)) => Listing::Failed(KeptFailure::Other("the watch ended".into())),
            Err(_) => Listing::Failed(KeptFailure::Other(format!(
                "its first list did not end within {wait:?}"
            ))),
        };
        if let Listing::Failed(failure) = listing {
            return Err(failure);
        }
        let pods = lock(&self.pods);
        Ok(pods
            .listed()
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default())
    }

    /// The watch's stream, begun from what it has seen; `fresh` if its task is gone.
    fn into_events(self, fresh: PodEvents) -> PodEvents {
        let (reply, answer) = oneshot::channel();
        if self.take.send(reply).is_err() {
            return fresh;
        }
        let pods = self.pods;
        futures::stream::once(async move {
            match answer.await {
                Ok(events) => {
                    let replay = lock(&pods).replay();
                    futures::stream::iter(replay.into_iter().map(Ok))
                        .chain(events)
                        .boxed()
                }
                Err(_) => fresh,
            }
        })
        .flatten()
        .boxed()
    }
}

/// A kept watch's task: feeds its pods, until asked for the stream, unwanted, or failed.
async fn keep(
    node: String,
    mut events: PodEvents,
    pods: Arc<Mutex<WatchedPods>>,
    listing: watch::Sender<Listing>,
    mut asked: oneshot::Receiver<oneshot::Sender<PodEvents>>,
    wanted_until: Arc<Mutex<Instant>>,
) {
    loop {
        let until = *lock(&wanted_until);
        tokio::select! {
            ask = &mut asked => {
                // Every event taken from the stream so far is in `pods`: the taker's replay
                // and the stream's next event join without a gap.
                if let Ok(reply) = ask {
                    let _ = reply.send(events);
                }
                return;
            }
            _ = tokio::time::sleep_until(until) => {
                if *lock(&wanted_until) <= Instant::now() {
                    tracing::debug!(%node, "closing a candidate's pod watch no choice has read lately");
                    return;
                }
            }
            event = events.next() => match event {
                Some(Ok(event)) => {
                    let ended_list = matches!(event, watcher::Event::InitDone);
                    lock(&pods).apply(event);
                    if ended_list {
                        listing.send_replace(Listing::Listed);
                    }
                }
                Some(Err(e)) => {
                    if !matches!(*listing.borrow(), Listing::Listed) {
                        listing.send_replace(Listing::Failed(KeptFailure::Watch(Arc::new(e))));
                        return;
                    }
                    // Listed once: the watcher lists again with back-off, as a drain's does.
                    tracing::debug!(%node, error = %e, "a candidate's pod watch failed; it restarts with back-off");
                }
                None => return,
            },
        }
    }
}

/// The kept watches, by node: candidates' (pruned at each choice) and claimed ones (a drain
/// chose the node and will take the watch over).
pub struct KeptWatches {
    candidates: Mutex<HashMap<String, Kept>>,
    claimed: Mutex<HashMap<String, Kept>>,
    idle: Duration,
}

impl Default for KeptWatches {
    fn default() -> KeptWatches {
        KeptWatches::closing_after(KEPT_IDLE)
    }
}

/// What [`KeptWatches::pods_of`] found.
pub enum KeptPods {
    /// The node's pods, from its kept watch.
    Pods(Vec<Pod>),
    /// No watch kept and none can be (every kept one is claimed by a drain): the caller reads
    /// the pods otherwise.
    NotKept,
    /// The watch gave no first list (and is gone).
    Failed(KeptFailure),
}

impl KeptWatches {
    /// Kept watches that close once unread for `idle`.
    pub fn closing_after(idle: Duration) -> KeptWatches {
        KeptWatches {
            candidates: Mutex::default(),
            claimed: Mutex::default(),
            idle,
        }
    }

    /// `node`'s pods from its kept watch, opening one with `open` (in place of the candidate's
    /// read longest ago when [`KEPT_MAX`] are kept).
    pub async fn pods_of(&self, node: &str, open: impl FnOnce() -> PodEvents) -> KeptPods {
        let mut kept = {
            let mut candidates = lock(&self.candidates);
            candidates.retain(|_, k| !k.ended());
            match candidates.remove(node) {
                Some(kept) => kept,
                None => {
                    let claimed = lock(&self.claimed).len();
                    while candidates.len() + claimed >= KEPT_MAX {
                        if !close_read_longest_ago(&mut candidates, None) {
                            return KeptPods::NotKept;
                        }
                    }
                    Kept::spawn(node, open(), self.idle)
                }
            }
        };
        // Read outside the lock: a first list may take a moment.
        let read = kept.pods(FIRST_LIST_WAIT).await;
        match read {
            Ok(pods) => {
                let mut candidates = lock(&self.candidates);
                candidates.insert(node.to_string(), kept);
                // Reads run side by side and each made room before it began: trim again.
                let claimed = lock(&self.claimed).len();
                while candidates.len() + claimed > KEPT_MAX
                    && close_read_longest_ago(&mut candidates, Some(node))
                {}
                KeptPods::Pods(pods)
            }
            Err(failure) => KeptPods::Failed(failure),
        }
    }

    /// Closes the candidates' watches of nodes not in `keep`, and those gone idle. Claimed ones
    /// stay for their drains.
    pub fn keep_only(&self, keep: &HashSet<String>) {
        lock(&self.candidates).retain(|name, kept| keep.contains(name) && !kept.ended());
        lock(&self.claimed).retain(|_, kept| !kept.ended());
    }

    /// `node` was chosen: its watch, if kept, waits for its drain ([`KeptWatches::take`]).
    pub fn claim(&self, node: &str) {
        let kept = lock(&self.candidates).remove(node);
        if let Some(kept) = kept {
            // Open until the drain takes it, just after its cordon, or ends
            // ([`KeptWatches::release`]): the start's write may wait on the API server.
            kept.wanted_for(CLAIMED_FOR);
            lock(&self.claimed).insert(node.to_string(), kept);
        }
    }

    /// `node`'s kept watch, as a stream that begins with the pods it holds; `fresh` if none.
    pub fn take(&self, node: &str, fresh: PodEvents) -> PodEvents {
        // One lock at a time: `pods_of` holds the candidates' while it counts the claimed.
        let claimed = lock(&self.claimed).remove(node);
        let kept = claimed.or_else(|| lock(&self.candidates).remove(node));
        match kept {
            Some(kept) => kept.into_events(fresh),
            None => fresh,
        }
    }

    /// Closes `node`'s watch, whoever holds it (its drain ended, or never took it).
    pub fn release(&self, node: &str) {
        lock(&self.claimed).remove(node);
        lock(&self.candidates).remove(node);
    }

    /// How many watches are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.candidates).len() + lock(&self.claimed).len()
    }
}

/// Closes the candidate's watch read longest ago, sparing `spare`; false if there was none.
fn close_read_longest_ago(candidates: &mut HashMap<String, Kept>, spare: Option<&str>) -> bool {
    let oldest = candidates
        .iter()
        .filter(|(name, _)| Some(name.as_str()) != spare)
        .min_by_key(|(_, k)| k.read_until())
        .map(|(name, _)| name.clone());
    oldest.is_some_and(|name| candidates.remove(&name).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::watched::tests::pod;

    /// A stream fed by hand: what the test sends, the watch receives.
    fn fed() -> (
        futures::channel::mpsc::UnboundedSender<Result<watcher::Event<Pod>, watcher::Error>>,
        PodEvents,
    ) {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        (tx, rx.boxed())
    }

    fn names(pods: &[Pod]) -> Vec<String> {
        let mut v: Vec<String> = pods
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        v.sort();
        v
    }

    #[tokio::test]
    async fn a_drain_takes_over_the_watch_its_choice_read_without_a_new_one() {
        let kept = KeptWatches::default();
        let (tx, events) = fed();
        tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
        tx.unbounded_send(Ok(watcher::Event::InitApply(pod("a"))))
            .unwrap();
        tx.unbounded_send(Ok(watcher::Event::InitApply(pod("b"))))
            .unwrap();
        tx.unbounded_send(Ok(watcher::Event::InitDone)).unwrap();
        let mut opened = 0;
        let KeptPods::Pods(pods) = kept
            .pods_of("n1", || {
                opened += 1;
                events
            })
            .await
        else {
            panic!("the first list was fed");
        };
        assert_eq!(names(&pods), ["a", "b"]);
        // A second read comes from the same watch.
        tx.unbounded_send(Ok(watcher::Event::Delete(pod("a"))))
            .unwrap();
        tokio::task::yield_now().await;
        let KeptPods::Pods(pods) = kept.pods_of("n1", || unreachable!("kept")).await else {
            panic!("kept");
        };
        assert_eq!(names(&pods), ["b"]);
        assert_eq!(opened, 1);

        // Chosen: a pass that no longer counts it a candidate leaves the claimed watch alone.
        kept.claim("n1");
        kept.keep_only(&HashSet::new());
        assert_eq!(kept.len(), 1);
        let (_unused, fresh) = fed();
        let mut drain = kept.take("n1", fresh);
        assert_eq!(kept.len(), 0);
        // The drain sees the pods as one list, then what the stream brings next.
        tx.unbounded_send(Ok(watcher::Event::Apply(pod("c"))))
            .unwrap();
        let mut seen = WatchedPods::default();
        for _ in 0..4 {
            seen.apply(drain.next().await.unwrap().unwrap());
        }
        let mut uids: Vec<String> = seen.listed().unwrap().keys().cloned().collect();
        uids.sort();
        assert_eq!(uids, ["b", "c"]);
    }

    #[tokio::test]
    async fn a_candidate_no_longer_waiting_has_its_watch_closed() {
        let kept = KeptWatches::default();
        let (tx, events) = fed();
        tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
        tx.unbounded_send(Ok(watcher::Event::InitDone)).unwrap();
        assert!(matches!(kept.pods_of("n1", || events).await, KeptPods::Pods(p) if p.is_empty()));
        kept.keep_only(&HashSet::from(["n2".to_string()]));
        assert_eq!(kept.len(), 0);
        // The task let go of its stream: the sender sees the watch closed.
        assert!(closed(&tx).await, "the closed watch's stream is still read");
    }

    #[tokio::test]
    async fn a_watch_that_fails_before_its_list_is_not_kept_and_says_why() {
        let kept = KeptWatches::default();
        let (tx, events) = fed();
        let status = kube::core::Status::failure(
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
            "Invalid",
        )
        .with_code(422);
        tx.unbounded_send(Err(watcher::Error::WatchStartFailed(kube::Error::Api(
            Box::new(status),
        ))))
        .unwrap();
        let KeptPods::Failed(KeptFailure::Watch(error)) = kept.pods_of("n1", || events).await
        else {
            panic!("the watch failed");
        };
        assert!(error.to_string().contains("sendInitialEvents"), "{error}");
        assert_eq!(kept.len(), 0);
    }

    #[tokio::test]
    async fn a_watch_no_choice_reads_closes_itself() {
        // Wide margins: real time, on a loaded machine.
        const IDLE: Duration = Duration::from_secs(2);
        let kept = KeptWatches::closing_after(IDLE);
        let (tx, events) = fed();
        tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
        tx.unbounded_send(Ok(watcher::Event::InitDone)).unwrap();
        assert!(matches!(
            kept.pods_of("n1", || events).await,
            KeptPods::Pods(_)
        ));
        // A chosen node's watch waits for its drain, however long it makes room first.
        let (claimed_tx, claimed_events) = fed();
        claimed_tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
        claimed_tx
            .unbounded_send(Ok(watcher::Event::InitDone))
            .unwrap();
        assert!(matches!(
            kept.pods_of("n2", || claimed_events).await,
            KeptPods::Pods(_)
        ));
        kept.claim("n2");
        tokio::time::sleep(IDLE / 4).await;
        assert!(!tx.is_closed());
        // A read keeps it open for another idle period.
        assert!(matches!(
            kept.pods_of("n1", || unreachable!("kept")).await,
            KeptPods::Pods(_)
        ));
        tokio::time::sleep(IDLE / 2).await;
        assert!(!tx.is_closed(), "a watch read {:?} ago closed", IDLE / 2);
        tokio::time::sleep(IDLE * 5 / 4).await;
        assert!(tx.is_closed(), "an unread watch stayed open past {IDLE:?}");
        assert!(
            !claimed_tx.is_closed(),
            "a claimed watch closed before its drain took it"
        );
        // Gone from the count at the next choice; a drain on it opens its own.
        kept.keep_only(&HashSet::from(["n1".to_string()]));
        assert_eq!(kept.len(), 1);
    }

    /// Keeps a listed watch for `node`; its sender.
    async fn keep_listed(
        kept: &KeptWatches,
        node: &str,
    ) -> futures::channel::mpsc::UnboundedSender<Result<watcher::Event<Pod>, watcher::Error>> {
        let (tx, events) = fed();
        tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
        tx.unbounded_send(Ok(watcher::Event::InitDone)).unwrap();
        assert!(matches!(
            kept.pods_of(node, || events).await,
            KeptPods::Pods(_)
        ));
        tx
    }

    async fn closed(
        tx: &futures::channel::mpsc::UnboundedSender<Result<watcher::Event<Pod>, watcher::Error>>,
    ) -> bool {
        for _ in 0..10 {
            if tx.is_closed() {
                return true;
            }
            tokio::task::yield_now().await;
        }
        false
    }

    #[tokio::test]
    async fn past_the_limit_a_new_read_closes_the_candidate_read_longest_ago() {
        let kept = KeptWatches::default();
        let mut senders = Vec::new();
        for i in 0..KEPT_MAX {
            senders.push(keep_listed(&kept, &format!("n{i}")).await);
            // Reads a moment apart, so "longest ago" is one of them.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // n0 is chosen: a claimed watch is never closed for room.
        kept.claim("n0");
        let newest = keep_listed(&kept, "one-more").await;
        assert_eq!(kept.len(), KEPT_MAX);
        assert!(!closed(&senders[0]).await, "the claimed watch was closed");
        assert!(
            closed(&senders[1]).await,
            "the read longest ago is still kept"
        );
        assert!(senders[2..].iter().all(|tx| !tx.is_closed()));
        assert!(!newest.is_closed());

        // With every kept watch claimed, the choice is told to read otherwise.
        let all = KeptWatches::default();
        for i in 0..KEPT_MAX {
            keep_listed(&all, &format!("n{i}")).await;
            all.claim(&format!("n{i}"));
        }
        assert!(matches!(
            all.pods_of("one-more", || unreachable!("no room")).await,
            KeptPods::NotKept
        ));
    }
}
