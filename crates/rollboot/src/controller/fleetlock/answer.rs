//! What rollboot answers a FleetLock host, and what it writes for it first.
//!
//! Owns [`answer`]: from a well-formed request, the Node it came from (found by
//! [`crate::fleetlock::id`]),
//! the node's entry in the maintenance lock, the last pass's blockers and the config, the reply
//! (200, or a [`ErrorKind`] that says what the host waits for) and the one write that goes before
//! it ([`Write`]): the request flag of a `pre-reboot`, the slot given back by a `steady-state`,
//! a queued request withdrawn. The answer follows the node's cycle as
//! [`crate::controller::decide`] decides it; it must never take a decision of its own about
//! the cycle, never answer 200 to `pre-reboot` before the reboot was handed to the host, and
//! never read a clock or the API.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::config::Config;
use crate::controller::decide::{self, Blocker, Step};
use crate::fleetlock::protocol::{ClientRequest, Endpoint, ErrorKind};
use crate::lock::LockEntry;
use crate::node::{self as proto, FleetLockRecord, FleetLockRequest, NodeState, NodeView};

/// How long a host's last request stays recorded as is before the same answer is written
/// again with its new instant: hosts poll, and a write per poll is a cost for nothing.
pub const RECORD_EVERY: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// A request to answer, and what it is answered from.
pub struct Ask<'a> {
    /// Which endpoint it came to.
    pub endpoint: Endpoint,
    /// The request.
    pub request: &'a ClientRequest,
    /// The host's Node.
    pub node: &'a NodeView,
    /// The node's entry in the maintenance lock, if it is in flight.
    pub entry: Option<&'a LockEntry>,
    /// The blockers the last pass found (empty when nothing blocked, or no pass looked yet).
    pub blockers: &'a [Blocker],
    /// Nodes in flight now, for the value of `waiting_slot`.
    pub in_flight: usize,
    /// The config.
    pub config: &'a Config,
    /// Now.
    pub now: DateTime<Utc>,
}

/// What is written on the host's Node before the answer is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Flag the node (`reboot-requested`, reason `fleetlock`) and record the host.
    Request,
    /// The host gave its slot back before rebooting: the cycle ends without a reboot.
    GiveBack,
    /// The host no longer asks: its queued request is withdrawn.
    Withdraw,
}

/// The answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// `None` for 200; else what the host waits for or what is wrong.
    pub kind: Option<ErrorKind>,
    /// The sentence that goes with it.
    pub value: String,
    /// What is written first (the answer is sent only once it is).
    pub write: Option<Write>,
}

impl Reply {
    fn ok(value: impl Into<String>, write: Option<Write>) -> Reply {
        Reply {
            kind: None,
            value: value.into(),
            write,
        }
    }

    fn no(kind: ErrorKind, value: impl Into<String>, write: Option<Write>) -> Reply {
        Reply {
            kind: Some(kind),
            value: value.into(),
            write,
        }
    }

    /// The answer as recorded on the Node (`ok` or the kind).
    pub fn recorded(&self) -> &'static str {
        self.kind.map_or("ok", ErrorKind::as_str)
    }
}

