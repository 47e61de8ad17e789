//! The FleetLock protocol, for hosts with their own update agent (Zincati on Fedora CoreOS,
//! Flatcar's FleetLock client): they ask before they reboot (`POST /v1/pre-reboot`) and give
//! the slot back once up (`POST /v1/steady-state`).
//!
//! Owns, purely and sans-IO, what a request is ([`protocol`]: the header, the body, the group,
//! the error bodies), which Node a host is ([`id`]: the app-specific machine ID Zincati sends,
//! or the Node's `rollboot.dev/fleetlock-id`), and what rollboot answers and writes for it
//! ([`answer`]: from the Node, its entry in the lock, the last pass's blockers). A host gets
//! 200 on `pre-reboot` only once its node is in the lock, cordoned, drained and past its
//! hooks, with the reboot handed to it; the controller's own cycle does the rest. It must
//! never talk to the API, read a clock or decide a node's cycle: the serving side
//! (`controller::fleetlock`) reads, writes and answers; the cycle is `controller::decide`'s.

pub mod answer;
pub mod id;
pub mod protocol;

pub use answer::{answer, Ask, Reply, Write};
pub use protocol::{Endpoint, Kind, Request};
