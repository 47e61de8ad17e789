//! The agent's decisions about a host that shuts down, pure: whose shutdown it is, when the
//! inhibitor is let go (the Node says drained, or logind's delay is nearly spent), and whether a
//! `shutdown-requested` found on the Node at start is left over.
//!
//! Owns the release rule and its margin, the causes of a release, and the test of "drained"
//! that the controller's writes are read by. It must never do I/O or read a clock: the runtime
//! ([`super::Guard`]) passes `now` and the views in.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::node::{NodeState, NodeView, ShutdownDrain, Token};

/// The least time kept between the release and logind's limit: the release, the close of
/// the fd and logind's own reaction must land before the limit.
pub const MIN_MARGIN: Duration = Duration::from_secs(2);

/// Why the agent let its inhibitor go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Release {
    /// The Node says drained: `rebooting` (the controller hands the host back) or `failed`.
    Drained,
    /// logind's delay was nearly spent before the Node said drained.
    Deadline,
    /// The shutdown is rollboot's own reboot, or one it handed the host: nothing to drain.
    Ours,
    /// The shutdown was cancelled (`PrepareForShutdown(false)`) while the lock was held: a new
    /// one is taken at once.
    Cancelled,
}

impl Release {
    /// The cause as a metric label and log field.
    pub fn as_str(self) -> &'static str {
        match self {
            Release::Drained => "drained",
            Release::Deadline => "deadline",
            Release::Ours => "ours",
            Release::Cancelled => "cancelled",
        }
    }
}

/// How long after `PrepareForShutdown(true)` the agent lets its inhibitor go at the latest:
/// logind's `InhibitDelayMaxUSec` less a margin, the larger of [`MIN_MARGIN`] and a tenth of
/// it (none left: at once).
pub fn release_after(delay_max: Duration) -> Duration {
    delay_max.saturating_sub(MIN_MARGIN.max(delay_max / 10))
}

/// The shortest `InhibitDelayMaxSec`, in whole minutes, whose hold ([`release_after`]) covers
/// a whole drain of `drain_timeout`.
pub fn delay_needed(drain_timeout: Duration) -> Duration {
    let mut minutes = drain_timeout.as_secs().div_ceil(60).max(1);
    while release_after(Duration::from_secs(minutes * 60)) < drain_timeout {
        minutes += 1;
    }
    Duration::from_secs(minutes * 60)
}

/// The warning to say when logind's delay cannot hold a whole drain (the agent lets its
/// inhibitor go [`release_after`] it, before `drain.timeout`), naming the value that would;
/// `None` when it can.
pub fn delay_warning(delay_max: Duration, drain_timeout: Duration) -> Option<String> {
    (release_after(delay_max) < drain_timeout).then(|| {
        let needed = delay_needed(drain_timeout);
        format!(
            "logind delays a shutdown by at most {}s (InhibitDelayMaxUSec) and the agent lets \
             its inhibitor go {}s after the shutdown begins, before drain.timeout ({}s): a \
             drain before an unplanned shutdown may be cut short; set InhibitDelayMaxSec={}min \
             (e.g. in /etc/systemd/logind.conf.d/rollboot.conf, then restart systemd-logind), \
             or lower drain.timeout",
            delay_max.as_secs_f64(),
            release_after(delay_max).as_secs_f64(),
            drain_timeout.as_secs_f64(),
            needed.as_secs() / 60
        )
    })
}

/// Whether the kubelet holds a delay inhibitor for shutdown among `inhibitors`: its graceful
/// node shutdown is on (`shutdownGracePeriod` above 0), and it will kill the node's pods,
/// without evictions, the moment a shutdown begins.
pub fn kubelet_holds(inhibitors: &[super::Inhibitor]) -> bool {
    inhibitors.iter().any(|i| {
        i.who.to_ascii_lowercase().contains("kubelet")
            && i.what.split(':').any(|w| w == "shutdown")
            && i.mode == "delay"
    })
}

/// How a shutdown nobody planned would go on the node: `logind` is logind's delay and whether
/// the kubelet holds a shutdown inhibitor, `None` without logind.
pub fn shutdown_drain(logind: Option<(Duration, bool)>, drain_timeout: Duration) -> ShutdownDrain {
    match logind {
        None => ShutdownDrain::NoLogind,
        Some((_, true)) => ShutdownDrain::Kubelet,
        Some((delay, false)) if delay_warning(delay, drain_timeout).is_some() => {
            ShutdownDrain::ShortDelay
        }
        Some(_) => ShutdownDrain::Ready,
    }
}

