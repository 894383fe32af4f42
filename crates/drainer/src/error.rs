//! The drainer's errors. Each says what failed, on which object, and what happens next or what
//! an operator can do. A failed drain's text is also what the node's record and its
//! `DrainFailed` Event carry, so [`DrainError`] puts its cause in the message itself.

use jiff::Timestamp;

/// Why one node's drain attempt gave up. The drain is retried after a back-off (see
/// [`crate::record::node::Transition::Retry`]); nothing here undoes the cordon or the taint.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("cannot read node {node}: {error}")]
    ReadNode { node: String, error: kube::Error },
    /// Nothing was evicted: the start is recorded before the cordon.
    /// The one write that records the drain's start and cordons the node failed.
    #[error(
        "cannot cordon node {node} and record the drain's start on it: {error}; nothing was evicted (rotor-drainer needs get and patch on nodes)"
    )]
    Cordon { node: String, error: kube::Error },
    /// The pod watch's stream ended, which kube-runtime's watcher does only when it is dropped.
    #[error("the pod watch for node {node} ended")]
    PodWatchEnded { node: String },
    #[error(
        "drain deadline {deadline} passed with {} pod(s) left: {}",
        pods.len(),
        pods.join(", ")
    )]
    DeadlinePassed {
        deadline: Timestamp,
        /// The pods still on the node, as `namespace/name`.
        pods: Vec<String>,
    },
    /// The node's pod watch never listed (a 403 on pods, a proxy that refuses the watch): the
    /// deadline still ends the drain, where an operator sees it.
    #[error(
        "drain deadline {deadline} passed before the node's pods could be listed, so none was evicted in this attempt (rotor-drainer needs list and watch on pods; its log has the pod watch's error)"
    )]
    PodsNotListed { deadline: Timestamp },
}

/// Why a running drainer stopped other than by being asked to. The binary exits non-zero on
/// each, so the Deployment restarts it.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Its message already names the kubeconfig or the cluster and what to check.
    #[error(transparent)]
    Client(#[from] rotor_core::client::ClientError),
    /// Its message already names the address and the flag to change.
    #[error(transparent)]
    Admin(#[from] rotor_core::admin::AdminError),
    #[error("the PodDisruptionBudget cache stopped before its first list completed")]
    BudgetCache(#[source] kube::runtime::reflector::store::WriterDropped),
    #[error("the leader election task ended")]
    ElectionEnded,
    #[error("the node watch ended")]
    NodeWatchEnded,
    #[error("a drain task panicked; this is a bug in rotor-drainer")]
    TaskPanicked(#[source] tokio::task::JoinError),
    #[error("lost the leader lease; exiting so that a restart rejoins the election cleanly")]
    LostLease,
    #[error(
        "--surge needs the PriorityClass {name}, which does not exist; apply deploy/ (it ships rotor-surge) or name another with --surge-priority-class"
    )]
    SurgePriorityClassMissing { name: String },
    #[error(
        "cannot read the PriorityClass {name} that --surge needs: {error} (rotor-drainer needs get on priorityclasses)"
    )]
    SurgePriorityClassUnreadable { name: String, error: kube::Error },
    #[error(
        "cannot set up the health gate's HTTP client: {0} (the system's CA certificates are needed for https checks)"
    )]
    HealthClient(#[source] rotor_core::http::HttpError),
    #[error(
        "cannot set up the notifications' HTTP client: {0} (the system's CA certificates are needed for https webhooks)"
    )]
    NotifyClient(#[source] rotor_core::http::HttpError),
}
