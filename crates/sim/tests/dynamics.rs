//! The simulated control plane reacting to what clients do: workload controllers recreating
//! (or not) deleted pods, DaemonSets ignoring cordons, and the node-group autoscaler replacing
//! drained nodes from the current template and scaling up for unschedulable pods.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{
    FAST_TIMING, TestSim, WAIT, is_ready, is_terminating, name, node_of, phase, pod_gone, uid,
    wait_until,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::{Api, ResourceExt};
use rotor_apimachinery::conditions::node_is_ready as node_ready;
use rotor_sim::cluster::objects::unschedulable;
use serde_json::{Value, json};

const WORKLOADS: &str = r#"
nodeGroups:
  - name: general
    size: 3
    template: {cpu: "8", memory: 32Gi}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 3}
  - {kind: StatefulSet, name: db, namespace: shop, replicas: 3, shutdown: 300ms}
  - {kind: DaemonSet, name: agent, namespace: kube-system}
  - {kind: Pod, name: debug, namespace: default}
"#;

fn owner_uid(p: &Pod) -> String {
    p.owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
        .unwrap_or_default()
}

async fn cordon(sim: &TestSim, node: &str) {
    let patch = json!({"spec": {"unschedulable": true}});
    sim.nodes()
        .patch(node, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
}

fn taint_keys(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect()
}

fn kubelet_version(n: &Node) -> String {
    n.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.kubelet_version.clone())
        .unwrap_or_default()
}

async fn pods_on(sim: &TestSim, node: &str) -> Vec<Pod> {
    let all: Api<Pod> = Api::all(sim.client.clone());
    all.list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .unwrap()
        .items
}

