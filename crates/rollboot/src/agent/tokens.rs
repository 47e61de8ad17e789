//! The agent's reboot tokens: each new token judged, then refused (said on the Node, in
//! `reboot-refused`, and in an Event) or acknowledged (`reboot-ack`, before anything happens)
//! and its reboot carried out; a token an earlier agent acknowledged on the same boot reported
//! lost (`reboot-lost`).
//!
//! Owns the order that makes one token one reboot: the checks ([`super::checks`]) and the
//! maintenance lock read fresh, then the ack fenced by the version the checks were made on,
//! then the reboot. It must never act on a token twice, nor on one it did not acknowledge on
//! the Node first.

use chrono::Utc;

use super::checks::{lost_token, refusal, HostSeen};
use super::process::{Agent, HostRead};
use super::RebootHost;
use crate::lock;
use crate::node::{self as proto, NodeView, RefusalCause};
use crate::node_writer::NodeWriteError;

impl<R: RebootHost> Agent<'_, R> {
    /// Acts on the Node as `v` shows it, its host read as `read`: reports a lost token, or
    /// reboots for a new one.
    pub(super) async fn act(&mut self, v: &NodeView, read: &HostRead) {
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
        let p = proto::patch(&[(proto::REBOOT_LOST, Some(token.to_string()))], None);
        let what = "reporting a lost reboot token";
        match self
            .writer
            .write_decided(&v.resource_version, what, p)
            .await
        {
            Ok(_) => {
                tracing::warn!(token, boot_id = %boot, "an earlier agent acknowledged this token and the host did not reboot; reported it lost");
                self.events.publish_action(node, true, "RebootLost", &format!("ReportLost {token}"), format!("agent acknowledged token {token} earlier but the host did not reboot (boot ID still {boot}): the agent stopped between its ack and the reboot; asking the controller for a new token")).await;
            }
            Err(e) => {
                tracing::warn!(token, error = %e, "could not report a lost reboot token; trying again on the next check");
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
                tracing::warn!(error = %e, "reading the maintenance lock; trying again on the next check");
                self.unsettled = true;
                None
            }
        }
    }

    /// Writes `reboot-ack` with `token`: one token, one reboot, the ack on the Node before
    /// anything happens. Fenced by the version the checks were made on: a cordon lifted, a
    /// token withdrawn or replaced since makes it a 409, and the newer version (which the watch
    /// brings) is judged again. A refusal said earlier for this token no longer holds. Whether
    /// the ack was written.
    async fn acknowledge(&mut self, v: &NodeView, token: &str) -> bool {
        let ack = proto::patch(
            &[
                (proto::REBOOT_ACK, Some(token.to_string())),
                (proto::REBOOT_REFUSED, None),
            ],
            None,
        );
        let what = "acknowledging the reboot token";
        match self
            .writer
            .write_decided(&v.resource_version, what, ack)
            .await
        {
            Ok(_) => true,
            Err(NodeWriteError::Conflict { .. }) => {
                tracing::info!(
                    token,
                    "the node changed since it was checked; deciding again from the newer version",
                );
                false
            }
            Err(e) => {
                tracing::warn!(token, error = %e, "could not acknowledge; not rebooting now, trying again on the next check");
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
        tracing::info!(token, "rebooting");
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
            tracing::error!(token, error = %e, "reboot failed");
            self.events
                .publish(node, true, "RebootFailed", e.to_string())
                .await;
            // The token is spent and the host did not go down.
            let cause = RefusalCause::RebootCommandFailed;
            self.record_refusal(token, cause, e.to_string()).await;
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
        tracing::warn!(token, cause = cause.as_str(), reason = %why, "refusing to reboot");
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
        let what = "recording a refused reboot token";
        match self.writer.write(what, p).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(token, error = %e, "could not record the refusal on the node; trying again on the next check");
                self.unsettled = true;
                false
            }
        }
    }
}
