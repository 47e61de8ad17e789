//! The Prometheus blocker against a tiny Prometheus stand-in (axum): firing alerts keep new
//! nodes from starting, ignored (`alertFilter`) and pending alerts (`firingOnly`) do not, and a
//! Prometheus that fails blocks (fail safe) until it answers again.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};

/// What the stand-in answers: `None` is a 500.
type Answer = Arc<Mutex<Option<serde_json::Value>>>;

async fn prometheus(answer: Answer) -> String {
    async fn alerts(State(a): State<Answer>) -> (StatusCode, String) {
        match a.lock().unwrap().clone() {
            Some(v) => (StatusCode::OK, v.to_string()),
            None => (StatusCode::INTERNAL_SERVER_ERROR, "down".into()),
        }
    }
    let app = Router::new()
        .route("/api/v1/alerts", get(alerts))
        .with_state(answer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn alerts(list: &[(&str, &str)]) -> serde_json::Value {
    serde_json::json!({"status": "success", "data": {"alerts": list.iter().map(|(n, s)|
        serde_json::json!({"labels": {"alertname": n, "severity": "critical"}, "state": s})
    ).collect::<Vec<_>>()}})
}

async fn harness(url: &str) -> Harness {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            std::env::var("TLOG").unwrap_or("rollboot=info,rollboot_sim::sim=warn".into()),
        )
        .with_test_writer()
        .try_init();
    let sc = Scenario {
        nodes: 2,
        pods_per_node: 3,
        ..Scenario::default()
    };
    let overrides = format!(
        "blockers:\n  prometheus:\n    url: {url}\n    alertFilter: Watchdog|Info.*\n    firingOnly: true\n"
    );
    let mut h = Harness::start(sc, sim_config(&overrides).unwrap())
        .await
        .unwrap();
    h.start_controller(0).await.unwrap();
    h.start_all_agents().await.unwrap();
    h
}

async fn nothing_starts_for_a_while(h: &Harness, why: &str) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in h.nodes().await.unwrap() {
        assert_eq!(n.state, None, "{} started while {why}", n.name);
        assert!(!n.unschedulable, "{} cordoned while {why}", n.name);
    }
}

async fn completes(h: &Harness, names: &[String]) {
    let set: BTreeSet<String> = names.iter().cloned().collect();
    let done = h
        .wait_for(Duration::from_secs(60), |ns| Harness::finished(ns, &set))
        .await
        .unwrap();
    assert!(done, "the rollout did not complete once alerts cleared");
    for n in names {
        assert_eq!(h.reboots(n), 1, "{n}");
    }
    let inv = h.cluster.invariants();
    assert!(inv.pdb_violations.is_empty() && inv.repeated_reboots.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_alert_blocks_until_it_resolves_and_ignored_or_pending_ones_do_not() {
    let answer: Answer = Arc::new(Mutex::new(Some(alerts(&[
        ("Watchdog", "firing"),
        ("NodeDown", "firing"),
    ]))));
    let url = prometheus(answer.clone()).await;
    let h = harness(&url).await;
    let names = h.node_names().await.unwrap();
    h.flag(&names);
    nothing_starts_for_a_while(&h, "NodeDown was firing").await;
    // NodeDown resolves; only an ignored alert fires and another is only pending.
    *answer.lock().unwrap() = Some(alerts(&[
        ("Watchdog", "firing"),
        ("InfoInhibitor", "firing"),
        ("DiskFilling", "pending"),
    ]));
    completes(&h, &names).await;
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_prometheus_blocks_until_it_answers() {
    let answer: Answer = Arc::new(Mutex::new(None));
    let url = prometheus(answer.clone()).await;
    let h = harness(&url).await;
    let names = h.node_names().await.unwrap();
    h.flag(&names);
    nothing_starts_for_a_while(&h, "Prometheus was failing").await;
    // A malformed answer blocks too.
    *answer.lock().unwrap() = Some(serde_json::json!({"status": "success"}));
    nothing_starts_for_a_while(&h, "Prometheus answered without data").await;
    *answer.lock().unwrap() = Some(alerts(&[]));
    completes(&h, &names).await;
    h.shutdown().await;
}
