//! The snapshot of a cluster that `rollboot simulate --from-cluster` takes and `--snapshot
//! FILE` rehearses: the file format, its checks, and its loading into the simulated store.
//!
//! The format (JSON, one document, camelCase keys, unknown keys refused):
//!
//! ```json
//! {"format": "rollboot.dev/snapshot/v1", "takenAt": "2026-11-23T02:00:00Z",
//!  "source": "https://127.0.0.1:6443",
//!  "nodes": [{"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"},
//!             "unschedulable": false, "ready": true, "taints": []}],
//!  "pods": [{"namespace": "shop", "name": "web-7d9f-abcde", "uid": "...", "labels": {"app": "web"},
//!            "owner": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "..."},
//!            "nodeName": "node-1", "phase": "Running", "ready": true, "graceSeconds": 30,
//!            "emptyDir": false, "mirror": false, "deleting": false, "nodeSelector": {}}],
//!  "budgets": [{"namespace": "shop", "name": "web", "selector": {"matchLabels": {"app": "web"}},
//!               "maxUnavailable": 1}],
//!  "deployments": [], "replicaSets": [], "statefulSets": [], "daemonSets": [
//!    {"namespace": "shop", "name": "web-7d9f", "uid": "...", "labels": {}, "owner": null,
//!     "replicas": 3, "selector": {"matchLabels": {"app": "web"}},
//!     "template": {"labels": {"app": "web"}, "graceSeconds": 30, "emptyDir": false, "nodeSelector": {}}}]}
//! ```
//!
//! Two optional measurements carry the cluster's timings to a rehearsal: a node's `lastCycle`
//! (how long the parts of its last reboot cycle took, as rollboot recorded them in
//! `rollboot.dev/last-cycle`: `{"drainSeconds", "rebootSeconds", "gateSeconds",
//! "podExitSeconds"}`) and a pod's `readySeconds` (from its creation to Ready, for a pod whose
//! containers never restarted, and only for a pod created during a node's last cycle: a
//! replacement a drain caused).
//!
//! It keeps what a rollout depends on (names, labels, controller owners, placement, readiness,
//! grace periods, emptyDir volumes, mirror pods, budgets, replica counts) and nothing else: no
//! images, environment, secrets, annotations (but the mirror pod's), or statuses beyond
//! readiness. Owns [`Snapshot`], [`read`] (errors name the file and what is wrong), [`Snapshot::check`]
//! and [`load`]. It must never read a live cluster (that is product-side, `simulate::from_cluster`)
//! nor import product code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use chrono::Utc;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::api;
use super::kinds::Kind;
use super::meta::timestamp;
use super::server::Shared;

/// The value of `format` this version writes and reads.
pub const FORMAT: &str = "rollboot.dev/snapshot/v1";

/// Labels or a node selector.
pub type Labels = BTreeMap<String, String>;

/// A cluster's snapshot.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Snapshot {
    /// Always [`FORMAT`].
    pub format: String,
    /// When it was taken (RFC 3339).
    pub taken_at: String,
    /// The API server it was read from.
    pub source: String,
    /// Nodes.
    pub nodes: Vec<SnapNode>,
    /// Pods.
    pub pods: Vec<SnapPod>,
    /// PodDisruptionBudgets.
    pub budgets: Vec<SnapBudget>,
    /// Deployments (their ReplicaSets run the pods; a budget's percentages may read their
    /// replicas).
    #[serde(default)]
    pub deployments: Vec<SnapController>,
    /// ReplicaSets.
    #[serde(default)]
    pub replica_sets: Vec<SnapController>,
    /// StatefulSets.
    #[serde(default)]
    pub stateful_sets: Vec<SnapController>,
    /// DaemonSets.
    #[serde(default)]
    pub daemon_sets: Vec<SnapController>,
}

