//! Which policy governs a node that several select. One rule, read by the drainer (which pool a
//! node belongs to) and by the simulator's demo (how many nodes each pool's status should count).

/// Of the policies that select a node, given as `(name, priority)`, the names at the highest
/// priority, sorted and without repeats. One name governs the node; several are an overlap,
/// which holds the node rather than guess between them; none leaves the node to the drainer's
/// flags.
pub fn highest_priority<'a>(selecting: impl IntoIterator<Item = (&'a str, i32)>) -> Vec<&'a str> {
    let mut top = None;
    let mut names = Vec::new();
    for (name, priority) in selecting {
        match top {
            Some(t) if priority < t => {}
            Some(t) if priority == t => names.push(name),
            _ => {
                top = Some(priority);
                names.clear();
                names.push(name);
            }
        }
    }
    names.sort_unstable();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::highest_priority;

    #[test]
    fn the_highest_priority_governs_whatever_order_the_policies_come_in() {
        assert_eq!(
            highest_priority([("spot", 0), ("gpu", 10), ("all", -5)]),
            ["gpu"]
        );
        assert_eq!(
            highest_priority([("all", -5), ("spot", 0), ("gpu", 10)]),
            ["gpu"]
        );
    }

    #[test]
    fn a_tie_at_the_top_names_every_policy_in_it_and_none_below() {
        assert_eq!(
            highest_priority([("b", 3), ("low", 1), ("a", 3)]),
            ["a", "b"]
        );
        // A tie below the top is no overlap.
        assert_eq!(highest_priority([("x", 1), ("y", 1), ("z", 2)]), ["z"]);
    }

    #[test]
    fn no_selecting_policy_leaves_the_node_to_the_flags() {
        assert!(highest_priority([]).is_empty());
    }
}
