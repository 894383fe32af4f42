//! The selector's metrics table in docs/selector.md (`<!-- metrics: rotor-selector -->`) against
//! what `--metrics-file` and `--pushgateway` carry: the same gauges, no more, no fewer.

use std::collections::BTreeSet;

use jiff::Timestamp;
use rotor_core::DrainReason;
use rotor_e2e::doc_tables::{self, code_spans};
use rotor_e2e::workspace_root;
use rotor_selector::api_calls::ApiCalls;
use rotor_selector::compliance::Compliance;
use rotor_selector::plan::{Action, Candidate, PlannedNode};
use rotor_selector::report::{NodeReport, Report};
use rotor_selector::verdict::{SkipReason, Verdict};

#[test]
fn the_metrics_table_lists_exactly_the_gauges_a_run_publishes() {
    let table = doc_tables::the_one_table(
        &doc_tables::reference_pages(&workspace_root()),
        "metrics",
        "rotor-selector",
        &["metric", "labels", "meaning"],
    );
    let documented: BTreeSet<String> = table
        .rows
        .iter()
        .filter_map(|row| code_spans(&row.cells[0]).into_iter().next())
        .collect();
    // One node of each verdict, so that every family has a sample (an empty one is not shown).
    let node = |name: &str, verdict: Verdict| NodeReport {
        planned: PlannedNode {
            candidate: Candidate {
                node: name.into(),
                instance: None,
                group: None,
                zone: None,
                created: Some(Timestamp::UNIX_EPOCH),
                verdict,
                current_taint: None,
                drain_started: false,
                selected_by_selector: false,
                opted_out: false,
                drained: false,
            },
            action: Action::Keep { why: "-".into() },
        },
        write: None,
    };
    let report = Report {
        provider: "kubernetes",
        dry_run: true,
        nodes: vec![
            node("a", Verdict::Current),
            node(
                "b",
                Verdict::Drifted {
                    reason: DrainReason::KubeletVersion,
                    detail: "-".into(),
                },
            ),
            node("c", Verdict::skip(SkipReason::KubeletVersionMissing)),
        ],
        api_calls: ApiCalls::default(),
        lookup_failures: Vec::new(),
        group_surges: Vec::new(),
    };
    let exposition = Compliance::of(&report, Timestamp::UNIX_EPOCH).exposition();
    let published: BTreeSet<String> = exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next().unwrap_or_default().to_string();
            assert_eq!(words.next(), Some("gauge"), "{l}: every figure is a gauge");
            name
        })
        .collect();
    assert_eq!(
        documented, published,
        "docs/selector.md's metrics table against the exposition"
    );
}
