//! The objects and names of the world's persistent volumes: a CSI driver whose volumes must be
//! attached (`rwo.csi.rollboot.dev`), its StorageClass, the claims a StatefulSet's
//! `volumeClaimTemplates` make, the volumes its provisioner binds them to, and the
//! VolumeAttachments of the attach/detach controller, named as kube names them.
//!
//! Below the world (`world.rs`), which decides when each is written; beside the kinds. It must
//! never write to the store or decide anything: it builds values and reads them.

use ring::digest;
use serde_json::{json, Value};

use super::index::key_of;
use super::kinds::Kind;
use super::store::Inner;
use super::volume_strategy::{PVC_PROTECTION, PV_PROTECTION};

/// The world's CSI driver (its CSIDriver says `attachRequired: true`).
pub const DRIVER: &str = "rwo.csi.rollboot.dev";
/// The world's StorageClass, provisioned by [`DRIVER`].
pub const STORAGE_CLASS: &str = "rollboot-sim-rwo";
/// The claim template of the world's StatefulSets (claims `data-<pod>`).
pub const CLAIM_TEMPLATE: &str = "data";
/// Reason of the attach/detach controller's Multi-Attach Event.
pub const FAILED_ATTACH: &str = "FailedAttachVolume";
/// Source component of the attach/detach controller's Events.
pub const ADC_COMPONENT: &str = "attachdetach-controller";

/// kube's csi_attacher `getAttachmentName`: `csi-` and the lowercase hex SHA-256 of the volume
/// handle, the driver and the node name, concatenated.
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    let d = digest::digest(
        &digest::SHA256,
        format!("{handle}{driver}{node}").as_bytes(),
    );
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("csi-{hex}")
}

/// The unique volume name of a CSI volume in `volumesAttached` / `volumesInUse`.
pub fn unique_name(driver: &str, handle: &str) -> String {
    format!("kubernetes.io/csi/{driver}^{handle}")
}

/// The finalizer an external-attacher puts on the VolumeAttachments of `driver`.
pub fn attacher_finalizer(driver: &str) -> String {
    format!("external-attacher/{}", driver.replace(['/', '.'], "-"))
}

/// What the attach/detach controller reads of a PersistentVolume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PvInfo {
    /// `spec.csi.driver`
    pub driver: String,
    /// `spec.csi.volumeHandle`
    pub handle: String,
    /// Neither ReadWriteMany nor ReadOnlyMany: attached to one node at a time.
    pub exclusive: bool,
    /// `spec.claimRef` as `namespace/name`.
    pub claim: Option<String>,
}

impl PvInfo {
    /// A CSI volume's facts; `None` for other volume sources.
    pub fn of(pv: &Value) -> Option<PvInfo> {
        let csi = &pv["spec"]["csi"];
        let modes: Vec<&str> = pv["spec"]["accessModes"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let claim = &pv["spec"]["claimRef"];
        Some(PvInfo {
            driver: csi["driver"].as_str()?.to_string(),
            handle: csi["volumeHandle"].as_str()?.to_string(),
            exclusive: !modes
                .iter()
                .any(|m| *m == "ReadWriteMany" || *m == "ReadOnlyMany"),
            claim: claim["name"]
                .as_str()
                .map(|n| key_of(claim["namespace"].as_str().unwrap_or(""), n)),
        })
    }

    /// The unique volume name.
    pub fn unique(&self) -> String {
        unique_name(&self.driver, &self.handle)
    }

    /// The name of its VolumeAttachment to `node`.
    pub fn attachment(&self, node: &str) -> String {
        attachment_name(&self.handle, &self.driver, node)
    }
}

/// Whether the volumes of `driver` are attached before use: its CSIDriver's `attachRequired`;
/// true without a CSIDriver object, as the attach/detach controller and the kubelet assume.
pub fn attach_required(inner: &Inner, driver: &str) -> bool {
    inner
        .get(Kind::CsiDriver, driver)
        .is_none_or(|d| d.value()["spec"]["attachRequired"] != false)
}

/// The world's CSIDriver.
pub fn csi_driver_object(uid: &str, now: &str) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": {"name": DRIVER, "uid": uid, "creationTimestamp": now},
        "spec": {"attachRequired": true, "podInfoOnMount": false, "storageCapacity": false,
            "fsGroupPolicy": "ReadWriteOnceWithFSType", "volumeLifecycleModes": ["Persistent"],
            "requiresRepublish": false, "seLinuxMount": false}})
}

