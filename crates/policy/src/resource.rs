//! The `RotationPolicy` resource (`rotor.dev/v1alpha1`, cluster-scoped) as Rust types. The CRD in
//! `deploy/` is generated from them ([`crate::crds`]), schema, CEL rules and printer columns
//! included, so what the API server accepts and what the drainer reads cannot drift apart. The
//! doc comments become the schema's descriptions, which `kubectl explain` shows.
//!
//! What the API server checks (patterns, enums, CEL rules) is what can be checked without a
//! clock or a time-zone database; the drainer checks the rest (the cron schedule's fields, the
//! zone's name) when it reads a policy, and a policy it cannot read holds its nodes (fail
//! closed) and says why in its status.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How nodes of one pool are rotated: which nodes it governs, how many of them may be
/// disrupted at once and when, and how each is drained. Nodes that no policy selects follow
/// rotor-drainer's flags.
// Clippy reads the repeated `printcolumn(..., type_ = ...)` arguments as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "rotor.dev",
    version = "v1alpha1",
    kind = "RotationPolicy",
    plural = "rotationpolicies",
    shortname = "rpol",
    category = "rotor",
    status = "RotationPolicyStatus",
    doc = "How rotor rotates one pool of nodes: which nodes, how many at once and when, and how each is drained; its status shows the pool's rotation.",
    printcolumn(json_path = ".spec.priority", name = "Priority", type_ = "integer"),
    printcolumn(json_path = ".status.nodes", name = "Nodes", type_ = "integer"),
    printcolumn(
        json_path = ".status.outOfDate",
        name = "Out-of-date",
        type_ = "integer"
    ),
    printcolumn(json_path = ".status.draining", name = "Draining", type_ = "integer"),
    printcolumn(json_path = ".status.drained", name = "Drained", type_ = "integer"),
    printcolumn(json_path = ".status.blocked", name = "Blocked", type_ = "integer"),
    printcolumn(json_path = ".status.budget", name = "Budget", type_ = "string"),
    printcolumn(json_path = ".status.budgetUntil", name = "Until", type_ = "string"),
    printcolumn(
        json_path = ".metadata.creationTimestamp",
        name = "Age",
        type_ = "date"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RotationPolicySpec {
    /// Which nodes this policy governs, by their labels (matchLabels and matchExpressions, as
    /// in a Deployment's selector). An empty selector selects every node.
    #[serde(default)]
    pub node_selector: LabelSelectorSpec,

    /// Settles overlaps: a node selected by several policies follows the one with the highest
    /// priority. Two or more at the highest priority is an overlap: the node does not start
    /// draining, and the policies' Overlap condition names it. Any 32-bit integer
    /// (-2147483648 to 2147483647); the API server refuses one outside.
    #[serde(default)]
    #[schemars(range(min = i32::MIN, max = i32::MAX))]
    pub priority: i32,

    /// How many of the pool's nodes may be disrupted at once (cordoned, NotReady, deleting or
    /// draining), and when. Of the budgets that apply to a node's drain reason, while one or more
    /// scheduled budgets are active the tightest of them is in force; outside every scheduled
    /// budget the tightest budget without a schedule is; with none, no drain starts (a
    /// schedule is an allow-list, never a gap of unbounded disruption). Default: one node at
    /// a time.
    #[serde(default = "default_budgets")]
    #[schemars(length(max = 50))]
    pub budgets: Vec<PolicyBudget>,

    /// How each node of the pool is drained; what is left out follows rotor-drainer's flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<PoolDrainSettings>,
}

fn default_budgets() -> Vec<PolicyBudget> {
    vec![PolicyBudget {
        nodes: "1".into(),
        ..PolicyBudget::default()
    }]
}

/// A label selector (the shape of `metav1.LabelSelector`): every requirement must hold; an
/// empty selector selects everything.
// The keys and values are checked by the API server as Kubernetes checks labels: a selector
// that does not parse would leave its object out (a DrainRule's pods evicted, a policy's nodes
// under the flags), so it is refused when written rather than found unreadable later.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(r"!has(self.matchLabels) || self.matchLabels.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && (!k.contains('/') || k.indexOf('/') <= 253))").message("matchLabels: each key must be a label key: an optional DNS subdomain prefix (at most 253 characters) and '/', then a name of at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit")
)]
pub struct LabelSelectorSpec {
    /// Labels the object must carry, each with this value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64, "additionalProperties" = {"type": "string", "maxLength": 63, "pattern": "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"}))]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements the object's labels must meet, all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub match_expressions: Vec<LabelRequirement>,
}

impl LabelSelectorSpec {
    /// The selector as rotor matches labels with; an error says what does not read.
    pub fn to_selector(
        &self,
    ) -> Result<
        rotor_apimachinery::labels::LabelSelector,
        rotor_apimachinery::labels::LabelSelectorError,
    > {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
        rotor_apimachinery::labels::LabelSelector::from_k8s(Some(&metav1::LabelSelector {
            match_labels: Some(self.match_labels.clone()),
            match_expressions: Some(
                self.match_expressions
                    .iter()
                    .map(|r| metav1::LabelSelectorRequirement {
                        key: r.key.clone(),
                        operator: format!("{:?}", r.operator),
                        values: Some(r.values.clone()),
                    })
                    .collect(),
            ),
        }))
    }
}

/// One requirement on an object's labels.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)").message("matchExpressions: In and NotIn need values; Exists and DoesNotExist take none"),
    validation = Rule::new("!self.key.contains('/') || self.key.indexOf('/') <= 253").message("matchExpressions: a key's prefix (before '/') is at most 253 characters")
)]
pub struct LabelRequirement {
    /// The label's key: an optional DNS subdomain prefix and '/', then a name of at most 63
    /// letters, digits, '-', '_' or '.', beginning and ending with a letter or digit.
    #[schemars(
        length(min = 1, max = 317),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
        )
    )]
    pub key: String,
    /// How the label is compared with `values`.
    pub operator: SelectorOperator,
    /// The values for In and NotIn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(
            length(max = 63),
            regex(pattern = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
        )
    )]
    pub values: Vec<String>,
}

