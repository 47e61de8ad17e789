//! The agent's Prometheus metrics and their `/metrics` and `/healthz` endpoints.
//!
//! Owns the agent's counters and their text exposition: the sentinel's errors
//! (`rollboot_sentinel_errors_total`: a command that cannot start, is killed, or exits with a
//! code that means neither "reboot" nor "no reboot"), the tokens the agent refused, by cause
//! (`rollboot_agent_refusals_total{cause}`), the host shutdowns logind announced
//! (`rollboot_agent_shutdowns_total`), the releases of the logind inhibitor by cause
//! (`rollboot_agent_inhibitor_releases_total{cause}`) and whether it is held now
//! (`rollboot_agent_inhibitor_held`). It must never block the agent: every update is an
//! atomic operation or a short uncontended lock.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::node::RefusalCause;

/// The counters of one agent.
#[derive(Debug, Default)]
pub struct AgentMetrics {
    sentinel_errors: AtomicU64,
    refusals: Mutex<BTreeMap<&'static str, u64>>,
    shutdowns: AtomicU64,
    releases: Mutex<BTreeMap<&'static str, u64>>,
    inhibitor_held: AtomicU64,
}

impl AgentMetrics {
    /// Counts a failed sentinel check.
    pub fn sentinel_error(&self) {
        self.sentinel_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The failed sentinel checks so far.
    pub fn sentinel_errors(&self) -> u64 {
        self.sentinel_errors.load(Ordering::Relaxed)
    }

    /// Counts a refused token.
    pub fn refusal(&self, cause: RefusalCause) {
        *self
            .refusals
            .lock()
            .expect("agent metrics")
            .entry(cause.as_str())
            .or_default() += 1;
    }

    /// Counts a `PrepareForShutdown(true)`: the host begins to shut down.
    pub fn shutdown_seen(&self) {
        self.shutdowns.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a release of the logind inhibitor, by cause (`logind::Release::as_str`: this
    /// module names no type of the logind guard, which counts through it).
    pub fn release(&self, cause: &'static str) {
        *self
            .releases
            .lock()
            .expect("agent metrics")
            .entry(cause)
            .or_default() += 1;
    }

    /// Whether the logind inhibitor is held now.
    pub fn inhibitor_held(&self, held: bool) {
        self.inhibitor_held
            .store(u64::from(held), Ordering::Relaxed);
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP rollboot_sentinel_errors_total Sentinel checks that gave no answer: the command could not start, was killed, or exited with a code that means neither reboot nor no reboot.\n# TYPE rollboot_sentinel_errors_total counter\nrollboot_sentinel_errors_total {}",
            self.sentinel_errors()
        );
        let _ = writeln!(
            out,
            "# HELP rollboot_agent_refusals_total Reboot tokens the agent refused or could not act on, by cause.\n# TYPE rollboot_agent_refusals_total counter"
        );
        for (cause, n) in self.refusals.lock().expect("agent metrics").iter() {
            let _ = writeln!(
                out,
                "rollboot_agent_refusals_total{{cause=\"{cause}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP rollboot_agent_shutdowns_total Host shutdowns logind announced to the agent (PrepareForShutdown), rollboot's own reboots included.\n# TYPE rollboot_agent_shutdowns_total counter\nrollboot_agent_shutdowns_total {}",
            self.shutdowns.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP rollboot_agent_inhibitor_releases_total Releases of the agent's logind delay inhibitor, by cause: drained (the node said drained), deadline (logind's delay nearly spent before that), ours (rollboot's own reboot), cancelled (the shutdown was cancelled).\n# TYPE rollboot_agent_inhibitor_releases_total counter"
        );
        for (cause, n) in self.releases.lock().expect("agent metrics").iter() {
            let _ = writeln!(
                out,
                "rollboot_agent_inhibitor_releases_total{{cause=\"{cause}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP rollboot_agent_inhibitor_held 1 while the agent holds a logind delay inhibitor for shutdown.\n# TYPE rollboot_agent_inhibitor_held gauge\nrollboot_agent_inhibitor_held {}",
            self.inhibitor_held.load(Ordering::Relaxed)
        );
        out
    }
}

/// Serves `/metrics` and `/healthz` on `listener` until the future is dropped.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    metrics: Arc<AgentMetrics>,
) -> std::io::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/metrics", get(move || async move { metrics.render() }))
        .route("/healthz", get(|| async { "ok" }));
    axum::serve(listener, app).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counters_are_rendered_with_their_labels() {
        let m = AgentMetrics::default();
        m.sentinel_error();
        m.sentinel_error();
        m.refusal(RefusalCause::WrongHost);
        let t = m.render();
        assert!(t.contains("\nrollboot_sentinel_errors_total 2\n"), "{t}");
        assert!(
            t.contains("rollboot_agent_refusals_total{cause=\"wrongHost\"} 1\n"),
            "{t}"
        );
    }

    #[test]
    fn shutdowns_and_inhibitor_releases_are_counted_by_cause() {
        let m = AgentMetrics::default();
        let t = m.render();
        assert!(t.contains("\nrollboot_agent_shutdowns_total 0\n"), "{t}");
        assert!(t.contains("\nrollboot_agent_inhibitor_held 0\n"), "{t}");
        m.inhibitor_held(true);
        m.shutdown_seen();
        m.release("deadline");
        m.release("drained");
        m.release("drained");
        let t = m.render();
        assert!(t.contains("\nrollboot_agent_shutdowns_total 1\n"), "{t}");
        assert!(t.contains("\nrollboot_agent_inhibitor_held 1\n"), "{t}");
        assert!(
            t.contains("rollboot_agent_inhibitor_releases_total{cause=\"drained\"} 2\n")
                && t.contains("rollboot_agent_inhibitor_releases_total{cause=\"deadline\"} 1\n"),
            "{t}"
        );
    }
}
