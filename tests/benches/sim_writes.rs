//! What the simulated world spends on its most frequent writes, made whole (the object parsed,
//! changed and serialized and indexed again) against spliced into the stored bytes
//! (`Prepared::with_status`, `Prepared::with_deletion_grace`): a ReplicaSet's status refresh,
//! the kubelet's start of a pod and a pod's last state. The objects have the shapes the world
//! writes (a pod as `sim::world` builds it, a ReplicaSet with its pod template).
//!
//! `cargo bench --bench sim_writes`.

use criterion::{criterion_group, criterion_main, Criterion};
use rollboot_sim::sim::kinds::Kind;
use rollboot_sim::sim::store::{Entry, Prepared, Store};
use serde_json::{json, Value};
use std::hint::black_box;

const NOW: &str = "2026-11-28T07:00:00Z";

fn conditions(ready: &str) -> Value {
    json!(["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
        .iter()
        .map(|t| json!({"type": t, "status": if *t == "Ready" || *t == "ContainersReady" { ready } else { "True" },
                        "lastProbeTime": null, "lastTransitionTime": NOW}))
        .collect::<Vec<_>>())
}

fn pod_spec() -> Value {
    json!({"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent"}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default", "schedulerName": "default-scheduler", "priority": 0,
        "enableServiceLinks": true, "nodeName": "node-0042",
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]})
}

fn pod(status: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app-17-x7k2p", "namespace": "apps-3", "uid": "0b6c1a8e-2f4d-4c3e-9a51-7d2e8f6b1c04",
            "creationTimestamp": NOW, "generation": 1,
            "labels": {"app": "app-17", "pod-template-hash": "5d8f7c9b6", "topology.kubernetes.io/zone": "zone-2",
                       "kubernetes.io/hostname": "node-0042"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app-17",
                "uid": "4e1f2a3b-5c6d-4e7f-8a9b-0c1d2e3f4a5b", "controller": true, "blockOwnerDeletion": true}]},
        "spec": pod_spec(), "status": status})
}

fn running() -> Value {
    json!({"phase": "Running", "qosClass": "BestEffort", "startTime": NOW, "hostIP": "10.0.0.1",
        "podIP": "10.244.0.1", "conditions": conditions("True"),
        "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0,
            "image": "registry.k8s.io/pause:3.10", "imageID": "", "started": true,
            "state": {"running": {"startedAt": NOW}}}]})
}

fn replica_set() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "app-17", "namespace": "apps-3", "uid": "4e1f2a3b-5c6d-4e7f-8a9b-0c1d2e3f4a5b",
            "creationTimestamp": NOW, "generation": 1, "labels": {"app": "app-17"}},
        "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "app-17"}},
            "template": {"metadata": {"labels": {"app": "app-17", "pod-template-hash": "5d8f7c9b6"}},
                         "spec": pod_spec()}},
        "status": {"replicas": 5, "fullyLabeledReplicas": 5, "readyReplicas": 4,
                   "availableReplicas": 4, "observedGeneration": 1}})
}

fn stored(kind: Kind, v: Value) -> Entry {
    Store::new(16).lock().put(kind, v)
}

fn bench(c: &mut Criterion) {
    let rs = stored(Kind::ReplicaSet, replica_set());
    let counts = |status: &mut Value| {
        status["readyReplicas"] = json!(5);
        status["availableReplicas"] = json!(5);
    };
    let mut g = c.benchmark_group("replicaset status refresh");
    g.bench_function("whole", |b| {
        b.iter(|| {
            let mut v = rs.value();
            counts(&mut v["status"]);
            black_box(Prepared::new(Kind::ReplicaSet, v))
        })
    });
    g.bench_function("spliced", |b| {
        b.iter(|| {
            let mut status = rs.status();
            counts(&mut status);
            black_box(Prepared::with_status(Kind::ReplicaSet, &rs, status))
        })
    });
    g.finish();

    let pending = stored(
        Kind::Pod,
        pod(json!({"phase": "Pending", "qosClass": "BestEffort",
                   "conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": NOW}]})),
    );
    let mut g = c.benchmark_group("pod start");
    g.bench_function("whole", |b| {
        b.iter(|| {
            let mut v = pending.value();
            v["status"] = running();
            black_box(Prepared::new(Kind::Pod, v))
        })
    });
    g.bench_function("spliced", |b| {
        b.iter(|| black_box(Prepared::with_status(Kind::Pod, &pending, running())))
    });
    g.finish();

    let mut deleting = pod(running());
    deleting["metadata"]["deletionTimestamp"] = json!(NOW);
    deleting["metadata"]["deletionGracePeriodSeconds"] = json!(30);
    let deleting = stored(Kind::Pod, deleting);
    let mut g = c.benchmark_group("pod last state");
    g.bench_function("whole", |b| {
        b.iter(|| {
            let mut v = deleting.value();
            v["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            black_box(Prepared::new(Kind::Pod, v))
        })
    });
    g.bench_function("spliced", |b| {
        b.iter(|| black_box(Prepared::with_deletion_grace(Kind::Pod, &deleting, 0)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
