//! What the running drains publish for the loop over nodes, by node: what each still needs
//! from the disruption budgets, the gated workloads' pods it evicted, and when rotor's
//! evictions took each budget's disruptions. Drain tasks write their own entries; the loop
//! withdraws a task's entries when it ends, however it ends.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;

use crate::drain::budgets::BudgetDemand;
use crate::drain::pace::BudgetPace;

/// Everything the drains publish, shared by the drain tasks (writers) and the loop over nodes
/// (the start gate and the choice read it).
#[derive(Default)]
pub struct Published {
    /// What the running drains still need from the budgets, for choosing the next node.
    pub claims: BudgetClaims,
    /// The gated workloads' pods the running drains have evicted, for the gate.
    pub in_flight: InFlight,
    /// When rotor's evictions took each budget's disruptions, for choosing the next node.
    pub pace: BudgetPace,
}

/// What each running drain publishes for the controller, by node. Drain tasks write their own
/// entry; the controller withdraws it when the task ends, however it ends.
pub struct PerDrain<T>(std::sync::Mutex<HashMap<String, T>>);

impl<T> Default for PerDrain<T> {
    fn default() -> Self {
        PerDrain(Default::default())
    }
}

impl<T> PerDrain<T> {
    /// Withdraws `node`'s entry (its drain ended) and returns it.
    pub(crate) fn take(&self, node: &str) -> Option<T> {
        self.lock().remove(node)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, T>> {
        // Entries are replaced or counted whole: a panicking writer cannot leave one half-made.
        crate::drain::lock(&self.0)
    }
}

/// What each running drain still needs from the disruption budgets: the pods it has yet to
/// evict, per budget, published at every plan. The controller subtracts it from what the budgets
/// allow when it weighs the next candidates, so that it does not start a node whose pods would
/// queue behind a running drain's.
pub type BudgetClaims = PerDrain<BudgetDemand>;

impl PerDrain<BudgetDemand> {
    /// Publishes what the drain of `node` still needs (replacing what it published before).
    pub(crate) fn set(&self, node: &str, demand: BudgetDemand) {
        self.lock().insert(node.to_string(), demand);
    }

    /// What each running drain still needs, in node-name order.
    pub fn each(&self) -> Vec<BudgetDemand> {
        let map = self.lock();
        let mut names: Vec<&String> = map.keys().collect();
        names.sort();
        names.into_iter().map(|name| map[name].clone()).collect()
    }
}

/// The pods of each workload the gate follows that each running drain has evicted so far. When
/// the task ends, the gate waits for the workloads in its entry; until then it lets those pods be
/// missing from their workloads (see [`crate::fleet::gate::workload_blockers`]).
pub type InFlight = PerDrain<BTreeMap<WorkloadRef, i32>>;

impl PerDrain<BTreeMap<WorkloadRef, i32>> {
    /// The drain of `node` evicted a pod of `owner`.
    pub(crate) fn record(&self, node: &str, owner: &WorkloadRef) {
        let mut map = self.lock();
        *map.entry(node.to_string())
            .or_default()
            .entry(owner.clone())
            .or_default() += 1;
    }

    /// The running drains' evictions, summed per workload.
    pub fn totals(&self) -> BTreeMap<WorkloadRef, i32> {
        let mut totals = BTreeMap::new();
        for evicted in self.lock().values() {
            for (owner, n) in evicted {
                *totals.entry(owner.clone()).or_default() += n;
            }
        }
        totals
    }
}

/// The workload that controls an evicted pod: its kind (as the owner reference names it),
/// namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// The controller of a pod, the form the start gate takes
/// ([`crate::fleet::gate::workload_blockers`]):
/// what the runtime records for each pod it evicts. `None` for pods without a controller.
pub fn owner_of(pod: &Pod) -> Option<WorkloadRef> {
    let owner = crate::drain::pods::controller_ref(&pod.metadata)?;
    Some(WorkloadRef {
        kind: owner.kind.clone(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: owner.name.clone(),
    })
}
