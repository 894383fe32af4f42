//! The benchmark's clock: one watch on nodes, opened before t=0 so that it costs no counted
//! request, recording when each node first shows `rotor.dev/phase=drained` and when it is
//! deleted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::WatchEvent;
use tokio::task::JoinHandle;

use crate::sim::BenchSim;

#[derive(Default)]
struct NodeSeen {
    drained: Option<Instant>,
    gone: Option<Instant>,
}

#[derive(Default)]
struct WatchState {
    nodes: HashMap<String, NodeSeen>,
    ended: Option<String>,
}

/// The watch, read on the simulator's runtime until dropped.
pub struct NodeWatch {
    state: Arc<Mutex<WatchState>>,
    reader: JoinHandle<()>,
}

impl NodeWatch {
    /// Watches every node from `resource_version`, or only `only` (a field selector on its
    /// name). Returns once the simulator has answered, so the watch is counted before any later
    /// request.
    pub fn start(
        sim: &BenchSim,
        resource_version: &str,
        only: Option<&str>,
    ) -> anyhow::Result<NodeWatch> {
        let selector = only
            .map(|n| format!("&fieldSelector=metadata.name%3D{n}"))
            .unwrap_or_default();
        // No timeoutSeconds (kube's `Api::watch` always sends one): the simulator keeps the
        // watch for 30 minutes, longer than any run.
        let request = http::Request::get(format!(
            "/api/v1/nodes?watch=true&resourceVersion={resource_version}{selector}"
        ))
        .body(Vec::new())
        .context("the node watch request")?;
        let events = sim
            .runtime
            .block_on(sim.client.request_events::<Node>(request))
            .context("the node watch")?;
        let state = Arc::new(Mutex::new(WatchState::default()));
        let st = state.clone();
        let reader = sim.runtime.spawn(async move {
            let mut events = std::pin::pin!(events);
            let why = loop {
                match events.try_next().await {
                    Ok(Some(event)) => on_watch_event(event, &st),
                    Ok(None) => break "the stream closed".to_string(),
                    Err(e) => break format!("{e}"),
                }
            };
            st.lock().expect("watch state").ended.get_or_insert(why);
        });
        Ok(NodeWatch { state, reader })
    }

    pub fn ended(&self) -> Option<String> {
        self.state.lock().expect("watch state").ended.clone()
    }

    pub fn done_at(&self, node: &str) -> Option<Instant> {
        let s = self.state.lock().expect("watch state");
        let n = s.nodes.get(node)?;
        match (n.drained, n.gone) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn on_watch_event(event: WatchEvent<Node>, state: &Mutex<WatchState>) {
    let now = Instant::now();
    let mut s = state.lock().expect("watch state");
    let (node, deleted) = match event {
        WatchEvent::Added(n) | WatchEvent::Modified(n) => (n, false),
        WatchEvent::Deleted(n) => (n, true),
        WatchEvent::Bookmark(_) => return,
        WatchEvent::Error(e) => {
            s.ended.get_or_insert_with(|| format!("watch error: {e}"));
            return;
        }
    };
    let Some(name) = node.metadata.name else {
        return;
    };
    let seen = s.nodes.entry(name).or_default();
    if deleted {
        seen.gone.get_or_insert(now);
    } else if node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("rotor.dev/phase"))
        .is_some_and(|p| p == "drained")
    {
        seen.drained.get_or_insert(now);
    }
}
