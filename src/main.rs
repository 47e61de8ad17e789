//! The `rollboot` binary: parses the command line and hands over to [`rollboot::cli`].

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = rollboot::cli::Cli::parse();
    match rollboot::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
