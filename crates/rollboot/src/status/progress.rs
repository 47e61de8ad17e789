//! `rollboot status --watch`: a rollout as it goes, from one change of the cluster to the next.
//!
//! Owns [`Progress`], what the watch remembers between two changes (each node's place in the
//! rollout, the pause, the halt), and the [`Board`] it makes of each change: the nodes in
//! flight with their state and since when, done out of total, the waiting and failed nodes,
//! and what changed, as a frame a terminal redraws ([`Render`]), one line per change
//! ([`Board::lines`]) or one JSON object per change ([`Board::json_line`]). Pure: the caller
//! passes what the watches keep and `now`; it must never read the cluster or the clock, nor
//! print. Where a node is comes from the report [`super::build`] makes and the controller's own
//! [`decide::is_candidate`], so the watch says what `rollboot status` says.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{ClusterState, Status};
use crate::config::Config;
use crate::controller::decide;
use crate::node::{NodeState, NodeView};
use crate::render::{instant, Render};

/// How many of the latest changes the frame shows.
const RECENT: usize = 5;
/// The progress bar's width, in characters.
const BAR: usize = 30;
/// How many waiting or failed nodes the frame names (a screen, not a list of thousands).
const LISTED: usize = 10;

/// The first [`LISTED`] of `names`, and how many more.
fn first_of(names: &[String]) -> String {
    let mut s = names
        .iter()
        .take(LISTED)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > LISTED {
        let _ = write!(s, " and {} more", names.len() - LISTED);
    }
    s
}

/// Where a node is in the rollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum NodePhase {
    /// Flagged, waiting for its turn.
    Waiting,
    /// In a cycle: its state, since when.
    #[serde(rename_all = "camelCase")]
    InFlight {
        /// Its state now.
        state: NodeState,
        /// Since when.
        since: Option<DateTime<Utc>>,
    },
    /// Its cycle finished and it is no longer flagged.
    Done {
        /// Since when.
        since: Option<DateTime<Utc>>,
    },
    /// Its cycle failed; an operator clears it (`rollboot retry`).
    Failed {
        /// Why.
        reason: Option<String>,
    },
}

impl NodePhase {
    /// How a line says it.
    fn phrase(&self) -> String {
        match self {
            NodePhase::Waiting => "flagged, waiting".into(),
            NodePhase::InFlight { state, .. } => state.to_string(),
            NodePhase::Done { .. } => "done".into(),
            NodePhase::Failed { reason } => match reason {
                Some(r) => format!("failed: {r}"),
                None => "failed".into(),
            },
        }
    }
}

/// Where `n` is, as `status` reports it: in the lock's record or an in-progress state, failed,
/// waiting (a candidate of the controller's), done; `None` when it takes no part.
fn phase(n: &NodeView, status: &Status, config: &Config) -> Option<NodePhase> {
    // A lock entry whose node is already done or failed (the controller drops it next) is
    // where the node says it is.
    let entry = status.lock.in_flight.iter().find(|e| e.node == n.name);
    if let Some(e) = entry.filter(|e| e.state.in_flight()) {
        return Some(NodePhase::InFlight {
            state: e.state,
            since: Some(e.since),
        });
    }
    match n.state {
        Some(s) if s.in_flight() => Some(NodePhase::InFlight {
            state: s,
            since: n.state_since,
        }),
        Some(NodeState::Failed) => Some(NodePhase::Failed {
            reason: n.failure_reason.clone(),
        }),
        _ if decide::is_candidate(n, config) => Some(NodePhase::Waiting),
        Some(NodeState::Done) => Some(NodePhase::Done {
            since: n.state_since,
        }),
        _ => None,
    }
}

/// One thing that changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// When: the node's state-since for a new state, else when the watch saw it.
    pub at: DateTime<Utc>,
    /// The node, when it is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What it is now, in a few words.
    pub what: String,
}

/// A node in flight on the board.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Moving {
    /// Node name.
    pub node: String,
    /// Its state.
    pub state: NodeState,
    /// Since when.
    pub since: Option<DateTime<Utc>>,
}

/// A failed node on the board.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stopped {
    /// Node name.
    pub node: String,
    /// Why.
    pub reason: Option<String>,
}

