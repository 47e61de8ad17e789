//! [`DrainApi`] over a kube client: the drain's requests as kube-apiserver receives them.
//!
//! Owns how each call is made (a list of the node's pods by field selector, an eviction with a
//! UID precondition on a client without kube's transparent 429 retry, a delete with the same
//! precondition, budgets read paged and trimmed, the pods' going watched by identity only, the
//! Node's record of the volumes the drain waits for written through the one node writer,
//! [`crate::node_writer`], unfenced as it always was) and how each answer is read (404 and 409
//! are a pod gone, 429 a budget's refusal with its Retry-After, 5xx a server error to retry).
//! [`BudgetSource`] is the one thing it asks of the controller. It decides nothing: what to
//! evict and when to retry is [`super::run`]'s.
//!
//! A name a pod's author writes and the API server does not check (an owner reference's name,
//! a volume's `claimName`, a claim's `volumeName`) is asked for only when it is a DNS subdomain
//! ([`crate::url::is_dns_subdomain`]): kube-rs puts it into the request path unencoded, and no
//! object can have another name, so any other is answered as not found without a request.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::api::{DrainApi, DrainError, Evicted, Gone};
use super::pods::PodRef;
use super::volumes::NodeVolumes;
use crate::events::Recorder;
use crate::node as proto;
use crate::node_writer::{Fence, NodeWriteError, NodeWriter, Writer};
use crate::selector::budget_may_select;

/// Where [`KubeDrain`] reads the budgets it names in the Events of refused evictions, rather
/// than listing them: the controller's shared watch of a namespace's budgets (the health
/// gate's [`crate::budgets::WorkloadWatches`]). A list of the namespace's budgets per refusing
/// drain was a third of the controller's time per node in a 5,000-node cluster. The drain
/// defines what it needs, and the watch provides it, so the drain depends on no controller code.
pub trait BudgetSource: Send + Sync {
    /// The budgets of `namespace` that may select a pod with one of `pods`' labels, reduced to
    /// name, selector and `status.disruptedPods` (all the drain reads of them); `None` when
    /// they are not known within `wait` (the drain then lists them).
    fn budgets<'a>(
        &'a self,
        namespace: &'a str,
        pods: &'a [BTreeMap<String, String>],
        wait: Duration,
    ) -> BoxFuture<'a, Option<Vec<PodDisruptionBudget>>>;
    /// Resolves when budget `namespace/name` is seen to allow a disruption, in a change seen
    /// after the call; never when its namespace's budgets are not watched.
    fn room<'a>(&'a self, namespace: &'a str, name: &'a str) -> BoxFuture<'a, ()>;
}

