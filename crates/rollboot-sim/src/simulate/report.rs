//! The verdict and report of a simulated rollout: when a run is decided (finished, halted by
//! `failures.maxFailures`, or stuck past its bound), what the invariant watch recorded, and the
//! figures (makespan against its bound, overhead, API requests).
//!
//! Owns [`Report`], its text form, the pure [`decided`] and the list of invariant breaks. It
//! must never act on the cluster: it reads the harness's records after (or during) the run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::rehearse::Rehearsal;
use super::Harness;
use crate::sim::fault_schedule::{FaultSchedule, Played};
use crate::sim::Scenario;
use rollboot::config::{BlockCause, BlockPolicy, Config};
use rollboot::node::{NodeState, NodeView};
use rollboot::render::Render;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Every flagged node is done (rebooted, uncordoned) or failed, and none is in flight.
    Finished,
    /// More nodes failed than `failures.maxFailures` allows, and none is in flight: the
    /// controller starts no more.
    Halted,
    /// Neither, past the run's bound.
    Stuck,
    /// A node's drain can never finish (a budget that can never allow a disruption holds one
    /// of its pods) and its failure will halt the rollout: decided at once instead of at the
    /// drain's timeout.
    Blocked,
}

impl Outcome {
    /// The name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Finished => "finished",
            Outcome::Halted => "halted",
            Outcome::Stuck => "stuck",
            Outcome::Blocked => "blocked",
        }
    }
}

/// Whether the run is decided now, and the sentence saying how: pure. `pending` are the hosts
/// whose sentinel still asks for a reboot; `rebooted` those that rebooted at least once. A
/// node whose Node object was registered afresh after its host rebooted (no rollboot state at
/// all) has nothing left to do: the cycle's record went with the old object.
pub fn decided(
    nodes: &[NodeView],
    flagged: &BTreeSet<String>,
    pending: &BTreeSet<String>,
    rebooted: &BTreeSet<String>,
    max_failures: u32,
) -> Option<(Outcome, String)> {
    if nodes
        .iter()
        .any(|n| n.state.is_some_and(NodeState::in_flight))
    {
        return None;
    }
    let failed: Vec<&str> = nodes
        .iter()
        .filter(|n| n.state == Some(NodeState::Failed))
        .map(|n| n.name.as_str())
        .collect();
    let by_name: BTreeMap<&str, &NodeView> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let done = |name: &str| {
        by_name
            .get(name)
            .is_some_and(|n| node_done(n, pending, rebooted))
    };
    let waiting: Vec<&str> = flagged
        .iter()
        .map(String::as_str)
        .filter(|n| !done(n) && !failed.contains(n))
        .collect();
    if waiting.is_empty() {
        let why = if failed.is_empty() {
            format!("every flagged node ({}) rebooted", flagged.len())
        } else {
            format!(
                "every flagged node rebooted or failed: {} failed ({}), failures.maxFailures {max_failures}",
                failed.len(),
                failed.join(", ")
            )
        };
        return Some((Outcome::Finished, why));
    }
    let why: Vec<String> = failed
        .iter()
        .map(|n| {
            let reason = by_name
                .get(n)
                .and_then(|v| v.failure_reason.clone())
                .unwrap_or_else(|| "no reason recorded".into());
            format!("{n}: {reason}")
        })
        .collect();
    (failed.len() > max_failures as usize).then(|| {
        (
            Outcome::Halted,
            format!(
                "halted: {} node(s) failed ({}), more than failures.maxFailures {max_failures}; {} flagged node(s) not rebooted ({}). Why: {}",
                failed.len(),
                failed.join(", "),
                waiting.len(),
                waiting.join(", "),
                why.join("; ")
            ),
        )
    })
}

/// Whether the run is decided because the failed nodes rollboot left cordoned hold every slot
/// a waiting node could take ([`rollboot::controller::decide::holds_a_slot`]), for good: none of
/// them will be returned to service (`failures.returnToService` off, or their hosts down).
/// Nothing may be in flight. Decided as [`Outcome::Halted`]: nothing starts until an operator
/// clears one. Pure.
pub fn held_for_good(
    nodes: &[NodeView],
    flagged: &BTreeSet<String>,
    config: &Config,
) -> Option<(Outcome, String)> {
    use rollboot::controller::decide;
    if nodes
        .iter()
        .any(|n| n.state.is_some_and(NodeState::in_flight))
    {
        return None;
    }
    let holders: Vec<&NodeView> = nodes.iter().filter(|n| decide::holds_a_slot(n)).collect();
    let none = BTreeMap::new();
    if holders.is_empty() || !decide::returning_to_service(&holders, &none, config).is_empty() {
        return None;
    }
    let waiting: Vec<&NodeView> = nodes
        .iter()
        .filter(|n| flagged.contains(&n.name) && decide::is_candidate(n, config))
        .collect();
    let every: Vec<&NodeView> = nodes.iter().collect();
    let now = chrono::Utc::now();
    // A node resting (nodes.minRebootInterval) is not held for good: it starts later.
    if waiting
        .iter()
        .any(|n| decide::resting_until(n, config, now).is_some())
    {
        return None;
    }
    let snap = decide::Snapshot {
        maintained: &decide::NOT_MAINTAINED,
        headroom: None,
        nodes: &every,
        in_flight: &none,
        foreign_holder: None,
        blocking_pods: &[],
        now,
    };
    if waiting.is_empty() || !decide::pick(&snap, config).is_empty() {
        return None;
    }
    let names = |ns: &[&NodeView]| {
        ns.iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some((
        Outcome::Halted,
        format!(
            "halted: the failed node(s) rollboot left cordoned ({}) hold every slot (maxNodes {}{}) \
             the {} waiting node(s) could take ({}); nothing starts until an operator clears one",
            names(&holders),
            config.concurrency.max_nodes,
            config
                .group_limit()
                .map(|(k, m)| format!(", {m} per {k}"))
                .unwrap_or_default(),
            waiting.len(),
            names(&waiting)
        ),
    ))
}

/// A budget holding an eviction, as the rehearsal sees it: `namespace/name`, the pod it holds,
/// its spec and how many pods it selects (`status.expectedPods`).
pub struct HeldBy {
    /// `namespace/name` of the budget.
    pub budget: String,
    /// `namespace/name` of the pod whose eviction it refuses now.
    pub pod: String,
    /// The node that pod runs on.
    pub node: String,
    /// The budget as read.
    pub pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget,
}

/// Whether the run can be decided now because a drain can never finish: a budget holding a
/// pod of an in-flight node can never allow a disruption ([`rollboot::plan::never_allows`], as
/// `rollboot plan` says it), the drain waits for it (`drain.whenBlocked.never: wait`; with
/// `fail` the drain fails the node itself at the first refusal) and does not delete around
/// budgets after its timeout, and that node's failure will halt the rollout (`failed` nodes
/// already, `max_failures`). Pure.
pub fn blocked_for_good(
    held: &[HeldBy],
    config: &rollboot::config::Config,
    failed: usize,
) -> Option<(Outcome, String)> {
    let d = &config.drain;
    if d.force_delete_after_timeout
        || d.when_blocked.policy(BlockCause::Never, false) == BlockPolicy::Fail
        || failed < config.failures.max_failures as usize
    {
        return None;
    }
    held.iter().find_map(|h| {
        let pods = h
            .pdb
            .status
            .as_ref()
            .map_or(0, |s| s.expected_pods.max(0) as usize);
        let why = rollboot::budgets::never_allows(&h.pdb, pods)?;
        Some((
            Outcome::Blocked,
            format!(
                "blocked: PodDisruptionBudget {} can never allow a disruption ({why}) and holds pod {} on node {}: its drain fails at drain.timeout {} and the failure halts the rollout (failures.maxFailures {}); decided now rather than then",
                h.budget, h.pod, h.node, config.drain.timeout, config.failures.max_failures
            ),
        ))
    })
}

/// A flagged node whose cycle is over: `done` (or a Node registered afresh after its host
/// rebooted, see [`decided`]), unflagged, uncordoned, and its host's sentinel quiet.
fn node_done(n: &NodeView, pending: &BTreeSet<String>, rebooted: &BTreeSet<String>) -> bool {
    (n.state == Some(NodeState::Done) || (n.state.is_none() && rebooted.contains(&n.name)))
        && !n.flagged()
        && !n.unschedulable
        && !pending.contains(&n.name)
}

/// Why a run is stuck: each flagged node neither done (as [`decided`] counts it) nor failed,
/// with its state.
pub fn stuck_reason(
    nodes: &[NodeView],
    flagged: &BTreeSet<String>,
    pending: &BTreeSet<String>,
    rebooted: &BTreeSet<String>,
    bound: &Bound,
) -> String {
    let by_name: BTreeMap<&str, &NodeView> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut left = Vec::new();
    for f in flagged {
        match by_name.get(f.as_str()) {
            None => left.push(format!("{f} (no Node object)")),
            Some(n) if node_done(n, pending, rebooted) => {}
            Some(n) if n.state == Some(NodeState::Failed) => {}
            Some(n) => left.push(format!(
                "{f} ({}{}{})",
                n.state.map(|s| s.as_str()).unwrap_or("not started"),
                if n.flagged() { ", flagged" } else { "" },
                if n.unschedulable { ", cordoned" } else { "" },
            )),
        }
    }
    format!(
        "stuck: not decided {:.1} s after {} (bound {}); still waiting: {}",
        bound.seconds,
        bound.from,
        bound.how,
        left.join(", ")
    )
}

/// How long a run may take, from the start or from the end of its faults, before it is called
/// stuck.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Bound {
    /// Seconds.
    pub seconds: f64,
    /// From when: `the start` or `the faults stopped`.
    pub from: String,
    /// What it is made of.
    pub how: String,
}

