//! The hooks' steps: what each records on the Node, then does.
//!
//! Owns the carrying out of a hook [`Action`] decided by [`crate::hooks::decide`]: a phase
//! begun (its labels and taints), fire-and-forget webhooks recorded then sent, a blocking
//! webhook's attempt recorded then called as the node's task (its answer written back on the
//! Node), a phase passed. Each write is fenced by the view it was decided from, and comes
//! before the act, so a successor never sends an attempt twice. It must never decide whether a
//! hook runs or passes.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::hooks::Webhook;
use crate::config::Phase;
use crate::controller::context::Ctx;
use crate::controller::error::Error;
use crate::controller::task::StepTask;
use crate::controller::writes::patch_node;
use crate::hooks::decide::{self as hd, Action};
use crate::node::{NodeView, Token};

/// Carries out a hook step: writes what it records (fenced by the view it was decided from),
/// then acts. A blocking webhook's call runs as the node's task, which records the answer.
pub(super) async fn step(
    ctx: &Ctx,
    view: &NodeView,
    phase: Phase,
    action: Action,
    tasks: &mut HashMap<String, StepTask>,
) -> Result<(), Error> {
    let now = Utc::now();
    match action {
        Action::Begin => begin(ctx, view, phase, now).await?,
        Action::Fire(names) => fire(ctx, view, phase, &names, now).await?,
        Action::Call {
            name,
            attempt,
            token,
        } => {
            let Some(webhook) = ctx.config.hooks.phase(phase).webhook(&name).cloned() else {
                return Ok(());
            };
            let token = token.unwrap_or_else(|| Token::new(now, rand::random()).text);
            let call = BlockingCall {
                phase,
                webhook,
                name,
                attempt,
                token,
            };
            call.start(ctx, view, now, tasks).await?
        }
        Action::Pass => pass(ctx, view, phase, now).await?,
    }
    ctx.wake.notify_one();
    Ok(())
}

/// The phase begins: its labels and taints written.
async fn begin(ctx: &Ctx, view: &NodeView, phase: Phase, now: DateTime<Utc>) -> Result<(), Error> {
    let p = hd::begin_patch(phase, &ctx.config, view, now);
    patch_node(ctx, view, &format!("beginning its {phase} hooks"), p).await?;
    tracing::info!(phase = %phase, "hooks: phase begun (its labels and taints written)");
    // An operator sees that the node now waits, on what, and for how long at most.
    if let Some(what) = hd::what_holds(phase, &ctx.config) {
        ctx.services
            .events
            .publish_action(
                &view.name,
                false,
                "HookWaiting",
                &format!("Wait {phase}"),
                format!(
                    "hooks.{phase}: the node waits for {what} (at most {})",
                    ctx.config.hooks.phase(phase).timeout
                ),
            )
            .await;
    }
    Ok(())
}

/// The fire-and-forget webhooks `names`: each recorded with a token, then sent off the step
/// path (never waited for).
async fn fire(
    ctx: &Ctx,
    view: &NodeView,
    phase: Phase,
    names: &[String],
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let tokens: Vec<(String, String)> = names
        .iter()
        .map(|n| (n.clone(), Token::new(now, rand::random()).text))
        .collect();
    let p = hd::fire_patch(phase, view, now, &tokens);
    let written = patch_node(ctx, view, &format!("recording its {phase} webhooks"), p).await?;
    let written = NodeView::from_node(&written);
    for (name, token) in tokens {
        let Some(w) = ctx.config.hooks.phase(phase).webhook(&name) else {
            continue;
        };
        let body = hd::body(phase, w, &written, &token, 1, now);
        ctx.services.firer.fire(phase, w.clone(), body);
    }
    Ok(())
}

/// The phase passed: recorded, and its labels and taints of the phase's end written.
async fn pass(ctx: &Ctx, view: &NodeView, phase: Phase, now: DateTime<Utc>) -> Result<(), Error> {
    let p = hd::pass_patch(phase, &ctx.config, view, now);
    patch_node(
        ctx,
        view,
        &format!("recording its {phase} hooks as passed"),
        p,
    )
    .await?;
    ctx.services.metrics.hook_result(phase.as_str(), "passed");
    tracing::info!(phase = %phase, "hooks: phase passed");
    if hd::what_holds(phase, &ctx.config).is_some() {
        let waited = hd::phase_record(view, phase, view.state_since.unwrap_or(now))
            .map(|p| (now - p.since).num_milliseconds().max(0) as f64 / 1000.0);
        let note = match waited {
            Some(s) => format!("hooks.{phase} passed after {s:.1}s"),
            None => format!("hooks.{phase} passed"),
        };
        ctx.services
            .events
            .publish_action(
                &view.name,
                false,
                "HookPassed",
                &format!("Pass {phase}"),
                note,
            )
            .await;
    }
    Ok(())
}