/// The world's StorageClass.
pub fn storage_class_object(uid: &str, now: &str) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS, "uid": uid, "creationTimestamp": now},
        "provisioner": DRIVER, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": false})
}

/// The `volumeClaimTemplates` of the world's StatefulSets: one ReadWriteOnce claim `data`.
pub fn claim_templates() -> Value {
    json!([{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM_TEMPLATE},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
            "resources": {"requests": {"storage": "1Gi"}}, "volumeMode": "Filesystem"},
        "status": {"phase": "Pending"}}])
}

/// The claim the StatefulSet controller makes from `template` for pod `pod` of `set`
/// (`<template>-<pod>`), labelled with the set's selector, as its `getPersistentVolumeClaims`;
/// as stored, with the finalizer the StorageObjectInUseProtection admission plugin adds.
pub fn claim_from_template(
    template: &Value,
    set: &Value,
    pod: &str,
    uid: &str,
    now: &str,
) -> Value {
    let tname = template["metadata"]["name"].as_str().unwrap_or("");
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    if let Some(m) = set["spec"]["selector"]["matchLabels"].as_object() {
        labels.extend(m.clone());
    }
    let mut spec = template["spec"].clone();
    if spec["volumeMode"].is_null() {
        spec["volumeMode"] = json!("Filesystem");
    }
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": format!("{tname}-{pod}"), "namespace": set["metadata"]["namespace"],
            "uid": uid, "creationTimestamp": now, "labels": labels,
            "finalizers": [PVC_PROTECTION]},
        "spec": spec, "status": {"phase": "Pending"}})
}

/// The volume the provisioner of [`DRIVER`] makes for `claim` (`pvc-<claim uid>`), bound to it
/// (with the finalizer the StorageObjectInUseProtection admission plugin adds); and the claim
/// bound to it in return, as kube-controller-manager's PV controller binds it.
pub fn provision(claim: &Value, uid: &str, now: &str) -> (Value, Value) {
    let cuid = claim["metadata"]["uid"].as_str().unwrap_or("");
    let name = format!("pvc-{cuid}");
    let handle = format!("vol-{cuid}");
    let storage = claim["spec"]["resources"]["requests"]["storage"].clone();
    let modes = claim["spec"]["accessModes"].clone();
    // A resourceVersion is a string on the wire, whatever the claim in hand holds.
    let claim_rv = match &claim["metadata"]["resourceVersion"] {
        Value::Number(n) => json!(n.to_string()),
        v => v.clone(),
    };
    let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "uid": uid, "creationTimestamp": now,
            "finalizers": [PV_PROTECTION],
            "annotations": {"pv.kubernetes.io/provisioned-by": DRIVER,
                "volume.kubernetes.io/provisioner-deletion-secret-name": "",
                "volume.kubernetes.io/provisioner-deletion-secret-namespace": ""}},
        "spec": {"capacity": {"storage": storage}, "accessModes": modes,
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": claim["spec"]["storageClassName"],
            "volumeMode": "Filesystem",
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": claim["metadata"]["namespace"],
                "name": claim["metadata"]["name"], "uid": cuid, "apiVersion": "v1",
                "resourceVersion": claim_rv},
            "csi": {"driver": DRIVER, "volumeHandle": handle, "fsType": "ext4"}},
        "status": {"phase": "Bound", "lastPhaseTransitionTime": now}});
    let mut c = claim.clone();
    let ann = &mut c["metadata"]["annotations"];
    for (k, v) in [
        ("pv.kubernetes.io/bind-completed", "yes"),
        ("pv.kubernetes.io/bound-by-controller", "yes"),
        ("volume.beta.kubernetes.io/storage-provisioner", DRIVER),
        ("volume.kubernetes.io/storage-provisioner", DRIVER),
    ] {
        ann[k] = json!(v);
    }
    c["spec"]["volumeName"] = json!(name);
    c["status"] = json!({"phase": "Bound", "accessModes": modes, "capacity": {"storage": storage}});
    (pv, c)
}

