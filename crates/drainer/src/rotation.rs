//! The rotation's record: a ConfigMap beside the leader Lease, named after it
//! (`<lease-name>-rotation`, `rotor-drainer-rotation` by default), where the leader writes what
//! holds the whole fleet rather than one node, so that `rotor-drainer status` and `kubectl` show
//! it without access to the drainer. Today that is the health gate; the leader writes it when
//! the gate's verdict changes, never on every check.
//!
//! The keys are plain strings an operator reads with `kubectl get configmap -o yaml`:
//! `healthGate` (`open` or `closed`), `healthGateSince` (RFC 3339) and `healthGateReason`.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use rotor_core::contract::FIELD_MANAGER;
use serde::Serialize;

pub const HEALTH_GATE_KEY: &str = "healthGate";
pub const HEALTH_GATE_SINCE_KEY: &str = "healthGateSince";
pub const HEALTH_GATE_REASON_KEY: &str = "healthGateReason";

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

/// The health gate as last judged by the leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HealthGateState {
    pub open: bool,
    pub since: Timestamp,
    /// Why it is closed; empty when open.
    pub reason: String,
}

impl HealthGateState {
    fn to_data(&self) -> BTreeMap<String, String> {
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

/// Writes the health gate's state into the record (server-side apply: created if missing,
/// other keys left alone).
pub async fn write_health(
    client: &kube::Client,
    at: &RecordRef,
    state: &HealthGateState,
) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &at.namespace);
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": at.name,
            "labels": { "app.kubernetes.io/name": "rotor-drainer" },
        },
        "data": state.to_data(),
    });
    api.patch(
        &at.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map(|_| ())
}

/// Reads the health gate's state from the record; `None` when there is no record or no gate in it.
pub async fn read_health(
    client: &kube::Client,
    at: &RecordRef,
) -> Result<Option<HealthGateState>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &at.namespace);
    Ok(api
        .get_opt(&at.name)
        .await?
        .and_then(|cm| cm.data)
        .and_then(|data| HealthGateState::from_data(&data)))
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
