//! The registry strategies of the volume kinds (PersistentVolume, PersistentVolumeClaim,
//! CSIDriver, VolumeAttachment) as kube-apiserver v1.36 runs them on a write: the status a
//! create starts from, the protection finalizer the StorageObjectInUseProtection admission
//! plugin adds to a new volume or claim, the validation of the spec on create and update (in
//! the real validators' order and words, tests/golden/200-229) and the fields an update may not
//! change.
//!
//! Beside `strategy.rs`, which dispatches to it; it must never store anything, read the store
//! or talk HTTP. Validated: access modes, capacity and storage requests (quantities are parsed
//! when the object is decoded, `kinds.rs`), reclaim policy, volume mode, class names, the count
//! of volume sources and a CSI source's driver and handle, a CSIDriver's fsGroupPolicy,
//! lifecycle modes and allocatable update period, a VolumeAttachment's attacher, source and
//! node. Not validated: the other volume sources' own fields, node affinity, label selectors,
//! data sources, token requests, volume attributes classes, a VolumeAttachment's inline spec
//! and status. The diff kube-apiserver appends to the message of an immutable volume source or
//! claim spec (a unified diff of the internal Go struct as JSON) is written here as a list of
//! the changed fields instead.

use serde_json::{json, Value};

use super::kinds::Kind;
use super::quantity::Quantity;
use super::validation::{
    dns1123_subdomain, forbidden, invalid, invalid_value, not_supported, required, too_long,
    BadValue, FieldError,
};

/// The finalizer of kube-controller-manager's pv-protection controller.
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";
/// The finalizer of kube-controller-manager's pvc-protection controller.
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

/// The protection finalizer of a kind, if it has one.
pub fn protection_finalizer(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::PersistentVolume => Some(PV_PROTECTION),
        Kind::PersistentVolumeClaim => Some(PVC_PROTECTION),
        _ => None,
    }
}

/// Adds `finalizer` to an object's finalizers (last), unless there; false when it was there.
pub fn add_finalizer(v: &mut Value, finalizer: &str) -> bool {
    let list = &mut v["metadata"]["finalizers"];
    match list.as_array_mut() {
        Some(a) if a.iter().any(|f| f == finalizer) => false,
        Some(a) => {
            a.push(json!(finalizer));
            true
        }
        None => {
            *list = json!([finalizer]);
            true
        }
    }
}

/// Removes `finalizer` from an object's finalizers (no list left when it was the last one, as
/// the API server stores it); false when it was not there.
pub fn remove_finalizer(v: &mut Value, finalizer: &str) -> bool {
    let Some(a) = v["metadata"]["finalizers"].as_array_mut() else {
        return false;
    };
    let before = a.len();
    a.retain(|f| f != finalizer);
    if a.len() == before {
        return false;
    }
    if a.is_empty() {
        if let Some(md) = v["metadata"].as_object_mut() {
            md.remove("finalizers");
        }
    }
    true
}

