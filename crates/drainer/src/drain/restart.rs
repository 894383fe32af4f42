//! Single-replica Deployments (`--restart-single-replica`). Evicting the only pod of a
//! Deployment leaves it with no replica until the replacement is Ready, and a budget such as
//! `minAvailable: 1` refuses that eviction for ever. When the Deployment's strategy lets its
//! controller start the new pod before it stops the old one, rotor asks for a rollout restart
//! instead: it stamps the pod template ([`RESTARTED_AT_ANNOTATION`]), the controller starts a
//! new pod on another node (this one is cordoned) and removes the old one once the new one is
//! Ready. The drain then goes on as usual.
//!
//! [`judge`] decides from the pod's ReplicaSet and its Deployment, as the API returns them;
//! [`RolloutRestarts`] keeps, for one drain attempt, what was decided for each pod and what to
//! do next, and falls back to eviction when a rollout stalls or a restart is undone. The reads
//! and the patch are in [`crate::drain::restart_io`].

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
pub use rotor_core::contract::RESTARTED_AT_ANNOTATION;
use serde_json::{Value, json};

use crate::drain::pods::{PodRef, controller_ref, is_finished};
use rotor_core::duration::later;

/// The revision the Deployment controller writes on a Deployment and on each of its
/// ReplicaSets: a ReplicaSet whose revision is below its Deployment's is being rolled out.
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";

/// How soon to look again at a Deployment its controller has not caught up with yet.
pub const UNSETTLED_RETRY: Duration = Duration::from_secs(2);

/// How soon to look again after a read or the patch failed.
pub const FAILED_RETRY: Duration = Duration::from_secs(30);

/// How often a pod left to its Deployment's rollout is judged again: the rollout may have
/// stalled, or been undone.
pub const RECHECK: Duration = Duration::from_secs(30);

/// How long a Deployment may stay unsettled before the wait is the node's blocker.
pub const UNSETTLED_LIMIT: Duration = Duration::from_secs(120);

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
    controller_ref(meta)
        .filter(|o| o.kind == kind)
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
    /// The controller has not caught up with the Deployment's latest change, or the last
    /// rollout is still removing older pods: look again soon.
    Unsettled,
    /// Stamp the template, on the condition that the Deployment is still at this version.
    Restart { resource_version: String },
}

/// Why a lone replica is evicted rather than restarted, or left to its rollout no longer.
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
    #[error("its rollout is not progressing ({0}), so it would never replace the pod")]
    RolloutStalled(String),
    #[error(
        "the restart rotor made was undone (the pod's ReplicaSet is the newest again; a GitOps tool reverting the template does this)"
    )]
    RestartUndone,
    #[error("the API server refused the restart: {0}")]
    PatchRefused(String),
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
    let status = deployment.status.as_ref();
    // Progressing=False: the controller gave up on the last rollout (its
    // progressDeadlineSeconds passed); neither waiting for it nor a new one would help.
    if let Some(stalled) = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Progressing" && c.status == "False")
    {
        let reason = stalled
            .reason
            .clone()
            .unwrap_or_else(|| "Progressing is False".into());
        return Judgement::Refused(Refusal::RolloutStalled(reason));
    }
    let observed = status.and_then(|s| s.observed_generation);
    let current = observed.is_some() && observed >= deployment.metadata.generation;
    let (Some(ours), Some(latest)) = (revision(&rs.metadata), revision(&deployment.metadata))
    else {
        return Judgement::Unsettled;
    };
    if ours < latest {
        return Judgement::RollingOut;
    }
    // The pod is of the newest ReplicaSet, but older pods are still there: a rollout is
    // finishing. A stamp now would start another on top of it.
    let pods = status.and_then(|s| s.replicas).unwrap_or(0);
    if !current || ours > latest || pods > 1 {
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

/// How the patch went, as [`crate::drain::restart_io::stamp`] sorts the API server's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StampAnswer {
    Stamped,
    /// 409: the Deployment changed since it was judged; 404: it is gone. Judge again.
    Changed,
    /// An admission webhook or policy, or validation, refused it: it will not pass by waiting.
    Refused(String),
    /// Anything else, RBAC included: what failed and what to do.
    Failed(String),
}