/// Whether a shutdown that begins now is rollboot's own: the agent is running its reboot
/// method for `rebooting`, a token it acknowledged, and the token is still live (younger than
/// `reboot_timeout`). A token it took long ago, whose reboot never came, does not make a later
/// shutdown its own.
pub fn own_shutdown(
    rebooting: Option<&str>,
    reboot_timeout: chrono::Duration,
    now: DateTime<Utc>,
) -> bool {
    rebooting
        .and_then(Token::parse)
        .is_some_and(|t| now - t.issued <= reboot_timeout)
}

/// Whether a shutdown that begins now is a reboot rollboot already granted the host: its Node
/// is `rebooting` with the reboot handed to the host (`handed-off`, no token) within
/// `reboot_timeout` of `now`, a FleetLock host rebooting itself on its 200, or a host whose own
/// shutdown rollboot drained. The node is drained: holding the shutdown would only delay the
/// reboot rollboot said yes to (by logind's whole delay).
pub fn granted(
    view: Option<&NodeView>,
    reboot_timeout: chrono::Duration,
    now: DateTime<Utc>,
) -> bool {
    view.is_some_and(|v| {
        v.state == Some(NodeState::Rebooting)
            && v.handed_off_at().is_some_and(|t| now - t <= reboot_timeout)
    })
}

/// The agent's request for a drain, as written on its Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The instant written in `shutdown-requested` (milliseconds, as the annotation has it).
    pub at: DateTime<Utc>,
    /// The Node's `state` and `state-since` when the request was written, when the agent had
    /// seen its Node: a later change to either is a write made since.
    pub before: Option<(Option<NodeState>, Option<DateTime<Utc>>)>,
    /// logind's delay the agent holds the shutdown for: in the request, so that the controller
    /// knows when a shutdown that does not follow it will not (its cycle then ends cancelled).
    pub delay: std::time::Duration,
}

impl Request {
    /// The request made at `now`, on a Node last seen as `view`, with logind's `delay`.
    pub fn new(now: DateTime<Utc>, view: Option<&NodeView>, delay: std::time::Duration) -> Request {
        let text = crate::time::annotation(now);
        Request {
            at: crate::time::parse_annotation(&text).unwrap_or(now),
            before: view.map(|v| (v.state, v.state_since)),
            delay,
        }
    }

    /// The annotation's value (`{"at", "delaySeconds"}`, see [`crate::node::ShutdownRequest`]).
    pub fn annotation(&self) -> String {
        crate::node::ShutdownRequest {
            at: Some(self.at),
            delay_seconds: Some(self.delay.as_secs()),
        }
        .annotation()
    }
}

/// Whether the Node says the drain asked by `request` is over: `state` is `rebooting` (the
/// controller drained it and hands the host back) or `failed` (the drain failed: nothing more
/// will be done), written at or after the request (`state-since`), or written since the
/// request was made (the state or its instant changed: a controller whose clock lags the
/// host's still counts). A `done`, or a `rebooting` or `failed` from an earlier cycle, does
/// not count.
pub fn drained(view: &NodeView, request: &Request) -> bool {
    if !matches!(view.state, Some(NodeState::Rebooting | NodeState::Failed)) {
        return false;
    }
    let since_request = view.state_since.is_some_and(|s| s >= request.at);
    let changed = request
        .before
        .is_some_and(|b| b != (view.state, view.state_since));
    since_request || changed
}

/// Whether a `shutdown-requested` found on the Node when the agent starts is left over, to be
/// removed: the host is on the boot the Node reports (the shutdown was cancelled while no agent
/// ran, or this is the host's new boot and its kubelet has said so), and logind is not shutting
/// the host down now. While the Node still reports the boot before (the kubelet has not said
/// so yet) it is not decided: the controller tells a cancel from a reboot by the boot ID.
pub fn left_over(view: &NodeView, host_boot: Option<&str>, preparing: bool) -> bool {
    view.shutdown_requested
        && !preparing
        && !view.boot_id.is_empty()
        && host_boot.is_some_and(|b| b.eq_ignore_ascii_case(&view.boot_id))
}

