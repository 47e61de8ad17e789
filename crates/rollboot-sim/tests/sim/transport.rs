//! The in-process transport (`sim::transport`): the simulated controller and agents reach the
//! API server without a socket, and must get what they would get over HTTP.

use crate::common;

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use rollboot_sim::sim::{Cluster, Scenario};

use common::small_and_slow as small;

/// A request of `method` to `path` with `body` (JSON, or none).
fn request(method: &str, path: &str, body: Option<&str>) -> http::Request<Vec<u8>> {
    let mut r = http::Request::builder().method(method).uri(path);
    if body.is_some() {
        let ct = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        r = r.header("content-type", ct);
    }
    r.body(body.unwrap_or("").as_bytes().to_vec()).unwrap()
}

/// What a client gets for a request: the body of a success, or the Status of a refusal.
async fn answer(client: &kube::Client, req: http::Request<Vec<u8>>) -> String {
    match client.request_text(req).await {
        Ok(text) => text,
        Err(kube::Error::Api(status)) => format!("refused: {status:?}"),
        Err(e) => panic!("not an answer of the server: {e}"),
    }
}

#[tokio::test]
async fn the_same_requests_get_the_same_answers_in_process_as_over_http() {
    let cluster = Cluster::start(small()).await.unwrap();
    let mut config = cluster.kube_config_as("tester").await.unwrap();
    rollboot::client::identify(&mut config, "transport-test");
    let local = cluster.in_process_client(&config).unwrap();
    let http = kube::Client::try_from(config).unwrap();
    let node = Api::<Node>::all(http.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let node_path = format!("/api/v1/nodes/{node}");
    let asked: Vec<(&str, String, Option<&str>)> = vec![
        ("GET", "/api/v1/namespaces/default".into(), None),
        ("GET", node_path.clone(), None),
        (
            "GET",
            "/api/v1/nodes?labelSelector=nope%3Dnone".into(),
            None,
        ),
        (
            "GET",
            "/api/v1/namespaces/default/pods/nowhere".into(),
            None,
        ),
        ("GET", "/apis/apps/v1/nothings".into(), None),
        ("PATCH", node_path.clone(), Some("{\"metadata\": ")),
        (
            "POST",
            "/api/v1/namespaces/default/pods/nowhere/eviction".into(),
            Some(
                r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"nowhere","namespace":"default"}}"#,
            ),
        ),
    ];
    for (method, path, body) in &asked {
        let here = answer(&local, request(method, path, *body)).await;
        let there = answer(&http, request(method, path, *body)).await;
        assert_eq!(here, there, "{method} {path}");
    }
    // A write: each transport's lands, and reads back the same through the other.
    for (client, value) in [(&local, "in-process"), (&http, "http")] {
        let patch = format!(r#"{{"metadata":{{"labels":{{"transport":"{value}"}}}}}}"#);
        answer(client, request("PATCH", &node_path, Some(&patch))).await;
        let here = answer(&local, request("GET", &node_path, None)).await;
        let there = answer(&http, request("GET", &node_path, None)).await;
        assert_eq!(here, there);
        assert!(
            here.contains(&format!(r#""transport":"{value}""#)),
            "{here}"
        );
    }
    // The server knows who asked: the token and the User-Agent arrive as over HTTP.
    let agents = cluster.stats().user_agents;
    assert_eq!(
        agents
            .get("tester")
            .map(|s| s.iter().cloned().collect::<Vec<_>>()),
        Some(vec![rollboot::client::user_agent("transport-test")])
    );
    let per_identity = cluster
        .stats()
        .requests
        .iter()
        .filter(|(k, _)| k.identity == "tester" && k.verb == "patch")
        .map(|(_, n)| n)
        .sum::<u64>();
    assert_eq!(
        per_identity, 4,
        "the refused and the label patch of each transport, counted as the tester's"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn an_outage_refuses_in_process_requests_and_cuts_their_watches() {
    let cluster = Cluster::start(Scenario {
        // The world at its usual pace: a reboot asked during the outage writes the Node soon.
        time_factor: 0.01,
        ..small()
    })
    .await
    .unwrap();
    let config = cluster.kube_config_as("tester").await.unwrap();
    let nodes: Api<Node> = Api::all(cluster.in_process_client(&config).unwrap());
    let list = nodes.list(&ListParams::default()).await.unwrap();
    let node = list.items[0].metadata.name.clone().unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let mut watch = nodes
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .unwrap()
        .boxed();
    // The watch is open and answering.
    let label = serde_json::json!({"metadata": {"labels": {"before": "outage"}}});
    nodes
        .patch(&node, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), watch.next()).await {
            Ok(Some(Ok(WatchEvent::Modified(n)))) if n.metadata.name == Some(node.clone()) => break,
            Ok(Some(Ok(_))) => continue,
            other => panic!("the label's change before the outage, got {other:?}"),
        }
    }
    cluster.outage(Duration::from_secs(2));
    let refused = nodes.list(&ListParams::default()).await;
    assert!(
        matches!(refused, Err(kube::Error::Service(_))),
        "a request during the outage fails as a refused connection: {refused:?}"
    );
    // The world goes on during the outage: the Node's next change is the watch's next chunk.
    cluster.world().reboot(&node, "during-the-outage");
    let cut = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match watch.next().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => break Some(e),
                None => break None,
            }
        }
    })
    .await
    .expect("the open watch ends during the outage");
    assert!(cut.is_some(), "the watch ends with an error, not quietly");
    let deadline = Instant::now() + Duration::from_secs(10);
    while nodes.list(&ListParams::default()).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the server answers again after the outage"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.shutdown().await;
}
