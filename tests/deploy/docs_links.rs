//! The docs' links, checked offline on every `cargo test`: every relative link of every
//! Markdown file of `README.md`, `docs/` and `deploy/` names a file or directory that exists,
//! and every `#anchor` names a heading of its target, as GitHub makes an anchor of a heading
//! (lowercase; spaces to `-`; punctuation but `-` and `_` dropped; `-1`, `-2` for repeats).
//!
//! Owns the reading of Markdown links, headings and anchors ([`link_problems`], [`slug`]). It
//! must never fetch: an external link (any `scheme:`, `//host`) is left alone, and nothing
//! outside the workspace is read. Links inside code (fenced blocks, inline spans) are text, not
//! links.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use super::layout::workspace;

/// The Markdown the checks walk: the front page, and every `.md` under these directories.
const ROOTS: [&str; 3] = ["README.md", "docs", "deploy"];
/// Directories under [`ROOTS`] that are not sources (mdbook's output).
const SKIP: [&str; 1] = ["docs/book"];

#[test]
fn every_relative_link_and_anchor_of_the_docs_resolves() {
    let files = markdown_files();
    assert!(
        files.iter().any(|f| f.starts_with("docs/")),
        "no Markdown under docs/: {files:?}"
    );
    let mut report = Vec::new();
    let mut links = 0;
    for file in &files {
        let text = std::fs::read_to_string(workspace().join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        links += links_of(&text).len();
        report.extend(link_problems(file, &text, &on_disk));
    }
    println!(
        "{} Markdown files, {links} links, {} broken",
        files.len(),
        report.len()
    );
    assert!(
        report.is_empty(),
        "broken links in the docs:\n{}",
        report.join("\n")
    );
}

#[test]
fn a_missing_file_and_a_missing_anchor_are_reported_with_their_line() {
    let doc = "# Title\n\nSee [a](other.md), [b](other.md#no-such-part) and [c](#nowhere).\n\
               [d](missing.md) and ![e](img/missing.png).\n[f]: ../gone/x.md\n";
    let found = files(&[("docs/other.md", "# Other\n## A part\n")]);
    let problems = link_problems("docs/page.md", doc, &found);
    assert_eq!(
        problems,
        [
            "docs/page.md:3: `other.md#no-such-part`: docs/other.md has no heading `no-such-part`",
            "docs/page.md:3: `#nowhere`: docs/page.md has no heading `nowhere`",
            "docs/page.md:4: `missing.md`: docs/missing.md does not exist",
            "docs/page.md:4: `img/missing.png`: docs/img/missing.png does not exist",
            "docs/page.md:5: `../gone/x.md`: gone/x.md does not exist",
        ]
    );
}

#[test]
fn good_links_pass_and_code_and_external_links_are_not_followed() {
    let doc = "# Page\n\n## Install (optional)\n\n## `status`, and more\n\n## Install (optional)\n\
               [up](../README.md#rollboot) [here](#install-optional) [again](#install-optional-1)\n\
               [code](#status-and-more) [dir](../deploy/) [web](https://example.com/x#y)\n\
               [mail](mailto:a@example.com) `[not a link](nowhere.md)`\n\
               ```sh\n[not either](nowhere.md)\n# not a heading\n```\n\
               [spaced](<other.md#a-part>) [titled](other.md \"the title\")\n\
               [ref]: other.md#a-part \"a reference\"\n";
    let found = files(&[
        ("README.md", "# rollboot\n"),
        ("docs/other.md", "# Other\n## A part\n"),
        ("deploy", ""),
    ]);
    assert_eq!(
        link_problems("docs/page.md", doc, &found),
        Vec::<String>::new()
    );
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(
        slug("Drain before a shutdown rollboot did not start (logind)"),
        "drain-before-a-shutdown-rollboot-did-not-start-logind"
    );
    assert_eq!(
        slug("Why the agent is privileged, and how much"),
        "why-the-agent-is-privileged-and-how-much"
    );
    assert_eq!(
        slug("1. Build `rollboot` -- fast"),
        "1-build-rollboot----fast"
    );
    assert_eq!(
        slug("The [simulator](simulator.md) and snake_case"),
        "the-simulator-and-snake_case"
    );
    let doc = "# A\n## B\n## B\n```\n## C\n```\n<a id=\"custom\"></a>\n";
    let anchors = anchors_of(doc);
    assert_eq!(
        anchors,
        ["a", "b", "b-1", "custom"]
            .map(String::from)
            .into_iter()
            .collect::<BTreeSet<_>>()
    );
}

// ---------------------------------------------------------------------------------------------
// Checking.

/// What a link's path leads to: a file (its text when it is Markdown, whose anchors are then
/// checked), or a directory.
enum Found {
    File(Option<String>),
    Dir,
}

/// The problems of the links in `text`, the Markdown at `from` (a path relative to the
/// workspace), each as `FROM:LINE: \`TARGET\`: what is wrong`. `find` looks a workspace path up.
fn link_problems(from: &str, text: &str, find: &dyn Fn(&str) -> Option<Found>) -> Vec<String> {
    let dir = Path::new(from).parent().unwrap_or(Path::new(""));
    let mut out = Vec::new();
    for (line, target) in links_of(text) {
        if is_external(&target) {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            Some(from.to_string())
        } else if let Some(rooted) = path.strip_prefix('/') {
            normalize(Path::new(rooted))
        } else {
            normalize(&dir.join(percent_decoded(path)))
        };
        let Some(resolved) = resolved else {
            out.push(format!(
                "{from}:{line}: `{target}`: leads out of the repository"
            ));
            continue;
        };
        let own = (resolved == from).then(|| Found::File(Some(text.to_string())));
        match (own.or_else(|| find(&resolved)), anchor) {
            (None, _) => out.push(format!(
                "{from}:{line}: `{target}`: {resolved} does not exist"
            )),
            (Some(Found::File(Some(md))), Some(anchor)) if !anchor.is_empty() => {
                let want = percent_decoded(anchor).to_lowercase();
                if !anchors_of(&md).contains(&want) {
                    out.push(format!(
                        "{from}:{line}: `{target}`: {resolved} has no heading `{anchor}`"
                    ));
                }
            }
            _ => {}
        }
    }
    out
}

/// A link that leaves the repository: a URL with a scheme (`https:`, `mailto:`) or a host.
fn is_external(target: &str) -> bool {
    if target.starts_with("//") {
        return true;
    }
    let scheme = target.split(':').next().unwrap_or("");
    target.contains(':')
        && !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
}

/// `path` with its `.` and `..` taken out; `None` when it climbs above the workspace.
fn normalize(path: &Path) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop()?;
            }
            _ => {}
        }
    }
    Some(parts.join("/"))
}

