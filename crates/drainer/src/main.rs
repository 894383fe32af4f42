//! `rotor-drainer`: drains the nodes that carry rotor's drain taint (`run`), and shows what it is
//! doing on a cluster (`status`).

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::Node;
use kube::Config;
use kube::api::{Api, ListParams};
use rotor_core::admin::AdminArgs;
use rotor_core::client::{KubeArgs, client, load_config};
use rotor_core::telemetry::{self, LogArgs};
use rotor_drainer::config::{DrainArgs, LeaderArgs};
use rotor_drainer::record::rotation::{RecordRef, RotationView};
use rotor_drainer::record::rotation_io::{self, Resumed};
use rotor_drainer::record::status::{StatusRow, render_table};

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
    /// annotations; and above them what holds the whole fleet (a halt, the health gate), from
    /// the rotation record beside the leader Lease. Read-only.
    Status {
        /// text: a line for each thing holding the fleet, then a table of the nodes; json: the
        /// same as one object (`rotation` and `nodes`), for scripts.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
        #[command(flatten)]
        record: RecordArgs,
    },
    /// Resume a rotation the circuit breaker halted (--halt-after): remove the halt from the
    /// rotation record. Drains start again at once; the breaker's clocks start afresh, so the
    /// same cause halts the rotation again only after another --halt-after. Fix the cause first.
    Resume {
        #[command(flatten)]
        record: RecordArgs,
    },
}

/// Where the rotation record is.
#[derive(clap::Args)]
struct RecordArgs {
    /// The drainer's Lease name (its rotation record is the ConfigMap <lease-name>-rotation).
    #[arg(long, env = "ROTOR_LEASE_NAME", default_value = "rotor-drainer")]
    lease_name: String,
    /// The drainer's namespace, where its Lease and rotation record are.
    #[arg(long, env = "POD_NAMESPACE", default_value = "rotor-system")]
    lease_namespace: String,
}

impl RecordArgs {
    fn record(&self) -> RecordRef {
        RecordRef::beside_lease(&self.lease_namespace, &self.lease_name)
    }
}

/// Two malloc arenas instead of glibc's default of up to eight per core: every runtime thread
/// that allocates gets an arena of its own, and the pod events the drains deserialize on each
/// thread leave each arena's free space held. Measured with 10 drains at once on a simulated
/// 1,000-node cluster: 48 to 49 MiB resident at the peak with the default, 44 to 46 MiB with
/// two, for the same CPU time (docs/benchmarks.md, "At 1,000 nodes"). A `MALLOC_ARENA_MAX` in the
/// environment is the operator's choice and is left alone.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        unsafe extern "C" {
            fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
        }
        /// glibc's `M_ARENA_MAX` (malloc.h).
        const M_ARENA_MAX: std::ffi::c_int = -8;
        // SAFETY: mallopt takes no pointer and only sets one of the allocator's parameters;
        // called here before the runtime starts any thread.
        unsafe {
            mallopt(M_ARENA_MAX, 2);
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    limit_malloc_arenas();
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
            let cfg = match leader.validate().and_then(|()| drain.validate()) {
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
            let config = match kube_config(&runtime, &cli.kube, "rotor-drainer") {
                Ok(config) => config,
                Err(code) => return code,
            };
            match runtime.block_on(run(config, cfg, leader, admin)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    eprintln!("rotor-drainer: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Status { output, record } => {
            let config = match kube_config(&runtime, &cli.kube, "rotor-drainer status") {
                Ok(config) => config,
                Err(code) => return code,
            };
            match runtime.block_on(status(config, output, record.record())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rotor-drainer status: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Resume { record } => {
            let config = match kube_config(&runtime, &cli.kube, "rotor-drainer resume") {
                Ok(config) => config,
                Err(code) => return code,
            };
            match runtime.block_on(resume(config, record.record())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rotor-drainer resume: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// The kubeconfig (or in-cluster config) `kube` names; one that does not load is bad input,
/// exit 2, before anything reaches the cluster.
fn kube_config(
    runtime: &tokio::runtime::Runtime,
    kube: &KubeArgs,
    who: &str,
) -> Result<Config, ExitCode> {
    runtime.block_on(load_config(kube)).map_err(|e| {
        tracing::error!("{e:#}");
        eprintln!("{who}: {e:#}");
        ExitCode::from(2)
    })
}

async fn run(
    config: Config,
    cfg: rotor_drainer::config::DrainerConfig,
    leader_args: LeaderArgs,
    admin: AdminArgs,
) -> anyhow::Result<()> {
    let stop = rotor_core::shutdown::shutdown_token();
    rotor_drainer::runtime::run(config, cfg, leader_args, admin.admin_listen, stop).await?;
    Ok(())
}

async fn status(config: Config, output: Output, record: RecordRef) -> anyhow::Result<()> {
    let c = client(config)?;
    // The fleet-wide part is a courtesy: without read access to it, the nodes still show.
    let rotation = match rotation_io::read(&c, &record).await {
        Ok(view) => view,
        Err(e) => {
            eprintln!(
                "rotor-drainer status: cannot read the rotation record configmap {}/{} ({e}); showing the nodes only",
                record.namespace, record.name
            );
            RotationView::default()
        }
    };
    let nodes: Api<Node> = Api::all(c);
    let list = nodes.list(&ListParams::default()).await.map_err(|e| {
        anyhow::anyhow!("cannot list the nodes: {e} (status needs list on nodes, as the ClusterRole rotor-drainer grants)")
    })?;
    let rows: Vec<StatusRow> = list
        .items
        .iter()
        .filter_map(|n| StatusRow::from_node(n, jiff::Timestamp::now(), &rotation.waiting))
        .collect();
    match output {
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "rotation": rotation,
                "nodes": rows,
            }))?
        ),
        Output::Text => {
            let lines = rotation.lines();
            if !lines.is_empty() {
                println!("{}\n", lines.join("\n"));
            }
            print!("{}", render_table(&rows));
        }
    }
    Ok(())
}

async fn resume(config: Config, record: RecordRef) -> anyhow::Result<()> {
    let c = client(config)?;
    let lifted = rotation_io::resume(&c, &record).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot resume through the rotation record configmap {}/{}: {e} (it needs get and patch on that ConfigMap)",
            record.namespace,
            record.name
        )
    })?;
    match lifted {
        Resumed::Lifted { halt, server_clock } => {
            println!(
                "resumed the rotation halted since {}: {}\ndrains start again; the same cause halts it again after another --halt-after",
                halt.since, halt.reason
            );
            if !server_clock {
                println!(
                    "note: the API server's answer carried no date, so resumedAt holds this machine's clock; if it is behind the cluster's by --halt-after or more, the rotation halts again at once"
                );
            }
        }
        Resumed::NotHalted => println!(
            "the rotation is not halted (configmap {}/{}); nothing to resume",
            record.namespace, record.name
        ),
        Resumed::NoRecord => println!(
            "no rotation record at configmap {}/{}, so nothing is halted there; if the drainer runs in another namespace or with another lease name, pass --lease-namespace and --lease-name",
            record.namespace, record.name
        ),
    }
    Ok(())
}
