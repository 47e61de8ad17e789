//! API semantics of writes: create, update, patch, delete and eviction, as kube-apiserver
//! applies them (metadata it sets, preconditions, graceful pod deletion, PDB checks).
//!
//! Owns the rules; the store owns consistency and `server.rs` owns HTTP. Each operation runs
//! its checks and its writes under one store lock, so two evictions cannot both pass a budget of
//! one; an eviction's pod writes, made after its budget's as kube-apiserver makes them, are
//! prepared outside the lock and written if the pod is as it was read. It must never sleep or
//! do I/O.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::admission::Operation;
use super::errors::{self, ApiError};
use super::events;
use super::index::{key_of, Index};
use super::invariants::{Cause, Invariants};
use super::kinds::{self, Kind};
use super::meta::{new_uid, timestamp};
use super::patch::{self, PatchType};
use super::pdb::{self, Budget};
use super::store::{Entry, Inner, Prepared, Store};
use super::strategy;
use super::validation::{self, NameRule};

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Namespaces the real server always has.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Prepares a new object for the store: name, namespace, validation, defaults, metadata.
pub fn prepare_create(kind: Kind, namespace: &str, mut body: Value) -> Result<Value, ApiError> {
    if !body.is_object() {
        return Err(ApiError::undecodable(kind, "body is not a JSON object"));
    }
    if let Some(v) = body["apiVersion"].as_str() {
        if v != kind.api_version() || body["kind"].as_str().is_some_and(|k| k != kind.kind_name()) {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({})",
                kind.api_version()
            )));
        }
    }
    body["apiVersion"] = json!(kind.api_version());
    body["kind"] = json!(kind.kind_name());
    let md = &mut body["metadata"];
    if md["name"].as_str().unwrap_or("").is_empty() {
        if let Some(g) = md["generateName"].as_str().filter(|g| !g.is_empty()) {
            md["name"] = json!(validation::generated_name(g, &random_suffix()));
        }
    }
    if kind.namespaced() {
        match md["namespace"].as_str() {
            Some(ns) if !ns.is_empty() && ns != namespace => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => md["namespace"] = json!(namespace),
        }
    } else if let Some(m) = md.as_object_mut() {
        m.remove("namespace");
    }
    let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
    // Decoded first (400), in the request's version, then validated: by the kind's strategy,
    // then by the generic metadata rules (422).
    kinds::validate(kind, &body)?;
    let decoded = kind.canonicalize(body)?;
    let mut body = if kind.is_event() {
        // Events are validated in the stored form, by the request version's rules.
        let stored = events::to_storage(kind, &decoded);
        errors::check(Kind::Event, &name, &events::validate_create(&stored, kind))?;
        stored
    } else {
        // The strategy's ValidateObjectMeta with the kind's name rule, then its checks of the
        // (defaulted) rest of the object.
        let mut errs =
            validation::object_meta(&decoded["metadata"], kind.namespaced(), kind.name_rule());
        let mut body = decoded;
        strategy::apply_defaults(kind, &mut body);
        errs.extend(strategy::validate_spec(kind, &body));
        errors::check(kind, &name, &errs)?;
        body
    };
    // rest.BeforeCreate's generic metadata check, after the strategy's.
    errors::check(
        if kind.is_event() { Kind::Event } else { kind },
        &name,
        &validation::object_meta(&body["metadata"], kind.namespaced(), NameRule::PathSegment),
    )?;
    let md = body["metadata"].as_object_mut().expect("metadata");
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        md.remove(k);
    }
    md.insert("uid".into(), json!(new_uid()));
    md.insert("creationTimestamp".into(), json!(timestamp(Utc::now())));
    if kind.sets_generation() {
        md.insert("generation".into(), json!(1));
    }
    Ok(body)
}

