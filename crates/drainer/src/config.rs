//! rotor-drainer's flags (each with an environment variable) and their validation. Everything an
//! operator can get wrong is rejected here, before the cluster is touched, with a message that
//! names the flag; the binary exits with status 2 on such errors.

use std::time::Duration;

use clap::Args;
use rotor_core::NodeBudget;

use crate::drain::pods::DrainOptions;
use crate::drain::shared::DrainSettings;
use crate::drain::surge::SurgeConfig;
use crate::fleet::controller::FleetSettings;
use crate::fleet::gate::GateConfig;
use crate::fleet::health::{AlertSelector, DEFAULT_ALERT_SELECTOR, HealthConfig};
use crate::fleet::pools::FlagDrain;
use crate::fleet::starts::FleetLimits;
use crate::fleet::window::MaintenanceWindow;
use crate::record::notify::NotifyConfig;

/// A duration flag: `90s`, `15m`, `1h30m` (or ISO 8601); see [`rotor_core::duration`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    rotor_core::parse_duration(s).map_err(|e| e.to_string())
}

/// Flags that parse one by one but not together. The binary exits with status 2 on each.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("--max-concurrent must be at least 1")]
    NoConcurrency,
    #[error("--drain-timeout must be at least 1s")]
    DrainTimeoutTooShort,
    #[error(
        "--force-after ({}s) must be shorter than --drain-timeout ({}s), or the drain fails before anything is forced",
        force_after.as_secs(),
        drain_timeout.as_secs()
    )]
    ForceAfterNotShorter {
        force_after: Duration,
        drain_timeout: Duration,
    },
    #[error(
        "--park-blocked-after ({}s) must be shorter than --drain-timeout ({}s), or the drain fails at its deadline before it could park (0s turns parking off)",
        park_after.as_secs(),
        drain_timeout.as_secs()
    )]
    ParkAfterNotShorter {
        park_after: Duration,
        drain_timeout: Duration,
    },
    #[error(
        "--identity (or POD_NAME) is empty: another replica would read the Lease as free and lead beside this one; leave it unset to use the host name, or set it to the pod's name"
    )]
    EmptyIdentity,
    #[error("--budget-recheck must be at least 1s")]
    BudgetRecheckTooShort,
    #[error(
        "--surge-timeout ({}s) must be at least 1s and shorter than --drain-timeout ({}s), or the drain fails while it waits for room",
        surge_timeout.as_secs(),
        drain_timeout.as_secs()
    )]
    SurgeTimeout {
        surge_timeout: Duration,
        drain_timeout: Duration,
    },
    #[error("--max-surge 0 would never let a drain make room; leave --surge off instead")]
    NoSurge,
    #[error("{0} must not be empty")]
    Empty(&'static str),
    #[error(
        "--halt-after ({}s) must be at least 1s and shorter than --gate-timeout ({}s), or the gate lets the next drain start before the breaker can halt",
        halt_after.as_secs_f64(),
        gate_timeout.as_secs_f64()
    )]
    HaltAfter {
        halt_after: Duration,
        gate_timeout: Duration,
    },
    /// Says nothing of the URL itself: a webhook's path is its secret.
    #[error(
        "--notify-webhook: the {0} webhook is not an http:// or https:// URL with a host (it is not repeated here: webhook URLs carry secrets)"
    )]
    NotifyWebhook(String),
    #[error("{flag}: {error}")]
    HealthTarget {
        flag: &'static str,
        error: rotor_core::http::TargetError,
    },
    #[error(
        "--health-timeout ({}s) must be at least 1s and no longer than --health-interval ({}s)",
        timeout.as_secs_f64(),
        interval.as_secs_f64()
    )]
    HealthTimings {
        timeout: Duration,
        interval: Duration,
    },
    #[error(
        "--lease-duration ({}s) must be between {}s and {}s: shorter, the leader renews too often to ride out a slow answer and leadership flaps; longer, a failed leader's drains wait that long for the next",
        lease_duration.as_secs_f64(),
        LeaderArgs::SHORTEST_LEASE.as_secs(),
        LeaderArgs::LONGEST_LEASE.as_secs()
    )]
    LeaseDuration { lease_duration: Duration },
}

// The drainer's flags. Their doc comments are `--help` text: `<cron>` and bare URLs read as an
// operator types them, not as rustdoc's HTML and links.
#[allow(rustdoc::invalid_html_tags, rustdoc::bare_urls)]
#[derive(Args, Clone, Debug)]
pub struct DrainArgs {
    /// Nodes drained at the same time.
    #[arg(long, env = "ROTOR_MAX_CONCURRENT", default_value_t = 1)]
    pub max_concurrent: usize,

