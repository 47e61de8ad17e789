//! A drain's wait for its pods' volumes to leave the node (`drain.volumes.waitForDetach`).
//!
//! Owns the reads of the drained pods' volumes (each claim's PersistentVolume, once per drain,
//! [`NodeDrain::read_volumes`]), the Node's record of the volumes its drain waits for
//! ([`NodeDrain::record_volumes`]), and the waits until they have detached: a step's
//! ([`NodeDrain::wait_detached`]) and those a predecessor's evictions left attached
//! ([`NodeDrain::wait_leftovers`]). Which volume is waited for and what is left of it is
//! [`crate::drain::volumes`]' rule; this module asks and waits.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;

use super::NodeDrain;
use crate::drain::api::{DrainApi, DrainError};
use crate::drain::pods::{claims_of, PodRef};
use crate::drain::volumes::{
    attachment_of_unique, left, unique_name, Moved, NotWaited, Volume, CSI_PREFIX,
};

/// What a claim is bound to, as far as the drain's wait for volumes goes.
#[derive(Clone, Debug)]
pub(super) struct Claimed {
    /// The volume's unique name, for a CSI volume (empty otherwise).
    unique: String,
    /// The volume to wait for, or why not.
    waited: Result<Volume, NotWaited>,
}

impl<A: DrainApi> NodeDrain<'_, A> {
    /// Finds the volumes of the drained pods that the drain waits to see detached: each
    /// claim's PersistentVolume, when it is a CSI volume that is not shared and whose driver
    /// attaches (see [`Volume::of_pv`]); the others are logged with the reason.
    pub async fn read_volumes(&mut self) -> Result<(), DrainError> {
        let pods: Vec<Pod> = self.found.drained().cloned().collect();
        for p in &pods {
            let pod = PodRef::of(p);
            let mut waited = Vec::new();
            for claim in claims_of(p) {
                let Some(c) = self.claimed(&pod.namespace, &claim).await? else {
                    continue;
                };
                match c.waited {
                    Ok(v) => {
                        self.moved.entry(pod.clone()).or_default().push(Moved {
                            pv: v.pv.clone(),
                            unique: v.unique.clone(),
                            namespace: pod.namespace.clone(),
                            claim: claim.clone(),
                            pod: pod.name.clone(),
                            labels: p.metadata.labels.clone().unwrap_or_default(),
                        });
                        waited.push(v)
                    }
                    Err(why) => {
                        tracing::info!(pod = %pod, claim, why = why.text(), "not waiting for this volume to detach")
                    }
                }
            }
            if !waited.is_empty() {
                self.volumes.insert(pod, waited);
            }
        }
        Ok(())
    }

    /// What claim `namespace/claim` is bound to (read once per drain; `None`: not bound, or
    /// no such claim or volume).
    async fn claimed(
        &mut self,
        namespace: &str,
        claim: &str,
    ) -> Result<Option<Claimed>, DrainError> {
        let key = (namespace.to_string(), claim.to_string());
        if let Some(c) = self.claims.get(&key) {
            return Ok(c.clone());
        }
        let c = match self.api.claimed_volume(namespace, claim).await? {
            None => None,
            Some(pv) => {
                let csi = pv.spec.as_ref().and_then(|s| s.csi.as_ref());
                let attach = match csi {
                    Some(csi) => self.api.attach_required(&csi.driver).await?,
                    None => None,
                };
                Some(Claimed {
                    unique: csi
                        .map(|c| unique_name(&c.driver, &c.volume_handle))
                        .unwrap_or_default(),
                    waited: Volume::of_pv(&pv, attach, self.node),
                })
            }
        };
        self.claims.insert(key, c.clone());
        Ok(c)
    }

    /// Adds the volumes of `pods` to the Node's record of those its drain waits for, before
    /// they are evicted (a drain resumed by another leader reads it; see
    /// [`NodeDrain::wait_leftovers`]); nothing is written when they are in it already.
    pub async fn record_volumes<'p>(
        &mut self,
        pods: impl Iterator<Item = &'p PodRef>,
    ) -> Result<(), DrainError> {
        let more: Vec<Volume> = pods
            .filter_map(|p| self.volumes.get(p))
            .flatten()
            .filter(|v| !self.recorded.contains(*v))
            .cloned()
            .collect();
        if more.is_empty() {
            return Ok(());
        }
        if self.recorded.is_empty() {
            let far = Utc::now() + chrono::TimeDelta::days(1);
            self.recorded = self
                .api
                .node_volumes(self.node, None, far)
                .await?
                .0
                .recorded;
        }
        let mut all = self.recorded.clone();
        all.extend(more);
        (self.ensure)()?;
        self.api.record_volumes(self.node, &all).await?;
        self.recorded = all;
        Ok(())
    }

    /// Waits until the volumes of `pods` (gone at `gone`) have left the node: not in its
    /// `volumesInUse` nor `volumesAttached`, and no VolumeAttachment of the node for them;
    /// past `drain.volumes.detachTimeout`, [`DrainError::Detach`] names each one left.
    pub async fn wait_detached<'p>(
        &self,
        pods: impl Iterator<Item = &'p PodRef>,
        gone: DateTime<Utc>,
    ) -> Result<(), DrainError> {
        let wanted: BTreeSet<Volume> = pods
            .filter_map(|p| self.volumes.get(p))
            .flatten()
            .cloned()
            .collect();
        self.wait_volumes(wanted, gone).await
    }

    /// The volumes of pods that are no longer on the node and were not waited for (a drain
    /// resumed by a new leader after its predecessor evicted them): those the Node's record
    /// names ([`crate::node::DRAIN_VOLUMES`]: once a detach has begun, only the
    /// VolumeAttachment shows it), and every CSI volume in its `volumesAttached`, that no pod
    /// now on the node uses and that is not a shared volume of a drained pod, are waited for as
    /// [`NodeDrain::wait_detached`] does.
    pub async fn wait_leftovers(&mut self) -> Result<(), DrainError> {
        let far = Utc::now() + chrono::TimeDelta::days(1);
        let (status, _) = self.api.node_volumes(self.node, None, far).await?;
        let attached: Vec<&String> = status
            .attached
            .iter()
            .filter(|u| u.starts_with(CSI_PREFIX))
            .collect();
        if attached.is_empty() && status.recorded.is_empty() {
            return Ok(());
        }
        let mut used = BTreeSet::new();
        let on_node = self.api.list_pods(self.node).await?;
        let drained: Vec<Pod> = self.found.drained().cloned().collect();
        for p in on_node.iter().chain(&drained) {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let staying = on_node.iter().any(|q| PodRef::of(q) == PodRef::of(p));
            for claim in claims_of(p) {
                if let Some(c) = self.claimed(&ns, &claim).await? {
                    // A pod still on the node keeps its volumes attached; a drained pod's
                    // shared volume is not waited for.
                    if staying || matches!(c.waited, Err(NotWaited::Shared)) {
                        used.insert(c.unique);
                    }
                }
            }
        }
        let mut wanted: BTreeSet<Volume> = attached
            .into_iter()
            .filter(|u| !used.contains(*u))
            .filter_map(|u| {
                Some(Volume {
                    pv: format!("of unique name {u}"),
                    attachment: attachment_of_unique(u, self.node)?,
                    unique: u.clone(),
                })
            })
            .collect();
        // A recorded volume replaces the same one found in the status (its PV named).
        for v in status.recorded.iter().filter(|v| !used.contains(&v.unique)) {
            wanted.retain(|w| w.unique != v.unique);
            wanted.insert(v.clone());
        }
        if !wanted.is_empty() {
            tracing::info!(volumes = wanted.len(), "volumes attached or recorded that no pod on the node uses: waiting for them to detach");
        }
        self.wait_volumes(wanted, Utc::now()).await
    }

    /// Waits until `wanted` have left the node (see [`NodeDrain::wait_detached`]), the node
    /// watched for its status and the VolumeAttachments read once the status is clear.
    async fn wait_volumes(
        &self,
        wanted: BTreeSet<Volume>,
        since: DateTime<Utc>,
    ) -> Result<(), DrainError> {
        if wanted.is_empty() {
            return Ok(());
        }
        let deadline = since + self.cfg.volumes.detach_timeout.to_chrono();
        // A detach takes seconds: looked at every second at most (the VolumeAttachments are
        // read by name, one GET each).
        let retry = self
            .cfg
            .eviction_retry_interval
            .to_std()
            .min(std::time::Duration::from_secs(1));
        let names: Vec<String> = wanted.iter().map(|v| v.attachment.clone()).collect();
        let mut after = None;
        loop {
            let (status, rv) = self
                .api
                .node_volumes(self.node, after.take(), deadline)
                .await?;
            let in_status = left(&wanted, &status, &BTreeSet::new());
            // The attach-detach controller takes a volume out of `volumesAttached` when its
            // detach starts (seen on kube-controller-manager v1.36), and the VolumeAttachment
            // goes when the detach ends: only that says it is done, and it is read once the
            // status is clear.
            let still = if in_status.is_empty() {
                let attachments = self.api.attachments(&names).await?;
                left(&wanted, &status, &attachments)
            } else {
                in_status
            };
            if still.is_empty() {
                tracing::debug!(volumes = wanted.len(), "volumes detached");
                return Ok(());
            }
            let now = Utc::now();
            if now >= deadline {
                return Err(DrainError::Detach {
                    node: self.node.into(),
                    left: still.iter().map(|l| l.to_string()).collect(),
                    after_seconds: (now - since).num_seconds(),
                });
            }
            if still.iter().any(|l| l.where_ != ["VolumeAttachment"]) {
                // In the node's status: the next change of the node says more.
                after = Some(rv);
            } else {
                let pause = (deadline - now).to_std().unwrap_or_default().min(retry);
                tokio::time::sleep(pause).await;
            }
        }
    }
}
