//! What the leader's steps call: the clients and the senders.
//!
//! Owns [`Services`]: the API clients (one without kube's transparent 429 retry, for
//! evictions), the maintenance lock's Lease, the Events, the metrics and the rollout's
//! notifications, the blockers' and the silences' Alertmanagers and Prometheus, the
//! fire-and-forget webhooks' sender, and the workload watches the health gates, the drains and
//! the budget-aware pick share. Each is built once per replica ([`super::replica`]) and only
//! called. It must never hold what the controller knows of the cluster (that is
//! [`super::cluster_cache`]'s), nor decide anything.

use std::sync::Arc;

use kube::Client;

use super::alerts::AlertSource;
use super::observe::Observer;
use crate::budgets::WorkloadWatches;
use crate::events::Recorder;
use crate::hooks::call::Firer;
use crate::lease::LeaseRef;
use crate::metrics::Metrics;
use crate::silences::client::Alertmanager;
use crate::silences::Matcher;

/// The clients and senders the leader's loop and its per-node tasks call.
pub(super) struct Services {
    pub(super) client: Client,
    /// Without kube's transparent 429 retry: an eviction refused by a budget must reach the drain.
    pub(super) evict_client: Client,
    /// The maintenance lock's Lease.
    pub(super) lock: LeaseRef,
    pub(super) events: Recorder,
    pub(super) metrics: Arc<Metrics>,
    /// The rollout's metrics and notifications.
    pub(super) observe: Arc<Observer>,
    /// `blockers.prometheus`, when configured.
    pub(super) alerts: Option<AlertSource>,
    /// `blockers.alertmanager`, when configured: the Alertmanager and the filter's matchers.
    pub(super) am_alerts: Option<(Alertmanager, Vec<Matcher>)>,
    /// `silences.alertmanager`, when configured: the Alertmanager and the silence's matchers
    /// (with `{{node}}` still in them).
    pub(super) silencer: Option<(Alertmanager, Vec<Matcher>)>,
    /// Sends the fire-and-forget webhooks.
    pub(super) firer: Firer,
    /// The workload watches the health gates, the drains and the budget-aware pick share.
    pub(super) workloads: Arc<WorkloadWatches>,
}
