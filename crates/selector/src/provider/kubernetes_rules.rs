//! The Kubernetes-only provider's rules, from the Node object alone: a kubelet whose minor
//! version is behind the API server's is drifted (`kubelet-version`), and so is a node created
//! longer ago than the maximum age (`max-age`). Versions that do not parse and missing fields are
//! skips, never guesses. No I/O; time is a parameter.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use rotor_core::DrainReason;

use crate::verdict::{SkipReason, Verdict, age_beyond, approx_duration, exact_duration};

/// Kubelet rule: drifted when the kubelet's (major, minor) is behind the API server's
/// `gitVersion` (`/version`, e.g. `v1.33.4` or `v1.33.4-eks-1234567`). Patch levels are ignored.
pub fn kubelet_verdict(node: &Node, api_server_version: &str) -> Verdict {
    let Some(control_plane) = minor_version(api_server_version) else {
        return Verdict::skip(SkipReason::ControlPlaneVersionUnparsable {
            version: api_server_version.to_owned(),
        });
    };
    let kubelet = node
        .status
        .as_ref()
        .and_then(|status| status.node_info.as_ref())
        .map(|info| info.kubelet_version.as_str())
        .filter(|version| !version.is_empty());
    let Some(kubelet) = kubelet else {
        return Verdict::skip(SkipReason::KubeletVersionMissing);
    };
    let Some(kubelet_minor) = minor_version(kubelet) else {
        return Verdict::skip(SkipReason::KubeletVersionUnparsable {
            version: kubelet.to_owned(),
        });
    };
    if kubelet_minor < control_plane {
        Verdict::Drifted {
            reason: DrainReason::KubeletVersion,
            detail: format!("kubelet {kubelet}, control plane {api_server_version}"),
        }
    } else {
        Verdict::Current
    }
}

/// Max-age rule: drifted when `metadata.creationTimestamp` is more than `max_age` before `now`.
pub fn age_verdict(node: &Node, max_age: Duration, now: Timestamp) -> Verdict {
    let Some(created) = &node.metadata.creation_timestamp else {
        return Verdict::skip(SkipReason::CreationTimestampMissing);
    };
    match age_beyond(created.0, max_age, now) {
        Some(age) => Verdict::Drifted {
            reason: DrainReason::MaxAge,
            detail: format!(
                "created {} ago, max age {}",
                approx_duration(age),
                exact_duration(max_age)
            ),
        },
        None => Verdict::Current,
    }
}

/// The Kubernetes provider's verdict: the kubelet rule, then (when `max_age` is set) the age
/// rule; the first drift or skip wins.
pub fn kubernetes_verdict(
    node: &Node,
    api_server_version: &str,
    max_age: Option<Duration>,
    now: Timestamp,
) -> Verdict {
    match (kubelet_verdict(node, api_server_version), max_age) {
        (Verdict::Current, Some(max_age)) => age_verdict(node, max_age, now),
        (verdict, _) => verdict,
    }
}

