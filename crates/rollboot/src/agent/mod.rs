//! The agent: one per node, the node's "sidecar".
//!
//! Owns noticing that its host needs a reboot (a sentinel file or command, checked every
//! `checkPeriod`, written to the Node only when the answer changes; a sentinel that gives no
//! answer leaves the flag as it was, and is said once per spell) and rebooting the host when
//! the controller writes a new `reboot` token: it writes `reboot-ack` with that token first,
//! then reboots through a [`RebootMethod`]. It watches only its own Node. It must never act on a
//! token twice (the ack on the Node survives restarts), and never reboot a host that is not its
//! Node's (its boot ID, and machine ID where both are known, must be the Node's), a node that is
//! not listed in the maintenance lock, not cordoned, whose token is older than the reboot
//! timeout, whose host already rebooted since the token was issued, or whose `reboot-ack` it
//! cannot read: it is the last line of defence. It says why it refused, on the Node
//! (`reboot-refused`, which the controller acts on at once) and with an Event. An agent that
//! starts and finds its ack of the live token while its host is still on the boot from before
//! the request (it died between the ack and the reboot) writes `reboot-lost` with that token,
//! for the controller to issue a new one: it never acts on the old token again itself.
//!
//! It knows its host as the host's PID 1 sees it ([`host`]) and compares it with its Node on
//! every look ([`identity`]): the result is said when it changes, a lasting mismatch is a
//! Warning Event, and a token issued while the boot IDs already differed is refused as
//! `bootMismatch`, never taken for a reboot. What it reads (boot ID, PID 1's start, machine ID,
//! how an unplanned shutdown would go) it writes in its Node's `agent-host`: on a node whose boot
//! ID never changes (kind-like), PID 1's start tells the boots apart, for it and the controller.
//! A config file that changes is taken in place ([`run_reloading`]), what it remembers kept.
//!
//! With logind on its host's system bus it also holds a delay inhibitor for shutdown
//! ([`logind`]): a shutdown it did not start makes it ask its Node for a drain
//! (`shutdown-requested`), and the shutdown waits for the drain, up to logind's limit. A
//! `shutdown-requested` found at start on the boot its Node reports is left over and removed.
//! Whether the kubelet's graceful node shutdown goes first (it holds an inhibitor of its own),
//! and logind's delay, are read again every check period and said when they change.

pub mod host;
pub mod logind;
pub mod metrics;
pub mod sentinel;

use std::future::Future;
use std::sync::Arc;

use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;

use crate::config::Config;
use crate::events::Recorder;
use crate::lease::LeaseRef;
use crate::lock;
use crate::node::{self as proto, AgentHost, NodeView, RefusalCause, ShutdownDrain, Token};
pub use host::{CommandReboot, HostMethod, HostReboot, RebootMethod, SignalReboot};
pub use logind::{HostShutdowns, NoLogind, SystemLogind};
pub use metrics::AgentMetrics;
pub use sentinel::{CommandSentinel, FileSentinel, HostSentinel, Sentinel, SentinelError};

/// What can go wrong in the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A write to its Node failed.
    #[error("node {node}: {what}: {source}")]
    Node {
        /// Node.
        node: String,
        /// What was being written.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The reboot method failed.
    #[error("node {node}: reboot failed: {reason}")]
    Reboot {
        /// Node.
        node: String,
        /// Why.
        reason: String,
    },
}

/// The host under the agent, as read on the host itself when a token is looked at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostSeen<'a> {
    /// Its boot ID; `None` when it cannot be read.
    pub boot_id: Option<&'a str>,
    /// Its machine ID; `None` when unknown.
    pub machine_id: Option<&'a str>,
    /// When its PID 1 started (see [`RebootMethod::init_start`]); `None` when unknown.
    pub init_start: Option<u64>,
    /// Since when this agent has seen its host's boot ID differ from its Node's, without a
    /// break: a mismatch already there when a token was issued is no reboot.
    pub mismatch_since: Option<chrono::DateTime<Utc>>,
}

/// Why the agent refuses a token, if it does, as a cause and a sentence: pure. `host` is the
/// host as read on the host itself.
pub fn refusal(
    view: &NodeView,
    token: &str,
    in_lock: bool,
    host: HostSeen<'_>,
    config: &Config,
    now: chrono::DateTime<Utc>,
) -> Option<(RefusalCause, String)> {
    let Some(t) = Token::parse(token) else {
        return Some((
            RefusalCause::TokenInvalid,
            format!("token `{token}` is not one rollboot writes"),
        ));
    };
    if now - t.issued > config.reboot.timeout.to_chrono() {
        return Some((
            RefusalCause::TokenExpired,
            format!(
                "token {token} is older than the reboot timeout ({})",
                config.reboot.timeout
            ),
        ));
    }
    let Some(host_boot) = host.boot_id else {
        return Some((
            RefusalCause::HostUnknown,
            format!(
                "the host's boot ID cannot be read ({}), so the agent cannot tell that its host \
                 is node {}",
                config.reboot.host_boot_id_file, view.name
            ),
        ));
    };
    // A boot ID that already differed from the Node's before this request says nothing of a
    // reboot: the agent reads the wrong file, or runs on another host (a machine ID that
    // differs says which, below).
    let mismatched_before = host.mismatch_since.is_some_and(|since| since <= t.issued)
        && !host_boot.eq_ignore_ascii_case(&view.boot_id);
    // The host rebooted since the controller read its boot ID for this request: acting now
    // would be a second reboot. The Node says so once the kubelet is back; the host says so at
    // once where it is known to be the Node's: by its machine ID, or, for a token issued in
    // answer to a lost one, by that report (made on the host's boot `before`, read on the host
    // itself). This comes before everything below, an unreadable ack included: a restarted
    // agent whose kubelet has not reported the new boot yet must not fail a node whose reboot
    // happened.
    if let Some(before) = view
        .boot_id_before
        .as_deref()
        .filter(|_| !mismatched_before)
    {
        let retry = view.reboot_attempt.is_some_and(|a| a >= 2);
        let same_machine = host.machine_id.is_some_and(|m| {
            !view.machine_id.is_empty() && m.eq_ignore_ascii_case(&view.machine_id)
        });
        let moved = !proto::same_boot(before, view.init_start_before, host_boot, host.init_start);
        let now_boot = if (retry || same_machine) && moved {
            Some(proto::boot_words(host_boot, host.init_start))
        } else {
            view.booted_since(before).then(|| view.boot_words())
        };
        if let Some(b) = now_boot {
            return Some((
                RefusalCause::AlreadyRebooted,
                format!(
                    "the host already rebooted since token {token} was issued (boot {} -> {b})",
                    proto::boot_words(before, view.init_start_before)
                ),
            ));
        }
    }
    // Whether it acted already cannot be told while its ack is unreadable (a host that rebooted
    // since the token, above, has: that answer comes first).
    if view.is_malformed(proto::REBOOT_ACK) {
        return Some((
            RefusalCause::AckUnreadable,
            format!(
                "{} is malformed, so the agent cannot tell whether it already acted on token {token}",
                proto::REBOOT_ACK
            ),
        ));
    }
    if let Some(why) = not_this_host(view, host_boot, host, mismatched_before, config) {
        return Some(why);
    }
    if !view.unschedulable {
        return Some((
            RefusalCause::NotCordoned,
            format!("node {} is not cordoned", view.name),
        ));
    }
    if !in_lock {
        return Some((
            RefusalCause::NotInLock,
            format!("node {} is not listed in the maintenance lock", view.name),
        ));
    }
    None
}