/// Whether an object lists `finalizer`.
pub fn has_finalizer(v: &Value, finalizer: &str) -> bool {
    v["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|a| a.iter().any(|f| f == finalizer))
}

/// What a create does before validation (`PrepareForCreate`, then the admission plugin): the
/// status reset (a volume Pending since `now`, a claim Pending, an attachment not attached)
/// and the protection finalizer added.
pub fn prepare_create(kind: Kind, v: &mut Value, now: &str) {
    match kind {
        Kind::PersistentVolume => {
            v["status"] = json!({"phase": "Pending", "lastPhaseTransitionTime": now})
        }
        Kind::PersistentVolumeClaim => v["status"] = json!({"phase": "Pending"}),
        Kind::VolumeAttachment => v["status"] = json!({"attached": false}),
        _ => {}
    }
    if let Some(f) = protection_finalizer(kind) {
        add_finalizer(v, f);
    }
}

/// A status update of a volume (`persistentvolumeStatusStrategy.PrepareForUpdate`): a new
/// phase moves `lastPhaseTransitionTime` to `now` unless the writer set another; the same
/// phase keeps the old time when the writer left it out.
pub fn prepare_status_update(kind: Kind, new: &mut Value, old: &Value, now: &str) {
    if kind != Kind::PersistentVolume {
        return;
    }
    let (ns, os) = (&new["status"], &old["status"]);
    let time = &ns["lastPhaseTransitionTime"];
    let stamp = if ns["phase"] == os["phase"] {
        time.is_null()
            .then(|| os["lastPhaseTransitionTime"].clone())
    } else {
        (time.is_null() || *time == os["lastPhaseTransitionTime"]).then(|| json!(now))
    };
    if let Some(t) = stamp.filter(|t| !t.is_null()) {
        new["status"]["lastPhaseTransitionTime"] = t;
    }
}

/// The strategy's checks of a volume kind's object beyond its metadata, on create and update.
pub fn validate(kind: Kind, v: &Value) -> Vec<FieldError> {
    match kind {
        Kind::PersistentVolume => persistent_volume_spec(&v["spec"]),
        Kind::PersistentVolumeClaim => claim_spec(&v["spec"]),
        Kind::CsiDriver => csi_driver_spec(&v["spec"]),
        Kind::VolumeAttachment => attachment(v),
        _ => Vec::new(),
    }
}

/// The checks only an update makes: the fields it may not change, after the kind's checks of
/// the new object (which a volume's update makes twice: its strategy and its update validator
/// each run them).
pub fn validate_update(kind: Kind, new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match kind {
        Kind::PersistentVolume => {
            errs.extend(persistent_volume_spec(&new["spec"]));
            let (ns, os) = (source_of(&new["spec"]), source_of(&old["spec"]));
            if ns != os && !only_expand_secret_added(&new["spec"], &old["spec"]) {
                errs.push(forbidden(
                    "spec.persistentvolumesource",
                    &format!(
                        "spec.persistentvolumesource is immutable after creation\n{}",
                        changes(&os, &ns)
                    ),
                ));
            }
            errs.extend(immutable_volume_mode(new, old));
        }
        Kind::PersistentVolumeClaim => errs.extend(claim_update(new, old)),
        Kind::CsiDriver => {
            let (ns, os) = (&new["spec"], &old["spec"]);
            if ns["attachRequired"] != os["attachRequired"] {
                // The real validator names the field attachedRequired.
                errs.push(immutable("spec.attachedRequired", &ns["attachRequired"]));
            }
            if ns["volumeLifecycleModes"] != os["volumeLifecycleModes"] {
                errs.push(immutable(
                    "spec.volumeLifecycleModes",
                    &ns["volumeLifecycleModes"],
                ));
            }
        }
        Kind::VolumeAttachment if new["spec"] != old["spec"] => {
            errs.push(invalid_value(
                "spec",
                BadValue::Json(internal_attachment_spec(&new["spec"])),
                "field is immutable",
            ));
        }
        _ => {}
    }
    errs
}

/// `ValidateImmutableField`'s error, the value printed as Go prints it.
fn immutable(field: &str, value: &Value) -> FieldError {
    let v = match value {
        Value::String(s) => BadValue::Str(s.clone()),
        v => BadValue::Json(v.to_string()),
    };
    invalid_value(field, v, "field is immutable")
}

const ACCESS_MODES: [&str; 4] = [
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

/// The access modes of a volume or claim: required (`detail` says why), known, and
/// ReadWriteOncePod alone.
fn access_modes(modes: &Value, detail: &str, errs: &mut Vec<FieldError>) {
    let modes: Vec<&Value> = modes
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if modes.is_empty() {
        errs.push(required("spec.accessModes", detail));
    }
    let (mut once_pod, mut other) = (false, false);
    for m in modes {
        let m = m.as_str().unwrap_or("");
        if !ACCESS_MODES.contains(&m) {
            errs.push(not_supported(
                "spec.accessModes",
                BadValue::Str(m.into()),
                &ACCESS_MODES,
            ));
        } else if m == "ReadWriteOncePod" {
            once_pod = true;
        } else {
            other = true;
        }
    }
    if once_pod && other {
        errs.push(forbidden(
            "spec.accessModes",
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

/// A class name (`ValidateClassName`: a DNS subdomain), when set.
fn class_name(field: &str, name: &Value, errs: &mut Vec<FieldError>) {
    if let Some(n) = name.as_str().filter(|n| !n.is_empty()) {
        for m in dns1123_subdomain(n) {
            errs.push(invalid(field, n, m));
        }
    }
}

fn volume_mode(mode: &Value, errs: &mut Vec<FieldError>) {
    if let Some(m) = mode.as_str() {
        if m != "Block" && m != "Filesystem" {
            errs.push(not_supported(
                "spec.volumeMode",
                BadValue::Str(m.into()),
                &["Block", "Filesystem"],
            ));
        }
    }
}

/// `ValidateCSIDriverName` (a CSI source's driver, an attachment's attacher).
fn csi_driver_name(field: &str, name: &Value, errs: &mut Vec<FieldError>) {
    let name = name.as_str().unwrap_or("");
    if name.is_empty() {
        errs.push(required(field, ""));
        return;
    }
    if name.len() > 63 {
        errs.push(too_long(field, 63));
    }
    for m in dns1123_subdomain(&name.to_lowercase()) {
        errs.push(invalid(field, name, m));
    }
}

/// The volume sources of a PersistentVolumeSpec in the order the validator checks them, with
/// the field a second source is refused on (`None`: flexVolume, which is never refused).
const SOURCES: [(&str, Option<&str>); 22] = [
    ("hostPath", Some("hostPath")),
    ("gcePersistentDisk", Some("gcePersistentDisk")),
    ("awsElasticBlockStore", Some("awsElasticBlockStore")),
    ("glusterfs", Some("glusterfs")),
    ("flocker", Some("flocker")),
    ("nfs", Some("nfs")),
    ("rbd", Some("rbd")),
    ("quobyte", Some("quobyte")),
    ("cephfs", Some("cephFS")),
    ("iscsi", Some("iscsi")),
    ("cinder", Some("cinder")),
    ("fc", Some("fc")),
    ("flexVolume", None),
    ("azureFile", Some("azureFile")),
    ("vsphereVolume", Some("vsphereVolume")),
    ("photonPersistentDisk", Some("photonPersistentDisk")),
    ("portworxVolume", Some("portworxVolume")),
    ("azureDisk", Some("azureDisk")),
    ("scaleIO", Some("scaleIO")),
    ("local", Some("local")),
    ("storageos", Some("storageos")),
    ("csi", Some("csi")),
];

/// The volume source of a PersistentVolumeSpec: its source fields only.
fn source_of(spec: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for (k, _) in SOURCES {
        if let Some(v) = spec.get(k).filter(|v| !v.is_null()) {
            out.insert(k.to_string(), v.clone());
        }
    }
    Value::Object(out)
}

/// Whether the only change to a CSI source is a controllerExpandSecretRef set where there was
/// none (allowed, so that volumes made before that field can be expanded).
fn only_expand_secret_added(new: &Value, old: &Value) -> bool {
    let (n, o) = (&new["csi"], &old["csi"]);
    if n.is_null() || o.is_null() || !o["controllerExpandSecretRef"].is_null() {
        return false;
    }
    let mut n = n.clone();
    if let Some(m) = n.as_object_mut() {
        m.remove("controllerExpandSecretRef");
    }
    source_of(&json!({"csi": n})) == source_of(old) && source_of(new) != source_of(old)
}

/// `ValidatePersistentVolumeSpec` (not inline).
fn persistent_volume_spec(spec: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    access_modes(&spec["accessModes"], "", &mut errs);
    let capacity = spec["capacity"].as_object();
    if capacity.is_none_or(|c| c.is_empty()) {
        errs.push(required("spec.capacity", ""));
    }
    if capacity.is_none_or(|c| !c.contains_key("storage") || c.len() > 1) {
        errs.push(not_supported(
            "spec.capacity",
            BadValue::Json(resource_list(&spec["capacity"])),
            &["storage"],
        ));
    }
    let mut resources: Vec<(&String, &Value)> = capacity.into_iter().flatten().collect();
    resources.sort_by(|a, b| a.0.cmp(b.0));
    for (r, q) in resources {
        let Some(q) = q.as_str().and_then(|q| Quantity::parse(q).ok()) else {
            continue;
        };
        let field = format!("spec.capacity[{r}]");
        if let Some(v) = q.value().filter(|v| *v < 0) {
            errs.push(invalid_value(
                &field,
                BadValue::Int(v as i64),
                "must be a valid resource quantity",
            ));
        }
        if !q.is_positive() {
            errs.push(invalid(&field, &q.canonical(), "must be greater than zero"));
        }
    }
    if let Some(p) = spec["persistentVolumeReclaimPolicy"]
        .as_str()
        .filter(|p| !p.is_empty())
    {
        let supported = ["Delete", "Recycle", "Retain"];
        if !supported.contains(&p) {
            errs.push(not_supported(
                "spec.persistentVolumeReclaimPolicy",
                BadValue::Str(p.into()),
                &supported,
            ));
        }
    }
    let affinity = !spec["nodeAffinity"]["required"].is_null();
    let mut count = 0;
    for (key, refused_on) in SOURCES {
        let source = &spec[key];
        if source.is_null() {
            continue;
        }
        match refused_on {
            Some(f) if count > 0 => {
                errs.push(forbidden(
                    &format!("spec.{f}"),
                    "may not specify more than 1 volume type",
                ));
                continue;
            }
            _ => count += 1,
        }
        if key == "csi" {
            csi_driver_name("spec.csi.driver", &source["driver"], &mut errs);
            if source["volumeHandle"].as_str().unwrap_or("").is_empty() {
                errs.push(required("spec.csi.volumeHandle", ""));
            }
        }
        if key == "local" && !affinity {
            errs.push(required(
                "spec.nodeAffinity",
                "Local volume requires node affinity",
            ));
        }
    }
    if count == 0 {
        errs.push(required("spec", "must specify a volume type"));
    }
    let root_path = spec["hostPath"]["path"]
        .as_str()
        .is_some_and(|p| p.split('/').all(|s| s.is_empty() || s == "."));
    if root_path && spec["persistentVolumeReclaimPolicy"] == "Recycle" {
        errs.push(forbidden(
            "spec.persistentVolumeReclaimPolicy",
            "may not be 'recycle' for a hostPath mount of '/'",
        ));
    }
    class_name(
        "spec.storageClassName",
        &spec["storageClassName"],
        &mut errs,
    );
    volume_mode(&spec["volumeMode"], &mut errs);
    errs
}

/// A ResourceList as Go's json.Marshal prints it (sorted keys; `null` when there is none).
fn resource_list(v: &Value) -> String {
    match v.as_object() {
        None => "null".into(),
        Some(m) => {
            let sorted: std::collections::BTreeMap<&String, &Value> = m.iter().collect();
            serde_json::to_string(&sorted).unwrap_or_default()
        }
    }
}

/// `ValidatePersistentVolumeClaimSpec`.
fn claim_spec(spec: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    access_modes(
        &spec["accessModes"],
        "at least 1 access mode is required",
        &mut errs,
    );
    let field = "spec.resources[storage]";
    match spec["resources"]["requests"]["storage"].as_str() {
        None => errs.push(required(field, "")),
        Some(q) => {
            if let Ok(q) = Quantity::parse(q) {
                if !q.is_positive() {
                    errs.push(invalid(field, &q.canonical(), "must be greater than zero"));
                }
            }
        }
    }
    class_name(
        "spec.storageClassName",
        &spec["storageClassName"],
        &mut errs,
    );
    volume_mode(&spec["volumeMode"], &mut errs);
    errs
}

/// `ValidatePersistentVolumeClaimUpdate` (after the claim's own checks): the spec immutable but
/// for a first volumeName, a class set where there was none, and, once bound, the storage
/// request; a request not below the status capacity; the volume mode immutable.
fn claim_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = claim_spec(&new["spec"]);
    let (mut ns, mut os) = (new["spec"].clone(), old["spec"].clone());
    if os["volumeName"].as_str().unwrap_or("").is_empty() {
        os["volumeName"] = ns["volumeName"].clone();
    }
    let beta = &old["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"];
    if os["storageClassName"].is_null()
        && ns["storageClassName"].is_string()
        && (beta.is_null() || *beta == ns["storageClassName"])
    {
        os["storageClassName"] = ns["storageClassName"].clone();
    }
    if new["status"]["phase"] == "Bound" {
        if ns["resources"]["requests"].is_object() {
            ns["resources"]["requests"]["storage"] =
                old["spec"]["resources"]["requests"]["storage"].clone();
        }
        ns["volumeAttributesClassName"] = os["volumeAttributesClassName"].clone();
    }
    strip_nulls(&mut ns);
    strip_nulls(&mut os);
    if ns != os {
        errs.push(forbidden(
            "spec",
            &format!(
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n{}",
                changes(&os, &ns)
            ),
        ));
    }
    let size = |v: &Value| {
        v.as_str()
            .and_then(|q| Quantity::parse(q).ok())
            .unwrap_or_else(|| Quantity::parse("0").expect("zero"))
    };
    let new_size = size(&new["spec"]["resources"]["requests"]["storage"]);
    let old_size = size(&old["spec"]["resources"]["requests"]["storage"]);
    let status_size = size(&old["status"]["capacity"]["storage"]);
    // RecoverVolumeExpansionFailure (GA): a request may shrink down to the status capacity.
    if new_size.cmp_value(&old_size).is_lt() && new_size.cmp_value(&status_size).is_le() {
        errs.push(forbidden(
            "spec.resources.requests.storage",
            "field can not be less than status.capacity",
        ));
    }
    errs.extend(immutable_volume_mode(new, old));
    errs
}

/// The volume mode may not change (named `volumeMode`, without `spec.`, by the real validator).
fn immutable_volume_mode(new: &Value, old: &Value) -> Option<FieldError> {
    let (n, o) = (&new["spec"]["volumeMode"], &old["spec"]["volumeMode"]);
    (n != o).then(|| {
        invalid_value(
            "volumeMode",
            BadValue::Json(n.to_string()),
            "field is immutable",
        )
    })
}

fn strip_nulls(v: &mut Value) {
    if let Some(m) = v.as_object_mut() {
        m.retain(|_, x| !x.is_null());
        for x in m.values_mut() {
            strip_nulls(x);
        }
    }
}

/// The fields that differ between `old` and `new`, one `-` and one `+` line each (dotted
/// paths, JSON values).
fn changes(old: &Value, new: &Value) -> String {
    let mut out = String::new();
    diff_into(old, new, "", &mut out);
    out
}

fn diff_into(old: &Value, new: &Value, at: &str, out: &mut String) {
    if let (Value::Object(o), Value::Object(n)) = (old, new) {
        let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            let path = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            let (a, b) = (
                o.get(k).unwrap_or(&Value::Null),
                n.get(k).unwrap_or(&Value::Null),
            );
            diff_into(a, b, &path, out);
        }
    } else if old != new {
        out.push_str(&format!("- {at}: {old}\n+ {at}: {new}\n"));
    }
}

/// A VolumeAttachmentSpec as the real validator prints it: the internal Go struct through
/// json.Marshal (Go field names, in Go's order, nulls kept).
/// (A JSON map here is sorted by key: the fields are written in Go's order by hand. An inline
/// spec is printed in its v1 form, not the internal one.)
fn internal_attachment_spec(spec: &Value) -> String {
    let source = &spec["source"];
    let string = |v: &Value| Value::String(s(v).to_string()).to_string();
    format!(
        "{{\"Attacher\":{},\"Source\":{{\"PersistentVolumeName\":{},\"InlineVolumeSpec\":{}}},\"NodeName\":{}}}",
        string(&spec["attacher"]),
        source["persistentVolumeName"],
        source["inlineVolumeSpec"],
        string(&spec["nodeName"]),
    )
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// `ValidateVolumeAttachment` beyond metadata: attacher, source, node, the volume's name.
fn attachment(v: &Value) -> Vec<FieldError> {
    let spec = &v["spec"];
    let mut errs = Vec::new();
    csi_driver_name("spec.attacher", &spec["attacher"], &mut errs);
    let source = &spec["source"];
    let (pv, inline) = (&source["persistentVolumeName"], &source["inlineVolumeSpec"]);
    let exactly_one = "must specify exactly one of inlineVolumeSpec and persistentVolumeName";
    match (pv.as_str(), inline.is_null()) {
        (None, true) => errs.push(required("spec.source", exactly_one)),
        (Some(_), false) => errs.push(forbidden("spec.source", exactly_one)),
        (Some(""), true) => errs.push(required(
            "spec.source.persistentVolumeName",
            "must specify non empty persistentVolumeName",
        )),
        _ => {}
    }
    let node = spec["nodeName"].as_str().unwrap_or("");
    for m in dns1123_subdomain(node) {
        errs.push(invalid("spec.nodeName", node, m));
    }
    if let Some(pv) = pv.as_str() {
        for m in dns1123_subdomain(pv) {
            errs.push(invalid("spec.source.persistentVolumeName", pv, m));
        }
    }
    errs
}

/// `validateCSIDriverSpec` (the booleans it requires are always defaulted).
fn csi_driver_spec(spec: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(p) = spec["fsGroupPolicy"].as_str() {
        let supported = ["File", "None", "ReadWriteOnceWithFSType"];
        if !supported.contains(&p) {
            errs.push(not_supported(
                "spec.fsGroupPolicy",
                BadValue::Str(p.into()),
                &supported,
            ));
        }
    }
    for m in spec["volumeLifecycleModes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let m = m.as_str().unwrap_or("");
        if m != "Persistent" && m != "Ephemeral" {
            errs.push(not_supported(
                "spec.volumeLifecycleModes",
                BadValue::Str(m.into()),
                &["Persistent", "Ephemeral"],
            ));
        }
    }
    if let Some(p) = spec["nodeAllocatableUpdatePeriodSeconds"]
        .as_i64()
        .filter(|p| *p < 10)
    {
        errs.push(invalid_value(
            "spec.nodeAllocatableUpdatePeriodSeconds",
            BadValue::Int(p),
            "must be greater than or equal to 10 seconds",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bodies(errs: &[FieldError]) -> Vec<String> {
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.body()))
            .collect()
    }

    /// tests/golden/211.
    #[test]
    fn an_empty_volume_spec_is_refused_as_kube_apiserver_words_it() {
        assert_eq!(
            bodies(&validate(Kind::PersistentVolume, &json!({"spec": {}}))),
            vec![
                "spec.accessModes: Required value",
                "spec.capacity: Required value",
                "spec.capacity: Unsupported value: null: supported values: \"storage\"",
                "spec: Required value: must specify a volume type",
            ]
        );
    }

    #[test]
    fn a_second_volume_source_is_forbidden_on_its_own_field() {
        let spec = json!({"spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
            "nfs": {"server": "s", "path": "/"}, "csi": {"driver": "d.example.com", "volumeHandle": "h"}}});
        assert_eq!(
            bodies(&validate(Kind::PersistentVolume, &spec)),
            vec!["spec.csi: Forbidden: may not specify more than 1 volume type"]
        );
    }

    #[test]
    fn a_bound_claims_request_may_grow_but_not_its_access_modes() {
        let old = json!({"spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv",
            "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}});
        let mut grown = old.clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        assert!(validate_update(Kind::PersistentVolumeClaim, &grown, &old).is_empty());
        let mut modes = old.clone();
        modes["spec"]["accessModes"] = json!(["ReadWriteMany"]);
        let errs = validate_update(Kind::PersistentVolumeClaim, &modes, &old);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec");
        assert!(errs[0]
            .detail
            .starts_with("spec is immutable after creation"));
        assert!(errs[0]
            .detail
            .contains("- accessModes: [\"ReadWriteOnce\"]\n"));
    }

    #[test]
    fn a_volumes_phase_change_moves_its_transition_time() {
        let old = json!({"status": {"phase": "Pending", "lastPhaseTransitionTime": "t0"}});
        let mut new = json!({"status": {"phase": "Bound"}});
        prepare_status_update(Kind::PersistentVolume, &mut new, &old, "t1");
        assert_eq!(new["status"]["lastPhaseTransitionTime"], "t1");
        let mut same = json!({"status": {"phase": "Pending"}});
        prepare_status_update(Kind::PersistentVolume, &mut same, &old, "t1");
        assert_eq!(same["status"]["lastPhaseTransitionTime"], "t0");
    }

    #[test]
    fn finalizers_are_added_once_and_the_list_goes_with_the_last() {
        let mut v = json!({"metadata": {}});
        assert!(add_finalizer(&mut v, PV_PROTECTION));
        assert!(!add_finalizer(&mut v, PV_PROTECTION));
        assert!(has_finalizer(&v, PV_PROTECTION));
        assert!(remove_finalizer(&mut v, PV_PROTECTION));
        assert_eq!(v, json!({"metadata": {}}));
    }
}
