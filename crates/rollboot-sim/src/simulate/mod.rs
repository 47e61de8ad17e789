//! `rollboot simulate`: the real controller (2 replicas) and one real agent per node, in-process,
//! against the embedded simulated cluster; flags nodes, runs the rollout, prints the report.
//!
//! Owns the glue between the product and the simulator — the simulated
//! [`RebootHost`](rollboot::agent::RebootHost) and sentinel, the [`Harness`] the rollout tests
//! drive (start, kill and restart controllers and agents), and the rollout report. It must never
//! reach into the product's decisions: the controller and agents here are exactly the production
//! code, talking to the simulator's API (in process, see [`crate::sim::transport`]), each with
//! its own identity in the request accounting.

use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use tokio::task::JoinHandle;

use crate::sim::{Cluster, Scenario};
use rollboot::agent::{AgentError, RebootHost, Sentinel};
use rollboot::config::Config;
use rollboot::metrics::Metrics;
use rollboot::node::{NodeState, NodeView};

pub mod chaos;
pub mod from_cluster;
pub mod rehearse;
pub mod report;
pub mod shutdowns;
pub mod zincati;

pub use report::{Bound, Outcome, Report};

/// What `rollboot simulate` runs: the simulated world (and `--serve`) and the rollout's own
/// options (the command line that gives them is the binary's).
#[derive(Clone, Debug)]
pub struct Options {
    /// The simulated world (and `--serve`).
    pub sim: crate::sim::serve::WorldOptions,
    /// Nodes flagged for a reboot: `all` or a number.
    pub flagged: String,
    /// Simulated reboot time in simulated seconds (overrides the scenario; default 30).
    pub reboot_time: Option<f64>,
    /// rollboot config for the controller and agents (default: fast settings for simulation).
    pub config: Option<std::path::PathBuf>,
    /// Report format.
    pub report: rollboot::render::Output,
    /// Keep the controllers and agents running at least this long (e.g. `60s`), then report
    /// the API requests per minute: with `--flagged 0`, the idle traffic.
    pub idle_for: Option<rollboot::config::Duration>,
    /// Plays the fault schedule drawn from SEED (API 500/429 storms, slow answers, cut
    /// watches, an outage, leader kills and pauses, agent kills and stalls, hosts that hang or
    /// fail, a Node or the lock deleted, budgets blocked, slow pods), on a world and config
    /// drawn from the same seed unless `--scenario`/`--config` say otherwise. The report shows
    /// the schedule: put it in a scenario's `faults:` to replay it.
    pub chaos: Option<u64>,
    /// With `--serve`: run the rollout (controller replicas, agents, simulated reboots) behind
    /// the served API, so it can be watched live with kubectl and `rollboot status`; the report
    /// is printed once it is decided, and serving goes on until Ctrl-C.
    pub rollout: bool,
    /// With `--serve --rollout`: where to write the config the rollout runs with (default:
    /// `rollboot-sim.config.yaml` beside the kubeconfig).
    pub config_out: Option<std::path::PathBuf>,
    /// With `--config`: keep its hooks' webhooks and gates and its notification sinks, so the
    /// simulated rollout calls them (a rehearsal drops them otherwise).
    pub call_hooks: bool,
    /// Rehearse on a snapshot of the cluster of the current kubeconfig (read-only: gets and
    /// lists of Nodes, Pods, PodDisruptionBudgets, Deployments, ReplicaSets, StatefulSets,
    /// DaemonSets) instead of a generated world. A `--scenario` then gives only the timings
    /// (reboot, start and taint delays, time factor); its world size is not used.
    pub from_cluster: bool,
    /// With `--from-cluster`: the cluster to read (`--kubeconfig`, `--context`).
    pub target: rollboot::client::Target,
    /// With `--from-cluster`: also write the snapshot to FILE (to rehearse it elsewhere).
    pub snapshot_out: Option<std::path::PathBuf>,
    /// Rehearse on the snapshot in FILE (written by `--snapshot-out`).
    pub snapshot: Option<std::path::PathBuf>,
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
    rollboot::config::parse_str(&yaml_serde::to_string(&base)?)
        .map_err(|p| anyhow::anyhow!("simulation config: {p:?}"))
}

/// Counts the simulated reboots per node and clears the node's simulated sentinel.
#[derive(Clone, Default)]
pub struct Host {
    /// Nodes whose sentinel says "reboot needed".
    pub sentinel: Arc<Mutex<BTreeSet<String>>>,
    /// Nodes whose sentinel gives no answer (an error), whatever `sentinel` says.
    pub sentinel_errors: Arc<Mutex<BTreeSet<String>>>,
    /// Reboots performed per node.
    pub reboots: Arc<Mutex<BTreeMap<String, usize>>>,
    /// Hosts whose reboot hangs: the reboot is acknowledged and nothing happens; the host is
    /// down for its agent (no boot ID) until [`Harness::fix_host`].
    pub broken: Arc<Mutex<BTreeSet<String>>>,
    /// Agents that stop between their ack and the reboot, per node the number of times: the
    /// reboot method never returns and nothing reboots (a test then kills the agent, as a
    /// crash at that line would).
    pub stall: Arc<Mutex<BTreeMap<String, usize>>>,
    /// Hosts whose reboot command fails: the reboot method returns an error and nothing
    /// reboots.
    pub failing: Arc<Mutex<BTreeSet<String>>>,
    /// The boot ID each host had when its reboot was asked: the host is down until its Node
    /// reports another one (the simulated kubelet does when the host is up again).
    pub down_from: Arc<Mutex<BTreeMap<String, String>>>,
    /// The boot ID each host's kubelet last reported on its Node: the host still knows its
    /// boot while its Node is deleted (a real agent reads it from the host, not the Node).
    pub last_boot: Arc<Mutex<BTreeMap<String, String>>>,
    /// Per host, its unplanned shutdowns so far: the agent process of that boot ends with each
    /// (see [`Harness::start_agent_on`]).
    shut: Arc<Mutex<BTreeMap<String, tokio::sync::watch::Sender<usize>>>>,
}

impl Host {
    /// How many times `node`'s host went down so far (its reboots and shutdowns).
    pub fn downs(&self, node: &str) -> usize {
        self.reboots
            .lock()
            .expect("reboots")
            .get(node)
            .copied()
            .unwrap_or(0)
    }

    /// The count of `node`'s host's unplanned shutdowns, to wait on for the next.
    fn shutdowns_of(&self, node: &str) -> tokio::sync::watch::Receiver<usize> {
        self.shut
            .lock()
            .expect("shut")
            .entry(node.into())
            .or_insert_with(|| tokio::sync::watch::Sender::new(0))
            .subscribe()
    }
}

/// The simulator's reboot method: the world reboots the host (new bootID after the scenario's
/// reboot time). The host is the one of node `on`: its agent's own, or another one's where a
/// test starts an agent on the wrong host ([`Harness::start_agent_on`]).
pub struct SimReboot {
    world: crate::sim::World,
    host: Host,
    on: String,
}

impl SimReboot {
    /// The simulated host's own address: its Node's InternalIP.
    pub fn address(&self) -> Option<std::net::IpAddr> {
        self.world.internal_ip(&self.on)
    }

    /// The host reboots: the command (which a `hostFails` fault makes fail), then down and,
    /// unless a `hostHangs` fault holds it, up again on a new boot. Without the agent's part:
    /// a host that reboots by itself (its FleetLock client) is not held by a stall of the
    /// agent (`stallAgent`), which the agent's reboot ([`RebootHost::reboot`]) plays first.
    pub fn reboot_itself(&self, token: &str) -> Result<(), AgentError> {
        let node = self.on.as_str();
        if self.host.failing.lock().expect("failing").contains(node) {
            return Err(AgentError::Reboot {
                node: node.into(),
                reason: "the simulated reboot command failed".into(),
            });
        }
        self.going_down(node);
        // A broken host hangs in its reboot: it never comes back, and no agent runs on it (an
        // agent still running in the simulator reads no boot ID there) until it is fixed
        // (`Harness::fix_host`). One that could report its token lost would ask for, and run,
        // a second reboot command (the chaos campaign: hostHangs with killAgent).
        if !self.host.broken.lock().expect("broken").contains(node) {
            self.world.reboot(node, token);
        }
        Ok(())
    }

