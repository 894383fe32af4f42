//! One drain's view of its node's pods: the watch opened once as the drain starts (the one the
//! choice kept for the node when there is one), read by the surge step, which makes room for the
//! pods it shows, and then by the evictions. One read of the node's pods per drain.

use std::collections::HashMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;

use crate::drain::shared::{Drains, Stops};
use crate::drain::watched::{PodEvents, WatchedPods};
use crate::error::DrainError;

/// A node's pod watch and the pods it has shown so far.
pub(crate) struct NodePods {
    node: String,
    events: PodEvents,
    pods: WatchedPods,
    /// The stream has ended: it is not polled again (a stream that has ended may not be).
    ended: bool,
}

/// Why [`NodePods::until_listed`] returned without the pods.
#[derive(Debug)]
pub(crate) enum NotListed {
    /// The drain was cancelled or the drainer is stopping.
    Interrupted,
    /// The watch's stream ended (kube's watcher does not end; this is a defect, reported).
    Ended(DrainError),
}

impl NodePods {
    /// Opens `node`'s pod watch for its drain.
    pub fn open(drains: &Drains, node: &str) -> NodePods {
        NodePods {
            node: node.to_string(),
            events: drains.pod_watches.open(node),
            pods: WatchedPods::default(),
            ended: false,
        }
    }

    /// Whether the watch's stream has ended (the drain cannot go on reading its pods).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The pods, once the watch's first list has ended.
    pub fn listed(&self) -> Option<&HashMap<String, Pod>> {
        self.pods.listed()
    }

    /// Takes the watch's next event in. Returns the UIDs of the pods the event removed (a
    /// re-list may remove several); an error
    /// only when the stream ended. A failed watch restarts with back-off (said in the log); one
    /// the API server refused to stream is opened again as a list and a watch.
    pub async fn next(&mut self, drains: &Drains) -> Result<Vec<String>, DrainError> {
        let ended = || DrainError::PodWatchEnded {
            node: self.node.clone(),
        };
        if self.ended {
            return Err(ended());
        }
        match self.events.next().await {
            Some(Ok(event)) => Ok(self.pods.apply(event)),
            Some(Err(e)) => {
                if drains.pod_watches.fall_back_if_refused(&self.node, &e) {
                    self.events = drains.pod_watches.open(&self.node);
                } else {
                    tracing::warn!(node = %self.node, error = %e, "watching the node's pods failed; it restarts with back-off");
                }
                Ok(Vec::new())
            }
            None => {
                self.ended = true;
                Err(ended())
            }
        }
    }

    /// Waits until the watch has listed the node's pods.
    pub async fn until_listed(
        &mut self,
        drains: &Drains,
        stops: &Stops,
    ) -> Result<Vec<Pod>, NotListed> {
        loop {
            if let Some(pods) = self.listed() {
                return Ok(pods.values().cloned().collect());
            }
            tokio::select! {
                _ = stops.stop.cancelled() => return Err(NotListed::Interrupted),
                _ = stops.abort.cancelled() => return Err(NotListed::Interrupted),
                fed = self.next(drains) => if let Err(e) = fed {
                    return Err(NotListed::Ended(e));
                },
            }
        }
    }

    /// Runs `work` while keeping the watch read, so its events do not back up at the API
    /// server while the surge step waits (up to `--surge-timeout`). An ended stream stops the
    /// reading; the evictions report it.
    pub async fn read_while<T>(&mut self, drains: &Drains, work: impl Future<Output = T>) -> T {
        tokio::pin!(work);
        let mut reading = true;
        loop {
            tokio::select! {
                done = &mut work => return done,
                fed = self.next(drains), if reading => if fed.is_err() {
                    reading = false;
                },
            }
        }
    }
}
