//! The record formats pinned (issue 44): the golden records under `tests/cases/records/` hold
//! every shape rotor-drainer writes that a later drainer reads back (the node record, the
//! rotation record, surge placeholders, the rollout-restart stamp), as strings, each with what
//! the drainer must make of it when it starts over it (a restart, a failover, an upgrade).
//!
//! For the newest set (`vN/`, the highest N), today's writer must produce exactly the golden
//! strings, so a change of format fails here and asks for a new set. Every set, old ones
//! included, must still read into the same record and the same decision: a new format keeps
//! reading the old one (tests/cases/records/README.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rotor_apimachinery::apply_merge_patch;
use rotor_core::contract::{
    DO_NOT_DISRUPT_ANNOTATION, DRAIN_TAINT_KEY, DRAINER_STATE_ANNOTATIONS, DrainPhase, DrainReason,
    KARPENTER_DO_NOT_DISRUPT_ANNOTATION, TaintEffect, drain_taint,
};
use rotor_drainer::drain::budgets::BudgetKey;
use rotor_drainer::drain::pass::every_blocker;
use rotor_drainer::drain::pods::is_placeholder;
use rotor_drainer::drain::pods::{Blocker, PodRef};
use rotor_drainer::drain::restart::{
    Judgement, News, Next, Refusal, RolloutRestarts, judge, restart_patch,
};
use rotor_drainer::drain::surge::{
    Reservation, SurgeConfig, all_placeholders_selector, orphaned, placeholder_node,
    placeholder_selector, placeholder_sets,
};
use rotor_drainer::error::DrainError;
use rotor_drainer::fleet::held::HeldReason;
use rotor_drainer::fleet::starts::{
    FleetLimits, NodeView, StartBlock, choose_nodes_to_start, start_block,
};
use rotor_drainer::record::node::{
    DrainRecord, Intent, Transition, apply, begin_check, misreadings, retry_backoff, start_write,
};
use rotor_drainer::record::rotation::{
    Enforced, Halt, HaltState, HealthGateState, RecordRef, RotationView, halt_from_data,
    halt_to_data, resume_patch, waiting_to_data,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const NODE_RECORDS: &str = "node-records.json";
const ROTATION: &str = "rotation-configmap.json";
const SURGE: &str = "surge-placeholders.json";
const RESTART: &str = "restart-stamps.json";

fn records_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases/records")
}

/// Every set (`v1`, `v2`, ...), oldest first, and whether it is the newest (the one today's
/// writer must produce).
fn sets() -> Vec<(String, bool)> {
    let mut versions: Vec<u32> = std::fs::read_dir(records_dir())
        .expect("tests/cases/records/ exists")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_prefix('v')?.parse().ok()
        })
        .collect();
    versions.sort_unstable();
    assert!(!versions.is_empty(), "no tests/cases/records/vN/ set");
    let newest = *versions.last().unwrap();
    versions
        .into_iter()
        .map(|v| (format!("v{v}"), v == newest))
        .collect()
}

fn load<T: DeserializeOwned>(set: &str, file: &str) -> T {
    let path = records_dir().join(set).join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `check` on every case, then fails with every case that failed (by name), so that one
/// run shows the whole damage of a format change.
fn each<C>(what: &str, cases: &[C], name: impl Fn(&C) -> &str, check: impl Fn(&C)) {
    let mut failed = Vec::new();
    for case in cases {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(case)));
        if outcome.is_err() {
            failed.push(name(case).to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{what}: {} of {} case(s) failed: {}",
        failed.len(),
        cases.len(),
        failed.join(", ")
    );
    eprintln!("{what}: {} case(s) pass", cases.len());
}

#[test]
fn the_sets_hold_only_the_files_these_tests_read() {
    let known: BTreeSet<&str> = [NODE_RECORDS, ROTATION, SURGE, RESTART].into();
    assert!(records_dir().join("README.md").is_file());
    for (set, _) in sets() {
        let files: BTreeSet<String> = std::fs::read_dir(records_dir().join(&set))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let files: BTreeSet<&str> = files.iter().map(String::as_str).collect();
        assert_eq!(
            files, known,
            "{set}: a golden file no test reads, or one missing"
        );
    }
}

// --- The node record ----------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeFile {
    #[allow(dead_code)]
    about: String,
    annotation_keys: Vec<String>,
    #[allow(dead_code)]
    resume_settings: Value,
    cases: Vec<NodeCase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeCase {
    name: String,
    #[allow(dead_code)]
    shape: String,
    /// `None`: a shape today's drainer does not write, but reads.
    written_by: Option<Vec<Step>>,
    #[serde(default)]
    blockers: Vec<BlockerSpec>,
    last_error_from: Option<ErrorSpec>,
    annotations: BTreeMap<String, String>,
    record: RecordSpec,
    resumes: Vec<ResumePoint>,
}

/// A [`Transition`], as the golden files spell it; `cleared` is the clean-up's write.
#[derive(Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Step {
    Start {
        now: Timestamp,
        drain_timeout_s: u64,
    },
    Cordoned {
        by_rotor: bool,
    },
    Evicting,
    Blocked(String),
    Drained {
        now: Timestamp,
    },
    Failed {
        now: Timestamp,
        error: String,
    },
    Parked {
        now: Timestamp,
        blocker: String,
    },
    Retry {
        now: Timestamp,
        drain_timeout_s: u64,
    },
    Cleared,
}

