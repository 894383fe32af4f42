//! The demo on the terminal. On a tty, one panel redrawn in place (plain ANSI: cursor up, clear
//! to the end of the screen); otherwise, and with `--plain`, one line per change, so CI logs and
//! tests read well. Text is built by pure functions; only [`Display`] writes.

use std::io::Write;

use super::progress::{Counts, Event, Progress};
use super::summary::Summary;

/// Events shown at the bottom of the live panel.
const RECENT_EVENTS: usize = 8;

/// `  12.3s` for an event's time.
fn stamp(at: f64) -> String {
    format!("{at:6.1}s")
}

/// The counters on one line.
pub fn counts_line(c: &Counts) -> String {
    format!(
        "nodes {} (not ready {}) | outdated {} | tainted {} | draining {} (blocked {}) | drained {} | replaced {} | pods unschedulable {} | evictions {} (refused by budgets {}) | budget violations {}",
        c.total,
        c.not_ready,
        c.outdated,
        c.tainted,
        c.draining,
        c.blocked,
        c.drained,
        c.replaced,
        c.unschedulable_pods,
        c.evictions,
        c.refusals,
        c.violations
    )
}

pub fn event_line(e: &Event) -> String {
    format!("[{}] {}", stamp(e.at), e.change)
}

/// A `width`-cell bar: `done` of `of` filled.
fn bar(done: usize, of: usize, width: usize) -> String {
    let filled = (done * width).checked_div(of).unwrap_or(width).min(width);
    format!("[{}{}]", "#".repeat(filled), ".".repeat(width - filled))
}

/// The live panel: header, progress bar, counters, one line per node, recent events.
pub fn panel(title: &str, progress: &Progress, elapsed: f64) -> Vec<String> {
    let c = progress.counts();
    let of = progress.initially_outdated();
    let mut lines = vec![
        format!("{title}  {elapsed:.0}s"),
        format!(
            "replaced {} {}/{of}   outdated {}   budget violations {}",
            bar(c.replaced, of, 30),
            c.replaced,
            c.outdated,
            c.violations
        ),
        format!(
            "nodes {} (not ready {})  tainted {}  draining {} (blocked {})  drained {}",
            c.total, c.not_ready, c.tainted, c.draining, c.blocked, c.drained
        ),
        format!(
            "pods unschedulable {}  evictions {} (refused by budgets {})",
            c.unschedulable_pods, c.evictions, c.refusals
        ),
    ];
    if let Some(s) = progress.last() {
        for pool in &s.pools {
            lines.push(pool.to_string());
        }
    }
    lines.push(String::new());
    lines.push(format!(
        "  {:<30} {:<8} {:<11} {:<22} {:<9} {:<16} {}",
        "NODE", "GROUP", "ZONE", "VERSION", "STATUS", "ROTOR", "BLOCKER"
    ));
    if let Some(s) = progress.last() {
        for n in &s.nodes {
            let status = match (n.ready, n.outdated) {
                (false, _) => "booting",
                (true, true) => "outdated",
                (true, false) => "current",
            };
            let rotor = match (&n.phase, &n.taint) {
                (Some(p), _) => p.clone(),
                (None, Some(_)) => "tainted".into(),
                (None, None) => String::new(),
            };
            lines.push(format!(
                "  {:<30} {:<8} {:<11} {:<22} {:<9} {:<16} {}",
                n.name,
                n.group,
                n.zone,
                n.version,
                status,
                rotor,
                n.blocker.as_deref().unwrap_or("")
            ));
        }
    }
    lines.push(String::new());
    lines.push("recent:".into());
    for e in progress.recent(RECENT_EVENTS) {
        lines.push(format!("  {}", event_line(e)));
    }
    lines
}

/// The summary and the per-node timeline, as printed at the end.
pub fn summary_text(s: &Summary) -> Vec<String> {
    let mut out = vec![
        String::new(),
        format!(
            "rotation {}: {}",
            if s.completed {
                "complete"
            } else {
                "NOT complete"
            },
            s.outcome
        ),
        format!("  makespan            {:.1}s", s.makespan_seconds),
        format!(
            "  nodes replaced      {} of {} outdated at the start ({} still outdated)",
            s.nodes_replaced, s.nodes_outdated_at_start, s.nodes_outdated_now
        ),
        format!(
            "  evictions           {} ({} refused by budgets, retried)",
            s.evictions, s.eviction_refusals
        ),
        format!("  budget violations   {}", s.budget_violations),
        format!(
            "  selector runs       {} ({} failed)",
            s.selector_runs, s.selector_failures
        ),
        format!(
            "  pods unschedulable  {:.1} pod-seconds in all",
            s.unschedulable_pod_seconds
        ),
    ];
    for v in &s.violations {
        out.push(format!("  violation: {v}"));
    }
    for line in &s.stuck {
        out.push(format!("  stuck: {line}"));
    }
    for pool in &s.pools {
        out.push(format!("  {pool}"));
    }
    out.push(String::new());
    out.push("timeline (seconds since the upgrade):".into());
    out.push(format!(
        "  {:<30} {:<8} {:<11} {:>8} {:>8} {:>8} {:>8} {:>9}  {}",
        "NODE", "GROUP", "ZONE", "TAINTED", "DRAINING", "BLOCKED", "DRAINED", "REPLACED", "BLOCKER"
    ));
    let t = |v: Option<f64>| {
        v.map(|v| format!("{:.1}", super::progress::tenths(v)))
            .unwrap_or_else(|| "-".into())
    };
    for row in &s.timeline {
        out.push(format!(
            "  {:<30} {:<8} {:<11} {:>8} {:>8} {:>8} {:>8} {:>9}  {}",
            row.node,
            row.group,
            row.zone,
            t(row.tainted_at),
            t(row.drain_started_at),
            t(row.blocked_at),
            t(row.drained_at),
            t(row.replaced_at),
            row.blocker.as_deref().unwrap_or("")
        ));
    }
    out
}

