//! The agent's report of its host: the host as read compared with its Node on every look, the
//! result said when it changes, a lasting mismatch a Warning Event, and what it reads written in
//! the Node's `agent-host`.
//!
//! Owns since when the boot IDs have differed (a token issued after that is refused as
//! `bootMismatch`, never taken for a reboot: [`super::checks`]) and when a mismatch is news
//! ([`MISMATCH_GRACE`]). It must never act on a token: [`super::tokens`] does.

use chrono::Utc;

use super::checks::{boot_differs, identity};
use super::process::{Agent, HostRead};
use super::RebootHost;
use crate::node::{self as proto, AgentHost, NodeView, ShutdownDrain};

/// How long a host whose boot ID differs from its Node's may go unsaid by a Warning Event:
/// an agent started with its host's new boot may see the Node before the kubelet wrote it.
pub const MISMATCH_GRACE: chrono::TimeDelta = chrono::TimeDelta::seconds(30);

/// The agent's reading of its host, around [`Agent`]: compared with its Node, said, and
/// written to the Node's `agent-host`.
impl<R: RebootHost> Agent<'_, R> {
    /// Compares the host, as `read`, with its Node `v` ([`identity`]): says the result when it changes
    /// (info when they agree, a warning when not), keeps since when the boot IDs differ (a
    /// token issued after that is refused as `bootMismatch`, never taken for a reboot),
    /// publishes a Warning Event once a mismatch has lasted [`MISMATCH_GRACE`], and writes
    /// `agent-host` when what it reads differs from what the Node has.
    pub(super) async fn know_host(&mut self, v: &NodeView, read: &HostRead) {
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
                    host_boot_id = boot.as_deref().unwrap_or_default(),
                    host_machine_id = machine.as_deref().unwrap_or("unknown"),
                    host_init_start = init,
                    "the host is this node's: its boot ID (and machine ID) are the ones the Node reports",
                ),
                Err(why) => tracing::warn!(
                    boot_id_file = %self.config.reboot.host_boot_id_file,
                    "{why}: the agent refuses every reboot token while this lasts",
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
        if let Err(e) = self.writer.write("writing agent-host", p).await {
            tracing::warn!(error = %e, "could not write what the agent reads of its host; trying again on the next check");
        }
    }
}
