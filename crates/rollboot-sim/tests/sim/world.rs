//! The simulated world (kubelets, scheduler, ReplicaSet/DaemonSet controllers, disruption
//! controller, reboots, invariant watch) against what a real cluster does. Every test polls the
//! cluster state with a deadline; none asserts how fast the simulator is.

use crate::common;

use std::time::{Duration, Instant};

use axum::http::Method;
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

fn small() -> Scenario {
    Scenario {
        nodes: 3,
        pods_per_node: 2,
        replicas: 3,
        pdb_share: 0.5,
        daemon_sets: 1,
        bare_pods: 0,
        mirror_pods: 0,
        empty_dir_pods: 0,
        time_factor: 0.01,
        ..Scenario::default()
    }
}

/// kube's client retries 429s, which would hide the answer: see `common::http`.
async fn raw(c: &Cluster, method: Method, path: &str, ct: &str, body: &str) -> (u16, String) {
    common::http(c.addr(), "test", method, path, ct, body).await
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

async fn post(c: &Cluster, path: &str, body: &Value) -> (u16, Value) {
    call(c, Method::POST, path, "application/json", &body.to_string()).await
}

async fn delete(c: &Cluster, path: &str, grace: i64) -> (u16, Value) {
    let body = json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace});
    call(
        c,
        Method::DELETE,
        path,
        "application/json",
        &body.to_string(),
    )
    .await
}

fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

fn name(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap().to_string()
}

fn node_of(p: &Value) -> String {
    p["spec"]["nodeName"].as_str().unwrap_or("").to_string()
}

