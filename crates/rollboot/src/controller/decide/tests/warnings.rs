//! The tests of what is said of malformed annotations.

use super::*;

#[test]
fn a_state_against_this_cycles_token_is_warned_about_naming_key_and_value() {
    let e = entry("2026-01-01T00:00:00Z");
    let back = in_state(rebooting(true), NodeState::Draining, "2026-01-01T00:01:30Z");
    let w = annotation_warnings(&back, Some(&e));
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!((w[0].key, w[0].value.as_str()), (proto::STATE, "draining"));
    assert!(
        w[0].note.contains("`draining`")
            && w[0].note.contains("read as rebooting")
            && w[0].note.contains("no second token"),
        "{}",
        w[0].note
    );
    let garbled = NodeView::from_node(&annotate(
        annotate(
            annotate(
                annotate(
                    annotate(node("n", &[]), proto::STATE, "banana"),
                    proto::STATE_SINCE,
                    "2026-01-01T00:01:00Z",
                ),
                proto::BOOT_ID_BEFORE,
                "boot-1",
            ),
            proto::REBOOT,
            &token("2026-01-01T00:01:00Z"),
        ),
        proto::REBOOT_ACK,
        &token("2026-01-01T00:01:00Z"),
    ));
    let w = annotation_warnings(&garbled, Some(&e));
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!((w[0].key, w[0].value.as_str()), (proto::STATE, "banana"));
    assert!(
        w[0].note.contains("goes on as rebooting") && !w[0].note.contains("starts over"),
        "{}",
        w[0].note
    );
    // Agreeing states say nothing.
    assert!(annotation_warnings(&rebooting(true), Some(&e)).is_empty());
}

#[test]
fn malformed_annotations_are_named_with_what_rollboot_does() {
    use crate::node::fixtures::annotate;
    let n = NodeView::from_node(&annotate(
        annotate(
            annotate(
                annotate(node("n7", &[]), proto::STATE, "exploding"),
                proto::BOOT_ID_BEFORE,
                " ",
            ),
            proto::REBOOT_ACK,
            "yes",
        ),
        proto::HEALTH_GATE,
        "{not json",
    ));
    assert_eq!(n.state, None);
    assert_eq!(n.boot_id_before, None);
    let w = annotation_warnings(&n, Some(&entry("2026-01-01T00:00:00Z")));
    let keys: Vec<&str> = w.iter().map(|w| w.key).collect();
    assert_eq!(
        keys,
        [
            proto::BOOT_ID_BEFORE,
            proto::REBOOT_ACK,
            proto::STATE,
            proto::HEALTH_GATE
        ]
    );
    for w in &w {
        assert!(
            w.note.starts_with("node n7: ") && w.note.contains(w.key),
            "{}",
            w.note
        );
    }
    assert!(w[2].note.contains("`exploding`") && w[2].note.contains("starts over from the cordon"));
    assert!(w[1].note.contains("agent acts on no reboot token"));
    assert!(w[3].note.contains("fails at its health gate"));
    // Outside the lock, a garbled state is only read as none.
    let outside = annotation_warnings(&n, None);
    assert!(
        outside[2].note.contains("if flagged"),
        "{}",
        outside[2].note
    );
    // And the health gate fails rather than pass blind.
    let verifying = NodeView {
        state: Some(NodeState::Verifying),
        state_since: Some(t("2026-01-01T00:01:00Z")),
        boot_id: "boot-2".into(),
        boot_id_before: Some("boot-1".into()),
        ..n
    };
    match next_step(
        Some(&verifying),
        &entry("2026-01-01T00:00:00Z"),
        &cfg("{}"),
        t("2026-01-01T00:02:00Z"),
    ) {
        Step::Fail(why) => assert!(why.contains(proto::HEALTH_GATE), "{why}"),
        s => panic!("{s:?}"),
    }
    // A clean node has nothing to say.
    assert!(annotation_warnings(
        &flagged("ok", "2026-01-01T00:00:00Z", &[]),
        Some(&entry("2026-01-01T00:00:00Z"))
    )
    .is_empty());
}