/// A Node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapNode {
    /// metadata.name.
    pub name: String,
    /// metadata.labels.
    #[serde(default)]
    pub labels: Labels,
    /// spec.unschedulable (cordoned).
    #[serde(default)]
    pub unschedulable: bool,
    /// The Ready condition is True.
    pub ready: bool,
    /// spec.taints.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// How long the parts of its last reboot cycle took, when rollboot recorded them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_cycle: Option<SnapCycle>,
}

/// A node's last reboot cycle, in seconds, as rollboot recorded it (each part optional).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapCycle {
    /// From the cycle's start to the reboot request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_seconds: Option<f64>,
    /// From the reboot request until the node was back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_seconds: Option<f64>,
    /// From back to done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_seconds: Option<f64>,
    /// The median time its evicted pods took to go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_exit_seconds: Option<f64>,
}

/// A Node taint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    /// key.
    pub key: String,
    /// value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// effect.
    pub effect: String,
}

/// A controller owner reference.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Owner {
    /// apiVersion.
    pub api_version: String,
    /// kind.
    pub kind: String,
    /// name.
    pub name: String,
    /// uid.
    pub uid: String,
}

/// A Pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapPod {
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// metadata.uid.
    pub uid: String,
    /// metadata.labels.
    #[serde(default)]
    pub labels: Labels,
    /// The controller owner reference (none: an unreplicated pod).
    #[serde(default)]
    pub owner: Option<Owner>,
    /// spec.nodeName (none: not scheduled).
    #[serde(default)]
    pub node_name: Option<String>,
    /// status.phase.
    pub phase: String,
    /// The Ready condition is True.
    pub ready: bool,
    /// spec.terminationGracePeriodSeconds.
    pub grace_seconds: i64,
    /// It has an emptyDir volume.
    #[serde(default)]
    pub empty_dir: bool,
    /// A mirror (static) pod (annotation `kubernetes.io/config.mirror`).
    #[serde(default)]
    pub mirror: bool,
    /// metadata.deletionTimestamp is set.
    #[serde(default)]
    pub deleting: bool,
    /// spec.nodeSelector.
    #[serde(default)]
    pub node_selector: Labels,
    /// From its creation until it was Ready, seconds: only for a pod created during a node's
    /// last reboot cycle (a replacement a drain caused) that is Ready and whose containers
    /// never restarted (its Ready condition then dates its start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_seconds: Option<f64>,
}

/// A PodDisruptionBudget (policy/v1).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapBudget {
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// spec.selector (a LabelSelector; absent: selects nothing, as in policy/v1).
    #[serde(default)]
    pub selector: Option<Value>,
    /// spec.minAvailable (a number or a percentage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<Value>,
    /// spec.maxUnavailable (a number or a percentage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<Value>,
    /// spec.unhealthyPodEvictionPolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_pod_eviction_policy: Option<String>,
}

/// The pod template of a controller, as far as a rollout sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapTemplate {
    /// template.metadata.labels.
    #[serde(default)]
    pub labels: Labels,
    /// template.spec.terminationGracePeriodSeconds.
    pub grace_seconds: i64,
    /// The template has an emptyDir volume.
    #[serde(default)]
    pub empty_dir: bool,
    /// template.spec.nodeSelector.
    #[serde(default)]
    pub node_selector: Labels,
}

/// A Deployment, ReplicaSet, StatefulSet or DaemonSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapController {
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// metadata.uid.
    pub uid: String,
    /// metadata.labels.
    #[serde(default)]
    pub labels: Labels,
    /// The controller owner reference (a ReplicaSet's Deployment).
    #[serde(default)]
    pub owner: Option<Owner>,
    /// spec.replicas (none for a DaemonSet).
    #[serde(default)]
    pub replicas: Option<i64>,
    /// spec.selector.
    pub selector: Value,
    /// spec.template.
    pub template: SnapTemplate,
}

