//! The health gate's decisions (`--health-prometheus`, `--health-url`), with no I/O: which
//! alerts to ask Prometheus about, and how to judge each answer. Before a drain starts, every
//! configured check must be healthy: no alert matching the selector firing, every URL answering
//! 2xx. A check that cannot be asked, or answers what it should not, counts as unhealthy, with
//! words that say which and why: a gate that opens when its source is down would let a rotation
//! run through the very outage it is meant to stop for.
//!
//! The asking is in `controller::health_gate`.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rotor_core::http::{Answer, HttpError, HttpTarget};
use serde::Deserialize;

/// The health gate's settings; `None` in the config when no check is set.
#[derive(Clone, Debug)]
pub struct HealthConfig {
    /// Prometheus's base URL and the alerts that hold drains.
    pub prometheus: Option<(HttpTarget, AlertSelector)>,
    /// URLs that must answer 2xx.
    pub urls: Vec<HttpTarget>,
    /// Longest one check may take.
    pub timeout: Duration,
    /// How old a verdict may be when a start uses it; also how often checks repeat while they
    /// hold the next drain.
    pub interval: Duration,
}

impl HealthConfig {
    /// Every check, in the order they are asked and reported.
    pub fn checks(&self) -> Vec<Check> {
        let mut checks = Vec::new();
        if let Some((base, selector)) = &self.prometheus {
            checks.push(Check::Alerts {
                query: base.with_path_and_query("/api/v1/query", &[("query", &selector.query())]),
                base: base.clone(),
            });
        }
        checks.extend(self.urls.iter().cloned().map(Check::Url));
        checks
    }
}

/// One health check.
#[derive(Clone, Debug)]
pub enum Check {
    /// Prometheus's instant-query API, asked for the firing alerts the selector matches.
    Alerts { base: HttpTarget, query: HttpTarget },
    /// A URL that must answer 2xx.
    Url(HttpTarget),
}

impl Check {
    /// The URL to GET.
    pub fn target(&self) -> &HttpTarget {
        match self {
            Check::Alerts { query, .. } => query,
            Check::Url(url) => url,
        }
    }

    /// The metrics' `check` label.
    pub fn kind(&self) -> &'static str {
        match self {
            Check::Alerts { .. } => "prometheus",
            Check::Url(_) => "url",
        }
    }

    /// Judges what the GET returned: `Ok` healthy, `Err` why not (the check named).
    pub fn judge(&self, got: Result<Answer, HttpError>) -> Result<(), Unhealthy> {
        match self {
            Check::Alerts { base, .. } => {
                let who = format!("Prometheus at {}", base.shown());
                match got {
                    Ok(answer) => judge_alerts(&answer).map_err(|why| Unhealthy {
                        kind: why.kind(),
                        words: format!("{who}: {why}"),
                    }),
                    Err(e) => Err(Unhealthy::unreachable(&who, &e)),
                }
            }
            Check::Url(url) => {
                let who = format!("health URL {}", url.shown());
                match got {
                    Ok(answer) => judge_url(&answer).map_err(|words| Unhealthy {
                        kind: UnhealthyKind::Answer,
                        words: format!("{who} {words}"),
                    }),
                    Err(e) => Err(Unhealthy::unreachable(&who, &e)),
                }
            }
        }
    }
}

/// Why one check is not healthy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unhealthy {
    pub kind: UnhealthyKind,
    /// What an operator reads: the check, and what it said.
    pub words: String,
}

/// How a check failed, for the metrics' `result` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnhealthyKind {
    /// Alerts are firing.
    Firing,
    /// It answered, but not healthy (a non-2xx, or not the answer it should give).
    Answer,
    /// No answer: refused, timed out, unreadable.
    Unreachable,
}

impl UnhealthyKind {
    pub fn label(self) -> &'static str {
        match self {
            UnhealthyKind::Firing => "firing",
            UnhealthyKind::Answer => "unhealthy",
            UnhealthyKind::Unreachable => "unreachable",
        }
    }
}

impl Unhealthy {
    fn unreachable(who: &str, e: &HttpError) -> Unhealthy {
        Unhealthy {
            kind: UnhealthyKind::Unreachable,
            words: format!("{who}: {e} (an unreachable check counts as unhealthy)"),
        }
    }
}

impl fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.words)
    }
}

/// The gate's verdict over every check: open, or closed for the reasons given, in check order.
pub fn verdict(results: &[Result<(), Unhealthy>]) -> Result<(), String> {
    let reasons: Vec<&str> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|u| u.words.as_str()))
        .collect();
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(reasons.join("; "))
    }
}

