//! Where a node in flight stands in its cycle, and its next step: the per-node state machine.
//!
//! Owns [`Step`], [`position`] (what of a Node's annotations belongs to the cycle its lock
//! entry started, and what a reboot token of that cycle says whatever its `state` reads), and
//! [`next_step`] as a function of (node, lock entry, config, now): the cordon, the drain, the
//! reboot asked of the agent or handed to the host, the verification, the uncordon, the hooks,
//! the health gate, and the failures with their reasons. It must never issue a second reboot
//! token for a cycle unless the agent reported the first lost on an unchanged boot, nor drain,
//! or ask for the reboot of, a node that is not cordoned.

use chrono::{DateTime, Utc};

use super::shutdown::{
    abandoned, given_back, not_followed, overtaken, shutdown_cancelled, shutdown_not_followed,
    stayed_up,
};
use crate::config::{Config, Phase};
use crate::controller::gate::record::GateRecord;
use crate::hooks::decide::{self as hooks, Action};
use crate::lock::LockEntry;
use crate::node::{self as proto, NodeState, NodeView, Token};

/// How long a step waits, at most, for the node-lifecycle controller to copy a cordon or an
/// uncordon into the `unschedulable` taint before writing again. That copy changes the Node's
/// resourceVersion a few milliseconds after rollboot's write, so a write decided before it
/// arrives is refused with 409 and decided again: a wasted round trip on every cycle. Bounded,
/// because a cluster whose controller-manager is down (or which runs without that controller)
/// never writes the taint, and the rollout must not hang on it.
pub const LIFECYCLE_SETTLE: chrono::Duration = chrono::Duration::seconds(2);

/// The next thing to do for a node listed in the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write `state: cordoning` and cordon; record `cordoned-by` unless an operator had cordoned it.
    Cordon {
        /// Whether rollboot owns the cordon (and so will uncordon).
        record_cordoned_by: bool,
    },
    /// Write `state: draining` (if not yet) and drain until the deadline.
    Drain {
        /// When the drain times out.
        deadline: DateTime<Utc>,
    },
    /// Write `state: rebooting`, `boot-id-before`, a fresh `reboot` token and its attempt
    /// number: the agent reported the previous token lost (it died between its ack and the
    /// reboot), so a new token, a new and single reboot, is issued.
    RequestReboot {
        /// Which request of the cycle this is (2 for the first new token).
        attempt: u32,
    },
    /// Hand the reboot to the host itself: write `state: rebooting`, `boot-id-before` and
    /// `handed-off`, and no token. A FleetLock host's next `pre-reboot` is answered 200; a host
    /// shutting down by itself is let go by its agent (the Node says drained).
    HandOff,
    /// The host of a cycle for its own shutdown went down before the drain was over and is on
    /// a new boot (saying so): write `state: rebooting` with `handed-off` and `undrained`, so
    /// the cycle goes on to verify it and ends counted as undrained. Nothing more is evicted.
    Overtaken(String),
    /// End the cycle without a reboot (the host gave its FleetLock slot back before it
    /// rebooted, saying why): uncordon if rollboot cordoned it, remove the cycle's keys and the
    /// host's request, and free the slot.
    Release(String),
    /// Nothing to do until the node comes back (or the deadline passes).
    AwaitReboot {
        /// When the reboot times out.
        deadline: DateTime<Utc>,
    },
    /// The node is back with a new boot ID and Ready: write `state: verifying`.
    MarkVerifying,
    /// Uncordon (rollboot cordoned it).
    Uncordon,
    /// Wait for the health gate, then finish.
    HealthGate {
        /// When the gate times out.
        deadline: DateTime<Utc>,
    },
    /// Nothing to do until the node-lifecycle controller has copied the cordon or uncordon into
    /// its taint (a watched change), or until this instant.
    Settle {
        /// When to go on without it.
        until: DateTime<Utc>,
    },
    /// Nothing to do, and the slot stays taken, until the node's Node says more (a watched
    /// change) or until this instant.
    Hold {
        /// When to look again.
        until: DateTime<Utc>,
        /// Why the slot is held.
        why: String,
    },
    /// A hook step at `phase` (see [`crate::hooks::decide`]): its write first, then its act.
    Hook {
        /// The phase.
        phase: Phase,
        /// What to record and do.
        action: Action,
    },
    /// Write `state: failed` with the reason, and free the slot.
    Fail(String),
    /// A hook held the node past its phase's timeout: as [`Step::Fail`], said as a hook's
    /// failure (Event `HookFailed`).
    FailHook {
        /// The phase that held it.
        phase: Phase,
        /// Why.
        reason: String,
    },
    /// Free the node's slot in the lock.
    Free(String),
}

