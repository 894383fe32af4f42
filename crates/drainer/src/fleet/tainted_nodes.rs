//! The node watch's last copy of each node that carries the drain taint. The loop keeps only a
//! summary of every other node; a drain that starts fresh takes its node from here instead of
//! reading it again (its start write is guarded by this copy's resourceVersion).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher;
use rotor_core::contract::find_drain_taint;

/// Tainted nodes by name, as of the node watch's last event.
#[derive(Debug, Default)]
pub(super) struct TaintedNodes {
    nodes: HashMap<String, Node>,
    /// A (re-)list under way: the nodes known so far stay until it ends.
    listing: HashMap<String, Node>,
}

impl TaintedNodes {
    pub(super) fn apply(&mut self, event: &watcher::Event<Node>) {
        match event {
            watcher::Event::Init => self.listing.clear(),
            watcher::Event::InitApply(node) => keep_if_tainted(&mut self.listing, node),
            watcher::Event::InitDone => self.nodes = std::mem::take(&mut self.listing),
            watcher::Event::Apply(node) => keep_if_tainted(&mut self.nodes, node),
            watcher::Event::Delete(node) => {
                self.nodes
                    .remove(node.metadata.name.as_deref().unwrap_or_default());
            }
        }
    }

    /// `name` as last seen, if it carries the drain taint.
    pub(super) fn get(&self, name: &str) -> Option<Node> {
        self.nodes.get(name).cloned()
    }
}

fn keep_if_tainted(nodes: &mut HashMap<String, Node>, node: &Node) {
    let name = node.metadata.name.clone().unwrap_or_default();
    if find_drain_taint(node).is_none() {
        nodes.remove(&name);
        return;
    }
    let mut node = node.clone();
    // Only the server reads these; a drain never does. The image list is the largest part of
    // a real node's status (up to 50 images, each with its names), and no drain reads it.
    node.metadata.managed_fields = None;
    if let Some(status) = node.status.as_mut() {
        status.images = None;
    }
    nodes.insert(name, node);
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerImage, NodeCondition, NodeSpec, NodeStatus, Taint};
    use kube::api::ObjectMeta;

    use super::*;

    fn node(name: &str, version: &str, taint: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: taint.map(|key| {
                    vec![Taint {
                        key: key.into(),
                        value: Some("ami".into()),
                        effect: "NoSchedule".into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// `name` at `version`, carrying rotor's drain taint.
    fn tainted(name: &str, version: &str) -> Node {
        node(name, version, Some("rotor.dev/drain"))
    }

    fn version(nodes: &TaintedNodes, name: &str) -> Option<String> {
        nodes.get(name)?.metadata.resource_version
    }

    #[test]
    fn keeps_the_latest_copy_of_tainted_nodes_only() {
        let mut nodes = TaintedNodes::default();
        nodes.apply(&watcher::Event::Init);
        nodes.apply(&watcher::Event::InitApply(tainted("a", "1")));
        nodes.apply(&watcher::Event::InitApply(node("b", "1", None)));
        nodes.apply(&watcher::Event::InitApply(node(
            "c",
            "1",
            Some("other.example/drain"),
        )));
        // Nothing counts until the list is whole.
        assert_eq!(version(&nodes, "a"), None);
        nodes.apply(&watcher::Event::InitDone);
        assert_eq!(version(&nodes, "a").as_deref(), Some("1"));
        assert_eq!(version(&nodes, "b"), None, "untainted");
        assert_eq!(version(&nodes, "c"), None, "someone else's taint");

        nodes.apply(&watcher::Event::Apply(tainted("a", "2")));
        nodes.apply(&watcher::Event::Apply(tainted("b", "2")));
        assert_eq!(version(&nodes, "a").as_deref(), Some("2"));
        assert_eq!(version(&nodes, "b").as_deref(), Some("2"));

        // The taint removed, or the node deleted: no copy left to start from.
        nodes.apply(&watcher::Event::Apply(node("a", "3", None)));
        nodes.apply(&watcher::Event::Delete(tainted("b", "2")));
        assert_eq!(version(&nodes, "a"), None);
        assert_eq!(version(&nodes, "b"), None);
    }

    #[test]
    fn the_copy_leaves_out_what_no_drain_reads() {
        let mut big = tainted("a", "1");
        big.metadata.managed_fields = Some(vec![Default::default()]);
        big.metadata.labels = Some([("pool".to_string(), "web".to_string())].into());
        big.status = Some(NodeStatus {
            images: Some(vec![ContainerImage {
                names: Some(vec!["registry.example/app@sha256:0123".into()]),
                size_bytes: Some(1 << 20),
            }]),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let mut nodes = TaintedNodes::default();
        nodes.apply(&watcher::Event::Init);
        nodes.apply(&watcher::Event::InitApply(big));
        nodes.apply(&watcher::Event::InitDone);
        let kept = nodes.get("a").expect("tainted, so kept");
        assert_eq!(kept.metadata.managed_fields, None);
        let status = kept.status.expect("the status stays");
        assert_eq!(status.images, None, "the image list is dropped");
        assert_eq!(
            status.conditions.map(|c| c.len()),
            Some(1),
            "conditions stay"
        );
        assert_eq!(
            kept.metadata
                .labels
                .and_then(|l| l.get("pool").cloned())
                .as_deref(),
            Some("web"),
            "labels stay"
        );
    }

    #[test]
    fn a_relist_replaces_what_was_known_once_it_ends() {
        let mut nodes = TaintedNodes::default();
        nodes.apply(&watcher::Event::Init);
        nodes.apply(&watcher::Event::InitApply(tainted("a", "1")));
        nodes.apply(&watcher::Event::InitDone);
        nodes.apply(&watcher::Event::Init);
        assert_eq!(
            version(&nodes, "a").as_deref(),
            Some("1"),
            "kept while relisting"
        );
        nodes.apply(&watcher::Event::InitApply(tainted("b", "5")));
        nodes.apply(&watcher::Event::InitDone);
        assert_eq!(version(&nodes, "a"), None, "gone while the watch was down");
        assert_eq!(version(&nodes, "b").as_deref(), Some("5"));
    }
}
