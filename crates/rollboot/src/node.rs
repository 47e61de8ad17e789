//! The Node protocol: the `rollboot.dev/` annotations and label, and a pure view of a Node.
//!
//! Owns the key names, their text formats (states, instants, reboot tokens), the parsing of a
//! `Node` into a [`NodeView`] and the JSON merge patches that write the protocol. It must never
//! talk to the API or read a clock: callers pass `now` and send the patches themselves.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use serde_json::{json, Map, Value};

use crate::time;

/// Prefix of every key rollboot reads or writes.
pub const PREFIX: &str = "rollboot.dev/";
/// Agent: the host's sentinel says a reboot is needed; the value is when it was first seen.
pub const REBOOT_REQUIRED: &str = "rollboot.dev/reboot-required";
/// Agent: why (the sentinel that said so).
pub const REBOOT_REQUIRED_REASON: &str = "rollboot.dev/reboot-required-reason";
/// Operator: reboot this node even without a sentinel. `rollboot request` writes the instant
/// of the request (RFC 3339), so "oldest flag first" holds; any other value (`now`, `true`,
/// written by hand) is undated: the controller writes in its place the instant it first saw
/// it (see [`NodeView::request_undated`]).
pub const REBOOT_REQUESTED: &str = "rollboot.dev/reboot-requested";
/// Operator: why the reboot was requested (`rollboot request --reason`).
pub const REBOOT_REQUESTED_REASON: &str = "rollboot.dev/reboot-requested-reason";
/// Operator, a label: never reboot this node.
pub const EXCLUDE: &str = "rollboot.dev/exclude";
/// Controller, a label: the node's drain was held for this cause (`budget`, `never`, `denied`,
/// `stuck`) and `drain.whenBlocked` says quarantine: it stays cordoned with its pods, failed,
/// until `rollboot retry` removes the label with the failure.
pub const QUARANTINED: &str = "rollboot.dev/quarantined";
/// Controller: the node's maintenance state.
pub const STATE: &str = "rollboot.dev/state";
/// Controller: when `state` was written.
pub const STATE_SINCE: &str = "rollboot.dev/state-since";
/// Controller: rollboot cordoned the node (value: the controller identity), so it may uncordon.
pub const CORDONED_BY: &str = "rollboot.dev/cordoned-by";
/// Controller: `status.nodeInfo.bootID` before the reboot.
pub const BOOT_ID_BEFORE: &str = "rollboot.dev/boot-id-before";
/// Controller: the start of the host's PID 1 before the reboot, as its agent wrote it in
/// `agent-host` (written with `boot-id-before` where known): on a node whose boot ID never
/// changes (kind-like), a new start is the new boot.
pub const INIT_START_BEFORE: &str = "rollboot.dev/init-start-before";
/// Controller: a fresh token meaning "reboot now".
pub const REBOOT: &str = "rollboot.dev/reboot";
/// Agent: the token it acted on, written before it reboots.
pub const REBOOT_ACK: &str = "rollboot.dev/reboot-ack";
/// Agent: a token it acknowledged whose reboot never happened: the agent started again on the
/// same boot of its host (it died between the ack and the reboot). The controller answers with
/// a new token, a new and single reboot, a bounded number of times.
pub const REBOOT_LOST: &str = "rollboot.dev/reboot-lost";
/// Agent: a reboot token it will not act on, or could not (its reboot command failed), and
/// why (JSON, see [`Refusal`]). The controller fails the node at once where the cause will not
/// pass ([`RefusalCause::fails_the_node`]) instead of waiting out `reboot.timeout`.
pub const REBOOT_REFUSED: &str = "rollboot.dev/reboot-refused";
/// Controller: which reboot request of the cycle the current `reboot` token is (1, 2, ...).
pub const REBOOT_ATTEMPT: &str = "rollboot.dev/reboot-attempt";
/// Controller: why the node failed (with `state: failed`).
pub const FAILURE_REASON: &str = "rollboot.dev/failure-reason";
/// Controller: what the health gate must see healthy again (JSON, written with `rebooting`).
pub const HEALTH_GATE: &str = "rollboot.dev/health-gate";
/// Controller: the volumes a drain waits to see detached (JSON list of `{pv, unique,
/// attachment}`), written before the pods using them are evicted, so that a drain resumed by
/// another leader waits for them too (once a detach has begun, only their VolumeAttachments
/// show them). Removed with `done`.
pub const DRAIN_VOLUMES: &str = "rollboot.dev/drain-volumes";
/// Controller: the ID of the Alertmanager silence of this cycle (`silences.alertmanager`),
/// written with `draining`, so that whichever leader ends the cycle expires it. Removed with
/// `done` or `failed`.
pub const SILENCE_ID: &str = "rollboot.dev/silence-id";
/// Controller: a flagged node passed over by the budget-aware pick (JSON, see [`PassedOver`]):
/// since when, and for which budget. Its `since` is the clock of `concurrency.passOverFor`, so
/// a new leader does not restart it. Removed when the node's cycle starts (the cordon), or when
/// the node is no longer waiting.
pub const PASSED_OVER: &str = "rollboot.dev/passed-over";
/// Agent: its host is shutting down by itself (logind's `PrepareForShutdown(true)` for a
/// shutdown rollboot did not ask for); the value is when the agent saw it (RFC 3339). The
/// controller cordons and drains the node at once, whatever the window, and hands the host back
/// (`rebooting` with no token) once drained. The agent removes it when the shutdown is
/// cancelled, or when it starts again (on the same boot: cancelled; on a new one: done).
pub const SHUTDOWN_REQUESTED: &str = "rollboot.dev/shutdown-requested";
/// Agent: what the agent reads of its host (JSON, see [`AgentHost`]): its boot ID and machine
/// ID as the host's PID 1 sees them, PID 1's start time (which tells one boot from the next on
/// a node whose boot ID never changes), and how a shutdown nobody planned would go there.
/// Written when the agent starts and whenever what it reads changes.
pub const AGENT_HOST: &str = "rollboot.dev/agent-host";
/// Controller: the host of a cycle started for its own shutdown went down before the drain
/// was over (JSON, see [`Undrained`]): what was left, and why. Written when the controller sees
/// the host on a new boot, or hands it back with the kubelet's graceful node shutdown having
/// killed the pods; `done` counts the cycle as undrained.
pub const UNDRAINED: &str = "rollboot.dev/undrained";
/// Operator: the FleetLock id of this Node's host, when it cannot be derived from
/// `status.nodeInfo.machineID` (lower-case hex, as the host's FleetLock client sends it).
pub const FLEETLOCK_ID: &str = "rollboot.dev/fleetlock-id";
/// Controller: the reboot of this cycle was handed to the host itself (RFC 3339 instant), in
/// place of a `reboot` token: a FleetLock host whose `pre-reboot` is now answered 200, or a
/// host shutting down by itself once drained. Written with `rebooting` and `boot-id-before`;
/// like a token, it puts the cycle at its reboot whatever `state` says.
pub const HANDED_OFF: &str = "rollboot.dev/handed-off";
/// Controller: why this cycle started when its host reboots itself (`shutdown`: the agent
/// said its host shuts down by itself), written with the cordon: a cycle for a shutdown that
/// is cancelled ends without a reboot.
pub const CYCLE_FOR: &str = "rollboot.dev/cycle-for";
/// The value of [`CYCLE_FOR`] for a cycle started by `shutdown-requested`.
pub const CYCLE_FOR_SHUTDOWN: &str = "shutdown";
/// Controller: what the FleetLock server knows of this Node's host (JSON, see
/// [`FleetLockRecord`]): its id and group, whether it gave its slot back before rebooting, and
/// its last request and answer (written when the answer changes, or a minute after the last
/// write: hosts poll).
pub const FLEETLOCK: &str = "rollboot.dev/fleetlock";
/// The `reboot-requested-reason` the FleetLock server writes with the request of a host's
/// `pre-reboot`: a cycle so flagged is handed to the host instead of a token to the agent.
pub const FLEETLOCK_REASON: &str = "fleetlock";
/// Controller, history: when the node's last reboot cycle ended `done` (RFC 3339).
pub const LAST_REBOOT: &str = "rollboot.dev/last-reboot";
/// Controller, history: the boot ID before the last reboot rollboot verified.
pub const LAST_BOOT_ID_BEFORE: &str = "rollboot.dev/last-boot-id-before";
/// Controller, history: the boot ID after it.
pub const LAST_BOOT_ID_AFTER: &str = "rollboot.dev/last-boot-id-after";
/// Controller, history: how many reboot cycles rollboot finished on this node.
pub const REBOOT_COUNT: &str = "rollboot.dev/reboot-count";
/// Controller, history: how many of the node's cycles ended with a shutdown of its host that
/// went before the drain was over ([`UNDRAINED`]); those are not counted in `reboot-count`.
pub const UNDRAINED_COUNT: &str = "rollboot.dev/undrained-count";
/// Controller, history: how long the parts of the last cycle took (JSON, see [`LastCycle`]),
/// for `rollboot plan`'s estimates and a rehearsal's timings.
pub const LAST_CYCLE: &str = "rollboot.dev/last-cycle";

/// Controller: the hooks of this cycle, phase by phase (JSON, see [`crate::hooks::Record`]):
/// when each phase began and passed, and for each webhook the token, the attempt under way or
/// done and its answer. Written before each hook is acted on, so a new leader neither calls a
/// webhook again for an attempt already made nor asks again once it said yes.
pub const HOOKS: &str = "rollboot.dev/hooks";

/// What `shutdown-requested` says: when the agent asked, and for how long logind holds the
/// shutdown for its inhibitor. Written as JSON `{"at", "delaySeconds"}`; an agent before that
/// wrote the instant alone, still read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownRequest {
    /// When the agent asked (the instant the host began shutting down).
    pub at: Option<DateTime<Utc>>,
    /// logind's `InhibitDelayMaxSec` on the host, as the agent read it.
    pub delay_seconds: Option<u64>,
}

impl ShutdownRequest {
    /// Reads an annotation's value (the JSON, or an instant alone); what does not parse is
    /// an instant-less request (the key's presence still says the host shuts down).
    pub fn parse(v: &str) -> ShutdownRequest {
        if let Some(at) = time::parse_annotation(v) {
            return ShutdownRequest {
                at: Some(at),
                delay_seconds: None,
            };
        }
        let j: Value = serde_json::from_str(v).unwrap_or_default();
        ShutdownRequest {
            at: j["at"].as_str().and_then(time::parse_annotation),
            delay_seconds: j["delaySeconds"].as_u64(),
        }
    }

    /// The annotation's value.
    pub fn annotation(&self) -> String {
        let mut j = json!({});
        if let Some(at) = self.at {
            j["at"] = json!(time::annotation(at));
        }
        if let Some(d) = self.delay_seconds {
            j["delaySeconds"] = json!(d);
        }
        j.to_string()
    }
}

