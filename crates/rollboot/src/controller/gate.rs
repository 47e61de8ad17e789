//! The health gate: after a node's reboot, the next node may start only when the budgets that
//! covered its evicted pods are healthy again and the controllers of those pods have their
//! replicas Ready.
//!
//! It owns the [`GateRecord`] written to the Node with `state: rebooting`, the pure
//! [`GateState`] that decides from what has been seen, and [`Gate`], which feeds that state from
//! the [`Hub`]'s watches: one per namespace and kind, shared by every gate that needs it and kept
//! a while after, so a rollout lists each namespace once rather than once per node. A watch
//! keeps of each object only its name, health and selector (its initial list paged), and a gate
//! is woken only by changes to what it waits for. It never writes: finishing or failing the
//! node is the caller's.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::client::Slim;

/// What the health gate must see healthy again, written with `state: rebooting`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GateRecord {
    /// Budgets `namespace/name` to wait for by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<String>,
    /// The evicted pods' labels, per namespace: every budget selecting one of them is waited
    /// for. The drain hands these over rather than budget names, so it need not list budgets
    /// (two lists of a namespace's budgets per node were a fifth of a drain's time).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<(String, BTreeMap<String, String>)>,
    /// Controllers of the evicted pods: (kind, namespace, name).
    pub owners: Vec<(String, String, String)>,
    /// Not read by the gate: the drain's measured pod exit time (milliseconds, see
    /// [`crate::drain::Drained::pod_exit_seconds`]), carried in this record, which lives from
    /// the drain's end to `done`, into the node's [`crate::node::LastCycle`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_exit_ms: Option<u64>,
}

/// The kinds the gate reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GateKind {
    Budget,
    ReplicaSet,
    StatefulSet,
}

impl GateKind {
    fn name(self) -> &'static str {
        match self {
            GateKind::Budget => "PodDisruptionBudget",
            GateKind::ReplicaSet => "ReplicaSet",
            GateKind::StatefulSet => "StatefulSet",
        }
    }
}

/// One watch: a kind in a namespace.
pub type Stream = (GateKind, String);

/// What was seen of one object waited on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// A budget's `currentHealthy` and `desiredHealthy`.
    Budget { healthy: i32, desired: i32 },
    /// A controller's Ready replicas and wanted replicas.
    Replicas { ready: i32, want: i32 },
}

/// What a watch reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// The watch (re)starts its list: what it said before no longer counts.
    Listing(Stream),
    /// An object waited on, as it is now.
    Seen(Stream, String, Health),
    /// An object waited on was deleted.
    Gone(Stream, String),
    /// The list is complete: an object waited on and not seen does not exist.
    Listed(Stream),
    /// A budget whose selector cannot be evaluated, waited on as if it selected the evicted
    /// pods: its name and why.
    Unreadable(Stream, String, String),
}

/// What one stream waits for: objects by name, and (budgets) whatever selects these labels.
#[derive(Clone, Debug, Default)]
pub struct Wanted {
    names: BTreeSet<String>,
    selecting: Vec<BTreeMap<String, String>>,
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
                .any(|labels| crate::selector::budget_may_select(selector, labels))
    }
}

/// The gate's knowledge, fed by [`Update`]s; decides without I/O.
#[derive(Clone, Debug, Default)]
pub struct GateState {
    wanted: BTreeMap<Stream, Wanted>,
    seen: BTreeMap<(Stream, String), Health>,
    listed: BTreeSet<Stream>,
    /// Warnings not yet said, (budget, note): one per budget with an unreadable selector.
    notes: Vec<(String, String)>,
    /// The budgets already warned about.
    unreadable: BTreeSet<(Stream, String)>,
}

impl GateState {
    /// The objects of `record`; controllers other than ReplicaSets and StatefulSets (a
    /// DaemonSet, a Job) have nothing to wait for and are left out.
    pub fn new(record: &GateRecord) -> GateState {
        let mut wanted: BTreeMap<Stream, Wanted> = BTreeMap::new();
        for b in &record.budgets {
            if let Some((ns, name)) = b.split_once('/') {
                wanted
                    .entry((GateKind::Budget, ns.into()))
                    .or_default()
                    .names
                    .insert(name.into());
            }
        }
        for (ns, labels) in &record.pods {
            wanted
                .entry((GateKind::Budget, ns.clone()))
                .or_default()
                .selecting
                .push(labels.clone());
        }
        for (kind, ns, name) in &record.owners {
            let kind = match kind.as_str() {
                "ReplicaSet" => GateKind::ReplicaSet,
                "StatefulSet" => GateKind::StatefulSet,
                _ => continue,
            };
            wanted
                .entry((kind, ns.clone()))
                .or_default()
                .names
                .insert(name.clone());
        }
        GateState {
            wanted,
            ..GateState::default()
        }
    }

