//! Draining a node with `kubectl drain` semantics, through the Eviction API (policy/v1) only.
//!
//! Owns which pods a drain evicts ([`classify`], pure, and the one `rollboot plan` previews a
//! drain with; [`Reason`] names each rule), the eviction loop (bounded concurrency;
//! 429 retried after `evictionRetryInterval` or the server's Retry-After; 500 retried with an
//! Event naming the overlapping budgets; 404 is success), and the wait until every evicted pod
//! is gone or replaced (same name, new UID). It must never delete a pod around a
//! PodDisruptionBudget unless `drain.forceDeleteAfterTimeout` says so, never list pods beyond
//! the node being drained, and never act without re-checking leadership first. The Kubernetes
//! calls sit behind [`DrainApi`] so the logic is tested without HTTP.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::config::Drain;
use crate::lease::NotLeader;
use crate::node::MIRROR_POD;
use crate::selector::Selector;

/// What a drain does with one pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Evict it.
    Evict,
    /// Leave it.
    Skip(Reason),
    /// It blocks the drain (the config does not allow evicting it).
    Refuse(Reason),
}

/// Why [`classify`] leaves a pod alone or refuses to evict it: one value per rule, so that
/// the drain and `rollboot plan` (which previews a drain) tell the same story from the same
/// function. Serialized as a stable camelCase code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Reason {
    /// Skipped: the pod is already being deleted.
    AlreadyDeleting,
    /// Skipped: a mirror (static) pod, which the API cannot evict.
    MirrorPod,
    /// Skipped: not matched by `drain.podSelector` (it stays on the node through the reboot).
    OutsidePodSelector,
    /// Skipped: a DaemonSet pod (`drain.ignoreDaemonSets`).
    DaemonSet,
    /// Refused: a DaemonSet pod while `drain.ignoreDaemonSets` is false.
    DaemonSetNotIgnored,
    /// Refused: no controller would recreate it, and `drain.evictUnreplicated` is false.
    Unreplicated,
    /// Refused: it uses emptyDir data, and `drain.deleteEmptyDirData` is false.
    EmptyDir,
}

impl Reason {
    /// The reason as a person reads it.
    pub fn text(self) -> &'static str {
        match self {
            Reason::AlreadyDeleting => "already deleting",
            Reason::MirrorPod => "mirror pod",
            Reason::OutsidePodSelector => "not matched by drain.podSelector",
            Reason::DaemonSet => "DaemonSet pod",
            Reason::DaemonSetNotIgnored => "DaemonSet pod (drain.ignoreDaemonSets is false)",
            Reason::Unreplicated => {
                "has no controller and would not be recreated (drain.evictUnreplicated is false)"
            }
            Reason::EmptyDir => {
                "uses emptyDir data that eviction would lose (drain.deleteEmptyDirData is false)"
            }
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

/// A pod's identity: namespace, name and UID.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

impl PodRef {
    /// The identity of a pod.
    pub fn of(p: &Pod) -> PodRef {
        PodRef::of_meta(&p.metadata)
    }

    /// The identity of the pod with this metadata.
    pub fn of_meta(m: &kube::api::ObjectMeta) -> PodRef {
        PodRef {
            namespace: m.namespace.clone().unwrap_or_default(),
            name: m.name.clone().unwrap_or_default(),
            uid: m.uid.clone().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The controller owner of a pod: (kind, name).
pub fn controller_of(p: &Pod) -> Option<(&str, &str)> {
    p.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.as_str(), o.name.as_str()))
}

/// Decides, as `kubectl drain` does, what happens to `pod`. `daemon_set_exists` is asked only
/// for a DaemonSet pod: a pod whose DaemonSet is gone is evicted like any other.
pub fn classify(
    pod: &Pod,
    cfg: &Drain,
    pod_selector: &Selector,
    daemon_set_exists: bool,
) -> Disposition {
    let meta = &pod.metadata;
    if meta.deletion_timestamp.is_some() {
        return Disposition::Skip(Reason::AlreadyDeleting);
    }
    if meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_POD))
    {
        return Disposition::Skip(Reason::MirrorPod);
    }
    if !pod_selector.matches(meta.labels.as_ref().unwrap_or(&BTreeMap::new())) {
        return Disposition::Skip(Reason::OutsidePodSelector);
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Disposition::Evict;
    }
    let owner = controller_of(pod);
    if let Some(("DaemonSet", _)) = owner {
        if daemon_set_exists {
            return if cfg.ignore_daemon_sets {
                Disposition::Skip(Reason::DaemonSet)
            } else {
                Disposition::Refuse(Reason::DaemonSetNotIgnored)
            };
        }
    } else if owner.is_none() && !cfg.evict_unreplicated {
        return Disposition::Refuse(Reason::Unreplicated);
    }
    let empty_dir = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|vs| vs.iter().any(|v| v.empty_dir.is_some()));
    if empty_dir && !cfg.delete_empty_dir_data {
        return Disposition::Refuse(Reason::EmptyDir);
    }
    Disposition::Evict
}

/// The answer to one eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evicted {
    /// Accepted: the pod is terminating.
    Accepted,
    /// 404: already gone.
    Gone,
    /// 429: a budget forbids it now.
    Blocked {
        /// The server's message (names the budget).
        message: String,
        /// Retry-After, when the server said.
        retry_after: Option<Duration>,
    },
    /// 500: usually more than one budget covers the pod.
    ServerError(String),
}

/// What can go wrong draining a node.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// Pods the config does not allow evicting.
    #[error("node {node}: cannot drain: {}", .pods.join("; "))]
    Refused {
        /// Node.
        node: String,
        /// Each pod with the reason.
        pods: Vec<String>,
    },
    /// The deadline passed.
    #[error("node {node}: drain timed out with {} pod(s) left: {}", .pods.len(), .pods.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", "))]
    Timeout {
        /// Node.
        node: String,
        /// Pods not yet gone.
        pods: Vec<PodRef>,
    },
    /// An API call failed.
    #[error("node {node}: {what}: {source}")]
    Api {
        /// Node.
        node: String,
        /// What was being done, naming the object.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Leadership was lost: stop at once.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
}

