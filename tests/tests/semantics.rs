//! The shared semantics cases (`tests/cases/semantics.json`) answered by rotor-sim and by the
//! real control plane, as black boxes: the real scheduler and rotor-sim's decide which pods
//! tolerate the drain taint (by placing them or not), and the real disruption controller and
//! rotor-sim's count the pods each PodDisruptionBudget covers (`status.expectedPods`). The same
//! table is judged by rotor-apimachinery's functions in its unit tests, so rotor's logic, the
//! simulator and Kubernetes are held to one set of answers. And one answer the drainer reads by
//! its words: the conflict of an eviction or deletion whose pod was made again under its name.
//!
//! The control plane's binaries come from `tools/build.sh`; without them the real-cluster test
//! fails and says how to build them.

use std::time::Duration;

use rotor_e2e::{FakeNode, RealCluster, SimProcess, kubectl_json, scenario, wait_until};
use serde_json::{Value, json};

fn cases() -> Value {
    let path = rotor_e2e::workspace_root().join("tests/cases/semantics.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("read the case table"))
        .expect("the case table is JSON")
}

/// kubectl against one backend: `args`, and whether it succeeded with its output.
type Kubectl<'a> = &'a dyn Fn(&[&str], Option<&Value>) -> Result<String, String>;

/// Creates a namespace from its JSON (rotor-sim reads JSON bodies only).
fn create_namespace(kubectl: Kubectl, name: &str) {
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    kubectl(&["create", "-f", "-"], Some(&namespace)).unwrap();
}

/// Creates each case's pod (one container, the case's toleration) on a cluster whose only node
/// carries the case table's taint, and checks that exactly the tolerating pods are placed.
/// `refuses_invalid`: the backend validates tolerations at admission as the real apiserver does.
fn tolerations_are_judged(backend: &str, kubectl: Kubectl, refuses_invalid: bool) {
    let table = cases();
    create_namespace(kubectl, "tolerations");
    let mut expected = Vec::new();
    for case in table["tolerations"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let tolerations: Vec<&Value> = case["toleration"]
            .as_object()
            .map(|_| &case["toleration"])
            .into_iter()
            .collect();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "tolerations"},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                     "tolerations": tolerations}
        });
        let created = kubectl(&["create", "-f", "-"], Some(&pod));
        if case["admitted"] == json!(false) {
            if refuses_invalid {
                assert!(
                    created.is_err(),
                    "{backend}: the apiserver admitted {name}: {created:?}"
                );
            }
            continue;
        }
        created.unwrap_or_else(|e| panic!("{backend}: create pod {name}: {e}"));
        expected.push((name.to_string(), case["tolerates"].as_bool().unwrap()));
    }
    let placed = |name: &str| -> bool {
        let pod: Value = serde_json::from_str(
            &kubectl(
                &["get", "pod", name, "-n", "tolerations", "-o", "json"],
                None,
            )
            .unwrap(),
        )
        .unwrap();
        pod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
    };
    wait_until(
        &format!("{backend}: the tolerating pods to be placed"),
        Duration::from_secs(60),
        || {
            expected
                .iter()
                .filter(|(_, t)| *t)
                .all(|(n, _)| placed(n))
                .then_some(())
        },
    );
    // The scheduler has had its chance at every pod: those left are those it refused.
    std::thread::sleep(Duration::from_secs(3));
    let answers: Vec<(String, bool)> = expected
        .iter()
        .map(|(n, _)| (n.clone(), placed(n)))
        .collect();
    assert_eq!(
        answers, expected,
        "{backend}: (pod, placed on the tainted node)"
    );
}

/// Creates the table's pods and one budget per case (minAvailable 0, so the count is all that
/// is judged), and checks each budget's `status.expectedPods` against the pods the disruption
/// controller should count.
fn budgets_count_their_pods(backend: &str, kubectl: Kubectl) {
    let table = cases();
    let budgets = &table["budgets"];
    for namespace in ["shop", "other"] {
        create_namespace(kubectl, namespace);
    }
    for pod in budgets["pods"].as_array().unwrap() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod["name"], "namespace": pod["namespace"], "labels": pod["labels"]},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                     "tolerations": [{"operator": "Exists"}]}
        });
        kubectl(&["create", "-f", "-"], Some(&pod)).unwrap();
    }
    let mut expected = Vec::new();
    for case in budgets["cases"].as_array().unwrap() {
        let mut spec = json!({"minAvailable": 0});
        if !case["selector"].is_null() {
            spec["selector"] = case["selector"].clone();
        }
        let budget = json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": case["name"], "namespace": budgets["namespace"]},
            "spec": spec
        });
        kubectl(&["create", "-f", "-"], Some(&budget)).unwrap();
        expected.push((
            case["name"].as_str().unwrap().to_string(),
            case["controller"].as_array().unwrap().len() as i64,
        ));
    }
    let counted = || -> Vec<(String, Option<i64>)> {
        let list: Value = serde_json::from_str(
            &kubectl(&["get", "pdb", "-n", "shop", "-o", "json"], None).unwrap(),
        )
        .unwrap();
        let mut out: Vec<(String, Option<i64>)> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["metadata"]["name"].as_str().unwrap().to_string(),
                    b["status"]["expectedPods"].as_i64(),
                )
            })
            .collect();
        out.sort();
        out
    };
    expected.sort();
    let want: Vec<(String, Option<i64>)> = expected
        .iter()
        .map(|(n, c)| (n.clone(), Some(*c)))
        .collect();
    let seen = wait_until(
        &format!("{backend}: every budget's status"),
        Duration::from_secs(60),
        || {
            let now = counted();
            now.iter().all(|(_, c)| c.is_some()).then_some(now)
        },
    );
    // Counts settle as the controller sees each pod; give it a moment to agree.
    let seen = if seen == want {
        seen
    } else {
        std::thread::sleep(Duration::from_secs(5));
        counted()
    };
    assert_eq!(seen, want, "{backend}: (budget, status.expectedPods)");
}

