//! Properties of the contract's parsers (issue 18): the taint value and effect, the phase and
//! timestamp annotations, the opt-outs and pre-drain hooks, read from whatever a person or a
//! tool wrote on a node or a pod. Each runs `PROPTEST_CASES` cases (256 by default); failures
//! found so far are replayed first from `proptest-regressions/contract/fuzz.txt`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSpec;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

use super::*;

/// Annotation and taint values a hand or a script may write: the real ones, near misses
/// (case, blanks, invisible characters) and timestamps of every shape.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "true",
            "True",
            "TRUE",
            " true",
            "true ",
            "\u{200b}true",
            "1",
            "yes",
            "",
            "manual",
            "Manual",
            "max-age",
            "image ",
            "NoSchedule",
            "noschedule",
            "PreferNoSchedule",
            "NoExecute",
            "drained",
            "Drained",
            "queued\n",
            "2025-01-02T03:04:05Z",
            " 2025-01-02T03:04:05Z ",
            "2025-01-02T03:04:05+01:00",
            "2025-01-02T03:04:05",
            "2025-13-02T03:04:05Z",
            "2025-02-30T00:00:00Z",
            "9999-12-31T23:59:59Z",
            "-009999-01-01T00:00:00Z",
            "+10000-01-01T00:00:00Z",
            "1735787045",
        ])
        .prop_map(String::from),
        any::<String>(),
    ]
}

fn annotations() -> impl Strategy<Value = BTreeMap<String, String>> {
    let key = prop_oneof![
        prop::sample::select(vec![
            DO_NOT_DISRUPT_ANNOTATION,
            KARPENTER_DO_NOT_DISRUPT_ANNOTATION,
            DRAIN_APPROVED_ANNOTATION,
            REPLACE_BY_ANNOTATION,
            PHASE_ANNOTATION,
            "pre-drain.hook.rotor.dev/",
            "pre-drain.hook.rotor.dev/backup",
            "pre-drain.hook.rotor.dev/é",
            "Pre-drain.hook.rotor.dev/x",
            "other.example/x",
        ])
        .prop_map(String::from),
        "pre-drain\\.hook\\.rotor\\.dev/.{0,8}",
        any::<String>(),
    ];
    btree_map(key, value(), 0..6)
}

fn meta(annotations: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        annotations: Some(annotations),
        ..ObjectMeta::default()
    }
}

fn timestamp() -> impl Strategy<Value = Timestamp> {
    (
        Timestamp::MIN.as_second()..=Timestamp::MAX.as_second(),
        0i32..1_000_000_000,
    )
        .prop_filter_map("outside jiff's range", |(s, ns)| Timestamp::new(s, ns).ok())
}

proptest! {
    /// The taint value, the taint effect and the phase annotation parse exactly their slugs
    /// (no blanks, no other case), and what parses prints back the same text.
    #[test]
    fn slugs_parse_exactly(text in value()) {
        match text.parse::<DrainReason>() {
            Ok(reason) => prop_assert_eq!(reason.slug(), text.as_str()),
            Err(e) => prop_assert!(
                DrainReason::ALL.iter().all(|r| r.slug() != text) && e.value == text
            ),
        }
        match text.parse::<DrainPhase>() {
            Ok(phase) => prop_assert_eq!(phase.slug(), text.as_str()),
            Err(e) => prop_assert!(
                DrainPhase::ALL.iter().all(|p| p.slug() != text) && e.value == text
            ),
        }
        match text.parse::<TaintEffect>() {
            Ok(effect) => prop_assert_eq!(effect.as_str(), text.as_str()),
            Err(e) => prop_assert!(
                !matches!(text.as_str(), "NoSchedule" | "PreferNoSchedule") && e.value == text
            ),
        }
    }

    /// Whatever the annotations hold: an opt-out or an approval is exactly `"true"`, the
    /// replace-by time is an RFC 3339 time (blanks around it allowed) or reported as written,
    /// and every pre-drain hook is listed, once, sorted.
    #[test]
    fn annotations_are_read_as_documented(annotations in annotations()) {
        let is_true = |key: &str| annotations.get(key).is_some_and(|v| v == "true");
        let m = meta(annotations.clone());
        prop_assert_eq!(node_drain_approved(&m), is_true(DRAIN_APPROVED_ANNOTATION));
        prop_assert_eq!(node_opted_out(&m), is_true(DO_NOT_DISRUPT_ANNOTATION));
        let expected_opt_out = [DO_NOT_DISRUPT_ANNOTATION, KARPENTER_DO_NOT_DISRUPT_ANNOTATION]
            .into_iter()
            .find(|k| is_true(k));
        prop_assert_eq!(pod_opt_out(&m), expected_opt_out);

        match (replace_by(&m), annotations.get(REPLACE_BY_ANNOTATION)) {
            (Ok(None), None) => {}
            (Ok(Some(t)), Some(v)) => prop_assert_eq!(parse_timestamp(v.trim()).ok(), Some(t)),
            (Err(written), Some(v)) => {
                prop_assert_eq!(&written, v);
                prop_assert!(parse_timestamp(v.trim()).is_err());
            }
            (got, written) => prop_assert!(false, "{got:?} from {written:?}"),
        }

        let hooks = pre_drain_hooks(&m);
        let names: Vec<&str> = annotations
            .keys()
            .filter_map(|k| k.strip_prefix(PRE_DRAIN_HOOK_PREFIX))
            .collect();
        prop_assert_eq!(hooks.len(), names.len());
        prop_assert!(hooks.windows(2).all(|w| w[0] <= w[1]));
        for name in names {
            prop_assert!(hooks.iter().any(|h| h.starts_with(name)));
        }
    }

    /// Any text is a timestamp or a refusal that quotes it; every instant jiff can hold is
    /// written in whole seconds and read back as that second.
    #[test]
    fn timestamps_round_trip(text in value(), t in timestamp()) {
        if let Err(e) = parse_timestamp(&text) {
            prop_assert!(e.to_string().contains(&format!("{text:?}")), "{}", e);
        }
        let written = format_timestamp(t);
        let whole_second = Timestamp::from_second(t.as_second()).ok();
        prop_assert_eq!(parse_timestamp(&written).ok(), whole_second, "{}", written);
    }

    /// The drain taint is the first taint with exactly its key, whatever its value and effect;
    /// a key differing in case or blanks is someone else's taint.
    #[test]
    fn the_drain_taint_is_found_by_its_key_alone(
        taints in vec(
            (
                prop::sample::select(vec![
                    DRAIN_TAINT_KEY, "rotor.dev/drain ", "Rotor.dev/drain", "rotor.dev/drain-x",
                    "node.kubernetes.io/unschedulable", "",
                ]),
                prop::option::of(value()),
                value(),
            ),
            0..4,
        ),
    ) {
        let taints: Vec<Taint> = taints
            .into_iter()
            .map(|(key, value, effect)| Taint { key: key.into(), value, effect, time_added: None })
            .collect();
        let node = Node {
            spec: Some(NodeSpec { taints: Some(taints.clone()), ..NodeSpec::default() }),
            ..Node::default()
        };
        prop_assert_eq!(find_drain_taint(&node), taints.iter().find(|t| t.key == DRAIN_TAINT_KEY));
    }
}
