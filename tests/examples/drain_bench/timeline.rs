//! A run at a glance: one row per original node (waiting for its drain, draining until its
//! last workload pod is gone, settling until it counts as drained), and under them the number
//! of Pending workload pods and each budget's allowed disruptions over time, for each
//! contestant on one time axis. Data ([`Timeline`]) and drawing ([`render`], SVG) are pure.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::time::Instant;

use crate::recorder::Record;

/// One original node, in seconds after t=0.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRow {
    pub name: String,
    /// Cordoned: its drain began.
    pub started: Option<f64>,
    /// Its last workload pod gone.
    pub emptied: Option<f64>,
    /// Marked drained, removed, or (the kubectl loop) its `kubectl drain` succeeded.
    pub done: Option<f64>,
}

/// A run's record relative to t=0.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pub rows: Vec<NodeRow>,
    /// Pending workload pods from each moment on.
    pub pending: Vec<(f64, usize)>,
    /// Of those, the ones the scheduler had found no room for (`PodScheduled` False,
    /// `Unschedulable`), from each moment on: Pending for want of room, not for the
    /// scheduler's turn.
    pub unschedulable: Vec<(f64, usize)>,
    /// Allowed disruptions of each budget from each moment on.
    pub budgets: BTreeMap<String, Vec<(f64, i64)>>,
    /// The last original node done (or the last moment seen).
    pub end: f64,
}

/// The latest of `times`, if every one is known.
fn all_of(times: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    times
        .collect::<Option<Vec<f64>>>()
        .map(|v| v.into_iter().fold(0.0, f64::max))
}

fn since(t0: Instant, t: Instant) -> f64 {
    t.saturating_duration_since(t0).as_secs_f64()
}

impl Timeline {
    /// When the last original node was done, if every one was.
    pub fn makespan(&self) -> Option<f64> {
        all_of(self.rows.iter().map(|r| r.done))
    }

    /// When the last original node held no workload pod (or was done), if every one did.
    pub fn all_emptied(&self) -> Option<f64> {
        all_of(self.rows.iter().map(|r| r.emptied.or(r.done)))
    }

    /// How many original nodes were done.
    pub fn done_count(&self) -> usize {
        self.rows.iter().filter(|r| r.done.is_some()).count()
    }

