//! The drainer's Prometheus metrics, named once here: drains by result, drain duration,
//! evictions by outcome, pods held by budgets, seconds the start gate held, nodes by phase,
//! surges and the placeholders preempted, and the health gate's checks and state.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The values each labelled counter's label takes, by family and label: docs/operating.md's
/// metrics table lists them (crates/drainer/tests/metrics_docs.rs compares), and each count
/// checks, in debug builds, that its value is listed.
pub const LABEL_VALUES: [(&str, &str, &[&str]); 6] = [
    ("drains", "result", DRAIN_RESULTS),
    ("evictions", "outcome", EVICTION_OUTCOMES),
    ("surges", "outcome", SURGE_OUTCOMES),
    ("health_checks", "check", HEALTH_CHECKS),
    ("health_checks", "result", HEALTH_RESULTS),
    ("rollout_restarts", "outcome", ROLLOUT_RESTART_OUTCOMES),
];
const DRAIN_RESULTS: &[&str] = &["drained", "failed", "cancelled", "parked"];
const EVICTION_OUTCOMES: &[&str] = &[
    "evicted",
    "gone",
    "budget",
    "retry",
    "multiple_budgets",
    "denied",
    "failed",
    "forced",
];
const SURGE_OUTCOMES: &[&str] = &[
    "ready",
    "timed_out",
    "no_slot",
    "failed",
    "nothing_to_reserve",
];
const HEALTH_CHECKS: &[&str] = &["prometheus", "url"];
const HEALTH_RESULTS: &[&str] = &["healthy", "firing", "unhealthy", "unreachable"];
const ROLLOUT_RESTART_OUTCOMES: &[&str] = &["restarted", "rolling_out", "refused", "failed"];

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
            "Node drains finished, by result (drained, failed, cancelled, parked)",
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
        debug_assert!(
            HEALTH_CHECKS.contains(&check),
            "check {check:?} is not in LABEL_VALUES"
        );
        debug_assert!(
            HEALTH_RESULTS.contains(&result),
            "result {result:?} is not in LABEL_VALUES"
        );
        self.health_checks
            .get_or_create(&HealthCheckLabel {
                check: check.to_string(),
                result: result.to_string(),
            })
            .inc();
    }

    pub fn eviction(&self, outcome: &str) {
        debug_assert!(
            EVICTION_OUTCOMES.contains(&outcome),
            "outcome {outcome:?} is not in LABEL_VALUES"
        );
        self.evictions
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub fn rollout_restart(&self, outcome: &str) {
        debug_assert!(
            ROLLOUT_RESTART_OUTCOMES.contains(&outcome),
            "outcome {outcome:?} is not in LABEL_VALUES"
        );
        self.rollout_restarts
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub fn surge(&self, outcome: &str) {
        debug_assert!(
            SURGE_OUTCOMES.contains(&outcome),
            "outcome {outcome:?} is not in LABEL_VALUES"
        );
        self.surges
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub fn drain_finished(&self, result: &str) {
        debug_assert!(
            DRAIN_RESULTS.contains(&result),
            "result {result:?} is not in LABEL_VALUES"
        );
        self.drains
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }
}
