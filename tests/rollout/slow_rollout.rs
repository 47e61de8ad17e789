//! Shared by the tests that interrupt a rollout mid-node (leader killed, leader paused): a
//! 3-node world slow enough for each state of a node's cycle to be seen.

use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};

/// Starts both controller replicas and every agent on 3 nodes with slow pods (80 s grace) and
/// reboots (150 s), nodes taken by name, and flags the first two; returns them.
pub async fn slow_rollout_of_two() -> (Harness, Vec<String>) {
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 4,
        grace_seconds: 80,
        reboot_time: 150.0,
        ..Scenario::default()
    };
    let mut h = Harness::start(sc, sim_config("nodes: {order: name}").unwrap())
        .await
        .unwrap();
    let names = h.node_names().await.unwrap();
    let flagged: Vec<String> = names[..2].to_vec();
    // Both flagged before the controllers start: the first by name goes first.
    h.start_rollout_flagged(&flagged).await.unwrap();
    (h, flagged)
}