/// What is wrong with Prometheus's answer.
#[derive(Debug, PartialEq, Eq)]
enum AlertsAnswer {
    Firing(Vec<String>, usize),
    Refused(u16, String),
    NotTheApi(String),
}

impl AlertsAnswer {
    fn kind(&self) -> UnhealthyKind {
        match self {
            AlertsAnswer::Firing(..) => UnhealthyKind::Firing,
            AlertsAnswer::Refused(..) | AlertsAnswer::NotTheApi(_) => UnhealthyKind::Answer,
        }
    }
}

impl fmt::Display for AlertsAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlertsAnswer::Firing(names, count) => write!(
                f,
                "{count} alert(s) firing that hold drains ({}); drains start again once they resolve",
                names.join(", ")
            ),
            AlertsAnswer::Refused(status, error) => write!(
                f,
                "the query was refused with {status}: {error}; check --health-alert-selector"
            ),
            AlertsAnswer::NotTheApi(why) => write!(
                f,
                "the answer is not Prometheus's query API ({why}); --health-prometheus must be Prometheus's base URL, the one its /graph page is under"
            ),
        }
    }
}

/// Prometheus's `/api/v1/query` answer, as far as the gate reads it.
#[derive(Deserialize)]
struct QueryAnswer {
    status: String,
    #[serde(default)]
    data: Option<QueryData>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct QueryData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Sample>,
}

#[derive(Deserialize)]
struct Sample {
    #[serde(default)]
    metric: std::collections::BTreeMap<String, String>,
}

/// Alert names shown at most, so a storm of alerts makes one readable line.
const NAMES_SHOWN: usize = 5;

fn judge_alerts(answer: &Answer) -> Result<(), AlertsAnswer> {
    let parsed: QueryAnswer = match serde_json::from_slice(&answer.body) {
        Ok(parsed) => parsed,
        Err(_) if !(200..300).contains(&answer.status) => {
            return Err(AlertsAnswer::NotTheApi(format!(
                "HTTP {} {}",
                answer.status,
                first_line(&answer.body)
            )));
        }
        Err(e) => return Err(AlertsAnswer::NotTheApi(format!("not its JSON: {e}"))),
    };
    if parsed.status != "success" {
        let error = match (parsed.error_type, parsed.error) {
            (Some(t), Some(e)) => format!("{t}: {e}"),
            (_, Some(e)) => e,
            (t, None) => t.unwrap_or_else(|| format!("status {:?}", parsed.status)),
        };
        return Err(AlertsAnswer::Refused(answer.status, error));
    }
    let Some(data) = parsed.data else {
        return Err(AlertsAnswer::NotTheApi("a success without data".into()));
    };
    if data.result_type != "vector" {
        return Err(AlertsAnswer::NotTheApi(format!(
            "a {} where the ALERTS query gives a vector",
            data.result_type
        )));
    }
    if data.result.is_empty() {
        return Ok(());
    }
    // One alert firing for many targets is one series each: name each alert once.
    let names: BTreeSet<String> = data
        .result
        .iter()
        .map(|s| {
            s.metric
                .get("alertname")
                .cloned()
                .unwrap_or_else(|| "(unnamed)".into())
        })
        .collect();
    let mut shown: Vec<String> = names.iter().take(NAMES_SHOWN).cloned().collect();
    if names.len() > NAMES_SHOWN {
        shown.push(format!("and {} more", names.len() - NAMES_SHOWN));
    }
    Err(AlertsAnswer::Firing(shown, data.result.len()))
}

/// Longest part of a body quoted in a reason.
const QUOTED: usize = 200;

fn judge_url(answer: &Answer) -> Result<(), String> {
    if (200..300).contains(&answer.status) {
        return Ok(());
    }
    let said = first_line(&answer.body);
    if said.is_empty() {
        Err(format!("answered {}", answer.status))
    } else {
        Err(format!("answered {}: {said}", answer.status))
    }
}

fn first_line(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    match line.char_indices().nth(QUOTED) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}

/// `--health-alert-selector`: PromQL label matchers (`severity="critical",namespace=~"prod-.*"`)
/// that pick the firing alerts that hold drains. Parsed here, so a typo stops the drainer at start
/// rather than closing the gate for good; regular expressions are checked by Prometheus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertSelector(Vec<Matcher>);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Matcher {
    label: String,
    op: &'static str,
    value: String,
}

