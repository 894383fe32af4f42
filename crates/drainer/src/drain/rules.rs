//! DrainRules, as a drain applies them: each rule read into selectors ([`DrainRules::read`]),
//! the rules that apply on one node ([`DrainRules::on_node`]), and what they say about one pod
//! ([`NodeRules::rule_of`]). Pure; the rules and the namespaces' labels come from watches
//! (`rules_io.rs`).
//!
//! Where several rules select a pod, the first by name applies (so an operator can predict it
//! from `kubectl get drainrules`). A pod no rule selects is drained with order 0. A rule that
//! cannot be read is left out and named in the log.

use std::collections::BTreeMap;

use rotor_apimachinery::labels::LabelSelector;
use rotor_policy::{DrainBehavior, DrainRule, LabelSelectorSpec};

/// What the rules say about one pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum PodRule {
    /// Evict it, in this order (0 when no rule selects it).
    Drain { order: i32 },
    /// Leave it on the node; it never holds the drain.
    Skip,
    /// Never evict it; the node waits until it has completed.
    WaitCompleted,
    /// The rules cannot be known now (not listed yet, or a namespace's labels are not): the
    /// pod is neither evicted nor skipped until they are.
    #[default]
    Unknown,
}

/// One rule, read.
#[derive(Clone, Debug)]
struct ReadRule {
    name: String,
    rule: PodRule,
    /// `(pod selector, namespace selector)`, either absent; entries ORed.
    pods: Vec<(Option<LabelSelector>, Option<LabelSelector>)>,
    /// Entries ORed; empty: every node.
    nodes: Vec<LabelSelector>,
}

/// Every DrainRule the drainer knows, sorted by name.
#[derive(Clone, Debug, Default)]
pub struct DrainRules {
    rules: Vec<ReadRule>,
}

/// Labels by namespace name.
pub type NamespaceLabels = BTreeMap<String, BTreeMap<String, String>>;

fn selector(spec: &LabelSelectorSpec) -> Result<LabelSelector, String> {
    spec.to_selector().map_err(|e| e.to_string())
}

impl DrainRules {
    /// Reads the rules; each one that does not read is returned with why, and left out.
    pub fn read(rules: &[DrainRule]) -> (DrainRules, Vec<(String, String)>) {
        let mut read = Vec::new();
        let mut unread = Vec::new();
        for rule in rules {
            let name = rule.metadata.name.clone().unwrap_or_default();
            let spec = &rule.spec;
            let parsed = (|| -> Result<ReadRule, String> {
                let pods = spec
                    .pods
                    .iter()
                    .map(|p| {
                        Ok((
                            p.selector.as_ref().map(selector).transpose()?,
                            p.namespace_selector.as_ref().map(selector).transpose()?,
                        ))
                    })
                    .collect::<Result<_, String>>()?;
                let nodes = spec
                    .nodes
                    .iter()
                    .map(|n| selector(&n.selector))
                    .collect::<Result<_, _>>()?;
                Ok(ReadRule {
                    name: name.clone(),
                    rule: match spec.behavior {
                        DrainBehavior::Drain => PodRule::Drain {
                            order: spec.order.unwrap_or(0),
                        },
                        DrainBehavior::Skip => PodRule::Skip,
                        DrainBehavior::WaitCompleted => PodRule::WaitCompleted,
                    },
                    pods,
                    nodes,
                })
            })();
            match parsed {
                Ok(r) => read.push(r),
                Err(why) => unread.push((name, why)),
            }
        }
        read.sort_by(|a, b| a.name.cmp(&b.name));
        (DrainRules { rules: read }, unread)
    }

    /// Whether any rule selects pods by their namespace's labels.
    pub fn needs_namespaces(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.pods.iter().any(|(_, ns)| ns.is_some()))
    }

    /// The rules that apply on a node with these labels, with the namespaces' labels
    /// (`None` while they are not known).
    pub fn on_node<'a>(
        &'a self,
        node_labels: &BTreeMap<String, String>,
        namespaces: Option<&'a NamespaceLabels>,
    ) -> NodeRules<'a> {
        NodeRules {
            rules: self
                .rules
                .iter()
                .filter(|r| r.nodes.is_empty() || r.nodes.iter().any(|s| s.matches(node_labels)))
                .collect(),
            namespaces,
        }
    }
}

/// The rules that apply on one node.
pub struct NodeRules<'a> {
    rules: Vec<&'a ReadRule>,
    namespaces: Option<&'a NamespaceLabels>,
}

