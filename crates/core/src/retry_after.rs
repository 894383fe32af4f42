//! A 429's `Retry-After`, kept where a caller can read it.
//!
//! When API Priority and Fairness sheds a request, the API server answers 429 with a
//! `Retry-After` header and a plain-text body ("Too many requests, please try again later.").
//! kube turns an error answer into a [`Status`](k8s_openapi::apimachinery::pkg::apis::meta::v1::Status)
//! from its body alone, so the wait the server asked for is lost, and code that decides its own
//! retries (the drainer's evictions, the selector's writes) would come back too soon. Beneath
//! kube's client, [`RetryAfterLayer`] rewrites such an answer's body into the `Status` the API
//! server sends for its other 429s, with `details.retryAfterSeconds` from the header. Every other
//! answer passes untouched, headers included (kube's own retry reads the header).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full};
use serde_json::{Value, json};
use tower::{BoxError, Layer, Service};

/// Puts [`RetryAfter`] beneath a client.
#[derive(Clone, Copy, Debug, Default)]
pub struct RetryAfterLayer;

impl<S> Layer<S> for RetryAfterLayer {
    type Service = RetryAfter<S>;

    fn layer(&self, inner: S) -> RetryAfter<S> {
        RetryAfter { inner }
    }
}

/// See the module docs.
#[derive(Clone, Debug)]
pub struct RetryAfter<S> {
    inner: S,
}

type Answer<B> =
    Pin<Box<dyn Future<Output = Result<Response<Either<B, Full<Bytes>>>, BoxError>> + Send>>;

impl<S, ReqBody, B> Service<Request<ReqBody>> for RetryAfter<S>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Either<B, Full<Bytes>>>;
    type Error = BoxError;
    type Future = Answer<B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await.map_err(Into::into)?;
            let Some(seconds) = shed_for(&response) else {
                return Ok(response.map(Either::Left));
            };
            let (mut parts, body) = response.into_parts();
            let body = body.collect().await.map_err(Into::into)?.to_bytes();
            let Some(status) = with_retry_after(&body, seconds) else {
                return Ok(Response::from_parts(parts, Either::Right(Full::new(body))));
            };
            parts.headers.remove(CONTENT_LENGTH);
            parts
                .headers
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            Ok(Response::from_parts(
                parts,
                Either::Right(Full::new(status)),
            ))
        })
    }
}

/// The seconds a 429 asks to wait, from its `Retry-After` header (the delay form; the API server
/// never sends a date).
fn shed_for<B>(response: &Response<B>) -> Option<u64> {
    if response.status() != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    response
        .headers()
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The body of a 429 with `retryAfterSeconds` set to `seconds`: a `Status` built around a
/// plain-text body, or the API server's own `Status` with the field filled in when it lacks it.
/// `None` when there is nothing to change (the `Status` already says how long to wait).
pub fn with_retry_after(body: &[u8], seconds: u64) -> Option<Bytes> {
    if let Ok(Value::Object(mut status)) = serde_json::from_slice::<Value>(body)
        && status.get("kind").and_then(Value::as_str) == Some("Status")
    {
        let details = status.entry("details").or_insert_with(|| json!({}));
        let said = details
            .get("retryAfterSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if said > 0 || !details.is_object() {
            return None;
        }
        details["retryAfterSeconds"] = json!(seconds);
        return Some(Bytes::from(Value::Object(status).to_string()));
    }
    let message = String::from_utf8_lossy(body).trim().to_string();
    let status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": seconds},
        "code": 429,
    });
    Some(Bytes::from(status.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_of(body: &Bytes) -> Value {
        serde_json::from_slice(body).unwrap()
    }

    #[test]
    fn a_plain_text_429_becomes_a_status_with_the_servers_wait() {
        // What kube-apiserver's priority and fairness filter answers when it sheds a request.
        let body = with_retry_after(b"Too many requests, please try again later.\n", 7).unwrap();
        let status = status_of(&body);
        assert_eq!(status["code"], 429);
        assert_eq!(status["reason"], "TooManyRequests");
        assert_eq!(
            status["message"],
            "Too many requests, please try again later."
        );
        assert_eq!(status["details"]["retryAfterSeconds"], 7);
        // What kube makes of it: the Status the drainer's answers read.
        let parsed: k8s_openapi::apimachinery::pkg::apis::meta::v1::Status =
            serde_json::from_slice(&body).unwrap();
        assert_eq!(parsed.details.unwrap().retry_after_seconds, Some(7));
    }

    #[test]
    fn a_status_without_a_wait_gets_the_headers_and_one_with_a_wait_is_left_alone() {
        let without = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"slow down","reason":"TooManyRequests","code":429}"#;
        let body = with_retry_after(without, 3).unwrap();
        let status = status_of(&body);
        assert_eq!(status["details"]["retryAfterSeconds"], 3);
        assert_eq!(status["message"], "slow down");
        // An eviction the disruption controller has not caught up with: the server's own wait.
        let with = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"unprocessed","reason":"TooManyRequests","details":{"causes":[{"reason":"DisruptionBudget","message":"The disruption budget web needs to be processed"}],"retryAfterSeconds":10},"code":429}"#;
        assert_eq!(with_retry_after(with, 3), None);
    }

    #[test]
    fn only_429s_with_a_delay_are_read() {
        let answer = |code: u16, header: Option<&str>| {
            let mut builder = Response::builder().status(code);
            if let Some(h) = header {
                builder = builder.header(RETRY_AFTER, h);
            }
            builder.body(()).unwrap()
        };
        assert_eq!(shed_for(&answer(429, Some("12"))), Some(12));
        assert_eq!(shed_for(&answer(429, None)), None);
        assert_eq!(shed_for(&answer(503, Some("12"))), None);
        assert_eq!(
            shed_for(&answer(429, Some("Wed, 21 Oct 2015 07:28:00 GMT"))),
            None
        );
    }

    #[tokio::test]
    async fn beneath_a_client_the_body_is_rewritten_and_the_header_kept() {
        let service = tower::service_fn(|_: Request<()>| async {
            Ok::<_, BoxError>(
                Response::builder()
                    .status(429)
                    .header(RETRY_AFTER, "32")
                    .header(CONTENT_TYPE, "text/plain; charset=utf-8")
                    .header(CONTENT_LENGTH, "42")
                    .body(Full::new(Bytes::from_static(
                        b"Too many requests, please try again later.",
                    )))
                    .unwrap(),
            )
        });
        let mut layered = RetryAfterLayer.layer(service);
        let response = layered.call(Request::new(())).await.unwrap();
        assert_eq!(response.headers()[RETRY_AFTER], "32");
        assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
        assert!(response.headers().get(CONTENT_LENGTH).is_none());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(status_of(&body)["details"]["retryAfterSeconds"], 32);
    }
}
