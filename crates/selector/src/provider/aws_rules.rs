//! The AWS drift rules, as pure functions over an AWS-shaped snapshot (shaped as the Amazon EC2
//! Auto Scaling `DescribeAutoScalingGroups` and EC2 `DescribeLaunchTemplateVersions` answers): skip rules
//! first (instance not InService, group deleting, group excluded, EKS managed), then the drift
//! rules in order (launch configuration, launch template id, template version, instance type,
//! image, max age); the first rule that matches is the reason written on the taint. Anything the
//! snapshot cannot answer is a skip (fail safe), never a guess. No I/O; time is a parameter.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use jiff::Timestamp;
use rotor_core::{DrainReason, parse_aws_provider_id};

use crate::provider::aws_model::{
    AutoScalingGroup, GroupInstance, InstanceDetails, LaunchTemplateInfo, LaunchTemplateSpec,
    Override,
};
use crate::verdict::{SkipReason, Verdict, age_beyond, approx_duration, exact_duration};

/// Tag that marks an EKS managed node group's Auto Scaling group.
pub const EKS_NODEGROUP_TAG: &str = "eks:nodegroup-name";

/// The only lifecycle state in which an instance is judged.
pub const IN_SERVICE: &str = "InService";

/// A group exclusion by tag: `key` (any value) or `key=value`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TagExclusion {
    /// The tag key.
    pub key: String,
    /// The value the tag must have; `None` matches any value.
    pub value: Option<String>,
}

impl TagExclusion {
    /// The group tag this exclusion matches, as (key, value).
    fn matches<'g>(&self, group: &'g AutoScalingGroup) -> Option<(&'g str, &'g str)> {
        let (key, value) = group.tags.get_key_value(&self.key)?;
        match &self.value {
            Some(wanted) if wanted != value => None,
            _ => Some((key, value)),
        }
    }
}

impl fmt::Display for TagExclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => write!(f, "{}={value}", self.key),
            None => f.write_str(&self.key),
        }
    }
}

impl FromStr for TagExclusion {
    type Err = ParseTagExclusionError;

    /// `key` or `key=value`; the key must not be empty (the value may be).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (key, value) = match text.split_once('=') {
            Some((key, value)) => (key, Some(value.to_owned())),
            None => (text, None),
        };
        if key.is_empty() {
            return Err(ParseTagExclusionError {
                value: text.to_owned(),
            });
        }
        Ok(TagExclusion {
            key: key.to_owned(),
            value,
        })
    }
}

/// A tag exclusion is not `key` or `key=value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tag exclusion {value:?} has an empty key: expected key or key=value")]
pub struct ParseTagExclusionError {
    /// The text that failed to parse.
    pub value: String,
}

/// Everything the drift rules read besides the group and instance being judged.
#[derive(Clone, Copy, Debug)]
pub struct DriftInputs<'a> {
    /// The selected groups (for [`fleet_verdicts`]).
    pub groups: &'a [AutoScalingGroup],
    /// DescribeLaunchTemplates, by template id.
    pub templates: &'a BTreeMap<String, LaunchTemplateInfo>,
    /// Image rule (opt-in): DescribeLaunchTemplateVersions(ResolveAlias=true) as (template id,
    /// version) → image id. `None` turns the rule off.
    pub template_images: Option<&'a BTreeMap<(String, i64), String>>,
    /// DescribeInstances by instance id; read by the image and max-age rules, required when either
    /// is on (an instance missing from it is skipped).
    pub instance_details: Option<&'a BTreeMap<String, InstanceDetails>>,
    /// Max-age rule (opt-in): instances launched longer ago than this are drifted.
    pub max_age: Option<Duration>,
    /// The time of the run.
    pub now: Timestamp,
    /// Groups excluded by name.
    pub excluded_names: &'a BTreeSet<String>,
    /// Groups excluded by tag.
    pub excluded_tags: &'a [TagExclusion],
    /// Judge EKS managed node groups too (by default EKS rotates them itself).
    pub include_eks_managed: bool,
    /// Look-ups about one template that failed, by the template id or name asked for; groups
    /// naming such a template are skipped rather than judged from partial data.
    pub failed_templates: &'a BTreeMap<String, FailedLookup>,
}

/// A look-up about one launch template that failed after the SDK's retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedLookup {
    /// The operation, e.g. `DescribeLaunchTemplateVersions`.
    pub operation: &'static str,
    /// The error code and message.
    pub error: String,
}

/// Every launch template spec a group names: its own, its mixed policy's, its overrides'.
pub fn group_template_specs(group: &AutoScalingGroup) -> Vec<&LaunchTemplateSpec> {
    let mut specs: Vec<&LaunchTemplateSpec> = group.launch_template.iter().collect();
    if let Some(policy) = &group.mixed_instances_policy {
        specs.push(&policy.launch_template);
        specs.extend(
            policy
                .overrides
                .iter()
                .filter_map(|o| o.launch_template.as_ref()),
        );
    }
    specs
}

/// The first failed look-up about a template the group names (by id, by name, or by the id its
/// name resolves to).
fn group_lookup_failure(group: &AutoScalingGroup, inputs: &DriftInputs) -> Option<SkipReason> {
    if inputs.failed_templates.is_empty() {
        return None;
    }
    group_template_specs(group).into_iter().find_map(|spec| {
        let resolved = find_template(spec, inputs.templates).ok().map(|t| &t.id);
        [spec.id.as_ref(), spec.name.as_ref(), resolved]
            .into_iter()
            .flatten()
            .find_map(|key| {
                inputs
                    .failed_templates
                    .get(key)
                    .map(|failed| SkipReason::LookupFailed {
                        group: group.name.clone(),
                        operation: failed.operation,
                        template: key.clone(),
                        error: failed.error.clone(),
                    })
            })
    })
}

/// The group was deleted or emptied between `DescribeAutoScalingGroups` and `DescribeInstances`:
/// with the image or max-age rule on (so `DescribeInstances` was made), the group listed
/// InService instances and `DescribeInstances` returned none of them as pending or running. Its
/// listing is then stale, so none of its instances is judged from it (not even by the rules that
/// read only the listing) and the run reports it as a failed look-up. One instance missing
/// among others is ordinary churn (a scale-in between the calls): only that instance is skipped
/// ([`SkipReason::InstanceDetailsMissing`]).
fn group_vanished(group: &AutoScalingGroup, inputs: &DriftInputs) -> Option<SkipReason> {
    let details = inputs.instance_details?;
    let in_service: Vec<&str> = group
        .instances
        .iter()
        .filter(|i| i.lifecycle_state == IN_SERVICE)
        .map(|i| i.instance_id.as_str())
        .collect();
    if in_service.is_empty() || in_service.iter().any(|id| details.contains_key(*id)) {
        return None;
    }
    Some(SkipReason::LookupFailed {
        group: group.name.clone(),
        // aws::op::DESCRIBE_INSTANCES (not imported: the provider imports this module).
        operation: "DescribeInstances",
        template: group.name.clone(),
        error: format!(
            "none of the group's {} InService instances is pending or running any more (the group was deleted or emptied after DescribeAutoScalingGroups listed it)",
            in_service.len()
        ),
    })
}