    /// Most nodes that may be unavailable at once (cordoned, NotReady or being deleted, whoever
    /// did it): a count or a percentage of all nodes, rounded up. No new drain starts above it.
    /// Nodes rotor has drained and that wait to be retired do not count: their pods run elsewhere.
    #[arg(long, env = "ROTOR_MAX_UNAVAILABLE", default_value = "1")]
    pub max_unavailable: NodeBudget,

    /// A new node that has not been Ready yet (a replacement still booting) does not count
    /// against --max-unavailable, nor in the fleet's size, for this long after it joined; after
    /// that it counts as NotReady, so replacements that never come up stop the rotation. 0
    /// counts every NotReady node at once.
    #[arg(long, env = "ROTOR_NODE_STARTUP_GRACE", default_value = "10m", value_parser = parse_duration)]
    pub node_startup_grace: Duration,

    /// How long one node may take to drain before it is marked failed (and retried later).
    #[arg(long, env = "ROTOR_DRAIN_TIMEOUT", default_value = "30m", value_parser = parse_duration)]
    pub drain_timeout: Duration,

    /// After this long into a drain, delete the pods that evictions could not move (each with
    /// its own grace period, at least 1 s, and a UID precondition), even against their
    /// PodDisruptionBudget. Off by default; do-not-disrupt pods are never forced.
    #[arg(long, env = "ROTOR_FORCE_AFTER", value_parser = parse_duration)]
    pub force_after: Option<Duration>,

    /// Cap on each evicted pod's termination grace period (by default each pod keeps its own).
    #[arg(long, env = "ROTOR_MAX_GRACE_PERIOD", value_parser = parse_duration)]
    pub max_grace_period: Option<Duration>,

    /// Refuse to evict pods with emptyDir volumes (their data is lost); the node then blocks.
    #[arg(long, env = "ROTOR_REFUSE_EMPTYDIR")]
    pub refuse_emptydir: bool,

    /// Refuse to evict pods that no controller will recreate; the node then blocks.
    #[arg(long, env = "ROTOR_REFUSE_UNMANAGED")]
    pub refuse_unmanaged: bool,

    /// Maintenance window: "<cron> for <duration> [in <time zone>]", e.g.
    /// "0 22 * * 1-5 for 4h in Europe/Berlin". Repeat the flag for several windows (separate
    /// them with ';' in the environment variable). Outside every window no new drain starts;
    /// drains already running finish. No window means always.
    #[arg(long = "window", env = "ROTOR_WINDOWS", value_delimiter = ';')]
    pub windows: Vec<MaintenanceWindow>,

    /// Before the next node starts, no pod may have been unschedulable for longer than this.
    #[arg(long, env = "ROTOR_PENDING_GRACE", default_value = "2m", value_parser = parse_duration)]
    pub pending_grace: Duration,