/// Stores a prepared object: 404 for a missing namespace, 409 AlreadyExists.
pub fn insert(inner: &mut Inner, kind: Kind, body: Value) -> Result<Entry, ApiError> {
    let ns = body["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
    insertable(inner, kind, &ns, &name)?;
    Ok(inner.put(kind, body))
}

/// [`insert`] of an object made ready outside the store lock.
pub fn insert_prepared(inner: &mut Inner, p: Prepared) -> Result<Entry, ApiError> {
    let idx = p.index();
    insertable(inner, p.kind(), &idx.namespace, &idx.name)?;
    Ok(inner.put_prepared(p))
}

/// Whether an object of `kind` named `name` can be stored in `ns`: its namespace exists and
/// the name is not taken there.
fn insertable(inner: &Inner, kind: Kind, ns: &str, name: &str) -> Result<(), ApiError> {
    if kind.namespaced() && inner.get(Kind::Namespace, ns).is_none() {
        return Err(ApiError::not_found(Kind::Namespace, ns));
    }
    if inner.get(kind, &key_of(ns, name)).is_some() {
        return Err(ApiError::already_exists(kind, name));
    }
    Ok(())
}

/// Validating admission of a write, asked under the store lock once the registry has prepared
/// what it would store (kube-apiserver's create, update and delete validation functions, which
/// the registry calls after its own checks and before storage's): the object's name, the
/// object and the old object as stored (null where there is none). An error refuses the write.
pub trait Admit {
    /// Admits or refuses the write.
    fn admit(
        &self,
        inner: &Inner,
        operation: Operation,
        name: &str,
        object: &Value,
        old_object: &Value,
    ) -> Result<(), ApiError>;
}

/// POST: creates an object (201), admitted by `admit` once it is prepared (a generated name
/// included: kube-apiserver v1.36 generates it before admission, which sees it as the
/// request's name) and its namespace found, before it is found to exist already (409 comes
/// from storage).
pub fn create(
    store: &Store,
    kind: Kind,
    namespace: &str,
    body: Value,
    admit: Option<&dyn Admit>,
) -> Result<Entry, ApiError> {
    let body = prepare_create(kind, namespace, body)?;
    let mut inner = store.lock();
    if let Some(a) = admit {
        let md = &body["metadata"];
        let ns = md["namespace"].as_str().unwrap_or("");
        if kind.namespaced() && inner.get(Kind::Namespace, ns).is_none() {
            return Err(ApiError::not_found(Kind::Namespace, ns));
        }
        let name = md["name"].as_str().unwrap_or("");
        a.admit(&inner, Operation::Create, name, &body, &Value::Null)?;
    }
    insert(&mut inner, kind, body)
}

/// Where an update writes: the object, or its status subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The object (status kept for kinds with a status subresource).
    Main,
    /// The status subresource (only status is taken).
    Status,
}

/// An update as the registry makes it from the stored object, before admission and storage.
struct Made {
    name: String,
    /// The object to store: the new version merged into the old as the registry does.
    merged: Merged,
    /// The stored object, parsed.
    old_v: Value,
}

/// The object an update stores, as a value or already made ready for the store.
enum Merged {
    Value(Value),
    Prepared(Box<Prepared>),
}

impl Merged {
    fn value(&self) -> &Value {
        match self {
            Merged::Value(v) => v,
            // Made by `Prepared::new`, which keeps the value.
            Merged::Prepared(p) => p.value().unwrap_or(&Value::Null),
        }
    }
}

/// Whether storing `merged`, an update of `old`, removes the object: being deleted, its last
/// finalizer gone (for a pod, once its grace period is over too).
fn removes(kind: Kind, old: &Entry, merged: &Value) -> bool {
    let finalizers_empty = merged["metadata"]["finalizers"]
        .as_array()
        .is_none_or(|f| f.is_empty());
    old.idx.deleting
        && finalizers_empty
        && (kind != Kind::Pod || merged["metadata"]["deletionGracePeriodSeconds"] == 0)
}

impl Made {
    /// Serializes and indexes the object to store, where it will be written: outside the
    /// store lock.
    fn prepare(self, kind: Kind, old: &Entry) -> Made {
        match self.merged {
            Merged::Value(v) if !removes(kind, old, &v) && v != self.old_v => Made {
                merged: Merged::Prepared(Box::new(Prepared::new(kind, v))),
                ..self
            },
            _ => self,
        }
    }
}

/// Admits an update made from `old` (still the stored object) and stores it: the object
/// removed when its last finalizer goes while it is being deleted, nothing written when it
/// is unchanged. Under the store lock.
fn store_update(
    inner: &mut Inner,
    kind: Kind,
    old: &Entry,
    made: Made,
    admit: Option<&dyn Admit>,
) -> Result<Entry, ApiError> {
    if let Some(a) = admit {
        a.admit(
            inner,
            Operation::Update,
            &made.name,
            made.merged.value(),
            &made.old_v,
        )?;
    }
    let merged = match made.merged {
        // Made ready outside the lock, where it was found to neither remove the object nor
        // leave it unchanged: not compared again here.
        Merged::Prepared(p) => return Ok(inner.put_prepared(*p)),
        Merged::Value(v) => v,
    };
    if removes(kind, old, &merged) {
        let key = old.idx.key();
        return Ok(inner.remove(kind, &key, merged).expect("present"));
    }
    if merged == made.old_v {
        return Ok(old.clone());
    }
    Ok(inner.put(kind, merged))
}

