//! The agent's loop: its own Node watched, its host's shutdowns heard, its config taken in
//! place when it changes, and a check every `checkPeriod`; each event handed to the agent
//! ([`super::process::Agent`]).
//!
//! Owns what each event leads to (a new view of the Node: the host compared, a token acted on,
//! a left-over request removed, the logind guard told; a tick: the host again, an unsettled
//! look or a refusal looked at again, the sentinel checked; a config: the method, the sentinel
//! and the period rebuilt, what the agent remembers kept). It must never decide about a token
//! or write the Node itself.

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;

use super::logind::{self, HostShutdowns, NoLogind};
use super::metrics::AgentMetrics;
use super::process::Agent;
use super::shutdowns::host_shutdown_wake;
use super::{AgentError, RebootHost, Sentinel};
use crate::config::Config;
use crate::node::NodeView;

/// Runs the agent for `node` until `shutdown` resolves (or the future is dropped), without
/// logind (see [`run_with_host_shutdowns`]).
pub async fn run<R: RebootHost, S: Sentinel>(
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
pub async fn run_with_host_shutdowns<R: RebootHost, S: Sentinel, L: HostShutdowns>(
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

/// Runs the agent for `node` until `shutdown` resolves (or the future is dropped), as
/// [`run_with_host_shutdowns`], taking each new config `configs` brings (a reloaded config
/// file): the reboot method and the sentinel rebuild themselves from it, the check period
/// and the timeouts are the new ones from then on. What the agent remembers (the tokens it
/// acted on, the refusals it said, its logind inhibitor) is kept across a reload.
///
/// Everything it logs is in the span `agent{node=...}`: the simulator runs many agents in one
/// process, and a log line names its node once, in the span, not in each call.
// At error level, as the controller's node spans: a filter such as `rollboot=warn` keeps the
// span, so a warning keeps its node.
#[tracing::instrument(level = "error", name = "agent", skip_all, fields(node = %node))]
#[allow(clippy::too_many_arguments)]
pub async fn run_reloading<R: RebootHost, S: Sentinel, L: HostShutdowns>(
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
    let mut agent = Agent::new(&client, config.clone(), &node, method, metrics);
    let mut guard = agent.start_logind(host).await;
    let mut lost: Option<logind::Lost<L>> = None;
    let stream = watcher(
        Api::<Node>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={node}")),
    )
    .default_backoff()
    .applied_objects();
    futures::pin_mut!(stream);
    tokio::pin!(shutdown);
    let mut view: Option<NodeView> = None;
    let mut tick = check_period(&config);
    let mut reloading = true;
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            ev = stream.next() => {
                match ev {
                    Some(Ok(n)) => view = Some(NodeView::from_node(&n)),
                    Some(Err(e)) => { tracing::warn!(error = %e, "watching own node"); continue }
                    None => return Ok(()),
                }
                if let Some(v) = &view {
                    agent.on_view(v, guard.as_mut()).await;
                }
            }
            changed = configs.changed(), if reloading => {
                if changed.is_err() {
                    // Nobody can send a new config any more: the one in hand stays.
                    reloading = false;
                    continue;
                }
                let config = configs.borrow_and_update().clone();
                tick = check_period(&config);
                let host = guard.as_ref().map(logind::Guard::host);
                agent.reload(config, &mut sentinel, host, view.as_ref()).await;
            }
            wake = host_shutdown_wake(&mut guard) => {
                agent.on_guard_wake(&mut guard, &mut lost, wake, view.as_ref()).await;
            }
            _ = logind::Lost::due(&lost) => agent.reach_logind(&mut guard, &mut lost).await,
            _ = tick.tick() => agent.on_tick(&sentinel, guard.as_mut(), view.as_ref()).await,
        }
    }
}

/// A tick every `reboot.checkPeriod` of `c`, a late one delayed rather than bunched.
fn check_period(c: &Config) -> tokio::time::Interval {
    let mut tick = tokio::time::interval(c.reboot.check_period.to_std());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// What each event of the loop leads to, around [`Agent`].
impl<R: RebootHost> Agent<'_, R> {
    /// A new view `v` of the Node: the host compared, a token acted on, a left-over request
    /// removed, the logind guard told.
    async fn on_view<L: HostShutdowns>(
        &mut self,
        v: &NodeView,
        guard: Option<&mut logind::Guard<L>>,
    ) {
        let read = self.read_host();
        self.know_host(v, &read).await;
        self.act(v, &read).await;
        self.clear_left_over_request(v, &read).await;
        if let Some(g) = guard {
            g.on_view(v, &self.own_node());
        }
    }

    /// A new config: the reboot method and the sentinel rebuilt from it, said, and the host
    /// (`host`: logind's delay and the kubelet's inhibitor) said again against it.
    async fn reload<S: Sentinel>(
        &mut self,
        config: Arc<Config>,
        sentinel: &mut S,
        host: Option<(std::time::Duration, bool)>,
        view: Option<&NodeView>,
    ) {
        self.method.reconfigure(&config.reboot);
        sentinel.reconfigure(&config.reboot);
        self.config = config;
        self.metrics.config_reloaded();
        tracing::info!(sentinel = %sentinel.describe(), check_period = %self.config.reboot.check_period, "config reloaded: the new settings apply from now on");
        self.say_shutdown_drain(host).await;
        if let Some(v) = view {
            let read = self.read_host();
            self.know_host(v, &read).await;
        }
    }

    /// A check: logind read again, the host compared, a refusal or an unsettled look looked at
    /// again, the sentinel checked.
    async fn on_tick<S: Sentinel, L: HostShutdowns>(
        &mut self,
        sentinel: &S,
        guard: Option<&mut logind::Guard<L>>,
        view: Option<&NodeView>,
    ) {
        if let Some(g) = guard {
            if g.refresh().await {
                let host = g.host();
                self.say_shutdown_drain(Some(host)).await;
            }
        }
        let Some(v) = view else { return };
        let read = self.read_host();
        self.know_host(v, &read).await;
        // A refusal for a reason that can pass with no change to this Node (the node listed in
        // the lock again), or a look cut short by a failed request, is looked at again, while
        // the token lives.
        if self.refused.is_some() || self.unsettled {
            self.act(v, &read).await;
            self.clear_left_over_request(v, &read).await;
        }
        self.check_sentinel(sentinel, v).await;
    }
}
