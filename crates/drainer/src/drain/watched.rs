//! The pods one watcher stream shows, as of its last event: what a drain's pod watch and a
//! surge's placeholder watch both keep. Pure state, fed by the shell.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;

/// Pods by UID. Until the stream's first list has ended nothing is known: a half-read list
/// must not look like a node without pods, or a surge without pending placeholders.
#[derive(Debug, Default)]
pub struct WatchedPods {
    pods: HashMap<String, Pod>,
    listing: HashMap<String, Pod>,
    listed: bool,
}

impl WatchedPods {
    /// Takes one event in; returns the UID of a pod the event removed.
    pub fn apply(&mut self, event: watcher::Event<Pod>) -> Option<String> {
        match event {
            // A (re-)list starts: the pods known so far stay until it ends.
            watcher::Event::Init => self.listing.clear(),
            watcher::Event::InitApply(p) => {
                self.listing.insert(uid(&p), p);
            }
            watcher::Event::InitDone => {
                self.pods = std::mem::take(&mut self.listing);
                self.listed = true;
            }
            watcher::Event::Apply(p) => {
                self.pods.insert(uid(&p), p);
            }
            watcher::Event::Delete(p) => {
                let gone = uid(&p);
                self.pods.remove(&gone);
                return Some(gone);
            }
        }
        None
    }

    /// The pods, once the first list has ended.
    pub fn listed(&self) -> Option<&HashMap<String, Pod>> {
        self.listed.then_some(&self.pods)
    }
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
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
        assert_eq!(w.apply(watcher::Event::Delete(pod("a"))), Some("a".into()));
        assert_eq!(uids(&w), Some(vec!["b".to_string()]));
        // A re-list (after a 410, say) keeps the old set until it ends, then replaces it.
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(pod("c")));
        assert_eq!(uids(&w), Some(vec!["b".to_string()]));
        w.apply(watcher::Event::InitDone);
        assert_eq!(uids(&w), Some(vec!["c".to_string()]));
    }
}
