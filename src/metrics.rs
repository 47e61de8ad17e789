//! The controller's Prometheus metrics and its `/metrics`, `/healthz` and `/readyz` endpoints.
//!
//! Owns the counters and gauges and their text exposition, and the readiness state behind
//! `/readyz`. It must never block the controller: every update is an atomic operation or a
//! short uncontended lock.
//!
//! `/healthz` is liveness: the process answers HTTP. `/readyz` answers 200 only while the
//! replica can act or stand by correctly: its controller loop runs with a loaded config, its
//! Node cache has synced at least once, and its leader elector's last answer from the API
//! server (it tries every retry period, leader or not) is younger than the lease duration.
//! Otherwise 503 with a one-line reason.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::lease::Leadership;

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
    /// What `/readyz` answers from.
    pub readiness: Readiness,
}

/// Whether the replica is ready, as `/readyz` reports it. Set by the controller loop.
#[derive(Default)]
pub struct Readiness {
    /// The running replica's leadership handle (its elector's API contact) and lease duration.
    replica: Mutex<Option<(Leadership, Duration)>>,
    nodes_synced: AtomicBool,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("ready", &self.check())
            .finish()
    }
}

impl Readiness {
    /// A controller replica started with a loaded config: readiness now follows its elector.
    /// Its Node cache starts unsynced (a config reload starts a new replica and a new cache).
    pub fn replica_started(&self, leadership: Leadership, lease_duration: Duration) {
        self.nodes_synced.store(false, Ordering::Relaxed);
        *self.replica.lock().expect("readiness") = Some((leadership, lease_duration));
    }

    /// The Node cache received its initial list.
    pub fn nodes_synced(&self) {
        self.nodes_synced.store(true, Ordering::Relaxed);
    }

    /// `Ok` when ready, else why not.
    pub fn check(&self) -> Result<(), String> {
        let (contact, lease_duration) = match &*self.replica.lock().expect("readiness") {
            Some((l, d)) => (l.contact(), *d),
            None => return Err("controller not started: no config loaded yet".into()),
        };
        let error = contact
            .last_error
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        match contact.last_answer {
            None => return Err(format!("no answer from the API server yet{error}")),
            Some(t) if t.elapsed() > lease_duration => {
                return Err(format!(
                    "no answer from the API server for {}s (lease duration {}s){error}",
                    t.elapsed().as_secs(),
                    lease_duration.as_secs_f64()
                ))
            }
            Some(_) => {}
        }
        if !self.nodes_synced.load(Ordering::Relaxed) {
            return Err("node cache not synced yet".into());
        }
        Ok(())
    }
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

/// Serves `/metrics`, `/healthz` and `/readyz` on a bound listener until the process ends (the
/// caller binds, so that an address in use is a start-up error it reports).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
) -> std::io::Result<()> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let ready = metrics.clone();
    let app = axum::Router::new()
        .route("/metrics", get(move || async move { metrics.render() }))
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || async move {
                match ready.readiness.check() {
                    Ok(()) => (StatusCode::OK, "ok".to_string()),
                    Err(why) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("not ready: {why}\n"),
                    ),
                }
            }),
        );
    axum::serve(listener, app).await
}
