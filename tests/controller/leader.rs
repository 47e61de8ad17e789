//! Leader election among controller replicas on the simulated cluster: one leader at a time,
//! a killed leader replaced after its Lease expires, a stopped leader releasing its Lease.

use std::time::{Duration, Instant};

use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};

async fn holder(h: &Harness) -> Option<String> {
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(h.client.clone(), &h.config.leader.namespace);
    api.get_opt(&h.config.leader.name)
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_two_replicas_lead_at_once_and_a_killed_leader_is_replaced() {
    let mut h = Harness::start(
        Scenario {
            nodes: 2,
            ..Scenario::default()
        },
        sim_config("").unwrap(),
    )
    .await
    .unwrap();
    h.start_controller(0).await.unwrap();
    h.start_controller(1).await.unwrap();
    let mut first = None;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        let leading = h.metrics.iter().filter(|m| m.is_leader()).count();
        assert!(leading <= 1, "{leading} replicas lead at once");
        first = first.or(h.leader());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let first = first.expect("a replica leads");
    assert_eq!(holder(&h).await, Some(format!("controller-{first}")));
    h.kill_controller(first);
    let other = 1 - first;
    let start = Instant::now();
    while h.leader() != Some(other) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "controller-{other} never took over"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(holder(&h).await, Some(format!("controller-{other}")));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_leader_releases_its_lease() {
    let mut h = Harness::start(
        Scenario {
            nodes: 1,
            ..Scenario::default()
        },
        sim_config("").unwrap(),
    )
    .await
    .unwrap();
    h.start_controller(0).await.unwrap();
    let start = Instant::now();
    while h.leader() != Some(0) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "controller-0 never led"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.stop_controller(0).await;
    assert_eq!(
        holder(&h).await,
        None,
        "the Lease is still held after a graceful stop"
    );
    h.shutdown().await;
}
