//! The reboot cycle end to end: the real controller (2 replicas) and agents against the
//! simulated cluster, each test asserting the rollout's invariants (no PDB violation, never
//! more nodes out than allowed, no node rebooted twice).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rollboot::node::{NodeState, NodeView};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{rollout, sim_config, Harness, RunOptions};

use rollboot_testkit::log::log;

const ZONE: &str = "topology.kubernetes.io/zone";

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

fn assert_invariants(h: &Harness, max_out: usize) {
    let inv = h.cluster.invariants();
    assert!(
        inv.pdb_violations.is_empty(),
        "PDB violations: {:?}",
        inv.pdb_violations
    );
    assert!(
        inv.repeated_reboots.is_empty(),
        "reboots repeated: {:?}",
        inv.repeated_reboots
    );
    assert!(
        inv.max_nodes_unavailable <= max_out,
        "{} nodes out at once, at most {max_out} allowed",
        inv.max_nodes_unavailable
    );
    let twice: Vec<_> = h
        .host
        .reboots
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| k.clone())
        .collect();
    assert!(twice.is_empty(), "rebooted more than once: {twice:?}");
}

/// Waits until a node is marked failed (`which` names the one expected), then checks for 2 s
/// that no other node starts after the failure; returns the failed node.
async fn the_one_failed_node(h: &Harness, which: &str) -> NodeView {
    let failed = h
        .wait_for(Duration::from_secs(30), |ns| {
            ns.iter().any(|n| n.state == Some(NodeState::Failed))
        })
        .await
        .unwrap();
    assert!(failed, "{which} was not marked failed");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let touched: Vec<NodeView> = h
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .filter(|n| n.state.is_some())
        .collect();
    assert_eq!(
        touched.len(),
        1,
        "another node started after a failure: {:?}",
        touched
            .iter()
            .map(|n| (&n.name, n.state))
            .collect::<Vec<_>>()
    );
    touched.into_iter().next().unwrap()
}

fn set(names: &[String]) -> BTreeSet<String> {
    names.iter().cloned().collect()
}