/// How many reboot tokens one cycle may issue: the first, and a new one each time the agent
/// reports the previous one lost (acknowledged, then the agent restarted on the same boot).
/// When they are spent the node fails, saying so.
pub const REBOOT_ATTEMPTS: u32 = 3;

/// The agent acknowledged the current token: its reboot is under way, happened, or was lost.
fn acknowledged(n: &NodeView) -> bool {
    n.reboot_token.is_some() && n.reboot_token == n.reboot_ack
}

/// The agent acknowledged the current token, then reported it lost, and the node's boot ID is
/// still the one from before the request: nothing rebooted and nothing will for this token.
fn reboot_lost(n: &NodeView) -> bool {
    acknowledged(n)
        && n.reboot_lost == n.reboot_token
        && n.boot_id_before
            .as_deref()
            .is_some_and(|b| !n.booted_since(b))
}

/// What a Node's reboot annotations say of the reboot of the cycle `entry` started, whatever
/// its `state` says: a token once issued and taken is never followed by another for the same
/// cycle unless the agent reported it lost on an unchanged boot (see [`reboot_lost`]).
#[derive(Clone, Debug, PartialEq, Eq)]
enum RebootFacts {
    /// No token of this cycle that the agent took or may still take.
    None,
    /// A token of this cycle, issued at `issued` with `boot-id-before` on a cordoned node (or
    /// already taken by the agent): the cycle is at its reboot, and the reboot may be under way.
    Asked {
        /// The token.
        token: String,
        /// When it was issued (the instant `rebooting` was written with it).
        issued: DateTime<Utc>,
    },
    /// The agent acknowledged a token of this cycle, but `boot-id-before` is missing or
    /// malformed: whether the host rebooted cannot be verified, and asking again could
    /// reboot it a second time.
    Unverifiable {
        /// The token.
        token: String,
    },
}

/// The reboot facts of `n` for the cycle `entry` started.
fn reboot_facts(n: &NodeView, entry: &LockEntry) -> RebootFacts {
    // A reboot handed to the host (no token: the host reboots itself) once asked is asked,
    // cordoned or not: the host may be rebooting now, and starting over would drain a node
    // that is going down anyway and hand it over a second time.
    if let Some(issued) = n.handed_off_at().filter(|t| *t >= entry.since) {
        if n.boot_id_before.is_some() {
            return RebootFacts::Asked {
                token: String::new(),
                issued,
            };
        }
    }
    let Some(token) = n
        .reboot_token
        .as_deref()
        .and_then(Token::parse)
        .filter(|t| t.issued >= entry.since)
    else {
        return RebootFacts::None;
    };
    let taken = acknowledged(n);
    match &n.boot_id_before {
        // Uncordoned before the agent took the token, or after it reported it lost: the agent
        // refuses it (it acts only on a cordoned node), so the cycle may start over; the
        // cordon's write is conditional on this version, so an ack that lands first wins.
        Some(_) if !n.unschedulable && (!taken || reboot_lost(n)) => RebootFacts::None,
        Some(_) => RebootFacts::Asked {
            token: token.text,
            issued: token.issued,
        },
        None if taken => RebootFacts::Unverifiable { token: token.text },
        // Not taken and nothing to verify against: starting over (fenced) is safe.
        None => RebootFacts::None,
    }
}

/// Where a node listed in the lock stands in the cycle its entry started, as the cluster says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Position {
    /// In `state` since the instant given.
    At(NodeState, DateTime<Utc>),
    /// Nothing of this cycle that rollboot would go on from: it starts over from the cordon.
    StartOver,
    /// The agent took a reboot token of this cycle (named) that cannot be verified (see
    /// [`RebootFacts::Unverifiable`]): the node fails rather than be asked again.
    Unverifiable(String),
}

