//! The Helm chart in deploy/helm/rotor, without a cluster: `helm lint`, every example values
//! file rendered and compared object by object with its kustomize twin (one source of truth:
//! the two must not drift apart; the CRDs of the chart's crds/ included), the `policies`
//! values rendered as RotationPolicies, the values schema refusing what the binaries and the
//! CRD refuse, and the chart's version against the binaries'. `real_helm.rs` installs it on a
//! real control plane.
//!
//! Helm comes from `tools/build.sh`, like the control plane; without it these tests fail and
//! say how to build it.

use std::collections::BTreeMap;
use std::process::Command;

use rotor_e2e::helm::{CHART, examples, helm, helm_ok, template};
use rotor_e2e::manifests::ROTATION_POLICY_API_VERSION;
use rotor_e2e::{TestDir, binary, binary_dir, describe_output, kustomize, workspace_root};
use serde_json::Value;

/// The labels Helm adds to every object, which kustomize does not: they say who manages the
/// object, not what it is.
const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];

fn parse(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("the rendering parses");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The objects of a rendering by `kind/name`, made comparable: Helm's own labels dropped,
/// containers' arguments sorted (flags are order-free; the drainer's `run` is checked apart).
fn objects(yaml: &str) -> BTreeMap<String, Value> {
    parse(yaml)
        .into_iter()
        .map(|mut o| {
            if let Some(labels) = o["metadata"]["labels"].as_object_mut() {
                for l in HELM_LABELS {
                    labels.remove(l);
                }
            }
            for pointer in [
                "/spec/template/spec/containers",
                "/spec/jobTemplate/spec/template/spec/containers",
            ] {
                let containers = o.pointer_mut(pointer).and_then(Value::as_array_mut);
                for c in containers.into_iter().flatten() {
                    if let Some(args) = c["args"].as_array_mut() {
                        args.sort_by_key(|a| a.as_str().unwrap_or_default().to_string());
                    }
                }
            }
            let key = format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            );
            (key, o)
        })
        .collect()
}

/// What an example's header says it equals: `# kustomize: <dir>` and, optionally,
/// `# extra: Kind/name ...` for objects only the chart renders.
fn twin(example: &str) -> (String, Vec<String>) {
    let text = std::fs::read_to_string(workspace_root().join(example)).expect("read the example");
    let header = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
            .map(str::to_string)
    };
    let dir = header("kustomize").unwrap_or_else(|| {
        panic!("{example} names no kustomize twin: add a `# kustomize: <dir>` line")
    });
    let extra = header("extra")
        .map(|e| e.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    (dir, extra)
}

/// Removes the `app.kubernetes.io/part-of: rotor` label, and the labels when none is left.
fn strip_part_of_label(object: &mut Value) {
    let metadata = object["metadata"].as_object_mut().expect("metadata");
    if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
        labels.remove("app.kubernetes.io/part-of");
        if labels.is_empty() {
            metadata.remove("labels");
        }
    }
}

fn differences(chart: &Value, kustomize: &Value, path: &str, out: &mut Vec<String>) {
    match (chart, kustomize) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let null = Value::Null;
                differences(
                    a.get(key).unwrap_or(&null),
                    b.get(key).unwrap_or(&null),
                    &format!("{path}/{key}"),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(x, y, &format!("{path}/{i}"), out);
            }
        }
        // `0.0` and `0` are one number (kustomize rewrites the CRD's `minimum: 0.0` as `0`).
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) if a != b => out.push(format!("{path}: chart {a}, kustomize {b}")),
        _ => {}
    }
}

#[test]
fn helm_lint_passes_with_every_example() {
    let files = examples();
    assert!(files.len() >= 4, "the examples: {files:?}");
    for example in &files {
        let out = helm(&["lint", "--strict", CHART, "--values", example]);
        assert!(
            out.status.success(),
            "{}",
            describe_output(&format!("helm lint --strict {CHART} -f {example}"), &out)
        );
    }
}

