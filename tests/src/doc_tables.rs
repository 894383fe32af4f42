//! The reference tables of rotor's Markdown docs, read the way the doc tests check them.
//!
//! A reference table is a GitHub table right after an HTML comment marker line such as
//! `<!-- flags: rotor-drainer run -->` (blank lines in between are allowed): a header row, a
//! separator row, then body rows. Cells are split on unescaped `|` only, so `` `N\|P%` `` stays
//! one cell (and reads `N|P%`).
//!
//! The tests that keep the docs honest find the tables by their marker and compare them with
//! what they document: `tests/tests/docs.rs` (flags, Events, links), the drainer's
//! `tests/metrics_docs.rs` (metrics) and rotor-core's `tests/contract_docs.rs` (taint and
//! annotations). rotor-core's test includes this file by path: taking this crate as a
//! dev-dependency would build the whole workspace for rotor-core's tests.

use std::path::Path;

/// A Markdown page: its path relative to the workspace root (for messages) and its text.
pub struct Page {
    pub path: String,
    pub text: String,
}

/// README.md and every `docs/*.md` of the workspace at `root`, sorted by path: the pages reference
/// tables and the names they document may appear in. Panics when `docs/` is missing: every check
/// on the pages would then pass or fail for the wrong reason.
pub fn reference_pages(root: &Path) -> Vec<Page> {
    let entries = std::fs::read_dir(root.join("docs")).unwrap_or_else(|e| {
        panic!(
            "cannot read {}/docs ({e}): the reference pages (flags, Events, metrics, \
             annotations) live there",
            root.display()
        )
    });
    let mut docs: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    std::iter::once("README.md".to_string())
        .chain(docs)
        .map(|path| {
            let text = std::fs::read_to_string(root.join(&path))
                .unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
            Page { path, text }
        })
        .collect()
}

/// One body row of a table: its 1-based line number and its cells (unescaped, trimmed).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub line: usize,
    pub cells: Vec<String>,
}

/// A table found after a marker comment.
#[derive(Debug, Clone, PartialEq)]
pub struct MarkedTable {
    /// The page it is on, e.g. `docs/drainer.md`.
    pub page: String,
    /// The marker's text after the kind and its colon, e.g. `rotor-drainer run`; empty for
    /// `<!-- events -->`.
    pub args: String,
    /// 1-based line of the marker.
    pub line: usize,
    pub header: Vec<String>,
    pub rows: Vec<Row>,
}

impl MarkedTable {
    /// `page:line` of the marker, for messages.
    pub fn location(&self) -> String {
        format!("{}:{}", self.page, self.line)
    }

    /// `page:line` of a row, for messages.
    pub fn row_location(&self, row: &Row) -> String {
        format!("{}:{}", self.page, row.line)
    }

    /// Panics unless the header is `columns` (case-insensitive) and the table has rows: a table
    /// in another shape, or none, would make every check on it vacuous.
    pub fn expect_shape(&self, columns: &[&str]) {
        let header: Vec<String> = self.header.iter().map(|c| c.to_lowercase()).collect();
        assert_eq!(
            header,
            columns,
            "{}: the table after this marker has columns {:?}; the doc convention is {:?}: fix \
             the header row",
            self.location(),
            self.header,
            columns
        );
        assert!(
            !self.rows.is_empty(),
            "{}: the table after this marker has no body rows: document the entries or remove \
             the marker",
            self.location()
        );
        for row in &self.rows {
            assert_eq!(
                row.cells.len(),
                columns.len(),
                "{}: this row has {} cells, the table {}: escape a `|` inside a cell as `\\|`",
                self.row_location(row),
                row.cells.len(),
                columns.len()
            );
        }
    }
}

