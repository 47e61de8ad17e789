//! What is said of a Node's malformed rollboot annotations.
//!
//! Owns [`AnnotationWarning`]: for each annotation that does not parse (or a `state` that
//! contradicts its cycle's reboot token), the key, the value found, and one sentence saying
//! what rollboot does about it, in or out of the lock. It must never decide what rollboot
//! does: it says what the state machine ([`super::next_step`]) and the pick already do.

use super::step::{gate_problem, position, state_contradiction, Position, REBOOT_ATTEMPTS};
use crate::hooks::decide as hooks;
use crate::lock::LockEntry;
use crate::node::{self as proto, NodeState, NodeView};

/// A warning about one malformed rollboot annotation of a Node: the key, the value found, and
/// what rollboot does about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnotationWarning {
    /// The annotation key.
    pub key: &'static str,
    /// The value found.
    pub value: String,
    /// One sentence for the log and the Event: node, key, value, what is expected, and the
    /// action taken.
    pub note: String,
}

/// A value as quoted in a warning: at most 100 characters.
fn quoted(v: &str) -> String {
    match v.char_indices().nth(100) {
        Some((i, _)) => format!("`{}...`", &v[..i]),
        None => format!("`{v}`"),
    }
}

/// Whether [`annotation_warnings`] has anything to say about the node (in or out of the lock).
pub fn has_annotation_warnings(n: &NodeView) -> bool {
    !n.malformed.is_empty()
        || (n.hooks.is_some() && hooks::record_problem(n).is_some())
        || (n.health_gate.is_some() && gate_problem(n).is_some())
}

/// The warnings about a Node's malformed rollboot annotations; `entry`: its lock entry, when
/// it is listed in the maintenance lock (its cycle is in progress).
pub fn annotation_warnings(n: &NodeView, entry: Option<&LockEntry>) -> Vec<AnnotationWarning> {
    let position = entry.map(|e| position(n, e));
    let mut out: Vec<AnnotationWarning> = n
        .malformed
        .iter()
        .map(|m| {
            let action = malformed_action(n, m.key, position.as_ref());
            AnnotationWarning {
                key: m.key,
                value: m.value.clone(),
                note: format!(
                    "node {}: annotation {} is {}, not {}; {action}",
                    n.name,
                    m.key,
                    quoted(&m.value),
                    m.expected
                ),
            }
        })
        .collect();
    // A state that parses but contradicts this cycle's reboot token (gone backwards): said as
    // a malformed one is (a garbled one is said above).
    if let Some(note) = entry
        .filter(|_| !n.is_malformed(proto::STATE))
        .and_then(|e| state_contradiction(n, e))
    {
        out.push(AnnotationWarning {
            key: proto::STATE,
            value: n.state.map(|s| s.as_str().to_string()).unwrap_or_default(),
            note,
        });
    }
    if let (Some(why), Some(v)) = (hooks::record_problem(n), &n.hooks) {
        out.push(AnnotationWarning {
            key: proto::HOOKS,
            value: v.clone(),
            note: format!(
                "node {}: annotation {} does not parse ({why}); read as no record: the current hook phase begins again, asking its webhooks with new tokens",
                n.name,
                proto::HOOKS
            ),
        });
    }
    if let (Some(why), Some(v)) = (gate_problem(n), &n.health_gate) {
        out.push(AnnotationWarning {
            key: proto::HEALTH_GATE,
            value: v.clone(),
            note: format!(
                "node {}: {why}; the node fails at its health gate instead of passing it blind",
                n.name
            ),
        });
    }
    out
}

/// What rollboot does about the malformed annotation `key` of `n`, whose cycle stands at
/// `position` when it is in the lock (`None` when it is not).
fn malformed_action(n: &NodeView, key: &str, position: Option<&Position>) -> String {
    let in_lock = position.is_some();
    let restart = "its maintenance cycle starts over from the cordon";
    // A cycle that holds a reboot token goes on from it, whatever its state reads.
    let at_reboot = match position {
        Some(Position::At(s @ (NodeState::Rebooting | NodeState::Verifying), _)) => Some(*s),
        _ => None,
    };
    let resumes = |s: NodeState| {
        format!(
            "its cycle holds this cycle's reboot token {}: it goes on as {s} from the token and \
             {}, and no second token is issued",
            n.reboot_token.as_deref().unwrap_or_default(),
            proto::BOOT_ID_BEFORE
        )
    };
    match key {
        proto::STATE | proto::STATE_SINCE if at_reboot.is_some() => {
            format!("read as absent; {}", resumes(at_reboot.expect("some")))
        }
        proto::STATE if in_lock => format!("read as no state: {restart}"),
        proto::STATE => {
            "read as no state: if flagged, the node starts a cycle from the cordon".into()
        }
        proto::STATE_SINCE if in_lock => {
            format!("its state cannot be dated to this cycle: {restart}")
        }
        proto::BOOT_ID_BEFORE if matches!(position, Some(Position::Unverifiable(_))) => {
            "the agent took this cycle's reboot token, so whether the host rebooted \
             cannot be verified: the node fails rather than be asked to reboot again"
                .into()
        }
        proto::BOOT_ID_BEFORE if in_lock => {
            format!("a reboot cannot be verified against it: {restart}")
        }
        proto::REBOOT if in_lock => {
            format!("read as no token, which the agent does not act on: {restart}")
        }
        proto::REBOOT => "read as no token: the agent does not act on it".into(),
        proto::REBOOT_ACK => "the agent acts on no reboot token of this node while it is \
            malformed (it cannot tell whether it acted on the current one); a rebooting \
            node fails at its reboot timeout unless it comes back with a new boot ID"
            .into(),
        proto::REBOOT_LOST => "ignored: no new reboot token is issued for it".into(),
        proto::REBOOT_COUNT => "read as absent: the next finished cycle counts 1 again".into(),
        proto::REBOOT_ATTEMPT => format!(
            "taken as the last attempt ({REBOOT_ATTEMPTS}): no new reboot token is issued \
             after a lost reboot"
        ),
        _ => "read as absent".into(),
    }
}
