//! A drain waits for the volumes of the pods it evicted to leave the node before the reboot
//! (issue 24, `drain.volumes`): played on the simulator, whose attach-detach controller, CSI
//! attacher and kubelets keep VolumeAttachments and the Nodes' `volumesAttached` and
//! `volumesInUse` as the real ones do, with the real controller and agents. With
//! `waitForDetach` (the default) no reboot is asked while such a volume is attached; without it
//! the simulator's invariant breaks, which shows it can; a detach that never ends fails the node
//! at `detachTimeout`, naming the volume. With `waitForReattach`, a node is done only once its
//! moved volume is attached where the pod's replacement runs, and a timeout there only warns.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, PostParams};
use rollboot::drain::volumes::attachment_name;
use rollboot::node::NodeState;
use rollboot_sim::sim::volumes::STORAGE_CLASS;
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};

use rollboot_testkit::log::log;

/// Eight nodes, three StatefulSets of three pods with a ReadWriteOnce volume each, detaches of
/// `detach` simulated seconds, rollboot with `drain` keys added to its drain section; every
/// node flagged.
async fn stateful(detach: f64, drain: &str) -> (Harness, Vec<String>) {
    log();
    let sc = Scenario {
        nodes: 8,
        pods_per_node: 1,
        stateful_sets: 3,
        stateful_volumes: true,
        detach_seconds: detach,
        bare_pods: 0,
        ..Scenario::default()
    };
    let config = sim_config(&format!("drain: {{evictionRetryInterval: 100ms{drain}}}")).unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    let names = h.node_names().await.unwrap();
    h.start_rollout_flagged(&names).await.unwrap();
    (h, names)
}

