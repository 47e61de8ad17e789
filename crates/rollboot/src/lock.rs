//! The maintenance lock: the Lease `rollboot-lock` and its record of the nodes in flight.
//!
//! Owns the record's format (the Lease's holder, and the annotation `rollboot.dev/in-flight`:
//! node → {state, since, leader}) and the rv-checked writes that add and remove nodes. The lock
//! outlives leaders: any rollboot leader adopts it; a holder that is not rollboot pauses
//! rollboot. An operator's pause (`rollboot pause`: a holder named [`PAUSE_HOLDER_PREFIX`]`who`,
//! with who, when and why in the `rollboot.dev/paused-*` annotations) keeps the in-flight
//! record, and rollboot still removes the entries of the nodes it finishes under it (never adds
//! one), so a pause lets the nodes in flight end their cycle and starts nothing new.
//! It must never take the lock from a foreign holder, and has no TTL: entries leave
//! only when their node finishes, fails or is deleted. A record that does not parse is never
//! written over by an edit ([`update`] refuses it: its entries are unknown, and an edit of
//! "no entries" would forget the nodes in flight); only [`restore`] replaces it, with the
//! entries the caller rebuilt from the Nodes.
//!
//! A new leader writes the lock once before it acts ([`adopt`]): a predecessor that stopped
//! between checking its leadership and sending a write of the lock (paused past its leader
//! lease) still holds that write, decided from the record as it read it; the adoption moves
//! the Lease's resourceVersion on, so the late write is refused with 409, and [`update`]'s
//! leadership check after a conflict stops that predecessor.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::lease::{LeaseError, LeaseRef, NotLeader};
use crate::node::NodeState;
use crate::time;

/// Annotation on the lock Lease holding the in-flight nodes as JSON.
pub const IN_FLIGHT: &str = "rollboot.dev/in-flight";
/// Annotation on the lock Lease: the identity of the last leader that adopted the lock.
pub const ADOPTED_BY: &str = "rollboot.dev/adopted-by";
/// Annotation on the lock Lease: when it was adopted (RFC 3339).
pub const ADOPTED_AT: &str = "rollboot.dev/adopted-at";

/// The holder identity of an operator's pause is this prefix and who paused.
pub const PAUSE_HOLDER_PREFIX: &str = "rollboot-pause/";
/// Annotation on the lock Lease: who paused rollboot (with a pause holder).
pub const PAUSED_BY: &str = "rollboot.dev/paused-by";
/// Annotation on the lock Lease: when rollboot was paused (RFC 3339).
pub const PAUSED_AT: &str = "rollboot.dev/paused-at";
/// Annotation on the lock Lease: why rollboot was paused (free text; may be absent).
pub const PAUSE_REASON: &str = "rollboot.dev/pause-reason";

/// An operator's pause, as recorded on the lock Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pause {
    /// Who paused (the holder identity after [`PAUSE_HOLDER_PREFIX`], or `paused-by`).
    pub by: String,
    /// When, when `paused-at` parses.
    pub at: Option<DateTime<Utc>>,
    /// Why, when given.
    pub reason: Option<String>,
}

/// The holder identity of `who`'s pause.
pub fn pause_holder(who: &str) -> String {
    format!("{PAUSE_HOLDER_PREFIX}{who}")
}

/// The identity under which rollboot holds the maintenance lock: one per installation, shared
/// by every replica, so a new leader adopts the lock its predecessor held.
pub fn lock_owner(config: &Config) -> String {
    format!(
        "rollboot/{}/{}",
        config.leader.namespace, config.leader.name
    )
}

/// One in-flight node, as recorded in the lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockEntry {
    /// The state when the entry was written.
    pub state: NodeState,
    /// When the node entered maintenance (its cycle started).
    pub since: DateTime<Utc>,
    /// The leader that started it.
    pub leader: String,
    /// Its group (the value of its `concurrency.groupBy` label) when it started: the per-group
    /// limit still counts it while its Node is gone (deleted mid-cycle, its host perhaps down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// The lock as read.