/// Where the node stands in the cycle that `entry` started (see [`Position`]), from what
/// rollboot writes in this cycle:
/// - `failed`, and `done` (written with `boot-id-before` removed), dated in this cycle, end it;
/// - a reboot token issued in this cycle with `boot-id-before` (or taken by the agent) puts the
///   cycle at its reboot, whatever `state` says (garbled, or gone backwards to `cordoning` or
///   `draining`): `verifying` when that is written and the boot ID changed, else `rebooting`
///   since the token's instant. Starting over there would issue a second token, a second
///   reboot of a host that may already be back;
/// - otherwise a state and its `state-since` (rollboot writes both in one patch) no older than
///   the entry, that agrees with what rollboot writes along with it: `draining` on a cordoned
///   node only; `verifying` once the boot ID differs from `boot-id-before` (`rebooting` always
///   comes with this cycle's token).
///
/// Anything else (a stale state from an earlier cycle, or one forged or garbled before any
/// token) starts over from the cordon: rollboot never drains, or asks for the reboot of, a node
/// that is not cordoned.
pub fn position(n: &NodeView, entry: &LockEntry) -> Position {
    let written = n
        .state
        .zip(n.state_since)
        .filter(|(_, since)| *since >= entry.since);
    match written {
        Some((NodeState::Failed, since)) => return Position::At(NodeState::Failed, since),
        Some((NodeState::Done, since)) if n.boot_id_before.is_none() => {
            return Position::At(NodeState::Done, since)
        }
        _ => {}
    }
    match reboot_facts(n, entry) {
        RebootFacts::Unverifiable { token } => return Position::Unverifiable(token),
        RebootFacts::Asked { issued, .. } => {
            return match written {
                Some((NodeState::Verifying, since)) if n.came_back() => {
                    Position::At(NodeState::Verifying, since)
                }
                _ => Position::At(NodeState::Rebooting, issued),
            }
        }
        RebootFacts::None => {}
    }
    let Some((state, since)) = written else {
        return Position::StartOver;
    };
    let agrees = match state {
        NodeState::Cordoning | NodeState::Failed => true,
        NodeState::Draining => n.unschedulable,
        // Without this cycle's token (the facts above): forged, stale or half-written.
        NodeState::Rebooting | NodeState::Done => false,
        NodeState::Verifying => n.came_back(),
    };
    if agrees {
        Position::At(state, since)
    } else {
        Position::StartOver
    }
}

/// The node's state in the cycle that `entry` started, as [`position`] reads it; `None` when
/// the cycle starts over (or cannot go on).
pub fn this_cycle(n: &NodeView, entry: &LockEntry) -> Option<NodeState> {
    match position(n, entry) {
        Position::At(state, _) => Some(state),
        Position::StartOver | Position::Unverifiable(_) => None,
    }
}

/// When the `state` written on a node listed in the lock is not where its cycle stands (a
/// garbled value, or one gone backwards behind a reboot token of this cycle), the sentence
/// that says so: what was found, what is read instead, and why. `None` when they agree, or
/// when the cycle starts over anyway.
pub fn state_contradiction(n: &NodeView, entry: &LockEntry) -> Option<String> {
    let RebootFacts::Asked { token, issued } = reboot_facts(n, entry) else {
        return None;
    };
    let Position::At(read, _) = position(n, entry) else {
        return None;
    };
    if n.state == Some(read) {
        return None;
    }
    let found = match n.state {
        Some(s) => format!("`{s}`"),
        None => "not a state".to_string(),
    };
    if token.is_empty() {
        return Some(format!(
            "node {}: annotation {} is {found} while its reboot was handed to its host at {} \
             ({} {}): read as {read}; the host reboots itself, nothing is asked again",
            n.name,
            proto::STATE,
            crate::time::annotation(issued),
            proto::BOOT_ID_BEFORE,
            n.boot_id_before.as_deref().unwrap_or_default(),
        ));
    }
    Some(format!(
        "node {}: annotation {} is {found} while its cycle holds reboot token {token} (issued \
         {}, {} {}{}): read as {read}; no second token is issued for this cycle unless the \
         agent reports this one lost with the boot ID unchanged",
        n.name,
        proto::STATE,
        crate::time::annotation(issued),
        proto::BOOT_ID_BEFORE,
        n.boot_id_before.as_deref().unwrap_or_default(),
        if acknowledged(n) {
            ", acknowledged by the agent"
        } else {
            ""
        },
    ))
}

