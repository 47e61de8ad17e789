//! The health gate phase: the gate run as the node's task, and what its end writes.
//!
//! Owns [`Gates`] (the gates started while their node reboots, see
//! [`super::reboot::await_back`]), the start of the gate's wait (the one started early when its
//! record is unchanged, a new one otherwise), and its end, decided again from the node as it is
//! then: `done` when the gate passed, `failed` with what it still waited for. It must never
//! act on a node that is no longer verifying.
//!
//! With `drain.volumes.waitForReattach`, the end also waits (within `reattachTimeout` from the
//! gate's start) until each volume that moved with the evicted pods is attached where the pod's
//! replacement runs, reading the namespace's candidate pods and that node's VolumeAttachment by
//! name ([`crate::controller::gate::reattach`] decides); past the timeout the node is done
//! anyway, with a `VolumeNotReattached` warning per volume.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::end::{fail, finish, Reattached};
use crate::controller::context::Ctx;
use crate::controller::error::Error;
use crate::controller::gate::reattach::{candidates_selector, next_read, Reattach, Where};
use crate::controller::gate::{Gate, GateRecord};
use crate::controller::task::StepTask;
use crate::drain::Moved;
use crate::node::{NodeState, NodeView};

/// The health gates started while their node reboots, by node, each with the record it was
/// started from as written on the Node.
pub(in crate::controller) type Gates = HashMap<String, (String, Gate)>;

/// Runs the health gate of `view`'s node as its task, until `deadline`: the gate started while
/// it rebooted when its record is the one on the Node now, else a new one.
pub(super) fn start(
    ctx: &Ctx,
    view: &NodeView,
    deadline: DateTime<Utc>,
    tasks: &mut HashMap<String, StepTask>,
    gates: &mut Gates,
) {
    let name = view.name.as_str();
    let record = GateRecord::read(view.health_gate.as_deref()).unwrap_or_default();
    let moved = record.reattach.clone();
    let gate = match gates.remove(name) {
        Some((_, g)) if *g.record() == record => g,
        _ => Gate::start(
            &ctx.services.workloads,
            &record,
            ctx.config.concurrency.max_nodes > 1,
        ),
    };
    // The gate's start, from which `deadline` was counted: the reattach wait's bound counts
    // from it too, so a restarted controller keeps it.
    let began = deadline - ctx.config.health_gate.timeout.to_chrono();
    let until = began + ctx.config.drain.volumes.reattach_timeout.to_chrono();
    let ctx2 = ctx.clone();
    let node = name.to_string();
    tasks.insert(
        name.into(),
        StepTask::spawn(
            ctx.wake.clone(),
            tracing::error_span!(parent: None, "health_gate", node = name),
            async move {
                let (passed, reattached) = tokio::join!(
                    gate.wait(deadline, &node, &ctx2.services.events),
                    await_reattached(&ctx2, &node, &moved, began, until),
                );
                ended(&ctx2, node, passed, reattached).await;
            },
        ),
    );
}

/// Waits until every volume of `moved` is attached where its pod's replacement runs, or
/// `until`: then each one still waited for is a `VolumeNotReattached` warning Event about
/// `node`, and the node goes on. `None` when nothing is waited for.
async fn await_reattached(
    ctx: &Ctx,
    node: &str,
    moved: &[Moved],
    began: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Option<Reattached> {
    if moved.is_empty() {
        return None;
    }
    let mut r = Reattach::new(moved);
    // A few volumes, read by name: polled, at most once a second (more often where the
    // timeout is short, as in a rehearsal's scaled config).
    let poll = (ctx.config.drain.volumes.reattach_timeout.to_std() / 60)
        .clamp(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        if let Err(e) = look(ctx, &mut r).await {
            tracing::debug!(error = %e, "reading where the moved volumes are attached");
        }
        let now = Utc::now();
        if r.done() {
            let seconds = (now - began).num_milliseconds().max(0) as f64 / 1000.0;
            tracing::info!(
                volumes = moved.len(),
                seconds,
                "the moved volumes are attached where their pods' replacements run"
            );
            return Some(Reattached {
                seconds: Some(seconds),
                late: Vec::new(),
            });
        }
        if now >= until {
            break;
        }
        tokio::time::sleep(poll.min((until - now).to_std().unwrap_or_default())).await;
    }
    let timeout = ctx.config.drain.volumes.reattach_timeout;
    let mut late = Vec::new();
    for (pv, why) in r.waiting() {
        let note = format!(
            "not attached where its pod's replacement runs within drain.volumes.reattachTimeout ({timeout}): {why}; the node goes on"
        );
        tracing::warn!(pv, "{note}");
        ctx.services
            .events
            .publish_action(
                node,
                true,
                "VolumeNotReattached",
                &format!("Wait {pv}"),
                note,
            )
            .await;
        late.push(pv);
    }
    Some(Reattached {
        seconds: None,
        late,
    })
}

/// Reads where each volume still waited for stands: the candidates for its pod's replacement
/// (one list per namespace and selector), then that node's VolumeAttachment by name.
async fn look(ctx: &Ctx, r: &mut Reattach) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::storage::v1::VolumeAttachment;
    let mut listed: HashMap<(String, String), Vec<Pod>> = HashMap::new();
    let attachments: kube::Api<VolumeAttachment> = kube::Api::all(ctx.services.client.clone());
    for m in r.pending() {
        let selector = candidates_selector(&m);
        let key = (m.namespace.clone(), selector);
        if !listed.contains_key(&key) {
            let pods: kube::Api<Pod> =
                kube::Api::namespaced(ctx.services.client.clone(), &m.namespace);
            let lp = kube::api::ListParams::default().labels(&key.1);
            listed.insert(key.clone(), pods.list(&lp).await?.items);
        }
        let at = match next_read(&m, &listed[&key]) {
            Err(at) => at,
            Ok((pod, node, attachment)) => {
                let attached = attachments
                    .get_opt(&attachment)
                    .await?
                    .and_then(|a| a.status)
                    .is_some_and(|s| s.attached);
                if attached {
                    Where::Attached { pod, node }
                } else {
                    Where::NotAttached {
                        pod,
                        node,
                        attachment,
                    }
                }
            }
        };
        r.saw(&m.pv, at);
    }
    Ok(())
}

/// The gate's end, decided now from the node as it is now (the gate may have taken minutes):
/// `done` when it passed, `failed` with what it still waited for at its deadline.
async fn ended(
    ctx: &Ctx,
    node: String,
    passed: Result<(), String>,
    reattached: Option<Reattached>,
) {
    let Some(view) = ctx.cache.still(&node, NodeState::Verifying) else {
        tracing::info!("health gate ended, but the node is no longer verifying; not acting");
        return;
    };
    let r = match passed {
        Ok(()) => finish(ctx, &view, reattached.as_ref()).await,
        Err(why) => {
            let within = ctx.config.health_gate.timeout;
            let reason = format!("the health gate did not pass within {within}: {why}");
            fail(ctx, &view, reason).await
        }
    };
    match r {
        Ok(()) | Err(Error::NotLeader(_)) => {}
        Err(Error::Conflict { rv, .. }) => ctx.cache.await_newer(&node, &rv).await,
        Err(e) => {
            tracing::warn!(error = %e, "finishing the node");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
