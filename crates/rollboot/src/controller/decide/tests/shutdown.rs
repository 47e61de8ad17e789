//! The tests of the cycles of hosts that go down by themselves.

use super::*;

#[test]
fn a_host_shutting_down_is_started_at_once_and_handed_over_once_drained() {
    // Windows closed, maxNodes full: a shutdown does not wait for either.
    let c = cfg("windows: [{schedule: '0 2 * * *', duration: 1m}]\nconcurrency: {maxNodes: 1}");
    let down = |name: &str, at: &str| {
        NodeView::from_node(&annotate(node(name, &[]), proto::SHUTDOWN_REQUESTED, at))
    };
    let nodes = vec![
        down("b", "2026-01-05T00:00:02Z"),
        down("a", "2026-01-05T00:00:01Z"),
        flagged("x", "2026-01-01T00:00:00Z", &[]),
        NodeView::from_node(&annotate(
            node("ex", &[(proto::EXCLUDE, "true")]),
            proto::SHUTDOWN_REQUESTED,
            "2026-01-05T00:00:00Z",
        )),
    ];
    let busy: BTreeMap<String, LockEntry> =
        [("x".to_string(), entry("2026-01-05T00:00:00Z"))].into();
    assert_eq!(
        names(shutting_down(&snapshot(&nodes, &busy), &c)),
        ["a", "b"]
    );
    // Drained: handed over (no token), whatever started the cycle.
    let mut drained = fleetlock_drained("2026-01-05T00:01:00Z", &[]);
    drained.reboot_requested = false;
    drained.fleetlock = None;
    drained.shutdown_requested = true;
    drained.cycle_for = Some(proto::CYCLE_FOR_SHUTDOWN.into());
    let e = entry("2026-01-05T00:00:00Z");
    let now = t("2026-01-05T00:05:00Z");
    assert_eq!(next_step(Some(&drained), &e, &c, now), Step::HandOff);
    // Cancelled before the drain's end: released, no reboot.
    let mut cancelled = drained.clone();
    cancelled.shutdown_requested = false;
    assert!(
        matches!(next_step(Some(&cancelled), &e, &c, now), Step::Release(why) if why.contains("cancelled"))
    );
    // Cancelled mid-drain: released at once, the drain not run to its end; a shutdown asked
    // again goes on draining.
    let mut mid = cancelled.clone();
    mid.hooks = None;
    assert!(matches!(
        next_step(Some(&mid), &e, &c, now),
        Step::Release(why) if why.contains("cancelled")
    ));
    mid.shutdown_requested = true;
    assert!(matches!(
        next_step(Some(&mid), &e, &c, now),
        Step::Drain { .. }
    ));
    // Cancelled before the cordon's end too.
    let mut cordoning = cancelled.clone();
    cordoning.state = Some(NodeState::Cordoning);
    assert!(matches!(
        next_step(Some(&cordoning), &e, &c, now),
        Step::Release(_)
    ));
    // Cancelled after the hand-off, on the same boot: released; on a new boot: verified.
    let mut handed = cancelled.clone();
    handed.state = Some(NodeState::Rebooting);
    handed.state_since = Some(t("2026-01-05T00:02:00Z"));
    handed.handed_off = Some(t("2026-01-05T00:02:00Z"));
    handed.boot_id_before = Some("boot-1".into());
    handed.ready_since = Some(t("2026-01-04T00:00:00Z"));
    assert!(matches!(
        next_step(Some(&handed), &e, &c, now),
        Step::Hold { ref why, .. } if why.contains("cancelled")
    ));
    assert!(matches!(
        next_step(Some(&handed), &e, &c, t("2026-01-05T00:07:00Z")),
        Step::Release(_)
    ));
    let mut down = handed.clone();
    down.ready = false;
    assert!(matches!(
        next_step(Some(&down), &e, &c, t("2026-01-05T00:07:00Z")),
        Step::AwaitReboot { .. }
    ));
    let mut back = handed.clone();
    back.boot_id = "boot-2".into();
    assert_eq!(next_step(Some(&back), &e, &c, now), Step::MarkVerifying);
    // Still shutting down after the hand-off: waits for the host.
    let mut waiting = handed.clone();
    waiting.shutdown_requested = true;
    assert!(matches!(
        next_step(Some(&waiting), &e, &c, now),
        Step::AwaitReboot { deadline } if deadline == t("2026-01-05T00:07:00Z")
    ));
    // No shutdown followed the hand-off: it ends as cancelled once the node stayed Ready.
    assert!(matches!(
        next_step(Some(&waiting), &e, &c, t("2026-01-05T00:07:00Z")),
        Step::Release(why) if why.contains("no shutdown followed")
    ));
}