/// The agent's refusal of the node's current reboot token, if it wrote one the controller
/// takes: once the agent acknowledged the token, only its reboot command failing
/// (`rebootCommandFailed`). Any other refusal of an acknowledged token (an agent restarted on
/// a boot its kubelet has not reported yet, an ack garbled since) says nothing of the reboot
/// that is under way or happened: the boot ID says that, or the reboot timeout does.
fn refused(n: &NodeView) -> Option<&proto::Refusal> {
    n.reboot_refused
        .as_ref()
        .filter(|r| n.reboot_token.as_deref() == Some(r.token.as_str()))
        .filter(|r| !acknowledged(n) || r.cause == proto::RefusalCause::RebootCommandFailed)
}

/// Why a reboot handed to the host did not end in time.
fn handed_timeout_reason(n: &NodeView, config: &Config) -> String {
    let within = config.reboot.timeout;
    let before = n.boot_id_before.as_deref().unwrap_or_default();
    if !n.booted_since(before) {
        format!(
            "the host was given its reboot (it reboots itself) but its boot ID is still {before} \
             after {within}: it did not reboot, or is still down"
        )
    } else if !n.ready {
        format!(
            "the host rebooted (boot ID {before} -> {}) but the node is not Ready within {within}",
            n.boot_id
        )
    } else {
        format!(
            "the host rebooted and is Ready, but the node-lifecycle controller still had its \
             not-ready or unreachable taint on it after {within}"
        )
    }
}

/// Why a reboot did not end in time, from what did and did not happen.
fn reboot_timeout_reason(n: &NodeView, config: &Config) -> String {
    let within = config.reboot.timeout;
    let token = n.reboot_token.as_deref().unwrap_or_default();
    let before = n.boot_id_before.as_deref().unwrap_or_default();
    if !acknowledged(n) {
        let ack = if n.is_malformed(proto::REBOOT_ACK) {
            format!(
                " ({} is malformed, so the agent acts on no token)",
                proto::REBOOT_ACK
            )
        } else {
            String::new()
        };
        match refused(n) {
            Some(r) => format!(
                "the agent did not acknowledge reboot token {token} within {within}{ack}: it \
                 refused it ({}): {}",
                r.cause, r.reason
            ),
            None => format!(
                "the agent did not acknowledge reboot token {token} within {within}{ack}: it is \
                 not running, or it refused the token (see the node's RebootRefused Events)"
            ),
        }
    } else if n.boot_id.is_empty() {
        format!("the node reports no boot ID {within} after the agent acknowledged reboot token {token}")
    } else if !n.booted_since(before) {
        format!(
            "the agent acknowledged reboot token {token}, but the node's boot ID is still \
             {before} after {within}: the host did not reboot, or is still down"
        )
    } else if !n.ready {
        format!(
            "the node rebooted (boot ID {before} -> {}) but is not Ready within {within}",
            n.boot_id
        )
    } else {
        format!(
            "the node rebooted and is Ready, but the node-lifecycle controller still had its \
             not-ready or unreachable taint on it after {within}"
        )
    }
}

/// The per-node state machine: from what the cluster says, the next step. Idempotent: the same
/// inputs give the same step, so a step interrupted at any point is simply decided again.
pub fn next_step(
    node: Option<&NodeView>,
    entry: &LockEntry,
    config: &Config,
    now: DateTime<Utc>,
) -> Step {
    // The longest a host can be out of service in a cycle that started at `entry.since`: its
    // drain, then its reboot, each to its timeout.
    let out_until =
        entry.since + config.drain.timeout.to_chrono() + config.reboot.timeout.to_chrono();
    let step = cycle_step(node, entry, out_until, config, now);
    match (step, node) {
        (Step::Release(why), Some(n)) => release_when_up(why, n, out_until, config, now),
        (step, _) => step,
    }
}

