//! The world: the parts of a cluster that are not the API server. Kubelets, the scheduler, the
//! ReplicaSet, StatefulSet and DaemonSet controllers, the disruption controller, and simulated reboots.
//!
//! A host may go away for good ([`World::remove_host`], an autoscaler's scale-down): its Node
//! and pods are deleted and its kubelet writes nothing more.
//!
//! Built from a [`Scenario`], then driven by one task reacting to the store's change stream
//! (no polling) and to its own timers (pod start, grace period expiry, reboot phases), all
//! scaled by the scenario's time factor. It writes through the same store as API clients. It
//! must never bypass the store or keep state a restart of the world could not rebuild from it
//! (besides timers in flight).
//!
//! With volumes (`statefulVolumes`), it plays the StatefulSet controller's claims, a CSI
//! provisioner binding each claim to a new PersistentVolume at once, the attach/detach
//! controller with its CSI attacher (a VolumeAttachment per volume and node, attached after
//! `attachSeconds`, then listed in the Node's `volumesAttached`; a Multi-Attach Event for a pod
//! whose exclusive volume is still attached elsewhere), and the kubelet's side (`volumesInUse`
//! once attached, a pod Ready only once its volumes are; unmounted when its containers exit).
//! Detaching waits until the volume has left `volumesInUse`: the attach/detach controller takes
//! it out of `volumesAttached`, deletes the VolumeAttachment, whose attacher finalizer goes
//! `detachSeconds` later, not while the node is down in a reboot. Its per-volume state is
//! indexed by claim and by volume (`claim_users`, `va_by_pv`), so a world without volumes pays
//! one emptiness check per pod event. For every claim and volume, whoever made it, it runs
//! kube-controller-manager's PV controller and its pv-/pvc-protection controllers
//! (`pv_controller.rs` decides): pre-bound and matching pairs are bound, a claim being deleted
//! waits while a pod on a node mounts it, a volume while it is Bound, and its provisioner
//! deletes the volumes it made once their claim is gone.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use chrono::Utc;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use super::api;
use super::index::{key_of, Index};
use super::invariants::Cause;
use super::kinds::Kind;
use super::meta::timestamp;
use super::pv_controller;
use super::scenario::{Placement, Scenario};
use super::server::Shared;
use super::store::{Entry, EventType, Inner, Prepared, StoreEvent};
use super::volumes::{self, PvInfo};

const APP_LABEL: &str = "app";

enum Msg {
    Start(String, String),
    Remove(String, String),
    /// A reboot asked of the host (node), at that instant: its phases are timed from it.
    Reboot(String, Instant),
    /// The host goes down (node, when due).
    RebootDown(String, Instant),
    /// The host is up again (node, when due).
    RebootUp(String, Instant),
    /// The node-lifecycle controller's monitor pass after a node is Ready again.
    Untaint(String),
    /// A new start delay for pods (simulated seconds).
    StartDelay(f64),
    /// A new detach time for volumes (simulated seconds), for detaches that begin from now.
    DetachDelay(f64),
    /// The CSI attacher has attached the VolumeAttachment (name, uid).
    Attach(String, String),
    /// The CSI attacher has detached the VolumeAttachment (name), if its node has not been
    /// down since the detach began (the node's reboot count then).
    Detach(String, u64),
}

/// The taint keys kube-controller-manager's node-lifecycle controller manages here.
const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// A handle on the world: reboots and counts.
#[derive(Clone)]
pub struct World {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Msg>,
    /// Hosts gone for good ([`World::remove_host`]).
    gone: Arc<std::sync::Mutex<BTreeSet<String>>>,
}

impl World {
    /// Reboots `node` for request `token` (the agent's simulated reboot method). A second
    /// reboot with the same token is recorded as a violation, and still performed.
    pub fn reboot(&self, node: &str, token: &str) {
        self.shared.invariants.reboot_requested(node, token);
        self.check_drained(node);
        self.check_detached(node);
        let _ = self.tx.send(Msg::Reboot(node.to_string(), Instant::now()));
    }

    /// The pods on `node` a drain evicts (not DaemonSet or mirror pods), a terminating one
    /// included (a reboot now kills it early).
    pub fn undrained(&self, node: &str) -> Vec<String> {
        self.shared
            .store
            .lock()
            .pods_on(node)
            .filter(|e| {
                !matches!(
                    e.idx.owner.as_ref().map(|o| o.0.as_str()),
                    Some("DaemonSet" | "Node")
                )
            })
            .map(|e| e.idx.key())
            .collect()
    }

    /// `node`'s host shuts down by itself and comes back (a reboot nobody asked for): no check
    /// that it was drained or its volumes detached (the report says what was left); a second
    /// one under the same `token` is recorded as a violation.
    pub fn shut_down(&self, node: &str, token: &str) {
        self.shared.invariants.reboot_requested(node, token);
        self.shared.invariants.shutting_down(node);
        let _ = self.tx.send(Msg::Reboot(node.to_string(), Instant::now()));
    }

    /// Records a reboot of a node that is schedulable or still runs pods other than
    /// DaemonSet and mirror pods (a terminating pod counts: the reboot kills it early).
    fn check_drained(&self, node: &str) {
        let uncordoned = self
            .shared
            .store
            .lock()
            .get(Kind::Node, node)
            .is_some_and(|e| !e.idx.unschedulable);
        let pods = self.undrained(node);
        if uncordoned || !pods.is_empty() {
            self.shared.invariants.unsafe_reboot(node, uncordoned, pods);
        }
    }

    /// Records a reboot of a node to which volumes of pods evicted from it are still attached
    /// (a VolumeAttachment to it, or a name in its `volumesAttached`); the volumes of the pods
    /// that stay (DaemonSet and mirror pods) do not count.
    fn check_detached(&self, node: &str) {
        let inner = self.shared.store.lock();
        let Some(n) = inner.get(Kind::Node, node) else {
            return;
        };
        let mut vols: BTreeSet<String> = volumes::attached_names(&n.value()).into_iter().collect();
        for va in inner.range(Kind::VolumeAttachment, None, None) {
            if va.idx.node_name.as_deref() == Some(node) {
                if let Some(u) = va
                    .idx
                    .volume
                    .as_deref()
                    .and_then(|pv| pv_unique(&inner, pv))
                {
                    vols.insert(u);
                }
            }
        }
        if vols.is_empty() {
            return;
        }
        for p in inner.pods_on(node) {
            let stays = matches!(
                p.idx.owner.as_ref().map(|o| o.0.as_str()),
                Some("DaemonSet" | "Node")
            );
            if stays {
                for c in &p.idx.claims {
                    if let Some(u) =
                        claim_pv(&inner, &p.idx.namespace, c).and_then(|pv| pv_unique(&inner, &pv))
                    {
                        vols.remove(&u);
                    }
                }
            }
        }
        drop(inner);
        if !vols.is_empty() {
            self.shared
                .invariants
                .reboot_with_attached_volumes(node, vols.into_iter().collect());
        }
    }

    /// `node`'s host goes away for good (a cloud instance deleted by an autoscaler): its Node
    /// is deleted, and its pods with it (the pod GC's part: a DaemonSet's are not made again),
    /// its kubelet writes nothing more, and no Node of that name is ever Ready again. Its
    /// agent is the harness's to stop ([`World::gone_hosts`]).
    pub fn remove_host(&self, node: &str) {
        self.gone
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node.to_string());
        let mut inner = self.shared.store.lock();
        let opts = api::DeleteOptions::default();
        let _ = api::delete(&mut inner, Kind::Node, "", node, &opts, None, None);
        let pods: Vec<String> = inner.pods_on(node).map(|p| p.idx.key()).collect();
        let force = api::DeleteOptions {
            grace: Some(0),
            ..Default::default()
        };
        for key in pods {
            if let Some((ns, name)) = key.split_once('/') {
                let _ = api::delete(&mut inner, Kind::Pod, ns, name, &force, None, None);
            }
        }
    }

    /// The hosts gone for good so far.
    pub fn gone_hosts(&self) -> BTreeSet<String> {
        self.gone.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Pods take `secs` simulated seconds from binding to Ready from now on.
    pub fn set_start_delay(&self, secs: f64) {
        let _ = self.tx.send(Msg::StartDelay(secs));
    }

    /// Volumes whose detach begins from now on take `secs` simulated seconds to detach (a
    /// slow CSI driver, a storage backend under load).
    pub fn set_detach_delay(&self, secs: f64) {
        let _ = self.tx.send(Msg::DetachDelay(secs));
    }

    /// Nodes in the store.
    pub fn node_count(&self) -> usize {
        self.shared.store.lock().count(Kind::Node)
    }

    /// Pods in the store.
    pub fn pod_count(&self) -> usize {
        self.shared.store.lock().count(Kind::Pod)
    }

    /// The invariant records.
    pub fn invariants(&self) -> super::invariants::InvariantReport {
        self.shared.invariants.report()
    }

    /// The bootID of a node.
    pub fn boot_id(&self, node: &str) -> Option<String> {
        self.shared.store.get(Kind::Node, node)?.idx.boot_id.clone()
    }

    /// The machine ID the kubelet of `node` reports (its host's, which a reboot keeps).
    pub fn machine_id(&self, node: &str) -> Option<String> {
        self.shared
            .store
            .get(Kind::Node, node)?
            .idx
            .machine_id
            .clone()
    }

    /// The cycle state rollboot last wrote on `node`'s Node, and since when (none before its
    /// first cycle, or while its Node is gone).
    pub fn rollboot_state(
        &self,
        node: &str,
    ) -> Option<(rollboot::node::NodeState, chrono::DateTime<Utc>)> {
        let e = self.shared.store.get(Kind::Node, node)?;
        let n: k8s_openapi::api::core::v1::Node = serde_json::from_slice(&e.bytes).ok()?;
        let v = rollboot::node::NodeView::from_node(&n);
        Some((v.state?, v.state_since?))
    }

    /// The InternalIP the Node of `node` reports: its host's own address.
    pub fn internal_ip(&self, node: &str) -> Option<std::net::IpAddr> {
        let e = self.shared.store.get(Kind::Node, node)?;
        let v: Value = serde_json::from_slice(&e.bytes).ok()?;
        v["status"]["addresses"]
            .as_array()?
            .iter()
            .find(|a| a["type"] == "InternalIP")?["address"]
            .as_str()?
            .parse()
            .ok()
    }
}

fn rand_hex(rng: &mut SmallRng, n: usize) -> String {
    (0..n)
        .map(|_| char::from_digit(u32::from(rng.random_range(0..16u8)), 16).unwrap_or('0'))
        .collect()
}

fn uid(rng: &mut SmallRng) -> String {
    format!(
        "{}-{}-4{}-a{}-{}",
        rand_hex(rng, 8),
        rand_hex(rng, 4),
        rand_hex(rng, 3),
        rand_hex(rng, 3),
        rand_hex(rng, 12)
    )
}

/// The PersistentVolume a claim (`namespace`, name) is bound to.
fn claim_pv(inner: &Inner, namespace: &str, claim: &str) -> Option<String> {
    inner
        .get(Kind::PersistentVolumeClaim, &key_of(namespace, claim))?
        .idx
        .volume
        .clone()
}

/// The unique name of a CSI PersistentVolume.
fn pv_unique(inner: &Inner, pv: &str) -> Option<String> {
    PvInfo::of(&inner.get(Kind::PersistentVolume, pv)?.value()).map(|i| i.unique())
}

/// The unique names of a pod's volumes that must be attached to its node, if all of them are
/// (their VolumeAttachment to it says attached and is not being deleted); `None` while one is
/// not, or a claim is not bound.
fn volumes_ready(inner: &Inner, pod: &Index) -> Option<Vec<String>> {
    let node = pod.node_name.as_deref()?;
    let mut out = Vec::new();
    for c in &pod.claims {
        let pv = claim_pv(inner, &pod.namespace, c)?;
        let Some(info) = PvInfo::of(&inner.get(Kind::PersistentVolume, &pv)?.value()) else {
            continue;
        };
        if !volumes::attach_required(inner, &info.driver) {
            continue;
        }
        let va = inner.get(Kind::VolumeAttachment, &info.attachment(node))?;
        if va.idx.deleting || va.value()["status"]["attached"] != true {
            return None;
        }
        out.push(info.unique());
    }
    Some(out)
}

/// The kubelet unmounts the volumes of `pod` (its containers exited): out of its node's
/// `volumesInUse`, unless another pod there still uses the claim.
fn unmount(inner: &mut Inner, pod: &Index) {
    let Some(node) = pod.node_name.as_deref() else {
        return;
    };
    let key = pod.key();
    let mut gone = Vec::new();
    for c in &pod.claims {
        let shared = inner
            .pods_on(node)
            .any(|e| e.idx.key() != key && !e.idx.deleting && e.idx.claims.contains(c));
        if !shared {
            if let Some(u) = claim_pv(inner, &pod.namespace, c).and_then(|pv| pv_unique(inner, &pv))
            {
                gone.push(u);
            }
        }
    }
    let Some(n) = inner.get(Kind::Node, node) else {
        return;
    };
    let mut v = n.value();
    let mut changed = false;
    for u in gone {
        changed |= volumes::set_in_use(&mut v, &u, false);
    }
    if changed {
        inner.put(Kind::Node, v);
    }
}

