//! What a user types and writes: the `rollboot` binary's subcommands (run as processes, against
//! the simulated cluster where they need one), the config file's validation, schema and windows,
//! `rollboot migrate kured`, the shell completions, man pages and generated references, and the
//! binary as a kubectl plugin.

mod check_config;
mod completions;
mod config_source;
mod config_validation;
mod consistency;
mod controls;
mod explain;
mod migrate_kured;
mod plan;
mod plugin;
mod processes;
mod reference_docs;
mod run;
mod schema;
mod simulate;
mod status;
mod status_watch;
mod windows;
