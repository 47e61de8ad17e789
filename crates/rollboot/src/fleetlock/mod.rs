//! The FleetLock protocol, for hosts with their own update agent (Zincati on Fedora CoreOS,
//! Flatcar's FleetLock client): they ask before they reboot (`POST /v1/pre-reboot`) and give
//! the slot back once up (`POST /v1/steady-state`).
//!
//! Owns, purely and sans-IO, what a request is ([`protocol`]: the header, the body, the group,
//! the error bodies) and which Node a host is ([`id`]: the app-specific machine ID Zincati
//! sends, or the Node's `rollboot.dev/fleetlock-id`). It must never talk to the API, read a
//! clock or decide anything about a node: what rollboot answers, from the node's cycle, is the
//! controller's (`controller::fleetlock`, its pure `answer` and its serving side).

pub mod id;
pub mod protocol;

pub use protocol::{Endpoint, Kind, Request};
