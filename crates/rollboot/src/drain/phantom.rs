//! Phantom disruptions: a budget that refuses evictions for a disruption that is not happening.
//!
//! Owns the reading of a PodDisruptionBudget's `status.disruptedPods` against the pods it lists
//! and the drain's own evictions ([`phantom_disruptions`]), which the drain says in the Event of
//! a refused eviction. Pure: it must never do I/O or read a clock (`now` is a parameter).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

/// How long kube-apiserver's disruption controller keeps counting a pod in a budget's
/// `status.disruptedPods` when the pod's deletion does not follow (`DeletionTimeout`).
pub const DISRUPTION_EXPIRY: chrono::Duration = chrono::Duration::minutes(2);

/// How long after its eviction was accepted a pod listed in a budget's `disruptedPods` but not
/// yet being deleted is still taken for that eviction's deletion on its way: kube-apiserver
/// writes the budget, then deletes the pod, and a watcher sees the two a moment apart.
pub const OWN_EVICTION_SETTLING: chrono::Duration = chrono::Duration::seconds(5);

/// What a drain knows of its own eviction of a pod, for [`phantom_disruptions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnEviction {
    /// Sent, not answered yet: the budget may already count it, the pod's deletion follows
    /// the answer.
    InFlight,
    /// Answered 201 (accepted) at that instant.
    Accepted(DateTime<Utc>),
}

/// Why a budget refuses evictions although nothing is being disrupted, when that is so: it
/// lists in `status.disruptedPods` (pod name -> when its eviction was admitted) a pod that is
/// not being deleted or no longer exists. The eviction that put it there was admitted and its
/// deletion never happened (a client killed mid-request: kube-apiserver writes the budget,
/// then deletes the pod), and Kubernetes itself clears the entry [`DISRUPTION_EXPIRY`] after
/// the eviction. `deleting` says, per listed pod, `None` for gone and whether it is deleting;
/// `own` lists the pods of the budget's namespace this drain has sent an eviction for
/// (not phantoms while their eviction is in flight or accepted within
/// [`OWN_EVICTION_SETTLING`]: their deletion is on its way).
pub fn phantom_disruptions(
    budget: &str,
    disrupted: &BTreeMap<String, DateTime<Utc>>,
    deleting: &BTreeMap<String, Option<bool>>,
    own: &BTreeMap<String, OwnEviction>,
    now: DateTime<Utc>,
) -> Option<String> {
    let on_its_way = |pod: &String| match own.get(pod) {
        Some(OwnEviction::InFlight) => true,
        Some(OwnEviction::Accepted(at)) => now - *at < OWN_EVICTION_SETTLING,
        None => false,
    };
    let notes: Vec<String> = disrupted
        .iter()
        .filter(|(pod, _)| deleting.get(*pod).copied().flatten() != Some(true))
        .filter(|(pod, _)| !on_its_way(pod))
        .map(|(pod, since)| {
            let clears = *since + DISRUPTION_EXPIRY;
            let left = (clears - now).max(chrono::Duration::zero());
            let what = match deleting.get(pod).copied().flatten() {
                None => "no longer exists",
                Some(_) => "is not being deleted",
            };
            format!(
                "{budget} counts pod {pod} as disrupted since {} but that pod {what}: an eviction \
                 was admitted and its deletion never happened (a client stopped mid-request); \
                 Kubernetes stops counting it at {} (in {}s), then evictions go through",
                since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                clears.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                left.num_seconds()
            )
        })
        .collect();
    (!notes.is_empty()).then(|| notes.join("; "))
}
