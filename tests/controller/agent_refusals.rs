//! The agent as the last line of defence (issue 22, items 3 to 5), played on the simulator with
//! the real controller (2 replicas) and agents: an agent never reboots a host that is not its
//! Node's, every refusal (or failed reboot command) reaches the controller at once through
//! `rollboot.dev/reboot-refused` and fails the node with the agent's reason instead of a
//! misleading timeout, and a sentinel that gives no answer leaves the flag as it was and says so.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rollboot::node::{self as proto, NodeState, NodeView, RefusalCause};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};
use serde_json::json;

use rollboot_testkit::log::log;

/// A cluster of 3 nodes with rollboot's config (the simulation's: a reboot timeout of 1m, so a
/// failure "at once" is told from one at the timeout), nothing started yet.
async fn cluster() -> Harness {
    log();
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 2,
        ..Scenario::default()
    };
    Harness::start(sc, sim_config("").unwrap()).await.unwrap()
}

async fn node(h: &Harness, name: &str) -> NodeView {
    h.node(name).await.unwrap()
}

/// Waits (at most `within`) until `name` is failed; returns its view and how long it took.
async fn failed(h: &Harness, name: &str, within: Duration) -> (NodeView, Duration) {
    let t0 = Instant::now();
    let (ok, v) = h
        .wait_for_state(name, NodeState::Failed, within)
        .await
        .unwrap();
    assert!(ok, "{name} did not fail within {within:?}: {v:?}");
    (v, t0.elapsed())
}