/// `line` cut to `width` characters, so that no line wraps and redrawing in place stays exact.
fn fit(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_owned();
    }
    let mut out: String = line.chars().take(width.saturating_sub(1)).collect();
    out.push('~');
    out
}

/// The terminal's width: `stty size` on the controlling terminal, else `COLUMNS`, else 120.
fn terminal_width() -> usize {
    let from_stty = std::fs::File::open("/dev/tty").ok().and_then(|tty| {
        let out = std::process::Command::new("stty")
            .arg("size")
            .stdin(tty)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .nth(1)?
            .parse::<usize>()
            .ok()
    });
    from_stty
        .or_else(|| std::env::var("COLUMNS").ok()?.parse().ok())
        .filter(|w| *w >= 20)
        .unwrap_or(120)
}

/// Where the demo's progress goes.
pub enum Display {
    /// Redraw the panel in place; remembers how many lines the last draw took.
    Live { drawn: usize, width: usize },
    /// Append lines: each event, and the counters whenever they change.
    Plain { last_counts: Option<Counts> },
}

impl Display {
    pub fn new(live: bool) -> Display {
        if live {
            Display::Live {
                drawn: 0,
                width: terminal_width(),
            }
        } else {
            Display::Plain { last_counts: None }
        }
    }

    /// Shows what changed: in plain mode, `events` and the counters if they moved; live, the
    /// whole panel again.
    pub fn update(&mut self, title: &str, progress: &Progress, events: &[Event], elapsed: f64) {
        let mut out = std::io::stdout().lock();
        match self {
            Display::Live { drawn, width } => {
                let lines = panel(title, progress, elapsed);
                if *drawn > 0 {
                    let _ = write!(out, "\x1b[{}A\r\x1b[J", *drawn);
                }
                for l in &lines {
                    let _ = writeln!(out, "{}", fit(l.trim_end(), *width - 1));
                }
                *drawn = lines.len();
            }
            Display::Plain { last_counts } => {
                for e in events {
                    let _ = writeln!(out, "{}", event_line(e));
                }
                let c = progress.counts();
                if *last_counts != Some(c) {
                    let _ = writeln!(out, "[{}] {}", stamp(elapsed), counts_line(&c));
                    *last_counts = Some(c);
                }
            }
        }
        let _ = out.flush();
    }

    /// A line outside the panel (before it starts, or after it ends).
    pub fn say(&mut self, line: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
        if let Display::Live { drawn, .. } = self {
            // The panel starts below this line next time instead of overwriting it.
            *drawn = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::progress::{NodeView, PoolStatus, PoolView, Snapshot};
    use super::*;

    #[test]
    fn long_lines_are_cut_to_the_width() {
        assert_eq!(fit("abcdef", 6), "abcdef");
        assert_eq!(fit("abcdefg", 6), "abcde~");
        assert_eq!(fit("ééééé", 3), "éé~");
    }

    #[test]
    fn bars_fill_in_proportion() {
        assert_eq!(bar(0, 4, 8), "[........]");
        assert_eq!(bar(2, 4, 8), "[####....]");
        assert_eq!(bar(4, 4, 8), "[########]");
        assert_eq!(bar(0, 0, 4), "[####]", "nothing to replace is done");
    }

    #[test]
    fn the_panel_lists_every_node_with_its_rotor_phase() {
        let node = |name: &str, phase: Option<&str>| NodeView {
            name: name.into(),
            group: "general".into(),
            zone: "us-east-1a".into(),
            version: "v1.33.4".into(),
            outdated: true,
            ready: true,
            taint: Some("kubelet-version".into()),
            phase: phase.map(str::to_owned),
            blocker: None,
        };
        let p = Progress::new(Snapshot {
            at: 0.0,
            nodes: vec![node("a", Some("evicting")), node("b", None)],
            pools: vec![PoolView {
                name: "general".into(),
                status: Some(PoolStatus {
                    nodes: 2,
                    out_of_date: 2,
                    draining: 1,
                    budget: Some("2 of 2".into()),
                    ..PoolStatus::default()
                }),
                governs: Some(2),
            }],
            ..Snapshot::default()
        });
        let lines = panel("demo", &p, 1.0);
        let a = lines.iter().find(|l| l.contains(" a ")).unwrap();
        assert!(
            a.contains("evicting") && a.contains("outdated") && a.contains("general"),
            "{a}"
        );
        assert!(
            lines.contains(&"pool general: 2 nodes, 2 out of date, 1 draining, 0 drained, 0 blocked, budget 2 of 2".to_string()),
            "{lines:#?}"
        );
        let b = lines.iter().find(|l| l.contains(" b ")).unwrap();
        assert!(b.contains("tainted"), "{b}");
        assert!(lines[1].contains("0/2"), "{}", lines[1]);
    }
}