    /// Namespaces whose pending pods do not hold the gate (comma-separated).
    #[arg(
        long = "gate-ignore-namespace",
        env = "ROTOR_GATE_IGNORE_NAMESPACES",
        value_delimiter = ','
    )]
    pub gate_ignore_namespaces: Vec<String>,

    /// Longest the gate may hold the next node; then it starts anyway, with a warning.
    #[arg(long, env = "ROTOR_GATE_TIMEOUT", default_value = "15m", value_parser = parse_duration)]
    pub gate_timeout: Duration,

    /// While a PodDisruptionBudget refuses an eviction the drainer retries as soon as the budget
    /// changes; this is the slow backstop between retries when nothing changes.
    #[arg(long, env = "ROTOR_BUDGET_RECHECK", default_value = "30s", value_parser = parse_duration)]
    pub budget_recheck: Duration,

    /// How long a drain held only by budgets that will allow in time (the pods evicted before
    /// are not Ready again yet) may go without an eviction before the node turns blocked and a
    /// DrainBlocked Warning Event names the budget; until then it shows evicting, at its
    /// budgets' pace. Blockers that waiting will not clear (an opt-out, a budget that never
    /// allows, an eviction RBAC or admission refuses) show at once. 0 shows every wait at once.
    #[arg(long, env = "ROTOR_BLOCKED_AFTER", default_value = "30s", value_parser = parse_duration)]
    pub blocked_after: Duration,

    /// Park a drain blocked this long by what only a person can clear (an opted-out pod, a
    /// budget that never allows, pods covered by two budgets, an eviction refused by RBAC or
    /// admission): its drain stops, rotor's cordon is undone, the taint stays, and the node no
    /// longer counts against --max-unavailable, so one stuck node does not halt the rotation.
    /// It is tried again after a back-off; the phase `parked`, the node's rotor.dev/blocker and
    /// a DrainParked Event say why. Off by default (a blocked node keeps its slot until someone
    /// acts); RotationPolicies park after 15m unless they say otherwise.
    #[arg(long, env = "ROTOR_PARK_BLOCKED_AFTER", value_parser = parse_duration)]
    pub park_blocked_after: Option<Duration>,

    /// How long a node must have been unschedulable before it may be declared drained: a pod
    /// the scheduler bound from a stale cache just before shows up within it. Counted from when
    /// this drainer first saw a NoSchedule drain taint on the node (since its start or the last
    /// re-list of nodes at the earliest), or from its own cordon for PreferNoSchedule. The node
    /// must also stay empty for a quarter of this time.
    #[arg(long, env = "ROTOR_SETTLE", default_value = "3s", value_parser = parse_duration)]
    pub settle: Duration,

    /// Start a tainted node's drain only once a person or system has approved it by annotating
    /// the node rotor.dev/drain-approved=true. Until then the node is left alone (no cordon, no
    /// eviction) and a DrainHeld Event says what it waits for. A drain under way is not paused.
    #[arg(long, env = "ROTOR_REQUIRE_APPROVAL")]
    pub require_approval: bool,

    /// Replace the only pod of a one-replica Deployment by a rollout restart instead of an
    /// eviction, which would leave it with no replica until the new pod is Ready (and which a
    /// budget such as minAvailable 1 refuses for ever). Only when the Deployment's strategy
    /// starts the new pod first (RollingUpdate, maxSurge at least 1 and maxUnavailable 0 for one
    /// replica; the defaults do) and it is not paused; otherwise the pod is evicted, with a
    /// RolloutRestartRefused Event saying why. Needs get on replicasets and get and patch on
    /// deployments: deploy/components/restart-single-replica grants them.
    #[arg(long, env = "ROTOR_RESTART_SINGLE_REPLICA")]
    pub restart_single_replica: bool,

    /// Honour each node's rotor.dev/replace-by time (a patch deadline; rotor-selector
    /// --replace-within sets it): once it has passed, a pod's do-not-disrupt opt-out no longer
    /// holds the node (the pod is evicted through the API with its grace period), and pods whose
    /// budget can never allow an eviction are deleted, as --force-after would, as the last
    /// resort. Warning Events on the node and those pods say so from --replace-by-warning before.
    /// Off by default: without it the annotation changes nothing.
    #[arg(long, env = "ROTOR_ENFORCE_REPLACE_BY")]
    pub enforce_replace_by: bool,

    /// With --enforce-replace-by: how long before a node's replace-by time its drain warns, on
    /// the node and on each pod that will be overridden.
    #[arg(long, env = "ROTOR_REPLACE_BY_WARNING", default_value = "24h", value_parser = parse_duration, requires = "enforce_replace_by")]
    pub replace_by_warning: Duration,

    /// Circuit breaker: halt the rotation when what it replaced does not come back within this
    /// long: the gate has held the next drain this long (the workloads evicted by the last
    /// drains not Ready again, or pods unschedulable), or a node that joined after the rotation
    /// began has not been Ready this long. A halted rotation starts no drain until
    /// `rotor-drainer resume`; it is written in the rotation record (the ConfigMap
    /// <lease-name>-rotation) and shown by `status`. Must be shorter than --gate-timeout. Off by
    /// default.
    #[arg(long, env = "ROTOR_HALT_AFTER", value_parser = parse_duration)]
    pub halt_after: Option<Duration>,

    /// With --halt-after: a halt also stops the drains under way where they are (cordoned, their
    /// progress kept on the node) until the rotation is resumed. Without it they finish.
    #[arg(long, env = "ROTOR_HALT_STOPS_DRAINS", requires = "halt_after")]
    pub halt_stops_drains: bool,

    /// Notifications: a webhook to POST what happens to the rotation to (rotation started, node
    /// drained, node stuck, rotation halted, rotation finished), as JSON with a `text` line that
    /// Slack-compatible incoming webhooks show as it is. Repeat the flag for several (separate
    /// them with ';' in the environment variable). Retried with back-off; never delays a drain.
    /// The URL is never logged (a webhook's path is its secret): pass it through the
    /// environment from a Secret.
    #[arg(
        long = "notify-webhook",
        env = "ROTOR_NOTIFY_WEBHOOKS",
        value_delimiter = ';',
        hide_env_values = true
    )]
    pub notify_webhooks: Vec<String>,

    /// With --notify-webhook: the cluster's name, at the start of each notice's text.
    #[arg(long, env = "ROTOR_NOTIFY_CLUSTER", requires = "notify_webhooks")]
    pub notify_cluster: Option<String>,

    /// Health gate: Prometheus's base URL (e.g. http://prometheus.monitoring:9090). Before a drain
    /// starts, rotor asks it for the firing alerts --health-alert-selector matches; while any
    /// fires, no new drain starts (running ones finish). An unreachable Prometheus or an answer
    /// that is not its query API holds drains too. Credentials may go in the URL
    /// (https://user:password@...); they are never logged.
    #[arg(long, env = "ROTOR_HEALTH_PROMETHEUS")]
    pub health_prometheus: Option<String>,

    /// With --health-prometheus: which firing alerts hold drains, as PromQL label matchers
    /// (severity="critical",namespace=~"prod-.*"). Empty means every firing alert. The default
    /// leaves out the alerts kube-prometheus keeps firing on purpose.
    #[arg(long, env = "ROTOR_HEALTH_ALERT_SELECTOR", default_value = DEFAULT_ALERT_SELECTOR, requires = "health_prometheus")]
    pub health_alert_selector: AlertSelector,

    /// Health gate: a URL that must answer 2xx to a GET before a drain starts; repeat the flag
    /// for several (separate them with ';' in the environment variable). Any other status, or no
    /// answer within --health-timeout, holds new drains.
    #[arg(long = "health-url", env = "ROTOR_HEALTH_URLS", value_delimiter = ';')]
    pub health_urls: Vec<String>,

    /// Longest one health check may take; no answer by then counts as unhealthy.
    #[arg(long, env = "ROTOR_HEALTH_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub health_timeout: Duration,

    /// A drain starts only on a health verdict at most this old; while the checks hold drains they
    /// are repeated this often.
    #[arg(long, env = "ROTOR_HEALTH_INTERVAL", default_value = "15s", value_parser = parse_duration)]
    pub health_interval: Duration,

    /// Make room before evicting: after the cordon, make a low-priority placeholder pod for
    /// each pod a controller will recreate, requesting what that pod requests and allowed where
    /// it is allowed (one ReplicaSet per group of pods that need the same room); wait until the
    /// scheduler has placed them (a cluster autoscaler or Karpenter adds nodes for them if it
    /// must), then remove them and evict at once, so the replacements find the room free (after
    /// --surge-timeout the drain evicts anyway and the replacements preempt the placeholders
    /// that got a node). Needs the PriorityClass named by --surge-priority-class (deploy/ ships
    /// it).
    #[arg(long, env = "ROTOR_SURGE")]
    pub surge: bool,

    /// With --surge: how long a drain waits for its placeholders to be scheduled (and for a
    /// --max-surge slot); then it drains anyway and says so in an Event.
    #[arg(long, env = "ROTOR_SURGE_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub surge_timeout: Duration,

    /// With --surge: most nodes whose placeholders may be outstanding at once, a count or a
    /// percentage of all nodes (rounded up). By default every running drain may surge.
    #[arg(long, env = "ROTOR_MAX_SURGE", requires = "surge")]
    pub max_surge: Option<NodeBudget>,

    /// With --surge: how many nodes next in line get their room made while the drains before
    /// them run, so that their drains evict as soon as they start (default: --max-concurrent).
    /// 0 makes a node's room only when its drain starts: each drain then waits for its room,
    /// but fewer placeholders are pending to take the room a drain frees. Where nodes are
    /// packed full (Karpenter), a pending placeholder takes freed room before the evicted
    /// pods' replacements can, and those wait to preempt it.
    #[arg(
        long,
        env = "ROTOR_SURGE_AHEAD",
        requires = "surge",
        value_name = "NODES"
    )]
    pub surge_ahead: Option<usize>,

    /// With --surge: the namespace placeholder sets and their pods are made in (rotor's own).
    #[arg(long, env = "ROTOR_SURGE_NAMESPACE", default_value = "rotor-system")]
    pub surge_namespace: String,

    /// With --surge: the placeholders' PriorityClass. Its value must be below every workload's
    /// (so they are preempted) and not below -10 (a cluster autoscaler ignores pending pods
    /// below that).
    #[arg(
        long,
        env = "ROTOR_SURGE_PRIORITY_CLASS",
        default_value = "rotor-surge"
    )]
    pub surge_priority_class: String,

    /// With --surge: the placeholders' image; it only has to start and sleep.
    #[arg(
        long,
        env = "ROTOR_SURGE_IMAGE",
        default_value = "registry.k8s.io/pause:3.10"
    )]
    pub surge_image: String,
}

