//! Pod deletion and eviction as the apiserver performs them: graceful deletion (a
//! deletionTimestamp, then removal once the pod has exited) and the eviction subresource's PDB
//! checks, in the real order. Every voluntary removal of a healthy pod is checked against live
//! budgets and counted when it breaks one. The budgets' status is the disruption controller's
//! (`disruption.rs`).

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::objects::{
    mark_pod_ready, node_name, phase, pod_ready, set_pod_condition_with_reason, terminal,
    terminating,
};
use super::pdb::{self, covers, healthy, selector};
use super::stats::BudgetViolation;
use super::{Cluster, add_secs};
use crate::meta::{ApiError, DeleteOptions, success_status};

/// Who asked for a pod to go: voluntary removals are checked against budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    Eviction,
    ApiDelete,
    /// The simulator's own controllers (scale-down, node removal, replica reduction).
    System,
    /// The scheduler, making room for a pod of higher priority.
    Preempted,
}

impl Cluster {
    /// The replica count a budget expects from the workload controlling `pod`.
    pub fn scale_of_pod(&self, pod: &Pod) -> Option<(String, i32)> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let c = super::objects::controller_of(&pod.metadata)?;
        match c.kind.as_str() {
            "ReplicaSet" => {
                let rs = self.replicasets.get(ns, &c.name)?;
                if let Some(d) = super::objects::controller_of(&rs.metadata)
                    && d.kind == "Deployment"
                {
                    let dep = self.deployments.get(ns, &d.name)?;
                    return Some((d.uid.clone(), dep.spec.as_ref()?.replicas.unwrap_or(1)));
                }
                Some((c.uid.clone(), rs.spec.as_ref()?.replicas.unwrap_or(1)))
            }
            "StatefulSet" => {
                let s = self.statefulsets.get(ns, &c.name)?;
                Some((c.uid.clone(), s.spec.as_ref()?.replicas.unwrap_or(1)))
            }
            _ => None,
        }
    }

    /// Budgets in the pod's namespace whose selector covers it: those the disruption controller
    /// counts it for, and those the eviction subresource consults before letting it go.
    pub fn budgets_covering(&self, pod: &Pod) -> Vec<Arc<PodDisruptionBudget>> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        self.pdbs
            .range(Some(ns), None)
            .filter(|(_, b)| covers(b, selector(b).as_ref(), pod))
            .map(|(_, b)| b.clone())
            .collect()
    }

    pub(super) fn pods_covered_by<'a>(&'a self, budget: &PodDisruptionBudget) -> Vec<&'a Pod> {
        let ns = budget.metadata.namespace.as_deref().unwrap_or("");
        let sel = selector(budget);
        self.pods
            .range(Some(ns), None)
            .map(|(_, p)| p.as_ref())
            .filter(|p| covers(budget, sel.as_ref(), p))
            .collect()
    }

    /// Counts a budget violation for each budget whose live healthy count, without `pod`,
    /// falls below what it requires. Called before a voluntary removal of a pod takes effect.
    fn check_budgets_before_removal(&mut self, pod: &Pod, via: Removal, now: Timestamp) {
        if via == Removal::System || !healthy(pod) {
            return;
        }
        let mut found = Vec::new();
        for budget in self.budgets_covering(pod) {
            let pods = self.pods_covered_by(&budget);
            let scale = |p: &Pod| self.scale_of_pod(p);
            let Some((_, desired)) = pdb::expected_and_desired(&budget, &pods, &scale) else {
                continue;
            };
            let healthy_after = pods
                .iter()
                .filter(|p| healthy(p) && p.metadata.uid != pod.metadata.uid)
                .count() as i32;
            if healthy_after < desired {
                found.push(BudgetViolation {
                    time: now.to_string(),
                    namespace: budget.metadata.namespace.clone().unwrap_or_default(),
                    pdb: budget.metadata.name.clone().unwrap_or_default(),
                    pod: pod.metadata.name.clone().unwrap_or_default(),
                    via: match via {
                        Removal::Eviction => "eviction",
                        Removal::Preempted => "preemption",
                        _ => "delete",
                    }
                    .into(),
                    healthy_after,
                    desired_healthy: desired,
                });
            }
        }
        for v in found {
            tracing::warn!(pdb = %v.pdb, pod = %v.pod, via = %v.via, healthy_after = v.healthy_after, desired = v.desired_healthy, "disruption budget violated");
            self.stats.budget_violations.push(v);
        }
    }

    /// Deletes a pod as the apiserver does: unscheduled or finished pods and a zero grace period
    /// go at once; others get a deletionTimestamp and go when they have exited.
    pub fn delete_pod(
        &mut self,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
        via: Removal,
        now: Timestamp,
    ) -> Result<Arc<Pod>, ApiError> {
        let pod = self
            .pods
            .get(ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found("", "pods", name))?;
        opts.check(&pod.metadata, "", "pods")?;
        let spec_grace = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        let mut grace = opts.grace_period_seconds.unwrap_or(spec_grace).max(0);
        if node_name(&pod).is_none() || terminal(&pod) {
            grace = 0;
        }
        if !terminating(&pod) {
            self.check_budgets_before_removal(&pod, via, now);
        }
        if grace == 0 {
            return Ok(self.pods.remove(ns, name).expect("pod present under lock"));
        }
        let deadline = add_secs(now, grace as f64);
        if let Some(existing) = &pod.metadata.deletion_timestamp
            && existing.0 <= deadline
        {
            // Already terminating with an earlier or equal deadline: nothing changes.
            return Ok(pod);
        }
        let mut p = (*pod).clone();
        p.metadata.deletion_timestamp = Some(Time(deadline));
        p.metadata.deletion_grace_period_seconds = Some(grace);
        mark_pod_ready(&mut p, false, now);
        Ok(self.pods.put(p))
    }

    /// The eviction subresource: `POST pods/{name}/eviction` with a policy/v1 Eviction body.
    ///
    /// Follows the apiserver's `eviction.go`: the `deleteOptions` preconditions are checked by
    /// the final delete, after the budget checks. A stale UID therefore meets the budget first
    /// (429 when it allows nothing, 500 with two budgets) and, when the budget allows one,
    /// costs a disruption before the 409.
    pub fn evict_pod(
        &mut self,
        ns: &str,
        name: &str,
        body: &Value,
        now: Timestamp,
    ) -> Result<Value, ApiError> {
        let opts = DeleteOptions::from_value(&body["deleteOptions"]);
        let Some(pod) = self.pods.get(ns, name).cloned() else {
            self.stats.count_eviction("not-found");
            return Err(ApiError::not_found("", "pods", name));
        };
        // Pods that are not running, or are already going, are deleted without a budget check.
        if terminating(&pod) || matches!(phase(&pod), "Pending" | "Succeeded" | "Failed") {
            self.check_eviction_preconditions(&pod, &opts)?;
            self.stats.count_eviction("bypass");
            self.delete_pod(ns, name, &opts, Removal::Eviction, now)?;
            return Ok(success_status(201));
        }
        let budgets = self.budgets_covering(&pod);
        if budgets.len() > 1 {
            self.stats.count_eviction("multiple-pdbs");
            // Returned by eviction.go as a bare Status: code 500, this message, no reason.
            return Err(ApiError {
                code: 500,
                reason: "",
                message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
                details: None,
                retry_after: None,
            });
        }
        let Some(budget) = budgets.into_iter().next() else {
            self.check_eviction_preconditions(&pod, &opts)?;
            self.stats.count_eviction("bypass");
            self.disrupt_and_delete(ns, name, &opts, now)?;
            return Ok(success_status(201));
        };
        let bname = budget.metadata.name.clone().unwrap_or_default();
        let status = budget.status.clone().unwrap_or_default();
        let policy_always = budget
            .spec
            .as_ref()
            .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
            == Some("AlwaysAllow");
        let refusal = |cause: String| {
            ApiError::too_many_requests(
                "Cannot evict pod as it would violate the pod's disruption budget.",
            )
            .with_causes(json!([{"reason": "DisruptionBudget", "message": cause}]))
        };
        let unprocessed = || {
            refusal(format!(
                "The disruption budget {bname} is still being processed by the server."
            ))
            .with_retry_after(10)
        };
        if !pod_ready(&pod)
            && (policy_always
                || (status.current_healthy >= status.desired_healthy && status.desired_healthy > 0))
        {
            // The apiserver deletes with the pod's resourceVersion as a precondition and turns
            // a conflict into this 429 unless the client set a resourceVersion itself.
            if let Err(e) = opts.check(&pod.metadata, "", "pods") {
                if opts.resource_version.is_none() {
                    self.stats.count_eviction("budget-unprocessed");
                    return Err(unprocessed());
                }
                self.stats.count_eviction("conflict");
                return Err(e);
            }
            self.stats.count_eviction("unhealthy-allowed");
            self.disrupt_and_delete(ns, name, &opts, now)?;
            return Ok(success_status(201));
        }
        if status.observed_generation.unwrap_or(0) < budget.metadata.generation.unwrap_or(0) {
            self.stats.count_eviction("budget-unprocessed");
            return Err(unprocessed());
        }
        if status.disruptions_allowed <= 0 {
            self.stats.count_eviction("budget");
            return Err(refusal(format!(
                "The disruption budget {bname} needs {} healthy pods and has {} currently",
                status.desired_healthy, status.current_healthy
            )));
        }
        // Take one disruption from the budget and remember the pod until it is gone.
        let mut b = (*budget).clone();
        let generation = b.metadata.generation;
        pdb::take_disruption(
            b.status.get_or_insert_with(Default::default),
            name,
            now,
            generation,
        );
        self.pdbs.put(b);
        // Only now does the delete check its preconditions: a stale UID has used the disruption.
        self.check_eviction_preconditions(&pod, &opts)?;
        self.stats.count_eviction("success");
        self.disrupt_and_delete(ns, name, &opts, now)?;
        Ok(success_status(201))
    }

    /// The eviction's delete preconditions (UID, resourceVersion): 409 when they do not hold.
    fn check_eviction_preconditions(
        &mut self,
        pod: &Pod,
        opts: &DeleteOptions,
    ) -> Result<(), ApiError> {
        opts.check(&pod.metadata, "", "pods").inspect_err(|_| {
            self.stats.count_eviction("conflict");
        })
    }

    fn disrupt_and_delete(
        &mut self,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
        now: Timestamp,
    ) -> Result<(), ApiError> {
        self.mark_disruption_target(
            ns,
            name,
            "EvictionByEvictionAPI",
            "Eviction API: evicting".into(),
            now,
        );
        self.delete_pod(ns, name, opts, Removal::Eviction, now)?;
        Ok(())
    }

    /// Says on a pod about to be deleted why it goes, as the API server (an eviction) and the
    /// scheduler (a preemption) do: its `DisruptionTarget` condition, with `reason`.
    pub(super) fn mark_disruption_target(
        &mut self,
        ns: &str,
        name: &str,
        reason: &str,
        message: String,
        now: Timestamp,
    ) {
        if let Some(p) = self.pods.get(ns, name) {
            let mut p = (**p).clone();
            set_pod_condition_with_reason(&mut p, "DisruptionTarget", true, reason, message, now);
            self.pods.put(p);
        }
    }
}
