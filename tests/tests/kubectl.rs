//! Real `kubectl` against `rotor-sim`: the simulator must look like a Kubernetes cluster to the
//! reference client, for reads (tables and JSON), node edits (cordon, taint) and drains, and it
//! must count what the tests and benchmarks rely on (evictions, budget violations).
//!
//! Every test starts its own simulator, so tests are independent and run in parallel.
//! Scenarios are in tests/scenarios/. Build the binaries first: `cargo build --workspace --bins`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use rotor_e2e::{
    SimProcess, TestDir, binary, describe_output, kubectl, kubectl_create, kubectl_json,
    kubectl_ok, parse_table, run_with_timeout, scenario, workspace_root,
};
use serde_json::{Value, json};

/// tests/scenarios/cluster.yaml: 3 nodes, kubelets at this version.
const NODES: usize = 3;
const KUBELET_VERSION: &str = "v1.32.9";
/// Pods of cluster.yaml: per node a node-agent (DaemonSet) and a kube-proxy (mirror) pod, then
/// 6 web, 3 db and the bare debug-shell.
const PODS: usize = NODES * 2 + 6 + 3 + 1;
const DRAIN_TAINT: &str = "rotor.dev/drain";

fn names(items: &Value) -> BTreeSet<String> {
    items
        .as_array()
        .expect("an items array")
        .iter()
        .map(|o| o["metadata"]["name"].as_str().expect("a name").to_string())
        .collect()
}

fn node_names(sim: &SimProcess) -> Vec<String> {
    names(&kubectl_json(sim, &["get", "nodes"])["items"])
        .into_iter()
        .collect()
}

/// The node's row in `kubectl get nodes`.
fn node_row(sim: &SimProcess, node: &str) -> BTreeMap<String, String> {
    let rows = parse_table(&kubectl_ok(sim, &["get", "nodes"]));
    rows.into_iter()
        .find(|r| r["NAME"] == node)
        .unwrap_or_else(|| panic!("node {node} is not in `kubectl get nodes`"))
}

fn jsonpath(sim: &SimProcess, kind: &str, name: &str, path: &str) -> String {
    kubectl_ok(sim, &["get", kind, name, "-o", &format!("jsonpath={path}")])
}

fn count(v: &Value) -> u64 {
    // The stats omit zero counters.
    v.as_u64().unwrap_or(0)
}

fn owner_kind(pod: &Value) -> Option<&str> {
    pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == json!(true))?["kind"]
        .as_str()
}

fn is_mirror(pod: &Value) -> bool {
    pod["metadata"]["annotations"]
        .get("kubernetes.io/config.mirror")
        .is_some()
}

fn is_daemon_or_mirror(pod: &Value) -> bool {
    owner_kind(pod) == Some("DaemonSet") || is_mirror(pod)
}

/// Whether a policy/v1 PDB's `matchLabels` selector covers the pod.
fn pdb_covers(pdb: &Value, pod: &Value) -> bool {
    if pdb["metadata"]["namespace"] != pod["metadata"]["namespace"] {
        return false;
    }
    let Some(want) = pdb["spec"]["selector"]["matchLabels"].as_object() else {
        return false;
    };
    !want.is_empty()
        && want
            .iter()
            .all(|(k, v)| pod["metadata"]["labels"].get(k) == Some(v))
}

#[test]
fn get_nodes_lists_every_node_ready_with_the_kubelet_version() {
    let sim = SimProcess::start(scenario("cluster.yaml"));

    let rows = parse_table(&kubectl_ok(&sim, &["get", "nodes"]));
    assert_eq!(rows.len(), NODES, "{rows:#?}");
    for r in &rows {
        assert_eq!(
            (r["STATUS"].as_str(), r["VERSION"].as_str()),
            ("Ready", KUBELET_VERSION),
            "{r:?}"
        );
    }

    let list = kubectl_json(&sim, &["get", "nodes"]);
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), NODES);
    for n in items {
        let ready: Vec<&Value> = n["status"]["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .filter(|c| c["type"] == "Ready")
            .map(|c| &c["status"])
            .collect();
        assert_eq!(ready, [&json!("True")], "{}", n["metadata"]["name"]);
        assert_eq!(n["status"]["nodeInfo"]["kubeletVersion"], KUBELET_VERSION);
    }
    let table_names: BTreeSet<String> = rows.iter().map(|r| r["NAME"].clone()).collect();
    assert_eq!(table_names, names(&list["items"]));
}

