//! Why nodes may not start: what keeps every waiting node from starting (the [`Blocker`]s),
//! and what keeps one node from starting or holds a slot of `maxNodes` (not a candidate,
//! resting after a reboot under `nodes.minRebootInterval`, failed and left cordoned).
//!
//! Owns the blockers as the Nodes, the lock and the reads from outside them say (the reads
//! themselves are the runtime's), when to look again while they hold, the failed nodes that
//! hold a slot or return to service, and what a failure means for the rollout. It must never
//! read anything itself: what it decides from is handed over.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};

use super::Snapshot;
use crate::config::Config;
use crate::lock::LockEntry;
use crate::node::{NodeState, NodeView};

/// Something that keeps new reboots from starting (in-flight nodes always finish).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocker {
    /// No maintenance window is open, or a blackout is in force.
    WindowClosed,
    /// The maintenance lock is held by another holder.
    LockHeldBy(String),
    /// Too many nodes outside maintenance are not Ready.
    TooManyUnready {
        /// The unready nodes.
        nodes: Vec<String>,
        /// `blockers.maxUnreadyNodes`.
        max: u32,
    },
    /// More failed nodes than `failures.maxFailures`.
    TooManyFailures {
        /// The failed nodes.
        nodes: Vec<String>,
        /// `failures.maxFailures`.
        max: u32,
    },
    /// Pods match a blocking selector.
    BlockingPods {
        /// The selector as written.
        selector: String,
        /// How many pods match.
        count: usize,
    },
    /// Alerts fire in Prometheus (`blockers.prometheus`).
    Alerts {
        /// The blocking alerts' names.
        names: Vec<String>,
    },
    /// Prometheus could not be asked: fail safe, nothing new starts.
    AlertsUnknown {
        /// The Prometheus URL.
        url: String,
        /// What went wrong.
        error: String,
    },
    /// Alertmanager has active alerts no silence or inhibition covers
    /// (`blockers.alertmanager`).
    AlertmanagerAlerts {
        /// Their names.
        names: Vec<String>,
    },
    /// Alertmanager could not be asked: fail safe, nothing new starts.
    AlertmanagerUnknown {
        /// Its URL.
        url: String,
        /// What went wrong.
        error: String,
    },
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::WindowClosed => write!(f, "no maintenance window is open"),
            Blocker::LockHeldBy(h) => write!(f, "the maintenance lock is held by `{h}`"),
            Blocker::TooManyUnready { nodes, max } => write!(
                f,
                "{} node(s) not Ready ({}), at most {max} allowed",
                nodes.len(),
                nodes.join(", ")
            ),
            Blocker::TooManyFailures { nodes, max } => write!(
                f,
                "{} failed node(s) ({}), at most {max} tolerated: {CLEAR_FAILED} to resume",
                nodes.len(),
                nodes.join(", ")
            ),
            // The count comes from a list of one (rollboot asks whether any pod matches).
            Blocker::BlockingPods { selector, .. } => {
                write!(
                    f,
                    "at least one pod matches the blocking selector `{selector}`"
                )
            }
            Blocker::Alerts { names } => write!(
                f,
                "{} alert(s) firing in Prometheus: {}",
                names.len(),
                names.join(", ")
            ),
            Blocker::AlertsUnknown { url, error } => write!(
                f,
                "Prometheus at {url} could not be asked for alerts (blocking to be safe): {error}"
            ),
            Blocker::AlertmanagerAlerts { names } => write!(
                f,
                "{} alert(s) active in Alertmanager, not silenced nor inhibited: {}",
                names.len(),
                names.join(", ")
            ),
            Blocker::AlertmanagerUnknown { url, error } => write!(
                f,
                "Alertmanager at {url} could not be asked for alerts (blocking to be safe): {error}"
            ),
        }
    }
}

/// How an operator clears a failed node (the words every message about failures uses).
pub const CLEAR_FAILED: &str = "clear a failed node with `rollboot retry NODE`";

