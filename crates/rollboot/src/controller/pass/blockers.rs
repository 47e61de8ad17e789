//! What keeps new nodes from starting, as a pass reads it from outside the Nodes.
//!
//! Owns the reads a pass makes only when a node waits to start: the pods matching each
//! blocking selector (a limit-1 list each) and Prometheus's firing alerts; the instant a start
//! is decided at; and the blockers said once per change. The blockers themselves, and when to
//! look again while they hold, are decided purely ([`crate::controller::decide::blockers`],
//! [`crate::controller::decide::look_again`]). It must never write.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::controller::context::Ctx;
use crate::controller::decide::Blocker;

/// For each blocking pod selector, how many pods match (a limit-1 list each).
pub(super) async fn blocking_pods(ctx: &Ctx) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let api: Api<Pod> = Api::all(ctx.services.client.clone());
    for (text, sel) in ctx
        .config
        .blockers
        .pod_selectors
        .iter()
        .zip(ctx.config.blocking_pod_selectors())
    {
        let lp = ListParams::default().labels(&sel.to_string()).limit(1);
        let n = match api.list_metadata(&lp).await {
            Ok(l) => l.items.len(),
            Err(e) => {
                tracing::warn!(selector = %text, error = %e, "listing blocking pods; treating as blocked");
                1
            }
        };
        out.push((text.clone(), n));
    }
    out
}

/// `blockers.prometheus`'s firing alerts and `blockers.alertmanager`'s active, unsilenced,
/// uninhibited ones as blockers (or that either cannot be asked: nothing new starts then),
/// none when neither is configured. Asked only when something could start, so an idle cluster
/// costs them nothing.
pub(super) async fn alerts(ctx: &Ctx) -> Vec<Blocker> {
    let mut out = Vec::new();
    if let Some(source) = ctx.services.alerts.as_ref() {
        match source.check().await {
            Ok(names) if names.is_empty() => {}
            Ok(names) => out.push(Blocker::Alerts { names }),
            Err(error) => out.push(Blocker::AlertsUnknown {
                url: source.url().to_string(),
                error,
            }),
        }
    }
    if let Some((am, filter)) = ctx.services.am_alerts.as_ref() {
        match am.active_alerts(filter).await {
            Ok(names) if names.is_empty() => {}
            Ok(names) => out.push(Blocker::AlertmanagerAlerts { names }),
            Err(error) => out.push(Blocker::AlertmanagerUnknown {
                url: am.url().to_string(),
                error,
            }),
        }
    }
    out
}

/// The instant of the decision, after every request before it: a window that closed while
/// they were answered is seen closed. It is also the start recorded in the lock, so the
/// record says when the window was found open (millisecond precision, as the Node's
/// `state-since`, so the two compare exactly). Found by the chaos campaign: a start
/// decided at 39.99 s of a 40-second window was recorded at 40.000.
pub(super) fn decision_instant() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap_or_else(Utc::now)
}

/// Logs the blockers when they differ from those said `last`, and remembers them.
pub(super) fn say_changed(last: &mut Vec<String>, blockers: &[Blocker]) {
    let texts: Vec<String> = blockers.iter().map(|b| b.to_string()).collect();
    if texts != *last {
        for b in &texts {
            tracing::info!(blocker = %b, "not starting new nodes");
        }
        *last = texts;
    }
}
