//! `rollboot simulate`: the real controller (2 replicas) and one real agent per node, in-process,
//! against the embedded simulated cluster; flags nodes, runs the rollout, prints the report.
//!
//! Owns the glue between the product and the simulator — the simulated
//! [`RebootMethod`](crate::agent::RebootMethod) and sentinel, the [`Harness`] the rollout tests
//! drive (start, kill and restart controllers and agents), and the rollout report. It must never
//! reach into the product's decisions: the controller and agents here are exactly the production
//! code, talking HTTP to the simulator, each with its own identity in the request accounting.

use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use serde::Serialize;
use tokio::task::JoinHandle;

use crate::agent::{AgentError, RebootMethod, Sentinel};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::node::{NodeState, NodeView};
use crate::sim::{Cluster, Scenario};

/// Arguments of `rollboot simulate`: the simulator's own (`--serve` and the world) plus the
/// rollout's.
#[derive(Debug, clap::Args)]
pub struct RolloutArgs {
    /// The simulated world (and `--serve`).
    #[command(flatten)]
    pub sim: crate::sim::cli::SimulateArgs,
    /// Nodes flagged for a reboot: `all` or a number.
    #[arg(long, default_value = "all")]
    pub flagged: String,
    /// Simulated reboot time in simulated seconds (overrides the scenario; default 30).
    #[arg(long)]
    pub reboot_time: Option<f64>,
    /// rollboot config for the controller and agents (default: fast settings for simulation).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Report format.
    #[arg(long, value_enum, default_value_t = crate::cli::Output::Text)]
    pub report: crate::cli::Output,
    /// Keep the controllers and agents running at least this long (e.g. `60s`), then report
    /// the API requests per minute: with `--flagged 0`, the idle traffic.
    #[arg(long)]
    pub idle_for: Option<crate::config::Duration>,
}

/// The config the simulation uses unless given one: short leases and periods so a rollout
/// of simulated minutes takes real seconds.
pub const SIM_CONFIG: &str = "\
leader: {leaseDuration: 3s, renewDeadline: 2s, retryPeriod: 500ms}
reboot: {timeout: 1m, checkPeriod: 100ms}
drain: {timeout: 2m, evictionRetryInterval: 200ms, evictUnreplicated: true, deleteEmptyDirData: true}
healthGate: {timeout: 2m}
";

/// [`SIM_CONFIG`] with `overrides` (YAML, merged key by key) on top.
pub fn sim_config(overrides: &str) -> anyhow::Result<Config> {
    fn merge(base: &mut yaml_serde::Value, over: yaml_serde::Value) {
        match (base, over) {
            (yaml_serde::Value::Mapping(b), yaml_serde::Value::Mapping(o)) => {
                for (k, v) in o {
                    match b.get_mut(&k) {
                        Some(bv) => merge(bv, v),
                        None => {
                            b.insert(k, v);
                        }
                    }
                }
            }
            (b, o) => *b = o,
        }
    }
    let mut base: yaml_serde::Value = yaml_serde::from_str(SIM_CONFIG)?;
    if !overrides.trim().is_empty() {
        merge(&mut base, yaml_serde::from_str(overrides)?);
    }
    crate::config::parse_str(&yaml_serde::to_string(&base)?)
        .map_err(|p| anyhow::anyhow!("simulation config: {p:?}"))
}

/// Counts the simulated reboots per node and clears the node's simulated sentinel.
#[derive(Clone, Default)]
pub struct Host {
    /// Nodes whose sentinel says "reboot needed".
    pub sentinel: Arc<Mutex<BTreeSet<String>>>,
    /// Reboots performed per node.
    pub reboots: Arc<Mutex<BTreeMap<String, usize>>>,
    /// Hosts that never come back: the reboot is acknowledged and nothing happens.
    pub broken: Arc<Mutex<BTreeSet<String>>>,
    /// Agents that stop between their ack and the reboot, per node the number of times: the
    /// reboot method never returns and nothing reboots (a test then kills the agent, as a
    /// crash at that line would).
    pub stall: Arc<Mutex<BTreeMap<String, usize>>>,
    /// The boot ID each host had when its reboot was asked: the host is down until its Node
    /// reports another one (the simulated kubelet does when the host is up again).
    pub down_from: Arc<Mutex<BTreeMap<String, String>>>,
}

