//! rotor's per-pool policy API. [`resource`] defines the `RotationPolicy` resource
//! (`rotor.dev/v1alpha1`); [`crd_yaml`] renders its CustomResourceDefinition, which `deploy/` and
//! the Helm chart ship (a test keeps the committed files equal to it). How the drainer reads a
//! policy is the drainer's business (`rotor_drainer::fleet::pools`).

pub mod resource;

pub use resource::{
    PolicyBudget, PolicyCondition, PolicyNodeRequirement, PolicyNodeSelector, PoolDrainSettings,
    RotationPolicy, RotationPolicySpec, RotationPolicyStatus, SelectorOperator,
};

use kube::CustomResourceExt;

/// Where the generated CRD is committed, relative to the workspace root: the kustomize base and
/// the Helm chart's `crds/` (which Helm installs before the templates and never deletes).
pub const CRD_FILES: [&str; 2] = [
    "deploy/base/crds/rotationpolicies.rotor.dev.yaml",
    "deploy/helm/rotor/crds/rotationpolicies.rotor.dev.yaml",
];

/// The RotationPolicy CRD as YAML, with a header saying it is generated.
pub fn crd_yaml() -> String {
    let crd = RotationPolicy::crd();
    let yaml = serde_saphyr::to_string(&crd).expect("a CRD serialises to YAML");
    format!(
        "# Generated from crates/policy/src/resource.rs; do not edit. Regenerate with\n\
         # `ROTOR_WRITE_CRDS=1 cargo test -p rotor-policy --test crd`.\n{yaml}"
    )
}
