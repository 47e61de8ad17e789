//! The controller's writes of Nodes and of the maintenance lock, each fenced.
//!
//! Owns [`patch_node`] and [`write_status`] (every Node write of a step, through the one node writer as the
//! controller ([`crate::node_writer`]): leadership checked right before, the resourceVersion the
//! step was decided from as a precondition, a 409 answered as [`Error::Conflict`], the result
//! remembered and reported) and the lock's edits
//! ([`take_slots`] for the nodes a pass starts, [`free`] for one node: one edit at a time per
//! replica, leadership checked before and on each retry), with what a lock error means for the
//! cache ([`lock_error`]). It must never decide what to write: the steps and the pass do.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;

use super::context::Ctx;
use super::decide;
use super::error::Error;
use crate::lock::{self, LockEntry, LockError, LockRecord};
use crate::node::{NodeState, NodeView};
use crate::node_writer::{Fence, NodeWriteError, NodeWriter, Writer};

/// Patches a Node after re-checking leadership, on condition that it is still the version
/// `view` was parsed from (the step was decided from it); remembers the result.
///
/// The leadership check is fencing by time, and it happens before the request leaves: a
/// replica paused (or whose request sat in the network) for longer than the lease after that
/// check could otherwise land its write after a newer leader acted on the same Node. The
/// resourceVersion precondition closes that gap: any write to the Node since `view`, by anyone,
/// makes the API server refuse this one with 409, answered here as [`Error::Conflict`].
pub(super) async fn patch_node(
    ctx: &Ctx,
    view: &NodeView,
    what: &str,
    patch: serde_json::Value,
) -> Result<Node, Error> {
    let node = view.name.as_str();
    debug_assert!(!view.resource_version.is_empty(), "a view of a stored Node");
    let writer = NodeWriter::new(
        ctx.services.client.clone(),
        Writer::Controller(ctx.leadership.clone()),
    );
    // The maintenance conditions of the state this patch writes go first, fenced by the same
    // version: the state write then follows that version, changed only by rollboot's own
    // status write. Written after it, they bumped the Node's version under the agent's fenced
    // ack and the next step's write (each a 409 the real-cluster suite flags).
    let fence = match conditions_first(ctx, &writer, view, &patch).await {
        Ok(Some(written)) => written,
        Ok(None) => view.resource_version.clone(),
        Err(NodeWriteError::Conflict { .. }) => {
            return Err(Error::Conflict {
                node: node.into(),
                what: "writing its maintenance conditions".into(),
                rv: view.resource_version.clone(),
            })
        }
        Err(NodeWriteError::NotLeader(e)) => return Err(Error::NotLeader(e)),
        Err(e) => {
            // The conditions are a courtesy to other tools: the step goes on without them.
            tracing::warn!(error = %e, "maintenance conditions not written");
            view.resource_version.clone()
        }
    };
    let n = match writer.write(node, Fence::At(&fence), what, patch).await {
        Ok(n) => n,
        Err(NodeWriteError::Conflict { .. }) => {
            tracing::info!(
                node,
                state = view.state.map_or("none", NodeState::as_str),
                resource_version = %view.resource_version,
                what,
                "the node changed since this step was decided; not acting, deciding again from the newer version"
            );
            return Err(Error::Conflict {
                node: node.into(),
                what: what.into(),
                rv: view.resource_version.clone(),
            });
        }
        Err(NodeWriteError::NotLeader(e)) => return Err(Error::NotLeader(e)),
        Err(NodeWriteError::Api { source, .. }) => {
            return Err(Error::Node {
                node: node.into(),
                what: what.into(),
                source,
            })
        }
        Err(e @ (NodeWriteError::NotFound { .. } | NodeWriteError::NotAllowed { .. })) => {
            return Err(Error::Write(e))
        }
    };
    ctx.services.observe.written(
        view,
        &n,
        || ctx.cache.cycle_start(node),
        || ctx.cache.failed_with(node),
    );
    ctx.cache
        .written
        .lock()
        .expect("written cache")
        .insert(node.into(), n.clone());
    Ok(n)
}

/// Writes the maintenance conditions the state written by `patch` calls for (none: `None`), on
/// condition that the Node is still at `view`'s version; the version it is at after that write.
async fn conditions_first(
    ctx: &Ctx,
    writer: &NodeWriter,
    view: &NodeView,
    patch: &serde_json::Value,
) -> Result<Option<String>, NodeWriteError> {
    if !ctx.config.nodes.publish_conditions {
        return Ok(None);
    }
    let Some(after) = decide::after_state_write(view, &patch["metadata"]["annotations"]) else {
        return Ok(None);
    };
    let due = decide::conditions_due(&after, &ctx.config, None);
    if due.is_empty() {
        return Ok(None);
    }
    let status = conditions_patch(view, &due, Utc::now());
    let n = send_conditions(writer, view, status).await?;
    Ok(n.metadata.resource_version)
}

