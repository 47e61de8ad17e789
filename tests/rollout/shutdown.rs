//! A host that shuts down by itself (issue 27): the real agents, each holding a simulated
//! logind's delay inhibitor, and the real controller, on the simulator. The agent asks for a
//! drain (`rollboot.dev/shutdown-requested`), the controller drains the node at once, whatever
//! the window, and hands it over; the agent lets logind go on once the node says so; the host
//! comes back and is verified and uncordoned.

use std::time::Duration;

use rollboot::node::NodeState;
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::shutdowns::UnplannedShutdown;
use rollboot_sim::simulate::{sim_config, Harness};

use rollboot_testkit::log::log;

/// No window is open for the whole test: a shutdown does not wait for one.
const CLOSED: &str = "blackouts: [{from: '2000-01-01T00:00:00Z', to: '2100-01-01T00:00:00Z'}]";

async fn harness(delay: Duration, pdb_share: f64) -> Harness {
    log();
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 4,
        pdb_share,
        ..Scenario::default()
    };
    let mut h = Harness::start(sc, sim_config(CLOSED).unwrap())
        .await
        .unwrap();
    h.enable_shutdowns(delay);
    h.start_rollout().await.unwrap();
    // The agents take their inhibitor as they start.
    tokio::time::sleep(Duration::from_millis(500)).await;
    h
}

