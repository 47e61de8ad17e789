//! The command line: argument parsing, output formats and exit codes.
//!
//! Owns what the user sees on the terminal: one function per subcommand, which calls the
//! library and prints the report it builds with [`render`] (text or JSON from the same value).
//! Decisions and the reports' contents live in the library modules; this module must never
//! lay a report out itself. Exit codes, the same for every subcommand (docs/operating.md, "Exit codes"):
//! 0 success; 1 a runtime or cluster error (naming the API server and the object); 2 an
//! invalid config; 3 refused or blocked (`plan`: the rollout would be blocked or fail a node;
//! `explain`: something holds the node; `pause`, `resume`, `retry`: the command refused, saying
//! why; `status --watch --until-done`: a node failed); 64 a usage error (the command line
//! itself, as sysexits' EX_USAGE). The operator's commands take their config from a file or the
//! cluster (`source.rs`).

mod args;
mod completions;
mod docs;
mod explain;
mod logs;
mod source;
mod watch;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use chrono::{DateTime, Utc};

pub use args::{Cli, Command, ConfigArgs, ConfigCommand, LogFormat, MigrateFrom, Output};

use rollboot::client::Target;
use rollboot::config::check::{Checked, Invalid};
use rollboot::config::{self, Config, ConfigError};
use rollboot::controls::{Control, Failure};
use rollboot::render::{render, Render};

/// Exit code for an invalid config file.
pub const EXIT_INVALID_CONFIG: u8 = 2;

/// Exit code of `rollboot plan` when something would block the rollout or fail a node.
pub const EXIT_WOULD_NOT_PROCEED: u8 = 3;

/// Exit code of the operator's controls when they refuse (the message says why).
pub const EXIT_REFUSED: u8 = 3;

/// Exit code of `rollboot status --watch --until-done` when a node of the rollout failed.
pub const EXIT_NODE_FAILED: u8 = 3;

/// Exit code of a command line that does not parse (sysexits' EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// The file name that makes the binary a kubectl plugin: kubectl runs `kubectl-rollboot` from
/// the PATH for `kubectl rollboot ...`, with that path as argv[0].
pub const PLUGIN_FILE_NAME: &str = "kubectl-rollboot";

/// Parses the command line: `--help` and `--version` print and exit 0; a command line that
/// does not parse prints clap's message and exits [`EXIT_USAGE`] (clap's own 2 is the code of
/// an invalid config here). Run as [`PLUGIN_FILE_NAME`] (a link to the binary), its usage
/// lines say `kubectl rollboot`, as the user typed it.
pub fn parse() -> Result<Cli, ExitCode> {
    use clap::error::ErrorKind;
    use clap::{CommandFactory, FromArgMatches};
    let mut command = Cli::command();
    let argv0 = std::env::args_os().next();
    if argv0.as_deref().map(Path::new).and_then(Path::file_name) == Some(PLUGIN_FILE_NAME.as_ref())
    {
        command = command.bin_name("kubectl rollboot");
    }
    command
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|m| Cli::from_arg_matches(&m).map_err(|e| e.format(&mut command)))
        .map_err(|e| {
            let _ = e.print();
            match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => ExitCode::from(EXIT_USAGE),
            }
        })
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    logs::init(
        cli.log_format,
        if quiet(&cli.command) { "warn" } else { "info" },
    );
    match cli.command {
        Command::CheckConfig {
            file,
            config,
            from,
            next,
            output,
        } => {
            // clap requires one of the two.
            let file = file.or(config).unwrap_or_default();
            check_config(&file, from.unwrap_or_else(Utc::now), next, output)
        }
        Command::Controller {
            config,
            identity,
            cluster,
            metrics_addr,
        } => controller(config, identity, cluster.into(), metrics_addr),
        Command::Agent {
            config,
            node_name,
            cluster,
            metrics_addr,
        } => agent(&config, node_name, cluster.into(), metrics_addr),
        Command::Status {
            config,
            cluster,
            output,
            watch,
            until_done,
        } => status(
            &config,
            &cluster.into(),
            output,
            watch.then_some(until_done),
        ),
        Command::Plan {
            config,
            cluster,
            all,
            output,
            reboot_time,
            gate_time,
            at,
            prometheus_url,
        } => {
            let opts = rollboot::plan::Options {
                all,
                reboot_time,
                gate_time,
            };
            plan(
                &config,
                &cluster.into(),
                opts,
                at,
                prometheus_url.as_deref(),
                output,
            )
        }
        Command::Explain {
            node,
            config,
            cluster,
            output,
        } => explain::explain(&node, &config, &cluster.into(), output),
        #[cfg(feature = "simulate")]
        Command::Simulate(args) => rollboot_sim::simulate::main((*args).into()),
        Command::Migrate {
            from:
                MigrateFrom::Kured {
                    file,
                    flags,
                    output,
                },
        } => migrate_kured(file.as_deref(), flags.as_deref(), output),
        Command::Pause {
            config,
            cluster,
            reason,
            by,
            output,
        } => pause(&config, &cluster.into(), by, reason, output),
        Command::Resume {
            config,
            cluster,
            force,
            output,
        } => resume(&config, &cluster.into(), force, output),
        Command::Retry {
            node,
            config,
            cluster,
            output,
        } => control(
            &config,
            |config| Control::Retry { config, node },
            &cluster.into(),
            output,
        ),
        Command::Request {
            node,
            config,
            cluster,
            reason,
            output,
        } => control(
            &config,
            |config| Control::Request {
                config,
                node,
                reason,
            },
            &cluster.into(),
            output,
        ),
        Command::Completions { shell } => completions::print(shell),
        Command::Man { out } => docs::man(&out),
        Command::Config {
            what: ConfigCommand::Schema,
        } => docs::print_schema(),
        Command::Docs { out } => docs::write_references(&out),
    }
}

