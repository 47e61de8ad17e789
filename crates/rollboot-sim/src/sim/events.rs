//! Events as kube-apiserver keeps them: one storage for core/v1 and events.k8s.io/v1 Events.
//!
//! Owns the stored form (a core/v1 Event, serialized as Go serializes it: empty structs as `{}`,
//! unset timestamps as `null`), the conversion of that form to and from events.k8s.io/v1
//! (`regarding`/`involvedObject`, `note`/`message`, `reportingController`/`reportingComponent`,
//! `deprecated*`), the validation of a create and of an update for each request version (the
//! legacy rules for core/v1 and for Events without `eventTime`, the strict ones for
//! events.k8s.io/v1, worded as `pkg/apis/core/validation/events.go` words them) and the fields
//! a field selector can name in each version. The printer's columns are `table.rs`'s. It must
//! never touch the store or HTTP.

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::kinds::Kind;
use super::validation::{self as v, BadValue, FieldError, NameRule};

const REFERENCE_FIELDS: [&str; 7] = [
    "kind",
    "namespace",
    "name",
    "uid",
    "apiVersion",
    "resourceVersion",
    "fieldPath",
];

/// True for a timestamp Go would call zero (absent, `null`, or year 1).
pub fn zero_time(t: &Value) -> bool {
    match t.as_str() {
        Some(s) => s.is_empty() || s.starts_with("0001-01-01T00:00:00"),
        None => true,
    }
}

fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or("")
}

/// An ObjectReference as Go serializes it: every field `omitempty`.
fn reference(r: &Value) -> Value {
    let mut out = Map::new();
    for k in REFERENCE_FIELDS {
        let s = str_of(r, k);
        if !s.is_empty() {
            out.insert(k.into(), json!(s));
        }
    }
    Value::Object(out)
}

fn source(s: &Value) -> Value {
    let mut out = Map::new();
    for k in ["component", "host"] {
        if !str_of(s, k).is_empty() {
            out.insert(k.into(), s[k].clone());
        }
    }
    Value::Object(out)
}

fn time_or_null(t: &Value) -> Value {
    if zero_time(t) {
        Value::Null
    } else {
        t.clone()
    }
}

fn put_nonempty(out: &mut Map<String, Value>, key: &str, value: &Value) {
    if value.as_str().is_some_and(|s| !s.is_empty()) {
        out.insert(key.into(), value.clone());
    }
}

fn put_nonzero(out: &mut Map<String, Value>, key: &str, value: &Value) {
    if value.as_i64().is_some_and(|n| n != 0) {
        out.insert(key.into(), value.clone());
    }
}

/// The stored form of a core/v1 Event (already decoded into its type): the fields a Go server
/// always writes are present, the `omitempty` ones are left out when empty.
pub fn normalize(core: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    out.insert("metadata".into(), core["metadata"].clone());
    out.insert("involvedObject".into(), reference(&core["involvedObject"]));
    put_nonempty(&mut out, "reason", &core["reason"]);
    put_nonempty(&mut out, "message", &core["message"]);
    out.insert("source".into(), source(&core["source"]));
    out.insert(
        "firstTimestamp".into(),
        time_or_null(&core["firstTimestamp"]),
    );
    out.insert("lastTimestamp".into(), time_or_null(&core["lastTimestamp"]));
    put_nonzero(&mut out, "count", &core["count"]);
    put_nonempty(&mut out, "type", &core["type"]);
    out.insert("eventTime".into(), time_or_null(&core["eventTime"]));
    if core["series"].is_object() {
        let mut s = Map::new();
        put_nonzero(&mut s, "count", &core["series"]["count"]);
        s.insert(
            "lastObservedTime".into(),
            time_or_null(&core["series"]["lastObservedTime"]),
        );
        out.insert("series".into(), Value::Object(s));
    }
    put_nonempty(&mut out, "action", &core["action"]);
    if core["related"].is_object() {
        out.insert("related".into(), reference(&core["related"]));
    }
    out.insert(
        "reportingComponent".into(),
        json!(str_of(core, "reportingComponent")),
    );
    out.insert(
        "reportingInstance".into(),
        json!(str_of(core, "reportingInstance")),
    );
    Value::Object(out)
}

