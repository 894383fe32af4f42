//! Sending notices (`--notify-webhook`), never in the way of draining: each webhook has its own
//! bounded queue (a full queue drops the notice for that webhook, with a warning) and its own
//! task, which sends each notice, retried with back-off on no answer, a 429 or a 5xx, and given
//! up after that with a warning. Rule: one webhook that is slow or gone delays and drops only its
//! own notices, never another's.

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use rotor_core::http::{HttpClient, HttpError, HttpTarget};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::record::notify::{Notice, NoticeKind, NotifyConfig};

/// Notices waiting to be sent to one webhook at most; beyond, new ones are dropped for it
/// (never the drains' wait).
const QUEUE: usize = 256;
/// One POST's deadline.
const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// The sending end; a no-op without webhooks. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Notifier {
    /// The cluster's name for the bodies, and one queue per webhook.
    queues: Option<Arc<(String, Vec<WebhookQueue>)>>,
}

/// One webhook's queue of notices (each as its body), and where it goes, as logs may show it.
#[derive(Debug)]
struct WebhookQueue {
    tx: mpsc::Sender<(NoticeKind, Arc<serde_json::Value>)>,
    origin: String,
}

impl Notifier {
    /// Starts one task per webhook on `tasks`, or a no-op notifier without `cfg`. The tasks
    /// end at `stop`, whatever they are sending: a shutdown does not wait on webhooks (what is
    /// still queued is dropped).
    pub fn start(
        cfg: Option<NotifyConfig>,
        tasks: &TaskTracker,
        stop: CancellationToken,
    ) -> Result<Notifier, HttpError> {
        let Some(cfg) = cfg.filter(|c| !c.webhooks.is_empty()) else {
            return Ok(Notifier::default());
        };
        let http = HttpClient::new()?;
        let queues = cfg
            .webhooks
            .into_iter()
            .map(|webhook| {
                let (tx, mut rx) = mpsc::channel::<(NoticeKind, Arc<serde_json::Value>)>(QUEUE);
                let (http, stop) = (http.clone(), stop.clone());
                let origin = webhook.origin();
                tasks.spawn(async move {
                    while let Some((kind, body)) = tokio::select! {
                        _ = stop.cancelled() => None,
                        notice = rx.recv() => notice,
                    } {
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            () = deliver(&http, &webhook, &body, kind) => {}
                        }
                    }
                });
                WebhookQueue { tx, origin }
            })
            .collect();
        Ok(Notifier {
            queues: Some(Arc::new((cfg.cluster, queues))),
        })
    }

    /// Queues `notice` for every webhook; never waits.
    pub fn send(&self, notice: Notice) {
        let Some(queues) = &self.queues else { return };
        let (cluster, queues) = queues.as_ref();
        let body = Arc::new(notice.body(cluster));
        for queue in queues {
            if let Err(e) = queue.tx.try_send((notice.kind, body.clone())) {
                tracing::warn!(webhook = %queue.origin, event = notice.kind.name(), error = %e, "notification queue full or closed: dropping a notice for this webhook (it is slower than the rotation)");
            }
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
    use rotor_e2e::health_peers::TestEndpoint;

    use super::*;

    #[tokio::test]
    async fn a_webhook_that_is_gone_does_not_hold_up_the_others() {
        // The first webhook refuses connections: each notice to it is retried for about 30 s.
        let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let gone_url = format!("http://{}/hook", gone.local_addr().unwrap());
        drop(gone);
        let live = TestEndpoint::start(204, "");
        let cfg = NotifyConfig {
            webhooks: vec![gone_url.parse().unwrap(), live.url().parse().unwrap()],
            cluster: "prod".into(),
        };
        let (tasks, stop) = (TaskTracker::new(), CancellationToken::new());
        let notifier = Notifier::start(Some(cfg), &tasks, stop.clone()).unwrap();
        notifier.send(Notice::new(NoticeKind::NodeDrained, Some("a"), "drained"));
        notifier.send(Notice::new(NoticeKind::NodeDrained, Some("b"), "drained"));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while live.bodies().len() < 2 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let bodies = live.bodies();
        assert_eq!(
            bodies.len(),
            2,
            "the live webhook heard {bodies:?} within 5 s"
        );
        assert!(bodies[0].contains("node a drained") && bodies[1].contains("node b drained"));
        stop.cancel();
        tasks.close();
        tasks.wait().await;
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
