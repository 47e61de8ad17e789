//! The reboot phase: the request (a fresh token), the wait for the node to come back, and the
//! mark that it is back.
//!
//! Owns what the request writes (`rebooting`, `boot-id-before`, the token, its attempt, the
//! health gate's record) and says (`RebootRequested`, or `RebootRequestedAgain` for a token the
//! agent reported lost), the health gate's watches started while the node reboots, and the
//! `verifying` write, with the uncordon when no afterReboot hooks hold the node. It must never
//! ask for the reboot of a node that is not cordoned, nor issue a token the state machine did
//! not decide.

use chrono::Utc;

use super::health::Gates;
use crate::config::Phase;
use crate::controller::context::Ctx;
use crate::controller::decide;
use crate::controller::error::Error;
use crate::controller::gate::{Gate, GateRecord};
use crate::controller::writes::patch_node;
use crate::node::{self as proto, NodeState, NodeView, Token};

/// A new token after the agent reported the last one lost (attempt 2 and later), or the
/// request after the afterDrain hooks passed (attempt 1): the health gate's record stays.
pub(super) async fn request_again(ctx: &Ctx, view: &NodeView, attempt: u32) -> Result<(), Error> {
    // Attempt 1 here is the request after the afterDrain hooks passed.
    if attempt > 1 {
        tracing::warn!(
            token = view.reboot_token.as_deref().unwrap_or_default(),
            attempt,
            "the agent reports its acknowledged reboot token lost (it started again on the same boot); issuing a new one"
        );
    }
    request_reboot(
        ctx,
        view,
        &view.boot_before(),
        view.health_gate.clone(),
        attempt,
    )
    .await
}

