//! The agent's checks of a reboot token and of its host, pure: whether it refuses a token and
//! why ([`refusal`]), whether a token was lost between an earlier agent's ack and the reboot
//! ([`lost_token`]), and whether its host is its Node's ([`identity`]).
//!
//! Owns the rules of the last line of defence: never a second reboot, never another host's,
//! never a token too old, a node not cordoned or not in the maintenance lock, nor one whose
//! ack cannot be read. It must never read the host, the Node or a clock itself, nor write:
//! the agent passes what it read and the instant, and acts on the answer.

use chrono::Utc;

use super::host;
use crate::config::Config;
use crate::node::{self as proto, NodeView, RefusalCause, Token};

/// The host under the agent, as read on the host itself when a token is looked at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostSeen<'a> {
    /// Its boot ID; `None` when it cannot be read.
    pub boot_id: Option<&'a str>,
    /// Its machine ID; `None` when unknown.
    pub machine_id: Option<&'a str>,
    /// When its PID 1 started (see [`super::RebootHost::init_start`]); `None` when unknown.
    pub init_start: Option<u64>,
    /// Since when this agent has seen its host's boot ID differ from its Node's, without a
    /// break: a mismatch already there when a token was issued is no reboot.
    pub mismatch_since: Option<chrono::DateTime<Utc>>,
}

/// Why the agent refuses a token, if it does, as a cause and a sentence: pure. `host` is the
/// host as read on the host itself.
pub fn refusal(
    view: &NodeView,
    token: &str,
    in_lock: bool,
    host: HostSeen<'_>,
    config: &Config,
    now: chrono::DateTime<Utc>,
) -> Option<(RefusalCause, String)> {
    let Some(t) = Token::parse(token) else {
        return Some((
            RefusalCause::TokenInvalid,
            format!("token `{token}` is not one rollboot writes"),
        ));
    };
    if now - t.issued > config.reboot.timeout.to_chrono() {
        return Some((
            RefusalCause::TokenExpired,
            format!(
                "token {token} is older than the reboot timeout ({})",
                config.reboot.timeout
            ),
        ));
    }
    let Some(host_boot) = host.boot_id else {
        return Some((
            RefusalCause::HostUnknown,
            format!(
                "the host's boot ID cannot be read ({}), so the agent cannot tell that its host \
                 is node {}",
                config.reboot.host_boot_id_file, view.name
            ),
        ));
    };
    // A boot ID that already differed from the Node's before this request says nothing of a
    // reboot: the agent reads the wrong file, or runs on another host (a machine ID that
    // differs says which, below).
    let mismatched_before = host.mismatch_since.is_some_and(|since| since <= t.issued)
        && !host_boot.eq_ignore_ascii_case(&view.boot_id);
    // The host rebooted since the controller read its boot ID for this request: acting now
    // would be a second reboot. The Node says so once the kubelet is back; the host says so at
    // once where it is known to be the Node's: by its machine ID, or, for a token issued in
    // answer to a lost one, by that report (made on the host's boot `before`, read on the host
    // itself). This comes before everything below, an unreadable ack included: a restarted
    // agent whose kubelet has not reported the new boot yet must not fail a node whose reboot
    // happened.
    if let Some(before) = view
        .boot_id_before
        .as_deref()
        .filter(|_| !mismatched_before)
    {
        let retry = view.reboot_attempt.is_some_and(|a| a >= 2);
        let same_machine = host.machine_id.is_some_and(|m| {
            !view.machine_id.is_empty() && m.eq_ignore_ascii_case(&view.machine_id)
        });
        let moved = !proto::same_boot(before, view.init_start_before, host_boot, host.init_start);
        let now_boot = if (retry || same_machine) && moved {
            Some(proto::boot_words(host_boot, host.init_start))
        } else {
            view.booted_since(before).then(|| view.boot_words())
        };
        if let Some(b) = now_boot {
            return Some((
                RefusalCause::AlreadyRebooted,
                format!(
                    "the host already rebooted since token {token} was issued (boot {} -> {b})",
                    proto::boot_words(before, view.init_start_before)
                ),
            ));
        }
    }
    // Whether it acted already cannot be told while its ack is unreadable (a host that rebooted
    // since the token, above, has: that answer comes first).
    if view.is_malformed(proto::REBOOT_ACK) {
        return Some((
            RefusalCause::AckUnreadable,
            format!(
                "{} is malformed, so the agent cannot tell whether it already acted on token {token}",
                proto::REBOOT_ACK
            ),
        ));
    }
    if let Some(why) = not_this_host(view, host_boot, host, mismatched_before, config) {
        return Some(why);
    }
    if !view.unschedulable {
        return Some((
            RefusalCause::NotCordoned,
            format!("node {} is not cordoned", view.name),
        ));
    }
    if !in_lock {
        return Some((
            RefusalCause::NotInLock,
            format!("node {} is not listed in the maintenance lock", view.name),
        ));
    }
    None
}

