//! What rollboot gives a shell and `man`: `rollboot completions SHELL` (a bash script that
//! completes subcommands, their options and values when bash runs it; zsh and fish scripts
//! for the same command), and `rollboot man`, a page per visible subcommand, nested ones too.

use std::path::Path;
use std::process::Command;

use crate::run as cli;

fn run(args: &[&str]) -> (i32, String, String) {
    cli::rollboot_blocking(Path::new("/nonexistent"), args)
}

/// What bash's completion function offers for `line` (the word being completed last).
fn bash_completes(script: &Path, words: &[&str]) -> Vec<String> {
    let cword = words.len() - 1;
    let prev = if cword > 0 { words[cword - 1] } else { "" };
    let o = Command::new("bash")
        .args(["--norc", "--noprofile", "-c"])
        .arg(
            r#"source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1));
               COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE};
               _rollboot rollboot "${COMP_WORDS[COMP_CWORD]}" "$PREV"; printf '%s\n' "${COMPREPLY[@]}""#,
        )
        .arg("bash")
        .arg(script)
        .args(words)
        .env("PREV", prev)
        .output()
        .expect("bash");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn bash_completes_subcommands_options_and_values_from_the_script() {
    let (code, script, err) = run(&["completions", "bash"]);
    assert_eq!(code, 0, "{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollboot.bash");
    std::fs::write(&path, &script).unwrap();
    let offered = bash_completes(&path, &["rollboot", "sta"]);
    assert_eq!(offered, ["status"], "{offered:?}");
    let offered = bash_completes(&path, &["rollboot", "config", ""]);
    assert!(offered.contains(&"schema".to_string()), "{offered:?}");
    let offered = bash_completes(&path, &["rollboot", "status", "--out"]);
    assert_eq!(offered, ["--output"], "{offered:?}");
    let offered = bash_completes(&path, &["rollboot", "plan", "-o", ""]);
    assert_eq!(offered, ["text", "json"], "{offered:?}");
    let offered = bash_completes(&path, &["rollboot", "completions", "f"]);
    assert_eq!(offered, ["fish"], "{offered:?}");
}

#[test]
fn zsh_and_fish_scripts_complete_the_same_command() {
    let (code, zsh, err) = run(&["completions", "zsh"]);
    assert_eq!(code, 0, "{err}");
    assert!(zsh.starts_with("#compdef rollboot"), "{zsh}");
    let (code, fish, err) = run(&["completions", "fish"]);
    assert_eq!(code, 0, "{err}");
    for sub in [
        "status",
        "plan",
        "pause",
        "check-config",
        "completions",
        "man",
        "config",
    ] {
        assert!(zsh.contains(&format!("'{sub}:")), "zsh: no {sub}");
        assert!(fish.contains(&format!("-a \"{sub}\"")), "fish: no {sub}");
    }
    let (code, _, err) = run(&["completions", "tcsh"]);
    assert_eq!(code, 64, "{err}");
}

#[test]
fn man_writes_a_page_for_rollboot_and_each_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let (code, listed, err) = run(&["man", "--out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (_, help, _) = run(&["--help"]);
    let subs: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .map_while(|l| l.strip_prefix("  ")?.split_whitespace().next())
        .filter(|s| *s != "help")
        .collect();
    assert!(
        subs.contains(&"status") && subs.contains(&"man"),
        "{subs:?}"
    );
    let mut pages: Vec<String> = vec![
        "rollboot".into(),
        "rollboot-migrate-kured".into(),
        "rollboot-config-schema".into(),
    ];
    pages.extend(subs.iter().map(|s| format!("rollboot-{s}")));
    for page in &pages {
        let path = out.join(format!("{page}.1"));
        assert!(
            listed.contains(path.to_str().unwrap()),
            "{page} not listed:\n{listed}"
        );
        let roff = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(roff.starts_with(".ie"), "{page}: {roff}");
        assert!(roff.contains(&format!(".TH {page} 1")), "{page}: {roff}");
        for section in [".SH NAME", ".SH SYNOPSIS"] {
            assert!(roff.contains(section), "{page}: no {section}");
        }
    }
    let status = std::fs::read_to_string(out.join("rollboot-status.1")).unwrap();
    assert!(status.contains("\\-\\-config"), "{status}");
    // The hidden `docs` has no page; `help` is no subcommand of a page.
    assert!(!out.join("rollboot-docs.1").exists());
    assert!(!out.join("rollboot-help.1").exists());
    // Rendered as man renders it, where groff is installed.
    match Command::new("groff")
        .args(["-man", "-Tutf8", "-P-cbou"])
        .arg(out.join("rollboot-status.1"))
        .output()
    {
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success() && text.contains("SYNOPSIS") && text.contains("--config"),
                "{text}"
            );
        }
        Err(e) => eprintln!("groff not run ({e}): the pages' rendering is not checked"),
    }
}