/// The registry's part of an update, before admission: the version checked, validated and
/// merged into the stored `old`. Pure.
fn make_update(kind: Kind, old: &Entry, new: Value, target: Target) -> Result<Made, ApiError> {
    let name = old.idx.name.clone();
    if let Some(rv) = new["metadata"]["resourceVersion"].as_str() {
        if !rv.is_empty() && rv != old.idx.rv.to_string() {
            return Err(ApiError::conflict(kind, &name));
        }
    }
    if new["metadata"]["name"].as_str().is_some_and(|n| n != name) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the request ({name})",
            new["metadata"]["name"].as_str().unwrap_or("")
        )));
    }
    let old_v = old.value();
    kinds::validate(kind, &new)?;
    let mut new = kind.canonicalize(new)?;
    if kind.is_event() {
        new = events::to_storage(kind, &new);
        // rest.BeforeUpdate checks labels and annotations twice (ValidateObjectMetaAccessor
        // and ValidateObjectMetaAccessorUpdate) before the strategy: a bad label is two
        // causes (one line of the message).
        let mut errs = validation::labels_and_annotations(&new["metadata"]);
        errs.extend(validation::labels_and_annotations(&new["metadata"]));
        errs.extend(events::validate_update(&new, &old_v, kind));
        errors::check(Kind::Event, &name, &errs)?;
    }
    let mut merged = match target {
        Target::Status => {
            let mut m = old_v.clone();
            m["status"] = new["status"].take();
            if kind == Kind::Node {
                // nodeStatusStrategy resets only the spec: the metadata of a nodes/status write
                // (labels, annotations) is stored with its status, unlike other kinds'.
                m["metadata"] = new["metadata"].take();
            }
            strategy::prepare_status_update(kind, &mut m, &old_v);
            m
        }
        Target::Main => {
            strategy::default_fields(kind, &mut new);
            if kind == Kind::Namespace {
                // Only the finalize subresource changes a namespace's finalizers.
                match old_v["spec"].get("finalizers") {
                    Some(f) => new["spec"]["finalizers"] = f.clone(),
                    None => {
                        if let Some(spec) = new["spec"].as_object_mut() {
                            spec.remove("finalizers");
                        }
                    }
                }
            }
            if kind.has_status_subresource() {
                new["status"] = old_v["status"].clone();
                if new["status"].is_null() {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            new
        }
    };
    {
        let md = merged["metadata"]
            .as_object_mut()
            .ok_or_else(|| ApiError::undecodable(kind, "no metadata"))?;
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
            "name",
        ] {
            match old_v["metadata"].get(k) {
                Some(v) => md.insert(k.into(), v.clone()),
                None => md.remove(k),
            };
        }
        md.insert(
            "resourceVersion".into(),
            old_v["metadata"]["resourceVersion"].clone(),
        );
    }
    if target == Target::Main {
        let mut errs = strategy::validate_spec(kind, &merged);
        errs.extend(strategy::validate_update(kind, &merged, &old_v));
        errors::check(kind, &name, &errs)?;
    } else {
        errors::check(kind, &name, &strategy::validate_status(kind, &merged))?;
    }
    if kind.bumps_generation() && merged["spec"] != old_v["spec"] {
        let g = old_v["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        merged["metadata"]["generation"] = json!(g);
    }
    Ok(Made {
        name,
        merged: Merged::Value(merged),
        old_v,
    })
}

/// PUT.
pub fn update(
    store: &Store,
    kind: Kind,
    namespace: &str,
    name: &str,
    target: Target,
    body: Value,
    admit: Option<&dyn Admit>,
) -> Result<Entry, ApiError> {
    guaranteed_update(store, kind, namespace, name, admit, |old| {
        make_update(kind, old, body.clone(), target)
    })
}

/// PATCH.
#[allow(clippy::too_many_arguments)]
pub fn patch(
    store: &Store,
    kind: Kind,
    namespace: &str,
    name: &str,
    target: Target,
    typ: PatchType,
    body: &[u8],
    admit: Option<&dyn Admit>,
) -> Result<Entry, ApiError> {
    guaranteed_update(store, kind, namespace, name, admit, |old| {
        // A patch applies to the object as the request's version shows it.
        let current = events::view(kind, &old.value());
        let new = patch::apply(kind.kind_name(), typ, &current, body)?;
        make_update(kind, old, new, target)
    })
}

/// An update as kube-apiserver's GuaranteedUpdate makes it: the stored object read, the new
/// version made from it by `make` (parsed, checked, merged) and serialized outside the store
/// lock, and stored under it if the object is still as read, else all again from what is
/// stored now (a resourceVersion the request gave then conflicts, as it does there). Under the
/// lock, a Node patch held it 150 us at 5,000 nodes.
fn guaranteed_update(
    store: &Store,
    kind: Kind,
    namespace: &str,
    name: &str,
    admit: Option<&dyn Admit>,
    mut make: impl FnMut(&Entry) -> Result<Made, ApiError>,
) -> Result<Entry, ApiError> {
    let key = key_of(namespace, name);
    loop {
        let old = store
            .get(kind, &key)
            .ok_or_else(|| ApiError::not_found(kind, name))?;
        let made = make(&old)?.prepare(kind, &old);
        let mut inner = store.lock();
        match inner.get(kind, &key) {
            None => return Err(ApiError::not_found(kind, name)),
            Some(now) if now.idx.rv != old.idx.rv => continue,
            Some(_) => return store_update(&mut inner, kind, &old, made, admit),
        }
    }
}

/// DeleteOptions that matter here.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// gracePeriodSeconds (query or body)
    pub grace: Option<i64>,
    /// preconditions.uid
    pub uid: Option<String>,
    /// preconditions.resourceVersion
    pub rv: Option<String>,
}

