//! The RotationPolicies' I/O: the watch that feeds [`super::pools`] (through the machine's
//! events) and the status writes [`super::pool_status`] computes.
//!
//! Without the CRD (`404` on the list) every node follows the flags, and the watch keeps
//! retrying with back-off, so a CRD installed later is picked up. A refusal (`403`: the
//! drainer's RBAC lacks the new rules) is not taken for "no policies": starts stay held, since a
//! policy tighter than the flags might exist.

use futures::{Stream, StreamExt};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use rotor_policy::{RotationPolicy, RotationPolicyStatus};
use serde_json::{Value, json};

use super::machine::Event;
use super::pools::Pool;
use crate::crd_watch::{CrdWatchFailure, CrdWatchState};
use crate::watch_backoff::WatchBackoffExt;

/// The policies' changes as the machine's events. Errors are logged here (once per kind of
/// failure in a row) and retried with back-off.
pub(super) fn watch(client: kube::Client) -> impl Stream<Item = Event> + Send {
    let api: Api<RotationPolicy> = Api::all(client);
    let mut listing: Vec<Pool> = Vec::new();
    // Once listed, the policies as last seen keep governing while the watch is down.
    let mut state = CrdWatchState::default();
    watcher(api, watcher::Config::default())
        .watch_backoff()
        .filter_map(move |event| {
            let out = match event {
                Ok(watcher::Event::Init) => {
                    listing.clear();
                    None
                }
                Ok(watcher::Event::InitApply(policy)) => {
                    listing.push(Pool::read(&policy));
                    None
                }
                Ok(watcher::Event::InitDone) => {
                    state.listed();
                    tracing::info!(
                        policies = listing.len(),
                        "RotationPolicies listed: nodes they select follow them, the others the flags"
                    );
                    Some(Event::PoliciesListed(std::mem::take(&mut listing)))
                }
                Ok(watcher::Event::Apply(policy)) => Some(Event::PolicyApplied(Pool::read(&policy))),
                Ok(watcher::Event::Delete(policy)) => Some(Event::PolicyDeleted(
                    policy.metadata.name.unwrap_or_default(),
                )),
                Err(error) => {
                    let (failure, news) = state.failed(&error);
                    let listed_once = state.listed_once();
                    match failure {
                        // Falling back to the flags would open a pool its policy closes.
                        CrdWatchFailure::NotSyncedYet => {
                            if news {
                                tracing::warn!(%error, "RotationPolicies answered 404 after they had been listed (an API server whose CRDs are not synced yet, or the CRD removed): drains go on under the policies as last listed; restart the drainer if you removed the CRD");
                            }
                            None
                        }
                        CrdWatchFailure::NotInstalled => {
                            if news {
                                tracing::info!("the RotationPolicy resource is not installed (no CRD rotationpolicies.rotor.dev): every node follows the flags; install deploy/base/crds to use per-pool policy");
                            }
                            Some(Event::PoliciesAbsent)
                        }
                        CrdWatchFailure::Forbidden => {
                            if news && listed_once {
                                tracing::error!(%error, "the drainer may no longer list and watch rotationpolicies.rotor.dev: drains go on under the policies as last listed, and changes to them are not seen until it can (apply the RBAC in deploy/, which grants them)");
                            } else if news {
                                tracing::error!(%error, "the drainer may not list and watch rotationpolicies.rotor.dev: no drain starts until it can (apply the RBAC in deploy/, which grants them)");
                            }
                            None
                        }
                        CrdWatchFailure::Other => {
                            if news && listed_once {
                                tracing::warn!(%error, "watching RotationPolicies failed; it restarts with back-off, and drains go on under the policies as last listed meanwhile");
                            } else if news {
                                tracing::warn!(%error, "watching RotationPolicies failed; it restarts with back-off, and no drain starts until it has listed them");
                            }
                            None
                        }
                    }
                }
            };
            futures::future::ready(out)
        })
}

/// Writes a policy's status (a merge patch of the status subresource). Fields the status no
/// longer has are written as null, so a merge patch clears them.
pub(super) async fn write_status(
    client: kube::Client,
    policy: &str,
    status: &RotationPolicyStatus,
) -> Result<(), kube::Error> {
    let mut body = serde_json::to_value(status).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut body {
        for cleared in ["budget", "budgetUntil", "observedGeneration", "conditions"] {
            fields.entry(cleared).or_insert(Value::Null);
        }
    }
    let api: Api<RotationPolicy> = Api::all(client);
    api.patch_status(
        policy,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": body })),
    )
    .await
    .map(|_| ())
}
