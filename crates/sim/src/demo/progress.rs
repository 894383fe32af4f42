//! The demo's progress model: pure functions from snapshots of the cluster to counts, timeline
//! events and per-node timelines. No clock and no I/O: whoever takes a snapshot stamps it with
//! the seconds since the rotation started, so the model can be fed by hand in tests.
//!
//! Phases come from the drainer's node annotations (`rotor.dev/phase`, `rotor.dev/blocker`), the
//! selector's work from the drain taint, replacement from nodes leaving the cluster, and each
//! pool's progress from the status the drainer writes on its RotationPolicy.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use rotor_core::contract::DrainPhase;
use serde::Serialize;

/// One node as the demo sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub zone: String,
    /// The node group it belongs to.
    pub group: String,
    /// What decides whether it is current, for people: e.g. `v1.33.4` or an AMI id.
    pub version: String,
    /// Not built from its group's current template.
    pub outdated: bool,
    pub ready: bool,
    /// The value of the `rotor.dev/drain` taint, if the node carries it.
    pub taint: Option<String>,
    /// `rotor.dev/phase`, as written (unknown values are kept, never guessed).
    pub phase: Option<String>,
    /// `rotor.dev/blocker`.
    pub blocker: Option<String>,
}

impl NodeView {
    fn parsed_phase(&self) -> Option<DrainPhase> {
        self.phase.as_deref().and_then(|p| p.parse().ok())
    }
}

/// The cluster at one instant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Seconds since the rotation started.
    pub at: f64,
    pub nodes: Vec<NodeView>,
    pub unschedulable_pods: usize,
    /// Evictions the API server granted.
    pub evictions: u64,
    /// Evictions a PodDisruptionBudget refused (429).
    pub refusals: u64,
    pub budget_violations: usize,
    /// The RotationPolicies, by name, as the drainer last wrote their status.
    pub pools: Vec<PoolView>,
}

/// One RotationPolicy's pool, as its status says (written by the drainer, not worked out
/// here: the demo shows what the drainer decided).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolView {
    pub name: String,
    /// `None` until the drainer has written a status.
    pub status: Option<PoolStatus>,
    /// How many of the cluster's nodes it governs now, by the drainer's rule (selected by it
    /// and by no other policy of the same or higher priority); `None` when its selector does
    /// not read. Tells a status written before the last node came or went.
    pub governs: Option<u32>,
}

/// The counters and budget of a RotationPolicy's status.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    pub nodes: u32,
    pub out_of_date: u32,
    pub draining: u32,
    pub drained: u32,
    pub blocked: u32,
    /// The budget in force, as the drainer words it ("1 of 2").
    pub budget: Option<String>,
    /// The conditions that hold (Overlap, Paused, WindowClosed, Halted, Invalid), with why.
    pub holding: Vec<String>,
}

impl fmt::Display for PoolView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(s) = &self.status else {
            return write!(f, "pool {}: no status from the drainer yet", self.name);
        };
        write!(
            f,
            "pool {}: {} nodes, {} out of date, {} draining, {} drained, {} blocked, budget {}",
            self.name,
            s.nodes,
            s.out_of_date,
            s.draining,
            s.drained,
            s.blocked,
            s.budget.as_deref().unwrap_or("-")
        )?;
        for why in &s.holding {
            write!(f, "; {why}")?;
        }
        Ok(())
    }
}

/// The pools whose status, as the drainer last wrote it, does not show their rotation over, each
/// with why: a node out of date, draining or blocked, or a count of nodes other than the pool
/// governs now (a status written while a replacement was still coming shows the pool short).
/// A pool without a status has nothing to wait for. Empty when every pool has settled.
pub fn unsettled_pools(snap: &Snapshot) -> Vec<String> {
    snap.pools
        .iter()
        .filter_map(|p| {
            let s = p.status.as_ref()?;
            let busy = [
                (s.out_of_date, "out of date"),
                (s.draining, "draining"),
                (s.blocked, "blocked"),
            ];
            if let Some((n, what)) = busy.into_iter().find(|(n, _)| *n > 0) {
                return Some(format!("pool {}: {n} {what}", p.name));
            }
            match p.governs {
                Some(n) if n != s.nodes => Some(format!(
                    "pool {}: its status counts {} nodes, it governs {n}",
                    p.name, s.nodes
                )),
                _ => None,
            }
        })
        .collect()
}

