//! `rollboot simulate --chaos SEED`: the world and config variant a seed draws, and the player's
//! steps applied to a running [`Harness`] (kills, pauses, host faults, deleted objects).
//!
//! Owns the mapping from a fault to what it does to the simulated processes and cluster, and
//! undoing it when the fault ends. It must never decide anything about the rollout: the
//! schedule and its timing come from [`crate::sim::fault_schedule`], the verdict from the report.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::Harness;
use crate::sim::fault_schedule::{Actor, Fault, FaultSchedule, Played, Player, Step};
use crate::sim::{crd, signals, FaultConfig, Scenario};
use rollboot::node::NodeView;

/// The timeouts of a chaos run: short enough that a host fault fails its node in seconds, long
/// enough that no fault of the schedule (all over by 12 s) fails a node on its own.
const CHAOS_CONFIG: &str = "\
reboot: {timeout: 20s}
drain: {timeout: 60s}
healthGate: {timeout: 60s}
";

/// What a seed draws besides its fault schedule: the world's size and the config's limits.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// The world (seeded with the same seed), with the schedule in `faults`.
    pub scenario: Scenario,
    /// YAML merged over the simulation config.
    pub config_overrides: String,
}

/// The world and config for `seed`: 3 to 6 nodes, `maxNodes` 1 or 2, grouped by zone one time
/// in three, a window of 40 s every minute one time in five, and `maxFailures` equal to the
/// host faults drawn (so a rollout goes on past the nodes they fail) except one time in four
/// (so halting is exercised too), and `failures.returnToService` one time in two (a failed node
/// otherwise holds its slot: with maxNodes 1 the rollout then waits for an operator), and two
/// StatefulSets with a ReadWriteOnce volume per pod one time in two (half of those with a
/// `slowDetach` fault while a node drains). The same seed draws the same setup.
pub fn setup(seed: u64) -> Setup {
    // Another stream than the schedule's, so that changing one draw leaves the other alone.
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_c4a0_5000_0000);
    let mut schedule = FaultSchedule::draw(seed);
    let nodes = rng.random_range(3..=6);
    let pods_per_node = rng.random_range(2..=4);
    let max_nodes = rng.random_range(1..=2);
    let grouped = rng.random_ratio(1, 3);
    let windowed = rng.random_ratio(1, 5);
    let host_faults = schedule
        .faults
        .iter()
        .filter(|f| matches!(f.fault, Fault::HostHangs | Fault::HostFails))
        .count();
    let max_failures = if rng.random_ratio(1, 4) {
        0
    } else {
        host_faults
    };
    // Drawn last: the draws before it stay what they were for every seed.
    let return_to_service = rng.random_ratio(1, 2);
    // Drawn after it, for the same reason: StatefulSets with a ReadWriteOnce volume per pod
    // one seed in two, and with them, one time in two, a slow detach while a node drains.
    let stateful = rng.random_ratio(1, 2);
    if stateful && rng.random_ratio(1, 2) {
        schedule
            .faults
            .push(crate::sim::fault_schedule::TimedFault {
                at: rng.random_range(0.0..8.0),
                when_state: Some("draining".into()),
                node: None,
                for_seconds: rng.random_range(1.0..5.0),
                fault: Fault::SlowDetach {
                    detach_seconds: rng.random_range(20.0..200.0),
                },
            });
        schedule.faults.sort_by(|a, b| a.at.total_cmp(&b.at));
    }
    // Drawn after those, for the same reason: one seed in two, some hosts reboot themselves
    // over FleetLock (a simulated Zincati each) among the agents' hosts.
    let fleetlock_hosts = if rng.random_ratio(1, 2) {
        rng.random_range(1..=nodes / 2)
    } else {
        0
    };
    // Drawn after those, for the same reason: one seed in two, a host shuts down by itself
    // (not necessarily one rollboot would reboot now), early in the run.
    if rng.random_ratio(1, 2) {
        schedule
            .faults
            .push(crate::sim::fault_schedule::TimedFault {
                at: rng.random_range(0.0..6.0),
                when_state: None,
                node: Some(format!("node-{:04}", rng.random_range(0..nodes))),
                for_seconds: 1.0,
                fault: Fault::HostShutdown,
            });
        schedule.faults.sort_by(|a, b| a.at.total_cmp(&b.at));
    }
    // An `otherMaintenance` by a NodeMaintenance needs its CRD (and the operator with it).
    let node_maintenance =
        schedule
            .needs_node_maintenance()
            .then_some(crate::sim::scenario::NodeMaintenance {
                installed: true,
                operator: true,
            });
    let mut o = format!(
        "{CHAOS_CONFIG}concurrency: {{maxNodes: {max_nodes}{}}}\nfailures: {{maxFailures: {max_failures}, returnToService: {return_to_service}}}\n",
        if grouped {
            ", groupBy: topology.kubernetes.io/zone, maxNodesPerGroup: 1"
        } else {
            ""
        }
    );
    if windowed {
        o.push_str("windows: [{schedule: '* * * * *', duration: 40s}]\n");
    }
    Setup {
        scenario: Scenario {
            nodes,
            pods_per_node,
            // 1.5 s of real time per reboot: a rollout lasts about as long as the faults.
            reboot_time: 150.0,
            seed,
            faults: Some(schedule),
            stateful_sets: if stateful { 2 } else { 0 },
            stateful_volumes: stateful,
            fleetlock_hosts,
            // 30 s of real time: a drain fits, as it does once InhibitDelayMaxSec is raised.
            inhibit_delay_seconds: 3000.0,
            node_maintenance,
            ..Scenario::default()
        },
        config_overrides: o,
    }
}

