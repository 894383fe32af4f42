//! The contract table of docs/concepts.md (`<!-- annotations -->`) against src/contract.rs: the
//! taint and every annotation documented, nothing documented that is not in the contract, every
//! drain reason and phase named; and no `rotor.dev/...` name in README.md or docs/*.md that the
//! code does not use.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rotor_core::contract::{
    DO_NOT_DISRUPT_ANNOTATION, DRAIN_APPROVED_ANNOTATION, DRAIN_TAINT_KEY,
    DRAINER_STATE_ANNOTATIONS, DrainPhase, DrainReason, KARPENTER_DO_NOT_DISRUPT_ANNOTATION,
    PRE_DRAIN_HOOK_PREFIX, REPLACE_BY_ANNOTATION, REPLACE_BY_SET_BY_ANNOTATION,
    RESTARTED_AT_ANNOTATION, SELECTED_AT_ANNOTATION, SELECTOR_DETAIL_ANNOTATION,
};

// The table reader the other doc tests use (crate rotor-e2e). Included by path: as a
// dev-dependency, rotor-e2e would build the whole workspace for rotor-core's tests.
#[allow(dead_code)]
#[path = "../../../tests/src/doc_tables.rs"]
mod doc_tables;

use doc_tables::{MarkedTable, assert_no_problems, code_spans};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every name of the contract: the taint key and the annotations.
fn contract_names() -> BTreeSet<&'static str> {
    let mut names: BTreeSet<&str> = DRAINER_STATE_ANNOTATIONS.into_iter().collect();
    names.extend([
        DRAIN_TAINT_KEY,
        SELECTED_AT_ANNOTATION,
        SELECTOR_DETAIL_ANNOTATION,
        DO_NOT_DISRUPT_ANNOTATION,
        KARPENTER_DO_NOT_DISRUPT_ANNOTATION,
        PRE_DRAIN_HOOK_PREFIX,
        DRAIN_APPROVED_ANNOTATION,
        REPLACE_BY_ANNOTATION,
        REPLACE_BY_SET_BY_ANNOTATION,
        RESTARTED_AT_ANNOTATION,
    ]);
    names
}

/// The values of the `pub const NAME: &str = "domain/name";` lines of a source: the names
/// contract.rs defines, whether or not [`contract_names`] lists them yet.
fn name_constants(src: &str) -> Vec<(String, String)> {
    src.lines()
        .filter_map(|line| {
            let (name, value) = line
                .trim()
                .strip_prefix("pub const ")?
                .split_once(": &str = ")?;
            let value = value.trim_end_matches(';').trim_matches('"');
            value
                .contains('/')
                .then(|| (name.to_string(), value.to_string()))
        })
        .collect()
}

/// The names a first cell documents: each backticked `domain/name`, cut at the first `=`, space
/// or `:` after the slash (`rotor.dev/drain=<reason>:NoSchedule` is `rotor.dev/drain`); a
/// prefix is written with a placeholder name (`pre-drain.hook.rotor.dev/<name>` is the prefix
/// `pre-drain.hook.rotor.dev/`).
fn documented_names(cell: &str) -> Vec<String> {
    code_spans(cell)
        .into_iter()
        .filter_map(|span| {
            let slash = span.find('/')?;
            let end = span[slash..]
                .find(['=', ' ', ':'])
                .map_or(span.len(), |n| slash + n);
            let name = &span[..end];
            Some(name.strip_suffix("<name>").unwrap_or(name).to_string())
        })
        .collect()
}

/// The `rotor.dev/...` names in a text (with any subdomain, `sim.rotor.dev/image`), by line;
/// URLs aside and a trailing `.`, `-` or `_` (end of sentence, `kubectl taint ... key-`) dropped.
fn rotor_names(text: &str) -> Vec<(usize, String)> {
    const DOMAIN: &str = "rotor.dev/";
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        for (at, _) in line.match_indices(DOMAIN) {
            let start = line[..at]
                .rfind(|c: char| {
                    !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
                })
                .map_or(0, |i| i + 1);
            if line[..start].ends_with('/') {
                continue; // A URL.
            }
            let rest = &line[at + DOMAIN.len()..];
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
                .unwrap_or(rest.len());
            let name = rest[..len].trim_end_matches(['.', '-', '_']);
            if !name.is_empty() {
                found.push((index + 1, format!("{}{DOMAIN}{name}", &line[start..at])));
            }
        }
    }
    found
}

