//! One agent process: what it remembers between the events it handles ([`Agent`]), and its
//! host as read for one look at its Node ([`HostRead`]).
//!
//! Owns the agent's memory (the tokens it acted on, the refusals and the host it said, whether
//! a look is unsettled) and its means: its writer of its own Node, its Event recorder, its
//! reboot method, its counters. It must never act by itself: the loop ([`super::run`]) hands
//! it each event, and the other modules of the agent act on them.

use std::sync::Arc;

use chrono::Utc;
use kube::Client;

use super::checks::HostSeen;
use super::metrics::AgentMetrics;
use super::writes::OwnNodeWriter;
use super::RebootHost;
use crate::config::Config;
use crate::events::Recorder;
use crate::lease::LeaseRef;
use crate::node::{RefusalCause, ShutdownDrain};

/// The host as the agent read it for one look at its Node: read once, then compared, acted on
/// and written from.
pub(super) struct HostRead {
    pub(super) boot_id: Option<String>,
    pub(super) machine_id: Option<String>,
    pub(super) init_start: Option<u64>,
}

impl HostRead {
    /// What the checks take, with since when the boot IDs have differed.
    pub(super) fn seen(&self, mismatch_since: Option<chrono::DateTime<Utc>>) -> HostSeen<'_> {
        HostSeen {
            boot_id: self.boot_id.as_deref(),
            machine_id: self.machine_id.as_deref(),
            init_start: self.init_start,
            mismatch_since,
        }
    }
}

/// What one agent process remembers between the events it handles.
pub(super) struct Agent<'a, R> {
    /// Its writer of its own Node.
    pub(super) writer: OwnNodeWriter,
    pub(super) lock_ref: LeaseRef,
    pub(super) events: Recorder,
    /// The config as last loaded (it is reloaded while the agent runs).
    pub(super) config: Arc<Config>,
    pub(super) node: &'a str,
    pub(super) method: R,
    pub(super) metrics: Arc<AgentMetrics>,
    /// Since when the host's boot ID has differed from the Node's, without a break.
    pub(super) mismatch_since: Option<chrono::DateTime<Utc>>,
    /// What was last said of the host against its Node (`None`: nothing yet): said again only
    /// when it changes.
    pub(super) identity_said: Option<Result<(), String>>,
    /// The Warning Event for the current mismatch was published.
    pub(super) mismatch_published: bool,
    /// How a shutdown nobody planned would go (from the logind guard), as last said.
    pub(super) shutdown_drain: Option<ShutdownDrain>,
    /// logind's delay in seconds, with the guard.
    pub(super) inhibit_delay: Option<u64>,
    /// The last refusal said, (token, cause, why): said once, looked at again while the token
    /// lives.
    pub(super) refused: Option<(String, RefusalCause, String)>,
    /// Tokens this process acknowledged itself (the last few): never reported lost by it.
    pub(super) acted: Vec<String>,
    /// The last look at a token ended on a failed request (reading the lock, writing the ack):
    /// looked at again on the next check, as no change of the Node may come to wake it.
    pub(super) unsettled: bool,
    /// The sentinel's last check failed (a spell of errors, said once until it answers again).
    pub(super) sentinel_failing: bool,
    /// The token whose reboot the reboot method is carrying out: a host shutdown now is
    /// rollboot's own.
    pub(super) rebooting: Option<String>,
    /// A `shutdown-requested` on the Node is still to be looked at as left over from before
    /// this process (until the first view decides it, or a shutdown begins).
    pub(super) check_left_over: bool,
}

impl<'a, R: RebootHost> Agent<'a, R> {
    /// The agent of Node `node` as it starts: nothing said, nothing acted on.
    pub(super) fn new(
        client: &Client,
        config: Arc<Config>,
        node: &'a str,
        method: R,
        metrics: Arc<AgentMetrics>,
    ) -> Agent<'a, R> {
        Agent {
            writer: OwnNodeWriter::new(client.clone(), node),
            lock_ref: LeaseRef::new(client.clone(), &config.lock.namespace, &config.lock.name),
            events: Recorder::new(
                client.clone(),
                &config.lock.namespace,
                "rollboot.dev/agent",
                node,
            ),
            config,
            node,
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
        }
    }

    /// The host as it is now.
    pub(super) fn read_host(&self) -> HostRead {
        HostRead {
            boot_id: self.method.boot_id(self.node),
            machine_id: self.method.machine_id(self.node),
            init_start: self.method.init_start(self.node),
        }
    }
}