/// Everything that keeps new nodes from starting now; empty means "go".
pub fn blockers(s: &Snapshot<'_>, config: &Config, now: DateTime<Utc>) -> Vec<Blocker> {
    let mut out = Vec::new();
    if !config.schedule().is_allowed(now) {
        out.push(Blocker::WindowClosed);
    }
    if let Some(h) = s.foreign_holder {
        out.push(Blocker::LockHeldBy(h.to_string()));
    }
    let unready: Vec<String> = s
        .nodes
        .iter()
        .copied()
        .filter(|n| !n.ready && !s.in_flight.contains_key(&n.name))
        .map(|n| n.name.clone())
        .collect();
    if unready.len() > config.blockers.max_unready_nodes as usize {
        out.push(Blocker::TooManyUnready {
            nodes: unready,
            max: config.blockers.max_unready_nodes,
        });
    }
    let failed: Vec<String> = s
        .nodes
        .iter()
        .filter(|n| n.state == Some(NodeState::Failed))
        .map(|n| n.name.clone())
        .collect();
    if failed.len() > config.failures.max_failures as usize {
        out.push(Blocker::TooManyFailures {
            nodes: failed,
            max: config.failures.max_failures,
        });
    }
    for (selector, count) in s.blocking_pods {
        if *count > 0 {
            out.push(Blocker::BlockingPods {
                selector: selector.clone(),
                count: *count,
            });
        }
    }
    out
}

/// A node rollboot may start: flagged, selected, not excluded, not failed, not being deleted,
/// and no other actor taking it out as its Node shows ([`NodeView::other_actor`]; a
/// NodeMaintenance, read apart, is the snapshot's: see [`other_maintenance`]).
pub fn is_candidate(n: &NodeView, config: &Config) -> bool {
    n.flagged()
        && !n.excluded
        && !n.deleting
        && n.state != Some(NodeState::Failed)
        && n.other_actor.is_none()
        && config.node_selector().matches(&n.labels)
}

/// The other actor taking node `n` out of service, in words: its Node says so (a taint, a
/// maintenance condition another writer set), or a NodeMaintenance names it.
pub fn other_maintenance<'s>(n: &'s NodeView, s: &'s Snapshot<'_>) -> Option<&'s str> {
    n.other_actor
        .as_deref()
        .or_else(|| s.maintained.get(&n.name).map(String::as_str))
}

/// Why a node outside the lock is out of service, and so holds one of `maxNodes`' slots (and
/// of its group's) for the nodes rollboot plans to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutOfService {
    /// Failed, and left cordoned by rollboot ([`holds_a_slot`]).
    Failed,
    /// Its host shuts down by itself (`shutdown-requested`): it is going down anyway, and
    /// takes a slot from the moment rollboot knows, drained or not.
    ShuttingDown,
    /// Another actor takes it out (the autoscaler, Karpenter, node-maintenance-operator, an
    /// out-of-service taint, a maintenance condition another writer set).
    OtherMaintenance(String),
    /// Cordoned by someone else, counted under `concurrency.countCordoned`.
    Cordoned,
}

/// Why `n` (not in the lock) holds a slot, if it does ([`OutOfService`]).
pub fn out_of_service(n: &NodeView, s: &Snapshot<'_>, config: &Config) -> Option<OutOfService> {
    if n.deleting || s.in_flight.contains_key(&n.name) {
        return None;
    }
    if holds_a_slot(n) {
        Some(OutOfService::Failed)
    } else if n.shutdown_requested {
        Some(OutOfService::ShuttingDown)
    } else if let Some(actor) = other_maintenance(n, s) {
        Some(OutOfService::OtherMaintenance(actor.to_string()))
    } else if config.concurrency.count_cordoned && n.unschedulable {
        Some(OutOfService::Cordoned)
    } else {
        None
    }
}

/// When a node rollboot rebooted less than `nodes.minRebootInterval` ago may start again;
/// `None` when it may now (no interval, no reboot on record, or long enough ago).
pub fn resting_until(n: &NodeView, config: &Config, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let interval = config.nodes.min_reboot_interval?;
    let until = n.history.last_reboot? + interval.to_chrono();
    (until > now).then_some(until)
}

