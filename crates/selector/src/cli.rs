//! rotor-selector's command line: every flag (each with a `ROTOR_*` environment variable), its
//! parsing, and the validation that turns it into a [`SelectorConfig`]. Everything an operator
//! can get wrong is rejected here, before the cluster is touched, with a message that names the
//! flag; the binary exits with status 2 on such errors (clap's own errors already do).

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use clap::{Args, Parser, ValueEnum};
use rotor_apimachinery::labels::{LabelSelector, Operator, Requirement};
use rotor_core::{KubeArgs, LogArgs, NodeBudget, TaintEffect};

use crate::plan::PlanLimits;
use crate::provider::aws::{AwsConfig, CallTimeouts, DEFAULT_CALL_TIMEOUT, GroupDiscovery};
use crate::provider::aws_rules::TagExclusion;
use crate::provider::azure::AzureConfig;
use crate::provider::gcp::{self, GcpConfig};
use crate::provider::{ProviderConfig, ProviderKind};

/// Node labels that name a node's group, tried in this order (the first one present wins):
/// EKS managed node groups, eksctl node groups, Karpenter node pools, GKE node pools, AKS agent
/// pools, and the simulator's node groups.
pub const DEFAULT_GROUP_LABELS: [&str; 6] = [
    "eks.amazonaws.com/nodegroup",
    "alpha.eksctl.io/nodegroup-name",
    "karpenter.sh/nodepool",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
    "sim.rotor.dev/node-group",
];

/// The whole command line of `rotor-selector`.
#[derive(Debug, Parser)]
#[command(
    name = "rotor-selector",
    version,
    about = "Finds out-of-date Kubernetes nodes through a provider and marks them with the rotor.dev/drain taint, within budgets. One run per invocation (run it as a CronJob); safe to run twice.",
    long_about = "Finds out-of-date Kubernetes nodes through a provider and marks them with the rotor.dev/drain taint, within budgets; rotor-drainer (or anything else that honours the taint) then drains them.\n\nOne run per invocation, meant for a CronJob, and idempotent: a second run with nothing new to do writes nothing. The whole plan is computed before anything is written. It also removes its own taint from nodes that are no longer out of date, as long as the drain has not started and the taint's reason is not `manual`.\n\nExit status: 0 the run completed; 1 the run failed (a look-up failed, so nothing was written; a look-up about one launch template failed, so only the groups using it were skipped and the rest was written; or a write failed after retries: the output says which nodes were changed); 2 bad flags or configuration, a missing AWS region included (nothing was contacted)."
)]
pub struct Cli {
    #[command(flatten)]
    pub select: SelectArgs,
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

/// How the plan is printed on stdout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// A table: node, group, zone, action, reason, detail, result.
    #[default]
    Text,
    /// One JSON object: provider, dryRun, summary, nodes, apiCalls.
    Json,
    /// The fleet's compliance instead of the plan: nodes out of date by reason and group, the
    /// oldest, tainted and drained ([`crate::compliance`]). With --dry-run, a read-only report.
    Report,
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OutputFormat::Text => "text",
            OutputFormat::Json => "json",
            OutputFormat::Report => "report",
        })
    }
}

/// The selector's own flags.
#[derive(Args, Clone, Debug)]
pub struct SelectArgs {
    /// Which provider decides what is out of date. `kubernetes`: a node whose kubelet minor
    /// version is behind the API server's (GET /version) is out of date (reason
    /// kubelet-version), and with --max-age so is a node created longer ago than that (reason
    /// max-age). `aws`: the instance no longer matches its Auto Scaling group (launch
    /// configuration, launch template id, template version, instance type; with --image-drift the
    /// image, with --max-age the launch time); needs --cluster-name or --group. `gcp`: the
    /// instance runs another instance template than its managed instance group targets (reason
    /// instance-template); needs --gcp-project. `azure`: the VM does not run its scale set's
    /// latest model (reason model); needs --azure-subscription.
    #[arg(long, env = "ROTOR_PROVIDER", value_enum, value_name = "PROVIDER")]
    pub provider: ProviderKind,

    /// Compute and print the plan, and change nothing: no taint, no annotation, no Event.
    #[arg(long, env = "ROTOR_DRY_RUN")]
    pub dry_run: bool,