/// A cycle that ends without a reboot uncordons its node: never while the node is NotReady or
/// the node-lifecycle controller still taints it not-ready or unreachable (a pod scheduled
/// there after the uncordon would not start, or be evicted by the NoExecute taint). It waits
/// for the node to be up, at most until `out_until`. (The chaos campaign's seed 554: a host's
/// shutdown drain was cordoned only once the host was back on a new boot, which it then took
/// for the boot to leave; its agent removed the request, the cycle ended as cancelled, and the
/// node was uncordoned while still tainted not-ready.)
fn release_when_up(
    why: String,
    n: &NodeView,
    out_until: DateTime<Utc>,
    config: &Config,
    now: DateTime<Utc>,
) -> Step {
    while_down(n, out_until, config, now, &why).unwrap_or(Step::Release(why))
}

/// While `n` is NotReady, or tainted not-ready or unreachable: held (for `what`) until
/// `out_until`, the cycle's outer bound, then failed. `None` once it is up.
fn while_down(
    n: &NodeView,
    out_until: DateTime<Utc>,
    config: &Config,
    now: DateTime<Utc>,
    what: &str,
) -> Option<Step> {
    if n.ready && !n.not_ready_taint {
        return None;
    }
    let down = if n.ready {
        "still tainted not-ready or unreachable by the node-lifecycle controller"
    } else {
        "not Ready"
    };
    Some(if now < out_until {
        Step::Hold {
            until: out_until,
            why: format!("{what}; the node is {down}: it goes on once it is up"),
        }
    } else {
        Step::Fail(format!(
            "{what}, but the node stayed {down} past the drain and reboot timeouts ({} + {}) of its start",
            config.drain.timeout, config.reboot.timeout
        ))
    })
}

/// [`next_step`] but for the wait of a release for its node to be up.
fn cycle_step(
    node: Option<&NodeView>,
    entry: &LockEntry,
    out_until: DateTime<Utc>,
    config: &Config,
    now: DateTime<Utc>,
) -> Step {
    let Some(n) = node.filter(|n| !n.deleting) else {
        return gone_step(node.is_some());
    };
    let position = position(n, entry);
    if position == Position::StartOver && n.state.is_none() && !n.flagged() && !n.shutdown_requested
    {
        return registered_again_step(n, out_until, config, now);
    }
    let (current, since) = match position {
        Position::At(state, since) => (state, since),
        Position::StartOver => return cordon_step(n, entry.since, now),
        Position::Unverifiable(token) => {
            return Step::Fail(format!(
                "the agent acknowledged reboot token {token} of this cycle, but {} is missing \
                 or malformed: whether the host rebooted cannot be verified, and asking again \
                 could reboot it twice; no new token is issued",
                proto::BOOT_ID_BEFORE
            ))
        }
    };
    if matches!(current, NodeState::Cordoning | NodeState::Draining) {
        if let Some(step) = ended_before_reboot(n, current, since, entry.since, config, now) {
            return step;
        }
    }
    let hook = |phase: Phase| hook_step(phase, config, n, since, now);
    match current {
        NodeState::Done => hook(Phase::AfterDone).unwrap_or(Step::Free("its cycle is done".into())),
        NodeState::Failed => Step::Free("it failed".into()),
        NodeState::Cordoning if !n.unschedulable => cordon_step(n, entry.since, now),
        NodeState::Cordoning => settling(n, since, now)
            .or_else(|| hook(Phase::BeforeDrain))
            .unwrap_or(Step::Drain {
                deadline: now + config.drain.timeout.to_chrono(),
            }),
        // Drained (the drain began the afterDrain phase): its hooks, then the reboot. The
        // drain's timeout is over; the phase's own holds the node now.
        NodeState::Draining if hooks::phase_record(n, Phase::AfterDrain, since).is_some() => {
            hook(Phase::AfterDrain).unwrap_or_else(|| reboot_step(n, entry.since))
        }
        NodeState::Draining => {
            let deadline = since + config.drain.timeout.to_chrono();
            if now >= deadline && !config.drain.force_delete_after_timeout {
                Step::Fail(format!(
                    "the drain did not finish within {}",
                    config.drain.timeout
                ))
            } else {
                Step::Drain { deadline }
            }
        }
        NodeState::Rebooting => rebooting_step(n, since, config, now),
        NodeState::Verifying => verifying_step(n, since, config, now),
    }
}

