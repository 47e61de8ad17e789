//! `rollboot status`: the operator's view of a rollout — the leader, the maintenance lock, the
//! nodes that are flagged, in flight or failed, the counts, the schedule and what blocks progress.
//!
//! Owns the [`Status`] report built from a [`ClusterState`] (pure: the caller passes `now`), a
//! function per section; its text form (`render`: [`crate::render::Render`]) and JSON form (its
//! serialization); and [`fetch`], the only I/O: one get of each Lease and a paged list of the
//! Nodes. It must never write to the cluster. `--watch` follows the same objects through
//! watches ([`watch`]) and shows each change as the rollout's progress ([`progress`]).

pub mod progress;
mod render;
pub mod watch;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use serde::Serialize;

use crate::config::Config;
use crate::controller::decide;
use crate::lock::{LockEntry, LockRecord};
use crate::node::{NodeState, NodeView};
use crate::time;

/// What the cluster says, as read: the two Leases (absent when they do not exist) and every Node.
#[derive(Clone, Debug, Default)]
pub struct ClusterState {
    /// The leader Lease.
    pub leader: Option<Lease>,
    /// The maintenance lock Lease.
    pub lock: Option<Lease>,
    /// Every Node.
    pub nodes: Vec<NodeView>,
}

/// The report, serialized as the `--output json` object.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The instant the report describes.
    pub now: DateTime<Utc>,
    /// The leader Lease.
    pub leader: LeaderLease,
    /// The maintenance lock.
    pub lock: LockLease,
    /// The nodes that are flagged, in flight or failed, by name.
    pub nodes: Vec<NodeStatus>,
    /// Every node with a reboot history (rollboot finished a cycle on it), by name.
    pub history: Vec<NodeHistory>,
    /// Counts over all nodes.
    pub counts: Counts,
    /// The maintenance schedule at `now`.
    pub maintenance: Maintenance,
    /// Failed nodes against `failures.maxFailures`.
    pub failures: FailureCount,
    /// The hosts as their agents read them: how a shutdown nobody planned would go on each
    /// node, and the nodes whose agent reads a host that is not theirs.
    pub hosts: Hosts,
    /// What keeps new reboots from starting now (the controller's own rules), as sentences.
    pub blockers: Vec<String>,
    /// Configured blockers this report does not evaluate (it reads no Pods and no Prometheus).
    pub not_checked: Vec<String>,
    /// Settings of the config that leave a door open, each as a sentence (FleetLock's client
    /// address check turned off).
    pub unsafe_settings: Vec<String>,
}

/// The hosts as their agents read them (`rollboot.dev/agent-host`).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hosts {
    /// How many nodes, by how a shutdown of their host nobody planned would go (`ready`,
    /// `kubelet`, `shortDelay`, `noLogind`); nodes whose agent wrote nothing are not counted.
    pub shutdown_drain: BTreeMap<String, usize>,
    /// What each of those states means, for the states counted.
    pub meaning: BTreeMap<String, String>,
    /// The nodes whose shutdowns would not be drained under their budgets, by name.
    pub not_drainable: Vec<String>,
    /// The nodes whose agent reads a boot ID or machine ID other than the Node's (the agent
    /// refuses every reboot token there), each with what differs.
    pub mismatched: Vec<HostMismatch>,
}

/// A node whose agent reads a host that is not its Node's.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostMismatch {
    /// Node name.
    pub node: String,
    /// What differs.
    pub why: String,
}

/// The leader Lease.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderLease {
    /// `namespace/name`.
    pub lease: String,
    /// The holder; `None` when the Lease is absent or released.
    pub holder: Option<String>,
    /// When the holder last renewed.
    pub renew_time: Option<DateTime<Utc>>,
    /// The record's lease duration (the config's when the record has none).
    pub lease_duration_seconds: i64,
    /// No holder, or the holder has not renewed within the lease duration: no replica leads.
    pub expired: bool,
}

/// The maintenance lock.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockLease {
    /// `namespace/name`.
    pub lease: String,
    /// The holder; `None` when free.
    pub holder: Option<String>,
    /// The identity rollboot holds it under.
    pub rollboot_identity: String,
    /// Held by someone other than rollboot: rollboot starts nothing new (paused).
    pub foreign: bool,
    /// The holder is an operator's `rollboot pause`: who, when, why. The nodes in flight
    /// finish their cycle under it (under any other foreign holder they wait).
    pub pause: Option<PauseStatus>,
    /// The nodes recorded in flight, by name.
    pub in_flight: Vec<InFlight>,
}

/// An operator's pause of rollboot (`rollboot pause`).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseStatus {
    /// Who paused.
    pub by: String,
    /// When (`None` when not recorded or unreadable).
    pub at: Option<DateTime<Utc>>,
    /// Why (`--reason`), when given.
    pub reason: Option<String>,
}

/// A node's reboot history as the controller recorded it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeHistory {
    /// Node name.
    pub node: String,
    /// When its last cycle ended `done`.
    pub last_reboot: Option<DateTime<Utc>>,
    /// Boot ID before that reboot.
    pub boot_id_before: Option<String>,
    /// Boot ID after it.
    pub boot_id_after: Option<String>,
    /// Cycles finished on it (its host rebooted drained).
    pub count: Option<u32>,
    /// Cycles that ended with a shutdown of its host that went before the drain was over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undrained: Option<u32>,
    /// How long the parts of its last cycle took.
    pub last_cycle: Option<crate::node::LastCycle>,
}

