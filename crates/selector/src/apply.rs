//! Writing a plan to the cluster, one node at a time, after the whole plan is computed.
//!
//! - Taint: `rotor.dev/drain=<reason>:<effect>` is added, with the annotations
//!   `rotor.dev/selected-at` (RFC 3339, whole seconds) and `rotor.dev/selector-detail`.
//! - Untaint: only the `rotor.dev/drain` taint and those two annotations are removed.
//!
//! Every write is a JSON merge patch carrying the `metadata.resourceVersion` the decision was made
//! on, with field manager `rotor`. A node's `spec.taints` has no patch merge key, so the patch
//! replaces the whole list; the resourceVersion turns that into a precondition, and a concurrent
//! writer's change is never lost: the server answers 409 instead. On 409 the node is re-read,
//! re-judged by the same provider assessor and re-planned on its own ([`recheck`]); if the action
//! still applies it is retried (at most [`MAX_ATTEMPTS`] writes per node), otherwise it is dropped
//! and said so. A node that no longer exists is dropped too. Any other error fails that node
//! (kube's client already retries 429/503/504); the other nodes are still written, because each
//! write is correct on its own and the plan's budgets hold for any subset of it.
//!
//! Each successful write is announced by a Kubernetes Event on the node (reporter
//! `rotor-selector`); an Event that cannot be recorded is logged, not fatal.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Taint};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use rotor_core::contract::{
    REPLACE_BY_ANNOTATION, REPLACE_BY_SET_BY_ANNOTATION, REPLACE_BY_SET_BY_SELECTOR,
    SELECTED_AT_ANNOTATION, SELECTOR_DETAIL_ANNOTATION, format_timestamp,
};
use rotor_core::{
    DRAIN_TAINT_KEY, DrainReason, FIELD_MANAGER, TaintEffect, drain_taint, find_drain_taint,
};
use serde_json::{Value, json};

use crate::api_calls::ApiCalls;
use crate::kube_retry::retry_transient;
use rotor_core::NodeBudget;

use crate::node_list::slim;
use crate::plan::{Action, Candidate, PlanLimits, PlannedNode, plan};
use crate::provider::Assessor;
use crate::report::{WriteOutcome, WriteResult};

/// Most writes attempted on one node (the first plus retries after conflicts).
pub const MAX_ATTEMPTS: u32 = 5;

/// Reporting controller of the selector's Events.
pub const EVENT_REPORTER: &str = "rotor-selector";

/// Event reason when the selector tainted a node.
pub const TAINTED_REASON: &str = "DrainTaintAdded";

/// Event reason when the selector removed its taint from a node.
pub const UNTAINTED_REASON: &str = "DrainTaintRemoved";

/// Event reason when the selector terminated a drained node's instance.
pub const RETIRED_REASON: &str = "InstanceRetired";

/// True for the actions that write to the cluster.
pub fn writes(action: &Action) -> bool {
    matches!(
        action,
        Action::Taint { .. } | Action::Untaint { .. } | Action::Retire { .. }
    )
}

/// The merge patch that taints `node`: its other taints kept, rotor's added, the two selector
/// annotations set, and `replace_by` (`--replace-within`) unless the node already has a
/// replace-by time (an earlier one is kept: a deadline only ever comes closer), guarded by the
/// node's resourceVersion.
pub fn taint_patch(
    node: &Node,
    reason: DrainReason,
    detail: &str,
    effect: TaintEffect,
    selected_at: Timestamp,
    replace_by: Option<Timestamp>,
) -> Result<Value, String> {
    let resource_version = resource_version(node)?;
    let mut taints = other_taints(node);
    taints.push(drain_taint(reason, effect));
    let mut annotations = json!({
        SELECTED_AT_ANNOTATION: format_timestamp(selected_at),
        SELECTOR_DETAIL_ANNOTATION: detail,
    });
    // Someone else's deadline stands. One the selector set for an earlier selection whose taint
    // was then removed by hand (its own untaint takes the deadline with it) belongs to no
    // selection now: the new one replaces it rather than enforcing a stale time.
    let has_one = node
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(REPLACE_BY_ANNOTATION) && !selectors_deadline(node));
    if let Some(at) = replace_by.filter(|_| !has_one) {
        annotations[REPLACE_BY_ANNOTATION] = json!(format_timestamp(at));
        // Marked as the selector's, so that a rollback takes it back and only it.
        annotations[REPLACE_BY_SET_BY_ANNOTATION] = json!(REPLACE_BY_SET_BY_SELECTOR);
    }
    Ok(json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": annotations,
        },
        "spec": {"taints": taints},
    }))
}

