//! Wiring of a running drainer: clients, the metrics and health server, leader election, the
//! budget cache, and the control loop, until shutdown or loss of the lease. The binary's `run`
//! subcommand calls [`run`]; tests call it in-process against the simulator.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::Api;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use prometheus_client::registry::Registry;
use rotor_core::admin::{AdminServer, AdminState, Readiness};
use rotor_core::client::client;
use tokio_util::sync::CancellationToken;

use crate::config::{DrainerConfig, LeaderArgs};
use crate::drain::Ctx;
use crate::error::RunError;
use crate::fence::{Fence, fenced_client};
use crate::leader::{Election, LeaderConfig};
use crate::metrics::Metrics;
use crate::surge::SurgeConfig;

/// Runs the drainer until `stop` is cancelled (Ok) or the lease is lost (Err).
pub async fn run(
    config: kube::Config,
    cfg: DrainerConfig,
    leader_args: LeaderArgs,
    admin_listen: SocketAddr,
    stop: CancellationToken,
) -> Result<(), RunError> {
    let lease = lease_config(&leader_args);
    let identity = lease.identity.clone();
    let config = with_user_agent(config, &identity);
    // The election, the watches and the start-up sweep use `kube_client`; everything done as
    // the leader goes through the fenced clients, whose writes stop the moment this replica's
    // hold on the lease may have run out (see `crate::fence`).
    let fence = Fence::default();
    let kube_client = client(config.clone())?;
    let acting_client = fenced_client(config.clone(), &fence, true)?;
    let evict_client = fenced_client(config, &fence, false)?;
    if let Some(surge) = &cfg.surge {
        check_surge_priority_class(&kube_client, surge).await?;
    }

    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let readiness = Readiness::new();
    let server = AdminServer::bind(
        admin_listen,
        AdminState::new(Arc::new(registry), readiness.clone()),
    )
    .await?;
    tracing::info!(addr = %server.local_addr(), "serving /metrics, /healthz and /readyz");
    // Stopped at the end of `run`, however it ends: a lost lease must end the process too.
    let admin_stop = stop.child_token();
    let admin_task = tokio::spawn(server.run(admin_stop.clone()));

    // Ended by us once the control loop has stopped, not by `stop` directly: the loop must not
    // see the election end before it sees the shutdown.
    let election_stop = CancellationToken::new();
    let mut election = Election::start(kube_client.clone(), lease, fence, election_stop.clone());
    readiness.set_ready(true);
    tracing::info!(%identity, lease = %leader_args.lease_name, namespace = %leader_args.lease_namespace, "watching the cluster; contending for the leader lease only while a node needs rotor");

    // Every replica keeps the same watches, leading or not: the node watch tells it when to
    // contend, and a new leader starts with its caches warm.
    let budgets = BudgetCache::start(kube_client.clone());
    let reporter = Reporter {
        controller: "rotor-drainer".into(),
        instance: Some(identity),
    };
    let notifier =
        crate::notify::Notifier::start(cfg.notify.clone()).map_err(RunError::NotifyClient)?;
    if let Some(surge) = cfg.surge.clone() {
        // Room made ahead for a node records nothing on the node, so if the drainer stopped and
        // the node's taint went meanwhile, no node needs rotor and no new term's sweep would
        // come: every replica sweeps once as it starts, leading or not. A live leader only
        // loses room made ahead, which its drain makes again.
        let client = kube_client.clone();
        tokio::spawn(async move { crate::reserve::sweep(&client, &surge).await });
    }
    let ctx = Arc::new(Ctx {
        client: acting_client,
        evict_client,
        cfg,
        reporter,
        metrics,
        budgets: budgets.store,
        budget_changes: budgets.changes,
        claims: Default::default(),
        in_flight: Default::default(),
        pace: Default::default(),
        budget_turns: Default::default(),
        surge_slots: Default::default(),
        fleet_size: Default::default(),
        rotation: crate::rotation::RecordRef::beside_lease(
            &leader_args.lease_namespace,
            &leader_args.lease_name,
        ),
        notifier,
    });

    // Acting stops when we shut down or lose the lease (not when we release it: the controller
    // does that itself, once nothing is running).
    let acting = stop.child_token();
    let lost = {
        let (acting, lost) = (acting.clone(), election.lost.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = lost.cancelled() => { acting.cancel(); true }
                _ = acting.cancelled() => false,
            }
        })
    };
    let result = async {
        tokio::select! {
            ready = ctx.budgets.wait_until_ready() => ready.map_err(RunError::BudgetCache)?,
            _ = acting.cancelled() => return Ok(()),
        }
        crate::controller::run(
            ctx.clone(),
            &mut election,
            leader_args.release_lease_after,
            acting.clone(),
        )
        .await
    }
    .await;
    acting.cancel();
    budgets.task.abort();
    election_stop.cancel();
    election.join().await;
    let lost_lease = lost.await.unwrap_or(false);
    admin_stop.cancel();
    let _ = admin_task.await;
    result?;
    if lost_lease {
        return Err(RunError::LostLease);
    }
    Ok(())
}