    /// How the plan is printed on stdout: `text` (a table), `json` (one object with provider,
    /// dryRun, summary, nodes and apiCalls) or `report` (the fleet's compliance: nodes out of
    /// date by reason and group, the oldest, tainted and drained; with --dry-run a read-only
    /// report). Logs always go to stderr.
    #[arg(
        long,
        env = "ROTOR_OUTPUT",
        value_enum,
        default_value_t,
        value_name = "FORMAT"
    )]
    pub output: OutputFormat,

    /// With each new taint, set rotor.dev/replace-by to now plus this (a patch deadline, e.g. 7d):
    /// with rotor-drainer --enforce-replace-by, once it has passed, pod opt-outs and budgets
    /// that never allow no longer hold the node. A replace-by already on the node is kept; one
    /// the selector set goes with its taint if the node is up to date again.
    #[arg(long, env = "ROTOR_REPLACE_WITHIN", value_name = "DURATION", value_parser = parse_replace_within)]
    pub replace_within: Option<Duration>,

    /// After each run, write the fleet's compliance figures to this file in Prometheus's text
    /// format (replaced whole, never half-written), for a textfile collector or a sidecar.
    #[arg(long, env = "ROTOR_METRICS_FILE", value_name = "PATH")]
    pub metrics_file: Option<std::path::PathBuf>,

    /// After each run, PUT the fleet's compliance figures to this Prometheus Pushgateway (its
    /// base URL), as job `rotor-selector` (and `cluster` = --cluster-name when set). A push that
    /// fails makes the run exit 1 after its writes.
    #[arg(long, env = "ROTOR_PUSHGATEWAY", value_name = "URL")]
    pub pushgateway: Option<String>,

    /// Most nodes carrying the drain taint at once: a count (3) or a percentage (25%, rounded up)
    /// of the nodes considered. Nodes already tainted (by anyone) count, so each run only tops up
    /// to the budget; taints removed in a run free their slot for the next run.
    #[arg(
        long,
        env = "ROTOR_MAX_TAINTED",
        default_value = "1",
        value_name = "COUNT|PERCENT"
    )]
    pub max_tainted: NodeBudget,

    /// Most tainted nodes at once within one group, on top of --max-tainted: a count, or a
    /// percentage of the group's nodes considered (rounded up). The group is the node's Auto
    /// Scaling group (aws), managed instance group (gcp) or scale set (azure), and with --provider
    /// kubernetes the first --group-label present on the node. Nodes in no group are held only by
    /// --max-tainted. No limit per group when unset.
    #[arg(
        long,
        env = "ROTOR_MAX_TAINTED_PER_GROUP",
        value_name = "COUNT|PERCENT"
    )]
    pub max_tainted_per_group: Option<NodeBudget>,

    /// Effect of the drain taint put on selected nodes. `NoSchedule` keeps new pods off at once;
    /// `PreferNoSchedule` lets an old node stay usable until the drainer starts on it.
    #[arg(
        long,
        env = "ROTOR_TAINT_EFFECT",
        value_enum,
        default_value_t = TaintEffect::NoSchedule,
        value_name = "EFFECT"
    )]
    pub taint_effect: TaintEffect,

    /// Consider only the nodes matching this label selector (kubectl -l syntax, e.g.
    /// `node.kubernetes.io/instance-type=m5.xlarge,team in (core,web)`). Budget percentages are
    /// of the nodes it selects. All nodes when unset.
    #[arg(
        long,
        env = "ROTOR_NODE_SELECTOR",
        value_name = "SELECTOR",
        value_parser = parse_node_selector
    )]
    pub node_selector: Option<String>,

    /// Nodes created longer ago than this are out of date (reason max-age), e.g. `30d`, `2w`,
    /// `36h`, `P30D`. Days are 24 hours; months and years are refused (their length varies). Off
    /// when unset.
    #[arg(
        long,
        env = "ROTOR_MAX_AGE",
        value_name = "DURATION",
        value_parser = parse_max_age
    )]
    pub max_age: Option<Duration>,

    /// Node labels that name a node's group with --provider kubernetes, for
    /// --max-tainted-per-group and the output. The cloud providers group nodes by their cloud
    /// group and refuse this flag. The first one present on a node wins. Repeat the flag, or
    /// separate keys with commas (also in the environment variable). An empty value turns
    /// grouping off (and is refused with --max-tainted-per-group). Default, in order: eks.amazonaws.com/nodegroup,
    /// alpha.eksctl.io/nodegroup-name, karpenter.sh/nodepool, cloud.google.com/gke-nodepool,
    /// kubernetes.azure.com/agentpool, sim.rotor.dev/node-group.
    #[arg(
        long = "group-label",
        env = "ROTOR_GROUP_LABELS",
        value_delimiter = ',',
        value_name = "KEY",
        value_parser = parse_label_key
    )]
    pub group_labels: Option<Vec<String>>,

    /// AWS: select the Auto Scaling groups tagged for this cluster (tag key
    /// `kubernetes.io/cluster/<name>` or `k8s.io/cluster-autoscaler/<name>`). Use this or --group.
    #[arg(long, env = "ROTOR_CLUSTER_NAME", value_name = "NAME")]
    pub cluster_name: Option<String>,

    /// AWS: select these Auto Scaling groups by name instead of by cluster tag. Repeat the flag, or
    /// separate names with commas.
    #[arg(
        long = "group",
        env = "ROTOR_GROUPS",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub groups: Vec<String>,

    /// Leave this group out (its nodes are skipped with that reason). AWS: an Auto Scaling group;
    /// Google Cloud: a managed instance group, by name or zone-or-region/name; Azure: a scale
    /// set, by name. Repeat the flag, or separate names with commas.
    #[arg(
        long = "exclude-group",
        env = "ROTOR_EXCLUDE_GROUPS",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub exclude_groups: Vec<String>,

    /// AWS: leave out Auto Scaling groups carrying this tag: `key` (any value) or `key=value`.
    /// Repeat the flag for several. Unlike the group flags, no comma splits it: an Auto Scaling
    /// group's tag may contain commas, so ROTOR_EXCLUDE_TAGS holds one tag.
    #[arg(
        long = "exclude-tag",
        env = "ROTOR_EXCLUDE_TAGS",
        value_name = "KEY[=VALUE]"
    )]
    pub exclude_tags: Vec<TagExclusion>,

    /// AWS: also judge EKS managed node groups (tag eks:nodegroup-name). By default they are
    /// skipped: EKS rotates them itself.
    #[arg(long, env = "ROTOR_INCLUDE_EKS_MANAGED")]
    pub include_eks_managed: bool,

    /// Judge machine images too (reason image). AWS: an instance whose image differs from the
    /// one its group's launch template version launches (aliases such as resolve:ssm:
    /// resolved); costs one DescribeLaunchTemplateVersions per template and the
    /// DescribeInstances pages. Azure: in a scale set whose model asks for the `latest` image, a
    /// VM built from an older image version than another VM of the set runs; its VM list is
    /// then asked for whole, not only the VMs off the latest model.
    #[arg(long, env = "ROTOR_IMAGE_DRIFT")]
    pub image_drift: bool,

    /// Remove the instances of nodes the drainer marked drained from their groups, at most
    /// --max-tainted per run, each with an Event on the node. AWS: TerminateInstanceInAutoScalingGroup
    /// with ShouldDecrementDesiredCapacity=false (the group replaces the instance). Google Cloud:
    /// the group's deleteInstances; Azure: the scale set's DeleteInstances; on both the group's
    /// size drops by one and nothing replaces the instance until an autoscaler (or you) grows it.
    #[arg(long, env = "ROTOR_RETIRE_DRAINED")]
    pub retire_drained: bool,

    /// AWS: launch replacements before draining. Before a group's out-of-date nodes are
    /// tainted, its desired capacity is raised by as many (within MaxSize; the capacity before is
    /// kept in the group's tag rotor.dev/surge-base), and the taints wait for a later run until the
    /// group has that many InService instances. Drained nodes are then retired with
    /// ShouldDecrementDesiredCapacity=true, which gives the capacity back. Needs --retire-drained.
    /// For groups a cluster autoscaler or Karpenter sizes, prefer the drainer's --surge.
    #[arg(long, env = "ROTOR_GROUP_SURGE")]
    pub group_surge: bool,

    /// AWS: how long one AWS call may take, the SDK's retries included; each attempt gets a third
    /// of it. A call that does not answer in time fails the run (nothing is written) instead of
    /// holding the Job until its activeDeadlineSeconds. Default 30s.
    #[arg(long, env = "ROTOR_AWS_CALL_TIMEOUT", value_name = "DURATION", value_parser = parse_max_age)]
    pub aws_call_timeout: Option<Duration>,

    /// Azure: the subscription whose VM scale sets are judged. When unset, the environment
    /// variable AZURE_SUBSCRIPTION_ID is read.
    #[arg(long, env = "ROTOR_AZURE_SUBSCRIPTION", value_name = "ID")]
    pub azure_subscription: Option<String>,

    /// Azure: only the scale sets of this resource group (one list call per group instead of
    /// one for the subscription). Repeat the flag, or separate names with commas.
    #[arg(
        long = "azure-resource-group",
        env = "ROTOR_AZURE_RESOURCE_GROUPS",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub azure_resource_groups: Vec<String>,

    /// Azure: also judge AKS node pools (tag aks-managed-poolName, or resource group MC_*). By
    /// default they are skipped: AKS upgrades them itself.
    #[arg(long, env = "ROTOR_INCLUDE_AKS_MANAGED")]
    pub include_aks_managed: bool,
    /// Google Cloud: the project whose managed instance groups are listed. Falls back to the
    /// GOOGLE_CLOUD_PROJECT environment variable.
    #[arg(long, env = "ROTOR_GCP_PROJECT", value_name = "PROJECT")]
    pub gcp_project: Option<String>,

    /// Google Cloud: also judge GKE node pools (groups named gke-...). By default they are
    /// skipped: GKE upgrades its node pools itself.
    #[arg(long, env = "ROTOR_INCLUDE_GKE_MANAGED")]
    pub include_gke_managed: bool,

    /// Google Cloud: how long one Compute Engine call may take, the client's retries (at most 5
    /// attempts, 429 and 503 included) included. Default 60s.
    #[arg(long, env = "ROTOR_GCP_CALL_TIMEOUT", value_name = "DURATION", value_parser = parse_max_age)]
    pub gcp_call_timeout: Option<Duration>,

    /// Google Cloud, for testing only: send the Compute Engine calls to this endpoint (e.g. a
    /// fake server, http://127.0.0.1:8080) with anonymous credentials.
    #[arg(long, env = "ROTOR_GCP_ENDPOINT", value_name = "URL")]
    pub gcp_endpoint: Option<String>,
}

