//! The other actors that take nodes out of service, as the simulated world plays them beside
//! rollboot: medik8s' node-maintenance-operator (for each NodeMaintenance, while its CRD is
//! installed and the scenario's `nodeMaintenance.operator` is on) and an autoscaler's
//! scale-down of empty cordoned nodes (the scenario's `autoscaler`).
//!
//! The operator, a short while ([`OPERATOR_DELAY`]) after a NodeMaintenance appears: cordons
//! its node and taints it `medik8s.io/drain:NoSchedule` (one write), sets `status.phase:
//! Running`, evicts the node's pods but DaemonSet and mirror pods through the API server's
//! eviction (budgets respected; a refused eviction is tried again every
//! [`EVICTION_RETRY`]), and once none is left sets `Succeeded`. Once the NodeMaintenance is
//! deleted it takes its taint off and uncordons the node, unless rollboot holds it
//! (`rollboot.dev/cordoned-by`): the real operator uncordons whatever the node's state, and an
//! uncordon in the middle of rollboot's reboot would be counted against rollboot. A
//! NodeMaintenance for a node that does not exist ends `Failed` (the real operator's webhook
//! refuses it at creation). No finalizer, no Events, no node lease.
//!
//! The autoscaler: a node cordoned (`spec.unschedulable`) and empty (no pod but DaemonSet and
//! mirror pods) for `scaleDownEmptyAfter` simulated seconds, unless it carries
//! `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"` or `karpenter.sh/do-not-disrupt:
//! "true"`, is tainted `ToBeDeletedByClusterAutoscaler` (its value the unix seconds,
//! `NoSchedule`), and [`DELETE_DELAY`] later, if it is still so, its host goes away for good
//! ([`World::remove_host`]); otherwise the taint goes again (the real one cleans up after an
//! aborted scale-down).
//!
//! Both look at the store every few simulated tenths of a second (not its change stream: they
//! are opt-in and small) and write through it as the world does. Times are simulated seconds,
//! scaled by the scenario's time factor. It must never act on anything else: rollboot's
//! annotations, other kinds, the invariant records.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::api;
use super::kinds::Kind;
use super::meta::timestamp;
use super::scenario::Scenario;
use super::server::Shared;
use super::signals::{MEDIK8S_DRAIN, TO_BE_DELETED};
use super::world::World;

/// Simulated seconds from a NodeMaintenance's creation to the operator's cordon.
pub const OPERATOR_DELAY: f64 = 2.0;
/// Simulated seconds between the operator's tries of a refused eviction.
pub const EVICTION_RETRY: f64 = 5.0;
/// Simulated seconds from the autoscaler's taint to the host's deletion.
pub const DELETE_DELAY: f64 = 2.0;

/// What the operator has done for one NodeMaintenance (by uid).
#[derive(Clone, Debug)]
enum Maintenance {
    /// Seen at that instant; nothing done yet.
    Seen(Instant),
    /// Its node cordoned and tainted; draining (the last eviction try).
    Draining {
        node: String,
        tried: Option<Instant>,
    },
    /// Drained, or failed: nothing more until it is deleted.
    Over { node: Option<String> },
}

/// Starts the actors the scenario asks for; they run until the task is aborted.
pub fn start(shared: Arc<Shared>, world: World, sc: &Scenario) -> tokio::task::JoinHandle<()> {
    let mut a = Actors {
        shared,
        world,
        sc: sc.clone(),
        maintenances: BTreeMap::new(),
        empty_since: BTreeMap::new(),
        tainted: BTreeMap::new(),
    };
    tokio::spawn(async move {
        let period =
            a.sc.scaled(0.5)
                .clamp(Duration::from_millis(5), Duration::from_millis(250));
        loop {
            tokio::time::sleep(period).await;
            a.tick();
        }
    })
}

struct Actors {
    shared: Arc<Shared>,
    world: World,
    sc: Scenario,
    /// The operator's NodeMaintenances, by uid.
    maintenances: BTreeMap<String, (String, Maintenance)>,
    /// Nodes the autoscaler finds cordoned and empty, since.
    empty_since: BTreeMap<String, Instant>,
    /// Nodes it tainted, when.
    tainted: BTreeMap<String, Instant>,
}

impl Actors {
    fn tick(&mut self) {
        let operator = self.sc.node_maintenance.as_ref().is_none_or(|n| n.operator);
        if self.shared.crds.node_maintenance() && operator {
            self.operator();
        }
        if let Some(a) = self.sc.autoscaler.clone() {
            self.autoscaler(a.scale_down_empty_after);
        }
    }

