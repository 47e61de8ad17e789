//! What the cluster really did: watches with the admin client, started before anything else, that
//! record every version of every Node, the current Pods, the workload's readiness after each pod
//! change, every version of its PodDisruptionBudget and of the Leases in `rollboot-system`.
//!
//! Owns the recorded history ([`World`]) and waiting on it ([`Observer::wait`]). A watch resumes
//! from the last resourceVersion it saw, so no version is missed; if the server forgets that
//! version (410) the watch lists again and the gap is recorded, so a check can say its evidence
//! is incomplete instead of passing on it. It must never write to the cluster.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

/// An instant as seen by the suite (when an event arrived).
pub type At = DateTime<Utc>;

/// Taints the node-lifecycle controller puts on a node that is not Ready.
pub const LIFECYCLE_TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// One version of a Node, reduced to what the checks read.
#[derive(Clone, Debug)]
pub struct NodeVersion {
    /// When the suite saw it.
    pub at: At,
    /// Its resourceVersion.
    pub rv: String,
    /// Its `rollboot.dev/` annotations.
    pub rollboot: BTreeMap<String, String>,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// `key:effect` of each taint.
    pub taints: Vec<String>,
    /// The Ready condition is True.
    pub ready: bool,
    /// `status.nodeInfo.bootID`.
    pub boot_id: String,
    /// This "version" is the deletion.
    pub deleted: bool,
}

impl NodeVersion {
    fn from(n: &Node, deleted: bool) -> NodeVersion {
        NodeVersion {
            at: Utc::now(),
            rv: n.resource_version().unwrap_or_default(),
            rollboot: n
                .annotations()
                .iter()
                .filter(|(k, _)| k.starts_with("rollboot.dev/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            unschedulable: n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true),
            taints: n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .map(|ts| {
                    ts.iter()
                        .map(|t| format!("{}:{}", t.key, t.effect))
                        .collect()
                })
                .unwrap_or_default(),
            ready: n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True"),
            boot_id: n
                .status
                .as_ref()
                .and_then(|s| s.node_info.as_ref())
                .map(|i| i.boot_id.clone())
                .unwrap_or_default(),
            deleted,
        }
    }

    /// `rollboot.dev/state`.
    pub fn state(&self) -> Option<&str> {
        self.rollboot.get("rollboot.dev/state").map(String::as_str)
    }

    /// Whether annotation `rollboot.dev/KEY` is present.
    pub fn has(&self, key: &str) -> bool {
        self.rollboot.contains_key(&format!("rollboot.dev/{key}"))
    }

    /// The not-ready/unreachable taints it carries.
    pub fn lifecycle_taints(&self) -> Vec<&str> {
        self.taints
            .iter()
            .filter(|t| {
                LIFECYCLE_TAINTS
                    .iter()
                    .any(|k| t.starts_with(&format!("{k}:")))
            })
            .map(String::as_str)
            .collect()
    }
}

/// A Pod as it is now.
#[derive(Clone, Debug)]
pub struct PodInfo {
    /// `namespace/name`.
    pub key: String,
    /// `spec.nodeName`.
    pub node: Option<String>,
    /// Has a deletionTimestamp.
    pub deleting: bool,
    /// The Ready condition is True.
    pub ready: bool,
    /// Owned by a DaemonSet (a drain leaves it).
    pub daemon: bool,
    /// A pod of the workload's Deployment `demo/web`.
    pub web: bool,
}

impl PodInfo {
    fn from(p: &Pod) -> PodInfo {
        let ns = p.namespace().unwrap_or_default();
        PodInfo {
            key: format!("{ns}/{}", p.name_any()),
            node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
            deleting: p.metadata.deletion_timestamp.is_some(),
            ready: p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True"),
            daemon: p.owner_references().iter().any(|o| o.kind == "DaemonSet"),
            web: ns == "demo" && p.labels().get("app").map(String::as_str) == Some("web"),
        }
    }
}

/// The workload's health after one pod change: healthy = Ready and not being deleted, the way
/// the disruption controller counts a budget's healthy pods.
#[derive(Clone, Debug)]
pub struct Health {
    /// When.
    pub at: At,
    /// resourceVersion of the pod change.
    pub rv: String,
    /// Healthy web pods.
    pub healthy: usize,
    /// Web pods that are not: `ns/name (why)`.
    pub not_healthy: Vec<String>,
}

/// One version of the budget `demo/web`.
#[derive(Clone, Debug)]
pub struct PdbVersion {
    /// When.
    pub at: At,
    /// `status.currentHealthy`.
    pub current_healthy: i32,
    /// `status.desiredHealthy`.
    pub desired_healthy: i32,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// Names in `status.disruptedPods`.
    pub disrupted: Vec<String>,
}

/// One version of a Lease in `rollboot-system`.
#[derive(Clone, Debug)]
pub struct LeaseVersion {
    /// When.
    pub at: At,
    /// `rollboot-leader` or `rollboot-lock`.
    pub name: String,
    /// `spec.holderIdentity` (None when empty).
    pub holder: Option<String>,
    /// The nodes of the lock's `rollboot.dev/in-flight` record, with their recorded state.
    pub in_flight: BTreeMap<String, String>,
    /// This "version" is the deletion.
    pub deleted: bool,
}

/// A stretch in which a watch may have missed versions: it lost its connection at `from`
/// (a kube-apiserver killed) and had to list again, at `to`, because the server no longer had
/// the version it was at (410 Gone).
#[derive(Clone, Debug)]
pub struct Gap {
    /// `nodes`, `pods`, `poddisruptionbudgets` or `leases`.
    pub what: &'static str,
    /// When the watch was last known current: its last event, or its stream's end.
    pub from: At,
    /// When the list again was read.
    pub to: At,
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: the watch lost at {} had to list again at {}; versions in between may be missing",
            self.what,
            self.from.format("%H:%M:%S%.3f"),
            self.to.format("%H:%M:%S%.3f")
        )
    }
}