/// The Kubernetes calls a drain needs.
pub trait DrainApi: Send + Sync {
    /// The pods bound to `node` (field selector `spec.nodeName`).
    fn list_pods(&self, node: &str) -> impl Future<Output = Result<Vec<Pod>, DrainError>> + Send;
    /// Whether the DaemonSet `namespace/name` exists.
    fn daemon_set_exists(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<bool, DrainError>> + Send;
    /// Evicts the pod (with a UID precondition).
    fn evict(
        &self,
        pod: &PodRef,
        grace_seconds: Option<i64>,
    ) -> impl Future<Output = Result<Evicted, DrainError>> + Send;
    /// Deletes the pod (only after the timeout, when configured).
    fn delete(&self, pod: &PodRef) -> impl Future<Output = Result<(), DrainError>> + Send;
    /// The budgets in `namespace` that select at least one of `pods` (each a pod's labels);
    /// name, selector and `status.disruptedPods` are all the drain reads of them.
    fn budgets(
        &self,
        namespace: &str,
        pods: &[BTreeMap<String, String>],
    ) -> impl Future<Output = Result<Vec<PodDisruptionBudget>, DrainError>> + Send;
    /// Whether pod `namespace/name` is being deleted: `None` when it does not exist.
    fn pod_deleting(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<bool>, DrainError>> + Send;
    /// Records a Warning/Normal Event on the node, about one of its pods when `pod` is given.
    fn event(
        &self,
        pod: Option<&PodRef>,
        warning: bool,
        reason: &str,
        note: String,
    ) -> impl Future<Output = ()> + Send;
    /// Waits until none of `pods` is present with the same UID on `node`, or the deadline.
    /// Returns the pods still present, and when it saw each of the others go.
    fn wait_gone(
        &self,
        node: &str,
        pods: &[PodRef],
        deadline: DateTime<Utc>,
    ) -> impl Future<Output = Result<Gone, DrainError>> + Send;
}

/// What [`DrainApi::wait_gone`] saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gone {
    /// The pods still present at the deadline.
    pub left: Vec<PodRef>,
    /// The pods it saw go while it watched, and when. A pod already gone when the watch
    /// started is not here: when it went is not known.
    pub seen_going: BTreeMap<PodRef, DateTime<Utc>>,
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
}

/// Why rollboot cannot evaluate a budget's selector, if it cannot: an operator other than
/// In, NotIn, Exists and DoesNotExist, In or NotIn without values, Exists or DoesNotExist with
/// some. kube-apiserver refuses such a selector when the budget is written; one can still be
/// met (stored before that validation, or served by a server that does not validate). It
/// names the requirement.
pub fn selector_problem(sel: &LabelSelector) -> Option<String> {
    sel.match_expressions.iter().flatten().find_map(|e| {
        let values = e.values.as_deref().unwrap_or(&[]);
        let why = match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => "has no values",
            "Exists" | "DoesNotExist" if !values.is_empty() => "has values",
            "In" | "NotIn" | "Exists" | "DoesNotExist" => return None,
            _ => "is not In, NotIn, Exists or DoesNotExist",
        };
        Some(format!(
            "matchExpressions requirement on key `{}` with operator `{}` {why}",
            e.key, e.operator
        ))
    })
}

/// Whether a budget with this selector may select a pod with these labels: it does, or its
/// selector cannot be evaluated (see [`selector_problem`]) and it is taken to, the safe side
/// for every use rollboot makes of it (naming the budgets that may refuse an eviction,
/// waiting for the budgets of the evicted pods to be healthy again).
pub fn budget_may_select(sel: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    sel.is_some_and(|s| selector_problem(s).is_some()) || selector_matches(sel, labels)
}

/// True when the budget's selector matches the labels (a budget with no selector matches none).
pub fn selector_matches(sel: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(sel) = sel else { return false };
    let ml = sel.match_labels.as_ref();
    let me = sel.match_expressions.as_ref();
    if ml.is_none_or(|m| m.is_empty()) && me.is_none_or(|m| m.is_empty()) {
        return true;
    }
    ml.is_none_or(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)))
        && me.is_none_or(|es| {
            es.iter().all(|e| {
                let vals = e.values.as_deref().unwrap_or(&[]);
                match e.operator.as_str() {
                    "In" => labels.get(&e.key).is_some_and(|v| vals.contains(v)),
                    "NotIn" => labels.get(&e.key).is_none_or(|v| !vals.contains(v)),
                    "Exists" => labels.contains_key(&e.key),
                    "DoesNotExist" => !labels.contains_key(&e.key),
                    _ => false,
                }
            })
        })
}

/// How long kube-apiserver's disruption controller keeps counting a pod in a budget's
/// `status.disruptedPods` when the pod's deletion does not follow (`DeletionTimeout`).
pub const DISRUPTION_EXPIRY: chrono::Duration = chrono::Duration::minutes(2);

/// How long after its eviction was accepted a pod listed in a budget's `disruptedPods` but not
/// yet being deleted is still taken for that eviction's deletion on its way: kube-apiserver
/// writes the budget, then deletes the pod, and a watcher sees the two a moment apart.
pub const OWN_EVICTION_SETTLING: chrono::Duration = chrono::Duration::seconds(5);

/// What a drain knows of its own eviction of a pod, for [`phantom_disruptions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnEviction {
    /// Sent, not answered yet: the budget may already count it, the pod's deletion follows
    /// the answer.
    InFlight,
    /// Answered 201 (accepted) at that instant.
    Accepted(DateTime<Utc>),
}

/// Why a budget refuses evictions although nothing is being disrupted, when that is so: it
/// lists in `status.disruptedPods` (pod name -> when its eviction was admitted) a pod that is
/// not being deleted or no longer exists. The eviction that put it there was admitted and its
/// deletion never happened (a client killed mid-request: kube-apiserver writes the budget,
/// then deletes the pod), and Kubernetes itself clears the entry [`DISRUPTION_EXPIRY`] after
/// the eviction. `deleting` says, per listed pod, `None` for gone and whether it is deleting;
/// `own` lists the pods of the budget's namespace this drain has sent an eviction for
/// (not phantoms while their eviction is in flight or accepted within
/// [`OWN_EVICTION_SETTLING`]: their deletion is on its way).
pub fn phantom_disruptions(
    budget: &str,
    disrupted: &BTreeMap<String, DateTime<Utc>>,
    deleting: &BTreeMap<String, Option<bool>>,
    own: &BTreeMap<String, OwnEviction>,
    now: DateTime<Utc>,
) -> Option<String> {
    let on_its_way = |pod: &String| match own.get(pod) {
        Some(OwnEviction::InFlight) => true,
        Some(OwnEviction::Accepted(at)) => now - *at < OWN_EVICTION_SETTLING,
        None => false,
    };
    let notes: Vec<String> = disrupted
        .iter()
        .filter(|(pod, _)| deleting.get(*pod).copied().flatten() != Some(true))
        .filter(|(pod, _)| !on_its_way(pod))
        .map(|(pod, since)| {
            let clears = *since + DISRUPTION_EXPIRY;
            let left = (clears - now).max(chrono::Duration::zero());
            let what = match deleting.get(pod).copied().flatten() {
                None => "no longer exists",
                Some(_) => "is not being deleted",
            };
            format!(
                "{budget} counts pod {pod} as disrupted since {} but that pod {what}: an eviction \
                 was admitted and its deletion never happened (a client stopped mid-request); \
                 Kubernetes stops counting it at {} (in {}s), then evictions go through",
                since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                clears.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                left.num_seconds()
            )
        })
        .collect();
    (!notes.is_empty()).then(|| notes.join("; "))
}

