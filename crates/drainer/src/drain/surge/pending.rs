//! Rotor's placeholders still waiting for a node, as the watch of every placeholder shows them.
//! A drain about to free its room waits while other nodes' placeholders are pending: one
//! pending then is scheduled into the freed room within milliseconds, before the first evicted
//! pod's replacement exists, and where the nodes are packed full (as Karpenter packs them) that
//! replacement then finds no room, preempts a placeholder and waits the scheduler's back-off.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;

use crate::drain::pods::{is_bound, is_finished};
use crate::drain::surge::placeholder_node;
use crate::drain::watched::WatchedPods;

/// Every placeholder as the watch shows it, pending or not: which ones wait is read when asked.
/// Until the watch's first list has ended nothing is known, and nothing is reported pending: a
/// drain holds its room only on what it has seen.
#[derive(Debug, Default)]
pub struct PendingPlaceholders {
    placeholders: WatchedPods,
}

/// Which placeholders still wait for a node, for one node's drain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OthersPending {
    /// How many of other nodes' placeholders wait for a node.
    pub placeholders: usize,
    /// How many nodes they stand in for.
    pub nodes: usize,
}

impl PendingPlaceholders {
    /// Takes one event of the watch in.
    pub fn observe(&mut self, event: watcher::Event<Pod>) {
        self.placeholders.apply(event);
    }

    /// The placeholders of nodes other than `node` that wait for a node (not bound, not being
    /// deleted, not ended), made less than `young_for` (`--surge-timeout`) before `now`. An
    /// older one has waited longer than any drain waits for its room, for capacity that is
    /// likely not coming, and waiting for it would only slow every drain. One that names no
    /// node (not made by rotor's sets) is not waited for either. `None` until the watch has
    /// listed.
    pub fn besides(
        &self,
        node: &str,
        now: Timestamp,
        young_for: Duration,
    ) -> Option<OthersPending> {
        let young = |pod: &Pod| {
            pod.metadata
                .creation_timestamp
                .as_ref()
                .is_none_or(|made| now.duration_since(made.0).unsigned_abs() < young_for)
        };
        let mut nodes = BTreeSet::new();
        let mut placeholders = 0;
        for pod in self.placeholders.listed()?.values() {
            let waits =
                !is_bound(pod) && pod.metadata.deletion_timestamp.is_none() && !is_finished(pod);
            let stands_for = placeholder_node(pod).unwrap_or_default();
            if waits && stands_for != node && !stands_for.is_empty() && young(pod) {
                placeholders += 1;
                nodes.insert(stands_for);
            }
        }
        Some(OthersPending {
            placeholders,
            nodes: nodes.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-12-01T10:00:00Z";
    const YOUNG_FOR: Duration = Duration::from_secs(300);

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    /// A placeholder for `node`'s drain as the API server shows it: made `age_s` seconds before
    /// [`NOW`], bound to `bound_to` if given, else pending as the scheduler reports it.
    fn placeholder(uid: &str, node: &str, age_s: i64, bound_to: Option<&str>) -> Pod {
        let made = now() - jiff::SignedDuration::from_secs(age_s);
        let mut v = json!({
            "metadata": {
                "name": format!("rotor-surge-{node}-{uid}"),
                "namespace": "rotor-system",
                "uid": uid,
                "creationTimestamp": made.to_string(),
                "labels": {"rotor.dev/surge-for": node, "app.kubernetes.io/managed-by": "rotor"},
                "annotations": {"rotor.dev/surge-node": node},
            },
            "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]},
            "status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/27 nodes are available: 27 Insufficient cpu."
            }]}
        });
        if let Some(to) = bound_to {
            v["spec"]["nodeName"] = json!(to);
            v["status"] = json!({"phase": "Running"});
        }
        serde_json::from_value(v).unwrap()
    }

    fn listed(pods: Vec<Pod>) -> PendingPlaceholders {
        let mut book = PendingPlaceholders::default();
        book.observe(watcher::Event::Init);
        for pod in pods {
            book.observe(watcher::Event::InitApply(pod));
        }
        book.observe(watcher::Event::InitDone);
        book
    }

