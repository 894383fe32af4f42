//! PodDisruptionBudget semantics, as the disruption controller computes them: which pods a
//! budget covers, how many it expects and needs healthy, and how many disruptions it allows.
//! Pure functions over the budget, its pods and the owners' scale; no I/O.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rotor_apimachinery::disruption::{budget_covers, budget_selector};
use rotor_apimachinery::labels::LabelSelector;

use super::objects::{pod_ready, terminating};

/// How long an evicted pod that has not started terminating is kept out of the healthy count.
pub const DISRUPTED_POD_TIMEOUT_SECS: i64 = 120;

/// The budget's selector, as the disruption controller and the eviction subresource read it.
pub fn selector(pdb: &PodDisruptionBudget) -> Option<LabelSelector> {
    budget_selector(pdb)
}

pub fn covers(pdb: &PodDisruptionBudget, sel: Option<&LabelSelector>, pod: &Pod) -> bool {
    sel.is_some_and(|sel| budget_covers(pdb, sel, pod))
}

/// `ceil(pct * total / 100)` for "NN%" strings, or the integer itself.
fn scaled(v: &IntOrString, total: i32, round_up: bool) -> Option<i32> {
    match v {
        IntOrString::Int(i) => Some(*i),
        IntOrString::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.trim().parse().ok()?;
            let x = pct * total as i64;
            Some(if round_up { (x + 99) / 100 } else { x / 100 } as i32)
        }
    }
}

fn is_percent(v: &IntOrString) -> bool {
    matches!(v, IntOrString::String(_))
}

/// Expected and desired healthy counts, as the disruption controller computes them:
/// `maxUnavailable` first, then `minAvailable`; neither counts nothing (expected 0, so the budget
/// allows nothing: policy/v1 has no default). `scale_of_pod` answers the replica count of the
/// workload that controls a pod (None when that workload is not found). A pod with no
/// controller is left out of a scale (the controller reports such pods, it does not fail on
/// them). Returns None when the controller would fail to compute (a controller it cannot find):
/// such a budget allows nothing.
pub fn expected_and_desired(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
    scale_of_pod: &dyn Fn(&Pod) -> Option<(String, i32)>,
) -> Option<(i32, i32)> {
    let spec = pdb.spec.as_ref()?;
    let from_scale = || -> Option<i32> {
        let mut seen = BTreeMap::new();
        for p in pods {
            if super::objects::controller_of(&p.metadata).is_none() {
                continue;
            }
            let (uid, n) = scale_of_pod(p)?;
            seen.insert(uid, n);
        }
        Some(seen.values().sum())
    };
    match (&spec.max_unavailable, &spec.min_available) {
        (Some(max), _) => {
            let expected = from_scale()?;
            let max = scaled(max, expected, true)?;
            Some((expected, (expected - max).max(0)))
        }
        (None, Some(min)) if !is_percent(min) => Some((pods.len() as i32, scaled(min, 0, true)?)),
        (None, Some(min)) => {
            let expected = from_scale()?;
            Some((expected, scaled(min, expected, true)?))
        }
        (None, None) => Some((0, 0)),
    }
}

/// Whether a pod counts as healthy for budgets: Ready and not terminating.
pub fn healthy(pod: &Pod) -> bool {
    pod_ready(pod) && !terminating(pod)
}

/// Whether a pod disrupted (evicted) at `at` no longer counts as disrupted at `now`: the
/// disruption controller then counts it healthy again if it still runs.
pub fn disruption_timed_out(at: Timestamp, now: Timestamp) -> bool {
    now.as_second() - at.as_second() >= DISRUPTED_POD_TIMEOUT_SECS
}