/// What the progress display shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: usize,
    pub not_ready: usize,
    pub outdated: usize,
    pub tainted: usize,
    /// Cordoned, evicting or blocked.
    pub draining: usize,
    pub blocked: usize,
    /// Drained and still in the cluster (waiting for the autoscaler).
    pub drained: usize,
    /// Nodes outdated at the start that have left the cluster.
    pub replaced: usize,
    pub unschedulable_pods: usize,
    pub evictions: u64,
    pub refusals: u64,
    pub violations: usize,
}

/// Something that happened, found by comparing two snapshots.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Tainted {
        node: String,
        reason: String,
    },
    Untainted {
        node: String,
    },
    Phase {
        node: String,
        phase: String,
        blocker: Option<String>,
    },
    Joined {
        node: String,
        version: String,
    },
    Ready {
        node: String,
    },
    Left {
        node: String,
        was_outdated: bool,
    },
    Violations {
        total: usize,
    },
    /// A pool's status, as the drainer wrote it, changed.
    Pool(PoolView),
    /// Something the demo itself did or saw (selector runs, upgrades, a job finishing).
    Note(String),
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Tainted { node, reason } => write!(f, "{node}: drain taint added ({reason})"),
            Change::Untainted { node } => write!(f, "{node}: drain taint removed"),
            Change::Phase {
                node,
                phase,
                blocker: Some(b),
            } => write!(f, "{node}: {phase}: {b}"),
            Change::Phase { node, phase, .. } => write!(f, "{node}: {phase}"),
            Change::Joined { node, version } => write!(f, "{node}: joined ({version})"),
            Change::Ready { node } => write!(f, "{node}: Ready"),
            Change::Left {
                node,
                was_outdated: true,
            } => write!(f, "{node}: removed (replaced)"),
            Change::Left { node, .. } => write!(f, "{node}: removed"),
            Change::Violations { total } => {
                write!(f, "BUDGET VIOLATION: {total} so far (see the summary)")
            }
            Change::Pool(pool) => pool.fmt(f),
            Change::Note(text) => f.write_str(text),
        }
    }
}

/// A change with the time it was seen.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub at: f64,
    pub change: Change,
}

/// What happened to one node that was outdated at the start, in seconds since the rotation
/// started (as first seen). Serialized as the summary shows it, times to a tenth.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeTimeline {
    pub node: String,
    pub zone: String,
    pub group: String,
    pub reason: Option<String>,
    #[serde(serialize_with = "tenths_opt")]
    pub tainted_at: Option<f64>,
    /// The drainer cordoned it (first phase past `queued`).
    #[serde(serialize_with = "tenths_opt")]
    pub drain_started_at: Option<f64>,
    #[serde(serialize_with = "tenths_opt")]
    pub blocked_at: Option<f64>,
    /// The last blocker seen, kept after the block clears.
    pub blocker: Option<String>,
    #[serde(serialize_with = "tenths_opt")]
    pub drained_at: Option<f64>,
    /// It left the cluster.
    #[serde(serialize_with = "tenths_opt")]
    pub replaced_at: Option<f64>,
}

/// Counts for one snapshot. `initially_outdated` are the nodes outdated when the rotation
/// started; those no longer present count as replaced.
pub fn counts(snap: &Snapshot, initially_outdated: &BTreeSet<String>) -> Counts {
    let present: BTreeSet<&str> = snap.nodes.iter().map(|n| n.name.as_str()).collect();
    let mut c = Counts {
        total: snap.nodes.len(),
        replaced: initially_outdated
            .iter()
            .filter(|n| !present.contains(n.as_str()))
            .count(),
        unschedulable_pods: snap.unschedulable_pods,
        evictions: snap.evictions,
        refusals: snap.refusals,
        violations: snap.budget_violations,
        ..Counts::default()
    };
    for n in &snap.nodes {
        c.not_ready += usize::from(!n.ready);
        c.outdated += usize::from(n.outdated);
        c.tainted += usize::from(n.taint.is_some());
        match n.parsed_phase() {
            Some(DrainPhase::Cordoned | DrainPhase::Evicting) => c.draining += 1,
            Some(DrainPhase::Blocked) => {
                c.draining += 1;
                c.blocked += 1;
            }
            Some(DrainPhase::Drained) => c.drained += 1,
            // Set aside until its blocker is cleared: held, not draining.
            Some(DrainPhase::Parked) => c.blocked += 1,
            _ => {}
        }
    }
    c
}

