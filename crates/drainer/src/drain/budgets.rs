//! The disruption-budget arithmetic of a drain: the budgets as the Eviction API reads them, which
//! let a not-Ready pod through without a disruption, which can never allow an eviction (read
//! from their own status), what a node's drain asks of each budget ([`BudgetDemand`]) and how
//! fast each budget gives disruptions back ([`budget_paces`]). Pure functions over the
//! PodDisruptionBudgets; the node's plan ([`crate::drain::node_plan`]) calls them (and decides, per
//! pod, which budgets the Eviction API consults).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rotor_apimachinery::disruption::budget_selector;
use rotor_apimachinery::labels::LabelSelector;
use rotor_core::duration::later;

/// A PodDisruptionBudget's identity, shown as `namespace/name`: the key of every per-budget
/// map (what a drain demands, what is left, how fast each budget paces), so that a budget is
/// never looked up by a pod's or a node's name.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BudgetKey(String);

impl BudgetKey {
    pub fn of(pdb: &PodDisruptionBudget) -> BudgetKey {
        BudgetKey(key_of(&pdb.metadata))
    }
}

impl std::fmt::Display for BudgetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Tests name budgets as `namespace/name`.
#[cfg(test)]
impl From<&str> for BudgetKey {
    fn from(key: &str) -> BudgetKey {
        BudgetKey(key.to_owned())
    }
}

/// A budget as the eviction API sees it: its key and its selector, if that selects anything.
pub(crate) struct BudgetView<'a> {
    pub(crate) key: BudgetKey,
    pub(crate) namespace: &'a str,
    pub(crate) selector: LabelSelector,
    pub(crate) pdb: &'a PodDisruptionBudget,
}

/// The budgets the eviction API would consult for a pod: same namespace, selector valid and not
/// null (an empty selector covers every pod of the namespace, a null one none).
pub(crate) fn budget_views(pdbs: &[PodDisruptionBudget]) -> Vec<BudgetView<'_>> {
    pdbs.iter()
        .filter_map(|pdb| {
            let selector = budget_selector(pdb)?;
            Some(BudgetView {
                key: BudgetKey::of(pdb),
                namespace: pdb.metadata.namespace.as_deref().unwrap_or_default(),
                selector,
                pdb,
            })
        })
        .collect()
}

/// The `namespace/name` of an object's metadata: how pods are named, and what a
/// [`BudgetKey`] holds.
pub(crate) fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// What [`BudgetDemand::waits`] says of a node whose drain would block (several budgets, a budget that
/// never allows, a do-not-disrupt pod, a refused kind of pod): start it after the others.
pub const WOULD_BLOCK: u32 = 1_000;

/// What a node's drain asks of the disruption budgets: for each budget, how
/// many of its pods that budget would be charged for; or that the drain would block (several
/// budgets, a budget that never allows, a do-not-disrupt pod, a refused kind of pod). The
/// controller weighs candidates with it, and running drains publish what they still need, so
/// that several starts do not all queue on the same budget.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BudgetDemand {
    pub blocks: bool,
    pub pods: BTreeMap<BudgetKey, u32>,
}

impl BudgetDemand {
    /// How long these pods would queue on their budgets, in evictions: for each budget, its
    /// pods here beyond what it has left to give (`allowed`: the disruptions it allows now, less
    /// what running drains and earlier picks claimed; negative when pods elsewhere already
    /// queue on it, and they go first). Budgets not in `allowed` give nothing. A drain that would
    /// block scores [`WOULD_BLOCK`].
    pub fn waits(&self, allowed: &BTreeMap<BudgetKey, i64>) -> u32 {
        if self.blocks {
            return WOULD_BLOCK;
        }
        let waits: i64 = self
            .pods
            .iter()
            .map(|(budget, pods)| {
                let left = allowed.get(budget).copied().unwrap_or(0);
                (i64::from(*pods) - left).max(0)
            })
            .sum();
        u32::try_from(waits)
            .unwrap_or(u32::MAX)
            .min(WOULD_BLOCK - 1)
    }

