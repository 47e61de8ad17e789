//! The ends of a node's cycle: done, failed, and the slot in the lock freed.
//!
//! Owns what `done` writes with it (the cycle's history, measured from what the cycle wrote,
//! and the flags cleared), what `failed` writes and says (the reason, whether the rollout
//! halts), and the freeing of a slot, with an Event when the node is gone. It must never free
//! a slot before its node's final state is written: a successor reads the lock first.

use chrono::{DateTime, Utc};

use crate::config::Phase;
use crate::controller::context::Ctx;
use crate::controller::decide;
use crate::controller::error::Error;
use crate::controller::gate::GateRecord;
use crate::controller::writes::{free, patch_node};
use crate::node::{self as proto, NodeState, NodeView, Token};

/// How the health gate's wait for the moved volumes to be attached again ended
/// (`drain.volumes.waitForReattach`).
#[derive(Clone, Debug, Default)]
pub(in crate::controller) struct Reattached {
    /// From the gate's start until every volume was attached where its pod's replacement
    /// runs; `None` when the wait timed out.
    pub seconds: Option<f64>,
    /// The PersistentVolumes not seen attached by the timeout.
    pub late: Vec<String>,
}

/// Writes `state: done` with the cycle's history (and how the wait for moved volumes ended,
/// `reattached`) and the flags cleared, says so, and frees the slot (unless afterDone hooks
/// come first: then the next pass frees it).
pub(in crate::controller) async fn finish(
    ctx: &Ctx,
    view: &NodeView,
    reattached: Option<&Reattached>,
) -> Result<(), Error> {
    let node = view.name.as_str();
    let now = Utc::now();
    // The history, in the same fenced write as `done`: a cycle is counted once, as the write
    // that ends it is made once.
    let cycle = measure(ctx, view, reattached, now);
    let ann = done_annotations(view, &cycle, now);
    super::silence::expire(ctx, view).await;
    patch_node(ctx, view, "marking it done", proto::patch(&ann, None)).await?;
    let after_done = crate::hooks::decide::configured(&ctx.config, Phase::AfterDone);
    ctx.services.metrics.done();
    say_done(ctx, view, &cycle).await;
    if after_done {
        // The slot is freed once the afterDone hooks are done (the next pass).
        ctx.wake.notify_one();
        return Ok(());
    }
    free(ctx, node).await
}

/// The cycle's record in the node's history, timed from what the cycle wrote: its start in
/// the lock, the token's instant, the instant it was marked back (`verifying`); with the health
/// gate's record of the drain, how the wait for moved volumes ended (`reattached`), and what
/// the cycle was (undrained, its token and attempts).
fn measure(
    ctx: &Ctx,
    view: &NodeView,
    reattached: Option<&Reattached>,
    now: DateTime<Utc>,
) -> proto::LastCycle {
    let start = ctx.cache.cycle_start(&view.name);
    let requested = view
        .reboot_token
        .as_deref()
        .and_then(Token::parse)
        .map(|t| t.issued)
        .or(view.handed_off);
    let back = view
        .state_since
        .filter(|_| view.state == Some(NodeState::Verifying));
    let gate = GateRecord::read(view.health_gate.as_deref());
    let seconds = |ms: Option<u64>| ms.map(|ms| ms as f64 / 1000.0);
    let pod_exit = seconds(gate.as_ref().and_then(|g| g.pod_exit_ms));
    let detach = seconds(gate.as_ref().and_then(|g| g.detach_ms));
    let mut cycle = proto::LastCycle::measure(start, requested, back, now, pod_exit, detach);
    cycle.drain_parts = gate.map(|g| g.drain_parts).unwrap_or_default();
    if let Some(r) = reattached {
        cycle.reattach_seconds = r.seconds;
        cycle.not_reattached = r.late.clone();
    }
    cycle.undrained = view.undrained.as_ref().map(|u| u.why.clone());
    cycle.token = view.reboot_token.clone();
    cycle.attempts = view.reboot_token.as_ref().and(view.reboot_attempt);
    cycle
}

