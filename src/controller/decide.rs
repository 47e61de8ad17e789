//! The controller's decisions, pure: what blocks new work, which flagged nodes start next, and
//! what each in-flight node's next step is.
//!
//! Owns candidate selection (`nodes.selector`, the exclude label, order, `maxNodes`, the per-group
//! limit), the blockers, and the per-node state machine as a function of (node, lock entry,
//! config, now). It must never do I/O or read a clock: the runtime in [`super`] feeds it
//! what the cluster says and carries out the step it returns.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use chrono::{DateTime, Utc};

use crate::config::{Config, NodeOrder};
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
                "{} failed node(s) ({}), at most {max} tolerated: clear `rollboot.dev/state` to resume",
                nodes.len(),
                nodes.join(", ")
            ),
            Blocker::BlockingPods { selector, count } => {
                write!(f, "{count} pod(s) match the blocking selector `{selector}`")
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
        }
    }
}

/// The cluster as the controller sees it at one instant.
pub struct Snapshot<'a> {
    /// Every Node.
    pub nodes: &'a [NodeView],
    /// The nodes listed in the maintenance lock.
    pub in_flight: &'a BTreeMap<String, LockEntry>,
    /// Holder of the lock when it is someone other than rollboot.
    pub foreign_holder: Option<&'a str>,
    /// For each blocking pod selector (as written), how many pods match it.
    pub blocking_pods: &'a [(String, usize)],
}

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

/// A node rollboot may start: flagged, selected, not excluded, not failed, not being deleted.
pub fn is_candidate(n: &NodeView, config: &Config) -> bool {
    n.flagged()
        && !n.excluded
        && !n.deleting
        && n.state != Some(NodeState::Failed)
        && config.node_selector().matches(&n.labels)
}

/// The flagged nodes to start now, in order, within `maxNodes` and the per-group limit.
/// Call only when [`blockers`] is empty.
pub fn pick<'a>(s: &Snapshot<'a>, config: &Config) -> Vec<&'a NodeView> {
    let max = config.concurrency.max_nodes as usize;
    let mut busy = s.in_flight.len();
    if busy >= max {
        return Vec::new();
    }
    let group = config.group_limit();
    let by_name: HashMap<&str, &NodeView> = s.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let group_of = |n: &NodeView, key: &str| n.labels.get(key).cloned().unwrap_or_default();
    let mut per_group: HashMap<String, usize> = HashMap::new();
    if let Some((key, _)) = group {
        for name in s.in_flight.keys() {
            // A node in the lock that is gone from the cluster still counts in no group.
            if let Some(n) = by_name.get(name.as_str()) {
                *per_group.entry(group_of(n, key)).or_default() += 1;
            }
        }
    }
    let mut candidates: Vec<&NodeView> = s
        .nodes
        .iter()
        .filter(|n| !s.in_flight.contains_key(&n.name) && is_candidate(n, config))
        .collect();
    match config.nodes.order {
        NodeOrder::Name => candidates.sort_by(|a, b| a.name.cmp(&b.name)),
        // Unparseable flag instants go last, then by name, so the order is total and stable.
        NodeOrder::OldestFlag => candidates.sort_by(|a, b| {
            (a.flagged_at.is_none(), a.flagged_at, &a.name).cmp(&(
                b.flagged_at.is_none(),
                b.flagged_at,
                &b.name,
            ))
        }),
    }
    let mut out = Vec::new();
    for n in candidates {
        if busy >= max {
            break;
        }
        if let Some((key, limit)) = group {
            let g = per_group.entry(group_of(n, key)).or_default();
            if *g >= limit as usize {
                continue;
            }
            *g += 1;
        }
        busy += 1;
        out.push(n);
    }
    out
}

/// How long a step waits, at most, for the node-lifecycle controller to copy a cordon or an
/// uncordon into the `unschedulable` taint before writing again. That copy changes the Node's
/// resourceVersion a few milliseconds after rollboot's write, so a write decided before it
/// arrives is refused with 409 and decided again: a wasted round trip on every cycle. Bounded,
/// because a cluster whose controller-manager is down (or which runs without that controller)
/// never writes the taint, and the rollout must not hang on it.
pub const LIFECYCLE_SETTLE: chrono::Duration = chrono::Duration::seconds(2);

