//! The API calls of `--restart-single-replica` (the decisions are in [`crate::drain::restart`]): read
//! a pod's ReplicaSet, then, for a ReplicaSet of one pod, its Deployment and judge it; stamp
//! the Deployment's template when the judgement says so. One read per ReplicaSet pod and two
//! per lone replica, each time the pod is due (once, unless it is judged again); nothing
//! without the flag. [`restart_lone_replicas`] is the pass's step that asks for them and says
//! what was done, on the node and the pod.

use std::collections::HashMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use rotor_core::contract::FIELD_MANAGER;

use crate::drain::answers::Denial;
use crate::drain::node_plan::NodePlan;
use crate::drain::pods::PodRef;
use crate::drain::restart::{
    Judgement, News, Next, RolloutRestarts, StampAnswer, judge, lone_deployment_of, replicaset_of,
    restart_patch,
};
use crate::drain::shared::Drains;
use crate::record::events::NodeEvent;

/// What the reads found.
#[derive(Debug)]
pub enum Read {
    /// Not the pod of a one-pod ReplicaSet of a Deployment (or its owners are gone).
    NotLone,
    /// The Deployment (as `namespace/name`) and its judgement.
    Judged {
        deployment: String,
        judgement: Judgement,
    },
    /// A read failed: what, and what to do.
    Failed(String),
}

/// What to do about a refusal the API server answered with `e`, for the failure's words: the
/// server's own message names the verb and resource already.
fn remedy(e: &kube::Error) -> &'static str {
    match e {
        kube::Error::Api(s) if Denial::of(s.code, &s.message) == Some(Denial::Authorization) => {
            "; rotor-drainer needs get on replicasets and get and patch on deployments: apply deploy/components/restart-single-replica"
        }
        _ => "",
    }
}

/// Reads `pod`'s ReplicaSet and, when it wants one pod, its Deployment, and judges them.
pub async fn read(client: &kube::Client, pod: &Pod) -> Read {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let Some(rs_name) = replicaset_of(pod) else {
        return Read::NotLone;
    };
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let rs = match replicasets.get_opt(rs_name).await {
        Ok(Some(rs)) => rs,
        // Its ReplicaSet is gone: so is the pod, soon; nothing to restart.
        Ok(None) => return Read::NotLone,
        Err(e) => {
            return Read::Failed(format!(
                "reading its ReplicaSet {namespace}/{rs_name} failed: {e}{}",
                remedy(&e)
            ));
        }
    };
    let Some(name) = lone_deployment_of(&rs) else {
        return Read::NotLone;
    };
    let deployment = format!("{namespace}/{name}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    match deployments.get_opt(name).await {
        Ok(Some(d)) => Read::Judged {
            judgement: judge(&rs, &d),
            deployment,
        },
        Ok(None) => Read::NotLone,
        Err(e) => Read::Failed(format!(
            "reading its Deployment {deployment} failed: {e}{}",
            remedy(&e)
        )),
    }
}

/// Stamps the template of `deployment` (`namespace/name`) at `now`, guarded by
/// `resource_version`, and sorts the answer.
pub async fn stamp(
    client: &kube::Client,
    deployment: &str,
    resource_version: &str,
    now: Timestamp,
) -> StampAnswer {
    let (namespace, name) = deployment.split_once('/').unwrap_or(("", deployment));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let patch = restart_patch(resource_version, now);
    match deployments
        .patch(name, &params, &Patch::Merge(&patch))
        .await
    {
        Ok(_) => StampAnswer::Stamped,
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => StampAnswer::Changed,
        Err(kube::Error::Api(s))
            if matches!(
                Denial::of(s.code, &s.message),
                Some(Denial::Webhook(_) | Denial::Policy(_) | Denial::Forbidden)
            ) || s.code == 400
                || s.code == 422 =>
        {
            StampAnswer::Refused(s.message.clone())
        }
        Err(e) => StampAnswer::Failed(format!(
            "restarting the rollout of Deployment {deployment} failed: {e}{}",
            remedy(&e)
        )),
    }
}

