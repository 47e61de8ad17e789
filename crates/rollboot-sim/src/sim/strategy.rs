//! What each kind's registry strategy does to a decoded object on a write, as kube-apiserver
//! does it: the scheme's defaults (on create, update and a patch's result alike), the
//! create-time rules of the strategies and of the Pod admission plugins (ServiceAccount,
//! Priority, DefaultTolerationSeconds), and the checks of a spec beyond its metadata (admission
//! policies and their bindings, which `admission/` knows).
//!
//! Above the kinds and the admission policies, below the write rules (`api.rs`), which call it.
//! It must never store anything, read the store, or talk HTTP.

use chrono::Utc;
use serde_json::{json, Value};

use super::admission;
use super::crd;
use super::kinds::Kind;
use super::meta::timestamp;
use super::validation::FieldError;
use super::volume_strategy;

/// The strategy's checks of a (decoded, defaulted) object beyond its metadata, on create and
/// update, for the kinds whose objects the simulator acts on: admission policies and their
/// bindings (`admission::check_policy`) and the volume kinds (`volume_strategy`). Other kinds'
/// specs are not validated (see `sim`).
pub fn validate_spec(kind: Kind, v: &Value) -> Vec<FieldError> {
    match kind {
        Kind::ValidatingAdmissionPolicy => admission::check_policy(v),
        Kind::ValidatingAdmissionPolicyBinding => admission::check_binding(v),
        Kind::PersistentVolume
        | Kind::PersistentVolumeClaim
        | Kind::CsiDriver
        | Kind::VolumeAttachment => volume_strategy::validate(kind, v),
        Kind::NodeMaintenance => crd::validate(v),
        _ => Vec::new(),
    }
}

/// The checks of a status update: a custom resource's schema holds for its status too (other
/// kinds' status is not validated, see `sim`).
pub fn validate_status(kind: Kind, v: &Value) -> Vec<FieldError> {
    match kind {
        Kind::NodeMaintenance => crd::validate(v),
        _ => Vec::new(),
    }
}

/// The checks an update of the main resource adds to [`validate_spec`]: the fields the kind's
/// strategy does not let change (the volume kinds'; other kinds keep what they may not change
/// without refusing, see `sim`).
pub fn validate_update(kind: Kind, new: &Value, old: &Value) -> Vec<FieldError> {
    volume_strategy::validate_update(kind, new, old)
}

/// What a status strategy does to a status update before it is stored (a volume's phase
/// transition time).
pub fn prepare_status_update(kind: Kind, new: &mut Value, old: &Value) {
    volume_strategy::prepare_status_update(kind, new, old, &timestamp(Utc::now()));
}

/// Defaults the real server fills in on create (a subset: see the module docs of `sim`): the
/// scheme's defaults of [`default_fields`], then the registry strategies' create rules and, for
/// Pods, what the ServiceAccount, Priority and DefaultTolerationSeconds admission plugins add
/// (not the service-account token volume); for volumes and claims, the status they start
/// with and the StorageObjectInUseProtection plugin's finalizer.
pub fn apply_defaults(kind: Kind, v: &mut Value) {
    default_fields(kind, v);
    volume_strategy::prepare_create(kind, v, &timestamp(Utc::now()));
    match kind {
        Kind::Pod => admit_pod(v),
        Kind::Namespace => {
            v["status"] = json!({"phase": "Active"});
            let fin = &mut v["spec"]["finalizers"];
            match fin.as_array_mut() {
                Some(a) if a.iter().any(|f| f == "kubernetes") => {}
                Some(a) => a.push(json!("kubernetes")),
                None => *fin = json!(["kubernetes"]),
            }
        }
        _ => {}
    }
}

