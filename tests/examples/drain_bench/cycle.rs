//! Where a budget's cycle goes. A budget that allows one disruption lets the next eviction
//! through only once the last evicted pod's replacement is bound (the scheduler), reported Ready
//! (the kubelet: kwok or the simulator, after the pod's start-up) and counted healthy (the
//! disruption controller's status write); then the contestant sends the next eviction. For each
//! eviction of a budget's pods this gives those steps' times, and [`CycleParts`] their spread.
//!
//! Two sources give the same [`Moment`]s: the real control plane's audit log ([`AuditCalls`]:
//! when each request came and was answered), and the benchmark's own watches on both backends
//! (`crate::recorder`: when each change was seen), so that the simulator's reaction times can be
//! checked part by part against the real control plane's.
//!
//! The pods are matched by name: the scenario names each budget after its workload, whose pods
//! are `<workload>-...`.

use serde_json::Value;

use crate::real::audit_seconds;
use crate::summary::median;

/// One audit record, as far as the cycle needs it (seconds since the epoch).
#[derive(Clone, Debug, PartialEq)]
struct Call {
    received: f64,
    done: f64,
    verb: String,
    resource: String,
    subresource: String,
    name: String,
    code: i64,
}

impl Call {
    fn of(record: &Value) -> Option<Call> {
        if record["stage"] != "ResponseComplete" {
            return None;
        }
        let time = |key: &str| audit_seconds(record, key);
        let r = &record["objectRef"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        Some(Call {
            received: time("requestReceivedTimestamp")?,
            done: time("stageTimestamp")?,
            verb: text(&record["verb"]),
            resource: text(&r["resource"]),
            subresource: text(&r["subresource"]),
            name: text(&r["name"]),
            code: record["responseStatus"]["code"].as_i64().unwrap_or(0),
        })
    }
}

/// One eviction's cycle, in seconds: `bound` and `ready` after the eviction was answered,
/// `counted` after Ready, `next` (the next eviction of the budget's pods) after counted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cycle {
    pub bound: f64,
    pub ready: Option<f64>,
    pub counted: Option<f64>,
    pub next: Option<f64>,
}

/// The pod and budget calls of an audit log, parsed once for every budget's cycles.
pub struct AuditCalls(Vec<Call>);

impl AuditCalls {
    pub fn parse<'a>(lines: impl Iterator<Item = &'a str>) -> AuditCalls {
        let mut calls: Vec<Call> = lines
            .filter(|l| l.contains("\"pods\"") || l.contains("\"poddisruptionbudgets\""))
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|r| Call::of(&r))
            .filter(|c| c.resource == "pods" || c.resource == "poddisruptionbudgets")
            .collect();
        calls.sort_by(|a, b| a.received.total_cmp(&b.received));
        AuditCalls(calls)
    }

    /// The cycles of budget `budget`'s pods, in the order of their evictions (the last has no
    /// `next`). An eviction whose replacement never appears in the log ends the list.
    pub fn budget_cycles(&self, budget: &str) -> Vec<Cycle> {
        let pod = |c: &Call, sub: &str| c.resource == "pods" && c.subresource == sub;
        let moments: Vec<Moment> = self
            .0
            .iter()
            .filter_map(|c| {
                let what = if pod(c, "eviction") && c.verb == "create" {
                    // A refused eviction (429) is not one.
                    (200..300).contains(&c.code).then_some(Happened::Evicted)?
                } else if pod(c, "binding") {
                    Happened::Bound
                } else if pod(c, "status") {
                    // kwok reports the pod once, Ready, after its start-up.
                    Happened::Ready
                } else if c.resource == "poddisruptionbudgets"
                    && c.subresource == "status"
                    && c.code == 200
                {
                    Happened::Counted
                } else {
                    return None;
                };
                Some(Moment {
                    sent: c.received,
                    at: c.done,
                    what,
                    name: c.name.clone(),
                })
            })
            .collect();
        cycles_of(budget, &moments)
    }
}

/// What happened to one of a budget's pods, or to the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Happened {
    /// The pod was evicted (its deletion began).
    Evicted,
    /// A pod was bound to a node.
    Bound,
    /// The pod turned Ready (from the audit log: its status was written).
    Ready,
    /// The budget's status counted more healthy pods (from the audit log: it was written).
    Counted,
}

/// One [`Happened`], in seconds on one clock: `sent` when the request came (from a watch: when
/// the change was seen), `at` when it took effect (answered; from a watch: seen).
#[derive(Clone, Debug, PartialEq)]
pub struct Moment {
    pub sent: f64,
    pub at: f64,
    pub what: Happened,
    /// The pod's name; the budget's for [`Happened::Counted`].
    pub name: String,
}

