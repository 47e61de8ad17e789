//! The command line: argument parsing, output formats and exit codes.
//!
//! Owns what the user sees on the terminal. Decisions live in the library modules; this module
//! only calls them and prints. Exit codes: 0 success, 1 failure (a cluster error names the API
//! server and the object), 2 invalid config or usage, 3 (`plan`) the rollout would be blocked
//! or fail, (`pause`, `resume`, `retry`, `request`) the command refused, saying why.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::json;

use crate::config::{self, Config, ConfigError};
use crate::windows::Opening;

/// Exit code for an invalid config file.
pub const EXIT_INVALID_CONFIG: u8 = 2;

/// Exit code of `rollboot plan` when something would block the rollout or fail a node.
pub const EXIT_WOULD_NOT_PROCEED: u8 = 3;

/// Exit code of the operator's controls when they refuse (the message says why).
pub const EXIT_REFUSED: u8 = 3;

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

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a config file and print the next maintenance openings.
    CheckConfig {
        /// The YAML config file.
        file: PathBuf,
        /// Compute openings from this instant (RFC 3339) instead of now.
        #[arg(long, value_parser = parse_instant)]
        from: Option<DateTime<Utc>>,
        /// How many openings to print.
        #[arg(long, default_value_t = 5)]
        next: usize,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
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
        /// Address of `/metrics` and `/healthz` (default: not served).
        #[arg(long)]
        metrics_addr: Option<std::net::SocketAddr>,
    },
    /// Show the rollout: leader, maintenance lock, flagged/in-flight/failed nodes, schedule.
    ///
    /// Reads the cluster with the current kubeconfig (get and list only). Exit 0 normally,
    /// 1 when the cluster cannot be read, 2 for an invalid config.
    Status {
        /// The YAML config file (the controller's: Lease names, windows, failures).
        #[arg(long)]
        config: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Predict the rollout: which nodes, in which order and when, what each drain evicts, and
    /// every pod, budget or cluster condition that would block it or fail a node.
    ///
    /// Reads the cluster with the current kubeconfig (get and list only). Exit 0 when the
    /// rollout would proceed, 3 when something would block or fail it, 1 when the cluster
    /// cannot be read, 2 for an invalid config.
    Plan {
        /// The YAML config file (the controller's).
        #[arg(long)]
        config: PathBuf,
        /// Plan a rollout of every node the selector matches, not only the flagged ones.
        #[arg(long)]
        all: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
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
    /// Run the real controller and agents against an embedded simulated cluster.
    Simulate(Box<crate::simulate::RolloutArgs>),
    /// Pause rollboot: take the maintenance lock as the operator, recording who, when and why.
    ///
    /// Nothing new starts while paused; the nodes in flight finish their cycle. Exit 0 paused
    /// (or already), 1 cluster error, 2 invalid config, 3 refused (another tool holds the lock).
    Pause {
        /// The YAML config file (the controller's: the lock Lease's name).
        #[arg(long)]
        config: PathBuf,
        /// Why, shown by `rollboot status`.
        #[arg(long)]
        reason: Option<String>,
        /// Who pauses (default: the USER environment variable).
        #[arg(long)]
        by: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Resume rollboot: release the maintenance lock taken by `rollboot pause`.
    ///
    /// Exit 0 resumed (or not paused), 1 cluster error, 2 invalid config, 3 refused: the lock is
    /// held by rollboot's controller or another tool (`--force` releases it anyway).
    Resume {
        /// The YAML config file (the controller's).
        #[arg(long)]
        config: PathBuf,
        /// Release the lock whoever holds it (the nodes it records in flight are kept).
        #[arg(long)]
        force: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Clear a failed node (its state, failure reason and what its cycle left) so the
    /// controller takes it again from the start; uncordon it if rollboot cordoned it.
    ///
    /// Exit 0 cleared, 1 cluster error (or no such node), 3 refused: the node is not failed.
    Retry {
        /// The node.
        node: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Flag a node for a reboot (`rollboot.dev/reboot-requested`, dated now: oldest flag first).
    ///
    /// Exit 0 requested (or already), 1 cluster error (or no such node).
    Request {
        /// The node.
        node: String,
        /// Why, shown by `rollboot status`.
        #[arg(long)]
        reason: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

/// One of the operator's controls, with what it needs.
enum Control {
    Pause {
        config: Config,
        who: String,
        reason: Option<String>,
    },
    Resume {
        config: Config,
        force: bool,
    },
    Retry(String),
    Request(String, Option<String>),
}

fn parse_instant(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.to_utc())
        .map_err(|e| format!("`{s}` is not an RFC 3339 instant such as 2026-03-29T00:00:00Z: {e}"))
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // A simulated rollout runs dozens of components in one process: their logs would bury the
    // progress line, so it logs warnings only unless RUST_LOG says otherwise.
    let quiet = matches!(&cli.command, Command::Simulate(a) if !a.sim.serve)
        || matches!(
            &cli.command,
            Command::Status { .. }
                | Command::Plan { .. }
                | Command::Pause { .. }
                | Command::Resume { .. }
                | Command::Retry { .. }
                | Command::Request { .. }
        );
    init_logging(cli.log_format, if quiet { "warn" } else { "info" });
    match cli.command {
        Command::CheckConfig {
            file,
            from,
            next,
            output,
        } => check_config(&file, from.unwrap_or_else(Utc::now), next, output),
        Command::Controller {
            config,
            identity,
            metrics_addr,
        } => {
            let file = config;
            let Some(config) = load_or_report(&file)? else {
                return Ok(ExitCode::from(EXIT_INVALID_CONFIG));
            };
            let identity = identity.unwrap_or_else(default_identity);
            multi_thread_runtime()?.block_on(async move {
                // Bound before anything else: a replica without /healthz and /readyz would be
                // restarted or never marked ready by its probes, for a reason no log showed.
                let listener = tokio::net::TcpListener::bind(metrics_addr)
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "cannot serve /metrics, /healthz and /readyz on {metrics_addr} (--metrics-addr): {e}"
                        )
                    })?;
                let mut kube_config = kube::Config::infer().await?;
                crate::client::identify(&mut kube_config, "controller");
                let metrics = std::sync::Arc::new(crate::metrics::Metrics::default());
                let served = metrics.clone();
                tokio::spawn(async move {
                    if let Err(e) = crate::metrics::serve_on(listener, served).await {
                        tracing::error!(error = %e, "serving /metrics, /healthz and /readyz stopped");
                    }
                });
                crate::controller::run_with_config_file(
                    kube_config,
                    file,
                    config,
                    identity,
                    metrics,
                    shutdown_signal(),
                )
                .await?;
                Ok(ExitCode::SUCCESS)
            })
        }
        Command::Agent {
            config: file,
            node_name,
            metrics_addr,
        } => {
            let Some(config) = load_or_report(&file)? else {
                return Ok(ExitCode::from(EXIT_INVALID_CONFIG));
            };
            // The agent watches one Node and checks one sentinel: a single thread does it, and
            // it runs on every node, so its memory counts (issue 4: under 15 MiB resident).
            current_thread_runtime()?.block_on(async move {
                let mut kube_config = kube::Config::infer().await?;
                crate::client::identify(&mut kube_config, "agent");
                let client = kube::Client::try_from(kube_config)?;
                let config = std::sync::Arc::new(config);
                let r = &config.reboot;
                let method = crate::agent::HostReboot::from_config(r);
                let sentinel = crate::agent::HostSentinel::from_config(r);
                let metrics = std::sync::Arc::new(crate::agent::AgentMetrics::default());
                if let Some(addr) = metrics_addr {
                    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                        anyhow::anyhow!("cannot serve /metrics and /healthz on {addr} (--metrics-addr): {e}")
                    })?;
                    let served = metrics.clone();
                    tokio::spawn(async move {
                        if let Err(e) = crate::agent::metrics::serve_on(listener, served).await {
                            tracing::error!(error = %e, "serving /metrics and /healthz stopped");
                        }
                    });
                }
                {
                    use crate::agent::RebootMethod;
                    let boot = method.boot_id(&node_name);
                    tracing::info!(
                        node = %node_name,
                        sentinel = %sentinel.describe(),
                        method = %method.describe(),
                        config = %file.display(),
                        host_boot_id = boot.as_deref().unwrap_or("unreadable"),
                        host_machine_id = method.machine_id(&node_name).as_deref().unwrap_or("unknown"),
                        "agent starting"
                    );
                }
                let shutdown = shutdown_signal();
                crate::agent::run(
                    client,
                    config.clone(),
                    node_name,
                    method,
                    sentinel,
                    metrics,
                    shutdown,
                )
                .await?;
                Ok(ExitCode::SUCCESS)
            })
        }
        Command::Status { config, output } => {
            let Some(config) = load_or_report(&config)? else {
                return Ok(ExitCode::from(EXIT_INVALID_CONFIG));
            };
            current_thread_runtime()?.block_on(status(&config, output))
        }
        Command::Plan {
            config,
            all,
            output,
            reboot_time,
            gate_time,
            at,
            prometheus_url,
        } => {
            let Some(config) = load_or_report(&config)? else {
                return Ok(ExitCode::from(EXIT_INVALID_CONFIG));
            };
            let opts = crate::plan::Options {
                all,
                reboot_time,
                gate_time,
            };
            current_thread_runtime()?.block_on(plan(
                &config,
                opts,
                at,
                prometheus_url.as_deref(),
                output,
            ))
        }
        Command::Simulate(args) => crate::simulate::main(*args),
        Command::Pause {
            config,
            reason,
            by,
            output,
        } => {
            let Some(config) = load_or_report(&config)? else {
                return Ok(ExitCode::from(EXIT_INVALID_CONFIG));
            };
            let who = by.unwrap_or_else(|| {
                std::env::var("USER")
                    .or_else(|_| std::env::var("LOGNAME"))
                    .unwrap_or_else(|_| "operator".into())
            });
            control(
                Control::Pause {
                    config,
                    who,
                    reason,
                },
                output,
            )
        }
        Command::Resume {
            config,
            force,
            output,
        } => {
            let Some(config) = load_or_report(&config)? else {
                return Ok(ExitCode::from(EXIT_INVALID_CONFIG));
            };
            control(Control::Resume { config, force }, output)
        }
        Command::Retry { node, output } => control(Control::Retry(node), output),
        Command::Request {
            node,
            reason,
            output,
        } => control(Control::Request(node, reason), output),
    }
}

