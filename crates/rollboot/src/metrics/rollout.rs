//! The rollout's gauges as the leader saw it on its last pass: nodes by state, active blockers
//! by kind, when each node in flight entered its state, the lock's holder, the halt.
//!
//! Owns [`RolloutGauges`] and how they are written. Their headers are written by every replica
//! and their samples only by the one that leads (the leader sets them on each pass and they
//! are dropped when it stops leading), so a standby exports none and dashboards can aggregate
//! with `max`. It must never compute the rollout: the controller's pass does.

use std::collections::BTreeMap;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::exposition::{write_gauge, write_gauges};

/// What the leader saw of the rollout on its last pass.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RolloutGauges {
    /// Nodes per `rollboot.dev/state`, plus `waiting` for flagged nodes not yet started.
    pub nodes_by_state: BTreeMap<&'static str, u64>,
    /// Active blockers per kind (each kind 0 or more).
    pub blockers: BTreeMap<&'static str, u64>,
    /// For each node in flight: (state, since when, Unix seconds).
    pub node_state_since: BTreeMap<String, (&'static str, f64)>,
    /// The lock's holder and whether it is someone other than this installation.
    pub lock_holder: Option<(String, bool)>,
    /// Failed nodes past `failures.maxFailures`: nothing new starts.
    pub halted: bool,
}

/// Every blocker kind, so each is exported (0 when inactive) once the leader has looked.
pub const BLOCKER_KINDS: [&str; 7] = [
    "window_closed",
    "lock_held",
    "too_many_unready",
    "too_many_failures",
    "blocking_pods",
    "alerts",
    "alerts_unknown",
];

/// The states of `rollboot_nodes`, in order.
pub const NODE_STATES: [&str; 7] = [
    "waiting",
    "cordoning",
    "draining",
    "rebooting",
    "verifying",
    "done",
    "failed",
];

/// The rollout's families at one scrape: the leader's last gauges, `None` on a replica that
/// does not lead.
#[derive(Debug)]
pub struct RolloutFamilies(pub Option<RolloutGauges>);

impl Collector for RolloutFamilies {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let e = &mut encoder;
        let r = self.0.as_ref();
        let count = |m: &BTreeMap<&'static str, u64>, k| m.get(k).copied().unwrap_or(0);
        write_gauges(
            e,
            "nodes",
            "Nodes by rollboot state (waiting: flagged, not started); exported by the leader",
            r.into_iter().flat_map(|r| {
                NODE_STATES.map(|state| ([("state", state)], count(&r.nodes_by_state, state)))
            }),
        )?;
        write_gauges(
            e,
            "blockers_active",
            "Active blockers of new reboots by kind; exported by the leader",
            r.into_iter().flat_map(|r| {
                BLOCKER_KINDS.map(|kind| ([("kind", kind)], count(&r.blockers, kind)))
            }),
        )?;
        write_gauges(
            e,
            "node_state_since_timestamp_seconds",
            "Unix time each node in flight entered its state; exported by the leader",
            r.into_iter().flat_map(|r| {
                r.node_state_since.iter().map(|(node, (state, since))| {
                    ([("node", node.as_str()), ("state", *state)], *since)
                })
            }),
        )?;
        write_gauges(
            e,
            "lock_holder_info",
            "1 for the maintenance lock's holder; foreign=\"true\" when it is not this rollboot; exported by the leader",
            r.and_then(|r| r.lock_holder.as_ref()).map(|(holder, foreign)| {
                let foreign = if *foreign { "true" } else { "false" };
                ([("holder", holder.as_str()), ("foreign", foreign)], 1u64)
            }),
        )?;
        write_gauge(
            e,
            "rollout_halted",
            "1 while failed nodes exceed failures.maxFailures; exported by the leader",
            r.map(|r| u64::from(r.halted)),
        )
    }
}
