//! The tests of the in-flight record rebuilt from the Nodes.

use super::*;

#[test]
fn a_lost_lock_is_rebuilt_with_a_node_whose_garbled_state_holds_a_token() {
    let c = cfg("{}");
    let now = t("2026-01-01T00:02:00Z");
    let garbled = NodeView {
        state: None,
        ..rebooting(true)
    };
    let record = rebuild(
        std::slice::from_ref(&garbled),
        "c-1",
        &c,
        now,
        &BTreeSet::new(),
    );
    let e = record.get("n").expect("the node stays in flight");
    assert_eq!(
        (e.state, e.since),
        (NodeState::Rebooting, t("2026-01-01T00:01:00Z"))
    );
    assert!(matches!(
        next_step(Some(&garbled), e, &c, now),
        Step::AwaitReboot { .. }
    ));
}

#[test]
fn the_in_flight_record_is_rebuilt_from_the_states_rollboot_wrote() {
    let c = cfg("{}");
    let now = t("2026-01-01T00:02:00Z");
    let cordoned = |n: NodeView| NodeView {
        unschedulable: true,
        ..n
    };
    let nodes = vec![
        // Draining on a cordoned node: resumed.
        cordoned(in_state(
            flagged("a", "2026-01-01T00:00:00Z", &[]),
            NodeState::Draining,
            "2026-01-01T00:01:00Z",
        )),
        // Rebooting with its token: resumed, dated by its own state-since.
        NodeView {
            name: "b".into(),
            ..rebooting(true)
        },
        // A forged draining on an uncordoned node: left out.
        in_state(
            flagged("c", "2026-01-01T00:00:00Z", &[]),
            NodeState::Draining,
            "2026-01-01T00:01:00Z",
        ),
        // Done and failed are not in flight.
        in_state(
            flagged("d", "2026-01-01T00:00:00Z", &[]),
            NodeState::Done,
            "2026-01-01T00:01:00Z",
        ),
        in_state(
            flagged("e", "2026-01-01T00:00:00Z", &[]),
            NodeState::Failed,
            "2026-01-01T00:01:00Z",
        ),
        // Being deleted: nothing to resume.
        NodeView {
            deleting: true,
            ..cordoned(in_state(
                flagged("f", "2026-01-01T00:00:00Z", &[]),
                NodeState::Cordoning,
                "2026-01-01T00:01:00Z",
            ))
        },
        // No state-since: not a state rollboot wrote.
        NodeView {
            state_since: None,
            ..cordoned(in_state(
                flagged("g", "2026-01-01T00:00:00Z", &[]),
                NodeState::Draining,
                "2026-01-01T00:01:00Z",
            ))
        },
    ];
    let r = rebuild(&nodes, "c-1", &c, now, &BTreeSet::new());
    assert_eq!(r.keys().collect::<Vec<_>>(), ["a", "b"]);
    // A node this leader acts on is in flight, whatever its Node shows yet: here `c`'s
    // state without the cordon, as between the two writes of a start.
    let acting = BTreeSet::from(["c".to_string()]);
    let r2 = rebuild(&nodes, "c-1", &c, now, &acting);
    assert_eq!(r2.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(
        r["b"],
        LockEntry {
            group: None,
            state: NodeState::Rebooting,
            since: t("2026-01-01T00:01:00Z"),
            leader: "c-1".into(),
        }
    );
    // What it resumes: each goes on where it was.
    assert!(matches!(
        next_step(Some(&nodes[0]), &r["a"], &c, now),
        Step::Drain { .. }
    ));
    assert!(matches!(
        next_step(Some(&nodes[1]), &r["b"], &c, now),
        Step::AwaitReboot { .. }
    ));
}