/// Why the host under the agent is not its Node's, if it is not: its machine ID (where both
/// are known) or its boot ID differs from the Node's `nodeInfo`. A boot ID that differed
/// already before the token (`mismatched_before`) is a mismatch the agent saw from its start
/// or since, never a reboot; a host whose machine ID is the Node's but whose boot ID became
/// another since has rebooted and its kubelet has not said so yet.
fn not_this_host(
    view: &NodeView,
    host_boot: &str,
    host: HostSeen<'_>,
    mismatched_before: bool,
    config: &Config,
) -> Option<(RefusalCause, String)> {
    let same = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    let machine = host.machine_id.filter(|_| !view.machine_id.is_empty());
    if let Some(m) = machine.filter(|m| !same(m, &view.machine_id)) {
        return Some((
            RefusalCause::WrongHost,
            format!(
                "this agent's host has machine ID {m}, but node {} reports {}: the agent runs on \
                 another host (its --node-name, or the node it was scheduled on, is wrong)",
                view.name, view.machine_id
            ),
        ));
    }
    if view.boot_id.is_empty() || same(host_boot, &view.boot_id) {
        return None;
    }
    if mismatched_before {
        let since = host
            .mismatch_since
            .map(crate::time::annotation)
            .unwrap_or_default();
        return Some((
            RefusalCause::BootMismatch,
            format!(
                "the host's boot ID as the agent reads it ({host_boot}, from {}) has differed \
                 from node {}'s ({}) since {since}, before this request: nothing rebooted, and \
                 the agent cannot tell its host's reboots; on a node that is a container (kind, \
                 k3d, systemd-nspawn), read PID 1's view, {} (the default, with hostPID)",
                config.reboot.host_boot_id_file,
                view.name,
                view.boot_id,
                host::HOST_BOOT_ID
            ),
        ));
    }
    if machine.is_some() {
        return Some((
            RefusalCause::AlreadyRebooted,
            format!(
                "the host (machine ID {}) is on boot {host_boot}, while node {} still reports \
                 boot {}: it rebooted and its kubelet has not said so yet",
                view.machine_id, view.name, view.boot_id
            ),
        ));
    }
    Some((
        RefusalCause::WrongHost,
        format!(
            "this agent's host is on boot {host_boot}, but node {} reports boot {}: the agent \
             runs on another host (its --node-name, or reboot.hostBootIdFile, is wrong), and \
             rebooting it would reboot the wrong machine",
            view.name, view.boot_id
        ),
    ))
}