/// A selector requirement's operator.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// How many of a pool's nodes may be disrupted at once, when, and for which drain reasons.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.schedule) == has(self.duration)").message("a budget's schedule and duration go together: set both or neither"),
    validation = Rule::new("!has(self.timeZone) || has(self.schedule)").message("timeZone applies to a schedule: set schedule and duration too")
)]
pub struct PolicyBudget {
    /// Nodes that may be disrupted at once: a count ("2") or a percentage of the pool's nodes
    /// ("20%", rounded up). "0" pauses the pool while this budget is in force.
    #[schemars(regex(pattern = r"^((100|[0-9]{1,2})%|[0-9]+)$"), length(max = 8))]
    pub nodes: String,

    /// When the budget becomes active: five cron fields (minute hour day-of-month month
    /// day-of-week), read on the clock of `timeZone`. Needs `duration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^\S+ \S+ \S+ \S+ \S+$"), length(max = 128))]
    pub schedule: Option<String>,

    /// How long the budget stays active each time its schedule fires: "8h", "90m", "1h30m".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"), length(max = 32))]
    pub duration: Option<String>,

    /// The IANA time zone the schedule is read in ("Europe/Berlin"); UTC when left out.
    /// Daylight-saving changes follow the zone's rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub time_zone: Option<String>,

    /// The drain reasons (the drain taint's values: "launch-template", "image", "max-age",
    /// "kubelet-version", "manual", ...) this budget applies to; every reason when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub reasons: Vec<String>,
}

/// A pool's drain settings. Each left out follows the drainer's flag of the same name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.forceAfter) || !has(self.timeout) || duration(self.forceAfter) < duration(self.timeout)").message("forceAfter must be shorter than timeout, or the drain fails before anything is forced")
)]
pub struct PoolDrainSettings {
    /// How long one node may take to drain before it is marked failed (`--drain-timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"), length(max = 32))]
    pub timeout: Option<String>,

    /// After this long into a drain, delete the pods evictions could not move, even against
    /// their PodDisruptionBudget (`--force-after`). Off unless set here or by the flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"), length(max = 32))]
    pub force_after: Option<String>,

    /// Cap on each evicted pod's termination grace period (`--max-grace-period`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"), length(max = 32))]
    pub max_grace_period: Option<String>,

    /// Start a node's drain only once it is annotated rotor.dev/drain-approved=true
    /// (`--require-approval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<bool>,

    /// Replace the only pod of a one-replica Deployment by a rollout restart
    /// (`--restart-single-replica`; needs the RBAC of deploy/components/restart-single-replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_single_replica: Option<bool>,

    /// Park a drain blocked this long by what only a person can clear: its drain stops,
    /// rotor's cordon is undone, the taint stays and the node gives its place in the budget
    /// back, to be tried again after a back-off (`--park-blocked-after`). "0s" never parks.
    /// Left out: the flag's value when set, else 15m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"), length(max = 32))]
    pub park_blocked_after: Option<String>,

    /// Make room before evicting (`--surge`): placeholders for the node's pods are scheduled
    /// first. Needs the PriorityClass the drainer's --surge-priority-class names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surge: Option<bool>,
}

/// The bound of `observedGeneration`: the largest integer a float64, which the API server
/// compares bounds in, holds exactly (2^53 - 1; `i64::MAX` would round up to 2^63, beyond an
/// int64). A generation never comes near it.
const MAX_EXACT_INTEGER: i64 = (1 << 53) - 1;

/// What the drainer's leader last saw of the pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RotationPolicyStatus {
    /// The policy's generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_EXACT_INTEGER))]
    pub observed_generation: Option<i64>,
    /// Nodes this policy governs.
    #[serde(default)]
    #[schemars(range(min = 0, max = u32::MAX))]
    pub nodes: u32,
    /// Governed nodes carrying the drain taint (out of date, drained or not).
    #[serde(default)]
    #[schemars(range(min = 0, max = u32::MAX))]
    pub out_of_date: u32,
    /// Governed nodes whose drain is under way.
    #[serde(default)]
    #[schemars(range(min = 0, max = u32::MAX))]
    pub draining: u32,
    /// Governed nodes drained, waiting to be retired.
    #[serde(default)]
    #[schemars(range(min = 0, max = u32::MAX))]
    pub drained: u32,
    /// Governed nodes whose drain is blocked, parked or failed: they need someone (see each
    /// node's rotor.dev/blocker and rotor.dev/last-error annotations).
    #[serde(default)]
    #[schemars(range(min = 0, max = u32::MAX))]
    pub blocked: u32,
    /// The budget in force now, as nodes allowed of the pool ("1 of 12", "20% = 3 of 12",
    /// "0 (paused)", "none (outside every schedule)").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// Until when the budget in force stays so (the end or next start of a schedule), when a
    /// schedule decides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_until: Option<String>,
    /// Overlap, Paused, WindowClosed, Halted, Invalid: each True while it holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PolicyCondition>,
}

/// One condition of a policy's status (the shape of `metav1.Condition`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCondition {
    /// Overlap, Paused, WindowClosed, Halted or Invalid.
    #[serde(rename = "type")]
    pub type_: String,
    /// "True" or "False".
    pub status: String,
    /// A CamelCase word for why.
    pub reason: String,
    /// What it means for the pool, for a person.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
}
