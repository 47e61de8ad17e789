//! One pass of the leader: resume the nodes in flight, keep house, start new nodes.
//!
//! Owns [`Leading`], what the leader keeps from one pass to the next (the nodes' running
//! steps, the health gates started early, what was said), and [`Leading::pass`], whose phases
//! are, in order:
//! 1. read the lock, then the Nodes ([`views()`]), say what is malformed ([`notices`]), and
//!    rebuild the lock's record when it cannot be trusted ([`restore`]: nothing else then);
//! 2. resume every node in the lock: decide its next step ([`crate::controller::decide`])
//!    and carry it out ([`crate::controller::steps`]);
//! 3. keep house ([`housekeeping`]): date requests, PreferNoSchedule taints, failed nodes
//!    returned to service;
//! 4. start new nodes when some wait and nothing blocks, as [`crate::controller::decide::start`]
//!    decides from what the pass reads for it ([`blockers`], the budgets): their slots taken
//!    in the lock.
//!
//! What it says and does about one node is in a span naming the node (`step`, `start`,
//! `passed_over`, `deferred`, `housekeeping`, `notice`), not in a field of each log.
//!
//! It must never start a node while a blocker holds or while the lock's record is untrusted,
//! and never act without leadership (checked at the start of the pass and before each write).

mod blockers;
mod housekeeping;
mod notices;
mod restore;
pub(super) mod views;

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};

use super::context::Ctx;
use super::decide::{self, Snapshot, Starting, Then};
use super::error::Error;
use super::steps::health::Gates;
use super::steps::{run_gone_step, run_step};
use super::task::StepTask;
use super::writes::patch_node;
use super::writes::take_slots;
use crate::budgets::{BudgetHold, HeadroomReader};
use crate::lock::LockRecord;
use crate::node::{self as proto, NodeState, NodeView, PassedOver};
use notices::Warned;
use views::{views, PassViews};

/// What the leader keeps from one pass to the next, for as long as it leads.
#[derive(Default)]
pub(super) struct Leading {
    /// The nodes' background steps (drains, health gates, blocking webhooks), by node.
    tasks: HashMap<String, StepTask>,
    /// Health gates started while their node reboots, taken by its health-gate step.
    gates: Gates,
    /// The blockers said last: a change is logged once.
    last_blockers: Vec<String>,
    /// The lock's foreign holder said last.
    last_holder: Option<String>,
    /// The malformed annotations said.
    warned: Warned,
    /// The budget-aware pick's reads of the nodes' budgets.
    headroom: HeadroomReader,
    /// The hosts' shutdowns said to wait past `concurrency.maxShutdownDrains`, by node, with
    /// the request's instant: said once per request.
    deferred_shutdowns: HashMap<String, Option<DateTime<Utc>>>,
}

impl Leading {
    /// Says, once per request, each host's shutdown that waits for a slot past
    /// `concurrency.maxShutdownDrains`: drained only if one frees within its logind delay.
    async fn say_deferred(&mut self, ctx: &Ctx, deferred: &[&crate::node::NodeView]) {
        self.deferred_shutdowns
            .retain(|name, _| deferred.iter().any(|n| n.name == *name));
        for n in deferred {
            if self.deferred_shutdowns.get(&n.name) == Some(&n.shutdown_requested_at) {
                continue;
            }
            self.deferred_shutdowns
                .insert(n.name.clone(), n.shutdown_requested_at);
            let c = &ctx.config.concurrency;
            let note = format!(
                "its host shuts down by itself, but maxNodes ({}) and maxShutdownDrains ({}) are taken: it is drained only if a slot frees while logind holds its shutdown; else it goes down undrained",
                c.max_nodes, c.max_shutdown_drains
            );
            let span = tracing::error_span!("deferred", node = n.name.as_str());
            span.in_scope(|| tracing::warn!(requested = ?n.shutdown_requested_at, "{note}"));
            ctx.services
                .events
                .publish(&n.name, true, "ShutdownDrainDeferred", note)
                .await;
        }
    }

