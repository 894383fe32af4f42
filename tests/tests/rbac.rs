//! The RBAC that `deploy/` ships is sufficient, and necessary where it matters: the simulator
//! enforces the rules `kubectl kustomize deploy/overlays/kubernetes` renders, and the real
//! binaries run with their own ServiceAccounts' tokens.
//!
//! - a full rotation (control plane raised, the selector run as its CronJob would, the drainer
//!   draining) completes with no budget violation and not one 403;
//! - without `patch nodes` the selector exits non-zero naming the forbidden verb and resource;
//! - without `create pods/eviction` the drainer evicts nothing and says why;
//! - without `list`/`watch` on the apps workloads the gate cannot tell whether evicted
//!   workloads are Ready again, so it holds every drain (fails closed) and says why;
//! - without `list`/`watch` on `rotationpolicies` the drainer cannot tell which nodes a policy
//!   governs, so it holds every drain (fails closed) and names the refused resource. (The full
//!   rotation above runs under a RotationPolicy for every node, whose status the drainer
//!   writes; that the status rule is needed is shown on the real control plane,
//!   `real_rbac.rs`.)

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rotor_e2e::{
    SimOptions, SimProcess, TestDir, binary, describe_output, kubectl_create, kubectl_json,
    kubectl_ok, kustomize, node_phase, run_with_timeout, taint_first_node, wait_until,
    workspace_root,
};
use serde_json::{Value, json};

const NS: &str = "rotor-system";
/// The scenario of `examples/rotate-demo.sh`: 3 nodes on kubelet v1.32.9, PDB-protected
/// workloads, a StatefulSet, a DaemonSet, a bare pod.
const SCENARIO: &str = "examples/scenarios/small.yaml";
const NEW_VERSION: &str = "v1.34.1";

/// The rendered overlay, with `edit` applied, written where the simulator can read it.
fn policy_file(dir: &TestDir, edit: impl FnOnce(String) -> String) -> PathBuf {
    let path = dir.join("rbac.yaml");
    std::fs::write(&path, edit(kustomize("deploy/overlays/kubernetes"))).expect("write policy");
    path
}

/// Replaces `from` with `to` inside the one document of `kind` named `name`; panics unless
/// `from` occurs there exactly once, so a change in the manifests cannot make the test vacuous.
fn edit_document(stream: &str, kind: &str, name: &str, from: &str, to: &str) -> String {
    let mut found = 0;
    let docs: Vec<String> = stream
        .split("\n---\n")
        .map(|doc| {
            let is_it = doc.lines().any(|l| l == format!("kind: {kind}"))
                && doc.lines().any(|l| l == format!("  name: {name}"));
            if !is_it {
                return doc.to_string();
            }
            found += 1;
            assert_eq!(
                doc.matches(from).count(),
                1,
                "{kind} {name} should contain exactly one {from:?}:\n{doc}"
            );
            doc.replacen(from, to, 1)
        })
        .collect();
    assert_eq!(found, 1, "one {kind} named {name} in the rendered overlay");
    docs.join("\n---\n")
}

fn start_sim(policy: PathBuf) -> SimProcess {
    SimProcess::start_with(
        workspace_root().join(SCENARIO),
        SimOptions {
            authorization: Some(policy),
            ..SimOptions::default()
        },
    )
}

struct Drainer {
    child: Child,
    log: PathBuf,
}

impl Drainer {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Drainer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("rotor-drainer log {}:\n{}", self.log.display(), self.log());
        }
    }
}

/// rotor-drainer as the Deployment runs it (`--lease-name` must match the Role's
/// resourceNames), authenticated as the rotor-drainer ServiceAccount.
fn start_drainer(sim: &SimProcess) -> Drainer {
    let log = sim.dir().join("rotor-drainer.log");
    let child = Command::new(binary("rotor-drainer"))
        .arg("--kubeconfig")
        .arg(sim.service_account_kubeconfig(NS, "rotor-drainer"))
        .args([
            "run",
            "--admin-listen",
            "127.0.0.1:0",
            "--lease-namespace",
            NS,
        ])
        .args([
            "--lease-name",
            "rotor-drainer",
            "--identity",
            "e2e",
            "--settle",
            "1s",
        ])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("drainer log"))
        .spawn()
        .expect("rotor-drainer starts");
    Drainer { child, log }
}

