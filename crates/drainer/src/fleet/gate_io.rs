//! The runtime side of the start gate: what the next start waits for, read from the workload
//! index and the pending pods, logged when it changes, bounded by `--gate-timeout` (except when
//! the gate cannot read the cluster: then it holds, failing closed). The decisions themselves are
//! in [`crate::fleet::gate`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;

use crate::drain::published::{Published, WorkloadRef};
use crate::drain::watched_io::{from_watch_cache, refuses_streaming};
use crate::fleet::gate::{GateBlocker, GateConfig, PendingTally, concerns, workload_blockers};
use crate::fleet::workloads::{IndexUnusable, WorkloadIndex, WorkloadKey};
use crate::metrics::Metrics;

/// What the gate reads besides the workload index, and its settings.
pub(super) struct GateReads {
    /// Reads the pending pods.
    pub client: kube::Client,
    /// What the running drains evicted.
    pub published: Arc<Published>,
    pub metrics: Metrics,
    /// `--pending-grace` and the namespaces it ignores.
    pub cfg: GateConfig,
    /// `--gate-timeout`.
    pub timeout: Duration,
    /// Whether the API server streams a watch's initial pods; false once it refused to.
    pub streaming: AtomicBool,
}

/// The gate between one drained node and the next.
#[derive(Default)]
pub(super) struct Gate {
    /// Workloads evicted from drains finished since the last start and not yet seen Ready
    /// again; each leaves the set once it is, so it is not fetched again.
    owners: BTreeSet<WorkloadRef>,
    /// When the gate first held the next start.
    held_since: Option<Instant>,
    /// What held it at the last check, one line per blocker.
    last_report: Vec<String>,
    /// Why the next drains wait, in words that do not change with every replica count (it is
    /// the held drains' reason, logged when it changes).
    held_reason: String,
    /// The blockers named in the last "waiting for the cluster to settle" line, and when.
    logged: BTreeSet<String>,
    logged_at: Option<Instant>,
    armed: bool,
    /// The last read of pending pods: what held the gate then, and until when it stands.
    pending: Option<PendingRead>,
    /// The last check could not read the cluster: hold, whatever --gate-timeout says (fail
    /// closed).
    failing: bool,
    /// When a check last held the start on what it read (not on a failed read): the circuit
    /// breaker saw that hold.
    held_seen_at: Option<Instant>,
}

impl Gate {
    /// The gate of a new leader: armed, so the first start still waits for the workload index
    /// and for pending pods.
    pub(super) fn new_term() -> Gate {
        let mut gate = Gate::default();
        gate.arm([]);
        gate
    }

    /// The gate of this replica's next term: a new one, still waiting for the workloads this
    /// replica's own drains evicted. A leader hands the lease back when no node has needed it
    /// for a while (`--release-lease-after`) and takes it again at the next taint, which with
    /// a selector tainting one node per run is before every drain: the workloads the last
    /// drain evicted must still be Ready again before the next one starts.
    pub(super) fn next_term(self) -> Gate {
        let mut gate = Gate::new_term();
        gate.arm(self.owners);
        gate
    }

    /// A drain finished: the workloads it evicted join those the next start waits for.
    pub(super) fn arm(&mut self, owners: impl IntoIterator<Item = WorkloadRef>) {
        self.owners.extend(owners);
        self.armed = true;
    }

    /// Whether a start must pass the gate first.
    pub(super) fn armed(&self) -> bool {
        self.armed
    }

    /// How long the gate has held the next start and what holds it, one blocker after the
    /// other: for the circuit breaker. `None` while it is open, or while it cannot read the
    /// cluster (an API that does not answer says nothing about the workloads).
    pub(super) fn holding(&self) -> Option<(Duration, String)> {
        let since = self.held_since.filter(|_| !self.failing)?;
        Some((since.elapsed(), self.last_report.join("; ")))
    }

    /// The halt was lifted: what holds the gate counts from now, for the breaker and for
    /// `--gate-timeout` alike.
    pub(super) fn restart_clock(&mut self) {
        if self.held_since.is_some() {
            self.held_since = Some(Instant::now());
        }
    }

