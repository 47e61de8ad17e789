//! `rollboot plan`: what tonight's rollout would do, when, and what would block or fail it,
//! before anything happens.
//!
//! Owns the [`Plan`] built from a [`Cluster`] read (pure: the caller passes `now`): the nodes
//! that would be rebooted in the controller's order ([`decide::pick`], replayed by
//! [`schedule::predict`]), a drain preview per node with the drain's own per-pod rule
//! ([`drain::classify`]) and the budget checks the Eviction API would apply, the cluster-wide
//! blockers as the controller computes them ([`decide::blockers`]), each node's duration
//! estimate, and the report's text and JSON forms. The cluster read is [`read`]; it must never
//! write to the cluster, and this module must never do I/O at all.

pub mod read;
pub mod render;
pub mod schedule;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::config::{Config, Duration};
use crate::controller::decide::{self, Blocker};
use crate::drain::{self, Disposition, PodRef, Reason};
use crate::lock::LockRecord;
use crate::node::{NodeState, NodeView};

pub use schedule::Window;

/// A pod's termination grace period when its spec says none (the API server's default).
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

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

/// Where a part of an estimate comes from, and its figure: the operator's flag, the node's own
/// last cycle, the median of the nodes' last cycles, or the default.
#[derive(Clone, Debug)]
struct PartEstimate {
    seconds: i64,
    basis: String,
}

/// The cycles rollboot measured on this cluster ([`crate::node::LastCycle`] on each Node),
/// summarized for the estimates.
#[derive(Clone, Debug, Default)]
struct Measured {
    /// Nodes with a recorded last cycle.
    nodes: usize,
    /// Median reboot and gate seconds over the nodes that recorded them.
    reboot: Option<f64>,
    gate: Option<f64>,
}

impl Measured {
    fn of(nodes: &[NodeView]) -> Measured {
        let cycles: Vec<&crate::node::LastCycle> = nodes
            .iter()
            .filter_map(|n| n.history.last_cycle.as_ref())
            .collect();
        let median = |part: fn(&crate::node::LastCycle) -> Option<f64>| {
            crate::time::median(&mut cycles.iter().filter_map(|c| part(c)).collect())
        };
        Measured {
            nodes: cycles.len(),
            reboot: median(|c| c.reboot_seconds),
            gate: median(|c| c.gate_seconds),
        }
    }

    /// The estimate of one part for a node whose own last cycle measured `own` (at `when`):
    /// the flag, else its own figure, else the cluster's median, else `default`.
    fn part(
        &self,
        flag: Option<Duration>,
        flag_name: &str,
        own: Option<(f64, Option<DateTime<Utc>>)>,
        median: Option<f64>,
        default: Duration,
    ) -> PartEstimate {
        let whole = |s: f64| s.round() as i64;
        if let Some(d) = flag {
            return PartEstimate {
                seconds: d.as_millis() / 1000,
                basis: format!("{flag_name} {d}"),
            };
        }
        if let Some((secs, when)) = own {
            return PartEstimate {
                seconds: whole(secs),
                basis: match when {
                    Some(w) => format!(
                        "measured on its last cycle ({})",
                        w.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    ),
                    None => "measured on its last cycle".into(),
                },
            };
        }
        if let Some(m) = median {
            return PartEstimate {
                seconds: whole(m),
                basis: format!("the median of {} node(s)' last cycles", self.nodes),
            };
        }
        PartEstimate {
            seconds: default.as_millis() / 1000,
            basis: format!("the default {default} (no {flag_name}, no measured cycle)"),
        }
    }