/// What a snapshot holds, for reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The API server it was read from.
    pub source: String,
    /// When.
    pub taken_at: String,
    /// Counts.
    pub nodes: usize,
    /// Pods.
    pub pods: usize,
    /// Budgets.
    pub budgets: usize,
    /// Controllers (Deployments, ReplicaSets, StatefulSets, DaemonSets).
    pub controllers: usize,
}

/// Why a snapshot file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The file cannot be read or written.
    #[error("snapshot {file}: {source}")]
    Io {
        /// The file.
        file: String,
        /// The error.
        source: std::io::Error,
    },
    /// Not JSON of this format.
    #[error("snapshot {file}: {what}")]
    Syntax {
        /// The file.
        file: String,
        /// What is wrong, with line and column.
        what: String,
    },
    /// JSON of this format whose content does not hold together.
    #[error("snapshot {file}: {what}")]
    Invalid {
        /// The file.
        file: String,
        /// What is wrong, naming the object.
        what: String,
    },
}

impl Snapshot {
    /// Counts, for reports.
    pub fn summary(&self) -> Summary {
        Summary {
            source: self.source.clone(),
            taken_at: self.taken_at.clone(),
            nodes: self.nodes.len(),
            pods: self.pods.len(),
            budgets: self.budgets.len(),
            controllers: self.deployments.len()
                + self.replica_sets.len()
                + self.stateful_sets.len()
                + self.daemon_sets.len(),
        }
    }

    /// Checks that the content holds together; the first problem, naming the object.
    pub fn check(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "format is `{}`, this rollboot reads `{FORMAT}`",
                self.format
            ));
        }
        if self.nodes.is_empty() {
            return Err("no nodes: there is nothing to rehearse".into());
        }
        let mut nodes = BTreeSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.name.is_empty() {
                return Err(format!("nodes[{i}] has an empty name"));
            }
            if !nodes.insert(n.name.as_str()) {
                return Err(format!("node {} appears twice", n.name));
            }
            if let Some(c) = &n.last_cycle {
                for (part, v) in [
                    ("drainSeconds", c.drain_seconds),
                    ("rebootSeconds", c.reboot_seconds),
                    ("gateSeconds", c.gate_seconds),
                    ("podExitSeconds", c.pod_exit_seconds),
                ] {
                    if v.is_some_and(|v| v < 0.0) {
                        return Err(format!("node {}: lastCycle.{part} is negative", n.name));
                    }
                }
            }
        }
        let mut pods = BTreeSet::new();
        let mut uids = BTreeSet::new();
        for (i, p) in self.pods.iter().enumerate() {
            if p.name.is_empty() || p.namespace.is_empty() || p.uid.is_empty() {
                return Err(format!(
                    "pods[{i}] ({}/{}) needs a namespace, a name and a uid",
                    p.namespace, p.name
                ));
            }
            if !pods.insert((p.namespace.as_str(), p.name.as_str())) {
                return Err(format!("pod {}/{} appears twice", p.namespace, p.name));
            }
            if !uids.insert(p.uid.as_str()) {
                return Err(format!(
                    "pod {}/{} has the uid {} of another object",
                    p.namespace, p.name, p.uid
                ));
            }
            if let Some(n) = &p.node_name {
                if !nodes.contains(n.as_str()) {
                    return Err(format!(
                        "pod {}/{} runs on node {n}, which is not in the snapshot",
                        p.namespace, p.name
                    ));
                }
            }
            if !matches!(
                p.phase.as_str(),
                "Pending" | "Running" | "Succeeded" | "Failed" | "Unknown"
            ) {
                return Err(format!(
                    "pod {}/{} has phase `{}` (Pending, Running, Succeeded, Failed or Unknown)",
                    p.namespace, p.name, p.phase
                ));
            }
            if p.ready_seconds.is_some_and(|r| r < 0.0) {
                return Err(format!(
                    "pod {}/{} has a negative readySeconds",
                    p.namespace, p.name
                ));
            }
            if p.grace_seconds < 0 {
                return Err(format!(
                    "pod {}/{} has a negative grace period ({})",
                    p.namespace, p.name, p.grace_seconds
                ));
            }
        }
        let mut budgets = BTreeSet::new();
        for b in &self.budgets {
            if !budgets.insert((b.namespace.as_str(), b.name.as_str())) {
                return Err(format!("budget {}/{} appears twice", b.namespace, b.name));
            }
            let int_or_percent = |v: &Option<Value>| match v {
                None | Some(Value::Number(_)) => true,
                Some(Value::String(s)) => s
                    .strip_suffix('%')
                    .is_some_and(|n| n.parse::<u32>().is_ok()),
                Some(_) => false,
            };
            if b.min_available.is_some() && b.max_unavailable.is_some() {
                return Err(format!(
                    "budget {}/{} sets both minAvailable and maxUnavailable",
                    b.namespace, b.name
                ));
            }
            if !int_or_percent(&b.min_available) || !int_or_percent(&b.max_unavailable) {
                return Err(format!(
                    "budget {}/{}: minAvailable and maxUnavailable are a number or a percentage like \"50%\"",
                    b.namespace, b.name
                ));
            }
            if b.selector.as_ref().is_some_and(|s| !s.is_object()) {
                return Err(format!(
                    "budget {}/{}: selector must be a LabelSelector object",
                    b.namespace, b.name
                ));
            }
        }
        for (list, kind) in [
            (&self.deployments, "Deployment"),
            (&self.replica_sets, "ReplicaSet"),
            (&self.stateful_sets, "StatefulSet"),
            (&self.daemon_sets, "DaemonSet"),
        ] {
            let mut seen = BTreeSet::new();
            for c in list {
                if !seen.insert((c.namespace.as_str(), c.name.as_str())) {
                    return Err(format!("{kind} {}/{} appears twice", c.namespace, c.name));
                }
                if c.uid.is_empty() {
                    return Err(format!("{kind} {}/{} has no uid", c.namespace, c.name));
                }
                if c.replicas.is_some_and(|r| r < 0) {
                    return Err(format!(
                        "{kind} {}/{} has negative replicas",
                        c.namespace, c.name
                    ));
                }
                if kind != "DaemonSet" && c.replicas.is_none() {
                    return Err(format!("{kind} {}/{} has no replicas", c.namespace, c.name));
                }
            }
        }
        Ok(())
    }
}