/// Writes `state: rebooting` with a fresh token (request `attempt` of the cycle), on condition
/// that the Node is still the version `view` shows and that it is cordoned.
pub(super) async fn request_reboot(
    ctx: &Ctx,
    view: &NodeView,
    boot: &[(&'static str, Option<String>)],
    gate: Option<String>,
    attempt: u32,
) -> Result<(), Error> {
    let node = view.name.as_str();
    if let Err(why) = decide::may_request_reboot(view) {
        tracing::warn!("{why}");
        ctx.wake.notify_one();
        return Ok(());
    }
    let now = Utc::now();
    let token = Token::new(now, rand::random());
    let mut ann = proto::state_annotations(NodeState::Rebooting, now);
    ann.extend(boot.iter().cloned());
    ann.push((proto::REBOOT, Some(token.text.clone())));
    ann.push((proto::REBOOT_ATTEMPT, Some(attempt.to_string())));
    ann.push((proto::HEALTH_GATE, gate));
    patch_node(ctx, view, "requesting the reboot", proto::patch(&ann, None)).await?;
    let boot_id = boot
        .first()
        .and_then(|(_, v)| v.as_deref())
        .unwrap_or_default();
    tracing::info!(token = %token.text, attempt, state = "rebooting", boot_id, "reboot requested");
    // A new token is its own Event (a repeat of the first would keep the first's note).
    let (reason, note) = if attempt == 1 {
        (
            "RebootRequested",
            format!("drained; asked the agent to reboot (token {})", token.text),
        )
    } else {
        (
            "RebootRequestedAgain",
            format!(
                "the agent's previous token was lost before the host rebooted; asked again with \
                 a new token {} (attempt {attempt} of {})",
                token.text,
                decide::REBOOT_ATTEMPTS
            ),
        )
    };
    ctx.services
        .events
        .publish_action(
            node,
            false,
            reason,
            &format!("RequestReboot {attempt}"),
            note,
        )
        .await;
    ctx.wake.notify_one();
    Ok(())
}

/// Hands the reboot to the host itself: `state: rebooting` with `boot-id-before` and
/// `handed-off`, and no token (the agent has nothing to act on). A FleetLock host's next
/// `pre-reboot` is answered 200 and it reboots itself; a host shutting down by itself is let
/// go by its agent, which sees the Node drained. Written on condition that the Node is still
/// the version `view` shows and that it is cordoned, as a token would be. A shutdown the
/// kubelet's graceful node shutdown went through first, or one logind let go before the drain
/// was over, is recorded undrained ([`decide::undrained_at_hand_off`]) in the same write.
///
/// `gate`: the health gate's record, when the drain's end hands off at once (else the record
/// written with the afterDrain phase stays).
pub(super) async fn hand_off(
    ctx: &Ctx,
    view: &NodeView,
    gate: Option<String>,
) -> Result<(), Error> {
    let node = view.name.as_str();
    if let Err(why) = decide::may_request_reboot(view) {
        tracing::warn!("{why}");
        ctx.wake.notify_one();
        return Ok(());
    }
    let now = Utc::now();
    let mut ann = proto::state_annotations(NodeState::Rebooting, now);
    // A cycle for a shutdown keeps the boot it started on (written with its cordon): the host
    // may have gone down and come back during the drain.
    if !(view.for_shutdown() && view.boot_id_before.is_some()) {
        ann.extend(view.boot_before());
    }
    ann.push((proto::HANDED_OFF, Some(crate::time::annotation(now))));
    ann.push((proto::REBOOT, None));
    let undrained = decide::undrained_at_hand_off(view, now);
    if let Some(why) = &undrained {
        let record = proto::Undrained {
            at: crate::time::annotation(now),
            why: why.clone(),
        };
        ann.push((proto::UNDRAINED, Some(record.to_annotation())));
    }
    if gate.is_some() {
        ann.push((proto::HEALTH_GATE, gate));
    }
    patch_node(
        ctx,
        view,
        "handing the reboot to its host",
        proto::patch(&ann, None),
    )
    .await?;
    if view.for_shutdown() {
        tracing::info!(state = "rebooting", boot_id = %view.boot_id, undrained = undrained.as_deref().unwrap_or(""), "the host's own shutdown goes on now: the agent lets its inhibitor go");
        let (warning, reason, note) = match undrained {
            Some(why) => (true, "ShutdownNotDrained", format!("the host is shutting down by itself; handed back to it, not drained: {why}")),
            None => (false, "ShutdownDrained", "the host is shutting down by itself; drained and past its hooks, handed back to it: its agent lets the shutdown go on".to_string()),
        };
        ctx.services
            .events
            .publish_action(node, warning, reason, "HandOff", note)
            .await;
        ctx.wake.notify_one();
        return Ok(());
    }
    let id = view
        .fleetlock
        .as_ref()
        .map(|f| f.id.as_str())
        .unwrap_or_default();
    tracing::info!(state = "rebooting", boot_id = %view.boot_id, fleetlock_id = id, "drained; the host reboots itself (its FleetLock pre-reboot is answered 200 now)");
    ctx.services
        .events
        .publish_action(
            node,
            false,
            "RebootHandedOff",
            "HandOff",
            format!(
                "drained and past its hooks; its host (FleetLock id {id}) holds the slot and \
                 reboots itself: its next pre-reboot is answered 200"
            ),
        )
        .await;
    ctx.wake.notify_one();
    Ok(())
}

/// The host of a cycle for its own shutdown went down before the drain was over and is back
/// (`why`): `state: rebooting` with `handed-off` and `undrained` in one write, the boot it
/// started on kept, so that the cycle goes on to verify the node and ends counted undrained.
/// Said with a `ShutdownNotDrained` Event.
pub(super) async fn overtaken(ctx: &Ctx, view: &NodeView, why: String) -> Result<(), Error> {
    let node = view.name.as_str();
    let now = Utc::now();
    let mut ann = proto::state_annotations(NodeState::Rebooting, now);
    ann.push((proto::HANDED_OFF, Some(crate::time::annotation(now))));
    ann.push((proto::REBOOT, None));
    let record = proto::Undrained {
        at: crate::time::annotation(now),
        why: why.clone(),
    };
    ann.push((proto::UNDRAINED, Some(record.to_annotation())));
    patch_node(
        ctx,
        view,
        "recording a shutdown that went before its drain",
        proto::patch(&ann, None),
    )
    .await?;
    tracing::warn!(state = "rebooting", reason = %why, "the host's own shutdown went before the drain was over; verifying the node, counted undrained");
    ctx.services
        .events
        .publish_action(node, true, "ShutdownNotDrained", "Overtaken", why)
        .await;
    ctx.wake.notify_one();
    Ok(())
}

/// While the node reboots: the health gate's watches start now, so their lists are done by
/// the time the node is back; the gate decides only then, from what they see at that moment.
/// Started again only when the record changed: compared as written, since parsing it (the
/// labels of every evicted pod) on every pass was a cost of its own.
pub(super) fn await_back(ctx: &Ctx, view: &NodeView, gates: &mut Gates) {
    let name = view.name.as_str();
    let text = view.health_gate.as_deref();
    if let Some(text) = text.filter(|t| gates.get(name).is_none_or(|(g, _)| g != t)) {
        if let Ok(record) = serde_json::from_str::<GateRecord>(text) {
            let gate = Gate::start(
                &ctx.services.workloads,
                &record,
                ctx.config.concurrency.max_nodes > 1,
            );
            gates.insert(name.into(), (text.to_string(), gate));
        }
    }
}

/// The node is back with a new boot ID and Ready: `verifying` and the uncordon in one write,
/// so the state is on the Node no later than the act, and a successor finds either both or
/// neither. With afterReboot hooks the node stays cordoned until they pass.
pub(super) async fn mark_verifying(ctx: &Ctx, view: &NodeView) -> Result<(), Error> {
    let ours = view.cordoned_by.is_some()
        && view.unschedulable
        && !crate::hooks::decide::configured(&ctx.config, Phase::AfterReboot);
    let mut ann = proto::state_annotations(NodeState::Verifying, Utc::now());
    if ours {
        ann.push((proto::CORDONED_BY, None));
        ann.extend(proto::unprotect_keys(&view.protected));
    }
    patch_node(
        ctx,
        view,
        "marking it verifying",
        proto::patch(&ann, ours.then_some(false)),
    )
    .await?;
    tracing::info!(
        state = "verifying",
        uncordoned = ours,
        "back with a new boot ID and Ready"
    );
    ctx.wake.notify_one();
    Ok(())
}