/// The status the disruption controller would write now.
pub fn compute_status(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
    scale_of_pod: &dyn Fn(&Pod) -> Option<(String, i32)>,
    now: Timestamp,
) -> PodDisruptionBudgetStatus {
    let old = pdb.status.clone().unwrap_or_default();
    // Keep disrupted-pod entries only for pods that still exist, have not started terminating,
    // and were evicted recently.
    let mut disrupted = BTreeMap::new();
    for (name, t) in old.disrupted_pods.clone().unwrap_or_default() {
        let fresh = !disruption_timed_out(t.0, now);
        let live = pods
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(name.as_str()) && !terminating(p));
        if fresh && live {
            disrupted.insert(name, t);
        }
    }
    let current = pods
        .iter()
        .filter(|p| healthy(p) && !disrupted.contains_key(p.metadata.name.as_deref().unwrap_or("")))
        .count() as i32;
    // Nothing expected allows nothing, whatever runs (a workload scaled to 0 whose pods are
    // still Ready, a budget with neither field).
    let (expected, desired, allowed) = match expected_and_desired(pdb, pods, scale_of_pod) {
        Some((e, d)) if e > 0 => (e, d, (current - d).max(0)),
        Some((e, d)) => (e, d, 0),
        None => (0, 0, 0),
    };
    let allowed_cond = allowed > 0;
    let prev_cond = old
        .conditions
        .as_ref()
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionAllowed"));
    let transition = match prev_cond {
        Some(c) if (c.status == "True") == allowed_cond => c.last_transition_time.clone(),
        _ => Time(now),
    };
    PodDisruptionBudgetStatus {
        current_healthy: current,
        desired_healthy: desired,
        expected_pods: expected,
        disruptions_allowed: allowed,
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        observed_generation: pdb.metadata.generation,
        conditions: Some(vec![disruption_allowed(
            allowed_cond,
            transition,
            pdb.metadata.generation,
        )]),
    }
}

/// The `DisruptionAllowed` condition, as the disruption controller and the Eviction API write it.
fn disruption_allowed(allowed: bool, since: Time, generation: Option<i64>) -> Condition {
    Condition {
        type_: "DisruptionAllowed".into(),
        status: if allowed { "True" } else { "False" }.into(),
        reason: if allowed {
            "SufficientPods"
        } else {
            "InsufficientPods"
        }
        .into(),
        message: String::new(),
        last_transition_time: since,
        observed_generation: generation,
    }
}

