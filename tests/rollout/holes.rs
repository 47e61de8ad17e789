//! The safety holes of issue 13, each played on the simulator with the real controller (2
//! replicas) and agents: a forged `state`, the lock Lease deleted mid-rollout, an agent that
//! dies between its ack and the reboot, a garbled in-flight record, garbage annotations.
//! Each test asserts what rollboot promises there: no drain or reboot of a node that is not
//! cordoned, never more nodes out than allowed, one reboot per node, and a failure only with a
//! reason that is true.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use rollboot::node::{self as proto, NodeState, NodeView};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};
use serde_json::json;

use crate::slow_rollout;

use rollboot_testkit::log::log;

fn scenario(nodes: usize) -> Scenario {
    Scenario {
        nodes,
        pods_per_node: 4,
        ..Scenario::default()
    }
}

async fn running(sc: Scenario, overrides: &str) -> Harness {
    log();
    let mut h = Harness::start(sc, sim_config(overrides).unwrap())
        .await
        .unwrap();
    h.start_rollout().await.unwrap();
    h
}

fn set(names: &[String]) -> BTreeSet<String> {
    names.iter().cloned().collect()
}

/// Waits (at most `within`) until every node of `flagged` is done (or failed), unflagged and
/// uncordoned; panics with the nodes' states otherwise.
async fn finish(h: &Harness, flagged: &BTreeSet<String>, within: Duration) {
    let done = h
        .wait_for(within, |ns| Harness::finished(ns, flagged))
        .await
        .unwrap();
    let states: Vec<_> = h
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.name, n.state, n.unschedulable, n.failure_reason))
        .collect();
    assert!(done, "the rollout did not finish: {states:?}");
}

/// No budget broken, no token used twice, never more than `max_out` nodes out, and each of
/// `nodes` rebooted exactly once and `done`.
async fn assert_safe(h: &Harness, nodes: &[String], max_out: usize) {
    let inv = h.cluster.invariants();
    assert!(inv.pdb_violations.is_empty(), "{:?}", inv.pdb_violations);
    assert!(
        inv.repeated_reboots.is_empty(),
        "{:?}",
        inv.repeated_reboots
    );
    assert!(
        inv.max_nodes_unavailable <= max_out,
        "{} nodes out at once, at most {max_out} allowed",
        inv.max_nodes_unavailable
    );
    for n in nodes {
        assert_eq!(h.reboots(n), 1, "{n} was not rebooted exactly once");
        let v = h.node(n).await.unwrap();
        assert_eq!(
            v.state,
            Some(NodeState::Done),
            "{n}: {:?}",
            v.failure_reason
        );
        assert!(!v.unschedulable, "{n} left cordoned");
    }
}

/// Waits until `node` is seen in `state` (or later in the cycle); panics after 30 s.
async fn reached(h: &Harness, node: &str, state: NodeState) {
    let order = [
        NodeState::Cordoning,
        NodeState::Draining,
        NodeState::Rebooting,
        NodeState::Verifying,
        NodeState::Done,
    ];
    let rank = |s: NodeState| order.iter().position(|o| *o == s);
    let seen = h
        .wait_for(Duration::from_secs(30), |ns| {
            ns.iter().any(|n| {
                n.name == node && n.state.and_then(rank) >= rank(state) && n.state.is_some()
            })
        })
        .await
        .unwrap();
    assert!(seen, "{node} never reached {state}");
}

/// The Events with `reason` about `node`, as (note, how many times it was recorded).
async fn events_about(h: &Harness, node: &str, reason: &str) -> Vec<(String, i32)> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::all(h.client.clone());
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node)
        })
        .map(|e| {
            let count = e.series.map_or(1, |s| s.count);
            (e.note.unwrap_or_default(), count)
        })
        .collect()
}

