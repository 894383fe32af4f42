//! Single-replica Deployments (`--restart-single-replica`). Evicting the only pod of a
//! Deployment leaves it with no replica until the replacement is Ready, and a budget such as
//! `minAvailable: 1` refuses that eviction for ever. When the Deployment's strategy lets its
//! controller start the new pod before it stops the old one, rotor asks for a rollout restart
//! instead: it stamps the pod template ([`RESTARTED_AT_ANNOTATION`]), the controller starts a
//! new pod on another node (this one is cordoned) and removes the old one once the new one is
//! Ready. The drain then goes on as usual.
//!
//! [`judge`] decides from the pod's ReplicaSet and its Deployment, as the API returns them;
//! [`RolloutRestarts`] keeps what was decided for each pod of one drain attempt. The reads and
//! the patch are in [`crate::deployments`].

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
pub use rotor_core::contract::RESTARTED_AT_ANNOTATION;
use serde_json::{Value, json};

use crate::eviction_queue::later;
use crate::pods::PodRef;

/// The revision the Deployment controller writes on a Deployment and on each of its
/// ReplicaSets: a ReplicaSet whose revision is below its Deployment's is being rolled out.
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";

/// How soon to look again at a Deployment its controller has not caught up with yet.
pub const UNSETTLED_RETRY: Duration = Duration::from_secs(2);

/// How soon to look again after a read or the patch failed.
pub const FAILED_RETRY: Duration = Duration::from_secs(30);

/// The ReplicaSet controlling `pod`, if one does: the pods worth looking up.
pub fn replicaset_of(pod: &Pod) -> Option<&str> {
    controller_named(&pod.metadata, "ReplicaSet")
}

/// The Deployment controlling `rs`, when `rs` wants at most one pod: a ReplicaSet with more
/// is not a lone replica's, so its Deployment need not be read.
pub fn lone_deployment_of(rs: &ReplicaSet) -> Option<&str> {
    let wanted = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    (wanted <= 1)
        .then(|| controller_named(&rs.metadata, "Deployment"))
        .flatten()
}

fn controller_named<'a>(meta: &'a kube::api::ObjectMeta, kind: &str) -> Option<&'a str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == kind)
        .map(|o| o.name.as_str())
}

/// What to do with a pod of a Deployment's ReplicaSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// The Deployment wants more than one replica: evicting one leaves the others serving.
    NotLone,
    /// A lone replica whose Deployment would stop it before its replacement is Ready, or not
    /// roll out at all: evicted as without the option, saying why.
    Refused(Refusal),
    /// The pod's ReplicaSet is older than its Deployment's revision: a rollout (rotor's, from
    /// an earlier leader, or anyone's) is replacing it already. Wait for it to go.
    RollingOut,
    /// The controller has not caught up with the Deployment's latest change: look again soon.
    Unsettled,
    /// Stamp the template, on the condition that the Deployment is still at this version.
    Restart { resource_version: String },
}

/// Why a lone replica is evicted rather than restarted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the Deployment is paused, so a restart would not roll out")]
    Paused,
    #[error("its strategy is Recreate, which stops the old pod before it starts the new one")]
    Recreate,
    #[error("its maxSurge {0} allows no extra pod for one replica")]
    NoSurge(String),
    #[error(
        "its maxUnavailable {0} lets the controller stop the old pod before the new one is Ready"
    )]
    StopsFirst(String),
    #[error("its {field} {value:?} is neither a number nor a percentage")]
    Unreadable { field: &'static str, value: String },
}

/// Judges `rs`'s pod by `rs` and its controlling `deployment`, as the API returned them.
pub fn judge(rs: &ReplicaSet, deployment: &Deployment) -> Judgement {
    let Some(spec) = deployment.spec.as_ref() else {
        return Judgement::Unsettled;
    };
    if spec.replicas.unwrap_or(1) != 1 {
        return Judgement::NotLone;
    }
    if spec.paused == Some(true) {
        return Judgement::Refused(Refusal::Paused);
    }
    let observed = deployment
        .status
        .as_ref()
        .and_then(|s| s.observed_generation);
    let current = observed.is_some() && observed >= deployment.metadata.generation;
    let (Some(ours), Some(latest)) = (revision(&rs.metadata), revision(&deployment.metadata))
    else {
        return Judgement::Unsettled;
    };
    if ours < latest {
        return Judgement::RollingOut;
    }
    if !current || ours > latest {
        return Judgement::Unsettled;
    }
    let strategy = spec.strategy.as_ref();
    if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        return Judgement::Refused(Refusal::Recreate);
    }
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    // The API's defaults for both are 25%; for one replica the controller rounds a surge up
    // and an unavailability down, which is what makes the default strategy a surge of one.
    let max_surge = rolling.and_then(|r| r.max_surge.as_ref());
    let max_unavailable = rolling.and_then(|r| r.max_unavailable.as_ref());
    let surge = match for_one_replica(max_surge, "maxSurge", true) {
        Ok(n) => n,
        Err(refusal) => return Judgement::Refused(refusal),
    };
    let unavailable = match for_one_replica(max_unavailable, "maxUnavailable", false) {
        Ok(n) => n,
        Err(refusal) => return Judgement::Refused(refusal),
    };
    if surge < 1 {
        return Judgement::Refused(Refusal::NoSurge(shown(max_surge)));
    }
    if unavailable > 0 {
        return Judgement::Refused(Refusal::StopsFirst(shown(max_unavailable)));
    }
    match deployment.metadata.resource_version.clone() {
        Some(resource_version) => Judgement::Restart { resource_version },
        None => Judgement::Unsettled,
    }
}

