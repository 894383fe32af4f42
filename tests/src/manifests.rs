//! Small workloads the real-control-plane tests apply, as YAML: one place for their shape, so
//! that a test reads as what it sets up.

/// A Deployment of `replicas` pods labelled `app=<name>` in `namespace`, with `strategy`
/// (`{type: Recreate}`, ...) or the API's default; grace period 1 s.
pub fn deployment(namespace: &str, name: &str, replicas: u32, strategy: Option<&str>) -> String {
    let strategy = strategy
        .map(|s| format!("\n  strategy: {s}"))
        .unwrap_or_default();
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  replicas: {replicas}{strategy}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{{name: app, image: app:1}}]
"
    )
}

/// A PodDisruptionBudget named `app` over the pods labelled `app=<app>`, with `minAvailable`.
pub fn min_available_budget(namespace: &str, app: &str, min_available: u32) -> String {
    format!(
        "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: {app}, namespace: {namespace}}}
spec:
  minAvailable: {min_available}
  selector: {{matchLabels: {{app: {app}}}}}
"
    )
}

/// The apiVersion of rotor's RotationPolicy (crates/policy: group `rotor.dev`, version
/// `v1alpha1`).
pub const ROTATION_POLICY_API_VERSION: &str = "rotor.dev/v1alpha1";

/// A RotationPolicy named `name` whose spec is `spec`, a YAML flow mapping
/// (`{nodeSelector: {}, budgets: [{nodes: "1"}]}`).
pub fn rotation_policy(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: {ROTATION_POLICY_API_VERSION}
kind: RotationPolicy
metadata: {{name: {name}}}
spec: {spec}
"
    )
}

/// A DrainRule named `name` whose spec is `spec`, a YAML flow mapping
/// (`{behavior: Drain, order: 10, pods: [{selector: {matchLabels: {app: db}}}]}`).
pub fn drain_rule(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: {ROTATION_POLICY_API_VERSION}
kind: DrainRule
metadata: {{name: {name}}}
spec: {spec}
"
    )
}
