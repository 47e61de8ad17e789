//! The small parsed view the store keeps beside each object ([`Index`]), so that selectors,
//! budgets, the world and the invariant watch never reparse JSON: names, labels, placement,
//! readiness, a Node's signals of the actors taking it out, owner, a budget's parsed selector, an Event's field-selector values, a workload's
//! counts; the store key of an object; and the field selectors each kind supports.
//!
//! Above the kinds and the Event form (whose field-selector values it keeps), below the store,
//! the budgets (`pdb.rs`) and everything that reads stored objects. It must never store
//! anything, decide what a write does, or talk HTTP.

use std::collections::BTreeMap;

use rollboot::selector::Selector;
use serde_json::Value;

use super::errors::ApiError;
use super::events::Fields;
use super::kinds::Kind;
use super::signals::NodeSignals;

/// The small parsed view kept beside each stored object, so selectors never reparse JSON.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Index {
    /// metadata.namespace ("" for cluster-scoped)
    pub namespace: String,
    /// metadata.name
    pub name: String,
    /// metadata.uid
    pub uid: String,
    /// metadata.resourceVersion
    pub rv: u64,
    /// metadata.labels
    pub labels: BTreeMap<String, String>,
    /// spec.nodeName (pods)
    pub node_name: Option<String>,
    /// status.phase (pods)
    pub phase: Option<String>,
    /// Ready condition is True (pods and nodes)
    pub ready: bool,
    /// metadata.deletionTimestamp is set
    pub deleting: bool,
    /// metadata.finalizers is not empty
    pub finalizers: bool,
    /// spec.unschedulable (nodes)
    pub unschedulable: bool,
    /// a `node.kubernetes.io/not-ready` or `unreachable` taint (nodes)
    pub not_ready_taint: bool,
    /// cordoned (`spec.unschedulable`) with rollboot's `rollboot.dev/cordoned-by` on it (nodes):
    /// out of service because of rollboot, which the invariant watch holds to `maxNodes`
    pub cordoned_by_rollboot: bool,
    /// the controller owner reference: (kind, name, uid)
    pub owner: Option<(String, String, String)>,
    /// spec.selector of a PodDisruptionBudget, parsed once: the budgets of a pod are found on
    /// every eviction and every pod change, and reparsing each budget's JSON there dominated
    /// the simulator's CPU time at a few hundred budgets per namespace.
    pub pdb_selector: Option<Selector>,
    /// The field-selector values of an Event (stored form).
    pub event: Option<Box<Fields>>,
    /// `status.nodeInfo.bootID` (nodes): the simulated agents read it on every check.
    pub boot_id: Option<String>,
    /// `status.nodeInfo.machineID` (nodes): a simulated agent reads it as its host's.
    pub machine_id: Option<String>,
    /// `metadata.deletionGracePeriodSeconds` (pods being deleted).
    pub deletion_grace: Option<i64>,
    /// What the world reads of a workload controller (ReplicaSet, StatefulSet, Deployment,
    /// DaemonSet) on every change of one of its pods: read from here, its JSON is parsed
    /// only when it is to be written.
    pub workload: Option<Box<Workload>>,
    /// The claim names of a pod's `persistentVolumeClaim` volumes (empty for other kinds).
    pub claims: Vec<String>,
    /// The PersistentVolume a claim is bound to (`spec.volumeName`), or a VolumeAttachment's
    /// (`spec.source.persistentVolumeName`).
    pub volume: Option<String>,
    /// What a Node says of the actors that take it out (shutdown, other actors' taints and
    /// conditions, protections): the invariant watch and the simulated actors read it on
    /// every Node event. None for other kinds.
    pub signals: Option<Box<NodeSignals>>,
}

/// The numbers of a workload controller the world and the budgets read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workload {
    /// The pods it wants: `spec.replicas` (a DaemonSet's `status.desiredNumberScheduled`).
    pub scale: Option<i64>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The counts of its `status`, by field name ([`Workload::COUNTS`]).
    pub counts: BTreeMap<&'static str, i64>,
}