/// The scheme's defaults, which kube-apiserver applies to every object it decodes: on create,
/// update and to the result of a patch alike.
pub fn default_fields(kind: Kind, v: &mut Value) {
    match kind {
        Kind::Pod => default_pod(v),
        // A custom resource's schema defaults.
        Kind::NodeMaintenance => crd::default(v),
        // SetDefaults_PersistentVolume, _PersistentVolumeClaim(Spec), _StorageClass, _CSIDriver
        // (SELinuxMountReadWriteOncePod is on by default in v1.36).
        Kind::PersistentVolume => {
            set_if_null(&mut v["status"], "phase", json!("Pending"));
            set_if_null(
                &mut v["spec"],
                "persistentVolumeReclaimPolicy",
                json!("Retain"),
            );
            set_if_null(&mut v["spec"], "volumeMode", json!("Filesystem"));
        }
        Kind::PersistentVolumeClaim => {
            set_if_null(&mut v["status"], "phase", json!("Pending"));
            set_if_null(&mut v["spec"], "volumeMode", json!("Filesystem"));
        }
        Kind::StorageClass => {
            set_if_null(v, "reclaimPolicy", json!("Delete"));
            set_if_null(v, "volumeBindingMode", json!("Immediate"));
        }
        Kind::CsiDriver => {
            let spec = &mut v["spec"];
            for (k, d) in [
                ("attachRequired", json!(true)),
                ("podInfoOnMount", json!(false)),
                ("storageCapacity", json!(false)),
                ("fsGroupPolicy", json!("ReadWriteOnceWithFSType")),
                ("volumeLifecycleModes", json!(["Persistent"])),
                ("requiresRepublish", json!(false)),
                ("seLinuxMount", json!(false)),
            ] {
                set_if_null(spec, k, d);
            }
        }
        Kind::Deployment => default_deployment(v),
        Kind::Namespace => {
            let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
            if !name.is_empty() {
                v["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            }
        }
        Kind::PriorityClass => set_if_null(v, "preemptionPolicy", json!("PreemptLowerPriority")),
        Kind::ValidatingAdmissionPolicy | Kind::ValidatingAdmissionPolicyBinding => {
            admission::apply_defaults(kind, v)
        }
        Kind::RoleBinding | Kind::ClusterRoleBinding => {
            for s in v
                .get_mut("subjects")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if s["apiGroup"].as_str().unwrap_or("").is_empty()
                    && matches!(s["kind"].as_str(), Some("User" | "Group"))
                {
                    s["apiGroup"] = json!("rbac.authorization.k8s.io");
                }
            }
        }
        _ => {}
    }
}

fn set_if_null(v: &mut Value, key: &str, d: Value) {
    if v[key].is_null() {
        v[key] = d;
    }
}

/// apps/v1 Deployment defaults, and those of its pod template.
fn default_deployment(v: &mut Value) {
    let spec = &mut v["spec"];
    set_if_null(spec, "replicas", json!(1));
    let strategy = &mut spec["strategy"];
    set_if_null(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let ru = &mut strategy["rollingUpdate"];
        set_if_null(ru, "maxUnavailable", json!("25%"));
        set_if_null(ru, "maxSurge", json!("25%"));
    }
    set_if_null(spec, "revisionHistoryLimit", json!(10));
    set_if_null(spec, "progressDeadlineSeconds", json!(600));
    default_pod_spec(&mut spec["template"]["spec"]);
}

/// The defaults of every PodSpec (a Pod's or a template's) and of its containers.
fn default_pod_spec(spec: &mut Value) {
    set_if_null(spec, "dnsPolicy", json!("ClusterFirst"));
    set_if_null(spec, "restartPolicy", json!("Always"));
    set_if_null(spec, "securityContext", json!({}));
    set_if_null(spec, "terminationGracePeriodSeconds", json!(30));
    set_if_null(spec, "schedulerName", json!("default-scheduler"));
    for c in containers_mut(spec) {
        default_container(c);
    }
}

/// The containers and init containers of a PodSpec, for writing (none when it has none: a
/// missing list is not indexed mutably, which would write a `null` into the spec).
fn containers_mut(spec: &mut Value) -> impl Iterator<Item = &mut Value> {
    let Some(spec) = spec.as_object_mut() else {
        return Vec::new().into_iter();
    };
    spec.iter_mut()
        .filter(|(k, _)| *k == "initContainers" || *k == "containers")
        .filter_map(|(_, v)| v.as_array_mut())
        .flatten()
        .collect::<Vec<_>>()
        .into_iter()
}

fn default_container(c: &mut Value) {
    if c["imagePullPolicy"].is_null() {
        let latest = image_tag(c["image"].as_str().unwrap_or("")) == Some("latest");
        c["imagePullPolicy"] = json!(if latest { "Always" } else { "IfNotPresent" });
    }
    set_if_null(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_if_null(c, "terminationMessagePolicy", json!("File"));
    for p in c
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        set_if_null(p, "protocol", json!("TCP"));
    }
    for e in c
        .get_mut("env")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(field_ref) = e
            .pointer_mut("/valueFrom/fieldRef")
            .filter(|f| f.is_object())
        {
            set_if_null(field_ref, "apiVersion", json!("v1"));
        }
    }
}