/// Runs one of the operator's controls with the current kubeconfig, as `rollboot/<version>
/// (operator)`, and prints its report: exit 0 done, 1 cluster error, 3 refused.
fn control(c: Control, output: Output) -> anyhow::Result<ExitCode> {
    use crate::controls::{self, ControlError};
    current_thread_runtime()?.block_on(async move {
        let kube_config = match one_shot_config("operator").await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::FAILURE);
            }
        };
        let server = kube_config.cluster_url.to_string();
        let client = match kube::Client::try_from(kube_config) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: cannot make a client for the API server {server}: {e}");
                return Ok(ExitCode::FAILURE);
            }
        };
        let (command, done) = match &c {
            Control::Pause {
                config,
                who,
                reason,
            } => (
                "pause",
                controls::pause(&client, &server, config, who, reason.as_deref()).await,
            ),
            Control::Resume { config, force } => (
                "resume",
                controls::resume(&client, &server, config, *force).await,
            ),
            Control::Retry(node) => ("retry", controls::retry(&client, &server, node).await),
            Control::Request(node, reason) => (
                "request",
                controls::request(&client, &server, node, reason.as_deref()).await,
            ),
        };
        let mut out = std::io::stdout().lock();
        match done {
            Ok(report) => {
                match output {
                    Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
                    Output::Text => {
                        writeln!(out, "{}", report.message)?;
                        for n in &report.notes {
                            writeln!(out, "  - {n}")?;
                        }
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                let refused = matches!(e, ControlError::Refused(_));
                if output == Output::Json {
                    let doc = json!({
                        "command": command,
                        "outcome": if refused { "refused" } else { "error" },
                        "message": e.to_string(),
                    });
                    writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
                }
                eprintln!("error: {command}: {e}");
                Ok(if refused {
                    ExitCode::from(EXIT_REFUSED)
                } else {
                    ExitCode::FAILURE
                })
            }
        }
    })
}

