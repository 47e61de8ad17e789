//! Other actors that take nodes out, played on the simulator with the real controller and
//! agents: a node the autoscaler (or Karpenter, node-maintenance-operator, an out-of-service
//! taint) takes out is never picked, the nodes rollboot holds carry the autoscaler's and
//! Karpenter's protections from cordon to uncordon (and only the ones rollboot wrote are
//! removed), and the KEP-5683 maintenance conditions rollboot writes end False.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use rollboot::node::{self as proto, NodeState, NodeView};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};
use serde_json::json;

use rollboot_testkit::log::log;

async fn started(nodes: usize, config: &str) -> (Harness, Vec<String>) {
    log();
    let sc = Scenario {
        nodes,
        pods_per_node: 1,
        ..Scenario::default()
    };
    let h = Harness::start(sc, sim_config(config).unwrap())
        .await
        .unwrap();
    let names = h.node_names().await.unwrap();
    (h, names)
}

async fn patch(h: &Harness, node: &str, body: serde_json::Value) {
    let api: Api<Node> = Api::all(h.client.clone());
    api.patch(node, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .unwrap();
}

fn done(ns: &[NodeView], names: &[String]) -> bool {
    names.iter().all(|n| {
        ns.iter()
            .any(|v| v.name == *n && v.state == Some(NodeState::Done) && !v.unschedulable)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_another_actor_takes_out_is_left_alone_and_ours_are_protected_then_released() {
    // maxNodes 2: the node the autoscaler takes out holds one slot while it is out.
    let (mut h, names) = started(3, "nodes: {order: name}\nconcurrency: {maxNodes: 2}\n").await;
    let (taken, ours) = (names[0].clone(), names[1..].to_vec());
    // The autoscaler is about to delete node 0; node 1 carries Karpenter's protection already,
    // written by its owner: rollboot must leave it there after its cycle.
    patch(
        &h,
        &taken,
        json!({"spec": {"taints": [{"key": proto::TAINT_TO_BE_DELETED, "value": "1767225600", "effect": "NoSchedule"}]}}),
    )
    .await;
    patch(
        &h,
        &ours[0],
        json!({"metadata": {"annotations": {proto::DO_NOT_DISRUPT: "true"}}}),
    )
    .await;
    h.start_rollout_flagged(&names).await.unwrap();
    // While rollboot holds a node (cordoned by it), what protects it.
    let seen: Mutex<BTreeSet<(String, String)>> = Mutex::default();
    let ended = h
        .wait_for(Duration::from_secs(60), |ns| {
            for n in ns.iter().filter(|n| n.cordoned_by.is_some()) {
                for k in &n.protected {
                    seen.lock().unwrap().insert((n.name.clone(), k.clone()));
                }
            }
            done(ns, &ours)
        })
        .await
        .unwrap();
    assert!(ended, "{:?}", h.nodes().await.unwrap());
    let nodes = h.nodes().await.unwrap();
    let get = |name: &str| nodes.iter().find(|n| n.name == name).unwrap();
    // Never picked, never cordoned by rollboot, and said why.
    assert_eq!(get(&taken).state, None);
    assert!(get(&taken).cordoned_by.is_none());
    assert!(get(&taken)
        .other_actor
        .as_deref()
        .is_some_and(|a| a.starts_with("cluster-autoscaler")));
    // Protected while held: both keys on node 2, only the autoscaler's on node 1 (Karpenter's
    // was someone else's).
    let seen = seen.into_inner().unwrap();
    assert!(
        seen.contains(&(ours[1].clone(), proto::SCALE_DOWN_DISABLED.into())),
        "{seen:?}"
    );
    assert!(
        seen.contains(&(ours[1].clone(), proto::DO_NOT_DISRUPT.into())),
        "{seen:?}"
    );
    assert!(
        seen.contains(&(ours[0].clone(), proto::SCALE_DOWN_DISABLED.into())),
        "{seen:?}"
    );
    assert!(
        !seen.contains(&(ours[0].clone(), proto::DO_NOT_DISRUPT.into())),
        "{seen:?}"
    );
    // Released with the uncordon: only what rollboot wrote.
    for n in &ours {
        let v = get(n);
        assert!(v.protected.is_empty(), "{n}: {:?}", v.protected);
        assert!(
            !v.other_annotations.contains_key(proto::SCALE_DOWN_DISABLED),
            "{n}"
        );
    }
    assert_eq!(
        get(&ours[0])
            .other_annotations
            .get(proto::DO_NOT_DISRUPT)
            .map(String::as_str),
        Some("true")
    );
    assert!(!get(&ours[1])
        .other_annotations
        .contains_key(proto::DO_NOT_DISRUPT));
    // The conditions rollboot wrote in the cycle are rollboot's and end False: Drained and
    // MaintenanceInProgress were True (a False is written only over one that is there).
    for n in &ours {
        let v = get(n);
        for kind in [
            proto::CONDITION_DRAIN_IN_PROGRESS,
            proto::CONDITION_DRAINED,
            proto::CONDITION_MAINTENANCE_IN_PROGRESS,
        ] {
            let c = h
                .wait_for(Duration::from_secs(10), |ns| {
                    ns.iter().any(|v| {
                        v.name == *n
                            && v.maintenance_condition(kind)
                                .is_some_and(|c| c.ours && !c.status)
                    })
                })
                .await
                .unwrap();
            assert!(
                c,
                "{n}: {kind} not ended False: {:?}",
                v.maintenance_conditions
            );
        }
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_protection_off_nothing_is_written_and_count_cordoned_holds_the_slot() {
    let (mut h, names) = started(
        2,
        "nodes: {order: name, protect: {scaleDownDisabled: false, doNotDisrupt: false}, publishConditions: false}\nconcurrency: {countCordoned: true}\n",
    )
    .await;
    // An operator cordoned node 0 (not flagged): under countCordoned it takes the one slot.
    patch(&h, &names[0], json!({"spec": {"unschedulable": true}})).await;
    h.start_rollout_flagged(&names[1..]).await.unwrap();
    let moved = h
        .wait_for(Duration::from_secs(4), |ns| {
            ns.iter().any(|n| n.name == names[1] && n.state.is_some())
        })
        .await
        .unwrap();
    assert!(
        !moved,
        "node 1 started while node 0's cordon held the only slot"
    );
    patch(&h, &names[0], json!({"spec": {"unschedulable": null}})).await;
    let ended = h
        .wait_for(Duration::from_secs(60), |ns| done(ns, &names[1..]))
        .await
        .unwrap();
    assert!(ended);
    let v = h.node(&names[1]).await.unwrap();
    assert!(v.protected.is_empty());
    assert!(
        v.maintenance_conditions.is_empty(),
        "{:?}",
        v.maintenance_conditions
    );
    h.shutdown().await;
}
