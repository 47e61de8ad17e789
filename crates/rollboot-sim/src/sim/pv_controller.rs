//! kube-controller-manager's PersistentVolume controller (the binder) and its pv-protection
//! and pvc-protection controllers, as pure steps: from a claim or a volume and what the
//! controller reads beside it, the objects as that controller writes them next (`None`:
//! nothing to write), decided as kube-controller-manager v1.36 decides them
//! (tests/golden/204-229).
//!
//! The binder binds a claim to the volume it names, or to the volume pre-bound to it, or to
//! the smallest available volume that fits it (class, size, access modes, volume mode; a
//! claim with a label selector, or of a WaitForFirstConsumer class, gets only a volume
//! pre-bound to it); it marks a volume Available, Bound, or Released once its claim is gone,
//! and a claim Lost once its volume is. The protection controllers keep
//! `kubernetes.io/pv-protection` on a volume while it is Bound and `kubernetes.io/pvc-protection`
//! on a claim while a pod bound to a node mounts it, remove it from one being deleted once
//! not, and add it to one that lacks it.
//!
//! Below the world (`world.rs`), which runs these steps on the store's changes, writes what
//! they return and reclaims the volumes of its own provisioner. It must never touch the store,
//! read a clock (`now` is a parameter) or keep state.

use serde_json::{json, Value};

use super::quantity::Quantity;
use super::volume_strategy::{
    add_finalizer, has_finalizer, remove_finalizer, PVC_PROTECTION, PV_PROTECTION,
};

/// Set on a volume or claim the controller bound (not pre-bound by its user).
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// Set on a claim once its binding is complete.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// A class given by the beta annotation, read before `storageClassName`.
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn deleting(v: &Value) -> bool {
    !v["metadata"]["deletionTimestamp"].is_null()
}

fn has_annotation(v: &Value, key: &str) -> bool {
    v["metadata"]["annotations"].get(key).is_some()
}

/// `IsVolumeBoundToClaim`: the volume's claimRef names the claim (and its uid, if it has one).
pub fn bound_to(volume: &Value, claim: &Value) -> bool {
    let r = &volume["spec"]["claimRef"];
    let md = &claim["metadata"];
    !r.is_null()
        && r["name"] == md["name"]
        && r["namespace"] == md["namespace"]
        && (s(&r["uid"]).is_empty() || r["uid"] == md["uid"])
}

/// The claim a volume's claimRef names, as `namespace/name`.
pub fn claim_ref_key(volume: &Value) -> Option<String> {
    let r = &volume["spec"]["claimRef"];
    let name = r["name"].as_str()?;
    Some(format!("{}/{name}", s(&r["namespace"])))
}

fn claim_class(claim: &Value) -> &str {
    match claim["metadata"]["annotations"].get(BETA_CLASS) {
        Some(c) => s(c),
        None => s(&claim["spec"]["storageClassName"]),
    }
}

fn volume_class(volume: &Value) -> &str {
    match volume["metadata"]["annotations"].get(BETA_CLASS) {
        Some(c) => s(c),
        None => s(&volume["spec"]["storageClassName"]),
    }
}

fn quantity(v: &Value) -> Quantity {
    v.as_str()
        .and_then(|q| Quantity::parse(q).ok())
        .unwrap_or_else(|| Quantity::parse("0").expect("zero"))
}

fn mode(spec: &Value) -> &str {
    spec["volumeMode"].as_str().unwrap_or("Filesystem")
}

/// `CheckAccessModes`: the volume offers every mode the claim asks for.
fn access_modes_fit(claim: &Value, volume: &Value) -> bool {
    let offered = volume["spec"]["accessModes"].as_array();
    claim["spec"]["accessModes"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|m| offered.is_some_and(|o| o.contains(m)))
}

/// `checkVolumeSatisfyClaim`: a volume the claim names may be bound to it.
fn satisfies(volume: &Value, claim: &Value) -> bool {
    !deleting(volume)
        && quantity(&volume["spec"]["capacity"]["storage"])
            .cmp_value(&quantity(
                &claim["spec"]["resources"]["requests"]["storage"],
            ))
            .is_ge()
        && volume_class(volume) == claim_class(claim)
        && mode(&volume["spec"]) == mode(&claim["spec"])
        && access_modes_fit(claim, volume)
}

