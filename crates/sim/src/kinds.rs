//! The resource kinds the simulator serves, with what the API layer needs to know about each:
//! scope, names for discovery, whether it has a status subresource, and which field selectors
//! a real apiserver accepts for it.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Namespace, Node, Pod};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;

use crate::rotor_kinds::{DrainRule, RotationPolicy, RotorKind, RotorObject};
use crate::store::SimObject;

pub trait SimKind: SimObject {
    const NAMESPACED: bool;
    const SINGULAR: &'static str;
    const SHORT_NAMES: &'static [&'static str];
    /// Writes to the main resource leave `status` alone; `/status` writes change only status.
    const HAS_STATUS: bool;
    /// Spec changes bump `metadata.generation`.
    const HAS_SPEC: bool;
    /// Takes strategic merge patches: every built-in kind does; custom resources do not (an
    /// API server answers 415).
    const STRATEGIC_MERGE_PATCH: bool = true;
    /// A PUT without `metadata.resourceVersion` overwrites (most built-in kinds); without it,
    /// such a PUT is refused with 422, as for Leases, PodDisruptionBudgets and custom
    /// resources.
    const UNCONDITIONAL_UPDATE: bool = true;
    /// Fields usable in `fieldSelector` besides `metadata.name` and `metadata.namespace`.
    const FIELDS: &'static [&'static str] = &[];

    /// The value of a supported selector field; `None` for an unsupported field.
    fn field(&self, field: &str) -> Option<String> {
        let m = self.metadata();
        match field {
            "metadata.name" => Some(m.name.clone().unwrap_or_default()),
            "metadata.namespace" => Some(m.namespace.clone().unwrap_or_default()),
            _ => self.extra_field(field),
        }
    }

    fn extra_field(&self, _field: &str) -> Option<String> {
        None
    }

    /// Defaults the apiserver fills in on create.
    fn on_create(&mut self, _now: jiff::Timestamp) {}

    fn supports_field(field: &str) -> bool {
        field == "metadata.name" || field == "metadata.namespace" || Self::FIELDS.contains(&field)
    }
}

impl SimKind for Pod {
    const NAMESPACED: bool = true;
    const SINGULAR: &'static str = "pod";
    const SHORT_NAMES: &'static [&'static str] = &["po"];
    const HAS_STATUS: bool = true;
    const HAS_SPEC: bool = false;
    const FIELDS: &'static [&'static str] = &[
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ];

    fn on_create(&mut self, _now: jiff::Timestamp) {
        let status = self.status.get_or_insert_with(Default::default);
        if status.phase.is_none() {
            status.phase = Some("Pending".into());
        }
        if let Some(spec) = self.spec.as_mut() {
            spec.scheduler_name
                .get_or_insert_with(|| "default-scheduler".into());
            spec.restart_policy.get_or_insert_with(|| "Always".into());
            spec.termination_grace_period_seconds.get_or_insert(30);
            spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
        }
    }

    fn extra_field(&self, field: &str) -> Option<String> {
        let spec = self.spec.as_ref();
        let status = self.status.as_ref();
        Some(match field {
            "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
            "spec.restartPolicy" => spec
                .and_then(|s| s.restart_policy.clone())
                .unwrap_or_default(),
            "spec.schedulerName" => spec
                .and_then(|s| s.scheduler_name.clone())
                .unwrap_or_default(),
            "spec.serviceAccountName" => spec
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_default(),
            "spec.hostNetwork" => spec
                .and_then(|s| s.host_network)
                .unwrap_or(false)
                .to_string(),
            "status.phase" => status.and_then(|s| s.phase.clone()).unwrap_or_default(),
            "status.podIP" => status.and_then(|s| s.pod_ip.clone()).unwrap_or_default(),
            "status.nominatedNodeName" => status
                .and_then(|s| s.nominated_node_name.clone())
                .unwrap_or_default(),
            _ => return None,
        })
    }
}

impl SimKind for Node {
    const NAMESPACED: bool = false;
    const SINGULAR: &'static str = "node";
    const SHORT_NAMES: &'static [&'static str] = &["no"];
    const HAS_STATUS: bool = true;
    const HAS_SPEC: bool = false;
    const FIELDS: &'static [&'static str] = &["spec.unschedulable"];

    fn extra_field(&self, field: &str) -> Option<String> {
        match field {
            "spec.unschedulable" => Some(
                self.spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
                    .to_string(),
            ),
            _ => None,
        }
    }
}