/// The record of a failure: removed (with [`CYCLE_KEYS`]) when an operator clears a failed
/// node (`rollboot retry`), so the controller takes it again from the start.
pub const FAILURE_RECORD: [&str; 3] = [STATE, STATE_SINCE, FAILURE_REASON];
/// What one cycle leaves for its later steps and the agent to act on: a cycle starts without
/// them (the controller's cordon step removes them), and clearing a failure removes them too.
/// The agent's ack, lost report and refusal name the token they go with: they go with it (a
/// garbled ack left behind would make the agent refuse every later token).
pub const CYCLE_KEYS: [&str; 12] = [
    REBOOT,
    HANDED_OFF,
    UNDRAINED,
    INIT_START_BEFORE,
    CYCLE_FOR,
    BOOT_ID_BEFORE,
    HEALTH_GATE,
    REBOOT_ATTEMPT,
    HOOKS,
    REBOOT_ACK,
    REBOOT_LOST,
    REBOOT_REFUSED,
];

/// A cycle's reboot token and what the agent wrote of it: removed when the cycle is done (and
/// with [`CYCLE_KEYS`] when the next starts).
pub const TOKEN_KEYS: [&str; 5] = [
    REBOOT,
    REBOOT_ATTEMPT,
    REBOOT_ACK,
    REBOOT_LOST,
    REBOOT_REFUSED,
];

/// Annotation kubelet puts on mirror pods.
pub const MIRROR_POD: &str = "kubernetes.io/config.mirror";
/// Taint the node-lifecycle controller puts on a node whose Ready condition is not True
/// (NoSchedule at once, NoExecute after the grace period) and removes some seconds after Ready.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Taint the node-lifecycle controller puts on a node whose kubelet stopped reporting.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Taint the node-lifecycle controller keeps in step with `spec.unschedulable` (a cordon).
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// A node's maintenance state, as written in `rollboot.dev/state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Being cordoned.
    Cordoning,
    /// Being drained.
    Draining,
    /// Asked to reboot; waiting for a new boot ID and Ready.
    Rebooting,
    /// Back; uncordon and health gate.
    Verifying,
    /// The cycle finished.
    Done,
    /// The cycle failed; an operator must clear it.
    Failed,
}

impl NodeState {
    /// The annotation text.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Cordoning => "cordoning",
            NodeState::Draining => "draining",
            NodeState::Rebooting => "rebooting",
            NodeState::Verifying => "verifying",
            NodeState::Done => "done",
            NodeState::Failed => "failed",
        }
    }

    /// True for the states of a cycle in progress.
    pub fn in_flight(self) -> bool {
        !matches!(self, NodeState::Done | NodeState::Failed)
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NodeState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "cordoning" => NodeState::Cordoning,
            "draining" => NodeState::Draining,
            "rebooting" => NodeState::Rebooting,
            "verifying" => NodeState::Verifying,
            "done" => NodeState::Done,
            "failed" => NodeState::Failed,
            other => return Err(format!("unknown state `{other}`")),
        })
    }
}

/// A reboot token: the instant it was issued and a random part, written `<millis>-<hex>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// When the controller issued it.
    pub issued: DateTime<Utc>,
    /// The whole text.
    pub text: String,
}

impl Token {
    /// A fresh token issued at `now`, made unique by `nonce`.
    pub fn new(now: DateTime<Utc>, nonce: u64) -> Token {
        Token {
            issued: now,
            text: format!("{}-{:016x}", now.timestamp_millis(), nonce),
        }
    }

    /// Parses the text form; `None` when it is not a token rollboot wrote.
    pub fn parse(text: &str) -> Option<Token> {
        let (millis, rest) = text.split_once('-')?;
        if rest.is_empty() {
            return None;
        }
        let issued = DateTime::from_timestamp_millis(millis.parse().ok()?)?;
        Some(Token {
            issued,
            text: text.to_string(),
        })
    }
}

/// Why an agent refused a reboot token (or could not act on it), as a stable code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RefusalCause {
    /// The token is not in the format rollboot writes.
    TokenInvalid,
    /// The token is older than `reboot.timeout`.
    TokenExpired,
    /// `reboot-ack` is malformed: the agent cannot tell whether it already acted on the token.
    AckUnreadable,
    /// The host's boot ID cannot be read (`reboot.hostBootIdFile`).
    HostUnknown,
    /// The host under the agent is not the Node's: its boot ID (or machine ID) is another.
    WrongHost,
    /// The host's boot ID has differed from the Node's since before the token was issued (the
    /// agent reads its host's boot ID from the wrong place, or runs on another host): nothing
    /// rebooted, and nothing the agent reads can tell a reboot of its host.
    BootMismatch,
    /// The host rebooted since the token was issued: acting would be a second reboot.
    AlreadyRebooted,
    /// The node is not cordoned.
    NotCordoned,
    /// The node is not listed in the maintenance lock.
    NotInLock,
    /// The maintenance lock could not be read.
    LockUnreadable,
    /// The agent acknowledged the token and its reboot command failed.
    RebootCommandFailed,
}

impl RefusalCause {
    /// Whether the node fails at once: the cause will not pass by itself (a wrong host, an
    /// unreadable ack or boot ID, an expired token, a failing reboot command). The others are
    /// looked at again by the agent while the token lives (the lock), or are the controller's
    /// own to act on (an uncordoned node starts over, a host that rebooted is verified).
    pub fn fails_the_node(self) -> bool {
        matches!(
            self,
            RefusalCause::TokenExpired
                | RefusalCause::AckUnreadable
                | RefusalCause::HostUnknown
                | RefusalCause::WrongHost
                | RefusalCause::BootMismatch
                | RefusalCause::RebootCommandFailed
        )
    }

    /// The code, as in the annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCause::TokenInvalid => "tokenInvalid",
            RefusalCause::TokenExpired => "tokenExpired",
            RefusalCause::AckUnreadable => "ackUnreadable",
            RefusalCause::HostUnknown => "hostUnknown",
            RefusalCause::WrongHost => "wrongHost",
            RefusalCause::BootMismatch => "bootMismatch",
            RefusalCause::AlreadyRebooted => "alreadyRebooted",
            RefusalCause::NotCordoned => "notCordoned",
            RefusalCause::NotInLock => "notInLock",
            RefusalCause::LockUnreadable => "lockUnreadable",
            RefusalCause::RebootCommandFailed => "rebootCommandFailed",
        }
    }
}

impl fmt::Display for RefusalCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an agent writes in `reboot-refused`: the token, the cause, the sentence, and when.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Refusal {
    /// The token refused.
    pub token: String,
    /// Why, as a code.
    pub cause: RefusalCause,
    /// Why, as a sentence.
    pub reason: String,
    /// When the agent refused it (RFC 3339).
    pub at: String,
}

impl Refusal {
    /// The annotation text.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a Refusal serializes")
    }

    /// Parses the annotation text.
    pub fn parse(text: &str) -> Option<Refusal> {
        serde_json::from_str(text).ok()
    }
}

/// How a shutdown of its host that nobody planned would go on a node, as its agent reads its
/// host: whether the drain rollboot does before it can keep the budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ShutdownDrain {
    /// The agent holds a logind delay inhibitor, logind waits at least `drain.timeout` for it,
    /// and the kubelet's graceful node shutdown is off: the node is drained, under its budgets,
    /// before the host goes down.
    Ready,
    /// The kubelet holds a shutdown inhibitor (its graceful node shutdown is on): when a
    /// shutdown begins it kills the node's pods at once, without evictions, so no budget is
    /// kept; rollboot's drain comes after it and the cycle is recorded undrained.
    Kubelet,
    /// logind waits less than `drain.timeout` for the agent's inhibitor: a drain may be cut
    /// short by the host going down.
    ShortDelay,
    /// The agent cannot hold a logind inhibitor (no system bus, no logind): nothing is drained
    /// before such a shutdown.
    NoLogind,
}

impl ShutdownDrain {
    /// The code, as in the annotation and the metric's label.
    pub fn as_str(self) -> &'static str {
        match self {
            ShutdownDrain::Ready => "ready",
            ShutdownDrain::Kubelet => "kubelet",
            ShutdownDrain::ShortDelay => "shortDelay",
            ShutdownDrain::NoLogind => "noLogind",
        }
    }

    /// What it means for the node, in a sentence.
    pub fn meaning(self) -> &'static str {
        match self {
            ShutdownDrain::Ready => {
                "a shutdown nobody planned waits for rollboot's drain, which keeps the budgets"
            }
            ShutdownDrain::Kubelet => {
                "the kubelet's graceful node shutdown is on: a shutdown nobody planned has the \
                 kubelet kill the node's pods at once, without evictions, so budgets are not kept \
                 (set the kubelet's shutdownGracePeriod to 0s for rollboot's drain to keep them)"
            }
            ShutdownDrain::ShortDelay => {
                "logind waits less than drain.timeout for the agent: a drain before a shutdown \
                 nobody planned may be cut short (raise InhibitDelayMaxSec)"
            }
            ShutdownDrain::NoLogind => {
                "the agent cannot reach logind: nothing is drained before a shutdown nobody planned"
            }
        }
    }
}

impl fmt::Display for ShutdownDrain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an agent writes in `agent-host`: its host as it reads it there.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentHost {
    /// The host's boot ID, as its PID 1 sees it.
    pub boot_id: String,
    /// The start time of the host's PID 1, in clock ticks after the kernel's boot
    /// (`/proc/1/stat`): on nodes that share one kernel (kind-like), whose boot ID never
    /// changes, a new value is a new boot of the node; an agent's restart never changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_start: Option<u64>,
    /// The host's machine ID, when it can be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_id: Option<String>,
    /// How a shutdown nobody planned would go there.
    pub shutdown_drain: ShutdownDrain,
    /// logind's `InhibitDelayMaxUSec`, in seconds, when logind answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inhibit_delay_seconds: Option<u64>,
}

impl AgentHost {
    /// The annotation text.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("an AgentHost serializes")
    }

    /// Parses the annotation text; `None` unless it is the JSON an agent writes, with a
    /// well-formed boot ID.
    pub fn parse(text: &str) -> Option<AgentHost> {
        serde_json::from_str::<AgentHost>(text)
            .ok()
            .filter(|h| boot_id_well_formed(&h.boot_id))
    }
}

/// What the controller writes in `undrained`: the host of a shutdown cycle went down before
/// its drain was over.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Undrained {
    /// When the controller saw it (RFC 3339).
    pub at: String,
    /// Why, in a sentence.
    pub why: String,
}

impl Undrained {
    /// The annotation text.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("an Undrained serializes")
    }

    /// Parses the annotation text.
    pub fn parse(text: &str) -> Option<Undrained> {
        serde_json::from_str(text).ok()
    }
}