/// The rollout at one change, serialized as `--watch -o json`'s object (one per line).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Board {
    /// The instant of the change.
    pub now: DateTime<Utc>,
    /// The nodes of this rollout: every node waiting, in flight or failed at some moment since
    /// the watch began.
    pub total: usize,
    /// Of those, the nodes whose cycle is done.
    pub done: usize,
    /// The nodes in flight, by name.
    pub in_flight: Vec<Moving>,
    /// The nodes waiting for their turn, by name.
    pub waiting: Vec<String>,
    /// The failed nodes, by name.
    pub failed: Vec<Stopped>,
    /// Who holds rollboot back: an operator's pause or another tool's lock.
    pub paused: Option<String>,
    /// What keeps new reboots from starting now, as `rollboot status` says it.
    pub blockers: Vec<String>,
    /// What changed since the previous board (everything there is, on the first).
    pub changes: Vec<Change>,
    /// Nothing will move without an operator: no node waits or is in flight, or the rollout
    /// is halted on failures with none in flight.
    pub finished: bool,
    /// The latest changes, the newest last (the frame's tail).
    #[serde(skip)]
    pub recent: Vec<Change>,
}

/// What the watch remembers from one change to the next.
#[derive(Debug, Default)]
pub struct Progress {
    /// The nodes that took part since the watch began, and where each was last.
    phases: BTreeMap<String, Option<NodePhase>>,
    paused: Option<String>,
    halted: bool,
    recent: VecDeque<Change>,
}

impl Progress {
    /// A watch that has seen nothing yet.
    pub fn new() -> Progress {
        Progress::default()
    }

    /// The board of the cluster as `snap` says at `now`, with what changed since the last call.
    pub fn observe(&mut self, config: &Config, snap: &ClusterState, now: DateTime<Utc>) -> Board {
        let status = super::build(config, snap, now);
        let mut changes = Vec::new();
        let mut seen = BTreeSet::new();
        for n in &snap.nodes {
            seen.insert(n.name.as_str());
            let p = phase(n, &status, config);
            let takes_part = !matches!(p, None | Some(NodePhase::Done { .. }));
            if !takes_part && !self.phases.contains_key(&n.name) {
                continue;
            }
            let last = self.phases.insert(n.name.clone(), p.clone());
            // The same words are no change: a state's instant moving from the lock's entry to
            // the Node's own is not a new state.
            let said = |p: &Option<NodePhase>| p.as_ref().map(NodePhase::phrase);
            if last.as_ref().map(said) != Some(said(&p)) {
                changes.push(node_change(&n.name, p.as_ref(), now));
            }
        }
        for (name, p) in self.phases.iter_mut() {
            if !seen.contains(name.as_str()) && p.is_some() {
                *p = None;
                changes.push(Change {
                    at: now,
                    node: Some(name.clone()),
                    what: "deleted".into(),
                });
            }
        }
        self.lock_changes(&status, now, &mut changes);
        self.recent.extend(changes.iter().cloned());
        while self.recent.len() > RECENT {
            self.recent.pop_front();
        }
        self.board(&status, now, changes)
    }

    /// The pause and the halt, when they change.
    fn lock_changes(&mut self, status: &Status, now: DateTime<Utc>, changes: &mut Vec<Change>) {
        let l = &status.lock;
        let paused = match (&l.pause, l.foreign, &l.holder) {
            (Some(p), _, _) => Some(format!(
                "paused by {}{}",
                p.by,
                p.reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            )),
            (None, true, Some(h)) => Some(format!("held by `{h}`, not rollboot: paused")),
            _ => None,
        };
        if paused != self.paused {
            changes.push(Change {
                at: now,
                node: None,
                what: paused.clone().unwrap_or_else(|| "resumed".into()),
            });
            self.paused = paused;
        }
        let f = &status.failures;
        if f.halted != self.halted {
            changes.push(Change {
                at: now,
                node: None,
                what: if f.halted {
                    format!(
                        "halted: {} failed node(s), {} tolerated (failures.maxFailures)",
                        f.failed.len(),
                        f.max_failures
                    )
                } else {
                    "no longer halted".into()
                },
            });
            self.halted = f.halted;
        }
    }