impl Step {
    fn transition(self) -> Option<Transition> {
        let secs = Duration::from_secs;
        Some(match self {
            Step::Start {
                now,
                drain_timeout_s,
            } => Transition::Start {
                now,
                drain_timeout: secs(drain_timeout_s),
            },
            Step::Cordoned { by_rotor } => Transition::Cordoned { by_rotor },
            Step::Evicting => Transition::Evicting,
            Step::Blocked(blocker) => Transition::Blocked(blocker),
            Step::Drained { now } => Transition::Drained { now },
            Step::Failed { now, error } => Transition::Failed { error, now },
            Step::Parked { now, blocker } => Transition::Parked { blocker, now },
            Step::Retry {
                now,
                drain_timeout_s,
            } => Transition::Retry {
                now,
                drain_timeout: secs(drain_timeout_s),
            },
            Step::Cleared => return None,
        })
    }
}

/// A [`Blocker`] (or a line of text, such as a failed rollout restart's), as written.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum BlockerSpec {
    DoNotDisrupt {
        pod: String,
        annotation: String,
    },
    EmptydirRefused {
        pod: String,
    },
    UnmanagedRefused {
        pod: String,
    },
    MultipleBudgets {
        pod: String,
        budgets: Vec<String>,
    },
    BudgetNeverAllows {
        budget: String,
        reason: String,
    },
    BudgetRefusing {
        budget: String,
        pod: String,
        message: String,
    },
    Text(String),
}

fn budget(key: &str) -> BudgetKey {
    let (namespace, name) = key.split_once('/').expect("a budget as namespace/name");
    BudgetKey::of(&PodDisruptionBudget {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..PodDisruptionBudget::default()
    })
}

