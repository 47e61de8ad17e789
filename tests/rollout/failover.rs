//! The leader killed at each state of a node's cycle: the other replica takes the leader Lease,
//! resumes the node from what the Node and the lock say, and no node is rebooted twice or left
//! cordoned.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::slow_rollout;
use rollboot::node::NodeState;

use rollboot_sim::simulate::Harness;
use slow_rollout::slow_rollout_of_two;

use rollboot_testkit::log::log;

/// Flags two nodes, kills the leader as soon as the first is seen in `state`, and checks the
/// rollout still completes safely. Returns the state the node was in when the leader died.
async fn kill_the_leader_during(state: NodeState) -> NodeState {
    log();
    let (mut h, flagged) = slow_rollout_of_two().await;
    let first = &flagged[0];
    let order = [
        NodeState::Cordoning,
        NodeState::Draining,
        NodeState::Rebooting,
        NodeState::Verifying,
        NodeState::Done,
    ];
    let rank = |s: NodeState| order.iter().position(|o| *o == s).unwrap();
    let start = Instant::now();
    let seen = loop {
        let n = h.node(first).await.unwrap();
        if let Some(s) = n.state {
            if rank(s) >= rank(state) {
                break s;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{first} never reached {state}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let leader = h.leader().expect("a leader");
    h.kill_controller(leader);
    tracing::info!(node = %first, state = %seen, leader, "killed the leader");
    let set: BTreeSet<String> = flagged.iter().cloned().collect();
    let done = h
        .wait_for(Duration::from_secs(60), |ns| Harness::finished(ns, &set))
        .await
        .unwrap();
    let states: Vec<_> = h
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.name, n.state, n.unschedulable))
        .collect();
    assert!(
        done,
        "the new leader did not finish the rollout: {states:?}"
    );
    let new = h.leader().expect("a new leader");
    assert_ne!(new, leader);
    // The new leader adopted the lock before it acted (a late lock write of the old one would
    // be refused): the Lease names it.
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(h.client.clone(), &h.config.lock.namespace);
    let lock = leases.get(&h.config.lock.name).await.unwrap();
    let adopted_by = lock
        .metadata
        .annotations
        .unwrap_or_default()
        .remove(rollboot::lock::ADOPTED_BY);
    assert_eq!(adopted_by, Some(format!("controller-{new}")));
    for n in &flagged {
        assert_eq!(h.reboots(n), 1, "{n} was not rebooted exactly once");
        let v = h.node(n).await.unwrap();
        assert!(!v.unschedulable, "{n} left cordoned");
        assert_eq!(v.state, Some(NodeState::Done));
    }
    let inv = h.cluster.invariants();
    assert!(inv.pdb_violations.is_empty(), "{:?}", inv.pdb_violations);
    assert!(
        inv.repeated_reboots.is_empty(),
        "{:?}",
        inv.repeated_reboots
    );
    assert!(
        inv.max_nodes_unavailable <= 1,
        "{} nodes out at once",
        inv.max_nodes_unavailable
    );
    h.shutdown().await;
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_while_cordoning_is_resumed_by_the_other_replica() {
    kill_the_leader_during(NodeState::Cordoning).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_while_draining_is_resumed_by_the_other_replica() {
    let s = kill_the_leader_during(NodeState::Draining).await;
    assert_eq!(
        s,
        NodeState::Draining,
        "the drain was too quick to interrupt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_while_rebooting_is_resumed_without_a_second_reboot() {
    let s = kill_the_leader_during(NodeState::Rebooting).await;
    assert_eq!(
        s,
        NodeState::Rebooting,
        "the reboot was too quick to interrupt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_while_verifying_still_uncordons() {
    kill_the_leader_during(NodeState::Verifying).await;
}