/// Every table after a `<!-- kind -->` or `<!-- kind: args -->` marker line of `text` (outside
/// fenced code blocks). A marker not followed by a table is an error naming its line.
pub fn marked_tables(page: &str, text: &str, kind: &str) -> Result<Vec<MarkedTable>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut tables = Vec::new();
    for (index, line) in prose_lines(text) {
        let Some(args) = marker_args(line, kind) else {
            continue;
        };
        let mut next = index + 1;
        while next < lines.len() && lines[next].trim().is_empty() {
            next += 1;
        }
        let (header, rows) = table_at(&lines, next).ok_or_else(|| {
            format!(
                "{page}:{}: the marker `{}` is not followed by a table (header row, separator \
                 row, rows)",
                index + 1,
                line.trim()
            )
        })?;
        tables.push(MarkedTable {
            page: page.to_string(),
            args,
            line: index + 1,
            header,
            rows,
        });
    }
    Ok(tables)
}

/// [`marked_tables`] over several pages; panics on a marker without a table.
pub fn find_marked_tables(pages: &[Page], kind: &str) -> Vec<MarkedTable> {
    pages
        .iter()
        .flat_map(|page| {
            marked_tables(&page.path, &page.text, kind).unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

/// The one table marked `<!-- kind -->` (with `args` empty) or `<!-- kind: args -->` among
/// `pages`, in the shape `columns`; panics naming every such table unless there is exactly one.
pub fn the_one_table(pages: &[Page], kind: &str, args: &str, columns: &[&str]) -> MarkedTable {
    let mut tables: Vec<MarkedTable> = find_marked_tables(pages, kind)
        .into_iter()
        .filter(|t| t.args == args)
        .collect();
    let marker = if args.is_empty() {
        format!("<!-- {kind} -->")
    } else {
        format!("<!-- {kind}: {args} -->")
    };
    assert_eq!(
        tables.len(),
        1,
        "expected one `{marker}` table in README.md and docs/*.md, found {}: {:?}",
        tables.len(),
        tables.iter().map(MarkedTable::location).collect::<Vec<_>>()
    );
    let table = tables.remove(0);
    table.expect_shape(columns);
    table
}

/// Fails with every problem found, one per line, rather than the first.
pub fn assert_no_problems(what: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{what}: {} problem(s):\n- {}\n",
        problems.len(),
        problems.join("\n- ")
    );
}

/// For the checks' own tests: the problems reported are exactly as many as `expected`, and each
/// begins with its counterpart.
pub fn assert_problems_start_with(problems: &[String], expected: &[&str]) {
    assert_eq!(problems.len(), expected.len(), "{problems:#?}");
    for (problem, start) in problems.iter().zip(expected) {
        assert!(
            problem.starts_with(start),
            "{problem:?} should start with {start:?}"
        );
    }
}

/// The marker's arguments when `line` is `<!-- kind -->` or `<!-- kind: args -->`.
fn marker_args(line: &str, kind: &str) -> Option<String> {
    let inner = line
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim();
    let rest = inner.strip_prefix(kind)?;
    if rest.is_empty() {
        return Some(String::new());
    }
    Some(rest.strip_prefix(':')?.trim().to_string())
}

/// The table whose header row is `lines[start]`: header cells and body rows.
fn table_at(lines: &[&str], start: usize) -> Option<(Vec<String>, Vec<Row>)> {
    let header = lines.get(start).filter(|l| is_table_line(l))?;
    let separator = lines.get(start + 1).filter(|l| is_separator(l))?;
    let header = split_cells(header);
    if split_cells(separator).len() != header.len() {
        return None;
    }
    let rows = lines[start + 2..]
        .iter()
        .take_while(|l| is_table_line(l))
        .enumerate()
        .map(|(i, l)| Row {
            line: start + 3 + i,
            cells: split_cells(l),
        })
        .collect();
    Some((header, rows))
}

fn is_table_line(line: &str) -> bool {
    line.trim_start().starts_with('|')
}

fn is_separator(line: &str) -> bool {
    is_table_line(line)
        && split_cells(line).iter().all(|cell| {
            let dashes = cell.trim_start_matches(':').trim_end_matches(':');
            !dashes.is_empty() && dashes.chars().all(|c| c == '-')
        })
}

/// The cells of a table line, split on unescaped `|`, with `\|` read as `|` and each cell
/// trimmed; the outer pipes do not make empty cells.
pub fn split_cells(line: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = line.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell)),
            _ => cell.push(c),
        }
    }
    cells.push(cell);
    let trimmed = line.trim();
    if trimmed.starts_with('|') {
        cells.remove(0);
    }
    if trimmed.ends_with('|') && !trimmed.ends_with("\\|") && !cells.is_empty() {
        cells.pop();
    }
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The contents of the inline code spans of `text`, trimmed, in order.
pub fn code_spans(text: &str) -> Vec<String> {
    code_span_ranges(text)
        .into_iter()
        .map(|(outer, ticks)| {
            text[outer.start + ticks..outer.end - ticks]
                .trim()
                .to_string()
        })
        .collect()
}

