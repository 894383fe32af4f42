//! The AWS provider end to end against moto (the AWS emulator, started here on 127.0.0.1 with a
//! free port) plus the simulator: image drift (a new template version with a new AMI), budgets,
//! dry run, and retiring a drained node's instance in its group. The selector binary finds moto
//! through the standard chain only (`AWS_ENDPOINT_URL`, `AWS_REGION`, static credentials).
//!
//! Skipped with a notice when moto is not installed and `CI` is unset; in CI it must run.

mod common;

use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use aws_sdk_autoscaling::types as asg;
use aws_sdk_ec2::types as ec2t;
use common::TestCluster;
use rotor_selector::aws_provider::AwsClients;
use serde_json::Value;

const SCENARIO: &str = r#"
controlPlaneVersion: v1.33.4
timing:
  tick: 50ms
  nodeStartup: 200ms
  scaleUpDelay: 1h
  scaleDownDelay: 1h
nodeGroups:
  - name: workers
    zones: [us-east-1a]
    size: 4
    template:
      kubeletVersion: v1.33.4
      nodeName: "n-{index}"
"#;

const GROUP: &str = "workers-asg";
const CLUSTER: &str = "moto";

/// moto's server, killed on drop.
struct Moto {
    child: std::process::Child,
    url: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How to start moto: `moto_server` on PATH, else `python3 -m moto.server`; `None` if neither.
fn moto_command() -> Option<Vec<String>> {
    let works = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if works("moto_server", &["--help"]) {
        return Some(vec!["moto_server".into()]);
    }
    if works("python3", &["-c", "import moto.server, flask"]) {
        return Some(vec!["python3".into(), "-m".into(), "moto.server".into()]);
    }
    None
}

async fn start_moto() -> Option<Moto> {
    let Some(command) = moto_command() else {
        if std::env::var_os("CI").is_some() {
            panic!(
                "moto is not installed (pip install 'moto[server]'); the AWS end-to-end tests must run in CI"
            );
        }
        eprintln!(
            "NOTICE: skipping the moto end-to-end test: moto is not installed (pip install 'moto[server]')"
        );
        return None;
    };
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new(&command[0])
        .args(&command[1..])
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("moto starts");
    let moto = Moto {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "moto did not listen on port {port}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Some(moto)
}

fn aws_env(moto: &Moto) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", moto.url.clone()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

async fn clients(moto: &Moto) -> AwsClients {
    let loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(&moto.url)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ));
    AwsClients::from_loader(loader).await
}