/// Reads and checks a snapshot file; an error names the file and what is wrong.
pub fn read(path: &Path) -> Result<Snapshot, SnapshotError> {
    let file = path.display().to_string();
    let text = std::fs::read(path).map_err(|source| SnapshotError::Io {
        file: file.clone(),
        source,
    })?;
    let snap: Snapshot = serde_json::from_slice(&text).map_err(|e| SnapshotError::Syntax {
        file: file.clone(),
        what: e.to_string(),
    })?;
    snap.check()
        .map_err(|what| SnapshotError::Invalid { file, what })?;
    Ok(snap)
}

/// Writes a snapshot file (compact JSON: a 150,000-pod snapshot is tens of megabytes).
pub fn write(path: &Path, snap: &Snapshot) -> Result<(), SnapshotError> {
    let io = |source| SnapshotError::Io {
        file: path.display().to_string(),
        source,
    };
    let f = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::new(f);
    serde_json::to_writer(&mut w, snap).map_err(|e| SnapshotError::Syntax {
        file: path.display().to_string(),
        what: e.to_string(),
    })?;
    std::io::Write::flush(&mut w).map_err(io)
}

fn owner_refs(o: &Option<Owner>) -> Value {
    match o {
        Some(o) => {
            json!([{"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid,
            "controller": true, "blockOwnerDeletion": true}])
        }
        None => Value::Null,
    }
}