/// The token to report lost, if any: pure. It is the live token of a rebooting node that
/// this node's agent acknowledged, but not this process (`acted`: the tokens it acknowledged
/// itself), while the host is still on the boot from before the request (its boot ID, and its
/// PID 1's start where the request recorded it: on a kind-like node the boot ID never
/// changes): an earlier agent died between its ack and the reboot. Needs the host's own boot
/// ID: the Node's may lag behind a reboot that did happen, and reporting that one lost would
/// cause a second.
pub fn lost_token(
    view: &NodeView,
    host: HostSeen<'_>,
    acted: &[String],
    config: &Config,
    now: chrono::DateTime<Utc>,
) -> Option<String> {
    let token = view.reboot_token.as_deref()?;
    let live =
        Token::parse(token).is_some_and(|t| now - t.issued <= config.reboot.timeout.to_chrono());
    let unchanged = host.boot_id.is_some_and(|b| {
        view.boot_id_before.as_deref().is_some_and(|before| {
            proto::same_boot(before, view.init_start_before, b, host.init_start)
        })
    });
    (view.state == Some(proto::NodeState::Rebooting)
        && view.reboot_ack.as_deref() == Some(token)
        && view.reboot_lost.as_deref() != Some(token)
        && !acted.iter().any(|a| a == token)
        && live
        && unchanged)
        .then(|| token.to_string())
}

/// Whether the host's boot ID `boot` is not the one its Node reports (a Node that reports
/// none is not compared).
pub(super) fn boot_differs(view: &NodeView, boot: &str) -> bool {
    !view.boot_id.is_empty() && !boot.eq_ignore_ascii_case(&view.boot_id)
}

