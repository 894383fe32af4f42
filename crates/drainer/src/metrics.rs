//! The drainer's Prometheus metrics, named once here: drains by result, drain duration,
//! evictions by outcome, pods held by budgets, seconds the start gate held, nodes by phase,
//! surges and the placeholders preempted, and the health gate's checks and state.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HealthCheckLabel {
    /// `prometheus` or `url`.
    pub check: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

#[derive(Clone)]
pub struct Metrics {
    pub drains: Family<ResultLabel, Counter>,
    pub drain_duration: Histogram,
    pub evictions: Family<OutcomeLabel, Counter>,
    pub budget_blocked_pods: Gauge,
    pub gate_blocked_seconds: Counter<f64>,
    pub nodes_by_phase: Family<PhaseLabel, Gauge>,
    pub surges: Family<OutcomeLabel, Counter>,
    pub surge_nodes: Gauge,
    pub surge_placeholders_preempted: Counter,
    pub health_checks: Family<HealthCheckLabel, Counter>,
    pub health_gate_open: Gauge,
    pub halted: Gauge,
    pub rollout_restarts: Family<OutcomeLabel, Counter>,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics {
            drains: Family::default(),
            // 30 s doubling to 15,360 s (about 4.3 h): well past the default 30 min deadline.
            drain_duration: Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(30.0, 2.0, 10),
            ),
            evictions: Family::default(),
            budget_blocked_pods: Gauge::default(),
            gate_blocked_seconds: Counter::default(),
            nodes_by_phase: Family::default(),
            surges: Family::default(),
            surge_nodes: Gauge::default(),
            surge_placeholders_preempted: Counter::default(),
            health_checks: Family::default(),
            health_gate_open: Gauge::default(),
            halted: Gauge::default(),
            rollout_restarts: Family::default(),
        };
        // Open until a check says otherwise (and always, with no check configured).
        m.health_gate_open.set(1);
        let r = registry.sub_registry_with_prefix("rotor_drainer");
        r.register(
            "drains",
            "Node drains finished, by result (drained, failed, cancelled)",
            m.drains.clone(),
        );
        r.register(
            "drain_duration_seconds",
            "Time from the start of a drain to the node being drained",
            m.drain_duration.clone(),
        );
        r.register(
            "evictions",
            "Eviction requests by outcome (evicted, gone, budget, retry, multiple_budgets, denied, failed, forced)",
            m.evictions.clone(),
        );
        r.register(
            "budget_blocked_pods",
            "Pods whose eviction a PodDisruptionBudget currently refuses",
            m.budget_blocked_pods.clone(),
        );
        r.register(
            "gate_blocked_seconds",
            "Seconds the start of the next drain waited on the gate",
            m.gate_blocked_seconds.clone(),
        );
        r.register("nodes", "Nodes by drain phase", m.nodes_by_phase.clone());
        r.register(
            "surges",
            "Surges (room made before a drain) by outcome (ready, timed_out, no_slot, failed, nothing_to_reserve)",
            m.surges.clone(),
        );
        r.register(
            "surge_nodes",
            "Nodes whose placeholders are outstanding (what --max-surge caps)",
            m.surge_nodes.clone(),
        );
        r.register(
            "surge_placeholders_preempted",
            "Placeholders the scheduler preempted for pods of higher priority (with --surge; rising: room made ahead competes with the room drains free)",
            m.surge_placeholders_preempted.clone(),
        );
        r.register(
            "health_checks",
            "Health gate checks by check (prometheus, url) and result (healthy, firing, unhealthy, unreachable)",
            m.health_checks.clone(),
        );
        r.register(
            "health_gate_open",
            "1 while the health gate lets drains start, 0 while a health check holds them",
            m.health_gate_open.clone(),
        );
        r.register(
            "halted",
            "1 while the circuit breaker (--halt-after) has halted the rotation, 0 otherwise",
            m.halted.clone(),
        );
        r.register(
            "rollout_restarts",
            "--restart-single-replica: lone replicas of Deployments by outcome (restarted, rolling_out, refused, failed)",
            m.rollout_restarts.clone(),
        );
        m
    }

    pub fn health_check(&self, check: &str, result: &str) {
        self.health_checks
            .get_or_create(&HealthCheckLabel {
                check: check.to_string(),
                result: result.to_string(),
            })
            .inc();
    }

    pub fn eviction(&self, outcome: &str) {
        self.evictions
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub fn rollout_restart(&self, outcome: &str) {
        self.rollout_restarts
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub fn surge(&self, outcome: &str) {
        self.surges
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub fn drain_finished(&self, result: &str) {
        self.drains
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }
}