/// One attempt of a blocking webhook: its phase, the webhook, its name, the attempt's number
/// and token.
struct BlockingCall {
    phase: Phase,
    webhook: Webhook,
    name: String,
    attempt: u32,
    token: String,
}

impl BlockingCall {
    /// Records the attempt (before it is sent: a successor sees it as made, and never sends it
    /// again), then calls the webhook as the node's task, which records the answer.
    async fn start(
        self,
        ctx: &Ctx,
        view: &NodeView,
        now: DateTime<Utc>,
        tasks: &mut HashMap<String, StepTask>,
    ) -> Result<(), Error> {
        let BlockingCall {
            phase,
            ref name,
            attempt,
            ref token,
            ..
        } = self;
        let node = view.name.as_str();
        let p = hd::call_patch(phase, view, now, name, token, attempt);
        let written = patch_node(
            ctx,
            view,
            &format!("recording attempt {attempt} of webhook {name}"),
            p,
        )
        .await?;
        let written = NodeView::from_node(&written);
        let body = hd::body(phase, &self.webhook, &written, token, attempt, now);
        tracing::info!(phase = %phase, hook = %name, token, attempt, "asking a blocking webhook");
        let ctx2 = ctx.clone();
        let node = node.to_string();
        tasks.insert(
            node.clone(),
            StepTask::spawn(
                ctx.wake.clone(),
                tracing::error_span!(parent: None, "webhook", node = node.as_str()),
                async move {
                    let answer = self.ask(&ctx2, &body).await;
                    self.record_answer(&ctx2, &node, answer).await;
                },
            ),
        );
        Ok(())
    }

    /// Sends the attempt and reads the answer (counted, and logged: a "no" holds the node).
    async fn ask(&self, ctx: &Ctx, body: &crate::hooks::Body) -> crate::hooks::Answer {
        let BlockingCall {
            phase,
            name,
            attempt,
            token,
            ..
        } = self;
        let outcome = crate::hooks::call::post(&self.webhook, body).await;
        ctx.services
            .metrics
            .hook_result(phase.as_str(), outcome.metric_label());
        let answer = crate::hooks::Answer {
            yes: outcome.yes(),
            detail: outcome.detail(),
            at: Utc::now(),
        };
        if answer.yes {
            tracing::info!(phase = %phase, hook = %name, token, attempt, answer = %answer.detail, "the webhook said yes");
        } else {
            // An expected answer of a gate: the node waits, as configured (INFO, not a fault).
            tracing::info!(phase = %phase, hook = %name, token, attempt, answer = %answer.detail, "the webhook did not say yes yet; the node is held");
        }
        answer
    }

    /// Writes the answer on the Node, if the Node still shows this attempt unanswered; a write
    /// refused with 409 is tried again on the newer version, a few times. An answer that cannot
    /// be written is lost: the attempt then counts as unanswered, and the next one is sent
    /// after its backoff (never the same one again).
    async fn record_answer(&self, ctx: &Ctx, node: &str, answer: crate::hooks::Answer) {
        let BlockingCall {
            phase,
            name,
            attempt,
            token,
            ..
        } = self;
        let (phase, attempt) = (*phase, *attempt);
        for _ in 0..5 {
            let Some(view) = ctx.cache.current(node) else {
                return;
            };
            let Some(p) = hd::answer_patch(phase, &view, name, token, attempt, answer.clone())
            else {
                tracing::info!(phase = %phase, hook = %name, attempt, "the node no longer waits for this answer; not recording it");
                return;
            };
            match patch_node(
                ctx,
                &view,
                &format!("recording the answer of webhook {name}"),
                p,
            )
            .await
            {
                Ok(_) => return,
                Err(Error::Conflict { rv, .. }) => ctx.cache.await_newer(node, &rv).await,
                Err(Error::NotLeader(_)) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "recording a webhook's answer");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}