/// `--node-selector`: a label selector in its string form, checked as the API server would check
/// it and kept as written (it is sent as the list's `labelSelector`).
fn parse_node_selector(text: &str) -> Result<String, String> {
    LabelSelector::parse(text).map_err(|e| format!("not a label selector: {e}"))?;
    Ok(text.trim().to_owned())
}

/// `--max-age`: a friendly (`30d`, `1w2d`, `36h`) or ISO 8601 (`P30D`) duration, days being 24
/// hours ([`rotor_core::duration`]); positive.
pub fn parse_max_age(text: &str) -> Result<Duration, String> {
    match rotor_core::parse_duration(text) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) | Err(rotor_core::DurationError::Negative { .. }) => {
            Err(format!("duration {text:?} must be positive"))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// `--replace-within`: a positive duration whose deadline, counted from now, is a time the
/// annotation can hold (a value past year 9999 would otherwise be dropped silently).
fn parse_replace_within(text: &str) -> Result<Duration, String> {
    let duration = parse_max_age(text)?;
    jiff::SignedDuration::try_from(duration)
        .ok()
        .and_then(|d| jiff::Timestamp::now().checked_add(d).ok())
        .map(|_| duration)
        .ok_or_else(|| format!("duration {text:?} puts the deadline past the year 9999"))
}

/// `--group-label`: a label key (`[prefix/]name`); empty means none.
fn parse_label_key(text: &str) -> Result<String, String> {
    let key = text.trim();
    if !key.is_empty() {
        Requirement::new(key, Operator::Exists, Vec::<String>::new())
            .map_err(|e| format!("not a label key: {e}"))?;
    }
    Ok(key.to_owned())
}

/// A flag combination or value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("--pushgateway: {0}")]
    Pushgateway(String),
    #[error("--metrics-file must not be empty")]
    MetricsFileEmpty,
    /// The AWS provider needs to know which groups to look at.
    #[error(
        "--provider aws needs --cluster-name (groups tagged for the cluster) or --group (groups by name)"
    )]
    AwsGroupsMissing,
    /// Both ways of choosing groups were given.
    #[error("--cluster-name and --group cannot be used together: choose groups by tag or by name")]
    AwsGroupsTwice,
    /// An AWS-only flag with another provider.
    #[error("{flag} is only used by --provider aws")]
    AwsOnly { flag: &'static str },
    /// An Azure-only flag with another provider.
    #[error("{flag} is only used by --provider azure")]
    AzureOnly { flag: &'static str },
    /// A flag the configured provider does not support.
    #[error("{flag} is not supported by --provider {provider}")]
    NotForProvider {
        flag: &'static str,
        provider: &'static str,
    },
    /// `--retire-drained` with the Kubernetes provider.
    #[error(
        "--retire-drained needs a cloud provider (aws, gcp or azure): the kubernetes provider knows no instance to delete"
    )]
    RetireNeedsCloud,
    /// The Azure provider needs a subscription.
    #[error("--provider azure needs --azure-subscription (or AZURE_SUBSCRIPTION_ID)")]
    AzureSubscriptionMissing,
    /// The subscription given is not a subscription ID.
    #[error(
        "--azure-subscription (or AZURE_SUBSCRIPTION_ID) {given:?} is not a subscription ID: give the ID, a GUID such as 00000000-0000-0000-0000-000000000000 (`az account show --query id`), not the subscription's name"
    )]
    AzureSubscriptionNotAnId { given: String },
    /// A resource group name Azure would refuse.
    #[error(
        "--azure-resource-group {given:?} is not a resource group name: at most 90 letters, digits, '_', '-', '.', '(' or ')', not ending in '.'"
    )]
    AzureResourceGroupName { given: String },
    /// A Google Cloud-only flag with another provider.
    #[error("{flag} is only used by --provider gcp")]
    GcpOnly { flag: &'static str },
    /// A flag the Google Cloud provider does not support.
    #[error("{flag} is not supported by --provider gcp ({why})")]
    NotForGcp {
        flag: &'static str,
        why: &'static str,
    },
    /// The Google Cloud provider needs a project.
    #[error(
        "--provider gcp needs a project: set --gcp-project (ROTOR_GCP_PROJECT) or GOOGLE_CLOUD_PROJECT"
    )]
    GcpProjectMissing,
    /// An empty value where a name is needed.
    #[error("{flag} must not be empty")]
    Empty { flag: &'static str },
    /// Group surge gives capacity back only through retiring drained nodes.
    #[error(
        "--group-surge needs --retire-drained: the surge is given back by retiring drained instances with the group's desired capacity decremented"
    )]
    GroupSurgeNeedsRetire,
    /// `--group-label` with a cloud provider, which groups nodes by its own groups.
    #[error(
        "--group-label is only used by --provider kubernetes: --provider {provider} groups nodes by their {group} (for --max-tainted-per-group and the output); leave --group-label (ROTOR_GROUP_LABELS) unset"
    )]
    GroupLabelForCloud {
        provider: &'static str,
        group: &'static str,
    },
    /// A per-group budget with grouping turned off would hold no node.
    #[error(
        "--max-tainted-per-group needs groups, but --group-label is empty (grouping off): name the node label that holds a node's group, or leave --group-label unset for the default labels"
    )]
    PerGroupWithoutGroups,
}

