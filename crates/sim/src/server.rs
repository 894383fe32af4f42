//! The running simulator: the control loop that steps the shared state ([`crate::state`]) on
//! every tick, and the HTTP server (Kubernetes API plus the `/sim/v1` admin API) in front of it.
//! The kubeconfig that points `kubectl` and kube clients at it is in [`crate::kubeconfig`].

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use crate::kubeconfig::{ADMIN_TOKEN, kubeconfig_yaml, write_kubeconfig};
use crate::scenario::Scenario;
pub use crate::state::{ErrorRule, Faults, Sim};

pub fn router(sim: Arc<Sim>) -> Router {
    let router = Router::new()
        .route("/version", get(crate::api::version))
        .route("/version/", get(crate::api::version))
        .route("/api", get(crate::api::api_versions))
        .route("/api/", get(crate::api::api_versions))
        .route("/apis", get(crate::api::api_group_list))
        .route("/apis/", get(crate::api::api_group_list))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .nest("/sim/v1", crate::admin::router())
        .fallback(crate::api::dispatch);
    // Without a policy no layer is added, so serving costs nothing more.
    let router = if sim.authz.is_some() {
        router.layer(axum::middleware::from_fn_with_state(sim.clone(), enforce))
    } else {
        router
    };
    router.with_state(sim)
}

/// Axum middleware in front of every route: with a policy loaded, the Kubernetes API answers
/// 401/403 as the authorizer decides; the `/sim/v1` admin API is outside it.
pub async fn enforce(State(sim): State<Arc<Sim>>, req: Request, next: Next) -> Response {
    let Some(authz) = sim.authz.as_deref() else {
        return next.run(req).await;
    };
    if req.uri().path().starts_with("/sim/v1/") {
        return next.run(req).await;
    }
    match authz.check(req.method(), req.uri(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Steps the cluster every tick until cancelled.
pub async fn control_loop(sim: Arc<Sim>, token: CancellationToken) {
    let tick = sim.cluster.lock().expect("cluster lock").tick_interval();
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = interval.tick() => {
                let mut c = sim.cluster.lock().expect("cluster lock");
                if !c.paused() {
                    c.step(jiff::Timestamp::now(), false);
                }
            }
        }
    }
}

/// A simulator serving on a bound address; dropping the token stops it.
pub struct RunningSim {
    pub addr: SocketAddr,
    pub sim: Arc<Sim>,
    pub token: CancellationToken,
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl RunningSim {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn stop(self) {
        self.token.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Gives the heap's free pages back to the system. Building a cluster goes through every pod
/// several times (created, bound, started, Ready), and the allocator keeps what the earlier
/// versions used: at 600,000 pods that is gigabytes resident for nothing.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            /// glibc's: releases free memory at the top of the heap and, since 2.8, free whole
            /// pages inside it.
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: malloc_trim takes no pointer and only rearranges the allocator's own free
        // lists; it is safe to call at any time from any thread.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Builds the scenario's cluster and serves it on `listen` (port 0 picks a free port).
pub async fn start(
    scenario: &Scenario,
    listen: SocketAddr,
    token: CancellationToken,
) -> std::io::Result<RunningSim> {
    start_with(scenario, listen, token, StartOptions::default()).await
}

/// What [`start_with`] may add to a plain [`start`].
#[derive(Default)]
pub struct StartOptions {
    /// Enforce this RBAC policy (see [`crate::authz`]); `None` serves every request.
    pub authorization: Option<Arc<crate::authz::Authz>>,
}

/// [`start`] with options.
pub async fn start_with(
    scenario: &Scenario,
    listen: SocketAddr,
    token: CancellationToken,
    options: StartOptions,
) -> std::io::Result<RunningSim> {
    let cluster = crate::seed::build(scenario, jiff::Timestamp::now());
    release_free_memory();
    let sim = Sim::with_authz(cluster, options.authorization);
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let app = router(sim.clone());
    let t1 = token.clone();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { t1.cancelled().await })
            .await;
    });
    let looper = tokio::spawn(control_loop(sim.clone(), token.clone()));
    // Let open watch streams end when the server stops.
    let t2 = token.clone();
    let sim2 = sim.clone();
    let dropper = tokio::spawn(async move {
        t2.cancelled().await;
        sim2.drop_watches();
    });
    Ok(RunningSim {
        addr,
        sim,
        token,
        tasks: vec![server, looper, dropper],
    })
}