    fn board(&self, status: &Status, now: DateTime<Utc>, changes: Vec<Change>) -> Board {
        let mut b = Board {
            now,
            total: self.phases.len(),
            done: 0,
            in_flight: Vec::new(),
            waiting: Vec::new(),
            failed: Vec::new(),
            paused: self.paused.clone(),
            blockers: status.blockers.clone(),
            changes,
            finished: false,
            recent: self.recent.iter().cloned().collect(),
        };
        for (name, p) in &self.phases {
            match p {
                Some(NodePhase::Done { .. }) => b.done += 1,
                Some(NodePhase::Waiting) => b.waiting.push(name.clone()),
                Some(NodePhase::InFlight { state, since }) => b.in_flight.push(Moving {
                    node: name.clone(),
                    state: *state,
                    since: *since,
                }),
                Some(NodePhase::Failed { reason }) => b.failed.push(Stopped {
                    node: name.clone(),
                    reason: reason.clone(),
                }),
                None => {}
            }
        }
        b.finished = b.in_flight.is_empty() && (b.waiting.is_empty() || self.halted);
        b
    }
}

/// The change of node `name` to `p` (`None`: it left the rollout), seen at `now`.
fn node_change(name: &str, p: Option<&NodePhase>, now: DateTime<Utc>) -> Change {
    let since = match p {
        Some(NodePhase::InFlight { since, .. } | NodePhase::Done { since }) => *since,
        _ => None,
    };
    Change {
        at: since.unwrap_or(now),
        node: Some(name.into()),
        what: match p {
            Some(p) => p.phrase(),
            None => "no longer flagged".into(),
        },
    }
}

impl Change {
    /// `2026-03-29T02:00:05Z node-0001 draining`.
    fn line(&self) -> String {
        match &self.node {
            Some(n) => format!("{} {n} {}", instant(self.at), self.what),
            None => format!("{} {}", instant(self.at), self.what),
        }
    }
}

impl Board {
    /// `1/3 done, 1 in flight, 1 waiting, 0 failed`.
    fn counts(&self) -> String {
        format!(
            "{}/{} done, {} in flight, {} waiting, {} failed",
            self.done,
            self.total,
            self.in_flight.len(),
            self.waiting.len(),
            self.failed.len()
        )
    }

    /// One line per change, each ending with the counts, for an output that is not a terminal.
    pub fn lines(&self) -> String {
        let mut out = String::new();
        for c in &self.changes {
            let _ = writeln!(out, "{}  [{}]", c.line(), self.counts());
        }
        out
    }

    /// The board as one line of JSON.
    pub fn json_line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_else(|e| {
            serde_json::json!({"error": format!("the board cannot be written as JSON: {e}")})
                .to_string()
        });
        s.push('\n');
        s
    }

    /// Whether `other` shows the same rollout: the same nodes where they were, the same pause
    /// and blockers (the instant and the changes aside).
    pub fn same_as(&self, other: &Board) -> bool {
        Board {
            now: other.now,
            changes: other.changes.clone(),
            recent: other.recent.clone(),
            ..self.clone()
        } == *other
    }
}

