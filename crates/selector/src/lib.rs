//! rotor-selector: finds out-of-date nodes through a provider and marks them with the drain taint.
//!
//! The decisions are pure functions over plain data, unit-tested without sockets or clocks:
//! - [`aws_model`]: AWS-shaped snapshot types (what the Describe* calls return);
//! - [`drift`]: the AWS drift and skip rules of `notes/aws.md`, in order, first match wins;
//! - [`kube_rules`]: the Kubernetes-only rules (kubelet behind the control plane, node age);
//! - [`verdict`]: what a rule concludes about a node ([`Verdict`], [`SkipReason`]);
//! - [`plan`](mod@plan): from verdicts to taint / untaint / keep / skip / retire, within budgets.

pub mod aws_model;
pub mod drift;
pub mod kube_rules;
pub mod plan;
pub mod verdict;

pub use drift::{DriftInputs, TagExclusion, instance_verdict, resolve_group_version};
pub use plan::{Action, Budget, Candidate, PlanLimits, PlanSummary, PlannedNode, plan, summary};
pub use verdict::{SkipReason, Verdict};
