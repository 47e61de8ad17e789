//! The controller: leader election, the Node cache, the maintenance lock, and the reboot cycle.
//!
//! Owns the runtime that turns the pure decisions of [`decide`] into API writes: it keeps a
//! watch-backed cache of Nodes (trimmed of images and managedFields) and of the lock Lease, wakes
//! on every change (no polling on the happy path; a resync every few minutes is the safety net),
//! resumes every node listed in the lock, starts flagged nodes when nothing blocks, and carries
//! each node through cordon, drain, reboot, verify, uncordon and the health gate. Every step is
//! written to the Node before it is acted on, so a successor continues from what the cluster
//! says. When the lock's Lease is deleted, or its in-flight record stops parsing, it writes the
//! record rebuilt from the Nodes' own states before anything else. It says once, in a log line
//! and a warning Event, each malformed rollboot annotation it meets. It must never write
//! anything without re-checking leadership right before, never start a node while a blocker
//! holds or while the lock's record is not one it can trust, and never drain, or ask for the
//! reboot of, a node that is not cordoned.

pub mod alerts;
pub mod decide;
pub mod gate;
mod observe;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::config::{Config, Phase};
use crate::drain::{self, DrainError, Drained, KubeDrain};
use crate::events::Recorder;
use crate::hooks::decide::Action;
use crate::lease::{Elector, Leadership, LeaseError, LeaseRef, NotLeader, Timings};
use crate::lock::{self, LockEntry, LockError, LockRecord};
use crate::metrics::Metrics;
use crate::node::{self as proto, NodeState, NodeView, Token};
use decide::{Snapshot, Step};
use gate::Gate;
pub use gate::GateRecord;

/// What can stop the controller or one of its steps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write to a Node failed.
    #[error("node {node}: {what}: {source}")]
    Node {
        /// Node.
        node: String,
        /// What was being written.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The lock could not be read or written.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// A Lease could not be read.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// Leadership was lost.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// A drain failed.
    #[error(transparent)]
    Drain(#[from] DrainError),
    /// A Node write was refused (409) because the Node changed since the view the step was
    /// decided from: someone else (a newer leader, the agent, the kubelet) wrote first. Not a
    /// failure: nothing was written, and the next pass decides again from the newer version,
    /// woken by the watch when the cache has it.
    #[error("node {node}: {what}: the node changed since resourceVersion {rv}; not acting, deciding again")]
    Conflict {
        /// Node.
        node: String,
        /// What was being written.
        what: String,
        /// The resourceVersion the step was decided from.
        rv: String,
    },
    /// The API client could not be built.
    #[error("building the Kubernetes client: {0}")]
    Client(String),
}

impl Error {
    /// A low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Node { .. } => "node_write",
            Error::Lock(_) => "lock",
            Error::Lease(_) => "lease",
            Error::NotLeader(_) => "not_leader",
            Error::Drain(_) => "drain",
            Error::Conflict { .. } => "conflict",
            Error::Client(_) => "client",
        }
    }
}

/// Safety-net resync interval.
const RESYNC: Duration = Duration::from_secs(300);

/// How often Prometheus is asked again while its alerts (or its failure) block a flagged node.
const ALERTS_RECHECK: chrono::Duration = chrono::Duration::seconds(5);

