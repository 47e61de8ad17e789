//! The steps of a node's cycle, carried out: one function per phase, dispatched from one match.
//!
//! Owns [`run_step`], which carries out the [`Step`] that [`super::decide::next_step`] returned
//! for a node in the lock, and the phases it dispatches to, one module each:
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

/// Carries out one step for node `name` (`view`: its Node, if it has one); returns a deadline
/// to look again at, if any. A step that runs on (a drain, a health gate, a blocking webhook)
/// is spawned into `tasks`; a health gate started early is kept in `gates`.
pub(super) async fn run_step(
    ctx: &Ctx,
    name: &str,
    view: Option<&NodeView>,
    step: Step,
    tasks: &mut HashMap<String, StepTask>,
    gates: &mut Gates,
) -> Result<Option<DateTime<Utc>>, Error> {
    match step {
        Step::Cordon { record_cordoned_by } => {
            cordon::cordon(
                ctx,
                view.expect("a cordon step has a node"),
                record_cordoned_by,
            )
            .await?
        }
        Step::Drain { .. } => {
            drain::start(ctx, view.expect("a drain step has a node"), tasks).await?
        }
        Step::RequestReboot { attempt } => {
            reboot::request_again(ctx, view.expect("a reboot step has a node"), attempt).await?
        }
        Step::HandOff => {
            reboot::hand_off(ctx, view.expect("a hand-off step has a node"), None).await?
        }
        Step::Overtaken(why) => {
            reboot::overtaken(ctx, view.expect("an overtaken step has a node"), why).await?
        }
        Step::Release(reason) => {
            end::release(ctx, view.expect("a release step has a node"), reason).await?
        }
        Step::AwaitReboot { deadline } => {
            reboot::await_back(ctx, name, view, gates);
            return Ok(Some(deadline));
        }
        Step::MarkVerifying => {
            reboot::mark_verifying(ctx, view.expect("a verify step has a node")).await?
        }
        Step::Uncordon => cordon::uncordon(ctx, view.expect("an uncordon step has a node")).await?,
        Step::HealthGate { deadline } => health::start(ctx, name, view, deadline, tasks, gates),
        // The watch brings the taint's arrival (a new pass); the bound is the fallback.
        Step::Settle { until } => return Ok(Some(until)),
        // Looked at again on every pass the watch brings: debug, not to repeat it at info.
        Step::Hold { until, why } => {
            tracing::debug!(node = name, %until, why, "its slot in the maintenance lock stays taken");
            return Ok(Some(until));
        }
        Step::Fail(reason) => end::fail(ctx, view.expect("a fail step has a node"), reason).await?,
        Step::FailHook { phase, reason } => {
            end::fail_hook(ctx, view.expect("a fail step has a node"), phase, reason).await?
        }
        Step::Hook { phase, action } => {
            hooks::step(
                ctx,
                view.expect("a hook step has a node"),
                phase,
                action,
                tasks,
            )
            .await?
        }
        Step::Free(reason) => end::free_slot(ctx, name, view, reason).await?,
    }
    Ok(None)
}
