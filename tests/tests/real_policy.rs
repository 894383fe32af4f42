//! RotationPolicy on a real API server: the CRD rotor generates from its types
//! (`deploy/base/crds/rotationpolicies.rotor.dev.yaml`, from `crates/policy/src/resource.rs`)
//! installs on the real kube-apiserver, its CEL rules within the server's cost budget; a
//! policy with every field is stored as written, a bare one gets the schema's defaults (one node
//! at a time, priority 0, an empty selector); `kubectl get` shows the printer columns, by the
//! plural, the short name and the `rotor` category. A bad policy is refused by the server
//! itself, the refusal naming the field and saying why (patterns, enums, item limits and the
//! CEL rules' messages), so a mistake shows at `kubectl apply`, not later in the drainer's log;
//! and a status written through the main resource is dropped (status is a subresource, the
//! drainer's to write).
//!
//! The control plane's binaries come from `tools/build.sh`; without them every test here fails
//! and says how to build them.

use std::time::Instant;

use rotor_e2e::{RealCluster, describe_output, parse_table, workspace_root};
use serde_json::{Value, json};

/// The CRDs as `deploy/` ships them: the RotationPolicy's, and the DrainRule's, which shares
/// its label selectors.
const CRDS: [&str; 2] = [
    "deploy/base/crds/rotationpolicies.rotor.dev.yaml",
    "deploy/base/crds/drainrules.rotor.dev.yaml",
];

/// A real cluster with rotor's CRDs installed and Established.
fn cluster_with_the_crd() -> RealCluster {
    let started = Instant::now();
    let cluster = RealCluster::start();
    eprintln!("control plane up in {:?}", started.elapsed());
    for file in CRDS {
        let crd = std::fs::read_to_string(workspace_root().join(file))
            .unwrap_or_else(|e| panic!("cannot read {file}: {e}"));
        let out = cluster.apply_result(&crd);
        assert!(
            out.status.success(),
            "the API server refused the CRD (a CEL rule over its cost budget or not compiling \
             shows here): {}",
            describe_output(&format!("kubectl apply --server-side -f {file}"), &out)
        );
    }
    cluster.kubectl_ok(&[
        "wait",
        "--for",
        "condition=Established",
        "--timeout=60s",
        "crd/rotationpolicies.rotor.dev",
        "crd/drainrules.rotor.dev",
    ]);
    eprintln!("CRDs Established {:?} after start", started.elapsed());
    cluster
}

fn policy(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "rotor.dev/v1alpha1",
        "kind": "RotationPolicy",
        "metadata": {"name": name},
        "spec": spec,
    })
}

#[test]
fn the_crd_installs_and_a_good_policy_is_accepted() {
    let cluster = cluster_with_the_crd();

    // Every field of the spec.
    let full = json!({
        "nodeSelector": {
            "matchLabels": {"rotor.dev/pool": "web"},
            "matchExpressions": [{
                "key": "topology.kubernetes.io/zone",
                "operator": "In",
                "values": ["eu-west-1a", "eu-west-1b"],
            }],
        },
        "priority": 10,
        "budgets": [
            {
                "nodes": "3",
                "schedule": "0 22 * * 1-5",
                "duration": "8h",
                "timeZone": "Europe/Berlin",
                "reasons": ["image", "max-age"],
            },
            {"nodes": "20%"},
        ],
        "drain": {
            "timeout": "1h",
            "forceAfter": "30m",
            "maxGracePeriod": "5m",
            "requireApproval": false,
            "restartSingleReplica": true,
            "surge": true,
        },
    });
    cluster.apply(&policy("web", full.clone()).to_string());
    let stored = cluster.kubectl_json(&["get", "rotationpolicy", "web"]);
    assert_eq!(
        stored["spec"], full,
        "a policy with every field is stored as written: nothing pruned, nothing defaulted"
    );
    assert_eq!(
        stored["metadata"]["namespace"],
        Value::Null,
        "cluster-scoped"
    );

    // A bare policy gets the schema's defaults.
    cluster.apply(&policy("bare", json!({})).to_string());
    let stored = cluster.kubectl_json(&["get", "rotationpolicy", "bare"]);
    assert_eq!(
        stored["spec"],
        json!({"budgets": [{"nodes": "1"}], "priority": 0, "nodeSelector": {}}),
        "the API server's defaults: one node at a time, priority 0, an empty selector"
    );

    // The printer columns, by the plural.
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
    let names: Vec<&str> = rows.iter().map(|r| r["NAME"].as_str()).collect();
    assert_eq!(names, ["bare", "web"], "{table}");
    assert_eq!(rows[1]["PRIORITY"], "10", "{table}");

    // The short name and the category list the same policies.
    for alias in ["rpol", "rotor"] {
        let listed = cluster.kubectl_ok(&["get", alias, "-o", "name"]);
        assert_eq!(
            listed.lines().collect::<Vec<_>>(),
            [
                "rotationpolicy.rotor.dev/bare",
                "rotationpolicy.rotor.dev/web"
            ],
            "kubectl get {alias}"
        );
    }
}

