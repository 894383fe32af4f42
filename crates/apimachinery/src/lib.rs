//! rotor-apimachinery: Kubernetes API-machinery semantics as pure functions over plain data
//! (`serde_json::Value` and std collections).
//!
//! It is what makes rotor's simulated API server answer like kube-apiserver (real `kubectl` and
//! kube-rs clients talk to it), and what rotor's controllers use to evaluate selectors and
//! quantities the way Kubernetes does.
//!
//! - [`conditions`]: pods' and nodes' status conditions (`Ready`, the scheduler's
//!   `Unschedulable`), read as kubelet and the scheduler write them.
//! - [`disruption`]: which pods a PodDisruptionBudget covers, for its controller and for the
//!   Eviction API.
//! - [`labels`]: label selectors, string form (`?labelSelector=`, `kubectl -l`) and structured
//!   form (`{matchLabels, matchExpressions}`).
//! - [`fields`]: field selectors (`?fieldSelector=`), with the apiserver's "field label not
//!   supported" check.
//! - [`patch`]: JSON merge patch, JSON patch and strategic merge patch, with the built-in
//!   Kubernetes list-merge rules ([`KubeStrategy`]) and the HTTP status each failure maps to.
//! - [`quantity`]: `resource.Quantity` parsing to exact milli-units.
//! - [`taints`]: tolerations against taints, as the scheduler and `kubectl drain` match them.
//! - [`scheduling`]: the built-in PriorityClasses and cluster-autoscaler's expendable cut-off.
//!
//! No I/O, no clocks, no global state: every function is deterministic in its arguments.

pub mod conditions;
pub mod disruption;
pub mod fields;
pub mod labels;
pub mod patch;
pub mod quantity;
pub mod scheduling;
pub mod taints;

pub use fields::{FieldOp, FieldRequirement, FieldSelector, FieldSelectorError};
pub use labels::{LabelSelector, LabelSelectorError, Operator, Requirement};
pub use patch::{
    KubeStrategy, ListStrategy, PatchError, StrategySchema, apply_json_patch, apply_merge_patch,
    apply_strategic_merge_patch,
};
pub use quantity::{Quantity, QuantityError, parse_quantity};