/// What a schedule is played on: a rollout harness (everything), or a served cluster with no
/// controller or agent behind it (the API and world faults only).
pub enum Target<'a> {
    /// `rollboot simulate --chaos`.
    Harness(&'a mut Harness),
    /// `rollboot simulate --serve --chaos`: a client of the cluster (identity `chaos`), and
    /// the maintenance lock by its default name.
    Served {
        /// The cluster.
        cluster: &'a crate::sim::Cluster,
        /// Its client.
        client: kube::Client,
    },
}

impl Target<'_> {
    fn cluster(&self) -> &crate::sim::Cluster {
        match self {
            Target::Harness(h) => &h.cluster,
            Target::Served { cluster, .. } => cluster,
        }
    }

    fn client(&self) -> kube::Client {
        match self {
            Target::Harness(h) => h.client.clone(),
            Target::Served { client, .. } => client.clone(),
        }
    }

    fn lock(&self) -> (String, String) {
        match self {
            Target::Harness(h) => (h.config.lock.namespace.clone(), h.config.lock.name.clone()),
            Target::Served { .. } => {
                let c = rollboot::config::Config::default();
                (c.lock.namespace, c.lock.name)
            }
        }
    }
}

/// A schedule being played on a harness: what was done, to undo it when the fault ends.
pub struct Chaos {
    player: Player,
    api: FaultConfig,
    /// Controller replicas killed, per fault.
    killed: BTreeMap<usize, usize>,
    /// Replica paused, per fault.
    paused: BTreeMap<usize, usize>,
    /// Deleted Nodes, to register again.
    deleted: BTreeMap<usize, Node>,
    /// Budgets' `maxUnavailable` before the first of the blocks on now, and how many are on:
    /// overlapping blocks restore the budgets once, when the last ends.
    blocked: Vec<(String, String, serde_json::Value)>,
    blocks: usize,
    /// How many `denyEvictions` are on: the policy goes when the last ends.
    denials: usize,
    start_delay: f64,
    detach_seconds: f64,
    /// What each `otherMaintenance` put on its node: a NodeMaintenance (its name) or a taint
    /// (its key), to take off when it ends.
    maintained: BTreeMap<usize, Maintained>,
}

