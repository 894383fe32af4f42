//! `rotor-sim demo` end to end: the real rotor-sim, rotor-drainer and rotor-selector rotate every
//! node of examples/scenarios/demo.yaml, and the machine-readable summary (`--summary-json`)
//! says so: every outdated node replaced, no budget violated, the node of the do-not-disrupt job
//! held until the job finished, each RotationPolicy's pool within its budget. The AWS variant
//! does the same against moto when it is installed.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rotor_e2e::moto::require_moto;
use rotor_e2e::{TestDir, binary, describe_output, run_with_timeout, workspace_root};
use rotor_sim::scenario::{Scenario, parse_duration};
use serde_json::Value;

const DEMO_TIMEOUT: Duration = Duration::from_secs(240);

fn demo_scenario() -> std::path::PathBuf {
    workspace_root().join("examples/scenarios/demo.yaml")
}

/// Nodes in the scenario, and the do-not-disrupt job's work once its node is tainted.
fn scenario_facts(path: &Path) -> (u64, Duration) {
    let s = Scenario::load(path).expect("demo.yaml loads");
    let nodes = s.node_groups.iter().map(|g| u64::from(g.size)).sum();
    let job = s
        .workloads
        .iter()
        .find(|w| {
            w.annotations
                .get("rotor.dev/do-not-disrupt")
                .map(String::as_str)
                == Some("true")
        })
        .expect("demo.yaml has a do-not-disrupt workload");
    let work = parse_duration(&job.annotations["demo.rotor.dev/finishes-after"])
        .expect("finishes-after is a duration");
    (nodes, work)
}

/// Runs the demo with `extra` flags; returns (stdout, summary).
fn run_demo(dir: &TestDir, extra: &[&str]) -> (String, Value) {
    let summary_path = dir.join("summary.json");
    let out = run_with_timeout(
        Command::new(binary("rotor-sim"))
            .current_dir(workspace_root())
            .arg("demo")
            .arg("--plain")
            .arg("--scenario")
            .arg(demo_scenario())
            .arg("--summary-json")
            .arg(&summary_path)
            .args(extra),
        DEMO_TIMEOUT,
    );
    let what = describe_output("rotor-sim demo", &out);
    assert_eq!(out.status.code(), Some(0), "{what}");
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(&summary_path)
            .unwrap_or_else(|e| panic!("no summary: {e}\n{what}")),
    )
    .expect("the summary is JSON");
    (String::from_utf8_lossy(&out.stdout).into_owned(), summary)
}

