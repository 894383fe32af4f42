//! The Azure provider end to end against the fake ARM server of the harness
//! (`rotor_e2e::fake_azure`) and the simulator: the built `rotor-selector` finds VMs off their
//! scale set's latest model through `ROTOR_AZURE_ENDPOINT` and a static test token
//! (`ROTOR_AZURE_TOKEN`). Scenarios: drift tainted (reason `model`), dry run, budgets, the skips
//! (Rolling policy, AKS pool, Flexible), paging, throttling retried within a bound, an expired
//! token fetched again, a scale set that vanishes between the calls, a resource group that does
//! not exist, a resource group named beyond ASCII, a `nextLink` that repeats a page, image drift
//! in a scale set whose model asks for `latest` (reason `image`), and 5,000 VMs in 50 scale sets
//! (calls counted, run time printed).

mod common;

use std::time::Instant;

use common::TestCluster;
use rotor_e2e::fake_azure::{FakeAzure, FakeScaleSet, FakeVm};
use serde_json::json;

const SUB: &str = "00000000-0000-0000-0000-00000000a2e1";

const SCENARIO: &str = r#"
controlPlaneVersion: v1.33.4
timing:
  tick: 50ms
  nodeStartup: 200ms
  scaleUpDelay: 1h
  scaleDownDelay: 1h
nodeGroups:
  - name: workers
    zones: [westeurope-1]
    size: 7
    template:
      kubeletVersion: v1.33.4
      nodeName: "n-{index}"
"#;

/// The fake's scale sets, and which node runs on which VM:
/// - `rg-Workers/workers` (Uniform, Manual): VMs 0, 1, 2 off the latest model, 3 on it
///   (n-0..n-3; the nodes spell the resource group `RG-WORKERS`);
/// - `rg-Workers/rolling` (Rolling policy): VM 0 off the model (n-4);
/// - `MC_rg_aks_westeurope/aks-nodepool1-vmss` (an AKS pool): VM 0 off the model (n-5);
/// - `rg-Workers/flex` (Flexible): VM 0 (n-6).
fn fake() -> FakeAzure {
    let fake = FakeAzure::start(SUB);
    fake.add(FakeScaleSet::uniform(
        "rg-Workers",
        "workers",
        vec![
            FakeVm::new("0", false),
            FakeVm::new("1", false),
            FakeVm::new("2", false),
            FakeVm::new("3", true),
        ],
    ));
    let mut rolling = FakeScaleSet::uniform("rg-Workers", "rolling", vec![FakeVm::new("0", false)]);
    rolling.upgrade_mode = "Rolling".into();
    fake.add(rolling);
    let mut aks = FakeScaleSet::uniform(
        "MC_rg_aks_westeurope",
        "aks-nodepool1-vmss",
        vec![FakeVm::new("0", false)],
    );
    aks.tags
        .insert("aks-managed-poolName".into(), "nodepool1".into());
    fake.add(aks);
    let mut flex = FakeScaleSet::uniform("rg-Workers", "flex", vec![FakeVm::new("0", false)]);
    flex.orchestration_mode = "Flexible".into();
    fake.add(flex);
    fake
}

async fn cluster_on(fake: &FakeAzure) -> TestCluster {
    let cluster = TestCluster::start(SCENARIO).await;
    let place = |node: &str, rg: &str, set: &str, vm: &str| {
        let id = format!(
            "azure:///subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{set}/virtualMachines/{vm}",
            fake.subscription
        );
        cluster.modify_node(node, |n| {
            n.spec.get_or_insert_with(Default::default).provider_id = Some(id)
        });
    };
    for i in 0..4 {
        place(&format!("n-{i}"), "RG-WORKERS", "workers", &i.to_string());
    }
    place("n-4", "rg-workers", "rolling", "0");
    place("n-5", "mc_rg_aks_westeurope", "aks-nodepool1-vmss", "0");
    place("n-6", "rg-workers", "flex", "0");
    cluster
}