/// Why a whole group is not judged (deleting, excluded by name or tag, EKS managed, a failed
/// look-up about one of its templates, the group gone since it was listed), in that order;
/// `None` when its instances are judged.
pub fn group_skip(group: &AutoScalingGroup, inputs: &DriftInputs) -> Option<SkipReason> {
    if let Some(status) = group.status.as_deref().filter(|s| !s.is_empty()) {
        return Some(SkipReason::GroupDeleting {
            group: group.name.clone(),
            status: status.to_owned(),
        });
    }
    if inputs.excluded_names.contains(&group.name) {
        return Some(SkipReason::GroupExcludedByName {
            group: group.name.clone(),
        });
    }
    if let Some((key, value)) = inputs.excluded_tags.iter().find_map(|t| t.matches(group)) {
        return Some(SkipReason::GroupExcludedByTag {
            group: group.name.clone(),
            key: key.to_owned(),
            value: value.to_owned(),
        });
    }
    if !inputs.include_eks_managed
        && let Some(nodegroup) = group.tags.get(EKS_NODEGROUP_TAG)
    {
        return Some(SkipReason::EksManaged {
            group: group.name.clone(),
            nodegroup: nodegroup.clone(),
        });
    }
    group_lookup_failure(group, inputs).or_else(|| group_vanished(group, inputs))
}

/// `Some` when the group's instance-type rule cannot be applied because its overrides use
/// attribute-based instance requirements; the later rules still apply to its instances.
pub fn instance_type_rule_skip(group: &AutoScalingGroup) -> Option<SkipReason> {
    let policy = group.mixed_instances_policy.as_ref()?;
    policy
        .overrides
        .iter()
        .any(|o| o.has_instance_requirements)
        .then(|| SkipReason::AttributeBasedOverrides {
            group: group.name.clone(),
        })
}

/// The version number a group's template spec resolves to: `$Latest` → latest, `$Default` or
/// absent → default, a number → that number. Unknown templates and other strings are skips.
pub fn resolve_group_version(
    spec: &LaunchTemplateSpec,
    templates: &BTreeMap<String, LaunchTemplateInfo>,
) -> Result<i64, SkipReason> {
    let template = find_template(spec, templates)?;
    match spec.version.as_deref() {
        Some("$Latest") => Ok(template.latest_version),
        Some("$Default") | None => Ok(template.default_version),
        Some(number) => number.parse().map_err(|_| SkipReason::GroupVersionInvalid {
            template: template.id.clone(),
            version: number.to_owned(),
        }),
    }
}

/// Judges one instance of `group`: the skip rules, then the drift rules in the order of the
/// module header, first match wins.
pub fn instance_verdict(
    group: &AutoScalingGroup,
    inst: &GroupInstance,
    inputs: &DriftInputs,
) -> Verdict {
    match judge(group, inst, inputs) {
        Ok(verdict) | Err(verdict) => verdict,
    }
}

/// `Err` carries an early verdict (a skip or the first drift found), so `?` reads as "stop here".
fn judge(
    group: &AutoScalingGroup,
    inst: &GroupInstance,
    inputs: &DriftInputs,
) -> Result<Verdict, Verdict> {
    if inst.lifecycle_state != IN_SERVICE {
        return Err(Verdict::skip(SkipReason::NotInService {
            state: inst.lifecycle_state.clone(),
        }));
    }
    if let Some(why) = group_skip(group, inputs) {
        return Err(Verdict::skip(why));
    }

    match wanted_template(group, inst, inputs.templates) {
        Some(spec) => template_rules(group, inst, spec, inputs)?,
        None => match &group.launch_configuration_name {
            Some(wanted) => launch_configuration_rule(inst, wanted)?,
            None => {
                return Err(Verdict::skip(SkipReason::GroupWithoutConfiguration {
                    group: group.name.clone(),
                }));
            }
        },
    }

    max_age_rule(inst, inputs)?;
    Ok(Verdict::Current)
}

/// Rule 1.
fn launch_configuration_rule(inst: &GroupInstance, wanted: &str) -> Result<(), Verdict> {
    let detail = match (&inst.launch_configuration_name, &inst.launch_template) {
        (Some(actual), _) if actual == wanted => return Ok(()),
        (Some(actual), _) => {
            format!("instance uses launch configuration {actual}, group wants {wanted}")
        }
        (None, Some(template)) => format!(
            "instance uses launch template {}, group wants launch configuration {wanted}",
            spec_label(template)
        ),
        (None, None) => {
            format!("instance has no launch configuration, group wants {wanted}")
        }
    };
    Err(drifted(DrainReason::LaunchConfiguration, detail))
}

/// Rules 2 to 5, for a group that uses a launch template (directly or through a mixed instances
/// policy); `spec` is the template that applies to this instance.
fn template_rules(
    group: &AutoScalingGroup,
    inst: &GroupInstance,
    spec: &LaunchTemplateSpec,
    inputs: &DriftInputs,
) -> Result<(), Verdict> {
    let wanted = find_template(spec, inputs.templates).map_err(Verdict::skip)?;

    // Rule 2: the template, by id.
    let Some(actual) = &inst.launch_template else {
        let detail = match &inst.launch_configuration_name {
            Some(lc) => format!(
                "instance uses launch configuration {lc}, group wants launch template {}",
                info_label(wanted)
            ),
            None => format!(
                "instance has no launch template, group wants {}",
                info_label(wanted)
            ),
        };
        return Err(drifted(DrainReason::LaunchTemplate, detail));
    };
    let actual_id = match &actual.id {
        Some(id) => id.as_str(),
        None => find_template(actual, inputs.templates)
            .map_err(Verdict::skip)?
            .id
            .as_str(),
    };
    if actual_id != wanted.id {
        let actual_label = match &actual.name {
            Some(name) => format!("{actual_id} ({name})"),
            None => actual_id.to_owned(),
        };
        return Err(drifted(
            DrainReason::LaunchTemplate,
            format!(
                "instance runs {actual_label}, group wants {}",
                info_label(wanted)
            ),
        ));
    }

    // Rule 3: the version, as integers.
    let group_version = resolve_group_version(spec, inputs.templates).map_err(Verdict::skip)?;
    let instance_version: i64 = actual
        .version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            Verdict::skip(SkipReason::InstanceVersionNotNumeric {
                template: wanted.id.clone(),
                version: actual.version.clone(),
            })
        })?;
    if instance_version != group_version {
        let alias = match spec.version.as_deref() {
            Some("$Latest") => " ($Latest)",
            Some("$Default") | None => " ($Default)",
            Some(_) => "",
        };
        return Err(drifted(
            DrainReason::LaunchTemplateVersion,
            format!(
                "{}: instance version {instance_version}, group wants {group_version}{alias}",
                wanted.id
            ),
        ));
    }

    // Rule 4: the instance type, against explicit overrides.
    if instance_type_rule_skip(group).is_none()
        && let Some(policy) = &group.mixed_instances_policy
        && let Some(instance_type) = inst.instance_type.as_deref()
    {
        let allowed: Vec<&str> = policy
            .overrides
            .iter()
            .filter_map(|o| o.instance_type.as_deref())
            .collect();
        if !allowed.is_empty() && !allowed.contains(&instance_type) {
            return Err(drifted(
                DrainReason::InstanceType,
                format!(
                    "instance type {instance_type} not in overrides [{}]",
                    allowed.join(", ")
                ),
            ));
        }
    }

    // Rule 5 (opt-in): the image of the resolved group version.
    if let Some(images) = inputs.template_images {
        let details = details_of(inst, inputs)?;
        let key = (wanted.id.clone(), group_version);
        let Some(wanted_image) = images.get(&key) else {
            return Err(Verdict::skip(SkipReason::TemplateImageUnknown {
                template: key.0,
                version: key.1,
            }));
        };
        if &details.image_id != wanted_image {
            return Err(drifted(
                DrainReason::Image,
                format!(
                    "image {}, template {} v{group_version} has {wanted_image}",
                    details.image_id, wanted.id
                ),
            ));
        }
    }
    Ok(())
}