/// What an `otherMaintenance` fault put on its node.
enum Maintained {
    /// The NodeMaintenance of this name.
    NodeMaintenance(String),
    /// The taint of this key.
    Taint(&'static str),
}

impl Chaos {
    /// Ready to play `schedule` on a world built from `scenario`.
    pub fn new(schedule: FaultSchedule, scenario: &Scenario) -> Chaos {
        Chaos {
            player: Player::new(schedule),
            api: FaultConfig::default(),
            killed: BTreeMap::new(),
            paused: BTreeMap::new(),
            deleted: BTreeMap::new(),
            blocked: Vec::new(),
            blocks: 0,
            denials: 0,
            start_delay: scenario.start_delay,
            detach_seconds: scenario.detach_seconds,
            maintained: BTreeMap::new(),
        }
    }

    /// The schedule.
    pub fn schedule(&self) -> &FaultSchedule {
        self.player.schedule()
    }

    /// True once every fault has ended and none can start.
    pub fn over(&self, t: f64) -> bool {
        self.player.over(t)
    }

    /// What became of each fault.
    pub fn played(&self) -> Vec<Played> {
        self.player.played()
    }

    /// Nodes a host fault was played on.
    pub fn host_fault_nodes(&self) -> Vec<String> {
        self.player.host_fault_nodes()
    }

    /// Applies what is due at `t` seconds into the rollout.
    pub async fn tick(&mut self, h: &mut Target<'_>, t: f64, nodes: &[NodeView]) {
        let mut states: Vec<(String, Option<String>)> = nodes
            .iter()
            .map(|n| (n.name.clone(), n.state.map(|s| s.as_str().to_string())))
            .collect();
        states.sort();
        let steps = self.player.tick(t, &states);
        if steps.is_empty() {
            return;
        }
        let api = self.player.api_faults();
        if api != self.api {
            h.cluster().set_faults(api.clone());
            self.api = api;
        }
        let stop_after = self.player.schedule().stop_after;
        for step in steps {
            tracing::info!(?step, t, "chaos");
            match step {
                Step::Begin {
                    index,
                    fault,
                    target,
                } => {
                    let length = self.player.schedule().faults[index].for_seconds;
                    self.begin(
                        h,
                        index,
                        &fault,
                        target.as_deref(),
                        length.min(stop_after - t),
                    )
                    .await
                }
                Step::End {
                    index,
                    fault,
                    target,
                } => self.end(h, index, &fault, target.as_deref()).await,
            }
        }
    }