    /// A node's reboot and gate estimates.
    fn reboot_and_gate(
        &self,
        node: Option<&NodeView>,
        opts: &Options,
    ) -> (PartEstimate, PartEstimate) {
        let own = |part: fn(&crate::node::LastCycle) -> Option<f64>| {
            let n = node?;
            let c = n.history.last_cycle.as_ref()?;
            Some((part(c)?, n.history.last_reboot))
        };
        (
            self.part(
                opts.reboot_time,
                "--reboot-time",
                own(|c| c.reboot_seconds),
                self.reboot,
                DEFAULT_REBOOT,
            ),
            self.part(
                opts.gate_time,
                "--gate-time",
                own(|c| c.gate_seconds),
                self.gate,
                DEFAULT_GATE,
            ),
        )
    }
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
    pub in_flight: Vec<InFlight>,
    /// Everything that would block the rollout or fail a node, then the warnings.
    pub problems: Vec<Problem>,
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
    pub outcome: Outcome,
    /// Its duration estimate.
    pub estimate: Estimate,
    /// When the controller would start it; `None` when it would not start.
    pub start: Option<DateTime<Utc>>,
    /// When its slot would be free again.
    pub end: Option<DateTime<Utc>>,
    /// The opening it would start in.
    pub window: Option<Window>,
    /// It would end after its opening closes (the controller lets it finish).
    pub overruns_window: bool,
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
pub enum Outcome {
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
pub struct InFlight {
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
pub enum Kind {
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
    /// `drain.forceDeleteAfterTimeout` would delete a pod around its budget.
    ForceDelete,
    /// A failed node rollboot left cordoned holds one of `maxNodes`' slots.
    FailedHoldsSlot,
    /// Alerts fire in Prometheus (`blockers.prometheus`).
    Alerts,
    /// Prometheus could not be asked from here (the controller, which asks it before each
    /// start, does not start while it cannot).
    AlertsUnknown,
}

impl Kind {
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
pub struct Problem {
    /// What it does.
    pub severity: Severity,
    /// What it is.
    pub kind: Kind,
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

impl Problem {
    fn new(severity: Severity, kind: Kind, message: String) -> Problem {
        Problem {
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

    fn on(mut self, node: &str, pod: &str) -> Problem {
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

/// Why a budget can never allow a disruption of its `pods` pods, if it cannot: `maxUnavailable`
/// 0 (or 0%), or `minAvailable` at or above the pods it selects (a percentage rounded up, as
/// the disruption controller does).
pub fn never_allows(b: &PodDisruptionBudget, pods: usize) -> Option<String> {
    let spec = b.spec.as_ref()?;
    let pods = pods as i64;
    let scaled = |v: &IntOrString| match v {
        IntOrString::Int(i) => Some(i64::from(*i)),
        IntOrString::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.trim().parse().ok()?;
            Some((pct * pods + 99) / 100)
        }
    };
    let text = |v: &IntOrString| match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    if let Some(m) = &spec.max_unavailable {
        if scaled(m) == Some(0) {
            return Some(format!("maxUnavailable is {}", text(m)));
        }
    }
    if let Some(m) = &spec.min_available {
        if scaled(m).is_some_and(|need| need >= pods) {
            return Some(format!(
                "minAvailable {} is at or above the {pods} pod(s) it selects",
                text(m)
            ));
        }
    }
    None
}

/// The drain preview of one node, before scheduling.
struct Preview {
    evict: Vec<PodPlan>,
    skip: Vec<Skipped>,
    refuse: Vec<Skipped>,
    problems: Vec<Problem>,
    estimate: Estimate,
    fails: bool,
}

#[allow(clippy::too_many_arguments)]
fn preview(
    node: &NodeView,
    pods: &[&Pod],
    budget_pods: &BTreeMap<String, usize>,
    budgets: &BTreeMap<&str, Vec<&PodDisruptionBudget>>,
    cluster: &Cluster,
    config: &Config,
    opts: &Options,
    measured: &Measured,
) -> Preview {
    let view = node;
    let node = view.name.as_str();
    let cfg = &config.drain;
    let mut evict = Vec::new();
    let mut skip = Vec::new();
    let mut refuse = Vec::new();
    let mut problems = Vec::new();
    let mut held = false;
    let mut longest: Option<(i64, String)> = None;
    for p in pods {
        let name = pod_name(p);
        let ds_exists = match (drain::controller_of(p), p.metadata.namespace.as_deref()) {
            (Some(("DaemonSet", ds)), Some(ns)) => cluster
                .daemon_sets
                .contains(&(ns.to_string(), ds.to_string())),
            _ => false,
        };
        match drain::classify(p, cfg, config.drain_pod_selector(), ds_exists) {
            Disposition::Skip(reason) => {
                if reason == Reason::OutsidePodSelector {
                    problems.push(
                        Problem::new(
                            Severity::Warns,
                            Kind::OutsidePodSelector,
                            format!(
                                "node {node}: pod {name} is {}: the drain leaves it, and it goes down with the reboot without an eviction (its budget is not asked)",
                                reason.text()
                            ),
                        )
                        .on(node, &name),
                    );
                }
                skip.push(Skipped { pod: name, reason });
            }
            Disposition::Refuse(reason) => {
                refuse.push(Skipped {
                    pod: name.clone(),
                    reason,
                });
                let kind = match reason {
                    Reason::Unreplicated => Kind::Unreplicated,
                    Reason::EmptyDir => Kind::EmptyDir,
                    _ => Kind::DaemonSet,
                };
                problems.push(
                    Problem::new(
                        Severity::Fails,
                        kind,
                        format!(
                            "node {node}: pod {name} {}: the drain fails at once",
                            match reason {
                                Reason::DaemonSetNotIgnored => format!("is a {}", reason.text()),
                                _ => reason.text().to_string(),
                            }
                        ),
                    )
                    .on(node, &name),
                );
            }
            Disposition::Evict => {
                let grace = cfg.grace_period.map_or_else(
                    || {
                        p.spec
                            .as_ref()
                            .and_then(|s| s.termination_grace_period_seconds)
                            .unwrap_or(DEFAULT_GRACE_SECONDS)
                    },
                    |g| g.as_millis() / 1000,
                );
                if longest.as_ref().is_none_or(|(g, _)| grace > *g) {
                    longest = Some((grace, name.clone()));
                }
                let ns = p.metadata.namespace.as_deref().unwrap_or_default();
                let pod_labels = labels(p);
                let covering: Vec<&PodDisruptionBudget> = budgets
                    .get(ns)
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|b| {
                        crate::selector::budget_may_select(
                            b.spec.as_ref().and_then(|s| s.selector.as_ref()),
                            &pod_labels,
                        )
                    })
                    .collect();
                let names: Vec<String> = covering.iter().map(|b| budget_name(b)).collect();
                // The Eviction API lets a completed pod go whatever its budgets say.
                let budget_problem = if terminal(p) {
                    None
                } else if covering.len() > 1 {
                    Some(Problem {
                        budgets: names.clone(),
                        ..Problem::new(
                            Severity::Fails,
                            Kind::OverlappingBudgets,
                            format!(
                                "node {node}: pod {name} is selected by {} budgets ({}): the Eviction API answers 500 to every eviction of it",
                                covering.len(),
                                names.join(", ")
                            ),
                        )
                        .on(node, &name)
                    })
                } else if let Some(b) = covering.first() {
                    let selects = budget_pods.get(&names[0]).copied().unwrap_or(0);
                    let allowed = b.status.as_ref().map(|s| s.disruptions_allowed);
                    if let Some(why) = never_allows(b, selects) {
                        Some(Problem {
                            budgets: names.clone(),
                            ..Problem::new(
                                Severity::Fails,
                                Kind::BudgetNeverAllows,
                                format!(
                                    "node {node}: pod {name} is protected by PodDisruptionBudget {} that can never allow a disruption ({why})",
                                    names[0]
                                ),
                            )
                            .on(node, &name)
                        })
                    } else if allowed == Some(0) {
                        Some(Problem {
                            budgets: names.clone(),
                            ..Problem::new(
                                Severity::Fails,
                                Kind::BudgetAllowsNoneNow,
                                format!(
                                    "node {node}: pod {name} is protected by PodDisruptionBudget {} that allows no disruption now (status.disruptionsAllowed 0): its eviction waits, and the drain fails at drain.timeout {} unless the budget recovers",
                                    names[0], cfg.timeout
                                ),
                            )
                            .on(node, &name)
                        })
                    } else {
                        None
                    }
                } else {
                    None
                };
                if let Some(mut problem) = budget_problem {
                    held = true;
                    if cfg.force_delete_after_timeout {
                        problem.severity = Severity::Warns;
                        problem.kind = Kind::ForceDelete;
                        problem.message = format!(
                            "{}; drain.forceDeleteAfterTimeout deletes it around the budget after {}",
                            problem.message, cfg.timeout
                        );
                    } else if problem.kind != Kind::BudgetAllowsNoneNow {
                        problem.message = format!(
                            "{}: the drain fails at drain.timeout {}",
                            problem.message, cfg.timeout
                        );
                    }
                    problems.push(problem);
                }
                evict.push(PodPlan {
                    pod: name,
                    grace_seconds: grace,
                    budgets: names,
                });
            }
        }
    }
    let timeout = cfg.timeout.as_millis() / 1000;
    let refused = !refuse.is_empty();
    let (drain_seconds, drain_basis) = if refused {
        (
            0,
            "the drain is refused at once (see the problems)".to_string(),
        )
    } else if held {
        (
            timeout,
            format!("drain.timeout {}: a budget holds an eviction", cfg.timeout),
        )
    } else {
        match &longest {
            None => (0, "no pod to evict".to_string()),
            Some((g, pod)) if *g > timeout => (
                timeout,
                format!(
                    "drain.timeout {} (pod {pod} has {g}s of grace)",
                    cfg.timeout
                ),
            ),
            Some((g, pod)) => (
                *g,
                if cfg.grace_period.is_some() {
                    format!("drain.gracePeriod {g}s")
                } else {
                    format!("the longest grace period of the pods to evict: {g}s (pod {pod})")
                },
            ),
        }
    };
    // A drain this node's last cycle measured replaces the grace-period rule: it counts what
    // the rule cannot see (budgets pacing the evictions, replacements starting, pods that exit
    // before their grace period ends). A drain predicted to be refused or held stays so.
    let (drain_seconds, drain_basis) = match (&view.history.last_cycle, refused || held) {
        (
            Some(crate::node::LastCycle {
                drain_seconds: Some(d),
                ..
            }),
            false,
        ) => (
            d.round() as i64,
            format!(
                "measured on its last cycle{} (the rule says {drain_seconds}s: {drain_basis})",
                view.history.last_reboot.map_or(String::new(), |w| format!(
                    " ({})",
                    w.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ))
            ),
        ),
        _ => (drain_seconds, drain_basis),
    };
    let fails = refused || (held && !cfg.force_delete_after_timeout);
    let (reboot, gate) = measured.reboot_and_gate(Some(view), opts);
    let (reboot_seconds, gate_seconds) = if fails {
        (0, 0)
    } else {
        (reboot.seconds, gate.seconds)
    };
    Preview {
        evict,
        skip,
        refuse,
        problems,
        estimate: Estimate {
            drain_seconds,
            drain_basis,
            reboot_seconds,
            reboot_basis: reboot.basis,
            gate_seconds,
            gate_basis: gate.basis,
            total_seconds: drain_seconds + reboot_seconds + gate_seconds,
        },
        fails,
    }
}

/// The cluster-wide blockers, as [`decide::blockers`] computes them (a closed window is not
/// one here: the schedule waits for the next opening), with the pods each blocking selector
/// matches.
fn cluster_blockers(
    cluster: &Cluster,
    record: &LockRecord,
    foreign: Option<&str>,
    config: &Config,
    now: DateTime<Utc>,
) -> Vec<Problem> {
    let matching: Vec<(String, Vec<String>)> = config
        .blockers
        .pod_selectors
        .iter()
        .zip(config.blocking_pod_selectors())
        .map(|(text, sel)| {
            let pods = cluster
                .pods
                .iter()
                .filter(|p| sel.matches(&labels(p)))
                .map(pod_name)
                .collect();
            (text.clone(), pods)
        })
        .collect();
    let counts: Vec<(String, usize)> = matching
        .iter()
        .map(|(s, pods)| (s.clone(), pods.len()))
        .collect();
    let nodes: Vec<&NodeView> = cluster.nodes.iter().collect();
    let snap = decide::Snapshot {
        nodes: &nodes,
        in_flight: &record.entries,
        foreign_holder: foreign,
        blocking_pods: &counts,
    };
    decide::blockers(&snap, config, now)
        .into_iter()
        .filter_map(|b| {
            let message = b.to_string();
            let p = |kind| Problem::new(Severity::Blocks, kind, message.clone());
            Some(match b {
                Blocker::WindowClosed => return None,
                Blocker::LockHeldBy(_) => p(Kind::LockHeld),
                Blocker::TooManyUnready { nodes, .. } => Problem {
                    nodes,
                    ..p(Kind::UnreadyNodes)
                },
                Blocker::TooManyFailures { nodes, .. } => Problem {
                    nodes,
                    ..p(Kind::FailedNodes)
                },
                Blocker::BlockingPods { selector, .. } => {
                    let pods = matching
                        .iter()
                        .find(|(s, _)| *s == selector)
                        .map(|(_, pods)| pods.clone())
                        .unwrap_or_default();
                    Problem {
                        message: format!(
                            "{} pod(s) match the blocking selector `{selector}`: {}",
                            pods.len(),
                            pods.join(", ")
                        ),
                        pods,
                        ..p(Kind::BlockingPods)
                    }
                }
                // Prometheus is asked by the read, not through the snapshot: see `alerts`.
                Blocker::Alerts { .. } | Blocker::AlertsUnknown { .. } => return None,
            })
        })
        .collect()
}

/// The problem Prometheus's answer makes, if any: firing alerts block (as the controller's
/// blocker says it), an unanswered query warns (from where the plan runs, an in-cluster
/// Prometheus is often out of reach; the controller does not start while it cannot ask).
fn alerts(answer: &Option<(String, Result<Vec<String>, String>)>) -> Option<Problem> {
    let (url, answer) = answer.as_ref()?;
    match answer {
        Ok(names) if names.is_empty() => None,
        Ok(names) => Some(Problem::new(
            Severity::Blocks,
            Kind::Alerts,
            Blocker::Alerts {
                names: names.clone(),
            }
            .to_string(),
        )),
        Err(error) => Some(Problem::new(
            Severity::Warns,
            Kind::AlertsUnknown,
            format!(
                "Prometheus at {url} could not be asked from here ({error}): the controller asks it before each start and starts nothing while it cannot; `rollboot plan --prometheus-url` asks another address (a port-forward)"
            ),
        )),
    }
}

/// One problem per failed node rollboot left cordoned ([`decide::holds_a_slot`]): it holds one
/// of `maxNodes`' slots (and of its group's). It blocks when nodes get no slot because of
/// them, else it warns.
fn slots_held(
    cluster: &Cluster,
    record: &LockRecord,
    config: &Config,
    predicted: &schedule::Schedule,
) -> Vec<Problem> {
    let starved: Vec<String> = predicted
        .unscheduled
        .iter()
        .filter(|(_, u)| **u == schedule::Unscheduled::SlotsHeld)
        .map(|(n, _)| n.clone())
        .collect();
    let severity = if starved.is_empty() {
        Severity::Warns
    } else {
        Severity::Blocks
    };
    let then = if config.failures.return_to_service {
        "failures.returnToService uncordons it once its host is up and Ready"
    } else {
        "until an operator clears it (or failures.returnToService)"
    };
    cluster
        .nodes
        .iter()
        .filter(|n| decide::holds_a_slot(n) && !record.entries.contains_key(&n.name))
        .map(|n| {
            let waiting = if starved.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} node(s) get no slot: {}",
                    starved.len(),
                    starved.join(", ")
                )
            };
            Problem {
                node: Some(n.name.clone()),
                nodes: starved.clone(),
                ..Problem::new(
                    severity,
                    Kind::FailedHoldsSlot,
                    format!(
                        "node {} failed ({}) and rollboot left it cordoned: it holds one of \
                         maxNodes' {} slot(s){}, {then}{waiting}",
                        n.name,
                        n.failure_reason.as_deref().unwrap_or("no reason recorded"),
                        config.concurrency.max_nodes,
                        match config.group_limit() {
                            Some((key, _)) => format!(
                                " and of its group's ({key}={})",
                                n.labels.get(key).map_or("", String::as_str)
                            ),
                            None => String::new(),
                        },
                    ),
                )
            }
        })
        .collect()
}

/// Builds the plan from what the cluster says at `now`.
pub fn build(cluster: &Cluster, config: &Config, opts: &Options, now: DateTime<Utc>) -> Plan {
    let record = LockRecord::from_lease(cluster.lock.clone());
    let ours = crate::lock::lock_owner(config);
    let foreign = record.foreign_holder(&ours).map(str::to_string);
    let mut problems = cluster_blockers(cluster, &record, foreign.as_deref(), config, now);
    problems.extend(alerts(&cluster.alerts));
    let assumes_blockers_cleared = problems.iter().any(|p| p.severity == Severity::Blocks);

    // The candidates, flagged as the controller needs them (`--all`: every selected node, as
    // though an operator had requested each).
    let candidates: Vec<NodeView> = cluster
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
        .collect();

    let mut pods_by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for p in &cluster.pods {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            pods_by_node.entry(n).or_default().push(p);
        }
    }
    // By namespace and name, whatever order the server listed them in.
    for pods in pods_by_node.values_mut() {
        pods.sort_by_key(|p| (p.metadata.namespace.clone(), p.metadata.name.clone()));
    }
    // How many live pods each budget selects (what `minAvailable` is weighed against).
    let mut by_namespace: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for p in &cluster.pods {
        if !terminal(p) && p.metadata.deletion_timestamp.is_none() {
            let ns = p.metadata.namespace.as_deref().unwrap_or_default();
            by_namespace.entry(ns).or_default().push(p);
        }
    }
    let budget_pods: BTreeMap<String, usize> = cluster
        .budgets
        .iter()
        .map(|b| {
            let ns = b.metadata.namespace.as_deref().unwrap_or_default();
            let sel = b.spec.as_ref().and_then(|s| s.selector.as_ref());
            let n = by_namespace.get(ns).map_or(0, |pods| {
                pods.iter()
                    .filter(|q| crate::selector::selector_matches(sel, &labels(q)))
                    .count()
            });
            (budget_name(b), n)
        })
        .collect();
    let mut budgets_by_ns: BTreeMap<&str, Vec<&PodDisruptionBudget>> = BTreeMap::new();
    for b in &cluster.budgets {
        let ns = b.metadata.namespace.as_deref().unwrap_or_default();
        budgets_by_ns.entry(ns).or_default().push(b);
    }
    let measured = Measured::of(&cluster.nodes);
    let (reboot_rule, gate_rule) = measured.reboot_and_gate(None, opts);
    let previews: BTreeMap<String, Preview> = candidates
        .iter()
        .chain(
            cluster
                .nodes
                .iter()
                .filter(|n| record.entries.contains_key(&n.name)),
        )
        .map(|n| {
            let pods = pods_by_node
                .get(n.name.as_str())
                .cloned()
                .unwrap_or_default();
            (
                n.name.clone(),
                preview(
                    n,
                    &pods,
                    &budget_pods,
                    &budgets_by_ns,
                    cluster,
                    config,
                    opts,
                    &measured,
                ),
            )
        })
        .collect();
    let job = |p: &Preview| schedule::Job {
        duration: TimeDelta::seconds(p.estimate.total_seconds),
        fails: p.fails,
    };
    let jobs: BTreeMap<String, schedule::Job> =
        previews.iter().map(|(n, p)| (n.clone(), job(p))).collect();
    let running: BTreeMap<String, schedule::Running> = record
        .entries
        .iter()
        .map(|(name, e)| {
            let job = jobs.get(name).copied().unwrap_or(schedule::Job {
                duration: TimeDelta::seconds(reboot_rule.seconds + gate_rule.seconds),
                fails: false,
            });
            (
                name.clone(),
                schedule::Running {
                    entry: e.clone(),
                    job,
                },
            )
        })
        .collect();
    let failed = cluster
        .nodes
        .iter()
        .filter(|n| n.state == Some(NodeState::Failed))
        .count();
    // With the cluster-wide blockers taken as cleared, a halted rollout resumes at the limit.
    let failed = failed.min(config.failures.max_failures as usize);
    // The failed nodes rollboot left cordoned hold their slots, unless the failures blocker is
    // taken as cleared above (an operator's `rollboot retry` uncordons them).
    let cleared = cluster
        .nodes
        .iter()
        .filter(|n| n.state == Some(NodeState::Failed))
        .count()
        > config.failures.max_failures as usize;
    let others: Vec<NodeView> = cluster
        .nodes
        .iter()
        .filter(|n| !(cleared && decide::holds_a_slot(n)))
        .cloned()
        .collect();
    let predicted = schedule::predict(&candidates, &running, &others, &jobs, failed, config, now);

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
                    None => Outcome::NotStarted,
                    Some(_) if p.fails => Outcome::Fails,
                    Some(_) => Outcome::Reboots,
                },
                estimate: p.estimate.clone(),
                start: slot.map(|s| s.start),
                end: slot.map(|s| s.end),
                window: slot.map(|s| s.window),
                overruns_window: slot.is_some_and(|s| s.overruns_window),
            }
        })
        .collect();
    // The controller's order: by start, then the order `pick` took them in; nodes that do not
    // start go last, in the order `pick` would take them.
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
        problems.extend(previews[&n.name].problems.iter().cloned());
    }
    if predicted
        .unscheduled
        .values()
        .any(|u| *u == schedule::Unscheduled::NoOpening)
    {
        let names: Vec<String> = predicted
            .unscheduled
            .iter()
            .filter(|(_, u)| **u == schedule::Unscheduled::NoOpening)
            .map(|(n, _)| n.clone())
            .collect();
        problems.push(Problem {
            nodes: names.clone(),
            ..Problem::new(
                Severity::Blocks,
                Kind::NoOpening,
                format!(
                    "no maintenance opening within the look-ahead horizon for {} node(s): {}",
                    names.len(),
                    names.join(", ")
                ),
            )
        });
    }
    problems.extend(slots_held(cluster, &record, config, &predicted));
    problems.sort_by_key(|p| p.severity);

    let in_flight = record
        .entries
        .iter()
        .map(|(name, e)| InFlight {
            node: name.clone(),
            since: e.since,
            estimated_end: predicted.in_flight_end.get(name).copied().unwrap_or(now),
        })
        .collect();
    let mut not_checked = Vec::new();
    if config.blockers.prometheus.is_some() && cluster.alerts.is_none() {
        not_checked.push(
            "blockers.prometheus (Prometheus was not asked; the controller asks it before each start)"
                .to_string(),
        );
    }
    let start = nodes.iter().filter_map(|n| n.start).min();
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
        nodes,
        in_flight,
        problems,
        rollout: Rollout {
            start,
            end: predicted.end,
            makespan_seconds: predicted.end.map(|e| (e - now).num_seconds()),
            halted_by: predicted.halted.map(|(node, at)| HaltedBy { node, at }),
            assumes_blockers_cleared,
        },
        not_checked,
    }
}

#[cfg(test)]
mod tests;
