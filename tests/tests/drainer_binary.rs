//! The real rotor-drainer binary against the real rotor-sim binary, driven with real kubectl.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rotor_e2e::{
    SimProcess, binary, http_get, kubectl_ok, node_phase, run_with_timeout, scenario,
    taint_first_node, wait_until,
};

struct Drainer(Child);

impl Drop for Drainer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_drainer(sim: &SimProcess, extra: &[&str]) -> Drainer {
    let log = std::fs::File::create(sim.dir().join("rotor-drainer.log")).unwrap();
    let child = Command::new(binary("rotor-drainer"))
        .arg("--kubeconfig")
        .arg(sim.kubeconfig())
        .args([
            "run",
            "--admin-listen",
            "127.0.0.1:0",
            "--lease-namespace",
            "rotor-system",
            "--identity",
            "e2e",
            "--settle",
            "300ms",
        ])
        .args(extra)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("rotor-drainer starts");
    Drainer(child)
}

/// The drainer's `/metrics`, at the address its log says the admin server listens on.
fn scrape_metrics(sim: &SimProcess) -> String {
    let log = std::fs::read_to_string(sim.dir().join("rotor-drainer.log")).unwrap();
    let addr = log
        .lines()
        .filter(|l| l.contains("admin server listening"))
        .find_map(|l| l.split("addr=").nth(1)?.split_whitespace().next())
        .unwrap_or_else(|| panic!("the drainer log names no admin address:\n{log}"))
        .to_string();
    let r = http_get(&addr, "/metrics").expect("GET /metrics");
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

#[test]
fn the_binary_drains_a_node_tainted_with_kubectl_and_status_reports_it() {
    let sim = SimProcess::start(scenario("drain.yaml"));
    let _drainer = start_drainer(&sim, &[]);
    let node = taint_first_node(&sim);
    wait_until("the node to be drained", Duration::from_secs(60), || {
        (node_phase(&sim, &node) == "drained").then_some(())
    });

    let unschedulable = kubectl_ok(
        &sim,
        &["get", "node", &node, "-o", "jsonpath={.spec.unschedulable}"],
    );
    assert_eq!(unschedulable.trim(), "true");
    let stats = sim.stats();

    // /metrics tells the same story as the node: one drain finished as drained, its duration
    // observed once, every eviction the simulator accepted counted as evicted, the node in
    // phase drained, nothing refused any more.
    let metrics = scrape_metrics(&sim);
    let value = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in /metrics:\n{metrics}"))
    };
    assert_eq!(value("rotor_drainer_drains_total{result=\"drained\"}"), 1.0);
    assert_eq!(value("rotor_drainer_drain_duration_seconds_count"), 1.0);
    let accepted = stats["evictions"]["success"].as_u64().unwrap() as f64;
    assert!(accepted >= 1.0, "{stats}");
    assert_eq!(
        value("rotor_drainer_evictions_total{outcome=\"evicted\"}"),
        accepted
    );
    assert_eq!(value("rotor_drainer_nodes{phase=\"drained\"}"), 1.0);
    assert_eq!(value("rotor_drainer_nodes{phase=\"evicting\"}"), 0.0);
    assert_eq!(value("rotor_drainer_budget_blocked_pods"), 0.0);
    assert_eq!(stats["budgetViolations"], 0, "{stats}");
    assert!(
        stats["requests"].get("delete pods").is_none(),
        "evicted, never deleted: {stats}"
    );

    let out = run_with_timeout(
        Command::new(binary("rotor-drainer"))
            .arg("--kubeconfig")
            .arg(sim.kubeconfig())
            .arg("status"),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with(&node))
        .unwrap_or_else(|| panic!("no row for {node}: {text}"));
    assert!(row.contains("drained") && row.contains("manual"), "{row}");

    let out = run_with_timeout(
        Command::new(binary("rotor-drainer"))
            .arg("--kubeconfig")
            .arg(sim.kubeconfig())
            .args(["status", "--output", "json"]),
        Duration::from_secs(30),
    );
    let status: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("status --output json is JSON");
    // No health gate is configured and nothing halted, so the rotation record has neither.
    assert_eq!(
        status["rotation"]["healthGate"],
        serde_json::Value::Null,
        "{status}"
    );
    assert_eq!(
        status["rotation"]["halted"],
        serde_json::Value::Null,
        "{status}"
    );
    let rows = &status["nodes"];
    assert_eq!(rows.as_array().unwrap().len(), 1);
    assert_eq!(rows[0]["node"], node.as_str());
    assert_eq!(rows[0]["phase"], "drained");
}

#[test]
fn bad_flags_exit_2_before_touching_the_cluster() {
    let sim = SimProcess::start(scenario("drain.yaml"));
    let before = sim.stats()["requestsTotal"].as_u64().unwrap();
    for flags in [
        &["--max-concurrent", "0"][..],
        &["--drain-timeout", "10m", "--force-after", "1h"][..],
        &["--max-unavailable", "120%"][..],
        &["--window", "at night"][..],
        &["--health-url", "healthz:8080"][..],
        &["--lease-duration", "0s"][..],
        &["--identity", ""][..],
        &["--notify-cluster", "prod"][..],
        &["--drain-timeout", "30m", "--park-blocked-after", "45m"][..],
        &[
            "--health-prometheus",
            "http://p:9090",
            "--health-alert-selector",
            "severity=critical",
        ][..],
    ] {
        let out = run_with_timeout(
            Command::new(binary("rotor-drainer"))
                .arg("--kubeconfig")
                .arg(sim.kubeconfig())
                .args(["run", "--admin-listen", "127.0.0.1:0"])
                .args(flags),
            Duration::from_secs(30),
        );
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let flag = flags.iter().rev().find(|f| f.starts_with("--")).unwrap();
        assert!(
            err.contains(flag.trim_start_matches('-')),
            "{flags:?} should name the flag: {err}"
        );
    }
    // A kubeconfig that does not load, or names no such context, is bad input too, for every
    // command.
    for command in [
        &["run", "--admin-listen", "127.0.0.1:0"][..],
        &["status"],
        &["resume"],
    ] {
        for kube in [
            &["--kubeconfig", "/nonexistent/kubeconfig"][..],
            &[
                "--kubeconfig",
                sim.kubeconfig().to_str().unwrap(),
                "--context",
                "nope",
            ],
        ] {
            let out = run_with_timeout(
                Command::new(binary("rotor-drainer"))
                    .args(kube)
                    .args(command),
                Duration::from_secs(30),
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{kube:?} {command:?}: {err}");
            assert!(
                err.contains("/nonexistent/kubeconfig") || err.contains("nope"),
                "{kube:?} {command:?} should name what did not load: {err}"
            );
        }
    }
    assert_eq!(
        sim.stats()["requestsTotal"].as_u64().unwrap(),
        before,
        "no request reached the cluster"
    );
}
