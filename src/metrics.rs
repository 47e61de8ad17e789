//! The controller's Prometheus metrics and its `/metrics`, `/healthz` and `/readyz` endpoints.
//!
//! Owns the counters and gauges and their text exposition. It must never block the controller:
//! every update is an atomic operation.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Counters and gauges of one controller replica.
#[derive(Debug, Default)]
pub struct Metrics {
    leader: AtomicU64,
    in_flight: AtomicU64,
    started: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
    evicted: AtomicU64,
    errors: Mutex<BTreeMap<&'static str, u64>>,
}

impl Metrics {
    /// Whether this replica leads.
    pub fn set_leader(&self, l: bool) {
        self.leader.store(l as u64, Ordering::Relaxed);
    }
    /// Nodes in the lock.
    pub fn set_in_flight(&self, n: usize) {
        self.in_flight.store(n as u64, Ordering::Relaxed);
    }
    /// A node started.
    pub fn started(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
    }
    /// A node finished.
    pub fn done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
    /// A node failed.
    pub fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }
    /// Pods evicted.
    pub fn evicted(&self, n: usize) {
        self.evicted.fetch_add(n as u64, Ordering::Relaxed);
    }
    /// An error, by label.
    pub fn error(&self, label: &'static str) {
        *self
            .errors
            .lock()
            .expect("metrics")
            .entry(label)
            .or_default() += 1;
    }
    /// Whether this replica leads, as last published.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed) == 1
    }

    /// Nodes finished so far.
    pub fn done_count(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let g = |s: &mut String, name: &str, help: &str, kind: &str, v: u64| {
            let _ = writeln!(
                s,
                "# HELP rollboot_{name} {help}\n# TYPE rollboot_{name} {kind}\nrollboot_{name} {v}"
            );
        };
        g(
            &mut s,
            "leader",
            "1 while this replica leads",
            "gauge",
            self.leader.load(Ordering::Relaxed),
        );
        g(
            &mut s,
            "nodes_in_flight",
            "Nodes in the maintenance lock",
            "gauge",
            self.in_flight.load(Ordering::Relaxed),
        );
        g(
            &mut s,
            "nodes_started_total",
            "Reboot cycles started",
            "counter",
            self.started.load(Ordering::Relaxed),
        );
        g(
            &mut s,
            "nodes_done_total",
            "Reboot cycles finished",
            "counter",
            self.done.load(Ordering::Relaxed),
        );
        g(
            &mut s,
            "nodes_failed_total",
            "Reboot cycles failed",
            "counter",
            self.failed.load(Ordering::Relaxed),
        );
        g(
            &mut s,
            "pods_evicted_total",
            "Pods evicted",
            "counter",
            self.evicted.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            s,
            "# HELP rollboot_errors_total Errors by kind\n# TYPE rollboot_errors_total counter"
        );
        for (k, v) in self.errors.lock().expect("metrics").iter() {
            let _ = writeln!(s, "rollboot_errors_total{{kind=\"{k}\"}} {v}");
        }
        s
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until the process ends.
pub async fn serve(addr: std::net::SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/metrics", get(move || async move { metrics.render() }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await
}
