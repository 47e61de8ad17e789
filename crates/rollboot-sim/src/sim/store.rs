//! The object store: every object as its serialized JSON plus a parsed [`Index`], one global
//! resourceVersion counter (like etcd's revision), and per-resource event streams. Kinds that
//! share a storage ([`Kind::storage`]: events.k8s.io/v1 and core/v1 Events) share one table.
//!
//! Owns consistency: every write happens under one lock, gets the next revision, and is
//! published (to a bounded per-resource ring that lets a watch resume from a recent revision,
//! to the per-resource broadcast that live watches read, and to the world's stream) before the
//! lock is released, so a watch started from a list never misses or repeats an event. A write
//! may be made ready outside the lock ([`Prepared`]): the whole object serialized and indexed,
//! or a status or one number spliced into the stored bytes, which stores the same bytes and
//! index. It must never decide API semantics (see `api.rs`) nor block on I/O while holding the
//! lock.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::broadcast;

use super::index::Index;
use super::kinds::Kind;

/// The Node labels kube-apiserver copies onto a Pod bound to it (PodTopologyLabels).
pub const TOPOLOGY_LABELS: [&str; 2] = [
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// created
    Added,
    /// changed
    Modified,
    /// removed
    Deleted,
}

impl EventType {
    /// The watch event `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One stored object: its canonical JSON and its index.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Canonical JSON, as served.
    pub bytes: Bytes,
    /// Parsed view for selectors and the world.
    pub idx: Arc<Index>,
}

impl Entry {
    /// The entry of `value` (complete, its resourceVersion set): serialized and indexed.
    fn of(value: &Value) -> Entry {
        Entry {
            bytes: Bytes::from(serde_json::to_vec(value).unwrap_or_default()),
            idx: Arc::new(Index::of(value)),
        }
    }

    /// The object as a JSON value (parses the bytes).
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }

    /// The object's `status` (`Null` without one), parsing only that where it is the last
    /// member (see [`Prepared::with_status`]).
    pub fn status(&self) -> Value {
        match status_at(&self.bytes) {
            Some(at) => {
                serde_json::from_slice(&self.bytes[at..self.bytes.len() - 1]).unwrap_or(Value::Null)
            }
            None => self.value()["status"].take(),
        }
    }
}

/// What a [`Prepared`] object carries where its resourceVersion goes: a string no client
/// writes (it starts and ends with NUL), so that where it lands in the serialization is
/// found by a search, and checked to be the only place.
const RV_PLACEHOLDER: &str = "\u{0}rollboot-sim-rv\u{0}";

/// [`RV_PLACEHOLDER`] as serde_json writes it, quotes included.
const RV_PLACEHOLDER_JSON: &[u8] = b"\"\\u0000rollboot-sim-rv\\u0000\"";

/// An object's next version made ready outside the store lock: serialized and indexed, with a
/// placeholder where the revision goes, which [`Inner::put_prepared`] splices in under the
/// lock. Parsing, serializing and indexing objects under the lock serialized the simulated
/// cluster on it at 5,000 nodes (held two thirds of a rollout, its waits the idle core).
pub struct Prepared {
    kind: Kind,
    body: Body,
    idx: Index,
}

/// What a [`Prepared`] write stores, but for its revision.
enum Body {
    /// Its serialization, [`RV_PLACEHOLDER_JSON`] found there once, starting at `at`; with the
    /// object's value where the write was made from one (a splice has none: where a pod's
    /// binding needs it, it is read from the bytes).
    Serialized {
        bytes: Vec<u8>,
        at: usize,
        value: Option<Value>,
    },
    /// Its value, whose serialization carried the placeholder other than once (an object whose
    /// own strings carry it): serialized again at its revision.
    Value(Value),
}

impl Prepared {
    /// Serializes and indexes `value` (canonical, complete but for its resourceVersion) for a
    /// write of `kind`. Pure: no store state is read.
    pub fn new(kind: Kind, mut value: Value) -> Prepared {
        let given = std::mem::replace(
            &mut value["metadata"]["resourceVersion"],
            Value::String(RV_PLACEHOLDER.to_string()),
        );
        let bytes = serde_json::to_vec(&value).unwrap_or_default();
        static FINDER: OnceLock<memchr::memmem::Finder<'static>> = OnceLock::new();
        let finder = FINDER.get_or_init(|| memchr::memmem::Finder::new(RV_PLACEHOLDER_JSON));
        let at = only(finder.find_iter(&bytes));
        let idx = Index::of(&value);
        value["metadata"]["resourceVersion"] = given;
        let body = match at {
            Some(at) => Body::Serialized {
                bytes,
                at,
                value: Some(value),
            },
            None => Body::Value(value),
        };
        Prepared { kind, body, idx }
    }

    /// The next version of `old` (a stored object of `kind`) with `status` for its status and
    /// nothing else changed: the new status serialized into the stored bytes in place of the
    /// old one, the placeholder in place of the stored revision, the index the old one with
    /// what it reads of a status recomputed. Neither the object nor its index is rebuilt
    /// whole (a budget's or a workload's status refresh parsed, serialized and indexed the
    /// whole object: a sixth of a 5,000-node run, in the world's one task). Where the stored
    /// bytes do not end with a top-level `status`, or carry the stored revision more than
    /// once, the object is parsed and made ready whole, as [`Prepared::new`] does. Pure.
    pub fn with_status(kind: Kind, old: &Entry, status: Value) -> Prepared {
        let spliced = status_at(&old.bytes).and_then(|start| {
            // serde_json writes to a Vec without failing.
            let text = serde_json::to_vec(&status).unwrap_or_default();
            splice(old, vec![(start, old.bytes.len() - 1 - start, text)])
        });
        Prepared::of_splice(
            kind,
            old,
            spliced,
            |v| v["status"] = status.clone(),
            |idx| idx.set_status(kind, &status),
        )
    }

    /// The next version of `old`, an object being deleted, with `grace` for its
    /// `metadata.deletionGracePeriodSeconds` and nothing else changed (a pod's last state, as
    /// the kubelet's final delete leaves it): spliced into the stored bytes as
    /// [`Prepared::with_status`] splices a status, or made ready whole where the stored number
    /// is not found there exactly once. Pure.
    pub fn with_deletion_grace(kind: Kind, old: &Entry, grace: i64) -> Prepared {
        const FIELD: &str = "\"deletionGracePeriodSeconds\":";
        let spliced = old.idx.deletion_grace.and_then(|was| {
            let stored = format!("{FIELD}{was}");
            // The number ends there: `:3` is not the start of `:30`.
            let at = find_once(&old.bytes, stored.as_bytes(), |next| {
                matches!(next, Some(b',' | b'}'))
            })?;
            splice(
                old,
                vec![(at, stored.len(), format!("{FIELD}{grace}").into_bytes())],
            )
        });
        Prepared::of_splice(
            kind,
            old,
            spliced,
            |v| v["metadata"]["deletionGracePeriodSeconds"] = Value::from(grace),
            |idx| idx.deletion_grace = Some(grace),
        )
    }