impl DeleteOptions {
    /// Reads a DeleteOptions body (possibly empty) and the query's gracePeriodSeconds.
    pub fn parse(body: &[u8], query_grace: Option<i64>) -> Result<DeleteOptions, ApiError> {
        let v: Value = if body.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?
        };
        Ok(DeleteOptions {
            grace: query_grace.or_else(|| v["gracePeriodSeconds"].as_i64()),
            uid: v["preconditions"]["uid"].as_str().map(str::to_string),
            rv: v["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_string),
        })
    }
}

impl DeleteOptions {
    /// The uid precondition, checked against the object as stored (`idx`).
    fn check_uid(&self, kind: Kind, name: &str, idx: &Index) -> Result<(), ApiError> {
        match &self.uid {
            Some(uid) if *uid != idx.uid => {
                Err(ApiError::uid_precondition(kind, name, uid, &idx.uid))
            }
            _ => Ok(()),
        }
    }
}

/// What a DELETE did.
pub enum Deleted {
    /// Removed now: the last state.
    Gone(Entry),
    /// Marked for graceful deletion (pods on a node, objects with finalizers): the new state.
    Marked(Entry),
}

/// DELETE, with preconditions and graceful pod deletion (golden 54-59, 27).
pub fn delete(
    inner: &mut Inner,
    kind: Kind,
    namespace: &str,
    name: &str,
    opts: &DeleteOptions,
    invariants: Option<&Invariants>,
    admit: Option<&dyn Admit>,
) -> Result<Deleted, ApiError> {
    let key = key_of(namespace, name);
    let old = inner
        .get(kind, &key)
        .cloned()
        .ok_or_else(|| ApiError::not_found(kind, name))?;
    delete_entry(inner, kind, name, old, None, opts, invariants, admit)
}

