//! The invariant watch: what a safe rollout must never do, recorded as it happens.
//!
//! Owns the records of PDB violations caused by admitted evictions, deletions or reboots, the
//! largest number of nodes cordoned or NotReady at once, nodes rebooted twice for one
//! request token, reboots of nodes not cordoned or not drained, nodes out at once per group,
//! and nodes uncordoned while the node-lifecycle controller still counted them as not ready,
//! reboots asked while volumes of evicted pods were still attached, how long pods waited on a
//! Multi-Attach error, and how long budgets held evictions (for the rehearsal's report). With
//! the limits of [`Invariants::watch_capacity`], it also judges each planned start (rollboot's
//! cordon of a node whose cycle is not for its host's own shutdown) against the nodes out then
//! ([`NodesOut`]: rollboot's, hosts shutting down by themselves, other actors' maintenance,
//! and with `countCordoned` every cordon), records the starts made under another actor's
//! maintenance, and the moments a shutdown or another actor took the nodes out past the
//! limit. It must never influence the cluster: it only observes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;

use super::index::Index;
use super::meta::timestamp;

/// Who asked for a pod's disruption, for the invariant watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// An admitted eviction.
    Eviction,
    /// An API DELETE.
    Delete,
    /// A simulated reboot killed it.
    Reboot,
    /// A host that shut down by itself killed it (the chaos fault `hostShutdown`): not a
    /// reboot rollboot asked for; the report lists what such a shutdown left.
    Shutdown,
}

/// One moment a budget had fewer healthy pods than desired because of an admitted disruption.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    /// When (RFC 3339).
    pub at: String,
    /// `namespace/name` of the budget.
    pub pdb: String,
    /// The pod taken away.
    pub pod: String,
    /// `eviction`, `delete` or `reboot`.
    pub cause: String,
    /// Healthy pods left.
    pub healthy: i64,
    /// Healthy pods desired.
    pub desired: i64,
}

/// A snapshot of the invariant records.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InvariantReport {
    /// PDB violations.
    pub pdb_violations: Vec<Violation>,
    /// Largest number of nodes cordoned or NotReady at the same time.
    pub max_nodes_unavailable: usize,
    /// Nodes cordoned or NotReady now.
    pub nodes_unavailable_now: usize,
    /// Reboots performed.
    pub reboots: usize,
    /// `(node, token)` pairs that asked for a second reboot with an already used token.
    pub repeated_reboots: Vec<(String, String)>,
    /// Nodes uncordoned while the node-lifecycle controller still had a `not-ready` or
    /// `unreachable` taint on them (pods landing there can be evicted by it), with when.
    pub uncordoned_while_not_ready: Vec<(String, String)>,
    /// Reboots of a node that was schedulable or still ran pods other than DaemonSet and
    /// mirror pods.
    pub unsafe_reboots: Vec<UnsafeReboot>,
    /// Per value of the group label (see [`Invariants::watch_groups`]), the largest number of
    /// its nodes cordoned or NotReady at the same time.
    pub max_nodes_unavailable_by_group: BTreeMap<String, usize>,
    /// Largest number of nodes cordoned by rollboot (`spec.unschedulable` with
    /// `rollboot.dev/cordoned-by`) at the same time: in flight, or failed and left cordoned.
    /// rollboot promises it never exceeds `maxNodes`.
    pub max_cordoned_by_rollboot: usize,
    /// The same per value of the group label: never above `maxNodesPerGroup`.
    pub max_cordoned_by_rollboot_by_group: BTreeMap<String, usize>,
    /// Reboots asked while a volume of a pod evicted from the node was still attached there
    /// (its VolumeAttachment to the node exists, or its unique name is in the node's
    /// `volumesAttached`).
    pub reboots_with_attached_volumes: Vec<AttachedReboot>,
    /// Pods that waited for their ReadWriteOnce volume to leave another node (a Multi-Attach
    /// Event while it was still attached there; none while a detach was under way, as the
    /// controller): simulated seconds from the first time the controller found it held until it
    /// was attached to their node.
    pub multi_attach_wait_seconds: MultiAttachWait,
    /// Planned starts (rollboot's cordon of a node whose cycle is not for its host's own
    /// shutdown) made while the nodes out were already at `maxNodes` (or `maxNodesPerGroup`
    /// in the node's group): must be 0. See [`NodesOut`].
    pub planned_starts_over_capacity: usize,
    /// Each of those starts, with the nodes out then.
    pub planned_starts_over_capacity_instances: Vec<OverCapacity>,
    /// The moments a host's own shutdown took the nodes out past the limit: it arrived while
    /// the limit was already reached (allowed; rollboot drains such a host at once).
    pub over_capacity_by_shutdown: Vec<OverCapacity>,
    /// The same for another actor's maintenance (a deletion taint, a NodeMaintenance) that
    /// began while the limit was already reached.
    pub over_capacity_by_other_maintenance: Vec<OverCapacity>,
    /// rollboot cordoned a node that carried another actor's signal then (a taint of
    /// [`super::signals::OTHER_TAINTS`], a maintenance condition not its own, or a
    /// NodeMaintenance not Succeeded for it): a break.
    pub starts_under_other_maintenance: Vec<StartUnderOtherMaintenance>,
}