/// The changes from `prev` to `next` (or from an empty cluster when `prev` is `None`, which
/// reports nothing but taints, phases and pool statuses already present), in a stable order:
/// nodes by name, then pools by name.
pub fn diff(prev: Option<&Snapshot>, next: &Snapshot) -> Vec<Change> {
    let empty = Snapshot::default();
    let first = prev.is_none();
    let prev = prev.unwrap_or(&empty);
    let before: BTreeMap<&str, &NodeView> =
        prev.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let after: BTreeMap<&str, &NodeView> =
        next.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut out = Vec::new();
    for (name, n) in &after {
        let old = before.get(name);
        if old.is_none() && !first {
            out.push(Change::Joined {
                node: n.name.clone(),
                version: n.version.clone(),
            });
        }
        if n.ready && old.is_some_and(|o| !o.ready) {
            out.push(Change::Ready {
                node: n.name.clone(),
            });
        }
        match (old.and_then(|o| o.taint.as_ref()), &n.taint) {
            (None, Some(reason)) => out.push(Change::Tainted {
                node: n.name.clone(),
                reason: reason.clone(),
            }),
            (Some(_), None) => out.push(Change::Untainted {
                node: n.name.clone(),
            }),
            _ => {}
        }
        let (old_phase, old_blocker) = old
            .map(|o| (o.phase.as_ref(), o.blocker.as_ref()))
            .unwrap_or((None, None));
        if let Some(phase) = &n.phase
            && (old_phase != Some(phase) || old_blocker != n.blocker.as_ref())
        {
            out.push(Change::Phase {
                node: n.name.clone(),
                phase: phase.clone(),
                blocker: n.blocker.clone(),
            });
        }
    }
    for (name, n) in &before {
        if !after.contains_key(name) {
            out.push(Change::Left {
                node: n.name.clone(),
                was_outdated: n.outdated,
            });
        }
    }
    if next.budget_violations > prev.budget_violations {
        out.push(Change::Violations {
            total: next.budget_violations,
        });
    }
    for pool in &next.pools {
        let old = prev.pools.iter().find(|p| p.name == pool.name);
        let news = match old {
            // What the drainer wrote is the news; nodes coming and going are shown as such.
            Some(old) => old.status != pool.status,
            None => pool.status.is_some(),
        };
        if news {
            out.push(Change::Pool(pool.clone()));
        }
    }
    out
}

/// Folds snapshots into events and per-node timelines.
#[derive(Debug, Default)]
pub struct Progress {
    initially_outdated: BTreeSet<String>,
    last: Option<Snapshot>,
    timelines: BTreeMap<String, NodeTimeline>,
    events: Vec<Event>,
}

impl Progress {
    /// Starts from the first snapshot taken once the rotation is under way: its outdated nodes
    /// are the ones the rotation must replace.
    pub fn new(first: Snapshot) -> Progress {
        let mut p = Progress {
            initially_outdated: first
                .nodes
                .iter()
                .filter(|n| n.outdated)
                .map(|n| n.name.clone())
                .collect(),
            ..Progress::default()
        };
        for n in first.nodes.iter().filter(|n| n.outdated) {
            p.timelines.insert(
                n.name.clone(),
                NodeTimeline {
                    node: n.name.clone(),
                    zone: n.zone.clone(),
                    group: n.group.clone(),
                    ..NodeTimeline::default()
                },
            );
        }
        p.observe(first);
        p
    }