/// One run of the selector's CronJob, authenticated as the rotor-selector ServiceAccount.
fn run_selector(sim: &SimProcess) -> Output {
    run_with_timeout(
        Command::new(binary("rotor-selector"))
            .arg("--kubeconfig")
            .arg(sim.service_account_kubeconfig(NS, "rotor-selector"))
            .args(["--provider", "kubernetes", "--max-tainted", "1"])
            .env("NO_COLOR", "1"),
        Duration::from_secs(60),
    )
}

/// The simulator raises its control plane and its node group's template, as a cloud upgrade
/// would (what examples/rotate-demo.sh does).
fn upgrade(sim: &SimProcess) {
    sim.post(
        "/sim/v1/control-plane-version",
        &json!({"version": NEW_VERSION}),
    );
    sim.post(
        "/sim/v1/node-groups/general/template",
        &json!({"kubeletVersion": NEW_VERSION, "image": "ami-0bbbbbbbbbbbbbbb2"}),
    );
}

fn old_kubelets(sim: &SimProcess) -> usize {
    kubectl_ok(
        sim,
        &[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.status.nodeInfo.kubeletVersion}{\"\\n\"}{end}",
        ],
    )
    .lines()
    .filter(|v| !v.trim().is_empty() && v.trim() != NEW_VERSION)
    .count()
}

fn authorization_stats(sim: &SimProcess) -> Value {
    let stats = sim.stats();
    assert!(
        stats["authorization"].is_object(),
        "the simulator enforces a policy, so its stats report denials: {stats}"
    );
    stats["authorization"].clone()
}

/// The simulator enforcing the shipped RBAC less one `rule` of the drainer's ClusterRole (as
/// rendered), the drainer running under it, and one node tainted for draining.
fn drainer_without(name: &str, rule: &str) -> (TestDir, SimProcess, Drainer, String) {
    let dir = TestDir::new(name);
    let policy = policy_file(&dir, |s| {
        edit_document(&s, "ClusterRole", "rotor-drainer", rule, "")
    });
    let sim = start_sim(policy);
    let drainer = start_drainer(&sim);
    let node = taint_first_node(&sim);
    (dir, sim, drainer, node)
}

