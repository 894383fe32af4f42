//! The disruption controller: keeps each PodDisruptionBudget's status (healthy pods, expected
//! pods, disruptions allowed, the pods being disrupted) in step with its pods.
//!
//! Like kube-controller-manager's, it queues the budgets whose inputs changed, each once, in
//! the order they changed, and syncs them one after another with one worker. With
//! `timing.budgetSyncTime` each sync that writes a changed status takes that long
//! ([`crate::cluster::worker::SerialWorker`]), so when many budgets change at once a budget
//! counts its Ready pod only after those queued before it, as on a real control plane under a
//! rotation's load. A sync that finds nothing to write costs nothing: the real controller reads
//! its caches and spends its time on the status write. With no sync time every queued budget
//! is synced at the step that queued it.

// A file beside this one (not under it), so that mod.rs names it without naming this file.
#[path = "disruption_memory.rs"]
pub(super) mod memory;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};

use super::pdb::{self, DISRUPTED_POD_TIMEOUT_SECS, covers, selector};
use super::worker::midway;
use super::{Cluster, add_secs};
use crate::store::{Change, ChangeType, ObjKey, SimObject, key_of};

impl Cluster {
    /// Queues the budgets whose inputs changed since the last run, syncs those the worker gets
    /// to by `now`, and writes the statuses that changed. Returns when to run again for the
    /// rest of the queue.
    /// `settle` (building a steady cluster) syncs every queued budget at once.
    pub(super) fn sync_budgets(
        &mut self,
        now: Timestamp,
        last_step: Timestamp,
        settle: bool,
    ) -> Option<Timestamp> {
        let since = self.disruption.last_run;
        // What changed them happened since the last step, on average halfway.
        let changed_at = midway(last_step, now);
        for key in self.budgets_to_sync(since, now) {
            self.disruption.queue.push(key, changed_at);
        }
        let tick = self.timing.tick;
        let cost = if settle {
            Duration::ZERO
        } else {
            self.timing.budget_sync_time
        };
        // The queue's budgets in order, each with its status as a sync now would compute it.
        let queued: Vec<Option<Arc<PodDisruptionBudget>>> = self
            .disruption
            .queue
            .keys()
            .map(|key| self.pdbs.get_key(key).cloned())
            .collect();
        let present: Vec<Arc<PodDisruptionBudget>> = queued.iter().flatten().cloned().collect();
        let mut statuses = self.statuses_of(&present, now).into_iter();
        let mut writes = Vec::new();
        let mut wake = None;
        for budget in queued {
            let Some(at) = self.disruption.queue.front() else {
                break;
            };
            // The real controller's time goes to its status writes: a sync that finds the
            // status unchanged (or the budget gone) writes nothing and costs next to nothing.
            let write = budget.and_then(|b| {
                let status = statuses.next()?;
                (b.status.as_ref() != Some(&status)).then_some((b, status))
            });
            if write.is_some() && !self.disruption.worker.take(cost, at, now, tick) {
                wake = Some(self.disruption.worker.wake_at(cost, at, tick));
                break;
            }
            self.disruption.queue.pop();
            writes.extend(write);
        }
        for (budget, status) in writes {
            self.pdbs.modify(&budget, |b| b.status = Some(status));
        }
        // After the writes: the controller's own status writes are not a change to react to.
        self.disruption.last_run = self.rev.current();
        wake
    }