/// `text` with each inline code span, backticks included, replaced by spaces (line breaks
/// kept), so that what looks like a link or a name inside code is not read as one.
pub fn blank_code_spans(text: &str) -> String {
    let mut out = text.to_string();
    for (outer, _) in code_span_ranges(text).into_iter().rev() {
        let blank: String = text[outer.clone()]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(outer, &blank);
    }
    out
}

/// The byte ranges of the code spans of `text`, backticks included, with the length of their
/// backtick runs. A span opened by a run of n backticks closes at the next run of exactly n; an
/// unmatched run is literal text.
fn code_span_ranges(text: &str) -> Vec<(std::ops::Range<usize>, usize)> {
    let bytes = text.as_bytes();
    let run_at = |i: usize| bytes[i..].iter().take_while(|&&b| b == b'`').count();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let ticks = run_at(i);
        let mut j = i + ticks;
        let close = loop {
            match bytes[j..].iter().position(|&b| b == b'`') {
                None => break None,
                Some(k) if run_at(j + k) == ticks => break Some(j + k),
                Some(k) => j += k + run_at(j + k),
            }
        };
        match close {
            Some(close) => {
                spans.push((i..close + ticks, ticks));
                i = close + ticks;
            }
            None => i += ticks,
        }
    }
    spans
}

/// A fenced code block: its info string (e.g. `sh`), the 1-based line of its opening fence,
/// and its lines.
#[derive(Debug, Clone, PartialEq)]
pub struct FencedBlock<'a> {
    pub info: String,
    pub line: usize,
    pub lines: Vec<&'a str>,
}

/// The fenced code blocks of `text` (``` or ~~~ fences; an unclosed block runs to the end).
pub fn fenced_blocks(text: &str) -> Vec<FencedBlock<'_>> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, FencedBlock)> = None;
    for (index, line) in text.lines().enumerate() {
        let fence = fence_of(line);
        match (&mut open, fence) {
            (Some((marker, _)), Some((this, info))) if this.starts_with(marker.as_str()) => {
                if info.is_empty() {
                    blocks.push(open.take().expect("an open block").1);
                } else if let Some((_, block)) = &mut open {
                    block.lines.push(line);
                }
            }
            (Some((_, block)), _) => block.lines.push(line),
            (None, Some((marker, info))) => {
                let block = FencedBlock {
                    info,
                    line: index + 1,
                    lines: Vec::new(),
                };
                open = Some((marker, block));
            }
            (None, None) => {}
        }
    }
    blocks.extend(open.map(|(_, block)| block));
    blocks
}

/// The fence run (e.g. "```") and the info string when `line` is a code fence.
fn fence_of(line: &str) -> Option<(String, String)> {
    let trimmed = line.trim_start();
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let c = trimmed.chars().next().filter(|&c| c == '`' || c == '~')?;
    let run = trimmed.chars().take_while(|&x| x == c).count();
    if run < 3 {
        return None;
    }
    let info = trimmed[run..].trim().to_string();
    if c == '`' && info.contains('`') {
        return None;
    }
    Some((c.to_string().repeat(run), info))
}

/// The lines of `text` outside fenced code blocks (fences excluded), with their 0-based index.
pub fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut in_block = vec![false; text.lines().count()];
    for block in fenced_blocks(text) {
        let first = block.line - 1;
        // The opening fence, the contents and (when present) the closing fence.
        let last = (first + block.lines.len() + 1).min(in_block.len() - 1);
        for flag in &mut in_block[first..=last] {
            *flag = true;
        }
    }
    text.lines()
        .enumerate()
        .filter(|(i, _)| !in_block[*i])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "\
# Flags

