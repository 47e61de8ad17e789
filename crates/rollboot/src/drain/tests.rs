//! The drain's tests: its rules, its phases against a fake [`DrainApi`], and its pure readings
//! (pod exit times).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Pod, PodSpec, PodStatus, Volume};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference, Time};

use super::hold::Cause;
use super::*;
use crate::config::Drain;
use crate::lease::NotLeader;
use crate::node::MIRROR_POD;
use crate::selector::Selector;

/// The drain's watch reads a pod for its identity only: the same as the whole pod's, from
/// a pod as kube-apiserver sends it (spec, status and managedFields skipped).
#[test]
fn a_pod_read_for_its_identity_is_the_whole_pods() {
    let json = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "demo", "uid": "u-1",
            "resourceVersion": "42", "labels": {"app": "web"},
            "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"}
    });
    let whole: Pod = serde_json::from_value(json.clone()).unwrap();
    let slim: crate::client::Slim<Pod, serde::de::IgnoredAny, serde::de::IgnoredAny> =
        serde_json::from_value(json).unwrap();
    assert_eq!(PodRef::of_meta(&slim.metadata), PodRef::of(&whole));
    assert_eq!(slim.metadata.resource_version.as_deref(), Some("42"));
    assert!(slim.metadata.labels.is_none() && slim.metadata.managed_fields.is_none());
}

fn pod(name: &str, owner: Option<&str>) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some(format!("uid-{name}"));
    p.metadata.labels = Some(BTreeMap::from([("app".to_string(), "web".to_string())]));
    p.metadata.owner_references = owner.map(|kind| {
        vec![OwnerReference {
            kind: kind.into(),
            name: "owner".into(),
            controller: Some(true),
            ..Default::default()
        }]
    });
    p.spec = Some(PodSpec::default());
    p.status = Some(PodStatus {
        phase: Some("Running".into()),
        ..Default::default()
    });
    p
}

fn cfg() -> Drain {
    Drain::default()
}

/// [`cfg`] asking again 1 ms after a refusal, for the tests that count refusals.
fn quick() -> Drain {
    Drain {
        eviction_retry_interval: crate::config::Duration::from_millis(1),
        ..cfg()
    }
}

#[test]
fn mirror_daemonset_and_deleting_pods_are_skipped() {
    let all = Selector::everything();
    let mut mirror = pod("m", None);
    mirror.metadata.annotations = Some(BTreeMap::from([(MIRROR_POD.to_string(), "x".to_string())]));
    assert_eq!(
        classify(&mirror, &cfg(), &all, false),
        Disposition::Skip(Reason::MirrorPod)
    );
    assert!(matches!(
        classify(&pod("d", Some("DaemonSet")), &cfg(), &all, true),
        Disposition::Skip(_)
    ));
    let mut going = pod("g", Some("ReplicaSet"));
    going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    assert_eq!(
        classify(&going, &cfg(), &all, false),
        Disposition::Skip(Reason::AlreadyDeleting)
    );
    assert_eq!(
        classify(&pod("r", Some("ReplicaSet")), &cfg(), &all, false),
        Disposition::Evict
    );
}

#[test]
fn a_pod_of_a_deleted_daemonset_is_evicted() {
    let p = pod("orphan", Some("DaemonSet"));
    assert_eq!(
        classify(&p, &cfg(), &Selector::everything(), false),
        Disposition::Evict
    );
}

#[test]
fn unreplicated_and_empty_dir_pods_need_the_config_to_allow_them() {
    let all = Selector::everything();
    assert!(matches!(
        classify(&pod("bare", None), &cfg(), &all, false),
        Disposition::Refuse(_)
    ));
    let c = Drain {
        evict_unreplicated: true,
        ..cfg()
    };
    assert_eq!(
        classify(&pod("bare", None), &c, &all, false),
        Disposition::Evict
    );
    let mut scratch = pod("scratch", Some("ReplicaSet"));
    scratch.spec.as_mut().unwrap().volumes = Some(vec![Volume {
        name: "tmp".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }]);
    assert!(matches!(
        classify(&scratch, &cfg(), &all, false),
        Disposition::Refuse(_)
    ));
    let c = Drain {
        delete_empty_dir_data: true,
        ..cfg()
    };
    assert_eq!(classify(&scratch, &c, &all, false), Disposition::Evict);
    // A finished pod is removable whatever it is.
    let mut done = pod("job", None);
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    assert_eq!(classify(&done, &cfg(), &all, false), Disposition::Evict);
}

