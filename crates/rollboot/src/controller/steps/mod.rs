//! The steps of a node's cycle, carried out: one function per phase, dispatched from one match.
//!
//! Owns [`run_step`], which carries out the [`Step`] that [`super::decide::next_step`] returned
//! for a node in the lock with its Node ([`run_gone_step`] for one without: its slot held or
//! freed), each in a span naming the node, and the phases it dispatches to, one module each:
//! - [`cordon`]: the cordon that starts a cycle, and the uncordon after the reboot;
//! - [`drain`]: the drain, run as the node's task, and what its end writes (the reboot request,
//!   or the afterDrain hooks' start);
//! - [`reboot`]: the reboot request (a fresh token), the wait for the node to come back, and
//!   the mark that it is back (`verifying`);
//! - [`health`]: the health gate, run as the node's task, and the gates started early;
//! - [`hooks`]: the hooks' steps (their records, the webhooks, the answers);
//! - [`end`]: the ends of a cycle: done, failed, the slot freed;
//! - [`silence`]: the node's Alertmanager silence, made before the drain and expired at the
//!   cycle's end.
//!
//! Every step is written to the Node before it is acted on, fenced by the version it was
//! decided from ([`super::writes`]). A step must never decide: it carries out what the pure
//! state machine said, and a step that ends long after its pass (a drain, a gate) decides its
//! write again from the node as known then.

pub(super) mod cordon;
pub(super) mod drain;
pub(super) mod end;
pub(super) mod health;
pub(super) mod hooks;
pub(super) mod reboot;
pub(super) mod silence;

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::context::Ctx;
use super::decide::Step;
use super::error::Error;
use super::task::StepTask;
use crate::node::NodeView;
use health::Gates;

/// Carries out one step for the node of `view` (in the lock, with a Node); returns a deadline
/// to look again at, if any. A step that runs on (a drain, a health gate, a blocking webhook)
/// is spawned into `tasks`; a health gate started early is kept in `gates`. Its logs name the
/// node through its span.
#[tracing::instrument(level = "error", name = "step", skip_all, fields(node = view.name.as_str()))]
pub(super) async fn run_step(
    ctx: &Ctx,
    view: &NodeView,
    step: Step,
    tasks: &mut HashMap<String, StepTask>,
    gates: &mut Gates,
) -> Result<Option<DateTime<Utc>>, Error> {
    match step {
        Step::Cordon { record_cordoned_by } => {
            cordon::cordon(ctx, view, record_cordoned_by).await?
        }
        Step::Drain { .. } => drain::start(ctx, view, tasks).await?,
        Step::RequestReboot { attempt } => reboot::request_again(ctx, view, attempt).await?,
        Step::HandOff => reboot::hand_off(ctx, view, None).await?,
        Step::Overtaken(why) => reboot::overtaken(ctx, view, why).await?,
        Step::Release(reason) => end::release(ctx, view, reason).await?,
        Step::AwaitReboot { deadline } => {
            reboot::await_back(ctx, view, gates);
            return Ok(Some(deadline));
        }
        Step::MarkVerifying => reboot::mark_verifying(ctx, view).await?,
        Step::Uncordon => cordon::uncordon(ctx, view).await?,
        Step::HealthGate { deadline } => health::start(ctx, view, deadline, tasks, gates),
        Step::Fail(reason) => end::fail(ctx, view, reason).await?,
        Step::FailHook { phase, reason } => end::fail_hook(ctx, view, phase, reason).await?,
        Step::Hook { phase, action } => hooks::step(ctx, view, phase, action, tasks).await?,
        Step::Free(reason) if view.deleting => end::free_gone(ctx, &view.name, reason).await?,
        Step::Free(reason) => end::free_slot(ctx, view, reason).await?,
        // The watch brings the taint's arrival (a new pass); the bound is the fallback.
        Step::Settle { until } => return Ok(Some(until)),
        Step::Hold { until, why } => return Ok(Some(hold(until, &why))),
    }
    Ok(None)
}

/// Carries out one step for node `name`, in the lock with no Node (deleted, or never seen):
/// the state machine holds its slot or frees it ([`super::decide::next_step`] decides nothing
/// else for it); returns a deadline to look again at, if any. Its logs name the node through
/// its span.
#[tracing::instrument(level = "error", name = "step", skip_all, fields(node = name))]
pub(super) async fn run_gone_step(
    ctx: &Ctx,
    name: &str,
    step: Step,
) -> Result<Option<DateTime<Utc>>, Error> {
    match step {
        Step::Free(reason) => end::free_gone(ctx, name, reason).await?,
        Step::Hold { until, why } => return Ok(Some(hold(until, &why))),
        // What is carried out on a Node, for a node with none: nothing to carry it out on; it
        // is decided again on the next pass.
        step => {
            tracing::error!(
                ?step,
                "a step on the node's Node, but it has none: not carried out"
            );
        }
    }
    Ok(None)
}

/// The slot stays taken until `until` (or the node's next change), for `why`.
fn hold(until: DateTime<Utc>, why: &str) -> DateTime<Utc> {
    // Looked at again on every pass the watch brings: debug, not to repeat it at info.
    tracing::debug!(%until, why, "its slot in the maintenance lock stays taken");
    until
}
