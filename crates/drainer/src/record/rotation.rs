//! The rotation's record: a ConfigMap beside the leader Lease, named after it
//! (`<lease-name>-rotation`, `rotor-drainer-rotation` by default), where the leader writes what
//! holds the whole fleet rather than one node, so that `rotor-drainer status` and `kubectl` show
//! it without access to the drainer: the health gate (written when its verdict changes, never on
//! every check) and a halt of the circuit breaker (`--halt-after`), which every replica
//! watches and which only `rotor-drainer resume` lifts.
//!
//! The keys are plain strings an operator reads with `kubectl get configmap -o yaml`:
//! `healthGate` (`open` or `closed`), `healthGateSince` (RFC 3339) and `healthGateReason`;
//! `halted` (`true`), `haltedSince`, `haltedReason`; `resumedAt`; `waiting` (why each tainted node
//! that has not started waits, as JSON, written when the leader logs a change, at most every
//! 10 s); `enforced` (which of the halt and the health gate the leader of the current term
//! enforces, written as each term begins). Each part is written by a field manager of its own,
//! so that applying one never takes away another's keys.
//!
//! This file holds the record's format (pure); [`crate::record::rotation_io`] reads and writes it.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::Serialize;

/// A halt, as written in the rotation record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Halt {
    pub since: Timestamp,
    pub reason: String,
}

/// The breaker's part of the rotation record: whether the rotation is halted, and when it was
/// last resumed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HaltState {
    pub halted: Option<Halt>,
    pub resumed_at: Option<Timestamp>,
}

pub const HEALTH_GATE_KEY: &str = "healthGate";
pub const HEALTH_GATE_SINCE_KEY: &str = "healthGateSince";
pub const HEALTH_GATE_REASON_KEY: &str = "healthGateReason";
pub const HALTED_KEY: &str = "halted";
pub const HALTED_SINCE_KEY: &str = "haltedSince";
pub const HALTED_REASON_KEY: &str = "haltedReason";
pub const RESUMED_AT_KEY: &str = "resumedAt";
/// Why each tainted node that has not started waits, as a JSON object `{node: reason}`.
pub const WAITING_KEY: &str = "waiting";

/// Nodes listed under [`WAITING_KEY`] at most: a ConfigMap holds 1 MiB, and a reason is a line.
pub const WAITING_SHOWN: usize = 2000;

/// Where the record is: the Lease's namespace, and its name with `-rotation`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRef {
    pub namespace: String,
    pub name: String,
}

impl RecordRef {
    pub fn beside_lease(lease_namespace: &str, lease_name: &str) -> RecordRef {
        RecordRef {
            namespace: lease_namespace.to_string(),
            name: format!("{lease_name}-rotation"),
        }
    }
}

/// Which of the record's fleet-wide holds the leader of the current term enforces: a halt
/// binds only a leader run with `--halt-after`, a closed gate only one with health checks, so
/// that `status` tells a hold in force from one a leader without them leaves standing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Enforced {
    pub halt: bool,
    pub health_gate: bool,
}

pub const ENFORCED_KEY: &str = "enforced";

impl Enforced {
    /// The record's data key, as written: the parts enforced, comma-separated (`halt`,
    /// `healthGate`), empty for none.
    pub fn to_data(self) -> BTreeMap<String, String> {
        let parts: Vec<&str> = [(self.halt, "halt"), (self.health_gate, "healthGate")]
            .into_iter()
            .filter_map(|(on, part)| on.then_some(part))
            .collect();
        BTreeMap::from([(ENFORCED_KEY.to_string(), parts.join(","))])
    }

    /// Read back; `None` when no leader has written it (one older than the key: both assumed)
    /// or it is not what rotor writes (someone edited it: no guess either way).
    pub fn from_data(data: &BTreeMap<String, String>) -> Option<Enforced> {
        let parts: Vec<&str> = data.get(ENFORCED_KEY)?.split(',').map(str::trim).collect();
        if !parts.iter().all(|p| ["", "halt", "healthGate"].contains(p)) {
            return None;
        }
        Some(Enforced {
            halt: parts.contains(&"halt"),
            health_gate: parts.contains(&"healthGate"),
        })
    }
}

/// The health gate as last judged by the leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HealthGateState {
    pub open: bool,
    pub since: Timestamp,
    /// Why it is closed; empty when open.
    pub reason: String,
}

