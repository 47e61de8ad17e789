//! What the controller knows of the cluster, and its reads of it.
//!
//! Owns [`ClusterCache`]: the caches the watches fill (the Nodes, the lock's record) with this
//! replica's own newer writes, the Nodes' parsed views, the blockers the last pass found, and
//! the one edit of the lock at a time. Its reads say what the controller knows now: a Node as
//! known now ([`ClusterCache::current`], [`ClusterCache::still`]), the lock's record
//! ([`ClusterCache::lock_now`]), a cycle's start, the failed nodes; and a task can wait for it
//! to know a newer Node ([`ClusterCache::await_newer`]). It must never write to the cluster nor
//! call anything (the watches and the writes fill it, see [`super::writes`]), and never decide.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector;

use super::decide::Blocker;
use super::node_cache::{NodeChanges, ViewCache};
use crate::lock::LockRecord;
use crate::node::{NodeState, NodeView};

/// The Nodes and the lock as this replica knows them.
pub(super) struct ClusterCache {
    /// The watch-backed Node cache.
    pub(super) nodes: reflector::Store<Node>,
    /// Counts the Node watch's events: a task can wait for the cache to change.
    pub(super) node_seq: tokio::sync::watch::Receiver<u64>,
    /// Nodes as returned by our own writes, newer than the cache until the watch catches up.
    pub(super) written: Mutex<HashMap<String, Node>>,
    /// The Nodes' parsed views, see [`super::pass::views`].
    pub(super) view_cache: Mutex<ViewCache>,
    /// What the Node watch changed since the views last looked (the watch notes it).
    pub(super) node_changes: Arc<Mutex<NodeChanges>>,
    /// The lock as last read or written (the watch keeps it too).
    pub(super) lock_record: Arc<Mutex<LockRecord>>,
    /// Held across each of this replica's edits of the lock (a start, a free): its own edits
    /// from concurrent steps otherwise race on the one Lease (with 50 nodes in flight, a free
    /// lost 5 attempts in a row to its siblings hundreds of times in a 5,000-node run), and
    /// each edit then starts from the record the previous one wrote.
    pub(super) lock_edits: tokio::sync::Mutex<()>,
    /// The blockers the leader's last pass found (empty when none, or none waited): what a
    /// FleetLock host waiting for its slot is told.
    pub(super) last_blockers: Mutex<Vec<Blocker>>,
    /// The nodes NodeMaintenance objects take out, as last listed.
    pub(super) maintained: crate::node_maintenance::MaintainedCache,
}

impl ClusterCache {
    /// A cache over what the watches fill (`nodes`, counted by `node_seq`, their changes
    /// noted in `node_changes`; `lock_record`), the views parsed into `view_cache`.
    pub(super) fn new(
        nodes: reflector::Store<Node>,
        node_seq: tokio::sync::watch::Receiver<u64>,
        node_changes: Arc<Mutex<NodeChanges>>,
        lock_record: Arc<Mutex<LockRecord>>,
        view_cache: ViewCache,
    ) -> ClusterCache {
        ClusterCache {
            nodes,
            node_seq,
            written: Mutex::default(),
            view_cache: Mutex::new(view_cache),
            node_changes,
            lock_record,
            lock_edits: tokio::sync::Mutex::default(),
            last_blockers: Mutex::default(),
            maintained: Default::default(),
        }
    }

    /// One Node as the controller knows it now: the newer of the cache and our own last write.
    /// Steps decided long after their pass (the end of a drain, of a health gate) decide from it.
    pub(super) fn current(&self, name: &str) -> Option<NodeView> {
        let cached = self.nodes.get(&reflector::ObjectRef::new(name));
        let written = self.written.lock().expect("written cache");
        match (cached, written.get(name)) {
            (Some(c), Some(w)) if rv(w) > rv(&c) => Some(NodeView::from_node(w)),
            (Some(c), _) => Some(NodeView::from_node(&c)),
            (None, _) => None,
        }
    }

    /// The node as known now, if it is still in `state`: a step decided at the end of a long
    /// wait is decided from this view, and its write carries this view's resourceVersion.
    pub(super) fn still(&self, node: &str, state: NodeState) -> Option<NodeView> {
        self.current(node).filter(|v| v.state == Some(state))
    }

    /// The lock as last read or written.
    pub(super) fn lock_now(&self) -> LockRecord {
        self.lock_record.lock().expect("lock cache").clone()
    }

    /// Keeps `r` as the lock's record, unless the one kept is newer.
    pub(super) fn set_lock(&self, r: LockRecord) {
        let mut cur = self.lock_record.lock().expect("lock cache");
        if r.version() >= cur.version() {
            *cur = r;
        }
    }

    /// When `node`'s cycle started, as the maintenance lock records it (as last read or
    /// written).
    pub(super) fn cycle_start(&self, node: &str) -> Option<DateTime<Utc>> {
        self.lock_record
            .lock()
            .expect("lock cache")
            .entries
            .get(node)
            .map(|e| e.since)
    }

    /// The failed nodes, `node` (just marked failed) included, counted from the Nodes as known
    /// now (the state parsed as everywhere else, so the count agrees with the failures blocker).
    pub(super) fn failed_with(&self, node: &str) -> usize {
        1 + self
            .nodes
            .state()
            .iter()
            .filter(|n| n.metadata.name.as_deref() != Some(node))
            .filter(|n| NodeView::from_node(n).state == Some(NodeState::Failed))
            .count()
    }

    /// After a write refused with 409 in a task (the end of a drain or of a health gate):
    /// waits, bounded, until the controller knows a version of `node` newer than the refused
    /// `rv`, so the pass the task then wakes decides from it instead of refusing itself again in
    /// a loop. (A step refused in the pass itself needs no wait: the watch's event for the
    /// newer version wakes the next pass.)
    pub(super) async fn await_newer(&self, node: &str, rv: &str) {
        let refused: u64 = rv.parse().unwrap_or(0);
        let mut seq = self.node_seq.clone();
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                seq.borrow_and_update();
                let newer = self
                    .current(node)
                    .is_none_or(|v| v.resource_version.parse::<u64>().unwrap_or(0) > refused);
                if newer || seq.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }
}

/// A Node's resourceVersion as a number (0 when it has none).
pub(super) fn rv(n: &Node) -> u64 {
    n.metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}