/// The merge patch that removes rotor's taint, the two selector annotations and, when the
/// selector set it (it came with the selection, and is marked so), the replace-by time from
/// `node`, keeping everything else (a replace-by someone else set included), guarded by the
/// node's resourceVersion.
pub fn untaint_patch(node: &Node) -> Result<Value, String> {
    let resource_version = resource_version(node)?;
    let taints = other_taints(node);
    let mut annotations = json!({
        SELECTED_AT_ANNOTATION: null,
        SELECTOR_DETAIL_ANNOTATION: null,
    });
    if selectors_deadline(node) {
        annotations[REPLACE_BY_ANNOTATION] = Value::Null;
        annotations[REPLACE_BY_SET_BY_ANNOTATION] = Value::Null;
    }
    Ok(json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": annotations,
        },
        "spec": {"taints": if taints.is_empty() { Value::Null } else { json!(taints) }},
    }))
}

/// Whether the node's replace-by is one the selector set (marked so), not a person's.
fn selectors_deadline(node: &Node) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REPLACE_BY_SET_BY_ANNOTATION))
        .is_some_and(|by| by == REPLACE_BY_SET_BY_SELECTOR)
}

/// Whether `node` carries the taint this run writes: rotor's drain taint with `reason`, the
/// run's own `selected-at` (whole seconds) and the same `selector-detail`, so the write is this
/// run's (two runs within one second would also have to word the node alike).
pub fn carries_this_runs_taint(
    node: &Node,
    reason: DrainReason,
    detail: &str,
    selected_at: Timestamp,
) -> bool {
    let taint = find_drain_taint(node).and_then(|t| t.value.as_deref());
    let annotation = |key: &str| {
        node.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    };
    taint == Some(reason.slug())
        && annotation(SELECTED_AT_ANNOTATION) == Some(format_timestamp(selected_at).as_str())
        && annotation(SELECTOR_DETAIL_ANNOTATION) == Some(detail)
}

fn resource_version(node: &Node) -> Result<&str, String> {
    node.metadata
        .resource_version
        .as_deref()
        .filter(|rv| !rv.is_empty())
        .ok_or_else(|| {
            "the node has no metadata.resourceVersion; refusing to write its taints without a precondition".to_owned()
        })
}

fn other_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|taint| taint.key != DRAIN_TAINT_KEY)
        .cloned()
        .collect()
}

/// After a conflict: the action for the re-read node, planned on its own with the same rules,
/// when it is still the same kind of action as `planned` (a taint's reason and detail may have
/// changed with the fresh data); otherwise why it no longer applies. The budget was granted when
/// the whole plan was made, so the node keeps its slot.
pub fn recheck(planned: &Action, fresh: Candidate, retire_drained: bool) -> Result<Action, String> {
    let limits = PlanLimits {
        max_tainted: NodeBudget::Count(1),
        max_tainted_per_group: None,
        retire_drained,
    };
    let action = plan(vec![fresh], &limits)
        .pop()
        .map(|planned| planned.action)
        .ok_or_else(|| "the node could not be re-planned".to_owned())?;
    if action.kind() == planned.kind() {
        return Ok(action);
    }
    let why = match &action {
        Action::Keep { why } | Action::Skip { why } | Action::Untaint { why } => why.clone(),
        Action::Taint { reason, detail } => format!("{reason}: {detail}"),
        Action::Retire { .. } => "drained".to_owned(),
    };
    Err(format!(
        "no longer applies after a concurrent change to the node (now {}: {why})",
        action.kind()
    ))
}

/// Writes planned actions to the cluster.
pub struct Applier<'a> {
    api: Api<Node>,
    recorder: Recorder,
    assessor: &'a Assessor,
    effect: TaintEffect,
    selected_at: Timestamp,
    /// `selected_at` plus `--replace-within`.
    replace_by: Option<Timestamp>,
    retire_drained: bool,
}