/// The next thing to do for a node listed in the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write `state: cordoning` and cordon; record `cordoned-by` unless an operator had cordoned it.
    Cordon {
        /// Whether rollboot owns the cordon (and so will uncordon).
        record_cordoned_by: bool,
    },
    /// Write `state: draining` (if not yet) and drain until the deadline.
    Drain {
        /// When the drain times out.
        deadline: DateTime<Utc>,
    },
    /// Write `state: rebooting`, `boot-id-before` and a fresh `reboot` token.
    RequestReboot,
    /// Nothing to do until the node comes back (or the deadline passes).
    AwaitReboot {
        /// When the reboot times out.
        deadline: DateTime<Utc>,
    },
    /// The node is back with a new boot ID and Ready: write `state: verifying`.
    MarkVerifying,
    /// Uncordon (rollboot cordoned it).
    Uncordon,
    /// Wait for the health gate, then finish.
    HealthGate {
        /// When the gate times out.
        deadline: DateTime<Utc>,
    },
    /// Nothing to do until the node-lifecycle controller has copied the cordon or uncordon into
    /// its taint (a watched change), or until this instant.
    Settle {
        /// When to go on without it.
        until: DateTime<Utc>,
    },
    /// Write `state: failed` with the reason, and free the slot.
    Fail(String),
    /// Free the node's slot in the lock.
    Free(String),
}

