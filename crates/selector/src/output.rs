//! The plan on stdout, as a table (`--output text`) or one JSON object (`--output json`).
//!
//! Per node: its name, instance, group and zone; the action (`taint`, `untaint`, `keep`, `skip`,
//! `retire`); a reason slug; a human detail; and, for actions that write, what became of the
//! write (`applied`, `dry-run`, `dropped`, `failed`). The reason is the one that matters for the
//! action: for `taint` the reason written on the taint; for `untaint`, `retire` and a `keep` of a
//! tainted node, the current taint's value; for a `keep` of an untainted out-of-date node (held
//! back by a budget), the reason it would be tainted for; for `skip`, `opted-out` or the skip's
//! slug (e.g. `kubelet-version-missing`). The detail is the taint's detail for `taint` and the
//! planner's explanation otherwise.

use serde_json::{Value, json};

use crate::plan::{Action, PlannedNode};
use crate::report::{NodeReport, Report, WriteResult};
use crate::verdict::Verdict;

/// The reason slug shown for a planned node (see the module documentation).
pub fn reason(planned: &PlannedNode) -> Option<String> {
    let candidate = &planned.candidate;
    match &planned.action {
        Action::Taint { reason, .. } => Some(reason.slug().to_owned()),
        Action::Untaint { .. } | Action::Retire { .. } => candidate.current_taint.clone(),
        Action::Keep { .. } => candidate
            .current_taint
            .clone()
            .or(match &candidate.verdict {
                Verdict::Drifted { reason, .. } => Some(reason.slug().to_owned()),
                _ => None,
            }),
        Action::Skip { .. } => Some(match &candidate.verdict {
            Verdict::Skip { why } if !candidate.opted_out => why.slug().to_owned(),
            _ => "opted-out".to_owned(),
        }),
    }
}

/// The human detail shown for a planned node.
pub fn detail(planned: &PlannedNode) -> String {
    match &planned.action {
        Action::Taint { detail, .. } => detail.clone(),
        Action::Untaint { why } | Action::Keep { why } | Action::Skip { why } => why.clone(),
        Action::Retire {
            shrink_group: false,
        } => "drained: its instance is terminated in its group".to_owned(),
        Action::Retire { shrink_group: true } => {
            "drained: its instance is terminated and the group's desired capacity decremented (its surge replacement runs)".to_owned()
        }
    }
}

/// The run as one JSON object:
/// `{provider, dryRun, summary: {nodes, taint, untaint, keep, skip, retire, applied, dropped,
/// failed}, nodes: [{node, instance, group, zone, action, reason, detail, result}], apiCalls,
/// lookupFailures: [{operation, subject, error, groups}]}`, `result` being `null` or
/// `{outcome, attempts, message}`.
pub fn to_json(report: &Report) -> Value {
    let counts = report.summary();
    json!({
        "provider": report.provider,
        "dryRun": report.dry_run,
        "summary": {
            "nodes": counts.nodes,
            "taint": counts.plan.taint,
            "untaint": counts.plan.untaint,
            "keep": counts.plan.keep,
            "skip": counts.plan.skip,
            "retire": counts.plan.retire,
            "applied": counts.applied,
            "dropped": counts.dropped,
            "failed": counts.failed,
        },
        "nodes": report.nodes.iter().map(node_json).collect::<Vec<_>>(),
        "apiCalls": report.api_calls.to_json(),
        "lookupFailures": report.lookup_failures.iter().map(|f| json!({
            "operation": f.operation,
            "subject": f.subject,
            "error": f.error,
            "groups": f.groups,
        })).collect::<Vec<_>>(),
        "groupSurge": report.group_surges.iter().map(|g| json!({
            "group": g.surge.group,
            "step": g.surge.step.kind(),
            "base": g.surge.base,
            "desired": g.surge.desired,
            "maxSize": g.surge.max_size,
            "outstanding": g.surge.outstanding,
            "detail": g.surge.describe(),
            "result": write_json(g.write.as_ref()),
        })).collect::<Vec<_>>(),
    })
}

fn write_json(write: Option<&WriteResult>) -> Value {
    json!(write.map(|write| json!({
        "outcome": write.outcome.label(),
        "attempts": write.attempts,
        "message": write.outcome.message(),
    })))
}