/// A fake API: a budget that refuses `blocked_for` evictions, then allows them.
struct Fake {
    pods: Vec<Pod>,
    blocked_for: Mutex<u32>,
    overlapping_for: Mutex<u32>,
    evictions: Mutex<Vec<String>>,
    deletions: Mutex<Vec<String>>,
    events: Mutex<Vec<String>>,
    /// The budget's `status.disruptedPods`.
    disrupted: Mutex<BTreeMap<String, DateTime<Utc>>>,
    /// What `pod_deleting` answers per pod name (absent: gone).
    pod_states: Mutex<BTreeMap<String, Option<bool>>>,
    /// 5xx messages answered (first to last) before anything else.
    server_errors: Mutex<Vec<String>>,
    /// A second budget, `odd-pdb`, whose selector cannot be evaluated.
    odd_budget: bool,
    /// When set, `wait_gone` sees every pod go this long after it is called.
    exit_after: Mutex<Option<chrono::TimeDelta>>,
    /// `web-pdb`'s `spec.maxUnavailable`, when it has one.
    max_unavailable: Option<i32>,
    /// Denials (400/403/422 messages) answered, first to last, before anything else.
    denials: Mutex<Vec<String>>,
    /// Claims (namespace/claim) and the PersistentVolume each is bound to.
    claims: BTreeMap<String, k8s_openapi::api::core::v1::PersistentVolume>,
    /// What `node_volumes` answers, first to last (the last one stays); empty: nothing attached.
    node_status: Mutex<Vec<volumes::NodeVolumes>>,
    /// The VolumeAttachments that exist.
    attachments: Mutex<BTreeSet<String>>,
    /// Every call that matters for the order, in order: `evict NAME`, `nodeVolumes`,
    /// `record N` (the volumes in the Node's record after the write).
    calls: Mutex<Vec<String>>,
    /// The Node's record of the volumes its drain waits for.
    recorded: Mutex<BTreeSet<volumes::Volume>>,
    /// Answers given first to last before anything else, whatever the pod.
    script: Mutex<std::collections::VecDeque<Scripted>>,
    /// What `budget_room` waits for: a budget's watch seeing it allow a disruption.
    room: tokio::sync::Notify,
}

/// One answer of [`Fake::script`].
enum Scripted {
    /// Refused by `web-pdb`, with no Retry-After (as kube-apiserver refuses for a budget
    /// with no disruption left).
    Blocked,
    /// Accepted.
    Accepted,
    /// Admitted into `web-pdb`'s `disruptedPods`, the pod never deleted, answered 504: the
    /// evicting request was cut off between the two writes.
    Abandoned,
}

impl Fake {
    fn new(pods: Vec<Pod>, blocked_for: u32) -> Fake {
        Fake {
            pods,
            blocked_for: Mutex::new(blocked_for),
            overlapping_for: Mutex::new(0),
            evictions: Mutex::default(),
            deletions: Mutex::default(),
            events: Mutex::default(),
            disrupted: Mutex::default(),
            pod_states: Mutex::default(),
            server_errors: Mutex::default(),
            odd_budget: false,
            exit_after: Mutex::default(),
            max_unavailable: None,
            denials: Mutex::default(),
            claims: BTreeMap::new(),
            node_status: Mutex::default(),
            attachments: Mutex::default(),
            calls: Mutex::default(),
            recorded: Mutex::default(),
            script: Mutex::default(),
            room: tokio::sync::Notify::new(),
        }
    }
}