async fn finish(h: &Harness, flagged: &BTreeSet<String>) {
    let done = h
        .wait_for(Duration::from_secs(90), |ns| Harness::finished(ns, flagged))
        .await
        .unwrap();
    let states: Vec<_> = h
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.name, n.state, n.unschedulable))
        .collect();
    assert!(done, "the rollout did not finish: {states:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_rollout_of_20_nodes_reboots_each_node_once() {
    log();
    let opts = RunOptions {
        cap: Some(Duration::from_secs(120)),
        ..RunOptions::default()
    };
    let r = rollout(scenario(20), sim_config("").unwrap(), opts)
        .await
        .unwrap();
    assert!(r.ok, "{}", r.text());
    assert_eq!(r.rebooted_once, 20, "{}", r.text());
    assert_eq!(r.pdb_violations, 0);
    assert!(r.max_nodes_out <= 1, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_finished_cycle_records_how_long_its_parts_took() {
    // Pods exit 20 of their 30 simulated seconds after they are asked: 0.2 s of real time.
    let sc = Scenario {
        pod_exit_seconds: Some(20.0),
        ..scenario(3)
    };
    let tf = sc.time_factor;
    let (reboot_delay, reboot_time) = (sc.reboot_delay, sc.reboot_time);
    let began = std::time::Instant::now();
    let h = running(sc, "").await;
    let names = h.node_names().await.unwrap();
    h.flag(&names);
    finish(&h, &set(&names)).await;
    let elapsed = began.elapsed().as_secs_f64();
    for n in h.nodes().await.unwrap() {
        let c = n
            .history
            .last_cycle
            .clone()
            .unwrap_or_else(|| panic!("{}: no last cycle recorded", n.name));
        let (drain, reboot, gate) = (
            c.drain_seconds.expect("drain"),
            c.reboot_seconds.expect("reboot"),
            c.gate_seconds.expect("gate"),
        );
        // A host is down for its reboot delay and time at least: no cycle can be faster.
        assert!(
            reboot >= (reboot_delay + reboot_time) * tf * 0.99,
            "{}: reboot measured {reboot} s, the host alone takes {} s",
            n.name,
            (reboot_delay + reboot_time) * tf
        );
        // Each of its pods goes no earlier than it exits. The drain times an eviction's
        // acceptance when its answer arrives, after the server began the pod's grace period:
        // on a loaded machine that is milliseconds late (0.195 s measured for 0.2 s).
        let exit = c.pod_exit_seconds.expect("the drain saw its last pod go");
        assert!(exit >= 20.0 * tf * 0.9, "{}: pods exit in {exit} s", n.name);
        assert!(
            drain >= exit && drain + reboot + gate <= elapsed,
            "{}: {c:?} within a test of {elapsed} s",
            n.name
        );
    }
    assert_invariants(&h, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_at_once_but_never_two_in_one_zone() {
    let mut h = running(
        scenario(6),
        &format!("concurrency: {{maxNodes: 2, groupBy: {ZONE}, maxNodesPerGroup: 1}}"),
    )
    .await;
    let names = h.node_names().await.unwrap();
    h.flag(&names);
    let flagged = set(&names);
    let mut most_at_once = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let nodes = h.nodes().await.unwrap();
        let out: Vec<&NodeView> = nodes
            .iter()
            .filter(|n| n.state.is_some_and(NodeState::in_flight))
            .collect();
        let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &out {
            *per_zone.entry(n.labels[ZONE].as_str()).or_default() += 1;
        }
        assert!(
            per_zone.values().all(|c| *c <= 1),
            "two nodes of one zone in flight: {per_zone:?}"
        );
        most_at_once = most_at_once.max(out.len());
        if Harness::finished(&nodes, &flagged) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the rollout did not finish"
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(most_at_once <= 2);
    assert_invariants(&h, 2);
    for n in &names {
        assert_eq!(h.reboots(n), 1, "{n}");
    }
    h.kill_controller(0);
    h.kill_controller(1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_that_times_out_fails_the_node_with_an_event_saying_the_drain_failed() {
    // Every pod is covered by a budget allowing no disruption: the drain cannot finish.
    let sc = Scenario {
        pdb_share: 1.0,
        pdb_max_unavailable: 0,
        bare_pods: 0,
        ..scenario(3)
    };
    // `maxUnavailable: 0` can never allow one: waited for until the timeout only when
    // `drain.whenBlocked.never` says wait (by default the node fails at the first refusal,
    // tests/rollout/blocked.rs and tests/cli/simulate.rs).
    let h = running(sc, "{drain: {timeout: 2s, whenBlocked: {never: wait}}}").await;
    let first = h.node_names().await.unwrap()[0].clone();
    h.flag(std::slice::from_ref(&first));
    let failed = the_one_failed_node(&h, "the node whose drain the budgets held").await;
    assert_eq!(failed.name, first);
    let reason = failed.failure_reason.clone().unwrap_or_default();
    assert!(reason.contains("drain timed out"), "{reason}");
    assert_eq!(h.reboots(&first), 0, "rebooted after a failed drain");
    // The Warning Event's reason says what failed; its note says why and what happens next.
    let mut notes = Vec::new();
    for _ in 0..100 {
        notes = h.events("DrainFailed").await.unwrap();
        if !notes.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        notes
            .iter()
            .any(|n| n.contains("drain timed out") && n.contains("the rollout halts")),
        "no DrainFailed Event: {notes:?}"
    );
    let wrong = h.events("RebootFailed").await.unwrap();
    assert!(
        wrong.is_empty(),
        "a drain failure called a reboot failure: {wrong:?}"
    );
    assert_invariants(&h, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_allowing_no_disruption_holds_the_drain_until_it_is_relaxed() {
    let sc = Scenario {
        pdb_share: 1.0,
        pdb_max_unavailable: 0,
        bare_pods: 0,
        ..scenario(3)
    };
    // An operator holding drains with `maxUnavailable: 0` for a while: waited for under
    // `drain.whenBlocked.never: wait` (the default fails the node at once).
    let h = running(sc, "{drain: {whenBlocked: {never: wait}}}").await;
    let pods_before = h.cluster.world().pod_count();
    let first = h.node_names().await.unwrap()[0].clone();
    h.flag(std::slice::from_ref(&first));
    let draining = h
        .wait_for(Duration::from_secs(30), |ns| {
            ns.iter()
                .any(|n| n.name == first && n.state == Some(NodeState::Draining))
        })
        .await
        .unwrap();
    assert!(draining);
    // The Event names the budget.
    let mut notes = Vec::new();
    for _ in 0..100 {
        notes = h.events("EvictionBlocked").await.unwrap();
        if !notes.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pdbs: kube::Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        kube::Api::all(h.client.clone());
    let budgets = pdbs.list(&Default::default()).await.unwrap().items;
    let names: Vec<String> = budgets
        .iter()
        .map(|b| b.metadata.name.clone().unwrap())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| names.iter().any(|b| n.contains(b.as_str()))),
        "no EvictionBlocked Event names a budget ({names:?}): {notes:?}"
    );
    // Still draining, nothing deleted around the budget, no reboot.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        h.node(&first).await.unwrap().state,
        Some(NodeState::Draining)
    );
    assert_eq!(h.reboots(&first), 0);
    assert!(
        h.cluster.world().pod_count() >= pods_before,
        "pods were deleted around a budget"
    );
    assert!(h.cluster.invariants().pdb_violations.is_empty());
    // Relax every budget: the rollout proceeds.
    for b in budgets {
        let api: kube::Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
            kube::Api::namespaced(h.client.clone(), b.metadata.namespace.as_deref().unwrap());
        api.patch(
            b.metadata.name.as_deref().unwrap(),
            &Default::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"maxUnavailable": 1}})),
        )
        .await
        .unwrap();
    }
    finish(&h, &set(std::slice::from_ref(&first))).await;
    assert_eq!(h.reboots(&first), 1);
    assert_invariants(&h, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_cordoned_node_stays_cordoned_after_its_reboot() {
    let h = running(scenario(3), "").await;
    let names = h.node_names().await.unwrap();
    let held = names[0].clone();
    h.patch_node(&held, serde_json::json!({"spec": {"unschedulable": true}}))
        .await
        .unwrap();
    h.flag(&names);
    let flagged = set(&names);
    let done = h
        .wait_for(Duration::from_secs(90), |ns| {
            ns.iter()
                .filter(|n| flagged.contains(&n.name))
                .all(|n| n.state == Some(NodeState::Done) && !n.flagged())
        })
        .await
        .unwrap();
    assert!(done);
    let n = h.node(&held).await.unwrap();
    assert!(n.unschedulable, "the operator's cordon was lifted");
    assert_eq!(n.cordoned_by, None);
    for other in &names[1..] {
        assert!(
            !h.node(other).await.unwrap().unschedulable,
            "{other} left cordoned"
        );
    }
    for n in &names {
        assert_eq!(h.reboots(n), 1, "{n}");
    }
    // The operator's cordon counts as one node out, plus the one in maintenance.
    assert_invariants(&h, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_excluded_node_is_never_touched() {
    let h = running(scenario(3), "").await;
    let names = h.node_names().await.unwrap();
    let excluded = names[1].clone();
    h.patch_node(
        &excluded,
        serde_json::json!({"metadata": {"labels": {"rollboot.dev/exclude": "true"}}}),
    )
    .await
    .unwrap();
    h.flag(&names);
    let others: BTreeSet<String> = names.iter().filter(|n| **n != excluded).cloned().collect();
    finish(&h, &others).await;
    let n = h.node(&excluded).await.unwrap();
    assert_eq!(n.state, None);
    assert!(!n.unschedulable);
    assert!(
        n.reboot_required,
        "its flag stays for when the exclusion is lifted"
    );
    assert_eq!(h.reboots(&excluded), 0);
    assert_invariants(&h, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_comes_back_fails_and_halts_the_rollout() {
    let h = running(scenario(3), "{reboot: {timeout: 3s}}").await;
    let names = h.node_names().await.unwrap();
    // No host comes back: whichever node goes first fails, and then nothing else may start.
    h.host.broken.lock().unwrap().extend(names.iter().cloned());
    h.flag(&names);
    let failed = the_one_failed_node(&h, "the node that never came back").await;
    assert_eq!(h.reboots(&failed.name), 1);
    for other in h
        .nodes()
        .await
        .unwrap()
        .iter()
        .filter(|n| n.name != failed.name)
    {
        assert_eq!(
            h.reboots(&other.name),
            0,
            "{} rebooted after a failure",
            other.name
        );
        assert!(!other.unschedulable);
    }
    assert_invariants(&h, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_restarted_after_acknowledging_does_not_reboot_again() {
    let mut h = running(
        Scenario {
            reboot_time: 150.0,
            ..scenario(2)
        },
        "",
    )
    .await;
    let names = h.node_names().await.unwrap();
    let first = names[0].clone();
    h.flag(std::slice::from_ref(&first));
    let acked = h
        .wait_for(Duration::from_secs(30), |ns| {
            ns.iter().any(|n| {
                n.name == first && n.reboot_token.is_some() && n.reboot_token == n.reboot_ack
            })
        })
        .await
        .unwrap();
    assert!(acked);
    h.kill_agent(&first);
    h.start_agent(&first);
    finish(&h, &set(std::slice::from_ref(&first))).await;
    assert_eq!(h.reboots(&first), 1);
    assert_invariants(&h, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_by_another_holder_starts_nothing_until_released() {
    log();
    let mut h = Harness::start(scenario(2), sim_config("").unwrap())
        .await
        .unwrap();
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(h.client.clone(), &h.config.lock.namespace);
    let mut lock = k8s_openapi::api::coordination::v1::Lease::default();
    lock.metadata.name = Some(h.config.lock.name.clone());
    lock.spec = Some(k8s_openapi::api::coordination::v1::LeaseSpec {
        holder_identity: Some("ops-team".into()),
        ..Default::default()
    });
    leases.create(&Default::default(), &lock).await.unwrap();
    h.start_rollout().await.unwrap();
    let names = h.node_names().await.unwrap();
    h.flag(&names);
    let flagged_seen = h
        .wait_for(Duration::from_secs(10), |ns| ns.iter().all(|n| n.flagged()))
        .await
        .unwrap();
    assert!(flagged_seen);
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in h.nodes().await.unwrap() {
        assert_eq!(
            n.state, None,
            "{} started while ops-team held the lock",
            n.name
        );
        assert!(!n.unschedulable);
    }
    // Said once (not once per pass), naming the holder.
    let held = h.events("LockHeld").await.unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(held[0].contains("ops-team"), "{held:?}");
    // The operator releases the lock.
    let mut l = leases.get(&h.config.lock.name).await.unwrap();
    l.spec.as_mut().unwrap().holder_identity = None;
    leases
        .replace(&h.config.lock.name, &Default::default(), &l)
        .await
        .unwrap();
    finish(&h, &set(&names)).await;
    for n in &names {
        assert_eq!(h.reboots(n), 1);
    }
    assert_invariants(&h, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_entry_for_a_deleted_node_frees_its_slot() {
    log();
    let mut h = Harness::start(scenario(2), sim_config("").unwrap())
        .await
        .unwrap();
    // A predecessor left a node in the lock that no longer exists.
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(h.client.clone(), &h.config.lock.namespace);
    let mut lock = k8s_openapi::api::coordination::v1::Lease::default();
    lock.metadata.name = Some(h.config.lock.name.clone());
    lock.metadata.annotations = Some(
        [(
            rollboot::lock::IN_FLIGHT.to_string(),
            r#"{"ghost":{"state":"draining","since":"2026-01-01T00:00:00Z","leader":"controller-9"}}"#.to_string(),
        )]
        .into(),
    );
    lock.spec = Some(k8s_openapi::api::coordination::v1::LeaseSpec {
        holder_identity: Some(rollboot::lock::lock_owner(&h.config)),
        ..Default::default()
    });
    leases.create(&Default::default(), &lock).await.unwrap();
    h.start_rollout().await.unwrap();
    let names = h.node_names().await.unwrap();
    h.flag(&names);
    finish(&h, &set(&names)).await;
    let record =
        rollboot::lock::LockRecord::from_lease(leases.get_opt(&h.config.lock.name).await.unwrap());
    assert!(record.entries.is_empty(), "{:?}", record.entries);
    assert_eq!(
        record.holder, None,
        "the lock is released when nothing is in flight"
    );
    let notes = h.events("LockEntryFreed").await.unwrap();
    assert!(notes.iter().any(|n| n.contains("ghost")), "{notes:?}");
    assert_invariants(&h, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_refuses_a_token_for_a_node_outside_the_lock() {
    let h = running(scenario(2), "").await;
    let names = h.node_names().await.unwrap();
    let target = names[0].clone();
    // Someone other than the controller writes a fresh token on an uncordoned node.
    let token = rollboot::node::Token::new(chrono::Utc::now(), 7).text;
    h.patch_node(
        &target,
        serde_json::json!({"metadata": {"annotations": {"rollboot.dev/reboot": token}}}),
    )
    .await
    .unwrap();
    let mut notes = Vec::new();
    for _ in 0..50 {
        notes = h.events("RebootRefused").await.unwrap();
        if !notes.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        notes.iter().any(|n| n.contains(&token)),
        "no refusal Event: {notes:?}"
    );
    assert_eq!(h.reboots(&target), 0);
    assert_eq!(
        h.node(&target).await.unwrap().reboot_ack,
        None,
        "a refused token is not acknowledged"
    );
}

/// A rollout of 3 nodes whose every Deployment has a budget and whose replacement pods take
/// `start_delay` simulated seconds to become Ready.
async fn slow_replacements(start_delay: f64, overrides: &str) -> Harness {
    let sc = Scenario {
        pdb_share: 1.0,
        start_delay,
        ..scenario(3)
    };
    running(sc, overrides).await
}

/// What is not healthy now: budgets below `desiredHealthy`, ReplicaSets short of Ready pods.
async fn unhealthy(h: &Harness) -> Vec<String> {
    let pdbs: kube::Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        kube::Api::all(h.client.clone());
    let rss: kube::Api<k8s_openapi::api::apps::v1::ReplicaSet> = kube::Api::all(h.client.clone());
    let mut out = Vec::new();
    for b in pdbs.list(&Default::default()).await.unwrap().items {
        let s = b.status.unwrap_or_default();
        if s.current_healthy < s.desired_healthy {
            out.push(format!("budget {}", b.metadata.name.unwrap_or_default()));
        }
    }
    for rs in rss.list(&Default::default()).await.unwrap().items {
        let want = rs.spec.and_then(|s| s.replicas).unwrap_or(1);
        let ready = rs.status.and_then(|s| s.ready_replicas).unwrap_or(0);
        if ready < want {
            out.push(format!(
                "replicaset {}",
                rs.metadata.name.unwrap_or_default()
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_gate_holds_the_node_until_its_pods_are_replaced_and_budgets_healthy() {
    // Replacements take 3 s to become Ready, the reboot 0.6 s: the node is back long before
    // its evicted pods have Ready replacements, and must wait in `verifying` for them.
    let h = slow_replacements(300.0, "").await;
    let first = h.node_names().await.unwrap()[0].clone();
    h.flag(std::slice::from_ref(&first));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut waited_on_unhealthy = false;
    loop {
        let node = h.node(&first).await.unwrap();
        let unhealthy = unhealthy(&h).await;
        match node.state {
            Some(NodeState::Verifying) if !unhealthy.is_empty() => waited_on_unhealthy = true,
            Some(NodeState::Done) if !node.flagged() => {
                assert!(
                    unhealthy.is_empty(),
                    "done while not healthy: {unhealthy:?}"
                );
                break;
            }
            Some(NodeState::Failed) => panic!("failed: {:?}", node.failure_reason),
            _ => {}
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the node did not finish: {:?}",
            node.state
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        waited_on_unhealthy,
        "never saw the node back while its pods were unready: the scenario did not test the gate"
    );
    assert_eq!(h.reboots(&first), 1);
    assert_invariants(&h, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_gate_that_does_not_pass_in_time_fails_the_node_and_says_what_it_waited_for() {
    // Replacements never become Ready within the test: the gate times out.
    let h = slow_replacements(100_000.0, "{healthGate: {timeout: 2s}}").await;
    let names = h.node_names().await.unwrap();
    h.flag(&names);
    let failed = the_one_failed_node(&h, "the node whose gate could not pass").await;
    let reason = failed.failure_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("health gate did not pass within 2s")
            && (reason.contains("ReplicaSet apps-")
                || reason.contains("PodDisruptionBudget apps-")),
        "{reason}"
    );
    assert!(!failed.unschedulable, "left cordoned after its reboot");
    assert_invariants(&h, 1);
}

/// The health gates of consecutive nodes share one watch per namespace and kind (`WorkloadWatches`):
/// a rollout watches (and so lists) a namespace's ReplicaSets and budgets once, not once per
/// node (with 25,000 ReplicaSets in a namespace those per-node lists were most of the
/// controller's time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_gates_of_a_rollout_watch_each_namespace_once() {
    let h = running(scenario(6), "").await;
    let all: Vec<String> = h
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect();
    h.flag(&all);
    finish(&h, &set(&all)).await;
    assert_invariants(&h, 1);
    let stats = h.cluster.stats();
    let mut watches: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (k, n) in &stats.requests {
        if k.identity.starts_with("controller-")
            && k.verb == "watch"
            && ["replicasets", "poddisruptionbudgets"].contains(&k.resource.as_str())
        {
            *watches
                .entry((k.resource.clone(), k.namespace.clone()))
                .or_default() += n;
        }
    }
    assert!(
        watches.keys().any(|(r, _)| r == "replicasets"),
        "no health gate watched ReplicaSets: {watches:?}"
    );
    assert!(
        watches.values().all(|n| *n == 1),
        "a namespace watched more than once in a rollout of {} nodes: {watches:?}",
        all.len()
    );
    h.shutdown().await;
}
