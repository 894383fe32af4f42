//! One selector run: list the nodes (restricted by `--node-selector`), let the provider look up
//! what it needs, judge every node, plan within budgets, and only then write (unless
//! `--dry-run`). A failed look-up the whole fleet depends on (the node list, the group list, the
//! batched Describe calls) fails the run before anything is written. A failed look-up about one
//! launch template only skips the groups using it: the rest is planned and written, and the run
//! then fails ([`Report::exit_code`]) so the CronJob's Job shows it. A failed write fails the run
//! after the other writes were made (the [`Report`] says which). The plan summary is always
//! logged at info, and so are the API calls the run made.

use std::collections::BTreeMap;

use jiff::Timestamp;
use kube::Client;

use crate::api_calls::ApiCalls;
use crate::apply::{Applier, WriteOutcome, WriteResult, describe, writes};
use crate::cli::SelectorConfig;
use crate::plan::{Action, PlanSummary, PlannedNode, plan, summary};
use crate::provider::aws_group_surge::{GroupSurge, plan_group_surge};
use crate::provider::seam::{LookupFailure, ProviderError, list_nodes};
use crate::provider::{Assessor, Provider};
use crate::verdict::Verdict;

/// A look-up failed; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Listing the nodes failed.
    #[error("cannot list nodes{}: {}", selector.as_deref().map(|s| format!(" matching {s:?}")).unwrap_or_default(), describe(source))]
    ListNodes {
        selector: Option<String>,
        #[source]
        source: kube::Error,
    },
    /// The provider's look-ups failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

impl RunError {
    /// The process's exit status for a run that failed before writing: 1, which the CronJob's Job
    /// reports as failed (2 is kept for bad flags and configuration, found before any call).
    pub fn exit_code(&self) -> u8 {
        1
    }
}

/// What one run decided and did.
#[derive(Clone, Debug)]
pub struct Report {
    /// `kubernetes` or `aws`.
    pub provider: &'static str,
    pub dry_run: bool,
    /// Every node considered, in name order.
    pub nodes: Vec<NodeReport>,
    /// The API calls made, by API and call.
    pub api_calls: ApiCalls,
    /// Look-ups that failed for some groups only; their nodes were skipped.
    pub lookup_failures: Vec<LookupFailure>,
    /// `--group-surge`: one decision per group, with what became of its write.
    pub group_surges: Vec<GroupSurgeReport>,
}

/// One group's surge decision and, for a step that writes, what became of it.
#[derive(Clone, Debug)]
pub struct GroupSurgeReport {
    pub surge: GroupSurge,
    pub write: Option<WriteResult>,
}

/// One node: the plan for it, and what became of its write when it has one.
#[derive(Clone, Debug)]
pub struct NodeReport {
    pub planned: PlannedNode,
    pub write: Option<WriteResult>,
}

/// Plan counts and write outcomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    pub nodes: usize,
    pub plan: PlanSummary,
    pub applied: usize,
    pub dropped: usize,
    pub failed: usize,
}

impl Report {
    /// Plan counts and write outcomes.
    pub fn summary(&self) -> RunSummary {
        let plans: Vec<PlannedNode> = self.nodes.iter().map(|n| n.planned.clone()).collect();
        let mut counts = RunSummary {
            nodes: self.nodes.len(),
            plan: summary(&plans),
            ..RunSummary::default()
        };
        for write in self.nodes.iter().filter_map(|n| n.write.as_ref()) {
            match write.outcome {
                WriteOutcome::Applied => counts.applied += 1,
                WriteOutcome::Dropped { .. } => counts.dropped += 1,
                WriteOutcome::Failed { .. } => counts.failed += 1,
                WriteOutcome::DryRun => {}
            }
        }
        counts
    }

    /// The writes that failed: (node or group, action or surge step, error).
    pub fn failures(&self) -> Vec<(&str, &'static str, &str)> {
        fn failed(write: &Option<WriteResult>) -> Option<&str> {
            match write {
                Some(WriteResult {
                    outcome: WriteOutcome::Failed { error },
                    ..
                }) => Some(error.as_str()),
                _ => None,
            }
        }
        let nodes = self.nodes.iter().filter_map(|n| {
            failed(&n.write).map(|error| {
                (
                    n.planned.candidate.node.as_str(),
                    n.planned.action.kind(),
                    error,
                )
            })
        });
        let groups = self.group_surges.iter().filter_map(|g| {
            failed(&g.write).map(|error| (g.surge.group.as_str(), g.surge.step.kind(), error))
        });
        nodes.chain(groups).collect()
    }

    /// 0 when every group was judged and every planned write was applied or dropped (or it was
    /// a dry run); 1 when a look-up failed for some groups or a write failed.
    pub fn exit_code(&self) -> u8 {
        u8::from(!self.failures().is_empty() || !self.lookup_failures.is_empty())
    }
}

/// Runs the selector once against `client`; `now` is when ages are measured and the time written
/// to `rotor.dev/selected-at`.
pub async fn run(
    client: &Client,
    config: &SelectorConfig,
    now: Timestamp,
) -> Result<Report, RunError> {
    let provider = Provider::new(&config.provider, config.group_labels.clone());
    run_with(client, config, &provider, now).await
}

