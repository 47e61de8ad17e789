//! The budget-aware pick's reads ([`crate::budgets::headroom`]): the pods of the waiting nodes
//! the pick looks at, and of the nodes in flight that still drain, each node's evictable pods
//! reduced to the budgets they fall under (from the shared budget watches,
//! [`super::WorkloadWatches`]), and those budgets' headroom now.
//!
//! Owns [`HeadroomReader`], what it keeps from one pass to the next: each node's budgets, read at
//! most [`FRESH_FOR`] ago for a waiting node (pods scheduled onto it since then are not seen:
//! such a node may be picked while a new pod's budget is held, and its drain then waits, as
//! without the budget-aware pick), kept as read for a node in flight (its pods only leave);
//! and [`HeadroomSource`], what it asks of its caller (a client, the drain's rule for which
//! pods leave, the watches). Why lists per node and not a watch of every pod: a pass looks at a
//! few nodes ([`crate::controller::decide::scan_window`]), and a cache of every pod of a
//! 150,000-pod cluster would be most of the controller's memory. It must never write, nor
//! decide anything: the pick is [`crate::controller::decide::pick_detail`]'s.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::Client;

use super::WorkloadWatches;
use crate::budgets::headroom::{Headroom, NodeBudgets};
use crate::node::NodeView;

/// How long a waiting node's budgets, as read, are trusted.
/// (Measured on issue 26's scenario, 200 nodes under maxNodes 20, pods Ready 30 s after they
/// start: 5 s against 0.5 s cost 4 points of makespan, as the evicted pods' replacements land
/// on the waiting nodes; 2 s keeps a pass's lists to a window's worth every 2 s at most.)
const FRESH_FOR: Duration = Duration::from_secs(2);

/// Node pod lists in flight at once in a pass.
const LIST_CONCURRENCY: usize = 8;

/// How long a pass waits for a namespace's budget watch to list for the first time.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(2);

/// What [`HeadroomReader`] asks of its caller: the controller gives its own client, config and
/// watches. The budgets define what they need, and the controller provides it, so the budgets
/// depend on no controller code.
pub trait HeadroomSource: Sync {
    /// The client the nodes' pods are listed with.
    fn client(&self) -> &Client;
    /// Whether the node's drain would evict `pod` (as the drain classifies it, DaemonSets taken
    /// to exist: their pods never leave with a drain).
    fn evictable(&self, pod: &Pod) -> bool;
    /// The watches the budgets are read from.
    fn watches(&self) -> &WorkloadWatches;
}

/// What the budget-aware pick keeps from one pass to the next.
#[derive(Default)]
pub struct HeadroomReader {
    /// Each node's budgets, and when its pods were read.
    known: HashMap<String, (Instant, NodeBudgets)>,
}

impl HeadroomReader {
    /// What the pick needs for `looked` (the waiting nodes it looks at, in its order) and
    /// `draining` (the nodes in flight not past their drain): their budgets, read where not
    /// known or stale (at most `reads` nodes, besides those in flight), and those budgets now.
    /// A node whose pods could not be read is left out: it is taken in order, as without the
    /// budget-aware pick.
    pub async fn read(
        &mut self,
        from: &impl HeadroomSource,
        looked: &[&NodeView],
        draining: &[&str],
        reads: usize,
    ) -> Headroom {
        let now = Instant::now();
        let wanted: HashSet<&str> = looked
            .iter()
            .map(|n| n.name.as_str())
            .chain(draining.iter().copied())
            .collect();
        // A node the pick no longer looks at is kept while its read is fresh: the window
        // follows the free slots (see `scan_window`), and a node at its end left and came back
        // as slots freed and filled, read again each time (a 5,000-node rollout whose passes
        // came faster listed 20-30% more pods).
        self.known
            .retain(|n, (at, _)| wanted.contains(n.as_str()) || now - *at <= FRESH_FOR);
        // The nodes in flight first (their claims hold the others), then the waiting ones never
        // read in the pick's order, then the stale ones, longest read first: at most `reads`.
        let mut to_read: Vec<String> = draining
            .iter()
            .filter(|n| !self.known.contains_key(**n))
            .map(|n| n.to_string())
            .collect();
        to_read.extend(
            looked
                .iter()
                .filter(|n| !self.known.contains_key(&n.name))
                .map(|n| n.name.clone()),
        );
        let mut stale: Vec<(Instant, &str)> = looked
            .iter()
            .filter_map(|n| {
                let (at, _) = self.known.get(&n.name)?;
                (now - *at > FRESH_FOR).then_some((*at, n.name.as_str()))
            })
            .collect();
        stale.sort();
        to_read.extend(stale.into_iter().map(|(_, n)| n.to_string()));
        to_read.truncate(reads.max(draining.len()));
        let read: Vec<(String, Option<NodeBudgets>)> = stream::iter(to_read)
            .map(|node| async move {
                let b = node_budgets(from, &node).await;
                (node, b)
            })
            .buffer_unordered(LIST_CONCURRENCY)
            .collect()
            .await;
        for (node, b) in read {
            if let Some(b) = b {
                self.known.insert(node, (now, b));
            }
        }
        let mut headroom = Headroom::default();
        let looked_at = self
            .known
            .iter()
            .filter(|(n, _)| wanted.contains(n.as_str()));
        for (node, (_, b)) in looked_at {
            for budget in b.keys() {
                if headroom.budgets.contains_key(budget) {
                    continue;
                }
                let (ns, name) = budget.split_once('/').unwrap_or(("", budget));
                if let Some(now) = from.watches().budget_now(ns, name) {
                    headroom.budgets.insert(budget.clone(), now);
                }
            }
            headroom.nodes.insert(node.clone(), b.clone());
        }
        headroom
    }
}

/// `node`'s evictable pods (as its drain would classify them), by the budgets that select
/// them; `None` when its pods or a namespace's budgets could not be read.
async fn node_budgets(from: &impl HeadroomSource, node: &str) -> Option<NodeBudgets> {
    let api: Api<Pod> = Api::all(from.client().clone());
    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let pods = match api.list(&lp).await {
        Ok(l) => l.items,
        Err(e) => {
            tracing::debug!(node, error = %e, "budget-aware pick: could not list the node's pods");
            return None;
        }
    };
    let empty = BTreeMap::new();
    // Per namespace, its evictable pods: name and labels.
    type Labelled<'a> = Vec<(String, &'a BTreeMap<String, String>)>;
    let mut by_ns: BTreeMap<String, Labelled<'_>> = BTreeMap::new();
    for p in &pods {
        if !from.evictable(p) {
            continue;
        }
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        by_ns
            .entry(ns)
            .or_default()
            .push((name, p.metadata.labels.as_ref().unwrap_or(&empty)));
    }
    let mut out = NodeBudgets::new();
    for (ns, pods) in by_ns {
        let labels: Vec<&BTreeMap<String, String>> = pods.iter().map(|(_, l)| *l).collect();
        let budgets = from
            .watches()
            .budgets_of_pods(&ns, &labels, FIRST_LIST_WAIT)
            .await?;
        for ((pod, _), bs) in pods.iter().zip(budgets) {
            for b in bs {
                out.entry(format!("{ns}/{b}"))
                    .or_default()
                    .push(format!("{ns}/{pod}"));
            }
        }
    }
    Some(out)
}
