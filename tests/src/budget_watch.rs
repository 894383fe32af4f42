//! An independent judge of "no disruption budget violated": it watches every pod through the
//! control plane's own kubectl (`get pods -A --watch --output-watch-events -o json`) and replays
//! each change in the server's order, counting for each budget the pods it selects that are Ready
//! and not terminating. A budget is armed once its healthy count first reaches its minimum; from
//! then on, any moment below that minimum is a violation, with the event that caused it.
//!
//! Nothing of rotor's code is used: the selection is `matchLabels` equality, as the test's own
//! budgets are written, and the minimum is what the test states.

use std::collections::{BTreeMap, HashMap};
use std::io::BufReader;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde_json::Value;

use crate::real_cluster::{die_with_parent, is_ready};

/// One budget to judge: the pods in `namespace` whose labels include all of `match_labels`
/// must keep at least `min_healthy` Ready, non-terminating pods.
#[derive(Clone, Debug)]
pub struct WatchedBudget {
    pub namespace: String,
    pub name: String,
    pub match_labels: BTreeMap<String, String>,
    pub min_healthy: usize,
}

impl WatchedBudget {
    /// A budget over `app=<app>` in `namespace`, named after the app.
    pub fn app(namespace: &str, app: &str, min_healthy: usize) -> WatchedBudget {
        WatchedBudget {
            namespace: namespace.into(),
            name: app.into(),
            match_labels: BTreeMap::from([("app".to_string(), app.to_string())]),
            min_healthy,
        }
    }

    fn selects(&self, pod: &PodState) -> bool {
        pod.namespace == self.namespace
            && self
                .match_labels
                .iter()
                .all(|(k, v)| pod.labels.get(k) == Some(v))
    }
}

#[derive(Clone, Debug)]
struct PodState {
    namespace: String,
    labels: BTreeMap<String, String>,
    healthy: bool,
}

#[derive(Default)]
struct Judge {
    budgets: Vec<WatchedBudget>,
    pods: HashMap<String, PodState>,
    armed: Vec<bool>,
    lowest: Vec<Option<usize>>,
    violations: Vec<String>,
    events: usize,
    relists: usize,
    watch_errors: usize,
}

impl Judge {
    fn new(budgets: Vec<WatchedBudget>) -> Judge {
        let n = budgets.len();
        Judge {
            budgets,
            armed: vec![false; n],
            lowest: vec![None; n],
            ..Judge::default()
        }
    }

    fn apply(&mut self, event: &Value) {
        self.events += 1;
        let kind = event["type"].as_str().unwrap_or_default();
        let pod = &event["object"];
        let Some(uid) = pod["metadata"]["uid"].as_str() else {
            return;
        };
        if kind == "DELETED" {
            self.pods.remove(uid);
        } else {
            self.pods.insert(uid.to_string(), PodState::of(pod));
        }
        self.judge(kind, pod["metadata"]["name"].as_str().unwrap_or("?"));
    }

    /// The watch was listed afresh (after it expired): the list replaces what was known.
    fn resync(&mut self, pods: &[Value]) {
        self.events += 1;
        self.pods = pods
            .iter()
            .filter_map(|p| Some((p["metadata"]["uid"].as_str()?.to_string(), PodState::of(p))))
            .collect();
        self.judge("a fresh list", "-");
    }

    /// Judges every budget on the pods as they are now, after `kind` of pod `name`.
    fn judge(&mut self, kind: &str, name: &str) {
        for (i, budget) in self.budgets.iter().enumerate() {
            let healthy = self
                .pods
                .values()
                .filter(|p| p.healthy && budget.selects(p))
                .count();
            if !self.armed[i] {
                self.armed[i] = healthy >= budget.min_healthy;
                continue;
            }
            self.lowest[i] = Some(self.lowest[i].map_or(healthy, |l| l.min(healthy)));
            if healthy < budget.min_healthy {
                self.violations.push(format!(
                    "{}/{}: {healthy} healthy < {} after {kind} of pod {name}",
                    budget.namespace, budget.name, budget.min_healthy,
                ));
            }
        }
    }
}

