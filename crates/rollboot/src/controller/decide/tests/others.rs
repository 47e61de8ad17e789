//! The tests of what other actors and hosts' own shutdowns do to the pick, and of the
//! maintenance conditions rollboot publishes.

use super::*;
use crate::node::{MaintenanceCondition, TaintView};

fn tainted(mut n: NodeView, key: &str) -> NodeView {
    n.taints.push(TaintView {
        key: key.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    });
    n.other_actor = proto::other_actor(
        n.taints.iter().map(|t| t.key.as_str()),
        &n.maintenance_conditions,
    );
    n
}

fn cordoned(name: &str) -> NodeView {
    NodeView {
        unschedulable: true,
        ..NodeView::from_node(&node(name, &[]))
    }
}

#[test]
fn a_node_another_actor_takes_out_is_never_picked_and_holds_a_slot() {
    let none = BTreeMap::new();
    let c = cfg("concurrency: {maxNodes: 2}");
    for key in [
        proto::TAINT_TO_BE_DELETED,
        proto::TAINT_KARPENTER_DISRUPTED,
        proto::TAINT_MEDIK8S_DRAIN,
        proto::TAINT_OUT_OF_SERVICE,
    ] {
        let nodes = vec![
            tainted(flagged("a", "2026-01-01T00:00:00Z", &[]), key),
            flagged("b", "2026-01-02T00:00:00Z", &[]),
            flagged("c", "2026-01-03T00:00:00Z", &[]),
        ];
        // a is out (and not picked): one slot left of two.
        assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["b"], "{key}");
        assert!(!is_candidate(&nodes[0], &c), "{key}");
        assert!(matches!(
            out_of_service(&nodes[0], &snapshot(&nodes, &none), &c),
            Some(OutOfService::OtherMaintenance(_))
        ));
    }
}

#[test]
fn a_foreign_drain_condition_takes_the_node_out_and_ours_does_not() {
    let none = BTreeMap::new();
    let c = cfg("{}");
    let condition = |message: &str| MaintenanceCondition {
        kind: proto::CONDITION_DRAIN_IN_PROGRESS.into(),
        status: true,
        reason: "Drain".into(),
        message: message.into(),
        ours: message.starts_with(proto::CONDITION_MESSAGE_PREFIX),
        since: None,
    };
    let mut a = flagged("a", "2026-01-01T00:00:00Z", &[]);
    a.maintenance_conditions = vec![condition("drained for a NIC swap")];
    a.other_actor = proto::other_actor(
        a.taints.iter().map(|t| t.key.as_str()),
        &a.maintenance_conditions,
    );
    let b = flagged("b", "2026-01-02T00:00:00Z", &[]);
    let nodes = vec![a, b];
    // maxNodes 1, taken by a's other actor: nothing starts.
    assert!(pick(&snapshot(&nodes, &none), &c).is_empty());
    let mut ours = flagged("a", "2026-01-01T00:00:00Z", &[]);
    ours.maintenance_conditions = vec![condition("rollboot: draining for a reboot")];
    ours.other_actor = proto::other_actor(
        ours.taints.iter().map(|t| t.key.as_str()),
        &ours.maintenance_conditions,
    );
    let nodes = vec![ours];
    assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["a"]);
}

#[test]
fn a_node_maintenance_names_a_node_that_is_then_out() {
    let none = BTreeMap::new();
    let c = cfg("concurrency: {maxNodes: 2}");
    let nodes = vec![
        flagged("a", "2026-01-01T00:00:00Z", &[]),
        flagged("b", "2026-01-02T00:00:00Z", &[]),
    ];
    let maintained: BTreeMap<String, String> = [(
        "a".to_string(),
        "node-maintenance-operator (NodeMaintenance nm-a)".to_string(),
    )]
    .into();
    let s = Snapshot {
        maintained: &maintained,
        ..snapshot(&nodes, &none)
    };
    assert_eq!(names(pick(&s, &c)), ["b"]);
    assert_eq!(
        other_maintenance(&nodes[0], &s),
        Some("node-maintenance-operator (NodeMaintenance nm-a)")
    );
}

#[test]
fn count_cordoned_counts_every_cordoned_node_against_max_nodes() {
    let none = BTreeMap::new();
    let nodes = vec![
        cordoned("by-an-operator"),
        flagged("a", "2026-01-01T00:00:00Z", &[]),
    ];
    let off = cfg("{}");
    assert_eq!(names(pick(&snapshot(&nodes, &none), &off)), ["a"]);
    let on = cfg("concurrency: {countCordoned: true}");
    assert!(pick(&snapshot(&nodes, &none), &on).is_empty());
    // The cordoned node is one a pass hands over under countCordoned only.
    assert!(needs_a_look(&nodes[0], &on));
    assert!(!needs_a_look(&nodes[0], &off));
}