/// Why the host under the agent is not its Node's, if it is not: its machine ID (where both
/// are known) or its boot ID differs from the Node's `nodeInfo`. A boot ID that differed
/// already before the token (`mismatched_before`) is a mismatch the agent saw from its start
/// or since, never a reboot; a host whose machine ID is the Node's but whose boot ID became
/// another since has rebooted and its kubelet has not said so yet.
fn not_this_host(
    view: &NodeView,
    host_boot: &str,
    host: HostSeen<'_>,
    mismatched_before: bool,
    config: &Config,
) -> Option<(RefusalCause, String)> {
    let same = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    let machine = host.machine_id.filter(|_| !view.machine_id.is_empty());
    if let Some(m) = machine.filter(|m| !same(m, &view.machine_id)) {
        return Some((
            RefusalCause::WrongHost,
            format!(
                "this agent's host has machine ID {m}, but node {} reports {}: the agent runs on \
                 another host (its --node-name, or the node it was scheduled on, is wrong)",
                view.name, view.machine_id
            ),
        ));
    }
    if view.boot_id.is_empty() || same(host_boot, &view.boot_id) {
        return None;
    }
    if mismatched_before {
        let since = host
            .mismatch_since
            .map(crate::time::annotation)
            .unwrap_or_default();
        return Some((
            RefusalCause::BootMismatch,
            format!(
                "the host's boot ID as the agent reads it ({host_boot}, from {}) has differed \
                 from node {}'s ({}) since {since}, before this request: nothing rebooted, and \
                 the agent cannot tell its host's reboots; on a node that is a container (kind, \
                 k3d, systemd-nspawn), read PID 1's view, {} (the default, with hostPID)",
                config.reboot.host_boot_id_file,
                view.name,
                view.boot_id,
                host::HOST_BOOT_ID
            ),
        ));
    }
    if machine.is_some() {
        return Some((
            RefusalCause::AlreadyRebooted,
            format!(
                "the host (machine ID {}) is on boot {host_boot}, while node {} still reports \
                 boot {}: it rebooted and its kubelet has not said so yet",
                view.machine_id, view.name, view.boot_id
            ),
        ));
    }
    Some((
        RefusalCause::WrongHost,
        format!(
            "this agent's host is on boot {host_boot}, but node {} reports boot {}: the agent \
             runs on another host (its --node-name, or reboot.hostBootIdFile, is wrong), and \
             rebooting it would reboot the wrong machine",
            view.name, view.boot_id
        ),
    ))
}

/// The token to report lost, if any: pure. It is the live token of a rebooting node that
/// this node's agent acknowledged, but not this process (`acted`: the tokens it acknowledged
/// itself), while the host is still on the boot from before the request (its boot ID, and its
/// PID 1's start where the request recorded it: on a kind-like node the boot ID never
/// changes): an earlier agent died between its ack and the reboot. Needs the host's own boot
/// ID: the Node's may lag behind a reboot that did happen, and reporting that one lost would
/// cause a second.
pub fn lost_token(
    view: &NodeView,
    host: HostSeen<'_>,
    acted: &[String],
    config: &Config,
    now: chrono::DateTime<Utc>,
) -> Option<String> {
    let token = view.reboot_token.as_deref()?;
    let live =
        Token::parse(token).is_some_and(|t| now - t.issued <= config.reboot.timeout.to_chrono());
    let unchanged = host.boot_id.is_some_and(|b| {
        view.boot_id_before.as_deref().is_some_and(|before| {
            proto::same_boot(before, view.init_start_before, b, host.init_start)
        })
    });
    (view.state == Some(proto::NodeState::Rebooting)
        && view.reboot_ack.as_deref() == Some(token)
        && view.reboot_lost.as_deref() != Some(token)
        && !acted.iter().any(|a| a == token)
        && live
        && unchanged)
        .then(|| token.to_string())
}

/// Whether the host's boot ID `boot` is not the one its Node reports (a Node that reports
/// none is not compared).
fn boot_differs(view: &NodeView, boot: &str) -> bool {
    !view.boot_id.is_empty() && !boot.eq_ignore_ascii_case(&view.boot_id)
}

/// What the agent says of its host against its Node, pure: `Ok` when its boot ID (and machine
/// ID, where both are known) are the Node's, else the sentence that says what differs.
pub fn identity(view: &NodeView, host: HostSeen<'_>) -> Result<(), String> {
    let same = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    let Some(boot) = host.boot_id else {
        return Err("the host's boot ID cannot be read".into());
    };
    let mut differ = Vec::new();
    if boot_differs(view, boot) {
        differ.push(format!(
            "boot ID {boot} (node {} reports {})",
            view.name, view.boot_id
        ));
    }
    if let Some(m) = host.machine_id.filter(|_| !view.machine_id.is_empty()) {
        if !same(m, &view.machine_id) {
            differ.push(format!(
                "machine ID {m} (node {} reports {})",
                view.name, view.machine_id
            ));
        }
    }
    if differ.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the host the agent reads has {}",
            differ.join(" and ")
        ))
    }
}

/// The host as the agent read it for one look at its Node: read once, then compared, acted on
/// and written from.
struct HostRead {
    boot_id: Option<String>,
    machine_id: Option<String>,
    init_start: Option<u64>,
}

impl HostRead {
    /// What the checks take, with since when the boot IDs have differed.
    fn seen(&self, mismatch_since: Option<chrono::DateTime<Utc>>) -> HostSeen<'_> {
        HostSeen {
            boot_id: self.boot_id.as_deref(),
            machine_id: self.machine_id.as_deref(),
            init_start: self.init_start,
            mismatch_since,
        }
    }
}

