//! Fleet compliance: what one run found, as figures to graph and alert on ("are we patched
//! yet?"). It counts the nodes out of date by reason and group, the age of the oldest one, the
//! nodes tainted and drained, and the nodes not judged, by why. It is written as Prometheus text
//! for `--metrics-file` and `--pushgateway`, and as a short report for `--output report`. Pure:
//! the same report gives the same figures.

use std::collections::BTreeMap;

use jiff::Timestamp;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::plan::Action;
use crate::report::{Report, WriteOutcome};
use crate::verdict::Verdict;

/// One run's compliance figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compliance {
    pub provider: &'static str,
    pub nodes: usize,
    pub current: usize,
    /// Out-of-date nodes by (reason slug, group; empty without one).
    pub outdated: BTreeMap<(String, String), usize>,
    /// Nodes not judged, by the skip's slug.
    pub skipped: BTreeMap<String, usize>,
    /// The oldest out-of-date node and its age in seconds.
    pub oldest_outdated: Option<(String, i64)>,
    /// Nodes carrying the drain taint once this run's writes are counted.
    pub tainted: usize,
    /// Tainted nodes the drainer has drained, waiting to be retired.
    pub drained: usize,
    /// The run's exit status was 0.
    pub succeeded: bool,
    pub finished_at: Timestamp,
}

impl Compliance {
    /// The figures of `report`, a run that ended at `now`.
    pub fn of(report: &Report, now: Timestamp) -> Compliance {
        let mut figures = Compliance {
            provider: report.provider,
            nodes: report.nodes.len(),
            current: 0,
            outdated: BTreeMap::new(),
            skipped: BTreeMap::new(),
            oldest_outdated: None,
            tainted: 0,
            drained: 0,
            succeeded: report.exit_code() == 0,
            finished_at: now,
        };
        for node in &report.nodes {
            let candidate = &node.planned.candidate;
            match &candidate.verdict {
                Verdict::Current => figures.current += 1,
                Verdict::Skip { why } => {
                    *figures.skipped.entry(why.slug().to_string()).or_default() += 1
                }
                Verdict::Drifted { reason, .. } => {
                    let group = candidate.group.clone().unwrap_or_default();
                    *figures
                        .outdated
                        .entry((reason.slug().to_string(), group))
                        .or_default() += 1;
                    if let Some(created) = candidate.created {
                        let age = now.duration_since(created).as_secs().max(0);
                        if figures
                            .oldest_outdated
                            .as_ref()
                            .is_none_or(|(_, a)| age > *a)
                        {
                            figures.oldest_outdated = Some((candidate.node.clone(), age));
                        }
                    }
                }
            }
            // The taint as it stands after this run: a write that did not land changed nothing.
            let applied = node
                .write
                .as_ref()
                .is_some_and(|w| w.outcome == WriteOutcome::Applied);
            let tainted = match &node.planned.action {
                Action::Taint { .. } => applied || candidate.current_taint.is_some(),
                Action::Untaint { .. } => !applied,
                _ => candidate.current_taint.is_some(),
            };
            // A drained node retired by this run waits for nothing more.
            let retired = matches!(node.planned.action, Action::Retire { .. }) && applied;
            figures.tainted += usize::from(tainted);
            figures.drained += usize::from(tainted && candidate.drained && !retired);
        }
        figures
    }

    /// The out-of-date nodes, all reasons and groups together.
    pub fn outdated_total(&self) -> usize {
        self.outdated.values().sum()
    }

    /// Prometheus's text format (OpenMetrics), every figure a gauge: what a Pushgateway keeps
    /// and a textfile collector serves.
    pub fn exposition(&self) -> String {
        let mut registry = Registry::with_prefix("rotor_selector");
        let gauge = |value: i64| {
            let g: Gauge = Gauge::default();
            g.set(value);
            g
        };
        let nodes = Family::<VerdictLabel, Gauge>::default();
        for (verdict, count) in [
            ("current", self.current),
            ("outdated", self.outdated_total()),
            ("skipped", self.skipped.values().sum()),
        ] {
            nodes
                .get_or_create(&VerdictLabel {
                    verdict: verdict.into(),
                })
                .set(count as i64);
        }
        registry.register("nodes", "Nodes the last run judged, by verdict", nodes);
        let outdated = Family::<OutdatedLabels, Gauge>::default();
        for ((reason, group), count) in &self.outdated {
            outdated
                .get_or_create(&OutdatedLabels {
                    reason: reason.clone(),
                    group: group.clone(),
                })
                .set(*count as i64);
        }
        registry.register(
            "outdated_nodes",
            "Out-of-date nodes by drain reason and group (empty without one)",
            outdated,
        );
        let skipped = Family::<SkipLabel, Gauge>::default();
        for (why, count) in &self.skipped {
            skipped
                .get_or_create(&SkipLabel { why: why.clone() })
                .set(*count as i64);
        }
        registry.register("skipped_nodes", "Nodes not judged, by why", skipped);
        registry.register(
            "oldest_outdated_node_age_seconds",
            "Age of the oldest out-of-date node (0 when none is)",
            gauge(self.oldest_outdated.as_ref().map_or(0, |(_, age)| *age)),
        );
        registry.register(
            "tainted_nodes",
            "Nodes carrying the drain taint after the last run",
            gauge(self.tainted as i64),
        );
        registry.register(
            "drained_nodes",
            "Tainted nodes the drainer has drained, waiting to be retired",
            gauge(self.drained as i64),
        );
        encode_with_run(registry, self.finished_at, self.succeeded)
    }

