//! The per-node drain record, kept in the node's `rotor.dev/...` annotations so that a restarted or
//! failed-over drainer resumes where it was. [`DrainRecord::from_annotations`] reads it tolerantly
//! (anyone can edit a node), [`apply`] is the pure state machine, and
//! [`DrainRecord::annotation_patch`] writes back only what changed, as a JSON merge patch.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use rotor_core::contract::{
    ATTEMPTS_ANNOTATION, BLOCKER_ANNOTATION, CORDONED_BY_ROTOR_ANNOTATION, DEADLINE_ANNOTATION,
    DRAINED_AT_ANNOTATION, DrainPhase, LAST_ERROR_ANNOTATION, PHASE_ANNOTATION,
    STARTED_AT_ANNOTATION, find_drain_taint, format_timestamp, parse_timestamp,
};
use serde_json::{Map, Value, json};

/// What the drainer knows about one node's drain. Timestamps are whole seconds (what the
/// annotations can hold), so a record survives a write and a read unchanged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainRecord {
    /// `None`: the drainer has not started on this node (or the annotation is unreadable).
    pub phase: Option<DrainPhase>,
    /// When the current attempt started.
    pub started_at: Option<Timestamp>,
    /// While draining: when the current attempt gives up. Once [`DrainPhase::Failed`]: when it
    /// failed (the back-off before a retry counts from here; see [`apply`]).
    pub deadline: Option<Timestamp>,
    /// Attempts started so far (the first drain is attempt 1).
    pub attempts: u32,
    /// The last error, kept across retries until the node drains.
    pub last_error: Option<String>,
    /// What the node is waiting on, while [`DrainPhase::Blocked`].
    pub blocker: Option<String>,
    /// Rotor cordoned the node, so rotor may uncordon it.
    pub cordoned_by_rotor: bool,
    /// When the node was found drained.
    pub drained_at: Option<Timestamp>,
}

/// Things that happen to a node's drain. Durations are `std::time::Duration`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The fleet chose this node (or the drainer found it again after a restart).
    Start {
        now: Timestamp,
        drain_timeout: Duration,
    },
    /// The node is cordoned; `by_rotor` when rotor did it (false when it already was).
    Cordoned { by_rotor: bool },
    /// Evictions are under way (again).
    Evicting,
    /// Waiting on something only a person (or a budget) can resolve; the text says what.
    Blocked(String),
    /// No evictable pod is left.
    Drained { now: Timestamp },
    /// The attempt gave up (deadline passed, or an error no retry within it can fix).
    Failed { error: String, now: Timestamp },
    /// The drain was set aside while `blocker` holds it (park-after); rotor's cordon is undone
    /// in the same write.
    Parked { blocker: String, now: Timestamp },
    /// A new attempt after a failure, once its back-off has passed.
    Retry {
        now: Timestamp,
        drain_timeout: Duration,
    },
}

impl DrainRecord {
    /// Reads the record from a node's annotations. Never fails: a value that does not parse (an
    /// unknown phase, a bad timestamp, a negative attempt count) reads as absent (`None`, 0,
    /// false), and an empty text reads as `None`. Only `"true"` marks `cordoned_by_rotor`.
    pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> Self {
        let get = |key: &str| {
            annotations
                .and_then(|a| a.get(key))
                .map(String::as_str)
                .filter(|value| !value.is_empty())
        };
        let timestamp = |key: &str| {
            get(key)
                .and_then(|v| parse_timestamp(v).ok())
                .map(whole_seconds)
        };
        DrainRecord {
            phase: get(PHASE_ANNOTATION).and_then(|v| v.parse().ok()),
            started_at: timestamp(STARTED_AT_ANNOTATION),
            deadline: timestamp(DEADLINE_ANNOTATION),
            attempts: get(ATTEMPTS_ANNOTATION)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            last_error: get(LAST_ERROR_ANNOTATION).map(str::to_owned),
            blocker: get(BLOCKER_ANNOTATION).map(str::to_owned),
            cordoned_by_rotor: get(CORDONED_BY_ROTOR_ANNOTATION) == Some("true"),
            drained_at: timestamp(DRAINED_AT_ANNOTATION),
        }
    }

    /// The empty record: what a node has when the drainer never touched it, and what the drainer
    /// writes when the taint disappears (after uncordoning, if it had cordoned).
    pub fn cleared() -> Self {
        DrainRecord::default()
    }