/// One moment the nodes out reached past a limit, or a start made at it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OverCapacity {
    /// The node that started (or began shutting down, or went into another's maintenance).
    pub node: String,
    /// When (RFC 3339).
    pub at: String,
    /// The limit: `maxNodes N`, or `maxNodesPerGroup N in GROUP`.
    pub limit: String,
    /// The group, for a group's limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The other nodes out then, each `name (why)`.
    pub nodes_out: Vec<String>,
}

/// A cordon by rollboot of a node another actor was taking out.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StartUnderOtherMaintenance {
    /// The node.
    pub node: String,
    /// When (RFC 3339).
    pub at: String,
    /// The signals it carried: taint keys, `condition:TYPE`, `NodeMaintenance NAME`.
    pub signals: Vec<String>,
}

/// The limits the nodes out are held to (rollboot's `concurrency` section).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capacity {
    /// `maxNodes`.
    pub max_nodes: usize,
    /// `groupBy` and `maxNodesPerGroup`, when set.
    pub per_group: Option<(String, usize)>,
    /// `countCordoned`: every cordoned node counts as out.
    pub count_cordoned: bool,
    /// rollboot's maintenance lock Lease (namespace, name): which node holds a slot since
    /// when, to tell a cycle that goes on from a start.
    pub lock: Option<(String, String)>,
}

/// How long a signal rollboot did not write (a host's `shutdown-requested`, another actor's
/// taint, condition or NodeMaintenance, a cordon under `countCordoned`) must have been there,
/// in real time, before a planned start for it to count as out against that start: rollboot
/// cannot know of a write made a moment before its own (its view of the Nodes trails the
/// store by a watch event). Its own cordons count at once. While the API server delays
/// requests (the chaos fault `slowApi`), more: see [`State::seen_after`].
pub const SEEN_AFTER: Duration = Duration::from_secs(1);

/// What the watch knows of one Node for the nodes out: why it is out, and since when.
#[derive(Clone, Debug, Default)]
struct NodeOut {
    /// Cordoned by rollboot (`cordoned-by` with `spec.unschedulable`).
    rollboot: bool,
    /// rollboot's cycle is for its host's own shutdown.
    cycle_for_shutdown: bool,
    /// Cordoned by anyone, since.
    cordoned: Option<Instant>,
    /// `shutdown-requested` present, since.
    shutdown: Option<Instant>,
    /// Other actors' signals on the Node itself, and since when there has been one.
    signals: Vec<String>,
    signals_since: Option<Instant>,
    /// Its value of the group label.
    group: Option<String>,
}

/// The nodes out at an instant, by [`Capacity`]'s rule, for the records. Pure.
pub struct NodesOut;

impl NodesOut {
    /// Why `name`, as `o` says, is out now (nothing when it is not), whatever its age.
    fn list_of(s: &State, name: &str, o: &NodeOut) -> Vec<String> {
        let mut one = State {
            capacity: s.capacity.clone(),
            ..State::default()
        };
        one.nodes.insert(name.to_string(), o.clone());
        if let Some(m) = s.maintenances.get(name) {
            one.maintenances.insert(name.to_string(), m.clone());
        }
        NodesOut::list(&one, "", None, Instant::now(), false)
    }

    /// The nodes other than `except` out at `now` (in `group` when given), each `name (why)`:
    /// cordoned by rollboot, shutting down by themselves, under another actor's maintenance,
    /// or (with `count_cordoned`) cordoned by anyone. With `settled`, what rollboot did not
    /// write counts only once it has been there [`State::seen_after`].
    fn list(
        s: &State,
        except: &str,
        group: Option<&str>,
        now: Instant,
        settled: bool,
    ) -> Vec<String> {
        NodesOut::named(s, except, group, now, settled)
            .into_iter()
            .map(|(name, why)| format!("{name} ({why})"))
            .collect()
    }

    /// [`NodesOut::list`] as (name, why).
    fn named(
        s: &State,
        except: &str,
        group: Option<&str>,
        now: Instant,
        settled: bool,
    ) -> Vec<(String, String)> {
        let count_cordoned = s.capacity.as_ref().is_some_and(|c| c.count_cordoned);
        let after = s.seen_after(now);
        let seen = |t: Option<Instant>| {
            t.is_some_and(|t| !settled || now.saturating_duration_since(t) >= after)
        };
        let mut out = Vec::new();
        for (name, o) in &s.nodes {
            if name == except || group.is_some_and(|g| o.group.as_deref() != Some(g)) {
                continue;
            }
            let mut why = Vec::new();
            // rollboot's own: cordoned by it, or holding a slot in its lock (a Node registered
            // again mid-cycle is not cordoned yet, and its slot is held all the same: chaos
            // seed 654, a host's shutdown arriving that instant was at the limit).
            if o.rollboot || s.lock_since.contains_key(name) {
                why.push("rollboot".to_string());
            }
            if seen(o.shutdown) {
                why.push("shutdown".to_string());
            }
            if seen(o.signals_since) {
                why.push(format!("otherMaintenance: {}", o.signals.join(", ")));
            }
            for (nm, since) in s.maintenances.get(name).into_iter().flatten() {
                if seen(Some(*since)) {
                    why.push(format!("otherMaintenance: NodeMaintenance {nm}"));
                }
            }
            if count_cordoned && seen(o.cordoned) && why.is_empty() {
                why.push("cordoned".to_string());
            }
            if !why.is_empty() {
                out.push((name.clone(), why.join("; ")));
            }
        }
        out
    }
}