impl<'a> Applier<'a> {
    /// An applier that re-judges nodes with `assessor` after conflicts and stamps taints with
    /// `selected_at`.
    pub fn new(
        client: &Client,
        assessor: &'a Assessor,
        effect: TaintEffect,
        selected_at: Timestamp,
        replace_within: Option<std::time::Duration>,
        retire_drained: bool,
    ) -> Self {
        Applier {
            api: Api::all(client.clone()),
            recorder: Recorder::new(
                client.clone(),
                Reporter {
                    controller: EVENT_REPORTER.into(),
                    instance: std::env::var("POD_NAME").ok().filter(|n| !n.is_empty()),
                },
            ),
            assessor,
            effect,
            selected_at,
            replace_by: replace_within.and_then(|d| {
                jiff::SignedDuration::try_from(d)
                    .ok()
                    .and_then(|d| selected_at.checked_add(d).ok())
            }),
            retire_drained,
        }
    }

    /// Writes every writing action of `plan`, in plan order; `nodes` are the nodes as listed
    /// (by name). Returns one result per planned node (`None` for nodes with nothing to write).
    pub async fn apply(
        &self,
        plan: &[PlannedNode],
        nodes: &BTreeMap<String, Node>,
        calls: &mut ApiCalls,
    ) -> Vec<Option<WriteResult>> {
        let mut results = Vec::with_capacity(plan.len());
        for planned in plan {
            if !writes(&planned.action) {
                results.push(None);
                continue;
            }
            let result = match nodes.get(&planned.candidate.node) {
                Some(node) => match planned.action {
                    Action::Retire { shrink_group } => {
                        self.retire(node, &planned.candidate, shrink_group, calls)
                            .await
                    }
                    _ => self.write(node, &planned.action, calls).await,
                },
                None => WriteResult {
                    outcome: WriteOutcome::Failed {
                        error: "the node is not among the listed nodes".into(),
                    },
                    attempts: 0,
                },
            };
            log_result(&planned.candidate.node, &planned.action, &result);
            results.push(Some(result));
        }
        results
    }

