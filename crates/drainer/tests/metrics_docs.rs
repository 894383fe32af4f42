//! The metrics table of docs/operating.md (`<!-- metrics: rotor-drainer -->`) against the
//! drainer's registry: the same metrics with the same types, labels and label values, and no
//! `rotor_drainer_...` name in README.md, docs/*.md or the shipped Grafana dashboard and alert
//! rules that /metrics does not serve.

use std::collections::{BTreeMap, BTreeSet};

use prometheus_client::registry::Registry;
use rotor_drainer::metrics::{LABEL_VALUES, Metrics, PhaseLabel};
use rotor_e2e::doc_tables::{self, MarkedTable, Page, assert_no_problems, code_spans};
use rotor_e2e::workspace_root;

/// What /metrics shows of one metric family.
#[derive(Debug, Default, PartialEq)]
struct Exposed {
    /// `counter`, `gauge`, `histogram`, ...
    kind: String,
    /// The label names of its samples (`le` of histogram buckets aside); None without a sample.
    labels: Option<BTreeSet<String>>,
}

/// The drainer's metrics as /metrics encodes them, each family given a sample so that its
/// labels show.
fn exposition() -> String {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    // Families show no sample, and so no label, until a label set is used; a new family needs a
    // line here, or the test says its labels cannot be checked.
    metrics.drain_finished("drained");
    metrics.eviction("evicted");
    metrics.surge("ready");
    metrics.rollout_restart("restarted");
    metrics.health_check("prometheus", "healthy");
    metrics
        .nodes_by_phase
        .get_or_create(&PhaseLabel {
            phase: "queued".into(),
        })
        .set(1);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoding succeeds");
    text
}

/// The families of an OpenMetrics text by name (as in `# TYPE name kind`), with the label
/// names of the samples that follow each `# TYPE` line.
fn parse_exposition(text: &str) -> BTreeMap<String, Exposed> {
    let mut families: BTreeMap<String, Exposed> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            families.insert(
                name.to_string(),
                Exposed {
                    kind: kind.to_string(),
                    labels: None,
                },
            );
            current = Some(name.to_string());
        } else if !line.starts_with('#')
            && !line.trim().is_empty()
            && let Some(family) = current.as_ref().and_then(|n| families.get_mut(n))
        {
            let labels = family.labels.get_or_insert_with(BTreeSet::new);
            labels.extend(sample_label_names(line).into_iter().filter(|l| l != "le"));
        }
    }
    families
}

/// The label names of a sample line such as `name{a="x",b="y\"z"} 1`.
fn sample_label_names(line: &str) -> Vec<String> {
    let Some(open) = line.find('{') else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut rest = &line[open + 1..];
    while let Some(eq) = rest.find("=\"") {
        names.push(rest[..eq].trim_start_matches(',').trim().to_string());
        // Skip the quoted value, escapes included.
        let value = &rest[eq + 2..];
        let mut chars = value.char_indices();
        let mut end = value.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &value[end..];
        if rest.starts_with('}') {
            break;
        }
    }
    names
}

/// The name the docs give a family: counters with the `_total` their samples carry.
fn documented_name(name: &str, kind: &str) -> String {
    if kind == "counter" {
        format!("{name}_total")
    } else {
        name.to_string()
    }
}

/// The sample names /metrics shows for a family: what a query can use.
fn sample_names(name: &str, kind: &str) -> Vec<String> {
    match kind {
        "counter" => vec![format!("{name}_total")],
        "histogram" => ["", "_bucket", "_sum", "_count"]
            .iter()
            .map(|suffix| format!("{name}{suffix}"))
            .collect(),
        _ => vec![name.to_string()],
    }
}

