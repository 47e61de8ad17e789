//! The health gates' shared watches: one per namespace and kind (budgets, ReplicaSets,
//! StatefulSets), shared by every gate that needs it and kept a while after.
//!
//! Owns the [`Hub`] of watches, what each keeps of an object (its name, health, selector and,
//! for a budget, `status.disruptedPods`; its initial list paged), the budget index that finds
//! the budgets of a pod's labels without matching every budget of the namespace, and the
//! budgets it gives the drain ([`crate::drain::BudgetSource`]). A rollout lists each namespace
//! once rather than once per node. It only reads: it must never write, nor decide whether a
//! gate passes (that is [`super::record::GateState`]'s).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde::Deserialize;

use super::record::{GateKind, Health, Stream, Wanted};
use crate::client::Slim;
use crate::controller::task::Task;
use crate::selector::selector_problem;

/// `spec.replicas` of a ReplicaSet or StatefulSet.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct Scale {
    replicas: Option<i32>,
}

/// `status.readyReplicas` of a ReplicaSet or StatefulSet.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Ready {
    ready_replicas: Option<i32>,
}

/// `spec.selector` of a budget, and its limits (whether it can ever allow a disruption).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BudgetSpec {
    selector: Option<LabelSelector>,
    max_unavailable: Option<IntOrString>,
    min_available: Option<IntOrString>,
}

/// What the gate reads of a budget's `status`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BudgetStatus {
    #[serde(default)]
    current_healthy: i32,
    #[serde(default)]
    desired_healthy: i32,
    disrupted_pods: Option<Disrupted>,
    #[serde(default)]
    expected_pods: i32,
    #[serde(default)]
    disruptions_allowed: i32,
    observed_generation: Option<i64>,
}

/// What a budget that can never allow a disruption is judged from
/// ([`crate::drain::blockers::never_allows_now`]), kept only for such a budget: the drain
/// names it and fails at once (`drain.whenBlocked.never`), and the others cost a pointer.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct NeverAllows {
    generation: Option<i64>,
    max_unavailable: Option<IntOrString>,
    min_available: Option<IntOrString>,
    observed_generation: Option<i64>,
    expected_pods: i32,
    current_healthy: i32,
    desired_healthy: i32,
    disruptions_allowed: i32,
}

