//! What a workload watch knows, pure: the objects of one kind in one namespace, reduced to what
//! their readers keep, and the budget index that finds the budgets of a pod's labels.
//!
//! Owns the kinds watched ([`WorkloadKind`]) and a watch's key ([`Stream`]), what is kept of an
//! object ([`Obj`]: its name, [`Health`], a budget's selector, `status.disruptedPods`,
//! `status.disruptionsAllowed`, and, for a budget that can never allow a disruption, what says
//! so, [`NeverAllows`]), the events a watch tells its followers ([`FeedEvent`]), the state they
//! build ([`FeedState`]: the last complete list, a relist in progress, the budget index) and
//! what a follower wants of it ([`Wanted`]). Pure: it must never do I/O, spawn, or read a
//! clock; the watches that feed it are [`super::follow`]'s.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::selector::{budget_may_select, selector_problem};

/// The kinds the watches follow: budgets, and the controllers whose replicas the health gate
/// waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    Budget,
    ReplicaSet,
    StatefulSet,
}

impl WorkloadKind {
    /// The kind's name in the API.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Budget => "PodDisruptionBudget",
            WorkloadKind::ReplicaSet => "ReplicaSet",
            WorkloadKind::StatefulSet => "StatefulSet",
        }
    }
}

/// One watch: a kind in a namespace.
pub type Stream = (WorkloadKind, String);

/// What was seen of one watched object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// A budget's `currentHealthy` and `desiredHealthy`.
    Budget { healthy: i32, desired: i32 },
    /// A controller's Ready replicas and wanted replicas.
    Replicas { ready: i32, want: i32 },
}

/// What one follower of a stream waits for: objects by name, and (budgets) whatever selects
/// these labels.
#[derive(Clone, Debug, Default)]
pub struct Wanted {
    /// Objects wanted by name.
    pub names: BTreeSet<String>,
    /// Pods' labels: every budget that may select one of them is wanted.
    pub selecting: Vec<BTreeMap<String, String>>,
}

impl Wanted {
    /// Whether the object `name`, with `selector` (a budget's), is waited for. A budget whose
    /// selector cannot be evaluated is, when budgets are chosen by labels: waiting on a budget
    /// that may not cover the pods costs time, passing one that does could start the next
    /// node while these pods' budget is short.
    pub fn wants(&self, name: &str, selector: Option<&LabelSelector>) -> bool {
        self.names.contains(name)
            || self
                .selecting
                .iter()
                .any(|labels| budget_may_select(selector, labels))
    }
}

/// What a budget that can never allow a disruption is judged from
/// ([`crate::budgets::judge::never_allows_now`]), kept only for such a budget: the drain
/// names it and fails at once (`drain.whenBlocked.never`), and the others cost a pointer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NeverAllows {
    pub(super) generation: Option<i64>,
    pub(super) max_unavailable: Option<IntOrString>,
    pub(super) min_available: Option<IntOrString>,
    pub(super) observed_generation: Option<i64>,
    pub(super) expected_pods: i32,
    pub(super) current_healthy: i32,
    pub(super) desired_healthy: i32,
    pub(super) disruptions_allowed: i32,
}

impl NeverAllows {
    /// Writes these facts into `b` (a budget rebuilt from a watched object).
    pub(super) fn apply(&self, b: &mut PodDisruptionBudget) {
        b.metadata.generation = self.generation;
        let spec = b.spec.get_or_insert_with(Default::default);
        spec.max_unavailable = self.max_unavailable.clone();
        spec.min_available = self.min_available.clone();
        let status = b.status.get_or_insert_with(Default::default);
        status.observed_generation = self.observed_generation;
        status.expected_pods = self.expected_pods;
        status.current_healthy = self.current_healthy;
        status.desired_healthy = self.desired_healthy;
        status.disruptions_allowed = self.disruptions_allowed;
    }
}

/// A budget's `status.disruptedPods`: pod name to when its eviction was admitted.
pub(crate) type Disrupted = BTreeMap<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>;

/// One object of a watched namespace, reduced to what its readers keep.
#[derive(Debug)]
pub(crate) struct Obj {
    pub(crate) name: String,
    pub(crate) health: Health,
    /// A budget's selector.
    pub(crate) selector: Option<LabelSelector>,
    /// A budget's `status.disruptedPods` (the drain names a phantom disruption from it).
    pub(crate) disrupted: Disrupted,
    /// A budget that can never allow a disruption: what says so.
    pub(crate) never: Option<Box<NeverAllows>>,
    /// A budget's `status.disruptionsAllowed` (0 for other kinds): the budget-aware pick's
    /// headroom.
    pub(crate) allowed: i32,
}

/// What a namespace's watch tells those following it, in order.
#[derive(Clone, Debug)]
pub(crate) enum FeedEvent {
    /// A (re)list starts.
    Init,
    /// An object as it is now (listed or changed).
    Apply(Arc<Obj>),
    /// An object was deleted.
    Delete(String),
    /// The list is complete.
    InitDone,
}

