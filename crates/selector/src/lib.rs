//! rotor-selector: finds out-of-date nodes through a provider and marks them with the drain taint.
//!
//! The decisions are pure functions over plain data, unit-tested without sockets or clocks:
//! - [`provider::aws_model`]: AWS-shaped snapshot types (what the Describe* calls return);
//! - [`provider::aws_rules`]: the AWS drift and skip rules, in order, first match wins;
//! - [`provider::kubernetes_rules`]: the Kubernetes-only rules (kubelet behind the control plane,
//!   node age);
//! - [`provider::node_facts`]: what every provider reads alike from a Node;
//! - [`verdict`]: what a rule concludes about a node ([`Verdict`], [`SkipReason`]);
//! - [`plan`](mod@plan): from verdicts to taint / untaint / keep / skip / retire, within budgets;
//! - [`provider::aws_group_surge`]: `--group-surge`, raising an Auto Scaling group's capacity
//!   ahead of its drains and giving it back through retires;
//! - [`report`]: what a run decided and did ([`Report`](report::Report)), per node and group;
//! - [`compliance`]: a run's figures (out of date by reason and group, the oldest) as Prometheus
//!   text and a report; [`output`]: the report as a table or JSON.
//!
//! The I/O sits at the edges, one job per module:
//! - [`cli`]: flags (each with a `ROTOR_*` variable) and their validation into a
//!   [`SelectorConfig`](cli::SelectorConfig);
//! - [`node_list`]: listing the nodes a run considers;
//! - [`provider`]: what judges nodes, one module per provider beside its pure rules; the
//!   configured [`Provider`](provider::Provider) looks up, its
//!   [`Assessor`](provider::Assessor) judges nodes into [`Candidate`]s; the seam every provider
//!   implements against is [`provider::seam`];
//! - [`provider::kubernetes`]: the Kubernetes provider (`GET /version`);
//! - [`provider::aws`]: the AWS provider (Auto Scaling and EC2 Describe calls, retiring);
//! - [`apply`]: resourceVersion-guarded merge patches, conflict re-checks, Events;
//! - [`kube_retry`]: the short retry of 429/503/504 around every Kubernetes read and patch;
//! - [`run`](mod@run): one run, list → assess → plan → apply, into a [`Report`](report::Report);
//! - [`api_calls`]: what the run cost.

pub mod api_calls;
pub mod apply;
pub mod cli;
pub mod compliance;
pub mod kube_retry;
pub mod node_list;
pub mod output;
pub mod plan;
pub mod provider;
pub mod report;
pub mod run;
pub mod verdict;

pub use plan::{Action, Candidate, PlanLimits, PlanSummary, PlannedNode, plan, summary};
pub use provider::aws_rules::{DriftInputs, TagExclusion, instance_verdict, resolve_group_version};
pub use verdict::{SkipReason, Verdict};
