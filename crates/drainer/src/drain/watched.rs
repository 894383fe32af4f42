//! The pods one watcher stream shows, as of its last event: what a drain's pod watch and a
//! surge's placeholder watch both keep. Pure state, fed by the shell.

use std::collections::HashMap;

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;

/// One node's pod events, as kube's watcher gives them.
pub type PodEvents = BoxStream<'static, Result<watcher::Event<Pod>, watcher::Error>>;

/// Pods by UID. Until the stream's first list has ended nothing is known: a half-read list
/// must not look like a node without pods, or a surge without pending placeholders.
#[derive(Debug, Default)]
pub struct WatchedPods {
    pods: HashMap<String, Pod>,
    listing: HashMap<String, Pod>,
    listed: bool,
    /// A list has begun and not ended yet.
    in_list: bool,
}

impl WatchedPods {
    /// Takes one event in; returns the UIDs of the pods the event removed: a deletion's, or
    /// those a re-list no longer shows (deleted while the watch was down).
    pub fn apply(&mut self, event: watcher::Event<Pod>) -> Vec<String> {
        match event {
            // A (re-)list starts: the pods known so far stay until it ends.
            watcher::Event::Init => {
                self.listing.clear();
                self.in_list = true;
            }
            watcher::Event::InitApply(p) => {
                self.listing.insert(uid(&p), p);
            }
            watcher::Event::InitDone => {
                let before = std::mem::replace(&mut self.pods, std::mem::take(&mut self.listing));
                self.listed = true;
                self.in_list = false;
                return before
                    .into_keys()
                    .filter(|uid| !self.pods.contains_key(uid))
                    .collect();
            }
            watcher::Event::Apply(p) => {
                self.pods.insert(uid(&p), p);
            }
            watcher::Event::Delete(p) => {
                let gone = uid(&p);
                self.pods.remove(&gone);
                return vec![gone];
            }
        }
        Vec::new()
    }

    /// The pods, once the first list has ended.
    pub fn listed(&self) -> Option<&HashMap<String, Pod>> {
        self.listed.then_some(&self.pods)
    }

    /// The events that bring an empty `WatchedPods` to this one's state: the pods as one list,
    /// then the list under way, if any, as far as it has come. A stream taken over from another
    /// reader goes on from here (the rest of that list, then changes).
    pub fn replay(&self) -> Vec<watcher::Event<Pod>> {
        let mut events = Vec::new();
        if self.listed {
            events.push(watcher::Event::Init);
            events.extend(self.pods.values().cloned().map(watcher::Event::InitApply));
            events.push(watcher::Event::InitDone);
        }
        if self.in_list {
            events.push(watcher::Event::Init);
            events.extend(
                self.listing
                    .values()
                    .cloned()
                    .map(watcher::Event::InitApply),
            );
        }
        events
    }
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// A pod named and identified by `uid`.
    pub(crate) fn pod(uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                name: Some(uid.into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn uids(w: &WatchedPods) -> Option<Vec<String>> {
        w.listed().map(|pods| {
            let mut v: Vec<String> = pods.keys().cloned().collect();
            v.sort();
            v
        })
    }

    #[test]
    fn nothing_is_known_until_the_first_list_ends() {
        let mut w = WatchedPods::default();
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(pod("a")));
        assert_eq!(uids(&w), None);
        w.apply(watcher::Event::InitDone);
        assert_eq!(uids(&w), Some(vec!["a".to_string()]));
    }

    #[test]
    fn changes_apply_and_a_relist_replaces_the_set_only_when_it_ends() {
        let mut w = WatchedPods::default();
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(pod("a")));
        w.apply(watcher::Event::InitDone);
        w.apply(watcher::Event::Apply(pod("b")));
        assert_eq!(w.apply(watcher::Event::Delete(pod("a"))), ["a"]);
        assert_eq!(uids(&w), Some(vec!["b".to_string()]));
        // A re-list (after a 410, say) keeps the old set until it ends, then replaces it, and
        // says which pods went while the watch was down.
        assert!(w.apply(watcher::Event::Init).is_empty());
        w.apply(watcher::Event::InitApply(pod("c")));
        assert_eq!(uids(&w), Some(vec!["b".to_string()]));
        assert_eq!(w.apply(watcher::Event::InitDone), ["b"]);
        assert_eq!(uids(&w), Some(vec!["c".to_string()]));
    }

    /// A fresh `WatchedPods` fed `w`'s replay, then `rest`, against `w` fed `rest`.
    fn taken_over(
        w: &mut WatchedPods,
        rest: Vec<watcher::Event<Pod>>,
    ) -> (Option<Vec<String>>, Option<Vec<String>>) {
        let mut fresh = WatchedPods::default();
        for e in w.replay() {
            fresh.apply(e);
        }
        for e in rest {
            fresh.apply(e.clone());
            w.apply(e);
        }
        (uids(w), uids(&fresh))
    }

    #[test]
    fn a_replay_hands_over_the_state_at_any_point_of_a_list() {
        // Before any list: nothing known, and the stream's first list follows.
        let w = WatchedPods::default();
        assert!(w.replay().is_empty());
        // Mid first list: the pods so far, the rest of the list to come.
        let mut w = WatchedPods::default();
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(pod("a")));
        let (old, new) = taken_over(&mut w, vec![]);
        assert_eq!((old.clone(), new), (None, None));
        let (old, new) = taken_over(
            &mut w,
            vec![
                watcher::Event::InitApply(pod("b")),
                watcher::Event::InitDone,
            ],
        );
        assert_eq!(old, Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(new, old);
        // Listed and changed since.
        w.apply(watcher::Event::Apply(pod("c")));
        w.apply(watcher::Event::Delete(pod("a")));
        let (old, new) = taken_over(&mut w, vec![]);
        assert_eq!(old, Some(vec!["b".to_string(), "c".to_string()]));
        assert_eq!(new, old);
        // Mid re-list: the listed pods stand until the re-list ends, in both.
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(pod("d")));
        let (old, new) = taken_over(&mut w, vec![]);
        assert_eq!(old, Some(vec!["b".to_string(), "c".to_string()]));
        assert_eq!(new, old);
        let (old, new) = taken_over(&mut w, vec![watcher::Event::InitDone]);
        assert_eq!(old, Some(vec!["d".to_string()]));
        assert_eq!(new, old);
    }
}
