//! `rotor-drainer`: drains the nodes that carry rotor's drain taint (`run`), and shows what it is
//! doing on a cluster (`status`).

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use rotor_core::admin::AdminArgs;
use rotor_core::client::{KubeArgs, client, load_config};
use rotor_core::telemetry::{self, LogArgs};
use rotor_drainer::config::{DrainArgs, LeaderArgs};
use rotor_drainer::rotation::{RecordRef, read_health};
use rotor_drainer::status::{StatusRow, render_table};

#[derive(Parser)]
#[command(
    name = "rotor-drainer",
    version,
    about = "Drains Kubernetes nodes that carry the rotor.dev/drain taint: cordon, evict through the Eviction API within PodDisruptionBudgets, record progress on the node."
)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,
    #[command(flatten)]
    kube: KubeArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the drainer (leader-elected; several replicas may run, one acts).
    Run {
        #[command(flatten)]
        drain: Box<DrainArgs>,
        #[command(flatten)]
        leader: LeaderArgs,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Print the nodes rotor is working on: phase, reason, age and blocker, from the node
    /// annotations; and above them what holds the whole fleet (the health gate), from the
    /// rotation record beside the leader Lease. Read-only.
    Status {
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
        /// The drainer's Lease name (its rotation record is <lease-name>-rotation).
        #[arg(long, env = "ROTOR_LEASE_NAME", default_value = "rotor-drainer")]
        lease_name: String,
        /// The drainer's namespace, where its Lease and rotation record are.
        #[arg(long, env = "POD_NAMESPACE", default_value = "rotor-system")]
        lease_namespace: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match cli.command {
        Command::Run {
            drain,
            leader,
            admin,
        } => {
            let cfg = match drain.validate() {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("rotor-drainer: {e}");
                    return ExitCode::from(2);
                }
            };
            if let Err(e) = telemetry::init(&cli.log) {
                eprintln!("rotor-drainer: {e}");
                return ExitCode::from(2);
            }
            match runtime.block_on(run(cli.kube, cfg, leader, admin)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    eprintln!("rotor-drainer: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Status {
            output,
            lease_name,
            lease_namespace,
        } => match runtime.block_on(status(
            cli.kube,
            output,
            RecordRef::beside_lease(&lease_namespace, &lease_name),
        )) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rotor-drainer status: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

async fn run(
    kube_args: KubeArgs,
    cfg: rotor_drainer::config::DrainerConfig,
    leader_args: LeaderArgs,
    admin: AdminArgs,
) -> anyhow::Result<()> {
    let config = load_config(&kube_args).await?;
    let stop = rotor_core::shutdown::shutdown_token();
    rotor_drainer::runtime::run(config, cfg, leader_args, admin.admin_listen, stop).await?;
    Ok(())
}

async fn status(kube_args: KubeArgs, output: Output, record: RecordRef) -> anyhow::Result<()> {
    let config = load_config(&kube_args).await?;
    let c = client(config)?;
    // The fleet-wide part is a courtesy: without read access to it, the nodes still show.
    let health = match read_health(&c, &record).await {
        Ok(health) => health,
        Err(e) => {
            eprintln!(
                "rotor-drainer status: cannot read the rotation record configmap {}/{} ({e}); showing the nodes only",
                record.namespace, record.name
            );
            None
        }
    };
    let nodes: Api<Node> = Api::all(c);
    let list = nodes.list(&ListParams::default()).await?;
    let rows: Vec<StatusRow> = list
        .items
        .iter()
        .filter_map(|n| StatusRow::from_node(n, jiff::Timestamp::now()))
        .collect();
    match output {
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "healthGate": health,
                "nodes": rows,
            }))?
        ),
        Output::Text => {
            if let Some(health) = &health {
                println!("{}\n", health.line());
            }
            print!("{}", render_table(&rows));
        }
    }
    Ok(())
}
