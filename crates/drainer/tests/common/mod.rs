//! The drainer's own part of its tests' harness: its real runtime run in-process against a
//! simulated cluster (rotor-e2e's [`SimCluster`]).

#![allow(dead_code)]

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
    let cfg = cli.drain.validate().expect("test flags are valid");
    (cfg, cli.leader)
}

impl TestDrainer {
    /// Starts the drainer with these flags (see [`settings`]).
    pub fn start(cluster: &SimCluster, identity: &str, flags: &[&str]) -> TestDrainer {
        let (cfg, leader) = settings(identity, flags);
        let stop = CancellationToken::new();
        let handle = tokio::spawn(rotor_drainer::runtime::run(
            cluster.config(),
            cfg,
            leader,
            "127.0.0.1:0".parse().unwrap(),
            stop.clone(),
        ));
        TestDrainer { stop, handle }
    }

    pub async fn stop(self) -> Result<(), RunError> {
        self.stop.cancel();
        self.handle.await.expect("drainer task")
    }
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