impl BlockerSpec {
    fn line(&self) -> String {
        let blocker = match self {
            BlockerSpec::Text(text) => return text.clone(),
            BlockerSpec::DoNotDisrupt { pod, annotation } => Blocker::DoNotDisrupt {
                pod: pod.clone(),
                annotation: [
                    DO_NOT_DISRUPT_ANNOTATION,
                    KARPENTER_DO_NOT_DISRUPT_ANNOTATION,
                ]
                .into_iter()
                .find(|a| a == annotation)
                .expect("an opt-out annotation"),
            },
            BlockerSpec::EmptydirRefused { pod } => Blocker::EmptyDirRefused { pod: pod.clone() },
            BlockerSpec::UnmanagedRefused { pod } => Blocker::UnmanagedRefused { pod: pod.clone() },
            BlockerSpec::MultipleBudgets { pod, budgets } => Blocker::MultipleBudgets {
                pod: pod.clone(),
                budgets: budgets.iter().map(|b| budget(b)).collect(),
            },
            BlockerSpec::BudgetNeverAllows { budget: b, reason } => Blocker::BudgetNeverAllows {
                budget: budget(b),
                reason: reason.clone(),
            },
            BlockerSpec::BudgetRefusing {
                budget: b,
                pod,
                message,
            } => Blocker::BudgetRefusing {
                budget: budget(b),
                pod: pod.clone(),
                message: message.clone(),
            },
        };
        blocker.to_string()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum ErrorSpec {
    DeadlinePassed {
        deadline: Timestamp,
        pods: Vec<String>,
    },
}

/// The typed record a case must read as; fields left out are absent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordSpec {
    phase: Option<String>,
    started_at: Option<Timestamp>,
    deadline: Option<Timestamp>,
    #[serde(default)]
    attempts: u32,
    last_error: Option<String>,
    blocker: Option<String>,
    #[serde(default)]
    cordoned_by_rotor: bool,
    drained_at: Option<Timestamp>,
}

/// The phase slugs of the golden files, spelled out here rather than parsed with the code under
/// test, so that a renamed slug fails.
fn phase(slug: &str) -> DrainPhase {
    match slug {
        "queued" => DrainPhase::Queued,
        "cordoned" => DrainPhase::Cordoned,
        "evicting" => DrainPhase::Evicting,
        "drained" => DrainPhase::Drained,
        "failed" => DrainPhase::Failed,
        "blocked" => DrainPhase::Blocked,
        "parked" => DrainPhase::Parked,
        other => panic!("no phase {other:?} in the golden files' vocabulary"),
    }
}

impl RecordSpec {
    fn record(&self) -> DrainRecord {
        DrainRecord {
            phase: self.phase.as_deref().map(phase),
            started_at: self.started_at,
            deadline: self.deadline,
            attempts: self.attempts,
            last_error: self.last_error.clone(),
            blocker: self.blocker.clone(),
            cordoned_by_rotor: self.cordoned_by_rotor,
            drained_at: self.drained_at,
        }
    }
}

/// A drainer that starts at `at` over the node as it stands.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResumePoint {
    at: Timestamp,
    #[serde(default)]
    surge: bool,
    node: NodeState,
    /// What the fleet loop does with the node: `resume` (a drain task resuming it), `start` (a
    /// candidate), `drained`, `backing-off` or `parked` (held until `retry_at`), `clean-up`.
    fleet: String,
    retry_at: Option<Timestamp>,
    counts: Counts,
    /// Whether the drain task, reading the node afresh, goes ahead (`goes-ahead`) or stops
    /// (`skipped`); absent for a clean-up.
    task: Option<String>,
    /// Whether its first write sends anything, what it does to the cordon, and the node's
    /// drainer annotations after it.
    writes: Option<bool>,
    cordon: Option<String>,
    after: Option<BTreeMap<String, String>>,
    #[allow(dead_code)]
    meaning: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeState {
    tainted: bool,
    unschedulable: bool,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Counts {
    /// Takes a drain slot (`--max-concurrent`).
    active: bool,
    /// Takes a place under `--max-unavailable`.
    unavailable: bool,
}

const NODE: &str = "ip-10-0-1-5.eu-west-1.compute.internal";
const DRAIN_TIMEOUT: Duration = Duration::from_secs(3600);

/// An annotation rotor does not own, which every write must leave alone.
const OTHERS: (&str, &str) = ("example.com/team", "payments");

/// The node as the API returns it: Ready, with `annotations` and one of someone else's.
fn node_json(annotations: &BTreeMap<String, String>, state: &NodeState) -> Value {
    let mut annotations = annotations.clone();
    annotations.insert(OTHERS.0.into(), OTHERS.1.into());
    let taints = if state.tainted {
        json!([{"key": DRAIN_TAINT_KEY, "value": "max-age", "effect": "NoSchedule"}])
    } else {
        json!([])
    };
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "resourceVersion": "42",
                     "creationTimestamp": "2025-01-01T00:00:00Z", "annotations": annotations},
        "spec": {"unschedulable": state.unschedulable, "taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// The drainer's state annotations among `annotations`, after checking the others are intact.
fn drainer_annotations(annotations: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    assert_eq!(
        annotations.get(OTHERS.0).map(String::as_str),
        Some(OTHERS.1),
        "someone else's annotation was touched"
    );
    annotations
        .iter()
        .filter(|(k, _)| k.as_str() != OTHERS.0)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn annotations_of(node: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(node["metadata"]["annotations"].clone()).unwrap_or_default()
}

/// What the fleet loop does with the node at `at` (see [`ResumePoint::fleet`]).
fn fleet_decision(view: &NodeView, at: Timestamp) -> (String, Option<Timestamp>) {
    if !view.tainted {
        // The loop's clean-up (fleet::machine, `Machine::act`): rotor's state on an untainted
        // node that no task holds is undone.
        let ours = view.record.phase.is_some() || view.record.cordoned_by_rotor;
        return (if ours { "clean-up" } else { "nothing" }.into(), None);
    }
    if view.is_active() {
        // `Machine::act` resumes every tainted node whose record is under way.
        assert_eq!(
            start_block(view, at, retry_backoff),
            Some(StartBlock::Draining)
        );
        return ("resume".into(), None);
    }
    let limits = FleetLimits {
        max_concurrent: 1,
        max_unavailable: "1".parse().unwrap(),
        startup_grace: Duration::ZERO,
    };
    let decision = choose_nodes_to_start(std::slice::from_ref(view), &limits, at, retry_backoff);
    if decision.start == [view.name.clone()] {
        return ("start".into(), None);
    }
    match decision.held.as_slice() {
        [(_, HeldReason::Parked { blocker, retry_at })] => {
            assert_eq!(Some(blocker), view.record.blocker.as_ref());
            ("parked".into(), Some(*retry_at))
        }
        [(_, HeldReason::BackingOff { attempts, retry_at })] => {
            assert_eq!(*attempts, view.record.attempts);
            ("backing-off".into(), Some(*retry_at))
        }
        [] if view.is_drained() => ("drained".into(), None),
        other => panic!("unexpected fleet decision {decision:?} ({other:?})"),
    }
}

/// The first write a drainer makes to the node at `at` for `fleet`: the task's start (its
/// start and cordon in one write, as `drain::task` makes it) or the clean-up
/// (`record::node_io::clean_up`). `None` when the task does not go ahead.
fn first_write(
    node: &Node,
    fleet: &str,
    point: &ResumePoint,
) -> (Option<&'static str>, Option<Value>) {
    let before = DrainRecord::from_annotations(node.metadata.annotations.as_ref());
    if fleet == "clean-up" {
        let mut patch = DrainRecord::cleared().annotation_patch(&before);
        // Only rotor's own cordon is undone.
        if before.cordoned_by_rotor && point.node.unschedulable {
            patch["spec"] = json!({"unschedulable": false});
        }
        return (None, Some(patch));
    }
    let intent = if fleet == "resume" {
        Intent::Resume
    } else {
        Intent::Start
    };
    if begin_check(intent, &before, point.at, retry_backoff).is_some() {
        return (Some("skipped"), None);
    }
    let start = if before.waits_to_retry() {
        Transition::Retry {
            now: point.at,
            drain_timeout: DRAIN_TIMEOUT,
        }
    } else {
        Transition::Start {
            now: point.at,
            drain_timeout: DRAIN_TIMEOUT,
        }
    };
    let started = apply(&before, start);
    let then = (!point.surge).then_some(Transition::Evicting);
    let (next, patch) = start_write(node, &started, then);
    let written = match &patch {
        Some(patch) => {
            let mut after = serde_json::to_value(node).unwrap();
            apply_merge_patch(&mut after, patch).unwrap();
            after
        }
        None => serde_json::to_value(node).unwrap(),
    };
    assert_eq!(
        DrainRecord::from_annotations(Some(&annotations_of(&written))),
        next,
        "the task's record is what the node shows after its write"
    );
    (Some("goes-ahead"), Some(patch.unwrap_or(Value::Null)))
}

fn check_node_case(case: &NodeCase, keys: &[String], newest: bool) {
    let name = &case.name;
    let expected = case.record.record();
    for key in case.annotations.keys() {
        assert!(
            keys.contains(key),
            "{name}: {key} is not a record annotation"
        );
    }

    // Today's writer, from the typed record and through the transitions that make it.
    if newest {
        let written: BTreeMap<String, String> = expected
            .to_annotations()
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?)))
            .collect();
        assert_eq!(written, case.annotations, "{name}: the record writes");
        if let Some(steps) = &case.written_by {
            let mut record = DrainRecord::cleared();
            let mut on_node = BTreeMap::from([(OTHERS.0.to_string(), OTHERS.1.to_string())]);
            for step in steps {
                let next = match step.clone().transition() {
                    Some(t) => apply(&record, t),
                    None => DrainRecord::cleared(),
                };
                let mut node = json!({"metadata": {"annotations": on_node}});
                apply_merge_patch(&mut node, &next.annotation_patch(&record)).unwrap();
                on_node = annotations_of(&node);
                record = next;
            }
            assert_eq!(record, expected, "{name}: the transitions make the record");
            assert_eq!(
                drainer_annotations(&on_node),
                case.annotations,
                "{name}: the transitions' patches leave these annotations"
            );
        }
        if !case.blockers.is_empty() {
            let lines: Vec<String> = case.blockers.iter().map(BlockerSpec::line).collect();
            assert_eq!(
                every_blocker(&lines),
                expected.blocker,
                "{name}: blocker text"
            );
        }
        if let Some(ErrorSpec::DeadlinePassed { deadline, pods }) = &case.last_error_from {
            let error = DrainError::DeadlinePassed {
                deadline: *deadline,
                pods: pods.clone(),
            };
            assert_eq!(
                Some(error.to_string()),
                expected.last_error,
                "{name}: error text"
            );
        }
    }

    // Today's reader.
    assert_eq!(
        DrainRecord::from_annotations(Some(&case.annotations)),
        expected,
        "{name}: reads as the record"
    );
    for (i, point) in case.resumes.iter().enumerate() {
        let at = format!("{name}, resume {} at {}", i + 1, point.at);
        let node_value = node_json(&case.annotations, &point.node);
        let node: Node = serde_json::from_value(node_value.clone()).unwrap();
        let view = NodeView::of(&node);
        assert_eq!(view.record, expected, "{at}: the fleet's view");
        assert_eq!(
            misreadings(node.metadata.annotations.as_ref(), point.at, DRAIN_TIMEOUT),
            [],
            "{at}: a record rotor writes reads clean"
        );
        let (fleet, retry_at) = fleet_decision(&view, point.at);
        assert_eq!(fleet, point.fleet, "{at}: fleet decision");
        assert_eq!(retry_at, point.retry_at, "{at}: retried at");
        let counts = Counts {
            active: view.is_active(),
            unavailable: view.is_unavailable(),
        };
        assert_eq!(counts, point.counts, "{at}: counts");

        let (task, patch) = first_write(&node, &fleet, point);
        assert_eq!(task.map(str::to_string), point.task, "{at}: the task");
        let Some(patch) = patch else {
            assert!(
                point.after.is_none() && point.writes.is_none(),
                "{at}: nothing is written"
            );
            continue;
        };
        assert_eq!(Some(!patch.is_null()), point.writes, "{at}: writes");
        let mut after = node_value.clone();
        if !patch.is_null() {
            assert_eq!(
                patch["metadata"].get("resourceVersion").is_some(),
                fleet != "clean-up"
            );
            apply_merge_patch(&mut after, &patch).unwrap();
        }
        let unschedulable = |n: &Value| n["spec"]["unschedulable"].as_bool().unwrap_or(false);
        let cordon = match (unschedulable(&node_value), unschedulable(&after)) {
            (false, true) => "cordons",
            (true, false) => "uncordons",
            _ => "unchanged",
        };
        assert_eq!(Some(cordon.to_string()), point.cordon, "{at}: cordon");
        assert_eq!(
            Some(drainer_annotations(&annotations_of(&after))),
            point.after,
            "{at}: the node's record after the first write"
        );
    }
}

#[test]
fn node_records_write_and_resume_as_pinned() {
    for (set, newest) in sets() {
        let file: NodeFile = load(&set, NODE_RECORDS);
        if newest {
            let mut keys: Vec<String> = DrainRecord::default()
                .to_annotations()
                .into_keys()
                .map(String::from)
                .collect();
            keys.sort();
            assert_eq!(
                keys, file.annotation_keys,
                "{set}: the record's annotations"
            );
            let mut state: Vec<&str> = DRAINER_STATE_ANNOTATIONS.to_vec();
            state.sort_unstable();
            assert_eq!(
                state, file.annotation_keys,
                "{set}: DRAINER_STATE_ANNOTATIONS"
            );
            // Every phase has a golden record, so a new phase needs one.
            let pinned: BTreeSet<String> = file
                .cases
                .iter()
                .filter_map(|c| c.record.phase.clone())
                .collect();
            for p in DrainPhase::ALL {
                assert!(
                    pinned.contains(p.slug()),
                    "{set}: no golden record in phase {p}"
                );
            }
        }
        each(
            &format!("{set}/{NODE_RECORDS}"),
            &file.cases,
            |c| &c.name,
            |c| check_node_case(c, &file.annotation_keys, newest),
        );
    }
}

// --- Surge placeholders -------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SurgeFile {
    #[allow(dead_code)]
    about: String,
    config: SurgeConfigSpec,
    all_placeholders_selector: String,
    cases: Vec<SurgeCase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SurgeConfigSpec {
    namespace: String,
    priority_class: String,
    image: String,
    timeout_s: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SurgeCase {
    name: String,
    #[allow(dead_code)]
    shape: String,
    node: ObjectRef,
    /// v1: the one pod a placeholder pod stood for, and that placeholder's metadata.
    pod: Option<PodSpec>,
    metadata: Option<Value>,
    /// v2 on: the pods the node's placeholder sets stand for, and the sets.
    pods: Option<Vec<PodSpec>>,
    sets: Option<Vec<SetSpec>>,
    selector: String,
    resumes: Vec<SurgeResume>,
}

/// A placeholder set (a ReplicaSet) as written: its metadata, replicas and pod template's
/// metadata.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetSpec {
    metadata: Value,
    replicas: i32,
    template_metadata: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectRef {
    name: String,
    uid: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PodSpec {
    namespace: String,
    name: String,
    uid: String,
    owner: Owner,
    requests: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Owner {
    kind: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SurgeResume {
    /// The node's record, as a case of the node records by name; `None`: the node is gone.
    node_record: Option<String>,
    bound: bool,
    /// What the start-up sweep does with the placeholder: `kept` or `removed`.
    sweep: String,
    reservation: Option<ReservationSpec>,
    #[allow(dead_code)]
    meaning: String,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct ReservationSpec {
    scheduled: usize,
    pending: usize,
}

/// Whether `labels` match a selector of `key` and `key=value` terms.
fn selects(selector: &str, labels: &BTreeMap<String, String>) -> bool {
    selector.split(',').all(|term| match term.split_once('=') {
        Some((k, v)) => labels.get(k).map(String::as_str) == Some(v),
        None => labels.contains_key(term),
    })
}

fn check_surge_case(
    case: &SurgeCase,
    file: &SurgeFile,
    node_records: &BTreeMap<String, BTreeMap<String, String>>,
    newest: bool,
) {
    let name = &case.name;
    if newest {
        let cfg = SurgeConfig {
            namespace: file.config.namespace.clone(),
            priority_class: file.config.priority_class.clone(),
            image: file.config.image.clone(),
            timeout: Duration::from_secs(file.config.timeout_s),
            max_surge: None,
        };
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": case.node.name, "uid": case.node.uid}
        }))
        .unwrap();
        let pods: Vec<Pod> = case
            .pods
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: the newest set lists the sets' pods"))
            .iter()
            .map(|pod| {
                serde_json::from_value(json!({
                    "metadata": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid,
                                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": pod.owner.kind,
                                                      "name": pod.owner.name, "uid": "owner-1", "controller": true}]},
                    "spec": {"nodeName": case.node.name,
                             "containers": [{"name": "app", "image": "app:1",
                                             "resources": {"requests": pod.requests}}]}
                }))
                .unwrap()
            })
            .collect();
        let taint = drain_taint(DrainReason::MaxAge, TaintEffect::NoSchedule);
        let pods: Vec<&Pod> = pods.iter().collect();
        let made: Vec<Value> = placeholder_sets(&pods, &node, &taint, &cfg)
            .into_iter()
            .map(|set| {
                let spec = set.spec.unwrap();
                json!({
                    "metadata": set.metadata,
                    "replicas": spec.replicas,
                    "template_metadata": spec.template.unwrap().metadata,
                })
            })
            .collect();
        let pinned: Vec<Value> = case
            .sets
            .iter()
            .flatten()
            .map(|s| json!({"metadata": s.metadata, "replicas": s.replicas, "template_metadata": s.template_metadata}))
            .collect();
        assert_eq!(made, pinned, "{name}: the placeholder sets");
        assert_eq!(placeholder_selector(&case.node.name), case.selector);
        assert_eq!(all_placeholders_selector(), file.all_placeholders_selector);
    }