    /// The budgets whose status may have changed since resourceVersion `since`.
    ///
    /// A budget's status is a function of the budget, its pods and their controllers' scale,
    /// and of the time only through its disrupted pods. With no sync time, every budget of a
    /// namespace with such a write is taken (cheap to find at scale, and a budget synced for
    /// nothing writes nothing). With a sync time a needless sync would hold the others up, so
    /// only the budgets the real controller reacts to are taken: those written, those covering
    /// a pod written (before or after the write), those of a namespace whose workloads changed
    /// scale, and those with a disrupted pod past its timeout.
    fn budgets_to_sync(&self, since: u64, now: Timestamp) -> Vec<ObjKey> {
        let budget_key = |b: &Arc<PodDisruptionBudget>| key_of(b.as_ref());
        if self.timing.budget_sync_time.is_zero() {
            return self
                .pdbs
                .values()
                .filter(|b| {
                    let ns = b.metadata.namespace.as_deref().unwrap_or("");
                    has_disrupted(b, None)
                        || self.pdbs.written_since(ns, since)
                        || self.pods.written_since(ns, since)
                        || self.replicasets.written_since(ns, since)
                        || self.deployments.written_since(ns, since)
                        || self.statefulsets.written_since(ns, since)
                })
                .map(budget_key)
                .collect();
        }
        let replicas_of_rs = |r: &ReplicaSet| r.spec.as_ref().and_then(|s| s.replicas);
        let replicas_of_deploy = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas);
        let replicas_of_sts = |s: &StatefulSet| s.spec.as_ref().and_then(|s| s.replicas);
        let (Ok(budget_changes), Ok(pod_changes), Some(rs), Some(deploy), Some(sts)) = (
            self.pdbs.changes_since(since),
            self.pods.changes_since(since),
            scale_changes(self.replicasets.changes_since(since), replicas_of_rs),
            scale_changes(self.deployments.changes_since(since), replicas_of_deploy),
            scale_changes(self.statefulsets.changes_since(since), replicas_of_sts),
        ) else {
            // A log was trimmed past the last run: what changed is unknown, take every budget.
            return self.pdbs.values().map(budget_key).collect();
        };
        // In the order they were written, as the real controller's queue has them.
        let mut written: Vec<(u64, ObjKey)> = budget_changes
            .filter(|c| c.change != ChangeType::Deleted)
            .map(|c| (c.rv, key_of(c.obj.as_ref())))
            .collect();
        let mut selectors = HashMap::new();
        for change in pod_changes {
            let ns = change.obj.metadata.namespace.as_deref().unwrap_or("");
            for (key, b) in self.pdbs.range(Some(ns), None) {
                let sel = selectors.entry(key.clone()).or_insert_with(|| selector(b));
                let before = change
                    .prev
                    .as_deref()
                    .is_some_and(|p| covers(b, sel.as_ref(), p));
                if before || covers(b, sel.as_ref(), &change.obj) {
                    written.push((change.rv, key.clone()));
                }
            }
        }
        written.sort_by_key(|(rv, _)| *rv);
        let scaled: HashSet<String> = rs.into_iter().chain(deploy).chain(sts).collect();
        let timed = self
            .pdbs
            .iter()
            .filter(|(key, b)| scaled.contains(&key.0) || has_disrupted(b, Some(now)))
            .map(|(key, _)| key.clone());
        let mut seen = HashSet::new();
        written
            .into_iter()
            .map(|(_, key)| key)
            .chain(timed)
            .filter(|key| seen.insert(key.clone()))
            .collect()
    }

    /// The status the disruption controller would compute for each of `budgets` now (none
    /// reads another budget), in the same order.
    fn statuses_of(
        &self,
        budgets: &[Arc<PodDisruptionBudget>],
        now: Timestamp,
    ) -> Vec<PodDisruptionBudgetStatus> {
        let mut by_label: HashMap<&str, PodsByLabel<'_>> = HashMap::new();
        let mut statuses = Vec::with_capacity(budgets.len());
        for budget in budgets {
            let ns = budget.metadata.namespace.as_deref().unwrap_or("");
            let sel = selector(budget);
            let pods: Vec<&Pod> = match first_match_label(budget) {
                // Every pod the budget covers carries each of its matchLabels: look those up.
                Some((k, v)) => by_label
                    .entry(ns)
                    .or_insert_with(|| PodsByLabel::of(self.pods.range(Some(ns), None)))
                    .get(k, v)
                    .iter()
                    .copied()
                    .filter(|p| covers(budget, sel.as_ref(), p))
                    .collect(),
                None => self.pods_covered_by(budget),
            };
            let scale = |p: &Pod| self.scale_of_pod(p);
            statuses.push(pdb::compute_status(budget, &pods, &scale, now));
        }
        statuses
    }

    /// When the next disrupted pod of any budget times out (the controller then counts it
    /// again if it is still healthy).
    pub(super) fn next_disrupted_timeout(&self) -> Option<Timestamp> {
        self.pdbs
            .values()
            .flat_map(|b| disrupted_times(b))
            .map(|t| add_secs(t, DISRUPTED_POD_TIMEOUT_SECS as f64 + 0.5))
            .min()
    }
}

fn disrupted_times(b: &PodDisruptionBudget) -> impl Iterator<Item = Timestamp> + '_ {
    b.status
        .iter()
        .flat_map(|s| s.disrupted_pods.iter().flatten())
        .map(|(_, t)| t.0)
}

