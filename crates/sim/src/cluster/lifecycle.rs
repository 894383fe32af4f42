//! One step of the simulated control plane and kubelets, run on every tick: nodes finish
//! booting, cordoned nodes get the unschedulable taint, terminating pods go once they have
//! exited, started pods turn Ready, orphaned pods are collected, workload controllers and the
//! scheduler run, the autoscaler acts, and budgets are recomputed. A step with no change since
//! the last one and no timer due does nothing, so an idle 150,000-pod cluster costs nothing.

// A file beside this one (not under it), so that mod.rs names it without naming this file.
#[path = "lifecycle_memory.rs"]
pub(super) mod memory;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::objects::{
    SHUTDOWN_ANNOTATION, STARTUP_ANNOTATION, WORK_KUBELET, annotation_duration, bind_and_start,
    mark_node_ready, mark_pod_ready, node_name, node_ready, node_unschedulable, pod_ready,
    terminal, terminating,
};
use super::{Cluster, add_secs, earliest, secs_between};

const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

fn has_unschedulable_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == UNSCHEDULABLE_TAINT))
}

/// How long each controller took in one step, for [`Cluster::last_step_times`].
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

impl Cluster {
    /// Whether the control loop skips its steps (set through the admin API).
    pub fn paused(&self) -> bool {
        self.control_loop.paused
    }

    pub fn set_paused(&mut self, paused: bool) {
        self.control_loop.paused = paused;
    }

    /// How long each controller took in the last step that ran them, in the order they ran.
    pub fn last_step_times(&self) -> &[(&'static str, Duration)] {
        &self.control_loop.last_step_times
    }

    /// Runs the control plane once even if nothing changed since the last step and no timer
    /// is due.
    pub fn step_regardless(&mut self, now: Timestamp) {
        self.control_loop.reconciled_rv = 0;
        self.step(now, false);
    }

    /// Runs the control plane once. `settle` makes every timer fire at once (used to build a
    /// steady-state cluster before serving).
    pub fn step(&mut self, now: Timestamp, settle: bool) {
        if let Some(last) = self.control_loop.last_tick {
            let dt = secs_between(last, now).max(0.0);
            self.stats.unschedulable_pod_seconds += dt * self.pods_waiting() as f64;
        }
        let prev_step = self.control_loop.last_tick.replace(now).unwrap_or(now);
        let changed = self.rev.current() != self.control_loop.reconciled_rv;
        let due = self
            .control_loop
            .next_timed_transition
            .is_some_and(|t| t <= now);
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
        self.control_loop.last_step_times = timer.laps;
        // Budgets hold evicted pods out of the healthy count for a while; wake up to expire them.
        if let Some(t) = self.next_disrupted_timeout() {
            next = earliest(next, t);
        }
        // A step that wrote anything runs again next tick: its own writes may enable more work
        // (a launched node to boot, a created pod to schedule). Quiet steps converge.
        self.control_loop.reconciled_rv = if self.rev.current() == before {
            before
        } else {
            0
        };
        self.control_loop.next_timed_transition = next;
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
}
