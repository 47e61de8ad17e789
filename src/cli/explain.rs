//! `rollboot explain NODE`: reads the cluster, prints why the node is held (or that nothing
//! holds it) and when it would start; exit 0 eligible or in flight, 3 held, 1 no such node or a
//! cluster error, 2 an invalid config.

use std::process::ExitCode;

use chrono::Utc;
use rollboot::client::Target;

use super::{cluster_error, current_thread_runtime, print, Output};

/// Exit code of `rollboot explain` when something holds the node.
pub const EXIT_HELD: u8 = 3;

/// Reads the cluster with `target` and explains `node` under the config `config` names (a file,
/// or the cluster's ConfigMap).
pub fn explain(
    node: &str,
    config: &super::ConfigArgs,
    target: &Target,
    output: Output,
) -> anyhow::Result<ExitCode> {
    current_thread_runtime()?.block_on(async {
        let (config, kube_config) = match config.load(target, "explain").await {
            Ok(c) => c,
            Err(code) => return Ok(code),
        };
        let gathered = match rollboot::explain::read::fetch(kube_config, &config).await {
            Ok(g) => g,
            Err(e) => return Ok(cluster_error(e)),
        };
        // Whole seconds, as `rollboot plan`: its prediction is the `startsAt` said.
        let now = chrono::SubsecRound::trunc_subsecs(Utc::now(), 0);
        let report = match rollboot::explain::explain(&gathered, &config, node, now) {
            Ok(r) => r,
            Err(e) => return Ok(cluster_error(e)),
        };
        print(&report, output)?;
        Ok(if report.held() {
            ExitCode::from(EXIT_HELD)
        } else {
            ExitCode::SUCCESS
        })
    })
}
