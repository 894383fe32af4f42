//! The docs against what they describe, so that README.md and docs/*.md cannot drift from the
//! code: the flag tables against each command's `--help`, the Events table against the
//! drainer's `NodeEvent`s and the selector's reason constants, every relative link and anchor,
//! every benchmark figure quoted outside docs/benchmarks.md against that page, no issue-tracker
//! numbers, and the README's shape (short, the newcomer commands first, the test command that
//! `.ci/run` runs).
//!
//! The metrics table is checked in crates/drainer/tests/metrics_docs.rs, the taint and annotation
//! table in crates/core/tests/contract_docs.rs. The tables follow one convention, read by
//! `rotor_e2e::doc_tables`: an HTML comment marker line, then a GitHub table.
//!
//! The flag tests run the workspace binaries: build them first (`cargo build --workspace --bins`)
//! or run `cargo test --workspace`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rotor_drainer::record::events::NodeEvent;
use rotor_e2e::doc_tables::{
    self, MarkedTable, Page, assert_no_problems, blank_code_spans, code_spans, fenced_blocks,
    prose_lines,
};
use rotor_e2e::{binary, run_with_timeout, workspace_root};
use rotor_selector::apply;

/// README.md and docs/*.md.
fn reference_pages() -> Vec<Page> {
    doc_tables::reference_pages(&workspace_root())
}

// --- Flags ----------------------------------------------------------------------------------

/// What a command's `--help` says about one option.
#[derive(Debug, Clone, PartialEq, Default)]
struct HelpOption {
    env: Option<String>,
    default: Option<String>,
}

/// The options of a clap `--help` text by name (`--kubeconfig`, or `-v` for a short-only flag),
/// without `--help` and `--version`. An option's block runs from its line (`  -h, --help` or
/// `      --kubeconfig <PATH>`, indented at most 6) to the next option or heading; its
/// `[env: NAME=...]` and `[default: ...]` may be anywhere in it.
fn help_options(help: &str) -> BTreeMap<String, HelpOption> {
    let mut blocks: Vec<(String, String)> = Vec::new();
    let mut in_block = false;
    for line in help.lines().skip_while(|l| !l.starts_with("Usage:")) {
        if let Some(name) = option_name(line) {
            blocks.push((name, line.to_string()));
            in_block = true;
        } else if !line.is_empty() && !line.starts_with(' ') {
            in_block = false; // A heading such as `Commands:` or `Options:`.
        } else if in_block && let Some((_, text)) = blocks.last_mut() {
            text.push('\n');
            text.push_str(line);
        }
    }
    blocks
        .into_iter()
        .filter(|(name, _)| name != "--help" && name != "--version")
        .map(|(name, text)| {
            let option = HelpOption {
                env: bracketed(&text, "[env: ").map(|v| v.split('=').next().unwrap_or("").into()),
                default: bracketed(&text, "[default: ").map(str::to_string),
            };
            (name, option)
        })
        .collect()
}

/// The option named on an option line of a help text: its long name, else its short one.
fn option_name(line: &str) -> Option<String> {
    let trimmed = line.trim_start();
    let indent = line.len() - trimmed.len();
    if !(2..=6).contains(&indent) || !trimmed.starts_with('-') {
        return None;
    }
    let names: Vec<&str> = trimmed
        .split([',', ' '])
        .filter(|word| !word.is_empty())
        .take_while(|word| word.starts_with('-'))
        .collect();
    let name = names
        .iter()
        .find(|n| n.starts_with("--"))
        .or(names.first())?;
    Some(flag_word(name))
}

/// The text after `open` up to the next `]`.
fn bracketed<'a>(text: &'a str, open: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let len = text[start..].find(']')?;
    Some(&text[start..start + len])
}

/// `--name` of a word such as `--name=VALUE` or `--name,`.
fn flag_word(word: &str) -> String {
    let dashes = word.len() - word.trim_start_matches('-').len();
    let name: String = word[dashes..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    format!("{}{name}", "-".repeat(dashes))
}

/// The subcommands in a help text's `Commands:` section, without `help`.
fn help_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim_end() != "Commands:")
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .filter(|l| l.len() - l.trim_start().len() == 2)
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The `[[bin]]` names of the crates under crates/: the user-facing binaries.
fn workspace_binaries() -> Vec<String> {
    let mut names = Vec::new();
    let crates = workspace_root().join("crates");
    for entry in std::fs::read_dir(&crates).expect("crates/ is readable") {
        let manifest = entry.expect("a crates/ entry").path().join("Cargo.toml");
        if let Ok(text) = std::fs::read_to_string(&manifest) {
            names.extend(bin_names(&text));
        }
    }
    names.sort();
    names
}

/// The `name` of each `[[bin]]` table of a Cargo.toml.
fn bin_names(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin && let Some(value) = line.strip_prefix("name") {
            let value = value.trim_start().trim_start_matches('=').trim();
            names.push(value.trim_matches('"').to_string());
        }
    }
    names
}

