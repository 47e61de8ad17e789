//! The agent's Prometheus metrics and their `/metrics` and `/healthz` endpoints.
//!
//! Owns the agent's counters and their text exposition: the sentinel's errors
//! (`rollboot_sentinel_errors_total`: a command that cannot start, is killed, or exits with a
//! code that means neither "reboot" nor "no reboot"), the tokens the agent refused, by cause
//! (`rollboot_agent_refusals_total{cause}`), the host shutdowns logind announced
//! (`rollboot_agent_shutdowns_total`), the releases of the logind inhibitor by cause
//! (`rollboot_agent_inhibitor_releases_total{cause}`) and whether it is held now
//! (`rollboot_agent_inhibitor_held`), how a shutdown nobody planned would go on the node
//! (`rollboot_agent_shutdown_drain{state}`), whether the host the agent reads is its Node's
//! (`rollboot_agent_host_matches_node`) and the config reloads
//! (`rollboot_agent_config_reloads_total`). It must never block the agent: every update is an
//! atomic operation or a short uncontended lock.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::node::{RefusalCause, ShutdownDrain};

/// The counters of one agent.
#[derive(Debug, Default)]
pub struct AgentMetrics {
    sentinel_errors: AtomicU64,
    refusals: Mutex<BTreeMap<&'static str, u64>>,
    shutdowns: AtomicU64,
    releases: Mutex<BTreeMap<&'static str, u64>>,
    inhibitor_held: AtomicU64,
    shutdown_drain: Mutex<Option<ShutdownDrain>>,
    /// 0: not compared yet; 1: matches; 2: differs.
    host_matches: AtomicU64,
    config_reloads: AtomicU64,
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

    /// How a shutdown nobody planned would go on the node now.
    pub fn shutdown_drain(&self, now: ShutdownDrain) {
        *self.shutdown_drain.lock().expect("agent metrics") = Some(now);
    }

    /// Whether the host the agent reads is its Node's (boot ID, machine ID).
    pub fn host_matches(&self, matches: bool) {
        self.host_matches
            .store(if matches { 1 } else { 2 }, Ordering::Relaxed);
    }

    /// Counts a config reload.
    pub fn config_reloaded(&self) {
        self.config_reloads.fetch_add(1, Ordering::Relaxed);
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
        if let Some(now) = *self.shutdown_drain.lock().expect("agent metrics") {
            let _ = writeln!(
                out,
                "# HELP rollboot_agent_shutdown_drain How a shutdown of the host nobody planned would go, 1 for the current state: ready (drained under the budgets first), kubelet (the kubelet's graceful node shutdown kills the pods first, without evictions), shortDelay (logind's delay is shorter than drain.timeout), noLogind (nothing drained).\n# TYPE rollboot_agent_shutdown_drain gauge"
            );
            for state in [
                ShutdownDrain::Ready,
                ShutdownDrain::Kubelet,
                ShutdownDrain::ShortDelay,
                ShutdownDrain::NoLogind,
            ] {
                let _ = writeln!(
                    out,
                    "rollboot_agent_shutdown_drain{{state=\"{}\"}} {}",
                    state.as_str(),
                    u8::from(state == now)
                );
            }
        }
        match self.host_matches.load(Ordering::Relaxed) {
            0 => {}
            v => {
                let _ = writeln!(
                    out,
                    "# HELP rollboot_agent_host_matches_node 1 while the host's boot ID (and machine ID) as the agent reads them are the ones its Node reports; 0 while they differ (the agent refuses every reboot token).\n# TYPE rollboot_agent_host_matches_node gauge\nrollboot_agent_host_matches_node {}",
                    u8::from(v == 1)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP rollboot_agent_config_reloads_total Config files the agent took while running.\n# TYPE rollboot_agent_config_reloads_total counter\nrollboot_agent_config_reloads_total {}",
            self.config_reloads.load(Ordering::Relaxed)
        );
        out
    }
}

/// Connections the agent's server holds at once: its clients are a Prometheus or two and the
/// kubelet's probes, and the agent's memory limit is 32 MiB (deploy/agent.yaml).
const MAX_CONNECTIONS: usize = 16;

/// Serves `/metrics` and `/healthz` on `listener` until the future is dropped, within
/// production's [`crate::serve::Limits`] but for [`MAX_CONNECTIONS`].
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    metrics: Arc<AgentMetrics>,
) -> std::io::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/metrics", get(move || async move { metrics.render() }))
        .route("/healthz", get(|| async { "ok" }));
    let limits = crate::serve::Limits {
        max_connections: MAX_CONNECTIONS,
        ..crate::serve::Limits::default()
    };
    crate::serve::serve(listener, app, limits).await
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
    fn how_a_shutdown_would_go_and_the_hosts_match_are_gauges() {
        let m = AgentMetrics::default();
        let t = m.render();
        assert!(!t.contains("rollboot_agent_shutdown_drain{"), "{t}");
        assert!(!t.contains("rollboot_agent_host_matches_node "), "{t}");
        m.shutdown_drain(ShutdownDrain::Kubelet);
        m.host_matches(false);
        m.config_reloaded();
        let t = m.render();
        assert!(
            t.contains("rollboot_agent_shutdown_drain{state=\"kubelet\"} 1\n")
                && t.contains("rollboot_agent_shutdown_drain{state=\"ready\"} 0\n"),
            "{t}"
        );
        assert!(t.contains("\nrollboot_agent_host_matches_node 0\n"), "{t}");
        assert!(
            t.contains("\nrollboot_agent_config_reloads_total 1\n"),
            "{t}"
        );
        m.host_matches(true);
        assert!(m
            .render()
            .contains("\nrollboot_agent_host_matches_node 1\n"));
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

    #[tokio::test]
    async fn the_agents_metrics_server_is_served_within_bounds() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_on(listener, Arc::new(AgentMetrics::default())));
        let answer = crate::serve::test_client::answer(
            addr,
            b"GET /metrics HTTP/1.1\r\nhost: a\r\ncontent-length: 100000\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    }
}
