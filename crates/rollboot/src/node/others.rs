//! The other actors that take nodes out of service, as a Node shows them, and what rollboot
//! writes to show itself to them: the protections it puts on with its cordon, and KEP-5683's
//! maintenance conditions.
//!
//! Owns the reading of another actor's maintenance from a Node's taints and conditions
//! ([`other_actor`]), of the maintenance conditions ([`MaintenanceCondition`]: whose each is),
//! and the keys a cordon adds and an uncordon removes to protect a node
//! ([`protect_keys`], [`unprotect_keys`]). It must never decide whether a node may start (the
//! controller's decisions do, from what this says) nor write anything.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::NodeCondition;

use super::keys::*;
use crate::time;

/// One of KEP-5683's maintenance conditions on a Node, as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenanceCondition {
    /// Its type (one of [`MAINTENANCE_CONDITIONS`]).
    pub kind: String,
    /// Its status is `True`.
    pub status: bool,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// rollboot wrote it (its message begins with [`CONDITION_MESSAGE_PREFIX`]).
    pub ours: bool,
    /// Its `lastTransitionTime`.
    pub since: Option<DateTime<Utc>>,
}

impl MaintenanceCondition {
    /// The maintenance condition `c`, when it is one.
    pub fn of(c: &NodeCondition) -> Option<MaintenanceCondition> {
        if !MAINTENANCE_CONDITIONS.contains(&c.type_.as_str()) {
            return None;
        }
        let message = c.message.clone().unwrap_or_default();
        Some(MaintenanceCondition {
            kind: c.type_.clone(),
            status: c.status == "True",
            reason: c.reason.clone().unwrap_or_default(),
            ours: message.starts_with(CONDITION_MESSAGE_PREFIX),
            message,
            since: c
                .last_transition_time
                .as_ref()
                .map(|t| time::from_jiff(t.0)),
        })
    }
}

/// The other actor taking this node out of service, in words, when its taints or its
/// maintenance conditions say one is: cluster-autoscaler or Karpenter removing it, medik8s'
/// node-maintenance-operator keeping it in maintenance, an operator marking it out of service,
/// or a `DrainInProgress` / `MaintenanceInProgress` condition True that rollboot did not write.
pub fn other_actor<'t>(
    taint_keys: impl IntoIterator<Item = &'t str> + Clone,
    conditions: &[MaintenanceCondition],
) -> Option<String> {
    let by_taint = [
        (
            TAINT_TO_BE_DELETED,
            "cluster-autoscaler (taint ToBeDeletedByClusterAutoscaler)",
        ),
        (
            TAINT_KARPENTER_DISRUPTED,
            "karpenter (taint karpenter.sh/disrupted)",
        ),
        (
            TAINT_MEDIK8S_DRAIN,
            "node-maintenance-operator (taint medik8s.io/drain)",
        ),
        (
            TAINT_OUT_OF_SERVICE,
            "out-of-service (taint node.kubernetes.io/out-of-service)",
        ),
    ];
    if let Some((_, actor)) = by_taint
        .iter()
        .find(|(key, _)| taint_keys.clone().into_iter().any(|t| t == *key))
    {
        return Some((*actor).to_string());
    }
    conditions
        .iter()
        .find(|c| {
            c.status
                && !c.ours
                && [
                    CONDITION_DRAIN_IN_PROGRESS,
                    CONDITION_MAINTENANCE_IN_PROGRESS,
                ]
                .contains(&c.kind.as_str())
        })
        .map(|c| format!("node condition {} ({})", c.kind, c.reason))
}

