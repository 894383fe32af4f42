//! `rotor-drainer status`: the nodes rotor is working on, read from their taint and annotations
//! (no access to the drainer itself is needed), as a table or JSON.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use rotor_core::contract::{find_drain_taint, pre_drain_hooks};
use serde::Serialize;

use crate::record::node::DrainRecord;

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct StatusRow {
    pub node: String,
    pub phase: String,
    pub reason: String,
    /// Since the drain started (or `-`).
    pub age: String,
    pub attempts: u32,
    /// What blocks the node now, or the last error.
    pub detail: String,
}

fn age(since: Option<Timestamp>, now: Timestamp) -> String {
    let Some(t) = since else { return "-".into() };
    let s = now.duration_since(t).as_secs().max(0);
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172800 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d", s / 86400),
    }
}

impl StatusRow {
    /// A row for a node carrying the drain taint or rotor's drain state; `None` otherwise.
    /// `waiting` is why the leader last held each node that has not started (the rotation
    /// record's), shown for a waiting node that nothing else explains.
    pub fn from_node(
        node: &Node,
        now: Timestamp,
        waiting: &std::collections::BTreeMap<String, String>,
    ) -> Option<StatusRow> {
        let taint = find_drain_taint(node);
        let record = DrainRecord::from_annotations(node.metadata.annotations.as_ref());
        if taint.is_none() && record.phase.is_none() {
            return None;
        }
        let phase = match (record.phase, taint.is_some()) {
            (Some(p), true) => p.slug().to_string(),
            (Some(p), false) => format!("{} (taint removed)", p.slug()),
            (None, _) => "waiting".to_string(),
        };
        Some(StatusRow {
            node: node.metadata.name.clone().unwrap_or_default(),
            phase,
            reason: taint
                .and_then(|t| t.value.clone())
                .unwrap_or_else(|| "-".into()),
            age: age(record.started_at, now),
            attempts: record.attempts,
            detail: record
                .blocker
                .clone()
                .or(record.last_error.clone())
                .or_else(|| {
                    let hooks = pre_drain_hooks(&node.metadata);
                    (!hooks.is_empty() && !record.is_active())
                        .then(|| format!("held by pre-drain hook(s) {}", hooks.join(", ")))
                })
                .or_else(|| {
                    record
                        .phase
                        .is_none()
                        .then(|| node.metadata.name.as_ref().and_then(|n| waiting.get(n)))
                        .flatten()
                        .map(|why| format!("waiting: {why}"))
                })
                .unwrap_or_default(),
        })
    }
}

pub fn render_table(rows: &[StatusRow]) -> String {
    let headers = [
        "NODE",
        "PHASE",
        "REASON",
        "AGE",
        "ATTEMPTS",
        "BLOCKER / LAST ERROR",
    ];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.node.clone(),
                r.phase.clone(),
                r.reason.clone(),
                r.age.clone(),
                r.attempts.to_string(),
                r.detail.clone(),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |cols: Vec<&str>, out: &mut String| {
        let parts: Vec<String> = cols
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(parts.join("   ").trim_end());
        out.push('\n');
    };
    line(headers.to_vec(), &mut out);
    for row in &cells {
        line(row.iter().map(String::as_str).collect(), &mut out);
    }
    if rows.is_empty() {
        out.push_str("(no node carries the drain taint or rotor's drain state)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn node(taint: Option<&str>, annotations: serde_json::Value) -> Node {
        let taints =
            taint.map(|v| json!([{"key": "rotor.dev/drain", "value": v, "effect": "NoSchedule"}]));
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "annotations": annotations},
            "spec": {"taints": taints},
        }))
        .unwrap()
    }

    #[test]
    fn rows_show_phase_reason_age_and_blocker() {
        let n = node(
            Some("image"),
            json!({"rotor.dev/phase": "blocked", "rotor.dev/started-at": "2026-01-01T00:00:00Z", "rotor.dev/attempts": "2", "rotor.dev/blocker": "shop/db-0: do-not-disrupt"}),
        );
        let r = StatusRow::from_node(
            &n,
            "2026-01-01T00:05:00Z".parse().unwrap(),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(r.phase, "blocked");
        assert_eq!(r.reason, "image");
        assert_eq!(r.age, "5m");
        assert_eq!(r.attempts, 2);
        assert_eq!(r.detail, "shop/db-0: do-not-disrupt");
        let table = render_table(&[r]);
        assert!(table.starts_with("NODE"), "{table}");
        assert!(
            table.contains("n1") && table.contains("shop/db-0: do-not-disrupt"),
            "{table}"
        );
    }

    #[test]
    fn untouched_nodes_have_no_row_and_leftovers_are_flagged() {
        assert!(
            StatusRow::from_node(&node(None, json!({})), Timestamp::now(), &BTreeMap::new())
                .is_none()
        );
        let r = StatusRow::from_node(
            &node(None, json!({"rotor.dev/phase": "drained"})),
            Timestamp::now(),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(r.phase, "drained (taint removed)");
        let r = StatusRow::from_node(
            &node(Some("manual"), json!({})),
            Timestamp::now(),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!((r.phase.as_str(), r.reason.as_str()), ("waiting", "manual"));
    }

    #[test]
    fn a_waiting_node_says_why_the_leader_holds_it_until_its_drain_starts() {
        let waiting = BTreeMap::from([(
            "n1".to_string(),
            "max-concurrent 1 reached (1 draining)".to_string(),
        )]);
        let r = StatusRow::from_node(&node(Some("image"), json!({})), Timestamp::now(), &waiting)
            .unwrap();
        assert_eq!(r.detail, "waiting: max-concurrent 1 reached (1 draining)");
        // Started: its own record says where it is, not an old reason.
        let started = json!({"rotor.dev/phase": "evicting"});
        let r = StatusRow::from_node(&node(Some("image"), started), Timestamp::now(), &waiting)
            .unwrap();
        assert_eq!(r.detail, "");
    }

    #[test]
    fn a_waiting_node_says_which_hooks_hold_it_and_a_draining_one_what_blocks_it() {
        let hooks = json!({"pre-drain.hook.rotor.dev/volume-backup": "backup-operator"});
        let r = StatusRow::from_node(
            &node(Some("image"), hooks.clone()),
            Timestamp::now(),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(r.phase, "waiting");
        assert_eq!(
            r.detail,
            "held by pre-drain hook(s) volume-backup (owner backup-operator)"
        );
        // A hook added once the drain runs does not hold it: not shown as if it did.
        let mut evicting = hooks;
        evicting["rotor.dev/phase"] = json!("evicting");
        let r = StatusRow::from_node(
            &node(Some("image"), evicting),
            Timestamp::now(),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(r.detail, "");
    }
}