    /// The host shuts down by itself (and comes back on a new boot): counted as a reboot of
    /// its host, under `token`, with no check that it was drained: an unplanned shutdown is the
    /// host's, and the report says what was left on it.
    pub fn shut_down(&self, _node: &str, token: &str) -> Result<(), AgentError> {
        let node = self.on.as_str();
        self.going_down(node);
        self.world.shut_down(node, token);
        if let Some(tx) = self.host.shut.lock().expect("shut").get(node) {
            tx.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    /// How many times the host went down so far (its reboots and shutdowns).
    pub fn downs(&self) -> usize {
        self.host.downs(&self.on)
    }

    /// Whether rollboot ended the cycle of `node` (done or failed) at or after `since`: a
    /// FleetLock host's slot is rollboot's again from then, whether or not its `steady-state`
    /// got through yet.
    pub fn cycle_ended_since(&self, node: &str, since: chrono::DateTime<chrono::Utc>) -> bool {
        use rollboot::node::NodeState;
        self.world
            .rollboot_state(node)
            .is_some_and(|(s, at)| matches!(s, NodeState::Done | NodeState::Failed) && at >= since)
    }

    /// The host of `node` goes down: its sentinel is gone with the boot, the reboot counted,
    /// and the boot it leaves remembered (it is down until its Node reports another).
    fn going_down(&self, node: &str) {
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
    }
}

impl RebootHost for SimReboot {
    async fn reboot(&self, _node: &str, token: &str) -> Result<(), AgentError> {
        // The host under the agent is the one that goes down, whatever Node it serves.
        let node = self.on.as_str();
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
        if stalls && !self.host.failing.lock().expect("failing").contains(node) {
            tracing::info!(
                node,
                token,
                "simulated agent stalls between its ack and the reboot"
            );
            return std::future::pending().await;
        }
        self.reboot_itself(token)
    }

    /// The simulated host's boot ID: the one its kubelet reports once the host is up, none
    /// while it is down after a reboot (a real agent does not run then; one restarted in a
    /// test at that moment must not take the boot from before for the host's).
    fn boot_id(&self, _node: &str) -> Option<String> {
        let node = self.on.as_str();
        // Its Node deleted for a moment (an autoscaler, the `deleteNode` fault), the host is
        // on the boot it was on: read as unknown, the agent refused a token and its node
        // failed (chaos seed 251).
        let reported = {
            let mut last = self.host.last_boot.lock().expect("last boot");
            match self.world.boot_id(node) {
                Some(b) => {
                    last.insert(node.to_string(), b.clone());
                    b
                }
                None => last.get(node)?.clone(),
            }
        };
        let down = self.host.down_from.lock().expect("down_from");
        (down.get(node) != Some(&reported)).then_some(reported)
    }

    /// The simulated host's machine ID: its kubelet's (a reboot keeps it).
    fn machine_id(&self, _node: &str) -> Option<String> {
        self.world.machine_id(&self.on)
    }
}

/// The simulator's sentinel: set by the harness, cleared by a reboot.
pub struct SimSentinel {
    node: String,
    host: Host,
}

impl Sentinel for SimSentinel {
    async fn check(&self) -> Result<Option<String>, rollboot::agent::SentinelError> {
        if self
            .host
            .sentinel_errors
            .lock()
            .expect("sentinel errors")
            .contains(&self.node)
        {
            return Err(rollboot::agent::SentinelError {
                command: "simulated sentinel".into(),
                reason: "exited 2, which means neither \"reboot needed\" nor \"no reboot\"".into(),
            });
        }
        Ok(self
            .host
            .sentinel
            .lock()
            .expect("sentinel")
            .contains(&self.node)
            .then(|| "simulated sentinel".to_string()))
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
    /// The agents' metrics (shared by every simulated agent).
    pub agent_metrics: Arc<rollboot::agent::AgentMetrics>,
    controllers: Vec<Option<(JoinHandle<()>, tokio::sync::oneshot::Sender<()>)>>,
    agents: BTreeMap<String, JoinHandle<()>>,
    agent_client: kube::Client,
    /// When set, the agent of node N presents the token `{prefix}N` (one identity per node, for
    /// RBAC and admission enforcement) instead of the shared token `agent`.
    pub agent_token_prefix: Option<String>,
    /// The nodes whose hosts reboot themselves over FleetLock (a simulated Zincati each):
    /// [`Harness::flag`] stages an update on them instead of setting their sentinel.
    pub fleetlock_hosts: BTreeSet<String>,
    /// What the simulated FleetLock hosts share.
    pub fleetlock: zincati::FleetLockHosts,
    /// How often a simulated Zincati asks again (real time).
    pub zincati_poll: Duration,
    /// The hosts' simulated logind, when the run plays unplanned shutdowns
    /// ([`Harness::enable_shutdowns`]): the agents started after it hold an inhibitor.
    pub shutdowns: Option<shutdowns::Shutdowns>,
    /// Unplanned shutdowns played so far, per node (their tokens).
    shutdowns_played: BTreeMap<String, usize>,
    zincatis: BTreeMap<String, JoinHandle<()>>,
}

/// The token the simulated controller replicas prove themselves to each other with when one
/// forwards a FleetLock request (`fleetlock.forwardTokenFile`): the same for every replica, as
/// their ServiceAccount's is, for the forward audience (`USER@AUDIENCE`, see
/// [`crate::sim::tokenreview`]).
pub const FORWARD_TOKEN: &str = "rollboot-controller@rollboot.dev/fleetlock-forward";

/// A file holding [`FORWARD_TOKEN`], written once per process.
fn forward_token_file() -> anyhow::Result<std::path::PathBuf> {
    static FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    if let Some(p) = FILE.get() {
        return Ok(p.clone());
    }
    let p = std::env::temp_dir().join(format!("rollboot-sim-forward-token-{}", std::process::id()));
    std::fs::write(&p, FORWARD_TOKEN)?;
    Ok(FILE.get_or_init(|| p).clone())
}

impl Harness {
    /// Starts the cluster for `scenario`; nothing of rollboot runs yet.
    pub async fn start(scenario: Scenario, config: Config) -> anyhow::Result<Harness> {
        Harness::start_with(scenario, config, crate::sim::Options::default()).await
    }

    /// [`Harness::start`] with the cluster's options (its listen address).
    pub async fn start_with(
        scenario: Scenario,
        config: Config,
        opts: crate::sim::Options,
    ) -> anyhow::Result<Harness> {
        Harness::start_on(Cluster::start_with(scenario, opts).await?, config).await
    }

    /// Starts the cluster loaded from `snapshot` (the scenario gives the timings); nothing of
    /// rollboot runs yet.
    pub async fn start_from_snapshot(
        scenario: Scenario,
        snapshot: &crate::sim::snapshot::Snapshot,
        config: Config,
    ) -> anyhow::Result<Harness> {
        let cluster =
            Cluster::start_from_snapshot(scenario, crate::sim::Options::default(), snapshot)
                .await?;
        Harness::start_on(cluster, config).await
    }

    async fn start_on(cluster: Cluster, mut config: Config) -> anyhow::Result<Harness> {
        if let Some(f) = config.fleetlock.as_mut() {
            f.forward_token_file = forward_token_file()?;
        }
        let client = cluster.kube_client_as("harness").await?;
        let mut agent_config = cluster.kube_config_as("agent").await?;
        rollboot::client::identify(&mut agent_config, "agent");
        // The agents share one client, in process (see sim::transport).
        let agent_client = cluster.in_process_client(&agent_config)?;
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
            agent_metrics: Arc::default(),
            controllers: Vec::new(),
            agents: BTreeMap::new(),
            agent_client,
            agent_token_prefix: None,
            fleetlock_hosts: BTreeSet::new(),
            fleetlock: Default::default(),
            zincati_poll: Duration::from_millis(100),
            shutdowns: None,
            shutdowns_played: BTreeMap::new(),
            zincatis: BTreeMap::new(),
        })
    }

    /// Starts what a rollout runs: controller replicas 0 and 1 (leader election included) and
    /// one agent per node.
    pub async fn start_rollout(&mut self) -> anyhow::Result<()> {
        self.start_controller(0).await?;
        self.start_controller(1).await?;
        self.start_all_agents().await
    }

    /// Starts a rollout of `nodes`: an agent on every node, the flags on `nodes`, then, once
    /// every one of them carries its flag (at most [`FLAGS_AT_MOST`]), the controller replicas,
    /// as on a cluster whose sentinels appeared during the day before tonight's window: the
    /// controller sees the whole set and takes it in the config's order. Started together, its
    /// first pass could see one node flagged and take that one first.
    pub async fn start_rollout_flagged(&mut self, nodes: &[String]) -> anyhow::Result<()> {
        self.start_all_agents().await?;
        self.flag(nodes);
        let all = |ns: &[NodeView]| {
            let flagged: BTreeSet<&str> = ns
                .iter()
                .filter(|n| n.flagged())
                .map(|n| n.name.as_str())
                .collect();
            nodes
                .iter()
                .filter(|n| !self.fleetlock_hosts.contains(*n))
                .all(|n| flagged.contains(n.as_str()))
        };
        if !self.wait_for(FLAGS_AT_MOST, all).await? {
            tracing::warn!(
                flagged = nodes.len(),
                "not every flagged node carries its flag after {FLAGS_AT_MOST:?}; the controllers start all the same"
            );
        }
        self.start_controller(0).await?;
        self.start_controller(1).await?;
        // FleetLock hosts ask the controllers: started once these listen.
        let poll = self.zincati_poll;
        for n in self.fleetlock_hosts.clone() {
            self.start_zincati(&n, poll);
        }
        Ok(())
    }

    /// Starts controller replica `i` (identity `controller-i`).
    pub async fn start_controller(&mut self, i: usize) -> anyhow::Result<()> {
        let kc: kube::config::Kubeconfig =
            yaml_serde::from_str(&self.cluster.kubeconfig(&format!("controller-{i}")))?;
        let mut kube_config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        rollboot::client::identify(&mut kube_config, "controller");
        // In process (see sim::transport), from the configs the replica builds its own from.
        let clients = rollboot::controller::Clients::built_by(kube_config, |c| {
            self.cluster.in_process_client(&c)
        })?;
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
            if let Err(e) = rollboot::controller::run_with_clients(
                clients,
                config,
                format!("controller-{i}"),
                metrics,
                shutdown,
            )
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
        self.start_agent_on(node, node);
    }

    /// Starts the agent of `node` on the host of node `host`: its own (see [`start_agent`]),
    /// or another one's, as an agent started with the wrong `--node-name` would run.
    ///
    /// [`start_agent`]: Harness::start_agent
    pub fn start_agent_on(&mut self, node: &str, host: &str) {
        let client = match &self.agent_token_prefix {
            Some(prefix) => {
                let mut c = kube::Config::new(self.cluster.base_url().parse().expect("url"));
                c.auth_info.token = Some(format!("{prefix}{node}").into());
                rollboot::client::identify(&mut c, "agent");
                self.cluster
                    .in_process_client(&c)
                    .unwrap_or_else(|_| self.agent_client.clone())
            }
            None => self.agent_client.clone(),
        };
        let (config, name, host) = (self.config.clone(), node.to_string(), host.to_string());
        let metrics = self.agent_metrics.clone();
        let (world, hosts) = (self.cluster.world().clone(), self.host.clone());
        let shutdowns = self.shutdowns.clone();
        // The first boot's logind and shutdown count are taken now: a shutdown played right
        // after this call reaches this agent.
        let mut logind = shutdowns.as_ref().map(|s| s.logind(&host));
        let mut shut = hosts.shutdowns_of(&host);
        let mut seen = *shut.borrow();
        let task = tokio::spawn(async move {
            let sim = || SimReboot {
                world: world.clone(),
                host: hosts.clone(),
                on: host.clone(),
            };
            // One agent process per boot of the host: an unplanned shutdown ends it, as it
            // ends a real one, and the next starts once the host is up again, reading the
            // Node afresh (a request for a drain left from the boot before is removed then).
            // The agent's own reboots still keep the process, which a real host does not: it
            // keeps the token it rebooted for, so a shutdown within reboot.timeout after that
            // reboot is taken for rollboot's own and let go undrained. A process per boot there
            // too makes the agent of the new boot refuse a token left with a garbled ack
            // (`tests/controller/agent_refusals.rs`), a change of the agent's own to make first.
            //
            // No agent runs on a host that is down: one started then (a `killAgent` fault that
            // ends while its host is down in a reboot or a shutdown) starts once it is up. Run
            // at once, it read no boot ID, refused the cycle's token as for an unknown host,
            // and its node failed (chaos seed 27).
            while sim().boot_id(&host).is_none() && hosts.downs(&host) > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            loop {
                let sentinel = SimSentinel {
                    node: name.clone(),
                    host: hosts.clone(),
                };
                let res = rollboot::agent::run_with_host_shutdowns(
                    client.clone(),
                    config.clone(),
                    name.clone(),
                    sim(),
                    sentinel,
                    metrics.clone(),
                    logind.take(),
                    async {
                        // The map keeps the sender: an error would mean no more shutdowns.
                        if shut.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    },
                )
                .await;
                if let Err(e) = res {
                    tracing::error!(node = name, error = %e, "agent stopped");
                    return;
                }
                // Ended otherwise (its watch of its Node closed): not a new boot.
                let now = *shut.borrow_and_update();
                if now == seen {
                    return;
                }
                seen = now;
                logind = shutdowns.as_ref().map(|s| s.logind(&host));
                // The next agent runs on the next boot (none while the host is down).
                while sim().boot_id(&host).is_none() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
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

    /// Repairs the host of `node` whose reboot hung ([`Host::broken`]), as an operator would:
    /// it is up again on its boot, its agent reads it, and its next reboot happens.
    pub fn fix_host(&self, node: &str) {
        self.host.broken.lock().expect("broken").remove(node);
        self.host.down_from.lock().expect("down_from").remove(node);
    }

    /// Makes the hosts' sentinels say "reboot needed" (the agents flag the nodes); a FleetLock
    /// host ([`Harness::fleetlock_hosts`]) gets an update staged instead (its Zincati asks).
    pub fn flag(&self, nodes: &[String]) {
        let (fleetlock, agents): (Vec<&String>, Vec<&String>) = nodes
            .iter()
            .partition(|n| self.fleetlock_hosts.contains(*n));
        self.host
            .sentinel
            .lock()
            .expect("sentinel")
            .extend(agents.into_iter().cloned());
        self.fleetlock
            .pending
            .lock()
            .expect("pending")
            .extend(fleetlock.into_iter().cloned());
    }

    /// Gives every host a simulated logind that delays a shutdown at most `delay_max` (real
    /// time) while an inhibitor lock lives: the agents started from now hold one.
    pub fn enable_shutdowns(&mut self, delay_max: Duration) {
        self.shutdowns = Some(shutdowns::Shutdowns::new(delay_max));
    }

    /// `node`'s host shuts down by itself (see [`shutdowns::Shutdowns::shut_down`]), in a task
    /// of its own; nothing without [`Harness::enable_shutdowns`].
    pub fn host_shutdown(&mut self, node: &str) -> Option<JoinHandle<()>> {
        let s = self.shutdowns.clone()?;
        let n = self.shutdowns_played.entry(node.into()).or_default();
        *n += 1;
        let token = format!("shutdown-{node}-{n}");
        let method = SimReboot {
            world: self.cluster.world().clone(),
            host: self.host.clone(),
            on: node.to_string(),
        };
        let node = node.to_string();
        Some(tokio::spawn(async move {
            s.shut_down(&node, method, &token).await;
        }))
    }

    /// Starts the simulated Zincati of FleetLock host `node`, polling every `poll`; it asks
    /// the replicas started so far.
    pub fn start_zincati(&mut self, node: &str, poll: Duration) {
        let method = SimReboot {
            world: self.cluster.world().clone(),
            host: self.host.clone(),
            on: node.to_string(),
        };
        let task = tokio::spawn(zincati::run(
            node.to_string(),
            method,
            self.fleetlock.clone(),
            self.metrics.clone(),
            poll,
            self.shutdowns.clone(),
        ));
        if let Some(old) = self.zincatis.insert(node.into(), task) {
            old.abort();
        }
    }

    /// Stops what ran on the hosts gone for good since the last call (their agent, their
    /// Zincati; their sentinel is no one's any more) and returns every host gone so far.
    pub fn hosts_gone(&mut self) -> BTreeSet<String> {
        let gone = self.cluster.world().gone_hosts();
        for n in &gone {
            if let Some(t) = self.agents.remove(n) {
                t.abort();
            }
            if let Some(t) = self.zincatis.remove(n) {
                t.abort();
            }
            self.host.sentinel.lock().expect("sentinel").remove(n);
            self.fleetlock.pending.lock().expect("pending").remove(n);
        }
        gone
    }

    /// Hosts with an update staged or a sentinel that says "reboot needed".
    pub fn pending(&self) -> BTreeSet<String> {
        let mut p = self.host.sentinel.lock().expect("sentinel").clone();
        p.extend(
            self.fleetlock
                .pending
                .lock()
                .expect("pending")
                .iter()
                .cloned(),
        );
        p
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

    /// [`Harness::events`] with `reason`, read again every 50 ms until `until` holds of them or
    /// `timeout` has passed (then as last read): an Event follows the write it tells of.
    pub async fn events_until(
        &self,
        reason: &str,
        timeout: Duration,
        until: impl Fn(&[String]) -> bool,
    ) -> anyhow::Result<Vec<String>> {
        let start = Instant::now();
        loop {
            let notes = self.events(reason).await?;
            if until(&notes) || start.elapsed() >= timeout {
                return Ok(notes);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Reboots performed on `node` so far.
    pub fn reboots(&self, node: &str) -> usize {
        self.host.downs(node)
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

    /// Polls (as [`Harness::wait_for`]) until node `name` is in `state` or `timeout` passes;
    /// returns whether it got there, and the node as it is then.
    pub async fn wait_for_state(
        &self,
        name: &str,
        state: NodeState,
        timeout: Duration,
    ) -> anyhow::Result<(bool, NodeView)> {
        let reached = self
            .wait_for(timeout, |ns| {
                ns.iter().any(|n| n.name == name && n.state == Some(state))
            })
            .await?;
        Ok((reached, self.node(name).await?))
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
        for (_, t) in std::mem::take(&mut self.zincatis) {
            t.abort();
        }
        self.cluster.shutdown().await;
    }
}

/// Cycle starts seen: (node, when the controller started it), and those of them that were
/// for a shutdown of the node's host (its cordon wrote `cycle-for: shutdown`).
#[derive(Clone, Default)]
struct Starts {
    all: Vec<(String, DateTime<Utc>)>,
    for_shutdown: BTreeSet<(String, DateTime<Utc>)>,
}

/// The harness's own watch of the Nodes. The rollout is followed from its events: listing every
/// Node every 50 ms cost a tenth of the process's CPU at 100 nodes, taken from the controller and
/// the simulated cluster it was measuring. Every event is looked at for cycle starts (a node
/// entering `cordoning` from no cycle), which a sampled list could miss; a start is dated by the
/// maintenance lock's entry for the node (the controller's decision, which the windows govern),
/// or by the `cordoning` state when the lock does not list it.
struct NodeWatch {
    store: reflector::Store<Node>,
    views: Mutex<rollboot::controller::node_cache::ViewCache>,
    /// The nodes whose view, as `nodes` last gave it, is in an in-flight state: while any is,
    /// the run is not decided, and the loop need not look at every node to know it.
    in_flight: Mutex<BTreeSet<String>>,
    /// What the watch changed since `nodes` last looked.
    touched: Arc<Mutex<rollboot::controller::node_cache::NodeChanges>>,
    changed: Arc<tokio::sync::Notify>,
    starts: Arc<Mutex<Starts>>,
    task: JoinHandle<()>,
    lock_task: JoinHandle<()>,
}

impl NodeWatch {
    async fn start(
        client: kube::Client,
        lock: &rollboot::config::Lock,
    ) -> anyhow::Result<NodeWatch> {
        let (store, writer) = reflector::store();
        let changed = Arc::new(tokio::sync::Notify::new());
        let notify = changed.clone();
        let starts = Arc::new(Mutex::new(Starts::default()));
        let seen = starts.clone();
        let entries: Arc<Mutex<BTreeMap<String, rollboot::lock::LockEntry>>> = Arc::default();
        let lock_entries = entries.clone();
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client.clone(), &lock.namespace);
        let lock_stream = watcher(
            leases,
            watcher::Config::default().fields(&format!("metadata.name={}", lock.name)),
        )
        .default_backoff();
        let lock_task = tokio::spawn(async move {
            futures::pin_mut!(lock_stream);
            while let Some(ev) = lock_stream.next().await {
                if let Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) = ev {
                    let record = rollboot::lock::LockRecord::from_lease(Some(l));
                    // The nodes in flight now: a freed slot is gone before the node starts again.
                    *lock_entries.lock().expect("lock entries") = record.entries;
                }
            }
        });
        let stream = watcher(Api::<Node>::all(client), watcher::Config::default())
            .default_backoff()
            .reflect(writer);
        let touched: Arc<Mutex<rollboot::controller::node_cache::NodeChanges>> = Arc::default();
        let touch = touched.clone();
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut last: BTreeMap<String, Option<NodeState>> = BTreeMap::new();
            while let Some(ev) = stream.next().await {
                if let Ok(e) = &ev {
                    touch.lock().expect("touched").note(e);
                }
                if let Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = &ev {
                    let v = NodeView::from_node(n);
                    let was = last.get(&v.name).copied().flatten();
                    // A Node registered again has no state yet: its cycle goes on all the same.
                    if v.state.is_some() || !was.is_some_and(NodeState::in_flight) {
                        last.insert(v.name.clone(), v.state);
                    }
                    if v.state == Some(NodeState::Cordoning)
                        && !was.is_some_and(NodeState::in_flight)
                    {
                        if let Some(since) = v.state_since {
                            let decided = entries
                                .lock()
                                .expect("lock entries")
                                .get(&v.name)
                                .map(|e| e.since)
                                .filter(|t| *t <= since);
                            let start = (v.name.clone(), decided.unwrap_or(since));
                            let mut seen = seen.lock().expect("starts");
                            if v.for_shutdown() {
                                seen.for_shutdown.insert(start.clone());
                            }
                            seen.all.push(start);
                        }
                    }
                }
                notify.notify_one();
            }
        });
        store.wait_until_ready().await?;
        Ok(NodeWatch {
            store,
            views: Mutex::default(),
            in_flight: Mutex::default(),
            touched,
            changed,
            starts,
            task,
            lock_task,
        })
    }

    /// Every Node, parsed again only where it changed (the report loop looks after every
    /// batch of events: parsing all of them each time was a seventh of a 1,000-node run's CPU).
    /// After the first look, only the Nodes the watch changed are looked at (a look at every
    /// Node after each batch was a tenth of a 5,000-node run's CPU).
    fn nodes(&self) -> Arc<Vec<NodeView>> {
        let changes = std::mem::take(&mut *self.touched.lock().expect("touched"));
        let mut views = self.views.lock().expect("views");
        let mut in_flight = self.in_flight.lock().expect("in flight");
        let flying = |v: &NodeView| v.state.is_some_and(NodeState::in_flight);
        if changes.relisted || !views.primed() {
            let state = self.store.state();
            let all = views.refresh(state.iter().map(|n| &**n));
            *in_flight = all
                .iter()
                .filter(|v| flying(v))
                .map(|v| v.name.clone())
                .collect();
            return all;
        }
        let store = &self.store;
        let names: Vec<String> = changes.names.into_iter().collect();
        let all = views.update(
            names
                .iter()
                .map(|name| {
                    let node = store.get(&reflector::ObjectRef::new(name));
                    (name.clone(), node)
                })
                .collect::<Vec<_>>(),
        );
        for name in names {
            let view = views.position(&name).and_then(|i| all.get(i));
            match view.filter(|v| flying(v)) {
                Some(_) => in_flight.insert(name),
                None => in_flight.remove(&name),
            };
        }
        all
    }

    /// Whether some node's view, as [`NodeWatch::nodes`] last gave it, is in flight.
    fn any_in_flight(&self) -> bool {
        !self.in_flight.lock().expect("in flight").is_empty()
    }

    /// Returns on the next change, or after `at_most`.
    async fn changed(&self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, self.changed.notified()).await;
    }
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        self.task.abort();
        self.lock_task.abort();
    }
}

/// Each flagged node's irreducible time in real seconds, from the pods on it before the
/// rollout: the longest grace period among those its drain evicts (not DaemonSet or mirror
/// pods; none: nothing to wait for), the reboot and readiness. A pod with a claim, under the
/// default order, goes after the others, one at a time, each its grace period and, with
/// `drain.volumes.waitForDetach`, the scenario's detach time.
async fn irreducible_times(
    h: &Harness,
    scenario: &Scenario,
    flagged: &BTreeSet<String>,
) -> anyhow::Result<BTreeMap<String, f64>> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(h.client.clone());
    // The default order takes the pods with claims one at a time, each with its wait for
    // the detach when the drain waits for it.
    let one_at_a_time = h.config.drain.order.is_empty();
    let detach = if h.config.drain.volumes.wait_for_detach {
        scenario.detach_seconds
    } else {
        0.0
    };
    let mut grace: BTreeMap<String, f64> = flagged.iter().map(|n| (n.clone(), 0.0)).collect();
    let mut stateful: BTreeMap<String, f64> = BTreeMap::new();
    for p in pods.list(&Default::default()).await?.items {
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_ref()) else {
            continue;
        };
        let kept =
            p.metadata.owner_references.iter().flatten().any(|o| {
                o.controller == Some(true) && matches!(o.kind.as_str(), "DaemonSet" | "Node")
            });
        let Some(g) = grace.get_mut(node).filter(|_| !kept) else {
            continue;
        };
        let secs = p
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30) as f64;
        if one_at_a_time && !rollboot::drain::claims_of(&p).is_empty() {
            *stateful.entry(node.clone()).or_default() += secs + detach;
        } else {
            *g = g.max(secs);
        }
    }
    Ok(grace
        .into_iter()
        .map(|(n, g)| {
            let after = stateful.get(&n).copied().unwrap_or_default();
            (n, report::per_node_seconds(scenario, g + after))
        })
        .collect())
}

/// Each budget's disruption windows over the flagged nodes, from the pods and budgets before
/// the rollout: for each pod a budget selects on a flagged node (its drain evicts it once),
/// the simulated time from its eviction until a replacement is Ready (a ReplicaSet's
/// replacement is created at the eviction and is Ready after `startDelay`; a StatefulSet's
/// only once the pod is gone, after its exit, and with a volume after the attach too), and the
/// disruptions the budget allows at once (`status.disruptionsAllowed` while all are healthy).
async fn budget_windows(
    h: &Harness,
    scenario: &Scenario,
    flagged: &BTreeSet<String>,
) -> anyhow::Result<Vec<report::BudgetWindows>> {
    let pods: Vec<Pod> = Api::<Pod>::all(h.client.clone())
        .list(&Default::default())
        .await?
        .items;
    let budgets: Vec<PodDisruptionBudget> = Api::<PodDisruptionBudget>::all(h.client.clone())
        .list(&Default::default())
        .await?
        .items;
    Ok(windows_of(&pods, &budgets, scenario, flagged))
}

/// [`budget_windows`] from the pods and budgets as listed.
fn windows_of(
    pods: &[Pod],
    budgets: &[PodDisruptionBudget],
    scenario: &Scenario,
    flagged: &BTreeSet<String>,
) -> Vec<report::BudgetWindows> {
    let mut by_ns: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for p in pods {
        let on_flagged = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some_and(|n| flagged.contains(n));
        if on_flagged {
            by_ns
                .entry(p.metadata.namespace.as_deref().unwrap_or(""))
                .or_default()
                .push(p);
        }
    }
    // Per namespace, its pods on flagged nodes by each label they carry: a budget whose
    // selector requires `key=value` is matched against that label's pods only (matching every
    // budget against every pod of its namespace was 24,000 x 15,000 tests at 5,000 nodes,
    // minutes of CPU before the rollout started).
    let mut by_label: HashMap<(&str, &str, &str), Vec<&Pod>> = HashMap::new();
    for (ns, pods) in &by_ns {
        for p in pods {
            for (k, v) in p.metadata.labels.iter().flatten() {
                by_label.entry((ns, k, v)).or_default().push(p);
            }
        }
    }
    let empty = BTreeMap::new();
    let no_pods = Vec::new();
    let mut out = Vec::new();
    for b in budgets {
        let ns = b.metadata.namespace.as_deref().unwrap_or("");
        let selector = b.spec.as_ref().and_then(|s| s.selector.as_ref());
        // The fewest pods any one of its `matchLabels` names; all of the namespace's without.
        let candidates = selector
            .and_then(|s| s.match_labels.as_ref())
            .and_then(|m| {
                m.iter()
                    .map(|(k, v)| by_label.get(&(ns, k, v)).unwrap_or(&no_pods))
                    .min_by_key(|pods| pods.len())
            })
            .or_else(|| by_ns.get(ns))
            .unwrap_or(&no_pods);
        let mut seconds = 0.0;
        for p in candidates {
            let labels = p.metadata.labels.as_ref().unwrap_or(&empty);
            if !rollboot::selector::selector_matches(selector, labels) {
                continue;
            }
            let stateful =
                rollboot::drain::controller_of(p).is_some_and(|(k, _)| k == "StatefulSet");
            let window = if stateful {
                let grace = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(30) as f64;
                let exit = scenario.pod_exit_seconds.map_or(grace, |e| e.min(grace));
                let attach = if rollboot::drain::claims_of(p).is_empty() {
                    0.0
                } else {
                    scenario.attach_seconds
                };
                exit + attach.max(scenario.start_delay)
            } else {
                scenario.start_delay
            };
            seconds += scenario.scaled(window).as_secs_f64();
        }
        if seconds > 0.0 {
            out.push(report::BudgetWindows {
                budget: format!("{ns}/{}", b.metadata.name.as_deref().unwrap_or("")),
                allowed: b.status.as_ref().map_or(0, |s| s.disruptions_allowed),
                seconds,
            });
        }
    }
    out
}

/// How a rollout is run besides its world and config.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// How many nodes to flag (the first by name); all when `None`.
    pub flagged: Option<usize>,
    /// Print progress on stderr.
    pub progress: bool,
    /// Keep everything running at least this long after the start.
    pub idle_for: Option<Duration>,
    /// Give up after this long even if the run's own bound is later (tests).
    pub cap: Option<Duration>,
    /// Serve the cluster for kubectl and `rollboot status` meanwhile (`--serve --rollout`),
    /// and go on serving after the run is decided, until Ctrl-C or SIGTERM.
    pub serve: Option<Serve>,
}

