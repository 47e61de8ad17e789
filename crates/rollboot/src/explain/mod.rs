//! `rollboot explain NODE`: why a node is not rebooting now, and when it will.
//!
//! Owns the [`Explanation`] of one node, built from what the cluster says ([`Gathered`]) at an
//! instant the caller passes: every reason that holds the node, each with a stable code
//! ([`ReasonCode`]) and a sentence, and when `rollboot plan` predicts it starts. Pure: it must
//! never do I/O nor read a clock; the cluster is what [`read`] gathered.
//!
//! It must never decide anything itself. Every reason is what the controller's own pure code
//! says of the same snapshot a pass builds, so the two cannot disagree:
//! - whether the node starts now: the start of new nodes, stage by stage as a pass runs it
//!   ([`decide::start`], [`decide::Queued::blockers_read`], [`decide::Pick::decide`]), in
//!   `decision`;
//! - what holds every node (a closed window, the lock, pods, alerts, unready or failed nodes):
//!   [`decide::blockers`];
//! - which slot, group or budget holds it: the pick ([`decide::looked_at`],
//!   [`decide::pick_among`]) and what had no room for it ([`decide::no_room`]), run even while a
//!   blocker holds, so every reason is said at once;
//! - whether it may be taken at all ([`decide::is_candidate`]'s parts, [`decide::resting_until`])
//!   and where a node in flight stands ([`decide::position`], [`decide::next_step`]);
//! - when it would start: [`crate::plan::build`]'s schedule.
//!
//! The reasons' sentences are in `reasons`, the budgets the pick reads in `headroom`, the text
//! form in `render` (the JSON form is the serialization).

mod decision;
mod headroom;
pub mod read;
mod reasons;
mod render;
#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::Config;
use crate::controller::decide::{self, Blocker, Snapshot};
use crate::lock::LockRecord;
use crate::node::NodeView;
use crate::plan::Cluster;

/// Why a node is held, as a stable code (the JSON's `code`).
///
/// Codes are never renamed nor reused: scripts match on them. A new one goes in its place in
/// the order a person reads them (the node's own state first, then what holds every node, then
/// its place in the pick, then a node in flight), with its sentence in `reasons`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ReasonCode {
    /// Neither the agent's sentinel nor an operator's request flags it.
    NotFlagged,
    /// The exclude label, `nodes.selector`, or the Node's deletion keeps it out.
    Excluded,
    /// It failed: the reason, and `rollboot retry` to clear it.
    Failed,
    /// Its drain was held and `drain.whenBlocked` quarantined it.
    Quarantined,
    /// Another actor takes the node out of service (the cluster autoscaler, Karpenter,
    /// node-maintenance-operator, an out-of-service taint, a maintenance condition another
    /// writer set): rollboot leaves it alone, and it holds a slot while it is out.
    OtherMaintenance,
    /// No maintenance window is open, or a blackout is in force: until the next opening.
    WindowClosed,
    /// An operator paused rollboot (`rollboot pause`): by whom, why, since when.
    Paused,
    /// Another holder than rollboot holds the maintenance lock.
    LockHeldByOther,
    /// Pods match a blocking selector, alerts fire, too many nodes are not Ready, or too many
    /// failed.
    Blocked,
    /// rollboot rebooted it less than `nodes.minRebootInterval` ago: until it may start.
    RestingUntil,
    /// Every slot of `maxNodes` is taken: by which nodes.
    MaxNodesReached,
    /// Its `concurrency.groupBy` group, or its FleetLock group, has its limit.
    GroupFull,
    /// The budget-aware pick passes it over: a budget of its pods has no room now.
    PassedOver,
    /// In flight, held by a hook (a gate annotation, a blocking webhook, `drain.settle`).
    WaitingForHook,
    /// In flight: its state, and since when.
    InFlight,
}

impl ReasonCode {
    /// The stable code, as in the JSON.
    pub fn code(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// One reason that holds the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplainReason {
    /// What holds it.
    pub code: ReasonCode,
    /// The sentence a person reads, naming the label, node, pod, budget or setting.
    pub message: String,
    /// Since when it holds, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Until when it holds at most, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
}

impl ExplainReason {
    fn new(code: ReasonCode, message: impl Into<String>) -> ExplainReason {
        ExplainReason {
            code,
            message: message.into(),
            since: None,
            until: None,
        }
    }

    fn since(mut self, t: Option<DateTime<Utc>>) -> ExplainReason {
        self.since = t;
        self
    }

