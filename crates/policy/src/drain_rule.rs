//! The `DrainRule` resource (`rotor.dev/v1alpha1`, cluster-scoped): what a drain does with the
//! pods it selects. `Drain` evicts them in ascending `order` (a group gone before the next
//! starts), `Skip` leaves them on the node without holding the drain, `WaitCompleted` waits for
//! them to finish (batch work) and never evicts them. Where several rules select a pod, the
//! first by name applies.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::resource::LabelSelectorSpec;

/// What a drain does with the pods this rule selects, on the nodes it selects.
// Clippy reads the repeated `printcolumn(..., type_ = ...)` arguments as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "rotor.dev",
    version = "v1alpha1",
    kind = "DrainRule",
    plural = "drainrules",
    shortname = "drule",
    category = "rotor",
    doc = "What rotor's drains do with the pods this rule selects: evict them in an order, skip them, or wait for them to complete.",
    printcolumn(json_path = ".spec.behavior", name = "Behavior", type_ = "string"),
    printcolumn(json_path = ".spec.order", name = "Order", type_ = "integer"),
    printcolumn(
        json_path = ".metadata.creationTimestamp",
        name = "Age",
        type_ = "date"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.order) || self.behavior == 'Drain'").message("order applies only to behavior Drain")
)]
pub struct DrainRuleSpec {
    /// Drain: evict the pods, in `order`. Skip: leave them on the node; they never hold the
    /// drain. WaitCompleted: never evict them; the drain waits until they have completed (or
    /// are gone), within the drain's timeout.
    pub behavior: DrainBehavior,

    /// With Drain: pods are evicted by ascending order, every pod of one order gone before the
    /// next order starts. Pods no rule selects have order 0; negative orders go before them.
    /// Any 32-bit integer (-2147483648 to 2147483647); the API server refuses one outside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = i32::MIN, max = i32::MAX))]
    pub order: Option<i32>,

    /// Which pods: a pod matching any entry (each entry's selectors all hold) is selected.
    #[schemars(length(min = 1, max = 32))]
    pub pods: Vec<PodSelection>,

    /// On which nodes: a node matching any entry; every node when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub nodes: Vec<NodeSelection>,
}

/// A drain rule's behavior.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DrainBehavior {
    Drain,
    Skip,
    WaitCompleted,
}

/// Pods by their labels and their namespace's labels.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.selector) || has(self.namespaceSelector)").message("a pods entry needs a selector, a namespaceSelector or both")
)]
pub struct PodSelection {
    /// The pod's labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelectorSpec>,
    /// The labels of the pod's namespace (`kubernetes.io/metadata.name` names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelectorSpec>,
}

/// Nodes by their labels.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelection {
    /// The node's labels.
    pub selector: LabelSelectorSpec,
}