/// `<scope> --help` of a command scope such as `rotor-drainer run`.
fn run_help(scope: &str) -> String {
    let mut words = scope.split_whitespace();
    let bin = words.next().expect("a scope names a binary");
    let mut cmd = Command::new(binary(bin));
    // No ROTOR_* variable of whoever runs the tests may show up as an `[env: X=value]`.
    cmd.args(words)
        .arg("--help")
        .env_clear()
        .env("NO_COLOR", "1");
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "`{scope} --help` failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The help of every binary and, recursively, of each subcommand, by scope.
fn command_helps() -> BTreeMap<String, String> {
    let mut helps = BTreeMap::new();
    let mut queue = workspace_binaries();
    while let Some(scope) = queue.pop() {
        let help = run_help(&scope);
        queue.extend(
            help_commands(&help)
                .into_iter()
                .map(|c| format!("{scope} {c}")),
        );
        helps.insert(scope, help);
    }
    helps
}

/// One documented flag row.
#[derive(Debug, PartialEq)]
struct DocFlag {
    flag: String,
    env: Option<String>,
    default: String,
}

/// Reads a `| flag | environment | default | meaning |` row.
fn doc_flag(cells: &[String]) -> Result<DocFlag, String> {
    let first = code_spans(&cells[0]).into_iter().next().unwrap_or_default();
    let flag = first
        .split([' ', ','])
        .find(|w| w.starts_with("--"))
        .map(flag_word)
        .filter(|f| f.len() > 2)
        .ok_or_else(|| {
            format!(
                "the flag cell {:?} does not start with the flag in backticks, e.g. `--name VALUE`",
                cells[0]
            )
        })?;
    let env = doc_env(&cells[1])?;
    Ok(DocFlag {
        flag,
        env,
        default: cells[2].clone(),
    })
}

/// The variable of an environment cell: the one name in backticks that looks like a variable
/// (a note such as "(`;` between values)" may follow it), or none for an empty cell or a dash.
fn doc_env(cell: &str) -> Result<Option<String>, String> {
    if ["", "-", "–", "—"].contains(&cell) {
        return Ok(None);
    }
    let is_variable = |s: &String| {
        s.starts_with(|c: char| c.is_ascii_uppercase())
            && s.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    };
    let names: Vec<String> = code_spans(cell).into_iter().filter(is_variable).collect();
    match names.as_slice() {
        [name] => Ok(Some(name.clone())),
        _ => Err(format!(
            "the environment cell {cell:?} must hold one variable in backticks, or be empty or \
             a dash"
        )),
    }
}

/// The options a scope's table must list: its help's, less those its parent command also shows
/// (clap's global options, documented with the parent).
fn scope_options(helps: &BTreeMap<String, String>, scope: &str) -> BTreeMap<String, HelpOption> {
    let mut options = help_options(&helps[scope]);
    if let Some((parent, _)) = scope.rsplit_once(' ') {
        for name in help_options(&helps[parent]).keys() {
            options.remove(name);
        }
    }
    options
}

/// Compares one flag table with the help of its scope.
fn check_flag_table(
    table: &MarkedTable,
    scope: &str,
    options: &BTreeMap<String, HelpOption>,
    problems: &mut Vec<String>,
) {
    table.expect_shape(&["flag", "environment", "default", "meaning"]);
    let mut documented = BTreeSet::new();
    for row in &table.rows {
        let at = table.row_location(row);
        let doc = match doc_flag(&row.cells) {
            Ok(doc) => doc,
            Err(e) => {
                problems.push(format!("{at}: {e}"));
                continue;
            }
        };
        if !documented.insert(doc.flag.clone()) {
            problems.push(format!("{at}: {} is listed twice for `{scope}`", doc.flag));
        }
        let Some(help) = options.get(&doc.flag) else {
            problems.push(format!(
                "{at} documents {} for `{scope}`, which `{scope} --help` does not have: remove \
                 the row or add the flag",
                doc.flag
            ));
            continue;
        };
        if doc.env != help.env {
            problems.push(format!(
                "{at}: {} has environment variable {} in the docs but {} in `{scope} --help`: \
                 fix the environment cell",
                doc.flag,
                shown(&doc.env),
                shown(&help.env)
            ));
        }
        if let Some(default) = &help.default
            && !doc.default.contains(default.as_str())
        {
            problems.push(format!(
                "{at}: {} has default {:?} in the docs but `{scope} --help` says [default: \
                 {default}]: fix the default cell",
                doc.flag, doc.default
            ));
        }
    }
    for (name, help) in options {
        if !documented.contains(name) {
            problems.push(format!(
                "`{scope} --help` has {name} (env {}), which the table at {} does not list: add \
                 a row",
                shown(&help.env),
                table.location()
            ));
        }
    }
}

fn shown(env: &Option<String>) -> String {
    env.as_deref()
        .map_or("none".to_string(), |e| format!("`{e}`"))
}

#[test]
fn every_command_has_one_flag_table_matching_its_help() {
    let helps = command_helps();
    for expected in ["rotor-drainer run", "rotor-sim demo", "rotor-selector"] {
        assert!(
            helps.contains_key(expected),
            "found the commands {:?}, without `{expected}`: the [[bin]] or `Commands:` parsing \
             is broken",
            helps.keys()
        );
    }
    let tables = doc_tables::find_marked_tables(&reference_pages(), "flags");
    let mut problems = Vec::new();
    let mut by_scope: BTreeMap<&str, Vec<&MarkedTable>> = BTreeMap::new();
    for table in &tables {
        by_scope.entry(table.args.as_str()).or_default().push(table);
    }
    for (scope, tables) in &by_scope {
        if !helps.contains_key(*scope) {
            problems.push(format!(
                "{} has a flag table for `{scope}`, which is not a command of the workspace's \
                 binaries (found: {:?}): fix or remove the marker",
                tables[0].location(),
                helps.keys()
            ));
        }
    }
    for scope in helps.keys() {
        let options = scope_options(&helps, scope);
        assert!(
            !options.is_empty() || scope.contains(' '),
            "parsed no option from `{scope} --help`: has the help format changed? Fix \
             help_options in tests/tests/docs.rs"
        );
        match by_scope.get(scope.as_str()).map(Vec::as_slice) {
            None | Some([]) => problems.push(format!(
                "`{scope}` has no flag table: add `<!-- flags: {scope} -->` and a table of its \
                 options to a page under docs/"
            )),
            Some([table]) => check_flag_table(table, scope, &options, &mut problems),
            Some(several) => problems.push(format!(
                "`{scope}` has {} flag tables ({}): keep one",
                several.len(),
                several
                    .iter()
                    .map(|t| t.location())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
    assert_no_problems("the flag tables of docs/*.md against --help", &problems);
}

// --- Events ---------------------------------------------------------------------------------

/// The Events a program can post, by reason: the types seen with it, where.
#[derive(Debug, Default, PartialEq)]
struct Posted {
    /// `Normal` and/or `Warning`; empty when the source does not tell.
    types: BTreeSet<String>,
    places: Vec<String>,
}

/// The words `Normal` / `Warning` in a type cell.
fn doc_types(cell: &str) -> BTreeSet<String> {
    cell.split(|c: char| !c.is_alphanumeric())
        .filter(|w| *w == "Normal" || *w == "Warning")
        .map(str::to_string)
        .collect()
}

/// The Events each program posts, by program name.
type Programs = [(&'static str, BTreeMap<String, Posted>)];

/// The drainer's Events: every kind it posts is a `NodeEvent`.
fn drainer_events() -> BTreeMap<String, Posted> {
    let mut posted: BTreeMap<String, Posted> = BTreeMap::new();
    for event in NodeEvent::ALL {
        let entry = posted.entry(event.reason().to_string()).or_default();
        let kind = if event.is_warning() {
            "Warning"
        } else {
            "Normal"
        };
        entry.types.insert(kind.to_string());
        entry.places.push(format!("NodeEvent::{event:?}"));
    }
    posted
}

/// The selector's Events: its three reasons, all posted as Normal (its one `publish` helper in
/// crates/selector/src/apply.rs sets `EventType::Normal`).
fn selector_events() -> BTreeMap<String, Posted> {
    [
        ("TAINTED_REASON", apply::TAINTED_REASON),
        ("UNTAINTED_REASON", apply::UNTAINTED_REASON),
        ("RETIRED_REASON", apply::RETIRED_REASON),
    ]
    .into_iter()
    .map(|(name, reason)| {
        let post = Posted {
            types: BTreeSet::from(["Normal".to_string()]),
            places: vec![format!("rotor_selector::apply::{name}")],
        };
        (reason.to_string(), post)
    })
    .collect()
}

/// Compares the Events table with what the programs post, both ways.
fn check_events_table(table: &MarkedTable, programs: &Programs, problems: &mut Vec<String>) {
    let mut documented = BTreeSet::new();
    for row in &table.rows {
        let at = table.row_location(row);
        let Some(reason) = code_spans(&row.cells[0]).into_iter().next() else {
            problems.push(format!(
                "{at}: the reason cell must be the reason in backticks"
            ));
            continue;
        };
        documented.insert((reason.clone(), row.cells[2].clone()));
        if !programs
            .iter()
            .any(|(_, posted)| posted.contains_key(&reason))
        {
            problems.push(format!(
                "{at} documents Event reason {reason}, which neither program posts: remove the \
                 row or fix the reason"
            ));
            continue;
        }
        let from: Vec<&str> = ["rotor-drainer", "rotor-selector"]
            .into_iter()
            .filter(|p| row.cells[2].contains(p))
            .collect();
        for (program, posted) in programs {
            let Some(post) = posted.get(&reason) else {
                continue;
            };
            if !from.contains(program) {
                problems.push(format!(
                    "{at}: {reason} is posted by {program} ({}), the from cell says {:?}",
                    post.places.join(", "),
                    row.cells[2]
                ));
            }
            let types = doc_types(&row.cells[1]);
            if !post.types.is_empty() && types != post.types {
                problems.push(format!(
                    "{at}: {reason} has type {:?} in the docs, but {program} posts it as {:?} \
                     ({}): fix the type cell",
                    row.cells[1],
                    post.types,
                    post.places.join(", ")
                ));
            }
        }
    }
    for (program, posted) in programs {
        for (reason, post) in posted {
            let listed = documented
                .iter()
                .any(|(r, from)| r == reason && from.contains(program));
            if !listed {
                problems.push(format!(
                    "{program} posts Event {reason} ({}), which the table at {} does not list \
                     for {program}: add a row",
                    post.places.join(", "),
                    table.location()
                ));
            }
        }
    }
}

#[test]
fn the_events_table_lists_exactly_the_reasons_the_code_posts() {
    let table = doc_tables::the_one_table(
        &reference_pages(),
        "events",
        "",
        &["reason", "type", "from", "when"],
    );

    let programs = [
        ("rotor-drainer", drainer_events()),
        ("rotor-selector", selector_events()),
    ];
    let mut problems = Vec::new();
    check_events_table(&table, &programs, &mut problems);
    assert_no_problems("the Events table against the source", &problems);
}

#[test]
fn the_notices_table_lists_exactly_the_notices_the_drainer_sends() {
    let table = doc_tables::the_one_table(
        &reference_pages(),
        "notices",
        "",
        &["event", "when", "`node`"],
    );
    let documented: Vec<String> = table
        .rows
        .iter()
        .filter_map(|row| code_spans(&row.cells[0]).into_iter().next())
        .collect();
    let sent: Vec<String> = rotor_drainer::record::notify::NoticeKind::ALL
        .iter()
        .map(|k| k.name().to_string())
        .collect();
    assert_eq!(
        documented, sent,
        "the notices table in docs/drainer.md, in the code's order"
    );
}

// --- Links ----------------------------------------------------------------------------------

/// GitHub's anchor for a heading: the rendered text lowercased, without characters other than
/// letters, digits, spaces, hyphens and underscores, spaces turned into hyphens.
fn github_slug(heading: &str) -> String {
    rendered_text(heading)
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A heading's text as rendered: links and images reduced to their text, HTML tags and
/// backticks dropped.
fn rendered_text(markdown: &str) -> String {
    let mut out = String::new();
    let mut rest = markdown.trim();
    while let Some(c) = rest.chars().next() {
        if c == '<'
            && let Some(end) = rest.find('>')
        {
            rest = &rest[end + 1..];
        } else if c == ']' && rest.starts_with("](") {
            let close = matching_close(rest, 1).unwrap_or(rest.len() - 1);
            rest = &rest[close + 1..];
        } else {
            if !matches!(c, '`' | '[' | '!' | '*') {
                out.push(c);
            }
            rest = &rest[c.len_utf8()..];
        }
    }
    out.trim().to_string()
}

/// The anchors of a Markdown page: its headings' slugs (a repeated slug gets -1, -2, ...) and
/// explicit `<a id="...">` / `<a name="...">`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for heading in headings(text) {
        let slug = github_slug(&heading);
        let n = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(if *n == 0 { slug } else { format!("{slug}-{n}") });
        *n += 1;
    }
    for attr in ["id=\"", "name=\"", "id='", "name='"] {
        for (at, _) in text.match_indices(attr) {
            let quote = &attr[attr.len() - 1..];
            let value = &text[at + attr.len()..];
            let inside_a = text[..at]
                .rfind('<')
                .is_some_and(|lt| text[lt..].starts_with("<a "));
            if let (true, Some(end)) = (inside_a, value.find(quote)) {
                anchors.insert(value[..end].to_string());
            }
        }
    }
    anchors
}

/// The headings of a page, outside code blocks: ATX (`## Title ##`) and setext (a line under
/// a paragraph line made of `=` or `-`).
fn headings(text: &str) -> Vec<String> {
    let prose = prose_lines(text);
    let mut found = Vec::new();
    for (k, (index, line)) in prose.iter().enumerate() {
        let trimmed = line.trim_start();
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        let after = &trimmed[hashes..];
        if (1..=6).contains(&hashes)
            && line.len() - trimmed.len() <= 3
            && (after.is_empty() || after.starts_with([' ', '\t']))
        {
            let title = after.trim().trim_end_matches('#').trim_end();
            found.push(title.to_string());
            continue;
        }
        let underline = line.trim();
        let is_underline = !underline.is_empty()
            && (underline.chars().all(|c| c == '=') || underline.chars().all(|c| c == '-'));
        if is_underline && k > 0 {
            let (previous_index, previous) = prose[k - 1];
            let paragraph = !previous.trim().is_empty()
                && !previous
                    .trim_start()
                    .starts_with(['#', '|', '-', '*', '>', '<'])
                && previous_index + 1 == *index;
            if paragraph {
                found.push(previous.trim().to_string());
            }
        }
    }
    found
}

/// A link found in a page: its 1-based line and its target as written.
#[derive(Debug, PartialEq)]
struct Link {
    line: usize,
    target: String,
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// The index of the `)` that closes the `(` at byte `open` of `text`, nested pairs skipped.
fn matching_close(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The link targets of a Markdown page, outside code blocks and inline code: inline links and
/// images (`[text](target "title")`) and reference definitions (`[name]: target`).
fn links(text: &str) -> Vec<Link> {
    let prose = prose_without_code(text);
    let mut found = Vec::new();
    for (at, _) in prose.match_indices("](") {
        let open = at + 1;
        let Some(close) = matching_close(&prose, open) else {
            continue;
        };
        let target = link_destination(&prose[open + 1..close]);
        found.push(Link {
            line: line_of(&prose, at),
            target,
        });
    }
    for (index, line) in prose.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('[')
            && let Some((label, target)) = rest.split_once("]:")
            && !label.is_empty()
            && !label.contains(']')
        {
            found.push(Link {
                line: index + 1,
                target: link_destination(target),
            });
        }
    }
    found
}

/// The destination of a link's `(...)` contents: `<...>` or the text up to a title.
fn link_destination(inside: &str) -> String {
    let inside = inside.trim();
    if let Some(angled) = inside.strip_prefix('<') {
        return angled.split('>').next().unwrap_or("").to_string();
    }
    inside.split_whitespace().next().unwrap_or("").to_string()
}

/// The page with fenced code blocks emptied and inline code spans blanked (line breaks kept),
/// so that only real links remain. Code spans are paired within a paragraph, as Markdown does.
fn prose_without_code(text: &str) -> String {
    let keep: BTreeSet<usize> = prose_lines(text).into_iter().map(|(i, _)| i).collect();
    let lines: Vec<&str> = text
        .lines()
        .enumerate()
        .map(|(i, l)| if keep.contains(&i) { l } else { "" })
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let end = (i..lines.len())
            .find(|&j| lines[j].trim().is_empty())
            .unwrap_or(lines.len());
        if end == i {
            out.push(String::new());
            i += 1;
        } else {
            out.push(blank_code_spans(&lines[i..end].join("\n")));
            i = end;
        }
    }
    out.join("\n")
}

/// The Markdown files of the repository (tracked, or new and not ignored), relative to the
/// workspace root; every file of the repository, to tell whether a link target would exist on
/// GitHub.
fn repository_files() -> BTreeSet<PathBuf> {
    let root = workspace_root();
    let out = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(&root)
        .output()
        .expect("git runs (the link check lists the repository's files with git ls-files)");
    assert!(
        out.status.success(),
        "git ls-files failed in {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter(|p| !p.is_empty() && root.join(p).exists())
        .map(PathBuf::from)
        .collect()
}

/// `base`/`relative` with `.` and `..` resolved, without touching the file system; None when
/// it climbs out of the repository.
fn join_normalized(base: &Path, relative: &str) -> Option<PathBuf> {
    let mut path = if relative.starts_with('/') {
        PathBuf::new()
    } else {
        base.to_path_buf()
    };
    for component in Path::new(relative.trim_start_matches('/')).components() {
        match component {
            // pop() climbs one level; at the top there is none left to climb.
            Component::ParentDir if !path.pop() => return None,
            Component::Normal(part) => path.push(part),
            _ => {}
        }
    }
    Some(path)
}

/// What is wrong with one link of `page` (a path relative to the root), if anything.
fn check_link(page: &Path, target: &str, files: &BTreeSet<PathBuf>) -> Option<String> {
    if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
    let path = path.replace("%20", " ");
    let resolved = if path.is_empty() {
        page.to_path_buf()
    } else {
        let dir = page.parent().unwrap_or(Path::new(""));
        let Some(resolved) = join_normalized(dir, &path) else {
            return Some(format!(
                "links to {target}, outside the repository: fix the path"
            ));
        };
        resolved
    };
    let is_file = files.contains(&resolved);
    let is_dir = !is_file && files.iter().any(|f| f.starts_with(&resolved));
    if !is_file && !is_dir {
        return Some(format!(
            "links to {target}, but {} is not in the repository: fix the path",
            resolved.display()
        ));
    }
    if fragment.is_empty() {
        return None;
    }
    let markdown = if is_dir {
        resolved.join("README.md")
    } else {
        resolved.clone()
    };
    if markdown.extension().is_none_or(|e| e != "md") || !files.contains(&markdown) {
        return None; // Line anchors of source files and the like: not checked.
    }
    let text = std::fs::read_to_string(workspace_root().join(&markdown)).ok()?;
    let anchors = anchors(&text);
    if anchors.contains(fragment) {
        return None;
    }
    Some(format!(
        "links to {target}, but {} has no heading with anchor #{fragment} (its anchors: {}): \
         fix the fragment or the heading",
        markdown.display(),
        anchors.into_iter().collect::<Vec<_>>().join(", ")
    ))
}

#[test]
fn every_relative_link_and_anchor_in_the_markdown_resolves() {
    let files = repository_files();
    let pages: Vec<&PathBuf> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    assert!(
        pages.iter().any(|p| p.as_os_str() == "README.md"),
        "README.md is not among the repository's Markdown files {pages:?}"
    );
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages {
        let text = std::fs::read_to_string(workspace_root().join(page)).expect("readable page");
        for link in links(&text) {
            checked += 1;
            if let Some(problem) = check_link(page, &link.target, &files) {
                problems.push(format!("{}:{} {problem}", page.display(), link.line));
            }
        }
    }
    assert!(
        checked > 0,
        "found no link in any Markdown file: links() is broken"
    );
    assert_no_problems("links in the repository's Markdown", &problems);
}

#[test]
fn every_docs_page_is_linked_from_the_readme() {
    let files = repository_files();
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README.md");
    let linked: BTreeSet<PathBuf> = links(&readme)
        .into_iter()
        .filter(|l| !l.target.contains("://"))
        .filter_map(|l| join_normalized(Path::new(""), l.target.split('#').next().unwrap_or("")))
        .collect();
    let docs: Vec<&PathBuf> = files
        .iter()
        .filter(|p| p.starts_with("docs") && p.extension().is_some_and(|e| e == "md"))
        .collect();
    assert!(
        !docs.is_empty(),
        "there is no docs/*.md page in the repository"
    );
    let problems: Vec<String> = docs
        .into_iter()
        .filter(|page| !linked.contains(*page))
        .map(|page| {
            format!(
                "{} is not linked from README.md: add it to the README's Documentation table",
                page.display()
            )
        })
        .collect();
    assert_no_problems("README.md as the index of docs/", &problems);
}

// --- Benchmark figures ----------------------------------------------------------------------

/// The figures a piece of prose quotes: decimal numbers (`1.48`, `63.5`), not parts of dotted
/// versions (`v1.36.3`), and whole numbers of requests or pod-seconds (`70 API requests`,
/// `118 pod-seconds`). With `all_whole`, every whole number too: what a benchmark section holds.
fn quoted_figures(prose: &str, all_whole: bool) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = prose.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        let run = prose[start..i].trim_end_matches('.');
        let before = prose[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-')) {
            continue;
        }
        let after = &prose[start + run.len()..];
        match run.matches('.').count() {
            1 => {
                found.insert(run.to_string());
            }
            0 if all_whole
                || [" requests", " API requests", " pod-seconds"]
                    .iter()
                    .any(|unit| after.starts_with(unit)) =>
            {
                found.insert(run.to_string());
            }
            _ => {}
        }
    }
    found
}

/// A page's prose in blocks: paragraphs, list items and table rows, each on one line, with
/// code spans blanked and link destinations kept apart (they are not quoted figures).
fn prose_blocks(text: &str) -> Vec<(String, Vec<String>)> {
    let prose = prose_without_code(text);
    let mut blocks: Vec<Vec<&str>> = Vec::new();
    let mut open = false;
    for line in prose.lines() {
        let trimmed = line.trim_start();
        let starts_block = trimmed.starts_with(['-', '*', '|', '#'])
            || trimmed
                .split_once(". ")
                .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty());
        if trimmed.is_empty() {
            open = false;
            continue;
        }
        if !open || starts_block {
            blocks.push(Vec::new());
        }
        blocks.last_mut().expect("a block").push(trimmed);
        open = true;
    }
    blocks
        .into_iter()
        .map(|lines| {
            let joined = lines.join(" ");
            let targets = links(&joined).into_iter().map(|l| l.target).collect();
            (without_link_destinations(&joined), targets)
        })
        .collect()
}

/// `text` with every `](destination)` reduced to `]`.
fn without_link_destinations(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        out.push_str(&rest[..=at]);
        let close = matching_close(rest, at + 1).unwrap_or(rest.len() - 1);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// The section of `text` under the heading whose anchor is `anchor`, to the next heading of
/// the same or a higher level; `None` when no heading has that anchor.
fn section<'a>(text: &'a str, anchor: &str) -> Option<&'a str> {
    let level = |line: &str| {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        ((1..=6).contains(&hashes) && line[hashes..].starts_with(' ')).then_some(hashes)
    };
    let mut start = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(depth) = level(line) {
            match start {
                Some((begin, open_depth)) if depth <= open_depth => {
                    return Some(&text[begin..offset]);
                }
                None if github_slug(line.trim_start_matches('#')) == anchor => {
                    start = Some((offset, depth));
                }
                _ => {}
            }
        }
        offset += line.len();
    }
    start.map(|(begin, _)| &text[begin..])
}

/// Where a figure quoted on another page may come from: the targets table, or the section of
/// docs/benchmarks.md the quoting block links to (the whole page for a link without anchor).
struct BenchmarkFigures {
    page: String,
    targets: BTreeSet<String>,
}

impl BenchmarkFigures {
    fn read() -> BenchmarkFigures {
        let page = std::fs::read_to_string(workspace_root().join("docs/benchmarks.md"))
            .expect("docs/benchmarks.md");
        let targets = section(&page, "where-the-targets-stand")
            .map(|table| quoted_figures(table, true))
            .expect("docs/benchmarks.md has a section \"Where the targets stand\"");
        BenchmarkFigures { page, targets }
    }

    /// The figures of `quoted` that neither the targets table nor the linked section holds.
    fn unsupported(&self, quoted: &BTreeSet<String>, anchor: Option<&str>) -> Vec<String> {
        let linked = match anchor {
            Some(anchor) => section(&self.page, anchor).map(|s| quoted_figures(s, true)),
            None => Some(quoted_figures(&self.page, true)),
        }
        .unwrap_or_default();
        quoted
            .iter()
            .filter(|f| !self.targets.contains(*f) && !linked.contains(*f))
            .cloned()
            .collect()
    }
}

/// A figure quoted outside docs/benchmarks.md must be one it holds, so a page cannot go on
/// quoting a figure the benchmarks have moved past: the README's Benchmarks section quotes only
/// the targets table, and any other paragraph, list item or table row that links the benchmarks
/// quotes only the targets table or the section it links.
#[test]
fn every_benchmark_figure_quoted_elsewhere_is_one_the_benchmarks_page_holds() {
    let figures = BenchmarkFigures::read();
    assert!(
        figures.targets.contains("0.5") && figures.targets.len() > 10,
        "the targets table's figures were not read: {:?}",
        figures.targets
    );
    let mut problems = Vec::new();
    let mut quoted_in_all = 0;
    for page in reference_pages() {
        if page.path == "docs/benchmarks.md" {
            continue;
        }
        let readme_summary = if page.path == "README.md" {
            section(&page.text, "benchmarks")
        } else {
            None
        };
        if let Some(summary) = readme_summary {
            for (block, _) in prose_blocks(summary) {
                let quoted = quoted_figures(&block, false);
                quoted_in_all += quoted.len();
                let missing: Vec<&String> = quoted
                    .iter()
                    .filter(|f| !figures.targets.contains(*f))
                    .collect();
                if !missing.is_empty() {
                    problems.push(format!(
                        "README.md, Benchmarks: {missing:?} are not in docs/benchmarks.md's table \"Where the targets stand\": {block}"
                    ));
                }
            }
        }
        for (block, targets) in prose_blocks(&page.text) {
            let Some(target) = targets.iter().find(|t| {
                let file = t.split('#').next().unwrap_or_default();
                file == "benchmarks.md" || file.ends_with("/benchmarks.md")
            }) else {
                continue;
            };
            let quoted = quoted_figures(&block, false);
            quoted_in_all += quoted.len();
            let missing = figures.unsupported(&quoted, target.split_once('#').map(|(_, a)| a));
            if !missing.is_empty() {
                problems.push(format!(
                    "{}: {missing:?} are neither in docs/benchmarks.md's targets table nor in the section it links ({target}): {block}",
                    page.path
                ));
            }
        }
    }
    assert!(
        quoted_in_all > 5,
        "found hardly any quoted figure ({quoted_in_all}): the reading is broken"
    );
    assert_no_problems(
        "benchmark figures quoted outside docs/benchmarks.md",
        &problems,
    );
}

#[test]
fn quoted_figures_are_decimals_and_counts_of_requests_not_versions() {
    let found = |text: &str| quoted_figures(text, false).into_iter().collect::<Vec<_>>();
    assert_eq!(found("1.48x the bound, 63.5 s."), ["1.48", "63.5"]);
    assert_eq!(
        found("Kubernetes v1.36.3 and 1.36.3, node-1.5"),
        Vec::<String>::new()
    );
    assert_eq!(
        found("about 70 API requests, 118 pod-seconds, 50 nodes"),
        ["118", "70"]
    );
    assert_eq!(quoted_figures("| 50 | 20 |", true).len(), 2);
}

#[test]
fn sections_run_to_the_next_heading_of_their_level() {
    let page = "# A\nintro 1.0\n## Where it stands\nx 2.5\n### Detail\ny 3.5\n## Next\nz 4.5\n";
    let stands = section(page, "where-it-stands").expect("found");
    assert!(stands.contains("2.5") && stands.contains("3.5") && !stands.contains("4.5"));
    assert_eq!(section(page, "nowhere"), None);
}

// --- Wording and the README's shape -----------------------------------------------------------

/// The references to the issue tracker in `text`: `issue 12`, `Issues #3`, or a bare `#12`
/// outside URLs and link targets (HTML entities such as `&#39;` aside), by line.
fn issue_references(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = without_urls(line);
        let lower = line.to_lowercase();
        for (at, _) in lower.match_indices("issue") {
            let boundary = !lower[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
            let rest = lower[at + "issue".len()..]
                .strip_prefix('s')
                .unwrap_or(&lower[at + 5..]);
            let spaced = rest.trim_start();
            let number = spaced.strip_prefix('#').unwrap_or(spaced);
            if boundary
                && spaced.len() < rest.len()
                && number.starts_with(|c: char| c.is_ascii_digit())
            {
                found.push((index + 1, line[at..].chars().take(20).collect()));
            }
        }
        for (at, _) in line.match_indices('#') {
            let digit = line[at + 1..].starts_with(|c: char| c.is_ascii_digit());
            if digit && !line[..at].ends_with('&') {
                found.push((index + 1, line[at..].chars().take(12).collect()));
            }
        }
    }
    found
}

/// A line without its URLs (`http(s)://...` up to a space, `)` or `>`) and link targets
/// (`](...)`).
fn without_urls(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    loop {
        let next = ["http://", "https://", "]("]
            .iter()
            .filter_map(|m| rest.find(m))
            .min();
        let Some(at) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let end = after
            .find([' ', ')', '>', '\t'])
            .map_or(after.len(), |n| n + usize::from(after.starts_with("](")));
        out.push(' ');
        rest = &after[end..];
    }
}

#[test]
fn the_docs_do_not_cite_issue_numbers() {
    let mut problems = Vec::new();
    for page in reference_pages() {
        for (line, snippet) in issue_references(&page.text) {
            problems.push(format!(
                "{}:{line}: {snippet:?} refers to the issue tracker: say what the issue is \
                 about instead",
                page.path
            ));
        }
    }
    assert_no_problems("issue references in README.md and docs/*.md", &problems);
}

/// The last command line of a shell script: its last line that is neither blank nor a comment.
fn last_command(script: &str) -> Option<&str> {
    script
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !l.starts_with('#'))
}

/// The 1-based line of the first line of a ```sh block that, without a trailing `# comment`,
/// starts with `command` (`exact`: is `command`).
fn sh_line(text: &str, command: &str, exact: bool) -> Option<usize> {
    fenced_blocks(text)
        .into_iter()
        .filter(|b| {
            matches!(
                b.info.split_whitespace().next(),
                Some("sh" | "bash" | "shell")
            )
        })
        .find_map(|block| {
            block
                .lines
                .iter()
                .position(|line| {
                    let line = line.split(" #").next().unwrap_or("").trim();
                    if exact {
                        line == command
                    } else {
                        line.starts_with(command)
                    }
                })
                .map(|i| block.line + 1 + i)
        })
}

#[test]
fn the_readme_is_short_and_starts_with_the_newcomer_commands() {
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    let test_command = last_command(&ci).expect(".ci/run has a command");
    let mut problems = Vec::new();
    let lines = readme.lines().count();
    if lines > 150 {
        problems.push(format!(
            "README.md has {lines} lines, at most 150 keep it a front page: move reference \
             material to docs/"
        ));
    }
    let demo = "bash examples/rotate-demo.sh";
    match sh_line(&readme, demo, false) {
        Some(line) if line <= 60 => {}
        found => problems.push(format!(
            "README.md must show `{demo}` in a ```sh block within its first 60 lines; found at \
             line {found:?}"
        )),
    }
    match sh_line(&readme, test_command, true) {
        Some(line) if line <= 60 => {}
        found => problems.push(format!(
            "README.md must show the test command `.ci/run` runs, `{test_command}`, as a line \
             of a ```sh block within its first 60 lines; found at line {found:?}: copy it from \
             the last line of .ci/run"
        )),
    }
    assert_no_problems("README.md's shape", &problems);
}

// --- The parsers, on inline text --------------------------------------------------------------

const LONG_HELP: &str = "\
Where to find the cluster.

Usage: rotor-drainer [OPTIONS] <COMMAND>

Commands:
  run     Run the drainer
  status  Print the nodes
  help    Print this message or the help of the given subcommand(s)

Options:
      --log-format <LOG_FORMAT>
          Log format written to stderr

          Possible values:
          - text: Human-readable lines
          - json: One JSON object per line
          \n          [env: ROTOR_LOG_FORMAT=json]
          [default: text]

      --kubeconfig <PATH>
          Kubeconfig file to use
          \n          [env: ROTOR_KUBECONFIG=]

  -n, --dry-run
          Nothing is written

  -h, --help
          Print help (see a summary with '-h')

  -V, --version
          Print version
";

const SHORT_HELP: &str = "\
Usage: rotor-drainer status [OPTIONS]

Options:
      --max-concurrent <MAX_CONCURRENT>
          Nodes drained at the same time [env: ROTOR_MAX_CONCURRENT=] [default: 1]
      --output <OUTPUT>  [default: text] [possible values: text, json]
  -q                     Quiet
  -h, --help             Print help
";

#[test]
fn help_options_reads_long_and_short_help() {
    let long = help_options(LONG_HELP);
    assert_eq!(
        long.keys().collect::<Vec<_>>(),
        ["--dry-run", "--kubeconfig", "--log-format"]
    );
    assert_eq!(
        long["--log-format"],
        HelpOption {
            env: Some("ROTOR_LOG_FORMAT".into()),
            default: Some("text".into())
        }
    );
    assert_eq!(
        long["--kubeconfig"].env.as_deref(),
        Some("ROTOR_KUBECONFIG")
    );
    assert_eq!(long["--dry-run"], HelpOption::default());

    let short = help_options(SHORT_HELP);
    assert_eq!(
        short.keys().collect::<Vec<_>>(),
        ["--max-concurrent", "--output", "-q"]
    );
    assert_eq!(
        short["--max-concurrent"].env.as_deref(),
        Some("ROTOR_MAX_CONCURRENT")
    );
    assert_eq!(short["--max-concurrent"].default.as_deref(), Some("1"));
    assert_eq!(short["--output"].env, None);
}

#[test]
fn help_commands_and_bin_names() {
    assert_eq!(help_commands(LONG_HELP), ["run", "status"]);
    assert!(help_commands(SHORT_HELP).is_empty());
    let manifest = "[package]\nname = \"rotor-x\"\n\n[[bin]]\nname = \"rotor-x\"\npath = \
                    \"src/main.rs\"\n\n[dependencies]\nname = \"no\"\n";
    assert_eq!(bin_names(manifest), ["rotor-x"]);
}

#[test]
fn doc_flag_reads_a_row() {
    let row = |cells: [&str; 4]| cells.map(String::from);
    assert_eq!(
        doc_flag(&row([
            "`--max-tainted N|P%`",
            "`ROTOR_MAX_TAINTED`",
            "`1`",
            "x"
        ]))
        .unwrap(),
        DocFlag {
            flag: "--max-tainted".into(),
            env: Some("ROTOR_MAX_TAINTED".into()),
            default: "`1`".into()
        }
    );
    let repeatable = doc_flag(&row(["`--group NAME` (repeatable)", "—", "", "x"])).unwrap();
    assert_eq!(
        (repeatable.flag.as_str(), repeatable.env),
        ("--group", None)
    );
    assert_eq!(
        doc_flag(&row(["`-h, --help`", "", "", ""])).unwrap().flag,
        "--help"
    );
    assert!(
        doc_flag(&row(["--plain", "", "", ""])).is_err(),
        "no backticks"
    );
    assert!(
        doc_flag(&row(["`--x`", "ROTOR_X", "", ""])).is_err(),
        "env without backticks"
    );
    assert!(
        doc_flag(&row(["`--x`", "`A` or `B`", "", ""])).is_err(),
        "two variables"
    );
    let noted = doc_flag(&row([
        "`--window W`",
        "`ROTOR_WINDOWS` (`;` between)",
        "",
        "",
    ]));
    assert_eq!(noted.unwrap().env.as_deref(), Some("ROTOR_WINDOWS"));
}

#[test]
fn github_slugs() {
    assert_eq!(
        github_slug("Surge: room before the evictions"),
        "surge-room-before-the-evictions"
    );
    assert_eq!(
        github_slug("The simulated cluster (`rotor-sim`)"),
        "the-simulated-cluster-rotor-sim"
    );
    assert_eq!(
        github_slug("`--max-surge` and `rotor_drainer_x`"),
        "--max-surge-and-rotor_drainer_x"
    );
    assert_eq!(
        github_slug("See [the demo](demo.md#x) now"),
        "see-the-demo-now"
    );
    assert_eq!(github_slug("A -- B, 2.0!"), "a----b-20");
}

#[test]
fn anchors_number_repeated_headings_and_read_explicit_ones() {
    let page = "# Title\n\n## Flags\n\ntext\n\n### Flags\n\n```\n# Not a heading\n```\n\nSetext\n------\n\n<a id=\"kept\"></a>\n## Flags ##\n";
    let anchors = anchors(page);
    let expected = ["flags", "flags-1", "flags-2", "kept", "setext", "title"];
    assert_eq!(
        anchors.iter().map(String::as_str).collect::<Vec<_>>(),
        expected
    );
}

#[test]
fn links_skip_code_and_read_titles_and_definitions() {
    let page = "See [a](docs/a.md#x \"title\") and `[b](not/a/link.md)` and\n``[c](no.md)``.\n\n```md\n[d](no.md)\n```\n![img](<img/a b.png>) [e](https://example.com)\nthe `code\nspan [f](no.md)` ends [g](#local)\n\n[ref]: docs/ref.md\n";
    let found: Vec<(usize, String)> = links(page)
        .into_iter()
        .map(|l| (l.line, l.target))
        .collect();
    assert_eq!(
        found,
        [
            (1, "docs/a.md#x".to_string()),
            (7, "img/a b.png".to_string()),
            (7, "https://example.com".to_string()),
            (9, "#local".to_string()),
            (11, "docs/ref.md".to_string())
        ]
    );
}

#[test]
fn check_link_resolves_paths_and_fragments() {
    let files: BTreeSet<PathBuf> = ["README.md", "docs/a.md", "deploy/base/x.yaml"]
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let page = Path::new("docs/a.md");
    assert_eq!(check_link(page, "../deploy/base/x.yaml", &files), None);
    assert_eq!(check_link(page, "../deploy/", &files), None);
    assert_eq!(check_link(page, "https://x.y/z#q", &files), None);
    assert!(check_link(page, "b.md", &files).is_some());
    assert!(check_link(page, "../../outside.md", &files).is_some_and(|p| p.contains("outside")));
    assert_eq!(
        check_link(page, "#missing", &files),
        None,
        "docs/a.md is not on disk here"
    );
    assert_eq!(
        join_normalized(Path::new("docs"), "../README.md"),
        Some("README.md".into())
    );
    assert_eq!(join_normalized(Path::new("docs"), "../../x"), None);
}

#[test]
fn issue_references_are_found_outside_urls() {
    let text = "Fixed in issue 12.\nSee Issues #3, and #45.\nhttps://github.com/x/y/issues/7#issuecomment-1 and [a](#1-intro)\nreissue 4 tissues, &#39; issue-free\n";
    let lines: Vec<usize> = issue_references(text).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, [1, 2, 2, 2], "issue 12; Issues #3, #3 and #45");
}