/// The simulator's reboot method: the world reboots the node (new bootID after the scenario's
/// reboot time).
pub struct SimReboot {
    world: crate::sim::World,
    host: Host,
}

impl RebootMethod for SimReboot {
    async fn reboot(&self, node: &str, token: &str) -> Result<(), AgentError> {
        let stalls = {
            let mut stall = self.host.stall.lock().expect("stall");
            match stall.get_mut(node) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    true
                }
                _ => false,
            }
        };
        if stalls {
            tracing::info!(
                node,
                token,
                "simulated agent stalls between its ack and the reboot"
            );
            return std::future::pending().await;
        }
        self.host.sentinel.lock().expect("sentinel").remove(node);
        *self
            .host
            .reboots
            .lock()
            .expect("reboots")
            .entry(node.into())
            .or_default() += 1;
        if let Some(boot) = self.world.boot_id(node) {
            self.host
                .down_from
                .lock()
                .expect("down_from")
                .insert(node.into(), boot);
        }
        if !self.host.broken.lock().expect("broken").contains(node) {
            self.world.reboot(node, token);
        }
        Ok(())
    }

    /// The simulated host's boot ID: the one its kubelet reports once the host is up, none
    /// while it is down after a reboot (a real agent does not run then; one restarted in a
    /// test at that moment must not take the boot from before for the host's).
    fn boot_id(&self, node: &str) -> Option<String> {
        let reported = self.world.boot_id(node)?;
        let down = self.host.down_from.lock().expect("down_from");
        (down.get(node) != Some(&reported)).then_some(reported)
    }
}

/// The simulator's sentinel: set by the harness, cleared by a reboot.
pub struct SimSentinel {
    node: String,
    host: Host,
}

impl Sentinel for SimSentinel {
    async fn check(&self) -> Option<String> {
        self.host
            .sentinel
            .lock()
            .expect("sentinel")
            .contains(&self.node)
            .then(|| "simulated sentinel".to_string())
    }
}

/// A simulated cluster with rollboot running in it, for `rollboot simulate` and the tests.
pub struct Harness {
    /// The cluster.
    pub cluster: Cluster,
    /// A client for the harness's own reads and writes (identity `harness`).
    pub client: kube::Client,
    /// The config every part runs with.
    pub config: Arc<Config>,
    /// The simulated hosts.
    pub host: Host,
    /// Metrics of each controller replica.
    pub metrics: Vec<Arc<Metrics>>,
    controllers: Vec<Option<(JoinHandle<()>, tokio::sync::oneshot::Sender<()>)>>,
    agents: BTreeMap<String, JoinHandle<()>>,
    agent_client: kube::Client,
    /// When set, the agent of node N presents the token `{prefix}N` (one identity per node, for
    /// RBAC and admission enforcement) instead of the shared token `agent`.
    pub agent_token_prefix: Option<String>,
}

impl Harness {
    /// Starts the cluster for `scenario`; nothing of rollboot runs yet.
    pub async fn start(scenario: Scenario, config: Config) -> anyhow::Result<Harness> {
        let cluster = Cluster::start(scenario).await?;
        let client = cluster.kube_client_as("harness").await?;
        let mut agent_config = cluster.kube_config_as("agent").await?;
        crate::client::identify(&mut agent_config, "agent");
        let agent_client = kube::Client::try_from(agent_config)?;
        // What the deploy manifests create: the namespace of the Leases.
        let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        for name in BTreeSet::from([
            config.lock.namespace.clone(),
            config.leader.namespace.clone(),
        ]) {
            let mut n = k8s_openapi::api::core::v1::Namespace::default();
            n.metadata.name = Some(name);
            match ns.create(&Default::default(), &n).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Harness {
            cluster,
            client,
            config: Arc::new(config),
            host: Host::default(),
            metrics: Vec::new(),
            controllers: Vec::new(),
            agents: BTreeMap::new(),
            agent_client,
            agent_token_prefix: None,
        })
    }

