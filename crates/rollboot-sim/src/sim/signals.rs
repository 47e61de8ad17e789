//! The names the other actors that take nodes out of service write on a Node, as the simulator
//! reads and writes them (cluster-autoscaler, Karpenter, medik8s' node-maintenance-operator,
//! the out-of-service taint, KEP-5683's maintenance conditions), and the keys rollboot writes to
//! be left alone by them and to say which conditions are its own.
//!
//! Owns the strings and the pure reading of a Node's JSON into [`NodeSignals`]; the index keeps
//! one per Node, the invariant watch and the simulated actors (`actors.rs`) read it. Pure: it
//! must never touch the store or talk HTTP. The names themselves are the product's
//! (`rollboot::node`): one spelling of the third parties' and rollboot's protocol.

use serde_json::Value;

pub use rollboot::node::{
    DO_NOT_DISRUPT, SCALE_DOWN_DISABLED, TAINT_KARPENTER_DISRUPTED as KARPENTER_DISRUPTED,
    TAINT_MEDIK8S_DRAIN as MEDIK8S_DRAIN, TAINT_OUT_OF_SERVICE as OUT_OF_SERVICE,
    TAINT_TO_BE_DELETED as TO_BE_DELETED,
};
/// The taints that say another actor is taking the node out.
pub const OTHER_TAINTS: [&str; 4] = [
    TO_BE_DELETED,
    KARPENTER_DISRUPTED,
    MEDIK8S_DRAIN,
    OUT_OF_SERVICE,
];
/// KEP-5683's conditions that say a node is being taken out, when True and not rollboot's.
pub const OTHER_CONDITIONS: [&str; 2] = [
    rollboot::node::CONDITION_DRAIN_IN_PROGRESS,
    rollboot::node::CONDITION_MAINTENANCE_IN_PROGRESS,
];

/// What a Node says of the actors that take it out, beyond its cordon.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSignals {
    /// `rollboot.dev/shutdown-requested` is present: its host is shutting down by itself.
    pub shutdown_requested: bool,
    /// `rollboot.dev/cycle-for: shutdown`: rollboot's cycle is for such a shutdown.
    pub cycle_for_shutdown: bool,
    /// The keys of [`OTHER_TAINTS`] it carries.
    pub taints: Vec<String>,
    /// The types of [`OTHER_CONDITIONS`] that are True on it and that rollboot did not write
    /// (their message does not begin with rollboot's prefix, as the product tells its own).
    pub conditions: Vec<String>,
    /// It carries [`SCALE_DOWN_DISABLED`] or [`DO_NOT_DISRUPT`] `"true"`.
    pub protected: bool,
}

impl NodeSignals {
    /// Reads a Node.
    pub fn of(node: &Value) -> NodeSignals {
        let ann = &node["metadata"]["annotations"];
        let taints = node["spec"]["taints"]
            .as_array()
            .map(|ts| {
                let mut keys: Vec<String> = ts
                    .iter()
                    .filter_map(|t| t["key"].as_str())
                    .filter(|k| OTHER_TAINTS.contains(k))
                    .map(str::to_string)
                    .collect();
                keys.dedup();
                keys
            })
            .unwrap_or_default();
        NodeSignals {
            shutdown_requested: !ann[rollboot::node::SHUTDOWN_REQUESTED].is_null(),
            cycle_for_shutdown: ann[rollboot::node::CYCLE_FOR]
                == rollboot::node::CYCLE_FOR_SHUTDOWN,
            taints,
            conditions: true_conditions(&node["status"]),
            protected: ann[SCALE_DOWN_DISABLED] == "true" || ann[DO_NOT_DISRUPT] == "true",
        }
    }

    /// Reads the conditions of a new `status` (a status write spliced into the stored bytes).
    pub fn set_status(&mut self, status: &Value) {
        self.conditions = true_conditions(status);
    }

    /// The other actors' signals on the node: its taints, and the conditions True that rollboot
    /// does not say are its own (`condition:TYPE`).
    pub fn others(&self) -> Vec<String> {
        let mut out = self.taints.clone();
        out.extend(self.conditions.iter().map(|c| format!("condition:{c}")));
        out
    }
}

fn true_conditions(status: &Value) -> Vec<String> {
    status["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter(|c| c["status"] == "True")
                .filter(|c| {
                    !c["message"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with(rollboot::node::CONDITION_MESSAGE_PREFIX)
                })
                .filter_map(|c| c["type"].as_str())
                .filter(|t| OTHER_CONDITIONS.contains(t))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_nodes_signals_are_its_other_taints_and_the_conditions_rollboot_does_not_own() {
        let n = json!({
            "metadata": {"annotations": {
                "karpenter.sh/do-not-disrupt": "true",
                "rollboot.dev/shutdown-requested": "2026-01-01T00:00:00.000Z",
            }},
            "spec": {"taints": [
                {"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            ]},
            "status": {"conditions": [
                {"type": "DrainInProgress", "status": "True", "message": "rollboot: draining for a reboot"},
                {"type": "MaintenanceInProgress", "status": "True"},
                {"type": "Drained", "status": "True"},
                {"type": "Ready", "status": "True"},
            ]},
        });
        let s = NodeSignals::of(&n);
        assert!(s.protected && s.shutdown_requested && !s.cycle_for_shutdown);
        assert_eq!(
            s.others(),
            [
                "ToBeDeletedByClusterAutoscaler",
                "condition:MaintenanceInProgress"
            ]
        );
        assert_eq!(NodeSignals::of(&json!({})), NodeSignals::default());
    }
}
