//! Why a tainted node does not start draining now, in the words an operator reads (the log, the
//! `DrainHeld` Event, `status`): one [`HeldReason`] per node held, each shown in one line. The
//! decisions that hold a node are in [`crate::fleet::starts`] and [`crate::fleet::machine`].

use std::fmt;

use jiff::Timestamp;
use rotor_core::NodeBudget;
use rotor_core::contract::{
    DO_NOT_DISRUPT_ANNOTATION, DRAIN_APPROVED_ANNOTATION, PRE_DRAIN_HOOK_PREFIX, format_timestamp,
};

/// A fleet limit that holds a node (rather than something about the node itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    MaxConcurrent,
    MaxUnavailable,
}

/// Why a tainted node does not start draining now. Shown to operators (logs, `status`) through
/// its `Display`, one line each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeldReason {
    /// The node carries `rotor.dev/do-not-disrupt=true`.
    OptedOut,
    /// Pre-drain hooks hold the node (`pre-drain.hook.rotor.dev/<name>`), as named and owned.
    PreDrainHooks(Vec<String>),
    /// `--require-approval`: the node is not approved yet.
    AwaitingApproval,
    /// Its last attempt failed; the next starts at `retry_at`.
    BackingOff { attempts: u32, retry_at: Timestamp },
    /// Its drain was parked, blocked by `blocker` past park-after; tried again at `retry_at`.
    Parked {
        blocker: String,
        retry_at: Timestamp,
    },
    /// `--max-unavailable` resolves to zero for a fleet of `total` nodes (fail closed).
    NoneAllowed {
        max_unavailable: NodeBudget,
        total: usize,
    },
    /// Every `--max-concurrent` slot is taken.
    MaxConcurrent {
        max_concurrent: usize,
        draining: usize,
    },
    /// Starting it would take more nodes out than `--max-unavailable` allows.
    MaxUnavailable {
        max_unavailable: NodeBudget,
        unavailable: usize,
        total: usize,
    },
    /// No `--maintenance-window` is open.
    OutsideWindows,
    /// Drain taints are still arriving (see the controller's taint burst).
    TaintsArriving,
    /// The start gate holds: the cluster has not absorbed the last drains; the gate's words.
    Gate(String),
    /// The health gate holds: a health check is unhealthy; the checks' words.
    Health(String),
    /// The circuit breaker halted the rotation, for this reason.
    Halted(String),
    /// Several RotationPolicies select the node at the same priority (their names).
    PolicyOverlap(Vec<String>),
    /// Its RotationPolicy cannot be followed, for this reason (fail closed).
    PolicyInvalid { policy: String, why: String },
    /// Its RotationPolicy's budgets allow no drain now: outside every scheduled budget (or none
    /// applies to its drain reason), until `opens` if known.
    PolicyClosed {
        policy: String,
        opens: Option<Timestamp>,
    },
    /// Its RotationPolicy's budget in force is 0 (the pool is paused), until `until` if known.
    PolicyPaused {
        policy: String,
        until: Option<Timestamp>,
    },
    /// Starting it would take more of its pool's nodes out than the budget in force allows.
    PolicyBudget {
        policy: String,
        budget: String,
        unavailable: usize,
    },
}

impl HeldReason {
    /// The fleet limit this reason names, if it is one.
    pub fn limit(&self) -> Option<Limit> {
        match self {
            HeldReason::MaxConcurrent { .. } => Some(Limit::MaxConcurrent),
            HeldReason::MaxUnavailable { .. } => Some(Limit::MaxUnavailable),
            _ => None,
        }
    }
}

impl fmt::Display for HeldReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeldReason::OptedOut => write!(f, "node has {DO_NOT_DISRUPT_ANNOTATION}=true"),
            HeldReason::AwaitingApproval => write!(
                f,
                "waiting for approval (--require-approval): annotate the node {DRAIN_APPROVED_ANNOTATION}=true to let its drain start"
            ),
            HeldReason::PreDrainHooks(hooks) => write!(
                f,
                "held by pre-drain hook(s) {} until their owners remove the {PRE_DRAIN_HOOK_PREFIX}<name> annotation(s)",
                hooks.join(", ")
            ),
            HeldReason::BackingOff { attempts, retry_at } => write!(
                f,
                "failed after {attempts} attempt(s); retrying at {}",
                format_timestamp(*retry_at)
            ),
            HeldReason::Parked { blocker, retry_at } => write!(
                f,
                "parked (rotor's cordon undone, its slot given back) while blocked: {blocker}; trying again at {}",
                format_timestamp(*retry_at)
            ),
            HeldReason::NoneAllowed {
                max_unavailable,
                total,
            } => write!(
                f,
                "max-unavailable {max_unavailable} allows no node of {total} to be disrupted"
            ),
            HeldReason::MaxConcurrent {
                max_concurrent,
                draining,
            } => write!(
                f,
                "max-concurrent {max_concurrent} reached ({draining} draining)"
            ),
            HeldReason::MaxUnavailable {
                max_unavailable,
                unavailable,
                total,
            } => write!(
                f,
                "max-unavailable {max_unavailable} reached ({unavailable} of {total} nodes unavailable)"
            ),
            HeldReason::OutsideWindows => f.write_str("outside every maintenance window"),
            HeldReason::TaintsArriving => {
                f.write_str("drain taints are still arriving; choosing once they settle")
            }
            HeldReason::Gate(why) => write!(f, "gate: {why}"),
            HeldReason::Health(why) => write!(f, "health gate closed: {why}"),
            HeldReason::Halted(why) => {
                write!(f, "rotation halted until `rotor-drainer resume`: {why}")
            }
            HeldReason::PolicyOverlap(names) => write!(
                f,
                "selected by RotationPolicies {} at the same priority: give one a higher priority or narrow their nodeSelectors",
                names.join(", ")
            ),
            HeldReason::PolicyInvalid { policy, why } => write!(
                f,
                "RotationPolicy {policy} cannot be followed, so its nodes wait: {why}"
            ),
            HeldReason::PolicyClosed { policy, opens } => {
                write!(
                    f,
                    "RotationPolicy {policy}: outside every scheduled budget for this drain reason"
                )?;
                match opens {
                    Some(at) => write!(f, "; the next opens at {}", format_timestamp(*at)),
                    None => Ok(()),
                }
            }
            HeldReason::PolicyPaused { policy, until } => {
                write!(
                    f,
                    "RotationPolicy {policy}: the budget in force is 0 (paused)"
                )?;
                match until {
                    Some(at) => write!(f, " until {}", format_timestamp(*at)),
                    None => Ok(()),
                }
            }
            HeldReason::PolicyBudget {
                policy,
                budget,
                unavailable,
            } => write!(
                f,
                "RotationPolicy {policy}: budget {budget} reached ({unavailable} of its nodes unavailable)"
            ),
        }
    }
}

/// A tainted node that does not start now, and why.
pub type Held = (String, HeldReason);