/// A reboot asked while volumes of pods evicted from the node were still attached to it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AttachedReboot {
    /// The node.
    pub node: String,
    /// When (RFC 3339).
    pub at: String,
    /// The unique names (`kubernetes.io/csi/<driver>^<handle>`) still attached.
    pub volumes: Vec<String>,
}

/// Waits of pods for a volume held by another node (Multi-Attach), simulated seconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MultiAttachWait {
    /// Pods whose wait ended (their volume attached on their node).
    pub pods: usize,
    /// Sum of the waits.
    pub total: f64,
    /// Longest wait.
    pub max: f64,
}

// `MultiAttachWait` holds floats; the report compares them only as a whole.
impl Eq for MultiAttachWait {}

/// A reboot of a node that was not ready for it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UnsafeReboot {
    /// The node.
    pub node: String,
    /// When (RFC 3339).
    pub at: String,
    /// It was schedulable.
    pub uncordoned: bool,
    /// `namespace/name` of the pods still on it.
    pub pods: Vec<String>,
}

impl InvariantReport {
    /// True when no invariant was broken.
    pub fn clean(&self) -> bool {
        self.planned_starts_over_capacity == 0
            && self.starts_under_other_maintenance.is_empty()
            && self.pdb_violations.is_empty()
            && self.repeated_reboots.is_empty()
            && self.uncordoned_while_not_ready.is_empty()
            && self.unsafe_reboots.is_empty()
            && self.reboots_with_attached_volumes.is_empty()
    }
}

#[derive(Default)]
struct State {
    report: InvariantReport,
    /// Nodes whose reboot under way is a shutdown of their own.
    shutting_down: BTreeSet<String>,
    unavailable: BTreeSet<String>,
    cordoned_by_rollboot: BTreeSet<String>,
    /// The group label, and each node's value of it.
    group_label: Option<String>,
    groups: BTreeMap<String, String>,
    tokens: BTreeMap<(String, String), usize>,
    /// Every budget hold: (budget, pod, first refusal, eviction), and the open one per pod.
    holds: Vec<(String, String, Instant, Option<Instant>)>,
    open_holds: BTreeMap<String, usize>,
    /// Open Multi-Attach waits by pod uid: when the first Event was recorded.
    multi_attach: BTreeMap<String, Instant>,
    /// The limits of [`Invariants::watch_capacity`].
    capacity: Option<Capacity>,
    /// Every Node, for the nodes out.
    nodes: BTreeMap<String, NodeOut>,
    /// NodeMaintenances not Succeeded, per node: (name, since).
    maintenances: BTreeMap<String, Vec<(String, Instant)>>,
    /// The longest delay the API server put on a request lately, and when it last did.
    api_delay: Option<(Instant, Duration)>,
    /// The nodes in the maintenance lock and since when (the controller's instant).
    lock_since: BTreeMap<String, chrono::DateTime<Utc>>,
    /// When each Node was last deleted.
    deleted_at: BTreeMap<String, chrono::DateTime<Utc>>,
    /// Nodes whose Node is deleted (not registered again yet) while the lock holds their slot.
    gone: BTreeSet<String>,
}

impl State {
    /// How long a write rollboot did not make must have been in the store before one of its
    /// planned starts for rollboot to have known of it: [`SEEN_AFTER`], plus three times the
    /// delay the API server puts on requests while it does (and for as long again after): a
    /// watch of the controller's started again after a cut waits that long for its first
    /// answer, and a start's two writes (its slot in the lock, then the cordon) as long each,
    /// the cordon judged when it lands. (The chaos campaign's seed 441: with `slowApi` at
    /// 742 ms, a start's cordon landed 1.5 s after the pass that decided it.)
    fn seen_after(&self, now: Instant) -> Duration {
        match self.api_delay {
            Some((at, d)) if now.saturating_duration_since(at) <= SEEN_AFTER + 3 * d => {
                SEEN_AFTER + 3 * d
            }
            _ => SEEN_AFTER,
        }
    }
}

/// How long a budget held one pod's eviction: from the first 429 to the eviction admitted (or
/// to now, when it was not), in real seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    /// `namespace/name` of the budget.
    pub budget: String,
    /// `namespace/name` of the pod.
    pub pod: String,
    /// Seconds held (real time).
    pub seconds: f64,
    /// The pod was evicted in the end.
    pub released: bool,
}

/// The shared recorder.
#[derive(Default)]
pub struct Invariants {
    state: Mutex<State>,
}

impl Invariants {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a budget violation.
    pub fn record_violation(
        &self,
        namespace: &str,
        pdb: &str,
        pod: &str,
        cause: Cause,
        healthy: i64,
        desired: i64,
    ) {
        let cause = match cause {
            Cause::Eviction => "eviction",
            Cause::Delete => "delete",
            Cause::Reboot => "reboot",
            Cause::Shutdown => "shutdown",
        };
        self.lock().report.pdb_violations.push(Violation {
            at: timestamp(Utc::now()),
            pdb: format!("{namespace}/{pdb}"),
            pod: format!("{namespace}/{pod}"),
            cause: cause.into(),
            healthy,
            desired,
        });
    }

