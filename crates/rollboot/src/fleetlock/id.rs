//! Which Node a FleetLock host is.
//!
//! Zincati identifies its host by an app-specific machine ID: systemd's
//! `sd_id128_get_machine_app_specific`, an HMAC-SHA256 keyed by the 16 bytes of
//! `/etc/machine-id` over Zincati's 16-byte application ID, cut to 16 bytes and marked as a
//! version 4 UUID, sent in lower-case hex. The kubelet reports the same `/etc/machine-id` as
//! `status.nodeInfo.machineID`, so the id is derived from each Node; a Node whose host cannot
//! be matched so (another client, another id) names its id in `rollboot.dev/fleetlock-id`.
//! Owns that derivation and the lookup. It must never talk to the API.

use ring::hmac;

use crate::node::NodeView;

/// Zincati's application ID, `de35106b6ec24688b63afddaa156679b`.
pub const ZINCATI_APP_ID: [u8; 16] = [
    0xde, 0x35, 0x10, 0x6b, 0x6e, 0xc2, 0x46, 0x88, 0xb6, 0x3a, 0xfd, 0xda, 0xa1, 0x56, 0x67, 0x9b,
];

/// The app-specific ID of the machine `machine_id` (32 hex digits, as `/etc/machine-id` and
/// `nodeInfo.machineID` hold it; dashes are ignored) for the application `app`, in lower-case
/// hex; `None` when `machine_id` is not 128 bits of hex.
pub fn app_specific(machine_id: &str, app: &[u8; 16]) -> Option<String> {
    let key = id128(machine_id)?;
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), app);
    let mut id = [0u8; 16];
    id.copy_from_slice(&tag.as_ref()[..16]);
    // A version 4 UUID, variant DCE, as systemd makes it.
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// The 16 bytes of a 128-bit ID written in hex (dashes ignored).
fn id128(text: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = text.trim().bytes().filter(|b| *b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

/// A host's FleetLock id: `given` (its Node's `rollboot.dev/fleetlock-id`) when an operator
/// gave one, else the one `derive` makes (Zincati's, from the machine ID).
pub fn host_id(given: Option<&str>, derive: impl FnOnce() -> Option<String>) -> Option<String> {
    match given.map(str::trim) {
        Some(g) if !g.is_empty() => Some(g.to_string()),
        _ => derive(),
    }
}

/// The FleetLock id of a Node's host (see [`host_id`]).
pub fn of_node(n: &NodeView) -> Option<String> {
    host_id(n.fleetlock_id.as_deref(), || {
        app_specific(&n.machine_id, &ZINCATI_APP_ID)
    })
}

/// What a lookup of a host's id found.
#[derive(Debug, PartialEq, Eq)]
pub enum Found<'a> {
    /// The one Node with that id (its name).
    One(&'a str),
    /// No Node.
    None,
    /// Several Nodes (cloned machine IDs, or the same `fleetlock-id` given twice): none is
    /// taken on a guess.
    Several(Vec<&'a str>),
}

/// The Node, among `hosts` (each Node's name and its host's id), whose host has FleetLock id
/// `id` (compared ignoring ASCII case: the ids are hex).
pub fn find<'a>(hosts: impl IntoIterator<Item = (&'a str, Option<String>)>, id: &str) -> Found<'a> {
    let mut hits: Vec<&str> = hosts
        .into_iter()
        .filter(|(_, h)| {
            h.as_deref()
                .is_some_and(|x| x.eq_ignore_ascii_case(id.trim()))
        })
        .map(|(name, _)| name)
        .collect();
    match hits.len() {
        0 => Found::None,
        1 => Found::One(hits.remove(0)),
        _ => Found::Several(hits),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_app_specific_id_is_systemds() {
        // The vector libsystemd's Rust binding tests `app_specific` with.
        let app = id128("033b1b9b264441fcaa173e9e5bf35c5a").unwrap();
        assert_eq!(
            app_specific("2e074e9b299c41a59923c51ae16f279b", &app).as_deref(),
            Some("4d4a86c9c6644a479560ded5d19a30c5")
        );
        // Dashes and surrounding whitespace are not part of the ID.
        assert_eq!(
            app_specific(" 2e074e9b-299c-41a5-9923-c51ae16f279b\n", &app).as_deref(),
            Some("4d4a86c9c6644a479560ded5d19a30c5")
        );
        assert_eq!(app_specific("not-an-id", &app), None);
        assert_eq!(app_specific("", &app), None);
    }

    #[test]
    fn a_host_is_found_by_its_derived_id_or_the_one_given() {
        let zincati = |m: &str| app_specific(m, &ZINCATI_APP_ID).unwrap();
        let a = NodeView {
            name: "a".into(),
            machine_id: "2e074e9b299c41a59923c51ae16f279b".into(),
            ..Default::default()
        };
        let b = NodeView {
            name: "b".into(),
            machine_id: "11111111111111111111111111111111".into(),
            fleetlock_id: Some("flatcar-b".into()),
            ..Default::default()
        };
        let nodes = [a.clone(), b.clone()];
        fn hosts(ns: &[NodeView]) -> Vec<(String, Option<String>)> {
            ns.iter().map(|n| (n.name.clone(), of_node(n))).collect()
        }
        fn look<'a>(hs: &'a [(String, Option<String>)], id: &str) -> Found<'a> {
            find(hs.iter().map(|(n, h)| (n.as_str(), h.clone())), id)
        }
        let hs = hosts(&nodes);
        let id_a = zincati(&a.machine_id);
        assert_eq!(look(&hs, &id_a), Found::One("a"));
        assert_eq!(look(&hs, &id_a.to_uppercase()), Found::One("a"));
        assert_eq!(look(&hs, "flatcar-b"), Found::One("b"));
        // The given id replaces the derived one.
        assert_eq!(look(&hs, &zincati(&b.machine_id)), Found::None);
        // The machine ID itself is not the host's FleetLock id.
        assert_eq!(look(&hs, &a.machine_id), Found::None);
        let clone = NodeView {
            name: "a-clone".into(),
            ..a.clone()
        };
        let twins = hosts(&[a, clone]);
        assert_eq!(look(&twins, &id_a), Found::Several(vec!["a", "a-clone"]));
        // A given id of blanks is no id: the derived one stands.
        let blank = NodeView {
            fleetlock_id: Some("  ".into()),
            ..nodes[0].clone()
        };
        assert_eq!(of_node(&blank), Some(id_a));
    }
}
