//! The house's sizes and names, checked on every `cargo test` (issue 48), with the lexer and
//! module graph of [`super::layout`]:
//! - each crate root's doc lists every module the root declares, and names none it does not;
//! - a module whose doc says it is pure (a sentence that starts with "Pure", or "sans-IO")
//!   names neither `kube` nor `tokio` outside its test code;
//! - no product function is over [`MAX_FN_LINES`] lines, no product file over
//!   [`MAX_FILE_LINES`] lines without its tests;
//! - no two product types (struct, enum, trait, union, type alias at a module's top level)
//!   share a name: a re-export is no definition;
//! - the layout table of [`LAYOUT_DOC`] matches the tree: every module of the product crate's
//!   root has a row, every path a row names exists, and every file or directory its description
//!   names (`x.rs`, `x/`) is found under the row's directory.
//!
//! "Product" is the product crate (`crates/rollboot/src`) without its test code (a
//! `#[cfg(test)]` item, or a module declared under one). The lines of a function run from its
//! `fn` to its closing brace, nested closures and functions included. Each check prints the
//! figures it judged (`cargo test --test deploy house:: -- --nocapture`), largest first.
//!
//! It reads sources only, as `layout` does: it must never compile, run or rewrite them.

use std::collections::BTreeMap;

use super::layout::{
    attributes, ident_of, is_ident, is_punct, is_test_only, item_name, lex, read_crate, workspace,
    Graph, Tok, Token, CRATES,
};

/// The longest a product function may be, in lines.
const MAX_FN_LINES: usize = 100;
/// The longest a product file may be without its test code, in lines.
const MAX_FILE_LINES: usize = 1000;
/// The product crate's sources and root.
const PRODUCT: (&str, &str) = ("crates/rollboot/src", "lib.rs");
/// The page whose `## Layout` table says what each path of the workspace owns.
const LAYOUT_DOC: &str = "docs/architecture.md";

// ---------------------------------------------------------------------------------------------
// The checks.

