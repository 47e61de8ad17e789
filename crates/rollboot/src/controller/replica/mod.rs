//! One controller replica: its clients, its leader election, its caches, and, while it leads,
//! the leader's loop.
//!
//! Owns [`run`] and its parts: the clients ([`Clients`]: one without kube's transparent 429
//! retry, for evictions), the elector of the leader Lease, the watches that fill the caches
//! ([`watches`]), the shared context ([`crate::controller::context::Ctx`]: its services and its
//! cluster cache built here), and the loop that
//! leads while elected ([`lead`]) and stops acting the moment leadership is lost. Dropping a
//! replica's future stops everything it started at once, as a crash would; it must never act
//! without leading.

mod lead;
mod watches;

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;

use super::alerts::AlertSource;
use super::cluster_cache::ClusterCache;
use super::context::Ctx;
use super::decide;
use super::error::Error;
use super::observe::Observer;
use super::services::Services;
use super::task::Task;
use crate::budgets::WorkloadWatches;
use crate::config::Config;
use crate::controller::node_cache::ViewCache;
use crate::events::Recorder;
use crate::hooks::call::Firer;
use crate::lease::{Elector, Leadership, LeaseRef, Timings};
use crate::lock;
use crate::metrics::Metrics;

/// Runs one controller replica until `shutdown` resolves: leader election, the caches, and,
/// while leading, the reboot cycle. Dropping the future stops everything it started at once
/// (as a crash would); resolving `shutdown` also releases the leader Lease.
pub async fn run(
    kube_config: kube::Config,
    config: Arc<Config>,
    identity: String,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let clients = Clients::from_config(kube_config)?;
    run_with_clients(clients, config, identity, metrics, shutdown).await
}

/// A replica's two clients: one for everything, and one without kube's transparent 429 retry,
/// for evictions (an eviction refused by a budget must reach the drain).
#[derive(Clone)]
pub struct Clients {
    /// Every request but evictions.
    pub api: Client,
    /// Evictions: no retry of its own.
    pub evict: Client,
}

impl Clients {
    /// Both clients built from `kube_config` (the evictions' one with `default_retry` off).
    pub fn from_config(kube_config: kube::Config) -> Result<Clients, Error> {
        Clients::built_by(kube_config, Client::try_from)
    }

    /// Both clients, each made by `build` from its config: `kube_config` as it is, and for
    /// the evictions `kube_config` with `default_retry` off (the simulator builds clients that
    /// reach its API server without a socket).
    pub fn built_by<E: std::fmt::Display>(
        kube_config: kube::Config,
        build: impl Fn(kube::Config) -> Result<Client, E>,
    ) -> Result<Clients, Error> {
        let api = build(kube_config.clone()).map_err(|e| Error::Client(e.to_string()))?;
        let mut no_retry = kube_config;
        no_retry.default_retry = false;
        let evict = build(no_retry).map_err(|e| Error::Client(e.to_string()))?;
        Ok(Clients { api, evict })
    }
}

/// [`run`] with clients built by the caller (see [`Clients::built_by`]).
pub async fn run_with_clients(
    clients: Clients,
    config: Arc<Config>,
    identity: String,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let client = clients.api.clone();
    let leader_lease = LeaseRef::new(
        client.clone(),
        &config.leader.namespace,
        &config.leader.name,
    );
    // The FleetLock server is bound before anything else: the leader publishes its address
    // on the leader Lease with every renewal, for the other replicas to forward to.
    let fleetlock = match &config.fleetlock {
        Some(f) => {
            let listener = tokio::net::TcpListener::bind(&f.listen)
                .await
                .map_err(|e| Error::Listen {
                    what: "fleetlock.listen",
                    addr: f.listen.clone(),
                    source: e,
                })?;
            let bound = listener.local_addr().map_err(|e| Error::Listen {
                what: "fleetlock.listen",
                addr: f.listen.clone(),
                source: e,
            })?;
            metrics.set_fleetlock_addr(Some(bound));
            let pod_ip = std::env::var("POD_IP").ok();
            let url = super::fleetlock::advertised_url(bound, pod_ip.as_deref());
            tracing::info!(listen = %bound, advertised = %url, "serving FleetLock");
            Some((listener, url))
        }
        None => None,
    };
    let (mut elector, leadership) = Elector::new(
        leader_lease.clone(),
        &identity,
        Timings::from_config(&config.leader),
    );
    if let Some((_, url)) = &fleetlock {
        let advertised = super::fleetlock::Advertised {
            holder: identity.clone(),
            url: url.clone(),
        };
        elector = elector.with_annotation(
            crate::lease::FLEETLOCK_URL,
            serde_json::to_string(&advertised).expect("an address serializes"),
        );
    }
    let lease_duration = config.leader.lease_duration.to_std();
    metrics
        .readiness
        .replica_started(leadership.clone(), lease_duration);
    let (stop_tx, stop_rx) = watch::channel(false);
    let elector_done = {
        let mut stop = stop_rx.clone();
        Task(tokio::spawn(async move {
            elector
                .run(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        }))
    };
    let caches = watches::start(&client, &config, &metrics);
    let shutdown_task = {
        let stop_tx = stop_tx.clone();
        Task(tokio::spawn(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        }))
    };
    let ctx = context(clients, config, &identity, metrics, &leadership, &caches)?;
    let _fleetlock = fleetlock.map(|(listener, _)| {
        let (ctx, identity) = (ctx.clone(), identity.clone());
        Task(tokio::spawn(async move {
            if let Err(e) = super::fleetlock::serve(listener, ctx, identity, leader_lease).await {
                tracing::error!(error = %e, "serving FleetLock stopped");
            }
        }))
    });
    lead_while_elected(&ctx, leadership, stop_rx).await;
    drop(shutdown_task);
    // Let the elector release the Lease.
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let mut e = elector_done;
        let _ = (&mut e.0).await;
    })
    .await;
    Ok(())
}