/// A boot of a host in words, for messages: its boot ID, and its PID 1's start where known.
pub fn boot_words(boot_id: &str, init_start: Option<u64>) -> String {
    match init_start {
        Some(t) => format!("{boot_id} (PID 1 started at {t})"),
        None => boot_id.to_string(),
    }
}

/// Whether a host on boot `boot_id`, whose PID 1 started at `init_start`, is still on the boot
/// recorded as `before_id` and `before_init` (`boot-id-before`, `init-start-before`). The
/// boot IDs decide; where PID 1's start was recorded and is known now, it must be the same
/// too (a kind-like node's boot ID is the same on every boot; its PID 1's start is not). An
/// unknown start now is taken as the same (the agent of a new boot has not said yet): only a
/// change seen is a new boot.
pub fn same_boot(
    before_id: &str,
    before_init: Option<u64>,
    boot_id: &str,
    init_start: Option<u64>,
) -> bool {
    before_id.eq_ignore_ascii_case(boot_id)
        && before_init.zip(init_start).is_none_or(|(a, b)| a == b)
}

/// A rollboot annotation whose value is not in the format rollboot writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    /// The annotation key.
    pub key: &'static str,
    /// Its value as found.
    pub value: String,
    /// What a value of this key looks like.
    pub expected: &'static str,
}

/// The longest boot ID rollboot accepts in `boot-id-before` (a kubelet writes a 36-character
/// UUID; the bound only keeps garbage out).
const BOOT_ID_MAX: usize = 128;

/// Whether `s` can be a `status.nodeInfo.bootID`: not empty, no whitespace or control
/// characters, at most [`BOOT_ID_MAX`] bytes.
pub fn boot_id_well_formed(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= BOOT_ID_MAX
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// The value of annotation `key` as `parse` reads it; a present value it refuses is listed in
/// `malformed` (with what a value should look like) and reads as absent.
fn parsed<T>(
    ann: &BTreeMap<String, String>,
    malformed: &mut Vec<Malformed>,
    key: &'static str,
    expected: &'static str,
    parse: impl Fn(&str) -> Option<T>,
) -> Option<T> {
    let v = ann.get(key)?;
    let out = parse(v);
    if out.is_none() {
        malformed.push(Malformed {
            key,
            value: v.clone(),
            expected,
        });
    }
    out
}

/// Everything rollboot needs from one Node, parsed once: a plain value, cheap to test with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// `metadata.resourceVersion` of the version this view was parsed from: a write decided
    /// from this view carries it as a precondition (see [`fenced`]); empty when unknown.
    pub resource_version: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// A `not-ready` or `unreachable` taint is on the node: the node-lifecycle controller does
    /// not count it as back yet, and pods that land on it may be evicted by that taint.
    pub not_ready_taint: bool,
    /// The `unschedulable` taint is on the node (the node-lifecycle controller's copy of
    /// `spec.unschedulable`, written a few milliseconds after a cordon or uncordon).
    pub unschedulable_taint: bool,
    /// Ready condition is True.
    pub ready: bool,
    /// `status.nodeInfo.bootID`.
    pub boot_id: String,
    /// `status.nodeInfo.machineID` (empty when unknown).
    pub machine_id: String,
    /// Being deleted.
    pub deleting: bool,
    /// `reboot-required` present.
    pub reboot_required: bool,
    /// `reboot-required-reason`.
    pub reboot_required_reason: Option<String>,
    /// `reboot-requested` present.
    pub reboot_requested: bool,
    /// The instant written in `reboot-requested`, when it is one.
    pub requested_at: Option<DateTime<Utc>>,
    /// `reboot-requested` present with a value that is not an RFC 3339 instant (`now`, `true`
    /// written by hand): it dates nothing, and the controller writes in its place the instant it
    /// first saw it, so the order "oldest flag first" holds for it too.
    pub request_undated: bool,
    /// `reboot-requested-reason`.
    pub reboot_requested_reason: Option<String>,
    /// The earliest instant written in either flag, when parseable.
    pub flagged_at: Option<DateTime<Utc>>,
    /// The `exclude` label is present (any value but `false`).
    pub excluded: bool,
    /// The `quarantined` label's cause, when present.
    pub quarantined: Option<String>,
    /// `state`, when it parses.
    pub state: Option<NodeState>,
    /// `state-since`.
    pub state_since: Option<DateTime<Utc>>,
    /// `cordoned-by`.
    pub cordoned_by: Option<String>,
    /// `boot-id-before`, when well formed (see [`boot_id_well_formed`]).
    pub boot_id_before: Option<String>,
    /// `init-start-before`, when it parses.
    pub init_start_before: Option<u64>,
    /// `reboot` token text.
    pub reboot_token: Option<String>,
    /// `reboot-ack` token text, as found (a malformed one is also listed in `malformed`).
    pub reboot_ack: Option<String>,
    /// `reboot-lost` token text, as found.
    pub reboot_lost: Option<String>,
    /// `reboot-attempt`, when it parses.
    pub reboot_attempt: Option<u32>,
    /// `reboot-refused`, when it parses.
    pub reboot_refused: Option<Refusal>,
    /// The rollboot annotations present whose value does not parse, in key order; each reads
    /// as absent in the fields above (`reboot-ack` and `reboot-lost` excepted: kept as found).
    pub malformed: Vec<Malformed>,
    /// `health-gate` JSON.
    pub health_gate: Option<String>,
    /// `silence-id`: the Alertmanager silence of this cycle.
    pub silence_id: Option<String>,
    /// `passed-over`: since when the budget-aware pick passes this waiting node over, and for
    /// which budget (absent, or unreadable: never passed over).
    pub passed_over: Option<PassedOver>,
    /// `shutdown-requested` is present: its host is shutting down by itself.
    pub shutdown_requested: bool,
    /// The instant written in `shutdown-requested`, when it is one.
    pub shutdown_requested_at: Option<DateTime<Utc>>,
    /// The logind delay the agent holds the shutdown for, as its request says (seconds).
    pub shutdown_delay_seconds: Option<u64>,
    /// Since when the Ready condition is True (its `lastTransitionTime`), when it is.
    pub ready_since: Option<DateTime<Utc>>,
    /// `agent-host`, when it parses: the agent's reading of its host.
    pub agent_host: Option<AgentHost>,
    /// `undrained`, when it parses: the host of this shutdown cycle went down before its drain
    /// was over.
    pub undrained: Option<Undrained>,
    /// `fleetlock-id`: the host's FleetLock id, given by an operator.
    pub fleetlock_id: Option<String>,
    /// `cycle-for`: why this cycle started (`shutdown`), when rollboot wrote it.
    pub cycle_for: Option<String>,
    /// `handed-off`, when it parses: the reboot was handed to the host at this instant.
    pub handed_off: Option<DateTime<Utc>>,
    /// `fleetlock`, when it parses: the FleetLock server's record of this Node's host.
    pub fleetlock: Option<FleetLockRecord>,
    /// `failure-reason` (with `state: failed`).
    pub failure_reason: Option<String>,
    /// The reboot history rollboot keeps on the Node.
    pub history: History,
    /// `hooks` JSON, as found (parsed by [`crate::hooks::Record::parse`]).
    pub hooks: Option<String>,
    /// The Node's annotations outside `rollboot.dev/` that the object it was parsed from
    /// carries (the controller's cache keeps only the hooks' gate annotations: see
    /// [`trim_keeping`]).
    pub other_annotations: BTreeMap<String, String>,
    /// Every taint of the Node, as stored (a write of the taint list is built from it).
    pub taints: Vec<TaintView>,
}

/// The `fleetlock` record: what the FleetLock server knows of a Node's host.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetLockRecord {
    /// The host's FleetLock id, as its client sends it.
    pub id: String,
    /// The FleetLock group it asked under.
    pub group: String,
    /// The host called `steady-state` before it rebooted, in the cycle its `pre-reboot`
    /// started (RFC 3339): it gives the slot back, and the cycle ends without a reboot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returned: Option<DateTime<Utc>>,
    /// The host's last request and its answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<FleetLockRequest>,
}

/// One request of a FleetLock host, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FleetLockRequest {
    /// `pre-reboot` or `steady-state`.
    pub endpoint: String,
    /// When it came (RFC 3339).
    pub at: DateTime<Utc>,
    /// The answer: `ok` for 200, else the error's `kind`.
    pub answer: String,
}

/// The `passed-over` record: the budget-aware pick passed this waiting node over, since
/// `since` (the first time), last for `budget` (`namespace/name`) with the reason `why`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PassedOver {
    /// The first pass over, RFC 3339: `concurrency.passOverFor` counts from it.
    pub since: DateTime<Utc>,
    /// The budget that held it, `namespace/name`.
    pub budget: String,
    /// What was held, in a sentence.
    pub why: String,
}

/// One taint of a Node, every field kept, so a taint list written back is the one read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaintView {
    /// Key.
    pub key: String,
    /// Value (empty when absent).
    pub value: String,
    /// Effect.
    pub effect: String,
    /// `timeAdded` (the node-lifecycle controller sets it on NoExecute taints), as RFC 3339.
    pub time_added: Option<String>,
}

impl TaintView {
    /// The JSON of this taint in `spec.taints`.
    pub fn to_json(&self) -> Value {
        let mut t = json!({"key": self.key, "effect": self.effect});
        if !self.value.is_empty() {
            t["value"] = Value::String(self.value.clone());
        }
        if let Some(at) = &self.time_added {
            t["timeAdded"] = Value::String(at.clone());
        }
        t
    }
}

/// A node's reboot history, as the controller records it when a cycle ends `done`; each field
/// is `None` when absent or malformed (then listed in [`NodeView::malformed`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// `last-reboot`: when the last cycle ended.
    pub last_reboot: Option<DateTime<Utc>>,
    /// `last-boot-id-before`.
    pub boot_id_before: Option<String>,
    /// `last-boot-id-after`.
    pub boot_id_after: Option<String>,
    /// `reboot-count`.
    pub count: Option<u32>,
    /// `undrained-count`.
    pub undrained_count: Option<u32>,
    /// `last-cycle`: how long its parts took.
    pub last_cycle: Option<LastCycle>,
}