/// What the agent says of its host against its Node, pure: `Ok` when its boot ID (and machine
/// ID, where both are known) are the Node's, else the sentence that says what differs.
pub fn identity(view: &NodeView, host: HostSeen<'_>) -> Result<(), String> {
    let same = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    let Some(boot) = host.boot_id else {
        return Err("the host's boot ID cannot be read".into());
    };
    let mut differ = Vec::new();
    if boot_differs(view, boot) {
        differ.push(format!(
            "boot ID {boot} (node {} reports {})",
            view.name, view.boot_id
        ));
    }
    if let Some(m) = host.machine_id.filter(|_| !view.machine_id.is_empty()) {
        if !same(m, &view.machine_id) {
            differ.push(format!(
                "machine ID {m} (node {} reports {})",
                view.name, view.machine_id
            ));
        }
    }
    if differ.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the host the agent reads has {}",
            differ.join(" and ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::fixtures::node;
    use crate::node::ShutdownDrain;

    /// The host of a Node on boot `boot-1`, machine `m-1`.
    const HOME: HostSeen<'static> = HostSeen {
        boot_id: Some("boot-1"),
        machine_id: Some("m-1"),
        init_start: None,
        mismatch_since: None,
    };

    /// The host on boot `b`, machine unknown.
    fn on(b: &str) -> HostSeen<'_> {
        HostSeen {
            boot_id: Some(b),
            ..HostSeen::default()
        }
    }

    /// A cordoned node on boot `boot-1`, machine `m-1`.
    fn cordoned() -> NodeView {
        NodeView {
            unschedulable: true,
            boot_id: "boot-1".into(),
            machine_id: "m-1".into(),
            ..NodeView::from_node(&node("n1", &[]))
        }
    }

    fn cause(r: Option<(RefusalCause, String)>) -> Option<RefusalCause> {
        r.map(|(c, _)| c)
    }

    #[test]
    fn the_agent_refuses_a_node_outside_the_lock_or_uncordoned_or_a_stale_token() {
        let c = Config::default();
        let now = Utc::now();
        let fresh = Token::new(now, 1).text;
        let on = cordoned();
        assert_eq!(refusal(&on, &fresh, true, HOME, &c, now), None);
        let (why, text) = refusal(&on, &fresh, false, HOME, &c, now).unwrap();
        assert_eq!(why, RefusalCause::NotInLock);
        assert!(text.contains("maintenance lock"));
        let open = NodeView {
            unschedulable: false,
            ..on.clone()
        };
        assert_eq!(
            cause(refusal(&open, &fresh, true, HOME, &c, now)),
            Some(RefusalCause::NotCordoned)
        );
        let old = Token::new(now - chrono::Duration::hours(1), 2).text;
        let (why, text) = refusal(&on, &old, true, HOME, &c, now).unwrap();
        assert_eq!(why, RefusalCause::TokenExpired);
        assert!(text.contains("older"));
        assert_eq!(
            cause(refusal(&on, "junk", true, HOME, &c, now)),
            Some(RefusalCause::TokenInvalid)
        );
    }

    /// A cordoned node asked to reboot with `token` on boot `boot-1`.
    fn asked(token: &str) -> NodeView {
        NodeView {
            state: Some(proto::NodeState::Rebooting),
            boot_id_before: Some("boot-1".into()),
            reboot_token: Some(token.into()),
            reboot_attempt: Some(1),
            ..cordoned()
        }
    }

    #[test]
    fn the_agent_refuses_a_token_when_its_ack_is_unreadable_or_the_host_already_rebooted() {
        let c = Config::default();
        let now = Utc::now();
        let fresh = Token::new(now, 1).text;
        let v = asked(&fresh);
        assert_eq!(refusal(&v, &fresh, true, HOME, &c, now), None);
        // Someone wrote garbage over the ack: whether the current token was acted on is unknown.
        let garbled = NodeView::from_node(&crate::node::fixtures::annotate(
            node("n1", &[]),
            proto::REBOOT_ACK,
            "garbage",
        ));
        let garbled = NodeView {
            malformed: garbled.malformed,
            ..v.clone()
        };
        let (why, text) = refusal(&garbled, &fresh, true, HOME, &c, now).unwrap();
        assert_eq!(why, RefusalCause::AckUnreadable);
        assert!(
            text.contains("rollboot.dev/reboot-ack is malformed"),
            "{text}"
        );
        // The Node already shows a new boot: acting would be a second reboot.
        let back = NodeView {
            boot_id: "boot-2".into(),
            ..v.clone()
        };
        let host2 = HostSeen {
            boot_id: Some("boot-2"),
            ..HOME
        };
        let (why, text) = refusal(&back, &fresh, true, host2, &c, now).unwrap();
        assert_eq!(why, RefusalCause::AlreadyRebooted);
        assert!(text.contains("already rebooted"), "{text}");
        // A token issued after a lost one: the host's own boot ID is believed before the Node's
        // (the kubelet may not have reported the new boot yet).
        let retry = NodeView {
            reboot_attempt: Some(2),
            ..v.clone()
        };
        let (why, text) = refusal(&retry, &fresh, true, host2, &c, now).unwrap();
        assert_eq!(why, RefusalCause::AlreadyRebooted);
        assert!(text.contains("boot-1 -> boot-2"), "{text}");
        assert_eq!(refusal(&retry, &fresh, true, HOME, &c, now), None);
        // A garbled ack, and an agent restarted on the new boot before the kubelet reported
        // it: the host's machine ID is the Node's and its boot is not `boot-id-before`. The
        // reboot happened; that is the answer, whatever the ack says (before: ackUnreadable,
        // which failed the node and halted the rollout).
        let (why, text) = refusal(&garbled, &fresh, true, host2, &c, now).unwrap();
        assert_eq!(why, RefusalCause::AlreadyRebooted, "{text}");
        assert!(text.contains("boot-1 -> boot-2"), "{text}");
        // The machine unknown: nothing says the new boot is this host's, the ack decides.
        let unknown = HostSeen {
            machine_id: None,
            ..host2
        };
        assert_eq!(
            cause(refusal(&garbled, &fresh, true, unknown, &c, now)),
            Some(RefusalCause::AckUnreadable)
        );
    }

    #[test]
    fn the_agent_never_reboots_a_host_that_is_not_its_nodes() {
        let c = Config::default();
        let now = Utc::now();
        let fresh = Token::new(now, 1).text;
        let v = asked(&fresh);
        // Started with the wrong --node-name, or against a simulator on a workstation: the
        // host's boot ID is not the Node's, and nothing says it is the same machine.
        let elsewhere = on("workstation-boot");
        let (why, text) = refusal(&v, &fresh, true, elsewhere, &c, now).unwrap();
        assert_eq!(why, RefusalCause::WrongHost);
        assert!(
            text.contains("workstation-boot") && text.contains("boot-1") && text.contains("n1"),
            "{text}"
        );
        assert!(why.fails_the_node());
        // Another machine, whatever its boot.
        let other = HostSeen {
            machine_id: Some("m-2"),
            ..on("boot-1")
        };
        let (why, text) = refusal(&v, &fresh, true, other, &c, now).unwrap();
        assert_eq!(why, RefusalCause::WrongHost);
        assert!(text.contains("machine ID m-2"), "{text}");
        // The same machine on a newer boot: it rebooted and the Node lags; not a wrong host.
        let newer = HostSeen {
            machine_id: Some("M-1"),
            ..on("boot-9")
        };
        assert_eq!(
            cause(refusal(&v, &fresh, true, newer, &c, now)),
            Some(RefusalCause::AlreadyRebooted)
        );
        // A host whose boot ID cannot be read is not taken for the Node's.
        let unknown = HostSeen {
            boot_id: None,
            ..HOME
        };
        let (why, text) = refusal(&v, &fresh, true, unknown, &c, now).unwrap();
        assert_eq!(why, RefusalCause::HostUnknown);
        assert!(
            text.contains("/proc/1/root/proc/sys/kernel/random/boot_id"),
            "{text}"
        );
        // Machine IDs unknown on either side: the boot ID alone decides.
        let quiet = NodeView {
            machine_id: String::new(),
            ..v.clone()
        };
        assert_eq!(refusal(&quiet, &fresh, true, HOME, &c, now), None);
    }

    #[test]
    fn a_token_is_reported_lost_only_when_an_earlier_agent_took_it_on_the_same_boot() {
        let c = Config::default();
        let now = Utc::now();
        let t = Token::new(now, 7).text;
        let acked = NodeView {
            reboot_ack: Some(t.clone()),
            ..asked(&t)
        };
        assert_eq!(
            lost_token(&acked, on("boot-1"), &[], &c, now),
            Some(t.clone())
        );
        // This process took it itself: its reboot is under way.
        assert_eq!(
            lost_token(&acked, on("boot-1"), std::slice::from_ref(&t), &c, now),
            None
        );
        // The host booted since: the reboot happened, whatever the Node says yet.
        assert_eq!(lost_token(&acked, on("boot-2"), &[], &c, now), None);
        // Without the host's own boot ID, a reboot the kubelet has not reported yet cannot be
        // told from a lost one: nothing is reported.
        assert_eq!(lost_token(&acked, HostSeen::default(), &[], &c, now), None);
        // Already reported, not acknowledged, or too old.
        let reported = NodeView {
            reboot_lost: Some(t.clone()),
            ..acked.clone()
        };
        assert_eq!(lost_token(&reported, on("boot-1"), &[], &c, now), None);
        assert_eq!(lost_token(&asked(&t), on("boot-1"), &[], &c, now), None);
        let later = now + chrono::Duration::hours(1);
        assert_eq!(lost_token(&acked, on("boot-1"), &[], &c, later), None);
    }

    #[test]
    fn a_boot_id_that_differed_before_the_request_fails_the_node_and_is_never_taken_for_a_reboot() {
        let c = Config::default();
        let now = Utc::now();
        let issued = now - chrono::Duration::seconds(5);
        let fresh = Token::new(issued, 1).text;
        let v = asked(&fresh);
        // The agent reads the kernel's boot ID of a nested node: the machine is the Node's,
        // the boot ID never was, since the agent started (before the request).
        let nested = HostSeen {
            boot_id: Some("kernel-boot"),
            mismatch_since: Some(issued - chrono::Duration::minutes(3)),
            ..HOME
        };
        let (why, text) = refusal(&v, &fresh, true, nested, &c, now).unwrap();
        assert_eq!(why, RefusalCause::BootMismatch);
        assert!(why.fails_the_node());
        assert!(
            text.contains("kernel-boot")
                && text.contains("boot-1")
                && text.contains("before this request")
                && text.contains("/proc/1/root/proc/sys/kernel/random/boot_id"),
            "{text}"
        );
        // A retry token (the host's own boot believed first) does not turn it into one.
        let retry = NodeView {
            reboot_attempt: Some(2),
            ..v.clone()
        };
        assert_eq!(
            cause(refusal(&retry, &fresh, true, nested, &c, now)),
            Some(RefusalCause::BootMismatch)
        );
        // The same host boot first seen after the request: the host rebooted since.
        let since = HostSeen {
            mismatch_since: Some(now),
            ..nested
        };
        assert_eq!(
            cause(refusal(&v, &fresh, true, since, &c, now)),
            Some(RefusalCause::AlreadyRebooted)
        );
    }

    #[test]
    fn on_a_kind_like_node_pid_1s_start_tells_a_reboot_from_an_agent_restart() {
        let c = Config::default();
        let now = Utc::now();
        let t = Token::new(now, 3).text;
        // Every boot of the node reports boot-1; the request recorded PID 1's start 100.
        let acked = NodeView {
            reboot_ack: Some(t.clone()),
            init_start_before: Some(100),
            ..asked(&t)
        };
        let started = |init| HostSeen {
            init_start: Some(init),
            ..HOME
        };
        // An agent restarted on the same boot: the token is lost.
        assert_eq!(
            lost_token(&acked, started(100), &[], &c, now),
            Some(t.clone())
        );
        // The node rebooted (its init started again): no second reboot is asked for.
        assert_eq!(lost_token(&acked, started(4242), &[], &c, now), None);
        // A token issued after a lost one, on a node that rebooted since: refused as
        // rebooted, whatever the unchanged boot ID says.
        let retry = NodeView {
            reboot_attempt: Some(2),
            reboot_ack: None,
            ..acked.clone()
        };
        let (why, text) = refusal(&retry, &t, true, started(4242), &c, now).unwrap();
        assert_eq!(why, RefusalCause::AlreadyRebooted);
        assert!(
            text.contains("boot-1 (PID 1 started at 100) -> boot-1 (PID 1 started at 4242)"),
            "{text}"
        );
        assert_eq!(refusal(&retry, &t, true, started(100), &c, now), None);
        // The Node side: the agent of the new boot wrote its record.
        let back = NodeView {
            agent_host: Some(proto::AgentHost {
                boot_id: "boot-1".into(),
                init_start: Some(4242),
                machine_id: None,
                shutdown_drain: ShutdownDrain::NoLogind,
                inhibit_delay_seconds: None,
            }),
            ..retry.clone()
        };
        assert!(back.came_back());
        assert!(!retry.came_back());
    }

    #[test]
    fn the_host_is_compared_with_its_node_and_what_differs_is_named() {
        let v = cordoned();
        assert_eq!(identity(&v, HOME), Ok(()));
        let e = identity(
            &v,
            HostSeen {
                boot_id: Some("kernel-boot"),
                machine_id: Some("m-9"),
                ..HOME
            },
        )
        .unwrap_err();
        assert!(
            e.contains("boot ID kernel-boot (node n1 reports boot-1)")
                && e.contains("machine ID m-9 (node n1 reports m-1)"),
            "{e}"
        );
        assert!(identity(&v, HostSeen::default()).is_err());
        // Unknown on the Node's side: nothing to compare.
        let blank = NodeView {
            boot_id: String::new(),
            machine_id: String::new(),
            ..v
        };
        assert_eq!(identity(&blank, on("anything")), Ok(()));
    }
}