fn owner_kind(p: &Value) -> String {
    p["metadata"]["ownerReferences"][0]["kind"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn pod_path(p: &Value) -> String {
    format!(
        "/api/v1/namespaces/{}/pods/{}",
        p["metadata"]["namespace"].as_str().unwrap(),
        name(p)
    )
}

fn is_ready(o: &Value) -> bool {
    o["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

async fn all_pods(c: &Cluster) -> Vec<Value> {
    let (code, list) = get(c, "/api/v1/pods").await;
    assert_eq!(code, 200);
    items(&list)
}

async fn node(c: &Cluster, n: &str) -> Value {
    let (code, v) = get(c, &format!("/api/v1/nodes/{n}")).await;
    assert_eq!(code, 200);
    v
}

/// Mirrors a real node reboot: the kubelet stops posting Ready (NodeReady=False), the
/// containers of the node's pods die and the ReplicaSet controller replaces the pods elsewhere
/// (DaemonSet pods stay bound to the node and restart there), and the kubelet comes back with
/// the new `status.nodeInfo.bootID` it reads from /proc/sys/kernel/random/boot_id.
#[tokio::test]
async fn simulated_reboot_goes_not_ready_replaces_pods_and_returns_with_a_new_boot_id() {
    let cluster = Cluster::start(Scenario {
        reboot_delay: 5.0,
        reboot_time: 100.0,
        ..small()
    })
    .await
    .unwrap();
    let c = &cluster;
    let target = "node-0000";
    let boot_before = c.world().boot_id(target).expect("a bootID");
    let before = all_pods(c).await;
    let rs_total = before
        .iter()
        .filter(|p| owner_kind(p) == "ReplicaSet")
        .count();
    let doomed: Vec<String> = before
        .iter()
        .filter(|p| node_of(p) == target && owner_kind(p) == "ReplicaSet")
        .map(|p| p["metadata"]["uid"].as_str().unwrap().to_string())
        .collect();
    assert!(!doomed.is_empty(), "the target node runs ReplicaSet pods");

    c.world().reboot(target, "req-1");

    eventually!(10, "the node to go NotReady", {
        let n = node(c, target).await;
        (!is_ready(&n)).then_some(())
    });
    // The node's ReplicaSet pods are gone and replaced by new pods on other, Ready nodes.
    eventually!(10, "the ReplicaSet pods to be replaced elsewhere", {
        let pods = all_pods(c).await;
        let rs: Vec<&Value> = pods
            .iter()
            .filter(|p| owner_kind(p) == "ReplicaSet")
            .collect();
        let old_left = rs
            .iter()
            .any(|p| doomed.iter().any(|u| p["metadata"]["uid"] == *u.as_str()));
        let replaced = rs.len() == rs_total
            && rs
                .iter()
                .all(|p| node_of(p) != target && !node_of(p).is_empty() && is_ready(p));
        (!old_left && replaced).then_some(())
    });
    // The DaemonSet pod stays on the node (not Ready while the node is down).
    let ds_on_node: Vec<Value> = all_pods(c)
        .await
        .into_iter()
        .filter(|p| node_of(p) == target && owner_kind(p) == "DaemonSet")
        .collect();
    assert_eq!(ds_on_node.len(), 1);

    let boot_after = eventually!(10, "the node to be Ready again", {
        let n = node(c, target).await;
        is_ready(&n).then(|| {
            n["status"]["nodeInfo"]["bootID"]
                .as_str()
                .unwrap()
                .to_string()
        })
    });
    assert_ne!(boot_after, boot_before, "a reboot gives a new bootID");
    assert_eq!(c.world().boot_id(target).unwrap(), boot_after);
    eventually!(10, "the DaemonSet pod to run again on the rebooted node", {
        let pods = all_pods(c).await;
        pods.iter()
            .any(|p| node_of(p) == target && owner_kind(p) == "DaemonSet" && is_ready(p))
            .then_some(())
    });
    let inv = c.invariants();
    assert_eq!(inv.reboots, 1);
    assert!(inv.repeated_reboots.is_empty());
    assert!(inv.max_nodes_unavailable >= 1);

    // The same request token twice is a double reboot; a new token is not.
    c.world().reboot(target, "req-1");
    c.world().reboot(target, "req-2");
    let inv = c.invariants();
    assert_eq!(inv.reboots, 3);
    assert_eq!(
        inv.repeated_reboots,
        vec![(target.to_string(), "req-1".to_string())]
    );
    assert!(!inv.clean());
    cluster.shutdown().await;
}

/// Mirrors the scheduler's NodeUnschedulable filter (a cordoned node, `spec.unschedulable`,
/// gets no new pods) and the DaemonSet controller, which keeps one pod per node and tolerates
/// `node.kubernetes.io/unschedulable:NoSchedule`.
#[tokio::test]
async fn replacements_avoid_cordoned_nodes_and_daemonsets_keep_one_pod_per_node() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    for n in ["node-0001", "node-0002"] {
        let (code, v) = call(
            c,
            Method::PATCH,
            &format!("/api/v1/nodes/{n}"),
            "application/strategic-merge-patch+json",
            r#"{"spec":{"unschedulable":true}}"#,
        )
        .await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["spec"]["unschedulable"], true);
    }
    let before = all_pods(c).await;
    let rs_total = before
        .iter()
        .filter(|p| owner_kind(p) == "ReplicaSet")
        .count();
    for p in before
        .iter()
        .filter(|p| owner_kind(p) == "ReplicaSet" && node_of(p) != "node-0000")
    {
        let (code, _) = delete(c, &pod_path(p), 0).await;
        assert_eq!(code, 200);
    }
    eventually!(
        10,
        "all ReplicaSet pods to run on the one schedulable node",
        {
            let pods = all_pods(c).await;
            let rs: Vec<&Value> = pods
                .iter()
                .filter(|p| owner_kind(p) == "ReplicaSet")
                .collect();
            (rs.len() == rs_total && rs.iter().all(|p| node_of(p) == "node-0000" && is_ready(p)))
                .then_some(())
        }
    );

    // A DaemonSet pod deleted on a cordoned node comes back on that node.
    let ds_pod = before
        .iter()
        .find(|p| owner_kind(p) == "DaemonSet" && node_of(p) == "node-0001")
        .unwrap()
        .clone();
    let (code, _) = delete(c, &pod_path(&ds_pod), 0).await;
    assert_eq!(code, 200);
    eventually!(10, "the DaemonSet to run one pod on every node again", {
        let pods = all_pods(c).await;
        let ds: Vec<&Value> = pods
            .iter()
            .filter(|p| owner_kind(p) == "DaemonSet")
            .collect();
        let per_node_ok = ["node-0000", "node-0001", "node-0002"]
            .iter()
            .all(|n| ds.iter().filter(|p| node_of(p) == *n).count() == 1);
        let replaced = ds.iter().any(|p| {
            node_of(p) == "node-0001" && p["metadata"]["uid"] != ds_pod["metadata"]["uid"]
        });
        (per_node_ok && replaced && ds.iter().all(|p| is_ready(p))).then_some(())
    });
    assert_eq!(c.invariants().max_nodes_unavailable, 2);
    cluster.shutdown().await;
}

/// Mirrors graceful deletion: the API server sets `deletionTimestamp` and
/// `deletionGracePeriodSeconds` and keeps the pod; the kubelet removes it once the grace period
/// has run (here scaled by the world's time factor: 100 s × 0.01 = 1 s).
#[tokio::test]
async fn deleted_pod_terminates_then_disappears_after_its_scaled_grace_period() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    let pods = all_pods(c).await;
    let p = pods
        .iter()
        .find(|p| owner_kind(p) == "ReplicaSet")
        .unwrap()
        .clone();
    let path = pod_path(&p);
    let t0 = Instant::now();
    let (code, body) = delete(c, &path, 100).await;
    assert_eq!(code, 200);
    assert!(body["metadata"]["deletionTimestamp"].is_string(), "{body}");
    let (code, now) = get(c, &path).await;
    assert_eq!(code, 200, "the pod is kept while it terminates");
    assert!(now["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(now["metadata"]["deletionGracePeriodSeconds"], 100);
    eventually!(15, "the kubelet to remove the pod", {
        let (code, _) = get(c, &path).await;
        (code == 404).then_some(())
    });
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "removed after {:?}, before its scaled grace period",
        t0.elapsed()
    );
    cluster.shutdown().await;
}

/// Mirrors the ReplicaSet controller's status: a terminating pod no longer counts in
/// `replicas`, its replacement counts at once but is Ready (and available) only once started.
#[tokio::test]
async fn replicaset_status_follows_its_pods_through_a_deletion_and_a_replacement() {
    let cluster = Cluster::start(Scenario {
        start_delay: 100.0,
        ..small()
    })
    .await
    .unwrap();
    let c = &cluster;
    let p = all_pods(c)
        .await
        .into_iter()
        .find(|p| owner_kind(p) == "ReplicaSet")
        .unwrap();
    let ns = p["metadata"]["namespace"].as_str().unwrap().to_string();
    let rs_name = p["metadata"]["ownerReferences"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let rs_path = format!("/apis/apps/v1/namespaces/{ns}/replicasets/{rs_name}");
    let status = |rs: &Value| {
        let s = &rs["status"];
        (
            s["replicas"].as_i64().unwrap_or(-1),
            s["readyReplicas"].as_i64().unwrap_or(-1),
            s["availableReplicas"].as_i64().unwrap_or(-1),
        )
    };
    let (_, rs) = get(c, &rs_path).await;
    let want = rs["spec"]["replicas"].as_i64().unwrap();
    assert_eq!(status(&rs), (want, want, want), "{rs}");
    let (code, _) = delete(c, &pod_path(&p), 30).await;
    assert_eq!(code, 200);
    // The replacement (start delay 1 s) is created at once: `replicas` is whole again, one short
    // of Ready until it starts.
    eventually!(5, "the terminating pod to leave readyReplicas", {
        let (_, rs) = get(c, &rs_path).await;
        (status(&rs) == (want, want - 1, want - 1)).then_some(())
    });
    eventually!(10, "the replacement to be Ready", {
        let (_, rs) = get(c, &rs_path).await;
        (status(&rs) == (want, want, want)).then_some(())
    });
    cluster.shutdown().await;
}

/// A StatefulSet's pod made again under the name of one that was still waiting to start
/// starts all the same: the kubelet's start is the pod's, not the name's. (The chaos
/// campaign's seed 212: a pod deleted while slow to start came back under its name and stayed
/// Pending for good, and the health gate of two nodes failed on its StatefulSet.)
#[tokio::test]
async fn a_statefulset_pod_made_again_while_its_namesake_waited_to_start_starts() {
    let cluster = Cluster::start(Scenario {
        stateful_sets: 1,
        // 1 s (scaled) from binding to Ready: the second pod is deleted within it.
        start_delay: 100.0,
        ..small()
    })
    .await
    .unwrap();
    let c = &cluster;
    let first = all_pods(c)
        .await
        .into_iter()
        .find(|p| owner_kind(p) == "StatefulSet")
        .expect("a StatefulSet pod");
    let path = pod_path(&first);
    let uid = |p: &Value| p["metadata"]["uid"].as_str().unwrap_or("").to_string();
    // Made again under the same name, once and then once more before it could start.
    let mut gone = vec![uid(&first)];
    for round in 0..2 {
        let (code, _) = delete(c, &path, 0).await;
        assert_eq!(code, 200, "round {round}");
        let next = eventually!(5, "the StatefulSet to make the pod again", {
            let (code, p) = get(c, &path).await;
            (code == 200
                && !gone.contains(&uid(&p))
                && p["metadata"]["deletionTimestamp"].is_null())
            .then_some(p)
        });
        assert!(
            !is_ready(&next),
            "a pod made again starts after its delay: {next}"
        );
        gone.push(uid(&next));
    }
    let last = gone.last().cloned().unwrap();
    eventually!(10, "the last pod to start", {
        let (code, p) = get(c, &path).await;
        (code == 200 && uid(&p) == last && is_ready(&p)).then_some(())
    });
    cluster.shutdown().await;
}

fn pdb(name: &str, spec: Value) -> Value {
    let mut s = spec;
    s["selector"] = json!({"matchLabels": {"app": "pct"}});
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "apps-0"}, "spec": s})
}

