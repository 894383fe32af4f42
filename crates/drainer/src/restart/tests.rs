use super::*;
use serde_json::json;

/// A Deployment as the API server returns it: defaults filled in (RollingUpdate, 25%/25%),
/// observed by its controller, at revision 3.
fn deployment(replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "solo", "namespace": "shop", "generation": 4,
                     "resourceVersion": "8812",
                     "annotations": {"deployment.kubernetes.io/revision": "3"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "solo"}},
                 "strategy": {"type": "RollingUpdate",
                              "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                 "template": {"metadata": {"labels": {"app": "solo"}},
                              "spec": {"containers": [{"name": "app", "image": "app:1"}]}}},
        "status": {"observedGeneration": 4, "replicas": replicas, "readyReplicas": replicas}
    })
}

/// Its current ReplicaSet (revision 3), one pod wanted.
fn replicaset(revision: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "solo-7d9f8", "namespace": "shop",
                     "annotations": {"deployment.kubernetes.io/revision": revision},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                          "name": "solo", "uid": "d-1", "controller": true}]},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "solo"}}}
    })
}

fn judged(rs: Value, d: Value) -> Judgement {
    judge(
        &serde_json::from_value(rs).unwrap(),
        &serde_json::from_value(d).unwrap(),
    )
}

fn with_strategy(strategy: Value) -> Value {
    let mut d = deployment(1);
    d["spec"]["strategy"] = strategy;
    d
}

#[test]
fn the_default_strategy_restarts_a_lone_replica_guarded_by_its_version() {
    assert_eq!(
        judged(replicaset("3", 1), deployment(1)),
        Judgement::Restart {
            resource_version: "8812".into()
        }
    );
    // Written without a rollingUpdate block, the defaults apply too.
    assert_eq!(
        judged(
            replicaset("3", 1),
            with_strategy(json!({"type": "RollingUpdate"}))
        ),
        Judgement::Restart {
            resource_version: "8812".into()
        }
    );
}

#[test]
fn more_than_one_replica_is_left_to_eviction_and_its_budget() {
    assert_eq!(
        judged(replicaset("3", 2), deployment(2)),
        Judgement::NotLone
    );
    assert_eq!(
        judged(replicaset("3", 1), deployment(0)),
        Judgement::NotLone
    );
}

#[test]
fn a_strategy_that_would_stop_the_pod_first_is_refused_saying_which_field() {
    let refused = |strategy: Value| match judged(replicaset("3", 1), with_strategy(strategy)) {
        Judgement::Refused(r) => r,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(refused(json!({"type": "Recreate"})), Refusal::Recreate);
    // maxUnavailable 1 (or 100%) lets the controller scale the old pod down at once.
    let stops = refused(json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}));
    assert_eq!(stops, Refusal::StopsFirst("1".into()));
    assert!(stops.to_string().contains("maxUnavailable 1"), "{stops}");
    assert_eq!(
        refused(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": "100%"}})),
        Refusal::StopsFirst("100%".into())
    );
    // No surge at all: the old pod must go before a new one exists.
    assert_eq!(
        refused(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}})),
        Refusal::NoSurge("0".into())
    );
    assert_eq!(
        refused(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "x", "maxUnavailable": 0}})),
        Refusal::Unreadable {
            field: "maxSurge",
            value: "x".into()
        }
    );
    let mut paused = deployment(1);
    paused["spec"]["paused"] = json!(true);
    assert_eq!(
        judged(replicaset("3", 1), paused),
        Judgement::Refused(Refusal::Paused)
    );
}