/// What one agent process remembers between the events it handles.
struct Agent<'a, R> {
    api: Api<Node>,
    lock_ref: LeaseRef,
    events: Recorder,
    /// The config as last loaded (it is reloaded while the agent runs).
    config: Arc<Config>,
    node: &'a str,
    method: R,
    metrics: Arc<AgentMetrics>,
    /// Since when the host's boot ID has differed from the Node's, without a break.
    mismatch_since: Option<chrono::DateTime<Utc>>,
    /// What was last said of the host against its Node (`None`: nothing yet): said again only
    /// when it changes.
    identity_said: Option<Result<(), String>>,
    /// The Warning Event for the current mismatch was published.
    mismatch_published: bool,
    /// How a shutdown nobody planned would go (from the logind guard), as last said.
    shutdown_drain: Option<ShutdownDrain>,
    /// logind's delay in seconds, with the guard.
    inhibit_delay: Option<u64>,
    /// The last refusal said, (token, cause, why): said once, looked at again while the token
    /// lives.
    refused: Option<(String, RefusalCause, String)>,
    /// Tokens this process acknowledged itself (the last few): never reported lost by it.
    acted: Vec<String>,
    /// The last look at a token ended on a failed request (reading the lock, writing the ack):
    /// looked at again on the next check, as no change of the Node may come to wake it.
    unsettled: bool,
    /// The sentinel's last check failed (a spell of errors, said once until it answers again).
    sentinel_failing: bool,
    /// The token whose reboot the reboot method is carrying out: a host shutdown now is
    /// rollboot's own.
    rebooting: Option<String>,
    /// A `shutdown-requested` on the Node is still to be looked at as left over from before
    /// this process (until the first view decides it, or a shutdown begins).
    check_left_over: bool,
}