async fn select(cluster: &TestCluster, fake: &FakeAzure, flags: &[&str]) -> common::SelectorRun {
    let env = fake.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut all = vec!["--provider", "azure", "--output", "json"];
    all.extend_from_slice(flags);
    cluster.run_env(&all, &env).await
}

#[tokio::test]
async fn image_drift_in_a_latest_scale_set_is_found_by_comparing_its_vms() {
    // `workers` asks for the latest image: VMs 1 and 3 were built from a newer one (a scale-out
    // after a new image was published), 0 from the old one, all on the latest model; VM 2 is off
    // the model. n-0..n-3 run on them.
    let fake = FakeAzure::start(SUB);
    let on = |id: &str, exact: &str| FakeVm {
        exact_version: exact.into(),
        ..FakeVm::new(id, true)
    };
    fake.add(FakeScaleSet::uniform(
        "rg-Workers",
        "workers",
        vec![
            on("0", "24.04.202409120"),
            on("1", "24.04.202410010"),
            FakeVm::new("2", false),
            on("3", "24.04.202410010"),
        ],
    ));
    let cluster = cluster_on(&fake).await;

    // Without --image-drift: only VM 2, by the model, and only the VMs off it are asked for.
    let plain = select(&cluster, &fake, &["--dry-run", "--max-tainted", "100%"]).await;
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert_eq!(plain.node("n-2")["reason"], "model");
    for node in ["n-0", "n-1", "n-3"] {
        assert_eq!(plain.node(node)["action"], "keep", "{node}");
    }
    assert_eq!(
        fake.vm_lists(),
        [(
            "workers".to_owned(),
            Some("properties/latestModelApplied eq false".to_owned())
        )]
    );

    // With it: the whole list, and VM 0 is older than VMs 1 and 3.
    let drift = select(
        &cluster,
        &fake,
        &["--dry-run", "--max-tainted", "100%", "--image-drift"],
    )
    .await;
    assert_eq!(drift.code, 0, "{}", drift.stderr);
    let n0 = drift.node("n-0");
    assert_eq!(n0["action"], "taint", "{n0}");
    assert_eq!(n0["reason"], "image", "{n0}");
    assert!(
        n0["detail"]
            .as_str()
            .unwrap()
            .starts_with("VM 0 runs image version 24.04.202409120; VM "),
        "{n0}"
    );
    assert_eq!(drift.node("n-2")["reason"], "model");
    assert_eq!(drift.node("n-1")["action"], "keep");
    assert_eq!(drift.node("n-3")["action"], "keep");
    assert_eq!(fake.vm_lists()[1], ("workers".to_owned(), None));
    assert_eq!(
        drift.json()["apiCalls"]["azure"]["VirtualMachineScaleSetVMs_List"],
        1
    );
}