    /// The next version of `old` from a splice of its bytes (`spliced`, as [`splice`] gives
    /// it), its index the old one with `index` applied; where no splice could be made, `old`
    /// parsed, with `change` made, and made ready whole.
    fn of_splice(
        kind: Kind,
        old: &Entry,
        spliced: Option<(Vec<u8>, usize)>,
        change: impl FnOnce(&mut Value),
        index: impl FnOnce(&mut Index),
    ) -> Prepared {
        let Some((bytes, placeholder)) = spliced else {
            let mut v = old.value();
            change(&mut v);
            return Prepared::new(kind, v);
        };
        let mut idx = Index::clone(&old.idx);
        index(&mut idx);
        Prepared {
            kind,
            body: Body::Serialized {
                bytes,
                at: placeholder,
                value: None,
            },
            idx,
        }
    }

    /// The stored entry at revision `rv`: the revision spliced into the serialization where
    /// the placeholder was found once, else the value serialized again.
    fn at_revision(self, rv: u64) -> Entry {
        let digits = rv.to_string();
        let bytes = match self.body {
            Body::Serialized { bytes, at, .. } => with_revision(&bytes, at, &digits),
            Body::Value(mut v) => {
                v["metadata"]["resourceVersion"] = Value::String(digits);
                serde_json::to_vec(&v).unwrap_or_default()
            }
        };
        let mut idx = self.idx;
        idx.rv = rv;
        Entry {
            bytes: Bytes::from(bytes),
            idx: Arc::new(idx),
        }
    }

    /// The store key of the object.
    pub fn key(&self) -> String {
        self.idx.key()
    }

    /// The kind it is written as.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Its index (its resourceVersion not set yet).
    pub fn index(&self) -> &Index {
        &self.idx
    }

    /// The object (its resourceVersion as it was given); `None` for a write spliced into the
    /// stored bytes ([`Prepared::with_status`]).
    pub fn value(&self) -> Option<&Value> {
        match &self.body {
            Body::Serialized { value, .. } => value.as_ref(),
            Body::Value(v) => Some(v),
        }
    }

    /// The object (its resourceVersion as it was given, or 0 for a splice), read from its bytes
    /// where it was spliced.
    fn into_value(self) -> Value {
        match self.body {
            Body::Value(v) | Body::Serialized { value: Some(v), .. } => v,
            Body::Serialized {
                bytes,
                at,
                value: None,
            } => serde_json::from_slice(&with_revision(&bytes, at, "0")).unwrap_or(Value::Null),
        }
    }
}

/// `bytes` with the revision `digits` where the placeholder starts, at `at`.
fn with_revision(bytes: &[u8], at: usize, digits: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + digits.len());
    out.extend_from_slice(&bytes[..at]);
    out.push(b'"');
    out.extend_from_slice(digits.as_bytes());
    out.push(b'"');
    out.extend_from_slice(&bytes[at + RV_PLACEHOLDER_JSON.len()..]);
    out
}

/// Where `needle` is in `bytes`, if it is there exactly once where the byte after it passes
/// `ends`.
fn find_once(bytes: &[u8], needle: &[u8], ends: impl Fn(Option<&u8>) -> bool) -> Option<usize> {
    only(memchr::memmem::find_iter(bytes, needle).filter(|&i| ends(bytes.get(i + needle.len()))))
}

/// The one position `found` gives, if it gives exactly one.
fn only(mut found: impl Iterator<Item = usize>) -> Option<usize> {
    match (found.next(), found.next()) {
        (Some(at), None) => Some(at),
        _ => None,
    }
}

/// The stored bytes of `old` with `edits` made (each a span, by start and length, and the text
/// that replaces it) and the stored revision replaced by the placeholder, and where the
/// placeholder starts; `None` where the revision is not found exactly once or the spans
/// overlap.
fn splice(old: &Entry, mut edits: Vec<(usize, usize, Vec<u8>)>) -> Option<(Vec<u8>, usize)> {
    const KEY: &[u8] = b"\"resourceVersion\":";
    let stored = format!("\"resourceVersion\":\"{}\"", old.idx.rv);
    let rv_at = find_once(&old.bytes, stored.as_bytes(), |_| true)?;
    edits.push((rv_at, stored.len(), [KEY, RV_PLACEHOLDER_JSON].concat()));
    edits.sort_by_key(|e| e.0);
    if edits.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
        return None;
    }
    let grows: usize = edits.iter().map(|e| e.2.len()).sum();
    let mut bytes = Vec::with_capacity(old.bytes.len() + grows);
    let (mut from, mut placeholder) = (0, 0);
    for (at, len, text) in &edits {
        bytes.extend_from_slice(&old.bytes[from..*at]);
        if *at == rv_at {
            placeholder = bytes.len() + KEY.len();
        }
        bytes.extend_from_slice(text);
        from = at + len;
    }
    bytes.extend_from_slice(&old.bytes[from..]);
    Some((bytes, placeholder))
}

/// Where the value of the top-level `status` starts in an object's canonical JSON, when
/// `status` is its last member (serde_json writes keys in order, and `status` sorts after
/// `apiVersion`, `kind`, `metadata` and `spec`); `None` otherwise. One pass over the bytes,
/// nothing parsed: strings are skipped with their escapes, depth is counted outside them.
fn status_at(bytes: &[u8]) -> Option<usize> {
    const KEY: &[u8] = b"\"status\":";
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut found = None;
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                // The end of the object: `status` counts only if nothing followed it.
                if depth == 0 {
                    return found.filter(|_| i + 1 == bytes.len());
                }
            }
            // A member of the top-level object starts after `{` or `,` at depth 1; one after
            // `status` means it was not the last.
            b',' if depth == 1 => found = None,
            _ => {}
        }
        if depth == 1 && matches!(b, b'{' | b',') && bytes[i + 1..].starts_with(KEY) {
            found = Some(i + 1 + KEY.len());
        }
    }
    None
}

/// One change, as published to watches and the world.
#[derive(Debug)]
pub struct StoreEvent {
    /// Resource of the object.
    pub kind: Kind,
    /// What happened.
    pub typ: EventType,
    /// Revision of the change (for DELETED, the deletion revision).
    pub rv: u64,
    /// The object after the change (for DELETED, its last state with the deletion revision).
    pub entry: Entry,
    /// The index before the change (MODIFIED and DELETED), for selector transitions.
    pub prev: Option<Arc<Index>>,
}

/// What a list or watch selecting by field can be narrowed to, as kube-apiserver's watch cache
/// indexes them: one object by key (`metadata.name=X` in a namespace, or of a cluster-scoped
/// kind), or the pods bound to one node (`spec.nodeName=X`, the cache's trigger index for
/// pods). The drain lists and watches the pods of its node: a scan of every pod per request
/// and a look at every pod event per watcher grew with the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Narrow {
    /// The object with this key.
    Key(String),
    /// The pods whose `spec.nodeName` is this node.
    PodsOn(String),
}

impl Narrow {
    /// Whether an event can concern a watch narrowed so: the object's key, or its node before
    /// or after the change (a pod bound to the node, or a deleted one, concerns it).
    fn concerns(&self, ev: &StoreEvent) -> bool {
        match self {
            Narrow::Key(k) => ev.entry.idx.key() == *k,
            Narrow::PodsOn(node) => {
                let on = |i: &Index| i.node_name.as_deref() == Some(node.as_str());
                on(&ev.entry.idx) || ev.prev.as_deref().is_some_and(on)
            }
        }
    }