#[test]
fn every_example_renders_the_same_objects_as_its_kustomize_twin() {
    let mut report = Vec::new();
    for example in examples() {
        let (dir, extra) = twin(&example);
        // With the CRDs of the chart's crds/, which `helm install` applies first.
        let out = template(&[&example], &["--include-crds"]);
        assert!(
            out.status.success(),
            "{}",
            describe_output(&format!("helm template --include-crds -f {example}"), &out)
        );
        let chart = objects(&String::from_utf8_lossy(&out.stdout));
        let mut expected = objects(&kustomize(&dir));
        // The chart installs into a namespace it does not own (helm --create-namespace).
        expected.retain(|k, _| !k.starts_with("Namespace/"));
        // Helm applies crds/ as written, untemplated, so the chart's CRDs lack the part-of label
        // that the kustomize base puts on every object; the rest must be the same.
        for (key, crd) in expected.iter_mut() {
            if key.starts_with("CustomResourceDefinition/") {
                strip_part_of_label(crd);
            }
        }
        let mut problems = Vec::new();
        for key in expected.keys().filter(|k| !chart.contains_key(*k)) {
            problems.push(format!("{key} is in {dir} but not rendered by the chart"));
        }
        for key in chart
            .keys()
            .filter(|k| !expected.contains_key(*k) && !extra.contains(k))
        {
            problems.push(format!(
                "{key} is rendered by the chart but is not in {dir} (nor in the example's `# extra:`)"
            ));
        }
        for (key, object) in &chart {
            if let Some(twin) = expected.get(key) {
                let mut diffs = Vec::new();
                differences(object, twin, key, &mut diffs);
                problems.extend(diffs);
            }
        }
        for key in &extra {
            assert!(
                chart.contains_key(key),
                "{example} promises {key}: not rendered"
            );
        }
        assert!(
            problems.is_empty(),
            "{example} against {dir}:\n{}",
            problems.join("\n")
        );
        report.push(format!("{example} = {dir}: {} objects", chart.len()));
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn the_drainer_runs_the_run_subcommand_after_its_global_flags() {
    let out = template(&[], &[]);
    let objects = parse(&String::from_utf8_lossy(&out.stdout));
    let drainer = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "rotor-drainer")
        .expect("the drainer Deployment");
    let args = &drainer["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args[0], "--log-format=json");
    assert_eq!(args[1], "run");
}

#[test]
fn the_values_schema_is_the_one_the_binaries_help_makes() {
    // Built by `cargo test --workspace`, beside this test.
    let _ = (binary("rotor-drainer"), binary("rotor-selector"));
    let dir = TestDir::new("helm-schema");
    let fresh = dir.join("values.schema.json");
    let out = Command::new("python3")
        .arg(workspace_root().join("tools/helm-schema.py"))
        .arg(binary_dir())
        .arg(&fresh)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        describe_output("tools/helm-schema.py", &out)
    );
    let committed = workspace_root().join(CHART).join("values.schema.json");
    let read = |p: &std::path::Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(p).expect("read the schema"))
            .expect("the schema is JSON")
    };
    assert!(
        read(&fresh) == read(&committed),
        "deploy/helm/rotor/values.schema.json is stale against the binaries' --help or the \
         RotationPolicy CRD in the chart's crds/: run `cargo build --workspace --bins && python3 \
         tools/helm-schema.py` and commit it"
    );
    // Every flag of `run --help` is reachable, as its kind.
    let flags = &read(&committed)["properties"]["drainer"]["properties"]["flags"]["properties"];
    assert_eq!(flags["refuse-emptydir"]["type"], "boolean");
    assert!(flags["window"].to_string().contains("array"));
    assert!(flags.get("restart-single-replica").is_some());
}

/// `helm template` with `--set`s that must be refused, with what the refusal must name.
#[test]
fn the_schema_refuses_a_wrong_value_at_install_naming_it() {
    let cases = [
        ("drainer.flags.drain-timeout=thirty", "drain-timeout"),
        (
            "drainer.flags.park-blocked-after=soon",
            "park-blocked-after",
        ),
        ("drainer.flags.surge-ahead=-1", "surge-ahead"),
        ("drainer.flags.max-concurent=2", "max-concurent"),
        ("selector.flags.provider=openstack", "provider"),
        ("drainer.logFormat=xml", "logFormat"),
        ("selector.flags.taint-effect=NoExecute", "taint-effect"),
        ("drainer.replicas=-1", "replicas"),
        // Set from each pod: one identity for both replicas would make both lead.
        ("drainer.flags.identity=x", "identity"),
        ("drainer.flags.lease-namespace=other", "lease-namespace"),
    ];
    for (set, named) in cases {
        let out = template(&[], &["--set", set]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("schema") && stderr.contains(named),
            "--set {set} must be refused naming {named}: {}",
            describe_output("helm template", &out)
        );
    }
    // What the binaries accept passes: a repeated flag as a list, a switch, a duration, a count.
    let out = template(
        &[],
        &[
            "--set",
            "drainer.flags.window={0 22 * * 1-5 for 4h,0 2 * * 6 for 8h}",
            "--set",
            "drainer.flags.surge=true",
            "--set",
            "drainer.flags.force-after=1h30m",
            "--set",
            "drainer.flags.surge-ahead=0",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        describe_output("helm template", &out)
    );
    for arg in [
        "\"--window=0 22 * * 1-5 for 4h\"",
        "\"--window=0 2 * * 6 for 8h\"",
        "- --surge\n",
        "\"--force-after=1h30m\"",
        "\"--surge-ahead=0\"",
    ] {
        assert!(text.contains(arg), "{arg} not rendered");
    }
}

#[test]
fn the_chart_version_is_the_binaries_version() {
    let chart = std::fs::read_to_string(workspace_root().join(CHART).join("Chart.yaml"))
        .expect("read Chart.yaml");
    let field = |name: &str| {
        chart
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| panic!("Chart.yaml has no {name}"))
    };
    let app_version = field("appVersion");
    for bin in ["rotor-drainer", "rotor-selector"] {
        let out = Command::new(binary(bin))
            .arg("--version")
            .output()
            .expect("--version runs");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            printed.trim(),
            format!("{bin} {app_version}"),
            "Chart.yaml appVersion {app_version} must be what {bin} --version prints"
        );
    }
    // The changelog's latest version is that version too.
    let changelog =
        std::fs::read_to_string(workspace_root().join("CHANGELOG.md")).expect("read CHANGELOG.md");
    let latest = changelog
        .lines()
        .find_map(|l| l.strip_prefix("## "))
        .and_then(|l| l.split_whitespace().next())
        .expect("CHANGELOG.md has a `## <version>` heading");
    assert_eq!(latest, app_version, "CHANGELOG.md's latest version");
    // The image the chart runs by default is that version too.
    let rendered = helm_ok(&["template", "rotor", CHART]);
    assert!(
        rendered.contains(&format!("image: ghcr.io/rotor-dev/rotor:{app_version}")),
        "the default image tag is the appVersion"
    );
}