#[derive(Args, Clone, Debug)]
pub struct LeaderArgs {
    /// Name of the Lease used for leader election.
    #[arg(long, env = "ROTOR_LEASE_NAME", default_value = "rotor-drainer")]
    pub lease_name: String,

    /// Namespace of the Lease (the drainer's own namespace in a cluster).
    #[arg(long, env = "POD_NAMESPACE", default_value = "rotor-system")]
    pub lease_namespace: String,

    /// This replica's identity in the Lease (the pod name in a cluster).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// How long a leader's lease lasts without renewal, from 2s to 1h. The leader renews every
    /// third of it and stops acting when it has not renewed for two thirds; a standby takes
    /// over once the lease has not changed for a whole one.
    #[arg(long, env = "ROTOR_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// How long the leader keeps the lease once no node needs rotor: no drain is under way, no
    /// tainted node may start now (drained, opted out, backing off after a failure, outside
    /// every window or in a paused pool do not count), and no node has rotor's state to undo;
    /// and every RotationPolicy's status is up to date. Then it releases the lease and, like
    /// every other replica, only watches until a node does or a status goes out of date:
    /// replicas contend for the lease only while there is work, so an idle drainer sends no
    /// request but its watches.
    #[arg(long, env = "ROTOR_RELEASE_LEASE_AFTER", default_value = "30s", value_parser = parse_duration)]
    pub release_lease_after: Duration,
}

