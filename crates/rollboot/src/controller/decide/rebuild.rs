//! The in-flight record rebuilt from the Nodes, for when the lock's own is lost.
//!
//! Owns which nodes the rebuilt record lists, and with what entry: those whose `state` says
//! rollboot has a cycle of theirs under way that it would go on from. It must never list a
//! node whose cycle would start over from the cordon (unless a step of it is under way), nor
//! leave out one whose reboot token of this cycle is on it.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::pick::group_of;
use super::step::{next_step, Step};
use crate::config::Config;
use crate::lock::LockEntry;
use crate::node::{NodeState, NodeView, Token};

/// The in-flight record as the Nodes tell it, for when the lock's own is lost (its Lease was
/// deleted, or its record does not parse): every node, not being deleted, whose `state` is an
/// in-flight one that rollboot wrote (see [`super::this_cycle`], dated by its own
/// `state-since`) and would go on from rather than start over. A node left out (a stale or forged state) is
/// treated as any other: started again from the cordon if flagged, except a node in `acting`
/// (this leader has a step of it under way, such as a cordon not yet written after its
/// `cordoning` state): it is in flight whatever its Node shows yet, and leaving it out let a
/// new node start beside it (found by the chaos campaign: the lock deleted between a node's
/// `cordoning` and its cordon). The record is not capped at `maxNodes`: a node in flight is out
/// whether or not it is listed, and `pick` starts nothing while the listed ones fill the slots.
pub fn rebuild(
    nodes: &[NodeView],
    leader: &str,
    config: &Config,
    now: DateTime<Utc>,
    acting: &BTreeSet<String>,
) -> BTreeMap<String, LockEntry> {
    nodes
        .iter()
        .filter(|n| !n.deleting)
        .filter_map(|n| {
            let (state, since) = match (n.state, n.state_since) {
                (Some(s), Some(since)) if s.in_flight() => (s, since),
                (Some(NodeState::Done | NodeState::Failed), _) => return None,
                // A state garbled or undated on a node that holds a reboot token with the boot ID
                // to verify it against: the cycle is at its reboot (see `position`), dated by
                // the token. Left out, the node would be started again from the cordon, and a
                // second token would reboot it twice.
                _ => {
                    n.boot_id_before.as_ref()?;
                    let t = Token::parse(n.reboot_token.as_deref()?)?;
                    (NodeState::Rebooting, t.issued)
                }
            };
            let entry = LockEntry {
                group: group_of(n, config),
                state,
                since,
                leader: leader.to_string(),
            };
            let resumes = acting.contains(&n.name)
                || !matches!(next_step(Some(n), &entry, config, now), Step::Cordon { .. });
            resumes.then(|| (n.name.clone(), entry))
        })
        .collect()
}
