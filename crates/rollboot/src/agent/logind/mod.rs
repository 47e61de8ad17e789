//! Drain before an unplanned shutdown: the agent's logind delay inhibitor.
//!
//! Owns the one inhibitor lock the agent holds on its host ([`Guard`]): taking it at start,
//! letting it go when the Node says drained, a margin before logind's `InhibitDelayMaxUSec`
//! runs out, at once for rollboot's own reboot, and taking a new one when a shutdown is
//! cancelled; and the agent's `shutdown-requested` on its own Node, written when the host begins
//! to shut down by itself and removed when that shutdown is cancelled. The host's side is one
//! trait, [`HostShutdowns`]: logind on the system bus ([`dbus::SystemLogind`]), or a simulated
//! host. The decisions are pure, in [`decide`]. It must never hold a lock past the release rule
//! (a host whose shutdown waits on rollboot is a host that cannot be shut down), never write any
//! Node but the agent's own nor any key but `shutdown-requested`, and never stop the agent: a
//! host without logind is said once and the agent goes on without it. A logind whose bus
//! connection ends is given back ([`Guard::into_logind`]) and reached again ([`Lost`], through
//! [`HostShutdowns::reconnect`]) with the same back-off as a lock taken again; its lock goes
//! with the guard, since nothing can be heard while the bus is away.

pub mod dbus;
pub mod decide;

use std::future::Future;
use std::time::Duration;

use chrono::Utc;
use tokio::time::Instant;

use super::AgentMetrics;
use crate::node::{self as proto, NodeView};
use crate::node_writer::NodeWriteError;
pub use dbus::{system_bus_address, InhibitorFd, SystemLogind};
pub use decide::{Release, Request};

/// What can go wrong talking to logind.
#[derive(Debug, thiserror::Error)]
pub enum LogindError {
    /// The system bus cannot be reached at `address`.
    #[error("cannot connect to the system bus at {address}: {source}")]
    Connect {
        /// The bus address.
        address: String,
        /// zbus's error.
        #[source]
        source: zbus::Error,
    },
    /// A call to logind failed (logind is not on the bus, or refused).
    #[error("logind (org.freedesktop.login1 on {address}): {what}: {source}")]
    Call {
        /// The bus address.
        address: String,
        /// What was asked.
        what: &'static str,
        /// zbus's error.
        #[source]
        source: zbus::Error,
    },
    /// A simulated host's refusal.
    #[error("{host}: {reason}")]
    Simulated {
        /// The host.
        host: String,
        /// Why.
        reason: String,
    },
}

/// How the agent hears that its host shuts down and delays it: logind's inhibitor locks and
/// `PrepareForShutdown`, or (in the simulator) a simulated host.
pub trait HostShutdowns: Send {
    /// A delay inhibitor lock: it delays a shutdown while it lives; dropping it releases it.
    type Lock: Send;

    /// Takes a delay inhibitor lock for `shutdown`.
    fn inhibit(&self) -> impl Future<Output = Result<Self::Lock, LogindError>> + Send;

    /// The longest a delay lock holds a shutdown back (`InhibitDelayMaxUSec`).
    fn delay_max(&self) -> impl Future<Output = Result<Duration, LogindError>> + Send;

    /// Whether a shutdown is under way now (`PreparingForShutdown`).
    fn preparing(&self) -> impl Future<Output = Result<bool, LogindError>> + Send;

    /// The inhibitor locks held now, everyone's (`ListInhibitors`): whether the kubelet holds
    /// one for its graceful node shutdown. None, where the host cannot list them.
    fn inhibitors(&self) -> impl Future<Output = Result<Vec<Inhibitor>, LogindError>> + Send {
        async { Ok(Vec::new()) }
    }

    /// The next `PrepareForShutdown`: `true` a shutdown begins, `false` it was cancelled;
    /// `None` once no more can come (the bus connection ended). Cancel-safe.
    fn next(&mut self) -> impl Future<Output = Option<bool>> + Send;

    /// One phrase for the log: what and where.
    fn describe(&self) -> String;

    /// A new connection to the same logind, after this one ended (the bus was restarted).
    fn reconnect(&self) -> impl Future<Output = Result<Self, LogindError>> + Send
    where
        Self: Sized;
}

