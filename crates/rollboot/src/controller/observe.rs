//! What the leader tells about the rollout as it goes: the rollout's metrics and the
//! notifications due.
//!
//! Owns the three points where the controller's runtime reports to the outside: each pass
//! ([`Observer::pass`]: nodes by state, blockers by kind, per-node state ages, the lock's
//! holder, the halt; `blocked` and `windowOpened` notices), each node started
//! ([`Observer::started`]: `rolloutStarted`), and each Node write that changes a node's state
//! ([`Observer::written`]: phase durations; `nodeDone`, `nodeFailed`, `rolloutHalted`). The
//! decisions are pure ([`crate::notify::decide`]); the sending is queued
//! ([`crate::notify::Notifier`]).
//!
//! It must never write to the cluster, never wait on the network, and never change what the
//! controller decides: it only reads what the runtime already has in hand (what it needs of
//! the caches is handed in, read only when a notice needs it).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;

use super::decide::{self, Blocker};
use crate::config::Config;
use crate::lock::LockRecord;
use crate::metrics::{CyclePhase, Metrics, RolloutGauges};
use crate::node::{self as proto, NodeState, NodeView};
use crate::notify::{decide as notice, End, Notifier, Pass, Tracker};

/// The leader's reporter: its notification state and the notifier's queues, and what it
/// reports with (the config, the metrics, the identity rollboot holds the lock under).
pub(super) struct Observer {
    notifier: Notifier,
    tracker: Mutex<Tracker>,
    config: Arc<Config>,
    metrics: Arc<Metrics>,
    lock_owner: String,
}

/// The `kind` label of a blocker in `rollboot_blockers_active`.
pub fn blocker_kind(b: &Blocker) -> &'static str {
    match b {
        Blocker::WindowClosed => "window_closed",
        Blocker::LockHeldBy(_) => "lock_held",
        Blocker::TooManyUnready { .. } => "too_many_unready",
        Blocker::TooManyFailures { .. } => "too_many_failures",
        Blocker::BlockingPods { .. } => "blocking_pods",
        Blocker::Alerts { .. } => "alerts",
        Blocker::AlertsUnknown { .. } => "alerts_unknown",
        Blocker::AlertmanagerAlerts { .. } => "alertmanager_alerts",
        Blocker::AlertmanagerUnknown { .. } => "alertmanager_unknown",
    }
}

/// The rollout's gauges from one pass's Nodes, lock record and blockers (pure).
/// `views` holds at least every candidate and every node in the lock (a pass's views, see
/// [`decide::Snapshot::nodes`]); `states` counts every Node by state.
pub fn gauges(
    views: &[&NodeView],
    states: &HashMap<NodeState, usize>,
    record: &LockRecord,
    blockers: &[Blocker],
    config: &Config,
    lock_owner: &str,
) -> RolloutGauges {
    let mut g = RolloutGauges::default();
    for (state, count) in states {
        if *count > 0 {
            *g.nodes_by_state.entry(state.as_str()).or_default() += *count as u64;
        }
    }
    let failed = states.get(&NodeState::Failed).copied().unwrap_or(0);
    // A name lookup per node read, hashed: in a rollout of every node, thousands per pass.
    let in_lock: std::collections::HashSet<&str> =
        record.entries.keys().map(String::as_str).collect();
    for v in views {
        let locked = in_lock.contains(v.name.as_str());
        if !locked && decide::is_candidate(v, config) {
            *g.nodes_by_state.entry("waiting").or_default() += 1;
        }
        let Some(state) = v.state else { continue };
        if state.in_flight() && locked {
            if let Some(since) = v.state_since {
                g.node_state_since.insert(
                    v.name.clone(),
                    (state.as_str(), since.timestamp_millis() as f64 / 1000.0),
                );
            }
        }
    }
    for b in blockers {
        *g.blockers.entry(blocker_kind(b)).or_default() += 1;
    }
    g.lock_holder = record
        .holder
        .clone()
        .map(|h| (h.clone(), record.foreign_holder(lock_owner).is_some()));
    g.halted = notice::halts(failed, config.failures.max_failures);
    g
}