/// Where and how `--serve --rollout` serves.
#[derive(Clone, Debug)]
pub struct Serve {
    /// Listen address.
    pub listen: std::net::SocketAddr,
    /// Where to write the kubeconfig.
    pub kubeconfig_out: std::path::PathBuf,
    /// Where to write the config the rollout runs with (scaled, as the controllers read it),
    /// for `rollboot status` and `plan` against the served cluster.
    pub config_out: std::path::PathBuf,
    /// The kubeconfig's bearer token.
    pub token: String,
}

/// How long the agents may take to flag the nodes before the controllers start regardless (a
/// host whose agent cannot write, e.g. under an API fault, must not hold the run).
const FLAGS_AT_MOST: Duration = Duration::from_secs(30);

/// Runs a whole rollout: world, 2 controller replicas, one agent per node, flags, plays the
/// scenario's faults if it has any, waits until the run is decided (finished, halted, or stuck
/// past its bound), and returns the report.
pub async fn rollout(
    scenario: Scenario,
    config: Config,
    opts: RunOptions,
) -> anyhow::Result<Report> {
    Ok(rollout_with(scenario, None, config, opts).await?.0)
}

/// Puts `text` where the controller's config is kept in a cluster, the ConfigMap
/// `rollboot-system/rollboot-config` (key `rollboot.yaml`), creating its namespace if need be.
async fn publish_config(client: &kube::Client, text: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use rollboot::cluster_config::{DEFAULT_NAME, DEFAULT_NAMESPACE, KEY};
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(DEFAULT_NAMESPACE).await?.is_none() {
        let ns =
            serde_json::from_value(serde_json::json!({"metadata": {"name": DEFAULT_NAMESPACE}}))?;
        namespaces.create(&Default::default(), &ns).await?;
    }
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": DEFAULT_NAME, "namespace": DEFAULT_NAMESPACE},
        "data": {KEY: text},
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), DEFAULT_NAMESPACE)
        .create(&Default::default(), &cm)
        .await?;
    Ok(())
}