    fn besides(book: &PendingPlaceholders, node: &str) -> Option<(usize, usize)> {
        book.besides(node, now(), YOUNG_FOR)
            .map(|o| (o.placeholders, o.nodes))
    }

    #[test]
    fn nothing_is_known_pending_before_the_first_list_has_ended() {
        let mut book = PendingPlaceholders::default();
        book.observe(watcher::Event::Init);
        book.observe(watcher::Event::InitApply(placeholder("a", "n1", 1, None)));
        assert_eq!(
            besides(&book, "n2"),
            None,
            "a half-read list is not an answer"
        );
        book.observe(watcher::Event::InitDone);
        assert_eq!(besides(&book, "n2"), Some((1, 1)));
    }

    #[test]
    fn a_drain_counts_only_other_nodes_pending_placeholders() {
        let book = listed(vec![
            placeholder("a", "n1", 1, None),
            placeholder("b", "n1", 1, None),
            placeholder("c", "n2", 1, None),
            placeholder("d", "n3", 1, Some("new-node-1")),
        ]);
        assert_eq!(besides(&book, "n9"), Some((3, 2)));
        assert_eq!(
            besides(&book, "n1"),
            Some((1, 1)),
            "its own are not waited for"
        );
        assert_eq!(besides(&book, "n2"), Some((2, 1)));
    }

    #[test]
    fn a_placeholder_stops_being_pending_when_bound_deleted_or_ended() {
        let mut book = listed(vec![
            placeholder("a", "n1", 1, None),
            placeholder("b", "n1", 1, None),
            placeholder("c", "n1", 1, None),
        ]);
        assert_eq!(besides(&book, "n2"), Some((3, 1)));
        book.observe(watcher::Event::Apply(placeholder(
            "a",
            "n1",
            1,
            Some("new-node-1"),
        )));
        assert_eq!(besides(&book, "n2"), Some((2, 1)), "bound by the scheduler");
        let mut leaving = placeholder("b", "n1", 1, None);
        leaving.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        book.observe(watcher::Event::Apply(leaving));
        assert_eq!(
            besides(&book, "n2"),
            Some((1, 1)),
            "scaled away, being deleted"
        );
        book.observe(watcher::Event::Delete(placeholder("c", "n1", 1, None)));
        assert_eq!(besides(&book, "n2"), Some((0, 0)), "deleted");
        // Made again, pending: waited for again.
        book.observe(watcher::Event::Apply(placeholder("e", "n1", 0, None)));
        assert_eq!(besides(&book, "n2"), Some((1, 1)));
    }

    #[test]
    fn a_pending_pod_that_names_no_node_is_not_waited_for() {
        let mut unnamed = placeholder("x", "n1", 1, None);
        unnamed.metadata.annotations = None;
        let book = listed(vec![unnamed, placeholder("a", "n2", 1, None)]);
        assert_eq!(besides(&book, "n9"), Some((1, 1)), "only n2's");
    }

    #[test]
    fn a_placeholder_pending_past_the_surge_timeout_is_not_waited_for() {
        let book = listed(vec![
            placeholder("old", "n1", 300, None),
            placeholder("young", "n2", 299, None),
        ]);
        assert_eq!(
            besides(&book, "n9"),
            Some((1, 1)),
            "only the one made less than --surge-timeout ago"
        );
    }

    #[test]
    fn a_new_list_replaces_what_the_watch_knew() {
        let mut book = listed(vec![placeholder("a", "n1", 1, None)]);
        // The watch failed; meanwhile "a" was bound and "b" made. The relist shows both.
        book.observe(watcher::Event::Init);
        book.observe(watcher::Event::InitApply(placeholder(
            "a",
            "n1",
            1,
            Some("new-node-1"),
        )));
        assert_eq!(
            besides(&book, "n9"),
            Some((1, 1)),
            "what was known stands until the list ends"
        );
        book.observe(watcher::Event::InitApply(placeholder("b", "n2", 1, None)));
        book.observe(watcher::Event::InitDone);
        assert_eq!(besides(&book, "n9"), Some((1, 1)));
        assert_eq!(
            besides(&book, "n2"),
            Some((0, 0)),
            "only n2's is pending now"
        );
    }
}