fn real_kubectl(
    cluster: &RealCluster,
) -> impl Fn(&[&str], Option<&Value>) -> Result<String, String> + '_ {
    move |args, stdin| {
        run(
            cluster.kubectl_bin(),
            &[
                "--kubeconfig",
                &cluster.admin_kubeconfig().display().to_string(),
            ],
            args,
            stdin,
        )
    }
}

fn sim_kubectl(
    sim: &SimProcess,
) -> impl Fn(&[&str], Option<&Value>) -> Result<String, String> + '_ {
    move |args, stdin| match stdin {
        None => {
            let out = rotor_e2e::kubectl(sim, args);
            result_of(out)
        }
        Some(body) => {
            let file = sim.dir().join(format!(
                "stdin-{}.json",
                body["metadata"]["name"].as_str().unwrap_or("x")
            ));
            std::fs::write(&file, body.to_string()).unwrap();
            let f = file.display().to_string();
            // rotor-sim serves no OpenAPI document for kubectl's client-side validation.
            let mut args: Vec<&str> = args
                .iter()
                .map(|a| if *a == "-" { f.as_str() } else { a })
                .collect();
            args.push("--validate=false");
            let out = rotor_e2e::kubectl(sim, &args);
            result_of(out)
        }
    }
}

fn run(
    bin: std::path::PathBuf,
    base: &[&str],
    args: &[&str],
    stdin: Option<&Value>,
) -> Result<String, String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(bin)
        .args(base)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    if let Some(body) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(body.to_string().as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("kubectl output");
    result_of(out)
}

/// kubectl's stdout when it succeeded, its stderr when it did not.
fn result_of(out: std::process::Output) -> Result<String, String> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// What budgets over pods with no controller allow, as the disruption controller computes it:
/// such pods count only for an integer `minAvailable` (of the pods, not of a workload's scale),
/// and a budget with neither field expects nothing, so it allows nothing (policy/v1 has no
/// default). Each budget's (expectedPods, desiredHealthy, disruptionsAllowed), made once three
/// bare pods run Ready.
fn budgets_over_bare_pods_allow_what_the_controller_computes(backend: &str, kubectl: Kubectl) {
    create_namespace(kubectl, "bare");
    for name in ["a", "b", "c"] {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "bare", "labels": {"app": "bare"}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                     "tolerations": [{"operator": "Exists"}]}
        });
        kubectl(&["create", "-f", "-"], Some(&pod)).unwrap();
    }
    // The budgets come once every pod is Ready: the disruption controller recounts only one
    // of the budgets a changed pod matches ("chose ... arbitrarily"), so budgets made before
    // would keep counts from before some pod was Ready.
    let ready = || -> usize {
        let list: Value = serde_json::from_str(
            &kubectl(&["get", "pods", "-n", "bare", "-o", "json"], None).unwrap(),
        )
        .unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while ready() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(ready(), 3, "{backend}: the three bare pods Ready");
    let cases = [
        ("min-one", json!({"minAvailable": 1}), (3, 1, 2)),
        ("min-half", json!({"minAvailable": "50%"}), (0, 0, 0)),
        ("max-one", json!({"maxUnavailable": 1}), (0, 0, 0)),
        ("neither", json!({}), (0, 0, 0)),
    ];
    for (name, rule, _) in &cases {
        let mut spec = rule.clone();
        spec["selector"] = json!({"matchLabels": {"app": "bare"}});
        let budget = json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "bare"},
            "spec": spec
        });
        kubectl(&["create", "-f", "-"], Some(&budget)).unwrap();
    }
    let want: Vec<(String, (i64, i64, i64))> = cases
        .iter()
        .map(|(name, _, counts)| (name.to_string(), *counts))
        .collect();
    let counted = || -> Vec<(String, (i64, i64, i64))> {
        let list: Value = serde_json::from_str(
            &kubectl(&["get", "pdb", "-n", "bare", "-o", "json"], None).unwrap(),
        )
        .unwrap();
        let status = |b: &Value, key: &str| b["status"][key].as_i64().unwrap_or(-1);
        let mut by_name: Vec<(String, (i64, i64, i64))> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["metadata"]["name"].as_str().unwrap().to_string(),
                    (
                        status(b, "expectedPods"),
                        status(b, "desiredHealthy"),
                        status(b, "disruptionsAllowed"),
                    ),
                )
            })
            .collect();
        by_name.sort_by_key(|(name, _)| cases.iter().position(|(n, ..)| n == name));
        by_name
    };
    // The controller counts the pods for each new budget within a few seconds.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut seen = counted();
    while seen != want && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        seen = counted();
    }
    assert_eq!(
        seen, want,
        "{backend}: (budget, (expected, desired, allowed))"
    );
}