    /// Starts what a rollout runs: controller replicas 0 and 1 (leader election included) and
    /// one agent per node.
    pub async fn start_rollout(&mut self) -> anyhow::Result<()> {
        self.start_controller(0).await?;
        self.start_controller(1).await?;
        self.start_all_agents().await
    }

    /// Starts controller replica `i` (identity `controller-i`).
    pub async fn start_controller(&mut self, i: usize) -> anyhow::Result<()> {
        let kc: kube::config::Kubeconfig =
            yaml_serde::from_str(&self.cluster.kubeconfig(&format!("controller-{i}")))?;
        let mut client = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        crate::client::identify(&mut client, "controller");
        while self.controllers.len() <= i {
            self.controllers.push(None);
            self.metrics.push(Arc::new(Metrics::default()));
        }
        let metrics = self.metrics[i].clone();
        let config = self.config.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = rx.await;
            };
            if let Err(e) =
                crate::controller::run(client, config, format!("controller-{i}"), metrics, shutdown)
                    .await
            {
                tracing::error!(error = %e, "controller-{i} stopped");
            }
        });
        self.controllers[i] = Some((task, tx));
        Ok(())
    }

    /// Kills replica `i` at once, as a crash would: nothing is released.
    pub fn kill_controller(&mut self, i: usize) {
        if let Some((t, _)) = self.controllers.get_mut(i).and_then(Option::take) {
            t.abort();
        }
    }

    /// Stops replica `i` as SIGTERM would (it releases the leader Lease).
    pub async fn stop_controller(&mut self, i: usize) {
        if let Some((t, tx)) = self.controllers.get_mut(i).and_then(Option::take) {
            let _ = tx.send(());
            let _ = t.await;
        }
    }

    /// The replica currently leading, by the metrics gauge.
    pub fn leader(&self) -> Option<usize> {
        self.metrics.iter().enumerate().position(|(i, m)| {
            m.is_leader() && self.controllers.get(i).is_some_and(Option::is_some)
        })
    }

    /// Starts the agent of `node`.
    pub fn start_agent(&mut self, node: &str) {
        let method = SimReboot {
            world: self.cluster.world().clone(),
            host: self.host.clone(),
        };
        let sentinel = SimSentinel {
            node: node.into(),
            host: self.host.clone(),
        };
        let client = match &self.agent_token_prefix {
            Some(prefix) => {
                let mut c = kube::Config::new(self.cluster.base_url().parse().expect("url"));
                c.auth_info.token = Some(format!("{prefix}{node}").into());
                crate::client::identify(&mut c, "agent");
                kube::Client::try_from(c).unwrap_or_else(|_| self.agent_client.clone())
            }
            None => self.agent_client.clone(),
        };
        let (client, config, name) = (client, self.config.clone(), node.to_string());
        let task = tokio::spawn(async move {
            if let Err(e) = crate::agent::run(
                client,
                config,
                name.clone(),
                method,
                sentinel,
                std::future::pending(),
            )
            .await
            {
                tracing::error!(node = name, error = %e, "agent stopped");
            }
        });
        if let Some(old) = self.agents.insert(node.into(), task) {
            old.abort();
        }
    }

    /// Kills the agent of `node`.
    pub fn kill_agent(&mut self, node: &str) {
        if let Some(t) = self.agents.remove(node) {
            t.abort();
        }
    }

    /// Starts an agent on every node.
    pub async fn start_all_agents(&mut self) -> anyhow::Result<()> {
        for n in self.node_names().await? {
            self.start_agent(&n);
        }
        Ok(())
    }

    /// Names of all nodes, sorted.
    pub async fn node_names(&self) -> anyhow::Result<Vec<String>> {
        let mut v: Vec<String> = self.nodes().await?.into_iter().map(|n| n.name).collect();
        v.sort();
        Ok(v)
    }

    /// Every node, parsed.
    pub async fn nodes(&self) -> anyhow::Result<Vec<NodeView>> {
        let api: Api<Node> = Api::all(self.client.clone());
        Ok(api
            .list(&Default::default())
            .await?
            .items
            .iter()
            .map(NodeView::from_node)
            .collect())
    }

    /// One node, parsed.
    pub async fn node(&self, name: &str) -> anyhow::Result<NodeView> {
        let api: Api<Node> = Api::all(self.client.clone());
        Ok(NodeView::from_node(&api.get(name).await?))
    }

    /// Makes the hosts' sentinels say "reboot needed" (the agents flag the nodes).
    pub fn flag(&self, nodes: &[String]) {
        self.host
            .sentinel
            .lock()
            .expect("sentinel")
            .extend(nodes.iter().cloned());
    }

    /// Merge-patches a node as an operator would.
    pub async fn patch_node(&self, name: &str, patch: serde_json::Value) -> anyhow::Result<()> {
        let api: Api<Node> = Api::all(self.client.clone());
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// The notes of the Events with `reason` recorded so far.
    pub async fn events(&self, reason: &str) -> anyhow::Result<Vec<String>> {
        let api: Api<k8s_openapi::api::events::v1::Event> = Api::all(self.client.clone());
        Ok(api
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .collect())
    }

    /// Reboots performed on `node` so far.
    pub fn reboots(&self, node: &str) -> usize {
        self.host
            .reboots
            .lock()
            .expect("reboots")
            .get(node)
            .copied()
            .unwrap_or(0)
    }

    /// Polls `cond` on the nodes every 100 ms until it holds or `timeout` passes; returns
    /// whether it held.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut cond: impl FnMut(&[NodeView]) -> bool,
    ) -> anyhow::Result<bool> {
        let start = Instant::now();
        loop {
            let nodes = self.nodes().await?;
            if cond(&nodes) {
                return Ok(true);
            }
            if start.elapsed() > timeout {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The rollout is over for `flagged`: each is `done` (or `failed`) and not flagged.
    pub fn finished(nodes: &[NodeView], flagged: &BTreeSet<String>) -> bool {
        nodes.iter().filter(|n| flagged.contains(&n.name)).all(|n| {
            matches!(n.state, Some(NodeState::Done | NodeState::Failed))
                && !n.flagged()
                && !n.unschedulable
        })
    }

    /// Stops everything.
    pub async fn shutdown(mut self) {
        for i in 0..self.controllers.len() {
            self.kill_controller(i);
        }
        for (_, t) in std::mem::take(&mut self.agents) {
            t.abort();
        }
        self.cluster.shutdown().await;
    }
}

/// The final report of a simulated rollout.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Nodes in the world.
    pub nodes: usize,
    /// Nodes flagged.
    pub flagged: usize,
    /// Flagged nodes rebooted exactly once.
    pub rebooted_once: usize,
    /// Nodes rebooted more than once (must be 0).
    pub rebooted_twice: Vec<String>,
    /// Flagged nodes not rebooted.
    pub not_rebooted: Vec<String>,
    /// Nodes that failed.
    pub failed: Vec<String>,
    /// Seconds from flagging to the last node done.
    pub makespan_seconds: f64,
    /// The irreducible simulated time (termination, reboot, readiness) divided by `maxNodes`.
    pub lower_bound_seconds: f64,
    /// (makespan - bound) / flagged nodes, milliseconds.
    pub overhead_per_node_ms: f64,
    /// Median over the flagged nodes of each node's overhead, milliseconds: the time between
    /// consecutive completions (the first from the flagging) minus the irreducible time per
    /// node divided by `maxNodes`. Its mean is `overhead_per_node_ms`.
    pub overhead_per_node_median_ms: f64,
    /// Seconds the requests were counted over (from the start of the controllers).
    pub observed_seconds: f64,
    /// rollboot's API requests per minute over `observed_seconds`.
    pub requests_per_minute: f64,
    /// The controller replicas' API requests per minute over `observed_seconds` (agents
    /// excluded: with nothing flagged, this must not grow with the number of nodes).
    pub controller_requests_per_minute: f64,
    /// The controller replicas' API requests by `verb resource[/subresource]`.
    pub controller_requests_by_resource: BTreeMap<String, u64>,
    /// rollboot's API requests by verb (controllers and agents).
    pub requests_by_verb: BTreeMap<String, u64>,
    /// rollboot's API requests in all.
    pub requests_total: u64,
    /// rollboot's requests by `verb resource[/subresource]`.
    pub requests_by_resource: BTreeMap<String, u64>,
    /// Requests on Leases (leader election renewals, which run whether or not anything
    /// reboots, and the maintenance lock).
    pub lease_requests: u64,
    /// Requests other than on Leases, per rebooted node.
    pub requests_per_node: f64,
    /// PDB violations (must be 0).
    pub pdb_violations: usize,
    /// Largest number of nodes cordoned or NotReady at once (must be <= maxNodes).
    pub max_nodes_out: usize,
    /// `concurrency.maxNodes`.
    pub max_nodes: u32,
    /// All invariants held and every flagged node rebooted once.
    pub ok: bool,
}

impl Report {
    /// Text form.
    pub fn text(&self) -> String {
        let mut s = String::new();
        use std::fmt::Write;
        let _ = writeln!(
            s,
            "rollout of {} flagged node(s) out of {}: {}",
            self.flagged,
            self.nodes,
            if self.ok { "OK" } else { "FAILED" }
        );
        let _ = writeln!(
            s,
            "  makespan                 {:.2} s",
            self.makespan_seconds
        );
        let _ = writeln!(
            s,
            "  lower bound              {:.2} s",
            self.lower_bound_seconds
        );
        let _ = writeln!(
            s,
            "  coordinator overhead     {:.0} ms per node (mean), {:.0} ms (median)",
            self.overhead_per_node_ms, self.overhead_per_node_median_ms
        );
        let _ = writeln!(
            s,
            "  API requests per minute  {:.1} in all, {:.1} by the controllers (over {:.1} s)",
            self.requests_per_minute, self.controller_requests_per_minute, self.observed_seconds
        );
        let _ = writeln!(
            s,
            "  API requests             {} in all; {} on Leases (leader renewals, lock); {:.1} other per rebooted node",
            self.requests_total, self.lease_requests, self.requests_per_node
        );
        for (verb, n) in &self.requests_by_verb {
            let _ = writeln!(s, "    {verb:<10} {n}");
        }
        let _ = writeln!(s, "  by resource");
        for (what, n) in &self.requests_by_resource {
            let _ = writeln!(s, "    {what:<32} {n}");
        }
        let _ = writeln!(s, "  PDB violations           {}", self.pdb_violations);
        let _ = writeln!(
            s,
            "  max nodes out at once    {} (maxNodes {})",
            self.max_nodes_out, self.max_nodes
        );
        let _ = writeln!(s, "  rebooted once            {}", self.rebooted_once);
        let _ = writeln!(
            s,
            "  rebooted more than once  {} {:?}",
            self.rebooted_twice.len(),
            self.rebooted_twice
        );
        if !self.not_rebooted.is_empty() {
            let _ = writeln!(s, "  not rebooted             {:?}", self.not_rebooted);
        }
        if !self.failed.is_empty() {
            let _ = writeln!(s, "  failed                   {:?}", self.failed);
        }
        s
    }
}

/// Builds the report of a finished (or abandoned) rollout.
pub async fn report(
    h: &Harness,
    scenario: &Scenario,
    flagged: &BTreeSet<String>,
    makespan: Duration,
    flagged_at: DateTime<Utc>,
    observed: Duration,
) -> anyhow::Result<Report> {
    let nodes = h.nodes().await?;
    let reboots = h.host.reboots.lock().expect("reboots").clone();
    let inv = h.cluster.invariants();
    let stats = h.cluster.stats();
    let mut by_verb: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_resource: BTreeMap<String, u64> = BTreeMap::new();
    let mut lease_requests = 0;
    let mut by_controller: BTreeMap<String, u64> = BTreeMap::new();
    for (k, n) in &stats.requests {
        if k.identity.starts_with("controller-") {
            let sub = if k.subresource.is_empty() {
                String::new()
            } else {
                format!("/{}", k.subresource)
            };
            *by_controller
                .entry(format!("{} {}{sub}", k.verb, k.resource))
                .or_default() += n;
        }
        if k.identity != "harness" {
            *by_verb.entry(k.verb.clone()).or_default() += n;
            let sub = if k.subresource.is_empty() {
                String::new()
            } else {
                format!("/{}", k.subresource)
            };
            *by_resource
                .entry(format!("{} {}{sub}", k.verb, k.resource))
                .or_default() += n;
            if k.resource == "leases" {
                lease_requests += n;
            }
        }
    }
    let total: u64 = by_verb.values().sum();
    let mut twice: Vec<String> = reboots
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| k.clone())
        .collect();
    for (n, _) in &inv.repeated_reboots {
        if !twice.contains(n) {
            twice.push(n.clone());
        }
    }
    let not_rebooted: Vec<String> = flagged
        .iter()
        .filter(|n| !reboots.contains_key(*n))
        .cloned()
        .collect();
    let failed: Vec<String> = nodes
        .iter()
        .filter(|n| n.state == Some(NodeState::Failed))
        .map(|n| n.name.clone())
        .collect();
    let rebooted_once = flagged
        .iter()
        .filter(|n| reboots.get(*n) == Some(&1))
        .count();
    // A node is back only once the node-lifecycle controller takes its not-ready taint off.
    let per_node = scenario
        .scaled(
            scenario.grace_seconds as f64
                + scenario.reboot_delay
                + scenario.reboot_time
                + scenario.taint_removal_delay,
        )
        .as_secs_f64();
    let max_nodes = h.config.concurrency.max_nodes;
    let bound = per_node * flagged.len() as f64 / max_nodes.max(1) as f64;
    let makespan_s = makespan.as_secs_f64();
    let mut done_times: Vec<DateTime<Utc>> = nodes
        .iter()
        .filter(|n| flagged.contains(&n.name) && n.state == Some(NodeState::Done))
        .filter_map(|n| n.state_since)
        .collect();
    done_times.sort();
    let ideal = per_node / max_nodes.max(1) as f64;
    let mut prev = flagged_at;
    let mut each: Vec<f64> = done_times
        .iter()
        .map(|t| {
            let gap = (*t - prev).num_microseconds().unwrap_or(0) as f64 / 1e6;
            prev = *t;
            (gap - ideal) * 1000.0
        })
        .collect();
    each.sort_by(|a, b| a.total_cmp(b));
    let median = match each.len() {
        0 => 0.0,
        n if n % 2 == 1 => each[n / 2],
        n => (each[n / 2 - 1] + each[n / 2]) / 2.0,
    };
    let ok = rebooted_once == flagged.len()
        && twice.is_empty()
        && inv.pdb_violations.is_empty()
        && inv.max_nodes_unavailable <= max_nodes as usize
        && failed.is_empty();
    Ok(Report {
        nodes: nodes.len(),
        flagged: flagged.len(),
        rebooted_once,
        rebooted_twice: twice,
        not_rebooted,
        failed,
        makespan_seconds: makespan_s,
        lower_bound_seconds: bound,
        overhead_per_node_ms: if flagged.is_empty() {
            0.0
        } else {
            (makespan_s - bound) * 1000.0 / flagged.len() as f64
        },
        overhead_per_node_median_ms: median,
        observed_seconds: observed.as_secs_f64(),
        requests_per_minute: total as f64 * 60.0 / observed.as_secs_f64().max(0.001),
        controller_requests_per_minute: by_controller.values().sum::<u64>() as f64 * 60.0
            / observed.as_secs_f64().max(0.001),
        controller_requests_by_resource: by_controller,
        requests_by_verb: by_verb,
        requests_total: total,
        requests_by_resource: by_resource,
        lease_requests,
        requests_per_node: (total - lease_requests) as f64
            / reboots.values().sum::<usize>().max(1) as f64,
        pdb_violations: inv.pdb_violations.len(),
        max_nodes_out: inv.max_nodes_unavailable,
        max_nodes,
        ok,
    })
}