/// The provisioner of the world's driver: binds an unbound claim of its StorageClass to a new
/// PersistentVolume (`pvc-<claim uid>`) at once.
fn provision_claim(inner: &mut Inner, key: &str, rng: &mut SmallRng) {
    let Some(c) = inner.get(Kind::PersistentVolumeClaim, key).cloned() else {
        return;
    };
    if c.idx.volume.is_some() || c.idx.deleting {
        return;
    }
    let cv = c.value();
    let class = cv["spec"]["storageClassName"].as_str();
    let ours = class == Some(volumes::STORAGE_CLASS)
        || class
            .and_then(|n| inner.get(Kind::StorageClass, n))
            .is_some_and(|sc| sc.value()["provisioner"] == volumes::DRIVER);
    if !ours {
        return;
    }
    let (pv, claim) = volumes::provision(&cv, &uid(rng), &timestamp(Utc::now()));
    if api::insert(inner, Kind::PersistentVolume, pv).is_ok() {
        inner.put(Kind::PersistentVolumeClaim, claim);
    }
}

/// Writes a controller's new version of an object: stored, or gone when it is being deleted
/// and its last finalizer went. False when the object is gone.
fn write(inner: &mut Inner, kind: Kind, key: &str, v: Value) -> bool {
    let done = !v["metadata"]["deletionTimestamp"].is_null()
        && v["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty());
    if done {
        inner.remove(kind, key, v);
        return false;
    }
    inner.put(kind, v);
    true
}

/// The binder, the world's provisioner's reclaim and the pv-protection controller, for one
/// volume.
fn sync_volume(inner: &mut Inner, name: &str, now: &str) {
    let Some(e) = inner.get(Kind::PersistentVolume, name) else {
        return;
    };
    let mut v = e.value();
    let claim = pv_controller::claim_ref_key(&v)
        .and_then(|k| inner.get(Kind::PersistentVolumeClaim, &k))
        .map(|e| e.value());
    if let Some(next) = pv_controller::sync_volume(&v, claim.as_ref(), now) {
        if !write(inner, Kind::PersistentVolume, name, next.clone()) {
            return;
        }
        v = next;
    }
    let reclaim = v["status"]["phase"] == "Released"
        && v["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
        && v["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == volumes::DRIVER
        && v["metadata"]["deletionTimestamp"].is_null();
    if reclaim {
        match api::delete(
            inner,
            Kind::PersistentVolume,
            "",
            name,
            &api::DeleteOptions::default(),
            None,
            None,
        ) {
            Ok(api::Deleted::Marked(e)) => v = e.value(),
            _ => return,
        }
    }
    if let Some(next) = pv_controller::protect_volume(&v) {
        write(inner, Kind::PersistentVolume, name, next);
    }
}

/// A pod created by a controller gets its template's priority class, and the priority Pod
/// admission gives it (only the system classes are known here).
fn template_priority(pod: &mut Value, controller: &Value) {
    if let Some(c) = controller["spec"]["template"]["spec"]["priorityClassName"].as_str() {
        pod["spec"]["priorityClassName"] = json!(c);
        pod["spec"]["priority"] = json!(class_priority(c));
    }
}

fn class_priority(class: &str) -> i64 {
    match class {
        "system-node-critical" => super::strategy::SYSTEM_NODE_CRITICAL,
        "system-cluster-critical" => super::strategy::SYSTEM_NODE_CRITICAL - 1000,
        _ => 0,
    }
}

fn suffix(rng: &mut SmallRng) -> String {
    const A: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| A[rng.random_range(0..A.len())] as char)
        .collect()
}

/// `base-xxxxx`, as generateName makes it.
fn generated_name(base: &str, rng: &mut SmallRng) -> String {
    format!("{base}-{}", suffix(rng))
}

/// `base-xxxxx` not yet taken by a pod of `namespace` (generateName: kube-apiserver retries a
/// name that collides; 5,000 DaemonSet pods would otherwise collide about once).
fn pod_name(inner: &Inner, namespace: &str, base: &str, rng: &mut SmallRng) -> String {
    loop {
        let name = generated_name(base, rng);
        if inner.get(Kind::Pod, &key_of(namespace, &name)).is_none() {
            return name;
        }
    }
}

pub(super) fn ready_condition(ready: bool, now: &str) -> Value {
    json!({"type": "Ready", "status": if ready {"True"} else {"False"}, "lastHeartbeatTime": now,
        "lastTransitionTime": now,
        "reason": if ready {"KubeletReady"} else {"KubeletNotReady"},
        "message": if ready {"kubelet is posting ready status"} else {"container runtime is down"}})
}

fn node_object(name: &str, zone: usize, address: String, rng: &mut SmallRng) -> Value {
    let now = timestamp(Utc::now());
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": uid(rng), "creationTimestamp": now, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/zone": format!("zone-{}", (b'a' + (zone % 26) as u8) as char),
            "node-role.kubernetes.io/worker": ""}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [ready_condition(true, &now)],
            "addresses": [{"type": "InternalIP", "address": address},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"machineID": rand_hex(rng, 32), "systemUUID": uid(rng), "bootID": uid(rng),
                "kernelVersion": "6.8.0-sim", "osImage": "rollboot simulated Linux",
                "containerRuntimeVersion": "containerd://2.0.0", "kubeletVersion": "v1.36.2",
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}
        }
    })
}

struct PodSpec<'a> {
    name: String,
    namespace: &'a str,
    labels: Value,
    owner: Option<(&'a str, &'a str, &'a str)>,
    node: Option<&'a str>,
    running: bool,
    grace: i64,
    empty_dir: bool,
    mirror: bool,
    daemon: bool,
}

fn pod_object(p: &PodSpec, rng: &mut SmallRng) -> Value {
    let now = timestamp(Utc::now());
    let mut md = json!({"name": p.name, "namespace": p.namespace, "uid": uid(rng), "creationTimestamp": now,
        "generation": 1, "labels": p.labels});
    if let Some((kind, name, ouid)) = p.owner {
        let api_version = if kind == "Node" { "v1" } else { "apps/v1" };
        md["ownerReferences"] = json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": ouid,
            "controller": true, "blockOwnerDeletion": true}]);
    }
    if p.mirror {
        md["annotations"] = json!({"kubernetes.io/config.mirror": rand_hex(rng, 32), "kubernetes.io/config.source": "file"});
    }
    let mut spec = json!({
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent"}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": p.grace, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default", "schedulerName": "default-scheduler", "priority": 0,
        "enableServiceLinks": true,
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
    });
    if p.daemon {
        spec["tolerations"] = json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]);
    }
    if let Some(n) = p.node {
        spec["nodeName"] = json!(n);
    }
    if p.empty_dir {
        spec["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
        spec["containers"][0]["volumeMounts"] =
            json!([{"name": "scratch", "mountPath": "/scratch"}]);
    }
    let status = if p.running {
        running_status(&now, true)
    } else {
        json!({"phase": "Pending", "qosClass": "BestEffort"})
    };
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec, "status": status})
}

pub(super) fn running_status(now: &str, ready: bool) -> Value {
    let r = if ready { "True" } else { "False" };
    json!({"phase": "Running", "qosClass": "BestEffort", "startTime": now, "hostIP": "10.0.0.1", "podIP": "10.244.0.1",
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": now},
            {"type": "Ready", "status": r, "lastProbeTime": null, "lastTransitionTime": now},
            {"type": "ContainersReady", "status": r, "lastProbeTime": null, "lastTransitionTime": now},
            {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}],
        "containerStatuses": [{"name": "app", "ready": ready, "restartCount": 0, "image": "registry.k8s.io/pause:3.10",
            "imageID": "", "started": ready, "state": {"running": {"startedAt": now}}}]})
}

/// A pod of a controller at build time: the first one built in full, the next ones cloned
/// from it with their own name, uid and node (cloning a Value is much cheaper than building
/// it). Same random draws as [`pod_object`], so a seed builds the same world.
fn from_template(template: &mut Option<Value>, p: &PodSpec, rng: &mut SmallRng) -> Value {
    match template {
        Some(t) if !p.empty_dir => {
            let mut v = t.clone();
            v["metadata"]["name"] = json!(p.name);
            v["metadata"]["uid"] = json!(uid(rng));
            v["spec"]["nodeName"] = json!(p.node);
            v
        }
        _ => {
            let v = pod_object(p, rng);
            if !p.empty_dir {
                *template = Some(v.clone());
            }
            v
        }
    }
}

