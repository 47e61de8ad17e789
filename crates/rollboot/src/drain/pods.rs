//! What a drain does with each pod of its node, as `kubectl drain` decides it: pure.
//!
//! Owns a pod's identity ([`PodRef`]), its controller ([`controller_of`]) and the rules of
//! [`classify`] (evict, skip, refuse, with a [`Reason`] per rule), which the drain and
//! `rollboot plan` share so that both tell the same story. It must never do I/O: whether a
//! DaemonSet exists is asked by the caller and handed in.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::config::Drain;
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
    /// Skipped: a `drain.order` rule says `behavior: skip` (it stays on the node through the
    /// reboot).
    OrderSkip,
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
            Reason::OrderSkip => "left on the node by drain.order (behavior: skip)",
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

/// The claims a pod's volumes use: its PersistentVolumeClaims, and the claims of its generic
/// ephemeral volumes (named `<pod>-<volume>` by Kubernetes).
pub fn claims_of(p: &Pod) -> Vec<String> {
    let pod = p.metadata.name.as_deref().unwrap_or_default();
    p.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(c), _) => Some(c.claim_name.clone()),
            (None, Some(_)) => Some(format!("{pod}-{}", v.name)),
            _ => None,
        })
        .collect()
}
