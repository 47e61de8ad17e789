//! The agent's side of its host's shutdowns, around the logind guard ([`super::logind`]):
//! the guard started, woken, lost and reached again; a `shutdown-requested` left from before
//! this process removed; how an unplanned shutdown would go on the node said.
//!
//! Owns what each wake of the guard means for the agent (its own reboot's shutdown, or one it
//! did not start) and what the agent says of logind (a log line, a Warning Event, the metric).
//! It must never write any key but `shutdown-requested` (through the guard, or removing one
//! left over), and never stop the agent: a host without logind is said and the agent goes on.

use super::logind::{self, HostShutdowns};
use super::process::{Agent, HostRead};
use super::RebootHost;
use crate::node::{self as proto, NodeView, ShutdownDrain};

/// The agent's side of its host's shutdowns, around [`Agent`]: the logind guard, if any.
impl<R: RebootHost> Agent<'_, R> {
    /// Removes a `shutdown-requested` left from before this process (see
    /// [`logind::decide::left_over`]), once the first view of the Node decides it.
    pub(super) async fn clear_left_over_request(&mut self, v: &NodeView, read: &HostRead) {
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
        let what = "removing a left-over shutdown-requested";
        match self.writer.write(what, p).await {
            Ok(()) => {
                self.check_left_over = false;
                tracing::info!(boot_id = %v.boot_id, "removed a shutdown-requested left from before: the host is on the boot its Node reports (the shutdown was cancelled, or this is the new boot)");
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not remove a left-over shutdown-requested; trying again on the next check");
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
        // Borrowed field by field: the arms below also set the agent's own state.
        let own = logind::OwnNode {
            writer: &self.writer,
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
                tracing::warn!("logind can no longer be heard (the bus connection ended): letting the inhibitor go; trying to reach it again");
                self.metrics.inhibitor_held(false);
                return false;
            }
        }
        true
    }

    /// Says how a shutdown nobody planned would go on this node, from logind's delay and the
    /// kubelet's inhibitor (`host`, `None` without logind): a log line, a Warning Event and the
    /// metric when it changes. The Node's `agent-host` takes it on the next look.
    pub(super) async fn say_shutdown_drain(&mut self, host: Option<(std::time::Duration, bool)>) {
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
            tracing::info!(shutdown_drain = now.as_str(), "{note}");
            return;
        }
        tracing::warn!(shutdown_drain = now.as_str(), "{note}");
        self.events
            .publish(
                node,
                true,
                "ShutdownDrain",
                format!("{}: {note}", now.as_str()),
            )
            .await;
    }

    /// What the logind guard acts with: the agent's own Node and its counters.
    pub(super) fn own_node(&self) -> logind::OwnNode<'_> {
        logind::OwnNode {
            writer: &self.writer,
            node: self.node,
            metrics: &self.metrics,
        }
    }

    /// Starts the logind guard through `host` (none: without logind), and says how an
    /// unplanned shutdown would go.
    pub(super) async fn start_logind<L: HostShutdowns>(
        &mut self,
        host: Option<L>,
    ) -> Option<logind::Guard<L>> {
        let mut guard = None;
        if let Some(l) = host {
            if let Some((g, preparing)) = logind::Guard::start(l, &self.metrics).await {
                // logind is shutting the host down now: a request on the Node is live.
                self.check_left_over = !preparing;
                guard = Some(g);
            }
        }
        self.say_shutdown_drain(guard.as_ref().map(logind::Guard::host))
            .await;
        guard
    }

    /// Acts on `wake` of the guard; a logind gone is given up (`lost`, to reach again).
    pub(super) async fn on_guard_wake<L: HostShutdowns>(
        &mut self,
        guard: &mut Option<logind::Guard<L>>,
        lost: &mut Option<logind::Lost<L>>,
        wake: logind::Wake,
        view: Option<&NodeView>,
    ) {
        let Some(g) = guard.as_mut() else { return };
        if !self.on_host_shutdown(g, wake, view).await {
            *lost = guard.take().map(|g| logind::Lost::new(g.into_logind()));
        }
    }

    /// Tries to reach a logind that was `lost` again: the guard again, or a later try.
    pub(super) async fn reach_logind<L: HostShutdowns>(
        &mut self,
        guard: &mut Option<logind::Guard<L>>,
        lost: &mut Option<logind::Lost<L>>,
    ) {
        let Some(l) = lost.take() else { return };
        match l.reach(&self.metrics).await {
            Ok(g) => {
                self.say_shutdown_drain(Some(g.host())).await;
                *guard = Some(g);
            }
            // Said once logind stays away past the first try: a bus that goes away as the
            // host shuts down (its agent ends a moment later) is not news.
            Err(l) => {
                self.say_shutdown_drain(None).await;
                *lost = Some(l);
            }
        }
    }
}

/// The next wake of the logind guard; never, without one.
pub(super) async fn host_shutdown_wake<L: HostShutdowns>(
    guard: &mut Option<logind::Guard<L>>,
) -> logind::Wake {
    match guard {
        Some(g) => g.next().await,
        None => std::future::pending().await,
    }
}
