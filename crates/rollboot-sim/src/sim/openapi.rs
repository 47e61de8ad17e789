//! `/openapi/v3`: the OpenAPI v3 discovery of the simulated API server, generated from the
//! table of served kinds.
//!
//! kubectl (`apply`, `create`, with the default `--validate=strict`) reads it to learn whether
//! the server validates fields itself (the `fieldValidation` query parameter of each kind's PATCH
//! operation); without it, kubectl wants `/openapi/v2` in protobuf. kube-apiserver declares
//! `fieldValidation` on every write, so the documents here do too. Each group-version document
//! has the paths and operations (with `x-kubernetes-action` and
//! `x-kubernetes-group-version-kind`) of exactly the kinds served, and no component schemas:
//! the simulator validates a written object by decoding it into its k8s-openapi type
//! (`kinds.rs`; `fieldValidation=Strict` refuses fields that type does not know, other values
//! drop them silently), not against a schema. `dryRun` is not declared: the server refuses it.
//! `/openapi/v2` is not served (404). The NodeMaintenance custom resource's group-version is
//! described only while its CRD is installed (`crd.rs`). It must never describe a path
//! `server.rs` does not route.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{json, Value};

use super::crd;
use super::kinds::Kind;

/// The body of `GET path` under `/openapi/v3`, if served; with `crd`, the installed custom
/// resource's group-version too (kube-apiserver publishes a CRD's once it is established).
pub fn document(path: &str, crd: bool) -> Option<&'static str> {
    static DOCS: OnceLock<BTreeMap<String, String>> = OnceLock::new();
    static WITH_CRD: OnceLock<BTreeMap<String, String>> = OnceLock::new();
    let docs = if crd {
        WITH_CRD.get_or_init(|| build(true))
    } else {
        DOCS.get_or_init(|| build(false))
    };
    docs.get(path.trim_end_matches('/')).map(String::as_str)
}

/// `api/v1` or `apis/{group}/{version}`: the group-version's key in the root document.
fn gv_path(group: &str) -> String {
    if group.is_empty() {
        "api/v1".into()
    } else if group == crd::GROUP {
        format!("apis/{}", crd::API_VERSION)
    } else {
        format!("apis/{group}/v1")
    }
}

/// FNV-1a, upper-case hex: the opaque `hash` query of a `serverRelativeURL` (kube-apiserver
/// uses SHA-512; clients only compare it).
fn hash(text: &str) -> String {
    let h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{h:016X}")
}

fn build(with_crd: bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut root = serde_json::Map::new();
    let crd_group = with_crd.then_some(crd::GROUP);
    for group in Kind::GROUPS.into_iter().chain(crd_group) {
        let doc = group_version(group).to_string();
        let key = gv_path(group);
        root.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", hash(&doc))}),
        );
        out.insert(format!("/openapi/v3/{key}"), doc);
    }
    out.insert(
        "/openapi/v3".into(),
        json!({ "paths": Value::Object(root) }).to_string(),
    );
    out
}

/// `patchAppsV1NamespacedStatefulSet`, as kube-apiserver names operations.
fn operation_id(verb: &str, kind: Kind, namespaced: bool, suffix: &str) -> String {
    let group: String = match kind.group() {
        "" => "Core".into(),
        g => g
            .trim_end_matches(".k8s.io")
            .split('.')
            .map(|p| {
                let mut c = p.chars();
                c.next()
                    .map(|f| f.to_uppercase().chain(c).collect::<String>())
                    .unwrap_or_default()
            })
            .collect(),
    };
    let ns = if namespaced { "Namespaced" } else { "" };
    let version = kind.version().replacen('v', "V", 1);
    format!("{verb}{group}{version}{ns}{}{suffix}", kind.kind_name())
}

fn query(name: &str, typ: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description,
        "schema": {"type": typ, "uniqueItems": true}})
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "description": description, "required": true,
        "schema": {"type": "string", "uniqueItems": true}})
}

/// The query parameters of a write the simulator honours: only `fieldValidation` (no
/// `fieldManager`: managed fields are not kept; no `dryRun`, refused; no `force`, server-side
/// apply is not served).
fn write_params() -> Vec<Value> {
    vec![query(
        "fieldValidation",
        "string",
        "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields: Ignore, Warn or Strict.",
    )]
}

fn list_params() -> Vec<Value> {
    [
        ("allowWatchBookmarks", "boolean"),
        ("continue", "string"),
        ("fieldSelector", "string"),
        ("labelSelector", "string"),
        ("limit", "integer"),
        ("resourceVersion", "string"),
        ("resourceVersionMatch", "string"),
        ("sendInitialEvents", "boolean"),
        ("timeoutSeconds", "integer"),
        ("watch", "boolean"),
    ]
    .iter()
    .map(|(n, t)| query(n, t, n))
    .collect()
}