/// examples/pools.yaml renders its three `policies` as RotationPolicies, each spec as written,
/// cluster-scoped; the defaults render none.
#[test]
fn the_pools_example_renders_its_three_rotation_policies_as_written() {
    let example = format!("{CHART}/examples/pools.yaml");
    let values: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(workspace_root().join(&example)).expect("read the example"),
    )
    .expect("the example parses");
    let out = template(&[&example], &[]);
    assert!(
        out.status.success(),
        "{}",
        describe_output(&format!("helm template -f {example}"), &out)
    );
    let rendered = parse(&String::from_utf8_lossy(&out.stdout));
    let policies: Vec<&Value> = rendered
        .iter()
        .filter(|o| o["kind"] == "RotationPolicy")
        .collect();
    let names: Vec<&str> = policies
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["system", "gpu", "general"], "{example}");
    for (policy, wanted) in policies
        .iter()
        .zip(values["policies"].as_array().expect("policies"))
    {
        let name = &policy["metadata"]["name"];
        assert_eq!(policy["apiVersion"], ROTATION_POLICY_API_VERSION, "{name}");
        assert!(
            policy["metadata"]["namespace"].is_null(),
            "{name} is cluster-scoped"
        );
        assert_eq!(
            policy["metadata"]["labels"]["app.kubernetes.io/part-of"],
            "rotor"
        );
        assert_eq!(
            policy["spec"], wanted["spec"],
            "{name}: the spec as written"
        );
    }
    // The gpu pool's drain.surge needs the drainer's --surge, which the example turns on.
    let drainer = rendered
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "rotor-drainer")
        .expect("the drainer Deployment");
    let args = drainer["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("\"--surge\""), "{args}");

    let defaults = String::from_utf8_lossy(&template(&[], &[]).stdout).into_owned();
    assert!(
        !defaults.contains("kind: RotationPolicy"),
        "the defaults create no RotationPolicy"
    );
}

/// What `policies` refuses, naming it: a field the CRD does not have (the API server would
/// drop it silently), a count written as a number, a name listed twice.
#[test]
fn the_chart_refuses_a_policy_the_api_server_would_drop_or_misread() {
    let cases: [(&[&str], &str); 3] = [
        (
            &["policies[0].name=gpu", "policies[0].spec.budget[0].nodes=1"],
            "additional properties 'budget' not allowed",
        ),
        (
            &[
                "policies[0].name=gpu",
                "policies[0].spec.budgets[0].nodes=1",
            ],
            "/policies/0/spec/budgets/0/nodes",
        ),
        (
            &[
                "policies[0].name=gpu",
                "policies[0].spec.priority=1",
                "policies[1].name=gpu",
                "policies[1].spec.priority=2",
            ],
            "\"gpu\" is listed twice",
        ),
    ];
    for (sets, named) in cases {
        let extra: Vec<&str> = sets.iter().flat_map(|s| ["--set", *s]).collect();
        let out = template(&[], &extra);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(named),
            "{sets:?} must be refused naming {named:?}: {}",
            describe_output("helm template", &out)
        );
    }
    // A count as a string passes.
    let out = template(
        &[],
        &[
            "--set",
            "policies[0].name=gpu",
            "--set-string",
            "policies[0].spec.budgets[0].nodes=1",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        describe_output("helm template", &out)
    );
}

