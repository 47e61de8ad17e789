//! The simulated API server against what kube-apiserver v1.36 answers (tests/golden/).

use crate::common;

use std::time::Duration;

use axum::http::Method;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams, PostParams};
use rollboot_sim::sim::{Cluster, Scenario};
use serde_json::{json, Value};

fn golden(n: u32) -> Value {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
    let prefix = format!("{n:02}-");
    let entry = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with(&prefix)
        })
        .unwrap();
    serde_json::from_str(&std::fs::read_to_string(entry).unwrap()).unwrap()
}

/// The small world of `common`, at the simulator's usual pace: its pods start and budgets
/// refresh during a test.
fn small() -> Scenario {
    Scenario {
        time_factor: 0.01,
        ..common::small_and_slow()
    }
}

/// kube's client retries 429s, which would hide the answer: see `common::http`.
async fn raw(c: &Cluster, method: Method, path: &str, ct: &str, body: &str) -> (u16, String) {
    raw_addr(c.addr(), method, path, ct, body).await
}

async fn raw_addr(
    addr: std::net::SocketAddr,
    method: Method,
    path: &str,
    ct: &str,
    body: &str,
) -> (u16, String) {
    common::http(addr, "test", method, path, ct, body).await
}

async fn call(c: &Cluster, method: Method, path: &str, ct: &str, body: &str) -> (u16, Value) {
    let (code, text) = raw(c, method, path, ct, body).await;
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get(c: &Cluster, path: &str) -> (u16, Value) {
    call(c, Method::GET, path, "application/json", "").await
}

fn golden_response(n: u32) -> (u16, Value) {
    let g = golden(n);
    (
        g["response"]["status"].as_u64().unwrap() as u16,
        g["response"]["body"].clone(),
    )
}

#[tokio::test]
async fn node_errors_answer_the_status_bodies_of_kube_apiserver() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    // 23: GET of a missing node.
    let (code, body) = get(c, "/api/v1/nodes/no-such-node").await;
    assert_eq!((code, body), golden_response(23));
    // 21: create an existing node.
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "golden-node"}})
        .to_string();
    let (code, created) = call(c, Method::POST, "/api/v1/nodes", "application/json", &node).await;
    assert_eq!(code, 201);
    assert!(
        created["metadata"]["uid"].is_string()
            && created["metadata"]["creationTimestamp"].is_string()
    );
    let (code, body) = call(c, Method::POST, "/api/v1/nodes", "application/json", &node).await;
    assert_eq!((code, body), golden_response(21));
    // 22: invalid name.
    let bad =
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "Bad_Name"}}).to_string();
    let (code, body) = call(c, Method::POST, "/api/v1/nodes", "application/json", &bad).await;
    assert_eq!((code, body), golden_response(22));
    // 19/20: stale resourceVersion in a merge patch and in a PUT.
    let stale_rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, _) = call(
        c,
        Method::PATCH,
        "/api/v1/nodes/golden-node",
        "application/merge-patch+json",
        r#"{"metadata":{"annotations":{"a":"b"}}}"#,
    )
    .await;
    assert_eq!(code, 200);
    let patch = json!({"metadata": {"resourceVersion": stale_rv, "annotations": {"rollboot.dev/state": "draining"}}}).to_string();
    let (code, body) = call(
        c,
        Method::PATCH,
        "/api/v1/nodes/golden-node",
        "application/merge-patch+json",
        &patch,
    )
    .await;
    assert_eq!((code, body), golden_response(19));
    let mut put = created.clone();
    put["metadata"]["labels"] = json!({"x": "y"});
    let (code, body) = call(
        c,
        Method::PUT,
        "/api/v1/nodes/golden-node",
        "application/json",
        &put.to_string(),
    )
    .await;
    assert_eq!((code, body), golden_response(20));
    // 18: a failing JSON-patch test op.
    let jp = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": stale_rv},
        {"op": "add", "path": "/metadata/annotations/rollboot.dev~1state", "value": "draining"}])
    .to_string();
    let (code, body) = call(
        c,
        Method::PATCH,
        "/api/v1/nodes/golden-node",
        "application/json-patch+json",
        &jp,
    )
    .await;
    assert_eq!((code, body), golden_response(18));
    // 24/25: unsupported patch content types.
    let (code, body) = call(
        c,
        Method::PATCH,
        "/api/v1/nodes/golden-node",
        "application/json",
        "{}",
    )
    .await;
    assert_eq!((code, body), golden_response(24));
    let (code, body) = call(
        c,
        Method::PATCH,
        "/api/v1/nodes/golden-node",
        "application/apply-patch+yaml",
        "a: b",
    )
    .await;
    assert_eq!((code, body), golden_response(25));
    // 112: a protobuf body whose envelope does not decode (well-formed ones: sim_protobuf.rs).
    let (code, body) = call(
        c,
        Method::POST,
        "/api/v1/namespaces",
        "application/vnd.kubernetes.protobuf",
        "k8s\0binary",
    )
    .await;
    assert_eq!((code, body), golden_response(112));
    // 116: CBOR is not decoded (alpha in v1.36): 415, not a JSON syntax error.
    let (code, body) = call(
        c,
        Method::POST,
        "/api/v1/namespaces",
        "application/cbor",
        "\u{a0}",
    )
    .await;
    assert_eq!((code, body), golden_response(116));
    // 16: strategic merge cordon.
    let (code, body) = call(
        c,
        Method::PATCH,
        "/api/v1/nodes/golden-node",
        "application/strategic-merge-patch+json",
        r#"{"spec":{"unschedulable":true}}"#,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(body["spec"]["unschedulable"], true);
    // 88: PUT on a collection; 89: unknown resource; 87: unknown group.
    let (code, body) = call(c, Method::PUT, "/api/v1/nodes", "application/json", &node).await;
    assert_eq!((code, body), golden_response(88));
    let (code, body) = get(c, "/api/v1/namespaces/demo/things").await;
    assert_eq!((code, body), golden_response(89));
    let (code, text) = raw(
        c,
        Method::GET,
        "/apis/rollboot.dev/v1/namespaces/demo/things",
        "",
        "",
    )
    .await;
    assert_eq!((code, Value::String(text)), golden_response(87));
    // 27/28: DELETE answers a Status, then 404.
    let (code, body) = call(
        c,
        Method::DELETE,
        "/api/v1/nodes/golden-node",
        "application/json",
        "",
    )
    .await;
    let (gcode, mut gbody) = golden_response(27);
    gbody["details"]["uid"] = created["metadata"]["uid"].clone();
    assert_eq!((code, body), (gcode, gbody));
    let (code, body) = call(
        c,
        Method::DELETE,
        "/api/v1/nodes/golden-node",
        "application/json",
        "",
    )
    .await;
    assert_eq!((code, body), golden_response(28));
    cluster.shutdown().await;
}

