//! The API calls of `--restart-single-replica` (the decisions are in [`crate::restart`]): read
//! a pod's ReplicaSet, then, for a ReplicaSet of one pod, its Deployment and judge it; stamp
//! the Deployment's template when the judgement says so. One read per ReplicaSet pod and two
//! per lone replica, each time the pod is due (once, unless it is judged again); nothing
//! without the flag.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use rotor_core::contract::FIELD_MANAGER;

use crate::evict::Denial;
use crate::restart::{
    Judgement, StampAnswer, judge, lone_deployment_of, replicaset_of, restart_patch,
};

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
