//! Leases (coordination.k8s.io/v1): optimistic writes, and leader election fenced by time.
//!
//! Owns the two ways rollboot writes a Lease — create with no `resourceVersion` (AlreadyExists
//! means another writer won) and replace carrying the observed `resourceVersion` (409 means
//! another writer won) — and the [`Elector`] that takes and renews the leader Lease with
//! client-go's timings. A leader that has not renewed within its renew deadline stops acting at
//! once, measured on the monotonic clock, so no pause or wall-clock jump can make two leaders
//! act together. It must never write a Lease without the resourceVersion it read, and never
//! take a Lease whose record it has not seen unchanged for a full lease duration.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::time;

/// What can go wrong writing a Lease.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another writer changed or created the Lease first.
    #[error("lease {namespace}/{name}: another writer changed it first")]
    Conflict {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The API refused or could not be reached.
    #[error("lease {namespace}/{name}: {source}")]
    Api {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// One named Lease and the optimistic writes on it.
#[derive(Clone)]
pub struct LeaseRef {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

impl LeaseRef {
    /// The Lease `namespace/name`.
    pub fn new(client: Client, namespace: &str, name: &str) -> LeaseRef {
        LeaseRef {
            api: Api::namespaced(client, namespace),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Name of the Lease.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A conflict on this Lease: another writer changed it first.
    pub fn conflict(&self) -> LeaseError {
        LeaseError::Conflict {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    fn err(&self, source: kube::Error) -> LeaseError {
        match &source {
            kube::Error::Api(s) if s.code == 409 => LeaseError::Conflict {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
            },
            _ => LeaseError::Api {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                source,
            },
        }
    }

    /// The Lease, or `None` when it does not exist.
    pub async fn get(&self) -> Result<Option<Lease>, LeaseError> {
        self.api.get_opt(&self.name).await.map_err(|e| self.err(e))
    }

    /// Creates the Lease (no resourceVersion): [`LeaseError::Conflict`] when it already exists.
    pub async fn create(&self, mut lease: Lease) -> Result<Lease, LeaseError> {
        lease.metadata.name = Some(self.name.clone());
        lease.metadata.namespace = Some(self.namespace.clone());
        lease.metadata.resource_version = None;
        self.api
            .create(&PostParams::default(), &lease)
            .await
            .map_err(|e| self.err(e))
    }

    /// Replaces the Lease; `lease` must carry the resourceVersion read: a 409 is
    /// [`LeaseError::Conflict`].
    pub async fn replace(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        debug_assert!(lease.metadata.resource_version.is_some());
        self.api
            .replace(&self.name, &PostParams::default(), lease)
            .await
            .map_err(|e| self.err(e))
    }
}

/// Leader election timings (client-go's defaults: 15 s, 10 s, 2 s).
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    /// How long a record is valid after a renewal, as seen by the others.
    pub lease_duration: Duration,
    /// The leader stops acting when it has not renewed within this.
    pub renew_deadline: Duration,
    /// Interval between attempts.
    pub retry_period: Duration,
}

impl Timings {
    /// From the config's `leader` section.
    pub fn from_config(l: &crate::config::Leader) -> Timings {
        Timings {
            lease_duration: l.lease_duration.to_std(),
            renew_deadline: l.renew_deadline.to_std(),
            retry_period: l.retry_period.to_std(),
        }
    }
}

/// The elector's last exchange with the API server, for the controller's readiness probe.
#[derive(Clone, Debug, Default)]
pub struct Contact {
    /// When (monotonic) the API server last answered a take or renew, whatever the answer.
    pub last_answer: Option<Instant>,
    /// Why the last attempt failed; cleared by the next answer.
    pub last_error: Option<String>,
}

/// A replica's view of whether it leads: true only until the renew deadline of its last
/// successful renewal, on the monotonic clock. Cheap to clone; check it before every write.
#[derive(Clone)]
pub struct Leadership {
    until: Arc<Mutex<Option<Instant>>>,
    changes: watch::Receiver<bool>,
    identity: Arc<str>,
    contact: Arc<Mutex<Contact>>,
}

/// Returned by [`Leadership::ensure`] when this replica may not act.
#[derive(Debug, thiserror::Error)]
#[error("{identity} is not the leader (or missed its renew deadline): not acting")]
pub struct NotLeader {
    /// This replica's identity.
    pub identity: String,
}

impl Leadership {
    /// True while this replica leads and is within its renew deadline.
    pub fn is_leader(&self) -> bool {
        self.until
            .lock()
            .expect("leadership mutex")
            .is_some_and(|u| Instant::now() < u)
    }

    /// `Ok` while leading; call right before every write that matters.
    pub fn ensure(&self) -> Result<(), NotLeader> {
        if self.is_leader() {
            Ok(())
        } else {
            Err(NotLeader {
                identity: self.identity.to_string(),
            })
        }
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The elector's last exchange with the API server (it tries every retry period).
    pub fn contact(&self) -> Contact {
        self.contact.lock().expect("contact mutex").clone()
    }

    /// Waits until this replica leads.
    pub async fn acquired(&mut self) {
        loop {
            let _ = self.changes.wait_for(|l| *l).await;
            if self.is_leader() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until this replica stops leading (including by missing its renew deadline).
    pub async fn lost(&self) {
        let mut changes = self.changes.clone();
        loop {
            let until = *self.until.lock().expect("leadership mutex");
            match until {
                Some(u) if Instant::now() < u => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(u) => {}
                        r = changes.changed() => if r.is_err() { return },
                    }
                }
                _ => return,
            }
        }
    }
}

/// Takes and renews the leader Lease for one replica.
pub struct Elector {
    lease: LeaseRef,
    identity: String,
    timings: Timings,
    until: Arc<Mutex<Option<Instant>>>,
    tx: watch::Sender<bool>,
    /// The last record seen from another holder and when (monotonic) it was first seen.
    observed: Option<(String, Instant)>,
    /// The Lease as this replica last wrote it: renewals replace it without reading first.
    last_written: Option<Lease>,
    contact: Arc<Mutex<Contact>>,
    /// Annotations this replica writes on the Lease while it holds it (the FleetLock server's
    /// address, for the other replicas to forward to), and removes on release.
    stamp: Vec<(String, String)>,
}

/// Leader Lease annotation: where the leader's FleetLock server is reached (JSON
/// `{"holder", "url"}`), written by the leader with each acquire and renewal, so the holder and
/// its address are always read from one object.
pub const FLEETLOCK_URL: &str = "rollboot.dev/fleetlock-url";

impl Elector {
    /// Writes `key: value` on the Lease with every acquire and renewal (removed on release).
    pub fn with_annotation(mut self, key: &str, value: String) -> Elector {
        self.stamp.push((key.into(), value));
        self
    }

    /// Puts (or, `on` false, takes off) this replica's annotations on `lease`.
    fn stamped(&self, mut lease: Lease, on: bool) -> Lease {
        if self.stamp.is_empty() {
            return lease;
        }
        let ann = lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        for (k, v) in &self.stamp {
            if on {
                ann.insert(k.clone(), v.clone());
            } else {
                ann.remove(k);
            }
        }
        lease
    }

    /// An elector for `identity` on `lease`; returns the [`Leadership`] handle the replica's
    /// work checks.
    pub fn new(lease: LeaseRef, identity: &str, timings: Timings) -> (Elector, Leadership) {
        let (tx, rx) = watch::channel(false);
        let until = Arc::new(Mutex::new(None));
        let contact = Arc::new(Mutex::new(Contact::default()));
        let handle = Leadership {
            until: until.clone(),
            changes: rx,
            identity: identity.into(),
            contact: contact.clone(),
        };
        (
            Elector {
                lease,
                identity: identity.into(),
                timings,
                until,
                tx,
                observed: None,
                last_written: None,
                contact,
                stamp: Vec::new(),
            },
            handle,
        )
    }

    fn set(&self, until: Option<Instant>) {
        *self.until.lock().expect("leadership mutex") = until;
        let leading = until.is_some_and(|u| Instant::now() < u);
        self.tx.send_if_modified(|l| {
            let changed = *l != leading;
            *l = leading;
            changed
        });
    }

    /// Runs until `shutdown` resolves, then releases the Lease if held.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let started = Instant::now();
            let result = self.try_acquire_or_renew().await;
            {
                let mut c = self.contact.lock().expect("contact mutex");
                match &result {
                    Ok(_) => {
                        *c = Contact {
                            last_answer: Some(Instant::now()),
                            last_error: None,
                        }
                    }
                    Err(e) => c.last_error = Some(e.to_string()),
                }
            }
            match result {
                Ok(true) => self.set(Some(started + self.timings.renew_deadline)),
                Ok(false) => self.set(None),
                Err(e) => {
                    tracing::warn!(lease = self.lease.name(), error = %e, "leader lease renewal failed");
                    let until = *self.until.lock().expect("leadership mutex");
                    self.set(until);
                }
            }
            let leading = *self.tx.borrow();
            let until = *self.until.lock().expect("leadership mutex");
            let next = Instant::now() + self.timings.retry_period;
            // Wake at the renew deadline too, so losing it is published at once.
            let wake = match until {
                Some(u) if leading => next.min(u),
                _ => next,
            };
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
        if self.until.lock().expect("leadership mutex").is_some() {
            self.set(None);
            if let Err(e) = self.release().await {
                tracing::warn!(lease = self.lease.name(), error = %e, "could not release the leader lease");
            } else {
                tracing::info!(lease = self.lease.name(), identity = %self.identity, "released the leader lease");
            }
        }
    }

    fn spec(&self, transitions: i32, acquire: bool, old: Option<&LeaseSpec>) -> LeaseSpec {
        let now = time::micro(Utc::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timings.lease_duration.as_secs().max(1) as i32),
            acquire_time: if acquire {
                Some(now.clone())
            } else {
                old.and_then(|o| o.acquire_time.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// One attempt: `Ok(true)` when this replica holds the Lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaseError> {
        if let Some(mut lease) = self.last_written.take() {
            // Renewing: our own last write carries the resourceVersion; a 409 means someone
            // else wrote since, and we read again.
            let spec = lease.spec.clone().unwrap_or_default();
            lease.spec = Some(self.spec(spec.lease_transitions.unwrap_or(0), false, Some(&spec)));
            match self.lease.replace(&self.stamped(lease, true)).await {
                Ok(l) => {
                    self.last_written = Some(l);
                    return Ok(true);
                }
                Err(LeaseError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let Some(mut lease) = self.lease.get().await? else {
            let lease = Lease {
                spec: Some(self.spec(0, true, None)),
                ..Default::default()
            };
            return match self.lease.create(self.stamped(lease, true)).await {
                Ok(l) => {
                    self.last_written = Some(l);
                    Ok(true)
                }
                Err(LeaseError::Conflict { .. }) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let transitions = spec.lease_transitions.unwrap_or(0);
        if holder == self.identity {
            lease.spec = Some(self.spec(transitions, false, Some(&spec)));
        } else if holder.is_empty() {
            lease.spec = Some(self.spec(transitions + 1, true, Some(&spec)));
        } else {
            // Someone else's record: it expires only after we have seen it unchanged for its
            // whole duration, on our own monotonic clock (clock skew cannot shorten that).
            let record = format!(
                "{holder}/{:?}/{}",
                spec.renew_time.as_ref().map(time::from_micro),
                lease.metadata.resource_version.clone().unwrap_or_default()
            );
            let first_seen = match &self.observed {
                Some((r, at)) if *r == record => *at,
                _ => {
                    self.observed = Some((record, Instant::now()));
                    return Ok(false);
                }
            };
            let duration =
                Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64);
            if first_seen.elapsed() < duration {
                return Ok(false);
            }
            tracing::info!(lease = self.lease.name(), previous = %holder, "leader lease expired; taking it");
            lease.spec = Some(self.spec(transitions + 1, true, Some(&spec)));
        }
        match self.lease.replace(&self.stamped(lease, true)).await {
            Ok(l) => {
                self.last_written = Some(l);
                Ok(true)
            }
            Err(LeaseError::Conflict { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn release(&self) -> Result<(), LeaseError> {
        let Some(mut lease) = self.lease.get().await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(time::micro(Utc::now()));
        self.lease
            .replace(&self.stamped(lease, false))
            .await
            .map(|_| ())
    }
}