    /// Whether a change to the workloads `changed` may open the gate while it holds.
    pub(super) fn waits_on(&self, changed: &[WorkloadKey], workloads: &WorkloadIndex) -> bool {
        self.held_since.is_some() && concerns(&self.owners, changed, workloads)
    }

    /// Checks the gate before a start; `Err` says why the start waits. `elapsed` (since the
    /// last pass) counts towards the gate-blocked-seconds metric while it holds. An open gate,
    /// or one held past `--gate-timeout` without failing, is reset for the next drains.
    pub(super) async fn check(
        &mut self,
        reads: &GateReads,
        workloads: &WorkloadIndex,
        elapsed: Duration,
    ) -> Result<(), String> {
        let checked = gate_blockers(reads, self, workloads).await;
        if let Ok(blockers) = &checked
            && blockers.is_empty()
        {
            // Open. Workloads still short within what running drains evicted stay, and the
            // gate stays armed for them: the next start judges them again.
            // A read of pending pods that found none past its grace stands for the next starts
            // too.
            let still_short = std::mem::take(&mut self.owners);
            *self = Gate {
                pending: self.pending.take(),
                ..Gate::default()
            };
            if !still_short.is_empty() {
                self.arm(still_short);
            }
            return Ok(());
        }
        let since = *self.held_since.get_or_insert_with(Instant::now);
        reads
            .metrics
            .gate_blocked_seconds
            .inc_by(elapsed.as_secs_f64());
        match checked {
            Ok(blockers) => {
                self.failing = false;
                self.last_report = blockers.iter().map(GateBlocker::to_string).collect();
                self.held_reason = held_reason(&blockers);
                // A line when something new holds it, not at every replica that turns Ready;
                // counts that only change are repeated at most every GATE_LOG_INTERVAL.
                let subjects: BTreeSet<String> =
                    blockers.iter().map(GateBlocker::subject).collect();
                let due = self
                    .logged_at
                    .is_none_or(|at| at.elapsed() >= GATE_LOG_INTERVAL);
                if !subjects.is_subset(&self.logged) || due {
                    tracing::info!(blockers = ?self.last_report, "waiting for the cluster to settle before the next drain");
                    self.logged = subjects;
                    self.logged_at = Some(Instant::now());
                }
            }
            Err(e) => {
                let report = vec![format!("gate check failed: {e}")];
                if !self.failing || report != self.last_report {
                    tracing::warn!(error = %e, "could not check the gate; holding the next drain");
                }
                self.failing = true;
                self.held_reason = report[0].clone();
                self.last_report = report;
            }
        }
        let now = Instant::now();
        if !self.failing && times_out(since, self.held_seen_at, reads.timeout, now) {
            tracing::warn!(blockers = ?self.last_report, "the gate held longer than --gate-timeout; starting the next node anyway");
            *self = Gate::default();
            return Ok(());
        }
        if !self.failing {
            self.held_seen_at = Some(now);
        }
        Err(self.held_reason.clone())
    }
}

/// How recent the last hold the breaker saw must be for `--gate-timeout` to end the hold: the
/// loop checks the gate every second while a start waits on it.
const SEEN_WITHIN: Duration = Duration::from_secs(5);

/// Whether a gate held since `since` times out now. The circuit breaker (`--halt-after`, which
/// must be shorter than `--gate-timeout`) judges a hold only from a check that held, so the
/// timeout waits for one: a check that comes after failed reads, or after a stretch without
/// checks (no start was proposed meanwhile), holds once more and lets the breaker see how long
/// the gate has held before the next may time out.
fn times_out(
    since: Instant,
    held_seen_at: Option<Instant>,
    timeout: Duration,
    now: Instant,
) -> bool {
    let seen_lately = held_seen_at.is_some_and(|at| now.duration_since(at) <= SEEN_WITHIN);
    seen_lately && now.duration_since(since) >= timeout
}

/// How often a held gate repeats its line when only the counts in it change.
const GATE_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// The held drains' reason for a gate held by `blockers`: which kinds of blocker, not their
/// counts, so that it changes only when the situation does.
fn held_reason(blockers: &[GateBlocker]) -> String {
    let workloads = blockers
        .iter()
        .any(|b| matches!(b, GateBlocker::WorkloadNotReady { .. }));
    let pending = blockers
        .iter()
        .any(|b| matches!(b, GateBlocker::PendingPod { .. }));
    let mut parts = Vec::new();
    if workloads {
        parts.push("workloads evicted by earlier drains are not Ready again");
    }
    if pending {
        parts.push("pods are unschedulable past --pending-grace");
    }
    parts.join("; ")
}

