//! What a user types and writes: the `rollboot` binary's subcommands (run as processes, against
//! the simulated cluster where they need one), the config file's validation and its windows,
//! and `rollboot migrate kured`.

mod check_config;
mod config_source;
mod config_validation;
mod consistency;
mod controls;
mod migrate_kured;
mod plan;
mod processes;
mod run;
mod simulate;
mod status;
mod status_watch;
mod windows;
