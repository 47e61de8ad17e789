//! The maintenance lock: the Lease `rollboot-lock` and its record of the nodes in flight.
//!
//! Owns the record's format (the Lease's holder, and the annotation `rollboot.dev/in-flight`:
//! node → {state, since, leader}) and the rv-checked writes that add and remove nodes. The lock
//! outlives leaders: any rollboot leader adopts it; a holder that is not rollboot pauses
//! rollboot. It must never take the lock from a foreign holder, and has no TTL: entries leave
//! only when their node finishes, fails or is deleted.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use serde::{Deserialize, Serialize};

use crate::lease::{LeaseError, LeaseRef, NotLeader};
use crate::node::NodeState;
use crate::time;

/// Annotation on the lock Lease holding the in-flight nodes as JSON.
pub const IN_FLIGHT: &str = "rollboot.dev/in-flight";

/// One in-flight node, as recorded in the lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockEntry {
    /// The state when the entry was written.
    pub state: NodeState,
    /// When the node entered maintenance (its cycle started).
    pub since: DateTime<Utc>,
    /// The leader that started it.
    pub leader: String,
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
        let entries = l
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(IN_FLIGHT))
            .and_then(|j| match serde_json::from_str(j) {
                Ok(e) => Some(e),
                Err(e) => {
                    tracing::error!(error = %e, "the maintenance lock's in-flight record does not parse; treating it as empty");
                    None
                }
            })
            .unwrap_or_default();
        LockRecord {
            holder,
            entries,
            lease: Some(l),
        }
    }

    /// The holder when it is not `ours`.
    pub fn foreign_holder(&self, ours: &str) -> Option<&str> {
        self.holder.as_deref().filter(|h| *h != ours)
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

/// Writes `entries` to the lock as `ours`, starting from `record` and re-reading after a
/// conflict. `change` edits the entries; it is applied to the freshest record.
///
/// Every write is a replace carrying the resourceVersion of the Lease as read (or a create
/// without one, when there is none): a write from a stale view, such as a late one from a
/// replica that was paused past its leader lease, is refused with 409 and changes nothing.
/// After such a conflict `ensure` re-checks leadership before the write is tried again from
/// the fresh read: the caller checked it before the first attempt only.
pub async fn update(
    lease: &LeaseRef,
    ours: &str,
    mut record: LockRecord,
    change: impl Fn(&mut BTreeMap<String, LockEntry>),
    ensure: &(dyn Fn() -> Result<(), NotLeader> + Sync),
) -> Result<LockRecord, LockError> {
    for _ in 0..5 {
        if let Some(h) = record.foreign_holder(ours) {
            return Err(LockError::HeldBy {
                lease: lease.name().into(),
                holder: h.into(),
            });
        }
        let mut entries = record.entries.clone();
        change(&mut entries);
        if entries == record.entries && record.holder.is_some() != entries.is_empty() {
            return Ok(record);
        }
        let new = record.to_lease(ours, &entries);
        let written = if record.lease.is_some() {
            lease.replace(&new).await
        } else {
            lease.create(new).await
        };
        match written {
            Ok(l) => return Ok(LockRecord::from_lease(Some(l))),
            Err(LeaseError::Conflict { .. }) => {
                record = read(lease).await?;
                ensure()?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(LockError::Lease(LeaseError::Conflict {
        namespace: String::new(),
        name: lease.name().into(),
    }))
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
