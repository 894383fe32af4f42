//! The SDK's types made into [`crate::provider::aws_model`]'s (pure): only the fields the drift
//! rules read.

use aws_sdk_autoscaling as autoscaling;
use aws_sdk_ec2 as ec2;
use jiff::Timestamp;

use crate::provider::aws_model::{
    AutoScalingGroup, GroupInstance, InstanceDetails, LaunchTemplateInfo, LaunchTemplateSpec,
    MixedInstancesPolicy, Override, TemplateVersionImage,
};

/// An Auto Scaling group.
pub fn convert_group(group: &autoscaling::types::AutoScalingGroup) -> AutoScalingGroup {
    AutoScalingGroup {
        name: group
            .auto_scaling_group_name()
            .unwrap_or_default()
            .to_owned(),
        tags: group
            .tags()
            .iter()
            .filter_map(|t| {
                Some((
                    t.key()?.to_owned(),
                    t.value().unwrap_or_default().to_owned(),
                ))
            })
            .collect(),
        status: group.status().filter(|s| !s.is_empty()).map(str::to_owned),
        launch_configuration_name: group.launch_configuration_name().map(str::to_owned),
        launch_template: group.launch_template().map(convert_spec),
        mixed_instances_policy: group
            .mixed_instances_policy()
            .and_then(|p| p.launch_template())
            .map(|lt| MixedInstancesPolicy {
                launch_template: lt
                    .launch_template_specification()
                    .map(convert_spec)
                    .unwrap_or_default(),
                overrides: lt
                    .overrides()
                    .iter()
                    .map(|o| Override {
                        instance_type: o.instance_type().map(str::to_owned),
                        launch_template: o.launch_template_specification().map(convert_spec),
                        has_instance_requirements: o.instance_requirements().is_some(),
                    })
                    .collect(),
            }),
        instances: group
            .instances()
            .iter()
            .map(convert_group_instance)
            .collect(),
        desired_capacity: group.desired_capacity().unwrap_or_default(),
        max_size: group.max_size().unwrap_or_default(),
    }
}

/// A launch template reference.
pub fn convert_spec(spec: &autoscaling::types::LaunchTemplateSpecification) -> LaunchTemplateSpec {
    LaunchTemplateSpec {
        id: spec.launch_template_id().map(str::to_owned),
        name: spec.launch_template_name().map(str::to_owned),
        version: spec.version().map(str::to_owned),
    }
}

/// One instance of a group.
pub fn convert_group_instance(inst: &autoscaling::types::Instance) -> GroupInstance {
    GroupInstance {
        instance_id: inst.instance_id().unwrap_or_default().to_owned(),
        lifecycle_state: inst
            .lifecycle_state()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default(),
        health_status: inst.health_status().unwrap_or_default().to_owned(),
        availability_zone: inst.availability_zone().unwrap_or_default().to_owned(),
        instance_type: inst.instance_type().map(str::to_owned),
        launch_template: inst.launch_template().map(convert_spec),
        launch_configuration_name: inst.launch_configuration_name().map(str::to_owned),
        protected_from_scale_in: inst.protected_from_scale_in().unwrap_or(false),
    }
}

/// A launch template; `None` when a field the rules need is missing.
pub fn convert_template(template: &ec2::types::LaunchTemplate) -> Option<LaunchTemplateInfo> {
    Some(LaunchTemplateInfo {
        id: template.launch_template_id()?.to_owned(),
        name: template
            .launch_template_name()
            .unwrap_or_default()
            .to_owned(),
        latest_version: template.latest_version_number()?,
        default_version: template.default_version_number()?,
    })
}

/// A template version's image; `None` without an image id (the rule then skips, fail safe).
pub fn convert_template_version(
    version: &ec2::types::LaunchTemplateVersion,
) -> Option<TemplateVersionImage> {
    Some(TemplateVersionImage {
        template_id: version.launch_template_id()?.to_owned(),
        version: version.version_number()?,
        image_id: version.launch_template_data()?.image_id()?.to_owned(),
    })
}