/// Seconds from the agent's refusal (its `at`) to the node's `failed` (its `state-since`).
fn refusal_to_failure(v: &NodeView) -> f64 {
    let r = v.reboot_refused.as_ref().expect("a refusal on the node");
    let at = rollboot::time::parse_annotation(&r.at).expect("an instant");
    (v.state_since.expect("failed since") - at).num_milliseconds() as f64 / 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_on_another_host_refuses_its_token_and_the_node_fails_at_once_saying_why() {
    let mut h = cluster().await;
    let names = h.node_names().await.unwrap();
    let (target, elsewhere) = (names[0].clone(), names[1].clone());
    // Every agent on its own host, but the target's on another node's host, as one started
    // with the wrong --node-name (or on a workstation) would run.
    h.start_all_agents().await.unwrap();
    h.start_agent_on(&target, &elsewhere);
    h.start_controller(0).await.unwrap();
    h.start_controller(1).await.unwrap();
    h.flag(std::slice::from_ref(&target));
    // The simulation's reboot timeout is 1m: at once means well inside it.
    let (v, took) = failed(&h, &target, Duration::from_secs(30)).await;
    let refused = v.reboot_refused.clone().expect("reboot-refused written");
    assert_eq!(refused.cause, RefusalCause::WrongHost);
    assert_eq!(Some(&refused.token), v.reboot_token.as_ref());
    let reason = v.failure_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("the agent refused reboot token")
            && reason.contains("wrongHost")
            && reason.contains("another host"),
        "{reason}"
    );
    // Nothing rebooted: neither the host under the agent nor the node's own.
    assert_eq!((h.reboots(&target), h.reboots(&elsewhere)), (0, 0));
    assert_eq!(
        v.reboot_ack, None,
        "the agent acknowledged a token it refused"
    );
    let notes = h.events("RebootRefused").await.unwrap();
    assert!(
        notes.iter().any(|n| n.contains("another host")),
        "{notes:?}"
    );
    let secs = refusal_to_failure(&v);
    println!("refusal to failure: {secs:.3} s (flag to failure {took:?})");
    assert!(
        (0.0..5.0).contains(&secs),
        "{secs} s from the refusal to the failure"
    );
    assert!(h.cluster.invariants().repeated_reboots.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_command_that_fails_fails_the_node_at_once_with_its_error() {
    let mut h = cluster().await;
    let names = h.node_names().await.unwrap();
    let target = names[0].clone();
    h.host.failing.lock().unwrap().insert(target.clone());
    h.start_rollout().await.unwrap();
    h.flag(std::slice::from_ref(&target));
    let (v, _) = failed(&h, &target, Duration::from_secs(30)).await;
    let refused = v.reboot_refused.clone().expect("reboot-refused written");
    assert_eq!(refused.cause, RefusalCause::RebootCommandFailed);
    // The agent took the token (its ack is the record that it acted once).
    assert_eq!(v.reboot_ack, v.reboot_token);
    let reason = v.failure_reason.unwrap_or_default();
    assert!(
        reason.contains("rebootCommandFailed")
            && reason.contains("simulated reboot command failed"),
        "{reason}"
    );
    assert_eq!(h.reboots(&target), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbled_ack_before_the_token_fails_the_node_at_once_naming_the_key() {
    log();
    // Pods that take 2 s (real) to go: the drain lasts long enough to write into.
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 2,
        grace_seconds: 200,
        ..Scenario::default()
    };
    let mut h = Harness::start(sc, sim_config("").unwrap()).await.unwrap();
    let names = h.node_names().await.unwrap();
    let target = names[0].clone();
    h.start_rollout().await.unwrap();
    h.flag(std::slice::from_ref(&target));
    let draining = h
        .wait_for(Duration::from_secs(30), |ns| {
            ns.iter()
                .any(|n| n.name == target && n.state == Some(NodeState::Draining))
        })
        .await
        .unwrap();
    assert!(draining);
    // Garbage in the agent's own key after the cycle's start (which clears what an earlier
    // cycle left) and before its token: the agent cannot tell whether it acted on it.
    h.patch_node(
        &target,
        json!({"metadata": {"annotations": {proto::REBOOT_ACK: "yes"}}}),
    )
    .await
    .unwrap();
    let (v, _) = failed(&h, &target, Duration::from_secs(30)).await;
    let reason = v.failure_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("ackUnreadable") && reason.contains(proto::REBOOT_ACK),
        "{reason}"
    );
    assert_eq!(h.reboots(&target), 0);
    let secs = refusal_to_failure(&v);
    assert!((0.0..5.0).contains(&secs), "{secs} s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbled_ack_left_by_an_earlier_cycle_is_cleared_when_the_next_one_starts() {
    let mut h = cluster().await;
    let names = h.node_names().await.unwrap();
    let target = names[0].clone();
    h.start_rollout().await.unwrap();
    h.patch_node(
        &target,
        json!({"metadata": {"annotations": {proto::REBOOT_ACK: "yes"}}}),
    )
    .await
    .unwrap();
    h.flag(std::slice::from_ref(&target));
    let one: BTreeSet<String> = [target.clone()].into();
    let done = h
        .wait_for(Duration::from_secs(30), |ns| Harness::finished(ns, &one))
        .await
        .unwrap();
    let v = node(&h, &target).await;
    assert!(done && v.state == Some(NodeState::Done), "{v:?}");
    assert_eq!(h.reboots(&target), 1);
}

/// Waits (30 s at most) until `target`'s cycle is over; asserts it ended `done` after exactly
/// one reboot, and returns the node as then read.
async fn done_after_one_reboot(h: &Harness, target: &str) -> NodeView {
    let one: BTreeSet<String> = [target.to_string()].into();
    let done = h
        .wait_for(Duration::from_secs(30), |ns| Harness::finished(ns, &one))
        .await
        .unwrap();
    let v = node(h, target).await;
    assert!(done, "{v:?}");
    assert_eq!(v.state, Some(NodeState::Done), "{:?}", v.failure_reason);
    assert_eq!(h.reboots(target), 1);
    v
}

/// A cluster of 3 whose first node's agent acknowledged its token, with the host down for
/// 3 s of real time: what a test writes now lands while the host reboots.
async fn acknowledged_while_down() -> (Harness, String) {
    log();
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 2,
        // 3 s of real time down: the garbage lands while the host reboots.
        reboot_time: 300.0,
        ..Scenario::default()
    };
    let mut h = Harness::start(sc, sim_config("").unwrap()).await.unwrap();
    let names = h.node_names().await.unwrap();
    let target = names[0].clone();
    h.start_rollout().await.unwrap();
    h.flag(std::slice::from_ref(&target));
    let taken = h
        .wait_for(Duration::from_secs(30), |ns| {
            ns.iter().any(|n| {
                n.name == target && n.reboot_token.is_some() && n.reboot_token == n.reboot_ack
            })
        })
        .await
        .unwrap();
    assert!(taken);
    (h, target)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbled_ack_after_the_agent_took_its_token_fails_nothing_and_the_node_is_verified() {
    // Found on a real control plane (the e2e suite's check 14a): garbage written over the ack
    // while the host is down for it made the agent refuse its own token, and the node failed
    // after a good reboot.
    let (h, target) = acknowledged_while_down().await;
    h.patch_node(
        &target,
        json!({"metadata": {"annotations": {proto::REBOOT_ACK: "banana"}}}),
    )
    .await
    .unwrap();
    let v = done_after_one_reboot(&h, &target).await;
    assert_eq!(v.reboot_refused, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_that_can_pass_is_looked_at_again_and_the_node_reboots_once_it_does() {
    // The lock read fails once right before the ack: the agent says so (lockUnreadable is not
    // a cause to fail the node), then takes the token on its next check.
    let mut h = cluster().await;
    let names = h.node_names().await.unwrap();
    let target = names[0].clone();
    h.start_rollout().await.unwrap();
    h.cluster.fail_next("agent", "get", "leases", 1);
    h.flag(std::slice::from_ref(&target));
    let one: BTreeSet<String> = [target.clone()].into();
    let done = h
        .wait_for(Duration::from_secs(30), |ns| Harness::finished(ns, &one))
        .await
        .unwrap();
    let v = node(&h, &target).await;
    assert!(done && v.state == Some(NodeState::Done), "{v:?}");
    assert_eq!(h.reboots(&target), 1);
    // The ack took the refusal's place, if one was written.
    assert_eq!(v.reboot_refused, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_that_gives_no_answer_leaves_the_flag_as_it_was_and_says_so_once() {
    let mut h = cluster().await;
    let names = h.node_names().await.unwrap();
    let target = names[0].clone();
    // Only the agent: nothing reboots the node while the sentinel is looked at.
    h.start_agent(&target);
    h.flag(std::slice::from_ref(&target));
    let flagged = |want: bool| {
        let t = target.clone();
        move |ns: &[NodeView]| ns.iter().any(|n| n.name == t && n.reboot_required == want)
    };
    assert!(h
        .wait_for(Duration::from_secs(10), flagged(true))
        .await
        .unwrap());
    // The host no longer asks for a reboot, but its sentinel now fails: the flag stays.
    h.host.sentinel.lock().unwrap().remove(&target);
    h.host
        .sentinel_errors
        .lock()
        .unwrap()
        .insert(target.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let v = node(&h, &target).await;
    assert!(v.reboot_required, "the flag was cleared on an error");
    let errors = h.agent_metrics.sentinel_errors();
    assert!(
        errors >= 5,
        "{errors} errors counted in 2 s of 100 ms checks"
    );
    let said = h.events("SentinelFailed").await.unwrap();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("left as it is (flagged)") && said[0].contains("exited 2"),
        "{said:?}"
    );
    // It answers again: the flag follows it.
    h.host.sentinel_errors.lock().unwrap().remove(&target);
    assert!(h
        .wait_for(Duration::from_secs(10), flagged(false))
        .await
        .unwrap());
    assert!(h.agent_metrics.render().contains(&format!(
        "rollboot_sentinel_errors_total {}",
        h.agent_metrics.sentinel_errors()
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_a_token_the_agent_already_acknowledged_fails_nothing_but_a_failed_command() {
    // Found by trying rollboot as an attacker would: a garbled ack and an agent restarted
    // before its kubelet reported the new boot refused with ackUnreadable; the controller took
    // that refusal of an acknowledged token, failed the node and halted the rollout although
    // the reboot had happened. After the ack, only rebootCommandFailed is taken.
    let (h, target) = acknowledged_while_down().await;
    let v = node(&h, &target).await;
    let refusal = proto::Refusal {
        token: v.reboot_token.clone().unwrap(),
        cause: RefusalCause::AckUnreadable,
        reason: "rollboot.dev/reboot-ack is malformed".into(),
        at: rollboot::time::annotation(chrono::Utc::now()),
    };
    h.patch_node(
        &target,
        json!({"metadata": {"annotations": {proto::REBOOT_REFUSED: refusal.to_annotation()}}}),
    )
    .await
    .unwrap();
    let v = done_after_one_reboot(&h, &target).await;
    // The cycle's end takes what belongs to it: a restarted agent finds no token to refuse.
    assert_eq!(
        (&v.reboot_token, &v.reboot_ack, &v.reboot_refused),
        (&None, &None, &None),
        "{v:?}"
    );
}
