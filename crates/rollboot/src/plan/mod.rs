//! `rollboot plan`: what tonight's rollout would do, when, and what would block or fail it,
//! before anything happens.
//!
//! Owns the [`Plan`] built from a [`Cluster`] read (pure: the caller passes `now`): the nodes
//! that would be rebooted in the controller's order ([`decide::pick`], replayed by
//! [`schedule::predict`]), a drain preview per node with the drain's own per-pod rule
//! ([`crate::drain::classify`]) and the budget checks the Eviction API would apply (`preview`),
//! the cluster-wide blockers as the controller computes them ([`decide::blockers`], in
//! `problems`), each node's duration estimate (`estimate`), and the report's text form
//! ([`render`]; its JSON form is its serialization). The cluster read is [`read`]; it must
//! never write to the cluster, and this module must never do I/O at all.

mod estimate;
mod preview;
mod problems;
pub(crate) use problems::blocking_pods;
pub mod read;
pub mod render;
pub mod schedule;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;

use crate::config::{Config, Duration};
use crate::controller::decide;
use crate::drain::{PodRef, Reason};
use crate::lock::LockRecord;
use crate::node::{NodeState, NodeView};

use estimate::Measured;
use preview::Preview;

pub use schedule::StartWindow;

/// A pod's termination grace period when its spec says none (the API server's default).
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// How long a step of a drain with volumes to detach is taken to wait for them when the node
/// has no measured cycle: a CSI detach (unmount, the attach-detach controller, the driver's
/// ControllerUnpublish) takes seconds to tens of seconds.
pub const DEFAULT_DETACH_SECONDS: i64 = 30;

/// What the cluster says, as read.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// The maintenance lock Lease, absent when it does not exist.
    pub lock: Option<Lease>,
    /// Every Node.
    pub nodes: Vec<NodeView>,
    /// Every Pod.
    pub pods: Vec<Pod>,
    /// Every PodDisruptionBudget.
    pub budgets: Vec<PodDisruptionBudget>,
    /// The DaemonSets that exist: (namespace, name).
    pub daemon_sets: BTreeSet<(String, String)>,
    /// What Prometheus answered for `blockers.prometheus` (the alerts that block, or why it
    /// could not be asked), with the URL asked; `None` when the config has no Prometheus.
    pub alerts: Option<(String, Result<Vec<String>, String>)>,
    /// Each bound claim (namespace, name): the PersistentVolume a drain would wait to see
    /// detached, or why it would not ([`crate::drain::volumes::Volume::of_pv`]).
    pub claims: BTreeMap<(String, String), Result<String, crate::drain::volumes::NotWaited>>,
    /// The labels of each namespace, read when a `drain.order` rule selects namespaces.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
}

/// How long a reboot is taken to last when neither `--reboot-time` nor a measured cycle says.
pub const DEFAULT_REBOOT: Duration = Duration::from_mins(5);
/// How long the health gate is taken to last when neither `--gate-time` nor a measured cycle
/// says.
pub const DEFAULT_GATE: Duration = Duration::from_mins(1);

/// The operator's choices for one plan.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Plan a rollout of every node the selector matches, not only the flagged ones.
    pub all: bool,
    /// How long a reboot takes, from the request until the node is back and Ready; `None`:
    /// as measured on the node's last cycle, else the median of the nodes' last cycles, else
    /// [`DEFAULT_REBOOT`].
    pub reboot_time: Option<Duration>,
    /// How long the health gate takes after the node is back (budgets healthy again); `None`:
    /// measured, as `reboot_time`, else [`DEFAULT_GATE`].
    pub gate_time: Option<Duration>,
}

/// The report, serialized as the `--output json` object.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// The instant the plan starts from.
    pub now: DateTime<Utc>,
    /// No problem of severity `blocks` or `fails`: the rollout would proceed (exit 0).
    pub proceeds: bool,
    /// Planned for every selected node (`--all`), not only the flagged ones.
    pub all: bool,
    /// How each node's duration is estimated.
    pub estimate: EstimateRules,
    /// The nodes to reboot, in the order the controller would start them.
    pub nodes: Vec<NodePlan>,
    /// Nodes in the maintenance lock now: they hold their slots until their estimate ends.
    pub in_flight: Vec<InFlightNow>,
    /// Everything that would block the rollout or fail a node, then the warnings.
    pub problems: Vec<PlanProblem>,
    /// The predicted end of the whole rollout, and what it assumes.
    pub rollout: Rollout,
    /// Configured blockers this plan does not evaluate.
    pub not_checked: Vec<String>,
}