/// Instances of the group: (id, lifecycle state), sorted by id.
async fn group_instances(aws: &AwsClients) -> Vec<(String, String)> {
    let out = aws
        .autoscaling
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(GROUP)
        .send()
        .await
        .unwrap();
    let mut instances: Vec<(String, String)> = out.auto_scaling_groups()[0]
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

async fn image_of(aws: &AwsClients, instance: &str) -> String {
    let out = aws
        .ec2
        .describe_instances()
        .instance_ids(instance)
        .send()
        .await
        .unwrap();
    out.reservations()[0].instances()[0]
        .image_id()
        .unwrap()
        .to_owned()
}

fn set_provider_id(cluster: &TestCluster, node: &str, instance: &str) {
    let id = format!("aws:///us-east-1a/{instance}");
    cluster.modify_node(node, |n| {
        n.spec.get_or_insert_with(Default::default).provider_id = Some(id)
    });
}

struct Timed {
    run: common::SelectorRun,
    elapsed: Duration,
}

async fn select(cluster: &TestCluster, moto: &Moto, flags: &[&str]) -> Timed {
    let env = aws_env(moto);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut all = vec![
        "--provider",
        "aws",
        "--cluster-name",
        CLUSTER,
        "--image-drift",
        "--output",
        "json",
    ];
    all.extend_from_slice(flags);
    let started = Instant::now();
    let run = cluster.run_env(&all, &env).await;
    let elapsed = started.elapsed();
    assert_eq!(
        run.code, 0,
        "{flags:?}\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    println!(
        "selector {flags:?}: {elapsed:?}, AWS calls {}",
        run.json()["apiCalls"]["aws"]
    );
    Timed { run, elapsed }
}

#[tokio::test]
async fn image_drift_end_to_end_with_budgets_dry_run_and_retire() {
    let Some(moto) = start_moto().await else {
        return;
    };
    let aws = clients(&moto).await;

    // Two of moto's AMIs: the old and the new image.
    let images = aws.ec2.describe_images().send().await.unwrap();
    let mut amis: Vec<String> = images
        .images()
        .iter()
        .filter_map(|i| i.image_id().map(str::to_owned))
        .collect();
    amis.sort();
    amis.dedup();
    assert!(amis.len() >= 2, "moto ships AMIs");
    let (ami_old, ami_new) = (amis[0].clone(), amis[1].clone());

    // Template v1 (ami-old), a group of 3 from it at $Latest, tagged for the cluster.
    let template = aws
        .ec2
        .create_launch_template()
        .launch_template_name("workers")
        .launch_template_data(
            ec2t::RequestLaunchTemplateData::builder()
                .image_id(&ami_old)
                .instance_type(ec2t::InstanceType::T3Micro)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let template_id = template
        .launch_template()
        .unwrap()
        .launch_template_id()
        .unwrap()
        .to_owned();
    aws.autoscaling
        .create_auto_scaling_group()
        .auto_scaling_group_name(GROUP)
        .launch_template(
            asg::LaunchTemplateSpecification::builder()
                .launch_template_id(&template_id)
                .version("$Latest")
                .build(),
        )
        .min_size(3)
        .max_size(10)
        .desired_capacity(3)
        .availability_zones("us-east-1a")
        .tags(
            asg::Tag::builder()
                .key(format!("kubernetes.io/cluster/{CLUSTER}"))
                .value("owned")
                .propagate_at_launch(true)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let old: Vec<String> = group_instances(&aws)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(old.len(), 3);
    for id in &old {
        assert_eq!(image_of(&aws, id).await, ami_old);
    }

    // Template v2 (ami-new) as the default, then one more instance, launched from it.
    aws.ec2
        .create_launch_template_version()
        .launch_template_id(&template_id)
        .source_version("1")
        .launch_template_data(
            ec2t::RequestLaunchTemplateData::builder()
                .image_id(&ami_new)
                .build(),
        )
        .send()
        .await
        .unwrap();
    aws.ec2
        .modify_launch_template()
        .launch_template_id(&template_id)
        .default_version("2")
        .send()
        .await
        .unwrap();
    aws.autoscaling
        .set_desired_capacity()
        .auto_scaling_group_name(GROUP)
        .desired_capacity(4)
        .send()
        .await
        .unwrap();
    let all = group_instances(&aws).await;
    let new: Vec<String> = all
        .iter()
        .map(|(id, _)| id.clone())
        .filter(|id| !old.contains(id))
        .collect();
    assert_eq!(new.len(), 1, "{all:?}");
    assert_eq!(image_of(&aws, &new[0]).await, ami_new);

    // The simulated cluster: n-0..n-2 on the old instances, n-3 on the new one.
    let cluster = TestCluster::start(SCENARIO).await;
    for (node, instance) in ["n-0", "n-1", "n-2", "n-3"]
        .iter()
        .zip(old.iter().chain(new.iter()))
    {
        set_provider_id(&cluster, node, instance);
    }

    // Dry run: the 3 old nodes are drifted (image), the new one is not; nothing changes.
    let dry = select(&cluster, &moto, &["--dry-run", "--max-tainted", "100%"]).await;
    let json = dry.run.json();
    for node in ["n-0", "n-1", "n-2"] {
        let entry = dry.run.node(node);
        assert_eq!(entry["action"], "taint", "{entry}");
        assert_eq!(entry["reason"], "image", "{entry}");
        assert_eq!(entry["group"], GROUP);
        assert!(
            entry["detail"].as_str().unwrap().contains(&format!(
                "image {ami_old}, template {template_id} v2 has {ami_new}"
            )),
            "{entry}"
        );
    }
    assert_eq!(dry.run.node("n-3")["action"], "keep");
    assert_eq!(dry.run.node("n-3")["detail"], "up to date");
    assert!(cluster.tainted().await.is_empty());
    assert_eq!(cluster.requests("patch nodes"), 0);
    let aws_calls = &json["apiCalls"]["aws"];
    assert_eq!(aws_calls["DescribeAutoScalingGroups"], 1, "{aws_calls}");
    assert_eq!(aws_calls["DescribeLaunchTemplates"], 1, "{aws_calls}");
    assert_eq!(
        aws_calls["DescribeLaunchTemplateVersions"], 1,
        "{aws_calls}"
    );
    assert_eq!(aws_calls["DescribeInstances"], 1, "{aws_calls}");

    // --max-tainted 1 taints exactly one old node.
    let one = select(&cluster, &moto, &["--max-tainted", "1"]).await;
    let tainted = cluster.tainted().await;
    assert_eq!(tainted.len(), 1, "{tainted:?}");
    let victim = tainted[0].clone();
    assert!(["n-0", "n-1", "n-2"].contains(&victim.as_str()));
    assert_eq!(
        cluster.drain_taint(&victim).await.as_deref(),
        Some("image:NoSchedule")
    );
    assert_eq!(one.run.json()["summary"]["taint"], 1);
    // A second run is a no-op.
    let again = select(&cluster, &moto, &["--max-tainted", "1"]).await;
    assert_eq!(again.run.json()["summary"]["taint"], 0);
    assert_eq!(cluster.tainted().await, std::slice::from_ref(&victim));

    // The drainer marks it drained; --retire-drained terminates its instance in the group.
    cluster.mark(&victim, None, &[("rotor.dev/phase", "drained")]);
    let victim_instance = dry.run.node(&victim)["instance"]
        .as_str()
        .unwrap()
        .to_owned();
    let retire = select(&cluster, &moto, &["--max-tainted", "1", "--retire-drained"]).await;
    let entry = retire.run.node(&victim);
    assert_eq!(entry["action"], "retire", "{entry}");
    assert_eq!(entry["result"]["outcome"], "applied", "{entry}");
    assert_eq!(
        retire.run.json()["apiCalls"]["aws"]["TerminateInstanceInAutoScalingGroup"],
        1
    );
    let events = cluster.events(&victim).await;
    assert!(
        events
            .iter()
            .any(|(reason, action, _, note)| reason == "InstanceRetired"
                && action == "Retire"
                && note.contains(&victim_instance)),
        "{events:?}"
    );
    let after = group_instances(&aws).await;
    assert!(
        after
            .iter()
            .all(|(id, state)| id != &victim_instance || state.starts_with("Terminating")),
        "{after:?}"
    );
    let in_service = after.iter().filter(|(_, s)| s == "InService").count();
    assert_eq!(in_service, 4, "the group replaced the instance: {after:?}");
    let state = aws
        .ec2
        .describe_instances()
        .instance_ids(&victim_instance)
        .send()
        .await
        .unwrap()
        .reservations()[0]
        .instances()[0]
        .state()
        .and_then(|s| s.name())
        .map(|n| n.as_str().to_owned());
    println!("retired {victim_instance}: EC2 state {state:?}; group now {after:?}");

    // A rerun does not retire it again: its instance left the group (or is terminating).
    let rerun = select(&cluster, &moto, &["--max-tainted", "1", "--retire-drained"]).await;
    assert_eq!(rerun.run.node(&victim)["action"], "skip");
    assert_eq!(
        rerun.run.json()["apiCalls"]["aws"]["TerminateInstanceInAutoScalingGroup"],
        Value::Null
    );

    println!(
        "moto run times: dry-run {:?}, taint {:?}, no-op {:?}, retire {:?}, rerun {:?}",
        dry.elapsed, one.elapsed, again.elapsed, retire.elapsed, rerun.elapsed
    );
    cluster.stop().await;
}

#[tokio::test]
async fn unknown_groups_are_empty_and_an_unreachable_endpoint_fails_with_exit_1() {
    let Some(moto) = start_moto().await else {
        return;
    };
    let cluster = TestCluster::start(SCENARIO).await;
    // A group name moto does not know is not an error (an empty answer); an unreachable endpoint
    // is: the run fails before writing, exit 1, naming the operation.
    let run = cluster
        .run_env(
            &["--provider", "aws", "--group", "nope", "--output", "json"],
            &[
                ("AWS_ENDPOINT_URL", &moto.url),
                ("AWS_REGION", "us-east-1"),
                ("AWS_ACCESS_KEY_ID", "testing"),
                ("AWS_SECRET_ACCESS_KEY", "testing"),
            ],
        )
        .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["summary"]["skip"], 4);
    drop(moto);
    let run = cluster
        .run_env(
            &["--provider", "aws", "--group", "nope"],
            &[
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
                ("AWS_REGION", "us-east-1"),
                ("AWS_ACCESS_KEY_ID", "testing"),
                ("AWS_SECRET_ACCESS_KEY", "testing"),
                ("AWS_MAX_ATTEMPTS", "1"),
            ],
        )
        .await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("AWS DescribeAutoScalingGroups failed"),
        "{}",
        run.stderr
    );
    assert!(cluster.tainted().await.is_empty());
    cluster.stop().await;
}