impl Bound {
    /// Twice the nodes' irreducible time at `maxNodes`, plus two leader leases (a failover),
    /// one drain, reboot (or `readyWithoutRebootFor`, when longer) and health-gate timeout each
    /// (a node failing late), a minute when
    /// windows are configured (the wait for the next opening), and 10 s.
    pub fn new(scenario: &Scenario, config: &Config, flagged: usize, after_faults: bool) -> Bound {
        let per_node = per_node_seconds(scenario, scenario.grace_seconds as f64)
            + scenario.scaled(scenario.start_delay).as_secs_f64();
        let max_nodes = config.concurrency.max_nodes.max(1) as f64;
        let nodes = 2.0 * flagged as f64 * per_node / max_nodes;
        let lease = 2.0 * config.leader.lease_duration.to_std().as_secs_f64();
        // A host that gave its slot back holds it until it has stayed up for
        // `readyWithoutRebootFor`, which may be longer than the reboot timeout.
        let timeouts = config.drain.timeout.to_std().as_secs_f64()
            + config.reboot.timeout.to_std().as_secs_f64().max(
                config
                    .reboot
                    .ready_without_reboot_for
                    .to_std()
                    .as_secs_f64(),
            )
            + config.health_gate.timeout.to_std().as_secs_f64();
        let windows = if config.windows.is_some() { 60.0 } else { 0.0 };
        Bound {
            seconds: nodes + lease + timeouts + windows + 10.0,
            from: if after_faults {
                "the faults stopped".into()
            } else {
                "the start".into()
            },
            how: format!(
                "2 x {flagged} node(s) x {per_node:.2} s / maxNodes {max_nodes} + 2 leader leases {lease:.0} s + drain, reboot and health-gate timeouts {timeouts:.0} s{} + 10 s",
                if windows > 0.0 { " + 60 s for a window to open" } else { "" }
            ),
        }
    }
}

/// The irreducible simulated time of one node, in real seconds: the termination of its pods
/// (`grace`: the longest grace period among the pods its drain evicts, 0 when there are none),
/// the reboot, and the node-lifecycle controller's taint removal (a node is back only once its
/// not-ready taint is off).
pub fn per_node_seconds(scenario: &Scenario, grace: f64) -> f64 {
    scenario
        .scaled(grace + scenario.reboot_delay + scenario.reboot_time + scenario.taint_removal_delay)
        .as_secs_f64()
}

/// The faults of a run: the schedule and what became of it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultsPlayed {
    /// The schedule (`faults:` of a scenario file takes it as is: a replay).
    pub schedule: FaultSchedule,
    /// What became of each fault, in the schedule's order.
    pub played: Vec<Played>,
    /// Nodes a host fault acted on: their failure is expected.
    pub host_fault_nodes: Vec<String>,
}

/// The final report of a simulated rollout.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// How the run ended.
    pub outcome: Outcome,
    /// The sentence saying how (for `stuck`: every node it waited for).
    pub outcome_reason: String,
    /// The bound past which the run is called stuck.
    pub bound: Bound,
    /// Nodes in the world.
    pub nodes: usize,
    /// Nodes flagged.
    pub flagged: usize,
    /// Flagged nodes rebooted exactly once.
    pub rebooted_once: usize,
    /// Nodes rebooted more than once (must be empty).
    pub rebooted_twice: Vec<String>,
    /// Flagged nodes not rebooted.
    pub not_rebooted: Vec<String>,
    /// Nodes that failed.
    pub failed: Vec<String>,
    /// Seconds from flagging to the run being decided.
    pub makespan_seconds: f64,
    /// The sum of the flagged nodes' irreducible times (the termination of the pods each drain
    /// evicts, the reboot, readiness), divided by `maxNodes`: the makespan with no coordination
    /// cost and perfect packing; or, when larger, the budgets' term (see [`LowerBound`]).
    pub lower_bound_seconds: f64,
    /// The bound's two terms, and which binds.
    pub lower_bound: LowerBound,
    /// (makespan - bound) x maxNodes / flagged nodes, milliseconds: the coordination time each
    /// node's cycle adds to its slot (with maxNodes 1: to the rollout). Absent unless the run
    /// finished with every flagged node rebooted (the bound counts them all).
    pub overhead_per_node_ms: Option<f64>,
    /// With maxNodes 1, the median over the flagged nodes of each node's overhead,
    /// milliseconds: the time between consecutive completions (the first from the flagging)
    /// minus that node's irreducible time. Its mean is `overhead_per_node_ms`. Absent with
    /// maxNodes > 1, where completions interleave, and when the run did not finish with every
    /// flagged node rebooted.
    pub overhead_per_node_median_ms: Option<f64>,
    /// CPU seconds the whole process (simulated cluster, controllers, agents) used from the
    /// flagging to the decision, user and system: the rollout's cost without the world's
    /// set-up before it. Absent where the process's CPU time could not be read.
    pub rollout_cpu_seconds: Option<f64>,
    /// How the simulated API server's store lock was used from the flagging to the decision:
    /// every write and most reads take it, so a share held near 1 says the simulator is
    /// serialized on it, and its waits are cores left idle. Absent without a decision.
    pub store_lock: Option<StoreLock>,
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
    /// Per group (`concurrency.groupBy`), the largest number of its nodes out at once.
    pub max_nodes_out_by_group: BTreeMap<String, usize>,
    /// `concurrency.maxNodesPerGroup` when `groupBy` is set.
    pub max_nodes_per_group: Option<u32>,
    /// Largest number of nodes cordoned by rollboot at once (`rollboot.dev/cordoned-by`: in
    /// flight, or failed and left cordoned): never above `maxNodes`, or it is a break.
    pub max_cordoned_by_rollboot: usize,
    /// Per group (`concurrency.groupBy`), the same: never above `maxNodesPerGroup`.
    pub max_cordoned_by_rollboot_by_group: BTreeMap<String, usize>,
    /// Planned starts (rollboot's cordon of a node whose cycle is not for its host's own
    /// shutdown) made while the nodes out (rollboot's, hosts shutting down by themselves, other
    /// actors' maintenance, and with `concurrency.countCordoned` every cordon) were already at
    /// `maxNodes`, or `maxNodesPerGroup` in the node's group: must be 0, or it is a break.
    pub planned_starts_over_capacity: usize,
    /// Each of them, with the nodes out then.
    pub planned_starts_over_capacity_instances: Vec<crate::sim::invariants::OverCapacity>,
    /// When a host's own shutdown arrived while the nodes out were already at the limit,
    /// taking them past it (allowed: rollboot drains such a host at once).
    pub over_capacity_by_shutdown: Vec<crate::sim::invariants::OverCapacity>,
    /// The same for another actor's maintenance (a deletion taint, a NodeMaintenance).
    pub over_capacity_by_other_maintenance: Vec<crate::sim::invariants::OverCapacity>,
    /// Cordons by rollboot of a node another actor was taking out then: breaks.
    pub starts_under_other_maintenance: Vec<crate::sim::invariants::StartUnderOtherMaintenance>,
    /// Hosts gone for good during the run (the scenario's `autoscaler` deleted them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts_gone: Vec<String>,
    /// Reboots of a node that was schedulable or still ran pods the drain evicts.
    pub unsafe_reboots: Vec<String>,
    /// Reboots asked while a volume of a pod evicted from the node was still attached to it
    /// (its VolumeAttachment there, or in the node's `volumesAttached`): a sentence each.
    pub reboots_with_attached_volumes: Vec<String>,
    /// Pods that waited for their volume to leave another node (a Multi-Attach Event while it
    /// was still attached there, or a detach under way): simulated seconds from the first time
    /// the attach-detach controller found it held to the volume attached on their node.
    pub multi_attach_wait_seconds: crate::sim::invariants::MultiAttachWait,
    /// Cycles started (a node's first `cordoning`) outside the maintenance windows.
    pub starts_outside_windows: Vec<String>,
    /// Nodes cordoned at the end without a `failed` record saying why.
    pub cordoned_at_end: Vec<String>,
    /// The faults played, with `--chaos` or a scenario's `faults:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultsPlayed>,
    /// Where the cycles' time went, from the flagged nodes that ended `done` (see
    /// [`CycleParts`]); absent when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycle_parts: Option<CycleParts>,
    /// The drains' steps over the flagged nodes' last cycles, by kind of step (the default
    /// order's one-pod steps with volumes counted together): how many, their pods, their time
    /// and their wait for volumes to detach.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drain_parts: Vec<DrainParts>,
    /// Pods whose eviction was held, by cause (`drain.whenBlocked`'s keys), from rollboot's
    /// Events (one per pod held: EvictionBlocked for a budget at 0 now, BudgetNeverAllows,
    /// EvictionDenied) and the nodes failed for a stuck pod.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub blocked_by_cause: BTreeMap<String, usize>,
    /// Hosts that shut down by themselves (chaos fault `hostShutdown`): whether rollboot had
    /// drained each before logind let it go, and what was left.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unplanned_shutdowns: Vec<super::shutdowns::UnplannedShutdown>,
    /// The FleetLock hosts' requests (scenario `fleetlockHosts`), absent without them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleetlock: Option<FleetLockFigures>,
    /// Every invariant broken, a sentence each (empty when all held).
    pub invariant_breaks: Vec<String>,
    /// No invariant broke, and the run ended as it must: without faults, every flagged node
    /// rebooted once and none failed; with faults, finished or halted, no node failed but
    /// those a host fault acted on, and every other flagged node rebooted once unless halted.
    pub ok: bool,
}