impl DrainApi for Fake {
    async fn list_pods(&self, _node: &str) -> Result<Vec<Pod>, DrainError> {
        // An evicted pod is gone (the fake's pods go at once).
        let evicted = self.evictions.lock().unwrap().clone();
        Ok(self
            .pods
            .iter()
            .filter(|p| !evicted.contains(p.metadata.name.as_ref().unwrap()))
            .cloned()
            .collect())
    }
    async fn daemon_set_exists(&self, _: &str, _: &str) -> Result<bool, DrainError> {
        Ok(true)
    }
    async fn evict(&self, pod: &PodRef, _: Option<i64>) -> Result<Evicted, DrainError> {
        self.evictions.lock().unwrap().push(pod.name.clone());
        self.calls
            .lock()
            .unwrap()
            .push(format!("evict {}", pod.name));
        let message = "The disruption budget web-pdb needs 2 healthy pods and has 2 currently";
        let blocked = || Evicted::Blocked {
            message: message.into(),
            retry_after: Some(Duration::from_millis(5)),
        };
        match self.script.lock().unwrap().pop_front() {
            Some(Scripted::Blocked) => {
                return Ok(Evicted::Blocked {
                    message: message.into(),
                    retry_after: None,
                })
            }
            Some(Scripted::Accepted) => return Ok(Evicted::Accepted),
            Some(Scripted::Abandoned) => {
                self.disrupted
                    .lock()
                    .unwrap()
                    .insert(pod.name.clone(), Utc::now());
                self.pod_states
                    .lock()
                    .unwrap()
                    .insert(pod.name.clone(), Some(false));
                return Ok(Evicted::ServerError(
                    "Timeout: request did not complete within requested timeout".into(),
                ));
            }
            None => {}
        }
        let mut denials = self.denials.lock().unwrap();
        if !denials.is_empty() {
            return Ok(Evicted::Denied(denials.remove(0)));
        }
        drop(denials);
        let mut errors = self.server_errors.lock().unwrap();
        if !errors.is_empty() {
            return Ok(Evicted::ServerError(errors.remove(0)));
        }
        drop(errors);
        let mut o = self.overlapping_for.lock().unwrap();
        if *o > 0 {
            *o -= 1;
            return Ok(Evicted::ServerError(
                "This pod has more than one PodDisruptionBudget".into(),
            ));
        }
        let mut b = self.blocked_for.lock().unwrap();
        if *b > 0 {
            *b -= 1;
            return Ok(blocked());
        }
        Ok(Evicted::Accepted)
    }
    async fn budget_room(&self, _: &str, _: &str) {
        self.room.notified().await
    }
    async fn delete(&self, pod: &PodRef) -> Result<(), DrainError> {
        self.deletions.lock().unwrap().push(pod.name.clone());
        Ok(())
    }
    async fn budgets(
        &self,
        _: &str,
        _: &[BTreeMap<String, String>],
    ) -> Result<Vec<PodDisruptionBudget>, DrainError> {
        let mut b = PodDisruptionBudget::default();
        b.metadata.name = Some("web-pdb".into());
        b.spec = Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
                ..Default::default()
            }),
            max_unavailable: self
                .max_unavailable
                .map(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int),
            ..Default::default()
        });
        let disrupted = self.disrupted.lock().unwrap().clone();
        if !disrupted.is_empty() {
            b.status = Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus {
                disrupted_pods: Some(
                    disrupted
                        .into_iter()
                        .map(|(k, t)| (k, Time(crate::time::to_jiff(t))))
                        .collect(),
                ),
                ..Default::default()
            });
        }
        let mut out = vec![b];
        if self.odd_budget {
            let mut odd = PodDisruptionBudget::default();
            odd.metadata.name = Some("odd-pdb".into());
            odd.spec = Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_expressions: Some(vec![
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                            key: "app".into(),
                            operator: "In".into(),
                            values: None,
                        },
                    ]),
                    ..Default::default()
                }),
                ..Default::default()
            });
            out.push(odd);
        }
        Ok(out)
    }
    async fn pod_deleting(&self, _: &str, name: &str) -> Result<Option<bool>, DrainError> {
        Ok(self.pod_states.lock().unwrap().get(name).copied().flatten())
    }
    async fn event(&self, _: Option<&PodRef>, _: bool, reason: &str, note: String) {
        self.events
            .lock()
            .unwrap()
            .push(format!("{reason}: {note}"));
    }
    async fn namespace_labels(&self, name: &str) -> Result<BTreeMap<String, String>, DrainError> {
        Ok(BTreeMap::from([("name".to_string(), name.to_string())]))
    }
    async fn claimed_volume(
        &self,
        namespace: &str,
        claim: &str,
    ) -> Result<Option<k8s_openapi::api::core::v1::PersistentVolume>, DrainError> {
        Ok(self.claims.get(&format!("{namespace}/{claim}")).cloned())
    }
    async fn attach_required(&self, _: &str) -> Result<Option<bool>, DrainError> {
        Ok(Some(true))
    }
    async fn node_volumes(
        &self,
        _: &str,
        _: Option<String>,
        _: DateTime<Utc>,
    ) -> Result<(volumes::NodeVolumes, String), DrainError> {
        let mut calls = self.calls.lock().unwrap();
        calls.push("nodeVolumes".into());
        let n = calls.len();
        drop(calls);
        let mut status = self.node_status.lock().unwrap();
        let mut s = if status.len() > 1 {
            status.remove(0)
        } else {
            status.first().cloned().unwrap_or_default()
        };
        s.recorded = self.recorded.lock().unwrap().clone();
        Ok((s, n.to_string()))
    }
    async fn record_volumes(
        &self,
        _: &str,
        volumes: &BTreeSet<volumes::Volume>,
    ) -> Result<(), DrainError> {
        *self.recorded.lock().unwrap() = volumes.clone();
        self.calls
            .lock()
            .unwrap()
            .push(format!("record {}", volumes.len()));
        Ok(())
    }
    async fn attachments(&self, names: &[String]) -> Result<BTreeSet<String>, DrainError> {
        let exist = self.attachments.lock().unwrap();
        Ok(names
            .iter()
            .filter(|n| exist.contains(*n))
            .cloned()
            .collect())
    }
    async fn wait_gone(
        &self,
        _: &str,
        pods: &[PodRef],
        _: DateTime<Utc>,
    ) -> Result<Gone, DrainError> {
        // Each pod goes `exit_after` after the call, seen going by the watch.
        let seen_going = match *self.exit_after.lock().unwrap() {
            Some(after) => pods
                .iter()
                .map(|p| (p.clone(), Utc::now() + after))
                .collect(),
            None => BTreeMap::new(),
        };
        Ok(Gone {
            left: Vec::new(),
            seen_going,
        })
    }
}

fn ok() -> Result<(), NotLeader> {
    Ok(())
}

/// What the health gate gets for pods made by [`pod`].
fn web_labels() -> BTreeSet<(String, BTreeMap<String, String>)> {
    BTreeSet::from([(
        "default".to_string(),
        BTreeMap::from([("app".to_string(), "web".to_string())]),
    )])
}