/// A pod deleted and made again under its name (a StatefulSet's `web-0` coming back) is gone
/// to a drain that still holds the old one: its eviction and its forced deletion, sent with the
/// old UID as their precondition, answer 409 in the server's words, which the drainer must read
/// as `Gone` rather than retry, and the new pod is left alone.
fn a_pod_made_again_under_its_name_is_gone_to_the_drainer(
    backend: &str,
    kubectl: Kubectl,
    kubeconfig: &std::path::Path,
) {
    use rotor_drainer::drain::answers::EvictionOutcome;
    use rotor_drainer::drain::eviction_io::EvictionWire;
    use rotor_drainer::drain::pods::PodRef;

    create_namespace(kubectl, "remade");
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "remade"},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}
    });
    let uid = |kubectl: Kubectl| {
        kubectl(
            &[
                "-n",
                "remade",
                "get",
                "pod",
                "web-0",
                "-o",
                "jsonpath={.metadata.uid}",
            ],
            None,
        )
        .unwrap()
    };
    kubectl(&["create", "-f", "-"], Some(&pod)).unwrap();
    let old = uid(kubectl);
    kubectl(
        &[
            "-n",
            "remade",
            "delete",
            "pod",
            "web-0",
            "--grace-period=0",
            "--force",
            "--wait",
        ],
        None,
    )
    .unwrap();
    kubectl(&["create", "-f", "-"], Some(&pod)).unwrap();
    let new = uid(kubectl);
    assert_ne!(old, new, "{backend}: the pod was made again");

    let stale = PodRef {
        namespace: "remade".into(),
        name: "web-0".into(),
        uid: old,
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (evicted, forced) = runtime.block_on(async {
        let yaml = std::fs::read_to_string(kubeconfig).unwrap();
        let wire =
            EvictionWire::new(rotor_e2e::sim_cluster::client_from_kubeconfig_yaml(&yaml).await);
        (
            wire.send(&stale, None, false, None).await,
            wire.send(&stale, None, true, None).await,
        )
    });
    assert_eq!(evicted, EvictionOutcome::Gone, "{backend}: the eviction");
    assert_eq!(
        forced,
        EvictionOutcome::Gone,
        "{backend}: the forced deletion"
    );
    assert_eq!(uid(kubectl), new, "{backend}: the pod made again stays");
}

#[test]
fn the_real_control_plane_answers_the_shared_cases() {
    let cluster = RealCluster::start();
    cluster.add_nodes(&[FakeNode::new("tainted")]);
    let taint = &cases()["taint"];
    cluster.kubectl_ok(&[
        "taint",
        "nodes",
        "tainted",
        &format!(
            "{}={}:{}",
            taint["key"].as_str().unwrap(),
            taint["value"].as_str().unwrap(),
            taint["effect"].as_str().unwrap()
        ),
    ]);
    let kubectl = real_kubectl(&cluster);
    tolerations_are_judged("real control plane", &kubectl, true);
    budgets_count_their_pods("real control plane", &kubectl);
    budgets_over_bare_pods_allow_what_the_controller_computes("real control plane", &kubectl);
    a_pod_made_again_under_its_name_is_gone_to_the_drainer(
        "real control plane",
        &kubectl,
        cluster.admin_kubeconfig(),
    );
}

#[test]
fn rotor_sim_answers_the_shared_cases() {
    let sim = SimProcess::start(scenario("semantics.yaml"));
    // The scenario's only node carries the case table's taint.
    let node = kubectl_json(&sim, &["get", "nodes"]);
    let taints = &node["items"][0]["spec"]["taints"];
    assert_eq!(taints[0]["key"], cases()["taint"]["key"], "{taints}");
    let kubectl = sim_kubectl(&sim);
    tolerations_are_judged("rotor-sim", &kubectl, false);
    budgets_count_their_pods("rotor-sim", &kubectl);
    budgets_over_bare_pods_allow_what_the_controller_computes("rotor-sim", &kubectl);
    a_pod_made_again_under_its_name_is_gone_to_the_drainer("rotor-sim", &kubectl, sim.kubeconfig());
}