impl LeaderArgs {
    /// Below this, renewals (a third of it apart, each given a third) cannot ride out one slow
    /// answer, and replicas take the lease from each other.
    pub const SHORTEST_LEASE: Duration = Duration::from_secs(2);
    /// Above this, a failed leader's work waits that long for the next; the Lease's
    /// `leaseDurationSeconds` is an i32 too.
    pub const LONGEST_LEASE: Duration = Duration::from_secs(3600);

    pub fn validate(&self) -> Result<(), ConfigError> {
        // An empty holder reads as a free Lease to every other replica, which would take it at
        // once while this one still acts.
        if self
            .identity
            .as_deref()
            .is_some_and(|i| i.trim().is_empty())
        {
            return Err(ConfigError::EmptyIdentity);
        }
        if !(Self::SHORTEST_LEASE..=Self::LONGEST_LEASE).contains(&self.lease_duration) {
            return Err(ConfigError::LeaseDuration {
                lease_duration: self.lease_duration,
            });
        }
        Ok(())
    }
}

/// Validated settings the runtime uses.
#[derive(Clone, Debug)]
pub struct DrainerConfig {
    pub max_concurrent: usize,
    pub max_unavailable: NodeBudget,
    pub node_startup_grace: Duration,
    pub drain_timeout: Duration,
    pub force_after: Option<Duration>,
    pub options: DrainOptions,
    pub windows: Vec<MaintenanceWindow>,
    pub gate: GateConfig,
    pub gate_timeout: Duration,
    pub budget_recheck: Duration,
    /// `--blocked-after`.
    pub blocked_after: Duration,
    /// `--park-blocked-after`; `Some(ZERO)` never parks, and RotationPolicies follow it (as
    /// they do not follow `None`, where they park after 15m).
    pub park_after: Option<Duration>,
    pub settle: Duration,
    /// `--require-approval`.
    pub require_approval: bool,
    /// `--restart-single-replica`.
    pub restart_single_replica: bool,
    /// The health gate, when a check is set.
    pub health: Option<HealthConfig>,
    /// `--halt-after`: the circuit breaker, when on.
    pub halt_after: Option<Duration>,
    /// `--halt-stops-drains`.
    pub halt_stops_drains: bool,
    /// `--enforce-replace-by`, with its warning period; `None` when off.
    pub replace_by: Option<Duration>,
    /// Notifications, when a webhook is set.
    pub notify: Option<NotifyConfig>,
    /// Surge, when `--surge` is on.
    pub surge: Option<SurgeConfig>,
    /// `--surge-ahead`, resolved: 0 without `--surge`.
    pub surge_ahead: usize,
}

impl DrainerConfig {
    /// The loop over nodes' share of the settings.
    pub fn fleet_settings(&self) -> FleetSettings {
        FleetSettings {
            limits: FleetLimits {
                max_concurrent: self.max_concurrent,
                max_unavailable: self.max_unavailable,
                startup_grace: self.node_startup_grace,
            },
            windows: self.windows.clone(),
            require_approval: self.require_approval,
            halt_after: self.halt_after,
            halt_stops_drains: self.halt_stops_drains,
            surge_ahead: self.surge_ahead,
            gate: self.gate.clone(),
            gate_timeout: self.gate_timeout,
            health: self.health.clone(),
            options: self.options.clone(),
            flag_drain: FlagDrain {
                drain_timeout: self.drain_timeout,
                force_after: self.force_after,
                surge_timeout: self.surge.as_ref().map(|s| s.timeout),
            },
            watch_policies: true,
        }
    }

