//! The contract between rotor-selector and rotor-drainer, defined once: the drain taint, its reason
//! slugs and effects, the node annotations the drainer keeps its state in, and the opt-out
//! annotations. The two programs never call each other; everything they agree on is in this module,
//! and every name here is part of rotor's public, documented interface.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Key of the taint that asks the drainer to drain a node: `rotor.dev/drain=<reason>:<effect>`.
///
/// The taint's value is a [`DrainReason`] slug. The drainer must act on the taint whatever its value
/// is: anyone may taint a node by hand (`kubectl taint node N rotor.dev/drain=anything:NoSchedule`),
/// so parsing the value is for reporting only, never a condition for draining.
pub const DRAIN_TAINT_KEY: &str = "rotor.dev/drain";

/// Field manager name rotor uses for every write (patches, server-side apply, taint edits).
pub const FIELD_MANAGER: &str = "rotor";

// --- Drainer state annotations (on the Node) -------------------------------------------------

/// Node annotation: the drainer's current [`DrainPhase`] for this node, as its slug.
pub const PHASE_ANNOTATION: &str = "rotor.dev/phase";

/// Node annotation: when the drainer started working on this node (RFC 3339 UTC timestamp, whole
/// seconds, e.g. `2025-01-02T03:04:05Z`; see [`format_timestamp`]).
pub const STARTED_AT_ANNOTATION: &str = "rotor.dev/started-at";

/// Node annotation: when the drainer gives up waiting on this node and marks it failed (RFC 3339
/// UTC timestamp, like [`STARTED_AT_ANNOTATION`]).
pub const DEADLINE_ANNOTATION: &str = "rotor.dev/deadline";

/// Node annotation: how many drain attempts the drainer has made on this node (decimal integer).
pub const ATTEMPTS_ANNOTATION: &str = "rotor.dev/attempts";

/// Node annotation: the last error the drainer met on this node (free text for humans).
pub const LAST_ERROR_ANNOTATION: &str = "rotor.dev/last-error";

/// Node annotation: what the node is waiting on right now, for example a pod that opted out of
/// disruption or a PodDisruptionBudget that allows no eviction (free text for humans).
pub const BLOCKER_ANNOTATION: &str = "rotor.dev/blocker";

/// Node annotation: `"true"` when the drainer cordoned the node itself. The drainer uncordons only
/// nodes carrying this mark, so it never undoes a cordon somebody else made.
pub const CORDONED_BY_ROTOR_ANNOTATION: &str = "rotor.dev/cordoned-by-rotor";

/// Node annotation: when the drainer found the node empty of evictable pods (RFC 3339 UTC timestamp,
/// like [`STARTED_AT_ANNOTATION`]). A selector that retires drained nodes keys off this.
pub const DRAINED_AT_ANNOTATION: &str = "rotor.dev/drained-at";

/// Every annotation the drainer writes to keep its state, so that it can remove exactly these
/// (and nothing else) when a drain is rolled back or cleaned up.
pub const DRAINER_STATE_ANNOTATIONS: [&str; 8] = [
    PHASE_ANNOTATION,
    STARTED_AT_ANNOTATION,
    DEADLINE_ANNOTATION,
    ATTEMPTS_ANNOTATION,
    LAST_ERROR_ANNOTATION,
    BLOCKER_ANNOTATION,
    CORDONED_BY_ROTOR_ANNOTATION,
    DRAINED_AT_ANNOTATION,
];

// --- Selector detail annotations (on the Node) -----------------------------------------------

/// Node annotation written by the selector: when it tainted the node (RFC 3339 UTC timestamp, like
/// [`STARTED_AT_ANNOTATION`]).
pub const SELECTED_AT_ANNOTATION: &str = "rotor.dev/selected-at";

/// Node annotation written by the selector: a human-readable explanation of why the node was
/// selected (for example which launch template version it runs and which one its group wants).
pub const SELECTOR_DETAIL_ANNOTATION: &str = "rotor.dev/selector-detail";