#[test]
fn a_shutdown_request_no_shutdown_follows_ends_cancelled_after_loginds_delay_and_a_margin() {
    // Found by trying rollboot as an attacker would: a request with no shutdown behind it
    // held its node cordoned until reboot.timeout, failed it and halted the rollout.
    let c = cfg("{}");
    let e = entry("2026-01-05T00:00:00Z");
    let mut n = shutdown_draining();
    n.ready_since = Some(t("2026-01-04T00:00:00Z"));
    n.shutdown_requested_at = Some(t("2026-01-05T00:00:00Z"));
    n.shutdown_delay_seconds = Some(60);
    // Within logind's delay (60 s) and the margin (5m): the drain goes on.
    assert!(matches!(
        next_step(Some(&n), &e, &c, t("2026-01-05T00:05:59Z")),
        Step::Drain { .. }
    ));
    match next_step(Some(&n), &e, &c, t("2026-01-05T00:06:00Z")) {
        Step::Release(why) => assert!(why.contains("no shutdown followed"), "{why}"),
        s => panic!("{s:?}"),
    }
    // The host went down meanwhile (NotReady, or Ready again since): not cancelled.
    let mut down = n.clone();
    down.ready = false;
    assert!(matches!(
        next_step(Some(&down), &e, &c, t("2026-01-05T00:09:00Z")),
        Step::Drain { .. } | Step::Fail(_)
    ));
    let mut flapped = n.clone();
    flapped.ready_since = Some(t("2026-01-05T00:01:00Z"));
    assert!(!matches!(
        next_step(Some(&flapped), &e, &c, t("2026-01-05T00:09:00Z")),
        Step::Release(_)
    ));
    // Without a delay in the request, the agent's `agent-host` one; without either, the
    // reboot timeout (15m).
    let mut unknown = n.clone();
    unknown.shutdown_delay_seconds = None;
    assert!(!matches!(
        next_step(Some(&unknown), &e, &c, t("2026-01-05T00:19:59Z")),
        Step::Release(_)
    ));
    assert!(matches!(
        next_step(Some(&unknown), &e, &c, t("2026-01-05T00:20:00Z")),
        Step::Release(_)
    ));
}

