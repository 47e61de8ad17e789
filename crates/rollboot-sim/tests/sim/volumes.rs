//! The simulated cluster's volumes: PersistentVolume(Claim)s, StorageClasses, CSIDrivers and
//! VolumeAttachments served like kube-apiserver, and the world's StatefulSet controller,
//! provisioner, PV controller and its protection controllers, attach/detach controller, CSI
//! attacher and kubelets handling them.

use crate::common;

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

/// Polls `$body` (an expression yielding `Option<T>`) every 10 ms until it is `Some`, or fails
/// after `$secs` seconds naming `$what`.
macro_rules! eventually {
    ($secs:expr, $what:expr, $body:expr) => {{
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs($secs);
        loop {
            if let Some(v) = $body {
                break v;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {}",
                $what
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }};
}

/// One StatefulSet of one pod with a volume on two nodes; 1 simulated s = 50 ms.
fn stateful() -> Scenario {
    Scenario {
        nodes: 2,
        pods_per_node: 0,
        replicas: 1,
        stateful_sets: 1,
        stateful_volumes: true,
        daemon_sets: 0,
        bare_pods: 0,
        mirror_pods: 0,
        empty_dir_pods: 0,
        grace_seconds: 2,
        attach_seconds: 2.0,
        detach_seconds: 4.0,
        reboot_time: 6.0,
        time_factor: 0.05,
        ..Scenario::default()
    }
}

const POD: &str = "/api/v1/namespaces/apps-0/pods/db-0-0";
const DRIVER: &str = "rwo.csi.rollboot.dev";

/// kube's csi_attacher name, computed here on its own.
fn va_name(handle: &str, node: &str) -> String {
    let d = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{handle}{DRIVER}{node}").as_bytes(),
    );
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("csi-{hex}")
}

fn va_path(name: &str) -> String {
    format!("/apis/storage.k8s.io/v1/volumeattachments/{name}")
}

fn ready(p: &Value) -> bool {
    p["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|v| v["name"].as_str().or(v.as_str()).unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The pod's claim, volume, handle and node.
async fn volume_of(c: &Cluster) -> (String, String, String) {
    let (code, pvc) = get(
        c,
        "/api/v1/namespaces/apps-0/persistentvolumeclaims/data-db-0-0",
    )
    .await;
    assert_eq!(code, 200, "{pvc}");
    assert_eq!(pvc["status"]["phase"], "Bound");
    assert_eq!(pvc["spec"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(pvc["spec"]["storageClassName"], "rollboot-sim-rwo");
    let pv_name = pvc["spec"]["volumeName"].as_str().unwrap().to_string();
    assert_eq!(
        pv_name,
        format!("pvc-{}", pvc["metadata"]["uid"].as_str().unwrap())
    );
    let (code, pv) = get(c, &format!("/api/v1/persistentvolumes/{pv_name}")).await;
    assert_eq!(code, 200);
    // Each object reads as its Kubernetes type (the wire's types: a resourceVersion a string).
    let typed: Result<k8s_openapi::api::core::v1::PersistentVolume, _> =
        serde_json::from_value(pv.clone());
    assert!(typed.is_ok(), "{typed:?}: {pv}");
    let typed: Result<k8s_openapi::api::core::v1::PersistentVolumeClaim, _> =
        serde_json::from_value(pvc.clone());
    assert!(typed.is_ok(), "{typed:?}: {pvc}");
    assert_eq!(pv["spec"]["csi"]["driver"], DRIVER);
    assert_eq!(pv["spec"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(pv["spec"]["claimRef"]["name"], "data-db-0-0");
    assert_eq!(pv["status"]["phase"], "Bound");
    let handle = pv["spec"]["csi"]["volumeHandle"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, pod) = get(c, POD).await;
    assert_eq!(
        pod["spec"]["volumes"][0],
        json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0-0"}})
    );
    let node = pod["spec"]["nodeName"].as_str().unwrap().to_string();
    (pv_name, handle, node)
}

async fn node_status(c: &Cluster, node: &str) -> (Vec<String>, Vec<String>) {
    let (_, n) = get(c, &format!("/api/v1/nodes/{node}")).await;
    (
        names(&n["status"]["volumesAttached"]),
        names(&n["status"]["volumesInUse"]),
    )
}

async fn cordon(c: &Cluster, node: &str) {
    let (code, _) = common::http(
        c.addr(),
        "test",
        Method::PATCH,
        &format!("/api/v1/nodes/{node}"),
        "application/merge-patch+json",
        r#"{"spec":{"unschedulable":true}}"#,
    )
    .await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn a_stateful_pods_volume_is_attached_detached_and_multi_attach_waits() {
    let cluster = Cluster::start(stateful()).await.unwrap();
    let c = &cluster;
    let (pv, handle, node) = volume_of(c).await;
    let unique = format!("kubernetes.io/csi/{DRIVER}^{handle}");
    let name = va_name(&handle, &node);
    let (code, va) = get(c, &va_path(&name)).await;
    assert_eq!(code, 200, "{va}");
    assert_eq!(va["apiVersion"], "storage.k8s.io/v1");
    assert_eq!(va["kind"], "VolumeAttachment");
    assert_eq!(
        va["spec"],
        json!({"attacher": DRIVER, "nodeName": node, "source": {"persistentVolumeName": pv}})
    );
    assert_eq!(va["status"]["attached"], true);
    let typed: Result<k8s_openapi::api::storage::v1::VolumeAttachment, _> =
        serde_json::from_value(va.clone());
    assert!(typed.is_ok(), "{typed:?}: {va}");
    assert!(va["metadata"]["resourceVersion"].is_string());
    let (attached, in_use) = node_status(c, &node).await;
    assert_eq!(attached, vec![unique.clone()]);
    assert_eq!(in_use, vec![unique.clone()]);
    let (_, n) = get(c, &format!("/api/v1/nodes/{node}")).await;
    assert_eq!(
        n["status"]["volumesAttached"],
        json!([{"name": unique, "devicePath": ""}])
    );

    // The pod goes; its replacement can only land on the other node.
    cordon(c, &node).await;
    let (code, _) = common::http(
        c.addr(),
        "test",
        Method::DELETE,
        POD,
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 200);
    eventually!(5, "the kubelet to unmount the volume", {
        let (_, in_use) = node_status(c, &node).await;
        in_use.is_empty().then_some(())
    });
    // Detaching takes detachSeconds: the VolumeAttachment is deleted, held by its finalizer.
    let (code, va) = get(c, &va_path(&name)).await;
    assert_eq!(code, 200, "detached before detachSeconds");
    let deleting = eventually!(5, "the VolumeAttachment to be deleted", {
        let (code, va) = get(c, &va_path(&name)).await;
        (code != 200 || !va["metadata"]["deletionTimestamp"].is_null()).then_some(code)
    });
    assert_eq!(deleting, 200, "{va}");
    let (_, va) = get(c, &va_path(&name)).await;
    assert_eq!(
        va["metadata"]["finalizers"],
        json!(["external-attacher/rwo-csi-rollboot-dev"])
    );
    let (attached, _) = node_status(c, &node).await;
    assert!(attached.is_empty(), "{attached:?}");
    // The replacement waits on the other node with a Multi-Attach Event.
    let other = if node == "node-0000" {
        "node-0001"
    } else {
        "node-0000"
    };
    let (_, replacement) = get(c, POD).await;
    assert!(!ready(&replacement), "{replacement}");
    let (code, st) = eventually!(5, "the VolumeAttachment to be gone", {
        let (code, st) = get(c, &va_path(&name)).await;
        (code == 404).then_some((code, st))
    });
    assert_eq!(code, 404);
    assert_eq!(
        st["message"],
        format!("volumeattachments.storage.k8s.io \"{name}\" not found")
    );
    assert_eq!(st["details"]["group"], "storage.k8s.io");
    let pod = eventually!(5, "the replacement to be Ready", {
        let (_, p) = get(c, POD).await;
        ready(&p).then_some(p)
    });
    assert_eq!(pod["spec"]["nodeName"], other);
    let (code, va) = get(c, &va_path(&va_name(&handle, other))).await;
    assert_eq!(code, 200);
    assert_eq!(va["status"]["attached"], true);
    let (attached, in_use) = node_status(c, other).await;
    assert_eq!((attached, in_use), (vec![unique.clone()], vec![unique]));
    // The same claim and volume.
    let (_, pvc) = get(
        c,
        "/api/v1/namespaces/apps-0/persistentvolumeclaims/data-db-0-0",
    )
    .await;
    assert_eq!(pvc["spec"]["volumeName"], pv);
    let (_, events) = get(
        c,
        "/api/v1/namespaces/apps-0/events?fieldSelector=reason%3DFailedAttachVolume",
    )
    .await;
    let events = events["items"].as_array().unwrap().clone();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["involvedObject"]["name"], "db-0-0");
    assert_eq!(e["involvedObject"]["uid"], pod["metadata"]["uid"]);
    assert_eq!(e["source"]["component"], "attachdetach-controller");
    assert_eq!(
        e["message"],
        format!("Multi-Attach error for volume \"{pv}\" Volume is already exclusively attached to one node and can't be attached to another")
    );
    let inv = c.invariants();
    assert_eq!(inv.multi_attach_wait_seconds.pods, 1);
    assert!(inv.multi_attach_wait_seconds.max > 0.0);
    assert!(inv.reboots_with_attached_volumes.is_empty());
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_reboot_with_a_volume_attached_is_counted_and_keeps_it_attached_until_up() {
    let cluster = Cluster::start(stateful()).await.unwrap();
    let c = &cluster;
    let (_, handle, node) = volume_of(c).await;
    let unique = format!("kubernetes.io/csi/{DRIVER}^{handle}");
    let name = va_name(&handle, &node);
    // Asked with the pod still running there (the reboot kills it; its kubelet, down, cannot
    // unmount): a break.
    cordon(c, &node).await;
    c.world().reboot(&node, "t-1");
    let inv = c.invariants();
    assert_eq!(inv.reboots_with_attached_volumes.len(), 1, "{inv:?}");
    assert_eq!(
        inv.reboots_with_attached_volumes[0].volumes,
        vec![unique.clone()]
    );
    assert!(!inv.clean());
    // Down: the volume stays attached while the host is down.
    eventually!(5, "the node to go NotReady", {
        let (_, n) = get(c, &format!("/api/v1/nodes/{node}")).await;
        (!ready(&n)).then_some(())
    });
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let (code, va) = get(c, &va_path(&name)).await;
    assert_eq!(code, 200);
    let (_, n) = get(c, &format!("/api/v1/nodes/{node}")).await;
    assert!(!ready(&n), "rebootTime is 300 ms");
    assert!(va["metadata"]["deletionTimestamp"].is_null(), "{va}");
    let (attached, in_use) = node_status(c, &node).await;
    assert_eq!(attached, vec![unique.clone()]);
    assert_eq!(in_use, vec![unique.clone()]);
    // Up again: unmounted, detached after detachSeconds, and the pod runs elsewhere.
    eventually!(5, "the VolumeAttachment to be gone", {
        let (code, _) = get(c, &va_path(&name)).await;
        (code == 404).then_some(())
    });
    let (_, n) = get(c, &format!("/api/v1/nodes/{node}")).await;
    assert!(ready(&n), "detached while the node was down");
    let (attached, in_use) = node_status(c, &node).await;
    assert!(attached.is_empty() && in_use.is_empty());
    eventually!(5, "the replacement to be Ready", {
        let (_, p) = get(c, POD).await;
        ready(&p).then_some(())
    });
    cluster.shutdown().await;
}

/// `nodeCriticalShare` puts the last Deployments' pods at system-node-critical; all others
/// have priority 0, and Pod admission gives a created pod its class's priority.
#[tokio::test]
async fn node_critical_pods_have_the_system_priority() {
    let sc = Scenario {
        nodes: 2,
        pods_per_node: 2,
        replicas: 2,
        node_critical_share: 0.5,
        ..tiny()
    };
    let cluster = Cluster::start(sc).await.unwrap();
    let c = &cluster;
    let (_, pods) = get(c, "/api/v1/pods").await;
    let mut priorities: Vec<(String, i64)> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["metadata"]["labels"]["app"].as_str().unwrap().to_string(),
                p["spec"]["priority"].as_i64().unwrap(),
            )
        })
        .collect();
    priorities.sort();
    assert_eq!(
        priorities,
        vec![
            ("app-0".to_string(), 0),
            ("app-0".to_string(), 0),
            ("app-1".to_string(), 2_000_001_000),
            ("app-1".to_string(), 2_000_001_000),
        ]
    );
    let (code, p) = call(
        c,
        Method::POST,
        "/api/v1/namespaces/default/pods",
        r#"{"metadata":{"name":"crit"},"spec":{"priorityClassName":"system-node-critical","containers":[{"name":"a","image":"x:1"}]}}"#,
    )
    .await;
    assert_eq!(code, 201, "{p}");
    assert_eq!(p["spec"]["priority"], 2_000_001_000);
    cluster.shutdown().await;
}

/// A Node registered again while one of its volumes detaches (its object deleted and created
/// with the status it had, the volume in `volumesAttached` and `volumesInUse`): its kubelet
/// reports in use only what its pods use, and once detached the controller's status leaves it
/// out, as kube-controller-manager's status updater writes what it knows attached. (Found by
/// the chaos campaign, seeds 6 and 86: a drain waited for a volume the Node listed forever.)
#[tokio::test]
async fn a_node_registered_again_during_a_detach_ends_without_the_volume() {
    let cluster = Cluster::start(stateful()).await.unwrap();
    let c = &cluster;
    let (_, handle, node) = volume_of(c).await;
    let unique = format!("kubernetes.io/csi/{DRIVER}^{handle}");
    let name = va_name(&handle, &node);
    let (_, before) = get(c, &format!("/api/v1/nodes/{node}")).await;
    cordon(c, &node).await;
    let (code, _) = call(c, Method::DELETE, POD, "").await;
    assert_eq!(code, 200);
    eventually!(5, "the detach to begin", {
        let (code, va) = get(c, &va_path(&name)).await;
        (code == 200 && !va["metadata"]["deletionTimestamp"].is_null()).then_some(())
    });
    // The Node goes and comes back with the status it had: the volume listed as attached.
    let path = format!("/api/v1/nodes/{node}");
    let (code, _) = call(c, Method::DELETE, &path, "").await;
    assert_eq!(code, 200);
    let mut again = before.clone();
    for k in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "managedFields",
    ] {
        again["metadata"].as_object_mut().unwrap().remove(k);
    }
    let (code, created) = call(c, Method::POST, "/api/v1/nodes", &again.to_string()).await;
    assert_eq!(code, 201, "{created}");
    eventually!(5, "the VolumeAttachment to go", {
        let (code, _) = get(c, &va_path(&name)).await;
        (code == 404).then_some(())
    });
    eventually!(
        2,
        "the Node's volumesAttached and volumesInUse without it",
        {
            let (attached, in_use) = node_status(c, &node).await;
            (!attached.contains(&unique) && !in_use.contains(&unique)).then_some(())
        }
    );
    // Created again once more with that old status, the detach long over: neither list keeps it.
    let (code, _) = call(c, Method::DELETE, &path, "").await;
    assert_eq!(code, 200);
    let (code, created) = call(c, Method::POST, "/api/v1/nodes", &again.to_string()).await;
    assert_eq!(code, 201, "{created}");
    eventually!(2, "the Node created again without the detached volume", {
        let (attached, in_use) = node_status(c, &node).await;
        (!attached.contains(&unique) && !in_use.contains(&unique)).then_some(())
    });
}

/// The world's claims and volumes carry the protection finalizers, as kube-controller-manager
/// keeps them: a claim deleted under its pod waits until the pod is gone, then its volume,
/// Released, is deleted by the world's provisioner and goes once no longer Bound
/// (tests/golden/219-227 show the same with a hand-made pair).
#[tokio::test]
async fn a_claim_deleted_under_its_pod_waits_for_it_then_its_provisioned_volume_goes() {
    let cluster = Cluster::start(stateful()).await.unwrap();
    let c = &cluster;
    let (pv, _, _) = volume_of(c).await;
    let claim = "/api/v1/namespaces/apps-0/persistentvolumeclaims/data-db-0-0";
    let pv_path = format!("/api/v1/persistentvolumes/{pv}");
    let (_, v) = get(c, claim).await;
    assert_eq!(
        v["metadata"]["finalizers"],
        json!(["kubernetes.io/pvc-protection"])
    );
    let (_, v) = get(c, &pv_path).await;
    assert_eq!(
        v["metadata"]["finalizers"],
        json!(["kubernetes.io/pv-protection"])
    );
    // No StatefulSet to make the pod again once it is deleted.
    let (code, _) = call(
        c,
        Method::DELETE,
        "/apis/apps/v1/namespaces/apps-0/statefulsets/db-0",
        "",
    )
    .await;
    assert_eq!(code, 200);
    let (code, v) = call(c, Method::DELETE, claim, "").await;
    assert_eq!(code, 200, "{v}");
    assert!(!v["metadata"]["deletionTimestamp"].is_null(), "{v}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (code, v) = get(c, claim).await;
    assert_eq!(code, 200, "deleted while its pod mounts it: {v}");
    assert_eq!(v["status"]["phase"], "Bound");
    let (code, _) = call(c, Method::DELETE, POD, r#"{"gracePeriodSeconds":0}"#).await;
    assert_eq!(code, 200);
    eventually!(5, "the claim to go", {
        let (code, _) = get(c, claim).await;
        (code == 404).then_some(())
    });
    eventually!(5, "its volume to go", {
        let (code, _) = get(c, &pv_path).await;
        (code == 404).then_some(())
    });
    cluster.shutdown().await;
}

/// A volume made by hand for a claim of no class binds to it as kube-controller-manager binds
/// an available volume that fits: the smallest one, marked bound by the controller on both.
#[tokio::test]
async fn a_claim_without_a_volume_binds_to_the_smallest_available_one_that_fits() {
    let cluster = Cluster::start(tiny()).await.unwrap();
    let c = &cluster;
    for (name, size) in [
        ("pv-big", "10Gi"),
        ("pv-fits", "2Gi"),
        ("pv-small", "512Mi"),
    ] {
        let body = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "csi": {"driver": "x.csi.example.com", "volumeHandle": name}}});
        let (code, v) = call(
            c,
            Method::POST,
            "/api/v1/persistentvolumes",
            &body.to_string(),
        )
        .await;
        assert_eq!(code, 201, "{v}");
    }
    eventually!(5, "the volumes to be Available", {
        let (_, l) = get(c, "/api/v1/persistentvolumes").await;
        l["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["status"]["phase"] == "Available")
            .then_some(())
    });
    let body = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}}}});
    let path = "/api/v1/namespaces/default/persistentvolumeclaims";
    let (code, v) = call(c, Method::POST, path, &body.to_string()).await;
    assert_eq!(code, 201, "{v}");
    let claim = eventually!(5, "the claim to be Bound", {
        let (_, v) = get(c, &format!("{path}/data")).await;
        (v["status"]["phase"] == "Bound").then_some(v)
    });
    assert_eq!(claim["spec"]["volumeName"], "pv-fits");
    assert_eq!(claim["status"]["capacity"], json!({"storage": "2Gi"}));
    assert_eq!(
        claim["metadata"]["annotations"],
        json!({"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"})
    );
    let (_, pv) = get(c, "/api/v1/persistentvolumes/pv-fits").await;
    assert_eq!(pv["status"]["phase"], "Bound");
    assert_eq!(pv["spec"]["claimRef"]["uid"], claim["metadata"]["uid"]);
    assert_eq!(
        pv["metadata"]["annotations"],
        json!({"pv.kubernetes.io/bound-by-controller": "yes"})
    );
    let (_, other) = get(c, "/api/v1/persistentvolumes/pv-big").await;
    assert_eq!(other["status"]["phase"], "Available");
    cluster.shutdown().await;
}
