//! The simulator's Kubernetes API as a real kube client sees it over HTTP: list paging and
//! selectors, watches (kube's `watcher`, raw watches with bookmarks and timeouts, 410 after the
//! history is compacted), and patch preconditions (resourceVersion conflicts, JSON-patch `test`,
//! strategic-merge replacement of `spec.taints`).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{TestSim, WAIT, api_error, name, node_of, wait_until};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

/// 12 web + 3 db + 3 agent (DaemonSet) + 3 kube-proxy (mirror) + 1 bare pod = 22 pods.
const CLUSTER: &str = r#"
nodeGroups:
  - name: general
    size: 3
    template: {cpu: "8", memory: 32Gi}
staticPods:
  - name: kube-proxy
    requests: {cpu: 100m, memory: 64Mi}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 12, requests: {cpu: 100m}}
  - {kind: StatefulSet, name: db, namespace: shop, replicas: 3}
  - {kind: DaemonSet, name: agent, namespace: kube-system}
  - {kind: Pod, name: debug, namespace: default}
"#;

const TOTAL_PODS: usize = 22;

fn key(p: &Pod) -> (String, String) {
    (p.metadata.namespace.clone().unwrap_or_default(), name(p))
}

/// Follows `continue` from the first page; returns every page's items and resourceVersion.
async fn list_paged(api: &Api<Pod>, lp: ListParams) -> Vec<(Vec<Pod>, String)> {
    let mut pages = Vec::new();
    let mut lp = lp;
    loop {
        let page = api.list(&lp).await.expect("list page");
        let token = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        pages.push((
            page.items,
            page.metadata.resource_version.unwrap_or_default(),
        ));
        match token {
            Some(t) => lp = lp.continue_token(&t),
            None => return pages,
        }
        assert!(pages.len() < 100, "paging does not terminate");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_22_pods_when_listing_with_limit_5_then_continue_tokens_return_every_pod_exactly_once()
 {
    let sim = TestSim::start(CLUSTER).await;
    let api: Api<Pod> = Api::all(sim.client.clone());

    let whole = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(whole.items.len(), TOTAL_PODS);
    assert!(whole.metadata.continue_.as_deref().unwrap_or("").is_empty());

    let pages = list_paged(&api, ListParams::default().limit(5)).await;
    // 22 pods in pages of 5: 5, 5, 5, 5, 2.
    let sizes: Vec<usize> = pages.iter().map(|(items, _)| items.len()).collect();
    assert_eq!(sizes, vec![5, 5, 5, 5, 2]);
    // Every page is served at the first page's resourceVersion.
    let rvs: BTreeSet<&String> = pages.iter().map(|(_, rv)| rv).collect();
    assert_eq!(rvs.len(), 1, "pages served at different versions: {rvs:?}");

    let paged: Vec<(String, String)> = pages.iter().flat_map(|(i, _)| i.iter().map(key)).collect();
    let unique: BTreeSet<_> = paged.iter().cloned().collect();
    assert_eq!(unique.len(), paged.len(), "a pod appeared twice: {paged:?}");
    let expected: BTreeSet<_> = whole.items.iter().map(key).collect();
    assert_eq!(unique, expected);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_pods_on_three_nodes_when_selecting_by_label_and_node_name_then_only_matching_pods_return()
 {
    let sim = TestSim::start(CLUSTER).await;
    let all_api: Api<Pod> = Api::all(sim.client.clone());
    let all = all_api.list(&ListParams::default()).await.unwrap().items;

    // Equality, set-based and negated label selectors.
    let web = sim.pods_labelled("shop", "app=web").await;
    assert_eq!(web.len(), 12);
    assert!(web.iter().all(|p| p.labels()["app"] == "web"));
    let shop = sim.pods_labelled("shop", "app in (web,db)").await;
    assert_eq!(shop.len(), 15);
    let not_web = all_api
        .list(&ListParams::default().labels("app!=web"))
        .await
        .unwrap()
        .items;
    assert_eq!(not_web.len(), TOTAL_PODS - 12);
    let none = sim.pods_labelled("shop", "app=nothing").await;
    assert!(none.is_empty());

    // spec.nodeName: exactly the pods bound to that node, also when paged as kubectl drain does.
    let node = node_of(&web[0]).expect("web pods are bound");
    let want: BTreeSet<_> = all
        .iter()
        .filter(|p| node_of(p).as_deref() == Some(node.as_str()))
        .map(key)
        .collect();
    assert!(want.len() >= 3, "agent, kube-proxy and web on {node}");
    let selector = format!("spec.nodeName={node}");
    let got = pod_keys(&all_api, &ListParams::default().fields(&selector)).await;
    assert_eq!(got, want);
    let pages = list_paged(&all_api, ListParams::default().fields(&selector).limit(2)).await;
    assert!(pages.iter().all(|(items, _)| items.len() <= 2));
    let paged: Vec<_> = pages.iter().flat_map(|(i, _)| i.iter().map(key)).collect();
    assert_eq!(paged.len(), want.len());
    assert_eq!(paged.into_iter().collect::<BTreeSet<_>>(), want);

    // Field and label selectors combine.
    let both = sim
        .pods("shop")
        .list(&ListParams::default().fields(&selector).labels("app=web"))
        .await
        .unwrap()
        .items;
    assert_eq!(
        both.len(),
        web.iter()
            .filter(|p| node_of(p).as_deref() == Some(node.as_str()))
            .count()
    );
    let by_name = all_api
        .list(&ListParams::default().fields("metadata.name=debug,status.phase=Running"))
        .await
        .unwrap()
        .items;
    assert_eq!(
        by_name.iter().map(key).collect::<Vec<_>>(),
        vec![("default".to_string(), "debug".to_string())]
    );

    // Nodes select on spec.unschedulable.
    let nodes = sim
        .nodes()
        .list(&ListParams::default().fields("spec.unschedulable=false"))
        .await
        .unwrap();
    assert_eq!(nodes.items.len(), 3);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_field_the_apiserver_cannot_select_on_when_listing_or_watching_then_400_field_label_not_supported()
 {
    let sim = TestSim::start(CLUSTER).await;
    let pods: Api<Pod> = Api::all(sim.client.clone());
    let err = api_error(
        pods.list(&ListParams::default().fields("spec.dnsPolicy=ClusterFirst"))
            .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"));
    assert!(
        err.message.contains("field label not supported"),
        "{}",
        err.message
    );
    assert!(err.message.contains("spec.dnsPolicy"), "{}", err.message);

    // Nodes have no spec.nodeName.
    let err = api_error(
        sim.nodes()
            .list(&ListParams::default().fields("spec.nodeName=x"))
            .await,
    );
    assert_eq!(err.code, 400);
    assert!(err.message.contains("field label not supported"));

    // A watch is refused the same way, before any event.
    let err = match pods
        .watch(
            &WatchParams::default().fields("spec.dnsPolicy=ClusterFirst"),
            "0",
        )
        .await
    {
        Ok(s) => {
            let first = s.boxed().try_next().await;
            panic!("watch started: {first:?}")
        }
        Err(kube::Error::Api(s)) => s,
        Err(e) => panic!("unexpected error {e}"),
    };
    assert_eq!(err.code, 400);
    assert!(err.message.contains("field label not supported"));
    sim.stop().await;
}

/// Runs kube's `watcher` in a task and forwards what it yields (errors as their text).
fn spawn_watcher<K>(
    api: Api<K>,
) -> (
    mpsc::UnboundedReceiver<Result<watcher::Event<K>, String>>,
    tokio::task::JoinHandle<()>,
)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(item) = stream.next().await {
            if tx.send(item.map_err(|e| e.to_string())).is_err() {
                return;
            }
        }
    });
    (rx, task)
}

/// The next item the watcher yields for which `pick` answers something.
async fn next_matching<K, T>(
    rx: &mut mpsc::UnboundedReceiver<Result<watcher::Event<K>, String>>,
    what: &str,
    mut pick: impl FnMut(&Result<watcher::Event<K>, String>) -> Option<T>,
) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let item = tokio::time::timeout(left, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for the watcher to yield {what}"))
            .expect("watcher task ended");
        if let Some(v) = pick(&item) {
            return v;
        }
    }
}

fn bare_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "probe"}},
        "spec": {"containers": [{"name": "c", "image": "registry.example.com/probe:1"}]},
    }))
    .unwrap()
}