/// How a node's duration is estimated: drain + reboot + health gate.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EstimateRules {
    /// `drain.timeout`: the drain estimate's cap, and the drain time of a node whose eviction a
    /// budget holds.
    pub drain_timeout_seconds: i64,
    /// `drain.gracePeriod`, which replaces every pod's own grace period when set.
    pub drain_grace_period_seconds: Option<i64>,
    /// A pod's grace period when its spec sets none.
    pub default_grace_seconds: i64,
    /// The reboot of a node without a measured cycle of its own: `--reboot-time`, else the
    /// median of the measured cycles, else the default (5m).
    pub reboot_seconds: i64,
    /// Where `rebootSeconds` comes from.
    pub reboot_basis: String,
    /// The health gate of a node without a measured cycle of its own, as `rebootSeconds`
    /// (default 1m).
    pub gate_seconds: i64,
    /// Where `gateSeconds` comes from.
    pub gate_basis: String,
    /// Nodes whose last cycle rollboot measured (`rollboot.dev/last-cycle`): their own
    /// figures are used unless a flag says otherwise.
    pub measured_nodes: usize,
}

/// One node to reboot.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePlan {
    /// Node name.
    pub name: String,
    /// Its place in the controller's order (1 first).
    pub order: usize,
    /// Its `concurrency.groupBy` label value; `None` without `groupBy` (or label).
    pub group: Option<String>,
    /// Flagged now (with `--all`, unflagged nodes are planned too).
    pub flagged: bool,
    /// The pods its drain would evict.
    pub evict: Vec<PodPlan>,
    /// The pods its drain would leave on the node, with why.
    pub skip: Vec<Skipped>,
    /// The pods its drain would refuse to evict, failing the node at once, with why.
    pub refuse: Vec<Skipped>,
    /// What is predicted: `reboots`, `fails`, or `notStarted`.
    pub outcome: PredictedOutcome,
    /// Its duration estimate.
    pub estimate: Estimate,
    /// When the controller would start it; `None` when it would not start.
    pub start: Option<DateTime<Utc>>,
    /// When its slot would be free again.
    pub end: Option<DateTime<Utc>>,
    /// The opening it would start in.
    pub window: Option<StartWindow>,
    /// It would end after its opening closes (the controller lets it finish).
    pub overruns_window: bool,
    /// Its drain's steps in order (`drain.order`, or the default order).
    pub steps: Vec<PlanStep>,
    /// The volumes its drain would wait to see detached.
    pub volumes: Vec<PlanVolume>,
    /// Rebooted by rollboot less than `nodes.minRebootInterval` ago: it starts no earlier
    /// than this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resting_until: Option<DateTime<Utc>>,
    /// The controller's budget-aware pick passed it over (its `rollboot.dev/passed-over`):
    /// since when, for which budget and why. The replay takes it in order: it does not
    /// predict budgets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passed_over: Option<crate::node::PassedOver>,
    /// A FleetLock host (`rollboot.dev/fleetlock`): its id, group and last request; its
    /// reboot is handed to it, not asked of the agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleetlock: Option<crate::node::FleetLockRecord>,
}

/// One step of a node's drain.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanStep {
    /// What the step is (`priority 0`, `volumes: ns/pod`, `order 10 drain.order[0]`).
    pub label: String,
    /// The pods evicted, `namespace/name`.
    pub evict: Vec<String>,
    /// The pods waited for until they end on their own (`waitCompleted`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub await_completion: Vec<String>,
}

/// A volume a node's drain would wait to see detached.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanVolume {
    /// The pod, `namespace/name`.
    pub pod: String,
    /// Its PersistentVolume.
    pub pv: String,
}

/// A pod the drain would evict.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodPlan {
    /// `namespace/name`.
    pub pod: String,
    /// The grace period it would be given, seconds.
    pub grace_seconds: i64,
    /// The budgets that may select it, `namespace/name`.
    pub budgets: Vec<String>,
}

/// A pod the drain would leave alone, or refuse to evict.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    /// `namespace/name`.
    pub pod: String,
    /// The drain's reason code.
    pub reason: Reason,
}

/// A node's predicted outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PredictedOutcome {
    /// Drained, rebooted, back through the health gate.
    Reboots,
    /// Its drain fails (see the problems naming it).
    Fails,
    /// The controller would not start it: the rollout halts first, or no opening comes.
    NotStarted,
}

