//! What the control loop remembers between steps: where it last reconciled, its clocks, its pause.

use std::time::Duration;

use jiff::Timestamp;

/// What the control loop keeps from one step to the next.
#[derive(Debug, Default)]
pub struct ControlLoopMemory {
    /// The resourceVersion the controllers last reconciled at; unchanged means nothing to do
    /// but timed transitions.
    pub(super) reconciled_rv: u64,
    pub(super) next_timed_transition: Option<Timestamp>,
    pub(super) last_tick: Option<Timestamp>,
    /// How long each controller took in the last step that ran them, in the order they ran.
    pub(super) last_step_times: Vec<(&'static str, Duration)>,
    /// Set through the admin API: the control loop skips its steps.
    pub(super) paused: bool,
}