/// Everything recorded so far.
#[derive(Default)]
pub struct World {
    /// Every version of every Node, in the order seen.
    pub nodes: BTreeMap<String, Vec<NodeVersion>>,
    /// The Pods as they are now, by UID.
    pub pods: HashMap<String, PodInfo>,
    /// The workload's health after each pod change, once armed.
    pub web: Vec<Health>,
    /// Health is recorded from now on (the workload was fully Ready).
    pub web_armed: bool,
    /// When it was armed.
    pub armed_at: Option<At>,
    /// Web pods seen being deleted since armed (evicted or otherwise).
    pub web_disrupted: BTreeSet<String>,
    /// Every version of the budget `demo/web`.
    pub pdb: Vec<PdbVersion>,
    /// Every version of the Leases in `rollboot-system`.
    pub leases: Vec<LeaseVersion>,
    /// Watches that had to list again (versions between may be missing).
    pub gaps: Vec<Gap>,
}

impl World {
    /// The latest version of node `name`.
    pub fn node(&self, name: &str) -> Option<&NodeVersion> {
        self.nodes.get(name).and_then(|v| v.last())
    }

    /// The versions of node `name` seen at or after `since`.
    pub fn node_since(&self, name: &str, since: At) -> Vec<&NodeVersion> {
        self.nodes
            .get(name)
            .map(|v| v.iter().filter(|n| n.at >= since).collect())
            .unwrap_or_default()
    }

    /// The latest version of Lease `name`.
    pub fn lease(&self, name: &str) -> Option<&LeaseVersion> {
        self.leases.iter().rev().find(|l| l.name == name)
    }

    /// Pods on `node` that a drain evicts (not DaemonSet pods).
    pub fn evictable_on(&self, node: &str) -> Vec<&PodInfo> {
        let mut v: Vec<&PodInfo> = self
            .pods
            .values()
            .filter(|p| p.node.as_deref() == Some(node) && !p.daemon)
            .collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }

    /// Every pod name listed in `status.disruptedPods` of the budget `demo/web`, with how long
    /// it stayed listed (seconds from the first version naming it to the first that does not,
    /// or to the last version seen).
    pub fn disrupted_pods(&self) -> Vec<(String, f64)> {
        self.disrupted_pods_since(DateTime::<Utc>::MIN_UTC)
    }

    /// [`World::disrupted_pods`], counting only budget versions seen at or after `since`.
    pub fn disrupted_pods_since(&self, since: At) -> Vec<(String, f64)> {
        let versions: Vec<&PdbVersion> = self.pdb.iter().filter(|p| p.at >= since).collect();
        let mut longest: BTreeMap<String, f64> = BTreeMap::new();
        let mut open: BTreeMap<String, At> = BTreeMap::new();
        let close = |name: &str, from: At, to: At, longest: &mut BTreeMap<String, f64>| {
            let secs = (to - from).num_milliseconds() as f64 / 1000.0;
            let e = longest.entry(name.to_string()).or_insert(0.0);
            *e = e.max(secs);
        };
        for p in &versions {
            for name in &p.disrupted {
                open.entry(name.clone()).or_insert(p.at);
            }
            let gone: Vec<String> = open
                .keys()
                .filter(|n| !p.disrupted.contains(n))
                .cloned()
                .collect();
            for n in gone {
                let from = open.remove(&n).expect("open");
                close(&n, from, p.at, &mut longest);
            }
        }
        if let Some(last) = versions.last() {
            for (n, from) in open {
                close(&n, from, last.at, &mut longest);
            }
        }
        longest.into_iter().collect()
    }