fn node_json(node: &NodeReport) -> Value {
    let planned = &node.planned;
    let candidate = &planned.candidate;
    json!({
        "node": candidate.node,
        "instance": candidate.instance,
        "group": candidate.group,
        "zone": candidate.zone,
        "action": planned.action.kind(),
        "reason": reason(planned),
        "detail": detail(planned),
        "result": write_json(node.write.as_ref()),
    })
}

/// The run as a table with a header (NODE GROUP ZONE ACTION REASON DETAIL RESULT; `-` for
/// nothing), a closing summary line, and a line per look-up that failed for some groups.
pub fn to_text(report: &Report) -> String {
    let dash = |value: Option<&str>| value.unwrap_or("-").to_owned();
    let mut rows = vec![
        [
            "NODE", "GROUP", "ZONE", "ACTION", "REASON", "DETAIL", "RESULT",
        ]
        .map(str::to_owned),
    ];
    for node in &report.nodes {
        let planned = &node.planned;
        let candidate = &planned.candidate;
        rows.push([
            candidate.node.clone(),
            dash(candidate.group.as_deref()),
            dash(candidate.zone.as_deref()),
            planned.action.kind().to_owned(),
            dash(reason(planned).as_deref()),
            detail(planned),
            node.write
                .as_ref()
                .map_or_else(|| "-".to_owned(), |write| write.outcome.to_string()),
        ]);
    }
    let mut widths = [0; 7];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  "));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    let counts = report.summary();
    text.push_str(&format!(
        "{}; writes: applied={} dropped={} failed={}{}\n",
        counts.plan,
        counts.applied,
        counts.dropped,
        counts.failed,
        if report.dry_run {
            " (dry run: nothing was changed)"
        } else {
            ""
        }
    ));
    for failure in &report.lookup_failures {
        text.push_str(&format!("lookup failed: {failure}\n"));
    }
    for group in &report.group_surges {
        let result = group
            .write
            .as_ref()
            .map(|write| format!(" [{}]", write.outcome))
            .unwrap_or_default();
        text.push_str(&format!("surge: {}{result}\n", group.surge.describe()));
    }
    text
}

#[cfg(test)]
mod tests {
    use rotor_core::DrainReason;

    use super::*;
    use crate::api_calls::ApiCalls;
    use crate::plan::Candidate;
    use crate::report::WriteOutcome;
    use crate::verdict::SkipReason;

    fn candidate(name: &str, verdict: Verdict, taint: Option<&str>) -> Candidate {
        Candidate {
            node: name.into(),
            instance: None,
            group: Some("old".into()),
            zone: Some("us-east-1a".into()),
            created: None,
            verdict,
            current_taint: taint.map(str::to_owned),
            drain_started: false,
            selected_by_selector: false,
            opted_out: false,
            drained: false,
        }
    }

    fn drifted() -> Verdict {
        Verdict::Drifted {
            reason: DrainReason::KubeletVersion,
            detail: "kubelet v1.33.2, control plane v1.34.1".into(),
        }
    }

    fn report(dry_run: bool) -> Report {
        let mut calls = ApiCalls::default();
        calls.kube("list nodes");
        calls.kube("patch nodes");
        let mut opted_out = candidate("opted-out", drifted(), None);
        opted_out.opted_out = true;
        opted_out.group = None;
        opted_out.zone = None;
        let taint = Action::Taint {
            reason: DrainReason::KubeletVersion,
            detail: "kubelet v1.33.2, control plane v1.34.1".into(),
        };
        let node = |candidate, action, write| NodeReport {
            planned: PlannedNode { candidate, action },
            write,
        };
        Report {
            provider: "kubernetes",
            dry_run,
            nodes: vec![
                node(
                    candidate("old-0", drifted(), None),
                    taint,
                    Some(WriteResult {
                        outcome: if dry_run {
                            WriteOutcome::DryRun
                        } else {
                            WriteOutcome::Applied
                        },
                        attempts: u32::from(!dry_run),
                    }),
                ),
                node(
                    candidate("old-1", drifted(), None),
                    Action::Keep {
                        why: "budget: max-tainted 1 reached".into(),
                    },
                    None,
                ),
                node(
                    candidate("new-0", Verdict::Current, None),
                    Action::Keep {
                        why: "up to date".into(),
                    },
                    None,
                ),
                node(
                    opted_out,
                    Action::Skip {
                        why: "node opted out (rotor.dev/do-not-disrupt=true)".into(),
                    },
                    None,
                ),
                node(
                    candidate(
                        "odd",
                        Verdict::skip(SkipReason::KubeletVersionMissing),
                        Some("manual"),
                    ),
                    Action::Skip {
                        why: "node reports no kubelet version".into(),
                    },
                    None,
                ),
            ],
            api_calls: calls,
            lookup_failures: Vec::new(),
            group_surges: Vec::new(),
        }
    }