    /// Each drain's share of the settings.
    pub fn drain_settings(&self) -> DrainSettings {
        DrainSettings {
            drain_timeout: self.drain_timeout,
            force_after: self.force_after,
            options: self.options.clone(),
            budget_recheck: self.budget_recheck,
            blocked_after: self.blocked_after,
            park_after: self.park_after,
            settle: self.settle,
            restart_single_replica: self.restart_single_replica,
            replace_by: self.replace_by,
            several_at_once: self.max_concurrent > 1,
        }
    }
}

impl DrainArgs {
    pub fn validate(&self) -> Result<DrainerConfig, ConfigError> {
        if self.max_concurrent == 0 {
            return Err(ConfigError::NoConcurrency);
        }
        if self.drain_timeout < Duration::from_secs(1) {
            return Err(ConfigError::DrainTimeoutTooShort);
        }
        if let Some(force_after) = self.force_after
            && force_after >= self.drain_timeout
        {
            return Err(ConfigError::ForceAfterNotShorter {
                force_after,
                drain_timeout: self.drain_timeout,
            });
        }
        if let Some(park_after) = self.park_blocked_after
            && !park_after.is_zero()
            && park_after >= self.drain_timeout
        {
            return Err(ConfigError::ParkAfterNotShorter {
                park_after,
                drain_timeout: self.drain_timeout,
            });
        }
        if self.budget_recheck < Duration::from_secs(1) {
            return Err(ConfigError::BudgetRecheckTooShort);
        }
        let surge = self.surge_config()?;
        let health = self.health_config()?;
        let notify = self.notify_config()?;
        if let Some(halt_after) = self.halt_after
            && (halt_after < Duration::from_secs(1) || halt_after >= self.gate_timeout)
        {
            return Err(ConfigError::HaltAfter {
                halt_after,
                gate_timeout: self.gate_timeout,
            });
        }
        Ok(DrainerConfig {
            max_concurrent: self.max_concurrent,
            max_unavailable: self.max_unavailable,
            node_startup_grace: self.node_startup_grace,
            drain_timeout: self.drain_timeout,
            force_after: self.force_after,
            options: DrainOptions {
                evict_emptydir: !self.refuse_emptydir,
                evict_unmanaged: !self.refuse_unmanaged,
                max_grace_period: self.max_grace_period.map(|d| d.as_secs() as i64),
                override_opt_outs: false,
                now: None,
            },
            windows: self.windows.clone(),
            gate: GateConfig {
                pending_grace: self.pending_grace,
                ignored_namespaces: self.gate_ignore_namespaces.clone(),
            },
            gate_timeout: self.gate_timeout,
            budget_recheck: self.budget_recheck,
            blocked_after: self.blocked_after,
            park_after: self.park_blocked_after,
            settle: self.settle,
            require_approval: self.require_approval,
            restart_single_replica: self.restart_single_replica,
            health,
            halt_after: self.halt_after,
            halt_stops_drains: self.halt_stops_drains,
            replace_by: self.enforce_replace_by.then_some(self.replace_by_warning),
            notify,
            surge_ahead: match &surge {
                Some(_) => self.surge_ahead.unwrap_or(self.max_concurrent),
                None => 0,
            },
            surge,
        })
    }

