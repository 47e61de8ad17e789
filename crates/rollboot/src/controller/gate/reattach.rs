//! The wait for the volumes that moved with the evicted pods to be attached again where the
//! pods' replacements run (`drain.volumes.waitForReattach`), pure.
//!
//! Owns how a replacement is found (among the pods of the claim's namespace that carry the
//! evicted pod's labels, less those that name one pod, one revision or the node's topology:
//! the pod that mounts the
//! same claim, not being deleted), where each volume stands ([`Where`]), and [`Reattach`],
//! which keeps what is still waited for and says it. It must never do I/O, hold a client or
//! read a clock: the pods and VolumeAttachments are read by the health phase
//! ([`crate::controller::steps`]), which also bounds the wait; a timeout there is a warning,
//! never a failure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::drain::volumes::attachment_of_unique;
use crate::drain::{claims_of, Moved};

/// Labels that name one pod, one revision of its controller or the place it was bound to: a
/// replacement does not carry the evicted pod's values of them (a StatefulSet's replacement
/// keeps its pod's name anyway). The topology ones are copied from the Node onto the Pod at
/// binding by kube-apiserver's PodTopologyLabels admission (on by default since v1.35): a
/// replacement in another zone has another value, and a selector with the old one never finds
/// it (the real-control-plane suite's check 19 failed so, when db-0 moved from zone-b to
/// zone-c).
pub const PER_POD_LABELS: &[&str] = &[
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "controller-revision-hash",
    "pod-template-hash",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// The label selector (`k=v,...`) that lists the candidates for `m`'s replacement in its
/// namespace: the evicted pod's labels less [`PER_POD_LABELS`]; empty (the whole namespace)
/// for a pod that had no other label.
pub fn candidates_selector(m: &Moved) -> String {
    m.labels
        .iter()
        .filter(|(k, _)| !PER_POD_LABELS.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The replacement of `m`'s pod among `pods` (of its namespace): a pod not being deleted that
/// mounts the same claim, a scheduled one first, then the one named as the evicted pod.
pub fn replacement<'p>(m: &Moved, pods: &'p [Pod]) -> Option<&'p Pod> {
    let mut users: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(m.namespace.as_str()))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| claims_of(p).contains(&m.claim))
        .collect();
    users.sort_by_key(|p| {
        (
            node_of(p).is_none(),
            p.metadata.name.as_deref() != Some(m.pod.as_str()),
        )
    });
    users.first().copied()
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Where a moved volume stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Where {
    /// Not looked at yet.
    Unknown,
    /// No pod mounts its claim.
    NoPod,
    /// Its replacement `pod` is not scheduled.
    Unscheduled { pod: String },
    /// Its replacement `pod` runs on `node`, where `attachment` is absent or not attached.
    NotAttached {
        pod: String,
        node: String,
        attachment: String,
    },
    /// Attached on `node`, where its replacement `pod` runs.
    Attached { pod: String, node: String },
}

/// What to read next about `m`, given its replacement (if any) from the pods listed: `Err`
/// with where it stands when nothing more is to be read, `Ok((pod, node, attachment))` when
/// the VolumeAttachment `attachment` on `node` says it.
pub fn next_read(m: &Moved, pods: &[Pod]) -> Result<(String, String, String), Where> {
    let Some(p) = replacement(m, pods) else {
        return Err(Where::NoPod);
    };
    let pod = p.metadata.name.clone().unwrap_or_default();
    let Some(node) = node_of(p) else {
        return Err(Where::Unscheduled { pod });
    };
    match attachment_of_unique(&m.unique, node) {
        Some(a) => Ok((pod, node.to_string(), a)),
        // Not a CSI volume's name: nothing rollboot can follow (a drain waits for CSI ones
        // only, so a record does not hold one).
        None => Err(Where::Attached {
            pod,
            node: node.to_string(),
        }),
    }
}

/// The volumes waited for, and where each stands.
#[derive(Clone, Debug, Default)]
pub struct Reattach {
    volumes: BTreeMap<String, (Moved, Where)>,
}

impl Reattach {
    /// The wait for `moved` (by PersistentVolume: a volume two evicted pods shared is waited
    /// for once).
    pub fn new(moved: &[Moved]) -> Reattach {
        Reattach {
            volumes: moved
                .iter()
                .map(|m| (m.pv.clone(), (m.clone(), Where::Unknown)))
                .collect(),
        }
    }

    /// The volumes not yet attached where their replacement runs.
    pub fn pending(&self) -> Vec<Moved> {
        self.volumes
            .values()
            .filter(|(_, w)| !matches!(w, Where::Attached { .. }))
            .map(|(m, _)| m.clone())
            .collect()
    }

    /// Notes where volume `pv` stands.
    pub fn saw(&mut self, pv: &str, at: Where) {
        if let Some((_, w)) = self.volumes.get_mut(pv) {
            *w = at;
        }
    }

