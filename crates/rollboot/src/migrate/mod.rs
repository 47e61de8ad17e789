//! Migrations from other reboot tools to a rollboot config (`rollboot migrate ...`).
//!
//! Owns the reading of another tool's settings and their translation into a rollboot config
//! document, with a note for every setting not carried over and why. Pure: the caller reads
//! the files and prints; nothing here touches a cluster, a file or the clock.
//!
//! - [`kured`]: a kured DaemonSet manifest (its container's command, args and `KURED_*`
//!   environment) or a flag list.

pub mod kured;
