//! The AWS half of `rotor-sim demo --provider aws`: moto plays EC2 and Auto Scaling, the
//! simulator plays Kubernetes, and this module is the cloud glue between them.
//!
//! - Setup: per simulated node group, a launch template (version 1: the old image) and an Auto
//!   Scaling group of the same name and size, tagged for the demo cluster. Every node is bound to
//!   one of its group's instances through `spec.providerID` (`aws:///<zone>/<instance>`), and its
//!   image label is set to the image the instance runs.
//! - Drift: version 2 of each template with a new image becomes the default, and the simulated
//!   groups launch nodes with that image from then on.
//! - Sync, on every tick: a node that left the cluster has its instance terminated in its group
//!   (moto launches the replacement from the current template version); a node that joined is
//!   bound to a free instance of its group (in its zone when there is one).
//!
//! `rotor-selector --provider aws --image-drift` then sees the drift exactly as it would on AWS:
//! instances whose image differs from their group's template version.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result, anyhow};
use aws_sdk_autoscaling::types as asg;
use aws_sdk_ec2::types as ec2t;

use rotor_sim::cluster::objects::node_group_of;
use rotor_sim::moto::{MotoServer, REGION};
use rotor_sim::server::Sim;

use super::actions;

/// The cluster name the demo's groups are tagged with (`kubernetes.io/cluster/<name>`).
pub const CLUSTER_NAME: &str = "rotor-demo";

pub struct AwsWorld {
    moto: MotoServer,
    autoscaling: aws_sdk_autoscaling::Client,
    ec2: aws_sdk_ec2::Client,
    /// Simulated group name to its launch template id.
    templates: BTreeMap<String, String>,
    /// The Auto Scaling groups' desired capacity, as last set.
    desired: BTreeMap<String, i32>,
    /// Node name to (group, instance id).
    bound: BTreeMap<String, (String, String)>,
    pub old_image: String,
    pub new_image: String,
}

/// A node as the glue needs it.
struct NodeSeen {
    name: String,
    group: String,
    zone: String,
}

impl AwsWorld {
    /// Starts moto and creates a template and a group per simulated node group.
    pub async fn start(sim: &Sim) -> Result<AwsWorld> {
        let moto = MotoServer::start().await?;
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(moto.url())
            .region(aws_config::Region::new(REGION))
            .credentials_provider(aws_sdk_ec2::config::Credentials::new(
                "testing",
                "testing",
                None,
                None,
                "rotor-demo",
            ))
            .http_client(http)
            .load()
            .await;
        let ec2 = aws_sdk_ec2::Client::new(&shared);
        let autoscaling = aws_sdk_autoscaling::Client::new(&shared);

        // Two of the images moto ships: the fleet's and the patched one.
        let mut images: Vec<String> = ec2
            .describe_images()
            .send()
            .await
            .context("moto DescribeImages")?
            .images()
            .iter()
            .filter_map(|i| i.image_id().map(str::to_owned))
            .collect();
        images.sort();
        images.dedup();
        let [old_image, new_image] = [images.first(), images.get(1)]
            .map(|i| i.cloned())
            .map(|i| i.ok_or_else(|| anyhow!("moto lists fewer than 2 images")));
        let (old_image, new_image) = (old_image?, new_image?);

        let groups: Vec<(String, String, Vec<String>, u32, u32)> = {
            let c = sim.cluster.lock().expect("cluster lock");
            c.node_groups()
                .iter()
                .map(|(name, g)| {
                    (
                        name.clone(),
                        g.spec.template.instance_type.clone(),
                        g.spec.zones.clone(),
                        g.desired(),
                        g.spec.max(),
                    )
                })
                .collect()
        };
        let mut world = AwsWorld {
            moto,
            autoscaling,
            ec2,
            templates: BTreeMap::new(),
            desired: BTreeMap::new(),
            bound: BTreeMap::new(),
            old_image,
            new_image,
        };
        for (name, instance_type, zones, desired, max) in groups {
            world
                .create_group(&name, &instance_type, &zones, desired, max)
                .await?;
        }
        {
            let mut c = sim.cluster.lock().expect("cluster lock");
            let old = world.old_image.clone();
            actions::set_templates(&mut c, None, Some(&old));
            actions::relabel_images(&mut c, &old);
        }
        Ok(world)
    }

