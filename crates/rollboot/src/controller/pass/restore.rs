//! The lock's in-flight record rebuilt from the Nodes, when the record cannot be trusted.
//!
//! Owns [`restore_lock`]: when the lock's Lease was deleted while Nodes show cycles in
//! progress, or its record does not parse, the record rebuilt from the Nodes' own states
//! ([`decide::rebuild`], with the nodes the deleted Lease listed) is written before anything
//! else, said in a log line and an Event. It must never write a lock someone else holds, and
//! while the record is untrusted nothing starts and nothing resumes.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::controller::context::Ctx;
use crate::controller::decide;
use crate::controller::error::Error;
use crate::controller::writes::lock_error;
use crate::lease::LeaseError;
use crate::lock::{self, LockEntry, LockError, LockRecord};
use crate::node::NodeView;

/// When the lock's in-flight record cannot be trusted (its Lease was deleted while Nodes show
/// cycles in progress, or its record does not parse), writes the record rebuilt from the
/// Nodes' own states. Returns whether the record was untrusted: the pass then starts nothing
/// and resumes nothing, and the next pass goes on from the record written (or read again).
pub(super) async fn restore_lock(
    ctx: &Ctx,
    record: &LockRecord,
    views: &[NodeView],
    now: DateTime<Utc>,
    acting: &BTreeSet<String>,
) -> Result<bool, Error> {
    if record.foreign_holder(&ctx.lock_owner).is_some() {
        // Not ours to write; and nothing starts while someone else holds it.
        return Ok(false);
    }
    let why = match (&record.untrusted, &record.lease) {
        (Some(why), _) => why.clone(),
        (None, None) => "the Lease does not exist".to_string(),
        (None, Some(_)) => return Ok(false),
    };
    let entries = rebuilt(ctx, record, views, now, acting);
    if record.lease.is_none() && entries.is_empty() {
        // Nothing in flight: the Lease is created by the first node started, as always. The
        // nodes the deleted record listed have all ended: forgotten, or the lock's writes
        // would keep refusing to create it (and nothing would start again).
        if !record.remembered.is_empty() {
            ctx.cache
                .set_lock(LockRecord::deleted(record.version(), BTreeMap::new()));
        }
        return Ok(false);
    }
    write_rebuilt(ctx, record, &entries, &why).await?;
    ctx.wake.notify_one();
    Ok(true)
}

/// The in-flight record as the Nodes tell it ([`decide::rebuild`]), with the nodes the deleted
/// Lease listed: in flight whatever the Nodes show yet (this process's Node cache can lag
/// behind its own writes); a node among them whose cycle has ended is freed by the next pass.
fn rebuilt(
    ctx: &Ctx,
    record: &LockRecord,
    views: &[NodeView],
    now: DateTime<Utc>,
    acting: &BTreeSet<String>,
) -> BTreeMap<String, LockEntry> {
    let identity = ctx.leadership.identity().to_string();
    let mut entries = decide::rebuild(views, &identity, &ctx.config, now, acting);
    for (name, e) in &record.remembered {
        let ended = views.iter().any(|v| {
            v.name == *name
                && v.state.is_some_and(|s| !s.in_flight())
                && v.state_since.is_some_and(|t| t >= e.since)
        });
        if !ended && !entries.contains_key(name) {
            entries.insert(name.clone(), e.clone());
        }
    }
    entries
}

/// Writes `entries` as the lock's record (untrusted because `why`), leadership checked
/// right before; says it in a log line and an Event. A lock written by someone else since it
/// was read is read again instead, and judged first.
async fn write_rebuilt(
    ctx: &Ctx,
    record: &LockRecord,
    entries: &BTreeMap<String, LockEntry>,
    why: &str,
) -> Result<(), Error> {
    let lease = format!("{}/{}", ctx.config.lock.namespace, ctx.config.lock.name);
    let names: Vec<&str> = entries.keys().map(String::as_str).collect();
    let note = format!(
        "the maintenance lock {lease} cannot be trusted ({why}); its in-flight record is \
         rebuilt from the Nodes' rollboot.dev/state: {}; no new node starts until it is written",
        if names.is_empty() {
            "no node in flight".to_string()
        } else {
            names.join(", ")
        }
    );
    tracing::warn!(lock = %lease, nodes = ?names, "{note}");
    ctx.leadership.ensure()?;
    match lock::restore(&ctx.services.lock, &ctx.lock_owner, record, entries).await {
        Ok(written) => {
            ctx.services
                .events
                .publish_lease(&ctx.config.lock.name, true, "LockRebuilt", note);
            tracing::info!(lock = %lease, nodes = ?names, "maintenance lock record restored");
            ctx.cache.set_lock(written);
        }
        // Someone wrote the lock since it was read: what they wrote is read and judged first.
        Err(LockError::Lease(LeaseError::Conflict { .. })) => {
            tracing::info!(lock = %lease, "the maintenance lock changed while it was being restored; reading it again");
            ctx.cache.set_lock(lock::read(&ctx.services.lock).await?);
        }
        Err(e) => return Err(lock_error(ctx, e)),
    }
    Ok(())
}
