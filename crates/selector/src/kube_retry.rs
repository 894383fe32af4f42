//! The selector's retry of transient Kubernetes API answers, in place of kube's built-in one.
//!
//! The selector talks to the API server through `rotor_core::client::client_without_retry`.
//! kube's default retry (429, 503, 504) allows 15 retries with a back-off growing towards 1000 s,
//! so one request to an unhealthy API server could hold a run for many minutes while hiding why.
//! A selector run is one CronJob invocation: it should ride out a short overload (API priority
//! and fairness answers 429, an apiserver restart 503) and otherwise fail soon, naming the call,
//! and leave the retry to the next scheduled run. Repeating any of its requests is safe: lists,
//! gets and `/version` are reads; its patches carry the node's resourceVersion, so a patch that
//! did land before a 504 is answered 409 on repeat and re-judged by the apply step. Events are
//! not retried (a lost Event only loses a note).

use std::future::Future;
use std::time::Duration;

/// The pauses between attempts: three attempts in all, at most 2.5 s of waiting per request.
pub const BACKOFF: [Duration; 2] = [Duration::from_millis(500), Duration::from_secs(2)];

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
            Err(error) if is_transient(&error) => match pauses.next() {
                Some(pause) => {
                    tracing::warn!(call = what, error = %error, retry_in = ?pause, "transient API error; retrying");
                    tokio::time::sleep(*pause).await;
                }
                None => return Err(error),
            },
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
