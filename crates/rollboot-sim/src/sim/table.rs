//! Server-side printing: `meta.k8s.io/v1` Tables for Nodes, Pods and Events, as kube-apiserver
//! answers `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` (what `kubectl get` asks for).
//!
//! Owns the columns of the kinds kubectl users look at (the real printers in
//! pkg/printers/internalversion: nodes NAME/STATUS/ROLES/AGE/VERSION, pods
//! NAME/READY/STATUS/RESTARTS/AGE, plus the `-o wide` columns; Events' columns, the same for
//! both Event APIs, printed from the stored form of `events.rs`). Other kinds are answered as
//! plain objects, which kubectl prints as NAME/AGE. It must never change what is stored.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::events;
use super::kinds::Kind;

/// True when the request asks for a Table this module can print.
pub fn wanted(accept: &str, kind: Kind) -> bool {
    accept.contains("as=Table")
        && matches!(kind, Kind::Node | Kind::Pod | Kind::Event | Kind::EventV1)
}

fn col(name: &str, typ: &str, priority: u8, description: &str) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({"name": name, "type": typ, "format": format, "description": description, "priority": priority})
}

/// `k8s.io/apimachinery/pkg/util/duration.HumanDuration`.
pub fn human_duration(d: chrono::Duration) -> String {
    let s = d.num_seconds();
    if s < -1 {
        return "<invalid>".into();
    }
    if s < 0 {
        return "0s".into();
    }
    if s < 60 * 2 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        return if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        };
    }
    if m < 60 * 3 {
        return format!("{m}m");
    }
    let h = m / 60;
    if h < 8 {
        return if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        };
    }
    if h < 48 {
        return format!("{h}h");
    }
    if h < 24 * 8 {
        return if h % 24 == 0 {
            format!("{}d", h / 24)
        } else {
            format!("{}d{}h", h / 24, h % 24)
        };
    }
    if h < 24 * 365 * 2 {
        return format!("{}d", h / 24);
    }
    let y = h / 24 / 365;
    if y < 8 {
        return format!("{y}y{}d", (h / 24) % 365);
    }
    format!("{y}y")
}

