//! The health gate's record and state, pure: what a gate waits for and how it decides.
//!
//! Owns the [`GateRecord`] the drain's end writes to the Node (with `state: rebooting`, or with
//! the afterDrain hooks' start), what the watches report to a gate ([`Update`]) and
//! [`GateState`], which decides from what has been seen (what it waits for in each watched
//! stream is a [`Wanted`]). It must never do I/O, hold a client or read a clock: the watches
//! that feed it are [`crate::budgets::watches`]', the waiting [`super::waiting`]'s, and the pure
//! controller ([`crate::controller::decide`]) reads the record from here only.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::budgets::watches::{Health, Stream, Wanted, WorkloadKind};

/// What the health gate must see healthy again, written with `state: rebooting`.
///
/// However it is parsed, an entry that names no possible Kubernetes object is left out as it
/// is read (a namespace that is no DNS label, a name that is no DNS subdomain, a label that is
/// no label): the gate watches and lists in each namespace the record names, and kube-rs writes
/// a namespace into the request path as it is, so a record forged on the Node (`..`, `/`, `?`)
/// must never choose the API's path. An entry left out is not waited for; whoever can write the
/// record could as well remove it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GateRecord {
    /// Budgets `namespace/name` to wait for by name.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "sane::budgets"
    )]
    pub budgets: Vec<String>,
    /// The evicted pods' labels, per namespace: every budget selecting one of them is waited
    /// for. The drain hands these over rather than budget names, so it need not list budgets
    /// (two lists of a namespace's budgets per node were a fifth of a drain's time).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "sane::pods"
    )]
    pub pods: Vec<(String, BTreeMap<String, String>)>,
    /// Controllers of the evicted pods: (kind, namespace, name).
    #[serde(deserialize_with = "sane::owners")]
    pub owners: Vec<(String, String, String)>,
    /// Not read by the gate: the drain's measured pod exit time (milliseconds, see
    /// [`crate::drain::Drained::pod_exit_seconds`]), carried in this record, which lives from
    /// the drain's end to `done`, into the node's [`crate::node::LastCycle`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_exit_ms: Option<u64>,
    /// Not read by the gate either: the drain's wait for volumes to detach (milliseconds,
    /// the sum of its steps'), carried into the node's [`crate::node::LastCycle`]; absent when
    /// it waited for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detach_ms: Option<u64>,
    /// Not read by the gate: the drain's steps, carried into the node's
    /// [`crate::node::LastCycle`] likewise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drain_parts: Vec<crate::node::DrainPart>,
    /// The volumes that moved with the evicted pods, which the gate waits to see attached
    /// where their replacements run (`drain.volumes.waitForReattach`; empty without it).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "sane::reattach"
    )]
    pub reattach: Vec<crate::drain::Moved>,
}

/// The readers of [`GateRecord`]'s lists that leave out what cannot be a Kubernetes object.
mod sane {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer};

    use crate::config::hooks::{check_label_value, check_qualified_name};
    use crate::url::{is_dns_label, is_dns_subdomain};

    /// The entries of a list that pass `ok`.
    fn kept<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
        ok: impl Fn(&T) -> bool,
    ) -> Result<Vec<T>, D::Error> {
        let mut all = Vec::<T>::deserialize(d)?;
        all.retain(ok);
        Ok(all)
    }

    fn labels_ok(labels: &BTreeMap<String, String>) -> bool {
        labels
            .iter()
            .all(|(k, v)| check_qualified_name(k).is_ok() && check_label_value(v).is_ok())
    }

    pub(super) fn budgets<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        kept(d, |b: &String| {
            b.split_once('/')
                .is_some_and(|(ns, name)| is_dns_label(ns) && is_dns_subdomain(name))
        })
    }

    /// A namespace and the labels of a pod evicted from it.
    type NamespacedLabels = (String, BTreeMap<String, String>);

    pub(super) fn pods<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<NamespacedLabels>, D::Error> {
        kept(d, |(ns, _): &NamespacedLabels| is_dns_label(ns))
    }

    pub(super) fn owners<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(String, String, String)>, D::Error> {
        kept(d, |(_, ns, name): &(String, String, String)| {
            is_dns_label(ns) && is_dns_subdomain(name)
        })
    }

    /// A moved volume's namespace is listed in, and its labels are the selector of that list.
    pub(super) fn reattach<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<crate::drain::Moved>, D::Error> {
        kept(d, |m: &crate::drain::Moved| {
            is_dns_label(&m.namespace) && labels_ok(&m.labels)
        })
    }
}

