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
//! a predecessor's evictions left attached. The value keeps what the drain found ([`Found`]) and
//! has done (the pods it evicted, when each eviction was accepted, when each pod was seen going,
//! each step's times), so a phase reads what the ones before it recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use tokio::sync::OnceCell;

use super::api::{DrainApi, DrainError, Evicted, Gone};
use super::blockers::{cause_of, never_allows_now, Cause, Held, Policy, DENIED_AFTER};
use super::order::{order, Member, Order};
use super::phantom::{phantom_disruptions, OwnEviction};
use super::pods::{claims_of, classify, controller_of, Disposition, PodRef};
use super::volumes::{attachment_of_unique, left, Moved, NotWaited, Volume, CSI_PREFIX};
use crate::config::Drain;
use crate::lease::NotLeader;
use crate::selector::{budget_may_select, selector_problem, Selector};

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
pub struct Found {
    /// The pods to evict, in the order listed.
    pub to_evict: Vec<Pod>,
    /// The pods found terminating (an earlier leader's evictions): waited for, not evicted.
    pub terminating: Vec<Pod>,
}

impl Found {
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

/// One budget covering a pod, as an Event about a refused eviction needs it.
#[derive(Clone, Debug, Default)]
struct Covering {
    /// `namespace/name`.
    name: String,
    /// `status.disruptedPods`.
    disrupted: BTreeMap<String, DateTime<Utc>>,
    /// Why it can never allow a disruption, if it cannot ([`never_allows_now`]).
    never: Option<String>,
}

/// How one pod's eviction ended.
enum Eviction {
    /// Accepted at that instant: the pod is terminating.
    Accepted(PodRef, DateTime<Utc>),
    /// The pod was gone already.
    Gone,
    /// Still refused at the deadline.
    Stuck(PodRef),
}

/// One drain of one node under way: what it was given (the node, the config, the API, the
/// deadline, the leadership check), what it found, and what it has done.
pub struct NodeDrain<'a, A> {
    api: &'a A,
    node: &'a str,
    cfg: &'a Drain,
    deadline: DateTime<Utc>,
    ensure: &'a (dyn Fn() -> Result<(), NotLeader> + Sync),
    found: Found,
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

/// What a claim is bound to, as far as the drain's wait for volumes goes.
#[derive(Clone, Debug)]
struct Claimed {
    /// The volume's unique name, for a CSI volume (empty otherwise).
    unique: String,
    /// The volume to wait for, or why not.
    waited: Result<Volume, NotWaited>,
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
            found: Found::default(),
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
    pub fn found(&self) -> &Found {
        &self.found
    }