#[test]
fn the_last_command_and_sh_lines() {
    let script = "#!/bin/sh\nset -e\necho hi\ntools/build.sh && cargo test --workspace\n# done\n\n";
    assert_eq!(
        last_command(script),
        Some("tools/build.sh && cargo test --workspace")
    );
    let readme = "# x\n\n```sh\nbash examples/rotate-demo.sh   # demo\n```\n\n```\ncargo test\n```\n\n```sh\ncargo test\n```\n";
    assert_eq!(
        sh_line(readme, "bash examples/rotate-demo.sh", false),
        Some(4)
    );
    assert_eq!(
        sh_line(readme, "cargo test", true),
        Some(12),
        "the plain block is no sh block"
    );
    assert_eq!(sh_line(readme, "cargo", true), None);
}

/// A one-table page of `kind` for the checks' own tests.
fn inline_table(kind: &str, page: &str) -> MarkedTable {
    let mut tables = doc_tables::marked_tables("docs/t.md", page, kind).expect("a table");
    tables.remove(0)
}

#[test]
fn check_flag_table_reports_each_kind_of_mismatch() {
    let table = inline_table(
        "flags",
        "<!-- flags: rotor-x run -->\n\
         | flag | environment | default | meaning |\n|---|---|---|---|\n\
         | `--same N` | `ROTOR_SAME` | `1` | fine |\n\
         | `--wrong-env` | `ROTOR_OTHER` | | env differs |\n\
         | `--no-env` | | | help has one |\n\
         | `--wrong-default D` | - | `5m` | default differs |\n\
         | `--invented` | | | not in help |\n\
         | `--same N` | `ROTOR_SAME` | `1` | twice |\n",
    );
    let help = [
        "Usage: rotor-x run [OPTIONS]",
        "",
        "Options:",
        "      --same <N>  x [env: ROTOR_SAME=] [default: 1]",
        "      --wrong-env  x [env: ROTOR_WRONG_ENV=]",
        "      --no-env  x [env: ROTOR_NO_ENV=]",
        "      --wrong-default <D>  x [default: 10m]",
        "      --undocumented  x",
        "  -h, --help  Print help",
    ]
    .join("\n");
    let mut problems = Vec::new();
    check_flag_table(&table, "rotor-x run", &help_options(&help), &mut problems);
    let expected = [
        "docs/t.md:5: --wrong-env has environment variable `ROTOR_OTHER` in the docs but `ROTOR_WRONG_ENV`",
        "docs/t.md:6: --no-env has environment variable none in the docs but `ROTOR_NO_ENV`",
        "docs/t.md:7: --wrong-default has default \"`5m`\" in the docs but `rotor-x run --help` says [default: 10m]",
        "docs/t.md:8 documents --invented for `rotor-x run`, which `rotor-x run --help` does not have",
        "docs/t.md:9: --same is listed twice",
        "`rotor-x run --help` has --undocumented (env none), which the table at docs/t.md:1 does not list",
    ];
    doc_tables::assert_problems_start_with(&problems, &expected);
}

