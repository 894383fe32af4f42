//! The running simulator: the shared state behind one lock, the control loop that steps it on
//! every tick, the HTTP server (Kubernetes API plus the `/sim/v1` admin API), fault injection,
//! and the kubeconfig that points `kubectl` and kube clients at it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::api::status::ApiError;
use crate::cluster::Cluster;
use crate::scenario::Scenario;

/// One injected error: requests matching verb and resource fail with `code` at `rate`.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorRule {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`; absent matches all.
    #[serde(default)]
    pub verb: Option<String>,
    /// e.g. `pods`, `pods/eviction`, `nodes`; absent matches all.
    #[serde(default)]
    pub resource: Option<String>,
    /// Fraction of matching requests to fail, 0 to 1.
    pub rate: f64,
    /// HTTP status to answer: 429, 500, 503 or 504.
    #[serde(default = "default_code")]
    pub code: u16,
}

fn default_code() -> u16 {
    500
}

#[derive(Default)]
pub struct Faults {
    pub rules: Vec<ErrorRule>,
    pub latency: Duration,
    rng: u64,
}

impl Faults {
    fn next_f64(&mut self) -> f64 {
        // xorshift64*: enough randomness for fault injection, no dependency.
        if self.rng == 0 {
            self.rng = 0x9e3779b97f4a7c15 ^ std::process::id() as u64;
        }
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545f4914f6cdd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The error to answer instead of serving this request, if a rule fires.
    pub fn injected_error(&mut self, verb: &str, resource: &str) -> Option<ApiError> {
        let rule = self
            .rules
            .iter()
            .find(|r| {
                r.verb.as_deref().is_none_or(|v| v == verb)
                    && r.resource.as_deref().is_none_or(|x| x == resource)
            })?
            .clone();
        if self.next_f64() >= rule.rate {
            return None;
        }
        let msg = format!("injected fault: {verb} {resource}");
        Some(match rule.code {
            429 => ApiError::too_many_requests(msg).with_retry_after(1),
            503 => ApiError {
                code: 503,
                reason: "ServiceUnavailable",
                message: msg,
                details: None,
                retry_after: None,
            },
            504 => ApiError {
                code: 504,
                reason: "Timeout",
                message: msg,
                details: None,
                retry_after: None,
            },
            _ => ApiError::internal(msg),
        })
    }
}

pub struct Sim {
    pub cluster: Mutex<Cluster>,
    pub faults: Mutex<Faults>,
    pub drop_tx: watch::Sender<u64>,
    pub drop_rx: watch::Receiver<u64>,
    pub bookmark_interval: Duration,
    /// The RBAC policy in force; `None` (the default) serves every request.
    pub authz: Option<Arc<crate::authz::Authz>>,
}

impl Sim {
    pub fn new(cluster: Cluster) -> Arc<Sim> {
        Sim::with_authz(cluster, None)
    }

    pub fn with_authz(cluster: Cluster, authz: Option<Arc<crate::authz::Authz>>) -> Arc<Sim> {
        let (drop_tx, drop_rx) = watch::channel(0);
        let bookmark_interval = cluster.timing.bookmark_interval;
        Arc::new(Sim {
            cluster: Mutex::new(cluster),
            faults: Mutex::new(Faults::default()),
            drop_tx,
            drop_rx,
            bookmark_interval,
            authz,
        })
    }

    /// Cuts every open watch stream (clients see the connection end and must re-watch).
    pub fn drop_watches(&self) {
        self.drop_tx.send_modify(|g| *g += 1);
    }
}

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
        router.layer(axum::middleware::from_fn_with_state(
            sim.clone(),
            crate::authz::enforce,
        ))
    } else {
        router
    };
    router.with_state(sim)
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
                if !c.paused {
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

/// The token of the kubeconfig the simulator always writes: without a policy no token is
/// checked; with one, this token is the cluster admin's and may do everything.
pub const ADMIN_TOKEN: &str = "rotor-sim-no-auth";

/// A kubeconfig with one cluster, user and context named `rotor-sim`, accepted by kubectl and
/// kube::Config alike, authenticating with [`ADMIN_TOKEN`].
pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: rotor-sim\n  cluster:\n    server: {url}\ncontexts:\n- name: rotor-sim\n  context:\n    cluster: rotor-sim\n    user: rotor-sim\n    namespace: default\ncurrent-context: rotor-sim\nusers:\n- name: rotor-sim\n  user:\n    token: {ADMIN_TOKEN}\npreferences: {{}}\n"
    )
}

pub fn write_kubeconfig(path: &Path, url: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, kubeconfig_yaml(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_rules_match_verb_and_resource() {
        let mut f = Faults {
            rules: vec![ErrorRule {
                verb: Some("create".into()),
                resource: Some("pods/eviction".into()),
                rate: 1.0,
                code: 429,
            }],
            ..Default::default()
        };
        let e = f.injected_error("create", "pods/eviction").unwrap();
        assert_eq!((e.code, e.retry_after), (429, Some(1)));
        assert!(f.injected_error("list", "pods").is_none());
        f.rules[0].rate = 0.0;
        assert!(f.injected_error("create", "pods/eviction").is_none());
    }

    #[test]
    fn fault_rate_is_roughly_honoured() {
        let mut f = Faults {
            rules: vec![ErrorRule {
                verb: None,
                resource: None,
                rate: 0.3,
                code: 500,
            }],
            ..Default::default()
        };
        let hits = (0..10_000)
            .filter(|_| f.injected_error("get", "pods").is_some())
            .count();
        assert!((2_500..3_500).contains(&hits), "{hits}");
    }
}