impl NeverAllows {
    /// Writes these facts into `b` (a budget rebuilt from a watched object).
    fn apply(&self, b: &mut PodDisruptionBudget) {
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

/// A watched budget's [`NeverAllows`], if it can never allow a disruption.
pub(super) fn budget_never(p: &SlimBudget) -> Option<Box<NeverAllows>> {
    let spec = p.spec.as_ref()?;
    let st = p.status.clone().unwrap_or_default();
    let facts = NeverAllows {
        generation: p.metadata.generation,
        max_unavailable: spec.max_unavailable.clone(),
        min_available: spec.min_available.clone(),
        observed_generation: st.observed_generation,
        expected_pods: st.expected_pods,
        current_healthy: st.current_healthy,
        desired_healthy: st.desired_healthy,
        disruptions_allowed: st.disruptions_allowed,
    };
    let mut b = PodDisruptionBudget::default();
    facts.apply(&mut b);
    // A disruption under way explains an allowance of 0: judged with it, as the drain does.
    if let Some(status) = b.status.as_mut() {
        status.disrupted_pods = st.disrupted_pods.clone();
    }
    crate::drain::blockers::never_allows_now(&b).map(|_| Box::new(facts))
}

fn never_budget<K>(_: &K) -> Option<Box<NeverAllows>> {
    None
}

pub(super) type SlimBudget = Slim<PodDisruptionBudget, BudgetSpec, BudgetStatus>;
pub(super) type SlimReplicas<K> = Slim<K, Scale, Ready>;

pub(super) fn budget_health(p: &SlimBudget) -> Health {
    let s = p.status.clone().unwrap_or_default();
    Health::Budget {
        healthy: s.current_healthy,
        desired: s.desired_healthy,
    }
}

/// `spec.replicas` defaults to 1, as in the API.
pub(super) fn replicas<K>(o: &SlimReplicas<K>) -> Health {
    Health::Replicas {
        ready: o
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
        want: o.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
    }
}

/// How long a namespace's watch is kept after the last gate using it ended: the next node's
/// gate starts after that node's cordon and drain, and a watch kept across them spares a
/// relist of the whole namespace per node (with 25,000 ReplicaSets in a namespace, those
/// relists were most of the controller's time per node in a 5,000-node cluster).
pub const FEED_LINGER: Duration = Duration::from_secs(600);

/// One object of a watched namespace, reduced to what gates read.
#[derive(Debug)]
pub(super) struct Obj {
    pub(super) name: String,
    pub(super) health: Health,
    /// A budget's selector.
    pub(super) selector: Option<LabelSelector>,
    /// A budget's `status.disruptedPods` (the drain names a phantom disruption from it).
    pub(super) disrupted: BTreeMap<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// A budget that can never allow a disruption: what says so.
    pub(super) never: Option<Box<NeverAllows>>,
    /// A budget's `status.disruptionsAllowed` (0 for other kinds): the budget-aware pick's
    /// room.
    pub(super) allowed: i32,
}

/// What a namespace's watch tells the gates following it, in order.
#[derive(Clone, Debug)]
pub(super) enum FeedEvent {
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
    pub(super) fn slot(&self) -> Option<Option<(&str, &str)>> {
        let sel = self.selector.as_ref()?;
        if selector_problem(sel).is_some() {
            return Some(None);
        }
        let pair = sel.match_labels.as_ref().and_then(|m| m.iter().next());
        Some(pair.map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

/// The budget index's key of `k=v`.
pub(super) fn pair_hash(k: &str, v: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (k, v).hash(&mut h);
    h.finish()
}

/// A namespace's objects of one kind as its watch knows them.
#[derive(Default)]
pub(super) struct FeedState {
    /// The last complete list, kept up to date by the watch's changes.
    pub(super) objects: BTreeMap<String, Arc<Obj>>,
    /// The budgets of `objects` by (a hash of) one `label=value` their selector requires: a
    /// gate or a drain finds the budgets of its pods without matching every budget of the
    /// namespace (with 12,500 budgets a namespace, that match was a tenth of a 5,000-node
    /// simulation). Hashes and shared objects, not strings: a map of strings per budget was
    /// 9 MiB of the controller at 5,000 nodes. A hash shared by two pairs only adds candidates.
    pub(super) by_label: HashMap<u64, Vec<Arc<Obj>>>,
    /// The budgets of `objects` any pod may match (see [`Obj::slot`]).
    pub(super) unindexed: BTreeSet<String>,
    /// Whether a list completed.
    listed: bool,
    /// A list in progress: what it brought so far.
    pub(super) pending: Option<BTreeMap<String, Arc<Obj>>>,
}

impl FeedState {
    /// Applies `ev` (under the lock that also orders its sending).
    pub(super) fn apply(&mut self, ev: &FeedEvent) {
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
    pub(super) fn kept(&self, wanted: &Wanted) -> Vec<&Arc<Obj>> {
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
    pub(super) fn replay(&self, wanted: &Wanted) -> Vec<FeedEvent> {
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

/// A namespace's watch of one kind, shared by the gates that need it.
pub(super) struct FeedShared {
    pub(super) state: std::sync::Mutex<FeedState>,
    pub(super) tx: tokio::sync::broadcast::Sender<FeedEvent>,
    /// `FeedState::listed` as of the last event, for those who wait for the first list.
    listed: tokio::sync::watch::Sender<bool>,
}

impl FeedShared {
    /// Nothing listed yet.
    pub(super) fn new() -> FeedShared {
        FeedShared {
            state: Default::default(),
            tx: tokio::sync::broadcast::channel(4096).0,
            listed: tokio::sync::watch::channel(false).0,
        }
    }

    /// Waits until a list completed, at most `wait`; `false` when none did.
    ///
    /// Woken by the list's end rather than polled: a pass that meets a namespace for the
    /// first time (every pass of a new leader) waited up to a poll period more than the list
    /// took (50 ms polls made a 1,000-node leader's first start 120 ms late).
    pub(super) async fn first_list(&self, wait: Duration) -> bool {
        let mut listed = self.listed.subscribe();
        let done = tokio::time::timeout(wait, listed.wait_for(|l| *l)).await;
        matches!(done, Ok(Ok(_)))
    }

    pub(super) fn publish(&self, ev: FeedEvent) {
        let mut st = self.state.lock().expect("gate feed");
        st.apply(&ev);
        // Mirrors the state (which says what completes a list): waiters woken on a change only.
        self.listed
            .send_if_modified(|l| std::mem::replace(l, st.listed) != st.listed);
        // Sent under the lock: a gate that subscribes under it gets every later event.
        let _ = self.tx.send(ev);
    }
}

/// A running namespace watch; dropping the last handle stops it.
pub(super) struct Feed {
    pub(super) shared: Arc<FeedShared>,
    _task: Task,
}

/// The health gates' watches: one per namespace and kind, shared by every gate that needs it,
/// and kept [`FEED_LINGER`] after the last one let go of it, so consecutive nodes' gates do not
/// each list the namespace again (kube-apiserver's shared-informer pattern). It only reads.
pub struct Hub {
    client: Client,
    feeds: std::sync::Mutex<BTreeMap<Stream, (Arc<Feed>, std::time::Instant)>>,
    /// Woken on each change of a watched budget while the budget-aware pick passes nodes
    /// over: a budget that gets room again is the only change that lets such a node start,
    /// and it changes no Node.
    budget_wake: BudgetWake,
}

/// What a budget's change wakes, when anything.
type BudgetWake = Arc<std::sync::Mutex<Option<Arc<tokio::sync::Notify>>>>;

impl Hub {
    /// No watch running yet.
    pub fn new(client: Client) -> Hub {
        Hub {
            client,
            feeds: Default::default(),
            budget_wake: Default::default(),
        }
    }

    /// The feed of `stream`, started when none runs.
    pub(super) fn feed(&self, stream: &Stream) -> Arc<Feed> {
        let mut feeds = self.feeds.lock().expect("gate feeds");
        let now = std::time::Instant::now();
        if let Some((f, used)) = feeds.get_mut(stream) {
            *used = now;
            return f.clone();
        }
        let shared = Arc::new(FeedShared::new());
        let (client, s, sh) = (self.client.clone(), stream.clone(), shared.clone());
        let wake = self.budget_wake.clone();
        let task = Task(tokio::spawn(async move {
            let (kind, ns) = s.clone();
            match kind {
                GateKind::Budget => {
                    let keep = Keep {
                        health: budget_health,
                        selector: budget_selector,
                        disrupted: budget_disrupted,
                        never: budget_never,
                        allowed: |p| p.status.as_ref().map_or(0, |s| s.disruptions_allowed),
                    };
                    follow(client, s, sh, keep, Some(wake)).await
                }
                GateKind::ReplicaSet => {
                    follow(client, s, sh, keep_scale::<ReplicaSet>(), None).await
                }
                GateKind::StatefulSet => {
                    follow(client, s, sh, keep_scale::<StatefulSet>(), None).await
                }
            }
            tracing::debug!(namespace = %ns, kind = kind.name(), "health gate watch ended");
        }));
        let feed = Arc::new(Feed {
            shared,
            _task: task,
        });
        feeds.insert(stream.clone(), (feed.clone(), now));
        feed
    }

    /// Stops the watches no gate has used for [`FEED_LINGER`].
    pub fn sweep(&self) {
        let now = std::time::Instant::now();
        let mut feeds = self.feeds.lock().expect("gate feeds");
        for (f, used) in feeds.values_mut() {
            if Arc::strong_count(f) > 1 {
                *used = now;
            }
        }
        feeds.retain(|_, (_, used)| now.duration_since(*used) < FEED_LINGER);
    }

    /// The budgets of `namespace` that may select a pod with one of `pods`' labels, reduced to
    /// name, selector and `status.disruptedPods`, from the shared watch (started when none
    /// runs): the drain names them in the Events of refused evictions. A list of the
    /// namespace's budgets per refusing drain was a third of the controller's time per node
    /// in a 5,000-node cluster. `None` when the watch has not listed within `wait`.
    pub async fn budgets(
        &self,
        namespace: &str,
        pods: &[BTreeMap<String, String>],
        wait: Duration,
    ) -> Option<Vec<PodDisruptionBudget>> {
        use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
        self.when_listed(namespace, wait, |st| {
            let wanted = Wanted {
                names: BTreeSet::new(),
                selecting: pods.to_vec(),
            };
            st.kept(&wanted)
                .into_iter()
                .map(|o| {
                    let mut b = PodDisruptionBudget {
                        metadata: kube::api::ObjectMeta {
                            name: Some(o.name.clone()),
                            namespace: Some(namespace.to_string()),
                            ..Default::default()
                        },
                        spec: Some(PodDisruptionBudgetSpec {
                            selector: o.selector.clone(),
                            ..Default::default()
                        }),
                        status: (!o.disrupted.is_empty()).then(|| PodDisruptionBudgetStatus {
                            disrupted_pods: Some(o.disrupted.clone()),
                            ..Default::default()
                        }),
                    };
                    if let Some(never) = &o.never {
                        never.apply(&mut b);
                    }
                    b
                })
                .collect()
        })
        .await
    }

    /// `read` of the budgets of `namespace` as the shared watch (started when none runs) knows
    /// them, once it has listed; `None` when it has not within `wait`.
    async fn when_listed<T>(
        &self,
        namespace: &str,
        wait: Duration,
        read: impl Fn(&FeedState) -> T,
    ) -> Option<T> {
        let feed = self.feed(&(GateKind::Budget, namespace.to_string()));
        if !feed.shared.first_list(wait).await {
            return None;
        }
        let st = feed.shared.state.lock().expect("gate feed");
        Some(read(&st))
    }

    /// For each of `pods` (name, labels) of `namespace`, the budgets that select it (by name,
    /// a budget whose selector cannot be evaluated counted as selecting it), from the shared
    /// watch (started when none runs); `None` when the watch has not listed within `wait`.
    pub async fn budgets_of_pods(
        &self,
        namespace: &str,
        pods: &[&BTreeMap<String, String>],
        wait: Duration,
    ) -> Option<Vec<Vec<String>>> {
        self.when_listed(namespace, wait, |st| {
            pods.iter()
                .map(|labels| {
                    let wanted = Wanted {
                        names: BTreeSet::new(),
                        selecting: vec![(*labels).clone()],
                    };
                    st.kept(&wanted).iter().map(|o| o.name.clone()).collect()
                })
                .collect()
        })
        .await
    }

    /// The budget `namespace/name` as its watch knows it now (without starting a watch):
    /// `status.disruptionsAllowed` and `status.disruptedPods`.
    pub fn budget_now(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<crate::controller::room::BudgetNow> {
        let feeds = self.feeds.lock().expect("gate feeds");
        let (feed, _) = feeds.get(&(GateKind::Budget, namespace.to_string()))?;
        let st = feed.shared.state.lock().expect("gate feed");
        let o = st.objects.get(name)?;
        Some(crate::controller::room::BudgetNow {
            allowed: o.allowed,
            disrupted: o.disrupted.keys().cloned().collect(),
        })
    }

    /// Resolves when budget `namespace/name` allows a disruption in a change its watch sees
    /// after this call (a relist included); never when the namespace's budgets are not
    /// watched. Only a change counts, not the state now: a drain just refused by the server
    /// while this watch still shows the budget's room from before must not ask again at once.
    pub async fn room(&self, namespace: &str, name: &str) {
        let feed = {
            let feeds = self.feeds.lock().expect("gate feeds");
            feeds
                .get(&(GateKind::Budget, namespace.to_string()))
                .map(|(f, _)| f.clone())
        };
        let Some(feed) = feed else {
            return std::future::pending().await;
        };
        let mut rx = feed.shared.tx.subscribe();
        let has_room = || {
            let st = feed.shared.state.lock().expect("gate feed");
            st.objects.get(name).is_some_and(|o| o.allowed > 0)
        };
        loop {
            match rx.recv().await {
                Ok(FeedEvent::Apply(o)) if o.name == name && o.allowed > 0 => return,
                Ok(FeedEvent::InitDone) if has_room() => return,
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) if has_room() => return,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    return std::future::pending().await
                }
            }
        }
    }

    /// Wakes `wake` on every later change of a watched budget (`None`: no longer).
    pub fn wake_on_budget_change(&self, wake: Option<Arc<tokio::sync::Notify>>) {
        *self.budget_wake.lock().expect("budget wake") = wake;
    }

    /// Stops every watch (gates still following one keep it until they end).
    pub fn stop_all(&self) {
        self.feeds.lock().expect("gate feeds").clear();
    }

    /// The namespaces and kinds watched now.
    pub fn watching(&self) -> Vec<Stream> {
        self.feeds
            .lock()
            .expect("gate feeds")
            .keys()
            .cloned()
            .collect()
    }
}

/// The drain names the budgets that refuse its evictions from the same watches.
impl crate::drain::BudgetSource for Hub {
    fn budgets<'a>(
        &'a self,
        namespace: &'a str,
        pods: &'a [BTreeMap<String, String>],
        wait: Duration,
    ) -> futures::future::BoxFuture<'a, Option<Vec<PodDisruptionBudget>>> {
        Box::pin(Hub::budgets(self, namespace, pods, wait))
    }

    fn room<'a>(&'a self, namespace: &'a str, name: &'a str) -> futures::future::BoxFuture<'a, ()> {
        Box::pin(Hub::room(self, namespace, name))
    }
}

pub(super) fn budget_selector(p: &SlimBudget) -> Option<&LabelSelector> {
    p.spec.as_ref().and_then(|s| s.selector.as_ref())
}

fn no_selector<K>(_: &K) -> Option<&LabelSelector> {
    None
}

type Disrupted = BTreeMap<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>;

pub(super) fn budget_disrupted(p: &SlimBudget) -> Disrupted {
    p.status
        .as_ref()
        .and_then(|s| s.disrupted_pods.clone())
        .unwrap_or_default()
}

fn nothing_disrupted<K>(_: &K) -> Disrupted {
    Disrupted::new()
}

/// What a watch keeps of each object of kind `K`, read by these functions.
struct Keep<K> {
    health: fn(&K) -> Health,
    selector: fn(&K) -> Option<&LabelSelector>,
    disrupted: fn(&K) -> Disrupted,
    never: fn(&K) -> Option<Box<NeverAllows>>,
    allowed: fn(&K) -> i32,
}

/// What a watch keeps of a ReplicaSet or StatefulSet: its replicas' health, nothing else.
fn keep_scale<K>() -> Keep<SlimReplicas<K>> {
    Keep {
        health: replicas::<K>,
        selector: no_selector,
        disrupted: nothing_disrupted,
        never: never_budget,
        allowed: |_| 0,
    }
}

/// Watches one kind in one namespace for every gate following `feed`, keeping of each object
/// only its name, health and selector.
async fn follow<K>(
    client: Client,
    stream: Stream,
    feed: Arc<FeedShared>,
    keep: Keep<K>,
    wake: Option<BudgetWake>,
) where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client, &stream.1);
    let events = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(events);
    let obj = |o: &K| {
        Arc::new(Obj {
            name: o.name_any(),
            health: (keep.health)(o),
            selector: (keep.selector)(o).cloned(),
            disrupted: (keep.disrupted)(o),
            never: (keep.never)(o),
            allowed: (keep.allowed)(o),
        })
    };
    while let Some(ev) = events.next().await {
        let ev = match ev {
            Ok(watcher::Event::Init) => FeedEvent::Init,
            Ok(watcher::Event::InitDone) => FeedEvent::InitDone,
            Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => {
                FeedEvent::Apply(obj(&o))
            }
            Ok(watcher::Event::Delete(o)) => FeedEvent::Delete(o.name_any()),
            Err(e) => {
                tracing::warn!(namespace = %stream.1, kind = stream.0.name(), error = %e, "health gate watch");
                continue;
            }
        };
        let changed = matches!(ev, FeedEvent::Apply(_) | FeedEvent::Delete(_));
        feed.publish(ev);
        if let Some(w) = wake.as_ref().filter(|_| changed) {
            if let Some(n) = w.lock().expect("budget wake").as_ref() {
                n.notify_one();
            }
        }
    }
}
