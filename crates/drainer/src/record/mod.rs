//! What others read: everything rotor-drainer writes for operators, other tools and its own
//! next leader. The node record ([`node`]: the drain's phase, deadline and blocker as
//! annotations), the Events ([`events`]), the rotation record beside the Lease ([`rotation`]:
//! halt, health gate, waiting nodes), notifications to webhooks ([`notify`]) and the `status`
//! subcommand that reads them back ([`status`]).
//!
//! Each `X.rs` is the format or the words, pure; its `X_io.rs` writes and reads it.

pub mod events;
pub mod events_io;
pub mod node;
pub mod node_io;
pub mod notify;
pub mod notify_io;
pub mod rotation;
pub mod rotation_io;
pub mod status;