/// The attach/detach controller's VolumeAttachment of volume `pv` to `node`, not attached yet.
pub fn attachment_object(info: &PvInfo, pv: &str, node: &str, uid: &str, now: &str) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": info.attachment(node), "uid": uid, "creationTimestamp": now},
        "spec": {"attacher": info.driver, "nodeName": node, "source": {"persistentVolumeName": pv}},
        "status": {"attached": false}})
}

/// Adds the StatefulSet controller's claim volumes to a pod (`updateStorage`): one
/// `persistentVolumeClaim` volume per template, named as the template, replacing a volume of
/// that name.
pub fn add_claim_volumes(pod: &mut Value, templates: &Value, pod_name: &str) {
    let Some(ts) = templates.as_array().filter(|t| !t.is_empty()) else {
        return;
    };
    let mut vols: Vec<Value> = pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for t in ts {
        let tname = t["metadata"]["name"].as_str().unwrap_or("");
        vols.retain(|v| v["name"] != tname);
        vols.push(json!({"name": tname,
            "persistentVolumeClaim": {"claimName": format!("{tname}-{pod_name}")}}));
        let mounts = &mut pod["spec"]["containers"][0]["volumeMounts"];
        let has = mounts
            .as_array()
            .is_some_and(|ms| ms.iter().any(|m| m["name"] == tname));
        if !has {
            let m = json!({"name": tname, "mountPath": format!("/{tname}")});
            match mounts.as_array_mut() {
                Some(ms) => ms.push(m),
                None => *mounts = json!([m]),
            }
        }
    }
    pod["spec"]["volumes"] = Value::Array(vols);
}

/// Node status lists: `volumesAttached` names, `volumesInUse`.
pub fn attached_names(node: &Value) -> Vec<String> {
    node["status"]["volumesAttached"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `status.volumesInUse` of a Node.
pub fn in_use(node: &Value) -> Vec<String> {
    node["status"]["volumesInUse"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Adds (`true`) or removes `unique` in a Node's `volumesAttached` (`{name, devicePath: ""}`);
/// false when nothing changed. An empty list is no key, as the kubelet's status has it.
pub fn set_attached(node: &mut Value, unique: &str, attached: bool) -> bool {
    let mut list: Vec<Value> = node["status"]["volumesAttached"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let has = list.iter().any(|v| v["name"] == unique);
    if has == attached {
        return false;
    }
    if attached {
        list.push(json!({"name": unique, "devicePath": ""}));
    } else {
        list.retain(|v| v["name"] != unique);
    }
    set_list(node, "volumesAttached", list);
    true
}

/// Adds or removes `unique` in a Node's `volumesInUse` (kept sorted, as the kubelet sorts
/// it); false when nothing changed.
pub fn set_in_use(node: &mut Value, unique: &str, used: bool) -> bool {
    let mut list = in_use(node);
    let has = list.iter().any(|v| v == unique);
    if has == used {
        return false;
    }
    if used {
        list.push(unique.to_string());
        list.sort();
    } else {
        list.retain(|v| v != unique);
    }
    set_list(
        node,
        "volumesInUse",
        list.into_iter().map(Value::from).collect(),
    );
    true
}

fn set_list(node: &mut Value, key: &str, list: Vec<Value>) {
    if list.is_empty() {
        if let Some(s) = node["status"].as_object_mut() {
            s.remove(key);
        }
    } else {
        node["status"][key] = Value::Array(list);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachment_names_are_kubes() {
        // echo -n "vol-1rwo.csi.rollboot.devnode-0000" | sha256sum
        let n = attachment_name("vol-1", DRIVER, "node-0000");
        assert_eq!(
            n,
            "csi-f3eb5a8bdfc8b644c6f1d45f3aaf7ab1aa1d5f5cbdfe6e3e82e8c718a1c64856"
        );
        assert_eq!(
            unique_name(DRIVER, "vol-1"),
            "kubernetes.io/csi/rwo.csi.rollboot.dev^vol-1"
        );
        assert_eq!(
            attacher_finalizer(DRIVER),
            "external-attacher/rwo-csi-rollboot-dev"
        );
    }
}