/// `networkPolicy`: off by default; on, one NetworkPolicy per pod the chart runs (the selector's
/// only with the selector), which examples/network-policy.yaml shows equal to
/// deploy/components/network-policy (`every_example_renders_the_same_objects_as_its_kustomize_twin`;
/// tests/tests/deploy.rs validates that against the Kubernetes schemas); `extraEgress` rules come
/// after the chart's own, and the schema refuses a field an egress rule does not have.
#[test]
fn the_network_policies_render_only_when_enabled_one_per_pod_with_extra_egress_last() {
    let policies = |extra: &[&str]| -> Vec<Value> {
        let out = template(&[], extra);
        assert!(
            out.status.success(),
            "{}",
            describe_output(&format!("helm template {}", extra.join(" ")), &out)
        );
        parse(&String::from_utf8_lossy(&out.stdout))
            .into_iter()
            .filter(|o| o["kind"] == "NetworkPolicy")
            .collect()
    };
    let names = |ps: &[Value]| -> Vec<String> {
        ps.iter()
            .map(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    assert!(
        policies(&[]).is_empty(),
        "the defaults render no NetworkPolicy"
    );
    let on = policies(&["--set", "networkPolicy.enabled=true"]);
    assert_eq!(names(&on), ["rotor-drainer", "rotor-selector"]);
    let without_selector = policies(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "selector.enabled=false",
    ]);
    assert_eq!(names(&without_selector), ["rotor-drainer"]);

    let prometheus = serde_json::json!({
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
        "ports": [{"protocol": "TCP", "port": 9090}],
    });
    let set = format!("networkPolicy.drainer.extraEgress=[{prometheus}]");
    let extra = policies(&["--set", "networkPolicy.enabled=true", "--set-json", &set]);
    for (policy, before) in extra.iter().zip(&on) {
        let egress = policy["spec"]["egress"].as_array().expect("egress");
        let own = before["spec"]["egress"].as_array().expect("egress");
        if policy["metadata"]["name"] == "rotor-drainer" {
            assert_eq!(egress.len(), own.len() + 1, "{policy}");
            assert_eq!(egress[..own.len()], own[..], "the chart's rules first");
            assert_eq!(egress.last(), Some(&prometheus));
        } else {
            assert_eq!(egress, own, "the selector's policy is left as it was");
        }
    }

    // On Google Cloud the selector's credentials come from the metadata server: allowed then,
    // and only then.
    let metadata_server = serde_json::json!({
        "to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}],
        "ports": [{"protocol": "TCP", "port": 80}],
    });
    let selector_egress = |ps: &[Value]| -> Vec<Value> {
        ps.iter()
            .find(|p| p["metadata"]["name"] == "rotor-selector")
            .and_then(|p| p["spec"]["egress"].as_array().cloned())
            .expect("the selector's NetworkPolicy")
    };
    let gcp = policies(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "selector.flags.provider=gcp",
        "--set",
        "selector.flags.gcp-project=p",
    ]);
    assert!(
        selector_egress(&gcp).contains(&metadata_server),
        "{:?}",
        selector_egress(&gcp)
    );
    assert!(!selector_egress(&on).contains(&metadata_server));

    let out = template(
        &[],
        &[
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "networkPolicy.selector.extraEgress[0].from=x",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("schema") && stderr.contains("from"),
        "an egress rule with `from` must be refused: {}",
        describe_output("helm template", &out)
    );
}

/// `monitoring.podMonitor`: the drainer's scrape, without which its alerts have no data. It
/// selects the drainer's pods by the labels their template carries and scrapes the port their
/// container names, at the path the admin server serves.
#[test]
fn the_pod_monitor_scrapes_the_drainers_admin_port() {
    let out = template(&[], &["--set", "monitoring.podMonitor.enabled=true"]);
    assert!(
        out.status.success(),
        "{}",
        describe_output("helm template", &out)
    );
    let objects = parse(&String::from_utf8_lossy(&out.stdout));
    let monitor = objects
        .iter()
        .find(|o| o["kind"] == "PodMonitor")
        .expect("a PodMonitor");
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "rotor-drainer")
        .expect("the drainer's Deployment");
    let pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .expect("pod labels");
    let wanted = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    assert!(
        wanted.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
        "{wanted:?} must select the drainer's pods {pod_labels:?}"
    );
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    let ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .expect("container ports");
    assert!(
        ports.iter().any(|p| p["name"] == endpoint["port"]),
        "{endpoint} must name one of {ports:?}"
    );
    assert_eq!(endpoint["path"], "/metrics");
    // Off by default: the CRD is prometheus-operator's.
    let out = template(&[], &[]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("kind: PodMonitor"));
}
