//! The health gate: after a node's reboot, the next node may start only when the budgets that
//! covered its evicted pods are healthy again and the controllers of those pods have their
//! replicas Ready.
//!
//! Its parts:
//! - [`record`]: the [`GateRecord`] written to the Node with `state: rebooting`, and the pure
//!   [`GateState`] that decides from what has been seen (no client, no clock);
//! - [`hub`]: the [`Hub`]'s watches, one per namespace and kind, shared by every gate that needs
//!   it and kept a while after, so a rollout lists each namespace once rather than once per
//!   node; a watch keeps of each object only its name, health and selector (its initial list
//!   paged); the drain reads the budgets it names from them too;
//! - [`waiting`]: [`Gate`], which feeds a [`GateState`] from the hub's watches and waits; a
//!   gate is woken only by changes to what it waits for;
//! - [`reattach`]: the pure part of the wait for the moved volumes to be attached where the
//!   evicted pods' replacements run (`drain.volumes.waitForReattach`), a wait that only warns.
//!
//! It never writes: finishing or failing the node is the caller's.

pub mod hub;
pub mod reattach;
pub mod record;
pub mod waiting;

#[cfg(test)]
mod tests;

pub use hub::{Hub, FEED_LINGER};
pub use record::{GateKind, GateRecord, GateState, Health, Stream, Update, Wanted};
pub use waiting::Gate;