/// The pods `api` lists with `params`, by namespace and name.
async fn pod_keys(api: &Api<Pod>, params: &ListParams) -> BTreeSet<(String, String)> {
    let list = api.list(params).await.unwrap();
    list.items.iter().map(key).collect()
}

/// deletecollection of pods, as rotor-drainer removes a drain's surge placeholders: every pod
/// the label selector matches in the namespace goes, and the answer lists them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_label_selector_when_pods_are_deleted_as_a_collection_then_exactly_those_go() {
    let sim = TestSim::start(CLUSTER).await;
    let api = sim.pods("shop");
    // Bare pods (nothing recreates them), labelled as placeholders are.
    let mut held = BTreeSet::new();
    for i in 0..3 {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("held-{i}"), "labels": {"held": "yes"}},
            "spec": {"containers": [{"name": "c", "image": "pause"}]}
        }))
        .unwrap();
        held.insert(key(&api
            .create(&PostParams::default(), &pod)
            .await
            .unwrap()));
    }
    let before = pod_keys(&api, &ListParams::default()).await;
    let answer = api
        .delete_collection(
            &Default::default(),
            &ListParams::default().labels("held=yes"),
        )
        .await
        .expect("deletecollection is served");
    let gone: BTreeSet<(String, String)> = answer
        .left()
        .expect("the deleted pods")
        .items
        .iter()
        .map(key)
        .collect();
    assert_eq!(gone, held);
    // Each goes as a single DELETE would make it go (its grace period, then removed).
    wait_until("the held pods to go", WAIT, || async {
        let left = api
            .list(&ListParams::default().labels("held=yes"))
            .await
            .unwrap();
        left.items.is_empty().then_some(())
    })
    .await;
    assert_eq!(
        pod_keys(&api, &ListParams::default()).await,
        before.difference(&held).cloned().collect(),
        "nothing else went"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_running_watchers_when_a_pod_is_created_and_a_node_patched_then_both_are_delivered() {
    let sim = TestSim::start(CLUSTER).await;
    let (mut pod_events, pod_task) = spawn_watcher(sim.pods("default"));
    let (mut node_events, node_task) = spawn_watcher(sim.nodes());
    let initial = next_matching(&mut pod_events, "the initial pod list", |e| {
        matches!(e, Ok(watcher::Event::InitDone)).then_some(())
    });
    initial.await;
    next_matching(&mut node_events, "the initial node list", |e| {
        matches!(e, Ok(watcher::Event::InitDone)).then_some(())
    })
    .await;

    sim.pods("default")
        .create(&PostParams::default(), &bare_pod("probe"))
        .await
        .unwrap();
    let seen = next_matching(&mut pod_events, "the new pod", |e| match e {
        Ok(watcher::Event::Apply(p)) if name(p) == "probe" => Some(p.clone()),
        _ => None,
    })
    .await;
    assert_eq!(seen.labels()["app"], "probe");

    let node = sim.any_node().await;
    let patch = json!({"metadata": {"labels": {"rotor.test/touched": "yes"}}});
    sim.nodes()
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let patched = next_matching(&mut node_events, "the patched node", |e| match e {
        Ok(watcher::Event::Apply(n)) if n.name_any() == node => Some(n.clone()),
        _ => None,
    })
    .await;
    assert_eq!(patched.labels()["rotor.test/touched"], "yes");

    pod_task.abort();
    node_task.abort();
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_watch_with_bookmarks_and_a_1s_timeout_when_nothing_changes_then_bookmarks_arrive_and_the_stream_ends()
 {
    let sim = TestSim::start(CLUSTER).await;
    let api = sim.pods("shop");
    let rv = api
        .list(&ListParams::default().limit(1))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let start = Instant::now();
    // WatchParams asks for bookmarks by default (allowWatchBookmarks=true).
    let wp = WatchParams::default().timeout(1);
    assert!(wp.bookmarks);
    let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();
    let mut bookmarks = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("the watch ends at its timeout")
        .expect("watch stream")
    {
        match ev {
            WatchEvent::Bookmark(b) => {
                assert_eq!(b.types.kind, "Pod");
                assert_eq!(b.types.api_version, "v1");
                bookmarks.push(b.metadata.resource_version);
            }
            other => panic!("unexpected event on a quiet cluster: {other:?}"),
        }
    }
    let elapsed = start.elapsed();
    // bookmarkInterval is 200ms: several bookmarks within the second, all at the watch's version.
    assert!(bookmarks.len() >= 2, "bookmarks: {bookmarks:?}");
    assert!(bookmarks.iter().all(|b| *b == rv), "{bookmarks:?} vs {rv}");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(4),
        "the watch lasted {elapsed:?}"
    );

    // Without bookmarks asked for, none are sent.
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    let mut events = 0;
    while let Some(_ev) = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("the watch ends at its timeout")
        .expect("watch stream")
    {
        events += 1;
    }
    assert_eq!(events, 0);
    sim.stop().await;
}

/// The WatchList feature (`sendInitialEvents`), as rotor-drainer's pod watches use it through
/// kube's streaming watcher: the current objects, then a bookmark that says they are all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_streaming_watch_then_the_current_objects_come_first_and_a_bookmark_ends_them() {
    let sim = TestSim::start(CLUSTER).await;
    let api = sim.pods("shop");
    let listed = pod_keys(&api, &ListParams::default()).await;
    let config = watcher::Config::default().streaming_lists();
    let mut events = watcher(api.clone(), config).boxed();
    let mut initial = BTreeSet::new();
    loop {
        let event = tokio::time::timeout(WAIT, events.try_next())
            .await
            .expect("the initial events end with their bookmark")
            .expect("watch stream")
            .expect("the watch goes on");
        match event {
            watcher::Event::Init => {}
            watcher::Event::InitApply(p) => {
                initial.insert(key(&p));
            }
            watcher::Event::InitDone => break,
            other => panic!("before the initial state is whole: {other:?}"),
        }
    }
    assert_eq!(initial, listed);

    // Without resourceVersionMatch=NotOlderThan the server refuses it, as kube-apiserver does.
    let raw = sim
        .client
        .request_text(
            axum::http::Request::get(
                "/api/v1/namespaces/shop/pods?watch=true&sendInitialEvents=true&resourceVersion=0",
            )
            .body(Vec::new())
            .unwrap(),
        )
        .await;
    let error = raw.expect_err("refused");
    assert!(
        matches!(&error, kube::Error::Api(s) if s.code == 422 && s.message.contains("resourceVersionMatch")),
        "{error:?}"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_expired_watch_history_when_resuming_from_an_old_version_then_410_and_watcher_relists()
 {
    let sim = TestSim::start(CLUSTER).await;
    let pods = sim.pods("default");
    // Hold the control plane still so that only this test's writes move resourceVersions.
    sim.pause(true).await;

    let (mut events, task) = spawn_watcher(pods.clone());
    next_matching(&mut events, "the initial list", |e| {
        matches!(e, Ok(watcher::Event::InitDone)).then_some(())
    })
    .await;
    let lists_before = sim.admin_get("stats").await["requests"]["list pods"]
        .as_u64()
        .unwrap();

    let old_rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    // A write elsewhere moves the cluster past old_rv; then the history is dropped.
    let node = sim.any_node().await;
    let patch = json!({"metadata": {"labels": {"rotor.test/epoch": "2"}}});
    sim.nodes()
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    sim.admin_post("faults/expire-watches", None).await;

    // A raw watch from the old version: an in-stream ERROR with code 410 Expired.
    let mut stream = pods
        .watch(&WatchParams::default().timeout(5), &old_rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            assert!(s.message.contains("too old resource version"), "{s:?}");
        }
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    assert!(stream.try_next().await.unwrap().is_none());

    // A watch from the current version starts fine and sees new writes.
    let current = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut fresh = pods
        .watch(&WatchParams::default().timeout(5), &current)
        .await
        .unwrap()
        .boxed();

    // The watcher was cut, resumed from its old version, got 410, and lists again.
    let err = next_matching(&mut events, "the 410", |e| match e {
        Err(msg) => Some(msg.clone()),
        _ => None,
    })
    .await;
    assert!(err.contains("410") || err.contains("too old"), "{err}");
    next_matching(&mut events, "a new Init", |e| {
        matches!(e, Ok(watcher::Event::Init)).then_some(())
    })
    .await;
    next_matching(&mut events, "the relist to finish", |e| {
        matches!(e, Ok(watcher::Event::InitDone)).then_some(())
    })
    .await;
    let lists_after = sim.admin_get("stats").await["requests"]["list pods"]
        .as_u64()
        .unwrap();
    // This test listed pods twice itself; anything beyond is the watcher's relist.
    assert!(
        lists_after >= lists_before + 3,
        "the watcher did not relist ({lists_before} -> {lists_after})"
    );

    // And it keeps delivering events after the expiry.
    pods.create(&PostParams::default(), &bare_pod("after-expiry"))
        .await
        .unwrap();
    next_matching(&mut events, "the pod created after expiry", |e| match e {
        Ok(watcher::Event::Apply(p)) if name(p) == "after-expiry" => Some(()),
        _ => None,
    })
    .await;
    match tokio::time::timeout(WAIT, fresh.try_next()).await.unwrap() {
        Ok(Some(WatchEvent::Added(p))) => assert_eq!(name(&p), "after-expiry"),
        other => panic!("expected ADDED after-expiry, got {other:?}"),
    }

    task.abort();
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_node_when_patching_with_stale_version_or_failing_test_op_then_409_and_422_and_taints_replace_whole()
 {
    let sim = TestSim::start(CLUSTER).await;
    let nodes = sim.nodes();
    let node = nodes.list(&ListParams::default()).await.unwrap().items[0].clone();
    let n = node.name_any();
    let rv0 = node.resource_version().unwrap();
    let pp = PatchParams::default();

    // A merge patch carrying the current resourceVersion succeeds and moves it on.
    let p1 = json!({"metadata": {"resourceVersion": rv0, "labels": {"rotor.test/owner": "first"}}});
    let after = nodes.patch(&n, &pp, &Patch::Merge(&p1)).await.unwrap();
    assert_ne!(after.resource_version().unwrap(), rv0);
    // The same precondition again is stale: 409 Conflict, and nothing changes.
    let p2 =
        json!({"metadata": {"resourceVersion": rv0, "labels": {"rotor.test/owner": "second"}}});
    let err = api_error(nodes.patch(&n, &pp, &Patch::Merge(&p2)).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(
        err.message.contains("the object has been modified"),
        "{}",
        err.message
    );
    // Strategic merge patches honour the precondition too.
    let err = api_error(nodes.patch(&n, &pp, &Patch::Strategic(&p2)).await);
    assert_eq!(err.code, 409);
    let now = nodes.get(&n).await.unwrap();
    assert_eq!(now.labels()["rotor.test/owner"], "first");
    assert_eq!(now.resource_version(), after.resource_version());

    // JSON patch whose test op fails: 422 Invalid, nothing changes.
    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/labels/rotor.test~1owner", "value": "someone-else"},
        {"op": "replace", "path": "/metadata/labels/rotor.test~1owner", "value": "me"},
    ]))
    .unwrap();
    let err = api_error(nodes.patch(&n, &pp, &Patch::<()>::Json(failing)).await);
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        nodes.get(&n).await.unwrap().labels()["rotor.test/owner"],
        "first"
    );
    let passing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/labels/rotor.test~1owner", "value": "first"},
        {"op": "replace", "path": "/metadata/labels/rotor.test~1owner", "value": "me"},
    ]))
    .unwrap();
    let got = nodes
        .patch(&n, &pp, &Patch::<()>::Json(passing))
        .await
        .unwrap();
    assert_eq!(got.labels()["rotor.test/owner"], "me");

    // spec.taints has no merge key: a strategic-merge patch replaces the list whole.
    let taints = |n: &Node| -> Vec<String> {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .iter()
            .map(|t| {
                format!(
                    "{}={}:{}",
                    t.key,
                    t.value.clone().unwrap_or_default(),
                    t.effect
                )
            })
            .collect()
    };
    let two = json!({"spec": {"taints": [
        {"key": "a", "value": "1", "effect": "NoSchedule"},
        {"key": "b", "effect": "PreferNoSchedule"},
    ]}});
    let got = nodes.patch(&n, &pp, &Patch::Strategic(&two)).await.unwrap();
    assert_eq!(taints(&got), vec!["a=1:NoSchedule", "b=:PreferNoSchedule"]);
    let one = json!({"spec": {"taints": [{"key": "c", "value": "x", "effect": "NoSchedule"}]}});
    let got = nodes.patch(&n, &pp, &Patch::Strategic(&one)).await.unwrap();
    assert_eq!(taints(&got), vec!["c=x:NoSchedule"]);
    assert_eq!(
        taints(&nodes.get(&n).await.unwrap()),
        vec!["c=x:NoSchedule"]
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_simulator_kubeconfig_when_a_client_connects_then_discovery_and_version_answer() {
    let sim = TestSim::start(CLUSTER).await;
    let v = sim.client.apiserver_version().await.unwrap();
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "33"));
    assert_eq!(v.git_version, "v1.33.4");
    let core = sim.client.list_core_api_resources("v1").await.unwrap();
    assert!(core.resources.iter().any(|r| r.name == "pods/eviction"));
    // Every pod is Ready once the scenario has settled.
    wait_until("all pods ready", WAIT, || async {
        let pods: Api<Pod> = Api::all(sim.client.clone());
        let items = pods.list(&ListParams::default()).await.unwrap().items;
        (items.len() == TOTAL_PODS && items.iter().all(common::is_ready)).then_some(())
    })
    .await;
    sim.stop().await;
}