/// An events.k8s.io/v1 Event (decoded into its type) in the stored core/v1 form
/// (`Convert_v1_Event_To_core_Event`).
pub fn from_v1(ev: &Value) -> Value {
    let core = json!({
        "metadata": ev["metadata"],
        "involvedObject": ev["regarding"],
        "reason": ev["reason"],
        "message": ev["note"],
        "source": ev["deprecatedSource"],
        "firstTimestamp": ev["deprecatedFirstTimestamp"],
        "lastTimestamp": ev["deprecatedLastTimestamp"],
        "count": ev["deprecatedCount"],
        "type": ev["type"],
        "eventTime": ev["eventTime"],
        "series": ev["series"],
        "action": ev["action"],
        "related": ev["related"],
        "reportingComponent": ev["reportingController"],
        "reportingInstance": ev["reportingInstance"],
    });
    normalize(&core)
}

/// The stored core/v1 Event as events.k8s.io/v1 serves it (`Convert_core_Event_To_v1_Event`).
pub fn to_v1(core: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    out.insert("kind".into(), json!("Event"));
    out.insert("metadata".into(), core["metadata"].clone());
    out.insert("eventTime".into(), time_or_null(&core["eventTime"]));
    if core["series"].is_object() {
        out.insert(
            "series".into(),
            json!({
                "count": core["series"]["count"].as_i64().unwrap_or(0),
                "lastObservedTime": time_or_null(&core["series"]["lastObservedTime"]),
            }),
        );
    }
    put_nonempty(&mut out, "reportingController", &core["reportingComponent"]);
    put_nonempty(&mut out, "reportingInstance", &core["reportingInstance"]);
    put_nonempty(&mut out, "action", &core["action"]);
    put_nonempty(&mut out, "reason", &core["reason"]);
    out.insert("regarding".into(), reference(&core["involvedObject"]));
    if core["related"].is_object() {
        out.insert("related".into(), reference(&core["related"]));
    }
    put_nonempty(&mut out, "note", &core["message"]);
    put_nonempty(&mut out, "type", &core["type"]);
    out.insert("deprecatedSource".into(), source(&core["source"]));
    out.insert(
        "deprecatedFirstTimestamp".into(),
        time_or_null(&core["firstTimestamp"]),
    );
    out.insert(
        "deprecatedLastTimestamp".into(),
        time_or_null(&core["lastTimestamp"]),
    );
    put_nonzero(&mut out, "deprecatedCount", &core["count"]);
    Value::Object(out)
}

/// The stored form of a decoded request body of `kind` (either Event kind).
pub fn to_storage(kind: Kind, decoded: &Value) -> Value {
    if kind == Kind::EventV1 {
        from_v1(decoded)
    } else {
        normalize(decoded)
    }
}

/// A stored Event as a request of `kind` reads it.
pub fn view(kind: Kind, stored: &Value) -> Value {
    if kind == Kind::EventV1 {
        to_v1(stored)
    } else {
        stored.clone()
    }
}

/// Stored bytes as a request of `kind` reads them (unchanged unless events.k8s.io/v1).
pub fn present(kind: Kind, stored: &Bytes) -> Bytes {
    if kind != Kind::EventV1 {
        return stored.clone();
    }
    match serde_json::from_slice::<Value>(stored) {
        Ok(v) => Bytes::from(serde_json::to_vec(&to_v1(&v)).unwrap_or_default()),
        Err(_) => stored.clone(),
    }
}