/// How long the parts of a node's last finished cycle took, measured by the controller from
/// what the cycle wrote to the cluster: its start in the maintenance lock, the reboot token's
/// instant, the instant it was back (`verifying`), and the instant it was `done`. The
/// annotation is its JSON (`{"drainSeconds": 41.2, "rebootSeconds": 95.0, "gateSeconds": 3.1,
/// "podExitSeconds": 2.4}`), seconds to the millisecond (a rehearsal's cycles are short); a
/// part that could not be measured is absent.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LastCycle {
    /// From the cycle's start (cordon) to the reboot request: cordon, hooks, drain, settle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_seconds: Option<f64>,
    /// From the (last) reboot request until the node was back: new boot ID, Ready, and no
    /// not-ready taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_seconds: Option<f64>,
    /// From back to done: uncordon, the health gate, the afterReboot hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_seconds: Option<f64>,
    /// The median time the evicted pods took to go once their eviction was accepted, over
    /// the pods the drain saw go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_exit_seconds: Option<f64>,
    /// Of the drain, the time spent waiting for the drained pods' volumes to detach
    /// (`drain.volumes.waitForDetach`), when it waited for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detach_seconds: Option<f64>,
    /// The drain's steps, in order, each with its time and its wait for volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drain_parts: Vec<DrainPart>,
    /// With `drain.volumes.waitForReattach`: from the health gate's start until every volume
    /// that moved with the evicted pods was attached where their replacements run (absent when
    /// none moved, or when the wait timed out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reattach_seconds: Option<f64>,
    /// The PersistentVolumes not seen attached where their pods' replacements run within
    /// `drain.volumes.reattachTimeout` (a warning: the node went on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_reattached: Vec<String>,
    /// The cycle was a shutdown of its host that went before its drain was over: why (its
    /// parts measure what happened, not what a drained cycle takes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undrained: Option<String>,
    /// The reboot token the cycle ended on, and how many tokens it issued (`reboot-attempt`):
    /// the cycle's end removes both from the Node (a restarted agent must find no token to
    /// refuse); the record keeps them. `None` for a reboot handed to its host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// See [`LastCycle::token`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
}

/// One step of a finished drain, as the cycle's record and the simulator's report show it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainPart {
    /// The step ([`crate::drain::order::DrainStep::label`]).
    pub label: String,
    /// Its pods.
    pub pods: usize,
    /// From its first eviction until its pods were gone, seconds.
    pub seconds: f64,
    /// The wait for their volumes to detach after that, seconds.
    pub detach_seconds: f64,
}

// Its seconds come from clock differences, never NaN: equality is total.
impl Eq for DrainPart {}

impl LastCycle {
    /// The parts of a cycle that started at `start`, asked for its reboot at `requested`, was
    /// back at `back` and is done at `done`; each part only from instants in order. Pure.
    pub fn measure(
        start: Option<DateTime<Utc>>,
        requested: Option<DateTime<Utc>>,
        back: Option<DateTime<Utc>>,
        done: DateTime<Utc>,
        pod_exit_seconds: Option<f64>,
        detach_seconds: Option<f64>,
    ) -> LastCycle {
        let between = |a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>| {
            let (a, b) = (a?, b?);
            (b >= a).then(|| (b - a).num_milliseconds() as f64 / 1000.0)
        };
        LastCycle {
            drain_seconds: between(start, requested),
            reboot_seconds: between(requested, back),
            gate_seconds: between(back, Some(done)),
            pod_exit_seconds: pod_exit_seconds
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| (s * 1000.0).round() / 1000.0),
            detach_seconds: detach_seconds
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| (s * 1000.0).round() / 1000.0),
            drain_parts: Vec::new(),
            reattach_seconds: None,
            not_reattached: Vec::new(),
            undrained: None,
            token: None,
            attempts: None,
        }
    }

    /// The annotation text.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a LastCycle serializes")
    }

    /// Parses the annotation text: `None` unless every part present is a number of seconds
    /// (finite, not negative).
    pub fn parse(text: &str) -> Option<LastCycle> {
        let c: LastCycle = serde_json::from_str(text).ok()?;
        let ok = |v: Option<f64>| v.is_none_or(|s| s.is_finite() && s >= 0.0);
        (ok(c.drain_seconds)
            && ok(c.reboot_seconds)
            && ok(c.gate_seconds)
            && ok(c.pod_exit_seconds)
            && ok(c.detach_seconds)
            && ok(c.reattach_seconds))
        .then_some(c)
    }
}

impl History {
    /// The annotations that record one more finished cycle at `now`, from boot `before` to
    /// boot `after`: the count goes on from this one (from 1 when absent or malformed). An
    /// undrained cycle ([`LastCycle::undrained`]) is counted in `undrained-count`, not in
    /// `reboot-count`: its host went down with its pods on it.
    pub fn next(
        &self,
        now: DateTime<Utc>,
        before: &str,
        after: &str,
        cycle: &LastCycle,
    ) -> Vec<(&'static str, Option<String>)> {
        let (key, count) = if cycle.undrained.is_some() {
            (UNDRAINED_COUNT, self.undrained_count)
        } else {
            (REBOOT_COUNT, self.count)
        };
        vec![
            (LAST_REBOOT, Some(time::annotation(now))),
            (LAST_BOOT_ID_BEFORE, Some(before.to_string())),
            (LAST_BOOT_ID_AFTER, Some(after.to_string())),
            (
                key,
                Some((count.unwrap_or(0).saturating_add(1)).to_string()),
            ),
            (LAST_CYCLE, Some(cycle.to_annotation())),
        ]
    }
}

/// The keys of the cycle in progress, as parsed (a malformed value reads as absent).
struct CycleKeys {
    state: Option<NodeState>,
    state_since: Option<DateTime<Utc>>,
    boot_id_before: Option<String>,
    init_start_before: Option<u64>,
    reboot_token: Option<String>,
    handed_off: Option<DateTime<Utc>>,
    reboot_attempt: Option<u32>,
    reboot_refused: Option<Refusal>,
}

/// What a boot ID annotation looks like.
const BOOT_ID_TEXT: &str = "a boot ID: not empty, no whitespace, at most 128 bytes";

impl CycleKeys {
    /// Parses the cycle's keys of `ann`, listing the malformed ones in `malformed` (the
    /// agent's `reboot-ack` and `reboot-lost` are only checked: they are kept as found).
    fn parse(ann: &BTreeMap<String, String>, malformed: &mut Vec<Malformed>) -> CycleKeys {
        let token = "a reboot token `<milliseconds>-<hex>`";
        let as_token = |v: &str| Token::parse(v).map(|_| v.to_string());
        let keys = CycleKeys {
            state: parsed(
                ann,
                malformed,
                STATE,
                "one of cordoning, draining, rebooting, verifying, done, failed",
                |v| v.parse::<NodeState>().ok(),
            ),
            state_since: parsed(
                ann,
                malformed,
                STATE_SINCE,
                "an RFC 3339 instant",
                time::parse_annotation,
            ),
            boot_id_before: parsed(ann, malformed, BOOT_ID_BEFORE, BOOT_ID_TEXT, |v| {
                boot_id_well_formed(v).then(|| v.to_string())
            }),
            init_start_before: parsed(
                ann,
                malformed,
                INIT_START_BEFORE,
                "a whole number (clock ticks)",
                |v| v.parse::<u64>().ok(),
            ),
            reboot_token: parsed(ann, malformed, REBOOT, token, as_token),
            handed_off: parsed(
                ann,
                malformed,
                HANDED_OFF,
                "an RFC 3339 instant",
                time::parse_annotation,
            ),
            reboot_attempt: parsed(
                ann,
                malformed,
                REBOOT_ATTEMPT,
                "a whole number from 1",
                |v| v.parse::<u32>().ok().filter(|a| *a >= 1),
            ),
            reboot_refused: parsed(
                ann,
                malformed,
                REBOOT_REFUSED,
                "JSON with token, cause, reason and at, as the agent writes it",
                Refusal::parse,
            ),
        };
        parsed(ann, malformed, REBOOT_ACK, token, as_token);
        parsed(ann, malformed, REBOOT_LOST, token, as_token);
        keys
    }
}

impl History {
    /// Parses the history keys of `ann`, listing the malformed ones in `malformed`.
    fn parse(ann: &BTreeMap<String, String>, malformed: &mut Vec<Malformed>) -> History {
        let well_formed = |v: &str| boot_id_well_formed(v).then(|| v.to_string());
        History {
            last_reboot: parsed(
                ann,
                malformed,
                LAST_REBOOT,
                "an RFC 3339 instant",
                time::parse_annotation,
            ),
            boot_id_before: parsed(ann, malformed, LAST_BOOT_ID_BEFORE, BOOT_ID_TEXT, well_formed),
            boot_id_after: parsed(ann, malformed, LAST_BOOT_ID_AFTER, BOOT_ID_TEXT, well_formed),
            count: parsed(
                ann,
                malformed,
                REBOOT_COUNT,
                "a whole number from 1",
                |v| v.parse::<u32>().ok().filter(|c| *c >= 1),
            ),
            undrained_count: parsed(
                ann,
                malformed,
                UNDRAINED_COUNT,
                "a whole number from 1",
                |v| v.parse::<u32>().ok().filter(|c| *c >= 1),
            ),
            last_cycle: parsed(
                ann,
                malformed,
                LAST_CYCLE,
                "JSON with drainSeconds, rebootSeconds, gateSeconds, podExitSeconds (numbers of seconds, each optional)",
                LastCycle::parse,
            ),
        }
    }
}

impl TaintView {
    /// A Node's taint, every field kept.
    fn of(t: &k8s_openapi::api::core::v1::Taint) -> TaintView {
        TaintView {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone(),
            // As the API serializes it, so it is written back unchanged.
            time_added: t
                .time_added
                .as_ref()
                .and_then(|at| serde_json::to_value(at).ok())
                .and_then(|v| v.as_str().map(str::to_string)),
        }
    }
}

