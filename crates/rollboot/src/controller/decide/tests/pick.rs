//! The tests of the pick: order, slots, groups, FleetLock groups and budgets.

use super::*;

#[test]
fn the_oldest_flag_goes_first_and_max_nodes_caps_the_batch() {
    let nodes = vec![
        flagged("a", "2026-01-03T00:00:00Z", &[]),
        flagged("b", "2026-01-01T00:00:00Z", &[]),
        flagged("c", "2026-01-02T00:00:00Z", &[]),
    ];
    let none = BTreeMap::new();
    let c = cfg("concurrency: {maxNodes: 2}");
    assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["b", "c"]);
    let c = cfg("nodes: {order: name}");
    assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["a"]);
}

#[test]
fn a_node_whose_budget_is_held_is_passed_over_and_taken_once_the_budget_has_room() {
    // x drains (in the lock), and its pod under budget `web` is not yet evicted; a and b
    // wait before c in order, and their pods are under `web` too.
    let (mut nodes, lock) = three_waiting_and_x_draining();
    let c = cfg("concurrency: {maxNodes: 2}");
    let held = headroom(
        &[
            ("x", &["web"]),
            ("a", &["web"]),
            ("b", &["web", "db"]),
            ("c", &["db"]),
        ],
        &[("web", 1), ("db", 1)],
        &[],
    );
    let s = Snapshot {
        headroom: Some(&held),
        ..snapshot(&nodes, &lock)
    };
    let d = pick_detail(&s, &c);
    assert_eq!(names(d.nodes), ["c"]);
    let passed: Vec<(&str, &str)> = d
        .passed_over
        .iter()
        .map(|(n, h)| (n.name.as_str(), h.budget.as_str()))
        .collect();
    assert_eq!(passed, [("a", "ns/web"), ("b", "ns/web")]);
    assert_eq!(d.passed_over[0].1.taken_by, ["x"]);
    // Without the budget-aware pick, order only.
    let off = cfg("concurrency: {maxNodes: 2, passOverFor: 0s}");
    assert_eq!(names(pick(&s, &off)), ["a"]);
    // x's pod was evicted and its replacement is Ready: the budget allows one again and
    // x no longer owes it. a goes first again (order is the first criterion).
    let room = headroom(
        &[
            ("x", &["web"]),
            ("a", &["web"]),
            ("b", &["web", "db"]),
            ("c", &["db"]),
        ],
        &[("web", 1), ("db", 1)],
        &["web-x"],
    );
    nodes[3] = in_state(
        nodes[3].clone(),
        NodeState::Rebooting,
        "2026-01-04T00:01:00Z",
    );
    let s = Snapshot {
        headroom: Some(&room),
        ..snapshot(&nodes, &lock)
    };
    let d = pick_detail(&s, &c);
    assert_eq!(names(d.nodes), ["a"]);
    assert!(d.passed_over.is_empty());
    // Two free slots: a takes `web`, so b (sharing it) is passed over for c.
    let c3 = cfg("concurrency: {maxNodes: 3}");
    let d = pick_detail(&s, &c3);
    assert_eq!(names(d.nodes), ["a", "c"]);
    assert_eq!(d.passed_over[0].1.taken_by, ["a"]);
}

#[test]
fn with_no_node_with_room_the_held_ones_fill_the_free_slots_in_order() {
    let nodes = vec![
        flagged("a", "2026-01-01T00:00:00Z", &[]),
        flagged("b", "2026-01-02T00:00:00Z", &[]),
        flagged("c", "2026-01-03T00:00:00Z", &[]),
    ];
    let none = BTreeMap::new();
    let c = cfg("concurrency: {maxNodes: 2}");
    let all_held = headroom(
        &[("a", &["web"]), ("b", &["web"]), ("c", &["web"])],
        &[("web", 0)],
        &[],
    );
    let s = Snapshot {
        headroom: Some(&all_held),
        ..snapshot(&nodes, &none)
    };
    let d = pick_detail(&s, &c);
    // An idle slot does nothing; a held drain evicts its other pods meanwhile.
    assert_eq!(names(d.nodes), ["a", "b"]);
    assert_eq!(d.passed_over.len(), 1);
    assert_eq!(d.passed_over[0].0.name, "c");
}

#[test]
fn a_slot_no_node_with_room_fills_goes_to_the_held_node_whose_drain_waits_least() {
    // x drains and still owes `web` its pod; `db` is at 0 with nobody owing it (a
    // disruption granted, its replacement on its way). a waits behind x's eviction and
    // its replacement, b only behind db's replacement, c behind both.
    let (nodes, lock) = three_waiting_and_x_draining();
    let held = headroom(
        &[
            ("x", &["web"]),
            ("a", &["web"]),
            ("b", &["db"]),
            ("c", &["web", "db"]),
        ],
        &[("web", 1), ("db", 0)],
        &[],
    );
    let s = Snapshot {
        headroom: Some(&held),
        ..snapshot(&nodes, &lock)
    };
    let d = pick_detail(&s, &cfg("concurrency: {maxNodes: 2}"));
    assert_eq!(names(d.nodes), ["b"]);
    let passed: Vec<&str> = d.passed_over.iter().map(|(n, _)| n.name.as_str()).collect();
    assert_eq!(passed, ["a", "c"]);
    // Two free slots: b, then a before c (c waits on both budgets).
    let d = pick_detail(&s, &cfg("concurrency: {maxNodes: 3}"));
    assert_eq!(names(d.nodes), ["b", "a"]);
}

