//! What a provider concludes about one node: out of date (with the drain reason and a human
//! detail), current, or skipped with a [`SkipReason`] saying why it was not judged. Shared by the
//! AWS drift rules, the Kubernetes-only rules and the planner. Plain data; no I/O.

use std::fmt;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use rotor_core::{DrainReason, ProviderIdError};

/// A provider's conclusion about one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Out of date: `reason` goes on the taint, `detail` into the selector detail annotation and
    /// the plan output, e.g. `lt-0abc: instance version 3, group wants 5 ($Latest)`.
    Drifted { reason: DrainReason, detail: String },
    /// Up to date.
    Current,
    /// Not judged; never tainted, and an existing taint is left as it is.
    Skip { why: SkipReason },
}

impl Verdict {
    /// A skip verdict.
    pub fn skip(why: SkipReason) -> Self {
        Verdict::Skip { why }
    }
}

/// Why a node was not judged. `Display` is the human sentence; [`SkipReason::slug`] a stable
/// label for JSON output and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The node's `spec.providerID` does not name an EC2 instance (Fargate, hybrid, not yet
    /// initialised, another cloud).
    ProviderId(ProviderIdError),
    /// The instance is in none of the selected groups.
    InstanceNotInGroups { instance: String },
    /// The instance's `LifecycleState` is not `InService` (Pending, Terminating:Wait, Standby,
    /// Warmed:Running, Detaching...).
    NotInService { state: String },
    /// The group's `Status` says it is being deleted.
    GroupDeleting { group: String, status: String },
    /// The group is excluded by name.
    GroupExcludedByName { group: String },
    /// The group is excluded by one of its tags.
    GroupExcludedByTag {
        group: String,
        key: String,
        value: String,
    },
    /// The group is an EKS managed node group (tag `eks:nodegroup-name`); EKS rotates those.
    EksManaged { group: String, nodegroup: String },
    /// The group uses neither a launch configuration nor a launch template.
    GroupWithoutConfiguration { group: String },
    /// A launch template (named by id or name) is not among the described templates.
    TemplateUnknown { template: String },
    /// The group's version is neither `$Latest`, `$Default`, absent, nor a number.
    GroupVersionInvalid { template: String, version: String },
    /// The instance's template version is absent or not a number; fail safe.
    InstanceVersionNotNumeric {
        template: String,
        version: Option<String>,
    },
    /// The instance-type rule does not apply: overrides use attribute-based instance requirements.
    /// Reported per group by [`crate::provider::aws_rules::instance_type_rule_skip`]; never a node's verdict.
    AttributeBasedOverrides { group: String },
    /// The image rule is on but the image of the template version is not known.
    TemplateImageUnknown { template: String, version: i64 },
    /// The image or max-age rule is on but DescribeInstances returned nothing for the instance.
    InstanceDetailsMissing { instance: String },
    /// A look-up about one of the group's launch templates failed (after the SDK's retries), so
    /// the group is not judged this run; the other groups are.
    LookupFailed {
        group: String,
        /// The operation, e.g. `DescribeLaunchTemplateVersions`.
        operation: &'static str,
        /// The template id (or name) it was about, or the group itself when the group was gone
        /// by the time its instances were described.
        template: String,
        /// The error code and message.
        error: String,
    },
    /// Azure: the node's `spec.providerID` does not name a VM of a scale set.
    NotAScaleSetVm { provider_id: String },
    /// Azure: the VM's scale set is not among the listed ones (another subscription, filtered
    /// out by resource group, or a standalone VM).
    ScaleSetNotListed { scale_set: String },
    /// Azure: the scale set's upgrade policy is `Automatic` or `Rolling`; Azure brings its VMs
    /// to the latest model itself.
    UpgradedByCloud { group: String, mode: String },
    /// Azure: the scale set is an AKS node pool (AKS upgrades it).
    AksManaged { group: String, pool: String },
    /// Azure: Flexible orchestration has no per-VM `latestModelApplied`; not judged.
    FlexibleScaleSet { group: String },
    /// Azure: a VM reported out of date is not in provisioning state `Succeeded`.
    VmNotSucceeded { state: String },
    /// Google Cloud: the node's `spec.providerID` is not `gce://PROJECT/ZONE/NAME`.
    GceProviderId { provider_id: String },
    /// Google Cloud: the instance is in none of the managed instance groups listed.
    InstanceNotInMigs { instance: String },
    /// Google Cloud: the group is acting on the instance (`currentAction` not `NONE`).
    InstanceActionInProgress { action: String },
    /// Google Cloud: the group replaces its instances itself (a `PROACTIVE` update policy), or a
    /// canary (several versions) has not reached its target; rotor does not fight it.
    GroupUpdatingItself { group: String, why: String },
    /// Google Cloud: a GKE node pool's group (name `gke-...`); GKE upgrades its own pools.
    GkeManaged { group: String },
    /// Google Cloud: the group names no instance template (neither `versions[]` nor
    /// `instanceTemplate`), or the instance reports none.
    InstanceTemplateMissing { subject: String },
    /// The node reports no kubelet version (`status.nodeInfo.kubeletVersion`).
    KubeletVersionMissing,
    /// The kubelet version is not `v<major>.<minor>...`.
    KubeletVersionUnparsable { version: String },
    /// The API server version is not `v<major>.<minor>...`.
    ControlPlaneVersionUnparsable { version: String },
    /// The node has no `metadata.creationTimestamp`.
    CreationTimestampMissing,
}

