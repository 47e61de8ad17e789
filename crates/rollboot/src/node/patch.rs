//! The JSON merge patches that write the protocol to a Node, built from keys and values.
//!
//! Owns the shape of every Node write rollboot makes: annotations set or removed, the cordon,
//! labels, the whole taint list, and the resourceVersion precondition that fences a write
//! ([`fenced`]). It must never send a patch: the node writer ([`crate::node_writer`]) does.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::keys::{STATE, STATE_SINCE};
use super::values::NodeState;
use super::view::TaintView;
use crate::time;

/// A JSON merge patch of the Node's annotations (a `None` value removes the key), and
/// optionally of `spec.unschedulable`.
pub fn patch(annotations: &[(&str, Option<String>)], unschedulable: Option<bool>) -> Value {
    let mut ann = Map::new();
    for (k, v) in annotations {
        ann.insert(
            (*k).to_string(),
            v.clone().map_or(Value::Null, Value::String),
        );
    }
    let mut p = json!({ "metadata": { "annotations": ann } });
    if let Some(u) = unschedulable {
        // `null` rather than `false` removes the field, as `kubectl uncordon` does.
        p["spec"] = json!({ "unschedulable": if u { Value::Bool(true) } else { Value::Null } });
    }
    p
}

/// Adds to a merge patch the Node's labels to set (`Some`) or remove (`None`).
pub fn with_labels(mut patch: Value, labels: &[(String, Option<String>)]) -> Value {
    if labels.is_empty() {
        return patch;
    }
    let mut m = Map::new();
    for (k, v) in labels {
        m.insert(k.clone(), v.clone().map_or(Value::Null, Value::String));
    }
    patch["metadata"]["labels"] = Value::Object(m);
    patch
}

/// Adds to a merge patch the Node's whole taint list: a JSON merge patch replaces a list, so
/// `taints` must be every taint the Node keeps (built from a view of the version the patch is
/// fenced by). No taints writes `null`, as the API server stores an empty list.
pub fn with_taints(mut patch: Value, taints: &[TaintView]) -> Value {
    patch["spec"]["taints"] = if taints.is_empty() {
        Value::Null
    } else {
        Value::Array(taints.iter().map(TaintView::to_json).collect())
    };
    patch
}

/// `patch` made conditional on the Node still being at `resource_version`: kube-apiserver
/// answers 409 Conflict to a merge patch whose `metadata.resourceVersion` is not the stored one.
/// This fences a write decided from a view against every write made since that view, by anyone
/// (a newer leader, the agent, the kubelet). An empty `resource_version` leaves it unconditional.
pub fn fenced(mut patch: Value, resource_version: &str) -> Value {
    if !resource_version.is_empty() {
        patch["metadata"]["resourceVersion"] = Value::String(resource_version.to_string());
    }
    patch
}

/// One condition of a Node's status, as [`conditions_patch`] writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionPatch<'a> {
    /// Its type.
    pub kind: &'a str,
    /// `True` or `False`.
    pub status: bool,
    /// Its reason.
    pub reason: &'a str,
    /// Its message.
    pub message: &'a str,
    /// Its `lastTransitionTime`: when its status last changed.
    pub transition: DateTime<Utc>,
}

/// A strategic merge patch of a Node's status that sets `conditions` (merged by type: the
/// others stay as they are), each heard at `now`.
pub fn conditions_patch(conditions: &[ConditionPatch<'_>], now: DateTime<Utc>) -> Value {
    let list: Vec<Value> = conditions
        .iter()
        .map(|c| {
            json!({
                "type": c.kind,
                "status": if c.status { "True" } else { "False" },
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": time::annotation(c.transition),
                "lastHeartbeatTime": time::annotation(now),
            })
        })
        .collect();
    json!({ "status": { "conditions": list } })
}

/// The annotations that move a node to `state` at `now`.
pub fn state_annotations(
    state: NodeState,
    now: DateTime<Utc>,
) -> Vec<(&'static str, Option<String>)> {
    vec![
        (STATE, Some(state.as_str().to_string())),
        (STATE_SINCE, Some(time::annotation(now))),
    ]
}
