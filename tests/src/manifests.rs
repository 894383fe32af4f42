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

/// Surge tests' workload: `shop/web`, 8 replicas of 450m CPU under a budget of one
/// unavailable, so four fill a [`surge_node`] and a drained node's pods fit nowhere else.
pub const SURGE_WEB: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 8
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: web, image: web:1, resources: {requests: {cpu: 450m, memory: 256Mi}}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: shop}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: web}}
"#;

/// The replicas of [`SURGE_WEB`].
pub const SURGE_WEB_REPLICAS: usize = 8;

/// A 2-CPU, 8 GiB node: four [`SURGE_WEB`] pods fill it.
pub fn surge_node(name: &str) -> crate::FakeNode {
    let mut node = crate::FakeNode::new(name);
    node.cpu = "2".into();
    node.memory = "8Gi".into();
    node
}