// --- Opt-outs ----------------------------------------------------------------------------------

/// Opt-out annotation, on nodes and on pods. With the value exactly `"true"`, a node is never
/// selected and never drained, and a pod is never evicted (its node waits and says why).
pub const DO_NOT_DISRUPT_ANNOTATION: &str = "rotor.dev/do-not-disrupt";

/// Karpenter's pod opt-out annotation, honoured by rotor on pods (not on nodes). With the value
/// exactly `"true"`, the pod is never evicted.
pub const KARPENTER_DO_NOT_DISRUPT_ANNOTATION: &str = "karpenter.sh/do-not-disrupt";

/// Prefix of the annotations by which other systems hold a tainted node before its drain starts,
/// in the style of Cluster API's pre-drain hooks: `pre-drain.hook.rotor.dev/<name>: <owner>`.
/// While any is on the node, the drainer neither cordons nor evicts it, and says who holds it.
/// Their owners add and remove them; rotor never does. A drain already under way is not paused.
pub const PRE_DRAIN_HOOK_PREFIX: &str = "pre-drain.hook.rotor.dev/";

/// With `rotor-drainer --require-approval`, a tainted node's drain starts only once a person or
/// system has set this to `"true"` on the node. rotor never sets or removes it.
pub const DRAIN_APPROVED_ANNOTATION: &str = "rotor.dev/drain-approved";

/// Node annotation: the time (RFC 3339) by which the node must be replaced, e.g. from a patch
/// deadline; `rotor-selector --replace-within` sets it with the taint, or anyone may. Only with
/// `rotor-drainer --enforce-replace-by`, once it has passed, pod opt-outs and budgets that never
/// allow no longer hold the node's drain.
pub const REPLACE_BY_ANNOTATION: &str = "rotor.dev/replace-by";

/// Node annotation `rotor-selector` writes beside a [`REPLACE_BY_ANNOTATION`] it set itself
/// (value [`REPLACE_BY_SET_BY_SELECTOR`]): such a deadline goes with the selector's taint when
/// the node is up to date again; one anyone else set stays.
pub const REPLACE_BY_SET_BY_ANNOTATION: &str = "rotor.dev/replace-by-set-by";
/// The value of [`REPLACE_BY_SET_BY_ANNOTATION`] when the selector set the deadline.
pub const REPLACE_BY_SET_BY_SELECTOR: &str = "rotor-selector";

/// Pod template annotation of a Deployment: the time (RFC 3339) rotor-drainer
/// `--restart-single-replica` restarted its rollout, to move its only pod off a draining node
/// without leaving it with no replica. Like `kubectl rollout restart`'s, changing it is what
/// makes the Deployment controller roll out new pods.
pub const RESTARTED_AT_ANNOTATION: &str = "rotor.dev/restarted-at";

/// The node's [`REPLACE_BY_ANNOTATION`]: `Ok(None)` without one, `Err` with the value when it is
/// not an RFC 3339 time (the drainer then enforces nothing, and says so).
pub fn replace_by(meta: &ObjectMeta) -> Result<Option<Timestamp>, String> {
    match meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(REPLACE_BY_ANNOTATION))
    {
        None => Ok(None),
        Some(value) => value.trim().parse().map(Some).map_err(|_| value.clone()),
    }
}

/// True when the node carries `rotor.dev/drain-approved: "true"` (exactly `"true"`).
pub fn node_drain_approved(meta: &ObjectMeta) -> bool {
    annotation_is_true(meta, DRAIN_APPROVED_ANNOTATION)
}