/// `FindMatchingVolume` on the controller's path (no node): the volume pre-bound to the claim,
/// else the smallest Available one that fits it. `delay_binding`: the claim's class binds
/// when a pod is scheduled (only a pre-bound volume is taken here).
pub fn best_match<'a>(
    claim: &Value,
    volumes: impl Iterator<Item = &'a Value>,
    delay_binding: bool,
) -> Option<&'a Value> {
    let requested = quantity(&claim["spec"]["resources"]["requests"]["storage"]);
    let selector = !claim["spec"]["selector"].is_null();
    let mut best: Option<(&Value, Quantity)> = None;
    for v in volumes {
        if !v["spec"]["claimRef"].is_null() && !bound_to(v, claim) {
            continue;
        }
        let size = quantity(&v["spec"]["capacity"]["storage"]);
        if size.cmp_value(&requested).is_lt()
            || mode(&v["spec"]) != mode(&claim["spec"])
            || deleting(v)
        {
            continue;
        }
        if bound_to(v, claim) {
            return Some(v);
        }
        // Label selectors are not evaluated here: a claim with one is bound only to a
        // volume pre-bound to it.
        if delay_binding || selector || v["status"]["phase"] != "Available" {
            continue;
        }
        if volume_class(v) != claim_class(claim) || !access_modes_fit(claim, v) {
            continue;
        }
        if best
            .as_ref()
            .is_none_or(|(_, q)| q.cmp_value(&size).is_gt())
        {
            best = Some((v, size));
        }
    }
    best.map(|(v, _)| v)
}

/// What the binder writes for a claim.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimStep {
    /// Binds the pair: the volume as written first (when it changes), then the claim.
    Bind {
        /// The volume bound to the claim and Bound, if that changed it.
        volume: Option<Value>,
        /// The claim bound to the volume and Bound, if that changed it.
        claim: Option<Value>,
    },
    /// The claim's status alone (Pending, Lost).
    Claim(Value),
}

/// `syncClaim`. `named` is the volume the claim's `volumeName` names, if it exists;
/// `matched` the volume [`best_match`] found for a claim that names none.
pub fn sync_claim(
    claim: &Value,
    named: Option<&Value>,
    matched: Option<&Value>,
    now: &str,
) -> Option<ClaimStep> {
    let volume_name = s(&claim["spec"]["volumeName"]);
    if claim["status"]["phase"] == "Bound" {
        // syncBoundClaim
        return match named {
            _ if volume_name.is_empty() => claim_phase(claim, "Lost", None),
            None => claim_phase(claim, "Lost", None),
            Some(v)
                if v["spec"]["claimRef"].is_null()
                    || v["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"] =>
            {
                bind(v, claim, now)
            }
            Some(_) => claim_phase(claim, "Lost", None),
        };
    }
    if volume_name.is_empty() {
        return match matched {
            Some(v) => bind(v, claim, now),
            None => claim_phase(claim, "Pending", None),
        };
    }
    match named {
        None => claim_phase(claim, "Pending", None),
        Some(v) if v["spec"]["claimRef"].is_null() => {
            if satisfies(v, claim) {
                bind(v, claim, now)
            } else {
                claim_phase(claim, "Pending", None)
            }
        }
        Some(v) if bound_to(v, claim) => bind(v, claim, now),
        Some(_) => claim_phase(claim, "Pending", None),
    }
}

/// `updateClaimStatus`: the phase, with the volume's access modes and capacity (none without
/// a volume); `None` when nothing changes.
fn claim_phase(claim: &Value, phase: &str, volume: Option<&Value>) -> Option<ClaimStep> {
    claim_status(claim, phase, volume).map(ClaimStep::Claim)
}