#[test]
fn the_shipped_rbac_is_enough_for_a_full_rotation_without_a_single_403() {
    let dir = TestDir::new("rbac-rotation");
    let sim = start_sim(policy_file(&dir, |s| s));
    // Every node under one policy (as the flags would have it), so the drainer also reads
    // RotationPolicies and writes one's status under the shipped rules.
    kubectl_create(
        &sim,
        "apiVersion: rotor.dev/v1alpha1\nkind: RotationPolicy\nmetadata: {name: every-node}\n\
         spec: {nodeSelector: {}, budgets: [{nodes: \"1\"}]}\n",
    );
    let drainer = start_drainer(&sim);
    upgrade(&sim);

    let started = Instant::now();
    let deadline = Duration::from_secs(240);
    let mut selector_runs = 0;
    let mut last_run = None::<Instant>;
    while old_kubelets(&sim) > 0 {
        assert!(
            started.elapsed() < deadline,
            "rotation incomplete after {deadline:?}: {} old nodes left; denials {}",
            old_kubelets(&sim),
            authorization_stats(&sim)
        );
        // The CronJob, every 3 seconds here.
        if last_run.is_none_or(|t| t.elapsed() >= Duration::from_secs(3)) {
            let out = run_selector(&sim);
            assert!(
                out.status.success(),
                "{}",
                describe_output("rotor-selector", &out)
            );
            selector_runs += 1;
            last_run = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let took = started.elapsed();

    let stats = sim.stats();
    let authz = authorization_stats(&sim);
    assert_eq!(authz["forbidden"], 0, "403s during the rotation: {authz}");
    assert_eq!(
        authz["unauthorized"], 0,
        "401s during the rotation: {authz}"
    );
    assert_eq!(stats["budgetViolations"], 0, "{stats}");
    // The identities did the work: the drainer evicted, the selector tainted.
    assert!(
        stats["evictions"]["success"].as_u64().unwrap_or(0) > 0,
        "no eviction succeeded: {stats}"
    );
    assert!(drainer.log().contains("leading"), "{}", drainer.log());
    let policy = kubectl_json(&sim, &["get", "rotationpolicy", "every-node", "-o", "json"]);
    assert_eq!(
        policy["status"]["observedGeneration"], 1,
        "the drainer writes the policy's status: {policy}"
    );
    // What an operator runs in the drainer's pod when it pages (`kubectl exec ... --`):
    // `status` reads the rotation record, `resume` reads it first, under the same identity.
    for command in ["status", "resume"] {
        let out = run_with_timeout(
            Command::new(binary("rotor-drainer"))
                .arg("--kubeconfig")
                .arg(sim.service_account_kubeconfig(NS, "rotor-drainer"))
                .args([command, "--lease-namespace", NS])
                .env("NO_COLOR", "1"),
            Duration::from_secs(60),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("cannot read"),
            "{}",
            describe_output(&format!("rotor-drainer {command}"), &out)
        );
    }
    let authz = authorization_stats(&sim);
    assert_eq!(authz["forbidden"], 0, "403s to status or resume: {authz}");
    for account in ["rotor-drainer", "rotor-selector"] {
        let user = format!("system:serviceaccount:{NS}:{account}");
        assert!(
            authz["allowedByUser"][&user].as_u64().unwrap_or(0) > 0,
            "{user} made no request: {authz}"
        );
    }
    eprintln!(
        "rotation with the shipped RBAC: {:.1}s, {selector_runs} selector runs, {} evictions, 0 denials",
        took.as_secs_f64(),
        stats["evictions"]["success"]
    );
}

#[test]
fn without_patch_nodes_the_selector_fails_naming_the_forbidden_verb_and_resource() {
    let dir = TestDir::new("rbac-selector");
    let policy = policy_file(&dir, |s| {
        edit_document(
            &s,
            "ClusterRole",
            "rotor-selector",
            "  - nodes\n  verbs:\n  - get\n  - list\n  - patch\n",
            "  - nodes\n  verbs:\n  - get\n  - list\n",
        )
    });
    let sim = start_sim(policy);
    upgrade(&sim);

    let out = run_selector(&sim);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{}",
        describe_output("rotor-selector without patch nodes", &out)
    );
    assert!(
        stderr.contains("cannot patch resource \"nodes\"")
            || stderr.contains("cannot patch resource \\\"nodes\\\""),
        "stderr should name the forbidden verb and resource:\n{}",
        describe_output("rotor-selector", &out)
    );
    let tainted = kubectl_ok(
        &sim,
        &[
            "get",
            "nodes",
            "-o",
            "jsonpath={.items[*].spec.taints[*].key}",
        ],
    );
    assert!(!tainted.contains("rotor.dev/drain"), "{tainted}");
    let authz = authorization_stats(&sim);
    assert!(authz["forbidden"].as_u64().unwrap_or(0) >= 1, "{authz}");
    eprintln!(
        "rotor-selector without patch nodes: {}\n{stderr}",
        out.status
    );
}

#[test]
fn without_pods_eviction_the_drainer_evicts_nothing_and_says_why() {
    let (_dir, sim, drainer, node) = drainer_without(
        "rbac-drainer",
        "- apiGroups:\n  - \"\"\n  resources:\n  - pods/eviction\n  verbs:\n  - create\n",
    );

    let denial = "cannot create resource \"pods/eviction\" in API group \"\"".to_string();
    let line = wait_until(
        "the drainer to log a forbidden eviction",
        Duration::from_secs(60),
        || {
            drainer
                .log()
                .lines()
                .find(|l| l.contains(&denial) || l.contains(&denial.replace('"', "\\\"")))
                .map(str::to_string)
        },
    );
    assert!(
        line.contains("system:serviceaccount:rotor-system:rotor-drainer"),
        "{line}"
    );
    let stats = sim.stats();
    assert_eq!(
        stats["evictions"]["success"].as_u64().unwrap_or(0),
        0,
        "{stats}"
    );
    let authz = authorization_stats(&sim);
    let recent = authz["recentDenials"].to_string();
    assert!(recent.contains("pods/eviction"), "{authz}");
    let phase = node_phase(&sim, &node);
    assert_ne!(phase, "drained", "nothing could be evicted");
    // The node itself tells the operator what is wrong: phase blocked, with the denial and the
    // rule to grant as its blocker (what `rotor-drainer status` shows).
    let blocker = wait_until(
        "the node to record the denial as its blocker",
        Duration::from_secs(30),
        || {
            let out = kubectl_ok(
                &sim,
                &[
                    "get",
                    "node",
                    &node,
                    "-o",
                    "jsonpath={.metadata.annotations.rotor\\.dev/phase} {.metadata.annotations.rotor\\.dev/blocker}",
                ],
            );
            out.starts_with("blocked ").then_some(out)
        },
    );
    assert!(
        blocker.contains("refused the eviction")
            && blocker.contains(r#"cannot create resource "pods/eviction""#)
            && blocker.contains("deploy/base/drainer-rbac.yaml grants create on pods/eviction"),
        "{blocker}"
    );
    eprintln!("drainer log line: {line}\nnode phase and blocker: {blocker}");
}

#[test]
fn without_watching_workloads_the_gate_holds_every_drain_and_says_why() {
    let (_dir, sim, drainer, node) = drainer_without(
        "rbac-gate",
        "- apiGroups:\n  - apps\n  resources:\n  - replicasets\n  - deployments\n  - statefulsets\n  verbs:\n  - list\n  - watch\n",
    );
    // The gate cannot tell whether workloads are Ready, so no drain starts (even the first:
    // a new leader does not know what its predecessor evicted), and the log says why.
    let line = wait_until(
        "the drainer to log why the gate holds",
        Duration::from_secs(30),
        || {
            drainer
                .log()
                .lines()
                .find(|l| l.contains("drains held") && l.contains("gate check failed"))
                .map(str::to_string)
        },
    );
    assert!(
        line.contains("forbidden") && line.contains(&node),
        "the held line should name the denial and the node: {line}"
    );
    std::thread::sleep(Duration::from_secs(2));
    let phase = node_phase(&sim, &node);
    assert_eq!(phase, "", "no drain may start");
    let authz = authorization_stats(&sim);
    let recent = authz["recentDenials"].to_string();
    assert!(
        ["deployments", "replicasets", "statefulsets"]
            .iter()
            .any(|r| recent.contains(r)),
        "{authz}"
    );
    eprintln!("drainer log line: {line}");
}

#[test]
fn without_watching_rotation_policies_the_drainer_holds_every_drain_and_says_why() {
    let (_dir, sim, drainer, node) = drainer_without(
        "rbac-policies",
        "- apiGroups:\n  - rotor.dev\n  resources:\n  - rotationpolicies\n  verbs:\n  - list\n  - watch\n",
    );
    // A refusal is not "no policies": a policy tighter than the flags might exist, so no drain
    // starts, and the log names the resource the drainer may not list.
    let line = wait_until(
        "the drainer to log the refused RotationPolicy list",
        Duration::from_secs(30),
        || {
            drainer
                .log()
                .lines()
                .find(|l| {
                    l.contains("cannot list resource \"rotationpolicies\"")
                        || l.contains("cannot list resource \\\"rotationpolicies\\\"")
                })
                .map(str::to_string)
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    let phase = node_phase(&sim, &node);
    assert_eq!(phase, "", "no drain may start: {line}");
    let authz = authorization_stats(&sim);
    let recent = authz["recentDenials"].to_string();
    assert!(recent.contains("rotationpolicies"), "{authz}");
    eprintln!("drainer log line: {line}");
}

#[test]
fn an_invalid_rbac_object_exits_2_naming_the_document_and_the_reason() {
    let dir = TestDir::new("rbac-invalid");
    // The mistake that shipped in ektopistis's chart: a misspelled RBAC apiVersion.
    let policy = policy_file(&dir, |s| {
        edit_document(
            &s,
            "ClusterRole",
            "rotor-selector",
            "apiVersion: rbac.authorization.k8s.io/v1\n",
            "apiVersion: rbac.authorization.k8s.io/v1beta2\n",
        )
    });
    let rendered = std::fs::read_to_string(&policy).expect("read policy");
    let index = rendered
        .split("\n---\n")
        .position(|d| d.contains("v1beta2"))
        .expect("the edited document")
        + 1;
    let serve = |extra: &[&std::ffi::OsStr]| {
        run_with_timeout(
            Command::new(binary("rotor-sim"))
                .arg("serve")
                .arg("--scenario")
                .arg(workspace_root().join(SCENARIO))
                .args(extra),
            Duration::from_secs(30),
        )
    };
    let out = serve(&["--authorization".as_ref(), policy.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        describe_output("rotor-sim", &out)
    );
    assert!(
        stderr.contains(&format!(
            "document {index} (counting from 1) (ClusterRole rotor-selector)"
        )) && stderr.contains("\"rbac.authorization.k8s.io/v1beta2\""),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening on"));

    // Kubeconfigs per account need accounts.
    let out = serve(&["--kubeconfig-dir".as_ref(), dir.path().as_os_str()]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        describe_output("rotor-sim", &out)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--authorization"));
}
