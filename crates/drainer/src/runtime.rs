//! Wiring of a running drainer: clients, the metrics and health server, leader election, the
//! budget cache, and the control loop, until shutdown or loss of the lease. The binary's `run`
//! subcommand calls [`run`]; tests call it in-process against the simulator.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::Api;
use kube::runtime::events::Reporter;
use prometheus_client::registry::Registry;
use rotor_core::admin::{AdminServer, AdminState, Readiness};
use rotor_core::client::client;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{DrainerConfig, LeaderArgs};
use crate::drain::budgets_io::BudgetWatch;
use crate::drain::eviction_io::EvictionWire;
use crate::drain::placeholders_io::watch_placeholders;
use crate::drain::published::Published;
use crate::drain::rules_io::DrainRuleWatch;
use crate::drain::shared::Drains;
use crate::drain::surge::SurgeConfig;
use crate::drain::surge_io::SurgeRoom;
use crate::drain::watched_io::PodWatches;
use crate::error::RunError;
use crate::fleet::controller::Fleet;
use crate::leader::election::{Election, LeaderConfig};
use crate::leader::fence::{Fence, fenced_client};
use crate::metrics::Metrics;
use crate::record::events_io::Announcer;
use crate::record::notify_io::Notifier;
use crate::record::rotation::RecordRef;

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
    // hold on the lease may have run out (see `crate::leader::fence`).
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

    // Every task started below is owned by `tasks` (or joined by name, as the election and the
    // admin server are) and awaited before `run` returns; `tasks_stop` ends the long-lived ones.
    let tasks = TaskTracker::new();
    let tasks_stop = CancellationToken::new();
    // Every replica keeps the same watches, leading or not: the node watch tells it when to
    // contend, and a new leader starts with its caches warm.
    let budgets = BudgetWatch::start(kube_client.clone(), &tasks, tasks_stop.clone());
    let reporter = Reporter {
        controller: "rotor-drainer".into(),
        instance: Some(identity),
    };
    let notifier = Notifier::start(cfg.notify.clone(), &tasks, tasks_stop.clone())
        .map_err(RunError::NotifyClient)?;
    let surge = cfg.surge.clone().map(|surge| {
        Arc::new(SurgeRoom::new(
            acting_client.clone(),
            surge,
            cfg.options.clone(),
            metrics.surge_nodes.clone(),
        ))
    });
    if let Some(room) = surge.clone() {
        // Which placeholders are pending (a drain's room waits for them), and which the
        // scheduler preempted (evicted pods that waited for room).
        tasks.spawn(watch_placeholders(
            kube_client.clone(),
            room.clone(),
            metrics.surge_placeholders_preempted.clone(),
            tasks_stop.clone(),
        ));
        // Room made ahead for a node records nothing on the node, so if the drainer stopped and
        // the node's taint went meanwhile, no node needs rotor and no new term's sweep would
        // come: every replica sweeps once as it starts, leading or not (so with the client that
        // is not fenced). A live leader elsewhere only loses room made ahead, which its drain
        // makes again; this replica's own (its first term may begin meanwhile) is spared.
        let client = kube_client.clone();
        tasks.spawn(async move { room.sweep_with(&client).await });
    }
    let announcer = Announcer::new(acting_client.clone(), reporter, notifier);
    let published = Arc::new(Published::default());
    let drains = Arc::new(Drains {
        client: acting_client.clone(),
        pod_watches: Arc::new(PodWatches::new(acting_client.clone())),
        wire: Arc::new(EvictionWire::new(evict_client)),
        settings: cfg.drain_settings(),
        announcer: announcer.clone(),
        metrics: metrics.clone(),
        budgets: budgets.clone(),
        rules: DrainRuleWatch::start(kube_client.clone(), &tasks, tasks_stop.clone()),
        published: published.clone(),
        fleet_room: surge.clone(),
        surge,
    });
    let fleet = Arc::new(Fleet {
        client: acting_client,
        settings: cfg.fleet_settings(),
        metrics,
        rotation: RecordRef::beside_lease(&leader_args.lease_namespace, &leader_args.lease_name),
        announcer,
        drains,
        published,
        tasks: tasks.clone(),
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
            ready = budgets.wait_until_ready() => ready.map_err(RunError::BudgetCache)?,
            _ = acting.cancelled() => return Ok(()),
        }
        crate::fleet::controller::run(
            fleet,
            &mut election,
            leader_args.release_lease_after,
            acting.clone(),
        )
        .await
    }
    .await;
    acting.cancel();
    tasks_stop.cancel();
    // The lease is still renewed meanwhile, so the tasks' last writes (a halt, a drain's end,
    // a retried write) pass the fence; it is released only after.
    wait_for_tasks(&tasks).await;
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
    if let Some(warning) = crate::drain::surge::priority_warning(class.value) {
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

/// How long a shutdown waits for the tasks beside the drains (Event posts, record writes,
/// placeholder clean-up) before it goes on without them: well inside the pod's default
/// 30 s termination grace period.
const TASKS_GRACE: Duration = Duration::from_secs(10);

/// Waits for every task on `tasks` to end, for at most [`TASKS_GRACE`].
async fn wait_for_tasks(tasks: &TaskTracker) {
    tasks.close();
    if tokio::time::timeout(TASKS_GRACE, tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            running = tasks.len(),
            "some tasks beside the drains were still running {}s into the shutdown; stopping without them (a node's record or Event may be missing its last update)",
            TASKS_GRACE.as_secs()
        );
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