/// The phase a change of state completes, if it completes one.
pub fn completed(before: Option<NodeState>, after: Option<NodeState>) -> Option<CyclePhase> {
    match (before?, after?) {
        (NodeState::Draining, NodeState::Rebooting) => Some(CyclePhase::Drain),
        (NodeState::Rebooting, NodeState::Verifying) => Some(CyclePhase::Reboot),
        (NodeState::Verifying, NodeState::Done) => Some(CyclePhase::HealthGate),
        _ => None,
    }
}

impl Observer {
    /// A reporter for one controller replica (its queues start now, idle until a notice).
    pub(super) fn new(
        config: &Arc<Config>,
        metrics: Arc<Metrics>,
        identity: &str,
        lock_owner: String,
    ) -> Observer {
        metrics.replica(identity, config.clone());
        Observer {
            notifier: Notifier::start(&config.notifications, metrics.clone()),
            tracker: Mutex::new(Tracker::default()),
            config: config.clone(),
            metrics,
            lock_owner,
        }
    }

    /// Each pass of the leader, once its blockers are known (none when nothing waits): sets
    /// the rollout's gauges and sends the notices due.
    pub(super) fn pass(
        &self,
        views: &[&NodeView],
        states: &HashMap<NodeState, usize>,
        record: &LockRecord,
        blockers: &[Blocker],
        now: DateTime<Utc>,
    ) {
        let g = gauges(
            views,
            states,
            record,
            blockers,
            &self.config,
            &self.lock_owner,
        );
        let pending = g.nodes_by_state.get("waiting").copied().unwrap_or(0) as usize;
        self.metrics.set_rollout(g);
        let texts: Vec<String> = blockers.iter().map(|b| b.to_string()).collect();
        let schedule = self.config.schedule();
        let p = Pass {
            now,
            window_open: schedule.is_allowed(now),
            window_end: schedule.current_window_end(now),
            pending,
            in_flight: record.entries.len(),
            blockers: &texts,
            window_closed: blockers.iter().any(|b| matches!(b, Blocker::WindowClosed)),
            halted: blockers
                .iter()
                .any(|b| matches!(b, Blocker::TooManyFailures { .. })),
        };
        let due = self
            .tracker
            .lock()
            .expect("tracker")
            .pass(&p, self.config.notifications.blocked_after.to_chrono());
        self.notifier.send(due);
    }

    /// A node was started (written into the lock).
    pub(super) fn started(&self, node: &str, now: DateTime<Utc>) {
        let due = self.tracker.lock().expect("tracker").started(node, now);
        self.notifier.send(due);
    }

    /// A node's Node was deleted mid-cycle (`reason`): told.
    pub(super) fn gone(&self, node: &str, reason: &str, now: DateTime<Utc>) {
        let due = self
            .tracker
            .lock()
            .expect("tracker")
            .gone(node, reason, now);
        self.notifier.send(due);
    }