#[test]
fn get_pods_all_namespaces_lists_every_pod() {
    let sim = SimProcess::start(scenario("cluster.yaml"));

    let rows = parse_table(&kubectl_ok(&sim, &["get", "pods", "-A"]));
    assert_eq!(rows.len(), PODS, "{rows:#?}");
    for r in &rows {
        assert_eq!(
            (r["READY"].as_str(), r["STATUS"].as_str()),
            ("1/1", "Running"),
            "{r:?}"
        );
    }

    let list = kubectl_json(&sim, &["get", "pods", "-A"]);
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), PODS);
    let mut per_namespace = BTreeMap::<&str, usize>::new();
    for p in items {
        *per_namespace
            .entry(p["metadata"]["namespace"].as_str().expect("namespace"))
            .or_default() += 1;
    }
    assert_eq!(
        per_namespace,
        BTreeMap::from([("default", 1), ("kube-system", NODES * 2), ("shop", 9)])
    );
    let daemon_or_mirror = items.iter().filter(|p| is_daemon_or_mirror(p)).count();
    assert_eq!(daemon_or_mirror, NODES * 2);

    let table: BTreeSet<(String, String)> = rows
        .iter()
        .map(|r| (r["NAMESPACE"].clone(), r["NAME"].clone()))
        .collect();
    let json: BTreeSet<(String, String)> = items
        .iter()
        .map(|p| {
            (
                p["metadata"]["namespace"].as_str().unwrap().to_string(),
                p["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(table, json);
    assert_eq!(count(&sim.stats()["pods"]["total"]), PODS as u64);
}

#[test]
fn cordon_and_uncordon_toggle_unschedulable() {
    let sim = SimProcess::start(scenario("cluster.yaml"));
    let nodes = node_names(&sim);
    let node = nodes[0].as_str();

    let out = kubectl_ok(&sim, &["cordon", node]);
    assert_eq!(out.trim(), format!("node/{node} cordoned"));
    assert_eq!(
        jsonpath(&sim, "node", node, "{.spec.unschedulable}"),
        "true"
    );
    assert_eq!(node_row(&sim, node)["STATUS"], "Ready,SchedulingDisabled");
    for other in &nodes[1..] {
        assert_eq!(node_row(&sim, other)["STATUS"], "Ready");
    }
    assert_eq!(count(&sim.stats()["nodes"]["cordoned"]), 1);

    let out = kubectl_ok(&sim, &["uncordon", node]);
    assert_eq!(out.trim(), format!("node/{node} uncordoned"));
    // kubectl patches `unschedulable: null`, which removes the field.
    assert_eq!(jsonpath(&sim, "node", node, "{.spec.unschedulable}"), "");
    assert_eq!(node_row(&sim, node)["STATUS"], "Ready");
    assert_eq!(count(&sim.stats()["nodes"]["cordoned"]), 0);
}

#[test]
fn taint_and_untaint_the_drain_taint() {
    let sim = SimProcess::start(scenario("cluster.yaml"));
    let nodes = node_names(&sim);
    let node = nodes[1].as_str();
    assert_eq!(jsonpath(&sim, "node", node, "{.spec.taints}"), "");

    let out = kubectl_ok(
        &sim,
        &[
            "taint",
            "node",
            node,
            &format!("{DRAIN_TAINT}=manual:NoSchedule"),
        ],
    );
    assert_eq!(out.trim(), format!("node/{node} tainted"));
    let taints: Value = serde_json::from_str(&jsonpath(&sim, "node", node, "{.spec.taints}"))
        .expect("taints as JSON");
    assert_eq!(
        taints,
        json!([{"key": DRAIN_TAINT, "value": "manual", "effect": "NoSchedule"}])
    );
    assert_eq!(
        jsonpath(
            &sim,
            "node",
            node,
            &format!("{{.spec.taints[?(@.key==\"{DRAIN_TAINT}\")].value}}")
        ),
        "manual"
    );
    for other in nodes.iter().filter(|n| *n != node) {
        assert_eq!(jsonpath(&sim, "node", other, "{.spec.taints}"), "");
    }
    assert_eq!(count(&sim.stats()["nodes"]["drainTainted"]), 1);

    let out = kubectl_ok(&sim, &["taint", "node", node, &format!("{DRAIN_TAINT}-")]);
    assert_eq!(out.trim(), format!("node/{node} untainted"));
    assert_eq!(jsonpath(&sim, "node", node, "{.spec.taints}"), "");
    assert_eq!(count(&sim.stats()["nodes"]["drainTainted"]), 0);
}

#[test]
fn drain_evicts_budgeted_pods_without_violating_a_budget() {
    let sim = SimProcess::start(scenario("cluster.yaml"));
    let pods = kubectl_json(&sim, &["get", "pods", "-A"]);
    let pods = pods["items"].as_array().expect("items");
    let pdbs = kubectl_json(&sim, &["get", "pdb", "-A"]);
    let pdbs = pdbs["items"].as_array().expect("items");
    assert_eq!(pdbs.len(), 2);
    let covered = |p: &Value| pdbs.iter().any(|b| pdb_covers(b, p));
    let bare = |p: &Value| owner_kind(p).is_none() && !is_mirror(p);

    // Drain the node with the most budgeted pods, preferring one that also runs the bare pod.
    let mut by_node = BTreeMap::<&str, Vec<&Value>>::new();
    for p in pods {
        by_node
            .entry(p["spec"]["nodeName"].as_str().expect("every pod is bound"))
            .or_default()
            .push(p);
    }
    let (node, on_node) = by_node
        .iter()
        .max_by_key(|(name, ps)| {
            (
                ps.iter().filter(|p| covered(p)).count(),
                ps.iter().any(|p| bare(p)),
                std::cmp::Reverse(*name),
            )
        })
        .map(|(n, ps)| (n.to_string(), ps))
        .expect("nodes with pods");
    let budgeted = on_node.iter().filter(|p| covered(p)).count() as u64;
    let bare_pods = on_node.iter().filter(|p| bare(p)).count() as u64;
    let staying: BTreeSet<String> = on_node
        .iter()
        .filter(|p| is_daemon_or_mirror(p))
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(budgeted >= 1, "no budgeted pod on {node}");
    assert_eq!(
        staying.len(),
        2,
        "one DaemonSet and one mirror pod per node"
    );

    let started = Instant::now();
    let out = kubectl(
        &sim,
        &[
            "drain",
            &node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            "--timeout=120s",
        ],
    );
    let took = started.elapsed();
    let what = describe_output(&format!("kubectl drain {node} (took {took:?})"), &out);
    assert!(out.status.success(), "{what}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("node/{node} drained")),
        "{what}"
    );
    eprintln!("kubectl drain {node} took {took:?}");
    assert!(took < Duration::from_secs(60), "{what}");

    let left = kubectl_json(
        &sim,
        &[
            "get",
            "pods",
            "-A",
            "--field-selector",
            &format!("spec.nodeName={node}"),
        ],
    );
    assert!(
        left["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(is_daemon_or_mirror),
        "{left:#}"
    );
    assert_eq!(names(&left["items"]), staying);
    assert_eq!(
        jsonpath(&sim, "node", &node, "{.spec.unschedulable}"),
        "true"
    );

    let stats = sim.stats();
    assert_eq!(
        count(&stats["budgetViolations"]),
        0,
        "{:#}",
        stats["budgetViolationList"]
    );
    // Each budgeted pod is evicted once through its budget (after any 429 retries); the bare
    // pod has no budget.
    assert_eq!(
        count(&stats["evictions"]["success"]),
        budgeted,
        "{:#}",
        stats["evictions"]
    );
    assert_eq!(
        count(&stats["evictions"]["bypass"]),
        bare_pods,
        "{:#}",
        stats["evictions"]
    );
}

#[test]
fn drain_blocked_by_a_budget_times_out_without_violating_it() {
    let sim = SimProcess::start(scenario("strict-budget.yaml"));
    assert_eq!(
        kubectl_ok(
            &sim,
            &[
                "get",
                "pdb",
                "ledger",
                "-n",
                "bank",
                "-o",
                "jsonpath={.status.disruptionsAllowed}"
            ]
        ),
        "0"
    );
    let node = kubectl_ok(
        &sim,
        &[
            "get",
            "pods",
            "-n",
            "bank",
            "-o",
            "jsonpath={.items[0].spec.nodeName}",
        ],
    );

    let out = kubectl(
        &sim,
        &["drain", &node, "--ignore-daemonsets", "--timeout=2s"],
    );
    let what = describe_output(&format!("kubectl drain {node}"), &out);
    assert_eq!(out.status.code(), Some(1), "{what}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{what}"
    );

    let stats = sim.stats();
    assert_eq!(count(&stats["budgetViolations"]), 0);
    assert_eq!(count(&stats["evictions"]["success"]), 0);
    assert!(count(&stats["evictions"]["budget"]) >= 1, "{stats:#}");
    assert_eq!(count(&stats["pods"]["ready"]), 2);
}

#[test]
fn deleting_a_pod_whose_budget_allows_no_disruption_is_a_violation() {
    let sim = SimProcess::start(scenario("strict-budget.yaml"));
    let pdb = kubectl_json(&sim, &["get", "pdb", "ledger", "-n", "bank"]);
    assert_eq!(
        (
            &pdb["status"]["currentHealthy"],
            &pdb["status"]["desiredHealthy"],
            &pdb["status"]["disruptionsAllowed"]
        ),
        (&json!(2), &json!(2), &json!(0))
    );
    let pod = kubectl_ok(
        &sim,
        &[
            "get",
            "pods",
            "-n",
            "bank",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ],
    );
    assert_eq!(count(&sim.stats()["budgetViolations"]), 0);

    let out = kubectl_ok(&sim, &["delete", "pod", "-n", "bank", &pod]);
    assert_eq!(out.trim(), format!("pod \"{pod}\" deleted"));

    let stats = sim.stats();
    assert_eq!(count(&stats["budgetViolations"]), 1, "{stats:#}");
    let v = &stats["budgetViolationList"][0];
    assert_eq!(
        (
            &v["namespace"],
            &v["pdb"],
            &v["pod"],
            &v["via"],
            &v["healthyAfter"],
            &v["desiredHealthy"]
        ),
        (
            &json!("bank"),
            &json!("ledger"),
            &json!(pod),
            &json!("delete"),
            &json!(1),
            &json!(2)
        )
    );
    // A delete is not an eviction.
    assert_eq!(stats["evictions"], json!({}));
}

/// rotor's RotationPolicy, as if its CRD were installed: kubectl makes one, writes its status
/// through the subresource, and `kubectl get` prints the columns the CRD names.
#[test]
fn rotation_policies_are_made_and_listed_with_their_crds_columns() {
    let sim = SimProcess::start(scenario("cluster.yaml"));
    kubectl_create(
        &sim,
        "apiVersion: rotor.dev/v1alpha1\nkind: RotationPolicy\nmetadata: {name: gpu}\n\
         spec: {nodeSelector: {matchLabels: {pool: gpu}}, priority: 5, budgets: [{nodes: \"1\"}]}\n",
    );
    kubectl_ok(
        &sim,
        &[
            "patch",
            "rotationpolicy",
            "gpu",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status": {"nodes": 3, "outOfDate": 1, "budget": "1 of 3"}}"#,
        ],
    );

    let rows = parse_table(&kubectl_ok(&sim, &["get", "rpol"]));
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = &rows[0];
    let cell = |column: &str| row.get(column).map(String::as_str);
    assert_eq!(cell("NAME"), Some("gpu"), "{row:?}");
    assert_eq!(cell("PRIORITY"), Some("5"), "{row:?}");
    assert_eq!(cell("NODES"), Some("3"), "{row:?}");
    assert_eq!(cell("OUT-OF-DATE"), Some("1"), "{row:?}");
    assert_eq!(cell("BUDGET"), Some("1 of 3"), "{row:?}");
    assert_eq!(
        cell("UNTIL"),
        Some(""),
        "a field not set is an empty cell: {row:?}"
    );
    assert_eq!(
        jsonpath(&sim, "rotationpolicy", "gpu", "{.metadata.generation}"),
        "1",
        "a status write leaves the generation"
    );
}

/// Runs `rotor-sim serve` on a scenario that must be refused; returns (stdout, stderr).
fn serve_must_refuse(scenario: &Path) -> (String, String) {
    let dir = TestDir::new("refuse");
    let kubeconfig = dir.join("kubeconfig");
    let out = run_with_timeout(
        std::process::Command::new(binary("rotor-sim"))
            .arg("serve")
            .arg("--scenario")
            .arg(scenario)
            .args(["--listen", "127.0.0.1:0"])
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .env("NO_COLOR", "1"),
        Duration::from_secs(20),
    );
    let what = describe_output(
        &format!("rotor-sim serve --scenario {}", scenario.display()),
        &out,
    );
    assert_eq!(out.status.code(), Some(2), "{what}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stdout.contains("listening on"), "{what}");
    assert!(!kubeconfig.exists(), "{what}");
    assert!(stderr.contains(&scenario.display().to_string()), "{what}");
    (stdout, stderr)
}

#[test]
fn serve_refuses_a_scenario_with_an_unknown_key() {
    let (_, stderr) = serve_must_refuse(&scenario("invalid/unknown-key.yaml"));
    assert!(stderr.contains("unknown field `replica`"), "{stderr}");
}

#[test]
fn serve_refuses_a_missing_scenario_file() {
    let dir = TestDir::new("missing");
    let missing = dir.join("no-such-scenario.yaml");
    let (_, stderr) = serve_must_refuse(&missing);
    assert!(
        stderr.contains(&format!(
            "cannot read scenario file {}: No such file or directory",
            missing.display()
        )),
        "{stderr}"
    );
}

#[test]
fn check_accepts_the_example_and_test_scenarios() {
    let example = |name: &str| workspace_root().join("examples/scenarios").join(name);
    let cases = [
        (
            example("small.yaml"),
            "1 node groups, 3 nodes, 4 workloads, 0 RotationPolicies",
        ),
        (
            example("demo.yaml"),
            "2 node groups, 8 nodes, 7 workloads, 2 RotationPolicies",
        ),
        (
            scenario("cluster.yaml"),
            "1 node groups, 3 nodes, 4 workloads, 0 RotationPolicies",
        ),
        (
            scenario("strict-budget.yaml"),
            "1 node groups, 2 nodes, 1 workloads, 0 RotationPolicies",
        ),
    ];
    for (file, summary) in cases {
        let out = run_with_timeout(
            std::process::Command::new(binary("rotor-sim"))
                .arg("check")
                .arg("--scenario")
                .arg(&file),
            Duration::from_secs(20),
        );
        let what = describe_output(
            &format!("rotor-sim check --scenario {}", file.display()),
            &out,
        );
        assert!(out.status.success(), "{what}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("scenario {} is valid: {summary}\n", file.display()),
            "{what}"
        );
    }
}