fn claim_status(claim: &Value, phase: &str, volume: Option<&Value>) -> Option<Value> {
    let mut c = claim.clone();
    let status = &mut c["status"];
    let was = status["phase"].clone();
    status["phase"] = json!(phase);
    match volume {
        None => {
            if let Some(st) = status.as_object_mut() {
                st.remove("accessModes");
                st.remove("capacity");
                st.remove("currentVolumeAttributesClassName");
            }
        }
        Some(v) => {
            status["accessModes"] = v["spec"]["accessModes"].clone();
            if was != phase {
                let have = &claim["status"]["capacity"]["storage"];
                let want = &v["spec"]["capacity"]["storage"];
                if have.is_null() || quantity(have) != quantity(want) {
                    status["capacity"] = v["spec"]["capacity"].clone();
                }
            }
        }
    }
    (c != *claim).then_some(c)
}

/// `bind`: the volume's claimRef completed (and `bound-by-controller` where the user did not
/// pre-bind it), Bound since `now`; the claim's `volumeName` (and `bound-by-controller` where
/// the controller chose it), `bind-completed`, Bound with the volume's modes and capacity.
pub fn bind(volume: &Value, claim: &Value, now: &str) -> Option<ClaimStep> {
    let md = &claim["metadata"];
    let mut v = volume.clone();
    let r = &v["spec"]["claimRef"];
    if r.is_null()
        || r["name"] != md["name"]
        || r["namespace"] != md["namespace"]
        || r["uid"] != md["uid"]
    {
        let by_controller = !bound_to(volume, claim);
        v["spec"]["claimRef"] = json!({"kind": "PersistentVolumeClaim", "namespace": md["namespace"],
            "name": md["name"], "uid": md["uid"], "apiVersion": "v1",
            "resourceVersion": rv_string(&md["resourceVersion"])});
        if by_controller && !has_annotation(&v, BOUND_BY_CONTROLLER) {
            v["metadata"]["annotations"][BOUND_BY_CONTROLLER] = json!("yes");
        }
    }
    set_volume_phase(&mut v, "Bound", now);
    let mut c = claim.clone();
    let name = &volume["metadata"]["name"];
    if c["spec"]["volumeName"] != *name {
        c["spec"]["volumeName"] = name.clone();
        if !has_annotation(&c, BOUND_BY_CONTROLLER) {
            c["metadata"]["annotations"][BOUND_BY_CONTROLLER] = json!("yes");
        }
    }
    if !has_annotation(&c, BIND_COMPLETED) {
        c["metadata"]["annotations"][BIND_COMPLETED] = json!("yes");
    }
    let c = claim_status(&c, "Bound", Some(&v)).unwrap_or(c);
    let volume_changed = v != *volume;
    let claim_changed = c != *claim;
    (volume_changed || claim_changed).then(|| ClaimStep::Bind {
        volume: volume_changed.then_some(v),
        claim: claim_changed.then_some(c),
    })
}

/// A resourceVersion as the wire has it: a string.
fn rv_string(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.to_string()),
        v => v.clone(),
    }
}

/// `updateVolumePhase`: the phase (and `lastPhaseTransitionTime`, which the status strategy
/// moves on a new phase) and no message.
fn set_volume_phase(v: &mut Value, phase: &str, now: &str) {
    if v["status"]["phase"] == phase {
        return;
    }
    v["status"]["phase"] = json!(phase);
    v["status"]["lastPhaseTransitionTime"] = json!(now);
    if let Some(st) = v["status"].as_object_mut() {
        st.remove("message");
    }
}

