//! Writing the node record: the drain's annotations, the cordon that goes with its start, and
//! undoing both when the taint goes. Guarded by resourceVersion where a write must not claim
//! someone else's cordon; what each write says is decided in [`crate::record::node`].

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use rotor_core::contract::{FIELD_MANAGER, find_drain_taint};
use serde_json::json;

use crate::record::events::NodeEvent;
use crate::record::events_io::Announcer;
use crate::record::node::{DrainRecord, Transition, changes_nothing, cordoned, start_write};

/// Writes the changed annotations of a record, unless nothing changed.
pub async fn save(
    nodes: &Api<Node>,
    name: &str,
    new: &DrainRecord,
    old: &DrainRecord,
) -> Result<(), kube::Error> {
    let patch = new.annotation_patch(old);
    if changes_nothing(&patch) {
        return Ok(());
    }
    nodes
        .patch(name, &patch_params(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// [`save`] for a drain's end (drained or failed), retried while the API server's answer may
/// change (429, 5xx, no answer): an end left unwritten leaves the node showing the drain
/// active, so the fleet would resume it, counting a drained node twice or failing it again at
/// once. The write is a merge of the record's own annotations, so a repeat is harmless.
pub async fn save_end(
    nodes: &Api<Node>,
    name: &str,
    new: &DrainRecord,
    old: &DrainRecord,
) -> Result<(), kube::Error> {
    (|| save(nodes, name, new, old))
        .retry(end_backoff())
        .when(may_pass_if_repeated)
        .await
}

/// About 15 s in all: long enough for an API server restart or a throttled moment.
fn end_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(1))
        .with_max_delay(Duration::from_secs(8))
        .with_max_times(4)
        .with_jitter()
}

/// Whether the same request may pass if sent again: throttled (429), a server error, no answer.
pub(crate) fn may_pass_if_repeated(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// What [`start_and_cordon`] did.
#[derive(Debug)]
pub enum StartWrite {
    /// The start and the cordon are written: the record as it now stands.
    Written(DrainRecord),
    /// The node, read again after a conflict, is no longer due (`still_due` said why): nothing
    /// was written.
    NotDue(&'static str),
}

/// Records the drain's start and cordons the node in one write (the node then shows the whole
/// step or none of it), noting whether rotor placed the cordon: a node already cordoned keeps
/// `cordoned_by_rotor` false, so rotor never undoes someone else's cordon. `then` is a
/// transition folded into the same write (`Evicting` when no surge step comes between).
///
/// The write is guarded by resourceVersion so a cordon placed by someone else in between is
/// never claimed. It goes first over `read`, the node as the drain knows it (the node watch's
/// copy, or a fresh read); a conflict re-reads, and the re-read node must pass `still_due`
/// before it is written: the node changed since `read`, and may no longer want this start.
/// It is made against the node's raw annotations, so values nobody can read are overwritten.
pub async fn start_and_cordon(
    nodes: &Api<Node>,
    name: &str,
    read: &Node,
    started: &DrainRecord,
    then: Option<Transition>,
    still_due: impl Fn(&Node) -> Option<&'static str>,
) -> Result<StartWrite, kube::Error> {
    let mut first = Some(read.clone());
    let still_due = &still_due;
    let attempt = || {
        let first = first.take();
        let then = then.clone();
        async move {
            let node = match first {
                Some(node) => node,
                None => {
                    let node = nodes.get(name).await?;
                    if let Some(why) = still_due(&node) {
                        return Ok(StartWrite::NotDue(why));
                    }
                    node
                }
            };
            let (next, patch) = start_write(&node, started, then);
            if let Some(patch) = patch {
                nodes
                    .patch(name, &patch_params(), &Patch::Merge(&patch))
                    .await?;
            }
            Ok(StartWrite::Written(next))
        }
    };
    attempt.retry(conflict_backoff()).when(is_conflict).await
}

/// Re-read and retry a guarded node write a few times when someone else wrote in between.
fn conflict_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(20))
        .with_max_delay(Duration::from_millis(500))
        .with_max_times(5)
        .with_jitter()
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Writes a parked record (`new`, over `old`) and, in the same write, undoes rotor's own cordon
/// (never someone else's: only when `old` says rotor placed it). Guarded by resourceVersion, so
/// a cordon placed by someone else in between is left alone. Returns whether it uncordoned.
pub async fn park(
    nodes: &Api<Node>,
    name: &str,
    new: &DrainRecord,
    old: &DrainRecord,
) -> Result<bool, kube::Error> {
    let attempt = || async {
        let node = nodes.get(name).await?;
        let mut patch = new.annotation_patch(old);
        patch["metadata"]["resourceVersion"] = json!(node.metadata.resource_version);
        let uncordon = undo_rotors_cordon(&mut patch, &node, old.cordoned_by_rotor);
        nodes
            .patch(name, &patch_params(), &Patch::Merge(&patch))
            .await?;
        Ok(uncordon)
    };
    attempt.retry(conflict_backoff()).when(is_conflict).await
}

/// Adds the uncordon to `patch` when the node is cordoned and rotor placed that cordon
/// (`placed_by_rotor`, from its record): never someone else's. Returns whether it did.
fn undo_rotors_cordon(patch: &mut serde_json::Value, node: &Node, placed_by_rotor: bool) -> bool {
    let uncordon = placed_by_rotor && cordoned(node);
    if uncordon {
        patch["spec"] = json!({"unschedulable": false});
    }
    uncordon
}

/// Forgets rotor's cordon of a node that is no longer cordoned (someone uncordoned it while
/// its drain failed or waited): without this, a cordon someone else placed later would pass
/// for rotor's and be undone when the taint goes. Read fresh and guarded by resourceVersion, so
/// a cordon placed in between keeps the record as it is. Returns the record as written, or
/// `None` when the node, read fresh, had nothing to forget (or is gone).
pub async fn forget_cordon(
    client: &kube::Client,
    name: &str,
) -> Result<Option<DrainRecord>, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let attempt = || async {
        let Some(node) = nodes.get_opt(name).await? else {
            return Ok(None);
        };
        let record = DrainRecord::from_annotations(node.metadata.annotations.as_ref());
        if cordoned(&node) || !record.cordoned_by_rotor {
            return Ok(None);
        }
        let forgotten = DrainRecord {
            cordoned_by_rotor: false,
            ..record.clone()
        };
        let mut patch = forgotten.annotation_patch(&record);
        patch["metadata"]["resourceVersion"] = json!(node.metadata.resource_version);
        nodes
            .patch(name, &patch_params(), &Patch::Merge(&patch))
            .await?;
        Ok(Some(forgotten))
    };
    attempt.retry(conflict_backoff()).when(is_conflict).await
}

/// Undoes what rotor did to a node whose taint went away: its own cordon, its annotations.
/// Read fresh: a node tainted again meanwhile (a taint removed and put back, say to change its
/// reason) keeps a drain under way, and a node with nothing of rotor's left is neither written
/// nor told about (a second clean-up after a lagging watch). Returns the node's record as it
/// stands after: cleared, or as read when the node was tainted again (empty when it is gone).
pub async fn clean_up(
    client: &kube::Client,
    announcer: &Announcer,
    name: &str,
) -> Result<DrainRecord, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let attempt = || async {
        let Some(node) = nodes.get_opt(name).await? else {
            return Ok((DrainRecord::default(), None));
        };
        let record = DrainRecord::from_annotations(node.metadata.annotations.as_ref());
        // A drain under way stays; an ended one (parked, failed, drained) is cleared as ever,
        // which is how an operator asks for a retry sooner: untaint, taint again.
        if find_drain_taint(&node).is_some() && record.is_active() {
            tracing::debug!(
                node = name,
                "tainted again before its clean-up: its drain stays"
            );
            return Ok((record, None));
        }
        let mut patch = DrainRecord::cleared().annotation_patch(&record);
        patch["metadata"]["resourceVersion"] = json!(node.metadata.resource_version);
        let uncordon = undo_rotors_cordon(&mut patch, &node, record.cordoned_by_rotor);
        if changes_nothing(&patch) && !uncordon {
            return Ok((record, None));
        }
        nodes
            .patch(name, &patch_params(), &Patch::Merge(&patch))
            .await?;
        Ok((DrainRecord::cleared(), Some((node, uncordon))))
    };
    let (after, written) = attempt.retry(conflict_backoff()).when(is_conflict).await?;
    if let Some((node, uncordon)) = written {
        let what = if uncordon {
            "uncordoned it and cleared"
        } else {
            "cleared"
        };
        tracing::info!(
            node = name,
            "drain taint removed; {what} rotor's annotations"
        );
        announcer
            .on_node(
                &node,
                NodeEvent::Cancelled,
                format!("The drain taint was removed; rotor {what} its drain state."),
            )
            .await;
    }
    Ok(after)
}
