//! Notifications (`--notify-webhook`): what happens to the rotation, POSTed as JSON to webhooks,
//! in the order it happened. The body carries a `text` line, so a Slack-compatible incoming
//! webhook (Slack, Mattermost, Rocket.Chat, Teams workflows) shows it as it is, and the fields
//! for anything that parses it.
//!
//! What a notice says is decided here; sending it is [`crate::record::notify_io`]'s.

use jiff::Timestamp;
use rotor_core::http::HttpTarget;
use serde::Serialize;

/// What a notice is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum NoticeKind {
    /// The first drain of a rotation started.
    RotationStarted,
    /// A node is drained.
    NodeDrained,
    /// A node's drain is blocked or failed.
    NodeStuck,
    /// The circuit breaker halted the rotation.
    RotationHalted,
    /// No tainted node is left to drain.
    RotationFinished,
}

impl NoticeKind {
    pub const ALL: [NoticeKind; 5] = [
        NoticeKind::RotationStarted,
        NoticeKind::NodeDrained,
        NoticeKind::NodeStuck,
        NoticeKind::RotationHalted,
        NoticeKind::RotationFinished,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NoticeKind::RotationStarted => "RotationStarted",
            NoticeKind::NodeDrained => "NodeDrained",
            NoticeKind::NodeStuck => "NodeStuck",
            NoticeKind::RotationHalted => "RotationHalted",
            NoticeKind::RotationFinished => "RotationFinished",
        }
    }
}

/// One notice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub kind: NoticeKind,
    /// The node it is about, if one.
    pub node: Option<String>,
    /// What happened, in a sentence.
    pub detail: String,
    pub time: Timestamp,
}

impl Notice {
    pub fn new(kind: NoticeKind, node: Option<&str>, detail: impl Into<String>) -> Notice {
        Notice {
            kind,
            node: node.map(str::to_string),
            detail: detail.into(),
            time: Timestamp::now(),
        }
    }

    /// The JSON body: `text` for chat webhooks, then the fields. `cluster` names the cluster
    /// (`--notify-cluster`; empty leaves it out).
    pub fn body(&self, cluster: &str) -> serde_json::Value {
        let prefix = if cluster.is_empty() {
            "rotor".to_string()
        } else {
            format!("rotor [{cluster}]")
        };
        let subject = match (self.kind, &self.node) {
            (NoticeKind::RotationStarted, _) => "rotation started".to_string(),
            (NoticeKind::NodeDrained, Some(node)) => format!("node {node} drained"),
            (NoticeKind::NodeStuck, Some(node)) => format!("node {node} stuck"),
            (NoticeKind::RotationHalted, _) => "rotation HALTED".to_string(),
            (NoticeKind::RotationFinished, _) => "rotation finished".to_string(),
            (kind, None) => kind.name().to_string(),
        };
        serde_json::json!({
            "text": format!("{prefix}: {subject}: {}", self.detail),
            "event": self.kind.name(),
            "cluster": cluster,
            "node": self.node,
            "detail": self.detail,
            "time": self.time.to_string(),
        })
    }
}

/// Where and how notices go.
#[derive(Clone, Debug)]
pub struct NotifyConfig {
    pub webhooks: Vec<HttpTarget>,
    /// `--notify-cluster`.
    pub cluster: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(kind: NoticeKind, node: Option<&str>, detail: &str) -> Notice {
        Notice {
            time: "2026-11-26T15:00:00Z".parse().unwrap(),
            ..Notice::new(kind, node, detail)
        }
    }

    #[test]
    fn the_body_has_a_chat_line_and_the_fields() {
        let body = notice(
            NoticeKind::NodeDrained,
            Some("ip-10-0-1-7"),
            "drained in 3m12s (taint reason ami)",
        )
        .body("prod-eu");
        assert_eq!(
            body,
            serde_json::json!({
                "text": "rotor [prod-eu]: node ip-10-0-1-7 drained: drained in 3m12s (taint reason ami)",
                "event": "NodeDrained",
                "cluster": "prod-eu",
                "node": "ip-10-0-1-7",
                "detail": "drained in 3m12s (taint reason ami)",
                "time": "2026-11-26T15:00:00Z",
            })
        );
        let halted = notice(
            NoticeKind::RotationHalted,
            None,
            "the cluster has not absorbed ...",
        )
        .body("");
        assert_eq!(
            halted["text"],
            "rotor: rotation HALTED: the cluster has not absorbed ..."
        );
        assert_eq!(halted["node"], serde_json::Value::Null);
    }
}
