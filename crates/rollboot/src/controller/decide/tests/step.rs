//! The tests of the state machine: where a node in flight stands, and its next step.

use super::*;

#[test]
fn a_new_entry_cordons_and_leaves_an_operator_cordon_alone() {
    let c = cfg("{}");
    let e = entry("2026-01-01T00:00:00Z");
    let now = t("2026-01-01T00:00:01Z");
    let n = flagged("n", "2026-01-01T00:00:00Z", &[]);
    assert_eq!(
        next_step(Some(&n), &e, &c, now),
        Step::Cordon {
            record_cordoned_by: true
        }
    );
    // Cordoned by an operator (the node-lifecycle controller's taint with it).
    let cordoned = NodeView {
        unschedulable: true,
        unschedulable_taint: true,
        ..n.clone()
    };
    assert_eq!(
        next_step(Some(&cordoned), &e, &c, now),
        Step::Cordon {
            record_cordoned_by: false
        }
    );
    // `done` from an earlier cycle does not count for this one.
    let old = in_state(n, NodeState::Done, "2025-12-01T00:00:00Z");
    assert_eq!(
        next_step(Some(&old), &e, &c, now),
        Step::Cordon {
            record_cordoned_by: true
        }
    );
}

#[test]
fn a_cordoned_node_drains_until_its_timeout_then_fails() {
    let c = cfg("drain: {timeout: 10m}");
    let e = entry("2026-01-01T00:00:00Z");
    let n = NodeView {
        unschedulable: true,
        ..in_state(
            flagged("n", "2026-01-01T00:00:00Z", &[]),
            NodeState::Draining,
            "2026-01-01T00:00:00Z",
        )
    };
    assert_eq!(
        next_step(Some(&n), &e, &c, t("2026-01-01T00:05:00Z")),
        Step::Drain {
            deadline: t("2026-01-01T00:10:00Z")
        }
    );
    assert!(matches!(
        next_step(Some(&n), &e, &c, t("2026-01-01T00:10:00Z")),
        Step::Fail(_)
    ));
    let force = cfg("drain: {timeout: 10m, forceDeleteAfterTimeout: true}");
    assert!(matches!(
        next_step(Some(&n), &e, &force, t("2026-01-01T00:11:00Z")),
        Step::Drain { .. }
    ));
}

#[test]
fn a_rebooting_node_is_verified_only_with_a_new_boot_id_and_ready() {
    let c = cfg("reboot: {timeout: 5m}");
    let e = entry("2026-01-01T00:00:00Z");
    let base = NodeView {
        unschedulable: true,
        boot_id_before: Some("boot-1".into()),
        reboot_token: Some(token("2026-01-01T00:01:00Z")),
        ..in_state(
            flagged("n", "2026-01-01T00:00:00Z", &[]),
            NodeState::Rebooting,
            "2026-01-01T00:01:00Z",
        )
    };
    let now = t("2026-01-01T00:02:00Z");
    assert_eq!(
        next_step(Some(&base), &e, &c, now),
        Step::AwaitReboot {
            deadline: t("2026-01-01T00:06:00Z")
        }
    );
    let back_not_ready = NodeView {
        boot_id: "boot-2".into(),
        ready: false,
        ..base.clone()
    };
    assert!(matches!(
        next_step(Some(&back_not_ready), &e, &c, now),
        Step::AwaitReboot { .. }
    ));
    let back = NodeView {
        boot_id: "boot-2".into(),
        ..base.clone()
    };
    assert_eq!(next_step(Some(&back), &e, &c, now), Step::MarkVerifying);
    // Ready with a new boot ID, but the node-lifecycle controller still has its not-ready
    // taint on: pods scheduled after an uncordon now could be evicted by it. Not back yet.
    let still_tainted = NodeView {
        not_ready_taint: true,
        ..back.clone()
    };
    assert!(matches!(
        next_step(Some(&still_tainted), &e, &c, now),
        Step::AwaitReboot { .. }
    ));
    assert!(matches!(
        next_step(Some(&base), &e, &c, t("2026-01-01T00:06:00Z")),
        Step::Fail(_)
    ));
}