    /// Capacity of a narrowed watch's channel: far more than its objects' changes while its
    /// watcher is scheduled (a node's pods all evicted at once: a few events each).
    fn buffer(&self) -> usize {
        match self {
            Narrow::Key(_) => 256,
            Narrow::PodsOn(_) => 4096,
        }
    }
}

struct Table {
    objects: BTreeMap<String, Entry>,
    ring: VecDeque<Arc<StoreEvent>>,
    /// Newest revision no longer in the ring: watches from before it are expired.
    compacted: u64,
    /// Revision of the last write (create, change or removal) of one of its objects.
    last_write: u64,
    tx: broadcast::Sender<Arc<StoreEvent>>,
    /// Live events of one object, or of one node's pods, for the watches narrowed to them (an
    /// agent watches its own Node, a drain its node's pods): kube-apiserver's watch cache
    /// hands each event only to the watchers it can concern, so the cost of an event does not
    /// grow with the watchers of other objects. Dropped when it has no receiver left.
    named: HashMap<Narrow, broadcast::Sender<Arc<StoreEvent>>>,
}

/// Everything under the store lock.
pub struct Inner {
    rv: u64,
    tables: HashMap<Kind, Table>,
    ring_cap: usize,
    world_tx: broadcast::Sender<Arc<StoreEvent>>,
    /// Pod keys by `namespace \0 label \0 value`, so that a budget's pods are found without
    /// scanning its namespace (PDB status is recomputed on every pod change).
    pod_labels: HashMap<String, BTreeSet<String>>,
    /// Budget keys by one `namespace \0 label \0 value` their selector requires, so that the
    /// budgets of a pod are found without matching every budget of its namespace (on every
    /// eviction and every pod change: most of the simulator's time at 5,000 nodes, perf).
    budget_labels: HashMap<String, BTreeSet<String>>,
    /// Budget keys per namespace whose selector requires no `label=value` (matched one by one).
    budgets_unindexed: HashMap<String, BTreeSet<String>>,
    /// Pod keys by their controller's uid: a controller's pods are counted on every change of
    /// one of them, and scanning the namespace for them was the simulator's largest cost.
    pod_owners: HashMap<String, BTreeSet<String>>,
    /// Pod keys by `spec.nodeName` (kube-apiserver's watch cache index for pods): a node's pods
    /// are listed on every drain and looked at on every reboot.
    pods_by_node: HashMap<String, BTreeSet<String>>,
    /// Events out of the rings, dropped once the lock is released: the last reference to an
    /// old object frees its bytes and index, and freeing them under the lock was a twentieth
    /// of the time it was held at 5,000 nodes (perf).
    released: Vec<Arc<StoreEvent>>,
}

fn label_key(ns: &str, k: &str, v: &str) -> String {
    format!("{ns}\0{k}\0{v}")
}

/// Takes `key` out of an index's set at `slot`, and the set out once empty.
fn unindex(map: &mut HashMap<String, BTreeSet<String>>, slot: &str, key: &str) {
    if let Some(set) = map.get_mut(slot) {
        set.remove(key);
        if set.is_empty() {
            map.remove(slot);
        }
    }
}

/// A watch's starting point: what it must send first, and the live stream after it.
pub struct WatchStart {
    /// Events or synthetic ADDEDs to send before live ones.
    pub initial: Vec<Arc<StoreEvent>>,
    /// The store revision when the watch started.
    pub rv: u64,
    /// Live events after `rv`.
    pub rx: broadcast::Receiver<Arc<StoreEvent>>,
}

/// The shared store.
pub struct Store {
    inner: Mutex<Inner>,
    world_tx: broadcast::Sender<Arc<StoreEvent>>,
    stats: LockStats,
}

/// How the store lock was used. Every write and most reads of the simulated cluster take it,
/// so the share of a rollout it was held for says how close the simulator is to being
/// serialized on it (a task waiting for it blocks its worker thread, and that core idles).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LockUse {
    /// Times it was taken.
    pub taken: u64,
    /// Of those, times the taker had to wait.
    pub contended: u64,
    /// Time it was held, all holders together.
    pub held: Duration,
    /// Time takers waited for it, all of them together.
    pub waited: Duration,
}

impl LockUse {
    /// The use between `earlier` and this reading.
    pub fn since(&self, earlier: &LockUse) -> LockUse {
        LockUse {
            taken: self.taken.saturating_sub(earlier.taken),
            contended: self.contended.saturating_sub(earlier.contended),
            held: self.held.saturating_sub(earlier.held),
            waited: self.waited.saturating_sub(earlier.waited),
        }
    }
}

/// The counters behind [`LockUse`]: relaxed atomics, read at the end of a phase and never to
/// decide anything.
#[derive(Default)]
struct LockStats {
    taken: AtomicU64,
    contended: AtomicU64,
    held_ns: AtomicU64,
    waited_ns: AtomicU64,
}

impl LockStats {
    fn waited(&self, d: Duration) {
        self.contended.fetch_add(1, Ordering::Relaxed);
        self.waited_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    fn held(&self, d: Duration) {
        self.taken.fetch_add(1, Ordering::Relaxed);
        self.held_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    fn read(&self) -> LockUse {
        LockUse {
            taken: self.taken.load(Ordering::Relaxed),
            contended: self.contended.load(Ordering::Relaxed),
            held: Duration::from_nanos(self.held_ns.load(Ordering::Relaxed)),
            waited: Duration::from_nanos(self.waited_ns.load(Ordering::Relaxed)),
        }
    }
}

/// The store lock, held; dereferences to the store's state.
pub struct Guard<'a> {
    /// `Some` until dropped.
    guard: Option<MutexGuard<'a, Inner>>,
    stats: &'a LockStats,
    since: Instant,
}

impl std::ops::Deref for Guard<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        let released = std::mem::take(&mut guard.released);
        drop(guard);
        self.stats.held(self.since.elapsed());
        // Often the last reference to an old object's bytes and index: freed unlocked.
        drop(released);
    }
}

/// Capacity of each live watch broadcast; a watcher that falls further behind is expired.
pub const WATCH_BUFFER: usize = 16 * 1024;

impl Store {
    /// An empty store keeping `ring_cap` recent events per resource for watch resumption.
    pub fn new(ring_cap: usize) -> Store {
        let (world_tx, _) = broadcast::channel(1 << 16);
        let tables = Kind::ALL
            .into_iter()
            .filter(|k| k.storage() == *k)
            .map(|k| {
                let (tx, _) = broadcast::channel(WATCH_BUFFER);
                (
                    k,
                    Table {
                        objects: BTreeMap::new(),
                        ring: VecDeque::new(),
                        compacted: 0,
                        last_write: 0,
                        tx,
                        named: HashMap::new(),
                    },
                )
            })
            .collect();
        Store {
            inner: Mutex::new(Inner {
                rv: 1,
                tables,
                ring_cap,
                world_tx: world_tx.clone(),
                pod_labels: HashMap::new(),
                budget_labels: HashMap::new(),
                budgets_unindexed: HashMap::new(),
                pod_owners: HashMap::new(),
                pods_by_node: HashMap::new(),
                released: Vec::new(),
            }),
            world_tx,
            stats: LockStats::default(),
        }
    }

