//! What the leader's loop and its per-node tasks share.
//!
//! Owns [`Ctx`]: the config, this replica's leadership and the identity it holds the lock
//! under, the bell that wakes the leader's loop, and, behind them, the services the steps call
//! ([`Services`]) and what the controller knows of the cluster ([`ClusterCache`]). A clone is
//! cheap: each part is shared. It must never hold anything of its own beyond these parts, nor
//! write to the cluster: writes are [`super::writes`]'s.

use std::sync::Arc;

use kube::Client;
use tokio::sync::Notify;

use super::cluster_cache::ClusterCache;
use super::services::Services;
use crate::budgets::{HeadroomSource, WorkloadWatches};
use crate::config::Config;
use crate::lease::Leadership;

/// Everything the leader's loop and its per-node tasks share.
#[derive(Clone)]
pub(super) struct Ctx {
    pub(super) config: Arc<Config>,
    pub(super) leadership: Leadership,
    /// The identity rollboot holds the maintenance lock under ([`crate::lock::lock_owner`]).
    pub(super) lock_owner: String,
    /// Wakes the leader's loop for a pass.
    pub(super) wake: Arc<Notify>,
    /// The clients and senders the steps call.
    pub(super) services: Arc<Services>,
    /// The Nodes and the lock as this replica knows them.
    pub(super) cache: Arc<ClusterCache>,
}

/// The budget-aware pick reads the nodes' pods with the controller's client, keeps those the
/// drain would evict, and finds their budgets in the controller's watches.
impl HeadroomSource for Ctx {
    fn client(&self) -> &Client {
        &self.services.client
    }

    fn evictable(&self, pod: &k8s_openapi::api::core::v1::Pod) -> bool {
        // DaemonSets taken to exist: their pods never leave with a drain.
        let selector = self.config.drain_pod_selector();
        crate::drain::classify(pod, &self.config.drain, selector, true)
            == crate::drain::Disposition::Evict
    }

    fn watches(&self) -> &WorkloadWatches {
        &self.services.workloads
    }
}