    /// After each successful Node write: a change of state ends a phase (timed) or a cycle
    /// (told). `cycle_start` (when the node's cycle started, from the lock) and `failed` (the
    /// failed nodes, this one included) are asked only when the write ends a cycle.
    pub(super) fn written(
        &self,
        before: &NodeView,
        after: &Node,
        cycle_start: impl FnOnce() -> Option<DateTime<Utc>>,
        failed: impl FnOnce() -> usize,
    ) {
        let now_view = NodeView::from_node(after);
        if before.state == now_view.state {
            return;
        }
        let (Some(state), at) = (
            now_view.state,
            now_view.state_since.unwrap_or_else(Utc::now),
        ) else {
            return;
        };
        let secs = |from: DateTime<Utc>| (at - from).num_milliseconds().max(0) as f64 / 1000.0;
        if let (Some(phase), Some(from)) =
            (completed(before.state, Some(state)), before.state_since)
        {
            self.metrics.phase(phase, secs(from));
        }
        let node = before.name.as_str();
        let end = match state {
            NodeState::Done => {
                let start = cycle_start();
                if let Some(s) = start {
                    self.metrics.phase(CyclePhase::Cycle, secs(s));
                }
                End::Done {
                    cycle: start.map(|s| at - s),
                }
            }
            NodeState::Failed => {
                let reason = after
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a: &BTreeMap<String, String>| a.get(proto::FAILURE_REASON))
                    .cloned()
                    .unwrap_or_default();
                // Counted as the controller counts them for its own verdict.
                End::Failed {
                    reason,
                    failed: failed(),
                    max_failures: self.config.failures.max_failures,
                }
            }
            _ => return,
        };
        let due = self.tracker.lock().expect("tracker").ended(node, &end, at);
        self.notifier.send(due);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_str;
    use crate::lock::LockEntry;
    use crate::node::fixtures::{annotate, node};

    #[test]
    fn only_the_forward_steps_of_a_cycle_complete_a_timed_phase() {
        use NodeState::*;
        assert_eq!(
            completed(Some(Draining), Some(Rebooting)),
            Some(CyclePhase::Drain)
        );
        assert_eq!(
            completed(Some(Rebooting), Some(Verifying)),
            Some(CyclePhase::Reboot)
        );
        assert_eq!(
            completed(Some(Verifying), Some(Done)),
            Some(CyclePhase::HealthGate)
        );
        assert_eq!(completed(Some(Draining), Some(Failed)), None);
        assert_eq!(completed(Some(Cordoning), Some(Draining)), None);
        assert_eq!(completed(None, Some(Cordoning)), None);
    }

    #[test]
    fn gauges_count_states_waiting_nodes_blockers_and_a_halt() {
        let config = parse_str("failures: {maxFailures: 1}").unwrap();
        let t = "2026-01-01T00:00:00.000Z";
        let flagged = annotate(node("a", &[]), proto::REBOOT_REQUIRED, "true");
        let state = |name: &str, st: &str| {
            annotate(
                annotate(node(name, &[]), proto::STATE, st),
                proto::STATE_SINCE,
                t,
            )
        };
        let (draining, f1, f2) = (
            state("b", "draining"),
            state("c", "failed"),
            state("d", "failed"),
        );
        let views: Vec<NodeView> = [flagged, draining, f1, f2]
            .iter()
            .map(NodeView::from_node)
            .collect();
        let mut record = LockRecord::default();
        record.holder = Some("ops-team".into());
        record.entries.insert(
            "b".into(),
            LockEntry {
                group: None,
                state: NodeState::Draining,
                since: crate::time::parse_annotation(t).unwrap(),
                leader: "x".into(),
            },
        );
        let mut states = HashMap::new();
        for s in views.iter().filter_map(|v| v.state) {
            *states.entry(s).or_default() += 1;
        }
        let g = gauges(
            &views.iter().collect::<Vec<_>>(),
            &states,
            &record,
            &[Blocker::LockHeldBy("ops-team".into())],
            &config,
            "rollboot/rollboot-system/rollboot-leader",
        );
        assert_eq!(g.nodes_by_state.get("waiting"), Some(&1));
        assert_eq!(g.nodes_by_state.get("draining"), Some(&1));
        assert_eq!(g.nodes_by_state.get("failed"), Some(&2));
        assert_eq!(g.blockers.get("lock_held"), Some(&1));
        assert_eq!(
            g.node_state_since.get("b"),
            Some(&("draining", 1_767_225_600.0))
        );
        assert_eq!(g.lock_holder, Some(("ops-team".into(), true)));
        assert!(g.halted, "2 failed, 1 tolerated");
    }
}