#[test]
fn after_a_cordon_or_uncordon_the_next_write_waits_for_the_lifecycle_taint_a_bounded_time() {
    let c = cfg("{}");
    let e = entry("2026-01-01T00:00:00Z");
    let since = "2026-01-01T00:01:00Z";
    // Cordoned by rollboot; the controller-manager has not written its taint yet.
    let cordoned = NodeView {
        unschedulable: true,
        cordoned_by: Some("c-0".into()),
        ..in_state(
            flagged("n", "2026-01-01T00:00:00Z", &[]),
            NodeState::Cordoning,
            since,
        )
    };
    assert_eq!(
        next_step(Some(&cordoned), &e, &c, t("2026-01-01T00:01:00.500Z")),
        Step::Settle {
            until: t("2026-01-01T00:01:02Z")
        }
    );
    let mirrored = NodeView {
        unschedulable_taint: true,
        ..cordoned.clone()
    };
    assert!(matches!(
        next_step(Some(&mirrored), &e, &c, t("2026-01-01T00:01:00.500Z")),
        Step::Drain { .. }
    ));
    // A cluster that never writes the taint only costs the bound.
    assert!(matches!(
        next_step(Some(&cordoned), &e, &c, t("2026-01-01T00:01:02Z")),
        Step::Drain { .. }
    ));
    // Uncordoned with `verifying`; the taint still there.
    let uncordoned = NodeView {
        unschedulable: false,
        cordoned_by: None,
        unschedulable_taint: true,
        boot_id: "boot-2".into(),
        boot_id_before: Some("boot-1".into()),
        ..in_state(
            flagged("n", "2026-01-01T00:00:00Z", &[]),
            NodeState::Verifying,
            since,
        )
    };
    assert!(matches!(
        next_step(Some(&uncordoned), &e, &c, t("2026-01-01T00:01:00.010Z")),
        Step::Settle { .. }
    ));
    let gone = NodeView {
        unschedulable_taint: false,
        ..uncordoned
    };
    assert!(matches!(
        next_step(Some(&gone), &e, &c, t("2026-01-01T00:01:00.010Z")),
        Step::HealthGate { .. }
    ));
}

#[test]
fn verifying_uncordons_only_what_rollboot_cordoned() {
    let c = cfg("{}");
    let e = entry("2026-01-01T00:00:00Z");
    let now = t("2026-01-01T00:02:00Z");
    let ours = NodeView {
        unschedulable: true,
        cordoned_by: Some("rollboot".into()),
        boot_id: "boot-2".into(),
        boot_id_before: Some("boot-1".into()),
        ..in_state(
            flagged("n", "2026-01-01T00:00:00Z", &[]),
            NodeState::Verifying,
            "2026-01-01T00:01:00Z",
        )
    };
    assert_eq!(next_step(Some(&ours), &e, &c, now), Step::Uncordon);
    let operators = NodeView {
        cordoned_by: None,
        ..ours
    };
    assert!(matches!(
        next_step(Some(&operators), &e, &c, now),
        Step::HealthGate { .. }
    ));
}

#[test]
fn a_finished_node_frees_its_slot() {
    let c = cfg("{}");
    let e = entry("2026-01-01T00:00:00Z");
    let now = t("2026-01-01T00:02:00Z");
    let done = in_state(
        flagged("n", "2026-01-01T00:00:00Z", &[]),
        NodeState::Done,
        "2026-01-01T00:01:00Z",
    );
    assert!(matches!(next_step(Some(&done), &e, &c, now), Step::Free(_)));
}

#[test]
fn a_node_deleted_mid_cycle_frees_its_slot_at_once() {
    // Deleted by the autoscaler, Karpenter or an operator: never waited on for the timeouts.
    let c = cfg("{drain: {timeout: 6m}, reboot: {timeout: 4m}}");
    let e = entry("2026-01-01T00:00:00Z");
    let early = t("2026-01-01T00:00:30Z");
    assert_eq!(
        next_step(None, &e, &c, early),
        Step::Free("its Node was deleted from the cluster in the middle of its cycle".into())
    );
    // Being deleted (a finalizer holds it): the same, at once.
    let deleting = NodeView {
        deleting: true,
        unschedulable: true,
        ..in_state(
            flagged("n", "2026-01-01T00:00:00Z", &[]),
            NodeState::Rebooting,
            "2026-01-01T00:01:00Z",
        )
    };
    assert_eq!(
        next_step(Some(&deleting), &e, &c, early),
        Step::Free("its Node is being deleted in the middle of its cycle".into())
    );
}