/// Aborts a task when dropped, so killing the controller kills all its work.
struct Task(JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A node's background step (drain, health gate). It marks itself done before it wakes the
/// leader's loop: a pass woken by it must not see it still running and skip the node, which
/// would leave the node waiting for the next watch event or the resync.
struct StepTask {
    task: Task,
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl StepTask {
    fn spawn(
        wake: Arc<Notify>,
        step: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> StepTask {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        let task = Task(tokio::spawn(async move {
            step.await;
            flag.store(true, std::sync::atomic::Ordering::Release);
            wake.notify_one();
        }));
        StepTask { task, done }
    }

    fn running(&self) -> bool {
        !self.done.load(std::sync::atomic::Ordering::Acquire) && !self.task.0.is_finished()
    }
}

/// Everything the leader's loop and its per-node tasks share.
#[derive(Clone)]
struct Ctx {
    client: Client,
    /// Without kube's transparent 429 retry: an eviction refused by a budget must reach the drain.
    evict_client: Client,
    config: Arc<Config>,
    leadership: Leadership,
    lock_owner: String,
    lock: LeaseRef,
    events: Recorder,
    metrics: Arc<Metrics>,
    wake: Arc<Notify>,
    /// The watch-backed Node cache.
    nodes: reflector::Store<Node>,
    /// Counts the Node watch's events: a task can wait for the cache to change.
    node_seq: tokio::sync::watch::Receiver<u64>,
    /// Nodes as returned by our own writes, newer than the cache until the watch catches up.
    written: Arc<std::sync::Mutex<HashMap<String, Node>>>,
    /// The Nodes' parsed views, see [`views`].
    view_cache: Arc<std::sync::Mutex<proto::ViewCache>>,
    /// What the Node watch changed since the views last looked.
    node_changes: Arc<std::sync::Mutex<crate::node::NodeChanges>>,
    /// The lock as last read or written.
    lock_record: Arc<std::sync::Mutex<LockRecord>>,
    /// Held across each of this replica's edits of the lock (a start, a free): its own edits
    /// from concurrent steps otherwise race on the one Lease (with 50 nodes in flight, a free
    /// lost 5 attempts in a row to its siblings hundreds of times in a 5,000-node run), and
    /// each edit then starts from the record the previous one wrote.
    lock_edits: Arc<tokio::sync::Mutex<()>>,
    /// `blockers.prometheus`, when configured.
    alerts: Option<alerts::AlertSource>,
    /// Sends the fire-and-forget webhooks.
    firer: crate::hooks::call::Firer,
    /// The rollout's metrics and notifications.
    observe: Arc<observe::Observer>,
    /// The health gates' shared watches.
    gate_hub: Arc<gate::Hub>,
}

fn rv(n: &Node) -> u64 {
    n.metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Runs one controller replica until `shutdown` resolves: leader election, the caches, and,
/// while leading, the reboot cycle. Dropping the future stops everything it started at once
/// (as a crash would); resolving `shutdown` also releases the leader Lease.
pub async fn run(
    kube_config: kube::Config,
    config: Arc<Config>,
    identity: String,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let client = Client::try_from(kube_config.clone()).map_err(|e| Error::Client(e.to_string()))?;
    let evict_client = {
        let mut c = kube_config;
        c.default_retry = false;
        Client::try_from(c).map_err(|e| Error::Client(e.to_string()))?
    };
    let leader_lease = LeaseRef::new(
        client.clone(),
        &config.leader.namespace,
        &config.leader.name,
    );
    let (elector, mut leadership) = Elector::new(
        leader_lease,
        &identity,
        Timings::from_config(&config.leader),
    );
    let lease_duration = config.leader.lease_duration.to_std();
    metrics
        .readiness
        .replica_started(leadership.clone(), lease_duration);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let elector_done = {
        let mut stop = stop_rx.clone();
        Task(tokio::spawn(async move {
            elector
                .run(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        }))
    };
    let wake = Arc::new(Notify::new());
    // Node cache.
    let (nodes, writer) = reflector::store::<Node>();
    let (node_seq_tx, node_seq) = tokio::sync::watch::channel(0u64);
    let node_changes: Arc<std::sync::Mutex<crate::node::NodeChanges>> = Default::default();
    // The hooks' gate annotations are kept in the cache with rollboot's own.
    let keep = config.hooks.gate_keys();
    let _node_watch = {
        let (wake, metrics, keep) = (wake.clone(), metrics.clone(), keep.clone());
        let changes = node_changes.clone();
        let api: Api<Node> = Api::all(client.clone());
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(move |n| *n = proto::trim_keeping(std::mem::take(n), &keep))
            .reflect(writer);
        Task(tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                if let Ok(e) = &ev {
                    changes.lock().expect("node changes").note(e);
                }
                match ev {
                    Err(e) => tracing::warn!(error = %e, "node watch"),
                    Ok(watcher::Event::InitDone) => metrics.readiness.nodes_synced(),
                    Ok(_) => {}
                }
                node_seq_tx.send_modify(|s| *s += 1);
                wake.notify_one();
            }
        }))
    };
    // Lock cache.
    let lock_ref = LeaseRef::new(client.clone(), &config.lock.namespace, &config.lock.name);
    let lock_record = Arc::new(std::sync::Mutex::new(LockRecord::default()));
    let _lock_watch = {
        let wake = wake.clone();
        let record = lock_record.clone();
        let api: Api<Lease> = Api::namespaced(client.clone(), &config.lock.namespace);
        let stream = watcher(
            api,
            watcher::Config::default().fields(&format!("metadata.name={}", config.lock.name)),
        )
        .default_backoff();
        Task(tokio::spawn(async move {
            futures::pin_mut!(stream);
            // Whether the Lease was seen in the list under way: a list without it means it is
            // gone (deleted while the watch was down).
            let mut listed = false;
            while let Some(ev) = stream.next().await {
                let new = match ev {
                    Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => {
                        listed = true;
                        Some(LockRecord::from_lease(Some(l)))
                    }
                    Ok(watcher::Event::Delete(l)) => {
                        let gone = LockRecord::from_lease(Some(l));
                        let cur = record.lock().expect("lock cache").clone();
                        let mut remembered = cur.known_in_flight().clone();
                        remembered.extend(gone.entries.clone());
                        Some(LockRecord::deleted(
                            gone.version().max(cur.version()),
                            remembered,
                        ))
                    }
                    Ok(watcher::Event::Init) => {
                        listed = false;
                        None
                    }
                    Ok(watcher::Event::InitDone) if !listed => {
                        let cur = record.lock().expect("lock cache").clone();
                        Some(LockRecord::deleted(
                            cur.version(),
                            cur.known_in_flight().clone(),
                        ))
                    }
                    Ok(watcher::Event::InitDone) => None,
                    Err(e) => {
                        tracing::warn!(error = %e, "maintenance lock watch");
                        None
                    }
                };
                if let Some(new) = new {
                    let mut cur = record.lock().expect("lock cache");
                    if new.version() >= cur.version() {
                        *cur = new;
                    }
                }
                wake.notify_one();
            }
        }))
    };
    let shutdown_task = {
        let stop_tx = stop_tx.clone();
        Task(tokio::spawn(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        }))
    };
    let alerts = match &config.blockers.prometheus {
        Some(p) => Some(alerts::AlertSource::new(p).map_err(Error::Client)?),
        None => None,
    };
    // A pass reads only the Nodes a decision can turn on, kept up to date as each is parsed.
    let view_cache = Arc::new(std::sync::Mutex::new(proto::ViewCache::with_notable({
        let config = config.clone();
        move |v| decide::needs_a_look(v, &config)
    })));
    let ctx = Ctx {
        gate_hub: Arc::new(gate::Hub::new(client.clone())),
        alerts,
        observe: Arc::new(observe::Observer::new(&config, metrics.clone(), &identity)),
        firer: crate::hooks::call::Firer::new(metrics.clone()),
        events: Recorder::new(
            client.clone(),
            &config.lock.namespace,
            "rollboot.dev/controller",
            &identity,
        ),
        client,
        evict_client,
        lock_owner: lock::lock_owner(&config),
        lock: lock_ref,
        config,
        leadership: leadership.clone(),
        metrics,
        wake,
        nodes: nodes.clone(),
        node_seq,
        written: Default::default(),
        view_cache,
        node_changes,
        lock_record,
        lock_edits: Arc::default(),
    };
    let mut stop = stop_rx;
    loop {
        tokio::select! {
            _ = leadership.acquired() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        tracing::info!(identity = %ctx.leadership.identity(), "leading");
        ctx.metrics.set_leader(true);
        tokio::select! {
            _ = lead(&ctx, &nodes) => {}
            _ = ctx.leadership.lost() => tracing::warn!(identity = %ctx.leadership.identity(), "lost leadership; stopped acting"),
            _ = stop.wait_for(|s| *s) => { ctx.metrics.set_leader(false); break }
        }
        ctx.metrics.set_leader(false);
        // A replica that does not lead watches nothing for gates.
        ctx.gate_hub.stop_all();
        // Until the elector publishes the loss, `acquired` would return at once.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(shutdown_task);
    // Let the elector release the Lease.
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let mut e = elector_done;
        let _ = (&mut e.0).await;
    })
    .await;
    Ok(())
}

/// The leader's loop: decide and act on every change, until leadership is lost.
async fn lead(ctx: &Ctx, nodes: &reflector::Store<Node>) {
    let _ = nodes.wait_until_ready().await;
    // Start from a fresh read of the lock (the record of what to resume), and adopt it: a
    // write that moves its resourceVersion on, so a late lock write a paused predecessor still
    // holds is refused (see `lock::adopt`). Nothing is acted on before that write.
    loop {
        let adopted = match lock::read(&ctx.lock).await {
            Ok(r) => {
                let identity = ctx.leadership.identity().to_string();
                lock::adopt(
                    &ctx.lock,
                    &ctx.lock_owner,
                    r,
                    &identity,
                    Utc::now(),
                    &|| ctx.leadership.ensure(),
                )
                .await
            }
            Err(e) => Err(e.into()),
        };
        match adopted {
            Ok(r) => {
                *ctx.lock_record.lock().expect("lock cache") = r;
                break;
            }
            // Deleted since it was read: read again (the first pass then finds the nodes in
            // flight from the Nodes).
            Err(LockError::Gone { .. }) => {}
            Err(LockError::NotLeader(_)) => return,
            Err(e) => {
                tracing::warn!(error = %e, "adopting the maintenance lock; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
    // The Node cache may lag behind the lock just read (a predecessor may have written a
    // node's final state and then freed its slot): read the Nodes once, after the lock.
    // In pages, keeping only what is newer than the cache: a single list of every Node (with
    // images and managedFields) and a second copy of the cache would double the memory.
    let api = Api::<Node>::all(ctx.client.clone());
    let mut page = ListParams::default().limit(500);
    let keep = ctx.config.hooks.gate_keys();
    loop {
        match api.list(&page).await {
            Ok(list) => {
                let mut written = ctx.written.lock().expect("written cache");
                for n in list.items {
                    let name = n.metadata.name.clone().unwrap_or_default();
                    let cached = nodes
                        .get(&reflector::ObjectRef::new(&name))
                        .map(|c| rv(&c))
                        .unwrap_or(0);
                    if rv(&n) > cached && written.get(&name).is_none_or(|w| rv(w) < rv(&n)) {
                        written.insert(name, proto::trim_keeping(n, &keep));
                    }
                }
                match list.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(c) => page = page.continue_token(&c),
                    None => break,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "listing nodes");
                break;
            }
        }
    }
    let mut tasks: HashMap<String, StepTask> = HashMap::new();
    // Health gates started while their node reboots, taken by its health-gate step.
    let mut gates: Gates = HashMap::new();
    let mut last_blockers: Vec<String> = Vec::new();
    let mut last_holder: Option<String> = None;
    let mut warned = Warned::default();
    loop {
        let wake = ctx.wake.notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        tasks.retain(|_, t| t.running());
        report_holder(ctx, &mut last_holder);
        let next = match tick(
            ctx,
            nodes,
            &mut tasks,
            &mut gates,
            &mut last_blockers,
            &mut warned,
        )
        .await
        {
            Ok(next) => next,
            Err(Error::NotLeader(_)) => return,
            Err(e) => {
                ctx.metrics.error(e.metric_label());
                tracing::warn!(error = %e, "reconcile failed; retrying");
                Some(Utc::now() + chrono::Duration::seconds(2))
            }
        };
        let sleep = next
            .and_then(|t| (t - Utc::now()).to_std().ok())
            .unwrap_or(Duration::ZERO)
            .min(RESYNC);
        let sleep = if next.is_none() { RESYNC } else { sleep };
        tokio::select! {
            _ = &mut wake => {}
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}

/// One Node as the controller knows it now: the newer of the cache and our own last write.
/// Steps decided long after their pass (the end of a drain, of a health gate) decide from it.
fn current(ctx: &Ctx, name: &str) -> Option<NodeView> {
    let cached = ctx.nodes.get(&reflector::ObjectRef::new(name));
    let written = ctx.written.lock().expect("written cache");
    match (cached, written.get(name)) {
        (Some(c), Some(w)) if rv(w) > rv(&c) => Some(NodeView::from_node(w)),
        (Some(c), _) => Some(NodeView::from_node(&c)),
        (None, _) => None,
    }
}

/// The cached Nodes, overlaid with our own fresher writes, parsed again only where they changed
/// (a pass per batch of Node events must not parse every Node: issue 14). After the first look
/// (and after a relist of the watch) only the Nodes the watch changed and those with a write of
/// ours pending are looked at: a pass costs what changed, not the cluster's size. With the
/// views, what the pass reads of them (see [`PassViews`]).
fn views(ctx: &Ctx, nodes: &reflector::Store<Node>, record: &LockRecord) -> PassViews {
    let mut written = ctx.written.lock().expect("written cache");
    let changes = std::mem::take(&mut *ctx.node_changes.lock().expect("node changes"));
    let mut cache = ctx.view_cache.lock().expect("view cache");
    let all = if changes.relisted || !cache.primed() {
        let state = nodes.state();
        // Our own write, while it is newer than what the watch brought; forgotten once it is not.
        let mut newer = std::collections::HashSet::new();
        for n in &state {
            let name = n.metadata.name.as_deref().unwrap_or_default();
            if written.get(name).is_some_and(|w| rv(w) > rv(n)) {
                newer.insert(name);
            }
        }
        written.retain(|name, _| newer.contains(name.as_str()));
        let sources = state.iter().map(|n| {
            let name = n.metadata.name.as_deref().unwrap_or_default();
            written.get(name).unwrap_or(n)
        });
        cache.refresh(sources)
    } else {
        let mut names = changes.names;
        names.extend(written.keys().cloned());
        let mut sources: Vec<(String, Option<Arc<Node>>)> = Vec::with_capacity(names.len());
        for name in names {
            let cached = nodes.get(&reflector::ObjectRef::new(&name));
            let source = match (cached, written.get(&name)) {
                (Some(c), Some(w)) if rv(w) > rv(&c) => Some(Arc::new(w.clone())),
                (cached, _) => {
                    written.remove(&name);
                    cached
                }
            };
            sources.push((name, source));
        }
        cache.update(sources)
    };
    let in_lock: Vec<usize> = record
        .entries
        .keys()
        .filter_map(|n| cache.position(n))
        .collect();
    let mut looked: std::collections::BTreeSet<usize> = cache.notable().collect();
    looked.extend(&in_lock);
    PassViews {
        all,
        looked: looked.into_iter().collect(),
        in_lock,
        states: cache.state_counts().clone(),
    }
}

/// The views one pass reads: every Node's, the positions of those a decision can turn on (the
/// ones [`decide::needs_a_look`] picks and every one in the lock), and how many are in each
/// state. Only rebuilding the lock's record reads them all.
struct PassViews {
    all: Arc<Vec<NodeView>>,
    looked: Vec<usize>,
    /// The positions of the nodes in the lock that have a Node.
    in_lock: Vec<usize>,
    states: HashMap<NodeState, usize>,
}

impl PassViews {
    /// The views a decision can turn on, in the views' order.
    fn nodes(&self) -> Vec<&NodeView> {
        self.looked.iter().map(|&i| &self.all[i]).collect()
    }

    /// The views of the nodes in the lock (those that have a Node).
    fn in_lock(&self) -> impl Iterator<Item = &NodeView> {
        self.in_lock.iter().map(|&i| &self.all[i])
    }
}

/// The malformed annotations already warned about, as (node, key, value): each is said once
/// (a log line and an Event) while it lasts, not on every pass. And the nodes found with none,
/// by the resourceVersion they were read at: a pass reads every flagged node, and reading a
/// health gate's or a hook record's JSON again for each of thousands of unchanged nodes was a
/// cost per pass in the rollout's size (issue 14).
#[derive(Default)]
struct Warned {
    said: std::collections::HashSet<(String, &'static str, String)>,
    clean: HashMap<String, String>,
}

/// Logs and records a warning Event for each malformed rollboot annotation not yet warned
/// about, and forgets those that are gone (so one that comes back is said again).
async fn warn_malformed(ctx: &Ctx, views: &[&NodeView], record: &LockRecord, warned: &mut Warned) {
    let mut said = std::collections::HashSet::new();
    for v in views {
        let rv = &v.resource_version;
        if !rv.is_empty() && warned.clean.get(&v.name) == Some(rv) {
            continue;
        }
        // What is said depends on the node's lock entry too, but a node's entry does not change
        // without a write to its Node (a start cordons it): the version alone dates the memo.
        let warnings = decide::annotation_warnings(v, record.entries.get(&v.name));
        if warnings.is_empty() {
            if !rv.is_empty() {
                warned.clean.insert(v.name.clone(), rv.clone());
            }
            continue;
        }
        warned.clean.remove(&v.name);
        for w in warnings {
            let k = (v.name.clone(), w.key, w.value.clone());
            if !warned.said.contains(&k) {
                tracing::warn!(node = %v.name, key = w.key, value = %w.value, "{}", w.note);
                ctx.events
                    .publish_action(
                        &v.name,
                        true,
                        "MalformedAnnotation",
                        &format!("Read {}", w.key),
                        w.note,
                    )
                    .await;
            }
            said.insert(k);
        }
    }
    warned.said = said;
    // The nodes no longer read (a flag gone) are forgotten, once they are many.
    if warned.clean.len() > 2 * views.len() + 64 {
        let read: std::collections::HashSet<&str> = views.iter().map(|v| v.name.as_str()).collect();
        warned.clean.retain(|name, _| read.contains(name.as_str()));
    }
}

/// When the lock's in-flight record cannot be trusted (its Lease was deleted while Nodes show
/// cycles in progress, or its record does not parse), writes the record rebuilt from the
/// Nodes' own states. Returns whether the record was untrusted: the pass then starts nothing
/// and resumes nothing, and the next pass goes on from the record written (or read again).
async fn restore_lock(
    ctx: &Ctx,
    record: &LockRecord,
    views: &[NodeView],
    now: DateTime<Utc>,
    acting: &std::collections::BTreeSet<String>,
) -> Result<bool, Error> {
    if record.foreign_holder(&ctx.lock_owner).is_some() {
        // Not ours to write; and nothing starts while someone else holds it.
        return Ok(false);
    }
    let why = match (&record.untrusted, &record.lease) {
        (Some(why), _) => why.clone(),
        (None, None) => "the Lease does not exist".to_string(),
        (None, Some(_)) => return Ok(false),
    };
    let identity = ctx.leadership.identity().to_string();
    let mut entries = decide::rebuild(views, &identity, &ctx.config, now, acting);
    // The nodes the deleted Lease listed: in flight whatever the Nodes show yet (this
    // process's Node cache can lag behind its own writes); a node among them whose cycle has
    // ended is freed by the next pass.
    for (name, e) in &record.remembered {
        let ended = views.iter().any(|v| {
            v.name == *name
                && v.state.is_some_and(|s| !s.in_flight())
                && v.state_since.is_some_and(|t| t >= e.since)
        });
        if !ended && !entries.contains_key(name) {
            entries.insert(name.clone(), e.clone());
        }
    }
    if record.lease.is_none() && entries.is_empty() {
        // Nothing in flight: the Lease is created by the first node started, as always. The
        // nodes the deleted record listed have all ended: forgotten, or the lock's writes
        // would keep refusing to create it (and nothing would start again).
        if !record.remembered.is_empty() {
            set_lock(ctx, LockRecord::deleted(record.version(), BTreeMap::new()));
        }
        return Ok(false);
    }
    let lease = format!("{}/{}", ctx.config.lock.namespace, ctx.config.lock.name);
    let names: Vec<&str> = entries.keys().map(String::as_str).collect();
    let note = format!(
        "the maintenance lock {lease} cannot be trusted ({why}); its in-flight record is \
         rebuilt from the Nodes' rollboot.dev/state: {}; no new node starts until it is written",
        if names.is_empty() {
            "no node in flight".to_string()
        } else {
            names.join(", ")
        }
    );
    tracing::warn!(lock = %lease, nodes = ?names, "{note}");
    ctx.leadership.ensure()?;
    match lock::restore(&ctx.lock, &ctx.lock_owner, record, &entries).await {
        Ok(written) => {
            ctx.events
                .publish_lease(&ctx.config.lock.name, true, "LockRebuilt", note);
            tracing::info!(lock = %lease, nodes = ?names, "maintenance lock record restored");
            set_lock(ctx, written);
        }
        // Someone wrote the lock since it was read: what they wrote is read and judged first.
        Err(LockError::Lease(LeaseError::Conflict { .. })) => {
            tracing::info!(lock = %lease, "the maintenance lock changed while it was being restored; reading it again");
            set_lock(ctx, lock::read(&ctx.lock).await?);
        }
        Err(e) => return Err(lock_error(ctx, e)),
    }
    ctx.wake.notify_one();
    Ok(true)
}

/// The health gates started while their node reboots, by node, each with the record it was
/// started from as written on the Node.
type Gates = HashMap<String, (String, Gate)>;

/// One pass: resume in-flight nodes, then start new ones. Returns when to look again at the
/// latest (a deadline), `None` for "only on the next change".
async fn tick(
    ctx: &Ctx,
    nodes: &reflector::Store<Node>,
    tasks: &mut HashMap<String, StepTask>,
    gates: &mut Gates,
    last_blockers: &mut Vec<String>,
    warned: &mut Warned,
) -> Result<Option<DateTime<Utc>>, Error> {
    ctx.leadership.ensure()?;
    ctx.gate_hub.sweep();
    // The lock before the Nodes: a node leaves the lock only after its final state is written,
    // so a node missing from this record shows that state in the views read after it.
    let record = ctx.lock_record.lock().expect("lock cache").clone();
    let pass = views(ctx, nodes, &record);
    let looked = pass.nodes();
    let now = Utc::now();
    warn_malformed(ctx, &looked, &record, warned).await;
    let acting: std::collections::BTreeSet<String> = tasks
        .iter()
        .filter(|(_, t)| !t.done.load(std::sync::atomic::Ordering::SeqCst))
        .map(|(n, _)| n.clone())
        .collect();
    if restore_lock(ctx, &record, &pass.all, now, &acting).await? {
        return Ok(None);
    }
    // Only the nodes in flight are looked up by name: an index of every Node per pass was a
    // cost in the cluster's size.
    let by_name: HashMap<&str, &NodeView> = pass.in_lock().map(|v| (v.name.as_str(), v)).collect();
    let mut next: Option<DateTime<Utc>> = None;
    let mut soon = |t: DateTime<Utc>| next = Some(next.map_or(t, |n: DateTime<Utc>| n.min(t)));
    // Under an operator's pause the nodes in flight go on to the end of their cycle (the pause
    // keeps their entries and lets rollboot remove them); under any other holder they wait.
    let resumes = record.foreign_holder(&ctx.lock_owner).is_none() || record.pause.is_some();
    ctx.metrics.set_in_flight(record.entries.len());
    if resumes {
        for (name, entry) in &record.entries {
            if tasks.contains_key(name) {
                continue;
            }
            let view = by_name.get(name.as_str()).copied();
            let step = decide::next_step(view, entry, &ctx.config, now);
            match run_step(ctx, name, view, step, tasks, gates).await {
                Ok(Some(t)) => soon(t),
                Ok(None) => {}
                // Logged where it happened; the watch brings the newer version and a new pass.
                Err(Error::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    // A gate started for a reboot that ended some other way (failed, freed, lock lost).
    gates.retain(|name, _| {
        resumes
            && record.entries.contains_key(name)
            && by_name.get(name.as_str()).is_some_and(|v| {
                matches!(v.state, Some(NodeState::Rebooting | NodeState::Verifying))
            })
    });
    // Released before the views are asked for again, so they are updated in place.
    drop(by_name);
    drop(looked);
    drop(pass);
    date_requests(ctx, &views(ctx, nodes, &record).nodes(), now).await;
    prefer_no_schedule(ctx, &views(ctx, nodes, &record).nodes()).await;
    return_to_service(ctx, &views(ctx, nodes, &record).nodes(), &record).await;
    // Steps above may have written: read both again, in the same order.
    let record = ctx.lock_record.lock().expect("lock cache").clone();
    let pass = views(ctx, nodes, &record);
    let looked = pass.nodes();
    let candidates = looked
        .iter()
        .any(|n| decide::is_candidate(n, &ctx.config) && !record.entries.contains_key(&n.name));
    if !candidates {
        observe::pass(ctx, &looked, &pass.states, &record, &[], now);
        return Ok(next);
    }
    let blocking = blocking_pods(ctx).await;
    let snap = Snapshot {
        nodes: &looked,
        in_flight: &record.entries,
        foreign_holder: record.foreign_holder(&ctx.lock_owner),
        blocking_pods: &blocking,
    };
    let mut alerts = Vec::new();
    if let Some(source) = &ctx.alerts {
        // Asked only when something could start, so an idle cluster costs Prometheus nothing.
        match source.check().await {
            Ok(names) if names.is_empty() => {}
            Ok(names) => alerts.push(decide::Blocker::Alerts { names }),
            Err(error) => alerts.push(decide::Blocker::AlertsUnknown {
                url: source.url().to_string(),
                error,
            }),
        }
    }
    // The instant of the decision, after every request above: a window that closed while
    // they were answered is seen closed. It is also the start recorded in the lock, so the
    // record says when the window was found open (millisecond precision, as the Node's
    // `state-since`, so the two compare exactly). Found by the chaos campaign: a start
    // decided at 39.99 s of a 40-second window was recorded at 40.000.
    let now =
        DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap_or_else(Utc::now);
    let mut blockers = decide::blockers(&snap, &ctx.config, now);
    blockers.extend(alerts);
    observe::pass(ctx, &looked, &pass.states, &record, &blockers, now);
    let texts: Vec<String> = blockers.iter().map(|b| b.to_string()).collect();
    if texts != *last_blockers {
        for b in &texts {
            tracing::info!(blocker = %b, "not starting new nodes");
        }
        *last_blockers = texts;
    }
    if !blockers.is_empty() {
        // A closed window opens on the clock: look again when it opens; other blockers clear
        // with a change we watch (or with the safety-net resync).
        let again = if blockers
            .iter()
            .any(|b| matches!(b, decide::Blocker::WindowClosed))
        {
            ctx.config
                .schedule()
                .openings(now, 1)
                .first()
                .map(|o| o.start.max(now + chrono::Duration::milliseconds(100)))
                .unwrap_or(now + chrono::Duration::seconds(1))
        } else if blockers.iter().any(|b| {
            matches!(
                b,
                decide::Blocker::Alerts { .. } | decide::Blocker::AlertsUnknown { .. }
            )
        }) {
            // Alerts are not watched: ask Prometheus again soon, while something waits.
            now + ALERTS_RECHECK
        } else {
            now + chrono::Duration::seconds(30)
        };
        soon(again);
        return Ok(next);
    }
    let picked: Vec<(String, Option<String>)> = decide::pick(&snap, &ctx.config)
        .into_iter()
        .map(|n| (n.name.clone(), decide::group_of(n, &ctx.config)))
        .collect();
    if !picked.is_empty() {
        ctx.wake.notify_one();
    }
    for (name, group) in picked {
        ctx.leadership.ensure()?;
        let entry = LockEntry {
            group,
            state: NodeState::Cordoning,
            since: now,
            leader: ctx.leadership.identity().to_string(),
        };
        let edit = ctx.lock_edits.lock().await;
        let current = ctx.lock_record.lock().expect("lock cache").clone();
        let n = name.clone();
        let written = lock::update(
            &ctx.lock,
            &ctx.lock_owner,
            current,
            move |e| {
                e.entry(n.clone()).or_insert_with(|| entry.clone());
            },
            &|| ctx.leadership.ensure(),
        )
        .await
        .map_err(|e| lock_error(ctx, e))?;
        set_lock(ctx, written);
        drop(edit);
        tracing::info!(node = %name, "starting maintenance");
        ctx.metrics.started();
        observe::started(ctx, &name, now);
    }
    Ok(next)
}

/// Writes the instant it sees them into the undated `reboot-requested` flags (`now` written by
/// hand), before anything is picked: each write fenced by the version it was decided from (a
/// refused one is decided again from the newer version on the next pass).
async fn date_requests(ctx: &Ctx, views: &[&NodeView], now: DateTime<Utc>) {
    for view in decide::undated_requests(views.iter().copied()) {
        let stamp = crate::time::annotation(now);
        let p = proto::patch(&[(proto::REBOOT_REQUESTED, Some(stamp.clone()))], None);
        match patch_node(ctx, view, "dating its reboot request", p).await {
            Ok(_) => {
                tracing::info!(node = %view.name, at = %stamp, "dated a hand-written reboot request with the instant it was first seen")
            }
            Err(Error::Conflict { .. }) => {}
            Err(e) => {
                tracing::warn!(node = %view.name, error = %e, "could not date a hand-written reboot request; it sorts last until dated")
            }
        }
    }
}

/// When the lock's foreign holder changes, says so once: a log line, and an Event on the lock
/// Lease naming the new holder (not once per pass).
fn report_holder(ctx: &Ctx, last: &mut Option<String>) {
    let (holder, paused) = {
        let r = ctx.lock_record.lock().expect("lock cache");
        (
            r.foreign_holder(&ctx.lock_owner).map(str::to_string),
            r.pause.is_some(),
        )
    };
    if holder == *last {
        return;
    }
    match &holder {
        Some(h) => {
            tracing::warn!(holder = %h, paused, lock = %ctx.config.lock.name, "the maintenance lock is held by another holder; nothing new starts");
            let in_flight = if paused {
                "the nodes in flight finish their cycle"
            } else {
                "the nodes in flight wait"
            };
            let note = format!(
                "The maintenance lock {}/{} is held by `{h}`; rollboot starts no new node until it is released ({in_flight})",
                ctx.config.lock.namespace, ctx.config.lock.name
            );
            ctx.events
                .publish_lease(&ctx.config.lock.name, true, "LockHeld", note);
        }
        None => {
            if let Some(prev) = last {
                tracing::info!(previous = %prev, lock = %ctx.config.lock.name, "the maintenance lock is no longer held by another holder");
                let note = format!("The maintenance lock is no longer held by `{prev}`");
                ctx.events
                    .publish_lease(&ctx.config.lock.name, false, "LockReleased", note);
            }
        }
    }
    *last = holder;
}

/// A lost leadership found by the lock's retry is the controller's own `NotLeader`; a lock
/// found deleted is remembered as deleted, so the next pass rebuilds its record from the Nodes.
fn lock_error(ctx: &Ctx, e: LockError) -> Error {
    match e {
        LockError::NotLeader(n) => Error::NotLeader(n),
        e @ LockError::Gone { .. } => {
            let cur = ctx.lock_record.lock().expect("lock cache").clone();
            set_lock(
                ctx,
                LockRecord::deleted(cur.version(), cur.known_in_flight().clone()),
            );
            ctx.wake.notify_one();
            Error::Lock(e)
        }
        e => Error::Lock(e),
    }
}

fn set_lock(ctx: &Ctx, r: LockRecord) {
    let mut cur = ctx.lock_record.lock().expect("lock cache");
    if r.version() >= cur.version() {
        *cur = r;
    }
}

/// For each blocking pod selector, how many pods match (a limit-1 list each).
async fn blocking_pods(ctx: &Ctx) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let api: Api<Pod> = Api::all(ctx.client.clone());
    for (text, sel) in ctx
        .config
        .blockers
        .pod_selectors
        .iter()
        .zip(ctx.config.blocking_pod_selectors())
    {
        let lp = ListParams::default().labels(&sel.to_string()).limit(1);
        let n = match api.list_metadata(&lp).await {
            Ok(l) => l.items.len(),
            Err(e) => {
                tracing::warn!(selector = %text, error = %e, "listing blocking pods; treating as blocked");
                1
            }
        };
        out.push((text.clone(), n));
    }
    out
}

/// Patches a Node after re-checking leadership, on condition that it is still the version
/// `view` was parsed from (the step was decided from it); remembers the result.
///
/// The leadership check is fencing by time, and it happens before the request leaves: a
/// replica paused (or whose request sat in the network) for longer than the lease after that
/// check could otherwise land its write after a newer leader acted on the same Node. The
/// resourceVersion precondition closes that gap: any write to the Node since `view`, by anyone,
/// makes the API server refuse this one with 409, answered here as [`Error::Conflict`].
async fn patch_node(
    ctx: &Ctx,
    view: &NodeView,
    what: &str,
    patch: serde_json::Value,
) -> Result<Node, Error> {
    let node = view.name.as_str();
    debug_assert!(!view.resource_version.is_empty(), "a view of a stored Node");
    let patch = proto::fenced(patch, &view.resource_version);
    ctx.leadership.ensure()?;
    let api: Api<Node> = Api::all(ctx.client.clone());
    let n = match api
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(n) => n,
        Err(kube::Error::Api(e)) if e.code == 409 => {
            tracing::info!(
                node,
                state = view.state.map_or("none", NodeState::as_str),
                resource_version = %view.resource_version,
                what,
                "the node changed since this step was decided; not acting, deciding again from the newer version"
            );
            return Err(Error::Conflict {
                node: node.into(),
                what: what.into(),
                rv: view.resource_version.clone(),
            });
        }
        Err(source) => {
            return Err(Error::Node {
                node: node.into(),
                what: what.into(),
                source,
            })
        }
    };
    observe::written(ctx, view, &n);
    ctx.written
        .lock()
        .expect("written cache")
        .insert(node.into(), n.clone());
    Ok(n)
}

async fn free(ctx: &Ctx, node: &str) -> Result<(), Error> {
    ctx.leadership.ensure()?;
    let _edit = ctx.lock_edits.lock().await;
    let current = ctx.lock_record.lock().expect("lock cache").clone();
    let name = node.to_string();
    let r = lock::update(
        &ctx.lock,
        &ctx.lock_owner,
        current,
        move |e| {
            e.remove(&name);
        },
        &|| ctx.leadership.ensure(),
    )
    .await
    .map_err(|e| lock_error(ctx, e))?;
    set_lock(ctx, r);
    ctx.wake.notify_one();
    Ok(())
}

/// The failed nodes, `node` (just marked failed) included, counted from the Nodes as known now
/// (the state parsed as everywhere else, so the count agrees with the failures blocker).
fn failed_with(ctx: &Ctx, node: &str) -> usize {
    1 + ctx
        .nodes
        .state()
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some(node))
        .filter(|n| NodeView::from_node(n).state == Some(NodeState::Failed))
        .count()
}

async fn fail(ctx: &Ctx, view: &NodeView, reason: String) -> Result<(), Error> {
    let what = decide::failure_event_reason(view.state);
    fail_as(ctx, view, reason, what).await
}

/// [`fail`] with the Event reason `what` (what failed).
async fn fail_as(
    ctx: &Ctx,
    view: &NodeView,
    reason: String,
    what: &'static str,
) -> Result<(), Error> {
    let node = view.name.as_str();
    let mut ann = proto::state_annotations(NodeState::Failed, Utc::now());
    ann.push((proto::FAILURE_REASON, Some(reason.clone())));
    patch_node(ctx, view, "marking it failed", proto::patch(&ann, None)).await?;
    let failed = failed_with(ctx, node);
    let outcome = decide::after_failure(failed, &ctx.config);
    tracing::error!(node, state = "failed", reason = %reason, "node failed; {outcome}");
    ctx.metrics.failed();
    ctx.events
        .publish(node, true, what, format!("{reason}; {outcome}"))
        .await;
    free(ctx, node).await
}

/// After a write refused with 409 in a task (the end of a drain or of a health gate): waits,
/// bounded, until the controller knows a version of `node` newer than the refused `rv`, so the
/// pass the task then wakes decides from it instead of refusing itself again in a loop. (A step
/// refused in the pass itself needs no wait: the watch's event for the newer version wakes the
/// next pass.)
async fn await_newer(ctx: &Ctx, node: &str, rv: &str) {
    let refused: u64 = rv.parse().unwrap_or(0);
    let mut seq = ctx.node_seq.clone();
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            seq.borrow_and_update();
            let newer = current(ctx, node)
                .is_none_or(|v| v.resource_version.parse::<u64>().unwrap_or(0) > refused);
            if newer || seq.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
}

/// The health gate record written with `state: rebooting`, if any.
fn gate_record(view: &NodeView) -> Option<GateRecord> {
    serde_json::from_str(view.health_gate.as_deref()?).ok()
}

/// The node as known now, if it is still in `state`: a step decided at the end of a long wait
/// is decided from this view, and its write carries this view's resourceVersion.
fn still(ctx: &Ctx, node: &str, state: NodeState) -> Option<NodeView> {
    current(ctx, node).filter(|v| v.state == Some(state))
}

/// Carries out one step; returns a deadline to look again at, if any.
async fn run_step(
    ctx: &Ctx,
    name: &str,
    view: Option<&NodeView>,
    step: Step,
    tasks: &mut HashMap<String, StepTask>,
    gates: &mut Gates,
) -> Result<Option<DateTime<Utc>>, Error> {
    let now = Utc::now();
    match step {
        Step::Cordon { record_cordoned_by } => {
            let mut ann = proto::state_annotations(NodeState::Cordoning, now);
            if record_cordoned_by {
                ann.push((
                    proto::CORDONED_BY,
                    Some(ctx.leadership.identity().to_string()),
                ));
            }
            ann.push((proto::FAILURE_REASON, None));
            // A cycle starts clean: no token, boot ID or health gate of an earlier one (or of a
            // forged state) is left for the agent or for a later step to act on.
            for k in proto::CYCLE_KEYS {
                ann.push((k, None));
            }
            let view = view.expect("a cordon step has a node");
            patch_node(ctx, view, "cordoning", proto::patch(&ann, Some(true))).await?;
            tracing::info!(
                node = name,
                state = "cordoning",
                operator_cordoned = !record_cordoned_by,
                "cordoned"
            );
            ctx.events
                .publish(
                    name,
                    false,
                    "Cordoned",
                    if record_cordoned_by {
                        "cordoned for a reboot".into()
                    } else {
                        "already cordoned by an operator; it stays cordoned after the reboot".into()
                    },
                )
                .await;
            ctx.wake.notify_one();
            Ok(None)
        }
        Step::Drain { .. } => {
            let view = view.expect("a drain step has a node");
            let since = if view.state != Some(NodeState::Draining) {
                patch_node(
                    ctx,
                    view,
                    "marking it draining",
                    proto::patch(&proto::state_annotations(NodeState::Draining, now), None),
                )
                .await?;
                tracing::info!(node = name, state = "draining", "draining");
                now
            } else {
                view.state_since.unwrap_or(now)
            };
            let deadline = since + ctx.config.drain.timeout.to_chrono();
            let boot_id = view.boot_id.clone();
            let ctx2 = ctx.clone();
            let node = name.to_string();
            tasks.insert(
                name.into(),
                StepTask::spawn(ctx.wake.clone(), async move {
                    let r = drain_then_request(&ctx2, &node, &boot_id, deadline).await;
                    match r {
                        Ok(()) | Err(Error::NotLeader(_)) => {}
                        // Logged where it happened; decided again from the newer version.
                        Err(Error::Conflict { rv, .. }) => await_newer(&ctx2, &node, &rv).await,
                        Err(Error::Drain(e)) if !matches!(e, DrainError::Api { .. } | DrainError::NotLeader(_)) => {
                            match still(&ctx2, &node, NodeState::Draining) {
                                Some(view) => match fail(&ctx2, &view, e.to_string()).await {
                                    Ok(()) | Err(Error::NotLeader(_)) => {}
                                    Err(Error::Conflict { rv, .. }) => await_newer(&ctx2, &node, &rv).await,
                                    Err(e) => tracing::warn!(node, error = %e, "could not mark the node failed"),
                                },
                                None => tracing::info!(node, error = %e, "drain ended, but the node is no longer draining; not marking it failed"),
                            }
                        }
                        Err(e) => {
                            ctx2.metrics.error(e.metric_label());
                            tracing::warn!(node, error = %e, "drain interrupted; it resumes on the next pass");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }),
            );
            Ok(None)
        }
        Step::RequestReboot { attempt } => {
            let view = view.expect("a reboot step has a node");
            // Attempt 1 here is the request after the afterDrain hooks passed.
            if attempt > 1 {
                tracing::warn!(
                    node = name,
                    token = view.reboot_token.as_deref().unwrap_or_default(),
                    attempt,
                    "the agent reports its acknowledged reboot token lost (it started again on the same boot); issuing a new one"
                );
            }
            request_reboot(ctx, view, &view.boot_id, view.health_gate.clone(), attempt).await?;
            Ok(None)
        }
        Step::AwaitReboot { deadline } => {
            // The health gate's watches start now, so their lists are done by the time the
            // node is back; the gate decides only then, from what they see at that moment.
            // Started again only when the record changed: compared as written, since parsing
            // it (the labels of every evicted pod) on every pass was a cost of its own.
            let text = view.and_then(|v| v.health_gate.as_deref());
            if let Some(text) = text.filter(|t| gates.get(name).is_none_or(|(g, _)| g != t)) {
                if let Ok(record) = serde_json::from_str::<GateRecord>(text) {
                    let gate = Gate::start(&ctx.gate_hub, &record);
                    gates.insert(name.into(), (text.to_string(), gate));
                }
            }
            Ok(Some(deadline))
        }
        Step::MarkVerifying => {
            // `verifying` and the uncordon in one write: the state is on the Node no later
            // than the act, and a successor finds either both or neither.
            let view = view.expect("a verify step has a node");
            // With afterReboot hooks the node stays cordoned until they pass.
            let ours = view.cordoned_by.is_some()
                && view.unschedulable
                && !crate::hooks::decide::configured(
                    &ctx.config,
                    crate::config::Phase::AfterReboot,
                );
            let mut ann = proto::state_annotations(NodeState::Verifying, now);
            if ours {
                ann.push((proto::CORDONED_BY, None));
            }
            patch_node(
                ctx,
                view,
                "marking it verifying",
                proto::patch(&ann, ours.then_some(false)),
            )
            .await?;
            tracing::info!(
                node = name,
                state = "verifying",
                uncordoned = ours,
                "back with a new boot ID and Ready"
            );
            ctx.wake.notify_one();
            Ok(None)
        }
        Step::Uncordon => {
            patch_node(
                ctx,
                view.expect("an uncordon step has a node"),
                "uncordoning",
                proto::patch(&[(proto::CORDONED_BY, None)], Some(false)),
            )
            .await?;
            tracing::info!(node = name, state = "verifying", "uncordoned");
            ctx.wake.notify_one();
            Ok(None)
        }
        Step::HealthGate { deadline } => {
            let record = view.and_then(gate_record).unwrap_or_default();
            let gate = match gates.remove(name) {
                Some((_, g)) if *g.record() == record => g,
                _ => Gate::start(&ctx.gate_hub, &record),
            };
            let ctx2 = ctx.clone();
            let node = name.to_string();
            tasks.insert(
                name.into(),
                StepTask::spawn(ctx.wake.clone(), async move {
                    let passed = gate.wait(deadline, &node, &ctx2.events).await;
                    // Decided now, from the node as it is now: the gate may have taken minutes.
                    let Some(view) = still(&ctx2, &node, NodeState::Verifying) else {
                        tracing::info!(
                            node,
                            "health gate ended, but the node is no longer verifying; not acting"
                        );
                        return;
                    };
                    let r = match passed {
                        Ok(()) => finish(&ctx2, &view).await,
                        Err(why) => {
                            let within = ctx2.config.health_gate.timeout;
                            let reason =
                                format!("the health gate did not pass within {within}: {why}");
                            fail(&ctx2, &view, reason).await
                        }
                    };
                    match r {
                        Ok(()) | Err(Error::NotLeader(_)) => {}
                        Err(Error::Conflict { rv, .. }) => await_newer(&ctx2, &node, &rv).await,
                        Err(e) => {
                            tracing::warn!(node, error = %e, "finishing the node");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }),
            );
            Ok(None)
        }
        // The watch brings the taint's arrival (a new pass); the bound is the fallback.
        Step::Settle { until } => Ok(Some(until)),
        // Looked at again on every pass the watch brings: debug, not to repeat it at info.
        Step::Hold { until, why } => {
            tracing::debug!(node = name, %until, why, "its slot in the maintenance lock stays taken");
            Ok(Some(until))
        }
        Step::Fail(reason) => {
            fail(ctx, view.expect("a fail step has a node"), reason).await?;
            Ok(None)
        }
        Step::FailHook { phase, reason } => {
            let view = view.expect("a fail step has a node");
            ctx.metrics.hook_result(phase.metric_label(), "failed");
            fail_as(ctx, view, reason, "HookFailed").await?;
            Ok(None)
        }
        Step::Hook { phase, action } => {
            let view = view.expect("a hook step has a node");
            hook_step(ctx, view, phase, action, tasks).await
        }
        Step::Free(reason) => {
            tracing::info!(node = name, reason = %reason, "freeing its slot in the maintenance lock");
            if view.is_none() {
                ctx.events.publish(name, true, "LockEntryFreed", format!("node {name} is in the maintenance lock but {reason}; its slot is freed")).await;
            }
            free(ctx, name).await?;
            Ok(None)
        }
    }
}

async fn drain_then_request(
    ctx: &Ctx,
    node: &str,
    boot_id: &str,
    deadline: DateTime<Utc>,
) -> Result<(), Error> {
    let api = KubeDrain {
        client: ctx.client.clone(),
        evict_client: ctx.evict_client.clone(),
        events: ctx.events.clone(),
        node: node.into(),
        metrics: Some(ctx.metrics.clone()),
        budgets_from: Some(ctx.gate_hub.clone() as Arc<dyn drain::BudgetSource>),
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
    // A node uncordoned under the drain (by an operator, or by anyone) is not drained on: the
    // drain stops at once and the next pass starts the cycle over from the cordon.
    let uncordoned = async {
        let mut seq = ctx.node_seq.clone();
        loop {
            seq.borrow_and_update();
            if current(ctx, node).is_some_and(|v| !v.unschedulable) {
                return;
            }
            if seq.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    };
    let drained: Drained = tokio::select! {
        r = drain => r?,
        _ = uncordoned => {
            tracing::warn!(node, "the node was uncordoned during its drain; stopping the drain, its cycle starts over from the cordon");
            return Ok(());
        }
    };
    ctx.metrics.evicted(drained.evicted.len());
    let gate = GateRecord {
        budgets: Vec::new(),
        pods: drained.pods.into_iter().collect(),
        owners: drained.owners.into_iter().collect(),
        pod_exit_ms: drained
            .pod_exit_seconds
            .map(|s| (s * 1000.0).round() as u64),
    };
    // Decided now, from the node as it is now (the drain may have taken minutes): still
    // draining, as far as this replica knows; anything newer makes the write a 409.
    let Some(view) = still(ctx, node, NodeState::Draining) else {
        tracing::info!(
            node,
            "drained, but the node is no longer draining; not requesting the reboot"
        );
        return Ok(());
    };
    if crate::hooks::decide::configured(&ctx.config, Phase::AfterDrain) {
        // The afterDrain phase begins with the drain's end, in one write with the health
        // gate's record; its hooks (and `drain.settle`) then come before the reboot.
        if let Err(why) = decide::may_request_reboot(&view) {
            tracing::warn!(node, "{why}");
            ctx.wake.notify_one();
            return Ok(());
        }
        let mut p =
            crate::hooks::decide::begin_patch(Phase::AfterDrain, &ctx.config, &view, Utc::now());
        p["metadata"]["annotations"][proto::HEALTH_GATE] =
            serde_json::Value::String(serde_json::to_string(&gate).expect("gate record"));
        patch_node(
            ctx,
            &view,
            "recording the drain's end (afterDrain hooks)",
            p,
        )
        .await?;
        tracing::info!(node, phase = %Phase::AfterDrain, "drained; the afterDrain hooks come before the reboot");
        ctx.wake.notify_one();
        return Ok(());
    }
    request_reboot(
        ctx,
        &view,
        boot_id,
        Some(serde_json::to_string(&gate).expect("gate record")),
        1,
    )
    .await
}

/// Writes `state: rebooting` with a fresh token (request `attempt` of the cycle), on condition
/// that the Node is still the version `view` shows and that it is cordoned.
async fn request_reboot(
    ctx: &Ctx,
    view: &NodeView,
    boot_id: &str,
    gate: Option<String>,
    attempt: u32,
) -> Result<(), Error> {
    let node = view.name.as_str();
    if let Err(why) = decide::may_request_reboot(view) {
        tracing::warn!(node, "{why}");
        ctx.wake.notify_one();
        return Ok(());
    }
    let now = Utc::now();
    let token = Token::new(now, rand::random());
    let mut ann = proto::state_annotations(NodeState::Rebooting, now);
    ann.push((proto::BOOT_ID_BEFORE, Some(boot_id.to_string())));
    ann.push((proto::REBOOT, Some(token.text.clone())));
    ann.push((proto::REBOOT_ATTEMPT, Some(attempt.to_string())));
    ann.push((proto::HEALTH_GATE, gate));
    patch_node(ctx, view, "requesting the reboot", proto::patch(&ann, None)).await?;
    tracing::info!(node, token = %token.text, attempt, state = "rebooting", boot_id, "reboot requested");
    // A new token is its own Event (a repeat of the first would keep the first's note).
    let (reason, note) = if attempt == 1 {
        (
            "RebootRequested",
            format!("drained; asked the agent to reboot (token {})", token.text),
        )
    } else {
        (
            "RebootRequestedAgain",
            format!(
                "the agent's previous token was lost before the host rebooted; asked again with \
                 a new token {} (attempt {attempt} of {})",
                token.text,
                decide::REBOOT_ATTEMPTS
            ),
        )
    };
    ctx.events
        .publish_action(
            node,
            false,
            reason,
            &format!("RequestReboot {attempt}"),
            note,
        )
        .await;
    ctx.wake.notify_one();
    Ok(())
}

/// When `node`'s cycle started, as the maintenance lock records it (as last read or written).
fn cycle_start(ctx: &Ctx, node: &str) -> Option<DateTime<Utc>> {
    ctx.lock_record
        .lock()
        .expect("lock cache")
        .entries
        .get(node)
        .map(|e| e.since)
}

async fn finish(ctx: &Ctx, view: &NodeView) -> Result<(), Error> {
    let node = view.name.as_str();
    let now = Utc::now();
    let mut ann = proto::state_annotations(NodeState::Done, now);
    // The history, in the same fenced write as `done`: a cycle is counted once, as the write
    // that ends it is made once. Its parts are timed from what the cycle wrote: its start in
    // the lock, the token's instant, the instant it was marked back (`verifying`).
    let start = cycle_start(ctx, node);
    let requested = view
        .reboot_token
        .as_deref()
        .and_then(Token::parse)
        .map(|t| t.issued);
    let back = view
        .state_since
        .filter(|_| view.state == Some(NodeState::Verifying));
    let pod_exit = gate_record(view)
        .and_then(|g| g.pod_exit_ms)
        .map(|ms| ms as f64 / 1000.0);
    let cycle = proto::LastCycle::measure(start, requested, back, now, pod_exit);
    ann.extend(view.history.next(
        now,
        view.boot_id_before.as_deref().unwrap_or_default(),
        &view.boot_id,
        &cycle,
    ));
    for k in [
        proto::REBOOT_REQUIRED,
        proto::REBOOT_REQUIRED_REASON,
        proto::REBOOT_REQUESTED,
        proto::REBOOT_REQUESTED_REASON,
        proto::HEALTH_GATE,
        proto::BOOT_ID_BEFORE,
    ] {
        ann.push((k, None));
    }
    patch_node(ctx, view, "marking it done", proto::patch(&ann, None)).await?;
    let after_done = crate::hooks::decide::configured(&ctx.config, Phase::AfterDone);
    tracing::info!(node, state = "done", "reboot cycle done");
    ctx.metrics.done();
    ctx.events
        .publish(
            node,
            false,
            "RebootDone",
            "rebooted, verified and healthy again".into(),
        )
        .await;
    if after_done {
        // The slot is freed once the afterDone hooks are done (the next pass).
        ctx.wake.notify_one();
        return Ok(());
    }
    free(ctx, node).await
}

/// Puts or takes off `hooks.preferNoScheduleTaint` where it must change; each write fenced by
/// the version it was decided from (a refused one is decided again on the next pass).
async fn prefer_no_schedule(ctx: &Ctx, views: &[&NodeView]) {
    let changes =
        crate::hooks::decide::prefer_no_schedule_changes(views.iter().copied(), &ctx.config);
    for (view, taints) in changes {
        let p = proto::with_taints(proto::patch(&[], None), &taints);
        match patch_node(ctx, view, "setting its PreferNoSchedule taint", p).await {
            Ok(_) => {
                tracing::info!(node = %view.name, flagged = view.flagged(), "PreferNoSchedule taint (hooks.preferNoScheduleTaint) updated")
            }
            Err(Error::Conflict { .. }) => {}
            Err(e) => {
                tracing::warn!(node = %view.name, error = %e, "could not update the PreferNoSchedule taint")
            }
        }
    }
}

/// Uncordons the failed nodes `failures.returnToService` returns to service (see
/// [`decide::returning_to_service`]): their `failed` record and reason stay, `cordoned-by` goes
/// with the cordon, so they no longer hold a slot. Each write fenced by the version it was
/// decided from (a refused one is decided again on the next pass).
async fn return_to_service(ctx: &Ctx, views: &[&NodeView], record: &LockRecord) {
    for view in decide::returning_to_service(views, &record.entries, &ctx.config) {
        let p = proto::patch(&[(proto::CORDONED_BY, None)], Some(false));
        match patch_node(ctx, view, "returning it to service", p).await {
            Ok(_) => {
                let reason = view
                    .failure_reason
                    .as_deref()
                    .unwrap_or("no reason recorded");
                tracing::info!(node = %view.name, state = "failed", reason, "returned to service: uncordoned, its failed record kept (failures.returnToService)");
                ctx.events
                    .publish(
                        &view.name,
                        false,
                        "ReturnedToService",
                        format!(
                            "failed ({reason}), its host is up and Ready: uncordoned \
                             (failures.returnToService); it keeps its failed record and no \
                             longer holds one of maxNodes' slots; {}",
                            decide::CLEAR_FAILED
                        ),
                    )
                    .await;
            }
            Err(Error::Conflict { .. }) => {}
            Err(e) => {
                tracing::warn!(node = %view.name, error = %e, "could not return a failed node to service")
            }
        }
    }
}

/// Carries out a hook step: writes what it records (fenced by the view it was decided from),
/// then acts. A blocking webhook's call runs as the node's task, which records the answer.
async fn hook_step(
    ctx: &Ctx,
    view: &NodeView,
    phase: Phase,
    action: Action,
    tasks: &mut HashMap<String, StepTask>,
) -> Result<Option<DateTime<Utc>>, Error> {
    use crate::hooks::decide as hd;
    let node = view.name.as_str();
    let now = Utc::now();
    match action {
        Action::Begin => {
            let p = hd::begin_patch(phase, &ctx.config, view, now);
            patch_node(ctx, view, &format!("beginning its {phase} hooks"), p).await?;
            tracing::info!(node, phase = %phase, "hooks: phase begun (its labels and taints written)");
        }
        Action::Fire(names) => {
            let tokens: Vec<(String, String)> = names
                .iter()
                .map(|n| (n.clone(), Token::new(now, rand::random()).text))
                .collect();
            let p = hd::fire_patch(phase, view, now, &tokens);
            let written =
                patch_node(ctx, view, &format!("recording its {phase} webhooks"), p).await?;
            let written = NodeView::from_node(&written);
            for (name, token) in tokens {
                let Some(w) = ctx.config.hooks.phase(phase).webhook(&name) else {
                    continue;
                };
                let body = hd::body(phase, w, &written, &token, 1, now);
                ctx.firer.fire(phase, w.clone(), body);
            }
        }
        Action::Call {
            name,
            attempt,
            token,
        } => {
            let Some(w) = ctx.config.hooks.phase(phase).webhook(&name).cloned() else {
                return Ok(None);
            };
            let token = token.unwrap_or_else(|| Token::new(now, rand::random()).text);
            // Recorded before it is sent: a successor sees this attempt as made, and never
            // sends it again.
            let p = hd::call_patch(phase, view, now, &name, &token, attempt);
            let written = patch_node(
                ctx,
                view,
                &format!("recording attempt {attempt} of webhook {name}"),
                p,
            )
            .await?;
            let written = NodeView::from_node(&written);
            let body = hd::body(phase, &w, &written, &token, attempt, now);
            tracing::info!(node, phase = %phase, hook = %name, token, attempt, "asking a blocking webhook");
            let ctx2 = ctx.clone();
            let node = node.to_string();
            tasks.insert(
                node.clone(),
                StepTask::spawn(ctx.wake.clone(), async move {
                    let outcome = crate::hooks::call::post(&w, &body).await;
                    ctx2.metrics
                        .hook_result(phase.metric_label(), outcome.metric_label());
                    let answer = crate::hooks::Answer {
                        yes: outcome.yes(),
                        detail: outcome.detail(),
                        at: Utc::now(),
                    };
                    if answer.yes {
                        tracing::info!(node, phase = %phase, hook = %name, token, attempt, answer = %answer.detail, "the webhook said yes");
                    } else {
                        tracing::warn!(node, phase = %phase, hook = %name, token, attempt, answer = %answer.detail, "the webhook did not say yes; the node is held");
                    }
                    record_answer(&ctx2, &node, phase, &name, &token, attempt, answer).await;
                }),
            );
        }
        Action::Pass => {
            let p = hd::pass_patch(phase, &ctx.config, view, now);
            patch_node(
                ctx,
                view,
                &format!("recording its {phase} hooks as passed"),
                p,
            )
            .await?;
            ctx.metrics.hook_result(phase.metric_label(), "passed");
            tracing::info!(node, phase = %phase, "hooks: phase passed");
        }
    }
    ctx.wake.notify_one();
    Ok(None)
}

/// Writes a blocking webhook's answer on the Node, if the Node still shows that attempt
/// unanswered; a write refused with 409 is tried again on the newer version, a few times. An
/// answer that cannot be written is lost: the attempt then counts as unanswered, and the next
/// one is sent after its backoff (never the same one again).
async fn record_answer(
    ctx: &Ctx,
    node: &str,
    phase: Phase,
    name: &str,
    token: &str,
    attempt: u32,
    answer: crate::hooks::Answer,
) {
    for _ in 0..5 {
        let Some(view) = current(ctx, node) else {
            return;
        };
        let Some(p) =
            crate::hooks::decide::answer_patch(phase, &view, name, token, attempt, answer.clone())
        else {
            tracing::info!(node, phase = %phase, hook = %name, attempt, "the node no longer waits for this answer; not recording it");
            return;
        };
        match patch_node(
            ctx,
            &view,
            &format!("recording the answer of webhook {name}"),
            p,
        )
        .await
        {
            Ok(_) => return,
            Err(Error::Conflict { rv, .. }) => await_newer(ctx, node, &rv).await,
            Err(Error::NotLeader(_)) => return,
            Err(e) => {
                tracing::warn!(node, error = %e, "recording a webhook's answer");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// How often the config file is checked for changes.
const CONFIG_CHECK: Duration = Duration::from_secs(10);

fn file_stamp(path: &std::path::Path) -> Option<(std::time::SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Runs a controller replica from a config file: when the file changes to a valid config (a
/// ConfigMap update), the replica stops gracefully (releasing its Lease) and starts again with
/// the new settings; an invalid change is logged and ignored. Returns when `shutdown` resolves.
pub async fn run_with_config_file(
    kube_config: kube::Config,
    path: std::path::PathBuf,
    config: Config,
    identity: String,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let _stop = Task(tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    }));
    let mut config = Arc::new(config);
    let mut stamp = file_stamp(&path);
    loop {
        let (reload_tx, reload_rx) = tokio::sync::oneshot::channel::<()>();
        let mut outer = stop_rx.clone();
        let inner = async move {
            tokio::select! {
                _ = outer.wait_for(|s| *s) => {}
                _ = reload_rx => {}
            }
        };
        let replica = run(
            kube_config.clone(),
            config.clone(),
            identity.clone(),
            metrics.clone(),
            inner,
        );
        tokio::pin!(replica);
        let mut reload_tx = Some(reload_tx);
        let mut next = None;
        loop {
            tokio::select! {
                r = &mut replica => { r?; break }
                _ = tokio::time::sleep(CONFIG_CHECK), if reload_tx.is_some() => {
                    let now = file_stamp(&path);
                    if now == stamp {
                        continue;
                    }
                    stamp = now;
                    match crate::config::load_file(&path) {
                        Ok(c) => {
                            tracing::info!(file = %path.display(), "config changed; restarting with it");
                            next = Some(c);
                            if let Some(t) = reload_tx.take() {
                                let _ = t.send(());
                            }
                        }
                        Err(e) => tracing::error!(file = %path.display(), error = %e, "config changed but is invalid; keeping the running one"),
                    }
                }
            }
        }
        match next {
            Some(c) if !*stop_rx.borrow() => config = Arc::new(c),
            _ => return Ok(()),
        }
    }
}
