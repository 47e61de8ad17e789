//! The health gate: after a node's reboot, the next node may start only when the budgets that
//! covered its evicted pods are healthy again and the controllers of those pods have their
//! replicas Ready.
//!
//! It owns the [`GateRecord`] written to the Node with `state: rebooting`, the pure
//! [`GateState`] that decides from what has been seen, and [`Gate`], which feeds that state from
//! one watch per namespace and kind. The watches' initial lists are paged and every object that
//! is not waited on is dropped as it arrives, so a namespace of 25,000 budgets costs pages of
//! 500, never a whole list in memory; after the initial list the gate is woken by changes only.
//! It never writes: finishing or failing the node is the caller's.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// What the health gate must see healthy again, written with `state: rebooting`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GateRecord {
    /// Budgets `namespace/name` to wait for by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<String>,
    /// The evicted pods' labels, per namespace: every budget selecting one of them is waited
    /// for. The drain hands these over rather than budget names, so it need not list budgets
    /// (two lists of a namespace's budgets per node were a fifth of a drain's time).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<(String, BTreeMap<String, String>)>,
    /// Controllers of the evicted pods: (kind, namespace, name).
    pub owners: Vec<(String, String, String)>,
}

/// The kinds the gate reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GateKind {
    Budget,
    ReplicaSet,
    StatefulSet,
}

impl GateKind {
    fn name(self) -> &'static str {
        match self {
            GateKind::Budget => "PodDisruptionBudget",
            GateKind::ReplicaSet => "ReplicaSet",
            GateKind::StatefulSet => "StatefulSet",
        }
    }
}

/// One watch: a kind in a namespace.
pub type Stream = (GateKind, String);

/// What was seen of one object waited on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// A budget's `currentHealthy` and `desiredHealthy`.
    Budget { healthy: i32, desired: i32 },
    /// A controller's Ready replicas and wanted replicas.
    Replicas { ready: i32, want: i32 },
}

/// What a watch reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// The watch (re)starts its list: what it said before no longer counts.
    Listing(Stream),
    /// An object waited on, as it is now.
    Seen(Stream, String, Health),
    /// An object waited on was deleted.
    Gone(Stream, String),
    /// The list is complete: an object waited on and not seen does not exist.
    Listed(Stream),
    /// A budget whose selector cannot be evaluated, waited on as if it selected the evicted
    /// pods: its name and why.
    Unreadable(Stream, String, String),
}

/// What one stream waits for: objects by name, and (budgets) whatever selects these labels.
#[derive(Clone, Debug, Default)]
pub struct Wanted {
    names: BTreeSet<String>,
    selecting: Vec<BTreeMap<String, String>>,
}

impl Wanted {
    /// Whether the object `name`, with `selector` (a budget's), is waited for. A budget whose
    /// selector cannot be evaluated is, when budgets are chosen by labels: waiting on a budget
    /// that may not cover the pods costs time, passing one that does could start the next
    /// node while these pods' budget is short.
    pub fn wants(&self, name: &str, selector: Option<&LabelSelector>) -> bool {
        self.names.contains(name)
            || self
                .selecting
                .iter()
                .any(|labels| crate::drain::budget_may_select(selector, labels))
    }
}

/// The gate's knowledge, fed by [`Update`]s; decides without I/O.
#[derive(Clone, Debug, Default)]
pub struct GateState {
    wanted: BTreeMap<Stream, Wanted>,
    seen: BTreeMap<(Stream, String), Health>,
    listed: BTreeSet<Stream>,
    /// Warnings not yet said, (budget, note): one per budget with an unreadable selector.
    notes: Vec<(String, String)>,
    /// The budgets already warned about.
    unreadable: BTreeSet<(Stream, String)>,
}

impl GateState {
    /// The objects of `record`; controllers other than ReplicaSets and StatefulSets (a
    /// DaemonSet, a Job) have nothing to wait for and are left out.
    pub fn new(record: &GateRecord) -> GateState {
        let mut wanted: BTreeMap<Stream, Wanted> = BTreeMap::new();
        for b in &record.budgets {
            if let Some((ns, name)) = b.split_once('/') {
                wanted
                    .entry((GateKind::Budget, ns.into()))
                    .or_default()
                    .names
                    .insert(name.into());
            }
        }
        for (ns, labels) in &record.pods {
            wanted
                .entry((GateKind::Budget, ns.clone()))
                .or_default()
                .selecting
                .push(labels.clone());
        }
        for (kind, ns, name) in &record.owners {
            let kind = match kind.as_str() {
                "ReplicaSet" => GateKind::ReplicaSet,
                "StatefulSet" => GateKind::StatefulSet,
                _ => continue,
            };
            wanted
                .entry((kind, ns.clone()))
                .or_default()
                .names
                .insert(name.clone());
        }
        GateState {
            wanted,
            ..GateState::default()
        }
    }

