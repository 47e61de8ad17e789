//! A drain's evictions: each pod asked, refusals retried until the deadline, and what the drain
//! says and does about a refusal.
//!
//! Owns [`NodeDrain::evict`] (bounded concurrency, 429 and 500 retried, asked again as soon as a
//! budget of the pod has headroom), the Events of refused and failed evictions, the judgement
//! of a held eviction under `drain.whenBlocked` ([`super::super::hold`]), and the forced delete of
//! pods still refused at the deadline when `drain.forceDeleteAfterTimeout` says so. It must never
//! evict or delete without `ensure` (the leadership check) right before, nor delete around a
//! budget unless configured.

use chrono::{DateTime, Utc};
use futures::StreamExt;

use super::covering::names;
use super::NodeDrain;
use crate::budgets::OwnEviction;
use crate::drain::api::{DrainApi, DrainError, Evicted};
use crate::drain::hold::{cause_of, Cause, HeldEviction, Policy, DENIED_AFTER};
use crate::drain::pods::PodRef;

/// How one pod's eviction ended.
enum Eviction {
    /// Accepted at that instant: the pod is terminating.
    Accepted(PodRef, DateTime<Utc>),
    /// The pod was gone already.
    Gone,
    /// Still refused at the deadline.
    Stuck(PodRef),
}