/// [`DrainApi`] over a kube client.
pub struct KubeDrain {
    /// The client.
    pub client: kube::Client,
    /// A client without kube's transparent retry of 429, for evictions.
    pub evict_client: kube::Client,
    /// Records Events on the node.
    pub events: Recorder,
    /// The node drained.
    pub node: String,
    /// Where refused evictions are counted.
    pub metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
    /// The controller's shared budget watches: the budgets to name are read from them rather
    /// than listed (a namespace can hold tens of thousands). `None`: listed.
    pub budgets_from: Option<Arc<dyn BudgetSource>>,
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
        if !askable(name) {
            return Ok(false);
        }
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
        // Sent from a task of its own: a drain stopped mid-way (its node uncordoned, its reboot
        // no longer wanted, the leader gone) drops this future, and an eviction already sent
        // must still get its answer. Cut off, the API server may or may not have evicted the
        // pod, and answers the request 504.
        let name = pod.name.clone();
        let sent = tokio::spawn(async move { api.evict(&name, &ep).await });
        let answer = match sent.await {
            Ok(a) => a,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Only when the runtime shuts down.
            Err(e) => Err(kube::Error::Service(Box::new(e))),
        };
        match answer {
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
            // An admission webhook's denial is 400 unless it says another code, a validating
            // admission policy's 422 or 403, RBAC's 403: the same answer every time it is asked.
            Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 422) => {
                if let Some(m) = &self.metrics {
                    m.eviction_refused("denied");
                }
                Ok(Evicted::Denied(s.message.clone()))
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
        if let Some(source) = &self.budgets_from {
            let wait = std::time::Duration::from_secs(30);
            if let Some(b) = source.budgets(namespace, pods, wait).await {
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

    async fn budget_room(&self, namespace: &str, name: &str) {
        match &self.budgets_from {
            Some(source) => source.room(namespace, name).await,
            None => std::future::pending().await,
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

    async fn namespace_labels(&self, name: &str) -> Result<BTreeMap<String, String>, DrainError> {
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(self.client.clone());
        Ok(api
            .get_opt(name)
            .await
            .map_err(self.err(format!("reading namespace {name}")))?
            .and_then(|n| n.metadata.labels)
            .unwrap_or_default())
    }

    async fn claimed_volume(
        &self,
        namespace: &str,
        claim: &str,
    ) -> Result<Option<k8s_openapi::api::core::v1::PersistentVolume>, DrainError> {
        if !askable(claim) {
            return Ok(None);
        }
        let claims: kube::Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            kube::Api::namespaced(self.client.clone(), namespace);
        let Some(bound) = claims
            .get_opt(claim)
            .await
            .map_err(self.err(format!("reading PersistentVolumeClaim {namespace}/{claim}")))?
            .and_then(|c| c.spec?.volume_name)
            .filter(|v| askable(v))
        else {
            return Ok(None);
        };
        let volumes: kube::Api<k8s_openapi::api::core::v1::PersistentVolume> =
            kube::Api::all(self.client.clone());
        volumes
            .get_opt(&bound)
            .await
            .map_err(self.err(format!("reading PersistentVolume {bound}")))
    }

    async fn attach_required(&self, driver: &str) -> Result<Option<bool>, DrainError> {
        let api: kube::Api<k8s_openapi::api::storage::v1::CSIDriver> =
            kube::Api::all(self.client.clone());
        Ok(api
            .get_opt(driver)
            .await
            .map_err(self.err(format!("reading CSIDriver {driver}")))?
            // Kubernetes' default for a CSIDriver that does not say.
            .map(|d| d.spec.attach_required.unwrap_or(true)))
    }

    async fn node_volumes(
        &self,
        node: &str,
        after: Option<String>,
        deadline: DateTime<Utc>,
    ) -> Result<(NodeVolumes, String), DrainError> {
        use kube::runtime::watcher;
        // Watched by name: the controller's RBAC lists and watches Nodes, and never gets one.
        let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(self.client.clone());
        let cfg = watcher::Config::default().fields(&format!("metadata.name={node}"));
        let stream = watcher(api, cfg);
        futures::pin_mut!(stream);
        let failed = |e: Option<watcher::Error>| DrainError::Api {
            node: node.into(),
            what: "watching it for its volumes".into(),
            source: match e {
                Some(e) => kube::Error::Service(Box::new(e)),
                None => kube::Error::Service("the watch ended".into()),
            },
        };
        let mut next = async || -> Result<(NodeVolumes, String), DrainError> {
            while let Some(ev) = stream.try_next().await.map_err(|e| failed(Some(e)))? {
                if let watcher::Event::InitApply(n) | watcher::Event::Apply(n) = ev {
                    return Ok(read_volumes(&n));
                }
            }
            Err(failed(None))
        };
        // The node as it is now, whatever the deadline (a drain past it fails on what it
        // reads, never on having read nothing); then, when it is as `after` saw it, its next
        // change until the deadline.
        let now = tokio::time::timeout(std::time::Duration::from_secs(60), next())
            .await
            .map_err(|_| DrainError::Api {
                node: node.into(),
                what: "reading it for its volumes".into(),
                source: kube::Error::Service("no answer in 60 s".into()),
            })??;
        if after.as_deref() != Some(now.1.as_str()) {
            return Ok(now);
        }
        let until = (deadline - Utc::now()).to_std().unwrap_or_default();
        match tokio::time::timeout(until, next()).await {
            Ok(r) => r,
            Err(_) => Ok(now),
        }
    }

    async fn record_volumes(
        &self,
        node: &str,
        volumes: &BTreeSet<super::volumes::Volume>,
    ) -> Result<(), DrainError> {
        let what = format!(
            "recording the volumes its drain waits for ({})",
            proto::DRAIN_VOLUMES
        );
        let record = super::volumes::record(volumes);
        let patch = proto::patch(&[(proto::DRAIN_VOLUMES, Some(record))], None);
        let writer = NodeWriter::new(self.client.clone(), Writer::Drain);
        match writer.write(node, Fence::Unconditional, &what, patch).await {
            Ok(_) => Ok(()),
            Err(NodeWriteError::Api { source, .. }) => Err(self.err(what)(source)),
            Err(e) => Err(DrainError::Write(e)),
        }
    }

    async fn attachments(&self, names: &[String]) -> Result<BTreeSet<String>, DrainError> {
        let api: kube::Api<k8s_openapi::api::storage::v1::VolumeAttachment> =
            kube::Api::all(self.client.clone());
        let mut out = BTreeSet::new();
        for name in names {
            if api
                .get_opt(name)
                .await
                .map_err(self.err(format!("reading VolumeAttachment {name}")))?
                .is_some()
            {
                out.insert(name.clone());
            }
        }
        Ok(out)
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
        // Each waited pod is taken as still there until a list says otherwise: a deadline
        // reached before the watch's first list (a slow or busy API server) leaves them all,
        // never none (an empty set here once ended a drain whose pod was stuck terminating).
        let mut present: BTreeSet<PodRef> = wanted.iter().map(|p| (*p).clone()).collect();
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

/// Whether `name`, written by a pod's author and unchecked by the API server, may be asked for
/// by name: a DNS subdomain, as every object's name it could be is.
fn askable(name: &str) -> bool {
    crate::url::is_dns_subdomain(name)
}

/// What a Node says of its volumes, with its resourceVersion.
fn read_volumes(n: &k8s_openapi::api::core::v1::Node) -> (NodeVolumes, String) {
    let status = n.status.as_ref();
    let volumes = NodeVolumes {
        attached: status
            .and_then(|s| s.volumes_attached.as_ref())
            .map(|v| v.iter().map(|a| a.name.clone()).collect())
            .unwrap_or_default(),
        in_use: status
            .and_then(|s| s.volumes_in_use.as_ref())
            .map(|v| v.iter().cloned().collect())
            .unwrap_or_default(),
        recorded: super::volumes::read_record(
            n.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::node::DRAIN_VOLUMES))
                .map(String::as_str),
        ),
    };
    (
        volumes,
        n.metadata.resource_version.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A KubeDrain whose API server keeps every request, and knows one claim only: bound, by
    /// its author's word, to a volume no PersistentVolume can be.
    async fn drain_against_a_recorder() -> (KubeDrain, Arc<Mutex<Vec<String>>>) {
        let (client, seen) = crate::client::recording_server(|path| {
            path.ends_with("/persistentvolumeclaims/forged").then(|| {
                serde_json::json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                    "metadata": {"name": "forged", "namespace": "web"},
                    "spec": {"volumeName": "../../../api/v1/namespaces/kube-system/secrets/x"}})
            })
        })
        .await;
        let drain = KubeDrain {
            client: client.clone(),
            evict_client: client.clone(),
            events: Recorder::new(client, "rollboot", "rollboot.dev/controller", "test"),
            node: "n-1".into(),
            metrics: None,
            budgets_from: None,
        };
        (drain, seen)
    }

    #[tokio::test]
    async fn a_name_no_object_can_have_is_never_put_into_a_request_path() {
        let (d, seen) = drain_against_a_recorder().await;
        for hostile in [
            "../../../api/v1/namespaces/kube-system/secrets/x",
            "x?watch=1",
            "a b",
            "%2e%2e",
            "..",
        ] {
            assert!(
                !d.daemon_set_exists("web", hostile).await.unwrap(),
                "{hostile}"
            );
            assert!(
                d.claimed_volume("web", hostile).await.unwrap().is_none(),
                "{hostile}"
            );
        }
        assert_eq!(*seen.lock().unwrap(), Vec::<String>::new());
        // A name that can be an object's is asked for, in its place.
        assert!(!d.daemon_set_exists("web", "agent").await.unwrap());
        assert!(d.claimed_volume("web", "data-0").await.unwrap().is_none());
        // A claim's `volumeName` is its author's too: not asked for.
        assert!(d.claimed_volume("web", "forged").await.unwrap().is_none());
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "GET /apis/apps/v1/namespaces/web/daemonsets/agent",
                "GET /api/v1/namespaces/web/persistentvolumeclaims/data-0",
                "GET /api/v1/namespaces/web/persistentvolumeclaims/forged",
            ]
        );
    }
}
