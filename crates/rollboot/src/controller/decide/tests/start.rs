//! The tests of the start of new nodes as one decision: what each stage decides, and what it
//! asks to be read before the next.

use super::*;

/// The stage after the first look, when nodes wait.
fn queued(first: Start<'_>) -> Queued<'_> {
    match first.then {
        Then::Queued(q) => q,
        Then::Shutdowns(_) => panic!("shutdowns start alone, nothing queued"),
        Then::NothingWaits => panic!("nothing waits"),
    }
}

/// A node whose host shuts down by itself, asked at `at`.
fn shutting(name: &str, at: &str) -> NodeView {
    let mut n = NodeView::from_node(&node(name, &[]));
    n.shutdown_requested = true;
    n.shutdown_requested_at = Some(t(at));
    n
}

#[test]
fn hosts_shutting_down_start_alone_within_their_room_and_the_rest_are_deferred() {
    let nodes = vec![
        shutting("n2", "2026-01-05T00:00:02Z"),
        shutting("n0", "2026-01-05T00:00:00Z"),
        flagged("a", "2026-01-01T00:00:00Z", &[]),
        shutting("n1", "2026-01-05T00:00:01Z"),
    ];
    let none = BTreeMap::new();
    // maxNodes 1 + maxShutdownDrains 1: the two oldest requests start, the third waits.
    let c = cfg("concurrency: {groupBy: zone}");
    let first = start(&snapshot(&nodes, &none), &c);
    assert_eq!(names(first.deferred_shutdowns), ["n2"]);
    assert!(first.undrained_shutdowns.is_empty());
    let Then::Shutdowns(starting) = first.then else {
        panic!("the shutdowns start first");
    };
    let slots: Vec<(String, Option<String>)> = starting.iter().map(Starting::slot).collect();
    assert_eq!(
        slots,
        [
            ("n0".to_string(), Some(String::new())),
            ("n1".to_string(), Some(String::new()))
        ]
    );
}

#[test]
fn under_another_holder_the_shutdowns_are_named_undrained_and_the_holder_blocks_the_others() {
    let nodes = vec![
        shutting("n0", "2026-01-05T00:00:00Z"),
        flagged("a", "2026-01-01T00:00:00Z", &[]),
    ];
    let none = BTreeMap::new();
    let c = cfg("{}");
    let s = Snapshot {
        foreign_holder: Some("ops-team"),
        ..snapshot(&nodes, &none)
    };
    let first = start(&s, &c);
    assert_eq!(names(first.undrained_shutdowns.clone()), ["n0"]);
    assert!(first.deferred_shutdowns.is_empty());
    let now = t("2026-01-05T00:00:01Z");
    let Err(blocked) = queued(first).blockers_read(&[], Vec::new(), now) else {
        panic!("another holder blocks");
    };
    assert_eq!(blocked.blockers, [Blocker::LockHeldBy("ops-team".into())]);
    assert_eq!(blocked.look_again, now + chrono::Duration::seconds(30));
}

#[test]
fn with_no_candidate_waiting_nothing_is_read_nor_said() {
    let mut down = NodeView::from_node(&node("down", &[]));
    down.ready = false;
    let started = flagged("x", "2026-01-01T00:00:00Z", &[]);
    let nodes = vec![down, started];
    let lock = BTreeMap::from([("x".to_string(), entry("2026-01-04T00:00:00Z"))]);
    let c = cfg("{}");
    let first = start(&snapshot(&nodes, &lock), &c);
    assert!(matches!(first.then, Then::NothingWaits));
    assert!(first.deferred_shutdowns.is_empty() && first.undrained_shutdowns.is_empty());
}

#[test]
fn a_blocked_start_names_each_blocker_and_when_to_look_again() {
    let mut down = flagged("down", "2026-01-01T00:00:00Z", &[]);
    down.ready = false;
    let nodes = vec![down, flagged("a", "2026-01-02T00:00:00Z", &[])];
    let none = BTreeMap::new();
    let s = snapshot(&nodes, &none);
    let c = cfg("{}");
    let now = t("2026-01-05T00:00:01Z");
    let unready = Blocker::TooManyUnready {
        nodes: vec!["down".into()],
        max: 0,
    };
    // The unready node and a blocking pod: looked at again after the safety-net wait.
    let pods = [("app=backup".to_string(), 1)];
    let Err(b) = queued(start(&s, &c)).blockers_read(&pods, Vec::new(), now) else {
        panic!("blocked");
    };
    let backup = Blocker::BlockingPods {
        selector: "app=backup".into(),
        count: 1,
    };
    assert_eq!(b.blockers, [unready.clone(), backup]);
    assert_eq!(b.look_again, now + chrono::Duration::seconds(30));
    // Alerts are not watched: asked again soon.
    let alerts = vec![Blocker::Alerts {
        names: vec!["DiskFull".into()],
    }];
    let Err(b) = queued(start(&s, &c)).blockers_read(&[], alerts.clone(), now) else {
        panic!("blocked");
    };
    assert_eq!(b.blockers, [unready, alerts[0].clone()]);
    assert_eq!(b.look_again, now + chrono::Duration::seconds(5));
    // A closed window: looked at again when the next one opens.
    let ready = vec![flagged("a", "2026-01-02T00:00:00Z", &[])];
    let nightly = cfg("windows:\n  - schedule: \"0 2 * * *\"\n    duration: 1h\n");
    let s = snapshot(&ready, &none);
    let Err(b) = queued(start(&s, &nightly)).blockers_read(&[], Vec::new(), now) else {
        panic!("blocked");
    };
    assert_eq!(b.blockers, [Blocker::WindowClosed]);
    assert_eq!(b.look_again, t("2026-01-05T02:00:00Z"));
}

#[test]
fn the_plan_names_the_nodes_started_passed_over_and_resting_and_when_to_look_again() {
    // The snapshot's now is 2026-01-05T00:00:00Z. `a` was passed over 5 minutes ago for its
    // budget `web`, which still allows none; `b` has room; `r` rebooted 2 h ago.
    let v = serde_json::json!({"since": "2026-01-04T23:55:00Z", "budget": "ns/web", "why": "w"});
    let a = annotate(
        node("a", &[]),
        proto::REBOOT_REQUIRED,
        "2026-01-01T00:00:00Z",
    );
    let a = NodeView::from_node(&annotate(a, proto::PASSED_OVER, &v.to_string()));
    let r = annotate(
        annotate(
            node("r", &[]),
            proto::REBOOT_REQUIRED,
            "2025-12-31T00:00:00Z",
        ),
        proto::LAST_REBOOT,
        "2026-01-04T22:00:00Z",
    );
    let nodes = vec![
        a,
        flagged("b", "2026-01-02T00:00:00Z", &[]),
        NodeView::from_node(&r),
    ];
    let none = BTreeMap::new();
    let c = cfg("concurrency: {maxNodes: 1, passOverFor: 10m}\nnodes: {minRebootInterval: 24h}");
    let s = snapshot(&nodes, &none);
    let now = s.now;
    let Ok(pick) = queued(start(&s, &c)).blockers_read(&[], Vec::new(), now) else {
        panic!("nothing blocks");
    };
    // The pick asks for the budgets of the nodes it looks at (not the resting one).
    let reads = pick
        .budget_reads()
        .expect("the budget-aware pick reads budgets");
    assert_eq!(names(reads.looked_at.to_vec()), ["a", "b"]);
    assert!(reads.draining.is_empty());
    assert_eq!(reads.reads, reads_per_pass(1));
    let budgets = headroom(
        &[("a", &["web"]), ("b", &["db"])],
        &[("web", 0), ("db", 1)],
        &[],
    );
    let plan = pick.decide(Some(&budgets));
    let started: Vec<(String, Option<String>)> = plan.start.iter().map(Starting::slot).collect();
    assert_eq!(started, [("b".to_string(), None)]);
    let passed: Vec<(&str, &str)> = plan
        .passed_over
        .iter()
        .map(|(n, h)| (n.name.as_str(), h.budget.as_str()))
        .collect();
    assert_eq!(passed, [("a", "ns/web")]);
    assert!(plan.taken_anyway.is_empty());
    let resting: Vec<(&str, DateTime<Utc>)> = plan
        .resting
        .iter()
        .map(|(n, until)| (n.name.as_str(), *until))
        .collect();
    assert_eq!(resting, [("r", t("2026-01-05T22:00:00Z"))]);
    // The soonest of: `a` taken anyway once passed over for 10 minutes, `r` rested.
    assert_eq!(plan.look_again, Some(t("2026-01-05T00:05:00Z")));
}

#[test]
fn without_the_budget_aware_pick_nothing_is_read_and_nodes_are_taken_in_order() {
    let nodes = vec![
        flagged("b", "2026-01-02T00:00:00Z", &[]),
        flagged("a", "2026-01-01T00:00:00Z", &[]),
    ];
    let none = BTreeMap::new();
    let c = cfg("concurrency: {maxNodes: 1, passOverFor: 0s}");
    let s = snapshot(&nodes, &none);
    let Ok(pick) = queued(start(&s, &c)).blockers_read(&[], Vec::new(), s.now) else {
        panic!("nothing blocks");
    };
    assert!(pick.budget_reads().is_none());
    let plan = pick.decide(None);
    assert_eq!(names(plan.start.iter().map(|s| s.node).collect()), ["a"]);
    assert!(plan.passed_over.is_empty() && plan.resting.is_empty());
    assert_eq!(plan.look_again, None);
}