    fn until(mut self, t: Option<DateTime<Utc>>) -> ExplainReason {
        self.until = t;
        self
    }
}

/// The report, serialized as the `--output json` object.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The node.
    pub node: String,
    /// The controller starts it on its next pass: nothing holds it.
    pub eligible: bool,
    /// When it would start, as `rollboot plan` predicts it (the cluster-wide blockers taken
    /// as cleared now); its cycle's start when in flight; `None` when it would not start (not
    /// flagged, excluded, failed, or no opening comes).
    pub starts_at: Option<DateTime<Utc>>,
    /// Every reason that holds it; empty when eligible.
    pub reasons: Vec<ExplainReason>,
    /// What could not be checked from here (a Prometheus or an Alertmanager out of reach):
    /// the controller asks it before each start.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_checked: Vec<String>,
}

impl Explanation {
    /// The node is in flight (its cycle under way).
    pub fn in_flight(&self) -> bool {
        self.reasons.iter().any(|r| r.code == ReasonCode::InFlight)
    }

    /// Whether anything holds the node: not eligible now, and not in flight.
    pub fn held(&self) -> bool {
        !self.eligible && !self.in_flight()
    }

    /// Whether a reason with `code` is given.
    pub fn has(&self, code: ReasonCode) -> bool {
        self.reasons.iter().any(|r| r.code == code)
    }
}

/// What the cluster says, as [`read`] gathered it: what `rollboot plan` reads, and
/// Alertmanager's answer.
#[derive(Clone, Debug, Default)]
pub struct Gathered {
    /// The Leases' lock, the Nodes, Pods, budgets, and Prometheus's answer.
    pub cluster: Cluster,
    /// What Alertmanager answered for `blockers.alertmanager` (the active alerts that block, or
    /// why it could not be asked), with its URL; `None` when the config has none.
    pub alertmanager: Option<(String, Result<Vec<String>, String>)>,
}

/// The node asked about does not exist.
#[derive(Debug, thiserror::Error)]
#[error("no node named `{node}` in the cluster ({count} node(s) read)")]
pub struct NoSuchNode {
    /// The name asked about.
    pub node: String,
    /// How many Nodes the cluster has.
    pub count: usize,
}

/// Explains `node` from what the cluster says at `now`.
pub fn explain(
    gathered: &Gathered,
    config: &Config,
    node: &str,
    now: DateTime<Utc>,
) -> Result<Explanation, NoSuchNode> {
    let cluster = &gathered.cluster;
    let n = cluster
        .nodes
        .iter()
        .find(|n| n.name == node)
        .ok_or_else(|| NoSuchNode {
            node: node.to_string(),
            count: cluster.nodes.len(),
        })?;
    let record = LockRecord::from_lease(cluster.lock.clone());
    let ours = crate::lock::lock_owner(config);
    let nodes: Vec<&NodeView> = cluster.nodes.iter().collect();
    // A NodeMaintenance is already on each view it names (`other_actor`, by the read).
    let snap = Snapshot {
        maintained: &decide::NOT_MAINTAINED,
        headroom: None,
        nodes: &nodes,
        in_flight: &record.entries,
        foreign_holder: record.foreign_holder(&ours),
        blocking_pods: &[],
        now,
    };
    let pods = crate::plan::blocking_pods(cluster, config);
    let counts: Vec<(String, usize)> = pods.iter().map(|(s, p)| (s.clone(), p.len())).collect();
    let (alerts, not_checked) = reasons::alerts(gathered);
    let decided = decision::decide(&snap, config, cluster, n, &counts, &alerts, now);
    let facts = reasons::Facts {
        node: n,
        snap: &snap,
        record: &record,
        config,
        decided: &decided,
        blocking_pods: &pods,
        now,
    };
    let eligible = decided.starts(&n.name);
    let reasons = if eligible {
        Vec::new()
    } else {
        reasons::all(&facts)
    };
    let starts_at = match record.entries.get(&n.name) {
        Some(entry) => Some(entry.since),
        None if eligible => Some(now),
        None => crate::plan::build(cluster, config, &Default::default(), now)
            .nodes
            .into_iter()
            .find(|p| p.name == n.name)
            .and_then(|p| p.start),
    };
    Ok(Explanation {
        node: n.name.clone(),
        eligible,
        starts_at,
        reasons,
        not_checked,
    })
}

/// The blockers of `snap` at `now` with the pods matching each blocking selector and the
/// alerts: what [`decide::Queued::blockers_read`] computes before it lets the pick run.
pub(super) fn cluster_blockers(
    snap: &Snapshot<'_>,
    config: &Config,
    blocking_pods: &[(String, usize)],
    alerts: &[Blocker],
    now: DateTime<Utc>,
) -> Vec<Blocker> {
    let with_pods = Snapshot {
        blocking_pods,
        now,
        ..*snap
    };
    let mut out = decide::blockers(&with_pods, config, now);
    out.extend(alerts.iter().cloned());
    out
}
