//! Properties of [`NodeBudget`] parsing (issue 18): any text is a budget or a refusal that
//! quotes it, budgets print and parse back, and a percentage resolves to the smallest count
//! that covers it. Each runs `PROPTEST_CASES` cases (256 by default); failures found so far are
//! replayed first from `proptest-regressions/node_budget/fuzz.txt`.

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

const TOKENS: &[&str] = &[
    "0",
    "1",
    "5",
    "25",
    "100",
    "101",
    "4294967295",
    "4294967296",
    "%",
    "%%",
    "-",
    "+",
    ".",
    " ",
    "\t",
    "\u{a0}",
    "٣",
    "e3",
];

fn token_soup() -> impl Strategy<Value = String> {
    vec(prop::sample::select(TOKENS), 0..6).prop_map(|tokens| tokens.concat())
}

fn budget() -> impl Strategy<Value = NodeBudget> {
    prop_oneof![
        any::<u32>().prop_map(NodeBudget::Count),
        (0u32..=100).prop_map(NodeBudget::Percent),
    ]
}

proptest! {
    /// Any text is a budget or a refusal quoting it; what parses prints back to itself, and
    /// blanks around it do not matter.
    #[test]
    fn parse_never_panics(input in prop_oneof![any::<String>(), token_soup()]) {
        match input.parse::<NodeBudget>() {
            Ok(budget) => {
                prop_assert_eq!(budget.to_string().parse::<NodeBudget>(), Ok(budget));
                prop_assert_eq!(input.trim().parse::<NodeBudget>(), Ok(budget));
                if let NodeBudget::Percent(p) = budget {
                    prop_assert!(p <= 100);
                }
            }
            Err(e) => prop_assert!(e.to_string().contains(&format!("{input:?}")), "{}", e),
        }
    }

    /// Every budget round-trips; a percentage of `total` nodes resolves to the smallest count
    /// that is at least that share (never more than `total`), a count to itself.
    #[test]
    fn budgets_round_trip_and_resolve(budget in budget(), total in 0usize..100_000) {
        prop_assert_eq!(budget.to_string().parse::<NodeBudget>(), Ok(budget));
        let resolved = budget.resolve(total);
        match budget {
            NodeBudget::Count(n) => prop_assert_eq!(resolved, n as usize),
            NodeBudget::Percent(p) => {
                let share = total * p as usize;
                prop_assert!(resolved * 100 >= share && resolved <= total);
                prop_assert!(resolved == 0 || (resolved - 1) * 100 < share);
            }
        }
    }
}