/// One node recorded in the lock.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InFlight {
    /// Node name.
    pub node: String,
    /// The node's state now, as its `rollboot.dev/state` says (the lock entry keeps only the
    /// state it was written with, `cordoning`, until the node leaves the lock).
    pub state: NodeState,
    /// When the node entered that state.
    pub since: DateTime<Utc>,
    /// When the node entered maintenance (its lock entry was written).
    pub started: DateTime<Utc>,
    /// The leader that started it.
    pub leader: String,
    /// What holds it now, as the controller decides it from the same Node (a hook's gate
    /// annotations or blocking webhook with its attempt and last answer, `drain.settle`, a
    /// Node deleted or registered again), and until when at most; absent when it is not held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
}

/// What holds a node in flight.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// Why, naming the hook, gate or setting.
    pub why: String,
    /// When the controller looks again at the latest (the phase's timeout, the settle's end).
    pub until: DateTime<Utc>,
}

/// A lock entry as the Node reports it now: its state of this cycle (a state written before
/// the entry belongs to an earlier cycle), else the entry's own; and what holds it, as the
/// controller's own [`decide::next_step`] says.
fn in_flight_entry(
    name: &str,
    entry: &LockEntry,
    node: Option<&NodeView>,
    config: &Config,
    now: DateTime<Utc>,
) -> InFlight {
    let (state, since) = node
        .and_then(|n| Some((n.state?, n.state_since?)))
        .filter(|(_, since)| *since >= entry.since)
        .unwrap_or((entry.state, entry.since));
    let waiting = match decide::next_step(node, entry, config, now) {
        decide::Step::Hold { until, why } => Some(Waiting { why, until }),
        _ => None,
    };
    InFlight {
        node: name.to_string(),
        state,
        since,
        started: entry.since,
        leader: entry.leader.clone(),
        waiting,
    }
}

/// Who cordoned a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CordonedBy {
    /// rollboot (`rollboot.dev/cordoned-by` is set): rollboot will uncordon it.
    Rollboot,
    /// Someone else: it stays cordoned after its cycle.
    Operator,
}

/// One flagged, in-flight or failed node.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// Node name.
    pub name: String,
    /// `rollboot.dev/state`; `None` when not started (or unreadable).
    pub state: Option<NodeState>,
    /// `rollboot.dev/state-since`.
    pub state_since: Option<DateTime<Utc>>,
    /// Flagged by the agent (`reboot-required`) or an operator (`reboot-requested`).
    pub flagged: bool,
    /// The earliest flag instant.
    pub flagged_at: Option<DateTime<Utc>>,
    /// Why it is flagged: the sentinel's reason and/or `requested`.
    pub flag_reason: Option<String>,
    /// `rollboot.dev/exclude` label: never rebooted.
    pub excluded: bool,
    /// Ready condition.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// Who cordoned it, when cordoned.
    pub cordoned_by: Option<CordonedBy>,
    /// The rollboot identity in `rollboot.dev/cordoned-by`.
    pub cordoned_by_identity: Option<String>,
    /// Listed in the maintenance lock.
    pub in_lock: bool,
    /// `rollboot.dev/failure-reason`.
    pub failure_reason: Option<String>,
    /// A failed node rollboot left cordoned: it takes one of `maxNodes`' slots (and of its
    /// group's) until an operator clears it or `failures.returnToService` uncordons it.
    pub holds_slot: bool,
    /// Another actor taking the node out of service (`otherMaintenance`): rollboot leaves it
    /// alone, and counts it against `maxNodes` while it is out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_maintenance: Option<String>,
    /// The `rollboot.dev/quarantined` label's cause: the drain was held and the node stays
    /// cordoned with its pods until `rollboot retry`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantined: Option<String>,
    /// A flagged node rollboot rebooted less than `nodes.minRebootInterval` ago: when it may
    /// start again (absent when it may now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resting_until: Option<DateTime<Utc>>,
    /// A waiting node the budget-aware pick passed over (`rollboot.dev/passed-over`): since
    /// when, for which budget and why, and when `concurrency.passOverFor` has it taken anyway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passed_over: Option<PassedOverStatus>,
    /// A FleetLock host (`rollboot.dev/fleetlock`): its id and group, its last request and
    /// answer, and whether the reboot of this cycle is handed to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleetlock: Option<FleetLockStatus>,
}

/// What rollboot knows of a FleetLock host.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetLockStatus {
    /// The host's FleetLock id.
    pub id: String,
    /// The group it asks under.
    pub group: String,
    /// Its last request: endpoint, when, and the answer (`ok` or the kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<crate::node::FleetLockRequest>,
    /// Its request flags the node now (asked, not given back).
    pub asking: bool,
    /// The reboot of this cycle is handed to the host (its `pre-reboot` is answered 200).
    pub holds_slot: bool,
}

/// A waiting node passed over for a budget with no room.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PassedOverStatus {
    /// The first pass over.
    pub since: DateTime<Utc>,
    /// The budget that held it last, `namespace/name`.
    pub budget: String,
    /// What was held, in a sentence.
    pub why: String,
    /// When it is taken anyway, room or not (`since` + `concurrency.passOverFor`).
    pub taken_anyway_from: DateTime<Utc>,
}

/// Counts over all nodes.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Nodes carrying a flag (in flight ones included).
    pub flagged: usize,
    /// Nodes in a cycle: an in-progress state, or listed in the lock.
    pub in_flight: usize,
    /// `state: done`.
    pub done: usize,
    /// `state: failed`.
    pub failed: usize,
    /// With the exclude label.
    pub excluded: usize,
}

/// The schedule at `now`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Maintenance {
    /// New maintenance may start now.
    pub allowed_now: bool,
    /// When the current opening ends (`None`: not open, or open without end).
    pub current_window_end: Option<DateTime<Utc>>,
    /// The next opening that starts after `now`.
    pub next_opening: Option<NextOpening>,
}