/// Drains node `n1` of `api`, every pod selected, with `within` to go.
async fn drain_n1(
    api: &Fake,
    cfg: &Drain,
    within: chrono::Duration,
    ensure: &(dyn Fn() -> Result<(), NotLeader> + Sync),
) -> Result<Drained, DrainError> {
    drain(
        api,
        "n1",
        cfg,
        &Selector::everything(),
        Utc::now() + within,
        ensure,
    )
    .await
}

#[tokio::test]
async fn pods_found_terminating_are_not_evicted_again_but_go_to_the_health_gate() {
    // An earlier leader evicted web-0 and died before recording the reboot.
    let mut going = pod("web-0", Some("ReplicaSet"));
    going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    let api = Fake::new(vec![going.clone(), pod("web-1", Some("ReplicaSet"))], 0);
    let d = drain_n1(&api, &cfg(), chrono::Duration::seconds(30), &ok)
        .await
        .unwrap();
    assert_eq!(*api.evictions.lock().unwrap(), vec!["web-1".to_string()]);
    assert_eq!(d.pods, web_labels());
    assert_eq!(
        d.owners,
        BTreeSet::from([("ReplicaSet".into(), "default".into(), "owner".into())])
    );
    // Found with nothing left to evict, the drain still records what the gate waits for.
    let api = Fake::new(vec![going], 0);
    let d = drain_n1(&api, &cfg(), chrono::Duration::seconds(30), &ok)
        .await
        .unwrap();
    assert!(api.evictions.lock().unwrap().is_empty());
    assert_eq!(d.pods, web_labels());
}

#[tokio::test]
async fn the_drain_measures_how_long_its_evicted_pods_take_to_go() {
    let api = Fake::new(
        vec![
            pod("web-1", Some("ReplicaSet")),
            pod("web-2", Some("ReplicaSet")),
        ],
        0,
    );
    *api.exit_after.lock().unwrap() = Some(chrono::TimeDelta::seconds(7));
    let d = drain_n1(&api, &cfg(), chrono::Duration::seconds(30), &ok)
        .await
        .unwrap();
    let secs = d.pod_exit_seconds.expect("both pods were seen going");
    assert!((7.0..8.0).contains(&secs), "{secs}");
    // Pods gone before the watch looked give no figure rather than a made-up one.
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
    let d = drain_n1(&api, &cfg(), chrono::Duration::seconds(30), &ok)
        .await
        .unwrap();
    assert_eq!(d.pod_exit_seconds, None);
}

#[test]
fn the_exit_median_counts_only_pods_evicted_and_seen_going() {
    let t0 = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
    let p = |n: &str| PodRef {
        namespace: "ns".into(),
        name: n.into(),
        uid: format!("uid-{n}"),
    };
    let s = chrono::TimeDelta::seconds;
    let accepted = BTreeMap::from([(p("a"), t0), (p("b"), t0 + s(10)), (p("c"), t0)]);
    // c's going was not seen; d was found terminating, never evicted by this drain.
    let seen = BTreeMap::from([(p("a"), t0 + s(2)), (p("b"), t0 + s(14)), (p("d"), t0)]);
    assert_eq!(median_exit_seconds(&accepted, &seen), Some(3.0));
    assert_eq!(median_exit_seconds(&accepted, &BTreeMap::new()), None);
}

#[tokio::test]
async fn an_eviction_refused_by_a_budget_is_retried_and_named_in_an_event() {
    let api = Fake::new(
        vec![
            pod("web-1", Some("ReplicaSet")),
            pod("ds", Some("DaemonSet")),
        ],
        3,
    );
    let d = drain_n1(&api, &cfg(), chrono::Duration::seconds(30), &ok)
        .await
        .unwrap();
    assert_eq!(
        api.evictions.lock().unwrap().len(),
        4,
        "three refusals then success"
    );
    assert!(api.deletions.lock().unwrap().is_empty());
    let events = api.events.lock().unwrap();
    assert_eq!(
        events.len(),
        1,
        "one Event per blocked pod, not per retry: {events:?}"
    );
    assert!(events[0].contains("default/web-pdb"), "{events:?}");
    assert_eq!(d.pods, web_labels());
    assert_eq!(d.evicted.len(), 1, "the DaemonSet pod stays");
}

#[tokio::test]
async fn a_budget_whose_selector_cannot_be_read_is_named_as_covering_with_a_warning() {
    let mut api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 1);
    api.odd_budget = true;
    drain_n1(&api, &cfg(), chrono::Duration::seconds(30), &ok)
        .await
        .unwrap();
    let events = api.events.lock().unwrap();
    let unreadable: Vec<&String> = events
        .iter()
        .filter(|e| e.starts_with("BudgetSelectorUnreadable: "))
        .collect();
    assert_eq!(unreadable.len(), 1, "{events:?}");
    assert!(
        unreadable[0].contains("PodDisruptionBudget default/odd-pdb (")
            && unreadable[0].contains("operator `In` has no values")
            && unreadable[0].contains("node n1")
            && !unreadable[0].contains("web-pdb"),
        "{}",
        unreadable[0]
    );
    let blocked = events
        .iter()
        .find(|e| e.starts_with("EvictionBlocked"))
        .unwrap();
    assert!(
        blocked.contains("default/web-pdb") && blocked.contains("default/odd-pdb"),
        "{blocked}"
    );
}