    /// Takes the store lock. Events leaving the rings while it is held are dropped once it is
    /// released.
    pub fn lock(&self) -> Guard<'_> {
        let guard = match self.inner.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                let asked = Instant::now();
                let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
                self.stats.waited(asked.elapsed());
                g
            }
        };
        Guard {
            guard: Some(guard),
            stats: &self.stats,
            since: Instant::now(),
        }
    }

    /// How the lock was used since the store was made.
    pub fn lock_use(&self) -> LockUse {
        self.stats.read()
    }

    /// Subscribes to every change of every resource (the world's stream).
    pub fn subscribe_all(&self) -> broadcast::Receiver<Arc<StoreEvent>> {
        self.world_tx.subscribe()
    }

    /// One object.
    pub fn get(&self, kind: Kind, key: &str) -> Option<Entry> {
        self.lock().get(kind, key).cloned()
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.lock().rv
    }
}

impl Inner {
    /// One object.
    /// kube-apiserver's PodTopologyLabels admission (on by default since v1.35): a pod
    /// created on a node, or bound to one, gets that Node's `topology.kubernetes.io/zone` and
    /// `topology.kubernetes.io/region` labels. A pod already on a node in the store keeps its
    /// labels as written.
    fn bind_topology(&self, value: &mut Value) {
        let Some(node) = value["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
            return;
        };
        let key = super::index::key_of(
            value["metadata"]["namespace"].as_str().unwrap_or_default(),
            value["metadata"]["name"].as_str().unwrap_or_default(),
        );
        let bound = self
            .get(Kind::Pod, &key)
            .is_some_and(|e| e.idx.node_name.is_some());
        if bound {
            return;
        }
        let Some(n) = self.get(Kind::Node, node) else {
            return;
        };
        for k in TOPOLOGY_LABELS {
            if let Some(v) = n.idx.labels.get(k) {
                value["metadata"]["labels"][k] = Value::String(v.clone());
            }
        }
    }

    pub fn get(&self, kind: Kind, key: &str) -> Option<&Entry> {
        self.tables[&kind.storage()].objects.get(key)
    }

    /// Whether the object is still at revision `rv` (not written nor removed since it was read
    /// there): a write made outside the lock from that read may be stored.
    pub fn still_at(&self, kind: Kind, key: &str, rv: u64) -> bool {
        self.get(kind, key).is_some_and(|e| e.idx.rv == rv)
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.rv
    }

