//! Server-side printing (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), what
//! `kubectl get` asks kube-apiserver for.

use std::time::Duration;

use rollboot_sim::sim::{Cluster, Scenario};
use serde_json::Value;

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

async fn get_table(c: &Cluster, path: &str) -> Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(c.addr()).await.unwrap();
    let req =
        format!("GET {path} HTTP/1.1\r\nHost: sim\r\nAccept: {TABLE}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    serde_json::from_str(body).unwrap()
}

fn column_names(t: &Value) -> Vec<String> {
    t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// Mirrors kube-apiserver's node and pod printers: nodes NAME/STATUS/ROLES/AGE/VERSION
/// (`Ready,SchedulingDisabled` when cordoned), pods NAME/READY/STATUS/RESTARTS/AGE and the
/// wide columns (priority 1) with NODE; rows carry PartialObjectMetadata by default.
#[tokio::test]
async fn nodes_and_pods_are_printed_as_tables_for_kubectl() {
    let cluster = Cluster::start(Scenario {
        time_factor: 100.0,
        ..Scenario::default()
    })
    .await
    .unwrap();
    let c = &cluster;
    let t = get_table(c, "/api/v1/nodes").await;
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(
        column_names(&t)[..5],
        ["Name", "Status", "Roles", "Age", "Version"]
    );
    let row = &t["rows"][0];
    assert_eq!(row["cells"][0], "node-0000");
    assert_eq!(row["cells"][1], "Ready");
    assert_eq!(row["cells"][2], "worker");
    assert_eq!(row["cells"][4], "v1.36.2");
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["metadata"]["name"], "node-0000");

    let kc = c.kube_client().await.unwrap();
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(kc);
    nodes.cordon("node-0001").await.unwrap();
    let t = get_table(c, "/api/v1/nodes/node-0001").await;
    assert_eq!(t["rows"][0]["cells"][1], "Ready,SchedulingDisabled");

    let t = get_table(c, "/api/v1/pods").await;
    let names = column_names(&t);
    assert_eq!(names[..5], ["Name", "Ready", "Status", "Restarts", "Age"]);
    let node_col = names.iter().position(|n| n == "Node").unwrap();
    assert_eq!(t["columnDefinitions"][node_col]["priority"], 1);
    let rows = t["rows"].as_array().unwrap();
    assert_eq!(rows.len(), c.world().pod_count());
    assert!(rows.iter().all(|r| r["cells"][1] == "1/1"
        && r["cells"][2] == "Running"
        && r["cells"][node_col].as_str().unwrap().starts_with("node-")));
    cluster.shutdown().await;
}