/// The first unplanned shutdown the simulator played, as the report has it.
fn first_shutdown(h: &Harness) -> UnplannedShutdown {
    h.shutdowns.as_ref().unwrap().records.lock().unwrap()[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_that_shuts_down_by_itself_is_drained_before_logind_lets_it_go() {
    let mut h = harness(Duration::from_secs(30), 1.0).await;
    let node = "node-0001";
    let before = h.node(node).await.unwrap();
    let on = h.cluster.world().undrained(node).len();
    assert!(on > 0);
    h.host_shutdown(node).unwrap().await.unwrap();
    let r = &first_shutdown(&h);
    assert!(r.drained_before_shutdown, "{r:?}");
    // Each of its pods the drain evicts, evicted before the host went down.
    assert_eq!(r.pods_evicted, on, "{r:?}");
    assert!(r.released_before_limit, "{r:?}");
    assert!(r.seconds_to_release < 25.0, "{r:?}");
    // Handed over once drained: no token for the agent, the host went down by itself.
    let (back, n) = h
        .wait_for_state(node, NodeState::Done, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(back, "{n:?}");
    assert!(!n.unschedulable && n.cordoned_by.is_none(), "{n:?}");
    assert!(
        !n.shutdown_requested,
        "the agent removed its request on the new boot"
    );
    assert_ne!(n.boot_id, before.boot_id);
    assert_eq!(n.reboot_token, None);
    assert_eq!(h.reboots(node), 1);
    // Drained first: a reboot like any, counted as one.
    assert_eq!(n.history.count, Some(1));
    assert_eq!(n.history.undrained_count, None);
    assert_eq!(
        n.history
            .last_cycle
            .as_ref()
            .and_then(|c| c.undrained.clone()),
        None
    );
    let inv = h.cluster.invariants();
    assert!(inv.pdb_violations.is_empty(), "{:?}", inv.pdb_violations);
    assert!(
        inv.repeated_reboots.is_empty(),
        "{:?}",
        inv.repeated_reboots
    );
    // The window stays closed for the others: nothing else started.
    let others = h.nodes().await.unwrap();
    assert!(
        others
            .iter()
            .filter(|v| v.name != node)
            .all(|v| v.state.is_none()),
        "{others:?}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shutdown_logind_cuts_short_says_what_was_left_and_the_node_still_comes_back() {
    // logind's 5 s default (scaled: 0.05 s here): shorter than any drain and than the agent's
    // margin, so the agent lets it go at once.
    let mut h = harness(Duration::from_millis(50), 0.0).await;
    let node = "node-0002";
    let on = h.cluster.world().undrained(node).len();
    h.host_shutdown(node).unwrap().await.unwrap();
    let r = &first_shutdown(&h);
    assert!(!r.drained_before_shutdown && r.pods_left > 0, "{r:?}");
    assert_eq!(r.pods_evicted + r.pods_left, on, "{r:?}");
    let (back, n) = h
        .wait_for_state(node, NodeState::Done, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(back, "{n:?}");
    assert!(!n.unschedulable, "{n:?}");
    assert_eq!(h.reboots(node), 1);
    // Not a drained reboot: counted apart, and the last cycle says why (the host let go at
    // logind's limit while the drain ran, or back before it was over).
    assert_eq!(n.history.count, None, "{:?}", n.history);
    assert_eq!(n.history.undrained_count, Some(1), "{:?}", n.history);
    let why = n
        .history
        .last_cycle
        .as_ref()
        .and_then(|c| c.undrained.clone());
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("with the drain not over")
                || w.contains("before the drain was over")),
        "{why:?}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_agent_of_the_next_boot_removes_a_request_left_from_the_boot_that_shut_down() {
    // No controller: nobody drains, logind's limit lets the host go, and the request the
    // agent wrote outlives its boot. The agent of the next boot removes it once the Node
    // reports that boot; the agent that wrote it ended with its host.
    log();
    let sc = Scenario {
        nodes: 2,
        pods_per_node: 2,
        ..Scenario::default()
    };
    let mut h = Harness::start(sc, sim_config(CLOSED).unwrap())
        .await
        .unwrap();
    h.enable_shutdowns(Duration::from_millis(300));
    h.start_all_agents().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let node = "node-0000";
    let before = h.node(node).await.unwrap();
    h.host_shutdown(node).unwrap().await.unwrap();
    let r = &first_shutdown(&h);
    assert!(!r.drained_before_shutdown, "{r:?}");
    let asked = h
        .wait_for(Duration::from_secs(5), |ns| {
            ns.iter().any(|n| n.name == node && n.shutdown_requested)
        })
        .await
        .unwrap();
    assert!(
        asked,
        "the agent of the boot that shut down wrote its request"
    );
    let cleared = h
        .wait_for(Duration::from_secs(20), |ns| {
            ns.iter().any(|n| {
                n.name == node
                    && n.boot_id != before.boot_id
                    && !n.boot_id.is_empty()
                    && !n.shutdown_requested
            })
        })
        .await
        .unwrap();
    let n = h.node(node).await.unwrap();
    assert!(cleared, "{n:?}");
    assert!(!n.unschedulable && n.state.is_none(), "{n:?}");
    assert_eq!(h.reboots(node), 1);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_with_no_shutdown_behind_them_are_capped_and_end_cancelled_never_failed() {
    // Found by trying rollboot as an attacker would: five agents each wrote shutdown-requested
    // on their own Node with no shutdown behind it; all five nodes were cordoned and draining
    // at once with maxNodes 1, and each request failed its node at reboot.timeout, left it
    // cordoned and halted the rollout.
    log();
    let sc = Scenario {
        nodes: 5,
        pods_per_node: 2,
        ..Scenario::default()
    };
    let config = sim_config(&format!(
        "{{{CLOSED}, reboot: {{readyWithoutRebootFor: 2s}}}}"
    ))
    .unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    h.start_rollout().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let names = h.node_names().await.unwrap();
    // What an agent writes (its logind's delay: 1 s), with no shutdown behind it.
    let request = rollboot::node::ShutdownRequest {
        at: Some(chrono::Utc::now()),
        delay_seconds: Some(1),
    }
    .annotation();
    for n in &names {
        h.patch_node(
            n,
            rollboot::node::patch(
                &[(rollboot::node::SHUTDOWN_REQUESTED, Some(request.clone()))],
                None,
            ),
        )
        .await
        .unwrap();
    }
    let all_ended = h
        .wait_for(Duration::from_secs(90), |ns| {
            ns.iter()
                .all(|n| !n.shutdown_requested && n.state == Some(NodeState::Done))
        })
        .await
        .unwrap();
    let nodes = h.nodes().await.unwrap();
    assert!(all_ended, "{nodes:#?}");
    for n in &nodes {
        assert!(!n.unschedulable, "{} left cordoned", n.name);
        assert_eq!(n.history.count, None, "{}: no reboot recorded", n.name);
        assert_eq!(h.reboots(&n.name), 0);
    }
    let inv = h.cluster.invariants();
    // maxNodes (1) + maxShutdownDrains (1).
    assert!(
        inv.max_cordoned_by_rollboot <= 2,
        "{} cordoned at once",
        inv.max_cordoned_by_rollboot
    );
    let cancelled = h.events("ReleasedWithoutReboot").await.unwrap();
    assert!(
        cancelled
            .iter()
            .filter(|e| e.contains("no shutdown followed"))
            .count()
            >= 5,
        "{cancelled:#?}"
    );
    let deferred = h.events("ShutdownDrainDeferred").await.unwrap();
    assert!(!deferred.is_empty());
    h.shutdown().await;
}
