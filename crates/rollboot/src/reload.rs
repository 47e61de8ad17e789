//! The config file, watched while a process runs on it: the controller restarts its replica
//! with a new config, the agent takes it in place.
//!
//! Owns [`watch`]: the file is looked at every [`CHECK`] (its modification time and size,
//! followed through the symlinks a ConfigMap volume swaps); a change to a valid config is
//! handed on, an invalid one is said and ignored. It must never hand on a config that did not
//! validate.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::config::Config;

/// How often the config file is looked at. A ConfigMap's volume takes up to a minute or so to
/// change on the node; this adds at most ten seconds to that.
pub const CHECK: Duration = Duration::from_secs(10);

/// The file's modification time and size, when it can be read.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Looks at `path` every `every` and sends each new valid config it holds on `tx`, from the
/// file as it is when called (the config in `tx` is taken to be that one). Returns once no
/// receiver is left.
pub async fn watch(path: PathBuf, tx: tokio::sync::watch::Sender<Arc<Config>>, every: Duration) {
    let mut seen = stamp(&path);
    loop {
        tokio::select! {
            _ = tx.closed() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let now = stamp(&path);
        if now == seen {
            continue;
        }
        seen = now;
        match crate::config::load_file(&path) {
            Ok(c) => {
                tracing::info!(file = %path.display(), "config changed");
                if tx.send(Arc::new(c)).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "config changed but is invalid; keeping the running one")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_valid_change_is_handed_on_and_an_invalid_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rollboot.yaml");
        std::fs::write(&path, "reboot:\n  checkPeriod: 1m\n").unwrap();
        let first = Arc::new(crate::config::load_file(&path).unwrap());
        let (tx, mut rx) = tokio::sync::watch::channel(first);
        let task = tokio::spawn(watch(path.clone(), tx, Duration::from_millis(20)));
        // Invalid: said and ignored.
        std::fs::write(&path, "reboot:\n  checkPeriod: nonsense\n").unwrap();
        let nothing = tokio::time::timeout(Duration::from_millis(300), rx.changed()).await;
        assert!(nothing.is_err(), "an invalid config was handed on");
        // Valid (another size, so the change is seen whatever the clock's grain).
        std::fs::write(&path, "reboot:\n  checkPeriod: 7s\n").unwrap();
        tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .expect("the change was not handed on")
            .unwrap();
        assert_eq!(
            rx.borrow().reboot.check_period.to_std(),
            Duration::from_secs(7)
        );
        // The last receiver gone, the watch ends.
        drop(rx);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the watch did not end")
            .unwrap();
    }
}