#[test]
fn check_events_table_reports_each_kind_of_mismatch() {
    let table = inline_table(
        "events",
        "<!-- events -->\n| reason | type | from | when |\n|---|---|---|---|\n\
         | `Drained` | Normal | rotor-drainer | fine |\n\
         | `SurgeSkipped` | Normal | rotor-drainer | one type missing |\n\
         | `DrainTaintAdded` | Normal | rotor-drainer | wrong program |\n\
         | `Invented` | Warning | rotor-drainer | not in the code |\n",
    );
    let posted = |types: &[&str]| Posted {
        types: types.iter().map(|t| t.to_string()).collect(),
        places: vec!["x.rs:1".into()],
    };
    let programs = [
        (
            "rotor-drainer",
            BTreeMap::from([
                ("Drained".to_string(), posted(&["Normal"])),
                ("SurgeSkipped".to_string(), posted(&["Normal", "Warning"])),
                ("DrainFailed".to_string(), posted(&["Warning"])),
            ]),
        ),
        (
            "rotor-selector",
            BTreeMap::from([("DrainTaintAdded".to_string(), posted(&["Normal"]))]),
        ),
    ];
    let mut problems = Vec::new();
    check_events_table(&table, &programs, &mut problems);
    let expected = [
        "docs/t.md:5: SurgeSkipped has type \"Normal\" in the docs, but rotor-drainer posts it as {\"Normal\", \"Warning\"}",
        "docs/t.md:6: DrainTaintAdded is posted by rotor-selector",
        "docs/t.md:7 documents Event reason Invented, which neither program posts",
        "rotor-drainer posts Event DrainFailed (x.rs:1), which the table at docs/t.md:1 does not list",
        "rotor-selector posts Event DrainTaintAdded (x.rs:1), which the table at docs/t.md:1 does not list",
    ];
    doc_tables::assert_problems_start_with(&problems, &expected);
}