impl NodeView {
    /// Parses the parts of a Node rollboot uses.
    pub fn from_node(node: &Node) -> NodeView {
        let meta = &node.metadata;
        let empty = BTreeMap::new();
        let ann = meta.annotations.as_ref().unwrap_or(&empty);
        let get = |k: &str| ann.get(k).cloned();
        let labels = meta.labels.clone().unwrap_or_default();
        let status = node.status.as_ref();
        let ready_condition = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
        let ready = ready_condition.is_some_and(|c| c.status == "True");
        let ready_since = ready_condition
            .filter(|_| ready)
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| time::from_jiff(t.0));
        let shutdown = ann
            .get(SHUTDOWN_REQUESTED)
            .map(|v| ShutdownRequest::parse(v));
        let info = status.and_then(|s| s.node_info.as_ref());
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or(&[]);
        let tainted = |keys: &[&str]| taints.iter().any(|t| keys.contains(&t.key.as_str()));
        let requested = ann.get(REBOOT_REQUESTED);
        let mut malformed = Vec::new();
        let cycle = CycleKeys::parse(ann, &mut malformed);
        let history = History::parse(ann, &mut malformed);
        malformed.sort_by_key(|m| m.key);
        NodeView {
            name: meta.name.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            not_ready_taint: tainted(&[TAINT_NOT_READY, TAINT_UNREACHABLE]),
            unschedulable_taint: tainted(&[TAINT_UNSCHEDULABLE]),
            ready,
            boot_id: info.map(|i| i.boot_id.clone()).unwrap_or_default(),
            machine_id: info.map(|i| i.machine_id.clone()).unwrap_or_default(),
            deleting: meta.deletion_timestamp.is_some(),
            reboot_required: ann.contains_key(REBOOT_REQUIRED),
            reboot_required_reason: get(REBOOT_REQUIRED_REASON),
            reboot_requested: requested.is_some(),
            requested_at: requested.and_then(|v| time::parse_annotation(v)),
            request_undated: requested.is_some_and(|v| time::parse_annotation(v).is_none()),
            reboot_requested_reason: get(REBOOT_REQUESTED_REASON),
            flagged_at: [REBOOT_REQUIRED, REBOOT_REQUESTED]
                .iter()
                .filter_map(|k| ann.get(*k).and_then(|v| time::parse_annotation(v)))
                .min(),
            excluded: labels.get(EXCLUDE).is_some_and(|v| v != "false"),
            quarantined: labels.get(QUARANTINED).cloned(),
            state: cycle.state,
            state_since: cycle.state_since,
            cordoned_by: get(CORDONED_BY),
            boot_id_before: cycle.boot_id_before,
            init_start_before: cycle.init_start_before,
            reboot_token: cycle.reboot_token,
            reboot_ack: get(REBOOT_ACK),
            reboot_lost: get(REBOOT_LOST),
            reboot_attempt: cycle.reboot_attempt,
            reboot_refused: cycle.reboot_refused,
            malformed,
            health_gate: get(HEALTH_GATE),
            silence_id: get(SILENCE_ID),
            passed_over: ann
                .get(PASSED_OVER)
                .and_then(|v| serde_json::from_str(v).ok()),
            shutdown_requested: ann.contains_key(SHUTDOWN_REQUESTED),
            shutdown_requested_at: shutdown.as_ref().and_then(|s| s.at),
            shutdown_delay_seconds: shutdown.as_ref().and_then(|s| s.delay_seconds),
            ready_since,
            agent_host: ann.get(AGENT_HOST).and_then(|v| AgentHost::parse(v)),
            undrained: ann.get(UNDRAINED).and_then(|v| Undrained::parse(v)),
            fleetlock_id: get(FLEETLOCK_ID),
            cycle_for: get(CYCLE_FOR),
            handed_off: cycle.handed_off,
            fleetlock: ann
                .get(FLEETLOCK)
                .and_then(|v| serde_json::from_str(v).ok()),
            failure_reason: get(FAILURE_REASON),
            history,
            labels,
            hooks: get(HOOKS),
            other_annotations: ann
                .iter()
                .filter(|(k, _)| !k.starts_with(PREFIX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            taints: taints.iter().map(TaintView::of).collect(),
        }
    }

    /// Flagged for a reboot by the agent or an operator.
    pub fn flagged(&self) -> bool {
        self.reboot_required || self.reboot_requested
    }

    /// When the reboot was handed to the host (`handed-off`), if it was and no token stands
    /// beside it: the host reboots itself.
    pub fn handed_off_at(&self) -> Option<DateTime<Utc>> {
        self.handed_off.filter(|_| self.reboot_token.is_none())
    }

    /// The start of its host's PID 1 on the boot the Node reports, as its agent wrote it
    /// (`None` when the agent's record is of another boot ID, or has none).
    pub fn host_init_start(&self) -> Option<u64> {
        self.agent_host
            .as_ref()
            .filter(|h| h.boot_id.eq_ignore_ascii_case(&self.boot_id))
            .and_then(|h| h.init_start)
    }

    /// The boot the node is on, as the annotations that record it before a reboot have it:
    /// `boot-id-before` (its boot ID) and `init-start-before` (its host's PID 1 start, where
    /// the agent wrote it for that boot ID).
    pub fn boot_before(&self) -> Vec<(&'static str, Option<String>)> {
        vec![
            (BOOT_ID_BEFORE, Some(self.boot_id.clone())),
            (
                INIT_START_BEFORE,
                self.host_init_start().map(|t| t.to_string()),
            ),
        ]
    }

    /// The boot the node is on, in words.
    pub fn boot_words(&self) -> String {
        boot_words(&self.boot_id, self.host_init_start())
    }

    /// Whether the node is on a boot other than `before` and `init-start-before`
    /// ([`same_boot`]): it reports another boot ID, or (a kind-like node, whose boot ID never
    /// changes) its agent reports another start of the host's PID 1.
    pub fn booted_since(&self, before: &str) -> bool {
        !self.boot_id.is_empty()
            && !same_boot(
                before,
                self.init_start_before,
                &self.boot_id,
                self.host_init_start(),
            )
    }

    /// The node is on a boot other than `boot-id-before`.
    pub fn came_back(&self) -> bool {
        self.boot_id_before
            .as_deref()
            .is_some_and(|b| self.booted_since(b))
    }

    /// This cycle was started for a shutdown of its host (`cycle-for: shutdown`).
    pub fn for_shutdown(&self) -> bool {
        self.cycle_for.as_deref() == Some(CYCLE_FOR_SHUTDOWN)
    }

    /// Its host reboots itself: a FleetLock host asked for this cycle (its `pre-reboot`
    /// flagged it), so the reboot is handed to the host instead of a token to the agent.
    pub fn hands_off(&self) -> bool {
        self.reboot_requested
            && self.reboot_requested_reason.as_deref() == Some(FLEETLOCK_REASON)
            && self.fleetlock.is_some()
    }

    /// The node-lifecycle controller has not yet copied `spec.unschedulable` into its taint.
    /// It will, within milliseconds, and that write changes the Node's resourceVersion: a
    /// write decided from this view would be refused with 409 (see [`fenced`]).
    pub fn cordon_taint_pending(&self) -> bool {
        self.unschedulable != self.unschedulable_taint
    }

    /// Whether the value of `key` is present and malformed.
    pub fn is_malformed(&self, key: &str) -> bool {
        self.malformed.iter().any(|m| m.key == key)
    }

    /// The reboot token is written and not yet acknowledged by the agent.
    pub fn token_unacknowledged(&self) -> Option<&str> {
        match (&self.reboot_token, &self.reboot_ack) {
            (Some(t), Some(a)) if t == a => None,
            (Some(t), _) => Some(t),
            _ => None,
        }
    }
}

/// Keeps of a Node only what [`NodeView::from_node`] reads, before it is cached: name,
/// resourceVersion, labels, rollboot's own annotations, deletion, `spec.unschedulable`, the
/// taints, the Ready condition, the boot ID and the machine ID. A kubelet's Node carries images, volumes,
/// addresses, capacity and a dozen conditions; 5,000 of them kept whole were half the
/// controller's memory. Every taint is kept (a Node has a handful): a write of the taint list
/// replaces it whole, so it must be built from all of them.
pub fn trim(node: Node) -> Node {
    trim_keeping(node, &[])
}

/// The Node address types (`status.addresses`) a host's own requests may come from: the
/// FleetLock server answers a host only from one of them.
pub const HOST_ADDRESS_TYPES: [&str; 2] = ["InternalIP", "ExternalIP"];

/// [`trim`], keeping also the annotations named in `keep` (the hooks' gate annotations).
pub fn trim_keeping(node: Node, keep: &[String]) -> Node {
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus, NodeSystemInfo};
    let meta = node.metadata;
    let status = node.status.map(|s| NodeStatus {
        conditions: s
            .conditions
            .map(|cs| cs.into_iter().filter(|c| c.type_ == "Ready").collect()),
        node_info: s.node_info.map(|i| NodeSystemInfo {
            boot_id: i.boot_id,
            // The FleetLock server finds a host's Node by an id derived from it.
            machine_id: i.machine_id,
            ..Default::default()
        }),
        // The FleetLock server answers a host only from one of these.
        addresses: s.addresses.map(|a| {
            a.into_iter()
                .filter(|a| HOST_ADDRESS_TYPES.contains(&a.type_.as_str()))
                .collect()
        }),
        ..Default::default()
    });
    Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: meta.name,
            uid: meta.uid,
            resource_version: meta.resource_version,
            deletion_timestamp: meta.deletion_timestamp,
            labels: meta.labels,
            annotations: meta.annotations.map(|a| {
                a.into_iter()
                    .filter(|(k, _)| k.starts_with(PREFIX) || keep.contains(k))
                    .collect()
            }),
            ..Default::default()
        },
        spec: node.spec.map(|s| NodeSpec {
            unschedulable: s.unschedulable,
            taints: s.taints,
            ..Default::default()
        }),
        status,
    }
}

/// A JSON merge patch of the Node's annotations (a `None` value removes the key), and
/// optionally of `spec.unschedulable`.
pub fn patch(annotations: &[(&str, Option<String>)], unschedulable: Option<bool>) -> Value {
    let mut ann = Map::new();
    for (k, v) in annotations {
        ann.insert(
            (*k).to_string(),
            v.clone().map_or(Value::Null, Value::String),
        );
    }
    let mut p = json!({ "metadata": { "annotations": ann } });
    if let Some(u) = unschedulable {
        // `null` rather than `false` removes the field, as `kubectl uncordon` does.
        p["spec"] = json!({ "unschedulable": if u { Value::Bool(true) } else { Value::Null } });
    }
    p
}

/// Adds to a merge patch the Node's labels to set (`Some`) or remove (`None`).
pub fn with_labels(mut patch: Value, labels: &[(String, Option<String>)]) -> Value {
    if labels.is_empty() {
        return patch;
    }
    let mut m = Map::new();
    for (k, v) in labels {
        m.insert(k.clone(), v.clone().map_or(Value::Null, Value::String));
    }
    patch["metadata"]["labels"] = Value::Object(m);
    patch
}

/// Adds to a merge patch the Node's whole taint list: a JSON merge patch replaces a list, so
/// `taints` must be every taint the Node keeps (built from a view of the version the patch is
/// fenced by). No taints writes `null`, as the API server stores an empty list.
pub fn with_taints(mut patch: Value, taints: &[TaintView]) -> Value {
    patch["spec"]["taints"] = if taints.is_empty() {
        Value::Null
    } else {
        Value::Array(taints.iter().map(TaintView::to_json).collect())
    };
    patch
}

/// `patch` made conditional on the Node still being at `resource_version`: kube-apiserver
/// answers 409 Conflict to a merge patch whose `metadata.resourceVersion` is not the stored one.
/// This fences a write decided from a view against every write made since that view, by anyone
/// (a newer leader, the agent, the kubelet). An empty `resource_version` leaves it unconditional.
pub fn fenced(mut patch: Value, resource_version: &str) -> Value {
    if !resource_version.is_empty() {
        patch["metadata"]["resourceVersion"] = Value::String(resource_version.to_string());
    }
    patch
}

/// The annotations that move a node to `state` at `now`.
pub fn state_annotations(
    state: NodeState,
    now: DateTime<Utc>,
) -> Vec<(&'static str, Option<String>)> {
    vec![
        (STATE, Some(state.as_str().to_string())),
        (STATE_SINCE, Some(time::annotation(now))),
    ]
}