#[tokio::test]
async fn a_server_error_is_retried_with_an_event_naming_the_overlapping_budgets() {
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
    *api.overlapping_for.lock().unwrap() = 2;
    let c = Drain {
        eviction_retry_interval: crate::config::Duration::from_millis(5),
        ..cfg()
    };
    drain_n1(&api, &c, chrono::Duration::seconds(5), &ok)
        .await
        .unwrap();
    assert_eq!(api.evictions.lock().unwrap().len(), 3);
    let events = api.events.lock().unwrap();
    assert!(
        events
            .iter()
            .all(|e| e.starts_with("EvictionFailed") && e.contains("default/web-pdb")),
        "{events:?}"
    );
    assert!(api.deletions.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_server_timeout_is_retried_without_blaming_overlapping_budgets() {
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
    api.server_errors
        .lock()
        .unwrap()
        .push("Timeout: request did not complete within requested timeout".into());
    let c = Drain {
        eviction_retry_interval: crate::config::Duration::from_millis(5),
        ..cfg()
    };
    drain_n1(&api, &c, chrono::Duration::seconds(5), &ok)
        .await
        .unwrap();
    assert_eq!(api.evictions.lock().unwrap().len(), 2, "retried once");
    let events = api.events.lock().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        events[0].starts_with("EvictionFailed") && events[0].contains("Timeout"),
        "{events:?}"
    );
    assert!(!events[0].contains("overlapping"), "{events:?}");
}

#[tokio::test]
async fn a_refusal_by_a_budget_holding_a_phantom_disruption_says_so_in_its_event() {
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 2);
    let since = Utc::now() - chrono::Duration::seconds(30);
    api.disrupted.lock().unwrap().insert("web-0".into(), since);
    api.pod_states
        .lock()
        .unwrap()
        .insert("web-0".into(), Some(false));
    drain_n1(&api, &cfg(), chrono::Duration::seconds(5), &ok)
        .await
        .unwrap();
    let events = api.events.lock().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        events[0].starts_with("EvictionBlocked")
            && events[0].contains("counts pod web-0 as disrupted")
            && events[0].contains("not being deleted")
            && events[0].contains("Kubernetes stops counting it"),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_phantom_that_appears_after_the_budgets_were_first_read_is_still_explained() {
    // web-1 is refused (the budgets are read for its Event, nothing disrupted yet), then
    // accepted; web-2's eviction is admitted into the budget and cut off (504), and its
    // retry is refused by that very entry: the Event must name it, read then, not from the
    // drain's first read of the budgets.
    let api = Fake::new(
        vec![
            pod("web-1", Some("ReplicaSet")),
            pod("web-2", Some("ReplicaSet")),
        ],
        0,
    );
    api.script.lock().unwrap().extend([
        Scripted::Blocked,
        Scripted::Accepted,
        Scripted::Abandoned,
        Scripted::Blocked,
    ]);
    let c = Drain {
        concurrent_evictions: 1,
        ..quick()
    };
    drain_n1(&api, &c, chrono::Duration::seconds(5), &ok)
        .await
        .unwrap();
    let events = api.events.lock().unwrap();
    let web2 = events
        .iter()
        .find(|e| e.starts_with("EvictionBlocked") && e.contains("default/web-2"))
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(
        web2.contains("counts pod web-2 as disrupted") && web2.contains("not being deleted"),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_refused_eviction_is_asked_again_when_its_budget_gets_room_not_only_after_the_interval() {
    // Refused with no Retry-After; the interval and the deadline are an hour away, so only
    // the budget's watch seeing room brings the second, accepted, eviction within the
    // test's 10 s.
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
    api.script.lock().unwrap().push_back(Scripted::Blocked);
    let c = Drain {
        eviction_retry_interval: crate::config::Duration::from_secs(3600),
        ..cfg()
    };
    let drain = tokio::time::timeout(
        Duration::from_secs(10),
        drain_n1(&api, &c, chrono::Duration::hours(1), &ok),
    );
    let (drained, ()) = tokio::join!(drain, async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        api.room.notify_one();
    });
    drained
        .expect("asked again when the budget had room")
        .unwrap();
    assert_eq!(
        *api.evictions.lock().unwrap(),
        vec!["web-1".to_string(), "web-1".to_string()]
    );
}

#[tokio::test]
async fn a_refused_eviction_without_news_of_room_waits_its_interval() {
    // The same refusals, the budget never seen with room: asked once, then once more at the
    // deadline (the interval cut short by it), and the pod is stuck there.
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
    api.script
        .lock()
        .unwrap()
        .extend([Scripted::Blocked, Scripted::Blocked]);
    let c = Drain {
        eviction_retry_interval: crate::config::Duration::from_secs(3600),
        ..cfg()
    };
    let err = drain_n1(&api, &c, chrono::Duration::milliseconds(300), &ok)
        .await
        .unwrap_err();
    assert!(matches!(err, DrainError::Timeout { .. }), "{err}");
    assert_eq!(api.evictions.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn evicting_past_an_exhausted_budget_waits_and_never_deletes() {
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], u32::MAX);
    let err = drain_n1(&api, &cfg(), chrono::Duration::milliseconds(100), &ok)
        .await
        .unwrap_err();
    assert!(
        matches!(err, DrainError::Timeout { ref pods, .. } if pods.len() == 1),
        "{err}"
    );
    assert!(
        api.deletions.lock().unwrap().is_empty(),
        "nothing is deleted around a budget"
    );
}

/// Two pods under `web-pdb` with `maxUnavailable: 0`, every eviction refused.
fn never_allowing() -> Fake {
    Fake {
        max_unavailable: Some(0),
        ..Fake::new(
            vec![
                pod("web-1", Some("ReplicaSet")),
                pod("web-2", Some("ReplicaSet")),
            ],
            u32::MAX,
        )
    }
}

#[tokio::test]
async fn a_budget_that_never_allows_fails_the_drain_at_its_first_refusal_naming_it() {
    let api = never_allowing();
    let started = std::time::Instant::now();
    let err = drain_n1(&api, &cfg(), chrono::Duration::seconds(60), &ok)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "failed after {:?}, not at once",
        started.elapsed()
    );
    let text = err.to_string();
    assert!(
        matches!(&err, DrainError::Held { held, .. } if held.cause == Cause::Never && held.budget == "default/web-pdb"),
        "{err:?}"
    );
    assert!(
        text.contains("PodDisruptionBudget default/web-pdb can never allow a disruption (maxUnavailable is 0)")
            && text.contains("drain.whenBlocked.never is fail"),
        "{text}"
    );
    let events = api.events.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("BudgetNeverAllows") && e.contains("web-pdb")),
        "{events:?}"
    );
    assert!(
        api.deletions.lock().unwrap().is_empty(),
        "nothing is deleted around a budget"
    );
}