/// What the shell does next for a pod, after [`RolloutRestarts::judged`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Patch the Deployment, then report the answer to [`RolloutRestarts::stamp_answered`].
    Stamp { resource_version: String },
    /// Nothing to do but say this, if anything.
    Tell(Option<News>),
}

/// What an operator hears about a lone replica (its Deployment as `namespace/name`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum News {
    /// rotor stamped the template: the rollout replaces the pod.
    Restarted { deployment: String },
    /// A rollout was replacing the pod already.
    RollingOut { deployment: String },
    /// Evicted as without the option, for this reason.
    Refused {
        deployment: String,
        refusal: Refusal,
    },
    /// A read or the patch failed, or the Deployment stays unsettled: the pod is withheld and
    /// looked at again.
    Failed { failure: String },
}

/// What one drain attempt decided for a pod of its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodRestart {
    /// Evicted as without the option.
    Evict,
    /// The Deployment's rollout replaces it: withheld from eviction, judged again at
    /// `recheck_at`.
    Replacing { recheck_at: Timestamp },
    /// Not decided yet: withheld from eviction, looked at again at `at`. `failure` is the
    /// node's blocker meanwhile, when there is one.
    LookAgain {
        at: Timestamp,
        failure: Option<String>,
    },
}

#[derive(Debug)]
struct Entry {
    pod: PodRef,
    decision: PodRestart,
    /// rotor stamped the pod's Deployment in this attempt: a later judgement that would stamp
    /// again means the restart was undone.
    stamped: bool,
    /// Since when the Deployment has been unsettled, without a break.
    unsettled_since: Option<Timestamp>,
}

/// The decisions of one drain attempt, by pod UID.
#[derive(Debug, Default)]
pub struct RolloutRestarts {
    pods: HashMap<String, Entry>,
}

impl RolloutRestarts {
    /// Whether the pod with this UID is due to be looked up: never decided, or its time to be
    /// looked at (or judged) again has come.
    pub fn due(&self, uid: &str, now: Timestamp) -> bool {
        match self.pods.get(uid).map(|e| &e.decision) {
            None => true,
            Some(PodRestart::Evict) => false,
            Some(PodRestart::Replacing { recheck_at: at } | PodRestart::LookAgain { at, .. }) => {
                *at <= now
            }
        }
    }

    /// Whether the drain must not evict the pod with this UID (nor charge a budget for it).
    pub fn withheld(&self, uid: &str) -> bool {
        self.pods
            .get(uid)
            .is_some_and(|e| !matches!(e.decision, PodRestart::Evict))
    }

