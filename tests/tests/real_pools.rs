//! RotationPolicies and DrainRules followed by rotor-drainer on a real Kubernetes control plane
//! (etcd, kube-apiserver, controller-manager, scheduler; kwok for the kubelets), the drainer
//! running as the ServiceAccount `deploy/` ships under the real RBAC authorizer, the CRDs as
//! `deploy/` installs them. What the drainer does is judged from outside: the nodes as the API
//! server lists them (sampled while the rotation runs), an independent pod watch for the
//! PodDisruptionBudgets ([`BudgetWatch`]), and the API server's audit log for who evicted or
//! deleted which pod, and when.
//!
//! - Given two pools with budgets of their own (one node; 50%), when every old node of both is
//!   tainted, then each pool rotates at its own pace and never past its own budget, no pod
//!   budget is violated, and each policy's status counts its nodes drained.
//! - Given a pool whose only budget is scheduled and closed now, when a node of it and one of
//!   another pool are tainted, then only the other pool's node drains; the closed pool's node is
//!   left alone, and its policy's status says the window is closed and until when.
//! - Given DrainRules (an order for `db`, Skip for an opted-out canary, WaitCompleted for a batch
//!   pod; of two rules selecting the canary, the first by name applies), when the node is
//!   drained, then every `web` pod is gone before the first `db` pod is evicted, the canary is
//!   left and holds nothing, the batch pod is never evicted and the node is drained only once it
//!   has completed; nothing is deleted outside the Eviction API.
//! - Given a pool of one node at a time and a node stuck on an opted-out pod, when it has been
//!   blocked longer than the pool's `parkBlockedAfter`, then it is parked (rotor's cordon
//!   undone, the taint kept, a DrainParked Event naming the pod), the pool's next node drains,
//!   the status counts the parked node as blocked, and the parked node is tried again after its
//!   back-off.
//! - Given a node no policy selects, outside the flags' `--window`, beside a pool's node, when
//!   both are tainted, then the pool's node drains and the other is left alone (the choice
//!   among candidates keeps every pool's rules and the flags' windows).
//!
//! The control plane's binaries come from `tools/build.sh`; without them every test here fails
//! and says how to build them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use rotor_e2e::budget_watch::BudgetVerdict;
use rotor_e2e::manifests::{deployment, drain_rule, rotation_policy};
use rotor_e2e::real_cluster::is_ready;
use rotor_e2e::{
    Background, BudgetWatch, FakeNode, RealCluster, WatchedBudget, parse_table, tail, wait_until,
    workspace_root,
};
use serde_json::Value;

const DRAINER: &str = "system:serviceaccount:rotor-system:rotor-drainer";
const WAIT: Duration = Duration::from_secs(180);
/// The phases of a drain under way: they count against the pool's budget.
const ACTIVE: [&str; 4] = ["queued", "cordoned", "evicting", "blocked"];

/// A real cluster with rotor's kubernetes overlay applied (CRDs, RBAC; the shipped drainer
/// scaled to zero, the test runs its own) and both CRDs Established.
fn cluster_with_rotor() -> RealCluster {
    let started = Instant::now();
    let cluster = RealCluster::start();
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    cluster.stop_shipped_drainer();
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/rotationpolicies.rotor.dev",
        "crd/drainrules.rotor.dev",
    ]);
    eprintln!(
        "control plane and rotor's CRDs up in {:?}",
        started.elapsed()
    );
    cluster
}

fn taint(cluster: &RealCluster, node: &str) {
    cluster.kubectl_ok(&["taint", "node", node, "rotor.dev/drain=manual:NoSchedule"]);
}

fn node(cluster: &RealCluster, name: &str) -> Value {
    cluster.kubectl_json(&["get", "node", name])
}

/// Every node by name, from one list.
fn nodes_by_name(cluster: &RealCluster) -> BTreeMap<String, Value> {
    cluster.kubectl_json(&["get", "nodes"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| (name_of(n), n.clone()))
        .collect()
}

fn annotation_of(node: &Value, key: &str) -> Option<String> {
    node["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_string)
}

fn phase_of(node: &Value) -> Option<String> {
    annotation_of(node, "rotor.dev/phase")
}

fn phase(cluster: &RealCluster, name: &str) -> Option<String> {
    phase_of(&node(cluster, name))
}

fn unschedulable(node: &Value) -> bool {
    node["spec"]["unschedulable"].as_bool() == Some(true)
}

fn drain_tainted(node: &Value) -> bool {
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["key"] == "rotor.dev/drain")
}

fn wait_phase(
    cluster: &RealCluster,
    drainer: &Background,
    name: &str,
    want: &str,
    timeout: Duration,
) {
    wait_for_drainer(
        drainer,
        &format!("{name} to reach phase {want}"),
        timeout,
        || (phase(cluster, name).as_deref() == Some(want)).then_some(()),
    );
}

/// [`wait_phase`], calling `watch` at every look (to assert what must hold meanwhile).
fn wait_phase_watching(
    cluster: &RealCluster,
    drainer: &Background,
    name: &str,
    want: &str,
    mut watch: impl FnMut(),
) {
    wait_for_drainer(
        drainer,
        &format!("{name} to reach phase {want}"),
        WAIT,
        || {
            watch();
            (phase(cluster, name).as_deref() == Some(want)).then_some(())
        },
    );
}

/// [`wait_until`] for something the drainer must bring about: on timeout the panic carries the
/// drainer's last log lines (why it holds which node).
fn wait_for_drainer<T>(
    drainer: &Background,
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}; the drainer's last lines:\n{}",
            tail(drainer.log_path(), 25)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ready_pods(cluster: &RealCluster, ns: &str) -> usize {
    cluster.kubectl_json(&["get", "pods", "-n", ns])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null() && is_ready(p))
        .count()
}

