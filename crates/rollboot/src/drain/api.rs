//! The Kubernetes calls a drain makes, and how a drain fails.
//!
//! Owns [`DrainApi`] (list a node's pods, evict, delete, read budgets, record Events, wait for
//! pods to go), what an eviction answers ([`Evicted`]), what the wait saw ([`Gone`]) and
//! [`DrainError`]. The calls sit behind the trait so the drain's logic is tested without HTTP;
//! this module holds no logic of its own.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::hold::HeldEviction;
use super::pods::PodRef;
use super::volumes::NodeVolumes;
use crate::config::BlockCause;
use crate::lease::NotLeader;

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
    /// 400, 403 or 422: denied by an admission webhook or policy (or by RBAC), with the
    /// server's message.
    Denied(String),
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
    /// An eviction a budget holds, under a `drain.whenBlocked` policy of `fail`.
    #[error("node {node}: pod {pod} cannot be drained: {}; drain.whenBlocked.{} is {}", .held.sentence(), .held.cause, if *.quarantine { "quarantine: the node stays cordoned with its pods, labelled rollboot.dev/quarantined" } else { "fail" })]
    Held {
        /// Node.
        node: String,
        /// The pod whose eviction is held.
        pod: PodRef,
        /// The cause, the budget and why.
        held: Box<HeldEviction>,
        /// The policy is `quarantine`, not `fail`.
        quarantine: bool,
    },
    /// Volumes of the drained pods still attached to the node past `drain.volumes.detachTimeout`.
    #[error("node {node}: volumes still attached {}s after their pods were gone (drain.volumes.detachTimeout): {}", .after_seconds, .left.join("; "))]
    Detach {
        /// Node.
        node: String,
        /// Each volume left: the PersistentVolume, its VolumeAttachment and where it shows.
        left: Vec<String>,
        /// How long the drain waited.
        after_seconds: i64,
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
    /// The node writer would not send the drain's write to its Node (the drain's own writes
    /// never are refused).
    #[error(transparent)]
    Write(crate::node_writer::NodeWriteError),
    /// Leadership was lost: stop at once.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
}

impl DrainError {
    /// The cause a held pod quarantines its node for (`drain.whenBlocked` says `quarantine`).
    pub fn quarantined_for(&self) -> Option<BlockCause> {
        match self {
            DrainError::Held {
                held,
                quarantine: true,
                ..
            } => Some(held.cause),
            _ => None,
        }
    }
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
    /// Resolves when budget `namespace/name` is seen to allow a disruption again, in a change
    /// seen after the call: a drain it refused asks again then, not only after
    /// `drain.evictionRetryInterval`. Never, when nothing watches the budget (the default).
    fn budget_room(&self, namespace: &str, name: &str) -> impl Future<Output = ()> + Send {
        let _ = (namespace, name);
        std::future::pending()
    }
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
    /// The labels of namespace `name` (none when it does not exist).
    fn namespace_labels(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<BTreeMap<String, String>, DrainError>> + Send;
    /// The PersistentVolume bound to claim `namespace/claim` (`None`: no such claim, or not
    /// bound, or no such volume).
    fn claimed_volume(
        &self,
        namespace: &str,
        claim: &str,
    ) -> impl Future<Output = Result<Option<PersistentVolume>, DrainError>> + Send;
    /// The CSIDriver `driver`'s `spec.attachRequired` (`None`: no such CSIDriver).
    fn attach_required(
        &self,
        driver: &str,
    ) -> impl Future<Output = Result<Option<bool>, DrainError>> + Send;
    /// What `node`'s status says of its volumes, with the Node's resourceVersion; with
    /// `after` (a resourceVersion), once the Node has changed since, or at `deadline`.
    fn node_volumes(
        &self,
        node: &str,
        after: Option<String>,
        deadline: DateTime<Utc>,
    ) -> impl Future<Output = Result<(NodeVolumes, String), DrainError>> + Send;
    /// Adds `volumes` to the Node's record of the volumes its drain waits for
    /// ([`crate::node::DRAIN_VOLUMES`], `recorded` being what it holds now), before the pods
    /// using them are evicted.
    fn record_volumes(
        &self,
        node: &str,
        volumes: &std::collections::BTreeSet<super::volumes::Volume>,
    ) -> impl Future<Output = Result<(), DrainError>> + Send;
    /// Which of the VolumeAttachments `names` exist.
    fn attachments(
        &self,
        names: &[String],
    ) -> impl Future<Output = Result<std::collections::BTreeSet<String>, DrainError>> + Send;
    /// Waits until none of `pods` is present with the same UID on `node`, or the deadline.
    /// Returns the pods still present, and when it saw each of the others go. A pod not yet
    /// seen gone at the deadline is still present, even when the node's pods could not be
    /// listed by then.
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
