//! The drain phase: `draining` written, the drain run as the node's task, and what its end
//! writes.
//!
//! Owns the start of a drain ([`start`]: the state first, then the task), the drain itself
//! against the node's uncordon (an uncordoned node is not drained on), what a drain's failure
//! does (a refused or timed-out drain fails the node; an API error or lost leadership leaves it
//! to the next pass), and what a drain's end writes, decided again from the node as it is then:
//! the health gate's record with the reboot request, or with the afterDrain hooks' start; and
//! the budgets the drain reads from the controller's workload watches ([`BudgetSource`]). It
//! must never drain a node that is not cordoned, nor ask for its reboot.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::end::{fail, quarantine};
use super::reboot::{hand_off, request_reboot};
use crate::budgets::WorkloadWatches;
use crate::config::Phase;
use crate::controller::context::Ctx;
use crate::controller::decide;
use crate::controller::decide::Step;
use crate::controller::error::Error;
use crate::controller::gate::GateRecord;
use crate::controller::task::StepTask;
use crate::controller::writes::patch_node;
use crate::drain::{self, BudgetSource, DrainError, Drained, KubeDrain};
use crate::node::{self as proto, NodeState, NodeView};

/// Writes `state: draining` (unless the node is draining already: a drain resumed after a
/// restart keeps its start, and so its deadline) and runs the drain as the node's task.
pub(super) async fn start(
    ctx: &Ctx,
    view: &NodeView,
    tasks: &mut HashMap<String, StepTask>,
) -> Result<(), Error> {
    let name = view.name.as_str();
    let now = Utc::now();
    let since = if view.state != Some(NodeState::Draining) {
        let mut ann = proto::state_annotations(NodeState::Draining, now);
        // Its alerts silenced before anything is evicted, the silence's ID written with
        // `draining` (an Alertmanager that cannot be asked holds nothing).
        if let Some(id) = super::silence::create(ctx, view, now).await {
            ann.push((proto::SILENCE_ID, Some(id.to_string())));
        }
        patch_node(ctx, view, "marking it draining", proto::patch(&ann, None)).await?;
        tracing::info!(state = "draining", "draining");
        now
    } else {
        view.state_since.unwrap_or(now)
    };
    let deadline = since + ctx.config.drain.timeout.to_chrono();
    // The boot the reboot is asked from (with PID 1's start where the agent reads it).
    let boot = view.boot_before();
    let ctx2 = ctx.clone();
    let node = name.to_string();
    tasks.insert(
        name.into(),
        StepTask::spawn(
            ctx.wake.clone(),
            tracing::error_span!(parent: None, "drain", node = name),
            async move {
                let r = drain_then_request(&ctx2, &node, &boot, deadline).await;
                ended(&ctx2, node, r).await;
            },
        ),
    );
    Ok(())
}

/// What the drain task's end does with its outcome. A drain that cannot finish (refused, timed
/// out) fails the node, if it is still draining; a write refused with 409 waits for the newer
/// version; an API error is left to the next pass.
async fn ended(ctx: &Ctx, node: String, r: Result<(), Error>) {
    match r {
        Ok(()) | Err(Error::NotLeader(_)) => {}
        // Logged where it happened; decided again from the newer version.
        Err(Error::Conflict { rv, .. }) => ctx.cache.await_newer(&node, &rv).await,
        Err(Error::Drain(e)) if !matches!(e, DrainError::Api { .. } | DrainError::NotLeader(_)) => {
            match ctx.cache.still(&node, NodeState::Draining) {
                Some(view) => {
                    let written = match e.quarantined_for() {
                        Some(cause) => quarantine(ctx, &view, e.to_string(), cause.key()).await,
                        None => fail(ctx, &view, e.to_string()).await,
                    };
                    match written {
                        Ok(()) | Err(Error::NotLeader(_)) => {}
                        Err(Error::Conflict { rv, .. }) => ctx.cache.await_newer(&node, &rv).await,
                        Err(e) => {
                            tracing::warn!(error = %e, "could not mark the node failed")
                        }
                    }
                }
                None => {
                    tracing::info!(error = %e, "drain ended, but the node is no longer draining; not marking it failed")
                }
            }
        }
        Err(e) => {
            ctx.services.metrics.error(e.metric_label());
            tracing::warn!(error = %e, "drain interrupted; it resumes on the next pass");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Drains `node`, then writes what its end decides (from the node as it is then): the reboot
/// request, or the afterDrain hooks' start.
async fn drain_then_request(
    ctx: &Ctx,
    node: &str,
    boot: &[(&'static str, Option<String>)],
    deadline: DateTime<Utc>,
) -> Result<(), Error> {
    let Some(drained) = drain_while_cordoned(ctx, node, deadline).await? else {
        return Ok(());
    };
    ctx.services.metrics.evicted(drained.evicted.len());
    for part in &drained.parts {
        tracing::info!(step = %part.label, pods = part.pods, seconds = part.seconds, detach_seconds = part.detach_seconds, "drain step done");
    }
    let gate = gate_record(drained, ctx.config.drain.volumes.wait_for_reattach);
    // Decided now, from the node as it is now (the drain may have taken minutes): still
    // draining, as far as this replica knows; anything newer makes the write a 409. A 409
    // (the kubelet or the attach-detach controller wrote the Node's status meanwhile: it does
    // when the drained pods' volumes leave) is decided again from the newer version, with this
    // drain's record: a drain run again would find no pod to evict and hand the health gate
    // nothing to wait for.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some(view) = ctx.cache.still(node, NodeState::Draining) else {
            tracing::info!(
                "drained, but the node is no longer draining; not requesting the reboot"
            );
            return Ok(());
        };
        let gate_text = || Some(serde_json::to_string(&gate).expect("gate record"));
        let start = ctx
            .cache
            .cycle_start(node)
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let written = if crate::hooks::decide::configured(&ctx.config, Phase::AfterDrain) {
            begin_after_drain(ctx, &view, &gate).await
        } else {
            match decide::reboot_step(&view, start) {
                Step::HandOff => hand_off(ctx, &view, gate_text()).await,
                Step::Overtaken(why) => super::reboot::overtaken(ctx, &view, why).await,
                Step::Release(why) => super::end::release(ctx, &view, why).await,
                _ => request_reboot(ctx, &view, boot, gate_text(), 1).await,
            }
        };
        match written {
            Err(Error::Conflict { rv, .. }) if attempt < 5 => {
                ctx.cache.await_newer(node, &rv).await
            }
            r => return r,
        }
    }
}

/// The drain names the budgets that refuse its evictions from the controller's workload
/// watches, and asks again as soon as one has headroom.
impl BudgetSource for WorkloadWatches {
    fn budgets<'a>(
        &'a self,
        namespace: &'a str,
        pods: &'a [BTreeMap<String, String>],
        wait: Duration,
    ) -> BoxFuture<'a, Option<Vec<PodDisruptionBudget>>> {
        Box::pin(WorkloadWatches::budgets(self, namespace, pods, wait))
    }

    fn room<'a>(&'a self, namespace: &'a str, name: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(WorkloadWatches::until_headroom(self, namespace, name))
    }
}

