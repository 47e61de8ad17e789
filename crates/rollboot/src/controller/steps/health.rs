//! The health gate phase: the gate run as the node's task, and what its end writes.
//!
//! Owns [`Gates`] (the gates started while their node reboots, see
//! [`super::reboot::await_back`]), the start of the gate's wait (the one started early when its
//! record is unchanged, a new one otherwise), and its end, decided again from the node as it is
//! then: `done` when the gate passed, `failed` with what it still waited for. It must never
//! act on a node that is no longer verifying.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::end::{fail, finish};
use crate::controller::context::Ctx;
use crate::controller::error::Error;
use crate::controller::gate::{Gate, GateRecord};
use crate::controller::task::StepTask;
use crate::node::{NodeState, NodeView};

/// The health gates started while their node reboots, by node, each with the record it was
/// started from as written on the Node.
pub(in crate::controller) type Gates = HashMap<String, (String, Gate)>;

/// Runs node `name`'s health gate as its task, until `deadline`: the gate started while it
/// rebooted when its record is the one on the Node now, else a new one.
pub(super) fn start(
    ctx: &Ctx,
    name: &str,
    view: Option<&NodeView>,
    deadline: DateTime<Utc>,
    tasks: &mut HashMap<String, StepTask>,
    gates: &mut Gates,
) {
    let record = view
        .and_then(|v| GateRecord::read(v.health_gate.as_deref()))
        .unwrap_or_default();
    let gate = match gates.remove(name) {
        Some((_, g)) if *g.record() == record => g,
        _ => Gate::start(&ctx.gate_hub, &record),
    };
    let ctx2 = ctx.clone();
    let node = name.to_string();
    tasks.insert(
        name.into(),
        StepTask::spawn(ctx.wake.clone(), async move {
            let passed = gate.wait(deadline, &node, &ctx2.events).await;
            ended(&ctx2, node, passed).await;
        }),
    );
}

/// The gate's end, decided now from the node as it is now (the gate may have taken minutes):
/// `done` when it passed, `failed` with what it still waited for at its deadline.
async fn ended(ctx: &Ctx, node: String, passed: Result<(), String>) {
    let Some(view) = ctx.still(&node, NodeState::Verifying) else {
        tracing::info!(
            node,
            "health gate ended, but the node is no longer verifying; not acting"
        );
        return;
    };
    let r = match passed {
        Ok(()) => finish(ctx, &view).await,
        Err(why) => {
            let within = ctx.config.health_gate.timeout;
            let reason = format!("the health gate did not pass within {within}: {why}");
            fail(ctx, &view, reason).await
        }
    };
    match r {
        Ok(()) | Err(Error::NotLeader(_)) => {}
        Err(Error::Conflict { rv, .. }) => ctx.await_newer(&node, &rv).await,
        Err(e) => {
            tracing::warn!(node, error = %e, "finishing the node");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
