//! How long the real control plane took over requests, read from its audit log: the
//! contestant's round trips, and the pace of the two controllers that work one item after
//! another (kube-scheduler's bindings, the disruption controller's budget status writes). The
//! simulator answers at once and sets those controllers' pace from the scenario's `bindTime`
//! and `budgetSyncTime`; these figures are what those are fitted to.
//!
//! Spans are (arrival, answer) at the API server in seconds, as
//! [`crate::real::request_spans`] gives them.

use std::collections::BTreeMap;

use crate::summary::median;

/// A worker is taken as busy with a queue when its next request comes this soon after its last
/// answer; longer gaps are waiting for work, not work.
const BUSY_GAP: f64 = 0.1;

fn ms(secs: f64) -> String {
    format!("{:.1}", secs * 1e3)
}

/// The contestant's most frequent kinds of request (at most five), each as the API server's
/// median and 90th percentile time.
pub fn contestant_lines(spans: &BTreeMap<String, Vec<(f64, f64)>>) -> Vec<String> {
    let mut kinds: Vec<(&String, &Vec<(f64, f64)>)> = spans.iter().collect();
    kinds.sort_by_key(|(kind, v)| (std::cmp::Reverse(v.len()), *kind));
    let mut lines = Vec::new();
    for (kind, v) in kinds.into_iter().take(5) {
        let mut t: Vec<f64> = v.iter().map(|(came, answered)| answered - came).collect();
        t.sort_by(f64::total_cmp);
        let p90 = t[(t.len() * 9 / 10).min(t.len() - 1)];
        lines.push(format!(
            "  {kind:<28} {:>6} / {:>6} ms ({} requests)",
            ms(median(t.clone()).unwrap_or(f64::NAN)),
            ms(p90),
            t.len()
        ));
    }
    if !lines.is_empty() {
        lines.insert(
            0,
            "API server time per request (audit log), median / 90th percentile:".into(),
        );
    }
    lines
}

/// One worker's pace: the API server's median time over its requests, and while it was busy
/// (its next request within [`BUSY_GAP`] of its last answer) the median time from one request's
/// arrival to the next's, its time per item. `None` without requests.
pub fn worker_line(what: &str, spans: &[(f64, f64)]) -> Option<String> {
    if spans.is_empty() {
        return None;
    }
    let time = median(
        spans
            .iter()
            .map(|(came, answered)| answered - came)
            .collect(),
    )?;
    let per_item: Vec<f64> = spans
        .windows(2)
        .filter(|w| w[1].0 - w[0].1 < BUSY_GAP)
        .map(|w| w[1].0 - w[0].0)
        .collect();
    let busy = per_item.len();
    Some(match median(per_item) {
        Some(item) => format!(
            "{what}: {} requests, {} ms each at the API server (median); while busy, one every {} ms (median of {busy})",
            spans.len(),
            ms(time),
            ms(item)
        ),
        None => format!(
            "{what}: {} requests, {} ms each at the API server (median); never busy",
            spans.len(),
            ms(time)
        ),
    })
}

/// The eviction handler's writes of budgets' status and how many conflicted (409) with another
/// write of the same budget: the handler tries those again only half a second later, so each
/// is an eviction that took 0.5 s more. `None` without writes.
pub fn budget_write_line(codes: &BTreeMap<u16, usize>) -> Option<String> {
    let writes: usize = codes.values().sum();
    if writes == 0 {
        return None;
    }
    let conflicts = codes.get(&409).copied().unwrap_or(0);
    Some(format!(
        "the eviction handler's budget status writes: {writes}, {conflicts} of them conflicts (each retried 0.5 s later)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contestants_most_frequent_kinds_with_median_and_90th_percentile() {
        let mut spans: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        spans.insert("get nodes".into(), vec![(0.0, 0.001)]);
        // Ten evictions taking 1 to 10 ms: median 5.5 ms, 90th percentile the tenth, 10 ms.
        spans.insert(
            "create pods/eviction".into(),
            (1..=10)
                .map(|n| (f64::from(n), f64::from(n) * 1.001))
                .collect(),
        );
        for kind in ["list pods", "patch nodes", "create events", "patch leases"] {
            spans.insert(kind.into(), vec![(1.0, 1.002), (2.0, 2.004)]);
        }
        let lines = contestant_lines(&spans);
        assert_eq!(lines.len(), 6, "a heading and five kinds: {lines:?}");
        assert!(lines[1].contains("create pods/eviction"), "{lines:?}");
        assert!(
            lines[1].contains("5.5 /   10.0 ms (10 requests)"),
            "{lines:?}"
        );
        assert!(
            !lines.iter().any(|l| l.contains("get nodes")),
            "the least frequent kind is left out: {lines:?}"
        );
        assert!(contestant_lines(&BTreeMap::new()).is_empty());
    }

    #[test]
    fn a_workers_pace_is_read_only_while_it_is_busy() {
        // A burst of four bindings 4 ms apart (each answered in 2 ms), then one alone 1 s later:
        // the gap before it is waiting, not work.
        let spans = [
            (10.000, 10.002),
            (10.004, 10.006),
            (10.008, 10.010),
            (10.012, 10.014),
            (11.014, 11.016),
        ];
        let line = worker_line("bindings", &spans).unwrap();
        assert!(line.contains("5 requests, 2.0 ms each"), "{line}");
        assert!(line.contains("one every 4.0 ms (median of 3)"), "{line}");
        let alone = worker_line("writes", &[(1.0, 1.01), (2.0, 2.01)]).unwrap();
        assert!(alone.ends_with("never busy"), "{alone}");
        assert_eq!(worker_line("nothing", &[]), None);
    }

    #[test]
    fn budget_write_conflicts_are_the_409s_among_every_answer() {
        let codes = BTreeMap::from([(200, 451), (409, 104)]);
        assert_eq!(
            budget_write_line(&codes).as_deref(),
            Some(
                "the eviction handler's budget status writes: 555, 104 of them conflicts (each retried 0.5 s later)"
            )
        );
        let clean = budget_write_line(&BTreeMap::from([(200, 3)])).unwrap();
        assert!(clean.contains(": 3, 0 of them conflicts"), "{clean}");
        assert_eq!(budget_write_line(&BTreeMap::new()), None);
    }
}