#[test]
fn a_node_passed_over_is_taken_anyway_once_passed_over_for_its_bound() {
    let passed = |since: &str| {
        let v = serde_json::json!({"since": since, "budget": "ns/web", "why": "w"});
        let n = annotate(
            node("a", &[]),
            proto::REBOOT_REQUIRED,
            "2026-01-01T00:00:00Z",
        );
        NodeView::from_node(&annotate(n, proto::PASSED_OVER, &v.to_string()))
    };
    let c = cfg("concurrency: {maxNodes: 1, passOverFor: 10m}");
    let budgets = headroom(
        &[("a", &["web"]), ("b", &["db"])],
        &[("web", 0), ("db", 1)],
        &[],
    );
    let none = BTreeMap::new();
    // The snapshot's now is 2026-01-05T00:00:00Z: passed over 9 minutes ago, it waits...
    let nodes = vec![
        passed("2026-01-04T23:51:00Z"),
        flagged("b", "2026-01-02T00:00:00Z", &[]),
    ];
    let s = Snapshot {
        headroom: Some(&budgets),
        ..snapshot(&nodes, &none)
    };
    let d = pick_detail(&s, &c);
    assert_eq!(names(d.nodes), ["b"]);
    assert_eq!(d.passed_over.len(), 1);
    assert!(d.taken_anyway.is_empty());
    // ...passed over 10 minutes ago, it is taken although its budget still allows none.
    let nodes = vec![
        passed("2026-01-04T23:50:00Z"),
        flagged("b", "2026-01-02T00:00:00Z", &[]),
    ];
    let s = Snapshot {
        headroom: Some(&budgets),
        ..snapshot(&nodes, &none)
    };
    let d = pick_detail(&s, &c);
    assert_eq!(names(d.nodes), ["a"]);
    assert!(d.passed_over.is_empty());
    assert_eq!(d.taken_anyway[0].1.budget, "ns/web");
    // Its record is stale once it is no longer waiting: housekeeping removes it.
    assert!(stale_passed_over(&[&nodes[0]], &none, &c).is_empty());
    let unflagged = NodeView {
        reboot_required: false,
        ..nodes[0].clone()
    };
    assert_eq!(stale_passed_over(&[&unflagged], &none, &c).len(), 1);
}

#[test]
fn a_hand_written_request_is_dated_before_anything_is_picked() {
    let by_hand = NodeView::from_node(&annotate(node("b", &[]), proto::REBOOT_REQUESTED, "now"));
    let nodes = vec![
        flagged("a", "2026-01-01T00:00:00Z", &[]),
        by_hand.clone(),
        NodeView::from_node(&annotate(
            node("c", &[]),
            proto::REBOOT_REQUESTED,
            "2026-01-01T00:05:00Z",
        )),
    ];
    let undated: Vec<&str> = undated_requests(&nodes)
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(undated, ["b"]);
    // Undated, it would sort last; dated with the instant the controller saw it (00:03),
    // it takes its turn between the flags before and after that instant.
    let c = cfg("concurrency: {maxNodes: 3}");
    let none = BTreeMap::new();
    assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["a", "c", "b"]);
    let mut dated = nodes.clone();
    dated[1] = NodeView::from_node(&annotate(
        node("b", &[]),
        proto::REBOOT_REQUESTED,
        "2026-01-01T00:03:00.000Z",
    ));
    assert!(undated_requests(&dated).is_empty());
    assert_eq!(names(pick(&snapshot(&dated, &none), &c)), ["a", "b", "c"]);
    // A node being deleted is left alone.
    let deleting = NodeView {
        deleting: true,
        ..by_hand
    };
    assert!(undated_requests(&[deleting]).is_empty());
}

#[test]
fn a_full_lock_starts_nothing() {
    let nodes = vec![flagged("a", "2026-01-01T00:00:00Z", &[])];
    let busy = BTreeMap::from([("z".to_string(), entry("2026-01-01T00:00:00Z"))]);
    assert!(pick(&snapshot(&nodes, &busy), &cfg("{}")).is_empty());
}

#[test]
fn excluded_unselected_and_unflagged_nodes_are_never_candidates() {
    let nodes = vec![
        flagged(
            "excluded",
            "2026-01-01T00:00:00Z",
            &[(proto::EXCLUDE, "true")],
        ),
        flagged("gpu", "2026-01-01T00:00:00Z", &[("pool", "gpu")]),
        NodeView::from_node(&node("quiet", &[("pool", "web")])),
        flagged("web", "2026-01-02T00:00:00Z", &[("pool", "web")]),
    ];
    let none = BTreeMap::new();
    let c = cfg("nodes: {selector: 'pool=web'}\nconcurrency: {maxNodes: 5}");
    assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["web"]);
}

