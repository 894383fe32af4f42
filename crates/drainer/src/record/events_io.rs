//! Posting the drainer's Events ([`crate::record::events::NodeEvent`]) on nodes and pods, and
//! the webhook notices that go with a node's end. Best effort: a failure is only logged.

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::record::events::{NodeEvent, event_note};
use crate::record::notify::{Notice, NoticeKind};
use crate::record::notify_io::Notifier;

/// Says what the drainer does, where an operator looks: Events on the node (or one of its
/// pods) and, for a node's end or a stuck drain, the notification webhooks. Cheap to clone.
#[derive(Clone)]
pub struct Announcer {
    client: kube::Client,
    reporter: Reporter,
    notifier: Notifier,
}

impl Announcer {
    pub fn new(client: kube::Client, reporter: Reporter, notifier: Notifier) -> Announcer {
        Announcer {
            client,
            reporter,
            notifier,
        }
    }

    /// Where notices go (`--notify-webhook`; a no-op without).
    pub fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// Posts `event` with `note` on `node`.
    pub async fn on_node(&self, node: &Node, event: NodeEvent, note: String) {
        // The webhooks hear of a node's end and of a failed drain, in the Event's words (a
        // blocked one only when waiting will not unblock it: see the pass's `record_blockers`).
        let notice = match event {
            NodeEvent::Drained => Some(NoticeKind::NodeDrained),
            NodeEvent::Failed => Some(NoticeKind::NodeStuck),
            _ => None,
        };
        if let Some(kind) = notice {
            self.notifier.send(Notice::new(
                kind,
                node.metadata.name.as_deref(),
                note.clone(),
            ));
        }
        self.publish(event, note, &node_ref(node)).await;
    }

    /// Posts `event` with `note` on one of the node's pods (the replace-by and restart notes).
    pub async fn on_pod(&self, pod: &ObjectReference, event: NodeEvent, note: String) {
        self.publish(event, note, pod).await;
    }

    /// Posts `event` with `note` about `regarding`. A recorder of its own for each Event: kube's
    /// Recorder folds an Event into the last one of the same reason on the same object for
    /// minutes, keeping the first note, so a second blocker, hold or forced pod would read as
    /// the first. The callers post only what is news.
    async fn publish(&self, event: NodeEvent, note: String, regarding: &ObjectReference) {
        let reason = event.reason();
        let ev = Event {
            type_: if event.is_warning() {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(event_note(note)),
            action: "Drain".into(),
            secondary: None,
        };
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(e) = recorder.publish(&ev, regarding).await {
            tracing::warn!(kind = ?regarding.kind, name = ?regarding.name, %reason, error = %e, "could not record an Event");
        }
    }
}

fn node_ref(node: &Node) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: node.metadata.name.clone(),
        uid: node.metadata.uid.clone(),
        ..Default::default()
    }
}
