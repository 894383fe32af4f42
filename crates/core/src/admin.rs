//! The admin HTTP server every rotor binary runs: `/metrics` (Prometheus/OpenMetrics text from a
//! `prometheus-client` registry), `/healthz` (200 while the process serves), and `/readyz` (200 once
//! the shared [`Readiness`] flag is set, 503 before). Anything else is 404. The server stops
//! gracefully when its cancellation token is cancelled.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Content type of the `/metrics` response.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Admin server options.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
// A flattened group's doc comment would otherwise replace the binary's own description at
// the top of `--help`; it is for rustdoc only.
#[command(about = None, long_about = None)]
pub struct AdminArgs {
    /// Address the admin server (/metrics, /healthz, /readyz) listens on.
    #[arg(
        long,
        env = "ROTOR_ADMIN_LISTEN",
        default_value = "0.0.0.0:8080",
        value_name = "ADDR"
    )]
    pub admin_listen: SocketAddr,
}

impl Default for AdminArgs {
    fn default() -> Self {
        AdminArgs {
            admin_listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
        }
    }
}

/// Whether the process is ready for traffic / work; what `/readyz` reports.
///
/// Cheap to clone: every clone shares one flag. Starts not ready.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// A new flag, not ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets or clears readiness.
    pub fn set_ready(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    /// Whether the flag is set.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// What the admin handlers read: the metrics registry and the readiness flag.
///
/// Register every metric before wrapping the registry in an `Arc`; metric handles stay usable
/// (they share their values with the registry).
#[derive(Clone, Debug)]
pub struct AdminState {
    /// Metrics exposed on `/metrics`.
    pub registry: Arc<Registry>,
    /// Flag reported on `/readyz`.
    pub readiness: Readiness,
}

impl AdminState {
    /// State over `registry` and `readiness`.
    pub fn new(registry: Arc<Registry>, readiness: Readiness) -> Self {
        AdminState {
            registry,
            readiness,
        }
    }
}

/// Starting the admin server failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The listen address could not be bound.
    #[error(
        "cannot listen on {addr} for the admin server (/metrics, /healthz, /readyz): {source}; choose a free address with --admin-listen or ROTOR_ADMIN_LISTEN"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS reported.
        #[source]
        source: io::Error,
    },
}

/// Binds `addr` and returns the listener with the address actually bound (useful with port 0).
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), AdminError> {
    let bind_err = |source| AdminError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    Ok((listener, local))
}

/// The admin routes over `state`, for callers that want to embed or test them.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// Serves the admin routes on `listener` until `shutdown` is cancelled, then finishes in-flight
/// requests and returns.
pub async fn serve(
    listener: TcpListener,
    state: AdminState,
    shutdown: CancellationToken,
) -> io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "admin server listening (/metrics, /healthz, /readyz)");
    }
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    tracing::debug!("admin server stopped");
    Ok(())
}

/// A bound admin server, ready to [`run`](AdminServer::run).
#[derive(Debug)]
pub struct AdminServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    state: AdminState,
}

impl AdminServer {
    /// Binds `addr` (see [`bind`]).
    pub async fn bind(addr: SocketAddr, state: AdminState) -> Result<Self, AdminError> {
        let (listener, local_addr) = bind(addr).await?;
        Ok(AdminServer {
            listener,
            local_addr,
            state,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` is cancelled (see [`serve`]).
    pub async fn run(self, shutdown: CancellationToken) -> io::Result<()> {
        serve(self.listener, self.state, shutdown).await
    }
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], body).into_response(),
        Err(err) => {
            tracing::error!(error = %err, "cannot encode metrics for /metrics");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot encode metrics; see the process log\n",
            )
                .into_response()
        }
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AdminState>) -> (StatusCode, &'static str) {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prometheus_client::metrics::counter::Counter;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    struct Reply {
        status: u16,
        headers: String,
        body: String,
    }

    /// One HTTP/1.1 GET over a fresh connection, read to EOF.
    async fn get(addr: SocketAddr, path: &str) -> Reply {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
            .await
            .expect("response within 10 s")
            .unwrap();
        let raw = String::from_utf8(raw).expect("utf-8 response");
        let (head, body) = raw.split_once("\r\n\r\n").expect("header/body separator");
        let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status code");
        Reply {
            status,
            headers: headers.to_ascii_lowercase(),
            body: body.to_owned(),
        }
    }

    #[tokio::test]
    async fn serves_health_readiness_and_metrics() {
        let mut registry = Registry::default();
        let counter: Counter = Counter::default();
        registry.register(
            "rotor_test_things",
            "Things counted by the test",
            counter.clone(),
        );
        counter.inc_by(3);

        let readiness = Readiness::new();
        let state = AdminState::new(Arc::new(registry), readiness.clone());
        let server = AdminServer::bind("127.0.0.1:0".parse().unwrap(), state)
            .await
            .unwrap();
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);
        let token = CancellationToken::new();
        let task = tokio::spawn(server.run(token.clone()));

        let reply = get(addr, "/healthz").await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body, "ok");

        let reply = get(addr, "/readyz").await;
        assert_eq!(reply.status, 503);
        assert_eq!(reply.body, "not ready");

        readiness.set_ready(true);
        let reply = get(addr, "/readyz").await;
        assert_eq!(reply.status, 200);
        readiness.set_ready(false);
        assert_eq!(get(addr, "/readyz").await.status, 503);

        counter.inc();
        let reply = get(addr, "/metrics").await;
        assert_eq!(reply.status, 200);
        assert!(
            reply.headers.contains(
                "content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"
            ),
            "{}",
            reply.headers
        );
        assert!(
            reply.body.contains("# TYPE rotor_test_things counter"),
            "{}",
            reply.body
        );
        assert!(
            reply.body.contains("rotor_test_things_total 4"),
            "{}",
            reply.body
        );
        assert!(reply.body.ends_with("# EOF\n"), "{}", reply.body);

        assert_eq!(get(addr, "/nope").await.status, 404);

        token.cancel();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("server stops after cancellation")
            .unwrap()
            .unwrap();
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "listener closed after shutdown"
        );
    }

    #[tokio::test]
    async fn bind_failure_names_the_address() {
        let (_held, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let err = bind(addr).await.unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&addr.to_string()), "{message}");
        assert!(message.contains("--admin-listen"), "{message}");
    }
}