    async fn begin(
        &mut self,
        t: &mut Target<'_>,
        index: usize,
        fault: &Fault,
        target: Option<&str>,
        length: f64,
    ) {
        let length = Duration::from_secs_f64(length.max(0.0));
        let client = t.client();
        match (fault, target) {
            (Fault::Outage, _) => t.cluster().outage(length),
            (Fault::DeleteNode, Some(n)) => {
                let api: Api<Node> = Api::all(client);
                if let Some(node) = retry("get node", || api.get(n)).await {
                    let dp = DeleteParams::default();
                    if retry("delete node", || api.delete(n, &dp)).await.is_some() {
                        self.deleted.insert(index, node);
                    }
                }
            }
            (Fault::DeleteLock, _) => {
                let (ns, name) = t.lock();
                let api: Api<Lease> = Api::namespaced(client, &ns);
                let _ = retry("delete lock", || async {
                    match api.delete(&name, &DeleteParams::default()).await {
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                        r => r.map(|_| ()),
                    }
                })
                .await;
            }
            (Fault::BlockBudgets, _) => {
                self.blocks += 1;
                if self.blocks > 1 {
                    return;
                }
                let api: Api<PodDisruptionBudget> = Api::all(client.clone());
                let lp = kube::api::ListParams::default();
                let Some(list) = retry("list budgets", || api.list(&lp)).await else {
                    return;
                };
                let mut was = Vec::new();
                for b in list.items {
                    let (Some(ns), Some(name)) = (b.metadata.namespace, b.metadata.name) else {
                        continue;
                    };
                    let Some(mu) = b.spec.and_then(|s| s.max_unavailable) else {
                        continue;
                    };
                    let ns_api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
                    let p = json!({"spec": {"maxUnavailable": 0}});
                    let (pp, patch) = (PatchParams::default(), Patch::Merge(&p));
                    if retry("block a budget", || ns_api.patch(&name, &pp, &patch))
                        .await
                        .is_some()
                    {
                        was.push((ns, name, serde_json::to_value(mu).unwrap_or_default()));
                    }
                }
                self.blocked = was;
            }
            (Fault::DenyEvictions, _) => {
                self.denials += 1;
                if self.denials > 1 {
                    return;
                }
                let pp = PostParams::default();
                let (policy, binding) = eviction_denial();
                let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
                let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
                let _ = retry("deny evictions", || policies.create(&pp, &policy)).await;
                let _ = retry("bind the eviction denial", || {
                    bindings.create(&pp, &binding)
                })
                .await;
            }
            (Fault::SlowPods { start_delay }, _) => {
                t.cluster().world().set_start_delay(*start_delay)
            }
            (Fault::SlowDetach { detach_seconds }, _) => {
                t.cluster().world().set_detach_delay(*detach_seconds)
            }
            (Fault::OtherMaintenance { by, .. }, Some(n)) => {
                if let Some(m) = other_maintenance(client, index, *by, n).await {
                    self.maintained.insert(index, m);
                }
            }
            (f, _) if f.needs_processes() => match t {
                Target::Harness(h) => self.begin_in_processes(h, index, f, target, length),
                Target::Served { .. } => tracing::warn!(
                    fault = f.name(),
                    "no controller or agent runs behind --serve: fault skipped"
                ),
            },
            // API faults are set from the player's sum; a node fault with no node does nothing.
            _ => {}
        }
    }

    fn begin_in_processes(
        &mut self,
        h: &mut Harness,
        index: usize,
        fault: &Fault,
        target: Option<&str>,
        length: Duration,
    ) {
        match (fault, target) {
            (Fault::KillLeader, _) => {
                if let Some(i) = h.leader() {
                    h.kill_controller(i);
                    self.killed.insert(index, i);
                }
            }
            (Fault::PauseLeader, _) => {
                if let Some(i) = h.leader() {
                    h.cluster.hold(&format!("controller-{i}"), length, None);
                    self.paused.insert(index, i);
                }
            }
            (Fault::KillAgent, Some(n)) => h.kill_agent(n),
            (Fault::StallAgent, Some(n)) => {
                *h.host
                    .stall
                    .lock()
                    .expect("stall")
                    .entry(n.into())
                    .or_default() += 1;
            }
            (Fault::HostHangs, Some(n)) => {
                h.host.broken.lock().expect("broken").insert(n.into());
            }
            (Fault::HostFails, Some(n)) => {
                h.host.failing.lock().expect("failing").insert(n.into());
            }
            (Fault::HostShutdown, Some(n)) => {
                h.host_shutdown(n);
            }
            _ => {}
        }
    }

