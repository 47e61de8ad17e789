//! With no node flagged, the controller only keeps its Leases and watches: nothing it does
//! depends on how many nodes there are. Its FleetLock server is on, and sends nothing while no
//! host calls (issue 27: idle requests of the endpoint, none).

use std::time::Duration;

use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_controller_only_renews_leases_and_watches() {
    let sc = Scenario {
        nodes: 40,
        pods_per_node: 3,
        ..Scenario::default()
    };
    let config = sim_config("fleetlock: {listen: '127.0.0.1:0'}").unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    h.start_rollout().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stats = h.cluster.stats();
    let mut seen = Vec::new();
    for (k, n) in &stats.requests {
        if !k.identity.starts_with("controller-") {
            continue;
        }
        let allowed = match k.resource.as_str() {
            "leases" => true,
            "nodes" => k.verb == "list" || k.verb == "watch",
            _ => false,
        };
        assert!(
            allowed,
            "an idle controller made {n} `{} {}` request(s)",
            k.verb, k.resource
        );
        seen.push((k.verb.clone(), k.resource.clone(), *n));
    }
    let node_reads: u64 = seen
        .iter()
        .filter(|(_, r, _)| r == "nodes")
        .map(|(_, _, n)| n)
        .sum();
    assert!(
        node_reads <= 8,
        "node reads grow with the cluster: {seen:?}"
    );
    assert!(h
        .nodes()
        .await
        .unwrap()
        .iter()
        .all(|n| n.state.is_none() && !n.unschedulable));
    h.shutdown().await;
}
