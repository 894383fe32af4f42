use std::collections::BTreeSet;

use super::*;
use serde_json::json;

pub(crate) fn drain_taint() -> Taint {
    Taint {
        key: rotor_core::contract::DRAIN_TAINT_KEY.into(),
        value: Some("image-drift".into()),
        effect: "NoSchedule".into(),
        ..Taint::default()
    }
}

pub(crate) fn node(name: &str) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "uid": "node-uid-1"}})).unwrap()
}

pub(crate) fn cfg() -> SurgeConfig {
    SurgeConfig {
        namespace: "rotor-system".into(),
        priority_class: "rotor-surge".into(),
        image: "registry.k8s.io/pause:3.10".into(),
        timeout: Duration::from_secs(300),
        max_surge: None,
    }
}

/// A pod of `owner_kind` (none: a bare pod) on node n1, with `spec` merged in.
fn pod(name: &str, owner_kind: Option<&str>, spec: serde_json::Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "app", "image": "shop", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}]
        },
        "status": {"phase": "Running"}
    });
    if let Some(kind) = owner_kind {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind, "name": "owner", "uid": "o", "controller": true}]);
    }
    if let (Some(into), Some(from)) = (v["spec"].as_object_mut(), spec.as_object()) {
        into.extend(from.clone());
    }
    serde_json::from_value(v).unwrap()
}

/// The placeholder `p` alone gets: its set's pod template as the set's pods have it.
fn placeholder(p: &Pod, node: &Node, taint: &Taint, cfg: &SurgeConfig) -> Option<Pod> {
    let set = placeholder_sets(&[p], node, taint, cfg).pop()?;
    let template = set.spec?.template?;
    let mut metadata = template.metadata.unwrap_or_default();
    metadata.namespace = set.metadata.namespace;
    Some(Pod {
        metadata,
        spec: template.spec,
        status: None,
    })
}

fn names(pods: &[&Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect()
}

#[test]
fn room_is_made_only_for_pods_that_are_evicted_and_come_back() {
    let placeholder = placeholder(
        &pod("web-1", Some("ReplicaSet"), json!({})),
        &node("n0"),
        &drain_taint(),
        &cfg(),
    )
    .unwrap();
    let pods = vec![
        pod("web-1", Some("ReplicaSet"), json!({})),
        pod("db-0", Some("StatefulSet"), json!({})),
        pod("agent", Some("DaemonSet"), json!({})),
        pod("bare", None, json!({})),
        pod(
            "tolerant",
            Some("ReplicaSet"),
            json!({"tolerations": [{"operator": "Exists"}]}),
        ),
        placeholder,
    ];
    let mut opted_out = pod("batch", Some("Job"), json!({}));
    opted_out.metadata.annotations =
        Some([("rotor.dev/do-not-disrupt".to_string(), "true".to_string())].into());
    let mut all = pods;
    all.push(opted_out);
    let needing = pods_needing_room(&all, &drain_taint(), &DrainOptions::default());
    assert_eq!(names(&needing), ["web-1", "db-0"]);
}

#[test]
fn effective_requests_follow_the_schedulers_sum() {
    // Two containers add up; an ordinary init container larger than their sum sets the floor
    // for that resource; a sidecar (init with restartPolicy Always) adds; overhead adds.
    let p = pod(
        "web-1",
        Some("ReplicaSet"),
        json!({
            "initContainers": [
                {"name": "migrate", "resources": {"requests": {"memory": "3Gi"}}},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}
            ],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "0.5", "memory": "512Mi", "nvidia.com/gpu": "1"}}}
            ],
            "overhead": {"cpu": "50m"}
        }),
    );
    let r = effective_requests(&p);
    assert_eq!(r["cpu"], 900, "250m + 500m + 100m sidecar + 50m overhead");
    assert_eq!(
        r["memory"],
        3 * 1024 * 1024 * 1024 * 1000,
        "the init container's 3Gi beats 1.5Gi"
    );
    assert_eq!(r["nvidia.com/gpu"], 1000);
    assert!(
        effective_requests(&pod(
            "idle",
            Some("ReplicaSet"),
            json!({"containers": [{"name": "x"}]})
        ))
        .is_empty()
    );
}