/// The pod watch and the budget watch deliver changes made together (at one simulator step, or
/// a count written milliseconds after the Ready report) in either order: a count seen this
/// much before the Ready report is taken as following it.
const SAME_MOMENT: f64 = 0.02;

/// The cycles of budget `budget` from the moments of every pod and budget, in any order.
pub fn cycles_of(budget: &str, moments: &[Moment]) -> Vec<Cycle> {
    // A budget's moments: its pods' (named after its workload, `<budget>-...`) and its own
    // count.
    let prefix = format!("{budget}-");
    let mut moments: Vec<&Moment> = moments
        .iter()
        .filter(|m| match m.what {
            Happened::Counted => m.name == budget,
            _ => m.name.starts_with(&prefix),
        })
        .collect();
    moments.sort_by(|a, b| a.sent.total_cmp(&b.sent));
    let of = |what: Happened| moments.iter().copied().filter(move |m| m.what == what);
    let evictions: Vec<&Moment> = of(Happened::Evicted).collect();
    let mut cycles = Vec::new();
    for (i, ev) in evictions.iter().enumerate() {
        let Some(bind) = of(Happened::Bound).find(|m| m.sent >= ev.at) else {
            break;
        };
        // The last report counts: the pod is Ready by then.
        let ready = of(Happened::Ready)
            .filter(|m| m.name == bind.name && m.sent >= bind.sent)
            .map(|m| m.at)
            .reduce(f64::max);
        let counted = ready.and_then(|r| {
            of(Happened::Counted)
                .find(|m| m.sent >= r - SAME_MOMENT)
                .map(|m| m.at)
        });
        let next = evictions.get(i + 1).map(|n| n.sent);
        cycles.push(Cycle {
            bound: bind.at - ev.at,
            ready: ready.map(|r| r - ev.at),
            counted: counted.zip(ready).map(|(c, r)| (c - r).max(0.0)),
            next: next.zip(counted).map(|(n, c)| n - c),
        });
    }
    cycles
}

/// Of the budgets that allow one disruption over more than one pod (`budgets`: `namespace/name`
/// to (expected pods, allowed disruptions)), the one with the most cycles.
pub fn busiest(
    budgets: &std::collections::BTreeMap<String, (i64, i64)>,
    cycles: impl Fn(&str) -> Vec<Cycle>,
) -> Option<(&str, Vec<Cycle>)> {
    budgets
        .iter()
        .filter(|(_, (expected, allowed))| *expected > 1 && *allowed == 1)
        .map(|(key, _)| {
            let name = key.split_once('/').map_or(key.as_str(), |(_, n)| n);
            (name, cycles(name))
        })
        .filter(|(_, c)| !c.is_empty())
        .max_by_key(|(name, cycles)| (cycles.len(), std::cmp::Reverse(*name)))
}

/// Minimum, median and maximum of each part over a budget's cycles.
#[derive(Clone, Debug, PartialEq)]
pub struct CycleParts {
    pub cycles: usize,
    pub bound: (f64, f64, f64),
    pub ready: (f64, f64, f64),
    pub counted: (f64, f64, f64),
    pub next: (f64, f64, f64),
}

fn spread(v: Vec<f64>) -> (f64, f64, f64) {
    let lo = v.iter().copied().reduce(f64::min).unwrap_or(f64::NAN);
    let hi = v.iter().copied().reduce(f64::max).unwrap_or(f64::NAN);
    (lo, median(v).unwrap_or(f64::NAN), hi)
}

impl CycleParts {
    pub fn of(cycles: &[Cycle]) -> CycleParts {
        CycleParts {
            cycles: cycles.len(),
            bound: spread(cycles.iter().map(|c| c.bound).collect()),
            ready: spread(cycles.iter().filter_map(|c| c.ready).collect()),
            counted: spread(cycles.iter().filter_map(|c| c.counted).collect()),
            next: spread(cycles.iter().filter_map(|c| c.next).collect()),
        }
    }

