//! The budget-aware pick's knowledge ([`Headroom`]) from the Pods and PodDisruptionBudgets
//! read, as the controller's reads make it: each node's pods its drain would evict (the drain's
//! own rule, [`crate::drain::classify`], DaemonSets taken to exist), by the budgets that may
//! select them ([`crate::selector::budget_may_select`], as the budget watches choose them),
//! and each of those budgets' `disruptionsAllowed` and `disruptedPods` now.
//!
//! Pure: it must never do I/O; the pods and budgets are those [`super::read`] got.

use std::collections::BTreeMap;

use crate::budgets::{BudgetNow, Headroom, NodeBudgets};
use crate::config::Config;
use crate::node::NodeView;
use crate::plan::Cluster;

/// What the pick knows of `looked` (the waiting nodes it looks at) and `draining` (the nodes
/// in flight not past their drain): their budgets, and those budgets now.
pub(super) fn of(
    cluster: &Cluster,
    config: &Config,
    looked: &[&NodeView],
    draining: &[&str],
) -> Headroom {
    let wanted: Vec<&str> = looked
        .iter()
        .map(|n| n.name.as_str())
        .chain(draining.iter().copied())
        .collect();
    let mut headroom = Headroom::default();
    for node in wanted {
        let budgets = node_budgets(cluster, config, node);
        for budget in budgets.keys() {
            if let Some(now) = budget_now(cluster, budget) {
                headroom.budgets.insert(budget.clone(), now);
            }
        }
        headroom.nodes.insert(node.to_string(), budgets);
    }
    headroom
}

/// `node`'s evictable pods (`namespace/name`) by the budgets (`namespace/name`) that may select
/// them.
fn node_budgets(cluster: &Cluster, config: &Config, node: &str) -> NodeBudgets {
    let selector = config.drain_pod_selector();
    let empty = BTreeMap::new();
    let mut out = NodeBudgets::new();
    let on_node = cluster
        .pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| {
            crate::drain::classify(p, &config.drain, selector, true)
                == crate::drain::Disposition::Evict
        });
    for p in on_node {
        let ns = p.metadata.namespace.as_deref().unwrap_or_default();
        let labels = p.metadata.labels.as_ref().unwrap_or(&empty);
        let selecting = cluster.budgets.iter().filter(|b| {
            b.metadata.namespace.as_deref().unwrap_or_default() == ns
                && crate::selector::budget_may_select(
                    b.spec.as_ref().and_then(|s| s.selector.as_ref()),
                    labels,
                )
        });
        for b in selecting {
            let name = b.metadata.name.as_deref().unwrap_or_default();
            out.entry(format!("{ns}/{name}")).or_default().push(format!(
                "{ns}/{}",
                p.metadata.name.as_deref().unwrap_or_default()
            ));
        }
    }
    out
}

/// The budget `namespace/name` now: its `disruptionsAllowed` (0 before its status is written)
/// and the pods its `disruptedPods` lists.
fn budget_now(cluster: &Cluster, budget: &str) -> Option<BudgetNow> {
    let (ns, name) = budget.split_once('/')?;
    let b = cluster.budgets.iter().find(|b| {
        b.metadata.namespace.as_deref() == Some(ns) && b.metadata.name.as_deref() == Some(name)
    })?;
    let status = b.status.as_ref();
    Some(BudgetNow {
        allowed: status.map_or(0, |s| s.disruptions_allowed),
        disrupted: status
            .and_then(|s| s.disrupted_pods.as_ref())
            .map(|d| d.keys().cloned().collect())
            .unwrap_or_default(),
    })
}