/// Whether the budget has a disrupted pod (past its timeout at `now`, if given).
fn has_disrupted(b: &PodDisruptionBudget, timed_out_at: Option<Timestamp>) -> bool {
    disrupted_times(b).any(|t| timed_out_at.is_none_or(|now| pdb::disruption_timed_out(t, now)))
}

/// The namespaces of workloads whose replica count was set or changed; `None` if the log was
/// trimmed past `since`.
fn scale_changes<'a, K: SimObject + 'a, E>(
    changes: Result<impl Iterator<Item = &'a Arc<Change<K>>>, E>,
    replicas: impl Fn(&K) -> Option<i32>,
) -> Option<Vec<String>> {
    let changes = changes.ok()?;
    Some(
        changes
            .filter(|c| c.prev.as_deref().map(&replicas) != Some(replicas(&c.obj)))
            .map(|c| c.obj.metadata().namespace.clone().unwrap_or_default())
            .collect(),
    )
}

/// One `matchLabels` pair of a budget's selector, if it has any.
fn first_match_label(budget: &PodDisruptionBudget) -> Option<(&str, &str)> {
    budget
        .spec
        .as_ref()?
        .selector
        .as_ref()?
        .match_labels
        .as_ref()?
        .iter()
        .next()
        .map(|(k, v)| (k.as_str(), v.as_str()))
}

/// The pods of one namespace by each of their labels (key and value), in key order.
struct PodsByLabel<'a>(HashMap<(&'a str, &'a str), Vec<&'a Pod>>);

impl<'a> PodsByLabel<'a> {
    fn of(pods: impl Iterator<Item = (&'a ObjKey, &'a Arc<Pod>)>) -> Self {
        let mut m: HashMap<(&str, &str), Vec<&Pod>> = HashMap::new();
        for (_, p) in pods {
            for (k, v) in p.metadata.labels.iter().flatten() {
                m.entry((k.as_str(), v.as_str()))
                    .or_default()
                    .push(p.as_ref());
            }
        }
        PodsByLabel(m)
    }

