//! Draining a node with `kubectl drain` semantics, through the Eviction API (policy/v1) only.
//!
//! Owns which pods a drain evicts ([`classify`], pure, and the one `rollboot plan` previews a
//! drain with; [`Reason`] names each rule), the eviction loop (bounded concurrency;
//! 429 retried after `evictionRetryInterval` or the server's Retry-After; 500 retried with an
//! Event naming the overlapping budgets; 404 is success), and the wait until every evicted pod
//! is gone or replaced (same name, new UID). It must never delete a pod around a
//! PodDisruptionBudget unless `drain.forceDeleteAfterTimeout` says so, never list pods beyond
//! the node being drained, and never act without re-checking leadership first. Before a reboot
//! it waits for the drained pods' volumes to leave the node (`drain.volumes`), reading only that
//! node and those volumes' objects by name. The Kubernetes
//! calls sit behind [`DrainApi`] so the logic is tested without HTTP.
//!
//! Its parts:
//! - [`pods`]: what a drain does with each pod ([`classify`]), pure;
//! - [`hold`]: what holds an eviction (a budget at 0 now, one that never allows, a denial, a
//!   pod stuck terminating) and what `drain.whenBlocked` says to do about it, pure (whether a
//!   budget never allows, and its phantom disruptions, are [`crate::budgets`]');
//! - [`api`]: the calls a drain makes ([`DrainApi`]) and how it fails ([`DrainError`]);
//! - [`run`]: one drain as a value, [`NodeDrain`], with a method per phase (its evictions, the
//!   budgets it names and its wait for volumes in submodules);
//! - [`kube_drain`]: [`DrainApi`] over a kube client ([`KubeDrain`]), and [`BudgetSource`], the one
//!   thing it asks of the controller (the budgets of a namespace, from a shared watch);
//! - [`order`]: the order pods leave in (`drain.order`, or the default order), pure;
//! - [`volumes`]: which volumes of a drained pod are waited for and what is left of them, pure.
//!
//! A drain runs its phases in order ([`drain`]): [`NodeDrain::select`] lists and classifies
//! the node's pods, the drain's steps ([`order`]) each evict a set of them
//! ([`NodeDrain::evict`]), wait for it to go ([`NodeDrain::wait`]) and for its volumes to detach
//! ([`NodeDrain::wait_detached`]), and [`NodeDrain::drained`] says what was done; see [`run`].

pub mod api;
pub mod hold;
pub mod kube_drain;
pub mod order;
pub mod pods;
pub mod run;
pub mod volumes;

#[cfg(test)]
mod tests;

pub use api::{DrainApi, DrainError, Evicted, Gone};
pub use kube_drain::{BudgetSource, KubeDrain};
pub use pods::{claims_of, classify, controller_of, Disposition, PodRef, Reason};
pub use run::{drain, median_exit_seconds, Drained, NodeDrain, Part, Selected};
pub use volumes::Moved;