/// The ratios a page quotes (`1.24x`, `0.5x`): each number followed by `x` and then no letter or
/// digit, with its line number.
fn quoted_ratios(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let starts = bytes[i].is_ascii_digit()
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'.'));
            if !starts {
                i += 1;
                continue;
            }
            let mut end = i;
            while end < bytes.len() && (bytes[end].is_ascii_digit() || bytes[end] == b'.') {
                end += 1;
            }
            let number = &line[i..end];
            let after_x = bytes.get(end) == Some(&b'x')
                && bytes
                    .get(end + 1)
                    .is_none_or(|c| !c.is_ascii_alphanumeric());
            if after_x && number.contains('.') && !number.ends_with('.') {
                found.push((n + 1, number.to_string()));
            }
            i = end.max(i + 1);
        }
    }
    found
}

#[test]
fn ratios_are_found_in_a_page_and_only_where_a_number_ends_in_x() {
    let text = "rotor 1.24x the bound, 0.5x the loop\n0x10, 3.2xl, a1.5x, 1.10x.\n2x";
    assert_eq!(
        quoted_ratios(text),
        [
            (1, "1.24".to_string()),
            (1, "0.5".to_string()),
            (2, "1.10".to_string())
        ]
    );
}

/// docs/benchmarks.md cut at its headings: each section's GitHub anchor and its text (from its
/// heading to the next heading of any level).
fn benchmark_sections(text: &str) -> BTreeMap<String, String> {
    let mut sections: BTreeMap<String, String> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(title) = line
            .strip_prefix('#')
            .map(|t| t.trim_start_matches('#').trim())
        {
            current = title
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect();
        }
        let section = sections.entry(current.clone()).or_default();
        section.push_str(line);
        section.push('\n');
    }
    sections
}