/// What `done` writes: the state, `cycle` in the history, and the cycle's keys and flags
/// removed.
fn done_annotations(
    view: &NodeView,
    cycle: &proto::LastCycle,
    now: DateTime<Utc>,
) -> Vec<(&'static str, Option<String>)> {
    let mut ann = proto::state_annotations(NodeState::Done, now);
    ann.extend(view.history.next(
        now,
        view.boot_id_before.as_deref().unwrap_or_default(),
        &view.boot_id,
        cycle,
    ));
    for k in [
        proto::REBOOT_REQUIRED,
        proto::REBOOT_REQUIRED_REASON,
        proto::REBOOT_REQUESTED,
        proto::REBOOT_REQUESTED_REASON,
        proto::HEALTH_GATE,
        proto::DRAIN_VOLUMES,
        proto::BOOT_ID_BEFORE,
        proto::INIT_START_BEFORE,
        proto::SILENCE_ID,
    ] {
        ann.push((k, None));
    }
    // What belongs to the cycle goes with it: its token and what the agent wrote of it (a
    // restarted agent refused a token left on a node already done), and a FleetLock host's
    // record (a later shutdown cycle's hand-off was shown as that host's slot). The history
    // above keeps what the cycle was; the hooks' record stays for the afterDone phase.
    for k in proto::TOKEN_KEYS.iter().chain(&[proto::FLEETLOCK]) {
        ann.push((k, None));
    }
    // rollboot no longer holds the node: what it wrote to keep other actors off it goes (the
    // uncordon took it already, unless an operator's cordon stays).
    ann.extend(proto::unprotect_keys(&view.protected));
    // The shutdown this cycle drained for is over (the host is back on a new boot): its request
    // goes with it, as the flags do, unless the agent wrote a newer one since the hand-off.
    if view
        .shutdown_requested_at
        .zip(view.handed_off)
        .is_some_and(|(asked, handed)| asked <= handed)
    {
        ann.push((proto::SHUTDOWN_REQUESTED, None));
    }
    ann
}

/// Says the cycle done (a log line, the `RebootDone` Event; a warning when not drained).
async fn say_done(ctx: &Ctx, view: &NodeView, cycle: &proto::LastCycle) {
    let note = match (&cycle.undrained, view.for_shutdown()) {
        (Some(why), _) => {
            ctx.services.metrics.undrained();
            tracing::warn!(state = "done", undrained = %why, "cycle done, not drained: the host's own shutdown went first");
            format!("its host shut down by itself and is back, verified and healthy again; not drained: {why}")
        }
        (None, true) => {
            tracing::info!(
                state = "done",
                "cycle done: the host's own shutdown, drained first"
            );
            "its host shut down by itself, drained first; back, verified and healthy again".into()
        }
        (None, false) => {
            tracing::info!(state = "done", "reboot cycle done");
            "rebooted, verified and healthy again".into()
        }
    };
    ctx.services
        .events
        .publish(&view.name, cycle.undrained.is_some(), "RebootDone", note)
        .await;
}

/// Ends the cycle without a reboot, for `reason` (a FleetLock host gave its slot back before
/// its boot ID changed): `done` with no history (nothing rebooted), the uncordon when rollboot
/// cordoned it, the cycle's keys and the host's request removed, in one write; then said, and
/// the slot freed.
pub(in crate::controller) async fn release(
    ctx: &Ctx,
    view: &NodeView,
    reason: String,
) -> Result<(), Error> {
    let node = view.name.as_str();
    let ours = view.cordoned_by.is_some() && view.unschedulable;
    let mut ann = proto::state_annotations(NodeState::Done, Utc::now());
    for k in proto::CYCLE_KEYS.iter().chain(&[
        proto::REBOOT_REQUESTED,
        proto::REBOOT_REQUESTED_REASON,
        proto::DRAIN_VOLUMES,
        proto::SILENCE_ID,
    ]) {
        ann.push((k, None));
    }
    if ours {
        ann.push((proto::CORDONED_BY, None));
    }
    // rollboot no longer holds the node, however it was cordoned.
    ann.extend(proto::unprotect_keys(&view.protected));
    // A shutdown request that no shutdown followed is answered: left there, it would start a
    // cycle again at once. (A request the agent wrote after this view makes the write conflict,
    // and the cycle is decided again from it.)
    if view.for_shutdown() && view.shutdown_requested {
        ann.push((proto::SHUTDOWN_REQUESTED, None));
    }
    super::silence::expire(ctx, view).await;
    let patch = proto::patch(&ann, ours.then_some(false));
    patch_node(ctx, view, "releasing it without a reboot", patch).await?;
    tracing::info!(state = "done", uncordoned = ours, reason = %reason, "cycle ended without a reboot");
    ctx.services
        .events
        .publish(
            node,
            false,
            "ReleasedWithoutReboot",
            format!(
                "{reason}; its slot is free{}",
                if ours { " and it is uncordoned" } else { "" }
            ),
        )
        .await;
    free(ctx, node).await
}

/// Writes `state: failed` with `reason`, says it (an Event whose reason names what failed, see
/// [`decide::failure_event_reason`]), and frees the slot.
pub(in crate::controller) async fn fail(
    ctx: &Ctx,
    view: &NodeView,
    reason: String,
) -> Result<(), Error> {
    let what = decide::failure_event_reason(view.state);
    fail_as(ctx, view, reason, what, None).await
}

/// [`fail`], and the node labelled `rollboot.dev/quarantined=<cause>` in the same write: it
/// stays cordoned with its pods (`failures.returnToService` leaves it) until `rollboot retry`.
pub(in crate::controller) async fn quarantine(
    ctx: &Ctx,
    view: &NodeView,
    reason: String,
    cause: &str,
) -> Result<(), Error> {
    let what = decide::failure_event_reason(view.state);
    fail_as(ctx, view, reason, what, Some(cause)).await
}