/// `legacyValidateEvent`: what every Event must satisfy, whatever the request version. The
/// namespace rule depends on `eventTime`: without it (an old-style Event) the Event lives in the
/// involved object's namespace (or `default` for a cluster-scoped object); with it, a
/// cluster-scoped object's Events live in `default` or `kube-system`, and the reporting fields
/// are required.
fn legacy(ev: &Value, version: Kind) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let controller_field = if version == Kind::Event {
        "reportingComponent"
    } else {
        "reportingController"
    };
    let ns = str_of(&ev["metadata"], "namespace");
    let involved_ns = str_of(&ev["involvedObject"], "namespace");
    let mismatch = || {
        v::invalid(
            "involvedObject.namespace",
            involved_ns,
            "does not match event.namespace",
        )
    };
    if zero_time(&ev["eventTime"]) {
        if involved_ns.is_empty() {
            if !ns.is_empty() && ns != "default" {
                errs.push(mismatch());
            }
        } else if ns != involved_ns {
            errs.push(mismatch());
        }
    } else {
        if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(mismatch());
        }
        let controller = str_of(ev, "reportingComponent");
        if controller.is_empty() {
            errs.push(v::required(controller_field, ""));
        }
        for m in v::qualified_name(controller) {
            errs.push(v::invalid(controller_field, controller, m));
        }
        for (field, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
            let value = str_of(ev, field);
            if value.is_empty() {
                errs.push(v::required(field, ""));
            }
            if value.len() > limit {
                errs.push(v::invalid(
                    field,
                    "",
                    format!("can have at most {limit} characters"),
                ));
            }
        }
        if str_of(ev, "message").len() > 1024 {
            errs.push(v::invalid(
                "message",
                "",
                "can have at most 1024 characters",
            ));
        }
    }
    for m in v::dns1123_subdomain(ns) {
        errs.push(v::invalid("namespace", ns, m));
    }
    errs
}

fn series(ev: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let s = &ev["series"];
    if s.is_object() {
        if s["count"].as_i64().unwrap_or(0) < 2 {
            errs.push(v::invalid("series.count", "", "should be at least 2"));
        }
        if zero_time(&s["lastObservedTime"]) {
            errs.push(v::required("series.lastObservedTime", ""));
        }
    }
    errs
}

/// `ValidateEventCreate` for a stored-form Event written through `version` (Kind::Event for
/// core/v1, Kind::EventV1 for events.k8s.io/v1).
pub fn validate_create(ev: &Value, version: Kind) -> Vec<FieldError> {
    let mut errs = legacy(ev, version);
    if version != Kind::EventV1 {
        return errs;
    }
    errs.extend(v::object_meta(
        &ev["metadata"],
        true,
        NameRule::DnsSubdomain,
    ));
    errs.extend(series(ev));
    if zero_time(&ev["eventTime"]) {
        errs.push(v::required("eventTime", ""));
    }
    let t = str_of(ev, "type");
    if t != "Normal" && t != "Warning" {
        errs.push(v::invalid("type", "", format!("has invalid value: {t}")));
    }
    for k in ["firstTimestamp", "lastTimestamp"] {
        if !zero_time(&ev[k]) {
            errs.push(v::invalid(k, "", "needs to be unset"));
        }
    }
    if ev["count"].as_i64().unwrap_or(0) != 0 {
        errs.push(v::invalid("count", "", "needs to be unset"));
    }
    if !str_of(&ev["source"], "component").is_empty() || !str_of(&ev["source"], "host").is_empty() {
        errs.push(v::invalid("source", "", "needs to be unset"));
    }
    errs
}

