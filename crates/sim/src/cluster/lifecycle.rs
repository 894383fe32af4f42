//! One step of the simulated control plane and kubelets, run on every tick: nodes finish
//! booting, cordoned nodes get the unschedulable taint, terminating pods go once they have
//! exited, started pods turn Ready, orphaned pods are collected, workload controllers and the
//! scheduler run, the autoscaler acts, and budgets are recomputed. A step with no change since
//! the last one and no timer due does nothing, so an idle 150,000-pod cluster costs nothing.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::objects::{
    RequestsMemo, Resources, SHUTDOWN_ANNOTATION, STARTUP_ANNOTATION, WORK_KUBELET, WORK_PENDING,
    annotation_duration, bind_and_start, mark_node_ready, mark_pod_ready, node_name, node_ready,
    node_unschedulable, pod_ready, set_pod_condition, terminal, terminating,
};
use super::pods::Removal;
use super::scheduler::{NodeSlot, Placement, Preemption, Scheduler};
use super::{Cluster, add_secs, secs_between, worker};
use crate::api::collection::DeleteOptions;

const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

fn has_unschedulable_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == UNSCHEDULABLE_TAINT))
}

/// How long each controller took in one step, for [`Cluster::last_step`].
struct PhaseTimer {
    at: std::time::Instant,
    laps: Vec<(&'static str, std::time::Duration)>,
}

impl Default for PhaseTimer {
    fn default() -> Self {
        PhaseTimer {
            at: std::time::Instant::now(),
            laps: Vec::with_capacity(12),
        }
    }
}

impl PhaseTimer {
    fn lap(&mut self, phase: &'static str) {
        let now = std::time::Instant::now();
        self.laps.push((phase, now - self.at));
        self.at = now;
    }
}

fn earliest(a: Option<Timestamp>, b: Timestamp) -> Option<Timestamp> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl Cluster {
    /// Runs the control plane once. `settle` makes every timer fire at once (used to build a
    /// steady-state cluster before serving).
    pub fn step(&mut self, now: Timestamp, settle: bool) {
        if let Some(last) = self.last_tick {
            let dt = secs_between(last, now).max(0.0);
            // Placeholders (priority below 0) wait for room on purpose; workloads' pods count.
            let waiting = self
                .unschedulable_since
                .keys()
                .filter(|(ns, name)| {
                    self.pods
                        .get(ns, name)
                        .is_some_and(|p| super::priority::counts_as_waiting(p))
                })
                .count();
            self.stats.unschedulable_pod_seconds += dt * waiting as f64;
        }
        let prev_step = self.last_tick.replace(now).unwrap_or(now);
        let changed = self.rev.current() != self.reconciled_rv;
        let due = self.next_timed_transition.is_some_and(|t| t <= now);
        if !changed && !due && !settle {
            return;
        }
        let before = self.rev.current();
        let mut next = None;
        let mut timer = PhaseTimer::default();
        next = self.nodes_lifecycle(now, settle, next);
        timer.lap("nodes");
        self.collect_orphans();
        timer.lap("orphans");
        next = self.pods_lifecycle(now, settle, next);
        timer.lap("kubelets");
        self.reconcile_deployments(now);
        timer.lap("deployments");
        self.reconcile_replicasets(now);
        timer.lap("replicasets");
        self.reconcile_statefulsets(now);
        timer.lap("statefulsets");
        self.reconcile_daemonsets(now);
        timer.lap("daemonsets");
        self.reconcile_mirror_pods(now);
        timer.lap("mirror pods");
        next = self.schedule(now, prev_step, settle, next);
        timer.lap("scheduler");
        next = self.autoscale(now, next);
        timer.lap("autoscaler");
        if let Some(wake) = self.sync_budgets(now, prev_step, settle) {
            next = earliest(next, wake);
        }
        timer.lap("budgets");
        self.last_step = timer.laps;
        // Budgets hold evicted pods out of the healthy count for a while; wake up to expire them.
        if let Some(t) = self.next_disrupted_timeout() {
            next = earliest(next, t);
        }
        // A step that wrote anything runs again next tick: its own writes may enable more work
        // (a launched node to boot, a created pod to schedule). Quiet steps converge.
        self.reconciled_rv = if self.rev.current() == before {
            before
        } else {
            0
        };
        self.next_timed_transition = next;
    }

    fn nodes_lifecycle(
        &mut self,
        now: Timestamp,
        settle: bool,
        mut next: Option<Timestamp>,
    ) -> Option<Timestamp> {
        // Only nodes with something to change are copied: booting ones, and those whose cordon
        // and unschedulable taint disagree.
        let due: Vec<Arc<Node>> = self
            .nodes
            .values()
            .filter(|n| !node_ready(n) || node_unschedulable(n) != has_unschedulable_taint(n))
            .cloned()
            .collect();
        for node in due {
            let mut n = (*node).clone();
            let mut dirty = false;
            if !node_ready(&n) {
                let created = n
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0)
                    .unwrap_or(now);
                let ready_at = add_secs(created, self.timing.node_startup.as_secs_f64());
                if settle || ready_at <= now {
                    mark_node_ready(&mut n, now);
                    dirty = true;
                } else {
                    next = earliest(next, ready_at);
                }
            }
            // The node lifecycle controller mirrors spec.unschedulable as a taint.
            let cordoned = node_unschedulable(&n);
            let has_taint = has_unschedulable_taint(&n);
            let spec = n.spec.get_or_insert_with(Default::default);
            if cordoned && !has_taint {
                spec.taints.get_or_insert_with(Vec::new).push(Taint {
                    key: UNSCHEDULABLE_TAINT.into(),
                    value: None,
                    effect: "NoSchedule".into(),
                    time_added: Some(Time(now)),
                });
                dirty = true;
            } else if !cordoned && has_taint {
                if let Some(ts) = spec.taints.as_mut() {
                    ts.retain(|t| t.key != UNSCHEDULABLE_TAINT);
                    if ts.is_empty() {
                        spec.taints = None;
                    }
                }
                dirty = true;
            }
            if dirty {
                self.nodes.put(n);
            }
        }
        next
    }

