//! AWS-shaped plain data: the parts of DescribeAutoScalingGroups, DescribeLaunchTemplates,
//! DescribeLaunchTemplateVersions and DescribeInstances answers that the drift rules read. Field
//! names are the API's, Rust-cased; the serde form is the API's JSON shape (as `aws ... --output
//! json` prints it), so fixtures can be pasted from real answers. No behaviour lives here.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// One Auto Scaling group, as in `DescribeAutoScalingGroups.AutoScalingGroups[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AutoScalingGroup {
    /// `AutoScalingGroupName`.
    #[serde(rename = "AutoScalingGroupName")]
    pub name: String,
    /// `Tags[]`, as key → value (the API's `[{Key, Value, ...}]` list in JSON).
    #[serde(default, with = "tag_list")]
    pub tags: BTreeMap<String, String>,
    /// `Status`: absent normally, `"Delete in progress"` while the group is being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// `LaunchConfigurationName`, when the group uses a launch configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_configuration_name: Option<String>,
    /// `LaunchTemplate`, when the group uses a launch template directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_template: Option<LaunchTemplateSpec>,
    /// `MixedInstancesPolicy`, when the group uses a mixed instances policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed_instances_policy: Option<MixedInstancesPolicy>,
    /// `Instances[]`.
    #[serde(default)]
    pub instances: Vec<GroupInstance>,
    /// `DesiredCapacity`.
    #[serde(default)]
    pub desired_capacity: i32,
    /// `MaxSize`.
    #[serde(default)]
    pub max_size: i32,
}

/// A launch template reference (`LaunchTemplateSpecification`), on a group, in a mixed instances
/// policy or an override, or on an instance.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchTemplateSpec {
    /// `LaunchTemplateId`, e.g. `lt-0abc`.
    #[serde(
        rename = "LaunchTemplateId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<String>,
    /// `LaunchTemplateName`.
    #[serde(
        rename = "LaunchTemplateName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<String>,
    /// `Version`. On a group: `"$Latest"`, `"$Default"`, a number such as `"5"`, or absent
    /// (= `$Default`). On an instance: the resolved number it was launched with.
    #[serde(rename = "Version", default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// `MixedInstancesPolicy`, flattened: the API nests the template and overrides under
/// `MixedInstancesPolicy.LaunchTemplate {LaunchTemplateSpecification, Overrides[]}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    from = "wire::MixedInstancesPolicy",
    into = "wire::MixedInstancesPolicy"
)]
pub struct MixedInstancesPolicy {
    /// `LaunchTemplate.LaunchTemplateSpecification`: the base template.
    pub launch_template: LaunchTemplateSpec,
    /// `LaunchTemplate.Overrides[]`.
    pub overrides: Vec<Override>,
}

/// One `MixedInstancesPolicy.LaunchTemplate.Overrides[]` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "wire::Override", into = "wire::Override")]
pub struct Override {
    /// `InstanceType`, when the override names an explicit type.
    pub instance_type: Option<String>,
    /// `LaunchTemplateSpecification`: the override's own template, which replaces the base
    /// template for instances of this override's type.
    pub launch_template: Option<LaunchTemplateSpec>,
    /// Whether `InstanceRequirements` (attribute-based instance type selection) is present.
    pub has_instance_requirements: bool,
}

/// One `AutoScalingGroups[].Instances[]` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct GroupInstance {
    /// `InstanceId`, e.g. `i-0123456789abcdef0`.
    pub instance_id: String,
    /// `LifecycleState`: `InService`, `Pending`, `Terminating:Wait`, `Standby`, `Warmed:Running`...
    pub lifecycle_state: String,
    /// `HealthStatus`: `Healthy` or `Unhealthy`.
    pub health_status: String,
    /// `AvailabilityZone`, e.g. `us-east-1a`.
    pub availability_zone: String,
    /// `InstanceType`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// `LaunchTemplate`; its `version` is the resolved number the instance was launched with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_template: Option<LaunchTemplateSpec>,
    /// `LaunchConfigurationName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_configuration_name: Option<String>,
    /// `ProtectedFromScaleIn`.
    #[serde(default)]
    pub protected_from_scale_in: bool,
}