    /// Counts nodes out at once per value of the node label `key` too, from the next change
    /// on (the label of each node as last seen).
    pub fn watch_groups(&self, key: &str) {
        self.lock().group_label = Some(key.to_string());
    }

    /// Notes whether a node (with its labels) is cordoned or NotReady now, and whether it is
    /// cordoned by rollboot.
    pub fn node_availability(
        &self,
        node: &str,
        labels: &BTreeMap<String, String>,
        unavailable: bool,
        cordoned_by_rollboot: bool,
    ) {
        let mut s = self.lock();
        let s = &mut *s;
        let (u, c) = (&mut s.unavailable, &mut s.cordoned_by_rollboot);
        for (set, member) in [(u, unavailable), (c, cordoned_by_rollboot)] {
            if member {
                set.insert(node.to_string());
            } else {
                set.remove(node);
            }
        }
        let n = s.unavailable.len();
        s.report.nodes_unavailable_now = n;
        s.report.max_nodes_unavailable = s.report.max_nodes_unavailable.max(n);
        s.report.max_cordoned_by_rollboot = s
            .report
            .max_cordoned_by_rollboot
            .max(s.cordoned_by_rollboot.len());
        let Some(key) = s.group_label.clone() else {
            return;
        };
        match labels.get(&key) {
            Some(g) => s.groups.insert(node.to_string(), g.clone()),
            None => s.groups.remove(node),
        };
        let Some(group) = s.groups.get(node).cloned() else {
            return;
        };
        let in_group = |set: &BTreeSet<String>| {
            set.iter()
                .filter(|n| s.groups.get(*n) == Some(&group))
                .count()
        };
        let (out, cordoned) = (in_group(&s.unavailable), in_group(&s.cordoned_by_rollboot));
        let max = s
            .report
            .max_nodes_unavailable_by_group
            .entry(group.clone())
            .or_default();
        *max = (*max).max(out);
        let max = s
            .report
            .max_cordoned_by_rollboot_by_group
            .entry(group)
            .or_default();
        *max = (*max).max(cordoned);
    }

    /// Records a reboot of a node not ready for it.
    pub fn unsafe_reboot(&self, node: &str, uncordoned: bool, pods: Vec<String>) {
        self.lock().report.unsafe_reboots.push(UnsafeReboot {
            node: node.to_string(),
            at: timestamp(Utc::now()),
            uncordoned,
            pods,
        });
    }

    /// Records a reboot asked while `volumes` were still attached to `node`.
    pub fn reboot_with_attached_volumes(&self, node: &str, volumes: Vec<String>) {
        self.lock()
            .report
            .reboots_with_attached_volumes
            .push(AttachedReboot {
                node: node.to_string(),
                at: timestamp(Utc::now()),
                volumes,
            });
    }

    /// Notes the first Multi-Attach Event of the pod with `uid`.
    pub fn multi_attach_started(&self, uid: &str) {
        self.lock()
            .multi_attach
            .entry(uid.to_string())
            .or_insert_with(Instant::now);
    }

    /// Ends the pod's Multi-Attach wait, if one is open: its volume is attached to its node.
    /// `time_factor` turns real seconds into simulated ones.
    pub fn multi_attach_ended(&self, uid: &str, time_factor: f64) {
        let mut s = self.lock();
        let Some(from) = s.multi_attach.remove(uid) else {
            return;
        };
        let secs = from.elapsed().as_secs_f64() / time_factor.max(f64::MIN_POSITIVE);
        let w = &mut s.report.multi_attach_wait_seconds;
        w.pods += 1;
        w.total += secs;
        w.max = w.max.max(secs);
    }

    /// Records an uncordon of `node` while it carried a not-ready/unreachable taint.
    pub fn uncordoned_while_not_ready(&self, node: &str) {
        self.lock()
            .report
            .uncordoned_while_not_ready
            .push((node.to_string(), timestamp(Utc::now())));
    }

    /// Notes a node removed from the cluster.
    pub fn node_gone(&self, node: &str) {
        self.node_availability(node, &BTreeMap::new(), false, false);
    }

    /// Marks `node`'s next reboot as a shutdown of its own (see [`Cause::Shutdown`]).
    pub fn shutting_down(&self, node: &str) {
        self.lock().shutting_down.insert(node.to_string());
    }

    /// Whether `node`'s reboot now is a shutdown of its own (asked once per reboot).
    pub fn take_shutting_down(&self, node: &str) -> bool {
        self.lock().shutting_down.remove(node)
    }

    /// Records a reboot request; false (and a violation) when the token was already used.
    pub fn reboot_requested(&self, node: &str, token: &str) -> bool {
        let mut s = self.lock();
        let n = s
            .tokens
            .entry((node.to_string(), token.to_string()))
            .or_default();
        *n += 1;
        let first = *n == 1;
        s.report.reboots += 1;
        if !first {
            s.report
                .repeated_reboots
                .push((node.to_string(), token.to_string()));
        }
        first
    }

