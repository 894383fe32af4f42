//! The Grafana dashboard and the Prometheus alert rules rotor ships in deploy/helm/rotor/files/,
//! checked the way Grafana, Prometheus and an operator use them:
//!
//! - the dashboard is Grafana JSON whose every panel and query asks the `${datasource}` variable;
//! - the rules file is the `groups:` of a rules file, every rule an alert with a `for`, a
//!   severity, a summary and a description pointing to docs/operating.md;
//! - every `rotor_...` metric a query names is served: the selector's against the exposition a
//!   run publishes, here; the drainer's against its registry in
//!   crates/drainer/tests/monitoring_docs.rs (only that crate can encode the registry);
//! - docs/operating.md's alerts table lists exactly the shipped alerts, with their severity;
//! - a real Prometheus (built by `tools/build.sh`) loads the rules, evaluates each without error
//!   and accepts every query of the dashboard.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use jiff::Timestamp;
use rotor_e2e::doc_tables::{self, MarkedTable, assert_no_problems, code_spans};
use rotor_e2e::real_cluster::{control_plane_bin, free_port};
use rotor_e2e::{Background, TestDir, http_get, wait_until, workspace_root};
use rotor_selector::compliance::Compliance;
use serde_json::Value;

const DASHBOARD: &str = "deploy/helm/rotor/files/grafana-dashboard.json";
const RULES: &str = "deploy/helm/rotor/files/prometheus-rules.yaml";
/// The data source every panel and query names: the dashboard's variable.
const DATASOURCE: &str = "${datasource}";
const SEVERITIES: [&str; 3] = ["critical", "warning", "info"];

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace_root().join(path))
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"))
}

fn rules_file() -> Value {
    serde_saphyr::from_str(&read(RULES)).unwrap_or_else(|e| panic!("{RULES} is not YAML: {e}"))
}

/// Every panel of a dashboard, those inside collapsed rows included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        all.push(panel);
        all.extend(panel["panels"].as_array().into_iter().flatten());
    }
    all
}

/// Every rule of a rules file, across its groups.
fn rules(file: &Value) -> Vec<&Value> {
    file["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_array().into_iter().flatten())
        .collect()
}

/// One PromQL expression and where it is, for messages.
struct Query {
    at: String,
    expr: String,
}

fn dashboard_queries(dashboard: &Value) -> Vec<Query> {
    let mut queries = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push(Query {
                at: format!(
                    "{DASHBOARD}: panel {:?}, query {}",
                    panel["title"].as_str().unwrap_or_default(),
                    target["refId"].as_str().unwrap_or("?")
                ),
                expr: target["expr"].as_str().unwrap_or_default().to_string(),
            });
        }
    }
    queries
}

