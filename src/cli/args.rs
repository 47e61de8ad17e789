//! Every argument of the command line, in one place: the subcommands and their options, with
//! clap. What they mean lives in the library crates; the options are handed over as plain
//! values (`rollboot_sim::simulate::Options` for `simulate`).

use std::path::PathBuf;

use chrono::{DateTime, Utc};
#[cfg(feature = "simulate")]
use clap::Args;
use clap::{Parser, Subcommand, ValueEnum};

use rollboot::config;

/// rollboot reboots a Kubernetes cluster's nodes one after another, safely and unattended.
#[derive(Debug, Parser)]
#[command(name = "rollboot", version, about, propagate_version = true)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "ROLLBOOT_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Output format of a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Human-readable text.
    Text,
    /// One JSON object.
    Json,
}

/// Which cluster a subcommand talks to.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ClusterArgs {
    /// Kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

impl From<ClusterArgs> for rollboot::client::Target {
    fn from(a: ClusterArgs) -> Self {
        rollboot::client::Target {
            kubeconfig: a.kubeconfig,
            context: a.context,
        }
    }
}

/// Where an operator's command takes the controller's config from: `--config FILE`, else the
/// cluster's ConfigMap (`--config-map`); see `cli/source.rs`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ConfigArgs {
    /// The YAML config file (the controller's). Default: the ConfigMap of --config-map, read
    /// from the cluster.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Without --config: the ConfigMap holding the controller's config under the key
    /// `rollboot.yaml` (get on it needed).
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        default_value_t,
        conflicts_with = "config"
    )]
    pub config_map: rollboot::cluster_config::ConfigMapRef,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a config file and print the next maintenance openings.
    ///
    /// Exit 0 valid, 2 invalid (every problem with its key, line and column).
    #[command(group(clap::ArgGroup::new("input").required(true).args(["file", "config"])))]
    CheckConfig {
        /// The YAML config file (or `--config FILE`).
        file: Option<PathBuf>,
        /// The YAML config file, as the other subcommands take it.
        #[arg(long, value_name = "FILE", conflicts_with = "file")]
        config: Option<PathBuf>,
        /// Compute openings from this instant (RFC 3339) instead of now.
        #[arg(long, value_parser = parse_instant)]
        from: Option<DateTime<Utc>>,
        /// How many openings to print.
        #[arg(long, default_value_t = 5)]
        next: usize,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Run a controller replica (leader election, maintenance lock, reboot cycle).
    Controller {
        /// The YAML config file.
        #[arg(long)]
        config: PathBuf,
        /// This replica's identity in the leader Lease (default: the host name).
        #[arg(long, env = "POD_NAME")]
        identity: Option<String>,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Address of `/metrics`, `/healthz` and `/readyz`.
        #[arg(long, default_value = "0.0.0.0:8080")]
        metrics_addr: std::net::SocketAddr,
    },
    /// Run the agent of one node (sentinel check and reboots).
    Agent {
        /// The YAML config file.
        #[arg(long)]
        config: PathBuf,
        /// The node this agent runs on.
        #[arg(long, env = "NODE_NAME")]
        node_name: String,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Address of `/metrics` and `/healthz` (default: not served).
        #[arg(long)]
        metrics_addr: Option<std::net::SocketAddr>,
    },
    /// Show the rollout: leader, maintenance lock, flagged/in-flight/failed nodes, schedule.
    ///
    /// Reads the cluster with the current kubeconfig (get and list only; list and watch with
    /// --watch). Exit 0 normally, 1 when the cluster cannot be read, 2 for an invalid config.
    Status {
        #[command(flatten)]
        config: ConfigArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Output format (with --watch, json: one object per change, one per line).
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Follow the rollout through watches until Ctrl-C: on a terminal, a frame redrawn at
        /// each change (the nodes in flight, their state and since when, done/total with a
        /// progress bar, the failures); otherwise one line per change. done/total counts the
        /// nodes waiting, in flight or failed at some moment since the watch began.
        #[arg(long)]
        watch: bool,
        /// With --watch: stop once nothing moves without an operator (no node waits or is in
        /// flight, or the rollout is halted on failures with none in flight): exit 0 when no
        /// node failed, 3 when one did.
        #[arg(long, requires = "watch")]
        until_done: bool,
    },
    /// Predict the rollout: which nodes, in which order and when, what each drain evicts, and
    /// every pod, budget or cluster condition that would block it or fail a node.
    ///
    /// Reads the cluster with the current kubeconfig (get and list only). Exit 0 when the
    /// rollout would proceed, 3 when something would block or fail it, 1 when the cluster
    /// cannot be read, 2 for an invalid config.
    Plan {
        #[command(flatten)]
        config: ConfigArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Plan a rollout of every node the selector matches, not only the flagged ones.
        #[arg(long)]
        all: bool,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// How long one reboot takes, from the request until the node is back and Ready
        /// (default: as rollboot measured on each node's last cycle, else the median of the
        /// nodes' last cycles, else 5m).
        #[arg(long)]
        reboot_time: Option<config::Duration>,
        /// How long the health gate takes once the node is back, its budgets healthy again
        /// (default: measured, as --reboot-time, else 1m).
        #[arg(long)]
        gate_time: Option<config::Duration>,
        /// Plan from this instant (RFC 3339) instead of now; the cluster is read as it is now.
        #[arg(long, value_parser = parse_instant)]
        at: Option<DateTime<Utc>>,
        /// Ask Prometheus for `blockers.prometheus` at this URL instead of the config's (an
        /// in-cluster address is often out of reach from here: a port-forward's).
        #[arg(long)]
        prometheus_url: Option<String>,
    },
    /// Say why a node is not rebooting now, and when it will: every reason that holds it, each
    /// with a stable code, as the controller's own decisions say.
    ///
    /// Reads the cluster with the current kubeconfig (get and list only). Exit 0 when the node
    /// is eligible now or in flight, 3 when something holds it, 1 when there is no such node or
    /// the cluster cannot be read, 2 for an invalid config.
    Explain {
        /// The node.
        node: String,
        #[command(flatten)]
        config: ConfigArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Run the real controller and agents against an embedded simulated cluster.
    #[cfg(feature = "simulate")]
    Simulate(Box<SimulateArgs>),
    /// Turn another reboot tool's settings into a rollboot config.
    Migrate {
        /// The tool.
        #[command(subcommand)]
        from: MigrateFrom,
    },
    /// Pause rollboot: take the maintenance lock as the operator, recording who, when and why.
    ///
    /// Nothing new starts while paused; the nodes in flight finish their cycle. Exit 0 paused
    /// (or already), 1 cluster error, 2 invalid config, 3 refused (another tool holds the lock).
    Pause {
        #[command(flatten)]
        config: ConfigArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Why, shown by `rollboot status`.
        #[arg(long)]
        reason: Option<String>,
        /// Who pauses (default: the USER environment variable).
        #[arg(long)]
        by: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Resume rollboot: release the maintenance lock taken by `rollboot pause`.
    ///
    /// Exit 0 resumed (or not paused), 1 cluster error, 2 invalid config, 3 refused: the lock is
    /// held by rollboot's controller or another tool (`--force` releases it anyway).
    Resume {
        #[command(flatten)]
        config: ConfigArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Release the lock whoever holds it (the nodes it records in flight are kept).
        #[arg(long)]
        force: bool,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Clear a failed node (its state, failure reason and what its cycle left) so the
    /// controller takes it again from the start; uncordon it if rollboot cordoned it.
    ///
    /// Exit 0 cleared, 1 cluster error (or no such node), 2 invalid config, 3 refused: the node
    /// is not failed.
    Retry {
        /// The node.
        node: String,
        // The controller's config: its lock and leader Leases, read to say whether anything
        // stands in the way.
        #[command(flatten)]
        config: ConfigArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Flag a node for a reboot (`rollboot.dev/reboot-requested`, dated now: oldest flag first).
    ///
    /// Exit 0 requested (or already), 1 cluster error (or no such node), 2 invalid config.
    Request {
        /// The node.
        node: String,
        // The controller's config (as for `retry`).
        #[command(flatten)]
        config: ConfigArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Why, shown by `rollboot status`.
        #[arg(long)]
        reason: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Print the completion script of a shell for rollboot.
    ///
    /// bash: `rollboot completions bash > /etc/bash_completion.d/rollboot` (or `source <(rollboot
    /// completions bash)` in ~/.bashrc); zsh: `rollboot completions zsh > _rollboot` in a
    /// directory of `$fpath`; fish: `rollboot completions fish >
    /// ~/.config/fish/completions/rollboot.fish`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages: rollboot(1) and one per subcommand (rollboot-status(1), ...).
    ///
    /// Prints the path of each page written. `man -l DIR/rollboot.1` reads one in place.
    Man {
        /// The directory to write them into (created when missing).
        #[arg(long, value_name = "DIR", default_value = ".")]
        out: PathBuf,
    },
    /// The config file's JSON Schema (`check-config` validates a file).
    Config {
        /// What to print.
        #[command(subcommand)]
        what: ConfigCommand,
    },
    /// Write the generated references (config.md from the config types, commands.md from this
    /// command line) into a directory: how docs/reference/ is made.
    #[command(hide = true)]
    Docs {
        /// The directory (created when missing).
        #[arg(long, value_name = "DIR", default_value = "docs/reference")]
        out: PathBuf,
    },
}

/// What `rollboot config` prints.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the config file's JSON Schema (draft 2020-12), derived from the types the
    /// config is parsed into: an editor with the YAML language server checks a file as it is
    /// typed when its first line is `# yaml-language-server: $schema=PATH`.
    ///
    /// The schema checks keys, types and defaults; `rollboot check-config` also checks
    /// values (cron expressions, time zones, selectors).
    Schema,
}

/// The tools `rollboot migrate` reads.
#[derive(Debug, Subcommand)]
pub enum MigrateFrom {
    /// A kured DaemonSet manifest (as kured-ds.yaml or its Helm chart renders it) or a flag
    /// list: the config on stdout (YAML that check-config accepts), and on stderr, for every
    /// flag not carried over, why.
    ///
    /// Exit 0, 2 when kured would refuse the input (naming the flag) or the manifest has no
    /// kured DaemonSet, 1 when the file cannot be read.
    Kured {
        /// The manifest (`-` for standard input).
        file: Option<PathBuf>,
        /// kured's flags, as on its command line (`--reboot-days=mon,tue --start-time=2:00`);
        /// after the manifest's when both are given.
        #[arg(
            long,
            value_name = "FLAGS",
            required_unless_present = "file",
            allow_hyphen_values = true
        )]
        flags: Option<String>,
        /// Output format: the YAML config (notes on stderr), or `{config, notes}`.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

impl From<Output> for rollboot::render::Output {
    fn from(o: Output) -> Self {
        match o {
            Output::Text => rollboot::render::Output::Text,
            Output::Json => rollboot::render::Output::Json,
        }
    }
}

/// The simulated world of `rollboot simulate` (and `--serve`).
#[cfg(feature = "simulate")]
#[derive(Debug, Args)]
pub struct WorldArgs {
    /// Serve the simulated API until Ctrl-C.
    #[arg(long)]
    pub serve: bool,
    /// Scenario YAML file (camelCase keys, see `sim::Scenario`); defaults otherwise.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Number of nodes (overrides the scenario).
    #[arg(long)]
    pub nodes: Option<usize>,
    /// Pods per node (overrides the scenario).
    #[arg(long)]
    pub pods_per_node: Option<usize>,
    /// The Nodes' InternalIPs (overrides the scenario): `private` (10.x.y.z) or `loopback`
    /// (each node its own 127.1.y.z, to send a host's FleetLock requests from its address).
    #[arg(long, value_name = "private|loopback", value_parser = parse_node_addresses)]
    pub node_addresses: Option<rollboot_sim::sim::scenario::NodeAddresses>,
    /// Real seconds per simulated second (overrides the scenario).
    #[arg(long)]
    pub time_factor: Option<f64>,
    /// Seed (overrides the scenario).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = "rollboot-sim.kubeconfig")]
    pub kubeconfig_out: PathBuf,
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: std::net::SocketAddr,
    /// Bearer token written in the kubeconfig (the caller identity in the accounting).
    #[arg(long, default_value = "operator")]
    pub token: String,
}

/// Arguments of `rollboot simulate`: the simulator's own (`--serve` and the world) plus the
/// rollout's.
#[cfg(feature = "simulate")]
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The simulated world (and `--serve`).
    #[command(flatten)]
    pub sim: WorldArgs,
    /// Nodes flagged for a reboot: `all` or a number.
    #[arg(long, default_value = "all")]
    pub flagged: String,
    /// Simulated reboot time in simulated seconds (overrides the scenario; default 30).
    #[arg(long)]
    pub reboot_time: Option<f64>,
    /// rollboot config for the controller and agents (default: fast settings for simulation).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Report format (`--report` is an older name of it).
    #[arg(short = 'o', long, alias = "report", value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Keep the controllers and agents running at least this long (e.g. `60s`), then report
    /// the API requests per minute: with `--flagged 0`, the idle traffic.
    #[arg(long)]
    pub idle_for: Option<rollboot::config::Duration>,
    /// Plays the fault schedule drawn from SEED (API 500/429 storms, slow answers, cut
    /// watches, an outage, leader kills and pauses, agent kills and stalls, hosts that hang or
    /// fail, a Node or the lock deleted, budgets blocked, slow pods), on a world and config
    /// drawn from the same seed unless `--scenario`/`--config` say otherwise. The report shows
    /// the schedule: put it in a scenario's `faults:` to replay it.
    #[arg(long, value_name = "SEED")]
    pub chaos: Option<u64>,
    /// With `--serve`: run the rollout (controller replicas, agents, simulated reboots) behind
    /// the served API, so it can be watched live with kubectl and `rollboot status`; the report
    /// is printed once it is decided, and serving goes on until Ctrl-C.
    #[arg(long, requires = "serve")]
    pub rollout: bool,
    /// With `--serve --rollout`: where to write the config the rollout runs with, for
    /// `rollboot status --config` and `plan --config` against it (default:
    /// rollboot-sim.config.yaml beside the kubeconfig).
    #[arg(long, value_name = "FILE", requires = "rollout")]
    pub config_out: Option<std::path::PathBuf>,
    /// With `--config`: call its hooks' webhooks (and wait on its gates) and send to its
    /// notification sinks, which a simulation otherwise drops: to try a receiver against a
    /// simulated rollout (`--serve --rollout`). Alertmanager silences stay dropped.
    #[arg(long, requires = "config")]
    pub call_hooks: bool,
    /// Rehearse on a snapshot of the cluster of the current kubeconfig (read-only: gets and
    /// lists of Nodes, Pods, PodDisruptionBudgets, Deployments, ReplicaSets, StatefulSets,
    /// DaemonSets) instead of a generated world. A `--scenario` then gives only the timings
    /// (reboot, start and taint delays, time factor); its world size is not used.
    #[arg(long, conflicts_with_all = ["snapshot", "chaos", "serve"])]
    pub from_cluster: bool,
    /// With `--from-cluster`: the cluster to read.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// With `--from-cluster`: also write the snapshot to FILE (to rehearse it elsewhere).
    #[arg(long, value_name = "FILE", requires = "from_cluster")]
    pub snapshot_out: Option<std::path::PathBuf>,
    /// Rehearse on the snapshot in FILE (written by `--snapshot-out`).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["chaos", "serve"])]
    pub snapshot: Option<std::path::PathBuf>,
}

#[cfg(feature = "simulate")]
impl From<SimulateArgs> for rollboot_sim::simulate::Options {
    fn from(a: SimulateArgs) -> Self {
        let w = a.sim;
        rollboot_sim::simulate::Options {
            sim: rollboot_sim::sim::serve::WorldOptions {
                serve: w.serve,
                scenario: w.scenario,
                nodes: w.nodes,
                pods_per_node: w.pods_per_node,
                node_addresses: w.node_addresses,
                time_factor: w.time_factor,
                seed: w.seed,
                kubeconfig_out: w.kubeconfig_out,
                listen: w.listen,
                token: w.token,
            },
            flagged: a.flagged,
            reboot_time: a.reboot_time,
            config: a.config,
            report: a.output.into(),
            target: a.cluster.into(),
            idle_for: a.idle_for,
            chaos: a.chaos,
            rollout: a.rollout,
            config_out: a.config_out,
            call_hooks: a.call_hooks,
            from_cluster: a.from_cluster,
            snapshot_out: a.snapshot_out,
            snapshot: a.snapshot,
        }
    }
}

pub(crate) fn parse_instant(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.to_utc())
        .map_err(|e| format!("`{s}` is not an RFC 3339 instant such as 2026-03-29T00:00:00Z: {e}"))
}

/// `--node-addresses`: `private` or `loopback`.
#[cfg(feature = "simulate")]
fn parse_node_addresses(v: &str) -> Result<rollboot_sim::sim::scenario::NodeAddresses, String> {
    use rollboot_sim::sim::scenario::NodeAddresses;
    match v {
        "private" => Ok(NodeAddresses::Private),
        "loopback" => Ok(NodeAddresses::Loopback),
        _ => Err(format!("`{v}` is not `private` or `loopback`")),
    }
}