/// Builds the scenario's objects into the store (synchronously, before serving).
pub fn build(shared: &Shared, sc: &Scenario) -> SmallRng {
    let mut rng = SmallRng::seed_from_u64(sc.seed);
    let mut inner = shared.store.lock();
    let now = timestamp(Utc::now());
    let mut namespaces: Vec<String> = api::SYSTEM_NAMESPACES
        .iter()
        .map(|s| s.to_string())
        .collect();
    for i in 0..sc.namespaces.max(1) {
        namespaces.push(format!("apps-{i}"));
    }
    for ns in &namespaces {
        let v = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "uid": uid(&mut rng),
            "creationTimestamp": now, "labels": {"kubernetes.io/metadata.name": ns}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        inner.put(Kind::Namespace, v);
    }
    let node_names: Vec<String> = (0..sc.nodes).map(|i| format!("node-{i:04}")).collect();
    for (i, n) in node_names.iter().enumerate() {
        let address = super::scenario::node_address(i, sc.loopback_addresses());
        let v = node_object(n, i % sc.zones.max(1), address, &mut rng);
        inner.put(Kind::Node, v);
        shared
            .invariants
            .node_availability(n, &BTreeMap::new(), false, false);
    }
    // Deployments, their ReplicaSets and pods, laid out as `placement` says.
    let total = sc.nodes * sc.pods_per_node;
    let replicas = sc.replicas.max(1);
    let deployments = total.div_ceil(replicas);
    let mut placer = Placer::new(sc.nodes, sc.placement, sc.seed);
    let mut empty_dir_left = sc.empty_dir_pods;
    for d in 0..deployments {
        let ns = &namespaces[4 + d % sc.namespaces.max(1)];
        let name = format!("app-{d}");
        let count = replicas.min(total - d * replicas);
        let dep_uid = uid(&mut rng);
        let hash = rand_hex(&mut rng, 10);
        let rs_name = format!("{name}-{hash}");
        let rs_uid = uid(&mut rng);
        let labels = json!({APP_LABEL: name, "pod-template-hash": hash});
        let mut template = json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}});
        // The last `nodeCriticalShare` of the Deployments.
        let critical = sc.node_critical_share > 0.0
            && ((deployments - d) as f64 - 0.5) / deployments as f64 <= sc.node_critical_share;
        if critical {
            template["spec"]["priorityClassName"] = json!("system-node-critical");
        }
        inner.put(Kind::Deployment, json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "uid": dep_uid, "creationTimestamp": now, "generation": 1, "labels": {APP_LABEL: name}},
            "spec": {"replicas": count, "selector": {"matchLabels": {APP_LABEL: name}}, "template": template},
            "status": {"observedGeneration": 1, "replicas": count, "readyReplicas": count, "availableReplicas": count, "updatedReplicas": count}}));
        inner.put(Kind::ReplicaSet, json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": rs_name, "namespace": ns, "uid": rs_uid, "creationTimestamp": now, "generation": 1, "labels": labels,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": dep_uid, "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"replicas": count, "selector": {"matchLabels": labels}, "template": template},
            "status": {"observedGeneration": 1, "replicas": count, "readyReplicas": count, "availableReplicas": count, "fullyLabeledReplicas": count}}));
        let mut template = None;
        let mut taken = Vec::with_capacity(count);
        for _ in 0..count {
            let at = placer.next(&taken);
            taken.push(at);
            let node = &node_names[at];
            let empty_dir = empty_dir_left > 0;
            empty_dir_left = empty_dir_left.saturating_sub(1);
            let p = PodSpec {
                name: pod_name(&inner, ns, &rs_name, &mut rng),
                namespace: ns,
                labels: labels.clone(),
                owner: Some(("ReplicaSet", &rs_name, &rs_uid)),
                node: Some(node),
                running: true,
                grace: sc.grace_seconds,
                empty_dir,
                mirror: false,
                daemon: false,
            };
            let mut v = from_template(&mut template, &p, &mut rng);
            if critical {
                v["spec"]["priorityClassName"] = json!("system-node-critical");
                v["spec"]["priority"] = json!(super::strategy::SYSTEM_NODE_CRITICAL);
            }
            inner.put(Kind::Pod, v);
        }
        if (d as f64 + 0.5) / deployments as f64 <= sc.pdb_share || (sc.pdb_share >= 1.0) {
            let v = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": ns, "uid": uid(&mut rng), "creationTimestamp": now, "generation": 1},
                "spec": {"maxUnavailable": sc.pdb_max_unavailable, "selector": {"matchLabels": {APP_LABEL: name}}}});
            let e = inner.put(Kind::Pdb, v);
            refresh_pdb(&mut inner, &e.idx.key());
        }
    }
    // Volumes attached per node at the start: `volumesAttached` and `volumesInUse`.
    let mut node_volumes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if sc.stateful_volumes && sc.stateful_sets > 0 {
        let v = volumes::csi_driver_object(&uid(&mut rng), &now);
        inner.put(Kind::CsiDriver, v);
        let v = volumes::storage_class_object(&uid(&mut rng), &now);
        inner.put(Kind::StorageClass, v);
    }
    for d in 0..sc.stateful_sets {
        let ns = &namespaces[4 + d % sc.namespaces.max(1)];
        let name = format!("db-{d}");
        let ss_uid = uid(&mut rng);
        let labels = json!({APP_LABEL: name});
        let count = replicas;
        let revision = format!("{name}-{}", rand_hex(&mut rng, 10));
        inner.put(Kind::StatefulSet, json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": ns, "uid": ss_uid, "creationTimestamp": now, "generation": 1, "labels": labels},
            "spec": {"replicas": count, "serviceName": name, "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}},
                "podManagementPolicy": "OrderedReady", "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "revisionHistoryLimit": 10, "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"}},
            "status": {"observedGeneration": 1, "replicas": count, "readyReplicas": count, "currentReplicas": count, "updatedReplicas": count,
                "availableReplicas": count, "currentRevision": revision, "updateRevision": revision, "collisionCount": 0}}));
        let ss_key = key_of(ns, &name);
        if sc.stateful_volumes {
            if let Some(e) = inner.get(Kind::StatefulSet, &ss_key) {
                let mut v = e.value();
                v["spec"]["volumeClaimTemplates"] = volumes::claim_templates();
                v["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
                    json!([{"name": volumes::CLAIM_TEMPLATE, "mountPath": "/data"}]);
                inner.put(Kind::StatefulSet, v);
            }
        }
        let ssv = inner
            .get(Kind::StatefulSet, &ss_key)
            .map(|e| e.value())
            .unwrap_or_default();
        let mut template = None;
        let mut taken = Vec::with_capacity(count);
        for i in 0..count {
            let at = placer.next(&taken);
            taken.push(at);
            let node = &node_names[at];
            let p = PodSpec {
                name: format!("{name}-{i}"),
                namespace: ns,
                labels: labels.clone(),
                owner: Some(("StatefulSet", &name, &ss_uid)),
                node: Some(node),
                running: true,
                grace: sc.grace_seconds,
                empty_dir: false,
                mirror: false,
                daemon: false,
            };
            let mut v = from_template(&mut template, &p, &mut rng);
            if sc.stateful_volumes {
                let templates = &ssv["spec"]["volumeClaimTemplates"];
                for t in templates.as_array().into_iter().flatten() {
                    let mut claim =
                        volumes::claim_from_template(t, &ssv, &p.name, &uid(&mut rng), &now);
                    claim["metadata"]["resourceVersion"] = json!(inner.revision() + 1);
                    let (pv, claim) = volumes::provision(&claim, &uid(&mut rng), &now);
                    let info = PvInfo::of(&pv).expect("a CSI volume");
                    let pv_name = pv["metadata"]["name"].as_str().unwrap_or("").to_string();
                    inner.put(Kind::PersistentVolumeClaim, claim);
                    inner.put(Kind::PersistentVolume, pv);
                    let mut va =
                        volumes::attachment_object(&info, &pv_name, node, &uid(&mut rng), &now);
                    va["metadata"]["finalizers"] =
                        json!([volumes::attacher_finalizer(volumes::DRIVER)]);
                    va["status"]["attached"] = json!(true);
                    inner.put(Kind::VolumeAttachment, va);
                    node_volumes
                        .entry(node.clone())
                        .or_default()
                        .push(info.unique());
                }
                volumes::add_claim_volumes(&mut v, templates, &p.name);
            }
            inner.put(Kind::Pod, v);
        }
    }
    for (node, vols) in node_volumes {
        let Some(mut v) = inner.get(Kind::Node, &node).map(|e| e.value()) else {
            continue;
        };
        for u in vols {
            volumes::set_attached(&mut v, &u, true);
            volumes::set_in_use(&mut v, &u, true);
        }
        inner.put(Kind::Node, v);
    }
    for d in 0..sc.daemon_sets {
        let name = format!("node-agent-{d}");
        let ds_uid = uid(&mut rng);
        let labels = json!({APP_LABEL: name});
        let n = sc.nodes;
        inner.put(Kind::DaemonSet, json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "kube-system", "uid": ds_uid, "creationTimestamp": now, "generation": 1},
            "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}},
            "status": {"currentNumberScheduled": n, "desiredNumberScheduled": n, "numberMisscheduled": 0, "numberReady": n, "observedGeneration": 1}}));
        let mut template = None;
        for node in &node_names {
            let p = PodSpec {
                name: pod_name(&inner, "kube-system", &name, &mut rng),
                namespace: "kube-system",
                labels: labels.clone(),
                owner: Some(("DaemonSet", &name, &ds_uid)),
                node: Some(node),
                running: true,
                grace: sc.grace_seconds,
                empty_dir: false,
                mirror: false,
                daemon: true,
            };
            let v = from_template(&mut template, &p, &mut rng);
            inner.put(Kind::Pod, v);
        }
    }
    for node in node_names.iter().take(sc.mirror_pods) {
        let node_uid = inner
            .get(Kind::Node, node)
            .map(|e| e.idx.uid.clone())
            .unwrap_or_default();
        let p = PodSpec {
            name: format!("static-web-{node}"),
            namespace: "kube-system",
            labels: json!({APP_LABEL: "static-web"}),
            owner: Some(("Node", node, &node_uid)),
            node: Some(node),
            running: true,
            grace: sc.grace_seconds,
            empty_dir: false,
            mirror: true,
            daemon: false,
        };
        let v = pod_object(&p, &mut rng);
        inner.put(Kind::Pod, v);
    }
    for i in 0..sc.bare_pods {
        let node = &node_names[sc.nodes - 1 - i % sc.nodes.max(1)];
        let p = PodSpec {
            name: format!("bare-{i}"),
            namespace: "default",
            labels: json!({APP_LABEL: "bare"}),
            owner: None,
            node: Some(node),
            running: true,
            grace: sc.grace_seconds,
            empty_dir: false,
            mirror: false,
            daemon: false,
        };
        let v = pod_object(&p, &mut rng);
        inner.put(Kind::Pod, v);
    }
    rng
}

/// Picks the node of each workload pod of a new world (see [`Placement`]).
struct Placer {
    nodes: usize,
    how: Placement,
    rng: SmallRng,
    /// Spread: the current round (a permutation of the nodes) and how far it is used.
    round: Vec<usize>,
    used: usize,
    /// Round robin: pods placed so far.
    placed: usize,
}

impl Placer {
    fn new(nodes: usize, how: Placement, seed: u64) -> Placer {
        Placer {
            nodes: nodes.max(1),
            how,
            // A stream of its own: the world's names and uids stay as the seed always drew them.
            rng: SmallRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15),
            round: Vec::new(),
            used: 0,
            placed: 0,
        }
    }

    /// The node (by position) of the next pod of a workload whose pods so far are on `taken`.
    fn next(&mut self, taken: &[usize]) -> usize {
        match self.how {
            Placement::RoundRobin => {
                self.placed += 1;
                (self.placed - 1) % self.nodes
            }
            Placement::Spread => {
                use rand::seq::SliceRandom;
                if self.used == self.round.len() {
                    self.round = (0..self.nodes).collect();
                    self.round.shuffle(&mut self.rng);
                    self.used = 0;
                }
                // Every node gets one pod per round (the least loaded first); within the round,
                // one the workload is not on yet, when one is left.
                if let Some(j) =
                    (self.used..self.round.len()).find(|&j| !taken.contains(&self.round[j]))
                {
                    self.round.swap(self.used, j);
                }
                self.used += 1;
                self.round[self.used - 1]
            }
        }
    }
}

/// Recomputes a budget's status as the disruption controller does; writes only on change.
pub fn refresh_pdb(inner: &mut Inner, key: &str) {
    let Some(old) = inner.get(Kind::Pdb, key).cloned() else {
        return;
    };
    let pods = api::BudgetPods::read(inner, &old.idx);
    if let Some(p) = next_pdb(&old, &pods) {
        inner.put_prepared(p);
    }
}

/// A budget's next version, its status recomputed from `pods` as read with it, made ready for
/// the store; `None` when the status stays as it is. Pure: the budget is parsed here, outside
/// the store lock where the world can.
fn next_pdb(old: &Entry, pods: &api::BudgetPods) -> Option<Prepared> {
    let mut v = old.value();
    let (b, disrupted) = pods.numbers(&v, Utc::now());
    let now = timestamp(Utc::now());
    // Only the status changes here: it alone is kept to compare (a clone of the whole budget
    // was a tenth of this refresh, perf).
    let before = v["status"].clone();
    v["status"]["observedGeneration"] = v["metadata"]["generation"].clone();
    v["status"]["expectedPods"] = json!(b.expected);
    v["status"]["desiredHealthy"] = json!(b.desired);
    v["status"]["currentHealthy"] = json!(b.healthy);
    v["status"]["disruptionsAllowed"] = json!(b.allowed);
    let dp: serde_json::Map<String, Value> = v["status"]["disruptedPods"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| disrupted.contains(*k))
                .map(|(k, t)| (k.clone(), t.clone()))
                .collect()
        })
        .unwrap_or_default();
    if dp.is_empty() {
        if let Some(s) = v["status"].as_object_mut() {
            s.remove("disruptedPods");
        }
    } else {
        v["status"]["disruptedPods"] = Value::Object(dp);
    }
    api::set_condition(&mut v, b.allowed > 0, &now);
    (v["status"] != before).then(|| Prepared::with_status(Kind::Pdb, old, v["status"].take()))
}

/// The replica counts of a workload controller that differ from what it says, counted from
/// its pods' indexes (a StatefulSet's or a ReplicaSet's, as their controllers count them);
/// `None` when none differs. Read under the store lock; nothing is parsed.
///
/// The StatefulSet controller counts a terminating pod in `replicas` (it keeps the pod's
/// identity until it is gone); the ReplicaSet controller counts only active pods. A Ready pod
/// is available at once (no minReadySeconds here).
fn replicas_due(inner: &Inner, kind: Kind, key: &str) -> Option<(Entry, Counts)> {
    let old = inner.get(kind, key)?;
    let (mut replicas, mut ready) = (0i64, 0i64);
    for p in inner.pods_owned_by(&old.idx.uid) {
        if kind == Kind::StatefulSet || !p.idx.deleting {
            replicas += 1;
            ready += i64::from(p.idx.ready && !p.idx.deleting);
        }
    }
    let workload = old.idx.workload.as_deref()?;
    let same_as_replicas: &[&'static str] = if kind == Kind::StatefulSet {
        &["currentReplicas", "updatedReplicas"]
    } else {
        &["fullyLabeledReplicas"]
    };
    let mut counts: Counts = vec![
        ("observedGeneration", workload.generation),
        ("replicas", Some(replicas)),
        ("readyReplicas", Some(ready)),
        ("availableReplicas", Some(ready)),
    ];
    counts.extend(same_as_replicas.iter().map(|f| (*f, Some(replicas))));
    // Most pod changes leave the counts as they are: known from the index, without parsing.
    let same = counts
        .iter()
        .all(|(f, n)| workload.counts.get(f).copied() == *n);
    (!same).then(|| (old.clone(), counts))
}

