//! rotor's per-pool policy API. [`resource`] defines the `RotationPolicy` resource
//! (`rotor.dev/v1alpha1`), [`drain_rule`] the `DrainRule`; [`crds`] renders their
//! CustomResourceDefinitions, which `deploy/` and the Helm chart ship (a test keeps the committed
//! files equal to them); [`priority`] settles which policy governs a node several select. How
//! the drainer reads a policy is the drainer's business (`rotor_drainer::fleet::pools`).

pub mod drain_rule;
pub mod priority;
pub mod resource;

pub use drain_rule::{DrainBehavior, DrainRule, DrainRuleSpec, NodeSelection, PodSelection};
pub use priority::highest_priority;
pub use resource::{
    LabelRequirement, LabelSelectorSpec, PolicyBudget, PolicyCondition, PoolDrainSettings,
    RotationPolicy, RotationPolicySpec, RotationPolicyStatus, SelectorOperator,
};

use kube::CustomResourceExt;

/// Where the generated CRDs are committed, relative to the workspace root: the kustomize base
/// and the Helm chart's `crds/` (which Helm installs before the templates and never deletes).
pub const CRD_DIRS: [&str; 2] = ["deploy/base/crds", "deploy/helm/rotor/crds"];

/// Each CRD as `(file name, YAML)`, the YAML with a header saying it is generated.
pub fn crds() -> Vec<(String, String)> {
    [RotationPolicy::crd(), DrainRule::crd()]
        .into_iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let yaml = serde_saphyr::to_string(&crd).expect("a CRD serialises to YAML");
            let text = format!(
                "# Generated from crates/policy/src; do not edit. Regenerate with\n\
                 # `ROTOR_WRITE_CRDS=1 cargo test -p rotor-policy --test crd`.\n{yaml}"
            );
            (format!("{name}.yaml"), text)
        })
        .collect()
}
