//! The health gate: after a node's reboot, the next node may start only when the budgets that
//! covered its evicted pods are healthy again and the controllers of those pods have their
//! replicas Ready.
//!
//! Its parts:
//! - [`record`]: the [`GateRecord`] written to the Node with `state: rebooting`, and the pure
//!   [`GateState`] that decides from what has been seen (no client, no clock);
//! - [`waiting`]: [`Gate`], which feeds a [`GateState`] from the workload watches
//!   ([`crate::budgets::WorkloadWatches`], one per namespace and kind, shared with the drain and
//!   the budget-aware pick) and waits; a gate is woken only by changes to what it waits for;
//! - [`reattach`]: the pure part of the wait for the moved volumes to be attached where the
//!   evicted pods' replacements run (`drain.volumes.waitForReattach`), a wait that only warns.
//!
//! It never writes: finishing or failing the node is the caller's.

pub mod reattach;
pub mod record;
pub mod waiting;

#[cfg(test)]
mod tests;

pub use record::{GateRecord, GateState, Update};
pub use waiting::Gate;
