//! The watch over one node's pods that a drain feeds on. Where the API server can, it is one
//! request: a watch that begins with the pods already there (`sendInitialEvents`, the WatchList
//! feature, on by default in Kubernetes 1.32 and from 1.34), served from the API server's watch
//! cache, instead of a list followed by a watch. An API server that refuses it (older ones, 1.33,
//! or the feature gate off) answers 422 naming `sendInitialEvents`; from then on this drainer
//! lists and watches, as kube's watcher always did.

use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use crate::drain::kept_watches_io::{KeptFailure, KeptPods, KeptWatches};
use crate::drain::watched::PodEvents;
use crate::watch_backoff::WatchBackoffExt;

/// Opens the drains' pod watches, remembering whether the API server streams initial events,
/// and keeps the watches the choice opened to weigh candidates for their drains.
pub struct PodWatches {
    client: kube::Client,
    streaming: AtomicBool,
    kept: KeptWatches,
}

impl PodWatches {
    pub fn new(client: kube::Client) -> PodWatches {
        PodWatches {
            client,
            streaming: AtomicBool::new(true),
            kept: KeptWatches::default(),
        }
    }

    /// `node`'s pods for a drain: the watch the choice kept for it when there is one, else a
    /// new one.
    pub fn open(&self, node: &str) -> PodEvents {
        self.kept.take(node, self.open_new(node))
    }

    /// `node`'s pods for the choice to weigh it, read from a watch kept for its drain; `None`
    /// when no more watches may be kept (the caller lists them).
    pub async fn pods_to_weigh(&self, node: &str) -> Result<Option<Vec<Pod>>, String> {
        let mut refused = false;
        loop {
            match self.kept.pods_of(node, || self.open_new(node)).await {
                KeptPods::Pods(pods) => return Ok(Some(pods)),
                KeptPods::NotKept => return Ok(None),
                // Once: from then on watches list first, which the API server accepts. (Reads
                // run side by side: another may have turned streaming off already.)
                KeptPods::Failed(KeptFailure::Watch(error))
                    if !refused && refuses_streaming(&error) =>
                {
                    refused = true;
                    self.stop_streaming(node);
                }
                KeptPods::Failed(failure) => return Err(failure.to_string()),
            }
        }
    }

    /// The watches kept for candidates and chosen nodes.
    pub fn kept(&self) -> &KeptWatches {
        &self.kept
    }

    /// `node`'s pods, retried after a failure with [`crate::watch_backoff::WatchBackoff`].
    fn open_new(&self, node: &str) -> PodEvents {
        let api: Api<Pod> = Api::all(self.client.clone());
        watcher(api, self.config(node))
            // A drain never reads them, and they are most of a pod's size in memory (each
            // manager's field set is a JSON tree): ten drains of 30 pods held 5 MiB with them.
            .modify(|pod| pod.metadata.managed_fields = None)
            .watch_backoff()
            .boxed()
    }

    fn config(&self, node: &str) -> watcher::Config {
        // From the watch cache rather than read through to etcd: a drain's evictions wait for
        // it, and a consistent read costs tens of milliseconds at every start. A cached read
        // may lag etcd by moments; the watch goes on from its version, so a pod it missed
        // arrives as an event just after it, like a pod bound just after a consistent list
        // would: the race `--settle` and the node's quiet time before it counts as drained are
        // there for. One node's pods need no pages.
        from_watch_cache(
            watcher::Config::default().fields(&format!("spec.nodeName={node}")),
            self.streaming.load(Ordering::Relaxed),
        )
    }

    /// Whether `error` is the API server refusing a streaming watch. If so, every watch opened
    /// from now on lists first; the caller opens `node`'s again.
    pub fn fall_back_if_refused(&self, node: &str, error: &watcher::Error) -> bool {
        if !refuses_streaming(error) {
            return false;
        }
        self.stop_streaming(node);
        true
    }

    fn stop_streaming(&self, node: &str) {
        if self.streaming.swap(false, Ordering::Relaxed) {
            tracing::info!(%node, "the API server does not stream a watch's initial pods (the WatchList feature is off); drains list each node's pods, then watch them");
        }
    }
}

/// `config` set to begin with the objects already there, from the API server's watch cache
/// (resourceVersion 0): streamed as the watch's first events where the API server can
/// (`streaming`), else one list, unpaged, since kube sends no resourceVersion 0 on a list with a
/// page size.
pub fn from_watch_cache(config: watcher::Config, streaming: bool) -> watcher::Config {
    if streaming {
        return config.streaming_lists();
    }
    let mut config = config.any_semantic();
    config.page_size = None;
    config
}

/// The API server's answer when the WatchList feature is off: 422 Invalid, "sendInitialEvents
/// is forbidden for watch unless the WatchList feature gate is enabled" (400 is taken too: a
/// proxy may rewrite it as a bad request).
pub fn refuses_streaming(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) => {
            matches!(status.code, 400 | 422) && status.message.contains("sendInitialEvents")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn refused(code: u16, message: &str) -> watcher::Error {
        let status = Status::failure(message, "Invalid").with_code(code);
        watcher::Error::WatchStartFailed(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn an_api_server_without_watch_list_is_recognised_by_its_answer() {
        // The text kube-apiserver sends, as it words invalid list options.
        let answer = r#"ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"#;
        assert!(refuses_streaming(&refused(422, answer)));
        assert!(refuses_streaming(&refused(400, answer)));
    }

    #[test]
    fn other_failures_keep_the_streaming_watch() {
        assert!(!refuses_streaming(&refused(
            403,
            "pods is forbidden: User cannot watch resource \"pods\""
        )));
        assert!(!refuses_streaming(&refused(
            400,
            "unable to parse requirement"
        )));
        assert!(!refuses_streaming(&refused(
            500,
            "sendInitialEvents: etcdserver: request timed out"
        )));
        let gone = Status::failure("too old resource version", "Expired");
        assert!(!refuses_streaming(&watcher::Error::WatchError(Box::new(
            gone
        ))));
    }
}