    /// Before each pass: forgets the steps that ended, and says a change of the lock's holder.
    pub(super) fn before_pass(&mut self, ctx: &Ctx) {
        self.tasks.retain(|_, t| t.running());
        notices::report_holder(ctx, &mut self.last_holder);
    }

    /// One pass: resume in-flight nodes, keep house, then start new ones. Returns when to look
    /// again at the latest (a deadline), `None` for "only on the next change".
    pub(super) async fn pass(&mut self, ctx: &Ctx) -> Result<Option<DateTime<Utc>>, Error> {
        ctx.leadership.ensure()?;
        ctx.services.workloads.sweep();
        // The lock before the Nodes: a node leaves the lock only after its final state is
        // written, so a node missing from this record shows that state in the views read
        // after it.
        let record = ctx.cache.lock_now();
        let pass = views(ctx, &record);
        let now = Utc::now();
        notices::warn_malformed(ctx, &pass.nodes(), &record, &mut self.warned).await;
        if restore::restore_lock(ctx, &record, &pass.all, now, &self.acting()).await? {
            return Ok(None);
        }
        let mut next = None;
        self.resume_in_flight(ctx, &record, &pass, now, &mut next)
            .await?;
        // Released before the views are asked for again, so they are updated in place.
        drop(pass);
        housekeeping::run(ctx, &record, now).await;
        self.start_new(ctx, now, &mut next).await?;
        Ok(next)
    }

