//! The fleet's verdicts joined to nodes (no I/O), and the Auto Scaling writes: terminating a
//! drained instance in its group, and the group surge's capacity changes.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use aws_sdk_autoscaling as autoscaling;
use k8s_openapi::api::core::v1::Node;

use crate::api_calls::{AWS, ApiCalls};
use crate::plan::Candidate;
use crate::provider::aws::errors::{aws_error, count};
use crate::provider::aws::op;
use crate::provider::aws_group_surge::{GroupCapacity, GroupSurge, SURGE_BASE_TAG, SurgeStep};
use crate::provider::aws_rules::{InstanceVerdict, node_verdict};
use crate::provider::node_facts::node_candidate;
use crate::provider::seam::{LookupFailure, Retirer};

/// The fleet's verdicts; judges nodes without I/O, and retires instances.
#[derive(Clone, Debug)]
pub struct AwsAssessor {
    pub fleet: Arc<BTreeMap<String, InstanceVerdict>>,
    /// Look-ups that failed for some groups only (those groups' nodes are skipped).
    pub lookup_failures: Vec<LookupFailure>,
    /// Every described group's capacity, for `--group-surge`.
    pub capacities: Vec<GroupCapacity>,
    /// Retires instances and changes groups' capacity.
    pub groups: AwsGroupWriter,
}

impl AwsAssessor {
    /// The node joined to its instance's verdict through `spec.providerID`.
    pub fn candidate(&self, node: &Node) -> Candidate {
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        let joined = node_verdict(provider_id, &self.fleet);
        let mut candidate = node_candidate(node, joined.verdict, joined.group);
        if candidate.zone.is_none() {
            candidate.zone = joined.zone;
        }
        candidate
    }
}

/// The Auto Scaling writes: terminating drained instances in their group, and the group
/// surge's capacity changes.
#[derive(Clone, Debug)]
pub struct AwsGroupWriter {
    pub autoscaling: autoscaling::Client,
}

impl AwsGroupWriter {
    /// Carries out a [`SurgeStep`] that writes (every call counted in `calls`); on success, a
    /// line saying what was done. The base tag is written before the capacity is raised, so a
    /// run that stops in between leaves a tag the next run reads, never a raise without its base.
    pub async fn apply_surge(
        &self,
        surge: &GroupSurge,
        calls: &mut ApiCalls,
    ) -> Result<String, String> {
        let group = surge.group.as_str();
        match surge.step {
            SurgeStep::Raise { to } => {
                count(calls, op::CREATE_OR_UPDATE_TAGS);
                self.autoscaling
                    .create_or_update_tags()
                    .tags(surge_base_tag(group, Some(surge.base)))
                    .send()
                    .await
                    .map_err(|e| aws_error(op::CREATE_OR_UPDATE_TAGS, e).to_string())?;
                count(calls, op::SET_DESIRED_CAPACITY);
                self.autoscaling
                    .set_desired_capacity()
                    .auto_scaling_group_name(group)
                    .desired_capacity(to as i32)
                    .honor_cooldown(false)
                    .send()
                    .await
                    .map_err(|e| aws_error(op::SET_DESIRED_CAPACITY, e).to_string())?;
                Ok(format!(
                    "group {group}: desired capacity set to {to} (tag {SURGE_BASE_TAG}={})",
                    surge.base
                ))
            }
            SurgeStep::Finish => {
                count(calls, op::DELETE_TAGS);
                self.autoscaling
                    .delete_tags()
                    .tags(surge_base_tag(group, None))
                    .send()
                    .await
                    .map_err(|e| aws_error(op::DELETE_TAGS, e).to_string())?;
                Ok(format!("group {group}: removed tag {SURGE_BASE_TAG}"))
            }
            _ => Err(format!(
                "group {group}: surge step {} writes nothing",
                surge.step.kind()
            )),
        }
    }
}

/// The group's [`SURGE_BASE_TAG`], with its value when writing it; never propagated to instances.
fn surge_base_tag(group: &str, base: Option<u32>) -> autoscaling::types::Tag {
    autoscaling::types::Tag::builder()
        .resource_type("auto-scaling-group")
        .resource_id(group)
        .key(SURGE_BASE_TAG)
        .set_value(base.map(|b| b.to_string()))
        .propagate_at_launch(false)
        .build()
}

impl Retirer for AwsGroupWriter {
    fn call(&self, _: &Candidate) -> (&'static str, &'static str) {
        (AWS, op::TERMINATE)
    }

    fn retire<'a>(
        &'a self,
        candidate: &'a Candidate,
        shrink_group: bool,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>> {
        Box::pin(async move {
            let instance = candidate.instance.as_deref().unwrap_or_default();
            let out = self
                .autoscaling
                .terminate_instance_in_auto_scaling_group()
                .instance_id(instance)
                .should_decrement_desired_capacity(shrink_group)
                .send()
                .await
                .map_err(|e| aws_error(op::TERMINATE, e).to_string())?;
            let activity = out
                .activity()
                .and_then(|a| a.description())
                .unwrap_or("termination started");
            let how = if shrink_group {
                "ShouldDecrementDesiredCapacity=true, its surge replacement already runs"
            } else {
                "ShouldDecrementDesiredCapacity=false, the group replaces it"
            };
            Ok(format!(
                "terminated instance {instance} in its Auto Scaling group ({how}): {activity}"
            ))
        })
    }
}