/// Status counts of a workload controller, by field.
type Counts = Vec<(&'static str, Option<i64>)>;

/// A workload controller's next version with `counts` in its status (written without
/// comparing the whole: a count differs), made ready for the store. Pure: only its status is
/// parsed (the whole, pod template included, was most of a refresh).
fn next_replicas(kind: Kind, old: &Entry, counts: &Counts) -> Prepared {
    let mut status = old.status();
    for (f, n) in counts {
        status[*f] = json!(n);
    }
    Prepared::with_status(kind, old, status)
}

/// Recomputes a StatefulSet's or a ReplicaSet's replica counts from its pods; writes only on
/// change.
fn refresh_replicas(inner: &mut Inner, kind: Kind, key: &str) {
    if let Some((old, counts)) = replicas_due(inner, kind, key) {
        inner.put_prepared(next_replicas(kind, &old, &counts));
    }
}

/// Writes the world's refreshes made ready outside the store lock, each where the object is
/// still at the revision it was made from (`rv`); where it was written since (an eviction
/// wrote a budget, a scale a ReplicaSet), `redo` refreshes it again under the lock from what
/// the store says now. The world's controllers work from a cache as the real ones do: what
/// changed in between comes to the world as an event and is refreshed after.
fn commit_ready(
    inner: &mut Inner,
    ready: Vec<(Kind, u64, Prepared)>,
    mut redo: impl FnMut(&mut Inner, Kind, &str),
) {
    for (kind, rv, p) in ready {
        let key = p.key();
        if inner.still_at(kind, &key, rv) {
            inner.put_prepared(p);
        } else {
            redo(inner, kind, &key);
        }
    }
}

/// The scheduler's view of the nodes: pods bound to each, and the nodes it may bind to
/// (Ready, schedulable, not tainted not-ready, not down in a reboot) ordered by (pods, name), so
/// that the least loaded fitting node is the first one, found without looking at every Node for
/// every pod (kube-scheduler's cache; a look at every Node per pod was most of a 5,000-node
/// world's scheduling time).
#[derive(Default)]
struct Loads {
    pods: HashMap<String, usize>,
    fitting: HashSet<String>,
    order: BTreeSet<(usize, String)>,
}

/// kube-scheduler's limit of pods per node (the world's Nodes allow 110).
const MAX_PODS: usize = 110;

impl Loads {
    /// Pods bound to `node`.
    fn pods(&self, node: &str) -> usize {
        self.pods.get(node).copied().unwrap_or(0)
    }

    /// One pod more (`true`) or fewer on `node`.
    fn bound(&mut self, node: &str, more: bool) {
        let before = self.pods(node);
        let after = if more {
            before + 1
        } else {
            before.saturating_sub(1)
        };
        self.pods.insert(node.to_string(), after);
        if self.fitting.contains(node) {
            self.order.remove(&(before, node.to_string()));
            self.order.insert((after, node.to_string()));
        }
    }

    /// Whether the scheduler may bind pods to `node` now.
    fn set_fits(&mut self, node: &str, fits: bool) {
        let at = (self.pods(node), node.to_string());
        if fits && self.fitting.insert(node.to_string()) {
            self.order.insert(at);
        } else if !fits && self.fitting.remove(node) {
            self.order.remove(&at);
        }
    }

    /// The least loaded fitting node with room that `accepts`, the first by name among equals.
    fn best(&self, mut accepts: impl FnMut(&str) -> bool) -> Option<&str> {
        self.order
            .iter()
            .take_while(|(pods, _)| *pods < MAX_PODS)
            .map(|(_, n)| n.as_str())
            .find(|n| accepts(n))
    }

    fn clear(&mut self) {
        *self = Loads::default();
    }
}

/// Whether the scheduler binds pods to a node: Ready, schedulable, and without the not-ready
/// NoSchedule taint, as the scheduler's taint filter does (the world's pods tolerate only the
/// NoExecute one).
fn takes_pods(n: &Index) -> bool {
    n.ready && !n.unschedulable && !n.not_ready_taint
}

struct Runner {
    shared: Arc<Shared>,
    /// Hosts gone for good: their kubelet writes nothing.
    gone: Arc<std::sync::Mutex<BTreeSet<String>>>,
    sc: Scenario,
    rng: SmallRng,
    tx: mpsc::UnboundedSender<Msg>,
    loads: Loads,
    /// Pods not bound to a node and not deleting: the scheduler's queue, so that a pod's
    /// departure does not scan every pod of the world for something to schedule.
    unscheduled: BTreeSet<String>,
    timers: BTreeSet<(String, String)>,
    /// Namespaces whose every budget is recomputed at the next flush (start, budget changes).
    dirty_ns: BTreeSet<String>,
    /// Labels of pods changed since the last flush, per namespace: only the budgets selecting
    /// one of them are recomputed, as the disruption controller enqueues the budgets of a pod.
    dirty_pods: HashMap<String, Vec<BTreeMap<String, String>>>,
    /// Budgets (`namespace/name`) created or changed since the last flush.
    dirty_pdbs: BTreeSet<String>,
    /// StatefulSets (`namespace/name`) whose pods changed: status to recompute.
    dirty_ss: BTreeSet<String>,
    dirty_rs: BTreeSet<String>,
    rebooting: BTreeSet<String>,
    /// The boot ID of each host that rebooted, as its kubelet reports it: a Node registered
    /// again (created after a deletion) gets it, and the readiness of its host, from its
    /// kubelet, not from whoever created the object.
    host_boot: HashMap<String, String>,
    /// Nodes Ready again whose NoExecute not-ready taint waits for the next monitor pass.
    untaint_pending: BTreeSet<String>,
    /// When each host rebooted by the world was due up again: its monitor pass is timed from
    /// that instant, not from when the runner got to the Node's change.
    up_at: HashMap<String, Instant>,
    /// The pods (keys) of each claim (`namespace/name`) that mounts it.
    claim_users: HashMap<String, BTreeSet<String>>,
    /// The VolumeAttachments (names) of each PersistentVolume.
    va_by_pv: HashMap<String, BTreeSet<String>>,
    /// PersistentVolumes whose attachments the attach/detach controller looks at next flush.
    dirty_pvs: BTreeSet<String>,
    /// Claims (`namespace/name`) the PV controller and the pvc-protection controller look at
    /// next flush.
    dirty_claims: BTreeSet<String>,
    /// PersistentVolumes the PV controller and the pv-protection controller look at next flush.
    dirty_volumes: BTreeSet<String>,
    /// A volume may have become available: the unbound claims that name none look for one.
    unbound_claims_look: bool,
    /// Hosts down in a reboot (NotReady until up again): their kubelet writes nothing, and no
    /// detach of their volumes progresses.
    down: HashSet<String>,
    /// Times each host went down: a detach begun before is done again once it is up.
    downs: HashMap<String, u64>,
    /// Pods past their start delay that wait for their volumes (key, uid).
    awaiting: BTreeMap<String, String>,
    /// Pods (uid) that got the Multi-Attach Event: one each, as the controller reports it once.
    multi_attach_reported: HashSet<String>,
}

/// Starts the world task; returns its handle.
pub fn start(
    shared: Arc<Shared>,
    sc: Scenario,
    rng: SmallRng,
) -> (World, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let events = shared.store.subscribe_all();
    let world = World {
        shared: shared.clone(),
        tx: tx.clone(),
        gone: Arc::default(),
    };
    let mut r = Runner {
        shared,
        gone: world.gone.clone(),
        sc,
        rng,
        tx,
        loads: Loads::default(),
        unscheduled: BTreeSet::new(),
        timers: BTreeSet::new(),
        dirty_ns: BTreeSet::new(),
        dirty_pods: HashMap::new(),
        dirty_pdbs: BTreeSet::new(),
        dirty_ss: BTreeSet::new(),
        dirty_rs: BTreeSet::new(),
        rebooting: BTreeSet::new(),
        host_boot: HashMap::new(),
        untaint_pending: BTreeSet::new(),
        up_at: HashMap::new(),
        claim_users: HashMap::new(),
        va_by_pv: HashMap::new(),
        dirty_pvs: BTreeSet::new(),
        dirty_claims: BTreeSet::new(),
        dirty_volumes: BTreeSet::new(),
        unbound_claims_look: false,
        down: HashSet::new(),
        downs: HashMap::new(),
        awaiting: BTreeMap::new(),
        multi_attach_reported: HashSet::new(),
    };
    let task = tokio::spawn(async move { r.run(events, rx).await });
    (world, task)
}

impl Runner {
    async fn run(
        &mut self,
        mut events: broadcast::Receiver<Arc<StoreEvent>>,
        mut rx: mpsc::UnboundedReceiver<Msg>,
    ) {
        self.resync();
        loop {
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok(ev) => {
                        self.on_event(&ev);
                        while let Ok(ev) = events.try_recv() {
                            self.on_event(&ev);
                        }
                        self.flush();
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => self.resync(),
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                msg = rx.recv() => match msg {
                    Some(m) => { self.on_msg(m); self.flush(); }
                    None => return,
                },
            }
        }
    }

    /// Rebuilds derived state from the store (start, or after missing events).
    fn resync(&mut self) {
        let inner = self.shared.store.lock();
        self.loads.clear();
        self.unscheduled.clear();
        for n in inner.range(Kind::Node, None, None) {
            let fits = takes_pods(&n.idx) && !self.rebooting.contains(&n.idx.name);
            self.loads.set_fits(&n.idx.name, fits);
            self.shared.invariants.node_out(&n.idx, false);
        }
        for m in inner.range(Kind::NodeMaintenance, None, None) {
            let active = m.idx.phase.as_deref() != Some("Succeeded");
            let node = m.idx.node_name.as_deref();
            self.shared
                .invariants
                .node_maintenance(&m.idx.name, node, active);
        }
        let pods: Vec<Arc<Index>> = inner
            .range(Kind::Pod, None, None)
            .map(|e| e.idx.clone())
            .collect();
        let nss: Vec<String> = inner
            .range(Kind::Namespace, None, None)
            .map(|e| e.idx.name.clone())
            .collect();
        self.claim_users.clear();
        self.va_by_pv.clear();
        for p in &pods {
            for c in &p.claims {
                self.claim_users
                    .entry(key_of(&p.namespace, c))
                    .or_default()
                    .insert(p.key());
            }
        }
        for va in inner.range(Kind::VolumeAttachment, None, None) {
            if let Some(pv) = &va.idx.volume {
                self.va_by_pv
                    .entry(pv.clone())
                    .or_default()
                    .insert(va.idx.name.clone());
            }
        }
        self.dirty_pvs.extend(
            inner
                .range(Kind::PersistentVolume, None, None)
                .map(|e| e.idx.name.clone()),
        );
        self.dirty_volumes.extend(
            inner
                .range(Kind::PersistentVolume, None, None)
                .map(|e| e.idx.name.clone()),
        );
        self.dirty_claims.extend(
            inner
                .range(Kind::PersistentVolumeClaim, None, None)
                .map(|e| e.idx.key()),
        );
        drop(inner);
        for p in &pods {
            if let Some(n) = &p.node_name {
                self.loads.bound(n, true);
            } else if !p.deleting {
                self.unscheduled.insert(p.key());
            }
            self.pod_changed(p);
        }
        self.dirty_ns.extend(nss);
        self.flush();
    }

    fn on_event(&mut self, ev: &StoreEvent) {
        let idx = &ev.entry.idx;
        match ev.kind {
            Kind::Pod => {
                let before = ev.prev.as_ref().and_then(|p| p.node_name.clone());
                let after = if ev.typ == EventType::Deleted {
                    None
                } else {
                    idx.node_name.clone()
                };
                if ev.typ != EventType::Deleted && after.is_none() && !idx.deleting {
                    self.unscheduled.insert(idx.key());
                } else {
                    self.unscheduled.remove(&idx.key());
                }
                if before != after {
                    if let Some(b) = before {
                        self.loads.bound(&b, false);
                    }
                    if let Some(a) = after {
                        self.loads.bound(&a, true);
                    }
                }
                let changed = self.dirty_pods.entry(idx.namespace.clone()).or_default();
                if let Some(p) = ev.prev.as_ref().filter(|p| p.labels != idx.labels) {
                    changed.push(p.labels.clone());
                }
                changed.push(idx.labels.clone());
                if let Some((okind, oname, _)) = &idx.owner {
                    match okind.as_str() {
                        "StatefulSet" => {
                            self.dirty_ss.insert(key_of(&idx.namespace, oname));
                        }
                        "ReplicaSet" => {
                            self.dirty_rs.insert(key_of(&idx.namespace, oname));
                        }
                        _ => {}
                    }
                }
                let had_claims = ev.prev.as_ref().is_some_and(|p| !p.claims.is_empty());
                if had_claims || !idx.claims.is_empty() {
                    self.pod_volumes(ev);
                }
                if ev.typ == EventType::Deleted {
                    self.pod_gone(idx);
                    self.schedule_pending();
                } else {
                    self.pod_changed(idx);
                }
            }
            Kind::Node => {
                if ev.typ == EventType::Added {
                    self.kubelet_registers(&idx.name);
                    // A kubelet registering reports in use only the volumes of the pods it
                    // runs, whatever the creator wrote (a Node deleted and created again with
                    // its old status listed its drained pods' volumes forever), and the
                    // detaches its Node's deletion interrupted go on.
                    self.volumes_back(&idx.name);
                }
                if ev.typ != EventType::Deleted {
                    if ev.prev.as_ref().is_some_and(|p| p.unschedulable)
                        && !idx.unschedulable
                        && idx.not_ready_taint
                    {
                        self.shared.invariants.uncordoned_while_not_ready(&idx.name);
                    }
                    self.lifecycle_taints(&idx.name);
                }
                let unavailable = ev.typ != EventType::Deleted && (idx.unschedulable || !idx.ready);
                if ev.typ == EventType::Deleted {
                    self.shared.invariants.node_gone(&idx.name);
                } else {
                    self.shared.invariants.node_availability(
                        &idx.name,
                        &idx.labels,
                        unavailable,
                        idx.cordoned_by_rollboot,
                    );
                }
                self.shared
                    .invariants
                    .node_out(idx, ev.typ == EventType::Deleted);
                let fits = ev.typ != EventType::Deleted
                    && takes_pods(idx)
                    && !self.rebooting.contains(&idx.name);
                self.loads.set_fits(&idx.name, fits);
                // Pods wait for a node the scheduler takes: Ready, schedulable, not tainted
                // not-ready (the taint can outlast the other two by seconds).
                let was_ok = ev.prev.as_ref().is_some_and(|p| takes_pods(p));
                if ev.typ != EventType::Deleted && takes_pods(idx) && !was_ok {
                    self.schedule_pending();
                    self.start_pending_on(&idx.name);
                }
            }
            // Only that budget: its own status writes come back here, and recomputing the whole
            // namespace on each of them made every write cost one pass over all its budgets.
            // The second look finds nothing to change, so it does not loop.
            Kind::Pdb if ev.typ != EventType::Deleted => {
                self.dirty_pdbs.insert(idx.key());
            }
            Kind::ReplicaSet if ev.typ != EventType::Deleted => {
                self.reconcile_rs(&idx.namespace, &idx.name)
            }
            Kind::StatefulSet if ev.typ != EventType::Deleted => {
                self.reconcile_ss(&idx.namespace, &idx.name)
            }
            Kind::PersistentVolumeClaim => {
                if ev.typ != EventType::Deleted {
                    let mut inner = self.shared.store.lock();
                    provision_claim(&mut inner, &idx.key(), &mut self.rng);
                }
                self.dirty_pvs.extend(idx.volume.clone());
                self.dirty_claims.insert(idx.key());
                // Its volume sees it bound, changed or gone.
                self.dirty_volumes.extend(idx.volume.clone());
                let before = ev.prev.as_ref().and_then(|p| p.volume.clone());
                self.dirty_volumes.extend(before);
            }
            Kind::PersistentVolume => {
                self.dirty_pvs.insert(idx.name.clone());
                self.dirty_volumes.insert(idx.name.clone());
                // The claim it is (pre-)bound to may bind now, or lose it (its last state when
                // it is gone); a volume bound to none may be the one an unbound claim waits for.
                match pv_controller::claim_ref_key(&ev.entry.value()) {
                    Some(k) => {
                        self.dirty_claims.insert(k);
                    }
                    None => self.unbound_claims_look = ev.typ != EventType::Deleted,
                }
            }
            Kind::NodeMaintenance => {
                let active =
                    ev.typ != EventType::Deleted && idx.phase.as_deref() != Some("Succeeded");
                self.shared.invariants.node_maintenance(
                    &idx.name,
                    idx.node_name.as_deref(),
                    active,
                );
            }
            Kind::Lease => self.shared.invariants.lease(&idx.namespace, &idx.name, || {
                (ev.typ != EventType::Deleted)
                    .then(|| serde_json::from_slice(&ev.entry.bytes).ok())
                    .flatten()
            }),
            Kind::VolumeAttachment => {
                let before = ev.prev.as_ref().and_then(|p| p.volume.clone());
                if let Some(pv) = before {
                    if let Some(set) = self.va_by_pv.get_mut(&pv) {
                        set.remove(&idx.name);
                        if set.is_empty() {
                            self.va_by_pv.remove(&pv);
                        }
                    }
                    self.dirty_pvs.insert(pv);
                }
                if let Some(pv) = &idx.volume {
                    if ev.typ != EventType::Deleted {
                        self.va_by_pv
                            .entry(pv.clone())
                            .or_default()
                            .insert(idx.name.clone());
                    }
                    self.dirty_pvs.insert(pv.clone());
                }
            }
            _ => {}
        }
    }

    /// A pod with claims changed: who mounts each claim, and its volumes to look at.
    fn pod_volumes(&mut self, ev: &StoreEvent) {
        let idx = &ev.entry.idx;
        let key = idx.key();
        if let Some(p) = &ev.prev {
            for c in &p.claims {
                let ck = key_of(&p.namespace, c);
                if let Some(set) = self.claim_users.get_mut(&ck) {
                    set.remove(&key);
                    if set.is_empty() {
                        self.claim_users.remove(&ck);
                    }
                }
            }
        }
        if ev.typ != EventType::Deleted {
            for c in &idx.claims {
                self.claim_users
                    .entry(key_of(&idx.namespace, c))
                    .or_default()
                    .insert(key.clone());
            }
        }
        // Whether a pod on a node mounts a claim, the pvc-protection controller's question,
        // changes only with the pod's coming, going, node or claims (not with its status).
        let placed = ev.typ != EventType::Modified
            || ev
                .prev
                .as_ref()
                .is_none_or(|p| p.node_name != idx.node_name || p.claims != idx.claims);
        let inner = self.shared.store.lock();
        let claims = ev.prev.iter().flat_map(|p| p.claims.iter());
        for c in claims.chain(idx.claims.iter()) {
            if let Some(pv) = claim_pv(&inner, &idx.namespace, c) {
                self.dirty_pvs.insert(pv);
            }
            if placed {
                self.dirty_claims.insert(key_of(&idx.namespace, c));
            }
        }
    }

    /// The attach/detach controller and the CSI attacher for one PersistentVolume: attach it
    /// to the nodes of the pods that mount it, report a Multi-Attach error for a pod whose
    /// exclusive volume is attached elsewhere, detach it from nodes no pod wants it on once it
    /// is unmounted there (not while the node is down).
    fn reconcile_pv(&mut self, pv_name: &str) {
        let shared = self.shared.clone();
        let mut inner = shared.store.lock();
        let Some(pv) = inner.get(Kind::PersistentVolume, pv_name).cloned() else {
            return;
        };
        let Some(info) = PvInfo::of(&pv.value()) else {
            return;
        };
        if !volumes::attach_required(&inner, &info.driver) {
            return;
        }
        let unique = info.unique();
        // The nodes that want it: those of its claim's pods that are bound and not finished.
        let mut wanted: BTreeMap<String, Vec<Arc<Index>>> = BTreeMap::new();
        if let Some(claim) = &info.claim {
            for k in self.claim_users.get(claim).into_iter().flatten() {
                let Some(p) = inner.get(Kind::Pod, k) else {
                    continue;
                };
                let finished = matches!(p.idx.phase.as_deref(), Some("Succeeded" | "Failed"));
                if let (Some(n), false) = (&p.idx.node_name, finished) {
                    wanted.entry(n.clone()).or_default().push(p.idx.clone());
                }
            }
        }
        let vas: Vec<Arc<Index>> = self
            .va_by_pv
            .get(pv_name)
            .into_iter()
            .flatten()
            .filter_map(|n| inner.get(Kind::VolumeAttachment, n))
            .map(|e| e.idx.clone())
            .collect();
        let now = timestamp(Utc::now());
        let mut holders: Vec<String> = Vec::new();
        for va in &vas {
            let Some(node) = va.node_name.clone() else {
                continue;
            };
            holders.push(node.clone());
            if wanted.contains_key(&node) {
                continue;
            }
            if va.deleting {
                self.arm_detach(&va.name, &node);
                continue;
            }
            if self.down.contains(&node) {
                continue;
            }
            if let Some(n) = inner.get(Kind::Node, &node) {
                let mut nv = n.value();
                // The kubelet unmounts a volume no pod of its node uses any more (a pod
                // deleted at once, a node back from a reboot).
                if volumes::set_in_use(&mut nv, &unique, false) {
                    inner.put(Kind::Node, nv.clone());
                }
                // The controller marks it detached in the Node before it detaches.
                if volumes::set_attached(&mut nv, &unique, false) {
                    inner.put(Kind::Node, nv);
                }
            }
            let Some(e) = inner.get(Kind::VolumeAttachment, &va.name) else {
                continue;
            };
            let mut v = e.value();
            v["metadata"]["deletionTimestamp"] = json!(now);
            v["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            if v["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
            {
                inner.put(Kind::VolumeAttachment, v);
                self.arm_detach(&va.name, &node);
            } else {
                inner.remove(Kind::VolumeAttachment, &va.name, v);
            }
        }
        for (node, pods) in &wanted {
            if holders.contains(node) {
                continue;
            }
            if info.exclusive && !holders.is_empty() {
                // The controller reports a Multi-Attach error only while the volume is attached
                // elsewhere and not being detached there (seen on kube-controller-manager
                // v1.36: a replacement that waits for a detach under way gets no Event); the
                // wait is measured either way.
                let detaching = vas.iter().all(|va| va.deleting);
                for p in pods {
                    self.shared.invariants.multi_attach_started(&p.uid);
                    if detaching || !self.multi_attach_reported.insert(p.uid.clone()) {
                        continue;
                    }
                    let elsewhere: Vec<&str> = wanted
                        .iter()
                        .filter(|(n, _)| *n != node)
                        .flat_map(|(_, ps)| ps.iter())
                        .filter(|o| o.namespace == p.namespace)
                        .map(|o| o.name.as_str())
                        .collect();
                    let others = wanted
                        .iter()
                        .filter(|(n, _)| *n != node)
                        .flat_map(|(_, ps)| ps.iter())
                        .filter(|o| o.namespace != p.namespace)
                        .count();
                    let suffix = match (elsewhere.is_empty(), others) {
                        (true, 0) => "Volume is already exclusively attached to one node and can't be attached to another".to_string(),
                        (true, n) => format!("Volume is already used by {n} pod(s) in different namespaces"),
                        (false, 0) => format!("Volume is already used by pod(s) {}", elsewhere.join(", ")),
                        (false, n) => format!("Volume is already used by pod(s) {} and {n} pod(s) in different namespaces", elsewhere.join(", ")),
                    };
                    let message = format!("Multi-Attach error for volume \"{pv_name}\" {suffix}");
                    adc_event(&mut inner, p, volumes::FAILED_ATTACH, &message);
                }
                continue;
            }
            let v = volumes::attachment_object(&info, pv_name, node, &uid(&mut self.rng), &now);
            let Ok(e) = api::insert(&mut inner, Kind::VolumeAttachment, v) else {
                continue;
            };
            holders.push(node.clone());
            // The external attacher puts its finalizer on before it attaches.
            let mut v = e.value();
            v["metadata"]["finalizers"] = json!([volumes::attacher_finalizer(&info.driver)]);
            let e = inner.put(Kind::VolumeAttachment, v);
            let key = (
                format!("va/{}", e.idx.name),
                format!("attach {}", e.idx.uid),
            );
            if self.timers.insert(key) {
                self.later(
                    self.sc.scaled(self.sc.attach_seconds),
                    Msg::Attach(e.idx.name.clone(), e.idx.uid.clone()),
                );
            }
        }
    }

    /// Starts the CSI attacher's detach of a VolumeAttachment being deleted, unless under way.
    fn arm_detach(&mut self, name: &str, node: &str) {
        if self.timers.insert((format!("va/{name}"), "detach".into())) {
            let downs = self.downs.get(node).copied().unwrap_or(0);
            self.later(
                self.sc.scaled(self.sc.detach_seconds),
                Msg::Detach(name.to_string(), downs),
            );
        }
    }

    /// A host back from a reboot: its kubelet reports in use only the volumes of the pods it
    /// runs, and the detaches its going down interrupted begin again.
    fn volumes_back(&mut self, node: &str) {
        let mut inner = self.shared.store.lock();
        let vas: Vec<Arc<Index>> = inner
            .range(Kind::VolumeAttachment, None, None)
            .filter(|e| e.idx.node_name.as_deref() == Some(node))
            .map(|e| e.idx.clone())
            .collect();
        let Some(n) = inner.get(Kind::Node, node) else {
            return;
        };
        let mut v = n.value();
        let used: HashSet<String> = inner
            .pods_on(node)
            .flat_map(|p| {
                p.idx
                    .claims
                    .iter()
                    .filter_map(|c| claim_pv(&inner, &p.idx.namespace, c))
                    .collect::<Vec<_>>()
            })
            .filter_map(|pv| pv_unique(&inner, &pv))
            .collect();
        let mut changed = false;
        for u in volumes::in_use(&v) {
            if !used.contains(&u) {
                changed |= volumes::set_in_use(&mut v, &u, false);
            }
        }
        // The controller's status lists what it knows attached: a volume whose
        // VolumeAttachment to this node is gone is not (a Node created again with an old
        // status listed one detached meanwhile).
        let held: HashSet<String> = vas
            .iter()
            .filter_map(|va| va.volume.as_deref())
            .filter_map(|pv| pv_unique(&inner, pv))
            .collect();
        for u in volumes::attached_names(&v) {
            if !held.contains(&u) {
                changed |= volumes::set_attached(&mut v, &u, false);
            }
        }
        if changed {
            inner.put(Kind::Node, v);
        }
        drop(inner);
        for va in vas {
            if va.deleting {
                self.timers
                    .remove(&(format!("va/{}", va.name), "detach".into()));
                self.arm_detach(&va.name, node);
            }
            self.dirty_pvs.extend(va.volume.clone());
        }
    }

    fn pod_changed(&mut self, p: &Index) {
        let key = p.key();
        if p.deleting {
            // Timers are per pod, not per name: a StatefulSet's pod made again under the name
            // of one whose timer is still armed gets its own.
            if self
                .timers
                .insert((key.clone(), format!("remove {}", p.uid)))
            {
                let grace = p.deletion_grace.unwrap_or(0);
                let exit = (grace as f64).min(self.sc.pod_exit_seconds.unwrap_or(f64::MAX));
                self.later(self.sc.scaled(exit), Msg::Remove(key, p.uid.clone()));
            }
            return;
        }
        match (&p.node_name, p.phase.as_deref()) {
            (None, _) => self.schedule(&key),
            (Some(node), Some("Pending")) => {
                let node_ready = self
                    .shared
                    .store
                    .get(Kind::Node, node)
                    .is_some_and(|n| n.idx.ready);
                if node_ready
                    && self
                        .timers
                        .insert((key.clone(), format!("start {}", p.uid)))
                {
                    self.later(
                        self.sc.scaled(self.sc.start_delay),
                        Msg::Start(key, p.uid.clone()),
                    );
                }
            }
            _ => {}
        }
    }

    /// kube-controller-manager's node-lifecycle controller, for the taints rollboot reads, as a
    /// real one was seen doing (each a write of its own, so each moves the resourceVersion):
    /// `unschedulable:NoSchedule` as soon as a node is cordoned and off as soon as it is
    /// uncordoned; `not-ready:NoSchedule` then `not-ready:NoExecute` as soon as Ready is not
    /// True; when Ready again, NoSchedule off at once and NoExecute off at the next monitor
    /// pass (`taintRemovalDelay`). It does not evict pods for the NoExecute taint.
    fn lifecycle_taints(&mut self, node: &str) {
        let mut inner = self.shared.store.lock();
        let Some(n) = inner.get(Kind::Node, node).cloned() else {
            return;
        };
        let mut v = n.value();
        let taints: Vec<Value> = v["spec"]["taints"].as_array().cloned().unwrap_or_default();
        let has = |key: &str, effect: &str| {
            taints
                .iter()
                .any(|t| t["key"] == key && t["effect"] == effect)
        };
        let add = |key: &'static str, effect: &'static str| TaintChange::Add(key, effect);
        // One change per write, in the order the real controller makes them.
        let next: Option<TaintChange> =
            if n.idx.unschedulable && !has(TAINT_UNSCHEDULABLE, "NoSchedule") {
                Some(add(TAINT_UNSCHEDULABLE, "NoSchedule"))
            } else if !n.idx.unschedulable && has(TAINT_UNSCHEDULABLE, "NoSchedule") {
                Some(TaintChange::Remove(TAINT_UNSCHEDULABLE, None))
            } else if !n.idx.ready && !has(TAINT_NOT_READY, "NoSchedule") {
                self.untaint_pending.remove(node);
                self.up_at.remove(node);
                Some(add(TAINT_NOT_READY, "NoSchedule"))
            } else if !n.idx.ready && !has(TAINT_NOT_READY, "NoExecute") {
                Some(add(TAINT_NOT_READY, "NoExecute"))
            } else if n.idx.ready && has(TAINT_NOT_READY, "NoSchedule") {
                Some(TaintChange::Remove(TAINT_NOT_READY, Some("NoSchedule")))
            } else {
                None
            };
        let monitor_pass = next.is_none()
            && n.idx.ready
            && has(TAINT_NOT_READY, "NoExecute")
            && self.untaint_pending.insert(node.to_string());
        if let Some(change) = next {
            change.apply(&mut v);
            inner.put(Kind::Node, v);
        }
        drop(inner);
        if monitor_pass {
            let ready = self.up_at.remove(node).unwrap_or_else(Instant::now);
            self.later_at(
                ready + self.sc.scaled(self.sc.taint_removal_delay),
                Msg::Untaint(node.to_string()),
            );
        }
    }

    fn host_gone(&self, node: &str) -> bool {
        self.gone
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(node)
    }

    fn later(&self, d: std::time::Duration, msg: Msg) {
        self.later_at(Instant::now() + d, msg);
    }

    /// Sends `msg` at `due`. The phases of one change (a reboot's down, up and monitor pass)
    /// are timed from the instant it began, so the runner's delays in between and each
    /// timer's rounding up to the next millisecond do not add up (they made a 1,000-node
    /// rollout's reboot 9 ms longer than modelled).
    fn later_at(&self, due: Instant, msg: Msg) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            let _ = tx.send(msg);
        });
    }

    fn pod_gone(&mut self, p: &Index) {
        let Some((okind, oname, _)) = &p.owner else {
            return;
        };
        match okind.as_str() {
            "ReplicaSet" => self.reconcile_rs(&p.namespace, oname),
            "StatefulSet" => self.reconcile_ss(&p.namespace, oname),
            "DaemonSet" => {
                let Some(node) = p.node_name.clone() else {
                    return;
                };
                if self.shared.store.get(Kind::Node, &node).is_none() {
                    return;
                }
                let Some(ds) = self
                    .shared
                    .store
                    .get(Kind::DaemonSet, &key_of(&p.namespace, oname))
                else {
                    return;
                };
                let dsv = ds.value();
                let mut inner = self.shared.store.lock();
                let spec = PodSpec {
                    name: pod_name(&inner, &p.namespace, oname, &mut self.rng),
                    namespace: &p.namespace,
                    labels: dsv["spec"]["template"]["metadata"]["labels"].clone(),
                    owner: Some(("DaemonSet", oname, &ds.idx.uid)),
                    node: Some(&node),
                    running: false,
                    grace: template_grace(&dsv).unwrap_or(self.sc.grace_seconds),
                    empty_dir: false,
                    mirror: false,
                    daemon: true,
                };
                let mut v = pod_object(&spec, &mut self.rng);
                template_priority(&mut v, &dsv);
                let _ = api::insert(&mut inner, Kind::Pod, v);
            }
            _ => {}
        }
    }

    fn reconcile_rs(&mut self, ns: &str, name: &str) {
        let Some(rs) = self.shared.store.get(Kind::ReplicaSet, &key_of(ns, name)) else {
            return;
        };
        let want = wanted_pods(&rs.idx) as usize;
        let have = {
            let inner = self.shared.store.lock();
            inner
                .pods_owned_by(&rs.idx.uid)
                .filter(|e| !e.idx.deleting)
                .count()
        };
        if have >= want {
            return;
        }
        let rsv = rs.value();
        let empty_dir = !rsv["spec"]["template"]["spec"]["volumes"].is_null();
        let grace = template_grace(&rsv).unwrap_or(self.sc.grace_seconds);
        let mut made = 0;
        while have + made < want {
            let spec = PodSpec {
                name: generated_name(name, &mut self.rng),
                namespace: ns,
                labels: rsv["spec"]["template"]["metadata"]["labels"].clone(),
                owner: Some(("ReplicaSet", name, &rs.idx.uid)),
                node: None,
                running: false,
                grace,
                empty_dir,
                mirror: false,
                daemon: false,
            };
            // Built, serialized and indexed outside the store lock (under it, they were most
            // of the lock's hold in a ReplicaSet's reconcile); the generated name is checked
            // under it, and the pod made again with another in the rare case it was taken.
            let mut v = pod_object(&spec, &mut self.rng);
            template_priority(&mut v, &rsv);
            let p = Prepared::new(Kind::Pod, v);
            let mut inner = self.shared.store.lock();
            if inner.get(Kind::Pod, &p.key()).is_none() {
                let _ = api::insert_prepared(&mut inner, p);
                made += 1;
            }
        }
    }

    /// Creates the missing pods `NAME-0` .. `NAME-(replicas-1)` of a StatefulSet (a pod gone
    /// comes back under the same name; scaling down deletes nothing, unlike the real controller).
    fn reconcile_ss(&mut self, ns: &str, name: &str) {
        let Some(ss) = self.shared.store.get(Kind::StatefulSet, &key_of(ns, name)) else {
            return;
        };
        let ssv = ss.value();
        let want = wanted_pods(&ss.idx);
        let mut inner = self.shared.store.lock();
        let templates = ssv["spec"]["volumeClaimTemplates"].clone();
        for i in 0..want {
            let pod = format!("{name}-{i}");
            if inner.get(Kind::Pod, &key_of(ns, &pod)).is_some() {
                continue;
            }
            // Its claims first, kept from an earlier pod of that name when they exist.
            for t in templates.as_array().into_iter().flatten() {
                let now = timestamp(Utc::now());
                let claim = volumes::claim_from_template(t, &ssv, &pod, &uid(&mut self.rng), &now);
                let ckey = key_of(ns, claim["metadata"]["name"].as_str().unwrap_or(""));
                if inner.get(Kind::PersistentVolumeClaim, &ckey).is_none()
                    && api::insert(&mut inner, Kind::PersistentVolumeClaim, claim).is_ok()
                {
                    provision_claim(&mut inner, &ckey, &mut self.rng);
                }
            }
            let spec = PodSpec {
                name: pod,
                namespace: ns,
                labels: ssv["spec"]["template"]["metadata"]["labels"].clone(),
                owner: Some(("StatefulSet", name, &ss.idx.uid)),
                node: None,
                running: false,
                grace: template_grace(&ssv).unwrap_or(self.sc.grace_seconds),
                empty_dir: false,
                mirror: false,
                daemon: false,
            };
            let mut v = pod_object(&spec, &mut self.rng);
            volumes::add_claim_volumes(&mut v, &templates, &spec.name);
            template_priority(&mut v, &ssv);
            let _ = api::insert(&mut inner, Kind::Pod, v);
        }
    }

    /// Binds an unscheduled pod to the Ready, schedulable node with the fewest pods and room.
    fn schedule(&mut self, key: &str) {
        let mut inner = self.shared.store.lock();
        let Some(pod) = inner.get(Kind::Pod, key).cloned() else {
            return;
        };
        if pod.idx.node_name.is_some() || pod.idx.deleting {
            return;
        }
        let pv = pod.value();
        let selector = pv["spec"]["nodeSelector"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        // The least loaded fitting node, the first by name among equals, as the store has it
        // now (the world's view of the Nodes may lag behind it by the events not yet seen).
        let best = self.loads.best(|name| {
            inner.get(Kind::Node, name).is_some_and(|n| {
                takes_pods(&n.idx)
                    && selector
                        .iter()
                        .all(|(k, v)| n.idx.labels.get(k).map(String::as_str) == v.as_str())
            })
        });
        let Some(node) = best.map(str::to_string) else {
            return;
        };
        let mut v = pv;
        v["spec"]["nodeName"] = json!(node);
        let now = timestamp(Utc::now());
        v["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}]);
        inner.put(Kind::Pod, v);
    }

    fn schedule_pending(&mut self) {
        let pending: Vec<String> = self.unscheduled.iter().take(1000).cloned().collect();
        for k in pending {
            self.schedule(&k);
        }
    }

    fn start_pending_on(&mut self, node: &str) {
        let pods: Vec<Arc<Index>> = {
            let inner = self.shared.store.lock();
            inner
                .pods_on(node)
                .filter(|e| e.idx.phase.as_deref() == Some("Pending"))
                .map(|e| e.idx.clone())
                .collect()
        };
        for p in pods {
            self.pod_changed(&p);
        }
    }

    fn on_msg(&mut self, msg: Msg) {
        match msg {
            Msg::Start(key, uid) => {
                self.timers.remove(&(key.clone(), format!("start {uid}")));
                self.start_pod(key, uid);
            }
            Msg::Attach(name, uid) => self.attached(&name, &uid),
            Msg::Detach(name, downs) => self.detached(&name, downs),
            Msg::Remove(key, uid) => {
                self.timers.remove(&(key.clone(), format!("remove {uid}")));
                self.remove_pod(&key, &uid);
            }
            Msg::StartDelay(secs) => self.sc.start_delay = secs,
            Msg::DetachDelay(secs) => self.sc.detach_seconds = secs,
            Msg::Reboot(node, asked) => {
                self.rebooting.insert(node.clone());
                self.loads.set_fits(&node, false);
                let down = asked + self.sc.scaled(self.sc.reboot_delay);
                self.later_at(down, Msg::RebootDown(node, down));
            }
            Msg::RebootDown(node, down) => {
                let up = down + self.sc.scaled(self.sc.reboot_time);
                let cause = if self.shared.invariants.take_shutting_down(&node) {
                    self.shared.invariants.host_down_by_itself(&node);
                    Cause::Shutdown
                } else {
                    Cause::Reboot
                };
                self.down.insert(node.clone());
                *self.downs.entry(node.clone()).or_default() += 1;
                let mut inner = self.shared.store.lock();
                // The host goes down and comes up again whether or not its Node exists.
                let Some(n) = inner.get(Kind::Node, &node).cloned() else {
                    drop(inner);
                    self.later_at(up, Msg::RebootUp(node, up));
                    return;
                };
                let mut v = n.value();
                set_node_ready(&mut v, false);
                inner.put(Kind::Node, v);
                let pods: Vec<_> = inner.pods_on(&node).cloned().collect();
                for p in pods {
                    let daemon = p
                        .idx
                        .owner
                        .as_ref()
                        .is_some_and(|o| o.0 == "DaemonSet" || o.0 == "Node");
                    if daemon {
                        let mut v = p.value();
                        v["status"] = running_status(&timestamp(Utc::now()), false);
                        v["status"]["phase"] = json!("Pending");
                        inner.put(Kind::Pod, v);
                    } else {
                        api::check_disruption(&inner, &p.idx, cause, &self.shared.invariants);
                        let mut v = p.value();
                        v["metadata"]["deletionTimestamp"] = json!(timestamp(Utc::now()));
                        v["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                        inner.remove(Kind::Pod, &p.idx.key(), v);
                    }
                }
                drop(inner);
                self.later_at(up, Msg::RebootUp(node, up));
            }
            Msg::Untaint(node) => {
                self.untaint_pending.remove(&node);
                let mut inner = self.shared.store.lock();
                let Some(n) = inner.get(Kind::Node, &node).cloned() else {
                    return;
                };
                if !n.idx.ready {
                    return;
                }
                let mut v = n.value();
                TaintChange::Remove(TAINT_NOT_READY, None).apply(&mut v);
                if v != n.value() {
                    inner.put(Kind::Node, v);
                }
            }
            Msg::RebootUp(node, _) if self.host_gone(&node) => {
                self.rebooting.remove(&node);
            }
            Msg::RebootUp(node, up) => {
                self.rebooting.remove(&node);
                self.up_at.insert(node.clone(), up);
                // Taken again once its Node says Ready (the event of the write below).
                let boot = uid(&mut self.rng);
                self.host_boot.insert(node.clone(), boot.clone());
                let mut inner = self.shared.store.lock();
                // A host whose Node was deleted meanwhile comes up all the same: its kubelet
                // reports the new boot when the Node is registered again.
                let Some(n) = inner.get(Kind::Node, &node).cloned() else {
                    return;
                };
                let mut v = n.value();
                set_node_ready(&mut v, true);
                v["status"]["nodeInfo"]["bootID"] = json!(boot);
                inner.put(Kind::Node, v);
                drop(inner);
                self.down.remove(&node);
                self.volumes_back(&node);
            }
        }
    }

    /// The kubelet is done with a pod being deleted (its containers exited): it unmounts its
    /// volumes and the pod goes, unless a finalizer holds it. The pod is read under the store
    /// lock, its final state made outside it, and it is removed under the lock if it was not
    /// written meanwhile (else all again from what the store says).
    fn remove_pod(&mut self, key: &str, uid: &str) {
        let Some(p) = self.shared.store.get(Kind::Pod, key) else {
            return;
        };
        if p.idx.uid != uid {
            return;
        }
        if p.idx.finalizers {
            return;
        }
        // Its last state: the stored pod with a grace period of 0, spliced into its bytes.
        let last = Prepared::with_deletion_grace(Kind::Pod, &p, 0);
        let mut inner = self.shared.store.lock();
        if !inner.still_at(Kind::Pod, key, p.idx.rv) {
            drop(inner);
            return self.remove_pod(key, uid);
        }
        if !p.idx.claims.is_empty() {
            unmount(&mut inner, &p.idx);
        }
        inner.remove_prepared(last);
    }

    /// The kubelet starts a pod past its start delay, once its volumes are attached (until
    /// then it waits in `awaiting`), and reports them in use first. Its running status is made
    /// outside the store lock and written under it if the pod was not written meanwhile (else
    /// all again from what the store says).
    fn start_pod(&mut self, key: String, uid: String) {
        let mut inner = self.shared.store.lock();
        let Some(p) = inner.get(Kind::Pod, &key).cloned() else {
            self.awaiting.remove(&key);
            return;
        };
        let node_ready = p
            .idx
            .node_name
            .as_ref()
            .and_then(|n| inner.get(Kind::Node, n))
            .is_some_and(|n| n.idx.ready);
        if p.idx.uid != uid || p.idx.deleting || !node_ready {
            self.awaiting.remove(&key);
            return;
        }
        if !p.idx.claims.is_empty() {
            let Some(uniques) = volumes_ready(&inner, &p.idx) else {
                self.awaiting.insert(key, uid);
                return;
            };
            let node = p.idx.node_name.clone().unwrap_or_default();
            if let Some(n) = inner.get(Kind::Node, &node) {
                let mut nv = n.value();
                let mut changed = false;
                for u in &uniques {
                    changed |= volumes::set_in_use(&mut nv, u, true);
                }
                if changed {
                    inner.put(Kind::Node, nv);
                }
            }
        }
        self.awaiting.remove(&key);
        if p.idx.phase.as_deref() != Some("Pending") {
            return;
        }
        drop(inner);
        let running =
            Prepared::with_status(Kind::Pod, &p, running_status(&timestamp(Utc::now()), true));
        let mut inner = self.shared.store.lock();
        if !inner.still_at(Kind::Pod, &key, p.idx.rv) {
            drop(inner);
            return self.start_pod(key, uid);
        }
        inner.put_prepared(running);
    }

    /// The CSI attacher attached a VolumeAttachment: the controller lists the volume in the
    /// Node's `volumesAttached`, and the node's pods waiting for it start.
    fn attached(&mut self, name: &str, uid: &str) {
        self.timers
            .remove(&(format!("va/{name}"), format!("attach {uid}")));
        let mut inner = self.shared.store.lock();
        let Some(va) = inner.get(Kind::VolumeAttachment, name).cloned() else {
            return;
        };
        if va.idx.uid != uid || va.idx.deleting {
            return;
        }
        let mut v = va.value();
        v["status"]["attached"] = json!(true);
        inner.put(Kind::VolumeAttachment, v);
        let node = va.idx.node_name.clone().unwrap_or_default();
        let pv = va.idx.volume.clone().unwrap_or_default();
        let Some(info) = inner
            .get(Kind::PersistentVolume, &pv)
            .and_then(|e| PvInfo::of(&e.value()))
        else {
            return;
        };
        if let Some(n) = inner.get(Kind::Node, &node) {
            let mut nv = n.value();
            if volumes::set_attached(&mut nv, &info.unique(), true) {
                inner.put(Kind::Node, nv);
            }
        }
        let users: Vec<Arc<Index>> = info
            .claim
            .as_ref()
            .and_then(|c| self.claim_users.get(c))
            .into_iter()
            .flatten()
            .filter_map(|k| inner.get(Kind::Pod, k))
            .filter(|p| p.idx.node_name.as_deref() == Some(node.as_str()))
            .map(|p| p.idx.clone())
            .collect();
        drop(inner);
        for p in users {
            self.shared
                .invariants
                .multi_attach_ended(&p.uid, self.sc.time_factor);
            if let Some(uid) = self.awaiting.get(&p.key()).cloned() {
                self.start_pod(p.key(), uid);
            }
        }
    }

    /// The CSI attacher detached a VolumeAttachment being deleted: its finalizer goes, and the
    /// object with it. A detach its node's going down interrupted is done again once it is up.
    fn detached(&mut self, name: &str, downs: u64) {
        let key = (format!("va/{name}"), "detach".to_string());
        let mut inner = self.shared.store.lock();
        let Some(va) = inner.get(Kind::VolumeAttachment, name).cloned() else {
            self.timers.remove(&key);
            return;
        };
        let node = va.idx.node_name.clone().unwrap_or_default();
        if self.downs.get(&node).copied().unwrap_or(0) != downs {
            return;
        }
        self.timers.remove(&key);
        if self.down.contains(&node) || !va.idx.deleting {
            return;
        }
        let mut v = va.value();
        let finalizer = volumes::attacher_finalizer(v["spec"]["attacher"].as_str().unwrap_or(""));
        let left: Vec<Value> = v["metadata"]["finalizers"]
            .as_array()
            .map(|f| f.iter().filter(|x| **x != finalizer).cloned().collect())
            .unwrap_or_default();
        if left.is_empty() {
            if let Some(md) = v["metadata"].as_object_mut() {
                md.remove("finalizers");
            }
            let pv = v["spec"]["source"]["persistentVolumeName"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            inner.remove(Kind::VolumeAttachment, name, v);
            // The controller's status updater writes the Node's `volumesAttached` from what it
            // knows attached: once detached, the volume is not in it, whatever was written
            // meanwhile (a Node registered again while the detach went on lists what was
            // attached then).
            let unique = inner
                .get(Kind::PersistentVolume, &pv)
                .and_then(|e| PvInfo::of(&e.value()))
                .map(|i| i.unique());
            if let (Some(unique), Some(n)) = (unique, inner.get(Kind::Node, &node)) {
                let mut nv = n.value();
                if volumes::set_attached(&mut nv, &unique, false) {
                    inner.put(Kind::Node, nv);
                }
            }
        } else {
            v["metadata"]["finalizers"] = Value::Array(left);
            inner.put(Kind::VolumeAttachment, v);
        }
    }

    /// kube-controller-manager's PV controller and its protection controllers for the claims
    /// and volumes changed since the last flush (`pv_controller` decides, this writes), and
    /// the world's provisioner reclaiming the volumes it made: a Released volume of its class
    /// with the Delete policy is deleted, as the CSI external-provisioner deletes it. Their
    /// writes come back as changes and are looked at again next flush, until nothing changes.
    fn sync_claims_and_volumes(&mut self) {
        if self.dirty_claims.is_empty()
            && self.dirty_volumes.is_empty()
            && !self.unbound_claims_look
        {
            return;
        }
        let shared = self.shared.clone();
        let mut inner = shared.store.lock();
        if std::mem::take(&mut self.unbound_claims_look) {
            self.dirty_claims.extend(
                inner
                    .range(Kind::PersistentVolumeClaim, None, None)
                    .filter(|e| e.idx.volume.is_none())
                    .map(|e| e.idx.key()),
            );
        }
        let now = timestamp(Utc::now());
        for key in std::mem::take(&mut self.dirty_claims) {
            self.sync_claim(&mut inner, &key, &now);
        }
        for name in std::mem::take(&mut self.dirty_volumes) {
            sync_volume(&mut inner, &name, &now);
        }
    }

    /// The pvc-protection controller, then the binder, for one claim.
    fn sync_claim(&self, inner: &mut Inner, key: &str, now: &str) {
        let Some(c) = inner.get(Kind::PersistentVolumeClaim, key) else {
            return;
        };
        let mut cv = c.value();
        // A pod bound to a node that mounts it, deleting or not (podUsesPVCForDeletion).
        let used = self.claim_users.get(key).into_iter().flatten().any(|p| {
            inner
                .get(Kind::Pod, p)
                .is_some_and(|p| p.idx.node_name.is_some())
        });
        if let Some(next) = pv_controller::protect_claim(&cv, used) {
            if !write(inner, Kind::PersistentVolumeClaim, key, next.clone()) {
                return;
            }
            cv = next;
        }
        let named = cv["spec"]["volumeName"]
            .as_str()
            .filter(|n| !n.is_empty())
            .and_then(|n| inner.get(Kind::PersistentVolume, n))
            .map(|e| e.value());
        let matched = if cv["spec"]["volumeName"].as_str().unwrap_or("").is_empty()
            && cv["status"]["phase"] != "Bound"
        {
            let delay = cv["spec"]["storageClassName"]
                .as_str()
                .and_then(|n| inner.get(Kind::StorageClass, n))
                .is_some_and(|sc| sc.value()["volumeBindingMode"] == "WaitForFirstConsumer");
            let volumes: Vec<Value> = inner
                .range(Kind::PersistentVolume, None, None)
                .map(|e| e.value())
                .collect();
            pv_controller::best_match(&cv, volumes.iter(), delay).cloned()
        } else {
            None
        };
        match pv_controller::sync_claim(&cv, named.as_ref(), matched.as_ref(), now) {
            None => {}
            Some(pv_controller::ClaimStep::Claim(c)) => {
                write(inner, Kind::PersistentVolumeClaim, key, c);
            }
            Some(pv_controller::ClaimStep::Bind { volume, claim }) => {
                if let Some(v) = volume {
                    let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
                    write(inner, Kind::PersistentVolume, &name, v);
                }
                if let Some(c) = claim {
                    write(inner, Kind::PersistentVolumeClaim, key, c);
                }
            }
        }
    }

    /// A Node just created (a kubelet registering again after its Node was deleted): its
    /// status is the kubelet's, Ready unless its host is down in a reboot, with the host's
    /// boot ID, whatever the creator wrote.
    fn kubelet_registers(&mut self, node: &str) {
        // Only hosts the world rebooted: a Node created by hand (kubectl, a test) is left as
        // written. A host gone for good has no kubelet.
        if !self.rebooting.contains(node) && !self.host_boot.contains_key(node) {
            return;
        }
        if self.host_gone(node) {
            return;
        }
        let ready = !self.rebooting.contains(node);
        let mut inner = self.shared.store.lock();
        let Some(n) = inner.get(Kind::Node, node).cloned() else {
            return;
        };
        let mut v = n.value();
        let boot = self.host_boot.get(node).cloned();
        let stale_boot = boot
            .as_deref()
            .is_some_and(|b| v["status"]["nodeInfo"]["bootID"].as_str() != Some(b));
        if n.idx.ready == ready && !stale_boot {
            return;
        }
        set_node_ready(&mut v, ready);
        if let Some(b) = boot {
            v["status"]["nodeInfo"]["bootID"] = json!(b);
        }
        inner.put(Kind::Node, v);
    }

    /// Refreshes what the changes since the last flush made stale: volumes, replica counts and
    /// budgets. The counts and budgets are read under the store lock, parsed, recomputed and
    /// serialized outside it, and written under it again (the lock was held two thirds of a
    /// 5,000-node rollout, a third of that in these refreshes).
    fn flush(&mut self) {
        self.sync_claims_and_volumes();
        while let Some(pv) = self.dirty_pvs.pop_first() {
            self.reconcile_pv(&pv);
        }
        if !self.dirty_ss.is_empty() || !self.dirty_rs.is_empty() {
            let ss = std::mem::take(&mut self.dirty_ss);
            let rs = std::mem::take(&mut self.dirty_rs);
            let due: Vec<(Kind, Entry, Counts)> = {
                let inner = self.shared.store.lock();
                let ss = ss.iter().map(|k| (Kind::StatefulSet, k));
                let rs = rs.iter().map(|k| (Kind::ReplicaSet, k));
                ss.chain(rs)
                    .filter_map(|(kind, k)| {
                        replicas_due(&inner, kind, k).map(|(e, c)| (kind, e, c))
                    })
                    .collect()
            };
            let ready: Vec<(Kind, u64, Prepared)> = due
                .into_iter()
                .map(|(kind, old, counts)| (kind, old.idx.rv, next_replicas(kind, &old, &counts)))
                .collect();
            if !ready.is_empty() {
                let mut inner = self.shared.store.lock();
                commit_ready(&mut inner, ready, refresh_replicas);
            }
        }
        if self.dirty_ns.is_empty() && self.dirty_pods.is_empty() && self.dirty_pdbs.is_empty() {
            return;
        }
        let all = std::mem::take(&mut self.dirty_ns);
        let mut pods = std::mem::take(&mut self.dirty_pods);
        let mut keys = std::mem::take(&mut self.dirty_pdbs);
        let reads: Vec<(Entry, api::BudgetPods)> = {
            let inner = self.shared.store.lock();
            let namespaces: BTreeSet<String> = all.iter().chain(pods.keys()).cloned().collect();
            for ns in namespaces {
                if all.contains(&ns) {
                    keys.extend(inner.range(Kind::Pdb, Some(&ns), None).map(|e| e.idx.key()));
                    pods.remove(&ns);
                    continue;
                }
                let mut changed = pods.remove(&ns).unwrap_or_default();
                changed.sort();
                changed.dedup();
                keys.extend(
                    changed
                        .iter()
                        .flat_map(|l| inner.budgets_selecting(&ns, l))
                        .map(|e| e.idx.key()),
                );
            }
            keys.iter()
                .filter_map(|k| inner.get(Kind::Pdb, k))
                .map(|e| (e.clone(), api::BudgetPods::read(&inner, &e.idx)))
                .collect()
        };
        let ready: Vec<(Kind, u64, Prepared)> = reads
            .iter()
            .filter_map(|(old, pods)| Some((Kind::Pdb, old.idx.rv, next_pdb(old, pods)?)))
            .collect();
        if !ready.is_empty() {
            let mut inner = self.shared.store.lock();
            commit_ready(&mut inner, ready, |inner, _, k| refresh_pdb(inner, k));
        }
    }
}

/// An Event of the attach/detach controller about `pod`, as its recorder writes it.
fn adc_event(inner: &mut Inner, pod: &Index, reason: &str, message: &str) {
    let t = Utc::now();
    let now = timestamp(t);
    let body = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{}.{:x}", pod.name, t.timestamp_nanos_opt().unwrap_or(0)),
            "namespace": pod.namespace},
        "involvedObject": {"kind": "Pod", "namespace": pod.namespace, "name": pod.name,
            "uid": pod.uid, "apiVersion": "v1", "resourceVersion": pod.rv.to_string()},
        "reason": reason, "message": message,
        "source": {"component": volumes::ADC_COMPONENT},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1, "type": "Warning",
        "eventTime": null, "reportingComponent": volumes::ADC_COMPONENT, "reportingInstance": ""});
    match api::prepare_create(Kind::Event, &pod.namespace, body) {
        Ok(v) => {
            let _ = api::insert(inner, Kind::Event, v);
        }
        Err(e) => tracing::warn!("the attach/detach controller's Event was refused: {e:?}"),
    }
}

