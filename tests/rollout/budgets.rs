//! The budget-aware pick (issue 26), played on the simulator with the real controller (2
//! replicas) and agents: Deployments of 5 under budgets of `maxUnavailable: 1`, their pods on
//! consecutive nodes (so nodes taken in name order share budgets), pods Ready only a while
//! after they start. A node whose budget has no room while a sibling drains is passed over
//! (its `rollboot.dev/passed-over` record and a PassedOver Event name the budget) and taken
//! once the budget has room: every node reboots once, no budget is broken, no record is left.

use std::collections::BTreeSet;
use std::time::Duration;

use rollboot::node::NodeState;
use rollboot_sim::sim::{Placement, Scenario};
use rollboot_sim::simulate::{sim_config, Harness};

use rollboot_testkit::log::log;

fn siblings_on_consecutive_nodes() -> Scenario {
    Scenario {
        nodes: 10,
        pods_per_node: 4,
        replicas: 5,
        placement: Placement::RoundRobin,
        pdb_share: 1.0,
        pdb_max_unavailable: 1,
        daemon_sets: 0,
        bare_pods: 0,
        empty_dir_pods: 0,
        mirror_pods: 0,
        // Replacements Ready 0.4 s (real) after they start: a budget stays at 0 that long.
        start_delay: 40.0,
        reboot_time: 20.0,
        ..Scenario::default()
    }
}

/// Every node of [`siblings_on_consecutive_nodes`] flagged under the simulation config with
/// `overrides`: the harness, and whether the rollout finished within 90 s.
async fn roll_siblings(overrides: &str) -> (Harness, bool) {
    log();
    let config = sim_config(overrides).unwrap();
    let mut h = Harness::start(siblings_on_consecutive_nodes(), config)
        .await
        .unwrap();
    let all = h.node_names().await.unwrap();
    h.start_rollout_flagged(&all).await.unwrap();
    let names: BTreeSet<String> = all.into_iter().collect();
    let done = h
        .wait_for(Duration::from_secs(90), |ns| Harness::finished(ns, &names))
        .await
        .unwrap();
    (h, done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_passed_over_for_a_held_budget_is_taken_once_it_has_room() {
    let (h, done) =
        roll_siblings("concurrency: {maxNodes: 3, passOverFor: 10m}\nnodes: {order: name}\n").await;
    let nodes = h.nodes().await.unwrap();
    assert!(
        done,
        "not finished: {:?}",
        nodes
            .iter()
            .map(|n| (n.name.clone(), n.state, n.passed_over.clone()))
            .collect::<Vec<_>>()
    );
    // Passed over, with the budget named.
    let passed = h.events("PassedOver").await.unwrap();
    assert!(
        !passed.is_empty(),
        "siblings on consecutive nodes under maxNodes 3: some node must have been passed over"
    );
    for msg in &passed {
        assert!(
            msg.contains("passed over for a later node: budget ")
                && msg.contains("concurrency.passOverFor (10m)"),
            "{msg}"
        );
    }
    // Then taken: every node rebooted once, none failed, no record left behind.
    for n in &nodes {
        assert_eq!(n.state, Some(NodeState::Done), "{}", n.name);
        assert_eq!(h.reboots(&n.name), 1, "{}", n.name);
        assert_eq!(
            n.passed_over, None,
            "{} keeps its passed-over record",
            n.name
        );
    }
    let inv = h.cluster.invariants();
    assert!(
        inv.pdb_violations.is_empty(),
        "PDB violations: {:?}",
        inv.pdb_violations
    );
    assert!(inv.max_nodes_unavailable <= 3);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_refused_by_its_budget_asks_again_once_the_budget_has_room() {
    // Nodes in order (no pass over), siblings on consecutive nodes: drains are refused by
    // budgets their neighbours' drains hold. The retry interval is an hour: only the budget's
    // watch seeing room again brings the next eviction, and the rollout ends within minutes.
    let (h, done) = roll_siblings(
        "concurrency: {maxNodes: 3, passOverFor: 0s}\nnodes: {order: name}\n\
         drain: {evictionRetryInterval: 1h, timeout: 1h}\n",
    )
    .await;
    let blocked = h.events("EvictionBlocked").await.unwrap();
    assert!(done, "not finished; refusals: {blocked:?}");
    assert!(
        !blocked.is_empty(),
        "siblings on consecutive nodes under maxNodes 3, nodes in order: some eviction must \
         have been refused"
    );
    for n in h.nodes().await.unwrap() {
        assert_eq!(n.state, Some(NodeState::Done), "{}", n.name);
        assert_eq!(h.reboots(&n.name), 1, "{}", n.name);
    }
    let inv = h.cluster.invariants();
    assert!(
        inv.pdb_violations.is_empty(),
        "PDB violations: {:?}",
        inv.pdb_violations
    );
    h.shutdown().await;
}