impl SkipReason {
    /// A stable kebab-case label, e.g. `not-in-service`.
    pub const fn slug(&self) -> &'static str {
        match self {
            SkipReason::ProviderId(_) => "provider-id",
            SkipReason::InstanceNotInGroups { .. } => "instance-not-in-groups",
            SkipReason::NotInService { .. } => "not-in-service",
            SkipReason::GroupDeleting { .. } => "group-deleting",
            SkipReason::GroupExcludedByName { .. } => "group-excluded-by-name",
            SkipReason::GroupExcludedByTag { .. } => "group-excluded-by-tag",
            SkipReason::EksManaged { .. } => "eks-managed",
            SkipReason::GroupWithoutConfiguration { .. } => "group-without-configuration",
            SkipReason::TemplateUnknown { .. } => "template-unknown",
            SkipReason::GroupVersionInvalid { .. } => "group-version-invalid",
            SkipReason::InstanceVersionNotNumeric { .. } => "instance-version-not-numeric",
            SkipReason::AttributeBasedOverrides { .. } => "attribute-based-overrides",
            SkipReason::TemplateImageUnknown { .. } => "template-image-unknown",
            SkipReason::InstanceDetailsMissing { .. } => "instance-details-missing",
            SkipReason::LookupFailed { .. } => "lookup-failed",
            SkipReason::NotAScaleSetVm { .. } => "provider-id",
            SkipReason::ScaleSetNotListed { .. } => "instance-not-in-groups",
            SkipReason::UpgradedByCloud { .. } => "upgraded-by-cloud",
            SkipReason::AksManaged { .. } => "aks-managed",
            SkipReason::FlexibleScaleSet { .. } => "flexible-scale-set",
            SkipReason::VmNotSucceeded { .. } => "not-in-service",
            SkipReason::GceProviderId { .. } => "provider-id",
            SkipReason::InstanceNotInMigs { .. } => "instance-not-in-groups",
            SkipReason::InstanceActionInProgress { .. } => "instance-action-in-progress",
            SkipReason::GroupUpdatingItself { .. } => "group-updating-itself",
            SkipReason::GkeManaged { .. } => "gke-managed",
            SkipReason::InstanceTemplateMissing { .. } => "instance-template-missing",
            SkipReason::KubeletVersionMissing => "kubelet-version-missing",
            SkipReason::KubeletVersionUnparsable { .. } => "kubelet-version-unparsable",
            SkipReason::ControlPlaneVersionUnparsable { .. } => "control-plane-version-unparsable",
            SkipReason::CreationTimestampMissing => "creation-timestamp-missing",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::ProviderId(error) => write!(f, "{error}"),
            SkipReason::InstanceNotInGroups { instance } => {
                write!(
                    f,
                    "instance {instance} is in none of the selected Auto Scaling groups"
                )
            }
            SkipReason::NotInService { state } => {
                write!(f, "instance is {state}, not InService")
            }
            SkipReason::GroupDeleting { group, status } => {
                write!(f, "group {group} is being deleted ({status})")
            }
            SkipReason::GroupExcludedByName { group } => {
                write!(f, "group {group} is excluded by name")
            }
            SkipReason::GroupExcludedByTag { group, key, value } => {
                write!(f, "group {group} is excluded by tag {key}={value}")
            }
            SkipReason::EksManaged { group, nodegroup } => write!(
                f,
                "group {group} is EKS managed node group {nodegroup} (EKS rotates it; include EKS managed groups to override)"
            ),
            SkipReason::GroupWithoutConfiguration { group } => write!(
                f,
                "group {group} has neither a launch configuration nor a launch template"
            ),
            SkipReason::TemplateUnknown { template } => {
                write!(f, "launch template {template} was not found")
            }
            SkipReason::GroupVersionInvalid { template, version } => write!(
                f,
                "{template}: group version {version:?} is not $Latest, $Default or a number"
            ),
            SkipReason::InstanceVersionNotNumeric { template, version } => match version {
                Some(version) => write!(
                    f,
                    "{template}: instance version {version:?} is not a number"
                ),
                None => write!(f, "{template}: instance reports no template version"),
            },
            SkipReason::AttributeBasedOverrides { group } => write!(
                f,
                "group {group}: instance-type rule skipped, overrides use attribute-based instance requirements"
            ),
            SkipReason::TemplateImageUnknown { template, version } => {
                write!(f, "image of {template} v{version} is not known")
            }
            SkipReason::InstanceDetailsMissing { instance } => {
                write!(f, "no DescribeInstances details for instance {instance}")
            }
            SkipReason::LookupFailed {
                group,
                operation,
                template,
                error,
            } => write!(
                f,
                "{operation} for {template} failed: {error}; group {group} is not judged this run"
            ),
            SkipReason::NotAScaleSetVm { provider_id } => write!(
                f,
                "providerID {provider_id:?} does not name a scale-set VM: expected azure:///subscriptions/<s>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachineScaleSets/<name>/virtualMachines/<id>"
            ),
            SkipReason::ScaleSetNotListed { scale_set } => write!(
                f,
                "scale set {scale_set} is not among the listed scale sets"
            ),
            SkipReason::UpgradedByCloud { group, mode } => write!(
                f,
                "scale set {group} has upgrade policy {mode}: Azure brings its VMs to the latest model itself"
            ),
            SkipReason::AksManaged { group, pool } => write!(
                f,
                "scale set {group} is AKS node pool {pool} (AKS upgrades it; include AKS managed pools to override)"
            ),
            SkipReason::FlexibleScaleSet { group } => write!(
                f,
                "scale set {group} uses Flexible orchestration, which has no per-VM latest-model flag: not judged"
            ),
            SkipReason::VmNotSucceeded { state } => {
                write!(f, "VM is in provisioning state {state}, not Succeeded")
            }
            SkipReason::GceProviderId { provider_id } => write!(
                f,
                "providerID {provider_id:?} is not gce://<project>/<zone>/<instance-name>"
            ),
            SkipReason::InstanceNotInMigs { instance } => write!(
                f,
                "instance {instance} is in none of the project's managed instance groups"
            ),
            SkipReason::InstanceActionInProgress { action } => write!(
                f,
                "the group is acting on the instance (currentAction {action})"
            ),
            SkipReason::GroupUpdatingItself { group, why } => write!(
                f,
                "group {group} replaces its instances itself ({why}); rotor leaves it alone"
            ),
            SkipReason::GkeManaged { group } => write!(
                f,
                "group {group} is a GKE node pool (GKE upgrades it; include GKE managed groups to override)"
            ),
            SkipReason::InstanceTemplateMissing { subject } => {
                write!(f, "{subject} names no instance template")
            }
            SkipReason::KubeletVersionMissing => f.write_str("node reports no kubelet version"),
            SkipReason::KubeletVersionUnparsable { version } => {
                write!(f, "kubelet version {version:?} is not v<major>.<minor>")
            }
            SkipReason::ControlPlaneVersionUnparsable { version } => {
                write!(
                    f,
                    "control plane version {version:?} is not v<major>.<minor>"
                )
            }
            SkipReason::CreationTimestampMissing => f.write_str("node has no creationTimestamp"),
        }
    }
}

