//! The protocol's tests: views parsed from Nodes, values, the history, the patches.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::fixtures::*;
use super::*;
use crate::time;

#[test]
fn a_view_keeps_the_resource_version_and_a_fenced_patch_carries_it() {
    let mut n = node("n1", &[]);
    n.metadata.resource_version = Some("378".into());
    let v = NodeView::from_node(&n);
    assert_eq!(v.resource_version, "378");
    let p = fenced(
        patch(&state_annotations(NodeState::Draining, Utc::now()), None),
        &v.resource_version,
    );
    assert_eq!(p["metadata"]["resourceVersion"], "378");
    assert_eq!(p["metadata"]["annotations"][STATE], "draining");
    // Without a known version the write stays unconditional.
    let p = fenced(patch(&[], Some(true)), "");
    assert!(p["metadata"].get("resourceVersion").is_none());
    // `trim` keeps it, so views of the cache carry it too.
    assert_eq!(NodeView::from_node(&trim(n)).resource_version, "378");
}

#[test]
fn a_flagged_node_parses_into_its_view() {
    let n = annotate(
        node("n1", &[("zone", "a"), (EXCLUDE, "false")]),
        REBOOT_REQUIRED,
        "2026-01-01T00:00:00Z",
    );
    let v = NodeView::from_node(&n);
    assert_eq!(v.name, "n1");
    assert!(v.flagged() && v.ready && !v.excluded && !v.unschedulable);
    assert_eq!(v.boot_id, "boot-1");
    assert_eq!(v.flagged_at, time::parse_annotation("2026-01-01T00:00:00Z"));
}

#[test]
fn an_unknown_state_reads_as_no_state() {
    let v = NodeView::from_node(&annotate(node("n1", &[]), STATE, "exploding"));
    assert_eq!(v.state, None);
    let v = NodeView::from_node(&annotate(node("n1", &[]), STATE, "draining"));
    assert_eq!(v.state, Some(NodeState::Draining));
}

#[test]
fn garbled_rollboot_annotations_read_as_absent_and_are_listed() {
    let n = [
        (STATE, "exploding"),
        (STATE_SINCE, "yesterday"),
        (BOOT_ID_BEFORE, ""),
        (REBOOT, "now!"),
        (REBOOT_ACK, "ok"),
        (REBOOT_LOST, "1790000000000-ab"),
        (REBOOT_ATTEMPT, "0"),
    ]
    .into_iter()
    .fold(node("n1", &[]), |n, (k, v)| annotate(n, k, v));
    let v = NodeView::from_node(&n);
    assert_eq!(
        (v.state, v.state_since, &v.boot_id_before, &v.reboot_token),
        (None, None, &None, &None)
    );
    assert_eq!(v.reboot_attempt, None);
    // Agent keys are kept as found: a garbled ack still differs from every token.
    assert_eq!(v.reboot_ack.as_deref(), Some("ok"));
    let keys: Vec<&str> = v.malformed.iter().map(|m| m.key).collect();
    assert_eq!(
        keys,
        [
            BOOT_ID_BEFORE,
            REBOOT,
            REBOOT_ACK,
            REBOOT_ATTEMPT,
            STATE,
            STATE_SINCE
        ]
    );
    assert!(v.is_malformed(REBOOT_ACK) && !v.is_malformed(REBOOT_LOST));
    assert_eq!(v.malformed[4].value, "exploding");
    // Well-formed values parse and list nothing.
    let ok = annotate(
        annotate(
            annotate(node("n1", &[]), BOOT_ID_BEFORE, "0d1e-77"),
            REBOOT_ATTEMPT,
            "2",
        ),
        STATE,
        "rebooting",
    );
    let v = NodeView::from_node(&ok);
    assert!(v.malformed.is_empty(), "{:?}", v.malformed);
    assert_eq!(v.reboot_attempt, Some(2));
    assert!(!boot_id_well_formed("a b") && !boot_id_well_formed(&"x".repeat(129)));
}