#[tokio::test]
async fn a_budget_that_never_allows_is_waited_for_when_the_config_says_wait() {
    let api = never_allowing();
    let c = Drain {
        when_blocked: crate::config::WhenBlocked {
            never: Some(crate::config::BlockPolicy::Wait),
            ..Default::default()
        },
        ..cfg()
    };
    let err = drain_n1(&api, &c, chrono::Duration::milliseconds(100), &ok)
        .await
        .unwrap_err();
    assert!(
        matches!(err, DrainError::Timeout { ref pods, .. } if pods.len() == 2),
        "{err}"
    );
    // With forceDeleteAfterTimeout and `never` unset, the pods are deleted at the timeout, as
    // before the key was there.
    let api = never_allowing();
    let c = Drain {
        force_delete_after_timeout: true,
        ..cfg()
    };
    drain_n1(&api, &c, chrono::Duration::milliseconds(100), &ok)
        .await
        .unwrap();
    assert_eq!(api.deletions.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_budget_at_zero_now_fails_at_once_only_when_the_config_says_fail() {
    // web-pdb has no spec that refuses for good: its refusals are `budget`, waited for by
    // default (the other tests), failed at once here.
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], u32::MAX);
    let c = Drain {
        when_blocked: crate::config::WhenBlocked {
            budget: crate::config::BlockPolicy::Fail,
            ..Default::default()
        },
        ..cfg()
    };
    let err = drain_n1(&api, &c, chrono::Duration::seconds(60), &ok)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("PodDisruptionBudget default/web-pdb allows no disruption now (The disruption budget web-pdb needs 2 healthy pods")
            && err.to_string().contains("drain.whenBlocked.budget is fail"),
        "{err}"
    );
    assert_eq!(
        api.evictions.lock().unwrap().len(),
        1,
        "asked once, not again"
    );
}

const WEBHOOK: &str = "admission webhook \"drain-cleaner.example\" denied the request: move the partition leader first";

#[tokio::test]
async fn an_eviction_denied_the_same_way_three_times_fails_the_drain_naming_the_answer() {
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
    *api.denials.lock().unwrap() = vec![WEBHOOK.to_string(); 10];
    let c = quick();
    let err = drain_n1(&api, &c, chrono::Duration::seconds(60), &ok)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DrainError::Held { held, .. } if held.cause == Cause::Denied),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("the Eviction API denied it 3 times in a row with the same answer")
            && text.contains("move the partition leader first")
            && text.contains("drain.whenBlocked.denied is fail"),
        "{text}"
    );
    assert_eq!(api.evictions.lock().unwrap().len(), 3, "asked three times");
    let events = api.events.lock().unwrap().clone();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("EvictionDenied"))
            .count(),
        1,
        "one Event for the same answer: {events:?}"
    );
}

