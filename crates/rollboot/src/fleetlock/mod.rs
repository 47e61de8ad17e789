//! The FleetLock protocol, for hosts with their own update agent (Zincati on Fedora CoreOS,
//! Flatcar's FleetLock client): they ask before they reboot (`POST /v1/pre-reboot`) and give
//! the slot back once up (`POST /v1/steady-state`).
//!
//! Owns, purely and sans-IO, what a request is ([`protocol`]: the header, the body, the group,
//! the error bodies), which Node a host is ([`id`]: the app-specific machine ID Zincati
//! sends, or the Node's `rollboot.dev/fleetlock-id`), and whether a request comes from that
//! host ([`caller`]: its peer address among the Node's addresses). It must never talk to the API, read a
//! clock or decide anything about a node: what rollboot answers, from the node's cycle, is the
//! controller's (`controller::fleetlock`, its pure `answer` and its serving side).

pub mod caller;
pub mod id;
pub mod protocol;

pub use protocol::{ClientRequest, Endpoint, ErrorKind};