    fn notify_config(&self) -> Result<Option<NotifyConfig>, ConfigError> {
        let ordinal = |i: usize| match i {
            0 => "first".to_string(),
            1 => "second".to_string(),
            2 => "third".to_string(),
            n => format!("{}th", n + 1),
        };
        let webhooks = self
            .notify_webhooks
            .iter()
            .filter(|u| !u.trim().is_empty())
            .enumerate()
            .map(|(i, u)| {
                u.trim()
                    .parse()
                    .map_err(|_| ConfigError::NotifyWebhook(ordinal(i)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((!webhooks.is_empty()).then(|| NotifyConfig {
            webhooks,
            cluster: self
                .notify_cluster
                .as_deref()
                .unwrap_or_default()
                .trim()
                .to_string(),
        }))
    }

    /// URLs are parsed here rather than by clap, whose error would quote the value, credentials
    /// and all.
    fn health_config(&self) -> Result<Option<HealthConfig>, ConfigError> {
        let target = |flag: &'static str, value: &str| {
            value
                .trim()
                .parse()
                .map_err(|error| ConfigError::HealthTarget { flag, error })
        };
        let prometheus = match &self.health_prometheus {
            Some(url) => Some((
                target("--health-prometheus", url)?,
                self.health_alert_selector.clone(),
            )),
            None => None,
        };
        let urls = self
            .health_urls
            .iter()
            .filter(|u| !u.trim().is_empty())
            .map(|u| target("--health-url", u))
            .collect::<Result<Vec<_>, _>>()?;
        if prometheus.is_none() && urls.is_empty() {
            return Ok(None);
        }
        if self.health_timeout < Duration::from_secs(1)
            || self.health_timeout > self.health_interval
        {
            return Err(ConfigError::HealthTimings {
                timeout: self.health_timeout,
                interval: self.health_interval,
            });
        }
        Ok(Some(HealthConfig {
            prometheus,
            urls,
            timeout: self.health_timeout,
            interval: self.health_interval,
        }))
    }

    fn surge_config(&self) -> Result<Option<SurgeConfig>, ConfigError> {
        if !self.surge {
            return Ok(None);
        }
        if self.surge_timeout < Duration::from_secs(1) || self.surge_timeout >= self.drain_timeout {
            return Err(ConfigError::SurgeTimeout {
                surge_timeout: self.surge_timeout,
                drain_timeout: self.drain_timeout,
            });
        }
        if matches!(
            self.max_surge,
            Some(NodeBudget::Count(0) | NodeBudget::Percent(0))
        ) {
            return Err(ConfigError::NoSurge);
        }
        for (flag, value) in [
            ("--surge-namespace", &self.surge_namespace),
            ("--surge-priority-class", &self.surge_priority_class),
            ("--surge-image", &self.surge_image),
        ] {
            if value.trim().is_empty() {
                return Err(ConfigError::Empty(flag));
            }
        }
        Ok(Some(SurgeConfig {
            namespace: self.surge_namespace.clone(),
            priority_class: self.surge_priority_class.clone(),
            image: self.surge_image.clone(),
            timeout: self.surge_timeout,
            max_surge: self.max_surge,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        drain: DrainArgs,
        #[command(flatten)]
        leader: LeaderArgs,
    }

    /// The drainer's flags `args`, parsed and checked; a refusal as its message.
    fn parse(args: &[&str]) -> Result<DrainerConfig, String> {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .map_err(|e| e.to_string())
            .and_then(|cli| cli.drain.validate().map_err(|e| e.to_string()))
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_are_safe() {
        let c = Cli::try_parse_from(["x"])
            .unwrap()
            .drain
            .validate()
            .unwrap();
        assert_eq!(c.max_concurrent, 1);
        assert_eq!(c.node_startup_grace, Duration::from_secs(600));
        assert_eq!(c.drain_timeout, Duration::from_secs(1800));
        assert!(c.force_after.is_none());
        assert!(c.options.evict_emptydir && c.options.evict_unmanaged);
        assert!(c.windows.is_empty());
        assert!(c.health.is_none());
    }

    #[test]
    fn room_is_made_ahead_for_max_concurrent_nodes_unless_surge_ahead_says_otherwise() {
        let ahead = |args: &[&str]| parse(args).unwrap().fleet_settings().surge_ahead;
        assert_eq!(
            ahead(&["--max-concurrent", "3"]),
            0,
            "no room without --surge"
        );
        assert_eq!(ahead(&["--surge", "--max-concurrent", "3"]), 3);
        assert_eq!(
            ahead(&["--surge", "--max-concurrent", "3", "--surge-ahead", "0"]),
            0
        );
        assert_eq!(ahead(&["--surge", "--surge-ahead", "5"]), 5);
        let err = parse(&["--surge-ahead", "1"]).unwrap_err();
        assert!(
            err.contains("required arguments were not provided") && err.contains("--surge"),
            "{err}"
        );
        let err = parse(&["--surge", "--surge-ahead", "two"]).unwrap_err();
        assert!(err.contains("--surge-ahead"), "{err}");
    }

    #[test]
    fn health_checks_parse_and_bad_ones_name_the_flag_without_credentials() {
        let c = parse(&[
            "--health-prometheus",
            "https://ops:t0ken@prom.example/prom",
            "--health-url",
            "http://db-health.ops/ready",
            "--health-url",
            "http://queue.ops/healthz",
        ])
        .unwrap();
        let health = c.health.unwrap();
        let checks: Vec<String> = health.checks().iter().map(|c| c.target().shown()).collect();
        assert_eq!(
            checks,
            [
                "https://prom.example/prom/api/v1/query",
                "http://db-health.ops/ready",
                "http://queue.ops/healthz"
            ]
        );
        assert_eq!(health.interval, Duration::from_secs(15));
        let err = parse(&["--health-url", "http://u:hunter2@ho st/"]).unwrap_err();
        assert!(err.starts_with("--health-url: "), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let err = parse(&["--health-prometheus", "prom:9090"]).unwrap_err();
        assert!(err.starts_with("--health-prometheus: "), "{err}");
        let err = parse(&["--health-url", "http://a/", "--health-timeout", "20s"]).unwrap_err();
        assert!(err.contains("--health-timeout (20s)"), "{err}");
        let err = parse(&[
            "--health-prometheus",
            "http://p",
            "--health-alert-selector",
            "sev=crit",
        ])
        .unwrap_err();
        assert!(err.contains("expected a quoted value"), "{err}");
        let err = parse(&["--halt-after", "20m"]).unwrap_err();
        assert!(
            err.contains("--halt-after (1200s)") && err.contains("--gate-timeout (900s)"),
            "{err}"
        );
        assert!(
            parse(&["--halt-stops-drains"]).is_err(),
            "needs --halt-after"
        );
        let c = parse(&["--halt-after", "10m", "--halt-stops-drains"]).unwrap();
        assert_eq!(
            (c.halt_after, c.halt_stops_drains),
            (Some(Duration::from_secs(600)), true)
        );
        let c = parse(&[
            "--notify-webhook",
            "https://hooks.slack.com/services/T0/B0/x",
            "--notify-cluster",
            "prod-eu",
        ])
        .unwrap();
        let notify = c.notify.unwrap();
        assert_eq!(notify.webhooks[0].origin(), "https://hooks.slack.com");
        assert_eq!(notify.cluster, "prod-eu");
        let err = parse(&[
            "--notify-webhook",
            "http://ok/",
            "--notify-webhook",
            "hooks.slack.com/services/T0/B0/s3cret",
        ])
        .unwrap_err();
        assert!(err.contains("the second webhook"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
        // A selector without Prometheus would be silently unused.
        assert!(parse(&["--health-alert-selector", "a=\"b\""]).is_err());
    }

    #[test]
    fn bad_values_name_the_flag() {
        let err = Cli::try_parse_from(["x", "--max-concurrent", "0"])
            .unwrap()
            .drain
            .validate()
            .unwrap_err();
        assert_eq!(err, ConfigError::NoConcurrency);
        assert!(err.to_string().contains("--max-concurrent"), "{err}");
        let err = Cli::try_parse_from(["x", "--drain-timeout", "10m", "--force-after", "20m"])
            .unwrap()
            .drain
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("--force-after (1200s)"), "{err}");
        let err = parse(&["--drain-timeout", "30m", "--park-blocked-after", "45m"]).unwrap_err();
        assert!(err.contains("--park-blocked-after (2700s)"), "{err}");
        // `--park-blocked-after 0s` reaches the pools: never parked, not their 15m default.
        use crate::fleet::pools::{POLICY_PARK_AFTER, PoolDrain};
        let never = PoolDrain::default().over(
            &parse(&["--park-blocked-after", "0s"])
                .unwrap()
                .drain_settings(),
        );
        let since = "2026-11-28T12:00:00Z".parse().unwrap();
        assert_eq!(
            crate::drain::pass::park_at(Some(since), never.park_after),
            None
        );
        let unset = PoolDrain::default().over(&parse(&[]).unwrap().drain_settings());
        assert_eq!(unset.park_after, Some(POLICY_PARK_AFTER));
        for lease in ["0s", "1500ms", "2h"] {
            let err = Cli::try_parse_from(["x", "--lease-duration", lease])
                .unwrap()
                .leader
                .validate()
                .unwrap_err();
            assert!(
                err.to_string().contains("--lease-duration")
                    && err.to_string().contains("2s and 3600s"),
                "{lease}: {err}"
            );
        }
        for identity in ["", " "] {
            let err = Cli::try_parse_from(["x", "--identity", identity])
                .unwrap()
                .leader
                .validate()
                .unwrap_err();
            assert_eq!(err, ConfigError::EmptyIdentity, "{identity:?}");
        }
        for lease in ["2s", "15s", "1h"] {
            let args = Cli::try_parse_from(["x", "--lease-duration", lease]).unwrap();
            assert_eq!(args.leader.validate(), Ok(()), "{lease}");
        }
        assert!(Cli::try_parse_from(["x", "--drain-timeout", "soon"]).is_err());
        assert!(Cli::try_parse_from(["x", "--max-unavailable", "150%"]).is_err());
        assert!(Cli::try_parse_from(["x", "--window", "every night"]).is_err());
    }

    #[test]
    fn windows_and_caps_parse() {
        let c = Cli::try_parse_from([
            "x",
            "--window",
            "0 22 * * 1-5 for 4h",
            "--window",
            "0 3 * * 6 for 2h in UTC",
            "--max-grace-period",
            "45s",
            "--refuse-emptydir",
        ])
        .unwrap()
        .drain
        .validate()
        .unwrap();
        assert_eq!(c.windows.len(), 2);
        assert_eq!(c.options.max_grace_period, Some(45));
        assert!(!c.options.evict_emptydir);
    }
}