/// Rule 6 (opt-in): launched longer ago than the limit.
fn max_age_rule(inst: &GroupInstance, inputs: &DriftInputs) -> Result<(), Verdict> {
    let Some(max_age) = inputs.max_age else {
        return Ok(());
    };
    let details = details_of(inst, inputs)?;
    match age_beyond(details.launch_time, max_age, inputs.now) {
        Some(age) => Err(drifted(
            DrainReason::MaxAge,
            format!(
                "launched {} ago, max age {}",
                approx_duration(age),
                exact_duration(max_age)
            ),
        )),
        None => Ok(()),
    }
}

fn details_of<'a>(
    inst: &GroupInstance,
    inputs: &DriftInputs<'a>,
) -> Result<&'a InstanceDetails, Verdict> {
    inputs
        .instance_details
        .and_then(|details| details.get(&inst.instance_id))
        .ok_or_else(|| {
            Verdict::skip(SkipReason::InstanceDetailsMissing {
                instance: inst.instance_id.clone(),
            })
        })
}

/// The template spec that applies to `inst`: an override's own template when the override names
/// the instance's type; else an attribute-based override's own template when the instance was
/// launched from it ([`attribute_based_template`]); else the mixed policy's base template, else
/// the group's template; `None` when the group uses no template.
fn wanted_template<'g>(
    group: &'g AutoScalingGroup,
    inst: &GroupInstance,
    templates: &BTreeMap<String, LaunchTemplateInfo>,
) -> Option<&'g LaunchTemplateSpec> {
    let Some(policy) = &group.mixed_instances_policy else {
        return group.launch_template.as_ref();
    };
    let override_template = inst.instance_type.as_deref().and_then(|instance_type| {
        policy
            .overrides
            .iter()
            .find(|o| o.instance_type.as_deref() == Some(instance_type))
            .and_then(|o| o.launch_template.as_ref())
    });
    override_template
        .or_else(|| {
            attribute_based_template(&policy.overrides, &policy.launch_template, inst, templates)
        })
        .or(Some(&policy.launch_template))
}

/// The own template of the attribute-based override (`InstanceRequirements`) `inst` was launched
/// through. Such an override names no instance type, and the group's answer does not say which
/// override launched an instance, so the instance's template id tells: the override whose
/// template has that id (of several, or of it and the `base` template with the same id, an
/// override without a template of its own launching through the base, the one whose version
/// the instance runs, else the first, whose version rule then reports the drift). `None` when
/// no such override has that template.
fn attribute_based_template<'g>(
    overrides: &'g [Override],
    base: &'g LaunchTemplateSpec,
    inst: &GroupInstance,
    templates: &BTreeMap<String, LaunchTemplateInfo>,
) -> Option<&'g LaunchTemplateSpec> {
    let actual = inst.launch_template.as_ref()?;
    let actual_id = template_id(actual, templates)?;
    let mut candidates: Vec<&LaunchTemplateSpec> = overrides
        .iter()
        .filter(|o| o.has_instance_requirements)
        .filter_map(|o| o.launch_template.as_ref())
        .filter(|spec| template_id(spec, templates) == Some(actual_id))
        .collect();
    if candidates.is_empty() {
        return None;
    }
    if template_id(base, templates) == Some(actual_id) {
        candidates.push(base);
    }
    let actual_version = actual.version.as_deref().and_then(|v| v.parse().ok());
    candidates
        .iter()
        .find(|spec| {
            actual_version.is_some()
                && resolve_group_version(spec, templates).ok() == actual_version
        })
        .or(candidates.first())
        .copied()
}

/// A spec's template id: its own, else the id of the described template of its name.
fn template_id<'s>(
    spec: &'s LaunchTemplateSpec,
    templates: &'s BTreeMap<String, LaunchTemplateInfo>,
) -> Option<&'s str> {
    match &spec.id {
        Some(id) => Some(id),
        None => find_template(spec, templates).ok().map(|t| t.id.as_str()),
    }
}

/// The described template a spec names: by id when it has one, else by name.
fn find_template<'t>(
    spec: &LaunchTemplateSpec,
    templates: &'t BTreeMap<String, LaunchTemplateInfo>,
) -> Result<&'t LaunchTemplateInfo, SkipReason> {
    let found = match (&spec.id, &spec.name) {
        (Some(id), _) => templates.get(id),
        (None, Some(name)) => templates.values().find(|t| &t.name == name),
        (None, None) => None,
    };
    found.ok_or_else(|| SkipReason::TemplateUnknown {
        template: spec_label(spec),
    })
}

fn spec_label(spec: &LaunchTemplateSpec) -> String {
    match (&spec.id, &spec.name) {
        (Some(id), _) => id.clone(),
        (None, Some(name)) => name.clone(),
        (None, None) => "(no id or name)".to_owned(),
    }
}

fn info_label(info: &LaunchTemplateInfo) -> String {
    format!("{} ({})", info.id, info.name)
}

fn drifted(reason: DrainReason, detail: String) -> Verdict {
    Verdict::Drifted { reason, detail }
}

/// One instance's verdict with where it lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceVerdict {
    /// The Auto Scaling group's name.
    pub group: String,
    /// The instance's availability zone.
    pub zone: String,
    /// What the rules concluded.
    pub verdict: Verdict,
}

/// Every instance of every group in `inputs.groups`, judged, by instance id.
pub fn fleet_verdicts(inputs: &DriftInputs) -> BTreeMap<String, InstanceVerdict> {
    let mut fleet = BTreeMap::new();
    for group in inputs.groups {
        for inst in &group.instances {
            fleet
                .entry(inst.instance_id.clone())
                .or_insert_with(|| InstanceVerdict {
                    group: group.name.clone(),
                    zone: inst.availability_zone.clone(),
                    verdict: instance_verdict(group, inst, inputs),
                });
        }
    }
    fleet
}

/// The groups not judged because a look-up about one of their templates failed or the group was
/// gone by the time its instances were described: one
/// [`SkipReason::LookupFailed`] per group, in group order.
pub fn failed_lookup_skips(inputs: &DriftInputs) -> Vec<SkipReason> {
    inputs
        .groups
        .iter()
        .filter_map(|group| group_skip(group, inputs))
        .filter(|why| matches!(why, SkipReason::LookupFailed { .. }))
        .collect()
}

/// A node's verdict, joined to its instance through `spec.providerID`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeVerdict {
    /// The instance id, when the providerID names one.
    pub instance: Option<String>,
    /// The instance's group, when it is in one of the selected groups.
    pub group: Option<String>,
    /// The instance's availability zone, when it is in one of the selected groups.
    pub zone: Option<String>,
    /// The instance's verdict, or a skip when the node cannot be joined to an instance.
    pub verdict: Verdict,
}

