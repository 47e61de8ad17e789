//! Serving a simulated cluster for kubectl, demos and measurements (`rollboot simulate --serve`).
//!
//! Owns what a served cluster is built from ([`WorldOptions`]) and what it prints (kubeconfig
//! path, world size, and on Ctrl-C the accounting and invariant reports). It must never parse a
//! command line: the binary does, and hands the options over.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use super::fault_schedule::FaultSchedule;
use super::{Cluster, Options, Scenario};

/// What a simulated cluster is built from and where it is served (`rollboot simulate`'s
/// world options; the command line's own arguments are the binary's).
#[derive(Clone, Debug)]
pub struct WorldOptions {
    /// Serve the simulated API until Ctrl-C.
    pub serve: bool,
    /// Scenario YAML file (camelCase keys, see `sim::Scenario`); defaults otherwise.
    pub scenario: Option<PathBuf>,
    /// Number of nodes (overrides the scenario).
    pub nodes: Option<usize>,
    /// Pods per node (overrides the scenario).
    pub pods_per_node: Option<usize>,
    /// The Nodes' addresses (overrides the scenario).
    pub node_addresses: Option<super::scenario::NodeAddresses>,
    /// Real seconds per simulated second (overrides the scenario).
    pub time_factor: Option<f64>,
    /// Seed (overrides the scenario).
    pub seed: Option<u64>,
    /// Where to write the kubeconfig.
    pub kubeconfig_out: PathBuf,
    /// Listen address.
    pub listen: std::net::SocketAddr,
    /// Bearer token written in the kubeconfig (the caller identity in the accounting).
    pub token: String,
}

/// Registers Ctrl-C (SIGINT) and, on Unix, SIGTERM handlers at once (so a signal sent right
/// after the "serving" line is not lost), and returns a future of the first signal's name.
pub fn stop_signal() -> std::io::Result<impl std::future::Future<Output = &'static str>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async move {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        })
    }
}

/// Plays a fault schedule on the served cluster until its faults are over (given by the
/// caller: the player that knows rollboot's objects lives outside the simulator).
pub type Play = for<'a> fn(
    &'a Cluster,
    FaultSchedule,
    Scenario,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;

/// Reads a scenario file; an error names the file, and for a bad `faults:` entry the field.
pub fn read_scenario(path: &Path) -> anyhow::Result<Scenario> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("scenario {}: {e}", path.display()))?;
    let sc: Scenario = yaml_serde::from_str(&text)
        .map_err(|e| anyhow::anyhow!("scenario {}: {e}", path.display()))?;
    sc.validate()
        .map_err(|e| anyhow::anyhow!("scenario {}: {e}", path.display()))?;
    Ok(sc)
}

/// Runs `rollboot simulate --serve` (or, without `--serve`, builds the world, prints it and
/// stops). With `chaos` (a seed) or a scenario's `faults:`, `play` plays the schedule while
/// serving.
pub fn run(args: WorldOptions, chaos: Option<u64>, play: Play) -> anyhow::Result<ExitCode> {
    let mut sc: Scenario = match &args.scenario {
        Some(p) => read_scenario(p)?,
        None => Scenario::default(),
    };
    if let Some(seed) = chaos {
        sc.faults = Some(FaultSchedule::draw(seed));
    }
    if let Some(n) = args.nodes {
        sc.nodes = n;
    }
    if let Some(n) = args.pods_per_node {
        sc.pods_per_node = n;
    }
    if let Some(a) = args.node_addresses {
        sc.node_addresses = Some(a);
    }
    if let Some(t) = args.time_factor {
        sc.time_factor = t;
    }
    if let Some(s) = args.seed {
        sc.seed = s;
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let t0 = Instant::now();
        let opts = Options {
            addr: args.listen,
            ..Options::default()
        };
        let schedule = sc.faults.clone();
        let cluster = Cluster::start_with(sc.clone(), opts).await?;
        cluster.write_kubeconfig(&args.kubeconfig_out, &args.token)?;
        println!(
            "simulated cluster at {} ({} nodes, {} pods, built in {:.2?})",
            cluster.base_url(),
            cluster.world().node_count(),
            cluster.world().pod_count(),
            t0.elapsed()
        );
        println!("kubeconfig: {}", args.kubeconfig_out.display());
        if args.serve {
            let stopped = stop_signal()?;
            println!("serving until Ctrl-C (SIGINT) or SIGTERM");
            let sig = match schedule {
                Some(s) => {
                    println!(
                        "playing {} fault(s) until {} s from now:\n{}",
                        s.faults.len(),
                        s.stop_after,
                        yaml_serde::to_string(&s)?
                    );
                    tokio::pin!(stopped);
                    tokio::select! {
                        sig = &mut stopped => sig,
                        () = play(&cluster, s, sc) => {
                            println!("faults over");
                            stopped.await
                        }
                    }
                }
                None => stopped.await,
            };
            println!("{sig}: stopping");
        }
        let stats = cluster.stats();
        println!(
            "requests: {} total, by verb {:?}; watch events sent: {}; faults injected: {}",
            stats.total_requests,
            stats.by_verb(),
            stats.watch_events_sent,
            stats.faults_injected
        );
        for (k, n) in &stats.requests {
            let resource = match (k.group.as_str(), k.subresource.as_str()) {
                ("", "") => k.resource.clone(),
                ("", sub) => format!("{}/{sub}", k.resource),
                (g, "") => format!("{}.{g}", k.resource),
                (g, sub) => format!("{}.{g}/{sub}", k.resource),
            };
            let ns = if k.namespace.is_empty() {
                "-"
            } else {
                &k.namespace
            };
            println!(
                "  {:<12} {:<7} {:<40} {:<16} {n}",
                k.identity, k.verb, resource, ns
            );
        }
        println!(
            "invariants: {}",
            serde_json::to_string(&cluster.invariants())?
        );
        cluster.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}