/// The Nodes a watch changed since their views were last brought up to date: a look after a
/// few Node events updates those views ([`ViewCache::update`]) instead of every Node's.
#[derive(Default)]
pub struct NodeChanges {
    /// Names of the Nodes added, changed or deleted.
    pub names: std::collections::HashSet<String>,
    /// The watch (re)listed: every Node is to be looked at again ([`ViewCache::refresh`]).
    pub relisted: bool,
}

impl NodeChanges {
    /// Notes what one event of a Node watch changed.
    pub fn note(&mut self, ev: &kube::runtime::watcher::Event<Node>) {
        use kube::runtime::watcher::Event;
        match ev {
            Event::Apply(n) | Event::Delete(n) => {
                self.names
                    .insert(n.metadata.name.clone().unwrap_or_default());
            }
            Event::Init | Event::InitApply(_) | Event::InitDone => self.relisted = true,
        }
    }
}

/// Parsed views of a set of Nodes, kept from one look to the next: a Node is parsed again only
/// when its resourceVersion changed. Parsing every Node at every look cost O(nodes) parses per
/// Node event in a large rollout (issue 14: the controller's pass, the simulator's report loop).
///
/// Beside the views it keeps, up to date with each one parsed, what a pass would otherwise
/// look at every view for: the positions of the views its `notable` test picks (the few a
/// pass must read although they did not change) and how many views are in each state.
#[derive(Default)]
pub struct ViewCache {
    /// Per node name: its position in `views`.
    index: std::collections::HashMap<String, usize>,
    /// The resourceVersion each view was parsed from, by position.
    versions: Vec<String>,
    /// Shared with whoever asked for them; changed in place when nobody holds them any more.
    views: std::sync::Arc<Vec<NodeView>>,
    /// The test that makes a view notable; no view is without one.
    notable_if: Option<Notable>,
    /// The positions of the notable views.
    notable: std::collections::BTreeSet<usize>,
    /// How many views are in each state.
    states: std::collections::HashMap<NodeState, usize>,
}

/// The test of a notable view (see [`ViewCache::with_notable`]).
pub type Notable = Box<dyn Fn(&NodeView) -> bool + Send + Sync>;

/// Keeps a [`ViewCache`]'s notable positions and state counts as the view at `i` changes
/// from `old` (none: new) to `new` (none: gone).
fn track(
    notable: &mut std::collections::BTreeSet<usize>,
    states: &mut std::collections::HashMap<NodeState, usize>,
    notable_if: Option<&Notable>,
    i: usize,
    old: Option<&NodeView>,
    new: Option<&NodeView>,
) {
    if let Some(s) = old.and_then(|v| v.state) {
        if let Some(c) = states.get_mut(&s) {
            *c = c.saturating_sub(1);
        }
    }
    if let Some(s) = new.and_then(|v| v.state) {
        *states.entry(s).or_default() += 1;
    }
    match (new, notable_if) {
        (Some(v), Some(f)) if f(v) => {
            notable.insert(i);
        }
        _ => {
            notable.remove(&i);
        }
    }
}

impl ViewCache {
    /// An empty cache whose notable views are those `f` picks.
    pub fn with_notable(f: impl Fn(&NodeView) -> bool + Send + Sync + 'static) -> ViewCache {
        ViewCache {
            notable_if: Some(Box::new(f)),
            ..ViewCache::default()
        }
    }

