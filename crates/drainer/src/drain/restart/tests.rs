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
    // A ReplicaSet newer than the Deployment's revision as read: the reads crossed a change.
    assert_eq!(
        judged(replicaset("4", 1), deployment(1)),
        Judgement::Unsettled
    );
    // No resourceVersion to guard the patch with.
    let mut unversioned = deployment(1);
    unversioned["metadata"]["resourceVersion"] = Value::Null;
    assert_eq!(
        judged(replicaset("3", 1), unversioned),
        Judgement::Unsettled
    );
}

#[test]
fn a_pod_of_the_newest_replicaset_waits_while_older_pods_remain() {
    // Mid-rollout: the pod is of the newest ReplicaSet (revision 3) but the old pod is still
    // there (status.replicas 2). A stamp now would start a rollout on top of this one.
    let mut rolling = deployment(1);
    rolling["status"]["replicas"] = json!(2);
    rolling["status"]["updatedReplicas"] = json!(1);
    assert_eq!(judged(replicaset("3", 1), rolling), Judgement::Unsettled);
}

#[test]
fn a_stalled_rollout_is_neither_waited_for_nor_restarted() {
    let mut stalled = deployment(1);
    stalled["status"]["conditions"] = json!([
        {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
         "message": "ReplicaSet \"solo-5f6d\" has timed out progressing."}
    ]);
    // Whether the pod is the old one or the current one.
    for rs in [replicaset("2", 1), replicaset("3", 1)] {
        assert_eq!(
            judged(rs, stalled.clone()),
            Judgement::Refused(Refusal::RolloutStalled("ProgressDeadlineExceeded".into()))
        );
    }
    // Progressing=True (NewReplicaSetAvailable) is the normal state.
    let mut fine = deployment(1);
    fine["status"]["conditions"] = json!([
        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}
    ]);
    assert!(matches!(
        judged(replicaset("3", 1), fine),
        Judgement::Restart { .. }
    ));
}

#[test]
fn integer_fields_are_taken_as_they_are() {
    assert!(matches!(
        judged(
            replicaset("3", 1),
            with_strategy(json!({"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 0}}))
        ),
        Judgement::Restart { .. }
    ));
    // 0% and 0%: the API server refuses that pair, but read as written it surges nothing.
    assert_eq!(
        judged(
            replicaset("3", 1),
            with_strategy(json!({"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "0%", "maxUnavailable": "0%"}}))
        ),
        Judgement::Refused(Refusal::NoSurge("0%".into()))
    );
}

#[test]
fn only_a_replicaset_wanting_at_most_one_pod_leads_to_its_deployment() {
    let rs: ReplicaSet = serde_json::from_value(replicaset("3", 1)).unwrap();
    assert_eq!(lone_deployment_of(&rs), Some("solo"));
    let rs: ReplicaSet = serde_json::from_value(replicaset("3", 3)).unwrap();
    assert_eq!(lone_deployment_of(&rs), None);
    // An old ReplicaSet scaled to zero still leads to its Deployment (its pod may be there
    // until it terminates).
    let rs: ReplicaSet = serde_json::from_value(replicaset("2", 0)).unwrap();
    assert_eq!(lone_deployment_of(&rs), Some("solo"));
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

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"),
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": "solo-7d9f8", "uid": "rs-1",
                                          "controller": true}]},
        "spec": {"nodeName": "old-1", "containers": [{"name": "app", "image": "app:1"}]}
    }))
    .unwrap()
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const SOLO: &str = "shop/solo";

#[test]
fn a_lone_replica_is_stamped_once_then_withheld_until_it_goes() {
    let now = at("2026-11-26T17:00:00Z");
    let solo = pod("solo-1");
    let uid = "uid-solo-1";
    let mut restarts = RolloutRestarts::default();
    assert!(restarts.due(uid, now) && !restarts.withheld(uid));
    let next = restarts.judged(
        PodRef::of(&solo),
        SOLO,
        Judgement::Restart {
            resource_version: "8812".into(),
        },
        now,
    );
    assert_eq!(
        next,
        Next::Stamp {
            resource_version: "8812".into()
        }
    );
    // Withheld while the patch is in flight.
    assert!(restarts.withheld(uid));
    let news = restarts.stamp_answered(uid, SOLO, StampAnswer::Stamped, now);
    assert_eq!(
        news,
        Some(News::Restarted {
            deployment: SOLO.into()
        })
    );
    assert!(restarts.withheld(uid));
    // Judged again only after RECHECK, and a rollout under way is said only once.
    assert!(!restarts.due(uid, later(now, secs(5))));
    let recheck = later(now, RECHECK);
    assert_eq!(restarts.next_look(now), Some(recheck));
    // Its time gone and the pod not looked at (it left the plan): no wake at once, again and
    // again.
    assert_eq!(restarts.next_look(recheck), None);
    assert!(restarts.due(uid, recheck));
    assert_eq!(
        restarts.judged(PodRef::of(&solo), SOLO, Judgement::RollingOut, recheck),
        Next::Tell(None)
    );
    assert!(restarts.withheld(uid));
    // The pod terminates: nothing is left to decide about it.
    let mut going = solo.clone();
    going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        recheck,
    ));
    restarts.keep_only(&[going]);
    assert!(!restarts.withheld(uid));
    assert_eq!(restarts.next_look(now), None);
}

