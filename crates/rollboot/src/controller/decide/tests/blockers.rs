//! The tests of the blockers, of resting nodes, and of failed nodes that hold a slot.

use super::*;

#[test]
fn a_node_rebooted_within_min_reboot_interval_waits_until_it_has_rested() {
    // Snapshot instant: 2026-01-05T00:00Z. `a` was rebooted 2 h before, `b` 2 days before.
    let rebooted = |name: &str, at: &str| {
        NodeView::from_node(&annotate(
            annotate(
                node(name, &[]),
                proto::REBOOT_REQUESTED,
                "2026-01-04T23:00:00Z",
            ),
            proto::LAST_REBOOT,
            at,
        ))
    };
    let nodes = vec![
        rebooted("a", "2026-01-04T22:00:00Z"),
        rebooted("b", "2026-01-03T00:00:00Z"),
    ];
    let none = BTreeMap::new();
    let c = cfg("concurrency: {maxNodes: 2}\nnodes: {minRebootInterval: 24h}");
    let s = snapshot(&nodes, &none);
    assert_eq!(names(pick(&s, &c)), ["b"]);
    assert_eq!(
        resting_until(&nodes[0], &c, s.now),
        Some(t("2026-01-05T22:00:00Z"))
    );
    assert_eq!(next_rested(&s, &c), Some(t("2026-01-05T22:00:00Z")));
    // Without the key both start; once rested, `a` starts too.
    let plain = cfg("concurrency: {maxNodes: 2}");
    assert_eq!(names(pick(&s, &plain)), ["a", "b"]);
    assert_eq!(next_rested(&s, &plain), None);
    let later = Snapshot {
        headroom: None,
        now: t("2026-01-05T22:00:00Z"),
        ..snapshot(&nodes, &none)
    };
    assert_eq!(names(pick(&later, &c)), ["a", "b"]);
}

#[test]
fn a_failure_event_says_what_failed_and_blockers_say_what_they_know() {
    assert_eq!(
        failure_event_reason(Some(NodeState::Draining)),
        "DrainFailed"
    );
    assert_eq!(
        failure_event_reason(Some(NodeState::Cordoning)),
        "DrainFailed"
    );
    assert_eq!(
        failure_event_reason(Some(NodeState::Rebooting)),
        "RebootFailed"
    );
    assert_eq!(
        failure_event_reason(Some(NodeState::Verifying)),
        "HealthGateFailed"
    );
    let b = Blocker::BlockingPods {
        selector: "app=backup".into(),
        count: 1,
    };
    assert_eq!(
        b.to_string(),
        "at least one pod matches the blocking selector `app=backup`"
    );
    let f = Blocker::TooManyFailures {
        nodes: vec!["n1".into()],
        max: 0,
    };
    assert!(f.to_string().contains("rollboot retry NODE"), "{f}");
}

#[test]
fn a_failure_beyond_max_failures_blocks_new_work() {
    let mut bad = flagged("bad", "2026-01-01T00:00:00Z", &[]);
    bad.state = Some(NodeState::Failed);
    let nodes = vec![bad, flagged("ok", "2026-01-01T00:00:00Z", &[])];
    let none = BTreeMap::new();
    let s = snapshot(&nodes, &none);
    let b = blockers(&s, &cfg("{}"), t("2026-01-05T00:00:00Z"));
    assert!(
        matches!(&b[..], [Blocker::TooManyFailures { max: 0, .. }]),
        "{b:?}"
    );
    assert!(blockers(
        &s,
        &cfg("failures: {maxFailures: 1}"),
        t("2026-01-05T00:00:00Z")
    )
    .is_empty());
    // A failed node is never picked again until an operator clears it.
    assert_eq!(names(pick(&s, &cfg("concurrency: {maxNodes: 3}"))), ["ok"]);
}

/// A node that failed in a cycle rollboot cordoned it for (and left it cordoned).
fn failed_cordoned(name: &str, labels: &[(&str, &str)]) -> NodeView {
    NodeView {
        unschedulable: true,
        cordoned_by: Some("c-0".into()),
        failure_reason: Some("the drain did not finish within 15m".into()),
        ..in_state(
            NodeView::from_node(&node(name, labels)),
            NodeState::Failed,
            "2026-01-01T00:10:00Z",
        )
    }
}