/// Mirrors the disruption controller's status arithmetic (kube-controller-manager
/// pkg/controller/disruption/disruption.go, getExpectedPodCount and updatePdbStatus):
/// integer `minAvailable` counts the selected pods as expectedPods; a percentage or
/// `maxUnavailable` uses the controllers' scale; percentages go through
/// `GetScaledValueFromIntOrPercent(..., roundUp=true)`, so `minAvailable: 50%` of 7 desires 4
/// healthy and `maxUnavailable: 50%` of 7 allows 4 unavailable (desired 3), as the Kubernetes
/// docs "Specifying a Disruption Budget for your Application", section "Rounding logic when
/// specifying percentages", describe; `disruptionsAllowed = max(0, currentHealthy -
/// desiredHealthy)`; `observedGeneration` follows `metadata.generation`.
#[tokio::test]
async fn pdb_status_follows_the_disruption_controller_arithmetic() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    let labels = json!({"app": "pct"});
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "pct", "namespace": "apps-0", "labels": labels},
        "spec": {"replicas": 7, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}});
    let (code, v) = post(c, "/apis/apps/v1/namespaces/apps-0/replicasets", &rs).await;
    assert_eq!(code, 201, "{v}");
    eventually!(10, "7 Ready pods of the ReplicaSet", {
        let (_, l) = get(c, "/api/v1/namespaces/apps-0/pods?labelSelector=app%3Dpct").await;
        let ps = items(&l);
        (ps.len() == 7 && ps.iter().all(is_ready)).then_some(())
    });
    // (name, spec, expectedPods, desiredHealthy, disruptionsAllowed)
    let cases = [
        ("min-int", json!({"minAvailable": 5}), 7, 5, 2),
        ("min-int-above", json!({"minAvailable": 9}), 7, 9, 0),
        ("min-pct", json!({"minAvailable": "50%"}), 7, 4, 3),
        ("min-pct-all", json!({"minAvailable": "100%"}), 7, 7, 0),
        ("max-int", json!({"maxUnavailable": 2}), 7, 5, 2),
        ("max-int-above", json!({"maxUnavailable": 10}), 7, 0, 7),
        ("max-pct", json!({"maxUnavailable": "50%"}), 7, 3, 4),
        ("max-pct-small", json!({"maxUnavailable": "10%"}), 7, 6, 1),
        ("max-zero", json!({"maxUnavailable": 0}), 7, 7, 0),
    ];
    for (n, spec, ..) in &cases {
        let (code, v) = post(
            c,
            "/apis/policy/v1/namespaces/apps-0/poddisruptionbudgets",
            &pdb(n, spec.clone()),
        )
        .await;
        assert_eq!(code, 201, "{n}: {v}");
    }
    for (n, _, expected, desired, allowed) in &cases {
        let path = format!("/apis/policy/v1/namespaces/apps-0/poddisruptionbudgets/{n}");
        let s = eventually!(10, format!("the status of {n}"), {
            let (_, v) = get(c, &path).await;
            (v["status"]["observedGeneration"] == 1).then(|| v["status"].clone())
        });
        assert_eq!(s["expectedPods"], *expected, "{n}: {s}");
        assert_eq!(s["desiredHealthy"], *desired, "{n}: {s}");
        assert_eq!(s["currentHealthy"], 7, "{n}: {s}");
        assert_eq!(s["disruptionsAllowed"], *allowed, "{n}: {s}");
    }
    // A spec change bumps generation; the controller catches up observedGeneration.
    let path = "/apis/policy/v1/namespaces/apps-0/poddisruptionbudgets/min-int";
    let (code, v) = call(
        c,
        Method::PATCH,
        path,
        "application/merge-patch+json",
        r#"{"spec":{"minAvailable":6}}"#,
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["metadata"]["generation"], 2);
    let s = eventually!(10, "observedGeneration 2", {
        let (_, v) = get(c, path).await;
        (v["status"]["observedGeneration"] == 2).then(|| v["status"].clone())
    });
    assert_eq!(s["desiredHealthy"], 6);
    assert_eq!(s["disruptionsAllowed"], 1);

    // A bare pod under the same selector: getExpectedScale lists it as unmanaged, so it is
    // left out of a maxUnavailable budget's expectedPods yet counts as healthy; an integer
    // minAvailable counts every selected pod.
    let bare = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "pct-bare", "namespace": "apps-0", "labels": labels},
        "spec": {"nodeName": "node-0000",
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}});
    let (code, v) = post(c, "/api/v1/namespaces/apps-0/pods", &bare).await;
    assert_eq!(code, 201, "{v}");
    let path = "/apis/policy/v1/namespaces/apps-0/poddisruptionbudgets/max-int";
    let s = eventually!(10, "the bare pod to count as healthy", {
        let (_, v) = get(c, path).await;
        (v["status"]["currentHealthy"] == 8).then(|| v["status"].clone())
    });
    assert_eq!(s["expectedPods"], 7, "{s}");
    assert_eq!(s["desiredHealthy"], 5, "{s}");
    assert_eq!(s["disruptionsAllowed"], 3, "{s}");
    let path = "/apis/policy/v1/namespaces/apps-0/poddisruptionbudgets/min-int";
    let (_, v) = get(c, path).await;
    assert_eq!(v["status"]["expectedPods"], 8, "{v}");
    assert_eq!(v["status"]["disruptionsAllowed"], 2, "{v}");
    cluster.shutdown().await;
}