    fn operator(&mut self) {
        let now = Instant::now();
        let present: BTreeMap<String, (String, Option<String>)> = {
            let inner = self.shared.store.lock();
            inner
                .range(Kind::NodeMaintenance, None, None)
                .filter(|e| !e.idx.deleting)
                .map(|e| {
                    (
                        e.idx.uid.clone(),
                        (e.idx.name.clone(), e.idx.node_name.clone()),
                    )
                })
                .collect()
        };
        let gone: Vec<String> = self
            .maintenances
            .keys()
            .filter(|uid| !present.contains_key(*uid))
            .cloned()
            .collect();
        for uid in gone {
            if let Some((_, m)) = self.maintenances.remove(&uid) {
                self.maintenance_over(&m);
            }
        }
        for (uid, (name, node)) in present {
            let (_, state) = self
                .maintenances
                .entry(uid.clone())
                .or_insert_with(|| (name.clone(), Maintenance::Seen(now)));
            let next = match state.clone() {
                Maintenance::Seen(t) if now - t >= self.sc.scaled(OPERATOR_DELAY) => {
                    Some(self.begin(&name, node.as_deref()))
                }
                Maintenance::Draining { node, tried } => self.drain(&name, &node, tried, now),
                _ => None,
            };
            if let Some(n) = next {
                if let Some(e) = self.maintenances.get_mut(&uid) {
                    e.1 = n;
                }
            }
        }
    }

    /// Cordons and taints the node, and says Running (or Failed, without a node).
    fn begin(&self, name: &str, node: Option<&str>) -> Maintenance {
        let mut inner = self.shared.store.lock();
        let Some(n) = node.and_then(|n| inner.get(Kind::Node, n).cloned()) else {
            let node = node.unwrap_or("");
            set_status(
                &mut inner,
                name,
                json!({"phase": "Failed", "lastError": format!("nodes \"{node}\" not found"),
                    "lastUpdate": timestamp(Utc::now())}),
            );
            return Maintenance::Over { node: None };
        };
        let mut v = n.value();
        v["spec"]["unschedulable"] = json!(true);
        add_taint(&mut v, MEDIK8S_DRAIN, None);
        inner.put(Kind::Node, v);
        let node = n.idx.name.clone();
        let pods: Vec<String> = inner
            .pods_on(&node)
            .filter(|p| !stays(p))
            .map(|p| p.idx.name.clone())
            .collect();
        let total = inner.pods_on(&node).count();
        set_status(
            &mut inner,
            name,
            json!({"phase": "Running", "drainProgress": 0, "totalpods": total,
                "evictionPods": pods.len(), "pendingPods": pods,
                "lastUpdate": timestamp(Utc::now())}),
        );
        Maintenance::Draining { node, tried: None }
    }

    /// Evicts what is left on the node (a refused eviction again after [`EVICTION_RETRY`]);
    /// Succeeded once nothing is.
    fn drain(
        &self,
        name: &str,
        node: &str,
        tried: Option<Instant>,
        now: Instant,
    ) -> Option<Maintenance> {
        // Pods still terminating are waited for, not evicted again.
        let left: Vec<(String, String, bool)> = {
            let inner = self.shared.store.lock();
            inner
                .pods_on(node)
                .filter(|p| !stays(p))
                .map(|p| (p.idx.namespace.clone(), p.idx.name.clone(), p.idx.deleting))
                .collect()
        };
        if left.is_empty() {
            let mut inner = self.shared.store.lock();
            set_status(
                &mut inner,
                name,
                json!({"phase": "Succeeded", "drainProgress": 100, "pendingPods": null,
                    "lastUpdate": timestamp(Utc::now())}),
            );
            return Some(Maintenance::Over {
                node: Some(node.to_string()),
            });
        }
        if tried.is_some_and(|t| now - t < self.sc.scaled(EVICTION_RETRY)) {
            return None;
        }
        for (ns, pod, _) in left.iter().filter(|p| !p.2) {
            let body = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": pod, "namespace": ns}});
            let r = api::evict(
                &self.shared.store,
                ns,
                pod,
                body.to_string().as_bytes(),
                &self.shared.invariants,
                || false,
                None,
            );
            if let Err(e) = r {
                tracing::debug!(
                    pod,
                    code = e.code,
                    "node-maintenance-operator: eviction refused"
                );
            }
        }
        Some(Maintenance::Draining {
            node: node.to_string(),
            tried: Some(now),
        })
    }