    /// Objects of a kind, optionally of one namespace, in key order, strictly after `after`.
    pub fn range<'a>(
        &'a self,
        kind: Kind,
        namespace: Option<&str>,
        after: Option<&str>,
    ) -> Box<dyn Iterator<Item = &'a Entry> + 'a> {
        use std::ops::Bound;
        let objects = &self.tables[&kind.storage()].objects;
        let prefix = namespace.map(|ns| format!("{ns}/"));
        let start = match (after, &prefix) {
            (Some(a), _) => Bound::Excluded(a.to_string()),
            (None, Some(p)) => Bound::Included(p.clone()),
            (None, None) => Bound::Unbounded,
        };
        let iter = objects.range((start, Bound::Unbounded));
        match prefix {
            Some(p) => Box::new(
                iter.take_while(move |(k, _)| k.starts_with(&p))
                    .map(|(_, e)| e),
            ),
            None => Box::new(iter.map(|(_, e)| e)),
        }
    }

    /// Newest revision of `kind` no longer kept for watch resumption.
    pub fn compacted(&self, kind: Kind) -> u64 {
        self.tables[&kind.storage()].compacted
    }

    /// Revision of the last write of an object of `kind` (0: none yet): what was derived from
    /// its objects is current while this stays the same.
    pub fn last_write(&self, kind: Kind) -> u64 {
        self.tables[&kind.storage()].last_write
    }

    /// Number of objects of a kind.
    pub fn count(&self, kind: Kind) -> usize {
        self.tables[&kind.storage()].objects.len()
    }

    /// Writes `value` (canonical, complete but for resourceVersion) at the next revision.
    pub fn put(&mut self, kind: Kind, mut value: Value) -> Entry {
        self.put_kept(kind, &mut value)
    }

    /// [`Inner::put`], leaving `value` as written (its resourceVersion and the topology labels
    /// of its node set), for a caller that writes the object again at once.
    pub fn put_kept(&mut self, kind: Kind, value: &mut Value) -> Entry {
        let kind = kind.storage();
        if kind == Kind::Pod {
            self.bind_topology(value);
        }
        self.rv += 1;
        let rv = self.rv;
        value["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let entry = Entry::of(value);
        self.commit(kind, rv, entry)
    }

    /// Writes an object's next version made ready outside the lock ([`Prepared`]) at the next
    /// revision: its serialization and index are taken as they are, the revision spliced in.
    /// What was made ready from an older state is the caller's to check
    /// ([`Inner::get`]'s revision); a pod newly bound to a node, whose topology labels come
    /// from the store, is made ready again here.
    pub fn put_prepared(&mut self, p: Prepared) -> Entry {
        let kind = p.kind.storage();
        let binds = kind == Kind::Pod
            && p.idx.node_name.is_some()
            && self
                .get(kind, &p.idx.key())
                .is_none_or(|e| e.idx.node_name.is_none());
        if binds {
            return self.put(kind, p.into_value());
        }
        self.rv += 1;
        let rv = self.rv;
        let entry = p.at_revision(rv);
        self.commit(kind, rv, entry)
    }

    /// Stores `entry` (written at revision `rv`), keeps the label, owner, node and budget
    /// indexes current and publishes the change.
    fn commit(&mut self, kind: Kind, rv: u64, entry: Entry) -> Entry {
        let key = entry.idx.key();
        let prev = self
            .tables
            .get_mut(&kind)
            .and_then(|t| t.objects.insert(key.clone(), entry.clone()))
            .map(|e| e.idx);
        if kind == Kind::Pdb {
            if let Some(p) = &prev {
                self.unindex_budget(p, &key);
            }
            self.index_budget(&entry.idx.clone(), &key);
        }
        if kind == Kind::Pod {
            let idx = entry.idx.clone();
            // Most writes of a pod change its status only: its labels and owner stay indexed
            // as they are (taking them out and back in was 2% of a large run's time, perf).
            let same = prev
                .as_ref()
                .is_some_and(|p| p.labels == idx.labels && p.owner == idx.owner);
            if same {
                let before = prev.as_ref().and_then(|p| p.node_name.as_ref());
                if before != idx.node_name.as_ref() {
                    if let Some(node) = before {
                        unindex(&mut self.pods_by_node, node, &key);
                    }
                    self.index_pod_node(&idx, &key);
                }
            } else {
                if let Some(p) = &prev {
                    self.unindex_pod(p, &key);
                }
                self.index_pod(&idx, &key);
            }
        }
        let typ = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.publish(kind, typ, rv, entry.clone(), prev);
        entry
    }

    /// Removes an object at the next revision; `last` is its final state.
    pub fn remove(&mut self, kind: Kind, key: &str, last: Value) -> Option<Entry> {
        self.remove_with(kind, key, |rv| {
            let mut last = last;
            last["metadata"]["resourceVersion"] = Value::String(rv.to_string());
            Entry::of(&last)
        })
    }

    /// [`Inner::remove`] of the object whose final state was made ready outside the lock.
    pub fn remove_prepared(&mut self, p: Prepared) -> Option<Entry> {
        let key = p.key();
        self.remove_with(p.kind, &key, |rv| p.at_revision(rv))
    }

    /// Removes an object at the next revision, its final state as `last` makes it at that
    /// revision.
    fn remove_with(
        &mut self,
        kind: Kind,
        key: &str,
        last: impl FnOnce(u64) -> Entry,
    ) -> Option<Entry> {
        let kind = kind.storage();
        let old = self.tables.get_mut(&kind)?.objects.remove(key)?;
        if kind == Kind::Pod {
            self.unindex_pod(&old.idx.clone(), key);
        }
        if kind == Kind::Pdb {
            self.unindex_budget(&old.idx.clone(), key);
        }
        self.rv += 1;
        let rv = self.rv;
        let entry = last(rv);
        self.publish(kind, EventType::Deleted, rv, entry.clone(), Some(old.idx));
        Some(entry)
    }

    fn index_pod(&mut self, idx: &Index, key: &str) {
        for (k, v) in &idx.labels {
            self.pod_labels
                .entry(label_key(&idx.namespace, k, v))
                .or_default()
                .insert(key.to_string());
        }
        if let Some((_, _, uid)) = &idx.owner {
            self.pod_owners
                .entry(uid.clone())
                .or_default()
                .insert(key.to_string());
        }
        self.index_pod_node(idx, key);
    }

    fn index_pod_node(&mut self, idx: &Index, key: &str) {
        if let Some(node) = &idx.node_name {
            self.pods_by_node
                .entry(node.clone())
                .or_default()
                .insert(key.to_string());
        }
    }

    fn unindex_pod(&mut self, idx: &Index, key: &str) {
        for (k, v) in &idx.labels {
            unindex(&mut self.pod_labels, &label_key(&idx.namespace, k, v), key);
        }
        if let Some((_, _, uid)) = &idx.owner {
            unindex(&mut self.pod_owners, uid, key);
        }
        if let Some(node) = &idx.node_name {
            unindex(&mut self.pods_by_node, node, key);
        }
    }

    /// Where a budget is found from: under one `label=value` its selector requires, else in
    /// its namespace's unindexed set. A budget without a readable selector selects nothing.
    fn budget_slot(idx: &Index) -> Option<(bool, String)> {
        let sel = idx.pdb_selector.as_ref()?;
        Some(match sel.first_equality() {
            Some((k, v)) => (true, label_key(&idx.namespace, k, v)),
            None => (false, idx.namespace.clone()),
        })
    }

    fn index_budget(&mut self, idx: &Index, key: &str) {
        let map = match Self::budget_slot(idx) {
            Some((true, slot)) => self.budget_labels.entry(slot),
            Some((false, slot)) => self.budgets_unindexed.entry(slot),
            None => return,
        };
        map.or_default().insert(key.to_string());
    }

    fn unindex_budget(&mut self, idx: &Index, key: &str) {
        let (map, slot) = match Self::budget_slot(idx) {
            Some((true, slot)) => (&mut self.budget_labels, slot),
            Some((false, slot)) => (&mut self.budgets_unindexed, slot),
            None => return,
        };
        unindex(map, &slot, key);
    }

    /// The budgets of `namespace` whose selector matches a pod with `labels`, in key order,
    /// found through the budget label index.
    pub fn budgets_selecting<'a>(
        &'a self,
        namespace: &str,
        labels: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        self.budgets_maybe_selecting(namespace, labels)
            .filter(move |e| {
                let sel = e.idx.pdb_selector.as_ref();
                sel.is_some_and(|s| s.matches(labels))
            })
    }

    /// The budgets of `namespace` that may select a pod with `labels`, in key order: a superset
    /// of those that do, found through the budget label index.
    fn budgets_maybe_selecting<'a>(
        &'a self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        let objects = &self.tables[&Kind::Pdb].objects;
        let mut keys: BTreeSet<&'a String> = BTreeSet::new();
        for (k, v) in labels {
            if let Some(set) = self.budget_labels.get(&label_key(namespace, k, v)) {
                keys.extend(set.iter());
            }
        }
        if let Some(set) = self.budgets_unindexed.get(namespace) {
            keys.extend(set.iter());
        }
        keys.into_iter().filter_map(move |key| objects.get(key))
    }

    /// Pods whose controller owner reference has `uid`, in key order.
    pub fn pods_owned_by<'a>(&'a self, uid: &str) -> impl Iterator<Item = &'a Entry> + 'a {
        let objects = &self.tables[&Kind::Pod].objects;
        self.pod_owners
            .get(uid)
            .into_iter()
            .flat_map(move |set| set.iter().filter_map(move |key| objects.get(key)))
    }

    /// Pods of `namespace` carrying label `k=v`, in key order.
    pub fn pods_with_label<'a>(
        &'a self,
        namespace: &str,
        k: &str,
        v: &str,
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        let objects = &self.tables[&Kind::Pod].objects;
        self.pod_labels
            .get(&label_key(namespace, k, v))
            .into_iter()
            .flat_map(move |set| set.iter().filter_map(move |key| objects.get(key)))
    }

    /// Pods bound to `node` (`spec.nodeName`), in key order.
    pub fn pods_on<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a Entry> + 'a {
        self.narrowed(Kind::Pod, &Narrow::PodsOn(node.to_string()), None)
    }

    /// Objects of a kind that `narrow` can match, in key order, strictly after `after`: what a
    /// list narrowed so looks at instead of the whole kind.
    pub fn narrowed<'a>(
        &'a self,
        kind: Kind,
        narrow: &Narrow,
        after: Option<&str>,
    ) -> Box<dyn Iterator<Item = &'a Entry> + 'a> {
        let kind = kind.storage();
        let objects = &self.tables[&kind].objects;
        let from = after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_string()));
        match narrow {
            Narrow::Key(k) => {
                let after = after.is_none_or(|a| k.as_str() > a);
                Box::new(objects.get(k).filter(|_| after).into_iter())
            }
            Narrow::PodsOn(node) if kind == Kind::Pod => Box::new(
                self.pods_by_node
                    .get(node)
                    .into_iter()
                    .flat_map(move |set| set.range((from.clone(), Bound::Unbounded)))
                    .filter_map(move |key| objects.get(key)),
            ),
            Narrow::PodsOn(_) => Box::new(std::iter::empty()),
        }
    }

    fn publish(
        &mut self,
        kind: Kind,
        typ: EventType,
        rv: u64,
        entry: Entry,
        prev: Option<Arc<Index>>,
    ) {
        let ev = Arc::new(StoreEvent {
            kind,
            typ,
            rv,
            entry,
            prev,
        });
        let cap = self.ring_cap;
        if let Some(t) = self.tables.get_mut(&kind) {
            t.last_write = rv;
            t.ring.push_back(ev.clone());
            while t.ring.len() > cap {
                if let Some(old) = t.ring.pop_front() {
                    t.compacted = old.rv;
                    self.released.push(old);
                }
            }
            let _ = t.tx.send(ev.clone());
            if !t.named.is_empty() {
                let mut narrows = vec![Narrow::Key(ev.entry.idx.key())];
                if kind == Kind::Pod {
                    let nodes = [Some(&ev.entry.idx), ev.prev.as_ref()];
                    for node in nodes
                        .into_iter()
                        .flatten()
                        .filter_map(|i| i.node_name.as_ref())
                    {
                        let n = Narrow::PodsOn(node.clone());
                        if !narrows.contains(&n) {
                            narrows.push(n);
                        }
                    }
                }
                for n in narrows {
                    if t.named
                        .get(&n)
                        .is_some_and(|tx| tx.send(ev.clone()).is_err())
                    {
                        t.named.remove(&n);
                    }
                }
            }
        }
        let _ = self.world_tx.send(ev);
    }

    /// Starts a watch. `since = None` gives synthetic ADDEDs for the current state; `Some(rv)`
    /// replays the kept events after `rv`, or fails with the oldest revision still kept. With
    /// `only`, of the objects it narrows to alone (a watch selecting one object by name, or a
    /// node's pods).
    pub fn watch(
        &mut self,
        kind: Kind,
        since: Option<u64>,
        only: Option<&Narrow>,
    ) -> Result<WatchStart, u64> {
        let kind = kind.storage();
        let rv = self.rv;
        if let (None, Some(n)) = (since, only) {
            let initial = self
                .narrowed(kind, n, None)
                .map(|e| Self::added(kind, e))
                .collect();
            let rx = self.narrowed_channel(kind, n);
            return Ok(WatchStart { initial, rv, rx });
        }
        let t = self.tables.get_mut(&kind).expect("a table per stored kind");
        let initial = match since {
            None => t.objects.values().map(|e| Self::added(kind, e)).collect(),
            Some(rv) => {
                if rv < t.compacted {
                    return Err(t.compacted + 1);
                }
                // The ring is in revision order: only the events after `rv` are looked at.
                let from = t.ring.partition_point(|e| e.rv <= rv);
                t.ring
                    .range(from..)
                    .filter(|e| only.is_none_or(|n| n.concerns(e)))
                    .cloned()
                    .collect()
            }
        };
        let rx = match only {
            Some(n) => self.narrowed_channel(kind, n),
            None => t.tx.subscribe(),
        };
        Ok(WatchStart { initial, rv, rx })
    }

    /// The live events of the objects `narrow` selects.
    fn narrowed_channel(
        &mut self,
        kind: Kind,
        narrow: &Narrow,
    ) -> broadcast::Receiver<Arc<StoreEvent>> {
        let t = self.tables.get_mut(&kind).expect("a table per stored kind");
        t.named
            .entry(narrow.clone())
            .or_insert_with(|| broadcast::channel(narrow.buffer()).0)
            .subscribe()
    }

    /// The synthetic ADDED of a watch's initial state.
    fn added(kind: Kind, e: &Entry) -> Arc<StoreEvent> {
        Arc::new(StoreEvent {
            kind,
            typ: EventType::Added,
            rv: e.idx.rv,
            entry: e.clone(),
            prev: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The lock's use counts every take, and a take that found it held as contended, with the
    /// time it was held (at least the holder's sleep) and the time the other waited.
    #[test]
    fn the_lock_counts_its_takes_holds_and_waits() {
        let store = Arc::new(Store::new(16));
        let before = store.lock_use();
        let held = store.lock();
        let (asking, asked) = std::sync::mpsc::channel();
        let other = store.clone();
        let waiter = std::thread::spawn(move || {
            asking.send(()).unwrap();
            let _g = other.lock();
        });
        asked.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        drop(held);
        waiter.join().unwrap();
        let used = store.lock_use().since(&before);
        assert_eq!(used.taken, 2, "{used:?}");
        assert_eq!(used.contended, 1, "{used:?}");
        assert!(used.held >= Duration::from_millis(50), "{used:?}");
        assert!(used.waited > Duration::ZERO, "{used:?}");
        // Read again with nothing taken in between: nothing more.
        assert_eq!(
            store.lock_use().since(&store.lock_use()),
            LockUse::default()
        );
    }

    fn noted_pod(name: &str, note: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                            "labels": {"app": "web"}, "annotations": {"note": note}},
               "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
               "status": {"phase": "Running"}})
    }

    /// A write prepared outside the lock stores exactly what a write under it would: the same
    /// bytes (the revision spliced where the placeholder was), the same index and the same
    /// published event; and where the placeholder is not found exactly once (an object whose
    /// own strings carry it), the value is serialized at its revision instead. A removal made
    /// ready so gives the same last state.
    #[test]
    fn a_prepared_write_stores_what_a_write_under_the_lock_would() {
        let placeholder = RV_PLACEHOLDER.to_string();
        for note in ["plain", placeholder.as_str()] {
            let (locked, prepared) = (Store::new(16), Store::new(16));
            let mut rx = prepared.subscribe_all();
            for store in [&locked, &prepared] {
                store.lock().put(Kind::Pod, noted_pod("a", "first"));
            }
            let want = locked.lock().put(Kind::Pod, noted_pod("a", note));
            let p = Prepared::new(Kind::Pod, noted_pod("a", note));
            assert_eq!(
                matches!(p.body, Body::Serialized { .. }),
                note == "plain",
                "{note:?}"
            );
            let got = prepared.lock().put_prepared(p);
            assert_eq!(got.bytes, want.bytes, "{note:?}");
            assert_eq!(got.idx, want.idx, "{note:?}");
            assert_eq!(got.idx.rv, 3);
            assert_eq!(got.value()["metadata"]["resourceVersion"], "3");
            assert_eq!(got.value()["metadata"]["annotations"]["note"], note);
            let _added = rx.try_recv().unwrap();
            let ev = rx.try_recv().unwrap();
            assert_eq!((ev.typ, ev.rv), (EventType::Modified, 3));
            assert_eq!(ev.entry.bytes, want.bytes);
            assert_eq!(ev.prev.as_ref().map(|i| i.rv), Some(2));
            let gone = locked
                .lock()
                .remove(Kind::Pod, "ns/a", noted_pod("a", note));
            let last = Prepared::new(Kind::Pod, noted_pod("a", note));
            let got = prepared.lock().remove_prepared(last);
            assert_eq!(got.map(|e| e.bytes), gone.map(|e| e.bytes), "{note:?}");
            assert!(prepared.get(Kind::Pod, "ns/a").is_none());
            assert_eq!(prepared.lock().pods_on("n1").count(), 0);
        }
    }

    /// A status write spliced into the stored bytes stores what the whole object made ready
    /// would: the same bytes and the same index, for a workload (its counts), a budget (its
    /// conditions), a Node (its boot ID), a pod (its phase and readiness) and objects whose
    /// strings carry `"status":`, braces and escaped quotes. Where the splice cannot be made
    /// (no status, one that is not the last member, the stored revision written twice) the
    /// whole object is made ready.
    #[test]
    fn a_status_write_spliced_into_the_stored_bytes_stores_what_a_whole_write_would() {
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "generation": 2,
                         "annotations": {"tricky": "},\"status\":{\"x\":1}, \\ [\""}},
            "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "c", "image": "i", "args": ["\"status\":"]}]}}},
            "status": {"replicas": 2, "readyReplicas": 1, "observedGeneration": 1}});
        let rs_next = json!({"replicas": 3, "readyReplicas": 3, "availableReplicas": 3,
                             "observedGeneration": 2});
        let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "b", "namespace": "ns", "uid": "u2", "generation": 1},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 1, "conditions": [{"type": "DisruptionAllowed",
                       "status": "True", "reason": "SufficientPods"}]}});
        let pdb_next = json!({"disruptionsAllowed": 0, "disruptedPods": {"web-1": "2026-11-28T00:00:00Z"},
            "conditions": [{"type": "DisruptionAllowed", "status": "False",
                            "reason": "InsufficientPods"}]});
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "uid": "u3"}, "spec": {},
            "status": {"nodeInfo": {"bootID": "b1", "machineID": "m1"},
                       "conditions": [{"type": "Ready", "status": "False"}]}});
        let node_next = json!({"nodeInfo": {"bootID": "b2", "machineID": "m1"},
                               "conditions": [{"type": "Ready", "status": "True"}]});
        let mut bare = rs.clone();
        bare.as_object_mut().unwrap().remove("status");
        let mut trailing = pdb.clone();
        trailing["zzz"] = json!("after status");
        // Its stored revision (2) is written a second time, in its spec, in the same form.
        let mut twice = pdb.clone();
        twice["spec"]["resourceVersion"] = json!("2");
        let cases = [
            (Kind::ReplicaSet, rs, rs_next.clone(), true),
            (Kind::Pdb, pdb, pdb_next.clone(), true),
            (Kind::Node, node, node_next, true),
            (
                Kind::Pod,
                noted_pod("p", "{\"status\":1}"),
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
                true,
            ),
            (Kind::ReplicaSet, bare, rs_next, false),
            (Kind::Pdb, trailing, pdb_next.clone(), false),
            (Kind::Pdb, twice, pdb_next, false),
        ];
        for (kind, before, status, spliced) in cases {
            let store = Store::new(16);
            let old = store.lock().put(kind, before.clone());
            let mut after = before.clone();
            after["status"] = status.clone();
            let p = Prepared::with_status(kind, &old, status);
            assert_eq!(p.value().is_none(), spliced, "{before}");
            let got = p.at_revision(7);
            let want = Prepared::new(kind, after).at_revision(7);
            assert_eq!(
                String::from_utf8_lossy(&got.bytes),
                String::from_utf8_lossy(&want.bytes)
            );
            assert_eq!(got.idx, want.idx, "{before}");
            assert_eq!(got.idx.rv, 7);
            assert_eq!(got.value()["status"], want.value()["status"]);
            assert_eq!(old.status(), before["status"].clone(), "{before}");
        }
    }

    /// A pod's last state spliced into its stored bytes (its grace period set to 0) is what the
    /// whole pod made ready would be; where the stored number is not found exactly once (no
    /// grace period, or the same field and number twice) the whole pod is made ready.
    #[test]
    fn a_deletion_grace_spliced_into_the_stored_bytes_is_what_a_whole_write_would_be() {
        let mut deleting = noted_pod("a", "\"deletionGracePeriodSeconds\":3");
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-28T00:00:00Z");
        deleting["metadata"]["deletionGracePeriodSeconds"] = json!(3);
        deleting["spec"]["terminationGracePeriodSeconds"] = json!(30);
        let mut twice = deleting.clone();
        twice["spec"]["extra"] = json!({"deletionGracePeriodSeconds": 3});
        let mut thirty = deleting.clone();
        thirty["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        thirty["spec"]["extra"] = json!({"deletionGracePeriodSeconds": 3});
        // `:3` is found at the start of `:30` too: not the number sought.
        let mut prefix = deleting.clone();
        prefix["spec"]["extra"] = json!({"deletionGracePeriodSeconds": 30});
        let cases = [
            (deleting, true),
            (prefix, true),
            (noted_pod("b", "running"), false),
            (twice, false),
            (thirty, true),
        ];
        for (before, spliced) in cases {
            let store = Store::new(16);
            let old = store.lock().put(Kind::Pod, before.clone());
            let mut after = before.clone();
            after["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            let p = Prepared::with_deletion_grace(Kind::Pod, &old, 0);
            assert_eq!(p.value().is_none(), spliced, "{before}");
            let got = p.at_revision(9);
            let want = Prepared::new(Kind::Pod, after).at_revision(9);
            assert_eq!(
                String::from_utf8_lossy(&got.bytes),
                String::from_utf8_lossy(&want.bytes)
            );
            assert_eq!(got.idx, want.idx, "{before}");
        }
    }

    /// A pod made ready unbound and then bound to a node is bound under the lock: it gets its
    /// Node's topology labels there, as a write under the lock gives them.
    #[test]
    fn a_prepared_pod_bound_to_a_node_gets_its_topology_labels() {
        let store = Store::new(16);
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "z1"}}});
        store.lock().put(Kind::Node, node);
        let mut unbound = noted_pod("a", "x");
        unbound["spec"]["nodeName"].take();
        store.lock().put(Kind::Pod, unbound);
        let got = store
            .lock()
            .put_prepared(Prepared::new(Kind::Pod, noted_pod("a", "x")));
        assert_eq!(got.idx.labels["topology.kubernetes.io/zone"], "z1");
        assert_eq!(got.idx.node_name.as_deref(), Some("n1"));
        // A status write spliced into a bound pod's bytes, written where the pod stored is
        // unbound (a caller that did not check its revision): bound all the same, from the
        // spliced bytes.
        let bound = store.get(Kind::Pod, "ns/a").unwrap();
        let mut unbound = noted_pod("a", "y");
        unbound["spec"]["nodeName"].take();
        store.lock().put(Kind::Pod, unbound);
        let p = Prepared::with_status(Kind::Pod, &bound, json!({"phase": "Succeeded"}));
        assert!(p.value().is_none());
        let got = store.lock().put_prepared(p);
        assert_eq!(got.idx.labels["topology.kubernetes.io/zone"], "z1");
        assert_eq!(got.idx.node_name.as_deref(), Some("n1"));
        assert_eq!(got.idx.phase.as_deref(), Some("Succeeded"));
        assert_eq!(got.value()["metadata"]["annotations"]["note"], "x");
    }

    fn budget(ns: &str, name: &str, selector: Value) -> Value {
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"minAvailable": 1, "selector": selector}})
    }

    /// The budget label index gives every budget whose selector matches a pod (and the
    /// candidates it gives are only the namespace's): after creation, a change of selector and
    /// a deletion, as a match against every budget would.
    #[test]
    fn the_budget_index_gives_every_budget_that_selects_a_pod() {
        let store = Store::new(100);
        let mut inner = store.lock();
        inner.put(
            Kind::Pdb,
            budget("a", "web", json!({"matchLabels": {"app": "web"}})),
        );
        inner.put(
            Kind::Pdb,
            budget(
                "a",
                "tier",
                json!({"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["front", "back"]}]}),
            ),
        );
        inner.put(Kind::Pdb, budget("a", "all", json!({})));
        inner.put(
            Kind::Pdb,
            budget("b", "web", json!({"matchLabels": {"app": "web"}})),
        );
        let pod: BTreeMap<String, String> = [
            ("app".to_string(), "web".to_string()),
            ("tier".into(), "front".into()),
        ]
        .into();
        let selecting = |inner: &Inner, ns: &str, labels: &BTreeMap<String, String>| {
            let selects = |e: &&Entry| {
                let sel = e.idx.pdb_selector.as_ref();
                sel.is_some_and(|s| s.matches(labels))
            };
            let keys = |es: Vec<&Entry>| -> Vec<String> {
                es.into_iter()
                    .filter(selects)
                    .map(|e| e.idx.key())
                    .collect()
            };
            let got = keys(inner.budgets_selecting(ns, labels).collect());
            let all = keys(inner.range(Kind::Pdb, Some(ns), None).collect());
            assert_eq!(got, all, "the index against a scan");
            got
        };
        assert_eq!(selecting(&inner, "a", &pod), ["a/all", "a/tier", "a/web"]);
        assert_eq!(selecting(&inner, "b", &pod), ["b/web"]);
        inner.put(
            Kind::Pdb,
            budget("a", "web", json!({"matchLabels": {"app": "db"}})),
        );
        assert_eq!(selecting(&inner, "a", &pod), ["a/all", "a/tier"]);
        let last = inner.get(Kind::Pdb, "a/all").unwrap().value();
        inner.remove(Kind::Pdb, "a/all", last);
        assert_eq!(selecting(&inner, "a", &pod), ["a/tier"]);
        assert!(inner
            .budget_labels
            .contains_key(&label_key("a", "app", "db")));
        assert!(!inner
            .budget_labels
            .contains_key(&label_key("a", "app", "web")));
    }

    fn pod(ns: &str, name: &str, node: Option<&str>) -> Value {
        let mut v = json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns}, "spec": {}});
        if let Some(n) = node {
            v["spec"]["nodeName"] = json!(n);
        }
        v
    }

    #[test]
    fn a_pods_labels_and_owner_stay_indexed_through_its_writes_and_follow_a_change() {
        let store = Store::new(100);
        let mut inner = store.lock();
        let with = |app: &str, owner: &str, phase: &str| {
            let mut v = pod("a", "p", Some("n1"));
            v["metadata"]["labels"] = json!({"app": app});
            v["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
                "kind": "ReplicaSet", "name": owner, "uid": owner, "controller": true}]);
            v["status"] = json!({"phase": phase});
            v
        };
        let keys = |it: &mut dyn Iterator<Item = &Entry>| -> Vec<String> {
            it.map(|e| e.idx.key()).collect()
        };
        inner.put(Kind::Pod, with("web", "rs-1", "Pending"));
        inner.put(Kind::Pod, with("web", "rs-1", "Running"));
        assert_eq!(keys(&mut inner.pods_with_label("a", "app", "web")), ["a/p"]);
        assert_eq!(keys(&mut inner.pods_owned_by("rs-1")), ["a/p"]);
        inner.put(Kind::Pod, with("db", "rs-2", "Running"));
        assert!(keys(&mut inner.pods_with_label("a", "app", "web")).is_empty());
        assert!(keys(&mut inner.pods_owned_by("rs-1")).is_empty());
        assert_eq!(keys(&mut inner.pods_with_label("a", "app", "db")), ["a/p"]);
        assert_eq!(keys(&mut inner.pods_owned_by("rs-2")), ["a/p"]);
        assert_eq!(keys(&mut inner.pods_on("n1")), ["a/p"]);
    }

    #[test]
    fn a_pod_bound_to_a_node_gets_its_topology_labels_as_kube_apiserver_gives_them() {
        let store = Store::new(100);
        let mut inner = store.lock();
        inner.put(
            Kind::Node,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {
                "topology.kubernetes.io/zone": "zone-b", "topology.kubernetes.io/region": "r-1",
                "kubernetes.io/hostname": "n1"}}}),
        );
        let labels =
            |inner: &Inner, key: &str| inner.get(Kind::Pod, key).unwrap().idx.labels.clone();
        // Created unbound, then bound: the zone and region at the binding, no other label.
        inner.put(Kind::Pod, pod("a", "p", None));
        assert!(labels(&inner, "a/p").is_empty());
        let e = inner.put(Kind::Pod, pod("a", "p", Some("n1")));
        assert_eq!(
            e.idx
                .labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some("zone-b")
        );
        assert_eq!(
            e.idx
                .labels
                .get("topology.kubernetes.io/region")
                .map(String::as_str),
            Some("r-1")
        );
        assert!(!e.idx.labels.contains_key("kubernetes.io/hostname"));
        // Created on a node: the same.
        let e = inner.put(Kind::Pod, pod("a", "q", Some("n1")));
        assert_eq!(e.idx.labels.len(), 2);
        // A later write of a bound pod keeps its labels as written.
        let mut v = pod("a", "q", Some("n1"));
        v["metadata"]["labels"] = json!({"app": "web"});
        let e = inner.put(Kind::Pod, v);
        assert_eq!(e.idx.labels.keys().collect::<Vec<_>>(), ["app"]);
    }

    /// A node's pods, from the node index, are those a scan of every pod finds, in key order
    /// and after a continue key: through binding, moving, deletion; a narrowed watch replays
    /// and receives the events of pods bound to its node before or after each change, and
    /// nothing of other nodes.
    #[test]
    fn the_node_index_gives_a_nodes_pods_as_a_scan_would() {
        let store = Store::new(100);
        let mut inner = store.lock();
        for (ns, name, node) in [
            ("b", "p1", Some("n1")),
            ("a", "p2", Some("n1")),
            ("a", "p3", Some("n2")),
            ("a", "p4", None),
        ] {
            inner.put(Kind::Pod, pod(ns, name, node));
        }
        let since = inner.revision();
        let start = inner
            .watch(Kind::Pod, None, Some(&Narrow::PodsOn("n1".into())))
            .unwrap();
        let mut rx = start.rx;
        let initial: Vec<String> = start.initial.iter().map(|e| e.entry.idx.key()).collect();
        assert_eq!(initial, ["a/p2", "b/p1"]);
        inner.put(Kind::Pod, pod("a", "p4", Some("n1")));
        inner.put(Kind::Pod, pod("b", "p1", Some("n2")));
        inner.put(Kind::Pod, pod("a", "p3", Some("n2")));
        let last = inner.get(Kind::Pod, "a/p2").unwrap().value();
        inner.remove(Kind::Pod, "a/p2", last);
        let scan = |inner: &Inner, node: &str, after: Option<&str>| -> Vec<String> {
            let on = |e: &&Entry| e.idx.node_name.as_deref() == Some(node);
            let all = inner.range(Kind::Pod, None, after).filter(on);
            all.map(|e| e.idx.key()).collect()
        };
        for node in ["n1", "n2", "n3"] {
            for after in [None, Some("a/p3"), Some("b/p1")] {
                let narrow = Narrow::PodsOn(node.into());
                let got: Vec<String> = inner
                    .narrowed(Kind::Pod, &narrow, after)
                    .map(|e| e.idx.key())
                    .collect();
                assert_eq!(got, scan(&inner, node, after), "{node} after {after:?}");
            }
        }
        assert_eq!(scan(&inner, "n1", None), ["a/p4"]);
        let live: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|e| format!("{} {}", e.typ.as_str(), e.entry.idx.key()))
            .collect();
        let expected = ["MODIFIED a/p4", "MODIFIED b/p1", "DELETED a/p2"];
        assert_eq!(live, expected, "no event of n2's own pod a/p3");
        let replay = inner
            .watch(Kind::Pod, Some(since), Some(&Narrow::PodsOn("n1".into())))
            .unwrap();
        let replayed: Vec<String> = replay
            .initial
            .iter()
            .map(|e| format!("{} {}", e.typ.as_str(), e.entry.idx.key()))
            .collect();
        assert_eq!(replayed, expected);
    }
}
