//! The leader's loop, for as long as this replica leads.
//!
//! Owns what a new leader does before it acts (adopt the lock with a write of its own, so a
//! late lock write of a paused predecessor is refused; read the Nodes once after the lock, so
//! the cache does not lag behind what the lock says) and then the loop: a pass on every change
//! (the watches and the steps wake it), or at the deadline the pass returned, or at the
//! safety-net resync. It must never act before the lock is adopted, and it returns as soon as
//! leadership is found lost.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::runtime::reflector;

use crate::controller::cluster_cache::rv;
use crate::controller::context::Ctx;
use crate::controller::error::Error;
use crate::controller::pass::Leading;
use crate::lock::{self, LockError};
use crate::node as proto;

/// Safety-net resync interval.
const RESYNC: Duration = Duration::from_secs(300);

/// The leader's loop: decide and act on every change, until leadership is lost.
pub(super) async fn lead(ctx: &Ctx) {
    let _ = ctx.cache.nodes.wait_until_ready().await;
    if !adopt_lock(ctx).await {
        return;
    }
    catch_up_nodes(ctx).await;
    let mut leading = Leading::default();
    loop {
        let wake = ctx.wake.notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        leading.before_pass(ctx);
        let next = match leading.pass(ctx).await {
            Ok(next) => next,
            Err(Error::NotLeader(_)) => return,
            Err(e) => {
                ctx.services.metrics.error(e.metric_label());
                tracing::warn!(error = %e, "reconcile failed; retrying");
                Some(Utc::now() + chrono::Duration::seconds(2))
            }
        };
        tokio::select! {
            _ = &mut wake => {}
            _ = tokio::time::sleep(until(next)) => {}
        }
    }
}

/// How long to sleep before a pass due at `next` (`None`: only on the next change), at most
/// until the safety-net resync.
fn until(next: Option<DateTime<Utc>>) -> Duration {
    match next {
        None => RESYNC,
        Some(t) => (t - Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO)
            .min(RESYNC),
    }
}

/// Starts from a fresh read of the lock (the record of what to resume), and adopts it: a write
/// that moves its resourceVersion on, so a late lock write a paused predecessor still holds is
/// refused (see [`lock::adopt`]). Nothing is acted on before that write. `false`: leadership
/// was lost meanwhile.
async fn adopt_lock(ctx: &Ctx) -> bool {
    loop {
        let adopted = match lock::read(&ctx.services.lock).await {
            Ok(r) => {
                let identity = ctx.leadership.identity().to_string();
                lock::adopt(
                    &ctx.services.lock,
                    &ctx.lock_owner,
                    r,
                    &identity,
                    Utc::now(),
                    &|| ctx.leadership.ensure(),
                )
                .await
            }
            Err(e) => Err(e.into()),
        };
        match adopted {
            Ok(r) => {
                *ctx.cache.lock_record.lock().expect("lock cache") = r;
                return true;
            }
            // Deleted since it was read: read again (the first pass then finds the nodes in
            // flight from the Nodes).
            Err(LockError::Gone { .. }) => {}
            Err(LockError::NotLeader(_)) => return false,
            Err(e) => {
                tracing::warn!(error = %e, "adopting the maintenance lock; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// The Node cache may lag behind the lock just read (a predecessor may have written a node's
/// final state and then freed its slot): reads the Nodes once, after the lock. In pages,
/// keeping only what is newer than the cache: a single list of every Node (with images and
/// managedFields) and a second copy of the cache would double the memory.
async fn catch_up_nodes(ctx: &Ctx) {
    let api = Api::<Node>::all(ctx.services.client.clone());
    let mut page = ListParams::default().limit(500);
    let keep = ctx.config.hooks.gate_keys();
    loop {
        match api.list(&page).await {
            Ok(list) => {
                let mut written = ctx.cache.written.lock().expect("written cache");
                for n in list.items {
                    let name = n.metadata.name.clone().unwrap_or_default();
                    let cached = ctx
                        .cache
                        .nodes
                        .get(&reflector::ObjectRef::new(&name))
                        .map(|c| rv(&c))
                        .unwrap_or(0);
                    if rv(&n) > cached && written.get(&name).is_none_or(|w| rv(w) < rv(&n)) {
                        written.insert(name, proto::trim_keeping(n, &keep));
                    }
                }
                match list.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(c) => page = page.continue_token(&c),
                    None => break,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "listing nodes");
                break;
            }
        }
    }
}
