//! One drain of one node, as a value with a method per phase.
//!
//! Owns the order of a drain's requests and what it says about them: [`NodeDrain::select`]
//! (list the node's pods, classify them, refuse the drain before any eviction if a pod may not
//! go), [`NodeDrain::evict`] (bounded concurrency, 429 and 500 retried until the deadline, the
//! Events that name the budgets refusing and the disruptions they count that are not
//! happening; at the deadline, a failure, or a forced delete when configured),
//! [`NodeDrain::wait`] (the pods gone or replaced; at the deadline, a failure or a forced
//! delete), and [`NodeDrain::drained`] (what the health gate and the cycle's record need). It
//! must never delete around a budget unless configured, and never evict or delete without
//! `ensure` (the leadership check) right before.
//!
//! The phases run in steps ([`drain`]): after [`NodeDrain::select`],
//! [`NodeDrain::read_volumes`] finds the drained pods' volumes to wait for and
//! [`NodeDrain::order`] cuts the pods into steps ([`super::order`]); each step records its
//! volumes on the Node ([`NodeDrain::record_volumes`]), evicts, waits for its pods to go (and
//! for its `waitCompleted` pods to end, [`NodeDrain::await_completion`]), then for its volumes to
//! detach ([`NodeDrain::wait_detached`]); [`NodeDrain::wait_leftovers`] last waits for volumes
//! a predecessor's evictions left attached. The value keeps what the drain found ([`Selected`]) and
//! has done (the pods it evicted, when each eviction was accepted, when each pod was seen going,
//! each step's times), so a phase reads what the ones before it recorded.
//!
//! Its logs name the node through the span the drain runs in (the controller's drain task's),
//! not a field of their own.
//!
//! This module holds the value, its selection, its wait for the pods to go and its result; the
//! other phases are its parts:
//! - [`evict`]: the evictions, refusals retried, and what `drain.whenBlocked` says of a held one;
//! - [`covering`]: the budgets covering the drained pods, named in the Events of refusals, and
//!   the disruptions they count that are not happening;
//! - [`detach`]: the wait for the drained pods' volumes to leave the node.

mod covering;
mod detach;
mod evict;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::OnceCell;

use super::api::{DrainApi, DrainError, Gone};
use super::hold::{Cause, HeldEviction, Policy};
use super::order::{order, Member, Order};
use super::pods::{classify, controller_of, Disposition, PodRef};
use super::volumes::{Moved, Volume};
use crate::budgets::OwnEviction;
use crate::config::Drain;
use crate::lease::NotLeader;
use crate::selector::Selector;
use covering::Covering;
use detach::Claimed;

/// Drains `node`: evicts what [`classify`] says, retrying refusals until `deadline`, then waits
/// for the evicted pods to be gone. `ensure` re-checks leadership before every eviction.
pub async fn drain<A: DrainApi>(
    api: &A,
    node: &str,
    cfg: &Drain,
    pod_selector: &Selector,
    deadline: DateTime<Utc>,
    ensure: &(dyn Fn() -> Result<(), NotLeader> + Sync),
) -> Result<Drained, DrainError> {
    let mut d = NodeDrain::new(api, node, cfg, deadline, ensure);
    d.select(pod_selector).await?;
    d.read_volumes().await?;
    let order = d.order().await?;
    for step in &order.steps {
        let started = Utc::now();
        if cfg.volumes.wait_for_detach {
            d.record_volumes(step.pods()).await?;
        }
        d.evict(&step.evict).await?;
        // Pods found terminating (an earlier leader's evictions) are waited for with the
        // evicted of their step.
        let mut waited = step.evict.clone();
        waited.extend(step.terminating.iter().cloned());
        if !waited.is_empty() {
            d.wait(&waited).await?;
        }
        if !step.await_completion.is_empty() {
            d.await_completion(&step.await_completion).await?;
        }
        let gone = Utc::now();
        if cfg.volumes.wait_for_detach {
            d.wait_detached(step.pods(), gone).await?;
        }
        d.parts.push(Part {
            label: step.label.clone(),
            pods: step.pods().count(),
            seconds: seconds(gone - started),
            detach_seconds: seconds(Utc::now() - gone),
        });
    }
    if cfg.volumes.wait_for_detach {
        d.wait_leftovers().await?;
    }
    // Every drained pod is in a step or skipped: a skipped pod keeps its volume where it is,
    // the others' volumes moved with them.
    for p in &order.skipped {
        d.moved.remove(p);
    }
    Ok(d.drained())
}

/// A duration in seconds, to the millisecond.
fn seconds(d: chrono::TimeDelta) -> f64 {
    d.num_milliseconds().max(0) as f64 / 1000.0
}

/// One step of a finished drain (the cycle's record keeps them).
pub use crate::node::DrainPart as Part;