<!-- flags: rotor-drainer run -->

| flag | environment | default | meaning |
|------|:-----------:|---------|---------|
| `--max-tainted N\\|P%` | `ROTOR_MAX_TAINTED` | `1` | a count \\| or a share |
| `--dry-run` | - | | nothing is written |

After the table.

```md
<!-- flags: not-a-marker -->
```

<!-- events -->
| reason | type |
| --- | --- |
| `DrainStarted` | Normal |
";

    #[test]
    fn a_marker_is_followed_by_its_table() {
        let tables = marked_tables("docs/x.md", PAGE, "flags").unwrap();
        assert_eq!(
            tables.len(),
            1,
            "the marker in the code block must not count"
        );
        let table = &tables[0];
        assert_eq!(table.args, "rotor-drainer run");
        assert_eq!(table.line, 3);
        assert_eq!(table.header, ["flag", "environment", "default", "meaning"]);
        assert_eq!(table.rows.len(), 2);
        assert_eq!(table.rows[0].line, 7);
        assert_eq!(
            table.rows[0].cells,
            [
                "`--max-tainted N|P%`",
                "`ROTOR_MAX_TAINTED`",
                "`1`",
                "a count | or a share"
            ]
        );
        assert_eq!(
            table.rows[1].cells,
            ["`--dry-run`", "-", "", "nothing is written"]
        );
        table.expect_shape(&["flag", "environment", "default", "meaning"]);

        let events = marked_tables("docs/x.md", PAGE, "events").unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].args, "");
        assert_eq!(events[0].rows[0].cells, ["`DrainStarted`", "Normal"]);
        assert!(
            marked_tables("docs/x.md", PAGE, "metrics")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_marker_without_a_table_is_an_error() {
        let text = "<!-- metrics: rotor-drainer -->\n\nSome prose.\n";
        let err = marked_tables("docs/o.md", text, "metrics").unwrap_err();
        assert!(err.contains("docs/o.md:1"), "{err}");
        // A kind that is only a prefix of the marker's word is not that marker.
        assert!(
            marked_tables("docs/o.md", text, "metric")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    #[should_panic(expected = "no body rows")]
    fn an_empty_table_fails_its_shape_check() {
        let text = "<!-- events -->\n| reason | type |\n|---|---|\n";
        marked_tables("p.md", text, "events").unwrap()[0].expect_shape(&["reason", "type"]);
    }

    #[test]
    fn cells_split_on_unescaped_pipes_only() {
        assert_eq!(split_cells("| a | `b\\|c` | |"), ["a", "`b|c`", ""]);
        assert_eq!(split_cells("a | b"), ["a", "b"]);
        assert_eq!(split_cells("| x \\|"), ["x |"]);
    }

    #[test]
    fn code_spans_pair_backtick_runs() {
        assert_eq!(
            code_spans("taint `rotor.dev/drain=<r>:NoSchedule` and ``a `b` c`` then `x"),
            ["rotor.dev/drain=<r>:NoSchedule", "a `b` c"]
        );
        assert!(code_spans("no code").is_empty());
        assert_eq!(code_spans("`é` and `ü`"), ["é", "ü"]);
    }

    #[test]
    fn code_spans_blank_to_spaces() {
        assert_eq!(
            blank_code_spans("a `[b](c)` d\n``e\n`f`` [g](h) `unclosed"),
            "a          d\n   \n     [g](h) `unclosed"
        );
    }

    #[test]
    fn fenced_blocks_and_prose_lines() {
        let text = "a\n```sh\nrun me\n```\nb\n~~~~\n```\nstill code\n~~~~\nc\n```\nopen";
        let blocks = fenced_blocks(text);
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[0].info, "sh");
        assert_eq!(blocks[0].line, 2);
        assert_eq!(blocks[0].lines, ["run me"]);
        assert_eq!(blocks[1].lines, ["```", "still code"]);
        assert_eq!(blocks[2].lines, ["open"]);
        let prose: Vec<&str> = prose_lines(text).into_iter().map(|(_, l)| l).collect();
        assert_eq!(prose, ["a", "b", "c"]);
    }
}