    // Read back as a restarted drainer finds it: a placeholder pod (v1), or a set's pod (v2 on).
    let metadata: ObjectMeta = match (&case.metadata, &case.sets) {
        (Some(metadata), _) => serde_json::from_value(metadata.clone()).unwrap(),
        (None, Some(sets)) => {
            let set = &sets[0];
            let mut pod: ObjectMeta =
                serde_json::from_value(set.template_metadata.clone()).unwrap();
            pod.name = Some(format!("{}-x7k2q", set.metadata["name"].as_str().unwrap()));
            pod.namespace = set.metadata["namespace"].as_str().map(str::to_string);
            pod
        }
        (None, None) => panic!("{name}: neither a placeholder nor a set"),
    };
    // The node's selector (its drain's watch and release) and the sweep's find it.
    let found_by_both = |meta: &ObjectMeta, what: &str| {
        let labels = meta.labels.clone().unwrap_or_default();
        assert!(
            selects(&case.selector, &labels),
            "{name}: its node's selector finds {what}"
        );
        assert!(
            selects(&file.all_placeholders_selector, &labels),
            "{name}: the sweep's selector finds {what}"
        );
    };
    found_by_both(&metadata, "the placeholder");
    if let Some(sets) = &case.sets {
        for set in sets {
            let set_meta: ObjectMeta = serde_json::from_value(set.metadata.clone()).unwrap();
            found_by_both(&set_meta, "the set");
            assert_eq!(
                placeholder_node(&ReplicaSet {
                    metadata: set_meta,
                    ..ReplicaSet::default()
                }),
                Some(case.node.name.as_str()),
                "{name}: the set's node"
            );
        }
    }
    if let (Some(pod), Some(metadata)) = (&case.pod, &case.metadata) {
        assert_eq!(
            metadata["annotations"]["rotor.dev/surge-for-pod"],
            format!("{}/{}", pod.namespace, pod.name),
            "{name}: the pod it stands for"
        );
    }
    for (i, point) in case.resumes.iter().enumerate() {
        let at = format!("{name}, resume {}", i + 1);
        let spec = if point.bound {
            json!({"nodeName": "ip-10-0-3-1.eu-west-1.compute.internal", "containers": []})
        } else {
            json!({"containers": []})
        };
        let pod = Pod {
            metadata: metadata.clone(),
            spec: serde_json::from_value(spec).unwrap(),
            status: None,
        };
        assert!(is_placeholder(&pod), "{at}: a placeholder");
        assert_eq!(
            placeholder_node(&pod),
            Some(case.node.name.as_str()),
            "{at}"
        );
        // The sweep (`SurgeRoom::sweep`, in `drain/surge_io/removal.rs`): the node's record read
        // from its annotations.
        let draining = point.node_record.as_ref().is_some_and(|record| {
            let annotations = node_records
                .get(record)
                .unwrap_or_else(|| panic!("{at}: no node record {record:?}"));
            DrainRecord::from_annotations(Some(annotations)).is_active()
        });
        let pods = [pod];
        let orphans = orphaned(&pods, |n| n == case.node.name && draining);
        let sweep = if orphans.is_empty() {
            "kept"
        } else {
            "removed"
        };
        assert_eq!(sweep, point.sweep, "{at}: the sweep");
        if let Some(expected) = &point.reservation {
            let r = Reservation::of(&pods, 1);
            let got = ReservationSpec {
                scheduled: r.scheduled,
                pending: r.pending.len(),
            };
            assert_eq!(&got, expected, "{at}: the reservation");
        }
    }
}

