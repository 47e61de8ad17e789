//! The Nodes one pass reads, parsed again only where they changed.
//!
//! Owns [`views`]: the cached Nodes overlaid with this replica's own fresher writes (forgotten
//! once the watch brings as new), parsed into views where they changed (issue 14: a pass per
//! batch of Node events must not parse every Node), and [`PassViews`], what a pass reads of
//! them. It must never write, nor decide: it only says what the controller knows now.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector;

use crate::controller::cluster_cache::rv;
use crate::controller::context::Ctx;
use crate::controller::node_cache::{NodeChanges, ViewCache};
use crate::lock::LockRecord;
use crate::node::{NodeState, NodeView};

/// The views one pass reads: every Node's, the positions of those a decision can turn on (the
/// ones [`crate::controller::decide::needs_a_look`] picks and every one in the lock), and how
/// many are in each state. Only rebuilding the lock's record reads them all.
pub(in crate::controller) struct PassViews {
    pub(in crate::controller) all: Arc<Vec<NodeView>>,
    looked: Vec<usize>,
    /// The positions of the nodes in the lock that have a Node.
    in_lock: Vec<usize>,
    pub(in crate::controller) states: HashMap<NodeState, usize>,
}

impl PassViews {
    /// The views a decision can turn on, in the views' order.
    pub(in crate::controller) fn nodes(&self) -> Vec<&NodeView> {
        self.looked.iter().map(|&i| &self.all[i]).collect()
    }

    /// The views of the nodes in the lock (those that have a Node).
    pub(in crate::controller) fn in_lock(&self) -> impl Iterator<Item = &NodeView> {
        self.in_lock.iter().map(|&i| &self.all[i])
    }
}

/// The cached Nodes, overlaid with our own fresher writes, parsed again only where they changed
/// (a pass per batch of Node events must not parse every Node: issue 14). After the first look
/// (and after a relist of the watch) only the Nodes the watch changed and those with a write of
/// ours pending are looked at: a pass costs what changed, not the cluster's size. With the
/// views, what the pass reads of them (see [`PassViews`]).
pub(in crate::controller) fn views(ctx: &Ctx, record: &LockRecord) -> PassViews {
    let mut written = ctx.cache.written.lock().expect("written cache");
    let changes = std::mem::take(&mut *ctx.cache.node_changes.lock().expect("node changes"));
    let mut cache = ctx.cache.view_cache.lock().expect("view cache");
    let all = if changes.relisted || !cache.primed() {
        parse_all(&ctx.cache.nodes, &mut written, &mut cache)
    } else {
        parse_changed(&ctx.cache.nodes, changes, &mut written, &mut cache)
    };
    let in_lock: Vec<usize> = record
        .entries
        .keys()
        .filter_map(|n| cache.position(n))
        .collect();
    let mut looked: BTreeSet<usize> = cache.notable().collect();
    looked.extend(&in_lock);
    PassViews {
        all,
        looked: looked.into_iter().collect(),
        in_lock,
        states: cache.state_counts().clone(),
    }
}

/// Every Node parsed again (the first look, or after a relist), each from our own write while
/// it is newer than what the watch brought; a write the watch caught up with is forgotten.
fn parse_all(
    nodes: &reflector::Store<Node>,
    written: &mut HashMap<String, Node>,
    cache: &mut ViewCache,
) -> Arc<Vec<NodeView>> {
    let state = nodes.state();
    let mut newer = HashSet::new();
    for n in &state {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        if written.get(name).is_some_and(|w| rv(w) > rv(n)) {
            newer.insert(name);
        }
    }
    written.retain(|name, _| newer.contains(name.as_str()));
    let sources = state.iter().map(|n| {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        written.get(name).unwrap_or(n)
    });
    cache.refresh(sources)
}

/// Only the Nodes the watch changed and those with a write of ours pending parsed again.
fn parse_changed(
    nodes: &reflector::Store<Node>,
    changes: NodeChanges,
    written: &mut HashMap<String, Node>,
    cache: &mut ViewCache,
) -> Arc<Vec<NodeView>> {
    let mut names = changes.names;
    names.extend(written.keys().cloned());
    let mut sources: Vec<(String, Option<Arc<Node>>)> = Vec::with_capacity(names.len());
    for name in names {
        let cached = nodes.get(&reflector::ObjectRef::new(&name));
        let source = match (cached, written.get(&name)) {
            (Some(c), Some(w)) if rv(w) > rv(&c) => Some(Arc::new(w.clone())),
            (cached, _) => {
                written.remove(&name);
                cached
            }
        };
        sources.push((name, source));
    }
    cache.update(sources)
}