    /// The record as annotation values: every drainer state annotation, `None` where the
    /// annotation should be absent (no value, zero attempts, not cordoned by rotor).
    pub fn to_annotations(&self) -> BTreeMap<&'static str, Option<String>> {
        let ts = |t: Option<Timestamp>| t.map(format_timestamp);
        BTreeMap::from([
            (PHASE_ANNOTATION, self.phase.map(|p| p.slug().to_owned())),
            (STARTED_AT_ANNOTATION, ts(self.started_at)),
            (DEADLINE_ANNOTATION, ts(self.deadline)),
            (
                ATTEMPTS_ANNOTATION,
                (self.attempts > 0).then(|| self.attempts.to_string()),
            ),
            (LAST_ERROR_ANNOTATION, self.last_error.clone()),
            (BLOCKER_ANNOTATION, self.blocker.clone()),
            (
                CORDONED_BY_ROTOR_ANNOTATION,
                self.cordoned_by_rotor.then(|| "true".to_owned()),
            ),
            (DRAINED_AT_ANNOTATION, ts(self.drained_at)),
        ])
    }

    /// A JSON merge patch `{"metadata":{"annotations":{...}}}` turning `previous` into `self`:
    /// changed keys get their new value, keys to remove get `null`, unchanged keys are left out.
    /// The annotations object is empty when nothing changed ([`changes_nothing`]).
    pub fn annotation_patch(&self, previous: &DrainRecord) -> Value {
        let old = previous.to_annotations();
        self.patch_where(|key, value| old.get(key) != Some(value))
    }

    /// Like [`DrainRecord::annotation_patch`], but against the node's raw annotations, so that
    /// values nobody can read (garbage someone wrote by hand) are overwritten or removed too.
    pub fn annotation_patch_for(&self, current: Option<&BTreeMap<String, String>>) -> Value {
        self.patch_where(|key, value| current.and_then(|a| a.get(key)) != value.as_ref())
    }

    /// The merge patch of the annotations for which `changed` holds.
    fn patch_where(&self, changed: impl Fn(&str, &Option<String>) -> bool) -> Value {
        let changes = self
            .to_annotations()
            .into_iter()
            .filter(|(key, value)| changed(key, value))
            .map(|(key, value)| (key.to_owned(), value.map_or(Value::Null, Value::String)))
            .collect::<Map<_, _>>();
        json!({"metadata": {"annotations": changes}})
    }

    /// True while a drain attempt is under way: queued, cordoned, evicting or blocked.
    pub fn is_active(&self) -> bool {
        matches!(
            self.phase,
            Some(
                DrainPhase::Queued
                    | DrainPhase::Cordoned
                    | DrainPhase::Evicting
                    | DrainPhase::Blocked
            )
        )
    }

    /// True when a `Start` at `now` resumes this record rather than beginning a new attempt:
    /// it is mid-drain with a deadline, and its times are ones rotor can have written.
    pub fn resumes(&self, now: Timestamp, drain_timeout: Duration) -> bool {
        self.is_active()
            && self.deadline.is_some()
            && self.implausible_times(now, drain_timeout).is_empty()
    }

    /// When a failed record may be retried: its failure time (`deadline`, else `started_at`)
    /// plus `backoff`. `None` when the record is not failed or has no time to count from (then
    /// it may be retried at once).
    pub fn retry_at(&self, backoff: Duration) -> Option<Timestamp> {
        if !self.waits_to_retry() {
            return None;
        }
        let failed_at = self.failed_at()?;
        Some(add(failed_at, backoff))
    }

    /// Failed or parked: the deadline field holds when, and a retry waits for a back-off.
    pub fn waits_to_retry(&self) -> bool {
        matches!(self.phase, Some(DrainPhase::Failed | DrainPhase::Parked))
    }

    /// When a failed record failed: its `deadline`, else its `started_at`.
    fn failed_at(&self) -> Option<Timestamp> {
        self.deadline.or(self.started_at)
    }

    /// While a failed record is still backing off at `now`: when it may be retried. `None` when
    /// it may be retried now, or is not failed. The fleet decision and a drain task's own check
    /// ([`begin_check`]) both ask this. A failure time later than `now` (beyond
    /// [`CLOCK_SKEW`]) cannot be rotor's and counts as no time: retried now, not in year 9999.
    pub fn backing_off_until(
        &self,
        now: Timestamp,
        retry_backoff: impl Fn(u32) -> Duration,
    ) -> Option<Timestamp> {
        if self.failed_at().is_some_and(|at| at > add(now, CLOCK_SKEW)) {
            return None;
        }
        self.retry_at(retry_backoff(self.attempts))
            .filter(|retry_at| now < *retry_at)
    }

    /// The record's times that rotor cannot have written, as of `now` with `drain_timeout`: a
    /// start or a drained time in the future, a deadline later than `now` plus the longer of
    /// `drain_timeout` and [`LONGEST_RECORDED_TIMEOUT`] (or, once failed, a failure time in
    /// the future), each beyond [`CLOCK_SKEW`]. Someone wrote them; rotor does not act on them
    /// (see [`apply`] and [`DrainRecord::backing_off_until`]).
    pub fn implausible_times(&self, now: Timestamp, drain_timeout: Duration) -> Vec<&'static str> {
        let soon = add(now, CLOCK_SKEW);
        let latest_deadline = if self.waits_to_retry() {
            soon
        } else {
            add(soon, drain_timeout.max(LONGEST_RECORDED_TIMEOUT))
        };
        [
            (STARTED_AT_ANNOTATION, self.started_at, soon),
            (DEADLINE_ANNOTATION, self.deadline, latest_deadline),
            (DRAINED_AT_ANNOTATION, self.drained_at, soon),
        ]
        .into_iter()
        .filter(|(_, at, latest)| at.is_some_and(|at| at > *latest))
        .map(|(key, _, _)| key)
        .collect()
    }
}

/// How far another replica's clock may run ahead of this one's before a time it wrote counts as
/// in the future.
pub const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// How far ahead of now a drain's deadline may lie and still be rotor's, whatever this
/// replica's timeout: the drain may have started under a longer `--drain-timeout` (or pool
/// timeout) before a roll lowered it. Such a drain is resumed, its deadline shortened to the
/// timeout in force ([`apply`]), not started over as if someone else had written it.
pub const LONGEST_RECORDED_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// A drain record annotation whose value rotor does not use: one that does not parse, or a time
/// rotor cannot have written. [`DrainRecord::from_annotations`] reads the first kind as absent;
/// [`apply`] and [`DrainRecord::backing_off_until`] disregard the second.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Misreading {
    pub annotation: &'static str,
    /// The value, shortened for a log line or an Event (see [`shorten`]).
    pub value: String,
    /// What the value should have been.
    pub expected: &'static str,
}

impl std::fmt::Display for Misreading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={} is not {}",
            self.annotation, self.value, self.expected
        )
    }
}

/// `value` quoted, cut to its first 40 characters (and its length said) when longer.
pub fn shorten(value: &str) -> String {
    const KEEP: usize = 40;
    match value.char_indices().nth(KEEP) {
        None => format!("{value:?}"),
        Some((end, _)) => format!("{:?}... ({} bytes)", &value[..end], value.len()),
    }
}