/// Validated settings for one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorConfig {
    pub provider: ProviderConfig,
    pub dry_run: bool,
    pub output: OutputFormat,
    pub limits: PlanLimits,
    pub taint_effect: TaintEffect,
    /// Restricts the nodes considered (a validated label selector, sent as the list's
    /// `labelSelector`); `None` considers every node.
    pub node_selector: Option<String>,
    /// Node labels naming a node's group, first present wins.
    pub group_labels: Vec<String>,
    /// Surge at the Auto Scaling group level ([`crate::provider::aws_group_surge`]); AWS provider only.
    pub group_surge: bool,
    /// Where the compliance figures go after the run.
    pub metrics: MetricsSinks,
    /// `--replace-within`.
    pub replace_within: Option<Duration>,
}

/// `--metrics-file`, `--pushgateway`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsSinks {
    pub file: Option<std::path::PathBuf>,
    /// The push URL: `<base>/metrics/job/rotor-selector[/cluster/<name>]`.
    pub pushgateway: Option<rotor_core::http::HttpTarget>,
}

impl SelectArgs {
    /// Checks what clap cannot check on single values and builds the run's settings.
    pub fn validate(&self) -> Result<SelectorConfig, ConfigError> {
        if self.provider != ProviderKind::Azure {
            let azure_only = [
                ("--azure-subscription", self.azure_subscription.is_some()),
                (
                    "--azure-resource-group",
                    !self.azure_resource_groups.is_empty(),
                ),
                ("--include-aks-managed", self.include_aks_managed),
            ];
            if let Some((flag, _)) = azure_only.iter().find(|(_, set)| *set) {
                return Err(ConfigError::AzureOnly { flag });
            }
        }
        if self.provider != ProviderKind::Gcp {
            let gcp_only = [
                ("--gcp-project", self.gcp_project.is_some()),
                ("--include-gke-managed", self.include_gke_managed),
                ("--gcp-call-timeout", self.gcp_call_timeout.is_some()),
                ("--gcp-endpoint", self.gcp_endpoint.is_some()),
            ];
            if let Some((flag, _)) = gcp_only.iter().find(|(_, set)| *set) {
                return Err(ConfigError::GcpOnly { flag });
            }
        }
        // A cloud provider's own groups decide; a label list given anyway would be ignored.
        let cloud_group = match self.provider {
            ProviderKind::Kubernetes => None,
            ProviderKind::Aws => Some(("aws", "Auto Scaling group")),
            ProviderKind::Gcp => Some(("gcp", "managed instance group")),
            ProviderKind::Azure => Some(("azure", "scale set")),
        };
        if let (Some((provider, group)), Some(_)) = (cloud_group, &self.group_labels) {
            return Err(ConfigError::GroupLabelForCloud { provider, group });
        }
        let group_labels: Vec<String> = match &self.group_labels {
            None => DEFAULT_GROUP_LABELS.map(String::from).to_vec(),
            Some(keys) => keys.iter().filter(|key| !key.is_empty()).cloned().collect(),
        };
        if cloud_group.is_none() && group_labels.is_empty() && self.max_tainted_per_group.is_some()
        {
            return Err(ConfigError::PerGroupWithoutGroups);
        }
        let provider = match self.provider {
            ProviderKind::Kubernetes => {
                let aws_only = [
                    ("--cluster-name", self.cluster_name.is_some()),
                    ("--group", !self.groups.is_empty()),
                    ("--exclude-tag", !self.exclude_tags.is_empty()),
                    ("--include-eks-managed", self.include_eks_managed),
                    ("--group-surge", self.group_surge),
                    ("--aws-call-timeout", self.aws_call_timeout.is_some()),
                ];
                if let Some((flag, _)) = aws_only.iter().find(|(_, set)| *set) {
                    return Err(ConfigError::AwsOnly { flag });
                }
                // The cloud providers' groups; the kubernetes provider has none to leave out.
                if !self.exclude_groups.is_empty() {
                    return Err(ConfigError::NotForProvider {
                        flag: "--exclude-group",
                        provider: "kubernetes",
                    });
                }
                if self.image_drift {
                    return Err(ConfigError::NotForProvider {
                        flag: "--image-drift",
                        provider: "kubernetes",
                    });
                }
                if self.retire_drained {
                    return Err(ConfigError::RetireNeedsCloud);
                }
                ProviderConfig::Kubernetes {
                    max_age: self.max_age,
                }
            }
            ProviderKind::Aws => ProviderConfig::Aws(self.aws_config()?),
            ProviderKind::Azure => ProviderConfig::Azure(
                self.azure_config(std::env::var("AZURE_SUBSCRIPTION_ID").ok())?,
            ),
            ProviderKind::Gcp => ProviderConfig::Gcp(self.gcp_config()?),
        };
        if self.group_surge && !self.retire_drained {
            return Err(ConfigError::GroupSurgeNeedsRetire);
        }
        let metrics = self.metrics_sinks()?;
        Ok(SelectorConfig {
            provider,
            dry_run: self.dry_run,
            output: self.output,
            limits: PlanLimits {
                max_tainted: self.max_tainted,
                max_tainted_per_group: self.max_tainted_per_group,
                // The Kubernetes provider knows no instances, so it never retires.
                retire_drained: self.retire_drained && self.provider != ProviderKind::Kubernetes,
            },
            taint_effect: self.taint_effect,
            node_selector: self.node_selector.clone().filter(|s| !s.is_empty()),
            group_labels,
            group_surge: self.group_surge,
            metrics,
            replace_within: self.replace_within,
        })
    }