/// The default selector: every firing alert but those kube-prometheus keeps firing on purpose
/// (`Watchdog` proves the alerting pipeline works; `InfoInhibitor` only silences info alerts)
/// and rotor's own (deploy/helm/rotor/files/prometheus-rules.yaml, all named `Rotor...`): a
/// long rotation's `RotorNodesOutOfDate` must not hold the drains that end it.
pub const DEFAULT_ALERT_SELECTOR: &str = r#"alertname!~"Watchdog|InfoInhibitor|Rotor.+""#;

impl AlertSelector {
    /// The instant query for the firing alerts this selector matches.
    pub fn query(&self) -> String {
        let mut matchers = vec![r#"alertstate="firing""#.to_string()];
        matchers.extend(
            self.0
                .iter()
                .map(|m| format!("{}{}{}", m.label, m.op, promql_string(&m.value))),
        );
        format!("ALERTS{{{}}}", matchers.join(","))
    }
}

impl FromStr for AlertSelector {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut rest = s.trim();
        // Written as in PromQL, braces and all, is accepted too.
        if let Some(inner) = rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
            rest = inner.trim();
        }
        let mut matchers = Vec::new();
        while !rest.is_empty() {
            let (matcher, after) = parse_matcher(rest)?;
            matchers.push(matcher);
            rest = after.trim_start();
            if let Some(after_comma) = rest.strip_prefix(',') {
                rest = after_comma.trim_start();
            } else if !rest.is_empty() {
                return Err(format!(
                    "expected ',' between matchers, found {rest:?}; write matchers as label=\"value\", label!~\"regex\""
                ));
            }
        }
        if matchers.iter().any(|m| m.label == "alertstate") {
            return Err(
                "alertstate is set by rotor (only firing alerts hold drains); leave it out".into(),
            );
        }
        Ok(AlertSelector(matchers))
    }
}

fn parse_matcher(s: &str) -> Result<(Matcher, &str), String> {
    let label_end = s
        .char_indices()
        .find(|&(i, c)| !(c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())))
        .map_or(s.len(), |(i, _)| i);
    if label_end == 0 {
        return Err(format!(
            "expected a label name at {s:?} (letters, digits and '_', not starting with a digit)"
        ));
    }
    let label = &s[..label_end];
    let after_label = s[label_end..].trim_start();
    let op = ["!=", "=~", "!~", "="]
        .into_iter()
        .find(|op| after_label.starts_with(op))
        .ok_or_else(|| {
            format!("expected =, !=, =~ or !~ after {label:?}, found {after_label:?}")
        })?;
    let after_op = after_label[op.len()..].trim_start();
    let (value, after) = parse_quoted(after_op).map_err(|problem| {
        format!("expected a quoted value after {label}{op}, found {after_op:?}: {problem}")
    })?;
    Ok((
        Matcher {
            label: label.to_string(),
            op,
            value,
        },
        after,
    ))
}

/// A PromQL string in double or single quotes, read as Prometheus reads it, and what follows it.
/// The escapes are Go's: `\a \b \f \n \r \t \v \\`, the quote itself, `\NNN` (octal) and
/// `\xNN` (bytes), `\uNNNN` and `\UNNNNNNNN`; any other escape, a raw newline or escaped bytes
/// that are not UTF-8 are refused, as Prometheus refuses them (`"a\.b"` must be `"a\\.b"`).
fn parse_quoted(s: &str) -> Result<(String, &str), String> {
    let quote = s
        .chars()
        .next()
        .filter(|c| *c == '"' || *c == '\'')
        .ok_or("a value is written in double or single quotes")?;
    let unclosed = || format!("the string is not closed with {quote}");
    let mut value: Vec<u8> = Vec::new();
    let push = |value: &mut Vec<u8>, c: char| value.extend(c.encode_utf8(&mut [0; 4]).as_bytes());
    let mut chars = s.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            c if c == quote => {
                let value = String::from_utf8(value)
                    .map_err(|_| "its escaped bytes are not UTF-8 text".to_string())?;
                return Ok((value, &s[i + 1..]));
            }
            '\n' => return Err("a newline in a value is written \\n".into()),
            '\\' => {
                let (_, escape) = chars.next().ok_or_else(unclosed)?;
                let simple = match escape {
                    'a' => Some('\u{7}'),
                    'b' => Some('\u{8}'),
                    'f' => Some('\u{c}'),
                    'n' => Some('\n'),
                    'r' => Some('\r'),
                    't' => Some('\t'),
                    'v' => Some('\u{b}'),
                    '\\' => Some('\\'),
                    e if e == quote => Some(e),
                    _ => None,
                };
                if let Some(c) = simple {
                    push(&mut value, c);
                    continue;
                }
                let (digits, radix, first) = match escape {
                    '0'..='7' => (2, 8, escape.to_digit(8)),
                    'x' => (2, 16, None),
                    'u' => (4, 16, None),
                    'U' => (8, 16, None),
                    other => {
                        return Err(format!(
                            "unknown escape sequence \\{other} (a backslash is written \\\\)"
                        ));
                    }
                };
                let mut code = first.unwrap_or(0);
                for _ in 0..digits {
                    let (_, d) = chars.next().ok_or_else(unclosed)?;
                    let d = d
                        .to_digit(radix)
                        .ok_or_else(|| format!("{d:?} in the escape sequence \\{escape}"))?;
                    code = code * radix + d;
                }
                if matches!(escape, 'u' | 'U') {
                    let c = char::from_u32(code).ok_or_else(|| {
                        format!("the escape sequence \\{escape} is not a Unicode character")
                    })?;
                    push(&mut value, c);
                } else {
                    value.push(u8::try_from(code).map_err(|_| {
                        format!("the octal escape sequence \\{escape} is above 255")
                    })?);
                }
            }
            c => push(&mut value, c),
        }
    }
    Err(unclosed())
}