#[test]
fn a_host_shutting_down_takes_a_slot_from_the_moment_it_is_known() {
    let none = BTreeMap::new();
    let c = cfg("concurrency: {maxNodes: 1, maxShutdownDrains: 0}");
    let down = NodeView {
        shutdown_requested: true,
        ..NodeView::from_node(&node("down", &[]))
    };
    let nodes = vec![down, flagged("a", "2026-01-01T00:00:00Z", &[])];
    // maxShutdownDrains 0 and maxNodes 1 taken by nothing in flight: the shutdown starts...
    let s = snapshot(&nodes, &none);
    assert_eq!(names(shutting_down(&s, &c)), ["down"]);
    // ...and while it waits for its own start, no planned node takes the slot it holds.
    assert!(pick(&s, &c).is_empty());
    let two = cfg("concurrency: {maxNodes: 2}");
    assert_eq!(names(pick(&s, &two)), ["a"]);
    // Within the limit: not over it.
    assert_eq!(over_max_nodes(&s, &c), None);
    // The limit already reached by a node in flight when the shutdown arrives: over, and said.
    let lock: BTreeMap<String, LockEntry> =
        [("a".to_string(), entry("2026-01-04T00:00:00Z"))].into();
    assert_eq!(over_max_nodes(&snapshot(&nodes, &lock), &c), Some(2));
}

#[test]
fn a_host_shutting_down_under_another_actor_is_that_actors_to_drain() {
    let none = BTreeMap::new();
    let c = cfg("{}");
    let down = tainted(
        NodeView {
            shutdown_requested: true,
            ..NodeView::from_node(&node("down", &[]))
        },
        proto::TAINT_KARPENTER_DISRUPTED,
    );
    let nodes = vec![down];
    assert!(shutting_down(&snapshot(&nodes, &none), &c).is_empty());
}

fn kinds(due: &[ConditionWrite]) -> Vec<(&str, bool, &str)> {
    due.iter().map(|c| (c.kind, c.status, c.reason)).collect()
}

#[test]
fn the_maintenance_conditions_follow_the_cycle_and_end_false() {
    let windows = cfg("windows: [{schedule: \"0 2 * * 1\", duration: 2h, timezone: UTC}]");
    let waiting = flagged("a", "2026-01-01T00:00:00Z", &[]);
    let at = t("2026-01-05T02:00:00Z");
    let due = conditions_due(&waiting, &windows, Some(at));
    assert_eq!(
        kinds(&due),
        [(
            proto::CONDITION_MAINTENANCE_PLANNED,
            true,
            "MaintenanceWindow"
        )]
    );
    assert!(
        due[0].message.contains("2026-01-05T02:00:00"),
        "{}",
        due[0].message
    );
    // Without windows nothing is planned for a time: no MaintenancePlanned.
    assert!(conditions_due(&waiting, &cfg("{}"), None).is_empty());
    let draining = in_state(waiting.clone(), NodeState::Draining, "2026-01-05T02:00:00Z");
    assert_eq!(
        kinds(&conditions_due(&draining, &windows, None)),
        [(proto::CONDITION_DRAIN_IN_PROGRESS, true, "DrainStarted")]
    );
    let rebooting = in_state(
        waiting.clone(),
        NodeState::Rebooting,
        "2026-01-05T02:05:00Z",
    );
    assert_eq!(
        kinds(&conditions_due(&rebooting, &windows, None)),
        [
            (proto::CONDITION_DRAINED, true, "DrainCompleted"),
            (
                proto::CONDITION_MAINTENANCE_IN_PROGRESS,
                true,
                "RebootRequested"
            ),
        ]
    );
}

#[test]
fn conditions_another_writer_set_are_never_touched_and_ours_end_false() {
    let c = cfg("{}");
    let ours = |kind: &str| MaintenanceCondition {
        kind: kind.into(),
        status: true,
        reason: "X".into(),
        message: "rollboot: x".into(),
        ours: true,
        since: None,
    };
    let mut done = in_state(
        NodeView::from_node(&node("a", &[])),
        NodeState::Done,
        "2026-01-05T02:30:00Z",
    );
    done.maintenance_conditions = vec![
        ours(proto::CONDITION_DRAINED),
        ours(proto::CONDITION_MAINTENANCE_IN_PROGRESS),
        MaintenanceCondition {
            kind: proto::CONDITION_DRAIN_IN_PROGRESS.into(),
            status: true,
            reason: "Admin".into(),
            message: "the admin drains it".into(),
            ours: false,
            since: None,
        },
    ];
    assert!(publishing(&done));
    assert_eq!(
        kinds(&conditions_due(&done, &c, None)),
        [
            (proto::CONDITION_DRAINED, false, "MaintenanceDone"),
            (
                proto::CONDITION_MAINTENANCE_IN_PROGRESS,
                false,
                "MaintenanceDone"
            ),
        ]
    );
    // Off: nothing written at all.
    let off = cfg("nodes: {publishConditions: false}");
    assert!(conditions_due(&done, &off, None).is_empty());
}
