//! The cluster read of `rollboot explain`: what `rollboot plan` reads ([`crate::plan::read`]:
//! the Leases, Nodes, Pods, budgets, Prometheus's alerts), and with `blockers.alertmanager`
//! Alertmanager's active alerts, as the controller asks it.
//!
//! Owns only I/O, and only gets and lists: it must never write to the cluster, and decides
//! nothing (that is [`super::explain`]).

use super::Gathered;
use crate::config::Config;
use crate::status::FetchError;

/// Reads what an explanation needs, with gets and lists only.
pub async fn fetch(kube_config: kube::Config, config: &Config) -> Result<Gathered, FetchError> {
    let cluster = crate::plan::read::fetch(kube_config, config, None).await?;
    let alertmanager = match &config.blockers.alertmanager {
        Some(a) => Some((a.url.clone(), alertmanager(a).await)),
        None => None,
    };
    Ok(Gathered {
        cluster,
        alertmanager,
    })
}

/// The active alerts `blockers.alertmanager` selects, as the controller asks for them; why it
/// could not be asked (its token, its URL, its answer).
async fn alertmanager(a: &crate::config::AlertmanagerBlocker) -> Result<Vec<String>, String> {
    let token = match &a.token_from {
        Some(r) => Some(
            crate::notify::read_secret(r)
                .map_err(|e| format!("blockers.alertmanager.tokenFrom: {e}"))?,
        ),
        None => None,
    };
    let am =
        crate::silences::client::Alertmanager::new(&a.url, token, "blockers.alertmanager.url")?;
    let filter = a
        .filter
        .iter()
        .map(|m| crate::silences::Matcher::parse(m))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("blockers.alertmanager.filter: {e}"))?;
    am.active_alerts(&filter).await
}
