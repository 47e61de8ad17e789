//! The replica's own families, counted as things happen: whether it leads (`rollboot_leader`
//! and `rollboot_leader_info{identity}`), the nodes in the maintenance lock, the reboot cycles
//! started, finished, shut down undrained and failed, the pods evicted and the errors by kind.
//!
//! Owns these prometheus-client gauges and counters and the order and help texts they are
//! written with. It must never block its callers: an update is an atomic operation, or a short
//! lock to name the identity or to add an error kind not seen before.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::exposition::{write, write_gauges};

/// The label of `rollboot_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorKindLabel {
    kind: &'static str,
}

/// The replica's gauges and counters.
#[derive(Debug, Default)]
pub struct ReplicaCounters {
    /// 1 while this replica leads.
    pub leader: Gauge<u64, AtomicU64>,
    /// The `identity` label of `rollboot_leader_info`.
    pub identity: Mutex<String>,
    pub in_flight: Gauge<u64, AtomicU64>,
    pub started: Counter,
    pub done: Counter,
    pub undrained: Counter,
    pub failed: Counter,
    pub evicted: Counter,
    errors: Family<ErrorKindLabel, Counter>,
}

impl ReplicaCounters {
    /// Counts an error of `kind`.
    pub fn error(&self, kind: &'static str) {
        self.errors.get_or_create(&ErrorKindLabel { kind }).inc();
    }
}

impl Collector for ReplicaCounters {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let e = &mut encoder;
        write(e, "leader", "1 while this replica leads", &self.leader)?;
        write(
            e,
            "nodes_in_flight",
            "Nodes in the maintenance lock",
            &self.in_flight,
        )?;
        write(e, "nodes_started", "Reboot cycles started", &self.started)?;
        write(e, "nodes_done", "Reboot cycles finished", &self.done)?;
        write(
            e,
            "shutdowns_undrained",
            "Finished cycles whose host shut down by itself before the drain was over (the pods went down with it, budgets not kept)",
            &self.undrained,
        )?;
        write(e, "nodes_failed", "Reboot cycles failed", &self.failed)?;
        write(e, "pods_evicted", "Pods evicted", &self.evicted)?;
        write(e, "errors", "Errors by kind", &self.errors)?;
        let identity = self.identity.lock().expect("metrics").clone();
        write_gauges(
            e,
            "leader_info",
            "1 while the replica with this identity leads, else 0",
            [([("identity", identity.as_str())], self.leader.get())],
        )
    }
}
