//! The DrainRules and the namespaces' labels, as the drains read them: kept by two watches every
//! replica runs (so a new leader starts warm). Without the DrainRule CRD (`404`) there are no
//! rules; until the rules are listed, a drain evicts nothing (a `Skip` or `WaitCompleted` rule
//! must not be missed), and while a rule selects by namespace labels not yet listed, neither do
//! the pods it might select.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use rotor_policy::DrainRule;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::crd_watch::{CrdWatchFailure, CrdWatchState};
use crate::drain::rules::{DrainRules, NamespaceLabels};
use crate::watch_backoff::WatchBackoffExt;

#[derive(Default)]
struct Known {
    rules: Option<Arc<DrainRules>>,
    namespaces: Option<Arc<NamespaceLabels>>,
}

/// The rules and namespace labels the watches know now.
#[derive(Clone, Default)]
pub struct DrainRuleWatch {
    known: Arc<RwLock<Known>>,
}

impl DrainRuleWatch {
    /// Starts both watches on `tasks`; they run until `stop`.
    pub fn start(client: kube::Client, tasks: &TaskTracker, stop: CancellationToken) -> Self {
        let watch = DrainRuleWatch::default();
        tasks.spawn(watch.clone().follow_rules(client.clone(), stop.clone()));
        tasks.spawn(watch.clone().follow_namespaces(client, stop));
        watch
    }

    /// Rules known to be none (no watch runs: tests, and `rotor-drainer` without rules).
    pub fn none() -> Self {
        let watch = DrainRuleWatch::default();
        watch.set_rules(DrainRules::default());
        watch.set_namespaces(NamespaceLabels::default());
        watch
    }

    /// The rules, `None` until listed; the namespaces' labels, `None` until listed.
    pub fn now(&self) -> (Option<Arc<DrainRules>>, Option<Arc<NamespaceLabels>>) {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        (known.rules.clone(), known.namespaces.clone())
    }

    fn set_rules(&self, rules: DrainRules) {
        self.known.write().unwrap_or_else(|e| e.into_inner()).rules = Some(Arc::new(rules));
    }

    fn set_namespaces(&self, namespaces: NamespaceLabels) {
        self.known
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .namespaces = Some(Arc::new(namespaces));
    }

    async fn follow_rules(self, client: kube::Client, stop: CancellationToken) {
        let api: Api<DrainRule> = Api::all(client);
        let mut events = watcher(api, watcher::Config::default())
            .watch_backoff()
            .boxed();
        let mut all: BTreeMap<String, DrainRule> = BTreeMap::new();
        let mut listing: BTreeMap<String, DrainRule> = BTreeMap::new();
        // Once listed, the rules as last seen keep applying while the watch is down.
        let mut state = CrdWatchState::default();
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                event = events.next() => event,
            };
            let changed = match event {
                None => return,
                Some(Ok(watcher::Event::Init)) => {
                    listing.clear();
                    false
                }
                Some(Ok(watcher::Event::InitApply(rule))) => {
                    listing.insert(rule.metadata.name.clone().unwrap_or_default(), rule);
                    false
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    state.listed();
                    all = std::mem::take(&mut listing);
                    true
                }
                Some(Ok(watcher::Event::Apply(rule))) => {
                    all.insert(rule.metadata.name.clone().unwrap_or_default(), rule);
                    true
                }
                Some(Ok(watcher::Event::Delete(rule))) => {
                    all.remove(&rule.metadata.name.unwrap_or_default());
                    true
                }
                Some(Err(error)) => match state.failed(&error) {
                    (CrdWatchFailure::NotSyncedYet, news) => {
                        if news {
                            tracing::warn!(%error, "DrainRules answered 404 after they had been listed (an API server whose CRDs are not synced yet, or the CRD removed): drains go on under the rules as last listed; restart the drainer if you removed the CRD");
                        }
                        false
                    }
                    (CrdWatchFailure::NotInstalled, news) => {
                        if news {
                            tracing::info!(
                                "the DrainRule resource is not installed (no CRD drainrules.rotor.dev): every pod drains as without rules"
                            );
                        }
                        all.clear();
                        true
                    }
                    (_, news) => {
                        if news && state.listed_once() {
                            tracing::warn!(%error, "watching DrainRules failed; it restarts with back-off, and drains go on under the rules as last listed meanwhile (a 403 means the drainer's RBAC lacks drainrules)");
                        } else if news {
                            tracing::warn!(%error, "watching DrainRules failed; it restarts with back-off, and drains evict nothing until the rules are listed (a 403 means the drainer's RBAC lacks drainrules)");
                        }
                        false
                    }
                },
            };
            if changed {
                let rules: Vec<DrainRule> = all.values().cloned().collect();
                let (read, unread) = DrainRules::read(&rules);
                for (name, why) in unread {
                    tracing::warn!(rule = %name, %why, "a DrainRule cannot be read and is left out");
                }
                self.set_rules(read);
            }
        }
    }

    async fn follow_namespaces(self, client: kube::Client, stop: CancellationToken) {
        // Metadata only: the labels are all a rule reads.
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
        let mut events = watcher(api, watcher::Config::default())
            .watch_backoff()
            .boxed();
        let mut all = NamespaceLabels::new();
        let mut listing = NamespaceLabels::new();
        let mut listed = false;
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                event = events.next() => event,
            };
            let name_labels = |meta: &kube::core::ObjectMeta| {
                (
                    meta.name.clone().unwrap_or_default(),
                    meta.labels.clone().unwrap_or_default(),
                )
            };
            match event {
                None => return,
                Some(Ok(watcher::Event::Init)) => listing.clear(),
                Some(Ok(watcher::Event::InitApply(ns))) => {
                    let (name, labels) = name_labels(&ns.metadata);
                    listing.insert(name, labels);
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    all = std::mem::take(&mut listing);
                    listed = true;
                }
                Some(Ok(watcher::Event::Apply(ns))) => {
                    let (name, labels) = name_labels(&ns.metadata);
                    all.insert(name, labels);
                }
                Some(Ok(watcher::Event::Delete(ns))) => {
                    all.remove(&ns.metadata.name.unwrap_or_default());
                }
                Some(Err(error)) => {
                    tracing::warn!(%error, "watching namespaces (for DrainRules' namespaceSelectors) failed; it restarts with back-off");
                    continue;
                }
            }
            if listed {
                self.set_namespaces(all.clone());
            }
        }
    }
}