/// The label names a labels cell documents: its backticked identifiers (`result`), not the
/// values listed after them.
fn documented_labels(cell: &str) -> BTreeSet<String> {
    code_spans(cell)
        .into_iter()
        .filter(|s| {
            s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .collect()
}

/// The values a labels cell lists after each label: "`result`: a, b; `check`: c" gives
/// {result: [a, b], check: [c]}.
fn documented_values(cell: &str) -> BTreeMap<String, Vec<String>> {
    cell.split(';')
        .filter_map(|part| {
            let (label, values) = part.split_once(':')?;
            let label = code_spans(label).into_iter().next()?;
            let values = values.split(',').map(|v| v.trim().to_string()).collect();
            Some((label, values))
        })
        .collect()
}

/// The values the table lists for each label against the registry's [`LABEL_VALUES`].
fn check_label_values(table: &MarkedTable) -> Vec<String> {
    let mut problems = Vec::new();
    for (family, label, values) in LABEL_VALUES {
        let name = format!("rotor_drainer_{family}_total");
        let Some(row) = table
            .rows
            .iter()
            .find(|row| code_spans(&row.cells[0]).first() == Some(&name))
        else {
            continue; // a missing row is check_metrics_table's to report
        };
        let documented = documented_values(&row.cells[2]);
        let documented: BTreeSet<&str> = documented
            .get(label)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        let served: BTreeSet<&str> = values.iter().copied().collect();
        if documented != served {
            problems.push(format!(
                "{}: {name}'s `{label}` lists {documented:?}, the drainer counts {served:?} \
                 (metrics::LABEL_VALUES): list each value after `{label}:`, comma-separated",
                table.row_location(row)
            ));
        }
    }
    problems
}

/// The `rotor_drainer_...` tokens of a text, by line.
fn metric_tokens(text: &str) -> Vec<(usize, String)> {
    const PREFIX: &str = "rotor_drainer_";
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        for (at, _) in line.match_indices(PREFIX) {
            let glued = line[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            let tail: String = line[at + PREFIX.len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !glued && !tail.is_empty() {
                found.push((index + 1, format!("{PREFIX}{tail}")));
            }
        }
    }
    found
}

fn pages() -> Vec<Page> {
    doc_tables::reference_pages(&workspace_root())
}

/// Compares the metrics table with the families the registry exposes.
fn check_metrics_table(table: &MarkedTable, exposed: &BTreeMap<String, Exposed>) -> Vec<String> {
    let expected: BTreeMap<String, &Exposed> = exposed
        .iter()
        .map(|(name, e)| (documented_name(name, &e.kind), e))
        .collect();
    let mut problems = Vec::new();
    let mut documented = BTreeSet::new();
    for row in &table.rows {
        let at = table.row_location(row);
        let Some(name) = code_spans(&row.cells[0]).into_iter().next() else {
            problems.push(format!(
                "{at}: the metric cell must be the name in backticks"
            ));
            continue;
        };
        documented.insert(name.clone());
        let Some(exposed) = expected.get(&name) else {
            problems.push(format!(
                "{at} documents {name}, which the drainer's registry does not serve (it has {:?}; \
                 counters end in _total): remove the row or fix the name",
                expected.keys()
            ));
            continue;
        };
        let kind = row.cells[1].trim_matches('`');
        if kind != exposed.kind {
            problems.push(format!(
                "{at}: {name} has type {kind:?} in the docs, {:?} in the registry: fix the type \
                 cell",
                exposed.kind
            ));
        }
        match &exposed.labels {
            None => problems.push(format!(
                "{at}: {name} has no sample, so its labels cannot be checked: give it one in \
                 exposition() of crates/drainer/tests/metrics_docs.rs"
            )),
            Some(labels) if *labels != documented_labels(&row.cells[2]) => problems.push(format!(
                "{at}: {name} has labels {:?} in the docs, {labels:?} in the registry: list \
                 each label name in backticks in the labels cell",
                documented_labels(&row.cells[2])
            )),
            Some(_) => {}
        }
    }
    for name in expected.keys() {
        if !documented.contains(name) {
            problems.push(format!(
                "the drainer serves {name}, which the table at {} does not list: add a row",
                table.location()
            ));
        }
    }
    problems
}

#[test]
fn the_metrics_table_matches_the_registry() {
    let exposed = parse_exposition(&exposition());
    assert!(
        exposed.len() >= 5,
        "parsed only {exposed:?} from the registry's text: parse_exposition is broken"
    );
    let table = doc_tables::the_one_table(
        &pages(),
        "metrics",
        "rotor-drainer",
        &["metric", "type", "labels", "meaning"],
    );
    let mut problems = check_metrics_table(&table, &exposed);
    problems.extend(check_label_values(&table));
    assert_no_problems("docs metrics table against the registry", &problems);
}

/// The dashboard and alert rules rotor ships: every `rotor_drainer_...` name in them (a query, a
/// comment, a description) must be served too. The rest of their checks (Grafana's and
/// Prometheus's shape, the selector's names, a real Prometheus loading them) are rotor-e2e's
/// `tests/tests/monitoring.rs`, which cannot encode the drainer's registry.
const SHIPPED: [&str; 2] = [
    "deploy/helm/rotor/files/grafana-dashboard.json",
    "deploy/helm/rotor/files/prometheus-rules.yaml",
];

#[test]
fn every_metric_name_in_the_docs_and_the_shipped_monitoring_is_served() {
    let served: BTreeSet<String> = parse_exposition(&exposition())
        .iter()
        .flat_map(|(name, e)| sample_names(name, &e.kind))
        .collect();
    let shipped = SHIPPED.iter().map(|path| Page {
        path: path.to_string(),
        text: std::fs::read_to_string(workspace_root().join(path))
            .unwrap_or_else(|e| panic!("cannot read {path}: {e}")),
    });
    let mut problems = Vec::new();
    for page in pages().into_iter().chain(shipped) {
        let tokens = metric_tokens(&page.text);
        if SHIPPED.contains(&page.path.as_str()) && tokens.is_empty() {
            problems.push(format!(
                "{} names no rotor_drainer_ series: is it still rotor's?",
                page.path
            ));
        }
        for (line, token) in tokens {
            if !served.contains(&token) {
                problems.push(format!(
                    "{}:{line} names {token}, which /metrics does not serve (it serves {:?}): fix \
                     the name",
                    page.path, served
                ));
            }
        }
    }
    assert_no_problems(
        "metric names in README.md, docs/*.md and the shipped monitoring",
        &problems,
    );
}

// --- The parsers, on inline text --------------------------------------------------------------

const EXPOSITION: &str = "\
# HELP rotor_drainer_drains Node drains finished.
# TYPE rotor_drainer_drains counter
rotor_drainer_drains_total{result=\"drained\"} 1
# HELP rotor_drainer_drain_duration_seconds Time.
# TYPE rotor_drainer_drain_duration_seconds histogram
rotor_drainer_drain_duration_seconds_sum 0.0
rotor_drainer_drain_duration_seconds_bucket{le=\"30.0\"} 0
# TYPE rotor_drainer_nodes gauge
rotor_drainer_nodes{phase=\"a,b=\\\"c\\\"\",zone=\"z\"} 1
# TYPE rotor_drainer_surges counter
# EOF
";

#[test]
fn parse_exposition_reads_types_and_labels() {
    let families = parse_exposition(EXPOSITION);
    let labels = |name: &str| {
        families[name]
            .labels
            .clone()
            .map(|l| l.into_iter().collect::<Vec<_>>())
    };
    assert_eq!(families.len(), 4);
    assert_eq!(families["rotor_drainer_drains"].kind, "counter");
    assert_eq!(labels("rotor_drainer_drains"), Some(vec!["result".into()]));
    assert_eq!(
        families["rotor_drainer_drain_duration_seconds"].kind,
        "histogram"
    );
    assert_eq!(labels("rotor_drainer_drain_duration_seconds"), Some(vec![]));
    assert_eq!(
        labels("rotor_drainer_nodes"),
        Some(vec!["phase".into(), "zone".into()])
    );
    assert_eq!(labels("rotor_drainer_surges"), None, "no sample");
}

#[test]
fn names_and_labels_as_documented() {
    assert_eq!(
        documented_name("rotor_drainer_drains", "counter"),
        "rotor_drainer_drains_total"
    );
    assert_eq!(
        documented_name("rotor_drainer_nodes", "gauge"),
        "rotor_drainer_nodes"
    );
    assert_eq!(
        sample_names("h", "histogram"),
        ["h", "h_bucket", "h_sum", "h_count"]
    );
    assert_eq!(
        documented_labels("`result`: drained, `failed`-ish, `Phase` `le`"),
        ["failed".to_string(), "le".to_string(), "result".to_string()].into()
    );
    assert!(documented_labels("").is_empty());
}

#[test]
fn metric_tokens_are_whole_words() {
    let text = "max(rotor_drainer_nodes{phase=\"x\"})\n`rotor_drainer_drains_total` and \
                my_rotor_drainer_x, rotor_drainer_* and rotor_drainer::metrics\n";
    assert_eq!(
        metric_tokens(text),
        [
            (1, "rotor_drainer_nodes".to_string()),
            (2, "rotor_drainer_drains_total".to_string())
        ]
    );
}

#[test]
fn check_metrics_table_reports_each_kind_of_mismatch() {
    let page = "<!-- metrics: rotor-drainer -->\n\
                | metric | type | labels | meaning |\n|---|---|---|---|\n\
                | `rotor_drainer_drains_total` | counter | `result`: drained | fine |\n\
                | `rotor_drainer_nodes` | counter | `phase`, `zone` | wrong type |\n\
                | `rotor_drainer_drain_duration_seconds` | histogram | `result` | wrong labels |\n\
                | `rotor_drainer_surges` | counter | | no _total |\n";
    let table = doc_tables::marked_tables("docs/o.md", page, "metrics")
        .unwrap()
        .remove(0);
    let mut exposed = parse_exposition(EXPOSITION);
    exposed.insert(
        "rotor_drainer_gone".into(),
        Exposed {
            kind: "gauge".into(),
            labels: Some(BTreeSet::new()),
        },
    );
    let problems = check_metrics_table(&table, &exposed);
    let expected = [
        "docs/o.md:5: rotor_drainer_nodes has type \"counter\" in the docs, \"gauge\"",
        "docs/o.md:6: rotor_drainer_drain_duration_seconds has labels {\"result\"} in the docs, {}",
        "docs/o.md:7 documents rotor_drainer_surges, which the drainer's registry does not serve",
        "the drainer serves rotor_drainer_gone, which the table at docs/o.md:1 does not list",
        "the drainer serves rotor_drainer_surges_total, which",
    ];
    doc_tables::assert_problems_start_with(&problems, &expected);
}