/// Polls [`events_about`] for 10 s until one exists.
async fn await_events(h: &Harness, node: &str, reason: &str) -> Vec<(String, i32)> {
    let start = Instant::now();
    loop {
        let e = events_about(h, node, reason).await;
        if !e.is_empty() || start.elapsed() > Duration::from_secs(10) {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What happened to one node and its pods, in the cluster's order (resourceVersions): when it
/// was first seen cordoned, and when each of its pods was first seen deleting or gone.
#[derive(Default)]
struct Timeline {
    cordoned_at: Option<u64>,
    pods_deleted_at: BTreeMap<String, u64>,
}

fn rv(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Starts watching `node` and the pods bound to it; returns the timeline they fill and the
/// tasks (dropped at the end of the test).
async fn follow(
    h: &Harness,
    node: &str,
) -> (Arc<Mutex<Timeline>>, Vec<tokio::task::JoinHandle<()>>) {
    let t = Arc::new(Mutex::new(Timeline::default()));
    let nodes: Api<Node> = Api::all(h.client.clone());
    let pods: Api<Pod> = Api::all(h.client.clone());
    let (t1, name) = (t.clone(), node.to_string());
    let node_task = tokio::spawn(async move {
        let s = watcher(
            nodes,
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        );
        futures::pin_mut!(s);
        while let Some(ev) = s.next().await {
            if let Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = ev {
                let cordoned = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
                let mut t = t1.lock().unwrap();
                if cordoned && t.cordoned_at.is_none() {
                    t.cordoned_at = Some(rv(&n.metadata));
                }
            }
        }
    });
    let (t2, name) = (t.clone(), node.to_string());
    let pod_task = tokio::spawn(async move {
        let s = watcher(pods, watcher::Config::default());
        futures::pin_mut!(s);
        while let Some(ev) = s.next().await {
            let (p, gone) = match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    let deleting = p.metadata.deletion_timestamp.is_some();
                    (p, deleting)
                }
                Ok(watcher::Event::Delete(p)) => (p, true),
                _ => continue,
            };
            let on_node = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name);
            if on_node && gone {
                let key = p.metadata.name.clone().unwrap_or_default();
                t2.lock()
                    .unwrap()
                    .pods_deleted_at
                    .entry(key)
                    .or_insert(rv(&p.metadata));
            }
        }
    });
    // Both watches have listed before anything is done to the node.
    tokio::time::sleep(Duration::from_millis(300)).await;
    (t, vec![node_task, pod_task])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_draining_state_on_an_uncordoned_node_is_cordoned_before_any_eviction() {
    // A reboot timeout short enough that the old failure (a reboot asked of an uncordoned
    // node, refused by the agent) shows within the test.
    let h = running(scenario(3), "{reboot: {timeout: 10s}}").await;
    let target = h.node_names().await.unwrap()[0].clone();
    let (timeline, _tasks) = follow(&h, &target).await;
    // `kubectl annotate node N rollboot.dev/state=draining`: no state-since, no lock entry,
    // the node schedulable.
    h.patch_node(
        &target,
        json!({"metadata": {"annotations": {proto::STATE: "draining"}}}),
    )
    .await
    .unwrap();
    h.flag(std::slice::from_ref(&target));
    finish(
        &h,
        &set(std::slice::from_ref(&target)),
        Duration::from_secs(40),
    )
    .await;
    assert_safe(&h, std::slice::from_ref(&target), 1).await;
    {
        let t = timeline.lock().unwrap();
        let cordoned = t.cordoned_at.expect("the node was never cordoned");
        assert!(
            !t.pods_deleted_at.is_empty(),
            "no pod was evicted: nothing was tested"
        );
        let early: Vec<_> = t
            .pods_deleted_at
            .iter()
            .filter(|(_, at)| **at < cordoned)
            .collect();
        assert!(
            early.is_empty(),
            "pods evicted before the cordon (at resourceVersion {cordoned}): {early:?}"
        );
    }
    let refused = events_about(&h, &target, "RebootRefused").await;
    assert!(
        refused.is_empty(),
        "a reboot was asked of the node while it was not cordoned: {refused:?}"
    );
    assert!(!await_events(&h, &target, "Cordoned").await.is_empty());
}

/// Deletes the maintenance lock Lease, as `kubectl delete lease rollboot-lock` would.
async fn delete_lock(h: &Harness) {
    let leases: Api<Lease> = Api::namespaced(h.client.clone(), &h.config.lock.namespace);
    leases
        .delete(&h.config.lock.name, &Default::default())
        .await
        .unwrap();
}

/// Flags two nodes of the slow world, deletes the lock Lease once the first is in `state`, and
/// checks the rollout goes on: the lock recreated with that node, nothing else started beside
/// it, both rebooted once.
async fn delete_the_lock_during(state: NodeState) {
    log();
    let (h, flagged) = slow_rollout::slow_rollout_of_two().await;
    let first = &flagged[0];
    reached(&h, first, state).await;
    assert_eq!(h.node(first).await.unwrap().state, Some(state), "too late");
    delete_lock(&h).await;
    let leases: Api<Lease> = Api::namespaced(h.client.clone(), &h.config.lock.namespace);
    // Recreated with the node in flight in it, while that node is still in flight.
    let start = Instant::now();
    let rebuilt = loop {
        let r = rollboot::lock::LockRecord::from_lease(
            leases.get_opt(&h.config.lock.name).await.unwrap(),
        );
        if r.entries.contains_key(first) {
            break r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the lock was not recreated with {first}: {:?}",
            r.entries
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(rebuilt.entries.len(), 1, "{:?}", rebuilt.entries);
    assert_eq!(
        rebuilt.holder.as_deref(),
        Some(rollboot::lock::lock_owner(&h.config).as_str())
    );
    finish(&h, &set(&flagged), Duration::from_secs(60)).await;
    assert_safe(&h, &flagged, 1).await;
    let rebuilt_events = h.events("LockRebuilt").await.unwrap();
    assert!(
        rebuilt_events
            .iter()
            .any(|n| n.contains("the Lease does not exist") && n.contains(first.as_str())),
        "{rebuilt_events:?}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_deleted_while_draining_is_recreated_from_the_nodes_and_the_rollout_goes_on() {
    delete_the_lock_during(NodeState::Draining).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_deleted_while_rebooting_is_recreated_and_the_node_rebooted_once() {
    delete_the_lock_during(NodeState::Rebooting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbled_in_flight_record_is_rebuilt_and_nothing_new_starts_meanwhile() {
    log();
    // Drains of 3 s, so the record can be garbled while both slots are draining (Ready: no
    // unready-node blocker hides a wrong start).
    let sc = Scenario {
        nodes: 4,
        pods_per_node: 4,
        grace_seconds: 300,
        reboot_time: 150.0,
        ..Scenario::default()
    };
    let mut h = Harness::start(
        sc,
        sim_config("{concurrency: {maxNodes: 2}, nodes: {order: name}}").unwrap(),
    )
    .await
    .unwrap();
    h.start_rollout().await.unwrap();
    let names = h.node_names().await.unwrap();
    // The last two take both slots; the first two, flagged next, come first by name: an
    // empty record would start them at once.
    h.flag(&names[2..]);
    reached(&h, &names[2], NodeState::Draining).await;
    reached(&h, &names[3], NodeState::Draining).await;
    h.flag(&names[..2]);
    let first_two = set(&names[..2]);
    let flagged = h
        .wait_for(Duration::from_secs(10), |ns| {
            ns.iter()
                .filter(|n| first_two.contains(&n.name))
                .all(|n| n.flagged())
        })
        .await
        .unwrap();
    assert!(flagged);
    let draining = h.nodes().await.unwrap();
    assert!(
        draining
            .iter()
            .filter(|n| n.state.is_some())
            .all(|n| n.state == Some(NodeState::Draining) && n.ready),
        "too late: {:?}",
        draining
            .iter()
            .map(|n| (&n.name, n.state))
            .collect::<Vec<_>>()
    );
    let leases: Api<Lease> = Api::namespaced(h.client.clone(), &h.config.lock.namespace);
    leases
        .patch(
            &h.config.lock.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {rollboot::lock::IN_FLIGHT: "{\"node-0002\": garbage"}}})),
        )
        .await
        .unwrap();
    finish(&h, &set(&names), Duration::from_secs(120)).await;
    assert_safe(&h, &names, 2).await;
    let notes = h.events("LockRebuilt").await.unwrap();
    assert!(
        notes.iter().any(|n| n.contains("does not parse")),
        "{notes:?}"
    );
    h.shutdown().await;
}

/// Flags one node whose agent stalls after `stalls` acks; after each ack kills and restarts the
/// agent (as a crash between the ack and the reboot, then the DaemonSet's restart would).
/// Returns the harness, the node, and the time from the first ack.
async fn agent_dies_after_its_ack(stalls: usize, overrides: &str) -> (Harness, String, Instant) {
    let mut h = running(scenario(3), overrides).await;
    let target = h.node_names().await.unwrap()[0].clone();
    h.host.stall.lock().unwrap().insert(target.clone(), stalls);
    h.flag(std::slice::from_ref(&target));
    let mut first_ack = None;
    for attempt in 1..=stalls as u32 {
        let acked = h
            .wait_for(Duration::from_secs(30), |ns| {
                ns.iter().any(|n| {
                    n.name == target
                        && n.reboot_token.is_some()
                        && n.reboot_token == n.reboot_ack
                        && n.reboot_attempt == Some(attempt)
                })
            })
            .await
            .unwrap();
        assert!(acked, "attempt {attempt} was never acknowledged");
        first_ack.get_or_insert_with(Instant::now);
        h.kill_agent(&target);
        h.start_agent(&target);
    }
    (h, target, first_ack.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_dies_between_its_ack_and_the_reboot_gets_a_new_token_and_reboots_once() {
    let (h, target, since) = agent_dies_after_its_ack(1, "").await;
    finish(
        &h,
        &set(std::slice::from_ref(&target)),
        Duration::from_secs(30),
    )
    .await;
    // Well within the reboot timeout (1 min): nobody waited for it.
    assert!(
        since.elapsed() < Duration::from_secs(30),
        "took {:?}",
        since.elapsed()
    );
    assert_safe(&h, std::slice::from_ref(&target), 1).await;
    let lost = await_events(&h, &target, "RebootLost").await;
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(lost[0].0.contains("did not reboot"), "{lost:?}");
    let asked = await_events(&h, &target, "RebootRequestedAgain").await;
    assert!(
        asked.iter().any(|(n, _)| n.contains("attempt 2 of 3")),
        "{asked:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_never_gets_to_reboot_fails_the_node_after_the_last_attempt_saying_so() {
    let (h, target, since) = agent_dies_after_its_ack(3, "").await;
    let failed = h
        .wait_for(Duration::from_secs(30), |ns| {
            ns.iter()
                .any(|n| n.name == target && n.state == Some(NodeState::Failed))
        })
        .await
        .unwrap();
    assert!(failed, "{target} was not failed");
    assert!(
        since.elapsed() < Duration::from_secs(40),
        "took {:?}",
        since.elapsed()
    );
    let v = h.node(&target).await.unwrap();
    let reason = v.failure_reason.unwrap_or_default();
    assert!(
        reason.contains("acknowledged 3 reboot token(s)") && reason.contains("boot ID is still"),
        "{reason}"
    );
    assert_eq!(h.reboots(&target), 0, "a stalled agent rebooted nothing");
    assert_eq!(v.reboot_attempt, Some(3));
    // The failure says what happens next: with maxFailures 0, the rollout halts.
    let failed_events = await_events(&h, &target, "RebootFailed").await;
    assert!(
        failed_events
            .iter()
            .any(|(n, _)| n.contains("the rollout halts")),
        "{failed_events:?}"
    );
    let inv = h.cluster.invariants();
    assert!(
        inv.repeated_reboots.is_empty(),
        "{:?}",
        inv.repeated_reboots
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_rollboot_annotations_is_named_in_one_warning_event_each() {
    let h = running(scenario(3), "").await;
    let names = h.node_names().await.unwrap();
    let (garbled, flagged) = (names[2].clone(), names[0].clone());
    h.patch_node(
        &garbled,
        json!({"metadata": {"annotations": {
            proto::STATE: "exploding",
            proto::REBOOT_ACK: "yes",
        }}}),
    )
    .await
    .unwrap();
    // A rollout on another node: many passes, each of which sees the garbage.
    h.flag(std::slice::from_ref(&flagged));
    finish(
        &h,
        &set(std::slice::from_ref(&flagged)),
        Duration::from_secs(40),
    )
    .await;
    assert_safe(&h, std::slice::from_ref(&flagged), 1).await;
    let warned = await_events(&h, &garbled, "MalformedAnnotation").await;
    let about = |key: &str| -> Vec<&(String, i32)> {
        warned.iter().filter(|(n, _)| n.contains(key)).collect()
    };
    let state = about(proto::STATE);
    assert_eq!(state.len(), 1, "{warned:?}");
    assert!(
        state[0].0.contains(&format!("node {garbled}")) && state[0].0.contains("`exploding`"),
        "{state:?}"
    );
    assert_eq!(state[0].1, 1, "said again on later passes: {state:?}");
    let ack = about(proto::REBOOT_ACK);
    assert_eq!(ack.len(), 1, "{warned:?}");
    assert_eq!(ack[0].1, 1, "{ack:?}");
    // Nothing was done to the garbled node.
    let v: NodeView = h.node(&garbled).await.unwrap();
    assert_eq!(
        (v.state, v.unschedulable, h.reboots(&garbled)),
        (None, false, 0)
    );
}

/// Writes `state: value` over a node whose agent has taken its reboot token (token, ack and
/// `boot-id-before` on the Node), while its host is down for that reboot, as an operator's
/// `kubectl annotate --overwrite` would; then lets the rollout finish. Returns the harness and
/// the node.
async fn overwrite_the_state_mid_reboot(value: &str) -> (Harness, String) {
    // A reboot of 3 s (real): time to write over the state while the host is down.
    let sc = Scenario {
        reboot_time: 300.0,
        ..scenario(3)
    };
    let h = running(sc, "").await;
    let target = h.node_names().await.unwrap()[0].clone();
    h.flag(std::slice::from_ref(&target));
    let taken = h
        .wait_for(Duration::from_secs(30), |ns| {
            ns.iter().any(|n| {
                n.name == target
                    && n.state == Some(NodeState::Rebooting)
                    && n.reboot_token.is_some()
                    && n.reboot_token == n.reboot_ack
            })
        })
        .await
        .unwrap();
    assert!(taken, "{target}'s token was never acknowledged");
    let before = h.node(&target).await.unwrap();
    h.patch_node(
        &target,
        json!({"metadata": {"annotations": {proto::STATE: value}}}),
    )
    .await
    .unwrap();
    // Still down from the same reboot when the state was written over: the test tests
    // something.
    let after = h.node(&target).await.unwrap();
    assert_eq!(after.boot_id, before.boot_id, "the host was back already");
    assert_eq!(h.reboots(&target), 1);
    finish(
        &h,
        &set(std::slice::from_ref(&target)),
        Duration::from_secs(40),
    )
    .await;
    (h, target)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbled_state_mid_reboot_never_sends_a_second_reboot_token() {
    let (h, target) = overwrite_the_state_mid_reboot("banana").await;
    assert_safe(&h, std::slice::from_ref(&target), 1).await;
    // The cycle's end takes its token off the Node; its record keeps how many it issued.
    let last = h.node(&target).await.unwrap().history.last_cycle;
    assert_eq!(
        last.as_ref().and_then(|c| c.attempts),
        Some(1),
        "a second token was issued: {last:?}"
    );
    let warned = await_events(&h, &target, "MalformedAnnotation").await;
    assert!(
        warned.iter().any(|(n, _)| n.contains(proto::STATE)
            && n.contains("`banana`")
            && n.contains("no second token")),
        "{warned:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_written_backwards_mid_reboot_never_sends_a_second_reboot_token() {
    let (h, target) = overwrite_the_state_mid_reboot("draining").await;
    assert_safe(&h, std::slice::from_ref(&target), 1).await;
    let last = h.node(&target).await.unwrap().history.last_cycle;
    assert_eq!(last.as_ref().and_then(|c| c.attempts), Some(1), "{last:?}");
    let warned = await_events(&h, &target, "MalformedAnnotation").await;
    assert!(
        warned.iter().any(|(n, _)| n.contains(proto::STATE)
            && n.contains("`draining`")
            && n.contains("read as rebooting")),
        "{warned:?}"
    );
}

/// Found by `simulate --chaos 8`: an outage while the controller issued a token made the
/// agent's one read of the lock fail, and the agent dropped the token until its Node changed
/// again, which nothing did: the node failed at the reboot timeout ("did not acknowledge").
/// The look is taken again on the agent's next check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_lock_read_fails_takes_its_token_on_the_next_check() {
    let h = running(scenario(2), "").await;
    let names = h.node_names().await.unwrap();
    // The agents read the lock once per token, right before they acknowledge it.
    h.cluster.fail_next("agent", "get", "leases", 1);
    let one = set(&names[..1]);
    h.flag(&names[..1]);
    // Well inside the reboot timeout (1m): only a retry can finish in time.
    finish(&h, &one, Duration::from_secs(25)).await;
    assert_safe(&h, &names[..1], 1).await;
    assert_eq!(
        h.cluster.stats().faults_injected,
        1,
        "the lock read was not failed: the test did not test anything"
    );
}

/// Found by `simulate --chaos 7`: a Node deleted mid-drain and registered again by its
/// kubelet comes back without `reboot-required`; its agent, which had flagged it once, never
/// flagged it again, and the host was never rebooted. The agent compares its sentinel with
/// the Node as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_lost_its_flag_is_flagged_again_by_its_agent() {
    log();
    let mut h = Harness::start(scenario(1), sim_config("").unwrap())
        .await
        .unwrap();
    let node = h.node_names().await.unwrap().remove(0);
    // The agent alone: nothing reboots, the flag stays.
    h.start_agent(&node);
    h.flag(std::slice::from_ref(&node));
    let flagged = |ns: &[NodeView]| ns.iter().all(NodeView::flagged);
    assert!(h.wait_for(Duration::from_secs(10), flagged).await.unwrap());
    h.patch_node(
        &node,
        json!({"metadata": {"annotations": {proto::REBOOT_REQUIRED: null, proto::REBOOT_REQUIRED_REASON: null}}}),
    )
    .await
    .unwrap();
    assert!(!h.node(&node).await.unwrap().flagged());
    assert!(
        h.wait_for(Duration::from_secs(10), flagged).await.unwrap(),
        "the agent did not flag its node again"
    );
    h.shutdown().await;
}

/// Found by `simulate --chaos` (the lock deleted between a node's start and its cordon) and
/// pinned on kube-apiserver (golden 190): a replace of a Lease deleted since it was read is a
/// 409, not a 404. The lock's write then read the Lease again, found none, and created it with
/// only its own change, forgetting the node in flight; the next node started beside it. The
/// write now says the lock is gone, and the controller rebuilds the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_write_after_its_lease_was_deleted_is_gone_and_recreates_nothing() {
    use rollboot::lease::LeaseRef;
    use rollboot::lock::{self, LockEntry, LockError, LockRecord};
    log();
    let cluster = rollboot_sim::sim::Cluster::start(scenario(1))
        .await
        .unwrap();
    let client = cluster.kube_client().await.unwrap();
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    ns.create(
        &Default::default(),
        &serde_json::from_value(json!({"metadata": {"name": "rollboot-system"}})).unwrap(),
    )
    .await
    .unwrap();
    let lease = LeaseRef::new(client.clone(), "rollboot-system", "rollboot-lock");
    let entry = |node: &str| LockEntry {
        state: NodeState::Cordoning,
        since: chrono::Utc::now(),
        leader: format!("c-0 {node}"),
        group: None,
    };
    let ok = || Ok(());
    let written = lock::update(
        &lease,
        "c-0",
        LockRecord::default(),
        |e| {
            e.insert("node-a".into(), entry("a"));
        },
        &ok,
    )
    .await
    .unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "rollboot-system");
    leases
        .delete("rollboot-lock", &Default::default())
        .await
        .unwrap();
    let again = lock::update(
        &lease,
        "c-0",
        written,
        |e| {
            e.insert("node-b".into(), entry("b"));
        },
        &ok,
    )
    .await;
    assert!(
        matches!(again, Err(LockError::Gone { .. })),
        "{:?}",
        again.map(|r| r.entries)
    );
    assert!(
        leases.get_opt("rollboot-lock").await.unwrap().is_none(),
        "the lock was created again without the node in flight"
    );
    cluster.shutdown().await;
}

/// A Node deleted while its host reboots (by the autoscaler, Karpenter, an operator) frees its
/// slot at once, said as a Warning on the rollout (`NodeGone` on the lock's Lease): the next
/// node starts without waiting for `reboot.timeout`. (The chaos campaign's seed 616 once had
/// the slot kept until the Node came back; other actors delete nodes for good, and the rollout
/// waited the whole reboot timeout for them.) A host that registers its Node again is not
/// rebooted a second time: its flag went with the reboot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_deleted_while_its_host_reboots_frees_its_slot_at_once() {
    log();
    let (h, flagged) = slow_rollout::slow_rollout_of_two().await;
    let (first, second) = (&flagged[0], &flagged[1]);
    reached(&h, first, NodeState::Rebooting).await;
    let start = Instant::now();
    while h.reboots(first) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{first} never rebooted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let nodes: Api<Node> = Api::all(h.client.clone());
    let mut node = nodes.get(first).await.unwrap();
    nodes.delete(first, &Default::default()).await.unwrap();
    // Its Node gone: its slot is freed at once, and the next node starts.
    let started = |ns: &[NodeView]| ns.iter().any(|n| n.name == *second && n.state.is_some());
    assert!(
        h.wait_for(Duration::from_secs(5), started).await.unwrap(),
        "{second} did not start after {first} was deleted mid-reboot"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(h.client.clone(), "rollboot-system");
    let gone = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .any(|e| e.reason.as_deref() == Some("NodeGone") && e.type_.as_deref() == Some("Warning"));
    assert!(gone, "no NodeGone Warning on the rollout");
    // The kubelet registers the Node again: a new object, nothing of rollboot's on it.
    node.metadata = kube::api::ObjectMeta {
        name: node.metadata.name.take(),
        labels: node.metadata.labels.take(),
        ..Default::default()
    };
    node.spec = Some(Default::default());
    nodes.create(&Default::default(), &node).await.unwrap();
    finish(
        &h,
        &set(std::slice::from_ref(second)),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(h.reboots(first), 1, "{first} rebooted again");
    assert_eq!(h.reboots(second), 1);
    let back = h.node(first).await.unwrap();
    assert!(!back.unschedulable && !back.flagged(), "{back:?}");
    h.shutdown().await;
}

/// The lock Lease of a fresh simulated cluster, written once by `leader` with `node` in flight,
/// and the record as that write left it.
async fn lock_with(
    node: &str,
    leader: &str,
) -> (
    rollboot_sim::sim::Cluster,
    rollboot::lease::LeaseRef,
    rollboot::lock::LockRecord,
    Api<Lease>,
) {
    use rollboot::lease::LeaseRef;
    use rollboot::lock::{self, LockEntry, LockRecord};
    log();
    let cluster = rollboot_sim::sim::Cluster::start(scenario(1))
        .await
        .unwrap();
    let client = cluster.kube_client().await.unwrap();
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    ns.create(
        &Default::default(),
        &serde_json::from_value(json!({"metadata": {"name": "rollboot-system"}})).unwrap(),
    )
    .await
    .unwrap();
    let lease = LeaseRef::new(client.clone(), "rollboot-system", "rollboot-lock");
    let entry = LockEntry {
        state: NodeState::Cordoning,
        since: chrono::Utc::now(),
        leader: leader.into(),
        group: None,
    };
    let n = node.to_string();
    let written = lock::update(
        &lease,
        "rollboot",
        LockRecord::default(),
        move |e| {
            e.insert(n.clone(), entry.clone());
        },
        &|| Ok(()),
    )
    .await
    .unwrap();
    (
        cluster,
        lease,
        written,
        Api::namespaced(client, "rollboot-system"),
    )
}

/// Found by the chaos campaign (seed 576): a leader paused after deciding to free a node's slot
/// and before its write left; the next leader resumed that node from the lock without writing
/// the lock; the old write then landed (the resourceVersion it carried was still current) and
/// took the node out of the lock while the new leader was cycling it. A new leader now writes
/// the lock once before it acts (`lock::adopt`): the late write is refused with 409, and the
/// leadership check after the conflict stops the deposed leader without a second try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_late_lock_write_is_refused_once_the_new_leader_adopted_the_lock() {
    use rollboot::lease::NotLeader;
    use rollboot::lock::{self, LockError, LockRecord, ADOPTED_BY};
    let (cluster, lease, seen_by_old, leases) = lock_with("node-a", "c-0").await;
    // The new leader adopts the lock as it read it, before acting on anything.
    let read = lock::read(&lease).await.unwrap();
    let adopted = lock::adopt(&lease, "rollboot", read, "c-1", chrono::Utc::now(), &|| {
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(
        adopted.entries.keys().collect::<Vec<_>>(),
        ["node-a"],
        "the adoption changed the in-flight record"
    );
    // The old leader's free of node-a, decided from what it read before, lands now; its
    // leadership has expired (the check after a conflict says so).
    let checks = std::sync::atomic::AtomicUsize::new(0);
    let deposed = || {
        checks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Err(NotLeader {
            identity: "c-0".into(),
        })
    };
    let late = lock::update(
        &lease,
        "rollboot",
        seen_by_old,
        |e| {
            e.remove("node-a");
        },
        &deposed,
    )
    .await;
    assert!(
        matches!(late, Err(LockError::NotLeader(_))),
        "the late write was not stopped: {:?}",
        late.map(|r| r.entries)
    );
    assert_eq!(checks.load(std::sync::atomic::Ordering::SeqCst), 1);
    let now = LockRecord::from_lease(leases.get_opt("rollboot-lock").await.unwrap());
    assert!(
        now.entries.contains_key("node-a"),
        "the late write took node-a out of the lock: {:?}",
        now.entries
    );
    let by = now
        .lease
        .as_ref()
        .and_then(|l| l.metadata.annotations.as_ref())
        .and_then(|a| a.get(ADOPTED_BY).cloned());
    assert_eq!(by.as_deref(), Some("c-1"));
    cluster.shutdown().await;
}

/// A start whose lock write meets a conflict, and whose fresh read lists a node it did not see
/// when it decided (someone else started one meanwhile), is not written on top of it: that
/// could put more nodes in flight than allowed. The conflict goes back to be decided again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_finds_another_start_after_a_conflict_is_decided_again() {
    use rollboot::lock::{self, LockEntry, LockError};
    let (cluster, lease, before, leases) = lock_with("node-a", "c-0").await;
    // node-a finished and someone else started node-b since `before` was read.
    let other = lock::update(
        &lease,
        "rollboot",
        before.clone(),
        |e| {
            e.clear();
            e.insert(
                "node-b".into(),
                LockEntry {
                    state: NodeState::Cordoning,
                    since: chrono::Utc::now(),
                    leader: "c-1".into(),
                    group: None,
                },
            );
        },
        &|| Ok(()),
    )
    .await
    .unwrap();
    let start_c = lock::update(
        &lease,
        "rollboot",
        before,
        |e| {
            e.remove("node-a");
            e.insert(
                "node-c".into(),
                LockEntry {
                    state: NodeState::Cordoning,
                    since: chrono::Utc::now(),
                    leader: "c-0".into(),
                    group: None,
                },
            );
        },
        &|| Ok(()),
    )
    .await;
    assert!(
        matches!(start_c, Err(LockError::Lease(_))),
        "{:?}",
        start_c.map(|r| r.entries)
    );
    let now =
        rollboot::lock::LockRecord::from_lease(leases.get_opt("rollboot-lock").await.unwrap());
    assert_eq!(
        now.entries, other.entries,
        "node-c was written beside node-b"
    );
    // A change that adds nothing (a free) is still retried on the fresh record.
    let freed = lock::update(
        &lease,
        "rollboot",
        rollboot::lock::LockRecord::default(),
        |e| {
            e.remove("node-b");
        },
        &|| Ok(()),
    )
    .await;
    assert!(freed.is_ok(), "{:?}", freed.err());
    cluster.shutdown().await;
}