fn gvk(kind: Kind) -> Value {
    json!({"group": kind.group(), "version": kind.version(), "kind": kind.kind_name()})
}

fn op(kind: Kind, action: &str, id: String, description: String, params: Vec<Value>) -> Value {
    let ok = if action == "post" { "201" } else { "200" };
    let mut o = json!({
        "tags": [format!("{}_{}", if kind.group().is_empty() { "core".to_string() } else { kind.group().replace('.', "_") }, kind.version())],
        "description": description,
        "operationId": id,
        "responses": {ok: {"description": "OK"}, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(kind),
    });
    if !params.is_empty() {
        o["parameters"] = Value::Array(params);
    }
    if matches!(action, "post" | "put" | "patch") {
        let types: &[&str] = if action == "patch" && kind == Kind::NodeMaintenance {
            // A custom resource takes no strategic merge patch.
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
            ]
        } else if action == "patch" {
            // No apply-patch+yaml: server-side apply is answered 415.
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
            ]
        } else {
            &["application/json"]
        };
        let content: serde_json::Map<String, Value> = types
            .iter()
            .map(|t| (t.to_string(), json!({"schema": {"type": "object"}})))
            .collect();
        o["requestBody"] = json!({"content": content, "required": true});
    }
    o
}

fn group_version(group: &str) -> Value {
    let prefix = format!("/{}", gv_path(group));
    let mut paths = serde_json::Map::new();
    for kind in Kind::ALL.into_iter().filter(|k| k.group() == group) {
        let (plural, k) = (kind.plural(), kind.kind_name());
        let ns = kind.namespaced();
        let base = if ns {
            format!("{prefix}/namespaces/{{namespace}}/{plural}")
        } else {
            format!("{prefix}/{plural}")
        };
        let mut scope = Vec::new();
        if ns {
            scope.push(path_param("namespace", "object name and auth scope"));
        }
        let mut named = scope.clone();
        named.push(path_param("name", &format!("name of the {k}")));
        paths.insert(
            base.clone(),
            json!({
                "get": op(kind, "list", operation_id("list", kind, ns, ""), format!("list or watch objects of kind {k}"), list_params()),
                "post": op(kind, "post", operation_id("create", kind, ns, ""), format!("create a {k}"), write_params()),
                "parameters": scope,
            }),
        );
        paths.insert(
            format!("{base}/{{name}}"),
            json!({
                "get": op(kind, "get", operation_id("read", kind, ns, ""), format!("read the specified {k}"), vec![]),
                "put": op(kind, "put", operation_id("replace", kind, ns, ""), format!("replace the specified {k}"), write_params()),
                "patch": op(kind, "patch", operation_id("patch", kind, ns, ""), format!("partially update the specified {k}"), write_params()),
                "delete": op(kind, "delete", operation_id("delete", kind, ns, ""), format!("delete a {k}"),
                    vec![query("gracePeriodSeconds", "integer", "The duration in seconds before the object should be deleted.")]),
                "parameters": named,
            }),
        );
        if ns {
            paths.insert(
                format!("{prefix}/{plural}"),
                json!({"get": op(kind, "list", operation_id("list", kind, false, "ForAllNamespaces"),
                    format!("list or watch objects of kind {k}"), list_params())}),
            );
        }
        for sub in kind.subresources() {
            let item = match *sub {
                "status" => json!({
                    "get": op(kind, "get", operation_id("read", kind, ns, "Status"), format!("read status of the specified {k}"), vec![]),
                    "put": op(kind, "put", operation_id("replace", kind, ns, "Status"), format!("replace status of the specified {k}"), write_params()),
                    "patch": op(kind, "patch", operation_id("patch", kind, ns, "Status"), format!("partially update status of the specified {k}"), write_params()),
                    "parameters": named,
                }),
                "eviction" => {
                    let mut post = op(
                        kind,
                        "post",
                        operation_id("create", kind, ns, "Eviction"),
                        format!("create eviction of a {k}"),
                        write_params(),
                    );
                    post["x-kubernetes-group-version-kind"] =
                        json!({"group": "policy", "version": "v1", "kind": "Eviction"});
                    json!({"post": post, "parameters": named})
                }
                _ => continue,
            };
            paths.insert(format!("{base}/{{name}}/{sub}"), item);
        }
    }
    let version: Value =
        serde_json::from_str(include_str!("discovery/version.json")).unwrap_or_default();
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": version["gitVersion"]},
        "paths": paths,
        "components": {"schemas": {}},
    })
}
