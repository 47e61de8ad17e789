//! Request accounting and fault injection of the simulated API server.

use crate::common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use rollboot_sim::sim::{Cluster, FaultConfig};
use serde_json::{json, Value};

/// Polls `$body` (an expression yielding `Option<T>`) every 20 ms until it is `Some`, or fails
/// after `$secs` seconds naming `$what`.
macro_rules! eventually {
    ($secs:expr, $what:expr, $body:expr) => {{
        let deadline = Instant::now() + Duration::from_secs($secs);
        loop {
            if let Some(v) = $body {
                break v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {}", $what);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }};
}

use common::small_and_slow as small;

/// kube's client retries 429s, which would hide the answer: see `common::http`.
async fn raw(
    c: &Cluster,
    token: &str,
    method: &str,
    path: &str,
    ct: &str,
    body: &str,
) -> (u16, String) {
    common::http(c.addr(), token, method, path, ct, body).await
}

async fn get_as(c: &Cluster, token: &str, path: &str) -> (u16, Value) {
    let (code, text) = raw(c, token, "GET", path, "application/json", "").await;
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The request counts of one identity, as (verb, group, resource, subresource, namespace, n).
fn counts_of(c: &Cluster, identity: &str) -> Vec<(String, String, String, String, String, u64)> {
    let mut v: Vec<_> = c
        .stats()
        .requests
        .into_iter()
        .filter(|(k, _)| k.identity == identity)
        .map(|(k, n)| (k.verb, k.group, k.resource, k.subresource, k.namespace, n))
        .collect();
    v.sort();
    v
}

fn row(
    verb: &str,
    group: &str,
    resource: &str,
    sub: &str,
    ns: &str,
    n: u64,
) -> (String, String, String, String, String, u64) {
    (
        verb.into(),
        group.into(),
        resource.into(),
        sub.into(),
        ns.into(),
        n,
    )
}

/// Mirrors the attributes kube-apiserver's request-info resolver (and its audit log) gives a
/// request: verb (list vs get vs watch by URL shape, eviction as `create` on the `eviction`
/// subresource), API group, resource, subresource and namespace, per authenticated user.
#[tokio::test]
async fn requests_are_counted_by_identity_verb_and_resource() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    // Discovery is not a resource request and is not counted.
    assert_eq!(get_as(c, "alice", "/api/v1").await.0, 200);
    assert_eq!(get_as(c, "alice", "/api/v1/nodes").await.0, 200);
    assert_eq!(get_as(c, "alice", "/api/v1/nodes").await.0, 200);
    assert_eq!(get_as(c, "alice", "/api/v1/nodes/node-0000").await.0, 200);
    let (code, _) = raw(
        c,
        "alice",
        "PATCH",
        "/api/v1/nodes/node-0000",
        "application/merge-patch+json",
        r#"{"metadata":{"annotations":{"a":"b"}}}"#,
    )
    .await;
    assert_eq!(code, 200);
    let (_, pods) = get_as(
        c,
        "bob",
        "/api/v1/namespaces/apps-0/pods?labelSelector=app%3Dapp-0",
    )
    .await;
    let pod = pods["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pod, "namespace": "apps-0"}});
    let (code, _) = raw(
        c,
        "bob",
        "POST",
        &format!("/api/v1/namespaces/apps-0/pods/{pod}/eviction"),
        "application/json",
        &eviction.to_string(),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(
        get_as(
            c,
            "bob",
            "/apis/policy/v1/namespaces/apps-0/poddisruptionbudgets/app-0"
        )
        .await
        .0,
        200
    );
    let before = c.stats().watch_events_sent;
    let (code, text) = raw(
        c,
        "bob",
        "GET",
        "/api/v1/nodes?watch=1&timeoutSeconds=1",
        "",
        "",
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(text.lines().filter(|l| l.contains("\"ADDED\"")).count(), 3);

    assert_eq!(
        counts_of(c, "alice"),
        vec![
            row("get", "", "nodes", "", "", 1),
            row("list", "", "nodes", "", "", 2),
            row("patch", "", "nodes", "", "", 1),
        ]
    );
    assert_eq!(
        counts_of(c, "bob"),
        vec![
            row("create", "", "pods", "eviction", "apps-0", 1),
            row("get", "policy", "poddisruptionbudgets", "", "apps-0", 1),
            row("list", "", "pods", "", "apps-0", 1),
            row("watch", "", "nodes", "", "", 1),
        ]
    );
    let s = c.stats();
    assert_eq!(s.total_requests, 8);
    assert_eq!(s.count("list", "nodes"), 2);
    assert_eq!(s.by_verb()["create"], 1);
    assert_eq!(s.watch_events_sent - before, 3);
    assert_eq!(s.faults_injected, 0);
    cluster.shutdown().await;
}

/// Mirrors a failing kube-apiserver (or its priority-and-fairness filter): a 500 answers an
/// `InternalError` Status, a 429 a `TooManyRequests` Status; discovery keeps answering.
#[tokio::test]
async fn injected_errors_answer_status_bodies_and_stop_when_switched_off() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    c.set_faults(FaultConfig {
        error_rate: 1.0,
        ..FaultConfig::default()
    });
    for path in [
        "/api/v1/nodes",
        "/api/v1/namespaces/apps-0/pods/x",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
    ] {
        let (code, body) = get_as(c, "t", path).await;
        assert_eq!(code, 500, "{path}: {body}");
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["apiVersion"], "v1");
        assert_eq!(body["status"], "Failure");
        assert_eq!(body["reason"], "InternalError");
        assert_eq!(body["code"], 500);
    }
    assert_eq!(get_as(c, "t", "/version").await.0, 200);
    c.set_faults(FaultConfig {
        throttle_rate: 1.0,
        ..FaultConfig::default()
    });
    let (code, body) = get_as(c, "t", "/api/v1/nodes").await;
    assert_eq!(code, 429);
    assert_eq!(body["reason"], "TooManyRequests");
    assert_eq!(body["code"], 429);
    assert_eq!(c.stats().faults_injected, 4);
    c.set_faults(FaultConfig::default());
    assert_eq!(get_as(c, "t", "/api/v1/nodes").await.0, 200);
    assert_eq!(c.stats().faults_injected, 4);
    cluster.shutdown().await;
}

/// Mirrors an API server that is down (process restarting): new connections are refused and
/// clients holding pooled connections get errors, then everything answers again.
#[tokio::test]
async fn outage_refuses_connections_then_recovers() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    let nodes: Api<Node> = Api::all(c.kube_client().await.unwrap());
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        3
    );
    c.outage(Duration::from_secs(2));
    eventually!(5, "connections to be refused", {
        tokio::net::TcpStream::connect(c.addr())
            .await
            .is_err()
            .then_some(())
    });
    eventually!(5, "the pooled kube client to fail", {
        nodes
            .list(&ListParams::default())
            .await
            .is_err()
            .then_some(())
    });
    eventually!(10, "the server to answer again", {
        nodes.list(&ListParams::default()).await.ok()
    });
    assert_eq!(get_as(c, "t", "/api/v1/nodes").await.0, 200);
    cluster.shutdown().await;
}

/// Mirrors a watch cut by the server (kube-apiserver restart, load balancer idle timeout): the
/// stream ends early, long before its `timeoutSeconds`, after sending what it had.
#[tokio::test]
async fn watch_cut_ends_the_stream() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    c.set_faults(FaultConfig {
        watch_cut_max_ms: Some(300),
        ..FaultConfig::default()
    });
    let t0 = Instant::now();
    let (code, text) = raw(
        c,
        "t",
        "GET",
        "/api/v1/nodes?watch=1&timeoutSeconds=60",
        "",
        "",
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "the watch was not cut"
    );
    for line in text.lines() {
        let ev: Value = serde_json::from_str(line).unwrap();
        assert_eq!(ev["type"], "ADDED");
    }
    // Without cuts the same watch lasts until its timeout.
    c.set_faults(FaultConfig::default());
    let t0 = Instant::now();
    let (code, _) = raw(
        c,
        "t",
        "GET",
        "/api/v1/nodes?watch=1&timeoutSeconds=1",
        "",
        "",
    )
    .await;
    assert_eq!(code, 200);
    assert!(t0.elapsed() >= Duration::from_millis(900));
    cluster.shutdown().await;
}