/// What the leader's loop and its tasks share, over the caches the watches fill.
fn context(
    Clients {
        api: client,
        evict: evict_client,
    }: Clients,
    config: Arc<Config>,
    identity: &str,
    metrics: Arc<Metrics>,
    leadership: &Leadership,
    caches: &watches::Caches,
) -> Result<Ctx, Error> {
    let alerts = match &config.blockers.prometheus {
        Some(p) => Some(AlertSource::new(p).map_err(Error::Client)?),
        None => None,
    };
    let am_alerts = match &config.blockers.alertmanager {
        Some(a) => Some(alertmanager(
            "blockers.alertmanager",
            &a.url,
            a.token_from.as_ref(),
            &a.filter,
        )?),
        None => None,
    };
    let silencer = match &config.silences.alertmanager {
        Some(s) => Some(alertmanager(
            "silences.alertmanager",
            &s.url,
            s.token_from.as_ref(),
            &s.matchers,
        )?),
        None => None,
    };
    // A pass reads only the Nodes a decision can turn on, kept up to date as each is parsed.
    let view_cache = ViewCache::with_notable({
        let config = config.clone();
        move |v| decide::needs_a_look(v, &config)
    });
    let lock_owner = lock::lock_owner(&config);
    let services = Services {
        workloads: Arc::new(WorkloadWatches::new(client.clone())),
        alerts,
        am_alerts,
        silencer,
        observe: Arc::new(Observer::new(
            &config,
            metrics.clone(),
            identity,
            lock_owner.clone(),
        )),
        firer: Firer::new(metrics.clone()),
        events: Recorder::new(
            client.clone(),
            &config.lock.namespace,
            "rollboot.dev/controller",
            identity,
        ),
        lock: LeaseRef::new(client.clone(), &config.lock.namespace, &config.lock.name),
        client,
        evict_client,
        metrics,
    };
    let cache = ClusterCache::new(
        caches.nodes.store.clone(),
        caches.nodes.seq.clone(),
        caches.nodes.changes.clone(),
        caches.lock.record.clone(),
        view_cache,
    );
    Ok(Ctx {
        lock_owner,
        config,
        leadership: leadership.clone(),
        wake: caches.wake.clone(),
        services: Arc::new(services),
        cache: Arc::new(cache),
    })
}

/// Leads whenever elected, until `stop` says so: the leader's loop runs while leadership
/// holds and stops the moment it is lost; a replica that does not lead watches nothing for
/// gates.
async fn lead_while_elected(
    ctx: &Ctx,
    mut leadership: Leadership,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = leadership.acquired() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        tracing::info!(identity = %ctx.leadership.identity(), "leading");
        ctx.services.metrics.set_leader(true);
        tokio::select! {
            _ = lead::lead(ctx) => {}
            _ = ctx.leadership.lost() => tracing::warn!(identity = %ctx.leadership.identity(), "lost leadership; stopped acting"),
            _ = stop.wait_for(|s| *s) => { ctx.services.metrics.set_leader(false); break }
        }
        ctx.services.metrics.set_leader(false);
        // A replica that does not lead watches nothing for gates.
        ctx.services.workloads.stop_all();
        // Until the elector publishes the loss, `acquired` would return at once.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An Alertmanager client and its matchers, from the config at `key` (validated at load; the
/// token read from its Secret now).
fn alertmanager(
    key: &str,
    url: &str,
    token: Option<&crate::config::notifications::SecretRef>,
    matchers: &[String],
) -> Result<
    (
        crate::silences::client::Alertmanager,
        Vec<crate::silences::Matcher>,
    ),
    Error,
> {
    let token = match token {
        Some(r) => Some(
            crate::notify::read_secret(r)
                .map_err(|e| Error::Client(format!("{key}.tokenFrom: {e}")))?,
        ),
        None => None,
    };
    let am = crate::silences::client::Alertmanager::new(url, token, &format!("{key}.url"))
        .map_err(Error::Client)?;
    let matchers = matchers
        .iter()
        .map(|m| crate::silences::Matcher::parse(m))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Client(format!("{key}: {e}")))?;
    Ok((am, matchers))
}
