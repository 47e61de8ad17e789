//! The house's layout, checked on every `cargo test` (issue 23): no import circles inside any
//! of the crates, the product crate free of simulator code, and the binary naming the
//! simulator only under its cargo feature.
//!
//! The tool is this file: a small lexer and module-graph builder, with no dependency beyond
//! std, that reads the sources of `crates/rollboot/src`, `crates/rollboot-sim/src` and `src`
//! as they are on disk. It owns these checks and nothing else; it must never compile, run or
//! rewrite the code it reads, and it reads only code: comments (doc comments included),
//! string, byte-string, raw-string and char literals are lexed away first, so a doc comment
//! that mentions a module is no import.
//!
//! What counts, per crate (module = file; an inline `mod x { .. }` belongs to its file):
//! - Modules are found from the crate root (`lib.rs`, `main.rs`) by following `mod x;`
//!   declarations, whatever their `#[cfg]`. A `#[path]` attribute is refused: modules live at
//!   their default place, so that this file and a reader find them.
//! - Test code is no part of the layout: a module under `#[cfg(test)]` (an inline
//!   `mod tests { .. }` or a `mod tests;` file) and what it holds. Nothing builds on a test;
//!   a test may reach wherever its case needs.
//! - An edge A -> B, named by the item it reaches, when code in A names B:
//!   - a `use` declaration (not `pub`) whose path leads to B (`use crate::x::Y`,
//!     `use super::y::Z`, `use self::c::D`, `use c::D` for a child `c`, and `{..}` groups); a
//!     glob `use super::y::*` is an edge to `y` named `*`;
//!   - a path in code whose head leads to B: `crate::x::Y`, `super::y::f()`, `self::c::D`,
//!     `c::D` for a child module `c`, or `name::..` where `name` was imported by a `use` (so
//!     `use super::kinds; .. kinds::Kind::Pod` is an edge to `kinds` named `Kind`).
//! - A `pub use` is a module's facade, not its dependency: it makes an edge only when the name
//!   it brings in is used by the code of the module itself. Whoever names an item through a
//!   `use` (a facade or a private import the children see through `super::`) depends on the
//!   module that defines the item, not on the one that passes it on: `super::FaultConfig` in
//!   `sim/chaos.rs`, which `sim/mod.rs` re-exports from `faults`, is the edge
//!   `sim/chaos.rs -> sim/faults.rs`; a child naming through `super::` its parent's re-export
//!   of the child's own item names itself.
//! - Not edges: a parent declaring its children (`mod x;`); a module naming itself; paths
//!   into other crates (`std::`, `kube::`, `rollboot::` from the simulator: Cargo already keeps
//!   crates from depending on each other in a circle).
//!
//! Circles are looked for at every level of the module tree, as Rust's modules nest: at the
//! level of a module `m`, each child of `m` stands for itself and every module below it (its
//! family, named by its directory, `controller/`), and an edge between two files counts at the
//! level where their module paths part (`controller/gate.rs -> drain.rs` is `controller/ ->
//! drain.rs` at the crate's level). So a circle between two files is one, and so is a family
//! that depends on a module which depends back on anything in the family. An edge between a
//! module and one of its own ancestors parts at no level and is never part of a circle: a
//! family keeps what its members share (its error type, its task handle) in its `mod.rs`, the
//! children name it through `super::`, and the parent uses its children.
//!
//! Each circle is reported as its shortest cycles, one through each of its units, with the
//! names that tie each step (and the files, when a unit is a family), e.g.
//! `circle: a.rs -> b.rs (Name), b.rs -> a.rs (Other)`. The test allows no exceptions.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};

/// The crates' source roots, relative to the workspace, with their root file.
pub(crate) const CRATES: [(&str, &str); 4] = [
    ("crates/rollboot/src", "lib.rs"),
    ("crates/rollboot-sim/src", "lib.rs"),
    ("crates/rollboot-testkit/src", "lib.rs"),
    ("src", "main.rs"),
];

// ---------------------------------------------------------------------------------------------
// The checks.

#[test]
fn no_crate_has_an_import_circle() {
    let mut report = Vec::new();
    for (dir, root) in CRATES {
        let sources = read_crate(&workspace().join(dir));
        let graph = Graph::build(&sources, root).unwrap_or_else(|e| panic!("{dir}: {e}"));
        for circle in graph.circles() {
            report.push(format!("{dir}: {circle}"));
        }
    }
    assert!(
        report.is_empty(),
        "import circles (break each by moving what ties the files to where it belongs):\n{}",
        report.join("\n")
    );
}