fn rule_queries(file: &Value) -> Vec<Query> {
    rules(file)
        .into_iter()
        .map(|rule| Query {
            at: format!(
                "{RULES}: alert {}",
                rule["alert"].as_str().unwrap_or("(no name)")
            ),
            expr: rule["expr"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}

/// The metric names of a PromQL expression that are rotor's: its identifiers starting with
/// `rotor_`, outside strings, comments and Grafana variables (`$__rate_interval`, `${x}`).
fn metric_names(expr: &str) -> Vec<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            quote @ ('"' | '\'' | '`') => {
                i += 1;
                while i < chars.len() && chars[i] != quote {
                    // Backquoted strings are raw; the others escape with a backslash.
                    if chars[i] == '\\' && quote != '`' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    while i < chars.len() && chars[i] != '}' {
                        i += 1;
                    }
                } else {
                    while i < chars.len() && word(chars[i]) {
                        i += 1;
                    }
                }
            }
            c if word(c) => {
                let start = i;
                while i < chars.len() && word(chars[i]) {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                if name.starts_with("rotor_") {
                    names.push(name);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Whether `text` is a Prometheus duration: numbers with the units y, w, d, h, m, s and ms, each
/// at most once and the largest first (`30m`, `1h30m`, `0m`).
fn is_duration(text: &str) -> bool {
    const UNITS: [&str; 7] = ["y", "w", "d", "h", "m", "s", "ms"];
    let mut rest = text;
    let mut last: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        // "ms" before "m".
        let Some(unit) = [6, 0, 1, 2, 3, 4, 5]
            .into_iter()
            .find(|&u| rest.starts_with(UNITS[u]))
        else {
            return false;
        };
        if last.is_some_and(|l| l >= unit) {
            return false;
        }
        last = Some(unit);
        rest = &rest[UNITS[unit].len()..];
    }
    last.is_some()
}

/// The series a selector run publishes (`--metrics-file`, `--pushgateway`): every figure is a
/// gauge, so its family's name.
fn selector_series() -> BTreeSet<String> {
    // A family is encoded only with a sample: one out-of-date node, one not judged.
    let figures = Compliance {
        provider: "kubernetes",
        nodes: 2,
        current: 0,
        outdated: BTreeMap::from([(("kubelet-version".into(), String::new()), 1)]),
        skipped: BTreeMap::from([("kubelet-version-missing".into(), 1)]),
        oldest_outdated: Some(("a".into(), 60)),
        tainted: 0,
        drained: 0,
        succeeded: true,
        finished_at: Timestamp::UNIX_EPOCH,
    };
    let exposition = figures.exposition() + &Compliance::failure_exposition(Timestamp::UNIX_EPOCH);
    exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// What is wrong with the rotor metrics that `queries` name.
fn check_metric_names(queries: &[Query], selector: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for query in queries {
        let names = metric_names(&query.expr);
        if names.is_empty() {
            problems.push(format!(
                "{}: {:?} names no rotor metric: query rotor's, or drop it",
                query.at, query.expr
            ));
        }
        for name in names {
            if name.contains(':') {
                problems.push(format!(
                    "{}: {name} is no series rotor serves (a recording rule's name? the shipped \
                     rules record none): fix the name",
                    query.at
                ));
            } else if name.starts_with("rotor_drainer_") {
                // Checked against the registry in crates/drainer/tests/monitoring_docs.rs.
            } else if name.starts_with("rotor_selector_") {
                if !selector.contains(&name) {
                    problems.push(format!(
                        "{}: {name} is not among the selector's figures {selector:?}: fix the \
                         name",
                        query.at
                    ));
                }
            } else {
                problems.push(format!(
                    "{}: {name} is neither the drainer's (rotor_drainer_) nor the selector's \
                     (rotor_selector_): fix the name",
                    query.at
                ));
            }
        }
    }
    problems
}

#[test]
fn every_rotor_metric_a_query_names_is_served() {
    let selector = selector_series();
    assert!(
        selector.contains("rotor_selector_last_run_success")
            && selector.contains("rotor_selector_outdated_nodes"),
        "read only {selector:?} from the selector's exposition: selector_series is broken"
    );
    let dashboard = dashboard_queries(&dashboard());
    let rules = rule_queries(&rules_file());
    assert!(
        dashboard.len() >= 10 && rules.len() >= 5,
        "found only {} queries in {DASHBOARD} and {} in {RULES}",
        dashboard.len(),
        rules.len()
    );
    let all: Vec<Query> = dashboard.into_iter().chain(rules).collect();
    assert_no_problems(
        "rotor metrics in the shipped queries",
        &check_metric_names(&all, &selector),
    );
}

#[test]
fn the_dashboard_asks_the_datasource_variable_everywhere() {
    let dashboard = dashboard();
    let mut problems = Vec::new();
    if dashboard["uid"] != "rotor" || dashboard["title"] != "rotor" {
        problems.push(format!(
            "uid {} and title {}: both must be \"rotor\" (links and the Helm chart's ConfigMap \
             rely on the uid)",
            dashboard["uid"], dashboard["title"]
        ));
    }
    if dashboard["schemaVersion"].as_u64().is_none_or(|v| v < 36) {
        problems.push(format!(
            "schemaVersion {}: 36 or later (data sources referenced by uid)",
            dashboard["schemaVersion"]
        ));
    }
    let variable = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "datasource");
    match variable {
        Some(v) if v["type"] == "datasource" && v["query"] == "prometheus" => {}
        other => problems.push(format!(
            "templating needs a variable named datasource of type datasource, query \
             prometheus; found {other:?}"
        )),
    }
    let panels = panels(&dashboard);
    let mut ids = BTreeSet::new();
    for panel in &panels {
        let title = panel["title"].as_str().unwrap_or_default();
        if !ids.insert(panel["id"].to_string()) {
            problems.push(format!("panel {title:?}: id {} is used twice", panel["id"]));
        }
        if panel["type"] == "row" {
            continue;
        }
        if panel["datasource"]["uid"] != DATASOURCE || panel["datasource"]["type"] != "prometheus" {
            problems.push(format!(
                "panel {title:?}: datasource {}, not {{\"type\": \"prometheus\", \"uid\": \
                 \"{DATASOURCE}\"}}",
                panel["datasource"]
            ));
        }
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("panel {title:?} has no query"));
        }
        for target in targets {
            let id = target["refId"].as_str().unwrap_or("?");
            if target["datasource"]["uid"] != DATASOURCE {
                problems.push(format!(
                    "panel {title:?}, query {id}: datasource {}, not uid {DATASOURCE}",
                    target["datasource"]
                ));
            }
            if target["expr"].as_str().is_none_or(|e| e.trim().is_empty()) {
                problems.push(format!("panel {title:?}, query {id}: no expr"));
            }
        }
    }
    assert!(
        panels.len() >= 10,
        "{DASHBOARD} has only {} panels",
        panels.len()
    );
    assert_no_problems(DASHBOARD, &problems);
}

#[test]
fn every_rule_is_an_alert_with_a_duration_a_severity_and_what_to_do() {
    let file = rules_file();
    let mut problems = Vec::new();
    let keys: Vec<&String> = file
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    if keys != ["groups"] {
        problems.push(format!(
            "the document must be only `groups:` (a PrometheusRule's spec, a rules file), not \
             {keys:?}"
        ));
    }
    let mut groups = BTreeSet::new();
    for group in file["groups"].as_array().into_iter().flatten() {
        let name = group["name"].as_str().unwrap_or_default();
        if name.is_empty() || !groups.insert(name) {
            problems.push(format!("group {name:?}: a name, unique in the file"));
        }
        if group["rules"].as_array().is_none_or(Vec::is_empty) {
            problems.push(format!("group {name:?} has no rules"));
        }
    }
    let mut alerts = BTreeSet::new();
    for rule in rules(&file) {
        let alert = rule["alert"].as_str().unwrap_or_default();
        let mut missing = |what: &str| problems.push(format!("alert {alert:?}: {what}"));
        // The docs tell users of the health gate to leave out `alertname=~"Rotor.+"`.
        if !alert.starts_with("Rotor") || !alerts.insert(alert) {
            missing("a unique name starting with Rotor (an `alert`, not a recording rule)");
        }
        if rule["expr"].as_str().is_none_or(|e| e.trim().is_empty()) {
            missing("no expr");
        }
        if !rule["for"].as_str().is_some_and(is_duration) {
            missing(&format!(
                "for {} is not a duration such as 30m",
                rule["for"]
            ));
        }
        if !rule["labels"]["severity"]
            .as_str()
            .is_some_and(|s| SEVERITIES.contains(&s))
        {
            missing(&format!(
                "labels.severity {} is not one of {SEVERITIES:?}",
                rule["labels"]["severity"]
            ));
        }
        if rule["annotations"]["summary"]
            .as_str()
            .is_none_or(|s| s.trim().is_empty())
        {
            missing("no annotations.summary");
        }
        if !rule["annotations"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("docs/operating.md"))
        {
            missing("annotations.description must say what to do and point to docs/operating.md");
        }
    }
    assert!(!alerts.is_empty(), "{RULES} has no alert");
    assert_no_problems(RULES, &problems);
}

/// Compares the alerts table (`<!-- alerts -->`) with the rules: the same alerts, the same
/// severities.
fn check_alerts_table(table: &MarkedTable, shipped: &BTreeMap<String, String>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut documented = BTreeSet::new();
    for row in &table.rows {
        let at = table.row_location(row);
        let Some(alert) = code_spans(&row.cells[0]).into_iter().next() else {
            problems.push(format!(
                "{at}: the alert cell must be the name in backticks"
            ));
            continue;
        };
        documented.insert(alert.clone());
        let severity = row.cells[1].trim_matches('`');
        match shipped.get(&alert) {
            None => problems.push(format!(
                "{at} documents {alert}, which {RULES} does not have: remove the row or fix the \
                 name"
            )),
            Some(s) if s != severity => problems.push(format!(
                "{at}: {alert} has severity {severity:?} in the docs, {s:?} in {RULES}"
            )),
            Some(_) => {}
        }
    }
    for alert in shipped.keys() {
        if !documented.contains(alert) {
            problems.push(format!(
                "{RULES} has {alert}, which the table at {} does not list: add a row",
                table.location()
            ));
        }
    }
    problems
}

#[test]
fn the_alerts_table_lists_exactly_the_shipped_alerts() {
    let file = rules_file();
    let shipped: BTreeMap<String, String> = rules(&file)
        .into_iter()
        .map(|rule| {
            (
                rule["alert"].as_str().unwrap_or_default().to_string(),
                rule["labels"]["severity"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    let table = doc_tables::the_one_table(
        &doc_tables::reference_pages(&workspace_root()),
        "alerts",
        "",
        &["alert", "severity", "fires when", "what to do"],
    );
    assert_no_problems(
        "docs alerts table against the rules",
        &check_alerts_table(&table, &shipped),
    );
}

/// `text` percent-encoded for a URL's query (RFC 3986's unreserved characters kept).
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A dashboard query as Grafana sends it: its global variables replaced by durations.
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("$__rate_interval", "4m")
        .replace("$__interval", "1m")
        .replace("$__range", "24h")
}

#[test]
fn prometheus_loads_the_rules_and_accepts_every_dashboard_query() {
    let bin = control_plane_bin().join("prometheus");
    assert!(
        bin.is_file(),
        "prometheus is missing from {}: build it with `tools/build.sh`",
        bin.display()
    );
    let dir = TestDir::new("monitoring-prometheus");
    // The shipped file itself, as `rule_files:` of a plain Prometheus takes it.
    let rules_path = workspace_root().join(RULES);
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  evaluation_interval: 1s\nrule_files:\n  - {}\n",
            serde_json::to_string(&rules_path).expect("a path as a JSON string")
        ),
    )
    .expect("write prometheus.yml");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut prometheus = Background::spawn(
        "prometheus",
        Command::new(&bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}")),
        dir.join("prometheus.log"),
    );
    // Prometheus exits at start when a rules file does not load.
    wait_until(
        "Prometheus to load the rules and answer /-/ready",
        Duration::from_secs(60),
        || {
            if let Some(status) = prometheus.exit_status() {
                panic!(
                    "Prometheus exited ({status}) loading {RULES}:\n{}",
                    prometheus.log()
                );
            }
            http_get(&addr, "/-/ready").ok().filter(|r| r.status == 200)
        },
    );

    // Each rule evaluated at least once: its health is then "ok" or "err" with the error.
    let loaded: Vec<Value> = wait_until(
        "Prometheus to evaluate every rule once",
        Duration::from_secs(30),
        || {
            let answer = http_get(&addr, "/api/v1/rules").ok()?;
            let body: Value = serde_json::from_str(&answer.body).ok()?;
            let rules: Vec<Value> = body["data"]["groups"]
                .as_array()?
                .iter()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .collect();
            let evaluated = !rules.is_empty() && rules.iter().all(|r| r["health"] != "unknown");
            evaluated.then_some(rules)
        },
    );
    let mut problems = Vec::new();
    let shipped: Vec<String> = rules(&rules_file())
        .iter()
        .map(|r| r["alert"].as_str().unwrap_or_default().to_string())
        .collect();
    let names: Vec<String> = loaded
        .iter()
        .map(|r| r["name"].as_str().unwrap_or_default().to_string())
        .collect();
    if names != shipped {
        problems.push(format!(
            "Prometheus loaded the rules {names:?}, the file has {shipped:?}"
        ));
    }
    for rule in &loaded {
        if rule["health"] != "ok" {
            problems.push(format!(
                "{RULES}: alert {}: Prometheus evaluates it with health {} and error {}",
                rule["name"], rule["health"], rule["lastError"]
            ));
        }
    }

    let queries = dashboard_queries(&dashboard());
    for query in &queries {
        let sent = as_grafana_sends(&query.expr);
        let path = format!("/api/v1/query?query={}", percent_encode(&sent));
        match http_get(&addr, &path) {
            Ok(answer) if answer.status == 200 => {}
            Ok(answer) => problems.push(format!(
                "{}: Prometheus refuses {sent:?} ({}): {}",
                query.at, answer.status, answer.body
            )),
            Err(e) => problems.push(format!("{}: cannot ask Prometheus: {e}", query.at)),
        }
    }
    assert!(!queries.is_empty(), "{DASHBOARD} has no query");
    assert_no_problems("the shipped rules and queries in Prometheus", &problems);
}

// --- The readers and checks, on inline text ---------------------------------------------------

#[test]
fn metric_names_skip_strings_comments_and_variables() {
    assert_eq!(
        metric_names(
            "sum by (outcome) (rate(rotor_drainer_evictions_total[$__rate_interval])) \
             / max(rotor_selector_nodes{verdict=\"rotor_x\\\"rotor_y\", a='rotor_z', \
             b=~`rotor_w\\`}) # rotor_comment\n+ my_rotor_q + ${rotor_var} + $rotor_var2 \
             - rotor_drainer_nodes:max + 1e3"
        ),
        [
            "rotor_drainer_evictions_total",
            "rotor_selector_nodes",
            "rotor_drainer_nodes:max",
        ]
    );
    assert!(metric_names("time() - 3 * 3600").is_empty());
}

#[test]
fn durations_as_prometheus_reads_them() {
    for good in ["0m", "30m", "2h", "7d", "1h30m", "500ms", "1w2d"] {
        assert!(is_duration(good), "{good}");
    }
    for bad in ["", "30", "m", "1.5h", "30m1h", "1h1h", "1x", "-1m", " 1m"] {
        assert!(!is_duration(bad), "{bad}");
    }
}

#[test]
fn check_metric_names_reports_each_kind_of_mistake() {
    let selector: BTreeSet<String> = ["rotor_selector_nodes".to_string()].into();
    let query = |expr: &str| Query {
        at: "q".into(),
        expr: expr.into(),
    };
    let problems = check_metric_names(
        &[
            query("max(rotor_selector_nodes) + max(rotor_drainer_anything)"),
            query("max(rotor_selector_node)"),
            query("rotor_sim_x"),
            query("up"),
            query("sum(rotor_drainer_nodes:max)"),
        ],
        &selector,
    );
    doc_tables::assert_problems_start_with(
        &problems,
        &[
            "q: rotor_selector_node is not among the selector's figures",
            "q: rotor_sim_x is neither",
            "q: \"up\" names no rotor metric",
            "q: rotor_drainer_nodes:max is no series rotor serves",
        ],
    );
}

#[test]
fn check_alerts_table_reports_each_kind_of_mismatch() {
    let page = "<!-- alerts -->\n\
                | alert | severity | fires when | what to do |\n|---|---|---|---|\n\
                | `RotorA` | warning | a | a |\n\
                | `RotorB` | warning | b | b |\n\
                | `RotorGone` | info | c | c |\n\
                | RotorPlain | info | d | d |\n";
    let table = doc_tables::marked_tables("docs/o.md", page, "alerts")
        .unwrap()
        .remove(0);
    let shipped: BTreeMap<String, String> = [
        ("RotorA", "warning"),
        ("RotorB", "critical"),
        ("RotorNew", "info"),
    ]
    .into_iter()
    .map(|(a, s)| (a.to_string(), s.to_string()))
    .collect();
    doc_tables::assert_problems_start_with(
        &check_alerts_table(&table, &shipped),
        &[
            "docs/o.md:5: RotorB has severity \"warning\" in the docs, \"critical\"",
            "docs/o.md:6 documents RotorGone, which",
            "docs/o.md:7: the alert cell must be the name in backticks",
            "deploy/helm/rotor/files/prometheus-rules.yaml has RotorNew, which the table at \
             docs/o.md:1 does not list",
        ],
    );
}