/// The pre-drain hooks on a node (see [`PRE_DRAIN_HOOK_PREFIX`]), sorted, each as
/// `<name>` or `<name> (owner <value>)`.
pub fn pre_drain_hooks(meta: &ObjectMeta) -> Vec<String> {
    let mut hooks: Vec<String> = meta
        .annotations
        .iter()
        .flatten()
        .filter_map(|(key, owner)| {
            let name = key.strip_prefix(PRE_DRAIN_HOOK_PREFIX)?;
            Some(match owner.trim() {
                "" => name.to_string(),
                owner => format!("{name} (owner {owner})"),
            })
        })
        .collect();
    hooks.sort();
    hooks
}

/// The only annotation value that opts out. `"True"`, `"yes"`, `"1"` or an empty value do not.
const OPT_OUT_VALUE: &str = "true";

/// True when the node carries `rotor.dev/do-not-disrupt: "true"`: it must never be selected or
/// drained.
///
/// The value must be exactly `"true"`; anything else (including `"True"` or an empty string) is not
/// an opt-out.
pub fn node_opted_out(meta: &ObjectMeta) -> bool {
    annotation_is_true(meta, DO_NOT_DISRUPT_ANNOTATION)
}

/// Which annotation, if any, opts this pod out of eviction: [`DO_NOT_DISRUPT_ANNOTATION`] is checked
/// first, then [`KARPENTER_DO_NOT_DISRUPT_ANNOTATION`]. Returns the annotation's name, so callers can
/// say why a node is waiting.
///
/// The value must be exactly `"true"`; anything else (including `"True"` or an empty string) is not
/// an opt-out.
pub fn pod_opt_out(meta: &ObjectMeta) -> Option<&'static str> {
    [
        DO_NOT_DISRUPT_ANNOTATION,
        KARPENTER_DO_NOT_DISRUPT_ANNOTATION,
    ]
    .into_iter()
    .find(|key| annotation_is_true(meta, key))
}

fn annotation_is_true(meta: &ObjectMeta, key: &str) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|annotations| annotations.get(key))
        .is_some_and(|value| value == OPT_OUT_VALUE)
}

// --- Timestamps in annotations -----------------------------------------------------------------

/// Formats a timestamp the way rotor writes it into annotations: RFC 3339 in UTC, truncated to
/// whole seconds (`2025-01-02T03:04:05Z`).
pub fn format_timestamp(timestamp: Timestamp) -> String {
    // Dropping the fraction keeps the value inside jiff's range, so this cannot fail in practice;
    // fall back to the untruncated value rather than panic.
    Timestamp::from_second(timestamp.as_second())
        .unwrap_or(timestamp)
        .to_string()
}

/// Parses a timestamp annotation written by [`format_timestamp`] (any RFC 3339 timestamp with an
/// offset is accepted).
pub fn parse_timestamp(value: &str) -> Result<Timestamp, ParseTimestampError> {
    value.parse().map_err(|source| ParseTimestampError {
        value: value.to_owned(),
        source,
    })
}

/// An annotation value that should be a timestamp is not one.
#[derive(Debug, thiserror::Error)]
#[error(
    "annotation value {value:?} is not an RFC 3339 timestamp (expected e.g. 2025-01-02T03:04:05Z): {source}"
)]
pub struct ParseTimestampError {
    value: String,
    #[source]
    source: jiff::Error,
}

// --- Drain reasons -------------------------------------------------------------------------------

/// Why a node was selected for draining; the value of the [`DRAIN_TAINT_KEY`] taint.
///
/// Parsing a taint value into a `DrainReason` is for reporting only: the drainer drains a node
/// carrying the taint whatever its value, because anyone may taint a node by hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DrainReason {
    /// The instance runs a different launch template than its group wants.
    LaunchTemplate,
    /// The instance runs an older version of its group's launch template.
    LaunchTemplateVersion,
    /// The instance runs a different launch configuration than its group wants.
    LaunchConfiguration,
    /// The instance type is no longer one its group allows.
    InstanceType,
    /// The instance runs a different machine image than its template specifies.
    Image,
    /// The node is older than the configured maximum age.
    MaxAge,
    /// The VM does not run its scale set's latest model (Azure `latestModelApplied` is false).
    Model,
    /// The kubelet is older than the control plane.
    KubeletVersion,
    /// The instance runs another instance template than its managed instance group targets
    /// (Google Cloud).
    InstanceTemplate,
    /// Tainted by a person or an external tool.
    Manual,
}

