//! The simulated cluster's volumes: PersistentVolume(Claim)s, StorageClasses, CSIDrivers and
//! VolumeAttachments served like kube-apiserver, and the world's StatefulSet controller,
//! provisioner, attach/detach controller, CSI attacher and kubelets handling them.

mod common;

use axum::http::Method;
use rollboot_sim::sim::{Cluster, Scenario};
use serde_json::{json, Value};

async fn call(c: &Cluster, method: Method, path: &str, body: &str) -> (u16, Value) {
    let (code, text) = common::http(c.addr(), "test", method, path, "application/json", body).await;
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get(c: &Cluster, path: &str) -> (u16, Value) {
    call(c, Method::GET, path, "").await
}

fn tiny() -> Scenario {
    Scenario {
        nodes: 2,
        pods_per_node: 1,
        replicas: 1,
        bare_pods: 0,
        mirror_pods: 0,
        empty_dir_pods: 0,
        daemon_sets: 0,
        time_factor: 0.01,
        ..Scenario::default()
    }
}

/// GETs of missing objects of the volume kinds answer kube-apiserver's 404 Status.
#[tokio::test]
async fn missing_volume_objects_answer_kube_apiservers_404() {
    let cluster = Cluster::start(tiny()).await.unwrap();
    let c = &cluster;
    for (path, name, group, kind) in [
        (
            "/api/v1/persistentvolumes/pv-x",
            "pv-x",
            "",
            "persistentvolumes",
        ),
        (
            "/api/v1/namespaces/default/persistentvolumeclaims/data-x",
            "data-x",
            "",
            "persistentvolumeclaims",
        ),
        (
            "/apis/storage.k8s.io/v1/csidrivers/x.csi.example.com",
            "x.csi.example.com",
            "storage.k8s.io",
            "csidrivers",
        ),
        (
            "/apis/storage.k8s.io/v1/storageclasses/fast",
            "fast",
            "storage.k8s.io",
            "storageclasses",
        ),
        (
            "/apis/storage.k8s.io/v1/volumeattachments/csi-0123",
            "csi-0123",
            "storage.k8s.io",
            "volumeattachments",
        ),
    ] {
        let (code, st) = get(c, path).await;
        assert_eq!(code, 404, "{path}");
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut details = json!({"name": name, "kind": kind});
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        assert_eq!(
            st,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("{qualified} \"{name}\" not found"), "reason": "NotFound",
                "details": details, "code": 404}),
            "{path}"
        );
    }
    // Created through the API, defaulted as the scheme defaults them.
    let (code, d) = call(
        c,
        Method::POST,
        "/apis/storage.k8s.io/v1/csidrivers",
        r#"{"apiVersion":"storage.k8s.io/v1","kind":"CSIDriver","metadata":{"name":"x.csi.example.com"},"spec":{}}"#,
    )
    .await;
    assert_eq!(code, 201, "{d}");
    assert_eq!(d["spec"]["attachRequired"], true);
    assert_eq!(d["spec"]["volumeLifecycleModes"], json!(["Persistent"]));
    let (code, l) = get(c, "/apis/storage.k8s.io/v1/volumeattachments").await;
    assert_eq!(code, 200);
    assert_eq!(l["kind"], "VolumeAttachmentList");
    assert_eq!(l["apiVersion"], "storage.k8s.io/v1");
    assert!(l["metadata"]["resourceVersion"].is_string());
    cluster.shutdown().await;
}