    /// A NodeMaintenance deleted: its taint off and the node uncordoned, unless rollboot
    /// holds it.
    fn maintenance_over(&self, m: &Maintenance) {
        let node = match m {
            Maintenance::Draining { node, .. } => node.clone(),
            Maintenance::Over { node: Some(n) } => n.clone(),
            _ => return,
        };
        let mut inner = self.shared.store.lock();
        let Some(n) = inner.get(Kind::Node, &node).cloned() else {
            return;
        };
        let mut v = n.value();
        remove_taint(&mut v, MEDIK8S_DRAIN);
        if !n.idx.cordoned_by_rollboot {
            if let Some(spec) = v["spec"].as_object_mut() {
                spec.remove("unschedulable");
            }
        }
        if v != n.value() {
            inner.put(Kind::Node, v);
        }
    }

    fn autoscaler(&mut self, after: f64) {
        let now = Instant::now();
        let candidates: BTreeSet<String> = {
            let inner = self.shared.store.lock();
            inner
                .range(Kind::Node, None, None)
                .filter(|n| n.idx.unschedulable && !n.idx.deleting)
                .filter(|n| !n.idx.signals.as_deref().is_some_and(|s| s.protected))
                .filter(|n| inner.pods_on(&n.idx.name).all(stays))
                .map(|n| n.idx.name.clone())
                .collect()
        };
        self.empty_since.retain(|n, _| candidates.contains(n));
        for n in &candidates {
            self.empty_since.entry(n.clone()).or_insert(now);
        }
        // Tainted nodes: deleted once the delay is over if still candidates, else untainted.
        let tainted: Vec<(String, Instant)> =
            self.tainted.iter().map(|(n, t)| (n.clone(), *t)).collect();
        for (node, at) in tainted {
            if !candidates.contains(&node) {
                self.tainted.remove(&node);
                self.untaint(&node);
            } else if now - at >= self.sc.scaled(DELETE_DELAY) {
                self.tainted.remove(&node);
                self.empty_since.remove(&node);
                tracing::info!(node, "autoscaler: deleting the empty cordoned node");
                self.world.remove_host(&node);
            }
        }
        let due: Vec<String> = self
            .empty_since
            .iter()
            .filter(|(n, t)| now - **t >= self.sc.scaled(after) && !self.tainted.contains_key(*n))
            .map(|(n, _)| n.clone())
            .collect();
        for node in due {
            let mut inner = self.shared.store.lock();
            let Some(n) = inner.get(Kind::Node, &node).cloned() else {
                continue;
            };
            let mut v = n.value();
            add_taint(
                &mut v,
                TO_BE_DELETED,
                Some(Utc::now().timestamp().to_string()),
            );
            inner.put(Kind::Node, v);
            self.tainted.insert(node, now);
        }
    }

    fn untaint(&self, node: &str) {
        let mut inner = self.shared.store.lock();
        let Some(n) = inner.get(Kind::Node, node).cloned() else {
            return;
        };
        let mut v = n.value();
        remove_taint(&mut v, TO_BE_DELETED);
        if v != n.value() {
            inner.put(Kind::Node, v);
        }
    }
}

/// A pod a drain leaves: a DaemonSet's or a mirror pod.
fn stays(p: &super::store::Entry) -> bool {
    matches!(
        p.idx.owner.as_ref().map(|o| o.0.as_str()),
        Some("DaemonSet" | "Node")
    )
}

/// Merges `status` into the NodeMaintenance `name`'s (a `null` removes a field).
fn set_status(inner: &mut super::store::Inner, name: &str, status: Value) {
    let Some(e) = inner.get(Kind::NodeMaintenance, name).cloned() else {
        return;
    };
    let mut v = e.value();
    if !v["status"].is_object() {
        v["status"] = json!({});
    }
    if let (Some(to), Some(from)) = (v["status"].as_object_mut(), status.as_object()) {
        for (k, val) in from {
            if val.is_null() {
                to.remove(k);
            } else {
                to.insert(k.clone(), val.clone());
            }
        }
    }
    inner.put(Kind::NodeMaintenance, v);
}

/// Adds the `NoSchedule` taint `key` (with `value`) unless the node has it.
pub fn add_taint(v: &mut Value, key: &str, value: Option<String>) {
    let mut taints: Vec<Value> = v["spec"]["taints"].as_array().cloned().unwrap_or_default();
    if taints.iter().any(|t| t["key"] == key) {
        return;
    }
    let mut t = json!({"key": key, "effect": "NoSchedule"});
    if let Some(val) = value {
        t["value"] = json!(val);
    }
    taints.push(t);
    v["spec"]["taints"] = Value::Array(taints);
}

/// Removes the taints of `key`; no taints is no `taints` key, as the API server stores it.
pub fn remove_taint(v: &mut Value, key: &str) {
    let Some(taints) = v["spec"]["taints"].as_array_mut() else {
        return;
    };
    taints.retain(|t| t["key"] != key);
    if taints.is_empty() {
        if let Some(spec) = v["spec"].as_object_mut() {
            spec.remove("taints");
        }
    }
}