/// What a run observed besides its [`Report`], for the rehearsal's part of the report.
#[derive(Debug, Default)]
pub struct Extra {
    /// Every budget hold (simulator's real seconds).
    pub holds: Vec<crate::sim::invariants::Hold>,
    /// Failed nodes and the controller's reason.
    pub failures: Vec<rehearse::NodeFailure>,
}

/// [`rollout`], on a loaded snapshot when one is given (the flagged nodes are then the first
/// `opts.flagged` of those the config's selector takes, without the exclude label), returning
/// the budget holds and failure reasons too.
pub async fn rollout_with(
    scenario: Scenario,
    snapshot: Option<&crate::sim::snapshot::Snapshot>,
    mut config: Config,
    opts: RunOptions,
) -> anyhow::Result<(Report, Extra)> {
    if scenario.fleetlock_hosts > 0 && config.fleetlock.is_none() {
        // Each replica on a port of its own; the simulated hosts find them in the metrics.
        config.fleetlock = Some(rollboot::config::FleetLock::on("127.0.0.1:0"));
    }
    let cluster_opts = crate::sim::Options {
        addr: opts
            .serve
            .as_ref()
            .map_or(crate::sim::Options::default().addr, |s| s.listen),
        ..crate::sim::Options::default()
    };
    let mut h = match snapshot {
        Some(snap) => Harness::start_from_snapshot(scenario.clone(), snap, config).await?,
        None => Harness::start_with(scenario.clone(), config, cluster_opts).await?,
    };
    if let Some(s) = &opts.serve {
        // The config first: a client that sees the kubeconfig finds the config beside it.
        let text = format!(
            "# The config `rollboot simulate --serve --rollout` runs its controllers and agents with\n# (durations as run): for `rollboot status --config` and `plan --config` against it.\n{}",
            yaml_serde::to_string(&*h.config)?
        );
        std::fs::write(&s.config_out, &text).map_err(|e| {
            anyhow::anyhow!(
                "writing the effective config to {}: {e}",
                s.config_out.display()
            )
        })?;
        // And where a cluster keeps it, so the operator's commands need no --config.
        publish_config(&h.client, &text).await?;
        h.cluster.write_kubeconfig(&s.kubeconfig_out, &s.token)?;
        eprintln!(
            "simulated cluster at {}, rollout running; kubeconfig: {}, config: {} (and ConfigMap {}/{})\n  watch it: kubectl --kubeconfig {} get nodes -w\n  or:       rollboot status --watch --kubeconfig {}",
            h.cluster.base_url(),
            s.kubeconfig_out.display(),
            s.config_out.display(),
            rollboot::cluster_config::DEFAULT_NAMESPACE,
            rollboot::cluster_config::DEFAULT_NAME,
            s.kubeconfig_out.display(),
            s.kubeconfig_out.display(),
        );
    }
    if let Some(n) = opts
        .flagged
        .filter(|n| snapshot.is_none() && *n > scenario.nodes)
    {
        h.shutdown().await;
        anyhow::bail!(
            "--flagged {n}: the simulated cluster has {} node(s)",
            scenario.nodes
        );
    }
    if let Some((key, _)) = h.config.group_limit() {
        h.cluster.watch_groups(key);
    }
    h.cluster.watch_capacity(capacity_of(&h.config));
    let names: Vec<String> = match snapshot {
        None => h.node_names().await?,
        Some(_) => {
            let selector = h.config.node_selector();
            let mut v: Vec<String> = h
                .nodes()
                .await?
                .into_iter()
                .filter(|n| !n.excluded && selector.matches(&n.labels))
                .map(|n| n.name)
                .collect();
            v.sort();
            v
        }
    };
    let flagged: BTreeSet<String> = names
        .iter()
        .take(opts.flagged.unwrap_or(names.len()))
        .cloned()
        .collect();
    let shuts_down = scenario.faults.as_ref().is_some_and(|f| {
        f.faults
            .iter()
            .any(|t| matches!(t.fault, crate::sim::fault_schedule::Fault::HostShutdown))
    });
    if shuts_down {
        h.enable_shutdowns(Duration::from_secs_f64(
            scenario.inhibit_delay_seconds * scenario.time_factor,
        ));
    }
    h.fleetlock_hosts = flagged
        .iter()
        .take(scenario.fleetlock_hosts)
        .cloned()
        .collect();
    // Zincati asks again every few simulated seconds (its real period is minutes: a slower
    // poll only adds to the run).
    h.zincati_poll = Duration::from_secs_f64((2.0 * scenario.time_factor).max(0.02));
    let irreducible = irreducible_times(&h, &scenario, &flagged).await?;
    let budget_windows = budget_windows(&h, &scenario, &flagged).await?;
    // The fault player acts through the harness's client: on time, whatever the rates.
    h.cluster.exempt_from_faults("harness");
    let mut chaos = scenario
        .faults
        .clone()
        .map(|s| chaos::Chaos::new(s, &scenario));
    let started = Instant::now();
    let watch = NodeWatch::start(h.client.clone(), &h.config.lock).await?;
    let list: Vec<String> = flagged.iter().cloned().collect();
    h.start_rollout_flagged(&list).await?;
    let start = Instant::now();
    let cpu_at_start = process_cpu();
    let lock_at_start = h.cluster.store_lock_use();
    let mut rollout_cpu: Option<Duration> = None;
    let mut store_lock = None;
    let flagged_at = Utc::now();
    let tty = std::io::stderr().is_terminal();
    let mut last_print = Instant::now();
    let mut decision: Option<(Duration, (Outcome, String))> = None;
    // The bound runs from the start, or from the end of the faults once they are over.
    let mut bound = Bound::new(&scenario, &h.config, flagged.len(), false);
    let mut bound_from = Duration::ZERO;
    let mut faults_over = chaos.is_none();
    let max_failures = h.config.failures.max_failures;
    let mut holds_looked = Instant::now();
    // Flagged nodes whose host is gone for good (an autoscaler deleted it) leave the rollout.
    let mut live = flagged.clone();
    loop {
        let t = start.elapsed();
        let nodes = watch.nodes();
        for n in h.hosts_gone() {
            live.remove(&n);
        }
        if let Some(c) = chaos.as_mut() {
            c.tick(&mut chaos::Target::Harness(&mut h), t.as_secs_f64(), &nodes)
                .await;
            if !faults_over && c.over(t.as_secs_f64()) {
                faults_over = true;
                bound = Bound::new(&scenario, &h.config, flagged.len(), true);
                bound_from = t;
            }
        }
        let past_bound = t >= bound_from + Duration::from_secs_f64(bound.seconds)
            || opts.cap.is_some_and(|c| t >= c);
        // A drain that can never finish is decided while its node is in flight; looked at on a
        // period, as it reads the budgets holding drains.
        if decision.is_none() && faults_over && holds_looked.elapsed() >= HOLDS_LOOKED_EVERY {
            holds_looked = Instant::now();
            if let Some(d) = blocked_for_good(&h, &nodes).await {
                decision = Some((t, d));
            }
        }
        // Not decided while a node is in flight (`report::decided`): known without a look at
        // every node and a copy of every host's record, which after each batch of Node events
        // was a third of a 5,000-node run's CPU.
        if decision.is_none() && faults_over && (past_bound || !watch.any_in_flight()) {
            let pending = h.pending();
            let rebooted: BTreeSet<String> = h
                .host
                .reboots
                .lock()
                .expect("reboots")
                .keys()
                .cloned()
                .collect();
            if let Some(d) = report::decided(&nodes, &live, &pending, &rebooted, max_failures)
                .or_else(|| report::held_for_good(&nodes, &live, &h.config))
            {
                decision = Some((t, d));
            } else if past_bound {
                let why = report::stuck_reason(&nodes, &live, &pending, &rebooted, &bound);
                decision = Some((t, (Outcome::Stuck, why)));
            }
        }
        // Measured once, at the decision: the lock's reading is always there to say so (the
        // CPU's may not be, where getrusage fails).
        if decision.is_some() && store_lock.is_none() {
            rollout_cpu = cpu_at_start
                .zip(process_cpu())
                .map(|(a, b)| b.saturating_sub(a));
            store_lock = Some(h.cluster.store_lock_use().since(&lock_at_start));
        }
        if decision.is_some() && opts.idle_for.is_none_or(|d| t >= d) {
            break;
        }
        if opts.progress
            && last_print.elapsed() >= Duration::from_millis(if tty { 200 } else { 2000 })
        {
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
                t.as_secs_f64(),
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
        // The sentinels are the hosts', not the cluster's, and faults run on the clock: looked
        // at again at least this often.
        watch.changed(Duration::from_millis(200)).await;
    }
    let starts = watch.starts.lock().expect("starts").clone();
    drop(watch);
    if opts.progress && tty {
        eprintln!();
    }
    let observed = started.elapsed();
    let (makespan, outcome) = decision.expect("the loop ends decided");
    let faults = chaos.map(|c| report::FaultsPlayed {
        schedule: c.schedule().clone(),
        played: c.played(),
        host_fault_nodes: c.host_fault_nodes(),
    });
    let seen = report::Observed {
        flagged_at,
        makespan,
        observed,
        outcome,
        bound,
        starts: starts.all,
        shutdown_starts: starts.for_shutdown,
        irreducible,
        budget_windows,
        faults,
        rollout_cpu,
        store_lock,
    };
    let r = report::report(&h, &live, seen).await?;
    if opts.serve.is_some() {
        eprint!("{}", r.text());
        let stopped = crate::sim::serve::stop_signal()?;
        eprintln!(
            "rollout {}: serving until Ctrl-C (SIGINT) or SIGTERM",
            r.outcome.as_str()
        );
        let sig = stopped.await;
        eprintln!("{sig}: stopping");
    }
    let extra = Extra {
        holds: h.cluster.budget_holds(),
        failures: h
            .nodes()
            .await?
            .into_iter()
            .filter(|n| n.state == Some(NodeState::Failed))
            .map(|n| rehearse::NodeFailure {
                reason: n
                    .failure_reason
                    .clone()
                    .unwrap_or_else(|| "no reason recorded".into()),
                node: n.name,
            })
            .collect(),
    };
    h.shutdown().await;
    Ok((r, extra))
}

/// The limits the invariant watch holds the nodes out to: the config's `concurrency`.
/// `countCordoned` is read from the config as serialized, so that it is taken once the config
/// has it and is false until then.
pub fn capacity_of(config: &Config) -> crate::sim::invariants::Capacity {
    let count_cordoned = serde_json::to_value(config)
        .ok()
        .is_some_and(|v| v["concurrency"]["countCordoned"] == true);
    crate::sim::invariants::Capacity {
        max_nodes: config.concurrency.max_nodes as usize,
        per_group: config
            .group_limit()
            .map(|(k, m)| (k.to_string(), m as usize)),
        count_cordoned,
        lock: Some((config.lock.namespace.clone(), config.lock.name.clone())),
    }
}

/// How often a run looks whether a budget that can never allow a disruption holds a drain.
const HOLDS_LOOKED_EVERY: Duration = Duration::from_secs(1);

/// The run's decision if a drain can never finish ([`report::blocked_for_good`]): the budgets
/// refusing an eviction now, read through the harness's client with the pod's node.
async fn blocked_for_good(h: &Harness, nodes: &[NodeView]) -> Option<(Outcome, String)> {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    // Each budget holding a pod now is read once; the pods' nodes only for a budget that can
    // never allow a disruption.
    let mut by_budget: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for hold in h.cluster.budget_holds().into_iter().filter(|x| !x.released) {
        by_budget.entry(hold.budget).or_default().push(hold.pod);
    }
    if by_budget.is_empty() {
        return None;
    }
    let in_flight: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| n.state.is_some_and(NodeState::in_flight))
        .map(|n| n.name.as_str())
        .collect();
    let mut held = Vec::new();
    for (budget, held_pods) in by_budget {
        let Some((bns, bname)) = budget.split_once('/') else {
            continue;
        };
        let budgets: Api<PodDisruptionBudget> = Api::namespaced(h.client.clone(), bns);
        let Ok(pdb) = budgets.get(bname).await else {
            continue;
        };
        let selects = pdb.status.as_ref().map_or(0, |s| s.expected_pods.max(0));
        if rollboot::budgets::never_allows(&pdb, selects as usize).is_none() {
            continue;
        }
        for pod in held_pods {
            let Some((pns, pname)) = pod.split_once('/') else {
                continue;
            };
            let pods: Api<Pod> = Api::namespaced(h.client.clone(), pns);
            let Ok(Some(p)) = pods.get_opt(pname).await else {
                continue;
            };
            match p.spec.and_then(|s| s.node_name) {
                Some(node) if in_flight.contains(node.as_str()) => held.push(report::HeldBy {
                    budget: budget.clone(),
                    pod,
                    node,
                    pdb: pdb.clone(),
                }),
                _ => {}
            }
        }
    }
    let failed = nodes
        .iter()
        .filter(|n| n.state == Some(NodeState::Failed))
        .count();
    report::blocked_for_good(&held, &h.config, failed)
}