/// Runs the drain of `node` until it ends, or until the node is uncordoned (`None`): a node
/// uncordoned under the drain (by an operator, or by anyone) is not drained on, and the next
/// pass starts the cycle over from the cordon.
async fn drain_while_cordoned(
    ctx: &Ctx,
    node: &str,
    deadline: DateTime<Utc>,
) -> Result<Option<Drained>, Error> {
    let api = KubeDrain {
        client: ctx.services.client.clone(),
        evict_client: ctx.services.evict_client.clone(),
        events: ctx.services.events.clone(),
        node: node.into(),
        metrics: Some(ctx.services.metrics.clone()),
        budgets_from: Some(ctx.services.workloads.clone() as Arc<dyn BudgetSource>),
    };
    // Evictions cannot carry a precondition on the Node: an eviction is a write to a Pod, and
    // the Eviction API takes preconditions only on that pod. They stay fenced by the leadership
    // check right before each one (`ensure`) and by the PodDisruptionBudgets the API server
    // enforces on every eviction, whoever sends it: a late eviction from a stale leader can
    // only take a pod a budget allows to go, and on a node that is being drained anyway.
    let leadership = ctx.leadership.clone();
    let ensure = move || leadership.ensure();
    let drain = drain::drain(
        &api,
        node,
        &ctx.config.drain,
        ctx.config.drain_pod_selector(),
        deadline,
        &ensure,
    );
    // What stops the drain before its end: the node uncordoned, the reboot's reason gone
    // (`decide::abandoned`: the shutdown cancelled, the FleetLock slot given back), which the
    // next pass ends with a release, or the host of a shutdown cycle gone down and back
    // (`decide::overtaken`), which the next pass records as undrained.
    let start = ctx
        .cache
        .cycle_start(node)
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let stopped = async {
        let mut seq = ctx.cache.node_seq.clone();
        loop {
            seq.borrow_and_update();
            if let Some(v) = ctx.cache.current(node) {
                if !v.unschedulable {
                    return None;
                }
                if let Some(why) = decide::overtaken(&v).or_else(|| decide::abandoned(&v, start)) {
                    return Some(why);
                }
            }
            if seq.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    };
    tokio::select! {
        r = drain => Ok(Some(r?)),
        why = stopped => {
            match why {
                None => tracing::warn!("the node was uncordoned during its drain; stopping the drain, its cycle starts over from the cordon"),
                Some(why) => tracing::info!(reason = %why, "stopping the drain: the reboot is no longer wanted, or has happened"),
            }
            Ok(None)
        }
    }
}

/// What the health gate waits for after this drain (the volumes that moved only when it waits
/// for them, `reattach`), and the drain's measured pod exit time.
fn gate_record(drained: Drained, reattach: bool) -> GateRecord {
    GateRecord {
        budgets: Vec::new(),
        pods: drained.pods.into_iter().collect(),
        owners: drained.owners.into_iter().collect(),
        pod_exit_ms: drained
            .pod_exit_seconds
            .map(|s| (s * 1000.0).round() as u64),
        detach_ms: (!drained.volumes.is_empty()).then(|| {
            let s: f64 = drained.parts.iter().map(|p| p.detach_seconds).sum();
            (s * 1000.0).round() as u64
        }),
        drain_parts: drained.parts,
        reattach: if reattach { drained.moved } else { Vec::new() },
    }
}

/// The afterDrain phase begins with the drain's end, in one write with the health gate's
/// record; its hooks (and `drain.settle`) then come before the reboot.
async fn begin_after_drain(ctx: &Ctx, view: &NodeView, gate: &GateRecord) -> Result<(), Error> {
    if let Err(why) = decide::may_request_reboot(view) {
        tracing::warn!("{why}");
        ctx.wake.notify_one();
        return Ok(());
    }
    let mut p = crate::hooks::decide::begin_patch(Phase::AfterDrain, &ctx.config, view, Utc::now());
    p["metadata"]["annotations"][proto::HEALTH_GATE] =
        serde_json::Value::String(serde_json::to_string(gate).expect("gate record"));
    patch_node(ctx, view, "recording the drain's end (afterDrain hooks)", p).await?;
    tracing::info!(phase = %Phase::AfterDrain, "drained; the afterDrain hooks come before the reboot");
    ctx.wake.notify_one();
    Ok(())
}