    /// Takes a snapshot in; returns the events it produced (also kept).
    pub fn observe(&mut self, snap: Snapshot) -> Vec<Event> {
        let at = snap.at;
        let changes = diff(self.last.as_ref(), &snap);
        for n in &snap.nodes {
            if let Some(t) = self.timelines.get_mut(&n.name) {
                record(t, n, at);
            }
        }
        for c in &changes {
            if let Change::Left { node, .. } = c
                && let Some(t) = self.timelines.get_mut(node)
            {
                t.replaced_at.get_or_insert(at);
            }
        }
        self.last = Some(snap);
        let events: Vec<Event> = changes
            .into_iter()
            .map(|change| Event { at, change })
            .collect();
        self.events.extend(events.iter().cloned());
        events
    }

    /// Records something the demo did; returns the event.
    pub fn note(&mut self, at: f64, text: impl Into<String>) -> Event {
        let e = Event {
            at,
            change: Change::Note(text.into()),
        };
        self.events.push(e.clone());
        e
    }

    pub fn counts(&self) -> Counts {
        self.last
            .as_ref()
            .map(|s| counts(s, &self.initially_outdated))
            .unwrap_or_default()
    }

    pub fn last(&self) -> Option<&Snapshot> {
        self.last.as_ref()
    }

    pub fn initially_outdated(&self) -> usize {
        self.initially_outdated.len()
    }

    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The last `n` events, oldest first.
    pub fn recent(&self, n: usize) -> &[Event] {
        &self.events[self.events.len().saturating_sub(n)..]
    }

    /// Per-node timelines of the nodes outdated at the start, in the order they were tainted
    /// (never-tainted nodes last, by name).
    pub fn timelines(&self) -> Vec<NodeTimeline> {
        let mut v: Vec<NodeTimeline> = self.timelines.values().cloned().collect();
        v.sort_by(|a, b| {
            let key = |t: &NodeTimeline| t.tainted_at.unwrap_or(f64::INFINITY);
            key(a).total_cmp(&key(b)).then_with(|| a.node.cmp(&b.node))
        });
        v
    }

    /// True when the rotation is complete: no outdated node, every node Ready, no pod waiting
    /// for a node.
    pub fn complete(&self) -> bool {
        let c = self.counts();
        self.last.is_some() && c.outdated == 0 && c.not_ready == 0 && c.unschedulable_pods == 0
    }
}

fn record(t: &mut NodeTimeline, n: &NodeView, at: f64) {
    if let Some(reason) = &n.taint {
        t.tainted_at.get_or_insert(at);
        t.reason.get_or_insert_with(|| reason.clone());
    }
    let Some(phase) = n.parsed_phase() else {
        return;
    };
    if phase != DrainPhase::Queued {
        t.drain_started_at.get_or_insert(at);
    }
    if phase == DrainPhase::Blocked {
        t.blocked_at.get_or_insert(at);
    }
    if n.blocker.is_some() {
        t.blocker = n.blocker.clone();
    }
    if phase == DrainPhase::Drained {
        t.drained_at.get_or_insert(at);
    }
}

/// Seconds as the timeline and the summary show them: to a tenth.
pub(super) fn tenths(seconds: f64) -> f64 {
    (seconds * 10.0).round() / 10.0
}