#[test]
fn a_shutdown_cycle_that_ends_is_never_released_while_its_node_is_down_or_tainted_not_ready() {
    // The break, as the chaos campaign played it again (seed 554): the leader killed
    // and a slow API, the shutdown drain's cordon landed once the host was back on a new boot
    // (taken for the boot to leave), and that boot's agent removed the request: the cycle
    // ends as cancelled, while the node-lifecycle controller still taints it not-ready.
    let c = cfg("{}");
    let e = entry("2026-01-05T00:00:00Z");
    let mut n = shutdown_draining();
    n.shutdown_requested = false;
    n.ready_since = Some(t("2026-01-05T00:00:30Z"));
    let now = t("2026-01-05T00:01:00Z");
    match next_step(Some(&n), &e, &c, now) {
        Step::Release(why) => assert!(why.contains("cancelled"), "{why}"),
        s => panic!("Ready and untainted: released, {s:?}"),
    }
    let mut tainted = n.clone();
    tainted.not_ready_taint = true;
    match next_step(Some(&tainted), &e, &c, now) {
        Step::Hold { until, why } => {
            assert!(
                why.contains("cancelled") && why.contains("tainted not-ready"),
                "{why}"
            );
            // At most the cycle's outer bound: its drain and reboot timeouts from its start.
            assert_eq!(
                until,
                e.since + c.drain.timeout.to_chrono() + c.reboot.timeout.to_chrono()
            );
        }
        s => panic!("tainted not-ready: held, {s:?}"),
    }
    let mut down = n.clone();
    down.ready = false;
    assert!(matches!(
        next_step(Some(&down), &e, &c, now),
        Step::Hold { ref why, .. } if why.contains("not Ready")
    ));
    // Down past that bound: failed, with both reasons, never uncordoned.
    let late = e.since + c.drain.timeout.to_chrono() + c.reboot.timeout.to_chrono();
    match next_step(Some(&down), &e, &c, late) {
        Step::Fail(why) => assert!(
            why.contains("cancelled") && why.contains("not Ready"),
            "{why}"
        ),
        s => panic!("{s:?}"),
    }
}

#[test]
fn shutdown_drains_beyond_max_nodes_are_capped_by_max_shutdown_drains() {
    let shutting = |name: &str, at: &str| {
        let mut n = NodeView::from_node(&node(name, &[]));
        n.shutdown_requested = true;
        n.shutdown_requested_at = Some(t(at));
        n
    };
    let nodes: Vec<NodeView> = (0..5)
        .map(|i| shutting(&format!("n{i}"), &format!("2026-01-05T00:00:0{i}Z")))
        .collect();
    let none = BTreeMap::new();
    let s = snapshot(&nodes, &none);
    // maxNodes 1 + maxShutdownDrains 1: two of the five, the oldest requests first.
    let c = cfg("{}");
    let room = shutdown_room(&s, &c);
    let all = shutting_down(&s, &c);
    assert_eq!(all.len(), 5);
    assert_eq!(room, 2);
    assert_eq!(names(all[..room].to_vec()), ["n0", "n1"]);
    // One in flight already: one more.
    let busy = BTreeMap::from([("x".to_string(), entry("2026-01-05T00:00:00Z"))]);
    assert_eq!(shutdown_room(&snapshot(&nodes, &busy), &c), 1);
    let c = cfg("concurrency: {maxNodes: 2, maxShutdownDrains: 0}");
    assert_eq!(shutdown_room(&snapshot(&nodes, &busy), &c), 1);
}

/// A cycle for its host's own shutdown, mid-drain, started on boot `boot-1`.
fn shutdown_draining() -> NodeView {
    let mut n = fleetlock_drained("2026-01-05T00:01:00Z", &[]);
    n.reboot_requested = false;
    n.fleetlock = None;
    n.hooks = None;
    n.shutdown_requested = true;
    n.cycle_for = Some(proto::CYCLE_FOR_SHUTDOWN.into());
    n.boot_id = "boot-1".into();
    n.boot_id_before = Some("boot-1".into());
    n
}

