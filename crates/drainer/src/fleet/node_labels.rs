//! The nodes' labels that the RotationPolicies' selectors read, with each distinct key and
//! value stored once. A fleet's nodes share almost all of their labels (zone, instance type,
//! node group, architecture); only a few, such as the hostname, are their own. Kept whole, as
//! maps of owned strings, they were half of rotor-drainer's memory at 20,000 nodes (50 of 100
//! MiB idle on rotor-sim, docs/benchmarks.md, "Memory and requests by scale"); shared, still
//! 10 MiB of per-node lists. So only the keys some policy selects by are kept ([`LabelKeys`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

/// Which label keys a node's summary keeps. Nothing but the policies' selectors reads a
/// node's labels, so the drainer keeps only the keys they name; a policy that selects by a key
/// not kept makes the controller read the nodes again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelKeys {
    /// Every label (a summary made outside the controller, as in tests).
    Every,
    /// Only these keys.
    Only(BTreeSet<String>),
}

impl Default for LabelKeys {
    /// No policy yet: no label is kept.
    fn default() -> Self {
        LabelKeys::Only(BTreeSet::new())
    }
}

impl LabelKeys {
    /// Whether a summary made with these keys holds every label `needed` would keep.
    pub fn covers(&self, needed: &LabelKeys) -> bool {
        match (self, needed) {
            (LabelKeys::Every, _) => true,
            (LabelKeys::Only(_), LabelKeys::Every) => false,
            (LabelKeys::Only(kept), LabelKeys::Only(needed)) => needed.is_subset(kept),
        }
    }

    /// Whether a label with this key is kept.
    fn keeps(&self, key: &str) -> bool {
        match self {
            LabelKeys::Every => true,
            LabelKeys::Only(keys) => keys.contains(key),
        }
    }

    /// The keys, for a log line.
    pub fn describe(&self) -> String {
        match self {
            LabelKeys::Every => "every label".into(),
            LabelKeys::Only(keys) => keys.iter().cloned().collect::<Vec<_>>().join(", "),
        }
    }
}

/// One node's labels, sorted by key. Cheap to copy: every start round copies each node's view.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLabels(Arc<[(Arc<str>, Arc<str>)]>);

impl NodeLabels {
    /// The labels of `labels` with a key in `keys`, their strings taken from `strings`.
    pub fn new(
        labels: &BTreeMap<String, String>,
        keys: &LabelKeys,
        strings: &mut LabelStrings,
    ) -> NodeLabels {
        NodeLabels(
            labels
                .iter()
                .filter(|(k, _)| keys.keeps(k))
                .map(|(k, v)| (strings.get(k), strings.get(v)))
                .collect(),
        )
    }

    /// Labels from `(key, value)` pairs, for tests: strings shared with no other node.
    #[cfg(test)]
    pub fn of_pairs(pairs: &[(&str, &str)]) -> NodeLabels {
        NodeLabels::new(
            &tests::labels(pairs),
            &LabelKeys::Every,
            &mut LabelStrings::default(),
        )
    }

    /// The value of `key`, `None` when the node has no such label.
    pub fn get(&self, key: &str) -> Option<&str> {
        let at = self.0.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&self.0[at].1)
    }
}

/// The distinct label strings of the nodes known now. A string no node uses any longer (the
/// hostname of a node that was replaced) is let go at the next sweep: one whenever the set has
/// doubled since the last.
#[derive(Debug)]
pub struct LabelStrings {
    strings: HashSet<Arc<str>>,
    sweep_at: usize,
}

/// Below this many strings nothing is swept: a sweep would cost more than it frees.
const FIRST_SWEEP: usize = 4096;

impl Default for LabelStrings {
    fn default() -> Self {
        LabelStrings {
            strings: HashSet::new(),
            sweep_at: FIRST_SWEEP,
        }
    }
}

impl LabelStrings {
    fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(known) = self.strings.get(s) {
            return known.clone();
        }
        if self.strings.len() >= self.sweep_at {
            // Only this set holds a string whose count is 1: no node's labels use it.
            self.strings.retain(|s| Arc::strong_count(s) > 1);
            self.sweep_at = (self.strings.len() * 2).max(FIRST_SWEEP);
        }
        let new: Arc<str> = Arc::from(s);
        self.strings.insert(new.clone());
        new
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.strings.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_node_reads_its_own_labels_and_no_others() {
        let mut strings = LabelStrings::default();
        let node = NodeLabels::new(
            &labels(&[
                ("topology.kubernetes.io/zone", "us-east-1a"),
                ("kubernetes.io/hostname", "ip-10-0-1-17"),
                ("pool", "gpu"),
            ]),
            &LabelKeys::Every,
            &mut strings,
        );
        assert_eq!(node.get("pool"), Some("gpu"));
        assert_eq!(node.get("kubernetes.io/hostname"), Some("ip-10-0-1-17"));
        assert_eq!(node.get("topology.kubernetes.io/zone"), Some("us-east-1a"));
        assert_eq!(node.get("zone"), None);
        assert_eq!(NodeLabels::default().get("pool"), None);
    }