    /// Notes an eviction of `pod` refused by `budget` (both `namespace/name`): a hold starts,
    /// unless one is open for the pod.
    pub fn budget_refused(&self, budget: &str, pod: &str) {
        let mut s = self.lock();
        if s.open_holds.contains_key(pod) {
            return;
        }
        let i = s.holds.len();
        s.holds
            .push((budget.to_string(), pod.to_string(), Instant::now(), None));
        s.open_holds.insert(pod.to_string(), i);
    }

    /// Notes an admitted eviction of `pod`: its open hold, if any, ends.
    pub fn evicted(&self, pod: &str) {
        let mut s = self.lock();
        if let Some(i) = s.open_holds.remove(pod) {
            s.holds[i].3 = Some(Instant::now());
        }
    }

    /// Every hold so far, in the order they began.
    pub fn holds(&self) -> Vec<Hold> {
        let now = Instant::now();
        self.lock()
            .holds
            .iter()
            .map(|(b, p, from, to)| Hold {
                budget: b.clone(),
                pod: p.clone(),
                seconds: (to.unwrap_or(now) - *from).as_secs_f64(),
                released: to.is_some(),
            })
            .collect()
    }

    /// Judges the nodes out against `capacity` from now on (see [`NodesOut`]).
    pub fn watch_capacity(&self, capacity: Capacity) {
        let mut s = self.lock();
        if let Some((key, _)) = &capacity.per_group {
            // The Nodes seen so far get their group on their next event; a run sets this
            // before anything starts.
            s.group_label.get_or_insert_with(|| key.clone());
        }
        s.capacity = Some(capacity);
    }

    /// Notes a Node event (its index after it; `gone` for a deletion), for the nodes out:
    /// a planned start is judged against the nodes out then, a shutdown or another actor's
    /// maintenance that begins against the limit.
    pub fn node_out(&self, idx: &Index, gone: bool) {
        let now = Instant::now();
        let mut s = self.lock();
        let name = idx.name.as_str();
        if gone {
            s.deleted_at.insert(name.to_string(), Utc::now());
            // Deleted while its cycle holds a slot in the lock, it holds it still (rollboot
            // frees it once it sees the deletion): out as rollboot's until the lock lets it go.
            let held = s.lock_since.contains_key(name);
            match s.nodes.get_mut(name) {
                Some(o) if held => {
                    o.rollboot = true;
                    s.gone.insert(name.to_string());
                }
                _ => {
                    s.nodes.remove(name);
                }
            }
            return;
        }
        s.gone.remove(name);
        let prev = s.nodes.get(name).cloned().unwrap_or_default();
        let sig = idx.signals.as_deref().cloned().unwrap_or_default();
        let signals = sig.others();
        let since = |on: bool, was: Option<Instant>| on.then(|| was.unwrap_or(now));
        let key = s
            .capacity
            .as_ref()
            .and_then(|c| c.per_group.as_ref().map(|g| g.0.clone()));
        let next = NodeOut {
            rollboot: idx.cordoned_by_rollboot,
            cycle_for_shutdown: sig.cycle_for_shutdown,
            cordoned: since(idx.unschedulable, prev.cordoned),
            shutdown: since(sig.shutdown_requested, prev.shutdown),
            signals_since: since(!signals.is_empty(), prev.signals_since),
            signals,
            group: key.and_then(|k| idx.labels.get(&k).cloned()),
        };
        if s.capacity.is_some() {
            Self::judge(&mut s, name, &prev, &next, now);
        }
        s.nodes.insert(name.to_string(), next);
    }

    /// The records of one Node change, from `prev` to `next`.
    fn judge(s: &mut State, name: &str, prev: &NodeOut, next: &NodeOut, now: Instant) {
        let at = timestamp(Utc::now());
        let out_before = !NodesOut::list_of(s, name, prev).is_empty();
        // A Node deleted and registered again while its cycle held its slot all along (the
        // controller never freed it: no leader saw the deletion) is cordoned again to go on
        // with that cycle: not a start (chaos seed 507).
        let goes_on = s
            .deleted_at
            .get(name)
            .zip(s.lock_since.get(name))
            .is_some_and(|(deleted, since)| since < deleted);
        if !prev.rollboot && next.rollboot && !next.cycle_for_shutdown && !goes_on {
            let mut signals: Vec<String> = Vec::new();
            let after = s.seen_after(now);
            if prev
                .signals_since
                .is_some_and(|t| now.saturating_duration_since(t) >= after)
            {
                signals.extend(prev.signals.iter().cloned());
            }
            for (nm, t) in s.maintenances.get(name).into_iter().flatten() {
                if now.saturating_duration_since(*t) >= after {
                    signals.push(format!("NodeMaintenance {nm}"));
                }
            }
            if !signals.is_empty() {
                s.report
                    .starts_under_other_maintenance
                    .push(StartUnderOtherMaintenance {
                        node: name.to_string(),
                        at: at.clone(),
                        signals,
                    });
            }
            for o in Self::at_limit(s, name, next, now, true, &at) {
                s.report.planned_starts_over_capacity += 1;
                s.report.planned_starts_over_capacity_instances.push(o);
            }
            Self::late_arrivals(s, name, next, now, &at);
        }
        // A shutdown or another actor's maintenance that takes out a node not out before.
        if out_before {
            return;
        }
        if prev.shutdown.is_none() && next.shutdown.is_some() {
            let over = Self::at_limit(s, name, next, now, false, &at);
            s.report.over_capacity_by_shutdown.extend(over);
        } else if prev.signals_since.is_none() && next.signals_since.is_some() {
            let over = Self::at_limit(s, name, next, now, false, &at);
            s.report.over_capacity_by_other_maintenance.extend(over);
        }
    }

