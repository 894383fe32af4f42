//! The provider seam: what every provider implements against and the run relies on, whichever
//! provider is configured. A look-up that fails for the whole fleet is a [`ProviderError`] (the
//! run fails and nothing is written); one that fails for some groups only is a [`LookupFailure`]
//! (those groups are skipped); a provider that can terminate instances hands out a [`Retirer`].

use std::future::Future;
use std::pin::Pin;

use crate::plan::Candidate;

/// The AWS settings cannot be used; a configuration error (exit 2), found before any call.
#[derive(Debug, thiserror::Error)]
pub enum AwsSetupError {
    /// No region in the environment, the shared config profile or the instance metadata.
    #[error(
        "--provider aws needs an AWS region and none was found: set AWS_REGION (or a region in the AWS config profile; on EC2 the instance metadata provides it)"
    )]
    RegionMissing,
}

/// Retires (terminates) the instance behind a drained node. Only cloud providers have one
/// ([`crate::provider::Assessor::retirer`]); the Kubernetes provider never retires.
pub trait Retirer: Send + Sync {
    /// (API, operation) counted in [`ApiCalls`](crate::api_calls::ApiCalls) for the retire of
    /// this node's instance.
    fn call(&self, candidate: &Candidate) -> (&'static str, &'static str);

    /// Removes the node's instance (`candidate.instance`, in `candidate.group`) from its group;
    /// `shrink_group` says the group's size must drop (a surge replacement already runs). On
    /// success, a line saying what was done and what the group does next.
    fn retire<'a>(
        &'a self,
        candidate: &'a Candidate,
        shrink_group: bool,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>>;
}

/// Looking up what a provider needs failed; the run fails and nothing is written.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// A Kubernetes API call failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was being read, e.g. `GET /version`.
        what: String,
        #[source]
        source: kube::Error,
    },
    /// An AWS call failed (after the SDK's retries).
    #[error("AWS {operation} failed: {message}")]
    Aws {
        /// The operation, e.g. `DescribeAutoScalingGroups`.
        operation: &'static str,
        /// The error code and message, e.g. `AccessDenied: User ... is not authorized`.
        message: String,
    },
    /// An Azure Resource Manager call failed (after the retries), or its client could not be
    /// set up.
    #[error("Azure {operation} failed: {message}")]
    Azure {
        /// The ARM operation id, e.g. `VirtualMachineScaleSets_ListAll`.
        operation: &'static str,
        /// The status, ARM error code and message.
        message: String,
    },
    /// A Google Cloud call failed (after the client's retries), or its clients cannot be built.
    #[error("Google Cloud {operation} failed: {message}")]
    Gcp {
        /// The method, e.g. `instanceGroupManagers.aggregatedList`.
        operation: &'static str,
        /// The error as the client reports it.
        message: String,
    },
    /// The AWS clients cannot be built (the binary checks this before any call).
    #[error(transparent)]
    AwsSetup(#[from] AwsSetupError),
}

/// A look-up that failed for part of the fleet only: the groups it concerns were skipped (their
/// nodes show `skip` with reason `lookup-failed`), the others were judged and planned. The run
/// reports it and exits 1 once the rest is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookupFailure {
    /// The operation, e.g. `DescribeLaunchTemplateVersions`.
    pub operation: &'static str,
    /// What it was about, e.g. a launch template id.
    pub subject: String,
    /// The error code and message.
    pub error: String,
    /// The groups skipped because of it.
    pub groups: Vec<String>,
}

impl std::fmt::Display for LookupFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} for {} failed: {}",
            self.operation, self.subject, self.error
        )?;
        if !self.groups.is_empty() {
            write!(f, "; skipped group(s) {}", self.groups.join(", "))?;
        }
        Ok(())
    }
}
