//! The controller's decisions, pure: what blocks new work, which flagged nodes start next,
//! and what each in-flight node's next step is.
//!
//! Owns candidate selection (`nodes.selector`, the exclude label, order, `maxNodes`, the
//! per-group limit), the blockers, the start of new nodes as one decision ([`start()`]), the
//! per-node state machine as a function of (node, lock entry, config, now), which of a Node's
//! states belong to the current cycle ([`this_cycle`]), the in-flight record rebuilt from the
//! Nodes when the lock's is lost ([`rebuild()`]), and what is said about malformed annotations
//! ([`annotation_warnings`]) and failures ([`after_failure`]). It must never do I/O, read a
//! clock, nor import kube or tokio: the runtime in [`super`] reads what the cluster says, hands
//! it over (a [`Snapshot`], a Node's view and its lock entry), and carries out what is decided.
//!
//! Where each thing lives (every item is named from here, `decide::X`):
//! - `blockers`: what keeps any node from starting ([`Blocker`], [`blockers()`]), and what keeps
//!   one node from starting or holds a slot (candidates, `minRebootInterval`, failed nodes);
//! - `pick`: which waiting nodes start, in order, within the slots, the groups and the budgets
//!   ([`pick_among`]), and what had no room for a node it left ([`no_room`]);
//! - `shutdown`: the cycles of hosts that go down by themselves (their own shutdown, a FleetLock
//!   host's reboot): which start at once, and why such a cycle ends without a reboot;
//! - `start`: the start of new nodes in a pass, from the Nodes to the plan ([`start()`]);
//! - `step`: where a node in flight stands ([`position`]) and its next step ([`next_step`]);
//! - `rebuild`: the in-flight record rebuilt from the Nodes ([`rebuild()`]);
//! - `conditions`: KEP-5683's maintenance conditions a node should carry ([`conditions_due`]);
//! - `warnings`: what is said of a Node's malformed annotations ([`annotation_warnings`]).

mod blockers;
mod conditions;
mod pick;
mod rebuild;
mod shutdown;
mod start;
mod step;
#[cfg(test)]
mod tests;
mod warnings;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::budgets::Headroom;
use crate::config::Config;
use crate::lock::LockEntry;
use crate::node::{NodeState, NodeView};

pub use blockers::{
    after_failure, blockers, holds_a_slot, is_candidate, look_again, next_rested,
    other_maintenance, out_of_service, resting, resting_until, returning_to_service, Blocker,
    OutOfService, CLEAR_FAILED,
};
pub use conditions::{after_state_write, conditions_due, publishing, ConditionWrite};
pub use pick::{
    budget_aware, draining, fleetlock_limits, group_of, looked_at, no_room, pick, pick_among,
    pick_detail, reads_per_pass, scan_window, sort_candidates, stale_passed_over, NoRoom, Picked,
};
pub use rebuild::rebuild;
pub use shutdown::{
    abandoned, over_max_nodes, overtaken, shutdown_not_followed, shutdown_room, shutting_down,
    undrained_at_hand_off,
};
pub use start::{start, Blocked, BudgetReads, Pick, Queued, Start, StartPlan, Starting, Then};
pub use step::{
    failure_event_reason, may_request_reboot, next_step, position, reboot_step,
    state_contradiction, this_cycle, Position, Step, LIFECYCLE_SETTLE, REBOOT_ATTEMPTS,
};
pub use warnings::{annotation_warnings, has_annotation_warnings, AnnotationWarning};

/// The flagged nodes whose `reboot-requested` is undated (`now` or any value that is not an
/// RFC 3339 instant, written by hand): the controller writes the instant it sees them in its
/// place, before it picks, so such a request takes its turn as of when it was first seen,
/// after every flag dated earlier and before every later one, across restarts and leaders.
pub fn undated_requests<'a>(nodes: impl IntoIterator<Item = &'a NodeView>) -> Vec<&'a NodeView> {
    nodes
        .into_iter()
        .filter(|n| n.request_undated && !n.deleting)
        .collect()
}

/// Whether a pass must read this node although it did not change: it may be picked (flagged,
/// which an undated request to be dated is too), block new starts (not Ready, failed), need
/// its PreferNoSchedule taint put on or taken off, or carry a rollboot annotation to warn about.
/// Every decision of a pass over the nodes this picks, plus those in the lock, is the decision
/// over every node; the controller keeps the set up to date as Nodes change
/// ([`crate::controller::node_cache::ViewCache::with_notable`]).
pub fn needs_a_look(n: &NodeView, config: &Config) -> bool {
    n.flagged()
        || n.shutdown_requested
        || n.other_actor.is_some()
        || publishing(n)
        || (config.concurrency.count_cordoned && n.unschedulable)
        || n.passed_over.is_some()
        || !n.ready
        || n.state == Some(NodeState::Failed)
        || has_annotation_warnings(n)
        || config
            .hooks
            .prefer_no_schedule_taint
            .as_ref()
            .is_some_and(|key| n.taints.iter().any(|t| t.key == *key))
}

/// The cluster as the controller sees it at one instant.
#[derive(Clone, Copy)]
pub struct Snapshot<'a> {
    /// The Nodes: every one, or at least every one [`needs_a_look`] picks and every one in the
    /// lock. The others change no decision here, so a pass hands over only those (issue 14: a
    /// look at every Node per pass was a cost in the cluster's size).
    pub nodes: &'a [&'a NodeView],
    /// The nodes listed in the maintenance lock.
    pub in_flight: &'a BTreeMap<String, LockEntry>,
    /// Holder of the lock when it is someone other than rollboot.
    pub foreign_holder: Option<&'a str>,
    /// For each blocking pod selector (as written), how many pods match it.
    pub blocking_pods: &'a [(String, usize)],
    /// The instant the picks are made at (`nodes.minRebootInterval` and
    /// `concurrency.passOverFor` count to it).
    pub now: DateTime<Utc>,
    /// What the budget-aware pick knows (the budgets of the nodes it looks at, and of those in
    /// flight); `None`: nodes are taken in order only.
    pub headroom: Option<&'a Headroom>,
    /// The nodes a NodeMaintenance (medik8s' node-maintenance-operator) takes out, each with
    /// the actor in words; [`NOT_MAINTAINED`] where none was read.
    pub maintained: &'a BTreeMap<String, String>,
}

/// No node named by a NodeMaintenance: the kind is not installed, or was not read.
pub static NOT_MAINTAINED: BTreeMap<String, String> = BTreeMap::new();
