//! What the simulator counts, for tests, the demo and benchmarks: API requests by verb and
//! resource, evictions by outcome, disruption-budget violations, unschedulable pod-seconds.

use std::collections::BTreeMap;

use serde::Serialize;

/// One time a PDB's healthy count fell below what it requires through a voluntary action.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetViolation {
    pub time: String,
    pub namespace: String,
    pub pdb: String,
    pub pod: String,
    /// `eviction` or `delete`.
    pub via: String,
    pub healthy_after: i32,
    pub desired_healthy: i32,
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// `verb resource` (e.g. `list pods`, `create pods/eviction`) to count.
    pub requests: BTreeMap<String, u64>,
    /// `success`, `budget` (429, no disruptions allowed), `budget-unprocessed` (429 + Retry-After),
    /// `multiple-pdbs` (500), `not-found` (404), `conflict` (409), `bypass` (deleted without
    /// consulting a budget: pending, finished or terminating pods, or no PDB),
    /// `unhealthy-allowed` (a not-Ready pod evicted without using the budget).
    pub evictions: BTreeMap<String, u64>,
    pub budget_violations: Vec<BudgetViolation>,
    pub unschedulable_pod_seconds: f64,
    /// Nodes created and removed by the simulated autoscaler.
    pub nodes_launched: u64,
    pub nodes_removed: u64,
    pub pods_created: u64,
    /// Pods the scheduler removed to make room for a higher-priority pod.
    pub pods_preempted: u64,
    /// Evictions being answered now, and the most there were at once: how many a client
    /// sends side by side.
    pub evictions_in_flight: u64,
    pub evictions_in_flight_peak: u64,
}

impl Stats {
    pub fn count_request(&mut self, verb: &str, resource: &str) {
        *self
            .requests
            .entry(format!("{verb} {resource}"))
            .or_default() += 1;
    }

    /// An eviction request arrived; it is answered at [`Stats::eviction_answered`].
    pub fn eviction_arrived(&mut self) {
        self.evictions_in_flight += 1;
        self.evictions_in_flight_peak = self.evictions_in_flight_peak.max(self.evictions_in_flight);
    }

    pub fn eviction_answered(&mut self) {
        // A reset of the stats may have come in between.
        self.evictions_in_flight = self.evictions_in_flight.saturating_sub(1);
    }

    pub fn count_eviction(&mut self, outcome: &str) {
        *self.evictions.entry(outcome.to_string()).or_default() += 1;
    }

    pub fn total_requests(&self) -> u64 {
        self.requests.values().sum()
    }
}