    /// At a planned start within the limits as rollboot could see them: the nodes out it could
    /// not have seen yet (younger than [`State::seen_after`]) that take the nodes out past a limit
    /// with this start. From rollboot's side they arrived once the limit was reached, as a
    /// shutdown or another actor's maintenance that begins after the start: recorded so.
    fn late_arrivals(s: &mut State, name: &str, node: &NodeOut, now: Instant, at: &str) {
        let Some(c) = s.capacity.clone() else {
            return;
        };
        let mut limits = vec![(format!("maxNodes {}", c.max_nodes), None, c.max_nodes)];
        if let (Some((_, m)), Some(g)) = (&c.per_group, node.group.clone()) {
            limits.push((format!("maxNodesPerGroup {m} in {g}"), Some(g), *m));
        }
        for (limit, group, max) in limits {
            let seen = NodesOut::named(s, name, group.as_deref(), now, true);
            let all = NodesOut::named(s, name, group.as_deref(), now, false);
            if seen.len() >= max || all.len() < max {
                continue;
            }
            let mut nodes_out: Vec<String> =
                seen.iter().map(|(n, why)| format!("{n} ({why})")).collect();
            nodes_out.push(format!("{name} (rollboot)"));
            for (late, _) in all.iter().filter(|(n, _)| seen.iter().all(|(m, _)| m != n)) {
                let shutdown = s
                    .nodes
                    .get(late)
                    .and_then(|o| o.shutdown)
                    .is_some_and(|t| now.saturating_duration_since(t) < s.seen_after(now));
                let o = OverCapacity {
                    node: late.clone(),
                    at: at.to_string(),
                    limit: limit.clone(),
                    group: group.clone(),
                    nodes_out: nodes_out.clone(),
                };
                if shutdown {
                    s.report.over_capacity_by_shutdown.push(o);
                } else {
                    s.report.over_capacity_by_other_maintenance.push(o);
                }
            }
        }
    }

    /// The limits (overall, and in `node`'s group) that the other nodes out already reach.
    fn at_limit(
        s: &State,
        name: &str,
        node: &NodeOut,
        now: Instant,
        settled: bool,
        at: &str,
    ) -> Vec<OverCapacity> {
        let Some(c) = &s.capacity else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let all = NodesOut::list(s, name, None, now, settled);
        if all.len() >= c.max_nodes {
            found.push((format!("maxNodes {}", c.max_nodes), None, all));
        }
        if let (Some((_, m)), Some(g)) = (&c.per_group, node.group.as_deref()) {
            let there = NodesOut::list(s, name, Some(g), now, settled);
            if there.len() >= *m {
                found.push((format!("maxNodesPerGroup {m} in {g}"), Some(g), there));
            }
        }
        found
            .into_iter()
            .map(|(limit, group, nodes_out)| OverCapacity {
                node: name.to_string(),
                at: at.to_string(),
                limit,
                group: group.map(str::to_string),
                nodes_out,
            })
            .collect()
    }

    /// Notes that `node`'s host went down by itself (a shutdown nobody planned, see
    /// [`Cause::Shutdown`]): one that rollboot never heard of (no `shutdown-requested`: its
    /// agent took it for rollboot's own reboot, or had no time to write) takes the node out
    /// there and then, past the limit when the others out already reach it.
    pub fn host_down_by_itself(&self, node: &str) {
        let now = Instant::now();
        let mut s = self.lock();
        let Some(o) = s.nodes.get(node).cloned() else {
            return;
        };
        if s.capacity.is_none() || !NodesOut::list_of(&s, node, &o).is_empty() {
            return;
        }
        let at = timestamp(Utc::now());
        let over = Self::at_limit(&s, node, &o, now, false, &at);
        s.report.over_capacity_by_shutdown.extend(over);
    }

    /// Notes a NodeMaintenance event: `node` is its `spec.nodeName`; `active` when it exists
    /// and its phase is not Succeeded. Its node counts as out from then; one that begins on a
    /// node not out before is judged against the limit as another actor's maintenance.
    pub fn node_maintenance(&self, name: &str, node: Option<&str>, active: bool) {
        let now = Instant::now();
        let mut s = self.lock();
        for list in s.maintenances.values_mut() {
            list.retain(|(n, _)| n != name || active);
        }
        s.maintenances.retain(|_, l| !l.is_empty());
        let Some(node) = node.filter(|_| active) else {
            return;
        };
        let already = s
            .maintenances
            .get(node)
            .is_some_and(|l| l.iter().any(|(n, _)| n == name));
        if already {
            return;
        }
        let state = s.nodes.get(node).cloned();
        let out_before = state
            .as_ref()
            .is_some_and(|o| !NodesOut::list_of(&s, node, o).is_empty());
        if let (Some(o), false, true) = (&state, out_before, s.capacity.is_some()) {
            let at = timestamp(Utc::now());
            let over = Self::at_limit(&s, node, o, now, false, &at);
            s.report.over_capacity_by_other_maintenance.extend(over);
        }
        s.maintenances
            .entry(node.to_string())
            .or_default()
            .push((name.to_string(), now));
    }