#[tokio::test]
async fn model_drift_is_tainted_within_budgets_and_the_cloud_upgraded_groups_are_skipped() {
    let fake = fake();
    // Two VMs a page: the three off-model VMs of `workers` come in two pages.
    fake.set_page_size(2);
    let cluster = cluster_on(&fake).await;

    // Dry run, everything allowed: the three off-model VMs' nodes would be tainted.
    let dry = select(&cluster, &fake, &["--dry-run", "--max-tainted", "100%"]).await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    for node in ["n-0", "n-1", "n-2"] {
        let entry = dry.node(node);
        assert_eq!(entry["action"], "taint", "{entry}");
        assert_eq!(entry["reason"], "model", "{entry}");
        assert_eq!(entry["group"], "rg-Workers/workers", "{entry}");
        assert!(
            entry["detail"]
                .as_str()
                .unwrap()
                .contains("does not run the latest model of scale set rg-Workers/workers"),
            "{entry}"
        );
    }
    assert_eq!(dry.node("n-3")["action"], "keep");
    let why = |node: &str| {
        dry.node(node)["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(dry.node("n-4")["action"], "skip");
    assert!(
        why("n-4").contains("upgrade policy Rolling"),
        "{}",
        dry.node("n-4")
    );
    assert!(
        why("n-5").contains("AKS node pool nodepool1"),
        "{}",
        dry.node("n-5")
    );
    assert!(why("n-6").contains("Flexible"), "{}", dry.node("n-6"));
    assert!(cluster.tainted().await.is_empty());
    assert_eq!(cluster.requests("patch nodes"), 0);
    // Two pages of the four scale sets, two pages of `workers`' VMs; the skipped scale sets
    // cost nothing.
    assert_eq!(
        dry.json()["apiCalls"]["azure"],
        json!({"VirtualMachineScaleSets_ListAll": 2, "VirtualMachineScaleSetVMs_List": 2})
    );
    assert_eq!(fake.total_calls(), 4);

    // --max-tainted 1: one taint, reason model; a second run adds none.
    let one = select(&cluster, &fake, &["--max-tainted", "1"]).await;
    assert_eq!(one.code, 0, "{}", one.stderr);
    let tainted = cluster.tainted().await;
    assert_eq!(tainted.len(), 1, "{tainted:?}");
    assert!(["n-0", "n-1", "n-2"].contains(&tainted[0].as_str()));
    assert_eq!(
        cluster.drain_taint(&tainted[0]).await.as_deref(),
        Some("model:NoSchedule")
    );
    let again = select(&cluster, &fake, &["--max-tainted", "1"]).await;
    assert_eq!(again.json()["summary"]["taint"], 0);

    // A budget per group of 2 with everything allowed: two of workers' three.
    let per_group = select(
        &cluster,
        &fake,
        &["--max-tainted", "100%", "--max-tainted-per-group", "2"],
    )
    .await;
    assert_eq!(per_group.code, 0, "{}", per_group.stderr);
    assert_eq!(cluster.tainted().await.len(), 2);

    // --include-aks-managed judges the AKS pool too.
    let aks = select(
        &cluster,
        &fake,
        &[
            "--dry-run",
            "--include-aks-managed",
            "--max-tainted",
            "100%",
        ],
    )
    .await;
    assert_eq!(aks.node("n-5")["action"], "taint", "{}", aks.node("n-5"));
    assert_eq!(aks.node("n-5")["reason"], "model");

    // The VM brought to the latest model: its taint (not yet acted on) is taken back.
    fake.modify("workers", |set| {
        for vm in &mut set.vms {
            vm.latest_model_applied = true;
        }
    });
    let rollback = select(&cluster, &fake, &["--max-tainted", "100%"]).await;
    assert_eq!(rollback.code, 0, "{}", rollback.stderr);
    assert!(cluster.tainted().await.is_empty(), "{}", rollback.stdout);
    cluster.stop().await;
}

#[tokio::test]
async fn throttling_and_an_expired_token_are_retried_and_a_vanished_scale_set_is_skipped() {
    let fake = fake();
    let cluster = cluster_on(&fake).await;

    // A 401 (expired token), then a 429 and a 503 with Retry-After: the run gets through.
    fake.expire_token_once();
    fake.throttle(1, 429, 1);
    fake.throttle(1, 503, 0);
    let started = Instant::now();
    let run = select(&cluster, &fake, &["--dry-run", "--max-tainted", "100%"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.node("n-0")["action"], "taint");
    assert_eq!(
        fake.faults_served(),
        [("401".into(), 1), ("429".into(), 1), ("503".into(), 1)].into()
    );
    assert!(
        started.elapsed().as_secs_f64() >= 1.0,
        "the 429's Retry-After was honoured"
    );

    // Throttled past the bound: the run fails before any write, naming the call.
    fake.throttle(10, 429, 0);
    let run = select(&cluster, &fake, &["--max-tainted", "100%"]).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "Azure VirtualMachineScaleSets_ListAll failed: subscription {SUB}: 429 TooManyRequests"
        )),
        "{}",
        run.stderr
    );
    assert!(cluster.tainted().await.is_empty());
    assert_eq!(cluster.requests("patch nodes"), 0);
    assert_eq!(
        fake.faults_served()["429"],
        1 + 4,
        "4 attempts, then the run gave up"
    );
    fake.clear_faults();

    // `workers` vanishes between the scale-set list and its VMs: its nodes are skipped
    // (lookup-failed), nothing is tainted from partial data, and the run exits 1.
    fake.vanish_after_list("workers");
    let run = select(&cluster, &fake, &["--max-tainted", "100%"]).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    for node in ["n-0", "n-1", "n-2", "n-3"] {
        let entry = run.node(node);
        assert_eq!(entry["action"], "skip", "{entry}");
        assert!(
            entry["detail"].as_str().unwrap().contains("was not found"),
            "{entry}"
        );
    }
    assert!(cluster.tainted().await.is_empty());
    cluster.stop().await;
}

