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
    /// Reads of one node's pods (field selector `spec.nodeName=<node>`), by node: lists, and
    /// watches that begin with the pods there (`sendInitialEvents`); what a drain and the
    /// choice before it read of the node.
    pub node_pod_reads: BTreeMap<String, u64>,
}

impl Stats {
    pub fn count_request(&mut self, verb: &str, resource: &str) {
        *self
            .requests
            .entry(format!("{verb} {resource}"))
            .or_default() += 1;
    }

    /// A read of pods arrived; counted for the node when `field_selector` picks one node's
    /// pods (`spec.nodeName=<node>`, alone or beside other terms; an empty name picks the
    /// unbound pods, no node's).
    pub fn count_pod_read(&mut self, field_selector: &str) {
        let node = field_selector
            .split(',')
            .find_map(|term| term.strip_prefix("spec.nodeName="))
            .filter(|node| !node.is_empty());
        if let Some(node) = node {
            *self.node_pod_reads.entry(node.to_string()).or_default() += 1;
        }
    }

    /// An eviction request arrived; it is answered at [`Stats::eviction_answered`].
    pub fn eviction_arrived(&mut self) {
        self.evictions_in_flight += 1;
        self.evictions_in_flight_peak = self.evictions_in_flight_peak.max(self.evictions_in_flight);
    }

    pub fn eviction_answered(&mut self) {
        self.evictions_in_flight = self.evictions_in_flight.saturating_sub(1);
    }

    /// Zeroes the counters. The evictions being answered are still in flight: they stay counted
    /// (their answers take them off) and the peak starts from them.
    pub fn reset(&mut self) {
        let in_flight = self.evictions_in_flight;
        *self = Stats {
            evictions_in_flight: in_flight,
            evictions_in_flight_peak: in_flight,
            ..Stats::default()
        };
    }

    pub fn count_eviction(&mut self, outcome: &str) {
        *self.evictions.entry(outcome.to_string()).or_default() += 1;
    }

    pub fn total_requests(&self) -> u64 {
        self.requests.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_keeps_the_evictions_still_in_flight_and_starts_the_peak_from_them() {
        let mut stats = Stats::default();
        stats.eviction_arrived();
        stats.eviction_arrived();
        stats.eviction_arrived();
        stats.eviction_answered();
        stats.count_request("create", "pods/eviction");
        stats.reset();
        assert_eq!(
            stats.evictions_in_flight_peak, 2,
            "two were still being answered"
        );
        assert!(stats.requests.is_empty(), "the counters are zeroed");
        stats.eviction_arrived();
        assert_eq!(stats.evictions_in_flight_peak, 3, "a new one joins the two");
        stats.eviction_answered();
        stats.eviction_answered();
        stats.eviction_answered();
        stats.eviction_arrived();
        assert_eq!(stats.evictions_in_flight, 1);
        assert_eq!(stats.evictions_in_flight_peak, 3);
    }

    #[test]
    fn a_read_of_one_nodes_pods_is_counted_for_that_node() {
        let mut stats = Stats::default();
        stats.count_pod_read("spec.nodeName=n1");
        stats.count_pod_read("status.phase!=Succeeded,spec.nodeName=n1");
        stats.count_pod_read("spec.nodeName=n2");
        stats.count_pod_read("spec.nodeName!=n3");
        stats.count_pod_read("status.phase=Pending");
        stats.count_pod_read("spec.nodeName=");
        assert_eq!(
            stats.node_pod_reads,
            BTreeMap::from([("n1".to_string(), 2), ("n2".to_string(), 1)])
        );
    }
}