/// `syncVolume`. `claim` is the claim its claimRef names (`namespace/name`), if it exists.
/// Returns the volume as written next.
pub fn sync_volume(volume: &Value, claim: Option<&Value>, now: &str) -> Option<Value> {
    let mut v = volume.clone();
    let r = &volume["spec"]["claimRef"];
    if r.is_null() || s(&r["uid"]).is_empty() {
        set_volume_phase(&mut v, "Available", now);
    } else {
        match claim.filter(|c| c["metadata"]["uid"] == r["uid"]) {
            None => {
                if !matches!(s(&volume["status"]["phase"]), "Released" | "Failed") {
                    set_volume_phase(&mut v, "Released", now);
                }
            }
            Some(c) if s(&c["spec"]["volumeName"]).is_empty() => {}
            Some(c) if c["spec"]["volumeName"] == volume["metadata"]["name"] => {
                set_volume_phase(&mut v, "Bound", now);
            }
            Some(_) => {
                let provisioned = has_annotation(volume, "pv.kubernetes.io/provisioned-by");
                if provisioned && volume["spec"]["persistentVolumeReclaimPolicy"] == "Delete" {
                    if !matches!(s(&volume["status"]["phase"]), "Released" | "Failed") {
                        set_volume_phase(&mut v, "Released", now);
                    }
                } else {
                    // unbindVolume: a binding the controller made goes, a user's pre-binding
                    // keeps the claim's name.
                    if has_annotation(volume, BOUND_BY_CONTROLLER) {
                        if let Some(spec) = v["spec"].as_object_mut() {
                            spec.remove("claimRef");
                        }
                        if let Some(a) = v["metadata"]["annotations"].as_object_mut() {
                            a.remove(BOUND_BY_CONTROLLER);
                            if a.is_empty() {
                                v["metadata"]
                                    .as_object_mut()
                                    .map(|m| m.remove("annotations"));
                            }
                        }
                    } else {
                        v["spec"]["claimRef"]["uid"] = json!("");
                    }
                    set_volume_phase(&mut v, "Available", now);
                }
            }
        }
    }
    (v != *volume).then_some(v)
}

/// The pv-protection controller: the finalizer off a volume being deleted once it is not
/// Bound, on a volume that lacks it.
pub fn protect_volume(volume: &Value) -> Option<Value> {
    protect(volume, PV_PROTECTION, volume["status"]["phase"] == "Bound")
}

/// The pvc-protection controller: the finalizer off a claim being deleted once no pod bound
/// to a node mounts it (`used`), on a claim that lacks it.
pub fn protect_claim(claim: &Value, used: bool) -> Option<Value> {
    protect(claim, PVC_PROTECTION, used)
}