/// The waiting nodes that `nodes.minRebootInterval` holds, each with the instant it may start
/// ([`resting_until`]), in the snapshot's order.
pub fn resting<'a, 's>(
    s: &'s Snapshot<'a>,
    config: &'s Config,
) -> impl Iterator<Item = (&'a NodeView, DateTime<Utc>)> + 's {
    s.nodes
        .iter()
        .copied()
        .filter(|n| !s.in_flight.contains_key(&n.name) && is_candidate(n, config))
        .filter_map(|n| Some((n, resting_until(n, config, s.now)?)))
}

/// The soonest instant a flagged node held only by `nodes.minRebootInterval` may start: when
/// the controller looks again.
pub fn next_rested(s: &Snapshot<'_>, config: &Config) -> Option<DateTime<Utc>> {
    resting(s, config).map(|(_, until)| until).min()
}

/// A failed node that rollboot cordoned and that is still cordoned: it is out of service
/// because of rollboot, so it takes one of `maxNodes`' slots (and of its group's) until an
/// operator clears it or `failures.returnToService` uncordons it. Capacity is capacity: an
/// operator reads `maxNodes` as the most nodes rollboot may take out at once.
pub fn holds_a_slot(n: &NodeView) -> bool {
    n.state == Some(NodeState::Failed) && n.unschedulable && n.cordoned_by.is_some() && !n.deleting
}

/// The nodes outside the lock that hold a slot ([`out_of_service`]): failed nodes rollboot
/// left cordoned, hosts shutting down by themselves, nodes other actors take out, and under
/// `concurrency.countCordoned` every node cordoned.
pub(super) fn out_holding<'a, 's>(
    s: &'s Snapshot<'a>,
    config: &'s Config,
) -> impl Iterator<Item = &'a NodeView> + 's {
    s.nodes
        .iter()
        .copied()
        .filter(|n| out_of_service(n, s, config).is_some())
}

/// The failed nodes `failures.returnToService` uncordons now: each [`holds_a_slot`], is out
/// of the lock, and its host is up and Ready (no not-ready or unreachable taint): a node still
/// down in a reboot, or not back, stays cordoned, and so does a quarantined one.
pub fn returning_to_service<'a>(
    nodes: &[&'a NodeView],
    in_flight: &BTreeMap<String, LockEntry>,
    config: &Config,
) -> Vec<&'a NodeView> {
    if !config.failures.return_to_service {
        return Vec::new();
    }
    nodes
        .iter()
        .copied()
        .filter(|n| {
            holds_a_slot(n)
                && n.quarantined.is_none()
                && !in_flight.contains_key(&n.name)
                && n.ready
                && !n.not_ready_taint
        })
        .collect()
}

/// How often Prometheus and Alertmanager are asked again while their alerts (or their
/// failure) block a flagged node.
const ALERTS_RECHECK: chrono::Duration = chrono::Duration::seconds(5);

/// When to look again while `blockers` hold (decided at `now`). A closed window opens on the
/// clock: look again when it opens; other blockers clear with a change the runtime watches
/// (or with its safety-net resync).
pub fn look_again(config: &Config, blockers: &[Blocker], now: DateTime<Utc>) -> DateTime<Utc> {
    if blockers.iter().any(|b| matches!(b, Blocker::WindowClosed)) {
        config
            .schedule()
            .openings(now, 1)
            .first()
            .map(|o| o.start.max(now + chrono::Duration::milliseconds(100)))
            .unwrap_or(now + chrono::Duration::seconds(1))
    } else if blockers.iter().any(|b| {
        matches!(
            b,
            Blocker::Alerts { .. }
                | Blocker::AlertsUnknown { .. }
                | Blocker::AlertmanagerAlerts { .. }
                | Blocker::AlertmanagerUnknown { .. }
        )
    }) {
        // Alerts are not watched: ask again soon, while something waits.
        now + ALERTS_RECHECK
    } else {
        now + chrono::Duration::seconds(30)
    }
}

/// What a node's failure means for the rollout, `failed` counting every failed node with it.
pub fn after_failure(failed: usize, config: &Config) -> String {
    let max = config.failures.max_failures;
    if failed > max as usize {
        format!(
            "the rollout halts: {failed} failed node(s), at most {max} tolerated \
             (failures.maxFailures); no new node starts until an operator clears one: \
             {CLEAR_FAILED}"
        )
    } else {
        format!(
            "the rollout goes on: {failed} failed node(s), up to {max} tolerated \
             (failures.maxFailures)"
        )
    }
}
