//! The drainer's layout rules (ARCHITECTURE.md, "Layout rules"), checked on its own source:
//! - a file that decides is pure: no `async`, no `.await`, no API client or `Api`, no spawned
//!   task. Only the shells, named `*_io.rs`, in an `X_io/` folder or listed in
//!   [`SHELLS`], do I/O;
//! - the folders stand in layers, each importing only from those below it: `leader` (who acts)
//!   < `record` (what others read) < `drain` (one node's drain) < `fleet` (the loop over nodes)
//!   < the wiring (`runtime.rs`, `main.rs`);
//! - no import circle between files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The shells whose names do not end in `_io.rs`: whole files of I/O or wiring.
const SHELLS: &[&str] = &[
    "main.rs",
    "runtime.rs",
    "drain/task.rs",
    "drain/budget_turns.rs",
    "fleet/controller.rs",
    "leader/election.rs",
    "leader/fence.rs",
    "record/status.rs",
];

/// What a pure file must not contain: waiting on anything, an `Api` to call, a task to start.
/// (Holding a client is not I/O: the drains' shared handles do.)
const IO_MARKS: &[&str] = &[
    "async fn",
    "async move",
    ".await",
    "kube::api::Api",
    "Api<",
    "tokio::spawn",
    ".spawn(",
];

/// Whether `code` contains `mark` as a whole token (`.await`, not `.awaiting_approval`).
fn contains_mark(code: &str, mark: &str) -> bool {
    code.match_indices(mark).any(|(at, _)| {
        let next = code[at + mark.len()..].chars().next();
        let ends_in_word = mark.ends_with(|c: char| c.is_alphanumeric() || c == '_');
        !ends_in_word || !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Each folder's layer; a file may import from its own folder and from lower layers only.
fn layer(file: &str) -> Option<u8> {
    match file.split('/').next()? {
        "leader" => Some(0),
        "record" => Some(1),
        "drain" => Some(2),
        "fleet" => Some(3),
        _ => None,
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src/`, as a path relative to it, with its text.
fn sources() -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("read src/") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.insert(rel, std::fs::read_to_string(&path).expect("read source"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&src(), &src(), &mut out);
    out
}

/// The text of a file without its tests (`#[cfg(test)]` and everything after it: rotor keeps
/// its unit tests at the end of each file) and without comments.
fn code(text: &str) -> String {
    let shipped = text.split("#[cfg(test)]").next().unwrap_or_default();
    shipped
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `file` is a test module (`tests.rs`, `fuzz.rs` beside the code they test).
fn is_test_file(file: &str) -> bool {
    file.ends_with("/tests.rs") || file.ends_with("/fuzz.rs")
}

/// The module a file defines: `drain/pass_io.rs` is `drain::pass_io`, `drain/mod.rs` is `drain`.
fn module_of(file: &str) -> String {
    let path = file.trim_end_matches(".rs").trim_end_matches("/mod");
    path.replace('/', "::")
}

/// The file of the longest prefix of `path` (`a::b::C`) that is a module of the crate.
fn file_of(path: &str, modules: &BTreeMap<String, String>) -> Option<String> {
    let parts: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    (1..=parts.len())
        .rev()
        .find_map(|n| modules.get(&parts[..n].join("::")).cloned())
}

/// The files of `crate::` modules that `text` imports: each `crate::a::b` path resolved to the
/// longest module prefix that is a file of the crate.
fn imports(text: &str, modules: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let code = code(text);
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let path: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        found.extend(file_of(&path, modules));
        // `use crate::a::{b, c::d}`: the braces' items are under `a`.
        if let Some(open) = rest
            .strip_prefix(path.as_str())
            .and_then(|r| r.strip_prefix('{'))
        {
            let inner: String = open.chars().take_while(|c| *c != '}').collect();
            for item in inner.split(',') {
                let item = item.trim().trim_start_matches("self");
                found.extend(file_of(&format!("{path}{item}"), modules));
            }
        }
    }
    found
}

#[test]
fn a_file_that_decides_does_no_io() {
    let mut offenders = Vec::new();
    for (file, text) in sources() {
        // A shell split along its seams keeps its name on the folder: `drain/surge_io/*.rs`.
        let shell =
            file.ends_with("_io.rs") || file.contains("_io/") || SHELLS.contains(&file.as_str());
        if shell || is_test_file(&file) {
            continue;
        }
        let code = code(&text);
        for mark in IO_MARKS {
            if contains_mark(&code, mark) {
                offenders.push(format!("{file}: {mark}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "pure files doing I/O (move the I/O to the folder's *_io.rs shell, or name the file a shell): {offenders:#?}"
    );
    for shell in SHELLS {
        assert!(
            src().join(shell).exists(),
            "SHELLS names {shell}, which is gone"
        );
    }
}

#[test]
fn folders_import_only_from_the_layers_below() {
    let sources = sources();
    let modules: BTreeMap<String, String> =
        sources.keys().map(|f| (module_of(f), f.clone())).collect();
    let mut offenders = Vec::new();
    for (file, text) in &sources {
        let Some(own) = layer(file) else { continue };
        let folder = file.split('/').next().unwrap_or_default();
        for imported in imports(text, &modules) {
            let other = imported.split('/').next().unwrap_or_default();
            if other == folder {
                continue;
            }
            if let Some(theirs) = layer(&imported)
                && theirs >= own
            {
                offenders.push(format!("{file} imports {imported}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "imports that run back up the layers (leader < record < drain < fleet): {offenders:#?}"
    );
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let sources = sources();
    let modules: BTreeMap<String, String> =
        sources.keys().map(|f| (module_of(f), f.clone())).collect();
    // A file's tests and fuzz modules belong to it, and `mod.rs` only declares its folder.
    let graph: BTreeMap<String, BTreeSet<String>> = sources
        .iter()
        .filter(|(f, _)| !is_test_file(f) && !f.ends_with("mod.rs") && *f != "lib.rs")
        .map(|(f, t)| {
            let mut deps = imports(t, &modules);
            deps.remove(f);
            deps.retain(|d| !d.ends_with("mod.rs") && d != "lib.rs");
            (f.clone(), deps)
        })
        .collect();
    // Depth-first search for a cycle; reports the first found as a path.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for file in graph.keys() {
        let cycle = visit(file, &graph, &mut Vec::new(), &mut done);
        assert!(
            cycle.is_none(),
            "import circle: {}",
            cycle.unwrap().join(" -> ")
        );
    }
}

#[test]
fn the_rules_see_what_they_check() {
    // The checks above pass vacuously if the parsing finds nothing: a known import and a known
    // shell must be seen.
    let sources = sources();
    let modules: BTreeMap<String, String> =
        sources.keys().map(|f| (module_of(f), f.clone())).collect();
    let task = imports(&sources["drain/task.rs"], &modules);
    assert!(task.contains("drain/pass_io.rs"), "{task:?}");
    assert!(task.contains("record/node_io.rs"), "{task:?}");
    assert!(contains_mark(&code(&sources["drain/pass_io.rs"]), ".await"));
    assert!(!contains_mark("view.awaiting_approval", ".await"));
    assert!(modules.len() > 40, "{}", modules.len());
}