/// Writes a JSON merge patch `p` to Node `node`; `what` names the write in the error.
async fn patch_node(
    api: &Api<Node>,
    node: &str,
    p: serde_json::Value,
    what: &str,
) -> Result<(), AgentError> {
    api.patch(node, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .map(|_| ())
        .map_err(|source| AgentError::Node {
            node: node.into(),
            what: what.into(),
            source,
        })
}

impl<R: RebootMethod> Agent<'_, R> {
    async fn patch(&self, p: serde_json::Value, what: &str) -> Result<(), AgentError> {
        patch_node(&self.api, self.node, p, what).await
    }

    /// The host as it is now.
    fn read_host(&self) -> HostRead {
        HostRead {
            boot_id: self.method.boot_id(self.node),
            machine_id: self.method.machine_id(self.node),
            init_start: self.method.init_start(self.node),
        }
    }

    /// Acts on the Node as `v` shows it, its host read as `read`: reports a lost token, or
    /// reboots for a new one.
    async fn act(&mut self, v: &NodeView, read: &HostRead) {
        self.unsettled = false;
        let host = read.seen(self.mismatch_since);
        if let Some(token) = lost_token(v, host, &self.acted, &self.config, Utc::now()) {
            let boot = read.boot_id.clone().unwrap_or_default();
            self.report_lost(v, &token, boot).await;
            return;
        }
        let Some(token) = v.token_unacknowledged().map(str::to_string) else {
            self.refused = None;
            return;
        };
        // This process acknowledged it: its reboot is under way (or done). The ack written over
        // since (garbled, removed) does not make it a token to look at again, nor to refuse:
        // a refusal now would fail a node whose host is going down for it.
        if self.acted.contains(&token) {
            self.refused = None;
            return;
        }
        let why = match self.judge(v, &token, host).await {
            Some(why) => why,
            // The lock could not be read: looked at again on the next check.
            None => return,
        };
        if let Some((cause, why)) = why {
            self.refuse(v, &token, cause, why).await;
            return;
        }
        self.refused = None;
        if self.acknowledge(v, &token).await {
            self.reboot(&token).await;
        }
    }

    /// Reports `token` lost (acknowledged by an earlier agent, the host still on boot `boot`),
    /// fenced: a Node changed since (a new token, a reboot seen) is decided again.
    async fn report_lost(&mut self, v: &NodeView, token: &str, boot: String) {
        let node = self.node;
        let p = proto::fenced(
            proto::patch(&[(proto::REBOOT_LOST, Some(token.to_string()))], None),
            &v.resource_version,
        );
        match self.patch(p, "reporting a lost reboot token").await {
            Ok(()) => {
                tracing::warn!(node, token, boot_id = %boot, "an earlier agent acknowledged this token and the host did not reboot; reported it lost");
                self.events.publish_action(node, true, "RebootLost", &format!("ReportLost {token}"), format!("agent acknowledged token {token} earlier but the host did not reboot (boot ID still {boot}): the agent stopped between its ack and the reboot; asking the controller for a new token")).await;
            }
            Err(e) => {
                tracing::warn!(node, token, error = %e, "could not report a lost reboot token; trying again on the next check");
                self.unsettled = true;
            }
        }
    }

    /// Why the agent will not act on `token`, if it will not: the checks of [`refusal`], then
    /// the maintenance lock's record, read fresh. `None` when the lock could not be read (the
    /// look is taken again on the next check).
    async fn judge(
        &mut self,
        v: &NodeView,
        token: &str,
        host: HostSeen<'_>,
    ) -> Option<Option<(RefusalCause, String)>> {
        let now = Utc::now();
        if let Some(why) = refusal(v, token, true, host, &self.config, now) {
            return Some(Some(why));
        }
        match lock::read(&self.lock_ref).await {
            Ok(r) => Some(match &r.untrusted {
                Some(e) => Some((
                    RefusalCause::LockUnreadable,
                    format!("the maintenance lock's in-flight record cannot be read ({e})"),
                )),
                None => refusal(
                    v,
                    token,
                    r.entries.contains_key(self.node),
                    host,
                    &self.config,
                    now,
                ),
            }),
            Err(e) => {
                tracing::warn!(node = self.node, error = %e, "reading the maintenance lock; trying again on the next check");
                self.unsettled = true;
                None
            }
        }
    }

    /// Writes `reboot-ack` with `token`: one token, one reboot, the ack on the Node before
    /// anything happens. Fenced by the version the checks were made on: a cordon lifted, a
    /// token withdrawn or replaced since makes it a 409, and the newer version (which the watch
    /// brings) is judged again. A refusal said earlier for this token no longer holds. Whether
    /// it was written.
    async fn acknowledge(&mut self, v: &NodeView, token: &str) -> bool {
        let node = self.node;
        let ack = proto::fenced(
            proto::patch(
                &[
                    (proto::REBOOT_ACK, Some(token.to_string())),
                    (proto::REBOOT_REFUSED, None),
                ],
                None,
            ),
            &v.resource_version,
        );
        match self.patch(ack, "acknowledging the reboot token").await {
            Ok(()) => true,
            Err(AgentError::Node {
                source: kube::Error::Api(e),
                ..
            }) if e.code == 409 => {
                tracing::info!(
                    node,
                    token,
                    "the node changed since it was checked; deciding again from the newer version"
                );
                false
            }
            Err(e) => {
                tracing::warn!(node, token, error = %e, "could not acknowledge; not rebooting now, trying again on the next check");
                self.unsettled = true;
                false
            }
        }
    }

    /// Reboots the host for the acknowledged `token`; a reboot command that fails is said on
    /// the Node, for the controller to fail the node now rather than at its reboot timeout.
    async fn reboot(&mut self, token: &str) {
        let node = self.node;
        if self.acted.len() >= 8 {
            self.acted.remove(0);
        }
        self.acted.push(token.to_string());
        tracing::info!(node, token, "rebooting");
        self.events
            .publish(
                node,
                false,
                "Rebooting",
                format!("agent acknowledged token {token} and is rebooting the host"),
            )
            .await;
        self.rebooting = Some(token.to_string());
        if let Err(e) = self.method.reboot(node, token).await {
            self.rebooting = None;
            tracing::error!(node, token, error = %e, "reboot failed");
            self.events
                .publish(node, true, "RebootFailed", e.to_string())
                .await;
            // The token is spent and the host did not go down.
            self.record_refusal(token, RefusalCause::RebootCommandFailed, e.to_string())
                .await;
        }
    }

    /// Says once per token and cause why the agent will not act on `token`: a log line, an
    /// Event, and `reboot-refused` on the Node, which the controller reads.
    async fn refuse(&mut self, v: &NodeView, token: &str, cause: RefusalCause, why: String) {
        let node = self.node;
        let said = (token.to_string(), cause, why.clone());
        if self
            .refused
            .as_ref()
            .is_some_and(|(t, c, _)| *t == said.0 && *c == cause)
        {
            return;
        }
        tracing::warn!(node, token, cause = cause.as_str(), reason = %why, "refusing to reboot");
        // One Event per token and reason: a later reason for the same token is not folded into
        // the first Event, whose note it would keep.
        let action = format!("Refuse {token}: {why}");
        self.events
            .publish_action(
                node,
                true,
                "RebootRefused",
                &action,
                format!("agent refuses token {token}: {why}"),
            )
            .await;
        // Already on the Node (an agent restarted): not written again.
        let on_node = v
            .reboot_refused
            .as_ref()
            .is_some_and(|r| r.token == token && r.cause == cause);
        if on_node || self.record_refusal(token, cause, why).await {
            self.refused = Some(said);
        }
    }

    /// Writes `reboot-refused` for `token` and counts it; false when the write failed (it is
    /// tried again on the next check).
    async fn record_refusal(&mut self, token: &str, cause: RefusalCause, reason: String) -> bool {
        self.metrics.refusal(cause);
        let record = proto::Refusal {
            token: token.to_string(),
            cause,
            reason,
            at: crate::time::annotation(Utc::now()),
        };
        let p = proto::patch(
            &[(proto::REBOOT_REFUSED, Some(record.to_annotation()))],
            None,
        );
        match self.patch(p, "recording a refused reboot token").await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(node = self.node, token, error = %e, "could not record the refusal on the node; trying again on the next check");
                self.unsettled = true;
                false
            }
        }
    }

    /// Checks the sentinel and writes `reboot-required` when its answer differs from the Node's
    /// (`v`, as it is: a Node registered again, or whose flag was lost, is flagged again). A
    /// sentinel that gives no answer leaves the flag as it was: logged each time, an Event and
    /// the metric once per spell.
    async fn check_sentinel<S: Sentinel>(&mut self, sentinel: &S, v: &NodeView) {
        let node = self.node;
        let answer = match sentinel.check().await {
            Ok(answer) => {
                if self.sentinel_failing {
                    tracing::info!(node, "the sentinel answers again");
                }
                self.sentinel_failing = false;
                answer
            }
            Err(e) => {
                self.metrics.sentinel_error();
                tracing::warn!(node, error = %e, flagged = v.reboot_required, "the sentinel gave no answer; the node's reboot-required flag is left as it is");
                if !self.sentinel_failing {
                    self.sentinel_failing = true;
                    self.events
                        .publish(
                            node,
                            true,
                            "SentinelFailed",
                            format!(
                                "{e}; rollboot.dev/reboot-required is left as it is ({}) until the sentinel answers",
                                if v.reboot_required { "flagged" } else { "not flagged" }
                            ),
                        )
                        .await;
                }
                return;
            }
        };
        let needed = answer.is_some();
        if needed == v.reboot_required {
            return;
        }
        let p = if needed {
            proto::patch(
                &[
                    (
                        proto::REBOOT_REQUIRED,
                        Some(crate::time::annotation(Utc::now())),
                    ),
                    (proto::REBOOT_REQUIRED_REASON, answer.clone()),
                ],
                None,
            )
        } else {
            proto::patch(
                &[
                    (proto::REBOOT_REQUIRED, None),
                    (proto::REBOOT_REQUIRED_REASON, None),
                ],
                None,
            )
        };
        match self.patch(p, "writing reboot-required").await {
            Ok(()) => tracing::info!(
                node,
                needed,
                reason = answer.as_deref().unwrap_or(""),
                "reboot-required changed"
            ),
            Err(e) => {
                tracing::warn!(node, error = %e, "could not write reboot-required; trying again on the next check")
            }
        }
    }
}