/// What [`NodeDrain::select`] found on the node.
#[derive(Clone, Debug, Default)]
pub struct Selected {
    /// The pods to evict, in the order listed.
    pub to_evict: Vec<Pod>,
    /// The pods found terminating (an earlier leader's evictions): waited for, not evicted.
    pub terminating: Vec<Pod>,
}

impl Selected {
    /// The identities of the pods to evict.
    pub fn to_evict_refs(&self) -> Vec<PodRef> {
        self.to_evict.iter().map(PodRef::of).collect()
    }

    /// The identities of the pods found terminating.
    pub fn terminating_refs(&self) -> Vec<PodRef> {
        self.terminating.iter().map(PodRef::of).collect()
    }

    /// The pods the drain counts as drained: those it evicts and those found terminating, whose
    /// budgets and replacements the health gate waits for alike.
    fn drained(&self) -> impl Iterator<Item = &Pod> {
        self.to_evict.iter().chain(&self.terminating)
    }
}

/// One drain of one node under way: what it was given (the node, the config, the API, the
/// deadline, the leadership check), what it found, and what it has done.
pub struct NodeDrain<'a, A> {
    api: &'a A,
    node: &'a str,
    cfg: &'a Drain,
    deadline: DateTime<Utc>,
    ensure: &'a (dyn Fn() -> Result<(), NotLeader> + Sync),
    found: Selected,
    /// The budgets covering each drained pod, read once, and only when an Event must name
    /// them (an eviction refused or failed): the API server enforces the budgets, and the
    /// health gate finds them from the pods' labels. Read on every drain, they were a fifth of
    /// its time.
    covering: OnceCell<BTreeMap<PodRef, Vec<Covering>>>,
    /// This drain's own evictions, sent and answered (concurrent ones included): a budget
    /// lists a pod as disrupted before the eviction's 201 comes back, and that is not a phantom.
    own: Mutex<BTreeMap<PodRef, OwnEviction>>,
    /// The pods [`NodeDrain::evict`] was given.
    evicted: Vec<PodRef>,
    /// When each accepted eviction was answered.
    accepted: BTreeMap<PodRef, DateTime<Utc>>,
    /// When [`NodeDrain::wait`] saw each pod go.
    seen_going: BTreeMap<PodRef, DateTime<Utc>>,
    /// The volumes of each drained pod that the drain waits to see detached
    /// ([`NodeDrain::read_volumes`]).
    volumes: BTreeMap<PodRef, Vec<Volume>>,
    /// The same volumes with the claim and pod they were used through, for the health gate's
    /// wait for them to be attached again ([`Drained::moved`]).
    moved: BTreeMap<PodRef, Vec<Moved>>,
    /// What each claim read so far is bound to: (namespace, claim) to the volume's facts.
    claims: BTreeMap<(String, String), Option<Claimed>>,
    /// The steps done.
    parts: Vec<Part>,
    /// The Node's record of the volumes its drain waits for ([`crate::node::DRAIN_VOLUMES`]),
    /// as last read or written.
    recorded: BTreeSet<Volume>,
}

