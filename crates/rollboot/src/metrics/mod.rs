//! The controller's Prometheus metrics and its `/metrics`, `/healthz` and `/readyz` endpoints.
//!
//! Owns the controller's metric families, on the prometheus-client crate (the Prometheus org's
//! Rust client): [`Metrics`] is the facade the controller, the hooks, the notifier, the drain,
//! the FleetLock server, the CLI and the simulator update and render; the families live by
//! concern in its children: the replica's own counters and leadership (`replica`), the phase
//! durations (`phases`), the outcomes counted by label (`outcomes`), the gauges computed from
//! the config at each scrape (`config_gauges`), the rollout's gauges set by the leader
//! (`rollout`), the readiness behind `/readyz` (`readiness`) and the endpoints (`endpoints`).
//! `exposition` writes them as Prometheus text 0.0.4, as `/metrics` always has; why not
//! OpenMetrics, and the exact differences from the hand-written exposition it replaced, are in
//! its doc. It must never block the controller: every update is an atomic operation or a short
//! uncontended lock.
//!
//! The rollout's gauges (nodes by state, blockers by kind, per-node state ages, the lock's
//! holder, the halt) are set by the leader on each pass and cleared when it stops leading, so
//! a standby replica exports none of them and dashboards can aggregate with `max`. The window
//! gauges are computed from the config at scrape time, by every replica. The deploy/monitoring
//! dashboard and alerts use only families rendered here (tests/monitoring.rs checks).

use std::sync::{Arc, Mutex};

use crate::config::Config;

mod config_gauges;
mod endpoints;
mod exposition;
mod outcomes;
mod phases;
mod readiness;
mod replica;
mod rollout;
#[cfg(test)]
mod tests;

pub use config_gauges::state_timeouts;
pub use endpoints::serve_on;
pub use phases::{CyclePhase, PHASE_BUCKETS};
pub use readiness::Readiness;
pub use rollout::{RolloutGauges, BLOCKER_KINDS, NODE_STATES};

use config_gauges::ConfigGauges;
use outcomes::OutcomeCounters;
use phases::PhaseDurations;
use replica::ReplicaCounters;
use rollout::RolloutFamilies;

/// Counters and gauges of one controller replica.
#[derive(Debug, Default)]
pub struct Metrics {
    replica: Arc<ReplicaCounters>,
    phases: Arc<PhaseDurations>,
    outcomes: Arc<OutcomeCounters>,
    /// The address this replica's FleetLock server is bound to, once bound.
    fleetlock_addr: Mutex<Option<std::net::SocketAddr>>,
    rollout: Mutex<Option<RolloutGauges>>,
    config: Mutex<Option<Arc<Config>>>,
    /// What `/readyz` answers from.
    pub readiness: Readiness,
}

impl Metrics {
    /// Whether this replica leads. A replica that stops leading stops exporting the rollout's
    /// gauges (they would go stale).
    pub fn set_leader(&self, l: bool) {
        self.replica.leader.set(u64::from(l));
        if !l {
            *self.rollout.lock().expect("metrics") = None;
        }
    }
    /// The replica's identity (the `identity` label of `rollboot_leader_info`) and its config
    /// (the window gauges are computed from its schedule at each scrape).
    pub fn replica(&self, identity: &str, config: Arc<Config>) {
        *self.replica.identity.lock().expect("metrics") = identity.to_string();
        *self.config.lock().expect("metrics") = Some(config);
    }
    /// A phase of a node's cycle ended after `seconds`.
    pub fn phase(&self, phase: CyclePhase, seconds: f64) {
        self.phases.observe(phase, seconds);
    }
    /// An eviction refused: `budget` (429, a PodDisruptionBudget allows no disruption now) or
    /// `server_error` (5xx: usually more than one budget covers the pod).
    pub fn eviction_refused(&self, reason: &'static str) {
        self.outcomes.eviction_refused(reason);
    }
    /// A notification's outcome (`sent`, `failed`, `timeout`, `dropped`) for one sink.
    pub fn notification(&self, sink: &str, event: &str, outcome: &str) {
        self.outcomes.notification(sink, event, outcome);
    }
    /// A hook's outcome at a phase (the hooks runtime calls this; labels are its own words).
    pub fn hook_result(&self, phase: &str, outcome: &str) {
        self.outcomes.hook_result(phase, outcome);
    }
    /// An Alertmanager silence's fate: `created`, `failed`, `expired`, `expire_failed`.
    pub fn silence(&self, outcome: &'static str) {
        self.outcomes.silence(outcome);
    }
    /// A FleetLock request answered: its endpoint (`pre-reboot`, `steady-state`, `unknown`)
    /// and outcome (`ok`, or the answer's kind; `forwarded` when another replica answered).
    pub fn fleetlock_request(&self, endpoint: &'static str, outcome: &'static str) {
        self.outcomes.fleetlock_request(endpoint, outcome);
    }
    /// Records where this replica's FleetLock server listens.
    pub fn set_fleetlock_addr(&self, addr: Option<std::net::SocketAddr>) {
        *self.fleetlock_addr.lock().expect("metrics") = addr;
    }
    /// Where this replica's FleetLock server listens, once bound.
    pub fn fleetlock_addr(&self) -> Option<std::net::SocketAddr> {
        *self.fleetlock_addr.lock().expect("metrics")
    }
    /// The rollout as the leader saw it on its last pass.
    pub fn set_rollout(&self, g: RolloutGauges) {
        *self.rollout.lock().expect("metrics") = Some(g);
    }
    /// The rollout gauges last set, while leading.
    pub fn rollout(&self) -> Option<RolloutGauges> {
        self.rollout.lock().expect("metrics").clone()
    }
    /// Nodes in the lock.
    pub fn set_in_flight(&self, n: usize) {
        self.replica.in_flight.set(n as u64);
    }
    /// A node started.
    pub fn started(&self) {
        self.replica.started.inc();
    }
    /// A node finished.
    pub fn done(&self) {
        self.replica.done.inc();
    }
    /// A finished cycle was a shutdown of its host that went before its drain was over.
    pub fn undrained(&self) {
        self.replica.undrained.inc();
    }
    /// A node failed.
    pub fn failed(&self) {
        self.replica.failed.inc();
    }
    /// Pods evicted.
    pub fn evicted(&self, n: usize) {
        self.replica.evicted.inc_by(n as u64);
    }
    /// An error, by label.
    pub fn error(&self, label: &'static str) {
        self.replica.error(label);
    }
    /// Whether this replica leads, as last published.
    pub fn is_leader(&self) -> bool {
        self.replica.leader.get() == 1
    }

    /// Nodes finished so far.
    pub fn done_count(&self) -> u64 {
        self.replica.done.get()
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        self.render_at(chrono::Utc::now())
    }

    /// The text exposition with the window gauges computed at `now`. The families are written
    /// in this order: the replica's, the phases', the outcomes', the config's (once a config is
    /// loaded), the rollout's.
    pub(crate) fn render_at(&self, now: chrono::DateTime<chrono::Utc>) -> String {
        let mut collectors: Vec<Box<dyn prometheus_client::collector::Collector>> = vec![
            Box::new(self.replica.clone()),
            Box::new(self.phases.clone()),
            Box::new(self.outcomes.clone()),
        ];
        if let Some(config) = self.config.lock().expect("metrics").clone() {
            collectors.push(Box::new(ConfigGauges { config, now }));
        }
        collectors.push(Box::new(RolloutFamilies(self.rollout())));
        exposition::encode(collectors)
    }
}