/// The harness's own watch of the Nodes. The rollout is followed from its events: listing every
/// Node every 50 ms cost a tenth of the process's CPU at 100 nodes, taken from the controller and
/// the simulated cluster it was measuring.
struct NodeWatch {
    store: reflector::Store<Node>,
    changed: Arc<tokio::sync::Notify>,
    task: JoinHandle<()>,
}

impl NodeWatch {
    async fn start(client: kube::Client) -> anyhow::Result<NodeWatch> {
        let (store, writer) = reflector::store();
        let changed = Arc::new(tokio::sync::Notify::new());
        let notify = changed.clone();
        let stream = watcher(Api::<Node>::all(client), watcher::Config::default())
            .default_backoff()
            .reflect(writer);
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while stream.next().await.is_some() {
                notify.notify_one();
            }
        });
        store.wait_until_ready().await?;
        Ok(NodeWatch {
            store,
            changed,
            task,
        })
    }

    fn nodes(&self) -> Vec<NodeView> {
        self.store
            .state()
            .iter()
            .map(|n| NodeView::from_node(n))
            .collect()
    }

    /// Returns on the next change, or after `at_most`.
    async fn changed(&self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, self.changed.notified()).await;
    }
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs a whole rollout: world, 2 controller replicas, one agent per node, flags, waits,
/// and returns the report.
pub async fn rollout(
    scenario: Scenario,
    config: Config,
    flagged: Option<usize>,
    timeout: Duration,
    progress: bool,
    idle_for: Option<Duration>,
) -> anyhow::Result<Report> {
    let mut h = Harness::start(scenario.clone(), config).await?;
    let names = h.node_names().await?;
    let flagged: BTreeSet<String> = names
        .iter()
        .take(flagged.unwrap_or(names.len()))
        .cloned()
        .collect();
    let started = Instant::now();
    let watch = NodeWatch::start(h.client.clone()).await?;
    h.start_rollout().await?;
    let start = Instant::now();
    let flagged_at = Utc::now();
    let list: Vec<String> = flagged.iter().cloned().collect();
    h.flag(&list);
    let tty = std::io::stderr().is_terminal();
    let mut last_print = Instant::now();
    let mut done_at = None;
    while start.elapsed() < timeout {
        let nodes = watch.nodes();
        if done_at.is_none()
            && Harness::finished(&nodes, &flagged)
            && h.host.sentinel.lock().expect("sentinel").is_empty()
        {
            done_at = Some(start.elapsed());
        }
        if done_at.is_some() && idle_for.is_none_or(|d| start.elapsed() >= d) {
            break;
        }
        if progress && last_print.elapsed() >= Duration::from_millis(if tty { 200 } else { 2000 }) {
            last_print = Instant::now();
            let done = nodes
                .iter()
                .filter(|n| {
                    flagged.contains(&n.name) && n.state == Some(NodeState::Done) && !n.flagged()
                })
                .count();
            let current: Vec<String> = nodes
                .iter()
                .filter(|n| n.state.is_some_and(NodeState::in_flight))
                .map(|n| format!("{} {}", n.name, n.state.map(|s| s.as_str()).unwrap_or("")))
                .collect();
            let line = format!(
                "{done}/{} done, {:.1}s, in flight: {}",
                flagged.len(),
                start.elapsed().as_secs_f64(),
                if current.is_empty() {
                    "-".into()
                } else {
                    current.join(", ")
                }
            );
            if tty {
                eprint!("\r\x1b[2K{line}");
            } else {
                eprintln!("{line}");
            }
        }
        // The sentinels are the hosts', not the cluster's: looked at again at least this often.
        watch.changed(Duration::from_millis(200)).await;
    }
    drop(watch);
    if progress && tty {
        eprintln!();
    }
    let observed = started.elapsed();
    let makespan = done_at.unwrap_or_else(|| start.elapsed());
    let r = report(&h, &scenario, &flagged, makespan, flagged_at, observed).await?;
    h.shutdown().await;
    Ok(r)
}