    #[test]
    fn json_has_every_field() {
        assert_eq!(
            to_json(&report(false)),
            json!({
                "provider": "kubernetes",
                "dryRun": false,
                "summary": {"nodes": 5, "taint": 1, "untaint": 0, "keep": 2, "skip": 2, "retire": 0,
                            "applied": 1, "dropped": 0, "failed": 0},
                "nodes": [
                    {"node": "old-0", "instance": null, "group": "old", "zone": "us-east-1a",
                     "action": "taint", "reason": "kubelet-version",
                     "detail": "kubelet v1.33.2, control plane v1.34.1",
                     "result": {"outcome": "applied", "attempts": 1, "message": null}},
                    {"node": "old-1", "instance": null, "group": "old", "zone": "us-east-1a",
                     "action": "keep", "reason": "kubelet-version",
                     "detail": "budget: max-tainted 1 reached", "result": null},
                    {"node": "new-0", "instance": null, "group": "old", "zone": "us-east-1a",
                     "action": "keep", "reason": null, "detail": "up to date", "result": null},
                    {"node": "opted-out", "instance": null, "group": null, "zone": null,
                     "action": "skip", "reason": "opted-out",
                     "detail": "node opted out (rotor.dev/do-not-disrupt=true)", "result": null},
                    {"node": "odd", "instance": null, "group": "old", "zone": "us-east-1a",
                     "action": "skip", "reason": "kubelet-version-missing",
                     "detail": "node reports no kubelet version", "result": null},
                ],
                "apiCalls": {"kubernetes": {"list nodes": 1, "patch nodes": 1}},
                "lookupFailures": [],
                "groupSurge": [],
            })
        );
    }

    #[test]
    fn lookup_failures_are_listed_in_json_and_text() {
        let mut report = report(false);
        report
            .lookup_failures
            .push(crate::provider::seam::LookupFailure {
                operation: "DescribeLaunchTemplateVersions",
                subject: "lt-0abc".into(),
                error: "InvalidLaunchTemplateId.NotFound: gone".into(),
                groups: vec!["g-1".into(), "g-2".into()],
            });
        assert_eq!(
            to_json(&report)["lookupFailures"],
            json!([{"operation": "DescribeLaunchTemplateVersions", "subject": "lt-0abc",
                    "error": "InvalidLaunchTemplateId.NotFound: gone", "groups": ["g-1", "g-2"]}])
        );
        assert!(
            to_text(&report).ends_with(
                "\nlookup failed: DescribeLaunchTemplateVersions for lt-0abc failed: InvalidLaunchTemplateId.NotFound: gone; skipped group(s) g-1, g-2\n"
            ),
            "{}",
            to_text(&report)
        );
        assert_eq!(report.exit_code(), 1, "a partial look-up fails the run");
    }

    #[test]
    fn text_is_an_aligned_table_with_a_summary() {
        assert_eq!(
            to_text(&report(true)),
            "\
NODE       GROUP  ZONE        ACTION  REASON                   DETAIL                                          RESULT
old-0      old    us-east-1a  taint   kubelet-version          kubelet v1.33.2, control plane v1.34.1          dry-run
old-1      old    us-east-1a  keep    kubelet-version          budget: max-tainted 1 reached                   -
new-0      old    us-east-1a  keep    -                        up to date                                      -
opted-out  -      -           skip    opted-out                node opted out (rotor.dev/do-not-disrupt=true)  -
odd        old    us-east-1a  skip    kubelet-version-missing  node reports no kubelet version                 -
plan: taint=1 untaint=0 keep=2 skip=2 retire=0; writes: applied=0 dropped=0 failed=0 (dry run: nothing was changed)
"
        );
    }
}