fn template_value(t: &SnapTemplate) -> Value {
    let mut spec = json!({"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
        "terminationGracePeriodSeconds": t.grace_seconds});
    if t.empty_dir {
        // The world's ReplicaSet controller gives new pods an emptyDir volume when the template
        // has volumes.
        spec["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
    }
    if !t.node_selector.is_empty() {
        spec["nodeSelector"] = json!(t.node_selector);
    }
    json!({"metadata": {"labels": t.labels}, "spec": spec})
}

fn controller_value(c: &SnapController, kind: &str, now: &str) -> Value {
    let r = c.replicas.unwrap_or(0);
    let mut md = json!({"name": c.name, "namespace": c.namespace, "uid": c.uid, "creationTimestamp": now,
        "generation": 1, "labels": c.labels});
    let refs = owner_refs(&c.owner);
    if !refs.is_null() {
        md["ownerReferences"] = refs;
    }
    let mut spec = json!({"selector": c.selector, "template": template_value(&c.template)});
    if kind != "DaemonSet" {
        spec["replicas"] = json!(r);
    }
    let status = match kind {
        "DaemonSet" => json!({"observedGeneration": 1}),
        _ => {
            json!({"observedGeneration": 1, "replicas": r, "readyReplicas": r, "availableReplicas": r})
        }
    };
    json!({"apiVersion": "apps/v1", "kind": kind, "metadata": md, "spec": spec, "status": status})
}

fn pod_value(p: &SnapPod, now: &str) -> Value {
    let mut md = json!({"name": p.name, "namespace": p.namespace, "uid": p.uid, "creationTimestamp": now,
        "generation": 1, "labels": p.labels});
    let refs = owner_refs(&p.owner);
    if !refs.is_null() {
        md["ownerReferences"] = refs;
    }
    if p.mirror {
        md["annotations"] =
            json!({"kubernetes.io/config.mirror": p.uid, "kubernetes.io/config.source": "file"});
    }
    if p.deleting {
        md["deletionTimestamp"] = json!(now);
        md["deletionGracePeriodSeconds"] = json!(p.grace_seconds);
    }
    let daemon = p.owner.as_ref().is_some_and(|o| o.kind == "DaemonSet");
    let mut spec = json!({
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent"}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": p.grace_seconds,
        "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
        "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": true,
    });
    spec["tolerations"] = if daemon {
        json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}])
    } else {
        json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}])
    };
    if let Some(n) = &p.node_name {
        spec["nodeName"] = json!(n);
    }
    if !p.node_selector.is_empty() {
        spec["nodeSelector"] = json!(p.node_selector);
    }
    if p.empty_dir {
        spec["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
        spec["containers"][0]["volumeMounts"] =
            json!([{"name": "scratch", "mountPath": "/scratch"}]);
    }
    let status = match p.phase.as_str() {
        "Running" => {
            let mut s = super::world::running_status(now, p.ready);
            if p.node_name.is_none() {
                s["phase"] = json!("Pending");
            }
            s
        }
        phase => json!({"phase": phase, "qosClass": "BestEffort"}),
    };
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec, "status": status})
}

fn node_value(n: &SnapNode, i: usize, boot: &str, now: &str) -> Value {
    let mut spec = json!({});
    if n.unschedulable {
        spec["unschedulable"] = json!(true);
    }
    if !n.taints.is_empty() {
        spec["taints"] = json!(n
            .taints
            .iter()
            .map(|t| {
                let mut v = json!({"key": t.key, "effect": t.effect});
                if let Some(x) = &t.value {
                    v["value"] = json!(x);
                }
                v
            })
            .collect::<Vec<_>>());
    }
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": n.name, "uid": format!("snapshot-node-{i}"), "creationTimestamp": now, "labels": n.labels},
        "spec": spec,
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [super::world::ready_condition(n.ready, now)],
            "addresses": [{"type": "Hostname", "address": n.name}],
            "nodeInfo": {"machineID": format!("{i:032x}"), "systemUUID": format!("snapshot-{i}"), "bootID": boot,
                "kernelVersion": "6.8.0-sim", "osImage": "rollboot simulated Linux",
                "containerRuntimeVersion": "containerd://2.0.0", "kubeletVersion": "v1.36.2",
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}
        }
    })
}