impl PodState {
    fn of(pod: &Value) -> PodState {
        {
            let ready = is_ready(pod);
            let terminating = !pod["metadata"]["deletionTimestamp"].is_null();
            let labels = pod["metadata"]["labels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            PodState {
                namespace: pod["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                labels,
                healthy: ready && !terminating,
            }
        }
    }
}

/// A running watch (see the module docs). Stopped on drop.
pub struct BudgetWatch {
    source: Source,
    reader: Option<JoinHandle<()>>,
    judge: Arc<Mutex<Judge>>,
}

/// Where the pod events come from.
enum Source {
    /// `kubectl get pods --watch`: one watch, which ends with its connection.
    Kubectl(Child),
    /// kube's watcher, which resumes after the API server restarts and lists afresh when its
    /// watch expired ([`BudgetWatch::start_resuming`]).
    Watcher(tokio_util::sync::CancellationToken),
}

/// What a [`BudgetWatch`] saw.
#[derive(Debug)]
pub struct BudgetVerdict {
    /// Each moment a budget was below its minimum after it had been met.
    pub violations: Vec<String>,
    /// Budgets that never reached their minimum (so were never judged): a test set-up error.
    pub never_armed: Vec<String>,
    /// The lowest healthy count of each budget once armed, by `namespace/name`.
    pub lowest: BTreeMap<String, usize>,
    /// Watch events replayed.
    pub events: usize,
    /// Fresh lists after the first ([`BudgetWatch::start_resuming`] only).
    pub relists: usize,
    /// Watch errors the watcher recovered from ([`BudgetWatch::start_resuming`] only).
    pub watch_errors: usize,
}

impl BudgetWatch {
    /// Starts watching with `kubectl` (the control plane's own) and `kubeconfig`.
    pub fn start(kubectl: &Path, kubeconfig: &Path, budgets: Vec<WatchedBudget>) -> BudgetWatch {
        let mut cmd = Command::new(kubectl);
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "get",
                "pods",
                "--all-namespaces",
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ])
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().expect("kubectl get pods --watch starts");
        let judge = Arc::new(Mutex::new(Judge::new(budgets)));
        let stdout = child.stdout.take().expect("piped stdout");
        let sink = judge.clone();
        let reader = std::thread::spawn(move || {
            // kubectl prints one JSON document per event, back to back.
            let stream = serde_json::Deserializer::from_reader(BufReader::new(stdout));
            for event in stream.into_iter::<Value>() {
                let Ok(event) = event else { break };
                sink.lock().expect("judge lock").apply(&event);
            }
        });
        BudgetWatch {
            source: Source::Kubectl(child),
            reader: Some(reader),
            judge,
        }
    }

    /// A watch that outlives API server restarts and etcd compactions, for the chaos run: kube's
    /// watcher (a library, not rotor's code) resumes from the last resourceVersion it saw, and
    /// when that has expired (410) lists afresh, the list replacing what was known. Between the
    /// server's return and the watch's, changes are seen late, never missed: a list shows each
    /// pod as it is. [`BudgetVerdict::relists`] counts the fresh lists after the first.
    pub fn start_resuming(kubeconfig: &Path, budgets: Vec<WatchedBudget>) -> BudgetWatch {
        use futures::StreamExt;
        use k8s_openapi::api::core::v1::Pod;
        use kube::runtime::{WatchStreamExt, watcher};

        let judge = Arc::new(Mutex::new(Judge::new(budgets)));
        let stop = tokio_util::sync::CancellationToken::new();
        let kubeconfig = kubeconfig.to_path_buf();
        let (sink, stopped) = (judge.clone(), stop.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the budget watch");
            runtime.block_on(async move {
                let config = kube::Config::from_custom_kubeconfig(
                    kube::config::Kubeconfig::read_from(&kubeconfig).expect("read kubeconfig"),
                    &kube::config::KubeConfigOptions::default(),
                )
                .await
                .expect("a kubeconfig for the budget watch");
                let client = kube::Client::try_from(config).expect("a client for the budget watch");
                let pods: kube::Api<Pod> = kube::Api::all(client);
                // The lists come from the API server's watch cache (resourceVersion 0): at
                // 30,000 pods a list read through to etcd took over a minute on a busy machine.
                // A list a moment old loses nothing, since the watch goes on from its version.
                let mut events = watcher(pods, watcher::Config::default().any_semantic())
                    .default_backoff()
                    .boxed();
                let mut listing: Vec<Value> = Vec::new();
                let mut ready = Some(ready_tx);
                loop {
                    let event = tokio::select! {
                        _ = stopped.cancelled() => break,
                        event = events.next() => event,
                    };
                    let json = |p: &Pod| serde_json::to_value(p).unwrap_or(Value::Null);
                    let mut judge = sink.lock().expect("judge lock");
                    match event {
                        Some(Ok(watcher::Event::Init)) => listing.clear(),
                        Some(Ok(watcher::Event::InitApply(p))) => listing.push(json(&p)),
                        Some(Ok(watcher::Event::InitDone)) => {
                            judge.resync(&listing);
                            listing.clear();
                            match ready.take() {
                                Some(first) => drop(first.send(())),
                                None => judge.relists += 1,
                            }
                        }
                        Some(Ok(watcher::Event::Apply(p))) => judge
                            .apply(&serde_json::json!({"type": "MODIFIED", "object": json(&p)})),
                        Some(Ok(watcher::Event::Delete(p))) => {
                            judge.apply(&serde_json::json!({"type": "DELETED", "object": json(&p)}))
                        }
                        Some(Err(_)) => judge.watch_errors += 1,
                        None => break,
                    }
                }
            });
        });
        // The first list is in before the test goes on, so that nothing it does is missed.
        ready_rx
            .recv_timeout(std::time::Duration::from_secs(180))
            .expect("the budget watch listed the pods within three minutes");
        BudgetWatch {
            source: Source::Watcher(stop),
            reader: Some(reader),
            judge,
        }
    }

    fn stop(&mut self) {
        match &mut self.source {
            Source::Kubectl(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Source::Watcher(stop) => stop.cancel(),
        }
    }

    /// Watch events replayed so far.
    pub fn events(&self) -> usize {
        self.judge.lock().expect("judge lock").events
    }

    /// Stops the watch and returns what it saw.
    pub fn finish(mut self) -> BudgetVerdict {
        self.stop();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let judge = self.judge.lock().expect("judge lock");
        let key = |b: &WatchedBudget| format!("{}/{}", b.namespace, b.name);
        BudgetVerdict {
            violations: judge.violations.clone(),
            never_armed: judge
                .budgets
                .iter()
                .zip(&judge.armed)
                .filter(|(_, armed)| !**armed)
                .map(|(b, _)| key(b))
                .collect(),
            lowest: judge
                .budgets
                .iter()
                .zip(&judge.lowest)
                .filter_map(|(b, l)| l.map(|l| (key(b), l)))
                .collect(),
            events: judge.events,
            relists: judge.relists,
            watch_errors: judge.watch_errors,
        }
    }
}

