//! The values the simulated API server stamps on objects, in kube's formats: `metav1.Time`
//! timestamps and UIDs.
//!
//! Owns their format only; the world, the write rules (`api.rs`), the invariant watch and the
//! snapshot loader all write times this way, so it sits below all of them. It must never read
//! the store, decide anything about an object, or keep state.

use chrono::{DateTime, SecondsFormat, Utc};

/// Seconds-precision RFC 3339 UTC, as metav1.Time serializes.
pub fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A random RFC 4122 version 4 UID.
pub fn new_uid() -> String {
    let b: [u8; 16] = rand::random();
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-4{}-{:x}{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        (b[8] & 0x3) | 0x8,
        &h[17..20],
        &h[20..32]
    )
}