/// What a phase annotation must hold: every [`DrainPhase`]'s slug (a test holds it to
/// `DrainPhase::ALL`).
const PHASE_EXPECTED: &str =
    "a drain phase (queued, cordoned, evicting, drained, failed, blocked, parked)";

/// Every drain record annotation on a node that rotor does not use, as of `now` with
/// `drain_timeout`: values that do not parse (read as absent), then times rotor cannot have
/// written ([`DrainRecord::implausible_times`]). Empty when the record is fine. Pure, for the
/// drain task to say once, when a drain starts, what it disregarded.
pub fn misreadings(
    annotations: Option<&BTreeMap<String, String>>,
    now: Timestamp,
    drain_timeout: Duration,
) -> Vec<Misreading> {
    const TIME: &str = "an RFC 3339 time rotor can read (e.g. 2025-01-02T03:04:05Z)";
    let mut found = Vec::new();
    let mut check = |key: &'static str, expected: &'static str, ok: &dyn Fn(&str) -> bool| {
        if let Some(value) = annotations.and_then(|a| a.get(key))
            && !value.is_empty()
            && !ok(value)
        {
            found.push(Misreading {
                annotation: key,
                value: shorten(value),
                expected,
            });
        }
    };
    check(PHASE_ANNOTATION, PHASE_EXPECTED, &|v| {
        v.parse::<DrainPhase>().is_ok()
    });
    for key in [
        STARTED_AT_ANNOTATION,
        DEADLINE_ANNOTATION,
        DRAINED_AT_ANNOTATION,
    ] {
        check(key, TIME, &|v| parse_timestamp(v).is_ok());
    }
    check(
        ATTEMPTS_ANNOTATION,
        "a count of attempts (0 to 4294967295)",
        &|v| v.parse::<u32>().is_ok(),
    );
    check(CORDONED_BY_ROTOR_ANNOTATION, "\"true\"", &|v| v == "true");
    let record = DrainRecord::from_annotations(annotations);
    for key in record.implausible_times(now, drain_timeout) {
        let value = annotations
            .and_then(|a| a.get(key))
            .map_or_else(String::new, |v| shorten(v));
        // A failed or parked record's deadline is its retry time, not a drain's deadline.
        let retrying = matches!(record.phase, Some(DrainPhase::Failed | DrainPhase::Parked));
        let expected = if key == DEADLINE_ANNOTATION && !retrying {
            "a deadline rotor can have set (at most a week, or --drain-timeout if longer, from now)"
        } else {
            "a time in the past"
        };
        found.push(Misreading {
            annotation: key,
            value,
            expected,
        });
    }
    found
}

/// `timestamp` without its fraction of a second.
fn whole_seconds(timestamp: Timestamp) -> Timestamp {
    Timestamp::from_second(timestamp.as_second()).unwrap_or(timestamp)
}

/// `timestamp + duration`, saturating at the end of time.
fn add(timestamp: Timestamp, duration: Duration) -> Timestamp {
    timestamp.checked_add(duration).unwrap_or(Timestamp::MAX)
}

/// The record after `transition`. Pure: the same record and transition always give the same
/// result.
///
/// - `Start` begins attempt `attempts + 1`: phase `Queued`, `started_at = now`, `deadline = now +
///   drain_timeout`, blocker and `drained_at` cleared (the last error stays until the node
///   drains). **Resume:** on a record already mid-drain (queued, cordoned, evicting or blocked)
///   that has a deadline, `Start` keeps the attempt, its start and its deadline, so a restarted
///   or failed-over drainer goes on where it was; only a deadline later than its start plus
///   the timeout in force is brought forward to that (the timeout was lowered since). A record
///   whose times rotor cannot have written ([`DrainRecord::implausible_times`]: a deadline
///   more than a week or `drain_timeout` ahead, a start in the future) is not resumed but starts a new attempt, so a hand-written year 9999 never
///   switches the drain timeout off. A `Drained` record is also left as it is: it stays
///   drained while the taint is there. A `Failed` record starts a new attempt (whoever calls
///   `Start` has checked the back-off, as [`crate::fleet::starts::choose_nodes_to_start`] does).
/// - `Retry` is `Start` after a failure: a new attempt with a new deadline (and, like `Start`, a
///   no-op on a record that is mid-drain or drained).
/// - `Cordoned` sets phase `Cordoned`; `cordoned_by_rotor` is sticky: a later
///   `Cordoned { by_rotor: false }` (rotor finding its own cordon on resume) does not clear it.
/// - `Evicting` sets phase `Evicting` and clears the blocker.
/// - `Blocked` sets phase `Blocked` and the blocker.
/// - `Drained` sets phase `Drained` and `drained_at`, clears blocker and last error.
/// - `Failed` sets phase `Failed` and the last error, keeps the attempt count, and sets
///   `deadline = now`: for a failed record the deadline field holds when it failed, which is
///   where the retry back-off counts from.
/// - `Parked` sets phase `Parked`, the blocker and `deadline = now` (where the back-off counts
///   from, as for `Failed`), and clears `cordoned_by_rotor`: the same write undoes the cordon.
pub fn apply(record: &DrainRecord, transition: Transition) -> DrainRecord {
    let mut next = record.clone();
    match transition {
        Transition::Start { now, drain_timeout } | Transition::Retry { now, drain_timeout } => {
            if record.resumes(now, drain_timeout) {
                // Rule: a resume keeps its attempt's deadline, shortened to what the timeout in
                // force allows from its start (a lowered timeout holds for drains under way
                // too), never lengthened.
                let limit = whole_seconds(add(record.started_at.unwrap_or(now), drain_timeout));
                next.deadline = record.deadline.map(|deadline| deadline.min(limit));
                return next;
            }
            if record.phase == Some(DrainPhase::Drained) {
                return next;
            }
            let now = whole_seconds(now);
            next.phase = Some(DrainPhase::Queued);
            next.started_at = Some(now);
            next.deadline = Some(whole_seconds(add(now, drain_timeout)));
            next.attempts = record.attempts.saturating_add(1);
            next.blocker = None;
            next.drained_at = None;
        }
        Transition::Cordoned { by_rotor } => {
            next.phase = Some(DrainPhase::Cordoned);
            next.cordoned_by_rotor |= by_rotor;
        }
        Transition::Evicting => {
            next.phase = Some(DrainPhase::Evicting);
            next.blocker = None;
        }
        Transition::Blocked(blocker) => {
            next.phase = Some(DrainPhase::Blocked);
            next.blocker = Some(blocker);
        }
        Transition::Drained { now } => {
            next.phase = Some(DrainPhase::Drained);
            next.drained_at = Some(whole_seconds(now));
            next.blocker = None;
            next.last_error = None;
        }
        Transition::Failed { error, now } => {
            next.phase = Some(DrainPhase::Failed);
            next.last_error = Some(error);
            next.deadline = Some(whole_seconds(now));
        }
        Transition::Parked { blocker, now } => {
            next.phase = Some(DrainPhase::Parked);
            next.blocker = Some(blocker);
            next.deadline = Some(whole_seconds(now));
            next.cordoned_by_rotor = false;
        }
    }
    next
}

