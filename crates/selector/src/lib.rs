//! rotor-selector: finds out-of-date nodes through a provider and marks them with the drain taint.
//!
//! The decisions are pure functions over plain data, unit-tested without sockets or clocks:
//! - [`aws_model`]: AWS-shaped snapshot types (what the Describe* calls return);
//! - [`drift`]: the AWS drift and skip rules, in order, first match wins;
//! - [`kube_rules`]: the Kubernetes-only rules (kubelet behind the control plane, node age);
//! - [`verdict`]: what a rule concludes about a node ([`Verdict`], [`SkipReason`]);
//! - [`plan`](mod@plan): from verdicts to taint / untaint / keep / skip / retire, within budgets;
//! - [`compliance`]: a run's figures (out of date by reason and group, the oldest) as Prometheus
//!   text and a report;
//! - [`group_surge`]: `--group-surge`, raising an Auto Scaling group's capacity ahead of its
//!   drains and giving it back through retires.
//!
//! The I/O sits at the edges, one job per module:
//! - [`cli`]: flags (each with a `ROTOR_*` variable) and their validation into a
//!   [`SelectorConfig`](cli::SelectorConfig);
//! - [`provider`]: the provider seam (errors, the node facts every provider reads alike,
//!   retiring) and node listing;
//! - [`providers`]: the configured provider ([`Provider`](providers::Provider) looks up,
//!   [`Assessor`](providers::Assessor) judges nodes into [`Candidate`]s);
//! - [`kube_provider`]: the Kubernetes provider (`GET /version`);
//! - [`aws_provider`]: the AWS provider (Auto Scaling and EC2 Describe calls, retiring);
//! - [`apply`]: resourceVersion-guarded merge patches, conflict re-checks, Events;
//! - [`kube_retry`]: the short retry of 429/503/504 around every Kubernetes read and patch;
//! - [`run`](mod@run): one run, list → assess → plan → apply, into a [`Report`](run::Report);
//! - [`output`]: the report as a table or JSON; [`api_calls`]: what the run cost.

pub mod api_calls;
pub mod apply;
pub mod aws_model;
pub mod aws_provider;
pub mod cli;
pub mod compliance;
pub mod drift;
pub mod group_surge;
pub mod kube_provider;
pub mod kube_retry;
pub mod kube_rules;
pub mod output;
pub mod plan;
pub mod provider;
pub mod providers;
pub mod run;
pub mod verdict;

pub use drift::{DriftInputs, TagExclusion, instance_verdict, resolve_group_version};
pub use plan::{Action, Candidate, PlanLimits, PlanSummary, PlannedNode, plan, summary};
pub use verdict::{SkipReason, Verdict};