#[derive(Clone, Debug, Default)]
pub struct LockRecord {
    /// Holder identity; `None` when free.
    pub holder: Option<String>,
    /// Nodes in flight.
    pub entries: BTreeMap<String, LockEntry>,
    /// The Lease as read, for rv-checked replace; `None` when it does not exist.
    pub lease: Option<Lease>,
    /// Why the in-flight record cannot be trusted (it does not parse); `entries` is then empty
    /// and means nothing.
    pub untrusted: Option<String>,
    /// The operator's pause, when the holder is one (see [`PAUSE_HOLDER_PREFIX`]).
    pub pause: Option<Pause>,
    /// For a Lease known to be deleted, the resourceVersion of that news, so an older read
    /// does not bring the Lease back (see [`LockRecord::version`]).
    deleted_at: u64,
    /// For a Lease known to be deleted, the nodes its last record listed in flight: the
    /// rebuild from the Nodes may not see them yet (a leader's Node cache can lag behind its
    /// own writes), and they are kept in the record written again.
    pub remembered: BTreeMap<String, LockEntry>,
}

/// What can go wrong with the lock.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another holder has the lock.
    #[error("maintenance lock {lease} is held by `{holder}`")]
    HeldBy {
        /// Lease name.
        lease: String,
        /// The foreign holder.
        holder: String,
    },
    /// The Lease could not be written.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// Leadership was lost before a retry.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// The in-flight record does not parse: an edit of it would forget the nodes in flight.
    #[error("maintenance lock {lease}: the in-flight record cannot be edited: {why}")]
    Untrusted {
        /// Lease name.
        lease: String,
        /// The parse error.
        why: String,
    },
    /// The Lease was deleted since it was read: the nodes in flight must be found again.
    #[error("maintenance lock {lease} was deleted")]
    Gone {
        /// Lease name.
        lease: String,
    },
}