#[test]
fn a_failed_node_rollboot_left_cordoned_takes_a_slot_overall_and_in_its_group() {
    let z = "topology.kubernetes.io/zone";
    let tolerated = "failures: {maxFailures: 5}\n";
    let nodes = vec![
        failed_cordoned("a0", &[(z, "a")]),
        flagged("a1", "2026-01-01T00:00:00Z", &[(z, "a")]),
        flagged("b1", "2026-01-01T00:00:01Z", &[(z, "b")]),
    ];
    let none = BTreeMap::new();
    // maxNodes 1: the failed node is out because of rollboot; nothing else starts.
    assert!(pick(&snapshot(&nodes, &none), &cfg(tolerated)).is_empty());
    let two = cfg(&format!("{tolerated}concurrency: {{maxNodes: 2}}"));
    assert_eq!(names(pick(&snapshot(&nodes, &none), &two)), ["a1"]);
    // Per group: zone a's one slot is the failed node's.
    let zones = cfg(&format!(
        "{tolerated}concurrency: {{maxNodes: 3, groupBy: {z}, maxNodesPerGroup: 1}}"
    ));
    assert_eq!(names(pick(&snapshot(&nodes, &none), &zones)), ["b1"]);
    // Cordoned by an operator, or uncordoned since: not rollboot's to count.
    for other in [
        NodeView {
            cordoned_by: None,
            ..nodes[0].clone()
        },
        NodeView {
            unschedulable: false,
            ..nodes[0].clone()
        },
    ] {
        assert!(!holds_a_slot(&other));
        let mut ns = nodes.clone();
        ns[0] = other;
        assert_eq!(names(pick(&snapshot(&ns, &none), &two)), ["a1", "b1"]);
    }
    // Still in the lock (failed, its slot not freed yet): counted once.
    let busy = BTreeMap::from([("a0".to_string(), entry("2026-01-01T00:00:00Z"))]);
    assert_eq!(names(pick(&snapshot(&nodes, &busy), &two)), ["a1"]);
}

#[test]
fn return_to_service_uncordons_a_failed_node_only_once_its_host_is_back() {
    let on = cfg("failures: {maxFailures: 1, returnToService: true}");
    let ready = NodeView {
        ready: true,
        ..failed_cordoned("a0", &[])
    };
    let none = BTreeMap::new();
    fn back(n: &NodeView, c: &Config, lock: &BTreeMap<String, LockEntry>) -> Vec<String> {
        returning_to_service(&[n], lock, c)
            .into_iter()
            .map(|n| n.name.clone())
            .collect()
    }
    assert_eq!(back(&ready, &on, &none), ["a0"]);
    // Off by default.
    assert!(back(&ready, &cfg("failures: {maxFailures: 1}"), &none).is_empty());
    // Down, or still tainted not-ready: it stays cordoned.
    let down = NodeView {
        ready: false,
        ..ready.clone()
    };
    assert!(back(&down, &on, &none).is_empty());
    let tainted = NodeView {
        not_ready_taint: true,
        ..ready.clone()
    };
    assert!(back(&tainted, &on, &none).is_empty());
    // Quarantined by its drain: it stays cordoned with its pods until `rollboot retry`.
    let quarantined = NodeView {
        quarantined: Some("never".into()),
        ..ready.clone()
    };
    assert!(back(&quarantined, &on, &none).is_empty());
    // Not rollboot's cordon, or not freed from the lock yet.
    let theirs = NodeView {
        cordoned_by: None,
        ..ready.clone()
    };
    assert!(back(&theirs, &on, &none).is_empty());
    let busy = BTreeMap::from([("a0".to_string(), entry("2026-01-01T00:00:00Z"))]);
    assert!(back(&ready, &on, &busy).is_empty());
}

#[test]
fn unready_nodes_and_a_foreign_lock_holder_block() {
    let mut down = flagged("down", "2026-01-01T00:00:00Z", &[]);
    down.ready = false;
    let nodes = vec![down];
    let none = BTreeMap::new();
    let blocking = [("app=backup".to_string(), 2)];
    let s = Snapshot {
        maintained: &crate::controller::decide::NOT_MAINTAINED,
        headroom: None,
        nodes: &nodes.iter().collect::<Vec<_>>(),
        in_flight: &none,
        foreign_holder: Some("ops-team"),
        blocking_pods: &blocking,
        now: t("2026-01-05T00:00:00Z"),
    };
    let b = blockers(&s, &cfg("{}"), t("2026-01-05T00:00:00Z"));
    assert_eq!(b.len(), 3, "{b:?}");
    assert_eq!(b[0], Blocker::LockHeldBy("ops-team".into()));
    // The same unready node in flight is rollboot's own doing and blocks nothing.
    let busy = BTreeMap::from([("down".to_string(), entry("2026-01-01T00:00:00Z"))]);
    assert!(blockers(
        &snapshot(&nodes, &busy),
        &cfg("{}"),
        t("2026-01-05T00:00:00Z")
    )
    .is_empty());
}

#[test]
fn a_failure_within_max_failures_says_the_rollout_goes_on() {
    let halts = after_failure(1, &cfg("{}"));
    assert!(
        halts.starts_with("the rollout halts: 1 failed node(s), at most 0"),
        "{halts}"
    );
    let goes_on = after_failure(2, &cfg("failures: {maxFailures: 2}"));
    assert!(
        goes_on.starts_with("the rollout goes on: 2 failed node(s), up to 2"),
        "{goes_on}"
    );
    assert!(after_failure(3, &cfg("failures: {maxFailures: 2}")).contains("halts"));
}