    /// Terminates the instance of a drained node through the provider's [`Retirer`](crate::provider::seam::Retirer), then records
    /// an Event on the node. Without a retirer (Kubernetes provider) it fails and does nothing.
    ///
    /// A termination cannot be guarded by the node's resourceVersion, and the plan was made on
    /// the nodes as listed before the cloud look-ups (seconds to minutes earlier). So the node is
    /// read again and re-planned first: one taken back in the meantime (its taint removed, the
    /// drain rolled back and pods scheduled on it again) is dropped, not terminated with its
    /// pods on it.
    async fn retire(
        &self,
        node: &Node,
        candidate: &Candidate,
        shrink_group: bool,
        calls: &mut ApiCalls,
    ) -> WriteResult {
        let failed = |error: String, attempts| WriteResult {
            outcome: WriteOutcome::Failed { error },
            attempts,
        };
        let Some(retirer) = self.assessor.retirer() else {
            return failed(
                "retiring a node needs a cloud provider; the kubernetes provider never retires"
                    .to_owned(),
                0,
            );
        };
        if candidate.instance.is_none() {
            return failed("the node names no instance to retire".to_owned(), 0);
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        // Its Node deleted since the list (None): no pod can run there, and no later run would
        // list it, so its drained instance is retired as planned.
        let fresh = match self.reread(&name, calls).await {
            Ok(fresh) => fresh,
            Err(error) => {
                return failed(
                    format!(
                        "cannot read the node again before terminating its instance: {}; nothing was terminated",
                        describe(&error)
                    ),
                    0,
                );
            }
        };
        let candidate = match fresh {
            Some(fresh) => {
                let candidate = self.assessor.candidate(&fresh);
                let still = recheck(
                    &Action::Retire { shrink_group },
                    candidate.clone(),
                    self.retire_drained,
                );
                if let Err(why) = still {
                    return WriteResult {
                        outcome: WriteOutcome::Dropped { why },
                        attempts: 0,
                    };
                }
                candidate
            }
            None => candidate.clone(),
        };
        let (api, operation) = retirer.call(&candidate);
        calls.count(api, operation);
        match retirer.retire(&candidate, shrink_group).await {
            Ok(note) => {
                self.publish(node, RETIRED_REASON, "Retire", note, calls)
                    .await;
                WriteResult {
                    outcome: WriteOutcome::Applied,
                    attempts: 1,
                }
            }
            Err(error) => failed(error, 1),
        }
    }

    /// Writes one action, retrying after conflicts with the action re-planned on fresh data.
    async fn write(&self, listed: &Node, planned: &Action, calls: &mut ApiCalls) -> WriteResult {
        let name = listed.metadata.name.clone().unwrap_or_default();
        let mut node = listed.clone();
        let mut action = planned.clone();
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let result = |outcome, attempts| WriteResult { outcome, attempts };
        let failed = |error: String, attempts| result(WriteOutcome::Failed { error }, attempts);
        let dropped = |why: String, attempts| result(WriteOutcome::Dropped { why }, attempts);
        for attempt in 1..=MAX_ATTEMPTS {
            let patch = match &action {
                Action::Taint { reason, detail } => taint_patch(
                    &node,
                    *reason,
                    detail,
                    self.effect,
                    self.selected_at,
                    self.replace_by,
                ),
                Action::Untaint { .. } => untaint_patch(&node),
                Action::Retire { .. } => Err("a retire is not a patch".to_owned()),
                Action::Keep { .. } | Action::Skip { .. } => {
                    Err("a keep or skip has nothing to write".to_owned())
                }
            };
            let patch = match patch {
                Ok(patch) => patch,
                Err(error) => return failed(error, attempt - 1),
            };
            calls.kube("patch nodes");
            let merge = Patch::Merge(&patch);
            let sent =
                retry_transient("patch nodes", || self.api.patch(&name, &params, &merge)).await;
            match sent {
                Ok(written) => {
                    self.announce(&written, &action, calls).await;
                    return result(WriteOutcome::Applied, attempt);
                }
                Err(error) if api_code(&error) == Some(409) => {
                    tracing::info!(node = %name, attempt, "conflict: the node changed since it was read; re-reading it");
                    let fresh = match self.reread(&name, calls).await {
                        Ok(Some(fresh)) => fresh,
                        Ok(None) => return dropped("the node was deleted".into(), attempt),
                        Err(error) => {
                            return failed(
                                format!(
                                    "cannot re-read the node after a conflict: {}",
                                    describe(&error)
                                ),
                                attempt,
                            );
                        }
                    };
                    // A patch the server made but whose answer was lost (a 504, retried) meets
                    // its own write on the retry: made, not dropped.
                    if let Action::Taint { reason, detail } = &action
                        && carries_this_runs_taint(&fresh, *reason, detail, self.selected_at)
                    {
                        self.announce(&fresh, &action, calls).await;
                        return result(WriteOutcome::Applied, attempt);
                    }
                    match recheck(
                        &action,
                        self.assessor.candidate(&fresh),
                        self.retire_drained,
                    ) {
                        Ok(next) => {
                            action = next;
                            node = fresh;
                        }
                        Err(why) => return dropped(why, attempt),
                    }
                }
                Err(error) if api_code(&error) == Some(404) => {
                    return dropped("the node no longer exists".into(), attempt);
                }
                Err(error) => return failed(describe(&error), attempt),
            }
        }
        failed(
            format!("the node kept changing: still conflicting after {MAX_ATTEMPTS} attempts"),
            MAX_ATTEMPTS,
        )
    }

    /// Reads the node again, as the plan needs it; `None` when it was deleted since the list.
    async fn reread(&self, name: &str, calls: &mut ApiCalls) -> Result<Option<Node>, kube::Error> {
        calls.kube("get nodes");
        match retry_transient("get nodes", || self.api.get(name)).await {
            Ok(fresh) => Ok(Some(slim(fresh))),
            Err(error) if api_code(&error) == Some(404) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Records an Event on the node for a write that was made.
    async fn announce(&self, node: &Node, action: &Action, calls: &mut ApiCalls) {
        let (reason, verb, note) = match action {
            Action::Taint { reason, detail } => (
                TAINTED_REASON,
                "Taint",
                format!(
                    "rotor-selector put the drain taint {DRAIN_TAINT_KEY}={reason}:{} on this node: {detail}",
                    self.effect
                ),
            ),
            Action::Untaint { why } => (
                UNTAINTED_REASON,
                "Untaint",
                format!("rotor-selector removed its drain taint from this node: {why}"),
            ),
            _ => return,
        };
        self.publish(node, reason, verb, note, calls).await;
    }

    /// Records one Event on the node; a failure is logged, not fatal.
    async fn publish(
        &self,
        node: &Node,
        reason: &str,
        verb: &str,
        note: String,
        calls: &mut ApiCalls,
    ) {
        let event = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note),
            action: verb.into(),
            secondary: None,
        };
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: node.metadata.name.clone(),
            uid: node.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        calls.kube("create events");
        // Not retried: the write it reports is made, and a lost Event only loses a note.
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(node = node.metadata.name.as_deref().unwrap_or_default(), reason, error = %describe(&error), "could not record an Event on the node");
        }
    }
}