    fn get(&self, key: &'a str, value: &'a str) -> &[&'a Pod] {
        self.0.get(&(key, value)).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use serde_json::json;

    use crate::cluster::Cluster;
    use crate::scenario::Scenario;

    /// Six Deployments of two pods, each under a budget allowing one disruption.
    fn six_budgets(sync: &str) -> (Cluster, Timestamp) {
        let yaml = format!(
            r#"
timing: {{tick: 100ms, podStartup: 1s, podShutdown: 0s, budgetSyncTime: {sync}}}
nodeGroups: [{{name: g, size: 4, template: {{cpu: "16", memory: 64Gi}}}}]
workloads:
  - {{kind: Deployment, name: web, namespace: shop, replicas: 2, copies: 6, pdb: {{maxUnavailable: 1}}}}
"#
        );
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let s = Scenario::from_yaml(&yaml, "t").unwrap();
        (crate::seed::build(&s, t0), t0)
    }

    fn allowing(c: &Cluster) -> usize {
        c.pdbs
            .values()
            .filter(|b| b.status.as_ref().is_some_and(|s| s.disruptions_allowed > 0))
            .count()
    }

    /// Evicts one pod of each budget at once, then steps every tick for 3 s: how many budgets
    /// allow a disruption after each step.
    fn after_one_eviction_each(sync: &str) -> Vec<usize> {
        let (mut c, t0) = six_budgets(sync);
        assert_eq!(allowing(&c), 6);
        let now = t0 + Duration::from_secs(1);
        c.step(now, false);
        for i in 0..6 {
            let pod = c
                .pods
                .range(Some("shop"), None)
                .map(|(_, p)| p.metadata.name.clone().unwrap())
                .find(|n| n.starts_with(&format!("web-{i}-")))
                .unwrap();
            c.evict_pod("shop", &pod, &json!({}), now).unwrap();
        }
        assert_eq!(
            allowing(&c),
            0,
            "each eviction takes its budget's one disruption"
        );
        (1..=30)
            .map(|k| {
                c.step(now + Duration::from_millis(100 * k), false);
                allowing(&c)
            })
            .collect()
    }

    /// The first step after which a budget allows a disruption again.
    fn first_allowing(steps: &[usize]) -> usize {
        steps
            .iter()
            .position(|n| *n > 0)
            .expect("a budget allows again")
    }

    #[test]
    fn with_a_sync_time_budgets_count_their_ready_pods_one_after_another_in_queue_order() {
        let steps = after_one_eviction_each("100ms");
        // The replacements turn Ready at one step; with a worker taking a tick per budget, the
        // six budgets allow again over six steps, one a step, the first at that step (its sync
        // counted from halfway since the step before).
        let first = first_allowing(&steps);
        assert_eq!(
            first,
            first_allowing(&after_one_eviction_each("0s")),
            "after each step: {steps:?}"
        );
        assert_eq!(
            steps[first..first + 6],
            [1, 2, 3, 4, 5, 6],
            "after each step: {steps:?}"
        );
    }

    #[test]
    fn without_a_sync_time_every_budget_counts_its_ready_pod_at_once() {
        let steps = after_one_eviction_each("0s");
        let first = first_allowing(&steps);
        assert_eq!(steps[first], 6, "after each step: {steps:?}");
    }

    #[test]
    fn a_sync_time_under_half_a_tick_counts_a_few_ready_pods_at_the_step_that_reports_them() {
        let at_once = first_allowing(&after_one_eviction_each("0s"));
        // Six budgets at 5 ms each are done 30 ms into the step: all count at once.
        let steps = after_one_eviction_each("5ms");
        assert_eq!(
            first_allowing(&steps),
            at_once,
            "after each step: {steps:?}"
        );
        assert_eq!(steps[at_once], 6, "after each step: {steps:?}");
    }

    /// [`six_budgets`] with a 100 ms sync, stepped once a second in: the cluster, that time,
    /// and the version its budgets were last synced at.
    fn six_budgets_synced() -> (Cluster, Timestamp, u64) {
        let (mut c, t0) = six_budgets("100ms");
        let now = t0 + Duration::from_secs(1);
        c.step(now, false);
        let since = c.disruption.last_run;
        (c, now, since)
    }

    /// Writes an annotation on a pod of Deployment `workload`: a change to no budget's status.
    fn touch_a_pod_of(c: &mut Cluster, workload: &str) {
        let prefix = format!("{workload}-");
        let mut touched = c
            .pods
            .range(Some("shop"), None)
            .map(|(_, p)| (**p).clone())
            .find(|p| p.metadata.name.as_deref().unwrap().starts_with(&prefix))
            .unwrap();
        touched
            .metadata
            .annotations
            .get_or_insert_default()
            .insert("touched".into(), "yes".into());
        c.pods.put(touched);
    }

    #[test]
    fn a_pod_change_queues_only_the_budgets_covering_it() {
        let (mut c, now, since) = six_budgets_synced();
        touch_a_pod_of(&mut c, "web-3");
        let keys = c.budgets_to_sync(since, now);
        assert_eq!(keys, vec![("shop".to_string(), "web-3".to_string())]);
    }

    #[test]
    fn a_sync_that_finds_nothing_to_write_holds_no_budget_up() {
        let (mut c, now, _) = six_budgets_synced();
        // Five budgets queued first by pod writes that change none of their statuses...
        for i in 0..5 {
            touch_a_pod_of(&mut c, &format!("web-{i}"));
        }
        // ...then the sixth made to allow no disruption.
        let mut strict = (**c.pdbs.get("shop", "web-5").unwrap()).clone();
        strict.spec.as_mut().unwrap().max_unavailable = Some(IntOrString::Int(0));
        c.pdbs.put(strict);
        let allowed = |c: &Cluster| {
            let b = c.pdbs.get("shop", "web-5").unwrap();
            b.status.as_ref().unwrap().disruptions_allowed
        };
        assert_eq!(allowed(&c), 1);
        // A 100 ms sync counted from halfway since the last step is written at the step that
        // queued it. Behind five syncs of 100 ms it would wait five steps more; they write
        // nothing, so it does not.
        c.step(now + Duration::from_millis(100), false);
        assert_eq!(allowed(&c), 0);
    }

    #[test]
    fn a_trimmed_workload_log_queues_every_budget() {
        let (mut c, now, since) = six_budgets_synced();
        assert!(c.budgets_to_sync(since, now).is_empty(), "nothing changed");
        // A ReplicaSet scaled, then the ReplicaSets' log trimmed: the change is lost, and it
        // could change any budget's expected count.
        let rs = c.replicasets.values().next().unwrap().clone();
        let mut scaled = (*rs).clone();
        scaled.spec.as_mut().unwrap().replicas = Some(3);
        c.replicasets.put(scaled);
        c.replicasets.compact_all();
        assert_eq!(c.budgets_to_sync(since, now).len(), 6);
    }
}