#[test]
fn a_placeholder_reserves_the_pods_requests_at_rotors_priority_owned_by_the_node() {
    let p = pod(
        "web-1",
        Some("ReplicaSet"),
        json!({"nodeSelector": {"pool": "general"}}),
    );
    let set = placeholder_sets(&[&p], &node("n1"), &drain_taint(), &cfg()).remove(0);
    let set = serde_json::to_value(&set).unwrap();
    assert_eq!(set["metadata"]["namespace"], "rotor-system");
    assert_eq!(set["metadata"]["annotations"][SURGE_NODE_ANNOTATION], "n1");
    assert_eq!(
        set["metadata"]["annotations"][SURGE_PODS_ANNOTATION],
        "shop/web-1"
    );
    assert_eq!(
        set["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid-1", "controller": true}])
    );
    assert_eq!(set["spec"]["replicas"], 1);
    let ph = placeholder(&p, &node("n1"), &drain_taint(), &cfg()).unwrap();
    let v = serde_json::to_value(&ph).unwrap();
    assert_eq!(v["metadata"]["namespace"], "rotor-system");
    assert_eq!(v["metadata"]["labels"][SURGE_FOR_LABEL], "n1");
    assert_eq!(v["metadata"]["labels"][MANAGED_BY_LABEL], "rotor-drainer");
    assert_eq!(v["metadata"]["annotations"][SURGE_NODE_ANNOTATION], "n1");
    assert_eq!(
        set["spec"]["selector"]["matchLabels"], v["metadata"]["labels"],
        "the set's selector is its pods' labels"
    );
    assert_eq!(v["spec"]["priorityClassName"], "rotor-surge");
    assert_eq!(v["spec"]["terminationGracePeriodSeconds"], 0);
    assert_eq!(v["spec"]["nodeSelector"], json!({"pool": "general"}));
    assert_eq!(
        v["spec"]["containers"][0]["resources"],
        json!({"requests": {"cpu": "250m", "memory": "1073741824"}})
    );
    assert_eq!(
        v["spec"]["containers"][0]["image"],
        "registry.k8s.io/pause:3.10"
    );
    assert_eq!(
        v["spec"]["containers"][0]["securityContext"]["runAsNonRoot"],
        true
    );
    assert!(is_placeholder(&ph));
    assert_eq!(placeholder_node(&ph), Some("n1"));
    assert!(!is_placeholder(&p));
    // Nothing requested, nothing to reserve.
    let idle = pod(
        "idle",
        Some("ReplicaSet"),
        json!({"containers": [{"name": "x"}]}),
    );
    assert_eq!(
        placeholder(&idle, &node("n1"), &drain_taint(), &cfg()),
        None
    );
}

#[test]
fn a_placeholder_may_go_where_the_pod_may_kept_off_draining_and_cordoned_nodes_by_their_taints() {
    let p = pod(
        "web-1",
        Some("ReplicaSet"),
        json!({
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
                ]}},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"},
                    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone", "namespaces": ["data"]}
                ]}
            },
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"},
                {"operator": "Exists"},
                {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
                {"key": "rotor.dev/drain", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]
        }),
    );
    let v = serde_json::to_value(placeholder(&p, &node("n1"), &drain_taint(), &cfg()).unwrap())
        .unwrap();
    // The pod's node affinity as it is: nothing names the drained node. Karpenter ignores a
    // pod whose node affinity has a matchFields term or a kubernetes.io/hostname requirement
    // ("node selector term with matchFields is not supported"), and would never add a node.
    let terms = &v["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    assert_eq!(
        *terms,
        json!([
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
        ]),
        "the pod's terms, unchanged"
    );
    let anti =
        &v["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(
        anti[0]["namespaces"],
        json!(["shop"]),
        "a term without namespaces meant the pod's own"
    );
    assert_eq!(anti[1]["namespaces"], json!(["data"]));
    assert_eq!(
        v["spec"]["tolerations"],
        json!([{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}]),
        "tolerations of rotor's taint or of a cordon (wildcards included) are dropped: those \
         taints keep the placeholder off the drained node and every other draining or cordoned one"
    );
    assert!(v["spec"].get("topologySpreadConstraints").is_none());

    // A pod with no affinity gets none: no term Karpenter would refuse.
    let plain = placeholder(
        &pod("api-1", Some("ReplicaSet"), json!({})),
        &node("n1"),
        &drain_taint(),
        &cfg(),
    )
    .unwrap();
    let v = serde_json::to_value(plain).unwrap();
    assert!(v["spec"].get("affinity").is_none(), "{v}");
    assert!(v["spec"].get("tolerations").is_none());
}

