//! The simulated cluster on its own: its API server against kube-apiserver's recorded answers
//! (`tests/golden/`) and, when one is given, a real kube-apiserver; admission, events,
//! protobuf bodies, server-side tables, fault injection, the in-process transport, volumes,
//! the simulated world, and the other actors that take nodes out (`maintenance`).

mod admission;
mod api;
mod apiserver_differential;
mod common;
mod events;
mod faults;
mod maintenance;
mod protobuf;
mod table;
mod transport;
mod volumes;
mod world;