    fn web_sample(&mut self, rv: String) {
        if !self.web_armed {
            return;
        }
        let mut healthy = 0;
        let mut not_healthy = Vec::new();
        for p in self.pods.values().filter(|p| p.web) {
            if p.deleting {
                self.web_disrupted.insert(p.key.clone());
                not_healthy.push(format!("{} (terminating)", p.key));
            } else if p.ready {
                healthy += 1;
            } else {
                not_healthy.push(format!(
                    "{} (not Ready, on {})",
                    p.key,
                    p.node.as_deref().unwrap_or("no node")
                ));
            }
        }
        not_healthy.sort();
        self.web.push(Health {
            at: Utc::now(),
            rv,
            healthy,
            not_healthy,
        });
    }
}

enum Change<K> {
    Listed(Vec<K>),
    Upsert(K),
    Delete(K),
}

/// Aborts a task when dropped.
struct Abort(tokio::task::JoinHandle<()>);

impl Drop for Abort {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The recorder: four watches and the history they fill.
#[derive(Clone)]
pub struct Observer {
    world: Arc<Mutex<World>>,
    seq: Arc<watch::Sender<u64>>,
    _tasks: Arc<Vec<Abort>>,
}

impl Observer {
    /// Starts the watches and returns once each has listed.
    pub async fn start(client: Client) -> Result<Observer, String> {
        let world = Arc::new(Mutex::new(World::default()));
        let (tx, _) = watch::channel(0u64);
        let seq = Arc::new(tx);
        let synced = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        let w = (world.clone(), seq.clone(), synced.clone());
        tasks.push(spawn_follow(
            Api::<Node>::all(client.clone()),
            "nodes",
            w.clone(),
            |w: &mut World, c| match c {
                Change::Listed(items) => {
                    for n in items {
                        let v = NodeVersion::from(&n, false);
                        w.nodes.entry(n.name_any()).or_default().push(v);
                    }
                }
                Change::Upsert(n) => {
                    let v = NodeVersion::from(&n, false);
                    w.nodes.entry(n.name_any()).or_default().push(v);
                }
                Change::Delete(n) => {
                    let v = NodeVersion::from(&n, true);
                    w.nodes.entry(n.name_any()).or_default().push(v);
                }
            },
        ));
        tasks.push(spawn_follow(
            Api::<Pod>::all(client.clone()),
            "pods",
            w.clone(),
            |w: &mut World, c| match c {
                Change::Listed(items) => {
                    w.pods = items
                        .iter()
                        .map(|p| (p.uid().unwrap_or_default(), PodInfo::from(p)))
                        .collect();
                    w.web_sample("list".into());
                }
                Change::Upsert(p) => {
                    w.pods
                        .insert(p.uid().unwrap_or_default(), PodInfo::from(&p));
                    if PodInfo::from(&p).web {
                        w.web_sample(p.resource_version().unwrap_or_default());
                    }
                }
                Change::Delete(p) => {
                    w.pods.remove(&p.uid().unwrap_or_default());
                    if PodInfo::from(&p).web {
                        w.web_sample(p.resource_version().unwrap_or_default());
                    }
                }
            },
        ));
        tasks.push(spawn_follow(
            Api::<PodDisruptionBudget>::namespaced(client.clone(), "demo"),
            "poddisruptionbudgets",
            w.clone(),
            |w: &mut World, c| {
                let items = match c {
                    Change::Listed(items) => items,
                    Change::Upsert(p) => vec![p],
                    Change::Delete(_) => Vec::new(),
                };
                for p in items.iter().filter(|p| p.name_any() == "web") {
                    let st = p.status.clone().unwrap_or_default();
                    w.pdb.push(PdbVersion {
                        at: Utc::now(),
                        current_healthy: st.current_healthy,
                        desired_healthy: st.desired_healthy,
                        disruptions_allowed: st.disruptions_allowed,
                        disrupted: st
                            .disrupted_pods
                            .map(|d| d.into_keys().collect())
                            .unwrap_or_default(),
                    });
                }
            },
        ));
        tasks.push(spawn_follow(
            Api::<Lease>::namespaced(client, "rollboot-system"),
            "leases",
            w,
            |w: &mut World, c| {
                let items = match c {
                    Change::Listed(items) => items,
                    Change::Upsert(l) => vec![l],
                    Change::Delete(l) => {
                        w.leases.push(LeaseVersion {
                            at: Utc::now(),
                            name: l.name_any(),
                            holder: None,
                            in_flight: BTreeMap::new(),
                            deleted: true,
                        });
                        Vec::new()
                    }
                };
                for l in items {
                    let in_flight = l
                        .annotations()
                        .get("rollboot.dev/in-flight")
                        .and_then(|j| {
                            serde_json::from_str::<BTreeMap<String, serde_json::Value>>(j).ok()
                        })
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| {
                            let state = v["state"].as_str().unwrap_or("?").to_string();
                            (k, state)
                        })
                        .collect();
                    w.leases.push(LeaseVersion {
                        at: Utc::now(),
                        name: l.name_any(),
                        holder: l
                            .spec
                            .as_ref()
                            .and_then(|s| s.holder_identity.clone())
                            .filter(|h| !h.is_empty()),
                        in_flight,
                        deleted: false,
                    });
                }
            },
        ));
        let obs = Observer {
            world,
            seq,
            _tasks: Arc::new(tasks),
        };
        let ready = obs
            .wait(Duration::from_secs(60), |_| {
                (synced.load(std::sync::atomic::Ordering::Acquire) >= 4).then_some(())
            })
            .await;
        ready
            .map(|_| obs.clone())
            .ok_or_else(|| "the admin watches did not list within 60 s".to_string())
    }

