//! Where a budget's cycle goes on the real control plane, read from the audit log. A budget that
//! allows one disruption lets the next eviction through only once the last evicted pod's
//! replacement is bound (the scheduler), reported Ready (kwok, after the pod's start-up) and
//! counted healthy (the disruption controller's status write); then the contestant sends the
//! next eviction. For each eviction of a budget's pods this gives those steps' times, and
//! [`CycleParts`] their spread: the part of the makespan that is the control plane's own
//! reaction, which rotor-sim (a step every tick, each controller at once) does not have.
//!
//! The pods are matched by name: the scenario names each budget after its workload, whose pods
//! are `<workload>-...`.

use serde_json::Value;

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
        let time = |key: &str| -> Option<f64> {
            let t: jiff::Timestamp = record[key].as_str()?.parse().ok()?;
            Some(t.as_nanosecond() as f64 / 1e9)
        };
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
        let prefix = format!("{budget}-");
        let calls: Vec<&Call> = self
            .0
            .iter()
            .filter(|c| c.name.starts_with(&prefix) || c.name == budget)
            .collect();
        cycles_of(&calls, budget)
    }
}

/// The cycles of one budget's calls, sorted by arrival.
fn cycles_of(calls: &[&Call], budget: &str) -> Vec<Cycle> {
    let pod = |c: &Call, sub: &str| c.resource == "pods" && c.subresource == sub;
    let evictions: Vec<&Call> = calls
        .iter()
        .copied()
        .filter(|c| pod(c, "eviction") && c.verb == "create" && (200..300).contains(&c.code))
        .collect();
    let mut cycles = Vec::new();
    for (i, ev) in evictions.iter().enumerate() {
        let Some(bind) = calls
            .iter()
            .find(|c| pod(c, "binding") && c.received >= ev.done)
        else {
            break;
        };
        // kwok reports the pod once, Ready, after its start-up; the last status write counts.
        let ready = calls
            .iter()
            .filter(|c| pod(c, "status") && c.name == bind.name && c.received >= bind.received)
            .map(|c| c.done)
            .reduce(f64::max);
        let counted = ready.and_then(|r| {
            calls
                .iter()
                .find(|c| {
                    c.resource == "poddisruptionbudgets"
                        && c.subresource == "status"
                        && c.name == budget
                        && c.code == 200
                        && c.received >= r
                })
                .map(|c| c.done)
        });
        let next = evictions.get(i + 1).map(|n| n.received);
        cycles.push(Cycle {
            bound: bind.done - ev.done,
            ready: ready.map(|r| r - ev.done),
            counted: counted.zip(ready).map(|(c, r)| c - r),
            next: next.zip(counted).map(|(n, c)| n - c),
        });
    }
    cycles
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

    /// One line per part, for the report.
    pub fn lines(&self, budget: &str) -> Vec<String> {
        let f = |(lo, mid, hi): (f64, f64, f64)| format!("{lo:.2} / {mid:.2} / {hi:.2} s");
        vec![
            format!(
                "budget {budget}: {} evictions' cycles (min / median / max)",
                self.cycles
            ),
            format!(
                "  replacement bound after the eviction (scheduler)      {}",
                f(self.bound)
            ),
            format!(
                "  replacement Ready after the eviction (start-up, kwok) {}",
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
    fn each_eviction_is_followed_to_its_replacement_the_budget_and_the_next_eviction() {
        // (received, answered, verb, resource, subresource, name), seconds past 10:00; "pdb"
        // stands for poddisruptionbudgets.
        let calls = [
            ("00.0", "00.2", "create", "pods", "eviction", "web-a"),
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
