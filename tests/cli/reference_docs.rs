//! The generated references, docs/reference/config.md (from the config types, through their
//! schema) and docs/reference/commands.md (from the command line's clap definition), are what
//! `rollboot docs` writes now: a key, a default, a subcommand or an option changed in the code
//! and not in the committed pages fails here, naming the command that rewrites them. Their
//! links within the page lead to headings.
//!
//! `ROLLBOOT_BLESS=1 cargo test --test cli reference_docs::` rewrites them.

use std::path::{Path, PathBuf};

use crate::run as cli;

const REGENERATE: &str = "cargo run -- docs --out docs/reference";

#[test]
fn the_committed_references_are_what_the_generator_writes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("reference");
    let (code, listed, err) = cli::rollboot_blocking(
        Path::new("/nonexistent"),
        &["docs", "--out", out.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let mut stale = Vec::new();
    for name in ["config.md", "commands.md"] {
        assert!(listed.contains(name), "{listed}");
        let generated = std::fs::read_to_string(out.join(name)).unwrap();
        let committed_path = root.join("docs/reference").join(name);
        if std::env::var_os("ROLLBOOT_BLESS").is_some() {
            std::fs::write(&committed_path, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(&committed_path).unwrap_or_default();
        if committed != generated {
            let line = committed
                .lines()
                .zip(generated.lines())
                .position(|(a, b)| a != b)
                .map_or(
                    committed.lines().count().min(generated.lines().count()),
                    |i| i,
                )
                + 1;
            stale.push(format!(
                "docs/reference/{name} (first difference at line {line})"
            ));
        }
    }
    for name in ["config.md", "commands.md"] {
        let text = std::fs::read_to_string(out.join(name)).unwrap();
        let anchors = heading_anchors(&text);
        for link in text.split("](#").skip(1) {
            let target = &link[..link.find(')').unwrap()];
            assert!(
                anchors.iter().any(|a| a == target),
                "{name}: #{target} is no heading's anchor"
            );
        }
    }
    assert!(
        stale.is_empty(),
        "{} differ from what the generator writes: regenerate with `{REGENERATE}` \
         (or ROLLBOOT_BLESS=1 cargo test --test cli reference_docs::)",
        stale.join(", ")
    );
}

/// The anchors GitHub gives the headings of `text`: the heading's text (code spans as their
/// text), lower case, without punctuation but `-` and `_`, spaces as `-`.
fn heading_anchors(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            l.trim_start_matches('#')
                .strip_prefix(' ')
                .filter(|_| l.starts_with('#'))
        })
        .map(|h| {
            h.chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                .map(|c| {
                    if c == ' ' {
                        '-'
                    } else {
                        c.to_ascii_lowercase()
                    }
                })
                .collect()
        })
        .collect()
}