/// Go's `json.Marshal` of a string (HTML characters escaped as Go does).
fn go_json_str(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// The internal ObjectReference as `json.Marshal` prints it in an error (no JSON tags on
/// internal types: Go field names, every field).
fn internal_reference(r: &Value) -> String {
    if !r.is_object() {
        return "null".into();
    }
    let names = [
        "Kind",
        "Namespace",
        "Name",
        "UID",
        "APIVersion",
        "ResourceVersion",
        "FieldPath",
    ];
    let parts: Vec<String> = REFERENCE_FIELDS
        .iter()
        .zip(names)
        .map(|(k, n)| format!("\"{n}\":{}", go_json_str(str_of(r, k))))
        .collect();
    format!("{{{}}}", parts.join(","))
}

fn time_json(t: &Value) -> String {
    if zero_time(t) {
        "null".into()
    } else {
        go_json_str(t.as_str().unwrap_or(""))
    }
}

/// `ValidateEventUpdate` for stored-form Events written through `version`.
pub fn validate_update(new: &Value, old: &Value, version: Kind) -> Vec<FieldError> {
    let mut errs = legacy(new, version);
    if version != Kind::EventV1 {
        return errs;
    }
    errs.extend(v::labels_and_annotations(&new["metadata"]));
    if new["series"] != old["series"] {
        errs.extend(series(new));
    }
    let mut immutable = |field: &str, changed: bool, value: BadValue| {
        if changed {
            errs.push(v::invalid_value(field, value, "field is immutable"));
        }
    };
    let s = |e: &Value, k: &str| str_of(e, k).to_string();
    let string = |k: &str| BadValue::Str(s(new, k));
    immutable(
        "involvedObject",
        reference(&new["involvedObject"]) != reference(&old["involvedObject"]),
        BadValue::Json(internal_reference(&new["involvedObject"])),
    );
    let reason_changed = s(new, "reason") != s(old, "reason");
    immutable("reason", reason_changed, string("reason"));
    immutable(
        "message",
        s(new, "message") != s(old, "message"),
        string("message"),
    );
    immutable(
        "source",
        source(&new["source"]) != source(&old["source"]),
        BadValue::Json(format!(
            "{{\"Component\":{},\"Host\":{}}}",
            go_json_str(str_of(&new["source"], "component")),
            go_json_str(str_of(&new["source"], "host"))
        )),
    );
    for k in ["firstTimestamp", "lastTimestamp"] {
        immutable(
            k,
            time_or_null(&new[k]) != time_or_null(&old[k]),
            BadValue::Json(time_json(&new[k])),
        );
    }
    let count = |e: &Value| e["count"].as_i64().unwrap_or(0);
    immutable("count", count(new) != count(old), BadValue::Int(count(new)));
    immutable("reason", reason_changed, string("reason"));
    immutable("type", s(new, "type") != s(old, "type"), string("type"));
    immutable(
        "eventTime",
        time_or_null(&new["eventTime"]) != time_or_null(&old["eventTime"]),
        BadValue::Json(time_json(&new["eventTime"])),
    );
    immutable(
        "action",
        s(new, "action") != s(old, "action"),
        string("action"),
    );
    let related = |e: &Value| e["related"].is_object().then(|| reference(&e["related"]));
    immutable(
        "related",
        related(new) != related(old),
        BadValue::Json(internal_reference(&new["related"])),
    );
    immutable(
        "reportingController",
        s(new, "reportingComponent") != s(old, "reportingComponent"),
        string("reportingComponent"),
    );
    immutable(
        "reportingInstance",
        s(new, "reportingInstance") != s(old, "reportingInstance"),
        string("reportingInstance"),
    );
    errs
}

/// The values of a stored Event that field selectors can name (`ToSelectableFields`, beside
/// metadata.name and metadata.namespace).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fields {
    /// involvedObject.{kind, namespace, name, uid, apiVersion, resourceVersion, fieldPath}
    pub involved: [String; 7],
    /// reason
    pub reason: String,
    /// reportingComponent (events.k8s.io/v1: reportingController)
    pub reporting_component: String,
    /// source.component, or reportingComponent when it is empty
    pub source: String,
    /// type
    pub type_: String,
}

impl Fields {
    /// No values (what an object that is not an Event offers).
    pub const EMPTY: Fields = Fields {
        involved: [const { String::new() }; 7],
        reason: String::new(),
        reporting_component: String::new(),
        source: String::new(),
        type_: String::new(),
    };

    /// The selectable fields of a stored Event.
    pub fn of(core: &Value) -> Fields {
        let io = &core["involvedObject"];
        let reporting = str_of(core, "reportingComponent").to_string();
        let component = str_of(&core["source"], "component");
        Fields {
            involved: REFERENCE_FIELDS.map(|k| str_of(io, k).to_string()),
            reason: str_of(core, "reason").into(),
            source: if component.is_empty() {
                reporting.clone()
            } else {
                component.into()
            },
            reporting_component: reporting,
            type_: str_of(core, "type").into(),
        }
    }