/// `%20` and the like as the characters they stand for (what GitHub resolves).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Reading Markdown.

/// The lines of `text` outside fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// `line` without its inline code spans (`` `x` ``), whose text is never a link.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            out.push_str(part);
        }
    }
    out
}

/// Every link target in `text` with its line: inline links and images (`[x](t)`, `![x](t)`,
/// with or without a title or angle brackets) and reference definitions (`[x]: t`).
fn links_of(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = without_code(line);
        if let Some(rest) = line.trim_start().strip_prefix('[') {
            if let Some((label, def)) = rest.split_once("]:") {
                if !label.contains(['[', ']', '(']) {
                    if let Some(t) = def.split_whitespace().next() {
                        out.push((n, t.trim_matches(['<', '>']).to_string()));
                    }
                }
            }
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            // The target runs to the `)` that closes the link, parentheses inside it paired.
            let mut depth = 0usize;
            let end = after
                .char_indices()
                .find(|&(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    _ => false,
                })
                .map_or(after.len(), |(i, _)| i);
            let inner = after[..end].trim();
            let target = match inner.strip_prefix('<') {
                Some(angled) => angled.split('>').next().unwrap_or(""),
                None => inner.split_whitespace().next().unwrap_or(""),
            };
            if !target.is_empty() {
                out.push((n, target.to_string()));
            }
            rest = &after[end.min(after.len())..];
        }
    }
    out
}

/// The anchors a page offers: one per heading ([`slug`], repeats numbered), and each
/// `id="..."` or `name="..."` of its HTML.
fn anchors_of(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let title = line[hashes..].trim().trim_end_matches('#').trim_end();
            let base = slug(title);
            let mut anchor = base.clone();
            let mut n = 0;
            while out.contains(&anchor) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
            out.insert(anchor);
        }
        for attr in ["id=\"", "name=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(attr) {
                rest = &rest[at + attr.len()..];
                if let Some((value, _)) = rest.split_once('"') {
                    out.insert(value.to_string());
                }
            }
        }
    }
    out
}

/// A heading's anchor as GitHub makes it: the heading's text (a link's text, not its target;
/// no backticks), lowercased, each space a `-`, every character but letters, digits, `-` and
/// `_` dropped.
fn slug(title: &str) -> String {
    let mut text = String::new();
    let mut rest = title;
    // `[text](target)` reads as its text.
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|c| open + c) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|e| close + e) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Where the docs are.

/// Every Markdown file the checks walk, relative to the workspace, with `/`.
fn markdown_files() -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        if SKIP.contains(&rel) {
            return;
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{rel}: {e}"))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let child = format!("{rel}/{name}");
            if path.is_dir() {
                walk(&path, &child, out);
            } else if name.ends_with(".md") {
                out.push(child);
            }
        }
    }
    let mut out = Vec::new();
    for root in ROOTS {
        let path = workspace().join(root);
        if path.is_dir() {
            walk(&path, root, &mut out);
        } else {
            out.push(root.to_string());
        }
    }
    out
}

/// A workspace path as the filesystem has it: Markdown read for its anchors.
fn on_disk(rel: &str) -> Option<Found> {
    let path = workspace().join(rel);
    if path.is_dir() {
        Some(Found::Dir)
    } else if path.is_file() {
        let md = rel
            .ends_with(".md")
            .then(|| std::fs::read_to_string(&path).unwrap_or_default());
        Some(Found::File(md))
    } else {
        None
    }
}

/// A lookup over the given files (`""` text: a directory), for the checks' own tests.
fn files(known: &[(&str, &str)]) -> impl Fn(&str) -> Option<Found> {
    let known: Vec<(String, String)> = known
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect();
    move |rel: &str| {
        known.iter().find(|(p, _)| p == rel).map(|(p, t)| {
            if t.is_empty() && !p.ends_with(".md") {
                Found::Dir
            } else {
                Found::File(p.ends_with(".md").then(|| t.clone()))
            }
        })
    }
}
