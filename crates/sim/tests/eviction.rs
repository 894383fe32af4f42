//! The eviction subresource as kube clients meet it: every outcome the apiserver's
//! `eviction.go` can give (success, 429 with and without Retry-After, 500 for overlapping
//! budgets, 404, 409), the pods that bypass budgets (Pending; not Ready under AlwaysAllow or a
//! healthy budget), the disruption controller bringing a budget back to health, and the
//! simulator's budget-violation counter (direct deletes count, evictions never do).

mod common;

use common::{
    TestSim, WAIT, api_error, disrupted_pods, is_ready, is_terminating, name, node_of, pdb_counts,
    phase, pod_gone, uid, wait_until,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::response::StatusSummary;
use rotor_sim::cluster::objects::unschedulable;
use serde_json::{Value, json};

const PDB_REFUSAL: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// Waits until the budget's status has been computed for its current generation and satisfies
/// `check`.
async fn wait_budget(
    sim: &TestSim,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&PodDisruptionBudget) -> bool,
) -> PodDisruptionBudget {
    let api = sim.pdbs(ns);
    wait_until(what, WAIT, || async {
        let b = api.get(name).await.unwrap();
        let processed =
            b.status.as_ref().and_then(|s| s.observed_generation) == b.metadata.generation;
        (processed && check(&b)).then_some(b)
    })
    .await
}

/// Waits until `ns` has exactly `n` pods labelled `app=<app>`, all Ready and none terminating.
async fn wait_ready_pods(sim: &TestSim, ns: &str, app: &str, n: usize) -> Vec<Pod> {
    let selector = format!("app={app}");
    wait_until(&format!("{n} ready {app} pods"), WAIT, || async {
        let pods = sim.pods_labelled(ns, &selector).await;
        (pods.len() == n && pods.iter().all(|p| is_ready(p) && !is_terminating(p))).then_some(pods)
    })
    .await
}

fn budget_violations(stats: &Value) -> u64 {
    stats["budgetViolations"]
        .as_u64()
        .expect("budgetViolations")
}

const WEB_MIN_3_OF_4: &str = r#"
nodeGroups:
  - name: general
    size: 3
    template: {cpu: "8", memory: 32Gi}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 4, pdb: {minAvailable: 3}}
"#;