/// The step of a node in the lock whose Node is being deleted (`deleting`) or is gone: its slot
/// is freed at once.
fn gone_step(deleting: bool) -> Step {
    // Deleted mid-cycle, by whoever (cluster-autoscaler and Karpenter delete a drained node
    // that looks empty to them; an operator): the node is gone from the cluster, and waiting
    // for it to come back held a slot, and the rollout, for up to the reboot timeout, for a
    // host that usually never comes back. Its slot is freed at once, said as a Warning and a
    // notification. A host that does come back registers a new Node: NotReady, it blocks new
    // starts (`blockers.maxUnreadyNodes`), and still flagged, it takes its turn again.
    Step::Free(GoneMidCycle { deleting }.to_string())
}

/// Why a node's slot was freed: its Node was deleted in the middle of its cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoneMidCycle {
    /// Being deleted (a finalizer holds it), rather than gone.
    pub deleting: bool,
}

impl std::fmt::Display for GoneMidCycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.deleting {
            f.write_str("its Node is being deleted in the middle of its cycle")
        } else {
            f.write_str("its Node was deleted from the cluster in the middle of its cycle")
        }
    }
}

/// The step of a node in the lock with no trace of its cycle and nothing asked: its Node was
/// registered again (its annotations went with the old object) after its host rebooted (the
/// agent does not flag it again: its sentinel went with the reboot). Starting over would
/// reboot it a second time. It keeps its slot until it is Ready, as any node coming back from
/// a reboot, at most until `out_until`. (A node whose reboot token of this cycle is on it has a
/// position: it is never taken for one registered again, whatever its `state` reads.)
fn registered_again_step(
    n: &NodeView,
    out_until: DateTime<Utc>,
    config: &Config,
    now: DateTime<Utc>,
) -> Step {
    while_down(
        n,
        out_until,
        config,
        now,
        "the node was registered again during its cycle",
    )
    .unwrap_or_else(|| {
        Step::Free("the node was registered again, Ready, and asks for no reboot".into())
    })
}

/// The step that ends a cycle (started at `start`) before its reboot, for a node `current`ly
/// cordoning or draining (since `since`), if one does. The host of a shutdown cycle went down
/// before the drain was over and is back: nothing is left to drain for that shutdown; the
/// cycle is at its reboot, undrained. The reason for the reboot went away before it (its
/// host's shutdown cancelled, a FleetLock host's slot given back): the cycle ends now,
/// mid-drain too. Evicting more pods for a reboot that will not happen, or that happened, is
/// disruption for nothing.
fn ended_before_reboot(
    n: &NodeView,
    current: NodeState,
    since: DateTime<Utc>,
    start: DateTime<Utc>,
    config: &Config,
    now: DateTime<Utc>,
) -> Option<Step> {
    // Just cordoned: whatever ends the cycle now waits for the node-lifecycle controller's
    // taint first (a write decided before it lands is refused with 409).
    if current == NodeState::Cordoning && n.unschedulable {
        if let Some(wait) = settling(n, since, now) {
            return Some(wait);
        }
    }
    if let Some(why) = overtaken(n) {
        return Some(Step::Overtaken(why));
    }
    if let Some(why) = abandoned(n, start) {
        return Some(Step::Release(why));
    }
    shutdown_not_followed(n, config, now).map(Step::Release)
}

/// The reboot of a drained node past its afterDrain hooks: a token to the agent, or, for a
/// host that reboots itself, the hand-off (or the end without a reboot, when the host gave
/// its slot back in this cycle or no longer asks).
///
/// `start`: when the cycle started (its lock entry's instant). The drain's end asks it too,
/// when no afterDrain hooks come first.
pub fn reboot_step(n: &NodeView, start: DateTime<Utc>) -> Step {
    // Its host shut down by itself and is back: never a token for a reboot that happened.
    if let Some(why) = overtaken(n) {
        return Step::Overtaken(why);
    }
    // Its host shuts down by itself: handed over once drained, whatever started the cycle.
    if n.shutdown_requested {
        return Step::HandOff;
    }
    if let Some(why) = abandoned(n, start) {
        return Step::Release(why);
    }
    if n.hands_off() {
        Step::HandOff
    } else {
        Step::RequestReboot { attempt: 1 }
    }
}