#[test]
fn a_restart_undone_or_a_stalled_rollout_falls_back_to_eviction_saying_why() {
    let now = at("2026-11-26T17:00:00Z");
    let solo = pod("solo-1");
    let uid = "uid-solo-1";
    let restart = || Judgement::Restart {
        resource_version: "9001".into(),
    };
    let mut restarts = RolloutRestarts::default();
    restarts.judged(PodRef::of(&solo), SOLO, restart(), now);
    restarts.stamp_answered(uid, SOLO, StampAnswer::Stamped, now);
    // Later the pod's ReplicaSet is the newest again and would be stamped: someone reverted
    // the template. Stamping again would fight them; evict instead.
    let next = restarts.judged(PodRef::of(&solo), SOLO, restart(), later(now, RECHECK));
    assert_eq!(
        next,
        Next::Tell(Some(News::Refused {
            deployment: SOLO.into(),
            refusal: Refusal::RestartUndone
        }))
    );
    assert!(!restarts.withheld(uid));
    assert!(
        !restarts.due(uid, later(now, secs(3_600))),
        "decided for good"
    );

    // A rollout found under way is said once, and evicted from when it stalls.
    let other = pod("other-1");
    let mut restarts = RolloutRestarts::default();
    let found = restarts.judged(PodRef::of(&other), SOLO, Judgement::RollingOut, now);
    assert_eq!(
        found,
        Next::Tell(Some(News::RollingOut {
            deployment: SOLO.into()
        }))
    );
    let stalled = Refusal::RolloutStalled("ProgressDeadlineExceeded".into());
    let next = restarts.judged(
        PodRef::of(&other),
        SOLO,
        Judgement::Refused(stalled.clone()),
        later(now, RECHECK),
    );
    assert_eq!(
        next,
        Next::Tell(Some(News::Refused {
            deployment: SOLO.into(),
            refusal: stalled
        }))
    );
    assert!(!restarts.withheld("uid-other-1"));
}

#[test]
fn the_patchs_answers_decide_what_comes_next() {
    let now = at("2026-11-26T17:00:00Z");
    let solo = pod("solo-1");
    let uid = "uid-solo-1";
    let stamp = |restarts: &mut RolloutRestarts, answer| {
        restarts.judged(
            PodRef::of(&solo),
            SOLO,
            Judgement::Restart {
                resource_version: "1".into(),
            },
            now,
        );
        restarts.stamp_answered(uid, SOLO, answer, now)
    };
    // 409: judged again soon, nothing said.
    let mut restarts = RolloutRestarts::default();
    assert_eq!(stamp(&mut restarts, StampAnswer::Changed), None);
    assert!(restarts.withheld(uid));
    assert_eq!(restarts.next_look(now), Some(later(now, UNSETTLED_RETRY)));
    // An admission webhook's refusal will not pass by waiting: evict, saying so.
    let mut restarts = RolloutRestarts::default();
    let refused = stamp(&mut restarts, StampAnswer::Refused("denied".into()));
    assert!(matches!(
        refused,
        Some(News::Refused {
            refusal: Refusal::PatchRefused(_),
            ..
        })
    ));
    assert!(!restarts.withheld(uid));
    // RBAC: withheld, the failure is the node's blocker, tried again after FAILED_RETRY.
    let mut restarts = RolloutRestarts::default();
    let failed = stamp(&mut restarts, StampAnswer::Failed("forbidden".into()));
    assert_eq!(
        failed,
        Some(News::Failed {
            failure: "forbidden".into()
        })
    );
    assert!(restarts.withheld(uid));
    assert_eq!(restarts.failures(), ["pod shop/solo-1: forbidden"]);
    assert_eq!(restarts.next_look(now), Some(later(now, FAILED_RETRY)));
}

#[test]
fn a_deployment_that_stays_unsettled_becomes_the_nodes_blocker() {
    let now = at("2026-11-26T17:00:00Z");
    let solo = pod("solo-1");
    let mut restarts = RolloutRestarts::default();
    let mut t = now;
    while t < later(now, UNSETTLED_LIMIT) {
        restarts.judged(PodRef::of(&solo), SOLO, Judgement::Unsettled, t);
        assert!(restarts.failures().is_empty(), "quiet at {t}");
        t = later(t, UNSETTLED_RETRY);
    }
    restarts.judged(PodRef::of(&solo), SOLO, Judgement::Unsettled, t);
    let failures = restarts.failures();
    assert_eq!(failures.len(), 1);
    assert!(
        failures[0].contains("shop/solo") && failures[0].contains("has not settled for 120s"),
        "{failures:?}"
    );
    // Settled at last: the wait starts afresh.
    restarts.judged(PodRef::of(&solo), SOLO, Judgement::RollingOut, t);
    restarts.judged(
        PodRef::of(&solo),
        SOLO,
        Judgement::Unsettled,
        later(t, secs(1)),
    );
    assert!(restarts.failures().is_empty());
}

#[test]
fn a_read_that_fails_withholds_the_pod_and_an_owner_gone_evicts_it() {
    let now = at("2026-11-26T17:00:00Z");
    let solo = pod("solo-1");
    let mut restarts = RolloutRestarts::default();
    restarts.read_failed(PodRef::of(&solo), "reading failed".into(), now);
    assert!(restarts.withheld("uid-solo-1"));
    assert!(!restarts.due("uid-solo-1", now));
    assert!(restarts.due("uid-solo-1", later(now, FAILED_RETRY)));
    restarts.not_lone(PodRef::of(&solo));
    assert!(!restarts.withheld("uid-solo-1"));
    assert!(restarts.failures().is_empty());
}