#[test]
fn pods_with_the_same_placeholder_share_one_set_of_that_many_replicas() {
    let web = |name: &str| pod(name, Some("ReplicaSet"), json!({}));
    let big = pod(
        "big-1",
        Some("ReplicaSet"),
        json!({"containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}}}]}),
    );
    let mut batch = web("worker-1");
    batch.metadata.namespace = Some("batch".into());
    let pinned = pod(
        "api-1",
        Some("ReplicaSet"),
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "api"}}, "topologyKey": "kubernetes.io/hostname"}
        ]}}}),
    );
    let idle = pod(
        "idle",
        Some("ReplicaSet"),
        json!({"containers": [{"name": "x"}]}),
    );
    let (w1, w2) = (web("web-1"), web("web-2"));
    let pods = [&w1, &big, &batch, &w2, &pinned, &idle];
    let sets = placeholder_sets(&pods, &node("n1"), &drain_taint(), &cfg());
    let members: Vec<(&str, i32)> = sets
        .iter()
        .map(|s| {
            let a = s.metadata.annotations.as_ref().unwrap();
            (
                a[SURGE_PODS_ANNOTATION].as_str(),
                s.spec.as_ref().unwrap().replicas.unwrap(),
            )
        })
        .collect();
    // Another namespace alone changes nothing a placeholder holds; other requests, or
    // anti-affinity (pinned to the pod's namespace), do. A pod requesting nothing needs none.
    assert_eq!(
        members,
        [
            ("shop/web-1,batch/worker-1,shop/web-2", 3),
            ("shop/big-1", 1),
            ("shop/api-1", 1)
        ]
    );
    assert_eq!(placeholders_wanted(&sets), 5);
    let groups: BTreeSet<&String> = sets
        .iter()
        .map(|s| &s.metadata.labels.as_ref().unwrap()[SURGE_GROUP_LABEL])
        .collect();
    assert_eq!(groups.len(), 3, "each set selects its own pods only");
    for set in &sets {
        let spec = set.spec.as_ref().unwrap();
        let template_labels = spec
            .template
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref();
        assert_eq!(spec.selector.match_labels.as_ref(), template_labels);
        let name = set.metadata.name.as_deref().unwrap();
        assert!(name.starts_with("rotor-surge-n1-"), "{name}");
    }
    // Made again from the same pods (ahead of the drain, at its start, after a restart), the
    // sets have the same names: the second create is a 409, not a second set.
    let again = placeholder_sets(&pods, &node("n1"), &drain_taint(), &cfg());
    assert_eq!(
        again.iter().map(|s| &s.metadata.name).collect::<Vec<_>>(),
        sets.iter().map(|s| &s.metadata.name).collect::<Vec<_>>()
    );
}

#[test]
fn placeholder_names_and_labels_are_stable_and_valid_for_any_node_name() {
    let a = placeholder_set_name("ip-10-0-1-23.ec2.internal", "0123456789abcdef");
    assert_eq!(
        a,
        placeholder_set_name("ip-10-0-1-23.ec2.internal", "0123456789abcdef"),
        "the same after a restart"
    );
    // And the same across rotor versions: a drainer upgraded mid-rotation finds the sets its
    // predecessor made (a 409 on create) instead of doubling them. FNV-1a of "node\ngroup".
    assert_eq!(a, "rotor-surge-ip-10-0-1-23.ec2.internal-3cb8b44d1a9f16e8");
    assert_ne!(
        a,
        placeholder_set_name("ip-10-0-1-23.ec2.internal", "fedcba9876543210")
    );
    assert!(
        a.starts_with("rotor-surge-ip-10-0-1-23.ec2.internal-"),
        "{a}"
    );
    let long = format!("{}.compute.internal", "n".repeat(200));
    let name = placeholder_set_name(&long, "0123456789abcdef");
    assert!(name.len() <= 253, "{}", name.len());
    // The start a placeholder pod's name keeps (the API server keeps 58 characters of its
    // generateName, the set's name, before the random suffix) says which node it was made for.
    let start = placeholder_name_start(&long);
    assert!(start.len() <= 58 && name.starts_with(&start), "{start}");
    assert_eq!(
        placeholder_name_start("kwok-rotor-peer-48tmq-legsribbon-2-ytgex6iek1-3303561717"),
        "rotor-surge-kwok-rotor-peer-48tmq-legsribbon-2-ytgex-"
    );
    assert!(
        name.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.".contains(c))
    );

    assert_eq!(
        surge_label_value("ip-10-0-1-23.ec2.internal"),
        "ip-10-0-1-23.ec2.internal"
    );
    let hashed = surge_label_value(&long);
    assert!(
        hashed.len() <= 63 && hashed.starts_with("node-"),
        "{hashed}"
    );
    assert_eq!(hashed, surge_label_value(&long));
    assert_ne!(hashed, surge_label_value(&format!("{long}x")));
    assert_eq!(
        placeholder_selector("n1"),
        "rotor.dev/surge-for=n1,app.kubernetes.io/managed-by=rotor-drainer"
    );
}

