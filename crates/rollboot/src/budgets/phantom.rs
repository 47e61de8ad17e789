//! Phantom disruptions: a budget that refuses evictions for a disruption that is not happening.
//!
//! Owns the reading of a PodDisruptionBudget's `status.disruptedPods` against the pods it lists
//! and the drain's own evictions ([`phantom_disruptions`]), which the drain says in the Event of
//! a refused eviction ([`crate::drain::run`]). Pure: it must never do I/O or read a clock (`now`
//! is a parameter), nor decide anything about the eviction: it only explains.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_entry_for_a_pod_whose_deletion_never_happened_is_explained() {
        let t = |s: &str| crate::time::parse_annotation(s).unwrap();
        let now = t("2026-11-23T10:00:30Z");
        let disrupted = BTreeMap::from([
            ("web-0".to_string(), t("2026-11-23T10:00:00Z")),
            ("web-1".to_string(), t("2026-11-23T10:00:10Z")),
            ("web-2".to_string(), t("2026-11-23T09:59:50Z")),
        ]);
        // web-0 still runs (its eviction's DELETE never came), web-1 is being deleted (a
        // normal eviction in progress), web-2 is gone.
        let states = BTreeMap::from([
            ("web-0".to_string(), Some(false)),
            ("web-1".to_string(), Some(true)),
        ]);
        let note =
            phantom_disruptions("apps/web", &disrupted, &states, &BTreeMap::new(), now).unwrap();
        assert!(note.contains("counts pod web-0 as disrupted since 2026-11-23T10:00:00Z but that pod is not being deleted"), "{note}");
        assert!(note.contains("at 2026-11-23T10:02:00Z (in 90s)"), "{note}");
        assert!(
            note.contains("web-2") && note.contains("no longer exists"),
            "{note}"
        );
        assert!(
            !note.contains("web-1"),
            "an eviction in progress is not a phantom: {note}"
        );
        let only_real = BTreeMap::from([("web-1".to_string(), t("2026-11-23T10:00:10Z"))]);
        assert_eq!(
            phantom_disruptions("apps/web", &only_real, &states, &BTreeMap::new(), now),
            None
        );
    }

    #[test]
    fn a_pod_whose_own_eviction_is_in_flight_or_just_accepted_is_not_a_phantom() {
        let t = |s: &str| crate::time::parse_annotation(s).unwrap();
        let now = t("2026-11-23T10:00:30Z");
        // The budget lists all three, none is being deleted yet. web-0: this drain's eviction
        // is still unanswered (the budget was written before its 201 came back); web-1: its
        // eviction was accepted 2 s ago (the deletion follows); web-2: accepted 20 s ago and
        // still not deleting, a phantom after all.
        let disrupted = BTreeMap::from([
            ("web-0".to_string(), t("2026-11-23T10:00:30Z")),
            ("web-1".to_string(), t("2026-11-23T10:00:28Z")),
            ("web-2".to_string(), t("2026-11-23T10:00:10Z")),
        ]);
        let states = BTreeMap::from([
            ("web-0".to_string(), Some(false)),
            ("web-1".to_string(), Some(false)),
            ("web-2".to_string(), Some(false)),
        ]);
        let own = BTreeMap::from([
            ("web-0".to_string(), OwnEviction::InFlight),
            (
                "web-1".to_string(),
                OwnEviction::Accepted(t("2026-11-23T10:00:28Z")),
            ),
            (
                "web-2".to_string(),
                OwnEviction::Accepted(t("2026-11-23T10:00:10Z")),
            ),
        ]);
        let note = phantom_disruptions("apps/web", &disrupted, &states, &own, now).unwrap();
        assert!(
            !note.contains("web-0"),
            "an eviction in flight is not a phantom: {note}"
        );
        assert!(
            !note.contains("web-1"),
            "a deletion on its way is not a phantom: {note}"
        );
        assert!(note.contains("counts pod web-2"), "{note}");
    }
}