#[test]
fn a_node_registered_again_unflagged_is_never_rebooted_twice() {
    let c = cfg("{drain: {timeout: 6m}, reboot: {timeout: 4m}}");
    let e = entry("2026-01-01T00:00:00Z");
    let now = t("2026-01-01T00:03:00Z");
    // Registered again by its kubelet while the host boots: no annotations, NotReady.
    let mut fresh = node("n", &[]);
    fresh.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
    let booting = NodeView::from_node(&fresh);
    assert!(matches!(
        next_step(Some(&booting), &e, &c, now),
        Step::Hold { .. }
    ));
    // Ready but the node-lifecycle controller's taint still on: still out.
    let tainted = NodeView {
        ready: true,
        not_ready_taint: true,
        ..booting.clone()
    };
    assert!(matches!(
        next_step(Some(&tainted), &e, &c, now),
        Step::Hold { .. }
    ));
    // Back and Ready: the slot is freed, no cordon, no second reboot.
    let back = NodeView::from_node(&node("n", &[]));
    assert!(matches!(next_step(Some(&back), &e, &c, now), Step::Free(_)));
    // Never Ready within the timeouts: it fails, which the rollout's maxFailures counts.
    match next_step(Some(&booting), &e, &c, t("2026-01-01T00:10:00Z")) {
        Step::Fail(why) => assert!(
            why.contains("registered again") && why.contains("stayed not Ready past"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    // Flagged again (its host did not reboot: the sentinel is still there): the cycle
    // starts over from the cordon.
    let again = flagged("n", "2026-01-01T00:02:00Z", &[]);
    assert_eq!(
        next_step(Some(&again), &e, &c, now),
        Step::Cordon {
            record_cordoned_by: true
        }
    );
}

#[test]
fn after_its_ack_only_a_failed_reboot_command_fails_the_node() {
    let c = cfg("{}");
    let now = t("2026-01-01T00:02:00Z");
    let e = entry("2026-01-01T00:00:00Z");
    let refusing = |ack: bool, cause: proto::RefusalCause| {
        let n = rebooting(ack);
        NodeView {
            reboot_refused: Some(proto::Refusal {
                token: n.reboot_token.clone().unwrap(),
                cause,
                reason: "x".into(),
                at: "2026-01-01T00:01:30Z".into(),
            }),
            ..n
        }
    };
    // Acknowledged, then refused for a cause that says nothing of the reboot: ignored.
    for cause in [
        proto::RefusalCause::AckUnreadable,
        proto::RefusalCause::WrongHost,
        proto::RefusalCause::HostUnknown,
    ] {
        let n = refusing(true, cause);
        assert!(
            matches!(next_step(Some(&n), &e, &c, now), Step::AwaitReboot { .. }),
            "{cause}: {:?}",
            next_step(Some(&n), &e, &c, now)
        );
    }
    let n = refusing(true, proto::RefusalCause::RebootCommandFailed);
    assert!(matches!(next_step(Some(&n), &e, &c, now), Step::Fail(_)));
    // Refused before any ack: taken as before.
    let n = refusing(false, proto::RefusalCause::AckUnreadable);
    assert!(matches!(next_step(Some(&n), &e, &c, now), Step::Fail(_)));
}

#[test]
fn a_draining_state_on_an_uncordoned_node_starts_over_from_the_cordon() {
    let c = cfg("{}");
    let e = entry("2026-01-01T00:00:00Z");
    let now = t("2026-01-01T00:01:00Z");
    let start_over = Step::Cordon {
        record_cordoned_by: true,
    };
    // Forged (or left by an uncordon) on a schedulable node, dated in this cycle or not
    // dated at all: never a drain.
    let forged = in_state(
        flagged("n", "2026-01-01T00:00:00Z", &[]),
        NodeState::Draining,
        "2026-01-01T00:00:30Z",
    );
    assert_eq!(next_step(Some(&forged), &e, &c, now), start_over);
    let undated = NodeView {
        state_since: None,
        ..forged.clone()
    };
    assert_eq!(next_step(Some(&undated), &e, &c, now), start_over);
    assert_eq!(this_cycle(&undated, &e), None);
    // The same state on the cordoned node is this cycle's drain.
    let cordoned = NodeView {
        unschedulable: true,
        ..forged
    };
    assert!(matches!(
        next_step(Some(&cordoned), &e, &c, now),
        Step::Drain { .. }
    ));
}

#[test]
fn rebooting_without_this_cycles_token_and_boot_id_starts_over_and_never_asks_again() {
    let c = cfg("{}");
    let e = entry("2026-01-01T00:00:00Z");
    let now = t("2026-01-01T00:02:00Z");
    let start_over = |n: &NodeView| matches!(next_step(Some(n), &e, &c, now), Step::Cordon { .. });
    let ok = rebooting(false);
    assert!(matches!(
        next_step(Some(&ok), &e, &c, now),
        Step::AwaitReboot { .. }
    ));
    // No boot ID to verify against (missing or garbled: it reads as absent).
    assert!(start_over(&NodeView {
        boot_id_before: None,
        ..ok.clone()
    }));
    // No token, or a token of an earlier cycle.
    assert!(start_over(&NodeView {
        reboot_token: None,
        ..ok.clone()
    }));
    assert!(start_over(&NodeView {
        reboot_token: Some(token("2025-12-31T23:59:59Z")),
        ..ok.clone()
    }));
    // Uncordoned before the agent took the token: the agent would refuse it; start over.
    assert!(start_over(&NodeView {
        unschedulable: false,
        ..ok.clone()
    }));
    // Uncordoned after the agent took it: the reboot is under way and cannot be called
    // back; it is awaited.
    let taken = NodeView {
        unschedulable: false,
        ..rebooting(true)
    };
    assert!(matches!(
        next_step(Some(&taken), &e, &c, now),
        Step::AwaitReboot { .. }
    ));
    // Nothing decided here ever asks for a reboot of an uncordoned node.
    assert!(may_request_reboot(&NodeView {
        unschedulable: false,
        ..ok.clone()
    })
    .unwrap_err()
    .contains("not cordoned"));
    assert_eq!(may_request_reboot(&ok), Ok(()));
}

#[test]
fn a_garbled_or_backward_state_behind_this_cycles_token_awaits_the_reboot_and_never_asks_again() {
    let c = cfg("reboot: {timeout: 5m}");
    let e = entry("2026-01-01T00:00:00Z");
    let now = t("2026-01-01T00:02:00Z");
    let issued = rebooting(false).reboot_token.clone();
    let issued_at = Token::parse(issued.as_deref().unwrap()).unwrap().issued;
    for acked in [false, true] {
        let r = rebooting(acked);
        // `kubectl annotate ... state=banana`: the state reads as none. Gone backwards to
        // `cordoning` or `draining`, or forward to `done` with the boot ID still to verify.
        let garbled = NodeView {
            state: None,
            malformed: vec![proto::Malformed {
                key: proto::STATE,
                value: "banana".into(),
                expected: "a state",
            }],
            ..r.clone()
        };
        let undated = NodeView {
            state_since: None,
            ..r.clone()
        };
        let backwards = |s: NodeState| in_state(r.clone(), s, "2026-01-01T00:01:30Z");
        for n in [
            garbled,
            undated,
            backwards(NodeState::Cordoning),
            backwards(NodeState::Draining),
            backwards(NodeState::Done),
        ] {
            assert_eq!(
                position(&n, &e),
                Position::At(NodeState::Rebooting, issued_at),
                "{:?} acked {acked}",
                n.state
            );
            // The reboot's deadline runs from the token, not from the state written.
            assert_eq!(
                next_step(Some(&n), &e, &c, now),
                Step::AwaitReboot {
                    deadline: issued_at + chrono::Duration::minutes(5)
                },
                "{:?} acked {acked}",
                n.state
            );
            // Not unflagged either: never taken for a Node registered again.
            let quiet = NodeView {
                reboot_required: false,
                ..n.clone()
            };
            assert!(matches!(
                next_step(Some(&quiet), &e, &c, now),
                Step::AwaitReboot { .. }
            ));
            // Back with a new boot ID: verified, as any reboot.
            let back = NodeView {
                boot_id: "boot-2".into(),
                ready: true,
                ..n.clone()
            };
            assert_eq!(next_step(Some(&back), &e, &c, now), Step::MarkVerifying);
            // Lost on the same boot: the one case a new token is issued.
            if acked {
                let lost = NodeView {
                    reboot_lost: n.reboot_token.clone(),
                    ..n.clone()
                };
                assert_eq!(
                    next_step(Some(&lost), &e, &c, now),
                    Step::RequestReboot { attempt: 2 }
                );
            }
        }
    }
    // A `verifying` written after the new boot stands.
    let verifying = NodeView {
        boot_id: "boot-2".into(),
        ..in_state(
            rebooting(true),
            NodeState::Verifying,
            "2026-01-01T00:01:40Z",
        )
    };
    assert_eq!(
        position(&verifying, &e),
        Position::At(NodeState::Verifying, t("2026-01-01T00:01:40Z"))
    );
    // A `done` written by the cycle's end (boot-id-before removed with it) ends it.
    let done = NodeView {
        boot_id_before: None,
        ..in_state(rebooting(true), NodeState::Done, "2026-01-01T00:01:50Z")
    };
    assert_eq!(
        next_step(Some(&done), &e, &c, now),
        Step::Free("its cycle is done".into())
    );
}

#[test]
fn a_node_uncordoned_a_moment_ago_is_cordoned_once_the_lifecycle_taint_is_off() {
    // `rollboot retry` uncordoned it; the node-lifecycle controller has not yet taken its
    // unschedulable taint off: a cordon now would be refused (409, found on a real control
    // plane, check 5c).
    let c = cfg("{}");
    let e = entry("2026-01-01T00:00:00Z");
    let retried = NodeView {
        unschedulable: false,
        unschedulable_taint: true,
        ..flagged("n", "2026-01-01T00:00:00Z", &[])
    };
    assert_eq!(
        next_step(Some(&retried), &e, &c, t("2026-01-01T00:00:01Z")),
        Step::Settle {
            until: t("2026-01-01T00:00:02Z")
        }
    );
    // Bounded: a cluster whose controller never writes the taint is not waited for.
    assert_eq!(
        next_step(Some(&retried), &e, &c, t("2026-01-01T00:00:02Z")),
        Step::Cordon {
            record_cordoned_by: true
        }
    );
    let settled = NodeView {
        unschedulable_taint: false,
        ..retried
    };
    assert_eq!(
        next_step(Some(&settled), &e, &c, t("2026-01-01T00:00:01Z")),
        Step::Cordon {
            record_cordoned_by: true
        }
    );
}

#[test]
fn a_taken_token_without_a_boot_id_to_verify_against_fails_the_node_instead_of_asking_again() {
    let c = cfg("{}");
    let e = entry("2026-01-01T00:00:00Z");
    let now = t("2026-01-01T00:02:00Z");
    let garbled = NodeView {
        boot_id_before: None,
        ..rebooting(true)
    };
    match next_step(Some(&garbled), &e, &c, now) {
        Step::Fail(why) => assert!(
            why.contains(proto::BOOT_ID_BEFORE) && why.contains("no new token"),
            "{why}"
        ),
        s => panic!("{s:?}"),
    }
    // The warning says the same.
    let w = annotation_warnings(
        &NodeView {
            malformed: vec![proto::Malformed {
                key: proto::BOOT_ID_BEFORE,
                value: " ".into(),
                expected: "a boot ID",
            }],
            ..garbled
        },
        Some(&e),
    );
    assert!(w[0].note.contains("fails rather than"), "{}", w[0].note);
}

#[test]
fn verifying_without_a_new_boot_id_starts_over() {
    let c = cfg("{}");
    let e = entry("2026-01-01T00:00:00Z");
    let now = t("2026-01-01T00:02:00Z");
    let forged = NodeView {
        unschedulable: false,
        ..in_state(
            flagged("n", "2026-01-01T00:00:00Z", &[]),
            NodeState::Verifying,
            "2026-01-01T00:01:00Z",
        )
    };
    assert!(matches!(
        next_step(Some(&forged), &e, &c, now),
        Step::Cordon { .. }
    ));
    let same_boot = NodeView {
        boot_id_before: Some("boot-1".into()),
        ..forged.clone()
    };
    assert!(matches!(
        next_step(Some(&same_boot), &e, &c, now),
        Step::Cordon { .. }
    ));
    let rebooted = NodeView {
        boot_id: "boot-2".into(),
        ..same_boot
    };
    assert!(matches!(
        next_step(Some(&rebooted), &e, &c, now),
        Step::HealthGate { .. }
    ));
}

#[test]
fn a_lost_reboot_gets_a_new_token_until_the_attempts_are_spent() {
    let c = cfg("reboot: {timeout: 5m}");
    let e = entry("2026-01-01T00:00:00Z");
    let now = t("2026-01-01T00:02:00Z");
    let acked = rebooting(true);
    // Acknowledged and not lost: the reboot is under way.
    assert!(matches!(
        next_step(Some(&acked), &e, &c, now),
        Step::AwaitReboot { .. }
    ));
    let lost = NodeView {
        reboot_lost: acked.reboot_token.clone(),
        ..acked.clone()
    };
    assert_eq!(
        next_step(Some(&lost), &e, &c, now),
        Step::RequestReboot { attempt: 2 }
    );
    // Past the deadline too: a lost token is answered, not timed out.
    assert_eq!(
        next_step(Some(&lost), &e, &c, t("2026-01-01T00:09:00Z")),
        Step::RequestReboot { attempt: 2 }
    );
    let second = NodeView {
        reboot_attempt: Some(2),
        ..lost.clone()
    };
    assert_eq!(
        next_step(Some(&second), &e, &c, now),
        Step::RequestReboot { attempt: 3 }
    );
    let last = NodeView {
        reboot_attempt: Some(REBOOT_ATTEMPTS),
        ..lost.clone()
    };
    match next_step(Some(&last), &e, &c, now) {
        Step::Fail(why) => assert!(
            why.contains("acknowledged 3 reboot token(s)")
                && why.contains("boot ID is still boot-1"),
            "{why}"
        ),
        s => panic!("{s:?}"),
    }
    // A garbled count is not a licence for more tokens.
    let garbled = NodeView {
        reboot_attempt: None,
        malformed: vec![proto::Malformed {
            key: proto::REBOOT_ATTEMPT,
            value: "many".into(),
            expected: "",
        }],
        ..lost.clone()
    };
    assert!(matches!(
        next_step(Some(&garbled), &e, &c, now),
        Step::Fail(_)
    ));
    // A lost report of an older token, or a host that did reboot, is no reason.
    let old_report = NodeView {
        reboot_lost: Some(token("2026-01-01T00:00:30Z")),
        ..acked.clone()
    };
    assert!(matches!(
        next_step(Some(&old_report), &e, &c, now),
        Step::AwaitReboot { .. }
    ));
    let came_back = NodeView {
        boot_id: "boot-2".into(),
        ..lost.clone()
    };
    assert_eq!(
        next_step(Some(&came_back), &e, &c, now),
        Step::MarkVerifying
    );
    // Lost on an uncordoned node: nothing is under way, and the cycle starts over.
    let open = NodeView {
        unschedulable: false,
        ..lost
    };
    assert!(matches!(
        next_step(Some(&open), &e, &c, now),
        Step::Cordon { .. }
    ));
}

#[test]
fn a_reboot_timeout_says_what_did_not_happen() {
    let c = cfg("reboot: {timeout: 5m}");
    let e = entry("2026-01-01T00:00:00Z");
    let late = t("2026-01-01T00:06:00Z");
    let reason = |n: &NodeView| match next_step(Some(n), &e, &c, late) {
        Step::Fail(why) => why,
        s => panic!("{s:?}"),
    };
    assert!(reason(&rebooting(false)).contains("did not acknowledge reboot token"));
    assert!(reason(&rebooting(true)).contains("boot ID is still boot-1"));
    let down = NodeView {
        boot_id: "boot-2".into(),
        ready: false,
        ..rebooting(true)
    };
    assert!(reason(&down).contains("boot-1 -> boot-2) but is not Ready"));
    let tainted = NodeView {
        boot_id: "boot-2".into(),
        not_ready_taint: true,
        ..rebooting(true)
    };
    assert!(reason(&tainted).contains("not-ready or unreachable taint"));
}

#[test]
fn a_fleetlock_hosts_reboot_is_handed_to_it_and_verified_like_any_other() {
    let c = cfg("reboot: {timeout: 10m}");
    let e = entry("2026-01-05T00:00:00Z");
    let now = t("2026-01-05T00:05:00Z");
    let drained = fleetlock_drained("2026-01-05T00:01:00Z", &[]);
    assert_eq!(next_step(Some(&drained), &e, &c, now), Step::HandOff);
    // The same node flagged by its agent instead gets a token.
    let mut agent = drained.clone();
    agent.reboot_requested_reason = None;
    assert_eq!(
        next_step(Some(&agent), &e, &c, now),
        Step::RequestReboot { attempt: 1 }
    );
    // Handed off: rebooting since the hand-off, no token, waiting for the host.
    let handed = [
        (proto::STATE, "rebooting"),
        (proto::STATE_SINCE, "2026-01-05T00:02:00Z"),
        (proto::HANDED_OFF, "2026-01-05T00:02:00Z"),
        (proto::BOOT_ID_BEFORE, "boot-1"),
    ];
    let waiting = fleetlock_drained("2026-01-05T00:01:00Z", &handed);
    assert_eq!(
        next_step(Some(&waiting), &e, &c, now),
        Step::AwaitReboot {
            deadline: t("2026-01-05T00:12:00Z")
        }
    );
    // A garbled state does not start the cycle over: the host may be rebooting.
    let mut garbled = waiting.clone();
    garbled.state = Some(NodeState::Cordoning);
    assert_eq!(
        position(&garbled, &e),
        Position::At(NodeState::Rebooting, t("2026-01-05T00:02:00Z"))
    );
    assert!(state_contradiction(&garbled, &e)
        .unwrap()
        .contains("handed to its host"));
    // Never back within reboot.timeout: failed, saying the host did not reboot.
    match next_step(Some(&waiting), &e, &c, t("2026-01-05T00:12:00Z")) {
        Step::Fail(why) => assert!(why.contains("boot ID is still boot-1"), "{why}"),
        s => panic!("{s:?}"),
    }
    // Back on a new boot, Ready: verified as a token's reboot is.
    let mut back = waiting.clone();
    back.boot_id = "boot-2".into();
    assert_eq!(next_step(Some(&back), &e, &c, now), Step::MarkVerifying);
}

#[test]
fn a_fleetlock_host_that_gives_its_slot_back_before_rebooting_is_released() {
    let c = cfg("{}");
    let e = entry("2026-01-05T00:00:00Z");
    let now = t("2026-01-05T00:05:00Z");
    let returned = r#"{"id":"abc","group":"default","returned":"2026-01-05T00:03:00Z"}"#;
    // Given back while draining: the drain's end releases it instead of handing it off.
    let drained = fleetlock_drained("2026-01-05T00:01:00Z", &[(proto::FLEETLOCK, returned)]);
    assert!(
        matches!(next_step(Some(&drained), &e, &c, now), Step::Release(why) if why.contains("gave its slot back"))
    );
    // Given back mid-drain: released at once; given back before the cycle started: drained on.
    let mut mid = drained.clone();
    mid.hooks = None;
    assert!(matches!(
        next_step(Some(&mid), &e, &c, now),
        Step::Release(why) if why.contains("gave its slot back")
    ));
    let before = r#"{"id":"abc","group":"default","returned":"2026-01-04T23:00:00Z"}"#;
    let mut mid = fleetlock_drained("2026-01-05T00:01:00Z", &[(proto::FLEETLOCK, before)]);
    mid.hooks = None;
    assert!(matches!(
        next_step(Some(&mid), &e, &c, now),
        Step::Drain { .. }
    ));
    // Given back after the hand-off, on the same boot.
    let handed = [
        (proto::STATE, "rebooting"),
        (proto::STATE_SINCE, "2026-01-05T00:02:00Z"),
        (proto::HANDED_OFF, "2026-01-05T00:02:00Z"),
        (proto::BOOT_ID_BEFORE, "boot-1"),
        (proto::FLEETLOCK, returned),
    ];
    let mut n = fleetlock_drained("2026-01-05T00:01:00Z", &handed);
    n.ready_since = Some(t("2026-01-04T00:00:00Z"));
    // The host may be going down: held until it has stayed Ready on this boot for
    // reboot.readyWithoutRebootFor (5m) since the hand-off, then released.
    assert!(matches!(
        next_step(Some(&n), &e, &c, t("2026-01-05T00:03:05Z")),
        Step::Hold { until, ref why } if until == t("2026-01-05T00:07:00Z") && why.contains("gave its slot back")
    ));
    assert!(matches!(
        next_step(Some(&n), &e, &c, t("2026-01-05T00:07:00Z")),
        Step::Release(_)
    ));
    // With a reboot timeout shorter than that (20s): looked at again at the timeout, then,
    // past it, held until the node has stayed up long enough, never until an instant already
    // past (a pass at once, again and again, and the cycle held: chaos seed 816).
    let short = cfg("reboot: {timeout: 20s}");
    assert!(matches!(
        next_step(Some(&n), &e, &short, t("2026-01-05T00:02:10Z")),
        Step::Hold { until, .. } if until == t("2026-01-05T00:02:20Z")
    ));
    assert!(matches!(
        next_step(Some(&n), &e, &short, t("2026-01-05T00:03:05Z")),
        Step::Hold { until, .. } if until == t("2026-01-05T00:07:00Z")
    ));
    assert!(matches!(
        next_step(Some(&n), &e, &short, t("2026-01-05T00:07:00Z")),
        Step::Release(_)
    ));
    // Never while NotReady, nor after a NotReady since the hand-off: only a new boot (or
    // the reboot timeout) ends it then.
    let mut down = n.clone();
    down.ready = false;
    down.ready_since = None;
    assert!(matches!(
        next_step(Some(&down), &e, &c, t("2026-01-05T00:08:00Z")),
        Step::AwaitReboot { .. }
    ));
    let mut flapped = n.clone();
    flapped.ready_since = Some(t("2026-01-05T00:02:30Z"));
    assert!(matches!(
        next_step(Some(&flapped), &e, &c, t("2026-01-05T00:08:00Z")),
        Step::AwaitReboot { .. }
    ));
    assert!(matches!(
        next_step(Some(&flapped), &e, &c, t("2026-01-05T00:17:00Z")),
        Step::Fail(_)
    ));
    // A give-back of an earlier cycle does not count in this one.
    let old = r#"{"id":"abc","group":"default","returned":"2026-01-04T00:00:00Z"}"#;
    let n = fleetlock_drained("2026-01-05T00:01:00Z", &[(proto::FLEETLOCK, old)]);
    assert_eq!(next_step(Some(&n), &e, &c, now), Step::HandOff);
    // After the boot ID changed it is a reboot: verified, not released.
    let mut back = fleetlock_drained("2026-01-05T00:01:00Z", &handed);
    back.boot_id = "boot-2".into();
    assert_eq!(next_step(Some(&back), &e, &c, now), Step::MarkVerifying);
}

#[test]
fn on_a_kind_like_node_a_reboot_is_verified_by_its_agents_pid_1_start() {
    let c = cfg("reboot: {timeout: 10m}");
    let e = entry("2026-01-05T00:00:00Z");
    let now = t("2026-01-05T00:05:00Z");
    let tok = Token::new(t("2026-01-05T00:02:00Z"), 1).text;
    let host = |init| proto::AgentHost {
        boot_id: "kernel-boot".into(),
        init_start: Some(init),
        machine_id: None,
        shutdown_drain: proto::ShutdownDrain::NoLogind,
        inhibit_delay_seconds: None,
    };
    let mut n = node("k1", &[]);
    n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
    for (k, v) in [
        (proto::STATE, "rebooting"),
        (proto::STATE_SINCE, "2026-01-05T00:02:00Z"),
        (proto::CORDONED_BY, "c-0"),
        (proto::BOOT_ID_BEFORE, "kernel-boot"),
        (proto::INIT_START_BEFORE, "100"),
        (proto::REBOOT, tok.as_str()),
        (proto::REBOOT_ACK, tok.as_str()),
    ] {
        n = annotate(n, k, v);
    }
    let mut v = NodeView::from_node(&n);
    v.boot_id = "kernel-boot".into();
    v.agent_host = Some(host(100));
    // The same boot (the agent restarted, or the node is still down): waits.
    assert!(matches!(
        next_step(Some(&v), &e, &c, now),
        Step::AwaitReboot { .. }
    ));
    // The agent of the new boot says PID 1 started again: back.
    v.agent_host = Some(host(5000));
    assert_eq!(next_step(Some(&v), &e, &c, now), Step::MarkVerifying);
    // A token reported lost by an agent restarted on the same boot is asked again; not
    // once the node booted.
    let mut lost = v.clone();
    lost.agent_host = Some(host(100));
    lost.reboot_lost = Some(tok.clone());
    assert!(matches!(
        next_step(Some(&lost), &e, &c, now),
        Step::RequestReboot { attempt: 2 }
    ));
    lost.agent_host = Some(host(5000));
    assert_eq!(next_step(Some(&lost), &e, &c, now), Step::MarkVerifying);
}