fn revision(meta: &kube::api::ObjectMeta) -> Option<u64> {
    meta.annotations
        .as_ref()?
        .get(REVISION_ANNOTATION)?
        .parse()
        .ok()
}

fn shown(value: Option<&IntOrString>) -> String {
    match value {
        Some(IntOrString::Int(n)) => n.to_string(),
        Some(IntOrString::String(s)) => s.clone(),
        None => "25% (the default)".to_string(),
    }
}

/// `value` (25% when unset) resolved for a Deployment of one replica, a percentage rounded up
/// or down as the Deployment controller rounds that field.
fn for_one_replica(
    value: Option<&IntOrString>,
    field: &'static str,
    round_up: bool,
) -> Result<i64, Refusal> {
    let percent = match value {
        Some(IntOrString::Int(n)) => return Ok(i64::from(*n)),
        None => 25,
        Some(IntOrString::String(s)) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .filter(|p| *p >= 0)
            .ok_or_else(|| Refusal::Unreadable {
                field,
                value: s.clone(),
            })?,
    };
    Ok(if round_up {
        (percent + 99) / 100
    } else {
        percent / 100
    })
}

/// The merge patch that restarts a Deployment's rollout: a new template annotation, guarded by
/// `resource_version` so that a Deployment changed since it was judged is judged again (the
/// API server answers 409).
pub fn restart_patch(resource_version: &str, at: Timestamp) -> Value {
    json!({
        "metadata": {"resourceVersion": resource_version},
        "spec": {"template": {"metadata": {"annotations": {
            RESTARTED_AT_ANNOTATION: rotor_core::contract::format_timestamp(at),
        }}}},
    })
}

/// What one drain attempt decided for a pod of its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodRestart {
    /// Evicted as without the option.
    Evict,
    /// The Deployment's rollout replaces it: not evicted, and no budget is claimed for it. The
    /// drain waits for it to go.
    Replacing { deployment: String },
    /// Not decided yet: withheld from eviction, looked at again at `at`. `failure` says what
    /// went wrong when a read or the patch failed (a blocker for an operator).
    LookAgain {
        at: Timestamp,
        failure: Option<String>,
    },
}

/// The decisions of one drain attempt, by pod UID. Each pod is looked up once, unless it must
/// be looked at again; pods that left the node are forgotten.
#[derive(Debug, Default)]
pub struct RolloutRestarts {
    pods: HashMap<String, (PodRef, PodRestart)>,
}

impl RolloutRestarts {
    /// The pods of `pods` to look up now: controlled by a ReplicaSet, not terminating,
    /// `evictable` (the drain would evict them), and not decided or due to be looked at again.
    pub fn to_look_up<'a>(
        &self,
        pods: &'a [Pod],
        now: Timestamp,
        evictable: impl Fn(&Pod) -> bool,
    ) -> Vec<&'a Pod> {
        pods.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && replicaset_of(p).is_some())
            .filter(|p| match self.pods.get(uid(p)) {
                None => true,
                Some((_, PodRestart::LookAgain { at, .. })) => *at <= now,
                Some(_) => false,
            })
            .filter(|p| evictable(p))
            .collect()
    }

    pub fn decide(&mut self, pod: PodRef, decision: PodRestart) {
        self.pods.insert(pod.uid.clone(), (pod, decision));
    }

    /// Forgets the pods that are no longer among `pods`.
    pub fn keep_only(&mut self, pods: &[Pod]) {
        self.pods
            .retain(|known, _| pods.iter().any(|p| uid(p) == known));
    }

    /// Whether the drain must not evict `pod` (nor claim a budget for it) now.
    pub fn withheld(&self, pod: &Pod) -> bool {
        matches!(
            self.pods.get(uid(pod)),
            Some((
                _,
                PodRestart::Replacing { .. } | PodRestart::LookAgain { .. }
            ))
        )
    }

    /// Whether a pod is still withheld (its rollout replaces it, or it is not decided yet):
    /// the node is not drained while one is.
    pub fn withholds_any(&self) -> bool {
        self.pods
            .values()
            .any(|(_, d)| !matches!(d, PodRestart::Evict))
    }

    /// What failed, for the node's blockers: one line per pod, sorted.
    pub fn failures(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .pods
            .values()
            .filter_map(|(pod, d)| match d {
                PodRestart::LookAgain {
                    failure: Some(f), ..
                } => Some(format!("pod {pod}: {f}")),
                _ => None,
            })
            .collect();
        lines.sort();
        lines
    }

    /// When the next pod is due to be looked at again.
    pub fn next_look(&self) -> Option<Timestamp> {
        self.pods
            .values()
            .filter_map(|(_, d)| match d {
                PodRestart::LookAgain { at, .. } => Some(*at),
                _ => None,
            })
            .min()
    }
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// `now` plus `after`, for [`PodRestart::LookAgain`].
pub fn look_again(now: Timestamp, after: Duration, failure: Option<String>) -> PodRestart {
    PodRestart::LookAgain {
        at: later(now, after),
        failure,
    }
}

#[cfg(test)]
mod tests;