/// An eviction takes one disruption from `status` at `now`, as the Eviction API's
/// `checkAndDecrement` does: the pod is remembered as disrupted, and taking the last disruption
/// turns `DisruptionAllowed` False from `now` (what a drainer times a refusal from).
pub fn take_disruption(
    status: &mut PodDisruptionBudgetStatus,
    pod: &str,
    now: Timestamp,
    generation: Option<i64>,
) {
    status.disruptions_allowed -= 1;
    status
        .disrupted_pods
        .get_or_insert_with(BTreeMap::new)
        .insert(pod.to_string(), Time(now));
    if status.disruptions_allowed <= 0 {
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        let already_false = conditions
            .iter()
            .any(|c| c.type_ == "DisruptionAllowed" && c.status == "False");
        if !already_false {
            conditions.retain(|c| c.type_ != "DisruptionAllowed");
            conditions.push(disruption_allowed(false, Time(now), generation));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelector as K8sSel, ObjectMeta, OwnerReference,
    };

    fn pod(name: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: "web-abc".into(),
                    uid: "rs-uid".into(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn pdb(min: Option<IntOrString>, max: Option<IntOrString>) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                min_available: min,
                max_unavailable: max,
                selector: Some(K8sSel {
                    match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                    match_expressions: None,
                }),
                unhealthy_pod_eviction_policy: None,
            }),
            status: None,
        }
    }

    fn scale(n: i32) -> impl Fn(&Pod) -> Option<(String, i32)> {
        move |_| Some(("deploy-uid".into(), n))
    }

    #[test]
    fn min_available_integer_counts_pods() {
        let pods = [pod("a", true), pod("b", true), pod("c", false)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let s = compute_status(
            &pdb(Some(IntOrString::Int(1)), None),
            &refs,
            &scale(3),
            Timestamp::now(),
        );
        assert_eq!(
            (
                s.expected_pods,
                s.desired_healthy,
                s.current_healthy,
                s.disruptions_allowed
            ),
            (3, 1, 2, 1)
        );
        assert_eq!(s.observed_generation, Some(1));
    }

    #[test]
    fn percentages_and_max_unavailable_use_the_controller_scale() {
        let pods = [pod("a", true), pod("b", true), pod("c", true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        // 4 replicas wanted, 3 present: minAvailable 50% of 4 = 2.
        let s = compute_status(
            &pdb(Some(IntOrString::String("50%".into())), None),
            &refs,
            &scale(4),
            Timestamp::now(),
        );
        assert_eq!(
            (s.expected_pods, s.desired_healthy, s.disruptions_allowed),
            (4, 2, 1)
        );
        // maxUnavailable 1 of 4: desired 3, healthy 3, nothing allowed.
        let s = compute_status(
            &pdb(None, Some(IntOrString::Int(1))),
            &refs,
            &scale(4),
            Timestamp::now(),
        );
        assert_eq!((s.desired_healthy, s.disruptions_allowed), (3, 0));
        // maxUnavailable 25% of 4 rounds up to 1.
        let s = compute_status(
            &pdb(None, Some(IntOrString::String("25%".into()))),
            &refs,
            &scale(4),
            Timestamp::now(),
        );
        assert_eq!(s.desired_healthy, 3);
    }

    #[test]
    fn max_unavailable_comes_first_and_a_pod_without_a_controller_is_left_out_of_the_scale() {
        let mut bare = pod("c", true);
        bare.metadata.owner_references = None;
        let pods = [pod("a", true), pod("b", true), bare];
        let refs: Vec<&Pod> = pods.iter().collect();
        // Both fields (the API refuses that, the simulator does not): maxUnavailable decides,
        // of the workload's 2, and the bare pod counts as healthy but not as expected.
        let both = pdb(Some(IntOrString::Int(3)), Some(IntOrString::Int(1)));
        let s = compute_status(&both, &refs, &scale(2), Timestamp::now());
        assert_eq!(
            (
                s.expected_pods,
                s.desired_healthy,
                s.current_healthy,
                s.disruptions_allowed
            ),
            (2, 1, 3, 2)
        );
        // Neither field: nothing expected, nothing allowed.
        let s = compute_status(&pdb(None, None), &refs, &scale(2), Timestamp::now());
        assert_eq!((s.expected_pods, s.disruptions_allowed), (0, 0));
    }

    #[test]
    fn taking_the_last_disruption_turns_the_condition_false_from_then() {
        let pods = [pod("a", true), pod("b", true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let before = Timestamp::from_second(1_800_000_000).unwrap();
        let mut status = compute_status(
            &pdb(Some(IntOrString::Int(1)), None),
            &refs,
            &scale(2),
            before,
        );
        assert_eq!(status.disruptions_allowed, 1);
        let condition = |s: &PodDisruptionBudgetStatus| {
            let c = &s.conditions.as_ref().unwrap()[0];
            (c.status.clone(), c.last_transition_time.0)
        };
        assert_eq!(condition(&status), ("True".into(), before));
        let now = Timestamp::from_second(1_800_000_060).unwrap();
        take_disruption(&mut status, "a", now, Some(1));
        assert_eq!(status.disruptions_allowed, 0);
        assert_eq!(condition(&status), ("False".into(), now));
        assert_eq!(status.conditions.as_ref().unwrap().len(), 1);
        assert!(status.disrupted_pods.as_ref().unwrap().contains_key("a"));
    }

    #[test]
    fn pods_whose_controller_is_not_found_allow_nothing() {
        let pods = [pod("a", true), pod("b", true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let none = |_: &Pod| None;
        let s = compute_status(
            &pdb(None, Some(IntOrString::Int(1))),
            &refs,
            &none,
            Timestamp::now(),
        );
        assert_eq!(s.disruptions_allowed, 0);
    }

    #[test]
    fn disrupted_pods_do_not_count_as_healthy_until_they_expire() {
        let pods = [pod("a", true), pod("b", true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let now = Timestamp::now();
        let mut p = pdb(Some(IntOrString::Int(1)), None);
        p.status = Some(PodDisruptionBudgetStatus {
            disrupted_pods: Some(BTreeMap::from([("a".into(), Time(now))])),
            ..Default::default()
        });
        let s = compute_status(&p, &refs, &scale(2), now);
        assert_eq!((s.current_healthy, s.disruptions_allowed), (1, 0));
        let later =
            Timestamp::from_second(now.as_second() + DISRUPTED_POD_TIMEOUT_SECS + 1).unwrap();
        let s = compute_status(&p, &refs, &scale(2), later);
        assert_eq!((s.current_healthy, s.disruptions_allowed), (2, 1));
    }
}
