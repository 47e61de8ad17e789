//! The Node protocol: the `rollboot.dev/` annotations and label, and a pure view of a Node.
//!
//! Owns the key names and their groups (`keys`), their values' text formats (states,
//! instants, reboot tokens, the agent's records: [`values`]), the reboot history a Node keeps
//! (`history`), the parsing of a `Node` into a [`NodeView`] (`view`), the other actors that take nodes out
//! and what rollboot shows them (`others`) and the JSON merge
//! patches that write the protocol (`patch`). Everything here is re-exported at
//! `crate::node::`, the one path callers use.
//!
//! It is pure: it must never talk to the API (no kube client, no tokio) nor read a clock.
//! Callers pass `now`, and the patches are sent by the one node writer
//! ([`crate::node_writer`]); the controller's caches of views live with the controller
//! ([`crate::controller::node_cache`]).

mod history;
mod keys;
mod others;
mod patch;
mod values;
mod view;

pub use history::{DrainPart, History, LastCycle};
pub use keys::*;
pub use others::{
    other_actor, parse_protected, protect_keys, unprotect_keys, MaintenanceCondition,
};
pub use patch::{
    conditions_patch, fenced, patch, state_annotations, with_labels, with_taints, ConditionPatch,
};
pub use values::{
    boot_id_well_formed, boot_words, same_boot, AgentHost, FleetLockRecord, FleetLockRequest,
    NodeState, PassedOver, Refusal, RefusalCause, ShutdownDrain, ShutdownRequest, Token, Undrained,
};
pub use view::{trim, trim_keeping, Malformed, NodeView, TaintView, HOST_ADDRESS_TYPES};

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;