/// The pods on `node` in `ns`.
fn pods_on(cluster: &RealCluster, ns: &str, node: &str) -> Vec<Value> {
    cluster.kubectl_json(&[
        "get",
        "pods",
        "-n",
        ns,
        "--field-selector",
        &format!("spec.nodeName={node}"),
    ])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn label_of(object: &Value, key: &str) -> String {
    object["metadata"]["labels"][key]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn audit_time(record: &Value, field: &str) -> Timestamp {
    record[field]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("an audit record without {field}: {record}"))
}

fn is_pod_request(record: &Value, verb: &str, subresource: Option<&str>) -> bool {
    record["verb"] == verb
        && record["objectRef"]["resource"] == "pods"
        && record["objectRef"]["subresource"].as_str() == subresource
        && record["stage"] == "ResponseComplete"
}

/// The evictions the drainer's identity sent and the API server granted (201): pod name and when
/// the server received the request, oldest first.
fn evictions(cluster: &RealCluster) -> Vec<(String, Timestamp)> {
    let mut v: Vec<(String, Timestamp)> = cluster
        .audit_by(DRAINER)
        .iter()
        .filter(|e| is_pod_request(e, "create", Some("eviction")))
        .filter(|e| e["responseStatus"]["code"] == 201)
        .map(|e| {
            (
                e["objectRef"]["name"].as_str().unwrap_or("?").to_string(),
                audit_time(e, "requestReceivedTimestamp"),
            )
        })
        .collect();
    v.sort_by_key(|(_, at)| *at);
    v
}

/// Every eviction the drainer's identity asked for, granted or not: pod names.
fn eviction_requests(cluster: &RealCluster) -> BTreeSet<String> {
    cluster
        .audit_by(DRAINER)
        .iter()
        .filter(|e| is_pod_request(e, "create", Some("eviction")))
        .filter_map(|e| e["objectRef"]["name"].as_str().map(str::to_string))
        .collect()
}

/// When each pod's removal from the API began (the kubelet's, here kwok's, final delete once its
/// grace period ran out, answered 200), by anyone but the drainer: by pod name. The pod is gone
/// at the delete's write to etcd, which watches see at once, and the API server answers the
/// delete after that: a drainer that acts on the watch can send its next request before the
/// delete's answer is logged (0.2 ms before, in one CI run). So the time is when the delete
/// arrived: no one can have seen the pod gone before it.
fn removals(cluster: &RealCluster) -> BTreeMap<String, Timestamp> {
    let mut gone = BTreeMap::new();
    for e in cluster.audit_events() {
        if is_pod_request(&e, "delete", None)
            && e["user"]["username"] != DRAINER
            && e["responseStatus"]["code"] == 200
        {
            let name = e["objectRef"]["name"].as_str().unwrap_or("?").to_string();
            let at = audit_time(&e, "requestReceivedTimestamp");
            gone.entry(name).or_insert(at);
        }
    }
    gone
}

/// Pod deletes (outside the Eviction API) and refusals (403) of the drainer's identity.
fn drainer_deletes_and_refusals(cluster: &RealCluster) -> (usize, Vec<String>) {
    let deletes = cluster
        .audit_by(DRAINER)
        .iter()
        .filter(|e| is_pod_request(e, "delete", None))
        .count();
    (deletes, cluster.refusals(DRAINER, 0))
}

fn assert_no_violation(verdict: &BudgetVerdict) {
    assert!(
        verdict.never_armed.is_empty(),
        "budgets never met before the drain (set-up error): {:?}",
        verdict.never_armed
    );
    assert!(
        verdict.violations.is_empty(),
        "budgets violated: {:#?}",
        verdict.violations
    );
}

fn policy_status(cluster: &RealCluster, name: &str) -> Value {
    cluster.kubectl_json(&["get", "rotationpolicy", name])["status"].clone()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

// ---------------------------------------------------------------------------------------------
// 1. Two pools side by side.

/// Pods of tests/manifests/shop.yaml, the DaemonSet's excepted.
const SHOP_PODS: usize = 6 + 4 + 3;

/// The budgets of tests/manifests/shop.yaml as the independent watch judges them.
fn shop_budgets() -> Vec<WatchedBudget> {
    vec![
        // maxUnavailable 1 of 6 replicas.
        WatchedBudget::app("shop", "web", 5),
        WatchedBudget::app("shop", "api", 3),
        // minAvailable 66% of 3, rounded up.
        WatchedBudget::app("shop", "db", 2),
    ]
}

/// One look at the labelled nodes: per pool, the nodes disrupted now (cordoned or mid-drain,
/// and not drained: a drained node gives its place back), and how many are drained.
fn disrupted_by_pool(nodes: &Value) -> (BTreeMap<String, Vec<String>>, usize) {
    let mut disrupted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut drained = 0;
    for n in nodes["items"].as_array().into_iter().flatten() {
        let pool = label_of(n, "pool");
        if pool.is_empty() {
            continue;
        }
        let entry = disrupted.entry(pool).or_default();
        let phase = phase_of(n);
        if phase.as_deref() == Some("drained") {
            drained += 1;
            continue;
        }
        if unschedulable(n) || phase.as_deref().is_some_and(|p| ACTIVE.contains(&p)) {
            entry.push(name_of(n));
        }
    }
    (disrupted, drained)
}

#[test]
fn two_pools_rotate_side_by_side_each_within_its_own_budget() {
    let cluster = cluster_with_rotor();
    // Four old nodes in each pool, the shop spread over them; then four new nodes no policy
    // selects (the flags govern them, and nothing taints them), so each pool has 4 nodes.
    let old: Vec<FakeNode> = (1..=4)
        .flat_map(|i| {
            [
                FakeNode::behind(&format!("a-{i}")).labelled("pool", "a"),
                FakeNode::behind(&format!("b-{i}")).labelled("pool", "b"),
            ]
        })
        .collect();
    cluster.add_nodes(&old);
    let shop = std::fs::read_to_string(workspace_root().join("tests/manifests/shop.yaml"))
        .expect("read shop.yaml");
    cluster.apply(&shop);
    wait_until("the shop's pods to be Ready", WAIT, || {
        (ready_pods(&cluster, "shop") >= SHOP_PODS + old.len()).then_some(())
    });
    let new: Vec<FakeNode> = (1..=4)
        .map(|i| FakeNode::new(&format!("new-{i}")))
        .collect();
    cluster.add_nodes(&new);
    cluster.apply(&format!(
        "{}---\n{}",
        rotation_policy(
            "a",
            r#"{nodeSelector: {matchLabels: {pool: a}}, budgets: [{nodes: "1"}]}"#
        ),
        rotation_policy(
            "b",
            r#"{nodeSelector: {matchLabels: {pool: b}}, budgets: [{nodes: "50%"}]}"#
        ),
    ));

    let watch = BudgetWatch::start(
        &cluster.kubectl_bin(),
        cluster.admin_kubeconfig(),
        shop_budgets(),
    );
    let drainer = cluster.start_rotor_drainer("e2e-a", &["--max-concurrent", "4"]);
    let started = Instant::now();
    for n in &old {
        taint(&cluster, &n.name);
    }

    // Sample the nodes every ~200 ms until all eight are drained.
    let mut most: BTreeMap<String, usize> = BTreeMap::new();
    let mut timeline: Vec<String> = Vec::new();
    let mut last = BTreeMap::new();
    loop {
        let (disrupted, drained) = disrupted_by_pool(&cluster.kubectl_json(&["get", "nodes"]));
        for (pool, nodes) in &disrupted {
            let m = most.entry(pool.clone()).or_default();
            *m = (*m).max(nodes.len());
        }
        if disrupted != last {
            timeline.push(format!(
                "{:>6.1}s drained {drained}: {disrupted:?}",
                started.elapsed().as_secs_f64()
            ));
            last = disrupted;
        }
        if drained == old.len() {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "not every old node drained in {WAIT:?}:\n{}\n{}",
            timeline.join("\n"),
            tail(drainer.log_path(), 25)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let took = started.elapsed();
    let timeline = timeline.join("\n");
    eprintln!("disrupted nodes by pool:\n{timeline}");
    assert!(
        most["a"] <= 1,
        "pool a (budget 1) had {} nodes disrupted at once:\n{timeline}",
        most["a"]
    );
    assert!(
        most["b"] <= 2,
        "pool b (budget 50% of 4 = 2) had {} nodes disrupted at once:\n{timeline}",
        most["b"]
    );
    assert_eq!(
        most["b"], 2,
        "pool b never went at its own pace (two at once):\n{timeline}"
    );
    let verdict = watch.finish();
    assert_no_violation(&verdict);
    let (deletes, refusals) = drainer_deletes_and_refusals(&cluster);
    assert_eq!(
        (deletes, refusals),
        (0, Vec::<String>::new()),
        "pod deletes outside the Eviction API, refusals"
    );

    // Each policy's status counts its four nodes drained (written at most every 5 s).
    let statuses = wait_for_drainer(
        &drainer,
        "both policies' status to count 4 drained",
        Duration::from_secs(10),
        || {
            let list = cluster.kubectl_json(&["get", "rotationpolicies"]);
            let items = list["items"].as_array().cloned().unwrap_or_default();
            (items.len() == 2 && items.iter().all(|p| p["status"]["drained"] == 4)).then_some(items)
        },
    );
    for p in &statuses {
        let s = &p["status"];
        assert_eq!(
            (&s["nodes"], &s["outOfDate"], &s["draining"], &s["blocked"]),
            (
                &Value::from(4),
                &Value::from(4),
                &Value::from(0),
                &Value::from(0)
            ),
            "{}: {s:#}",
            name_of(p)
        );
        assert_eq!(
            s["observedGeneration"], p["metadata"]["generation"],
            "{s:#}"
        );
    }
    let table = cluster.kubectl_ok(&["get", "rotationpolicies"]);
    eprintln!("kubectl get rotationpolicies:\n{table}");
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "PRIORITY",
            "NODES",
            "OUT-OF-DATE",
            "DRAINING",
            "DRAINED",
            "BLOCKED",
            "BUDGET",
            "UNTIL",
            "AGE"
        ],
        "{table}"
    );
    let rows = parse_table(&table);
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["NAME"] == name)
            .unwrap_or_else(|| panic!("no row {name}: {table}"))
    };
    for (name, budget) in [("a", "1 of 4"), ("b", "50% = 2 of 4")] {
        let r = row(name);
        assert_eq!(
            (
                r["NODES"].as_str(),
                r["OUT-OF-DATE"].as_str(),
                r["DRAINED"].as_str(),
                r["BUDGET"].as_str()
            ),
            ("4", "4", "4", budget),
            "{table}"
        );
    }
    eprintln!(
        "real control plane: two pools of 4 drained in {:.1}s, at most {most:?} disrupted at \
         once, {} evictions, 0 violations (lowest healthy {:?})",
        took.as_secs_f64(),
        evictions(&cluster).len(),
        verdict.lowest
    );
}