/// The per-node state machine: from what the cluster says, the next step. Idempotent: the same
/// inputs give the same step, so a step interrupted at any point is simply decided again.
pub fn next_step(
    node: Option<&NodeView>,
    entry: &LockEntry,
    config: &Config,
    now: DateTime<Utc>,
) -> Step {
    let Some(n) = node else {
        return Step::Free("the node was deleted from the cluster".into());
    };
    if n.deleting {
        return Step::Free("the node is being deleted".into());
    }
    let since = n.state_since.unwrap_or(entry.since);
    // A state older than the lock entry belongs to an earlier cycle.
    let current = n.state.filter(|_| since >= entry.since);
    match current {
        None => Step::Cordon {
            record_cordoned_by: !n.unschedulable || n.cordoned_by.is_some(),
        },
        Some(NodeState::Done) => Step::Free("its cycle is done".into()),
        Some(NodeState::Failed) => Step::Free("it failed".into()),
        Some(NodeState::Cordoning) if !n.unschedulable => Step::Cordon {
            record_cordoned_by: true,
        },
        Some(NodeState::Cordoning)
            if n.cordon_taint_pending() && now < since + LIFECYCLE_SETTLE =>
        {
            Step::Settle {
                until: since + LIFECYCLE_SETTLE,
            }
        }
        Some(NodeState::Cordoning) => Step::Drain {
            deadline: now + config.drain.timeout.to_chrono(),
        },
        Some(NodeState::Draining) => {
            let deadline = since + config.drain.timeout.to_chrono();
            if now >= deadline && !config.drain.force_delete_after_timeout {
                Step::Fail(format!(
                    "the drain did not finish within {}",
                    config.drain.timeout
                ))
            } else {
                Step::Drain { deadline }
            }
        }
        Some(NodeState::Rebooting) => {
            let Some(before) = &n.boot_id_before else {
                return Step::RequestReboot;
            };
            // Back means a new boot, Ready, and the node-lifecycle controller agreeing: until it
            // takes its not-ready/unreachable taints off, pods scheduled there after an
            // uncordon can be evicted by the NoExecute taint.
            if &n.boot_id != before && !n.boot_id.is_empty() && n.ready && !n.not_ready_taint {
                return Step::MarkVerifying;
            }
            let deadline = since + config.reboot.timeout.to_chrono();
            if now >= deadline {
                Step::Fail(format!(
                    "the node did not come back with a new boot ID and Ready within {}",
                    config.reboot.timeout
                ))
            } else {
                Step::AwaitReboot { deadline }
            }
        }
        Some(NodeState::Verifying) => {
            if n.unschedulable && n.cordoned_by.is_some() {
                return Step::Uncordon;
            }
            // The health gate may pass at once, and its `done` would race the taint's removal.
            if n.cordon_taint_pending() && now < since + LIFECYCLE_SETTLE {
                return Step::Settle {
                    until: since + LIFECYCLE_SETTLE,
                };
            }
            let deadline = since + config.health_gate.timeout.to_chrono();
            if now >= deadline {
                Step::Fail(format!(
                    "the health gate did not pass within {}",
                    config.health_gate.timeout
                ))
            } else {
                Step::HealthGate { deadline }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_str;
    use crate::node::fixtures::{annotate, node};
    use crate::node::{self as proto, NodeView};

    fn t(s: &str) -> DateTime<Utc> {
        crate::time::parse_annotation(s).unwrap()
    }

    fn cfg(yaml: &str) -> Config {
        parse_str(yaml).unwrap()
    }

    fn flagged(name: &str, at: &str, labels: &[(&str, &str)]) -> NodeView {
        NodeView::from_node(&annotate(node(name, labels), proto::REBOOT_REQUIRED, at))
    }

    fn entry(since: &str) -> LockEntry {
        LockEntry {
            state: NodeState::Cordoning,
            since: t(since),
            leader: "c-0".into(),
        }
    }

    fn names(v: Vec<&NodeView>) -> Vec<&str> {
        v.into_iter().map(|n| n.name.as_str()).collect()
    }

    fn snapshot<'a>(
        nodes: &'a [NodeView],
        in_flight: &'a BTreeMap<String, LockEntry>,
    ) -> Snapshot<'a> {
        Snapshot {
            nodes,
            in_flight,
            foreign_holder: None,
            blocking_pods: &[],
        }
    }

    #[test]
    fn the_oldest_flag_goes_first_and_max_nodes_caps_the_batch() {
        let nodes = vec![
            flagged("a", "2026-01-03T00:00:00Z", &[]),
            flagged("b", "2026-01-01T00:00:00Z", &[]),
            flagged("c", "2026-01-02T00:00:00Z", &[]),
        ];
        let none = BTreeMap::new();
        let c = cfg("concurrency: {maxNodes: 2}");
        assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["b", "c"]);
        let c = cfg("nodes: {order: name}");
        assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["a"]);
    }

    #[test]
    fn a_full_lock_starts_nothing() {
        let nodes = vec![flagged("a", "2026-01-01T00:00:00Z", &[])];
        let busy = BTreeMap::from([("z".to_string(), entry("2026-01-01T00:00:00Z"))]);
        assert!(pick(&snapshot(&nodes, &busy), &cfg("{}")).is_empty());
    }

    #[test]
    fn excluded_unselected_and_unflagged_nodes_are_never_candidates() {
        let nodes = vec![
            flagged(
                "excluded",
                "2026-01-01T00:00:00Z",
                &[(proto::EXCLUDE, "true")],
            ),
            flagged("gpu", "2026-01-01T00:00:00Z", &[("pool", "gpu")]),
            NodeView::from_node(&node("quiet", &[("pool", "web")])),
            flagged("web", "2026-01-02T00:00:00Z", &[("pool", "web")]),
        ];
        let none = BTreeMap::new();
        let c = cfg("nodes: {selector: 'pool=web'}\nconcurrency: {maxNodes: 5}");
        assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["web"]);
    }

    #[test]
    fn the_per_group_limit_spreads_a_batch_across_zones() {
        let z = "topology.kubernetes.io/zone";
        let nodes = vec![
            flagged("a1", "2026-01-01T00:00:00Z", &[(z, "a")]),
            flagged("a2", "2026-01-01T00:00:01Z", &[(z, "a")]),
            flagged("b1", "2026-01-01T00:00:02Z", &[(z, "b")]),
            flagged("c1", "2026-01-01T00:00:03Z", &[(z, "c")]),
        ];
        let c = cfg(
            "concurrency: {maxNodes: 2, groupBy: topology.kubernetes.io/zone, maxNodesPerGroup: 1}",
        );
        let none = BTreeMap::new();
        assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["a1", "b1"]);
        let busy = BTreeMap::from([("a1".to_string(), entry("2026-01-01T00:00:00Z"))]);
        assert_eq!(names(pick(&snapshot(&nodes, &busy), &c)), ["b1"]);
    }

    #[test]
    fn a_failure_beyond_max_failures_blocks_new_work() {
        let mut bad = flagged("bad", "2026-01-01T00:00:00Z", &[]);
        bad.state = Some(NodeState::Failed);
        let nodes = vec![bad, flagged("ok", "2026-01-01T00:00:00Z", &[])];
        let none = BTreeMap::new();
        let s = snapshot(&nodes, &none);
        let b = blockers(&s, &cfg("{}"), t("2026-01-05T00:00:00Z"));
        assert!(
            matches!(&b[..], [Blocker::TooManyFailures { max: 0, .. }]),
            "{b:?}"
        );
        assert!(blockers(
            &s,
            &cfg("failures: {maxFailures: 1}"),
            t("2026-01-05T00:00:00Z")
        )
        .is_empty());
        // A failed node is never picked again until an operator clears it.
        assert_eq!(names(pick(&s, &cfg("concurrency: {maxNodes: 3}"))), ["ok"]);
    }

    #[test]
    fn unready_nodes_and_a_foreign_lock_holder_block() {
        let mut down = flagged("down", "2026-01-01T00:00:00Z", &[]);
        down.ready = false;
        let nodes = vec![down];
        let none = BTreeMap::new();
        let blocking = [("app=backup".to_string(), 2)];
        let s = Snapshot {
            nodes: &nodes,
            in_flight: &none,
            foreign_holder: Some("ops-team"),
            blocking_pods: &blocking,
        };
        let b = blockers(&s, &cfg("{}"), t("2026-01-05T00:00:00Z"));
        assert_eq!(b.len(), 3, "{b:?}");
        assert_eq!(b[0], Blocker::LockHeldBy("ops-team".into()));
        // The same unready node in flight is rollboot's own doing and blocks nothing.
        let busy = BTreeMap::from([("down".to_string(), entry("2026-01-01T00:00:00Z"))]);
        assert!(blockers(
            &snapshot(&nodes, &busy),
            &cfg("{}"),
            t("2026-01-05T00:00:00Z")
        )
        .is_empty());
    }

    fn in_state(n: NodeView, state: NodeState, since: &str) -> NodeView {
        NodeView {
            state: Some(state),
            state_since: Some(t(since)),
            ..n
        }
    }

    #[test]
    fn a_new_entry_cordons_and_leaves_an_operator_cordon_alone() {
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:00:01Z");
        let n = flagged("n", "2026-01-01T00:00:00Z", &[]);
        assert_eq!(
            next_step(Some(&n), &e, &c, now),
            Step::Cordon {
                record_cordoned_by: true
            }
        );
        let cordoned = NodeView {
            unschedulable: true,
            ..n.clone()
        };
        assert_eq!(
            next_step(Some(&cordoned), &e, &c, now),
            Step::Cordon {
                record_cordoned_by: false
            }
        );
        // `done` from an earlier cycle does not count for this one.
        let old = in_state(n, NodeState::Done, "2025-12-01T00:00:00Z");
        assert_eq!(
            next_step(Some(&old), &e, &c, now),
            Step::Cordon {
                record_cordoned_by: true
            }
        );
    }

    #[test]
    fn a_cordoned_node_drains_until_its_timeout_then_fails() {
        let c = cfg("drain: {timeout: 10m}");
        let e = entry("2026-01-01T00:00:00Z");
        let n = NodeView {
            unschedulable: true,
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Draining,
                "2026-01-01T00:00:00Z",
            )
        };
        assert_eq!(
            next_step(Some(&n), &e, &c, t("2026-01-01T00:05:00Z")),
            Step::Drain {
                deadline: t("2026-01-01T00:10:00Z")
            }
        );
        assert!(matches!(
            next_step(Some(&n), &e, &c, t("2026-01-01T00:10:00Z")),
            Step::Fail(_)
        ));
        let force = cfg("drain: {timeout: 10m, forceDeleteAfterTimeout: true}");
        assert!(matches!(
            next_step(Some(&n), &e, &force, t("2026-01-01T00:11:00Z")),
            Step::Drain { .. }
        ));
    }

    #[test]
    fn a_rebooting_node_is_verified_only_with_a_new_boot_id_and_ready() {
        let c = cfg("reboot: {timeout: 5m}");
        let e = entry("2026-01-01T00:00:00Z");
        let base = NodeView {
            unschedulable: true,
            boot_id_before: Some("boot-1".into()),
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Rebooting,
                "2026-01-01T00:01:00Z",
            )
        };
        let now = t("2026-01-01T00:02:00Z");
        assert_eq!(
            next_step(Some(&base), &e, &c, now),
            Step::AwaitReboot {
                deadline: t("2026-01-01T00:06:00Z")
            }
        );
        let back_not_ready = NodeView {
            boot_id: "boot-2".into(),
            ready: false,
            ..base.clone()
        };
        assert!(matches!(
            next_step(Some(&back_not_ready), &e, &c, now),
            Step::AwaitReboot { .. }
        ));
        let back = NodeView {
            boot_id: "boot-2".into(),
            ..base.clone()
        };
        assert_eq!(next_step(Some(&back), &e, &c, now), Step::MarkVerifying);
        // Ready with a new boot ID, but the node-lifecycle controller still has its not-ready
        // taint on: pods scheduled after an uncordon now could be evicted by it. Not back yet.
        let still_tainted = NodeView {
            not_ready_taint: true,
            ..back.clone()
        };
        assert!(matches!(
            next_step(Some(&still_tainted), &e, &c, now),
            Step::AwaitReboot { .. }
        ));
        assert!(matches!(
            next_step(Some(&base), &e, &c, t("2026-01-01T00:06:00Z")),
            Step::Fail(_)
        ));
    }

    #[test]
    fn after_a_cordon_or_uncordon_the_next_write_waits_for_the_lifecycle_taint_a_bounded_time() {
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let since = "2026-01-01T00:01:00Z";
        // Cordoned by rollboot; the controller-manager has not written its taint yet.
        let cordoned = NodeView {
            unschedulable: true,
            cordoned_by: Some("c-0".into()),
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Cordoning,
                since,
            )
        };
        assert_eq!(
            next_step(Some(&cordoned), &e, &c, t("2026-01-01T00:01:00.500Z")),
            Step::Settle {
                until: t("2026-01-01T00:01:02Z")
            }
        );
        let mirrored = NodeView {
            unschedulable_taint: true,
            ..cordoned.clone()
        };
        assert!(matches!(
            next_step(Some(&mirrored), &e, &c, t("2026-01-01T00:01:00.500Z")),
            Step::Drain { .. }
        ));
        // A cluster that never writes the taint only costs the bound.
        assert!(matches!(
            next_step(Some(&cordoned), &e, &c, t("2026-01-01T00:01:02Z")),
            Step::Drain { .. }
        ));
        // Uncordoned with `verifying`; the taint still there.
        let uncordoned = NodeView {
            unschedulable: false,
            cordoned_by: None,
            unschedulable_taint: true,
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Verifying,
                since,
            )
        };
        assert!(matches!(
            next_step(Some(&uncordoned), &e, &c, t("2026-01-01T00:01:00.010Z")),
            Step::Settle { .. }
        ));
        let gone = NodeView {
            unschedulable_taint: false,
            ..uncordoned
        };
        assert!(matches!(
            next_step(Some(&gone), &e, &c, t("2026-01-01T00:01:00.010Z")),
            Step::HealthGate { .. }
        ));
    }

    #[test]
    fn verifying_uncordons_only_what_rollboot_cordoned() {
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:02:00Z");
        let ours = NodeView {
            unschedulable: true,
            cordoned_by: Some("rollboot".into()),
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Verifying,
                "2026-01-01T00:01:00Z",
            )
        };
        assert_eq!(next_step(Some(&ours), &e, &c, now), Step::Uncordon);
        let operators = NodeView {
            cordoned_by: None,
            ..ours
        };
        assert!(matches!(
            next_step(Some(&operators), &e, &c, now),
            Step::HealthGate { .. }
        ));
    }

    #[test]
    fn a_deleted_or_finished_node_frees_its_slot() {
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:02:00Z");
        assert!(matches!(next_step(None, &e, &c, now), Step::Free(_)));
        let done = in_state(
            flagged("n", "2026-01-01T00:00:00Z", &[]),
            NodeState::Done,
            "2026-01-01T00:01:00Z",
        );
        assert!(matches!(next_step(Some(&done), &e, &c, now), Step::Free(_)));
    }
}