    /// Forgets the pods no longer among `pods`, or going (terminating, finished): nothing is
    /// left to decide about them.
    pub fn keep_only<'a>(&mut self, pods: impl IntoIterator<Item = &'a Pod>) {
        let staying: HashSet<&str> = pods
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && !is_finished(p))
            .map(uid)
            .collect();
        self.pods
            .retain(|known, _| staying.contains(known.as_str()));
    }

    /// The pod is not a lone replica of a Deployment (or its owner is gone): evict it.
    pub fn not_lone(&mut self, pod: PodRef) {
        self.set(pod, PodRestart::Evict);
    }

    /// Reading the pod's ReplicaSet or Deployment failed.
    pub fn read_failed(&mut self, pod: PodRef, failure: String, now: Timestamp) -> News {
        self.set(pod, look_again(now, FAILED_RETRY, Some(failure.clone())));
        News::Failed { failure }
    }

    /// The pod's Deployment was judged: decide, and say what the shell does next.
    pub fn judged(
        &mut self,
        pod: PodRef,
        deployment: &str,
        judgement: Judgement,
        now: Timestamp,
    ) -> Next {
        let uid = pod.uid.clone();
        let entry = self.pods.entry(uid.clone()).or_insert(Entry {
            pod,
            decision: look_again(now, Duration::ZERO, None),
            stamped: false,
            unsettled_since: None,
        });
        if judgement != Judgement::Unsettled {
            entry.unsettled_since = None;
        }
        let refused = |entry: &mut Entry, refusal: Refusal| {
            entry.decision = PodRestart::Evict;
            Next::Tell(Some(News::Refused {
                deployment: deployment.to_string(),
                refusal,
            }))
        };
        match judgement {
            Judgement::NotLone => {
                entry.decision = PodRestart::Evict;
                Next::Tell(None)
            }
            Judgement::Refused(refusal) => refused(entry, refusal),
            Judgement::RollingOut => {
                // Said once: when rotor stamped it, or when it found the rollout under way.
                let news =
                    !entry.stamped && !matches!(entry.decision, PodRestart::Replacing { .. });
                entry.decision = PodRestart::Replacing {
                    recheck_at: later(now, RECHECK),
                };
                Next::Tell(news.then(|| News::RollingOut {
                    deployment: deployment.to_string(),
                }))
            }
            Judgement::Unsettled => {
                let since = *entry.unsettled_since.get_or_insert(now);
                let waited = now.duration_since(since).unsigned_abs();
                let failure = (waited >= UNSETTLED_LIMIT).then(|| {
                    format!(
                        "Deployment {deployment} has not settled for {}s (its controller has not caught up with a change, or a rollout is still removing older pods): check the Deployment's status and the controller-manager",
                        waited.as_secs()
                    )
                });
                entry.decision = look_again(now, UNSETTLED_RETRY, failure);
                Next::Tell(None)
            }
            Judgement::Restart { resource_version } => {
                if entry.stamped {
                    refused(entry, Refusal::RestartUndone)
                } else {
                    Next::Stamp { resource_version }
                }
            }
        }
    }

    /// The answer to the patch [`Next::Stamp`] asked for.
    pub fn stamp_answered(
        &mut self,
        uid: &str,
        deployment: &str,
        answer: StampAnswer,
        now: Timestamp,
    ) -> Option<News> {
        let entry = self.pods.get_mut(uid)?;
        match answer {
            StampAnswer::Stamped => {
                entry.stamped = true;
                entry.decision = PodRestart::Replacing {
                    recheck_at: later(now, RECHECK),
                };
                Some(News::Restarted {
                    deployment: deployment.to_string(),
                })
            }
            StampAnswer::Changed => {
                entry.decision = look_again(now, UNSETTLED_RETRY, None);
                None
            }
            StampAnswer::Refused(why) => {
                entry.decision = PodRestart::Evict;
                Some(News::Refused {
                    deployment: deployment.to_string(),
                    refusal: Refusal::PatchRefused(why),
                })
            }
            StampAnswer::Failed(failure) => {
                entry.decision = look_again(now, FAILED_RETRY, Some(failure.clone()));
                Some(News::Failed { failure })
            }
        }
    }

    /// What keeps pods withheld for want of someone, for the node's blockers: one line per
    /// pod, sorted.
    pub fn failures(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .pods
            .values()
            .filter_map(|e| match &e.decision {
                PodRestart::LookAgain {
                    failure: Some(f), ..
                } => Some(format!("pod {}: {f}", e.pod)),
                _ => None,
            })
            .collect();
        lines.sort();
        lines
    }

    /// When the next pod is due to be looked at or judged again, after `now`. A time already
    /// gone is left out: a due pod the pass looked at has a new one, and one the pass did not
    /// (it left the plan: opted out, or deferred by a rule) would wake the drain every 50 ms.
    pub fn next_look(&self, now: Timestamp) -> Option<Timestamp> {
        self.pods
            .values()
            .filter_map(|e| match e.decision {
                PodRestart::LookAgain { at, .. } | PodRestart::Replacing { recheck_at: at } => {
                    Some(at)
                }
                PodRestart::Evict => None,
            })
            .filter(|at| *at > now)
            .min()
    }

    fn set(&mut self, pod: PodRef, decision: PodRestart) {
        let uid = pod.uid.clone();
        let entry = self.pods.entry(uid).or_insert(Entry {
            pod,
            decision: PodRestart::Evict,
            stamped: false,
            unsettled_since: None,
        });
        entry.decision = decision;
        entry.unsettled_since = None;
    }
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

fn look_again(now: Timestamp, after: Duration, failure: Option<String>) -> PodRestart {
    PodRestart::LookAgain {
        at: later(now, after),
        failure,
    }
}

#[cfg(test)]
mod tests;
