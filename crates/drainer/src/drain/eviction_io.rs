//! The eviction engine's wire layer: one policy/v1 Eviction per call, posted as a typed object
//! with the pod's UID as a precondition, through a client whose default retry is off (kube's
//! retry would hide a PodDisruptionBudget's 429 for minutes). The answer is sorted by
//! [`crate::drain::answers`].

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use kube::api::{Api, PostParams};
use kube::core::Status;
use tokio::sync::Semaphore;

use crate::drain::answers::{EvictionOutcome, outcome_of_error};
use crate::drain::budget_turns::BudgetTurns;
use crate::drain::budgets::BudgetKey;
use crate::drain::pods::PodRef;

/// How many evictions and forced deletions may be on the wire at once, all drains together.
/// Each is a request of its own, and over HTTP/1.1 a connection of its own: the cap bounds the
/// drainer's connections and what it asks of the API server at once. A drain's pass sends all its
/// evictions together, so that a node's last replacement does not start rounds after its first;
/// a pass of up to 64 goes out at once, a larger one, or several drains at once, wait for places.
pub const EVICTIONS_IN_FLIGHT: usize = 64;

/// The wire every drain's evictions and forced deletions go through: a client without default
/// retry (so 429s reach the eviction queue), the budgets' turns and the cap on requests in
/// flight. One per drainer.
pub struct EvictionWire {
    client: kube::Client,
    turns: BudgetTurns,
    in_flight: Semaphore,
}

impl EvictionWire {
    /// `client` must have kube's default retry off.
    pub fn new(client: kube::Client) -> EvictionWire {
        EvictionWire {
            client,
            turns: BudgetTurns::default(),
            in_flight: Semaphore::new(EVICTIONS_IN_FLIGHT),
        }
    }

    /// Evicts `pod`, charged to `budget` when one covers it; or, `forced` (past
    /// `--force-after`), deletes it.
    pub async fn send(
        &self,
        pod: &PodRef,
        grace: Option<i64>,
        forced: bool,
        budget: Option<&BudgetKey>,
    ) -> EvictionOutcome {
        if forced {
            let _sending = self.sending().await;
            return force_delete(&self.client, pod, grace).await;
        }
        // An eviction charged to a budget writes the budget's status: it waits until no other
        // of rotor's evictions under that budget is on the wire, as two at once conflict and
        // the loser is retried half a second later. A deletion and an uncharged eviction write
        // none. The turn comes first: one waiting for it holds no place on the wire.
        let _turn = match budget {
            Some(budget) => Some(self.turns.take(budget).await),
            None => None,
        };
        let _sending = self.sending().await;
        evict(&self.client, pod, grace).await
    }

    /// A place on the wire, held while one request is out ([`EVICTIONS_IN_FLIGHT`]).
    async fn sending(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        // The semaphore is never closed, so this only waits.
        self.in_flight.acquire().await.ok()
    }
}

fn delete_options(pod: &PodRef, grace: Option<i64>) -> DeleteOptions {
    DeleteOptions {
        grace_period_seconds: grace,
        preconditions: Some(Preconditions {
            uid: Some(pod.uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    }
}

/// Posts an eviction for `pod`. `api` must come from a client without default retry.
async fn evict(client: &kube::Client, pod: &PodRef, grace: Option<i64>) -> EvictionOutcome {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let eviction = Eviction {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            ..Default::default()
        },
        delete_options: Some(delete_options(pod, grace)),
    };
    match api
        .create_subresource::<_, Status>("eviction", &pod.name, &PostParams::default(), &eviction)
        .await
    {
        Ok(_) => EvictionOutcome::Evicted,
        Err(e) => outcome_of_error(&e),
    }
}

/// Deletes `pod` (the `--force-after` path), with its grace period of at least one second and
/// its UID as a precondition so a same-name replacement is never hit.
async fn force_delete(client: &kube::Client, pod: &PodRef, grace: Option<i64>) -> EvictionOutcome {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let dp = kube::api::DeleteParams {
        grace_period_seconds: grace.map(|g| u32::try_from(g.max(1)).unwrap_or(u32::MAX)),
        preconditions: Some(kube::api::Preconditions {
            uid: Some(pod.uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&pod.name, &dp).await {
        Ok(_) => EvictionOutcome::Evicted,
        Err(e) => outcome_of_error(&e),
    }
}