/// One inhibitor lock held on the host, as logind lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inhibitor {
    /// What it inhibits (`shutdown`, `sleep`, ... joined by `:`).
    pub what: String,
    /// Who holds it.
    pub who: String,
    /// Why.
    pub why: String,
    /// `delay` or `block`.
    pub mode: String,
    /// The process that took it.
    pub pid: u32,
}

/// No host shutdowns to hear: the agent without logind (the simulator's agents today).
pub enum NoLogind {}

impl HostShutdowns for NoLogind {
    type Lock = ();

    async fn inhibit(&self) -> Result<(), LogindError> {
        match *self {}
    }

    async fn delay_max(&self) -> Result<Duration, LogindError> {
        match *self {}
    }

    async fn preparing(&self) -> Result<bool, LogindError> {
        match *self {}
    }

    async fn next(&mut self) -> Option<bool> {
        match *self {}
    }

    fn describe(&self) -> String {
        match *self {}
    }

    async fn reconnect(&self) -> Result<NoLogind, LogindError> {
        match *self {}
    }
}

/// Connects to logind on the system bus at `address` (see [`system_bus_address`]); without a
/// bus there, says so in one line and gives `None`: the agent goes on without it.
pub async fn connect_system(node: &str, address: &str) -> Option<SystemLogind> {
    match SystemLogind::connect(address).await {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(node, address, error = %e, "no system bus: the agent goes on without a logind inhibitor, and will not ask for a drain before a shutdown it did not start");
            None
        }
    }
}

/// What the guard acts with: the agent's own Node and its counters.
pub struct OwnNode<'a> {
    /// The agent's writer of its Node.
    pub writer: &'a super::OwnNodeWriter,
    /// The agent's Node.
    pub node: &'a str,
    /// The agent's counters.
    pub metrics: &'a AgentMetrics,
}

impl OwnNode<'_> {
    /// Writes `shutdown-requested` (`Some`) or removes it (`None`): a JSON merge patch of that
    /// key alone, as the agent's other writes of its own keys.
    pub async fn write_request(&self, value: Option<String>) -> Result<(), NodeWriteError> {
        let what = if value.is_some() {
            "writing shutdown-requested"
        } else {
            "removing shutdown-requested"
        };
        let p = proto::patch(&[(proto::SHUTDOWN_REQUESTED, value)], None);
        self.writer.write(what, p).await
    }
}

/// What the agent knows when the host's shutdown begins.
pub struct AgentNow<'a> {
    /// Its Node as last seen.
    pub view: Option<&'a NodeView>,
    /// The token whose reboot the agent's reboot method is carrying out, if it is.
    pub rebooting: Option<&'a str>,
    /// `reboot.timeout`: a token older than it is not live.
    pub reboot_timeout: chrono::Duration,
}

/// What woke the guard.
#[derive(Debug, PartialEq, Eq)]
pub enum Wake {
    /// `PrepareForShutdown(start)`.
    Prepare(bool),
    /// logind can no longer be heard (the bus connection ended).
    Gone,
    /// A deadline or a retry is due.
    Timer,
}

/// A host shutdown the agent asked a drain for.
struct Pending {
    request: Request,
    /// When `PrepareForShutdown(true)` arrived.
    seen: Instant,
    /// When the lock is let go at the latest.
    release_at: Instant,
    /// The lock was let go (or there was none to hold).
    released: bool,
}

/// How long a failed write of `shutdown-requested`, or a lock that could not be taken again,
/// waits before the next try; also the first wait before reaching a lost logind again.
const RETRY: Duration = Duration::from_secs(1);
/// The longest wait between tries to take the lock again after a cancel, or to reach logind
/// again after its bus connection ended.
const RETRY_MAX: Duration = Duration::from_secs(60);

/// The wait after `last` (none yet: [`RETRY`]), doubled up to [`RETRY_MAX`].
fn backoff(last: Option<Duration>) -> Duration {
    last.map_or(RETRY, |w| (w * 2).min(RETRY_MAX))
}

/// The agent's inhibitor lock and the shutdown it holds back.
pub struct Guard<L: HostShutdowns> {
    logind: L,
    lock: Option<L::Lock>,
    delay_max: Duration,
    /// The kubelet holds a delay inhibitor for shutdown (its graceful node shutdown is on).
    kubelet: bool,
    pending: Option<Pending>,
    /// A write of `shutdown-requested` that failed (`Some(value)` or `None`: remove), tried
    /// again when `retry_at` is due.
    unwritten: Option<Option<String>>,
    /// The lock could not be taken again after a cancel: tried again when `retry_at` is due,
    /// waiting `relock_wait` (doubling up to [`RETRY_MAX`]).
    relock_wait: Option<Duration>,
    retry_at: Option<Instant>,
}