    /// The watches needed.
    pub fn streams(&self) -> Vec<Stream> {
        self.wanted.keys().cloned().collect()
    }

    /// Whether `name` may be waited on in `stream`: by name, or, in a stream that selects by
    /// labels, as chosen by its watch (which has the object's selector). Everything else is
    /// dropped unread.
    pub fn wants(&self, stream: &Stream, name: &str) -> bool {
        self.wanted
            .get(stream)
            .is_some_and(|w| w.names.contains(name) || !w.selecting.is_empty())
    }

    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Listing(s) => {
                self.listed.remove(&s);
                self.seen.retain(|(st, _), _| *st != s);
            }
            Update::Seen(s, name, h) => {
                if self.wants(&s, &name) {
                    self.seen.insert((s, name), h);
                }
            }
            Update::Gone(s, name) => {
                self.seen.remove(&(s, name));
            }
            Update::Listed(s) => {
                self.listed.insert(s);
            }
            Update::Unreadable(s, name, why) => {
                let note = format!(
                    "{} {}/{name}: its selector cannot be evaluated ({why}); the health gate \
                     waits for it as if it covered the evicted pods",
                    s.0.name(),
                    s.1
                );
                let budget = format!("{}/{name}", s.1);
                if self.unreadable.insert((s, name)) {
                    self.notes.push((budget, note));
                }
            }
        }
    }

    /// The warnings gathered since the last call, as (budget `namespace/name`, note).
    pub fn take_notes(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.notes)
    }

    /// `None` when the gate passes, else the first thing it waits for. An object that does not
    /// exist (a budget or ReplicaSet deleted meanwhile) has nothing left to wait for.
    pub fn verdict(&self) -> Option<String> {
        if let Some((kind, ns)) = self.wanted.keys().find(|s| !self.listed.contains(*s)) {
            return Some(format!("listing the {}s of namespace {ns}", kind.name()));
        }
        self.seen
            .iter()
            .find_map(|(((kind, ns), name), h)| match *h {
                Health::Budget { healthy, desired } if healthy < desired => Some(format!(
                    "{} {ns}/{name} has {healthy} healthy of {desired} desired",
                    kind.name()
                )),
                Health::Replicas { ready, want } if ready < want => Some(format!(
                    "{} {ns}/{name} has {ready} of {want} replicas Ready",
                    kind.name()
                )),
                _ => None,
            })
    }
}

/// `spec.replicas` of a ReplicaSet or StatefulSet.
#[derive(Clone, Debug, Deserialize)]
struct Scale {
    replicas: Option<i32>,
}

/// `status.readyReplicas` of a ReplicaSet or StatefulSet.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ready {
    ready_replicas: Option<i32>,
}

/// `spec.selector` of a budget.
#[derive(Clone, Debug, Deserialize)]
struct BudgetSpec {
    selector: Option<LabelSelector>,
}

/// What the gate reads of a budget's `status`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BudgetStatus {
    #[serde(default)]
    current_healthy: i32,
    #[serde(default)]
    desired_healthy: i32,
    disrupted_pods: Option<Disrupted>,
}

type SlimBudget = Slim<PodDisruptionBudget, BudgetSpec, BudgetStatus>;
type SlimReplicas<K> = Slim<K, Scale, Ready>;

fn budget_health(p: &SlimBudget) -> Health {
    let s = p.status.clone().unwrap_or_default();
    Health::Budget {
        healthy: s.current_healthy,
        desired: s.desired_healthy,
    }
}