impl HealthGateState {
    /// The record's data keys of the health gate, as written (`tests/cases/records/` pins them).
    pub fn to_data(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                HEALTH_GATE_KEY.to_string(),
                if self.open { "open" } else { "closed" }.to_string(),
            ),
            (HEALTH_GATE_SINCE_KEY.to_string(), self.since.to_string()),
            (HEALTH_GATE_REASON_KEY.to_string(), self.reason.clone()),
        ])
    }

    /// Reads the state back from the record's data; `None` if the gate was never written or
    /// the data is not what rotor writes (someone edited it: status shows nothing rather
    /// than a guess).
    pub fn from_data(data: &BTreeMap<String, String>) -> Option<HealthGateState> {
        let open = match data.get(HEALTH_GATE_KEY)?.as_str() {
            "open" => true,
            "closed" => false,
            _ => return None,
        };
        Some(HealthGateState {
            open,
            since: data.get(HEALTH_GATE_SINCE_KEY)?.parse().ok()?,
            reason: data
                .get(HEALTH_GATE_REASON_KEY)
                .cloned()
                .unwrap_or_default(),
        })
    }

    /// One line for `status`.
    pub fn line(&self) -> String {
        if self.open {
            format!("health gate: open since {}", self.since)
        } else {
            format!(
                "health gate: closed since {} (no new drain starts): {}",
                self.since, self.reason
            )
        }
    }
}

/// The breaker's keys read from the record's data. A `halted` other than `true`, or a time that
/// does not parse, reads as not halted: rotor writes exactly these, and a resume removes them.
pub fn halt_from_data(data: &BTreeMap<String, String>) -> HaltState {
    let halted = (data.get(HALTED_KEY).map(String::as_str) == Some("true")).then(|| Halt {
        since: data
            .get(HALTED_SINCE_KEY)
            .and_then(|t| t.parse().ok())
            .unwrap_or(Timestamp::UNIX_EPOCH),
        reason: data.get(HALTED_REASON_KEY).cloned().unwrap_or_default(),
    });
    HaltState {
        halted,
        resumed_at: data.get(RESUMED_AT_KEY).and_then(|t| t.parse().ok()),
    }
}

/// The record's data keys of a halt, as written.
pub fn halt_to_data(halt: &Halt) -> BTreeMap<String, String> {
    BTreeMap::from([
        (HALTED_KEY.to_string(), "true".to_string()),
        (HALTED_SINCE_KEY.to_string(), halt.since.to_string()),
        (HALTED_REASON_KEY.to_string(), halt.reason.clone()),
    ])
}

/// The merge patch of `rotor-drainer resume` at `at`: the halt's keys removed, `resumedAt` set.
pub fn resume_patch(at: Timestamp) -> serde_json::Value {
    serde_json::json!({
        "data": {
            HALTED_KEY: null,
            HALTED_SINCE_KEY: null,
            HALTED_REASON_KEY: null,
            RESUMED_AT_KEY: at.to_string(),
        }
    })
}

/// The record's data key of the waiting nodes, as written: at most [`WAITING_SHOWN`] of them
/// (the first by name), as one JSON object `{node: reason}`.
pub fn waiting_to_data(waiting: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let shown: BTreeMap<&String, &String> = waiting.iter().take(WAITING_SHOWN).collect();
    let json = serde_json::to_string(&shown).expect("a map of strings serializes");
    BTreeMap::from([(WAITING_KEY.to_string(), json)])
}

/// The record as `status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RotationView {
    pub health_gate: Option<HealthGateState>,
    pub halted: Option<Halt>,
    pub resumed_at: Option<Timestamp>,
    /// What the current term's leader enforces; `None` when not written.
    pub enforced: Option<Enforced>,
    /// Why each waiting node waits, as the leader last judged; empty when unknown.
    #[serde(skip)]
    pub waiting: BTreeMap<String, String>,
}

impl RotationView {
    pub fn of(data: &BTreeMap<String, String>) -> RotationView {
        let halt = halt_from_data(data);
        RotationView {
            health_gate: HealthGateState::from_data(data),
            halted: halt.halted,
            resumed_at: halt.resumed_at,
            enforced: Enforced::from_data(data),
            // Not what rotor writes (someone edited it): no reasons rather than a guess.
            waiting: data
                .get(WAITING_KEY)
                .and_then(|json| serde_json::from_str(json).ok())
                .unwrap_or_default(),
        }
    }

