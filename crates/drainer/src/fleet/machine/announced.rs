//! Which waiting nodes have been told, by an Event, what holds them. Only a person can clear
//! these holds (pre-drain hooks, a missing approval, RotationPolicies overlapping on the node,
//! a policy that cannot be followed), so each is said on the node once per change: an operator
//! reading the node sees who or what holds it, without an Event every pass.

use std::collections::BTreeMap;

use crate::fleet::held::{Held, HeldReason};

/// What was last announced on each node that such a hold keeps waiting.
#[derive(Default)]
pub(super) struct HoldsAnnounced {
    announced: BTreeMap<String, HeldReason>,
}

impl HoldsAnnounced {
    /// The announcements that are news among a round's `held` nodes, as (node, why): the hold
    /// is new or changed since the last one. A node no longer held so is forgotten, so a hold
    /// that comes back is said again.
    pub(super) fn take_news(&mut self, held: &[Held]) -> Vec<(String, String)> {
        let held: BTreeMap<&String, &HeldReason> = held
            .iter()
            .filter(|(_, why)| {
                matches!(
                    why,
                    HeldReason::PreDrainHooks(_)
                        | HeldReason::AwaitingApproval
                        | HeldReason::PolicyOverlap(_)
                        | HeldReason::PolicyInvalid { .. }
                )
            })
            .map(|(node, why)| (node, why))
            .collect();
        self.announced.retain(|node, _| held.contains_key(node));
        let mut news = Vec::new();
        for (node, why) in held {
            if self.announced.get(node) != Some(why) {
                self.announced.insert(node.clone(), why.clone());
                news.push((node.clone(), why.to_string()));
            }
        }
        news
    }
}