    /// The watches needed.
    pub fn streams(&self) -> Vec<Stream> {
        self.wanted.keys().cloned().collect()
    }

    /// Whether `name` may be waited on in `stream`: by name, or, in a stream that selects by
    /// labels, as chosen by its watch (which has the object's selector). Everything else is
    /// dropped unread.
    pub fn wants(&self, stream: &Stream, name: &str) -> bool {
        self.wanted
            .get(stream)
            .is_some_and(|w| w.names.contains(name) || !w.selecting.is_empty())
    }

    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Listing(s) => {
                self.listed.remove(&s);
                self.seen.retain(|(st, _), _| *st != s);
            }
            Update::Seen(s, name, h) => {
                if self.wants(&s, &name) {
                    self.seen.insert((s, name), h);
                }
            }
            Update::Gone(s, name) => {
                self.seen.remove(&(s, name));
            }
            Update::Listed(s) => {
                self.listed.insert(s);
            }
            Update::Unreadable(s, name, why) => {
                let note = format!(
                    "{} {}/{name}: its selector cannot be evaluated ({why}); the health gate \
                     waits for it as if it covered the evicted pods",
                    s.0.name(),
                    s.1
                );
                let budget = format!("{}/{name}", s.1);
                if self.unreadable.insert((s, name)) {
                    self.notes.push((budget, note));
                }
            }
        }
    }

    /// The warnings gathered since the last call, as (budget `namespace/name`, note).
    pub fn take_notes(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.notes)
    }

    /// `None` when the gate passes, else the first thing it waits for. An object that does not
    /// exist (a budget or ReplicaSet deleted meanwhile) has nothing left to wait for.
    pub fn verdict(&self) -> Option<String> {
        if let Some((kind, ns)) = self.wanted.keys().find(|s| !self.listed.contains(*s)) {
            return Some(format!("listing the {}s of namespace {ns}", kind.name()));
        }
        self.seen
            .iter()
            .find_map(|(((kind, ns), name), h)| match *h {
                Health::Budget { healthy, desired } if healthy < desired => Some(format!(
                    "{} {ns}/{name} has {healthy} healthy of {desired} desired",
                    kind.name()
                )),
                Health::Replicas { ready, want } if ready < want => Some(format!(
                    "{} {ns}/{name} has {ready} of {want} replicas Ready",
                    kind.name()
                )),
                _ => None,
            })
    }
}

fn budget_health(p: &PodDisruptionBudget) -> Health {
    let s = p.status.clone().unwrap_or_default();
    Health::Budget {
        healthy: s.current_healthy,
        desired: s.desired_healthy,
    }
}

/// `spec.replicas` defaults to 1, as in the API.
fn replicas(ready: Option<i32>, want: Option<i32>) -> Health {
    Health::Replicas {
        ready: ready.unwrap_or(0),
        want: want.unwrap_or(1),
    }
}

fn rs_health(rs: &ReplicaSet) -> Health {
    replicas(
        rs.status.as_ref().and_then(|s| s.ready_replicas),
        rs.spec.as_ref().and_then(|s| s.replicas),
    )
}

fn ss_health(ss: &StatefulSet) -> Health {
    replicas(
        ss.status.as_ref().and_then(|s| s.ready_replicas),
        ss.spec.as_ref().and_then(|s| s.replicas),
    )
}

/// A gate with its watches running. The controller starts it as soon as the reboot is asked,
/// so the watches' initial lists are done while the node reboots instead of after it is back:
/// those lists were most of the time between a node's return and the next node's start.
pub struct Gate {
    record: GateRecord,
    state: GateState,
    rx: mpsc::UnboundedReceiver<Update>,
    _watches: Vec<super::Task>,
}

impl Gate {
    /// Starts one watch per stream of `record`; they run until the gate is dropped.
    pub fn start(client: &Client, record: &GateRecord) -> Gate {
        let state = GateState::new(record);
        let (tx, rx) = mpsc::unbounded_channel();
        let watches = state
            .streams()
            .into_iter()
            .map(|s| {
                let wanted = state.wanted[&s].clone();
                let tx = tx.clone();
                let client = client.clone();
                super::Task(tokio::spawn(async move {
                    let (kind, ns) = s.clone();
                    match kind {
                        GateKind::Budget => {
                            follow(client, s, wanted, tx, budget_health, budget_selector).await
                        }
                        GateKind::ReplicaSet => {
                            follow(client, s, wanted, tx, rs_health, no_selector).await
                        }
                        GateKind::StatefulSet => {
                            follow(client, s, wanted, tx, ss_health, no_selector).await
                        }
                    }
                    tracing::debug!(namespace = %ns, kind = kind.name(), "health gate watch ended");
                }))
            })
            .collect();
        Gate {
            record: record.clone(),
            state,
            rx,
            _watches: watches,
        }
    }

