//! A pass's writes outside any node's cycle: dating requests, the PreferNoSchedule taint,
//! failed nodes returned to service, stale passed-over records removed.
//!
//! Owns [`run`], the housekeeping between resuming the nodes in flight and starting new ones,
//! each of its writes decided purely ([`decide`], [`crate::hooks::decide`]) from the views as
//! they are then, and fenced by the version it was decided from (a refused one is decided
//! again on the next pass); each node's write and what it says are in a span naming the node.
//! It must never start or end a cycle, nor fail a pass: what it cannot write is logged and
//! tried again.

use chrono::{DateTime, Utc};
use tracing::Instrument;

use super::views::views;
use crate::controller::context::Ctx;
use crate::controller::decide;
use crate::controller::error::Error;
use crate::controller::writes::{conditions_patch, patch_node, write_status};
use crate::lock::LockRecord;
use crate::node::{self as proto, NodeView};

/// The pass's housekeeping, each part from the views as they are after the one before.
pub(super) async fn run(ctx: &Ctx, record: &LockRecord, now: DateTime<Utc>) {
    date_requests(ctx, &views(ctx, record).nodes(), now).await;
    prefer_no_schedule(ctx, &views(ctx, record).nodes()).await;
    return_to_service(ctx, &views(ctx, record).nodes(), record).await;
    clear_passed_over(ctx, &views(ctx, record).nodes(), record).await;
    publish_conditions(ctx, &views(ctx, record).nodes(), record, now).await;
}

/// Writes the maintenance conditions each node outside the lock should carry and does not
/// ([`decide::conditions_due`]: `MaintenancePlanned` while it waits, or what a write missed) on
/// its status, in one patch per node fenced by the version it was decided from; a refused
/// write is decided again on the next pass. A node in flight has them written with each of its
/// state writes ([`crate::controller::writes::patch_node`]): written apart, they bumped its
/// Node's version under its next fenced write.
async fn publish_conditions(
    ctx: &Ctx,
    views: &[&NodeView],
    record: &LockRecord,
    now: DateTime<Utc>,
) {
    if !ctx.config.nodes.publish_conditions {
        return;
    }
    let next_opening = ctx.config.windows.as_ref().and_then(|_| {
        ctx.config
            .schedule()
            .openings(now, 1)
            .first()
            .map(|o| o.start)
    });
    for view in views
        .iter()
        .filter(|v| !record.entries.contains_key(&v.name))
    {
        let due = decide::conditions_due(view, &ctx.config, next_opening);
        if due.is_empty() {
            continue;
        }
        let patch = conditions_patch(view, &due, now);
        let kinds: Vec<String> = due
            .iter()
            .map(|c| format!("{}={}", c.kind, if c.status { "True" } else { "False" }))
            .collect();
        async {
            match write_status(ctx, view, patch).await {
                Ok(()) => tracing::debug!(conditions = ?kinds, "maintenance conditions written"),
                Err(e) => tracing::info!(error = %e, "maintenance conditions not written; deciding again on the next pass"),
            }
        }
        .instrument(span(view))
        .await;
    }
}

/// Removes the `passed-over` records of nodes no longer waiting ([`decide::stale_passed_over`]);
/// each write fenced by the version it was decided from.
async fn clear_passed_over(ctx: &Ctx, views: &[&NodeView], record: &LockRecord) {
    for view in decide::stale_passed_over(views, &record.entries, &ctx.config) {
        let p = proto::patch(&[(proto::PASSED_OVER, None)], None);
        async {
            match patch_node(ctx, view, "removing its passed-over record", p).await {
                Ok(_) => {
                    tracing::debug!("no longer waiting: passed-over record removed")
                }
                Err(Error::Conflict { .. }) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not remove the passed-over record")
                }
            }
        }
        .instrument(span(view))
        .await;
    }
}

/// Writes the instant it sees them into the undated `reboot-requested` flags (`now` written by
/// hand), before anything is picked: each write fenced by the version it was decided from (a
/// refused one is decided again from the newer version on the next pass).
async fn date_requests(ctx: &Ctx, views: &[&NodeView], now: DateTime<Utc>) {
    for view in decide::undated_requests(views.iter().copied()) {
        let stamp = crate::time::annotation(now);
        let p = proto::patch(&[(proto::REBOOT_REQUESTED, Some(stamp.clone()))], None);
        async {
            match patch_node(ctx, view, "dating its reboot request", p).await {
                Ok(_) => {
                    tracing::info!(at = %stamp, "dated a hand-written reboot request with the instant it was first seen")
                }
                Err(Error::Conflict { .. }) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not date a hand-written reboot request; it sorts last until dated")
                }
            }
        }
        .instrument(span(view))
        .await;
    }
}

/// Puts or takes off `hooks.preferNoScheduleTaint` where it must change; each write fenced by
/// the version it was decided from (a refused one is decided again on the next pass).
async fn prefer_no_schedule(ctx: &Ctx, views: &[&NodeView]) {
    let changes =
        crate::hooks::decide::prefer_no_schedule_changes(views.iter().copied(), &ctx.config);
    for (view, taints) in changes {
        let p = proto::with_taints(proto::patch(&[], None), &taints);
        async {
            match patch_node(ctx, view, "setting its PreferNoSchedule taint", p).await {
                Ok(_) => {
                    tracing::info!(
                        flagged = view.flagged(),
                        "PreferNoSchedule taint (hooks.preferNoScheduleTaint) updated"
                    )
                }
                Err(Error::Conflict { .. }) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not update the PreferNoSchedule taint")
                }
            }
        }
        .instrument(span(view))
        .await;
    }
}

/// Uncordons the failed nodes `failures.returnToService` returns to service (see
/// [`decide::returning_to_service`]): their `failed` record and reason stay, `cordoned-by` goes
/// with the cordon, so they no longer hold a slot. Each write fenced by the version it was
/// decided from (a refused one is decided again on the next pass).
async fn return_to_service(ctx: &Ctx, views: &[&NodeView], record: &LockRecord) {
    for view in decide::returning_to_service(views, &record.entries, &ctx.config) {
        let mut ann = vec![(proto::CORDONED_BY, None)];
        ann.extend(proto::unprotect_keys(&view.protected));
        let p = proto::patch(&ann, Some(false));
        async {
            match patch_node(ctx, view, "returning it to service", p).await {
                Ok(_) => {
                    let reason = view
                        .failure_reason
                        .as_deref()
                        .unwrap_or("no reason recorded");
                    tracing::info!(state = "failed", reason, "returned to service: uncordoned, its failed record kept (failures.returnToService)");
                    ctx.services
                        .events
                        .publish(
                            &view.name,
                            false,
                            "ReturnedToService",
                            format!(
                                "failed ({reason}), its host is up and Ready: uncordoned \
                                 (failures.returnToService); it keeps its failed record and no \
                                 longer holds one of maxNodes' slots; {}",
                                decide::CLEAR_FAILED
                            ),
                        )
                        .await;
                }
                Err(Error::Conflict { .. }) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not return a failed node to service")
                }
            }
        }
        .instrument(span(view))
        .await;
    }
}

/// The span of the housekeeping of `view`'s node: its logs name the node through it.
fn span(view: &NodeView) -> tracing::Span {
    tracing::error_span!("housekeeping", node = view.name.as_str())
}
