//! The custom resources the simulated API server can serve once a scenario (or a test) installs
//! their CustomResourceDefinition: medik8s' NodeMaintenance (`nodemaintenance.medik8s.io/v1beta1`,
//! cluster-scoped, with a status subresource), the node-maintenance-operator's kind.
//!
//! Owns whether it is installed ([`Crds`]), its discovery documents, and what kube-apiserver's
//! custom-resource handler does to a written object from the CRD's structural schema (the
//! published v1beta1 one): unknown fields pruned ([`prune`]), `spec.evictionTimeout`
//! defaulted ([`default`]), and the schema's checks ([`validate`]: types, `spec.nodeName`
//! required in a `spec`, the timeout's pattern), worded as the server words them. The kind
//! has no k8s-openapi type: it is kept as JSON. Not installed, its group is no group at all:
//! `server.rs` answers the plain-text `404 page not found` of an unknown group (golden 87).
//! It must never store anything or talk HTTP, and never decide what the operator does (that
//! is `actors.rs`).

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{json, Map, Value};

use super::validation::{self, BadValue, FieldError};

/// The NodeMaintenance API group.
pub const GROUP: &str = "nodemaintenance.medik8s.io";
/// Its one served version.
pub const VERSION: &str = "v1beta1";
/// `apiVersion` of its objects.
pub const API_VERSION: &str = "nodemaintenance.medik8s.io/v1beta1";

/// Which CustomResourceDefinitions are installed.
#[derive(Debug, Default)]
pub struct Crds {
    node_maintenance: AtomicBool,
}

impl Crds {
    /// Whether the NodeMaintenance CRD is installed.
    pub fn node_maintenance(&self) -> bool {
        self.node_maintenance.load(Ordering::Relaxed)
    }

    /// Installs (or, with `false`, removes) the NodeMaintenance CRD. Removing it keeps its
    /// objects in the store, unserved (kube-apiserver deletes them with the CRD: a test that
    /// removes it wants only the 404).
    pub fn set_node_maintenance(&self, installed: bool) {
        self.node_maintenance.store(installed, Ordering::Relaxed);
    }
}

/// `GET /apis/nodemaintenance.medik8s.io/v1beta1`, as kube-apiserver serves a CRD's version.
pub fn resource_list() -> String {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": [
            {"name": "nodemaintenances", "singularName": "nodemaintenance", "namespaced": false,
             "kind": "NodeMaintenance",
             "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"],
             "shortNames": ["nm"]},
            {"name": "nodemaintenances/status", "singularName": "", "namespaced": false,
             "kind": "NodeMaintenance", "verbs": ["get", "patch", "update"]},
        ],
    })
    .to_string()
}

/// The group's entry in `GET /apis`, and `GET /apis/nodemaintenance.medik8s.io` itself.
pub fn group() -> Value {
    let v = json!({"groupVersion": API_VERSION, "version": VERSION});
    json!({"name": GROUP, "versions": [v.clone()], "preferredVersion": v})
}

/// `GET /apis/nodemaintenance.medik8s.io` (an APIGroup).
pub fn group_document() -> String {
    let mut g = group();
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    g.to_string()
}

/// `GET /apis` with the group added to the built-in `list` (an APIGroupList), as the CRD's
/// group joins discovery once it is established.
pub fn with_group(list: &str) -> String {
    let mut v: Value = serde_json::from_str(list).unwrap_or_else(|_| json!({"groups": []}));
    if let Some(groups) = v["groups"].as_array_mut() {
        groups.push(group());
    }
    v.to_string()
}

/// A field's schema type.
#[derive(Clone, Copy)]
enum Type {
    String,
    Integer,
    Strings,
}

/// The properties of `spec` and `status` in the published schema.
const SPEC: [(&str, Type); 3] = [
    ("evictionTimeout", Type::String),
    ("nodeName", Type::String),
    ("reason", Type::String),
];
const STATUS: [(&str, Type); 8] = [
    ("drainProgress", Type::Integer),
    ("errorOnLeaseCount", Type::Integer),
    ("evictionPods", Type::Integer),
    ("lastError", Type::String),
    ("lastUpdate", Type::String),
    ("pendingPods", Type::Strings),
    ("phase", Type::String),
    ("totalpods", Type::Integer),
];

/// The pattern of `spec.evictionTimeout`, as the schema writes it.
const TIMEOUT_PATTERN: &str = r"^(0|([0-9]+(\.[0-9]+)?(ms|s|m|h)))$";

/// The object with the fields its schema does not know dropped (structural pruning): at the
/// top level all but `apiVersion`, `kind`, `metadata`, `spec` and `status`, and in `spec` and
/// `status` all but their properties. A value of the wrong type is kept, for [`validate`] to
/// refuse. Errors when the body is no JSON object.
pub fn prune(mut value: Value) -> Result<Value, String> {
    let Some(top) = value.as_object_mut() else {
        return Err("the object is not a JSON object".into());
    };
    top.retain(|k, _| {
        matches!(
            k.as_str(),
            "apiVersion" | "kind" | "metadata" | "spec" | "status"
        )
    });
    for (part, props) in [("spec", &SPEC[..]), ("status", &STATUS[..])] {
        if let Some(m) = top.get_mut(part).and_then(Value::as_object_mut) {
            m.retain(|k, _| props.iter().any(|(p, _)| p == k));
        }
    }
    Ok(value)
}

/// The schema's default: `spec.evictionTimeout: 30s` in a `spec` that has none.
pub fn default(value: &mut Value) {
    if let Some(spec) = value["spec"].as_object_mut() {
        spec.entry("evictionTimeout")
            .or_insert_with(|| json!("30s"));
    }
}