/// Why a drain task was spawned: to resume a drain the node records as under way, or to start
/// one the fleet decision chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    Resume,
    Start,
}

/// Whether a drain task should go ahead with the record it reads from the node when it begins;
/// `Some(why)` when it should stop at once without writing anything.
///
/// The controller decides from its watch cache, which can lag behind the node: a drain that just
/// finished still looks mid-drain there for a moment. Re-checking against the fresh read keeps a
/// drained node from being drained again and a failed one from skipping its back-off. A resume
/// goes ahead only on a record that is really mid-drain (otherwise it would bypass the fleet
/// limits); a start never re-drains a drained node and honours a failed node's back-off.
pub fn begin_check(
    intent: Intent,
    record: &DrainRecord,
    now: Timestamp,
    retry_backoff: impl Fn(u32) -> Duration,
) -> Option<&'static str> {
    if record.phase == Some(DrainPhase::Drained) {
        return Some("the node is already drained");
    }
    if record.backing_off_until(now, retry_backoff).is_some() {
        return Some("the node's last drain failed and its retry back-off has not passed");
    }
    if intent == Intent::Resume && !record.is_active() {
        return Some("the node records no drain under way");
    }
    None
}

/// [`begin_check`] on a node read again after a conflict on its start write, the drain taint
/// included: the node changed since the copy the drain began with, and may have lost its taint
/// or finished a drain meanwhile. `Some(why)` when nothing must be written.
pub fn still_due(intent: Intent, node: &Node, now: Timestamp) -> Option<&'static str> {
    if find_drain_taint(node).is_none() {
        return Some("the node's drain taint is gone");
    }
    let record = DrainRecord::from_annotations(node.metadata.annotations.as_ref());
    begin_check(intent, &record, now, retry_backoff)
}

/// Back-off before retrying a node that failed `attempts` times: 1 min, doubling per attempt,
/// capped at 30 min (attempts 0 and 1 both give 1 min).
pub fn retry_backoff(attempts: u32) -> Duration {
    const BASE: Duration = Duration::from_secs(60);
    const CAP: Duration = Duration::from_secs(30 * 60);
    let doublings = attempts.saturating_sub(1).min(16);
    BASE.saturating_mul(1 << doublings).min(CAP)
}

#[cfg(test)]
mod fuzz;

/// True when an annotation patch of [`DrainRecord`] changes no annotation: it need not be sent.
pub fn changes_nothing(patch: &Value) -> bool {
    patch["metadata"]["annotations"]
        .as_object()
        .is_some_and(Map::is_empty)
}

