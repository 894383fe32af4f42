//! Notifications (`--notify-webhook`): what happens to the rotation, POSTed as JSON to webhooks,
//! in the order it happened. The body carries a `text` line, so a Slack-compatible incoming
//! webhook (Slack, Mattermost, Rocket.Chat, Teams workflows) shows it as it is, and the fields
//! for anything that parses it.
//!
//! Never in the way of draining: notices go through a bounded queue (a full queue drops the
//! notice with a warning), and one background task sends them, each retried with back-off on
//! no answer, a 429 or a 5xx, and given up after that with a warning.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use jiff::Timestamp;
use rotor_core::http::{HttpClient, HttpError, HttpTarget};
use serde::Serialize;
use tokio::sync::mpsc;

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

/// Notices waiting to be sent at most; beyond, new ones are dropped (never the drains' wait).
const QUEUE: usize = 256;
/// One POST's deadline.
const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// The sending end; a no-op without webhooks. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Notifier {
    tx: Option<mpsc::Sender<Notice>>,
}

impl Notifier {
    /// Starts the task that sends notices, or a no-op notifier without `cfg`.
    pub fn start(cfg: Option<NotifyConfig>) -> Result<Notifier, HttpError> {
        let Some(cfg) = cfg.filter(|c| !c.webhooks.is_empty()) else {
            return Ok(Notifier::default());
        };
        let http = HttpClient::new()?;
        let (tx, mut rx) = mpsc::channel::<Notice>(QUEUE);
        tokio::spawn(async move {
            while let Some(notice) = rx.recv().await {
                let body = notice.body(&cfg.cluster);
                for webhook in &cfg.webhooks {
                    deliver(&http, webhook, &body, notice.kind).await;
                }
            }
        });
        Ok(Notifier { tx: Some(tx) })
    }

    /// Queues `notice`; never waits.
    pub fn send(&self, notice: Notice) {
        let Some(tx) = &self.tx else { return };
        if let Err(e) = tx.try_send(notice) {
            tracing::warn!(error = %e, "notification queue full or closed: dropping a notice (the webhooks are slower than the rotation)");
        }
    }
}

/// Why one POST did not land, and whether to try again.
#[derive(Debug, thiserror::Error)]
enum Undelivered {
    #[error("{0}")]
    Unreachable(HttpError),
    #[error("answered {0}")]
    Status(u16),
}

impl Undelivered {
    fn worth_retrying(&self) -> bool {
        match self {
            Undelivered::Unreachable(_) => true,
            Undelivered::Status(status) => *status == 429 || *status >= 500,
        }
    }
}

async fn deliver(
    http: &HttpClient,
    webhook: &HttpTarget,
    body: &serde_json::Value,
    kind: NoticeKind,
) {
    let post = || async {
        match http.post_json(webhook, body, POST_TIMEOUT).await {
            Ok(answer) if (200..300).contains(&answer.status) => Ok(()),
            Ok(answer) => Err(Undelivered::Status(answer.status)),
            Err(e) => Err(Undelivered::Unreachable(e)),
        }
    };
    // 1 s doubling to 30 s, five retries: about a minute before giving up.
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(1))
        .with_max_delay(Duration::from_secs(30))
        .with_max_times(5);
    let sent = post
        .retry(backoff)
        .when(Undelivered::worth_retrying)
        .notify(|e, wait| {
            tracing::debug!(webhook = %webhook.origin(), error = %e, retry_in_ms = wait.as_millis() as u64, "notification not delivered; retrying");
        })
        .await;
    match sent {
        Ok(()) => {
            tracing::debug!(webhook = %webhook.origin(), event = kind.name(), "notification sent")
        }
        // The webhook's path is not shown: for Slack and its kin it is the secret.
        Err(e) => {
            tracing::warn!(webhook = %webhook.origin(), event = kind.name(), error = %e, "could not deliver a notification; giving it up")
        }
    }
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

    #[test]
    fn only_no_answer_throttling_and_server_errors_are_retried() {
        assert!(Undelivered::Unreachable(HttpError::Timeout(POST_TIMEOUT)).worth_retrying());
        for status in [429, 500, 502, 503] {
            assert!(Undelivered::Status(status).worth_retrying(), "{status}");
        }
        for status in [400, 401, 403, 404, 410] {
            assert!(!Undelivered::Status(status).worth_retrying(), "{status}");
        }
    }
}