#[test]
fn a_reservation_is_complete_when_every_placeholder_left_has_a_node() {
    let ph = |name: &str, node: Option<&str>, deleting: bool| -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "rotor-system"},
            "spec": {"containers": []},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]}
        });
        if let Some(n) = node {
            v["spec"]["nodeName"] = json!(n);
            v["status"] = json!({"phase": "Running"});
        }
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(v).unwrap()
    };
    let r = Reservation::of(
        &[
            ph("a", Some("new-1"), false),
            ph("b", None, false),
            ph("c", None, true),
        ],
        2,
    );
    assert_eq!(r.scheduled, 1);
    assert_eq!(
        r.pending,
        [(
            "rotor-system/b".to_string(),
            Some("0/3 nodes are available: 3 Insufficient cpu.".to_string())
        )]
    );
    assert!(!r.complete());
    assert!(Reservation::of(&[ph("a", Some("new-1"), false), ph("c", None, true)], 1).complete());
    // Placeholders the sets have not made yet are waited for.
    let r = Reservation::of(&[ph("a", Some("new-1"), false)], 3);
    assert_eq!(r.scheduled, 1);
    assert_eq!(
        r.pending,
        [
            (NOT_CREATED.to_string(), None),
            (NOT_CREATED.to_string(), None)
        ]
    );
    assert!(
        Reservation::of(&[], 0).complete(),
        "preempted placeholders are not waited for"
    );
}

#[test]
fn placeholders_of_nodes_no_longer_draining_are_orphans() {
    let p = pod("web-1", Some("ReplicaSet"), json!({}));
    let of = |n: &str| placeholder(&p, &node(n), &drain_taint(), &cfg()).unwrap();
    let mut unnamed = of("n3");
    unnamed.metadata.annotations = None;
    let all = [of("n1"), of("n2"), unnamed];
    let orphans = orphaned(&all, |node| node == "n1");
    let nodes: Vec<_> = orphans.iter().map(|p| placeholder_node(*p)).collect();
    assert_eq!(nodes, [Some("n2"), None]);
}

#[test]
fn max_surge_caps_how_many_nodes_hold_placeholders() {
    assert!(may_surge(None, 50, 10));
    assert!(may_surge(Some(NodeBudget::Count(2)), 1, 10));
    assert!(!may_surge(Some(NodeBudget::Count(2)), 2, 10));
    // 10% of 30 nodes is 3.
    assert!(may_surge(Some(NodeBudget::Percent(10)), 2, 30));
    assert!(!may_surge(Some(NodeBudget::Percent(10)), 3, 30));
}

#[test]
fn room_is_made_ahead_only_where_the_node_keeps_placeholders_off_itself() {
    let with_effect = |effect: &str| Taint {
        effect: effect.into(),
        ..drain_taint()
    };
    let open = node("n1");
    assert!(keeps_placeholders_off(&open, &with_effect("NoSchedule")));
    assert!(keeps_placeholders_off(&open, &with_effect("NoExecute")));
    // A PreferNoSchedule taint lets the scheduler use the node when nothing else fits.
    assert!(!keeps_placeholders_off(
        &open,
        &with_effect("PreferNoSchedule")
    ));
    let mut cordoned = node("n1");
    cordoned.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        unschedulable: Some(true),
        ..Default::default()
    });
    assert!(keeps_placeholders_off(
        &cordoned,
        &with_effect("PreferNoSchedule")
    ));
}

#[test]
fn room_ahead_waits_while_room_changes_hands_and_a_node_that_left_the_line_is_forgotten() {
    let mut queue = AheadQueue::default();
    // Quiet, nothing waiting: made at once.
    assert_eq!(queue.reserve("a".into(), true), Some("a".into()));
    // A drain's room is changing hands: b and c wait, in order, each once.
    assert_eq!(queue.reserve("b".into(), false), None);
    assert_eq!(queue.reserve("c".into(), false), None);
    assert_eq!(queue.reserve("b".into(), false), None);
    // Quiet again, but d does not jump the queue.
    assert_eq!(queue.reserve("d".into(), true), None);
    assert_eq!(queue.due(false), Vec::<String>::new());
    // c left the line before its room was made: nothing to remove, and it is not made later.
    assert!(!queue.release("c"));
    // a's room was made: it must be removed.
    assert!(queue.release("a"));
    // d's drain started: its drain makes its own room.
    queue.started("d");
    assert_eq!(queue.due(true), ["b"]);
    assert_eq!(queue.due(true), Vec::<String>::new());
    assert_eq!(queue.reserve("e".into(), false), None);
    queue.clear();
    assert_eq!(queue.due(true), Vec::<String>::new());
}