/// [`run`] with a given provider (tests give the AWS provider mocked SDK clients).
pub async fn run_with(
    client: &Client,
    config: &SelectorConfig,
    provider: &Provider,
    now: Timestamp,
) -> Result<Report, RunError> {
    let mut calls = ApiCalls::default();

    let nodes = list_nodes(client, config.node_selector.as_deref(), &mut calls)
        .await
        .map_err(|source| RunError::ListNodes {
            selector: config.node_selector.clone(),
            source,
        })?;
    let assessor = provider.assess(client, &nodes, &mut calls, now).await?;
    let lookup_failures = assessor.lookup_failures().to_vec();
    for failure in &lookup_failures {
        tracing::warn!("{failure}; their nodes are skipped this run, the other groups are handled");
    }
    let candidates = nodes.iter().map(|node| assessor.candidate(node)).collect();
    let mut planned = plan(candidates, &config.limits);
    let surges = match &assessor {
        Assessor::Aws(aws) if config.group_surge => plan_group_surge(&mut planned, &aws.capacities),
        _ => Vec::new(),
    };
    let plan_summary = summary(&planned);
    tracing::info!(
        provider = provider.name(),
        dry_run = config.dry_run,
        nodes = planned.len(),
        max_tainted = %config.limits.max_tainted,
        "{plan_summary}"
    );
    for node in &planned {
        log_decision(node);
    }
    for surge in &surges {
        tracing::info!(group = %surge.group, step = surge.step.kind(), "{}", surge.describe());
    }

    let writes_made = if config.dry_run {
        planned
            .iter()
            .map(|p| {
                writes(&p.action).then_some(WriteResult {
                    outcome: WriteOutcome::DryRun,
                    attempts: 0,
                })
            })
            .collect()
    } else {
        let by_name: BTreeMap<String, _> = nodes
            .into_iter()
            .map(|node| (node.metadata.name.clone().unwrap_or_default(), node))
            .collect();
        Applier::new(
            client,
            &assessor,
            config.taint_effect,
            now,
            config.replace_within,
            config.limits.retire_drained,
        )
        .apply(&planned, &by_name, &mut calls)
        .await
    };

    // After the node writes: a raise is computed on the capacity the retires leave (each
    // decrements it), and the group's new taints wait for the surge anyway.
    let surge_writes = write_surges(&assessor, config.dry_run, &surges, &mut calls).await;

    let report = Report {
        provider: provider.name(),
        dry_run: config.dry_run,
        nodes: planned
            .into_iter()
            .zip(writes_made)
            .map(|(planned, write)| NodeReport { planned, write })
            .collect(),
        api_calls: calls,
        lookup_failures,
        group_surges: surges
            .into_iter()
            .zip(surge_writes)
            .map(|(surge, write)| GroupSurgeReport { surge, write })
            .collect(),
    };
    let counts = report.summary();
    tracing::info!(
        "writes: applied={} dropped={} failed={}{}",
        counts.applied,
        counts.dropped,
        counts.failed,
        if config.dry_run {
            " (dry run: nothing was changed)"
        } else {
            ""
        }
    );
    tracing::info!("API calls: {}", report.api_calls);
    Ok(report)
}

/// Carries out the surge steps that write; one result per decision (`None`: nothing to write).
async fn write_surges(
    assessor: &Assessor,
    dry_run: bool,
    surges: &[GroupSurge],
    calls: &mut ApiCalls,
) -> Vec<Option<WriteResult>> {
    let mut results = Vec::with_capacity(surges.len());
    for surge in surges {
        if !surge.step.writes() {
            results.push(None);
            continue;
        }
        let written = match assessor {
            _ if dry_run => WriteResult {
                outcome: WriteOutcome::DryRun,
                attempts: 0,
            },
            Assessor::Aws(aws) => match aws.groups.apply_surge(surge, calls).await {
                Ok(done) => {
                    tracing::info!(group = %surge.group, step = surge.step.kind(), "{done}");
                    WriteResult {
                        outcome: WriteOutcome::Applied,
                        attempts: 1,
                    }
                }
                Err(error) => {
                    tracing::error!(group = %surge.group, step = surge.step.kind(), "{error}; the group's new taints keep waiting, the next run tries again");
                    WriteResult {
                        outcome: WriteOutcome::Failed { error },
                        attempts: 1,
                    }
                }
            },
            Assessor::Kubernetes(_) => {
                results.push(None);
                continue;
            }
        };
        results.push(Some(written));
    }
    results
}

fn log_decision(planned: &PlannedNode) {
    let node = planned.candidate.node.as_str();
    match &planned.action {
        Action::Taint { reason, detail } => {
            tracing::info!(node = %node, action = "taint", reason = %reason, "{detail}")
        }
        Action::Untaint { why } => tracing::info!(node = %node, action = "untaint", "{why}"),
        Action::Retire { shrink_group } => {
            tracing::info!(node = %node, action = "retire", shrink_group, "drained")
        }
        Action::Keep { why } => {
            // Budget holds on out-of-date nodes are worth seeing; the rest is noise.
            if matches!(planned.candidate.verdict, Verdict::Drifted { .. })
                && planned.candidate.current_taint.is_none()
            {
                tracing::info!(node = %node, action = "keep", "{why}")
            } else {
                tracing::debug!(node = %node, action = "keep", "{why}")
            }
        }
        Action::Skip { why } => tracing::debug!(node = %node, action = "skip", "{why}"),
    }
}