    /// Notes a Lease event for `namespace/name`: rollboot's lock (`read` gives it, `None`
    /// once deleted; read only when it is the lock) says which nodes hold a slot since when.
    pub fn lease(
        &self,
        namespace: &str,
        name: &str,
        read: impl FnOnce() -> Option<k8s_openapi::api::coordination::v1::Lease>,
    ) {
        let mut s = self.lock();
        let ours = s
            .capacity
            .as_ref()
            .and_then(|c| c.lock.as_ref())
            .is_some_and(|(ns, n)| n == name && ns == namespace);
        if !ours {
            return;
        }
        s.lock_since = rollboot::lock::LockRecord::from_lease(read())
            .entries
            .into_iter()
            .map(|(n, e)| (n, e.since))
            .collect();
        // A deleted Node's slot freed: it is out no more.
        let freed: Vec<String> = s
            .gone
            .iter()
            .filter(|n| !s.lock_since.contains_key(*n))
            .cloned()
            .collect();
        for n in freed {
            s.gone.remove(&n);
            s.nodes.remove(&n);
        }
    }

    /// Notes that the API server delayed a request by `d` (the chaos fault `slowApi`): what
    /// rollboot could know trails the store by more for a while ([`State::seen_after`]).
    pub fn api_delayed(&self, d: Duration) {
        let now = Instant::now();
        let mut s = self.lock();
        let longest = match s.api_delay {
            Some((at, was)) if now.saturating_duration_since(at) <= SEEN_AFTER + 3 * was => {
                was.max(d)
            }
            _ => d,
        };
        s.api_delay = Some((now, longest));
    }

    /// A snapshot.
    pub fn report(&self) -> InvariantReport {
        self.lock().report.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, rollboot: bool) -> Index {
        let ann = if rollboot {
            json!({"rollboot.dev/cordoned-by": "controller-0"})
        } else {
            json!({})
        };
        Index::of(&json!({"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "annotations": ann},
            "spec": {"unschedulable": rollboot}}))
    }

