//! rotor-drainer: drains nodes that carry rotor's drain taint, safely and across restarts.
//!
//! Decisions are pure functions over Kubernetes objects and plain data (no I/O, no async, no
//! clock reads): `pods` (what to do with each pod), `state` (the per-node record kept in
//! annotations), `fleet` (which nodes may start), `window` (maintenance windows), `gate` (may
//! the next node start), `workloads` (the replica counts the gate reads, as an index the watches
//! update), `pace` (how fast each budget gives disruptions back, from rotor's own evictions),
//! `health` (how the health gate judges Prometheus's alerts and health URLs), `breaker` (when
//! the circuit breaker halts a rotation), `restart` (when a one-replica Deployment is restarted
//! rather than its pod evicted).
//!
//! The I/O sits at the edges: `evict` (the Eviction API; `budget_turns` keeps one eviction per
//! budget on the wire), `deployments` (the rollout restart's reads and patch), `drain` (one
//! node's drain task), `controller` (the loop over nodes),
//! `leader` (the Lease), `notify` (webhook notifications), `rotation` (the fleet-wide record
//! beside the Lease), `runtime` (wiring), `status` (the `status` subcommand), `metrics`,
//! `config` (flags). `error` holds what can fail, in words an operator can act on; `anyhow` is
//! used only by the binary.

pub mod config;
pub mod drain;
pub mod error;
pub mod fleet;
pub mod leader;
pub mod metrics;
pub mod record;
pub mod runtime;