impl<'a, A: DrainApi> NodeDrain<'a, A> {
    /// A drain of `node` that must end by `deadline`; nothing is read yet.
    pub fn new(
        api: &'a A,
        node: &'a str,
        cfg: &'a Drain,
        deadline: DateTime<Utc>,
        ensure: &'a (dyn Fn() -> Result<(), NotLeader> + Sync),
    ) -> NodeDrain<'a, A> {
        NodeDrain {
            api,
            node,
            cfg,
            deadline,
            ensure,
            found: Selected::default(),
            covering: OnceCell::new(),
            own: Mutex::default(),
            evicted: Vec::new(),
            accepted: BTreeMap::new(),
            seen_going: BTreeMap::new(),
            volumes: BTreeMap::new(),
            moved: BTreeMap::new(),
            claims: BTreeMap::new(),
            parts: Vec::new(),
            recorded: BTreeSet::new(),
        }
    }

    /// What [`NodeDrain::select`] found.
    pub fn found(&self) -> &Selected {
        &self.found
    }

    /// Lists the node's pods and classifies each ([`classify`]; a DaemonSet's existence read
    /// once per DaemonSet). Fails with [`DrainError::Refused`], before any eviction, when a
    /// pod may not be evicted.
    pub async fn select(&mut self, pod_selector: &Selector) -> Result<(), DrainError> {
        let node = self.node;
        let pods = self.api.list_pods(node).await?;
        let mut found = Selected::default();
        let mut refused = Vec::new();
        let mut daemon_sets: BTreeMap<(String, String), bool> = BTreeMap::new();
        for p in pods {
            let ds_exists = self.daemon_set_exists(&p, &mut daemon_sets).await?;
            match classify(&p, self.cfg, pod_selector, ds_exists) {
                Disposition::Evict => found.to_evict.push(p),
                Disposition::Skip(why) => {
                    tracing::debug!(pod = %PodRef::of(&p), why = why.text(), "not evicting");
                    if p.metadata.deletion_timestamp.is_some()
                        && controller_of(&p).is_none_or(|(k, _)| k != "DaemonSet")
                    {
                        found.terminating.push(p);
                    }
                }
                Disposition::Refuse(why) => refused.push(format!("pod {}: {why}", PodRef::of(&p))),
            }
        }
        if !refused.is_empty() {
            return Err(DrainError::Refused {
                node: node.into(),
                pods: refused,
            });
        }
        self.found = found;
        Ok(())
    }

    /// Whether the DaemonSet controlling `p` exists (`false` for any other pod), asked once
    /// per DaemonSet.
    async fn daemon_set_exists(
        &self,
        p: &Pod,
        known: &mut BTreeMap<(String, String), bool>,
    ) -> Result<bool, DrainError> {
        let (Some(("DaemonSet", name)), Some(ns)) =
            (controller_of(p), p.metadata.namespace.as_deref())
        else {
            return Ok(false);
        };
        let key = (ns.to_string(), name.to_string());
        if let Some(e) = known.get(&key) {
            return Ok(*e);
        }
        let e = self.api.daemon_set_exists(ns, name).await?;
        known.insert(key, e);
        Ok(e)
    }

    /// Waits until none of `pods` is on the node with the same UID, or the deadline; pods left
    /// then fail the drain with [`DrainError::Timeout`], or, with
    /// `drain.forceDeleteAfterTimeout`, are deleted. With `drain.whenBlocked.stuck: fail`, a
    /// pod still there past its grace period and `drain.stuckAfter` fails the drain at once
    /// ([`DrainError::Held`]).
    pub async fn wait(&mut self, pods: &[PodRef]) -> Result<(), DrainError> {
        tracing::debug!(
            evicted = self.evicted.len(),
            "evictions accepted; waiting for the pods to go"
        );
        let cfg = self.cfg;
        let fail_stuck = cfg
            .when_blocked
            .policy(Cause::Stuck, cfg.force_delete_after_timeout)
            == Policy::Fail;
        let mut waiting = pods.to_vec();
        let left = loop {
            // Watched until the deadline, or, when a stuck pod fails the drain, until the
            // first of the waited pods would be stuck.
            let first_stuck = || waiting.iter().filter_map(|p| self.stuck_at(p)).min();
            let until = match fail_stuck.then(first_stuck).flatten() {
                Some(first) => first.min(self.deadline),
                None => self.deadline,
            };
            let Gone { left, seen_going } = self.api.wait_gone(self.node, &waiting, until).await?;
            self.seen_going.extend(seen_going);
            let now = Utc::now();
            if fail_stuck {
                if let Some((p, at)) = left
                    .iter()
                    .find_map(|p| Some((p, self.stuck_at(p)?)).filter(|(_, at)| *at <= now))
                {
                    let held = HeldEviction {
                        cause: Cause::Stuck,
                        budget: String::new(),
                        why: format!(
                            "{}s past its grace period and drain.stuckAfter {} (stuck since {})",
                            (now - at).num_seconds(),
                            cfg.stuck_after,
                            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                        ),
                    };
                    self.held(p, held).await?;
                }
            }
            if left.is_empty() || now >= self.deadline {
                break left;
            }
            waiting = left;
        };
        if left.is_empty() {
            return Ok(());
        }
        if !cfg.force_delete_after_timeout {
            return Err(DrainError::Timeout {
                node: self.node.into(),
                pods: left,
            });
        }
        for p in &left {
            (self.ensure)()?;
            self.api.delete(p).await?;
        }
        Ok(())
    }

    /// When `pod` counts as stuck: its eviction's acceptance plus its grace period (the
    /// drain's, else the pod's own, else 30 s) for a pod this drain evicted, its
    /// `deletionTimestamp` (the deletion plus the grace period) for one found terminating;
    /// then `drain.stuckAfter`. `None` for a pod whose deletion was not seen begin.
    fn stuck_at(&self, pod: &PodRef) -> Option<DateTime<Utc>> {
        let after = self.cfg.stuck_after.to_chrono();
        if let Some(accepted) = self.accepted.get(pod) {
            let grace = match self.cfg.grace_period {
                Some(g) => g.to_chrono(),
                None => chrono::TimeDelta::seconds(
                    self.found
                        .to_evict
                        .iter()
                        .find(|p| PodRef::of(p) == *pod)
                        .and_then(|p| p.spec.as_ref()?.termination_grace_period_seconds)
                        .unwrap_or(30),
                ),
            };
            return Some(*accepted + grace + after);
        }
        let p = self
            .found
            .terminating
            .iter()
            .find(|p| PodRef::of(p) == *pod)?;
        let deleting = p.metadata.deletion_timestamp.as_ref()?;
        Some(crate::time::from_jiff(deleting.0) + after)
    }

    /// The drain's steps: by `drain.order`'s rules (namespaces' labels read when a rule
    /// selects by them), else the default order, from the volumes [`NodeDrain::read_volumes`]
    /// found.
    pub async fn order(&self) -> Result<Order, DrainError> {
        let members: Vec<Member> = self
            .found
            .drained()
            .map(|p| Member::of(p, self.volumes.contains_key(&PodRef::of(p))))
            .collect();
        let mut namespaces = BTreeMap::new();
        if self.cfg.order.iter().any(|r| r.reads_namespaces()) {
            for m in &members {
                if !namespaces.contains_key(&m.pod.namespace) {
                    let labels = self.api.namespace_labels(&m.pod.namespace).await?;
                    namespaces.insert(m.pod.namespace.clone(), labels);
                }
            }
        }
        let o = order(&members, &self.cfg.order, &namespaces);
        for p in &o.skipped {
            tracing::info!(pod = %p, "left on the node (drain.order: skip)");
        }
        Ok(o)
    }

    /// Waits, within the drain's deadline, until each of `pods` has terminated on its own
    /// (gone, or `Succeeded` or `Failed`): `waitCompleted` pods are not evicted.
    pub async fn await_completion(&mut self, pods: &[PodRef]) -> Result<(), DrainError> {
        let retry = self.cfg.eviction_retry_interval.to_std();
        loop {
            let now_on: Vec<PodRef> = self
                .api
                .list_pods(self.node)
                .await?
                .iter()
                .filter(|p| {
                    !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    )
                })
                .map(PodRef::of)
                .filter(|p| pods.contains(p))
                .collect();
            if now_on.is_empty() {
                return Ok(());
            }
            let left = (self.deadline - Utc::now()).to_std().unwrap_or_default();
            if left.is_zero() {
                return Err(DrainError::Timeout {
                    node: self.node.into(),
                    pods: now_on,
                });
            }
            tokio::time::sleep(retry.min(left)).await;
        }
    }

    /// What the drain did, for the health gate and the cycle's record.
    pub fn drained(self) -> Drained {
        let pods = self
            .found
            .drained()
            .map(|p| {
                (
                    p.metadata.namespace.clone().unwrap_or_default(),
                    p.metadata.labels.clone().unwrap_or_default(),
                )
            })
            .collect();
        let owners = self
            .found
            .drained()
            .filter_map(|p| {
                let (kind, name) = controller_of(p)?;
                Some((
                    kind.to_string(),
                    p.metadata.namespace.clone().unwrap_or_default(),
                    name.to_string(),
                ))
            })
            .collect();
        Drained {
            pod_exit_seconds: median_exit_seconds(&self.accepted, &self.seen_going),
            evicted: self.evicted,
            pods,
            owners,
            volumes: self.volumes.into_values().flatten().collect(),
            moved: self.moved.into_values().flatten().collect(),
            parts: self.parts,
        }
    }
}