/// What the simulated FleetLock hosts asked and got.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetLockFigures {
    /// Requests sent, both endpoints, every try.
    pub requests: u64,
    /// Slots granted (`pre-reboot` answered 200 to a host that held none).
    pub granted: u64,
    /// The most hosts holding a slot at once (never above `maxNodes`).
    pub max_held_at_once: u64,
    /// From a host's first `pre-reboot` to its 200 (real seconds): the mean over the grants.
    pub pre_reboot_to_ok_mean_seconds: f64,
    /// The same, the longest.
    pub pre_reboot_to_ok_max_seconds: f64,
}

impl Report {
    /// Text form.
    pub fn text(&self) -> String {
        let mut s = String::new();
        self.figures_text(&mut s);
        self.requests_text(&mut s);
        self.safety_text(&mut s);
        self.faults_text(&mut s);
        for b in &self.invariant_breaks {
            let _ = writeln!(s, "  BROKEN                   {b}");
        }
        s
    }

    /// The verdict, the makespan against its bound, the overhead and the cycles' parts.
    fn figures_text(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "rollout of {} flagged node(s) out of {}: {} ({})",
            self.flagged,
            self.nodes,
            if self.ok { "OK" } else { "FAILED" },
            self.outcome.as_str()
        );
        let _ = writeln!(s, "  outcome                  {}", self.outcome_reason);
        let _ = writeln!(
            s,
            "  makespan                 {:.2} s",
            self.makespan_seconds
        );
        if let Some(cpu) = self.rollout_cpu_seconds {
            let _ = writeln!(
                s,
                "  rollout CPU              {cpu:.1} s (this process, from the flagging to the decision)"
            );
        }
        if let Some(l) = &self.store_lock {
            let _ = writeln!(
                s,
                "  store lock               held {:.1} s ({:.0}% of the makespan), waited for {:.1} s ({} of {} takes)",
                l.held_seconds,
                l.held_share * 100.0,
                l.waited_seconds,
                l.contended,
                l.taken
            );
        }
        let b = &self.lower_bound;
        let budget = match &b.budget {
            Some(name) => format!("budgets' {:.2} s (worst: {name})", b.budget_seconds),
            None => "no budget term".to_string(),
        };
        let _ = writeln!(
            s,
            "  lower bound              {:.2} s, bound by {}: nodes' {:.2} s, {budget}",
            self.lower_bound_seconds, b.binding, b.nodes_seconds
        );
        let _ = match self.overhead_per_node_ms {
            Some(mean) => writeln!(
                s,
                "  coordinator overhead     {mean:.0} ms per node (mean), {}",
                match self.overhead_per_node_median_ms {
                    Some(m) => format!("{m:.0} ms (median)"),
                    None => "no median with maxNodes > 1".into(),
                }
            ),
            None => writeln!(
            s,
            "  coordinator overhead     not measured: the run did not reboot every flagged node"
        ),
        };
        if let Some(c) = &self.cycle_parts {
            let spread = |s: &Spread| {
                format!(
                    "{:.3} s mean, {:.3} median, {:.3} p95",
                    s.mean, s.median, s.p95
                )
            };
            let _ = writeln!(
            s,
            "  cycles ({})              {} = {:.2} x irreducible ({:.3} s); {:.1} in flight on average (maxNodes {})",
            c.cycles,
            spread(&c.cycle),
            c.cycle_over_irreducible,
            c.irreducible_mean_seconds,
            c.mean_in_flight,
            self.max_nodes
        );
            let _ = writeln!(s, "    drain                  {}", spread(&c.drain));
            let _ = writeln!(s, "    reboot                 {}", spread(&c.reboot));
            let _ = writeln!(
                s,
                "    back to done           {} ({:.0}% of a cycle: uncordon, health gate)",
                spread(&c.gate),
                c.gate_share * 100.0
            );
        }
    }

    /// The API requests, by verb and by resource.
    fn requests_text(&self, s: &mut String) {
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
    }

    /// What the invariant watch recorded: budgets, nodes out, cordons, reboots, failures.
    fn safety_text(&self, s: &mut String) {
        for d in &self.drain_parts {
            let _ = writeln!(
                s,
                "  drain step               {}: {} step(s), {} pod(s), {:.2} s; volumes detached in {:.2} s ({:.2} s at most)",
                d.step, d.steps, d.pods, d.seconds, d.detach_seconds, d.detach_max_seconds
            );
        }
        if !self.blocked_by_cause.is_empty() {
            let causes: Vec<String> = self
                .blocked_by_cause
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect();
            let _ = writeln!(s, "  evictions held by cause  {}", causes.join(", "));
        }
        let _ = writeln!(s, "  PDB violations           {}", self.pdb_violations);
        let _ = writeln!(
            s,
            "  max nodes out at once    {} (maxNodes {})",
            self.max_nodes_out, self.max_nodes
        );
        if let Some(m) = self.max_nodes_per_group {
            let _ = writeln!(
                s,
                "  max out per group        {:?} (maxNodesPerGroup {m})",
                self.max_nodes_out_by_group
            );
        }
        let _ = writeln!(
            s,
            "  max cordoned by rollboot {} at once (maxNodes {}){}",
            self.max_cordoned_by_rollboot,
            self.max_nodes,
            if self.max_nodes_per_group.is_some() {
                format!(", per group {:?}", self.max_cordoned_by_rollboot_by_group)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            s,
            "  planned starts over capacity {}",
            self.planned_starts_over_capacity
        );
        for (what, list) in [
            ("by a shutdown", &self.over_capacity_by_shutdown),
            ("by another actor", &self.over_capacity_by_other_maintenance),
        ] {
            for o in list {
                let _ = writeln!(
                    s,
                    "  over capacity {what}  {} at {} ({}; out then: {})",
                    o.node,
                    o.at,
                    o.limit,
                    o.nodes_out.join(", ")
                );
            }
        }
        if !self.starts_under_other_maintenance.is_empty() {
            let _ = writeln!(
                s,
                "  starts under another actor's maintenance {}",
                self.starts_under_other_maintenance.len()
            );
        }
        if !self.hosts_gone.is_empty() {
            let _ = writeln!(s, "  hosts gone for good      {:?}", self.hosts_gone);
        }
        let _ = writeln!(
            s,
            "  reboots with volumes attached {}",
            self.reboots_with_attached_volumes.len()
        );
        let w = &self.multi_attach_wait_seconds;
        if w.pods > 0 {
            let _ = writeln!(
                s,
                "  multi-attach waits       {} pods, {:.1} s in all, {:.1} s at most",
                w.pods, w.total, w.max
            );
        }
        let _ = writeln!(s, "  rebooted once            {}", self.rebooted_once);
        for u in &self.unplanned_shutdowns {
            let _ = writeln!(
                s,
                "  unplanned shutdown       {}: {} pod(s) evicted, {} {:.2} s after PrepareForShutdown{}",
                u.node,
                u.pods_evicted,
                if u.drained_before_shutdown {
                    "drained, released".to_string()
                } else {
                    format!("{} pod(s) left, released", u.pods_left)
                },
                u.seconds_to_release,
                if u.released_before_limit {
                    " by the agent"
                } else {
                    " at logind's limit"
                }
            );
        }
        if let Some(f) = &self.fleetlock {
            let _ = writeln!(
                s,
                "  fleetlock                {} request(s), {} slot(s) granted, {} held at once at most; first pre-reboot to 200 {:.2} s mean, {:.2} s max",
                f.requests, f.granted, f.max_held_at_once, f.pre_reboot_to_ok_mean_seconds, f.pre_reboot_to_ok_max_seconds
            );
        }
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
    }

    /// The faults drawn and played, with when each began and ended.
    fn faults_text(&self, s: &mut String) {
        if let Some(f) = &self.faults {
            let _ = writeln!(
                s,
                "  faults                   {} drawn{}, stopped after {} s",
                f.schedule.faults.len(),
                f.schedule
                    .seed
                    .map(|x| format!(" from seed {x}"))
                    .unwrap_or_default(),
                f.schedule.stop_after
            );
            for p in &f.played {
                let _ = writeln!(
                    s,
                    "    {:<14} {:<10} {}",
                    p.fault,
                    p.target.as_deref().unwrap_or("-"),
                    match (p.began, p.ended) {
                        (Some(b), Some(e)) => format!("{b:.1} s to {e:.1} s"),
                        (Some(b), None) => format!("from {b:.1} s"),
                        _ => "never began".into(),
                    }
                );
            }
        }
    }
}