/// The age of something born at `born`, when it is strictly older than `max_age` at `now`
/// (something born after `now`, by clock skew, is not old).
pub(crate) fn age_beyond(born: Timestamp, max_age: Duration, now: Timestamp) -> Option<Duration> {
    let age: SignedDuration = now.duration_since(born);
    let age = Duration::try_from(age).ok()?;
    (age > max_age).then_some(age)
}

/// A duration as a person reads an age: its largest whole unit (`47d`, `5h`, `12m`, `30s`).
pub(crate) fn approx_duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        86_400.. => format!("{}d", secs / 86_400),
        3_600.. => format!("{}h", secs / 3_600),
        60.. => format!("{}m", secs / 60),
        _ => format!("{secs}s"),
    }
}

/// A duration exactly, in the units that are not zero (`30d`, `1d12h`, `90s` → `1m30s`); `0s`.
pub(crate) fn exact_duration(duration: Duration) -> String {
    let mut secs = duration.as_secs();
    let mut text = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            text.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if text.is_empty() {
        text.push_str("0s");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_ages() {
        let d = |secs| Duration::from_secs(secs);
        assert_eq!(approx_duration(d(47 * 86_400 + 3 * 3_600)), "47d");
        assert_eq!(approx_duration(d(86_399)), "23h");
        assert_eq!(approx_duration(d(3_599)), "59m");
        assert_eq!(approx_duration(d(59)), "59s");
        assert_eq!(exact_duration(d(30 * 86_400)), "30d");
        assert_eq!(exact_duration(d(36 * 3_600)), "1d12h");
        assert_eq!(exact_duration(d(90)), "1m30s");
        assert_eq!(exact_duration(d(0)), "0s");
    }

    #[test]
    fn skip_reasons_say_why() {
        assert_eq!(
            SkipReason::NotInService {
                state: "Warmed:Running".into()
            }
            .to_string(),
            "instance is Warmed:Running, not InService"
        );
        assert_eq!(
            SkipReason::InstanceVersionNotNumeric {
                template: "lt-0abc".into(),
                version: Some("$Latest".into())
            }
            .to_string(),
            "lt-0abc: instance version \"$Latest\" is not a number"
        );
        assert_eq!(
            SkipReason::ProviderId(ProviderIdError::Empty).slug(),
            "provider-id"
        );
        assert!(
            SkipReason::ProviderId(ProviderIdError::Empty)
                .to_string()
                .starts_with("empty providerID")
        );
    }
}