impl NodeRules<'_> {
    /// What the rules say about a pod of `namespace` with `labels`, and which rule says it.
    pub fn rule_of(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> (PodRule, Option<&str>) {
        let no_labels = BTreeMap::new();
        for rule in &self.rules {
            for (pods, namespaces) in &rule.pods {
                if pods.as_ref().is_some_and(|s| !s.matches(labels)) {
                    continue;
                }
                if let Some(ns_selector) = namespaces {
                    let Some(known) = self.namespaces else {
                        return (PodRule::Unknown, Some(&rule.name));
                    };
                    // A namespace not (yet) seen: its labels are unknown, so is the answer.
                    let Some(ns_labels) = known.get(namespace) else {
                        return (PodRule::Unknown, Some(&rule.name));
                    };
                    if !ns_selector.matches(if ns_labels.is_empty() {
                        &no_labels
                    } else {
                        ns_labels
                    }) {
                        continue;
                    }
                }
                return (rule.rule, Some(&rule.name));
            }
        }
        (PodRule::Drain { order: 0 }, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rotor_policy::{DrainRuleSpec, NodeSelection, PodSelection};

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn spec(pairs: &[(&str, &str)]) -> LabelSelectorSpec {
        LabelSelectorSpec {
            match_labels: labels(pairs),
            ..Default::default()
        }
    }

    fn rule(
        name: &str,
        behavior: DrainBehavior,
        order: Option<i32>,
        pods: &[(&str, &str)],
    ) -> DrainRule {
        DrainRule::new(
            name,
            DrainRuleSpec {
                behavior,
                order,
                pods: vec![PodSelection {
                    selector: Some(spec(pods)),
                    namespace_selector: None,
                }],
                nodes: vec![],
            },
        )
    }

    #[test]
    fn the_first_rule_by_name_decides_and_unselected_pods_drain_at_order_zero() {
        let (rules, unread) = DrainRules::read(&[
            rule(
                "b-db-last",
                DrainBehavior::Drain,
                Some(10),
                &[("tier", "db")],
            ),
            rule(
                "a-skip-canary",
                DrainBehavior::Skip,
                None,
                &[("track", "canary")],
            ),
            rule(
                "c-batch",
                DrainBehavior::WaitCompleted,
                None,
                &[("kind", "batch")],
            ),
        ]);
        assert!(unread.is_empty());
        let node = rules.on_node(&labels(&[]), None);
        assert_eq!(
            node.rule_of("shop", &labels(&[("tier", "db")])),
            (PodRule::Drain { order: 10 }, Some("b-db-last"))
        );
        // Both a-skip-canary and b-db-last select it: the first by name applies.
        assert_eq!(
            node.rule_of("shop", &labels(&[("tier", "db"), ("track", "canary")])),
            (PodRule::Skip, Some("a-skip-canary"))
        );
        assert_eq!(
            node.rule_of("etl", &labels(&[("kind", "batch")])),
            (PodRule::WaitCompleted, Some("c-batch"))
        );
        assert_eq!(
            node.rule_of("shop", &labels(&[("tier", "web")])),
            (PodRule::Drain { order: 0 }, None)
        );
    }

    #[test]
    fn node_and_namespace_selectors_narrow_a_rule_and_unknown_namespaces_hold_the_answer() {
        let mut gpu_batch = rule("gpu-batch", DrainBehavior::WaitCompleted, None, &[]);
        gpu_batch.spec.pods[0] = PodSelection {
            selector: None,
            namespace_selector: Some(spec(&[("team", "ml")])),
        };
        gpu_batch.spec.nodes = vec![NodeSelection {
            selector: spec(&[("pool", "gpu")]),
        }];
        let (rules, _) = DrainRules::read(&[gpu_batch]);
        assert!(rules.needs_namespaces());
        let namespaces: NamespaceLabels = [
            ("train".to_string(), labels(&[("team", "ml")])),
            ("web".to_string(), labels(&[("team", "shop")])),
        ]
        .into();
        let gpu = rules.on_node(&labels(&[("pool", "gpu")]), Some(&namespaces));
        assert_eq!(gpu.rule_of("train", &labels(&[])).0, PodRule::WaitCompleted);
        assert_eq!(
            gpu.rule_of("web", &labels(&[])).0,
            PodRule::Drain { order: 0 }
        );
        assert_eq!(gpu.rule_of("new-ns", &labels(&[])).0, PodRule::Unknown);
        // Another pool: the rule does not apply.
        let general = rules.on_node(&labels(&[("pool", "general")]), Some(&namespaces));
        assert_eq!(
            general.rule_of("train", &labels(&[])).0,
            PodRule::Drain { order: 0 }
        );
        // Namespaces not listed yet: unknown, not guessed.
        let early = rules.on_node(&labels(&[("pool", "gpu")]), None);
        assert_eq!(early.rule_of("train", &labels(&[])).0, PodRule::Unknown);
    }
}