impl SimKind for Namespace {
    const NAMESPACED: bool = false;
    const SINGULAR: &'static str = "namespace";
    const SHORT_NAMES: &'static [&'static str] = &["ns"];
    const HAS_STATUS: bool = true;
    const HAS_SPEC: bool = false;
    const FIELDS: &'static [&'static str] = &["status.phase"];

    fn on_create(&mut self, _now: jiff::Timestamp) {
        let status = self.status.get_or_insert_with(Default::default);
        status.phase.get_or_insert_with(|| "Active".into());
    }

    fn extra_field(&self, field: &str) -> Option<String> {
        match field {
            "status.phase" => Some(
                self.status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default(),
            ),
            _ => None,
        }
    }
}

impl SimKind for CoreEvent {
    const NAMESPACED: bool = true;
    const SINGULAR: &'static str = "event";
    const SHORT_NAMES: &'static [&'static str] = &["ev"];
    const HAS_STATUS: bool = false;
    const HAS_SPEC: bool = false;
    const FIELDS: &'static [&'static str] = &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "reason",
        "type",
        "source",
    ];

    fn extra_field(&self, field: &str) -> Option<String> {
        let o = &self.involved_object;
        Some(match field {
            "involvedObject.kind" => o.kind.clone().unwrap_or_default(),
            "involvedObject.namespace" => o.namespace.clone().unwrap_or_default(),
            "involvedObject.name" => o.name.clone().unwrap_or_default(),
            "involvedObject.uid" => o.uid.clone().unwrap_or_default(),
            "reason" => self.reason.clone().unwrap_or_default(),
            "type" => self.type_.clone().unwrap_or_default(),
            "source" => self
                .source
                .as_ref()
                .and_then(|s| s.component.clone())
                .or_else(|| self.reporting_component.clone())
                .unwrap_or_default(),
            _ => return None,
        })
    }
}

impl SimKind for EventsV1Event {
    const NAMESPACED: bool = true;
    const SINGULAR: &'static str = "event";
    const SHORT_NAMES: &'static [&'static str] = &["ev"];
    const HAS_STATUS: bool = false;
    const HAS_SPEC: bool = false;
    const FIELDS: &'static [&'static str] = &[
        "regarding.kind",
        "regarding.name",
        "regarding.namespace",
        "reason",
        "type",
    ];

    fn extra_field(&self, field: &str) -> Option<String> {
        let r = self.regarding.as_ref();
        Some(match field {
            "regarding.kind" => r.and_then(|r| r.kind.clone()).unwrap_or_default(),
            "regarding.name" => r.and_then(|r| r.name.clone()).unwrap_or_default(),
            "regarding.namespace" => r.and_then(|r| r.namespace.clone()).unwrap_or_default(),
            "reason" => self.reason.clone().unwrap_or_default(),
            "type" => self.type_.clone().unwrap_or_default(),
            _ => return None,
        })
    }
}

impl SimKind for PodDisruptionBudget {
    const NAMESPACED: bool = true;
    const SINGULAR: &'static str = "poddisruptionbudget";
    const SHORT_NAMES: &'static [&'static str] = &["pdb"];
    const HAS_STATUS: bool = true;
    const HAS_SPEC: bool = true;
    const UNCONDITIONAL_UPDATE: bool = false;
}

impl SimKind for Deployment {
    const NAMESPACED: bool = true;
    const SINGULAR: &'static str = "deployment";
    const SHORT_NAMES: &'static [&'static str] = &["deploy"];
    const HAS_STATUS: bool = true;
    const HAS_SPEC: bool = true;
}

impl SimKind for ReplicaSet {
    const NAMESPACED: bool = true;
    const SINGULAR: &'static str = "replicaset";
    const SHORT_NAMES: &'static [&'static str] = &["rs"];
    const HAS_STATUS: bool = true;
    const HAS_SPEC: bool = true;
}

