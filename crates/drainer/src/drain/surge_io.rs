//! The I/O of surge ([`crate::drain::surge`] decides): create a node's placeholder sets, wait
//! until the scheduler has placed their pods (an autoscaler adding nodes for them if it must),
//! free the room just before the evictions (once no other node's placeholders are pending, the
//! sets scaled to zero, the ReplicaSet controller deleting the placeholders) or, after a
//! time-out, hand the pods over (the sets deleted, their pods left, so that a preempted
//! placeholder is not made again), and remove what is left once the node is drained, when its
//! drain is cancelled, or, for a previous leader's leftovers, when a new leader starts. A surge
//! never stops a drain: whatever fails, the drain goes on without the room and says why.
//!
//! `room` holds what the others share, [`SurgeRoom`], and the creation of a node's sets; a
//! drain's room is made in `making`, freed just before its evictions in `freeing`, made ahead
//! of its drain in `ahead`, and removed in `removal`.

mod ahead;
mod freeing;
mod making;
mod removal;
mod room;

pub use ahead::{release_ahead, reserve_ahead};
pub use making::{SurgeOutcome, make_room};
pub use removal::{release, release_if_held};
pub use room::SurgeRoom;