    pub fn from_record(
        record: &Record,
        names: &[String],
        kubectl_done: &HashMap<String, Instant>,
        t0: Instant,
    ) -> Timeline {
        let rows: Vec<NodeRow> = names
            .iter()
            .map(|name| {
                let seen = record.nodes.get(name).cloned().unwrap_or_default();
                let done = match (seen.done(), kubectl_done.get(name).copied()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                NodeRow {
                    name: name.clone(),
                    started: seen.cordoned.map(|t| since(t0, t)),
                    emptied: seen.emptied.map(|t| since(t0, t)),
                    done: done.map(|t| since(t0, t)),
                }
            })
            .collect();
        let end = rows.iter().filter_map(|r| r.done).fold(0.0f64, f64::max);
        Timeline {
            rows,
            pending: relative(&record.pending, t0),
            unschedulable: relative(&record.unschedulable, t0),
            budgets: record
                .budgets
                .iter()
                .map(|(k, s)| {
                    (
                        k.clone(),
                        s.iter().map(|(t, a)| (since(t0, *t), *a)).collect(),
                    )
                })
                .collect(),
            end,
        }
    }

    /// Pod-seconds Pending between t=0 and the end: every moment a workload pod had no node,
    /// the scheduler's own latency included.
    pub fn pending_seconds(&self) -> f64 {
        pod_seconds(&self.pending, self.end)
    }

    /// Pod-seconds between t=0 and the end that workload pods spent Pending after the scheduler
    /// had found no room for them.
    pub fn unschedulable_seconds(&self) -> f64 {
        pod_seconds(&self.unschedulable, self.end)
    }
}

/// `series` with each moment in seconds after `t0`.
fn relative(series: &[(Instant, usize)], t0: Instant) -> Vec<(f64, usize)> {
    series.iter().map(|(t, n)| (since(t0, *t), *n)).collect()
}

/// The integral of a step `series` of pod counts between t=0 and `end`.
fn pod_seconds(series: &[(f64, usize)], end: f64) -> f64 {
    let mut total = 0.0;
    for (i, (t, n)) in series.iter().enumerate() {
        let until = series.get(i + 1).map_or(end, |(next, _)| *next).min(end);
        let from = t.max(0.0);
        if until > from {
            total += (until - from) * *n as f64;
        }
    }
    total
}

const LABEL_W: f64 = 190.0;
const PLOT_W: f64 = 900.0;
const ROW_H: f64 = 5.0;
const PENDING_H: f64 = 60.0;
const BUDGET_H: f64 = 7.0;
const GAP: f64 = 26.0;
const WAITING: &str = "#d9d9d9";
const DRAINING: &str = "#3b75af";
const SETTLING: &str = "#ef8636";
const BLOCKED: &str = "#c53a32";

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The step function `series` (value from each moment on) at time `t`, before the first: `first`.
fn step_segments<T: Copy>(series: &[(f64, T)], end: f64) -> Vec<(f64, f64, T)> {
    series
        .iter()
        .enumerate()
        .map(|(i, (t, v))| {
            let until = series.get(i + 1).map_or(end, |(n, _)| *n).min(end);
            (t.max(0.0), until, *v)
        })
        .filter(|(a, b, _)| b > a)
        .collect()
}

/// Draws the contestants' timelines (`lanes`: a label and its timeline) on one time axis.
pub fn render(title: &str, lanes: &[(&str, &Timeline)]) -> String {
    let end = lanes
        .iter()
        .map(|(_, t)| t.end)
        .fold(1.0f64, f64::max)
        .ceil();
    let x = |t: f64| LABEL_W + PLOT_W * (t.clamp(0.0, end) / end);
    let lane_h = |t: &Timeline| {
        18.0 + t.rows.len() as f64 * ROW_H
            + 8.0
            + PENDING_H
            + 8.0
            + t.budgets.len() as f64 * BUDGET_H
    };
    let height = 40.0 + lanes.iter().map(|(_, t)| lane_h(t) + GAP).sum::<f64>() + 40.0;
    let width = LABEL_W + PLOT_W + 20.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="18" font-size="14" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="34">nodes: <tspan fill="{WAITING}">&#9632;</tspan> waiting  <tspan fill="{DRAINING}">&#9632;</tspan> draining (cordoned, pods leaving)  <tspan fill="{SETTLING}">&#9632;</tspan> settling (empty, not yet done); budgets: darker green = more disruptions allowed, <tspan fill="{BLOCKED}">&#9632;</tspan> none allowed</text>"#
    );
    let mut y = 48.0;
    for (label, t) in lanes {
        let _ = writeln!(
            s,
            r#"<text x="10" y="{:.1}" font-weight="bold">{} — {:.1} s</text>"#,
            y + 11.0,
            escape(label),
            t.end
        );
        y += 18.0;
        // One row per node.
        for (i, r) in t.rows.iter().enumerate() {
            let ry = y + i as f64 * ROW_H;
            let done = r.done.unwrap_or(end);
            let started = r.started.unwrap_or(done).min(done);
            let emptied = r.emptied.unwrap_or(done).clamp(started, done);
            for (a, b, fill) in [
                (0.0, started, WAITING),
                (started, emptied, DRAINING),
                (emptied, done, SETTLING),
            ] {
                if b > a {
                    let _ = writeln!(
                        s,
                        r#"<rect x="{:.1}" y="{ry:.1}" width="{:.1}" height="{:.1}" fill="{fill}"><title>{} {:.1}–{:.1} s</title></rect>"#,
                        x(a),
                        x(b) - x(a),
                        ROW_H - 1.0,
                        escape(&r.name),
                        a,
                        b
                    );
                }
            }
        }
        let _ = writeln!(
            s,
            r#"<text x="10" y="{:.1}">{} nodes</text>"#,
            y + t.rows.len() as f64 * ROW_H / 2.0 + 4.0,
            t.rows.len()
        );
        y += t.rows.len() as f64 * ROW_H + 8.0;
        // Pending pods, as a step line.
        let most = t.pending.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1) as f64;
        let py = |n: usize| y + PENDING_H - PENDING_H * (n as f64 / most);
        let mut path = String::new();
        for (a, b, n) in step_segments(&t.pending, t.end.max(end)) {
            let _ = write!(
                path,
                "{}{:.1},{:.1} L{:.1},{:.1} ",
                if path.is_empty() { "M" } else { "L" },
                x(a),
                py(n),
                x(b),
                py(n)
            );
        }
        let _ = writeln!(
            s,
            r##"<rect x="{LABEL_W}" y="{y:.1}" width="{PLOT_W}" height="{PENDING_H}" fill="none" stroke="#bbb"/><path d="{}" fill="none" stroke="#6a3d9a" stroke-width="1.5"/>"##,
            path.trim_end()
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="{:.1}">Pending pods (max {})</text>"#,
            y + PENDING_H / 2.0 + 4.0,
            most as usize
        );
        y += PENDING_H + 8.0;
        // Each budget's allowed disruptions, as a strip.
        for (name, series) in &t.budgets {
            let top = series.iter().map(|(_, a)| *a).max().unwrap_or(1).max(1) as f64;
            for (a, b, allowed) in step_segments(series, t.end.max(end)) {
                let fill = if allowed <= 0 {
                    BLOCKED.to_string()
                } else {
                    let k = 0.35 + 0.65 * (allowed as f64 / top);
                    format!(
                        "rgb({:.0},{:.0},{:.0})",
                        230.0 - 180.0 * k,
                        245.0 - 95.0 * k,
                        230.0 - 180.0 * k
                    )
                };
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{fill}"><title>{} allows {allowed} from {:.1} s</title></rect>"#,
                    x(a),
                    x(b) - x(a),
                    BUDGET_H - 1.0,
                    escape(name),
                    a
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="10" y="{:.1}" font-size="7">{}</text>"#,
                y + BUDGET_H - 1.0,
                escape(name)
            );
            y += BUDGET_H;
        }
        y += GAP;
    }
    // The time axis.
    let step = [5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0]
        .into_iter()
        .find(|s| end / s <= 12.0)
        .unwrap_or(600.0);
    let mut tick = 0.0;
    while tick <= end + 1e-9 {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="44" x2="{0:.1}" y2="{y:.1}" stroke="#000" stroke-opacity="0.08"/><text x="{0:.1}" y="{1:.1}" text-anchor="middle">{tick:.0} s</text>"##,
            x(tick),
            y + 12.0
        );
        tick += step;
    }
    let _ = writeln!(s, "</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline() -> Timeline {
        Timeline {
            rows: vec![
                NodeRow {
                    name: "general-0".into(),
                    started: Some(0.5),
                    emptied: Some(3.0),
                    done: Some(4.0),
                },
                NodeRow {
                    name: "general-1".into(),
                    started: Some(4.0),
                    emptied: None,
                    done: Some(10.0),
                },
            ],
            pending: vec![(-1.0, 0), (1.0, 20), (5.0, 5), (8.0, 0)],
            unschedulable: vec![(-1.0, 0), (2.0, 10), (5.0, 5), (7.0, 0)],
            budgets: BTreeMap::from([(
                "shop/checkout-0".to_string(),
                vec![(-1.0, 1), (1.0, 0), (6.0, 1)],
            )]),
            end: 10.0,
        }
    }

    #[test]
    fn the_makespan_is_the_last_node_done_and_only_once_every_node_is() {
        let mut t = timeline();
        assert_eq!(t.makespan(), Some(10.0));
        assert_eq!(
            t.all_emptied(),
            Some(10.0),
            "a node never seen empty counts when done"
        );
        assert_eq!(t.done_count(), 2);
        t.rows[0].done = None;
        assert_eq!(t.makespan(), None);
        assert_eq!(t.all_emptied(), Some(10.0));
        assert_eq!(t.done_count(), 1);
    }

    #[test]
    fn pending_pod_seconds_integrate_the_steps_from_t0_to_the_end() {
        // 20 pods for 4 s, then 5 for 3 s; nothing before t=0 counts.
        assert_eq!(timeline().pending_seconds(), 20.0 * 4.0 + 5.0 * 3.0);
    }

    #[test]
    fn unschedulable_pod_seconds_are_their_own_series_cut_at_the_end() {
        let mut t = timeline();
        // 10 pods for 3 s, then 5 for 2 s.
        assert_eq!(t.unschedulable_seconds(), 10.0 * 3.0 + 5.0 * 2.0);
        // Nothing after the end counts.
        t.end = 6.0;
        assert_eq!(t.unschedulable_seconds(), 10.0 * 3.0 + 5.0);
    }

    #[test]
    fn the_picture_has_a_bar_per_phase_and_marks_a_blocked_budget() {
        let t = timeline();
        let svg = render("bench-50 <real>", &[("rotor-drainer", &t)]);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("bench-50 &lt;real&gt;"));
        // general-0: waiting, draining, settling; general-1 never emptied: waiting, draining.
        assert_eq!(
            svg.matches(&format!(r#"fill="{WAITING}"><title>"#)).count(),
            2
        );
        assert_eq!(
            svg.matches(&format!(r#"fill="{DRAINING}"><title>"#))
                .count(),
            2
        );
        assert_eq!(
            svg.matches(&format!(r#"fill="{SETTLING}"><title>"#))
                .count(),
            1
        );
        assert!(svg.contains("shop/checkout-0 allows 0 from 1.0 s"));
        assert_eq!(
            svg.matches(&format!(r#"fill="{BLOCKED}"><title>"#)).count(),
            1
        );
        // The axis reaches the end: 0, 5 and 10 s.
        assert!(svg.contains(">10 s</text>"));
    }
}