/// One `DescribeLaunchTemplates.LaunchTemplates[]` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchTemplateInfo {
    /// `LaunchTemplateId`.
    #[serde(rename = "LaunchTemplateId")]
    pub id: String,
    /// `LaunchTemplateName`.
    #[serde(rename = "LaunchTemplateName")]
    pub name: String,
    /// `LatestVersionNumber`: what `$Latest` resolves to.
    #[serde(rename = "LatestVersionNumber")]
    pub latest_version: i64,
    /// `DefaultVersionNumber`: what `$Default` (or an absent version) resolves to.
    #[serde(rename = "DefaultVersionNumber")]
    pub default_version: i64,
}

/// The parts of one `DescribeInstances.Reservations[].Instances[]` entry the image and max-age
/// rules read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstanceDetails {
    /// `InstanceId`.
    pub instance_id: String,
    /// `ImageId`: the AMI the instance was launched from.
    pub image_id: String,
    /// `LaunchTime`.
    pub launch_time: Timestamp,
}

/// One `DescribeLaunchTemplateVersions(ResolveAlias=true).LaunchTemplateVersions[]` entry, reduced
/// to the image it launches (`LaunchTemplateData.ImageId`, with `resolve:ssm:` aliases resolved).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "wire::TemplateVersion", into = "wire::TemplateVersion")]
pub struct TemplateVersionImage {
    /// `LaunchTemplateId`.
    pub template_id: String,
    /// `VersionNumber`.
    pub version: i64,
    /// `LaunchTemplateData.ImageId`.
    pub image_id: String,
}

/// The lookup the image rule uses: (template id, version) → image id.
pub fn index_template_images(versions: &[TemplateVersionImage]) -> BTreeMap<(String, i64), String> {
    versions
        .iter()
        .map(|v| ((v.template_id.clone(), v.version), v.image_id.clone()))
        .collect()
}

/// The lookup the image and max-age rules use: instance id → details.
pub fn index_instance_details(instances: &[InstanceDetails]) -> BTreeMap<String, InstanceDetails> {
    instances
        .iter()
        .map(|i| (i.instance_id.clone(), i.clone()))
        .collect()
}

/// Launch templates by id, as `DriftInputs::templates` wants them.
pub fn index_templates(templates: &[LaunchTemplateInfo]) -> BTreeMap<String, LaunchTemplateInfo> {
    templates
        .iter()
        .map(|t| (t.id.clone(), t.clone()))
        .collect()
}

/// `Tags: [{"Key": .., "Value": .., "ResourceId": .., ...}]` ↔ key → value.
mod tag_list {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Tag {
        key: String,
        #[serde(default)]
        value: String,
    }

    pub fn serialize<S: Serializer>(
        tags: &BTreeMap<String, String>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        tags.iter()
            .map(|(key, value)| Tag {
                key: key.clone(),
                value: value.clone(),
            })
            .collect::<Vec<_>>()
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, String>, D::Error> {
        Ok(Vec::<Tag>::deserialize(d)?
            .into_iter()
            .map(|tag| (tag.key, tag.value))
            .collect())
    }
}

/// The API's nesting, converted to and from the flat types above.
mod wire {
    use serde::{Deserialize, Serialize};