fn eviction(ns: &str, n: &str) -> String {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": n, "namespace": ns}})
        .to_string()
}

async fn budget_pods(c: &Cluster) -> Vec<Value> {
    let (_, l) = get(
        c,
        "/api/v1/namespaces/apps-0/pods?labelSelector=app%3Dapp-0",
    )
    .await;
    items(&l)
}

/// Mirrors the eviction subresource's optimistic concurrency on the budget: each admitted
/// eviction decrements `disruptionsAllowed` (recording the pod in `status.disruptedPods`) in
/// the same write, so of two concurrent evictions under a budget of one, one gets 201 and the
/// other 429 TooManyRequests.
#[tokio::test]
async fn two_concurrent_evictions_cannot_both_pass_a_budget_of_one() {
    // A slow world: evicted pods stay terminating, nothing replaces them during the test.
    let cluster = Cluster::start(Scenario {
        time_factor: 100.0,
        ..small()
    })
    .await
    .unwrap();
    let c = &cluster;
    let (_, b) = get(
        c,
        "/apis/policy/v1/namespaces/apps-0/poddisruptionbudgets/app-0",
    )
    .await;
    assert_eq!(b["status"]["disruptionsAllowed"], 1);
    let pods = budget_pods(c).await;
    let (a, b2) = (name(&pods[0]), name(&pods[1]));
    let pa = format!("/api/v1/namespaces/apps-0/pods/{a}/eviction");
    let pb = format!("/api/v1/namespaces/apps-0/pods/{b2}/eviction");
    let ea = eviction("apps-0", &a);
    let eb = eviction("apps-0", &b2);
    let (ra, rb) = tokio::join!(
        call(c, Method::POST, &pa, "application/json", &ea),
        call(c, Method::POST, &pb, "application/json", &eb),
    );
    let mut codes = [ra.0, rb.0];
    codes.sort();
    assert_eq!(codes, [201, 429], "{} / {}", ra.1, rb.1);
    let refused = if ra.0 == 429 { &ra.1 } else { &rb.1 };
    assert_eq!(refused["reason"], "TooManyRequests");
    let (_, b) = get(
        c,
        "/apis/policy/v1/namespaces/apps-0/poddisruptionbudgets/app-0",
    )
    .await;
    assert_eq!(b["status"]["disruptionsAllowed"], 0);
    // (status.disruptedPods may already be emptied: the disruption controller drops a pod
    // from it once the pod has a deletionTimestamp, golden 46.)
    assert_eq!(b["status"]["currentHealthy"], 2);
    assert!(c.invariants().pdb_violations.is_empty());
    cluster.shutdown().await;
}

