//! `rotor-sim`: run a simulated Kubernetes cluster from a scenario file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rotor_core::telemetry::{self, LogArgs};
use rotor_sim::authz::Authz;
use rotor_sim::scenario::Scenario;

mod demo;

/// mimalloc rather than glibc's malloc: a simulated cluster is millions of small blocks that
/// are copied on every write, and glibc keeps a header per block and the holes the old copies
/// leave (measured at 20,000 nodes / 600,000 pods in docs/simulator.md, Scale).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "rotor-sim",
    version,
    about = "A simulated Kubernetes cluster that speaks the real API, for testing and demonstrating rotor."
)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a cluster built from a scenario until SIGINT or SIGTERM.
    ///
    /// Prints the address it listens on, and writes a kubeconfig for kubectl and kube clients
    /// when asked. The admin API (stats, actions, faults) is under /sim/v1/ on the same address.
    Serve {
        /// Scenario file (YAML); see examples/scenarios/README.md for the format.
        #[arg(long, env = "ROTOR_SIM_SCENARIO")]
        scenario: PathBuf,
        /// Address to listen on; port 0 picks a free port.
        #[arg(long, env = "ROTOR_SIM_LISTEN", default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Write a kubeconfig pointing at the simulator to this path.
        #[arg(long, env = "ROTOR_SIM_KUBECONFIG_OUT")]
        kubeconfig_out: Option<PathBuf>,
        /// Enforce RBAC from this multi-document YAML file (e.g. the output of `kubectl
        /// kustomize deploy/overlays/kubernetes`): its ServiceAccounts get tokens, its Roles,
        /// ClusterRoles and bindings decide what they may do. The admin kubeconfig's token, and
        /// a request without a token (kubectl sends none to http://), may do everything; an
        /// unknown token gets 401. Off by default: every request is served.
        #[arg(long, env = "ROTOR_SIM_AUTHORIZATION")]
        authorization: Option<PathBuf>,
        /// With --authorization: write `admin.kubeconfig` and one
        /// `<namespace>.<name>.kubeconfig` per ServiceAccount into this directory.
        #[arg(long, env = "ROTOR_SIM_KUBECONFIG_DIR", requires = "authorization")]
        kubeconfig_dir: Option<PathBuf>,
    },
    /// Rotate a simulated cluster with the real rotor-selector and rotor-drainer, live.
    ///
    /// Starts the cluster in this process, upgrades it (or drifts its image in moto with
    /// --provider aws), runs the selector on a CronJob-like schedule and the drainer, shows
    /// progress until no outdated node is left, then a summary and a timeline. The drainer and
    /// selector binaries are looked for beside this one. Exit 0 only for a complete rotation
    /// without budget violations; 1 otherwise; 2 for bad flags or a missing binary.
    Demo(Box<demo::DemoArgs>),
    /// Check a scenario file and print what it would create, without serving.
    Check {
        #[arg(long)]
        scenario: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo's display owns the terminal: there the simulator logs only when RUST_LOG asks.
    let quiet = matches!(cli.command, Command::Demo(_)) && std::env::var_os("RUST_LOG").is_none();
    if !quiet && let Err(e) = telemetry::init(&cli.log) {
        eprintln!("rotor-sim: {e}");
        return ExitCode::from(2);
    }
    match cli.command {
        Command::Demo(args) => demo::run(*args),
        Command::Check { scenario } => match Scenario::load(&scenario) {
            Ok(s) => {
                let nodes: u32 = s.node_groups.iter().map(|g| g.size).sum();
                println!(
                    "scenario {} is valid: {} node groups, {nodes} nodes, {} workloads, {} RotationPolicies",
                    scenario.display(),
                    s.node_groups.len(),
                    s.workloads.len(),
                    s.rotation_policies.len()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rotor-sim: {e}");
                ExitCode::from(2)
            }
        },
        Command::Serve {
            scenario,
            listen,
            kubeconfig_out,
            authorization,
            kubeconfig_dir,
        } => {
            let s = match Scenario::load(&scenario) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("rotor-sim: {e}");
                    return ExitCode::from(2);
                }
            };
            let authz = match authorization.as_deref().map(Authz::load).transpose() {
                Ok(a) => a.map(std::sync::Arc::new),
                Err(e) => {
                    eprintln!("rotor-sim: {e}");
                    return ExitCode::from(2);
                }
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(serve(s, listen, kubeconfig_out, authz, kubeconfig_dir))
        }
    }
}

async fn serve(
    s: Scenario,
    listen: SocketAddr,
    kubeconfig_out: Option<PathBuf>,
    authz: Option<std::sync::Arc<Authz>>,
    kubeconfig_dir: Option<PathBuf>,
) -> ExitCode {
    let token = rotor_core::shutdown::shutdown_token();
    let started = std::time::Instant::now();
    let options = rotor_sim::server::StartOptions {
        authorization: authz.clone(),
    };
    let running = match rotor_sim::server::start_with(&s, listen, token.clone(), options).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rotor-sim: cannot listen on {listen}: {e}");
            return ExitCode::from(1);
        }
    };
    let url = running.url();
    if let Some(path) = &kubeconfig_out
        && let Err(e) = rotor_sim::server::write_kubeconfig(path, &url)
    {
        eprintln!(
            "rotor-sim: cannot write kubeconfig to {}: {e}",
            path.display()
        );
        running.stop().await;
        return ExitCode::from(1);
    }
    if let Some(a) = &authz {
        for w in a.warnings() {
            tracing::warn!("{w}");
        }
        tracing::info!(
            service_accounts = a.service_accounts().len(),
            "authorization enforced"
        );
    }
    if let (Some(dir), Some(a)) = (&kubeconfig_dir, &authz)
        && let Err(e) = a.write_kubeconfigs(dir, &url)
    {
        eprintln!(
            "rotor-sim: cannot write kubeconfigs to {}: {e}",
            dir.display()
        );
        running.stop().await;
        return ExitCode::from(1);
    }
    let (nodes, pods) = {
        let c = running.sim.cluster.lock().expect("cluster lock");
        (c.nodes.len(), c.pods.len())
    };
    tracing::info!(%url, nodes, pods, built_in_ms = started.elapsed().as_millis() as u64, "simulated cluster ready");
    // The address on stdout is the contract with scripts and tests that start the simulator.
    println!("listening on {url}");
    if let Some(path) = &kubeconfig_out {
        println!("kubeconfig written to {}", path.display());
    }
    if let (Some(dir), Some(a)) = (&kubeconfig_dir, &authz) {
        println!(
            "kubeconfigs for the admin and {} service accounts written to {}",
            a.service_accounts().len(),
            dir.display()
        );
    }
    token.cancelled().await;
    tracing::info!("shutting down");
    running.stop().await;
    ExitCode::SUCCESS
}
