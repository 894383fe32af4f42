//! Room made ahead: the placeholders of the nodes next in line, created while other drains run
//! and without waiting for them, so that a node's drain finds its room ready when it starts;
//! removed if the node leaves the line first.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};

use rotor_core::find_drain_taint;

use crate::drain::surge::keeps_placeholders_off;

use crate::drain::surge_io::removal::remove_room;
use crate::drain::surge_io::room::{SetsStand, SurgeRoom, create_placeholders};

/// The pods on node `name`, read for room made ahead (a drain has its own watch of them).
async fn pods_on(room: &SurgeRoom, name: &str) -> Result<Vec<Pod>, String> {
    let on_node: Api<Pod> = Api::all(room.client.clone());
    on_node
        .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
        .await
        .map(|list| list.items)
        .map_err(|e| format!("cannot list the pods on node {name}: {e}"))
}

/// Makes room ahead for `node`, next in line to drain ([`SurgeRoom::want_ahead`] said so first):
/// takes a `--max-surge` slot if one is free and creates its placeholders, without waiting for
/// them. Its drain finds them (and the slot) when it starts; the machine releases them if the
/// node leaves the line first.
pub async fn reserve_ahead(room: &SurgeRoom, name: &str) {
    let nodes: Api<Node> = Api::all(room.client.clone());
    let node = match nodes.get_opt(name).await {
        Ok(Some(node)) => node,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(node = %name, error = %e, "cannot read the node to make room ahead of its drain; its drain makes the room when it starts");
            return;
        }
    };
    let Some(taint) = find_drain_taint(&node).cloned() else {
        return;
    };
    if !keeps_placeholders_off(&node, &taint) {
        tracing::debug!(node = %name, effect = %taint.effect, "the drain taint does not keep placeholders off the node and it is not cordoned yet: its drain makes the room after the cordon");
        return;
    }
    // Held across the making: a drain that starts meanwhile waits for it.
    let _node = room.lock_node(name).await;
    // Its drain has taken over, or the node left the line while this was on its way (the
    // removal may have run first and found nothing).
    if room.owned_by_drain.lock().await.contains_key(name) || !room.wants_ahead(name) {
        return;
    }
    if !room.take_slot(name) {
        tracing::debug!(node = %name, "no --max-surge slot free: no room made ahead");
        return;
    }
    let made = match pods_on(room, name).await {
        Ok(pods) => create_placeholders(room, &node, &taint, &pods, SetsStand::No).await,
        Err(why) => Err(why),
    };
    match made {
        Ok(made) if made.placeholders == 0 => room.give_back(name),
        Ok(made) => {
            tracing::info!(node = %name, placeholders = made.placeholders, "next in line: made room ahead of its drain")
        }
        Err(why) => {
            tracing::warn!(node = %name, "could not make room ahead of the drain: {why}; its drain tries again when it starts");
            remove_room(room, name).await;
        }
    }
}

/// Removes the room made ahead for `node`, which left the line before its drain started (or
/// whose budgets keep it waiting): nothing, if its drain has taken the room over since.
pub async fn release_ahead(room: &SurgeRoom, node: &str) {
    // Held across the removal: a drain that starts meanwhile waits for it.
    let _node = room.lock_node(node).await;
    if room.owned_by_drain.lock().await.contains_key(node) {
        return;
    }
    remove_room(room, node).await;
}
