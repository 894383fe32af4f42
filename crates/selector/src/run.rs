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
use crate::apply::{Applier, describe, writes};
use crate::cli::SelectorConfig;
use crate::node_list::list_nodes;
use crate::plan::{Action, PlannedNode, plan, summary};
use crate::provider::aws_group_surge::{
    GroupSurge, SurgeStep, hold_raises_over_missed_give_backs, plan_group_surge,
};
use crate::provider::seam::ProviderError;
use crate::provider::{Assessor, Provider};
use crate::report::{GroupSurgeReport, NodeReport, Report, WriteOutcome, WriteResult};
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
    let mut surges = match &assessor {
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
    hold_raises_over_missed_give_backs(&mut surges, &planned, &writes_made);
    for surge in &surges {
        if let SurgeStep::RaiseHeld { .. } = surge.step {
            tracing::warn!(group = %surge.group, step = surge.step.kind(), "{}", surge.describe());
        }
    }
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
            Assessor::Kubernetes(_) | Assessor::Azure(_) | Assessor::Gcp(_) => {
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