impl Workload {
    /// The `status` counts kept in [`Workload::counts`].
    pub const COUNTS: [&'static str; 7] = [
        "observedGeneration",
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "currentReplicas",
        "updatedReplicas",
        "fullyLabeledReplicas",
    ];

    fn of(value: &Value) -> Option<Box<Workload>> {
        let scale = match value["kind"].as_str()? {
            "ReplicaSet" | "Deployment" | "StatefulSet" => value["spec"]["replicas"].as_i64(),
            "DaemonSet" => value["status"]["desiredNumberScheduled"].as_i64(),
            _ => return None,
        };
        Some(Box::new(Workload {
            scale,
            generation: value["metadata"]["generation"].as_i64(),
            counts: Self::counts_of(&value["status"]),
        }))
    }

    /// The counts of a workload's `status`.
    fn counts_of(status: &Value) -> BTreeMap<&'static str, i64> {
        Self::COUNTS
            .into_iter()
            .filter_map(|f| Some((f, status[f].as_i64()?)))
            .collect()
    }
}

/// A `status` whose `Ready` condition is True.
fn ready_in(status: &Value) -> bool {
    status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

impl Index {
    /// Builds the index of a canonical object.
    pub fn of(value: &Value) -> Index {
        let md = &value["metadata"];
        let s = |v: &Value| v.as_str().map(str::to_string);
        let labels = md["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let ready = ready_in(&value["status"]);
        let owner = md["ownerReferences"].as_array().and_then(|refs| {
            refs.iter().find(|r| r["controller"] == true).map(|r| {
                (
                    s(&r["kind"]).unwrap_or_default(),
                    s(&r["name"]).unwrap_or_default(),
                    s(&r["uid"]).unwrap_or_default(),
                )
            })
        });
        Index {
            namespace: s(&md["namespace"]).unwrap_or_default(),
            name: s(&md["name"]).unwrap_or_default(),
            uid: s(&md["uid"]).unwrap_or_default(),
            rv: md["resourceVersion"]
                .as_str()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0),
            labels,
            node_name: s(&value["spec"]["nodeName"]),
            phase: s(&value["status"]["phase"]),
            ready,
            deleting: !md["deletionTimestamp"].is_null(),
            finalizers: md["finalizers"].as_array().is_some_and(|f| !f.is_empty()),
            unschedulable: value["spec"]["unschedulable"] == true,
            not_ready_taint: value["spec"]["taints"].as_array().is_some_and(|ts| {
                ts.iter().any(|t| {
                    t["key"] == "node.kubernetes.io/not-ready"
                        || t["key"] == "node.kubernetes.io/unreachable"
                })
            }),
            cordoned_by_rollboot: value["spec"]["unschedulable"] == true
                && !md["annotations"][rollboot::node::CORDONED_BY].is_null(),
            owner,
            pdb_selector: if value["kind"] == "PodDisruptionBudget" {
                label_selector(&value["spec"]["selector"])
            } else {
                None
            },
            event: (value["kind"] == "Event" && value["apiVersion"] == "v1")
                .then(|| Box::new(Fields::of(value))),
            boot_id: s(&value["status"]["nodeInfo"]["bootID"]).filter(|_| value["kind"] == "Node"),
            machine_id: s(&value["status"]["nodeInfo"]["machineID"])
                .filter(|_| value["kind"] == "Node"),
            deletion_grace: md["deletionGracePeriodSeconds"].as_i64(),
            workload: Workload::of(value),
            claims: if value["kind"] == "Pod" {
                pod_claims(value)
            } else {
                Vec::new()
            },
            volume: match value["kind"].as_str() {
                Some("PersistentVolumeClaim") => s(&value["spec"]["volumeName"]),
                Some("VolumeAttachment") => s(&value["spec"]["source"]["persistentVolumeName"]),
                _ => None,
            },
            signals: (value["kind"] == "Node").then(|| Box::new(NodeSignals::of(value))),
        }
    }

    /// Recomputes what the index reads of an object's `status`, for the same object of `kind`
    /// with `status` for its status (a status write spliced into the stored bytes). Reads
    /// what [`Index::of`] reads there, no more.
    pub fn set_status(&mut self, kind: Kind, status: &Value) {
        let s = |v: &Value| v.as_str().map(str::to_string);
        self.phase = s(&status["phase"]);
        self.ready = ready_in(status);
        if kind == Kind::Node {
            self.boot_id = s(&status["nodeInfo"]["bootID"]);
            self.machine_id = s(&status["nodeInfo"]["machineID"]);
            if let Some(sig) = self.signals.as_mut() {
                sig.set_status(status);
            }
        }
        if let Some(w) = self.workload.as_mut() {
            w.counts = Workload::counts_of(status);
            if kind == Kind::DaemonSet {
                w.scale = status["desiredNumberScheduled"].as_i64();
            }
        }
    }

    /// The store key: `namespace/name` or `name`.
    pub fn key(&self) -> String {
        key_of(&self.namespace, &self.name)
    }

    /// Field-selector value of `field` for this object of `kind`, or 400 for a field `kind`
    /// does not support.
    pub fn field_value(&self, kind: Kind, field: &str) -> Result<&str, ApiError> {
        match (kind, field) {
            (_, "metadata.name") => Ok(&self.name),
            (k, "metadata.namespace") if k.namespaced() => Ok(&self.namespace),
            (Kind::Pod, "spec.nodeName") => Ok(self.node_name.as_deref().unwrap_or("")),
            (Kind::Pod, "status.phase") => Ok(self.phase.as_deref().unwrap_or("")),
            (Kind::Node, "spec.unschedulable") => {
                Ok(if self.unschedulable { "true" } else { "false" })
            }
            (Kind::Event | Kind::EventV1, f) => {
                static EMPTY: Fields = Fields::EMPTY;
                let fields = self.event.as_deref().unwrap_or(&EMPTY);
                let value = if kind == Kind::Event {
                    fields.core(f)
                } else {
                    fields.v1(f)
                };
                value.ok_or_else(|| {
                    ApiError::bad_request(format!("field label not supported: {field}"))
                })
            }
            _ => Err(ApiError::bad_request(format!(
                "field label not supported: {field}"
            ))),
        }
    }
}

/// The store key for a namespace and name.
pub fn key_of(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

/// Converts a `LabelSelector` JSON object into a [`Selector`] (a budget's, kept parsed in
/// [`Index::pdb_selector`]). `None` (null selector) selects nothing; an empty selector selects
/// every pod of the namespace (policy/v1 semantics).
pub fn label_selector(sel: &Value) -> Option<Selector> {
    if sel.is_null() {
        return None;
    }
    let mut clauses = Vec::new();
    if let Some(m) = sel["matchLabels"].as_object() {
        for (k, v) in m {
            clauses.push(format!("{k}={}", v.as_str().unwrap_or("")));
        }
    }
    if let Some(exprs) = sel["matchExpressions"].as_array() {
        for e in exprs {
            let key = e["key"].as_str().unwrap_or("");
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|vs| vs.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            clauses.push(match e["operator"].as_str().unwrap_or("") {
                "In" => format!("{key} in ({})", values.join(",")),
                "NotIn" => format!("{key} notin ({})", values.join(",")),
                "Exists" => key.to_string(),
                "DoesNotExist" => format!("!{key}"),
                _ => return None,
            });
        }
    }
    Selector::parse(&clauses.join(",")).ok()
}

/// The claim names of a pod's `persistentVolumeClaim` volumes.
pub fn pod_claims(pod: &Value) -> Vec<String> {
    pod["spec"]["volumes"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}
