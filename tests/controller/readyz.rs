//! The controller's `/readyz`: 503 with a reason until its replica has reached the API server
//! and synced its Node cache, 200 then, 503 again while the API server is down for longer than
//! the lease duration, 200 once it is back. `/healthz` (liveness) stays 200 throughout.

use rollboot_testkit::http as common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    common::http(addr, "-", "GET", path, "text/plain", "").await
}

/// Polls `path` until it answers `code`, for at most `within`.
async fn wait_for(addr: SocketAddr, path: &str, code: u16, within: Duration) -> String {
    let start = Instant::now();
    loop {
        let (c, body) = get(addr, path).await;
        if c == code {
            return body;
        }
        assert!(
            start.elapsed() < within,
            "{path} still answers {c} ({body:?}) after {within:?}, expected {code}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_api_server() {
    // The simulation config: leaseDuration 3s, retryPeriod 500ms.
    let mut h = Harness::start(
        Scenario {
            nodes: 2,
            ..Scenario::default()
        },
        sim_config("").unwrap(),
    )
    .await
    .unwrap();
    // The API server is down when the replica starts: not ready, and it says why.
    h.cluster.outage(Duration::from_secs(3));
    h.start_controller(0).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(rollboot::metrics::serve_on(listener, h.metrics[0].clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (code, body) = get(addr, "/readyz").await;
    assert_eq!(code, 503, "ready during an outage at start-up: {body}");
    assert!(body.contains("API server"), "reason: {body}");
    assert_eq!(get(addr, "/healthz").await.0, 200);

    // The outage ends: ready once the elector got an answer and the Node cache synced.
    wait_for(addr, "/readyz", 200, Duration::from_secs(15)).await;

    // An outage longer than the lease duration makes it unready, with the reason.
    h.cluster.outage(Duration::from_secs(6));
    let body = wait_for(addr, "/readyz", 503, Duration::from_secs(5)).await;
    assert!(
        body.contains("no answer from the API server"),
        "reason: {body}"
    );
    assert_eq!(
        get(addr, "/healthz").await.0,
        200,
        "liveness during an outage"
    );

    // And ready again once the API server is back.
    wait_for(addr, "/readyz", 200, Duration::from_secs(15)).await;
    h.shutdown().await;
}