impl DrainReason {
    /// Every reason, in declaration order.
    pub const ALL: [DrainReason; 10] = [
        DrainReason::LaunchTemplate,
        DrainReason::LaunchTemplateVersion,
        DrainReason::LaunchConfiguration,
        DrainReason::InstanceType,
        DrainReason::Image,
        DrainReason::MaxAge,
        DrainReason::Model,
        DrainReason::KubeletVersion,
        DrainReason::InstanceTemplate,
        DrainReason::Manual,
    ];

    /// The slug written as the taint value, e.g. `launch-template-version`.
    pub const fn slug(self) -> &'static str {
        match self {
            DrainReason::LaunchTemplate => "launch-template",
            DrainReason::LaunchTemplateVersion => "launch-template-version",
            DrainReason::LaunchConfiguration => "launch-configuration",
            DrainReason::InstanceType => "instance-type",
            DrainReason::Image => "image",
            DrainReason::MaxAge => "max-age",
            DrainReason::Model => "model",
            DrainReason::KubeletVersion => "kubelet-version",
            DrainReason::InstanceTemplate => "instance-template",
            DrainReason::Manual => "manual",
        }
    }
}

impl fmt::Display for DrainReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.slug())
    }
}

impl FromStr for DrainReason {
    type Err = ParseDrainReasonError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        DrainReason::ALL
            .into_iter()
            .find(|reason| reason.slug() == value)
            .ok_or_else(|| ParseDrainReasonError {
                value: value.to_owned(),
            })
    }
}

/// A taint value or argument is not one of the known drain reason slugs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown drain reason {value:?}: expected one of {}", join_slugs(DrainReason::ALL.iter().map(|r| r.slug())))]
pub struct ParseDrainReasonError {
    /// The text that failed to parse.
    pub value: String,
}

// --- Taint effect --------------------------------------------------------------------------------

/// Effect of the drain taint. `NoSchedule` (the default) keeps new pods off the node at once;
/// `PreferNoSchedule` lets an old node stay usable until it is actually drained (the drainer cordons
/// it when it starts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum TaintEffect {
    /// Kubernetes `NoSchedule`.
    #[default]
    #[value(name = "NoSchedule")]
    NoSchedule,
    /// Kubernetes `PreferNoSchedule`.
    #[value(name = "PreferNoSchedule")]
    PreferNoSchedule,
}

impl TaintEffect {
    /// The Kubernetes spelling, as used in `Taint.effect`.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        }
    }
}

impl fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaintEffect {
    type Err = ParseTaintEffectError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "NoSchedule" => Ok(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Ok(TaintEffect::PreferNoSchedule),
            _ => Err(ParseTaintEffectError {
                value: value.to_owned(),
            }),
        }
    }
}

/// A taint effect is not one rotor uses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unsupported drain taint effect {value:?}: expected NoSchedule or PreferNoSchedule (NoExecute is not used: it would evict pods without honouring PodDisruptionBudgets)"
)]
pub struct ParseTaintEffectError {
    /// The text that failed to parse.
    pub value: String,
}

/// The drain taint for `reason` with `effect`: `rotor.dev/drain=<slug>:<effect>`, without a
/// `timeAdded` (the API server does not set it for these effects either).
pub fn drain_taint(reason: DrainReason, effect: TaintEffect) -> Taint {
    Taint {
        key: DRAIN_TAINT_KEY.to_owned(),
        value: Some(reason.slug().to_owned()),
        effect: effect.as_str().to_owned(),
        time_added: None,
    }
}