/// The tag an image reference pulls: "latest" when it names neither a tag nor a digest.
fn image_tag(image: &str) -> Option<&str> {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.rsplit_once(':') {
        Some((_, tag)) => Some(tag),
        None if digest.is_none() => Some("latest"),
        None => None,
    }
}

/// A Pod: its spec's defaults and the Pod-only ones.
fn default_pod(v: &mut Value) {
    let spec = &mut v["spec"];
    default_pod_spec(spec);
    set_if_null(spec, "enableServiceLinks", json!(true));
    // Requests default to limits, per resource (Pods only, not templates).
    for c in containers_mut(spec) {
        let limits = c["resources"]["limits"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (res, q) in limits {
            if c["resources"]["requests"][&res].is_null() {
                c["resources"]["requests"][&res] = q;
            }
        }
    }
}

/// What admission and the registry add to a new Pod: its service account, priority, the
/// tolerations of the not-ready and unreachable taints, phase and QoS class.
/// The value of the built-in PriorityClass `system-node-critical`.
pub const SYSTEM_NODE_CRITICAL: i64 = 2_000_001_000;

fn admit_pod(v: &mut Value) {
    let spec = &mut v["spec"];
    set_if_null(spec, "serviceAccountName", json!("default"));
    let sa = spec["serviceAccountName"].clone();
    set_if_null(spec, "serviceAccount", sa);
    // The Priority admission plugin: the value of the class named (the two system classes it
    // knows itself), 0 without one (no globalDefault class here).
    let priority = match spec["priorityClassName"].as_str() {
        Some("system-node-critical") => SYSTEM_NODE_CRITICAL,
        Some("system-cluster-critical") => SYSTEM_NODE_CRITICAL - 1000,
        _ => 0,
    };
    set_if_null(spec, "priority", json!(priority));
    set_if_null(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    for taint in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = spec["tolerations"].as_array().is_some_and(|ts| {
            ts.iter().any(|t| {
                let key = t["key"].as_str().unwrap_or("");
                let effect = t["effect"].as_str().unwrap_or("");
                (key == taint || (key.is_empty() && t["operator"] == "Exists"))
                    && (effect.is_empty() || effect == "NoExecute")
            })
        });
        if !tolerated {
            let t = json!({"key": taint, "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 300});
            match spec["tolerations"].as_array_mut() {
                Some(ts) => ts.push(t),
                None => spec["tolerations"] = json!([t]),
            }
        }
    }
    let qos = qos_class(&v["spec"]);
    set_if_null(&mut v["status"], "phase", json!("Pending"));
    set_if_null(&mut v["status"], "qosClass", json!(qos));
}

/// The QoS class of a pod spec, from its containers' cpu and memory requests and limits.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|l| spec[*l].as_array().into_iter().flatten())
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        for res in ["cpu", "memory"] {
            let req = &c["resources"]["requests"][res];
            let lim = &c["resources"]["limits"][res];
            any |= !req.is_null() || !lim.is_null();
            guaranteed &= !lim.is_null() && (req.is_null() || req == lim);
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}