fn age(o: &Value, now: DateTime<Utc>) -> String {
    o["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map_or("<unknown>".into(), |t| human_duration(now - t.to_utc()))
}

fn or_none(v: &Value) -> Value {
    match v.as_str() {
        Some(s) if !s.is_empty() => json!(s),
        _ => json!("<none>"),
    }
}

fn node_cells(o: &Value, now: DateTime<Utc>) -> Value {
    let ready = o["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| c["status"].as_str().unwrap_or(""));
    let mut status = match ready {
        Some("True") => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if o["spec"]["unschedulable"] == true {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<String> = o["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.keys()
                .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                .filter(|r| !r.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    };
    let addr = |t: &str| {
        o["status"]["addresses"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["type"] == t))
            .map_or(json!("<none>"), |x| or_none(&x["address"]))
    };
    let info = &o["status"]["nodeInfo"];
    json!([
        o["metadata"]["name"],
        status,
        roles,
        age(o, now),
        info["kubeletVersion"],
        addr("InternalIP"),
        addr("ExternalIP"),
        or_none(&info["osImage"]),
        or_none(&info["kernelVersion"]),
        or_none(&info["containerRuntimeVersion"])
    ])
}

fn pod_cells(o: &Value, now: DateTime<Utc>) -> Value {
    let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
    let statuses = o["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = statuses.iter().filter(|c| c["ready"] == true).count();
    let restarts: i64 = statuses
        .iter()
        .map(|c| c["restartCount"].as_i64().unwrap_or(0))
        .sum();
    let status = if o["metadata"]["deletionTimestamp"].is_string() {
        "Terminating".to_string()
    } else {
        o["status"]["reason"]
            .as_str()
            .or(o["status"]["phase"].as_str())
            .unwrap_or("Unknown")
            .to_string()
    };
    json!([
        o["metadata"]["name"],
        format!("{ready}/{total}"),
        status,
        restarts,
        age(o, now),
        or_none(&o["status"]["podIP"]),
        or_none(&o["spec"]["nodeName"]),
        or_none(&o["status"]["nominatedNodeName"]),
        "<none>"
    ])
}

/// Turns a List or a single object of `kind` into a Table; `include` is the request's
/// `includeObject` (None, Object, default PartialObjectMetadata).
pub fn to_table(kind: Kind, body: &[u8], include: Option<&str>) -> Option<Value> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let now = Utc::now();
    let (objects, metadata) = match v["items"].as_array() {
        Some(items) => (items.clone(), v["metadata"].clone()),
        None => (
            vec![v.clone()],
            json!({"resourceVersion": v["metadata"]["resourceVersion"]}),
        ),
    };
    let columns = match kind {
        Kind::Node => vec![
            col("Name", "string", 0, "Name must be unique within a namespace."),
            col("Status", "string", 0, "The status of the node"),
            col("Roles", "string", 0, "The roles of the node"),
            col("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
            col("Version", "string", 0, "Kubelet Version reported by the node."),
            col("Internal-IP", "string", 1, "List of addresses reachable to the node. Queried from cloud provider, if available."),
            col("External-IP", "string", 1, "List of addresses reachable to the node. Queried from cloud provider, if available."),
            col("OS-Image", "string", 1, "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
            col("Kernel-Version", "string", 1, "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
            col("Container-Runtime", "string", 1, "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
        ],
        Kind::Pod => vec![
            col("Name", "string", 0, "Name must be unique within a namespace."),
            col("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            col("Status", "string", 0, "The aggregate status of the containers in this pod."),
            col("Restarts", "string", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            col("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
            col("IP", "string", 1, "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
            col("Node", "string", 1, "NodeName is a request to schedule this pod onto a specific node."),
            col("Nominated Node", "string", 1, "nominatedNodeName is set only when this pod preempts other pods on the node."),
            col("Readiness Gates", "string", 1, "If specified, all readiness gates will be evaluated for pod readiness."),
        ],
        Kind::Event | Kind::EventV1 => event_columns(),
        _ => return None,
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let cells = match kind {
                Kind::Node => node_cells(o, now),
                Kind::Pod => pod_cells(o, now),
                // Printed from the stored form, whichever API served the object.
                Kind::EventV1 => event_cells(&events::from_v1(o), now),
                _ => event_cells(o, now),
            };
            let mut row = json!({"cells": cells});
            match include {
                Some("None") => {}
                Some("Object") => row["object"] = o.clone(),
                _ => {
                    row["object"] = json!({"kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]})
                }
            }
            row
        })
        .collect();
    Some(
        json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata,
        "columnDefinitions": columns, "rows": rows}),
    )
}

/// The Event printer's columns (`pkg/printers/internalversion`), the same for both versions.
fn event_columns() -> Vec<Value> {
    vec![
        col("Last Seen", "string", 0, "The time at which the most recent occurrence of this event was recorded."),
        col("Type", "string", 0, "Type of this event (Normal, Warning), new types could be added in the future"),
        col("Reason", "string", 0, "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
        col("Object", "string", 0, "The object that this event is about."),
        col("Subobject", "string", 1, "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object."),
        col("Source", "string", 1, "The component reporting this event. Should be a short machine understandable string."),
        col("Message", "string", 0, "A human-readable description of the status of this operation."),
        col("First Seen", "string", 1, "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
        col("Count", "string", 1, "The number of times this event has occurred."),
        col("Name", "string", 1, "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"),
    ]
}

fn since(t: &Value, now: DateTime<Utc>) -> String {
    if events::zero_time(t) {
        return "<unknown>".into();
    }
    t.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map_or("<unknown>".into(), |t| human_duration(now - t.to_utc()))
}

/// One printed row (the wide form the server always sends) of a stored-form Event.
fn event_cells(ev: &Value, now: DateTime<Utc>) -> Value {
    let first = if events::zero_time(&ev["firstTimestamp"]) {
        since(&ev["eventTime"], now)
    } else {
        since(&ev["firstTimestamp"], now)
    };
    let mut last = if events::zero_time(&ev["lastTimestamp"]) {
        first.clone()
    } else {
        since(&ev["lastTimestamp"], now)
    };
    let mut count = ev["count"].as_i64().unwrap_or(0);
    if ev["series"].is_object() {
        last = since(&ev["series"]["lastObservedTime"], now);
        count = ev["series"]["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let io = &ev["involvedObject"];
    let kind = str_of(io, "kind").to_lowercase();
    let target = match str_of(io, "name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let first_non_empty = |a: &str, b: &str| {
        if a.is_empty() {
            b.to_string()
        } else {
            a.to_string()
        }
    };
    let component = first_non_empty(
        str_of(&ev["source"], "component"),
        str_of(ev, "reportingComponent"),
    );
    let instance = first_non_empty(
        str_of(&ev["source"], "host"),
        str_of(ev, "reportingInstance"),
    );
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    json!([
        last,
        str_of(ev, "type"),
        str_of(ev, "reason"),
        target,
        str_of(io, "fieldPath"),
        source,
        str_of(ev, "message").trim(),
        first,
        count,
        str_of(&ev["metadata"], "name"),
    ])
}

fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or("")
}