/// The schema's checks of a pruned, defaulted object, in the order the schema validator
/// reports them: `spec` and `status` objects, each property's type, `spec.nodeName` required
/// in a `spec` (a NodeMaintenance without `spec` passes the schema, as it does on a real
/// server: only the operator's webhook refuses it), the timeout's pattern.
pub fn validate(value: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (part, props) in [("spec", &SPEC[..]), ("status", &STATUS[..])] {
        let v = &value[part];
        if v.is_null() {
            continue;
        }
        let Some(m) = v.as_object() else {
            errs.push(wrong_type(part, v, "object"));
            continue;
        };
        for (name, typ) in props {
            let Some(f) = m.get(*name).filter(|f| !f.is_null()) else {
                continue;
            };
            let field = format!("{part}.{name}");
            check_type(&field, f, *typ, &mut errs);
        }
        if part == "spec" && !m.contains_key("nodeName") {
            errs.push(validation::required("spec.nodeName", ""));
        }
    }
    if let Some(t) = value["spec"]["evictionTimeout"].as_str() {
        if !timeout_matches(t) {
            errs.push(validation::invalid(
                "spec.evictionTimeout",
                t,
                format!("spec.evictionTimeout in body should match '{TIMEOUT_PATTERN}'"),
            ));
        }
    }
    errs
}

fn check_type(field: &str, v: &Value, typ: Type, errs: &mut Vec<FieldError>) {
    match typ {
        Type::String if !v.is_string() => errs.push(wrong_type(field, v, "string")),
        Type::Integer if !(v.is_i64() || v.is_u64()) => errs.push(wrong_type(field, v, "integer")),
        Type::Strings => match v.as_array() {
            None => errs.push(wrong_type(field, v, "array")),
            Some(items) => {
                for (i, item) in items.iter().enumerate() {
                    if !item.is_string() {
                        errs.push(wrong_type(&format!("{field}[{i}]"), item, "string"));
                    }
                }
            }
        },
        _ => {}
    }
}

/// The JSON type of a value, as the schema validator names it.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `FIELD: Invalid value: "TYPE": FIELD in body must be of type WANT: "TYPE"`.
fn wrong_type(field: &str, v: &Value, want: &str) -> FieldError {
    let got = json_type(v);
    validation::invalid_value(
        field,
        BadValue::Str(got.into()),
        format!("{field} in body must be of type {want}: \"{got}\""),
    )
}

/// `^(0|([0-9]+(\.[0-9]+)?(ms|s|m|h)))$`, without a regex engine.
fn timeout_matches(t: &str) -> bool {
    if t == "0" {
        return true;
    }
    let Some(number) = ["ms", "s", "m", "h"]
        .iter()
        .find_map(|u| t.strip_suffix(u))
        .filter(|n| !n.is_empty())
    else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match number.split_once('.') {
        Some((whole, frac)) => digits(whole) && digits(frac),
        None => digits(number),
    }
}

/// A NodeMaintenance for `node`, as an operator writes one (`reason` may be empty).
pub fn node_maintenance(name: &str, node: &str, reason: &str) -> Value {
    let mut spec = Map::new();
    spec.insert("nodeName".into(), json!(node));
    if !reason.is_empty() {
        spec.insert("reason".into(), json!(reason));
    }
    json!({"apiVersion": API_VERSION, "kind": "NodeMaintenance",
        "metadata": {"name": name}, "spec": spec})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_pruned_and_the_timeout_defaulted() {
        let v = prune(
            json!({"apiVersion": API_VERSION, "kind": "NodeMaintenance", "extra": 1,
            "metadata": {"name": "a"}, "spec": {"nodeName": "n", "color": "red"},
            "status": {"phase": "Running", "mood": "ok"}}),
        )
        .unwrap();
        assert_eq!(v.get("extra"), None);
        assert_eq!(v["spec"], json!({"nodeName": "n"}));
        assert_eq!(v["status"], json!({"phase": "Running"}));
        let mut v = v;
        default(&mut v);
        assert_eq!(v["spec"]["evictionTimeout"], "30s");
        assert!(prune(json!([1])).is_err());
    }

    #[test]
    fn the_schema_refuses_a_missing_node_wrong_types_and_a_bad_timeout() {
        let text = |v: Value| {
            validate(&v)
                .iter()
                .map(|e| format!("{}: {}", e.field, e.body()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            text(json!({"spec": {"reason": "x"}})),
            ["spec.nodeName: Required value"]
        );
        assert_eq!(
            text(json!({"spec": {"nodeName": 3}})),
            ["spec.nodeName: Invalid value: \"integer\": spec.nodeName in body must be of type string: \"integer\""]
        );
        assert_eq!(
            text(json!({"spec": {"nodeName": "n"}, "status": {"totalpods": 1.5, "pendingPods": ["a", 2]}})),
            [
                "status.pendingPods[1]: Invalid value: \"integer\": status.pendingPods[1] in body must be of type string: \"integer\"",
                "status.totalpods: Invalid value: \"number\": status.totalpods in body must be of type integer: \"number\"",
            ]
        );
        assert_eq!(
            text(json!({"spec": {"nodeName": "n", "evictionTimeout": "5 minutes"}})).len(),
            1
        );
        for ok in ["0", "30s", "1.5h", "100ms"] {
            assert!(timeout_matches(ok), "{ok}");
        }
        for bad in ["", "s", "1.s", "5", "-1s", "1d"] {
            assert!(!timeout_matches(bad), "{bad}");
        }
        assert!(text(json!({"metadata": {"name": "no-spec"}})).is_empty());
    }
}