/// One node and the bare pod `default/debug`, on `timing`.
async fn one_bare_pod(timing: &str) -> common::SimCluster {
    common::SimCluster::start(&format!(
        r#"
timing: {timing}
nodeGroups: [{{name: general, size: 1, template: {{cpu: "8", memory: 32Gi}}}}]
workloads:
  - {{kind: Pod, name: debug, namespace: default}}
"#
    ))
    .await
}

/// With `timing.apiLatency` a request is answered that long after it came, and a write takes
/// effect only then, as on a real API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_api_latency_when_creating_a_pod_then_it_exists_only_once_answered() {
    let sim = one_bare_pod("{tick: 20ms, apiLatency: 400ms}").await;
    let exists = |name: &str| {
        sim.sim
            .sim
            .cluster
            .lock()
            .unwrap()
            .pods
            .get("default", name)
            .is_some()
    };
    let pods: Api<Pod> = Api::namespaced(sim.client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "late"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    let create = tokio::spawn({
        let pods = pods.clone();
        async move { pods.create(&PostParams::default(), &pod).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !exists("late"),
        "the create took effect before its answer time"
    );
    create.await.unwrap().expect("the create is answered");
    assert!(
        exists("late"),
        "the create was answered but did not take effect"
    );
}

/// `timing.evictionLatency` holds an eviction that long, and only an eviction: a read sent
/// meanwhile is answered, and finds the pod not yet evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_eviction_latency_when_evicting_then_only_the_eviction_waits() {
    let sim = one_bare_pod("{tick: 20ms, evictionLatency: 2s}").await;
    let pods: Api<Pod> = Api::namespaced(sim.client.clone(), "default");
    let evict = tokio::spawn({
        let pods = pods.clone();
        async move {
            pods.evict("debug", &kube::api::EvictParams::default())
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let during = pods
        .get("debug")
        .await
        .expect("a read is answered meanwhile");
    assert!(
        !evict.is_finished(),
        "the eviction was answered before its time"
    );
    assert!(
        during.metadata.deletion_timestamp.is_none(),
        "the eviction took effect before its answer"
    );
    evict.await.unwrap().expect("the eviction is answered");
    let after = pods.get("debug").await;
    assert!(
        after.map_or(true, |p| p.metadata.deletion_timestamp.is_some()),
        "the eviction was answered but the pod is not being deleted"
    );
}

/// rotor's own resources are served as if their CRDs were installed: rotor-policy's types (the
/// drainer's) round-trip through create, list and watch; a RotationPolicy's status is written
/// only through `/status` (not by a create or a write to the policy) and its spec bumps the
/// generation; a DrainRule has no `/status`; neither takes a strategic merge patch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_rotor_policies_and_drain_rules_when_written_and_watched_then_served_as_their_crds() {
    use rotor_policy::{DrainRule, RotationPolicy};

    let sim = TestSim::start(CLUSTER).await;
    let policies: Api<RotationPolicy> = Api::all(sim.client.clone());
    let rules: Api<DrainRule> = Api::all(sim.client.clone());
    let (mut events, watch) = spawn_watcher(policies.clone());
    next_matching(&mut events, "the first (empty) list", |e| {
        matches!(e, Ok(watcher::Event::InitDone)).then_some(())
    })
    .await;

    let policy: RotationPolicy = serde_json::from_value(json!({
        "apiVersion": "rotor.dev/v1alpha1",
        "kind": "RotationPolicy",
        "metadata": {"name": "gpu"},
        "spec": {"nodeSelector": {"matchLabels": {"pool": "gpu"}}, "priority": 5,
                 "budgets": [{"nodes": "2"}]},
        "status": {"nodes": 9},
    }))
    .unwrap();
    let made = policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    assert_eq!(made.spec, policy.spec);
    assert_eq!(made.metadata.generation, Some(1));
    assert!(
        made.status.is_none(),
        "a create sets no status: {:?}",
        made.status
    );
    let seen = next_matching(
        &mut events,
        "the policy made, as a watch event",
        |e| match e {
            Ok(watcher::Event::Apply(p)) => Some(p.spec.clone()),
            _ => None,
        },
    )
    .await;
    assert_eq!(seen, policy.spec);

    // A status in a write to the main resource is dropped, as for any CRD with /status.
    let with_status = json!({"spec": {"priority": 7}, "status": {"nodes": 9}});
    let patched = policies
        .patch("gpu", &PatchParams::default(), &Patch::Merge(&with_status))
        .await
        .unwrap();
    assert_eq!(patched.spec.priority, 7);
    assert_eq!(patched.metadata.generation, Some(2));
    assert!(patched.status.is_none(), "{:?}", patched.status);
    let status = json!({"status": {"nodes": 3, "draining": 1}});
    let patched = policies
        .patch_status("gpu", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let got = patched.status.expect("status written through /status");
    assert_eq!((got.nodes, got.draining), (3, 1));
    assert_eq!(
        patched.metadata.generation,
        Some(2),
        "status leaves generation"
    );
    let strategic = policies
        .patch(
            "gpu",
            &PatchParams::default(),
            &Patch::Strategic(&json!({"spec": {"priority": 8}})),
        )
        .await;
    assert_eq!(api_error(strategic).code, 415);

    let rule: DrainRule = serde_json::from_value(json!({
        "apiVersion": "rotor.dev/v1alpha1",
        "kind": "DrainRule",
        "metadata": {"name": "batch"},
        "spec": {"behavior": "Skip", "pods": [{"selector": {"matchLabels": {"app": "batch"}}}]},
    }))
    .unwrap();
    rules.create(&PostParams::default(), &rule).await.unwrap();
    let listed = rules.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].spec, rule.spec);
    let no_status = rules
        .patch_status(
            "batch",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {}})),
        )
        .await;
    assert_eq!(api_error(no_status).code, 404);

    let discovered = sim
        .client
        .list_api_group_resources("rotor.dev/v1alpha1")
        .await
        .unwrap();
    let mut names: Vec<_> = discovered
        .resources
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["drainrules", "rotationpolicies", "rotationpolicies/status"]
    );
    watch.abort();
    sim.stop().await;
}
