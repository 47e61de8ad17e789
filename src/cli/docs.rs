//! What is generated from the binary's own definitions for people to read elsewhere: the man
//! pages (`rollboot man`, clap_mangen), the config file's JSON Schema (`rollboot config
//! schema`), and the two reference pages of docs/reference/ (`rollboot docs`): config.md from
//! the config types (through their schema), commands.md from this command line.
//!
//! It must never describe a subcommand, an option or a config key in words of its own: the
//! words are the clap definitions' and the config fields' doc comments, so the pages cannot
//! drift from the binary. Tests compare the committed files with what this writes.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;

use rollboot::config::reference::anchor;

use super::Cli;

/// The reference pages' file names in their directory.
pub const CONFIG_REFERENCE: &str = "config.md";
pub const COMMANDS_REFERENCE: &str = "commands.md";

/// The command that writes docs/reference/, as the pages and the tests name it.
const REGENERATE: &str = "cargo run -- docs --out docs/reference";

/// `rollboot man`: rollboot.1 and one page per subcommand, nested ones included
/// (rollboot-migrate-kured.1), each path printed.
pub fn man(out: &Path) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    let mut written = Vec::new();
    write_pages(&command, out, &mut written)?;
    let mut stdout = std::io::stdout().lock();
    for path in written {
        writeln!(stdout, "{}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The page of `command` and of each of its visible subcommands, depth first.
fn write_pages(
    command: &clap::Command,
    out: &Path,
    written: &mut Vec<std::path::PathBuf>,
) -> anyhow::Result<()> {
    let page = clap_mangen::Man::new(command.clone());
    let path = out.join(page.get_filename());
    let mut roff = Vec::new();
    page.render(&mut roff)?;
    std::fs::write(&path, roff).with_context(|| format!("writing {}", path.display()))?;
    written.push(path);
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, out, written)?;
    }
    Ok(())
}

/// `rollboot config schema`: the schema on stdout.
pub fn print_schema() -> anyhow::Result<ExitCode> {
    std::io::stdout()
        .lock()
        .write_all(rollboot::config::schema::schema_text().as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// `rollboot docs`: config.md and commands.md into `out`, each path printed.
pub fn write_references(out: &Path) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let config = rollboot::config::reference::markdown(
        &rollboot::config::schema::schema(),
        &format!("`{REGENERATE}`"),
    );
    for (name, text) in [
        (CONFIG_REFERENCE, config),
        (COMMANDS_REFERENCE, commands_markdown()),
    ] {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// commands.md: every visible subcommand, depth first, with its description, usage and
/// arguments.
pub fn commands_markdown() -> String {
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Command reference\n\n\
         <!-- Generated from the command line's definition by `{REGENERATE}`; do not edit. -->\n\n\
         Every command takes `-h`/`--help` (`--help` says more than `-h`). Exit codes, the \
         same for every command: 0 success; 1 a runtime or cluster error; 2 an invalid config; \
         3 refused or blocked (the command's description says when); 64 a command line that \
         does not parse.\n"
    );
    for sub in visible(&command) {
        let _ = writeln!(
            md,
            "- [`{}`](#{}): {}",
            title(sub),
            anchor(&title(sub)),
            first_line(sub)
        );
        for nested in visible(sub) {
            let _ = writeln!(
                md,
                "  - [`{}`](#{}): {}",
                title(nested),
                anchor(&title(nested)),
                first_line(nested)
            );
        }
    }
    section(&command, true, &mut md);
    md
}

fn visible(command: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    command.get_subcommands().filter(|s| !s.is_hide_set())
}

/// `rollboot migrate kured`, as typed.
fn title(command: &clap::Command) -> String {
    command
        .get_bin_name()
        .unwrap_or(command.get_name())
        .to_string()
}

fn first_line(command: &clap::Command) -> String {
    command
        .get_about()
        .map(|a| a.to_string())
        .unwrap_or_default()
}

/// One command's section, then its subcommands'. The `top` one's global options are said
/// there only.
fn section(command: &clap::Command, top: bool, md: &mut String) {
    let _ = writeln!(md, "\n## `{}`\n", title(command));
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        let _ = writeln!(md, "{}\n", sentence(about.to_string().trim_end()));
    }
    let usage = command.clone().render_usage().to_string();
    let _ = writeln!(md, "```text\n{}\n```", usage.trim_end());
    let args: Vec<&clap::Arg> = command
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !["help", "version"].contains(&a.get_id().as_str()))
        // A global option is said once, at the top.
        .filter(|a| top || !a.is_global_set())
        .collect();
    if !args.is_empty() {
        md.push('\n');
    }
    for arg in args {
        let _ = writeln!(md, "- {}", argument(arg));
    }
    for sub in visible(command) {
        section(sub, false, md);
    }
}

/// `` `-o, --output <OUTPUT>`: Output format. Values: ... Default: `text`. ``
fn argument(arg: &clap::Arg) -> String {
    let values = arg
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
    let takes_value = arg.get_action().takes_values();
    let form = match (arg.get_short(), arg.get_long()) {
        (_, None) => values.trim_matches(['<', '>']).to_string(),
        (Some(s), Some(l)) if takes_value => format!("-{s}, --{l} {values}"),
        (Some(s), Some(l)) => format!("-{s}, --{l}"),
        (None, Some(l)) if takes_value => format!("--{l} {values}"),
        (None, Some(l)) => format!("--{l}"),
    };
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let mut line = format!("`{form}`: {}", sentence(&one_paragraph(&help)));
    if arg.is_required_set() {
        line.push_str(" Required.");
    }
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| match v.get_help() {
            Some(h) => format!(
                "`{}` ({})",
                v.get_name(),
                h.to_string().trim_end_matches('.')
            ),
            None => format!("`{}`", v.get_name()),
        })
        .collect();
    if takes_value && !possible.is_empty() {
        let _ = write!(line, " Values: {}.", possible.join(", "));
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if takes_value && !defaults.is_empty() {
        let _ = write!(line, " Default: `{}`.", defaults.join(","));
    }
    if let Some(env) = arg.get_env() {
        let _ = write!(line, " Environment: `{}`.", env.to_string_lossy());
    }
    line
}

/// `text` ending as a sentence: clap drops the full stop of a one-line help.
fn sentence(text: &str) -> String {
    match text.chars().last() {
        Some('.' | '!' | '?') | None => text.to_string(),
        Some(_) => format!("{text}."),
    }
}

/// Help text as one Markdown paragraph per blank-line-separated block, for a list item.
fn one_paragraph(text: &str) -> String {
    text.split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(" ")
}
