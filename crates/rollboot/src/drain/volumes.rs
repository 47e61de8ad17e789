//! Which volumes of a drained pod must leave the node before its reboot, and what is left of
//! them. Pure.
//!
//! Owns the names Kubernetes gives an attached CSI volume (the unique name the kubelet and the
//! attach-detach controller write in `node.status.volumesInUse` and `volumesAttached`,
//! `kubernetes.io/csi/<driver>^<volumeHandle>`; the VolumeAttachment's,
//! `csi-<sha256(volumeHandle + driver + node)>`, as kube's CSI attacher names it), which
//! volumes are waited for ([`Volume::of_pv`]: a ReadWriteOnce CSI volume whose driver
//! attaches; shared and attach-free ones are not, each with a reason), and what is left of a
//! set of them on a node ([`left`]). It must never do I/O: the PersistentVolumes, the
//! CSIDrivers and the node's status are read by the caller.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PersistentVolume;

/// The prefix of a CSI volume's unique name.
pub const CSI_PREFIX: &str = "kubernetes.io/csi/";

/// A volume a drain waits to see detached.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    /// The PersistentVolume's name.
    pub pv: String,
    /// The unique name in `node.status.volumesAttached` and `volumesInUse`.
    pub unique: String,
    /// The name of its VolumeAttachment on the node.
    pub attachment: String,
}

/// A volume a drained pod used, as the health gate needs it to find where the pod's
/// replacement has it attached (`drain.volumes.waitForReattach`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Moved {
    /// The PersistentVolume's name.
    pub pv: String,
    /// Its unique name (from which its VolumeAttachment's name on any node follows).
    pub unique: String,
    /// The namespace of the pod and its claim.
    pub namespace: String,
    /// The claim the pod mounted it through.
    pub claim: String,
    /// The drained pod's name (a StatefulSet's replacement has the same).
    pub pod: String,
    /// The drained pod's labels (a replacement of another controller has the same, less the
    /// ones that name one pod).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

/// Why a volume of a drained pod is not waited for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotWaited {
    /// Its claim is not bound (no PersistentVolume).
    Unbound,
    /// Not a CSI volume: an in-tree plugin, which rollboot does not follow.
    NotCsi,
    /// Shared (ReadWriteMany or ReadOnlyMany): other nodes may hold it at the same time.
    Shared,
    /// Its CSIDriver says `attachRequired: false`: nothing is attached.
    NoAttach,
}

impl NotWaited {
    /// The reason as a person reads it.
    pub fn text(&self) -> &'static str {
        match self {
            NotWaited::Unbound => "its claim is not bound to a PersistentVolume",
            NotWaited::NotCsi => "not a CSI volume (in-tree plugins are not followed)",
            NotWaited::Shared => "shared (ReadWriteMany or ReadOnlyMany)",
            NotWaited::NoAttach => "its CSIDriver does not attach (attachRequired: false)",
        }
    }
}

impl Volume {
    /// The volume `pv` is on `node`, when a drain waits for it: a CSI volume, not shared, whose
    /// driver attaches (`attach_required`: the CSIDriver's `spec.attachRequired`; `None` when
    /// there is no CSIDriver object, where Kubernetes attaches).
    pub fn of_pv(
        pv: &PersistentVolume,
        attach_required: Option<bool>,
        node: &str,
    ) -> Result<Volume, NotWaited> {
        let spec = pv.spec.as_ref().ok_or(NotWaited::NotCsi)?;
        let csi = spec.csi.as_ref().ok_or(NotWaited::NotCsi)?;
        let shared = spec.access_modes.as_ref().is_some_and(|modes| {
            modes
                .iter()
                .any(|m| m == "ReadWriteMany" || m == "ReadOnlyMany")
        });
        if shared {
            return Err(NotWaited::Shared);
        }
        if attach_required == Some(false) {
            return Err(NotWaited::NoAttach);
        }
        Ok(Volume {
            pv: pv.metadata.name.clone().unwrap_or_default(),
            unique: unique_name(&csi.driver, &csi.volume_handle),
            attachment: attachment_name(&csi.volume_handle, &csi.driver, node),
        })
    }
}

/// The unique name of a CSI volume, as the kubelet and the attach-detach controller write it.
pub fn unique_name(driver: &str, handle: &str) -> String {
    format!("{CSI_PREFIX}{driver}^{handle}")
}

/// The name of the VolumeAttachment of a CSI volume on `node`, as kube's CSI attacher makes
/// it: `csi-` and the hex SHA-256 of the handle, the driver and the node, in that order.
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{handle}{driver}{node}").as_bytes(),
    );
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("csi-{hex}")
}

/// The VolumeAttachment name of a CSI unique name on `node` (`None` for a name that is not
/// a CSI volume's).
pub fn attachment_of_unique(unique: &str, node: &str) -> Option<String> {
    let (driver, handle) = unique.strip_prefix(CSI_PREFIX)?.split_once('^')?;
    Some(attachment_name(handle, driver, node))
}

/// What the node says of its volumes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeVolumes {
    /// `status.volumesAttached[].name`.
    pub attached: BTreeSet<String>,
    /// `status.volumesInUse`.
    pub in_use: BTreeSet<String>,
    /// The volumes a drain recorded it waits for ([`crate::node::DRAIN_VOLUMES`]); an
    /// unreadable record reads as none.
    pub recorded: BTreeSet<Volume>,
}