    fn metrics_sinks(&self) -> Result<MetricsSinks, ConfigError> {
        let pushgateway = match &self.pushgateway {
            None => None,
            Some(url) => {
                let base: rotor_core::http::HttpTarget =
                    url.trim()
                        .parse()
                        .map_err(|e: rotor_core::http::TargetError| {
                            ConfigError::Pushgateway(e.to_string())
                        })?;
                let mut path = "/metrics/job/rotor-selector".to_string();
                if let Some(cluster) = self
                    .cluster_name
                    .as_deref()
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                {
                    // The Pushgateway's base64 form of a grouping label: any name fits a path.
                    use base64::Engine;
                    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(cluster);
                    path.push_str(&format!("/cluster@base64/{encoded}"));
                }
                Some(base.with_path_and_query(&path, &[]))
            }
        };
        if let Some(file) = &self.metrics_file
            && file.as_os_str().is_empty()
        {
            return Err(ConfigError::MetricsFileEmpty);
        }
        Ok(MetricsSinks {
            file: self.metrics_file.clone(),
            pushgateway,
        })
    }
}

impl SelectArgs {
    /// The Azure settings; `env_subscription` is AZURE_SUBSCRIPTION_ID, read when the flag is
    /// unset. The AWS flags and what the Azure provider does not do yet (--max-age, retiring,
    /// the group surge) are refused.
    fn azure_config(&self, env_subscription: Option<String>) -> Result<AzureConfig, ConfigError> {
        let unsupported = [
            ("--cluster-name", self.cluster_name.is_some()),
            ("--group", !self.groups.is_empty()),
            ("--exclude-tag", !self.exclude_tags.is_empty()),
            ("--include-eks-managed", self.include_eks_managed),
            ("--group-surge", self.group_surge),
            ("--aws-call-timeout", self.aws_call_timeout.is_some()),
            ("--max-age", self.max_age.is_some()),
        ];
        if let Some((flag, _)) = unsupported.iter().find(|(_, set)| *set) {
            return Err(ConfigError::NotForProvider {
                flag,
                provider: "azure",
            });
        }
        let subscription = self
            .azure_subscription
            .clone()
            .or(env_subscription)
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .ok_or(ConfigError::AzureSubscriptionMissing)?;
        if !is_guid(&subscription) {
            return Err(ConfigError::AzureSubscriptionNotAnId {
                given: subscription,
            });
        }
        let trimmed = |names: &[String]| -> Vec<String> {
            names
                .iter()
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect()
        };
        let mut resource_groups = trimmed(&self.azure_resource_groups);
        if let Some(bad) = resource_groups
            .iter()
            .find(|rg| !is_resource_group_name(rg))
        {
            return Err(ConfigError::AzureResourceGroupName { given: bad.clone() });
        }
        resource_groups.sort_by_key(|rg| rg.to_ascii_lowercase());
        resource_groups.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
        Ok(AzureConfig {
            subscription,
            resource_groups,
            excluded_names: trimmed(&self.exclude_groups).into_iter().collect(),
            include_aks_managed: self.include_aks_managed,
            image_drift: self.image_drift,
        })
    }

    fn gcp_config(&self) -> Result<GcpConfig, ConfigError> {
        const AWS_ONLY: &str = "AWS only";
        const FOR_NOW: &str = "AWS only for now";
        let unsupported = [
            ("--cluster-name", self.cluster_name.is_some(), AWS_ONLY),
            ("--group", !self.groups.is_empty(), AWS_ONLY),
            ("--exclude-tag", !self.exclude_tags.is_empty(), AWS_ONLY),
            ("--include-eks-managed", self.include_eks_managed, AWS_ONLY),
            ("--image-drift", self.image_drift, FOR_NOW),
            ("--max-age", self.max_age.is_some(), FOR_NOW),
            ("--group-surge", self.group_surge, AWS_ONLY),
            (
                "--aws-call-timeout",
                self.aws_call_timeout.is_some(),
                AWS_ONLY,
            ),
        ];
        if let Some((flag, _, why)) = unsupported.iter().find(|(_, set, _)| *set) {
            return Err(ConfigError::NotForGcp { flag, why });
        }
        let project = self
            .gcp_project
            .clone()
            .or_else(|| std::env::var("GOOGLE_CLOUD_PROJECT").ok())
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .ok_or(ConfigError::GcpProjectMissing)?;
        let endpoint = match self.gcp_endpoint.as_deref().map(str::trim) {
            None => None,
            Some("") => {
                return Err(ConfigError::Empty {
                    flag: "--gcp-endpoint",
                });
            }
            Some(url) => Some(url.trim_end_matches('/').to_owned()),
        };
        Ok(GcpConfig {
            project,
            excluded_names: self
                .exclude_groups
                .iter()
                .map(|g| g.trim().to_owned())
                .filter(|g| !g.is_empty())
                .collect(),
            include_gke_managed: self.include_gke_managed,
            endpoint,
            call_timeout: self.gcp_call_timeout.unwrap_or(gcp::DEFAULT_CALL_TIMEOUT),
        })
    }