/// What `rollboot simulate` prints: the run's [`Report`] and the rehearsal's part of it, one
/// value. Its JSON is one object, the two parts' keys merged (the rehearsal's part wins a
/// clash) with every object's keys in alphabetical order, as `simulate` has always printed it;
/// its text is the two texts one after the other.
pub struct SimulateReport<'a> {
    /// The run's report.
    pub run: &'a Report,
    /// The rehearsal's part.
    pub rehearsal: &'a Rehearsal,
}

impl Serialize for SimulateReport<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut v = serde_json::to_value(self.run).map_err(S::Error::custom)?;
        let r = serde_json::to_value(self.rehearsal).map_err(S::Error::custom)?;
        if let (Some(o), serde_json::Value::Object(r)) = (v.as_object_mut(), r) {
            o.extend(r);
        }
        v.serialize(s)
    }
}

impl Render for SimulateReport<'_> {
    fn text(&self) -> String {
        format!("{}{}", self.run.text(), self.rehearsal.text())
    }
}

/// What the harness observed besides the cluster's invariant records.
pub struct Observed {
    /// When the hosts' sentinels were set.
    pub flagged_at: DateTime<Utc>,
    /// From flagging to the decision.
    pub makespan: Duration,
    /// From the controllers' start to the end.
    pub observed: Duration,
    /// The verdict.
    pub outcome: (Outcome, String),
    /// The bound it was judged against.
    pub bound: Bound,
    /// Each cycle start seen: (node, its `cordoning` since).
    pub starts: Vec<(String, DateTime<Utc>)>,
    /// Those of [`Observed::starts`] whose cycle was for a shutdown of the node's host.
    pub shutdown_starts: BTreeSet<(String, DateTime<Utc>)>,
    /// Each flagged node's irreducible time, real seconds (see [`per_node_seconds`]).
    pub irreducible: BTreeMap<String, f64>,
    /// Each budget's disruption windows over the flagged nodes.
    pub budget_windows: Vec<BudgetWindows>,
    /// The faults, when any were played.
    pub faults: Option<FaultsPlayed>,
    /// The process's CPU time from the flagging to the decision (`None`: not read).
    pub rollout_cpu: Option<Duration>,
    /// The store lock's use from the flagging to the decision.
    pub store_lock: Option<crate::sim::store::LockUse>,
}

/// The store lock's use over the rollout (see [`Report::store_lock`]).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreLock {
    /// Times it was taken.
    pub taken: u64,
    /// Times a taker had to wait for it.
    pub contended: u64,
    /// Seconds it was held, all holders together.
    pub held_seconds: f64,
    /// Seconds takers waited for it, all of them together.
    pub waited_seconds: f64,
    /// `held_seconds` over the makespan: the share of the rollout it was held.
    pub held_share: f64,
}

/// One budget's part of the lower bound: the disruption windows of the pods it covers on the
/// flagged nodes (each evicted once), from the eviction until a replacement is Ready, real
/// seconds in all, and how many it allows at once. However the nodes are packed, those
/// windows take at least `seconds / allowed`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetWindows {
    /// `namespace/name`.
    pub budget: String,
    /// `status.disruptionsAllowed` before the rollout, all its pods healthy.
    pub allowed: i32,
    /// The windows, real seconds in all.
    pub seconds: f64,
}

/// The lower bound on a rollout's makespan: the larger of its two terms.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LowerBound {
    /// The nodes' term: the flagged nodes' irreducible times (their drain bounded by grace
    /// periods, reboot, return, taints) summed and divided by `maxNodes`.
    pub nodes_seconds: f64,
    /// The budgets' term: the largest of each budget's windows divided by its allowance
    /// (a budget that allows none now is left out: it holds the drains, which the run shows).
    pub budget_seconds: f64,
    /// The budget of that term.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// Which term binds: `nodes`, or `budget NAMESPACE/NAME`.
    pub binding: String,
}

impl LowerBound {
    /// From the nodes' irreducible times summed, `maxNodes` and the budgets' windows (pure).
    pub fn of(nodes_sum: f64, max_nodes: u32, budgets: &[BudgetWindows]) -> LowerBound {
        let nodes_seconds = nodes_sum / f64::from(max_nodes.max(1));
        let worst = budgets
            .iter()
            .filter(|b| b.allowed > 0)
            .map(|b| (b.seconds / f64::from(b.allowed), &b.budget))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let (budget_seconds, budget) = worst.map_or((0.0, None), |(s, b)| (s, Some(b.clone())));
        let binding = match &budget {
            Some(b) if budget_seconds > nodes_seconds => format!("budget {b}"),
            _ => "nodes".to_string(),
        };
        LowerBound {
            nodes_seconds,
            budget_seconds,
            budget,
            binding,
        }
    }

    /// The bound: the larger term.
    pub fn seconds(&self) -> f64 {
        self.nodes_seconds.max(self.budget_seconds)
    }
}

/// Where the time of the finished cycles went, in the run's own seconds: each part as the
/// controller measured it on the node (`rollboot.dev/last-cycle`), the whole cycle from its
/// start in the lock to `done`, and how full the slots were. The makespan over the bound
/// splits into the two: `cycleOverIrreducible` (how much longer a cycle took than its
/// irreducible time) times `maxNodes / meanInFlight` (how far from full the slots ran).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CycleParts {
    /// Cycles measured (flagged nodes that ended `done` with a recorded start).
    pub cycles: usize,
    /// Cordon, drain and hooks: from the start to the reboot request.
    pub drain: Spread,
    /// From the reboot request until the node was back.
    pub reboot: Spread,
    /// From back to done: uncordon, health gate.
    pub gate: Spread,
    /// From the start to `done`.
    pub cycle: Spread,
    /// The mean irreducible time of the measured nodes (see [`per_node_seconds`]).
    pub irreducible_mean_seconds: f64,
    /// Mean cycle over mean irreducible time.
    pub cycle_over_irreducible: f64,
    /// The health gate's share of a cycle: mean back-to-done over mean cycle.
    pub gate_share: f64,
    /// The nodes in flight on average over the makespan (the cycles' total over it).
    pub mean_in_flight: f64,
}

/// Mean, median and 95th percentile of some seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spread {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// 95th percentile (nearest rank).
    pub p95: f64,
}

impl Spread {
    /// The spread of `v` (zeros when empty).
    pub fn of(mut v: Vec<f64>) -> Spread {
        // Sorts `v` too, for the rank below.
        let Some(median) = rollboot::time::median(&mut v) else {
            return Spread::default();
        };
        let n = v.len();
        let rank = |q: f64| v[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        Spread {
            mean: v.iter().sum::<f64>() / n as f64,
            median,
            p95: rank(0.95),
        }
    }
}

impl CycleParts {
    /// From the flagged nodes' views at the end, each node's first start, the irreducible
    /// times and the makespan (pure).
    pub fn measure(
        nodes: &[NodeView],
        flagged: &BTreeSet<String>,
        starts: &[(String, DateTime<Utc>)],
        irreducible: &BTreeMap<String, f64>,
        makespan: f64,
    ) -> Option<CycleParts> {
        let mut first: BTreeMap<&str, DateTime<Utc>> = BTreeMap::new();
        for (n, at) in starts {
            let e = first.entry(n.as_str()).or_insert(*at);
            *e = (*e).min(*at);
        }
        let (mut drain, mut reboot, mut gate, mut cycle, mut irr) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for n in nodes.iter().filter(|n| flagged.contains(&n.name)) {
            let (Some(NodeState::Done), Some(done), Some(start)) =
                (n.state, n.state_since, first.get(n.name.as_str()))
            else {
                continue;
            };
            cycle.push((done - *start).num_microseconds().unwrap_or(0) as f64 / 1e6);
            irr.push(irreducible.get(&n.name).copied().unwrap_or_default());
            if let Some(c) = &n.history.last_cycle {
                drain.extend(c.drain_seconds);
                reboot.extend(c.reboot_seconds);
                gate.extend(c.gate_seconds);
            }
        }
        if cycle.is_empty() {
            return None;
        }
        let total: f64 = cycle.iter().sum();
        let irreducible_mean = irr.iter().sum::<f64>() / irr.len() as f64;
        let cycle = Spread::of(cycle);
        let gate = Spread::of(gate);
        Some(CycleParts {
            gate_share: if cycle.mean > 0.0 {
                gate.mean / cycle.mean
            } else {
                0.0
            },
            cycles: irr.len(),
            drain: Spread::of(drain),
            reboot: Spread::of(reboot),
            gate,
            cycle_over_irreducible: if irreducible_mean > 0.0 {
                cycle.mean / irreducible_mean
            } else {
                0.0
            },
            cycle,
            irreducible_mean_seconds: irreducible_mean,
            mean_in_flight: if makespan > 0.0 {
                total / makespan
            } else {
                0.0
            },
        })
    }
}

/// One kind of drain step, summed over the flagged nodes' last cycles.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrainParts {
    /// The step's label (`priority 0`, `volumes (one pod per step)`, `order 10 drain.order[0]`).
    pub step: String,
    /// Steps of that kind.
    pub steps: usize,
    /// Their pods.
    pub pods: usize,
    /// Their time from the first eviction to the pods gone, real seconds in all.
    pub seconds: f64,
    /// Their waits for volumes to detach, real seconds in all.
    pub detach_seconds: f64,
    /// The longest of those waits.
    pub detach_max_seconds: f64,
}

