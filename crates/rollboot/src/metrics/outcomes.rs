//! The outcomes the controller counts by label: evictions refused by reason, notifications by
//! sink, event and outcome, hook results by phase and outcome, Alertmanager silences by
//! outcome, FleetLock requests by endpoint and outcome.
//!
//! Owns these prometheus-client counter families and their help texts. It must never block
//! its callers (an update is a short lock on its family) and never decide a label's words:
//! the callers name them.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::exposition::write;

/// The label of `rollboot_evictions_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// The labels of `rollboot_notifications_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NotificationLabels {
    sink: String,
    event: String,
    outcome: String,
}

/// The labels of `rollboot_hook_results_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabels {
    phase: String,
    outcome: String,
}

/// The label of `rollboot_silences_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// The labels of `rollboot_fleetlock_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FleetLockLabels {
    endpoint: &'static str,
    outcome: &'static str,
}

/// The counter families of outcomes.
#[derive(Debug, Default)]
pub struct OutcomeCounters {
    evictions_refused: Family<ReasonLabel, Counter>,
    notifications: Family<NotificationLabels, Counter>,
    hooks: Family<HookLabels, Counter>,
    silences: Family<OutcomeLabel, Counter>,
    fleetlock: Family<FleetLockLabels, Counter>,
}

impl OutcomeCounters {
    /// An eviction refused, by reason.
    pub fn eviction_refused(&self, reason: &'static str) {
        self.evictions_refused
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// A notification's outcome for one sink and event.
    pub fn notification(&self, sink: &str, event: &str, outcome: &str) {
        let labels = NotificationLabels {
            sink: sink.into(),
            event: event.into(),
            outcome: outcome.into(),
        };
        self.notifications.get_or_create(&labels).inc();
    }

    /// A hook's outcome at a phase.
    pub fn hook_result(&self, phase: &str, outcome: &str) {
        let labels = HookLabels {
            phase: phase.into(),
            outcome: outcome.into(),
        };
        self.hooks.get_or_create(&labels).inc();
    }

    /// A silence's fate.
    pub fn silence(&self, outcome: &'static str) {
        self.silences.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// A FleetLock request answered.
    pub fn fleetlock_request(&self, endpoint: &'static str, outcome: &'static str) {
        self.fleetlock
            .get_or_create(&FleetLockLabels { endpoint, outcome })
            .inc();
    }
}

impl Collector for OutcomeCounters {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let e = &mut encoder;
        write(
            e,
            "evictions_refused",
            "Evictions refused: budget (429, a PodDisruptionBudget allows none now), server_error (5xx, usually overlapping budgets), denied (400/403/422, an admission webhook or policy, or RBAC)",
            &self.evictions_refused,
        )?;
        write(
            e,
            "notifications",
            "Notifications by sink, event and outcome (sent, failed, timeout, dropped)",
            &self.notifications,
        )?;
        write(
            e,
            "hook_results",
            "Hook calls and checks by phase and outcome",
            &self.hooks,
        )?;
        write(
            e,
            "silences",
            "Alertmanager silences of nodes in maintenance, by outcome (created, failed, expired, expire_failed)",
            &self.silences,
        )?;
        write(
            e,
            "fleetlock_requests",
            "FleetLock requests answered by this replica, by endpoint and outcome (ok, the answer's kind, or forwarded)",
            &self.fleetlock,
        )
    }
}