    fn aws_config(&self) -> Result<AwsConfig, ConfigError> {
        let cluster = self.cluster_name.as_deref().map(str::trim);
        let groups: Vec<String> = self
            .groups
            .iter()
            .map(|g| g.trim().to_owned())
            .filter(|g| !g.is_empty())
            .collect();
        let discovery = match (cluster, groups.is_empty()) {
            (Some(""), _) => {
                return Err(ConfigError::Empty {
                    flag: "--cluster-name",
                });
            }
            (Some(_), false) => return Err(ConfigError::AwsGroupsTwice),
            (Some(cluster), true) => GroupDiscovery::ClusterTag(cluster.to_owned()),
            (None, false) => {
                let mut unique = groups;
                unique.sort();
                unique.dedup();
                GroupDiscovery::Names(unique)
            }
            (None, true) => return Err(ConfigError::AwsGroupsMissing),
        };
        Ok(AwsConfig {
            discovery,
            excluded_names: self
                .exclude_groups
                .iter()
                .map(|g| g.trim().to_owned())
                .filter(|g| !g.is_empty())
                .collect::<BTreeSet<_>>(),
            excluded_tags: self.exclude_tags.clone(),
            include_eks_managed: self.include_eks_managed,
            image_drift: self.image_drift,
            max_age: self.max_age,
            timeouts: CallTimeouts::within(self.aws_call_timeout.unwrap_or(DEFAULT_CALL_TIMEOUT)),
        })
    }
}

#[cfg(test)]
mod fuzz;