    async fn create_group(
        &mut self,
        name: &str,
        instance_type: &str,
        zones: &[String],
        desired: u32,
        max: u32,
    ) -> Result<()> {
        let template = self
            .ec2
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(
                ec2t::RequestLaunchTemplateData::builder()
                    .image_id(&self.old_image)
                    .instance_type(ec2t::InstanceType::from(instance_type))
                    .build(),
            )
            .send()
            .await
            .with_context(|| format!("moto CreateLaunchTemplate {name}"))?;
        let template_id = template
            .launch_template()
            .and_then(|t| t.launch_template_id())
            .ok_or_else(|| anyhow!("moto returned no launch template id for {name}"))?
            .to_owned();
        let desired = i32::try_from(desired).unwrap_or(i32::MAX);
        self.autoscaling
            .create_auto_scaling_group()
            .auto_scaling_group_name(name)
            .launch_template(
                asg::LaunchTemplateSpecification::builder()
                    .launch_template_id(&template_id)
                    .version("$Default")
                    .build(),
            )
            .min_size(0)
            .max_size(i32::try_from(max).unwrap_or(i32::MAX).max(desired))
            .desired_capacity(desired)
            .set_availability_zones(Some(zones.to_vec()))
            .tags(
                asg::Tag::builder()
                    .key(format!("kubernetes.io/cluster/{CLUSTER_NAME}"))
                    .value("owned")
                    .propagate_at_launch(true)
                    .build(),
            )
            .send()
            .await
            .with_context(|| format!("moto CreateAutoScalingGroup {name}"))?;
        self.templates.insert(name.to_owned(), template_id);
        self.desired.insert(name.to_owned(), desired);
        Ok(())
    }

    /// The image drift: a new template version with the new image, made the default, and the
    /// simulated groups launching nodes with it.
    pub async fn drift(&mut self, sim: &Sim) -> Result<()> {
        for (group, id) in &self.templates {
            self.ec2
                .create_launch_template_version()
                .launch_template_id(id)
                .source_version("1")
                .launch_template_data(
                    ec2t::RequestLaunchTemplateData::builder()
                        .image_id(&self.new_image)
                        .build(),
                )
                .send()
                .await
                .with_context(|| format!("moto CreateLaunchTemplateVersion for {group}"))?;
            self.ec2
                .modify_launch_template()
                .launch_template_id(id)
                .default_version("2")
                .send()
                .await
                .with_context(|| format!("moto ModifyLaunchTemplate for {group}"))?;
        }
        let mut c = sim.cluster.lock().expect("cluster lock");
        actions::set_templates(&mut c, None, Some(&self.new_image));
        Ok(())
    }

    /// The environment for `rotor-selector --provider aws`.
    pub fn selector_env(&self) -> Vec<(&'static str, String)> {
        self.moto.env()
    }

