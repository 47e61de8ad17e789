//! The durations of the phases of reboot cycles: `rollboot_phase_duration_seconds{phase}`, a
//! histogram over [`PHASE_BUCKETS`].
//!
//! Owns the phases ([`CyclePhase`]), the buckets and the prometheus-client histograms, one per phase
//! seen. It must never block its callers: an observation is a short lock on its phase's
//! histogram.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use super::exposition::write;

/// Upper bounds (seconds) of the phase-duration histogram's buckets: a simulated phase takes
/// a second, a real drain minutes, a whole cycle up to an hour or two.
pub const PHASE_BUCKETS: [f64; 12] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0,
];

/// A timed part of a node's cycle: the `phase` label of `rollboot_phase_duration_seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CyclePhase {
    /// From `draining` until the reboot is requested.
    Drain,
    /// From the reboot request until the node is back (new boot ID, Ready).
    Reboot,
    /// From `verifying` until `done`.
    HealthGate,
    /// From the node's start (its lock entry) until `done`.
    Cycle,
}

impl CyclePhase {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CyclePhase::Drain => "drain",
            CyclePhase::Reboot => "reboot",
            CyclePhase::HealthGate => "health_gate",
            CyclePhase::Cycle => "cycle",
        }
    }
}

/// The label of `rollboot_phase_duration_seconds` (`le` is the histogram's own).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

/// A phase's histogram, made when the phase is first observed: a phase never seen has no
/// series.
fn histogram() -> Histogram {
    Histogram::new(PHASE_BUCKETS)
}

/// The histograms of the phases seen.
#[derive(Debug)]
pub struct PhaseDurations(Family<PhaseLabel, Histogram>);

impl Default for PhaseDurations {
    fn default() -> Self {
        PhaseDurations(Family::new_with_constructor(histogram))
    }
}

impl PhaseDurations {
    /// A phase ended after `seconds`: it lands in every bucket whose bound is at or above it.
    pub fn observe(&self, phase: CyclePhase, seconds: f64) {
        self.0
            .get_or_create(&PhaseLabel {
                phase: phase.as_str(),
            })
            .observe(seconds);
    }
}

impl Collector for PhaseDurations {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        write(
            &mut encoder,
            "phase_duration_seconds",
            "Duration of completed phases of reboot cycles (drain, reboot, health_gate, cycle)",
            &self.0,
        )
    }
}