/// Joins a node (by its `spec.providerID`, `None` when unset) to the fleet's verdicts. Nodes
/// whose providerID does not name an instance, or whose instance is in no selected group, are
/// skipped with the reason.
pub fn node_verdict(
    provider_id: Option<&str>,
    fleet: &BTreeMap<String, InstanceVerdict>,
) -> NodeVerdict {
    let instance = match parse_aws_provider_id(provider_id.unwrap_or_default()) {
        Ok(instance) => instance.into_string(),
        Err(error) => {
            return NodeVerdict {
                instance: None,
                group: None,
                zone: None,
                verdict: Verdict::skip(SkipReason::ProviderId(error)),
            };
        }
    };
    match fleet.get(&instance) {
        Some(found) => NodeVerdict {
            instance: Some(instance),
            group: Some(found.group.clone()),
            zone: Some(found.zone.clone()),
            verdict: found.verdict.clone(),
        },
        None => NodeVerdict {
            verdict: Verdict::skip(SkipReason::InstanceNotInGroups {
                instance: instance.clone(),
            }),
            instance: Some(instance),
            group: None,
            zone: None,
        },
    }
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use rotor_core::ProviderIdError;
    use serde_json::{Value, json};

    use super::*;
    use crate::provider::aws_model::{
        index_instance_details, index_template_images, index_templates,
    };

    const NOW: &str = "2025-06-01T00:00:00Z";

    /// Owns what [`DriftInputs`] borrows; each test adjusts it, then calls `inputs()`.
    struct Fixture {
        groups: Vec<AutoScalingGroup>,
        templates: BTreeMap<String, LaunchTemplateInfo>,
        images: Option<BTreeMap<(String, i64), String>>,
        details: Option<BTreeMap<String, InstanceDetails>>,
        max_age: Option<Duration>,
        excluded_names: BTreeSet<String>,
        excluded_tags: Vec<TagExclusion>,
        include_eks_managed: bool,
        failed_templates: BTreeMap<String, FailedLookup>,
    }

    impl Fixture {
        fn new() -> Self {
            // DescribeLaunchTemplates: lt-0abc "workers" (latest 5, default 4) and the per-override
            // template lt-0arm "workers-arm" (latest 3, default 2).
            let templates = serde_json::from_value::<Vec<LaunchTemplateInfo>>(json!([
                {"LaunchTemplateId": "lt-0abc", "LaunchTemplateName": "workers",
                 "LatestVersionNumber": 5, "DefaultVersionNumber": 4},
                {"LaunchTemplateId": "lt-0arm", "LaunchTemplateName": "workers-arm",
                 "LatestVersionNumber": 3, "DefaultVersionNumber": 2}
            ]))
            .unwrap();
            Fixture {
                groups: Vec::new(),
                templates: index_templates(&templates),
                images: None,
                details: None,
                max_age: None,
                excluded_names: BTreeSet::new(),
                excluded_tags: Vec::new(),
                include_eks_managed: false,
                failed_templates: BTreeMap::new(),
            }
        }

        fn with_image_rule(mut self) -> Self {
            // DescribeLaunchTemplateVersions(ResolveAlias=true) for the versions groups resolve to.
            let versions = serde_json::from_value::<Vec<crate::provider::aws_model::TemplateVersionImage>>(
                json!([
                    {"LaunchTemplateId": "lt-0abc", "VersionNumber": 5, "LaunchTemplateData": {"ImageId": "ami-new"}},
                    {"LaunchTemplateId": "lt-0abc", "VersionNumber": 4, "LaunchTemplateData": {"ImageId": "ami-four"}}
                ]),
            )
            .unwrap();
            self.images = Some(index_template_images(&versions));
            self.with_details()
        }

        fn with_details(mut self) -> Self {
            let details = serde_json::from_value::<Vec<InstanceDetails>>(json!([
                {"InstanceId": "i-0aaa", "ImageId": "ami-new", "LaunchTime": "2025-04-15T00:00:00+00:00"},
                {"InstanceId": "i-0bbb", "ImageId": "ami-old", "LaunchTime": "2025-04-15T00:00:00+00:00"}
            ]))
            .unwrap();
            self.details = Some(index_instance_details(&details));
            self
        }

        fn inputs(&self) -> DriftInputs<'_> {
            DriftInputs {
                groups: &self.groups,
                templates: &self.templates,
                template_images: self.images.as_ref(),
                instance_details: self.details.as_ref(),
                max_age: self.max_age,
                now: NOW.parse().unwrap(),
                excluded_names: &self.excluded_names,
                excluded_tags: &self.excluded_tags,
                include_eks_managed: self.include_eks_managed,
                failed_templates: &self.failed_templates,
            }
        }

        /// The verdict for an m6i.large instance on lt-0abc version `instance_version` in a
        /// group using lt-0abc at `group_version`.
        fn template_verdict(&self, group_version: Option<&str>, instance_version: &str) -> Verdict {
            self.in_template_group(
                group_version,
                lt_instance("i-0aaa", "m6i.large", "lt-0abc", instance_version),
            )
        }

        /// The verdict for `instance` in a group using lt-0abc at `group_version`.
        fn in_template_group(&self, group_version: Option<&str>, instance: Value) -> Verdict {
            self.verdict(template_group(lt(group_version), instance))
        }

        /// The verdict for the first instance of a group built from `group_json`.
        fn verdict(&self, group_json: Value) -> Verdict {
            let group: AutoScalingGroup = serde_json::from_value(group_json).unwrap();
            instance_verdict(&group, &group.instances[0], &self.inputs())
        }
    }

    /// A group using `template` directly (DescribeAutoScalingGroups shape), with one instance.
    fn template_group(template: Value, instance: Value) -> Value {
        json!({
            "AutoScalingGroupName": "workers-a",
            "LaunchTemplate": template,
            "Instances": [instance],
            "Tags": [{"Key": "kubernetes.io/cluster/prod", "Value": "owned", "PropagateAtLaunch": true}]
        })
    }

    /// A group with a mixed instances policy over lt-0abc `$Latest` and the given overrides.
    fn mixed_group(overrides: Value, instance: Value) -> Value {
        json!({
            "AutoScalingGroupName": "workers-mixed",
            "MixedInstancesPolicy": {
                "LaunchTemplate": {
                    "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0abc", "LaunchTemplateName": "workers", "Version": "$Latest"},
                    "Overrides": overrides
                },
                "InstancesDistribution": {"OnDemandPercentageAboveBaseCapacity": 100}
            },
            "Instances": [instance],
            "Tags": []
        })
    }

    /// An InService instance launched from `template` version `version`.
    fn lt_instance(id: &str, instance_type: &str, template: &str, version: &str) -> Value {
        let name = if template == "lt-0arm" {
            "workers-arm"
        } else {
            "workers"
        };
        json!({
            "InstanceId": id, "InstanceType": instance_type, "AvailabilityZone": "us-east-1a",
            "LifecycleState": "InService", "HealthStatus": "Healthy",
            "LaunchTemplate": {"LaunchTemplateId": template, "LaunchTemplateName": name, "Version": version},
            "ProtectedFromScaleIn": false
        })
    }

    fn lc_instance(id: &str, lc: &str) -> Value {
        json!({
            "InstanceId": id, "InstanceType": "m5.large", "AvailabilityZone": "us-east-1b",
            "LifecycleState": "InService", "HealthStatus": "Healthy",
            "LaunchConfigurationName": lc, "ProtectedFromScaleIn": false
        })
    }

    fn lt(version: Option<&str>) -> Value {
        let mut spec = json!({"LaunchTemplateId": "lt-0abc", "LaunchTemplateName": "workers"});
        if let Some(version) = version {
            spec["Version"] = json!(version);
        }
        spec
    }

    fn drift(reason: DrainReason, detail: &str) -> Verdict {
        Verdict::Drifted {
            reason,
            detail: detail.to_owned(),
        }
    }

    fn skip(why: SkipReason) -> Verdict {
        Verdict::Skip { why }
    }

    #[test]
    fn resolves_latest_default_absent_and_fixed_versions() {
        let f = Fixture::new();
        let spec =
            |id: Option<&str>, name: Option<&str>, version: Option<&str>| LaunchTemplateSpec {
                id: id.map(Into::into),
                name: name.map(Into::into),
                version: version.map(Into::into),
            };
        let resolve = |s: LaunchTemplateSpec| resolve_group_version(&s, &f.templates);
        assert_eq!(resolve(spec(Some("lt-0abc"), None, Some("$Latest"))), Ok(5));
        assert_eq!(
            resolve(spec(Some("lt-0abc"), None, Some("$Default"))),
            Ok(4)
        );
        assert_eq!(resolve(spec(Some("lt-0abc"), None, None)), Ok(4));
        assert_eq!(resolve(spec(Some("lt-0abc"), None, Some("2"))), Ok(2));
        // By name when the spec has no id.
        assert_eq!(
            resolve(spec(None, Some("workers-arm"), Some("$Latest"))),
            Ok(3)
        );
        assert_eq!(
            resolve(spec(Some("lt-0gone"), Some("workers"), Some("$Latest"))),
            Err(SkipReason::TemplateUnknown {
                template: "lt-0gone".into()
            })
        );
        assert_eq!(
            resolve(spec(None, Some("nope"), None)),
            Err(SkipReason::TemplateUnknown {
                template: "nope".into()
            })
        );
        assert_eq!(
            resolve(spec(Some("lt-0abc"), None, Some("latest"))),
            Err(SkipReason::GroupVersionInvalid {
                template: "lt-0abc".into(),
                version: "latest".into()
            })
        );
    }

    #[test]
    fn version_latest() {
        let f = Fixture::new();
        assert_eq!(
            f.template_verdict(Some("$Latest"), "3"),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0abc: instance version 3, group wants 5 ($Latest)"
            )
        );
        assert_eq!(f.template_verdict(Some("$Latest"), "5"), Verdict::Current);
    }

    #[test]
    fn version_default_and_absent() {
        let f = Fixture::new();
        for version in [Some("$Default"), None] {
            // Newer than the default is drift too: the group launches the default.
            assert_eq!(
                f.template_verdict(version, "5"),
                drift(
                    DrainReason::LaunchTemplateVersion,
                    "lt-0abc: instance version 5, group wants 4 ($Default)"
                ),
                "{version:?}"
            );
            assert_eq!(
                f.template_verdict(version, "4"),
                Verdict::Current,
                "{version:?}"
            );
        }
    }

    #[test]
    fn version_fixed_compared_as_integers() {
        let f = Fixture::new();
        assert_eq!(
            f.template_verdict(Some("2"), "3"),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0abc: instance version 3, group wants 2"
            )
        );
        assert_eq!(f.template_verdict(Some("2"), "2"), Verdict::Current);
        // "10" vs "9": integers, not strings.
        let mut f = Fixture::new();
        f.templates.get_mut("lt-0abc").unwrap().latest_version = 10;
        assert_eq!(
            f.template_verdict(Some("$Latest"), "9"),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0abc: instance version 9, group wants 10 ($Latest)"
            )
        );
    }

    #[test]
    fn same_template_name_different_id_is_drift() {
        // The template was deleted and recreated under the same name: only the new one is described.
        let f = Fixture::new();
        assert_eq!(
            f.in_template_group(
                Some("$Latest"),
                lt_instance("i-0aaa", "m6i.large", "lt-0old", "5")
            ),
            drift(
                DrainReason::LaunchTemplate,
                "instance runs lt-0old (workers), group wants lt-0abc (workers)"
            )
        );
    }

    #[test]
    fn instance_template_without_id_is_found_by_name() {
        let f = Fixture::new();
        let mut instance = lt_instance("i-0aaa", "m6i.large", "lt-0abc", "5");
        instance["LaunchTemplate"]
            .as_object_mut()
            .unwrap()
            .remove("LaunchTemplateId");
        assert_eq!(
            f.verdict(template_group(lt(Some("$Latest")), instance.clone())),
            Verdict::Current
        );
        instance["LaunchTemplate"]["LaunchTemplateName"] = json!("gone");
        assert_eq!(
            f.verdict(template_group(lt(Some("$Latest")), instance)),
            skip(SkipReason::TemplateUnknown {
                template: "gone".into()
            })
        );
    }

    #[test]
    fn launch_configuration_to_launch_template_migration() {
        let f = Fixture::new();
        assert_eq!(
            f.verdict(template_group(
                lt(Some("$Latest")),
                lc_instance("i-0aaa", "legacy-lc-1")
            )),
            drift(
                DrainReason::LaunchTemplate,
                "instance uses launch configuration legacy-lc-1, group wants launch template lt-0abc (workers)"
            )
        );
        let mut bare = lc_instance("i-0aaa", "x");
        bare.as_object_mut()
            .unwrap()
            .remove("LaunchConfigurationName");
        assert_eq!(
            f.verdict(template_group(lt(Some("$Latest")), bare)),
            drift(
                DrainReason::LaunchTemplate,
                "instance has no launch template, group wants lt-0abc (workers)"
            )
        );
    }

    #[test]
    fn launch_configuration_rule() {
        let f = Fixture::new();
        let lc_group = |instance: Value| {
            json!({"AutoScalingGroupName": "legacy", "LaunchConfigurationName": "legacy-lc-2",
                   "Instances": [instance], "Tags": []})
        };
        assert_eq!(
            f.verdict(lc_group(lc_instance("i-0aaa", "legacy-lc-1"))),
            drift(
                DrainReason::LaunchConfiguration,
                "instance uses launch configuration legacy-lc-1, group wants legacy-lc-2"
            )
        );
        assert_eq!(
            f.verdict(lc_group(lc_instance("i-0aaa", "legacy-lc-2"))),
            Verdict::Current
        );
        // Back from a template to a launch configuration.
        assert_eq!(
            f.verdict(lc_group(lt_instance("i-0aaa", "m5.large", "lt-0abc", "5"))),
            drift(
                DrainReason::LaunchConfiguration,
                "instance uses launch template lt-0abc, group wants launch configuration legacy-lc-2"
            )
        );
        let mut bare = lc_instance("i-0aaa", "x");
        bare.as_object_mut()
            .unwrap()
            .remove("LaunchConfigurationName");
        assert_eq!(
            f.verdict(lc_group(bare)),
            drift(
                DrainReason::LaunchConfiguration,
                "instance has no launch configuration, group wants legacy-lc-2"
            )
        );
    }

    #[test]
    fn group_without_configuration_is_skipped() {
        let f = Fixture::new();
        assert_eq!(
            f.verdict(json!({"AutoScalingGroupName": "odd",
                             "Instances": [lc_instance("i-0aaa", "lc")], "Tags": []})),
            skip(SkipReason::GroupWithoutConfiguration {
                group: "odd".into()
            })
        );
    }

    #[test]
    fn mixed_policy_without_per_override_template() {
        let f = Fixture::new();
        let overrides = json!([{"InstanceType": "m6i.large"}, {"InstanceType": "m7i.large"}]);
        assert_eq!(
            f.verdict(mixed_group(
                overrides.clone(),
                lt_instance("i-0aaa", "m7i.large", "lt-0abc", "5")
            )),
            Verdict::Current
        );
        assert_eq!(
            f.verdict(mixed_group(
                overrides,
                lt_instance("i-0aaa", "m7i.large", "lt-0abc", "4")
            )),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0abc: instance version 4, group wants 5 ($Latest)"
            )
        );
    }

    #[test]
    fn mixed_policy_with_per_override_template() {
        let f = Fixture::new();
        let overrides = json!([
            {"InstanceType": "m6i.large"},
            {"InstanceType": "m7g.large", "LaunchTemplateSpecification":
                {"LaunchTemplateId": "lt-0arm", "LaunchTemplateName": "workers-arm"}}
        ]);
        // The override's template (no version = $Default = 2) replaces the base for m7g.large.
        assert_eq!(
            f.verdict(mixed_group(
                overrides.clone(),
                lt_instance("i-0aaa", "m7g.large", "lt-0arm", "2")
            )),
            Verdict::Current
        );
        assert_eq!(
            f.verdict(mixed_group(
                overrides.clone(),
                lt_instance("i-0aaa", "m7g.large", "lt-0arm", "1")
            )),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0arm: instance version 1, group wants 2 ($Default)"
            )
        );
        assert_eq!(
            f.verdict(mixed_group(
                overrides.clone(),
                lt_instance("i-0aaa", "m7g.large", "lt-0abc", "5")
            )),
            drift(
                DrainReason::LaunchTemplate,
                "instance runs lt-0abc (workers), group wants lt-0arm (workers-arm)"
            )
        );
        // Other types use the base template.
        assert_eq!(
            f.verdict(mixed_group(
                overrides.clone(),
                lt_instance("i-0aaa", "m6i.large", "lt-0abc", "5")
            )),
            Verdict::Current
        );
        assert_eq!(
            f.verdict(mixed_group(
                overrides,
                lt_instance("i-0aaa", "m6i.large", "lt-0arm", "2")
            )),
            drift(
                DrainReason::LaunchTemplate,
                "instance runs lt-0arm (workers-arm), group wants lt-0abc (workers)"
            )
        );
    }

    #[test]
    fn instance_type_not_in_overrides() {
        let f = Fixture::new();
        let overrides = json!([{"InstanceType": "m6i.large"}, {"InstanceType": "m7i.large"}]);
        assert_eq!(
            f.verdict(mixed_group(
                overrides.clone(),
                lt_instance("i-0aaa", "m5.large", "lt-0abc", "5")
            )),
            drift(
                DrainReason::InstanceType,
                "instance type m5.large not in overrides [m6i.large, m7i.large]"
            )
        );
        // The version rule comes first.
        assert_eq!(
            f.verdict(mixed_group(
                overrides,
                lt_instance("i-0aaa", "m5.large", "lt-0abc", "3")
            )),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0abc: instance version 3, group wants 5 ($Latest)"
            )
        );
        // A policy without overrides allows every type.
        assert_eq!(
            f.verdict(mixed_group(
                json!([]),
                lt_instance("i-0aaa", "m5.large", "lt-0abc", "5")
            )),
            Verdict::Current
        );
    }

    #[test]
    fn attribute_based_overrides_skip_only_the_instance_type_rule() {
        let overrides = json!([
            {"InstanceRequirements": {"VCpuCount": {"Min": 2, "Max": 8}, "MemoryMiB": {"Min": 4096}}}
        ]);
        let group: AutoScalingGroup = serde_json::from_value(mixed_group(
            overrides.clone(),
            lt_instance("i-0bbb", "m5.large", "lt-0abc", "5"),
        ))
        .unwrap();
        assert_eq!(
            instance_type_rule_skip(&group),
            Some(SkipReason::AttributeBasedOverrides {
                group: "workers-mixed".into()
            })
        );
        let f = Fixture::new();
        assert_eq!(
            f.verdict(mixed_group(
                overrides.clone(),
                lt_instance("i-0bbb", "m5.large", "lt-0abc", "5")
            )),
            Verdict::Current
        );
        // Later rules still apply: version, and image (i-0bbb runs ami-old).
        assert_eq!(
            f.verdict(mixed_group(
                overrides.clone(),
                lt_instance("i-0bbb", "m5.large", "lt-0abc", "4")
            )),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0abc: instance version 4, group wants 5 ($Latest)"
            )
        );
        let f = Fixture::new().with_image_rule();
        assert_eq!(
            f.verdict(mixed_group(
                overrides,
                lt_instance("i-0bbb", "m5.large", "lt-0abc", "5")
            )),
            drift(
                DrainReason::Image,
                "image ami-old, template lt-0abc v5 has ami-new"
            )
        );
        // Even next to explicit types, attribute-based requirements turn the rule off.
        assert_eq!(
            f.verdict(mixed_group(
                json!([
                    {"InstanceType": "m6i.large"},
                    {"InstanceRequirements": {"VCpuCount": {"Min": 2}, "MemoryMiB": {"Min": 4096}}}
                ]),
                lt_instance("i-0aaa", "m5.large", "lt-0abc", "5")
            )),
            Verdict::Current
        );
        let plain: AutoScalingGroup = serde_json::from_value(mixed_group(
            json!([{"InstanceType": "m6i.large"}]),
            lt_instance("i-0aaa", "m6i.large", "lt-0abc", "5"),
        ))
        .unwrap();
        assert_eq!(instance_type_rule_skip(&plain), None);
    }

    #[test]
    fn an_attribute_based_override_with_its_own_template_is_judged_by_that_template() {
        let mut f = Fixture::new();
        // DescribeLaunchTemplates also answers the x86 override's template.
        f.templates.insert(
            "lt-0x86".into(),
            serde_json::from_value(json!({
                "LaunchTemplateId": "lt-0x86", "LaunchTemplateName": "workers-x86",
                "LatestVersionNumber": 7, "DefaultVersionNumber": 6
            }))
            .unwrap(),
        );
        // As DescribeAutoScalingGroups answers it: attribute-based overrides, each with the
        // template of its architecture, on the base template lt-0abc $Latest.
        let overrides = json!([
            {"InstanceRequirements": {"VCpuCount": {"Min": 2, "Max": 8}, "MemoryMiB": {"Min": 4096},
                                      "CpuManufacturers": ["intel", "amd"]},
             "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0x86", "LaunchTemplateName": "workers-x86", "Version": "$Latest"}},
            {"InstanceRequirements": {"VCpuCount": {"Min": 2, "Max": 8}, "MemoryMiB": {"Min": 4096},
                                      "CpuManufacturers": ["amazon-web-services"]},
             "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0arm", "LaunchTemplateName": "workers-arm"}}
        ]);
        let verdict = |instance| f.verdict(mixed_group(overrides.clone(), instance));

        // The arm override's template, no version = $Default = 2.
        assert_eq!(
            verdict(lt_instance("i-0aaa", "m7g.large", "lt-0arm", "2")),
            Verdict::Current
        );
        assert_eq!(
            verdict(lt_instance("i-0aaa", "m7g.large", "lt-0arm", "1")),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0arm: instance version 1, group wants 2 ($Default)"
            )
        );
        // The x86 override's template at $Latest = 7.
        assert_eq!(
            verdict(lt_instance("i-0aaa", "m6i.large", "lt-0x86", "7")),
            Verdict::Current
        );
        assert_eq!(
            verdict(lt_instance("i-0aaa", "m6i.large", "lt-0x86", "6")),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0x86: instance version 6, group wants 7 ($Latest)"
            )
        );
        // The base template still applies to an instance launched from it.
        assert_eq!(
            verdict(lt_instance("i-0aaa", "m6i.large", "lt-0abc", "5")),
            Verdict::Current
        );
        // A template none of the group's specs names is judged against the base, as before.
        assert_eq!(
            verdict(lt_instance("i-0aaa", "m6i.large", "lt-0old", "5")),
            drift(
                DrainReason::LaunchTemplate,
                "instance runs lt-0old (workers), group wants lt-0abc (workers)"
            )
        );
        // Two overrides on one template at different versions: either version is current.
        let pinned = json!([
            {"InstanceRequirements": {"VCpuCount": {"Min": 2}, "MemoryMiB": {"Min": 4096}},
             "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0arm", "Version": "1"}},
            {"InstanceRequirements": {"VCpuCount": {"Min": 4}, "MemoryMiB": {"Min": 8192}},
             "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0arm", "Version": "$Latest"}}
        ]);
        for version in ["1", "3"] {
            assert_eq!(
                f.verdict(mixed_group(
                    pinned.clone(),
                    lt_instance("i-0aaa", "m7g.large", "lt-0arm", version)
                )),
                Verdict::Current
            );
        }
        assert_eq!(
            f.verdict(mixed_group(
                pinned,
                lt_instance("i-0aaa", "m7g.large", "lt-0arm", "2")
            )),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0arm: instance version 2, group wants 1"
            )
        );
        // One override pins the base's template at version 1, another has no template of its
        // own and launches through the base ($Latest = 5): either version is current.
        let beside_the_base = json!([
            {"InstanceRequirements": {"VCpuCount": {"Min": 2}, "MemoryMiB": {"Min": 4096}},
             "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0abc", "Version": "1"}},
            {"InstanceRequirements": {"VCpuCount": {"Min": 4}, "MemoryMiB": {"Min": 8192}}}
        ]);
        for version in ["1", "5"] {
            assert_eq!(
                f.verdict(mixed_group(
                    beside_the_base.clone(),
                    lt_instance("i-0aaa", "m6i.large", "lt-0abc", version)
                )),
                Verdict::Current,
                "version {version}"
            );
        }
    }

    #[test]
    fn not_in_service_states_are_skipped() {
        let f = Fixture::new();
        for state in [
            "Pending",
            "Pending:Wait",
            "Terminating",
            "Terminating:Wait",
            "Standby",
            "Warmed:Running",
            "Warmed:Stopped",
            "Detaching",
        ] {
            // Out of date in every other respect: the skip still wins.
            let mut instance = lt_instance("i-0aaa", "m6i.large", "lt-0old", "1");
            instance["LifecycleState"] = json!(state);
            assert_eq!(
                f.verdict(template_group(lt(Some("$Latest")), instance)),
                skip(SkipReason::NotInService {
                    state: state.into()
                }),
                "{state}"
            );
        }
    }

    #[test]
    fn deleting_group_is_skipped() {
        let f = Fixture::new();
        let mut group = template_group(
            lt(Some("$Latest")),
            lt_instance("i-0aaa", "m6i.large", "lt-0abc", "3"),
        );
        group["Status"] = json!("Delete in progress");
        assert_eq!(
            f.verdict(group),
            skip(SkipReason::GroupDeleting {
                group: "workers-a".into(),
                status: "Delete in progress".into()
            })
        );
    }

    #[test]
    fn excluded_groups_are_skipped() {
        let drifted_group = || {
            template_group(
                lt(Some("$Latest")),
                lt_instance("i-0aaa", "m6i.large", "lt-0abc", "3"),
            )
        };
        let mut f = Fixture::new();
        f.excluded_names.insert("workers-a".into());
        assert_eq!(
            f.verdict(drifted_group()),
            skip(SkipReason::GroupExcludedByName {
                group: "workers-a".into()
            })
        );

        let mut f = Fixture::new();
        f.excluded_tags = vec!["kubernetes.io/cluster/prod".parse().unwrap()];
        assert_eq!(
            f.verdict(drifted_group()),
            skip(SkipReason::GroupExcludedByTag {
                group: "workers-a".into(),
                key: "kubernetes.io/cluster/prod".into(),
                value: "owned".into()
            })
        );

        f.excluded_tags = vec!["kubernetes.io/cluster/prod=shared".parse().unwrap()];
        assert!(matches!(
            f.verdict(drifted_group()),
            Verdict::Drifted {
                reason: DrainReason::LaunchTemplateVersion,
                ..
            }
        ));
        f.excluded_tags = vec!["kubernetes.io/cluster/prod=owned".parse().unwrap()];
        assert_eq!(
            f.verdict(drifted_group()),
            skip(SkipReason::GroupExcludedByTag {
                group: "workers-a".into(),
                key: "kubernetes.io/cluster/prod".into(),
                value: "owned".into()
            })
        );
    }

    #[test]
    fn a_failed_template_lookup_skips_the_groups_naming_it() {
        let failed = |key: &str| {
            let mut f = Fixture::new();
            f.failed_templates.insert(
                key.into(),
                FailedLookup {
                    operation: "DescribeLaunchTemplateVersions",
                    error: "InvalidLaunchTemplateId.NotFound: gone".into(),
                },
            );
            f
        };
        let lookup_failed = |group: &str, template: &str| {
            skip(SkipReason::LookupFailed {
                group: group.into(),
                operation: "DescribeLaunchTemplateVersions",
                template: template.into(),
                error: "InvalidLaunchTemplateId.NotFound: gone".into(),
            })
        };
        let current = lt_instance("i-0aaa", "m5.large", "lt-0abc", "5");

        // By id, and by the id a name-only spec resolves to.
        let f = failed("lt-0abc");
        assert_eq!(
            f.verdict(template_group(lt(Some("$Latest")), current.clone())),
            lookup_failed("workers-a", "lt-0abc")
        );
        let by_name = json!({"LaunchTemplateName": "workers", "Version": "$Latest"});
        assert_eq!(
            f.verdict(template_group(by_name.clone(), current.clone())),
            lookup_failed("workers-a", "lt-0abc")
        );
        // By the name asked for (the template could not be described at all).
        assert_eq!(
            failed("workers").verdict(template_group(by_name, current.clone())),
            lookup_failed("workers-a", "workers")
        );
        // An override's own template fails the whole group, even for instances of other types.
        let overrides = json!([
            {"InstanceType": "m5.large"},
            {"InstanceType": "m6g.large", "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0arm"}}
        ]);
        assert_eq!(
            failed("lt-0arm").verdict(mixed_group(overrides, current.clone())),
            lookup_failed("workers-mixed", "lt-0arm")
        );
        // Another template's failure leaves the group judged; exclusions still come first.
        assert_eq!(
            failed("lt-0other").verdict(template_group(lt(Some("$Latest")), current.clone())),
            Verdict::Current
        );
        let mut f = failed("lt-0abc");
        f.excluded_names.insert("workers-a".into());
        assert_eq!(
            f.verdict(template_group(lt(Some("$Latest")), current)),
            skip(SkipReason::GroupExcludedByName {
                group: "workers-a".into()
            })
        );
    }

    #[test]
    fn tag_exclusions_parse() {
        assert_eq!(
            "team".parse(),
            Ok(TagExclusion {
                key: "team".into(),
                value: None
            })
        );
        assert_eq!(
            "rotor=off".parse(),
            Ok(TagExclusion {
                key: "rotor".into(),
                value: Some("off".into())
            })
        );
        assert_eq!(
            "a=b=c".parse::<TagExclusion>().unwrap().to_string(),
            "a=b=c"
        );
        assert_eq!(
            "=x".parse::<TagExclusion>(),
            Err(ParseTagExclusionError { value: "=x".into() })
        );
        assert!("".parse::<TagExclusion>().is_err());
    }

    #[test]
    fn eks_managed_groups_are_skipped_unless_included() {
        let mut group = template_group(
            lt(Some("$Latest")),
            lt_instance("i-0aaa", "m6i.large", "lt-0abc", "3"),
        );
        group["Tags"] = json!([
            {"Key": "eks:cluster-name", "Value": "prod"},
            {"Key": "eks:nodegroup-name", "Value": "ng-general"}
        ]);
        let mut f = Fixture::new();
        assert_eq!(
            f.verdict(group.clone()),
            skip(SkipReason::EksManaged {
                group: "workers-a".into(),
                nodegroup: "ng-general".into()
            })
        );
        f.include_eks_managed = true;
        assert_eq!(
            f.verdict(group),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0abc: instance version 3, group wants 5 ($Latest)"
            )
        );
    }

    #[test]
    fn non_numeric_or_missing_instance_version_is_skipped() {
        let f = Fixture::new();
        assert_eq!(
            f.template_verdict(Some("$Latest"), "$Latest"),
            skip(SkipReason::InstanceVersionNotNumeric {
                template: "lt-0abc".into(),
                version: Some("$Latest".into())
            })
        );
        let mut instance = lt_instance("i-0aaa", "m6i.large", "lt-0abc", "5");
        instance["LaunchTemplate"]
            .as_object_mut()
            .unwrap()
            .remove("Version");
        assert_eq!(
            f.verdict(template_group(lt(Some("$Latest")), instance)),
            skip(SkipReason::InstanceVersionNotNumeric {
                template: "lt-0abc".into(),
                version: None
            })
        );
    }

    #[test]
    fn unknown_group_template_is_skipped() {
        let f = Fixture::new();
        assert_eq!(
            f.verdict(template_group(
                json!({"LaunchTemplateId": "lt-0gone", "Version": "$Latest"}),
                lt_instance("i-0aaa", "m6i.large", "lt-0abc", "5")
            )),
            skip(SkipReason::TemplateUnknown {
                template: "lt-0gone".into()
            })
        );
    }

    #[test]
    fn image_rule_only_when_enabled() {
        // i-0bbb runs ami-old; lt-0abc v5 has ami-new.
        let group = || {
            template_group(
                lt(Some("$Latest")),
                lt_instance("i-0bbb", "m6i.large", "lt-0abc", "5"),
            )
        };
        assert_eq!(
            Fixture::new().with_details().verdict(group()),
            Verdict::Current
        );
        let f = Fixture::new().with_image_rule();
        assert_eq!(
            f.verdict(group()),
            drift(
                DrainReason::Image,
                "image ami-old, template lt-0abc v5 has ami-new"
            )
        );
        assert_eq!(f.template_verdict(Some("$Latest"), "5"), Verdict::Current);
        // Compared with the group's resolved version: $Default is v4 (ami-four).
        assert_eq!(
            f.template_verdict(None, "4"),
            drift(
                DrainReason::Image,
                "image ami-new, template lt-0abc v4 has ami-four"
            )
        );
        // Version drift wins over image drift.
        assert_eq!(
            f.in_template_group(
                Some("$Latest"),
                lt_instance("i-0bbb", "m6i.large", "lt-0abc", "4")
            ),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0abc: instance version 4, group wants 5 ($Latest)"
            )
        );
    }

    #[test]
    fn image_rule_fails_safe_on_missing_data() {
        let f = Fixture::new().with_image_rule();
        assert_eq!(
            f.in_template_group(
                Some("$Latest"),
                lt_instance("i-0ccc", "m6i.large", "lt-0abc", "5")
            ),
            // Its only InService instance is gone: the group was deleted since it was listed.
            skip(SkipReason::LookupFailed {
                group: "workers-a".into(),
                operation: "DescribeInstances",
                template: "workers-a".into(),
                error: "none of the group's 1 InService instances is pending or running any more (the group was deleted or emptied after DescribeAutoScalingGroups listed it)".into(),
            })
        );
        assert_eq!(
            f.template_verdict(Some("3"), "3"),
            skip(SkipReason::TemplateImageUnknown {
                template: "lt-0abc".into(),
                version: 3
            })
        );
    }

    #[test]
    fn max_age_rule() {
        // Both instances launched 2025-04-15, 47 days before NOW.
        let mut f = Fixture::new().with_details();
        let group = || {
            template_group(
                lt(Some("$Latest")),
                lt_instance("i-0aaa", "m6i.large", "lt-0abc", "5"),
            )
        };
        assert_eq!(f.verdict(group()), Verdict::Current);
        f.max_age = Some(Duration::from_secs(30 * 86_400));
        assert_eq!(
            f.verdict(group()),
            drift(DrainReason::MaxAge, "launched 47d ago, max age 30d")
        );
        f.max_age = Some(Duration::from_secs(47 * 86_400));
        assert_eq!(f.verdict(group()), Verdict::Current, "exactly the limit");
        f.max_age = Some(Duration::from_secs(47 * 86_400 - 1));
        assert_eq!(
            f.verdict(group()),
            drift(
                DrainReason::MaxAge,
                "launched 47d ago, max age 46d23h59m59s"
            )
        );
        // Earlier rules win.
        f.max_age = Some(Duration::from_secs(86_400));
        assert_eq!(
            f.template_verdict(Some("$Latest"), "4"),
            drift(
                DrainReason::LaunchTemplateVersion,
                "lt-0abc: instance version 4, group wants 5 ($Latest)"
            )
        );
        // Launch-configuration groups age too.
        let lc_group = |lc: &str| {
            json!({"AutoScalingGroupName": "legacy", "LaunchConfigurationName": "lc",
                   "Instances": [lc_instance("i-0bbb", lc)], "Tags": []})
        };
        assert_eq!(
            f.verdict(lc_group("lc")),
            drift(DrainReason::MaxAge, "launched 47d ago, max age 1d")
        );
        assert_eq!(
            f.verdict(lc_group("old")),
            drift(
                DrainReason::LaunchConfiguration,
                "instance uses launch configuration old, group wants lc"
            )
        );
        // Without DescribeInstances data: skipped, not guessed.
        f.details = None;
        assert_eq!(
            f.verdict(group()),
            skip(SkipReason::InstanceDetailsMissing {
                instance: "i-0aaa".into()
            })
        );
    }

    #[test]
    fn nodes_join_to_instances_by_provider_id() {
        let mut f = Fixture::new();
        f.groups = vec![
            serde_json::from_value(json!({
                "AutoScalingGroupName": "workers-a",
                "LaunchTemplate": lt(Some("$Latest")),
                "Instances": [
                    lt_instance("i-0aaa", "m6i.large", "lt-0abc", "5"),
                    lt_instance("i-0bbb", "m6i.large", "lt-0abc", "3")
                ],
                "Tags": []
            }))
            .unwrap(),
        ];
        let fleet = fleet_verdicts(&f.inputs());
        assert_eq!(fleet.len(), 2);
        assert_eq!(
            node_verdict(Some("aws:///us-east-1a/i-0bbb"), &fleet),
            NodeVerdict {
                instance: Some("i-0bbb".into()),
                group: Some("workers-a".into()),
                zone: Some("us-east-1a".into()),
                verdict: drift(
                    DrainReason::LaunchTemplateVersion,
                    "lt-0abc: instance version 3, group wants 5 ($Latest)"
                ),
            }
        );
        assert_eq!(
            node_verdict(Some("aws:///us-east-1a/i-0aaa"), &fleet).verdict,
            Verdict::Current
        );
        assert_eq!(
            node_verdict(Some("aws:///us-east-1a/i-0ccc"), &fleet),
            NodeVerdict {
                instance: Some("i-0ccc".into()),
                group: None,
                zone: None,
                verdict: skip(SkipReason::InstanceNotInGroups {
                    instance: "i-0ccc".into()
                }),
            }
        );
        let fargate = "aws:///us-east-1a/fargate-ip-10-0-0-1.ec2.internal";
        assert_eq!(
            node_verdict(Some(fargate), &fleet),
            NodeVerdict {
                instance: None,
                group: None,
                zone: None,
                verdict: skip(SkipReason::ProviderId(ProviderIdError::Fargate {
                    provider_id: fargate.into()
                })),
            }
        );
        assert_eq!(
            node_verdict(None, &fleet).verdict,
            skip(SkipReason::ProviderId(ProviderIdError::Empty))
        );
        assert_eq!(
            node_verdict(Some("kind://docker/kind/kind-worker"), &fleet).verdict,
            skip(SkipReason::ProviderId(ProviderIdError::UnsupportedScheme {
                provider_id: "kind://docker/kind/kind-worker".into(),
                scheme: "kind".into()
            }))
        );
    }
}
