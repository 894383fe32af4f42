//! Sending notices (`--notify-webhook`), never in the way of draining: they go through a
//! bounded queue (a full queue drops the notice with a warning), and one task sends them, each
//! retried with back-off on no answer, a 429 or a 5xx, and given up after that with a warning.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use rotor_core::http::{HttpClient, HttpError, HttpTarget};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::record::notify::{Notice, NoticeKind, NotifyConfig};

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
    /// Starts the task that sends notices on `tasks`, or a no-op notifier without `cfg`. The
    /// task ends at `stop`, whatever it is sending: a shutdown does not wait on webhooks (what
    /// is still queued is dropped).
    pub fn start(
        cfg: Option<NotifyConfig>,
        tasks: &TaskTracker,
        stop: CancellationToken,
    ) -> Result<Notifier, HttpError> {
        let Some(cfg) = cfg.filter(|c| !c.webhooks.is_empty()) else {
            return Ok(Notifier::default());
        };
        let http = HttpClient::new()?;
        let (tx, mut rx) = mpsc::channel::<Notice>(QUEUE);
        tasks.spawn(async move {
            while let Some(notice) = tokio::select! {
                _ = stop.cancelled() => None,
                notice = rx.recv() => notice,
            } {
                let body = notice.body(&cfg.cluster);
                for webhook in &cfg.webhooks {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        () = deliver(&http, webhook, &body, notice.kind) => {}
                    }
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