/// `spec.replicas` defaults to 1, as in the API.
fn replicas<K>(o: &SlimReplicas<K>) -> Health {
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
struct Obj {
    name: String,
    health: Health,
    /// A budget's selector.
    selector: Option<LabelSelector>,
    /// A budget's `status.disruptedPods` (the drain names a phantom disruption from it).
    disrupted: BTreeMap<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// What a namespace's watch tells the gates following it, in order.
#[derive(Clone, Debug)]
enum FeedEvent {
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
    fn slot(&self) -> Option<Option<(&str, &str)>> {
        let sel = self.selector.as_ref()?;
        if crate::selector::selector_problem(sel).is_some() {
            return Some(None);
        }
        let pair = sel.match_labels.as_ref().and_then(|m| m.iter().next());
        Some(pair.map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

/// The budget index's key of `k=v`.
fn pair_hash(k: &str, v: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (k, v).hash(&mut h);
    h.finish()
}

/// A namespace's objects of one kind as its watch knows them.
#[derive(Default)]
struct FeedState {
    /// The last complete list, kept up to date by the watch's changes.
    objects: BTreeMap<String, Arc<Obj>>,
    /// The budgets of `objects` by (a hash of) one `label=value` their selector requires: a
    /// gate or a drain finds the budgets of its pods without matching every budget of the
    /// namespace (with 12,500 budgets a namespace, that match was a tenth of a 5,000-node
    /// simulation). Hashes and shared objects, not strings: a map of strings per budget was
    /// 9 MiB of the controller at 5,000 nodes. A hash shared by two pairs only adds candidates.
    by_label: HashMap<u64, Vec<Arc<Obj>>>,
    /// The budgets of `objects` any pod may match (see [`Obj::slot`]).
    unindexed: BTreeSet<String>,
    /// Whether a list completed.
    listed: bool,
    /// A list in progress: what it brought so far.
    pending: Option<BTreeMap<String, Arc<Obj>>>,
}

impl FeedState {
    /// Applies `ev` (under the lock that also orders its sending).
    fn apply(&mut self, ev: &FeedEvent) {
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
    fn kept(&self, wanted: &Wanted) -> Vec<&Arc<Obj>> {
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
    fn replay(&self, wanted: &Wanted) -> Vec<FeedEvent> {
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
struct FeedShared {
    state: std::sync::Mutex<FeedState>,
    tx: tokio::sync::broadcast::Sender<FeedEvent>,
}

impl FeedShared {
    fn publish(&self, ev: FeedEvent) {
        let mut st = self.state.lock().expect("gate feed");
        st.apply(&ev);
        // Sent under the lock: a gate that subscribes under it gets every later event.
        let _ = self.tx.send(ev);
    }
}

/// A running namespace watch; dropping the last handle stops it.
struct Feed {
    shared: Arc<FeedShared>,
    _task: super::Task,
}

/// The health gates' watches: one per namespace and kind, shared by every gate that needs it,
/// and kept [`FEED_LINGER`] after the last one let go of it, so consecutive nodes' gates do not
/// each list the namespace again (kube-apiserver's shared-informer pattern). It only reads.
pub struct Hub {
    client: Client,
    feeds: std::sync::Mutex<BTreeMap<Stream, (Arc<Feed>, std::time::Instant)>>,
}

impl Hub {
    /// No watch running yet.
    pub fn new(client: Client) -> Hub {
        Hub {
            client,
            feeds: Default::default(),
        }
    }

    /// The feed of `stream`, started when none runs.
    fn feed(&self, stream: &Stream) -> Arc<Feed> {
        let mut feeds = self.feeds.lock().expect("gate feeds");
        let now = std::time::Instant::now();
        if let Some((f, used)) = feeds.get_mut(stream) {
            *used = now;
            return f.clone();
        }
        let shared = Arc::new(FeedShared {
            state: Default::default(),
            tx: tokio::sync::broadcast::channel(4096).0,
        });
        let (client, s, sh) = (self.client.clone(), stream.clone(), shared.clone());
        let task = super::Task(tokio::spawn(async move {
            let (kind, ns) = s.clone();
            match kind {
                GateKind::Budget => {
                    follow(
                        client,
                        s,
                        sh,
                        budget_health,
                        budget_selector,
                        budget_disrupted,
                    )
                    .await
                }
                GateKind::ReplicaSet => {
                    let health = replicas::<ReplicaSet>;
                    follow(client, s, sh, health, no_selector, nothing_disrupted).await
                }
                GateKind::StatefulSet => {
                    let health = replicas::<StatefulSet>;
                    follow(client, s, sh, health, no_selector, nothing_disrupted).await
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
        let feed = self.feed(&(GateKind::Budget, namespace.to_string()));
        let until = tokio::time::Instant::now() + wait;
        loop {
            {
                let st = feed.shared.state.lock().expect("gate feed");
                if st.listed {
                    let wanted = Wanted {
                        names: BTreeSet::new(),
                        selecting: pods.to_vec(),
                    };
                    return Some(
                        st.kept(&wanted)
                            .into_iter()
                            .map(|o| PodDisruptionBudget {
                                metadata: kube::api::ObjectMeta {
                                    name: Some(o.name.clone()),
                                    namespace: Some(namespace.to_string()),
                                    ..Default::default()
                                },
                                spec: Some(PodDisruptionBudgetSpec {
                                    selector: o.selector.clone(),
                                    ..Default::default()
                                }),
                                status: (!o.disrupted.is_empty()).then(|| {
                                    PodDisruptionBudgetStatus {
                                        disrupted_pods: Some(o.disrupted.clone()),
                                        ..Default::default()
                                    }
                                }),
                            })
                            .collect(),
                    );
                }
            }
            if tokio::time::Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
}

/// A gate following its namespaces' watches. The controller starts it as soon as the reboot is
/// asked, so the watches' initial lists are done while the node reboots instead of after it is
/// back: those lists were most of the time between a node's return and the next node's start.
pub struct Gate {
    record: GateRecord,
    state: GateState,
    rx: mpsc::UnboundedReceiver<Update>,
    _watches: Vec<super::Task>,
}

impl Gate {
    /// Follows the watch of every stream of `record` (started by `hub` when none runs); they
    /// feed this gate until it is dropped.
    pub fn start(hub: &Hub, record: &GateRecord) -> Gate {
        hub.sweep();
        let state = GateState::new(record);
        let (tx, rx) = mpsc::unbounded_channel();
        let watches = state
            .streams()
            .into_iter()
            .map(|s| {
                let wanted = state.wanted[&s].clone();
                let feed = hub.feed(&s);
                super::Task(tokio::spawn(forward(feed, s, wanted, tx.clone())))
            })
            .collect();
        Gate {
            record: record.clone(),
            state,
            rx,
            _watches: watches,
        }
    }

    /// What the gate waits on.
    pub fn record(&self) -> &GateRecord {
        &self.record
    }

    /// Waits until the gate passes (`Ok`) or `deadline` (`Err` with what it still waits for).
    /// What the watches reported since [`Gate::start`] counts: the verdict is about now. A
    /// budget it cannot read is said in a warning Event about `node`.
    pub async fn wait(
        mut self,
        deadline: DateTime<Utc>,
        node: &str,
        events: &crate::events::Recorder,
    ) -> Result<(), String> {
        loop {
            // Apply what is queued before deciding.
            while let Ok(u) = self.rx.try_recv() {
                self.state.apply(u);
            }
            for (budget, note) in self.state.take_notes() {
                tracing::warn!(node, "{note}");
                events
                    .publish_action(
                        node,
                        true,
                        "BudgetSelectorUnreadable",
                        &format!("Wait {budget}"),
                        note,
                    )
                    .await;
            }
            let why = match self.state.verdict() {
                None => return Ok(()),
                Some(why) => why,
            };
            let left = (deadline - Utc::now()).to_std().unwrap_or_default();
            if left.is_zero() {
                return Err(why);
            }
            tracing::debug!(node, why, "health gate waiting");
            match tokio::time::timeout(left, self.rx.recv()).await {
                Ok(Some(u)) => self.state.apply(u),
                // No watch is left (none was needed): the verdict above already decided.
                Ok(None) => tokio::time::sleep(left.min(Duration::from_secs(1))).await,
                Err(_) => return Err(why),
            }
        }
    }
}

fn budget_selector(p: &SlimBudget) -> Option<&LabelSelector> {
    p.spec.as_ref().and_then(|s| s.selector.as_ref())
}

fn no_selector<K>(_: &K) -> Option<&LabelSelector> {
    None
}

type Disrupted = BTreeMap<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>;

fn budget_disrupted(p: &SlimBudget) -> Disrupted {
    p.status
        .as_ref()
        .and_then(|s| s.disrupted_pods.clone())
        .unwrap_or_default()
}

fn nothing_disrupted<K>(_: &K) -> Disrupted {
    Disrupted::new()
}

/// Watches one kind in one namespace for every gate following `feed`, keeping of each object
/// only its name, health and selector.
async fn follow<K>(
    client: Client,
    stream: Stream,
    feed: Arc<FeedShared>,
    health: fn(&K) -> Health,
    selector: fn(&K) -> Option<&LabelSelector>,
    disrupted: fn(&K) -> Disrupted,
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
            health: health(o),
            selector: selector(o).cloned(),
            disrupted: disrupted(o),
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
        feed.publish(ev);
    }
}

/// Turns a feed's events into one gate's [`Update`]s about what `wanted` waits for.
struct Forwarder {
    stream: Stream,
    wanted: Wanted,
    /// Names forwarded since the last list: a budget whose selector stops selecting the pods
    /// is forgotten, not left waited on with its last health.
    forwarded: BTreeSet<String>,
    /// Budgets whose selector cannot be evaluated, reported once each.
    reported: BTreeSet<String>,
    /// Every `label=value` of the pods `wanted` selects budgets for, hashed as the budget index
    /// hashes them (see [`Forwarder::wants`]).
    pairs: HashSet<u64>,
}

impl Forwarder {
    fn new(stream: Stream, wanted: Wanted) -> Forwarder {
        let pairs = (wanted.selecting.iter())
            .flat_map(|labels| labels.iter().map(|(k, v)| pair_hash(k, v)))
            .collect();
        Forwarder {
            stream,
            wanted,
            forwarded: BTreeSet::new(),
            reported: BTreeSet::new(),
            pairs,
        }
    }

    /// [`Wanted::wants`], with a budget whose selector requires a `label=value` none of the
    /// pods has turned down by one hash lookup: every budget event of a namespace reaches each
    /// gate in flight, and matching it against each evicted pod's labels was 3% of a
    /// 5,000-node simulation (perf). A hash two pairs share only leaves the full match to say.
    fn wants(&self, o: &Obj) -> bool {
        if let Some(Some((k, v))) = o.slot() {
            if !self.pairs.contains(&pair_hash(k, v)) && !self.wanted.names.contains(&o.name) {
                return false;
            }
        }
        self.wanted.wants(&o.name, o.selector.as_ref())
    }

    /// The updates `ev` makes.
    fn updates(&mut self, ev: FeedEvent) -> Vec<Update> {
        let s = || self.stream.clone();
        match ev {
            FeedEvent::Init => {
                self.forwarded.clear();
                vec![Update::Listing(s())]
            }
            FeedEvent::InitDone => vec![Update::Listed(s())],
            FeedEvent::Apply(o) => {
                let sel = o.selector.as_ref();
                if self.wants(&o) {
                    let mut out = Vec::new();
                    if let Some(why) = sel.and_then(crate::selector::selector_problem) {
                        if self.reported.insert(o.name.clone()) {
                            out.push(Update::Unreadable(s(), o.name.clone(), why));
                        }
                    }
                    self.forwarded.insert(o.name.clone());
                    out.push(Update::Seen(s(), o.name.clone(), o.health));
                    out
                } else if self.forwarded.remove(&o.name) {
                    vec![Update::Gone(s(), o.name.clone())]
                } else {
                    Vec::new()
                }
            }
            FeedEvent::Delete(name) => {
                if self.forwarded.remove(&name) {
                    vec![Update::Gone(s(), name)]
                } else {
                    Vec::new()
                }
            }
        }
    }
}

/// Feeds one gate from `feed`: what the watch knows now, then its changes; after falling too
/// far behind, what it knows again (a relist for the gate).
async fn forward(
    feed: Arc<Feed>,
    stream: Stream,
    wanted: Wanted,
    tx: mpsc::UnboundedSender<Update>,
) {
    let mut fwd = Forwarder::new(stream, wanted);
    loop {
        let (replay, mut rx) = {
            let st = feed.shared.state.lock().expect("gate feed");
            (st.replay(&fwd.wanted), feed.shared.tx.subscribe())
        };
        for ev in replay {
            for u in fwd.updates(ev) {
                if tx.send(u).is_err() {
                    return;
                }
            }
        }
        loop {
            match rx.recv().await {
                Ok(ev) => {
                    for u in fwd.updates(ev) {
                        if tx.send(u).is_err() {
                            return;
                        }
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> GateRecord {
        GateRecord {
            budgets: vec!["a/web".into()],
            owners: vec![
                ("ReplicaSet".into(), "a".into(), "web-1".into()),
                ("DaemonSet".into(), "kube-system".into(), "ds".into()),
            ],
            ..GateRecord::default()
        }
    }

    #[test]
    fn budgets_are_chosen_by_the_evicted_pods_labels() {
        let app = |v: &str| BTreeMap::from([("app".to_string(), v.to_string())]);
        let record = GateRecord {
            pods: vec![("a".into(), app("web"))],
            ..GateRecord::default()
        };
        let g = GateState::new(&record);
        assert_eq!(g.streams(), vec![pdb()]);
        let selecting = |v: &str| LabelSelector {
            match_labels: Some(app(v)),
            ..Default::default()
        };
        let w = &g.wanted[&pdb()];
        assert!(w.wants("web-pdb", Some(&selecting("web"))));
        assert!(!w.wants("db-pdb", Some(&selecting("db"))));
        assert!(!w.wants("no-selector", None));
        assert!(g.verdict().unwrap().contains("listing"));
    }

    fn pdb() -> Stream {
        (GateKind::Budget, "a".into())
    }
    fn rs() -> Stream {
        (GateKind::ReplicaSet, "a".into())
    }

    #[test]
    fn waits_until_every_stream_is_listed_then_for_each_object() {
        let mut g = GateState::new(&record());
        assert_eq!(g.streams(), vec![pdb(), rs()], "no watch for the DaemonSet");
        assert!(g.verdict().unwrap().contains("listing"));
        g.apply(Update::Seen(
            pdb(),
            "web".into(),
            Health::Budget {
                healthy: 2,
                desired: 3,
            },
        ));
        g.apply(Update::Listed(pdb()));
        assert!(g.verdict().unwrap().contains("listing the ReplicaSets"));
        g.apply(Update::Seen(
            rs(),
            "web-1".into(),
            Health::Replicas { ready: 3, want: 3 },
        ));
        g.apply(Update::Listed(rs()));
        assert_eq!(
            g.verdict().unwrap(),
            "PodDisruptionBudget a/web has 2 healthy of 3 desired"
        );
        g.apply(Update::Seen(
            pdb(),
            "web".into(),
            Health::Budget {
                healthy: 3,
                desired: 3,
            },
        ));
        assert_eq!(g.verdict(), None);
    }

    #[test]
    fn a_relist_forgets_what_the_stream_said_and_waits_again() {
        let mut g = GateState::new(&record());
        for s in [pdb(), rs()] {
            g.apply(Update::Listed(s));
        }
        assert_eq!(
            g.verdict(),
            None,
            "objects that do not exist wait for nothing"
        );
        g.apply(Update::Seen(
            rs(),
            "web-1".into(),
            Health::Replicas { ready: 1, want: 3 },
        ));
        assert_eq!(
            g.verdict().unwrap(),
            "ReplicaSet a/web-1 has 1 of 3 replicas Ready"
        );
        g.apply(Update::Listing(rs()));
        assert!(g.verdict().unwrap().contains("listing"));
        g.apply(Update::Listed(rs()));
        assert_eq!(g.verdict(), None, "the relist did not see it: deleted");
        g.apply(Update::Seen(
            rs(),
            "web-1".into(),
            Health::Replicas { ready: 1, want: 3 },
        ));
        g.apply(Update::Gone(rs(), "web-1".into()));
        assert_eq!(g.verdict(), None);
    }

    #[test]
    fn a_budget_whose_selector_cannot_be_read_is_waited_for_and_said_once() {
        let app = BTreeMap::from([("app".to_string(), "web".to_string())]);
        let record = GateRecord {
            pods: vec![("a".into(), app)],
            ..GateRecord::default()
        };
        let mut g = GateState::new(&record);
        let bad = LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "app".into(),
                    operator: "Matches".into(),
                    values: Some(vec!["web".into()]),
                },
            ]),
            ..Default::default()
        };
        let why = crate::selector::selector_problem(&bad).unwrap();
        assert!(why.contains("`app`") && why.contains("`Matches`"), "{why}");
        // Selecting nothing by the rules it can read, it is still waited for.
        assert!(!crate::selector::selector_matches(
            Some(&bad),
            &record.pods[0].1
        ));
        assert!(g.wanted[&pdb()].wants("odd", Some(&bad)));
        for _ in 0..2 {
            g.apply(Update::Unreadable(pdb(), "odd".into(), why.clone()));
        }
        g.apply(Update::Seen(
            pdb(),
            "odd".into(),
            Health::Budget {
                healthy: 1,
                desired: 2,
            },
        ));
        g.apply(Update::Listed(pdb()));
        assert_eq!(
            g.verdict().unwrap(),
            "PodDisruptionBudget a/odd has 1 healthy of 2 desired"
        );
        let notes = g.take_notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].0, "a/odd");
        assert!(
            notes[0]
                .1
                .starts_with("PodDisruptionBudget a/odd: its selector cannot be evaluated")
                && notes[0].1.contains("waits for it"),
            "{}",
            notes[0].1
        );
        assert!(g.take_notes().is_empty());
    }

    #[test]
    fn objects_not_waited_on_are_ignored() {
        let mut g = GateState::new(&record());
        g.apply(Update::Seen(
            rs(),
            "other".into(),
            Health::Replicas { ready: 0, want: 3 },
        ));
        for s in [pdb(), rs()] {
            g.apply(Update::Listed(s));
        }
        assert_eq!(g.verdict(), None);
    }

    fn budget(name: &str, selector: LabelSelector) -> FeedEvent {
        FeedEvent::Apply(Arc::new(Obj {
            name: name.into(),
            health: Health::Budget {
                healthy: 2,
                desired: 1,
            },
            selector: Some(selector),
            disrupted: Default::default(),
        }))
    }

    /// The budget index gives exactly what matching every budget would: budgets found by a
    /// label of the pods, budgets any pod may match (no label pair, an unreadable selector),
    /// after changes, deletions and a relist; a budget without a selector only by name.
    #[test]
    fn the_budget_index_finds_what_a_scan_of_every_budget_finds() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let by_labels = |pairs: &[(&str, &str)]| LabelSelector {
            match_labels: Some(labels(pairs)),
            ..Default::default()
        };
        let expr = |key: &str, op: &str| LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: key.into(),
                    operator: op.into(),
                    values: None,
                },
            ]),
            ..Default::default()
        };
        let mut st = FeedState::default();
        for ev in [
            FeedEvent::Init,
            budget("web", by_labels(&[("app", "web"), ("tier", "front")])),
            budget("db", by_labels(&[("app", "db")])),
            budget("any-with-tier", expr("tier", "Exists")),
            budget("everything", LabelSelector::default()),
            budget("garbled", expr("app", "Near")),
            obj("rs-1", 1),
            FeedEvent::InitDone,
        ] {
            st.apply(&ev);
        }
        let want = |names: &[&str], pods: &[BTreeMap<String, String>]| Wanted {
            names: names.iter().map(|n| n.to_string()).collect(),
            selecting: pods.to_vec(),
        };
        let kept = |st: &FeedState, w: &Wanted| -> Vec<String> {
            let got: Vec<String> = st.kept(w).iter().map(|o| o.name.clone()).collect();
            // The same as a look at every object.
            let all: Vec<String> = st
                .objects
                .values()
                .filter(|o| w.wants(&o.name, o.selector.as_ref()))
                .map(|o| o.name.clone())
                .collect();
            assert_eq!(got, all);
            got
        };
        let web = labels(&[("app", "web"), ("tier", "front")]);
        assert_eq!(
            kept(&st, &want(&[], std::slice::from_ref(&web))),
            ["any-with-tier", "everything", "garbled", "web"]
        );
        assert_eq!(
            kept(&st, &want(&["rs-1"], &[labels(&[("app", "db")])])),
            ["db", "everything", "garbled", "rs-1"]
        );
        assert_eq!(kept(&st, &want(&["rs-1"], &[])), ["rs-1"]);
        // A budget's selector changes: it is found under its new label only.
        st.apply(&budget("db", by_labels(&[("app", "cache")])));
        assert_eq!(
            kept(&st, &want(&[], &[labels(&[("app", "db")])])),
            ["everything", "garbled"]
        );
        assert_eq!(
            kept(&st, &want(&[], &[labels(&[("app", "cache")])])),
            ["db", "everything", "garbled"]
        );
        // Deleted, then a relist that brings back only some.
        st.apply(&FeedEvent::Delete("everything".into()));
        assert_eq!(
            kept(&st, &want(&[], std::slice::from_ref(&web))),
            ["any-with-tier", "garbled", "web"]
        );
        for ev in [
            FeedEvent::Init,
            budget("web", by_labels(&[("app", "web")])),
            FeedEvent::InitDone,
        ] {
            st.apply(&ev);
        }
        assert_eq!(kept(&st, &want(&[], &[web])), ["web"]);
        assert!(st.unindexed.is_empty() && st.by_label.len() == 1);
    }

    /// A gate's quick turn-down of a budget by its label pair says what matching the budget
    /// against every evicted pod says: over random budgets (label pairs, expressions, an
    /// unreadable operator, an empty selector, none) and random pods, waited on by name or not.
    #[test]
    fn a_gate_turns_down_budgets_as_the_full_match_does() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let keys = ["app", "tier", "team"];
        let vals = ["web", "db", "cache"];
        let labels = |rng: &mut rand::rngs::SmallRng, n: usize| -> BTreeMap<String, String> {
            (0..n)
                .map(|_| {
                    let k = keys[rng.random_range(0..3)];
                    (k.to_string(), vals[rng.random_range(0..3)].to_string())
                })
                .collect()
        };
        let (mut turned_down, mut kept) = (0, 0);
        for _ in 0..400 {
            let pods: Vec<_> = (0..rng.random_range(0..4))
                .map(|_| {
                    let n = rng.random_range(0..3);
                    labels(&mut rng, n)
                })
                .collect();
            let names: BTreeSet<String> = (0..rng.random_range(0..3))
                .map(|i| format!("b{i}"))
                .collect();
            let fwd = Forwarder::new(
                pdb(),
                Wanted {
                    names,
                    selecting: pods,
                },
            );
            for i in 0..20 {
                let selector = match rng.random_range(0..5) {
                    0 => None,
                    1 => Some(LabelSelector::default()),
                    n => Some(LabelSelector {
                        match_labels: (n != 4).then(|| {
                            let count = rng.random_range(1..3);
                            labels(&mut rng, count)
                        }),
                        match_expressions: (n >= 3).then(|| {
                            let op = ["In", "NotIn", "Exists", "Near"][rng.random_range(0..4)];
                            vec![LabelSelectorRequirement {
                                key: keys[rng.random_range(0..3)].into(),
                                operator: op.into(),
                                values: (op.ends_with("In")).then(|| vec!["web".into()]),
                            }]
                        }),
                    }),
                };
                let o = Obj {
                    name: format!("b{}", i % 4),
                    health: Health::Budget {
                        healthy: 1,
                        desired: 1,
                    },
                    selector,
                    disrupted: Default::default(),
                };
                let full = fwd.wanted.wants(&o.name, o.selector.as_ref());
                assert_eq!(fwd.wants(&o), full, "{o:?} for {:?}", fwd.wanted);
                if full {
                    kept += 1;
                } else {
                    turned_down += 1;
                }
            }
        }
        assert!(turned_down > 500 && kept > 500, "{turned_down} {kept}");
    }

    fn obj(name: &str, ready: i32) -> FeedEvent {
        FeedEvent::Apply(Arc::new(Obj {
            name: name.into(),
            health: Health::Replicas { ready, want: 2 },
            selector: None,
            disrupted: Default::default(),
        }))
    }

    /// A gate that joins a watch other gates started is told what the watch knows of the
    /// objects it waits for, as if it had listed them itself, and then their changes only.
    #[test]
    fn a_gate_joining_a_shared_watch_sees_its_objects_as_listed_then_their_changes() {
        let mut feed = FeedState::default();
        for ev in [
            FeedEvent::Init,
            obj("web-1", 2),
            obj("other", 0),
            FeedEvent::InitDone,
        ] {
            feed.apply(&ev);
        }
        let mut g = GateState::new(&record());
        let streams = g.streams();
        let s = streams
            .iter()
            .find(|s| s.0 == GateKind::ReplicaSet)
            .unwrap();
        let mut fwd = Forwarder::new(s.clone(), g.wanted[s].clone());
        let replay = feed.replay(&fwd.wanted);
        assert_eq!(replay.len(), 3, "{replay:?}");
        let updates: Vec<Update> = replay.into_iter().flat_map(|e| fwd.updates(e)).collect();
        assert_eq!(
            updates,
            vec![
                Update::Listing(rs()),
                Update::Seen(rs(), "web-1".into(), Health::Replicas { ready: 2, want: 2 }),
                Update::Listed(rs()),
            ]
        );
        for u in updates {
            g.apply(u);
        }
        // Objects it does not wait for are not forwarded; its own are, down to a deletion.
        assert!(fwd.updates(obj("other", 1)).is_empty());
        let down = fwd.updates(obj("web-1", 1));
        assert_eq!(
            down,
            vec![Update::Seen(
                rs(),
                "web-1".into(),
                Health::Replicas { ready: 1, want: 2 }
            )]
        );
        for u in down {
            g.apply(u);
        }
        g.apply(Update::Listing(pdb()));
        g.apply(Update::Listed(pdb()));
        assert!(g.verdict().unwrap().contains("web-1"), "{:?}", g.verdict());
        assert!(fwd.updates(FeedEvent::Delete("other".into())).is_empty());
        assert_eq!(
            fwd.updates(FeedEvent::Delete("web-1".into())),
            vec![Update::Gone(rs(), "web-1".into())]
        );
    }

    /// Joining while the watch relists: the last complete list, then the relist so far (which
    /// forgets it), so the gate waits for the relist to complete as the other gates do.
    #[test]
    fn a_gate_joining_during_a_relist_waits_for_it_to_complete() {
        let mut feed = FeedState::default();
        for ev in [
            FeedEvent::Init,
            obj("web-1", 2),
            FeedEvent::InitDone,
            FeedEvent::Init,
            obj("web-1", 1),
        ] {
            feed.apply(&ev);
        }
        let mut g = GateState::new(&record());
        let wanted = g.wanted[&rs()].clone();
        let mut fwd = Forwarder::new(rs(), wanted);
        for u in feed
            .replay(&fwd.wanted)
            .into_iter()
            .flat_map(|e| fwd.updates(e))
        {
            g.apply(u);
        }
        assert!(!g.listed.contains(&rs()), "the relist is not complete yet");
        feed.apply(&FeedEvent::InitDone);
        assert_eq!(feed.objects.len(), 1);
        assert!(feed.pending.is_none());
    }

    /// The gate's watches read of each object what the gate keeps, the rest of it skipped:
    /// a ReplicaSet's replicas (1 when unset) and Ready replicas, a budget's selector, health
    /// and disrupted pods, and the metadata a watch resumes from.
    #[test]
    fn a_watched_object_is_read_for_what_the_gate_keeps() {
        let rs: SlimReplicas<ReplicaSet> = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-1", "namespace": "a", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "web"}, "managedFields": [{"manager": "x"}]},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"replicas": 3, "readyReplicas": 2}
        }))
        .unwrap();
        assert_eq!(rs.name_any(), "web-1");
        assert_eq!(rs.resource_version().as_deref(), Some("7"));
        assert!(rs.metadata.labels.is_none());
        assert_eq!(replicas(&rs), Health::Replicas { ready: 2, want: 3 });
        let bare: SlimReplicas<ReplicaSet> =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}})).unwrap();
        assert_eq!(replicas(&bare), Health::Replicas { ready: 0, want: 1 });
        let pdb: SlimBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "a", "resourceVersion": "9"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"currentHealthy": 2, "desiredHealthy": 2, "disruptionsAllowed": 0,
                "expectedPods": 3, "disruptedPods": {"web-x": "2026-01-01T00:00:00Z"}}
        }))
        .unwrap();
        assert_eq!(
            budget_health(&pdb),
            Health::Budget {
                healthy: 2,
                desired: 2
            }
        );
        let sel = budget_selector(&pdb).and_then(|s| s.match_labels.clone());
        assert_eq!(sel.unwrap()["app"], "web");
        assert_eq!(budget_disrupted(&pdb).len(), 1);
        assert_eq!(
            <SlimBudget as kube::Resource>::plural(&()),
            "poddisruptionbudgets"
        );
    }
}
