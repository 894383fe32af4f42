//! The AWS provider end to end against moto (the AWS emulator, started here on 127.0.0.1 with a
//! free port) plus the simulator: image drift (a new template version with a new AMI), budgets
//! (count, percentage, per group across two groups), dry run, rollback (the template's default
//! version put back) and retiring a drained node's instance in its group. The selector binary finds moto
//! through the standard chain only (`AWS_ENDPOINT_URL`, `AWS_REGION`, static credentials).
//!
//! Skipped with a notice when moto is not installed and `CI` is unset; in CI it must run.

mod common;

use std::time::{Duration, Instant};

use common::TestCluster;
use rotor_e2e::moto::{
    Moto, create_group, create_template, describe_group, group_instances, instance_ids,
    new_default_version, new_version, set_default_version, start_moto, two_images,
};
use rotor_selector::provider::aws::AwsClients;
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

struct Timed {
    run: common::SelectorRun,
    elapsed: Duration,
}

async fn select(cluster: &TestCluster, moto: &Moto, flags: &[&str]) -> Timed {
    let env = moto.env();
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
    let moto = start_moto().await;
    let aws = moto.clients().await;
    let (ami_old, ami_new) = two_images(&aws).await;

    // Template v1 (ami-old), a group of 3 from it at $Latest, tagged for the cluster.
    let template_id = create_template(&aws, "workers", &ami_old).await;
    create_group(&aws, GROUP, &template_id, "$Latest", 3, CLUSTER).await;
    let old = instance_ids(&aws, GROUP).await;
    assert_eq!(old.len(), 3);
    for id in &old {
        assert_eq!(image_of(&aws, id).await, ami_old);
    }

    // Template v2 (ami-new) as the default, then one more instance, launched from it.
    new_default_version(&aws, &template_id, &ami_new).await;
    aws.autoscaling
        .set_desired_capacity()
        .auto_scaling_group_name(GROUP)
        .desired_capacity(4)
        .send()
        .await
        .unwrap();
    let all = group_instances(&aws, GROUP).await;
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
        cluster.set_instance(node, instance);
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
    let after = group_instances(&aws, GROUP).await;
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
async fn an_unknown_group_and_an_unreachable_endpoint_fail_with_exit_1() {
    let moto = start_moto().await;
    let cluster = TestCluster::start(SCENARIO).await;
    // AWS answers a group name it does not know with an empty list: the run reports the name as
    // a look-up failure and exits 1, so that a typo does not pass for a fleet with nothing out of
    // date. An unreachable endpoint fails the run before writing, exit 1, naming the operation.
    let run = cluster
        .run_env(
            &["--provider", "aws", "--group", "nope", "--output", "json"],
            &[
                ("AWS_ENDPOINT_URL", &moto.url),
                ("AWS_REGION", "us-east-1"),
                ("AWS_ACCESS_KEY_ID", "testing"),
                ("AWS_SECRET_ACCESS_KEY", "testing"),
                ("AWS_EC2_METADATA_DISABLED", "true"),
            ],
        )
        .await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.json()["summary"]["skip"], 4);
    let failures = run.json()["lookupFailures"].clone();
    assert_eq!(failures.as_array().map(Vec::len), Some(1), "{failures}");
    assert_eq!(failures[0]["operation"], "DescribeAutoScalingGroups");
    assert_eq!(failures[0]["subject"], "Auto Scaling group nope");
    assert!(cluster.tainted().await.is_empty());
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
                ("AWS_EC2_METADATA_DISABLED", "true"),
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

/// Nodes n-0..n-3 of [`SCENARIO`] on `instances`, in order.
fn place(cluster: &TestCluster, instances: &[String]) {
    for (index, instance) in instances.iter().enumerate() {
        cluster.set_instance(&format!("n-{index}"), instance);
    }
}

#[tokio::test]
async fn rollback_untaints_the_nodes_whose_drain_has_not_started() {
    let moto = start_moto().await;
    let aws = moto.clients().await;
    let (ami_old, ami_new) = two_images(&aws).await;
    // Four instances launched from v1; then v2 (a new image) becomes the default the group uses.
    let template_id = create_template(&aws, "rollback", &ami_old).await;
    create_group(&aws, GROUP, &template_id, "$Default", 4, CLUSTER).await;
    new_default_version(&aws, &template_id, &ami_new).await;
    let cluster = TestCluster::start(SCENARIO).await;
    place(&cluster, &instance_ids(&aws, GROUP).await);

    let rollout = select(&cluster, &moto, &["--max-tainted", "2"]).await;
    assert_eq!(rollout.run.json()["summary"]["taint"], 2);
    let tainted = cluster.tainted().await;
    assert_eq!(tainted.len(), 2, "{tainted:?}");
    // The drainer has started on the first one only.
    cluster.mark(&tainted[0], None, &[("rotor.dev/phase", "cordoned")]);

    // v2 turns out bad: the default goes back to v1, so the v1 instances are current again.
    set_default_version(&aws, &template_id, 1).await;
    let rollback = select(&cluster, &moto, &["--max-tainted", "2"]).await;
    let started = rollback.run.node(&tainted[0]);
    assert_eq!(started["action"], "keep", "{started}");
    assert_eq!(started["reason"], "image", "{started}");
    let untainted = rollback.run.node(&tainted[1]);
    assert_eq!(untainted["action"], "untaint", "{untainted}");
    assert_eq!(untainted["result"]["outcome"], "applied", "{untainted}");
    assert_eq!(rollback.run.json()["summary"]["taint"], 0);
    assert_eq!(cluster.tainted().await, std::slice::from_ref(&tainted[0]));
    assert!(
        cluster.rotor_annotations(&tainted[1]).await.is_empty(),
        "the selector's annotations go with its taint"
    );
    let events = cluster.events(&tainted[1]).await;
    assert!(
        events
            .iter()
            .any(|(reason, ..)| reason == "DrainTaintRemoved"),
        "{events:?}"
    );
    cluster.stop().await;
}

#[tokio::test]
async fn a_new_template_version_drifts_the_group_on_latest_not_the_one_on_default() {
    let moto = start_moto().await;
    let aws = moto.clients().await;
    let (ami, _) = two_images(&aws).await;
    // Two groups of two from v1 of one template: one follows $Latest, one $Default.
    let template_id = create_template(&aws, "versions", &ami).await;
    create_group(&aws, "latest", &template_id, "$Latest", 2, CLUSTER).await;
    create_group(&aws, "default", &template_id, "$Default", 2, CLUSTER).await;
    let cluster = TestCluster::start(SCENARIO).await;
    let mut instances = instance_ids(&aws, "latest").await;
    instances.extend(instance_ids(&aws, "default").await);
    place(&cluster, &instances);
    let group_of = |node: &str| if node < "n-2" { "latest" } else { "default" };

    // v2, the same image, not the default: only the group on $Latest wants it.
    let v2 = new_version(&aws, &template_id, &ami).await;
    assert_eq!(v2, 2);
    let dry = select(&cluster, &moto, &["--dry-run", "--max-tainted", "100%"]).await;
    for node in ["n-0", "n-1", "n-2", "n-3"] {
        let entry = dry.run.node(node);
        println!("v2 not default: {node} in {}: {entry}", group_of(node));
        assert_eq!(entry["group"], group_of(node), "{entry}");
        if group_of(node) == "latest" {
            assert_eq!(entry["action"], "taint", "{entry}");
            assert_eq!(entry["reason"], "launch-template-version", "{entry}");
            assert_eq!(
                entry["detail"],
                format!("{template_id}: instance version 1, group wants 2 ($Latest)"),
                "{entry}"
            );
        } else {
            assert_eq!(entry["action"], "keep", "{entry}");
            assert_eq!(entry["detail"], "up to date", "{entry}");
        }
    }

    // (When v2 then becomes the default, moto reads the $Default group's instances as being on
    // the new default too: it resolves $Default when read, $Latest at launch. That move shows in
    // moto only as image drift; see docs/selector.md.)
    assert!(
        cluster.tainted().await.is_empty(),
        "a dry run taints nothing"
    );
    cluster.stop().await;
}

#[tokio::test]
async fn budgets_hold_per_group_across_two_groups_and_as_a_percentage() {
    let moto = start_moto().await;
    let aws = moto.clients().await;
    let (ami_old, ami_new) = two_images(&aws).await;
    // Two groups of two from v1; v2 (a new image) becomes the default both use.
    let template_id = create_template(&aws, "budgets", &ami_old).await;
    create_group(&aws, "blue", &template_id, "$Default", 2, CLUSTER).await;
    create_group(&aws, "green", &template_id, "$Default", 2, CLUSTER).await;
    new_default_version(&aws, &template_id, &ami_new).await;
    let cluster = TestCluster::start(SCENARIO).await;
    let mut instances = instance_ids(&aws, "blue").await;
    instances.extend(instance_ids(&aws, "green").await);
    place(&cluster, &instances);
    let group_of = |node: &str| if node < "n-2" { "blue" } else { "green" };

    // All four are out of date; one per group may be tainted, whatever the overall budget.
    let flags = ["--max-tainted", "100%", "--max-tainted-per-group", "1"];
    let first = select(&cluster, &moto, &flags).await;
    let tainted = cluster.tainted().await;
    assert_eq!(tainted.len(), 2, "{tainted:?}");
    assert_eq!(
        [group_of(&tainted[0]), group_of(&tainted[1])],
        ["blue", "green"]
    );
    for node in ["n-0", "n-1", "n-2", "n-3"] {
        let entry = first.run.node(node);
        assert_eq!(entry["group"], group_of(node), "{entry}");
        assert_eq!(entry["reason"], "image", "{entry}");
    }
    let held: Vec<Value> = ["n-0", "n-1", "n-2", "n-3"]
        .into_iter()
        .map(|node| first.run.node(node))
        .filter(|entry| entry["action"] == "keep")
        .collect();
    assert_eq!(held.len(), 2, "{held:?}");
    // A second run with the same budgets adds nothing.
    let again = select(&cluster, &moto, &flags).await;
    assert_eq!(again.run.json()["summary"]["taint"], 0);
    assert_eq!(cluster.tainted().await, tainted);

    // Without the per-group limit, 60% of 4 nodes is 3 (rounded up): one more, counting the two
    // already tainted.
    let percent = select(&cluster, &moto, &["--max-tainted", "60%"]).await;
    assert_eq!(percent.run.json()["summary"]["taint"], 1);
    assert_eq!(cluster.tainted().await.len(), 3);
    cluster.stop().await;
}

/// [`SCENARIO`] with three nodes.
fn surge_scenario() -> String {
    SCENARIO.replace("size: 4", "size: 3")
}

/// The group's desired capacity and its `rotor.dev/surge-base` tag.
async fn capacity(aws: &AwsClients, group: &str) -> (i32, Option<String>) {
    let group = describe_group(aws, group).await;
    let tag = group
        .tags()
        .iter()
        .find(|t| t.key() == Some(rotor_selector::provider::aws_group_surge::SURGE_BASE_TAG))
        .and_then(|t| t.value().map(str::to_owned));
    (group.desired_capacity().unwrap(), tag)
}

fn surge_step(run: &common::SelectorRun) -> Value {
    let steps = run.json()["groupSurge"].clone();
    let list = steps.as_array().unwrap();
    assert!(list.len() <= 1, "{steps}");
    list.first().cloned().unwrap_or(Value::Null)
}

#[tokio::test]
async fn group_surge_launches_replacements_before_tainting_and_gives_them_back_through_retires() {
    let moto = start_moto().await;
    let aws = moto.clients().await;
    let (ami_old, ami_new) = two_images(&aws).await;
    let template_id = create_template(&aws, "workers", &ami_old).await;
    // Three instances, MaxSize 6 (create_group allows twice the size).
    create_group(&aws, GROUP, &template_id, "$Latest", 3, CLUSTER).await;
    let old = instance_ids(&aws, GROUP).await;
    new_default_version(&aws, &template_id, &ami_new).await;

    let cluster = TestCluster::start(&surge_scenario()).await;
    for (node, instance) in ["n-0", "n-1", "n-2"].iter().zip(&old) {
        cluster.set_instance(node, instance);
    }
    let flags = ["--max-tainted", "2", "--retire-drained", "--group-surge"];

    // A dry run decides the raise and writes nothing.
    let dry = select(&cluster, &moto, &[&["--dry-run"][..], &flags].concat()).await;
    let step = surge_step(&dry.run);
    assert_eq!(step["step"], "raise", "{step}");
    assert_eq!(step["result"]["outcome"], "dry-run", "{step}");
    assert_eq!(capacity(&aws, GROUP).await, (3, None));

    // Run 1: the budget would taint two nodes; instead the group is raised by two (base 3
    // recorded in the tag) and no node is tainted.
    let raise = select(&cluster, &moto, &flags).await;
    let step = surge_step(&raise.run);
    assert_eq!(step["step"], "raise", "{step}");
    assert_eq!(step["result"]["outcome"], "applied", "{step}");
    assert_eq!(raise.run.json()["summary"]["taint"], 0);
    assert!(cluster.tainted().await.is_empty());
    let held = raise.run.node("n-0");
    assert!(
        held["detail"]
            .as_str()
            .unwrap()
            .contains("raising desired capacity to 5"),
        "{held}"
    );
    assert_eq!(capacity(&aws, GROUP).await, (5, Some("3".into())));
    let calls = &raise.run.json()["apiCalls"]["aws"];
    assert_eq!(calls["CreateOrUpdateTags"], 1, "{calls}");
    assert_eq!(calls["SetDesiredCapacity"], 1, "{calls}");
    let launched = group_instances(&aws, GROUP).await;
    assert_eq!(launched.len(), 5, "{launched:?}");
    for (id, _) in launched.iter().filter(|(id, _)| !old.contains(id)) {
        assert_eq!(
            image_of(&aws, id).await,
            ami_new,
            "surge instances run the new image"
        );
    }

    // Run 2 (the CronJob's next run, a new process): the tag is read back, the surge is
    // InService, two nodes are tainted, and the group is not raised again.
    let ready = select(&cluster, &moto, &flags).await;
    assert_eq!(surge_step(&ready.run)["step"], "ready");
    let tainted = cluster.tainted().await;
    assert_eq!(tainted.len(), 2, "{tainted:?}");
    assert_eq!(
        ready.run.json()["apiCalls"]["aws"]["SetDesiredCapacity"],
        Value::Null
    );
    assert_eq!(capacity(&aws, GROUP).await, (5, Some("3".into())));

    // The drainer finishes both. Run 3 retires them with the capacity decremented (their
    // replacements already run); the two retiring nodes still fill --max-tainted 2, so the last
    // old node waits for the next run.
    for node in &tainted {
        cluster.mark(node, None, &[("rotor.dev/phase", "drained")]);
    }
    let give_back = select(&cluster, &moto, &flags).await;
    for node in &tainted {
        let entry = give_back.run.node(node);
        assert_eq!(entry["action"], "retire", "{entry}");
        assert_eq!(entry["result"]["outcome"], "applied", "{entry}");
        assert!(
            entry["detail"].as_str().unwrap().contains("decremented"),
            "{entry}"
        );
    }
    assert_eq!(surge_step(&give_back.run)["step"], "give-back");
    assert_eq!(capacity(&aws, GROUP).await, (3, Some("3".into())));
    let events = cluster.events(&tainted[0]).await;
    assert!(
        events
            .iter()
            .any(|(reason, _, _, note)| reason == "InstanceRetired"
                && note.contains("ShouldDecrementDesiredCapacity=true")),
        "{events:?}"
    );
    let last = ["n-0", "n-1", "n-2"]
        .into_iter()
        .find(|n| !tainted.iter().any(|t| t == n))
        .unwrap();
    // The cloud node controller deletes the Nodes of terminated instances; here the test does.
    for node in &tainted {
        cluster
            .nodes()
            .delete(node, &Default::default())
            .await
            .unwrap();
    }

    // Runs 4 and 5: the last one gets its own surge instance, then its taint.
    let raise = select(&cluster, &moto, &flags).await;
    assert_eq!(surge_step(&raise.run)["step"], "raise");
    assert_eq!(raise.run.node(last)["action"], "keep");
    assert_eq!(capacity(&aws, GROUP).await, (4, Some("3".into())));
    let ready = select(&cluster, &moto, &flags).await;
    assert_eq!(surge_step(&ready.run)["step"], "ready");
    assert_eq!(
        cluster.drain_taint(last).await.as_deref(),
        Some("image:NoSchedule")
    );

    // Drained, run 6 retires it and gives the surge back.
    cluster.mark(last, None, &[("rotor.dev/phase", "drained")]);
    let done = select(&cluster, &moto, &flags).await;
    assert_eq!(done.run.node(last)["action"], "retire");
    assert_eq!(surge_step(&done.run)["step"], "give-back");
    assert_eq!(capacity(&aws, GROUP).await, (3, Some("3".into())));

    // Run 7 removes the tag; run 8 has nothing to say. The group is back to 3, all new.
    let finish = select(&cluster, &moto, &flags).await;
    assert_eq!(surge_step(&finish.run)["step"], "finish");
    assert_eq!(capacity(&aws, GROUP).await, (3, None));
    let idle = select(&cluster, &moto, &flags).await;
    assert_eq!(surge_step(&idle.run), Value::Null);
    let serving: Vec<(String, String)> = group_instances(&aws, GROUP)
        .await
        .into_iter()
        .filter(|(_, state)| state == "InService")
        .collect();
    assert_eq!(serving.len(), 3, "{serving:?}");
    for (id, _) in &serving {
        assert!(!old.contains(id), "{id} is an old instance");
        assert_eq!(image_of(&aws, id).await, ami_new);
    }
    cluster.stop().await;
}