/// The Node's state in words, for the log line of a release at the deadline.
pub fn state_words(view: Option<&NodeView>) -> String {
    let Some(v) = view else {
        return "not seen yet".into();
    };
    let state = v
        .state
        .map_or("none".to_string(), |s| s.as_str().to_string());
    let since = v.state_since.map_or(String::new(), |s| {
        format!(" since {}", crate::time::annotation(s))
    });
    let cordon = if v.unschedulable {
        "cordoned"
    } else {
        "not cordoned"
    };
    format!("state {state}{since}, {cordon}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::fixtures::node;
    use chrono::TimeZone;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_790_000_000 + s, 0).unwrap()
    }

    fn view(state: Option<NodeState>, since: Option<DateTime<Utc>>) -> NodeView {
        NodeView {
            state,
            state_since: since,
            boot_id: "boot-1".into(),
            ..NodeView::from_node(&node("n1", &[]))
        }
    }

    #[test]
    fn the_inhibitor_is_let_go_a_margin_before_loginds_limit() {
        let s = Duration::from_secs;
        // logind's default 5 s: 2 s kept.
        assert_eq!(release_after(s(5)), s(3));
        // 5 min: a tenth kept.
        assert_eq!(release_after(s(300)), s(270));
        // 20 s: the two margins meet.
        assert_eq!(release_after(s(20)), s(18));
        // Less than the margin: at once.
        assert_eq!(release_after(Duration::from_millis(1500)), Duration::ZERO);
        assert_eq!(release_after(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn a_delay_that_cannot_hold_the_drain_is_said_naming_a_value_that_can() {
        let s = Duration::from_secs;
        let w = delay_warning(s(5), s(900)).unwrap();
        assert!(
            w.contains("InhibitDelayMaxSec=17min") && w.contains("5s") && w.contains("900s"),
            "{w}"
        );
        // 5 min against a 15 min drain: the value it names is not the one it found.
        let w = delay_warning(s(300), s(900)).unwrap();
        assert!(w.contains("300s") && w.contains("=17min"), "{w}");
        // The value it names silences it; the drain timeout itself does not (the inhibitor
        // goes a tenth before logind's limit).
        assert_eq!(delay_needed(s(900)), s(17 * 60));
        assert_eq!(delay_warning(s(17 * 60), s(900)), None);
        assert!(delay_warning(s(900), s(900)).is_some());
        assert_eq!(delay_warning(s(1800), s(900)), None);
        // Short drains: a whole minute at least.
        assert_eq!(delay_needed(s(20)), s(60));
        assert_eq!(delay_warning(s(60), s(20)), None);
    }

    #[test]
    fn the_kubelets_shutdown_inhibitor_is_told_from_others() {
        let lock = |who: &str, what: &str, mode: &str| super::super::Inhibitor {
            what: what.into(),
            who: who.into(),
            why: "Kubelet needs time to handle node shutdown".into(),
            mode: mode.into(),
            pid: 42,
        };
        assert!(kubelet_holds(&[
            lock("rollboot", "shutdown", "delay"),
            lock("kubelet", "shutdown", "delay"),
        ]));
        assert!(kubelet_holds(&[lock("Kubelet", "sleep:shutdown", "delay")]));
        assert!(!kubelet_holds(&[lock("rollboot", "shutdown", "delay")]));
        assert!(!kubelet_holds(&[lock("kubelet", "sleep", "delay")]));
        assert!(!kubelet_holds(&[lock("kubelet", "shutdown", "block")]));
        assert!(!kubelet_holds(&[]));
    }

    #[test]
    fn how_an_unplanned_shutdown_would_go_is_read_from_logind_and_the_kubelet() {
        let s = Duration::from_secs;
        assert_eq!(shutdown_drain(None, s(900)), ShutdownDrain::NoLogind);
        assert_eq!(
            shutdown_drain(Some((s(3600), true)), s(900)),
            ShutdownDrain::Kubelet
        );
        assert_eq!(
            shutdown_drain(Some((s(300), false)), s(900)),
            ShutdownDrain::ShortDelay
        );
        assert_eq!(
            shutdown_drain(Some((s(1200), false)), s(900)),
            ShutdownDrain::Ready
        );
    }

    #[test]
    fn a_shutdown_is_ours_only_while_the_agent_runs_its_reboot_for_a_live_token() {
        let now = at(0);
        let timeout = chrono::Duration::minutes(15);
        let fresh = Token::new(now - chrono::Duration::seconds(3), 1).text;
        assert!(own_shutdown(Some(&fresh), timeout, now));
        assert!(!own_shutdown(None, timeout, now));
        let old = Token::new(now - chrono::Duration::minutes(16), 1).text;
        assert!(!own_shutdown(Some(&old), timeout, now));
        assert!(!own_shutdown(Some("junk"), timeout, now));
    }

    #[test]
    fn a_shutdown_of_a_host_handed_its_reboot_is_one_rollboot_granted() {
        let now = at(0);
        let timeout = chrono::Duration::minutes(15);
        let handed = NodeView {
            handed_off: Some(at(-20)),
            ..view(Some(NodeState::Rebooting), Some(at(-20)))
        };
        assert!(granted(Some(&handed), timeout, now));
        // Not handed off (a token is the agent's own reboot), not rebooting, long ago, unseen.
        let token = NodeView {
            reboot_token: Some(Token::new(at(-20), 1).text),
            ..handed.clone()
        };
        assert!(!granted(Some(&token), timeout, now));
        let draining = NodeView {
            state: Some(NodeState::Draining),
            ..handed.clone()
        };
        assert!(!granted(Some(&draining), timeout, now));
        assert!(!granted(Some(&handed), timeout, at(3600)));
        assert!(!granted(None, timeout, now));
    }

    /// logind's delay in the tests' requests.
    const D: std::time::Duration = std::time::Duration::from_secs(300);

    #[test]
    fn the_request_is_dated_to_the_millisecond_it_is_written_with() {
        let now = at(0) + chrono::Duration::nanoseconds(123_456_789);
        let r = Request::new(now, None, D);
        assert_eq!(
            r.annotation(),
            r#"{"at":"2026-09-21T14:13:20.123Z","delaySeconds":300}"#
        );
        let read = crate::node::ShutdownRequest::parse(&r.annotation());
        assert_eq!(read.at, Some(r.at));
        assert_eq!(read.delay_seconds, Some(300));
        // An older agent's instant alone is still read.
        let old = crate::node::ShutdownRequest::parse("2026-09-21T14:13:20.123Z");
        assert_eq!((old.at, old.delay_seconds), (Some(r.at), None));
        assert_eq!(r.at, at(0) + chrono::Duration::milliseconds(123));
        assert_eq!(r.before, None);
    }

    #[test]
    fn rebooting_or_failed_written_after_the_request_is_drained() {
        let r = Request::new(
            at(10),
            Some(&view(Some(NodeState::Done), Some(at(-3600)))),
            D,
        );
        assert!(drained(&view(Some(NodeState::Rebooting), Some(at(12))), &r));
        assert!(drained(&view(Some(NodeState::Failed), Some(at(30))), &r));
        // At the very instant of the request.
        assert!(drained(&view(Some(NodeState::Rebooting), Some(at(10))), &r));
        // Still on the way.
        for s in [NodeState::Cordoning, NodeState::Draining] {
            assert!(!drained(&view(Some(s), Some(at(11))), &r), "{s:?}");
        }
        assert!(!drained(&view(None, None), &r));
    }

    #[test]
    fn an_old_done_or_rebooting_from_an_earlier_cycle_is_not_drained() {
        let before = view(Some(NodeState::Done), Some(at(-3600)));
        let r = Request::new(at(10), Some(&before), D);
        // The same old `done`, and a `done` written since (the cancel's uncordon).
        assert!(!drained(&before, &r));
        assert!(!drained(&view(Some(NodeState::Done), Some(at(20))), &r));
        // A `failed` or `rebooting` left from before the request, unchanged since.
        for s in [NodeState::Failed, NodeState::Rebooting] {
            let old = view(Some(s), Some(at(-60)));
            let r = Request::new(at(10), Some(&old), D);
            assert!(!drained(&old, &r), "{s:?}");
        }
    }

    #[test]
    fn a_state_written_since_the_request_counts_even_when_the_controllers_clock_lags() {
        let before = view(Some(NodeState::Done), Some(at(-3600)));
        let r = Request::new(at(10), Some(&before), D);
        // The controller's clock is 4 s behind the host's: its `rebooting` is dated before the
        // request, but the Node changed since the request was made.
        assert!(drained(&view(Some(NodeState::Rebooting), Some(at(6))), &r));
        // Without a view at the request, only the instant tells.
        let blind = Request::new(at(10), None, D);
        assert!(!drained(
            &view(Some(NodeState::Rebooting), Some(at(6))),
            &blind
        ));
        assert!(drained(
            &view(Some(NodeState::Rebooting), Some(at(11))),
            &blind
        ));
    }

    #[test]
    fn a_request_found_at_start_is_removed_only_on_the_boot_the_node_reports() {
        let flagged = NodeView {
            shutdown_requested: true,
            ..view(None, None)
        };
        // Cancelled while the agent was down, or the new boot the kubelet reports.
        assert!(left_over(&flagged, Some("boot-1"), false));
        assert!(left_over(&flagged, Some("BOOT-1"), false));
        // The host rebooted and the kubelet still reports the boot before: not yet.
        assert!(!left_over(&flagged, Some("boot-2"), false));
        // The host's boot ID cannot be read, or the Node reports none.
        assert!(!left_over(&flagged, None, false));
        let blank = NodeView {
            boot_id: String::new(),
            ..flagged.clone()
        };
        assert!(!left_over(&blank, Some(""), false));
        // logind is shutting the host down right now: the request is live.
        assert!(!left_over(&flagged, Some("boot-1"), true));
        // Nothing to remove.
        assert!(!left_over(&view(None, None), Some("boot-1"), false));
    }

    #[test]
    fn the_state_at_the_deadline_is_said_in_words() {
        assert_eq!(state_words(None), "not seen yet");
        let v = NodeView {
            unschedulable: true,
            ..view(Some(NodeState::Draining), Some(at(0)))
        };
        assert_eq!(
            state_words(Some(&v)),
            "state draining since 2026-09-21T14:13:20.000Z, cordoned"
        );
        assert_eq!(
            state_words(Some(&view(None, None))),
            "state none, not cordoned"
        );
    }
}
