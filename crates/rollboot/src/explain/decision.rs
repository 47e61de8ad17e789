//! What the controller's start of new nodes decides of a snapshot, as a pass runs it, by node
//! name: which nodes take a slot now, the blockers, and the pick with what it passed over and
//! what had no room for the node asked about.
//!
//! Owns the replay of [`crate::controller::decide::start`]'s stages in a pass's order (the
//! hosts shutting down by themselves, then the blockers, then the pick with the budgets it asks
//! for), and their continuation past the stage where a pass stops: the blockers and the pick
//! are run even while something holds, so every reason is said at once. Pure: it must never do
//! I/O; the budgets are those of the pods and budgets read ([`super::headroom`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::budgets::BudgetHold;
use crate::config::Config;
use crate::controller::decide::{self, Blocker, NoRoom, Snapshot, Then};
use crate::lock::LockEntry;
use crate::node::{NodeState, NodeView};
use crate::plan::Cluster;

/// What the start of new nodes decides of one snapshot, by node name.
#[derive(Debug, Default)]
pub(super) struct Decided {
    /// The nodes a pass takes slots for now: the hosts shutting down by themselves, or the
    /// pick's nodes when nothing blocks.
    pub(super) started: Vec<String>,
    /// Hosts shutting down by themselves start alone in this pass; the pick comes on the next
    /// one, a moment later, with them in flight.
    pub(super) shutdowns_first: bool,
    /// Hosts shutting down by themselves that wait for a slot (`maxNodes` and
    /// `concurrency.maxShutdownDrains` are taken).
    pub(super) deferred_shutdowns: Vec<String>,
    /// Hosts shutting down by themselves left undrained: another holder has the lock.
    pub(super) undrained_shutdowns: Vec<String>,
    /// What keeps every waiting node from starting now (empty: nothing).
    pub(super) blockers: Vec<Blocker>,
    /// The pick's nodes, in order: those the pass starts when nothing blocks, else those it
    /// would start if the blockers cleared now.
    pub(super) picked: Vec<String>,
    /// The nodes the budget-aware pick passes over, with the budget that holds each.
    pub(super) passed_over: Vec<(String, BudgetHold)>,
    /// The lock's entries as the pick counts them (with the hosts shutting down that start
    /// first).
    pub(super) in_flight: BTreeMap<String, LockEntry>,
    /// What had no room for the node asked about ([`decide::no_room`]); empty when it was
    /// picked or passed over, or is no candidate.
    pub(super) no_room: Vec<NoRoom>,
}

impl Decided {
    /// Whether `node` takes a slot now, or on the pass right after this one's hosts shutting
    /// down by themselves (nothing blocking it).
    pub(super) fn starts(&self, node: &str) -> bool {
        let has = |v: &[String]| v.iter().any(|n| n == node);
        has(&self.started)
            || (self.shutdowns_first && self.blockers.is_empty() && has(&self.picked))
    }
}

fn names(nodes: &[&NodeView]) -> Vec<String> {
    nodes.iter().map(|n| n.name.clone()).collect()
}

/// Runs the start of new nodes on `snap` (without blocking pods nor budgets, as a pass first
/// builds it) as a pass does, then on past where it stops, for `node`.
pub(super) fn decide(
    snap: &Snapshot<'_>,
    config: &Config,
    cluster: &Cluster,
    node: &NodeView,
    blocking_pods: &[(String, usize)],
    alerts: &[Blocker],
    now: DateTime<Utc>,
) -> Decided {
    let first = decide::start(snap, config);
    let mut d = Decided {
        deferred_shutdowns: names(&first.deferred_shutdowns),
        undrained_shutdowns: names(&first.undrained_shutdowns),
        in_flight: snap.in_flight.clone(),
        ..Decided::default()
    };
    let mut picked_by_pass = false;
    match first.then {
        Then::Shutdowns(urgent) => {
            d.shutdowns_first = true;
            for s in &urgent {
                let (name, group) = s.slot();
                d.started.push(name.clone());
                // As `take_slots` records it: the next pass counts it in flight.
                let entry = LockEntry {
                    state: NodeState::Cordoning,
                    since: now,
                    leader: String::new(),
                    group,
                };
                d.in_flight.insert(name, entry);
            }
        }
        Then::NothingWaits => {}
        Then::Queued(queued) => match queued.blockers_read(blocking_pods, alerts.to_vec(), now) {
            Err(blocked) => d.blockers = blocked.blockers,
            Ok(pick) => {
                let headroom = pick
                    .budget_reads()
                    .map(|r| super::headroom::of(cluster, config, r.looked_at, &r.draining));
                let plan = pick.decide(headroom.as_ref());
                d.started = plan.start.iter().map(|s| s.node.name.clone()).collect();
                d.picked = d.started.clone();
                d.passed_over = owned(&plan.passed_over);
                picked_by_pass = true;
            }
        },
    }
    let next = Snapshot {
        in_flight: &d.in_flight,
        ..*snap
    };
    if d.blockers.is_empty() && !picked_by_pass {
        d.blockers = super::cluster_blockers(&next, config, blocking_pods, alerts, now);
    }
    let picked = pick(&next, config, cluster, blocking_pods, now);
    if !picked_by_pass {
        d.picked = picked.0;
        d.passed_over = picked.1;
    }
    let taken: Vec<&NodeView> = d
        .picked
        .iter()
        .filter_map(|p| snap.nodes.iter().copied().find(|n| n.name == *p))
        .collect();
    let left =
        !d.picked.contains(&node.name) && !d.passed_over.iter().any(|(n, _)| *n == node.name);
    if left && decide::is_candidate(node, config) {
        d.no_room = decide::no_room(&next, config, &taken, node);
    }
    d
}

fn owned(v: &[(&NodeView, BudgetHold)]) -> Vec<(String, BudgetHold)> {
    v.iter().map(|(n, h)| (n.name.clone(), h.clone())).collect()
}

/// The pick of `s` as [`decide::Pick::decide`] makes it ([`decide::looked_at`], then
/// [`decide::pick_among`] with the budgets of the nodes it looks at and of those draining),
/// whatever blocks: the nodes taken, and those passed over.
fn pick(
    s: &Snapshot<'_>,
    config: &Config,
    cluster: &Cluster,
    blocking_pods: &[(String, usize)],
    now: DateTime<Utc>,
) -> (Vec<String>, Vec<(String, BudgetHold)>) {
    let s = Snapshot {
        blocking_pods,
        now,
        ..*s
    };
    let (free, looked) = decide::looked_at(&s, config);
    let draining: Vec<&str> = decide::draining(&s).collect();
    let headroom = (decide::budget_aware(config) && !looked.is_empty())
        .then(|| super::headroom::of(cluster, config, &looked, &draining));
    let s = Snapshot {
        headroom: headroom.as_ref(),
        ..s
    };
    let picked = decide::pick_among(&s, config, free, looked);
    (names(&picked.nodes), owned(&picked.passed_over))
}
