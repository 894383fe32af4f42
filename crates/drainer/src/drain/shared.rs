//! What every drain task shares: the handles a drain and its passes use, each for one job,
//! and the two ways a task is stopped. Built once by the runtime; the loop over nodes only
//! starts tasks with it.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::drain::budgets_io::BudgetWatch;
use crate::drain::eviction_io::EvictionWire;
use crate::drain::pods::DrainOptions;
use crate::drain::published::Published;
use crate::drain::rules_io::DrainRuleWatch;
use crate::drain::surge_io::SurgeRoom;
use crate::drain::watched_io::PodWatches;
use crate::metrics::Metrics;
use crate::record::events_io::Announcer;

/// One drain's settings, from the flags (`crate::config`).
#[derive(Clone, Debug)]
pub struct DrainSettings {
    /// `--drain-timeout`: an attempt fails at this deadline.
    pub drain_timeout: Duration,
    /// `--force-after`: past it, pods a budget holds are deleted.
    pub force_after: Option<Duration>,
    /// Which pods are evicted, kept or block the drain.
    pub options: DrainOptions,
    /// `--budget-recheck`: how soon a refused eviction is tried again.
    pub budget_recheck: Duration,
    /// `--blocked-after`: how long a budget's ordinary pace may hold a drain before it shows.
    pub blocked_after: Duration,
    /// `--settle`: how long an empty node must have been unschedulable.
    pub settle: Duration,
    /// `--restart-single-replica`.
    pub restart_single_replica: bool,
    /// `--enforce-replace-by`, with its warning period; `None` when off.
    pub replace_by: Option<Duration>,
    /// `--park-blocked-after` (or the node's RotationPolicy): how long a drain may stay blocked
    /// by what only a person can clear before it is parked; `None` or zero: never.
    pub park_after: Option<Duration>,
    /// More than one drain may run at once (`--max-concurrent` above 1).
    pub several_at_once: bool,
}

/// The handles every drain task uses. What the loop over nodes reads of the drains comes
/// through [`Published`]. Cheap to clone: a pool with settings of its own gets a copy
/// ([`Drains::with_settings`]) that shares every handle.
#[derive(Clone)]
pub struct Drains {
    /// For reads, watches and node patches (kube's default retry on).
    pub client: kube::Client,
    /// Each drain's watch over its node's pods.
    pub pod_watches: Arc<PodWatches>,
    /// Evictions and forced deletions (default retry off, so 429s reach the queue).
    pub wire: Arc<EvictionWire>,
    pub settings: DrainSettings,
    pub announcer: Announcer,
    pub metrics: Metrics,
    pub budgets: BudgetWatch,
    /// The DrainRules (and namespaces' labels) the pass plans with.
    pub rules: DrainRuleWatch,
    /// What the drains publish for the loop over nodes.
    pub published: Arc<Published>,
    /// `--surge`: the placeholders' I/O, shared with the loop (which makes room ahead); `None`
    /// for a drain whose pool does not surge.
    pub surge: Option<Arc<SurgeRoom>>,
    /// `--surge`'s room whether this drain's pool surges or not: what the drain's end releases
    /// of room made for its node before its pool stopped surging.
    pub fleet_room: Option<Arc<SurgeRoom>>,
}

impl Drains {
    /// These handles with other settings (a RotationPolicy's), and surge only if `surge`.
    pub fn with_settings(&self, settings: DrainSettings, surge: bool) -> Drains {
        Drains {
            settings,
            surge: self.surge.clone().filter(|_| surge),
            ..self.clone()
        }
    }
}

/// The two ways a drain task is stopped.
#[derive(Clone)]
pub struct Stops {
    /// Stop and undo: the node's taint went.
    pub abort: CancellationToken,
    /// Stop where it is, its state kept on the node: a shutdown, a lost lease, a halt.
    pub stop: CancellationToken,
}

/// A client whose every request fails at once (nothing listens on port 9), for tests of what is
/// decided before and without an answer.
#[cfg(test)]
pub(crate) fn offline_client() -> kube::Client {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    kube::Client::try_from(config).expect("a client needs no server")
}

#[cfg(test)]
impl Drains {
    /// The handles a drain runs with, all on [`offline_client`], with `surge` for `--surge`;
    /// the budget watch runs on `tasks` until `stop`.
    pub(crate) fn offline(
        surge: Option<Arc<SurgeRoom>>,
        tasks: &tokio_util::task::TaskTracker,
        stop: &CancellationToken,
    ) -> Drains {
        use crate::drain::pods::DrainOptions;
        use crate::record::notify_io::Notifier;

        let client = offline_client();
        let reporter = kube::runtime::events::Reporter {
            controller: "rotor-drainer".into(),
            instance: None,
        };
        Drains {
            client: client.clone(),
            pod_watches: Arc::new(PodWatches::new(client.clone())),
            wire: Arc::new(EvictionWire::new(client.clone())),
            settings: DrainSettings {
                drain_timeout: Duration::from_secs(1800),
                force_after: None,
                options: DrainOptions::default(),
                budget_recheck: Duration::from_secs(10),
                blocked_after: Duration::from_secs(300),
                settle: Duration::ZERO,
                restart_single_replica: false,
                replace_by: None,
                park_after: None,
                several_at_once: false,
            },
            announcer: Announcer::new(client.clone(), reporter, Notifier::default()),
            metrics: Metrics::register(&mut prometheus_client::registry::Registry::default()),
            budgets: BudgetWatch::start(client, tasks, stop.clone()),
            rules: DrainRuleWatch::default(),
            published: Arc::new(Published::default()),
            fleet_room: surge.clone(),
            surge,
        }
    }
}