/// The patterns of the schema, as the refusals quote them.
const NODES: &str = "'^((100|[0-9]{1,2})%|[0-9]+)$'";
const LABEL_KEY: &str = "'^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'";
const LABEL_VALUE: &str = "'^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'";
const DURATION: &str = "'^([0-9]+(ms|s|m|h))+$'";

/// A bad policy's spec, and what the refusal must say: `field: why`, as the API server puts it.
struct Bad {
    what: &'static str,
    spec: Value,
    field: &'static str,
    why: String,
}

/// kube-apiserver's refusal of `value` at `field` for not matching `pattern`.
fn pattern(value: &str, field: &str, pattern: &str) -> String {
    format!("Invalid value: \"{value}\": {field} in body should match {pattern}")
}

/// The bad policies and their refusals. The texts are kube-apiserver's (v1.36): a pattern's
/// quotes it, an enum's lists the supported values, a CEL rule's is the rule's message.
fn bad_policies() -> Vec<Bad> {
    let one = |budget: Value| json!({"budgets": [budget]});
    vec![
        Bad {
            what: "a percentage over 100",
            spec: one(json!({"nodes": "150%"})),
            field: "spec.budgets[0].nodes",
            why: pattern("150%", "spec.budgets[0].nodes", NODES),
        },
        Bad {
            what: "nodes that are not a number (in the second budget)",
            spec: json!({"budgets": [{"nodes": "1"}, {"nodes": "ten"}]}),
            field: "spec.budgets[1].nodes",
            why: pattern("ten", "spec.budgets[1].nodes", NODES),
        },
        Bad {
            what: "a schedule without a duration",
            spec: one(json!({"nodes": "1", "schedule": "0 22 * * *"})),
            field: "spec.budgets[0]",
            why: "Invalid value: a budget's schedule and duration go together: set both or neither"
                .into(),
        },
        Bad {
            what: "a time zone without a schedule",
            spec: one(json!({"nodes": "1", "timeZone": "Europe/Berlin"})),
            field: "spec.budgets[0]",
            why: "Invalid value: timeZone applies to a schedule: set schedule and duration too"
                .into(),
        },
        Bad {
            what: "a duration in words",
            spec: one(json!({"nodes": "1", "schedule": "0 22 * * *", "duration": "1 day"})),
            field: "spec.budgets[0].duration",
            why: pattern("1 day", "spec.budgets[0].duration", DURATION),
        },
        Bad {
            what: "forceAfter longer than the timeout",
            spec: json!({"drain": {"timeout": "1h", "forceAfter": "2h"}}),
            field: "spec.drain",
            why: "Invalid value: forceAfter must be shorter than timeout, or the drain fails \
                  before anything is forced"
                .into(),
        },
        Bad {
            what: "an unknown selector operator",
            spec: json!({"nodeSelector": {"matchExpressions": [
                {"key": "zone", "operator": "Near", "values": ["a"]}]}}),
            field: "spec.nodeSelector.matchExpressions[0].operator",
            why: "Unsupported value: \"Near\": supported values: \"In\", \"NotIn\", \"Exists\", \
                  \"DoesNotExist\""
                .into(),
        },
        Bad {
            what: "In without values",
            spec: json!({"nodeSelector": {"matchExpressions": [
                {"key": "zone", "operator": "In"}]}}),
            field: "spec.nodeSelector.matchExpressions[0]",
            why: "Invalid value: matchExpressions: In and NotIn need values; Exists and \
                  DoesNotExist take none"
                .into(),
        },
        Bad {
            what: "51 budgets",
            spec: json!({"budgets": vec![json!({"nodes": "1"}); 51]}),
            field: "spec.budgets",
            why: "Too many: 51: must have at most 50 items".into(),
        },
        // Selectors rotor could not read would leave the policy's nodes under the flags.
        Bad {
            what: "a label value with a space",
            spec: json!({"nodeSelector": {"matchLabels": {"pool": "blue green"}}}),
            field: "spec.nodeSelector.matchLabels.pool",
            why: pattern(
                "blue green",
                "spec.nodeSelector.matchLabels.pool",
                LABEL_VALUE,
            ),
        },
        Bad {
            what: "a label key that is not a qualified name",
            spec: json!({"nodeSelector": {"matchLabels": {"-pool": "blue"}}}),
            field: "spec.nodeSelector",
            why: "Invalid value: matchLabels: each key must be a label key".into(),
        },
        Bad {
            what: "a requirement's key with two slashes",
            spec: json!({"nodeSelector": {"matchExpressions": [
                {"key": "a/b/c", "operator": "Exists"}]}}),
            field: "spec.nodeSelector.matchExpressions[0].key",
            why: pattern(
                "a/b/c",
                "spec.nodeSelector.matchExpressions[0].key",
                LABEL_KEY,
            ),
        },
        Bad {
            what: "a requirement's value of 64 characters",
            spec: json!({"nodeSelector": {"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a".repeat(64)]}]}}),
            field: "spec.nodeSelector.matchExpressions[0].values[0]",
            why: "Too long: may not be more than 63 bytes".into(),
        },
        Bad {
            // Stored, it would make the drainer's list of every policy fail to decode.
            what: "a priority beyond 32 bits",
            spec: json!({"priority": 3_000_000_000u64}),
            field: "spec.priority",
            why: "Invalid value: 3000000000: spec.priority in body should be less than or equal \
                  to 2147483647"
                .into(),
        },
    ]
}

