//! The fence: a leader's writes stop by its own clock the moment its hold on the lease may have
//! run out, whatever its tasks are doing.
//!
//! Losing the lease is noticed by the election task at its next renewal, a round trip later. A
//! process paused (SIGSTOP, a frozen VM, a long GC-like stall of the host) wakes with every timer
//! overdue: its drain tasks would send the evictions they had queued before the election task
//! has even asked the API server, while another replica already leads. So every write of the
//! acting clients passes through [`Fenced`], which refuses it unless the lease was last renewed
//! recently enough that no other replica can have taken it over: the election sets the fence to
//! the instant the renewal was *sent* plus the renew deadline (two thirds of the lease), and a
//! standby takes over only a whole lease duration after it *saw* that renewal. Instants are
//! monotonic, so a wall clock set back or forward changes nothing.
//!
//! What is left: a request that passed the fence an instant before the pause goes out when the
//! process wakes (the API server has no fencing token to refuse it by), and `Instant` does not
//! count time the whole machine spends suspended.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Method, Request};
use tower::{BoxError, Layer, Service};

/// Until when this replica may write as the leader; shared by the election (which moves it)
/// and the acting clients (which read it before every write).
#[derive(Clone, Debug, Default)]
pub struct Fence(Arc<Mutex<Option<Instant>>>);

impl Fence {
    /// Writes may go out until `until`.
    pub fn open_until(&self, until: Instant) {
        *self.lock() = Some(until);
    }

    /// No write goes out from now on (the lease was released or lost).
    pub fn close(&self) {
        *self.lock() = None;
    }

    /// Whether a write may go out now.
    pub fn is_open(&self) -> bool {
        self.lock().is_some_and(|until| Instant::now() < until)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // The guarded value is a plain Instant: a panic elsewhere cannot leave it half-written.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A write refused by the fence.
#[derive(Debug, thiserror::Error)]
#[error(
    "not sent: {method} {path} is a write, and this replica's hold on the leader lease has run out (not renewed within two thirds of --lease-duration); another replica may lead now, so this one stops acting"
)]
pub struct NotLeading {
    pub method: Method,
    pub path: String,
}

/// Whether a request changes something: reads, lists and watches pass the fence always.
fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Puts a [`Fence`] in front of a client's service (see [`Fenced`]).
#[derive(Clone, Debug)]
pub struct FenceLayer(pub Fence);

impl<S> Layer<S> for FenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            fence: self.0.clone(),
        }
    }
}

/// A service that refuses writes while its fence is closed. Placed inside kube's retry, so that
/// a write retried after a back-off is checked again.
#[derive(Clone, Debug)]
pub struct Fenced<S> {
    inner: S,
    fence: Fence,
}

type Answer<R> = Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>;

impl<S, B> Service<Request<B>> for Fenced<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Answer<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if is_write(request.method()) && !self.fence.is_open() {
            let refused = NotLeading {
                method: request.method().clone(),
                path: request.uri().path().to_string(),
            };
            return Box::pin(async move { Err(refused.into()) });
        }
        let answer = self.inner.call(request);
        Box::pin(async move { answer.await.map_err(Into::into) })
    }
}

/// A client whose writes pass `fence`, with kube's usual retry of 429/503/504 outside it (each
/// attempt is fenced) when `retry` is set.
pub fn fenced_client(
    config: kube::Config,
    fence: &Fence,
    retry: bool,
) -> Result<kube::Client, rotor_core::client::ClientError> {
    let cluster_url = config.cluster_url.to_string();
    let base = kube::client::ClientBuilder::try_from(rotor_core::client::without_retry(config))
        .map_err(|source| rotor_core::client::ClientError::Build {
            cluster_url,
            source,
        })?
        // A shed request's Retry-After reaches the eviction answers (drain/answers.rs).
        .with_layer(&rotor_core::retry_after::RetryAfterLayer)
        .with_layer(&FenceLayer(fence.clone()));
    Ok(if retry {
        // The retry clones the service it retries; kube's base service is boxed, not Clone,
        // so a buffer (as kube's own client has) gives it a cloneable handle.
        base.with_layer(&tower::buffer::BufferLayer::new(1024))
            .with_layer(&tower::retry::RetryLayer::new(
                kube::client::retry::RetryPolicy::server_retry(),
            ))
            .build()
    } else {
        base.build()
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A service that answers every request with its method, counting the calls that reach it.
    #[derive(Clone, Default)]
    struct Counting(Arc<Mutex<usize>>);

    impl Service<Request<()>> for Counting {
        type Response = Method;
        type Error = BoxError;
        type Future = Answer<Method>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<()>) -> Self::Future {
            *self.0.lock().unwrap() += 1;
            let method = request.method().clone();
            Box::pin(async move { Ok(method) })
        }
    }

    fn request(method: Method) -> Request<()> {
        Request::builder()
            .method(method)
            .uri("/api/v1/namespaces/shop/pods/web-1/eviction")
            .body(())
            .unwrap()
    }

    #[tokio::test]
    async fn writes_pass_only_while_the_fence_is_open_and_reads_always() {
        let fence = Fence::default();
        let inner = Counting::default();
        let mut service = FenceLayer(fence.clone()).layer(inner.clone());

        // Never led: a write is refused before it reaches the connection; a read passes.
        let refused = service.call(request(Method::POST)).await.unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("POST /api/v1/namespaces/shop/pods/web-1/eviction"),
            "{refused}"
        );
        assert_eq!(
            service.call(request(Method::GET)).await.unwrap(),
            Method::GET
        );
        assert_eq!(*inner.0.lock().unwrap(), 1);

        // Renewed: writes pass until the deadline.
        fence.open_until(Instant::now() + Duration::from_secs(60));
        for method in [Method::POST, Method::PATCH, Method::PUT, Method::DELETE] {
            assert_eq!(service.call(request(method.clone())).await.unwrap(), method);
        }
        assert_eq!(*inner.0.lock().unwrap(), 5);

        // The deadline passed without a renewal (a paused process wakes here): refused.
        fence.open_until(Instant::now());
        assert!(service.call(request(Method::PATCH)).await.is_err());
        // Released or lost: refused.
        fence.open_until(Instant::now() + Duration::from_secs(60));
        fence.close();
        assert!(service.call(request(Method::DELETE)).await.is_err());
        assert_eq!(*inner.0.lock().unwrap(), 5);
    }
}