/// Surge needs its PriorityClass; one whose value would keep placeholders from doing their job
/// is named in a warning. Checked before anything else starts, so a missing class stops the
/// drainer with a message that says how to add it.
async fn check_surge_priority_class(
    client: &kube::Client,
    surge: &SurgeConfig,
) -> Result<(), RunError> {
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let class = classes
        .get_opt(&surge.priority_class)
        .await
        .map_err(|error| RunError::SurgePriorityClassUnreadable {
            name: surge.priority_class.clone(),
            error,
        })?
        .ok_or_else(|| RunError::SurgePriorityClassMissing {
            name: surge.priority_class.clone(),
        })?;
    if let Some(warning) = crate::surge::priority_warning(class.value) {
        tracing::warn!(priority_class = %surge.priority_class, value = class.value, "{warning}");
    }
    Ok(())
}

/// The lease this replica contends for; its identity is `--identity`, else the pod's host name
/// and process id.
fn lease_config(leader_args: &LeaderArgs) -> LeaderConfig {
    let identity = leader_args.identity.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "rotor-drainer".into());
        format!("{host}-{}", std::process::id())
    });
    LeaderConfig {
        namespace: leader_args.lease_namespace.clone(),
        name: leader_args.lease_name.clone(),
        identity,
        lease_duration: leader_args.lease_duration,
        renew_every: (leader_args.lease_duration / 3).max(Duration::from_millis(500)),
    }
}

/// PodDisruptionBudgets cached cluster-wide, and a counter bumped on every change so that
/// drains waiting on a refused eviction retry at once.
struct BudgetCache {
    store: Store<PodDisruptionBudget>,
    changes: tokio::sync::watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl BudgetCache {
    fn start(client: kube::Client) -> BudgetCache {
        let (store, writer) = reflector::store::<PodDisruptionBudget>();
        let (changes_tx, changes) = tokio::sync::watch::channel(0u64);
        // The cache holds every budget of the cluster (thousands in a large one), and the
        // drainer reads only their names, selectors, generations and status: the managed fields
        // and annotations (a kubectl last-applied copy of the spec) go before they are stored.
        let budgets = watcher(
            Api::<PodDisruptionBudget>::all(client),
            watcher::Config::default(),
        )
        .modify(|pdb| {
            pdb.metadata.managed_fields = None;
            pdb.metadata.annotations = None;
        });
        let stream = reflector(writer, budgets)
            .default_backoff()
            .touched_objects();
        let task = tokio::spawn(async move {
            let mut stream = stream.boxed();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(_) => changes_tx.send_modify(|n| *n += 1),
                    Err(e) => {
                        tracing::warn!(error = %e, "PodDisruptionBudget watch failed; it restarts with back-off")
                    }
                }
            }
        });
        BudgetCache {
            store,
            changes,
            task,
        }
    }
}

/// `config` with a User-Agent that names this replica, so that the API server's audit log tells
/// the replicas' requests apart.
fn with_user_agent(mut config: kube::Config, identity: &str) -> kube::Config {
    let agent = format!("rotor-drainer/{} ({identity})", env!("CARGO_PKG_VERSION"));
    let value = http::HeaderValue::from_str(&agent).unwrap_or_else(|_| {
        http::HeaderValue::from_static(concat!("rotor-drainer/", env!("CARGO_PKG_VERSION")))
    });
    config.headers.push((http::header::USER_AGENT, value));
    config
}