/// Runs `rollboot simulate`.
pub fn main(args: RolloutArgs) -> anyhow::Result<ExitCode> {
    if args.sim.serve {
        return crate::sim::cli::run(args.sim);
    }
    let mut sc: Scenario = match &args.sim.scenario {
        Some(p) => yaml_serde::from_str(&std::fs::read_to_string(p)?)?,
        None => Scenario {
            nodes: 20,
            reboot_time: 30.0,
            ..Scenario::default()
        },
    };
    if let Some(n) = args.sim.nodes {
        sc.nodes = n;
    }
    if let Some(n) = args.sim.pods_per_node {
        sc.pods_per_node = n;
    }
    if let Some(t) = args.sim.time_factor {
        sc.time_factor = t;
    }
    if let Some(s) = args.sim.seed {
        sc.seed = s;
    }
    if let Some(r) = args.reboot_time {
        sc.reboot_time = r;
    }
    let flagged = match args.flagged.as_str() {
        "all" => None,
        n => Some(
            n.parse::<usize>()
                .map_err(|_| anyhow::anyhow!("--flagged takes `all` or a number, not `{n}`"))?,
        ),
    };
    let config = match &args.config {
        Some(f) => crate::config::load_file(f)?,
        None => crate::config::parse_str(SIM_CONFIG)
            .map_err(|p| anyhow::anyhow!("built-in simulation config: {p:?}"))?,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let idle_for = args.idle_for.map(|d| d.to_std());
    let timeout =
        Duration::from_secs(600).max(idle_for.unwrap_or_default() + Duration::from_secs(60));
    let report = rt.block_on(rollout(sc, config, flagged, timeout, true, idle_for))?;
    match args.report {
        crate::cli::Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        crate::cli::Output::Text => print!("{}", report.text()),
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_with_both_simulate_modes_is_consistent() {
        use clap::CommandFactory;
        crate::cli::Cli::command().debug_assert();
        let cli = <crate::cli::Cli as clap::Parser>::try_parse_from([
            "rollboot",
            "simulate",
            "--nodes",
            "5",
            "--flagged",
            "2",
            "--report",
            "json",
        ])
        .unwrap();
        let crate::cli::Command::Simulate(a) = cli.command else {
            panic!("not simulate")
        };
        assert_eq!(
            (a.sim.nodes, a.flagged.as_str(), a.sim.serve),
            (Some(5), "2", false)
        );
    }

    #[test]
    fn overrides_merge_into_the_simulation_config() {
        let c = super::sim_config("{reboot: {timeout: 3s}, concurrency: {maxNodes: 2}}").unwrap();
        assert_eq!(c.reboot.timeout, crate::config::Duration::from_secs(3));
        assert_eq!(
            c.reboot.check_period,
            crate::config::Duration::from_millis(100)
        );
        assert_eq!(c.concurrency.max_nodes, 2);
    }
}