async fn all_done(h: &Harness, names: &[String]) {
    let flagged: BTreeSet<String> = names.iter().cloned().collect();
    let done = h
        .wait_for(Duration::from_secs(90), |ns| {
            Harness::finished(ns, &flagged)
        })
        .await
        .unwrap();
    assert!(done, "the rollout did not finish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_for_detach_no_reboot_is_asked_while_an_evicted_pods_volume_is_attached() {
    let (h, names) = stateful(300.0, "").await;
    all_done(&h, &names).await;
    let inv = h.cluster.world().invariants();
    assert!(
        inv.reboots_with_attached_volumes.is_empty(),
        "{:?}",
        inv.reboots_with_attached_volumes
    );
    for n in &names {
        assert_eq!(h.reboots(n), 1, "{n}");
    }
    // The nodes that had a StatefulSet pod recorded the wait (300 simulated seconds at the
    // scenario's time factor 0.01: 3 s).
    let mut waited = 0;
    for n in &names {
        let view = h.node(n).await.unwrap();
        if let Some(d) = view.history.last_cycle.and_then(|c| c.detach_seconds) {
            assert!(d >= 2.5, "{n} waited {d}s for its volumes");
            waited += 1;
        }
    }
    assert!(waited > 0, "no node recorded a detach wait");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_wait_for_detach_a_reboot_with_a_volume_attached_breaks_the_invariant() {
    let (h, names) = stateful(300.0, ", volumes: {waitForDetach: false}").await;
    all_done(&h, &names).await;
    let inv = h.cluster.world().invariants();
    assert!(
        !inv.reboots_with_attached_volumes.is_empty(),
        "with waitForDetach false and 3 s detaches, a reboot should have come before one ended"
    );
    // The attach-detach controller writes the Node's status as the pods go, right when the
    // drain asks for the reboot: a request refused with 409 is made again with the drain's
    // record (the health gate's pods, the drain's steps), not by a second drain that finds
    // nothing to evict and hands the gate nothing to wait for.
    for n in &names {
        let cycle = h
            .node(n)
            .await
            .unwrap()
            .history
            .last_cycle
            .unwrap_or_default();
        assert!(
            cycle.pod_exit_seconds.is_some() && !cycle.drain_parts.is_empty(),
            "{n}'s last cycle lost its drain's record: {cycle:?}"
        );
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detach_that_does_not_end_fails_the_node_at_the_timeout_naming_the_volume() {
    // A detach of 10,000 simulated seconds (100 s here) against a timeout of 1 s.
    let (h, names) = stateful(10_000.0, ", volumes: {detachTimeout: 1s}").await;
    let mut failed = None;
    for _ in 0..600 {
        for n in &names {
            let v = h.node(n).await.unwrap();
            if v.state == Some(NodeState::Failed) {
                failed = Some(v);
            }
        }
        if failed.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let v = failed.expect("no node failed within 60 s");
    let reason = v.failure_reason.clone().unwrap_or_default();
    assert!(reason.contains("drain.volumes.detachTimeout"), "{reason}");
    assert!(reason.contains("PersistentVolume pvc-"), "{reason}");
    assert!(reason.contains("VolumeAttachment csi-"), "{reason}");
    assert_eq!(
        h.reboots(&v.name),
        0,
        "{} rebooted although it failed",
        v.name
    );
    h.shutdown().await;
}

/// Three nodes with no workload but one pod `solo` (no controller) on the first, mounting a
/// ReadWriteOnce claim of the simulator's CSI driver; attaches of `attach` simulated seconds.
/// rollboot evicts unreplicated pods and waits for reattach (`reattach` adds to the volumes
/// section). Returns the harness, the nodes, and the claim's PersistentVolume.
async fn solo(attach: f64, reattach: &str) -> (Harness, Vec<String>, String) {
    log();
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 0,
        stateful_sets: 0,
        bare_pods: 0,
        attach_seconds: attach,
        ..Scenario::default()
    };
    let config = sim_config(&format!(
        "drain: {{evictionRetryInterval: 100ms, evictUnreplicated: true, volumes: {{waitForReattach: true{reattach}}}}}"
    ))
    .unwrap();
    let h = Harness::start(sc, config).await.unwrap();
    let names = h.node_names().await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(h.client.clone(), "default");
    claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "solo-data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
                    "resources": {"requests": {"storage": "1Gi"}}},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let mut pv = None;
    for _ in 0..100 {
        pv = claims
            .get("solo-data")
            .await
            .unwrap()
            .spec
            .and_then(|s| s.volume_name);
        if pv.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pv = pv.expect("the claim was not bound");
    create_solo(&h, &names[0]).await;
    (h, names, pv)
}

/// Creates the pod `solo` on `node`, mounting claim `solo-data`.
async fn create_solo(h: &Harness, node: &str) {
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "solo", "labels": {"app": "solo"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x:1"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "solo-data"}}]},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
}

/// Whether the VolumeAttachment of `pv` on `node` says attached.
async fn attached_on(h: &Harness, pv: &str, node: &str) -> bool {
    let pvs: Api<PersistentVolume> = Api::all(h.client.clone());
    let csi = pvs.get(pv).await.unwrap().spec.unwrap().csi.unwrap();
    let name = attachment_name(&csi.volume_handle, &csi.driver, node);
    let vas: Api<VolumeAttachment> = Api::all(h.client.clone());
    vas.get_opt(&name)
        .await
        .unwrap()
        .and_then(|v| v.status)
        .is_some_and(|s| s.attached)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_for_reattach_a_node_is_done_only_once_its_moved_volume_is_attached_again() {
    // Attaches of 400 simulated seconds: 4 s here, far longer than the node's reboot.
    let (mut h, names, pv) = solo(400.0, "").await;
    let (a, b) = (names[0].clone(), names[1].clone());
    for _ in 0..200 {
        if attached_on(&h, &pv, &a).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(attached_on(&h, &pv, &a).await, "never attached on {a}");
    h.start_rollout_flagged(std::slice::from_ref(&a))
        .await
        .unwrap();
    // The pod's replacement, as an operator (or an operator's controller) would make it, on
    // another node once the pod is gone.
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let mut gone = false;
    for _ in 0..600 {
        if pods.get_opt("solo").await.unwrap().is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "solo was not evicted");
    create_solo(&h, &b).await;
    let (done, view) = h
        .wait_for_state(&a, NodeState::Done, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(done, "{a} is not done: {view:?}");
    assert!(
        attached_on(&h, &pv, &b).await,
        "{a} was done before {pv} was attached on {b}, where solo's replacement runs"
    );
    let cycle = view.history.last_cycle.unwrap_or_default();
    assert!(cycle.reattach_seconds.is_some(), "{cycle:?}");
    assert!(cycle.not_reattached.is_empty(), "{cycle:?}");
    assert!(h.events("VolumeNotReattached").await.unwrap().is_empty());
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_not_reattached_by_the_timeout_is_a_warning_and_the_node_goes_on() {
    // No replacement is ever made.
    let (mut h, names, pv) = solo(2.0, ", reattachTimeout: 1s").await;
    let a = names[0].clone();
    h.start_rollout_flagged(std::slice::from_ref(&a))
        .await
        .unwrap();
    let (done, view) = h
        .wait_for_state(&a, NodeState::Done, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(done, "{a} is not done: {view:?}");
    let cycle = view.history.last_cycle.unwrap_or_default();
    assert_eq!(cycle.not_reattached, vec![pv.clone()], "{cycle:?}");
    assert_eq!(cycle.reattach_seconds, None);
    let notes = h.events("VolumeNotReattached").await.unwrap();
    assert!(
        notes.iter().any(|n| n.contains(&pv)
            && n.contains("no pod mounts its claim default/solo-data")
            && n.contains("reattachTimeout")),
        "{notes:?}"
    );
    h.shutdown().await;
}