/// A mistyped `--azure-resource-group` (404 ResourceGroupNotFound) beside a right one: the
/// right one's scale sets are judged and written, and the run reports the missing group and
/// exits 1, so that a typo does not pass as a fleet with nothing out of date.
#[tokio::test]
async fn a_resource_group_that_does_not_exist_fails_the_run_and_the_others_are_handled() {
    let fake = fake();
    let cluster = cluster_on(&fake).await;
    let in_groups = |groups: &[&'static str]| -> Vec<&'static str> {
        let named = groups.iter().flat_map(|g| ["--azure-resource-group", g]);
        named.chain(["--max-tainted", "100%"]).collect()
    };
    let run = select(&cluster, &fake, &in_groups(&["rg-Wrokers", "rg-Workers"])).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    let failures = run.json()["lookupFailures"].clone();
    assert_eq!(failures.as_array().map(Vec::len), Some(1), "{failures}");
    assert_eq!(failures[0]["operation"], "VirtualMachineScaleSets_List");
    assert_eq!(failures[0]["subject"], "resource group rg-Wrokers");
    let error = failures[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("ResourceGroupNotFound") && error.contains("--azure-resource-group"),
        "{error}"
    );
    let mut tainted = cluster.tainted().await;
    tainted.sort();
    assert_eq!(tainted, ["n-0", "n-1", "n-2"]);

    // Named right, the run exits 0.
    let right = select(&cluster, &fake, &in_groups(&["rg-Workers"])).await;
    assert_eq!(right.code, 0, "{}", right.stderr);
    assert_eq!(right.json()["lookupFailures"], json!([]));
    cluster.stop().await;
}

#[tokio::test]
async fn a_resource_group_named_beyond_ascii_is_listed_and_its_vms_judged() {
    // Azure allows letters beyond ASCII in resource group names. Here the third byte is inside
    // a letter of two, where the AKS check reads the name's first three; the paths carry it
    // percent-encoded (the fake refuses a raw one, as a real HTTP server does).
    const RG: &str = "grün-rg";
    let fake = fake();
    fake.add(FakeScaleSet::uniform(
        RG,
        "kühl",
        vec![FakeVm::new("0", false)],
    ));
    let cluster = cluster_on(&fake).await;
    let id = format!(
        "azure:///subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/kühl/virtualMachines/0"
    );
    cluster.modify_node("n-6", |n| {
        n.spec.get_or_insert_with(Default::default).provider_id = Some(id)
    });
    let run = select(
        &cluster,
        &fake,
        &["--azure-resource-group", RG, "--max-tainted", "100%"],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(cluster.tainted().await, ["n-6"]);
    // The whole subscription, this group among the others.
    let run = select(&cluster, &fake, &["--max-tainted", "100%"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut tainted = cluster.tainted().await;
    tainted.sort();
    assert_eq!(tainted, ["n-0", "n-1", "n-2", "n-6"]);
    cluster.stop().await;
}

/// A server whose `nextLink` names the page it is on would keep a run paging forever: the
/// run stops at the repeat, fails naming the call, and writes nothing.
#[tokio::test]
async fn a_next_link_that_repeats_a_page_fails_the_run_instead_of_paging_forever() {
    let fake = fake();
    let cluster = cluster_on(&fake).await;
    fake.set_page_size(2);
    fake.stick_paging();
    let run = select(&cluster, &fake, &["--max-tainted", "100%"]).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("VirtualMachineScaleSets_ListAll: nextLink names a page already read"),
        "{}",
        run.stderr
    );
    // The first page and the page its link named, whose link names itself: nothing more.
    assert_eq!(fake.calls()["VirtualMachineScaleSets_ListAll"], 2);
    assert!(cluster.tainted().await.is_empty());
    assert_eq!(cluster.requests("patch nodes"), 0);
    cluster.stop().await;
}

#[tokio::test]
async fn a_wrong_token_or_subscription_fails_the_run_before_any_write() {
    let fake = fake();
    let cluster = cluster_on(&fake).await;
    let run = cluster
        .run_env(
            &["--provider", "azure"],
            &[
                ("ROTOR_AZURE_ENDPOINT", fake.url.as_str()),
                ("ROTOR_AZURE_TOKEN", "not-the-token"),
                ("AZURE_SUBSCRIPTION_ID", SUB),
            ],
        )
        .await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("401 AuthenticationFailed"),
        "{}",
        run.stderr
    );
    // Without a subscription: a configuration error, exit 2, before the cluster is contacted.
    let run = common::run_bare(&["--provider", "azure"], &[]).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("--azure-subscription"),
        "{}",
        run.stderr
    );
    cluster.stop().await;
}

const SCALE: &str = r#"
controlPlaneVersion: v1.33.4
timing:
  tick: 1s
  nodeStartup: 1s
  scaleUpDelay: 1h
  scaleDownDelay: 1h
nodeGroups:
  - name: big
    zones: [westeurope-1]
    size: 5000
    template:
      kubeletVersion: v1.33.4
      nodeName: "n-{index}"
"#;

/// 5,000 VMs in 50 scale sets of 100, a tenth of each off the latest model: 1 scale-set list
/// and 50 VM lists (one page each at ARM's 1,000 a page). Prints the run time; no timed
/// assertion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_vms_in_fifty_scale_sets() {
    let fake = FakeAzure::start(SUB);
    for g in 0..50 {
        let vms = (0..100)
            .map(|i| FakeVm::new(i.to_string(), i % 10 != 0))
            .collect();
        fake.add(FakeScaleSet::uniform(
            "rg-scale",
            &format!("vmss-{g:02}"),
            vms,
        ));
    }
    let cluster = TestCluster::start(SCALE).await;
    for g in 0..50 {
        for i in 0..100 {
            let id = format!(
                "azure:///subscriptions/{SUB}/resourceGroups/rg-scale/providers/Microsoft.Compute/virtualMachineScaleSets/vmss-{g:02}/virtualMachines/{i}"
            );
            cluster.modify_node(&format!("n-{}", g * 100 + i), |n| {
                n.spec.get_or_insert_with(Default::default).provider_id = Some(id)
            });
        }
    }
    let started = Instant::now();
    let run = select(&cluster, &fake, &["--max-tainted", "1%"]).await;
    let elapsed = started.elapsed();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let json = run.json();
    assert_eq!(json["summary"]["applied"], 50, "{}", json["summary"]);
    assert_eq!(
        json["apiCalls"]["azure"],
        json!({"VirtualMachineScaleSets_ListAll": 1, "VirtualMachineScaleSetVMs_List": 50})
    );
    assert_eq!(fake.total_calls(), 51);
    let lookup = run
        .stderr
        .lines()
        .find(|line| line.contains("azure provider: listed the scale sets"))
        .unwrap_or("(no look-up line)");
    println!(
        "azure, 5,000 VMs in 50 scale sets: run {:.2}s, summary {}, calls {}\n  {lookup}",
        elapsed.as_secs_f64(),
        json["summary"],
        json["apiCalls"]
    );
    cluster.stop().await;
}