/// The text of the files under `dir` with one of `exts`, recursively.
fn source_text(dir: &Path, exts: &[&str], out: &mut String) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            source_text(&path, exts, out);
        } else if path
            .extension()
            .is_some_and(|e| exts.iter().any(|x| e == *x))
        {
            out.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
}

/// The sources a documented name may come from: the crates, and the test harness (its kwok
/// stages and real-cluster helpers are documented too).
fn project_sources() -> String {
    let root = workspace_root();
    let mut text = String::new();
    for entry in std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
    {
        source_text(&entry.path().join("src"), &["rs"], &mut text);
    }
    source_text(&root.join("tests/src"), &["rs"], &mut text);
    source_text(&root.join("tests/kwok"), &["yaml"], &mut text);
    text
}

fn annotations_table() -> MarkedTable {
    doc_tables::the_one_table(
        &doc_tables::reference_pages(&workspace_root()),
        "annotations",
        "",
        &["name", "on", "meaning"],
    )
}

#[test]
fn the_test_knows_every_name_contract_rs_defines() {
    let src =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/contract.rs"))
            .expect("src/contract.rs");
    let defined = name_constants(&src);
    assert!(
        defined.len() >= 10,
        "read only {defined:?} from contract.rs: name_constants is broken"
    );
    let known = contract_names();
    for (constant, value) in defined {
        assert!(
            known.contains(value.as_str()),
            "src/contract.rs defines {constant} = {value:?}, which contract_names() in \
             tests/contract_docs.rs does not list: add it there (and to the table in \
             docs/concepts.md)"
        );
    }
}

/// Compares the annotations table with the contract's names, reasons and phases.
fn check_annotations_table(table: &MarkedTable, contract: &BTreeSet<&str>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut documented = BTreeSet::new();
    for row in &table.rows {
        let names = documented_names(&row.cells[0]);
        if names.is_empty() {
            problems.push(format!(
                "{}: the name cell {:?} holds no backticked `domain/name`",
                table.row_location(row),
                row.cells[0]
            ));
        }
        for name in names {
            if !contract.contains(name.as_str()) {
                problems.push(format!(
                    "{} documents {name}, which is not in crates/core/src/contract.rs: remove \
                     the row or fix the name",
                    table.row_location(row)
                ));
            }
            documented.insert(name);
        }
    }
    for name in contract {
        if !documented.contains(*name) {
            problems.push(format!(
                "the contract has {name}, which the table at {} does not document: add it",
                table.location()
            ));
        }
    }
    let spans: BTreeSet<String> = table
        .rows
        .iter()
        .flat_map(|row| row.cells.iter().flat_map(|c| code_spans(c)))
        .collect();
    let slugs = DrainReason::ALL
        .iter()
        .map(|r| ("drain reason", r.slug()))
        .chain(DrainPhase::ALL.iter().map(|p| ("phase", p.slug())));
    for (what, slug) in slugs {
        if !spans.contains(slug) {
            problems.push(format!(
                "the {what} `{slug}` is not named, in backticks, in the table at {}: add it",
                table.location()
            ));
        }
    }
    problems
}

#[test]
fn the_annotations_table_documents_exactly_the_contract() {
    let table = annotations_table();
    let problems = check_annotations_table(&table, &contract_names());
    assert_no_problems("the annotations table against contract.rs", &problems);
}