    /// The lines `status` prints above the nodes.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let enforced = self.enforced.unwrap_or(Enforced {
            halt: true,
            health_gate: true,
        });
        if let Some(halt) = &self.halted {
            lines.push(if enforced.halt {
                format!(
                    "rotation HALTED since {} (no drain starts until `rotor-drainer resume`): {}",
                    halt.since, halt.reason
                )
            } else {
                format!(
                    "rotation halt recorded since {}, not enforced: the leader runs without --halt-after (`rotor-drainer resume` removes it): {}",
                    halt.since, halt.reason
                )
            });
        }
        if let Some(health) = &self.health_gate {
            lines.push(if enforced.health_gate || health.open {
                health.line()
            } else {
                format!(
                    "health gate: closed since {} as recorded, not enforced: the leader runs without health checks",
                    health.since
                )
            });
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_health_gate_round_trips_through_the_record() {
        let closed = HealthGateState {
            open: false,
            since: "2026-11-26T14:00:00Z".parse().unwrap(),
            reason: "Prometheus at http://p/: 1 alert(s) firing".into(),
        };
        let data = closed.to_data();
        assert_eq!(data[HEALTH_GATE_KEY], "closed");
        assert_eq!(data[HEALTH_GATE_SINCE_KEY], "2026-11-26T14:00:00Z");
        assert_eq!(HealthGateState::from_data(&data), Some(closed.clone()));
        assert_eq!(
            closed.line(),
            "health gate: closed since 2026-11-26T14:00:00Z (no new drain starts): Prometheus at http://p/: 1 alert(s) firing"
        );
    }

    #[test]
    fn a_halt_round_trips_and_status_shows_it_first() {
        let halt = Halt {
            since: "2026-11-26T15:00:00Z".parse().unwrap(),
            reason: "the cluster has not absorbed the last drains".into(),
        };
        let mut data = halt_to_data(&halt);
        data.insert(RESUMED_AT_KEY.into(), "2026-11-26T14:00:00Z".into());
        data.insert(HEALTH_GATE_KEY.into(), "open".into());
        data.insert(HEALTH_GATE_SINCE_KEY.into(), "2026-11-26T13:00:00Z".into());
        let view = RotationView::of(&data);
        assert_eq!(view.halted, Some(halt));
        assert_eq!(
            view.resumed_at,
            Some("2026-11-26T14:00:00Z".parse().unwrap())
        );
        assert_eq!(
            view.lines(),
            [
                "rotation HALTED since 2026-11-26T15:00:00Z (no drain starts until `rotor-drainer resume`): the cluster has not absorbed the last drains",
                "health gate: open since 2026-11-26T13:00:00Z",
            ]
        );
        // Anything but exactly "true" is not a halt.
        data.insert(HALTED_KEY.into(), "yes".into());
        assert_eq!(halt_from_data(&data).halted, None);
    }

    #[test]
    fn holds_the_leader_does_not_enforce_are_shown_as_recorded_only() {
        let halt = Halt {
            since: "2026-11-26T15:00:00Z".parse().unwrap(),
            reason: "replacements are not coming up".into(),
        };
        let closed = HealthGateState {
            open: false,
            since: "2026-11-26T13:00:00Z".parse().unwrap(),
            reason: "alert KubeNodeNotReady firing".into(),
        };
        let mut data = halt_to_data(&halt);
        data.extend(closed.to_data());
        let leader = Enforced {
            halt: false,
            health_gate: false,
        };
        data.extend(leader.to_data());
        assert_eq!(data[ENFORCED_KEY], "");
        let view = RotationView::of(&data);
        assert_eq!(view.enforced, Some(leader));
        assert_eq!(
            view.lines(),
            [
                "rotation halt recorded since 2026-11-26T15:00:00Z, not enforced: the leader runs without --halt-after (`rotor-drainer resume` removes it): replacements are not coming up",
                "health gate: closed since 2026-11-26T13:00:00Z as recorded, not enforced: the leader runs without health checks",
            ]
        );
        // A leader that enforces both, and one older than the key, show them in force.
        let both = Enforced {
            halt: true,
            health_gate: true,
        };
        data.extend(both.to_data());
        assert_eq!(data[ENFORCED_KEY], "halt,healthGate");
        let enforced_lines = RotationView::of(&data).lines();
        assert!(
            enforced_lines[0].starts_with("rotation HALTED"),
            "{enforced_lines:?}"
        );
        data.remove(ENFORCED_KEY);
        assert_eq!(RotationView::of(&data).lines(), enforced_lines);
        // A value rotor does not write is no guess that nothing is enforced.
        data.insert(ENFORCED_KEY.into(), "true".into());
        assert_eq!(RotationView::of(&data).enforced, None);
        assert_eq!(RotationView::of(&data).lines(), enforced_lines);
    }

    #[test]
    fn a_record_someone_else_edited_shows_nothing_rather_than_a_guess() {
        let mut data = BTreeMap::from([
            (HEALTH_GATE_KEY.to_string(), "maybe".to_string()),
            (
                HEALTH_GATE_SINCE_KEY.to_string(),
                "2026-11-26T14:00:00Z".to_string(),
            ),
        ]);
        assert_eq!(HealthGateState::from_data(&data), None);
        data.insert(HEALTH_GATE_KEY.into(), "open".into());
        data.insert(HEALTH_GATE_SINCE_KEY.into(), "yesterday".into());
        assert_eq!(HealthGateState::from_data(&data), None);
        assert_eq!(HealthGateState::from_data(&BTreeMap::new()), None);
    }
}