/// An opening; an unbounded end is `None`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NextOpening {
    /// First allowed instant.
    pub start: DateTime<Utc>,
    /// First instant after it; `None` when unbounded.
    pub end: Option<DateTime<Utc>>,
    /// Index of the configured window.
    pub window: usize,
}

/// Failed nodes against the limit.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailureCount {
    /// The failed nodes.
    pub failed: Vec<String>,
    /// `failures.maxFailures`.
    pub max_failures: u32,
    /// More failures than tolerated: nothing new starts until an operator clears one.
    pub halted: bool,
    /// The failed nodes rollboot left cordoned, each holding one of `maxNodes`' slots.
    pub holding_slots: Vec<String>,
    /// `failures.returnToService`: such a node is uncordoned once its host is up and Ready.
    pub return_to_service: bool,
}

fn bounded(t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    (t != DateTime::<Utc>::MAX_UTC && t != DateTime::<Utc>::MIN_UTC).then_some(t)
}

fn lease_name(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The leader Lease as read at `now` (also the operator controls' note on who acts).
pub(crate) fn leader(config: &Config, lease: Option<&Lease>, now: DateTime<Utc>) -> LeaderLease {
    let spec = lease.and_then(|l| l.spec.as_ref());
    let holder = spec
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty());
    let renew_time = spec
        .and_then(|s| s.renew_time.as_ref())
        .map(time::from_micro);
    let lease_duration_seconds = spec
        .and_then(|s| s.lease_duration_seconds)
        .map(i64::from)
        .unwrap_or_else(|| config.leader.lease_duration.as_millis() / 1000);
    let expired = match (&holder, renew_time) {
        (Some(_), Some(r)) => r + chrono::TimeDelta::seconds(lease_duration_seconds) <= now,
        _ => true,
    };
    LeaderLease {
        lease: lease_name(&config.leader.namespace, &config.leader.name),
        holder,
        renew_time,
        lease_duration_seconds,
        expired,
    }
}

fn flag_reason(n: &NodeView) -> Option<String> {
    let mut parts = Vec::new();
    if n.reboot_required {
        parts.push(
            n.reboot_required_reason
                .clone()
                .unwrap_or_else(|| "reboot-required".into()),
        );
    }
    if n.reboot_requested {
        parts.push(match &n.reboot_requested_reason {
            Some(r) => format!("requested: {r}"),
            None => "requested".into(),
        });
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Builds the report from what the cluster says at `now`.
pub fn build(config: &Config, snap: &ClusterState, now: DateTime<Utc>) -> Status {
    let record = LockRecord::from_lease(snap.lock.clone());
    let ours = crate::lock::lock_owner(config);
    let foreign = record.foreign_holder(&ours).map(str::to_string);
    let nodes = node_statuses(config, snap, &record.entries, now);
    let failures = failures(config, snap, &nodes);
    let blockers = blockers(config, snap, &record.entries, foreign.as_deref(), now);
    Status {
        now,
        leader: leader(config, snap.leader.as_ref(), now),
        lock: lock(config, snap, &record, ours, foreign.is_some(), now),
        nodes,
        history: history(snap),
        counts: counts(snap, &record.entries),
        maintenance: maintenance(config, now),
        failures,
        hosts: hosts(snap),
        blockers,
        not_checked: not_checked(config),
        unsafe_settings: unsafe_settings(config),
    }
}

/// What [`Status::unsafe_settings`] says of `config`.
pub fn unsafe_settings(config: &Config) -> Vec<String> {
    let mut v = Vec::new();
    if config
        .fleetlock
        .as_ref()
        .is_some_and(|f| !f.verify_client_address)
    {
        v.push(crate::config::FleetLock::UNVERIFIED.to_string());
    }
    v
}

/// The hosts as their agents wrote them: counted by how an unplanned shutdown would go, the
/// nodes where it would not be drained named, and the nodes whose agent reads another host.
fn hosts(snap: &ClusterState) -> Hosts {
    let mut h = Hosts::default();
    for n in &snap.nodes {
        let Some(a) = &n.agent_host else { continue };
        let state = a.shutdown_drain;
        *h.shutdown_drain.entry(state.as_str().into()).or_default() += 1;
        h.meaning
            .entry(state.as_str().into())
            .or_insert_with(|| state.meaning().into());
        if state != crate::node::ShutdownDrain::Ready {
            h.not_drainable.push(n.name.clone());
        }
        let seen = crate::agent::HostSeen {
            boot_id: Some(&a.boot_id),
            machine_id: a.machine_id.as_deref(),
            ..Default::default()
        };
        if let Err(why) = crate::agent::identity(n, seen) {
            h.mismatched.push(HostMismatch {
                node: n.name.clone(),
                why,
            });
        }
    }
    h.not_drainable.sort();
    h.mismatched.sort_by(|a, b| a.node.cmp(&b.node));
    h
}

/// The maintenance lock: its holder, whether that is rollboot, a pause, and each node it
/// records in flight as the Node reports it now.
fn lock(
    config: &Config,
    snap: &ClusterState,
    record: &LockRecord,
    ours: String,
    foreign: bool,
    now: DateTime<Utc>,
) -> LockLease {
    LockLease {
        lease: lease_name(&config.lock.namespace, &config.lock.name),
        holder: record.holder.clone(),
        rollboot_identity: ours,
        foreign,
        pause: record.pause.as_ref().map(|p| PauseStatus {
            by: p.by.clone(),
            at: p.at,
            reason: p.reason.clone(),
        }),
        in_flight: record
            .entries
            .iter()
            .map(|(name, e)| {
                let node = snap.nodes.iter().find(|n| n.name == *name);
                in_flight_entry(name, e, node, config, now)
            })
            .collect(),
    }
}

/// The nodes that are flagged, in flight (a state, or listed in the lock) or failed, by name.
fn node_statuses(
    config: &Config,
    snap: &ClusterState,
    entries: &BTreeMap<String, LockEntry>,
    now: DateTime<Utc>,
) -> Vec<NodeStatus> {
    let mut nodes: Vec<NodeStatus> = snap
        .nodes
        .iter()
        .filter(|n| {
            n.flagged()
                || n.state.is_some_and(|s| s != NodeState::Done)
                || entries.contains_key(&n.name)
                || (n.other_actor.is_some() && n.unschedulable)
        })
        .map(|n| NodeStatus {
            name: n.name.clone(),
            state: n.state,
            state_since: n.state_since,
            flagged: n.flagged(),
            flagged_at: n.flagged_at,
            flag_reason: flag_reason(n),
            excluded: n.excluded,
            ready: n.ready,
            cordoned: n.unschedulable,
            cordoned_by: n.unschedulable.then(|| {
                if n.cordoned_by.is_some() {
                    CordonedBy::Rollboot
                } else {
                    CordonedBy::Operator
                }
            }),
            cordoned_by_identity: n.cordoned_by.clone(),
            in_lock: entries.contains_key(&n.name),
            // A reason left behind when an operator cleared only `state` is not a failure.
            failure_reason: n
                .failure_reason
                .clone()
                .filter(|_| n.state == Some(NodeState::Failed)),
            holds_slot: decide::holds_a_slot(n) && !entries.contains_key(&n.name),
            other_maintenance: n.other_actor.clone(),
            quarantined: n.quarantined.clone(),
            resting_until: (n.flagged() && !entries.contains_key(&n.name))
                .then(|| decide::resting_until(n, config, now))
                .flatten(),
            passed_over: n
                .passed_over
                .as_ref()
                .filter(|_| decide::is_candidate(n, config) && !entries.contains_key(&n.name))
                .map(|p| PassedOverStatus {
                    since: p.since,
                    budget: p.budget.clone(),
                    why: p.why.clone(),
                    taken_anyway_from: p.since + config.concurrency.pass_over_for.to_chrono(),
                }),
            fleetlock: n.fleetlock.as_ref().map(|f| FleetLockStatus {
                id: f.id.clone(),
                group: f.group.clone(),
                last: f.last.clone(),
                asking: n.hands_off(),
                // A shutdown cycle's hand-off is the host's own shutdown, not this record's slot.
                holds_slot: !n.for_shutdown()
                    && entries.get(&n.name).is_some_and(|e| {
                        n.handed_off_at().is_some_and(|t| t >= e.since)
                            && n.boot_id_before
                                .as_deref()
                                .is_some_and(|b| !n.booted_since(b))
                    }),
            }),
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    nodes
}

/// Every node rollboot finished a cycle on, by name.
fn history(snap: &ClusterState) -> Vec<NodeHistory> {
    let mut history: Vec<NodeHistory> = snap
        .nodes
        .iter()
        .filter(|n| n.history != Default::default())
        .map(|n| NodeHistory {
            node: n.name.clone(),
            last_reboot: n.history.last_reboot,
            boot_id_before: n.history.boot_id_before.clone(),
            boot_id_after: n.history.boot_id_after.clone(),
            count: n.history.count,
            undrained: n.history.undrained_count,
            last_cycle: n.history.last_cycle.clone(),
        })
        .collect();
    history.sort_by(|a, b| a.node.cmp(&b.node));
    history
}

/// Counts over all nodes; in flight: an in-progress state, or listed in the lock.
fn counts(snap: &ClusterState, entries: &BTreeMap<String, LockEntry>) -> Counts {
    let with_state = |s: NodeState| snap.nodes.iter().filter(|n| n.state == Some(s)).count();
    let in_flight: BTreeSet<&str> = snap
        .nodes
        .iter()
        .filter(|n| n.state.is_some_and(NodeState::in_flight))
        .map(|n| n.name.as_str())
        .chain(entries.keys().map(String::as_str))
        .collect();
    Counts {
        nodes: snap.nodes.len(),
        flagged: snap.nodes.iter().filter(|n| n.flagged()).count(),
        in_flight: in_flight.len(),
        done: with_state(NodeState::Done),
        failed: with_state(NodeState::Failed),
        excluded: snap.nodes.iter().filter(|n| n.excluded).count(),
    }
}

/// The schedule at `now`: open or not, until when, and the next opening.
fn maintenance(config: &Config, now: DateTime<Utc>) -> Maintenance {
    let schedule = config.schedule();
    let allowed_now = schedule.is_allowed(now);
    Maintenance {
        allowed_now,
        current_window_end: if allowed_now {
            schedule.current_window_end(now).and_then(bounded)
        } else {
            None
        },
        next_opening: schedule.next_opening(now).map(|o| NextOpening {
            start: o.start,
            end: bounded(o.end),
            window: o.window,
        }),
    }
}

/// The failed nodes against `failures.maxFailures`, and those of `nodes` holding a slot.
fn failures(config: &Config, snap: &ClusterState, nodes: &[NodeStatus]) -> FailureCount {
    let mut failed: Vec<String> = snap
        .nodes
        .iter()
        .filter(|n| n.state == Some(NodeState::Failed))
        .map(|n| n.name.clone())
        .collect();
    failed.sort();
    FailureCount {
        halted: failed.len() > config.failures.max_failures as usize,
        failed,
        max_failures: config.failures.max_failures,
        holding_slots: nodes
            .iter()
            .filter(|n| n.holds_slot)
            .map(|n| n.name.clone())
            .collect(),
        return_to_service: config.failures.return_to_service,
    }
}

/// What keeps new reboots from starting now, as the controller decides it (no pods and no
/// Prometheus: see [`not_checked`]).
fn blockers(
    config: &Config,
    snap: &ClusterState,
    entries: &BTreeMap<String, LockEntry>,
    foreign: Option<&str>,
    now: DateTime<Utc>,
) -> Vec<String> {
    let every_node: Vec<&NodeView> = snap.nodes.iter().collect();
    let decide_snapshot = decide::Snapshot {
        maintained: &decide::NOT_MAINTAINED,
        headroom: None,
        nodes: &every_node,
        in_flight: entries,
        foreign_holder: foreign,
        blocking_pods: &[],
        now,
    };
    decide::blockers(&decide_snapshot, config, now)
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// The configured blockers this report does not evaluate.
fn not_checked(config: &Config) -> Vec<String> {
    let mut not_checked = Vec::new();
    if !config.blockers.pod_selectors.is_empty() {
        not_checked.push("blockers.podSelectors".to_string());
    }
    if config.blockers.prometheus.is_some() {
        not_checked.push("blockers.prometheus".to_string());
    }
    not_checked
}

/// What can go wrong reading the cluster.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {object} from the API server at {server}: {source}")]
pub struct FetchError {
    /// The API server's URL.
    pub server: String,
    /// What was being read.
    pub object: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

impl FetchError {
    /// The server answered 404: it does not serve that kind.
    pub fn is_not_found(&self) -> bool {
        matches!(&self.source, kube::Error::Api(s) if s.code == 404)
    }

    /// Wraps an API error met reading `object` from `server`.
    pub fn reading(
        server: &str,
        object: impl Into<String>,
    ) -> impl FnOnce(kube::Error) -> FetchError {
        let (server, object) = (server.to_string(), object.into());
        move |source| FetchError {
            server,
            object,
            source,
        }
    }
}

/// Reads the two Leases and every Node (paged), with gets and lists only.
pub async fn fetch(kube_config: kube::Config, config: &Config) -> Result<ClusterState, FetchError> {
    let server = kube_config.cluster_url.to_string();
    let client =
        kube::Client::try_from(kube_config).map_err(FetchError::reading(&server, "a client"))?;
    fetch_with(&client, &server, config).await
}

/// [`fetch`] over a client already made; `server` names the API server in errors.
pub async fn fetch_with(
    client: &kube::Client,
    server: &str,
    config: &Config,
) -> Result<ClusterState, FetchError> {
    let err = |object: String| FetchError::reading(server, object);
    let lease = |ns: &str, name: &str| {
        let api: Api<Lease> = Api::namespaced(client.clone(), ns);
        let object = format!("Lease {ns}/{name}");
        let name = name.to_string();
        let e = err(object);
        async move { api.get_opt(&name).await.map_err(e) }
    };
    let leader = lease(&config.leader.namespace, &config.leader.name).await?;
    let lock = lease(&config.lock.namespace, &config.lock.name).await?;
    let api: Api<Node> = Api::all(client.clone());
    let mut nodes = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.map_err(err("the Nodes".into()))?;
        nodes.extend(page.items.iter().map(NodeView::from_node));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => params = params.continue_token(&c),
            None => break,
        }
    }
    crate::node_maintenance::mark(client, &mut nodes).await;
    Ok(ClusterState {
        leader,
        lock,
        nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::fixtures::{annotate, node};
    use crate::node::{
        CORDONED_BY, EXCLUDE, FAILURE_REASON, REBOOT_REQUESTED, REBOOT_REQUIRED,
        REBOOT_REQUIRED_REASON, STATE, STATE_SINCE,
    };
    use crate::render::Render;
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    fn t(s: &str) -> DateTime<Utc> {
        time::parse_annotation(s).unwrap()
    }

    fn cfg(yaml: &str) -> Config {
        crate::config::parse_str(yaml).unwrap()
    }

    fn lease(holder: &str, renewed: &str, secs: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(time::micro(t(renewed))),
                lease_duration_seconds: Some(secs),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn world() -> Vec<NodeView> {
        let flagged = annotate(
            annotate(
                node("a-flagged", &[]),
                REBOOT_REQUIRED,
                "2026-01-01T00:00:00Z",
            ),
            REBOOT_REQUIRED_REASON,
            "/var/run/reboot-required",
        );
        let mut failed = annotate(
            annotate(
                annotate(node("b-failed", &[]), STATE, "failed"),
                STATE_SINCE,
                "2026-01-01T01:00:00Z",
            ),
            FAILURE_REASON,
            "drain timed out",
        );
        failed = annotate(failed, CORDONED_BY, "controller-0");
        failed
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        let mut by_operator = annotate(
            node("c-operator", &[]),
            REBOOT_REQUESTED,
            "2026-01-01T00:30:00Z",
        );
        by_operator
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        let excluded = annotate(
            node("d-excluded", &[(EXCLUDE, "true")]),
            REBOOT_REQUESTED,
            "2026-01-01T00:00:00Z",
        );
        let done = annotate(node("e-done", &[]), STATE, "done");
        let quiet = node("f-quiet", &[]);
        [flagged, failed, by_operator, excluded, done, quiet]
            .iter()
            .map(NodeView::from_node)
            .collect()
    }

    #[test]
    fn a_node_another_actor_takes_out_says_which_in_json_and_text() {
        let c = cfg("{}");
        let now = t("2026-01-01T02:00:00Z");
        let mut taken = NodeView::from_node(&annotate(
            node("a-taken", &[]),
            REBOOT_REQUIRED,
            "2026-01-01T00:00:00Z",
        ));
        taken.other_actor = Some("karpenter (taint karpenter.sh/disrupted)".into());
        let snap = ClusterState {
            leader: None,
            lock: None,
            nodes: vec![taken],
        };
        let s = build(&c, &snap, now);
        assert_eq!(
            s.nodes[0].other_maintenance.as_deref(),
            Some("karpenter (taint karpenter.sh/disrupted)")
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json["nodes"][0]["otherMaintenance"],
            "karpenter (taint karpenter.sh/disrupted)"
        );
        let txt = s.text();
        assert!(
            txt.contains("otherMaintenance: karpenter (taint karpenter.sh/disrupted)"),
            "{txt}"
        );
    }

    #[test]
    fn a_failed_node_halts_and_every_interesting_node_is_listed() {
        let c = cfg("leader: {leaseDuration: 15s}");
        let now = t("2026-01-01T02:00:00Z");
        let snap = ClusterState {
            leader: Some(lease("controller-1", "2026-01-01T01:59:55Z", 15)),
            lock: None,
            nodes: world(),
        };
        let s = build(&c, &snap, now);
        assert_eq!(s.leader.holder.as_deref(), Some("controller-1"));
        assert!(!s.leader.expired);
        assert_eq!(s.lock.holder, None);
        assert!(!s.lock.foreign);
        let names: Vec<_> = s.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a-flagged", "b-failed", "c-operator", "d-excluded"]);
        assert_eq!(
            s.nodes[0].flag_reason.as_deref(),
            Some("/var/run/reboot-required")
        );
        assert_eq!(
            s.nodes[1].failure_reason.as_deref(),
            Some("drain timed out")
        );
        assert_eq!(s.nodes[1].cordoned_by, Some(CordonedBy::Rollboot));
        assert_eq!(s.nodes[2].cordoned_by, Some(CordonedBy::Operator));
        assert_eq!(s.nodes[2].flag_reason.as_deref(), Some("requested"));
        assert_eq!(s.counts.flagged, 3);
        assert_eq!(s.counts.failed, 1);
        assert_eq!(s.counts.done, 1);
        assert_eq!(s.counts.excluded, 1);
        assert_eq!(s.counts.in_flight, 0);
        assert!(s.failures.halted);
        assert!(s.maintenance.allowed_now);
        assert!(
            s.blockers.iter().any(|b| b.contains("failed node")),
            "{:?}",
            s.blockers
        );
        let txt = s.text();
        assert!(txt.contains("rollout HALTED"), "{txt}");
        assert!(txt.contains("failure: drain timed out"), "{txt}");
    }

    #[test]
    fn a_fleetlock_host_says_its_last_request_and_whether_it_holds_its_slot() {
        let c = cfg("{}");
        let rec = r#"{"id":"abc","group":"workers","last":{"endpoint":"pre-reboot","at":"2026-01-01T01:59:00Z","answer":"ok"}}"#;
        let mut n = node("a", &[]);
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        for (k, v) in [
            (REBOOT_REQUESTED, "2026-01-01T01:00:00Z"),
            (
                crate::node::REBOOT_REQUESTED_REASON,
                crate::node::FLEETLOCK_REASON,
            ),
            (crate::node::FLEETLOCK, rec),
            (crate::node::STATE, "rebooting"),
            (crate::node::STATE_SINCE, "2026-01-01T01:30:00Z"),
            (crate::node::HANDED_OFF, "2026-01-01T01:30:00Z"),
            (crate::node::BOOT_ID_BEFORE, "boot-1"),
        ] {
            n = annotate(n, k, v);
        }
        let entry = LockEntry {
            group: None,
            state: NodeState::Cordoning,
            since: t("2026-01-01T01:10:00Z"),
            leader: "rollboot-0".into(),
        };
        let mut lock = lease("rollboot-0", "2026-01-01T01:59:00Z", 15);
        lock.metadata.annotations = Some(
            [(
                crate::lock::IN_FLIGHT.to_string(),
                serde_json::to_string(&BTreeMap::from([("a".to_string(), entry)])).unwrap(),
            )]
            .into(),
        );
        let snap = ClusterState {
            leader: None,
            lock: Some(lock),
            nodes: vec![NodeView::from_node(&n)],
        };
        let s = build(&c, &snap, t("2026-01-01T02:00:00Z"));
        let f = s.nodes[0].fleetlock.as_ref().expect("a FleetLock host");
        assert!(f.asking && f.holds_slot, "{f:?}");
        let txt = s.text();
        assert!(
            txt.contains("FleetLock host abc (group workers): holds its slot, reboots itself; last pre-reboot at 2026-01-01T01:59:00.000Z: ok"),
            "{txt}"
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["nodes"][0]["fleetlock"]["last"]["answer"], "ok");
        assert!(
            s.unsafe_settings.is_empty(),
            "FleetLock off: nothing to say"
        );
        // The client address check turned off is said, in text and JSON.
        let off = cfg("fleetlock: {listen: '0.0.0.0:8086', verifyClientAddress: false}");
        let s = build(&off, &snap, t("2026-01-01T02:00:00Z"));
        assert!(
            s.text()
                .contains("unsafe:       fleetlock.verifyClientAddress is false"),
            "{}",
            s.text()
        );
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["unsafeSettings"][0]
            .as_str()
            .unwrap()
            .contains("verifyClientAddress"));
        let on = cfg("fleetlock: {listen: '0.0.0.0:8086'}");
        assert!(build(&on, &snap, t("2026-01-01T02:00:00Z"))
            .unsafe_settings
            .is_empty());
    }

    #[test]
    fn a_waiting_node_passed_over_says_for_which_budget_and_until_when() {
        let c = cfg("concurrency: {maxNodes: 3, passOverFor: 15m}");
        let record = r#"{"since":"2026-01-01T01:50:00Z","budget":"apps/web","why":"budget apps/web allows 0 disruption(s) now"}"#;
        let waiting = annotate(
            annotate(node("a", &[]), REBOOT_REQUESTED, "2026-01-01T00:00:00Z"),
            crate::node::PASSED_OVER,
            record,
        );
        let snap = ClusterState {
            leader: None,
            lock: None,
            nodes: vec![NodeView::from_node(&waiting)],
        };
        let s = build(&c, &snap, t("2026-01-01T02:00:00Z"));
        let p = s.nodes[0].passed_over.as_ref().expect("passed over");
        assert_eq!(p.budget, "apps/web");
        assert_eq!(p.taken_anyway_from, t("2026-01-01T02:05:00Z"));
        let txt = s.text();
        assert!(
            txt.contains("passed over since 2026-01-01T01:50:00.000Z (budget apps/web allows 0 disruption(s) now): taken once it has room, or from 2026-01-01T02:05:00.000Z"),
            "{txt}"
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["nodes"][0]["passedOver"]["budget"], "apps/web");
    }

    #[test]
    fn a_node_in_flight_held_by_a_hook_says_which_and_until_when() {
        // Cordoned by rollboot at 00:00, its beforeDrain phase begun then (the record the
        // controller writes), the gate annotation not given.
        let c = cfg("hooks: {beforeDrain: {gates: [ops.example.com/ok], timeout: 30m}}");
        let started = t("2026-01-01T00:00:00Z");
        let mut n = node("a", &[]);
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        let n = annotate(n, crate::node::CORDONED_BY, "rollboot-0");
        let n = annotate(n, crate::node::STATE, "cordoning");
        let n = annotate(n, crate::node::STATE_SINCE, "2026-01-01T00:00:00.000Z");
        let view = NodeView::from_node(&n);
        let begun = crate::hooks::decide::begin_patch(
            crate::config::Phase::BeforeDrain,
            &c,
            &view,
            started,
        );
        let hooks = begun["metadata"]["annotations"][crate::node::HOOKS]
            .as_str()
            .unwrap()
            .to_string();
        let view = NodeView::from_node(&annotate(n, crate::node::HOOKS, &hooks));
        let entry = LockEntry {
            group: None,
            state: NodeState::Cordoning,
            since: started,
            leader: "rollboot-0".into(),
        };
        let mut lock = lease("rollboot-0", "2026-01-01T00:05:00Z", 15);
        lock.metadata.annotations = Some(
            [(
                crate::lock::IN_FLIGHT.to_string(),
                serde_json::to_string(&BTreeMap::from([("a".to_string(), entry)])).unwrap(),
            )]
            .into(),
        );
        let snap = ClusterState {
            leader: None,
            lock: Some(lock),
            nodes: vec![view],
        };
        let s = build(&c, &snap, t("2026-01-01T00:05:00Z"));
        let w = s.lock.in_flight[0]
            .waiting
            .as_ref()
            .expect("held by its gate");
        assert!(
            w.why.contains("hooks.beforeDrain") && w.why.contains("ops.example.com/ok"),
            "{}",
            w.why
        );
        assert_eq!(w.until, t("2026-01-01T00:30:00Z"));
        let txt = s.text();
        assert!(txt.contains("waiting: hooks.beforeDrain"), "{txt}");
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["lock"]["inFlight"][0]["waiting"]["why"].is_string());
    }

    #[test]
    fn a_failed_node_left_cordoned_by_rollboot_is_said_to_hold_a_slot() {
        let c = cfg("failures: {maxFailures: 2}");
        let now = t("2026-01-01T02:00:00Z");
        let snap = ClusterState {
            leader: None,
            lock: None,
            nodes: world(),
        };
        let s = build(&c, &snap, now);
        let held: Vec<(&str, bool)> = s
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.holds_slot))
            .collect();
        assert_eq!(
            held,
            [
                ("a-flagged", false),
                ("b-failed", true),
                ("c-operator", false),
                ("d-excluded", false)
            ]
        );
        assert_eq!(s.failures.holding_slots, ["b-failed"]);
        let txt = s.text();
        assert!(
            txt.contains(
                "1 failed node(s) left cordoned by rollboot hold a slot of maxNodes: b-failed"
            ) && txt.contains("holds a maxNodes slot"),
            "{txt}"
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["nodes"][1]["holdsSlot"], true);
        assert_eq!(json["failures"]["holdingSlots"][0], "b-failed");
        assert_eq!(json["failures"]["returnToService"], false);
    }

    #[test]
    fn a_failed_node_cleared_of_its_state_shows_no_old_failure() {
        let c = cfg("{}");
        let now = t("2026-01-01T02:00:00Z");
        // The operator removed `state` as the message said; `failure-reason` stayed behind.
        let mut nodes = world();
        let failed = nodes.iter_mut().find(|n| n.name == "b-failed").unwrap();
        failed.state = None;
        failed.reboot_requested = true;
        let snap = ClusterState {
            leader: None,
            lock: None,
            nodes,
        };
        let s = build(&c, &snap, now);
        let b = s.nodes.iter().find(|n| n.name == "b-failed").unwrap();
        assert_eq!(b.failure_reason, None);
        assert_eq!(s.counts.failed, 0);
        assert!(!s.failures.halted);
        assert!(!s.text().contains("drain timed out"), "{}", s.text());
    }

    #[test]
    fn a_foreign_lock_holder_reads_as_a_pause_and_a_stale_leader_as_expired() {
        let c = cfg("failures: {maxFailures: 1}");
        let now = t("2026-01-01T02:00:00Z");
        let snap = ClusterState {
            leader: Some(lease("controller-0", "2026-01-01T01:00:00Z", 15)),
            lock: Some(lease("ops-team", "2026-01-01T01:00:00Z", 15)),
            nodes: world(),
        };
        let s = build(&c, &snap, now);
        assert!(s.leader.expired);
        assert!(s.lock.foreign);
        assert!(!s.failures.halted);
        assert!(s.blockers.iter().any(|b| b.contains("held by `ops-team`")));
        assert!(s.text().contains("PAUSED"), "{}", s.text());
    }

    #[test]
    fn an_operators_pause_and_the_reboot_history_are_shown() {
        use crate::node::{
            LAST_BOOT_ID_AFTER, LAST_BOOT_ID_BEFORE, LAST_CYCLE, LAST_REBOOT, REBOOT_COUNT,
        };
        let c = cfg("{}");
        let now = t("2026-01-01T02:00:00Z");
        let paused =
            LockRecord::default().paused("alice", Some("kernel CVE"), t("2026-01-01T01:30:00Z"));
        let rebooted = [
            (LAST_REBOOT, "2026-01-01T01:00:00.000Z"),
            (LAST_BOOT_ID_BEFORE, "boot-1"),
            (LAST_BOOT_ID_AFTER, "boot-2"),
            (REBOOT_COUNT, "3"),
            (
                LAST_CYCLE,
                r#"{"drainSeconds":41.2,"rebootSeconds":95,"podExitSeconds":2.5}"#,
            ),
        ]
        .into_iter()
        .fold(node("g-rebooted", &[]), |n, (k, v)| annotate(n, k, v));
        let mut nodes = world();
        nodes.push(NodeView::from_node(&rebooted));
        let snap = ClusterState {
            leader: None,
            lock: Some(paused),
            nodes,
        };
        let s = build(&c, &snap, now);
        let p = s.lock.pause.as_ref().unwrap();
        assert_eq!(
            (p.by.as_str(), p.reason.as_deref()),
            ("alice", Some("kernel CVE"))
        );
        assert_eq!(p.at, Some(t("2026-01-01T01:30:00Z")));
        assert!(s.lock.foreign);
        assert_eq!(s.history.len(), 1);
        assert_eq!(s.history[0].node, "g-rebooted");
        assert_eq!(s.history[0].count, Some(3));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["lock"]["pause"]["by"], "alice");
        assert_eq!(json["lock"]["pause"]["reason"], "kernel CVE");
        assert_eq!(json["history"][0]["bootIdBefore"], "boot-1");
        assert_eq!(json["history"][0]["bootIdAfter"], "boot-2");
        assert_eq!(json["history"][0]["lastReboot"], "2026-01-01T01:00:00Z");
        assert_eq!(json["history"][0]["lastCycle"]["rebootSeconds"], 95.0);
        let txt = s.text();
        assert!(
            txt.contains(
                "lock:         PAUSED by alice since 2026-01-01T01:30:00Z (30m ago): kernel CVE"
            ),
            "{txt}"
        );
        assert!(
            txt.contains("the nodes in flight finish their cycle"),
            "{txt}"
        );
        let row = txt.lines().find(|l| l.starts_with("g-rebooted")).unwrap();
        assert_eq!(
            row.split_whitespace().collect::<Vec<_>>(),
            [
                "g-rebooted",
                "3",
                "2026-01-01T01:00:00Z",
                "boot-1",
                "->",
                "boot-2",
                "41.2s",
                "/",
                "95.0s",
                "/",
                "?",
                "(pods",
                "exit",
                "in",
                "2.5s)"
            ]
        );
    }

    #[test]
    fn a_blackout_closes_maintenance_and_names_the_next_opening() {
        let c = cfg("blackouts: [{from: '2026-01-01T00:00:00Z', to: '2026-01-01T06:00:00Z'}]");
        let s = build(&c, &ClusterState::default(), t("2026-01-01T02:00:00Z"));
        assert!(!s.maintenance.allowed_now);
        let o = s.maintenance.next_opening.unwrap();
        assert_eq!(o.start, t("2026-01-01T06:00:00Z"));
        assert_eq!(o.end, None);
        assert!(s.leader.expired && s.leader.holder.is_none());
    }

    #[test]
    fn the_hosts_say_how_an_unplanned_shutdown_would_go_and_which_agent_reads_another_host() {
        let host = |name: &str, boot: &str, drain: crate::node::ShutdownDrain| {
            let record = crate::node::AgentHost {
                boot_id: boot.into(),
                init_start: Some(7),
                machine_id: None,
                shutdown_drain: drain,
                inhibit_delay_seconds: Some(1020),
            };
            let mut v = NodeView::from_node(&annotate(
                node(name, &[]),
                crate::node::AGENT_HOST,
                &record.to_annotation(),
            ));
            v.boot_id = "boot-1".into();
            v
        };
        use crate::node::ShutdownDrain::{Kubelet, Ready};
        let snap = ClusterState {
            nodes: vec![
                host("n1", "boot-1", Ready),
                host("n2", "boot-1", Kubelet),
                host("n3", "kernel-boot", Ready),
                NodeView::from_node(&node("n4", &[])),
            ],
            ..Default::default()
        };
        let s = build(&cfg("{}"), &snap, t("2026-01-01T02:00:00Z"));
        assert_eq!(
            s.hosts.shutdown_drain,
            [("kubelet".to_string(), 1), ("ready".to_string(), 2)].into()
        );
        assert_eq!(s.hosts.not_drainable, ["n2"]);
        assert_eq!(s.hosts.mismatched.len(), 1);
        assert_eq!(s.hosts.mismatched[0].node, "n3");
        assert!(s.hosts.mismatched[0].why.contains("kernel-boot"));
        let text = s.text();
        assert!(
            text.contains("unplanned shutdowns: 1 kubelet, 2 ready")
                && text.contains("not drained first on: n2")
                && text.contains("kubelet's graceful node shutdown is on")
                && text.contains("host mismatch: n3: "),
            "{text}"
        );
    }
}
