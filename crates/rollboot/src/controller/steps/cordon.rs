//! The cordon that starts a node's cycle, and the uncordon that follows its reboot.
//!
//! Owns what the cordon writes (`cordoning`, `cordoned-by` when rollboot owns the cordon, a
//! cycle cleared of an earlier one's keys) and the plain uncordon of a node rollboot cordoned.
//! The uncordon folded into `verifying` is [`super::reboot::mark_verifying`]'s. It must never
//! uncordon a node an operator cordoned.

use chrono::Utc;

use crate::controller::context::Ctx;
use crate::controller::error::Error;
use crate::controller::writes::patch_node;
use crate::node::{self as proto, NodeState, NodeView};

/// Writes `state: cordoning` and cordons `view`'s node, recording `cordoned-by` when
/// `record_cordoned_by` (rollboot owns the cordon, so it will uncordon).
pub(in crate::controller) async fn cordon(
    ctx: &Ctx,
    view: &NodeView,
    record_cordoned_by: bool,
) -> Result<(), Error> {
    let name = view.name.as_str();
    let mut ann = proto::state_annotations(NodeState::Cordoning, Utc::now());
    if record_cordoned_by {
        ann.push((
            proto::CORDONED_BY,
            Some(ctx.leadership.identity().to_string()),
        ));
    }
    ann.push((proto::FAILURE_REASON, None));
    // Drained, the node looks empty to cluster-autoscaler and Karpenter: kept from them until
    // the uncordon (only what is not there already is written, and recorded as rollboot's).
    ann.extend(proto::protect_keys(
        &ctx.config.nodes.protect.keys(),
        &view.other_annotations,
    ));
    // Started: no longer passed over.
    ann.push((proto::PASSED_OVER, None));
    // A cycle starts clean: no token, boot ID or health gate of an earlier one (or of a
    // forged state) is left for the agent or for a later step to act on.
    for k in proto::CYCLE_KEYS {
        ann.push((k, None));
    }
    // A cycle for a shutdown of its host says so: cancelled, it ends without a reboot.
    // Its boot now is the one to see change: the host may go down before the drain ends (the
    // agent lets it go at logind's limit) and be back on a new boot by then.
    if view.shutdown_requested {
        ann.push((proto::CYCLE_FOR, Some(proto::CYCLE_FOR_SHUTDOWN.into())));
        ann.extend(view.boot_before());
    }
    patch_node(ctx, view, "cordoning", proto::patch(&ann, Some(true))).await?;
    tracing::info!(
        state = "cordoning",
        operator_cordoned = !record_cordoned_by,
        "cordoned"
    );
    ctx.services
        .events
        .publish(
            name,
            false,
            "Cordoned",
            if record_cordoned_by {
                "cordoned for a reboot".into()
            } else {
                "already cordoned by an operator; it stays cordoned after the reboot".into()
            },
        )
        .await;
    ctx.wake.notify_one();
    Ok(())
}

/// Uncordons `view`'s node (rollboot cordoned it), forgetting `cordoned-by` and removing the
/// protections rollboot wrote in the same write.
pub(in crate::controller) async fn uncordon(ctx: &Ctx, view: &NodeView) -> Result<(), Error> {
    let mut ann = vec![(proto::CORDONED_BY, None)];
    ann.extend(proto::unprotect_keys(&view.protected));
    patch_node(ctx, view, "uncordoning", proto::patch(&ann, Some(false))).await?;
    tracing::info!(state = "verifying", "uncordoned");
    ctx.wake.notify_one();
    Ok(())
}
