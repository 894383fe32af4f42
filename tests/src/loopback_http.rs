//! A plain HTTP/1 server on 127.0.0.1 for the harness's fake cloud APIs: a free port, a thread
//! with its own current-thread runtime (so the fake serves synchronous tests and outlives no
//! test runtime), each request's body read whole and handed to a synchronous handler. Stopped,
//! and its thread joined, on drop.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

/// A running server; stopped on drop.
pub struct LoopbackHttp {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    shutdown: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LoopbackHttp {
    /// Serves `handler(url)` (the handler may need the server's own URL, e.g. for `nextLink`s)
    /// on a thread named `{name}-{port}`.
    pub fn start<H>(name: &str, handler: impl FnOnce(&str) -> H) -> LoopbackHttp
    where
        H: Fn(Request<Bytes>) -> Response<Full<Bytes>> + Send + Sync + 'static,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("the server's address").port();
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener for tokio");
        let url = format!("http://127.0.0.1:{port}");
        let handler = Arc::new(handler(&url));
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let thread = std::thread::Builder::new()
            .name(format!("{name}-{port}"))
            .spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the server's runtime")
                    .block_on(serve(listener, handler, stop));
            })
            .expect("spawn the server's thread");
        LoopbackHttp {
            url,
            shutdown,
            thread: Some(thread),
        }
    }
}

impl Drop for LoopbackHttp {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve<H>(listener: std::net::TcpListener, handler: Arc<H>, shutdown: CancellationToken)
where
    H: Fn(Request<Bytes>) -> Response<Full<Bytes>> + Send + Sync + 'static,
{
    let listener =
        tokio::net::TcpListener::from_std(listener).expect("the listener on the runtime");
    loop {
        let tcp = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                // Out of file descriptors and the like: wait a little rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let handler = handler.clone();
                async move {
                    let (parts, body) = req.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    Ok::<_, Infallible>(handler(Request::from_parts(parts, body)))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}
