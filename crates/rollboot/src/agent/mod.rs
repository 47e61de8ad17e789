//! The agent: one per node, the node's "sidecar".
//!
//! Owns noticing that its host needs a reboot (a sentinel file or command, checked every
//! `checkPeriod`, written to the Node only when the answer changes; a sentinel that gives no
//! answer leaves the flag as it was, and is said once per spell) and rebooting the host when
//! the controller writes a new `reboot` token: it writes `reboot-ack` with that token first,
//! then reboots through a [`RebootHost`]. It watches only its own Node. It must never act on a
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
//!
//! Where each thing lives: `checks` the pure checks of a token and of the host; `process`
//! what one agent process remembers; `run` its loop ([`run_reloading`]); `tokens` acting on a
//! token (judge, refuse, acknowledge, reboot, report lost); `flag` the `reboot-required` flag
//! from the [`sentinel`]; `host_report` the host compared with its Node and written in
//! `agent-host`; `shutdowns` the [`logind`] guard's side; `writes` every write of its own Node,
//! through the one node writer ([`crate::node_writer`]): its own Node only, its own keys only,
//! each fenced. [`host`] is how it reads and reboots its host; [`metrics`] its counters.

mod checks;
mod flag;
pub mod host;
mod host_report;
pub mod logind;
pub mod metrics;
mod process;
mod run;
pub mod sentinel;
mod shutdowns;
mod tokens;
mod writes;

pub use checks::{identity, lost_token, refusal, HostSeen};
pub use host::{CommandReboot, HostMethod, HostReboot, RebootHost, SignalReboot};
pub use host_report::MISMATCH_GRACE;
pub use logind::{HostShutdowns, NoLogind, SystemLogind};
pub use metrics::AgentMetrics;
pub use run::{run, run_reloading, run_with_host_shutdowns};
pub use sentinel::{CommandSentinel, FileSentinel, HostSentinel, Sentinel, SentinelError};
pub use writes::OwnNodeWriter;

/// What can go wrong in the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The reboot method failed.
    #[error("node {node}: reboot failed: {reason}")]
    Reboot {
        /// Node.
        node: String,
        /// Why.
        reason: String,
    },
}