    /// Pods bound to nodes that no longer exist are deleted, as the pod GC does.
    fn collect_orphans(&mut self) {
        let by_node = self.pod_index.node;
        let mut orphans: Vec<(String, String)> = self
            .pods
            .index_values(by_node)
            .filter(|n| self.nodes.get("", n).is_none())
            .flat_map(|n| self.pods.indexed(by_node, n).map(|(k, _)| k.clone()))
            .collect();
        // In key order, as a scan of every pod would find them.
        orphans.sort();
        for (ns, name) in orphans {
            self.pods.remove(&ns, &name);
        }
    }

    fn pods_lifecycle(
        &mut self,
        now: Timestamp,
        settle: bool,
        mut next: Option<Timestamp>,
    ) -> Option<Timestamp> {
        let default_startup = self.timing.pod_startup.as_secs_f64();
        let default_shutdown = self.timing.pod_shutdown.as_secs_f64();
        let mut remove = Vec::new();
        let mut ready = Vec::new();
        // Pods created with spec.nodeName already set never went through the scheduler: the
        // node's kubelet admits them as it would any pod bound to it.
        let mut admit = Vec::new();
        // Settled pods (Ready, or finished) have nothing due; the index holds the others.
        for (key, p) in self.pods.indexed(self.pod_index.work, WORK_KUBELET) {
            if terminating(p) {
                let deadline = p
                    .metadata
                    .deletion_timestamp
                    .as_ref()
                    .map(|t| t.0)
                    .unwrap_or(now);
                let grace = p.metadata.deletion_grace_period_seconds.unwrap_or(0) as f64;
                let requested = add_secs(deadline, -grace);
                let shutdown = annotation_duration(&p.metadata, SHUTDOWN_ANNOTATION)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(default_shutdown)
                    .min(grace);
                let gone_at = add_secs(requested, shutdown);
                if settle || gone_at <= now {
                    remove.push(key.clone());
                } else {
                    next = earliest(next, gone_at);
                }
            } else if node_name(p).is_some()
                && !terminal(p)
                && p.status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .is_none()
            {
                admit.push(key.clone());
            } else if node_name(p).is_some() && !pod_ready(p) && !terminal(p) {
                let started = p
                    .status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .map(|t| t.0)
                    .unwrap_or(now);
                let startup = annotation_duration(&p.metadata, STARTUP_ANNOTATION)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(default_startup);
                let ready_at = add_secs(started, startup);
                if settle || ready_at <= now {
                    ready.push(key.clone());
                } else {
                    next = earliest(next, ready_at);
                }
            }
        }
        for (ns, name) in remove {
            self.pods.remove(&ns, &name);
        }
        for (ns, name) in admit {
            let Some(p) = self.pods.get(&ns, &name) else {
                continue;
            };
            let node = node_name(p).and_then(|n| self.nodes.get("", n)).cloned();
            if let Some(node) = node {
                let mut p = (**p).clone();
                bind_and_start(&mut p, &node, now);
                self.pods.put(p);
            }
        }
        for (ns, name) in ready {
            if let Some(p) = self.pods.get(&ns, &name) {
                let mut p = (**p).clone();
                mark_pod_ready(&mut p, true, now);
                self.pods.put(p);
            }
        }
        next
    }