    /// The exposition of a run that failed before it judged the fleet: only when it ran and that
    /// it failed (the figures are not known).
    pub fn failure_exposition(now: Timestamp) -> String {
        encode_with_run(Registry::with_prefix("rotor_selector"), now, false)
    }

    /// The report `--output report` prints.
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "{} node(s) judged by the {} provider: {} current, {} out of date, {} not judged\n",
            self.nodes,
            self.provider,
            self.current,
            self.outdated_total(),
            self.skipped.values().sum::<usize>()
        );
        if let Some((node, age)) = &self.oldest_outdated {
            text.push_str(&format!(
                "oldest out of date: {node}, {} old\n",
                human_age(*age)
            ));
        }
        for ((reason, group), count) in &self.outdated {
            let group = if group.is_empty() { "-" } else { group };
            text.push_str(&format!(
                "  out of date: {count} for {reason} in group {group}\n"
            ));
        }
        for (why, count) in &self.skipped {
            text.push_str(&format!("  not judged: {count} ({why})\n"));
        }
        text.push_str(&format!(
            "tainted: {} (drained, waiting to be retired: {})\n",
            self.tainted, self.drained
        ));
        text
    }
}

/// Adds the two gauges every exposition carries, when the run ended and whether it succeeded,
/// and encodes the whole.
fn encode_with_run(mut registry: Registry, finished_at: Timestamp, succeeded: bool) -> String {
    let at: Gauge = Gauge::default();
    at.set(finished_at.as_second());
    registry.register(
        "last_run_timestamp_seconds",
        "When the last run ended (Unix time)",
        at,
    );
    let success: Gauge = Gauge::default();
    success.set(i64::from(succeeded));
    registry.register(
        "last_run_success",
        "1 if the last run completed without a failed look-up or write, else 0",
        success,
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .expect("encoding into a String cannot fail");
    text
}

fn human_age(seconds: i64) -> String {
    match seconds {
        ..3600 => format!("{}m", seconds / 60),
        3600..172_800 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabel {
    verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutdatedLabels {
    reason: String,
    group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkipLabel {
    why: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_calls::ApiCalls;
    use crate::plan::{Candidate, PlannedNode};
    use crate::report::{NodeReport, WriteResult};
    use crate::verdict::SkipReason;
    use rotor_core::DrainReason;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn node(
        name: &str,
        group: Option<&str>,
        created: &str,
        verdict: Verdict,
        taint: Option<&str>,
        action: Action,
        outcome: Option<WriteOutcome>,
    ) -> NodeReport {
        NodeReport {
            planned: PlannedNode {
                candidate: Candidate {
                    node: name.into(),
                    instance: None,
                    group: group.map(str::to_string),
                    zone: None,
                    created: Some(at(created)),
                    verdict,
                    current_taint: taint.map(str::to_string),
                    drain_started: false,
                    selected_by_selector: false,
                    opted_out: false,
                    drained: false,
                },
                action,
            },
            write: outcome.map(|outcome| WriteResult {
                outcome,
                attempts: 1,
            }),
        }
    }

    fn drifted(reason: DrainReason) -> Verdict {
        Verdict::Drifted {
            reason,
            detail: "d".into(),
        }
    }

    fn keep() -> Action {
        Action::Keep { why: "w".into() }
    }

    fn taint() -> Action {
        Action::Taint {
            reason: DrainReason::Image,
            detail: "d".into(),
        }
    }

    /// A fleet shaped like an AWS run: two groups, an AMI drift in both, a launch template
    /// drift in one, a drained node waiting to be retired, a taint that failed to land, and a
    /// node outside every group.
    fn fleet() -> Report {
        let mut drained = node(
            "ip-1",
            Some("web"),
            "2026-10-01T00:00:00Z",
            drifted(DrainReason::Image),
            Some("image"),
            keep(),
            None,
        );
        drained.planned.candidate.drained = true;
        Report {
            provider: "aws",
            dry_run: false,
            nodes: vec![
                drained,
                node(
                    "ip-2",
                    Some("web"),
                    "2026-11-01T00:00:00Z",
                    drifted(DrainReason::Image),
                    None,
                    taint(),
                    Some(WriteOutcome::Applied),
                ),
                node(
                    "ip-3",
                    Some("batch"),
                    "2026-11-20T00:00:00Z",
                    drifted(DrainReason::Image),
                    None,
                    taint(),
                    Some(WriteOutcome::Failed {
                        error: "boom".into(),
                    }),
                ),
                node(
                    "ip-4",
                    Some("batch"),
                    "2026-11-21T00:00:00Z",
                    drifted(DrainReason::LaunchTemplate),
                    None,
                    keep(),
                    None,
                ),
                node(
                    "ip-5",
                    Some("web"),
                    "2026-11-25T00:00:00Z",
                    Verdict::Current,
                    None,
                    keep(),
                    None,
                ),
                node(
                    "ip-6",
                    None,
                    "2026-11-25T00:00:00Z",
                    Verdict::skip(SkipReason::InstanceNotInGroups {
                        instance: "i-6".into(),
                    }),
                    None,
                    Action::Skip { why: "w".into() },
                    None,
                ),
            ],
            api_calls: ApiCalls::default(),
            lookup_failures: Vec::new(),
            group_surges: Vec::new(),
        }
    }

    #[test]
    fn a_run_is_counted_by_verdict_reason_and_group() {
        let figures = Compliance::of(&fleet(), at("2026-11-26T00:00:00Z"));
        assert_eq!(
            (figures.nodes, figures.current, figures.outdated_total()),
            (6, 1, 4)
        );
        assert_eq!(
            figures.outdated,
            BTreeMap::from([
                (("image".to_string(), "batch".to_string()), 1),
                (("image".to_string(), "web".to_string()), 2),
                (("launch-template".to_string(), "batch".to_string()), 1),
            ])
        );
        assert_eq!(
            figures.skipped,
            BTreeMap::from([("instance-not-in-groups".to_string(), 1)])
        );
        assert_eq!(
            figures.oldest_outdated,
            Some(("ip-1".to_string(), 56 * 86_400))
        );
        // ip-1 was tainted, ip-2's taint landed, ip-3's failed.
        assert_eq!((figures.tainted, figures.drained), (2, 1));
        assert!(!figures.succeeded, "a failed write fails the run");
    }

    #[test]
    fn a_drained_node_retired_by_the_run_is_no_longer_waiting_to_be() {
        let mut report = fleet();
        let retire = |outcome| {
            let mut node = node(
                "ip-7",
                Some("web"),
                "2026-10-02T00:00:00Z",
                drifted(DrainReason::Image),
                Some("image"),
                Action::Retire {
                    shrink_group: false,
                },
                Some(outcome),
            );
            node.planned.candidate.drained = true;
            node
        };
        report.nodes.push(retire(WriteOutcome::Applied));
        let figures = Compliance::of(&report, at("2026-11-26T00:00:00Z"));
        // ip-1 still waits; ip-7's instance is gone, its tainted Node not yet.
        assert_eq!((figures.tainted, figures.drained), (3, 1));
        // A retire that failed leaves it waiting.
        report.nodes.pop();
        report.nodes.push(retire(WriteOutcome::Failed {
            error: "TerminateInstanceInAutoScalingGroup: throttled".into(),
        }));
        let figures = Compliance::of(&report, at("2026-11-26T00:00:00Z"));
        assert_eq!((figures.tainted, figures.drained), (3, 2));
    }

    #[test]
    fn the_exposition_carries_every_figure_as_a_gauge() {
        let text = Compliance::of(&fleet(), at("2026-11-26T00:00:00Z")).exposition();
        for line in [
            "# TYPE rotor_selector_nodes gauge",
            r#"rotor_selector_nodes{verdict="outdated"} 4"#,
            r#"rotor_selector_outdated_nodes{reason="image",group="web"} 2"#,
            r#"rotor_selector_outdated_nodes{reason="launch-template",group="batch"} 1"#,
            r#"rotor_selector_skipped_nodes{why="instance-not-in-groups"} 1"#,
            "rotor_selector_oldest_outdated_node_age_seconds 4838400",
            "rotor_selector_tainted_nodes 2",
            "rotor_selector_drained_nodes 1",
            "rotor_selector_last_run_timestamp_seconds 1795651200",
            "rotor_selector_last_run_success 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
    }

    #[test]
    fn a_failed_run_says_only_when_it_ran_and_that_it_failed() {
        let text = Compliance::failure_exposition(at("2026-11-26T00:00:00Z"));
        assert!(
            text.lines()
                .any(|l| l == "rotor_selector_last_run_success 0"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == "rotor_selector_last_run_timestamp_seconds 1795651200"),
            "{text}"
        );
        assert!(!text.contains("rotor_selector_nodes"), "{text}");
    }

    #[test]
    fn the_report_reads_as_a_summary() {
        let text = Compliance::of(&fleet(), at("2026-11-26T00:00:00Z")).to_text();
        assert_eq!(
            text,
            "6 node(s) judged by the aws provider: 1 current, 4 out of date, 1 not judged\n\
             oldest out of date: ip-1, 56d old\n\
             \x20 out of date: 1 for image in group batch\n\
             \x20 out of date: 2 for image in group web\n\
             \x20 out of date: 1 for launch-template in group batch\n\
             \x20 not judged: 1 (instance-not-in-groups)\n\
             tainted: 2 (drained, waiting to be retired: 1)\n"
        );
    }
}