    /// The value of a core/v1 field label, or None when core/v1 does not support it.
    pub fn core(&self, label: &str) -> Option<&str> {
        if let Some(sub) = label.strip_prefix("involvedObject.") {
            let i = REFERENCE_FIELDS.iter().position(|k| *k == sub)?;
            return Some(&self.involved[i]);
        }
        Some(match label {
            "reason" => &self.reason,
            "reportingComponent" => &self.reporting_component,
            "source" => &self.source,
            "type" => &self.type_,
            _ => return None,
        })
    }

    /// The value of an events.k8s.io/v1 field label (mapped onto the core/v1 ones as
    /// `AddFieldLabelConversionsForEvent` maps them), or None when unsupported.
    pub fn v1(&self, label: &str) -> Option<&str> {
        if let Some(sub) = label.strip_prefix("regarding.") {
            let i = REFERENCE_FIELDS.iter().position(|k| *k == sub)?;
            return Some(&self.involved[i]);
        }
        Some(match label {
            "reason" => &self.reason,
            "reportingController" => &self.reporting_component,
            "type" => &self.type_,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder_event() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "node-2.18ea6883b71ef0b2", "namespace": "default"},
            "eventTime": "2026-11-22T15:47:51.676542Z",
            "reportingController": "rollboot.dev/controller",
            "reportingInstance": "controller-0",
            "action": "Cordon", "reason": "Cordoned", "type": "Normal",
            "note": "cordoned",
            "regarding": {"apiVersion": "v1", "kind": "Node", "name": "node-2", "uid": "u-1"},
        })
    }

    #[test]
    fn an_events_v1_event_reads_back_the_same_through_the_core_form() {
        let v1 = recorder_event();
        let core = from_v1(&v1);
        assert_eq!(core["involvedObject"]["name"], "node-2");
        assert_eq!(core["message"], "cordoned");
        assert_eq!(core["reportingComponent"], "rollboot.dev/controller");
        assert_eq!(core["source"], json!({}));
        assert_eq!(core["firstTimestamp"], Value::Null);
        let back = to_v1(&core);
        for k in [
            "eventTime",
            "reportingController",
            "reportingInstance",
            "action",
            "reason",
            "type",
            "note",
            "regarding",
        ] {
            assert_eq!(back[k], v1[k], "{k}");
        }
        assert_eq!(back["deprecatedSource"], json!({}));
        assert_eq!(back["deprecatedLastTimestamp"], Value::Null);
    }

    #[test]
    fn a_node_event_outside_default_is_refused_in_both_versions() {
        let mut core = from_v1(&recorder_event());
        core["metadata"]["namespace"] = json!("rollboot-system");
        for version in [Kind::Event, Kind::EventV1] {
            let errs = validate_create(&core, version);
            assert_eq!(errs[0].field, "involvedObject.namespace");
            assert_eq!(
                errs[0].body(),
                "Invalid value: \"\": does not match event.namespace"
            );
        }
    }

    #[test]
    fn the_reporting_field_is_named_after_the_request_version() {
        let mut core = from_v1(&recorder_event());
        core["reportingComponent"] = json!("");
        assert_eq!(
            validate_create(&core, Kind::Event)[0].field,
            "reportingComponent"
        );
        assert_eq!(
            validate_create(&core, Kind::EventV1)[0].field,
            "reportingController"
        );
    }

    #[test]
    fn selectable_fields_follow_each_versions_labels() {
        let f = Fields::of(&from_v1(&recorder_event()));
        assert_eq!(f.core("involvedObject.kind"), Some("Node"));
        assert_eq!(f.v1("regarding.name"), Some("node-2"));
        assert_eq!(f.v1("involvedObject.kind"), None);
        assert_eq!(f.core("source"), Some("rollboot.dev/controller"));
        assert_eq!(f.v1("source"), None);
    }
}