    /// Binds every pending pod that fits somewhere, as fast as `timing.bindTime` lets the
    /// scheduler (a pod a client created since the last step is taken from its creation, one a
    /// controller created at this step from halfway since the last, one found earlier from
    /// that step); marks the rest Unschedulable with the scheduler's reason.
    /// Returns `next`, or the step at which the scheduler gets to the pods it had no time for.
    fn schedule(
        &mut self,
        now: Timestamp,
        prev_step: Timestamp,
        settle: bool,
        mut next: Option<Timestamp>,
    ) -> Option<Timestamp> {
        let cost = if settle {
            Duration::ZERO
        } else {
            self.timing.bind_time
        };
        let pending: Vec<Arc<Pod>> = {
            let mut v: Vec<Arc<Pod>> = self
                .pods
                .indexed(self.pod_index.work, WORK_PENDING)
                .map(|(_, p)| p)
                .filter(|p| node_name(p).is_none() && !terminating(p) && !terminal(p))
                .cloned()
                .collect();
            // The scheduling queue: higher priority first, then oldest.
            v.sort_by_key(|p| {
                (
                    std::cmp::Reverse(super::priority::priority(p)),
                    p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                )
            });
            v
        };
        self.unschedulable_since.retain(|k, _| {
            self.pods
                .get(&k.0, &k.1)
                .is_some_and(|p| node_name(p).is_none() && !terminating(p))
        });
        if pending.is_empty() {
            return next;
        }
        let mut slots: Vec<NodeSlot> = self
            .nodes
            .values()
            .map(|n| NodeSlot::from_node(n))
            .collect();
        let placed: Vec<&Pod> = self
            .pods
            .values()
            .map(|p| p.as_ref())
            .filter(|p| node_name(p).is_some() && !terminal(p))
            .collect();
        // Each node's running pods and their requests, recomputed only for nodes whose pods
        // were written since they were last summed.
        let by_node = self.pod_index.node;
        let mut requests = RequestsMemo::default();
        let current = self.rev.current();
        for slot in &mut slots {
            let written = self.pods.index_written(by_node, &slot.name);
            let cached = self.node_usage.get(&slot.name).copied();
            let (used, count) = match cached {
                Some((at, used, count)) if written.is_none_or(|w| w <= at) => (used, count),
                _ => {
                    let mut used = Resources::default();
                    let mut count = 0;
                    for (_, p) in self.pods.indexed(by_node, &slot.name) {
                        if !terminal(p) {
                            used.add(requests.of(p));
                            count += 1;
                        }
                    }
                    self.node_usage
                        .insert(slot.name.clone(), (current, used, count));
                    (used, count)
                }
            };
            slot.free = slot.free.minus(&used);
            slot.free_pods -= count;
        }

        let mut decisions = Vec::new();
        let mut preemptions = Vec::new();
        {
            let mut sched = Scheduler::new(slots, &placed);
            for pod in &pending {
                let placement = sched.place(pod);
                // A pod already nominated waits for its victims to go rather than pick more.
                if matches!(placement, Placement::Unschedulable(_))
                    && super::priority::nominated_node(pod).is_none()
                    && let Some(p) = sched.preemption(pod)
                {
                    sched.reserve(&p, pod);
                    preemptions.push((pod.clone(), p));
                }
                decisions.push((pod.clone(), placement));
            }
        }
        for (pod, decision) in decisions {
            let key = (
                pod.metadata.namespace.clone().unwrap_or_default(),
                pod.metadata.name.clone().unwrap_or_default(),
            );
            let mut p = (*pod).clone();
            match decision {
                Placement::Bind(node) => {
                    let Some(n) = self.nodes.get("", &node).cloned() else {
                        continue;
                    };
                    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
                    let ready = match created {
                        // Made by a controller at this step (a replacement), for what happened
                        // since the last one: a real scheduler would have had it about as that
                        // happened, on average halfway between the steps.
                        Some(c) if c >= now => worker::midway(prev_step, now),
                        Some(c) => c.max(prev_step),
                        None => prev_step,
                    };
                    if !self.bind_worker.take(cost, ready, now, self.timing.tick) {
                        let wake = self.bind_worker.wake_at(cost, ready, self.timing.tick);
                        next = earliest(next, wake);
                        continue;
                    }
                    bind_and_start(&mut p, &n, now);
                    self.unschedulable_since.remove(&key);
                    self.pods.put(p);
                }
                Placement::Unschedulable(why) => {
                    self.unschedulable_since.entry(key).or_insert(now);
                    let already = p
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
                        .is_some_and(|c| {
                            c.status == "False" && c.message.as_deref() == Some(why.as_str())
                        });
                    if !already {
                        set_pod_condition(&mut p, "PodScheduled", false, now);
                        if let Some(c) = p
                            .status
                            .as_mut()
                            .and_then(|s| s.conditions.as_mut())
                            .and_then(|cs| cs.iter_mut().find(|c| c.type_ == "PodScheduled"))
                        {
                            c.reason = Some("Unschedulable".into());
                            c.message = Some(why);
                        }
                        self.pods.put(p);
                    }
                }
            }
        }
        for (pod, preemption) in preemptions {
            self.preempt(&pod, preemption, now);
        }
        next
    }

