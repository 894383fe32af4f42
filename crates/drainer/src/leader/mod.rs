//! Leader election: who acts. [`election`] holds the Lease (its decision, `decide`, is pure)
//! and contends only while a node needs rotor; [`fence`] refuses the writes of a replica that
//! has lost it.

pub mod election;
pub mod fence;
