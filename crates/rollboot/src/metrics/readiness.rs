//! Whether the replica is ready, as `/readyz` reports it: its controller loop runs with a
//! loaded config, its Node cache has synced at least once, and its leader elector's last
//! answer from the API server (it tries every retry period, leader or not) is younger than the
//! lease duration.
//!
//! Owns that state, set by the controller loop. It must never block the controller (an update
//! is an atomic store or a short lock) and never ask the API server itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::lease::Leadership;

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