    /// Removes the victims (each with its own grace period) and nominates the node for the
    /// pod, which is bound there once the room is free.
    fn preempt(&mut self, pod: &Pod, preemption: Preemption, now: Timestamp) {
        let (ns, name) = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        tracing::debug!(pod = %format!("{ns}/{name}"), node = %preemption.node, victims = ?preemption.victims, "preempting lower-priority pods");
        for (vns, vname) in &preemption.victims {
            let _ = self.delete_pod(
                vns,
                vname,
                &DeleteOptions::default(),
                Removal::Preempted,
                now,
            );
        }
        let Some(current) = self.pods.get(&ns, &name) else {
            return;
        };
        let mut p = (**current).clone();
        // Victims without a grace period are gone at once, and the real scheduler binds the
        // pod in its next cycle, milliseconds later: bind now. Otherwise the pod waits,
        // nominated, until the victims have terminated.
        let gone = preemption
            .victims
            .iter()
            .all(|(vns, vname)| self.pods.get(vns, vname).is_none());
        if gone && let Some(node) = self.nodes.get("", &preemption.node).cloned() {
            bind_and_start(&mut p, &node, now);
            self.unschedulable_since.remove(&(ns, name));
        } else {
            p.status
                .get_or_insert_with(Default::default)
                .nominated_node_name = Some(preemption.node);
        }
        self.pods.put(p);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use jiff::Timestamp;
    use serde_json::json;

    use crate::cluster::objects::node_name;
    use crate::scenario::Scenario;

    /// Evicts the 10 pods of a Deployment at once, then steps every tick: how many of their
    /// replacements each step binds.
    fn binds_per_step(bind_time: &str) -> Vec<usize> {
        let yaml = format!(
            r#"
timing: {{tick: 100ms, podStartup: 1s, podShutdown: 0s, bindTime: {bind_time}}}
nodeGroups: [{{name: g, size: 2, template: {{cpu: "16", memory: 64Gi}}}}]
workloads: [{{kind: Deployment, name: web, namespace: shop, replicas: 10}}]
"#
        );
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let mut c = crate::seed::build(&Scenario::from_yaml(&yaml, "t").unwrap(), t0);
        let now = t0 + Duration::from_secs(1);
        c.step(now, false);
        let old: Vec<String> = c
            .pods
            .range(Some("shop"), None)
            .map(|(_, p)| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(old.len(), 10);
        for name in &old {
            c.evict_pod("shop", name, &json!({}), now).unwrap();
        }
        let bound = |c: &crate::cluster::Cluster| {
            c.pods
                .range(Some("shop"), None)
                .filter(|(k, p)| !old.contains(&k.1) && node_name(p).is_some())
                .count()
        };
        let mut before = 0;
        (1..=5)
            .map(|k| {
                c.step(now + Duration::from_millis(100 * k), false);
                let after = bound(&c);
                let n = after - before;
                before = after;
                n
            })
            .collect()
    }

    #[test]
    fn with_a_bind_time_a_burst_of_replacements_is_bound_at_the_schedulers_pace() {
        // 25 ms a pod: each step binds what the scheduler finishes within half a tick of it,
        // the replacements taken from halfway since the step before the one that made them.
        assert_eq!(binds_per_step("25ms"), vec![4, 4, 2, 0, 0]);
    }

    #[test]
    fn without_a_bind_time_every_replacement_is_bound_at_the_step_that_creates_it() {
        assert_eq!(binds_per_step("0s"), vec![10, 0, 0, 0, 0]);
    }
}