/// The text of the record of `volumes` ([`crate::node::DRAIN_VOLUMES`]).
pub fn record(volumes: &BTreeSet<Volume>) -> String {
    serde_json::to_string(volumes).expect("volumes serialize")
}

/// The volumes of a record's text (none when it cannot be read). A volume whose VolumeAttachment
/// name is no DNS subdomain is left out, as unreadable: no VolumeAttachment has it, and the name
/// would go into the API's request path as written (kube-rs does not encode it).
pub fn read_record(text: Option<&str>) -> BTreeSet<Volume> {
    let all: BTreeSet<Volume> = text
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default();
    all.into_iter()
        .filter(|v| crate::url::is_dns_subdomain(&v.attachment))
        .collect()
}

/// One volume not yet detached, and where it still shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Left {
    /// The volume.
    pub volume: Volume,
    /// Where: `volumesInUse`, `volumesAttached`, `VolumeAttachment`, in that order.
    pub where_: Vec<&'static str>,
}

impl std::fmt::Display for Left {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PersistentVolume {} (VolumeAttachment {}; still in {})",
            self.volume.pv,
            self.volume.attachment,
            self.where_.join(", ")
        )
    }
}

/// The volumes of `wanted` that still show on the node: in its status, or with a
/// VolumeAttachment among `attachments` (the names of those that exist).
pub fn left(
    wanted: &BTreeSet<Volume>,
    node: &NodeVolumes,
    attachments: &BTreeSet<String>,
) -> Vec<Left> {
    wanted
        .iter()
        .filter_map(|v| {
            let mut where_ = Vec::new();
            if node.in_use.contains(&v.unique) {
                where_.push("volumesInUse");
            }
            if node.attached.contains(&v.unique) {
                where_.push("volumesAttached");
            }
            if attachments.contains(&v.attachment) {
                where_.push("VolumeAttachment");
            }
            (!where_.is_empty()).then(|| Left {
                volume: v.clone(),
                where_,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, PersistentVolumeSpec};

    fn pv(modes: &[&str], csi: bool) -> PersistentVolume {
        PersistentVolume {
            metadata: kube::api::ObjectMeta {
                name: Some("pvc-1".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                access_modes: Some(modes.iter().map(|m| m.to_string()).collect()),
                csi: csi.then(|| CSIPersistentVolumeSource {
                    driver: "rwo.csi.example".into(),
                    volume_handle: "vol-7".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_attachment_name_is_kubes_sha256_of_handle_driver_and_node() {
        // echo -n 'vol-7rwo.csi.examplenode-1' | sha256sum
        assert_eq!(
            attachment_name("vol-7", "rwo.csi.example", "node-1"),
            "csi-e610eb9182d75dd72024b6120ad52f806d88135a1c731b6e8853910239930618"
        );
        assert_eq!(
            attachment_of_unique("kubernetes.io/csi/rwo.csi.example^vol-7", "node-1"),
            Some(attachment_name("vol-7", "rwo.csi.example", "node-1"))
        );
        assert_eq!(attachment_of_unique("kubernetes.io/aws-ebs/vol", "n"), None);
    }

    #[test]
    fn only_attached_read_write_once_csi_volumes_are_waited_for() {
        let v = Volume::of_pv(&pv(&["ReadWriteOnce"], true), None, "node-1").unwrap();
        assert_eq!(v.unique, "kubernetes.io/csi/rwo.csi.example^vol-7");
        assert_eq!(v.pv, "pvc-1");
        assert!(Volume::of_pv(&pv(&["ReadWriteOncePod"], true), Some(true), "n").is_ok());
        assert_eq!(
            Volume::of_pv(&pv(&["ReadWriteMany"], true), Some(true), "n"),
            Err(NotWaited::Shared)
        );
        assert_eq!(
            Volume::of_pv(&pv(&["ReadWriteOnce"], true), Some(false), "n"),
            Err(NotWaited::NoAttach)
        );
        assert_eq!(
            Volume::of_pv(&pv(&["ReadWriteOnce"], false), None, "n"),
            Err(NotWaited::NotCsi)
        );
    }

    #[test]
    fn a_volume_is_left_while_the_node_or_a_volume_attachment_shows_it() {
        let v = Volume::of_pv(&pv(&["ReadWriteOnce"], true), None, "node-1").unwrap();
        let wanted = BTreeSet::from([v.clone()]);
        let mut node = NodeVolumes {
            attached: BTreeSet::from([v.unique.clone()]),
            in_use: BTreeSet::from([v.unique.clone()]),
            ..Default::default()
        };
        assert_eq!(read_record(Some(&record(&wanted))), wanted);
        assert!(read_record(Some("garbled")).is_empty());
        // A name no VolumeAttachment can have is never asked for.
        let mut forged = wanted.clone();
        forged.insert(Volume {
            pv: "x".into(),
            unique: "x".into(),
            attachment: "../../../api/v1/namespaces/kube-system/secrets/x?y=1".into(),
        });
        assert_eq!(read_record(Some(&record(&forged))), wanted);
        let vas = BTreeSet::from([v.attachment.clone()]);
        let l = left(&wanted, &node, &vas);
        assert_eq!(
            l[0].where_,
            ["volumesInUse", "volumesAttached", "VolumeAttachment"]
        );
        assert!(l[0].to_string().contains("PersistentVolume pvc-1"));
        node.in_use.clear();
        node.attached.clear();
        assert_eq!(left(&wanted, &node, &vas)[0].where_, ["VolumeAttachment"]);
        assert!(left(&wanted, &node, &BTreeSet::new()).is_empty());
    }
}