    /// Claims these pods' disruptions from `allowed`, for the next choice to see.
    pub fn claim(&self, allowed: &mut BTreeMap<BudgetKey, i64>) {
        for (budget, pods) in &self.pods {
            *allowed.entry(budget.clone()).or_default() -= i64::from(*pods);
        }
    }
}

/// How fast a budget lets evictions through, read from its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DisruptionPace {
    /// What it allows now (`status.disruptionsAllowed`).
    pub allowed_now: i64,
    /// How many disruptions it allows at once when every pod is healthy (`expectedPods -
    /// desiredHealthy`, at least 1): how many evictions one round of replacements lets through.
    pub per_round: i64,
}

/// Each budget's [`DisruptionPace`].
pub fn budget_paces<'a>(
    pdbs: impl IntoIterator<Item = &'a PodDisruptionBudget>,
) -> BTreeMap<BudgetKey, DisruptionPace> {
    pdbs.into_iter()
        .map(|pdb| {
            let status = pdb.status.as_ref();
            let allowed = status.map_or(0, |s| i64::from(s.disruptions_allowed));
            let per_round = status.map_or(1, |s| {
                i64::from(s.expected_pods) - i64::from(s.desired_healthy)
            });
            let pace = DisruptionPace {
                allowed_now: allowed,
                per_round: per_round.max(1),
            };
            (BudgetKey::of(pdb), pace)
        })
        .collect()
}

/// The eviction API lets a not-Ready pod through this budget without consuming it.
pub(crate) fn unready_pod_passes(pdb: &PodDisruptionBudget) -> bool {
    let always_allow = pdb
        .spec
        .as_ref()
        .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
        == Some("AlwaysAllow");
    let healthy = pdb
        .status
        .as_ref()
        .is_some_and(|s| s.desired_healthy > 0 && s.current_healthy >= s.desired_healthy);
    always_allow || healthy
}

/// Why a budget can never allow an eviction, as [`budget_never_allows`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeverAllows {
    /// For an operator, e.g. "minAvailable 3 leaves no pod to spare out of 3 expected".
    pub reason: String,
    /// Read from the pods the budget matches right now (an integer `minAvailable` against
    /// `status.expectedPods`), a count that dips for a moment in every eviction: see
    /// [`refusal_settles_at`]. False for a verdict from the spec or from a replicas hint.
    pub from_pod_count: bool,
}

