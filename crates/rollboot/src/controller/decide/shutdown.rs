//! The cycles of hosts that go down by themselves: a host's own shutdown (its agent's
//! `shutdown-requested`, held by a logind inhibitor) and a FleetLock host's reboot, handed to
//! it.
//!
//! Owns which hosts shutting down start at once and how many ([`shutting_down`],
//! [`shutdown_room`]), and why such a cycle ends without a reboot (the shutdown cancelled or
//! not followed, the FleetLock slot given back), is overtaken by its host going down before
//! its drain was over, or is handed back undrained. It must never take a host that went down
//! and came back for one that still has to reboot, nor end a cycle on a guess while its host
//! may be going down.

use chrono::{DateTime, Utc};

use super::Snapshot;
use crate::config::Config;
use crate::node::{self as proto, NodeState, NodeView};

/// Why a cycle (started at `start`) before its reboot no longer has a reason for one: its
/// host's shutdown was cancelled, or its FleetLock host gave its slot back. `None` while it
/// has one. Its host shutting down again (`shutdown-requested`) is a reason, whatever came
/// before.
pub fn abandoned(n: &NodeView, start: DateTime<Utc>) -> Option<String> {
    if n.shutdown_requested {
        return None;
    }
    if n.for_shutdown() {
        // Back on a new boot, the request removed by the agent of that boot: the shutdown
        // happened ([`overtaken`]), it was not cancelled.
        if n.came_back() {
            return None;
        }
        return Some(shutdown_cancelled(n));
    }
    given_back(n, start)
}

/// Why a cycle for its host's own shutdown is at its reboot before its drain was over, if it
/// is: the host went down and is back on a new boot (its agent let it go at logind's limit,
/// or was killed with the node's pods by the kubelet's graceful node shutdown, or there was
/// no inhibitor at all).
pub fn overtaken(n: &NodeView) -> Option<String> {
    if !n.for_shutdown() || n.handed_off.is_some() || !n.came_back() {
        return None;
    }
    Some(format!(
        "its host shut down by itself before the drain was over: the node is on a new boot \
         ({} -> {}) with the pods that were left on it gone down with the host, budgets not \
         kept{}",
        proto::boot_words(
            n.boot_id_before.as_deref().unwrap_or_default(),
            n.init_start_before
        ),
        n.boot_words(),
        if kubelet_first(n) {
            " (the kubelet's graceful node shutdown is on there: it kills the pods at once, \
             without evictions)"
        } else {
            ""
        }
    ))
}

/// Whether the agent says the kubelet holds a shutdown inhibitor on the node (its graceful
/// node shutdown goes first).
fn kubelet_first(n: &NodeView) -> bool {
    n.agent_host
        .as_ref()
        .is_some_and(|h| h.shutdown_drain == proto::ShutdownDrain::Kubelet)
}

/// Why a cycle for its host's own shutdown, handed back to the host at `now`, is not drained,
/// if it is not: the kubelet's graceful node shutdown killed the node's pods without evictions
/// the moment the shutdown began (the agent says the kubelet holds a shutdown inhibitor),
/// whatever the drain then found to evict; or logind's delay ran out before the drain was over
/// (the agent lets its inhibitor go a margin before logind's limit, counted from its request:
/// the host went down with what was left, and may still be going down now). `None` for any
/// other cycle, or where the agent wrote no delay.
pub fn undrained_at_hand_off(n: &NodeView, now: DateTime<Utc>) -> Option<String> {
    if !n.for_shutdown() {
        return None;
    }
    if kubelet_first(n) {
        return Some(
            "the kubelet's graceful node shutdown is on: it killed the node's pods without \
             evictions when the shutdown began, before rollboot's drain, so the budgets were not \
             kept (set the kubelet's shutdownGracePeriod to 0s for rollboot to drain first)"
                .to_string(),
        );
    }
    let delay = n.agent_host.as_ref()?.inhibit_delay_seconds?;
    let asked = n.shutdown_requested_at?;
    let hold = crate::agent::logind::decide::release_after(std::time::Duration::from_secs(delay));
    let released = asked + chrono::TimeDelta::from_std(hold).ok()?;
    (now >= released).then(|| {
        format!(
            "logind waits at most {delay}s for the agent's inhibitor: the agent let the shutdown \
             go at {} with the drain not over, and the host went down with what was left on it \
             (raise InhibitDelayMaxSec)",
            crate::time::annotation(released)
        )
    })
}

/// Why a cycle started for a shutdown ends without a reboot: the agent removed its request
/// (the shutdown was cancelled, or the agent started again on the same boot).
pub(super) fn shutdown_cancelled(n: &NodeView) -> String {
    format!(
        "its host's shutdown was cancelled ({} removed by the agent on boot {})",
        proto::SHUTDOWN_REQUESTED,
        n.boot_id
    )
}

/// How many of [`shutting_down`]'s nodes may start now: past `maxNodes`, at most
/// `concurrency.maxShutdownDrains` in flight beyond it. Five agents writing a request at once
/// (with no shutdown behind them) had five nodes cordoned and draining with `maxNodes: 1`.
pub fn shutdown_room(s: &Snapshot<'_>, config: &Config) -> usize {
    let cap =
        config.concurrency.max_nodes as usize + config.concurrency.max_shutdown_drains as usize;
    cap.saturating_sub(s.in_flight.len())
}

