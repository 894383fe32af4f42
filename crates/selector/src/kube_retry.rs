//! The selector's retry of transient Kubernetes API answers, in place of kube's built-in one.
//!
//! The selector talks to the API server through `rotor_core::client::client_without_retry`.
//! kube's default retry (429, 503, 504) allows 15 retries with a back-off growing towards 1000 s,
//! so one request to an unhealthy API server could hold a run for many minutes while hiding why.
//! A selector run is one CronJob invocation: it should ride out a short overload (API priority
//! and fairness answers 429, an apiserver restart 503) and otherwise fail soon, naming the call,
//! and leave the retry to the next scheduled run. A `Retry-After` the server sends is waited out
//! (up to 10 s; asked for longer, the call fails at once). Repeating any of its requests is safe: lists,
//! gets and `/version` are reads; its patches carry the node's resourceVersion, so a patch that
//! did land before a 504 is answered 409 on repeat and re-judged by the apply step. Events are
//! not retried (a lost Event only loses a note).

use std::future::Future;
use std::time::Duration;

/// The pauses between attempts: three attempts in all, at most 2.5 s of waiting per request
/// unless the API server asks for longer (see [`pause_after`]).
pub const BACKOFF: [Duration; 2] = [Duration::from_millis(500), Duration::from_secs(2)];

/// The longest `Retry-After` a run waits out; asked for more, the call fails at once and the run
/// leaves the retry to the next scheduled run rather than hold its CronJob's pod for minutes (a
/// run makes one call per node it writes).
pub const LONGEST_RETRY_AFTER: Duration = Duration::from_secs(10);

/// How long to pause after `error` before the next attempt, where our own pause is `ours`: the
/// longer of ours and the server's `Retry-After` (API Priority and Fairness asks for seconds to
/// tens of seconds when it sheds a request); `None` when the server asks for more than
/// [`LONGEST_RETRY_AFTER`].
pub fn pause_after(error: &kube::Error, ours: Duration) -> Option<Duration> {
    let asked = match error {
        kube::Error::Api(status) => status.details.as_ref().map_or(0, |d| d.retry_after_seconds),
        _ => 0,
    };
    let asked = Duration::from_secs(u64::from(asked));
    (asked <= LONGEST_RETRY_AFTER).then_some(ours.max(asked))
}

/// Whether the API server's answer says "try again shortly" (the statuses kube's own retry
/// covers).
pub fn is_transient(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if matches!(status.code, 429 | 503 | 504))
}

/// Calls `call` until it succeeds, fails with a non-transient error, or the attempts of
/// [`BACKOFF`] are used up; `what` names the call in the log.
pub async fn retry_transient<T, F, Fut>(what: &str, call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    retry_with(&BACKOFF, what, call).await
}

/// [`retry_transient`] with these pauses (one attempt more than pauses).
async fn retry_with<T, F, Fut>(
    backoff: &[Duration],
    what: &str,
    mut call: F,
) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut pauses = backoff.iter();
    loop {
        match call().await {
            Err(error) if is_transient(&error) => {
                match pauses.next().and_then(|ours| pause_after(&error, *ours)) {
                    Some(pause) => {
                        tracing::warn!(call = what, error = %error, retry_in = ?pause, "transient API error; retrying");
                        tokio::time::sleep(pause).await;
                    }
                    None => return Err(error),
                }
            }
            result => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use kube::core::Status;

    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure("test", "Test").with_code(code)))
    }

    #[test]
    fn only_overload_and_unavailability_are_transient() {
        for code in [429, 503, 504] {
            assert!(is_transient(&api_error(code)), "{code}");
        }
        for code in [400, 404, 409, 422, 500] {
            assert!(!is_transient(&api_error(code)), "{code}");
        }
    }

    /// A 429 from API Priority and Fairness, as the client hands it over
    /// (`rotor_core::retry_after`).
    fn shed(retry_after: u32) -> kube::Error {
        let status: Status = serde_json::from_value(serde_json::json!({
            "status": "Failure",
            "message": "Too many requests, please try again later.",
            "reason": "TooManyRequests",
            "code": 429,
            "details": {"retryAfterSeconds": retry_after},
        }))
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn the_servers_retry_after_lengthens_a_pause_up_to_ten_seconds() {
        let ours = Duration::from_millis(500);
        assert_eq!(pause_after(&api_error(429), ours), Some(ours));
        assert_eq!(pause_after(&shed(7), ours), Some(Duration::from_secs(7)));
        assert_eq!(pause_after(&shed(10), ours), Some(Duration::from_secs(10)));
        assert_eq!(pause_after(&shed(11), ours), None);
    }

    #[tokio::test]
    async fn retries_transient_errors_three_attempts_at_most() {
        let pauses = [Duration::from_millis(1); 2];
        let attempts = Cell::new(0);
        let result: Result<(), _> = retry_with(&pauses, "patch nodes", || {
            attempts.set(attempts.get() + 1);
            async { Err(api_error(503)) }
        })
        .await;
        assert!(is_transient(&result.unwrap_err()));
        assert_eq!(attempts.get(), 3);

        attempts.set(0);
        let result = retry_with(&pauses, "list nodes", || {
            attempts.set(attempts.get() + 1);
            let n = attempts.get();
            async move { if n < 2 { Err(api_error(429)) } else { Ok(n) } }
        })
        .await;
        assert_eq!(result.unwrap(), 2);

        attempts.set(0);
        let result: Result<(), _> = retry_with(&pauses, "patch nodes", || {
            attempts.set(attempts.get() + 1);
            async { Err(api_error(409)) }
        })
        .await;
        assert_eq!(
            attempts.get(),
            1,
            "a conflict is the apply step's to handle"
        );
        assert!(result.is_err());
    }
}