    /// Reads the history.
    pub fn with<T>(&self, f: impl FnOnce(&World) -> T) -> T {
        f(&self.world.lock().unwrap())
    }

    /// Starts recording the workload's health (call once it is fully Ready).
    pub fn arm_web(&self) {
        let mut w = self.world.lock().unwrap();
        w.web_armed = true;
        w.armed_at = Some(Utc::now());
        w.web_sample("armed".into());
    }

    /// Waits until `f` returns `Some` (looked at after every recorded change, and every 250 ms
    /// for conditions outside the watches, such as files), or `timeout`.
    pub async fn wait<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&World) -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.seq.subscribe();
        loop {
            rx.borrow_and_update();
            if let Some(t) = self.with(&mut f) {
                return Some(t);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return None;
            }
            let _ = tokio::time::timeout(
                (deadline - now).min(Duration::from_millis(250)),
                rx.changed(),
            )
            .await;
        }
    }
}

type Shared = (
    Arc<Mutex<World>>,
    Arc<watch::Sender<u64>>,
    Arc<std::sync::atomic::AtomicUsize>,
);

fn spawn_follow<K>(
    api: Api<K>,
    what: &'static str,
    (world, seq, synced): Shared,
    apply: impl Fn(&mut World, Change<K>) + Send + 'static,
) -> Abort
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    Abort(tokio::spawn(async move {
        let mut first = true;
        // The last moment the watch was known current.
        let mut current = Utc::now();
        'list: loop {
            // A list that fails (the kube-apiserver away) is tried again; the gap recorded
            // once it succeeds covers the time.
            let Ok(list) = api.list(&ListParams::default()).await else {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            };
            let mut rv = list.metadata.resource_version.clone().unwrap_or_default();
            {
                let mut w = world.lock().unwrap();
                if !first {
                    w.gaps.push(Gap {
                        what,
                        from: current,
                        to: Utc::now(),
                    });
                }
                apply(&mut w, Change::Listed(list.items));
            }
            current = Utc::now();
            if first {
                synced.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                first = false;
            }
            seq.send_modify(|s| *s += 1);
            loop {
                let stream = match api.watch(&WatchParams::default().timeout(290), &rv).await {
                    Ok(s) => s,
                    Err(kube::Error::Api(e)) if e.code == 410 => continue 'list,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                };
                futures::pin_mut!(stream);
                while let Some(ev) = stream.next().await {
                    match ev {
                        Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                            rv = o.resource_version().unwrap_or(rv);
                            apply(&mut world.lock().unwrap(), Change::Upsert(o));
                        }
                        Ok(WatchEvent::Deleted(o)) => {
                            rv = o.resource_version().unwrap_or(rv);
                            apply(&mut world.lock().unwrap(), Change::Delete(o));
                        }
                        Ok(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                        // Not current since the stream before: the gap starts there.
                        Ok(WatchEvent::Error(e)) if e.code == 410 => continue 'list,
                        Ok(WatchEvent::Error(_)) | Err(_) => break,
                    }
                    current = Utc::now();
                    seq.send_modify(|s| *s += 1);
                }
                // Connected until now (a stream cut by a killed server ends as it dies).
                current = Utc::now();
            }
        }
    }))
}