/// `--restart-single-replica`: looks up the pods of ReplicaSets that `plan` would evict now (or
/// withholds), each when it is due, restarting the rollout of each one-replica Deployment
/// whose strategy starts the new pod first, and says what it did on the node and the pod.
/// Returns whether it looked up any pod (the plan must then be made again).
pub async fn restart_lone_replicas(
    drains: &Drains,
    node: &Node,
    restarts: &mut RolloutRestarts,
    pods: &HashMap<String, Pod>,
    plan: &NodePlan,
    now: Timestamp,
) -> bool {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    // Only pods in their turn: the plan defers those of a later DrainRule order, and critical
    // pods while ordinary ones of their order are left.
    let due: Vec<&Pod> = plan
        .evict_now
        .iter()
        .chain(&plan.budget_blocked)
        .map(|(pod, _)| pod)
        .chain(&plan.withheld)
        .filter(|pod| restarts.due(&pod.uid, now))
        .filter_map(|pod| pods.get(&pod.uid))
        .filter(|pod| replicaset_of(pod).is_some())
        .collect();
    for pod in &due {
        let pod_ref = PodRef::of(pod);
        let news = match read(&drains.client, pod).await {
            Read::NotLone => {
                restarts.not_lone(pod_ref.clone());
                None
            }
            Read::Failed(failure) => Some(restarts.read_failed(pod_ref.clone(), failure, now)),
            Read::Judged {
                deployment,
                judgement,
            } => match restarts.judged(pod_ref.clone(), &deployment, judgement, now) {
                Next::Tell(news) => news,
                Next::Stamp { resource_version } => {
                    let answer = stamp(&drains.client, &deployment, &resource_version, now).await;
                    restarts.stamp_answered(&pod_ref.uid, &deployment, answer, now)
                }
            },
        };
        let Some(news) = news else { continue };
        match news {
            News::Restarted { deployment } => {
                drains.metrics.rollout_restart("restarted");
                tracing::info!(node = %name, pod = %pod_ref, %deployment, "restarted the rollout of the pod's one-replica Deployment instead of evicting the pod; waiting for its new pod to be Ready elsewhere and this one to go");
                let note = format!(
                    "Restarted the rollout of Deployment {deployment} (one replica) instead of evicting pod {pod_ref}: its new pod starts on another node before this one stops."
                );
                drains
                    .announcer
                    .on_node(node, NodeEvent::RolloutRestarted, note.clone())
                    .await;
                drains
                    .announcer
                    .on_pod(
                        &pod_ref.object_reference(),
                        NodeEvent::RolloutRestarted,
                        note,
                    )
                    .await;
            }
            News::RollingOut { deployment } => {
                drains.metrics.rollout_restart("rolling_out");
                tracing::info!(node = %name, pod = %pod_ref, %deployment, "the pod's one-replica Deployment is rolling out already; waiting for the rollout to replace the pod");
            }
            News::Refused {
                deployment,
                refusal,
            } => {
                drains.metrics.rollout_restart("refused");
                tracing::warn!(node = %name, pod = %pod_ref, %deployment, %refusal, "not restarting the pod's one-replica Deployment; evicting the pod, which leaves it with no replica until the new one is Ready");
                let note = format!(
                    "Evicting pod {pod_ref} of one-replica Deployment {deployment} instead of restarting its rollout: {refusal}. It has no replica until the new pod is Ready."
                );
                drains
                    .announcer
                    .on_node(node, NodeEvent::RolloutRestartRefused, note.clone())
                    .await;
                drains
                    .announcer
                    .on_pod(
                        &pod_ref.object_reference(),
                        NodeEvent::RolloutRestartRefused,
                        note,
                    )
                    .await;
            }
            News::Failed { failure } => {
                drains.metrics.rollout_restart("failed");
                tracing::warn!(node = %name, pod = %pod_ref, %failure, "could not decide whether to restart the pod's Deployment; the pod is not evicted meanwhile");
            }
        }
    }
    !due.is_empty()
}