    /// One line per part, for the report; `source` says where the moments were read.
    pub fn lines(&self, budget: &str, source: &str) -> Vec<String> {
        let f = |(lo, mid, hi): (f64, f64, f64)| format!("{lo:.2} / {mid:.2} / {hi:.2} s");
        vec![
            format!(
                "budget {budget}: {} evictions' cycles from the {source} (min / median / max)",
                self.cycles
            ),
            format!(
                "  replacement bound after the eviction (scheduler)      {}",
                f(self.bound)
            ),
            format!(
                "  replacement Ready after the eviction (start-up, kubelet) {}",
                f(self.ready)
            ),
            format!(
                "  counted healthy after Ready (disruption controller)   {}",
                f(self.counted)
            ),
            format!(
                "  next eviction after that (the contestant)             {}",
                f(self.next)
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An audit record; an eviction of a pod whose name ends in `x` is refused (429).
    fn record(at: &str, until: &str, verb: &str, resource: &str, sub: &str, name: &str) -> String {
        let resource = if resource == "pdb" {
            "poddisruptionbudgets"
        } else {
            resource
        };
        let code = match verb {
            "create" if sub == "eviction" && name.ends_with('x') => 429,
            "create" => 201,
            _ => 200,
        };
        serde_json::json!({
            "stage": "ResponseComplete", "verb": verb,
            "requestReceivedTimestamp": at, "stageTimestamp": until,
            "objectRef": {"resource": resource, "subresource": sub, "name": name},
            "responseStatus": {"code": code}
        })
        .to_string()
    }

    #[test]
    fn a_count_seen_just_before_the_ready_report_it_follows_is_its_count() {
        let m = |at: f64, what: Happened, name: &str| Moment {
            sent: at,
            at,
            what,
            name: name.into(),
        };
        // One simulator step made web-b Ready and wrote the count; the budget watch's event
        // came 5 ms before the pod watch's. The next count, 2 s later, is another pod's.
        let moments = [
            m(0.0, Happened::Evicted, "web-a"),
            m(0.1, Happened::Bound, "web-b"),
            m(2.095, Happened::Counted, "web"),
            m(2.1, Happened::Ready, "web-b"),
            m(2.3, Happened::Evicted, "web-c"),
            m(4.1, Happened::Counted, "web"),
        ];
        let cycles = cycles_of("web", &moments);
        let first = &cycles[0];
        assert_eq!(first.counted, Some(0.0), "{first:?}");
        let next = first.next.unwrap();
        assert!((next - 0.205).abs() < 1e-9, "{first:?}");
    }

    #[test]
    fn each_eviction_is_followed_to_its_replacement_the_budget_and_the_next_eviction() {
        // (received, answered, verb, resource, subresource, name), seconds past 10:00; "pdb"
        // stands for poddisruptionbudgets.
        let calls = [
            ("00.0", "00.2", "create", "pods", "eviction", "web-a"),
            // Other budgets' pods are not this budget's, though one's name starts with "web".
            ("00.3", "00.4", "create", "pods", "binding", "db-0"),
            ("00.4", "00.45", "create", "pods", "eviction", "webhook-1"),
            // Refused by the budget (429): not an eviction.
            ("00.5", "00.6", "create", "pods", "eviction", "web-x"),
            ("00.6", "00.7", "create", "pods", "binding", "web-b"),
            ("02.8", "02.9", "patch", "pods", "status", "web-b"),
            ("03.4", "03.5", "update", "pdb", "status", "web"),
            // Another budget's status is not this budget's.
            ("03.6", "03.7", "update", "pdb", "status", "db"),
            ("04.0", "04.2", "create", "pods", "eviction", "web-c"),
            ("04.4", "04.5", "create", "pods", "binding", "web-d"),
            ("06.5", "06.7", "patch", "pods", "status", "web-d"),
        ];
        let t = |s: &str| format!("2026-11-27T10:00:{s}Z");
        let log: Vec<String> = calls
            .iter()
            .map(|(at, until, verb, res, sub, name)| {
                record(&t(at), &t(until), verb, res, sub, name)
            })
            .collect();
        let cycles = AuditCalls::parse(log.iter().map(String::as_str)).budget_cycles("web");
        assert_eq!(cycles.len(), 2);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        let first = &cycles[0];
        assert!(close(first.bound, 0.5), "{first:?}");
        assert!(close(first.ready.unwrap(), 2.7), "{first:?}");
        assert!(close(first.counted.unwrap(), 0.6), "{first:?}");
        assert!(close(first.next.unwrap(), 0.5), "{first:?}");
        let last = &cycles[1];
        assert!(close(last.ready.unwrap(), 2.5), "{last:?}");
        assert_eq!(last.counted, None, "no status write after it");
        assert_eq!(last.next, None);
        let parts = CycleParts::of(&cycles);
        assert!(close(parts.ready.1, 2.6));
        assert!(close(parts.bound.0, 0.3));
    }
}