/// Puts the snapshot's objects into the store instead of a generated world (synchronously,
/// before serving); the world's controllers then act on them as on generated ones. Returns
/// the world's random source, seeded with `seed`.
pub fn load(shared: &Shared, snap: &Snapshot, seed: u64) -> SmallRng {
    let rng = SmallRng::seed_from_u64(seed);
    let mut inner = shared.store.lock();
    let now = timestamp(Utc::now());
    let mut namespaces: BTreeSet<String> = api::SYSTEM_NAMESPACES
        .iter()
        .map(|s| s.to_string())
        .collect();
    namespaces.extend(snap.pods.iter().map(|p| p.namespace.clone()));
    namespaces.extend(snap.budgets.iter().map(|p| p.namespace.clone()));
    for list in [
        &snap.deployments,
        &snap.replica_sets,
        &snap.stateful_sets,
        &snap.daemon_sets,
    ] {
        namespaces.extend(list.iter().map(|c| c.namespace.clone()));
    }
    for (i, ns) in namespaces.iter().enumerate() {
        inner.put(Kind::Namespace, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
            "uid": format!("snapshot-ns-{i}"), "creationTimestamp": now, "labels": {"kubernetes.io/metadata.name": ns}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}));
    }
    for (i, n) in snap.nodes.iter().enumerate() {
        let boot = format!("{:08x}-0000-4000-a000-{:012x}", seed as u32, i);
        inner.put(Kind::Node, node_value(n, i, &boot, &now));
        shared.invariants.node_availability(
            &n.name,
            &BTreeMap::new(),
            n.unschedulable || !n.ready,
            false,
        );
    }
    let mut on_node: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for p in snap.pods.iter().filter(|p| p.node_name.is_some()) {
        if let Some(o) = p.owner.as_ref().filter(|o| o.kind == "DaemonSet") {
            *on_node
                .entry((p.namespace.as_str(), o.name.as_str()))
                .or_default() += 1;
        }
    }
    for (list, kind) in [
        (&snap.deployments, Kind::Deployment),
        (&snap.replica_sets, Kind::ReplicaSet),
        (&snap.stateful_sets, Kind::StatefulSet),
        (&snap.daemon_sets, Kind::DaemonSet),
    ] {
        let name = match kind {
            Kind::Deployment => "Deployment",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::StatefulSet => "StatefulSet",
            _ => "DaemonSet",
        };
        for c in list {
            let mut v = controller_value(c, name, &now);
            if kind == Kind::DaemonSet {
                let n = on_node
                    .get(&(c.namespace.as_str(), c.name.as_str()))
                    .copied()
                    .unwrap_or(0);
                v["status"] = json!({"currentNumberScheduled": n, "desiredNumberScheduled": n,
                    "numberMisscheduled": 0, "numberReady": n, "observedGeneration": 1});
            }
            inner.put(kind, v);
        }
    }
    for p in &snap.pods {
        inner.put(Kind::Pod, pod_value(p, &now));
    }
    for (i, b) in snap.budgets.iter().enumerate() {
        let mut spec = json!({});
        if let Some(s) = &b.selector {
            spec["selector"] = s.clone();
        }
        if let Some(m) = &b.min_available {
            spec["minAvailable"] = m.clone();
        }
        if let Some(m) = &b.max_unavailable {
            spec["maxUnavailable"] = m.clone();
        }
        if let Some(p) = &b.unhealthy_pod_eviction_policy {
            spec["unhealthyPodEvictionPolicy"] = json!(p);
        }
        let e = inner.put(Kind::Pdb, json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": b.name, "namespace": b.namespace, "uid": format!("snapshot-pdb-{i}"),
                "creationTimestamp": now, "generation": 1},
            "spec": spec}));
        super::world::refresh_pdb(&mut inner, &e.idx.key());
    }
    rng
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Snapshot {
        Snapshot {
            format: FORMAT.into(),
            taken_at: "2026-11-23T02:00:00Z".into(),
            source: "test".into(),
            nodes: vec![SnapNode {
                name: "n1".into(),
                ready: true,
                ..Default::default()
            }],
            pods: vec![SnapPod {
                namespace: "a".into(),
                name: "p".into(),
                uid: "u1".into(),
                node_name: Some("n1".into()),
                phase: "Running".into(),
                ready: true,
                grace_seconds: 30,
                ..Default::default()
            }],
            budgets: vec![SnapBudget {
                namespace: "a".into(),
                name: "b".into(),
                selector: Some(json!({"matchLabels": {"app": "x"}})),
                max_unavailable: Some(json!(1)),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_snapshot_round_trips_through_its_file_format() {
        let mut s = small();
        s.nodes[0].last_cycle = Some(SnapCycle {
            reboot_seconds: Some(95.5),
            pod_exit_seconds: Some(2.0),
            ..Default::default()
        });
        s.pods[0].ready_seconds = Some(1.25);
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains("\"nodeName\":\"n1\""), "{text}");
        assert!(text.contains("\"graceSeconds\":30"), "{text}");
        assert!(
            text.contains("\"lastCycle\":{\"rebootSeconds\":95.5,\"podExitSeconds\":2.0}"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Snapshot>(&text).unwrap(), s);
        assert_eq!(s.check(), Ok(()));
    }

    #[test]
    fn content_that_does_not_hold_together_is_named() {
        let mut s = small();
        s.pods[0].node_name = Some("n9".into());
        assert_eq!(
            s.check().unwrap_err(),
            "pod a/p runs on node n9, which is not in the snapshot"
        );
        let mut s = small();
        s.format = "v0".into();
        assert!(s.check().unwrap_err().contains("format is `v0`"));
        let mut s = small();
        s.budgets[0].min_available = Some(json!("half"));
        s.budgets[0].max_unavailable = None;
        assert!(s
            .check()
            .unwrap_err()
            .starts_with("budget a/b: minAvailable and maxUnavailable"));
        let mut s = small();
        s.nodes.push(s.nodes[0].clone());
        assert_eq!(s.check().unwrap_err(), "node n1 appears twice");
        let mut s = small();
        s.nodes[0].last_cycle = Some(SnapCycle {
            gate_seconds: Some(-1.0),
            ..Default::default()
        });
        assert_eq!(
            s.check().unwrap_err(),
            "node n1: lastCycle.gateSeconds is negative"
        );
        let mut s = small();
        s.pods[0].phase = "Up".into();
        assert!(s.check().unwrap_err().contains("has phase `Up`"));
    }

    #[test]
    fn a_bad_file_is_named_with_what_is_wrong() {
        let dir = std::env::temp_dir().join(format!("rollboot-snap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("bad.json");
        std::fs::write(
            &f,
            "{\"format\": \"rollboot.dev/snapshot/v1\", \"nodes\": 3}",
        )
        .unwrap();
        let e = read(&f).unwrap_err().to_string();
        assert!(e.starts_with(&format!("snapshot {}: ", f.display())), "{e}");
        assert!(
            e.contains("invalid type: integer `3`, expected a sequence"),
            "{e}"
        );
        assert!(e.contains("line 1"), "{e}");
        std::fs::write(&f, "{\"format\": \"rollboot.dev/snapshot/v1\", \"takenAt\": \"\", \"source\": \"\", \"nodes\": [], \"pods\": [], \"budgets\": [], \"extra\": 1}").unwrap();
        let e = read(&f).unwrap_err().to_string();
        assert!(e.contains("unknown field `extra`"), "{e}");
        let e = read(&dir.join("absent.json")).unwrap_err().to_string();
        assert!(e.contains("absent.json: No such file"), "{e}");
        let good = dir.join("good.json");
        write(&good, &small()).unwrap();
        assert_eq!(read(&good).unwrap(), small());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