#[tokio::test]
async fn a_denial_that_changes_or_passes_is_not_denied_for_good() {
    // Two different answers, then one of them twice more, then accepted: never three of the
    // same in a row, so the drain goes on and ends.
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
    *api.denials.lock().unwrap() = vec![
        WEBHOOK.to_string(),
        WEBHOOK.to_string(),
        "admission webhook \"drain-cleaner.example\" denied the request: leader moving".into(),
        WEBHOOK.to_string(),
    ];
    let c = quick();
    drain_n1(&api, &c, chrono::Duration::seconds(60), &ok)
        .await
        .unwrap();
    assert_eq!(api.evictions.lock().unwrap().len(), 5);
    // `denied: wait` asks again until the timeout instead.
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
    *api.denials.lock().unwrap() = vec![WEBHOOK.to_string(); 1000];
    let c = Drain {
        when_blocked: crate::config::WhenBlocked {
            denied: crate::config::BlockPolicy::Wait,
            ..Default::default()
        },
        ..quick()
    };
    let err = drain_n1(&api, &c, chrono::Duration::milliseconds(200), &ok)
        .await
        .unwrap_err();
    assert!(matches!(err, DrainError::Timeout { .. }), "{err}");
    assert!(api.evictions.lock().unwrap().len() > 3);
}

#[tokio::test]
async fn force_delete_after_timeout_deletes_only_when_configured() {
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], u32::MAX);
    let c = Drain {
        force_delete_after_timeout: true,
        ..cfg()
    };
    drain_n1(&api, &c, chrono::Duration::milliseconds(50), &ok)
        .await
        .unwrap();
    assert_eq!(*api.deletions.lock().unwrap(), ["web-1"]);
}

#[tokio::test]
async fn a_drain_that_loses_leadership_stops_before_evicting() {
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
    let lost = || {
        Err(NotLeader {
            identity: "c-0".into(),
        })
    };
    let err = drain_n1(&api, &cfg(), chrono::Duration::seconds(5), &lost)
        .await
        .unwrap_err();
    assert!(matches!(err, DrainError::NotLeader(_)));
    assert!(api.evictions.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_unreplicated_pod_fails_the_drain_before_any_eviction() {
    let api = Fake::new(vec![pod("web-1", Some("ReplicaSet")), pod("bare", None)], 0);
    let err = drain_n1(&api, &cfg(), chrono::Duration::seconds(5), &ok)
        .await
        .unwrap_err();
    assert!(matches!(err, DrainError::Refused { .. }), "{err}");
    assert!(api.evictions.lock().unwrap().is_empty());
}

/// A StatefulSet-like pod `name` whose claim `data-NAME` is bound to a ReadWriteOnce CSI
/// volume `pv-NAME`, with the fake answering for the claim.
fn stateful(api: &mut Fake, name: &str, priority: i32) -> volumes::Volume {
    let mut p = pod(name, Some("StatefulSet"));
    let spec = p.spec.as_mut().unwrap();
    spec.priority = Some(priority);
    spec.volumes = Some(vec![Volume {
        name: "data".into(),
        persistent_volume_claim: Some(
            k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                claim_name: format!("data-{name}"),
                ..Default::default()
            },
        ),
        ..Default::default()
    }]);
    let pv = k8s_openapi::api::core::v1::PersistentVolume {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("pv-{name}")),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::PersistentVolumeSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            csi: Some(k8s_openapi::api::core::v1::CSIPersistentVolumeSource {
                driver: "rwo.csi.example".into(),
                volume_handle: format!("h-{name}"),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let v = volumes::Volume::of_pv(&pv, Some(true), "n1").unwrap();
    api.pods.push(p);
    api.claims.insert(format!("default/data-{name}"), pv);
    v
}

/// [`cfg`] looking at volumes every 5 ms, and failing a detach after 60 ms.
fn quick_detach() -> Drain {
    Drain {
        eviction_retry_interval: crate::config::Duration::from_millis(5),
        volumes: crate::config::Volumes {
            detach_timeout: crate::config::Duration::from_millis(60),
            ..Default::default()
        },
        ..cfg()
    }
}

fn attached(vs: &[&volumes::Volume]) -> volumes::NodeVolumes {
    let names: BTreeSet<String> = vs.iter().map(|v| v.unique.clone()).collect();
    volumes::NodeVolumes {
        attached: names.clone(),
        in_use: names,
        ..Default::default()
    }
}

#[tokio::test]
async fn the_default_order_evicts_pods_with_volumes_last_one_at_a_time_each_after_the_last_detached(
) {
    let mut api = Fake::new(vec![pod("web-1", Some("ReplicaSet"))], 0);
    let db1 = stateful(&mut api, "db-1", 0);
    let db0 = stateful(&mut api, "db-0", 0);
    // The first read is the Node's record's; then db-0's volume shows for two reads after
    // its pod is gone, then db-1's for one.
    *api.node_status.lock().unwrap() = vec![
        attached(&[&db0, &db1]),
        attached(&[&db0, &db1]),
        attached(&[&db0, &db1]),
        attached(&[&db1]),
        attached(&[&db1]),
        attached(&[]),
    ];
    let d = drain_n1(&api, &cfg(), chrono::Duration::seconds(5), &ok)
        .await
        .unwrap();
    assert_eq!(
        *api.calls.lock().unwrap(),
        [
            "evict web-1",
            // The Node's record read, then written with db-0's volume, before its eviction.
            "nodeVolumes",
            "record 1",
            "evict db-0",
            "nodeVolumes",
            "nodeVolumes",
            "nodeVolumes",
            "record 2",
            "evict db-1",
            "nodeVolumes",
            "nodeVolumes",
            // The last look, for volumes no pod on the node uses: the two recorded, looked
            // at once more (gone).
            "nodeVolumes",
            "nodeVolumes"
        ]
    );
    let labels: Vec<&str> = d.parts.iter().map(|p| p.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "priority 0",
            "volumes: default/db-0",
            "volumes: default/db-1"
        ]
    );
    assert_eq!(d.volumes.len(), 2);
}

#[tokio::test]
async fn a_volume_still_attached_past_the_detach_timeout_fails_the_node_naming_it() {
    let mut api = Fake::new(Vec::new(), 0);
    let db = stateful(&mut api, "db-0", 0);
    *api.node_status.lock().unwrap() = vec![volumes::NodeVolumes::default()];
    // Out of the node's status, but its VolumeAttachment stays (an attacher that never
    // finishes the detach).
    api.attachments
        .lock()
        .unwrap()
        .insert(db.attachment.clone());
    let c = quick_detach();
    let err = drain_n1(&api, &c, chrono::Duration::seconds(5), &ok)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, DrainError::Detach { .. }), "{text}");
    assert!(text.contains("PersistentVolume pv-db-0"), "{text}");
    assert!(text.contains(&db.attachment), "{text}");
    assert!(text.contains("drain.volumes.detachTimeout"), "{text}");
}