#[tokio::test]
async fn lists_paginate_and_filter_like_kube_apiserver() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    let (_, all) = get(c, "/api/v1/pods").await;
    let total = all["items"].as_array().unwrap().len();
    assert_eq!(total, 6 + 3, "6 app pods and 3 DaemonSet pods");
    // 29-31: limit/continue, remainingItemCount, same list resourceVersion on every page.
    let (_, p1) = get(c, "/api/v1/pods?limit=4").await;
    assert_eq!(p1["metadata"]["remainingItemCount"], json!(total - 4));
    let token = p1["metadata"]["continue"].as_str().unwrap().to_string();
    let (_, p2) = get(c, &format!("/api/v1/pods?limit=4&continue={token}")).await;
    let (_, p3) = get(
        c,
        &format!(
            "/api/v1/pods?limit=4&continue={}",
            p2["metadata"]["continue"].as_str().unwrap()
        ),
    )
    .await;
    assert!(
        p3["metadata"].get("continue").is_none()
            && p3["metadata"].get("remainingItemCount").is_none()
    );
    assert_eq!(
        p2["metadata"]["resourceVersion"],
        p1["metadata"]["resourceVersion"]
    );
    let names: Vec<Value> = [&p1, &p2, &p3]
        .iter()
        .flat_map(|p| {
            p["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].clone())
        })
        .collect();
    let all_names: Vec<Value> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, all_names);
    // 36: resourceVersion=0 ignores limit.
    let (_, rv0) = get(c, "/api/v1/pods?resourceVersion=0&limit=2").await;
    assert_eq!(rv0["items"].as_array().unwrap().len(), total);
    assert!(rv0["metadata"].get("continue").is_none());
    // 32: fieldSelector spec.nodeName; 33: labelSelector.
    let (_, on_node) = get(c, "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0000").await;
    assert_eq!(on_node["items"].as_array().unwrap().len(), 3);
    let (_, web) = get(
        c,
        "/api/v1/namespaces/apps-0/pods?labelSelector=app%3Dapp-0",
    )
    .await;
    assert_eq!(web["items"].as_array().unwrap().len(), 3);
    let (_, running) = get(c, "/api/v1/pods?fieldSelector=status.phase%21%3DRunning").await;
    assert_eq!(running["items"].as_array().unwrap().len(), 0);
    // 34: unsupported field selector.
    let (code, body) = get(c, "/api/v1/pods?fieldSelector=spec.foo%3Dbar").await;
    assert_eq!((code, body), golden_response(34));
    // 84: exact list at an old revision we no longer keep.
    let (code, body) = get(
        c,
        "/api/v1/nodes?resourceVersion=1&resourceVersionMatch=Exact",
    )
    .await;
    assert_eq!((code, body), golden_response(84));
    cluster.shutdown().await;
}