    /// The views of `nodes` (the whole set, each Node once), in a stable order: the order in
    /// which each was first seen.
    pub fn refresh<'a>(
        &mut self,
        nodes: impl IntoIterator<Item = &'a Node>,
    ) -> std::sync::Arc<Vec<NodeView>> {
        let out = std::sync::Arc::make_mut(&mut self.views);
        let mut seen = vec![false; out.len()];
        for n in nodes {
            let name = n.metadata.name.as_deref().unwrap_or_default();
            let version = n.metadata.resource_version.as_deref().unwrap_or_default();
            let (notable, states, f) = (&mut self.notable, &mut self.states, &self.notable_if);
            match self.index.get(name) {
                Some(&i) => {
                    if self.versions[i] != version {
                        let new = NodeView::from_node(n);
                        track(notable, states, f.as_ref(), i, Some(&out[i]), Some(&new));
                        out[i] = new;
                        self.versions[i] = version.to_string();
                    }
                    seen[i] = true;
                }
                None => {
                    let new = NodeView::from_node(n);
                    track(notable, states, f.as_ref(), out.len(), None, Some(&new));
                    self.index.insert(name.to_string(), out.len());
                    out.push(new);
                    self.versions.push(version.to_string());
                    seen.push(true);
                }
            }
        }
        if seen.contains(&false) {
            // Nodes gone: keep the others, in order, and index them again.
            self.keep_only(&seen);
        }
        self.views.clone()
    }

    /// Keeps the views flagged in `keep` (one flag per view), in order, and indexes them again.
    fn keep_only(&mut self, keep: &[bool]) {
        let out = std::sync::Arc::make_mut(&mut self.views);
        let mut k = keep.iter();
        out.retain(|_| *k.next().expect("one flag per view"));
        let mut k = keep.iter();
        self.versions
            .retain(|_| *k.next().expect("one flag per view"));
        self.index.clear();
        let index = out.iter().enumerate().map(|(i, v)| (v.name.clone(), i));
        self.index.extend(index);
        // Positions moved: counted again (Nodes are seldom deleted).
        self.notable.clear();
        self.states.clear();
        for (i, v) in out.iter().enumerate() {
            let f = self.notable_if.as_ref();
            track(&mut self.notable, &mut self.states, f, i, None, Some(v));
        }
    }

    /// Whether the views were ever refreshed from a whole set of Nodes: [`ViewCache::update`]
    /// only edits what a [`ViewCache::refresh`] built.
    pub fn primed(&self) -> bool {
        !self.index.is_empty() || !self.versions.is_empty()
    }

    /// Updates the views of the Nodes named in `changed` only, each to its Node as it is now
    /// (`None`: gone), and returns them all. A pass after one Node event costs that Node, not
    /// a look at every Node (issue 14: at 5,000 Nodes the full look was a quarter of the
    /// controller's time per rebooted node). Nothing is copied when nothing changed.
    pub fn update<N: std::ops::Deref<Target = Node>>(
        &mut self,
        changed: impl IntoIterator<Item = (String, Option<N>)>,
    ) -> std::sync::Arc<Vec<NodeView>> {
        let mut sets = Vec::new();
        let mut adds = Vec::new();
        let mut gone = Vec::new();
        for (name, node) in changed {
            match (self.index.get(&name), node) {
                (Some(&i), Some(n)) => {
                    if self.versions[i]
                        != n.metadata.resource_version.as_deref().unwrap_or_default()
                    {
                        sets.push((i, n));
                    }
                }
                (None, Some(n)) => adds.push(n),
                (Some(&i), None) => gone.push(i),
                (None, None) => {}
            }
        }
        if sets.is_empty() && adds.is_empty() && gone.is_empty() {
            return self.views.clone();
        }
        let out = std::sync::Arc::make_mut(&mut self.views);
        let version = |n: &Node| n.metadata.resource_version.clone().unwrap_or_default();
        let (notable, states, f) = (&mut self.notable, &mut self.states, &self.notable_if);
        for (i, n) in sets {
            let new = NodeView::from_node(&n);
            track(notable, states, f.as_ref(), i, Some(&out[i]), Some(&new));
            out[i] = new;
            self.versions[i] = version(&n);
        }
        for n in adds {
            let name = n.metadata.name.clone().unwrap_or_default();
            if self.index.contains_key(&name) {
                continue;
            }
            let new = NodeView::from_node(&n);
            track(notable, states, f.as_ref(), out.len(), None, Some(&new));
            self.index.insert(name, out.len());
            out.push(new);
            self.versions.push(version(&n));
        }
        if !gone.is_empty() {
            let mut keep = vec![true; out.len()];
            for i in gone {
                keep[i] = false;
            }
            self.keep_only(&keep);
        }
        self.views.clone()
    }

    /// The position of the view of the Node `name` in the views as last refreshed or updated.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// Whether a Node of that name is in the set as last refreshed.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The positions of the notable views (those the test given to
    /// [`ViewCache::with_notable`] picks), in the views' order.
    pub fn notable(&self) -> impl Iterator<Item = usize> + '_ {
        self.notable.iter().copied()
    }

    /// How many views are in each state (a state no view is in may count 0 or be absent).
    pub fn state_counts(&self) -> &std::collections::HashMap<NodeState, usize> {
        &self.states
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Builders for test Nodes.
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo};

    /// A Ready, schedulable node with boot ID `boot-1` and the given labels.
    pub fn node(name: &str, labels: &[(&str, &str)]) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        n.metadata.annotations = Some(BTreeMap::new());
        n.spec = Some(NodeSpec::default());
        n.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            node_info: Some(NodeSystemInfo {
                boot_id: "boot-1".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        n
    }

    /// Adds a taint.
    pub fn taint(mut n: Node, key: &str, effect: &str) -> Node {
        n.spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new)
            .push(k8s_openapi::api::core::v1::Taint {
                key: key.into(),
                effect: effect.into(),
                ..Default::default()
            });
        n
    }

    /// Sets an annotation.
    pub fn annotate(mut n: Node, k: &str, v: &str) -> Node {
        n.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(k.into(), v.into());
        n
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_view_cache_parses_a_node_again_only_when_its_version_changed() {
        let mut a = fixtures::node("a", &[]);
        a.metadata.resource_version = Some("1".into());
        let mut b = fixtures::node("b", &[]);
        b.metadata.resource_version = Some("2".into());
        let mut cache = ViewCache::default();
        let first = cache.refresh([&a, &b]);
        assert_eq!(
            first.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(!first[0].flagged());
        // The same version with other content (never so on a server): the cached view stands.
        let same_version = fixtures::annotate(a.clone(), REBOOT_REQUIRED, "2026-01-01T00:00:00Z");
        assert!(!cache.refresh([&same_version, &b])[0].flagged());
        // A new version is parsed, while the view handed out before is left as it was.
        let mut changed = same_version;
        changed.metadata.resource_version = Some("3".into());
        let second = cache.refresh([&b, &changed]);
        assert!(second[0].flagged(), "{:?}", second[0]);
        assert!(!first[0].flagged());
        // A Node gone is dropped; the others keep their order.
        let third = cache.refresh([&b]);
        assert_eq!(
            third.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            ["b"]
        );
        assert!(cache.contains("b") && !cache.contains("a"));
        let fourth = cache.refresh([&changed, &b]);
        assert_eq!(
            fourth.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            ["b", "a"]
        );
    }

    #[test]
    fn node_changes_name_the_nodes_an_event_changed_and_a_relist_asks_for_every_node() {
        use kube::runtime::watcher::Event;
        let mut c = NodeChanges::default();
        c.note(&Event::Apply(fixtures::node("a", &[])));
        c.note(&Event::Delete(fixtures::node("b", &[])));
        assert_eq!(c.names.len(), 2);
        assert!(c.names.contains("a") && c.names.contains("b") && !c.relisted);
        c.note(&Event::Init);
        assert!(c.relisted);
    }

    #[test]
    fn an_update_of_the_view_cache_touches_only_the_nodes_named() {
        let versioned = |name: &str, rv: &str| {
            let mut n = fixtures::node(name, &[]);
            n.metadata.resource_version = Some(rv.into());
            n
        };
        let (a, b, c) = (
            versioned("a", "1"),
            versioned("b", "2"),
            versioned("c", "3"),
        );
        let mut cache = ViewCache::default();
        assert!(!cache.primed());
        let first = cache.refresh([&a, &b, &c]);
        assert!(cache.primed());
        let names = |v: &[NodeView]| v.iter().map(|v| v.name.clone()).collect::<Vec<_>>();
        // Nothing changed: the very same views are handed out again.
        let same = cache.update([("b".to_string(), Some(&b))]);
        assert!(std::sync::Arc::ptr_eq(&first, &same));
        // A changed Node is parsed again in its place; the others are left as they were.
        let mut b2 = fixtures::annotate(b.clone(), REBOOT_REQUIRED, "2026-01-01T00:00:00Z");
        b2.metadata.resource_version = Some("4".into());
        let second = cache.update([("b".to_string(), Some(&b2))]);
        assert_eq!(names(&second), ["a", "b", "c"]);
        assert!(second[1].flagged() && !second[0].flagged() && !second[2].flagged());
        assert!(
            !first[1].flagged(),
            "a view handed out before is not changed"
        );
        // A Node gone is dropped and one new is added at the end; positions follow.
        let d = versioned("d", "5");
        let third = cache.update([("a".to_string(), None), ("d".to_string(), Some(&d))]);
        assert_eq!(names(&third), ["b", "c", "d"]);
        for (i, v) in third.iter().enumerate() {
            assert_eq!(cache.position(&v.name), Some(i), "{}", v.name);
        }
        assert_eq!(cache.position("a"), None);
        // A Node named but unknown and gone changes nothing.
        let fourth = cache.update([("x".to_string(), None::<&Node>)]);
        assert!(std::sync::Arc::ptr_eq(&third, &fourth));
        // What the updates built is what a whole refresh of the same Nodes gives.
        assert_eq!(names(&cache.refresh([&b2, &c, &d])), ["b", "c", "d"]);
        assert!(cache.refresh([&b2, &c, &d])[0].flagged());
    }

    #[test]
    fn the_view_cache_keeps_the_notable_views_and_the_state_counts_as_nodes_change() {
        let node = |name: &str, rv: &str, flag: bool, state: Option<&str>| {
            let mut n = fixtures::node(name, &[]);
            if flag {
                n = fixtures::annotate(n, REBOOT_REQUIRED, "2026-01-01T00:00:00Z");
            }
            if let Some(s) = state {
                n = fixtures::annotate(n, STATE, s);
            }
            n.metadata.resource_version = Some(rv.into());
            n
        };
        let mut cache = ViewCache::with_notable(NodeView::flagged);
        let views = cache.refresh([
            &node("a", "1", false, Some("done")),
            &node("b", "2", true, None),
            &node("c", "3", false, Some("done")),
        ]);
        let notable = |cache: &ViewCache, views: &[NodeView]| {
            cache
                .notable()
                .map(|i| views[i].name.clone())
                .collect::<Vec<_>>()
        };
        let count = |cache: &ViewCache, s| cache.state_counts().get(&s).copied().unwrap_or(0);
        assert_eq!(notable(&cache, &views), ["b"]);
        assert_eq!(count(&cache, NodeState::Done), 2);
        // b starts its cycle, a is flagged again, c is deleted: positions move.
        let views = cache.update([
            (
                "b".to_string(),
                Some(&node("b", "4", true, Some("draining"))),
            ),
            ("a".to_string(), Some(&node("a", "5", true, Some("done")))),
            ("c".to_string(), None),
        ]);
        assert_eq!(notable(&cache, &views), ["a", "b"]);
        assert_eq!(count(&cache, NodeState::Done), 1);
        assert_eq!(count(&cache, NodeState::Draining), 1);
        // b ends done and unflagged; a new node d comes flagged.
        let views = cache.update([
            ("b".to_string(), Some(&node("b", "6", false, Some("done")))),
            ("d".to_string(), Some(&node("d", "7", true, None))),
        ]);
        assert_eq!(notable(&cache, &views), ["a", "d"]);
        assert_eq!(count(&cache, NodeState::Done), 2);
        assert_eq!(count(&cache, NodeState::Draining), 0);
        // What the updates kept is what a whole refresh of the same Nodes gives.
        let mut fresh = ViewCache::with_notable(NodeView::flagged);
        let all = [
            node("a", "5", true, Some("done")),
            node("b", "6", false, Some("done")),
            node("d", "7", true, None),
        ];
        let again = fresh.refresh(&all);
        assert_eq!(notable(&fresh, &again), notable(&cache, &views));
        assert_eq!(fresh.state_counts().get(&NodeState::Done), Some(&2));
        // Without a test, nothing is notable; states are still counted.
        let mut plain = ViewCache::default();
        plain.refresh(&all);
        assert_eq!(plain.notable().count(), 0);
        assert_eq!(plain.state_counts().get(&NodeState::Done), Some(&2));
    }
    use super::fixtures::*;
    use super::*;

    #[test]
    fn a_view_keeps_the_resource_version_and_a_fenced_patch_carries_it() {
        let mut n = node("n1", &[]);
        n.metadata.resource_version = Some("378".into());
        let v = NodeView::from_node(&n);
        assert_eq!(v.resource_version, "378");
        let p = fenced(
            patch(&state_annotations(NodeState::Draining, Utc::now()), None),
            &v.resource_version,
        );
        assert_eq!(p["metadata"]["resourceVersion"], "378");
        assert_eq!(p["metadata"]["annotations"][STATE], "draining");
        // Without a known version the write stays unconditional.
        let p = fenced(patch(&[], Some(true)), "");
        assert!(p["metadata"].get("resourceVersion").is_none());
        // `trim` keeps it, so views of the cache carry it too.
        assert_eq!(NodeView::from_node(&trim(n)).resource_version, "378");
    }

    #[test]
    fn a_flagged_node_parses_into_its_view() {
        let n = annotate(
            node("n1", &[("zone", "a"), (EXCLUDE, "false")]),
            REBOOT_REQUIRED,
            "2026-01-01T00:00:00Z",
        );
        let v = NodeView::from_node(&n);
        assert_eq!(v.name, "n1");
        assert!(v.flagged() && v.ready && !v.excluded && !v.unschedulable);
        assert_eq!(v.boot_id, "boot-1");
        assert_eq!(v.flagged_at, time::parse_annotation("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn an_unknown_state_reads_as_no_state() {
        let v = NodeView::from_node(&annotate(node("n1", &[]), STATE, "exploding"));
        assert_eq!(v.state, None);
        let v = NodeView::from_node(&annotate(node("n1", &[]), STATE, "draining"));
        assert_eq!(v.state, Some(NodeState::Draining));
    }

    #[test]
    fn garbled_rollboot_annotations_read_as_absent_and_are_listed() {
        let n = [
            (STATE, "exploding"),
            (STATE_SINCE, "yesterday"),
            (BOOT_ID_BEFORE, ""),
            (REBOOT, "now!"),
            (REBOOT_ACK, "ok"),
            (REBOOT_LOST, "1790000000000-ab"),
            (REBOOT_ATTEMPT, "0"),
        ]
        .into_iter()
        .fold(node("n1", &[]), |n, (k, v)| annotate(n, k, v));
        let v = NodeView::from_node(&n);
        assert_eq!(
            (v.state, v.state_since, &v.boot_id_before, &v.reboot_token),
            (None, None, &None, &None)
        );
        assert_eq!(v.reboot_attempt, None);
        // Agent keys are kept as found: a garbled ack still differs from every token.
        assert_eq!(v.reboot_ack.as_deref(), Some("ok"));
        let keys: Vec<&str> = v.malformed.iter().map(|m| m.key).collect();
        assert_eq!(
            keys,
            [
                BOOT_ID_BEFORE,
                REBOOT,
                REBOOT_ACK,
                REBOOT_ATTEMPT,
                STATE,
                STATE_SINCE
            ]
        );
        assert!(v.is_malformed(REBOOT_ACK) && !v.is_malformed(REBOOT_LOST));
        assert_eq!(v.malformed[4].value, "exploding");
        // Well-formed values parse and list nothing.
        let ok = annotate(
            annotate(
                annotate(node("n1", &[]), BOOT_ID_BEFORE, "0d1e-77"),
                REBOOT_ATTEMPT,
                "2",
            ),
            STATE,
            "rebooting",
        );
        let v = NodeView::from_node(&ok);
        assert!(v.malformed.is_empty(), "{:?}", v.malformed);
        assert_eq!(v.reboot_attempt, Some(2));
        assert!(!boot_id_well_formed("a b") && !boot_id_well_formed(&"x".repeat(129)));
    }

    #[test]
    fn the_reboot_history_parses_counts_on_and_reports_garbage() {
        let n = [
            (LAST_REBOOT, "2026-03-01T10:00:00.000Z"),
            (LAST_BOOT_ID_BEFORE, "boot-1"),
            (LAST_BOOT_ID_AFTER, "boot-2"),
            (REBOOT_COUNT, "2"),
            (
                LAST_CYCLE,
                r#"{"drainSeconds":41.2,"rebootSeconds":95,"gateSeconds":3.1}"#,
            ),
        ]
        .into_iter()
        .fold(node("n1", &[]), |n, (k, v)| annotate(n, k, v));
        let v = NodeView::from_node(&n);
        assert!(v.malformed.is_empty(), "{:?}", v.malformed);
        assert_eq!(
            v.history,
            History {
                last_reboot: time::parse_annotation("2026-03-01T10:00:00Z"),
                boot_id_before: Some("boot-1".into()),
                boot_id_after: Some("boot-2".into()),
                count: Some(2),
                undrained_count: None,
                last_cycle: Some(LastCycle {
                    drain_seconds: Some(41.2),
                    reboot_seconds: Some(95.0),
                    gate_seconds: Some(3.1),
                    pod_exit_seconds: None,
                    detach_seconds: None,
                    ..LastCycle::default()
                }),
            }
        );
        let now = time::parse_annotation("2026-03-02T10:00:00Z").unwrap();
        let cycle = LastCycle::measure(
            time::parse_annotation("2026-03-02T09:58:00Z"),
            time::parse_annotation("2026-03-02T09:58:30.04Z"),
            time::parse_annotation("2026-03-02T09:59:55Z"),
            now,
            Some(2.345),
            None,
        );
        assert_eq!(
            (
                cycle.drain_seconds,
                cycle.reboot_seconds,
                cycle.gate_seconds,
                cycle.pod_exit_seconds
            ),
            (Some(30.04), Some(84.96), Some(5.0), Some(2.345))
        );
        let next: BTreeMap<_, _> = v
            .history
            .next(now, "boot-2", "boot-3", &cycle)
            .into_iter()
            .collect();
        assert_eq!(
            next[LAST_CYCLE].as_deref().and_then(LastCycle::parse),
            Some(cycle)
        );
        // Instants out of order (a clock stepped back) measure nothing rather than a negative.
        let odd = LastCycle::measure(
            Some(now),
            time::parse_annotation("2026-03-02T09:00:00Z"),
            None,
            now,
            None,
            None,
        );
        assert_eq!(odd, LastCycle::default());
        assert_eq!(next[REBOOT_COUNT].as_deref(), Some("3"));
        assert_eq!(next[LAST_BOOT_ID_BEFORE].as_deref(), Some("boot-2"));
        assert_eq!(next[LAST_BOOT_ID_AFTER].as_deref(), Some("boot-3"));
        assert_eq!(
            next[LAST_REBOOT].as_deref(),
            Some("2026-03-02T10:00:00.000Z")
        );
        // Garbage reads as absent, is listed, and the count starts again at 1.
        let bad = [
            (LAST_REBOOT, "yesterday"),
            (LAST_BOOT_ID_AFTER, "a b"),
            (REBOOT_COUNT, "0"),
            (LAST_CYCLE, r#"{"rebootSeconds":-4}"#),
        ]
        .into_iter()
        .fold(node("n1", &[]), |n, (k, v)| annotate(n, k, v));
        let v = NodeView::from_node(&bad);
        let keys: Vec<&str> = v.malformed.iter().map(|m| m.key).collect();
        assert_eq!(
            keys,
            [LAST_BOOT_ID_AFTER, LAST_CYCLE, LAST_REBOOT, REBOOT_COUNT]
        );
        assert_eq!(v.history, History::default());
        let next: BTreeMap<_, _> = v
            .history
            .next(now, "b", "c", &LastCycle::default())
            .into_iter()
            .collect();
        assert_eq!(next[REBOOT_COUNT].as_deref(), Some("1"));
    }

    #[test]
    fn a_hand_written_request_is_undated_and_a_dated_one_orders() {
        let v = NodeView::from_node(&annotate(node("n1", &[]), REBOOT_REQUESTED, "now"));
        assert!(v.flagged() && v.request_undated);
        assert_eq!((v.requested_at, v.flagged_at), (None, None));
        // Not a malformed value: any value requests a reboot.
        assert!(v.malformed.is_empty());
        let v = NodeView::from_node(&annotate(
            node("n1", &[]),
            REBOOT_REQUESTED,
            "2026-03-01T10:00:00.000Z",
        ));
        assert!(!v.request_undated);
        assert_eq!(
            v.requested_at,
            time::parse_annotation("2026-03-01T10:00:00Z")
        );
        assert_eq!(v.flagged_at, v.requested_at);
    }

    #[test]
    fn a_token_carries_its_issue_time() {
        let now = DateTime::from_timestamp_millis(1_790_000_000_123).unwrap();
        let t = Token::new(now, 42);
        assert_eq!(Token::parse(&t.text), Some(t.clone()));
        assert_eq!(t.issued, now);
        assert_eq!(Token::parse("garbage"), None);
    }

    #[test]
    fn an_acknowledged_token_is_not_pending() {
        let n = annotate(annotate(node("n1", &[]), REBOOT, "1-a"), REBOOT_ACK, "1-a");
        assert_eq!(NodeView::from_node(&n).token_unacknowledged(), None);
        let n = annotate(n, REBOOT, "2-b");
        assert_eq!(NodeView::from_node(&n).token_unacknowledged(), Some("2-b"));
    }

    #[test]
    fn a_trimmed_node_has_the_same_view_and_nothing_else() {
        use k8s_openapi::api::core::v1::{ContainerImage, NodeCondition};
        let mut n = annotate(
            annotate(node("n1", &[("zone", "a")]), STATE, "draining"),
            "other.example/owner",
            "x",
        );
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        let mut n = taint(
            taint(n, TAINT_UNSCHEDULABLE, "NoSchedule"),
            "gpu.example/busy",
            "NoSchedule",
        );
        let st = n.status.get_or_insert_with(Default::default);
        st.images = Some(vec![ContainerImage {
            names: Some(vec!["big".into()]),
            size_bytes: Some(1),
        }]);
        st.conditions
            .get_or_insert_with(Vec::new)
            .push(NodeCondition {
                type_: "MemoryPressure".into(),
                status: "False".into(),
                ..Default::default()
            });
        let t = trim(n.clone());
        // The same view but for the foreign annotation, which only `trim_keeping` keeps.
        let full = NodeView::from_node(&n);
        assert_eq!(
            NodeView::from_node(&t),
            NodeView {
                other_annotations: BTreeMap::new(),
                ..full.clone()
            }
        );
        let kept = trim_keeping(n.clone(), &["other.example/owner".to_string()]);
        assert_eq!(NodeView::from_node(&kept), full);
        assert_eq!(full.other_annotations["other.example/owner"], "x");
        let ann = t.metadata.annotations.as_ref().unwrap();
        assert!(ann.keys().all(|k| k.starts_with(PREFIX)), "{ann:?}");
        let st = t.status.unwrap();
        assert!(st.images.is_none());
        let types: Vec<_> = st
            .conditions
            .unwrap()
            .into_iter()
            .map(|c| c.type_)
            .collect();
        assert_eq!(types, vec!["Ready".to_string()]);
        assert_eq!(t.metadata.resource_version, n.metadata.resource_version);
        let keys: Vec<_> = t
            .spec
            .unwrap()
            .taints
            .unwrap()
            .into_iter()
            .map(|t| t.key)
            .collect();
        // Every taint: a write of the list is built from it.
        assert_eq!(
            keys,
            vec![TAINT_UNSCHEDULABLE.to_string(), "gpu.example/busy".into()]
        );
    }

    #[test]
    fn the_node_lifecycle_taints_are_read_into_the_view() {
        let n = node("n1", &[]);
        let v = NodeView::from_node(&n);
        assert!(!v.not_ready_taint && !v.unschedulable_taint && !v.cordon_taint_pending());
        for key in [TAINT_NOT_READY, TAINT_UNREACHABLE] {
            let v = NodeView::from_node(&taint(n.clone(), key, "NoExecute"));
            assert!(v.not_ready_taint, "{key}");
        }
        // Cordoned, and the node-lifecycle controller has not copied it into its taint yet.
        let mut cordoned = n.clone();
        cordoned
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        assert!(NodeView::from_node(&cordoned).cordon_taint_pending());
        let mirrored = taint(cordoned, TAINT_UNSCHEDULABLE, "NoSchedule");
        assert!(!NodeView::from_node(&mirrored).cordon_taint_pending());
        // Uncordoned, the taint not yet removed.
        let mut uncordoned = mirrored;
        uncordoned
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = None;
        assert!(NodeView::from_node(&uncordoned).cordon_taint_pending());
    }

    #[test]
    fn uncordon_patch_removes_the_field() {
        let p = patch(&[(CORDONED_BY, None)], Some(false));
        assert_eq!(p["spec"]["unschedulable"], Value::Null);
        assert_eq!(p["metadata"]["annotations"][CORDONED_BY], Value::Null);
    }

    #[test]
    fn a_boot_is_its_boot_id_and_where_recorded_its_pid_1s_start() {
        // Recorded without PID 1's start: the boot ID alone decides.
        assert!(same_boot("b-1", None, "B-1", Some(9)));
        assert!(!same_boot("b-1", None, "b-2", None));
        // Recorded with it: both must be the same; one not known now is taken as the same.
        assert!(same_boot("b-1", Some(57), "b-1", Some(57)));
        assert!(!same_boot("b-1", Some(57), "b-1", Some(58)));
        assert!(same_boot("b-1", Some(57), "b-1", None));
        assert!(!same_boot("b-1", Some(57), "b-2", Some(57)));
        // The Node's side: PID 1's start counts only from a record of the boot ID it reports.
        let host = |boot: &str, init| AgentHost {
            boot_id: boot.into(),
            init_start: Some(init),
            machine_id: None,
            shutdown_drain: ShutdownDrain::Ready,
            inhibit_delay_seconds: Some(1020),
        };
        let mut v = NodeView::from_node(&annotate(
            annotate(node("n1", &[]), INIT_START_BEFORE, "57"),
            AGENT_HOST,
            &host("b-1", 57).to_annotation(),
        ));
        v.boot_id = "b-1".into();
        assert_eq!(v.init_start_before, Some(57));
        assert_eq!(
            v.boot_before(),
            [
                (BOOT_ID_BEFORE, Some("b-1".to_string())),
                (INIT_START_BEFORE, Some("57".to_string()))
            ]
        );
        assert!(!v.booted_since("b-1") && v.booted_since("b-0"));
        v.agent_host = Some(host("b-1", 3));
        assert!(v.booted_since("b-1"), "PID 1 started again");
        v.agent_host = Some(host("b-0", 3));
        assert!(!v.booted_since("b-1"), "a stale record says nothing");
        assert_eq!(v.boot_before()[1], (INIT_START_BEFORE, None));
        assert_eq!(
            AgentHost::parse(&host("b-1", 57).to_annotation()),
            Some(host("b-1", 57))
        );
        assert_eq!(AgentHost::parse("junk"), None);
        let bad = NodeView::from_node(&annotate(node("n1", &[]), INIT_START_BEFORE, "soon"));
        assert!(bad.is_malformed(INIT_START_BEFORE));
    }

    #[test]
    fn an_undrained_cycle_is_counted_apart_from_the_reboots() {
        let h = History {
            count: Some(4),
            ..History::default()
        };
        let drained = h.next(Utc::now(), "b-1", "b-2", &LastCycle::default());
        let get = |v: &[(&str, Option<String>)], k: &str| {
            v.iter()
                .find(|(key, _)| *key == k)
                .and_then(|(_, v)| v.clone())
        };
        assert_eq!(get(&drained, REBOOT_COUNT).as_deref(), Some("5"));
        assert_eq!(get(&drained, UNDRAINED_COUNT), None);
        let cycle = LastCycle {
            undrained: Some("the host went down mid-drain".into()),
            ..LastCycle::default()
        };
        let undrained = h.next(Utc::now(), "b-1", "b-2", &cycle);
        assert_eq!(get(&undrained, REBOOT_COUNT), None);
        assert_eq!(get(&undrained, UNDRAINED_COUNT).as_deref(), Some("1"));
        let text = get(&undrained, LAST_CYCLE).unwrap();
        assert_eq!(LastCycle::parse(&text).unwrap().undrained, cycle.undrained);
    }
}
