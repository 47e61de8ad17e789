//! `rollboot completions SHELL`: the shell's completion script, from the same command
//! definition the parser uses (clap_complete), so it offers exactly the subcommands, options
//! and values the binary takes. It must never list a subcommand by hand.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

use super::Cli;

/// Writes the script on stdout.
pub fn print(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    // Generated into memory first: the generator panics on a write error, and a script piped
    // into `head` is no reason to.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "rollboot", &mut script);
    std::io::stdout().lock().write_all(&script)?;
    Ok(ExitCode::SUCCESS)
}