impl<L: HostShutdowns> Guard<L> {
    /// Takes the inhibitor and reads logind's delay and whether the kubelet holds a shutdown
    /// inhibitor too (the agent says what they mean for the node: [`decide::shutdown_drain`]).
    /// `None` (said in one line) when logind cannot be asked: the agent goes on without it.
    /// Also whether a shutdown is under way now.
    pub async fn start(logind: L, metrics: &AgentMetrics) -> Option<(Guard<L>, bool)> {
        let what = logind.describe();
        let lock = match logind.inhibit().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(logind = %what, error = %e, "logind cannot be asked: the agent goes on without an inhibitor, and will not ask for a drain before a shutdown it did not start");
                return None;
            }
        };
        metrics.inhibitor_held(true);
        let delay_max = match logind.delay_max().await {
            Ok(d) => d,
            Err(e) => {
                let d = Duration::from_secs(5);
                tracing::warn!(logind = %what, error = %e, assumed_secs = d.as_secs(), "cannot read logind's InhibitDelayMaxUSec; assuming logind's default");
                d
            }
        };
        let preparing = logind.preparing().await.unwrap_or_else(|e| {
            tracing::warn!(logind = %what, error = %e, "cannot read logind's PreparingForShutdown; taking it as false");
            false
        });
        let kubelet = kubelet_holds(&logind).await.unwrap_or(false);
        tracing::info!(
            logind = %what,
            delay_max_secs = delay_max.as_secs_f64(),
            release_after_secs = decide::release_after(delay_max).as_secs_f64(),
            preparing,
            kubelet_inhibitor = kubelet,
            "holding a logind delay inhibitor for shutdown",
        );
        let guard = Guard {
            logind,
            lock: Some(lock),
            delay_max,
            kubelet,
            pending: None,
            unwritten: None,
            relock_wait: None,
            retry_at: None,
        };
        Some((guard, preparing))
    }

    /// Whether the lock is held now.
    pub fn holding(&self) -> bool {
        self.lock.is_some()
    }

    /// logind's delay and whether the kubelet holds a shutdown inhibitor, as last read.
    pub fn host(&self) -> (Duration, bool) {
        (self.delay_max, self.kubelet)
    }

    /// Reads logind's delay and the kubelet's inhibitor again (logind's config reloaded, the
    /// kubelet restarted with another `shutdownGracePeriod`); what cannot be read stays as it
    /// was. Whether either changed.
    pub async fn refresh(&mut self) -> bool {
        let before = self.host();
        if let Ok(d) = self.logind.delay_max().await {
            self.delay_max = d;
        }
        if let Some(k) = kubelet_holds(&self.logind).await {
            self.kubelet = k;
        }
        before != self.host()
    }

    /// Ends the guard, its lock let go, and gives its logind back (to reach it again with
    /// [`HostShutdowns::reconnect`]).
    pub fn into_logind(self) -> L {
        self.logind
    }

    /// The next thing to act on: a signal, the end of logind, or a due timer. Cancel-safe.
    pub async fn next(&mut self) -> Wake {
        let due = self.due();
        tokio::select! {
            p = self.logind.next() => p.map_or(Wake::Gone, Wake::Prepare),
            _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => Wake::Timer,
        }
    }

    /// The earliest instant a timer is due: the deadline of a lock held for a shutdown, or a
    /// retry.
    fn due(&self) -> Option<Instant> {
        let deadline = self
            .pending
            .as_ref()
            .filter(|p| !p.released)
            .map(|p| p.release_at);
        [deadline, self.retry_at].into_iter().flatten().min()
    }

    /// Acts on `PrepareForShutdown(start)`.
    pub async fn on_prepare(&mut self, start: bool, own: &OwnNode<'_>, agent: &AgentNow<'_>) {
        if start {
            self.shutdown_begins(own, agent).await;
        } else {
            self.shutdown_cancelled(own, agent.view).await;
        }
    }

    /// A shutdown begins: rollboot's own lets the lock go at once; any other asks the
    /// controller for a drain and holds the lock until the Node says drained or the deadline.
    async fn shutdown_begins(&mut self, own: &OwnNode<'_>, agent: &AgentNow<'_>) {
        if self.pending.is_some() {
            tracing::debug!("PrepareForShutdown(true) again for the shutdown under way",);
            return;
        }
        own.metrics.shutdown_seen();
        let seen = Instant::now();
        // logind's delay as it is now: its config may have changed since the agent started,
        // and the deadline must be the one logind keeps for this shutdown.
        if let Ok(d) = self.logind.delay_max().await {
            self.delay_max = d;
        }
        if decide::own_shutdown(agent.rebooting, agent.reboot_timeout, Utc::now()) {
            tracing::info!(
                token = agent.rebooting.unwrap_or_default(),
                "the host shuts down for rollboot's own reboot; letting the inhibitor go",
            );
            self.release(Release::Ours, seen, own, None);
            return;
        }
        if decide::granted(agent.view, agent.reboot_timeout, Utc::now()) {
            tracing::info!(
                "the host reboots itself on the reboot rollboot handed it (the node is drained); letting the inhibitor go",
            );
            self.release(Release::Ours, seen, own, agent.view);
            return;
        }
        let request = Request::new(Utc::now(), agent.view, self.delay_max);
        let value = request.annotation();
        let release_in = decide::release_after(self.delay_max);
        tracing::info!(
            requested_at = %value,
            holding = self.holding(),
            release_in_secs = release_in.as_secs_f64(),
            "the host is shutting down by itself; asking the controller to drain the node (shutdown-requested)",
        );
        self.pending = Some(Pending {
            request,
            seen,
            release_at: seen + release_in,
            released: self.lock.is_none(),
        });
        self.write(own, Some(value)).await;
    }

    /// The shutdown was cancelled: the request is withdrawn from the Node (the controller
    /// uncordons), and a lock is held again for the next one.
    async fn shutdown_cancelled(&mut self, own: &OwnNode<'_>, view: Option<&NodeView>) {
        let had = self.pending.take();
        tracing::info!(
            asked_for_a_drain = had.is_some(),
            "the host's shutdown was cancelled (PrepareForShutdown(false))",
        );
        if let Some(p) = &had {
            if !p.released {
                self.release(Release::Cancelled, p.seen, own, view);
            }
        }
        if had.is_some() || view.is_some_and(|v| v.shutdown_requested) {
            self.write(own, None).await;
        }
        if self.lock.is_none() {
            self.relock(own).await;
        }
    }

    /// Acts on a new view of the Node: a drain it waits for is over.
    pub fn on_view(&mut self, view: &NodeView, own: &OwnNode<'_>) {
        let Some(p) = &self.pending else { return };
        if !p.released && decide::drained(view, &p.request) {
            let seen = p.seen;
            self.release(Release::Drained, seen, own, Some(view));
        }
    }

    /// Acts on a due timer: the deadline of the lock, a write or a lock to try again. Gives
    /// what to say in an Event when the lock was let go at its deadline with the node not
    /// drained.
    pub async fn on_timer(&mut self, own: &OwnNode<'_>, view: Option<&NodeView>) -> Option<String> {
        let now = Instant::now();
        if self.retry_at.is_some_and(|t| t <= now) {
            self.retry_at = None;
            if let Some(value) = self.unwritten.take() {
                self.write(own, value).await;
            }
            if self.relock_wait.is_some() {
                self.relock(own).await;
            }
        }
        let late = self
            .pending
            .as_ref()
            .filter(|p| !p.released && p.release_at <= now)
            .map(|p| p.seen);
        let seen = late?;
        self.release(Release::Deadline, seen, own, view);
        Some(format!(
            "the host is shutting down by itself and logind's delay for it ({:.0} s, InhibitDelayMaxUSec) is nearly spent: the agent let its inhibitor go after {:.0} s with the node not drained ({}); the host shuts down with what is left on it",
            self.delay_max.as_secs_f64(),
            seen.elapsed().as_secs_f64(),
            decide::state_words(view)
        ))
    }

    /// Lets the lock go (closes its fd) for `cause`, saying how long it was held since the
    /// shutdown began (`seen`), and at the deadline what was not done.
    fn release(
        &mut self,
        cause: Release,
        seen: Instant,
        own: &OwnNode<'_>,
        view: Option<&NodeView>,
    ) {
        if let Some(p) = self.pending.as_mut() {
            p.released = true;
        }
        let Some(lock) = self.lock.take() else {
            return;
        };
        own.metrics.inhibitor_held(false);
        own.metrics.release(cause.as_str());
        let held_secs = seen.elapsed().as_secs_f64();
        let state = decide::state_words(view);
        if cause == Release::Deadline {
            tracing::warn!(cause = cause.as_str(), held_secs, delay_max_secs = self.delay_max.as_secs_f64(), node_state = %state, "logind's delay is nearly spent and the node is not drained: letting the host shut down with what is left on it");
        } else {
            tracing::info!(cause = cause.as_str(), held_secs, node_state = %state, "letting the logind inhibitor go");
        }
        // Counted and said first: whoever sees the fd closed sees the count too.
        drop(lock);
    }

    /// Writes (or removes) `shutdown-requested`; a failure is tried again shortly.
    async fn write(&mut self, own: &OwnNode<'_>, value: Option<String>) {
        match own.write_request(value.clone()).await {
            Ok(()) => self.unwritten = None,
            Err(e) => {
                tracing::warn!(error = %e, "could not write shutdown-requested; trying again in a second");
                self.unwritten = Some(value);
                self.retry_soon(RETRY);
            }
        }
    }

    /// Takes a new lock; a failure is said once and tried again, waiting longer each time.
    async fn relock(&mut self, own: &OwnNode<'_>) {
        match self.logind.inhibit().await {
            Ok(l) => {
                self.lock = Some(l);
                own.metrics.inhibitor_held(true);
                if self.relock_wait.take().is_some() {
                    tracing::info!("holding a logind delay inhibitor again");
                } else {
                    tracing::info!("took a new logind delay inhibitor");
                }
            }
            Err(e) => {
                let wait = backoff(self.relock_wait);
                if self.relock_wait.is_none() {
                    tracing::warn!(error = %e, "could not take a new logind inhibitor; trying again");
                }
                self.relock_wait = Some(wait);
                self.retry_soon(wait);
            }
        }
    }

    fn retry_soon(&mut self, wait: Duration) {
        let t = Instant::now() + wait;
        self.retry_at = Some(self.retry_at.map_or(t, |r| r.min(t)));
    }
}