/// The node's drain taint, if it has one (any value, any effect). A node carrying it must be
/// drained; use [`DrainReason::from_str`] on its value only to report why.
pub fn find_drain_taint(node: &Node) -> Option<&Taint> {
    node.spec
        .as_ref()?
        .taints
        .as_ref()?
        .iter()
        .find(|taint| taint.key == DRAIN_TAINT_KEY)
}

// --- Drain phase ---------------------------------------------------------------------------------

/// Where the drainer is with a node; stored in [`PHASE_ANNOTATION`] as a lowercase slug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DrainPhase {
    /// Tainted and waiting for a drain slot.
    Queued,
    /// Cordoned; eviction has not started yet.
    Cordoned,
    /// Evicting pods.
    Evicting,
    /// No evictable pods left; the node can be retired.
    Drained,
    /// The drain gave up (deadline passed or an unrecoverable error); see [`LAST_ERROR_ANNOTATION`].
    Failed,
    /// Waiting on something only a person can resolve (an opted-out pod, a budget that can never
    /// allow an eviction), or on budgets that have let nothing through for the drainer's
    /// `--blocked-after`; see [`BLOCKER_ANNOTATION`].
    Blocked,
    /// Set aside: blocked by something only a person can clear for longer than the drainer's
    /// park-after. The drain stopped, rotor's cordon is undone, the taint stays, and the node
    /// no longer counts against the budgets; it is tried again after a back-off, its blocker
    /// kept in [`BLOCKER_ANNOTATION`].
    Parked,
}

impl DrainPhase {
    /// Every phase, in declaration order.
    pub const ALL: [DrainPhase; 7] = [
        DrainPhase::Queued,
        DrainPhase::Cordoned,
        DrainPhase::Evicting,
        DrainPhase::Drained,
        DrainPhase::Failed,
        DrainPhase::Blocked,
        DrainPhase::Parked,
    ];

    /// The lowercase slug stored in the annotation.
    pub const fn slug(self) -> &'static str {
        match self {
            DrainPhase::Queued => "queued",
            DrainPhase::Cordoned => "cordoned",
            DrainPhase::Evicting => "evicting",
            DrainPhase::Drained => "drained",
            DrainPhase::Failed => "failed",
            DrainPhase::Blocked => "blocked",
            DrainPhase::Parked => "parked",
        }
    }
}

impl fmt::Display for DrainPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.slug())
    }
}

impl FromStr for DrainPhase {
    type Err = ParseDrainPhaseError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        DrainPhase::ALL
            .into_iter()
            .find(|phase| phase.slug() == value)
            .ok_or_else(|| ParseDrainPhaseError {
                value: value.to_owned(),
            })
    }
}

/// A `rotor.dev/phase` annotation value is not a known phase.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown drain phase {value:?} in annotation {PHASE_ANNOTATION}: expected one of {}; remove the annotation to let the drainer start over",
    join_slugs(DrainPhase::ALL.iter().map(|p| p.slug()))
)]
pub struct ParseDrainPhaseError {
    /// The text that failed to parse.
    pub value: String,
}