/// Why `pdb` can never allow an eviction, or `None` when it may.
///
/// Never: `maxUnavailable` 0 or `"0%"`; `minAvailable` `"100%"` (or more); `minAvailable` that,
/// scaled to the expected pod count, reaches that count; neither field; a `maxUnavailable` or a
/// percentage whose current status expects no pod (its pods have no controller). The expected count is `replicas_hint`
/// when given (e.g. the owning workload's `spec.replicas`), else the budget's
/// `status.expectedPods` when it is positive and the status is current (`observedGeneration` not
/// behind `metadata.generation`). A budget whose status currently allows disruptions is never
/// reported, whatever its spec says. Values the disruption controller cannot use (a string that
/// is not a percentage) are not judged.
pub fn budget_never_allows(
    pdb: &PodDisruptionBudget,
    replicas_hint: Option<i32>,
) -> Option<NeverAllows> {
    let spec = pdb.spec.as_ref()?;
    let status = pdb.status.as_ref();
    if status.is_some_and(|s| s.disruptions_allowed > 0) {
        return None;
    }
    let status_current = status.is_some_and(|s| {
        s.observed_generation.unwrap_or(0) >= pdb.metadata.generation.unwrap_or(0)
    });
    let expected = replicas_hint
        .or_else(|| status.filter(|_| status_current).map(|s| s.expected_pods))
        .filter(|n| *n > 0);
    let from_spec = |reason: String| NeverAllows {
        reason,
        from_pod_count: false,
    };
    // A maxUnavailable or a percentage is measured against the scale of the workloads that
    // control the budget's pods; pods no workload controls (bare pods) count for none, and a
    // budget that expects no pod allows nothing. Read from the status, so it waits out
    // POD_COUNT_SETTLE like a count.
    let expects_no_pod = |rule: String| {
        (replicas_hint.is_none()
            && status.is_some_and(|s| status_current && s.expected_pods == 0))
        .then(|| NeverAllows {
            reason: format!(
                "{rule} is measured against the scale of the workloads controlling its pods, and it expects none (expectedPods 0: its pods have no controller): it allows no eviction"
            ),
            from_pod_count: true,
        })
    };

    if let Some(max_unavailable) = &spec.max_unavailable {
        return match max_unavailable {
            IntOrString::Int(0) => Some(from_spec("maxUnavailable is 0".to_owned())),
            IntOrString::String(s) if parse_percent(s) == Some(0) => {
                Some(from_spec(format!("maxUnavailable is {s}")))
            }
            IntOrString::Int(n) => expects_no_pod(format!("maxUnavailable {n}")),
            IntOrString::String(s) => expects_no_pod(format!("maxUnavailable {s}")),
        };
    }
    // policy/v1 has no default: the disruption controller expects no pod of such a budget.
    let Some(min_available) = spec.min_available.as_ref() else {
        return Some(from_spec(
            "it sets neither minAvailable nor maxUnavailable, which allows no eviction".to_owned(),
        ));
    };
    match min_available {
        IntOrString::Int(min) => {
            let expected = expected?;
            (*min >= expected).then(|| NeverAllows {
                reason: format!(
                    "minAvailable {min} leaves no pod to spare out of {expected} expected"
                ),
                from_pod_count: replicas_hint.is_none(),
            })
        }
        IntOrString::String(s) => {
            let percent = parse_percent(s)?;
            if percent >= 100 {
                return Some(from_spec(format!("minAvailable is {s}")));
            }
            let Some(expected) = expected else {
                return expects_no_pod(format!("minAvailable {s}"));
            };
            // The disruption controller rounds minAvailable percentages up, and measures a
            // percentage against the workloads' scale, which does not dip in an eviction.
            let expected_count = u64::from(expected.unsigned_abs());
            let desired = (u64::from(percent) * expected_count).div_ceil(100);
            (desired >= expected_count).then(|| {
                from_spec(format!(
                    "minAvailable {s} of {expected} expected pods is {desired}: none to spare"
                ))
            })
        }
    }
}

/// How long a budget must have refused before a refusal read from its pod count is taken as
/// never. An integer `minAvailable` is measured against the pods the budget matches right now
/// (`status.expectedPods`), and that count dips by one between an evicted pod's deletion and its
/// replacement's creation: read in that moment, a budget that will allow again looks as if it
/// never would.
pub const POD_COUNT_SETTLE: Duration = Duration::from_secs(15);

/// When `pdb` will have refused for [`POD_COUNT_SETTLE`], if that is after `now`: until then a
/// [`NeverAllows::from_pod_count`] verdict is not trusted. The clock is the budget's
/// `DisruptionAllowed` condition turning False (its `lastTransitionTime`, which the Eviction API
/// moves when it takes the last disruption). A budget whose status carries no such condition
/// is judged at once.
pub fn refusal_settles_at(pdb: &PodDisruptionBudget, now: Timestamp) -> Option<Timestamp> {
    let refusing_since = pdb
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionAllowed" && c.status == "False")?
        .last_transition_time
        .0;
    let settles_at = later(refusing_since, POD_COUNT_SETTLE);
    (settles_at > now).then_some(settles_at)
}

