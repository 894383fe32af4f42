//! The loop over nodes: which tainted node drains when. The shell ([`controller`]) carries the
//! node, workload and rotation-record watches to a pure state machine ([`machine`]) and runs the
//! commands it returns: start, resume, stop or undo a drain, contend for the Lease, arm the gate.
//!
//! Decides (pure, no I/O): [`machine`] (the pass over the fleet), [`starts`] (which nodes may
//! start under `--max-concurrent` / `--max-unavailable`; [`held`] says why the others wait),
//! [`window`] (maintenance windows),
//! [`pools`] (which RotationPolicy governs a node, and the budget
//! in force for its pool), [`pool_status`] (a policy's status from its nodes), [`gate`] (may the next node start: workloads Ready again, no pod stuck Pending),
//! [`breaker`] (when a rotation halts), [`health`] (the health gate's verdicts), [`held_log`]
//! (when the waiting nodes are written), [`workloads`] (the replica counts the gate reads, as an
//! index the watches update), [`choice`] (which candidates go first, by what their budgets
//! allow).
//!
//! Does (I/O): [`controller`] (the loop), [`gate_io`] (the gate's reads), [`health_io`] (asks
//! Prometheus and the health URLs), [`choice_io`] (reads the candidates' pods for [`choice`]
//! to weigh), [`workloads_io`] (the workload watches), [`pools_io`] (the RotationPolicy watch and status
//! writes).

pub mod breaker;
mod choice;
mod choice_io;
pub mod controller;
pub mod gate;
mod gate_io;
pub mod health;
mod health_io;
pub mod held;
mod held_log;
mod lookahead;
mod machine;
pub mod node_labels;
pub mod pool_status;
pub mod pools;
mod pools_io;
pub mod starts;
mod tainted_nodes;
pub mod window;
pub mod workloads;
mod workloads_io;