/// A kube config for a person's one-shot read: the current kubeconfig, identified as
/// `component`, failing in seconds on a hung API server (not after kube's 295 s).
async fn one_shot_config(component: &str) -> Result<kube::Config, String> {
    let mut kube_config = kube::Config::infer().await.map_err(|e| {
        format!("no Kubernetes API server configured (kubeconfig or in-cluster): {e}")
    })?;
    crate::client::identify(&mut kube_config, component);
    let limit = std::time::Duration::from_secs(30);
    kube_config.connect_timeout = Some(limit);
    kube_config.read_timeout = Some(limit);
    Ok(kube_config)
}

async fn plan(
    config: &Config,
    opts: crate::plan::Options,
    at: Option<DateTime<Utc>>,
    prometheus_url: Option<&str>,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let kube_config = match one_shot_config("plan").await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let cluster = match crate::plan::read::fetch(kube_config, config, prometheus_url).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    // Whole seconds: the plan's instants are read by a person, and estimates are whole seconds.
    let now = at.unwrap_or_else(|| chrono::SubsecRound::trunc_subsecs(Utc::now(), 0));
    let report = crate::plan::build(&cluster, config, &opts, now);
    let mut out = std::io::stdout().lock();
    match output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
        Output::Text => write!(out, "{}", crate::plan::render::text(&report))?,
    }
    Ok(if report.proceeds {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_WOULD_NOT_PROCEED)
    })
}

