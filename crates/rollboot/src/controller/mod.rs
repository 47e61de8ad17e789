//! The controller: leader election, the Node cache, the maintenance lock, and the reboot cycle.
//!
//! Owns the runtime that turns the pure decisions of [`decide`] into API writes: it keeps a
//! watch-backed cache of Nodes (trimmed of images and managedFields) and of the lock Lease, wakes
//! on every change (no polling on the happy path; a resync every few minutes is the safety net),
//! resumes every node listed in the lock, starts flagged nodes when nothing blocks, and carries
//! each node through cordon, drain, reboot, verify, uncordon and the health gate. Every step is
//! written to the Node before it is acted on, so a successor continues from what the cluster
//! says. When the lock's Lease is deleted, or its in-flight record stops parsing, it writes the
//! record rebuilt from the Nodes' own states before anything else. It says once, in a log line
//! and a warning Event, each malformed rollboot annotation it meets. It must never write
//! anything without re-checking leadership right before, never start a node while a blocker
//! holds or while the lock's record is not one it can trust, and never drain, or ask for the
//! reboot of, a node that is not cordoned.
//!
//! Its logs about a node name it through a span with a `node` field, not a field of their own:
//! a step (`steps`), a node's task (its drain, its health gate, a blocking webhook's call, a
//! fire-and-forget send), and the pass's work on one node. The spans are at the error level so
//! that a filter letting any of their logs through keeps them too: a span filtered out would
//! take the node off its warnings.
//!
//! Where each thing lives:
//! - [`decide`]: the decisions, pure (the node state machine, blockers, candidates);
//! - `replica`: one replica ([`run`]): clients, leader election, the watches that fill the
//!   caches, and the leader's loop while it leads; `config_file`: a replica restarted on a
//!   valid change of its config file ([`run_with_config_file`]);
//! - `context`: what the loop and the nodes' tasks share (`Ctx`): the config, the leadership,
//!   the loop's bell, and behind them `services` (the clients and senders the steps call) and
//!   `cluster_cache` (what the controller knows of the Nodes and the lock, and its reads);
//! - [`node_cache`]: the parsed views of the Nodes kept from one look to the next, and the
//!   Nodes a watch changed since;
//! - `pass`: one pass of the leader: resume the nodes in flight, keep house, start new nodes;
//! - `steps`: the steps of a node's cycle carried out, one module per phase;
//! - `writes`: the fenced writes of Nodes and of the lock;
//! - [`gate`]: the health gate (its pure record and state, its wait on the workload watches,
//!   [`crate::budgets::WorkloadWatches`]);
//! - [`alerts`]: `blockers.prometheus`; `observe`: the rollout's metrics and notifications;
//! - `task`: the tasks a replica starts; `error`: [`Error`].

pub mod alerts;
mod cluster_cache;
mod config_file;
mod context;
pub mod decide;
mod error;
mod fleetlock;
pub mod gate;
pub mod node_cache;
mod observe;
mod pass;
mod replica;
mod services;
mod steps;
mod task;
mod writes;

pub use config_file::run_with_config_file;
pub use error::Error;
pub use replica::{run, run_with_clients, Clients};
