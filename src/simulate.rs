//! `rollboot simulate`: the real controller (2 replicas) and one real agent per node, in-process,
//! against the embedded simulated cluster; flags nodes, runs the rollout, prints the report.
//!
//! Owns the glue between the product and the simulator (the simulated [`RebootMethod`](crate::agent::RebootMethod)
//! and sentinel) and the rollout report. It must never reach into the product's decisions: the
//! controller and agents here are exactly the production code, talking HTTP to the simulator.

use std::process::ExitCode;

/// Arguments of `rollboot simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Nodes in the simulated cluster.
    #[arg(long, default_value_t = 20)]
    pub nodes: usize,
    /// Pods per node.
    #[arg(long, default_value_t = 10)]
    pub pods_per_node: usize,
    /// Nodes flagged for a reboot: `all` or a number.
    #[arg(long, default_value = "all")]
    pub flagged: String,
    /// Simulated reboot time (e.g. `2s`).
    #[arg(long, default_value = "1s")]
    pub reboot_time: crate::config::Duration,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Report format.
    #[arg(long, value_enum, default_value_t = crate::cli::Output::Text)]
    pub report: crate::cli::Output,
}

/// Runs `rollboot simulate`.
pub fn main(_args: SimulateArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("the simulated cluster is not available in this build yet")
}
