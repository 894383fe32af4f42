//! Pod priority as the apiserver's Priority admission plugin and the scheduler use it: a pod
//! naming a PriorityClass gets that class's value and preemption policy when it is created (an
//! unknown class is refused); the scheduler places higher priorities first and, for a pod that
//! fits nowhere, removes lower-priority pods to make room (see [`super::scheduler`]).
//! Cluster-autoscaler ignores pending pods below its expendable cut-off, and so does the
//! simulated autoscaler.

use k8s_openapi::api::core::v1::Pod;
use rotor_apimachinery::scheduling::BUILT_IN_PRIORITY_CLASSES;
use serde_json::{Value, json};

use super::Cluster;
use crate::meta::ApiError;

/// The node a preemption nominated for a pending pod, which waits for it; an autoscaler adds
/// no node for such a pod.
pub fn nominated_node(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.nominated_node_name.as_deref()
}

/// A pod's priority (0 for one that names no class).
pub fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Whether the pod may remove lower-priority pods to get room (`preemptionPolicy` other than
/// `Never`).
pub fn may_preempt(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.preemption_policy.as_deref())
        != Some("Never")
}

/// Pods below priority 0 are placeholders that wait for room on purpose (surge, over-provisioning):
/// their waiting is not counted as unschedulable pod-seconds.
pub fn counts_as_waiting(pod: &Pod) -> bool {
    priority(pod) >= 0
}

impl Cluster {
    /// Sets `spec.priority` and `spec.preemptionPolicy` of a pod being created from its
    /// `spec.priorityClassName`, as the Priority admission plugin does; refuses an unknown class.
    pub fn admit_priority(&self, pod: &mut Value) -> Result<(), ApiError> {
        let Some(class) = pod["spec"]["priorityClassName"]
            .as_str()
            .map(str::to_string)
        else {
            return Ok(());
        };
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let (value, policy) = self.priority_class(&class, name)?;
        pod["spec"]["priority"] = json!(value);
        pod["spec"]["preemptionPolicy"] = json!(policy);
        Ok(())
    }

    /// The same for a pod a controller creates, which goes through admission too.
    pub fn admit_priority_of(&self, pod: &mut Pod) -> Result<(), ApiError> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(spec) = pod.spec.as_mut() else {
            return Ok(());
        };
        let Some(class) = spec.priority_class_name.clone() else {
            return Ok(());
        };
        let (value, policy) = self.priority_class(&class, &name)?;
        spec.priority = Some(value);
        spec.preemption_policy = Some(policy);
        Ok(())
    }

    /// The value and preemption policy of the PriorityClass `class`, or the admission
    /// plugin's refusal of pod `name` naming it.
    fn priority_class(&self, class: &str, name: &str) -> Result<(i32, String), ApiError> {
        if let Some((_, v)) = BUILT_IN_PRIORITY_CLASSES.iter().find(|(n, _)| *n == class) {
            Ok((*v, "PreemptLowerPriority".to_string()))
        } else if let Some(pc) = self.priority_classes.get("", class) {
            let policy = pc
                .preemption_policy
                .clone()
                .unwrap_or_else(|| "PreemptLowerPriority".into());
            Ok((pc.value, policy))
        } else {
            Err(ApiError::forbidden(format!(
                "pods \"{name}\" is forbidden: no PriorityClass with name {class} was found"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Timing;

    #[test]
    fn admission_sets_the_class_value_and_refuses_an_unknown_class() {
        let mut cluster = Cluster::new(Timing::default(), "v1.33.0".into());
        let class: k8s_openapi::api::scheduling::v1::PriorityClass = serde_json::from_value(
            json!({"metadata": {"name": "rotor-surge"}, "value": -5, "preemptionPolicy": "Never"}),
        )
        .unwrap();
        cluster.priority_classes.put(class);
        let mut pod =
            json!({"metadata": {"name": "p"}, "spec": {"priorityClassName": "rotor-surge"}});
        cluster.admit_priority(&mut pod).unwrap();
        assert_eq!(pod["spec"]["priority"], -5);
        assert_eq!(pod["spec"]["preemptionPolicy"], "Never");

        let mut critical = json!({"metadata": {"name": "c"}, "spec": {"priorityClassName": "system-node-critical"}});
        cluster.admit_priority(&mut critical).unwrap();
        assert_eq!(critical["spec"]["priority"], 2_000_001_000);
        assert_eq!(critical["spec"]["preemptionPolicy"], "PreemptLowerPriority");

        let mut plain = json!({"metadata": {"name": "q"}, "spec": {}});
        cluster.admit_priority(&mut plain).unwrap();
        assert!(plain["spec"].get("priority").is_none());

        let mut unknown = json!({"metadata": {"name": "u"}, "spec": {"priorityClassName": "nope"}});
        let err = cluster.admit_priority(&mut unknown).unwrap_err();
        assert_eq!(err.code, 403);
        assert!(
            err.message
                .contains("no PriorityClass with name nope was found"),
            "{}",
            err.message
        );
    }
}