#[tokio::test]
async fn eviction_answers_201_429_500_404_like_kube_apiserver() {
    let cluster = Cluster::start(Scenario {
        time_factor: 100.0,
        ..small()
    })
    .await
    .unwrap();
    let c = &cluster;
    let (_, pdb) = get(
        c,
        "/apis/policy/v1/namespaces/apps-0/poddisruptionbudgets/app-0",
    )
    .await;
    assert_eq!(pdb["status"]["disruptionsAllowed"], 1);
    assert_eq!(pdb["status"]["expectedPods"], 3);
    let (_, pods) = get(
        c,
        "/api/v1/namespaces/apps-0/pods?labelSelector=app%3Dapp-0",
    )
    .await;
    let names: Vec<String> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let evict = |n: &str| {
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": n, "namespace": "apps-0"}}).to_string()
    };
    // 40: allowed eviction; 41: budget decremented and pod recorded at once.
    let (code, body) = call(
        c,
        Method::POST,
        &format!("/api/v1/namespaces/apps-0/pods/{}/eviction", names[0]),
        "application/json",
        &evict(&names[0]),
    )
    .await;
    assert_eq!((code, body), golden_response(40));
    let (_, pdb) = get(
        c,
        "/apis/policy/v1/namespaces/apps-0/poddisruptionbudgets/app-0",
    )
    .await;
    assert_eq!(pdb["status"]["disruptionsAllowed"], 0);
    // disruptedPods may already be cleared: the controller drops pods that are deleting.
    // 42: the pod is terminating with the DisruptionTarget condition.
    let (_, pod) = get(c, &format!("/api/v1/namespaces/apps-0/pods/{}", names[0])).await;
    if pod["kind"] == "Pod" {
        assert!(pod["metadata"]["deletionTimestamp"].is_string());
        assert_eq!(pod["metadata"]["deletionGracePeriodSeconds"], 30);
    }
    // 43: the next one is refused by the budget.
    let (code, body) = call(
        c,
        Method::POST,
        &format!("/api/v1/namespaces/apps-0/pods/{}/eviction", names[1]),
        "application/json",
        &evict(&names[1]),
    )
    .await;
    let (gcode, mut gbody) = golden_response(43);
    gbody["details"]["causes"][0]["message"] =
        json!("The disruption budget app-0 needs 2 healthy pods and has 2 currently");
    assert_eq!((code, body), (gcode, gbody));
    // 45: missing pod.
    let (code, body) = call(
        c,
        Method::POST,
        "/api/v1/namespaces/demo/pods/no-such-pod/eviction",
        "application/json",
        &evict("no-such-pod"),
    )
    .await;
    assert_eq!((code, body), golden_response(45));
    // 48: a second budget over the same pods gives 500 without reason.
    let second = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "second"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "app-0"}}}}).to_string();
    let (code, _) = call(
        c,
        Method::POST,
        "/apis/policy/v1/namespaces/apps-0/poddisruptionbudgets",
        "application/json",
        &second,
    )
    .await;
    assert_eq!(code, 201);
    let (code, body) = call(
        c,
        Method::POST,
        &format!("/api/v1/namespaces/apps-0/pods/{}/eviction", names[1]),
        "application/json",
        &evict(&names[1]),
    )
    .await;
    assert_eq!((code, body), golden_response(48));
    assert!(cluster.invariants().pdb_violations.is_empty());
    cluster.shutdown().await;
}

