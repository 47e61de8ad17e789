//! `maxNodes` is capacity (issue 22, item 2): the nodes rollboot has cordoned, in flight or
//! failed and still cordoned by rollboot, never exceed `maxNodes`, overall and per group. A
//! failed node rollboot left cordoned holds its slot until an operator clears it, or until
//! `failures.returnToService` uncordons it once its host is up and Ready. Played on the
//! simulator with the real controller (2 replicas) and agents; the simulator's invariant watch
//! counts the nodes cordoned by rollboot the same way.

use std::collections::BTreeSet;
use std::time::Duration;

use rollboot::node::{NodeState, NodeView};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};
use serde_json::json;

use rollboot_testkit::log::log;

/// A failure that does not wait for the default timeouts: a host that never comes back from
/// its reboot fails its node 3 s after the token.
const FAST_FAILURE: &str = "reboot: {timeout: 3s}\nnodes: {order: name}\n";

/// `nodes` nodes over `zones` zones (node-0000 in zone-a, node-0001 in zone-b, ...), rollboot
/// running with `overrides`, the host of node-0000 broken (it acknowledges, never reboots).
async fn broken_first_host(nodes: usize, zones: usize, overrides: &str) -> (Harness, Vec<String>) {
    log();
    let sc = Scenario {
        nodes,
        zones,
        pods_per_node: 2,
        ..Scenario::default()
    };
    let config = sim_config(&format!("{FAST_FAILURE}{overrides}")).unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    if let Some(key) = h.config.concurrency.group_by.clone() {
        h.cluster.watch_groups(&key);
    }
    let names = h.node_names().await.unwrap();
    h.host.broken.lock().unwrap().insert(names[0].clone());
    h.start_rollout_flagged(&names).await.unwrap();
    (h, names)
}

async fn until(h: &Harness, what: &str, cond: impl Fn(&[NodeView]) -> bool) {
    assert!(
        h.wait_for(Duration::from_secs(40), cond).await.unwrap(),
        "{what}: {:?}",
        states(h).await
    );
}

async fn states(h: &Harness) -> Vec<(String, Option<NodeState>, bool, Option<String>)> {
    h.nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.name, n.state, n.unschedulable, n.failure_reason))
        .collect()
}

fn state_of(ns: &[NodeView], name: &str) -> Option<NodeState> {
    ns.iter().find(|n| n.name == name).and_then(|n| n.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_node_left_cordoned_holds_its_slot_and_nothing_else_starts_until_it_is_cleared() {
    let (h, names) = broken_first_host(3, 1, "failures: {maxFailures: 2}").await;
    let failed = names[0].clone();
    until(&h, "the broken host's node never failed", |ns| {
        state_of(ns, &failed) == Some(NodeState::Failed)
    })
    .await;
    // Tolerated (maxFailures 2), but the failed node is out of service because of rollboot:
    // with maxNodes 1 nothing else may start while it stays cordoned.
    let started = h
        .wait_for(Duration::from_secs(4), |ns| {
            names[1..].iter().any(|n| state_of(ns, n).is_some())
        })
        .await
        .unwrap();
    assert!(
        !started,
        "a node started beside a failed one: {:?}",
        states(&h).await
    );
    let v = h.node(&failed).await.unwrap();
    assert!(v.unschedulable && v.cordoned_by.is_some(), "{v:?}");
    // An operator uncordons it: its slot is free, the others go one at a time.
    h.patch_node(&failed, json!({"spec": {"unschedulable": null}}))
        .await
        .unwrap();
    let rest: BTreeSet<String> = names[1..].iter().cloned().collect();
    until(&h, "the rollout did not go on", |ns| {
        Harness::finished(ns, &rest)
    })
    .await;
    for n in &names[1..] {
        assert_eq!(h.reboots(n), 1, "{n}");
    }
    let inv = h.cluster.invariants();
    assert_eq!(inv.max_cordoned_by_rollboot, 1, "{inv:?}");
    assert!(inv.pdb_violations.is_empty(), "{:?}", inv.pdb_violations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_to_service_uncordons_a_failed_node_whose_host_is_up_and_frees_its_slot() {
    let (h, names) =
        broken_first_host(3, 1, "failures: {maxFailures: 2, returnToService: true}").await;
    let rest: BTreeSet<String> = names[1..].iter().cloned().collect();
    until(&h, "the rollout did not go on past the failure", |ns| {
        Harness::finished(ns, &rest)
    })
    .await;
    let v = h.node(&names[0]).await.unwrap();
    // Uncordoned, and still saying it failed and why.
    assert_eq!(v.state, Some(NodeState::Failed));
    assert!(!v.unschedulable && v.cordoned_by.is_none(), "{v:?}");
    assert!(
        v.failure_reason
            .as_deref()
            .is_some_and(|r| r.contains("boot ID is still")),
        "{:?}",
        v.failure_reason
    );
    let notes = h.events("ReturnedToService").await.unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("failures.returnToService") && n.contains("boot ID is still")),
        "{notes:?}"
    );
    let inv = h.cluster.invariants();
    assert_eq!(inv.max_cordoned_by_rollboot, 1, "{inv:?}");
    for n in &names[1..] {
        assert_eq!(h.reboots(n), 1, "{n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_node_holds_its_groups_slot_while_other_groups_go_on() {
    // zone-a: node-0000 (broken) and node-0002; zone-b: node-0001 and node-0003.
    let (h, names) = broken_first_host(
        4,
        2,
        "failures: {maxFailures: 2}\nconcurrency: {maxNodes: 2, groupBy: topology.kubernetes.io/zone, maxNodesPerGroup: 1}",
    )
    .await;
    let zone_b: BTreeSet<String> = [names[1].clone(), names[3].clone()].into();
    until(&h, "zone-b did not finish", |ns| {
        Harness::finished(ns, &zone_b) && state_of(ns, &names[0]) == Some(NodeState::Failed)
    })
    .await;
    // zone-a's one slot is its failed node's: its other node never started.
    let started = h
        .wait_for(Duration::from_secs(3), |ns| {
            state_of(ns, &names[2]).is_some()
        })
        .await
        .unwrap();
    assert!(!started, "{:?}", states(&h).await);
    let inv = h.cluster.invariants();
    assert_eq!(
        inv.max_cordoned_by_rollboot_by_group.get("zone-a"),
        Some(&1)
    );
    assert!(inv.max_cordoned_by_rollboot <= 2, "{inv:?}");
}