#[tokio::test]
async fn without_wait_for_detach_the_drain_ends_when_the_pods_are_gone() {
    let mut api = Fake::new(Vec::new(), 0);
    let db = stateful(&mut api, "db-0", 0);
    *api.node_status.lock().unwrap() = vec![attached(&[&db])];
    let c = Drain {
        volumes: crate::config::Volumes {
            wait_for_detach: false,
            ..Default::default()
        },
        ..cfg()
    };
    drain_n1(&api, &c, chrono::Duration::seconds(5), &ok)
        .await
        .unwrap();
    assert_eq!(*api.calls.lock().unwrap(), ["evict db-0"]);
}

#[tokio::test]
async fn a_resumed_drain_waits_for_volumes_no_pod_on_the_node_uses() {
    // The previous leader evicted db-0; its volume is still attached: the new drain finds no
    // pod to evict, and still waits for it.
    let mut api = Fake::new(Vec::new(), 0);
    let db = stateful(&mut api, "db-0", 0);
    api.pods.clear();
    *api.node_status.lock().unwrap() = vec![attached(&[&db]), attached(&[])];
    drain_n1(&api, &cfg(), chrono::Duration::seconds(5), &ok)
        .await
        .unwrap();
    assert_eq!(*api.calls.lock().unwrap(), ["nodeVolumes", "nodeVolumes"]);
}

#[tokio::test]
async fn a_resumed_drain_waits_for_the_recorded_volumes_whose_detach_has_begun() {
    // The previous leader recorded db-0's volume and evicted the pod; the detach has begun:
    // out of the node's status, only its VolumeAttachment is left. The new drain waits for it.
    let mut api = Fake::new(Vec::new(), 0);
    let db = stateful(&mut api, "db-0", 0);
    api.pods.clear();
    api.recorded.lock().unwrap().insert(db.clone());
    api.attachments
        .lock()
        .unwrap()
        .insert(db.attachment.clone());
    let c = quick_detach();
    let err = drain_n1(&api, &c, chrono::Duration::seconds(5), &ok)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&db.attachment), "{err}");
    // Once it is gone, the drain ends.
    api.attachments.lock().unwrap().clear();
    drain_n1(&api, &c, chrono::Duration::seconds(5), &ok)
        .await
        .unwrap();
}

#[tokio::test]
async fn order_rules_run_groups_in_order_skip_and_wait_for_completion() {
    let mut api = Fake::new(Vec::new(), 0);
    for (name, app) in [
        ("osd-0", "osd"),
        ("web-1", "web"),
        ("probe", "probe"),
        ("job-1", "job"),
    ] {
        let mut p = pod(name, Some("ReplicaSet"));
        p.metadata.labels = Some(BTreeMap::from([("app".to_string(), app.to_string())]));
        api.pods.push(p);
    }
    let yaml = "order:\n- {podSelector: app=osd, order: 10}\n- {podSelector: app=probe, behavior: skip}\n- {podSelector: app=job, behavior: waitCompleted, order: 5}\n";
    let c: Drain = yaml_serde::from_str(yaml).unwrap();
    // The job's pod is done on its own (the fake's list says Succeeded).
    let job = api
        .pods
        .iter_mut()
        .find(|p| p.metadata.name.as_deref() == Some("job-1"))
        .unwrap();
    job.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let d = drain_n1(&api, &c, chrono::Duration::seconds(5), &ok)
        .await
        .unwrap();
    assert_eq!(*api.evictions.lock().unwrap(), ["web-1", "osd-0"]);
    let labels: Vec<&str> = d.parts.iter().map(|p| p.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "order 0 no rule",
            "order 5 drain.order[2]",
            "order 10 drain.order[0]"
        ]
    );
}