// ---------------------------------------------------------------------------------------------
// 2. A closed schedule.

const AUCKLAND: &str = "Pacific/Auckland";

/// A daily opening six hours from now on Auckland's clock, and when it next opens: closed now
/// (it last opened some 18 hours ago, for one hour) at any time of day or year.
fn a_schedule_closed_now() -> (String, Timestamp) {
    let now = Timestamp::now()
        .in_tz(AUCKLAND)
        .expect("the tz database has Auckland");
    let hour = (now.hour() + 6) % 24;
    let at = |day: &jiff::Zoned| {
        day.with()
            .hour(hour)
            .minute(0)
            .second(0)
            .subsec_nanosecond(0)
            .build()
            .expect("a wall time on Auckland's clock")
    };
    let mut next = at(&now);
    if next <= now {
        next = at(&now.tomorrow().expect("tomorrow"));
    }
    (format!("0 {hour} * * *"), next.timestamp())
}

#[test]
fn a_closed_schedule_holds_its_pool_only_and_the_status_says_until_when() {
    let cluster = cluster_with_rotor();
    cluster.add_nodes(&[
        FakeNode::behind("a-1").labelled("pool", "a"),
        FakeNode::behind("gpu-1").labelled("pool", "gpu"),
    ]);
    cluster.kubectl_ok(&["create", "namespace", "apps"]);
    cluster.apply(&deployment("apps", "app", 2, None));
    wait_until("app's pods to be Ready", WAIT, || {
        (ready_pods(&cluster, "apps") == 2).then_some(())
    });
    cluster.add_nodes(&[FakeNode::new("new-1")]);
    let on_gpu: Vec<String> = pods_on(&cluster, "apps", "gpu-1")
        .iter()
        .map(name_of)
        .collect();
    let (schedule, opens) = a_schedule_closed_now();
    eprintln!("gpu's schedule {schedule:?} in {AUCKLAND}: next opens at {opens}");
    cluster.apply(&format!(
        "{}---\n{}",
        rotation_policy(
            "gpu",
            &format!(
                "{{nodeSelector: {{matchLabels: {{pool: gpu}}}}, budgets: [{{nodes: \"1\", \
                 schedule: \"{schedule}\", duration: 1h, timeZone: {AUCKLAND}}}]}}"
            )
        ),
        rotation_policy(
            "a",
            r#"{nodeSelector: {matchLabels: {pool: a}}, budgets: [{nodes: "1"}]}"#
        ),
    ));
    let drainer = cluster.start_rotor_drainer(
        "e2e-a",
        &["--max-concurrent", "4", "--release-lease-after", "2s"],
    );
    taint(&cluster, "gpu-1");
    taint(&cluster, "a-1");

    // gpu-1 is looked at every ~200 ms from the taint until a-1 is drained, gpu's status read
    // and 5 s more.
    let started = Instant::now();
    let gpu_untouched = |when: &str| {
        let gpu = node(&cluster, "gpu-1");
        assert_eq!(
            (phase_of(&gpu), unschedulable(&gpu)),
            (None, false),
            "gpu-1 was touched ({when}, {:.1}s after the taints): {gpu:#}\n{}",
            started.elapsed().as_secs_f64(),
            tail(drainer.log_path(), 25)
        );
    };
    wait_phase_watching(&cluster, &drainer, "a-1", "drained", || {
        gpu_untouched("while a-1 drains")
    });
    let status = wait_for_drainer(
        &drainer,
        "gpu's status to say its window is closed",
        Duration::from_secs(15),
        || {
            gpu_untouched("before gpu's status");
            let s = policy_status(&cluster, "gpu");
            (condition(&s, "WindowClosed")["status"] == "True" && s["outOfDate"] == 1).then_some(s)
        },
    );
    let closed = condition(&status, "WindowClosed");
    assert_eq!(closed["reason"], "OutsideSchedules", "{status:#}");
    assert_eq!(
        status["budget"], "none (outside every schedule)",
        "{status:#}"
    );
    let until = status["budgetUntil"].as_str().unwrap_or_default();
    let until_at: Timestamp = until
        .parse()
        .unwrap_or_else(|e| panic!("budgetUntil {until:?} is not RFC 3339: {e}"));
    assert_eq!(
        until_at, opens,
        "budgetUntil is the schedule's next opening: {status:#}"
    );
    assert!(
        closed["message"]
            .as_str()
            .unwrap_or_default()
            .contains(until),
        "the condition names the next opening: {status:#}"
    );
    assert_eq!(
        (&status["nodes"], &status["draining"], &status["drained"]),
        (&Value::from(1), &Value::from(0), &Value::from(0)),
        "{status:#}"
    );
    for other in ["Paused", "Overlap", "Invalid", "Halted"] {
        assert_eq!(condition(&status, other)["status"], "False", "{status:#}");
    }
    let a = wait_for_drainer(
        &drainer,
        "a's status to count a-1 drained",
        Duration::from_secs(10),
        || {
            let s = policy_status(&cluster, "a");
            (s["drained"] == 1).then_some(s)
        },
    );
    assert_eq!(condition(&a, "WindowClosed")["status"], "False", "{a:#}");
    let quiet_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < quiet_until {
        gpu_untouched("after a-1 drained");
        std::thread::sleep(Duration::from_millis(200));
    }
    let evicted = eviction_requests(&cluster);
    assert!(
        on_gpu.iter().all(|p| !evicted.contains(p)),
        "a pod on gpu-1 was evicted: {on_gpu:?} among {evicted:?}"
    );
    let table = cluster.kubectl_ok(&["get", "rpol"]);
    eprintln!("kubectl get rpol:\n{table}");
    let rows = parse_table(&table);
    let gpu_row = rows
        .iter()
        .find(|r| r["NAME"] == "gpu")
        .unwrap_or_else(|| panic!("{table}"));
    assert_eq!(
        gpu_row["BUDGET"], "none (outside every schedule)",
        "{table}"
    );
    // The Until column is the time itself (a string column: a date column would show
    // `<invalid>` for a time to come); a budget without a schedule has none.
    assert_eq!(gpu_row["UNTIL"], until, "{table}");
    let a_row = rows
        .iter()
        .find(|r| r["NAME"] == "a")
        .unwrap_or_else(|| panic!("{table}"));
    assert_eq!(
        (a_row["BUDGET"].as_str(), a_row["UNTIL"].as_str()),
        ("1 of 1", ""),
        "{table}"
    );

    // Nothing left that may start, and both statuses as the API server holds them are what
    // the drainer would write (a status it read back differently would keep a replica leading
    // and writing): the lease goes, and neither it nor the policies change after.
    let lease = || cluster.kubectl_json(&["-n", "rotor-system", "get", "lease", "rotor-drainer"]);
    wait_for_drainer(
        &drainer,
        "the drainer to let the lease go",
        Duration::from_secs(30),
        || lease()["spec"]["holderIdentity"].is_null().then_some(()),
    );
    let versions = || {
        let policies = cluster.kubectl_json(&["get", "rotationpolicies"]);
        let mut versions: Vec<Value> = policies["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["resourceVersion"].clone())
            .collect();
        versions.push(lease()["metadata"]["resourceVersion"].clone());
        versions
    };
    let settled = versions();
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(
        versions(),
        settled,
        "a policy or the lease was written once nothing needed a leader\n{}",
        tail(drainer.log_path(), 25)
    );
}

// ---------------------------------------------------------------------------------------------
// 3. DrainRules.

/// A pod on `node` in `apps` that no controller owns.
fn bare_pod(name: &str, node: &str, labels: &str, annotations: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: apps
  labels: {labels}
  annotations: {annotations}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1{extra_spec}
  containers: [{{name: app, image: app:1}}]
"
    )
}