    #[test]
    fn nodes_share_the_strings_they_have_in_common() {
        let mut strings = LabelStrings::default();
        let a = NodeLabels::new(
            &labels(&[("pool", "web"), ("kubernetes.io/hostname", "a")]),
            &LabelKeys::Every,
            &mut strings,
        );
        let b = NodeLabels::new(
            &labels(&[("pool", "web"), ("kubernetes.io/hostname", "b")]),
            &LabelKeys::Every,
            &mut strings,
        );
        // "pool", "web", "kubernetes.io/hostname", "a", "b".
        assert_eq!(strings.len(), 5);
        assert!(Arc::ptr_eq(&a.0[1].1, &b.0[1].1), "one copy of \"web\"");
    }

    #[test]
    fn the_strings_of_nodes_gone_are_let_go_once_the_set_doubles() {
        let mut strings = LabelStrings::default();
        let kept = NodeLabels::new(&labels(&[("pool", "web")]), &LabelKeys::Every, &mut strings);
        // Replaced nodes: each hostname held for a moment, then dropped. "pool", "web" and
        // the hostname key make three; this fills the set to the threshold.
        for i in 0..FIRST_SWEEP - 3 {
            let gone = NodeLabels::new(
                &labels(&[("kubernetes.io/hostname", &format!("node-{i}"))]),
                &LabelKeys::Every,
                &mut strings,
            );
            drop(gone);
        }
        assert_eq!(
            strings.len(),
            FIRST_SWEEP,
            "nothing swept below the threshold"
        );
        // The hostname key is held only by the call under way when the sweep runs.
        let next = NodeLabels::new(
            &labels(&[("kubernetes.io/hostname", "fresh")]),
            &LabelKeys::Every,
            &mut strings,
        );
        // Swept: what live nodes use stays ("pool", "web", the hostname key, "fresh").
        assert_eq!(strings.len(), 4);
        assert_eq!(next.get("kubernetes.io/hostname"), Some("fresh"));
        // Still shared after the sweep: a new node gets the same copy of "web".
        let again = NodeLabels::new(&labels(&[("pool", "web")]), &LabelKeys::Every, &mut strings);
        assert!(Arc::ptr_eq(&kept.0[0].1, &again.0[0].1));
        let key_again = NodeLabels::new(
            &labels(&[("kubernetes.io/hostname", "fresh")]),
            &LabelKeys::Every,
            &mut strings,
        );
        assert!(Arc::ptr_eq(&next.0[0].0, &key_again.0[0].0));
        assert_eq!(strings.len(), 4, "nothing new");
    }

    #[test]
    fn the_next_sweep_waits_for_twice_what_the_last_one_kept() {
        let mut strings = LabelStrings::default();
        // More live strings than half the threshold: the next sweep waits for twice as many,
        // not for every new string.
        // "node" and FIRST_SWEEP - 1 values, all in use: the set is at the threshold.
        let live: Vec<NodeLabels> = (0..FIRST_SWEEP - 1)
            .map(|i| {
                NodeLabels::new(
                    &labels(&[("node", &format!("n-{i}"))]),
                    &LabelKeys::Every,
                    &mut strings,
                )
            })
            .collect();
        assert_eq!(strings.len(), FIRST_SWEEP);
        assert_eq!(strings.sweep_at, FIRST_SWEEP, "not swept yet");
        let _one_more = NodeLabels::new(
            &labels(&[("node", "n-extra")]),
            &LabelKeys::Every,
            &mut strings,
        );
        // Swept with FIRST_SWEEP strings in use, none let go.
        assert_eq!(strings.sweep_at, 2 * FIRST_SWEEP);
        assert_eq!(strings.len(), FIRST_SWEEP + 1);
        drop(live);
    }

    fn only(keys: &[&str]) -> LabelKeys {
        LabelKeys::Only(keys.iter().map(|k| k.to_string()).collect())
    }

    #[test]
    fn a_node_keeps_only_the_keys_asked_for() {
        let mut strings = LabelStrings::default();
        let node = NodeLabels::new(
            &labels(&[
                ("kubernetes.io/hostname", "ip-10-0-1-17"),
                ("pool", "gpu"),
                ("topology.kubernetes.io/zone", "us-east-1a"),
            ]),
            &only(&["pool", "team"]),
            &mut strings,
        );
        assert_eq!(node.get("pool"), Some("gpu"));
        assert_eq!(node.get("kubernetes.io/hostname"), None);
        assert_eq!(node.get("topology.kubernetes.io/zone"), None);
        // Only "pool" and "gpu" were stored.
        assert_eq!(strings.len(), 2);
        let none = NodeLabels::new(
            &labels(&[("pool", "gpu")]),
            &LabelKeys::default(),
            &mut strings,
        );
        assert_eq!(none, NodeLabels::default(), "no policy: no label kept");
    }

    #[test]
    fn kept_keys_cover_what_a_subset_needs_and_nothing_more() {
        assert!(only(&["pool", "zone"]).covers(&only(&["pool"])));
        assert!(only(&["pool"]).covers(&only(&[])));
        assert!(!only(&["pool"]).covers(&only(&["pool", "zone"])));
        assert!(!only(&[]).covers(&only(&["pool"])));
        assert!(LabelKeys::Every.covers(&only(&["pool"])));
        assert!(!only(&["pool"]).covers(&LabelKeys::Every));
    }
}