/// An EC2 instance's image and launch time; `None` when either is missing.
pub fn convert_instance(inst: &ec2::types::Instance) -> Option<InstanceDetails> {
    let launch = inst.launch_time()?;
    Some(InstanceDetails {
        instance_id: inst.instance_id()?.to_owned(),
        image_id: inst.image_id()?.to_owned(),
        launch_time: Timestamp::new(launch.secs(), launch.subsec_nanos() as i32).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use autoscaling::types as asg;
    use ec2::types as ec2t;

    use super::*;
    use crate::provider::aws::describe::template_references;

    fn spec(id: &str, version: Option<&str>) -> asg::LaunchTemplateSpecification {
        asg::LaunchTemplateSpecification::builder()
            .launch_template_id(id)
            .launch_template_name("workers")
            .set_version(version.map(str::to_owned))
            .build()
    }

    #[test]
    fn converts_a_group_with_instances_tags_and_a_mixed_policy() {
        let group = asg::AutoScalingGroup::builder()
            .auto_scaling_group_name("g1")
            .tags(
                asg::TagDescription::builder()
                    .key("team")
                    .value("core")
                    .build(),
            )
            .tags(
                asg::TagDescription::builder()
                    .key("eks:nodegroup-name")
                    .build(),
            )
            .status("Delete in progress")
            .desired_capacity(2)
            .max_size(5)
            .mixed_instances_policy(
                asg::MixedInstancesPolicy::builder()
                    .launch_template(
                        asg::LaunchTemplate::builder()
                            .launch_template_specification(spec("lt-0abc", Some("$Latest")))
                            .overrides(
                                asg::LaunchTemplateOverrides::builder()
                                    .instance_type("m5.large")
                                    .build(),
                            )
                            .overrides(
                                asg::LaunchTemplateOverrides::builder()
                                    .instance_type("m6g.large")
                                    .launch_template_specification(spec("lt-0arm", None))
                                    .build(),
                            )
                            .build(),
                    )
                    .build(),
            )
            .instances(
                asg::Instance::builder()
                    .instance_id("i-0abc")
                    .lifecycle_state(asg::LifecycleState::InService)
                    .health_status("Healthy")
                    .availability_zone("us-east-1a")
                    .instance_type("m5.large")
                    .launch_template(spec("lt-0abc", Some("3")))
                    .protected_from_scale_in(true)
                    .build(),
            )
            .instances(
                asg::Instance::builder()
                    .instance_id("i-0def")
                    .lifecycle_state(asg::LifecycleState::TerminatingWait)
                    .launch_configuration_name("lc-1")
                    .build(),
            )
            .build();
        let converted = convert_group(&group);
        let expected: AutoScalingGroup = serde_json::from_value(serde_json::json!({
            "AutoScalingGroupName": "g1",
            "Tags": [{"Key": "team", "Value": "core"}, {"Key": "eks:nodegroup-name", "Value": ""}],
            "Status": "Delete in progress",
            "DesiredCapacity": 2, "MaxSize": 5,
            "MixedInstancesPolicy": {"LaunchTemplate": {
                "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0abc", "LaunchTemplateName": "workers", "Version": "$Latest"},
                "Overrides": [
                    {"InstanceType": "m5.large"},
                    {"InstanceType": "m6g.large", "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0arm", "LaunchTemplateName": "workers"}}
                ]
            }},
            "Instances": [
                {"InstanceId": "i-0abc", "LifecycleState": "InService", "HealthStatus": "Healthy",
                 "AvailabilityZone": "us-east-1a", "InstanceType": "m5.large",
                 "LaunchTemplate": {"LaunchTemplateId": "lt-0abc", "LaunchTemplateName": "workers", "Version": "3"},
                 "ProtectedFromScaleIn": true},
                {"InstanceId": "i-0def", "LifecycleState": "Terminating:Wait", "HealthStatus": "",
                 "AvailabilityZone": "", "LaunchConfigurationName": "lc-1"}
            ]
        }))
        .unwrap();
        assert_eq!(converted, expected);
        let (ids, names) = template_references(&[converted]);
        assert_eq!(ids, ["lt-0abc", "lt-0arm"]);
        assert!(names.is_empty());
    }

    #[test]
    fn converts_templates_versions_and_instances() {
        let t = ec2t::LaunchTemplate::builder()
            .launch_template_id("lt-1")
            .launch_template_name("n")
            .latest_version_number(5)
            .default_version_number(4)
            .build();
        assert_eq!(
            convert_template(&t),
            Some(LaunchTemplateInfo {
                id: "lt-1".into(),
                name: "n".into(),
                latest_version: 5,
                default_version: 4
            })
        );
        assert_eq!(
            convert_template(
                &ec2t::LaunchTemplate::builder()
                    .launch_template_id("x")
                    .build()
            ),
            None
        );
        let v = ec2t::LaunchTemplateVersion::builder()
            .launch_template_id("lt-1")
            .version_number(5)
            .launch_template_data(
                ec2t::ResponseLaunchTemplateData::builder()
                    .image_id("ami-1")
                    .build(),
            )
            .build();
        assert_eq!(
            convert_template_version(&v),
            Some(TemplateVersionImage {
                template_id: "lt-1".into(),
                version: 5,
                image_id: "ami-1".into()
            })
        );
        let i = ec2t::Instance::builder()
            .instance_id("i-1")
            .image_id("ami-1")
            .launch_time(aws_smithy_types::DateTime::from_secs_and_nanos(
                1_700_000_000,
                5,
            ))
            .build();
        assert_eq!(
            convert_instance(&i),
            Some(InstanceDetails {
                instance_id: "i-1".into(),
                image_id: "ami-1".into(),
                launch_time: Timestamp::new(1_700_000_000, 5).unwrap(),
            })
        );
        assert_eq!(
            convert_instance(&ec2t::Instance::builder().instance_id("i-2").build()),
            None
        );
    }
}