/// `value` as a PromQL double-quoted string that [`parse_quoted`] (and Prometheus) read back as
/// `value`: backslashes, quotes and control characters escaped.
fn promql_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn prometheus() -> HttpTarget {
        "http://prometheus.monitoring:9090".parse().unwrap()
    }

    fn alerts_check() -> Check {
        HealthConfig {
            prometheus: Some((prometheus(), DEFAULT_ALERT_SELECTOR.parse().unwrap())),
            urls: vec![],
            timeout: Duration::from_secs(5),
            interval: Duration::from_secs(10),
        }
        .checks()
        .remove(0)
    }

    fn answer(status: u16, body: &str) -> Result<Answer, HttpError> {
        Ok(Answer {
            status,
            body: Bytes::from(body.to_string()),
        })
    }

    /// Prometheus 3's answer to an ALERTS query with two series of one alert and one of another.
    const FIRING: &str = r#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"__name__":"ALERTS","alertname":"KubePodCrashLooping","alertstate":"firing","namespace":"shop","severity":"warning"},"value":[1764165600.123,"1"]},
        {"metric":{"__name__":"ALERTS","alertname":"KubePodCrashLooping","alertstate":"firing","namespace":"cart","severity":"warning"},"value":[1764165600.123,"1"]},
        {"metric":{"__name__":"ALERTS","alertname":"KubeNodeNotReady","alertstate":"firing","node":"ip-10-0-1-7","severity":"warning"},"value":[1764165600.123,"1"]}]}}"#;

    #[test]
    fn firing_alerts_close_the_gate_naming_each_alert_once() {
        let err = alerts_check().judge(answer(200, FIRING)).unwrap_err();
        assert_eq!(err.kind, UnhealthyKind::Firing);
        assert_eq!(
            err.words,
            "Prometheus at http://prometheus.monitoring:9090/: 3 alert(s) firing that hold drains (KubeNodeNotReady, KubePodCrashLooping); drains start again once they resolve"
        );
    }

    #[test]
    fn no_firing_alert_is_healthy() {
        let empty = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(alerts_check().judge(answer(200, empty)), Ok(()));
    }

    #[test]
    fn answers_that_are_not_an_all_clear_close_the_gate() {
        let cases = [
            (
                400,
                r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:8: parse error: unexpected character"}"#,
                "refused with 400: bad_data: invalid parameter",
            ),
            (
                503,
                r#"{"status":"error","errorType":"unavailable","error":"TSDB not ready"}"#,
                "refused with 503: unavailable: TSDB not ready",
            ),
            (
                404,
                "404 page not found\n",
                "not Prometheus's query API (HTTP 404 404 page not found)",
            ),
            (200, "<html>Grafana</html>", "not its JSON"),
            (
                200,
                r#"{"status":"success","data":{"resultType":"scalar","result":[]}}"#,
                "a scalar where",
            ),
        ];
        for (status, body, expected) in cases {
            let err = alerts_check().judge(answer(status, body)).unwrap_err();
            assert_eq!(err.kind, UnhealthyKind::Answer, "{body}");
            assert!(err.words.contains(expected), "{body}: {}", err.words);
        }
    }

    #[test]
    fn an_unreachable_check_is_unhealthy_and_says_so() {
        let err = alerts_check()
            .judge(Err(HttpError::Unreachable("connection refused".into())))
            .unwrap_err();
        assert_eq!(err.kind, UnhealthyKind::Unreachable);
        assert!(err.words.contains("could not reach it: connection refused"));
        assert!(err.words.contains("counts as unhealthy"));
        let url = Check::Url("http://db-health.ops/ready".parse().unwrap());
        let err = url
            .judge(Err(HttpError::Timeout(Duration::from_secs(5))))
            .unwrap_err();
        assert_eq!(
            err.words,
            "health URL http://db-health.ops/ready: no answer within 5s (an unreachable check counts as unhealthy)"
        );
    }

    #[test]
    fn urls_must_answer_2xx_and_their_words_are_quoted() {
        let url = Check::Url("http://db-health.ops/ready".parse().unwrap());
        assert_eq!(url.judge(answer(204, "")), Ok(()));
        let err = url
            .judge(answer(503, "\n  migration in progress\nstep 3/7"))
            .unwrap_err();
        assert_eq!(
            err.words,
            "health URL http://db-health.ops/ready answered 503: migration in progress"
        );
        let long = "x".repeat(500);
        let err = url.judge(answer(500, &long)).unwrap_err();
        assert_eq!(
            err.words.chars().count(),
            "health URL http://db-health.ops/ready answered 500: ".len() + QUOTED + 1
        );
    }

    #[test]
    fn the_verdict_names_every_unhealthy_check_in_order() {
        let firing = Err(Unhealthy {
            kind: UnhealthyKind::Firing,
            words: "a".into(),
        });
        let down = Err(Unhealthy {
            kind: UnhealthyKind::Unreachable,
            words: "b".into(),
        });
        assert_eq!(verdict(&[Ok(()), Ok(())]), Ok(()));
        assert_eq!(verdict(&[firing, Ok(()), down]), Err("a; b".into()));
    }

    #[test]
    fn selectors_parse_into_the_alerts_query() {
        let cases = [
            ("", r#"ALERTS{alertstate="firing"}"#),
            (
                DEFAULT_ALERT_SELECTOR,
                r#"ALERTS{alertstate="firing",alertname!~"Watchdog|InfoInhibitor|Rotor.+"}"#,
            ),
            (
                r#"{ severity = "critical" , namespace=~'prod-.*' }"#,
                r#"ALERTS{alertstate="firing",severity="critical",namespace=~"prod-.*"}"#,
            ),
            (
                r#"summary!="say \"hi\" \\ bye""#,
                r#"ALERTS{alertstate="firing",summary!="say \"hi\" \\ bye"}"#,
            ),
        ];
        for (input, query) in cases {
            let selector: AlertSelector = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(selector.query(), query, "{input}");
        }
    }

    /// Found by the properties in `fuzz.rs`: every escape was read as the character after the
    /// backslash, so `"\n"` meant `n` and `"prod\.x"` the regex `prod.x`, where Prometheus
    /// reads a newline and refuses `\.`; and a newline in a value went into the query raw.
    #[test]
    fn values_are_read_as_promql_strings() {
        let value = |input: &str| input.parse::<AlertSelector>().map(|s| s.0[0].value.clone());
        assert_eq!(value(r#"a="x\ny""#), Ok("x\ny".into()));
        assert_eq!(value(r#"a="\u00e9\x41\101\t""#), Ok("éAA\t".into()));
        assert_eq!(value(r#"a='it\'s'"#), Ok("it's".into()));
        assert_eq!(value(r#"a=~"prod\\.x""#), Ok(r"prod\.x".into()));
        for bad in [
            r#"a=~"prod\.x""#,
            r#"a='\"'"#,
            "a=\"x\ny\"",
            r#"a="\xff""#,
            r#"a="\ud800""#,
            r#"a="\400""#,
            r#"a="\x4""#,
        ] {
            let err = bad.parse::<AlertSelector>().unwrap_err();
            assert!(err.contains("expected a quoted value"), "{bad}: {err}");
        }
        let selector: AlertSelector = r#"a="x\ny",b="\u0007""#.parse().unwrap();
        assert_eq!(
            selector.query(),
            r#"ALERTS{alertstate="firing",a="x\ny",b="\u0007"}"#
        );
    }

    #[test]
    fn bad_selectors_say_what_is_wrong() {
        let cases = [
            ("severity", "expected =, !=, =~ or !~"),
            ("severity=critical", "expected a quoted value"),
            (r#"severity="critical"#, "expected a quoted value"),
            (r#"severity="critical" team="a""#, "expected ','"),
            (r#"1abc="x""#, "expected a label name"),
            (r#"alertstate="pending""#, "alertstate is set by rotor"),
        ];
        for (input, expected) in cases {
            let err = input.parse::<AlertSelector>().unwrap_err();
            assert!(err.contains(expected), "{input}: {err}");
        }
    }
}