/// Whether the kubelet holds a shutdown inhibitor on `logind`'s host; `None` (said at debug
/// level) when the inhibitors cannot be listed.
async fn kubelet_holds<L: HostShutdowns>(logind: &L) -> Option<bool> {
    match logind.inhibitors().await {
        Ok(list) => Some(decide::kubelet_holds(&list)),
        Err(e) => {
            tracing::debug!(error = %e, "cannot list logind's inhibitors");
            None
        }
    }
}

/// A logind whose bus connection ended, to be reached again (a restarted system bus): tried
/// after [`RETRY`], then waiting twice as long each time, up to [`RETRY_MAX`].
pub struct Lost<L> {
    logind: L,
    at: Instant,
    wait: Duration,
    tries: u32,
}

impl<L: HostShutdowns> Lost<L> {
    /// The logind of a guard whose bus connection ended ([`Guard::into_logind`]).
    pub fn new(logind: L) -> Lost<L> {
        Lost {
            logind,
            at: Instant::now() + RETRY,
            wait: RETRY,
            tries: 0,
        }
    }

    /// One try: the guard again, holding a new lock; or `self` back, for a later try (the
    /// first failure said at warn level, the others at debug).
    pub async fn reach(mut self, metrics: &AgentMetrics) -> Result<Guard<L>, Lost<L>> {
        self.tries += 1;
        let failed = match self.logind.reconnect().await {
            Ok(l) => match Guard::start(l, metrics).await {
                Some((g, _)) => {
                    tracing::info!(tries = self.tries, "logind reached again");
                    return Ok(g);
                }
                None => "logind answered no lock".to_string(),
            },
            Err(e) => e.to_string(),
        };
        if self.tries == 1 {
            tracing::warn!(error = %failed, "logind cannot be reached again yet; trying again, waiting longer each time (up to a minute)");
        } else {
            tracing::debug!(error = %failed, tries = self.tries, "logind still out of reach");
        }
        self.wait = backoff(Some(self.wait));
        self.at = Instant::now() + self.wait;
        Err(self)
    }

    /// When to try again; never, with none lost.
    pub async fn due(lost: &Option<Lost<L>>) {
        match lost {
            Some(l) => tokio::time::sleep_until(l.at).await,
            None => std::future::pending().await,
        }
    }
}