impl DrainParts {
    /// The steps of `parts` summed by kind, in the order first seen.
    pub fn of<'a>(parts: impl Iterator<Item = &'a rollboot::node::DrainPart>) -> Vec<DrainParts> {
        let mut out: Vec<DrainParts> = Vec::new();
        for p in parts {
            // "volumes: ns/pod" (and "critical, volumes: ns/pod"): a step per pod.
            let step = match p.label.split_once("volumes: ") {
                Some((before, _)) => format!("{before}volumes (one pod per step)"),
                None => p.label.clone(),
            };
            let i = match out.iter().position(|d| d.step == step) {
                Some(i) => i,
                None => {
                    out.push(DrainParts {
                        step,
                        ..DrainParts::default()
                    });
                    out.len() - 1
                }
            };
            let d = &mut out[i];
            d.steps += 1;
            d.pods += p.pods;
            d.seconds += p.seconds;
            d.detach_seconds += p.detach_seconds;
            d.detach_max_seconds = d.detach_max_seconds.max(p.detach_seconds);
        }
        out
    }
}

/// Builds the report of a decided (or stuck) rollout.
pub async fn report(
    h: &Harness,
    flagged: &BTreeSet<String>,
    seen: Observed,
) -> anyhow::Result<Report> {
    let nodes = h.nodes().await?;
    // A host that shut down by itself rebooted without rollboot: those reboots are not
    // rollboot's, but one that served the node's flag (its cycle was the shutdown's) is its
    // one reboot.
    let mut shutdowns_of: BTreeMap<String, usize> = BTreeMap::new();
    if let Some(s) = &h.shutdowns {
        for u in s.records.lock().expect("records").iter() {
            *shutdowns_of.entry(u.node.clone()).or_default() += 1;
        }
    }
    let reboots: BTreeMap<String, usize> = h
        .host
        .reboots
        .lock()
        .expect("reboots")
        .iter()
        .map(|(n, total)| {
            let by_rollboot = total.saturating_sub(shutdowns_of.get(n).copied().unwrap_or(0));
            (
                n.clone(),
                if by_rollboot >= 1 {
                    by_rollboot
                } else {
                    (*total).min(1)
                },
            )
        })
        .collect();
    let inv = h.cluster.invariants();
    let stats = h.cluster.stats();
    let config = &h.config;
    let mut by_verb: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_resource: BTreeMap<String, u64> = BTreeMap::new();
    let mut lease_requests = 0;
    let mut by_controller: BTreeMap<String, u64> = BTreeMap::new();
    for (k, n) in &stats.requests {
        let sub = if k.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", k.subresource)
        };
        if k.identity.starts_with("controller-") {
            *by_controller
                .entry(format!("{} {}{sub}", k.verb, k.resource))
                .or_default() += n;
        }
        if k.identity != "harness" {
            *by_verb.entry(k.verb.clone()).or_default() += n;
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
    let max_nodes = config.concurrency.max_nodes;
    let irreducible = |n: &str| seen.irreducible.get(n).copied().unwrap_or_default();
    let terms = LowerBound::of(
        flagged.iter().map(|n| irreducible(n)).sum::<f64>(),
        max_nodes,
        &seen.budget_windows,
    );
    let bound = terms.seconds();
    let makespan_s = seen.makespan.as_secs_f64();
    let mut done_times: Vec<(DateTime<Utc>, &str)> = nodes
        .iter()
        .filter(|n| flagged.contains(&n.name) && n.state == Some(NodeState::Done))
        .filter_map(|n| n.state_since.map(|t| (t, n.name.as_str())))
        .collect();
    done_times.sort();
    let mut prev = seen.flagged_at;
    let mut each: Vec<f64> = done_times
        .iter()
        .map(|(t, n)| {
            let gap = (*t - prev).num_microseconds().unwrap_or(0) as f64 / 1e6;
            prev = *t;
            (gap - irreducible(n)) * 1000.0
        })
        .collect();
    let median = (max_nodes <= 1).then(|| rollboot::time::median(&mut each).unwrap_or(0.0));

    let group_limit = config.group_limit().map(|(_, m)| m);
    let schedule = config.schedule();
    let starts_outside: Vec<String> = seen
        .starts
        .iter()
        .filter(|(_, at)| !schedule.is_allowed(*at))
        // A host that shuts down by itself is drained at once, whatever the windows: its cycle
        // says so (`cycle-for: shutdown`), whether or not the host went down before the run
        // was decided (the simulated logind records a shutdown only then: seed 698 halted
        // while its agent still held logind's delay for the drain).
        .filter(|s| !seen.shutdown_starts.contains(s))
        .map(|(n, at)| format!("{n} at {}", rollboot::time::annotation(*at)))
        .collect();
    // A node another actor keeps cordoned (a NodeMaintenance still there when the run was
    // decided) is that actor's.
    let cordoned_at_end: Vec<String> = nodes
        .iter()
        .filter(|n| n.unschedulable && n.state != Some(NodeState::Failed))
        .filter(|n| n.other_actor.is_none())
        .map(|n| n.name.clone())
        .collect();
    let unsafe_reboots: Vec<String> = inv
        .unsafe_reboots
        .iter()
        .map(|u| {
            let mut why = Vec::new();
            if u.uncordoned {
                why.push("not cordoned".to_string());
            }
            if !u.pods.is_empty() {
                why.push(format!("pods not drained: {}", u.pods.join(", ")));
            }
            format!("{} at {}: {}", u.node, u.at, why.join("; "))
        })
        .collect();
    // Pods the config leaves on a node (outside its podSelector, or unreplicated/emptyDir
    // pods it may not evict) are not a reboot "undrained" by mistake.
    let drains_everything = config.drain.pod_selector.trim().is_empty()
        && config.drain.evict_unreplicated
        && config.drain.delete_empty_dir_data;

    let mut breaks = Vec::new();
    // A host that shut down by itself took its pods whatever rollboot did: its losses are in
    // `unplannedShutdowns` (its pods left), not rollboot's breaks.
    for v in inv.pdb_violations.iter().filter(|v| v.cause != "shutdown") {
        breaks.push(format!(
            "PDB violation: {} took {} ({}) at {}, {} healthy of {} desired",
            v.cause, v.pod, v.pdb, v.at, v.healthy, v.desired
        ));
    }
    for n in &twice {
        breaks.push(format!("{n} rebooted more than once"));
    }
    for (u, r) in inv.unsafe_reboots.iter().zip(&unsafe_reboots) {
        if u.uncordoned || drains_everything {
            breaks.push(format!("reboot of a node not ready for it: {r}"));
        }
    }
    let unplanned = h
        .shutdowns
        .as_ref()
        .map(|s| s.records.lock().expect("records").clone())
        .unwrap_or_default();
    // A Node deleted in the middle of its cycle frees its slot at once (its host is no longer
    // rollboot's to count); registered again NotReady, it is out beside the node started in
    // its place. Each host a `deleteNode` fault struck may so be out past the limit.
    let deleted = seen.faults.as_ref().map_or(0, |f| {
        f.played
            .iter()
            .filter(|p| p.began.is_some() && p.fault == "deleteNode")
            .filter_map(|p| p.target.as_deref())
            .collect::<BTreeSet<&str>>()
            .len()
    });
    breaks.extend(capacity_breaks(&inv, &nodes, &failed, config, deleted));
    for o in &inv.planned_starts_over_capacity_instances {
        breaks.push(format!(
            "planned start over capacity: {} cordoned at {} with {} already out ({}): {}",
            o.node,
            o.at,
            o.nodes_out.len(),
            o.limit,
            o.nodes_out.join(", ")
        ));
    }
    for u in &inv.starts_under_other_maintenance {
        breaks.push(format!(
            "start under another actor's maintenance: {} cordoned at {} while it carried {}",
            u.node,
            u.at,
            u.signals.join(", ")
        ));
    }
    let reboots_with_attached_volumes: Vec<String> = inv
        .reboots_with_attached_volumes
        .iter()
        .map(|r| format!("{} at {}: {}", r.node, r.at, r.volumes.join(", ")))
        .collect();
    for r in &reboots_with_attached_volumes {
        breaks.push(format!("reboot with volumes still attached: {r}"));
    }
    for s in &starts_outside {
        breaks.push(format!(
            "cycle started outside the maintenance windows: {s}"
        ));
    }
    for n in &cordoned_at_end {
        breaks.push(format!("{n} left cordoned without a failed record"));
    }
    for (n, at) in &inv.uncordoned_while_not_ready {
        breaks.push(format!(
            "{n} uncordoned at {at} while still tainted not-ready"
        ));
    }
    let cycle_parts =
        CycleParts::measure(&nodes, flagged, &seen.starts, &seen.irreducible, makespan_s);
    let drain_parts = DrainParts::of(
        nodes
            .iter()
            .filter(|n| flagged.contains(&n.name))
            .filter_map(|n| n.history.last_cycle.as_ref())
            .flat_map(|c| &c.drain_parts),
    );
    let mut blocked_by_cause = BTreeMap::new();
    for (cause, reason) in [
        ("budget", "EvictionBlocked"),
        ("never", "BudgetNeverAllows"),
        ("denied", "EvictionDenied"),
    ] {
        let n = h.events(reason).await?.len();
        if n > 0 {
            blocked_by_cause.insert(cause.to_string(), n);
        }
    }
    let stuck = nodes
        .iter()
        .filter(|n| {
            n.failure_reason
                .as_deref()
                .is_some_and(|r| r.contains("drain.whenBlocked.stuck"))
        })
        .count();
    if stuck > 0 {
        blocked_by_cause.insert("stuck".to_string(), stuck);
    }
    let (outcome, outcome_reason) = seen.outcome;
    // The bound counts every flagged node: against a run that did not reboot them all, the
    // difference means nothing.
    let measured_overhead = outcome == Outcome::Finished && rebooted_once == flagged.len();
    if outcome == Outcome::Stuck {
        breaks.push(outcome_reason.clone());
    }
    let fleetlock = (!h.fleetlock_hosts.is_empty()).then(|| {
        use std::sync::atomic::Ordering::Relaxed;
        let waits = h.fleetlock.waits.lock().expect("waits").clone();
        FleetLockFigures {
            requests: h.fleetlock.requests.load(Relaxed),
            granted: h.fleetlock.granted.load(Relaxed),
            max_held_at_once: h.fleetlock.max_held.load(Relaxed),
            pre_reboot_to_ok_mean_seconds: waits.iter().sum::<f64>() / waits.len().max(1) as f64,
            pre_reboot_to_ok_max_seconds: waits.iter().copied().fold(0.0, f64::max),
        }
    });
    if let Some(f) = fleetlock
        .as_ref()
        .filter(|f| f.max_held_at_once > u64::from(h.config.concurrency.max_nodes))
    {
        breaks.push(format!(
            "{} FleetLock hosts held a slot at once, more than maxNodes {}",
            f.max_held_at_once, h.config.concurrency.max_nodes
        ));
    }
    let ok = match &seen.faults {
        None => {
            breaks.is_empty()
                && outcome == Outcome::Finished
                && rebooted_once == flagged.len()
                && failed.is_empty()
        }
        Some(f) => {
            // A fault that holds evictions (every budget at `maxUnavailable: 0`, an admission
            // policy denying them) fails a draining node when `drain.whenBlocked` says so: its
            // reason names the key.
            let holds_evictions = f.played.iter().any(|p| {
                p.began.is_some() && matches!(p.fault.as_str(), "blockBudgets" | "denyEvictions")
            });
            let reason_of = |n: &String| {
                nodes
                    .iter()
                    .find(|v| &v.name == n)
                    .and_then(|v| v.failure_reason.clone())
                    .unwrap_or_default()
            };
            let unexpected: Vec<&String> = failed
                .iter()
                .filter(|n| !f.host_fault_nodes.contains(n))
                .filter(|n| !(holds_evictions && reason_of(n).contains("drain.whenBlocked")))
                .collect();
            for n in &unexpected {
                let why = reason_of(n);
                breaks.push(format!(
                    "{n} failed although no host fault acted on it: {why}"
                ));
            }
            let unrebooted: Vec<&String> = flagged
                .iter()
                .filter(|n| reboots.get(*n) != Some(&1) && !failed.contains(n))
                .collect();
            if outcome == Outcome::Finished && !unrebooted.is_empty() {
                breaks.push(format!(
                    "finished with flagged nodes not rebooted once: {unrebooted:?}"
                ));
            }
            breaks.is_empty()
        }
    };
    Ok(Report {
        unplanned_shutdowns: unplanned,
        fleetlock,
        outcome,
        outcome_reason,
        bound: seen.bound,
        nodes: nodes.len(),
        flagged: flagged.len(),
        rebooted_once,
        rebooted_twice: twice,
        not_rebooted,
        failed,
        makespan_seconds: makespan_s,
        lower_bound_seconds: bound,
        lower_bound: terms,
        overhead_per_node_ms: measured_overhead.then(|| {
            if flagged.is_empty() {
                0.0
            } else {
                (makespan_s - bound) * 1000.0 * f64::from(max_nodes.max(1)) / flagged.len() as f64
            }
        }),
        overhead_per_node_median_ms: median.filter(|_| measured_overhead),
        rollout_cpu_seconds: seen.rollout_cpu.map(|d| d.as_secs_f64()),
        store_lock: seen.store_lock.map(|l| StoreLock {
            taken: l.taken,
            contended: l.contended,
            held_seconds: l.held.as_secs_f64(),
            waited_seconds: l.waited.as_secs_f64(),
            held_share: l.held.as_secs_f64() / makespan_s.max(1e-9),
        }),
        observed_seconds: seen.observed.as_secs_f64(),
        requests_per_minute: total as f64 * 60.0 / seen.observed.as_secs_f64().max(0.001),
        controller_requests_per_minute: by_controller.values().sum::<u64>() as f64 * 60.0
            / seen.observed.as_secs_f64().max(0.001),
        controller_requests_by_resource: by_controller,
        requests_by_verb: by_verb,
        requests_total: total,
        requests_by_resource: by_resource,
        lease_requests,
        requests_per_node: (total - lease_requests) as f64
            / reboots.values().sum::<usize>().max(1) as f64,
        pdb_violations: inv
            .pdb_violations
            .iter()
            .filter(|v| v.cause != "shutdown")
            .count(),
        max_nodes_out: inv.max_nodes_unavailable,
        max_nodes,
        max_nodes_out_by_group: inv.max_nodes_unavailable_by_group,
        max_nodes_per_group: group_limit,
        max_cordoned_by_rollboot: inv.max_cordoned_by_rollboot,
        max_cordoned_by_rollboot_by_group: inv.max_cordoned_by_rollboot_by_group,
        planned_starts_over_capacity: inv.planned_starts_over_capacity,
        planned_starts_over_capacity_instances: inv.planned_starts_over_capacity_instances,
        over_capacity_by_shutdown: inv.over_capacity_by_shutdown,
        over_capacity_by_other_maintenance: inv.over_capacity_by_other_maintenance,
        starts_under_other_maintenance: inv.starts_under_other_maintenance,
        hosts_gone: h.cluster.world().gone_hosts().into_iter().collect(),
        unsafe_reboots,
        reboots_with_attached_volumes,
        multi_attach_wait_seconds: inv.multi_attach_wait_seconds.clone(),
        starts_outside_windows: starts_outside,
        cordoned_at_end,
        faults: seen.faults,
        cycle_parts,
        drain_parts,
        blocked_by_cause,
        invariant_breaks: breaks,
        ok,
    })
}

/// The breaks of the limits on nodes out at once: the nodes cordoned or NotReady may exceed
/// `maxNodes` (and `maxNodesPerGroup`) only by the failed nodes and by the nodes a host's own
/// shutdown or another actor's maintenance took out while the limit was already reached
/// (`overCapacityByShutdown`, `overCapacityByOtherMaintenance`), while those rollboot cordoned
/// (in flight, or failed and left cordoned by it) may exceed them only by those shutdowns
/// (rollboot drains such a host at once). A shutdown that arrived with room takes a slot: it
/// is no excuse. Pure.
pub fn capacity_breaks(
    inv: &crate::sim::InvariantReport,
    nodes: &[NodeView],
    failed: &[String],
    config: &Config,
    deleted: usize,
) -> Vec<String> {
    // The nodes taken past a limit, in one group (`Some`) or overall (`None`).
    let past = |records: &[&[crate::sim::invariants::OverCapacity]], group: Option<&str>| {
        records
            .iter()
            .flat_map(|r| r.iter())
            .filter(|o| o.group.as_deref() == group)
            .map(|o| o.node.as_str())
            .collect::<BTreeSet<&str>>()
            .len()
    };
    let (shutdowns, others) = (
        &inv.over_capacity_by_shutdown[..],
        &inv.over_capacity_by_other_maintenance[..],
    );
    let max_nodes = config.concurrency.max_nodes as usize;
    let mut breaks = Vec::new();
    // A failed node stays cordoned, for an operator, and `maxFailures` lets the rollout go
    // on: it is out besides the `maxNodes` in flight. Nodes never fail back, so those failed
    // at the end are every node that had failed at any moment.
    let over = past(&[shutdowns, others], None) + deleted;
    if inv.max_nodes_unavailable > max_nodes + failed.len() + over {
        breaks.push(format!(
            "{} nodes out at once, more than maxNodes {max_nodes} plus the {} failed{}",
            inv.max_nodes_unavailable,
            failed.len(),
            excused(over)
        ));
    }
    if let Some((key, m)) = config.group_limit() {
        for (g, n) in &inv.max_nodes_unavailable_by_group {
            let failed_here = nodes
                .iter()
                .filter(|v| v.state == Some(NodeState::Failed) && v.labels.get(key) == Some(g))
                .count();
            let over = past(&[shutdowns, others], Some(g)) + deleted;
            if *n > m as usize + failed_here + over {
                breaks.push(format!(
                    "{n} nodes of group {g} out at once, more than maxNodesPerGroup {m} plus the {failed_here} failed there{}",
                    excused(over)
                ));
            }
        }
    }
    // Unlike the nodes out at once above, those rollboot cordoned (in flight, or failed and
    // still cordoned by it) are held to the limits themselves: a failed node takes a slot.
    let over = past(&[shutdowns], None);
    if inv.max_cordoned_by_rollboot > max_nodes + over {
        breaks.push(format!(
            "{} nodes cordoned by rollboot at once, more than maxNodes {max_nodes}{}",
            inv.max_cordoned_by_rollboot,
            excused(over)
        ));
    }
    if let Some((_, m)) = config.group_limit() {
        for (g, n) in &inv.max_cordoned_by_rollboot_by_group {
            let over = past(&[shutdowns], Some(g));
            if *n > m as usize + over {
                breaks.push(format!(
                    "{n} nodes of group {g} cordoned by rollboot at once, more than maxNodesPerGroup {m}{}",
                    excused(over)
                ));
            }
        }
    }
    breaks
}

/// What a capacity break's sentence adds for the nodes taken past the limit by others.
fn excused(n: usize) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" plus the {n} taken out past the limit by a shutdown or another actor")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    fn node(name: &str, state: Option<&str>, cordoned: bool, flagged: bool) -> NodeView {
        let mut ann = serde_json::Map::new();
        if let Some(s) = state {
            ann.insert("rollboot.dev/state".into(), s.into());
            ann.insert(
                "rollboot.dev/state-since".into(),
                "2026-01-01T00:00:00Z".into(),
            );
        }
        if flagged {
            ann.insert(
                "rollboot.dev/reboot-required".into(),
                "2026-01-01T00:00:00Z".into(),
            );
        }
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "annotations": ann},
            "spec": {"unschedulable": cordoned},
        }))
        .unwrap();
        NodeView::from_node(&n)
    }

    #[test]
    fn the_bound_is_the_larger_term_and_says_which_binds() {
        let w = |budget: &str, allowed, seconds| BudgetWindows {
            budget: budget.into(),
            allowed,
            seconds,
        };
        // 200 nodes of 0.65 s under maxNodes 20: 6.5 s; a budget of 5 windows of 0.3 s
        // allowing one: 1.5 s. The nodes bind.
        let b = LowerBound::of(130.0, 20, &[w("apps/web", 1, 1.5), w("apps/db", 2, 2.0)]);
        assert!((b.seconds() - 6.5).abs() < 1e-9);
        assert_eq!(b.binding, "nodes");
        assert_eq!(b.budget.as_deref(), Some("apps/web"));
        assert!((b.budget_seconds - 1.5).abs() < 1e-9);
        // Pods that take 3 s to be Ready again: 15 s of windows one at a time bind.
        let b = LowerBound::of(130.0, 20, &[w("apps/web", 1, 15.0), w("apps/db", 0, 99.0)]);
        assert!((b.seconds() - 15.0).abs() < 1e-9);
        assert_eq!(b.binding, "budget apps/web");
        // No budget: the nodes' term alone.
        let b = LowerBound::of(10.0, 1, &[]);
        assert_eq!(
            (b.seconds(), b.budget, b.binding.as_str()),
            (10.0, None, "nodes")
        );
    }

    #[test]
    fn the_cycle_parts_split_the_makespan_into_longer_cycles_and_emptier_slots() {
        let done = |name: &str, at: &str, cycle: &str| {
            let n: Node = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "annotations": {
                    "rollboot.dev/state": "done",
                    "rollboot.dev/state-since": at,
                    "rollboot.dev/last-cycle": cycle,
                }},
            }))
            .unwrap();
            NodeView::from_node(&n)
        };
        let t = |s: &str| rollboot::time::parse_annotation(s).unwrap();
        let nodes = [
            done(
                "a",
                "2026-01-01T00:00:04Z",
                r#"{"drainSeconds": 1.0, "rebootSeconds": 2.0, "gateSeconds": 1.0}"#,
            ),
            done(
                "b",
                "2026-01-01T00:00:08Z",
                r#"{"drainSeconds": 3.0, "rebootSeconds": 2.0, "gateSeconds": 1.0}"#,
            ),
            node("c", Some("draining"), true, true),
            done("d", "2026-01-01T00:00:09Z", "{}"),
        ];
        let starts = vec![
            ("a".to_string(), t("2026-01-01T00:00:00Z")),
            ("b".to_string(), t("2026-01-01T00:00:02Z")),
            // A second start of b (a new leader's): the first one counts.
            ("b".to_string(), t("2026-01-01T00:00:03Z")),
            ("c".to_string(), t("2026-01-01T00:00:05Z")),
        ];
        let irreducible = BTreeMap::from([("a".to_string(), 2.0), ("b".to_string(), 4.0)]);
        // d is done but not flagged; c is not done.
        let c = CycleParts::measure(&nodes, &set(&["a", "b", "c"]), &starts, &irreducible, 10.0)
            .unwrap();
        assert_eq!(c.cycles, 2);
        assert_eq!(c.cycle.mean, 5.0, "a: 4 s, b: 6 s");
        assert_eq!(c.drain.mean, 2.0);
        assert_eq!((c.drain.median, c.drain.p95), (2.0, 3.0));
        assert_eq!(c.reboot.mean, 2.0);
        assert_eq!(c.irreducible_mean_seconds, 3.0);
        assert!((c.cycle_over_irreducible - 5.0 / 3.0).abs() < 1e-9);
        assert_eq!(c.mean_in_flight, 1.0, "10 s of cycles over a 10 s makespan");
        assert!(CycleParts::measure(&nodes, &set(&["c"]), &starts, &irreducible, 10.0).is_none());
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn nodes_cordoned_by_rollboot_beyond_max_nodes_are_a_break_failed_ones_included() {
        let cfg = |y: &str| rollboot::config::parse_str(y).unwrap();
        let failed = vec!["a".to_string()];
        let nodes = [node("a", Some("failed"), true, false)];
        // Two out at once, one of them failed: the nodes out may exceed maxNodes by the failed.
        let inv = crate::sim::InvariantReport {
            max_nodes_unavailable: 2,
            max_cordoned_by_rollboot: 1,
            ..Default::default()
        };
        assert!(capacity_breaks(&inv, &nodes, &failed, &cfg("{}"), 0).is_empty());
        // The failed one still cordoned by rollboot beside one in flight: a break.
        let inv = crate::sim::InvariantReport {
            max_cordoned_by_rollboot: 2,
            ..inv
        };
        let b = capacity_breaks(&inv, &nodes, &failed, &cfg("{}"), 0);
        assert_eq!(
            b,
            ["2 nodes cordoned by rollboot at once, more than maxNodes 1"]
        );
        // A host whose Node was deleted mid-cycle does not excuse rollboot's own cordons.
        let b = capacity_breaks(&inv, &nodes, &failed, &cfg("{}"), 1);
        assert_eq!(
            b,
            ["2 nodes cordoned by rollboot at once, more than maxNodes 1"]
        );
        assert!(
            capacity_breaks(&inv, &nodes, &failed, &cfg("concurrency: {maxNodes: 2}"), 0)
                .is_empty()
        );
        // Per group.
        let zones = cfg("concurrency: {maxNodes: 3, groupBy: zone, maxNodesPerGroup: 1}");
        let inv = crate::sim::InvariantReport {
            max_cordoned_by_rollboot_by_group: BTreeMap::from([
                ("a".to_string(), 2),
                ("b".to_string(), 1),
            ]),
            ..inv
        };
        assert_eq!(
            capacity_breaks(&inv, &nodes, &failed, &zones, 0),
            ["2 nodes of group a cordoned by rollboot at once, more than maxNodesPerGroup 1"]
        );
    }

    #[test]
    fn only_a_shutdown_or_another_actor_arriving_at_the_limit_excuses_nodes_out_past_it() {
        use crate::sim::invariants::OverCapacity;
        let cfg = rollboot::config::parse_str("{}").unwrap();
        let over = |node: &str| OverCapacity {
            node: node.into(),
            at: "2026-01-01T00:00:00Z".into(),
            limit: "maxNodes 1".into(),
            group: None,
            nodes_out: vec!["a (rollboot)".into()],
        };
        // Two out and two cordoned by rollboot (the shutdown's own cycle) with maxNodes 1: a
        // shutdown that came with room is no excuse any more.
        let inv = crate::sim::InvariantReport {
            max_nodes_unavailable: 2,
            max_cordoned_by_rollboot: 2,
            ..Default::default()
        };
        assert_eq!(capacity_breaks(&inv, &[], &[], &cfg, 0).len(), 2);
        // One that arrived at the limit is.
        let inv = crate::sim::InvariantReport {
            over_capacity_by_shutdown: vec![over("b"), over("b")],
            ..inv
        };
        assert!(capacity_breaks(&inv, &[], &[], &cfg, 0).is_empty());
        // Another actor's arrival excuses the nodes out, not rollboot's own cordons.
        let inv = crate::sim::InvariantReport {
            over_capacity_by_shutdown: vec![],
            over_capacity_by_other_maintenance: vec![over("c")],
            ..inv
        };
        assert_eq!(
            capacity_breaks(&inv, &[], &[], &cfg, 0),
            ["2 nodes cordoned by rollboot at once, more than maxNodes 1"]
        );
        // Two out, one cordoned by rollboot: out past the limit is a break, unless a host whose
        // Node was deleted mid-cycle (its slot freed at once) came back beside the next node.
        let inv = crate::sim::InvariantReport {
            max_nodes_unavailable: 2,
            max_cordoned_by_rollboot: 1,
            ..Default::default()
        };
        assert_eq!(capacity_breaks(&inv, &[], &[], &cfg, 0).len(), 1);
        assert!(capacity_breaks(&inv, &[], &[], &cfg, 1).is_empty());
    }

    #[test]
    fn a_run_is_decided_only_when_nothing_is_in_flight() {
        let flagged = set(&["a", "b"]);
        let none = BTreeSet::new();
        let nodes = [
            node("a", Some("done"), false, false),
            node("b", Some("draining"), true, false),
        ];
        assert_eq!(decided(&nodes, &flagged, &none, &none, 0), None);
        let nodes = [
            node("a", Some("done"), false, false),
            node("b", Some("done"), false, false),
        ];
        assert_eq!(
            decided(&nodes, &flagged, &none, &none, 0).unwrap().0,
            Outcome::Finished
        );
        // A host whose sentinel still asks is not done, nor is a node flagged again.
        assert_eq!(decided(&nodes, &flagged, &set(&["b"]), &none, 0), None);
        let nodes = [
            node("a", Some("done"), false, false),
            node("b", Some("done"), false, true),
        ];
        assert_eq!(decided(&nodes, &flagged, &none, &none, 0), None);
        // A missing Node is not done either.
        assert_eq!(decided(&nodes[..1], &flagged, &none, &none, 0), None);
        // A Node registered afresh (no state) is done once its host rebooted, not before.
        let fresh = [
            node("a", Some("done"), false, false),
            node("b", None, false, false),
        ];
        assert_eq!(decided(&fresh, &flagged, &none, &none, 0), None);
        assert_eq!(
            decided(&fresh, &flagged, &none, &set(&["b"]), 0).unwrap().0,
            Outcome::Finished
        );
    }

    #[test]
    fn failures_above_max_failures_halt_and_at_most_max_failures_finish() {
        let flagged = set(&["a", "b", "c"]);
        let none = BTreeSet::new();
        let nodes = [
            node("a", Some("failed"), true, false),
            node("b", None, false, true),
            node("c", None, false, true),
        ];
        let (o, why) = decided(&nodes, &flagged, &none, &none, 0).unwrap();
        assert_eq!(o, Outcome::Halted);
        assert_eq!(
            why,
            "halted: 1 node(s) failed (a), more than failures.maxFailures 0; 2 flagged node(s) not rebooted (b, c). Why: a: no reason recorded"
        );
        // The reason is the controller's, as written on the Node.
        let mut a = nodes[0].clone();
        a.failure_reason = Some("drain timed out".into());
        let with_reason = [a, nodes[1].clone(), nodes[2].clone()];
        let (_, why) = decided(&with_reason, &flagged, &none, &none, 0).unwrap();
        assert!(why.ends_with("Why: a: drain timed out"), "{why}");
        assert_eq!(
            decided(&nodes, &flagged, &none, &none, 1),
            None,
            "maxFailures 1: the rollout goes on"
        );
        let nodes = [
            node("a", Some("failed"), true, false),
            node("b", Some("done"), false, false),
            node("c", Some("done"), false, false),
        ];
        let (o, why) = decided(&nodes, &flagged, &none, &none, 1).unwrap();
        assert_eq!(o, Outcome::Finished);
        assert!(why.contains("1 failed (a)"), "{why}");
    }

    #[test]
    fn a_budget_that_can_never_allow_a_disruption_decides_the_run_when_its_failure_halts() {
        let pdb = |spec: serde_json::Value| -> k8s_openapi::api::policy::v1::PodDisruptionBudget {
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "shop", "name": "web"},
                "spec": spec,
                "status": {"expectedPods": 3, "disruptionsAllowed": 0, "currentHealthy": 3, "desiredHealthy": 3},
            }))
            .unwrap()
        };
        let held = |spec| HeldBy {
            budget: "shop/web".into(),
            pod: "shop/web-1".into(),
            node: "n1".into(),
            pdb: pdb(spec),
        };
        // Only a drain that waits for such a budget is decided here: by default
        // (`drain.whenBlocked.never: fail`) the drain fails the node itself at once.
        let cfg = |yaml: &str| {
            rollboot::config::parse_str(&format!("drain: {{whenBlocked: {{never: wait}}}}\n{yaml}"))
                .unwrap()
        };
        let never = [held(serde_json::json!({"maxUnavailable": 0}))];
        let default = rollboot::config::parse_str("{}").unwrap();
        assert_eq!(blocked_for_good(&never, &default, 0), None);
        let (o, why) = blocked_for_good(&never, &cfg(""), 0).unwrap();
        assert_eq!(o, Outcome::Blocked);
        assert!(
            why.starts_with("blocked: PodDisruptionBudget shop/web can never allow a disruption (maxUnavailable is 0) and holds pod shop/web-1 on node n1"),
            "{why}"
        );
        let all_three = [held(serde_json::json!({"minAvailable": 3}))];
        assert!(blocked_for_good(&all_three, &cfg(""), 0).is_some());
        // A budget that may allow one later, a failure the rollout survives, or a drain that
        // deletes around the budget at its timeout: the run goes on.
        let later = [held(serde_json::json!({"maxUnavailable": 1}))];
        assert_eq!(blocked_for_good(&later, &cfg(""), 0), None);
        assert_eq!(
            blocked_for_good(&never, &cfg("failures: {maxFailures: 1}"), 0),
            None
        );
        assert!(blocked_for_good(&never, &cfg("failures: {maxFailures: 1}"), 1).is_some());
        assert_eq!(
            blocked_for_good(
                &never,
                &rollboot::config::parse_str(
                    "drain: {forceDeleteAfterTimeout: true, whenBlocked: {never: wait}}"
                )
                .unwrap(),
                0
            ),
            None
        );
    }

    #[test]
    fn a_stuck_run_names_every_node_it_waited_for() {
        let flagged = set(&["a", "b", "c"]);
        let nodes = [
            node("a", Some("done"), false, false),
            node("b", Some("draining"), true, false),
        ];
        let b = Bound {
            seconds: 12.0,
            from: "the faults stopped".into(),
            how: "x".into(),
        };
        assert_eq!(
            stuck_reason(&nodes, &flagged, &BTreeSet::new(), &BTreeSet::new(), &b),
            "stuck: not decided 12.0 s after the faults stopped (bound x); still waiting: b (draining, cordoned), c (no Node object)"
        );
    }
}