impl Drop for BudgetWatch {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, app: &str, ready: bool, deleting: bool) -> Value {
        json!({
            "metadata": {"uid": uid, "name": uid, "namespace": "shop", "labels": {"app": app},
                         "deletionTimestamp": if deleting { json!("2026-01-01T00:00:00Z") } else { Value::Null }},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        })
    }

    fn judge(min: usize) -> Judge {
        Judge::new(vec![WatchedBudget::app("shop", "web", min)])
    }

    #[test]
    fn a_budget_is_judged_only_once_met_and_a_dip_below_is_a_violation() {
        let mut j = judge(2);
        // Start-up: below the minimum, not armed yet.
        j.apply(&json!({"type": "ADDED", "object": pod("a", "web", false, false)}));
        j.apply(&json!({"type": "ADDED", "object": pod("b", "web", true, false)}));
        j.apply(&json!({"type": "ADDED", "object": pod("x", "other", true, false)}));
        assert!(j.violations.is_empty());
        assert!(!j.armed[0]);
        j.apply(&json!({"type": "MODIFIED", "object": pod("a", "web", true, false)}));
        assert!(j.armed[0]);
        j.apply(&json!({"type": "ADDED", "object": pod("c", "web", true, false)}));
        // One evicted (terminating): 2 left, allowed.
        j.apply(&json!({"type": "MODIFIED", "object": pod("a", "web", true, true)}));
        assert!(j.violations.is_empty());
        // A second one goes before a replacement is Ready: violation.
        j.apply(&json!({"type": "DELETED", "object": pod("b", "web", true, false)}));
        assert_eq!(j.violations.len(), 1, "{:?}", j.violations);
        assert!(j.violations[0].contains("shop/web: 1 healthy < 2"));
        assert_eq!(j.lowest[0], Some(1));
    }
}