#[test]
fn each_crate_root_lists_every_module_it_declares() {
    let mut report = Vec::new();
    for (dir, root) in CRATES {
        let source = std::fs::read_to_string(workspace().join(dir).join(root))
            .unwrap_or_else(|e| panic!("{dir}/{root}: {e}"));
        let declared = declared_modules(&lex(&source));
        let listed = listed_modules(&source);
        for m in declared.iter().filter(|m| !listed.contains(m)) {
            report.push(format!(
                "{dir}/{root}: module `{m}` is not in the doc's list"
            ));
        }
        for m in listed.iter().filter(|m| !declared.contains(m)) {
            report.push(format!(
                "{dir}/{root}: the doc lists `{m}`, which is no module"
            ));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn a_module_documented_as_pure_names_neither_kube_nor_tokio() {
    let mut report = Vec::new();
    let mut pure = 0;
    for (dir, root) in CRATES {
        for (file, source) in product_files(dir, root) {
            if !claims_purity(&source) {
                continue;
            }
            pure += 1;
            let tokens = lex(&source);
            let tests = test_spans(&tokens);
            for (i, t) in tokens.iter().enumerate() {
                let Tok::Ident(name) = &t.kind else { continue };
                let io = name == "kube" || name == "tokio";
                let as_path = is_punct(tokens.get(i + 1), "::")
                    || is_ident(tokens.get(i.wrapping_sub(1)), "use");
                if io && as_path && !inside(i, &tests) {
                    report.push(format!(
                        "{dir}/{file}:{}: `{name}` in a pure module",
                        t.line
                    ));
                }
            }
        }
    }
    println!("modules documented as pure: {pure}");
    assert!(
        pure > 0,
        "no module documents itself as pure: the check reads nothing"
    );
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn no_product_function_is_over_the_limit() {
    let mut functions = Vec::new();
    for (file, source) in product_files(PRODUCT.0, PRODUCT.1) {
        for (name, line, lines) in functions_of(&lex(&source)) {
            functions.push((lines, format!("{file}:{line} {name}")));
        }
    }
    let over = largest_and_over(
        "the five longest product functions",
        functions,
        MAX_FN_LINES,
    );
    assert!(
        over.is_empty(),
        "product functions over {MAX_FN_LINES} lines (split them by what their parts do):\n{}",
        over.join("\n")
    );
}

#[test]
fn no_product_file_is_over_the_limit_without_its_tests() {
    let files: Vec<(usize, String)> = product_files(PRODUCT.0, PRODUCT.1)
        .into_iter()
        .map(|(file, source)| (lines_without_tests(&source), file))
        .collect();
    let over = largest_and_over(
        "the five largest product files without their tests",
        files,
        MAX_FILE_LINES,
    );
    assert!(
        over.is_empty(),
        "product files over {MAX_FILE_LINES} lines without their tests (split them by concern):\n{}",
        over.join("\n")
    );
}

#[test]
fn no_two_product_types_share_a_name() {
    let mut defined: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, source) in product_files(PRODUCT.0, PRODUCT.1) {
        for (name, line) in top_level_types(&lex(&source)) {
            defined
                .entry(name)
                .or_default()
                .push(format!("{file}:{line}"));
        }
    }
    let twice: Vec<String> = defined
        .iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(name, at)| format!("{name}: {}", at.join(", ")))
        .collect();
    println!("product type names defined more than once: {}", twice.len());
    assert!(
        twice.is_empty(),
        "product types that share a name (name each for what it is):\n{}",
        twice.join("\n")
    );
}

#[test]
fn the_layout_table_matches_the_tree() {
    let doc = std::fs::read_to_string(workspace().join(LAYOUT_DOC))
        .unwrap_or_else(|e| panic!("{LAYOUT_DOC}: {e}"));
    let rows = layout_rows(&doc);
    assert!(!rows.is_empty(), "{LAYOUT_DOC}: no `## Layout` table");
    let mut report = Vec::new();
    for row in &rows {
        for path in &row.paths {
            if !workspace().join(path).exists() {
                report.push(format!(
                    "the row `{}` names {path}, which does not exist",
                    row.first
                ));
            }
        }
        for name in &row.named {
            let found = row
                .paths
                .iter()
                .filter(|p| p.ends_with('/'))
                .any(|dir| found_under(&workspace().join(dir), name));
            if !found && !row.paths.iter().any(|p| p.ends_with(name.as_str())) {
                report.push(format!(
                    "the row `{}` names `{name}`, found under none of its directories",
                    row.first
                ));
            }
        }
    }
    let lib = std::fs::read_to_string(workspace().join(PRODUCT.0).join(PRODUCT.1)).expect("lib.rs");
    for module in declared_modules(&lex(&lib)) {
        let dir = format!("{}/{module}/", PRODUCT.0);
        let file = format!("{}/{module}.rs", PRODUCT.0);
        if !rows
            .iter()
            .any(|r| r.paths.contains(&dir) || r.paths.contains(&file))
        {
            report.push(format!("the product module `{module}` has no row"));
        }
    }
    assert!(
        report.is_empty(),
        "{LAYOUT_DOC}'s layout table and the tree differ:\n{}",
        report.join("\n")
    );
}

#[test]
fn a_layout_row_is_read_with_its_crate_and_names() {
    let readme = "# x\n## Layout\n\n| path | owns |\n| --- | --- |\n\
                  | `crates/a/` | the crate: |\n\
                  | `  b/`, `c.rs` | b (`d.rs`, `e/`) and c |\n\
                  | `docs/` | docs |\n\n## Next\n| `x/` | y |\n";
    let rows = layout_rows(readme);
    let paths: Vec<Vec<String>> = rows.iter().map(|r| r.paths.clone()).collect();
    assert_eq!(
        paths,
        [
            vec!["crates/a/".to_string()],
            vec![
                "crates/a/src/b/".to_string(),
                "crates/a/src/c.rs".to_string()
            ],
            vec!["docs/".to_string()],
        ]
    );
    assert_eq!(rows[1].named, ["d.rs", "e/"]);
}

// The checks' own cases: each reading on a small source.

#[test]
fn functions_are_measured_from_fn_to_their_closing_brace_and_test_code_is_left_out() {
    let src = "fn a(x: Vec<u8>) -> Option<u8>\nwhere\n    u8: Copy,\n{\n    let f = |y: u8| {\n        y\n    };\n    None\n}\n\
               trait T { fn decl(&self); }\n\
               #[cfg(test)]\nmod tests {\n    fn long() {\n\n\n    }\n}\n";
    let tokens = lex(src);
    let found: Vec<(String, usize, usize)> = functions_of(&tokens);
    assert_eq!(found, vec![("a".to_string(), 1, 9)]);
    assert_eq!(lines_without_tests(src), 10);
}

#[test]
fn only_top_level_types_count_and_associated_types_do_not() {
    let src = "pub struct A;\nenum B { X }\nimpl Iterator for A { type Item = u8; }\n\
               fn f() { struct Local; }\n#[cfg(test)]\nstruct OnlyInTests;\npub use other::C;\n";
    let names: Vec<String> = top_level_types(&lex(src))
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["A", "B"]);
}

#[test]
fn purity_is_claimed_by_a_sentence_that_starts_with_pure_or_by_sans_io() {
    assert!(claims_purity("//! The order of pods. Pure.\n"));
    assert!(claims_purity("//! Pure: it never reads a clock.\n"));
    assert!(claims_purity(
        "//! Owns, purely and sans-IO, the protocol.\n"
    ));
    assert!(!claims_purity(
        "//! The decisions are pure, in [`decide`].\n"
    ));
    assert!(!claims_purity("// Pure.\nfn f() {}\n"));
}

#[test]
fn a_root_lists_modules_as_links_in_its_doc() {
    let src = "//! - [`a`]: the first;\n//! - [`b`], [`c::D`]: more.\n\npub mod a;\nmod b;\n";
    assert_eq!(declared_modules(&lex(src)), ["a", "b"]);
    assert_eq!(listed_modules(src), ["a", "b", "c"]);
}

/// Prints the five largest of `sizes` (lines, where) under `title`, and returns those over
/// `limit`, largest first.
fn largest_and_over(title: &str, mut sizes: Vec<(usize, String)>, limit: usize) -> Vec<String> {
    sizes.sort_by(|a, b| b.cmp(a));
    println!("{title} (lines):");
    for (lines, at) in sizes.iter().take(5) {
        println!("  {lines:5} {at}");
    }
    sizes
        .iter()
        .filter(|(lines, _)| *lines > limit)
        .map(|(lines, at)| format!("{at}: {lines} lines"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Reading.

/// The crate's non-test files (as the module graph finds them from the root), with their text.
fn product_files(dir: &str, root: &str) -> Vec<(String, String)> {
    let mut sources = read_crate(&workspace().join(dir));
    let graph = Graph::build(&sources, root).unwrap_or_else(|e| panic!("{dir}: {e}"));
    graph
        .paths
        .keys()
        .map(|file| (file.clone(), sources.remove(file).expect("read")))
        .collect()
}

/// One row of the layout table of [`LAYOUT_DOC`]: its first cell as written, the paths it names
/// (relative to the workspace; a row indented under a crate's row is in that crate's `src/`),
/// and the files and directories its description names.
struct LayoutRow {
    first: String,
    paths: Vec<String>,
    named: Vec<String>,
}

/// The rows of the table under `## Layout`, up to the next heading.
fn layout_rows(doc: &str) -> Vec<LayoutRow> {
    let Some(start) = doc.find("\n## Layout") else {
        return Vec::new();
    };
    let section = &doc[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
    let mut rows = Vec::new();
    let mut crate_dir = String::new();
    for line in section[..end].lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let first = cells[0].trim_start_matches("| ").to_string();
        let owns = cells.get(1).copied().unwrap_or("");
        let ticked = |text: &str| -> Vec<String> {
            text.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        };
        // A row indented under a crate's row names paths of that crate: in its `src/`, or
        // from the crate's directory when written so (`src/sim/`, `tests/`).
        let indented = first.starts_with("`  ");
        let mut paths = Vec::new();
        for p in ticked(&first) {
            let p = p.trim_start().to_string();
            if indented {
                let in_src = format!("{crate_dir}src/{p}");
                let from_crate = format!("{crate_dir}{p}");
                let from_crate_only =
                    !workspace().join(&in_src).exists() && workspace().join(&from_crate).exists();
                paths.push(if from_crate_only { from_crate } else { in_src });
            } else {
                if p.starts_with("crates/") && p.ends_with('/') {
                    crate_dir = p.clone();
                }
                paths.push(p);
            }
        }
        let named = ticked(owns)
            .into_iter()
            .filter(|t| {
                (t.ends_with(".rs") || t.ends_with('/'))
                    && t.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_/.".contains(c))
                    && !t.trim_end_matches(".rs").contains('.')
                    && !t.starts_with('/')
            })
            .collect();
        rows.push(LayoutRow {
            first,
            paths,
            named,
        });
    }
    rows
}

/// Whether `name` (`x.rs`, `x/`, or a path `a/b.rs`) is a file or directory at or under
/// `dir` whose path ends with it.
fn found_under(dir: &std::path::Path, name: &str) -> bool {
    let name = name.trim_end_matches('/');
    // `cli/args.rs` in the row of `src/cli/`: a path that starts with the directory's name.
    let from_parent = dir.parent().map(|p| p.join(name));
    if dir.ends_with(name)
        || dir.join(name).exists()
        || from_parent.is_some_and(|p| p.starts_with(dir) && p.exists())
    {
        return true;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .any(|p| found_under(&p, name))
}

/// The modules a root declares at its top level (`mod x;`, `pub mod x;`), test ones left out.
fn declared_modules(tokens: &[Token]) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate() {
        match &t.kind {
            Tok::Punct("{") => depth += 1,
            Tok::Punct("}") => depth = depth.saturating_sub(1),
            Tok::Ident(kw) if kw == "mod" && depth == 0 && !is_test_only(tokens, i) => {
                if let Some(name) = ident_of(tokens.get(i + 1)) {
                    out.push(name.to_string());
                }
            }
            _ => {}
        }
    }
    out.sort();
    out
}

/// The first segment of each intra-doc link (`[`x`]`, `[`x::Y`]`) in the file's `//!` doc.
fn listed_modules(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in source
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("//!"))
    {
        let mut rest = line;
        while let Some(start) = rest.find("[`") {
            let after = &rest[start + 2..];
            let Some(end) = after.find("`]") else { break };
            let head = after[..end].split("::").next().unwrap_or("");
            if !head.is_empty() && head.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                out.push(head.to_string());
            }
            rest = &after[end..];
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Whether the file's `//!` doc says the module is pure: a sentence that starts with "Pure",
/// or "sans-IO". ("The decisions are pure, in `decide`" says it of another module.)
fn claims_purity(source: &str) -> bool {
    let doc: Vec<&str> = source
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("//!"))
        .collect();
    let doc = doc.join(" ");
    if doc.contains("sans-IO") {
        return true;
    }
    let words: Vec<&str> = doc.split_whitespace().collect();
    words.iter().enumerate().any(|(i, w)| {
        w.trim_end_matches([':', '.', ',']) == "Pure"
            && (i == 0 || words[i - 1].ends_with(['.', ':', ';']))
    })
}

/// The keywords of items that may carry `#[cfg(test)]`.
const ITEMS: [&str; 9] = [
    "mod", "fn", "impl", "struct", "enum", "use", "const", "static", "trait",
];

/// The token spans of `#[cfg(test)]` items.
fn test_spans(tokens: &[Token]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let item = matches!(&tokens[i].kind, Tok::Ident(k) if ITEMS.contains(&k.as_str()));
        if item && is_test_only(tokens, i) {
            let end = item_end(tokens, i);
            spans.push((i, end));
            i = end;
        }
        i += 1;
    }
    spans
}

fn inside(i: usize, spans: &[(usize, usize)]) -> bool {
    spans.iter().any(|&(a, b)| a <= i && i <= b)
}

/// The index of an item's last token: its `;`, or the brace that closes its body.
fn item_end(tokens: &[Token], i: usize) -> usize {
    let mut j = i;
    while j < tokens.len() {
        match tokens[j].kind {
            Tok::Punct(";") => return j,
            Tok::Punct("{") => return closing(tokens, j),
            _ => j += 1,
        }
    }
    tokens.len() - 1
}

/// The index of the brace that closes the one at `open`.
fn closing(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, t) in tokens.iter().enumerate().skip(open) {
        match t.kind {
            Tok::Punct("{") => depth += 1,
            Tok::Punct("}") => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    tokens.len() - 1
}

/// Each function with a body outside test code: its name, first line and length in lines.
fn functions_of(tokens: &[Token]) -> Vec<(String, usize, usize)> {
    let tests = test_spans(tokens);
    let mut out = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if !is_ident(Some(t), "fn") || inside(i, &tests) {
            continue;
        }
        let Some(name) = ident_of(tokens.get(i + 1)) else {
            continue;
        };
        // The body's brace: the first `{` outside parentheses and brackets, unless a `;` ends
        // a declaration first.
        let mut level = 0i32;
        let mut body = None;
        for (j, u) in tokens.iter().enumerate().skip(i + 2) {
            match u.kind {
                Tok::Punct("(") | Tok::Punct("[") => level += 1,
                Tok::Punct(")") | Tok::Punct("]") => level -= 1,
                Tok::Punct(";") if level == 0 => break,
                Tok::Punct("{") if level == 0 => {
                    body = Some(j);
                    break;
                }
                _ => {}
            }
        }
        if let Some(open) = body {
            let end = closing(tokens, open);
            out.push((name.to_string(), t.line, tokens[end].line - t.line + 1));
        }
    }
    out
}

/// The file's lines without the lines its top-level test items span.
fn lines_without_tests(source: &str) -> usize {
    let tokens = lex(source);
    let mut depth = 0usize;
    let mut tested = 0;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].kind {
            Tok::Punct("{") => depth += 1,
            Tok::Punct("}") => depth = depth.saturating_sub(1),
            Tok::Ident(kw)
                if depth == 0 && ITEMS.contains(&kw.as_str()) && is_test_only(&tokens, i) =>
            {
                let end = item_end(&tokens, i);
                // From its `#[cfg(test)]` line to its last.
                tested += tokens[end].line - attribute_line(&tokens, i) + 1;
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    source.lines().count() - tested
}

/// The line of the first attribute before the item keyword at `i` (or its own line).
fn attribute_line(tokens: &[Token], i: usize) -> usize {
    // The first attribute's `#`, just before its `[`.
    attributes(tokens, i)
        .last()
        .map_or(tokens[i].line, |&(open, _)| {
            tokens[open.saturating_sub(1)].line
        })
}

/// The types a file defines at its top level, outside test code: name and line.
fn top_level_types(tokens: &[Token]) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate() {
        match &t.kind {
            Tok::Punct("{") => depth += 1,
            Tok::Punct("}") => depth = depth.saturating_sub(1),
            Tok::Ident(kw)
                if depth == 0
                    && matches!(kw.as_str(), "struct" | "enum" | "trait" | "type" | "union")
                    && !is_test_only(tokens, i) =>
            {
                if let Some(name) = item_name(tokens, i) {
                    out.push((name.to_string(), t.line));
                }
            }
            _ => {}
        }
    }
    out
}
