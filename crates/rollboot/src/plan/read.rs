//! The cluster read of `rollboot plan`: the Leases and Nodes as `rollboot status` reads them
//! ([`crate::status::fetch_with`]), then every Pod, PodDisruptionBudget and DaemonSet (metadata
//! only), each a paged list; and, with `blockers.prometheus`, the alerts the controller's own
//! query finds ([`crate::controller::alerts`]).
//!
//! Owns only I/O, and only gets and lists: it must never write to the cluster, and decides
//! nothing (that is [`super::build`]).

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;

use super::Cluster;
use crate::config::Config;
use crate::status::FetchError;

/// Items per page of each list.
const PAGE: u32 = 500;

pub async fn list_all<K>(api: &Api<K>, server: &str, object: &str) -> Result<Vec<K>, FetchError>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug,
{
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(FetchError::reading(server, object))?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => params = params.continue_token(&c),
            None => return Ok(out),
        }
    }
}

/// Reads what a plan needs, with gets and lists only; Prometheus at `prometheus_url` when
/// given, else at the config's URL.
pub async fn fetch(
    kube_config: kube::Config,
    config: &Config,
    prometheus_url: Option<&str>,
) -> Result<Cluster, FetchError> {
    let server = kube_config.cluster_url.to_string();
    let client =
        kube::Client::try_from(kube_config).map_err(FetchError::reading(&server, "a client"))?;
    let snapshot = crate::status::fetch_with(&client, &server, config).await?;
    let pods = list_all(&Api::<Pod>::all(client.clone()), &server, "the Pods").await?;
    let budgets = list_all(
        &Api::<PodDisruptionBudget>::all(client.clone()),
        &server,
        "the PodDisruptionBudgets",
    )
    .await?;
    let api: Api<DaemonSet> = Api::all(client.clone());
    let mut daemon_sets = std::collections::BTreeSet::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api
            .list_metadata(&params)
            .await
            .map_err(FetchError::reading(&server, "the DaemonSets"))?;
        daemon_sets.extend(page.items.into_iter().map(|d| {
            (
                d.metadata.namespace.unwrap_or_default(),
                d.metadata.name.unwrap_or_default(),
            )
        }));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => params = params.continue_token(&c),
            None => break,
        }
    }
    let alerts = match &config.blockers.prometheus {
        Some(p) => {
            let mut p = p.clone();
            if let Some(url) = prometheus_url {
                p.url = url.to_string();
            }
            let answer = match crate::controller::alerts::AlertSource::new(&p) {
                Ok(source) => source.check().await,
                Err(e) => Err(e),
            };
            Some((p.url, answer))
        }
        None => None,
    };
    let claims = claims(&client, &server).await?;
    let mut namespaces = std::collections::BTreeMap::new();
    if config.drain.order.iter().any(|r| r.reads_namespaces()) {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        for n in list_all(&api, &server, "the Namespaces").await? {
            namespaces.insert(
                n.metadata.name.unwrap_or_default(),
                n.metadata.labels.unwrap_or_default(),
            );
        }
    }
    Ok(Cluster {
        lock: snapshot.lock,
        nodes: snapshot.nodes,
        pods,
        budgets,
        daemon_sets,
        alerts,
        claims,
        namespaces,
    })
}

/// Each bound claim and what a drain would make of its volume: the PersistentVolumeClaims,
/// PersistentVolumes and CSIDrivers, each a paged list. A server that serves none of them
/// (404) has no volumes to wait for.
async fn claims(
    client: &kube::Client,
    server: &str,
) -> Result<
    std::collections::BTreeMap<(String, String), Result<String, crate::drain::volumes::NotWaited>>,
    FetchError,
> {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::CSIDriver;
    use std::collections::BTreeMap;
    fn absent_is_empty<T>(r: Result<Vec<T>, FetchError>) -> Result<Vec<T>, FetchError> {
        match r {
            Err(e) if e.is_not_found() => Ok(Vec::new()),
            r => r,
        }
    }
    let claims: Vec<PersistentVolumeClaim> = absent_is_empty(
        list_all(
            &Api::all(client.clone()),
            server,
            "the PersistentVolumeClaims",
        )
        .await,
    )?;
    if claims.is_empty() {
        return Ok(BTreeMap::new());
    }
    let volumes: BTreeMap<String, PersistentVolume> = absent_is_empty(
        list_all::<PersistentVolume>(&Api::all(client.clone()), server, "the PersistentVolumes")
            .await,
    )?
    .into_iter()
    .map(|v: PersistentVolume| (v.metadata.name.clone().unwrap_or_default(), v))
    .collect();
    let drivers: BTreeMap<String, bool> = absent_is_empty(
        list_all::<CSIDriver>(&Api::all(client.clone()), server, "the CSIDrivers").await,
    )?
    .into_iter()
    .map(|d: CSIDriver| {
        (
            d.metadata.name.unwrap_or_default(),
            d.spec.attach_required.unwrap_or(true),
        )
    })
    .collect();
    Ok(claims
        .into_iter()
        .filter_map(|c| {
            let bound = c.spec.as_ref()?.volume_name.clone()?;
            let key = (c.metadata.namespace?, c.metadata.name?);
            let waited = match volumes.get(&bound) {
                None => Err(crate::drain::volumes::NotWaited::Unbound),
                Some(pv) => {
                    let driver = pv
                        .spec
                        .as_ref()
                        .and_then(|s| s.csi.as_ref())
                        .map(|c| c.driver.as_str());
                    let attach = driver.and_then(|d| drivers.get(d).copied());
                    crate::drain::volumes::Volume::of_pv(pv, attach, "").map(|v| v.pv)
                }
            };
            Some((key, waited))
        })
        .collect())
}