    async fn end(&mut self, t: &mut Target<'_>, index: usize, fault: &Fault, target: Option<&str>) {
        let client = t.client();
        match fault {
            Fault::DeleteNode => {
                if let Some(mut node) = self.deleted.remove(&index) {
                    // The kubelet registers its Node again: a new object, with the kubelet's
                    // labels and status and nothing anybody else wrote on it.
                    node.metadata = kube::api::ObjectMeta {
                        name: node.metadata.name.take(),
                        labels: node.metadata.labels.take(),
                        ..Default::default()
                    };
                    if let Some(spec) = node.spec.as_mut() {
                        spec.unschedulable = None;
                        spec.taints = None;
                    }
                    let api: Api<Node> = Api::all(client);
                    let pp = PostParams::default();
                    let _ = retry("register the node again", || api.create(&pp, &node)).await;
                }
            }
            Fault::DenyEvictions => {
                self.denials = self.denials.saturating_sub(1);
                if self.denials > 0 {
                    return;
                }
                let dp = DeleteParams::default();
                let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
                let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
                let _ = retry("allow evictions again", || async {
                    match bindings.delete(DENIAL, &dp).await {
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                        r => r.map(|_| ()),
                    }
                })
                .await;
                let _ = retry("remove the eviction denial", || async {
                    match policies.delete(DENIAL, &dp).await {
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                        r => r.map(|_| ()),
                    }
                })
                .await;
            }
            Fault::BlockBudgets => {
                self.blocks = self.blocks.saturating_sub(1);
                if self.blocks > 0 {
                    return;
                }
                for (ns, name, mu) in std::mem::take(&mut self.blocked) {
                    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
                    let p = json!({"spec": {"maxUnavailable": mu}});
                    let (pp, patch) = (PatchParams::default(), Patch::Merge(&p));
                    let _ = retry("unblock a budget", || api.patch(&name, &pp, &patch)).await;
                }
            }
            Fault::OtherMaintenance { .. } => {
                if let (Some(m), Some(n)) = (self.maintained.remove(&index), target) {
                    end_other_maintenance(client, m, n).await;
                }
            }
            Fault::SlowPods { .. } => t.cluster().world().set_start_delay(self.start_delay),
            Fault::SlowDetach { .. } => t.cluster().world().set_detach_delay(self.detach_seconds),
            f if f.needs_processes() => {
                if let Target::Harness(h) = t {
                    self.end_in_processes(h, index, f, target).await;
                }
            }
            _ => {}
        }
    }

    async fn end_in_processes(
        &mut self,
        h: &mut Harness,
        index: usize,
        fault: &Fault,
        target: Option<&str>,
    ) {
        match (fault, target) {
            (Fault::KillLeader, _) => {
                if let Some(i) = self.killed.remove(&index) {
                    if let Err(e) = h.start_controller(i).await {
                        tracing::error!(error = %e, "chaos: restarting controller-{i}");
                    }
                }
            }
            (Fault::PauseLeader, _) => {
                if let Some(i) = self.paused.remove(&index) {
                    h.cluster.release(&format!("controller-{i}"));
                }
            }
            (Fault::KillAgent, Some(n)) => h.start_agent(n),
            (Fault::StallAgent, Some(n)) => {
                // The crash at that line: a stalled agent is killed and starts again; a stall
                // the agent never reached is withdrawn.
                h.host.stall.lock().expect("stall").remove(n);
                h.kill_agent(n);
                h.start_agent(n);
            }
            (Fault::HostHangs, Some(n)) => {
                h.host.broken.lock().expect("broken").remove(n);
            }
            (Fault::HostFails, Some(n)) => {
                h.host.failing.lock().expect("failing").remove(n);
            }
            _ => {}
        }
    }
}

/// Plays `schedule` on a served cluster (`simulate --serve` with `--chaos` or a scenario's
/// `faults:`), from now until its faults are over, through a client of identity `chaos`;
/// faults that need rollboot's processes are skipped with a warning.
pub async fn serve(cluster: &crate::sim::Cluster, schedule: FaultSchedule, scenario: &Scenario) {
    let client = match cluster.kube_client_as("chaos").await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "chaos: no client for the served cluster");
            return;
        }
    };
    cluster.exempt_from_faults("chaos");
    let mut chaos = Chaos::new(schedule, scenario);
    let start = Instant::now();
    let api: Api<Node> = Api::all(client.clone());
    let mut nodes = Vec::new();
    loop {
        let t = start.elapsed().as_secs_f64();
        if chaos.over(t) {
            break;
        }
        // Through the faults it injects itself: the last list seen stands in for a failed one.
        if let Ok(list) = api.list(&Default::default()).await {
            nodes = list.items.iter().map(NodeView::from_node).collect();
        }
        let mut target = Target::Served {
            cluster,
            client: client.clone(),
        };
        chaos.tick(&mut target, t, &nodes).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for p in chaos.played() {
        tracing::info!(fault = p.fault, target = ?p.target, began = ?p.began, ended = ?p.ended, "chaos: played");
    }
}