const WEB_MIN_3_OF_3: &str = r#"
nodeGroups:
  - name: general
    size: 3
    template: {cpu: "8", memory: 32Gi}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 3, pdb: {minAvailable: 3}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_budget_allowing_one_when_a_pod_is_evicted_then_it_terminates_the_budget_records_it_and_health_returns()
 {
    let sim = TestSim::start(WEB_MIN_3_OF_4).await;
    let before = wait_budget(&sim, "shop", "web", "a processed budget", |_| true).await;
    assert_eq!(pdb_counts(&before), (4, 3, 4, 1));
    let pods = wait_ready_pods(&sim, "shop", "web", 4).await;
    let victim = pods[0].clone();

    // Hold the controllers so that the state the eviction leaves can be read before they act.
    sim.pause(true).await;
    let st = sim
        .evict("shop", &name(&victim))
        .await
        .expect("eviction allowed");
    assert_eq!(st.status, Some(StatusSummary::Success));
    assert_eq!(st.code, 201);

    let evicted = sim.pods("shop").get(&name(&victim)).await.unwrap();
    assert_eq!(uid(&evicted), uid(&victim));
    assert!(
        is_terminating(&evicted),
        "no deletionTimestamp after eviction"
    );
    assert_eq!(evicted.metadata.deletion_grace_period_seconds, Some(30));
    let target = evicted
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
        .expect("DisruptionTarget condition");
    assert_eq!(
        (target.status.as_str(), target.reason.as_deref()),
        ("True", Some("EvictionByEvictionAPI"))
    );
    let budget = sim.pdbs("shop").get("web").await.unwrap();
    assert_eq!(budget.status.as_ref().unwrap().disruptions_allowed, 0);
    assert_eq!(disrupted_pods(&budget), vec![name(&victim)]);
    // A second eviction now meets the decremented budget.
    let err = api_error(sim.evict("shop", &name(&pods[1])).await);
    assert_eq!(err.code, 429);

    sim.pause(false).await;
    wait_until("the evicted pod to disappear", WAIT, || async {
        pod_gone(&sim.pods("shop"), &name(&victim))
            .await
            .then_some(())
    })
    .await;
    // The ReplicaSet replaces it and the budget returns to full health.
    let now = wait_ready_pods(&sim, "shop", "web", 4).await;
    assert!(now.iter().all(|p| uid(p) != uid(&victim)));
    let after = wait_budget(&sim, "shop", "web", "a healthy budget again", |b| {
        pdb_counts(b).0 == 4
    })
    .await;
    assert_eq!(pdb_counts(&after), (4, 3, 4, 1));
    assert!(disrupted_pods(&after).is_empty());
    let stats = sim.admin_get("stats").await;
    assert_eq!(stats["evictions"]["success"], 1);
    assert_eq!(stats["evictions"]["budget"], 1);
    assert_eq!(budget_violations(&stats), 0);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_budget_allowing_zero_when_evicting_then_429_disruption_budget_without_retry_after()
{
    let sim = TestSim::start(WEB_MIN_3_OF_3).await;
    let budget = wait_budget(&sim, "shop", "web", "a processed budget", |_| true).await;
    assert_eq!(pdb_counts(&budget), (3, 3, 3, 0));
    let pods = wait_ready_pods(&sim, "shop", "web", 3).await;
    let victim = name(&pods[0]);

    let err = api_error(sim.evict("shop", &victim).await);
    assert_eq!((err.code, err.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(err.message, PDB_REFUSAL);
    let details = err.details.as_ref().expect("details");
    assert_eq!(details.retry_after_seconds, 0);
    assert_eq!(details.causes.len(), 1);
    assert_eq!(details.causes[0].reason, "DisruptionBudget");
    assert_eq!(
        details.causes[0].message,
        "The disruption budget web needs 3 healthy pods and has 3 currently"
    );

    // On the wire: no Retry-After header for a plain budget refusal.
    let raw = sim.evict_raw("shop", &victim).await;
    assert_eq!(raw.status(), 429);
    assert!(raw.headers().get("retry-after").is_none());
    assert_eq!(
        raw.body()["details"]["causes"][0]["reason"],
        "DisruptionBudget"
    );

    // The pod was not touched and the budget not consumed.
    let pod = sim.pods("shop").get(&victim).await.unwrap();
    assert!(!is_terminating(&pod) && is_ready(&pod));
    assert_eq!(pod.resource_version(), pods[0].resource_version());
    let again = sim.pdbs("shop").get("web").await.unwrap();
    assert_eq!(again.resource_version(), budget.resource_version());
    let stats = sim.admin_get("stats").await;
    assert_eq!(stats["evictions"]["budget"], 2);
    assert_eq!(budget_violations(&stats), 0);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_budget_spec_change_not_yet_observed_when_evicting_then_429_with_retry_after_10_until_processed()
 {
    let sim = TestSim::start(WEB_MIN_3_OF_3).await;
    wait_budget(&sim, "shop", "web", "a processed budget", |b| {
        pdb_counts(b) == (3, 3, 3, 0)
    })
    .await;
    let pods = wait_ready_pods(&sim, "shop", "web", 3).await;
    let victim = name(&pods[0]);

    // The disruption controller is stopped while the budget is relaxed: generation 2,
    // observedGeneration still 1.
    sim.pause(true).await;
    let patch = json!({"spec": {"minAvailable": 2}});
    let b = sim
        .pdbs("shop")
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(b.metadata.generation, Some(2));
    assert_eq!(b.status.as_ref().unwrap().observed_generation, Some(1));

    let err = api_error(sim.evict("shop", &victim).await);
    assert_eq!((err.code, err.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(err.message, PDB_REFUSAL);
    let details = err.details.as_ref().expect("details");
    assert_eq!(details.retry_after_seconds, 10);
    assert_eq!(details.causes[0].reason, "DisruptionBudget");
    assert_eq!(
        details.causes[0].message,
        "The disruption budget web is still being processed by the server."
    );
    let raw = sim.evict_raw("shop", &victim).await;
    assert_eq!(raw.status(), 429);
    assert_eq!(raw.headers()["retry-after"], "10");
    assert_eq!(raw.body()["details"]["retryAfterSeconds"], 10);
    assert!(!is_terminating(
        &sim.pods("shop").get(&victim).await.unwrap()
    ));

    // Once the controller has observed generation 2, the relaxed budget allows one eviction.
    sim.pause(false).await;
    let b = wait_budget(&sim, "shop", "web", "generation 2 observed", |_| true).await;
    assert_eq!(pdb_counts(&b), (3, 2, 3, 1));
    let st = sim.evict("shop", &victim).await.expect("eviction allowed");
    assert_eq!(st.status, Some(StatusSummary::Success));
    let stats = sim.admin_get("stats").await;
    assert_eq!(stats["evictions"]["budget-unprocessed"], 2);
    assert_eq!(stats["evictions"]["success"], 1);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_budgets_covering_a_pod_when_evicting_then_500_and_the_pod_stays() {
    let sim = TestSim::start(WEB_MIN_3_OF_4).await;
    let pods = wait_ready_pods(&sim, "shop", "web", 4).await;
    let extra: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web-extra"},
        "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .unwrap();
    sim.pdbs("shop")
        .create(&PostParams::default(), &extra)
        .await
        .unwrap();
    // Both budgets allow disruptions; the overlap alone is refused.
    wait_budget(
        &sim,
        "shop",
        "web-extra",
        "the second budget processed",
        |b| pdb_counts(b).3 == 2,
    )
    .await;

    // eviction.go answers with a bare Status: code 500, this exact message, no reason. A stale
    // UID makes no difference, the budgets are looked at first.
    for uid_pre in [None, Some("00000000-0000-0000-0000-000000000000")] {
        let err = api_error(sim.evict_with("shop", &name(&pods[0]), uid_pre).await);
        assert_eq!((err.code, err.reason.as_str()), (500, ""));
        assert_eq!(
            err.message,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        );
    }
    let pod = sim.pods("shop").get(&name(&pods[0])).await.unwrap();
    assert!(!is_terminating(&pod));
    assert_eq!(
        sim.admin_get("stats").await["evictions"]["multiple-pdbs"],
        2
    );
    sim.stop().await;
}

const WEB_MIN_2_OF_4: &str = r#"
nodeGroups:
  - name: general
    size: 3
    template: {cpu: "8", memory: 32Gi}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 4, pdb: {minAvailable: 2}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_missing_pod_or_a_stale_uid_when_evicting_then_404_or_409_only_after_the_budget_is_consulted()
 {
    let sim = TestSim::start(WEB_MIN_2_OF_4).await;
    wait_budget(&sim, "shop", "web", "a processed budget", |b| {
        pdb_counts(b) == (4, 2, 4, 2)
    })
    .await;
    let pods = wait_ready_pods(&sim, "shop", "web", 4).await;

    let err = api_error(sim.evict("shop", "no-such-pod").await);
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    assert_eq!(err.message, "pods \"no-such-pod\" not found");

    // A stale UID: 409 Conflict, the pod stays, but (as in eviction.go, where the delete checks
    // its preconditions after the budget was decremented) one disruption is spent on it.
    let stale = "00000000-0000-0000-0000-000000000000";
    let a = &pods[0];
    let err = api_error(sim.evict_with("shop", &name(a), Some(stale)).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(err.message.contains(stale), "{}", err.message);
    let still = sim.pods("shop").get(&name(a)).await.unwrap();
    assert!(!is_terminating(&still));
    assert_eq!(still.resource_version(), a.resource_version());
    let b = sim.pdbs("shop").get("web").await.unwrap();
    assert_eq!(b.status.as_ref().unwrap().disruptions_allowed, 1);
    assert_eq!(disrupted_pods(&b), vec![name(a)]);

    // The right UID goes through and takes the last disruption.
    sim.pause(true).await;
    let st = sim
        .evict_with("shop", &name(&pods[1]), Some(&uid(&pods[1])))
        .await
        .expect("eviction with the right uid");
    assert_eq!(st.status, Some(StatusSummary::Success));
    // With nothing left, a stale UID meets the budget first: 429, not 409.
    let err = api_error(sim.evict_with("shop", &name(&pods[2]), Some(stale)).await);
    assert_eq!(err.code, 429);
    assert_eq!(
        err.details.as_ref().unwrap().causes[0].reason,
        "DisruptionBudget"
    );
    assert!(!is_terminating(
        &sim.pods("shop").get(&name(&pods[2])).await.unwrap()
    ));
    sim.pause(false).await;

    let stats = sim.admin_get("stats").await;
    assert_eq!(stats["evictions"]["not-found"], 1);
    assert_eq!(stats["evictions"]["conflict"], 1);
    assert_eq!(stats["evictions"]["success"], 1);
    assert_eq!(stats["evictions"]["budget"], 1);
    assert_eq!(budget_violations(&stats), 0);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_pending_pod_whose_budget_allows_zero_when_evicting_then_it_is_deleted_at_once() {
    let sim = TestSim::start(WEB_MIN_3_OF_4).await;
    let hog: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hog", "labels": {"app": "hog"}},
        "spec": {"containers": [{"name": "c", "image": "registry.example.com/hog:1",
                 "resources": {"requests": {"cpu": "500"}}}]},
    }))
    .unwrap();
    sim.pods("shop")
        .create(&PostParams::default(), &hog)
        .await
        .unwrap();
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "hog"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "hog"}}},
    }))
    .unwrap();
    sim.pdbs("shop")
        .create(&PostParams::default(), &budget)
        .await
        .unwrap();
    // The pod fits no node; its budget is processed and allows nothing.
    let pending = wait_until("hog to be marked unschedulable", WAIT, || async {
        let p = sim.pods("shop").get("hog").await.unwrap();
        unschedulable(&p).then_some(p)
    })
    .await;
    assert_eq!(phase(&pending), "Pending");
    assert_eq!(node_of(&pending), None);
    let b = wait_budget(&sim, "shop", "hog", "hog's budget processed", |_| true).await;
    assert_eq!(pdb_counts(&b), (0, 1, 1, 0));

    let st = sim
        .evict("shop", "hog")
        .await
        .expect("pending pods bypass budgets");
    assert_eq!(st.status, Some(StatusSummary::Success));
    // Never scheduled: no grace period, gone immediately.
    assert!(pod_gone(&sim.pods("shop"), "hog").await);
    let stats = sim.admin_get("stats").await;
    assert_eq!(stats["evictions"]["bypass"], 1);
    assert_eq!(budget_violations(&stats), 0);
    sim.stop().await;
}