impl SimKind for StatefulSet {
    const NAMESPACED: bool = true;
    const SINGULAR: &'static str = "statefulset";
    const SHORT_NAMES: &'static [&'static str] = &["sts"];
    const HAS_STATUS: bool = true;
    const HAS_SPEC: bool = true;
}

impl SimKind for DaemonSet {
    const NAMESPACED: bool = true;
    const SINGULAR: &'static str = "daemonset";
    const SHORT_NAMES: &'static [&'static str] = &["ds"];
    const HAS_STATUS: bool = true;
    const HAS_SPEC: bool = true;
}

impl SimKind for Lease {
    const NAMESPACED: bool = true;
    const SINGULAR: &'static str = "lease";
    const SHORT_NAMES: &'static [&'static str] = &[];
    const HAS_STATUS: bool = false;
    const HAS_SPEC: bool = false;
    const UNCONDITIONAL_UPDATE: bool = false;
}

impl SimKind for PriorityClass {
    const NAMESPACED: bool = false;
    const SINGULAR: &'static str = "priorityclass";
    const SHORT_NAMES: &'static [&'static str] = &["pc"];
    const HAS_STATUS: bool = false;
    const HAS_SPEC: bool = false;
}

/// rotor's own resources ([`crate::rotor_kinds`]), cluster-scoped as in their CRDs.
impl<R: RotorKind> SimKind for RotorObject<R> {
    const NAMESPACED: bool = false;
    const SINGULAR: &'static str = R::SINGULAR;
    const SHORT_NAMES: &'static [&'static str] = R::SHORT_NAMES;
    const HAS_STATUS: bool = R::HAS_STATUS;
    const HAS_SPEC: bool = true;
    const STRATEGIC_MERGE_PATCH: bool = false;
    const UNCONDITIONAL_UPDATE: bool = false;

    /// With a status subresource, a create sets no status: only `/status` writes it.
    fn on_create(&mut self, _now: jiff::Timestamp) {
        if R::HAS_STATUS {
            self.fields.remove("status");
        }
    }
}

/// A served resource as discovery describes it.
#[derive(Clone, Debug)]
pub struct ResourceInfo {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub has_status: bool,
}

pub fn info<K: SimKind>() -> ResourceInfo {
    ResourceInfo {
        group: K::GROUP,
        version: K::VERSION,
        plural: K::URL_PATH_SEGMENT,
        singular: K::SINGULAR,
        kind: K::KIND,
        namespaced: K::NAMESPACED,
        short_names: K::SHORT_NAMES,
        has_status: K::HAS_STATUS,
    }
}

/// Every resource served, in discovery order.
pub fn all() -> Vec<ResourceInfo> {
    vec![
        info::<Namespace>(),
        info::<Node>(),
        info::<Pod>(),
        info::<CoreEvent>(),
        info::<PodDisruptionBudget>(),
        info::<Deployment>(),
        info::<ReplicaSet>(),
        info::<StatefulSet>(),
        info::<DaemonSet>(),
        info::<Lease>(),
        info::<EventsV1Event>(),
        info::<PriorityClass>(),
        info::<RotationPolicy>(),
        info::<DrainRule>(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_fields_match_what_kubectl_drain_selects_on() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web-1".into());
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some("n1".into()),
            ..Default::default()
        });
        assert_eq!(pod.field("spec.nodeName").as_deref(), Some("n1"));
        assert_eq!(pod.field("status.phase").as_deref(), Some(""));
        assert_eq!(pod.field("metadata.name").as_deref(), Some("web-1"));
        assert!(pod.field("spec.containers").is_none());
        assert!(Pod::supports_field("spec.nodeName"));
        assert!(!Node::supports_field("spec.nodeName"));
        assert!(Node::supports_field("spec.unschedulable"));
    }

    #[test]
    fn discovery_names_are_the_real_ones() {
        let all = all();
        let pdb = all
            .iter()
            .find(|r| r.kind == "PodDisruptionBudget")
            .unwrap();
        assert_eq!(
            (pdb.group, pdb.version, pdb.plural),
            ("policy", "v1", "poddisruptionbudgets")
        );
        let lease = all.iter().find(|r| r.kind == "Lease").unwrap();
        assert_eq!(lease.group, "coordination.k8s.io");
        assert_eq!(all.iter().filter(|r| r.plural == "events").count(), 2);
    }
}