    /// What the gate waits on.
    pub fn record(&self) -> &GateRecord {
        &self.record
    }

    /// Waits until the gate passes (`Ok`) or `deadline` (`Err` with what it still waits for).
    /// What the watches reported since [`Gate::start`] counts: the verdict is about now. A
    /// budget it cannot read is said in a warning Event about `node`.
    pub async fn wait(
        mut self,
        deadline: DateTime<Utc>,
        node: &str,
        events: &super::events::Recorder,
    ) -> Result<(), String> {
        loop {
            // Apply what is queued before deciding.
            while let Ok(u) = self.rx.try_recv() {
                self.state.apply(u);
            }
            for (budget, note) in self.state.take_notes() {
                tracing::warn!(node, "{note}");
                events
                    .publish_action(
                        node,
                        true,
                        "BudgetSelectorUnreadable",
                        &format!("Wait {budget}"),
                        note,
                    )
                    .await;
            }
            let why = match self.state.verdict() {
                None => return Ok(()),
                Some(why) => why,
            };
            let left = (deadline - Utc::now()).to_std().unwrap_or_default();
            if left.is_zero() {
                return Err(why);
            }
            tracing::debug!(node, why, "health gate waiting");
            match tokio::time::timeout(left, self.rx.recv()).await {
                Ok(Some(u)) => self.state.apply(u),
                // No watch is left (none was needed): the verdict above already decided.
                Ok(None) => tokio::time::sleep(left.min(Duration::from_secs(1))).await,
                Err(_) => return Err(why),
            }
        }
    }
}

fn budget_selector(p: &PodDisruptionBudget) -> Option<&LabelSelector> {
    p.spec.as_ref().and_then(|s| s.selector.as_ref())
}

fn no_selector<K>(_: &K) -> Option<&LabelSelector> {
    None
}