#[test]
fn surge_placeholders_write_and_resume_as_pinned() {
    for (set, newest) in sets() {
        let file: SurgeFile = load(&set, SURGE);
        let nodes: NodeFile = load(&set, NODE_RECORDS);
        let node_records = nodes
            .cases
            .into_iter()
            .map(|c| (c.name, c.annotations))
            .collect();
        each(
            &format!("{set}/{SURGE}"),
            &file.cases,
            |c| &c.name,
            |c| check_surge_case(c, &file, &node_records, newest),
        );
    }
}

// --- Rollout restarts ---------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestartFile {
    #[allow(dead_code)]
    about: String,
    cases: Vec<RestartCase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestartCase {
    name: String,
    #[allow(dead_code)]
    shape: String,
    stamp: Stamp,
    patch: Value,
    resumes: Vec<RestartResume>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Stamp {
    resource_version: String,
    at: Timestamp,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestartResume {
    name: String,
    deployment: Value,
    replicaset: Value,
    judgement: String,
    #[allow(dead_code)]
    meaning: String,
}

fn judgement_slug(judgement: &Judgement) -> String {
    match judgement {
        Judgement::NotLone => "not-lone".into(),
        Judgement::RollingOut => "rolling-out".into(),
        Judgement::Unsettled => "unsettled".into(),
        Judgement::Restart { .. } => "restart".into(),
        Judgement::Refused(refusal) => format!(
            "refused: {}",
            match refusal {
                Refusal::Paused => "paused",
                Refusal::Recreate => "recreate",
                Refusal::NoSurge(_) => "no-surge",
                Refusal::StopsFirst(_) => "stops-first",
                Refusal::Unreadable { .. } => "unreadable",
                Refusal::RolloutStalled(_) => "rollout-stalled",
                Refusal::RestartUndone => "restart-undone",
                Refusal::PatchRefused(_) => "patch-refused",
            }
        ),
    }
}

fn check_restart_case(case: &RestartCase, newest: bool) {
    let name = &case.name;
    if newest {
        assert_eq!(
            restart_patch(&case.stamp.resource_version, case.stamp.at),
            case.patch,
            "{name}: the stamp"
        );
    }
    let stamp = &case.patch["spec"]["template"]["metadata"]["annotations"];
    for point in &case.resumes {
        let at = format!("{name}, {}", point.name);
        assert_eq!(
            &point.deployment["spec"]["template"]["metadata"]["annotations"], stamp,
            "{at}: the Deployment carries the stamp"
        );
        let deployment: Deployment = serde_json::from_value(point.deployment.clone()).unwrap();
        let rs: ReplicaSet = serde_json::from_value(point.replicaset.clone()).unwrap();
        let judgement = judge(&rs, &deployment);
        assert_eq!(judgement_slug(&judgement), point.judgement, "{at}: judged");
        // A drainer that starts knows nothing of the stamp but what it reads: what it decides
        // for the pod from the judgement.
        let pod = PodRef {
            namespace: "shop".into(),
            name: "solo-7d9f8-x2k4p".into(),
            uid: "pod-1".into(),
        };
        let mut restarts = RolloutRestarts::default();
        let next = restarts.judged(pod, "shop/solo", judgement.clone(), case.stamp.at);
        assert!(
            !matches!(next, Next::Stamp { .. }),
            "{at}: not stamped a second time"
        );
        match judgement {
            Judgement::RollingOut => {
                assert!(matches!(next, Next::Tell(Some(News::RollingOut { .. }))));
                assert!(restarts.withheld("pod-1"), "{at}: left to the rollout");
            }
            Judgement::Refused(_) => {
                assert!(matches!(next, Next::Tell(Some(News::Refused { .. }))));
                assert!(!restarts.withheld("pod-1"), "{at}: evicted");
            }
            _ => {}
        }
    }
}

#[test]
fn restart_stamps_write_and_resume_as_pinned() {
    for (set, newest) in sets() {
        let file: RestartFile = load(&set, RESTART);
        each(
            &format!("{set}/{RESTART}"),
            &file.cases,
            |c| &c.name,
            |c| check_restart_case(c, newest),
        );
    }
}

// --- The rotation record ------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RotationFile {
    #[allow(dead_code)]
    about: String,
    configmap: ConfigMapRef,
    cases: Vec<RotationCase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigMapRef {
    lease_namespace: String,
    lease_name: String,
    namespace: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RotationCase {
    name: String,
    written_by: Vec<Part>,
    data: BTreeMap<String, String>,
    reads: RotationReads,
    #[allow(dead_code)]
    meaning: String,
}

/// One write to the record: a part applied by its field manager, or `rotor-drainer resume`.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Part {
    Health {
        open: bool,
        since: Timestamp,
        reason: String,
    },
    Halt {
        since: Timestamp,
        reason: String,
    },
    Waiting(BTreeMap<String, String>),
    Resume {
        at: Timestamp,
    },
    Enforced {
        halt: bool,
        health_gate: bool,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RotationReads {
    halted: Option<HaltSpec>,
    resumed_at: Option<Timestamp>,
    health_gate: Option<HealthSpec>,
    waiting: BTreeMap<String, String>,
    /// Absent from sets before `v4/`, whose writer did not say.
    #[serde(default)]
    enforced: Option<EnforcedSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnforcedSpec {
    halt: bool,
    health_gate: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HaltSpec {
    since: Timestamp,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HealthSpec {
    open: bool,
    since: Timestamp,
    reason: String,
}

fn check_rotation_case(case: &RotationCase, newest: bool) {
    let name = &case.name;
    if newest {
        // Each part applied as server-side apply applies it: its keys set, the others kept;
        // the resume as its merge patch.
        let mut configmap = json!({"data": {}});
        for part in &case.written_by {
            let data = match part {
                Part::Health {
                    open,
                    since,
                    reason,
                } => HealthGateState {
                    open: *open,
                    since: *since,
                    reason: reason.clone(),
                }
                .to_data(),
                Part::Halt { since, reason } => halt_to_data(&Halt {
                    since: *since,
                    reason: reason.clone(),
                }),
                Part::Waiting(waiting) => waiting_to_data(waiting),
                Part::Enforced { halt, health_gate } => Enforced {
                    halt: *halt,
                    health_gate: *health_gate,
                }
                .to_data(),
                Part::Resume { at } => {
                    apply_merge_patch(&mut configmap, &resume_patch(*at)).unwrap();
                    continue;
                }
            };
            apply_merge_patch(&mut configmap, &json!({ "data": data })).unwrap();
        }
        let written: BTreeMap<String, String> =
            serde_json::from_value(configmap["data"].clone()).unwrap();
        assert_eq!(written, case.data, "{name}: the record's data");
    }
    let halted = case.reads.halted.as_ref().map(|h| Halt {
        since: h.since,
        reason: h.reason.clone(),
    });
    assert_eq!(
        halt_from_data(&case.data),
        HaltState {
            halted: halted.clone(),
            resumed_at: case.reads.resumed_at,
        },
        "{name}: the halt every replica's record watch reads"
    );
    assert_eq!(
        RotationView::of(&case.data),
        RotationView {
            health_gate: case.reads.health_gate.as_ref().map(|h| HealthGateState {
                open: h.open,
                since: h.since,
                reason: h.reason.clone(),
            }),
            halted,
            resumed_at: case.reads.resumed_at,
            enforced: case.reads.enforced.as_ref().map(|e| Enforced {
                halt: e.halt,
                health_gate: e.health_gate,
            }),
            waiting: case.reads.waiting.clone(),
        },
        "{name}: what status reads"
    );
}

#[test]
fn the_rotation_record_writes_and_reads_as_pinned() {
    for (set, newest) in sets() {
        let file: RotationFile = load(&set, ROTATION);
        let cm = &file.configmap;
        assert_eq!(
            RecordRef::beside_lease(&cm.lease_namespace, &cm.lease_name),
            RecordRef {
                namespace: cm.namespace.clone(),
                name: cm.name.clone(),
            },
            "{set}: where the record is"
        );
        each(
            &format!("{set}/{ROTATION}"),
            &file.cases,
            |c| &c.name,
            |c| check_rotation_case(c, newest),
        );
    }
}