/// A hook held the node past its phase's timeout: [`fail`], said as a hook's failure.
pub(super) async fn fail_hook(
    ctx: &Ctx,
    view: &NodeView,
    phase: Phase,
    reason: String,
) -> Result<(), Error> {
    ctx.services.metrics.hook_result(phase.as_str(), "failed");
    fail_as(ctx, view, reason, "HookFailed", None).await
}

/// [`fail`] with the Event reason `what` (what failed), quarantined for a cause when given.
async fn fail_as(
    ctx: &Ctx,
    view: &NodeView,
    reason: String,
    what: &'static str,
    quarantined: Option<&str>,
) -> Result<(), Error> {
    let node = view.name.as_str();
    let mut ann = proto::state_annotations(NodeState::Failed, Utc::now());
    ann.push((proto::FAILURE_REASON, Some(reason.clone())));
    ann.push((proto::SILENCE_ID, None));
    super::silence::expire(ctx, view).await;
    let label: Vec<(String, Option<String>)> = quarantined
        .map(|c| (proto::QUARANTINED.to_string(), Some(c.to_string())))
        .into_iter()
        .collect();
    let patch = proto::with_labels(proto::patch(&ann, None), &label);
    patch_node(ctx, view, "marking it failed", patch).await?;
    let failed = ctx.cache.failed_with(node);
    let outcome = decide::after_failure(failed, &ctx.config);
    tracing::error!(state = "failed", reason = %reason, "node failed; {outcome}");
    ctx.services.metrics.failed();
    ctx.services
        .events
        .publish(node, true, what, format!("{reason}; {outcome}"))
        .await;
    free(ctx, node).await
}

/// Frees the slot in the lock of `view`'s node, for `reason`; unless the node, read fresh,
/// changed since `view` (then it is decided again from what it is).
pub(super) async fn free_slot(ctx: &Ctx, view: &NodeView, reason: String) -> Result<(), Error> {
    // A node with no trace of its cycle is freed on what the cache says: read it fresh first.
    // A cache behind our own writes (a watch cut, a Node deleted and registered again) once
    // freed a node its new leader had just cordoned, leaving it cordoned outside the lock
    // (the chaos campaign, seed 1).
    if view.state.is_none() && changed_since(ctx, view).await? {
        return Ok(());
    }
    tracing::info!(reason = %reason, "freeing its slot in the maintenance lock");
    free(ctx, &view.name).await
}

/// Frees the slot in the lock of node `name`, whose Node is gone or being deleted, for
/// `reason`: said as a Warning on the rollout (the lock's Lease) and on the Node, and told.
pub(super) async fn free_gone(ctx: &Ctx, name: &str, reason: String) -> Result<(), Error> {
    tracing::warn!(reason = %reason, "freeing its slot in the maintenance lock");
    let note = format!("node {name} is in the maintenance lock but {reason}; its slot is freed");
    ctx.services
        .events
        .publish_lease(&ctx.config.lock.name, true, "NodeGone", note.clone());
    ctx.services
        .events
        .publish(name, true, "LockEntryFreed", note)
        .await;
    ctx.services.observe.gone(name, &reason, Utc::now());
    free(ctx, name).await
}

/// Whether `v`'s node, read fresh, changed since `v` (a state, a flag, its cordon): then that
/// version is kept as our own write's, and a pass is woken to decide again from it.
async fn changed_since(ctx: &Ctx, v: &NodeView) -> Result<bool, Error> {
    let name = v.name.as_str();
    let api: kube::Api<k8s_openapi::api::core::v1::Node> =
        kube::Api::all(ctx.services.client.clone());
    // A list by name: the controller's role lists Nodes; it has no `get` on them.
    let lp = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    match api.list(&lp).await.map(|l| l.items.into_iter().next()) {
        Ok(Some(n)) => {
            let fresh = NodeView::from_node(&n);
            if fresh.state.is_some() || fresh.flagged() || fresh.unschedulable != v.unschedulable {
                tracing::info!(state = ?fresh.state, "not freeing its slot: the node changed since the cache's view; deciding again from what it is");
                // Decided again from this version, not from the lagging cache.
                let keep = ctx.config.hooks.gate_keys();
                ctx.cache
                    .written
                    .lock()
                    .expect("written cache")
                    .insert(name.into(), proto::trim_keeping(n, &keep));
                ctx.wake.notify_one();
                return Ok(true);
            }
            Ok(false)
        }
        Ok(None) => Ok(false),
        Err(e) => Err(Error::Node {
            node: name.into(),
            what: "reading it before freeing its slot".into(),
            source: e,
        }),
    }
}