/// One write of the node-lifecycle controller to a Node's taints.
enum TaintChange {
    /// Adds the taint (key, effect), with its `timeAdded`.
    Add(&'static str, &'static str),
    /// Removes the taints of this key (of this effect only, when given).
    Remove(&'static str, Option<&'static str>),
}

impl TaintChange {
    /// Applies the change to a Node; no taints is no `taints` key, as the API server stores it.
    fn apply(&self, v: &mut Value) {
        let mut taints: Vec<Value> = v["spec"]["taints"].as_array().cloned().unwrap_or_default();
        match self {
            TaintChange::Add(key, effect) => taints
                .push(json!({"key": key, "effect": effect, "timeAdded": timestamp(Utc::now())})),
            TaintChange::Remove(key, effect) => {
                taints.retain(|t| !(t["key"] == *key && effect.is_none_or(|e| t["effect"] == e)))
            }
        }
        if taints.is_empty() {
            if let Some(spec) = v["spec"].as_object_mut() {
                spec.remove("taints");
            }
        } else {
            v["spec"]["taints"] = Value::Array(taints);
        }
    }
}

/// The pods a ReplicaSet or StatefulSet wants: `spec.replicas`, 1 when absent or negative.
fn wanted_pods(controller: &Index) -> u64 {
    let scale = controller.workload.as_ref().and_then(|w| w.scale);
    scale.and_then(|n| u64::try_from(n).ok()).unwrap_or(1)
}

