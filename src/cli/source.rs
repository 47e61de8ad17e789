//! Where the operator's commands (`status`, `plan`, `pause`, `resume`, `retry`, `request`) take
//! the controller's config: `--config FILE`, read before the cluster is asked (an invalid file
//! exits 2 wherever the cluster is); else the ConfigMap `--config-map` names (default
//! `rollboot-system/rollboot-config`, key `rollboot.yaml`, as `deploy/` installs it), read with
//! the command's own kubeconfig.
//!
//! Owns what is said on stderr when no config is had, and the exit code: 2 an invalid config
//! (the file's or the ConfigMap's, each problem with its line and column); 1 anything else (the
//! file unreadable, no cluster, the ConfigMap absent, without the key or unreadable), said in
//! one line that names both places looked at.

use std::process::ExitCode;

use rollboot::client::Target;
use rollboot::cluster_config::{self, ClusterConfigError};
use rollboot::config::check::Invalid;
use rollboot::config::{self, Config, ConfigError};
use rollboot::render::{render, Output};

use super::args::ConfigArgs;
use super::{cluster_error, one_shot_config, EXIT_INVALID_CONFIG};

impl ConfigArgs {
    /// The config, and the client config of the cluster a one-shot command identified as
    /// `component` talks to; or, once said on stderr, the exit code.
    pub async fn load(
        &self,
        target: &Target,
        component: &str,
    ) -> Result<(Config, kube::Config), ExitCode> {
        let from_file = match &self.config {
            Some(file) => Some(match config::load_file(file) {
                Ok(c) => c,
                Err(e @ ConfigError::Invalid { .. }) => {
                    eprint!(
                        "{}",
                        render(&Invalid::new(file, e.problems()), Output::Text)
                    );
                    return Err(ExitCode::from(EXIT_INVALID_CONFIG));
                }
                Err(e) => return Err(cluster_error(e)),
            }),
            None => None,
        };
        let kube_config = one_shot_config(target, component)
            .await
            .map_err(cluster_error)?;
        if let Some(c) = from_file {
            return Ok((c, kube_config));
        }
        let server = kube_config.cluster_url.to_string();
        let client = kube::Client::try_from(kube_config.clone()).map_err(|e| {
            cluster_error(format!(
                "cannot make a client for the API server {server}: {e}"
            ))
        })?;
        match cluster_config::load(&client, &server, &self.config_map).await {
            Ok(c) => Ok((c, kube_config)),
            Err(e) if e.is_absent() => Err(cluster_error(format!(
                "no config: --config not given and {e}; pass --config FILE or --config-map \
                 NAMESPACE/NAME"
            ))),
            Err(e @ ClusterConfigError::Invalid { .. }) => {
                eprintln!("{e}");
                Err(ExitCode::from(EXIT_INVALID_CONFIG))
            }
            Err(e) => Err(cluster_error(format!("{e}; or pass --config FILE"))),
        }
    }
}