/// Three Deployments of 3 Ready pods plus one extra pod each that starts but never turns Ready:
/// `strict` and `lenient` budgets need 4 healthy (unhealthy budgets, 0 allowed), `lenient` with
/// AlwaysAllow; `healthy` needs 3 and has 3 (a healthy budget, still 0 allowed).
const NOT_READY: &str = r#"
nodeGroups:
  - name: general
    size: 3
    template: {cpu: "8", memory: 32Gi}
workloads:
  - {kind: Deployment, name: strict, namespace: shop, replicas: 3, pdb: {minAvailable: 4}}
  - {kind: Deployment, name: lenient, namespace: shop, replicas: 3,
     pdb: {minAvailable: 4, unhealthyPodEvictionPolicy: AlwaysAllow}}
  - {kind: Deployment, name: healthy, namespace: shop, replicas: 3, pdb: {minAvailable: 3}}
"#;

fn slow_pod(app: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("{app}-slow"), "labels": {"app": app},
                     "annotations": {"sim.rotor.dev/startup": "1h"}},
        "spec": {"containers": [{"name": "c", "image": "registry.example.com/slow:1"}]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_running_pod_that_is_not_ready_when_evicting_then_always_allow_or_a_healthy_budget_lets_it_go_without_consuming()
 {
    let sim = TestSim::start(NOT_READY).await;
    for app in ["strict", "lenient", "healthy"] {
        sim.pods("shop")
            .create(&PostParams::default(), &slow_pod(app))
            .await
            .unwrap();
    }
    for app in ["strict", "lenient", "healthy"] {
        let slow = format!("{app}-slow");
        wait_until(&format!("{slow} running"), WAIT, || async {
            let p = sim.pods("shop").get(&slow).await.unwrap();
            (phase(&p) == "Running").then_some(())
        })
        .await;
    }
    let strict = wait_budget(&sim, "shop", "strict", "strict counts the slow pod", |b| {
        pdb_counts(b).2 == 4
    })
    .await;
    assert_eq!(pdb_counts(&strict), (3, 4, 4, 0));
    let lenient = wait_budget(
        &sim,
        "shop",
        "lenient",
        "lenient counts the slow pod",
        |b| pdb_counts(b).2 == 4,
    )
    .await;
    assert_eq!(pdb_counts(&lenient), (3, 4, 4, 0));
    let healthy = wait_budget(
        &sim,
        "shop",
        "healthy",
        "healthy counts the slow pod",
        |b| pdb_counts(b).2 == 4,
    )
    .await;
    assert_eq!(pdb_counts(&healthy), (3, 3, 4, 0));
    assert!(!is_ready(
        &sim.pods("shop").get("strict-slow").await.unwrap()
    ));

    sim.pause(true).await;
    // IfHealthyBudget (the default) with an unhealthy budget: refused like any other pod.
    let err = api_error(sim.evict("shop", "strict-slow").await);
    assert_eq!(err.code, 429);
    assert_eq!(
        err.details.as_ref().unwrap().causes[0].reason,
        "DisruptionBudget"
    );

    // AlwaysAllow with a stale UID: the delete's resourceVersion guard turns the conflict into
    // eviction.go's "still being processed" 429.
    let err = api_error(
        sim.evict_with(
            "shop",
            "lenient-slow",
            Some("00000000-0000-0000-0000-000000000000"),
        )
        .await,
    );
    assert_eq!(err.code, 429);
    let details = err.details.as_ref().unwrap();
    assert_eq!(details.retry_after_seconds, 10);
    assert_eq!(
        details.causes[0].message,
        "The disruption budget lenient is still being processed by the server."
    );

    // AlwaysAllow: the not-Ready pod goes, and the budget object is not even written.
    let st = sim
        .evict("shop", "lenient-slow")
        .await
        .expect("AlwaysAllow");
    assert_eq!(st.status, Some(StatusSummary::Success));
    let b = sim.pdbs("shop").get("lenient").await.unwrap();
    assert_eq!(b.resource_version(), lenient.resource_version());
    assert!(disrupted_pods(&b).is_empty());

    // A healthy budget lets a not-Ready pod go too, without consuming anything.
    let st = sim
        .evict("shop", "healthy-slow")
        .await
        .expect("healthy budget");
    assert_eq!(st.status, Some(StatusSummary::Success));
    let b = sim.pdbs("shop").get("healthy").await.unwrap();
    assert_eq!(b.resource_version(), healthy.resource_version());

    for gone in ["lenient-slow", "healthy-slow"] {
        assert!(is_terminating(&sim.pods("shop").get(gone).await.unwrap()));
    }
    sim.pause(false).await;
    for gone in ["lenient-slow", "healthy-slow"] {
        wait_until(&format!("{gone} gone"), WAIT, || async {
            pod_gone(&sim.pods("shop"), gone).await.then_some(())
        })
        .await;
    }
    let stats = sim.admin_get("stats").await;
    assert_eq!(stats["evictions"]["unhealthy-allowed"], 2);
    assert_eq!(stats["evictions"]["budget"], 1);
    assert_eq!(stats["evictions"]["budget-unprocessed"], 1);
    assert_eq!(budget_violations(&stats), 0);
    sim.stop().await;
}

/// As `WEB_MIN_3_OF_4`, with pods that take 400ms to turn Ready: a replacement keeps the budget
/// at zero long enough for the next eviction to be refused.
const WEB_MIN_3_OF_4_SLOW_START: &str = r#"
nodeGroups:
  - name: general
    size: 3
    template: {cpu: "8", memory: 32Gi}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 4, startup: 400ms,
     pdb: {minAvailable: 3}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_budget_allowing_one_when_every_pod_is_evicted_in_turn_with_retries_then_no_violation_and_full_health()
 {
    let sim = TestSim::start(WEB_MIN_3_OF_4_SLOW_START).await;
    let originals = wait_ready_pods(&sim, "shop", "web", 4).await;
    let pods = sim.pods("shop");
    let refusals = std::cell::Cell::new(0);
    for victim in &originals {
        // Retry on 429 as a drainer does, until the budget has room again.
        wait_until(&format!("{} evicted", name(victim)), WAIT, || async {
            match sim.evict("shop", &name(victim)).await {
                Ok(st) => {
                    assert_eq!(st.status, Some(StatusSummary::Success));
                    Some(())
                }
                Err(kube::Error::Api(s)) if s.code == 429 => {
                    assert_eq!(
                        s.details.as_ref().unwrap().causes[0].reason,
                        "DisruptionBudget"
                    );
                    refusals.set(refusals.get() + 1);
                    None
                }
                Err(e) => panic!("unexpected eviction error: {e}"),
            }
        })
        .await;
    }
    // Each eviction after the first had to wait for the previous replacement to turn Ready.
    assert!(refusals.get() >= 3, "only {} refusals", refusals.get());
    for victim in &originals {
        wait_until("the evicted pod to go", WAIT, || async {
            pod_gone(&pods, &name(victim)).await.then_some(())
        })
        .await;
    }
    let now = wait_ready_pods(&sim, "shop", "web", 4).await;
    assert!(
        now.iter()
            .all(|p| originals.iter().all(|o| uid(o) != uid(p)))
    );
    let b = wait_budget(&sim, "shop", "web", "full health", |b| pdb_counts(b).0 == 4).await;
    assert_eq!(pdb_counts(&b), (4, 3, 4, 1));
    let stats = sim.admin_get("stats").await;
    assert_eq!(stats["evictions"]["success"], 4);
    assert_eq!(stats["evictions"]["budget"], refusals.get());
    assert_eq!(budget_violations(&stats), 0);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_budget_allowing_zero_when_a_healthy_pod_is_deleted_directly_then_one_violation_is_counted()
 {
    let sim = TestSim::start(WEB_MIN_3_OF_3).await;
    wait_budget(&sim, "shop", "web", "a processed budget", |b| {
        pdb_counts(b) == (3, 3, 3, 0)
    })
    .await;
    let pods = wait_ready_pods(&sim, "shop", "web", 3).await;
    sim.admin_post("stats/reset", None).await;

    // Evictions are refused and never count.
    let err = api_error(sim.evict("shop", &name(&pods[0])).await);
    assert_eq!(err.code, 429);
    assert_eq!(budget_violations(&sim.admin_get("stats").await), 0);

    // A direct DELETE bypasses the budget: counted once, naming the budget and the pod.
    sim.pods("shop")
        .delete(&name(&pods[1]), &DeleteParams::default())
        .await
        .unwrap();
    let stats = sim.admin_get("stats").await;
    assert_eq!(budget_violations(&stats), 1);
    let v = &stats["budgetViolationList"][0];
    assert_eq!(v["namespace"], "shop");
    assert_eq!(v["pdb"], "web");
    assert_eq!(v["pod"], name(&pods[1]).as_str());
    assert_eq!(v["via"], "delete");
    assert_eq!(v["healthyAfter"], 2);
    assert_eq!(v["desiredHealthy"], 3);

    // Deleting the already-terminating pod again does not count twice.
    let _ = sim
        .pods("shop")
        .delete(&name(&pods[1]), &DeleteParams::default())
        .await;
    assert_eq!(budget_violations(&sim.admin_get("stats").await), 1);

    // Once the replacement is Ready, the budget is back at 3 healthy and still allows nothing.
    wait_ready_pods(&sim, "shop", "web", 3).await;
    let b = wait_budget(&sim, "shop", "web", "full health", |b| pdb_counts(b).0 == 3).await;
    assert_eq!(pdb_counts(&b), (3, 3, 3, 0));
    let err = api_error(sim.evict("shop", &name(&pods[2])).await);
    assert_eq!(err.code, 429);
    let stats = sim.admin_get("stats").await;
    assert_eq!(budget_violations(&stats), 1);
    assert_eq!(stats["evictions"]["budget"], 2);
    sim.stop().await;
}

const TWO_NAMESPACES: &str = r#"
nodeGroups:
  - name: general
    size: 3
    template: {cpu: "8", memory: 32Gi}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 3}
  - {kind: Deployment, name: api, namespace: back, replicas: 2}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_budget_with_an_empty_selector_when_evicting_then_it_guards_every_pod_of_its_namespace_while_a_null_selector_guards_none()
 {
    let sim = TestSim::start(TWO_NAMESPACES).await;
    // An empty ({}) selector covers every pod of the namespace, for the budget's status and for
    // evictions alike (the 1.36 API server refuses the eviction: tests/tests/real_hostile.rs).
    let everything: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "everything"},
        "spec": {"minAvailable": 3, "selector": {}},
    }))
    .unwrap();
    sim.pdbs("shop")
        .create(&PostParams::default(), &everything)
        .await
        .unwrap();
    let unselective: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "unselective"},
        "spec": {"minAvailable": 2},
    }))
    .unwrap();
    sim.pdbs("back")
        .create(&PostParams::default(), &unselective)
        .await
        .unwrap();
    let b = wait_budget(&sim, "shop", "everything", "the empty selector", |_| true).await;
    assert_eq!(pdb_counts(&b), (3, 3, 3, 0));
    let b = wait_budget(&sim, "back", "unselective", "the null selector", |_| true).await;
    assert_eq!(pdb_counts(&b), (0, 2, 0, 0));

    let web = wait_ready_pods(&sim, "shop", "web", 3).await;
    // The budget with an empty selector guards web.
    let err = api_error(sim.evict("shop", &name(&web[0])).await);
    assert_eq!((err.code, err.reason.as_str()), (429, "TooManyRequests"));

    let api = wait_ready_pods(&sim, "back", "api", 2).await;
    let st = sim
        .evict("back", &name(&api[0]))
        .await
        .expect("no budget covers api");
    assert_eq!(st.status, Some(StatusSummary::Success));
    let stats = sim.admin_get("stats").await;
    assert_eq!(stats["evictions"]["bypass"], 1);
    assert_eq!(stats["budgetViolations"], 0);
    sim.stop().await;
}
