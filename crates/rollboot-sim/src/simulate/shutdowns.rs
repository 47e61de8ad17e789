//! Simulated unplanned shutdowns: a host that begins to shut down by itself (an operator's
//! `systemctl reboot`, a cloud maintenance event), with logind delaying it while the agent's
//! inhibitor lock lives, at most the scenario's `inhibitDelaySeconds`.
//!
//! Owns the simulated logind each agent talks to ([`SimLogind`], rollboot's
//! [`HostShutdowns`]) and the shutdown itself ([`Shutdowns::shut_down`]): `PrepareForShutdown`
//! sent to the host's agent, the wait until every inhibitor lock is released or the delay runs
//! out, what was still on the node then (recorded for the report), and the host's reboot. It
//! must never wait past logind's delay, and never decide anything for rollboot.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rollboot::agent::logind::{HostShutdowns, LogindError};
use tokio::sync::{mpsc, watch};

use super::SimReboot;

/// One unplanned shutdown, as the report gives it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnplannedShutdown {
    /// The node whose host shut down.
    pub node: String,
    /// Every pod the drain evicts was gone from the node when the host went down.
    pub drained_before_shutdown: bool,
    /// The pods (not DaemonSet or mirror pods) still on the node then.
    pub pods_left: usize,
    /// The pods evicted between `PrepareForShutdown` and the host going down: those on the
    /// node at the signal that were gone at the shutdown (the node is cordoned meanwhile, so
    /// none comes in).
    pub pods_evicted: usize,
    /// Real seconds from `PrepareForShutdown` to the release of the last inhibitor lock (or
    /// to logind's limit).
    pub seconds_to_release: f64,
    /// The agent released its lock before logind's limit (drained, or at its own margin).
    pub released_before_limit: bool,
}

/// One host's logind: the signal's sender and how many delay locks are held.
struct Host {
    signals: mpsc::UnboundedSender<bool>,
    locks: watch::Sender<usize>,
}

/// The simulated hosts' logind, shared by the harness and the agents.
#[derive(Clone)]
pub struct Shutdowns {
    hosts: Arc<Mutex<BTreeMap<String, Host>>>,
    /// logind's `InhibitDelayMaxUSec` (real time).
    delay_max: Duration,
    /// The shutdowns played so far.
    pub records: Arc<Mutex<Vec<UnplannedShutdown>>>,
}

impl Shutdowns {
    /// Simulated logind with `delay_max` (real time).
    pub fn new(delay_max: Duration) -> Shutdowns {
        Shutdowns {
            hosts: Arc::default(),
            delay_max,
            records: Arc::default(),
        }
    }

    /// The logind of `node`'s host, for its agent (a new agent replaces the last one's).
    pub fn logind(&self, node: &str) -> SimLogind {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut hosts = self.hosts.lock().expect("hosts");
        let locks = match hosts.remove(node) {
            // The locks a killed agent held die with its process: counted afresh.
            Some(_) | None => watch::Sender::new(0),
        };
        let sim = SimLogind {
            node: node.into(),
            signals: rx,
            locks: locks.clone(),
            delay_max: self.delay_max,
        };
        hosts.insert(node.into(), Host { signals: tx, locks });
        sim
    }

    /// `node`'s host is about to reboot on a reboot rollboot granted it (a FleetLock host's
    /// `systemctl reboot` on its 200): logind announces it to the agent (`PrepareForShutdown
    /// (true)`) and waits for its inhibitor locks, at most its delay, as for any shutdown. How
    /// long it waited (the caller then reboots the host).
    pub async fn announce_reboot(&self, node: &str) -> Duration {
        let (signals, mut locks) = {
            let hosts = self.hosts.lock().expect("hosts");
            match hosts.get(node) {
                Some(h) => (h.signals.clone(), h.locks.subscribe()),
                None => return Duration::ZERO,
            }
        };
        let start = Instant::now();
        if signals.send(true).is_err() {
            return Duration::ZERO;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _ = tokio::time::timeout(self.delay_max, locks.wait_for(|n| *n == 0)).await;
        start.elapsed()
    }

    /// `node`'s host shuts down by itself: `PrepareForShutdown(true)` to its agent, the wait
    /// for its inhibitor locks (at most logind's delay), then the host goes down and comes back
    /// on a new boot through `method`; recorded with what was left on the node.
    pub async fn shut_down(&self, node: &str, method: SimReboot, token: &str) {
        let (signals, mut locks) = {
            let hosts = self.hosts.lock().expect("hosts");
            match hosts.get(node) {
                Some(h) => (Some(h.signals.clone()), h.locks.subscribe()),
                None => (None, watch::Sender::new(0usize).subscribe()),
            }
        };
        let start = Instant::now();
        let pods_before = method.world.undrained(node).len();
        let sent = signals.is_some_and(|s| s.send(true).is_ok());
        // The agent hears it and, if it holds a lock, keeps it until drained: give it a moment
        // to be heard before the count is read.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let released = sent
            && tokio::time::timeout(self.delay_max, locks.wait_for(|n| *n == 0))
                .await
                .is_ok_and(|r| r.is_ok());
        let seconds_to_release = start.elapsed().as_secs_f64();
        let pods_left = method.world.undrained(node).len();
        self.records
            .lock()
            .expect("records")
            .push(UnplannedShutdown {
                node: node.into(),
                drained_before_shutdown: pods_left == 0,
                pods_left,
                pods_evicted: pods_before.saturating_sub(pods_left),
                seconds_to_release,
                released_before_limit: released,
            });
        tracing::info!(
            node,
            pods_left,
            seconds_to_release,
            released_before_limit = released,
            "simulated host shuts down by itself"
        );
        if let Err(e) = method.shut_down(node, token) {
            tracing::warn!(node, error = %e, "simulated shutdown did not happen");
        }
    }
}

/// One host's simulated logind, as its agent sees it.
pub struct SimLogind {
    node: String,
    signals: mpsc::UnboundedReceiver<bool>,
    locks: watch::Sender<usize>,
    delay_max: Duration,
}

/// A simulated delay lock: counted while it lives.
pub struct SimLock {
    locks: watch::Sender<usize>,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        self.locks.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl HostShutdowns for SimLogind {
    type Lock = SimLock;

    async fn inhibit(&self) -> Result<SimLock, LogindError> {
        self.locks.send_modify(|n| *n += 1);
        Ok(SimLock {
            locks: self.locks.clone(),
        })
    }

    async fn delay_max(&self) -> Result<Duration, LogindError> {
        Ok(self.delay_max)
    }

    async fn preparing(&self) -> Result<bool, LogindError> {
        Ok(false)
    }

    async fn next(&mut self) -> Option<bool> {
        self.signals.recv().await
    }

    fn describe(&self) -> String {
        format!("simulated logind of {}", self.node)
    }

    /// A simulated host's logind is never restarted: its signals end only with the run.
    async fn reconnect(&self) -> Result<SimLogind, LogindError> {
        Err(LogindError::Simulated {
            host: self.node.clone(),
            reason: "a simulated logind cannot be reached again".into(),
        })
    }
}