/// Whether the node is cordoned (`spec.unschedulable`), by anyone.
pub fn cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// The record after the start and the cordon on `node` as read, and the guarded merge patch
/// that writes both (`None` when the node already shows all of it).
pub fn start_write(
    node: &Node,
    started: &DrainRecord,
    then: Option<Transition>,
) -> (DrainRecord, Option<serde_json::Value>) {
    let cordoned = cordoned(node);
    // A cordon the node's own record says rotor placed stays rotor's: a start written again
    // after a conflict can find rotor's earlier start there (its answer lost, or another
    // replica's), and `started` was made from the record before it.
    let recorded = DrainRecord::from_annotations(node.metadata.annotations.as_ref());
    let mut next = apply(
        started,
        Transition::Cordoned {
            by_rotor: !cordoned || recorded.cordoned_by_rotor,
        },
    );
    if let Some(t) = then {
        next = apply(&next, t);
    }
    let mut patch = next.annotation_patch_for(node.metadata.annotations.as_ref());
    if cordoned && changes_nothing(&patch) {
        return (next, None);
    }
    patch["metadata"]["resourceVersion"] = json!(node.metadata.resource_version);
    if !cordoned {
        patch["spec"] = json!({"unschedulable": true});
    }
    (next, Some(patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn started() -> DrainRecord {
        apply(
            &DrainRecord::cleared(),
            Transition::Start {
                now: ts("2025-03-01T10:00:00.750Z"),
                drain_timeout: HOUR,
            },
        )
    }

    #[test]
    fn reads_a_full_record() {
        let a = annotations(&[
            ("rotor.dev/phase", "evicting"),
            ("rotor.dev/started-at", "2025-03-01T10:00:00Z"),
            ("rotor.dev/deadline", "2025-03-01T11:00:00Z"),
            ("rotor.dev/attempts", "2"),
            ("rotor.dev/last-error", "deadline passed with 1 pod left"),
            ("rotor.dev/cordoned-by-rotor", "true"),
            ("kubernetes.io/hostname", "node-1"),
        ]);
        let record = DrainRecord::from_annotations(Some(&a));
        assert_eq!(
            record,
            DrainRecord {
                phase: Some(DrainPhase::Evicting),
                started_at: Some(ts("2025-03-01T10:00:00Z")),
                deadline: Some(ts("2025-03-01T11:00:00Z")),
                attempts: 2,
                last_error: Some("deadline passed with 1 pod left".into()),
                blocker: None,
                cordoned_by_rotor: true,
                drained_at: None,
            }
        );
    }

    #[test]
    fn garbage_reads_as_absent() {
        let a = annotations(&[
            ("rotor.dev/phase", "Evicting"),
            ("rotor.dev/started-at", "yesterday"),
            ("rotor.dev/deadline", ""),
            ("rotor.dev/attempts", "-3"),
            ("rotor.dev/last-error", ""),
            ("rotor.dev/cordoned-by-rotor", "yes"),
            ("rotor.dev/drained-at", "2025-13-45T99:00:00Z"),
        ]);
        assert_eq!(
            DrainRecord::from_annotations(Some(&a)),
            DrainRecord::cleared()
        );
        assert_eq!(DrainRecord::from_annotations(None), DrainRecord::cleared());
        let huge = annotations(&[("rotor.dev/attempts", "99999999999999999999")]);
        assert_eq!(DrainRecord::from_annotations(Some(&huge)).attempts, 0);
    }

    #[test]
    fn the_phase_misreading_names_every_phase() {
        for phase in DrainPhase::ALL {
            assert!(PHASE_EXPECTED.contains(phase.slug()), "{phase}");
        }
    }

    #[test]
    fn misreadings_name_each_unusable_value_shortened() {
        let now = ts("2025-03-01T10:00:00Z");
        let huge = "x".repeat(200 * 1024);
        let a = annotations(&[
            ("rotor.dev/phase", huge.as_str()),
            ("rotor.dev/started-at", "12345"),
            ("rotor.dev/deadline", r#"{"at":"2025-03-01T11:00:00Z"}"#),
            ("rotor.dev/attempts", "-3"),
            ("rotor.dev/cordoned-by-rotor", "yes"),
            ("rotor.dev/drained-at", "9999-12-30T00:00:00Z"),
            ("rotor.dev/last-error", "12345"),
        ]);
        let found = misreadings(Some(&a), now, HOUR);
        let keys: Vec<&str> = found.iter().map(|m| m.annotation).collect();
        assert_eq!(
            keys,
            [
                "rotor.dev/phase",
                "rotor.dev/started-at",
                "rotor.dev/deadline",
                "rotor.dev/attempts",
                "rotor.dev/cordoned-by-rotor",
                "rotor.dev/drained-at",
            ]
        );
        let phase = found[0].to_string();
        assert!(phase.len() < 200, "{phase}");
        assert!(
            phase.contains("(204800 bytes)") && phase.contains("a drain phase"),
            "{phase}"
        );
        assert!(found[2].to_string().contains("RFC 3339"), "{}", found[2]);
        assert!(found[5].to_string().contains("in the past"), "{}", found[5]);
        // A record rotor wrote reads clean; free text is never misread.
        let written = started().to_annotations();
        let written: BTreeMap<String, String> = written
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_owned(), v?)))
            .collect();
        assert_eq!(misreadings(Some(&written), now, HOUR), []);
        assert_eq!(misreadings(None, now, HOUR), []);
    }

    #[test]
    fn times_rotor_cannot_have_written_are_not_acted_on() {
        let now = ts("2025-03-01T10:30:00Z");
        let start = Transition::Start {
            now,
            drain_timeout: HOUR,
        };
        // Mid-drain with a deadline in year 9999, or a start in the future: a new attempt with
        // a real deadline, not a resume that never times out.
        for (key, value) in [
            (DEADLINE_ANNOTATION, "9999-12-30T00:00:00Z"),
            (STARTED_AT_ANNOTATION, "9999-12-30T00:00:00Z"),
        ] {
            let mut record = apply(&started(), Transition::Evicting);
            let at = Some(ts(value));
            match key {
                DEADLINE_ANNOTATION => record.deadline = at,
                _ => record.started_at = at,
            }
            assert_eq!(record.implausible_times(now, HOUR), [key]);
            assert!(!record.resumes(now, HOUR));
            let next = apply(&record, start.clone());
            assert_eq!(next.phase, Some(DrainPhase::Queued));
            assert_eq!(next.attempts, 2);
            assert_eq!(next.deadline, Some(ts("2025-03-01T11:30:00Z")));
            assert!(next.implausible_times(now, HOUR).is_empty());
        }
        // A deadline up to a week ahead is rotor's: a drain started under a longer timeout
        // than this replica's is resumed, its deadline shortened to the timeout in force from
        // its start (10:00), not started over.
        let mut record = apply(&started(), Transition::Evicting);
        for deadline in ["2025-03-01T11:34:00Z", "2025-03-07T10:00:00Z"] {
            record.deadline = Some(ts(deadline));
            assert!(record.implausible_times(now, HOUR).is_empty(), "{deadline}");
            assert!(record.resumes(now, HOUR));
            let resumed = apply(&record, start.clone());
            assert_eq!(resumed.deadline, Some(ts("2025-03-01T11:00:00Z")));
            assert_eq!(
                (resumed.started_at, resumed.attempts),
                (record.started_at, record.attempts)
            );
        }
        // A timeout raised since does not lengthen the drain under way.
        record.deadline = Some(ts("2025-03-01T11:00:00Z"));
        let raised = Transition::Start {
            now,
            drain_timeout: 3 * HOUR,
        };
        assert_eq!(apply(&record, raised), record);
        // A deadline long past is taken as it is: the drain fails at once, then retries.
        record.deadline = Some(ts("1970-01-01T00:00:00Z"));
        assert!(record.resumes(now, HOUR));

        // Failed in year 9999: no back-off until then, a retry now.
        let failed = DrainRecord {
            phase: Some(DrainPhase::Failed),
            attempts: 1,
            deadline: Some(ts("9999-12-30T00:00:00Z")),
            ..DrainRecord::default()
        };
        assert_eq!(failed.backing_off_until(now, retry_backoff), None);
        assert_eq!(
            begin_check(Intent::Start, &failed, now, retry_backoff),
            None
        );
        assert_eq!(failed.implausible_times(now, HOUR), [DEADLINE_ANNOTATION]);
        // Failed a minute ahead of this clock (another replica's): within the skew, backs off.
        let skewed = DrainRecord {
            deadline: Some(ts("2025-03-01T10:31:00Z")),
            ..failed
        };
        assert_eq!(
            skewed.backing_off_until(now, retry_backoff),
            Some(ts("2025-03-01T10:32:00Z"))
        );
    }

    #[test]
    fn start_queues_a_new_attempt_with_a_deadline() {
        let record = started();
        assert_eq!(record.phase, Some(DrainPhase::Queued));
        assert_eq!(record.started_at, Some(ts("2025-03-01T10:00:00Z")));
        assert_eq!(record.deadline, Some(ts("2025-03-01T11:00:00Z")));
        assert_eq!(record.attempts, 1);
    }

    #[test]
    fn start_on_a_record_mid_drain_resumes_with_the_same_deadline() {
        let cordoned = apply(&started(), Transition::Cordoned { by_rotor: true });
        let blocked = apply(&cordoned, Transition::Blocked("pod shop/db-0 ...".into()));
        for record in [started(), cordoned, blocked] {
            let resumed = apply(
                &record,
                Transition::Start {
                    now: ts("2025-03-01T10:30:00Z"),
                    drain_timeout: HOUR,
                },
            );
            assert_eq!(resumed, record);
        }
    }

    #[test]
    fn start_mid_drain_without_a_deadline_starts_over() {
        let mut record = apply(&started(), Transition::Evicting);
        record.deadline = None;
        let restarted = apply(
            &record,
            Transition::Start {
                now: ts("2025-03-01T10:30:00Z"),
                drain_timeout: HOUR,
            },
        );
        assert_eq!(restarted.phase, Some(DrainPhase::Queued));
        assert_eq!(restarted.deadline, Some(ts("2025-03-01T11:30:00Z")));
        assert_eq!(restarted.attempts, 2);
    }

    #[test]
    fn cordon_mark_is_sticky() {
        let by_rotor = apply(&started(), Transition::Cordoned { by_rotor: true });
        assert!(by_rotor.cordoned_by_rotor);
        assert_eq!(by_rotor.phase, Some(DrainPhase::Cordoned));
        let again = apply(&by_rotor, Transition::Cordoned { by_rotor: false });
        assert!(again.cordoned_by_rotor);
        let by_someone = apply(&started(), Transition::Cordoned { by_rotor: false });
        assert!(!by_someone.cordoned_by_rotor);
    }

    #[test]
    fn blocked_then_evicting_clears_the_blocker() {
        let blocked = apply(
            &started(),
            Transition::Blocked("PodDisruptionBudget shop/web".into()),
        );
        assert_eq!(blocked.phase, Some(DrainPhase::Blocked));
        assert_eq!(
            blocked.blocker.as_deref(),
            Some("PodDisruptionBudget shop/web")
        );
        let evicting = apply(&blocked, Transition::Evicting);
        assert_eq!(evicting.phase, Some(DrainPhase::Evicting));
        assert_eq!(evicting.blocker, None);
    }

    #[test]
    fn parking_keeps_the_blocker_gives_up_the_cordon_and_backs_off_like_a_failure() {
        let cordoned = apply(&started(), Transition::Cordoned { by_rotor: true });
        let blocked = apply(
            &cordoned,
            Transition::Blocked("pod shop/db-0 opted out".into()),
        );
        let parked = apply(
            &blocked,
            Transition::Parked {
                blocker: "pod shop/db-0 opted out".into(),
                now: ts("2025-03-01T11:00:02Z"),
            },
        );
        assert_eq!(parked.phase, Some(DrainPhase::Parked));
        assert_eq!(parked.blocker.as_deref(), Some("pod shop/db-0 opted out"));
        assert!(!parked.cordoned_by_rotor && !parked.is_active());
        assert_eq!(
            parked.retry_at(retry_backoff(parked.attempts)),
            Some(ts("2025-03-01T11:01:02Z"))
        );
        // The retry is a new attempt.
        let retried = apply(
            &parked,
            Transition::Retry {
                now: ts("2025-03-01T11:02:00Z"),
                drain_timeout: Duration::from_secs(600),
            },
        );
        assert_eq!(
            (retried.phase, retried.attempts),
            (Some(DrainPhase::Queued), 2)
        );
        // Read back from the annotations it writes.
        let written: BTreeMap<String, String> = parked
            .to_annotations()
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?)))
            .collect();
        assert_eq!(DrainRecord::from_annotations(Some(&written)), parked);
    }

    #[test]
    fn failure_then_retry_makes_a_new_attempt() {
        let failed = apply(
            &apply(&started(), Transition::Evicting),
            Transition::Failed {
                error: "deadline passed".into(),
                now: ts("2025-03-01T11:00:02Z"),
            },
        );
        assert_eq!(failed.phase, Some(DrainPhase::Failed));
        assert_eq!(failed.attempts, 1);
        assert_eq!(failed.last_error.as_deref(), Some("deadline passed"));
        assert_eq!(failed.deadline, Some(ts("2025-03-01T11:00:02Z")));
        assert_eq!(
            failed.retry_at(retry_backoff(failed.attempts)),
            Some(ts("2025-03-01T11:01:02Z"))
        );

        let retried = apply(
            &failed,
            Transition::Retry {
                now: ts("2025-03-01T11:05:00Z"),
                drain_timeout: HOUR,
            },
        );
        assert_eq!(retried.phase, Some(DrainPhase::Queued));
        assert_eq!(retried.attempts, 2);
        assert_eq!(retried.started_at, Some(ts("2025-03-01T11:05:00Z")));
        assert_eq!(retried.deadline, Some(ts("2025-03-01T12:05:00Z")));
        assert_eq!(retried.last_error.as_deref(), Some("deadline passed"));
        assert_eq!(retried.retry_at(Duration::ZERO), None);
    }

    #[test]
    fn drained_clears_errors_and_stays_drained() {
        let mut record = apply(&started(), Transition::Blocked("x".into()));
        record.last_error = Some("earlier failure".into());
        let drained = apply(
            &record,
            Transition::Drained {
                now: ts("2025-03-01T10:20:00.5Z"),
            },
        );
        assert_eq!(drained.phase, Some(DrainPhase::Drained));
        assert_eq!(drained.drained_at, Some(ts("2025-03-01T10:20:00Z")));
        assert_eq!(drained.blocker, None);
        assert_eq!(drained.last_error, None);
        let start_again = apply(
            &drained,
            Transition::Start {
                now: ts("2025-03-01T12:00:00Z"),
                drain_timeout: HOUR,
            },
        );
        assert_eq!(start_again, drained);
    }

    #[test]
    fn patch_sets_changed_keys_and_removes_cleared_ones() {
        let before = apply(&started(), Transition::Blocked("pod shop/db-0".into()));
        assert_eq!(
            before.annotation_patch(&DrainRecord::cleared()),
            serde_json::json!({"metadata": {"annotations": {
                "rotor.dev/phase": "blocked",
                "rotor.dev/started-at": "2025-03-01T10:00:00Z",
                "rotor.dev/deadline": "2025-03-01T11:00:00Z",
                "rotor.dev/attempts": "1",
                "rotor.dev/blocker": "pod shop/db-0",
            }}})
        );
        let after = apply(&before, Transition::Evicting);
        assert_eq!(
            after.annotation_patch(&before),
            serde_json::json!({"metadata": {"annotations": {
                "rotor.dev/phase": "evicting",
                "rotor.dev/blocker": null,
            }}})
        );
        assert_eq!(
            after.annotation_patch(&after),
            serde_json::json!({"metadata": {"annotations": {}}})
        );
        assert!(changes_nothing(&after.annotation_patch(&after)));
        assert!(!changes_nothing(&after.annotation_patch(&before)));
    }

    #[test]
    fn cleared_patch_removes_every_state_annotation() {
        let record = apply(
            &apply(&started(), Transition::Cordoned { by_rotor: true }),
            Transition::Drained {
                now: ts("2025-03-01T10:20:00Z"),
            },
        );
        let patch = DrainRecord::cleared().annotation_patch(&record);
        let removed = patch["metadata"]["annotations"].as_object().unwrap();
        assert_eq!(removed.len(), 6, "{patch}");
        assert!(removed.values().all(Value::is_null));
        assert!(removed.contains_key(CORDONED_BY_ROTOR_ANNOTATION));
    }

    #[test]
    fn record_round_trips_through_annotations() {
        let record = apply(
            &apply(&started(), Transition::Cordoned { by_rotor: true }),
            Transition::Failed {
                error: "eviction of shop/web-1 failed: 500".into(),
                now: ts("2025-03-01T10:59:59.9Z"),
            },
        );
        let patch = record.annotation_patch(&DrainRecord::cleared());
        let written: BTreeMap<String, String> = patch["metadata"]["annotations"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect();
        assert_eq!(DrainRecord::from_annotations(Some(&written)), record);
    }

    #[test]
    fn raw_patch_also_removes_unreadable_values() {
        let current = annotations(&[
            ("rotor.dev/phase", "bogus"),
            ("rotor.dev/attempts", "1"),
            ("team", "payments"),
        ]);
        let record = DrainRecord {
            attempts: 1,
            ..DrainRecord::default()
        };
        assert_eq!(DrainRecord::from_annotations(Some(&current)), record);
        // Against the parsed record nothing differs; against the raw values the garbage goes.
        assert_eq!(
            record.annotation_patch(&record),
            serde_json::json!({"metadata": {"annotations": {}}})
        );
        assert_eq!(
            record.annotation_patch_for(Some(&current)),
            serde_json::json!({"metadata": {"annotations": {"rotor.dev/phase": null}}})
        );
    }

    #[test]
    fn backoff_doubles_up_to_thirty_minutes() {
        let minutes: Vec<u64> = (0..=8).map(|a| retry_backoff(a).as_secs() / 60).collect();
        assert_eq!(minutes, [1, 1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_backoff(u32::MAX), Duration::from_secs(1800));
    }

    #[test]
    fn begin_check_uses_the_fresh_record_not_the_cache() {
        let now: Timestamp = "2025-03-01T12:00:00Z".parse().unwrap();
        let at = |phase| DrainRecord {
            phase: Some(phase),
            attempts: 1,
            deadline: Some("2025-03-01T11:59:30Z".parse().unwrap()),
            ..DrainRecord::default()
        };
        let fresh = DrainRecord::default();
        // A start on an untouched node, or a resume of a drain under way, goes ahead.
        assert_eq!(begin_check(Intent::Start, &fresh, now, retry_backoff), None);
        for phase in [
            DrainPhase::Queued,
            DrainPhase::Cordoned,
            DrainPhase::Evicting,
            DrainPhase::Blocked,
        ] {
            assert_eq!(
                begin_check(Intent::Resume, &at(phase), now, retry_backoff),
                None,
                "{phase:?}"
            );
        }
        // A drained node is never drained again, whichever the intent.
        for intent in [Intent::Start, Intent::Resume] {
            assert!(begin_check(intent, &at(DrainPhase::Drained), now, retry_backoff).is_some());
        }
        // Failed 30 s ago with a 1 min back-off: neither a start nor a stale resume goes ahead.
        let failed = at(DrainPhase::Failed);
        assert!(begin_check(Intent::Start, &failed, now, retry_backoff).is_some());
        assert!(begin_check(Intent::Resume, &failed, now, retry_backoff).is_some());
        // After the back-off a start retries it; a resume still does not (it is not mid-drain).
        let later: Timestamp = "2025-03-01T12:01:00Z".parse().unwrap();
        assert_eq!(
            begin_check(Intent::Start, &failed, later, retry_backoff),
            None
        );
        assert!(begin_check(Intent::Resume, &failed, later, retry_backoff).is_some());
        assert!(begin_check(Intent::Resume, &fresh, now, retry_backoff).is_some());
    }

    #[test]
    fn a_node_read_again_is_due_only_with_its_taint_and_a_record_that_allows_the_start() {
        let now: Timestamp = "2025-03-01T12:00:00Z".parse().unwrap();
        let read = |taints: serde_json::Value, annotations: serde_json::Value| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "n1", "annotations": annotations},
                "spec": {"taints": taints}
            }))
            .unwrap()
        };
        let drain = json!([{"key": "rotor.dev/drain", "value": "ami", "effect": "NoSchedule"}]);
        let other = json!([{"key": "example.com/drain", "effect": "NoSchedule"}]);
        assert_eq!(
            still_due(Intent::Start, &read(drain.clone(), json!({})), now),
            None
        );
        assert_eq!(
            still_due(Intent::Start, &read(other, json!({})), now),
            Some("the node's drain taint is gone")
        );
        let drained =
            json!({"rotor.dev/phase": "drained", "rotor.dev/drained-at": "2025-03-01T11:59:00Z"});
        assert_eq!(
            still_due(Intent::Start, &read(drain, drained), now),
            Some("the node is already drained")
        );
    }

    fn node_read(unschedulable: bool, annotations: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "resourceVersion": "42", "annotations": annotations},
            "spec": {"unschedulable": unschedulable}
        }))
        .unwrap()
    }

    fn started_record() -> DrainRecord {
        apply(
            &DrainRecord::default(),
            Transition::Start {
                now: ts("2026-11-27T10:00:00Z"),
                drain_timeout: Duration::from_secs(3600),
            },
        )
    }

    #[test]
    fn the_start_and_the_cordon_go_in_one_guarded_write() {
        let node = node_read(false, json!({"rotor.dev/phase": "no-such-phase"}));
        let (next, patch) = start_write(&node, &started_record(), Some(Transition::Evicting));
        let patch = patch.expect("an uncordoned node is written");
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["spec"]["unschedulable"], true);
        let annotations = &patch["metadata"]["annotations"];
        assert_eq!(
            annotations["rotor.dev/phase"], "evicting",
            "garbage is overwritten"
        );
        assert_eq!(annotations["rotor.dev/cordoned-by-rotor"], "true");
        assert_eq!(annotations["rotor.dev/started-at"], "2026-11-27T10:00:00Z");
        assert_eq!(annotations["rotor.dev/deadline"], "2026-11-27T11:00:00Z");
        assert_eq!(next.phase, Some(DrainPhase::Evicting));
        assert!(next.cordoned_by_rotor);
    }

    #[test]
    fn someone_elses_cordon_is_recorded_as_not_rotors_and_left_alone() {
        let node = node_read(true, json!({}));
        let (next, patch) = start_write(&node, &started_record(), None);
        let patch = patch.expect("the start is still recorded");
        assert!(
            patch.get("spec").is_none(),
            "the cordon is not written again"
        );
        assert!(
            patch["metadata"]["annotations"]
                .get("rotor.dev/cordoned-by-rotor")
                .is_none()
        );
        assert_eq!(
            patch["metadata"]["annotations"]["rotor.dev/phase"],
            "cordoned"
        );
        assert!(!next.cordoned_by_rotor);
    }

    #[test]
    fn a_start_written_again_over_rotors_own_cordon_keeps_it_rotors() {
        // Seen in real_chaos: a start's write landed, the next one met a conflict, and the
        // re-read node, cordoned by that write, was taken for someone else's cordon; the
        // record lost its flag and the cordon outlived the drain taint.
        let node = node_read(true, json!({"rotor.dev/cordoned-by-rotor": "true"}));
        let (next, patch) = start_write(&node, &started_record(), None);
        assert!(next.cordoned_by_rotor);
        let patch = patch.expect("the start is still recorded");
        assert!(
            patch["metadata"]["annotations"]
                .get("rotor.dev/cordoned-by-rotor")
                .is_none(),
            "the flag on the node is not removed: {patch}"
        );
    }

    #[test]
    fn a_resumed_drain_that_shows_everything_already_writes_nothing() {
        let started = started_record();
        let on_node = apply(
            &apply(&started, Transition::Cordoned { by_rotor: true }),
            Transition::Evicting,
        );
        let annotations: serde_json::Map<String, serde_json::Value> = on_node
            .to_annotations()
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), json!(v))))
            .collect();
        let node = node_read(true, serde_json::Value::Object(annotations));
        let (next, patch) = start_write(&node, &on_node, Some(Transition::Evicting));
        assert_eq!(patch, None);
        assert_eq!(next, on_node);
    }
}