    /// Whether every volume is attached where its replacement runs.
    pub fn done(&self) -> bool {
        self.pending().is_empty()
    }

    /// Each volume not yet attached, as (PersistentVolume, where it stands in words).
    pub fn waiting(&self) -> Vec<(String, String)> {
        self.volumes
            .iter()
            .filter_map(|(pv, (m, w))| {
                let claim = format!("{}/{}", m.namespace, m.claim);
                let at = match w {
                    Where::Attached { .. } => return None,
                    Where::Unknown => "not read yet".to_string(),
                    Where::NoPod => format!("no pod mounts its claim {claim}"),
                    Where::Unscheduled { pod } => {
                        format!("the pod {}/{pod} that mounts its claim {claim} is not scheduled", m.namespace)
                    }
                    Where::NotAttached {
                        pod,
                        node,
                        attachment,
                    } => format!(
                        "the pod {}/{pod} that mounts its claim {claim} is on node {node}, where VolumeAttachment {attachment} is not attached",
                        m.namespace
                    ),
                };
                Some((pv.clone(), format!("PersistentVolume {pv}: {at}")))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::volumes::{attachment_name, unique_name};

    fn moved(pod: &str, claim: &str) -> Moved {
        Moved {
            pv: format!("pv-{claim}"),
            unique: unique_name("csi.example", &format!("h-{claim}")),
            namespace: "db".into(),
            claim: claim.into(),
            pod: pod.into(),
            labels: [
                ("app", "pg"),
                ("statefulset.kubernetes.io/pod-name", pod),
                ("controller-revision-hash", "pg-5d9"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        }
    }

    fn pod(name: &str, node: Option<&str>, claim: &str, deleting: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name, "namespace": "db",
                "deletionTimestamp": if deleting { Some("2026-01-01T00:00:00Z") } else { None },
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn candidates_are_listed_by_the_labels_the_replacement_shares() {
        assert_eq!(candidates_selector(&moved("pg-0", "data-pg-0")), "app=pg");
        // The zone and region kube-apiserver copied from the evicted pod's node at binding.
        let mut zoned = moved("pg-0", "data-pg-0");
        for (k, v) in [
            ("topology.kubernetes.io/zone", "zone-b"),
            ("topology.kubernetes.io/region", "r-1"),
        ] {
            zoned.labels.insert(k.into(), v.into());
        }
        assert_eq!(candidates_selector(&zoned), "app=pg");
        let mut bare = moved("solo", "c");
        bare.labels.clear();
        assert_eq!(candidates_selector(&bare), "");
    }

    #[test]
    fn the_replacement_mounts_the_claim_and_is_not_being_deleted() {
        let m = moved("pg-0", "data-pg-0");
        let pods = [
            pod("pg-0", Some("a"), "data-pg-0", true),
            pod("pg-1", Some("b"), "data-pg-1", false),
        ];
        assert_eq!(next_read(&m, &pods), Err(Where::NoPod));
        let pods = [pod("pg-0", None, "data-pg-0", false)];
        assert_eq!(
            next_read(&m, &pods),
            Err(Where::Unscheduled { pod: "pg-0".into() })
        );
        // A Deployment's replacement has another name; a scheduled one comes first.
        let pods = [
            pod("web-x", None, "data-pg-0", false),
            pod("web-y", Some("c"), "data-pg-0", false),
        ];
        let (p, node, attachment) = next_read(&m, &pods).unwrap();
        assert_eq!((p.as_str(), node.as_str()), ("web-y", "c"));
        assert_eq!(
            attachment,
            attachment_name("h-data-pg-0", "csi.example", "c")
        );
    }

    #[test]
    fn the_wait_ends_when_every_volume_is_attached_and_says_what_it_waits_for() {
        let a = moved("pg-0", "data-pg-0");
        let b = moved("pg-1", "data-pg-1");
        let mut r = Reattach::new(&[a.clone(), b.clone(), a.clone()]);
        assert_eq!(r.pending().len(), 2);
        r.saw(
            &a.pv,
            Where::Attached {
                pod: "pg-0".into(),
                node: "c".into(),
            },
        );
        r.saw(
            &b.pv,
            Where::NotAttached {
                pod: "pg-1".into(),
                node: "d".into(),
                attachment: "csi-1".into(),
            },
        );
        assert!(!r.done());
        let waiting = r.waiting();
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].0, b.pv);
        assert!(
            waiting[0].1.contains("db/pg-1") && waiting[0].1.contains("csi-1"),
            "{}",
            waiting[0].1
        );
        r.saw(&b.pv, Where::NoPod);
        assert!(r.waiting()[0]
            .1
            .contains("no pod mounts its claim db/data-pg-1"));
        r.saw(
            &b.pv,
            Where::Attached {
                pod: "pg-1".into(),
                node: "d".into(),
            },
        );
        assert!(r.done() && r.waiting().is_empty());
    }
}