impl Render for Board {
    /// The frame a terminal redraws: the counts with a progress bar, the nodes in flight, the
    /// waiting and failed ones, the pause and the blockers, the latest changes.
    fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "rollboot status --watch   {}   (Ctrl-C to stop)\n",
            instant(self.now)
        );
        let filled = (BAR * self.done).checked_div(self.total).unwrap_or(0);
        let _ = writeln!(
            out,
            "[{}{}]  {}",
            "#".repeat(filled),
            "-".repeat(BAR - filled),
            self.counts()
        );
        if self.total == 0 {
            let _ = writeln!(out, "no node is flagged, in flight or failed");
        }
        if !self.in_flight.is_empty() {
            let _ = writeln!(out, "in flight:");
            for m in &self.in_flight {
                let since = m.since.map(|t| format!("  since {}", instant(t)));
                let _ = writeln!(
                    out,
                    "  {}  {}{}",
                    m.node,
                    m.state,
                    since.unwrap_or_default()
                );
            }
        }
        if !self.waiting.is_empty() {
            let _ = writeln!(out, "waiting:  {}", first_of(&self.waiting));
        }
        if !self.failed.is_empty() {
            let _ = writeln!(out, "failed:");
            for f in self.failed.iter().take(LISTED) {
                let reason = f.reason.as_deref().unwrap_or("no reason recorded");
                let _ = writeln!(out, "  {}  {reason} (`rollboot retry {}`)", f.node, f.node);
            }
            if self.failed.len() > LISTED {
                let _ = writeln!(out, "  and {} more", self.failed.len() - LISTED);
            }
        }
        if let Some(p) = &self.paused {
            let _ = writeln!(out, "lock:     {p}; `rollboot resume` to go on");
        }
        for b in &self.blockers {
            let _ = writeln!(out, "blocked:  {b}");
        }
        if !self.recent.is_empty() {
            let _ = writeln!(out, "latest:");
            for c in &self.recent {
                let _ = writeln!(out, "  {}", c.line());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::fixtures::{annotate, node};
    use crate::node::{FAILURE_REASON, REBOOT_REQUIRED, STATE, STATE_SINCE};

    fn t(s: &str) -> DateTime<Utc> {
        crate::time::parse_annotation(s).unwrap()
    }

    fn view(name: &str, annotations: &[(&str, &str)]) -> NodeView {
        let mut n = node(name, &[]);
        for (k, v) in annotations {
            n = annotate(n, k, v);
        }
        NodeView::from_node(&n)
    }

    fn snap(nodes: Vec<NodeView>) -> ClusterState {
        ClusterState {
            nodes,
            ..Default::default()
        }
    }

    const FLAG: (&str, &str) = (REBOOT_REQUIRED, "2026-03-29T01:00:00Z");

    #[test]
    fn a_node_goes_from_flagged_to_done_one_line_per_change() {
        let c = Config::default();
        let now = t("2026-03-29T02:00:00Z");
        let mut p = Progress::new();
        // An earlier rollout's done node takes no part; the untouched one neither.
        let old = view(
            "old",
            &[(STATE, "done"), (STATE_SINCE, "2026-03-01T00:00:00Z")],
        );
        let b = p.observe(
            &c,
            &snap(vec![view("a", &[FLAG]), old.clone(), view("idle", &[])]),
            now,
        );
        assert_eq!((b.done, b.total), (0, 1));
        assert_eq!(b.waiting, vec!["a".to_string()]);
        assert!(!b.finished);
        assert_eq!(
            b.lines(),
            "2026-03-29T02:00:00Z a flagged, waiting  [0/1 done, 0 in flight, 1 waiting, 0 failed]\n"
        );
        // Nothing changed: no line.
        assert!(p
            .observe(&c, &snap(vec![view("a", &[FLAG])]), now)
            .changes
            .is_empty());

        let draining = view(
            "a",
            &[
                FLAG,
                (STATE, "draining"),
                (STATE_SINCE, "2026-03-29T02:00:05Z"),
            ],
        );
        let b = p.observe(&c, &snap(vec![draining, old.clone()]), now);
        assert_eq!(
            b.lines(),
            "2026-03-29T02:00:05Z a draining  [0/1 done, 1 in flight, 0 waiting, 0 failed]\n"
        );
        assert!(b
            .text()
            .contains("in flight:\n  a  draining  since 2026-03-29T02:00:05Z\n"));

        let done = view(
            "a",
            &[(STATE, "done"), (STATE_SINCE, "2026-03-29T02:03:00Z")],
        );
        let b = p.observe(&c, &snap(vec![done, old]), now);
        assert_eq!(
            b.lines(),
            "2026-03-29T02:03:00Z a done  [1/1 done, 0 in flight, 0 waiting, 0 failed]\n"
        );
        assert!(b.finished);
        let frame = b.text();
        assert!(
            frame.contains(&format!("[{}]  1/1 done", "#".repeat(BAR))),
            "{frame}"
        );
        assert_eq!(b.recent.len(), 3, "{frame}");
    }

    #[test]
    fn the_lock_entry_of_a_node_says_its_state_until_the_node_is_done_and_an_instant_is_no_change()
    {
        use crate::lock::{LockEntry, IN_FLIGHT};
        let c = Config::default();
        let now = t("2026-03-29T02:00:00Z");
        let entry = BTreeMap::from([(
            "a".to_string(),
            LockEntry {
                state: NodeState::Cordoning,
                since: t("2026-03-29T02:00:01Z"),
                leader: "controller-0".into(),
                group: None,
            },
        )]);
        let mut lock = k8s_openapi::api::coordination::v1::Lease::default();
        lock.spec = Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: Some(crate::lock::lock_owner(&c)),
            ..Default::default()
        });
        lock.metadata.annotations = Some(BTreeMap::from([(
            IN_FLIGHT.to_string(),
            serde_json::to_string(&entry).unwrap(),
        )]));
        let with_lock = |nodes| ClusterState {
            lock: Some(lock.clone()),
            ..snap(nodes)
        };
        let mut p = Progress::new();
        let b = p.observe(&c, &with_lock(vec![view("a", &[FLAG])]), now);
        assert_eq!(
            b.lines(),
            "2026-03-29T02:00:01Z a cordoning  [0/1 done, 1 in flight, 0 waiting, 0 failed]\n"
        );
        // The Node's own state-since, later than the entry's: the same state, no line.
        let cordoning = view(
            "a",
            &[
                FLAG,
                (STATE, "cordoning"),
                (STATE_SINCE, "2026-03-29T02:00:02Z"),
            ],
        );
        let b = p.observe(&c, &with_lock(vec![cordoning]), now);
        assert!(b.changes.is_empty(), "{}", b.lines());
        assert_eq!(b.in_flight[0].since, Some(t("2026-03-29T02:00:02Z")));
        // Done while the lock still lists it: done, not in flight.
        let done = view(
            "a",
            &[(STATE, "done"), (STATE_SINCE, "2026-03-29T02:03:00Z")],
        );
        let b = p.observe(&c, &with_lock(vec![done]), now);
        assert_eq!(
            b.lines(),
            "2026-03-29T02:03:00Z a done  [1/1 done, 0 in flight, 0 waiting, 0 failed]\n"
        );
        assert!(b.finished);
    }

    #[test]
    fn the_frame_names_ten_waiting_nodes_and_counts_the_rest() {
        let nodes = (0..12)
            .map(|i| view(&format!("n{i:02}"), &[FLAG]))
            .collect();
        let b =
            Progress::new().observe(&Config::default(), &snap(nodes), t("2026-03-29T02:00:00Z"));
        assert_eq!(b.waiting.len(), 12);
        let frame = b.text();
        assert!(
            frame.contains(
                "waiting:  n00, n01, n02, n03, n04, n05, n06, n07, n08, n09 and 2 more\n"
            ),
            "{frame}"
        );
    }

    #[test]
    fn failures_the_halt_and_a_pause_are_changes_and_a_halt_with_none_in_flight_finishes() {
        let c = Config::default();
        let now = t("2026-03-29T02:00:00Z");
        let mut p = Progress::new();
        let failed = view(
            "a",
            &[FLAG, (STATE, "failed"), (FAILURE_REASON, "drain timed out")],
        );
        let b = p.observe(&c, &snap(vec![failed, view("b", &[FLAG])]), now);
        let lines = b.lines();
        assert!(lines.contains(" a failed: drain timed out  ["), "{lines}");
        assert!(lines.contains(" b flagged, waiting  ["), "{lines}");
        // maxFailures 0: one failure halts; b waits for an operator.
        assert!(
            lines.contains(" halted: 1 failed node(s), 0 tolerated"),
            "{lines}"
        );
        assert!(b.finished);
        assert!(b
            .text()
            .contains("  a  drain timed out (`rollboot retry a`)\n"));

        let lock = k8s_openapi::api::coordination::v1::Lease {
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some("other-tool".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let paused = ClusterState {
            lock: Some(lock),
            ..snap(vec![view("b", &[FLAG])])
        };
        let b = p.observe(&c, &paused, now);
        let lines = b.lines();
        assert!(lines.contains(" a deleted  ["), "{lines}");
        assert!(
            lines.contains(" held by `other-tool`, not rollboot: paused"),
            "{lines}"
        );
        assert!(lines.contains(" no longer halted"), "{lines}");
        assert!(!b.finished);
        assert!(b
            .json_line()
            .contains(r#""paused":"held by `other-tool`, not rollboot: paused""#));
    }
}
