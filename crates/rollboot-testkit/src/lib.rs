//! What the test binaries of the workspace share, as ordinary modules (issue 48: no
//! `#[path]` includes). Each helper stands in for something outside rollboot, written from that
//! thing's own documents, never from rollboot's code:
//! - [`log`]: one tracing subscriber per test binary, through the test harness;
//! - [`http`]: a raw HTTP/1.1 client that shows every status as sent (no retries);
//! - [`fleetlock_client`]: a FleetLock client as Zincati speaks the protocol;
//! - [`fake_logind`]: systemd-logind's Manager on a private bus of Debian's `dbus-daemon`.
//!
//! It must never depend on rollboot or its simulator: a helper that did could pass because it
//! shares the code it is meant to check.

pub mod fake_logind;
pub mod fleetlock_client;
pub mod http;
pub mod log;
