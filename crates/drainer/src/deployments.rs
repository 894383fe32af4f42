//! The API calls of `--restart-single-replica` (the decisions are in [`crate::restart`]): read
//! a pod's ReplicaSet, then, for a ReplicaSet of one pod, its Deployment, and stamp the
//! Deployment's template when [`judge`] says so. Two reads per lone replica, one per other
//! ReplicaSet pod, once per drain attempt; nothing without the flag.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use rotor_core::contract::FIELD_MANAGER;

use crate::restart::{
    FAILED_RETRY, Judgement, PodRestart, Refusal, UNSETTLED_RETRY, judge, lone_deployment_of,
    look_again, replicaset_of, restart_patch,
};

/// What [`resolve`] decided for a pod, and what is worth saying about it.
#[derive(Debug)]
pub struct Resolution {
    pub decision: PodRestart,
    pub news: Option<News>,
}

/// What an operator hears about a lone replica (as `namespace/name` of its Deployment).
#[derive(Debug)]
pub enum News {
    /// rotor stamped the template: the rollout replaces the pod.
    Restarted { deployment: String },
    /// A rollout was replacing the pod already.
    RollingOut { deployment: String },
    /// The strategy does not allow a restart without a moment with no replica: evicted.
    Refused {
        deployment: String,
        refusal: Refusal,
    },
    /// A read or the patch failed: the pod is withheld and looked at again.
    Failed { failure: String },
}

fn decided(decision: PodRestart) -> Resolution {
    Resolution {
        decision,
        news: None,
    }
}

fn failed(now: Timestamp, failure: String) -> Resolution {
    Resolution {
        decision: look_again(now, FAILED_RETRY, Some(failure.clone())),
        news: Some(News::Failed { failure }),
    }
}

/// The permission a refusal means, for the failure's words: the API server's own message
/// names the verb and resource already.
fn remedy(e: &kube::Error) -> &'static str {
    match e {
        kube::Error::Api(s) if s.code == 403 => {
            "; rotor-drainer needs get on replicasets and get and patch on deployments: apply deploy/components/restart-single-replica"
        }
        _ => "",
    }
}

/// Decides what to do with `pod` (controlled by a ReplicaSet, on the draining node), stamping
/// its Deployment's template at `now` when it is a lone replica whose strategy surges.
pub async fn resolve(client: &kube::Client, pod: &Pod, now: Timestamp) -> Resolution {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let Some(rs_name) = replicaset_of(pod) else {
        return decided(PodRestart::Evict);
    };
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let rs = match replicasets.get_opt(rs_name).await {
        Ok(Some(rs)) => rs,
        // Its ReplicaSet is gone: so is the pod, soon; nothing to restart.
        Ok(None) => return decided(PodRestart::Evict),
        Err(e) => {
            return failed(
                now,
                format!(
                    "reading its ReplicaSet {namespace}/{rs_name} failed: {e}{}",
                    remedy(&e)
                ),
            );
        }
    };
    let Some(name) = lone_deployment_of(&rs) else {
        return decided(PodRestart::Evict);
    };
    let deployment_shown = format!("{namespace}/{name}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deployment = match deployments.get_opt(name).await {
        Ok(Some(d)) => d,
        Ok(None) => return decided(PodRestart::Evict),
        Err(e) => {
            return failed(
                now,
                format!(
                    "reading its Deployment {deployment_shown} failed: {e}{}",
                    remedy(&e)
                ),
            );
        }
    };
    let replacing = PodRestart::Replacing {
        deployment: deployment_shown.clone(),
    };
    match judge(&rs, &deployment) {
        Judgement::NotLone => decided(PodRestart::Evict),
        Judgement::Unsettled => decided(look_again(now, UNSETTLED_RETRY, None)),
        Judgement::Refused(refusal) => Resolution {
            decision: PodRestart::Evict,
            news: Some(News::Refused {
                deployment: deployment_shown,
                refusal,
            }),
        },
        Judgement::RollingOut => Resolution {
            decision: replacing,
            news: Some(News::RollingOut {
                deployment: deployment_shown,
            }),
        },
        Judgement::Restart { resource_version } => {
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            let patch = restart_patch(&resource_version, now);
            match deployments
                .patch(name, &params, &Patch::Merge(&patch))
                .await
            {
                Ok(_) => Resolution {
                    decision: replacing,
                    news: Some(News::Restarted {
                        deployment: deployment_shown,
                    }),
                },
                // Changed since it was judged: judge it again.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    decided(look_again(now, UNSETTLED_RETRY, None))
                }
                Err(kube::Error::Api(s)) if s.code == 404 => decided(PodRestart::Evict),
                Err(e) => failed(
                    now,
                    format!(
                        "restarting the rollout of Deployment {deployment_shown} failed: {e}{}",
                        remedy(&e)
                    ),
                ),
            }
        }
    }
}