/// An Azure subscription ID: a GUID, 8-4-4-4-12 hexadecimal digits. Its name is refused here
/// (exit 2) rather than by ARM after the cluster was read.
fn is_guid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Azure's rule for resource group names: 1 to 90 letters or digits (Unicode ones included),
/// '_', '-', '.', '(' or ')', not ending in '.'.
fn is_resource_group_name(name: &str) -> bool {
    (1..=90).contains(&name.chars().count())
        && !name.ends_with('.')
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '(' | ')'))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let mut argv = vec!["rotor-selector"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)
    }

    fn config(args: &[&str]) -> SelectorConfig {
        parse(args).unwrap().select.validate().unwrap()
    }

    #[test]
    fn exclude_group_with_the_kubernetes_provider_is_refused_without_calling_it_aws_only() {
        let err = parse(&["--provider", "kubernetes", "--exclude-group", "g"])
            .unwrap()
            .select
            .validate()
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "--exclude-group is not supported by --provider kubernetes"
        );
    }

    #[test]
    fn a_replace_within_past_the_last_representable_time_is_refused() {
        let within = |d: &str| parse(&["--provider", "kubernetes", "--replace-within", d]);
        assert_eq!(
            within("7d").unwrap().select.replace_within,
            Some(Duration::from_secs(7 * 86_400))
        );
        let err = within("4000000d").unwrap_err().to_string();
        assert!(err.contains("past the year 9999"), "{err}");
        assert!(within("0s").is_err());
    }

    #[test]
    fn metrics_sinks_parse_into_the_pushgateway_job_url() {
        let c = config(&[
            "--provider",
            "aws",
            "--cluster-name",
            "prod-eu",
            "--pushgateway",
            "http://pushgateway.monitoring:9091",
            "--metrics-file",
            "/var/lib/node-exporter/rotor.prom",
        ]);
        assert_eq!(
            c.metrics.pushgateway.unwrap().shown(),
            "http://pushgateway.monitoring:9091/metrics/job/rotor-selector/cluster@base64/cHJvZC1ldQ"
        );
        assert_eq!(
            c.metrics.file.as_deref(),
            Some(std::path::Path::new("/var/lib/node-exporter/rotor.prom"))
        );
        let bad = parse(&[
            "--provider",
            "kubernetes",
            "--pushgateway",
            "pushgateway:9091",
        ])
        .unwrap()
        .select
        .validate()
        .unwrap_err();
        assert!(bad.to_string().starts_with("--pushgateway: "), "{bad}");
        assert!(
            config(&["--provider", "kubernetes", "--output", "report"]).output
                == OutputFormat::Report
        );
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_flag_has_an_environment_variable() {
        let command = Cli::command();
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            assert!(
                env.as_deref().is_some_and(|e| e.starts_with("ROTOR_")),
                "--{id} has no ROTOR_ environment variable"
            );
            assert!(
                arg.get_help().is_some_and(|h| h.to_string().len() > 20),
                "--{id} has no help text"
            );
        }
    }

    #[test]
    fn defaults_are_safe() {
        let c = config(&["--provider", "kubernetes"]);
        assert_eq!(c.provider, ProviderConfig::Kubernetes { max_age: None });
        assert!(!c.dry_run);
        assert_eq!(c.output, OutputFormat::Text);
        assert_eq!(
            c.limits,
            PlanLimits {
                max_tainted: NodeBudget::Count(1),
                max_tainted_per_group: None,
                retire_drained: false,
            }
        );
        assert_eq!(c.taint_effect, TaintEffect::NoSchedule);
        assert_eq!(c.node_selector, None);
        assert_eq!(c.group_labels, DEFAULT_GROUP_LABELS);
    }

    #[test]
    fn every_flag_parses() {
        let c = config(&[
            "--provider",
            "kubernetes",
            "--dry-run",
            "--output",
            "json",
            "--max-tainted",
            "25%",
            "--max-tainted-per-group",
            "2",
            "--taint-effect",
            "PreferNoSchedule",
            "--node-selector",
            "team in (core, web),!spot",
            "--max-age",
            "30d",
            "--group-label",
            "a.example/group,b",
            "--group-label",
            "c",
        ]);
        assert_eq!(
            c.provider,
            ProviderConfig::Kubernetes {
                max_age: Some(Duration::from_secs(30 * 86_400))
            }
        );
        assert!(c.dry_run);
        assert_eq!(c.output, OutputFormat::Json);
        assert_eq!(c.limits.max_tainted, NodeBudget::Percent(25));
        assert_eq!(c.limits.max_tainted_per_group, Some(NodeBudget::Count(2)));
        assert_eq!(c.taint_effect, TaintEffect::PreferNoSchedule);
        assert_eq!(
            c.node_selector.as_deref(),
            Some("team in (core, web),!spot")
        );
        assert_eq!(c.group_labels, ["a.example/group", "b", "c"]);
    }

    #[test]
    fn empty_values_mean_none() {
        let c = config(&[
            "--provider",
            "kubernetes",
            "--node-selector",
            "",
            "--group-label",
            "",
        ]);
        assert_eq!(c.node_selector, None);
        assert!(c.group_labels.is_empty());
    }

    #[test]
    fn group_labels_are_the_kubernetes_providers_and_a_per_group_budget_needs_them() {
        let refused = |args: &[&str]| parse(args).unwrap().select.validate().unwrap_err();
        assert_eq!(
            refused(&[
                "--provider",
                "kubernetes",
                "--group-label",
                "",
                "--max-tainted-per-group",
                "1"
            ]),
            ConfigError::PerGroupWithoutGroups
        );
        assert_eq!(
            refused(&[
                "--provider",
                "gcp",
                "--gcp-project",
                "p",
                "--group-label",
                "team"
            ]),
            ConfigError::GroupLabelForCloud {
                provider: "gcp",
                group: "managed instance group"
            }
        );
        // Unset, the default labels serve the kubernetes provider and stay out of the clouds' way.
        let c = config(&["--provider", "kubernetes", "--max-tainted-per-group", "1"]);
        assert_eq!(c.group_labels, DEFAULT_GROUP_LABELS);
        let c = config(&[
            "--provider",
            "aws",
            "--group",
            "g",
            "--max-tainted-per-group",
            "1",
        ]);
        assert_eq!(c.limits.max_tainted_per_group, Some(NodeBudget::Count(1)));
    }

    #[test]
    fn max_age_accepts_days_and_weeks_only_when_positive() {
        assert_eq!(parse_max_age("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse_max_age("36h"), Ok(Duration::from_secs(36 * 3_600)));
        assert_eq!(parse_max_age("P30D"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_max_age("1d 12h"), Ok(Duration::from_secs(36 * 3_600)));
        assert!(parse_max_age("1 month").unwrap_err().contains("months"));
        assert!(parse_max_age("0s").unwrap_err().contains("positive"));
        assert!(parse_max_age("-5d").unwrap_err().contains("positive"));
        assert!(parse_max_age("soon").unwrap_err().contains("30d"));
    }

    #[test]
    fn bad_values_name_the_flag() {
        let cases: [(&[&str], &str); 9] = [
            (&["--max-tainted", "150%"], "--max-tainted"),
            (&["--max-tainted=-1"], "--max-tainted"),
            (
                &["--max-tainted-per-group", "two"],
                "--max-tainted-per-group",
            ),
            (&["--node-selector", "a in ("], "--node-selector"),
            (&["--max-age", "0s"], "--max-age"),
            (&["--taint-effect", "NoExecute"], "--taint-effect"),
            (&["--output", "yaml"], "--output"),
            (&["--group-label", "not a key"], "--group-label"),
            (&["--provider", "azure"], "--provider"),
        ];
        for (args, flag) in cases {
            let mut argv = vec!["--provider", "kubernetes"];
            argv.extend_from_slice(args);
            let err = parse(&argv).expect_err(flag);
            assert_eq!(err.exit_code(), 2, "{flag}");
            assert!(err.to_string().contains(flag), "{flag}: {err}");
        }
        let err = parse(&[]).unwrap_err();
        assert!(err.to_string().contains("--provider"), "{err}");
    }

    fn config_error(args: &[&str]) -> String {
        parse(args)
            .unwrap()
            .select
            .validate()
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn aws_needs_a_way_to_find_groups() {
        assert_eq!(
            config_error(&["--provider", "aws"]),
            "--provider aws needs --cluster-name (groups tagged for the cluster) or --group (groups by name)"
        );
        assert!(
            config_error(&["--provider", "aws", "--cluster-name", "c", "--group", "g"])
                .contains("cannot be used together")
        );
        assert!(config_error(&["--provider", "aws", "--cluster-name", " "]).contains("empty"));
        assert_eq!(
            config_error(&["--provider", "kubernetes", "--image-drift"]),
            "--image-drift is not supported by --provider kubernetes"
        );
        assert_eq!(
            config_error(&["--provider", "kubernetes", "--retire-drained"]),
            "--retire-drained needs a cloud provider (aws, gcp or azure): the kubernetes provider knows no instance to delete"
        );
        assert_eq!(
            config_error(&["--provider", "kubernetes", "--group-surge"]),
            "--group-surge is only used by --provider aws"
        );
        assert!(
            config_error(&["--provider", "aws", "--group", "g", "--group-surge"])
                .starts_with("--group-surge needs --retire-drained")
        );
        assert!(!config(&["--provider", "aws", "--group", "g"]).group_surge);
        let surge = config(&[
            "--provider",
            "aws",
            "--group",
            "g",
            "--retire-drained",
            "--group-surge",
        ]);
        assert!(surge.group_surge && surge.limits.retire_drained);
    }

    #[test]
    fn azure_flags_parse_and_foreign_flags_are_refused() {
        const SUB: &str = "5d3b9c1e-0f2a-4b7c-9e8d-1a2b3c4d5e6f";
        let args = parse(&[
            "--provider",
            "azure",
            "--azure-subscription",
            " 5D3B9C1E-0F2A-4B7C-9E8D-1A2B3C4D5E6F ",
            "--azure-resource-group",
            "rg-b,RG-A",
            "--azure-resource-group",
            "rg-a",
            "--exclude-group",
            "vmss-x",
            "--include-aks-managed",
            "--image-drift",
        ])
        .unwrap();
        assert_eq!(
            args.select.azure_config(None).unwrap(),
            AzureConfig {
                subscription: "5D3B9C1E-0F2A-4B7C-9E8D-1A2B3C4D5E6F".into(),
                resource_groups: vec!["RG-A".into(), "rg-b".into()],
                excluded_names: ["vmss-x".to_owned()].into(),
                include_aks_managed: true,
                image_drift: true,
            }
        );
        let bare = parse(&["--provider", "azure"]).unwrap();
        assert_eq!(
            bare.select
                .azure_config(Some(SUB.into()))
                .unwrap()
                .subscription,
            SUB
        );
        assert_eq!(
            bare.select.azure_config(None).unwrap_err().to_string(),
            "--provider azure needs --azure-subscription (or AZURE_SUBSCRIPTION_ID)"
        );
        let with = |extra: &[&str]| {
            let mut args = vec!["--provider", "azure", "--azure-subscription", SUB];
            args.extend_from_slice(extra);
            parse(&args)
                .unwrap()
                .select
                .validate()
                .unwrap_err()
                .to_string()
        };
        let retiring = parse(&[
            "--provider",
            "azure",
            "--azure-subscription",
            SUB,
            "--retire-drained",
        ])
        .unwrap()
        .select
        .validate()
        .unwrap();
        assert!(retiring.limits.retire_drained);
        assert_eq!(
            with(&["--retire-drained", "--group-surge"]),
            "--group-surge is not supported by --provider azure"
        );
        assert_eq!(
            with(&["--cluster-name", "c"]),
            "--cluster-name is not supported by --provider azure"
        );
        assert_eq!(
            config_error(&["--provider", "aws", "--group", "g", "--include-aks-managed"]),
            "--include-aks-managed is only used by --provider azure"
        );
        assert_eq!(
            config_error(&["--provider", "kubernetes", "--azure-subscription", "s"]),
            "--azure-subscription is only used by --provider azure"
        );
    }

    #[test]
    fn an_azure_subscription_name_or_a_resource_group_azure_would_refuse_is_a_flag_error() {
        let config = |extra: &[&str], env: Option<&str>| {
            let mut args = vec!["--provider", "azure"];
            args.extend_from_slice(extra);
            parse(&args)
                .unwrap()
                .select
                .azure_config(env.map(str::to_owned))
        };
        const SUB: &str = "5d3b9c1e-0f2a-4b7c-9e8d-1a2b3c4d5e6f";
        // The subscription's name where its ID belongs, by flag or environment.
        for given in ["prod-subscription", "5d3b9c1e0f2a4b7c9e8d1a2b3c4d5e6f"] {
            let error = config(&["--azure-subscription", given], None).unwrap_err();
            assert_eq!(
                error,
                ConfigError::AzureSubscriptionNotAnId {
                    given: given.into()
                }
            );
            assert!(error.to_string().contains("az account show"), "{error}");
            assert!(config(&[], Some(given)).is_err());
        }
        for bad in ["my rg", "rg.", "rg/other", &"r".repeat(91)] {
            assert_eq!(
                config(
                    &["--azure-subscription", SUB, "--azure-resource-group", bad],
                    None
                )
                .unwrap_err(),
                ConfigError::AzureResourceGroupName { given: bad.into() }
            );
        }
        // What Azure allows: Unicode letters, parentheses, periods inside, 90 characters.
        for good in ["grün-rg", "rg_(prod).eu", &"r".repeat(90)] {
            let ok = config(
                &["--azure-subscription", SUB, "--azure-resource-group", good],
                None,
            )
            .unwrap();
            assert_eq!(ok.resource_groups, [good]);
        }
    }

    #[test]
    fn gcp_flags_parse_and_aws_flags_are_refused() {
        let c = config(&[
            "--provider",
            "gcp",
            "--gcp-project",
            "my-project",
            "--exclude-group",
            "us-central1-a/legacy",
            "--include-gke-managed",
            "--gcp-call-timeout",
            "2m",
            "--gcp-endpoint",
            "http://127.0.0.1:9000/",
        ]);
        assert_eq!(
            c.provider,
            ProviderConfig::Gcp(GcpConfig {
                project: "my-project".into(),
                excluded_names: BTreeSet::from(["us-central1-a/legacy".to_owned()]),
                include_gke_managed: true,
                endpoint: Some("http://127.0.0.1:9000".into()),
                call_timeout: Duration::from_secs(120),
            })
        );
        assert!(!c.limits.retire_drained);
        assert!(
            config(&[
                "--provider",
                "gcp",
                "--gcp-project",
                "p",
                "--retire-drained"
            ])
            .limits
            .retire_drained
        );
        assert_eq!(
            config_error(&[
                "--provider",
                "gcp",
                "--gcp-project",
                "p",
                "--retire-drained",
                "--group-surge"
            ]),
            "--group-surge is not supported by --provider gcp (AWS only)"
        );
        assert_eq!(
            config_error(&["--provider", "gcp", "--gcp-project", "p", "--group", "g"]),
            "--group is not supported by --provider gcp (AWS only)"
        );
        assert_eq!(
            config_error(&["--provider", "aws", "--group", "g", "--gcp-project", "p"]),
            "--gcp-project is only used by --provider gcp"
        );
        assert_eq!(
            config_error(&["--provider", "kubernetes", "--include-gke-managed"]),
            "--include-gke-managed is only used by --provider gcp"
        );
        assert!(config_error(&["--provider", "gcp", "--gcp-project", " "]).contains("project"));
    }

    #[test]
    fn aws_flags_parse() {
        let c = config(&[
            "--provider",
            "aws",
            "--group",
            "b,a",
            "--group",
            "a",
            "--exclude-group",
            "x",
            "--exclude-tag",
            "team=batch,dev",
            "--exclude-tag",
            "legacy",
            "--include-eks-managed",
            "--image-drift",
            "--max-age",
            "30d",
            "--retire-drained",
            "--aws-call-timeout",
            "1m",
        ]);
        assert!(c.limits.retire_drained);
        assert_eq!(
            c.provider,
            ProviderConfig::Aws(AwsConfig {
                discovery: GroupDiscovery::Names(vec!["a".into(), "b".into()]),
                excluded_names: BTreeSet::from(["x".to_owned()]),
                // A tag's value may hold a comma: no comma splits the flag.
                excluded_tags: vec!["team=batch,dev".parse().unwrap(), "legacy".parse().unwrap()],
                include_eks_managed: true,
                image_drift: true,
                max_age: Some(Duration::from_secs(30 * 86_400)),
                timeouts: CallTimeouts {
                    attempt: Duration::from_secs(20),
                    operation: Duration::from_secs(60),
                },
            })
        );
        let c = config(&["--provider", "aws", "--cluster-name", "prod"]);
        assert!(!c.limits.retire_drained);
        assert_eq!(
            c.provider,
            ProviderConfig::Aws(AwsConfig {
                discovery: GroupDiscovery::ClusterTag("prod".into()),
                excluded_names: BTreeSet::new(),
                excluded_tags: Vec::new(),
                include_eks_managed: false,
                image_drift: false,
                max_age: None,
                timeouts: CallTimeouts {
                    attempt: Duration::from_secs(10),
                    operation: Duration::from_secs(30),
                },
            })
        );
        let err = parse(&["--provider", "aws", "--exclude-tag", "=v"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("--exclude-tag"), "{err}");
    }
}