/// A placeholder as the watch of rotor's placeholders shows it; `preempted`: with the condition
/// the scheduler sets on a pod it preempts, before it deletes it.
fn watched_placeholder(uid: &str, preempted: bool) -> Pod {
    let mut v = json!({
        "metadata": {
            "name": format!("rotor-surge-n1-{uid}"),
            "namespace": "rotor-system",
            "uid": uid,
            "labels": {"rotor.dev/surge-for": "n1", "app.kubernetes.io/managed-by": "rotor-drainer"},
            "annotations": {SURGE_NODE_ANNOTATION: "n1"}
        },
        "spec": {"nodeName": "n2", "priority": -5, "preemptionPolicy": "Never", "containers": [{"name": "pause", "image": "pause"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"}
        ]}
    });
    if preempted {
        v["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({
                "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                "message": "default-scheduler: preempting to accommodate a higher priority pod",
                "lastTransitionTime": "2026-12-01T10:00:05Z"
            }));
        v["metadata"]["deletionTimestamp"] = json!("2026-12-01T10:00:05Z");
    }
    serde_json::from_value(v).unwrap()
}

#[test]
fn only_the_schedulers_preemption_marks_a_placeholder_preempted() {
    assert!(preempted_by_scheduler(&watched_placeholder("a", true)));
    assert!(!preempted_by_scheduler(&watched_placeholder("a", false)));
    // Evicted (a disruption, not a preemption), or a condition that no longer holds.
    let with_target = |reason: &str, status: &str| {
        let mut pod = watched_placeholder("a", true);
        let target = &mut pod.status.as_mut().unwrap().conditions.as_mut().unwrap()[1];
        target.reason = Some(reason.into());
        target.status = status.into();
        pod
    };
    assert!(preempted_by_scheduler(&with_target(
        "PreemptionByScheduler",
        "True"
    )));
    assert!(!preempted_by_scheduler(&with_target(
        "EvictionByEvictionAPI",
        "True"
    )));
    assert!(!preempted_by_scheduler(&with_target(
        "PreemptionByScheduler",
        "False"
    )));
}

#[test]
fn each_preempted_placeholder_is_counted_once_however_often_the_watch_shows_it() {
    use kube::runtime::watcher::Event;
    let mut seen = PreemptedPlaceholders::default();
    let count = |seen: &mut PreemptedPlaceholders, event| seen.observe(event).is_some();
    // The first list: one standing, one already preempted and terminating.
    assert!(!count(&mut seen, Event::Init));
    assert!(!count(
        &mut seen,
        Event::InitApply(watched_placeholder("a", false))
    ));
    assert!(count(
        &mut seen,
        Event::InitApply(watched_placeholder("b", true))
    ));
    assert!(!count(&mut seen, Event::InitDone));
    // `a` is preempted: the scheduler's patch, then its deletion.
    assert!(count(
        &mut seen,
        Event::Apply(watched_placeholder("a", true))
    ));
    assert!(!count(
        &mut seen,
        Event::Delete(watched_placeholder("a", true))
    ));
    // The watch lists again while `b` still terminates: not counted twice.
    assert!(!count(&mut seen, Event::Init));
    assert!(!count(
        &mut seen,
        Event::InitApply(watched_placeholder("b", true))
    ));
    assert!(!count(&mut seen, Event::InitDone));
    // A deletion shown without the patch before it (the watch missed it) is counted.
    assert!(count(
        &mut seen,
        Event::Delete(watched_placeholder("c", true))
    ));
    // A placeholder deleted by rotor (its room freed) is not a preemption.
    assert!(!count(
        &mut seen,
        Event::Delete(watched_placeholder("d", false))
    ));
    // Only what the watch may show again is remembered: `b`, until a relist no longer lists it.
    assert_eq!(seen.counted, BTreeSet::from(["b".to_string()]));
    assert!(!count(&mut seen, Event::Init));
    assert!(!count(&mut seen, Event::InitDone));
    assert!(seen.counted.is_empty());
}