#[test]
fn the_per_group_limit_spreads_a_batch_across_zones() {
    let z = "topology.kubernetes.io/zone";
    let nodes = vec![
        flagged("a1", "2026-01-01T00:00:00Z", &[(z, "a")]),
        flagged("a2", "2026-01-01T00:00:01Z", &[(z, "a")]),
        flagged("b1", "2026-01-01T00:00:02Z", &[(z, "b")]),
        flagged("c1", "2026-01-01T00:00:03Z", &[(z, "c")]),
    ];
    let c = cfg(
        "concurrency: {maxNodes: 2, groupBy: topology.kubernetes.io/zone, maxNodesPerGroup: 1}",
    );
    let none = BTreeMap::new();
    assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["a1", "b1"]);
    let busy = BTreeMap::from([("a1".to_string(), entry("2026-01-01T00:00:00Z"))]);
    assert_eq!(names(pick(&snapshot(&nodes, &busy), &c)), ["b1"]);
    // A node whose Node is gone (deleted mid-cycle) still counts in the group its entry
    // recorded (the chaos campaign, seed 27: a second node of zone-b started beside one
    // deleted while draining)...
    let gone = |group: Option<&str>| {
        BTreeMap::from([(
            "b0".to_string(),
            LockEntry {
                group: group.map(str::to_string),
                ..entry("2026-01-01T00:00:00Z")
            },
        )])
    };
    assert_eq!(names(pick(&snapshot(&nodes, &gone(Some("b"))), &c)), ["a1"]);
    // ... and in every group when its entry records none.
    assert!(pick(&snapshot(&nodes, &gone(None)), &c).is_empty());
    assert_eq!(group_of(&nodes[2], &c).as_deref(), Some("b"));
    assert_eq!(group_of(&nodes[2], &cfg("{}")), None);
}

#[test]
fn without_a_group_limit_the_first_free_slots_are_picked_in_order_as_a_full_sort_would() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
    for yaml in [
        "concurrency: {maxNodes: 3}\nnodes: {order: name}",
        "concurrency: {maxNodes: 3}",
    ] {
        let config = cfg(yaml);
        for _ in 0..200 {
            let views: Vec<NodeView> = (0..rng.random_range(0..12))
                .map(|i| {
                    let at = format!("2026-01-0{}T00:00:00Z", rng.random_range(1..4));
                    let at = if rng.random_bool(0.1) {
                        "now".into()
                    } else {
                        at
                    };
                    flagged(
                        &format!("n-{:02}", rng.random_range(0..40) * 12 + i),
                        &at,
                        &[],
                    )
                })
                .collect();
            let mut in_flight = BTreeMap::new();
            for v in views.iter().filter(|_| rng.random_bool(0.15)).take(2) {
                in_flight.insert(v.name.clone(), entry("2026-01-01T00:00:00Z"));
            }
            let mut all: Vec<&NodeView> = views
                .iter()
                .filter(|v| !in_flight.contains_key(&v.name))
                .collect();
            sort_candidates(&mut all, config.nodes.order);
            all.truncate(3 - in_flight.len());
            let s = snapshot(&views, &in_flight);
            assert_eq!(names(pick(&s, &config)), names(all), "{yaml}");
        }
    }
}

#[test]
fn a_fleetlock_groups_own_max_nodes_limits_its_hosts() {
    let c = cfg(
        "concurrency: {maxNodes: 3}\nfleetlock: {listen: '127.0.0.1:0', groups: {edge: {maxNodes: 1}, default: {maxNodes: 3}}}",
    );
    let host = |name: &str, at: &str, group: &str| {
        let mut n = node(name, &[]);
        for (k, v) in [
            (proto::REBOOT_REQUESTED, at),
            (proto::REBOOT_REQUESTED_REASON, proto::FLEETLOCK_REASON),
        ] {
            n = annotate(n, k, v);
        }
        let rec = format!(r#"{{"id":"{name}","group":"{group}"}}"#);
        NodeView::from_node(&annotate(n, proto::FLEETLOCK, &rec))
    };
    let nodes = vec![
        host("e1", "2026-01-01T00:00:00Z", "edge"),
        host("e2", "2026-01-02T00:00:00Z", "edge"),
        host("d1", "2026-01-03T00:00:00Z", "default"),
        flagged("x", "2026-01-04T00:00:00Z", &[]),
    ];
    let none = BTreeMap::new();
    assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["e1", "d1", "x"]);
    // With e1 in flight, e2 still waits.
    let busy: BTreeMap<String, LockEntry> =
        [("e1".to_string(), entry("2026-01-05T00:00:00Z"))].into();
    assert_eq!(names(pick(&snapshot(&nodes, &busy), &c)), ["d1", "x"]);
}