#[test]
fn drain_rules_order_skip_and_wait_completed() {
    let cluster = cluster_with_rotor();
    cluster.add_nodes(&[FakeNode::behind("old-1")]);
    cluster.kubectl_ok(&["create", "namespace", "apps"]);
    // web has no rule (order 0) and takes 3 s to stop; db goes at order 10.
    let web = deployment("apps", "web", 3, None).replace(
        "terminationGracePeriodSeconds: 1",
        "terminationGracePeriodSeconds: 3",
    );
    let workloads = [
        web,
        deployment("apps", "db", 2, None),
        bare_pod(
            "canary",
            "old-1",
            "{app: canary}",
            "{rotor.dev/do-not-disrupt: \"true\"}",
            "",
        ),
        bare_pod(
            "batch",
            "old-1",
            "{kind: batch}",
            "{}",
            "\n  restartPolicy: Never",
        ),
    ];
    cluster.apply(&workloads.join("---\n"));
    wait_until("the apps' pods to be Ready", WAIT, || {
        (ready_pods(&cluster, "apps") == 7).then_some(())
    });
    cluster.add_nodes(&[FakeNode::new("new-1")]);
    // The first rule by name wins: canary-skip before z-canary-first (which would evict the
    // canary before everything else).
    cluster.apply(
        &[
            drain_rule(
                "db-last",
                "{behavior: Drain, order: 10, pods: [{selector: {matchLabels: {app: db}}}]}",
            ),
            drain_rule(
                "canary-skip",
                "{behavior: Skip, pods: [{selector: {matchLabels: {app: canary}}}]}",
            ),
            drain_rule(
                "z-canary-first",
                "{behavior: Drain, order: -5, pods: [{selector: {matchLabels: {app: canary}}}]}",
            ),
            drain_rule(
                "batch-completes",
                "{behavior: WaitCompleted, pods: [{selector: {matchLabels: {kind: batch}}, \
                 namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: apps}}}]}",
            ),
        ]
        .join("---\n"),
    );
    let on_old: Vec<Value> = pods_on(&cluster, "apps", "old-1");
    let names_with = |key: &str, value: &str| -> Vec<String> {
        on_old
            .iter()
            .filter(|p| label_of(p, key) == value)
            .map(name_of)
            .collect()
    };
    let (webs, dbs) = (names_with("app", "web"), names_with("app", "db"));
    assert_eq!((webs.len(), dbs.len()), (3, 2), "{on_old:#?}");

    let drainer = cluster.start_rotor_drainer("e2e-a", &[]);
    let started = Instant::now();
    taint(&cluster, "old-1");
    // Until only the canary and the batch pod are left, then 8 s more: never drained, never
    // blocked on the canary.
    let mut phases: Vec<String> = Vec::new();
    let mut look = |until: &str| {
        let n = node(&cluster, "old-1");
        let p = phase_of(&n).unwrap_or_default();
        if phases.last() != Some(&p) {
            phases.push(p.clone());
        }
        let blocker = annotation_of(&n, "rotor.dev/blocker").unwrap_or_default();
        assert!(
            !blocker.contains("canary"),
            "the skipped canary holds the node: {blocker}"
        );
        assert_ne!(
            p,
            "drained",
            "old-1 drained {until}, before the batch pod completed ({:.1}s)\n{}",
            started.elapsed().as_secs_f64(),
            tail(drainer.log_path(), 25)
        );
    };
    wait_for_drainer(&drainer, "web and db to be gone from old-1", WAIT, || {
        look("while web and db were being evicted");
        let left: Vec<String> = pods_on(&cluster, "apps", "old-1")
            .iter()
            .map(name_of)
            .collect();
        (left.len() == 2 && left.contains(&"canary".into()) && left.contains(&"batch".into()))
            .then_some(())
    });
    let quiet_until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < quiet_until {
        look("with only the canary and the batch pod left");
        std::thread::sleep(Duration::from_millis(200));
    }
    let waiting_phase = phases.last().cloned().unwrap_or_default();
    // The batch job completes, as its kubelet would report.
    let completed_at = Timestamp::now();
    cluster.kubectl_ok(&[
        "patch",
        "pod",
        "batch",
        "-n",
        "apps",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Succeeded"}}"#,
    ]);
    wait_phase(
        &cluster,
        &drainer,
        "old-1",
        "drained",
        Duration::from_secs(60),
    );
    let drained_after = Timestamp::now().duration_since(completed_at);
    eprintln!(
        "old-1's phases: {phases:?}; drained {drained_after:#} after the batch pod completed"
    );

    // Order: every web pod gone before the first db eviction was sent.
    let evicted = evictions(&cluster);
    let gone = removals(&cluster);
    let first_eviction = |names: &[String]| {
        evicted
            .iter()
            .find(|(p, _)| names.contains(p))
            .map(|(_, at)| *at)
    };
    let web_gone = webs
        .iter()
        .map(|w| {
            *gone
                .get(w)
                .unwrap_or_else(|| panic!("no removal of {w} in the audit log"))
        })
        .max()
        .expect("web pods");
    let db_first = first_eviction(&dbs).expect("db pods were evicted");
    let web_first = first_eviction(&webs).expect("web pods were evicted");
    eprintln!(
        "first web eviction {web_first}, last web pod's removal {web_gone}, first db eviction \
         {db_first}"
    );
    assert!(
        db_first >= web_gone,
        "a db pod (order 10) was evicted at {db_first}, before the last web pod (order 0) was \
         removed (its delete arrived at {web_gone}): {evicted:?}"
    );
    let names: BTreeSet<&str> = evicted.iter().map(|(p, _)| p.as_str()).collect();
    let want: BTreeSet<&str> = webs.iter().chain(&dbs).map(String::as_str).collect();
    assert_eq!(names, want, "exactly web's and db's pods were evicted");
    let asked = eviction_requests(&cluster);
    for untouched in ["canary", "batch"] {
        assert!(
            !asked.contains(untouched),
            "the drainer asked to evict {untouched}: {asked:?}"
        );
    }
    let canary = cluster.kubectl_json(&["get", "pod", "canary", "-n", "apps"]);
    assert!(
        canary["metadata"]["deletionTimestamp"].is_null() && canary["spec"]["nodeName"] == "old-1",
        "the skipped canary stays on the drained node: {canary:#}"
    );
    assert_ne!(
        waiting_phase, "blocked",
        "waiting for completion is no block"
    );
    let (deletes, refusals) = drainer_deletes_and_refusals(&cluster);
    assert_eq!(
        (deletes, refusals),
        (0, Vec::<String>::new()),
        "pod deletes outside the Eviction API, refusals"
    );
    let log = drainer.log();
    assert!(
        log.contains("a DrainRule says to wait for this pod to complete"),
        "{log}"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Parking.

#[test]
fn a_node_stuck_on_an_opt_out_is_parked_and_its_pool_goes_on() {
    let cluster = cluster_with_rotor();
    cluster.add_nodes(&[
        FakeNode::behind("a-1").labelled("pool", "a"),
        FakeNode::behind("a-2").labelled("pool", "a"),
    ]);
    cluster.kubectl_ok(&["create", "namespace", "apps"]);
    let precious = bare_pod(
        "precious",
        "a-1",
        "{app: precious}",
        "{rotor.dev/do-not-disrupt: \"true\"}",
        "",
    );
    cluster.apply(&format!(
        "{precious}---\n{}",
        deployment("apps", "app", 2, None)
    ));
    wait_until("the apps' pods to be Ready", WAIT, || {
        (ready_pods(&cluster, "apps") == 3).then_some(())
    });
    cluster.add_nodes(&[FakeNode::new("new-1")]);
    cluster.apply(&rotation_policy(
        "a",
        "{nodeSelector: {matchLabels: {pool: a}}, budgets: [{nodes: \"1\"}], \
         drain: {parkBlockedAfter: 5s}}",
    ));
    // Two drain slots: only the pool's budget of one holds a-2 while a-1 is blocked.
    let drainer = cluster.start_rotor_drainer("e2e-a", &["--max-concurrent", "2"]);
    let started = Instant::now();
    taint(&cluster, "a-1");
    wait_phase(&cluster, &drainer, "a-1", "blocked", WAIT);
    let blocked_at = Instant::now();
    taint(&cluster, "a-2");

    // While a-1 holds the pool's one place, a-2 waits untouched; then a-1 is parked.
    let parked = wait_for_drainer(
        &drainer,
        "a-1 to be parked",
        Duration::from_secs(60),
        || {
            // One list: both nodes as of one moment.
            let nodes = nodes_by_name(&cluster);
            let (a1, a2) = (nodes["a-1"].clone(), &nodes["a-2"]);
            let p1 = phase_of(&a1);
            if p1.as_deref() == Some("blocked") {
                assert!(
                    phase_of(a2).is_none() && !unschedulable(a2),
                    "a-2 started while a-1 (blocked) held the pool's budget of 1: {a2:#}"
                );
            }
            (p1.as_deref() == Some("parked")).then_some(a1)
        },
    );
    let parked_at = Instant::now();
    eprintln!(
        "a-1 blocked {:.1}s after its taint, parked {:.1}s after that",
        (blocked_at - started).as_secs_f64(),
        (parked_at - blocked_at).as_secs_f64()
    );
    assert!(
        parked_at - blocked_at >= Duration::from_secs(4),
        "parked {:?} after it showed blocked, before parkBlockedAfter (5s)",
        parked_at - blocked_at
    );
    assert!(
        !unschedulable(&parked),
        "rotor's cordon is undone on a parked node: {parked:#}"
    );
    assert!(
        drain_tainted(&parked),
        "the drain taint stays on a parked node: {parked:#}"
    );
    let blocker = annotation_of(&parked, "rotor.dev/blocker").unwrap_or_default();
    assert!(blocker.contains("apps/precious"), "{blocker}");
    let notes = cluster.node_event_notes("a-1", "DrainParked");
    assert!(
        notes.iter().any(|n| n.contains("apps/precious")),
        "a DrainParked Event naming the pod: {notes:?} (every Event: {:?})",
        cluster.node_events("a-1")
    );

    // The pool goes on: a-2 drains.
    wait_phase(
        &cluster,
        &drainer,
        "a-2",
        "drained",
        Duration::from_secs(60),
    );
    let status = wait_for_drainer(
        &drainer,
        "a's status to count a-2 drained and a-1 blocked",
        Duration::from_secs(10),
        || {
            let s = policy_status(&cluster, "a");
            (s["drained"] == 1 && s["blocked"] == 1).then_some(s)
        },
    );
    assert_eq!(
        (&status["nodes"], &status["outOfDate"]),
        (&Value::from(2), &Value::from(2)),
        "{status:#}"
    );
    let pod = cluster.kubectl_json(&["get", "pod", "precious", "-n", "apps"]);
    assert!(
        pod["metadata"]["deletionTimestamp"].is_null(),
        "an opted-out pod is never evicted: {pod:#}"
    );

    // After its back-off (a minute after the first attempt) a-1 is tried again: cordoned by
    // rotor again, and blocked on the same pod.
    let left_parked = wait_for_drainer(
        &drainer,
        "a-1 to be tried again after its back-off",
        Duration::from_secs(100),
        || (phase(&cluster, "a-1").as_deref() != Some("parked")).then(|| parked_at.elapsed()),
    );
    eprintln!("a-1 tried again {left_parked:?} after it was parked");
    assert!(
        left_parked >= Duration::from_secs(50),
        "a-1 was tried again {left_parked:?} after it was parked, before its back-off (1 min)"
    );
    let retried = wait_for_drainer(
        &drainer,
        "a-1 to block again, cordoned by rotor",
        Duration::from_secs(30),
        || {
            let a1 = node(&cluster, "a-1");
            (phase_of(&a1).as_deref() == Some("blocked") && unschedulable(&a1)).then_some(a1)
        },
    );
    assert_eq!(
        annotation_of(&retried, "rotor.dev/attempts").as_deref(),
        Some("2"),
        "{retried:#}"
    );
    let (deletes, refusals) = drainer_deletes_and_refusals(&cluster);
    assert_eq!(
        (deletes, refusals),
        (0, Vec::<String>::new()),
        "pod deletes outside the Eviction API, refusals"
    );
    let log = drainer.log();
    assert!(log.contains("drain parked"), "{log}");
}

// ---------------------------------------------------------------------------------------------
// 5. The flags beside a pool.

/// Adds a-1, labelled for pool `a`, and f-1 and new-1, which follow the flags unless a policy
/// selects them; returns a `--window` closed now for those.
fn pool_a_and_the_flags(cluster: &RealCluster) -> String {
    cluster.add_nodes(&[
        FakeNode::behind("a-1").labelled("pool", "a"),
        FakeNode::behind("f-1"),
        FakeNode::new("new-1"),
    ]);
    let (schedule, _) = a_schedule_closed_now();
    format!("{schedule} for 1h in {AUCKLAND}")
}

#[test]
fn a_node_no_policy_selects_keeps_the_flags_window_while_a_pool_drains() {
    let cluster = cluster_with_rotor();
    let window = pool_a_and_the_flags(&cluster);
    cluster.apply(&rotation_policy(
        "a",
        r#"{nodeSelector: {matchLabels: {pool: a}}, budgets: [{nodes: "1"}]}"#,
    ));
    // Both tainted before the drainer starts: its first choice sees them together.
    taint(&cluster, "a-1");
    taint(&cluster, "f-1");
    let drainer =
        cluster.start_rotor_drainer("e2e-a", &["--max-concurrent", "4", "--window", &window]);
    let started = Instant::now();
    let f_untouched = |when: &str| {
        let f = node(&cluster, "f-1");
        assert_eq!(
            (phase_of(&f), unschedulable(&f)),
            (None, false),
            "f-1 started outside its --window {window:?} ({when}, {:.1}s after the drainer)\n{}",
            started.elapsed().as_secs_f64(),
            tail(drainer.log_path(), 25)
        );
    };
    wait_phase_watching(&cluster, &drainer, "a-1", "drained", || {
        f_untouched("while a-1 drains")
    });
    let quiet_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < quiet_until {
        f_untouched("after a-1 drained");
        std::thread::sleep(Duration::from_millis(200));
    }
}

// ---------------------------------------------------------------------------------------------
// 6. A policy that arrives while the drainer runs.

/// The drainer keeps only the node labels some policy selects by: with none, none. A policy
/// created later, by a label it did not keep, must still govern its nodes at once: the drainer
/// reads the nodes again, and until it has, its nodes do not fall to the flags.
#[test]
fn a_policy_created_while_the_drainer_runs_has_the_nodes_read_again_and_governs_them() {
    let cluster = cluster_with_rotor();
    // No tainted node may start while no policy selects it.
    let window = pool_a_and_the_flags(&cluster);
    taint(&cluster, "a-1");
    taint(&cluster, "f-1");
    let drainer =
        cluster.start_rotor_drainer("e2e-a", &["--max-concurrent", "4", "--window", &window]);
    // Listed, and both wait for the window: a-1 follows the flags, its labels not kept.
    wait_for_drainer(
        &drainer,
        "the drainer to stand by for both nodes",
        WAIT,
        || {
            let log = drainer.log();
            log.lines()
                .any(|l| {
                    l.contains("no tainted node can start now")
                        && l.contains("a-1")
                        && l.contains("f-1")
                })
                .then_some(())
        },
    );
    assert_eq!(phase(&cluster, "a-1"), None);

    cluster.apply(&rotation_policy(
        "a",
        r#"{nodeSelector: {matchLabels: {pool: a}}, budgets: [{nodes: "1"}]}"#,
    ));
    wait_phase(&cluster, &drainer, "a-1", "drained", WAIT);
    let log = drainer.log();
    assert!(
        log.contains("selects nodes by a label the drainer did not keep")
            && log.contains("keys=pool"),
        "the drainer did not say it read the nodes again:\n{}",
        tail(drainer.log_path(), 25)
    );
    let f = node(&cluster, "f-1");
    assert_eq!(
        (phase_of(&f), unschedulable(&f)),
        (None, false),
        "f-1 started outside its --window"
    );
}