/// One budget covering a pod, as an Event about a refused eviction needs it.
#[derive(Clone, Debug, Default)]
struct Covering {
    /// `namespace/name`.
    name: String,
    /// `status.disruptedPods`.
    disrupted: BTreeMap<String, DateTime<Utc>>,
}

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
    let pods = api.list_pods(node).await?;
    let mut to_evict = Vec::new();
    let mut refused = Vec::new();
    // Pods already terminating (an earlier leader's evictions) are waited for, not evicted.
    let mut terminating: Vec<&Pod> = Vec::new();
    let mut daemon_sets: BTreeMap<(String, String), bool> = BTreeMap::new();
    for p in &pods {
        let ds_exists = match (controller_of(p), p.metadata.namespace.as_deref()) {
            (Some(("DaemonSet", name)), Some(ns)) => {
                let key = (ns.to_string(), name.to_string());
                match daemon_sets.get(&key) {
                    Some(e) => *e,
                    None => {
                        let e = api.daemon_set_exists(ns, name).await?;
                        daemon_sets.insert(key, e);
                        e
                    }
                }
            }
            _ => false,
        };
        match classify(p, cfg, pod_selector, ds_exists) {
            Disposition::Evict => to_evict.push(p),
            Disposition::Skip(why) => {
                if p.metadata.deletion_timestamp.is_some()
                    && controller_of(p).is_none_or(|(k, _)| k != "DaemonSet")
                {
                    terminating.push(p);
                }
                tracing::debug!(node, pod = %PodRef::of(p), why = why.text(), "not evicting")
            }
            Disposition::Refuse(why) => refused.push(format!("pod {}: {why}", PodRef::of(p))),
        }
    }
    if !refused.is_empty() {
        return Err(DrainError::Refused {
            node: node.into(),
            pods: refused,
        });
    }
    // Pods found terminating count as drained: an earlier leader evicted them, and the gate
    // must wait for their budgets and replacements as for the ones evicted now.
    let drained: Vec<&Pod> = to_evict.iter().chain(&terminating).copied().collect();
    // The budgets covering each pod are read only when an Event must name them (an eviction
    // refused or failed): the API server enforces the budgets, and the health gate finds them
    // from the pods' labels. Read on every drain, they were a fifth of its time.
    let mut labels_by_ns: BTreeMap<String, Vec<BTreeMap<String, String>>> = BTreeMap::new();
    for p in &drained {
        labels_by_ns
            .entry(p.metadata.namespace.clone().unwrap_or_default())
            .or_default()
            .push(p.metadata.labels.clone().unwrap_or_default());
    }
    let covering_cell: tokio::sync::OnceCell<BTreeMap<PodRef, Vec<Covering>>> =
        tokio::sync::OnceCell::new();
    let read_covering = || async {
        let reads = labels_by_ns.iter().map(|(ns, labels)| async move {
            Ok::<_, DrainError>((ns, api.budgets(ns, labels).await?))
        });
        let by_ns: BTreeMap<&String, Vec<PodDisruptionBudget>> =
            futures::future::try_join_all(reads)
                .await?
                .into_iter()
                .collect();
        let mut covering: BTreeMap<PodRef, Vec<Covering>> = BTreeMap::new();
        for p in &drained {
            let r = PodRef::of(p);
            let labels = p.metadata.labels.clone().unwrap_or_default();
            let budgets: Vec<Covering> = by_ns[&r.namespace]
                .iter()
                .filter(|b| {
                    budget_may_select(b.spec.as_ref().and_then(|s| s.selector.as_ref()), &labels)
                })
                .map(|b| Covering {
                    name: format!(
                        "{}/{}",
                        r.namespace,
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
                })
                .collect();
            covering.insert(r, budgets);
        }
        // One Event for all of them: Events about one node with one reason are one series.
        let mut unreadable = Vec::new();
        for (ns, budgets) in &by_ns {
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
            api.event(None, true, "BudgetSelectorUnreadable", note)
                .await;
        }
        Ok::<_, DrainError>(covering)
    };
    let covering_of = |pod: &PodRef| {
        let (cell, read) = (&covering_cell, &read_covering);
        let pod = pod.clone();
        async move {
            let covering = cell.get_or_try_init(read).await?;
            Ok::<_, DrainError>(covering.get(&pod).cloned().unwrap_or_default())
        }
    };
    let names = |budgets: &[Covering]| {
        budgets
            .iter()
            .map(|b| b.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    // This drain's own evictions, sent and answered (concurrent ones included): a budget lists
    // a pod as disrupted before the eviction's 201 comes back, and that is not a phantom.
    let own: std::sync::Mutex<BTreeMap<PodRef, OwnEviction>> = Default::default();
    let own_state = |pod: &PodRef, state: Option<OwnEviction>| {
        let mut own = own.lock().unwrap_or_else(|e| e.into_inner());
        match state {
            Some(s) => own.insert(pod.clone(), s),
            None => own.remove(pod),
        };
    };
    // For a refused eviction: the budgets' entries for pods whose deletion never happened.
    let phantoms = |pod: &PodRef, budgets: Vec<Covering>| {
        let pod = pod.clone();
        let own = &own;
        async move {
            let mut notes = Vec::new();
            for b in budgets {
                let mut deleting = BTreeMap::new();
                for listed in b.disrupted.keys() {
                    deleting.insert(
                        listed.clone(),
                        api.pod_deleting(&pod.namespace, listed).await?,
                    );
                }
                // Read after the pods' states: an eviction answered meanwhile is in it.
                let ours: BTreeMap<String, OwnEviction> = own
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
            Ok::<_, DrainError>(notes)
        }
    };
    let owners = drained
        .iter()
        .filter_map(|p| {
            let (kind, name) = controller_of(p)?;
            Some((
                kind.to_string(),
                p.metadata.namespace.clone().unwrap_or_default(),
                name.to_string(),
            ))
        })
        .collect();
    tracing::debug!(node, pods = to_evict.len(), "evicting");
    let grace = cfg.grace_period.map(|g| g.as_millis() / 1000);
    let retry = cfg.eviction_retry_interval.to_std();
    let refs: Vec<PodRef> = to_evict.iter().map(|p| PodRef::of(p)).collect();
    let evictions = futures::stream::iter(refs.iter().cloned())
        .map(|pod| {
            let (covering_of, names, phantoms, own_state) =
                (&covering_of, &names, &phantoms, &own_state);
            async move {
                let mut announced = false;
                loop {
                    ensure()?;
                    own_state(&pod, Some(OwnEviction::InFlight));
                    let answer = api.evict(&pod, grace).await;
                    let answered = Utc::now();
                    let accepted = matches!(answer, Ok(Evicted::Accepted));
                    own_state(&pod, accepted.then_some(OwnEviction::Accepted(answered)));
                    let wait = match answer? {
                        Evicted::Accepted => return Ok(Eviction::Accepted(pod, answered)),
                        Evicted::Gone => return Ok(Eviction::Gone),
                        Evicted::Blocked { message, retry_after } => {
                            if !announced {
                                announced = true;
                                let budgets = covering_of(&pod).await?;
                                let names = names(&budgets);
                                let phantom = phantoms(&pod, budgets).await?;
                                let mut note = format!("evicting pod {pod} is blocked by PodDisruptionBudget {names}: {message}; retrying");
                                if !phantom.is_empty() {
                                    note = format!("{note}. {}", phantom.join(". "));
                                    tracing::warn!(node, pod = %pod, budget = %names, reason = %phantom.join("; "), "a budget counts a disruption that is not happening");
                                }
                                api.event(Some(&pod), true, "EvictionBlocked", note).await;
                            }
                            retry_after.unwrap_or(retry)
                        }
                        Evicted::ServerError(message) if message.contains("more than one PodDisruptionBudget") => {
                            let names = names(&covering_of(&pod).await?);
                            api.event(Some(&pod), true, "EvictionFailed", format!("evicting pod {pod} failed (overlapping PodDisruptionBudgets: {names}): {message}; retrying")).await;
                            retry
                        }
                        // A timeout or an unavailable server: the eviction may or may not have
                        // been admitted; asking again is safe (the UID precondition holds).
                        Evicted::ServerError(message) => {
                            tracing::warn!(node, pod = %pod, error = %message, "eviction failed on the server side; retrying");
                            api.event(Some(&pod), true, "EvictionFailed", format!("evicting pod {pod} failed: {message}; retrying")).await;
                            retry
                        }
                    };
                    let left = (deadline - Utc::now()).to_std().unwrap_or_default();
                    if left.is_zero() {
                        return Ok(Eviction::Stuck(pod));
                    }
                    tokio::time::sleep(wait.min(left)).await;
                }
            }
        })
        .buffer_unordered(cfg.concurrent_evictions.max(1) as usize)
        .collect::<Vec<Result<Eviction, DrainError>>>();
    let results = evictions.await;
    let mut stuck = Vec::new();
    let mut accepted = BTreeMap::new();
    for r in results {
        match r? {
            Eviction::Accepted(p, at) => {
                accepted.insert(p, at);
            }
            Eviction::Gone => {}
            Eviction::Stuck(p) => stuck.push(p),
        }
    }
    if !stuck.is_empty() {
        if !cfg.force_delete_after_timeout {
            return Err(DrainError::Timeout {
                node: node.into(),
                pods: stuck,
            });
        }
        for p in &stuck {
            ensure()?;
            api.event(Some(p), true, "ForceDeleted", format!("deleting pod {p} around its budget: the drain timed out and drain.forceDeleteAfterTimeout is set")).await;
            api.delete(p).await?;
        }
    }
    tracing::debug!(
        node,
        evicted = refs.len(),
        "evictions accepted; waiting for the pods to go"
    );
    let mut waited = refs.clone();
    waited.extend(terminating.iter().map(|p| PodRef::of(p)));
    let Gone { left, seen_going } = api.wait_gone(node, &waited, deadline).await?;
    if !left.is_empty() {
        if cfg.force_delete_after_timeout {
            for p in &left {
                ensure()?;
                api.delete(p).await?;
            }
        } else {
            return Err(DrainError::Timeout {
                node: node.into(),
                pods: left,
            });
        }
    }
    let pods = drained
        .iter()
        .map(|p| {
            (
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.labels.clone().unwrap_or_default(),
            )
        })
        .collect();
    Ok(Drained {
        evicted: refs,
        pods,
        owners,
        pod_exit_seconds: median_exit_seconds(&accepted, &seen_going),
    })
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

/// [`DrainApi`] over a kube client.
pub struct KubeDrain {
    /// The client.
    pub client: kube::Client,
    /// A client without kube's transparent retry of 429, for evictions.
    pub evict_client: kube::Client,
    /// Records Events on the node.
    pub events: crate::controller::events::Recorder,
    /// The node drained.
    pub node: String,
    /// Where refused evictions are counted.
    pub metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
    /// The controller's shared budget watches: the budgets to name are read from them rather
    /// than listed (a namespace can hold tens of thousands). `None`: listed.
    pub budgets_from: Option<std::sync::Arc<crate::controller::gate::Hub>>,
}

impl KubeDrain {
    fn err(&self, what: String) -> impl FnOnce(kube::Error) -> DrainError + '_ {
        move |source| DrainError::Api {
            node: self.node.clone(),
            what,
            source,
        }
    }
}

impl DrainApi for KubeDrain {
    async fn list_pods(&self, node: &str) -> Result<Vec<Pod>, DrainError> {
        let api: kube::Api<Pod> = kube::Api::all(self.client.clone());
        let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
        Ok(api
            .list(&lp)
            .await
            .map_err(self.err("listing its pods".into()))?
            .items)
    }

    async fn daemon_set_exists(&self, namespace: &str, name: &str) -> Result<bool, DrainError> {
        let api: kube::Api<k8s_openapi::api::apps::v1::DaemonSet> =
            kube::Api::namespaced(self.client.clone(), namespace);
        Ok(api
            .get_metadata_opt(name)
            .await
            .map_err(self.err(format!("reading DaemonSet {namespace}/{name}")))?
            .is_some())
    }

    async fn evict(&self, pod: &PodRef, grace_seconds: Option<i64>) -> Result<Evicted, DrainError> {
        let api: kube::Api<Pod> = kube::Api::namespaced(self.evict_client.clone(), &pod.namespace);
        let dp = kube::api::DeleteParams {
            grace_period_seconds: grace_seconds.map(|g| g.max(0) as u32),
            preconditions: Some(kube::api::Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let ep = kube::api::EvictParams {
            delete_options: Some(dp),
            ..Default::default()
        };
        match api.evict(&pod.name, &ep).await {
            Ok(_) => Ok(Evicted::Accepted),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Evicted::Gone),
            // A UID precondition failure: the pod was replaced, so ours is gone.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Evicted::Gone),
            Err(kube::Error::Api(s)) if s.code == 429 => {
                if let Some(m) = &self.metrics {
                    m.eviction_refused("budget");
                }
                let causes = s
                    .details
                    .as_ref()
                    .map(|d| {
                        d.causes
                            .iter()
                            .map(|c| c.message.clone())
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
                    .unwrap_or_default();
                Ok(Evicted::Blocked {
                    message: if causes.is_empty() {
                        s.message.clone()
                    } else {
                        causes
                    },
                    retry_after: s
                        .details
                        .as_ref()
                        .map(|d| d.retry_after_seconds)
                        .filter(|s| *s > 0)
                        .map(|s| Duration::from_secs(s.into())),
                })
            }
            Err(kube::Error::Api(s)) if s.code >= 500 => {
                if let Some(m) = &self.metrics {
                    m.eviction_refused("server_error");
                }
                Ok(Evicted::ServerError(s.message.clone()))
            }
            Err(e) => Err(self.err(format!("evicting pod {pod}"))(e)),
        }
    }

    async fn delete(&self, pod: &PodRef) -> Result<(), DrainError> {
        let api: kube::Api<Pod> = kube::Api::namespaced(self.client.clone(), &pod.namespace);
        let dp = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&pod.name, &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(self.err(format!("deleting pod {pod}"))(e)),
        }
    }

    async fn budgets(
        &self,
        namespace: &str,
        pods: &[BTreeMap<String, String>],
    ) -> Result<Vec<PodDisruptionBudget>, DrainError> {
        if let Some(hub) = &self.budgets_from {
            let wait = std::time::Duration::from_secs(30);
            if let Some(b) = hub.budgets(namespace, pods, wait).await {
                return Ok(b);
            }
            tracing::warn!(node = %self.node, namespace, "the budget watch has not listed in 30s; listing the budgets");
        }
        // Paged, and only the budgets of these pods kept, reduced to name and selector: a
        // namespace can hold tens of thousands of budgets, and a whole list of them decoded at
        // once was most of the controller's peak memory in a 5,000-node world.
        let api: kube::Api<PodDisruptionBudget> =
            kube::Api::namespaced(self.client.clone(), namespace);
        let mut out = Vec::new();
        let mut lp = kube::api::ListParams::default().limit(500);
        loop {
            let page = api
                .list(&lp)
                .await
                .map_err(self.err(format!("listing PodDisruptionBudgets in {namespace}")))?;
            let selects = |b: &PodDisruptionBudget| {
                let sel = b.spec.as_ref().and_then(|s| s.selector.as_ref());
                pods.iter().any(|l| budget_may_select(sel, l))
            };
            out.extend(page.items.into_iter().filter(selects).map(|b| {
                PodDisruptionBudget {
                    metadata: kube::api::ObjectMeta {
                        name: b.metadata.name,
                        namespace: b.metadata.namespace,
                        ..Default::default()
                    },
                    spec: b
                        .spec
                        .map(|s| k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec {
                            selector: s.selector,
                            ..Default::default()
                        }),
                    status: b.status.and_then(|s| {
                        let d = s.disrupted_pods.filter(|d| !d.is_empty())?;
                        Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus {
                            disrupted_pods: Some(d),
                            ..Default::default()
                        })
                    }),
                }
            }));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => lp = lp.continue_token(&c),
                None => return Ok(out),
            }
        }
    }

    async fn pod_deleting(&self, namespace: &str, name: &str) -> Result<Option<bool>, DrainError> {
        // A list by name: the controller's RBAC lists pods and never gets one.
        let api: kube::Api<Pod> = kube::Api::namespaced(self.client.clone(), namespace);
        let lp = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
        let pods = api
            .list_metadata(&lp)
            .await
            .map_err(self.err(format!("reading pod {namespace}/{name}")))?;
        Ok(pods
            .items
            .first()
            .map(|p| p.metadata.deletion_timestamp.is_some()))
    }

    async fn event(&self, pod: Option<&PodRef>, warning: bool, reason: &str, note: String) {
        match pod {
            Some(p) => {
                let related = k8s_openapi::api::core::v1::ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    namespace: Some(p.namespace.clone()),
                    name: Some(p.name.clone()),
                    uid: Some(p.uid.clone()),
                    ..Default::default()
                };
                let events = &self.events;
                events
                    .publish_about_pod(&self.node, related, warning, reason, note)
                    .await
            }
            None => self.events.publish(&self.node, warning, reason, note).await,
        }
    }

    async fn wait_gone(
        &self,
        node: &str,
        pods: &[PodRef],
        deadline: DateTime<Utc>,
    ) -> Result<Gone, DrainError> {
        use kube::runtime::watcher;
        let wanted: BTreeSet<&PodRef> = pods.iter().collect();
        if wanted.is_empty() {
            return Ok(Gone::default());
        }
        let mut seen_going: BTreeMap<PodRef, DateTime<Utc>> = BTreeMap::new();
        // Only the pods' identities are read: the watch skips the rest of each pod unparsed.
        type PodIdentity = crate::client::Slim<Pod, serde::de::IgnoredAny, serde::de::IgnoredAny>;
        let api: kube::Api<PodIdentity> = kube::Api::all(self.client.clone());
        let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let mut present: BTreeSet<PodRef> = BTreeSet::new();
        let mut init: BTreeSet<PodRef> = BTreeSet::new();
        let stream = watcher(api, cfg);
        futures::pin_mut!(stream);
        let left = |present: &BTreeSet<PodRef>| -> Vec<PodRef> {
            present
                .iter()
                .filter(|p| wanted.contains(p))
                .cloned()
                .collect()
        };
        let until = (deadline - Utc::now()).to_std().unwrap_or_default();
        let run = async {
            while let Some(ev) = stream.try_next().await.map_err(|e| DrainError::Api {
                node: node.into(),
                what: "watching its pods".into(),
                source: kube::Error::Service(Box::new(e)),
            })? {
                match ev {
                    watcher::Event::Init => init.clear(),
                    watcher::Event::InitApply(p) => {
                        init.insert(PodRef::of_meta(&p.metadata));
                    }
                    watcher::Event::InitDone => {
                        present = std::mem::take(&mut init);
                        if left(&present).is_empty() {
                            return Ok(());
                        }
                    }
                    watcher::Event::Apply(p) => {
                        present.insert(PodRef::of_meta(&p.metadata));
                    }
                    watcher::Event::Delete(p) => {
                        let gone = PodRef::of_meta(&p.metadata);
                        if present.remove(&gone) && wanted.contains(&gone) {
                            seen_going.insert(gone, Utc::now());
                        }
                        if left(&present).is_empty() {
                            return Ok(());
                        }
                    }
                }
            }
            Ok::<(), DrainError>(())
        };
        let left = match tokio::time::timeout(until, run).await {
            Ok(r) => r.map(|_| Vec::new())?,
            Err(_) => left(&present),
        };
        Ok(Gone { left, seen_going })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, PodSpec, PodStatus, Volume};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use std::sync::Mutex;

    /// The drain's watch reads a pod for its identity only: the same as the whole pod's, from
    /// a pod as kube-apiserver sends it (spec, status and managedFields skipped).
    #[test]
    fn a_pod_read_for_its_identity_is_the_whole_pods() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "demo", "uid": "u-1",
                "resourceVersion": "42", "labels": {"app": "web"},
                "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}
        });
        let whole: Pod = serde_json::from_value(json.clone()).unwrap();
        let slim: crate::client::Slim<Pod, serde::de::IgnoredAny, serde::de::IgnoredAny> =
            serde_json::from_value(json).unwrap();
        assert_eq!(PodRef::of_meta(&slim.metadata), PodRef::of(&whole));
        assert_eq!(slim.metadata.resource_version.as_deref(), Some("42"));
        assert!(slim.metadata.labels.is_none() && slim.metadata.managed_fields.is_none());
    }

    fn pod(name: &str, owner: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some(format!("uid-{name}"));
        p.metadata.labels = Some(BTreeMap::from([("app".to_string(), "web".to_string())]));
        p.metadata.owner_references = owner.map(|kind| {
            vec![OwnerReference {
                kind: kind.into(),
                name: "owner".into(),
                controller: Some(true),
                ..Default::default()
            }]
        });
        p.spec = Some(PodSpec::default());
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        p
    }

    fn cfg() -> Drain {
        Drain::default()
    }

    #[test]
    fn mirror_daemonset_and_deleting_pods_are_skipped() {
        let all = Selector::everything();
        let mut mirror = pod("m", None);
        mirror.metadata.annotations =
            Some(BTreeMap::from([(MIRROR_POD.to_string(), "x".to_string())]));
        assert_eq!(
            classify(&mirror, &cfg(), &all, false),
            Disposition::Skip(Reason::MirrorPod)
        );
        assert!(matches!(
            classify(&pod("d", Some("DaemonSet")), &cfg(), &all, true),
            Disposition::Skip(_)
        ));
        let mut going = pod("g", Some("ReplicaSet"));
        going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(
            classify(&going, &cfg(), &all, false),
            Disposition::Skip(Reason::AlreadyDeleting)
        );
        assert_eq!(
            classify(&pod("r", Some("ReplicaSet")), &cfg(), &all, false),
            Disposition::Evict
        );
    }

    #[test]
    fn a_pod_of_a_deleted_daemonset_is_evicted() {
        let p = pod("orphan", Some("DaemonSet"));
        assert_eq!(
            classify(&p, &cfg(), &Selector::everything(), false),
            Disposition::Evict
        );
    }

    #[test]
    fn unreplicated_and_empty_dir_pods_need_the_config_to_allow_them() {
        let all = Selector::everything();
        assert!(matches!(
            classify(&pod("bare", None), &cfg(), &all, false),
            Disposition::Refuse(_)
        ));
        let c = Drain {
            evict_unreplicated: true,
            ..cfg()
        };
        assert_eq!(
            classify(&pod("bare", None), &c, &all, false),
            Disposition::Evict
        );
        let mut scratch = pod("scratch", Some("ReplicaSet"));
        scratch.spec.as_mut().unwrap().volumes = Some(vec![Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }]);
        assert!(matches!(
            classify(&scratch, &cfg(), &all, false),
            Disposition::Refuse(_)
        ));
        let c = Drain {
            delete_empty_dir_data: true,
            ..cfg()
        };
        assert_eq!(classify(&scratch, &c, &all, false), Disposition::Evict);
        // A finished pod is removable whatever it is.
        let mut done = pod("job", None);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert_eq!(classify(&done, &cfg(), &all, false), Disposition::Evict);
    }

    /// A fake API: a budget that refuses `blocked_for` evictions, then allows them.
    struct Fake {
        pods: Vec<Pod>,
        blocked_for: Mutex<u32>,
        overlapping_for: Mutex<u32>,
        evictions: Mutex<Vec<String>>,
        deletions: Mutex<Vec<String>>,
        events: Mutex<Vec<String>>,
        /// The budget's `status.disruptedPods`.
        disrupted: Mutex<BTreeMap<String, DateTime<Utc>>>,
        /// What `pod_deleting` answers per pod name (absent: gone).
        pod_states: Mutex<BTreeMap<String, Option<bool>>>,
        /// 5xx messages answered (first to last) before anything else.
        server_errors: Mutex<Vec<String>>,
        /// A second budget, `odd-pdb`, whose selector cannot be evaluated.
        odd_budget: bool,
        /// When set, `wait_gone` sees every pod go this long after it is called.
        exit_after: Mutex<Option<chrono::TimeDelta>>,
    }

    impl Fake {
        fn new(pods: Vec<Pod>, blocked_for: u32) -> Fake {
            Fake {
                pods,
                blocked_for: Mutex::new(blocked_for),
                overlapping_for: Mutex::new(0),
                evictions: Mutex::default(),
                deletions: Mutex::default(),
                events: Mutex::default(),
                disrupted: Mutex::default(),
                pod_states: Mutex::default(),
                server_errors: Mutex::default(),
                odd_budget: false,
                exit_after: Mutex::default(),
            }
        }
    }

    impl DrainApi for Fake {
        async fn list_pods(&self, _node: &str) -> Result<Vec<Pod>, DrainError> {
            Ok(self.pods.clone())
        }
        async fn daemon_set_exists(&self, _: &str, _: &str) -> Result<bool, DrainError> {
            Ok(true)
        }
        async fn evict(&self, pod: &PodRef, _: Option<i64>) -> Result<Evicted, DrainError> {
            self.evictions.lock().unwrap().push(pod.name.clone());
            let mut errors = self.server_errors.lock().unwrap();
            if !errors.is_empty() {
                return Ok(Evicted::ServerError(errors.remove(0)));
            }
            drop(errors);
            let mut o = self.overlapping_for.lock().unwrap();
            if *o > 0 {
                *o -= 1;
                return Ok(Evicted::ServerError(
                    "This pod has more than one PodDisruptionBudget".into(),
                ));
            }
            let mut b = self.blocked_for.lock().unwrap();
            if *b > 0 {
                *b -= 1;
                return Ok(Evicted::Blocked {
                    message:
                        "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"
                            .into(),
                    retry_after: Some(Duration::from_millis(5)),
                });
            }
            Ok(Evicted::Accepted)
        }
        async fn delete(&self, pod: &PodRef) -> Result<(), DrainError> {
            self.deletions.lock().unwrap().push(pod.name.clone());
            Ok(())
        }
        async fn budgets(
            &self,
            _: &str,
            _: &[BTreeMap<String, String>],
        ) -> Result<Vec<PodDisruptionBudget>, DrainError> {
            let mut b = PodDisruptionBudget::default();
            b.metadata.name = Some("web-pdb".into());
            b.spec = Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
                    ..Default::default()
                }),
                ..Default::default()
            });
            let disrupted = self.disrupted.lock().unwrap().clone();
            if !disrupted.is_empty() {
                b.status = Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus {
                    disrupted_pods: Some(
                        disrupted
                            .into_iter()
                            .map(|(k, t)| (k, Time(crate::time::to_jiff(t))))
                            .collect(),
                    ),
                    ..Default::default()
                });
            }
            let mut out = vec![b];
            if self.odd_budget {
                let mut odd = PodDisruptionBudget::default();
                odd.metadata.name = Some("odd-pdb".into());
                odd.spec = Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec {
                    selector: Some(LabelSelector {
                        match_expressions: Some(vec![
                            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                                key: "app".into(),
                                operator: "In".into(),
                                values: None,
                            },
                        ]),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
                out.push(odd);
            }
            Ok(out)
        }
        async fn pod_deleting(&self, _: &str, name: &str) -> Result<Option<bool>, DrainError> {
            Ok(self.pod_states.lock().unwrap().get(name).copied().flatten())
        }
        async fn event(&self, _: Option<&PodRef>, _: bool, reason: &str, note: String) {
            self.events
                .lock()
                .unwrap()
                .push(format!("{reason}: {note}"));
        }
        async fn wait_gone(
            &self,
            _: &str,
            pods: &[PodRef],
            _: DateTime<Utc>,
        ) -> Result<Gone, DrainError> {
            // Each pod goes `exit_after` after the call, seen going by the watch.
            let seen_going = match *self.exit_after.lock().unwrap() {
                Some(after) => pods
                    .iter()
                    .map(|p| (p.clone(), Utc::now() + after))
                    .collect(),
                None => BTreeMap::new(),
            };
            Ok(Gone {
                left: Vec::new(),
                seen_going,
            })
        }
    }

    fn ok() -> Result<(), NotLeader> {
        Ok(())
    }

    /// What the health gate gets for pods made by [`pod`].
    fn web_labels() -> BTreeSet<(String, BTreeMap<String, String>)> {
        BTreeSet::from([(
            "default".to_string(),
            BTreeMap::from([("app".to_string(), "web".to_string())]),
        )])
    }

    /// Drains node `n1` of `api`, every pod selected, with `within` to go.
    async fn drain_n1(
        api: &Fake,
        cfg: &Drain,
        within: chrono::Duration,
        ensure: &(dyn Fn() -> Result<(), NotLeader> + Sync),
    ) -> Result<Drained, DrainError> {
        drain(
            api,
            "n1",
            cfg,
            &Selector::everything(),
            Utc::now() + within,
            ensure,
        )
        .await
    }

    #[tokio::test]
    async fn pods_found_terminating_are_not_evicted_again_but_go_to_the_health_gate() {
        // An earlier leader evicted web-0 and died before recording the reboot.
        let mut going = pod("web-0", Some("ReplicaSet"));
        going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let api = Fake::new(vec![going.clone(), pod("web-1", Some("ReplicaSet"))], 0);
        let d = drain_n1(&api, &cfg(), chrono::Duration::seconds(30), &ok)
            .await
            .unwrap();
        assert_eq!(*api.evictions.lock().unwrap(), vec!["web-1".to_string()]);
        assert_eq!(d.pods, web_labels());
        assert_eq!(
            d.owners,
            BTreeSet::from([("ReplicaSet".into(), "default".into(), "owner".into())])
        );
        // Found with nothing left to evict, the drain still records what the gate waits for.
        let api = Fake::new(vec![going], 0);
        let d = drain_n1(&api, &cfg(), chrono::Duration::seconds(30), &ok)
            .await
            .unwrap();
        assert!(api.evictions.lock().unwrap().is_empty());
        assert_eq!(d.pods, web_labels());
    }

    #[tokio::test]
    async fn the_drain_measures_how_long_its_evicted_pods_take_to_go() {
        let api = Fake::new(
            vec![
                pod("web-1", Some("ReplicaSet")),
                pod("web-2", Some("ReplicaSet")),
            ],
            0,
        );
        *api.exit_after.lock().unwrap() = Some(chrono::TimeDelta::seconds(7));
        let d = drain_n1(&api, &cfg(), chrono::Duration::seconds(30), &ok)
            .await
            .unwrap();
        let secs = d.pod_exit_seconds.expect("both pods were seen going");
        assert!((7.0..8.0).contains(&secs), "{secs}");
        // Pods gone before the watch looked give no figure rather than a made-up one.
        let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
        let d = drain_n1(&api, &cfg(), chrono::Duration::seconds(30), &ok)
            .await
            .unwrap();
        assert_eq!(d.pod_exit_seconds, None);
    }

    #[test]
    fn the_exit_median_counts_only_pods_evicted_and_seen_going() {
        let t0 = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        let p = |n: &str| PodRef {
            namespace: "ns".into(),
            name: n.into(),
            uid: format!("uid-{n}"),
        };
        let s = chrono::TimeDelta::seconds;
        let accepted = BTreeMap::from([(p("a"), t0), (p("b"), t0 + s(10)), (p("c"), t0)]);
        // c's going was not seen; d was found terminating, never evicted by this drain.
        let seen = BTreeMap::from([(p("a"), t0 + s(2)), (p("b"), t0 + s(14)), (p("d"), t0)]);
        assert_eq!(median_exit_seconds(&accepted, &seen), Some(3.0));
        assert_eq!(median_exit_seconds(&accepted, &BTreeMap::new()), None);
    }

    #[tokio::test]
    async fn an_eviction_refused_by_a_budget_is_retried_and_named_in_an_event() {
        let api = Fake::new(
            vec![
                pod("web-1", Some("ReplicaSet")),
                pod("ds", Some("DaemonSet")),
            ],
            3,
        );
        let d = drain_n1(&api, &cfg(), chrono::Duration::seconds(30), &ok)
            .await
            .unwrap();
        assert_eq!(
            api.evictions.lock().unwrap().len(),
            4,
            "three refusals then success"
        );
        assert!(api.deletions.lock().unwrap().is_empty());
        let events = api.events.lock().unwrap();
        assert_eq!(
            events.len(),
            1,
            "one Event per blocked pod, not per retry: {events:?}"
        );
        assert!(events[0].contains("default/web-pdb"), "{events:?}");
        assert_eq!(d.pods, web_labels());
        assert_eq!(d.evicted.len(), 1, "the DaemonSet pod stays");
    }

    #[tokio::test]
    async fn a_budget_whose_selector_cannot_be_read_is_named_as_covering_with_a_warning() {
        let mut api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 1);
        api.odd_budget = true;
        drain_n1(&api, &cfg(), chrono::Duration::seconds(30), &ok)
            .await
            .unwrap();
        let events = api.events.lock().unwrap();
        let unreadable: Vec<&String> = events
            .iter()
            .filter(|e| e.starts_with("BudgetSelectorUnreadable: "))
            .collect();
        assert_eq!(unreadable.len(), 1, "{events:?}");
        assert!(
            unreadable[0].contains("PodDisruptionBudget default/odd-pdb (")
                && unreadable[0].contains("operator `In` has no values")
                && unreadable[0].contains("node n1")
                && !unreadable[0].contains("web-pdb"),
            "{}",
            unreadable[0]
        );
        let blocked = events
            .iter()
            .find(|e| e.starts_with("EvictionBlocked"))
            .unwrap();
        assert!(
            blocked.contains("default/web-pdb") && blocked.contains("default/odd-pdb"),
            "{blocked}"
        );
    }

    #[tokio::test]
    async fn a_server_error_is_retried_with_an_event_naming_the_overlapping_budgets() {
        let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
        *api.overlapping_for.lock().unwrap() = 2;
        let c = Drain {
            eviction_retry_interval: crate::config::Duration::from_millis(5),
            ..cfg()
        };
        drain_n1(&api, &c, chrono::Duration::seconds(5), &ok)
            .await
            .unwrap();
        assert_eq!(api.evictions.lock().unwrap().len(), 3);
        let events = api.events.lock().unwrap();
        assert!(
            events
                .iter()
                .all(|e| e.starts_with("EvictionFailed") && e.contains("default/web-pdb")),
            "{events:?}"
        );
        assert!(api.deletions.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_server_timeout_is_retried_without_blaming_overlapping_budgets() {
        let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
        api.server_errors
            .lock()
            .unwrap()
            .push("Timeout: request did not complete within requested timeout".into());
        let c = Drain {
            eviction_retry_interval: crate::config::Duration::from_millis(5),
            ..cfg()
        };
        drain_n1(&api, &c, chrono::Duration::seconds(5), &ok)
            .await
            .unwrap();
        assert_eq!(api.evictions.lock().unwrap().len(), 2, "retried once");
        let events = api.events.lock().unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(
            events[0].starts_with("EvictionFailed") && events[0].contains("Timeout"),
            "{events:?}"
        );
        assert!(!events[0].contains("overlapping"), "{events:?}");
    }

    #[test]
    fn a_budget_entry_for_a_pod_whose_deletion_never_happened_is_explained() {
        let t = |s: &str| crate::time::parse_annotation(s).unwrap();
        let now = t("2026-11-23T10:00:30Z");
        let disrupted = BTreeMap::from([
            ("web-0".to_string(), t("2026-11-23T10:00:00Z")),
            ("web-1".to_string(), t("2026-11-23T10:00:10Z")),
            ("web-2".to_string(), t("2026-11-23T09:59:50Z")),
        ]);
        // web-0 still runs (its eviction's DELETE never came), web-1 is being deleted (a
        // normal eviction in progress), web-2 is gone.
        let states = BTreeMap::from([
            ("web-0".to_string(), Some(false)),
            ("web-1".to_string(), Some(true)),
        ]);
        let note =
            phantom_disruptions("apps/web", &disrupted, &states, &BTreeMap::new(), now).unwrap();
        assert!(note.contains("counts pod web-0 as disrupted since 2026-11-23T10:00:00Z but that pod is not being deleted"), "{note}");
        assert!(note.contains("at 2026-11-23T10:02:00Z (in 90s)"), "{note}");
        assert!(
            note.contains("web-2") && note.contains("no longer exists"),
            "{note}"
        );
        assert!(
            !note.contains("web-1"),
            "an eviction in progress is not a phantom: {note}"
        );
        let only_real = BTreeMap::from([("web-1".to_string(), t("2026-11-23T10:00:10Z"))]);
        assert_eq!(
            phantom_disruptions("apps/web", &only_real, &states, &BTreeMap::new(), now),
            None
        );
    }

    #[test]
    fn a_pod_whose_own_eviction_is_in_flight_or_just_accepted_is_not_a_phantom() {
        let t = |s: &str| crate::time::parse_annotation(s).unwrap();
        let now = t("2026-11-23T10:00:30Z");
        // The budget lists all three, none is being deleted yet. web-0: this drain's eviction
        // is still unanswered (the budget was written before its 201 came back); web-1: its
        // eviction was accepted 2 s ago (the deletion follows); web-2: accepted 20 s ago and
        // still not deleting, a phantom after all.
        let disrupted = BTreeMap::from([
            ("web-0".to_string(), t("2026-11-23T10:00:30Z")),
            ("web-1".to_string(), t("2026-11-23T10:00:28Z")),
            ("web-2".to_string(), t("2026-11-23T10:00:10Z")),
        ]);
        let states = BTreeMap::from([
            ("web-0".to_string(), Some(false)),
            ("web-1".to_string(), Some(false)),
            ("web-2".to_string(), Some(false)),
        ]);
        let own = BTreeMap::from([
            ("web-0".to_string(), OwnEviction::InFlight),
            (
                "web-1".to_string(),
                OwnEviction::Accepted(t("2026-11-23T10:00:28Z")),
            ),
            (
                "web-2".to_string(),
                OwnEviction::Accepted(t("2026-11-23T10:00:10Z")),
            ),
        ]);
        let note = phantom_disruptions("apps/web", &disrupted, &states, &own, now).unwrap();
        assert!(
            !note.contains("web-0"),
            "an eviction in flight is not a phantom: {note}"
        );
        assert!(
            !note.contains("web-1"),
            "a deletion on its way is not a phantom: {note}"
        );
        assert!(note.contains("counts pod web-2"), "{note}");
    }

    #[tokio::test]
    async fn a_refusal_by_a_budget_holding_a_phantom_disruption_says_so_in_its_event() {
        let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 2);
        let since = Utc::now() - chrono::Duration::seconds(30);
        api.disrupted.lock().unwrap().insert("web-0".into(), since);
        api.pod_states
            .lock()
            .unwrap()
            .insert("web-0".into(), Some(false));
        drain_n1(&api, &cfg(), chrono::Duration::seconds(5), &ok)
            .await
            .unwrap();
        let events = api.events.lock().unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(
            events[0].starts_with("EvictionBlocked")
                && events[0].contains("counts pod web-0 as disrupted")
                && events[0].contains("not being deleted")
                && events[0].contains("Kubernetes stops counting it"),
            "{events:?}"
        );
    }

    #[tokio::test]
    async fn evicting_past_an_exhausted_budget_waits_and_never_deletes() {
        let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], u32::MAX);
        let err = drain_n1(&api, &cfg(), chrono::Duration::milliseconds(100), &ok)
            .await
            .unwrap_err();
        assert!(
            matches!(err, DrainError::Timeout { ref pods, .. } if pods.len() == 1),
            "{err}"
        );
        assert!(
            api.deletions.lock().unwrap().is_empty(),
            "nothing is deleted around a budget"
        );
    }

    #[tokio::test]
    async fn force_delete_after_timeout_deletes_only_when_configured() {
        let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], u32::MAX);
        let c = Drain {
            force_delete_after_timeout: true,
            ..cfg()
        };
        drain_n1(&api, &c, chrono::Duration::milliseconds(50), &ok)
            .await
            .unwrap();
        assert_eq!(*api.deletions.lock().unwrap(), ["web-1"]);
    }

    #[tokio::test]
    async fn a_drain_that_loses_leadership_stops_before_evicting() {
        let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
        let lost = || {
            Err(NotLeader {
                identity: "c-0".into(),
            })
        };
        let err = drain_n1(&api, &cfg(), chrono::Duration::seconds(5), &lost)
            .await
            .unwrap_err();
        assert!(matches!(err, DrainError::NotLeader(_)));
        assert!(api.evictions.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_unreplicated_pod_fails_the_drain_before_any_eviction() {
        let api = Fake::new(vec![pod("web-1", Some("ReplicaSet")), pod("bare", None)], 0);
        let err = drain_n1(&api, &cfg(), chrono::Duration::seconds(5), &ok)
            .await
            .unwrap_err();
        assert!(matches!(err, DrainError::Refused { .. }), "{err}");
        assert!(api.evictions.lock().unwrap().is_empty());
    }
}