/// The group check: `fleetlock.groups` empty accepts any group; else the group must be
/// configured and, when it names a value of `concurrency.groupBy`, be the Node's.
pub fn group_problem(request: &ClientRequest, node: &NodeView, config: &Config) -> Option<String> {
    let groups = &config.fleetlock.as_ref()?.groups;
    if groups.is_empty() {
        return None;
    }
    let Some(g) = groups.get(&request.group) else {
        return Some(format!(
            "group `{}` is not one of fleetlock.groups ({})",
            request.group,
            groups.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    };
    let (want, key) = (g.group_by.as_ref()?, config.concurrency.group_by.as_ref()?);
    let has = node.labels.get(key).map(String::as_str).unwrap_or_default();
    (has != want).then(|| {
        format!(
            "group `{}` is for nodes whose {key} is `{want}`; node {} has `{has}`",
            request.group, node.name
        )
    })
}

/// The reply to `ask`.
pub fn answer(ask: &Ask<'_>) -> Reply {
    let n = ask.node;
    if let Some(why) = group_problem(ask.request, n, ask.config) {
        return Reply::no(ErrorKind::GroupMismatch, why, None);
    }
    match ask.endpoint {
        Endpoint::PreReboot => pre_reboot(ask),
        Endpoint::SteadyState => steady_state(ask),
    }
}

/// The reboot of the cycle `entry` started was handed to the host.
fn handed_off(n: &NodeView, entry: &LockEntry) -> bool {
    n.handed_off_at().is_some_and(|t| t >= entry.since)
}

fn pre_reboot(ask: &Ask<'_>) -> Reply {
    let n = ask.node;
    if n.excluded || !ask.config.node_selector().matches(&n.labels) {
        let why = if n.excluded {
            format!("node {} carries the {} label", n.name, proto::EXCLUDE)
        } else {
            format!("node {} is outside nodes.selector", n.name)
        };
        return Reply::no(
            ErrorKind::Excluded,
            format!("{why}: rollboot reboots it never"),
            None,
        );
    }
    // Flag it first: its cycle (or its place in the queue) then follows from the Node.
    let write = (!n.hands_off()).then_some(Write::Request);
    let Some(entry) = ask.entry else {
        return waiting(ask, write);
    };
    if handed_off(n, entry) {
        return if n.came_back() {
            Reply::no(
                ErrorKind::Verifying,
                format!(
                    "node {} is back on boot {} and being verified",
                    n.name, n.boot_id
                ),
                write,
            )
        } else {
            // The recursive lock: the holder asks again and gets its yes again.
            Reply::ok(
                format!(
                    "node {} is drained; this host holds its slot: reboot",
                    n.name
                ),
                write,
            )
        };
    }
    in_cycle(ask, entry, write)
}

/// The answer for a node in flight whose reboot is not handed to its host (yet).
fn in_cycle(ask: &Ask<'_>, entry: &LockEntry, write: Option<Write>) -> Reply {
    let n = ask.node;
    let step = decide::next_step(Some(n), entry, ask.config, ask.now);
    let state = n.state.map_or("starting", |s| s.as_str());
    match step {
        Step::Cordon { .. } | Step::Drain { .. } | Step::Settle { .. } => Reply::no(
            ErrorKind::Draining,
            format!("node {} is being cordoned and drained ({state})", n.name),
            write,
        ),
        Step::HandOff => Reply::no(
            ErrorKind::Draining,
            format!(
                "node {} is drained; its slot is being handed to this host",
                n.name
            ),
            write,
        ),
        Step::Hook { phase, .. } | Step::FailHook { phase, .. } => Reply::no(
            ErrorKind::Hook,
            format!("node {}: its {phase} hooks hold it", n.name),
            write,
        ),
        Step::Hold { why, .. } => Reply::no(
            ErrorKind::Hook,
            format!("node {} is held: {why}", n.name),
            write,
        ),
        // About to ask for the first token: the request written now turns it into a hand-off.
        Step::RequestReboot { attempt: 1 } if write.is_some() => Reply::no(
            ErrorKind::Draining,
            format!(
                "node {} is drained; its slot is being handed to this host",
                n.name
            ),
            write,
        ),
        Step::RequestReboot { .. } | Step::AwaitReboot { .. } => Reply::no(
            ErrorKind::Rebooting,
            format!(
                "node {} is rebooted by rollboot's agent in this cycle, not by this host",
                n.name
            ),
            write,
        ),
        Step::Overtaken(_) | Step::MarkVerifying | Step::Uncordon | Step::HealthGate { .. } => {
            Reply::no(
                ErrorKind::Verifying,
                format!("node {} is back and being verified", n.name),
                write,
            )
        }
        Step::Fail(why) => Reply::no(ErrorKind::Failed, format!("node {}: {why}", n.name), write),
        Step::Release(_) | Step::Free(_) => Reply::no(
            ErrorKind::WaitingSlot,
            format!("node {}'s last cycle is ending; asked again soon", n.name),
            write,
        ),
    }
}

/// The answer for a node not in flight: what it waits for.
fn waiting(ask: &Ask<'_>, write: Option<Write>) -> Reply {
    let n = ask.node;
    if n.state == Some(NodeState::Failed) {
        let why = n.failure_reason.as_deref().unwrap_or("no reason recorded");
        return Reply::no(
            ErrorKind::Failed,
            format!(
                "node {} failed ({why}); `rollboot retry {}` clears it",
                n.name, n.name
            ),
            write,
        );
    }
    if !ask.config.schedule().is_allowed(ask.now) || ask.blockers.contains(&Blocker::WindowClosed) {
        return Reply::no(
            ErrorKind::WaitingWindow,
            "no maintenance window is open".to_string(),
            write,
        );
    }
    if !ask.blockers.is_empty() {
        let all: Vec<String> = ask.blockers.iter().map(ToString::to_string).collect();
        return Reply::no(ErrorKind::Blocked, all.join("; "), write);
    }
    if let Some(until) = decide::resting_until(n, ask.config, ask.now) {
        return Reply::no(
            ErrorKind::WaitingSlot,
            format!(
                "node {} rebooted recently: nodes.minRebootInterval lets it start at {}",
                n.name,
                crate::time::annotation(until)
            ),
            write,
        );
    }
    let value = match &n.passed_over {
        Some(p) => format!("node {} is passed over for now: {}", n.name, p.why),
        None => format!(
            "node {} waits for a slot ({} in flight, maxNodes {})",
            n.name, ask.in_flight, ask.config.concurrency.max_nodes
        ),
    };
    Reply::no(ErrorKind::WaitingSlot, value, write)
}

fn steady_state(ask: &Ask<'_>) -> Reply {
    let n = ask.node;
    let given_back = |entry: &LockEntry| {
        n.fleetlock
            .as_ref()
            .and_then(|f| f.returned)
            .is_some_and(|t| t >= entry.since)
    };
    match ask.entry {
        // Not in flight: it holds nothing; a request still queued is withdrawn.
        None => Reply::ok(
            format!("node {} holds no slot", n.name),
            n.hands_off().then_some(Write::Withdraw),
        ),
        Some(entry) if handed_off(n, entry) && n.came_back() => Reply::no(
            ErrorKind::Verifying,
            format!(
                "node {} is back on boot {}; its slot is given back once it is verified and uncordoned",
                n.name, n.boot_id
            ),
            None,
        ),
        // Its own cycle, before the boot ID changed: the host decided not to reboot.
        Some(entry) if n.hands_off() || handed_off(n, entry) => Reply::ok(
            format!(
                "node {}: the slot is given back; its cycle ends without a reboot once the node has stayed Ready on this boot for reboot.readyWithoutRebootFor ({}), never while it is down",
                n.name, ask.config.reboot.ready_without_reboot_for
            ),
            (!given_back(entry)).then_some(Write::GiveBack),
        ),
        // A cycle of rollboot's own agent: this host holds no FleetLock slot.
        Some(_) => Reply::ok(format!("node {} holds no FleetLock slot", n.name), None),
    }
}

/// The merge patch that records `reply` to `request` at `endpoint` on the host's Node (its
/// write, and the `fleetlock` record with the last request); `None` when nothing needs writing
/// (no write, and the same answer recorded less than [`RECORD_EVERY`] ago).
pub fn patch(
    n: &NodeView,
    request: &ClientRequest,
    endpoint: Endpoint,
    reply: &Reply,
    now: DateTime<Utc>,
) -> Option<Value> {
    let mut record = n.fleetlock.clone().unwrap_or_default();
    let same = record.id == request.id
        && record.group == request.group
        && record.last.as_ref().is_some_and(|l| {
            l.endpoint == endpoint.as_str()
                && l.answer == reply.recorded()
                && now - l.at < RECORD_EVERY
        });
    if same && reply.write.is_none() {
        return None;
    }
    record.id = request.id.clone();
    record.group = request.group.clone();
    record.last = Some(FleetLockRequest {
        endpoint: endpoint.as_str().into(),
        at: now,
        answer: reply.recorded().into(),
    });
    let mut ann: Vec<(&str, Option<String>)> = Vec::new();
    match reply.write {
        Some(Write::Request) => {
            record.returned = None;
            ann.push((proto::REBOOT_REQUESTED, Some(crate::time::annotation(now))));
            ann.push((
                proto::REBOOT_REQUESTED_REASON,
                Some(proto::FLEETLOCK_REASON.into()),
            ));
        }
        Some(Write::GiveBack) => record.returned = Some(now),
        Some(Write::Withdraw) => {
            record.returned = None;
            ann.push((proto::REBOOT_REQUESTED, None));
            ann.push((proto::REBOOT_REQUESTED_REASON, None));
        }
        None => {}
    }
    ann.push((proto::FLEETLOCK, Some(record_text(&record))));
    Some(proto::patch(&ann, None))
}

fn record_text(r: &FleetLockRecord) -> String {
    serde_json::to_string(r).expect("a FleetLock record serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_str;
    use crate::lock::LockEntry;
    use crate::node::fixtures::{annotate, node};

    fn t(s: &str) -> DateTime<Utc> {
        crate::time::parse_annotation(s).unwrap()
    }

    const NOW: &str = "2026-01-05T00:05:00Z";

    fn req() -> ClientRequest {
        ClientRequest {
            id: "abc".into(),
            group: "default".into(),
        }
    }

    fn view(ann: &[(&str, &str)], labels: &[(&str, &str)]) -> NodeView {
        let mut n = node("fl", labels);
        for (k, v) in ann {
            n = annotate(n, k, v);
        }
        NodeView::from_node(&n)
    }

    fn asked() -> Vec<(&'static str, &'static str)> {
        vec![
            (proto::REBOOT_REQUESTED, "2026-01-05T00:00:00Z"),
            (proto::REBOOT_REQUESTED_REASON, proto::FLEETLOCK_REASON),
            (proto::FLEETLOCK, r#"{"id":"abc","group":"default"}"#),
        ]
    }

    fn entry() -> LockEntry {
        LockEntry {
            group: None,
            state: NodeState::Cordoning,
            since: t("2026-01-05T00:01:00Z"),
            leader: "c-0".into(),
        }
    }

    fn ask<'a>(
        endpoint: Endpoint,
        r: &'a ClientRequest,
        n: &'a NodeView,
        e: Option<&'a LockEntry>,
        blockers: &'a [Blocker],
        c: &'a Config,
    ) -> Reply {
        answer(&Ask {
            endpoint,
            request: r,
            node: n,
            entry: e,
            blockers,
            in_flight: usize::from(e.is_some()),
            config: c,
            now: t(NOW),
        })
    }

    #[test]
    fn a_first_pre_reboot_flags_the_node_and_says_what_it_waits_for() {
        let c = parse_str("{}").unwrap();
        let r = req();
        let fresh = view(&[], &[]);
        let a = ask(Endpoint::PreReboot, &r, &fresh, None, &[], &c);
        assert_eq!(
            (a.kind, a.write.clone()),
            (Some(ErrorKind::WaitingSlot), Some(Write::Request))
        );
        let p = patch(&fresh, &r, Endpoint::PreReboot, &a, t(NOW)).unwrap();
        let ann = &p["metadata"]["annotations"];
        assert_eq!(ann[proto::REBOOT_REQUESTED_REASON], "fleetlock");
        assert_eq!(ann[proto::REBOOT_REQUESTED], "2026-01-05T00:05:00.000Z");
        // Asked already: no second flag; the blockers say what it waits for.
        let waiting = view(&asked(), &[]);
        let a = ask(
            Endpoint::PreReboot,
            &r,
            &waiting,
            None,
            &[Blocker::WindowClosed],
            &c,
        );
        assert_eq!((a.kind, a.write), (Some(ErrorKind::WaitingWindow), None));
        let held = [Blocker::LockHeldBy("ops".into())];
        let a = ask(Endpoint::PreReboot, &r, &waiting, None, &held, &c);
        assert_eq!(a.kind, Some(ErrorKind::Blocked));
        assert!(a.value.contains("`ops`"), "{}", a.value);
        // An excluded node is never flagged.
        let excluded = view(&[], &[(proto::EXCLUDE, "true")]);
        let a = ask(Endpoint::PreReboot, &r, &excluded, None, &[], &c);
        assert_eq!((a.kind, a.write), (Some(ErrorKind::Excluded), None));
    }

    #[test]
    fn pre_reboot_is_200_only_once_the_reboot_is_handed_to_the_host_and_again_while_held() {
        let c = parse_str("{}").unwrap();
        let r = req();
        let e = entry();
        let mut draining = asked();
        draining.extend([
            (proto::STATE, "draining"),
            (proto::STATE_SINCE, "2026-01-05T00:02:00Z"),
        ]);
        let mut n = view(&draining, &[]);
        n.unschedulable = true;
        let a = ask(Endpoint::PreReboot, &r, &n, Some(&e), &[], &c);
        assert_eq!(a.kind, Some(ErrorKind::Draining));
        let mut handed = asked();
        handed.extend([
            (proto::STATE, "rebooting"),
            (proto::STATE_SINCE, "2026-01-05T00:03:00Z"),
            (proto::HANDED_OFF, "2026-01-05T00:03:00Z"),
            (proto::BOOT_ID_BEFORE, "boot-1"),
        ]);
        let n = view(&handed, &[]);
        for _ in 0..2 {
            let a = ask(Endpoint::PreReboot, &r, &n, Some(&e), &[], &c);
            assert_eq!((a.kind, a.write), (None, None));
        }
        // A hand-off of an earlier cycle is not this one's.
        let old = LockEntry {
            since: t("2026-01-05T00:04:00Z"),
            ..entry()
        };
        assert_ne!(
            ask(Endpoint::PreReboot, &r, &n, Some(&old), &[], &c).kind,
            None
        );
        // Back on a new boot: no slot to take again, it is being verified.
        let mut back = n.clone();
        back.boot_id = "boot-2".into();
        let a = ask(Endpoint::PreReboot, &r, &back, Some(&e), &[], &c);
        assert_eq!(a.kind, Some(ErrorKind::Verifying));
    }

    #[test]
    fn steady_state_gives_back_withdraws_or_waits_for_the_verification() {
        let c = parse_str("{}").unwrap();
        let r = req();
        let e = entry();
        // Holds nothing and asked nothing: 200, nothing written but the record.
        let idle = view(&[], &[]);
        let a = ask(Endpoint::SteadyState, &r, &idle, None, &[], &c);
        assert_eq!((a.kind, a.write), (None, None));
        // Queued: the request is withdrawn.
        let queued = view(&asked(), &[]);
        let a = ask(Endpoint::SteadyState, &r, &queued, None, &[], &c);
        assert_eq!((a.kind, a.write.clone()), (None, Some(Write::Withdraw)));
        let p = patch(&queued, &r, Endpoint::SteadyState, &a, t(NOW)).unwrap();
        assert!(p["metadata"]["annotations"][proto::REBOOT_REQUESTED].is_null());
        // Handed off, same boot: the slot is given back (once).
        let mut handed = asked();
        handed.extend([
            (proto::STATE, "rebooting"),
            (proto::STATE_SINCE, "2026-01-05T00:03:00Z"),
            (proto::HANDED_OFF, "2026-01-05T00:03:00Z"),
            (proto::BOOT_ID_BEFORE, "boot-1"),
        ]);
        let n = view(&handed, &[]);
        let a = ask(Endpoint::SteadyState, &r, &n, Some(&e), &[], &c);
        assert_eq!((a.kind, a.write.clone()), (None, Some(Write::GiveBack)));
        let p = patch(&n, &r, Endpoint::SteadyState, &a, t(NOW)).unwrap();
        let rec: FleetLockRecord = serde_json::from_str(
            p["metadata"]["annotations"][proto::FLEETLOCK]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(rec.returned, Some(t(NOW)));
        // Back on a new boot: not 200 until its cycle is verified and its slot free.
        let mut back = n.clone();
        back.boot_id = "boot-2".into();
        let a = ask(Endpoint::SteadyState, &r, &back, Some(&e), &[], &c);
        assert_eq!((a.kind, a.write), (Some(ErrorKind::Verifying), None));
    }

    #[test]
    fn a_group_must_be_configured_and_match_the_nodes_label() {
        let c = parse_str(
            "concurrency: {groupBy: zone}\nfleetlock: {listen: '127.0.0.1:0', groups: {east: {groupBy: e}}}",
        )
        .unwrap();
        let n = view(&[], &[("zone", "w")]);
        let east = ClientRequest {
            id: "abc".into(),
            group: "east".into(),
        };
        let a = ask(Endpoint::PreReboot, &east, &n, None, &[], &c);
        assert_eq!((a.kind, a.write), (Some(ErrorKind::GroupMismatch), None));
        assert!(a.value.contains("`w`"), "{}", a.value);
        let other = req();
        let a = ask(Endpoint::PreReboot, &other, &n, None, &[], &c);
        assert_eq!(a.kind, Some(ErrorKind::GroupMismatch));
        let n = view(&[], &[("zone", "e")]);
        let a = ask(Endpoint::PreReboot, &east, &n, None, &[], &c);
        assert_eq!(a.write, Some(Write::Request));
    }

    #[test]
    fn the_same_answer_is_recorded_again_only_after_a_minute() {
        let r = req();
        let mut rec = asked();
        let last = r#"{"id":"abc","group":"default","last":{"endpoint":"pre-reboot","at":"2026-01-05T00:04:30Z","answer":"waiting_slot"}}"#;
        rec.retain(|(k, _)| *k != proto::FLEETLOCK);
        rec.push((proto::FLEETLOCK, last));
        let n = view(&rec, &[]);
        let same = Reply::no(ErrorKind::WaitingSlot, "x", None);
        assert_eq!(patch(&n, &r, Endpoint::PreReboot, &same, t(NOW)), None);
        assert!(patch(
            &n,
            &r,
            Endpoint::PreReboot,
            &same,
            t("2026-01-05T00:06:00Z")
        )
        .is_some());
        let other = Reply::no(ErrorKind::Draining, "x", None);
        assert!(patch(&n, &r, Endpoint::PreReboot, &other, t(NOW)).is_some());
    }
}