/// How many nodes are out (in flight, and out of service outside the lock: hosts shutting down
/// by themselves among them), when that is more than `maxNodes`: a shutdown arrived while the
/// limit was already reached, the only way nodes out go over it. `None` within the limit.
pub fn over_max_nodes(s: &Snapshot<'_>, config: &Config) -> Option<usize> {
    let out = s.in_flight.len() + super::blockers::out_holding(s, config).count();
    (out > config.concurrency.max_nodes as usize).then_some(out)
}

/// The nodes whose host shuts down by itself (`shutdown-requested`) and that are not in
/// flight: started at once, whatever the windows, the blockers and `maxNodes` (they count in
/// it for the others), since the shutdown happens anyway, within [`shutdown_room`] (oldest
/// request first). Not a node excluded, outside `nodes.selector`, failed or being deleted, nor
/// one another actor takes out (it drains its nodes itself).
pub fn shutting_down<'a>(s: &Snapshot<'a>, config: &Config) -> Vec<&'a NodeView> {
    let mut v: Vec<&NodeView> = s
        .nodes
        .iter()
        .copied()
        .filter(|n| n.shutdown_requested && !s.in_flight.contains_key(&n.name))
        .filter(|n| !n.excluded && !n.deleting && n.state != Some(NodeState::Failed))
        // Another actor's shutdown (Karpenter's, the autoscaler's) is that actor's to drain.
        .filter(|n| super::other_maintenance(n, s).is_none())
        .filter(|n| config.node_selector().matches(&n.labels))
        .collect();
    v.sort_by(|a, b| (a.shutdown_requested_at, &a.name).cmp(&(b.shutdown_requested_at, &b.name)));
    v
}

/// Whether the node has stayed up on the boot it had before its reboot (`before`) since
/// `since`: Ready now, not tainted not-ready, on the same boot, and Ready since at or before
/// `since` (no NotReady since). Unknown when Ready came is not up: nothing ends on a guess.
pub(super) fn stayed_up(n: &NodeView, since: DateTime<Utc>, before: &str) -> bool {
    n.ready
        && !n.not_ready_taint
        && (before.is_empty() || !n.booted_since(before))
        && n.ready_since.is_some_and(|r| r <= since)
}

/// logind's delay for a host's shutdown: its agent's request says it, else its `agent-host`;
/// without either, the reboot timeout (the longest rollboot waits for any reboot).
fn shutdown_delay(n: &NodeView, config: &Config) -> chrono::TimeDelta {
    n.shutdown_delay_seconds
        .or_else(|| n.agent_host.as_ref()?.inhibit_delay_seconds)
        .and_then(|s| chrono::TimeDelta::try_seconds(i64::try_from(s).ok()?))
        .unwrap_or_else(|| config.reboot.timeout.to_chrono())
}

/// Why a shutdown cycle ends as cancelled although its agent's request is still there: no
/// shutdown followed `what` (at `at`).
pub(super) fn not_followed(n: &NodeView, what: &str, at: DateTime<Utc>, config: &Config) -> String {
    format!(
        "its host's shutdown was cancelled: the node stayed Ready on boot {} for {} after {what}          at {} ({} still there, written by the agent, but no shutdown followed)",
        n.boot_words(),
        config.reboot.ready_without_reboot_for,
        crate::time::annotation(at),
        proto::SHUTDOWN_REQUESTED
    )
}

/// Why a cycle for its host's shutdown, not handed back yet, ends as cancelled: logind's delay
/// (the agent lets the shutdown go before it ends) and [`Reboot::ready_without_reboot_for`]
/// have passed since the request, and the node stayed Ready on its boot all along. A request
/// with no shutdown behind it otherwise held its node cordoned until the reboot timeout,
/// failed it and halted the rollout.
///
/// [`Reboot::ready_without_reboot_for`]: crate::config::Reboot::ready_without_reboot_for
pub fn shutdown_not_followed(n: &NodeView, config: &Config, now: DateTime<Utc>) -> Option<String> {
    if !n.for_shutdown() || !n.shutdown_requested {
        return None;
    }
    let at = n.shutdown_requested_at?;
    let delay = shutdown_delay(n, config);
    let until = at + delay + config.reboot.ready_without_reboot_for.to_chrono();
    let before = n.boot_id_before.as_deref().unwrap_or_default();
    (now >= until && stayed_up(n, at, before)).then(|| {
        not_followed(
            n,
            &format!("logind's delay ({}s) from its request", delay.num_seconds()),
            at,
            config,
        )
    })
}

/// Why a FleetLock host's cycle ends without a reboot: its host called `steady-state` in this
/// cycle (started at `start`) before its boot ID changed.
pub(super) fn given_back(n: &NodeView, start: DateTime<Utc>) -> Option<String> {
    let f = n.fleetlock.as_ref()?;
    let at = f.returned.filter(|t| *t >= start)?;
    let unchanged = n
        .boot_id_before
        .as_deref()
        .is_none_or(|b| !n.booted_since(b));
    unchanged.then(|| {
        format!(
            "its host (FleetLock id {}) gave its slot back at {} before rebooting (steady-state on boot {})",
            f.id,
            crate::time::annotation(at),
            n.boot_id
        )
    })
}
