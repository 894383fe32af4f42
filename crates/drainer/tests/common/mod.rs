//! The drainer's own part of its tests' harness: its real runtime run in-process against a
//! simulated cluster (rotor-e2e's [`SimCluster`]).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use rotor_drainer::config::{DrainArgs, DrainerConfig, LeaderArgs};
use rotor_drainer::error::RunError;
pub use rotor_e2e::sim_cluster::{SimCluster, wait_until};
use tokio_util::sync::CancellationToken;

pub const WAIT: Duration = Duration::from_secs(30);

#[derive(Parser)]
struct DrainerCli {
    #[command(flatten)]
    drain: DrainArgs,
    #[command(flatten)]
    leader: LeaderArgs,
}

/// A drainer running in-process against the test cluster.
pub struct TestDrainer {
    pub stop: CancellationToken,
    pub handle: tokio::task::JoinHandle<Result<(), RunError>>,
}

/// The drainer's settings from these flags, plus a unique identity, a fast lease and, unless
/// the flags set one, a short settle time.
pub fn settings(identity: &str, flags: &[&str]) -> (DrainerConfig, LeaderArgs) {
    let mut args = vec![
        "rotor-drainer",
        "--identity",
        identity,
        "--lease-duration",
        "2s",
    ];
    if !flags.iter().any(|f| f.starts_with("--settle")) {
        args.extend_from_slice(&["--settle", "300ms"]);
    }
    args.extend_from_slice(flags);
    let cli = DrainerCli::try_parse_from(args).expect("test flags parse");
    cli.leader.validate().expect("test lease flags are valid");
    let cfg = cli.drain.validate().expect("test flags are valid");
    (cfg, cli.leader)
}

impl TestDrainer {
    /// Starts the drainer with these flags (see [`settings`]).
    pub fn start(cluster: &SimCluster, identity: &str, flags: &[&str]) -> TestDrainer {
        Self::start_on(cluster, identity, flags, "127.0.0.1:0".parse().unwrap())
    }

    /// Starts the drainer as [`TestDrainer::start`] does, with its admin server (`/metrics`) on
    /// a free port of loopback, whose address it returns once `/metrics` answers there. The port
    /// is free when chosen, but another process may take it before the drainer binds it: then
    /// the drainer ends at once with an error binding its admin server, and another port is
    /// tried.
    pub async fn start_serving(
        cluster: &SimCluster,
        identity: &str,
        flags: &[&str],
    ) -> (TestDrainer, SocketAddr) {
        for _ in 0..5 {
            let admin = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|free| free.local_addr())
                .expect("a free port on loopback");
            let drainer = Self::start_on(cluster, identity, flags, admin);
            let serving = wait_until("the drainer's /metrics to answer", WAIT, || async {
                if drainer.handle.is_finished() {
                    return Some(false);
                }
                metric_page(admin).await.map(|_| true)
            })
            .await;
            if serving {
                return (drainer, admin);
            }
            match drainer.handle.await.expect("drainer task") {
                Err(RunError::Admin(e)) => {
                    eprintln!("{admin} was taken ({e}); trying another port")
                }
                other => panic!("the drainer ended before serving /metrics: {other:?}"),
            }
        }
        panic!("no free port on loopback held long enough for the drainer's admin server");
    }

    fn start_on(
        cluster: &SimCluster,
        identity: &str,
        flags: &[&str],
        admin: SocketAddr,
    ) -> TestDrainer {
        let (cfg, leader) = settings(identity, flags);
        let stop = CancellationToken::new();
        let handle = tokio::spawn(rotor_drainer::runtime::run(
            cluster.config(),
            cfg,
            leader,
            admin,
            stop.clone(),
        ));
        TestDrainer { stop, handle }
    }

    pub async fn stop(self) -> Result<(), RunError> {
        self.stop.cancel();
        self.handle.await.expect("drainer task")
    }
}

/// Who holds the drainer's leader Lease (`rotor-system/rotor-drainer`), if anyone.
pub async fn lease_holder(cluster: &SimCluster) -> Option<String> {
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(cluster.client.clone(), "rotor-system");
    leases
        .get_opt("rotor-drainer")
        .await
        .expect("the Lease reads")
        .and_then(|l| l.spec?.holder_identity)
}

/// The value of `series` (a name with its labels, as `/metrics` prints it) on the drainer's
/// admin server at `admin`; `None` while it does not answer or has no such series.
pub async fn metric(admin: SocketAddr, series: &str) -> Option<f64> {
    let body = metric_page(admin).await?;
    let prefix = format!("{series} ");
    body.lines()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
}

/// The drainer's `/metrics` page at `admin`; `None` while it does not answer.
async fn metric_page(admin: SocketAddr) -> Option<String> {
    let got =
        tokio::task::spawn_blocking(move || rotor_e2e::http_get(&admin.to_string(), "/metrics"))
            .await
            .expect("the scrape task");
    Some(got.ok().filter(|r| r.status == 200)?.body)
}

pub fn is_daemon_or_mirror(p: &Pod) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
        || p.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "DaemonSet")
}
