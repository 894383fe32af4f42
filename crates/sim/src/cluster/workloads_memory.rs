//! What the workload controllers remember between steps: the resourceVersion each last ran at.

/// What the workload controllers keep from one step to the next: the resourceVersion at which
/// each last ran, so that the next run looks only at the namespaces (or kinds) written since.
/// Every controller is a function of the objects it reads, so skipping those nothing was
/// written to changes nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct WorkloadsMemory {
    pub(super) deployments: u64,
    pub(super) replicasets: u64,
    pub(super) statefulsets: u64,
    pub(super) daemonsets: u64,
    pub(super) mirror_pods: u64,
}
