//! Which waiting nodes hold room made ahead of their drain (`--surge`), and when that room moves
//! to another node. Pure bookkeeping over names; the machine says which nodes are next in line.

use std::collections::{BTreeMap, BTreeSet};

/// Nodes not yet draining that had room made ahead, with how many starts have passed each over
/// since.
#[derive(Default)]
pub(super) struct RoomAhead {
    reserved: BTreeMap<String, usize>,
}

/// What a round changes: room to remove, then room to make, in this order.
#[derive(Debug, Default, PartialEq)]
pub(super) struct AheadChanges {
    pub release: Vec<String>,
    pub reserve: Vec<String>,
}

impl RoomAhead {
    pub(super) fn contains(&self, name: &str) -> bool {
        self.reserved.contains_key(name)
    }

    /// A new term forgets it all: its sweep removes placeholders of nodes not draining, those
    /// made ahead included.
    pub(super) fn forget_all(&mut self) {
        self.reserved.clear();
    }

    /// The node's drain starts: its room, if made ahead, is the drain's now.
    pub(super) fn taken_by_drain(&mut self, name: &str) {
        self.reserved.remove(name);
    }

    /// Forgets the room of nodes that started their drain (theirs now) and returns the nodes
    /// whose room must go because they are no longer in line (`still_waiting` says who is).
    pub(super) fn sort_out(
        &mut self,
        running: &BTreeSet<String>,
        still_waiting: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut release = Vec::new();
        self.reserved.retain(|name, _| {
            if running.contains(name) {
                false
            } else if still_waiting(name) {
                true
            } else {
                release.push(name.clone());
                false
            }
        });
        release
    }

    /// Room for the nodes `next_in_line` (in the round's order), at most `turn` held at once,
    /// after a round of `starts` starts.
    ///
    /// Room made ahead is meant for the next `turn` starts. When the round's order was weighed
    /// by the candidates' budgets (`weighed`: a start with a choice to make), a node holding
    /// room that falls behind the next `turn` has been passed over by the round's starts;
    /// passed over by `turn` starts, it gives its room back: its budgets keep it waiting while
    /// others start, and the room is worth more to the node the choice will take next. Among
    /// nodes that wait equally, one with room stays ahead
    /// ([`crate::fleet::starts::NodeView::room_made_ahead`]), and
    /// room moves only after a full turn of starts, so a budget that holds a node for one
    /// start does not cost its placeholders twice. An unweighed order (a round without a
    /// choice) only fills free places.
    pub(super) fn after_round(
        &mut self,
        next_in_line: Vec<String>,
        weighed: impl Fn(&str) -> bool,
        starts: usize,
        turn: usize,
    ) -> AheadChanges {
        let mut changes = AheadChanges::default();
        for (name, passed_over) in self.reserved.iter_mut() {
            if starts > 0 && weighed(name) && !next_in_line.contains(name) {
                *passed_over += starts;
                if *passed_over >= turn {
                    changes.release.push(name.clone());
                }
            }
        }
        for name in &changes.release {
            self.reserved.remove(name);
        }
        for name in next_in_line {
            if self.reserved.len() >= turn {
                break;
            }
            if !self.reserved.contains_key(&name) {
                self.reserved.insert(name.clone(), 0);
                changes.reserve.push(name);
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn room_fills_free_places_and_moves_only_after_a_full_turn_of_weighed_starts() {
        let weighed = |_: &str| true;
        let mut ahead = RoomAhead::default();
        // Two places: the first two in line get room.
        let changes = ahead.after_round(names(&["a", "b", "c"]), weighed, 1, 2);
        assert_eq!(changes.release, Vec::<String>::new());
        assert_eq!(changes.reserve, names(&["a", "b"]));
        // "a" falls out of the next two after one start: passed over once, it keeps its room.
        let changes = ahead.after_round(names(&["b", "c"]), weighed, 1, 2);
        assert_eq!(changes, AheadChanges::default());
        // A second start passes it over again: a full turn, so its room goes to "c".
        let changes = ahead.after_round(names(&["b", "c"]), weighed, 1, 2);
        assert_eq!(changes.release, names(&["a"]));
        assert_eq!(changes.reserve, names(&["c"]));
    }

    #[test]
    fn a_round_of_several_starts_counts_each_start_it_passed_over() {
        let mut ahead = RoomAhead::default();
        ahead.after_round(names(&["a", "b"]), |_| true, 1, 2);
        // Two starts in one round passed "a" over: a full turn at once.
        let changes = ahead.after_round(names(&["b", "c"]), |_| true, 2, 2);
        assert_eq!(changes.release, names(&["a"]));
        assert_eq!(changes.reserve, names(&["c"]));
    }

    #[test]
    fn an_unweighed_order_only_fills_free_places() {
        let mut ahead = RoomAhead::default();
        ahead.after_round(names(&["a"]), |_| true, 1, 1);
        // Out of line for a full turn, but the order was not weighed by budgets: "a" keeps
        // its room and "b" waits for a free place.
        let changes = ahead.after_round(names(&["b"]), |_| false, 1, 1);
        assert_eq!(changes, AheadChanges::default());
        assert!(ahead.contains("a") && !ahead.contains("b"));
    }

    #[test]
    fn sorting_out_keeps_the_waiting_forgets_the_started_and_releases_the_rest() {
        let mut ahead = RoomAhead::default();
        ahead.after_round(names(&["started", "waiting", "gone"]), |_| true, 0, 3);
        let running = BTreeSet::from(["started".to_string()]);
        // A node that just started still looks in line; its drain owns the room all the same:
        // neither kept here nor released.
        let release = ahead.sort_out(&running, |name| name != "gone");
        assert_eq!(release, names(&["gone"]));
        assert!(ahead.contains("waiting"));
        assert!(!ahead.contains("started") && !ahead.contains("gone"));
    }
}