async fn status(config: &Config, output: Output) -> anyhow::Result<ExitCode> {
    let kube_config = match one_shot_config("status").await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let snapshot = match crate::status::fetch(kube_config, config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let report = crate::status::build(config, &snapshot, Utc::now());
    let mut out = std::io::stdout().lock();
    match output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
        Output::Text => write!(out, "{}", crate::status::text(&report))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn multi_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn current_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn default_identity() -> String {
    std::env::var("HOSTNAME").unwrap_or_else(|_| format!("rollboot-{:08x}", rand::random::<u32>()))
}

/// Loads a config, printing its problems; `None` when invalid.
fn load_or_report(file: &std::path::Path) -> anyhow::Result<Option<Config>> {
    match config::load_file(file) {
        Ok(c) => Ok(Some(c)),
        Err(e @ ConfigError::Invalid { .. }) => {
            eprintln!("{e}");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

fn init_logging(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Colour codes only for a person at a terminal, never into a log file or a collector, and
    // not for one who asked for none (NO_COLOR, https://no-color.org: set and not empty).
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()) && !no_color)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

fn check_config(
    file: &std::path::Path,
    from: DateTime<Utc>,
    next: usize,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let config = match config::load_file(file) {
        Ok(c) => c,
        Err(e @ ConfigError::Invalid { .. }) => {
            if output == Output::Json {
                let doc = json!({"valid": false, "file": file, "errors": e.problems()});
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                eprintln!("{e}");
            }
            return Ok(ExitCode::from(EXIT_INVALID_CONFIG));
        }
        Err(e) => return Err(e.into()),
    };
    let openings = config.schedule().openings(from, next);
    let mut out = std::io::stdout().lock();
    match output {
        Output::Json => {
            let openings: Vec<_> = openings.iter().map(|o| opening_json(&config, o)).collect();
            let doc = json!({
                "valid": true,
                "file": file,
                "from": from,
                "allowedNow": config.schedule().is_allowed(from),
                "openings": openings,
                "config": &config,
            });
            writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        }
        Output::Text => {
            writeln!(out, "{}: valid", file.display())?;
            write_summary(&mut out, &config)?;
            writeln!(
                out,
                "\nmaintenance {} at {}",
                if config.schedule().is_allowed(from) {
                    "allowed"
                } else {
                    "not allowed"
                },
                from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            )?;
            match openings.len() {
                1 => writeln!(out, "next opening:")?,
                n => writeln!(out, "next {n} openings:")?,
            }
            for o in &openings {
                writeln!(out, "  {}", opening_text(&config, o))?;
            }
            if openings.is_empty() {
                writeln!(out, "  (none in the look-ahead horizon)")?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn zone_of(config: &Config, o: &Opening) -> Option<chrono_tz::Tz> {
    let w = config.windows.as_ref()?.get(o.window)?;
    w.timezone.parse().ok()
}

/// Always-open schedules have openings without a start or an end (chrono's extreme instants).
fn is_unbounded(t: DateTime<Utc>) -> bool {
    t == DateTime::<Utc>::MAX_UTC || t == DateTime::<Utc>::MIN_UTC
}

fn opening_json(config: &Config, o: &Opening) -> serde_json::Value {
    let fmt = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut v = json!({
        "start": if is_unbounded(o.start) { serde_json::Value::Null } else { fmt(o.start).into() },
        "end": if is_unbounded(o.end) { serde_json::Value::Null } else { fmt(o.end).into() },
        "window": o.window,
    });
    if let Some(tz) = zone_of(config, o) {
        v["timezone"] = tz.name().into();
        if !is_unbounded(o.start) {
            v["startLocal"] = o.start.with_timezone(&tz).to_rfc3339().into();
        }
        if !is_unbounded(o.end) {
            v["endLocal"] = o.end.with_timezone(&tz).to_rfc3339().into();
        }
    }
    v
}

fn opening_text(config: &Config, o: &Opening) -> String {
    let utc = |t: DateTime<Utc>| {
        if is_unbounded(t) {
            "(unbounded)".to_string()
        } else {
            t.format("%Y-%m-%d %H:%M UTC").to_string()
        }
    };
    if is_unbounded(o.start) || is_unbounded(o.end) {
        return format!(
            "{} -> {}  (no window configured: open at any time outside blackouts)",
            utc(o.start),
            utc(o.end)
        );
    }
    let mut s = format!(
        "{} -> {}  ({})",
        utc(o.start),
        utc(o.end),
        crate::config::Duration::from_millis((o.end - o.start).num_milliseconds())
    );
    match zone_of(config, o) {
        // Local times only where they differ from the UTC ones just printed.
        Some(tz) if tz != chrono_tz::UTC => {
            let local =
                |t: DateTime<Utc>| t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string();
            s.push_str(&format!(
                "  window {} ({}): {} -> {}",
                o.window,
                tz.name(),
                local(o.start),
                local(o.end)
            ));
        }
        _ => s.push_str(&format!("  window {}", o.window)),
    }
    s
}

fn write_summary(out: &mut impl Write, c: &Config) -> std::io::Result<()> {
    match &c.windows {
        None => writeln!(out, "windows:      none (maintenance allowed at any time)")?,
        Some(ws) => {
            for (i, w) in ws.iter().enumerate() {
                writeln!(
                    out,
                    "window {i}:     `{}` for {} ({})",
                    w.schedule, w.duration, w.timezone
                )?;
            }
        }
    }
    writeln!(out, "blackouts:    {}", c.blackouts.len())?;
    write!(
        out,
        "concurrency:  {} node(s) at once",
        c.concurrency.max_nodes
    )?;
    if let Some((key, n)) = c.group_limit() {
        write!(out, ", {n} per `{key}`")?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "nodes:        {} ({})",
        if c.nodes.selector.is_empty() {
            "all"
        } else {
            &c.nodes.selector
        },
        match c.nodes.order {
            config::NodeOrder::OldestFlag => "oldest flag first",
            config::NodeOrder::Name => "by name",
        }
    )?;
    writeln!(
        out,
        "drain:        timeout {}, retry every {}, {} evictions at once{}{}",
        c.drain.timeout,
        c.drain.eviction_retry_interval,
        c.drain.concurrent_evictions,
        if c.drain.force_delete_after_timeout {
            ", FORCE-DELETES after timeout"
        } else {
            ""
        },
        if c.drain.evict_unreplicated {
            ", evicts unreplicated pods"
        } else {
            ""
        }
    )?;
    writeln!(
        out,
        "reboot:       {} method, timeout {}, sentinel {}",
        match c.reboot.method {
            config::RebootMethod::Command => "command",
            config::RebootMethod::Signal => "signal",
        },
        c.reboot.timeout,
        match &c.reboot.sentinel_command {
            Some(cmd) => format!("command `{}`", cmd.join(" ")),
            None => format!("file {}", c.reboot.sentinel_file),
        }
    )?;
    writeln!(
        out,
        "leases:       lock {}/{}, leader {}/{} ({} lease, {} renew deadline)",
        c.lock.namespace,
        c.lock.name,
        c.leader.namespace,
        c.leader.name,
        c.leader.lease_duration,
        c.leader.renew_deadline
    )?;
    writeln!(
        out,
        "failures:     rollout halts after {} failed node(s)",
        c.failures.max_failures + 1
    )
}