    /// Lists the node's pods and classifies each ([`classify`]; a DaemonSet's existence read
    /// once per DaemonSet). Fails with [`DrainError::Refused`], before any eviction, when a
    /// pod may not be evicted.
    pub async fn select(&mut self, pod_selector: &Selector) -> Result<(), DrainError> {
        let node = self.node;
        let pods = self.api.list_pods(node).await?;
        let mut found = Found::default();
        let mut refused = Vec::new();
        let mut daemon_sets: BTreeMap<(String, String), bool> = BTreeMap::new();
        for p in pods {
            let ds_exists = self.daemon_set_exists(&p, &mut daemon_sets).await?;
            match classify(&p, self.cfg, pod_selector, ds_exists) {
                Disposition::Evict => found.to_evict.push(p),
                Disposition::Skip(why) => {
                    tracing::debug!(node, pod = %PodRef::of(&p), why = why.text(), "not evicting");
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

    /// Evicts `pods`, `drain.concurrentEvictions` at a time, each retried while refused until
    /// the deadline. A pod still refused then fails the drain with [`DrainError::Timeout`], or,
    /// with `drain.forceDeleteAfterTimeout`, is deleted (an Event for each).
    pub async fn evict(&mut self, pods: &[PodRef]) -> Result<(), DrainError> {
        tracing::debug!(node = self.node, pods = pods.len(), "evicting");
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
                        let held = Held {
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
            tracing::warn!(node = self.node, pod = %pod, budget = %names, reason = %phantom.join("; "), "a budget counts a disruption that is not happening");
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
    async fn held(&self, pod: &PodRef, held: Held) -> Result<(), DrainError> {
        let cfg = self.cfg;
        match cfg
            .when_blocked
            .policy(held.cause, cfg.force_delete_after_timeout)
        {
            Policy::Wait => Ok(()),
            policy @ (Policy::Fail | Policy::Quarantine) => {
                tracing::warn!(node = self.node, pod = %pod, cause = %held.cause, budget = %held.budget, why = %held.why, "an eviction is held and drain.whenBlocked says fail or quarantine");
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
            tracing::warn!(node = self.node, pod = %pod, error = %message, "eviction failed on the server side; retrying");
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
    fn own_state(&self, pod: &PodRef, state: Option<OwnEviction>) {
        let mut own = self.own.lock().unwrap_or_else(|e| e.into_inner());
        match state {
            Some(s) => own.insert(pod.clone(), s),
            None => own.remove(pod),
        };
    }

    /// The budgets that may cover `pod` (read once for all the drained pods, see
    /// [`NodeDrain::read_covering`]).
    async fn covering_of(&self, pod: &PodRef) -> Result<Vec<Covering>, DrainError> {
        let covering = self
            .covering
            .get_or_try_init(|| self.read_covering())
            .await?;
        Ok(covering.get(pod).cloned().unwrap_or_default())
    }

    /// Reads the budgets of the drained pods' namespaces (all at once) and matches them to
    /// each pod; says in one Event the budgets whose selector cannot be evaluated (taken to
    /// cover the pods).
    async fn read_covering(&self) -> Result<BTreeMap<PodRef, Vec<Covering>>, DrainError> {
        let mut labels_by_ns: BTreeMap<String, Vec<BTreeMap<String, String>>> = BTreeMap::new();
        for p in self.found.drained() {
            labels_by_ns
                .entry(p.metadata.namespace.clone().unwrap_or_default())
                .or_default()
                .push(p.metadata.labels.clone().unwrap_or_default());
        }
        let reads = labels_by_ns.iter().map(|(ns, labels)| async move {
            Ok::<_, DrainError>((ns, self.api.budgets(ns, labels).await?))
        });
        let by_ns: BTreeMap<&String, Vec<PodDisruptionBudget>> =
            futures::future::try_join_all(reads)
                .await?
                .into_iter()
                .collect();
        let mut covering: BTreeMap<PodRef, Vec<Covering>> = BTreeMap::new();
        for p in self.found.drained() {
            let r = PodRef::of(p);
            let labels = p.metadata.labels.clone().unwrap_or_default();
            let budgets = by_ns[&r.namespace]
                .iter()
                .filter(|b| {
                    budget_may_select(b.spec.as_ref().and_then(|s| s.selector.as_ref()), &labels)
                })
                .map(|b| covering_budget(&r.namespace, b))
                .collect();
            covering.insert(r, budgets);
        }
        self.say_unreadable(&by_ns).await;
        Ok(covering)
    }

    /// One Event for all the budgets whose selector cannot be evaluated: Events about one node
    /// with one reason are one series.
    async fn say_unreadable(&self, by_ns: &BTreeMap<&String, Vec<PodDisruptionBudget>>) {
        let node = self.node;
        let mut unreadable = Vec::new();
        for (ns, budgets) in by_ns {
            for b in budgets {
                let Some(why) = b
                    .spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .and_then(selector_problem)
                else {
                    continue;
                };
                let name = format!("{ns}/{}", b.metadata.name.as_deref().unwrap_or_default());
                tracing::warn!(node, budget = %name, why, "a PodDisruptionBudget's selector cannot be evaluated; taken to cover the node's pods");
                unreadable.push(format!("PodDisruptionBudget {name} ({why})"));
            }
        }
        if !unreadable.is_empty() {
            let note = format!(
                "selector cannot be evaluated: {}; rollboot takes each to cover the pods of node \
                 {node} and names it among the budgets that may refuse their evictions",
                unreadable.join("; ")
            );
            self.api
                .event(None, true, "BudgetSelectorUnreadable", note)
                .await;
        }
    }

    /// For a refused eviction of `pod`: the entries of `budgets` for pods whose deletion never
    /// happened (see [`phantom_disruptions`]).
    async fn phantoms(
        &self,
        pod: &PodRef,
        budgets: Vec<Covering>,
    ) -> Result<Vec<String>, DrainError> {
        // `disruptedPods` changes with every eviction admitted: read now, not taken from the
        // drain's first read of its budgets (`covering`), which may predate the eviction whose
        // deletion never happened (a refusal, then an eviction cut off and refused again).
        let labels = self
            .found
            .drained()
            .find(|p| PodRef::of(p) == *pod)
            .and_then(|p| p.metadata.labels.clone())
            .unwrap_or_default();
        let now_read = self.api.budgets(&pod.namespace, &[labels]).await?;
        let mut notes = Vec::new();
        for mut b in budgets {
            if let Some(fresh) = now_read
                .iter()
                .map(|f| covering_budget(&pod.namespace, f))
                .find(|f| f.name == b.name)
            {
                b.disrupted = fresh.disrupted;
            }
            let mut deleting = BTreeMap::new();
            for listed in b.disrupted.keys() {
                deleting.insert(
                    listed.clone(),
                    self.api.pod_deleting(&pod.namespace, listed).await?,
                );
            }
            // Read after the pods' states: an eviction answered meanwhile is in it.
            let ours: BTreeMap<String, OwnEviction> = self
                .own
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter(|(p, _)| p.namespace == pod.namespace)
                .map(|(p, s)| (p.name.clone(), *s))
                .collect();
            notes.extend(phantom_disruptions(
                &b.name,
                &b.disrupted,
                &deleting,
                &ours,
                Utc::now(),
            ));
        }
        Ok(notes)
    }

    /// Waits until none of `pods` is on the node with the same UID, or the deadline; pods left
    /// then fail the drain with [`DrainError::Timeout`], or, with
    /// `drain.forceDeleteAfterTimeout`, are deleted. With `drain.whenBlocked.stuck: fail`, a
    /// pod still there past its grace period and `drain.stuckAfter` fails the drain at once
    /// ([`DrainError::Held`]).
    pub async fn wait(&mut self, pods: &[PodRef]) -> Result<(), DrainError> {
        tracing::debug!(
            node = self.node,
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
                    let held = Held {
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

    /// Finds the volumes of the drained pods that the drain waits to see detached: each
    /// claim's PersistentVolume, when it is a CSI volume that is not shared and whose driver
    /// attaches (see [`Volume::of_pv`]); the others are logged with the reason.
    pub async fn read_volumes(&mut self) -> Result<(), DrainError> {
        let pods: Vec<Pod> = self.found.drained().cloned().collect();
        for p in &pods {
            let pod = PodRef::of(p);
            let mut waited = Vec::new();
            for claim in claims_of(p) {
                let Some(c) = self.claimed(&pod.namespace, &claim).await? else {
                    continue;
                };
                match c.waited {
                    Ok(v) => {
                        self.moved.entry(pod.clone()).or_default().push(Moved {
                            pv: v.pv.clone(),
                            unique: v.unique.clone(),
                            namespace: pod.namespace.clone(),
                            claim: claim.clone(),
                            pod: pod.name.clone(),
                            labels: p.metadata.labels.clone().unwrap_or_default(),
                        });
                        waited.push(v)
                    }
                    Err(why) => {
                        tracing::info!(node = self.node, pod = %pod, claim, why = why.text(), "not waiting for this volume to detach")
                    }
                }
            }
            if !waited.is_empty() {
                self.volumes.insert(pod, waited);
            }
        }
        Ok(())
    }

    /// What claim `namespace/claim` is bound to (read once per drain; `None`: not bound, or
    /// no such claim or volume).
    async fn claimed(
        &mut self,
        namespace: &str,
        claim: &str,
    ) -> Result<Option<Claimed>, DrainError> {
        let key = (namespace.to_string(), claim.to_string());
        if let Some(c) = self.claims.get(&key) {
            return Ok(c.clone());
        }
        let c = match self.api.claimed_volume(namespace, claim).await? {
            None => None,
            Some(pv) => {
                let csi = pv.spec.as_ref().and_then(|s| s.csi.as_ref());
                let attach = match csi {
                    Some(csi) => self.api.attach_required(&csi.driver).await?,
                    None => None,
                };
                Some(Claimed {
                    unique: csi
                        .map(|c| super::volumes::unique_name(&c.driver, &c.volume_handle))
                        .unwrap_or_default(),
                    waited: Volume::of_pv(&pv, attach, self.node),
                })
            }
        };
        self.claims.insert(key, c.clone());
        Ok(c)
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
            tracing::info!(node = self.node, pod = %p, "left on the node (drain.order: skip)");
        }
        Ok(o)
    }

    /// Adds the volumes of `pods` to the Node's record of those its drain waits for, before
    /// they are evicted (a drain resumed by another leader reads it; see
    /// [`NodeDrain::wait_leftovers`]); nothing is written when they are in it already.
    pub async fn record_volumes<'p>(
        &mut self,
        pods: impl Iterator<Item = &'p PodRef>,
    ) -> Result<(), DrainError> {
        let more: Vec<Volume> = pods
            .filter_map(|p| self.volumes.get(p))
            .flatten()
            .filter(|v| !self.recorded.contains(*v))
            .cloned()
            .collect();
        if more.is_empty() {
            return Ok(());
        }
        if self.recorded.is_empty() {
            let far = Utc::now() + chrono::TimeDelta::days(1);
            self.recorded = self
                .api
                .node_volumes(self.node, None, far)
                .await?
                .0
                .recorded;
        }
        let mut all = self.recorded.clone();
        all.extend(more);
        (self.ensure)()?;
        self.api.record_volumes(self.node, &all).await?;
        self.recorded = all;
        Ok(())
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

    /// Waits until the volumes of `pods` (gone at `gone`) have left the node: not in its
    /// `volumesInUse` nor `volumesAttached`, and no VolumeAttachment of the node for them;
    /// past `drain.volumes.detachTimeout`, [`DrainError::Detach`] names each one left.
    pub async fn wait_detached<'p>(
        &self,
        pods: impl Iterator<Item = &'p PodRef>,
        gone: DateTime<Utc>,
    ) -> Result<(), DrainError> {
        let wanted: BTreeSet<Volume> = pods
            .filter_map(|p| self.volumes.get(p))
            .flatten()
            .cloned()
            .collect();
        self.wait_volumes(wanted, gone).await
    }

    /// The volumes of pods that are no longer on the node and were not waited for (a drain
    /// resumed by a new leader after its predecessor evicted them): those the Node's record
    /// names ([`crate::node::DRAIN_VOLUMES`]: once a detach has begun, only the
    /// VolumeAttachment shows it), and every CSI volume in its `volumesAttached`, that no pod
    /// now on the node uses and that is not a shared volume of a drained pod, are waited for as
    /// [`NodeDrain::wait_detached`] does.
    pub async fn wait_leftovers(&mut self) -> Result<(), DrainError> {
        let far = Utc::now() + chrono::TimeDelta::days(1);
        let (status, _) = self.api.node_volumes(self.node, None, far).await?;
        let attached: Vec<&String> = status
            .attached
            .iter()
            .filter(|u| u.starts_with(CSI_PREFIX))
            .collect();
        if attached.is_empty() && status.recorded.is_empty() {
            return Ok(());
        }
        let mut used = BTreeSet::new();
        let on_node = self.api.list_pods(self.node).await?;
        let drained: Vec<Pod> = self.found.drained().cloned().collect();
        for p in on_node.iter().chain(&drained) {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let staying = on_node.iter().any(|q| PodRef::of(q) == PodRef::of(p));
            for claim in claims_of(p) {
                if let Some(c) = self.claimed(&ns, &claim).await? {
                    // A pod still on the node keeps its volumes attached; a drained pod's
                    // shared volume is not waited for.
                    if staying || matches!(c.waited, Err(NotWaited::Shared)) {
                        used.insert(c.unique);
                    }
                }
            }
        }
        let mut wanted: BTreeSet<Volume> = attached
            .into_iter()
            .filter(|u| !used.contains(*u))
            .filter_map(|u| {
                Some(Volume {
                    pv: format!("of unique name {u}"),
                    attachment: attachment_of_unique(u, self.node)?,
                    unique: u.clone(),
                })
            })
            .collect();
        // A recorded volume replaces the same one found in the status (its PV named).
        for v in status.recorded.iter().filter(|v| !used.contains(&v.unique)) {
            wanted.retain(|w| w.unique != v.unique);
            wanted.insert(v.clone());
        }
        if !wanted.is_empty() {
            tracing::info!(node = self.node, volumes = wanted.len(), "volumes attached or recorded that no pod on the node uses: waiting for them to detach");
        }
        self.wait_volumes(wanted, Utc::now()).await
    }

    /// Waits until `wanted` have left the node (see [`NodeDrain::wait_detached`]), the node
    /// watched for its status and the VolumeAttachments read once the status is clear.
    async fn wait_volumes(
        &self,
        wanted: BTreeSet<Volume>,
        since: DateTime<Utc>,
    ) -> Result<(), DrainError> {
        if wanted.is_empty() {
            return Ok(());
        }
        let deadline = since + self.cfg.volumes.detach_timeout.to_chrono();
        // A detach takes seconds: looked at every second at most (the VolumeAttachments are
        // read by name, one GET each).
        let retry = self
            .cfg
            .eviction_retry_interval
            .to_std()
            .min(std::time::Duration::from_secs(1));
        let names: Vec<String> = wanted.iter().map(|v| v.attachment.clone()).collect();
        let mut after = None;
        loop {
            let (status, rv) = self
                .api
                .node_volumes(self.node, after.take(), deadline)
                .await?;
            let in_status = left(&wanted, &status, &BTreeSet::new());
            // The attach-detach controller takes a volume out of `volumesAttached` when its
            // detach starts (seen on kube-controller-manager v1.36), and the VolumeAttachment
            // goes when the detach ends: only that says it is done, and it is read once the
            // status is clear.
            let still = if in_status.is_empty() {
                let attachments = self.api.attachments(&names).await?;
                left(&wanted, &status, &attachments)
            } else {
                in_status
            };
            if still.is_empty() {
                tracing::debug!(node = self.node, volumes = wanted.len(), "volumes detached");
                return Ok(());
            }
            let now = Utc::now();
            if now >= deadline {
                return Err(DrainError::Detach {
                    node: self.node.into(),
                    left: still.iter().map(|l| l.to_string()).collect(),
                    after_seconds: (now - since).num_seconds(),
                });
            }
            if still.iter().any(|l| l.where_ != ["VolumeAttachment"]) {
                // In the node's status: the next change of the node says more.
                after = Some(rv);
            } else {
                let pause = (deadline - now).to_std().unwrap_or_default().min(retry);
                tokio::time::sleep(pause).await;
            }
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

/// The budgets' names, for an Event.
fn names(budgets: &[Covering]) -> String {
    budgets
        .iter()
        .map(|b| b.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Budget `b` of `namespace` as an Event about a refused eviction needs it.
fn covering_budget(namespace: &str, b: &PodDisruptionBudget) -> Covering {
    Covering {
        name: format!(
            "{namespace}/{}",
            b.metadata.name.clone().unwrap_or_default()
        ),
        disrupted: b
            .status
            .as_ref()
            .and_then(|s| s.disrupted_pods.as_ref())
            .map(|d| {
                d.iter()
                    .map(|(pod, t)| (pod.clone(), crate::time::from_jiff(t.0)))
                    .collect()
            })
            .unwrap_or_default(),
        never: never_allows_now(b),
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
