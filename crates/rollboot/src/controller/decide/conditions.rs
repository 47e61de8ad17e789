//! KEP-5683's maintenance conditions rollboot publishes on the Nodes it reboots, as a function
//! of where each node stands.
//!
//! Owns which of `MaintenancePlanned`, `DrainInProgress`, `Drained` and
//! `MaintenanceInProgress` a node should carry now, with their reasons and messages, and which
//! of those differ from what the Node shows ([`conditions_due`]). It must never touch a
//! condition another writer set (one whose message rollboot did not write), nor write itself:
//! the pass sends what this returns.

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::node::{
    NodeState, NodeView, CONDITION_DRAINED, CONDITION_DRAIN_IN_PROGRESS,
    CONDITION_MAINTENANCE_IN_PROGRESS, CONDITION_MAINTENANCE_PLANNED, CONDITION_MESSAGE_PREFIX,
    MAINTENANCE_CONDITIONS,
};

/// A maintenance condition to write on a Node's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionWrite {
    /// Its type.
    pub kind: &'static str,
    /// `True` or `False`.
    pub status: bool,
    /// Its reason (CamelCase, as the API wants).
    pub reason: &'static str,
    /// Its message, beginning with [`CONDITION_MESSAGE_PREFIX`] (how rollboot knows its own).
    pub message: String,
}

/// What a condition should say, before it is compared with the Node.
type Wish = (&'static str, bool, &'static str, String);

/// The maintenance conditions node `n` should carry and does not, as rollboot publishes them
/// (`nodes.publishConditions`): `MaintenancePlanned` True while it is flagged and waits under
/// maintenance windows (`next_opening`: the next one, when known); `DrainInProgress` True from
/// its drain's start; `Drained` and `MaintenanceInProgress` True from its reboot request until
/// it is done; each of rollboot's set False when the cycle is done or failed, or the flag is
/// gone. A condition of these types that another writer set is never in the result.
pub fn conditions_due(
    n: &NodeView,
    config: &Config,
    next_opening: Option<DateTime<Utc>>,
) -> Vec<ConditionWrite> {
    if !config.nodes.publish_conditions {
        return Vec::new();
    }
    wanted(n, config, next_opening)
        .into_iter()
        .filter(|(kind, status, reason, message)| {
            match n.maintenance_condition(kind) {
                // Another writer's: never touched.
                Some(c) if !c.ours => false,
                Some(c) => c.status != *status || c.reason != *reason || c.message != *message,
                // Absent: written only to say something True (a False nobody needs).
                None => *status,
            }
        })
        .map(|(kind, status, reason, message)| ConditionWrite {
            kind,
            status,
            reason,
            message,
        })
        .collect()
}

/// What each condition should say of `n` now; a type absent from the list is left as it is.
fn wanted(n: &NodeView, config: &Config, next_opening: Option<DateTime<Utc>>) -> Vec<Wish> {
    let say = |kind, status, reason, text: String| {
        (
            kind,
            status,
            reason,
            format!("{CONDITION_MESSAGE_PREFIX}{text}"),
        )
    };
    let drained_text = || "drained for its reboot".to_string();
    let rebooting_text = || "rebooting, until it is back and healthy".to_string();
    match n.state {
        Some(NodeState::Draining) => vec![say(
            CONDITION_DRAIN_IN_PROGRESS,
            true,
            "DrainStarted",
            "draining for a reboot".into(),
        )],
        Some(NodeState::Rebooting | NodeState::Verifying) => vec![
            say(
                CONDITION_DRAIN_IN_PROGRESS,
                false,
                "DrainCompleted",
                drained_text(),
            ),
            say(CONDITION_DRAINED, true, "DrainCompleted", drained_text()),
            say(
                CONDITION_MAINTENANCE_IN_PROGRESS,
                true,
                "RebootRequested",
                rebooting_text(),
            ),
        ],
        Some(NodeState::Cordoning) => Vec::new(),
        Some(NodeState::Done) | Some(NodeState::Failed) | None => {
            let (reason, text) = match n.state {
                Some(NodeState::Failed) => ("MaintenanceFailed", "its reboot cycle failed"),
                Some(NodeState::Done) => ("MaintenanceDone", "rebooted and healthy again"),
                _ => ("MaintenanceCancelled", "no reboot is planned any more"),
            };
            let mut out: Vec<Wish> = MAINTENANCE_CONDITIONS
                .iter()
                .map(|kind| say(kind, false, reason, text.to_string()))
                .collect();
            let waits = n.flagged() && n.state != Some(NodeState::Failed) && !n.excluded;
            if let (true, Some(_)) = (waits, &config.windows) {
                out[0] = say(
                    CONDITION_MAINTENANCE_PLANNED,
                    true,
                    "MaintenanceWindow",
                    match next_opening {
                        Some(at) => format!(
                            "a reboot is due; the next maintenance window opens at {}",
                            crate::time::annotation(at)
                        ),
                        None => "a reboot is due, in the next maintenance window".into(),
                    },
                );
            }
            out
        }
    }
}

/// The node as a state write would leave it, for the conditions to write with it: `n` with
/// the `state` that `annotations` (a merge patch's `metadata.annotations`) set, and without the
/// flags it removes. `None` when the patch writes no state.
pub fn after_state_write(n: &NodeView, annotations: &serde_json::Value) -> Option<NodeView> {
    let state: NodeState = annotations
        .get(crate::node::STATE)?
        .as_str()?
        .parse()
        .ok()?;
    let removed = |key: &str| annotations.get(key).is_some_and(serde_json::Value::is_null);
    let mut after = n.clone();
    after.state = Some(state);
    after.reboot_required &= !removed(crate::node::REBOOT_REQUIRED);
    after.reboot_requested &= !removed(crate::node::REBOOT_REQUESTED);
    Some(after)
}

/// Whether `n` carries a maintenance condition of rollboot's that is True: the pass looks at
/// it until it is set False.
pub fn publishing(n: &NodeView) -> bool {
    n.maintenance_conditions.iter().any(|c| c.ours && c.status)
}
