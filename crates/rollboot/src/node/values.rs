//! The values of the protocol's annotations: one type per value that is more than a string,
//! each with its text format.
//!
//! Owns [`NodeState`], [`Token`], [`Refusal`] and its [`RefusalCause`], [`AgentHost`] and its
//! [`ShutdownDrain`], [`ShutdownRequest`], [`Undrained`], the FleetLock server's
//! [`FleetLockRecord`], [`PassedOver`], and what a boot is ([`same_boot`],
//! [`boot_id_well_formed`]). It must never read a Node nor a clock: the view parses the Node,
//! and callers pass the instants.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::time;

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