/// Watches one kind in one namespace and forwards what concerns `wanted`.
async fn follow<K>(
    client: Client,
    stream: Stream,
    wanted: Wanted,
    tx: mpsc::UnboundedSender<Update>,
    health: fn(&K) -> Health,
    selector: fn(&K) -> Option<&LabelSelector>,
) where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client, &stream.1);
    let events = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(events);
    // Names forwarded since the last list: a budget whose selector stops selecting the pods
    // is forgotten, not left waited on with its last health.
    let mut forwarded: BTreeSet<String> = BTreeSet::new();
    // Budgets whose selector cannot be evaluated, reported once each.
    let mut reported: BTreeSet<String> = BTreeSet::new();
    while let Some(ev) = events.next().await {
        let update = match ev {
            Ok(watcher::Event::Init) => {
                forwarded.clear();
                Update::Listing(stream.clone())
            }
            Ok(watcher::Event::InitDone) => Update::Listed(stream.clone()),
            Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => {
                let name = o.name_any();
                if wanted.wants(&name, selector(&o)) {
                    if let Some(why) = selector(&o).and_then(crate::drain::selector_problem) {
                        if reported.insert(name.clone())
                            && tx
                                .send(Update::Unreadable(stream.clone(), name.clone(), why))
                                .is_err()
                        {
                            return;
                        }
                    }
                    forwarded.insert(name.clone());
                    Update::Seen(stream.clone(), name, health(&o))
                } else if forwarded.remove(&name) {
                    Update::Gone(stream.clone(), name)
                } else {
                    continue;
                }
            }
            Ok(watcher::Event::Delete(o)) => {
                let name = o.name_any();
                if !forwarded.remove(&name) {
                    continue;
                }
                Update::Gone(stream.clone(), name)
            }
            Err(e) => {
                tracing::warn!(namespace = %stream.1, kind = stream.0.name(), error = %e, "health gate watch");
                continue;
            }
        };
        if tx.send(update).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> GateRecord {
        GateRecord {
            budgets: vec!["a/web".into()],
            owners: vec![
                ("ReplicaSet".into(), "a".into(), "web-1".into()),
                ("DaemonSet".into(), "kube-system".into(), "ds".into()),
            ],
            ..GateRecord::default()
        }
    }

    #[test]
    fn budgets_are_chosen_by_the_evicted_pods_labels() {
        let app = |v: &str| BTreeMap::from([("app".to_string(), v.to_string())]);
        let record = GateRecord {
            pods: vec![("a".into(), app("web"))],
            ..GateRecord::default()
        };
        let g = GateState::new(&record);
        assert_eq!(g.streams(), vec![pdb()]);
        let selecting = |v: &str| LabelSelector {
            match_labels: Some(app(v)),
            ..Default::default()
        };
        let w = &g.wanted[&pdb()];
        assert!(w.wants("web-pdb", Some(&selecting("web"))));
        assert!(!w.wants("db-pdb", Some(&selecting("db"))));
        assert!(!w.wants("no-selector", None));
        assert!(g.verdict().unwrap().contains("listing"));
    }

    fn pdb() -> Stream {
        (GateKind::Budget, "a".into())
    }
    fn rs() -> Stream {
        (GateKind::ReplicaSet, "a".into())
    }

    #[test]
    fn waits_until_every_stream_is_listed_then_for_each_object() {
        let mut g = GateState::new(&record());
        assert_eq!(g.streams(), vec![pdb(), rs()], "no watch for the DaemonSet");
        assert!(g.verdict().unwrap().contains("listing"));
        g.apply(Update::Seen(
            pdb(),
            "web".into(),
            Health::Budget {
                healthy: 2,
                desired: 3,
            },
        ));
        g.apply(Update::Listed(pdb()));
        assert!(g.verdict().unwrap().contains("listing the ReplicaSets"));
        g.apply(Update::Seen(
            rs(),
            "web-1".into(),
            Health::Replicas { ready: 3, want: 3 },
        ));
        g.apply(Update::Listed(rs()));
        assert_eq!(
            g.verdict().unwrap(),
            "PodDisruptionBudget a/web has 2 healthy of 3 desired"
        );
        g.apply(Update::Seen(
            pdb(),
            "web".into(),
            Health::Budget {
                healthy: 3,
                desired: 3,
            },
        ));
        assert_eq!(g.verdict(), None);
    }

    #[test]
    fn a_relist_forgets_what_the_stream_said_and_waits_again() {
        let mut g = GateState::new(&record());
        for s in [pdb(), rs()] {
            g.apply(Update::Listed(s));
        }
        assert_eq!(
            g.verdict(),
            None,
            "objects that do not exist wait for nothing"
        );
        g.apply(Update::Seen(
            rs(),
            "web-1".into(),
            Health::Replicas { ready: 1, want: 3 },
        ));
        assert_eq!(
            g.verdict().unwrap(),
            "ReplicaSet a/web-1 has 1 of 3 replicas Ready"
        );
        g.apply(Update::Listing(rs()));
        assert!(g.verdict().unwrap().contains("listing"));
        g.apply(Update::Listed(rs()));
        assert_eq!(g.verdict(), None, "the relist did not see it: deleted");
        g.apply(Update::Seen(
            rs(),
            "web-1".into(),
            Health::Replicas { ready: 1, want: 3 },
        ));
        g.apply(Update::Gone(rs(), "web-1".into()));
        assert_eq!(g.verdict(), None);
    }

    #[test]
    fn a_budget_whose_selector_cannot_be_read_is_waited_for_and_said_once() {
        let app = BTreeMap::from([("app".to_string(), "web".to_string())]);
        let record = GateRecord {
            pods: vec![("a".into(), app)],
            ..GateRecord::default()
        };
        let mut g = GateState::new(&record);
        let bad = LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "app".into(),
                    operator: "Matches".into(),
                    values: Some(vec!["web".into()]),
                },
            ]),
            ..Default::default()
        };
        let why = crate::drain::selector_problem(&bad).unwrap();
        assert!(why.contains("`app`") && why.contains("`Matches`"), "{why}");
        // Selecting nothing by the rules it can read, it is still waited for.
        assert!(!crate::drain::selector_matches(
            Some(&bad),
            &record.pods[0].1
        ));
        assert!(g.wanted[&pdb()].wants("odd", Some(&bad)));
        for _ in 0..2 {
            g.apply(Update::Unreadable(pdb(), "odd".into(), why.clone()));
        }
        g.apply(Update::Seen(
            pdb(),
            "odd".into(),
            Health::Budget {
                healthy: 1,
                desired: 2,
            },
        ));
        g.apply(Update::Listed(pdb()));
        assert_eq!(
            g.verdict().unwrap(),
            "PodDisruptionBudget a/odd has 1 healthy of 2 desired"
        );
        let notes = g.take_notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].0, "a/odd");
        assert!(
            notes[0]
                .1
                .starts_with("PodDisruptionBudget a/odd: its selector cannot be evaluated")
                && notes[0].1.contains("waits for it"),
            "{}",
            notes[0].1
        );
        assert!(g.take_notes().is_empty());
    }

    #[test]
    fn objects_not_waited_on_are_ignored() {
        let mut g = GateState::new(&record());
        g.apply(Update::Seen(
            rs(),
            "other".into(),
            Health::Replicas { ready: 0, want: 3 },
        ));
        for s in [pdb(), rs()] {
            g.apply(Update::Listed(s));
        }
        assert_eq!(g.verdict(), None);
    }
}
