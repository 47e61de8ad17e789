//! The node's Alertmanager silence over its cycle (`silences.alertmanager`): made before the
//! drain, expired before the cycle's end is written.
//!
//! Owns the two requests' place in a cycle and what their failures do (a warning and a count,
//! never a held node), and the reading of the ID a Node records
//! (`rollboot.dev/silence-id`): a value that is no silence ID ([`crate::silences::recorded`])
//! is treated as no silence recorded, said (a warning naming the node, the key and the value,
//! cut; a Warning Event `SilenceIdRejected`) and sent nowhere; a silence ID is expired only
//! when Alertmanager says rollboot made it for this node ([`crate::silences::expiry`]). It must
//! never put a value it did not check into a request, nor hold a node for a silence.

use chrono::{DateTime, Utc};

use crate::controller::context::Ctx;
use crate::node::{self as proto, NodeView};
use crate::silences::{Expiry, SilenceId};

/// The Event reason of a recorded silence ID rollboot will not act on.
const REJECTED: &str = "SilenceIdRejected";

/// Makes the node's silence for this cycle: its ID, or `None` (not configured, or Alertmanager
/// not answering: warned and counted, the drain goes on). A silence left by an earlier cycle's
/// end that could not expire it is expired first. Made before the write that records it: a
/// leader that dies in between leaves a silence nobody names, which ends on its own after the
/// longest cycle (its `endsAt`).
pub(super) async fn create(ctx: &Ctx, view: &NodeView, now: DateTime<Utc>) -> Option<SilenceId> {
    let (am, matchers) = ctx.services.silencer.as_ref()?;
    let node = view.name.as_str();
    expire(ctx, view).await;
    let c = &ctx.config;
    let s = c.silences.alertmanager.as_ref()?;
    let longest = c.drain.timeout.to_chrono()
        + c.reboot.timeout.to_chrono()
        + c.health_gate.timeout.to_chrono()
        + s.extra.to_chrono();
    let silence = crate::silences::silence_for(node, matchers, now, longest);
    match am.create(&silence).await {
        Ok(id) => {
            ctx.services.metrics.silence("created");
            tracing::info!(silence = %id, until = %silence.ends_at, "Alertmanager silence created");
            Some(id)
        }
        Err(e) => {
            ctx.services.metrics.silence("failed");
            tracing::warn!(error = %e, "could not create the node's Alertmanager silence; draining anyway");
            None
        }
    }
}

/// Expires the node's recorded silence, before the write that ends the cycle drops its ID: a
/// leader that dies in between expires it again (an expired one is fine). Only rollboot's own
/// silence of this node is expired; another is left alone and said. An Alertmanager that
/// cannot be asked never holds the node: warned and counted; the silence then ends on its own.
pub(super) async fn expire(ctx: &Ctx, view: &NodeView) {
    let Some((am, _)) = ctx.services.silencer.as_ref() else {
        return;
    };
    let Some(id) = recorded(ctx, view).await else {
        return;
    };
    let node = view.name.as_str();
    let expired = match am.get(&id).await {
        Ok(existing) => match crate::silences::expiry(existing.as_ref(), node) {
            Expiry::Expire => am.expire(&id).await,
            Expiry::Over => Ok(()),
            Expiry::NotOurs(why) => {
                tracing::warn!(key = proto::SILENCE_ID, silence = %id, "not expiring the silence the node names: {why}");
                ctx.services
                    .events
                    .publish(
                        node,
                        true,
                        REJECTED,
                        format!(
                            "annotation {} names silence {id}, {why}: not expired",
                            proto::SILENCE_ID
                        ),
                    )
                    .await;
                return;
            }
        },
        Err(e) => Err(e),
    };
    match expired {
        Ok(()) => {
            ctx.services.metrics.silence("expired");
            tracing::info!(silence = %id, "Alertmanager silence expired");
        }
        Err(e) => {
            ctx.services.metrics.silence("expire_failed");
            tracing::warn!(silence = %id, error = %e, "could not expire the node's Alertmanager silence; it ends on its own");
        }
    }
}

/// The silence ID the node records, if any; a value that is no silence ID is none, said.
async fn recorded(ctx: &Ctx, view: &NodeView) -> Option<SilenceId> {
    match crate::silences::recorded(view.silence_id.as_deref()) {
        Ok(id) => id,
        Err(r) => {
            let node = view.name.as_str();
            tracing::warn!(key = proto::SILENCE_ID, value = ?r.value, "the node's recorded silence is {}: sent nowhere, treated as no silence recorded", r.why);
            ctx.services
                .events
                .publish(
                    node,
                    true,
                    REJECTED,
                    format!(
                        "annotation {} {:?} is {}: sent nowhere, treated as no silence recorded",
                        proto::SILENCE_ID,
                        r.value,
                        r.why
                    ),
                )
                .await;
            None
        }
    }
}