#[test]
fn percentages_round_as_the_deployment_controller_rounds_them_for_one_replica() {
    // 1% surge rounds up to one pod; 99% unavailable rounds down to none.
    assert!(matches!(
        judged(
            replicaset("3", 1),
            with_strategy(json!({"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "1%", "maxUnavailable": "99%"}}))
        ),
        Judgement::Restart { .. }
    ));
    assert_eq!(
        for_one_replica(Some(&IntOrString::String("0%".into())), "maxSurge", true),
        Ok(0)
    );
    assert_eq!(for_one_replica(None, "maxUnavailable", false), Ok(0));
    assert_eq!(for_one_replica(None, "maxSurge", true), Ok(1));
}

#[test]
fn an_older_replicaset_is_already_being_rolled_out_and_an_unobserved_change_waits() {
    // Revision 2 under a Deployment at 3: a rollout (an earlier leader's restart, or anyone's)
    // replaces the pod already; a second stamp would only start another.
    assert_eq!(
        judged(replicaset("2", 1), deployment(1)),
        Judgement::RollingOut
    );
    // The Deployment changed and its controller has not seen it yet.
    let mut unobserved = deployment(1);
    unobserved["metadata"]["generation"] = json!(5);
    assert_eq!(judged(replicaset("3", 1), unobserved), Judgement::Unsettled);
    // No revision written yet.
    let mut fresh = deployment(1);
    fresh["metadata"]["annotations"] = json!({});
    assert_eq!(judged(replicaset("3", 1), fresh), Judgement::Unsettled);
}

#[test]
fn only_a_replicaset_wanting_at_most_one_pod_leads_to_its_deployment() {
    let rs: ReplicaSet = serde_json::from_value(replicaset("3", 1)).unwrap();
    assert_eq!(lone_deployment_of(&rs), Some("solo"));
    let rs: ReplicaSet = serde_json::from_value(replicaset("3", 3)).unwrap();
    assert_eq!(lone_deployment_of(&rs), None);
    let mut bare = replicaset("3", 1);
    bare["metadata"]["ownerReferences"] = json!([]);
    let rs: ReplicaSet = serde_json::from_value(bare).unwrap();
    assert_eq!(lone_deployment_of(&rs), None);
}

#[test]
fn the_patch_stamps_the_template_on_the_judged_version() {
    let at: Timestamp = "2026-11-26T17:00:00Z".parse().unwrap();
    let patch = restart_patch("8812", at);
    assert_eq!(patch["metadata"]["resourceVersion"], "8812");
    assert_eq!(
        patch["spec"]["template"]["metadata"]["annotations"]["rotor.dev/restarted-at"],
        "2026-11-26T17:00:00Z"
    );
}

fn pod(name: &str, owner: Option<&str>) -> Pod {
    let owners = owner.map_or(json!([]), |rs| {
        json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                "uid": "rs-1", "controller": true}])
    });
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"),
                     "ownerReferences": owners},
        "spec": {"nodeName": "old-1", "containers": [{"name": "app", "image": "app:1"}]}
    }))
    .unwrap()
}

#[test]
fn each_pod_is_looked_up_once_unless_it_must_be_looked_at_again() {
    let now: Timestamp = "2026-11-26T17:00:00Z".parse().unwrap();
    let pods = vec![
        pod("solo-1", Some("solo-7d9f8")),
        pod("web-1", Some("web-5c4b")),
        pod("bare", None),
        pod("kept", Some("kept-1")),
    ];
    let mut restarts = RolloutRestarts::default();
    let names = |found: Vec<&Pod>| -> Vec<String> {
        found
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    };
    let evictable = |p: &Pod| p.metadata.name.as_deref() != Some("kept");
    // A bare pod has no Deployment; a pod the drain would not evict is not restarted either.
    assert_eq!(
        names(restarts.to_look_up(&pods, now, evictable)),
        ["solo-1", "web-1"]
    );
    restarts.decide(
        PodRef::of(&pods[0]),
        PodRestart::Replacing {
            deployment: "shop/solo".into(),
        },
    );
    restarts.decide(
        PodRef::of(&pods[1]),
        look_again(now, FAILED_RETRY, Some("reading failed".into())),
    );
    assert!(restarts.to_look_up(&pods, now, evictable).is_empty());
    assert!(restarts.withheld(&pods[0]) && restarts.withheld(&pods[1]));
    assert!(!restarts.withheld(&pods[2]));
    assert!(restarts.withholds_any());
    assert_eq!(restarts.failures(), ["pod shop/web-1: reading failed"]);
    assert_eq!(restarts.next_look(), Some(later(now, FAILED_RETRY)));
    // Due again after the retry time.
    let due = later(now, FAILED_RETRY);
    assert_eq!(names(restarts.to_look_up(&pods, due, evictable)), ["web-1"]);
    restarts.decide(PodRef::of(&pods[1]), PodRestart::Evict);
    assert!(!restarts.withheld(&pods[1]));
    assert!(restarts.withholds_any(), "solo-1 is still being replaced");
    // The replaced pod leaves the node: nothing waits any more.
    restarts.keep_only(&pods[1..]);
    assert!(!restarts.withholds_any());
    assert!(restarts.failures().is_empty());
}