    /// The nodes with a step under way: in flight whatever their Node shows yet.
    fn acting(&self) -> BTreeSet<String> {
        self.tasks
            .iter()
            .filter(|(_, t)| !t.ended())
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Decides and carries out the next step of every node in the lock without a step under
    /// way; `next` takes the deadlines they return.
    async fn resume_in_flight(
        &mut self,
        ctx: &Ctx,
        record: &LockRecord,
        pass: &PassViews,
        now: DateTime<Utc>,
        next: &mut Option<DateTime<Utc>>,
    ) -> Result<(), Error> {
        // Only the nodes in flight are looked up by name: an index of every Node per pass was
        // a cost in the cluster's size.
        let by_name: HashMap<&str, &NodeView> =
            pass.in_lock().map(|v| (v.name.as_str(), v)).collect();
        // Under an operator's pause the nodes in flight go on to the end of their cycle (the
        // pause keeps their entries and lets rollboot remove them); under any other holder
        // they wait.
        let resumes = record.foreign_holder(&ctx.lock_owner).is_none() || record.pause.is_some();
        ctx.services.metrics.set_in_flight(record.entries.len());
        if resumes {
            for (name, entry) in &record.entries {
                if self.tasks.contains_key(name) {
                    continue;
                }
                let view = by_name.get(name.as_str()).copied();
                let step = decide::next_step(view, entry, &ctx.config, now);
                let ran = match view {
                    Some(view) => run_step(ctx, view, step, &mut self.tasks, &mut self.gates).await,
                    None => run_gone_step(ctx, name, step).await,
                };
                match ran {
                    Ok(Some(t)) => soon(next, t),
                    Ok(None) => {}
                    // Logged where it happened; the watch brings the newer version and a new
                    // pass.
                    Err(Error::Conflict { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        // A gate started for a reboot that ended some other way (failed, freed, lock lost).
        self.gates.retain(|name, _| {
            resumes
                && record.entries.contains_key(name)
                && by_name.get(name.as_str()).is_some_and(|v| {
                    matches!(v.state, Some(NodeState::Rebooting | NodeState::Verifying))
                })
        });
        Ok(())
    }

    /// Starts the nodes that wait, when nothing blocks and slots are free (`pass_start`: the
    /// instant the pass began), as [`decide::start`] decides, reading for it what each of its
    /// stages asks; `next` takes when to look again.
    async fn start_new(
        &mut self,
        ctx: &Ctx,
        pass_start: DateTime<Utc>,
        next: &mut Option<DateTime<Utc>>,
    ) -> Result<(), Error> {
        // Steps above may have written: read both again, in the same order.
        let record = ctx.cache.lock_now();
        let pass = views(ctx, &record);
        let looked = pass.nodes();
        // Read only while a node waits: what a NodeMaintenance says changes nothing else.
        let maintained = if looked.iter().any(|n| n.flagged()) {
            ctx.cache.maintained.current(&ctx.services.client).await
        } else {
            std::collections::BTreeMap::new()
        };
        let snap = Snapshot {
            maintained: &maintained,
            headroom: None,
            nodes: &looked,
            in_flight: &record.entries,
            foreign_holder: record.foreign_holder(&ctx.lock_owner),
            blocking_pods: &[],
            now: pass_start,
        };
        let first = decide::start(&snap, &ctx.config);
        // Hosts shutting down by themselves are drained at once, whatever blocks the others.
        self.say_deferred(ctx, &first.deferred_shutdowns).await;
        if let (Some(holder), false) = (snap.foreign_holder, first.undrained_shutdowns.is_empty()) {
            tracing::warn!(holder, nodes = ?first.undrained_shutdowns.iter().map(|n| &n.name).collect::<Vec<_>>(), "hosts shut down by themselves, but the maintenance lock is held by another holder: not drained");
        }
        let queued = match first.then {
            Then::Shutdowns(urgent) => {
                shutdowns_now(ctx, &snap, &urgent);
                let picked = urgent.iter().map(Starting::slot).collect();
                drop(pass);
                // The others are decided on the next pass (woken by `start`), with these in
                // flight.
                return start(ctx, picked, pass_start).await;
            }
            Then::NothingWaits => {
                ctx.cache.last_blockers.lock().expect("blockers").clear();
                ctx.services
                    .observe
                    .pass(&looked, &pass.states, &record, &[], pass_start);
                return Ok(());
            }
            Then::Queued(queued) => queued,
        };
        let blocking = blockers::blocking_pods(ctx).await;
        let alerts = blockers::alerts(ctx).await;
        let now = blockers::decision_instant();
        let checked = queued.blockers_read(&blocking, alerts, now);
        let blocked = checked.as_ref().err().map_or(&[][..], |b| &b.blockers);
        *ctx.cache.last_blockers.lock().expect("blockers") = blocked.to_vec();
        ctx.services
            .observe
            .pass(&looked, &pass.states, &record, blocked, now);
        blockers::say_changed(&mut self.last_blockers, blocked);
        let pick = match checked {
            Ok(pick) => pick,
            Err(blocked) => {
                soon(next, blocked.look_again);
                return Ok(());
            }
        };
        let headroom = match pick.budget_reads() {
            Some(r) => Some(
                self.headroom
                    .read(ctx, r.looked_at, &r.draining, r.reads)
                    .await,
            ),
            None => None,
        };
        let plan = pick.decide(headroom.as_ref());
        // A budget that gets room again changes no Node: while nodes are passed over, its
        // change wakes a pass.
        ctx.services
            .workloads
            .wake_on_budget_change((!plan.passed_over.is_empty()).then(|| ctx.wake.clone()));
        for (n, held) in &plan.taken_anyway {
            let span = tracing::error_span!("start", node = n.name.as_str());
            span.in_scope(|| tracing::info!(budget = %held.budget, pass_over_for = %ctx.config.concurrency.pass_over_for, "taken although a budget holds it: passed over for concurrency.passOverFor already"));
        }
        // A node rebooted less than nodes.minRebootInterval ago starts when it has rested; a
        // node passed over is taken anyway after concurrency.passOverFor.
        if let Some(t) = plan.look_again {
            soon(next, t);
        }
        // The picked nodes take their slots first: the passed-over records are a write (and
        // an Event) per node whose holding budget changed, and a slot waiting on them is idle.
        let picked = not_maintained_now(ctx, &plan.start).await;
        start(ctx, picked, now).await?;
        for (n, held) in &plan.passed_over {
            passed_over(ctx, n, held, now).await;
        }
        Ok(())
    }
}

/// Records on `n` that the budget-aware pick passed it over for `held` (its
/// `rollboot.dev/passed-over`, written when absent or naming another budget, keeping the first
/// instant: `concurrency.passOverFor` counts from it), with an Event the first time. A write
/// refused with 409 is tried again on the next pass over.
#[tracing::instrument(level = "error", name = "passed_over", skip_all, fields(node = n.name.as_str()))]
async fn passed_over(ctx: &Ctx, n: &NodeView, held: &BudgetHold, now: DateTime<Utc>) {
    if n.passed_over
        .as_ref()
        .is_some_and(|p| p.budget == held.budget)
    {
        return;
    }
    let first = n.passed_over.is_none();
    let record = PassedOver {
        since: n.passed_over.as_ref().map_or(now, |p| p.since),
        budget: held.budget.clone(),
        why: held.to_string(),
    };
    let value = serde_json::to_string(&record).expect("a passed-over record serializes");
    let p = proto::patch(&[(proto::PASSED_OVER, Some(value))], None);
    match patch_node(ctx, n, "recording it was passed over", p).await {
        Ok(_) => {
            tracing::info!(budget = %held.budget, why = %held, "passed over: a budget of its pods has no room now");
            if first {
                let msg = format!(
                    "passed over for a later node: {held}; taken once it has room, or after concurrency.passOverFor ({})",
                    ctx.config.concurrency.pass_over_for
                );
                ctx.services
                    .events
                    .publish(&n.name, false, "PassedOver", msg)
                    .await;
            }
        }
        Err(Error::Conflict { .. }) => {}
        Err(e) => {
            tracing::warn!(error = %e, "could not record that the node was passed over");
        }
    }
}

/// Takes a slot in the lock for each of `picked` (node, group), at `now`, in one write: their
/// cycles start.
async fn start(
    ctx: &Ctx,
    picked: Vec<(String, Option<String>)>,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    if picked.is_empty() {
        return Ok(());
    }
    ctx.wake.notify_one();
    take_slots(ctx, &picked, now).await?;
    for (name, _) in &picked {
        tracing::error_span!("start", node = name.as_str())
            .in_scope(|| tracing::info!("starting maintenance"));
        ctx.services.metrics.started();
        ctx.services.observe.started(name, now);
    }
    Ok(())
}

/// Says the hosts shutting down by themselves that start now (`urgent`), and when they take
/// the nodes out over `maxNodes` (the limit was already reached: a warning, and an
/// `OverMaxNodes` Event on the lock).
fn shutdowns_now(ctx: &Ctx, snap: &Snapshot<'_>, urgent: &[Starting<'_>]) {
    for s in urgent {
        let span = tracing::error_span!("start", node = s.node.name.as_str());
        span.in_scope(|| tracing::warn!(requested = ?s.node.shutdown_requested_at, "its host shuts down by itself: draining it now"));
    }
    if let Some(out) = decide::over_max_nodes(snap, &ctx.config) {
        let names: Vec<&str> = urgent.iter().map(|s| s.node.name.as_str()).collect();
        let note = format!(
            "{out} nodes out, over maxNodes {}: host(s) of {} shut down by themselves while the limit was already reached",
            ctx.config.concurrency.max_nodes,
            names.join(", ")
        );
        tracing::warn!(out, "{note}");
        ctx.services
            .events
            .publish_lease(&ctx.config.lock.name, true, "OverMaxNodes", note);
    }
}

/// The slots of `starting` but those a NodeMaintenance names now: the list the pick saw may
/// be a few seconds old, so it is read again right before the start (a node left out gets its
/// turn on a later pass).
async fn not_maintained_now(ctx: &Ctx, starting: &[Starting<'_>]) -> Vec<(String, Option<String>)> {
    if starting.is_empty() {
        return Vec::new();
    }
    let fresh = ctx.cache.maintained.fresh(&ctx.services.client).await;
    starting
        .iter()
        .filter(|s| match fresh.get(&s.node.name) {
            Some(actor) => {
                tracing::info!(
                    node = s.node.name.as_str(),
                    actor = actor.as_str(),
                    "not started: another actor takes it out"
                );
                false
            }
            None => true,
        })
        .map(Starting::slot)
        .collect()
}

/// `next` becomes `t` when `t` is sooner.
fn soon(next: &mut Option<DateTime<Utc>>, t: DateTime<Utc>) {
    *next = Some(next.map_or(t, |n| n.min(t)));
}