#[test]
fn every_rotor_dev_name_in_the_docs_exists() {
    let root = workspace_root();
    let contract = contract_names();
    let sources = project_sources();
    let mut problems = Vec::new();
    let mut seen = 0;
    for page in doc_tables::reference_pages(&root) {
        for (line, name) in rotor_names(&page.text) {
            seen += 1;
            if !contract.contains(name.as_str()) && !sources.contains(&format!("\"{name}\"")) {
                problems.push(format!(
                    "{}:{line} names {name}, which is neither in crates/core/src/contract.rs nor a \
                     string literal of the code: fix the name",
                    page.path
                ));
            }
        }
    }
    assert!(
        seen > 0,
        "found no rotor.dev/ name in README.md and docs/*.md: rotor_names is broken"
    );
    assert_no_problems("rotor.dev names in README.md and docs/*.md", &problems);
}

// --- The parsers, on inline text --------------------------------------------------------------

#[test]
fn documented_names_cut_values_and_effects() {
    assert_eq!(
        documented_names("taint `rotor.dev/drain=<reason>:NoSchedule`"),
        ["rotor.dev/drain"]
    );
    assert_eq!(
        documented_names(
            "`rotor.dev/do-not-disrupt: \"true\"`, `karpenter.sh/do-not-disrupt: \"true\"`"
        ),
        ["rotor.dev/do-not-disrupt", "karpenter.sh/do-not-disrupt"]
    );
    assert_eq!(
        documented_names("`rotor.dev/started-at`, `rotor.dev/deadline` and `queued`"),
        ["rotor.dev/started-at", "rotor.dev/deadline"]
    );
    assert!(documented_names("rotor.dev/phase without backticks").is_empty());
}

#[test]
fn rotor_names_read_subdomains_and_skip_urls() {
    let text = "`rotor.dev/phase`, sim.rotor.dev/image.\nkubectl taint node N rotor.dev/drain- \
                and https://rotor.dev/docs/x and the `rotor.dev/...` annotations";
    assert_eq!(
        rotor_names(text),
        [
            (1, "rotor.dev/phase".to_string()),
            (1, "sim.rotor.dev/image".to_string()),
            (2, "rotor.dev/drain".to_string())
        ]
    );
}

#[test]
fn name_constants_read_string_constants_with_a_slash() {
    let src = "pub const DRAIN_TAINT_KEY: &str = \"rotor.dev/drain\";\npub const FIELD_MANAGER: &str = \
               \"rotor\";\nconst PRIVATE: &str = \"a/b\";\n    pub const X_ANNOTATION: &str = \"x.io/y\";\n";
    assert_eq!(
        name_constants(src),
        [
            ("DRAIN_TAINT_KEY".to_string(), "rotor.dev/drain".to_string()),
            ("X_ANNOTATION".to_string(), "x.io/y".to_string())
        ]
    );
}

#[test]
fn check_annotations_table_reports_each_kind_of_mismatch() {
    let all_slugs: Vec<String> = DrainReason::ALL
        .iter()
        .map(|r| r.slug())
        .chain(
            DrainPhase::ALL
                .iter()
                .map(|p| p.slug())
                .filter(|s| *s != "blocked"),
        )
        .map(|s| format!("`{s}`"))
        .collect();
    let page = format!(
        "<!-- annotations -->\n| name | on | meaning |\n|---|---|---|\n\
         | taint `rotor.dev/drain=<reason>:NoSchedule` | Node | {} |\n\
         | `rotor.dev/invented` | Node | x |\n\
         | no backticks | Node | x |\n",
        all_slugs.join(", ")
    );
    let table = doc_tables::marked_tables("docs/c.md", &page, "annotations")
        .unwrap()
        .remove(0);
    let contract: BTreeSet<&str> = ["rotor.dev/drain", "rotor.dev/phase"].into();
    let problems = check_annotations_table(&table, &contract);
    let expected = [
        "docs/c.md:5 documents rotor.dev/invented, which is not in",
        "docs/c.md:6: the name cell \"no backticks\" holds no backticked",
        "the contract has rotor.dev/phase, which the table at docs/c.md:1 does not document",
        "the phase `blocked` is not named",
    ];
    doc_tables::assert_problems_start_with(&problems, &expected);
}