    /// Mirrors the simulated cluster's node changes into the groups; returns what it did, for
    /// the event log.
    pub async fn sync(&mut self, sim: &Sim) -> Result<Vec<String>> {
        let (nodes, sim_desired) = {
            let c = sim.cluster.lock().expect("cluster lock");
            let nodes: Vec<NodeSeen> = c
                .nodes
                .values()
                .filter_map(|n| {
                    let group = node_group_of(n)?.to_owned();
                    Some(NodeSeen {
                        name: n.metadata.name.clone()?,
                        group,
                        zone: n
                            .metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get("topology.kubernetes.io/zone"))
                            .cloned()
                            .unwrap_or_default(),
                    })
                })
                .filter(|n| self.templates.contains_key(&n.group))
                .collect();
            let desired: BTreeMap<String, i32> = c
                .node_groups()
                .iter()
                .map(|(k, g)| (k.clone(), i32::try_from(g.desired()).unwrap_or(i32::MAX)))
                .collect();
            (nodes, desired)
        };
        let mut said = Vec::new();
        let present: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let gone: Vec<String> = self
            .bound
            .keys()
            .filter(|n| !present.contains(n.as_str()))
            .cloned()
            .collect();
        for node in gone {
            let Some((group, instance)) = self.bound.remove(&node) else {
                continue;
            };
            // The simulated group gave surge capacity back: shrink with it; otherwise replace.
            let shrink = sim_desired.get(&group).copied().unwrap_or(0)
                < self.desired.get(&group).copied().unwrap_or(0);
            self.autoscaling
                .terminate_instance_in_auto_scaling_group()
                .instance_id(&instance)
                .should_decrement_desired_capacity(shrink)
                .send()
                .await
                .with_context(|| format!("moto TerminateInstanceInAutoScalingGroup {instance}"))?;
            if shrink {
                *self.desired.entry(group.clone()).or_default() -= 1;
            }
            said.push(format!(
                "AWS: {instance} terminated in group {group} (node {node} left){}",
                if shrink {
                    ""
                } else {
                    "; the group launches a replacement"
                }
            ));
        }
        let unbound: Vec<&NodeSeen> = nodes
            .iter()
            .filter(|n| !self.bound.contains_key(&n.name))
            .collect();
        let groups: BTreeSet<&str> = unbound.iter().map(|n| n.group.as_str()).collect();
        for group in groups {
            let want = sim_desired.get(group).copied().unwrap_or(0);
            if want > self.desired.get(group).copied().unwrap_or(0) {
                self.autoscaling
                    .set_desired_capacity()
                    .auto_scaling_group_name(group)
                    .desired_capacity(want)
                    .send()
                    .await
                    .with_context(|| format!("moto SetDesiredCapacity {group}"))?;
                self.desired.insert(group.to_owned(), want);
                said.push(format!("AWS: group {group} scaled to {want}"));
            }
            let taken: BTreeSet<&str> = self.bound.values().map(|(_, i)| i.as_str()).collect();
            let mut free: Vec<(String, String)> = self
                .in_service(group)
                .await?
                .into_iter()
                .filter(|(id, _)| !taken.contains(id.as_str()))
                .collect();
            let mut binds = Vec::new();
            for node in unbound.iter().filter(|n| n.group == group) {
                let pick = free
                    .iter()
                    .position(|(_, az)| *az == node.zone)
                    .or(if free.is_empty() { None } else { Some(0) });
                let Some(i) = pick else {
                    break;
                };
                let (instance, az) = free.remove(i);
                binds.push((node.name.clone(), instance, az));
            }
            let mut c = sim.cluster.lock().expect("cluster lock");
            for (node, instance, az) in binds {
                if actions::set_provider_id(&mut c, &node, &format!("aws:///{az}/{instance}")) {
                    self.bound
                        .insert(node.clone(), (group.to_owned(), instance.clone()));
                }
            }
        }
        Ok(said)
    }

    /// The group's InService instances: (id, availability zone), sorted by id.
    async fn in_service(&self, group: &str) -> Result<Vec<(String, String)>> {
        let out = self
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(group)
            .send()
            .await
            .with_context(|| format!("moto DescribeAutoScalingGroups {group}"))?;
        let mut v: Vec<(String, String)> = out
            .auto_scaling_groups()
            .iter()
            .flat_map(|g| g.instances())
            .filter(|i| i.lifecycle_state() == Some(&asg::LifecycleState::InService))
            .filter_map(|i| {
                Some((
                    i.instance_id()?.to_owned(),
                    i.availability_zone().unwrap_or_default().to_owned(),
                ))
            })
            .collect();
        v.sort();
        Ok(v)
    }

    /// Nodes not yet bound to an instance.
    pub fn unbound(&self, sim: &Sim) -> usize {
        let c = sim.cluster.lock().expect("cluster lock");
        c.nodes
            .values()
            .filter(|n| node_group_of(n).is_some_and(|g| self.templates.contains_key(g)))
            .filter(|n| {
                n.metadata
                    .name
                    .as_ref()
                    .is_some_and(|name| !self.bound.contains_key(name))
            })
            .count()
    }
}
