//! Unit tests of the pure hook decisions: each phase's steps from a node's view, the config and
//! now, and the writes that record them.

use super::*;
use crate::config::parse_str;
use crate::node::fixtures::{annotate, node, taint};
use crate::node::{NodeView, HOOKS};

fn t(s: &str) -> DateTime<Utc> {
    crate::time::parse_annotation(s).unwrap()
}

fn cfg(yaml: &str) -> Config {
    parse_str(yaml).unwrap_or_else(|p| panic!("{p:?}"))
}

/// A node flagged by its agent, whose annotations are `ann`.
fn view(ann: &[(&str, &str)]) -> NodeView {
    let n = ann.iter().fold(
        annotate(
            annotate(
                node("n1", &[]),
                proto::REBOOT_REQUIRED,
                "2026-01-01T00:00:00Z",
            ),
            proto::REBOOT_REQUIRED_REASON,
            "kernel 6.9 installed",
        ),
        |n, (k, v)| annotate(n, k, v),
    );
    let mut v = NodeView::from_node(&n);
    v.resource_version = "7".into();
    v
}

/// `v` after the annotations of a merge patch `p` (what the API server would store).
fn apply(v: &NodeView, p: &Value) -> NodeView {
    let mut v = v.clone();
    for (k, val) in p["metadata"]["annotations"].as_object().unwrap() {
        if k == HOOKS {
            v.hooks = val.as_str().map(str::to_string);
        } else if val.is_null() {
            v.other_annotations.remove(k);
        }
    }
    v
}

const SINCE: &str = "2026-01-01T00:01:00Z";

const BLOCKING: &str = "
hooks:
  beforeDrain:
    timeout: 10m
    webhooks:
      - {name: ticket, url: 'http://127.0.0.1:9/t', blocking: true, backoff: 2s, requestTimeout: 5s}
      - {name: tell, url: 'http://127.0.0.1:9/n'}
";

#[test]
fn nothing_configured_passes_at_once_and_writes_nothing() {
    let c = cfg("{}");
    for phase in Phase::ALL {
        assert_eq!(
            next(phase, &c, &view(&[]), t(SINCE), t(SINCE)),
            Next::Passed
        );
        assert!(!configured(&c, phase));
    }
    // drain.settle alone is an afterDrain step.
    let c = cfg("drain: {settle: 30s}");
    assert!(configured(&c, Phase::AfterDrain) && !configured(&c, Phase::BeforeDrain));
}

#[test]
fn a_phase_begins_fires_asks_then_passes_each_step_recorded_first() {
    let c = cfg(BLOCKING);
    let now = t("2026-01-01T00:01:10Z");
    let n = view(&[]);
    assert_eq!(
        next(Phase::BeforeDrain, &c, &n, t(SINCE), now),
        Next::Act(Action::Begin)
    );
    let n = apply(&n, &begin_patch(Phase::BeforeDrain, &c, &n, now));
    let r = record(&n).unwrap();
    assert_eq!(r.rollout, format!("n1-{}", now.timestamp_millis()));
    assert_eq!(r.reason, "kernel 6.9 installed");
    // The fire-and-forget one is recorded (and sent) first, the blocking one asked next.
    assert_eq!(
        next(Phase::BeforeDrain, &c, &n, t(SINCE), now),
        Next::Act(Action::Fire(vec!["tell".into()]))
    );
    let n = apply(
        &n,
        &fire_patch(
            Phase::BeforeDrain,
            &n,
            now,
            &[("tell".into(), "tok-n".into())],
        ),
    );
    assert_eq!(
        next(Phase::BeforeDrain, &c, &n, t(SINCE), now),
        Next::Act(Action::Call {
            name: "ticket".into(),
            attempt: 1,
            token: None
        })
    );
    let n = apply(
        &n,
        &call_patch(Phase::BeforeDrain, &n, now, "ticket", "tok-1", 1),
    );
    let yes = Answer {
        yes: true,
        detail: "HTTP 200".into(),
        at: now,
    };
    let n = apply(
        &n,
        &answer_patch(Phase::BeforeDrain, &n, "ticket", "tok-1", 1, yes.clone()).unwrap(),
    );
    // The same answer again, or to another token: nothing to record.
    assert!(answer_patch(Phase::BeforeDrain, &n, "ticket", "tok-1", 1, yes.clone()).is_none());
    assert_eq!(
        next(Phase::BeforeDrain, &c, &n, t(SINCE), now),
        Next::Act(Action::Pass)
    );
    let n = apply(&n, &pass_patch(Phase::BeforeDrain, &c, &n, now));
    assert_eq!(
        next(Phase::BeforeDrain, &c, &n, t(SINCE), now),
        Next::Passed
    );
    // Once passed, nothing is asked again, however late.
    assert_eq!(
        next(
            Phase::BeforeDrain,
            &c,
            &n,
            t(SINCE),
            t("2026-01-02T00:00:00Z")
        ),
        Next::Passed
    );
}