/// `v1.33.4`, `1.33`, `v1.33.4-eks-1234567` → (1, 33).
fn minor_version(version: &str) -> Option<(u64, u64)> {
    let version = version.strip_prefix('v').unwrap_or(version);
    let mut parts = version.split('.');
    let number = |part: Option<&str>| -> Option<u64> {
        let part = part?;
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    Some((number(parts.next())?, number(parts.next())?))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A Node as the API server returns it (trimmed).
    fn node(kubelet: Option<&str>, created: Option<&str>) -> Node {
        let mut node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "ip-10-0-1-23.ec2.internal"},
            "spec": {"providerID": "aws:///us-east-1a/i-0aaa"},
            "status": {"nodeInfo": {
                "architecture": "amd64", "bootID": "b", "containerRuntimeVersion": "containerd://1.7.27",
                "kernelVersion": "6.1.0", "kubeProxyVersion": "", "machineID": "m",
                "operatingSystem": "linux", "osImage": "Amazon Linux 2023", "systemUUID": "s",
                "kubeletVersion": kubelet.unwrap_or("")
            }}
        });
        if let Some(created) = created {
            node["metadata"]["creationTimestamp"] = json!(created);
        }
        serde_json::from_value(node).unwrap()
    }

    fn kubelet_drift(detail: &str) -> Verdict {
        Verdict::Drifted {
            reason: DrainReason::KubeletVersion,
            detail: detail.to_owned(),
        }
    }

    #[test]
    fn kubelet_minor_behind_is_drift() {
        assert_eq!(
            kubelet_verdict(&node(Some("v1.32.9"), None), "v1.33.4"),
            kubelet_drift("kubelet v1.32.9, control plane v1.33.4")
        );
        assert_eq!(
            kubelet_verdict(
                &node(Some("v1.32.9-eks-5e0fdde"), None),
                "v1.33.4-eks-1234567"
            ),
            kubelet_drift("kubelet v1.32.9-eks-5e0fdde, control plane v1.33.4-eks-1234567")
        );
        // Major first: a 1.x kubelet is behind a 2.x control plane whatever the minors.
        assert_eq!(
            kubelet_verdict(&node(Some("v1.33.0"), None), "v2.0.1"),
            kubelet_drift("kubelet v1.33.0, control plane v2.0.1")
        );
        // Minor compared as a number: 9 < 10.
        assert_eq!(
            kubelet_verdict(&node(Some("v1.9.11"), None), "v1.10.0"),
            kubelet_drift("kubelet v1.9.11, control plane v1.10.0")
        );
    }

    #[test]
    fn kubelet_equal_minor_or_ahead_is_current() {
        // An older patch on the same minor is not drift.
        assert_eq!(
            kubelet_verdict(&node(Some("v1.33.1"), None), "v1.33.4"),
            Verdict::Current
        );
        assert_eq!(
            kubelet_verdict(&node(Some("v1.34.0"), None), "v1.33.4"),
            Verdict::Current
        );
        assert_eq!(
            kubelet_verdict(&node(Some("v2.0.0"), None), "v1.33.4"),
            Verdict::Current
        );
        assert_eq!(
            kubelet_verdict(&node(Some("1.33"), None), "v1.33"),
            Verdict::Current
        );
    }

    #[test]
    fn unparsable_versions_are_skipped() {
        assert_eq!(
            kubelet_verdict(&node(Some("v1.32.9"), None), "v1"),
            Verdict::skip(SkipReason::ControlPlaneVersionUnparsable {
                version: "v1".into()
            })
        );
        assert_eq!(
            kubelet_verdict(&node(Some("v1.32.9"), None), "v1.33+"),
            Verdict::skip(SkipReason::ControlPlaneVersionUnparsable {
                version: "v1.33+".into()
            })
        );
        assert_eq!(
            kubelet_verdict(&node(Some("latest"), None), "v1.33.4"),
            Verdict::skip(SkipReason::KubeletVersionUnparsable {
                version: "latest".into()
            })
        );
        assert_eq!(
            kubelet_verdict(&node(None, None), "v1.33.4"),
            Verdict::skip(SkipReason::KubeletVersionMissing)
        );
        assert_eq!(
            kubelet_verdict(&Node::default(), "v1.33.4"),
            Verdict::skip(SkipReason::KubeletVersionMissing)
        );
    }

    #[test]
    fn node_older_than_max_age_is_drift() {
        let now: Timestamp = "2025-06-01T00:00:00Z".parse().unwrap();
        let thirty_days = Duration::from_secs(30 * 86_400);
        assert_eq!(
            age_verdict(&node(None, Some("2025-04-15T00:00:00Z")), thirty_days, now),
            Verdict::Drifted {
                reason: DrainReason::MaxAge,
                detail: "created 47d ago, max age 30d".into()
            }
        );
        assert_eq!(
            age_verdict(&node(None, Some("2025-05-02T00:00:00Z")), thirty_days, now),
            Verdict::Current,
            "exactly 30 days"
        );
        assert_eq!(
            age_verdict(&node(None, Some("2025-05-20T00:00:00Z")), thirty_days, now),
            Verdict::Current
        );
        assert_eq!(
            age_verdict(&node(None, Some("2025-09-01T00:00:00Z")), thirty_days, now),
            Verdict::Current,
            "clock skew: created in the future"
        );
        assert_eq!(
            age_verdict(&node(None, None), thirty_days, now),
            Verdict::skip(SkipReason::CreationTimestampMissing)
        );
    }

    #[test]
    fn kubernetes_verdict_runs_kubelet_then_age() {
        let now: Timestamp = "2025-06-01T00:00:00Z".parse().unwrap();
        let old = Some("2025-04-15T00:00:00Z");
        let max_age = Some(Duration::from_secs(30 * 86_400));
        assert_eq!(
            kubernetes_verdict(&node(Some("v1.32.9"), old), "v1.33.4", max_age, now),
            kubelet_drift("kubelet v1.32.9, control plane v1.33.4")
        );
        assert_eq!(
            kubernetes_verdict(&node(Some("v1.33.4"), old), "v1.33.4", max_age, now),
            Verdict::Drifted {
                reason: DrainReason::MaxAge,
                detail: "created 47d ago, max age 30d".into()
            }
        );
        assert_eq!(
            kubernetes_verdict(&node(Some("v1.33.4"), old), "v1.33.4", None, now),
            Verdict::Current
        );
        assert_eq!(
            kubernetes_verdict(&node(Some("x"), old), "v1.33.4", max_age, now),
            Verdict::skip(SkipReason::KubeletVersionUnparsable {
                version: "x".into()
            })
        );
    }
}