/// Every number in `text` with a decimal point ("1.24", whether or not an x follows).
fn decimals(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|w| w.contains('.') && !w.starts_with('.') && !w.ends_with('.'))
        .map(str::to_string)
        .collect()
}

/// A ratio quoted away from docs/benchmarks.md must be one that its table of where the targets
/// stand holds, or that a section of it the page links to holds: a page that quotes an old
/// run's figure (as docs/limitations.md once quoted 2.01x after the table had moved on to 1.48)
/// fails here. A page that does not want to follow the figures links the table instead.
#[test]
fn every_ratio_quoted_in_the_docs_is_one_the_benchmarks_hold() {
    let root = workspace_root();
    let benchmarks =
        std::fs::read_to_string(root.join("docs/benchmarks.md")).expect("read docs/benchmarks.md");
    let sections = benchmark_sections(&benchmarks);
    let table = sections
        .get("where-the-targets-stand")
        .expect("docs/benchmarks.md has a section \"Where the targets stand\"");
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs"))
        .expect("list docs/")
        .flatten()
    {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "md") && !path.ends_with("benchmarks.md") {
            pages.push(path);
        }
    }
    pages.sort();
    let mut stale = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("read a page");
        let mut held = decimals(table);
        for (anchor, section) in &sections {
            if text.contains(&format!("benchmarks.md#{anchor})")) {
                held.extend(decimals(section));
            }
        }
        for (line, number) in quoted_ratios(&text) {
            if !held.contains(&number) {
                let name = page.strip_prefix(&root).unwrap_or(page).display();
                stale.push(format!("{name}:{line}: {number}x"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "ratios that neither the table of docs/benchmarks.md nor a section the page links holds (quote the current figures, or link the table instead): {stale:?}"
    );
}
