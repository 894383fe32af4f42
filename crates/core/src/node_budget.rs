//! A budget of nodes, as `--max-unavailable` (drainer) and `--max-tainted` (selector) take it:
//! a count, or a percentage of the nodes considered, rounded up. One type, so both binaries
//! accept and report the same forms.

use std::fmt;
use std::str::FromStr;

/// A number of nodes, absolute or as a share of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeBudget {
    /// At most this many nodes.
    Count(u32),
    /// At most this percentage (0–100) of the nodes, rounded up.
    Percent(u32),
}

impl NodeBudget {
    /// The budget for a cluster of `total` nodes; percentages round up, as Karpenter's node
    /// budgets do (10% of 3 nodes is 1).
    pub fn resolve(&self, total: usize) -> usize {
        match *self {
            NodeBudget::Count(n) => n as usize,
            NodeBudget::Percent(p) => (total.saturating_mul(p as usize)).div_ceil(100),
        }
    }

    /// Whether the budget lets no node go whatever the number of nodes: `0` or `0%` (any
    /// other percentage rounds up to at least one node).
    pub fn lets_none(&self) -> bool {
        matches!(self, NodeBudget::Count(0) | NodeBudget::Percent(0))
    }
}

impl NodeBudget {
    /// `5`, or `25% (3 of 12 nodes)`: the budget with what it came to.
    pub fn describe(self, total: usize) -> String {
        match self {
            NodeBudget::Count(count) => count.to_string(),
            NodeBudget::Percent(percent) => {
                format!("{percent}% ({} of {total} nodes)", self.resolve(total))
            }
        }
    }
}

impl fmt::Display for NodeBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeBudget::Count(n) => write!(f, "{n}"),
            NodeBudget::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A budget that is neither a count nor a percentage from 0 to 100.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid node budget {value:?}: {problem}; expected a node count such as \"3\" or a percentage of nodes from 0% to 100% such as \"25%\""
)]
pub struct ParseBudgetError {
    /// The text that failed to parse.
    pub value: String,
    /// What is wrong with it.
    pub problem: &'static str,
}

impl FromStr for NodeBudget {
    type Err = ParseBudgetError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let error = |problem| ParseBudgetError {
            value: value.to_owned(),
            problem,
        };
        let text = value.trim();
        let (digits, percent) = match text.strip_suffix('%') {
            Some(digits) => (digits, true),
            None => (text, false),
        };
        if digits.is_empty() {
            return Err(error("no number"));
        }
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(error("not a whole non-negative number"));
        }
        let number: u32 = digits.parse().map_err(|_| error("number too large"))?;
        if !percent {
            return Ok(NodeBudget::Count(number));
        }
        if number > 100 {
            return Err(error("a percentage cannot exceed 100%"));
        }
        Ok(NodeBudget::Percent(number))
    }
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse_display_resolve_and_describe() {
        assert_eq!("3".parse(), Ok(NodeBudget::Count(3)));
        assert_eq!(" 25% ".parse(), Ok(NodeBudget::Percent(25)));
        assert_eq!(NodeBudget::Percent(25).to_string(), "25%");
        // Percentages round up: 10% of 3 nodes is 1.
        assert_eq!(NodeBudget::Percent(10).resolve(3), 1);
        assert_eq!(NodeBudget::Percent(0).resolve(100), 0);
        assert_eq!(NodeBudget::Count(2).resolve(100), 2);
        // Only a zero lets no node go, however few the nodes.
        for b in [NodeBudget::Count(0), NodeBudget::Percent(0)] {
            assert!(b.lets_none() && b.resolve(1) == 0);
        }
        for b in [NodeBudget::Count(1), NodeBudget::Percent(1)] {
            assert!(!b.lets_none() && b.resolve(1) == 1);
        }
        assert_eq!(NodeBudget::Percent(25).describe(12), "25% (3 of 12 nodes)");
        assert_eq!(NodeBudget::Count(5).describe(12), "5");
        for b in [NodeBudget::Count(7), NodeBudget::Percent(10)] {
            assert_eq!(b.to_string().parse(), Ok(b));
        }
    }

    #[test]
    fn bad_budgets_say_what_is_expected() {
        for (text, problem) in [
            ("", "no number"),
            ("%", "no number"),
            ("-1", "not a whole"),
            ("1.5", "not a whole"),
            ("ten", "not a whole"),
            ("101%", "cannot exceed 100%"),
            ("99999999999", "too large"),
            ("4294967296", "too large"),
            ("25 %", "not a whole"),
            ("3.5", "not a whole"),
        ] {
            let message = text.parse::<NodeBudget>().unwrap_err().to_string();
            assert!(message.contains(problem), "{text}: {message}");
            assert!(message.contains("\"25%\""), "{message}");
        }
    }
}