fn log_result(node: &str, action: &Action, result: &WriteResult) {
    let kind = action.kind();
    let attempts = result.attempts;
    match &result.outcome {
        WriteOutcome::Applied => tracing::info!(node = %node, action = kind, attempts, "applied"),
        WriteOutcome::DryRun => {}
        WriteOutcome::Dropped { why } => {
            tracing::info!(node = %node, action = kind, attempts, why = %why, "dropped")
        }
        WriteOutcome::Failed { error } => {
            tracing::error!(node = %node, action = kind, attempts, error = %error, "write failed")
        }
    }
}

/// The HTTP status of an API error.
fn api_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// An error in one line: `409 Conflict: <message>` for API errors.
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            format!("{} {}: {}", status.code, status.reason, status.message)
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use rotor_core::contract::PHASE_ANNOTATION;
    use serde_json::json;

    use super::*;
    use crate::verdict::Verdict;

    fn node(taints: Value, annotations: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "resourceVersion": "42", "annotations": annotations},
            "spec": {"taints": taints},
        }))
        .unwrap()
    }

    fn at() -> Timestamp {
        "2025-05-06T07:08:09.5Z".parse().unwrap()
    }

    #[test]
    fn taint_patch_keeps_other_taints_and_carries_the_resource_version() {
        let n = node(
            json!([{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]),
            json!({"keep": "me"}),
        );
        let patch = taint_patch(
            &n,
            DrainReason::KubeletVersion,
            "kubelet v1.33.2, control plane v1.34.1",
            TaintEffect::PreferNoSchedule,
            at(),
            None,
        )
        .unwrap();
        assert_eq!(
            patch,
            json!({
                "metadata": {
                    "resourceVersion": "42",
                    "annotations": {
                        "rotor.dev/selected-at": "2025-05-06T07:08:09Z",
                        "rotor.dev/selector-detail": "kubelet v1.33.2, control plane v1.34.1",
                    },
                },
                "spec": {"taints": [
                    {"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
                    {"key": "rotor.dev/drain", "value": "kubelet-version", "effect": "PreferNoSchedule"},
                ]},
            })
        );
        let bare: Node =
            serde_json::from_value(json!({"metadata": {"name": "n", "resourceVersion": "7"}}))
                .unwrap();
        let patch = taint_patch(
            &bare,
            DrainReason::MaxAge,
            "old",
            TaintEffect::NoSchedule,
            at(),
            None,
        )
        .unwrap();
        assert_eq!(
            patch["spec"],
            json!({"taints": [{"key": "rotor.dev/drain", "value": "max-age", "effect": "NoSchedule"}]})
        );
    }

    #[test]
    fn a_taint_carries_the_replace_by_time_unless_the_node_has_one() {
        let later: Timestamp = "2025-05-13T07:08:09Z".parse().unwrap();
        let replace_by_written = |n: &Node| {
            let patch = taint_patch(
                n,
                DrainReason::Image,
                "d",
                TaintEffect::NoSchedule,
                at(),
                Some(later),
            )
            .unwrap();
            patch["metadata"]["annotations"]
                .get("rotor.dev/replace-by")
                .cloned()
        };
        assert_eq!(
            replace_by_written(&node(json!([]), json!({}))),
            Some(json!("2025-05-13T07:08:09Z"))
        );
        // A deadline someone else set earlier stands.
        let set = node(
            json!([]),
            json!({"rotor.dev/replace-by": "2025-05-08T00:00:00Z"}),
        );
        assert_eq!(replace_by_written(&set), None);
        // One the selector set for a selection whose taint was removed by hand belongs to no
        // selection: the new one's replaces it.
        let stale = node(
            json!([]),
            json!({"rotor.dev/replace-by": "2025-05-08T00:00:00Z",
                   "rotor.dev/replace-by-set-by": "rotor-selector"}),
        );
        assert_eq!(
            replace_by_written(&stale),
            Some(json!("2025-05-13T07:08:09Z"))
        );
    }

    #[test]
    fn a_taint_is_known_as_this_runs_by_its_reason_and_selected_at() {
        let at: Timestamp = "2026-12-04T22:00:00Z".parse().unwrap();
        let tainted = |value: &str, selected: &str, detail: &str| {
            node(
                json!([{"key": "rotor.dev/drain", "value": value, "effect": "NoSchedule"}]),
                json!({"rotor.dev/selected-at": selected, "rotor.dev/selector-detail": detail}),
            )
        };
        let this_run = "2026-12-04T22:00:00Z";
        let ours =
            |n: &Node| carries_this_runs_taint(n, DrainReason::Image, "ami-1 wants ami-2", at);
        assert!(ours(&tainted("image", this_run, "ami-1 wants ami-2")));
        // An earlier run's taint, another reason, another run's words in the same second, or
        // no taint at all: not this run's write.
        assert!(!ours(&tainted(
            "image",
            "2026-12-04T21:00:00Z",
            "ami-1 wants ami-2"
        )));
        assert!(!ours(&tainted("manual", this_run, "ami-1 wants ami-2")));
        assert!(!ours(&tainted("image", this_run, "ami-0 wants ami-2")));
        assert!(!ours(&node(
            json!([]),
            json!({"rotor.dev/selected-at": this_run, "rotor.dev/selector-detail": "ami-1 wants ami-2"})
        )));
    }

    #[test]
    fn untaint_patch_removes_only_rotors_taint_and_annotations() {
        let n = node(
            json!([
                {"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
                {"key": "rotor.dev/drain", "value": "kubelet-version", "effect": "NoSchedule"},
            ]),
            json!({"rotor.dev/selected-at": "x", "rotor.dev/selector-detail": "y"}),
        );
        assert_eq!(
            untaint_patch(&n).unwrap(),
            json!({
                "metadata": {
                    "resourceVersion": "42",
                    "annotations": {
                        "rotor.dev/selected-at": null,
                        "rotor.dev/selector-detail": null,
                    },
                },
                "spec": {"taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]},
            })
        );
        let only_rotor = node(
            json!([{"key": "rotor.dev/drain", "value": "image", "effect": "NoSchedule"}]),
            json!({}),
        );
        assert_eq!(
            untaint_patch(&only_rotor).unwrap()["spec"],
            json!({"taints": null})
        );
    }

    #[test]
    fn an_untaint_takes_back_the_selectors_deadline_and_leaves_anyone_elses() {
        let tainted = |annotations: Value| {
            node(
                json!([{"key": "rotor.dev/drain", "value": "image", "effect": "NoSchedule"}]),
                annotations,
            )
        };
        // Set with the taint (as `taint_patch` writes it): removed with the marker.
        let written = taint_patch(
            &node(json!([]), json!({})),
            DrainReason::Image,
            "d",
            TaintEffect::NoSchedule,
            at(),
            Some("2025-05-13T07:08:09Z".parse().unwrap()),
        )
        .unwrap();
        let selectors = tainted(written["metadata"]["annotations"].clone());
        let annotations = &untaint_patch(&selectors).unwrap()["metadata"]["annotations"];
        assert_eq!(annotations["rotor.dev/replace-by"], Value::Null);
        assert_eq!(
            annotations.get("rotor.dev/replace-by-set-by"),
            Some(&Value::Null)
        );
        assert!(annotations.get("rotor.dev/replace-by").is_some());
        // A person's deadline, unmarked: left where it is.
        let persons = tainted(json!({"rotor.dev/replace-by": "2025-06-01T00:00:00Z"}));
        let annotations = &untaint_patch(&persons).unwrap()["metadata"]["annotations"];
        assert!(
            annotations.get("rotor.dev/replace-by").is_none(),
            "{annotations}"
        );
    }

    #[test]
    fn no_write_without_a_resource_version() {
        let n: Node = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        assert!(untaint_patch(&n).unwrap_err().contains("resourceVersion"));
        assert!(
            taint_patch(
                &n,
                DrainReason::Image,
                "",
                TaintEffect::NoSchedule,
                at(),
                None
            )
            .unwrap_err()
            .contains("precondition")
        );
    }

    fn candidate(verdict: Verdict, taint: Option<&str>) -> Candidate {
        Candidate {
            node: "n1".into(),
            instance: None,
            group: None,
            zone: None,
            created: None,
            verdict,
            current_taint: taint.map(str::to_owned),
            drain_started: false,
            selected_by_selector: taint.is_some(),
            opted_out: false,
            drained: false,
        }
    }

    fn drifted(detail: &str) -> Verdict {
        Verdict::Drifted {
            reason: DrainReason::KubeletVersion,
            detail: detail.into(),
        }
    }

    #[test]
    fn recheck_keeps_a_taint_that_still_applies_with_fresh_detail() {
        let planned = Action::Taint {
            reason: DrainReason::KubeletVersion,
            detail: "old".into(),
        };
        assert_eq!(
            recheck(&planned, candidate(drifted("fresh"), None), false),
            Ok(Action::Taint {
                reason: DrainReason::KubeletVersion,
                detail: "fresh".into()
            })
        );
    }

    #[test]
    fn recheck_drops_a_taint_when_someone_else_tainted_or_it_is_current_or_opted_out() {
        let planned = Action::Taint {
            reason: DrainReason::KubeletVersion,
            detail: "d".into(),
        };
        assert_eq!(
            recheck(&planned, candidate(drifted("d"), Some("manual")), false),
            Err("no longer applies after a concurrent change to the node (now keep: already tainted (manual))".into())
        );
        assert_eq!(
            recheck(&planned, candidate(Verdict::Current, None), false),
            Err(
                "no longer applies after a concurrent change to the node (now keep: up to date)"
                    .into()
            )
        );
        let mut opted_out = candidate(drifted("d"), None);
        opted_out.opted_out = true;
        assert!(
            recheck(&planned, opted_out, false)
                .unwrap_err()
                .contains("now skip: node opted out")
        );
    }

    #[test]
    fn recheck_drops_an_untaint_once_the_drain_started() {
        let planned = Action::Untaint {
            why: "no longer out of date (was kubelet-version)".into(),
        };
        assert_eq!(
            recheck(
                &planned,
                candidate(Verdict::Current, Some("kubelet-version")),
                false
            ),
            Ok(planned.clone())
        );
        let mut started = candidate(Verdict::Current, Some("kubelet-version"));
        started.drain_started = true;
        assert_eq!(
            recheck(&planned, started, false),
            Err("no longer applies after a concurrent change to the node (now keep: no longer out of date (was kubelet-version), but the drain has started)".into())
        );
        assert!(
            recheck(&planned, candidate(Verdict::Current, None), false)
                .unwrap_err()
                .contains("now keep: up to date")
        );
        assert_eq!(PHASE_ANNOTATION, "rotor.dev/phase");
    }

    #[test]
    fn outcomes_read_well() {
        assert_eq!(WriteOutcome::Applied.to_string(), "applied");
        assert_eq!(WriteOutcome::DryRun.to_string(), "dry-run");
        assert_eq!(
            WriteOutcome::Failed {
                error: "500 InternalError: boom".into()
            }
            .to_string(),
            "failed: 500 InternalError: boom"
        );
        assert!(writes(&Action::Retire {
            shrink_group: false
        }));
        assert!(!writes(&Action::Keep { why: String::new() }));
    }
}
