//! Maintenance windows and blackouts on the simulated cluster: nothing starts while the window
//! is closed or a blackout holds; the rollout starts by itself when it opens (the controller
//! wakes at the opening, with no change in the cluster to wake it).

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{Timelike, Utc};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};

use rollboot_testkit::log::log;

async fn running(overrides: &str) -> Harness {
    log();
    let sc = Scenario {
        nodes: 2,
        pods_per_node: 3,
        ..Scenario::default()
    };
    let mut h = Harness::start(sc, sim_config(overrides).unwrap())
        .await
        .unwrap();
    h.start_rollout().await.unwrap();
    h
}

async fn nothing_started(h: &Harness) {
    for n in h.nodes().await.unwrap() {
        assert_eq!(
            n.state, None,
            "{} started while maintenance was not allowed",
            n.name
        );
        assert!(
            !n.unschedulable,
            "{} cordoned while maintenance was not allowed",
            n.name
        );
    }
}

async fn rollout_completes(h: &Harness, names: &[String]) {
    let set: BTreeSet<String> = names.iter().cloned().collect();
    let done = h
        .wait_for(Duration::from_secs(90), |ns| Harness::finished(ns, &set))
        .await
        .unwrap();
    assert!(
        done,
        "the rollout did not complete once maintenance was allowed"
    );
    for n in names {
        assert_eq!(h.reboots(n), 1, "{n}");
    }
    let inv = h.cluster.invariants();
    assert!(inv.pdb_violations.is_empty() && inv.repeated_reboots.is_empty());
    assert!(inv.max_nodes_unavailable <= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_starts_during_a_blackout_and_the_rollout_starts_when_it_ends() {
    let now = Utc::now();
    let from = (now - chrono::Duration::hours(1)).to_rfc3339();
    let to = (now + chrono::Duration::seconds(4)).to_rfc3339();
    let h = running(&format!("blackouts: [{{from: '{from}', to: '{to}'}}]")).await;
    let names = h.node_names().await.unwrap();
    h.flag(&names);
    let flagged = h
        .wait_for(Duration::from_secs(10), |ns| ns.iter().all(|n| n.flagged()))
        .await
        .unwrap();
    assert!(flagged);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        Utc::now() < now + chrono::Duration::seconds(4),
        "the machine is too slow for this check"
    );
    nothing_started(&h).await;
    rollout_completes(&h, &names).await;
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_starts_while_the_window_is_closed_and_the_rollout_starts_when_it_opens() {
    // A window opening at the start of the next minute (at least 3 s away), for 10 minutes.
    let mut opens = (Utc::now() + chrono::Duration::minutes(1))
        .with_second(0)
        .unwrap()
        .with_nanosecond(0)
        .unwrap();
    if opens - Utc::now() < chrono::Duration::seconds(3) {
        opens += chrono::Duration::minutes(1);
    }
    let h = running(&format!(
        "windows: [{{schedule: '{} {} * * *', duration: 10m, timezone: UTC}}]",
        opens.minute(),
        opens.hour()
    ))
    .await;
    let names = h.node_names().await.unwrap();
    h.flag(&names);
    let flagged = h
        .wait_for(Duration::from_secs(10), |ns| ns.iter().all(|n| n.flagged()))
        .await
        .unwrap();
    assert!(flagged);
    // Closed: nothing starts, right up to the opening.
    while Utc::now() < opens - chrono::Duration::milliseconds(500) {
        nothing_started(&h).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    rollout_completes(&h, &names).await;
    h.shutdown().await;
}