/// How long one read of pending pods that found a pod past its grace stands: they are not
/// watched (that would be a cluster-wide pod cache), so a gate held by one is re-read on the
/// tick. A read that found none stands until a pod could pass its grace
/// ([`crate::fleet::gate::pending_read_holds_until`]).
const PENDING_RECHECK: Duration = Duration::from_secs(1);

/// One read of pending pods: what held the gate, and until when that stands.
struct PendingRead {
    blockers: Vec<GateBlocker>,
    /// On the monotonic clock, so that a step of the wall clock cannot stretch it.
    until: Instant,
}

/// Why the gate cannot tell whether the cluster has settled; it holds (fails closed) meanwhile.
#[derive(Debug, thiserror::Error)]
enum GateUnknown {
    #[error("the workload index cannot be trusted: {0}")]
    Index(IndexUnusable),
    #[error("cannot read pending pods: {0}")]
    ReadPending(watcher::Error),
    #[error(
        "cannot read pending pods: the API server ended the watch before its last pod (a time limit of {PENDING_READ_TIMEOUT_SECS} s, or a dropped connection); reading them again at the next pass"
    )]
    ReadPendingEnded,
}

/// What holds the gate now. Workloads come from the watched index, and those found Ready again
/// (or gone) leave `gate.owners`; pending pods are read only once no workload holds it, and a
/// read is reused while it stands ([`PendingRead`]): a rotation of many nodes, each start
/// passing the gate, reads them about once per `--pending-grace`, not at every start. An index
/// that cannot be trusted is an error, so the gate fails closed.
async fn gate_blockers(
    reads: &GateReads,
    gate: &mut Gate,
    workloads: &WorkloadIndex,
) -> Result<Vec<GateBlocker>, GateUnknown> {
    if let Some(why) = workloads.unusable(Instant::now()) {
        return Err(GateUnknown::Index(why));
    }
    let blockers = workload_blockers(
        &mut gate.owners,
        workloads,
        &reads.published.in_flight.totals(),
    );
    if !blockers.is_empty() {
        return Ok(blockers);
    }
    if let Some(read) = &gate.pending
        && Instant::now() < read.until
    {
        return Ok(read.blockers.clone());
    }
    // A read stands from when it began: a pod that passes its grace during a long read is
    // found by the next one.
    let (now, began) = (Timestamp::now(), Instant::now());
    let tally = read_pending(reads, now).await?;
    let holds_until = tally.holds_until();
    let blockers = tally.into_blockers();
    let stands_for = if blockers.is_empty() {
        Duration::try_from(holds_until.duration_since(now)).unwrap_or_default()
    } else {
        PENDING_RECHECK
    };
    let until = began + stands_for;
    gate.pending = Some(PendingRead {
        blockers: blockers.clone(),
        until,
    });
    Ok(blockers)
}

/// How long the gate's watch of pending pods may take to bring them all (`timeoutSeconds`, also
/// its idle limit): longer than kube's 290 s default, since about 96,000 pods took 114 s to come
/// from a CPU-starved API server. A read that runs out fails, and the gate holds.
const PENDING_READ_TIMEOUT_SECS: u32 = 900;