/// Serializes optional seconds to a tenth (the per-node timeline's fields).
pub(super) fn tenths_opt<S: serde::Serializer>(
    seconds: &Option<f64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    seconds.map(tenths).serialize(serializer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, outdated: bool) -> NodeView {
        NodeView {
            name: name.into(),
            zone: "us-east-1a".into(),
            group: "general".into(),
            version: if outdated { "v1.33.4" } else { "v1.34.1" }.into(),
            outdated,
            ready: true,
            ..NodeView::default()
        }
    }

    fn snap(at: f64, nodes: Vec<NodeView>) -> Snapshot {
        Snapshot {
            at,
            nodes,
            ..Snapshot::default()
        }
    }

    fn with(mut n: NodeView, taint: Option<&str>, phase: Option<&str>) -> NodeView {
        n.taint = taint.map(str::to_owned);
        n.phase = phase.map(str::to_owned);
        n
    }

    #[test]
    fn counts_follow_taints_phases_and_replacement() {
        let outdated: BTreeSet<String> = ["a", "b", "c", "gone"].map(String::from).into();
        let mut blocked = with(node("c", true), Some("kubelet-version"), Some("blocked"));
        blocked.blocker = Some("pod batch/report has rotor.dev/do-not-disrupt".into());
        let mut booting = node("new-1", false);
        booting.ready = false;
        let s = Snapshot {
            at: 3.0,
            nodes: vec![
                with(node("a", true), Some("kubelet-version"), Some("evicting")),
                with(node("b", true), Some("kubelet-version"), Some("drained")),
                blocked,
                booting,
            ],
            unschedulable_pods: 2,
            evictions: 7,
            refusals: 3,
            budget_violations: 0,
            pools: Vec::new(),
        };
        let c = counts(&s, &outdated);
        assert_eq!(
            c,
            Counts {
                total: 4,
                not_ready: 1,
                outdated: 3,
                tainted: 3,
                draining: 2,
                blocked: 1,
                drained: 1,
                replaced: 1,
                unschedulable_pods: 2,
                evictions: 7,
                refusals: 3,
                violations: 0,
            }
        );
    }

    #[test]
    fn unknown_phases_are_counted_nowhere() {
        let s = snap(0.0, vec![with(node("a", true), Some("x"), Some("paused"))]);
        let c = counts(&s, &BTreeSet::new());
        assert_eq!((c.tainted, c.draining, c.drained), (1, 0, 0));
    }

    #[test]
    fn diff_reports_each_kind_of_change_once() {
        let before = snap(
            1.0,
            vec![
                node("a", true),
                with(node("b", true), Some("kubelet-version"), Some("evicting")),
                with(node("c", true), Some("manual"), None),
            ],
        );
        let mut joined = node("d", false);
        joined.ready = false;
        let mut after = snap(
            2.0,
            vec![
                with(node("a", true), Some("kubelet-version"), None),
                with(node("b", true), Some("kubelet-version"), Some("drained")),
                joined,
            ],
        );
        after.budget_violations = 1;
        assert_eq!(
            diff(Some(&before), &after),
            vec![
                Change::Tainted {
                    node: "a".into(),
                    reason: "kubelet-version".into()
                },
                Change::Phase {
                    node: "b".into(),
                    phase: "drained".into(),
                    blocker: None
                },
                Change::Joined {
                    node: "d".into(),
                    version: "v1.34.1".into()
                },
                Change::Left {
                    node: "c".into(),
                    was_outdated: true
                },
                Change::Violations { total: 1 },
            ]
        );
        assert!(diff(Some(&after), &after).is_empty());
    }

    #[test]
    fn a_pool_is_news_when_its_status_changes_or_first_appears() {
        let pool = |name: &str, draining: Option<u32>| PoolView {
            name: name.into(),
            status: draining.map(|draining| PoolStatus {
                nodes: 2,
                draining,
                budget: Some("1 of 2".into()),
                ..PoolStatus::default()
            }),
            governs: Some(2),
        };
        let with_pools = |at: f64, pools: Vec<PoolView>| Snapshot {
            pools,
            ..snap(at, vec![node("a", true)])
        };
        // At the start: a pool with a status is shown, one without waits for the drainer.
        let first = with_pools(0.0, vec![pool("general", Some(0)), pool("system", None)]);
        assert_eq!(diff(None, &first), [Change::Pool(pool("general", Some(0)))]);
        let next = with_pools(1.0, vec![pool("general", Some(0)), pool("system", Some(1))]);
        assert_eq!(
            diff(Some(&first), &next),
            [Change::Pool(pool("system", Some(1)))]
        );
        assert!(diff(Some(&next), &next).is_empty());
        assert_eq!(unsettled_pools(&next), ["pool system: 1 draining"]);
        assert!(unsettled_pools(&first).is_empty());
        // A third node joined general after the drainer's last write: its count is stale, and
        // a node coming is not pool news.
        let mut grown = first.clone();
        grown.pools[0].governs = Some(3);
        assert_eq!(
            unsettled_pools(&grown),
            ["pool general: its status counts 2 nodes, it governs 3"]
        );
        assert!(diff(Some(&first), &grown).is_empty());
        assert_eq!(
            Change::Pool(pool("system", Some(1))).to_string(),
            "pool system: 2 nodes, 0 out of date, 1 draining, 0 drained, 0 blocked, budget 1 of 2"
        );
    }

    #[test]
    fn a_new_blocker_is_a_change_even_in_the_same_phase() {
        let mut a = with(node("a", true), Some("image"), Some("blocked"));
        a.blocker = Some("pod x".into());
        let before = snap(1.0, vec![a.clone()]);
        a.blocker = Some("pod y".into());
        let after = snap(2.0, vec![a]);
        assert_eq!(
            diff(Some(&before), &after),
            vec![Change::Phase {
                node: "a".into(),
                phase: "blocked".into(),
                blocker: Some("pod y".into())
            }]
        );
    }

    #[test]
    fn the_first_snapshot_reports_existing_taints_but_no_joins() {
        let s = snap(
            0.0,
            vec![node("a", true), with(node("b", true), Some("manual"), None)],
        );
        assert_eq!(
            diff(None, &s),
            vec![Change::Tainted {
                node: "b".into(),
                reason: "manual".into()
            }]
        );
    }

    #[test]
    fn timelines_record_first_sightings_and_survive_the_node() {
        let mut p = Progress::new(snap(0.0, vec![node("a", true), node("b", true)]));
        assert_eq!(p.initially_outdated(), 2);
        assert!(!p.complete());
        p.observe(snap(
            2.0,
            vec![
                with(node("a", true), Some("kubelet-version"), Some("queued")),
                node("b", true),
            ],
        ));
        p.observe(snap(
            2.5,
            vec![
                with(node("a", true), Some("kubelet-version"), Some("evicting")),
                node("b", true),
            ],
        ));
        let mut blocked = with(node("a", true), Some("kubelet-version"), Some("blocked"));
        blocked.blocker = Some("pod batch/report opted out".into());
        p.observe(snap(4.0, vec![blocked, node("b", true)]));
        p.observe(snap(
            9.0,
            vec![
                with(node("a", true), Some("kubelet-version"), Some("drained")),
                node("b", true),
            ],
        ));
        p.observe(snap(11.0, vec![node("b", true), node("c", false)]));
        let t = p.timelines();
        assert_eq!(t[0].node, "a", "tainted nodes first");
        assert_eq!(
            t[0],
            NodeTimeline {
                node: "a".into(),
                zone: "us-east-1a".into(),
                group: "general".into(),
                reason: Some("kubelet-version".into()),
                tainted_at: Some(2.0),
                drain_started_at: Some(2.5),
                blocked_at: Some(4.0),
                blocker: Some("pod batch/report opted out".into()),
                drained_at: Some(9.0),
                replaced_at: Some(11.0),
            }
        );
        assert_eq!(t[1].tainted_at, None);
        assert_eq!(p.counts().replaced, 1);
        assert_eq!(p.counts().outdated, 1);
        let left: Vec<&Event> = p
            .events()
            .iter()
            .filter(|e| matches!(e.change, Change::Left { .. }))
            .collect();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].at, 11.0);
    }

    #[test]
    fn complete_needs_no_outdated_node_a_whole_cluster_and_no_waiting_pod() {
        let mut p = Progress::new(snap(0.0, vec![node("a", true)]));
        let mut booting = node("b", false);
        booting.ready = false;
        p.observe(snap(1.0, vec![booting.clone()]));
        assert!(!p.complete(), "a node is still booting");
        let mut waiting = snap(2.0, vec![node("b", false)]);
        waiting.unschedulable_pods = 1;
        p.observe(waiting);
        assert!(!p.complete(), "a pod is still waiting for room");
        p.observe(snap(3.0, vec![node("b", false)]));
        assert!(p.complete());
    }

    #[test]
    fn notes_and_recent_events_keep_order() {
        let mut p = Progress::new(snap(0.0, vec![node("a", true)]));
        p.note(0.5, "selector run 1: tainted 1 node");
        p.observe(snap(
            1.0,
            vec![with(node("a", true), Some("kubelet-version"), None)],
        ));
        p.note(1.5, "job finished");
        let recent: Vec<String> = p.recent(2).iter().map(|e| e.change.to_string()).collect();
        assert_eq!(
            recent,
            ["a: drain taint added (kubelet-version)", "job finished"]
        );
        assert_eq!(p.recent(10).len(), 3);
    }
}