#[test]
fn the_reboot_history_parses_counts_on_and_reports_garbage() {
    let n = [
        (LAST_REBOOT, "2026-03-01T10:00:00.000Z"),
        (LAST_BOOT_ID_BEFORE, "boot-1"),
        (LAST_BOOT_ID_AFTER, "boot-2"),
        (REBOOT_COUNT, "2"),
        (
            LAST_CYCLE,
            r#"{"drainSeconds":41.2,"rebootSeconds":95,"gateSeconds":3.1}"#,
        ),
    ]
    .into_iter()
    .fold(node("n1", &[]), |n, (k, v)| annotate(n, k, v));
    let v = NodeView::from_node(&n);
    assert!(v.malformed.is_empty(), "{:?}", v.malformed);
    assert_eq!(
        v.history,
        History {
            last_reboot: time::parse_annotation("2026-03-01T10:00:00Z"),
            boot_id_before: Some("boot-1".into()),
            boot_id_after: Some("boot-2".into()),
            count: Some(2),
            undrained_count: None,
            last_cycle: Some(LastCycle {
                drain_seconds: Some(41.2),
                reboot_seconds: Some(95.0),
                gate_seconds: Some(3.1),
                pod_exit_seconds: None,
                detach_seconds: None,
                ..LastCycle::default()
            }),
        }
    );
    let now = time::parse_annotation("2026-03-02T10:00:00Z").unwrap();
    let cycle = LastCycle::measure(
        time::parse_annotation("2026-03-02T09:58:00Z"),
        time::parse_annotation("2026-03-02T09:58:30.04Z"),
        time::parse_annotation("2026-03-02T09:59:55Z"),
        now,
        Some(2.345),
        None,
    );
    assert_eq!(
        (
            cycle.drain_seconds,
            cycle.reboot_seconds,
            cycle.gate_seconds,
            cycle.pod_exit_seconds
        ),
        (Some(30.04), Some(84.96), Some(5.0), Some(2.345))
    );
    let next: BTreeMap<_, _> = v
        .history
        .next(now, "boot-2", "boot-3", &cycle)
        .into_iter()
        .collect();
    assert_eq!(
        next[LAST_CYCLE].as_deref().and_then(LastCycle::parse),
        Some(cycle)
    );
    // Instants out of order (a clock stepped back) measure nothing rather than a negative.
    let odd = LastCycle::measure(
        Some(now),
        time::parse_annotation("2026-03-02T09:00:00Z"),
        None,
        now,
        None,
        None,
    );
    assert_eq!(odd, LastCycle::default());
    assert_eq!(next[REBOOT_COUNT].as_deref(), Some("3"));
    assert_eq!(next[LAST_BOOT_ID_BEFORE].as_deref(), Some("boot-2"));
    assert_eq!(next[LAST_BOOT_ID_AFTER].as_deref(), Some("boot-3"));
    assert_eq!(
        next[LAST_REBOOT].as_deref(),
        Some("2026-03-02T10:00:00.000Z")
    );
    // Garbage reads as absent, is listed, and the count starts again at 1.
    let bad = [
        (LAST_REBOOT, "yesterday"),
        (LAST_BOOT_ID_AFTER, "a b"),
        (REBOOT_COUNT, "0"),
        (LAST_CYCLE, r#"{"rebootSeconds":-4}"#),
    ]
    .into_iter()
    .fold(node("n1", &[]), |n, (k, v)| annotate(n, k, v));
    let v = NodeView::from_node(&bad);
    let keys: Vec<&str> = v.malformed.iter().map(|m| m.key).collect();
    assert_eq!(
        keys,
        [LAST_BOOT_ID_AFTER, LAST_CYCLE, LAST_REBOOT, REBOOT_COUNT]
    );
    assert_eq!(v.history, History::default());
    let next: BTreeMap<_, _> = v
        .history
        .next(now, "b", "c", &LastCycle::default())
        .into_iter()
        .collect();
    assert_eq!(next[REBOOT_COUNT].as_deref(), Some("1"));
}

#[test]
fn a_hand_written_request_is_undated_and_a_dated_one_orders() {
    let v = NodeView::from_node(&annotate(node("n1", &[]), REBOOT_REQUESTED, "now"));
    assert!(v.flagged() && v.request_undated);
    assert_eq!((v.requested_at, v.flagged_at), (None, None));
    // Not a malformed value: any value requests a reboot.
    assert!(v.malformed.is_empty());
    let v = NodeView::from_node(&annotate(
        node("n1", &[]),
        REBOOT_REQUESTED,
        "2026-03-01T10:00:00.000Z",
    ));
    assert!(!v.request_undated);
    assert_eq!(
        v.requested_at,
        time::parse_annotation("2026-03-01T10:00:00Z")
    );
    assert_eq!(v.flagged_at, v.requested_at);
}

#[test]
fn a_token_carries_its_issue_time() {
    let now = DateTime::from_timestamp_millis(1_790_000_000_123).unwrap();
    let t = Token::new(now, 42);
    assert_eq!(Token::parse(&t.text), Some(t.clone()));
    assert_eq!(t.issued, now);
    assert_eq!(Token::parse("garbage"), None);
}

#[test]
fn an_acknowledged_token_is_not_pending() {
    let n = annotate(annotate(node("n1", &[]), REBOOT, "1-a"), REBOOT_ACK, "1-a");
    assert_eq!(NodeView::from_node(&n).token_unacknowledged(), None);
    let n = annotate(n, REBOOT, "2-b");
    assert_eq!(NodeView::from_node(&n).token_unacknowledged(), Some("2-b"));
}

#[test]
fn a_trimmed_node_has_the_same_view_and_nothing_else() {
    use k8s_openapi::api::core::v1::{ContainerImage, NodeCondition};
    let mut n = annotate(
        annotate(node("n1", &[("zone", "a")]), STATE, "draining"),
        "other.example/owner",
        "x",
    );
    n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
    let mut n = taint(
        taint(n, TAINT_UNSCHEDULABLE, "NoSchedule"),
        "gpu.example/busy",
        "NoSchedule",
    );
    let st = n.status.get_or_insert_with(Default::default);
    st.images = Some(vec![ContainerImage {
        names: Some(vec!["big".into()]),
        size_bytes: Some(1),
    }]);
    st.conditions
        .get_or_insert_with(Vec::new)
        .push(NodeCondition {
            type_: "MemoryPressure".into(),
            status: "False".into(),
            ..Default::default()
        });
    let t = trim(n.clone());
    // The same view but for the foreign annotation, which only `trim_keeping` keeps.
    let full = NodeView::from_node(&n);
    assert_eq!(
        NodeView::from_node(&t),
        NodeView {
            other_annotations: BTreeMap::new(),
            ..full.clone()
        }
    );
    let kept = trim_keeping(n.clone(), &["other.example/owner".to_string()]);
    assert_eq!(NodeView::from_node(&kept), full);
    assert_eq!(full.other_annotations["other.example/owner"], "x");
    let ann = t.metadata.annotations.as_ref().unwrap();
    assert!(ann.keys().all(|k| k.starts_with(PREFIX)), "{ann:?}");
    let st = t.status.unwrap();
    assert!(st.images.is_none());
    let types: Vec<_> = st
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert_eq!(types, vec!["Ready".to_string()]);
    assert_eq!(t.metadata.resource_version, n.metadata.resource_version);
    let keys: Vec<_> = t
        .spec
        .unwrap()
        .taints
        .unwrap()
        .into_iter()
        .map(|t| t.key)
        .collect();
    // Every taint: a write of the list is built from it.
    assert_eq!(
        keys,
        vec![TAINT_UNSCHEDULABLE.to_string(), "gpu.example/busy".into()]
    );
}

#[test]
fn the_node_lifecycle_taints_are_read_into_the_view() {
    let n = node("n1", &[]);
    let v = NodeView::from_node(&n);
    assert!(!v.not_ready_taint && !v.unschedulable_taint && !v.cordon_taint_pending());
    for key in [TAINT_NOT_READY, TAINT_UNREACHABLE] {
        let v = NodeView::from_node(&taint(n.clone(), key, "NoExecute"));
        assert!(v.not_ready_taint, "{key}");
    }
    // Cordoned, and the node-lifecycle controller has not copied it into its taint yet.
    let mut cordoned = n.clone();
    cordoned
        .spec
        .get_or_insert_with(Default::default)
        .unschedulable = Some(true);
    assert!(NodeView::from_node(&cordoned).cordon_taint_pending());
    let mirrored = taint(cordoned, TAINT_UNSCHEDULABLE, "NoSchedule");
    assert!(!NodeView::from_node(&mirrored).cordon_taint_pending());
    // Uncordoned, the taint not yet removed.
    let mut uncordoned = mirrored;
    uncordoned
        .spec
        .get_or_insert_with(Default::default)
        .unschedulable = None;
    assert!(NodeView::from_node(&uncordoned).cordon_taint_pending());
}

#[test]
fn uncordon_patch_removes_the_field() {
    let p = patch(&[(CORDONED_BY, None)], Some(false));
    assert_eq!(p["spec"]["unschedulable"], Value::Null);
    assert_eq!(p["metadata"]["annotations"][CORDONED_BY], Value::Null);
}

#[test]
fn a_boot_is_its_boot_id_and_where_recorded_its_pid_1s_start() {
    // Recorded without PID 1's start: the boot ID alone decides.
    assert!(same_boot("b-1", None, "B-1", Some(9)));
    assert!(!same_boot("b-1", None, "b-2", None));
    // Recorded with it: both must be the same; one not known now is taken as the same.
    assert!(same_boot("b-1", Some(57), "b-1", Some(57)));
    assert!(!same_boot("b-1", Some(57), "b-1", Some(58)));
    assert!(same_boot("b-1", Some(57), "b-1", None));
    assert!(!same_boot("b-1", Some(57), "b-2", Some(57)));
    // The Node's side: PID 1's start counts only from a record of the boot ID it reports.
    let host = |boot: &str, init| AgentHost {
        boot_id: boot.into(),
        init_start: Some(init),
        machine_id: None,
        shutdown_drain: ShutdownDrain::Ready,
        inhibit_delay_seconds: Some(1020),
    };
    let mut v = NodeView::from_node(&annotate(
        annotate(node("n1", &[]), INIT_START_BEFORE, "57"),
        AGENT_HOST,
        &host("b-1", 57).to_annotation(),
    ));
    v.boot_id = "b-1".into();
    assert_eq!(v.init_start_before, Some(57));
    assert_eq!(
        v.boot_before(),
        [
            (BOOT_ID_BEFORE, Some("b-1".to_string())),
            (INIT_START_BEFORE, Some("57".to_string()))
        ]
    );
    assert!(!v.booted_since("b-1") && v.booted_since("b-0"));
    v.agent_host = Some(host("b-1", 3));
    assert!(v.booted_since("b-1"), "PID 1 started again");
    v.agent_host = Some(host("b-0", 3));
    assert!(!v.booted_since("b-1"), "a stale record says nothing");
    assert_eq!(v.boot_before()[1], (INIT_START_BEFORE, None));
    assert_eq!(
        AgentHost::parse(&host("b-1", 57).to_annotation()),
        Some(host("b-1", 57))
    );
    assert_eq!(AgentHost::parse("junk"), None);
    let bad = NodeView::from_node(&annotate(node("n1", &[]), INIT_START_BEFORE, "soon"));
    assert!(bad.is_malformed(INIT_START_BEFORE));
}

#[test]
fn an_undrained_cycle_is_counted_apart_from_the_reboots() {
    let h = History {
        count: Some(4),
        ..History::default()
    };
    let drained = h.next(Utc::now(), "b-1", "b-2", &LastCycle::default());
    let get = |v: &[(&str, Option<String>)], k: &str| {
        v.iter()
            .find(|(key, _)| *key == k)
            .and_then(|(_, v)| v.clone())
    };
    assert_eq!(get(&drained, REBOOT_COUNT).as_deref(), Some("5"));
    assert_eq!(get(&drained, UNDRAINED_COUNT), None);
    let cycle = LastCycle {
        undrained: Some("the host went down mid-drain".into()),
        ..LastCycle::default()
    };
    let undrained = h.next(Utc::now(), "b-1", "b-2", &cycle);
    assert_eq!(get(&undrained, REBOOT_COUNT), None);
    assert_eq!(get(&undrained, UNDRAINED_COUNT).as_deref(), Some("1"));
    let text = get(&undrained, LAST_CYCLE).unwrap();
    assert_eq!(LastCycle::parse(&text).unwrap().undrained, cycle.undrained);
}
