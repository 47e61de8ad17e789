//! What the leader says once, not on every pass: malformed annotations, and who holds the lock.
//!
//! Owns the memory of what was said ([`Warned`], the last foreign holder) and the saying: a
//! log line and an Event for each malformed rollboot annotation while it lasts, and for each
//! change of the lock's foreign holder. It must never write anything but Events.

use std::collections::{HashMap, HashSet};

use crate::controller::context::Ctx;
use crate::controller::decide;
use crate::lock::LockRecord;
use crate::node::NodeView;

/// The malformed annotations already warned about, as (node, key, value): each is said once
/// (a log line and an Event) while it lasts, not on every pass. And the nodes found with none,
/// by the resourceVersion they were read at: a pass reads every flagged node, and reading a
/// health gate's or a hook record's JSON again for each of thousands of unchanged nodes was a
/// cost per pass in the rollout's size (issue 14).
#[derive(Default)]
pub(super) struct Warned {
    said: HashSet<(String, &'static str, String)>,
    clean: HashMap<String, String>,
}

/// Logs and records a warning Event for each malformed rollboot annotation not yet warned
/// about, and forgets those that are gone (so one that comes back is said again).
pub(super) async fn warn_malformed(
    ctx: &Ctx,
    views: &[&NodeView],
    record: &LockRecord,
    warned: &mut Warned,
) {
    let mut said = HashSet::new();
    for v in views {
        let rv = &v.resource_version;
        if !rv.is_empty() && warned.clean.get(&v.name) == Some(rv) {
            continue;
        }
        // What is said depends on the node's lock entry too, but a node's entry does not change
        // without a write to its Node (a start cordons it): the version alone dates the memo.
        let warnings = decide::annotation_warnings(v, record.entries.get(&v.name));
        if warnings.is_empty() {
            if !rv.is_empty() {
                warned.clean.insert(v.name.clone(), rv.clone());
            }
            continue;
        }
        warned.clean.remove(&v.name);
        for w in warnings {
            let k = (v.name.clone(), w.key, w.value.clone());
            if !warned.said.contains(&k) {
                let span = tracing::error_span!("notice", node = v.name.as_str());
                span.in_scope(|| tracing::warn!(key = w.key, value = %w.value, "{}", w.note));
                ctx.services
                    .events
                    .publish_action(
                        &v.name,
                        true,
                        "MalformedAnnotation",
                        &format!("Read {}", w.key),
                        w.note,
                    )
                    .await;
            }
            said.insert(k);
        }
    }
    warned.said = said;
    // The nodes no longer read (a flag gone) are forgotten, once they are many.
    if warned.clean.len() > 2 * views.len() + 64 {
        let read: HashSet<&str> = views.iter().map(|v| v.name.as_str()).collect();
        warned.clean.retain(|name, _| read.contains(name.as_str()));
    }
}

/// When the lock's foreign holder changes, says so once: a log line, and an Event on the lock
/// Lease naming the new holder (not once per pass).
pub(super) fn report_holder(ctx: &Ctx, last: &mut Option<String>) {
    let (holder, paused) = {
        let r = ctx.cache.lock_record.lock().expect("lock cache");
        (
            r.foreign_holder(&ctx.lock_owner).map(str::to_string),
            r.pause.is_some(),
        )
    };
    if holder == *last {
        return;
    }
    match &holder {
        Some(h) => {
            tracing::warn!(holder = %h, paused, lock = %ctx.config.lock.name, "the maintenance lock is held by another holder; nothing new starts");
            let in_flight = if paused {
                "the nodes in flight finish their cycle"
            } else {
                "the nodes in flight wait"
            };
            let note = format!(
                "The maintenance lock {}/{} is held by `{h}`; rollboot starts no new node until it is released ({in_flight})",
                ctx.config.lock.namespace, ctx.config.lock.name
            );
            ctx.services
                .events
                .publish_lease(&ctx.config.lock.name, true, "LockHeld", note);
        }
        None => {
            if let Some(prev) = last {
                tracing::info!(previous = %prev, lock = %ctx.config.lock.name, "the maintenance lock is no longer held by another holder");
                let note = format!("The maintenance lock is no longer held by `{prev}`");
                ctx.services.events.publish_lease(
                    &ctx.config.lock.name,
                    false,
                    "LockReleased",
                    note,
                );
            }
        }
    }
    *last = holder;
}