    #[test]
    fn a_host_down_unannounced_at_the_limit_is_recorded_and_one_with_room_is_not() {
        let inv = Invariants::default();
        inv.watch_capacity(Capacity {
            max_nodes: 1,
            ..Default::default()
        });
        for n in ["a", "b", "c"] {
            inv.node_out(&node(n, false), false);
        }
        inv.host_down_by_itself("a");
        assert!(inv.report().over_capacity_by_shutdown.is_empty(), "room");
        inv.node_out(&node("b", true), false);
        inv.host_down_by_itself("c");
        // rollboot's own node going down is no arrival.
        inv.host_down_by_itself("b");
        let r = inv.report();
        assert_eq!(r.over_capacity_by_shutdown.len(), 1);
        assert_eq!(r.over_capacity_by_shutdown[0].node, "c");
        assert_eq!(r.over_capacity_by_shutdown[0].nodes_out, ["b (rollboot)"]);
        assert_eq!(r.planned_starts_over_capacity, 0);
        assert!(r.clean());
        // A shutdown rollboot could not have seen yet, then a start that fills the slot it
        // left: from rollboot's side, the shutdown arrived at the limit.
        inv.node_out(&node("b", false), false);
        let mut d = node("d", false);
        d.signals.as_mut().unwrap().shutdown_requested = true;
        inv.node_out(&d, false);
        inv.node_out(&node("a", true), false);
        let r = inv.report();
        assert_eq!(r.planned_starts_over_capacity, 0);
        assert_eq!(r.over_capacity_by_shutdown.len(), 2, "{r:?}");
        assert_eq!(r.over_capacity_by_shutdown[1].node, "d");
        assert_eq!(r.over_capacity_by_shutdown[1].nodes_out, ["a (rollboot)"]);
        // The key the report and the campaign read.
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["plannedStartsOverCapacity"], 0);
        assert!(v["overCapacityByShutdown"].is_array());
    }

    #[test]
    fn a_start_is_judged_against_what_rollboot_could_see_then_a_slow_api_seeing_less() {
        // Node "x" has said for 1.5 s that its host shuts down; then rollboot cordons "y" with
        // maxNodes 1.
        let start_with = |delay: Option<Duration>| {
            let inv = Invariants::default();
            inv.watch_capacity(Capacity {
                max_nodes: 1,
                ..Default::default()
            });
            inv.node_out(&node("y", false), false);
            let mut x = node("x", false);
            x.signals.as_mut().unwrap().shutdown_requested = true;
            inv.node_out(&x, false);
            let aged = Instant::now() - Duration::from_millis(1500);
            inv.lock().nodes.get_mut("x").unwrap().shutdown = Some(aged);
            if let Some(d) = delay {
                inv.api_delayed(d);
            }
            inv.node_out(&node("y", true), false);
            inv.report()
        };
        // Seen for longer than a watch event takes: the start went past the limit.
        let r = start_with(None);
        assert_eq!(r.planned_starts_over_capacity, 1, "{r:?}");
        assert_eq!(
            r.planned_starts_over_capacity_instances[0].nodes_out,
            ["x (shutdown)"]
        );
        assert!(!r.clean());
        // With every request delayed 742 ms, 1.5 s is within the start's own two writes: from
        // rollboot's side the shutdown arrived at the limit (recorded, not a break).
        let r = start_with(Some(Duration::from_millis(742)));
        assert_eq!(r.planned_starts_over_capacity, 0, "{r:?}");
        assert_eq!(r.over_capacity_by_shutdown.len(), 1, "{r:?}");
        assert_eq!(r.over_capacity_by_shutdown[0].node, "x");
        assert!(r.clean());
    }

    #[test]
    fn a_node_registered_again_and_cordoned_for_the_cycle_it_held_is_no_start() {
        // maxNodes 1; "x" has said for long that its host shuts down (rollboot drains it);
        // "a" held its slot in the lock since `since`, its Node deleted and registered again,
        // then cordoned by rollboot again.
        let cordon_again_with = |since: chrono::DateTime<Utc>| {
            let inv = Invariants::default();
            inv.watch_capacity(Capacity {
                max_nodes: 1,
                lock: Some(("rollboot-system".into(), "rollboot-lock".into())),
                ..Default::default()
            });
            inv.node_out(&node("a", true), false);
            let mut x = node("x", false);
            x.signals.as_mut().unwrap().shutdown_requested = true;
            inv.node_out(&x, false);
            let aged = Instant::now() - Duration::from_secs(5);
            inv.lock().nodes.get_mut("x").unwrap().shutdown = Some(aged);
            let entry =
                json!({"a": {"state": "draining", "since": since, "leader": "controller-0"}});
            let lease: k8s_openapi::api::coordination::v1::Lease = serde_json::from_value(json!({
                "metadata": {"name": "rollboot-lock", "namespace": "rollboot-system",
                    "annotations": {"rollboot.dev/in-flight": entry.to_string()}},
                "spec": {"holderIdentity": "rollboot"}}))
            .unwrap();
            // Another Lease of that name elsewhere is not the lock.
            inv.lease("kube-system", "rollboot-lock", || {
                panic!("read only when it is the lock")
            });
            inv.lease("rollboot-system", "rollboot-lock", || Some(lease));
            inv.node_out(&node("a", false), true);
            inv.node_out(&node("a", false), false);
            inv.node_out(&node("a", true), false);
            inv.report()
        };
        // Its slot held from before the deletion: the cycle goes on, nothing starts.
        let r = cordon_again_with(Utc::now() - chrono::TimeDelta::seconds(10));
        assert_eq!(r.planned_starts_over_capacity, 0, "{r:?}");
        // A slot taken after the deletion is a start, judged against the shutdown out.
        let r = cordon_again_with(Utc::now() + chrono::TimeDelta::seconds(1));
        assert_eq!(r.planned_starts_over_capacity, 1, "{r:?}");
    }

    #[test]
    fn a_deleted_node_whose_cycle_holds_its_slot_is_out_until_the_lock_lets_it_go() {
        let inv = Invariants::default();
        inv.watch_capacity(Capacity {
            max_nodes: 1,
            lock: Some(("ns".into(), "lock".into())),
            ..Default::default()
        });
        let lock_with = |nodes: &[&str]| {
            let entries: serde_json::Map<String, serde_json::Value> = nodes
                .iter()
                .map(|n| {
                    let e = json!({"state": "draining", "since": Utc::now(), "leader": "c"});
                    (n.to_string(), e)
                })
                .collect();
            let v = json!({"metadata": {"name": "lock", "namespace": "ns",
                "annotations": {"rollboot.dev/in-flight": serde_json::Value::Object(entries).to_string()}}});
            Some(serde_json::from_value(v).unwrap())
        };
        let shutdown = |name: &str| {
            let mut n = node(name, false);
            n.signals.as_mut().unwrap().shutdown_requested = true;
            n
        };
        for n in ["y", "z"] {
            inv.node_out(&node(n, false), false);
        }
        inv.node_out(&node("a", true), false);
        inv.lease("ns", "lock", || lock_with(&["a"]));
        inv.node_out(&node("a", true), true);
        // Its slot still held: a shutdown now arrives at the limit.
        inv.node_out(&shutdown("y"), false);
        let r = inv.report();
        assert_eq!(r.over_capacity_by_shutdown.len(), 1, "{r:?}");
        assert_eq!(r.over_capacity_by_shutdown[0].nodes_out, ["a (rollboot)"]);
        inv.node_out(&node("y", false), false);
        // Registered again, not cordoned yet: its slot is held all the same (seed 654).
        inv.node_out(&node("a", false), false);
        inv.node_out(&shutdown("z"), false);
        let r = inv.report();
        assert_eq!(r.over_capacity_by_shutdown.len(), 2, "{r:?}");
        assert_eq!(r.over_capacity_by_shutdown[1].nodes_out, ["a (rollboot)"]);
        inv.node_out(&node("z", false), false);
        // Freed: out no more; the next shutdown has room.
        inv.lease("ns", "lock", || lock_with(&[]));
        inv.node_out(&shutdown("y"), false);
        assert_eq!(
            inv.report().over_capacity_by_shutdown.len(),
            2,
            "room again"
        );
    }
}