/// Runs `rollboot simulate`.
pub fn main(args: Options) -> anyhow::Result<ExitCode> {
    if args.sim.serve && !args.rollout {
        return crate::sim::serve::run(args.sim, args.chaos, |cluster, schedule, scenario| {
            Box::pin(async move { chaos::serve(cluster, schedule, &scenario).await })
        });
    }
    let setup = args.chaos.map(chaos::setup);
    let mut sc: Scenario = match (&args.sim.scenario, &setup) {
        (Some(p), _) => crate::sim::serve::read_scenario(p)?,
        (None, Some(s)) => s.scenario.clone(),
        (None, None) => Scenario {
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
    if let Some(a) = args.sim.node_addresses {
        sc.node_addresses = Some(a);
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
    // The seed's schedule as its setup drew it (with the faults the setup adds to the
    // schedule's draw, such as a slow detach in a world with volumes), over a scenario file's.
    if let Some(s) = &setup {
        sc.faults = s.scenario.faults.clone();
    }
    let flagged = match args.flagged.as_str() {
        "all" => None,
        n => Some(
            n.parse::<usize>()
                .map_err(|_| anyhow::anyhow!("--flagged takes `all` or a number, not `{n}`"))?,
        ),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let snapshot = rt.block_on(snapshot_of(&args))?;
    let mut world_timings = Vec::new();
    if let Some(snap) = &snapshot {
        // The world's timings (and the time factor) from what the cluster measured, unless
        // the operator gave them; the config is read twice, as written for its limits here.
        let written = match &args.config {
            Some(f) => rollboot::config::load_file(f)?,
            None => rollboot::config::parse_str(SIM_CONFIG)
                .map_err(|p| anyhow::anyhow!("built-in simulation config: {p:?}"))?,
        };
        let given = rehearse::Given {
            scenario: args.sim.scenario.is_some(),
            reboot_time: args.reboot_time,
            time_factor: args.sim.time_factor,
        };
        let flagged_count = flagged.unwrap_or(snap.nodes.len());
        (sc, world_timings) = rehearse::world_timings(snap, &sc, given, &written, flagged_count);
    }
    let (config, used, scaling) = run_config(&args, setup.as_ref(), sc.time_factor)?;
    let opts = RunOptions {
        flagged,
        progress: !args.rollout,
        idle_for: args.idle_for.map(|d| d.to_std()),
        cap: None,
        serve: args.rollout.then(|| Serve {
            listen: args.sim.listen,
            kubeconfig_out: args.sim.kubeconfig_out.clone(),
            config_out: args.config_out.clone().unwrap_or_else(|| {
                args.sim
                    .kubeconfig_out
                    .with_file_name("rollboot-sim.config.yaml")
            }),
            token: args.sim.token.clone(),
        }),
    };
    let rehearsing = snapshot.is_some();
    if let Some(snap) = &snapshot {
        // The report's lower bound counts one grace period per node: the snapshot's longest
        // among the pods a drain evicts, not the generated world's.
        let longest = snap
            .pods
            .iter()
            .filter(|p| !p.mirror && p.owner.as_ref().is_none_or(|o| o.kind != "DaemonSet"))
            .map(|p| p.grace_seconds)
            .max()
            .unwrap_or(0);
        sc.grace_seconds = match sc.pod_exit_seconds {
            Some(e) => longest.min(e.ceil() as i64),
            None => longest,
        };
    }
    let (report, extra) = rt.block_on(rollout_with(sc.clone(), snapshot.as_ref(), config, opts))?;
    let rehearsal = rehearse::Rehearsal {
        config: used,
        config_scaled: scaling
            .as_ref()
            .map(|s| s.scaled.clone())
            .unwrap_or_default(),
        config_kept: scaling.as_ref().map(|s| s.kept.clone()).unwrap_or_default(),
        config_ignored: scaling.map(|s| s.ignored).unwrap_or_default(),
        time_factor: sc.time_factor,
        makespan_real_seconds: report.makespan_seconds / sc.time_factor,
        failures: extra.failures,
        budget_holds: rehearse::budget_holds(&extra.holds, sc.time_factor),
        snapshot: snapshot.as_ref().map(|s| s.summary()),
        world_timings,
    };
    let printed = report::SimulateReport {
        run: &report,
        rehearsal: &rehearsal,
    };
    std::io::Write::write_all(
        &mut std::io::stdout().lock(),
        rollboot::render::render(&printed, args.report).as_bytes(),
    )?;
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else if rehearsing
        && report.pdb_violations == 0
        && (!report.failed.is_empty() || report.outcome == Outcome::Blocked)
    {
        // The rehearsal's answer: the rollout of this cluster would fail (named above).
        ExitCode::from(3)
    } else {
        ExitCode::FAILURE
    })
}

/// The config a run uses and where it came from: the user's file as written with its
/// durations scaled by `time_factor` ([`rehearse::scale_config`]), or the built-in one.
fn run_config(
    args: &Options,
    setup: Option<&chaos::Setup>,
    time_factor: f64,
) -> anyhow::Result<(
    Config,
    rehearse::ConfigUsed,
    Option<rehearse::ConfigScaling>,
)> {
    Ok(match (&args.config, setup) {
        (Some(f), _) => {
            let written = rollboot::config::load_file(f)?;
            let (run, scaling) =
                rehearse::scale_config_calling(&written, time_factor, args.call_hooks)?;
            let used = rehearse::ConfigUsed {
                source: format!(
                    "{} as written, its durations scaled by the time factor {time_factor}",
                    f.display()
                ),
                built_in: None,
            };
            (run, used, Some(scaling))
        }
        (None, Some(s)) => {
            let used = rehearse::ConfigUsed {
                source: "built-in simulation config with the chaos seed's overrides (no --config)"
                    .into(),
                built_in: Some(format!("{SIM_CONFIG}{}", s.config_overrides)),
            };
            (sim_config(&s.config_overrides)?, used, None)
        }
        (None, None) => {
            let used = rehearse::ConfigUsed {
                source: "built-in simulation config (no --config): it evicts unreplicated and emptyDir pods, which the defaults do not".into(),
                built_in: Some(SIM_CONFIG.into()),
            };
            let c = rollboot::config::parse_str(SIM_CONFIG)
                .map_err(|p| anyhow::anyhow!("built-in simulation config: {p:?}"))?;
            (c, used, None)
        }
    })
}

/// The snapshot a run rehearses: read from `--snapshot FILE`, or from the live cluster with
/// `--from-cluster` (and written to `--snapshot-out FILE`); none for a generated world.
async fn snapshot_of(args: &Options) -> anyhow::Result<Option<crate::sim::snapshot::Snapshot>> {
    if let Some(f) = &args.snapshot {
        return Ok(Some(crate::sim::snapshot::read(f)?));
    }
    if !args.from_cluster {
        return Ok(None);
    }
    let snap = from_cluster::read_current(&args.target).await?;
    snap.check()
        .map_err(|e| anyhow::anyhow!("the snapshot of {}: {e}", snap.source))?;
    if let Some(f) = &args.snapshot_out {
        crate::sim::snapshot::write(f, &snap)?;
        eprintln!(
            "snapshot of {} written to {} ({} nodes, {} pods, {} budgets)",
            snap.source,
            f.display(),
            snap.nodes.len(),
            snap.pods.len(),
            snap.budgets.len()
        );
    }
    Ok(Some(snap))
}

/// The CPU time this process has used so far, user and system, all threads (`getrusage`);
/// `None` where the call fails. Why not the whole process's figure from outside (`time`): it
/// counts the world's set-up and the report, which at 5,000 nodes are tens of seconds of a core
/// before the first node is flagged.
fn process_cpu() -> Option<Duration> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `rusage` into the pointer it is given, which points to one.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: the call succeeded, so it wrote the whole struct (zeroed before in any case).
    let u = unsafe { usage.assume_init() };
    let of = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Some(of(u.ru_utime) + of(u.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, node: &str, labels: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": ns, "name": name, "labels": labels,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "rs", "uid": "u", "controller": true}]},
            "spec": {"nodeName": node, "containers": []},
        }))
        .expect("a pod")
    }

    fn budget(ns: &str, name: &str, selector: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": ns, "name": name},
            "spec": {"selector": selector, "maxUnavailable": 1},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 0, "desiredHealthy": 0,
                "expectedPods": 0},
        }))
        .expect("a budget")
    }

    /// Each budget counts exactly the pods it selects on flagged nodes, whether its selector
    /// narrows through `matchLabels` (looked up by label) or has `matchExpressions` only
    /// (every pod of its namespace tested).
    #[test]
    fn a_budgets_windows_count_the_pods_it_selects_on_flagged_nodes_only() {
        let pods = [
            pod(
                "a",
                "web-1",
                "n1",
                serde_json::json!({"app": "web", "tier": "front"}),
            ),
            pod(
                "a",
                "web-2",
                "n2",
                serde_json::json!({"app": "web", "tier": "front"}),
            ),
            pod(
                "a",
                "web-3",
                "n3",
                serde_json::json!({"app": "web", "tier": "front"}),
            ),
            pod(
                "a",
                "web-back",
                "n1",
                serde_json::json!({"app": "web", "tier": "back"}),
            ),
            pod("a", "db-1", "n1", serde_json::json!({"app": "db"})),
            pod(
                "b",
                "web-1",
                "n1",
                serde_json::json!({"app": "web", "tier": "front"}),
            ),
        ];
        let budgets = [
            // Two labels: the pods with both, not those with one.
            budget(
                "a",
                "web-front",
                serde_json::json!({"matchLabels": {"app": "web", "tier": "front"}}),
            ),
            // Expressions only.
            budget(
                "a",
                "not-db",
                serde_json::json!({"matchExpressions": [
                {"key": "app", "operator": "NotIn", "values": ["db"]}]}),
            ),
            // Labels no pod has.
            budget(
                "a",
                "none",
                serde_json::json!({"matchLabels": {"app": "cache"}}),
            ),
            // Another namespace's pods are not this one's.
            budget(
                "b",
                "web",
                serde_json::json!({"matchLabels": {"app": "web"}}),
            ),
        ];
        let scenario = Scenario::default();
        let flagged: BTreeSet<String> = ["n1", "n2"].iter().map(|n| n.to_string()).collect();
        let one = scenario.scaled(scenario.start_delay).as_secs_f64();
        let got: BTreeMap<String, f64> = windows_of(&pods, &budgets, &scenario, &flagged)
            .into_iter()
            .map(|w| (w.budget, w.seconds / one))
            .collect();
        // n3 is not flagged: web-3 is never evicted.
        let want: BTreeMap<String, f64> = [("a/web-front", 2.0), ("a/not-db", 3.0), ("b/web", 1.0)]
            .iter()
            .map(|(b, n)| (b.to_string(), *n))
            .collect();
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (b, n) in &want {
            assert!((got[b] - n).abs() < 1e-9, "{b}: {got:?}");
        }
    }

    #[test]
    fn overrides_merge_into_the_simulation_config() {
        let c = super::sim_config("{reboot: {timeout: 3s}, concurrency: {maxNodes: 2}}").unwrap();
        assert_eq!(c.reboot.timeout, rollboot::config::Duration::from_secs(3));
        assert_eq!(
            c.reboot.check_period,
            rollboot::config::Duration::from_millis(100)
        );
        assert_eq!(c.concurrency.max_nodes, 2);
    }
}
