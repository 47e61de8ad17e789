//! A replica run from a config file, restarted with the file's new settings when it changes.
//!
//! Owns [`run_with_config_file`]: the file is checked every [`CONFIG_CHECK`] (modification time
//! and size); a change to a valid config stops the replica gracefully (releasing its Lease) and
//! starts it again with the new settings; an invalid change is logged and ignored. It must
//! never run a replica with a config that did not validate.

use std::sync::Arc;
use std::time::Duration;

use super::error::Error;
use super::replica::run;
use super::task::Task;
use crate::config::Config;
use crate::metrics::Metrics;

/// How often the config file is checked for changes.
const CONFIG_CHECK: Duration = Duration::from_secs(10);

/// The file's modification time and size, when it can be read.
fn file_stamp(path: &std::path::Path) -> Option<(std::time::SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

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
    let mut config = Arc::new(config);
    let mut stamp = file_stamp(&path);
    loop {
        let (reload_tx, reload_rx) = tokio::sync::oneshot::channel::<()>();
        let mut outer = stop_rx.clone();
        let inner = async move {
            tokio::select! {
                _ = outer.wait_for(|s| *s) => {}
                _ = reload_rx => {}
            }
        };
        let replica = run(
            kube_config.clone(),
            config.clone(),
            identity.clone(),
            metrics.clone(),
            inner,
        );
        tokio::pin!(replica);
        let mut reload_tx = Some(reload_tx);
        let mut next = None;
        loop {
            tokio::select! {
                r = &mut replica => { r?; break }
                _ = tokio::time::sleep(CONFIG_CHECK), if reload_tx.is_some() => {
                    let now = file_stamp(&path);
                    if now == stamp {
                        continue;
                    }
                    stamp = now;
                    match crate::config::load_file(&path) {
                        Ok(c) => {
                            tracing::info!(file = %path.display(), "config changed; restarting with it");
                            next = Some(c);
                            if let Some(t) = reload_tx.take() {
                                let _ = t.send(());
                            }
                        }
                        Err(e) => tracing::error!(file = %path.display(), error = %e, "config changed but is invalid; keeping the running one"),
                    }
                }
            }
        }
        match next {
            Some(c) if !*stop_rx.borrow() => config = Arc::new(c),
            _ => return Ok(()),
        }
    }
}