fn protect(v: &Value, finalizer: &str, used: bool) -> Option<Value> {
    let mut out = v.clone();
    let changed = if deleting(v) {
        has_finalizer(v, finalizer) && !used && remove_finalizer(&mut out, finalizer)
    } else {
        add_finalizer(&mut out, finalizer)
    };
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(volume_name: &str) -> Value {
        json!({"metadata": {"name": "data", "namespace": "ns", "uid": "c-1", "resourceVersion": "7"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "", "volumeMode": "Filesystem", "volumeName": volume_name},
            "status": {"phase": "Pending"}})
    }

    fn volume(name: &str, claim_ref: Value) -> Value {
        json!({"metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                "volumeMode": "Filesystem", "claimRef": claim_ref,
                "csi": {"driver": "d.example.com", "volumeHandle": name}},
            "status": {"phase": "Pending"}})
    }

    /// tests/golden/206-207: a pre-bound pair is bound without bound-by-controller.
    #[test]
    fn a_pre_bound_pair_is_bound_as_its_user_named_it() {
        let c = claim("pv-1");
        let v = volume("pv-1", json!({"namespace": "ns", "name": "data"}));
        let Some(ClaimStep::Bind {
            volume: Some(v),
            claim: Some(c),
        }) = sync_claim(&c, Some(&v), None, "t1")
        else {
            panic!("not bound");
        };
        assert_eq!(
            v["spec"]["claimRef"],
            json!({"kind": "PersistentVolumeClaim", "namespace": "ns", "name": "data",
                "uid": "c-1", "apiVersion": "v1", "resourceVersion": "7"})
        );
        assert!(v["metadata"]["annotations"].is_null(), "{v}");
        assert_eq!(
            v["status"],
            json!({"phase": "Bound", "lastPhaseTransitionTime": "t1"})
        );
        assert_eq!(c["metadata"]["annotations"], json!({BIND_COMPLETED: "yes"}));
        assert_eq!(
            c["status"],
            json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}})
        );
        // Bound: nothing more to do, from either side.
        assert_eq!(sync_claim(&c, Some(&v), None, "t2"), None);
        assert_eq!(sync_volume(&v, Some(&c), "t2"), None);
    }

    #[test]
    fn an_unnamed_claim_gets_the_smallest_available_volume_that_fits() {
        let c = claim("");
        let mut big = volume("big", Value::Null);
        big["spec"]["capacity"]["storage"] = json!("10Gi");
        let mut small = volume("small", Value::Null);
        small["spec"]["capacity"]["storage"] = json!("2Gi");
        let mut tiny = volume("tiny", Value::Null);
        tiny["spec"]["capacity"]["storage"] = json!("512Mi");
        let mut other = volume("other", json!({"namespace": "ns", "name": "else"}));
        other["spec"]["capacity"]["storage"] = json!("1Gi");
        let vols: Vec<Value> = [big, small, tiny, other]
            .into_iter()
            .map(|mut v| {
                v["status"]["phase"] = json!("Available");
                v
            })
            .collect();
        let m = best_match(&c, vols.iter(), false).unwrap();
        assert_eq!(m["metadata"]["name"], "small");
        assert!(
            best_match(&c, vols.iter(), true).is_none(),
            "WaitForFirstConsumer"
        );
        let Some(ClaimStep::Bind {
            volume: Some(v),
            claim: Some(c),
        }) = sync_claim(&c, None, Some(m), "t")
        else {
            panic!("not bound");
        };
        assert_eq!(
            v["metadata"]["annotations"],
            json!({BOUND_BY_CONTROLLER: "yes"})
        );
        assert_eq!(c["spec"]["volumeName"], "small");
        assert_eq!(c["status"]["capacity"], json!({"storage": "2Gi"}));
        assert_eq!(
            c["metadata"]["annotations"],
            json!({BOUND_BY_CONTROLLER: "yes", BIND_COMPLETED: "yes"})
        );
    }

    /// tests/golden/225: its claim gone, a bound volume is Released, then unprotected.
    #[test]
    fn a_volume_whose_claim_is_gone_is_released_and_loses_its_protection() {
        let mut v = volume(
            "pv-1",
            json!({"namespace": "ns", "name": "data", "uid": "c-1"}),
        );
        v["status"]["phase"] = json!("Bound");
        v["metadata"]["finalizers"] = json!([PV_PROTECTION]);
        v["metadata"]["deletionTimestamp"] = json!("t0");
        assert_eq!(protect_volume(&v), None, "held while Bound");
        let released = sync_volume(&v, None, "t1").unwrap();
        assert_eq!(released["status"]["phase"], "Released");
        let gone = protect_volume(&released).unwrap();
        assert!(gone["metadata"]["finalizers"].is_null(), "{gone}");
        // A claim of the same name but another uid is not its claim.
        let mut c = claim("pv-1");
        c["metadata"]["uid"] = json!("c-2");
        assert_eq!(
            sync_volume(&v, Some(&c), "t1").unwrap()["status"]["phase"],
            "Released"
        );
    }

    /// tests/golden/221-224.
    #[test]
    fn a_claim_in_use_keeps_its_protection_until_unused() {
        let mut c = claim("pv-1");
        assert_eq!(
            protect_claim(&c, false).unwrap()["metadata"]["finalizers"],
            json!([PVC_PROTECTION])
        );
        c["metadata"]["finalizers"] = json!([PVC_PROTECTION]);
        assert_eq!(protect_claim(&c, false), None);
        c["metadata"]["deletionTimestamp"] = json!("t0");
        assert_eq!(protect_claim(&c, true), None);
        assert!(protect_claim(&c, false).unwrap()["metadata"]["finalizers"].is_null());
    }

    #[test]
    fn a_bound_claim_whose_volume_is_gone_is_lost() {
        let mut c = claim("pv-1");
        c["status"] = json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}});
        assert_eq!(
            sync_claim(&c, None, None, "t"),
            Some(ClaimStep::Claim({
                let mut l = c.clone();
                l["status"] = json!({"phase": "Lost"});
                l
            }))
        );
    }
}