/// `"25%"` as 25; `None` for anything else.
fn parse_percent(value: &str) -> Option<u32> {
    value.strip_suffix('%')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::drain::fixtures::{pdb, status};

    use super::*;

    #[test]
    fn never_allowing_budgets() {
        let sel = json!({"matchLabels": {"app": "web"}});
        let no_pod_expected =
            json!({"expectedPods": 0, "disruptionsAllowed": 0, "observedGeneration": 1});
        let cases: [(Value, Value, Option<i32>, Option<&str>); 16] = [
            (
                json!({"maxUnavailable": 0}),
                status(3, 0),
                None,
                Some("maxUnavailable is 0"),
            ),
            (
                json!({"maxUnavailable": "0%"}),
                status(3, 0),
                None,
                Some("maxUnavailable is 0%"),
            ),
            (json!({"maxUnavailable": 1}), status(3, 0), None, None),
            (json!({"maxUnavailable": "10%"}), status(3, 0), None, None),
            (
                json!({"minAvailable": "100%"}),
                status(3, 0),
                None,
                Some("minAvailable is 100%"),
            ),
            (
                json!({"minAvailable": 3}),
                status(3, 0),
                None,
                Some("minAvailable 3 leaves no pod to spare out of 3 expected"),
            ),
            (json!({"minAvailable": 2}), status(3, 0), None, None),
            (
                json!({"minAvailable": 2}),
                status(3, 0),
                Some(2),
                Some("minAvailable 2 leaves no pod to spare out of 2 expected"),
            ),
            // ceil(0.9 * 3) = 3: nothing to spare.
            (
                json!({"minAvailable": "90%"}),
                status(3, 0),
                None,
                Some("minAvailable 90% of 3 expected pods is 3: none to spare"),
            ),
            (json!({"minAvailable": "50%"}), status(3, 0), None, None),
            // Unknown expected count: an integer minAvailable cannot be judged.
            (
                json!({"minAvailable": 5}),
                json!({"expectedPods": 0, "disruptionsAllowed": 0}),
                None,
                None,
            ),
            // The budget allows a disruption right now, whatever the spec says.
            (json!({"maxUnavailable": 0}), status(4, 1), None, None),
            // Neither field: policy/v1 has no default, nothing is expected, nothing allowed.
            (
                json!({}),
                status(3, 0),
                None,
                Some("it sets neither minAvailable nor maxUnavailable, which allows no eviction"),
            ),
            // Bare pods under a maxUnavailable or a percentage: no scale, nothing expected.
            (
                json!({"maxUnavailable": 1}),
                no_pod_expected.clone(),
                None,
                Some(
                    "maxUnavailable 1 is measured against the scale of the workloads controlling its pods, and it expects none (expectedPods 0: its pods have no controller): it allows no eviction",
                ),
            ),
            (
                json!({"minAvailable": "50%"}),
                no_pod_expected.clone(),
                None,
                Some(
                    "minAvailable 50% is measured against the scale of the workloads controlling its pods, and it expects none (expectedPods 0: its pods have no controller): it allows no eviction",
                ),
            ),
            // With the owner's replicas known, the pod has a controller: not judged so.
            (json!({"maxUnavailable": 1}), no_pod_expected, Some(3), None),
        ];
        for (mut spec, status, hint, expected) in cases {
            spec["selector"] = sel.clone();
            let budget = pdb("web", spec.clone(), status);
            assert_eq!(
                budget_never_allows(&budget, hint)
                    .map(|n| n.reason)
                    .as_deref(),
                expected,
                "{spec} hint {hint:?}"
            );
        }
    }

    #[test]
    fn stale_budget_status_is_not_trusted_for_counts() {
        let mut budget = pdb(
            "web",
            json!({"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}}),
            status(3, 0),
        );
        assert!(budget_never_allows(&budget, None).is_some());
        budget.metadata.generation = Some(2);
        assert_eq!(budget_never_allows(&budget, None), None);
        // The spec alone still decides for maxUnavailable 0.
        budget.spec.as_mut().unwrap().min_available = None;
        budget.spec.as_mut().unwrap().max_unavailable = Some(IntOrString::Int(0));
        assert!(budget_never_allows(&budget, None).is_some());
    }
}