#[tokio::test]
async fn pod_delete_is_graceful_and_checks_preconditions_like_kube_apiserver() {
    let cluster = Cluster::start(Scenario {
        time_factor: 100.0,
        ..small()
    })
    .await
    .unwrap();
    let c = &cluster;
    let (_, pods) = get(c, "/api/v1/namespaces/apps-1/pods").await;
    let p0 = pods["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let p1 = pods["items"][1]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    // 54: graceful delete returns the object with deletionTimestamp; 55: again, unchanged.
    let path = format!("/api/v1/namespaces/apps-1/pods/{p0}?gracePeriodSeconds=30");
    let (code, first) = call(c, Method::DELETE, &path, "application/json", "").await;
    assert_eq!(code, 200);
    assert_eq!(first["metadata"]["deletionGracePeriodSeconds"], 30);
    let (_, again) = call(c, Method::DELETE, &path, "application/json", "").await;
    assert_eq!(
        again["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );
    // 56: uid precondition mismatch.
    let body = r#"{"apiVersion":"v1","kind":"DeleteOptions","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}"#;
    let (code, st) = call(
        c,
        Method::DELETE,
        &format!("/api/v1/namespaces/apps-1/pods/{p1}"),
        "application/json",
        body,
    )
    .await;
    assert_eq!(code, 409);
    assert_eq!(st["reason"], "Conflict");
    assert_eq!(st["details"], json!({"name": p1, "kind": "Pod"}));
    // 57: grace 0 removes at once.
    let (code, _) = call(
        c,
        Method::DELETE,
        &format!("/api/v1/namespaces/apps-1/pods/{p1}?gracePeriodSeconds=0"),
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = get(c, &format!("/api/v1/namespaces/apps-1/pods/{p1}")).await;
    assert_eq!(code, 404);
    cluster.shutdown().await;
}

#[tokio::test]
async fn watch_from_a_compacted_revision_gets_an_expired_error_event() {
    let opts = rollboot_sim::sim::Options {
        watch_window: 4,
        ..Default::default()
    };
    let cluster = Cluster::start_with(small(), opts).await.unwrap();
    let c = &cluster;
    let (_, text) = raw(
        c,
        Method::GET,
        "/api/v1/pods?watch=1&resourceVersion=2&timeoutSeconds=1",
        "",
        "",
    )
    .await;
    let ev: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");
    assert!(ev["object"]["message"]
        .as_str()
        .unwrap()
        .starts_with("too old resource version: 2 ("));
    // 80: sendInitialEvents without resourceVersionMatch.
    let (code, body) = get(c, "/api/v1/nodes?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&labelSelector=golden%3Dwatch&timeoutSeconds=3").await;
    assert_eq!((code, body), golden_response(80));
    cluster.shutdown().await;
}

#[tokio::test]
async fn watch_sends_deleted_when_an_object_leaves_the_selector_like_the_watch_cache() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    let (_, list) = get(c, "/api/v1/nodes").await;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let addr = c.addr();
    let watch = tokio::spawn(async move {
        raw_addr(addr, Method::GET, &format!("/api/v1/nodes?watch=1&resourceVersion={rv}&labelSelector=golden%3Dwatch&timeoutSeconds=2"), "", "").await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    for patch in [
        r#"{"metadata":{"labels":{"golden":"watch"}}}"#,
        r#"{"metadata":{"annotations":{"x":"1"}}}"#,
        r#"{"metadata":{"labels":{"golden":null}}}"#,
    ] {
        let (code, _) = call(
            c,
            Method::PATCH,
            "/api/v1/nodes/node-0001",
            "application/merge-patch+json",
            patch,
        )
        .await;
        assert_eq!(code, 200);
    }
    let (_, text) = watch.await.unwrap();
    let types: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"]);
    cluster.shutdown().await;
}

/// A watch selecting one object by name (an agent's watch of its own Node; kube-apiserver
/// serves it from its watch cache): the object's ADDED first, then its changes only, whatever
/// happens to the other objects; from a resourceVersion, only its own kept events.
#[tokio::test]
async fn a_watch_of_one_object_by_name_gets_that_object_alone() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    let (_, list) = get(c, "/api/v1/nodes").await;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let addr = c.addr();
    let fresh = tokio::spawn(async move {
        raw_addr(
            addr,
            Method::GET,
            "/api/v1/nodes?watch=1&fieldSelector=metadata.name%3Dnode-0001&timeoutSeconds=2",
            "",
            "",
        )
        .await
    });
    let from_rv = tokio::spawn(async move {
        raw_addr(addr, Method::GET, &format!("/api/v1/nodes?watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3Dnode-0002&timeoutSeconds=2"), "", "").await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    for (node, x) in [
        ("node-0000", "1"),
        ("node-0001", "2"),
        ("node-0002", "3"),
        ("node-0001", "4"),
    ] {
        let (code, _) = call(
            c,
            Method::PATCH,
            &format!("/api/v1/nodes/{node}"),
            "application/merge-patch+json",
            &format!(r#"{{"metadata":{{"annotations":{{"x":"{x}"}}}}}}"#),
        )
        .await;
        assert_eq!(code, 200);
    }
    let seen = |text: String| -> Vec<(String, String, String)> {
        text.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                let o = &v["object"];
                (
                    v["type"].as_str().unwrap().to_string(),
                    o["metadata"]["name"].as_str().unwrap().to_string(),
                    o["metadata"]["annotations"]["x"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                )
            })
            .collect()
    };
    let ev = |t: &str, n: &str, x: &str| (t.to_string(), n.to_string(), x.to_string());
    assert_eq!(
        seen(fresh.await.unwrap().1),
        [
            ev("ADDED", "node-0001", ""),
            ev("MODIFIED", "node-0001", "2"),
            ev("MODIFIED", "node-0001", "4")
        ]
    );
    assert_eq!(
        seen(from_rv.await.unwrap().1),
        [ev("MODIFIED", "node-0002", "3")]
    );
    // Namespaced: the name is looked up in the namespace of the path only.
    let (_, pods) = get(c, "/api/v1/namespaces/apps-0/pods?limit=1").await;
    let pod = pods["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, text) = raw_addr(addr, Method::GET, &format!("/api/v1/namespaces/apps-1/pods?watch=1&fieldSelector=metadata.name%3D{pod}&timeoutSeconds=1"), "", "").await;
    assert_eq!(text.lines().count(), 0, "{text}");
    let (_, text) = raw_addr(addr, Method::GET, &format!("/api/v1/namespaces/apps-0/pods?watch=1&fieldSelector=metadata.name%3D{pod}&timeoutSeconds=1"), "", "").await;
    assert_eq!(seen(text).len(), 1);
    cluster.shutdown().await;
}

#[tokio::test]
async fn kube_rs_clients_work_as_in_production() {
    let cluster = Cluster::start(small()).await.unwrap();
    let client = cluster.kube_client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 3);
    let cordon = json!({"spec": {"unschedulable": true}});
    let n = nodes
        .patch(
            "node-0000",
            &PatchParams::default(),
            &Patch::Strategic(&cordon),
        )
        .await
        .unwrap();
    assert_eq!(n.spec.unwrap().unschedulable, Some(true));
    // Leases: create, renew, stale renew conflicts.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "rollboot-leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut renewed = created.clone();
    renewed.spec.as_mut().unwrap().holder_identity = Some("b".into());
    leases
        .replace("rollboot-leader", &PostParams::default(), &renewed)
        .await
        .unwrap();
    let err = leases
        .replace("rollboot-leader", &PostParams::default(), &renewed)
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (409, "Conflict")),
        e => panic!("unexpected {e}"),
    }
    // Pods: evict through the API.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "apps-1");
    let p = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .remove(0);
    let name = p.metadata.name.unwrap();
    pods.evict(&name, &EvictParams::default()).await.unwrap();
    // The watcher sees the node change.
    use futures::StreamExt;
    let mut stream =
        kube::runtime::watcher(nodes.clone(), kube::runtime::watcher::Config::default()).boxed();
    let mut saw_init_done = false;
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
    {
        match ev.unwrap() {
            kube::runtime::watcher::Event::InitDone => {
                saw_init_done = true;
                nodes
                    .patch(
                        "node-0001",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"annotations": {"w": "1"}}})),
                    )
                    .await
                    .unwrap();
            }
            kube::runtime::watcher::Event::Apply(n) if saw_init_done => {
                assert_eq!(n.metadata.name.as_deref(), Some("node-0001"));
                break;
            }
            _ => {}
        }
    }
    assert!(saw_init_done);
    cluster.shutdown().await;
}

