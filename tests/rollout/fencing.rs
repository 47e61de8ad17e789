//! Fencing beyond time: a Node write that reaches the API server late (the replica was paused,
//! or its request sat in a slow network, longer than the leader lease) must not land after
//! someone else acted on the Node. Every state-machine write carries the resourceVersion the
//! step was decided from, so the late write is refused with 409 and changes nothing.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::slow_rollout;
use rollboot::node::NodeState;

use rollboot_sim::simulate::Harness;
use slow_rollout::slow_rollout_of_two;

use rollboot_testkit::log::log;

/// Node patches sent by `identity` so far (whatever their answer).
fn node_patches(h: &Harness, identity: &str) -> u64 {
    h.cluster
        .stats()
        .requests
        .iter()
        .filter(|(k, _)| k.identity == identity && k.verb == "patch" && k.resource == "nodes")
        .map(|(_, n)| n)
        .sum()
}

/// Holds `identity`'s Node patches for `delay` each and returns once the next one was sent
/// (looking every `poll`).
async fn hold_next_node_write(h: &Harness, identity: &str, delay: Duration, poll: Duration) {
    let before = node_patches(h, identity);
    h.cluster.hold(identity, delay, Some(("patch", "nodes")));
    let start = Instant::now();
    while node_patches(h, identity) == before {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the leader never wrote the node again"
        );
        tokio::time::sleep(poll).await;
    }
}

/// Node patches of `identity` answered 409 Conflict so far.
fn node_conflicts(h: &Harness, identity: &str) -> u64 {
    h.cluster.stats().answered(identity, "patch", "nodes", 409)
}

/// Two replicas and agents on a 3-node cluster; flags the first two nodes; returns once the
/// first one is seen draining, with the leader's index.
async fn draining() -> (Harness, Vec<String>, usize) {
    log();
    let (h, flagged) = slow_rollout_of_two().await;
    let start = Instant::now();
    loop {
        if h.node(&flagged[0]).await.unwrap().state == Some(NodeState::Draining) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} never reached draining",
            flagged[0]
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let leader = h.leader().expect("a leader");
    (h, flagged, leader)
}

/// The rollout finished safely: each flagged node rebooted exactly once, for the one token it
/// acknowledged, done and schedulable; no budget broken, no token used twice, one node out at a
/// time.
async fn assert_safe_and_done(h: &Harness, flagged: &[String]) {
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
        .map(|n| {
            (
                n.name,
                n.state,
                n.unschedulable,
                n.reboot_token,
                n.reboot_ack,
            )
        })
        .collect();
    assert!(done, "the rollout did not finish: {states:?}");
    for n in flagged {
        let v = h.node(n).await.unwrap();
        assert_eq!(
            h.reboots(n),
            1,
            "{n} was not rebooted exactly once: {states:?}"
        );
        assert!(!v.unschedulable, "{n} left cordoned");
        assert_eq!(v.state, Some(NodeState::Done), "{n}: {states:?}");
        // The cycle's end takes its token off the Node; its record keeps the one it ended on.
        assert_eq!((&v.reboot_token, &v.reboot_ack), (&None, &None), "{n}");
        let last = v.history.last_cycle.clone().unwrap_or_default();
        assert!(last.token.is_some(), "{n}: no token recorded: {last:?}");
        assert_eq!(
            last.attempts,
            Some(1),
            "{n}: more than one token was issued (a second token was written): {last:?}"
        );
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
}

/// The leader's reboot request for a drained node is held in the network for longer than the
/// leader lease, and so is everything it sends after it (its renewals too): it fences itself by
/// time, the other replica takes over, finishes the drain and requests the reboot itself. Then
/// the old request lands. It must be refused and change nothing: one token, one reboot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_leaders_late_node_write_is_refused_after_a_new_leader_acted() {
    let (h, flagged, old) = draining().await;
    let old_id = format!("controller-{old}");
    // Lease 3 s: the other replica leads after about 3.5 s and requests the reboot soon after.
    let delay = Duration::from_secs(8);
    // The hold starts with the leader's next Node write: its reboot request, once drained.
    hold_next_node_write(&h, &old_id, delay, Duration::from_millis(5)).await;
    let landed = Instant::now() + delay;
    tracing::info!(old, "the leader's reboot request is held in the network");
    // The other replica leads and acts on the node before the old request lands.
    let start = Instant::now();
    loop {
        let n = h.node(&flagged[0]).await.unwrap();
        if n.state != Some(NodeState::Draining) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(7),
            "nobody acted on {} while the old leader was held",
            flagged[0]
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        Instant::now() < landed,
        "the old request landed before the new leader acted"
    );
    let new = h.leader().expect("a new leader");
    assert_ne!(new, old, "leadership did not move");
    // Let the old request land (plus a margin for its answer).
    tokio::time::sleep(landed.saturating_duration_since(Instant::now()) + Duration::from_secs(1))
        .await;
    h.cluster.release(&old_id);
    assert_safe_and_done(&h, &flagged).await;
    assert!(
        node_conflicts(&h, &old_id) >= 1,
        "the old leader's late node write was not refused with 409"
    );
    h.shutdown().await;
}

/// Someone else writes the Node while the leader's write to it is in flight: the write is
/// refused (409), the leader neither fails the node nor loses leadership, decides again from
/// the newer version and finishes the cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_write_is_decided_again_not_failed() {
    let (h, flagged, leader) = draining().await;
    let id = format!("controller-{leader}");
    // Shorter than the renew deadline (2 s): the leader keeps its lease.
    let delay = Duration::from_millis(700);
    hold_next_node_write(&h, &id, delay, Duration::from_millis(2)).await;
    // While its reboot request is in flight, an operator labels the node.
    h.patch_node(
        &flagged[0],
        serde_json::json!({"metadata": {"labels": {"team": "infra"}}}),
    )
    .await
    .unwrap();
    let start = Instant::now();
    while node_conflicts(&h, &id) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the leader's write, decided before the label, was not refused with 409"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.cluster.release(&id);
    assert_safe_and_done(&h, &flagged).await;
    // Decided again once from the newer version, not retried in a loop against the old one.
    let conflicts = node_conflicts(&h, &id);
    assert!(conflicts <= 2, "{conflicts} refused node writes: it spun");
    assert_eq!(h.leader(), Some(leader), "the conflict cost the leadership");
    let n = h.node(&flagged[0]).await.unwrap();
    assert_eq!(n.labels.get("team").map(String::as_str), Some("infra"));
    h.shutdown().await;
}
