//! ValidatingAdmissionPolicies created through the simulator's API, as `kubectl apply` creates
//! them, enforced as kube-apiserver enforces them: on every write they match, whoever sends
//! it, scoped by the binding's selectors, with the binding's actions (Deny: the 422 of
//! kube-apiserver's dispatcher; Warn: a `Warning` header), refused at creation where the
//! simulator cannot enforce them, and no longer enforced once deleted.

use std::collections::HashMap;

use rollboot_sim::sim::rbac::{Enforcement, Identity};
use rollboot_sim::sim::{Cluster, Scenario};
use serde_json::{json, Value};

/// One answer: the status, the `Warning` headers, the body (JSON, or a string).
struct Answer {
    code: u16,
    warnings: Vec<String>,
    body: Value,
}

async fn cluster() -> Cluster {
    Cluster::start(Scenario {
        nodes: 2,
        pods_per_node: 1,
        ..Scenario::default()
    })
    .await
    .unwrap()
}

async fn client(cluster: &Cluster, token: &str) -> kube::Client {
    let mut c = cluster.kube_config_as(token).await.unwrap();
    c.default_retry = false;
    kube::Client::try_from(c).unwrap()
}

/// Sends `method path` with a JSON body (a merge patch for PATCH).
async fn send(client: &kube::Client, method: &str, path: &str, body: Option<Value>) -> Answer {
    let ct = if method == "PATCH" {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::CONTENT_TYPE, ct)
        .body(kube::client::Body::from(
            body.map(|b| serde_json::to_vec(&b).unwrap())
                .unwrap_or_default(),
        ))
        .unwrap();
    let resp = client.send(req).await.expect("the simulator answers");
    let code = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all(http::header::WARNING)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_string())
        .collect();
    let bytes = resp.into_body().collect_bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    Answer {
        code,
        warnings,
        body,
    }
}

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";

/// A policy on ConfigMaps: no `forbidden` key in their data.
fn no_forbidden_key() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "no-forbidden-key"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"],
            }]},
            "validations": [{
                "expression": "!has(object.data) || !('forbidden' in object.data)",
                "message": "a ConfigMap may not carry the key forbidden",
            }],
        },
    })
}

fn binding(name: &str, policy: &str, actions: &[&str], match_resources: Option<Value>) -> Value {
    let mut b = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": policy, "validationActions": actions},
    });
    if let Some(m) = match_resources {
        b["spec"]["matchResources"] = m;
    }
    b
}

fn config_map(name: &str, labels: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": data})
}

async fn create(c: &kube::Client, path: &str, body: Value) {
    let a = send(c, "POST", path, Some(body)).await;
    assert_eq!(a.code, 201, "creating at {path}: {}", a.body);
}