/// Sends `patch` (built by [`conditions_patch`]) to `view`'s Node's status through `writer`,
/// fenced by the version `view` was parsed from.
async fn send_conditions(
    writer: &NodeWriter,
    view: &NodeView,
    patch: serde_json::Value,
) -> Result<Node, NodeWriteError> {
    writer
        .write_status(
            &view.name,
            Fence::At(&view.resource_version),
            "writing its maintenance conditions",
            patch,
        )
        .await
}

/// The status patch that writes `due` on `view`'s Node at `now`: a condition whose status
/// stays keeps its `lastTransitionTime`.
pub(super) fn conditions_patch(
    view: &NodeView,
    due: &[decide::ConditionWrite],
    now: DateTime<Utc>,
) -> serde_json::Value {
    let conditions: Vec<crate::node::ConditionPatch<'_>> = due
        .iter()
        .map(|c| crate::node::ConditionPatch {
            kind: c.kind,
            status: c.status,
            reason: c.reason,
            message: &c.message,
            transition: view
                .maintenance_condition(c.kind)
                .filter(|old| old.status == c.status)
                .and_then(|old| old.since)
                .unwrap_or(now),
        })
        .collect();
    crate::node::conditions_patch(&conditions, now)
}

/// Patches a Node's status (its maintenance conditions) as the leader, on condition that it
/// is still the version `view` was parsed from; the Node as written is kept as the cache's
/// newest, so the next decision about it is fenced by that version.
pub(super) async fn write_status(
    ctx: &Ctx,
    view: &NodeView,
    patch: serde_json::Value,
) -> Result<(), NodeWriteError> {
    let writer = NodeWriter::new(
        ctx.services.client.clone(),
        Writer::Controller(ctx.leadership.clone()),
    );
    let n = send_conditions(&writer, view, patch).await?;
    let keep = ctx.config.hooks.gate_keys();
    ctx.cache
        .written
        .lock()
        .expect("written cache")
        .insert(view.name.clone(), crate::node::trim_keeping(n, &keep));
    Ok(())
}

/// Writes each of `picked` (node, group) into the lock (`cordoning`, since `now`, in its
/// group), in one edit: their cycles start. One write for all of them, as a pass that starts
/// twenty nodes wrote the Lease twenty times, one after the other.
pub(super) async fn take_slots(
    ctx: &Ctx,
    picked: &[(String, Option<String>)],
    now: DateTime<Utc>,
) -> Result<(), Error> {
    if picked.is_empty() {
        return Ok(());
    }
    ctx.leadership.ensure()?;
    let leader = ctx.leadership.identity().to_string();
    let entries: Vec<(String, LockEntry)> = picked
        .iter()
        .map(|(name, group)| {
            let entry = LockEntry {
                group: group.clone(),
                state: NodeState::Cordoning,
                since: now,
                leader: leader.clone(),
            };
            (name.clone(), entry)
        })
        .collect();
    let _edit = ctx.cache.lock_edits.lock().await;
    let current = ctx.cache.lock_now();
    let written = lock::update(
        &ctx.services.lock,
        &ctx.lock_owner,
        current,
        move |e| {
            for (name, entry) in &entries {
                e.entry(name.clone()).or_insert_with(|| entry.clone());
            }
        },
        &|| ctx.leadership.ensure(),
    )
    .await
    .map_err(|e| lock_error(ctx, e))?;
    ctx.cache.set_lock(written);
    Ok(())
}

/// Removes `node` from the lock: its slot is free, and a pass is woken to use it.
pub(super) async fn free(ctx: &Ctx, node: &str) -> Result<(), Error> {
    ctx.leadership.ensure()?;
    let _edit = ctx.cache.lock_edits.lock().await;
    let current = ctx.cache.lock_now();
    let name = node.to_string();
    let r = lock::update(
        &ctx.services.lock,
        &ctx.lock_owner,
        current,
        move |e| {
            e.remove(&name);
        },
        &|| ctx.leadership.ensure(),
    )
    .await
    .map_err(|e| lock_error(ctx, e))?;
    ctx.cache.set_lock(r);
    ctx.wake.notify_one();
    Ok(())
}

/// A lost leadership found by the lock's retry is the controller's own `NotLeader`; a lock
/// found deleted is remembered as deleted, so the next pass rebuilds its record from the Nodes.
pub(super) fn lock_error(ctx: &Ctx, e: LockError) -> Error {
    match e {
        LockError::NotLeader(n) => Error::NotLeader(n),
        e @ LockError::Gone { .. } => {
            let cur = ctx.cache.lock_now();
            ctx.cache.set_lock(LockRecord::deleted(
                cur.version(),
                cur.known_in_flight().clone(),
            ));
            ctx.wake.notify_one();
            Error::Lock(e)
        }
        e => Error::Lock(e),
    }
}
