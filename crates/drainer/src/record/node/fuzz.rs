//! Properties of the per-node record read back from node annotations (issue 18): whatever a
//! person or a tool wrote there, reading never fails, and the record rotor writes is the record
//! it reads back, after exactly the merge patch rotor sends. Each runs `PROPTEST_CASES` cases
//! (256 by default); failures found so far are replayed first from
//! `proptest-regressions/state/fuzz.txt`.

use proptest::collection::btree_map;
use proptest::prelude::*;
use rotor_apimachinery::apply_merge_patch;
use rotor_core::contract::DRAINER_STATE_ANNOTATIONS;

use super::*;

/// Values found in the drainer's annotations: its own, near misses, and anything at all.
fn annotation_value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "",
            "true",
            "True",
            "evicting",
            "Evicting",
            "drained ",
            "0",
            "1",
            "-1",
            "+3",
            "4294967295",
            "4294967296",
            "2025-01-02T03:04:05Z",
            "2025-01-02T03:04:05.999Z",
            "-009999-01-02T01:59:59Z",
            "9999-12-30T22:00:00Z",
            "2025-01-02",
            "null",
        ])
        .prop_map(String::from),
        any::<String>(),
    ]
}

fn annotations() -> impl Strategy<Value = BTreeMap<String, String>> {
    let key = prop_oneof![
        prop::sample::select(DRAINER_STATE_ANNOTATIONS.to_vec()).prop_map(String::from),
        Just("rotor.dev/drain-approved".to_string()),
        "[a-z./-]{1,12}",
    ];
    btree_map(key, annotation_value(), 0..10)
}

fn whole_second() -> impl Strategy<Value = Timestamp> {
    (Timestamp::MIN.as_second() + 1..Timestamp::MAX.as_second())
        .prop_map(|s| Timestamp::from_second(s).unwrap())
}

/// A record as the state machine keeps it: whole-second times, texts that are not empty.
fn record() -> impl Strategy<Value = DrainRecord> {
    let text =
        || prop::option::of(any::<String>().prop_filter("empty reads as none", |s| !s.is_empty()));
    (
        prop::option::of(prop::sample::select(DrainPhase::ALL.to_vec())),
        prop::option::of(whole_second()),
        prop::option::of(whole_second()),
        any::<u32>(),
        text(),
        text(),
        any::<bool>(),
        prop::option::of(whole_second()),
    )
        .prop_map(
            |(
                phase,
                started_at,
                deadline,
                attempts,
                last_error,
                blocker,
                cordoned_by_rotor,
                drained_at,
            )| {
                DrainRecord {
                    phase,
                    started_at,
                    deadline,
                    attempts,
                    last_error,
                    blocker,
                    cordoned_by_rotor,
                    drained_at,
                }
            },
        )
}

proptest! {
    /// Any annotations read as a record, and that record reads back unchanged once written.
    #[test]
    fn reading_never_fails(annotations in annotations()) {
        let read = DrainRecord::from_annotations(Some(&annotations));
        let written: BTreeMap<String, String> = read
            .to_annotations()
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
            .collect();
        prop_assert_eq!(DrainRecord::from_annotations(Some(&written)), read);
    }

    /// The patch rotor sends against whatever the node holds leaves exactly the record's
    /// annotations (garbage in rotor's keys overwritten or removed, other keys untouched), and
    /// reads back as the record.
    #[test]
    fn the_patch_leaves_exactly_the_record(current in annotations(), record in record()) {
        let patch = record.annotation_patch_for(Some(&current));
        let mut node = serde_json::json!({"metadata": {"annotations": current.clone()}});
        apply_merge_patch(&mut node, &patch).unwrap();
        let after: BTreeMap<String, String> =
            serde_json::from_value(node["metadata"]["annotations"].clone()).unwrap();
        for (key, value) in record.to_annotations() {
            prop_assert_eq!(after.get(key), value.as_ref(), "{}", key);
        }
        for (key, value) in &current {
            if !DRAINER_STATE_ANNOTATIONS.contains(&key.as_str()) {
                prop_assert_eq!(after.get(key), Some(value));
            }
        }
        prop_assert_eq!(DrainRecord::from_annotations(Some(&after)), record);
    }
}