/// The next step of a node at its reboot (`rebooting` since `since`): back (a new boot ID,
/// Ready, the node-lifecycle controller's taints off), a new token for one the agent reported
/// lost, a failure (the tokens spent, a refusal that will not pass, the reboot timeout), or
/// the wait.
fn rebooting_step(n: &NodeView, since: DateTime<Utc>, config: &Config, now: DateTime<Utc>) -> Step {
    let before = n.boot_id_before.as_deref().unwrap_or_default();
    // Back means a new boot, Ready, and the node-lifecycle controller agreeing: until it
    // takes its not-ready/unreachable taints off, pods scheduled there after an
    // uncordon can be evicted by the NoExecute taint.
    if n.booted_since(before) && n.ready && !n.not_ready_taint {
        return Step::MarkVerifying;
    }
    if let Some(handed) = n.handed_off_at() {
        let deadline = since + config.reboot.timeout.to_chrono();
        // The host was given its reboot, and may be going down now: the cycle ends without one
        // only once the node has stayed Ready on this boot since the hand-off for longer than a
        // host takes to go down (never while it is NotReady, nor after a NotReady since: then
        // only its new boot, or the reboot timeout, ends it). Ended earlier, a give-back a second
        // after a `pre-reboot` 200 uncordoned a node mid-reboot and let the next one start.
        let up_until = stayed_up(n, handed, before)
            .then(|| handed + config.reboot.ready_without_reboot_for.to_chrono());
        if let Some(until) = up_until {
            let why = if n.for_shutdown() {
                Some(if n.shutdown_requested {
                    not_followed(n, "its hand-off", handed, config)
                } else {
                    shutdown_cancelled(n)
                })
            } else {
                given_back(n, handed)
            };
            match why {
                Some(why) if now >= until => return Step::Release(why),
                // A host's answer (a slot given back, a shutdown cancelled) is said while it waits:
                // looked at again at the reboot timeout while it is ahead, then when the node
                // has stayed up long enough (a hold until a deadline already past was a pass
                // at once, again and again, and no step: chaos seed 816, with
                // `reboot.timeout` 20s under `readyWithoutRebootFor` 5m).
                Some(why) if !n.shutdown_requested => {
                    return Step::Hold {
                        until: if now < deadline { until.min(deadline) } else { until },
                        why: format!(
                            "{why}; its cycle ends without a reboot at {} if the node stays Ready on boot {} until then",
                            crate::time::annotation(until),
                            n.boot_words()
                        ),
                    }
                }
                _ => {}
            }
        }
        return if now >= deadline {
            Step::Fail(handed_timeout_reason(n, config))
        } else {
            Step::AwaitReboot {
                deadline: up_until.map_or(deadline, |u| u.min(deadline)),
            }
        };
    }
    if reboot_lost(n) {
        // A malformed count is taken as spent: no more tokens on a guess.
        let attempt = if n.is_malformed(proto::REBOOT_ATTEMPT) {
            REBOOT_ATTEMPTS
        } else {
            n.reboot_attempt.unwrap_or(1)
        };
        if attempt >= REBOOT_ATTEMPTS {
            return Step::Fail(format!(
                "the agent acknowledged {attempt} reboot token(s), the last {}, and each \
                 time started again before the host rebooted: the boot ID is still \
                 {before}",
                n.reboot_token.as_deref().unwrap_or_default()
            ));
        }
        return Step::RequestReboot {
            attempt: attempt + 1,
        };
    }
    // The agent said it will not act on this token, for a cause that will not pass:
    // failed now, with its reason, rather than at the reboot timeout.
    if let Some(r) = refused(n).filter(|r| r.cause.fails_the_node()) {
        return Step::Fail(format!(
            "the agent refused reboot token {} ({}): {}",
            r.token, r.cause, r.reason
        ));
    }
    let deadline = since + config.reboot.timeout.to_chrono();
    if now >= deadline {
        Step::Fail(reboot_timeout_reason(n, config))
    } else {
        Step::AwaitReboot { deadline }
    }
}