/// What rollboot writes with its cordon to keep other actors off the node while it holds it:
/// each protection of `wanted` that the node does not carry yet (`present`: its annotations
/// outside `rollboot.dev/`), `"true"`, and the record of those it wrote ([`PROTECTED`]). A
/// protection already there is someone else's: it is neither written nor recorded.
pub fn protect_keys(
    wanted: &[&'static str],
    present: &BTreeMap<String, String>,
) -> Vec<(&'static str, Option<String>)> {
    let written: Vec<&'static str> = wanted
        .iter()
        .copied()
        .filter(|k| !present.contains_key(*k))
        .collect();
    if written.is_empty() {
        return Vec::new();
    }
    let mut keys: Vec<(&'static str, Option<String>)> =
        written.iter().map(|k| (*k, Some("true".into()))).collect();
    keys.push((PROTECTED, Some(written.join(","))));
    keys
}

/// What rollboot removes with its uncordon: the protections it recorded writing
/// (`protected`, the value of [`PROTECTED`]) and the record. Keys it did not write stay.
pub fn unprotect_keys(protected: &[String]) -> Vec<(&'static str, Option<String>)> {
    let mut keys: Vec<(&'static str, Option<String>)> = PROTECTIONS
        .iter()
        .filter(|k| protected.iter().any(|p| p == *k))
        .map(|k| (*k, None))
        .collect();
    if !protected.is_empty() {
        keys.push((PROTECTED, None));
    }
    keys
}

/// The protections recorded in a [`PROTECTED`] value.
pub fn parse_protected(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(kind: &str, status: bool, message: &str) -> MaintenanceCondition {
        MaintenanceCondition {
            kind: kind.into(),
            status,
            reason: "Test".into(),
            message: message.into(),
            ours: message.starts_with(CONDITION_MESSAGE_PREFIX),
            since: None,
        }
    }

    #[test]
    fn each_taint_names_its_actor() {
        for (key, actor) in [
            (TAINT_TO_BE_DELETED, "cluster-autoscaler"),
            (TAINT_KARPENTER_DISRUPTED, "karpenter"),
            (TAINT_MEDIK8S_DRAIN, "node-maintenance-operator"),
            (TAINT_OUT_OF_SERVICE, "out-of-service"),
        ] {
            let found = other_actor(["unrelated", key], &[]).unwrap();
            assert!(found.starts_with(actor), "{key}: {found}");
        }
        assert_eq!(other_actor([TAINT_UNSCHEDULABLE], &[]), None);
    }

    #[test]
    fn only_a_true_foreign_drain_or_maintenance_condition_counts() {
        let foreign = condition(CONDITION_DRAIN_IN_PROGRESS, true, "drained by the admin");
        assert!(other_actor([], &[foreign])
            .unwrap()
            .contains("DrainInProgress"));
        let foreign = condition(CONDITION_MAINTENANCE_IN_PROGRESS, true, "fw upgrade");
        assert!(other_actor([], std::slice::from_ref(&foreign)).is_some());
        let ours = condition(CONDITION_DRAIN_IN_PROGRESS, true, "rollboot: draining");
        assert_eq!(other_actor([], &[ours]), None);
        let off = condition(CONDITION_DRAIN_IN_PROGRESS, false, "done");
        assert_eq!(other_actor([], &[off]), None);
        let planned = condition(CONDITION_MAINTENANCE_PLANNED, true, "next week");
        assert_eq!(other_actor([], &[planned]), None);
    }

    #[test]
    fn protections_already_present_are_neither_written_nor_recorded() {
        let mut present = BTreeMap::new();
        let keys = protect_keys(&PROTECTIONS, &present);
        assert_eq!(
            keys,
            vec![
                (SCALE_DOWN_DISABLED, Some("true".into())),
                (DO_NOT_DISRUPT, Some("true".into())),
                (
                    PROTECTED,
                    Some(format!("{SCALE_DOWN_DISABLED},{DO_NOT_DISRUPT}"))
                ),
            ]
        );
        present.insert(DO_NOT_DISRUPT.to_string(), "true".to_string());
        let keys = protect_keys(&PROTECTIONS, &present);
        assert_eq!(
            keys,
            vec![
                (SCALE_DOWN_DISABLED, Some("true".into())),
                (PROTECTED, Some(SCALE_DOWN_DISABLED.into())),
            ]
        );
        present.insert(SCALE_DOWN_DISABLED.to_string(), "true".to_string());
        assert!(protect_keys(&PROTECTIONS, &present).is_empty());
        assert!(protect_keys(&[], &BTreeMap::new()).is_empty());
    }

    #[test]
    fn the_uncordon_removes_only_what_was_recorded() {
        let recorded = parse_protected(&format!(" {DO_NOT_DISRUPT} ,"));
        assert_eq!(
            unprotect_keys(&recorded),
            vec![(DO_NOT_DISRUPT, None), (PROTECTED, None)]
        );
        assert!(unprotect_keys(&[]).is_empty());
        // A forged record names a key rollboot never writes: only the record goes.
        assert_eq!(
            unprotect_keys(&["example.com/other".to_string()]),
            vec![(PROTECTED, None)]
        );
    }
}