/// What every complete rotation of demo.yaml must show, whatever the provider.
fn assert_complete_rotation(stdout: &str, s: &Value, speed: f64) {
    let (nodes, work) = scenario_facts(&demo_scenario());
    assert_eq!(s["completed"], true, "{s:#}");
    assert_eq!(
        s["nodesOutdatedAtStart"], nodes,
        "every node starts outdated"
    );
    assert_eq!(s["nodesReplaced"], nodes, "{s:#}");
    assert_eq!(s["nodesOutdatedNow"], 0);
    assert_eq!(s["budgetViolations"], 0, "{s:#}");
    assert!(s["evictions"].as_u64().unwrap() > 0, "{s:#}");
    assert!(s["selectorRuns"].as_u64().unwrap() >= 1);
    assert_eq!(s["selectorFailures"], 0, "{s:#}");
    let makespan = s["makespanSeconds"].as_f64().unwrap();

    // Per node, in order: tainted, drain started, drained, replaced, all within the makespan.
    let timeline = s["timeline"].as_array().unwrap();
    assert_eq!(timeline.len() as u64, nodes);
    for row in timeline {
        let t = |k: &str| {
            row[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{k} missing in {row}"))
        };
        let (tainted, started, drained, replaced) = (
            t("taintedAt"),
            t("drainStartedAt"),
            t("drainedAt"),
            t("replacedAt"),
        );
        assert!(
            tainted <= started && started <= drained && drained <= replaced && replaced <= makespan,
            "{row}"
        );
    }

    // The job's node waited for the job: drained only after its work. Either it started and was
    // blocked, naming the job, or (when other nodes could go first) it started only once the
    // job had finished: rotor puts a node whose drain would block after the others.
    let finished = s["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["what"]
                .as_str()
                .is_some_and(|w| w.starts_with("job jobs/nightly-report on "))
        })
        .unwrap_or_else(|| panic!("the job never finished: {s:#}"));
    let job_node = finished["what"].as_str().unwrap()["job jobs/nightly-report on ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let finished_at = finished["at"].as_f64().unwrap();
    let held = timeline
        .iter()
        .find(|r| r["node"] == job_node.as_str())
        .unwrap_or_else(|| panic!("the job's node {job_node} is not in the timeline: {s:#}"));
    let waited = held["drainedAt"].as_f64().unwrap() - held["taintedAt"].as_f64().unwrap();
    assert!(
        waited >= work.as_secs_f64() / speed - 0.5,
        "drained {waited:.1}s after its taint, before the job's {work:?} of work: {held}"
    );
    let blocked_by_job = format!("{job_node}: blocked: pod jobs/nightly-report");
    let named = s["events"].as_array().unwrap().iter().any(|e| {
        e["what"]
            .as_str()
            .is_some_and(|w| w.starts_with(&blocked_by_job) && w.contains("do-not-disrupt"))
    });
    let started_after = held["drainStartedAt"].as_f64().unwrap() >= finished_at - 0.5;
    assert!(
        named || started_after,
        "the job's node started draining before the job finished without naming it as the blocker: {held} {s:#}"
    );
    assert_pools_kept_their_budgets(s);
    // Plain output: lines, no terminal control sequences, and the summary at the end.
    assert!(!stdout.contains('\x1b'), "plain output has escape codes");
    assert!(stdout.contains("rotation complete"), "{stdout}");
    assert!(stdout.contains("timeline (seconds since the upgrade)"));
    assert!(stdout.contains("drain taint added"), "{stdout}");
}

/// Each of the scenario's RotationPolicies (demo.yaml: `system` one node at a time, `general`
/// two, under the demo's three at once, while the selector taints three or more): the drainer
/// wrote its pool's status, counting the groups' nodes its selector matches, and had as many of
/// the pool's nodes draining at once as its budget allows, never more, counted from each
/// drain's cordon to the end of its draining (a drained node waiting to be retired no longer
/// counts; the demo's samples, 0.2 s apart, see less than the drainer counts, never more).
fn assert_pools_kept_their_budgets(s: &Value) {
    let scenario = Scenario::load(&demo_scenario()).expect("demo.yaml loads");
    assert!(
        !scenario.rotation_policies.is_empty(),
        "demo.yaml shows pools"
    );
    for policy in &scenario.rotation_policies {
        let name = policy.metadata.name.as_deref().unwrap();
        let spec = &policy.fields["spec"];
        let selector = spec["nodeSelector"]["matchLabels"]
            .as_object()
            .expect("demo.yaml's policies select by matchLabels");
        let budget: usize = spec["budgets"][0]["nodes"]
            .as_str()
            .and_then(|n| n.parse().ok())
            .expect("demo.yaml's policies have one budget of a node count");
        let groups: Vec<&str> = scenario
            .node_groups
            .iter()
            .filter(|g| {
                selector
                    .iter()
                    .all(|(k, v)| g.template.labels.get(k).map(String::as_str) == v.as_str())
            })
            .map(|g| g.name.as_str())
            .collect();
        let size: u32 = scenario
            .node_groups
            .iter()
            .filter(|g| groups.contains(&g.name.as_str()))
            .map(|g| g.size)
            .sum();
        let pool = s["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("pool {name} missing from the summary: {s:#}"));
        assert_eq!(
            pool["status"]["nodes"], size,
            "pool {name} counts its groups' nodes ({groups:?}): {pool}"
        );
        assert_eq!(
            pool["status"]["outOfDate"], 0,
            "the summary shows pool {name} as the drainer wrote it once rotated: {pool}"
        );
        let draining: Vec<(f64, f64)> = s["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|row| groups.contains(&row["group"].as_str().unwrap()))
            .map(|row| {
                (
                    row["drainStartedAt"].as_f64().unwrap(),
                    row["drainedAt"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(draining.len() as u32, size, "{s:#}");
        let most = draining
            .iter()
            .map(|&(at, _)| {
                draining
                    .iter()
                    .filter(|&&(start, end)| start <= at && at < end)
                    .count()
            })
            .max()
            .unwrap_or(0);
        assert_eq!(
            most, budget,
            "pool {name} had {most} nodes draining at once at most, its budget {budget}: {s:#}"
        );
    }
}

#[test]
fn the_demo_rotates_every_node_without_a_budget_violation() {
    let dir = TestDir::new("demo");
    let (stdout, s) = run_demo(&dir, &[]);
    assert_eq!(s["provider"], "kubernetes");
    assert_complete_rotation(&stdout, &s, 1.0);
    assert!(
        stdout.contains("control plane upgraded from v1.33.4 to v1.34.0"),
        "{stdout}"
    );
    println!(
        "demo makespan {}s, evictions {}, selector runs {}",
        s["makespanSeconds"], s["evictions"], s["selectorRuns"]
    );
}

#[test]
fn the_aws_demo_rotates_on_image_drift_in_moto() {
    require_moto("the AWS demo test");
    let dir = TestDir::new("demo-aws");
    let (stdout, s) = run_demo(&dir, &["--provider", "aws", "--speed", "2"]);
    assert_eq!(s["provider"], "aws");
    assert_complete_rotation(&stdout, &s, 2.0);
    let timeline = s["timeline"].as_array().unwrap();
    assert!(timeline.iter().all(|r| r["reason"] == "image"), "{s:#}");
    // Every replaced node's instance was terminated in its group, which launched a new one.
    let terminated = stdout.matches(" terminated in group ").count();
    assert_eq!(terminated, timeline.len(), "{stdout}");
}

#[test]
fn a_shell_selector_can_drive_the_demo() {
    // examples/selectors/kubelet-behind.sh taints with kubectl: the taint is the whole interface.
    let dir = TestDir::new("demo-shell");
    let (stdout, s) = run_demo(
        &dir,
        &["--selector-command", "examples/selectors/kubelet-behind.sh"],
    );
    assert_complete_rotation(&stdout, &s, 1.0);
    assert!(stdout.contains("selector run 1: printed"), "{stdout}");
}

#[test]
fn the_workload_example_validates_against_the_kubernetes_schemas() {
    let file = workspace_root().join("examples/workloads/shop.yaml");
    let out = match Command::new("kubernetes-validate")
        .args(["--strict", "-k", "1.33.0"])
        .arg(&file)
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!(
            "kubernetes-validate cannot run ({e}); install it: python3 -m pip install kubernetes-validate"
        ),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Unknown kinds are only warnings, so every object must be reported as passed.
    let passed = text
        .lines()
        .filter(|l| l.contains(" passed for resource "))
        .count();
    assert!(
        out.status.success() && !text.contains("WARN") && passed == 4,
        "{text}"
    );
    for kind in [
        "deployment/web",
        "poddisruptionbudget/web",
        "job/nightly-report",
    ] {
        assert!(text.contains(kind), "{text}");
    }
}

#[test]
fn bad_flags_and_missing_binaries_exit_2_before_starting() {
    let run = |args: &[&str]| {
        let out = run_with_timeout(
            Command::new(binary("rotor-sim"))
                .current_dir(workspace_root())
                .arg("demo")
                .args(args),
            Duration::from_secs(30),
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--speed", "0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("speed"), "{err}");

    let (code, err) = run(&["--drainer-bin", "/nonexistent/rotor-drainer"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("rotor-drainer not found at /nonexistent/rotor-drainer"),
        "{err}"
    );

    let (code, err) = run(&["--to-version", "v1.33.9"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("higher minor version"), "{err}");

    let (code, err) = run(&["--scenario", "/nonexistent.yaml"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("/nonexistent.yaml"), "{err}");
}