/// Retries a request of the fault player through the outages it injects itself (its identity
/// is exempt from the rates) for up to 20 s; logs and gives up after that, or at once on an
/// answer that a retry cannot change (404 for a Node deleted twice, 409...).
async fn retry<T, F, Fut>(what: &str, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let start = Instant::now();
    loop {
        match f().await {
            Ok(v) => return Some(v),
            Err(kube::Error::Api(s)) if s.code < 500 && s.code != 429 => {
                tracing::info!(code = s.code, "chaos: {what}: {}", s.message);
                return None;
            }
            Err(e) if start.elapsed() < Duration::from_secs(20) => {
                tracing::debug!(error = %e, "chaos: {what}: retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => {
                tracing::error!(error = %e, "chaos: {what}: giving up");
                return None;
            }
        }
    }
}

/// The NodeMaintenances' API, through `client`.
fn node_maintenances(client: kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(crd::GROUP, crd::VERSION, "NodeMaintenance");
    Api::all_with(
        client,
        &ApiResource::from_gvk_with_plural(&gvk, "nodemaintenances"),
    )
}

/// Another actor takes `node` out: a NodeMaintenance created, or a deletion taint put on.
async fn other_maintenance(
    client: kube::Client,
    index: usize,
    by: Actor,
    node: &str,
) -> Option<Maintained> {
    match by {
        Actor::NodeMaintenance => {
            let name = format!("chaos-{index}-{node}");
            let object = crd::node_maintenance(&name, node, "chaos: otherMaintenance");
            let object: DynamicObject = serde_json::from_value(object).ok()?;
            let api = node_maintenances(client);
            let pp = PostParams::default();
            retry("create a NodeMaintenance", || api.create(&pp, &object)).await?;
            Some(Maintained::NodeMaintenance(name))
        }
        Actor::ClusterAutoscaler | Actor::Karpenter => {
            let (key, value) = match by {
                Actor::ClusterAutoscaler => (
                    signals::TO_BE_DELETED,
                    Some(chrono::Utc::now().timestamp().to_string()),
                ),
                _ => (signals::KARPENTER_DISRUPTED, None),
            };
            set_taint(client, node, key, value, true)
                .await
                .then_some(Maintained::Taint(key))
        }
    }
}

/// The maintenance of [`other_maintenance`] ends: its NodeMaintenance deleted, or its taint
/// taken off.
async fn end_other_maintenance(client: kube::Client, m: Maintained, node: &str) {
    match m {
        Maintained::NodeMaintenance(name) => {
            let api = node_maintenances(client);
            let dp = DeleteParams::default();
            let _ = retry("delete the NodeMaintenance", || async {
                match api.delete(&name, &dp).await {
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    r => r.map(|_| ()),
                }
            })
            .await;
        }
        Maintained::Taint(key) => {
            set_taint(client, node, key, None, false).await;
        }
    }
}

/// Puts the `NoSchedule` taint `key` on `node` (`on`), or takes it off, in a merge patch of
/// the taints as read, conditional on the version read (again from a fresh read on a
/// conflict, as a controller would). Whether it was written (or already so).
async fn set_taint(
    client: kube::Client,
    node: &str,
    key: &'static str,
    value: Option<String>,
    on: bool,
) -> bool {
    let api: Api<Node> = Api::all(client);
    for _ in 0..10 {
        let Some(n) = retry("read the node to taint", || api.get(node)).await else {
            return false;
        };
        let mut v = serde_json::to_value(&n).unwrap_or_default();
        if on {
            crate::sim::actors::add_taint(&mut v, key, value.clone());
        } else {
            crate::sim::actors::remove_taint(&mut v, key);
        }
        let taints = v["spec"]["taints"].clone();
        if serde_json::to_value(n.spec.as_ref().and_then(|s| s.taints.as_ref())).unwrap_or_default()
            == taints
        {
            return true;
        }
        let p = json!({"metadata": {"resourceVersion": n.metadata.resource_version},
            "spec": {"taints": taints}});
        let (pp, patch) = (PatchParams::default(), Patch::Merge(&p));
        if retry("taint the node", || api.patch(node, &pp, &patch))
            .await
            .is_some()
        {
            return true;
        }
    }
    false
}

/// The name of `denyEvictions`' policy and binding.
const DENIAL: &str = "chaos-deny-evictions";

/// A validating admission policy denying every eviction, and its binding.
fn eviction_denial() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let policy = serde_json::from_value(json!({
        "metadata": {"name": DENIAL},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods/eviction"],
            }]},
            "validations": [{"expression": "false", "message": "chaos: evictions are held by a drain cleaner"}],
        },
    }))
    .expect("a valid policy");
    let binding = serde_json::from_value(json!({
        "metadata": {"name": DENIAL},
        "spec": {"policyName": DENIAL, "validationActions": ["Deny"]},
    }))
    .expect("a valid binding");
    (policy, binding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_one_setup_and_its_config_is_valid() {
        assert_eq!(setup(11), setup(11));
        for seed in 0..100 {
            let s = setup(seed);
            let c = super::super::sim_config(&s.config_overrides)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert!((1..=2).contains(&c.concurrency.max_nodes));
            // The seed's schedule, and a slowDetach only in a world with volumes.
            let mut played = s.scenario.faults.clone().unwrap();
            let slow = played
                .faults
                .iter()
                .filter(|f| matches!(f.fault, Fault::SlowDetach { .. }))
                .count();
            assert!(
                slow <= usize::from(s.scenario.stateful_volumes),
                "seed {seed}"
            );
            // At most one hostShutdown, of a node of the world, and FleetLock hosts among its
            // nodes.
            let shutdowns: Vec<&str> = played
                .faults
                .iter()
                .filter(|f| matches!(f.fault, Fault::HostShutdown))
                .filter_map(|f| f.node.as_deref())
                .collect();
            assert!(shutdowns.len() <= 1, "seed {seed}: {shutdowns:?}");
            for n in &shutdowns {
                let i: usize = n.trim_start_matches("node-").parse().unwrap();
                assert!(i < s.scenario.nodes, "seed {seed}: {n}");
            }
            assert!(
                s.scenario.fleetlock_hosts <= s.scenario.nodes / 2,
                "seed {seed}"
            );
            played
                .faults
                .retain(|f| !matches!(f.fault, Fault::SlowDetach { .. } | Fault::HostShutdown));
            assert_eq!(played, FaultSchedule::draw(seed));
        }
        let with = |f: fn(&Setup) -> bool| (0..100).filter(|s| f(&setup(*s))).count();
        let shut = with(|s| {
            s.scenario.faults.as_ref().is_some_and(|f| {
                f.faults
                    .iter()
                    .any(|t| matches!(t.fault, Fault::HostShutdown))
            })
        });
        assert!(
            (30..=70).contains(&shut),
            "{shut} seeds of 100 with a hostShutdown"
        );
        let fleetlock = with(|s| s.scenario.fleetlock_hosts > 0);
        assert!(
            (30..=70).contains(&fleetlock),
            "{fleetlock} seeds of 100 with FleetLock hosts"
        );
        let volumes = (0..100)
            .filter(|s| setup(*s).scenario.stateful_volumes)
            .count();
        assert!(
            (30..=70).contains(&volumes),
            "{volumes} seeds of 100 with volumes"
        );
    }
}