/// Reads the pending pods no node holds, one at a time into a [`PendingTally`]: a watch that
/// begins with them (`sendInitialEvents`, the WatchList feature) and is dropped once they are
/// all in, so that however many there are, the drainer holds one at a time. Both the watch and
/// the list come from the API server's watch cache: a pod holds the gate only after
/// --pending-grace, which a read a moment old cannot change, while a consistent read waits for
/// the cache to catch up (and before Kubernetes 1.31 reads every pod of the cluster from etcd to
/// filter by phase). Where the API server refuses such a watch, one list is read instead, from
/// then on.
///
/// Only pods no node holds are asked for (`spec.nodeName=`): a bound pod never holds the gate,
/// and while many nodes start their pods the bound ones still Pending can be many thousands.
/// On a 5,000-node control plane whose pods were still being scheduled, one list of Pending pods
/// ran 60 s, failed, and grew the drainer by 160 MiB while it was read.
async fn read_pending<'a>(
    reads: &'a GateReads,
    listed_at: Timestamp,
) -> Result<PendingTally<'a>, GateUnknown> {
    let pods: Api<Pod> = Api::all(reads.client.clone());
    let config = watcher::Config::default()
        .fields("status.phase=Pending,spec.nodeName=")
        .timeout(PENDING_READ_TIMEOUT_SECS);
    loop {
        let streaming = reads.streaming.load(Ordering::Relaxed);
        let config = from_watch_cache(config.clone(), streaming);
        let mut tally = PendingTally::new(&reads.cfg, listed_at);
        let mut events = watcher(pods.clone(), config).boxed();
        let mut began = false;
        loop {
            match events.next().await {
                // A second beginning: the watch ended before its last pod (its time limit, a
                // dropped connection) and the watcher starts over; what was read is not kept.
                Some(Ok(watcher::Event::Init)) if began => {
                    return Err(GateUnknown::ReadPendingEnded);
                }
                Some(Ok(watcher::Event::Init)) => began = true,
                Some(Ok(watcher::Event::InitApply(pod))) => tally.add(&pod),
                Some(Ok(watcher::Event::InitDone)) => return Ok(tally),
                Some(Ok(_)) => {}
                Some(Err(e)) if streaming && refuses_streaming(&e) => {
                    if reads.streaming.swap(false, Ordering::Relaxed) {
                        tracing::info!(
                            "the API server does not stream a watch's initial pods (the WatchList feature is off); the gate lists the pending pods instead"
                        );
                    }
                    break;
                }
                Some(Err(e)) => return Err(GateUnknown::ReadPending(e)),
                None => return Err(GateUnknown::ReadPendingEnded),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_times_out_only_right_after_a_hold_the_breaker_saw() {
        let since = Instant::now();
        let timeout = Duration::from_secs(900);
        let at = |secs: u64| since + Duration::from_secs(secs);
        // Held and seen a second ago, past the timeout: it times out.
        assert!(times_out(since, Some(at(900)), timeout, at(901)));
        // Not before the timeout.
        assert!(!times_out(since, Some(at(898)), timeout, at(899)));
        // After failed reads only (no hold seen), or after 20 minutes without a check: it
        // holds once more, so the breaker judges the hold first.
        assert!(!times_out(since, None, timeout, at(1200)));
        assert!(!times_out(since, Some(at(1)), timeout, at(1200)));
    }

    #[test]
    fn the_next_term_still_waits_for_what_this_replicas_drains_evicted() {
        let web = WorkloadRef {
            kind: "ReplicaSet".into(),
            namespace: "shop".into(),
            name: "web-7d9f".into(),
        };
        let mut gate = Gate::new_term();
        gate.arm([web.clone()]);
        gate.held_since = Some(Instant::now());
        gate.failing = true;
        let next = gate.next_term();
        assert!(next.armed());
        assert_eq!(next.owners, BTreeSet::from([web]));
        // The rest starts afresh, as any new term's.
        assert!(next.held_since.is_none() && !next.failing);
        assert!(Gate::new_term().owners.is_empty());
    }

    #[test]
    fn the_held_reason_names_the_kinds_of_blocker_not_their_counts() {
        let workload = |ready| GateBlocker::WorkloadNotReady {
            workload: "Deployment shop/web".into(),
            ready,
            wanted: 3,
            in_flight: 0,
        };
        let pod = GateBlocker::PendingPod {
            pod: "shop/web-1".into(),
            for_secs: 200,
            reason: None,
        };
        assert_eq!(held_reason(&[workload(1)]), held_reason(&[workload(2)]));
        assert_eq!(
            held_reason(&[workload(1), pod.clone()]),
            "workloads evicted by earlier drains are not Ready again; pods are unschedulable past --pending-grace"
        );
        assert_eq!(
            held_reason(&[pod]),
            "pods are unschedulable past --pending-grace"
        );
    }
}
