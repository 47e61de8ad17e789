//! A replica run from a config file, restarted with the file's new settings when it changes.
//!
//! Owns [`run_with_config_file`]: the file is watched ([`crate::reload::watch`]); a change to
//! a valid config stops the replica gracefully (releasing its Lease) and starts it again with
//! the new settings; an invalid change is logged and ignored. It must never run a replica with
//! a config that did not validate.

use std::sync::Arc;

use super::error::Error;
use super::replica::run;
use super::task::Task;
use crate::config::Config;
use crate::metrics::Metrics;

/// Runs a controller replica from a config file: when the file changes to a valid config (a
/// ConfigMap update), the replica stops gracefully (releasing its Lease) and starts again with
/// the new settings; an invalid change is logged and ignored. Returns when `shutdown` resolves.
pub async fn run_with_config_file(
    kube_config: kube::Config,
    path: std::path::PathBuf,
    config: Config,
    identity: String,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let _stop = Task(tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    }));
    let (config_tx, mut configs) = tokio::sync::watch::channel(Arc::new(config));
    let _watch = Task(tokio::spawn(crate::reload::watch(
        path,
        config_tx,
        crate::reload::CHECK,
    )));
    loop {
        let config = configs.borrow_and_update().clone();
        let mut outer = stop_rx.clone();
        let mut reload = configs.clone();
        let inner = async move {
            tokio::select! {
                _ = outer.wait_for(|s| *s) => {}
                // The watch ended: no new config will come; the replica runs on.
                Ok(()) = reload.changed() => {}
            }
        };
        run(
            kube_config.clone(),
            config,
            identity.clone(),
            metrics.clone(),
            inner,
        )
        .await?;
        // Stopped, or ended with no new config to restart with.
        if *stop_rx.borrow() || !configs.has_changed().unwrap_or(false) {
            return Ok(());
        }
        tracing::info!("config changed; restarting with it");
    }
}
