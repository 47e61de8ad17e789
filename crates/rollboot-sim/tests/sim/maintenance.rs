//! The other actors that take nodes out, as the simulator serves and plays them: the
//! NodeMaintenance custom resource (an unknown group until its CRD is installed, then served
//! as kube-apiserver serves a CRD's objects), the simulated node-maintenance-operator and
//! autoscaler, the invariant watch's nodes out (planned starts over capacity, starts under
//! another actor's maintenance), and the nodes/status strategic merge patch of conditions.

use crate::common;

use std::time::{Duration, Instant};

use axum::http::Method;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DynamicObject, WatchEvent, WatchParams};
use kube::core::GroupVersionKind;
use rollboot_sim::sim::invariants::Capacity;
use rollboot_sim::sim::scenario::{Autoscaler, NodeMaintenance};
use rollboot_sim::sim::{Cluster, Scenario};
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

const NMS: &str = "/apis/nodemaintenance.medik8s.io/v1beta1/nodemaintenances";

fn golden(n: u32) -> (u16, Value) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
    let prefix = format!("{n:02}-");
    let path = std::fs::read_dir(dir)
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
    let g: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    (
        g["response"]["status"].as_u64().unwrap() as u16,
        g["response"]["body"].clone(),
    )
}

async fn call(c: &Cluster, method: Method, path: &str, ct: &str, body: &str) -> (u16, Value) {
    let (code, text) = common::http(c.addr(), "test", method, path, ct, body).await;
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get(c: &Cluster, path: &str) -> (u16, Value) {
    call(c, Method::GET, path, "", "").await
}

async fn post(c: &Cluster, path: &str, body: &Value) -> (u16, Value) {
    call(c, Method::POST, path, "application/json", &body.to_string()).await
}

async fn merge(c: &Cluster, path: &str, body: &Value) -> (u16, Value) {
    let ct = "application/merge-patch+json";
    call(c, Method::PATCH, path, ct, &body.to_string()).await
}

async fn strategic(c: &Cluster, path: &str, body: &Value) -> (u16, Value) {
    let ct = "application/strategic-merge-patch+json";
    call(c, Method::PATCH, path, ct, &body.to_string()).await
}

async fn node(c: &Cluster, n: &str) -> Value {
    let (code, v) = get(c, &format!("/api/v1/nodes/{n}")).await;
    assert_eq!(code, 200, "{v}");
    v
}

fn nm(name: &str, node: &str) -> Value {
    json!({"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
        "metadata": {"name": name}, "spec": {"nodeName": node, "reason": "test"}})
}

fn taint_keys(n: &Value) -> Vec<String> {
    n["spec"]["taints"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| t["key"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn installed(operator: bool) -> Option<NodeMaintenance> {
    Some(NodeMaintenance {
        installed: true,
        operator,
    })
}

#[tokio::test]
async fn node_maintenance_is_an_unknown_group_until_its_crd_is_installed() {
    let c = Cluster::start(Scenario::nodes_only(2)).await.unwrap();
    // Not installed: kube-apiserver's plain-text 404 of a group it does not serve (87), for
    // the list, an object, its version's discovery, and a write.
    let unknown = golden(87);
    for path in [
        NMS.to_string(),
        format!("{NMS}/m"),
        "/apis/nodemaintenance.medik8s.io/v1beta1".to_string(),
    ] {
        assert_eq!(get(&c, &path).await, unknown, "{path}");
    }
    assert_eq!(post(&c, NMS, &nm("m", "node-0000")).await, unknown);
    let (_, apis) = get(&c, "/apis").await;
    let groups = |apis: &Value| -> Vec<String> {
        apis["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(!groups(&apis).contains(&"nodemaintenance.medik8s.io".to_string()));

    c.install_node_maintenance(true);
    let (_, apis) = get(&c, "/apis").await;
    assert!(groups(&apis).contains(&"nodemaintenance.medik8s.io".to_string()));
    let (code, list) = get(&c, "/apis/nodemaintenance.medik8s.io/v1beta1").await;
    assert_eq!(code, 200);
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nodemaintenances", "nodemaintenances/status"]);
    assert_eq!(list["resources"][0]["namespaced"], false);
    let (code, list) = get(&c, NMS).await;
    assert_eq!(
        (code, list["kind"].clone()),
        (200, json!("NodeMaintenanceList"))
    );
    assert_eq!(list["apiVersion"], "nodemaintenance.medik8s.io/v1beta1");
    // Cluster-scoped: under a namespace it is an unknown resource of a served group (89).
    let (code, body) = get(
        &c,
        "/apis/nodemaintenance.medik8s.io/v1beta1/namespaces/default/nodemaintenances",
    )
    .await;
    assert_eq!((code, body), golden(89));

    c.install_node_maintenance(false);
    assert_eq!(get(&c, NMS).await, unknown);
    c.shutdown().await;
}

#[tokio::test]
async fn a_node_maintenance_is_written_read_watched_and_deleted_as_a_custom_resource() {
    let c = Cluster::start(Scenario {
        node_maintenance: installed(false),
        ..Scenario::nodes_only(2)
    })
    .await
    .unwrap();
    // The schema: spec.nodeName required in a spec, types checked; unknown fields pruned.
    let (code, body) = post(
        &c,
        NMS,
        &json!({"metadata": {"name": "m"}, "spec": {"reason": "x"}}),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "NodeMaintenance.nodemaintenance.medik8s.io \"m\" is invalid: spec.nodeName: Required value"
    );
    assert_eq!(body["details"]["causes"][0]["field"], "spec.nodeName");
    let (code, body) = post(
        &c,
        NMS,
        &json!({"metadata": {"name": "m"}, "spec": {"nodeName": 7}}),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["details"]["causes"][0]["message"],
        "Invalid value: \"integer\": spec.nodeName in body must be of type string: \"integer\""
    );
    let mut with_extra = nm("m", "node-0000");
    with_extra["spec"]["colour"] = json!("red");
    with_extra["metadata"]["namespace"] = json!("default");
    let (code, made) = post(&c, NMS, &with_extra).await;
    assert_eq!(code, 201, "{made}");
    assert_eq!(
        made["spec"],
        json!({"nodeName": "node-0000", "reason": "test", "evictionTimeout": "30s"})
    );
    assert_eq!(made["metadata"]["generation"], 1);
    assert_eq!(made["metadata"].get("namespace"), None);
    let (code, read) = get(&c, &format!("{NMS}/m")).await;
    assert_eq!((code, &read), (200, &made));

    // A watch sees the status subresource's write; the main resource keeps the status and
    // the status subresource keeps the spec.
    let client = c.kube_client().await.unwrap();
    let gvk = GroupVersionKind::gvk("nodemaintenance.medik8s.io", "v1beta1", "NodeMaintenance");
    let api: Api<DynamicObject> = Api::all_with(
        client,
        &ApiResource::from_gvk_with_plural(&gvk, "nodemaintenances"),
    );
    let rv = read["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut events = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    let (code, body) = merge(
        &c,
        &format!("{NMS}/m/status"),
        &json!({"status": {"phase": "Running"}, "spec": {"nodeName": "node-0001"}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (
            body["status"]["phase"].clone(),
            body["spec"]["nodeName"].clone()
        ),
        (json!("Running"), json!("node-0000"))
    );
    let (code, body) = merge(
        &c,
        &format!("{NMS}/m"),
        &json!({"status": {"phase": "Succeeded"}, "spec": {"reason": "y"}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (
            body["status"]["phase"].clone(),
            body["spec"]["reason"].clone()
        ),
        (json!("Running"), json!("y"))
    );
    assert_eq!(body["metadata"]["generation"], 2, "a spec change bumps it");
    let (code, body) = merge(
        &c,
        &format!("{NMS}/m/status"),
        &json!({"status": {"totalpods": "many"}}),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let first = tokio::time::timeout(Duration::from_secs(5), events.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match first {
        WatchEvent::Modified(o) => assert_eq!(o.data["status"]["phase"], "Running"),
        e => panic!("{e:?}"),
    }
    // No strategic merge patch for a custom resource: the types its handler takes.
    let (code, body) = strategic(&c, &format!("{NMS}/m"), &json!({"spec": {"reason": "z"}})).await;
    assert_eq!(code, 415);
    assert_eq!(
        body["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    let (code, body) = call(&c, Method::DELETE, &format!("{NMS}/m"), "", "").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"], "Success");
    assert_eq!(body["details"]["kind"], "nodemaintenances");
    assert_eq!(body["details"]["group"], "nodemaintenance.medik8s.io");
    let (code, body) = get(&c, &format!("{NMS}/m")).await;
    assert_eq!(code, 404);
    assert_eq!(
        body["message"],
        "nodemaintenances.nodemaintenance.medik8s.io \"m\" not found"
    );
    c.shutdown().await;
}

/// A world of 3 nodes whose pods start fast, with the operator on.
fn with_operator() -> Scenario {
    Scenario {
        node_maintenance: installed(true),
        time_factor: 0.01,
        ..common::small_and_slow()
    }
}

#[tokio::test]
async fn the_operator_drains_a_node_maintenances_node_and_lets_it_go_once_deleted() {
    let c = Cluster::start(with_operator()).await.unwrap();
    let (code, body) = post(&c, NMS, &nm("m", "node-0001")).await;
    assert_eq!(code, 201, "{body}");
    eventually!(10, "the operator's cordon and taint", {
        let n = node(&c, "node-0001").await;
        (n["spec"]["unschedulable"] == true && taint_keys(&n).contains(&"medik8s.io/drain".into()))
            .then_some(())
    });
    eventually!(20, "Succeeded with the node drained", {
        let (_, m) = get(&c, &format!("{NMS}/m")).await;
        (m["status"]["phase"] == "Succeeded").then_some(m)
    });
    let (_, pods) = get(&c, "/api/v1/pods?fieldSelector=spec.nodeName=node-0001").await;
    let left: Vec<&Value> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["ownerReferences"][0]["kind"] != "DaemonSet")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(
        c.invariants().pdb_violations.is_empty(),
        "evictions keep the budgets: {:?}",
        c.invariants().pdb_violations
    );
    call(&c, Method::DELETE, &format!("{NMS}/m"), "", "").await;
    eventually!(10, "the taint off and the node uncordoned", {
        let n = node(&c, "node-0001").await;
        (n["spec"]["unschedulable"] != true && !taint_keys(&n).contains(&"medik8s.io/drain".into()))
            .then_some(())
    });
    // No such node: Failed.
    post(&c, NMS, &nm("ghost", "node-0099")).await;
    eventually!(10, "Failed for a node that does not exist", {
        let (_, m) = get(&c, &format!("{NMS}/ghost")).await;
        (m["status"]["phase"] == "Failed").then_some(())
    });
    c.shutdown().await;
}

#[tokio::test]
async fn the_autoscaler_deletes_a_cordoned_empty_unprotected_node_and_no_other() {
    let c = Cluster::start(Scenario {
        daemon_sets: 1,
        autoscaler: Some(Autoscaler {
            scale_down_empty_after: 5.0,
        }),
        ..Scenario::nodes_only(4)
    })
    .await
    .unwrap();
    let client = c.kube_client().await.unwrap();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
    let (_, n0) = get(&c, "/api/v1/nodes/node-0000").await;
    let rv = n0["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut events = nodes
        .watch(
            &WatchParams::default()
                .fields("metadata.name=node-0000")
                .timeout(20),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    let cordon =
        |ann: Value| json!({"metadata": {"annotations": ann}, "spec": {"unschedulable": true}});
    merge(&c, "/api/v1/nodes/node-0000", &cordon(json!({}))).await;
    merge(
        &c,
        "/api/v1/nodes/node-0001",
        &cordon(json!({"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"})),
    )
    .await;
    merge(
        &c,
        "/api/v1/nodes/node-0002",
        &cordon(json!({"karpenter.sh/do-not-disrupt": "true"})),
    )
    .await;
    // Tainted first (its value the unix seconds), then deleted.
    let mut tainted = false;
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(20), events.try_next())
            .await
            .expect("the node's events")
            .unwrap()
            .expect("a watch event");
        match ev {
            WatchEvent::Modified(n) => {
                let t = n.spec.and_then(|s| s.taints).unwrap_or_default();
                if let Some(t) = t.iter().find(|t| t.key == "ToBeDeletedByClusterAutoscaler") {
                    assert_eq!(t.effect, "NoSchedule");
                    assert!(t.value.as_deref().unwrap().parse::<i64>().unwrap() > 1_700_000_000);
                    tainted = true;
                }
            }
            WatchEvent::Deleted(_) => break,
            _ => {}
        }
    }
    assert!(tainted, "tainted before its deletion");
    assert_eq!(
        c.world().gone_hosts().into_iter().collect::<Vec<_>>(),
        ["node-0000"]
    );
    // Gone for good: its DaemonSet pod with it, and no Node of that name comes back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(get(&c, "/api/v1/nodes/node-0000").await.0, 404);
    let (_, pods) = get(&c, "/api/v1/pods?fieldSelector=spec.nodeName=node-0000").await;
    assert_eq!(pods["items"], json!([]));
    // Protected by either annotation, or not cordoned: kept, never tainted.
    for n in ["node-0001", "node-0002", "node-0003"] {
        let v = node(&c, n).await;
        assert!(
            taint_keys(&v)
                .iter()
                .all(|k| k != "ToBeDeletedByClusterAutoscaler"),
            "{n}"
        );
    }
    c.shutdown().await;
}

/// What rollboot writes when it cordons `node` for a cycle (for its host's shutdown when
/// `shutdown`), and when it lets it go.
fn rollboot_cordon(shutdown: bool) -> Value {
    let mut ann =
        json!({"rollboot.dev/cordoned-by": "controller-0", "rollboot.dev/state": "cordoning"});
    if shutdown {
        ann["rollboot.dev/cycle-for"] = json!("shutdown");
    }
    json!({"metadata": {"annotations": ann}, "spec": {"unschedulable": true}})
}

fn rollboot_uncordon() -> Value {
    json!({"metadata": {"annotations": {"rollboot.dev/cordoned-by": null, "rollboot.dev/state": "done"}},
        "spec": {"unschedulable": null}})
}

fn shutdown_requested() -> Value {
    json!({"metadata": {"annotations": {"rollboot.dev/shutdown-requested": "2026-01-01T00:00:00.000Z"}}})
}

async fn settle() {
    // Past the invariant watch's allowance for what rollboot cannot have seen yet.
    tokio::time::sleep(rollboot_sim::sim::invariants::SEEN_AFTER + Duration::from_millis(300))
        .await;
}

async fn patched(c: &Cluster, n: &str, p: &Value) {
    let (code, body) = merge(c, &format!("/api/v1/nodes/{n}"), p).await;
    assert_eq!(code, 200, "{body}");
    // The watch reads the change stream: let it see this write.
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[tokio::test]
async fn a_planned_start_with_the_nodes_out_at_the_limit_is_counted_a_shutdown_counting_once_seen()
{
    let c = Cluster::start(Scenario::nodes_only(5)).await.unwrap();
    c.watch_capacity(Capacity {
        max_nodes: 1,
        ..Default::default()
    });
    // A shutdown arrives with room; rollboot starts a node a moment after: it could not know,
    // and for it the shutdown arrived with the limit reached (recorded, no break).
    patched(&c, "node-0004", &shutdown_requested()).await;
    assert!(c.invariants().over_capacity_by_shutdown.is_empty(), "room");
    patched(&c, "node-0000", &rollboot_cordon(false)).await;
    let inv = c.invariants();
    assert_eq!(inv.planned_starts_over_capacity, 0, "{inv:?}");
    let s = &inv.over_capacity_by_shutdown;
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0].node, "node-0004");
    assert_eq!(s[0].nodes_out, ["node-0000 (rollboot)"]);
    // Once seen, the shutdown holds the slot: a start then is over capacity (with node-0000
    // let go first, the shutdown alone fills maxNodes 1).
    patched(&c, "node-0000", &rollboot_uncordon()).await;
    settle().await;
    patched(&c, "node-0001", &rollboot_cordon(false)).await;
    let inv = c.invariants();
    assert_eq!(inv.planned_starts_over_capacity, 1, "{inv:?}");
    let o = &inv.planned_starts_over_capacity_instances[0];
    assert_eq!(
        (o.node.as_str(), o.limit.as_str()),
        ("node-0001", "maxNodes 1")
    );
    assert_eq!(o.nodes_out, ["node-0004 (shutdown)"]);
    assert!(!inv.clean());
    // rollboot's cordon of the shutting-down host itself is no planned start.
    patched(&c, "node-0004", &rollboot_cordon(true)).await;
    assert_eq!(c.invariants().planned_starts_over_capacity, 1);
    // A shutdown arriving while the limit is reached takes the nodes out past it: recorded,
    // not a break.
    patched(&c, "node-0002", &shutdown_requested()).await;
    let inv = c.invariants();
    assert_eq!(inv.planned_starts_over_capacity, 1);
    let s = &inv.over_capacity_by_shutdown;
    assert_eq!(s.len(), 2, "{s:?}");
    assert_eq!(s[1].node, "node-0002");
    assert_eq!(
        s[1].nodes_out,
        ["node-0001 (rollboot)", "node-0004 (rollboot; shutdown)"]
    );
    c.shutdown().await;
}

#[tokio::test]
async fn per_group_limits_and_count_cordoned_add_to_the_nodes_out() {
    let c = Cluster::start(Scenario {
        zones: 2,
        ..Scenario::nodes_only(4)
    })
    .await
    .unwrap();
    // zone-a: node-0000, node-0002; zone-b: node-0001, node-0003.
    c.watch_capacity(Capacity {
        max_nodes: 3,
        per_group: Some(("topology.kubernetes.io/zone".into(), 1)),
        count_cordoned: true,
        lock: None,
    });
    // An operator's cordon counts under countCordoned, once seen.
    patched(&c, "node-0000", &json!({"spec": {"unschedulable": true}})).await;
    settle().await;
    patched(&c, "node-0001", &rollboot_cordon(false)).await;
    assert_eq!(
        c.invariants().planned_starts_over_capacity,
        0,
        "another group"
    );
    patched(&c, "node-0002", &rollboot_cordon(false)).await;
    let inv = c.invariants();
    assert_eq!(inv.planned_starts_over_capacity, 1, "{inv:?}");
    let o = &inv.planned_starts_over_capacity_instances[0];
    assert_eq!(o.limit, "maxNodesPerGroup 1 in zone-a");
    assert_eq!(o.group.as_deref(), Some("zone-a"));
    assert_eq!(o.nodes_out, ["node-0000 (cordoned)"]);
    c.shutdown().await;
}

#[tokio::test]
async fn rollboot_cordoning_a_node_another_actor_is_taking_out_is_a_break() {
    let c = Cluster::start(Scenario {
        node_maintenance: installed(false),
        ..Scenario::nodes_only(4)
    })
    .await
    .unwrap();
    c.watch_capacity(Capacity {
        max_nodes: 4,
        ..Default::default()
    });
    // Karpenter's taint; a NodeMaintenance not Succeeded; a maintenance condition of someone
    // else's; one rollboot says is its own (no signal).
    patched(
        &c,
        "node-0000",
        &json!({"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}}),
    )
    .await;
    post(&c, NMS, &nm("other", "node-0001")).await;
    let condition = |t: &str| {
        json!({"status": {"conditions": [{"type": t, "status": "True", "reason": "R", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]}})
    };
    let (code, body) = strategic(
        &c,
        "/api/v1/nodes/node-0002/status",
        &condition("DrainInProgress"),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    // rollboot's own: its message begins with rollboot's prefix.
    let mut own = condition("MaintenanceInProgress");
    own["status"]["conditions"][0]["message"] = json!("rollboot: rebooting");
    let (code, body) = strategic(&c, "/api/v1/nodes/node-0003/status", &own).await;
    assert_eq!(code, 200, "{body}");
    settle().await;
    for n in ["node-0000", "node-0001", "node-0002", "node-0003"] {
        patched(&c, n, &rollboot_cordon(false)).await;
    }
    let inv = c.invariants();
    let found: Vec<(String, Vec<String>)> = inv
        .starts_under_other_maintenance
        .iter()
        .map(|s| (s.node.clone(), s.signals.clone()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "node-0000".to_string(),
                vec!["karpenter.sh/disrupted".to_string()]
            ),
            (
                "node-0001".to_string(),
                vec!["NodeMaintenance other".to_string()]
            ),
            (
                "node-0002".to_string(),
                vec!["condition:DrainInProgress".to_string()]
            ),
        ]
    );
    assert!(!inv.clean());
    // They counted as out, each for the others' starts: nothing over maxNodes 4.
    assert_eq!(inv.planned_starts_over_capacity, 0);
    c.shutdown().await;
}

#[tokio::test]
async fn nodes_status_strategic_merge_merges_conditions_by_type_and_keeps_the_rest() {
    let c = Cluster::start(Scenario::nodes_only(1)).await.unwrap();
    let path = "/api/v1/nodes/node-0000/status";
    let before = node(&c, "node-0000").await;
    let ready = before["status"]["conditions"][0].clone();
    assert_eq!(ready["type"], "Ready");
    let drain = |status: &str, at: &str| {
        json!({"type": "DrainInProgress", "status": status, "reason": "Draining",
            "message": "rollboot drains the node", "lastTransitionTime": at, "lastHeartbeatTime": at})
    };
    // One condition added; Ready untouched; the times as given; the metadata the write
    // carries is stored with it (nodeStatusStrategy resets the spec only); the spec is not.
    let (code, after) = strategic(
        &c,
        path,
        &json!({"metadata": {"annotations": {"rollboot.dev/conditions": "DrainInProgress"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [drain("True", "2026-01-02T03:04:05Z")]}}),
    )
    .await;
    assert_eq!(code, 200, "{after}");
    assert_eq!(
        after["status"]["conditions"],
        json!([ready, drain("True", "2026-01-02T03:04:05Z")])
    );
    assert_eq!(
        after["metadata"]["annotations"]["rollboot.dev/conditions"],
        "DrainInProgress"
    );
    assert_eq!(after["spec"].get("unschedulable"), None);
    // Updated in place by its type, with `$setElementOrder` as kubectl sends it.
    let (code, after) = strategic(
        &c,
        path,
        &json!({"status": {"$setElementOrder/conditions": [{"type": "Ready"}, {"type": "DrainInProgress"}],
            "conditions": [drain("False", "2026-01-02T03:05:00Z")]}}),
    )
    .await;
    assert_eq!(code, 200, "{after}");
    assert_eq!(
        after["status"]["conditions"],
        json!([ready, drain("False", "2026-01-02T03:05:00Z")])
    );
    // A merge patch of the annotations: the new keys added beside the others, then removed.
    let keys = json!({"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true",
        "karpenter.sh/do-not-disrupt": "true",
        "rollboot.dev/protected": "cluster-autoscaler.kubernetes.io/scale-down-disabled,karpenter.sh/do-not-disrupt"});
    let (code, after) = merge(
        &c,
        "/api/v1/nodes/node-0000",
        &json!({"metadata": {"annotations": keys}, "spec": {"unschedulable": true}}),
    )
    .await;
    assert_eq!(code, 200, "{after}");
    let ann = &after["metadata"]["annotations"];
    assert_eq!(ann["karpenter.sh/do-not-disrupt"], "true");
    assert_eq!(
        ann["cluster-autoscaler.kubernetes.io/scale-down-disabled"],
        "true"
    );
    assert_eq!(ann["rollboot.dev/conditions"], "DrainInProgress");
    let gone: Value = keys
        .as_object()
        .unwrap()
        .keys()
        .map(|k| (k.clone(), Value::Null))
        .collect::<serde_json::Map<_, _>>()
        .into();
    let (code, after) = merge(
        &c,
        "/api/v1/nodes/node-0000",
        &json!({"metadata": {"annotations": gone}, "spec": {"unschedulable": null}}),
    )
    .await;
    assert_eq!(code, 200, "{after}");
    assert_eq!(
        after["metadata"]["annotations"],
        json!({"rollboot.dev/conditions": "DrainInProgress"})
    );
    assert_eq!(after["status"]["conditions"][1]["status"], "False");
    c.shutdown().await;
}