/// The agent's side of its host's shutdowns, around [`Agent`]: the logind guard, if any.
impl<R: RebootMethod> Agent<'_, R> {
    /// Removes a `shutdown-requested` left from before this process (see
    /// [`logind::decide::left_over`]), once the first view of the Node decides it.
    async fn clear_left_over_request(&mut self, v: &NodeView, read: &HostRead) {
        if !self.check_left_over {
            return;
        }
        if !v.shutdown_requested {
            self.check_left_over = false;
            return;
        }
        if !logind::decide::left_over(v, read.boot_id.as_deref(), false) {
            return;
        }
        let p = proto::patch(&[(proto::SHUTDOWN_REQUESTED, None)], None);
        match self
            .patch(p, "removing a left-over shutdown-requested")
            .await
        {
            Ok(()) => {
                self.check_left_over = false;
                tracing::info!(node = self.node, boot_id = %v.boot_id, "removed a shutdown-requested left from before: the host is on the boot its Node reports (the shutdown was cancelled, or this is the new boot)");
            }
            Err(e) => {
                tracing::warn!(node = self.node, error = %e, "could not remove a left-over shutdown-requested; trying again on the next check");
                self.unsettled = true;
            }
        }
    }

    /// Acts on what woke the logind guard; `false` when logind is gone (the guard is dropped).
    async fn on_host_shutdown<L: HostShutdowns>(
        &mut self,
        guard: &mut logind::Guard<L>,
        wake: logind::Wake,
        view: Option<&NodeView>,
    ) -> bool {
        let own = logind::OwnNode {
            api: &self.api,
            node: self.node,
            metrics: &self.metrics,
        };
        match wake {
            logind::Wake::Prepare(start) => {
                // A shutdown under way: the request on the Node is this process's to keep.
                self.check_left_over = false;
                let now = logind::AgentNow {
                    view,
                    rebooting: self.rebooting.as_deref(),
                    reboot_timeout: self.config.reboot.timeout.to_chrono(),
                };
                guard.on_prepare(start, &own, &now).await;
                // A cancelled shutdown ends whatever reboot was under way: a later shutdown is
                // not rollboot's own for that token.
                if !start {
                    self.rebooting = None;
                }
            }
            logind::Wake::Timer => {
                if let Some(note) = guard.on_timer(&own, view).await {
                    // An operator looks at the Node for why its pods went down with the host.
                    self.events
                        .publish(self.node, true, "ShutdownNotDrained", note)
                        .await;
                }
            }
            logind::Wake::Gone => {
                tracing::warn!(node = self.node, "logind can no longer be heard (the bus connection ended): letting the inhibitor go; trying to reach it again");
                self.metrics.inhibitor_held(false);
                return false;
            }
        }
        true
    }
}

/// The next wake of the logind guard; never, without one.
async fn host_shutdown_wake<L: HostShutdowns>(
    guard: &mut Option<logind::Guard<L>>,
) -> logind::Wake {
    match guard {
        Some(g) => g.next().await,
        None => std::future::pending().await,
    }
}

/// Runs the agent for `node` until `shutdown` resolves (or the future is dropped), without
/// logind (see [`run_with_host_shutdowns`]).
pub async fn run<R: RebootMethod, S: Sentinel>(
    client: Client,
    config: Arc<Config>,
    node: String,
    method: R,
    sentinel: S,
    metrics: Arc<AgentMetrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    run_with_host_shutdowns(
        client,
        config,
        node,
        method,
        sentinel,
        metrics,
        None::<NoLogind>,
        shutdown,
    )
    .await
}

/// Runs the agent for `node` until `shutdown` resolves (or the future is dropped), holding a
/// delay inhibitor through `host` (logind) when given and logind answers, with `config` as
/// given (see [`run_reloading`] for a config that changes).
#[allow(clippy::too_many_arguments)]
pub async fn run_with_host_shutdowns<R: RebootMethod, S: Sentinel, L: HostShutdowns>(
    client: Client,
    config: Arc<Config>,
    node: String,
    method: R,
    sentinel: S,
    metrics: Arc<AgentMetrics>,
    host: Option<L>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    let (_keep, configs) = tokio::sync::watch::channel(config);
    run_reloading(
        client, configs, node, method, sentinel, metrics, host, shutdown,
    )
    .await
}

/// How long a host whose boot ID differs from its Node's may go unsaid by a Warning Event:
/// an agent started with its host's new boot may see the Node before the kubelet wrote it.
pub const MISMATCH_GRACE: chrono::TimeDelta = chrono::TimeDelta::seconds(30);

/// Runs the agent for `node` until `shutdown` resolves (or the future is dropped), as
/// [`run_with_host_shutdowns`], taking each new config `configs` brings (a reloaded config
/// file): the reboot method and the sentinel rebuild themselves from it, the check period
/// and the timeouts are the new ones from then on. What the agent remembers (the tokens it
/// acted on, the refusals it said, its logind inhibitor) is kept across a reload.
#[allow(clippy::too_many_arguments)]
pub async fn run_reloading<R: RebootMethod, S: Sentinel, L: HostShutdowns>(
    client: Client,
    mut configs: tokio::sync::watch::Receiver<Arc<Config>>,
    node: String,
    method: R,
    mut sentinel: S,
    metrics: Arc<AgentMetrics>,
    host: Option<L>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    let config = configs.borrow_and_update().clone();
    let api: Api<Node> = Api::all(client.clone());
    let mut agent = Agent {
        api: api.clone(),
        lock_ref: LeaseRef::new(client.clone(), &config.lock.namespace, &config.lock.name),
        events: Recorder::new(
            client.clone(),
            &config.lock.namespace,
            "rollboot.dev/agent",
            &node,
        ),
        config: config.clone(),
        node: &node,
        method,
        metrics,
        mismatch_since: None,
        identity_said: None,
        mismatch_published: false,
        shutdown_drain: None,
        inhibit_delay: None,
        refused: None,
        acted: Vec::new(),
        unsettled: false,
        sentinel_failing: false,
        rebooting: None,
        check_left_over: true,
    };
    let mut guard = None;
    let mut lost: Option<logind::Lost<L>> = None;
    if let Some(l) = host {
        if let Some((g, preparing)) = logind::Guard::start(l, &node, &agent.metrics).await {
            // logind is shutting the host down now: a request on the Node is live.
            agent.check_left_over = !preparing;
            guard = Some(g);
        }
    }
    agent
        .say_shutdown_drain(guard.as_ref().map(logind::Guard::host))
        .await;
    let stream = watcher(
        api.clone(),
        watcher::Config::default().fields(&format!("metadata.name={node}")),
    )
    .default_backoff()
    .applied_objects();
    futures::pin_mut!(stream);
    tokio::pin!(shutdown);
    let mut view: Option<NodeView> = None;
    let period = |c: &Config| {
        let mut tick = tokio::time::interval(c.reboot.check_period.to_std());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick
    };
    let mut tick = period(&config);
    let mut reloading = true;
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            ev = stream.next() => {
                match ev {
                    Some(Ok(n)) => view = Some(NodeView::from_node(&n)),
                    Some(Err(e)) => { tracing::warn!(node, error = %e, "watching own node"); continue }
                    None => return Ok(()),
                }
                if let Some(v) = &view {
                    let read = agent.read_host();
                    agent.know_host(v, &read).await;
                    agent.act(v, &read).await;
                    agent.clear_left_over_request(v, &read).await;
                    if let Some(g) = guard.as_mut() {
                        let own = logind::OwnNode { api: &agent.api, node: agent.node, metrics: &agent.metrics };
                        g.on_view(v, &own);
                    }
                }
            }
            changed = configs.changed(), if reloading => {
                if changed.is_err() {
                    // Nobody can send a new config any more: the one in hand stays.
                    reloading = false;
                    continue;
                }
                let config = configs.borrow_and_update().clone();
                agent.method.reconfigure(&config.reboot);
                sentinel.reconfigure(&config.reboot);
                tick = period(&config);
                agent.config = config;
                agent.metrics.config_reloaded();
                tracing::info!(node, sentinel = %sentinel.describe(), check_period = %agent.config.reboot.check_period, "config reloaded: the new settings apply from now on");
                agent
                    .say_shutdown_drain(guard.as_ref().map(logind::Guard::host))
                    .await;
                if let Some(v) = &view {
                    let read = agent.read_host();
                    agent.know_host(v, &read).await;
                }
            }
            wake = host_shutdown_wake(&mut guard) => {
                let Some(g) = guard.as_mut() else { continue };
                if !agent.on_host_shutdown(g, wake, view.as_ref()).await {
                    lost = guard.take().map(|g| logind::Lost::new(g.into_logind()));
                }
            }
            _ = logind::Lost::due(&lost) => {
                let Some(l) = lost.take() else { continue };
                match l.reach(&node, &agent.metrics).await {
                    Ok(g) => {
                        agent.say_shutdown_drain(Some(g.host())).await;
                        guard = Some(g);
                    }
                    // Said once logind stays away past the first try: a bus that goes away
                    // as the host shuts down (its agent ends a moment later) is not news.
                    Err(l) => {
                        agent.say_shutdown_drain(None).await;
                        lost = Some(l);
                    }
                }
            }
            _ = tick.tick() => {
                if let Some(g) = guard.as_mut() {
                    if g.refresh(&node).await {
                        let host = g.host();
                        agent.say_shutdown_drain(Some(host)).await;
                    }
                }
                let Some(v) = &view else { continue };
                let read = agent.read_host();
                agent.know_host(v, &read).await;
                // A refusal for a reason that can pass with no change to this Node (the node
                // listed in the lock again), or a look cut short by a failed request, is
                // looked at again, while the token lives.
                if agent.refused.is_some() || agent.unsettled {
                    agent.act(v, &read).await;
                    agent.clear_left_over_request(v, &read).await;
                }
                agent.check_sentinel(&sentinel, v).await;
            }
        }
    }
}