impl GateRecord {
    /// The record as a Node carries it (`rollboot.dev/health-gate`, `text`), if it parses.
    pub fn read(text: Option<&str>) -> Option<GateRecord> {
        serde_json::from_str(text?).ok()
    }
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

/// The gate's knowledge, fed by [`Update`]s; decides without I/O.
#[derive(Clone, Debug, Default)]
pub struct GateState {
    pub(super) wanted: BTreeMap<Stream, Wanted>,
    seen: BTreeMap<(Stream, String), Health>,
    pub(super) listed: BTreeSet<Stream>,
    /// Warnings not yet said, (budget, note): one per budget with an unreadable selector.
    notes: Vec<(String, String)>,
    /// The budgets already warned about.
    unreadable: BTreeSet<(Stream, String)>,
    /// With [`GateState::restored_once_is_enough`]: the ReplicaSets and StatefulSets seen with
    /// every replica Ready since the gate began.
    restored: Option<BTreeSet<(Stream, String)>>,
}

impl GateState {
    /// The objects of `record`; controllers other than ReplicaSets and StatefulSets (a
    /// DaemonSet, a Job) have nothing to wait for and are left out.
    pub fn new(record: &GateRecord) -> GateState {
        let mut wanted: BTreeMap<Stream, Wanted> = BTreeMap::new();
        for b in &record.budgets {
            if let Some((ns, name)) = b.split_once('/') {
                wanted
                    .entry((WorkloadKind::Budget, ns.into()))
                    .or_default()
                    .names
                    .insert(name.into());
            }
        }
        for (ns, labels) in &record.pods {
            wanted
                .entry((WorkloadKind::Budget, ns.clone()))
                .or_default()
                .selecting
                .push(labels.clone());
        }
        for (kind, ns, name) in &record.owners {
            let kind = match kind.as_str() {
                "ReplicaSet" => WorkloadKind::ReplicaSet,
                "StatefulSet" => WorkloadKind::StatefulSet,
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

    /// A controller of the evicted pods seen with every replica Ready once since the gate
    /// began (the node's evicted pods were replaced) is not waited on again: with `maxNodes`
    /// above 1, a later dip is another node's drain taking a sibling, which that node's own
    /// gate waits out; waiting for it here held each cycle for its neighbours' (a fifth of a
    /// cycle in issue 26's measure). The budgets are still waited on as they are now.
    pub fn restored_once_is_enough(mut self) -> GateState {
        self.restored = Some(BTreeSet::new());
        self
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
                    if let (Some(r), Health::Replicas { ready, want }) = (&mut self.restored, h) {
                        if ready >= want {
                            r.insert((s.clone(), name.clone()));
                        }
                    }
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
        let restored = |k: &(Stream, String)| self.restored.as_ref().is_some_and(|r| r.contains(k));
        self.seen.iter().filter(|(k, _)| !restored(k)).find_map(
            |(((kind, ns), name), h)| match *h {
                Health::Budget { healthy, desired } if healthy < desired => Some(format!(
                    "{} {ns}/{name} has {healthy} healthy of {desired} desired",
                    kind.name()
                )),
                Health::Replicas { ready, want } if ready < want => Some(format!(
                    "{} {ns}/{name} has {ready} of {want} replicas Ready",
                    kind.name()
                )),
                _ => None,
            },
        )
    }
}