#[test]
fn the_product_crate_depends_on_no_simulator_code() {
    let root = workspace();
    let manifest = std::fs::read_to_string(root.join("crates/rollboot/Cargo.toml"))
        .expect("crates/rollboot/Cargo.toml");
    let named: Vec<&str> = manifest
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .filter(|l| l.contains("rollboot-sim") || l.contains("rollboot_sim"))
        .collect();
    assert!(
        named.is_empty(),
        "crates/rollboot/Cargo.toml names the simulator crate: {named:?}"
    );

    let lock = std::fs::read_to_string(root.join("Cargo.lock")).expect("Cargo.lock");
    let product = lock
        .split("[[package]]")
        .find(|p| p.lines().any(|l| l.trim() == "name = \"rollboot\""))
        .expect("Cargo.lock has the package rollboot");
    assert!(
        !product.contains("\"rollboot-sim\""),
        "Cargo.lock: the package rollboot depends on rollboot-sim:{product}"
    );

    let mut found = Vec::new();
    for (path, source) in read_crate(&root.join("crates/rollboot/src")) {
        let tokens = lex(&source);
        for (i, t) in tokens.iter().enumerate() {
            let names_sim = match &t.kind {
                Tok::Ident(name) if name == "rollboot_sim" => true,
                // `sim::`/`simulate::` as a path segment: the simulator's modules.
                Tok::Ident(name) if name == "sim" || name == "simulate" => {
                    is_punct(tokens.get(i + 1), "::")
                        || (i > 0 && is_punct(tokens.get(i - 1), "::"))
                }
                Tok::Str(text) => text.contains("rollboot-sim/") || text.contains("rollboot_sim"),
                _ => false,
            };
            if names_sim {
                found.push(format!(
                    "crates/rollboot/src/{path}:{}: {:?}",
                    t.line, t.kind
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the product crate names the simulator:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_binary_names_the_simulator_only_under_its_feature() {
    let sources = read_crate(&workspace().join("src"));
    let mut outside = Vec::new();
    for (path, lines) in simulator_uses_outside_feature(&sources, "main.rs") {
        for line in lines {
            outside.push(format!("src/{path}:{line}"));
        }
    }
    assert!(
        outside.is_empty(),
        "`rollboot_sim` named outside `#[cfg(feature = \"simulate\")]` (the images build \
         without it):\n{}",
        outside.join("\n")
    );
}

// The checker's own behaviour, on sources in memory.

#[test]
fn comments_strings_and_chars_are_not_code() {
    let tokens = lex(concat!(
        "// use crate::a::A;\n",
        "/// [`crate::b::B`]\n",
        "/* outer /* nested crate::c::C */ still comment */\n",
        "let s = \"crate::d::D \\\" still string\";\n",
        "let r = r#\"crate::e::E \" still raw\"#;\n",
        "let b = b\"crate::f\"; let q = '\"'; let e = '\\''; let l: &'static str = x;\n",
        "let c = '{'; fn f<'a>(x: &'a str) {}\n",
        "let r#type = crate::g::G;\n",
    ));
    let idents: Vec<&str> = tokens
        .iter()
        .filter_map(|t| match &t.kind {
            Tok::Ident(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        idents,
        [
            "let", "s", "let", "r", "let", "b", "let", "q", "let", "e", "let", "l", "str", "x",
            "let", "c", "fn", "f", "x", "str", "let", "type", "crate", "g", "G"
        ]
    );
    let braces = tokens.iter().filter(|t| t.kind == Tok::Punct("{")).count();
    assert_eq!(braces, 1, "the char literal '{{' is no brace");
    assert_eq!(tokens.last().map(|t| t.line), Some(8));
}

#[test]
fn a_circle_is_named_with_its_files_and_the_names_that_tie_them() {
    let graph = graph_of(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        (
            "a.rs",
            "use crate::b::Bee;\n/// [`crate::c::Sea`]\nfn f() {}",
        ),
        ("b.rs", "pub struct Bee; fn g() { super::a::ay(); }"),
        ("c.rs", "pub struct Sea; const S: &str = \"crate::a::ay\";"),
    ]);
    assert_eq!(
        graph.circles(),
        vec!["circle: a.rs -> b.rs (Bee), b.rs -> a.rs (ay)".to_string()]
    );
}

#[test]
fn reexports_lead_to_the_defining_module_and_declarations_are_no_edges() {
    let graph = graph_of(&[
        ("lib.rs", "pub mod sim;"),
        (
            "sim/mod.rs",
            "pub mod chaos; pub mod faults; pub use faults::FaultConfig; \
             pub use chaos::Schedule; use chaos::helper; pub struct Cluster;",
        ),
        // Through the facade to its definer, and the parent's re-export of its own item.
        (
            "sim/chaos.rs",
            "use super::FaultConfig; pub struct Schedule; pub fn helper() {} \
             fn g() -> super::Schedule { todo!() } \
             mod inner { fn f() -> super::Schedule { todo!() } }",
        ),
        ("sim/faults.rs", "pub struct FaultConfig;"),
    ]);
    let edges = graph.edge_list();
    assert_eq!(
        edges,
        vec![
            "sim/chaos.rs -> sim/faults.rs (FaultConfig)".to_string(),
            "sim/mod.rs -> sim/chaos.rs (helper)".to_string(),
        ]
    );
    assert!(graph.circles().is_empty());

    // A child naming an item its parent's own file defines, while the parent uses the child:
    // one family, no circle.
    let graph = graph_of(&[
        (
            "lib.rs",
            "mod serve; pub struct Cluster; fn f() { serve::go(); }",
        ),
        ("serve.rs", "use super::Cluster; pub fn go() {}"),
    ]);
    assert_eq!(
        graph.edge_list(),
        ["lib.rs -> serve.rs (go)", "serve.rs -> lib.rs (Cluster)"]
    );
    assert!(graph.circles().is_empty());
}

#[test]
fn a_family_that_a_module_it_uses_depends_on_is_a_circle() {
    // `p/x.rs -> z.rs` and `z.rs -> p/y.rs`: no two files in a circle, but the module `p`
    // (with what lies below it) and `z` depend on each other.
    let graph = graph_of(&[
        ("lib.rs", "mod p; mod z;"),
        ("p/mod.rs", "mod x; mod y; pub struct Shared;"),
        ("p/x.rs", "use crate::z::Zed; use super::Shared;"),
        ("p/y.rs", "pub struct Why;"),
        ("z.rs", "pub struct Zed; fn f(_: crate::p::y::Why) {}"),
    ]);
    assert_eq!(
        graph.circles(),
        ["circle: p/ -> z.rs (p/x.rs -> z.rs: Zed), z.rs -> p/ (z.rs -> p/y.rs: Why)"]
    );

    // Through a parent's own item: `p/mod.rs -> z.rs -> p/x.rs -> p/mod.rs`.
    let graph = graph_of(&[
        ("lib.rs", "mod p; mod z;"),
        (
            "p/mod.rs",
            "mod x; pub struct Shared; fn f() { crate::z::zed(); }",
        ),
        ("p/x.rs", "use super::Shared; pub struct Ex;"),
        ("z.rs", "pub fn zed() -> crate::p::x::Ex { todo!() }"),
    ]);
    assert_eq!(
        graph.circles(),
        ["circle: p/ -> z.rs (p/mod.rs -> z.rs: zed), z.rs -> p/ (z.rs -> p/x.rs: Ex)"]
    );
}

#[test]
fn a_name_passed_on_by_a_glob_leads_to_its_definer() {
    // `super::Hub` from a sibling reaches `gate.rs` through the parent's `pub use gate::*`.
    let graph = graph_of(&[
        ("lib.rs", "mod controller;"),
        (
            "controller/mod.rs",
            "mod gate; mod drain; pub use gate::*; pub struct Task;",
        ),
        (
            "controller/gate.rs",
            "pub struct Hub; pub const fn hub() {} fn f() { super::drain::go(); }",
        ),
        (
            "controller/drain.rs",
            "use super::Hub; use super::Task; pub fn go() { super::hub(); }",
        ),
    ]);
    assert_eq!(
        graph.edge_list(),
        [
            "controller/drain.rs -> controller/gate.rs (Hub, hub)",
            "controller/drain.rs -> controller/mod.rs (Task)",
            "controller/gate.rs -> controller/drain.rs (go)",
        ]
    );
    assert_eq!(
        graph.circles(),
        [
            "circle: controller/drain.rs -> controller/gate.rs (Hub, hub), \
          controller/gate.rs -> controller/drain.rs (go)"
        ]
    );
}

#[test]
fn test_code_is_no_part_of_the_layout() {
    let graph = graph_of(&[
        ("lib.rs", "mod a; mod b; #[cfg(test)] mod fixtures;"),
        ("a.rs", "use crate::b::B; pub struct A;"),
        (
            "b.rs",
            "pub struct B; #[cfg(test)] mod tests { use crate::a::A; mod deeper { fn f(_: crate::a::A) {} } }",
        ),
        ("fixtures.rs", "use crate::a::A; use crate::b::B;"),
    ]);
    assert_eq!(graph.edge_list(), ["a.rs -> b.rs (B)"]);
    assert!(graph.circles().is_empty());
}

#[test]
fn a_bigger_circle_is_reported_through_each_file() {
    let graph = graph_of(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::B; pub struct A;"),
        ("b.rs", "use crate::c::{self, C}; pub struct B;"),
        ("c.rs", "pub struct C; fn f() -> crate::a::A { todo!() }"),
    ]);
    assert_eq!(
        graph.circles(),
        vec!["circle: a.rs -> b.rs (B), b.rs -> c.rs (C), c.rs -> a.rs (A)".to_string()]
    );
}

#[test]
fn feature_gated_simulator_uses_are_recognised() {
    let sources: BTreeMap<String, String> = [
        (
            "main.rs",
            "mod cli;\n#[cfg(feature = \"simulate\")]\nmod sim;\nfn main() {\n\
             #[cfg(feature = \"simulate\")]\nif x { rollboot_sim::a(); }\n\
             match c {\n#[cfg(feature = \"simulate\")]\nC::S(a) => rollboot_sim::b(a),\n\
             C::T => rollboot_sim::c(),\n}\n}\n",
        ),
        ("sim.rs", "use rollboot_sim::x;"),
        (
            "cli.rs",
            "#[cfg(feature = \"simulate\")]\nimpl From<A> for rollboot_sim::O {\n fn from() {}\n}\n\
             #[cfg(not(feature = \"simulate\"))]\nfn f() { rollboot_sim::d(); }\n",
        ),
    ]
    .into_iter()
    .map(|(p, s)| (p.to_string(), s.to_string()))
    .collect();
    let outside = simulator_uses_outside_feature(&sources, "main.rs");
    assert_eq!(
        outside,
        BTreeMap::from([
            ("cli.rs".to_string(), vec![6]),
            ("main.rs".to_string(), vec![10])
        ])
    );
}

fn graph_of(files: &[(&str, &str)]) -> Graph {
    let sources = files
        .iter()
        .map(|(p, s)| (p.to_string(), s.to_string()))
        .collect();
    Graph::build(&sources, "lib.rs").expect("a graph")
}

// ---------------------------------------------------------------------------------------------
// Reading the sources.

pub(crate) fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, by its path relative to `dir` (with `/`).
pub(crate) fn read_crate(dir: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<String, String>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(base).expect("under base");
                let rel = rel.to_string_lossy().replace('\\', "/");
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                out.insert(rel, text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// The lexer: code tokens only.

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    /// The text of a string literal (any kind), kept for the checks on `include!` and paths.
    Str(String),
    /// `::`, `->`, `=>` or one character of punctuation.
    Punct(&'static str),
    /// A number, a char literal or any other character: never part of a path.
    Other,
}

#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub(crate) kind: Tok,
    pub(crate) line: usize,
}

pub(crate) fn is_punct(t: Option<&Token>, p: &str) -> bool {
    matches!(t, Some(Token { kind: Tok::Punct(q), .. }) if *q == p)
}

pub(crate) fn is_ident(t: Option<&Token>, name: &str) -> bool {
    matches!(t, Some(Token { kind: Tok::Ident(s), .. }) if s == name)
}

pub(crate) fn ident_of(t: Option<&Token>) -> Option<&str> {
    match t {
        Some(Token {
            kind: Tok::Ident(s),
            ..
        }) => Some(s),
        _ => None,
    }
}

pub(crate) fn lex(src: &str) -> Vec<Token> {
    const PUNCT: &[&str] = &[
        "{", "}", "(", ")", "[", "]", ";", ",", "*", "#", "!", "<", ">", ".", "$", "=", ":",
    ];
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let ident_char = |c: u8| c == b'_' || c.is_ascii_alphanumeric() || c >= 0x80;
    // Skips a quoted literal whose opening quote is at `i`; returns its end and its text.
    let quoted = |i: usize, line: &mut usize| -> (usize, String) {
        let mut j = i + 1;
        while j < b.len() && b[j] != b'"' {
            if b[j] == b'\\' {
                j += 1;
            }
            if j < b.len() && b[j] == b'\n' {
                *line += 1;
            }
            j += 1;
        }
        let text = src.get(i + 1..j.min(b.len())).unwrap_or("").to_string();
        (j + 1, text)
    };
    while i < b.len() {
        let c = b[i];
        let at = line;
        let mut push = |kind: Tok| out.push(Token { kind, line: at });
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == b'"' {
            let (end, text) = quoted(i, &mut line);
            push(Tok::Str(text));
            i = end;
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}', '\'') or a lifetime ('a, 'static).
            let next_len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
            if b.get(i + 1) == Some(&b'\\') {
                let mut j = i + 3;
                while j < b.len() && b[j] != b'\'' {
                    j += 1;
                }
                push(Tok::Other);
                i = j + 1;
            } else if b.get(i + 1 + next_len) == Some(&b'\'') {
                push(Tok::Other);
                i += 2 + next_len;
            } else {
                i += 1;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() {
            while i < b.len() && ident_char(b[i]) {
                i += 1;
            }
            push(Tok::Other);
        } else if ident_char(c) {
            let start = i;
            while i < b.len() && ident_char(b[i]) {
                i += 1;
            }
            let word = &src[start..i];
            let hashes = b[i..].iter().take_while(|&&h| h == b'#').count();
            if matches!(word, "r" | "br" | "cr") && b.get(i + hashes) == Some(&b'"') {
                // A raw string: ends at a quote followed by as many hashes.
                let open = i + hashes + 1;
                let mut j = open;
                while j < b.len()
                    && !(b[j] == b'"'
                        && b[j + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&h| h == b'#')
                            .count()
                            == hashes)
                {
                    if b[j] == b'\n' {
                        line += 1;
                    }
                    j += 1;
                }
                push(Tok::Str(src.get(open..j).unwrap_or("").to_string()));
                i = j + 1 + hashes;
            } else if matches!(word, "b" | "c") && b.get(i) == Some(&b'"') {
                let (end, text) = quoted(i, &mut line);
                push(Tok::Str(text));
                i = end;
            } else if word == "b" && b.get(i) == Some(&b'\'') {
                // A byte literal: b'x', b'\''.
                let mut j = i + 1;
                if b.get(j) == Some(&b'\\') {
                    j += 1;
                }
                j += 1;
                while j < b.len() && b[j] != b'\'' {
                    j += 1;
                }
                push(Tok::Other);
                i = j + 1;
            } else if word == "r" && hashes == 1 && b.get(i + 1).is_some_and(|&c| ident_char(c)) {
                // A raw identifier: r#type.
                let start = i + 1;
                i = start;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
                push(Tok::Ident(src[start..i].to_string()));
            } else {
                push(Tok::Ident(word.to_string()));
            }
        } else if b[i..].starts_with(b"::") {
            push(Tok::Punct("::"));
            i += 2;
        } else if b[i..].starts_with(b"->") {
            push(Tok::Punct("->"));
            i += 2;
        } else if b[i..].starts_with(b"=>") {
            push(Tok::Punct("=>"));
            i += 2;
        } else {
            let p = PUNCT.iter().find(|p| p.as_bytes()[0] == c);
            push(p.map_or(Tok::Other, |p| Tok::Punct(p)));
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Modules, imports and paths, as written.

/// A module's path from the crate root: `["crate", "sim", "kinds"]`.
pub(crate) type ModPath = Vec<String>;

/// One name a `use` declaration brings in.
#[derive(Clone, Debug)]
struct Import {
    /// The path as written (relative to the module it is declared in).
    path: Vec<String>,
    /// The name it is known by here; `None` for a glob.
    local: Option<String>,
    public: bool,
}

/// What one module (a file or an inline `mod x { .. }`) says.
#[derive(Debug, Default)]
struct Module {
    /// The file it is written in (its key in the sources): its node in the graph.
    node: String,
    /// Under `#[cfg(test)]` (itself or a module it is in): no part of the layout.
    test: bool,
    children: BTreeSet<String>,
    imports: Vec<Import>,
    /// Paths of two segments or more in code (outside `use`), as written.
    paths: Vec<Vec<String>>,
    /// Names used in code as a path's head or alone (outside `use`).
    used: BTreeSet<String>,
    /// The items it defines itself (fn, struct, enum, trait, type, const, static, union,
    /// macro_rules): a name not among them may come through one of its glob imports.
    defines: BTreeSet<String>,
}

/// A module a file declares with `mod x;`: its path, its file without `.rs`, and whether it
/// is test code.
type Declared = (ModPath, String, bool);

/// Reads one file's tokens into the modules it holds, and returns the files it declares.
fn read_module_file(
    file: &str,
    tokens: &[Token],
    path: &ModPath,
    test: bool,
    modules: &mut BTreeMap<ModPath, Module>,
) -> Result<Vec<Declared>, String> {
    // The directory of the file's children: `a/b.rs` declares `a/b/x.rs`; `a/mod.rs` and the
    // crate root declare `a/x.rs`.
    let dir = {
        let (parent, name) = file.rsplit_once('/').unwrap_or(("", file));
        let stem = name.trim_end_matches(".rs");
        let own = matches!(name, "mod.rs" | "lib.rs" | "main.rs");
        match (parent, own) {
            ("", true) => String::new(),
            ("", false) => format!("{stem}/"),
            (p, true) => format!("{p}/"),
            (p, false) => format!("{p}/{stem}/"),
        }
    };
    let mut declared = Vec::new();
    // The inline modules we are in, each with the brace depth that closes it and the depth of
    // its items.
    let mut stack: Vec<(ModPath, usize, usize)> = vec![(path.clone(), usize::MAX, 0)];
    let mut depth = 0usize;
    let module = modules.entry(path.clone()).or_default();
    module.node = file.to_string();
    module.test = test;
    let mut i = 0;
    while i < tokens.len() {
        let here = &stack.last().expect("the file's module").0;
        match &tokens[i].kind {
            Tok::Punct("{") => depth += 1,
            Tok::Punct("}") => {
                depth = depth.saturating_sub(1);
                if stack.last().is_some_and(|(_, d, _)| *d == depth) {
                    stack.pop();
                }
            }
            Tok::Punct("#")
                if is_punct(tokens.get(i + 1), "[") && is_ident(tokens.get(i + 2), "path") =>
            {
                return Err(format!(
                    "{file}:{}: a #[path] attribute: keep modules at their default place",
                    tokens[i].line
                ));
            }
            Tok::Ident(kw) if kw == "mod" && !is_punct(tokens.get(i.wrapping_sub(1)), "::") => {
                if let Some(name) = ident_of(tokens.get(i + 1)) {
                    let mut child = here.clone();
                    child.push(name.to_string());
                    modules
                        .get_mut(here)
                        .expect("known")
                        .children
                        .insert(name.to_string());
                    if is_punct(tokens.get(i + 2), ";") {
                        let inline: Vec<&str> =
                            here[path.len()..].iter().map(String::as_str).collect();
                        let base = if inline.is_empty() {
                            dir.clone()
                        } else {
                            format!("{dir}{}/", inline.join("/"))
                        };
                        let test = modules[here].test || is_test_only(tokens, i);
                        declared.push((child, base + name, test));
                    } else if is_punct(tokens.get(i + 2), "{") {
                        let test = modules[here].test || is_test_only(tokens, i);
                        let module = modules.entry(child.clone()).or_default();
                        module.node = file.to_string();
                        module.test = test;
                        stack.push((child, depth, depth + 1));
                        depth += 1;
                        i += 3;
                        continue;
                    }
                }
            }
            Tok::Ident(kw) if kw == "use" && !is_punct(tokens.get(i + 1), "<") => {
                let public = is_ident(tokens.get(i.wrapping_sub(1)), "pub")
                    || (is_punct(tokens.get(i.wrapping_sub(1)), ")") && {
                        let open = (0..i).rev().find(|&j| is_punct(tokens.get(j), "("));
                        open.is_some_and(|j| is_ident(tokens.get(j.wrapping_sub(1)), "pub"))
                    });
                let mut imports = Vec::new();
                let end = parse_use_tree(tokens, i + 1, &[], public, &mut imports);
                modules
                    .get_mut(here)
                    .expect("known")
                    .imports
                    .extend(imports);
                i = end;
                continue;
            }
            Tok::Ident(name) => {
                let after_dot = is_punct(tokens.get(i.wrapping_sub(1)), ".");
                let in_path = is_punct(tokens.get(i.wrapping_sub(1)), "::");
                if !after_dot && !in_path {
                    let mut segs = vec![name.clone()];
                    let mut j = i + 1;
                    while is_punct(tokens.get(j), "::") {
                        match ident_of(tokens.get(j + 1)) {
                            Some(s) => segs.push(s.to_string()),
                            None => break,
                        }
                        j += 2;
                    }
                    let items_depth = stack.last().expect("the file's module").2;
                    let module = modules.get_mut(here).expect("known");
                    module.used.insert(name.clone());
                    if segs.len() > 1 {
                        module.paths.push(segs);
                    }
                    if depth == items_depth {
                        if let Some(item) = item_name(tokens, i) {
                            module.defines.insert(item.to_string());
                        }
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(declared)
}

/// The name of the item whose keyword is at `i`, if it is an item's keyword.
pub(crate) fn item_name(tokens: &[Token], i: usize) -> Option<&str> {
    const KEYWORDS: [&str; 8] = [
        "fn", "struct", "enum", "trait", "type", "const", "static", "union",
    ];
    let keyword = ident_of(tokens.get(i))?;
    let mut next = i + 1;
    if keyword == "macro_rules" && is_punct(tokens.get(next), "!") {
        next += 1;
    } else if !KEYWORDS.contains(&keyword) {
        return None;
    }
    if is_ident(tokens.get(next), "mut") {
        next += 1;
    }
    // `const fn f`: the `fn` names it.
    ident_of(tokens.get(next)).filter(|n| !KEYWORDS.contains(n) && *n != "_")
}

/// Whether the item whose keyword is at `i` carries `#[cfg(test)]`.
pub(crate) fn is_test_only(tokens: &[Token], i: usize) -> bool {
    attributes(tokens, i).iter().any(|&(open, close)| {
        let attr = &tokens[open + 1..close];
        is_ident(attr.first(), "cfg")
            && attr.iter().any(|t| is_ident(Some(t), "test"))
            && !attr.iter().any(|t| is_ident(Some(t), "not"))
    })
}

/// The outer attributes of the item whose keyword is at `i`, last first: the indexes of each
/// one's `[` and `]` (its `#` is just before the `[`).
pub(crate) fn attributes(tokens: &[Token], i: usize) -> Vec<(usize, usize)> {
    let mut k = i;
    // Its visibility: `pub`, `pub(crate)`, `pub(in path)`.
    if is_punct(tokens.get(k.wrapping_sub(1)), ")") {
        if let Some(open) = (0..k).rev().find(|&j| is_punct(tokens.get(j), "(")) {
            if is_ident(tokens.get(open.wrapping_sub(1)), "pub") {
                k = open - 1;
            }
        }
    } else if is_ident(tokens.get(k.wrapping_sub(1)), "pub") {
        k -= 1;
    }
    let mut found = Vec::new();
    while is_punct(tokens.get(k.wrapping_sub(1)), "]") {
        let mut level = 0;
        let mut j = k - 1;
        loop {
            match tokens[j].kind {
                Tok::Punct("]") => level += 1,
                Tok::Punct("[") => level -= 1,
                _ => {}
            }
            if level == 0 || j == 0 {
                break;
            }
            j -= 1;
        }
        found.push((j, k - 1));
        if !is_punct(tokens.get(j.wrapping_sub(1)), "#") {
            break;
        }
        k = j - 1;
    }
    found
}

/// Parses a use tree starting at `i` under `prefix`; returns the index after it.
fn parse_use_tree(
    tokens: &[Token],
    mut i: usize,
    prefix: &[String],
    public: bool,
    out: &mut Vec<Import>,
) -> usize {
    let mut path = prefix.to_vec();
    if is_punct(tokens.get(i), "::") {
        // `use ::std::..`: another crate.
        path.push("::".to_string());
        i += 1;
    }
    loop {
        match tokens.get(i).map(|t| &t.kind) {
            Some(Tok::Punct("$")) => i += 1, // `$crate` in a macro: the crate itself.
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                i += 1;
                if is_punct(tokens.get(i), "::") {
                    i += 1;
                    continue;
                }
                let mut local = path.last().cloned();
                if is_ident(tokens.get(i), "as") {
                    local = ident_of(tokens.get(i + 1))
                        .filter(|a| *a != "_")
                        .map(str::to_string);
                    i += 2;
                }
                if path.last().is_some_and(|s| s == "self") {
                    path.pop();
                    if local.as_deref() == Some("self") {
                        local = path.last().cloned();
                    }
                }
                if let Some(local) = local {
                    out.push(Import {
                        path,
                        local: Some(local),
                        public,
                    });
                } else {
                    // `use x as _`: a trait brought in for its methods, still a dependency.
                    out.push(Import {
                        path,
                        local: Some("_".into()),
                        public: false,
                    });
                }
                return skip_semicolon(tokens, i);
            }
            Some(Tok::Punct("*")) => {
                out.push(Import {
                    path,
                    local: None,
                    public,
                });
                return skip_semicolon(tokens, i + 1);
            }
            Some(Tok::Punct("{")) => {
                i += 1;
                while !is_punct(tokens.get(i), "}") && i < tokens.len() {
                    i = parse_use_tree(tokens, i, &path, public, out);
                    if is_punct(tokens.get(i), ",") {
                        i += 1;
                    }
                }
                return skip_semicolon(tokens, i + 1);
            }
            _ => return i,
        }
    }
}

fn skip_semicolon(tokens: &[Token], i: usize) -> usize {
    if is_punct(tokens.get(i), ";") {
        i + 1
    } else {
        i
    }
}

// ---------------------------------------------------------------------------------------------
// The graph.

/// The files of a crate and the names that tie them.
pub(crate) struct Graph {
    /// file -> file -> the names that tie them (test code left out).
    edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// Each file's module path.
    pub(crate) paths: BTreeMap<String, ModPath>,
}

impl Graph {
    pub(crate) fn build(sources: &BTreeMap<String, String>, root: &str) -> Result<Graph, String> {
        let mut modules: BTreeMap<ModPath, Module> = BTreeMap::new();
        let mut queue = VecDeque::from([(vec!["crate".to_string()], root.to_string(), false)]);
        while let Some((path, file, test)) = queue.pop_front() {
            // `mod x;` is `x.rs` or `x/mod.rs`.
            let file = if sources.contains_key(&file) {
                file
            } else {
                format!("{}/mod.rs", file.trim_end_matches(".rs"))
            };
            let source = sources
                .get(&file)
                .ok_or_else(|| format!("module {} has no file {file}", path.join("::")))?;
            let tokens = lex(source);
            for (child, base, test) in read_module_file(&file, &tokens, &path, test, &mut modules)?
            {
                queue.push_back((child, format!("{base}.rs"), test));
            }
        }
        let mut paths: BTreeMap<String, ModPath> = BTreeMap::new();
        for (path, module) in modules.iter().filter(|(_, m)| !m.test) {
            // A file's path is its outermost module's.
            paths
                .entry(module.node.clone())
                .or_insert_with(|| path.clone());
        }
        let resolver = Resolver { modules: &modules };
        let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        // `use super::events;` names the module itself: its name ties two files only when
        // nothing it holds is named (`events::Fields` is).
        let mut module_names: Vec<(String, String, String)> = Vec::new();
        for (path, module) in modules.iter().filter(|(_, m)| !m.test) {
            let mut add = |target: Option<Target>| match target {
                Some(t) if t.node == module.node || t.test => {}
                Some(t) if t.module_itself => {
                    module_names.push((module.node.clone(), t.node, t.name));
                }
                Some(t) => {
                    edges
                        .entry(module.node.clone())
                        .or_default()
                        .entry(t.node)
                        .or_default()
                        .insert(t.name);
                }
                None => {}
            };
            for import in &module.imports {
                let uses_it = match &import.local {
                    Some(local) => !import.public || module.used.contains(local),
                    None => !import.public,
                };
                if uses_it {
                    let abs = resolver.absolute(path, &import.path, 0);
                    add(abs.and_then(|abs| resolver.target(&abs, 0)));
                }
            }
            for segs in &module.paths {
                let abs = resolver.absolute(path, segs, 0);
                add(abs.and_then(|abs| resolver.target(&abs, 0)));
            }
        }
        for (from, to, name) in module_names {
            let names = edges.entry(from).or_default().entry(to).or_default();
            if names.is_empty() {
                names.insert(name);
            }
        }
        Ok(Graph { edges, paths })
    }

    /// Every edge, `from -> to (names)`.
    fn edge_list(&self) -> Vec<String> {
        self.edges
            .iter()
            .flat_map(|(from, to)| {
                to.iter()
                    .map(move |(to, names)| format!("{from} -> {to} ({})", join(names)))
            })
            .collect()
    }

    /// The circles at every level of the module tree. At the level of module `m`, each child
    /// of `m` stands for itself and every module below it (its family), and an edge between
    /// two files counts at the level where their paths part: `controller/gate.rs ->
    /// drain.rs` is `controller/ -> drain.rs` at the crate's level. An edge between a file
    /// and one of its ancestors counts at no level: a child may use what its parent's own
    /// file holds for the family (its error type, its task handle), and the parent uses its
    /// children.
    fn circles(&self) -> Vec<String> {
        // level -> unit -> unit -> the file edges that tie them.
        type Ties<'a> = BTreeMap<(&'a str, &'a str), &'a BTreeSet<String>>;
        let mut levels: BTreeMap<ModPath, BTreeMap<ModPath, BTreeMap<ModPath, Ties>>> =
            BTreeMap::new();
        for (from, to) in &self.edges {
            for (to, names) in to {
                let (pf, pt) = (&self.paths[from], &self.paths[to]);
                let common = pf.iter().zip(pt).take_while(|(a, b)| a == b).count();
                if common == pf.len() || common == pt.len() {
                    continue;
                }
                levels
                    .entry(pf[..common].to_vec())
                    .or_default()
                    .entry(pf[..=common].to_vec())
                    .or_default()
                    .entry(pt[..=common].to_vec())
                    .or_default()
                    .insert((from.as_str(), to.as_str()), names);
            }
        }
        let mut out = Vec::new();
        for units in levels.values() {
            let digraph = Digraph {
                edges: units
                    .iter()
                    .map(|(u, to)| {
                        let to = to
                            .iter()
                            .map(|(v, ties)| (self.unit(v), self.ties(u, v, ties)))
                            .collect();
                        (self.unit(u), to)
                    })
                    .collect(),
            };
            out.extend(digraph.circles());
        }
        out
    }

    /// A unit's name: its file, or its directory when modules lie below it (`controller/`).
    fn unit(&self, path: &ModPath) -> String {
        let file = self
            .paths
            .iter()
            .find(|(_, p)| *p == path)
            .map(|(f, _)| f.clone())
            .unwrap_or_else(|| path.join("::"));
        let family = self
            .paths
            .values()
            .any(|p| p.len() > path.len() && p.starts_with(path));
        match file.rsplit_once('/') {
            Some((dir, _)) if family => format!("{dir}/"),
            _ => file,
        }
    }

    /// What ties two units: the names, and the files when a unit is a family.
    fn ties(
        &self,
        u: &ModPath,
        v: &ModPath,
        ties: &BTreeMap<(&str, &str), &BTreeSet<String>>,
    ) -> String {
        let single = ties.len() == 1 && {
            let (from, to) = ties.keys().next().expect("one");
            self.unit(u) == *from && self.unit(v) == *to
        };
        if single {
            join(ties.values().next().expect("one"))
        } else {
            ties.iter()
                .map(|((from, to), names)| format!("{from} -> {to}: {}", join(names)))
                .collect::<Vec<_>>()
                .join("; ")
        }
    }
}

/// A directed graph of named units, each edge with the text of what ties it.
struct Digraph {
    edges: BTreeMap<String, BTreeMap<String, String>>,
}

impl Digraph {
    /// Each circle as the shortest cycle through each of its units, once.
    fn circles(&self) -> Vec<String> {
        let mut found = BTreeSet::new();
        let mut out = Vec::new();
        for scc in self.components() {
            let set: BTreeSet<&str> = scc.iter().map(String::as_str).collect();
            for start in &scc {
                let Some(mut cycle) = self.shortest_cycle(start, &set) else {
                    continue;
                };
                // The same cycle from its smallest unit, once.
                let min = (0..cycle.len()).min_by_key(|&k| &cycle[k]).unwrap_or(0);
                cycle.rotate_left(min);
                if found.insert(cycle.clone()) {
                    let steps: Vec<String> = (0..cycle.len())
                        .map(|k| {
                            let (a, b) = (&cycle[k], &cycle[(k + 1) % cycle.len()]);
                            format!("{a} -> {b} ({})", self.edges[a][b])
                        })
                        .collect();
                    out.push(format!("circle: {}", steps.join(", ")));
                }
            }
        }
        out
    }

    fn successors<'a>(&'a self, unit: &str) -> impl Iterator<Item = &'a String> {
        self.edges.get(unit).into_iter().flat_map(BTreeMap::keys)
    }

    /// The strongly connected sets of two units or more (Tarjan).
    fn components(&self) -> Vec<Vec<String>> {
        struct State<'a> {
            graph: &'a Digraph,
            index: HashMap<&'a str, usize>,
            low: HashMap<&'a str, usize>,
            stack: Vec<&'a str>,
            on_stack: BTreeSet<&'a str>,
            out: Vec<Vec<String>>,
        }
        fn visit<'a>(s: &mut State<'a>, v: &'a str) {
            let n = s.index.len();
            s.index.insert(v, n);
            s.low.insert(v, n);
            s.stack.push(v);
            s.on_stack.insert(v);
            for w in s.graph.successors(v) {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if s.on_stack.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if s.low[v] == s.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = s.stack.pop() {
                    s.on_stack.remove(w);
                    scc.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    s.out.push(scc);
                }
            }
        }
        let mut state = State {
            graph: self,
            index: HashMap::new(),
            low: HashMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            out: Vec::new(),
        };
        for v in self.edges.keys() {
            if !state.index.contains_key(v.as_str()) {
                visit(&mut state, v);
            }
        }
        state.out.sort();
        state.out
    }

    /// The shortest cycle from `start` back to it inside `within` (breadth first).
    fn shortest_cycle(&self, start: &str, within: &BTreeSet<&str>) -> Option<Vec<String>> {
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            for w in self.successors(v) {
                let w = w.as_str();
                if !within.contains(w) {
                    continue;
                }
                if w == start {
                    let mut cycle = vec![v.to_string()];
                    let mut at = v;
                    while at != start {
                        at = came_from[at];
                        cycle.push(at.to_string());
                    }
                    cycle.reverse();
                    return Some(cycle);
                }
                if !came_from.contains_key(w) {
                    came_from.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        None
    }
}

fn join(names: &BTreeSet<String>) -> String {
    names
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Resolves paths as rustc does for the cases this layout uses (2018 paths).
struct Resolver<'a> {
    modules: &'a BTreeMap<ModPath, Module>,
}

impl Resolver<'_> {
    /// `segs` as written in module `at`, from the crate root; `None` for another crate's path
    /// or a name this module defines (an enum's variants, an associated function).
    fn absolute(&self, at: &ModPath, segs: &[String], depth: usize) -> Option<Vec<String>> {
        if depth > 16 {
            return None;
        }
        let head = segs.first()?;
        let rest = &segs[1..];
        let mut base = match head.as_str() {
            "crate" => vec!["crate".to_string()],
            "self" => at.clone(),
            "super" => at[..at.len().saturating_sub(1)].to_vec(),
            name => {
                let module = self.modules.get(at)?;
                if module.children.contains(name) {
                    let mut p = at.clone();
                    p.push(name.to_string());
                    p
                } else if let Some(import) = module
                    .imports
                    .iter()
                    .find(|i| i.local.as_deref() == Some(name))
                {
                    self.absolute(at, &import.path, depth + 1)?
                } else {
                    return None;
                }
            }
        };
        if base.is_empty() {
            return None;
        }
        let mut rest = rest.iter().peekable();
        // `super::super::x`.
        while rest.peek().is_some_and(|s| *s == "super") {
            base.pop();
            rest.next();
        }
        base.extend(rest.cloned());
        Some(base)
    }

    /// The file that defines what `abs` names, and the name: the module's own item, or the
    /// item its `use` passes on, followed to where it is defined.
    fn target(&self, abs: &[String], depth: usize) -> Option<Target> {
        if depth > 16 {
            return None;
        }
        let mut n = 1;
        while n < abs.len() && self.modules.contains_key(&abs[..=n].to_vec()) {
            n += 1;
        }
        let module_path = abs[..n].to_vec();
        let module = self.modules.get(&module_path)?;
        let Some(name) = abs.get(n) else {
            return Some(Target {
                node: module.node.clone(),
                test: module.test,
                name: abs[n - 1].clone(),
                module_itself: true,
            });
        };
        if let Some(import) = module
            .imports
            .iter()
            .find(|i| i.local.as_ref() == Some(name))
        {
            let mut through = self.absolute(&module_path, &import.path, depth + 1)?;
            through.extend(abs[n + 1..].iter().cloned());
            return self.target(&through, depth + 1);
        }
        if !module.defines.contains(name) {
            // Through a glob (`pub use gate::*;`): to the module that has the name.
            for glob in module.imports.iter().filter(|i| i.local.is_none()) {
                let Some(from) = self.absolute(&module_path, &glob.path, depth + 1) else {
                    continue;
                };
                let Some(source) = self.modules.get(&from) else {
                    continue;
                };
                let has = source.defines.contains(name)
                    || source.children.contains(name)
                    || source
                        .imports
                        .iter()
                        .any(|i| i.local.as_ref() == Some(name));
                if has {
                    let mut through = from;
                    through.extend(abs[n..].iter().cloned());
                    return self.target(&through, depth + 1);
                }
            }
        }
        Some(Target {
            node: module.node.clone(),
            test: module.test,
            name: name.clone(),
            module_itself: false,
        })
    }
}

/// What a path leads to: a name in a node, or a module itself.
struct Target {
    node: String,
    test: bool,
    name: String,
    module_itself: bool,
}

// ---------------------------------------------------------------------------------------------
// The binary's feature gate.

/// The lines, per file, where `rollboot_sim` is named outside `#[cfg(feature = "simulate")]`:
/// an item, statement, field, variant or match arm under that attribute, or a file whose
/// `mod` declaration carries it.
fn simulator_uses_outside_feature(
    sources: &BTreeMap<String, String>,
    root: &str,
) -> BTreeMap<String, Vec<usize>> {
    // Files declared under the feature, and the files they declare in turn.
    let mut gated_files: BTreeSet<String> = BTreeSet::new();
    let mut queue = VecDeque::from([(root.to_string(), false)]);
    let mut out = BTreeMap::new();
    while let Some((file, gated)) = queue.pop_front() {
        let Some(source) = sources.get(&file) else {
            continue;
        };
        let tokens = lex(source);
        let spans = feature_spans(&tokens);
        let covered = |i: usize| gated || spans.iter().any(|&(a, b)| a <= i && i < b);
        let dir = match file.rsplit_once('/') {
            Some((p, name)) if name != "mod.rs" => format!("{p}/{}/", name.trim_end_matches(".rs")),
            Some((p, _)) => format!("{p}/"),
            None if matches!(file.as_str(), "main.rs" | "lib.rs") => String::new(),
            None => format!("{}/", file.trim_end_matches(".rs")),
        };
        for (i, t) in tokens.iter().enumerate() {
            if is_ident(Some(t), "mod") && is_punct(tokens.get(i + 2), ";") {
                if let Some(name) = ident_of(tokens.get(i + 1)) {
                    let child = format!("{dir}{name}.rs");
                    let child = if sources.contains_key(&child) {
                        child
                    } else {
                        format!("{dir}{name}/mod.rs")
                    };
                    if covered(i) {
                        gated_files.insert(child.clone());
                    }
                    queue.push_back((child, covered(i)));
                }
            }
            if is_ident(Some(t), "rollboot_sim") && !covered(i) {
                out.entry(file.clone())
                    .or_insert_with(Vec::new)
                    .push(t.line);
            }
        }
    }
    out
}

/// Token ranges under `#[cfg(feature = "simulate")]` (also inside `all(..)`, never under
/// `not(..)`): from the attribute to the end of what it carries, which is the first `;` or
/// `,` at its own level, or its first `{ .. }` block (with any `else` blocks after it).
fn feature_spans(tokens: &[Token]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if !(is_punct(tokens.get(i), "#") && is_punct(tokens.get(i + 1), "[")) {
            i += 1;
            continue;
        }
        // The attribute's tokens, to its closing bracket.
        let mut j = i + 2;
        let mut level = 1;
        while j < tokens.len() && level > 0 {
            match tokens[j].kind {
                Tok::Punct("[") => level += 1,
                Tok::Punct("]") => level -= 1,
                _ => {}
            }
            j += 1;
        }
        let attr = &tokens[i + 2..j.saturating_sub(1)];
        let gates = is_ident(attr.first(), "cfg")
            && attr.windows(3).any(|w| {
                is_ident(w.first(), "feature")
                    && is_punct(w.get(1), "=")
                    && matches!(&w[2].kind, Tok::Str(s) if s == "simulate")
            })
            && !attr.iter().any(|t| is_ident(Some(t), "not"));
        if gates {
            spans.push((i, end_of_carried(tokens, j)));
        }
        i = j;
    }
    spans
}

/// Where the item, statement or arm starting at `i` ends.
fn end_of_carried(tokens: &[Token], mut i: usize) -> usize {
    let mut level = 0i32;
    let mut angle = 0i32;
    while i < tokens.len() {
        match tokens[i].kind {
            Tok::Punct("(") | Tok::Punct("[") | Tok::Punct("{") => level += 1,
            Tok::Punct("<") if level == 0 => angle += 1,
            Tok::Punct(">") if level == 0 && angle > 0 => angle -= 1,
            Tok::Punct(")") | Tok::Punct("]") => {
                level -= 1;
                if level < 0 {
                    return i;
                }
            }
            Tok::Punct("}") => {
                level -= 1;
                if level < 0 {
                    return i;
                }
                if level == 0 && !is_ident(tokens.get(i + 1), "else") {
                    return i + 1;
                }
            }
            Tok::Punct(";") if level == 0 => return i + 1,
            Tok::Punct(",") if level == 0 && angle == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}
