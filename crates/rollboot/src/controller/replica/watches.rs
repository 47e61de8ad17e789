//! The watches that fill a replica's caches: every Node, and the maintenance lock's Lease.
//!
//! Owns the Node watch (each Node trimmed of images and managedFields, keeping the hooks' gate
//! annotations; what each event changed noted for the next pass; a counter a task can wait on)
//! and the lock watch (the record kept newest-first; a Lease deleted, or missing from a
//! relist, remembered as deleted with the nodes it listed, so the next pass rebuilds it). Each
//! event wakes the leader's loop. It must never write: the watches only read.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::Notify;

use crate::config::Config;
use crate::controller::node_cache::NodeChanges;
use crate::controller::task::Task;
use crate::lock::LockRecord;
use crate::metrics::Metrics;
use crate::node as proto;

/// A replica's caches, the watches that fill them, and what they wake.
pub(super) struct Caches {
    /// Woken by every event of either watch (and by the steps): the leader's loop waits on it.
    pub(super) wake: Arc<Notify>,
    pub(super) nodes: NodeCache,
    pub(super) lock: LockCache,
}

/// Starts the watches of every Node and of the lock's Lease.
pub(super) fn start(client: &Client, config: &Config, metrics: &Arc<Metrics>) -> Caches {
    let wake = Arc::new(Notify::new());
    let nodes = nodes(client, config, &wake, metrics);
    let lock = lock(client, config, &wake);
    Caches { wake, nodes, lock }
}

/// The Node cache and what feeds it; dropping it stops the watch.
pub(super) struct NodeCache {
    /// The watch-backed Node cache.
    pub(super) store: reflector::Store<Node>,
    /// Counts the watch's events.
    pub(super) seq: tokio::sync::watch::Receiver<u64>,
    /// What the watch changed since the views last looked.
    pub(super) changes: Arc<Mutex<NodeChanges>>,
    pub(super) _watch: Task,
}

/// Starts the watch of every Node; each event is noted, counted and wakes `wake`, and the
/// first complete list tells the readiness probe the Nodes are synced.
fn nodes(
    client: &Client,
    config: &Config,
    wake: &Arc<Notify>,
    metrics: &Arc<Metrics>,
) -> NodeCache {
    let (store, writer) = reflector::store::<Node>();
    let (seq_tx, seq) = tokio::sync::watch::channel(0u64);
    let changes: Arc<Mutex<NodeChanges>> = Default::default();
    // The hooks' gate annotations are kept in the cache with rollboot's own.
    let keep = config.hooks.gate_keys();
    let watch = {
        let (wake, metrics) = (wake.clone(), metrics.clone());
        let changes = changes.clone();
        let api: Api<Node> = Api::all(client.clone());
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(move |n| *n = proto::trim_keeping(std::mem::take(n), &keep))
            .reflect(writer);
        Task(tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                if let Ok(e) = &ev {
                    changes.lock().expect("node changes").note(e);
                }
                match ev {
                    Err(e) => tracing::warn!(error = %e, "node watch"),
                    Ok(watcher::Event::InitDone) => metrics.readiness.nodes_synced(),
                    Ok(_) => {}
                }
                seq_tx.send_modify(|s| *s += 1);
                wake.notify_one();
            }
        }))
    };
    NodeCache {
        store,
        seq,
        changes,
        _watch: watch,
    }
}

/// The lock's record as last read or written, and what feeds it; dropping it stops the watch.
pub(super) struct LockCache {
    pub(super) record: Arc<Mutex<LockRecord>>,
    pub(super) _watch: Task,
}

/// Starts the watch of the lock's Lease (by name, in its namespace); each event updates the
/// record (never with an older one) and wakes `wake`.
fn lock(client: &Client, config: &Config, wake: &Arc<Notify>) -> LockCache {
    let record = Arc::new(Mutex::new(LockRecord::default()));
    let watch = {
        let wake = wake.clone();
        let record = record.clone();
        let api: Api<Lease> = Api::namespaced(client.clone(), &config.lock.namespace);
        let stream = watcher(
            api,
            watcher::Config::default().fields(&format!("metadata.name={}", config.lock.name)),
        )
        .default_backoff();
        Task(tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut follow = LockWatch::default();
            while let Some(ev) = stream.next().await {
                if let Some(new) = follow.record_after(ev, &record) {
                    let mut cur = record.lock().expect("lock cache");
                    if new.version() >= cur.version() {
                        *cur = new;
                    }
                }
                wake.notify_one();
            }
        }))
    };
    LockCache {
        record,
        _watch: watch,
    }
}

/// What the lock watch has seen of its list under way.
#[derive(Default)]
struct LockWatch {
    /// Whether the Lease was seen in the list under way: a list without it means it is gone
    /// (deleted while the watch was down).
    listed: bool,
}

impl LockWatch {
    /// The record after `ev`, given the one kept in `record`; `None`: unchanged.
    fn record_after(
        &mut self,
        ev: Result<watcher::Event<Lease>, watcher::Error>,
        record: &Mutex<LockRecord>,
    ) -> Option<LockRecord> {
        match ev {
            Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => {
                self.listed = true;
                Some(LockRecord::from_lease(Some(l)))
            }
            Ok(watcher::Event::Delete(l)) => {
                let gone = LockRecord::from_lease(Some(l));
                let cur = record.lock().expect("lock cache").clone();
                let mut remembered = cur.known_in_flight().clone();
                remembered.extend(gone.entries.clone());
                Some(LockRecord::deleted(
                    gone.version().max(cur.version()),
                    remembered,
                ))
            }
            Ok(watcher::Event::Init) => {
                self.listed = false;
                None
            }
            Ok(watcher::Event::InitDone) if !self.listed => {
                let cur = record.lock().expect("lock cache").clone();
                Some(LockRecord::deleted(
                    cur.version(),
                    cur.known_in_flight().clone(),
                ))
            }
            Ok(watcher::Event::InitDone) => None,
            Err(e) => {
                tracing::warn!(error = %e, "maintenance lock watch");
                None
            }
        }
    }
}