impl Obj {
    /// Where the budget index files this object: under one `label=value` its selector
    /// requires, or `None` for a budget any pod may match (no such pair, or a selector that
    /// cannot be evaluated). Objects without a selector are found by name only.
    pub(crate) fn slot(&self) -> Option<Option<(&str, &str)>> {
        let sel = self.selector.as_ref()?;
        if selector_problem(sel).is_some() {
            return Some(None);
        }
        let pair = sel.match_labels.as_ref().and_then(|m| m.iter().next());
        Some(pair.map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

/// The budget index's key of `k=v`.
pub(crate) fn pair_hash(k: &str, v: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (k, v).hash(&mut h);
    h.finish()
}

/// A namespace's objects of one kind as its watch knows them.
#[derive(Default)]
pub(crate) struct FeedState {
    /// The last complete list, kept up to date by the watch's changes.
    pub(crate) objects: BTreeMap<String, Arc<Obj>>,
    /// The budgets of `objects` by (a hash of) one `label=value` their selector requires: a
    /// gate or a drain finds the budgets of its pods without matching every budget of the
    /// namespace (with 12,500 budgets a namespace, that match was a tenth of a 5,000-node
    /// simulation). Hashes and shared objects, not strings: a map of strings per budget was
    /// 9 MiB of the controller at 5,000 nodes. A hash shared by two pairs only adds candidates.
    pub(crate) by_label: HashMap<u64, Vec<Arc<Obj>>>,
    /// The budgets of `objects` any pod may match (see [`Obj::slot`]).
    pub(crate) unindexed: BTreeSet<String>,
    /// Whether a list completed.
    pub(super) listed: bool,
    /// A list in progress: what it brought so far.
    pub(crate) pending: Option<BTreeMap<String, Arc<Obj>>>,
}

impl FeedState {
    /// Applies `ev` (under the lock that also orders its sending).
    pub(crate) fn apply(&mut self, ev: &FeedEvent) {
        match ev {
            FeedEvent::Init => self.pending = Some(BTreeMap::new()),
            FeedEvent::Apply(o) => match self.pending.as_mut() {
                Some(p) => {
                    p.insert(o.name.clone(), o.clone());
                }
                None => {
                    if let Some(old) = self.objects.insert(o.name.clone(), o.clone()) {
                        self.unindex(&old);
                    }
                    self.index(o);
                }
            },
            FeedEvent::Delete(name) => {
                if let Some(old) = self.objects.remove(name) {
                    self.unindex(&old);
                }
                if let Some(p) = self.pending.as_mut() {
                    p.remove(name);
                }
            }
            FeedEvent::InitDone => {
                self.objects = self.pending.take().unwrap_or_default();
                self.by_label.clear();
                self.unindexed.clear();
                for o in self.objects.values().cloned().collect::<Vec<_>>() {
                    self.index(&o);
                }
                self.listed = true;
            }
        }
    }

    fn index(&mut self, o: &Arc<Obj>) {
        match o.slot() {
            Some(Some((k, v))) => {
                self.by_label
                    .entry(pair_hash(k, v))
                    .or_default()
                    .push(o.clone());
            }
            Some(None) => {
                self.unindexed.insert(o.name.clone());
            }
            None => {}
        }
    }

    fn unindex(&mut self, o: &Obj) {
        match o.slot() {
            Some(Some((k, v))) => {
                let key = pair_hash(k, v);
                if let Some(objs) = self.by_label.get_mut(&key) {
                    objs.retain(|x| x.name != o.name);
                    if objs.is_empty() {
                        self.by_label.remove(&key);
                    }
                }
            }
            Some(None) => {
                self.unindexed.remove(&o.name);
            }
            None => {}
        }
    }

    /// The objects of the last complete list `wanted` keeps, in name order: its names, and the
    /// budgets the index gives for its pods' labels, each matched.
    pub(crate) fn kept(&self, wanted: &Wanted) -> Vec<&Arc<Obj>> {
        let mut names: BTreeSet<&str> = wanted.names.iter().map(String::as_str).collect();
        for labels in &wanted.selecting {
            for (k, v) in labels {
                if let Some(objs) = self.by_label.get(&pair_hash(k, v)) {
                    names.extend(objs.iter().map(|o| o.name.as_str()));
                }
            }
        }
        if !wanted.selecting.is_empty() {
            names.extend(self.unindexed.iter().map(String::as_str));
        }
        names
            .into_iter()
            .filter_map(|n| self.objects.get(n))
            .filter(|o| wanted.wants(&o.name, o.selector.as_ref()))
            .collect()
    }

    /// What a gate that starts following now must be told first to know what the watch knows,
    /// only the objects `wanted` keeps: the last complete list, then the list in progress.
    pub(crate) fn replay(&self, wanted: &Wanted) -> Vec<FeedEvent> {
        let kept = |m: &BTreeMap<String, Arc<Obj>>| -> Vec<FeedEvent> {
            m.values()
                .filter(|o| wanted.wants(&o.name, o.selector.as_ref()))
                .map(|o| FeedEvent::Apply(o.clone()))
                .collect()
        };
        let mut out = Vec::new();
        if self.listed {
            out.push(FeedEvent::Init);
            let objects = self.kept(wanted).into_iter();
            out.extend(objects.map(|o| FeedEvent::Apply(o.clone())));
            out.push(FeedEvent::InitDone);
        }
        if let Some(p) = &self.pending {
            out.push(FeedEvent::Init);
            out.extend(kept(p));
        }
        out
    }
}