fn is_daemon(p: &Pod) -> bool {
    p.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == "DaemonSet")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_replicaset_pod_when_it_is_deleted_then_a_replacement_with_a_new_name_turns_ready()
{
    let sim = TestSim::start(WORKLOADS).await;
    let before = sim.pods_labelled("shop", "app=web").await;
    assert_eq!(before.len(), 3);
    let victim = before[0].clone();
    sim.pods("shop")
        .delete(&name(&victim), &DeleteParams::default())
        .await
        .unwrap();

    let after = wait_until("three ready web pods without the victim", WAIT, || async {
        let pods = sim.pods_labelled("shop", "app=web").await;
        let live: Vec<Pod> = pods.into_iter().filter(|p| !is_terminating(p)).collect();
        (live.len() == 3
            && live.iter().all(is_ready)
            && live.iter().all(|p| name(p) != name(&victim)))
        .then_some(live)
    })
    .await;
    let old: BTreeSet<String> = before.iter().map(name).collect();
    let new: Vec<&Pod> = after.iter().filter(|p| !old.contains(&name(p))).collect();
    assert_eq!(new.len(), 1, "exactly one replacement");
    let replacement = new[0];
    // Same ReplicaSet, name generated from it.
    assert_eq!(owner_uid(replacement), owner_uid(&victim));
    let rs = &replacement.owner_references()[0].name;
    assert!(name(replacement).starts_with(&format!("{rs}-")));
    wait_until("the deleted pod to go", WAIT, || async {
        pod_gone(&sim.pods("shop"), &name(&victim))
            .await
            .then_some(())
    })
    .await;
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_statefulset_pod_db_1_when_it_is_deleted_then_db_1_returns_with_a_new_uid_only_after_the_old_one_is_gone()
 {
    let sim = TestSim::start(WORKLOADS).await;
    let pods = sim.pods("shop");
    let old = pods.get("db-1").await.unwrap();
    // Watch from the list's version (an unchanged object's own version may predate the
    // watch history, as on a freshly started apiserver, and answer 410).
    let rv = pods
        .list(&ListParams::default().fields("metadata.name=db-1"))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut watch = pods
        .watch(
            &WatchParams::default()
                .fields("metadata.name=db-1")
                .timeout(20),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    pods.delete("db-1", &DeleteParams::default()).await.unwrap();

    // Record what happens to the name db-1 until a new db-1 is Ready.
    let mut seen: Vec<(String, String, bool)> = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ev = tokio::time::timeout(left, watch.try_next())
            .await
            .expect("db-1 to come back")
            .expect("watch stream")
            .expect("watch open");
        let (kind, p) = match ev {
            WatchEvent::Added(p) => ("ADDED", p),
            WatchEvent::Modified(p) => ("MODIFIED", p),
            WatchEvent::Deleted(p) => ("DELETED", p),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        };
        assert_eq!(name(&p), "db-1");
        let ready = is_ready(&p);
        seen.push((kind.to_string(), uid(&p), ready));
        if uid(&p) != uid(&old) && ready {
            break;
        }
    }
    let old_uid = uid(&old);
    let deleted_at = seen
        .iter()
        .position(|(k, u, _)| k == "DELETED" && *u == old_uid)
        .unwrap_or_else(|| panic!("old db-1 never deleted: {seen:?}"));
    let added_at = seen
        .iter()
        .position(|(k, u, _)| k == "ADDED" && *u != old_uid)
        .unwrap_or_else(|| panic!("new db-1 never added: {seen:?}"));
    assert!(
        deleted_at < added_at,
        "new db-1 before the old was gone: {seen:?}"
    );
    // Before the deletion the old pod was only marked terminating.
    assert_eq!(seen[0].0, "MODIFIED");
    assert_eq!(seen[0].1, old_uid);
    assert!(seen[..deleted_at].iter().all(|(_, u, _)| *u == old_uid));
    assert!(seen[added_at..].iter().all(|(_, u, _)| *u != old_uid));

    let back = pods.get("db-1").await.unwrap();
    assert_ne!(uid(&back), old_uid);
    assert_eq!(owner_uid(&back), owner_uid(&old));
    assert_eq!(
        back.spec.as_ref().unwrap().hostname.as_deref(),
        Some("db-1")
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_bare_pod_when_it_is_deleted_then_nothing_recreates_it() {
    let sim = TestSim::start(WORKLOADS).await;
    let pods = sim.pods("default");
    pods.delete("debug", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("debug to go", WAIT, || async {
        pod_gone(&pods, "debug").await.then_some(())
    })
    .await;
    // Run the control plane through several full passes while nothing else moves.
    sim.pause(true).await;
    let created = sim.admin_get("stats").await["podsCreated"]
        .as_u64()
        .unwrap();
    for _ in 0..5 {
        sim.step().await;
    }
    assert!(pod_gone(&pods, "debug").await);
    assert!(
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(
        sim.admin_get("stats").await["podsCreated"]
            .as_u64()
            .unwrap(),
        created
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_pod_created_bound_to_a_node_then_its_kubelet_runs_it_and_it_turns_ready() {
    let sim = TestSim::start(WORKLOADS).await;
    let node = sim.any_node().await;
    let pods = sim.pods("default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "pinned", "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:1"}]}
    }))
    .unwrap();
    pods.create(&Default::default(), &pod).await.unwrap();
    let ready = wait_until("the pinned pod to be Ready", WAIT, || async {
        let p = pods.get("pinned").await.ok()?;
        is_ready(&p).then_some(p)
    })
    .await;
    assert_eq!(phase(&ready), "Running");
    assert_eq!(
        node_of(&ready),
        Some(node),
        "it stays on the node it was created on"
    );
    let status = ready.status.as_ref().unwrap();
    assert!(
        status.start_time.is_some() && status.pod_ip.is_some(),
        "{status:?}"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_cordoned_node_when_the_control_plane_runs_then_daemonset_pods_stay_and_are_recreated_there()
 {
    let sim = TestSim::start(WORKLOADS).await;
    let web = sim.pods_labelled("shop", "app=web").await;
    let node = node_of(&web[0]).unwrap();
    cordon(&sim, &node).await;
    // The node lifecycle controller mirrors the cordon as a taint.
    wait_until("the unschedulable taint", WAIT, || async {
        let n = sim.nodes().get(&node).await.unwrap();
        taint_keys(&n)
            .contains(&"node.kubernetes.io/unschedulable:NoSchedule".to_string())
            .then_some(())
    })
    .await;
    let cordoned: Vec<Node> = sim
        .nodes()
        .list(&ListParams::default().fields("spec.unschedulable=true"))
        .await
        .unwrap()
        .items;
    assert_eq!(
        cordoned.iter().map(|n| n.name_any()).collect::<Vec<_>>(),
        vec![node.clone()]
    );

    let agent = pods_on(&sim, &node)
        .await
        .into_iter()
        .find(is_daemon)
        .expect("an agent pod on the node");
    sim.pause(true).await;
    for _ in 0..5 {
        sim.step().await;
    }
    let still = sim.pods("kube-system").get(&name(&agent)).await.unwrap();
    assert_eq!(uid(&still), uid(&agent));
    assert!(!is_terminating(&still));
    sim.pause(false).await;

    // Deleted, the agent pod is recreated on the cordoned node (it tolerates the cordon) ...
    sim.pods("kube-system")
        .delete(&name(&agent), &DeleteParams::default())
        .await
        .unwrap();
    let again = wait_until("a new agent pod on the cordoned node", WAIT, || async {
        pods_on(&sim, &node)
            .await
            .into_iter()
            .find(|p| is_daemon(p) && uid(p) != uid(&agent) && is_ready(p))
    })
    .await;
    assert_eq!(node_of(&again).as_deref(), Some(node.as_str()));
    // ... while a deleted web pod from that node is replaced elsewhere.
    let web_here = pods_on(&sim, &node)
        .await
        .into_iter()
        .find(|p| p.labels().get("app").map(String::as_str) == Some("web"))
        .expect("a web pod on the node");
    sim.pods("shop")
        .delete(&name(&web_here), &DeleteParams::default())
        .await
        .unwrap();
    let replacement = wait_until("a web replacement", WAIT, || async {
        let live: Vec<Pod> = sim
            .pods_labelled("shop", "app=web")
            .await
            .into_iter()
            .filter(|p| !is_terminating(p) && uid(p) != uid(&web_here))
            .collect();
        (live.len() == 3 && live.iter().all(is_ready)).then_some(live)
    })
    .await;
    let new_one = replacement
        .iter()
        .find(|p| web.iter().all(|w| uid(w) != uid(p)))
        .expect("a new web pod");
    assert_ne!(node_of(new_one).as_deref(), Some(node.as_str()));
    sim.stop().await;
}

/// Three 4-CPU nodes on kubelet v1.32.9; web's 3 pods fit anywhere.
const REPLACE: &str = r#"
nodeGroups:
  - name: general
    size: 3
    max: 6
    template: {cpu: "4", memory: 16Gi, kubeletVersion: v1.32.9}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 3, requests: {cpu: 500m}}
  - {kind: DaemonSet, name: agent, namespace: kube-system, requests: {cpu: 50m}}
"#;

async fn set_template_version(sim: &TestSim, group: &str, version: &str) {
    let out = sim
        .admin_post(
            &format!("node-groups/{group}/template"),
            Some(json!({"kubeletVersion": version})),
        )
        .await;
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["template"]["kubeletVersion"], version);
}

/// Evicts every pod on `node` that kubectl drain would (everything but DaemonSet pods).
async fn drain(sim: &TestSim, node: &str) -> Vec<Pod> {
    let victims: Vec<Pod> = pods_on(sim, node)
        .await
        .into_iter()
        .filter(|p| !is_daemon(p))
        .collect();
    for p in &victims {
        let ns = p.metadata.namespace.clone().unwrap();
        sim.evict(&ns, &name(p)).await.expect("eviction");
    }
    victims
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_new_template_when_a_node_is_cordoned_and_drained_then_it_is_replaced_by_a_node_on_the_new_version()
 {
    let sim = TestSim::start(REPLACE).await;
    sim.admin_post("stats/reset", None).await;
    let originals: Vec<Node> = sim
        .nodes()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(originals.len(), 3);
    assert!(originals.iter().all(|n| kubelet_version(n) == "v1.32.9"));
    set_template_version(&sim, "general", "v1.34.1").await;
    let stats = sim.admin_get("stats").await;
    assert_eq!(stats["nodeGroups"]["general"]["fromCurrentTemplate"], 0);

    let web = sim.pods_labelled("shop", "app=web").await;
    let old = node_of(&web[0]).unwrap();
    cordon(&sim, &old).await;
    let victims = drain(&sim, &old).await;
    assert!(!victims.is_empty());
    let drained = Instant::now();

    wait_until("the drained node to be removed", WAIT, || async {
        match sim.nodes().get(&old).await {
            Err(kube::Error::Api(s)) if s.code == 404 => Some(()),
            _ => None,
        }
    })
    .await;
    // Not before the node had been empty for scaleDownDelay (500ms).
    assert!(
        drained.elapsed() >= Duration::from_millis(500),
        "removed after {:?}",
        drained.elapsed()
    );

    let originals: BTreeSet<String> = originals.iter().map(|n| n.name_any()).collect();
    let replacement = wait_until("a ready replacement node", WAIT, || async {
        let nodes = sim
            .nodes()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let new: Vec<Node> = nodes
            .iter()
            .filter(|n| !originals.contains(&n.name_any()))
            .cloned()
            .collect();
        (nodes.len() == 3 && new.len() == 1 && node_ready(&new[0])).then(|| new[0].clone())
    })
    .await;
    assert_eq!(kubelet_version(&replacement), "v1.34.1");
    assert_eq!(replacement.labels()["sim.rotor.dev/node-group"], "general");
    // The other two nodes are untouched.
    for n in sim
        .nodes()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        if n.name_any() != replacement.name_any() {
            assert_eq!(kubelet_version(&n), "v1.32.9");
        }
    }
    // The DaemonSet follows the new node; the evicted web pods run again elsewhere.
    let new_name = replacement.name_any();
    wait_until("an agent on the replacement", WAIT, || async {
        pods_on(&sim, &new_name)
            .await
            .iter()
            .any(|p| is_daemon(p) && is_ready(p))
            .then_some(())
    })
    .await;
    wait_until("three ready web pods", WAIT, || async {
        let live: Vec<Pod> = sim
            .pods_labelled("shop", "app=web")
            .await
            .into_iter()
            .filter(|p| !is_terminating(p))
            .collect();
        (live.len() == 3 && live.iter().all(is_ready)).then_some(())
    })
    .await;

    let stats = sim.admin_get("stats").await;
    assert_eq!(stats["nodesRemoved"], 1);
    assert_eq!(stats["nodesLaunched"], 1);
    assert_eq!(stats["nodeGroups"]["general"]["desired"], 3);
    assert_eq!(stats["nodeGroups"]["general"]["fromCurrentTemplate"], 1);
    assert_eq!(stats["budgetViolations"], 0);
    let events: Api<Event> = Api::all(sim.client.clone());
    let removing = events
        .list(
            &ListParams::default()
                .fields(&format!("involvedObject.name={old},reason=RemovingNode")),
        )
        .await
        .unwrap()
        .items;
    assert_eq!(removing.len(), 1);
    sim.stop().await;
}

/// Two 4-CPU nodes (3840m allocatable) hold 2 web pods of 1500m each: the group is full.
const FULL: &str = r#"
nodeGroups:
  - name: general
    size: 2
    max: 4
    template: {cpu: "4", memory: 16Gi, kubeletVersion: v1.32.9}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 4, requests: {cpu: 1500m}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_full_group_when_a_node_is_drained_then_unschedulable_pods_cause_a_scale_up_and_the_surge_is_given_back()
 {
    let sim = TestSim::start(FULL).await;
    sim.admin_post("stats/reset", None).await;
    let originals = sim.node_names().await;
    set_template_version(&sim, "general", "v1.34.1").await;
    let old = originals[0].clone();
    cordon(&sim, &old).await;
    let victims = drain(&sim, &old).await;
    assert_eq!(victims.len(), 2);

    // The replacements fit nowhere and are marked unschedulable ...
    let pending = wait_until("unschedulable web pods", WAIT, || async {
        let pods = sim.pods_labelled("shop", "app=web").await;
        let pending: Vec<Pod> = pods.into_iter().filter(unschedulable).collect();
        (pending.len() == 2).then_some(pending)
    })
    .await;
    assert!(
        pending
            .iter()
            .all(|p| phase(p) == "Pending" && node_of(p).is_none())
    );
    assert_eq!(sim.admin_get("stats").await["unschedulablePods"], 2);

    // ... until the group grows by one node from the new template, where they run.
    let added = wait_until("a scale-up node", WAIT, || async {
        sim.nodes()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|n| !originals.contains(&n.name_any()))
    })
    .await;
    assert_eq!(kubelet_version(&added), "v1.34.1");
    let added_name = added.name_any();
    wait_until("the pending pods running on the new node", WAIT, || async {
        let on_new = pods_on(&sim, &added_name).await;
        (on_new.len() == 2 && on_new.iter().all(is_ready)).then_some(())
    })
    .await;
    let stats = sim.admin_get("stats").await;
    assert_eq!(stats["unschedulablePods"], 0);

    // The drained node goes and the group returns to its size instead of replacing it.
    wait_until("the drained node removed", WAIT, || async {
        matches!(sim.nodes().get(&old).await, Err(kube::Error::Api(s)) if s.code == 404)
            .then_some(())
    })
    .await;
    let stats = wait_until("the group back at size 2", WAIT, || async {
        let s = sim.admin_get("stats").await;
        (s["nodeGroups"]["general"]["desired"] == 2 && s["nodeGroups"]["general"]["nodes"] == 2)
            .then_some(s)
    })
    .await;
    assert_eq!(stats["nodesLaunched"], 1);
    assert_eq!(stats["nodesRemoved"], 1);
    let names: BTreeSet<String> = sim.node_names().await.into_iter().collect();
    let expected: BTreeSet<String> = originals
        .iter()
        .filter(|n| **n != old)
        .cloned()
        .chain([added_name])
        .collect();
    assert_eq!(names, expected);
    sim.stop().await;
}

/// Four full 4-CPU nodes, one 3-CPU web pod each; the group may grow to 8.
const ONE_POD_PER_NODE: &str = r#"
nodeGroups:
  - name: general
    size: 4
    max: 8
    template: {cpu: "4", memory: 16Gi, kubeletVersion: v1.32.9}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 4, requests: {cpu: 3}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_three_pods_that_each_need_a_node_when_they_become_unschedulable_one_after_another_then_one_scale_up_adds_three_nodes()
 {
    // FAST_TIMING with a scaleUpDelay long enough for the drains below, and drained nodes
    // kept until after it (else their replacements make room first).
    let timing = FAST_TIMING
        .replace("scaleUpDelay: 300ms", "scaleUpDelay: 1500ms")
        .replace("scaleDownDelay: 500ms", "scaleDownDelay: 5s");
    let sim = TestSim::start_timed(&timing, ONE_POD_PER_NODE).await;
    let nodes = sim.node_names().await;
    assert_eq!(nodes.len(), 4);
    // Drained 0.3 s apart, as a drainer's evictions come: the pods turn unschedulable at
    // different steps, all within scaleUpDelay of the first.
    for old in &nodes[..3] {
        cordon(&sim, old).await;
        drain(&sim, old).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The group's first growth, once the first pod has waited scaleUpDelay, is sized for all
    // three pods at once (cluster-autoscaler's scan counts every unschedulable pod), not one
    // node that must boot before the next is asked for.
    let desired = wait_until("the group to grow", WAIT, || async {
        let d = sim.admin_get("stats").await["nodeGroups"]["general"]["desired"]
            .as_u64()
            .unwrap();
        (d > 4).then_some(d)
    })
    .await;
    assert_eq!(desired, 7);
    wait_until("every web pod Ready again", WAIT, || async {
        let pods = sim.pods_labelled("shop", "app=web").await;
        let live: Vec<&Pod> = pods.iter().filter(|p| !is_terminating(p)).collect();
        (live.len() == 4 && live.iter().all(|p| is_ready(p))).then_some(())
    })
    .await;
    sim.stop().await;
}