/// The node after the phase began at 00:01:00 and `tell` fired, with `ticket`'s `call`.
fn asked(c: &Config, call: Option<Call>) -> NodeView {
    let begun = t(SINCE);
    let n = view(&[]);
    let n = apply(&n, &begin_patch(Phase::BeforeDrain, c, &n, begun));
    let n = apply(
        &n,
        &fire_patch(
            Phase::BeforeDrain,
            &n,
            begun,
            &[("tell".into(), "tok-n".into())],
        ),
    );
    match call {
        None => n,
        Some(call) => {
            let text = record_with(Phase::BeforeDrain, &n, begun, |p| {
                p.webhooks.insert("ticket".into(), call);
            });
            NodeView {
                hooks: Some(text),
                ..n
            }
        }
    }
}

#[test]
fn a_no_holds_the_node_and_asks_again_after_the_backoff_with_the_same_token() {
    let c = cfg(BLOCKING);
    let n = asked(
        &c,
        Some(Call {
            token: "tok-1".into(),
            attempt: 2,
            at: t("2026-01-01T00:02:00Z"),
            answer: Some(Answer {
                yes: false,
                detail: "HTTP 503".into(),
                at: t("2026-01-01T00:02:01Z"),
            }),
        }),
    );
    // Backoff after attempt 2: 2s doubled = 4s from the answer.
    match next(
        Phase::BeforeDrain,
        &c,
        &n,
        t(SINCE),
        t("2026-01-01T00:02:02Z"),
    ) {
        Next::Wait { until, why } => {
            assert_eq!(until, t("2026-01-01T00:02:05Z"));
            assert!(why.contains("attempt 2 answered HTTP 503"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        next(
            Phase::BeforeDrain,
            &c,
            &n,
            t(SINCE),
            t("2026-01-01T00:02:05Z")
        ),
        Next::Act(Action::Call {
            name: "ticket".into(),
            attempt: 3,
            token: Some("tok-1".into())
        })
    );
    // Past the phase's timeout (10m from 00:01): the node fails, saying why; never passes.
    match next(
        Phase::BeforeDrain,
        &c,
        &n,
        t(SINCE),
        t("2026-01-01T00:11:00Z"),
    ) {
        Next::Fail(why) => assert!(
            why.contains("hooks.beforeDrain: blocking webhook ticket did not say yes within 10m")
                && why.contains("HTTP 503")
                && why.contains("not rebooted"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unanswered_attempt_is_never_sent_again_a_new_one_follows_its_timeout() {
    let c = cfg(BLOCKING);
    // Attempt 1 recorded at 00:02:00 by a leader that stopped before its answer was written.
    let n = asked(
        &c,
        Some(Call {
            token: "tok-1".into(),
            attempt: 1,
            at: t("2026-01-01T00:02:00Z"),
            answer: None,
        }),
    );
    // It may be under way until 00:02:05 (requestTimeout 5s), then the 2s backoff.
    for at in ["2026-01-01T00:02:00Z", "2026-01-01T00:02:06Z"] {
        assert!(
            matches!(
                next(Phase::BeforeDrain, &c, &n, t(SINCE), t(at)),
                Next::Wait { .. }
            ),
            "{at}"
        );
    }
    assert_eq!(
        next(
            Phase::BeforeDrain,
            &c,
            &n,
            t(SINCE),
            t("2026-01-01T00:02:07Z")
        ),
        Next::Act(Action::Call {
            name: "ticket".into(),
            attempt: 2,
            token: Some("tok-1".into())
        })
    );
}

#[test]
fn gates_hold_until_given_and_are_removed_when_the_phase_passes() {
    let c = cfg(
        "hooks: {afterReboot: {gates: [storage.example.com/ok, net.example.com/ok], timeout: 5m}}",
    );
    let begun = t(SINCE);
    let n = view(&[("storage.example.com/ok", "true")]);
    let n = apply(&n, &begin_patch(Phase::AfterReboot, &c, &n, begun));
    match next(
        Phase::AfterReboot,
        &c,
        &n,
        t(SINCE),
        t("2026-01-01T00:02:00Z"),
    ) {
        Next::Wait { until, why } => {
            assert_eq!(until, t("2026-01-01T00:06:00Z"));
            assert!(
                why.contains("net.example.com/ok") && !why.contains("storage"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
    // `false` is no yes.
    let mut given = n.clone();
    given
        .other_annotations
        .insert("net.example.com/ok".into(), "false".into());
    assert!(matches!(
        next(
            Phase::AfterReboot,
            &c,
            &given,
            t(SINCE),
            t("2026-01-01T00:02:00Z")
        ),
        Next::Wait { .. }
    ));
    given
        .other_annotations
        .insert("net.example.com/ok".into(), "yes".into());
    assert_eq!(
        next(
            Phase::AfterReboot,
            &c,
            &given,
            t(SINCE),
            t("2026-01-01T00:02:00Z")
        ),
        Next::Act(Action::Pass)
    );
    let p = pass_patch(Phase::AfterReboot, &c, &given, t("2026-01-01T00:02:00Z"));
    let ann = &p["metadata"]["annotations"];
    assert!(ann["storage.example.com/ok"].is_null() && ann["net.example.com/ok"].is_null());
    assert!(ann.as_object().unwrap().contains_key("net.example.com/ok"));
    // Not given in time: the node fails.
    match next(
        Phase::AfterReboot,
        &c,
        &n,
        t(SINCE),
        t("2026-01-01T00:06:00Z"),
    ) {
        Next::Fail(why) => assert!(
            why.contains("gate annotation(s) net.example.com/ok were not given within 5m"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_record_of_an_earlier_state_or_cycle_is_no_record() {
    let c = cfg(BLOCKING);
    let n = asked(&c, None);
    // The phase began at 00:01:00; a state entered later does not inherit it.
    assert_eq!(
        next(
            Phase::BeforeDrain,
            &c,
            &n,
            t("2026-01-01T00:05:00Z"),
            t("2026-01-01T00:05:00Z")
        ),
        Next::Act(Action::Begin)
    );
    // Garbage reads as no record, and is said.
    let g = view(&[(HOOKS, "{not json")]);
    assert!(record_problem(&g).is_some());
    assert_eq!(
        next(Phase::BeforeDrain, &c, &g, t(SINCE), t(SINCE)),
        Next::Act(Action::Begin)
    );
}

#[test]
fn settle_waits_after_the_drain_then_passes() {
    let c = cfg("drain: {settle: 20s}");
    let n = view(&[]);
    let n = apply(&n, &begin_patch(Phase::AfterDrain, &c, &n, t(SINCE)));
    match next(
        Phase::AfterDrain,
        &c,
        &n,
        t(SINCE),
        t("2026-01-01T00:01:05Z"),
    ) {
        Next::Wait { until, why } => {
            assert_eq!(until, t("2026-01-01T00:01:20Z"));
            assert!(why.contains("drain.settle"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        next(
            Phase::AfterDrain,
            &c,
            &n,
            t(SINCE),
            t("2026-01-01T00:01:20Z")
        ),
        Next::Act(Action::Pass)
    );
}

#[test]
fn labels_and_taints_are_written_with_the_phase_keeping_every_other_taint() {
    let c = cfg("
hooks:
  beforeDrain:
    labels: {example.com/maintenance: in-progress}
    removeLabels: [example.com/ready, example.com/absent]
    taints: [{key: example.com/maintenance, effect: NoSchedule}]
  afterReboot:
    removeTaints: [example.com/maintenance]
    labels: {example.com/maintenance: rebooted}
");
    let mut n = taint(
        taint(
            node("n1", &[("example.com/ready", "yes")]),
            "node.kubernetes.io/unschedulable",
            "NoSchedule",
        ),
        "gpu.example.com/busy",
        "NoSchedule",
    );
    n.metadata.resource_version = Some("9".into());
    let v = NodeView::from_node(&n);
    let p = begin_patch(Phase::BeforeDrain, &c, &v, t(SINCE));
    assert_eq!(
        p["metadata"]["labels"],
        serde_json::json!({"example.com/maintenance": "in-progress", "example.com/ready": null})
    );
    let keys: Vec<&str> = p["spec"]["taints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "node.kubernetes.io/unschedulable",
            "gpu.example.com/busy",
            "example.com/maintenance"
        ]
    );
    // Already there: the list is not written again.
    let there = NodeView::from_node(&taint(n.clone(), "example.com/maintenance", "NoSchedule"));
    let p = begin_patch(Phase::BeforeDrain, &c, &there, t(SINCE));
    assert!(p.get("spec").is_none(), "{p}");
    let p = begin_patch(Phase::AfterReboot, &c, &there, t(SINCE));
    let keys: Vec<&str> = p["spec"]["taints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        ["node.kubernetes.io/unschedulable", "gpu.example.com/busy"]
    );
    assert_eq!(
        p["metadata"]["labels"]["example.com/maintenance"],
        "rebooted"
    );
}

#[test]
fn the_prefer_no_schedule_taint_follows_the_flag() {
    let c = cfg("hooks: {preferNoScheduleTaint: example.com/reboot-pending}");
    let flagged = view(&[]);
    let plain = NodeView::from_node(&node("n2", &[]));
    let excluded = NodeView::from_node(&annotate(
        node("n3", &[(proto::EXCLUDE, "true")]),
        proto::REBOOT_REQUIRED,
        "2026-01-01T00:00:00Z",
    ));
    let nodes = [flagged.clone(), plain, excluded];
    let changes = prefer_no_schedule_changes(&nodes, &c);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].0.name, "n1");
    assert_eq!(changes[0].1[0].effect, "PreferNoSchedule");
    // Done (flags gone) with the taint on: it comes off.
    let mut done = NodeView::from_node(&taint(
        node("n1", &[]),
        "example.com/reboot-pending",
        "PreferNoSchedule",
    ));
    done.name = "n1".into();
    let changes = prefer_no_schedule_changes(std::slice::from_ref(&done), &c);
    assert_eq!(changes.len(), 1);
    assert!(changes[0].1.is_empty());
    // Nothing configured: nothing changes.
    assert!(prefer_no_schedule_changes(&nodes, &cfg("{}")).is_empty());
}

#[test]
fn the_body_says_node_phase_token_attempt_rollout_and_reason() {
    let c = cfg(BLOCKING);
    let n = asked(&c, None);
    let w = &c.hooks.before_drain.webhooks[0];
    let b = body(
        Phase::BeforeDrain,
        w,
        &n,
        "tok-1",
        2,
        t("2026-01-01T00:03:00Z"),
    );
    let json = serde_json::to_value(&b).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "node": "n1",
            "phase": "beforeDrain",
            "hook": "ticket",
            "token": "tok-1",
            "attempt": 2,
            "rolloutId": format!("n1-{}", t(SINCE).timestamp_millis()),
            "reason": "kernel 6.9 installed",
            "blocking": true,
            "time": "2026-01-01T00:03:00.000Z"
        })
    );
}

#[test]
fn backoff_doubles_and_is_capped() {
    let c = cfg(BLOCKING);
    let w = &c.hooks.before_drain.webhooks[0];
    let secs = |a| w.backoff_after(a).as_millis() / 1000;
    assert_eq!(
        [secs(1), secs(2), secs(3), secs(6), secs(40)],
        [2, 4, 8, 60, 60]
    );
}

#[test]
fn a_garbled_hooks_record_is_warned_about() {
    let n = view(&[(HOOKS, "{not json")]);
    let entry = crate::lock::LockEntry {
        group: None,
        state: crate::node::NodeState::Cordoning,
        since: chrono::DateTime::UNIX_EPOCH,
        leader: "c-0".into(),
    };
    let w = crate::controller::decide::annotation_warnings(&n, Some(&entry));
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].key, HOOKS);
    assert!(w[0].note.contains("new tokens"), "{}", w[0].note);
}
