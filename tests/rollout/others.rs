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

/// What marks node 0 as taken out by another actor, for [`each_signal_keeps_rollboot_off`].
async fn signal(h: &Harness, node: &str, which: &str) {
    let taint =
        |key: &str, effect: &str| json!({"spec": {"taints": [{"key": key, "effect": effect}]}});
    match which {
        "nodeMaintenance" => {
            use kube::api::{ApiResource, DynamicObject, PostParams};
            use kube::core::GroupVersionKind;
            use rollboot::node_maintenance::{GROUP, KIND, PLURAL, VERSION};
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(GROUP, VERSION, KIND),
                PLURAL,
            );
            let api: Api<DynamicObject> = Api::all_with(h.client.clone(), &ar);
            let mut nm = DynamicObject::new("nm-0", &ar);
            nm.data = json!({"spec": {"nodeName": node, "reason": "test"}});
            api.create(&PostParams::default(), &nm).await.unwrap();
        }
        "condition" => {
            let api: Api<Node> = Api::all(h.client.clone());
            let at = rollboot::time::annotation(chrono::Utc::now());
            let body = json!({"status": {"conditions": [{"type": proto::CONDITION_MAINTENANCE_IN_PROGRESS,
                "status": "True", "reason": "Firmware", "message": "the admin updates its firmware",
                "lastTransitionTime": at, "lastHeartbeatTime": at}]}});
            api.patch_status(node, &PatchParams::default(), &Patch::Strategic(&body))
                .await
                .unwrap();
        }
        proto::TAINT_OUT_OF_SERVICE => patch(h, node, taint(which, "NoExecute")).await,
        key => patch(h, node, taint(key, "NoSchedule")).await,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_signal_keeps_rollboot_off_and_holds_a_slot() {
    for which in [
        proto::TAINT_TO_BE_DELETED,
        proto::TAINT_KARPENTER_DISRUPTED,
        proto::TAINT_MEDIK8S_DRAIN,
        proto::TAINT_OUT_OF_SERVICE,
        "condition",
        "nodeMaintenance",
    ] {
        log();
        let sc = Scenario {
            nodes: 3,
            pods_per_node: 1,
            // The kind installed, its operator not: the object alone must keep rollboot off.
            node_maintenance: Some(rollboot_sim::sim::scenario::NodeMaintenance {
                installed: true,
                operator: false,
            }),
            ..Scenario::default()
        };
        let config = sim_config("nodes: {order: name}\nconcurrency: {maxNodes: 2}\n").unwrap();
        let mut h = Harness::start(sc, config).await.unwrap();
        let names = h.node_names().await.unwrap();
        signal(&h, &names[0], which).await;
        h.start_rollout_flagged(&names).await.unwrap();
        // node 0 holds a slot: the other two go one at a time, and node 0 never starts.
        let mut most = 0;
        let ended = h
            .wait_for(Duration::from_secs(60), |ns| {
                most = most.max(ns.iter().filter(|n| n.cordoned_by.is_some()).count());
                done(ns, &names[1..])
            })
            .await
            .unwrap();
        assert!(ended, "{which}: {:?}", h.nodes().await.unwrap());
        let v = h.node(&names[0]).await.unwrap();
        assert_eq!(v.state, None, "{which}: node 0 was started");
        assert!(v.cordoned_by.is_none(), "{which}");
        assert_eq!(
            most, 1,
            "{which}: the other actor's node did not hold a slot"
        );
        h.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_autoscaler_deletes_an_unprotected_drained_node_and_the_rollout_goes_on() {
    log();
    let sc = Scenario {
        nodes: 5,
        pods_per_node: 1,
        autoscaler: Some(serde_json::from_value(json!({"scaleDownEmptyAfter": 1})).unwrap()),
        ..Scenario::default()
    };
    // Protection off, and a settle after the drain: the drained node sits empty and cordoned
    // long enough for the autoscaler to take it mid-cycle.
    let config = sim_config(
        "nodes: {order: name, protect: {scaleDownDisabled: false, doNotDisrupt: false}}\ndrain: {settle: 20s}\nconcurrency: {maxNodes: 1}\n",
    )
    .unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    let names = h.node_names().await.unwrap();
    h.start_rollout_flagged(&names).await.unwrap();
    let mut gone = BTreeSet::new();
    let start = std::time::Instant::now();
    while gone.is_empty() && start.elapsed() < Duration::from_secs(60) {
        gone = h.hosts_gone();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!gone.is_empty(), "the autoscaler took no node");
    // The slot of the node deleted mid-cycle is freed at once: a node still there starts.
    // (Each drained node is as empty to the autoscaler: the later ones may go too, and the
    // last ones' pods have nowhere to go, so the rollout's end is not the promise here.)
    let started = h
        .wait_for(Duration::from_secs(10), |ns| {
            ns.iter()
                .any(|n| !gone.contains(&n.name) && n.state.is_some())
        })
        .await
        .unwrap();
    assert!(
        started,
        "no node started after {gone:?} was deleted mid-cycle"
    );
    let lock: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(h.client.clone(), "rollboot-system");
    let record =
        rollboot::lock::LockRecord::from_lease(lock.get_opt("rollboot-lock").await.unwrap());
    for g in &gone {
        assert!(!record.entries.contains_key(g), "{g} still holds a slot");
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_autoscaler_leaves_a_protected_node_alone() {
    log();
    let sc = Scenario {
        nodes: 2,
        pods_per_node: 1,
        autoscaler: Some(serde_json::from_value(json!({"scaleDownEmptyAfter": 1})).unwrap()),
        ..Scenario::default()
    };
    let config = sim_config("nodes: {order: name}\ndrain: {settle: 20s}\n").unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    let names = h.node_names().await.unwrap();
    h.start_rollout_flagged(&names).await.unwrap();
    let ended = h
        .wait_for(Duration::from_secs(90), |ns| done(ns, &names))
        .await
        .unwrap();
    assert!(ended, "{:?}", h.nodes().await.unwrap());
    assert!(
        h.hosts_gone().is_empty(),
        "the autoscaler deleted a protected node"
    );
    h.shutdown().await;
}