fn types_of(watch: &str) -> Vec<String> {
    watch
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn statefulsets_are_served_like_kube_apiserver() {
    let sc = Scenario {
        stateful_sets: 1,
        ..small()
    };
    let cluster = Cluster::start(sc).await.unwrap();
    let c = &cluster;
    // Discovery: the entry of golden 04, without the verbs and subresources not served.
    let (code, apps) = get(c, "/apis/apps/v1").await;
    assert_eq!(code, 200);
    let g = golden(4)["response"]["body"].clone();
    let mut want = g["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "statefulsets")
        .unwrap()
        .clone();
    want["verbs"] = json!(["create", "delete", "get", "list", "patch", "update", "watch"]);
    let got = apps["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "statefulsets")
        .expect("statefulsets in /apis/apps/v1");
    assert_eq!(got, &want);

    // The world's StatefulSet: list (all namespaces, one namespace, selectors).
    let (code, list) = get(c, "/apis/apps/v1/statefulsets").await;
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "StatefulSetList");
    assert_eq!(list["apiVersion"], "apps/v1");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    let ss: StatefulSet = serde_json::from_value(items[0].clone()).unwrap();
    let ns = ss.metadata.namespace.clone().unwrap();
    assert_eq!(ss.metadata.name.as_deref(), Some("db-0"));
    assert_eq!(ss.status.as_ref().unwrap().ready_replicas, Some(3));
    for (query, n) in [
        ("labelSelector=app%3Ddb-0", 1),
        ("labelSelector=app%3Dnone", 0),
        ("fieldSelector=metadata.name%3Ddb-0", 1),
        ("fieldSelector=metadata.name%21%3Ddb-0", 0),
    ] {
        let (code, l) = get(
            c,
            &format!("/apis/apps/v1/namespaces/{ns}/statefulsets?{query}"),
        )
        .await;
        assert_eq!(code, 200, "{query}");
        assert_eq!(l["items"].as_array().unwrap().len(), n, "{query}");
    }
    let (code, body) = get(
        c,
        "/apis/apps/v1/statefulsets?fieldSelector=spec.replicas%3D1",
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(body["message"], "field label not supported: spec.replicas");
    // Its pods are NAME-ORDINAL, owned by it.
    let (_, pods) = get(
        c,
        &format!("/api/v1/namespaces/{ns}/pods?labelSelector=app%3Ddb-0"),
    )
    .await;
    let mut names: Vec<String> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "StatefulSet");
            p["metadata"]["name"].as_str().unwrap().to_string()
        })
        .collect();
    names.sort();
    assert_eq!(names, ["db-0-0", "db-0-1", "db-0-2"]);

    // Watch one namespace while a StatefulSet is created, scaled and deleted.
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let addr = c.addr();
    let path = format!(
        "/apis/apps/v1/namespaces/apps-0/statefulsets?watch=1&resourceVersion={rv}&labelSelector=app%3Dweb&timeoutSeconds=2"
    );
    let watch = tokio::spawn(async move { raw_addr(addr, Method::GET, &path, "", "").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let base = "/apis/apps/v1/namespaces/apps-0/statefulsets";
    let web = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 2, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}});
    let (code, created) = call(c, Method::POST, base, "application/json", &web.to_string()).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["generation"], 1);
    assert_eq!(created["metadata"]["namespace"], "apps-0");
    assert!(created["metadata"]["uid"].is_string());
    let (code, again) = call(c, Method::POST, base, "application/json", &web.to_string()).await;
    assert_eq!(code, 409);
    assert_eq!(again["reason"], "AlreadyExists");
    assert_eq!(
        again["message"],
        r#"statefulsets.apps "web" already exists"#
    );
    let mut bad = web.clone();
    bad["metadata"]["name"] = json!("bad");
    bad["spec"]["replicas"] = json!("two");
    let (code, st) = call(c, Method::POST, base, "application/json", &bad.to_string()).await;
    assert_eq!(code, 400);
    assert_eq!(st["kind"], "Status");
    assert!(st["message"]
        .as_str()
        .unwrap()
        .starts_with("StatefulSet in version \"v1\" cannot be handled as a StatefulSet"));
    // fieldValidation=Strict refuses a field StatefulSet does not have; without it the field
    // is dropped. dryRun is not implemented, so it is refused.
    let mut typo = web.clone();
    typo["metadata"]["name"] = json!("typo");
    typo["spec"]["replicaz"] = json!(2);
    typo["spec"]["template"]["spec"]["containers"][0]["imagex"] = json!("x");
    let (code, st) = call(
        c,
        Method::POST,
        &format!("{base}?fieldValidation=Strict"),
        "application/json",
        &typo.to_string(),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        st["message"],
        r#"StatefulSet in version "v1" cannot be handled as a StatefulSet: strict decoding error: unknown field "spec.replicaz", unknown field "spec.template.spec.containers[0].imagex""#
    );
    let (code, st) = call(
        c,
        Method::POST,
        &format!("{base}?dryRun=All"),
        "application/json",
        &typo.to_string(),
    )
    .await;
    assert_eq!((code, st["reason"].as_str()), (400, Some("BadRequest")));
    let (code, st) = call(
        c,
        Method::PATCH,
        &format!("{base}/web?fieldValidation=Strict"),
        "application/merge-patch+json",
        r#"{"spec":{"replicaz":3}}"#,
    )
    .await;
    assert_eq!(code, 400, "{st}");
    let (code, patched) = call(
        c,
        Method::PATCH,
        &format!("{base}/web?fieldValidation=Strict"),
        "application/merge-patch+json",
        r#"{"spec":{"replicas":3}}"#,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(patched["metadata"]["generation"], 2);
    let mut stale = created.clone();
    stale["spec"]["replicas"] = json!(1);
    let (code, st) = call(
        c,
        Method::PUT,
        &format!("{base}/web"),
        "application/json",
        &stale.to_string(),
    )
    .await;
    assert_eq!(code, 409);
    assert_eq!(st["reason"], "Conflict");
    // The world creates web-0..web-2 and runs them; the status follows.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, pods) = get(c, "/api/v1/namespaces/apps-0/pods?labelSelector=app%3Dweb&fieldSelector=status.phase%3DRunning").await;
        let (_, web) = get(c, &format!("{base}/web")).await;
        if pods["items"].as_array().unwrap().len() == 3 && web["status"]["readyReplicas"] == 3 {
            assert_eq!(web["status"]["replicas"], 3);
            assert_eq!(web["status"]["observedGeneration"], 2);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "web pods not running: {pods}, status {}",
            web["status"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, st) = call(
        c,
        Method::DELETE,
        &format!("{base}/web"),
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(st["status"], "Success");
    assert_eq!(st["details"]["group"], "apps");
    assert_eq!(st["details"]["kind"], "statefulsets");
    let (code, st) = get(c, &format!("{base}/web")).await;
    assert_eq!(code, 404);
    assert_eq!(st["message"], r#"statefulsets.apps "web" not found"#);
    assert_eq!(
        st["details"],
        json!({"name": "web", "group": "apps", "kind": "statefulsets"})
    );
    let (_, text) = watch.await.unwrap();
    let types = types_of(&text);
    assert_eq!(
        types.first().map(String::as_str),
        Some("ADDED"),
        "{types:?}"
    );
    assert_eq!(
        types.last().map(String::as_str),
        Some("DELETED"),
        "{types:?}"
    );
    assert!(
        types[1..types.len() - 1].iter().all(|t| t == "MODIFIED") && types.len() >= 3,
        "the patch and the status updates: {types:?}"
    );

    // An evicted pod of the StatefulSet comes back under the same name.
    let client = c.kube_client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let old = pods.get("db-0-1").await.unwrap();
    pods.evict("db-0-1", &EvictParams::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(p) = pods.get_opt("db-0-1").await.unwrap() {
            if p.metadata.uid != old.metadata.uid
                && p.status.and_then(|s| s.phase).as_deref() == Some("Running")
            {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "db-0-1 not recreated"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sts
        .get("db-0")
        .await
        .unwrap()
        .status
        .unwrap()
        .ready_replicas
        != Some(3)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "db-0 not ready again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // kube-rs, as the controller's health gate uses it: list and watch.
    assert_eq!(
        sts.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    use futures::StreamExt;
    let mut stream = kube::runtime::watcher(sts, kube::runtime::watcher::Config::default()).boxed();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if matches!(ev, kube::runtime::watcher::Event::InitDone) {
            break;
        }
    }
    cluster.shutdown().await;
}

/// Discovery and `/openapi/v3` describe exactly what the router serves: every served kind is
/// in its group-version's APIResourceList and has a PATCH operation declaring
/// `fieldValidation` (what kubectl apply looks for), and every listed resource is routed.
#[tokio::test]
async fn discovery_and_openapi_v3_list_exactly_the_served_kinds() {
    let cluster = Cluster::start(small()).await.unwrap();
    // Every kind: the custom resource's with its CRD installed.
    cluster.install_node_maintenance(true);
    let c = &cluster;
    let (code, root) = get(c, "/openapi/v3").await;
    assert_eq!(code, 200);
    let (_, groups) = get(c, "/apis").await;
    let mut gvs = vec!["v1".to_string()];
    for g in groups["groups"].as_array().unwrap() {
        gvs.push(
            g["preferredVersion"]["groupVersion"]
                .as_str()
                .unwrap()
                .into(),
        );
    }
    let mut served = 0;
    for gv in &gvs {
        let disc_path = if gv == "v1" {
            "/api/v1".to_string()
        } else {
            format!("/apis/{gv}")
        };
        let (code, list) = get(c, &disc_path).await;
        assert_eq!(code, 200, "{disc_path}");
        assert_eq!(list["groupVersion"], gv.as_str());
        let key = disc_path.trim_start_matches('/');
        let url = root["paths"][key]["serverRelativeURL"]
            .as_str()
            .unwrap_or_else(|| panic!("{key} not in /openapi/v3"));
        let (code, doc) = get(c, url).await;
        assert_eq!(code, 200, "{url}");
        for r in list["resources"].as_array().unwrap() {
            let name = r["name"].as_str().unwrap();
            if name.contains('/') {
                continue;
            }
            served += 1;
            let ns = r["namespaced"].as_bool().unwrap();
            let kind = r["kind"].as_str().unwrap();
            let item = if ns {
                format!("{disc_path}/namespaces/default/{name}/no-such-object")
            } else {
                format!("{disc_path}/{name}/no-such-object")
            };
            let (code, st) = get(c, &item).await;
            assert_eq!(
                (code, st["reason"].as_str()),
                (404, Some("NotFound")),
                "{item}"
            );
            assert_eq!(st["details"]["kind"], name, "{item}");
            let (code, l) = get(c, &format!("{disc_path}/{name}")).await;
            assert_eq!(code, 200, "list {name}");
            assert_eq!(l["kind"], format!("{kind}List"));
            let template = if ns {
                format!("{disc_path}/namespaces/{{namespace}}/{name}/{{name}}")
            } else {
                format!("{disc_path}/{name}/{{name}}")
            };
            let patch = &doc["paths"][&template]["patch"];
            let (group, version) = gv.split_once('/').unwrap_or(("", gv));
            assert_eq!(
                patch["x-kubernetes-group-version-kind"],
                json!({"group": group, "version": version, "kind": kind}),
                "{template}"
            );
            assert!(patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));
        }
    }
    assert_eq!(served, rollboot_sim::sim::kinds::Kind::ALL.len());
    cluster.install_node_maintenance(false);
    let (code, root) = get(c, "/openapi/v3").await;
    assert_eq!(code, 200);
    assert!(root["paths"]
        .get("apis/nodemaintenance.medik8s.io/v1beta1")
        .is_none());
    let (code, _) = get(c, "/openapi/v2").await;
    assert_eq!(code, 404);
    cluster.shutdown().await;
}
