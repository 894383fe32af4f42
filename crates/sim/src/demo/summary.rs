//! The demo's result: what the summary prints, what `--summary-json` writes, and the exit code.
//! Built by a pure function from the progress model and the demo's own counters.

use serde::Serialize;

use super::progress::{NodeTimeline, PoolView, Progress, tenths};

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub provider: String,
    pub scenario: String,
    /// The rotation finished: no outdated node, every node Ready, no pod waiting.
    pub completed: bool,
    /// One line: why it ended.
    pub outcome: String,
    /// Seconds from the upgrade to the end (completion, time-out or interruption).
    pub makespan_seconds: f64,
    pub nodes_outdated_at_start: usize,
    pub nodes_replaced: usize,
    pub nodes_outdated_now: usize,
    pub evictions: u64,
    pub eviction_refusals: u64,
    pub budget_violations: usize,
    /// The simulator's record of each violation, one line each.
    pub violations: Vec<String>,
    pub selector_runs: u32,
    pub selector_failures: u32,
    pub unschedulable_pod_seconds: f64,
    /// What holds the rotation up, when it did not complete: one line per outdated node.
    pub stuck: Vec<String>,
    /// Each RotationPolicy's pool as the drainer last wrote its status.
    pub pools: Vec<PoolView>,
    pub timeline: Vec<NodeTimeline>,
    /// Everything the demo saw and did, in order.
    pub events: Vec<EventRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct EventRow {
    pub at: f64,
    pub what: String,
}

/// How the run ended, as far as the demo's loop knows.
#[derive(Clone, Debug, PartialEq)]
pub enum Ending {
    Completed,
    TimedOut,
    Interrupted,
    /// A child process or the cloud glue failed.
    Failed(String),
}

/// Everything the summary needs besides the progress model.
pub struct Facts {
    pub provider: String,
    pub scenario: String,
    pub elapsed: f64,
    pub selector_runs: u32,
    pub selector_failures: u32,
    pub unschedulable_pod_seconds: f64,
    pub violations: Vec<String>,
}

pub fn summarize(progress: &Progress, ending: &Ending, facts: Facts) -> Summary {
    let c = progress.counts();
    let completed = *ending == Ending::Completed;
    let outcome = match ending {
        Ending::Completed if c.violations == 0 => {
            "every outdated node replaced, no budget violated".to_owned()
        }
        Ending::Completed => format!(
            "every outdated node replaced, but {} budget violation(s)",
            c.violations
        ),
        Ending::TimedOut => format!("timed out with {} outdated node(s) left", c.outdated),
        Ending::Interrupted => "interrupted".to_owned(),
        Ending::Failed(why) => format!("failed: {why}"),
    };
    let stuck = if completed {
        Vec::new()
    } else {
        stuck(progress)
    };
    Summary {
        provider: facts.provider,
        scenario: facts.scenario,
        completed,
        outcome,
        makespan_seconds: tenths(facts.elapsed),
        nodes_outdated_at_start: progress.initially_outdated(),
        nodes_replaced: c.replaced,
        nodes_outdated_now: c.outdated,
        evictions: c.evictions,
        eviction_refusals: c.refusals,
        budget_violations: c.violations,
        violations: facts.violations,
        selector_runs: facts.selector_runs,
        selector_failures: facts.selector_failures,
        unschedulable_pod_seconds: tenths(facts.unschedulable_pod_seconds),
        stuck,
        pools: progress.last().map(|s| s.pools.clone()).unwrap_or_default(),
        timeline: progress.timelines(),
        events: progress
            .events()
            .iter()
            .map(|e| EventRow {
                at: tenths(e.at),
                what: e.change.to_string(),
            })
            .collect(),
    }
}

/// One line per node still outdated, plus waiting pods and booting nodes: what holds it up.
fn stuck(progress: &Progress) -> Vec<String> {
    let Some(s) = progress.last() else {
        return Vec::new();
    };
    let mut out: Vec<String> = s
        .nodes
        .iter()
        .filter(|n| n.outdated || !n.ready)
        .map(|n| {
            let state = match (&n.taint, &n.phase) {
                _ if !n.ready => "not Ready yet".to_owned(),
                (None, _) => "not selected (no drain taint)".to_owned(),
                (Some(r), None) => format!("tainted ({r}), drain not started"),
                (Some(r), Some(p)) => format!("tainted ({r}), phase {p}"),
            };
            match &n.blocker {
                Some(b) => format!("{}: {state}; blocker: {b}", n.name),
                None => format!("{}: {state}", n.name),
            }
        })
        .collect();
    if s.unschedulable_pods > 0 {
        out.push(format!(
            "{} pod(s) unschedulable (waiting for room on a node)",
            s.unschedulable_pods
        ));
    }
    out
}

impl Summary {
    /// 0: complete with no violation; 1: anything else (time-out, violations, a failure,
    /// an interruption).
    pub fn exit_code(&self) -> u8 {
        if self.completed && self.budget_violations == 0 {
            0
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::progress::{NodeView, Snapshot};
    use super::*;

    fn facts() -> Facts {
        Facts {
            provider: "kubernetes".into(),
            scenario: "demo.yaml".into(),
            elapsed: 12.34,
            selector_runs: 3,
            selector_failures: 0,
            unschedulable_pod_seconds: 0.0,
            violations: vec![],
        }
    }

    fn node(name: &str, outdated: bool) -> NodeView {
        NodeView {
            name: name.into(),
            outdated,
            ready: true,
            ..NodeView::default()
        }
    }

    #[test]
    fn a_clean_rotation_exits_0_and_a_violation_exits_1() {
        let mut p = Progress::new(Snapshot {
            nodes: vec![node("a", true)],
            ..Snapshot::default()
        });
        p.observe(Snapshot {
            at: 5.0,
            nodes: vec![node("b", false)],
            ..Snapshot::default()
        });
        let s = summarize(&p, &Ending::Completed, facts());
        assert!(s.completed);
        assert_eq!((s.nodes_outdated_at_start, s.nodes_replaced), (1, 1));
        assert_eq!(s.makespan_seconds, 12.3);
        assert_eq!(s.exit_code(), 0);
        assert!(s.stuck.is_empty());
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["nodesReplaced"], 1);
        assert_eq!(json["timeline"][0]["replacedAt"], 5.0);

        p.observe(Snapshot {
            at: 6.0,
            nodes: vec![node("b", false)],
            budget_violations: 1,
            ..Snapshot::default()
        });
        let s = summarize(&p, &Ending::Completed, facts());
        assert_eq!(s.exit_code(), 1);
        assert!(s.outcome.contains("1 budget violation"), "{}", s.outcome);
    }

    #[test]
    fn a_time_out_names_what_is_stuck() {
        let mut blocked = node("a", true);
        blocked.taint = Some("kubelet-version".into());
        blocked.phase = Some("blocked".into());
        blocked.blocker = Some("pod batch/report has rotor.dev/do-not-disrupt=true".into());
        let p = Progress::new(Snapshot {
            nodes: vec![blocked, node("b", true)],
            unschedulable_pods: 2,
            ..Snapshot::default()
        });
        let s = summarize(&p, &Ending::TimedOut, facts());
        assert_eq!(s.exit_code(), 1);
        assert_eq!(s.outcome, "timed out with 2 outdated node(s) left");
        assert_eq!(
            s.stuck,
            [
                "a: tainted (kubelet-version), phase blocked; blocker: pod batch/report has rotor.dev/do-not-disrupt=true",
                "b: not selected (no drain taint)",
                "2 pod(s) unschedulable (waiting for room on a node)",
            ]
        );
    }
}