impl<A: DrainApi> NodeDrain<'_, A> {
    /// Evicts `pods`, `drain.concurrentEvictions` at a time, each retried while refused until
    /// the deadline. A pod still refused then fails the drain with [`DrainError::Timeout`], or,
    /// with `drain.forceDeleteAfterTimeout`, is deleted (an Event for each).
    pub async fn evict(&mut self, pods: &[PodRef]) -> Result<(), DrainError> {
        tracing::debug!(pods = pods.len(), "evicting");
        let this = &*self;
        let mut results = futures::stream::iter(pods.iter().cloned())
            .map(|pod| this.evict_one(pod))
            .buffer_unordered(self.cfg.concurrent_evictions.max(1) as usize);
        // The first error ends the phase: a pod held under a policy of `fail` fails the node
        // at once, with the other evictions still asking dropped (none of them is retried).
        let mut done = Vec::new();
        while let Some(r) = results.next().await {
            done.push(r?);
        }
        drop(results);
        let mut stuck = Vec::new();
        for r in done {
            match r {
                Eviction::Accepted(p, at) => {
                    self.accepted.insert(p, at);
                }
                Eviction::Gone => {}
                Eviction::Stuck(p) => stuck.push(p),
            }
        }
        self.evicted.extend(pods.iter().cloned());
        if !stuck.is_empty() {
            self.delete_stuck(stuck).await?;
        }
        Ok(())
    }

    /// One pod's eviction, asked again after each refusal (the server's Retry-After, else
    /// `drain.evictionRetryInterval`) until it is accepted, the pod is gone, or the deadline.
    async fn evict_one(&self, pod: PodRef) -> Result<Eviction, DrainError> {
        let grace = self.cfg.grace_period.map(|g| g.as_millis() / 1000);
        let retry = self.cfg.eviction_retry_interval.to_std();
        let mut announced = false;
        // The last denial's answer and how many times in a row it came.
        let mut denied: Option<(String, u32)> = None;
        loop {
            (self.ensure)()?;
            self.own_state(&pod, Some(OwnEviction::InFlight));
            let answer = self.api.evict(&pod, grace).await;
            let answered = Utc::now();
            let accepted = matches!(answer, Ok(Evicted::Accepted));
            self.own_state(&pod, accepted.then_some(OwnEviction::Accepted(answered)));
            // How long to wait before asking again, and whether a budget of the pod getting
            // room cuts that wait short.
            let (wait, until_room) = match answer? {
                Evicted::Accepted => return Ok(Eviction::Accepted(pod, answered)),
                Evicted::Gone => return Ok(Eviction::Gone),
                Evicted::Blocked {
                    message,
                    retry_after,
                } => {
                    // One Event per blocked pod, not per retry.
                    if !announced {
                        announced = true;
                        self.say_blocked(&pod, &message).await?;
                    }
                    self.judge_held(&pod, &message).await?;
                    // No hint from the server: asked again as soon as a budget of the pod is
                    // seen to have room, else after the interval. A refused drain otherwise
                    // waited up to the interval (5 s by default) after its sibling's
                    // replacement was Ready.
                    (retry_after.unwrap_or(retry), retry_after.is_none())
                }
                Evicted::ServerError(message) => {
                    self.say_failed(&pod, &message).await?;
                    (retry, false)
                }
                Evicted::Denied(message) => {
                    let times = match denied.take() {
                        Some((last, n)) if last == message => n + 1,
                        _ => {
                            let note =
                                format!("evicting pod {pod} was denied: {message}; retrying");
                            self.api
                                .event(Some(&pod), true, "EvictionDenied", note)
                                .await;
                            1
                        }
                    };
                    if times >= DENIED_AFTER {
                        let held = HeldEviction {
                            cause: Cause::Denied,
                            budget: String::new(),
                            why: message.clone(),
                        };
                        self.held(&pod, held).await?;
                    }
                    denied = Some((message, times));
                    (retry, false)
                }
            };
            let left = (self.deadline - Utc::now()).to_std().unwrap_or_default();
            if left.is_zero() {
                return Ok(Eviction::Stuck(pod));
            }
            if until_room {
                self.wait_for_room(&pod, wait.min(left)).await?;
            } else {
                tokio::time::sleep(wait.min(left)).await;
            }
        }
    }

    /// Waits `wait`, or until a budget covering `pod` is seen to allow a disruption,
    /// whichever comes first.
    async fn wait_for_room(
        &self,
        pod: &PodRef,
        wait: std::time::Duration,
    ) -> Result<(), DrainError> {
        let budgets = self.covering_of(pod).await?;
        let rooms: Vec<_> = budgets
            .iter()
            .filter_map(|b| {
                let (ns, name) = b.name.split_once('/')?;
                Some(Box::pin(self.api.budget_room(ns, name)))
            })
            .collect();
        // `select_all` refuses an empty list: no budget named, the interval alone.
        let room = async {
            if rooms.is_empty() {
                std::future::pending::<()>().await;
            }
            futures::future::select_all(rooms).await;
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = room => {}
        }
        Ok(())
    }

    /// The Event of an eviction a budget refused: the budgets that may have refused it, and
    /// the disruptions they count that are not happening.
    async fn say_blocked(&self, pod: &PodRef, message: &str) -> Result<(), DrainError> {
        let budgets = self.covering_of(pod).await?;
        let names = names(&budgets);
        let phantom = self.phantoms(pod, budgets).await?;
        let mut note = format!(
            "evicting pod {pod} is blocked by PodDisruptionBudget {names}: {message}; retrying"
        );
        if !phantom.is_empty() {
            note = format!("{note}. {}", phantom.join(". "));
            tracing::warn!(pod = %pod, budget = %names, reason = %phantom.join("; "), "a budget counts a disruption that is not happening");
        }
        self.api
            .event(Some(pod), true, "EvictionBlocked", note)
            .await;
        Ok(())
    }

    /// A refused eviction's cause ([`cause_of`]: a budget that never allows one, or one at 0
    /// now) and its `drain.whenBlocked` policy: `fail` ends the drain with
    /// [`DrainError::Held`], naming the pod, the budget and why; `wait` asks again.
    async fn judge_held(&self, pod: &PodRef, message: &str) -> Result<(), DrainError> {
        let budgets: Vec<(String, Option<String>)> = self
            .covering_of(pod)
            .await?
            .into_iter()
            .map(|b| (b.name, b.never))
            .collect();
        self.held(pod, cause_of(&budgets, message)).await
    }

    /// What `drain.whenBlocked` says of `held`: `fail` ends the drain with
    /// [`DrainError::Held`] (and an Event for a budget that never allows), `wait` asks again.
    pub(super) async fn held(&self, pod: &PodRef, held: HeldEviction) -> Result<(), DrainError> {
        let cfg = self.cfg;
        match cfg
            .when_blocked
            .policy(held.cause, cfg.force_delete_after_timeout)
        {
            Policy::Wait => Ok(()),
            policy @ (Policy::Fail | Policy::Quarantine) => {
                tracing::warn!(pod = %pod, cause = %held.cause, budget = %held.budget, why = %held.why, "an eviction is held and drain.whenBlocked says fail or quarantine");
                if held.cause == Cause::Never {
                    self.api
                        .event(Some(pod), true, "BudgetNeverAllows", format!("evicting pod {pod}: {}; the drain fails at once (drain.whenBlocked.never)", held.sentence()))
                        .await;
                }
                Err(DrainError::Held {
                    node: self.node.into(),
                    pod: pod.clone(),
                    held: Box::new(held),
                    quarantine: policy == Policy::Quarantine,
                })
            }
        }
    }

    /// The Event of an eviction the server failed (500): overlapping budgets, named, when the
    /// server says so; otherwise a timeout or an unavailable server, where the eviction may or
    /// may not have been admitted, and asking again is safe (the UID precondition holds).
    async fn say_failed(&self, pod: &PodRef, message: &str) -> Result<(), DrainError> {
        let note = if message.contains("more than one PodDisruptionBudget") {
            let names = names(&self.covering_of(pod).await?);
            format!("evicting pod {pod} failed (overlapping PodDisruptionBudgets: {names}): {message}; retrying")
        } else {
            tracing::warn!(pod = %pod, error = %message, "eviction failed on the server side; retrying");
            format!("evicting pod {pod} failed: {message}; retrying")
        };
        self.api
            .event(Some(pod), true, "EvictionFailed", note)
            .await;
        Ok(())
    }

    /// Pods still refused at the deadline: the drain fails, or, with
    /// `drain.forceDeleteAfterTimeout`, they are deleted around their budgets, each said in an
    /// Event.
    async fn delete_stuck(&self, stuck: Vec<PodRef>) -> Result<(), DrainError> {
        if !self.cfg.force_delete_after_timeout {
            return Err(DrainError::Timeout {
                node: self.node.into(),
                pods: stuck,
            });
        }
        for p in &stuck {
            (self.ensure)()?;
            self.api.event(Some(p), true, "ForceDeleted", format!("deleting pod {p} around its budget: the drain timed out and drain.forceDeleteAfterTimeout is set")).await;
            self.api.delete(p).await?;
        }
        Ok(())
    }

    /// Records this drain's own eviction of `pod` (`None`: none under way or accepted).
    pub(super) fn own_state(&self, pod: &PodRef, state: Option<OwnEviction>) {
        let mut own = self.own.lock().unwrap_or_else(|e| e.into_inner());
        match state {
            Some(s) => own.insert(pod.clone(), s),
            None => own.remove(pod),
        };
    }
}