/// Mirrors that a plain DELETE bypasses PodDisruptionBudgets in kube-apiserver: the deletion is
/// admitted, and the invariant watch records the violation it causes (cause `delete`), while
/// the admitted eviction before it is not one.
#[tokio::test]
async fn deleting_a_pod_under_an_exhausted_budget_is_recorded_as_a_violation() {
    let cluster = Cluster::start(Scenario {
        time_factor: 100.0,
        ..small()
    })
    .await
    .unwrap();
    let c = &cluster;
    let pods = budget_pods(c).await;
    let first = name(&pods[0]);
    let (code, v) = call(
        c,
        Method::POST,
        &format!("/api/v1/namespaces/apps-0/pods/{first}/eviction"),
        "application/json",
        &eviction("apps-0", &first),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert!(c.invariants().pdb_violations.is_empty());
    let (code, _) = delete(c, &pod_path(&pods[1]), 30).await;
    assert_eq!(code, 200, "DELETE is not subject to the budget");
    let inv = c.invariants();
    assert_eq!(inv.pdb_violations.len(), 1, "{inv:?}");
    let viol = &inv.pdb_violations[0];
    assert_eq!(viol.pdb, "apps-0/app-0");
    assert_eq!(viol.pod, format!("apps-0/{}", name(&pods[1])));
    assert_eq!(viol.cause, "delete");
    assert_eq!((viol.healthy, viol.desired), (1, 2));
    cluster.shutdown().await;
}

/// The taints of kube-controller-manager's node-lifecycle controller, in the order a real one
/// (v1.36.2) wrote them, each a write of its own (the resourceVersion moves each time):
/// `unschedulable:NoSchedule` right after a cordon and off right after the uncordon;
/// `not-ready:NoSchedule`, then `not-ready:NoExecute` once the node is NotReady; when it is
/// Ready again the NoSchedule one goes at once and the NoExecute one on the next monitor pass,
/// seconds later (`taintRemovalDelay`).
#[tokio::test]
async fn the_node_lifecycle_controller_taints_cordoned_and_not_ready_nodes() {
    let cluster = Cluster::start(Scenario {
        reboot_delay: 5.0,
        reboot_time: 100.0,
        taint_removal_delay: 150.0,
        ..small()
    })
    .await
    .unwrap();
    let c = &cluster;
    let target = "node-0001";
    let taints = |n: &Value| -> Vec<(String, String)> {
        n["spec"]["taints"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| {
                        (
                            t["key"].as_str().unwrap().to_string(),
                            t["effect"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let pair = |k: &str, e: &str| (k.to_string(), e.to_string());
    let (code, cordoned) = call(
        c,
        Method::PATCH,
        &format!("/api/v1/nodes/{target}"),
        "application/merge-patch+json",
        r#"{"spec":{"unschedulable":true}}"#,
    )
    .await;
    assert_eq!(code, 200);
    assert!(taints(&cordoned).is_empty(), "the taint is a later write");
    let rv_cordon: u64 = cordoned["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let tainted = eventually!(5, "the unschedulable taint", {
        let n = node(c, target).await;
        (taints(&n) == [pair("node.kubernetes.io/unschedulable", "NoSchedule")]).then_some(n)
    });
    let rv: u64 = tainted["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv > rv_cordon, "the taint moved the resourceVersion");
    assert!(tainted["spec"]["taints"][0]["timeAdded"].is_string());

    c.world().reboot(target, "req-1");
    eventually!(10, "both not-ready taints while NotReady", {
        let n = node(c, target).await;
        let t = taints(&n);
        (!is_ready(&n)
            && t.contains(&pair("node.kubernetes.io/not-ready", "NoSchedule"))
            && t.contains(&pair("node.kubernetes.io/not-ready", "NoExecute")))
        .then_some(())
    });
    // Ready again: the NoExecute taint outlives the NoSchedule one by the monitor period.
    eventually!(10, "Ready with only the NoExecute not-ready taint left", {
        let n = node(c, target).await;
        let t = taints(&n);
        (is_ready(&n)
            && t.contains(&pair("node.kubernetes.io/not-ready", "NoExecute"))
            && !t.contains(&pair("node.kubernetes.io/not-ready", "NoSchedule")))
        .then_some(())
    });
    eventually!(10, "the not-ready taints gone", {
        let n = node(c, target).await;
        (taints(&n) == [pair("node.kubernetes.io/unschedulable", "NoSchedule")]).then_some(())
    });
    // Uncordoned: the unschedulable taint goes too.
    let (code, _) = call(
        c,
        Method::PATCH,
        &format!("/api/v1/nodes/{target}"),
        "application/merge-patch+json",
        r#"{"spec":{"unschedulable":null}}"#,
    )
    .await;
    assert_eq!(code, 200);
    eventually!(5, "no taint left", {
        let n = node(c, target).await;
        taints(&n).is_empty().then_some(())
    });
    assert!(c.invariants().uncordoned_while_not_ready.is_empty());
    cluster.shutdown().await;
}