async fn namespace(c: &kube::Client, name: &str, labels: Value) {
    create(
        c,
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_created_through_the_api_denies_what_it_forbids() {
    let cluster = cluster().await;
    let admin = client(&cluster, "admin").await;
    create(&admin, POLICIES, no_forbidden_key()).await;
    create(
        &admin,
        BINDINGS,
        binding("no-forbidden-key", "no-forbidden-key", &["Deny"], None),
    )
    .await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let denied = send(
        &admin,
        "POST",
        cms,
        Some(config_map("bad", json!({}), json!({"forbidden": "x"}))),
    )
    .await;
    // kube-apiserver's dispatcher: admission.NewForbidden with reason Invalid, code 422, the
    // message once more as the only cause.
    let message = "ValidatingAdmissionPolicy 'no-forbidden-key' with binding 'no-forbidden-key' denied request: a ConfigMap may not carry the key forbidden";
    assert_eq!(denied.code, 422, "{}", denied.body);
    assert_eq!(
        denied.body,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("configmaps \"bad\" is forbidden: {message}"),
            "reason": "Invalid",
            "details": {"name": "bad", "kind": "configmaps", "causes": [{"message": message}]},
            "code": 422,
        })
    );
    // What it does not forbid goes through; an update that would break it does not.
    create(
        &admin,
        cms,
        config_map("good", json!({}), json!({"allowed": "x"})),
    )
    .await;
    let update = send(
        &admin,
        "PATCH",
        &format!("{cms}/good"),
        Some(json!({"data": {"forbidden": "y"}})),
    )
    .await;
    assert_eq!(update.code, 422, "{}", update.body);
    assert_eq!(
        update.body["message"],
        format!("configmaps \"good\" is forbidden: {message}")
    );
    // Whoever asks: a token the simulator plays as a cluster admin is held too.
    let other = client(&cluster, "someone-else").await;
    let a = send(
        &other,
        "POST",
        cms,
        Some(config_map("bad2", json!({}), json!({"forbidden": "x"}))),
    )
    .await;
    assert_eq!(a.code, 422, "{}", a.body);
    // Nothing was stored.
    assert_eq!(
        send(&admin, "GET", &format!("{cms}/bad"), None).await.code,
        404
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_and_delete_are_admitted_with_the_object_they_have() {
    let cluster = cluster().await;
    let admin = client(&cluster, "admin").await;
    // CREATE has no old object, DELETE no object: each validation reads what it has.
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "keep-protected"},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "DELETE"], "resources": ["configmaps"],
            }]},
            "validations": [
                {"expression": "request.operation != 'CREATE' || (oldObject == null && object.metadata.name != 'reserved')",
                 "messageExpression": "'the name ' + object.metadata.name + ' is reserved'"},
                {"expression": "request.operation != 'DELETE' || (object == null && !(has(oldObject.metadata.labels) && 'protected' in oldObject.metadata.labels))",
                 "message": "a protected ConfigMap may not be deleted", "reason": "Forbidden"},
            ],
        },
    });
    create(&admin, POLICIES, policy).await;
    create(
        &admin,
        BINDINGS,
        binding("keep-protected", "keep-protected", &["Deny"], None),
    )
    .await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let reserved = send(
        &admin,
        "POST",
        cms,
        Some(config_map("reserved", json!({}), json!({}))),
    )
    .await;
    assert_eq!(reserved.code, 422, "{}", reserved.body);
    assert!(
        reserved.body["message"]
            .as_str()
            .unwrap()
            .ends_with("denied request: the name reserved is reserved"),
        "{}",
        reserved.body
    );
    create(
        &admin,
        cms,
        config_map("kept", json!({"protected": "yes"}), json!({})),
    )
    .await;
    create(&admin, cms, config_map("plain", json!({}), json!({}))).await;
    // A validation's reason sets the answer's reason and code.
    let delete = send(&admin, "DELETE", &format!("{cms}/kept"), None).await;
    assert_eq!(delete.code, 403, "{}", delete.body);
    assert_eq!(delete.body["reason"], "Forbidden");
    assert_eq!(
        delete.body["message"],
        "configmaps \"kept\" is forbidden: ValidatingAdmissionPolicy 'keep-protected' with binding 'keep-protected' denied request: a protected ConfigMap may not be deleted"
    );
    assert_eq!(
        send(&admin, "GET", &format!("{cms}/kept"), None).await.code,
        200
    );
    assert_eq!(
        send(&admin, "DELETE", &format!("{cms}/plain"), None)
            .await
            .code,
        200
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bindings_object_and_namespace_selectors_scope_it() {
    let cluster = cluster().await;
    let admin = client(&cluster, "admin").await;
    namespace(&admin, "prod", json!({"env": "prod"})).await;
    namespace(&admin, "dev", json!({"env": "dev"})).await;
    create(&admin, POLICIES, no_forbidden_key()).await;
    // Only guarded ConfigMaps, only in production namespaces.
    create(
        &admin,
        BINDINGS,
        binding(
            "guarded-in-prod",
            "no-forbidden-key",
            &["Deny"],
            Some(json!({
                "objectSelector": {"matchLabels": {"guarded": "true"}},
                "namespaceSelector": {"matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["prod"]},
                ]},
            })),
        ),
    )
    .await;
    let bad = json!({"forbidden": "x"});
    let guarded = json!({"guarded": "true"});
    let in_ns = |ns: &str| format!("/api/v1/namespaces/{ns}/configmaps");
    let post = |ns: &str, name: &str, labels: &Value| {
        let (admin, path, body) = (
            admin.clone(),
            in_ns(ns),
            config_map(name, labels.clone(), bad.clone()),
        );
        async move { send(&admin, "POST", &path, Some(body)).await.code }
    };
    assert_eq!(post("prod", "a", &guarded).await, 422, "guarded, in prod");
    assert_eq!(post("prod", "b", &json!({})).await, 201, "not guarded");
    assert_eq!(post("dev", "c", &guarded).await, 201, "not in prod");
    // The old object counts: taking the label off in the same write does not escape it.
    create(
        &admin,
        &in_ns("prod"),
        config_map("d", guarded.clone(), json!({})),
    )
    .await;
    let unlabel = send(
        &admin,
        "PATCH",
        &format!("{}/d", in_ns("prod")),
        Some(json!({"metadata": {"labels": {"guarded": null}}, "data": {"forbidden": "x"}})),
    )
    .await;
    assert_eq!(unlabel.code, 422, "{}", unlabel.body);
    // The namespace's labels as they are now: relabelled, prod is out of scope.
    let relabel = send(
        &admin,
        "PATCH",
        "/api/v1/namespaces/prod",
        Some(json!({"metadata": {"labels": {"env": "staging"}}})),
    )
    .await;
    assert_eq!(relabel.code, 200, "{}", relabel.body);
    assert_eq!(post("prod", "e", &guarded).await, 201, "prod relabelled");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warn_binding_adds_a_warning_header_and_lets_the_write_through() {
    let cluster = cluster().await;
    let admin = client(&cluster, "admin").await;
    create(&admin, POLICIES, no_forbidden_key()).await;
    create(
        &admin,
        BINDINGS,
        binding("warn-only", "no-forbidden-key", &["Warn"], None),
    )
    .await;
    create(
        &admin,
        BINDINGS,
        binding("audit-only", "no-forbidden-key", &["Audit"], None),
    )
    .await;
    let a = send(
        &admin,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(config_map("warned", json!({}), json!({"forbidden": "x"}))),
    )
    .await;
    assert_eq!(a.code, 201, "{}", a.body);
    // kube-apiserver's warning recorder: `299 - "text"`, the dispatcher's text; the Audit
    // binding adds nothing visible.
    assert_eq!(
        a.warnings,
        vec![
            "299 - \"Validation failed for ValidatingAdmissionPolicy 'no-forbidden-key' with binding 'warn-only': a ConfigMap may not carry the key forbidden\""
        ]
    );
    let fine = send(
        &admin,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(config_map("fine", json!({}), json!({}))),
    )
    .await;
    assert_eq!(fine.code, 201);
    assert!(fine.warnings.is_empty(), "{:?}", fine.warnings);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_the_simulator_cannot_enforce_is_refused_at_creation() {
    let cluster = cluster().await;
    let admin = client(&cluster, "admin").await;
    let mut with_params = no_forbidden_key();
    with_params["spec"]["paramKind"] = json!({"apiVersion": "v1", "kind": "ConfigMap"});
    with_params["spec"]["validations"][0]["expression"] = json!("params.data.x == 'y'");
    let a = send(&admin, "POST", POLICIES, Some(with_params)).await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(a.body["reason"], "Invalid");
    // The one cause: with a paramKind, `params` is declared, as in kube-apiserver.
    let causes = a.body["details"]["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 1, "{}", a.body);
    let cause = &causes[0];
    assert_eq!(cause["field"], "spec.paramKind");
    assert_eq!(cause["reason"], "FieldValueForbidden");
    assert!(
        a.body["message"].as_str().unwrap().starts_with(
            "ValidatingAdmissionPolicy.admissionregistration.k8s.io \"no-forbidden-key\" is invalid: spec.paramKind: Forbidden: "
        ) && a.body["message"]
            .as_str()
            .unwrap()
            .contains("not supported by the simulated API server"),
        "{}",
        a.body
    );
    // Not stored and ignored: not stored at all.
    let get = send(&admin, "GET", &format!("{POLICIES}/no-forbidden-key"), None).await;
    assert_eq!(get.code, 404);
    // A binding's paramRef, and an expression asking the authorizer, alike.
    let mut with_ref = binding("b", "no-forbidden-key", &["Deny"], None);
    with_ref["spec"]["paramRef"] = json!({"name": "p", "parameterNotFoundAction": "Deny"});
    let a = send(&admin, "POST", BINDINGS, Some(with_ref)).await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(a.body["details"]["causes"][0]["field"], "spec.paramRef");
    let mut asks = no_forbidden_key();
    asks["spec"]["validations"][0]["expression"] =
        json!("authorizer.group('').resource('configmaps').check('get').allowed()");
    let a = send(&admin, "POST", POLICIES, Some(asks)).await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(
        a.body["details"]["causes"][0]["field"],
        "spec.validations[0].expression"
    );
    assert!(
        a.body["message"].as_str().unwrap().contains("authorizer"),
        "{}",
        a.body
    );
    // What kube-apiserver refuses itself, as it words it: a CEL expression that does not
    // compile.
    let mut broken = no_forbidden_key();
    broken["spec"]["validations"][0]["expression"] = json!("object.data ==");
    let a = send(&admin, "POST", POLICIES, Some(broken)).await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(
        a.body["message"],
        "ValidatingAdmissionPolicy.admissionregistration.k8s.io \"no-forbidden-key\" is invalid: spec.validations[0].expression: Invalid value: \"object.data ==\": compilation failed: ERROR: <input>:1:15: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | object.data ==\n | ..............^"
    );
    assert_eq!(
        a.body["details"]["causes"][0]["reason"],
        "FieldValueInvalid"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_policy_or_its_binding_stops_the_enforcement() {
    let cluster = cluster().await;
    let admin = client(&cluster, "admin").await;
    create(&admin, POLICIES, no_forbidden_key()).await;
    let b = binding("deny", "no-forbidden-key", &["Deny"], None);
    create(&admin, BINDINGS, b.clone()).await;
    let mut n = 0;
    let mut attempt = || {
        n += 1;
        let (admin, body) = (
            admin.clone(),
            config_map(&format!("cm-{n}"), json!({}), json!({"forbidden": "x"})),
        );
        async move {
            send(
                &admin,
                "POST",
                "/api/v1/namespaces/default/configmaps",
                Some(body),
            )
            .await
            .code
        }
    };
    assert_eq!(attempt().await, 422, "enforced");
    let gone = send(&admin, "DELETE", &format!("{BINDINGS}/deny"), None).await;
    assert_eq!(gone.code, 200, "{}", gone.body);
    assert_eq!(attempt().await, 201, "its binding deleted");
    create(&admin, BINDINGS, b).await;
    assert_eq!(attempt().await, 422, "bound again");
    let gone = send(
        &admin,
        "DELETE",
        &format!("{POLICIES}/no-forbidden-key"),
        None,
    )
    .await;
    assert_eq!(gone.code, 200, "{}", gone.body);
    assert_eq!(attempt().await, 201, "the policy deleted");
    cluster.shutdown().await;
}

/// The YAML documents of a file, as `kubectl apply` sends them.
fn documents(path: &str) -> Vec<Value> {
    // `path` from the repository's top (this crate is crates/rollboot-sim).
    let text =
        std::fs::read_to_string(format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|de| serde::Deserialize::deserialize(de).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_policy_created_through_the_api_holds_an_agent_to_its_own_node() {
    let cluster = cluster().await;
    // The agent of node-0000: its token's node claim comes from the enforcement's identities,
    // which carry no RBAC and no policy of their own here.
    let identities: HashMap<String, Identity> = [(
        "agent".to_string(),
        Identity::service_account("rollboot-agent", "rollboot-agent").on_node("node-0000"),
    )]
    .into_iter()
    .collect();
    cluster.enforce(Enforcement {
        identities,
        rbac: None,
        admission: None,
    });
    let admin = client(&cluster, "admin").await;
    let agent = client(&cluster, "agent").await;
    let flag = |node: &str, key: &str| {
        let (agent, path, body) = (
            agent.clone(),
            format!("/api/v1/nodes/{node}"),
            json!({"metadata": {"annotations": {key: "x"}}}),
        );
        async move { send(&agent, "PATCH", &path, Some(body)).await }
    };
    assert_eq!(
        flag("node-0001", "rollboot.dev/reboot-required").await.code,
        200,
        "no policy yet"
    );
    // As `kubectl apply -k deploy/` creates them.
    for doc in documents("deploy/admission-policy.yaml") {
        let path = match doc["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => POLICIES,
            Some("ValidatingAdmissionPolicyBinding") => BINDINGS,
            other => panic!("unexpected {other:?}"),
        };
        create(&admin, path, doc).await;
    }
    assert_eq!(
        flag("node-0000", "rollboot.dev/reboot-required").await.code,
        200,
        "its own node, its own key"
    );
    let other = flag("node-0001", "rollboot.dev/reboot-required").await;
    assert_eq!(other.code, 422, "{}", other.body);
    assert_eq!(
        other.body["message"],
        "nodes \"node-0001\" is forbidden: ValidatingAdmissionPolicy 'rollboot-agent-own-node' with binding 'rollboot-agent-own-node' denied request: the rollboot agent of node node-0000 may not change node node-0001"
    );
    let foreign = flag("node-0000", "example.com/other").await;
    assert_eq!(foreign.code, 422, "{}", foreign.body);
    // The controller (any other caller) is left alone.
    let admin_write = send(
        &admin,
        "PATCH",
        "/api/v1/nodes/node-0001",
        Some(json!({"metadata": {"annotations": {"rollboot.dev/state": "cordoning"}}})),
    )
    .await;
    assert_eq!(admin_write.code, 200, "{}", admin_write.body);
    cluster.shutdown().await;
}