impl LockRecord {
    /// Parses a Lease (or its absence).
    pub fn from_lease(lease: Option<Lease>) -> LockRecord {
        let Some(l) = lease else {
            return LockRecord::default();
        };
        let holder = l
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .filter(|h| !h.is_empty());
        let (entries, untrusted) = match l
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(IN_FLIGHT))
        {
            None => (BTreeMap::new(), None),
            Some(j) => match serde_json::from_str(j) {
                Ok(e) => (e, None),
                Err(e) => (
                    BTreeMap::new(),
                    Some(format!("annotation {IN_FLIGHT} does not parse: {e}")),
                ),
            },
        };
        let pause = holder.as_deref().and_then(|h| {
            let who = h.strip_prefix(PAUSE_HOLDER_PREFIX)?;
            let ann = l.metadata.annotations.as_ref();
            let get = |k: &str| ann.and_then(|a| a.get(k)).cloned();
            Some(Pause {
                by: get(PAUSED_BY).unwrap_or_else(|| who.to_string()),
                at: get(PAUSED_AT).and_then(|v| time::parse_annotation(&v)),
                reason: get(PAUSE_REASON).filter(|r| !r.is_empty()),
            })
        });
        LockRecord {
            holder,
            entries,
            lease: Some(l),
            untrusted,
            pause,
            deleted_at: 0,
            remembered: BTreeMap::new(),
        }
    }

    /// The record of a Lease known to be deleted at `resource_version` (or later), whose last
    /// record as known listed `remembered` in flight.
    pub fn deleted(resource_version: u64, remembered: BTreeMap<String, LockEntry>) -> LockRecord {
        LockRecord {
            deleted_at: resource_version,
            remembered,
            ..LockRecord::default()
        }
    }

    /// The nodes in flight as far as this record knows: its entries, or for a deleted Lease
    /// those of its last record.
    pub fn known_in_flight(&self) -> &BTreeMap<String, LockEntry> {
        if self.lease.is_none() {
            &self.remembered
        } else {
            &self.entries
        }
    }

    /// The resourceVersion this record is as of: the Lease's, or that of its deletion. A cache
    /// keeps the record with the highest.
    pub fn version(&self) -> u64 {
        match &self.lease {
            Some(l) => l
                .metadata
                .resource_version
                .as_deref()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0),
            None => self.deleted_at,
        }
    }

    /// The holder when it is not `ours`.
    pub fn foreign_holder(&self, ours: &str) -> Option<&str> {
        self.holder.as_deref().filter(|h| *h != ours)
    }

    /// The Lease as read with its in-flight record replaced by `entries`, its holder and
    /// everything else untouched: rollboot's edit under an operator's pause.
    fn with_entries(&self, entries: &BTreeMap<String, LockEntry>) -> Lease {
        let mut l = self.lease.clone().unwrap_or_default();
        l.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                IN_FLIGHT.into(),
                serde_json::to_string(entries).expect("lock entries serialize"),
            );
        l
    }

    /// The Lease as read, held by `who`'s pause from `now`, with who, when and why recorded
    /// and the in-flight record kept as it is (the nodes in it finish their cycle).
    pub fn paused(&self, who: &str, reason: Option<&str>, now: DateTime<Utc>) -> Lease {
        let mut l = self.lease.clone().unwrap_or_default();
        let spec = l.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(pause_holder(who));
        spec.acquire_time = Some(time::micro(now));
        spec.renew_time = Some(time::micro(now));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        let ann = l.metadata.annotations.get_or_insert_with(Default::default);
        ann.insert(PAUSED_BY.into(), who.into());
        ann.insert(PAUSED_AT.into(), time::annotation(now));
        match reason.filter(|r| !r.is_empty()) {
            Some(r) => ann.insert(PAUSE_REASON.into(), r.into()),
            None => ann.remove(PAUSE_REASON),
        };
        l
    }

    /// The Lease as read, its holder released: back to `ours` while the in-flight record lists
    /// nodes (rollboot holds the lock while any node is in flight), free otherwise; the pause
    /// record removed, the in-flight record kept as it is.
    pub fn released(&self, ours: &str, now: DateTime<Utc>) -> Lease {
        let mut l = self.lease.clone().unwrap_or_default();
        let spec = l.spec.get_or_insert_with(LeaseSpec::default);
        if self.entries.is_empty() {
            spec.holder_identity = None;
        } else {
            spec.holder_identity = Some(ours.to_string());
            spec.acquire_time = Some(time::micro(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(time::micro(now));
        if let Some(ann) = l.metadata.annotations.as_mut() {
            for k in [PAUSED_BY, PAUSED_AT, PAUSE_REASON] {
                ann.remove(k);
            }
        }
        l
    }

    /// The Lease that records `entries`, held by `ours` while any entry remains.
    fn to_lease(&self, ours: &str, entries: &BTreeMap<String, LockEntry>) -> Lease {
        let mut l = self.lease.clone().unwrap_or_default();
        let now = time::micro(Utc::now());
        let spec = l.spec.get_or_insert_with(LeaseSpec::default);
        if entries.is_empty() {
            spec.holder_identity = None;
        } else {
            if spec.holder_identity.as_deref() != Some(ours) {
                spec.acquire_time = Some(now.clone());
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.holder_identity = Some(ours.to_string());
        }
        spec.renew_time = Some(now);
        l.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                IN_FLIGHT.into(),
                serde_json::to_string(entries).expect("lock entries serialize"),
            );
        l
    }
}

/// Reads the lock.
pub async fn read(lease: &LeaseRef) -> Result<LockRecord, LeaseError> {
    Ok(LockRecord::from_lease(lease.get().await?))
}

/// A 404 from the API server.
fn not_found(e: &LeaseError) -> bool {
    matches!(e, LeaseError::Api { source: kube::Error::Api(s), .. } if s.code == 404)
}

/// Replaces the in-flight record of the lock as `record` read it (or creates the Lease when it
/// does not exist) with `entries`, held by `ours` while any entry remains: the way back to a
/// trusted record after the Lease was deleted or its record stopped parsing, with entries the
/// caller rebuilt from the Nodes. One rv-checked write and no retry: a conflict means someone
/// wrote the lock since `record`, and what they wrote must be read and judged first.
pub async fn restore(
    lease: &LeaseRef,
    ours: &str,
    record: &LockRecord,
    entries: &BTreeMap<String, LockEntry>,
) -> Result<LockRecord, LockError> {
    if let Some(h) = record.foreign_holder(ours) {
        return Err(LockError::HeldBy {
            lease: lease.name().into(),
            holder: h.into(),
        });
    }
    let new = record.to_lease(ours, entries);
    let written = match &record.lease {
        Some(_) => lease.replace(&new).await,
        None => lease.create(new).await,
    };
    match written {
        Ok(l) => Ok(LockRecord::from_lease(Some(l))),
        Err(e) if not_found(&e) => Err(LockError::Gone {
            lease: lease.name().into(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// Adopts the lock as the new leader `identity` at `now` (see the module doc): one write of the
/// Lease as `record` read it, recording who adopted it and when, its holder and in-flight
/// record untouched; re-read and written again after a conflict, `ensure` re-checked first.
/// Writes nothing when there is nothing to fence: no Lease (a late write of a predecessor is
/// then a create, refused once anyone created it), a record that does not parse (it is only
/// replaced, by [`restore`]), or a foreign holder other than a pause (rollboot writes
/// nothing under it, late writes included).
pub async fn adopt(
    lease: &LeaseRef,
    ours: &str,
    mut record: LockRecord,
    identity: &str,
    now: DateTime<Utc>,
    ensure: &(dyn Fn() -> Result<(), NotLeader> + Sync),
) -> Result<LockRecord, LockError> {
    for _ in 0..5 {
        let Some(read) = record.lease.as_ref() else {
            return Ok(record);
        };
        if record.untrusted.is_some()
            || (record.foreign_holder(ours).is_some() && record.pause.is_none())
        {
            return Ok(record);
        }
        let mut new = read.clone();
        let ann = new
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        ann.insert(ADOPTED_BY.into(), identity.into());
        ann.insert(ADOPTED_AT.into(), time::annotation(now));
        ensure()?;
        match lease.replace(&new).await {
            Ok(l) => return Ok(LockRecord::from_lease(Some(l))),
            Err(LeaseError::Conflict { .. }) => record = read_or_deleted(lease, &record).await?,
            Err(e) if not_found(&e) => {
                return Err(LockError::Gone {
                    lease: lease.name().into(),
                })
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(LockError::Lease(lease.conflict()))
}

/// The lock read again after a conflict: a Lease deleted since `record` was read is
/// [`LockError::Gone`] (a replace of a deleted Lease is a 409 on kube-apiserver, the uid as read
/// being a precondition, golden 190), never a fresh start that would forget the nodes
/// `record` listed in flight.
async fn read_or_deleted(lease: &LeaseRef, record: &LockRecord) -> Result<LockRecord, LockError> {
    let fresh = read(lease).await?;
    if fresh.lease.is_none() && record.lease.is_some() {
        return Err(LockError::Gone {
            lease: lease.name().into(),
        });
    }
    Ok(fresh)
}

/// Writes `entries` to the lock as `ours`, starting from `record` and re-reading after a
/// conflict. `change` edits the entries; it is applied to the freshest record.
///
/// Every write is a replace carrying the resourceVersion of the Lease as read (or a create
/// without one, when there is none): a write from a stale view, such as a late one from a
/// replica that was paused past its leader lease, is refused with 409 and changes nothing.
/// After such a conflict `ensure` re-checks leadership before the write is tried again from
/// the fresh read: the caller checked it before the first attempt only. A change that adds a
/// node is not tried again when the fresh read lists a node `record` did not (someone else
/// started one): the limits it was decided under no longer hold, and the conflict goes back
/// to the caller to decide again.
pub async fn update(
    lease: &LeaseRef,
    ours: &str,
    mut record: LockRecord,
    change: impl Fn(&mut BTreeMap<String, LockEntry>),
    ensure: &(dyn Fn() -> Result<(), NotLeader> + Sync),
) -> Result<LockRecord, LockError> {
    let decided_from: Vec<String> = record.entries.keys().cloned().collect();
    for attempt in 0..5 {
        let paused = record.pause.is_some();
        if let Some(h) = record.foreign_holder(ours).filter(|_| !paused) {
            return Err(LockError::HeldBy {
                lease: lease.name().into(),
                holder: h.into(),
            });
        }
        if let Some(why) = &record.untrusted {
            return Err(LockError::Untrusted {
                lease: lease.name().into(),
                why: why.clone(),
            });
        }
        // Deleted with nodes in flight: written again only with the nodes rebuilt (restore).
        if record.lease.is_none() && !record.remembered.is_empty() {
            return Err(LockError::Gone {
                lease: lease.name().into(),
            });
        }
        let mut entries = record.entries.clone();
        change(&mut entries);
        let adds = entries.keys().any(|k| !record.entries.contains_key(k));
        let others = record.entries.keys().any(|k| !decided_from.contains(k));
        if attempt > 0 && adds && others {
            return Err(LockError::Lease(lease.conflict()));
        }
        let new = if paused {
            // Under a pause only the nodes in flight finish: an edit that would start one is
            // refused, as under any other holder.
            if entries.keys().any(|k| !record.entries.contains_key(k)) {
                return Err(LockError::HeldBy {
                    lease: lease.name().into(),
                    holder: record.holder.clone().unwrap_or_default(),
                });
            }
            if entries == record.entries {
                return Ok(record);
            }
            record.with_entries(&entries)
        } else {
            if entries == record.entries && record.holder.is_some() != entries.is_empty() {
                return Ok(record);
            }
            record.to_lease(ours, &entries)
        };
        let written = if record.lease.is_some() {
            lease.replace(&new).await
        } else {
            lease.create(new).await
        };
        match written {
            Ok(l) => return Ok(LockRecord::from_lease(Some(l))),
            Err(LeaseError::Conflict { .. }) => {
                record = read_or_deleted(lease, &record).await?;
                ensure()?;
            }
            // Deleted since it was read: recreating it with the entries known here could
            // forget nodes in flight; the caller rebuilds them from the Nodes.
            Err(e) if not_found(&e) => {
                return Err(LockError::Gone {
                    lease: lease.name().into(),
                })
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(LockError::Lease(lease.conflict()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_with_entries_is_held_by_us_and_an_empty_one_is_free() {
        let mut entries = BTreeMap::new();
        entries.insert(
            "n1".to_string(),
            LockEntry {
                group: None,
                state: NodeState::Cordoning,
                since: DateTime::from_timestamp(1_790_000_000, 0).unwrap(),
                leader: "c-0".into(),
            },
        );
        let held = LockRecord::default().to_lease("rollboot", &entries);
        let back = LockRecord::from_lease(Some(held));
        assert_eq!(back.holder.as_deref(), Some("rollboot"));
        assert_eq!(back.entries, entries);
        assert_eq!(back.foreign_holder("rollboot"), None);
        let freed = back.to_lease("rollboot", &BTreeMap::new());
        let back = LockRecord::from_lease(Some(freed));
        assert_eq!(back.holder, None);
        assert!(back.entries.is_empty());
    }

    #[test]
    fn a_record_that_does_not_parse_is_untrusted_and_never_edited() {
        let mut lease = Lease::default();
        lease.metadata.resource_version = Some("42".into());
        lease.metadata.annotations = Some([(IN_FLIGHT.to_string(), "{garbage".to_string())].into());
        let r = LockRecord::from_lease(Some(lease));
        assert!(r.entries.is_empty());
        assert!(
            r.untrusted.as_deref().unwrap().contains(IN_FLIGHT),
            "{:?}",
            r.untrusted
        );
        assert_eq!(r.version(), 42);
        // An edit of it is refused before anything is sent (the client is never used).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let e = rt
            .block_on(async {
                let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
                let client = kube::Client::try_from(config).unwrap();
                let lease_ref = LeaseRef::new(client, "ns", "rollboot-lock");
                update(&lease_ref, "rollboot", r, |e| e.clear(), &|| Ok(())).await
            })
            .unwrap_err();
        assert!(matches!(e, LockError::Untrusted { .. }), "{e}");
        // A missing record is an empty, trusted one.
        assert_eq!(
            LockRecord::from_lease(Some(Lease::default())).untrusted,
            None
        );
    }

    #[test]
    fn a_deleted_lease_is_newer_than_what_was_read_before() {
        let mut lease = Lease::default();
        lease.metadata.resource_version = Some("7".into());
        let read = LockRecord::from_lease(Some(lease));
        let gone = LockRecord::deleted(9, BTreeMap::new());
        assert!(gone.lease.is_none() && gone.version() > read.version());
    }

    #[test]
    fn a_deleted_lease_still_knows_the_nodes_its_last_record_listed() {
        let entry = LockEntry {
            group: None,
            state: NodeState::Draining,
            since: Utc::now(),
            leader: "c-0".into(),
        };
        let listed = BTreeMap::from([("n1".to_string(), entry)]);
        let gone = LockRecord::deleted(9, listed.clone());
        assert!(gone.entries.is_empty(), "a deleted Lease lists nothing");
        assert_eq!(gone.known_in_flight(), &listed);
        let mut lease = Lease::default();
        lease.metadata.resource_version = Some("10".into());
        let back = LockRecord::from_lease(Some(lease));
        assert!(back.known_in_flight().is_empty());
    }

    #[test]
    fn another_holder_is_foreign() {
        let lease = Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some("ops-team".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            LockRecord::from_lease(Some(lease)).foreign_holder("rollboot"),
            Some("ops-team")
        );
    }
}