#[test]
fn a_shutdown_that_goes_before_its_drain_is_recorded_undrained_never_cancelled_nor_asked_again() {
    let c = cfg("{}");
    let e = entry("2026-01-05T00:00:00Z");
    let now = t("2026-01-05T00:05:00Z");
    let mid = shutdown_draining();
    assert!(matches!(
        next_step(Some(&mid), &e, &c, now),
        Step::Drain { .. }
    ));
    // The host went down mid-drain and is back; its new agent removed the request.
    let mut back = mid.clone();
    back.boot_id = "boot-2".into();
    back.shutdown_requested = false;
    let Step::Overtaken(why) = next_step(Some(&back), &e, &c, now) else {
        panic!("{:?}", next_step(Some(&back), &e, &c, now));
    };
    assert!(
        why.contains("before the drain was over") && why.contains("(boot-1 -> boot-2)"),
        "{why}"
    );
    assert_eq!(abandoned(&back, e.since), None, "not a cancelled shutdown");
    // The drain's end decides the same: never a token for a reboot that happened.
    assert!(matches!(reboot_step(&back, e.since), Step::Overtaken(_)));
    // Recorded (rebooting, handed off): verified like any reboot.
    let mut recorded = back.clone();
    recorded.state = Some(NodeState::Rebooting);
    recorded.state_since = Some(t("2026-01-05T00:04:00Z"));
    recorded.handed_off = Some(t("2026-01-05T00:04:00Z"));
    assert_eq!(overtaken(&recorded), None);
    assert_eq!(next_step(Some(&recorded), &e, &c, now), Step::MarkVerifying);
    // A kind-like node: the boot ID stays, its agent's PID 1 start tells.
    let host = |init| proto::AgentHost {
        boot_id: "boot-1".into(),
        init_start: Some(init),
        machine_id: None,
        shutdown_drain: proto::ShutdownDrain::Ready,
        inhibit_delay_seconds: Some(1020),
    };
    let mut kind = mid.clone();
    kind.init_start_before = Some(100);
    kind.agent_host = Some(host(100));
    assert!(matches!(
        next_step(Some(&kind), &e, &c, now),
        Step::Drain { .. }
    ));
    kind.agent_host = Some(host(900));
    assert!(matches!(
        next_step(Some(&kind), &e, &c, now),
        Step::Overtaken(_)
    ));
}

#[test]
fn a_shutdown_the_kubelet_went_through_first_is_handed_back_undrained() {
    let mut drained = shutdown_draining();
    assert_eq!(
        undrained_at_hand_off(&drained, t("2026-01-05T00:05:00Z")),
        None
    );
    drained.agent_host = Some(proto::AgentHost {
        boot_id: "boot-1".into(),
        init_start: None,
        machine_id: None,
        shutdown_drain: proto::ShutdownDrain::Kubelet,
        inhibit_delay_seconds: Some(20),
    });
    let why = undrained_at_hand_off(&drained, t("2026-01-05T00:05:00Z")).unwrap();
    assert!(
        why.contains("kubelet") && why.contains("shutdownGracePeriod"),
        "{why}"
    );
    // A FleetLock or token cycle on such a node is rollboot's own reboot: drained first.
    let mut fleet = fleetlock_drained("2026-01-05T00:01:00Z", &[]);
    fleet.agent_host = drained.agent_host.clone();
    assert_eq!(
        undrained_at_hand_off(&fleet, t("2026-01-05T00:05:00Z")),
        None
    );
}

#[test]
fn a_shutdown_handed_back_after_logind_let_the_host_go_is_undrained() {
    // The agent asked at 00:01:00 with logind waiting 300 s: it lets go 270 s later.
    let mut n = shutdown_draining();
    n.shutdown_requested_at = Some(t("2026-01-05T00:01:00Z"));
    n.agent_host = Some(proto::AgentHost {
        boot_id: "boot-1".into(),
        init_start: None,
        machine_id: None,
        shutdown_drain: proto::ShutdownDrain::ShortDelay,
        inhibit_delay_seconds: Some(300),
    });
    assert_eq!(undrained_at_hand_off(&n, t("2026-01-05T00:05:29Z")), None);
    let why = undrained_at_hand_off(&n, t("2026-01-05T00:05:30Z")).unwrap();
    assert!(
        why.contains("300s") && why.contains("2026-01-05T00:05:30.000Z"),
        "{why}"
    );
    // No delay written by the agent: nothing to tell it by.
    n.agent_host = None;
    assert_eq!(undrained_at_hand_off(&n, t("2026-01-05T01:00:00Z")), None);
}