/// One node's duration estimate, in parts.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    /// The drain.
    pub drain_seconds: i64,
    /// Where the drain figure comes from.
    pub drain_basis: String,
    /// The part of the drain spent waiting for volumes to detach.
    pub detach_seconds: i64,
    /// Where the detach figure comes from.
    pub detach_basis: String,
    /// The reboot (0 for a node predicted to fail).
    pub reboot_seconds: i64,
    /// Where the reboot figure comes from.
    pub reboot_basis: String,
    /// The health gate (0 for a node predicted to fail).
    pub gate_seconds: i64,
    /// Where the gate figure comes from.
    pub gate_basis: String,
    /// The sum: its slot's length.
    pub total_seconds: i64,
}

/// A node in the lock now.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InFlightNow {
    /// Node name.
    pub node: String,
    /// When it entered maintenance.
    pub since: DateTime<Utc>,
    /// When its slot is predicted to be free (its estimate from `since`, at the earliest now).
    pub estimated_end: DateTime<Utc>,
}

/// What a problem does to the rollout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Severity {
    /// Nothing new starts while it holds.
    Blocks,
    /// A node's drain fails (immediately, or at `drain.timeout`).
    Fails,
    /// The rollout proceeds, but an operator should know.
    Warns,
}

/// What kind of problem, as a stable code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ProblemKind {
    /// The maintenance lock is held by someone other than rollboot.
    LockHeld,
    /// More nodes outside maintenance are not Ready than `blockers.maxUnreadyNodes`.
    UnreadyNodes,
    /// More failed nodes than `failures.maxFailures`.
    FailedNodes,
    /// Pods match a `blockers.podSelectors` selector.
    BlockingPods,
    /// No maintenance opening within the look-ahead horizon.
    NoOpening,
    /// A pod with no controller, and `drain.evictUnreplicated` is false.
    Unreplicated,
    /// A pod with emptyDir data, and `drain.deleteEmptyDirData` is false.
    EmptyDir,
    /// A DaemonSet pod, and `drain.ignoreDaemonSets` is false.
    DaemonSet,
    /// A budget allows no disruption now (`status.disruptionsAllowed` 0).
    BudgetAllowsNoneNow,
    /// A budget can never allow a disruption (`minAvailable` at or above its pods,
    /// `maxUnavailable` 0).
    BudgetNeverAllows,
    /// More than one budget selects the pod: the Eviction API answers 500 to every eviction.
    OverlappingBudgets,
    /// A pod outside `drain.podSelector`: not evicted, it goes down with the reboot.
    OutsidePodSelector,
    /// A pod a `drain.order` rule says to skip: not evicted, it goes down with the reboot.
    OrderSkip,
    /// `drain.forceDeleteAfterTimeout` would delete a pod around its budget.
    ForceDelete,
    /// A failed node rollboot left cordoned holds one of `maxNodes`' slots.
    FailedHoldsSlot,
    /// Alerts fire in Prometheus (`blockers.prometheus`).
    Alerts,
    /// Prometheus could not be asked from here (the controller, which asks it before each
    /// start, does not start while it cannot).
    AlertsUnknown,
    /// Another actor takes the node out of service (the autoscaler, Karpenter,
    /// node-maintenance-operator, an out-of-service taint): rollboot leaves it alone, and it
    /// counts against `maxNodes` while it is out.
    OtherMaintenance,
    /// Nodes cordoned by someone else, not counted against `maxNodes` because
    /// `concurrency.countCordoned` is false.
    CordonedByOthers,
}

impl ProblemKind {
    /// The stable code, as in the JSON.
    pub fn code(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// One thing that would block the rollout, fail a node, or that an operator should know.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanProblem {
    /// What it does.
    pub severity: Severity,
    /// What it is.
    pub kind: ProblemKind,
    /// The node whose drain it concerns; `None` for a cluster-wide blocker.
    pub node: Option<String>,
    /// The pod, `namespace/name`.
    pub pod: Option<String>,
    /// The budgets involved, `namespace/name`.
    pub budgets: Vec<String>,
    /// The nodes involved in a cluster-wide blocker.
    pub nodes: Vec<String>,
    /// The pods involved in a cluster-wide blocker, `namespace/name`.
    pub pods: Vec<String>,
    /// The sentence a person reads.
    pub message: String,
}

impl PlanProblem {
    fn new(severity: Severity, kind: ProblemKind, message: String) -> PlanProblem {
        PlanProblem {
            severity,
            kind,
            node: None,
            pod: None,
            budgets: Vec::new(),
            nodes: Vec::new(),
            pods: Vec::new(),
            message,
        }
    }