/// The median time from an accepted eviction to the pod's going, over the pods whose going was
/// seen, in seconds: what the node's pods take to exit once asked (recorded with the cycle, so
/// that `rollboot plan` and a rehearsal can use it). `None` when no pod's going was seen.
pub fn median_exit_seconds(
    accepted: &BTreeMap<PodRef, DateTime<Utc>>,
    seen_going: &BTreeMap<PodRef, DateTime<Utc>>,
) -> Option<f64> {
    let mut secs: Vec<f64> = seen_going
        .iter()
        .filter_map(|(p, gone)| {
            let from = accepted.get(p)?;
            Some((*gone - *from).num_milliseconds().max(0) as f64 / 1000.0)
        })
        .collect();
    crate::time::median(&mut secs)
}

/// What a finished drain did, for the health gate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Drained {
    /// The evicted pods.
    pub evicted: Vec<PodRef>,
    /// The labels of those pods and of the pods found already terminating, per namespace: the
    /// health gate waits for the budgets selecting them.
    pub pods: BTreeSet<(String, BTreeMap<String, String>)>,
    /// The controllers of those pods: (kind, namespace, name).
    pub owners: BTreeSet<(String, String, String)>,
    /// The median seconds from an accepted eviction to the pod's going (see
    /// [`median_exit_seconds`]).
    pub pod_exit_seconds: Option<f64>,
    /// The volumes the drain saw detached.
    pub volumes: Vec<Volume>,
    /// The volumes of the pods its steps saw go, with the claim and pod they were used
    /// through: where the replacements have them attached is what
    /// `drain.volumes.waitForReattach` waits for.
    pub moved: Vec<Moved>,
    /// Its steps, with their times.
    pub parts: Vec<Part>,
}