/// `rollboot migrate kured`: the config on stdout (YAML, or `{config, notes}` as JSON), the
/// notes on stderr with text; exit 2 when kured would refuse the input, 1 when a file cannot
/// be read.
fn migrate_kured(
    file: Option<&Path>,
    flags: Option<&str>,
    output: Output,
) -> anyhow::Result<ExitCode> {
    use rollboot::migrate::kured;
    let manifest = match file {
        None => None,
        Some(p) if p == Path::new("-") => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| anyhow::anyhow!("reading the manifest from standard input: {e}"))?;
            Some((text, "-".to_string()))
        }
        Some(p) => Some((
            std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", p.display()))?,
            p.display().to_string(),
        )),
    };
    let m = match kured::migrate_inputs(
        manifest.as_ref().map(|(t, f)| (t.as_str(), f.as_str())),
        flags,
    ) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_INVALID_CONFIG));
        }
    };
    let mut out = std::io::stdout().lock();
    match output {
        Output::Json => {
            serde_json::to_writer_pretty(&mut out, &m)?;
            writeln!(out)?;
        }
        Output::Text => {
            writeln!(
                out,
                "# rollboot config migrated from kured (`rollboot migrate kured`): check it with\n\
                 # `rollboot check-config FILE`; what was not carried over is said on stderr."
            )?;
            out.write_all(m.yaml().as_bytes())?;
            for n in &m.notes {
                eprintln!("note: {}: {}", n.flag, n.note);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether a command logs warnings only (unless RUST_LOG says otherwise): those that print a
/// report for a person, whose logs would bury it; and a simulated rollout, which runs dozens
/// of components in one process under its progress line.
fn quiet(command: &Command) -> bool {
    #[cfg(feature = "simulate")]
    if let Command::Simulate(a) = command {
        return !a.sim.serve;
    }
    matches!(
        command,
        Command::Status { .. }
            | Command::Plan { .. }
            | Command::Explain { .. }
            | Command::Pause { .. }
            | Command::Resume { .. }
            | Command::Retry { .. }
            | Command::Request { .. }
    )
}

/// Writes `report` on stdout as `output` asks.
fn print<R: Render>(report: &R, output: Output) -> std::io::Result<()> {
    std::io::stdout()
        .lock()
        .write_all(render(report, output.into()).as_bytes())
}

/// Says a cluster error on stderr: exit 1.
fn cluster_error(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::FAILURE
}

/// `rollboot check-config`: the settings and next openings of a valid file, or every problem
/// of an invalid one (its JSON on stdout, its text on stderr), exit 2.
fn check_config(
    file: &Path,
    from: DateTime<Utc>,
    next: usize,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let config = match config::load_file(file) {
        Ok(c) => c,
        Err(e @ ConfigError::Invalid { .. }) => {
            let invalid = Invalid::new(file, e.problems());
            match output {
                Output::Json => print(&invalid, output)?,
                Output::Text => eprint!("{}", render(&invalid, output.into())),
            }
            return Ok(ExitCode::from(EXIT_INVALID_CONFIG));
        }
        Err(e) => return Err(e.into()),
    };
    print(&Checked::new(file, &config, from, next), output)?;
    Ok(ExitCode::SUCCESS)
}

/// `rollboot controller`: one replica, until SIGTERM or Ctrl-C.
fn controller(
    file: PathBuf,
    identity: Option<String>,
    target: Target,
    metrics_addr: SocketAddr,
) -> anyhow::Result<ExitCode> {
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
        let mut kube_config = target.config().await?;
        rollboot::client::identify(&mut kube_config, "controller");
        let metrics = std::sync::Arc::new(rollboot::metrics::Metrics::default());
        let served = metrics.clone();
        tokio::spawn(async move {
            if let Err(e) = rollboot::metrics::serve_on(listener, served).await {
                tracing::error!(error = %e, "serving /metrics, /healthz and /readyz stopped");
            }
        });
        rollboot::controller::run_with_config_file(
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

/// `rollboot agent`: the agent of one node, until SIGTERM or Ctrl-C.
fn agent(
    file: &Path,
    node_name: String,
    target: Target,
    metrics_addr: Option<SocketAddr>,
) -> anyhow::Result<ExitCode> {
    let Some(config) = load_or_report(file)? else {
        return Ok(ExitCode::from(EXIT_INVALID_CONFIG));
    };
    // The agent watches one Node and checks one sentinel: a single thread does it, and
    // it runs on every node, so its memory counts (issue 4: under 15 MiB resident).
    current_thread_runtime()?.block_on(async move {
        let mut kube_config = target.config().await?;
        rollboot::client::identify(&mut kube_config, "agent");
        let client = kube::Client::try_from(kube_config)?;
        let config = std::sync::Arc::new(config);
        let r = &config.reboot;
        let method = rollboot::agent::HostReboot::from_config(r);
        let sentinel = rollboot::agent::HostSentinel::from_config(r);
        // The config file (a ConfigMap) is watched: a valid change is taken in place.
        let (config_tx, configs) = tokio::sync::watch::channel(config.clone());
        tokio::spawn(rollboot::reload::watch(
            file.to_path_buf(),
            config_tx,
            rollboot::reload::CHECK,
        ));
        let metrics = std::sync::Arc::new(rollboot::agent::AgentMetrics::default());
        if let Some(addr) = metrics_addr {
            let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                anyhow::anyhow!(
                    "cannot serve /metrics and /healthz on {addr} (--metrics-addr): {e}"
                )
            })?;
            let served = metrics.clone();
            tokio::spawn(async move {
                if let Err(e) = rollboot::agent::metrics::serve_on(listener, served).await {
                    tracing::error!(error = %e, "serving /metrics and /healthz stopped");
                }
            });
        }
        {
            use rollboot::agent::{RebootHost, Sentinel};
            let boot = method.boot_id(&node_name);
            tracing::info!(
                node = %node_name,
                sentinel = %sentinel.describe(),
                method = %method.describe(),
                config = %file.display(),
                host_boot_id = boot.as_deref().unwrap_or("unreadable"),
                host_machine_id = method.machine_id(&node_name).as_deref().unwrap_or("unknown"),
                host_init_start = method.init_start(&node_name),
                "agent starting"
            );
        }
        // logind on the host's system bus (the DaemonSet mounts its socket): a delay inhibitor,
        // so a shutdown rollboot did not start waits for a drain. Without it the agent goes on.
        let bus = rollboot::agent::logind::system_bus_address(
            std::env::var("DBUS_SYSTEM_BUS_ADDRESS").ok(),
        );
        let logind = rollboot::agent::logind::connect_system(&node_name, &bus).await;
        let shutdown = shutdown_signal();
        rollboot::agent::run_reloading(
            client, configs, node_name, method, sentinel, metrics, logind, shutdown,
        )
        .await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `rollboot status`: reads the cluster and prints the report; with `watch` (`Some(until
/// done)`), follows it.
fn status(
    config: &ConfigArgs,
    target: &Target,
    output: Output,
    watch: Option<bool>,
) -> anyhow::Result<ExitCode> {
    current_thread_runtime()?.block_on(async {
        let (config, kube_config) = match config.load(target, "status").await {
            Ok(c) => c,
            Err(code) => return Ok(code),
        };
        if let Some(until_done) = watch {
            return watch::status(config, kube_config, output, until_done).await;
        }
        let snapshot = match rollboot::status::fetch(kube_config, &config).await {
            Ok(s) => s,
            Err(e) => return Ok(cluster_error(e)),
        };
        print(
            &rollboot::status::build(&config, &snapshot, Utc::now()),
            output,
        )?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `rollboot plan`: reads the cluster and prints the plan; exit 3 when it would not proceed.
fn plan(
    config: &ConfigArgs,
    target: &Target,
    opts: rollboot::plan::Options,
    at: Option<DateTime<Utc>>,
    prometheus_url: Option<&str>,
    output: Output,
) -> anyhow::Result<ExitCode> {
    current_thread_runtime()?.block_on(async {
        let (config, kube_config) = match config.load(target, "plan").await {
            Ok(c) => c,
            Err(code) => return Ok(code),
        };
        let cluster = match rollboot::plan::read::fetch(kube_config, &config, prometheus_url).await
        {
            Ok(c) => c,
            Err(e) => return Ok(cluster_error(e)),
        };
        // Whole seconds: the plan's instants are read by a person, and estimates are whole
        // seconds.
        let now = at.unwrap_or_else(|| chrono::SubsecRound::trunc_subsecs(Utc::now(), 0));
        let report = rollboot::plan::build(&cluster, &config, &opts, now);
        print(&report, output)?;
        Ok(if report.proceeds {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_WOULD_NOT_PROCEED)
        })
    })
}

/// `rollboot pause`: by `--by`, else the user's name.
fn pause(
    config: &ConfigArgs,
    target: &Target,
    by: Option<String>,
    reason: Option<String>,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let who = by.unwrap_or_else(|| {
        std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| "operator".into())
    });
    control(
        config,
        |config| Control::Pause {
            config,
            who,
            reason,
        },
        target,
        output,
    )
}

/// `rollboot resume`.
fn resume(
    config: &ConfigArgs,
    target: &Target,
    force: bool,
    output: Output,
) -> anyhow::Result<ExitCode> {
    control(
        config,
        |config| Control::Resume { config, force },
        target,
        output,
    )
}

/// Runs one of the operator's controls, `make` given the config, with the current kubeconfig,
/// as `rollboot/<version> (operator)`, and prints its report: exit 0 done, 1 cluster error, 3
/// refused (the failure's JSON on stdout with `--output json`, and its line on stderr either
/// way).
fn control(
    config: &ConfigArgs,
    make: impl FnOnce(Config) -> Control,
    target: &Target,
    output: Output,
) -> anyhow::Result<ExitCode> {
    current_thread_runtime()?.block_on(async move {
        let (config, kube_config) = match config.load(target, "operator").await {
            Ok(c) => c,
            Err(code) => return Ok(code),
        };
        let c = make(config);
        let server = kube_config.cluster_url.to_string();
        let client = match kube::Client::try_from(kube_config) {
            Ok(c) => c,
            Err(e) => {
                return Ok(cluster_error(format!(
                    "cannot make a client for the API server {server}: {e}"
                )))
            }
        };
        match c.run(&client, &server).await {
            Ok(report) => {
                print(&report, output)?;
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                let failure = Failure::new(&c, &e);
                if output == Output::Json {
                    print(&failure, output)?;
                }
                eprint!("{}", render(&failure, Output::Text.into()));
                Ok(if failure.refused() {
                    ExitCode::from(EXIT_REFUSED)
                } else {
                    ExitCode::FAILURE
                })
            }
        }
    })
}

/// A kube config for a person's one-shot read: `target`'s, identified as `component`, failing
/// in seconds on a hung API server (not after kube's 295 s).
async fn one_shot_config(target: &Target, component: &str) -> Result<kube::Config, String> {
    let mut kube_config = target.config().await.map_err(|e| e.to_string())?;
    rollboot::client::identify(&mut kube_config, component);
    let limit = std::time::Duration::from_secs(30);
    kube_config.connect_timeout = Some(limit);
    kube_config.read_timeout = Some(limit);
    Ok(kube_config)
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

/// Loads a config, saying its problems on stderr; `None` when invalid.
fn load_or_report(file: &Path) -> anyhow::Result<Option<Config>> {
    match config::load_file(file) {
        Ok(c) => Ok(Some(c)),
        Err(e @ ConfigError::Invalid { .. }) => {
            let invalid = Invalid::new(file, e.problems());
            eprint!("{}", render(&invalid, rollboot::render::Output::Text));
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