fn join_slugs<'a>(slugs: impl Iterator<Item = &'a str>) -> String {
    slugs.collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::NodeSpec;

    use super::*;

    fn meta_with(annotations: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn reason_slugs_round_trip() {
        let expected = [
            "launch-template",
            "launch-template-version",
            "launch-configuration",
            "instance-type",
            "image",
            "max-age",
            "model",
            "kubelet-version",
            "instance-template",
            "manual",
        ];
        for (reason, slug) in DrainReason::ALL.into_iter().zip(expected) {
            assert_eq!(reason.slug(), slug);
            assert_eq!(reason.to_string(), slug);
            assert_eq!(slug.parse::<DrainReason>(), Ok(reason));
        }
    }

    #[test]
    fn unknown_reason_names_accepted_ones() {
        let err = "Manual".parse::<DrainReason>().unwrap_err();
        let message = err.to_string();
        assert!(message.contains("\"Manual\""), "{message}");
        for reason in DrainReason::ALL {
            assert!(message.contains(reason.slug()), "{message}");
        }
        assert!("".parse::<DrainReason>().is_err());
        assert!("manual ".parse::<DrainReason>().is_err());
    }

    #[test]
    fn phase_slugs_round_trip() {
        let expected = [
            "queued", "cordoned", "evicting", "drained", "failed", "blocked", "parked",
        ];
        assert_eq!(DrainPhase::ALL.len(), expected.len());
        for (phase, slug) in DrainPhase::ALL.into_iter().zip(expected) {
            assert_eq!(phase.slug(), slug);
            assert_eq!(phase.to_string(), slug);
            assert_eq!(slug.parse::<DrainPhase>(), Ok(phase));
        }
        let message = "Drained".parse::<DrainPhase>().unwrap_err().to_string();
        assert!(message.contains("queued, cordoned"), "{message}");
        assert!(message.contains(PHASE_ANNOTATION), "{message}");
    }

    #[test]
    fn taint_effect_uses_kubernetes_spelling() {
        for effect in [TaintEffect::NoSchedule, TaintEffect::PreferNoSchedule] {
            assert_eq!(effect.to_string().parse::<TaintEffect>(), Ok(effect));
        }
        assert_eq!(TaintEffect::default(), TaintEffect::NoSchedule);
        assert!("noschedule".parse::<TaintEffect>().is_err());
        let message = "NoExecute".parse::<TaintEffect>().unwrap_err().to_string();
        assert!(
            message.contains("NoSchedule or PreferNoSchedule"),
            "{message}"
        );

        use clap::ValueEnum;
        let names: Vec<_> = TaintEffect::value_variants()
            .iter()
            .map(|v| v.to_possible_value().unwrap().get_name().to_owned())
            .collect();
        assert_eq!(names, ["NoSchedule", "PreferNoSchedule"]);
    }

    #[test]
    fn drain_taint_shape() {
        let taint = drain_taint(DrainReason::MaxAge, TaintEffect::PreferNoSchedule);
        assert_eq!(taint.key, "rotor.dev/drain");
        assert_eq!(taint.value.as_deref(), Some("max-age"));
        assert_eq!(taint.effect, "PreferNoSchedule");
        assert!(taint.time_added.is_none());
        assert_eq!(
            serde_json::to_value(&taint).unwrap(),
            serde_json::json!({"key": "rotor.dev/drain", "value": "max-age", "effect": "PreferNoSchedule"})
        );
    }

    #[test]
    fn find_drain_taint_accepts_any_value() {
        let mut node = Node::default();
        assert!(find_drain_taint(&node).is_none());

        node.spec = Some(NodeSpec {
            taints: Some(vec![
                Taint {
                    key: "node.kubernetes.io/unschedulable".into(),
                    effect: "NoSchedule".into(),
                    ..Taint::default()
                },
                Taint {
                    key: DRAIN_TAINT_KEY.into(),
                    value: Some("because-i-said-so".into()),
                    effect: "NoExecute".into(),
                    ..Taint::default()
                },
            ]),
            ..NodeSpec::default()
        });
        let taint = find_drain_taint(&node).expect("drain taint found");
        assert_eq!(taint.value.as_deref(), Some("because-i-said-so"));
        assert!(
            taint
                .value
                .as_deref()
                .unwrap()
                .parse::<DrainReason>()
                .is_err()
        );

        node.spec.as_mut().unwrap().taints = Some(vec![]);
        assert!(find_drain_taint(&node).is_none());
    }

    #[test]
    fn pre_drain_hooks_name_their_owners_in_order() {
        let meta = meta_with(&[
            ("pre-drain.hook.rotor.dev/volume-backup", "backup-operator"),
            ("pre-drain.hook.rotor.dev/approval", " "),
            ("rotor.dev/phase", "queued"),
            ("post-drain.hook.rotor.dev/other", "x"),
        ]);
        assert_eq!(
            pre_drain_hooks(&meta),
            ["approval", "volume-backup (owner backup-operator)"]
        );
        assert!(pre_drain_hooks(&ObjectMeta::default()).is_empty());
    }

    #[test]
    fn node_opt_out_requires_exactly_true() {
        assert!(!node_opted_out(&ObjectMeta::default()));
        assert!(node_opted_out(&meta_with(&[(
            DO_NOT_DISRUPT_ANNOTATION,
            "true"
        )])));
        for value in ["True", "TRUE", "yes", "1", "", " true"] {
            assert!(
                !node_opted_out(&meta_with(&[(DO_NOT_DISRUPT_ANNOTATION, value)])),
                "{value:?} must not opt out"
            );
        }
        // Karpenter's annotation applies to pods only.
        assert!(!node_opted_out(&meta_with(&[(
            KARPENTER_DO_NOT_DISRUPT_ANNOTATION,
            "true"
        )])));
    }

    #[test]
    fn pod_opt_out_names_the_annotation() {
        assert_eq!(pod_opt_out(&ObjectMeta::default()), None);
        assert_eq!(
            pod_opt_out(&meta_with(&[(DO_NOT_DISRUPT_ANNOTATION, "true")])),
            Some("rotor.dev/do-not-disrupt")
        );
        assert_eq!(
            pod_opt_out(&meta_with(&[(KARPENTER_DO_NOT_DISRUPT_ANNOTATION, "true")])),
            Some("karpenter.sh/do-not-disrupt")
        );
        assert_eq!(
            pod_opt_out(&meta_with(&[
                (DO_NOT_DISRUPT_ANNOTATION, "false"),
                (KARPENTER_DO_NOT_DISRUPT_ANNOTATION, "true"),
            ])),
            Some(KARPENTER_DO_NOT_DISRUPT_ANNOTATION)
        );
        assert_eq!(
            pod_opt_out(&meta_with(&[
                (DO_NOT_DISRUPT_ANNOTATION, "true"),
                (KARPENTER_DO_NOT_DISRUPT_ANNOTATION, "true"),
            ])),
            Some(DO_NOT_DISRUPT_ANNOTATION)
        );
        assert_eq!(
            pod_opt_out(&meta_with(&[(KARPENTER_DO_NOT_DISRUPT_ANNOTATION, "True")])),
            None
        );
    }

    #[test]
    fn annotation_names() {
        assert_eq!(FIELD_MANAGER, "rotor");
        assert_eq!(
            DRAINER_STATE_ANNOTATIONS,
            [
                "rotor.dev/phase",
                "rotor.dev/started-at",
                "rotor.dev/deadline",
                "rotor.dev/attempts",
                "rotor.dev/last-error",
                "rotor.dev/blocker",
                "rotor.dev/cordoned-by-rotor",
                "rotor.dev/drained-at",
            ]
        );
        assert_eq!(SELECTED_AT_ANNOTATION, "rotor.dev/selected-at");
        assert_eq!(SELECTOR_DETAIL_ANNOTATION, "rotor.dev/selector-detail");
    }

    #[test]
    fn timestamps_round_trip_at_second_precision() {
        let ts: Timestamp = "2025-01-02T03:04:05.900Z".parse().unwrap();
        let text = format_timestamp(ts);
        assert_eq!(text, "2025-01-02T03:04:05Z");
        assert_eq!(
            parse_timestamp(&text).unwrap(),
            "2025-01-02T03:04:05Z".parse::<Timestamp>().unwrap()
        );
        let message = parse_timestamp("yesterday").unwrap_err().to_string();
        assert!(message.contains("\"yesterday\""), "{message}");
    }
}