/// A controller's pod template grace period, when it sets one (a loaded snapshot's do; the
/// generated world's take the scenario's).
fn template_grace(controller: &Value) -> Option<i64> {
    controller["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_i64()
}

fn set_node_ready(v: &mut Value, ready: bool) {
    let now = timestamp(Utc::now());
    let cond = ready_condition(ready, &now);
    match v["status"]["conditions"].as_array_mut() {
        Some(cs) => {
            cs.retain(|c| c["type"] != "Ready");
            cs.push(cond);
        }
        None => v["status"]["conditions"] = json!([cond]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refresh made outside the store lock is written where its object is still at the
    /// revision it was made from; where the object was written since (an eviction wrote the
    /// budget), it is not written over it: the refresh is done again from the store.
    #[test]
    fn a_refresh_made_outside_the_lock_is_redone_where_the_object_was_written_since() {
        let store = super::super::store::Store::new(16);
        let budget = |allowed: i64| {
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": "b", "namespace": "ns", "uid": "u"},
                   "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "a"}}},
                   "status": {"disruptionsAllowed": allowed}})
        };
        store.lock().put(Kind::Pdb, budget(1));
        let read = store.get(Kind::Pdb, "ns/b").unwrap();
        let ready = || vec![(Kind::Pdb, read.idx.rv, Prepared::new(Kind::Pdb, budget(5)))];
        let mut redone = Vec::new();

        // Written since: redone, not written over.
        store.lock().put(Kind::Pdb, budget(0));
        commit_ready(&mut store.lock(), ready(), |_, kind, key| {
            redone.push((kind, key.to_string()))
        });
        assert_eq!(redone, vec![(Kind::Pdb, "ns/b".to_string())]);
        let stored = store.get(Kind::Pdb, "ns/b").unwrap();
        assert_eq!(stored.value()["status"]["disruptionsAllowed"], 0);

        // Still as read: written.
        let read = stored;
        let ready = vec![(Kind::Pdb, read.idx.rv, Prepared::new(Kind::Pdb, budget(5)))];
        commit_ready(&mut store.lock(), ready, |_, _, _| panic!("not redone"));
        let stored = store.get(Kind::Pdb, "ns/b").unwrap();
        assert_eq!(stored.value()["status"]["disruptionsAllowed"], 5);
        assert_eq!(stored.idx.rv, read.idx.rv + 1);
    }

    /// A reboot's phases are timed from the request, whenever the world's runner gets to it:
    /// down `rebootDelay` after the request, up `rebootTime` after that, and the not-ready
    /// taint gone `taintRemovalDelay` after the host was up. Virtual time, and a runner 5 ms
    /// late to the request: the instants are exact, and the lateness is not added.
    #[tokio::test(start_paused = true)]
    async fn a_reboots_phases_are_timed_from_the_request_not_from_the_runners_turn() {
        use std::time::Duration;
        let sc = Scenario::nodes_only(1);
        let cluster = crate::sim::Cluster::start(sc.clone()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let store = &cluster.shared.store;
        let node = || store.get(Kind::Node, "node-0000").unwrap();
        let boot = |e: &Entry| e.value()["status"]["nodeInfo"]["bootID"].clone();
        let tainted = |e: &Entry| {
            e.value()["spec"]["taints"]
                .as_array()
                .is_some_and(|ts| ts.iter().any(|t| t["key"] == TAINT_NOT_READY))
        };
        let before = node();
        assert!(before.idx.ready && !tainted(&before));
        let mut events = store.subscribe_all();
        let t0 = Instant::now();
        cluster.world().reboot("node-0000", "token");
        tokio::time::advance(Duration::from_millis(5)).await;
        let (mut down, mut up, mut back) = (None, None, None);
        let watched = tokio::time::timeout(Duration::from_secs(10), async {
            while back.is_none() {
                let _ = events.recv().await;
                let n = node();
                let at = t0.elapsed();
                if !n.idx.ready {
                    down.get_or_insert(at);
                }
                if n.idx.ready && boot(&n) != boot(&before) {
                    up.get_or_insert(at);
                    if !tainted(&n) {
                        back = Some(at);
                    }
                }
            }
        })
        .await;
        assert!(watched.is_ok(), "down {down:?}, up {up:?}: never back");
        let ms = |secs: f64| Some(sc.scaled(secs));
        assert_eq!(down, ms(sc.reboot_delay));
        assert_eq!(up, ms(sc.reboot_delay + sc.reboot_time));
        assert_eq!(
            back,
            ms(sc.reboot_delay + sc.reboot_time + sc.taint_removal_delay)
        );
        cluster.shutdown().await;
    }

    #[test]
    fn spread_pods_load_every_node_alike_and_put_a_workloads_pods_on_distinct_nodes() {
        let (nodes, replicas, per_node) = (50, 3, 30);
        let mut loads = vec![0usize; nodes];
        let mut placer = Placer::new(nodes, Placement::Spread, 7);
        let mut adjacent = 0;
        let mut first = Vec::new();
        for _ in 0..nodes * per_node / replicas {
            let mut taken = Vec::new();
            for _ in 0..replicas {
                taken.push(placer.next(&taken));
            }
            let mut distinct = taken.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), replicas, "{taken:?}");
            adjacent += usize::from(distinct.windows(2).any(|w| w[1] - w[0] == 1));
            taken.iter().for_each(|&n| loads[n] += 1);
            first.push(taken);
        }
        assert!(loads.iter().all(|&l| l == per_node), "{loads:?}");
        // Siblings on nodes next to each other in name order are the exception, not the rule
        // (about 3 x 2/50 of the workloads by chance).
        assert!(
            adjacent < 500 / 4,
            "{adjacent} of 500 workloads on adjacent nodes"
        );
        // The same seed lays the world out the same way.
        let mut again = Placer::new(nodes, Placement::Spread, 7);
        let mut taken = Vec::new();
        for _ in 0..replicas {
            taken.push(again.next(&taken));
        }
        assert_eq!(taken, first[0]);
        // A workload with more pods than nodes still loads them alike.
        let mut small = Placer::new(3, Placement::Spread, 1);
        let mut taken = Vec::new();
        for _ in 0..4 {
            taken.push(small.next(&taken));
        }
        let mut sorted = taken[..3].to_vec();
        sorted.sort();
        assert_eq!(sorted, [0, 1, 2], "{taken:?}");
    }

    #[test]
    fn round_robin_puts_a_workloads_pods_on_consecutive_nodes() {
        let mut placer = Placer::new(4, Placement::RoundRobin, 7);
        let placed: Vec<usize> = (0..6).map(|_| placer.next(&[])).collect();
        assert_eq!(placed, [0, 1, 2, 3, 0, 1]);
    }

    /// The scheduler's ordered view gives the node a look at every fitting node gives: the
    /// least loaded with room, the first by name among equals, through bindings, departures
    /// and nodes leaving and rejoining the fitting set.
    #[test]
    fn the_least_loaded_fitting_node_is_found_as_a_scan_would() {
        let mut loads = Loads::default();
        let mut pods: BTreeMap<&str, usize> = BTreeMap::new();
        let mut fits: BTreeSet<&str> = BTreeSet::new();
        let scan = |pods: &BTreeMap<&str, usize>, fits: &BTreeSet<&str>, odd: bool| {
            let mut best: Option<(usize, &str)> = None;
            for n in fits {
                let c = pods.get(n).copied().unwrap_or(0);
                let accepted = !odd || n.ends_with(['1', '3']);
                if accepted && c < MAX_PODS && best.is_none_or(|(b, _)| c < b) {
                    best = Some((c, n));
                }
            }
            best.map(|(_, n)| n.to_string())
        };
        let names = ["n0", "n1", "n2", "n3"];
        let mut step = 7usize;
        for i in 0..2000 {
            step = (step * 31 + 11) % 1009;
            let n = names[step % names.len()];
            match step % 5 {
                0 => {
                    let f = !step.is_multiple_of(3);
                    loads.set_fits(n, f);
                    if f {
                        fits.insert(n);
                    } else {
                        fits.remove(n);
                    }
                }
                1 if pods.get(n).copied().unwrap_or(0) > 0 => {
                    loads.bound(n, false);
                    *pods.entry(n).or_default() -= 1;
                }
                _ => {
                    loads.bound(n, true);
                    *pods.entry(n).or_default() += 1;
                }
            }
            for odd in [false, true] {
                let got = loads.best(|n| !odd || n.ends_with(['1', '3']));
                let want = scan(&pods, &fits, odd);
                assert_eq!(got.map(str::to_string), want, "step {i}");
            }
        }
    }
}
