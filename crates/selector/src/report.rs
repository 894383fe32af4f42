//! What one run decided and did, as plain data: per node the plan and what became of its write,
//! the group surge decisions, the API calls, the look-ups that failed for some groups. The run
//! fills it in; the output, the compliance figures and the exit status read it. Pure: no I/O.

use std::fmt;

use crate::api_calls::ApiCalls;
use crate::plan::{PlanSummary, PlannedNode, summary};
use crate::provider::aws_group_surge::GroupSurge;
use crate::provider::seam::LookupFailure;

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

/// What became of one planned write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Not written: `--dry-run`.
    DryRun,
    /// Written.
    Applied,
    /// Not written: a concurrent change made the action no longer apply, or the node is gone.
    Dropped { why: String },
    /// Not written: an error, or conflicts that outlasted the retries.
    Failed { error: String },
}

impl WriteOutcome {
    /// `dry-run`, `applied`, `dropped` or `failed`.
    pub const fn label(&self) -> &'static str {
        match self {
            WriteOutcome::DryRun => "dry-run",
            WriteOutcome::Applied => "applied",
            WriteOutcome::Dropped { .. } => "dropped",
            WriteOutcome::Failed { .. } => "failed",
        }
    }

    /// Why it was dropped or how it failed.
    pub fn message(&self) -> Option<&str> {
        match self {
            WriteOutcome::DryRun | WriteOutcome::Applied => None,
            WriteOutcome::Dropped { why } => Some(why),
            WriteOutcome::Failed { error } => Some(error),
        }
    }
}

impl fmt::Display for WriteOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.message() {
            Some(message) => write!(f, "{}: {message}", self.label()),
            None => f.write_str(self.label()),
        }
    }
}

/// One planned write and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteResult {
    pub outcome: WriteOutcome,
    /// Patches sent (0 in a dry run).
    pub attempts: u32,
}