    fn on(mut self, node: &str, pod: &str) -> PlanProblem {
        self.node = Some(node.to_string());
        self.pod = Some(pod.to_string());
        self
    }
}

/// The whole rollout's prediction.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// When the first node would start.
    pub start: Option<DateTime<Utc>>,
    /// When the last slot would be free: the predicted end of the rollout.
    pub end: Option<DateTime<Utc>>,
    /// `end - now`, seconds.
    pub makespan_seconds: Option<i64>,
    /// The node whose failure would halt the rollout, and when.
    pub halted_by: Option<HaltedBy>,
    /// The schedule supposes the cluster-wide blockers (severity `blocks`) cleared now.
    pub assumes_blockers_cleared: bool,
}

/// The failure that halts the rollout.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HaltedBy {
    /// The node.
    pub node: String,
    /// When it would fail.
    pub at: DateTime<Utc>,
}

fn pod_name(p: &Pod) -> String {
    PodRef::of(p).to_string()
}

fn labels(p: &Pod) -> BTreeMap<String, String> {
    p.metadata.labels.clone().unwrap_or_default()
}

fn terminal(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn budget_name(b: &PodDisruptionBudget) -> String {
    format!(
        "{}/{}",
        b.metadata.namespace.as_deref().unwrap_or_default(),
        b.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Builds the plan from what the cluster says at `now`.
pub fn build(cluster: &Cluster, config: &Config, opts: &Options, now: DateTime<Utc>) -> Plan {
    let record = LockRecord::from_lease(cluster.lock.clone());
    let ours = crate::lock::lock_owner(config);
    let foreign = record.foreign_holder(&ours).map(str::to_string);
    let mut problems =
        problems::cluster_blockers(cluster, &record, foreign.as_deref(), config, now);
    problems.extend(problems::alerts(&cluster.alerts));
    let assumes_blockers_cleared = problems.iter().any(|p| p.severity == Severity::Blocks);

    let candidates = candidates(cluster, &record, config, opts);
    let measured = Measured::of(&cluster.nodes);
    let (reboot_rule, gate_rule) = measured.reboot_and_gate(None, opts);
    let index = preview::Index::of(cluster);
    let previews: BTreeMap<String, Preview> = candidates
        .iter()
        .chain(
            cluster
                .nodes
                .iter()
                .filter(|n| record.entries.contains_key(&n.name)),
        )
        .map(|n| {
            let p = preview::preview(n, &index, cluster, config, opts, &measured);
            (n.name.clone(), p)
        })
        .collect();
    // A node in flight that is gone from the cluster holds its slot for a reboot and a gate.
    let gone = TimeDelta::seconds(reboot_rule.seconds + gate_rule.seconds);
    let predicted = predict(cluster, &candidates, &record, &previews, gone, config, now);
    let nodes = node_plans(cluster, &candidates, &previews, &predicted, config, now);
    for n in &nodes {
        problems.extend(previews[&n.name].problems.iter().cloned());
    }
    problems.extend(problems::no_opening(&predicted));
    problems.extend(problems::slots_held(cluster, &record, config, &predicted));
    problems.extend(problems::other_actors(cluster, &record, config));
    problems.sort_by_key(|p| p.severity);

    let mut not_checked = Vec::new();
    if config.blockers.prometheus.is_some() && cluster.alerts.is_none() {
        not_checked.push(
            "blockers.prometheus (Prometheus was not asked; the controller asks it before each start)"
                .to_string(),
        );
    }
    Plan {
        now,
        proceeds: !problems.iter().any(|p| p.severity != Severity::Warns),
        all: opts.all,
        estimate: EstimateRules {
            drain_timeout_seconds: config.drain.timeout.as_millis() / 1000,
            drain_grace_period_seconds: config.drain.grace_period.map(|g| g.as_millis() / 1000),
            default_grace_seconds: DEFAULT_GRACE_SECONDS,
            reboot_seconds: reboot_rule.seconds,
            reboot_basis: reboot_rule.basis,
            gate_seconds: gate_rule.seconds,
            gate_basis: gate_rule.basis,
            measured_nodes: measured.nodes,
        },
        in_flight: record
            .entries
            .iter()
            .map(|(name, e)| InFlightNow {
                node: name.clone(),
                since: e.since,
                estimated_end: predicted.in_flight_end.get(name).copied().unwrap_or(now),
            })
            .collect(),
        problems,
        rollout: Rollout {
            start: nodes.iter().filter_map(|n| n.start).min(),
            end: predicted.end,
            makespan_seconds: predicted.end.map(|e| (e - now).num_seconds()),
            halted_by: predicted.halted.map(|(node, at)| HaltedBy { node, at }),
            assumes_blockers_cleared,
        },
        nodes,
        not_checked,
    }
}

/// The nodes to reboot, flagged as the controller needs them (`--all`: every selected node,
/// as though an operator had requested each); the nodes in the lock are not among them.
fn candidates(
    cluster: &Cluster,
    record: &LockRecord,
    config: &Config,
    opts: &Options,
) -> Vec<NodeView> {
    cluster
        .nodes
        .iter()
        .filter(|n| !record.entries.contains_key(&n.name))
        .filter(|n| opts.all || n.flagged())
        .map(|n| {
            let mut v = n.clone();
            if !v.flagged() {
                v.reboot_requested = true;
            }
            v
        })
        .filter(|n| decide::is_candidate(n, config))
        .collect()
}

/// The schedule the controller would follow ([`schedule::predict`]) with each node's
/// estimate, the nodes in the lock running from their start (`gone`: one that no longer
/// exists), and the cluster-wide blockers taken as cleared now.
fn predict(
    cluster: &Cluster,
    candidates: &[NodeView],
    record: &LockRecord,
    previews: &BTreeMap<String, Preview>,
    gone: TimeDelta,
    config: &Config,
    now: DateTime<Utc>,
) -> schedule::RolloutSchedule {
    let jobs: BTreeMap<String, schedule::Job> = previews
        .iter()
        .map(|(n, p)| {
            let job = schedule::Job {
                duration: TimeDelta::seconds(p.estimate.total_seconds),
                fails: p.fails,
            };
            (n.clone(), job)
        })
        .collect();
    let running: BTreeMap<String, schedule::Running> = record
        .entries
        .iter()
        .map(|(name, e)| {
            let job = jobs.get(name).copied().unwrap_or(schedule::Job {
                duration: gone,
                fails: false,
            });
            let entry = e.clone();
            (name.clone(), schedule::Running { entry, job })
        })
        .collect();
    let failed = cluster
        .nodes
        .iter()
        .filter(|n| n.state == Some(NodeState::Failed))
        .count();
    let max_failures = config.failures.max_failures as usize;
    // The failed nodes rollboot left cordoned hold their slots, unless the failures blocker is
    // taken as cleared (an operator's `rollboot retry` uncordons them).
    let cleared = failed > max_failures;
    let others: Vec<NodeView> = cluster
        .nodes
        .iter()
        .filter(|n| !(cleared && decide::holds_a_slot(n)))
        .cloned()
        .collect();
    // With the cluster-wide blockers taken as cleared, a halted rollout resumes at the limit.
    let failed = failed.min(max_failures);
    schedule::predict(candidates, &running, &others, &jobs, failed, config, now)
}

/// Each candidate's plan, in the controller's order: by start, then the order `pick` takes
/// them in; nodes that do not start go last, in the order `pick` would take them.
fn node_plans(
    cluster: &Cluster,
    candidates: &[NodeView],
    previews: &BTreeMap<String, Preview>,
    predicted: &schedule::RolloutSchedule,
    config: &Config,
    now: DateTime<Utc>,
) -> Vec<NodePlan> {
    let mut nodes: Vec<NodePlan> = candidates
        .iter()
        .map(|n| {
            let p = &previews[&n.name];
            let slot = predicted.slots.get(&n.name);
            NodePlan {
                name: n.name.clone(),
                order: 0,
                group: config
                    .group_limit()
                    .and_then(|(key, _)| n.labels.get(key).cloned()),
                flagged: cluster
                    .nodes
                    .iter()
                    .any(|c| c.name == n.name && c.flagged()),
                evict: p.evict.clone(),
                skip: p.skip.clone(),
                refuse: p.refuse.clone(),
                outcome: match slot {
                    None => PredictedOutcome::NotStarted,
                    Some(_) if p.fails => PredictedOutcome::Fails,
                    Some(_) => PredictedOutcome::Reboots,
                },
                estimate: p.estimate.clone(),
                start: slot.map(|s| s.start),
                end: slot.map(|s| s.end),
                window: slot.map(|s| s.window),
                overruns_window: slot.is_some_and(|s| s.overruns_window),
                steps: p.steps.clone(),
                volumes: p.volumes.clone(),
                resting_until: decide::resting_until(n, config, now),
                passed_over: n.passed_over.clone(),
                fleetlock: n.fleetlock.clone(),
            }
        })
        .collect();
    let pick_order: BTreeMap<String, usize> = {
        let mut order: Vec<&NodeView> = candidates.iter().collect();
        decide::sort_candidates(&mut order, config.nodes.order);
        order
            .into_iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect()
    };
    nodes.sort_by_key(|n| (n.start.is_none(), n.start, pick_order.get(&n.name).copied()));
    for (i, n) in nodes.iter_mut().enumerate() {
        n.order = i + 1;
    }
    nodes
}

#[cfg(test)]
mod tests;