/// DELETE of `old`, the object as stored; `parsed` is its value when the caller has it (an
/// eviction's delete after its condition), so that it is not parsed again under the lock.
#[allow(clippy::too_many_arguments)]
fn delete_entry(
    inner: &mut Inner,
    kind: Kind,
    name: &str,
    old: Entry,
    parsed: Option<Value>,
    opts: &DeleteOptions,
    invariants: Option<&Invariants>,
    admit: Option<&dyn Admit>,
) -> Result<Deleted, ApiError> {
    let key = old.idx.key();
    opts.check_uid(kind, name, &old.idx)?;
    if let Some(rv) = &opts.rv {
        if *rv != old.idx.rv.to_string() {
            return Err(ApiError::rv_precondition(
                kind,
                name,
                rv,
                &old.idx.rv.to_string(),
            ));
        }
    }
    let mut v = parsed.unwrap_or_else(|| old.value());
    if let Some(a) = admit {
        a.admit(inner, Operation::Delete, name, &Value::Null, &v)?;
    }
    let has_finalizers = v["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    let now = Utc::now();
    if kind == Kind::Pod {
        if let Some(inv) = invariants {
            if !old.idx.deleting {
                check_disruption(inner, &old.idx, Cause::Delete, inv);
            }
        }
        return Ok(match pod_deletion(v, &old.idx, opts.grace, now) {
            PodDeletion::AsIs => Deleted::Marked(old),
            PodDeletion::Marked(v) => Deleted::Marked(inner.put(kind, v)),
            PodDeletion::Gone(v) => Deleted::Gone(inner.remove(kind, &key, v).expect("present")),
        });
    }
    if has_finalizers {
        if old.idx.deleting {
            return Ok(Deleted::Marked(old));
        }
        v["metadata"]["deletionTimestamp"] = json!(timestamp(now));
        v["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        return Ok(Deleted::Marked(inner.put(kind, v)));
    }
    Ok(Deleted::Gone(inner.remove(kind, &key, v).expect("present")))
}

/// What a graceful delete does to a pod.
enum PodDeletion<V> {
    /// Already being deleted with no longer a grace period: left as it is.
    AsIs,
    /// Marked for deletion, `grace` seconds on: this is its new state.
    Marked(V),
    /// Gone at once (no grace, no finalizer): this is its last state.
    Gone(V),
}

/// How a graceful delete at `now` with `grace` seconds asked (else the pod's own) leaves the
/// pod `v` (indexed by `idx`): a pod not on a node, or finished, goes at once, as
/// kube-apiserver's pod strategy has it; a pod already being deleted only shortens its
/// grace. Pure.
fn pod_deletion(
    mut v: Value,
    idx: &Index,
    grace: Option<i64>,
    now: DateTime<Utc>,
) -> PodDeletion<Value> {
    let default_grace = v["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(30);
    let mut grace = grace.unwrap_or(default_grace).max(0);
    let finished = matches!(idx.phase.as_deref(), Some("Succeeded" | "Failed"));
    if idx.node_name.is_none() || finished {
        grace = 0;
    }
    if idx.deleting {
        let current = v["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0);
        if grace >= current {
            return PodDeletion::AsIs;
        }
    }
    let has_finalizers = v["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    v["metadata"]["deletionTimestamp"] = json!(timestamp(now + chrono::Duration::seconds(grace)));
    v["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
    let g = v["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
    v["metadata"]["generation"] = json!(g);
    if grace == 0 && !has_finalizers {
        PodDeletion::Gone(v)
    } else {
        PodDeletion::Marked(v)
    }
}

/// The budgets of the pod's namespace whose selector matches it.
pub fn budgets_for(inner: &Inner, pod: &Index) -> Vec<Entry> {
    inner
        .budgets_selecting(&pod.namespace, &pod.labels)
        .cloned()
        .collect()
}

/// What a budget's numbers are computed from besides the budget itself: the indexes of the
/// pods it selects and the scale of their controllers, read under the store lock, so that
/// the budget is parsed and its numbers computed outside it (the world's refreshes).
pub struct BudgetPods {
    pods: Vec<Arc<Index>>,
    /// The desired replica count of each pod's controller, by controller uid.
    scales: HashMap<String, i64>,
}

impl BudgetPods {
    /// Reads them for the budget whose index is `pdb`: the pods of its namespace its
    /// selector matches, found through the store's label index by a label it requires.
    pub fn read(inner: &Inner, pdb: &Index) -> BudgetPods {
        let pods: Vec<Arc<Index>> = match &pdb.pdb_selector {
            None => Vec::new(),
            Some(sel) => {
                let candidates: Box<dyn Iterator<Item = &Entry>> = match sel.first_equality() {
                    Some((k, v)) => Box::new(inner.pods_with_label(&pdb.namespace, k, v)),
                    None => inner.range(Kind::Pod, Some(&pdb.namespace), None),
                };
                candidates
                    .filter(|e| sel.matches(&e.idx.labels))
                    .map(|e| e.idx.clone())
                    .collect()
            }
        };
        let mut scales = HashMap::new();
        for p in &pods {
            let Some((okind, oname, ouid)) = &p.owner else {
                continue;
            };
            if scales.contains_key(ouid) {
                continue;
            }
            let kind = match okind.as_str() {
                "ReplicaSet" => Kind::ReplicaSet,
                "DaemonSet" => Kind::DaemonSet,
                "Deployment" => Kind::Deployment,
                "StatefulSet" => Kind::StatefulSet,
                _ => continue,
            };
            if let Some(owner) = inner.get(kind, &key_of(&p.namespace, oname)) {
                let scale = owner.idx.workload.as_ref().and_then(|w| w.scale);
                scales.insert(ouid.clone(), scale.unwrap_or(1));
            }
        }
        BudgetPods { pods, scales }
    }

    /// The budget's numbers at `now`, and the disrupted pods it still counts (not deleting,
    /// not expired after 2 minutes). Pure.
    pub fn numbers(&self, pdb: &Value, now: DateTime<Utc>) -> (Budget, BTreeSet<String>) {
        let pods: Vec<&Index> = self.pods.iter().map(|p| p.as_ref()).collect();
        let disrupted = disrupted_set(pdb, &pods, now);
        let b = pdb::compute(&pdb["spec"], &pods, &disrupted, |p| {
            let (_, _, ouid) = p.owner.as_ref()?;
            Some((ouid.clone(), *self.scales.get(ouid)?))
        });
        (b, disrupted)
    }
}

/// The disrupted-pod names still counted (not deleting, not expired after 2 minutes).
pub fn disrupted_set(pdb: &Value, pods: &[&Index], now: DateTime<Utc>) -> BTreeSet<String> {
    let Some(map) = pdb["status"]["disruptedPods"].as_object() else {
        return BTreeSet::new();
    };
    map.iter()
        .filter(|(name, t)| {
            let fresh = t
                .as_str()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .is_some_and(|t| t.to_utc() + chrono::Duration::minutes(2) > now);
            fresh && pods.iter().any(|p| &p.name == *name && !p.deleting)
        })
        .map(|(n, _)| n.clone())
        .collect()
}

/// Computes a budget's numbers from the store now (`pdb` is the budget `idx` indexes).
pub fn budget_now(inner: &Inner, idx: &Index, pdb: &Value) -> (Budget, BTreeSet<String>) {
    BudgetPods::read(inner, idx).numbers(pdb, Utc::now())
}

/// Records a PDB violation if taking `pod` away leaves one of its budgets below desired.
pub fn check_disruption(inner: &Inner, pod: &Index, cause: Cause, inv: &Invariants) {
    if !pod.ready || pod.deleting {
        return;
    }
    for e in budgets_for(inner, pod) {
        check_budget(inner, pod, &e, &e.value(), cause, inv);
    }
}

/// [`check_disruption`] for one budget of `pod`, `budget`, already parsed as `parsed`.
fn check_budget(
    inner: &Inner,
    pod: &Index,
    budget: &Entry,
    parsed: &Value,
    cause: Cause,
    inv: &Invariants,
) {
    if !pod.ready || pod.deleting {
        return;
    }
    let (b, disrupted) = budget_now(inner, &budget.idx, parsed);
    let was_healthy = pdb::healthy(pod, &disrupted);
    let after = b.healthy - i64::from(was_healthy);
    if after < b.desired {
        inv.record_violation(
            &budget.idx.namespace,
            &budget.idx.name,
            &pod.name,
            cause,
            after,
            b.desired,
        );
    }
}

/// POST pods/NAME/eviction (golden 40-53).
///
/// `abandon` is asked once a budget has admitted the eviction and recorded it: when it says
/// so, the request is abandoned there, after the budget was written and before the pod is
/// deleted (its client killed mid-request, the server timing it out): kube-apiserver keeps the
/// budget's `disruptedPods` entry and answers 504, and the disruption controller counts that
/// pod as disrupted until the entry expires, two minutes later. Asked only then, so a refused
/// or budget-less eviction never uses up an abandonment a test asked for.
pub fn evict(
    store: &Store,
    namespace: &str,
    name: &str,
    body: &[u8],
    invariants: &Invariants,
    abandon: impl FnOnce() -> bool,
    admit: Option<&dyn Admit>,
) -> Result<(), ApiError> {
    if evict_or_abandon(store, namespace, name, body, invariants, abandon, admit)? {
        return Err(ApiError::timeout());
    }
    Ok(())
}

/// Whether the eviction was abandoned after its budget was written.
fn evict_or_abandon(
    store: &Store,
    namespace: &str,
    name: &str,
    body: &[u8],
    invariants: &Invariants,
    abandon: impl FnOnce() -> bool,
    admit: Option<&dyn Admit>,
) -> Result<bool, ApiError> {
    let ev: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::undecodable(Kind::Pod, format!("decoding Eviction: {e}")))?;
    if ev["metadata"]["name"].as_str().is_some_and(|n| n != name) {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let opts = DeleteOptions {
        grace: ev["deleteOptions"]["gracePeriodSeconds"].as_i64(),
        uid: ev["deleteOptions"]["preconditions"]["uid"]
            .as_str()
            .map(str::to_string),
        rv: ev["deleteOptions"]["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
    };
    let mut inner = store.lock();
    // The Eviction is admitted before the pod is looked at, as kube-apiserver's eviction
    // handler runs its create validation (the pod's own deletion is not admitted).
    if let Some(a) = admit {
        a.admit(&inner, Operation::Create, name, &ev, &Value::Null)?;
    }
    let key = key_of(namespace, name);
    let pod = inner
        .get(Kind::Pod, &key)
        .cloned()
        .ok_or_else(|| ApiError::not_found(Kind::Pod, name))?;
    let idx = pod.idx.clone();
    let bypass = idx.deleting
        || matches!(
            idx.phase.as_deref(),
            Some("Pending" | "Succeeded" | "Failed")
        );
    if bypass {
        if !idx.deleting {
            delete(&mut inner, Kind::Pod, namespace, name, &opts, None, None)?;
        }
        invariants.evicted(&key);
        return Ok(false);
    }
    let budgets = budgets_for(&inner, &idx);
    if budgets.len() > 1 {
        return Err(ApiError::multiple_budgets());
    }
    if let Some(pdb) = budgets.first() {
        let mut v = pdb.value();
        let generation = v["metadata"]["generation"].as_i64().unwrap_or(0);
        if v["status"]["observedGeneration"].as_i64().unwrap_or(-1) < generation {
            return Err(ApiError::budget_not_observed(&pdb.idx.name));
        }
        let current = v["status"]["currentHealthy"].as_i64().unwrap_or(0);
        let desired = v["status"]["desiredHealthy"].as_i64().unwrap_or(0);
        let allowed = v["status"]["disruptionsAllowed"].as_i64().unwrap_or(0);
        let always = v["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow";
        if !idx.ready && (always || current >= desired) {
            // An unhealthy pod may go when the budget is healthy (IfHealthyBudget), PDB untouched.
        } else {
            if allowed <= 0 {
                invariants.budget_refused(&pdb.idx.key(), &key);
                return Err(ApiError::budget_exhausted(&pdb.idx.name, desired, current));
            }
            // Its only budget, parsed above (a second parse was a tenth of an eviction).
            check_budget(&inner, &idx, pdb, &v, Cause::Eviction, invariants);
            let now = timestamp(Utc::now());
            v["status"]["disruptionsAllowed"] = json!(allowed - 1);
            v["status"]["disruptedPods"][name] = json!(now);
            if allowed - 1 == 0 {
                set_condition(&mut v, false, &now);
            }
            // The budget as read above, its allowance, disrupted pods and condition changed:
            // written as the disruption controller's refreshes are (no update semantics to
            // apply, and their parse and typed round trip were a fifth of an eviction's time
            // under the lock), its status alone spliced into the stored bytes.
            inner.put_prepared(Prepared::with_status(Kind::Pdb, pdb, v["status"].take()));
            if abandon() {
                return Ok(true);
            }
        }
    } else {
        check_disruption(&inner, &idx, Cause::Eviction, invariants);
    }
    if opts.rv.is_some() {
        // A resourceVersion precondition is checked against the pod as its condition leaves
        // it: both written under this lock, as they always were.
        add_disruption_target_and_delete(&mut inner, pod, &opts)?;
        invariants.evicted(&key);
        return Ok(false);
    }
    drop(inner);
    // The budget has admitted the eviction and recorded it. The pod's condition and its
    // deletion (kube-apiserver writes them after the budget, as writes of their own) are made
    // outside the lock, and written under it if the pod was not written meanwhile; else as
    // before, from the pod as it is now. Under the lock, they were most of an eviction's time
    // there, and evictions the largest share of the lock at 5,000 nodes.
    opts.check_uid(Kind::Pod, name, &idx)?;
    let mut pv = pod.value();
    add_disruption_target(&mut pv);
    // The condition changes the status alone: spliced into the pod's stored bytes, without a
    // copy of the whole pod made and written again.
    let condition = Prepared::with_status(Kind::Pod, &pod, pv["status"].clone());
    let deletion = match pod_deletion(pv, &idx, opts.grace, Utc::now()) {
        PodDeletion::AsIs => PodDeletion::AsIs,
        PodDeletion::Marked(v) => PodDeletion::Marked(Prepared::new(Kind::Pod, v)),
        PodDeletion::Gone(v) => PodDeletion::Gone(Prepared::new(Kind::Pod, v)),
    };
    let mut inner = store.lock();
    match inner.get(Kind::Pod, &key).cloned() {
        Some(now) if now.idx.rv == idx.rv => {
            inner.put_prepared(condition);
            match deletion {
                PodDeletion::AsIs => {}
                PodDeletion::Marked(p) => {
                    inner.put_prepared(p);
                }
                PodDeletion::Gone(p) => {
                    inner.remove_prepared(p);
                }
            }
        }
        Some(now) => add_disruption_target_and_delete(&mut inner, now, &opts)?,
        None => return Err(ApiError::not_found(Kind::Pod, name)),
    }
    invariants.evicted(&key);
    Ok(false)
}

/// Adds the DisruptionTarget condition an eviction sets to a pod's status (replacing one there).
fn add_disruption_target(pv: &mut Value) {
    let now = timestamp(Utc::now());
    let cond = json!({"type": "DisruptionTarget", "status": "True", "lastProbeTime": null,
        "lastTransitionTime": now, "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"});
    match pv["status"]["conditions"].as_array_mut() {
        Some(cs) => {
            cs.retain(|c| c["type"] != "DisruptionTarget");
            cs.push(cond);
        }
        None => pv["status"]["conditions"] = json!([cond]),
    }
}

/// Writes an evicted pod's DisruptionTarget condition, then deletes it gracefully, under the
/// lock.
fn add_disruption_target_and_delete(
    inner: &mut Inner,
    pod: Entry,
    opts: &DeleteOptions,
) -> Result<(), ApiError> {
    let mut pv = pod.value();
    add_disruption_target(&mut pv);
    let entry = inner.put_kept(Kind::Pod, &mut pv);
    let name = entry.idx.name.clone();
    delete_entry(inner, Kind::Pod, &name, entry, Some(pv), opts, None, None)?;
    Ok(())
}

/// Sets the DisruptionAllowed condition, moving lastTransitionTime only when it flips.
pub fn set_condition(pdb: &mut Value, allowed: bool, now: &str) {
    let (status, reason) = if allowed {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    let generation = pdb["metadata"]["generation"].clone();
    let old = pdb["status"]["conditions"].as_array().and_then(|cs| {
        cs.iter()
            .find(|c| c["type"] == "DisruptionAllowed")
            .cloned()
    });
    let ltt = match &old {
        Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    pdb["status"]["conditions"] = json!([{
        "type": "DisruptionAllowed", "status": status, "observedGeneration": generation,
        "lastTransitionTime": ltt, "reason": reason, "message": "",
    }]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_map(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm", "namespace": "ns", "uid": "u1",
                            "creationTimestamp": "2026-11-27T00:00:00Z"},
               "data": data})
    }

    /// An update whose object is written by someone else while it is made (outside the store
    /// lock) is made again from what is stored then: the other write is not lost. With the
    /// resourceVersion it was read at, it conflicts instead, as kube-apiserver answers.
    #[test]
    fn an_update_raced_by_another_write_is_made_again_from_it() {
        let store = Store::new(16);
        store
            .lock()
            .put(Kind::ConfigMap, config_map(json!({"a": "1"})));
        let race = |made: &mut usize| {
            *made += 1;
            if *made == 1 {
                store
                    .lock()
                    .put(Kind::ConfigMap, config_map(json!({"a": "1", "b": "2"})));
            }
        };
        let mut made = 0;
        let e = guaranteed_update(&store, Kind::ConfigMap, "ns", "cm", None, |old| {
            race(&mut made);
            let mut v = old.value();
            v["data"]["c"] = json!("3");
            make_update(Kind::ConfigMap, old, v, Target::Main)
        })
        .unwrap();
        assert_eq!(made, 2, "made again once");
        assert_eq!(e.value()["data"], json!({"a": "1", "b": "2", "c": "3"}));
        assert_eq!(store.get(Kind::ConfigMap, "ns/cm").unwrap().bytes, e.bytes);

        // A PUT of the version read now, raced by another write.
        let read_at = e.idx.rv.to_string();
        let mut made = 0;
        let err = guaranteed_update(&store, Kind::ConfigMap, "ns", "cm", None, |old| {
            made += 1;
            if made == 1 {
                store
                    .lock()
                    .put(Kind::ConfigMap, config_map(json!({"d": "4"})));
            }
            let mut v = config_map(json!({"e": "5"}));
            v["metadata"]["resourceVersion"] = json!(read_at);
            make_update(Kind::ConfigMap, old, v, Target::Main)
        })
        .unwrap_err();
        assert_eq!(made, 2);
        assert_eq!(err.code, 409, "{err:?}");
        let stored = store.get(Kind::ConfigMap, "ns/cm").unwrap().value();
        assert_eq!(
            stored["data"],
            json!({"d": "4"}),
            "the conflicting write is not stored"
        );
    }
}