/// The next step of a node back from its reboot (`verifying` since `since`): the afterReboot
/// hooks, the uncordon, the wait for the node-lifecycle controller, then the health gate (or a
/// failure: a record that does not parse, the gate's timeout).
fn verifying_step(n: &NodeView, since: DateTime<Utc>, config: &Config, now: DateTime<Utc>) -> Step {
    // Back and still cordoned: the afterReboot hooks come before the uncordon.
    if let Some(step) = hook_step(Phase::AfterReboot, config, n, since, now) {
        return step;
    }
    if n.unschedulable && n.cordoned_by.is_some() {
        return Step::Uncordon;
    }
    // The uncordon and the health gate come after the afterReboot hooks: their clocks
    // start when the phase passed, not when the node came back.
    let since = hooks::phase_record(n, Phase::AfterReboot, since)
        .and_then(|p| p.passed)
        .map_or(since, |p| p.max(since));
    // The health gate may pass at once, and its `done` would race the taint's removal.
    if let Some(wait) = settling(n, since, now) {
        return wait;
    }
    if let Some(why) = gate_problem(n) {
        return Step::Fail(format!(
            "the health gate cannot tell what must be healthy again: {why}"
        ));
    }
    let deadline = since + config.health_gate.timeout.to_chrono();
    if now >= deadline {
        Step::Fail(format!(
            "the health gate did not pass within {}",
            config.health_gate.timeout
        ))
    } else {
        Step::HealthGate { deadline }
    }
}

/// The cordon that starts (or starts over) the cycle that began at `start`; first, while a
/// node uncordoned a moment ago (`rollboot retry`, an operator) still carries the
/// node-lifecycle controller's `unschedulable` taint, the wait for that controller to take it
/// off, bounded from the cycle's start: a cordon written before would be refused with 409.
fn cordon_step(n: &NodeView, start: DateTime<Utc>, now: DateTime<Utc>) -> Step {
    settling(n, start, now).unwrap_or(Step::Cordon {
        record_cordoned_by: !n.unschedulable || n.cordoned_by.is_some(),
    })
}

/// The hook step of `phase` for a node in the state it entered at `since`, `None` once the
/// phase has passed (or has nothing configured).
fn hook_step(
    phase: Phase,
    config: &Config,
    n: &NodeView,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<Step> {
    match hooks::next(phase, config, n, since, now) {
        hooks::Next::Passed => None,
        hooks::Next::Act(action) => Some(Step::Hook { phase, action }),
        hooks::Next::Wait { until, why } => Some(Step::Hold { until, why }),
        hooks::Next::Fail(reason) => Some(Step::FailHook { phase, reason }),
    }
}

/// After rollboot's cordon or uncordon at `since`: [`Step::Settle`] while the node-lifecycle
/// controller has not copied it into its taint, for at most [`LIFECYCLE_SETTLE`].
fn settling(n: &NodeView, since: DateTime<Utc>, now: DateTime<Utc>) -> Option<Step> {
    let until = since + LIFECYCLE_SETTLE;
    (n.cordon_taint_pending() && now < until).then_some(Step::Settle { until })
}

/// Why the node's `health-gate` record does not parse, if it does not.
pub(super) fn gate_problem(n: &NodeView) -> Option<String> {
    let text = n.health_gate.as_deref()?;
    serde_json::from_str::<GateRecord>(text)
        .err()
        .map(|e| format!("annotation {} does not parse: {e}", proto::HEALTH_GATE))
}

/// Whether a reboot may be requested for the node now: only for a cordoned node (it is in the
/// lock, or no step would have been decided for it). `Err` says why not.
pub fn may_request_reboot(n: &NodeView) -> Result<(), String> {
    if n.unschedulable {
        Ok(())
    } else {
        Err(format!(
            "node {} is not cordoned: no reboot is asked for, and its cycle starts over from the cordon",
            n.name
        ))
    }
}

/// The Event reason of a node's failure, saying what failed by the state it failed in.
pub fn failure_event_reason(state: Option<NodeState>) -> &'static str {
    match state {
        Some(NodeState::Cordoning | NodeState::Draining) => "DrainFailed",
        Some(NodeState::Rebooting) => "RebootFailed",
        Some(NodeState::Verifying) => "HealthGateFailed",
        _ => "NodeFailed",
    }
}
