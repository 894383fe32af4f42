//! moto (the AWS emulator) for tests: started on 127.0.0.1 with a free port and killed on drop,
//! SDK clients for it, the one rule for a machine without moto (the test fails and says how to
//! install it), and the few AWS set-up steps the tests repeat (a launch template, a
//! new default version, a cluster-tagged group).

use aws_sdk_autoscaling::types as asg;
use aws_sdk_ec2::types as ec2t;
use rotor_selector::provider::aws::AwsClients;
use rotor_sim::moto::{INSTALL_HINT, MotoServer, REGION};

/// moto's server (rotor-sim starts it for the demo too), killed on drop.
pub struct Moto {
    server: MotoServer,
    pub url: String,
}

/// Fails `test` (e.g. "the AWS demo test") with how to install moto when it is missing: a test
/// that needs moto never passes by skipping.
pub fn require_moto(test: &str) {
    if rotor_sim::moto::command().is_none() {
        panic!("{test} needs moto, which is not installed: {INSTALL_HINT}");
    }
}

/// Starts moto, or fails the test with how to install it.
pub async fn start_moto() -> Moto {
    require_moto("this AWS end-to-end test");
    let server = MotoServer::start()
        .await
        .unwrap_or_else(|e| panic!("could not start moto: {e}"));
    Moto {
        url: server.url().to_string(),
        server,
    }
}

impl Moto {
    /// The environment that points the selector binary at this moto through the standard chain.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        self.server.env()
    }

    /// SDK clients for the test's own set-up calls.
    pub async fn clients(&self) -> AwsClients {
        let loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(&self.url)
            .region(aws_config::Region::new(REGION))
            .credentials_provider(aws_sdk_ec2::config::Credentials::new(
                "testing", "testing", None, None, "test",
            ));
        AwsClients::from_loader(loader).await
    }
}

/// Two of moto's AMIs, sorted: (old, new).
pub async fn two_images(aws: &AwsClients) -> (String, String) {
    let images = aws.ec2.describe_images().send().await.unwrap();
    let mut amis: Vec<String> = images
        .images()
        .iter()
        .filter_map(|i| i.image_id().map(str::to_owned))
        .collect();
    amis.sort();
    amis.dedup();
    assert!(amis.len() >= 2, "moto ships AMIs");
    (amis[0].clone(), amis[1].clone())
}

/// Creates launch template `name` (version 1 launches `ami`); returns its id.
pub async fn create_template(aws: &AwsClients, name: &str, ami: &str) -> String {
    let template = aws
        .ec2
        .create_launch_template()
        .launch_template_name(name)
        .launch_template_data(
            ec2t::RequestLaunchTemplateData::builder()
                .image_id(ami)
                .instance_type(ec2t::InstanceType::T3Micro)
                .build(),
        )
        .send()
        .await
        .unwrap();
    template
        .launch_template()
        .unwrap()
        .launch_template_id()
        .unwrap()
        .to_owned()
}

/// Adds a version launching `ami` to the template, leaving the default as it is; returns its
/// number.
pub async fn new_version(aws: &AwsClients, template_id: &str, ami: &str) -> i64 {
    let created = aws
        .ec2
        .create_launch_template_version()
        .launch_template_id(template_id)
        .source_version("1")
        .launch_template_data(
            ec2t::RequestLaunchTemplateData::builder()
                .image_id(ami)
                .build(),
        )
        .send()
        .await
        .unwrap();
    created
        .launch_template_version()
        .unwrap()
        .version_number()
        .unwrap()
}

/// Adds a version launching `ami` to the template and makes it the default.
pub async fn new_default_version(aws: &AwsClients, template_id: &str, ami: &str) -> i64 {
    let version = new_version(aws, template_id, ami).await;
    set_default_version(aws, template_id, version).await;
    version
}

/// Makes `version` the template's default (a rollback when it is an older one).
pub async fn set_default_version(aws: &AwsClients, template_id: &str, version: i64) {
    aws.ec2
        .modify_launch_template()
        .launch_template_id(template_id)
        .default_version(version.to_string())
        .send()
        .await
        .unwrap();
}

/// Creates group `name` of `size` instances from the template at `version` (e.g. `$Default`),
/// tagged for `cluster`.
pub async fn create_group(
    aws: &AwsClients,
    name: &str,
    template_id: &str,
    version: &str,
    size: i32,
    cluster: &str,
) {
    aws.autoscaling
        .create_auto_scaling_group()
        .auto_scaling_group_name(name)
        .launch_template(
            asg::LaunchTemplateSpecification::builder()
                .launch_template_id(template_id)
                .version(version)
                .build(),
        )
        .min_size(0)
        .max_size(size.max(1) * 2)
        .desired_capacity(size)
        .availability_zones("us-east-1a")
        .tags(
            asg::Tag::builder()
                .key(format!("kubernetes.io/cluster/{cluster}"))
                .value("owned")
                .propagate_at_launch(true)
                .build(),
        )
        .send()
        .await
        .unwrap();
}

/// The group as `DescribeAutoScalingGroups` describes it.
pub async fn describe_group(aws: &AwsClients, group: &str) -> asg::AutoScalingGroup {
    let out = aws
        .autoscaling
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(group)
        .send()
        .await
        .unwrap();
    out.auto_scaling_groups()[0].clone()
}

/// The instances of a group: (id, lifecycle state), sorted by id.
pub async fn group_instances(aws: &AwsClients, group: &str) -> Vec<(String, String)> {
    let mut instances: Vec<(String, String)> = describe_group(aws, group)
        .await
        .instances()
        .iter()
        .map(|i| {
            (
                i.instance_id().unwrap().to_owned(),
                i.lifecycle_state().unwrap().as_str().to_owned(),
            )
        })
        .collect();
    instances.sort();
    instances
}

/// The ids of a group's instances, sorted.
pub async fn instance_ids(aws: &AwsClients, group: &str) -> Vec<String> {
    group_instances(aws, group)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}