/// The agent's reading of its host, around [`Agent`]: compared with its Node, said, and
/// written to the Node's `agent-host`.
impl<R: RebootMethod> Agent<'_, R> {
    /// Compares the host, as `read`, with its Node `v` ([`identity`]): says the result when it changes
    /// (info when they agree, a warning when not), keeps since when the boot IDs differ (a
    /// token issued after that is refused as `bootMismatch`, never taken for a reboot),
    /// publishes a Warning Event once a mismatch has lasted [`MISMATCH_GRACE`], and writes
    /// `agent-host` when what it reads differs from what the Node has.
    async fn know_host(&mut self, v: &NodeView, read: &HostRead) {
        let node = self.node;
        let now = Utc::now();
        let (boot, machine, init) = (&read.boot_id, &read.machine_id, read.init_start);
        let result = identity(v, read.seen(None));
        if boot.as_deref().is_some_and(|b| boot_differs(v, b)) {
            self.mismatch_since.get_or_insert(now);
        } else {
            self.mismatch_since = None;
        }
        if result.is_ok() {
            self.mismatch_published = false;
        }
        if self.identity_said.as_ref() != Some(&result) {
            self.metrics.host_matches(result.is_ok());
            match &result {
                Ok(()) => tracing::info!(
                    node,
                    host_boot_id = boot.as_deref().unwrap_or_default(),
                    host_machine_id = machine.as_deref().unwrap_or("unknown"),
                    host_init_start = init,
                    "the host is this node's: its boot ID (and machine ID) are the ones the Node reports"
                ),
                Err(why) => tracing::warn!(
                    node,
                    boot_id_file = %self.config.reboot.host_boot_id_file,
                    "{why}: the agent refuses every reboot token while this lasts"
                ),
            }
            self.identity_said = Some(result.clone());
        }
        if let Err(why) = &result {
            let lasted = self
                .mismatch_since
                .is_none_or(|since| now - since >= MISMATCH_GRACE);
            if !self.mismatch_published && lasted {
                self.mismatch_published = true;
                self.events
                    .publish(
                        node,
                        true,
                        "HostMismatch",
                        format!(
                            "{why} (host boot ID read from {}): the agent refuses every reboot \
                             token while this lasts",
                            self.config.reboot.host_boot_id_file
                        ),
                    )
                    .await;
            }
        }
        let Some(boot_id) = boot.clone().filter(|b| proto::boot_id_well_formed(b)) else {
            return;
        };
        let record = AgentHost {
            boot_id,
            init_start: init,
            machine_id: machine.clone(),
            shutdown_drain: self.shutdown_drain.unwrap_or(ShutdownDrain::NoLogind),
            inhibit_delay_seconds: self.inhibit_delay,
        };
        if v.agent_host.as_ref() == Some(&record) {
            return;
        }
        let p = proto::patch(&[(proto::AGENT_HOST, Some(record.to_annotation()))], None);
        if let Err(e) = self.patch(p, "writing agent-host").await {
            tracing::warn!(node, error = %e, "could not write what the agent reads of its host; trying again on the next check");
        }
    }

    /// Says how a shutdown nobody planned would go on this node, from logind's delay and the
    /// kubelet's inhibitor (`host`, `None` without logind): a log line, a Warning Event and the
    /// metric when it changes. The Node's `agent-host` takes it on the next look.
    async fn say_shutdown_drain(&mut self, host: Option<(std::time::Duration, bool)>) {
        let drain_timeout = self.config.drain.timeout.to_std();
        let now = logind::decide::shutdown_drain(host, drain_timeout);
        self.inhibit_delay = host.map(|(d, _)| d.as_secs());
        if self.shutdown_drain == Some(now) {
            return;
        }
        self.shutdown_drain = Some(now);
        self.metrics.shutdown_drain(now);
        let node = self.node;
        let mut note = now.meaning().to_string();
        if let Some(w) = host.and_then(|(d, _)| logind::decide::delay_warning(d, drain_timeout)) {
            note = format!("{note}; {w}");
        }
        if now == ShutdownDrain::Ready {
            tracing::info!(node, shutdown_drain = now.as_str(), "{note}");
            return;
        }
        tracing::warn!(node, shutdown_drain = now.as_str(), "{note}");
        self.events
            .publish(
                node,
                true,
                "ShutdownDrain",
                format!("{}: {note}", now.as_str()),
            )
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::fixtures::node;

    /// The host of a Node on boot `boot-1`, machine `m-1`.
    const HOME: HostSeen<'static> = HostSeen {
        boot_id: Some("boot-1"),
        machine_id: Some("m-1"),
        init_start: None,
        mismatch_since: None,
    };

    /// The host on boot `b`, machine unknown.
    fn on(b: &str) -> HostSeen<'_> {
        HostSeen {
            boot_id: Some(b),
            ..HostSeen::default()
        }
    }

    /// A cordoned node on boot `boot-1`, machine `m-1`.
    fn cordoned() -> NodeView {
        NodeView {
            unschedulable: true,
            boot_id: "boot-1".into(),
            machine_id: "m-1".into(),
            ..NodeView::from_node(&node("n1", &[]))
        }
    }

    fn cause(r: Option<(RefusalCause, String)>) -> Option<RefusalCause> {
        r.map(|(c, _)| c)
    }

    #[test]
    fn the_agent_refuses_a_node_outside_the_lock_or_uncordoned_or_a_stale_token() {
        let c = Config::default();
        let now = Utc::now();
        let fresh = Token::new(now, 1).text;
        let on = cordoned();
        assert_eq!(refusal(&on, &fresh, true, HOME, &c, now), None);
        let (why, text) = refusal(&on, &fresh, false, HOME, &c, now).unwrap();
        assert_eq!(why, RefusalCause::NotInLock);
        assert!(text.contains("maintenance lock"));
        let open = NodeView {
            unschedulable: false,
            ..on.clone()
        };
        assert_eq!(
            cause(refusal(&open, &fresh, true, HOME, &c, now)),
            Some(RefusalCause::NotCordoned)
        );
        let old = Token::new(now - chrono::Duration::hours(1), 2).text;
        let (why, text) = refusal(&on, &old, true, HOME, &c, now).unwrap();
        assert_eq!(why, RefusalCause::TokenExpired);
        assert!(text.contains("older"));
        assert_eq!(
            cause(refusal(&on, "junk", true, HOME, &c, now)),
            Some(RefusalCause::TokenInvalid)
        );
    }

    /// A cordoned node asked to reboot with `token` on boot `boot-1`.
    fn asked(token: &str) -> NodeView {
        NodeView {
            state: Some(proto::NodeState::Rebooting),
            boot_id_before: Some("boot-1".into()),
            reboot_token: Some(token.into()),
            reboot_attempt: Some(1),
            ..cordoned()
        }
    }

    #[test]
    fn the_agent_refuses_a_token_when_its_ack_is_unreadable_or_the_host_already_rebooted() {
        let c = Config::default();
        let now = Utc::now();
        let fresh = Token::new(now, 1).text;
        let v = asked(&fresh);
        assert_eq!(refusal(&v, &fresh, true, HOME, &c, now), None);
        // Someone wrote garbage over the ack: whether the current token was acted on is unknown.
        let garbled = NodeView::from_node(&crate::node::fixtures::annotate(
            node("n1", &[]),
            proto::REBOOT_ACK,
            "garbage",
        ));
        let garbled = NodeView {
            malformed: garbled.malformed,
            ..v.clone()
        };
        let (why, text) = refusal(&garbled, &fresh, true, HOME, &c, now).unwrap();
        assert_eq!(why, RefusalCause::AckUnreadable);
        assert!(
            text.contains("rollboot.dev/reboot-ack is malformed"),
            "{text}"
        );
        // The Node already shows a new boot: acting would be a second reboot.
        let back = NodeView {
            boot_id: "boot-2".into(),
            ..v.clone()
        };
        let host2 = HostSeen {
            boot_id: Some("boot-2"),
            ..HOME
        };
        let (why, text) = refusal(&back, &fresh, true, host2, &c, now).unwrap();
        assert_eq!(why, RefusalCause::AlreadyRebooted);
        assert!(text.contains("already rebooted"), "{text}");
        // A token issued after a lost one: the host's own boot ID is believed before the Node's
        // (the kubelet may not have reported the new boot yet).
        let retry = NodeView {
            reboot_attempt: Some(2),
            ..v.clone()
        };
        let (why, text) = refusal(&retry, &fresh, true, host2, &c, now).unwrap();
        assert_eq!(why, RefusalCause::AlreadyRebooted);
        assert!(text.contains("boot-1 -> boot-2"), "{text}");
        assert_eq!(refusal(&retry, &fresh, true, HOME, &c, now), None);
        // A garbled ack, and an agent restarted on the new boot before the kubelet reported
        // it: the host's machine ID is the Node's and its boot is not `boot-id-before`. The
        // reboot happened; that is the answer, whatever the ack says (before: ackUnreadable,
        // which failed the node and halted the rollout).
        let (why, text) = refusal(&garbled, &fresh, true, host2, &c, now).unwrap();
        assert_eq!(why, RefusalCause::AlreadyRebooted, "{text}");
        assert!(text.contains("boot-1 -> boot-2"), "{text}");
        // The machine unknown: nothing says the new boot is this host's, the ack decides.
        let unknown = HostSeen {
            machine_id: None,
            ..host2
        };
        assert_eq!(
            cause(refusal(&garbled, &fresh, true, unknown, &c, now)),
            Some(RefusalCause::AckUnreadable)
        );
    }

    #[test]
    fn the_agent_never_reboots_a_host_that_is_not_its_nodes() {
        let c = Config::default();
        let now = Utc::now();
        let fresh = Token::new(now, 1).text;
        let v = asked(&fresh);
        // Started with the wrong --node-name, or against a simulator on a workstation: the
        // host's boot ID is not the Node's, and nothing says it is the same machine.
        let elsewhere = on("workstation-boot");
        let (why, text) = refusal(&v, &fresh, true, elsewhere, &c, now).unwrap();
        assert_eq!(why, RefusalCause::WrongHost);
        assert!(
            text.contains("workstation-boot") && text.contains("boot-1") && text.contains("n1"),
            "{text}"
        );
        assert!(why.fails_the_node());
        // Another machine, whatever its boot.
        let other = HostSeen {
            machine_id: Some("m-2"),
            ..on("boot-1")
        };
        let (why, text) = refusal(&v, &fresh, true, other, &c, now).unwrap();
        assert_eq!(why, RefusalCause::WrongHost);
        assert!(text.contains("machine ID m-2"), "{text}");
        // The same machine on a newer boot: it rebooted and the Node lags; not a wrong host.
        let newer = HostSeen {
            machine_id: Some("M-1"),
            ..on("boot-9")
        };
        assert_eq!(
            cause(refusal(&v, &fresh, true, newer, &c, now)),
            Some(RefusalCause::AlreadyRebooted)
        );
        // A host whose boot ID cannot be read is not taken for the Node's.
        let unknown = HostSeen {
            boot_id: None,
            ..HOME
        };
        let (why, text) = refusal(&v, &fresh, true, unknown, &c, now).unwrap();
        assert_eq!(why, RefusalCause::HostUnknown);
        assert!(
            text.contains("/proc/1/root/proc/sys/kernel/random/boot_id"),
            "{text}"
        );
        // Machine IDs unknown on either side: the boot ID alone decides.
        let quiet = NodeView {
            machine_id: String::new(),
            ..v.clone()
        };
        assert_eq!(refusal(&quiet, &fresh, true, HOME, &c, now), None);
    }

    #[test]
    fn a_token_is_reported_lost_only_when_an_earlier_agent_took_it_on_the_same_boot() {
        let c = Config::default();
        let now = Utc::now();
        let t = Token::new(now, 7).text;
        let acked = NodeView {
            reboot_ack: Some(t.clone()),
            ..asked(&t)
        };
        assert_eq!(
            lost_token(&acked, on("boot-1"), &[], &c, now),
            Some(t.clone())
        );
        // This process took it itself: its reboot is under way.
        assert_eq!(
            lost_token(&acked, on("boot-1"), std::slice::from_ref(&t), &c, now),
            None
        );
        // The host booted since: the reboot happened, whatever the Node says yet.
        assert_eq!(lost_token(&acked, on("boot-2"), &[], &c, now), None);
        // Without the host's own boot ID, a reboot the kubelet has not reported yet cannot be
        // told from a lost one: nothing is reported.
        assert_eq!(lost_token(&acked, HostSeen::default(), &[], &c, now), None);
        // Already reported, not acknowledged, or too old.
        let reported = NodeView {
            reboot_lost: Some(t.clone()),
            ..acked.clone()
        };
        assert_eq!(lost_token(&reported, on("boot-1"), &[], &c, now), None);
        assert_eq!(lost_token(&asked(&t), on("boot-1"), &[], &c, now), None);
        let later = now + chrono::Duration::hours(1);
        assert_eq!(lost_token(&acked, on("boot-1"), &[], &c, later), None);
    }

    #[test]
    fn a_boot_id_that_differed_before_the_request_fails_the_node_and_is_never_taken_for_a_reboot() {
        let c = Config::default();
        let now = Utc::now();
        let issued = now - chrono::Duration::seconds(5);
        let fresh = Token::new(issued, 1).text;
        let v = asked(&fresh);
        // The agent reads the kernel's boot ID of a nested node: the machine is the Node's,
        // the boot ID never was, since the agent started (before the request).
        let nested = HostSeen {
            boot_id: Some("kernel-boot"),
            mismatch_since: Some(issued - chrono::Duration::minutes(3)),
            ..HOME
        };
        let (why, text) = refusal(&v, &fresh, true, nested, &c, now).unwrap();
        assert_eq!(why, RefusalCause::BootMismatch);
        assert!(why.fails_the_node());
        assert!(
            text.contains("kernel-boot")
                && text.contains("boot-1")
                && text.contains("before this request")
                && text.contains("/proc/1/root/proc/sys/kernel/random/boot_id"),
            "{text}"
        );
        // A retry token (the host's own boot believed first) does not turn it into one.
        let retry = NodeView {
            reboot_attempt: Some(2),
            ..v.clone()
        };
        assert_eq!(
            cause(refusal(&retry, &fresh, true, nested, &c, now)),
            Some(RefusalCause::BootMismatch)
        );
        // The same host boot first seen after the request: the host rebooted since.
        let since = HostSeen {
            mismatch_since: Some(now),
            ..nested
        };
        assert_eq!(
            cause(refusal(&v, &fresh, true, since, &c, now)),
            Some(RefusalCause::AlreadyRebooted)
        );
    }

    #[test]
    fn on_a_kind_like_node_pid_1s_start_tells_a_reboot_from_an_agent_restart() {
        let c = Config::default();
        let now = Utc::now();
        let t = Token::new(now, 3).text;
        // Every boot of the node reports boot-1; the request recorded PID 1's start 100.
        let acked = NodeView {
            reboot_ack: Some(t.clone()),
            init_start_before: Some(100),
            ..asked(&t)
        };
        let started = |init| HostSeen {
            init_start: Some(init),
            ..HOME
        };
        // An agent restarted on the same boot: the token is lost.
        assert_eq!(
            lost_token(&acked, started(100), &[], &c, now),
            Some(t.clone())
        );
        // The node rebooted (its init started again): no second reboot is asked for.
        assert_eq!(lost_token(&acked, started(4242), &[], &c, now), None);
        // A token issued after a lost one, on a node that rebooted since: refused as
        // rebooted, whatever the unchanged boot ID says.
        let retry = NodeView {
            reboot_attempt: Some(2),
            reboot_ack: None,
            ..acked.clone()
        };
        let (why, text) = refusal(&retry, &t, true, started(4242), &c, now).unwrap();
        assert_eq!(why, RefusalCause::AlreadyRebooted);
        assert!(
            text.contains("boot-1 (PID 1 started at 100) -> boot-1 (PID 1 started at 4242)"),
            "{text}"
        );
        assert_eq!(refusal(&retry, &t, true, started(100), &c, now), None);
        // The Node side: the agent of the new boot wrote its record.
        let back = NodeView {
            agent_host: Some(proto::AgentHost {
                boot_id: "boot-1".into(),
                init_start: Some(4242),
                machine_id: None,
                shutdown_drain: ShutdownDrain::NoLogind,
                inhibit_delay_seconds: None,
            }),
            ..retry.clone()
        };
        assert!(back.came_back());
        assert!(!retry.came_back());
    }

    #[test]
    fn the_host_is_compared_with_its_node_and_what_differs_is_named() {
        let v = cordoned();
        assert_eq!(identity(&v, HOME), Ok(()));
        let e = identity(
            &v,
            HostSeen {
                boot_id: Some("kernel-boot"),
                machine_id: Some("m-9"),
                ..HOME
            },
        )
        .unwrap_err();
        assert!(
            e.contains("boot ID kernel-boot (node n1 reports boot-1)")
                && e.contains("machine ID m-9 (node n1 reports m-1)"),
            "{e}"
        );
        assert!(identity(&v, HostSeen::default()).is_err());
        // Unknown on the Node's side: nothing to compare.
        let blank = NodeView {
            boot_id: String::new(),
            machine_id: String::new(),
            ..v
        };
        assert_eq!(identity(&blank, on("anything")), Ok(()));
    }
}
