//! A drain waits for the volumes of the pods it evicted to leave the node before the reboot
//! (issue 24, `drain.volumes`): played on the simulator, whose attach-detach controller, CSI
//! attacher and kubelets keep VolumeAttachments and the Nodes' `volumesAttached` and
//! `volumesInUse` as the real ones do, with the real controller and agents. With
//! `waitForDetach` (the default) no reboot is asked while such a volume is attached; without it
//! the simulator's invariant breaks, which shows it can; a detach that never ends fails the node
//! at `detachTimeout`, naming the volume.

use std::collections::BTreeSet;
use std::time::Duration;

use rollboot::node::NodeState;
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};

#[path = "common/log.rs"]
mod test_log;
use test_log::log;

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