#[test]
fn bad_policies_are_refused_by_the_api_server_naming_the_field() {
    let cluster = cluster_with_the_crd();

    let mut wrong = Vec::new();
    for (i, bad) in bad_policies().into_iter().enumerate() {
        let name = format!("bad-{i}");
        let out = cluster.apply_result(&policy(&name, bad.spec).to_string());
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("{}: {}", bad.what, stderr.trim());
        let refusal = format!("The RotationPolicy \"{name}\" is invalid: ");
        let reason = format!("{}: {}", bad.field, bad.why);
        if out.status.success() {
            wrong.push(format!("{}: accepted", bad.what));
        } else if !stderr.contains(&refusal) || !stderr.contains(&reason) {
            wrong.push(format!(
                "{}: the refusal does not say {refusal:?} and {reason:?}: {stderr}",
                bad.what
            ));
        }
        let listed =
            cluster.kubectl_ok(&["get", "rpol", &name, "--ignore-not-found", "-o", "name"]);
        if !listed.trim().is_empty() {
            wrong.push(format!("{}: stored anyway", bad.what));
        }
    }
    // A DrainRule shares the selectors: one rotor could not read would leave out the rule, and
    // evict the pods it skips.
    let rule = json!({
        "apiVersion": "rotor.dev/v1alpha1",
        "kind": "DrainRule",
        "metadata": {"name": "bad-selector"},
        "spec": {"behavior": "Skip", "pods": [{"selector": {"matchLabels": {"app": "cache db"}}}]},
    });
    let out = cluster.apply_result(&rule.to_string());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let reason = format!(
        "spec.pods[0].selector.matchLabels.app: {}",
        pattern(
            "cache db",
            "spec.pods[0].selector.matchLabels.app",
            LABEL_VALUE
        )
    );
    if out.status.success() || !stderr.contains(&reason) {
        wrong.push(format!(
            "a DrainRule's label value with a space: not refused with {reason:?}: {stderr}"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // A status written through the main resource is dropped: status is a subresource.
    let mut with_status = policy("with-status", json!({}));
    with_status["status"] = json!({"nodes": 5, "budget": "written by hand"});
    cluster.apply(&with_status.to_string());
    let stored = cluster.kubectl_json(&["get", "rpol", "with-status"]);
    assert_eq!(stored["status"], Value::Null, "{stored:#}");
    // Through the subresource it is kept, and the table shows it.
    cluster.kubectl_ok(&[
        "patch",
        "rpol",
        "with-status",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"nodes":5,"outOfDate":2,"budget":"1 of 5"}}"#,
    ]);
    let table = cluster.kubectl_ok(&["get", "rpol", "with-status"]);
    let rows = parse_table(&table);
    assert_eq!(
        (
            rows[0]["NODES"].as_str(),
            rows[0]["OUT-OF-DATE"].as_str(),
            rows[0]["BUDGET"].as_str()
        ),
        ("5", "2", "1 of 5"),
        "{table}"
    );
}
