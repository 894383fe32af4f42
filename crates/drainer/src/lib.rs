//! rotor-drainer: drains nodes that carry rotor's drain taint, safely and across restarts.
//!
//! Laid out by role, one folder per concern; in each, `X.rs` decides (pure functions and state
//! machines over plain data: no `async`, no `Api`, no clock read) and `X_io.rs` carries it out:
//! - [`fleet`]: the loop over nodes: which tainted node drains when (the state machine, the
//!   start limits, the choice, the gate, windows, the breaker, the health gate);
//! - [`drain`]: one node's drain, from the cordon to an empty node (the task and its passes,
//!   what to do with each pod and which budget it charges, the eviction queue and the wire,
//!   the rollout restart, surge), and what the drains publish for the loop;
//! - [`record`]: what others read (the node record, Events, the rotation record,
//!   notifications, the `status` subcommand);
//! - [`leader`]: who acts (the Lease, and the fence on a former leader's writes).
//!
//! Folders import only from those below them: `leader` < `record` < `drain` < `fleet`
//! (`tests/layout.rs` keeps this). Beside them: `config` (flags, and the settings each folder
//! gets from them), `runtime` (wiring), `metrics`, `watch_backoff` and `retry_later` (how a
//! failed watch and a failed write are tried again), and `error` (what can fail, in words an
//! operator can act on; `anyhow` is used only by the binary).

// The folders' docs link the private modules and items they describe: they are written for the
// code's readers (`cargo doc --document-private-items`), not for an API this crate offers.
#![allow(rustdoc::private_intra_doc_links)]

pub mod config;
pub mod crd_watch;
pub mod drain;
pub mod error;
pub mod fleet;
pub mod leader;
pub mod metrics;
pub mod record;
pub mod retry_later;
pub mod runtime;
pub mod watch_backoff;