    use super::LaunchTemplateSpec;

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub struct MixedInstancesPolicy {
        launch_template: MixedLaunchTemplate,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct MixedLaunchTemplate {
        launch_template_specification: LaunchTemplateSpec,
        #[serde(default)]
        overrides: Vec<super::Override>,
    }

    impl From<MixedInstancesPolicy> for super::MixedInstancesPolicy {
        fn from(wire: MixedInstancesPolicy) -> Self {
            Self {
                launch_template: wire.launch_template.launch_template_specification,
                overrides: wire.launch_template.overrides,
            }
        }
    }

    impl From<super::MixedInstancesPolicy> for MixedInstancesPolicy {
        fn from(policy: super::MixedInstancesPolicy) -> Self {
            Self {
                launch_template: MixedLaunchTemplate {
                    launch_template_specification: policy.launch_template,
                    overrides: policy.overrides,
                },
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub struct Override {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        launch_template_specification: Option<LaunchTemplateSpec>,
        /// Kept opaque: only its presence matters to rotor.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance_requirements: Option<serde_json::Value>,
    }

    impl From<Override> for super::Override {
        fn from(wire: Override) -> Self {
            Self {
                instance_type: wire.instance_type,
                launch_template: wire.launch_template_specification,
                has_instance_requirements: wire.instance_requirements.is_some(),
            }
        }
    }

    impl From<super::Override> for Override {
        fn from(value: super::Override) -> Self {
            Self {
                instance_type: value.instance_type,
                launch_template_specification: value.launch_template,
                instance_requirements: value
                    .has_instance_requirements
                    .then(|| serde_json::Value::Object(serde_json::Map::new())),
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub struct TemplateVersion {
        launch_template_id: String,
        version_number: i64,
        launch_template_data: TemplateData,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct TemplateData {
        image_id: String,
    }

    impl From<TemplateVersion> for super::TemplateVersionImage {
        fn from(wire: TemplateVersion) -> Self {
            Self {
                template_id: wire.launch_template_id,
                version: wire.version_number,
                image_id: wire.launch_template_data.image_id,
            }
        }
    }

    impl From<super::TemplateVersionImage> for TemplateVersion {
        fn from(value: super::TemplateVersionImage) -> Self {
            Self {
                launch_template_id: value.template_id,
                version_number: value.version,
                launch_template_data: TemplateData {
                    image_id: value.image_id,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Trimmed from a real `aws autoscaling describe-auto-scaling-groups` answer.
    fn mixed_group_json() -> serde_json::Value {
        json!({
            "AutoScalingGroupName": "eks-workers-a",
            "AutoScalingGroupARN": "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:uuid:autoScalingGroupName/eks-workers-a",
            "MixedInstancesPolicy": {
                "LaunchTemplate": {
                    "LaunchTemplateSpecification": {
                        "LaunchTemplateId": "lt-0abc",
                        "LaunchTemplateName": "workers",
                        "Version": "$Latest"
                    },
                    "Overrides": [
                        {"InstanceType": "m6i.large", "WeightedCapacity": "1"},
                        {"InstanceType": "m7g.large", "LaunchTemplateSpecification": {
                            "LaunchTemplateId": "lt-0arm", "LaunchTemplateName": "workers-arm", "Version": "$Default"}},
                        {"InstanceRequirements": {"VCpuCount": {"Min": 2}, "MemoryMiB": {"Min": 4096}}}
                    ]
                },
                "InstancesDistribution": {"OnDemandBaseCapacity": 0}
            },
            "MinSize": 1, "MaxSize": 10, "DesiredCapacity": 2,
            "AvailabilityZones": ["us-east-1a", "us-east-1b"],
            "Instances": [{
                "InstanceId": "i-0aaa",
                "InstanceType": "m6i.large",
                "AvailabilityZone": "us-east-1a",
                "LifecycleState": "InService",
                "HealthStatus": "Healthy",
                "LaunchTemplate": {"LaunchTemplateId": "lt-0abc", "LaunchTemplateName": "workers", "Version": "3"},
                "ProtectedFromScaleIn": false
            }],
            "Tags": [{
                "ResourceId": "eks-workers-a", "ResourceType": "auto-scaling-group",
                "Key": "kubernetes.io/cluster/prod", "Value": "owned", "PropagateAtLaunch": true
            }],
            "CreatedTime": "2025-01-02T03:04:05.678Z"
        })
    }

    #[test]
    fn group_reads_the_api_json_shape() {
        let group: AutoScalingGroup = serde_json::from_value(mixed_group_json()).unwrap();
        assert_eq!(
            group,
            AutoScalingGroup {
                name: "eks-workers-a".into(),
                tags: BTreeMap::from([("kubernetes.io/cluster/prod".into(), "owned".into())]),
                status: None,
                launch_configuration_name: None,
                launch_template: None,
                mixed_instances_policy: Some(MixedInstancesPolicy {
                    launch_template: LaunchTemplateSpec {
                        id: Some("lt-0abc".into()),
                        name: Some("workers".into()),
                        version: Some("$Latest".into()),
                    },
                    overrides: vec![
                        Override {
                            instance_type: Some("m6i.large".into()),
                            launch_template: None,
                            has_instance_requirements: false,
                        },
                        Override {
                            instance_type: Some("m7g.large".into()),
                            launch_template: Some(LaunchTemplateSpec {
                                id: Some("lt-0arm".into()),
                                name: Some("workers-arm".into()),
                                version: Some("$Default".into()),
                            }),
                            has_instance_requirements: false,
                        },
                        Override {
                            instance_type: None,
                            launch_template: None,
                            has_instance_requirements: true,
                        },
                    ],
                }),
                instances: vec![GroupInstance {
                    instance_id: "i-0aaa".into(),
                    lifecycle_state: "InService".into(),
                    health_status: "Healthy".into(),
                    availability_zone: "us-east-1a".into(),
                    instance_type: Some("m6i.large".into()),
                    launch_template: Some(LaunchTemplateSpec {
                        id: Some("lt-0abc".into()),
                        name: Some("workers".into()),
                        version: Some("3".into()),
                    }),
                    launch_configuration_name: None,
                    protected_from_scale_in: false,
                }],
                desired_capacity: 2,
                max_size: 10,
            }
        );
    }

    #[test]
    fn group_round_trips_through_the_api_shape() {
        let group: AutoScalingGroup = serde_json::from_value(mixed_group_json()).unwrap();
        let text = serde_json::to_value(&group).unwrap();
        assert_eq!(
            text["MixedInstancesPolicy"]["LaunchTemplate"]["LaunchTemplateSpecification"]["LaunchTemplateId"],
            "lt-0abc"
        );
        assert_eq!(
            text["Tags"],
            json!([{"Key": "kubernetes.io/cluster/prod", "Value": "owned"}])
        );
        let back: AutoScalingGroup = serde_json::from_value(text).unwrap();
        assert_eq!(back, group);
    }

    #[test]
    fn launch_configuration_group_and_deleting_status() {
        let group: AutoScalingGroup = serde_json::from_value(json!({
            "AutoScalingGroupName": "legacy",
            "LaunchConfigurationName": "legacy-lc-2",
            "Status": "Delete in progress",
            "Instances": [{
                "InstanceId": "i-0bbb", "InstanceType": "m5.large", "AvailabilityZone": "us-east-1b",
                "LifecycleState": "Terminating:Wait", "HealthStatus": "Healthy",
                "LaunchConfigurationName": "legacy-lc-1", "ProtectedFromScaleIn": true
            }],
            "Tags": []
        }))
        .unwrap();
        assert_eq!(
            group.launch_configuration_name.as_deref(),
            Some("legacy-lc-2")
        );
        assert_eq!(group.status.as_deref(), Some("Delete in progress"));
        assert!(group.tags.is_empty());
        assert!(group.launch_template.is_none() && group.mixed_instances_policy.is_none());
        let instance = &group.instances[0];
        assert_eq!(instance.lifecycle_state, "Terminating:Wait");
        assert_eq!(
            instance.launch_configuration_name.as_deref(),
            Some("legacy-lc-1")
        );
        assert!(instance.protected_from_scale_in);
        assert!(instance.launch_template.is_none());
    }

    #[test]
    fn templates_versions_and_instances_read_the_api_shapes() {
        let templates: Vec<LaunchTemplateInfo> = serde_json::from_value(json!([{
            "LaunchTemplateId": "lt-0abc", "LaunchTemplateName": "workers",
            "CreateTime": "2025-01-01T00:00:00+00:00", "CreatedBy": "arn:aws:iam::123456789012:root",
            "DefaultVersionNumber": 4, "LatestVersionNumber": 5
        }]))
        .unwrap();
        assert_eq!(
            index_templates(&templates),
            BTreeMap::from([(
                "lt-0abc".to_owned(),
                LaunchTemplateInfo {
                    id: "lt-0abc".into(),
                    name: "workers".into(),
                    latest_version: 5,
                    default_version: 4,
                }
            )])
        );

        let versions: Vec<TemplateVersionImage> = serde_json::from_value(json!([{
            "LaunchTemplateId": "lt-0abc", "LaunchTemplateName": "workers", "VersionNumber": 5,
            "DefaultVersion": false,
            "LaunchTemplateData": {"ImageId": "ami-new", "InstanceType": "m6i.large"}
        }]))
        .unwrap();
        assert_eq!(
            index_template_images(&versions),
            BTreeMap::from([(("lt-0abc".to_owned(), 5), "ami-new".to_owned())])
        );
        assert_eq!(
            serde_json::to_value(&versions[0]).unwrap(),
            json!({"LaunchTemplateId": "lt-0abc", "VersionNumber": 5, "LaunchTemplateData": {"ImageId": "ami-new"}})
        );

        let instances: Vec<InstanceDetails> = serde_json::from_value(json!([{
            "InstanceId": "i-0aaa", "ImageId": "ami-old", "InstanceType": "m6i.large",
            "LaunchTime": "2025-03-01T12:00:00+00:00", "State": {"Code": 16, "Name": "running"}
        }]))
        .unwrap();
        let index = index_instance_details(&instances);
        assert_eq!(index.len(), 1);
        assert_eq!(index["i-0aaa"].image_id, "ami-old");
        assert_eq!(
            index["i-0aaa"].launch_time,
            "2025-03-01T12:00:00Z".parse::<Timestamp>().unwrap()
        );
    }
}
