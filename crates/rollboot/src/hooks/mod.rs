//! Hooks: what rollboot does, asks and waits for at each phase of a node's cycle (config
//! `hooks`, and `drain.settle`).
//!
//! Owns the record of a cycle's hooks kept on the Node ([`Record`], annotation
//! `rollboot.dev/hooks`), the webhook's JSON body ([`Body`]), the pure decision of the next
//! hook step ([`decide`]) and the HTTP calls ([`call`], kube's own hyper client: no other HTTP
//! stack). The controller's runtime carries the steps out: every decision is written to the
//! Node before it is acted on, so a new leader resumes a node waiting on a hook from what the
//! Node says. It must never send a blocking webhook's attempt that is not recorded on the Node
//! first, never send one attempt twice, never ask again a webhook whose yes is recorded, and
//! never let a fire-and-forget webhook hold a node (that one is recorded once, before its first
//! try; its retries live in the sending process, so a leader change can lose them but never
//! repeats them).

pub mod call;
pub mod decide;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::config::Phase;

/// The hooks of one cycle, phase by phase, as written in `rollboot.dev/hooks`. Removed with
/// the other cycle keys when a cycle starts, so each cycle has its own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Record {
    /// The id of this cycle in every webhook body (`rolloutId`): the node's name and the
    /// instant its first hook phase began, in milliseconds.
    pub rollout: String,
    /// Why the node is rebooted, as its flags said when the first phase began (the flags are
    /// gone by `afterDone`).
    #[serde(default)]
    pub reason: String,
    /// The phases begun.
    #[serde(default)]
    pub phases: BTreeMap<Phase, PhaseRecord>,
}

/// One phase of one cycle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PhaseRecord {
    /// When it began (its labels and taints were written with this record).
    pub since: DateTime<Utc>,
    /// When it passed: every gate present and every blocking webhook said yes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<DateTime<Utc>>,
    /// Each webhook asked, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub webhooks: BTreeMap<String, Call>,
}

/// A webhook's latest attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Call {
    /// The question's token: the same for every attempt of one webhook at one phase of one
    /// cycle.
    pub token: String,
    /// Which attempt this is (1, 2, ...): each is sent at most once.
    pub attempt: u32,
    /// When the attempt was recorded, right before it was sent.
    pub at: DateTime<Utc>,
    /// Its answer, once known (blocking webhooks only; a fire-and-forget one records none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
}

/// What a blocking webhook answered to one attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Answer {
    /// A 2xx answer.
    pub yes: bool,
    /// The status, or what went wrong (`HTTP 503`, `no answer within 10s`).
    pub detail: String,
    /// When it was known.
    pub at: DateTime<Utc>,
}

impl Record {
    /// The record in `text`; `Err` says why it does not parse (it is then read as absent).
    pub fn parse(text: Option<&str>) -> Result<Option<Record>, String> {
        match text {
            None => Ok(None),
            Some(t) => serde_json::from_str(t).map(Some).map_err(|e| e.to_string()),
        }
    }

    /// The annotation text.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("a hooks record serializes")
    }
}

/// The JSON body POSTed to a webhook (docs/hooks-and-notifications.md documents it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Body {
    /// The node's name.
    pub node: String,
    /// The phase (`beforeDrain`, `afterDrain`, `afterReboot`, `afterDone`).
    pub phase: Phase,
    /// The webhook's name in the config.
    pub hook: String,
    /// The question's token: every attempt of one webhook at one phase of one cycle carries
    /// the same; a receiver that acts (opens a ticket) keys on it.
    pub token: String,
    /// Which attempt this is; never the same twice for one token.
    pub attempt: u32,
    /// The cycle's id, the same for every hook of one node's cycle.
    pub rollout_id: String,
    /// Why the node is rebooted: the agent's sentinel reason or the operator's request reason.
    pub reason: String,
    /// Whether rollboot waits for a 2xx answer before it goes on.
    pub blocking: bool,
    /// When this attempt was sent (RFC 3339).
    pub time: String,
}
