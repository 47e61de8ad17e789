//! The explanation's tests: each code where its situation holds, and agreement with the
//! controller's pure functions called directly ([`decide::blockers`], [`decide::pick_detail`],
//! [`decide::resting_until`]) on the same snapshot, over fixed worlds and random ones.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::json;

use super::*;
use crate::config::parse_str;
use crate::lock::{LockEntry, IN_FLIGHT};
use crate::node::fixtures::{annotate, node};
use crate::node::{self as proto, NodeState};

fn t(s: &str) -> DateTime<Utc> {
    crate::time::parse_annotation(s).unwrap()
}

fn now() -> DateTime<Utc> {
    t("2026-01-05T00:00:00Z")
}

fn cfg(yaml: &str) -> Config {
    parse_str(yaml).unwrap()
}

/// A node with `labels` and `annotations`.
fn view(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> NodeView {
    let mut n = node(name, labels);
    for (k, v) in annotations {
        n = annotate(n, k, v);
    }
    NodeView::from_node(&n)
}

fn flagged(name: &str, at: &str, labels: &[(&str, &str)]) -> NodeView {
    view(name, labels, &[(proto::REBOOT_REQUIRED, at)])
}

/// The lock held by `holder` with `entries` in flight and `annotations`.
fn lease(holder: &str, entries: &[(&str, &str)], annotations: &[(&str, &str)]) -> Lease {
    let entries: BTreeMap<String, LockEntry> = entries
        .iter()
        .map(|(n, since)| {
            let e = LockEntry {
                state: NodeState::Cordoning,
                since: t(since),
                leader: "c-0".into(),
                group: None,
            };
            (n.to_string(), e)
        })
        .collect();
    let mut ann: BTreeMap<String, String> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ann.insert(IN_FLIGHT.into(), serde_json::to_string(&entries).unwrap());
    let mut l = Lease {
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    l.metadata.annotations = Some(ann);
    l
}

/// A ReplicaSet's pod (evicted by a drain) on `node`, labelled `app`.
fn pod(name: &str, node: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": app},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                "uid": "u", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    }))
    .unwrap()
}

/// A budget over `app` allowing `allowed` disruptions now.
fn budget(name: &str, app: &str, allowed: i32) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": 1},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
            "expectedPods": 1},
    }))
    .unwrap()
}

fn world(nodes: Vec<NodeView>) -> Gathered {
    Gathered {
        cluster: Cluster {
            nodes,
            ..Cluster::default()
        },
        alertmanager: None,
    }
}

fn codes(e: &Explanation) -> Vec<ReasonCode> {
    e.reasons.iter().map(|r| r.code).collect()
}

/// Explains every node of `g` and checks each against the controller's own functions called
/// directly on the same snapshot: eligible exactly when nothing blocks and the pick takes it;
/// a cluster-wide reason exactly when a blocker holds; passed over exactly when the pick passes
/// it over; resting exactly when `nodes.minRebootInterval` holds it; no room (slots or group)
/// exactly when a candidate the pick looks at is neither taken nor passed over.
fn agrees(g: &Gathered, config: &Config) -> BTreeMap<String, Explanation> {
    let at = now();
    let record = LockRecord::from_lease(g.cluster.lock.clone());
    let ours = crate::lock::lock_owner(config);
    let nodes: Vec<&NodeView> = g.cluster.nodes.iter().collect();
    let counts: Vec<(String, usize)> = crate::plan::blocking_pods(&g.cluster, config)
        .into_iter()
        .map(|(s, p)| (s, p.len()))
        .collect();
    let (alerts, _) = reasons::alerts(g);
    let base = Snapshot {
        maintained: &decide::NOT_MAINTAINED,
        headroom: None,
        nodes: &nodes,
        in_flight: &record.entries,
        foreign_holder: record.foreign_holder(&ours),
        blocking_pods: &counts,
        now: at,
    };
    let mut blockers = decide::blockers(&base, config, at);
    blockers.extend(alerts);
    let (_, looked) = decide::looked_at(&base, config);
    let draining: Vec<&str> = decide::draining(&base).collect();
    let h = headroom::of(&g.cluster, config, &looked, &draining);
    let with = Snapshot {
        headroom: Some(&h),
        ..base
    };
    let picked = decide::pick_detail(&with, config);
    let mut out = BTreeMap::new();
    for n in &g.cluster.nodes {
        let e = explain(g, config, &n.name, at).unwrap();
        let in_lock = record.entries.contains_key(&n.name);
        let candidate = decide::is_candidate(n, config) && !in_lock;
        let taken = picked.nodes.iter().any(|p| p.name == n.name);
        let passed = picked.passed_over.iter().any(|(p, _)| p.name == n.name);
        let resting = decide::resting_until(n, config, at).is_some();
        let ctx = format!("{}: {e:#?}\nblockers {blockers:?}", n.name);
        assert_eq!(
            e.eligible,
            candidate && blockers.is_empty() && taken,
            "{ctx}"
        );
        assert_eq!(e.eligible, e.reasons.is_empty(), "{ctx}");
        if in_lock {
            assert!(e.in_flight(), "{ctx}");
            out.insert(n.name.clone(), e);
            continue;
        }
        let cluster_wide = e.reasons.iter().any(|r| {
            matches!(
                r.code,
                ReasonCode::WindowClosed
                    | ReasonCode::Paused
                    | ReasonCode::LockHeldByOther
                    | ReasonCode::Blocked
            )
        });
        assert_eq!(cluster_wide, !blockers.is_empty(), "{ctx}");
        if candidate {
            assert_eq!(e.has(ReasonCode::PassedOver), passed, "{ctx}");
            assert_eq!(e.has(ReasonCode::RestingUntil), resting, "{ctx}");
            if !resting {
                let no_room = e.has(ReasonCode::MaxNodesReached) || e.has(ReasonCode::GroupFull);
                assert_eq!(no_room, !taken && !passed, "{ctx}");
            }
        } else {
            for c in [
                ReasonCode::PassedOver,
                ReasonCode::MaxNodesReached,
                ReasonCode::GroupFull,
            ] {
                assert!(!e.has(c), "{ctx}");
            }
        }
        out.insert(n.name.clone(), e);
    }
    out
}

#[test]
fn the_first_in_order_is_eligible_and_the_next_waits_for_its_slot() {
    let g = world(vec![
        flagged("a", "2026-01-01T00:00:00Z", &[]),
        flagged("b", "2026-01-02T00:00:00Z", &[]),
        view("c", &[], &[]),
    ]);
    let e = agrees(&g, &cfg("concurrency: {maxNodes: 1}"));
    assert!(e["a"].eligible && !e["a"].held());
    assert_eq!(e["a"].starts_at, Some(now()));
    assert_eq!(codes(&e["b"]), [ReasonCode::MaxNodesReached]);
    assert!(
        e["b"].reasons[0]
            .message
            .contains("a (ahead of it in order)"),
        "{:?}",
        e["b"]
    );
    assert_eq!(codes(&e["c"]), [ReasonCode::NotFlagged]);
    assert_eq!(e["c"].starts_at, None);
    assert!(e["c"].held());
}

#[test]
fn the_nodes_own_state_says_failed_quarantined_excluded_and_resting() {
    let g = world(vec![
        view(
            "failed",
            &[(proto::QUARANTINED, "budget")],
            &[
                (proto::REBOOT_REQUIRED, "2026-01-01T00:00:00Z"),
                (proto::STATE, "failed"),
                (proto::STATE_SINCE, "2026-01-02T00:00:00Z"),
                (proto::FAILURE_REASON, "the drain did not finish within 15m"),
            ],
        ),
        flagged(
            "excluded",
            "2026-01-01T00:00:00Z",
            &[(proto::EXCLUDE, "true")],
        ),
        flagged("gpu", "2026-01-01T00:00:00Z", &[("pool", "gpu")]),
        view(
            "resting",
            &[],
            &[
                (proto::REBOOT_REQUIRED, "2026-01-01T00:00:00Z"),
                (proto::LAST_REBOOT, "2026-01-04T23:30:00Z"),
            ],
        ),
    ]);
    // One failure tolerated: the rollout goes on around it.
    let c = cfg("nodes: {selector: 'pool!=gpu', minRebootInterval: 1h}\n\
         concurrency: {maxNodes: 2}\nfailures: {maxFailures: 1}");
    let e = agrees(&g, &c);
    assert_eq!(
        codes(&e["failed"]),
        [ReasonCode::Failed, ReasonCode::Quarantined]
    );
    let failed = &e["failed"].reasons[0];
    assert!(
        failed
            .message
            .contains("the drain did not finish within 15m")
            && failed.message.contains("`rollboot retry failed`"),
        "{failed:?}"
    );
    assert_eq!(failed.since, Some(t("2026-01-02T00:00:00Z")));
    assert_eq!(codes(&e["excluded"]), [ReasonCode::Excluded]);
    assert!(e["excluded"].reasons[0]
        .message
        .contains("rollboot.dev/exclude=true"));
    assert_eq!(codes(&e["gpu"]), [ReasonCode::Excluded]);
    assert!(e["gpu"].reasons[0].message.contains("`pool!=gpu`"));
    assert_eq!(codes(&e["resting"]), [ReasonCode::RestingUntil]);
    assert_eq!(
        e["resting"].reasons[0].until,
        Some(t("2026-01-05T00:30:00Z"))
    );
    // Plan's schedule starts it when it has rested.
    assert_eq!(e["resting"].starts_at, Some(t("2026-01-05T00:30:00Z")));
    assert_eq!(e["failed"].starts_at, None);
}

#[test]
fn a_full_group_holds_its_node_while_another_group_starts() {
    let g = Gathered {
        cluster: Cluster {
            nodes: vec![
                flagged("a", "2026-01-01T00:00:00Z", &[("zone", "1")]),
                flagged("b", "2026-01-02T00:00:00Z", &[("zone", "1")]),
                flagged("c", "2026-01-03T00:00:00Z", &[("zone", "2")]),
                flagged("x", "2026-01-01T00:00:00Z", &[("zone", "2")]),
            ],
            lock: Some(lease(
                &crate::lock::lock_owner(&Config::default()),
                &[("x", "2026-01-04T00:00:00Z")],
                &[],
            )),
            ..Cluster::default()
        },
        alertmanager: None,
    };
    let c = cfg("concurrency: {maxNodes: 3, groupBy: zone, maxNodesPerGroup: 1}");
    let e = agrees(&g, &c);
    assert!(e["a"].eligible);
    assert_eq!(codes(&e["b"]), [ReasonCode::GroupFull]);
    assert!(
        e["b"].reasons[0].message.contains("zone=1")
            && e["b"].reasons[0].message.contains("a (ahead")
    );
    assert_eq!(codes(&e["c"]), [ReasonCode::GroupFull]);
    assert!(
        e["c"].reasons[0].message.contains("x (in flight"),
        "{:?}",
        e["c"]
    );
    assert_eq!(codes(&e["x"]), [ReasonCode::InFlight]);
    assert!(!e["x"].held());
    assert_eq!(e["x"].starts_at, Some(t("2026-01-04T00:00:00Z")));
}

#[test]
fn every_blocker_is_said_with_the_slot_the_node_would_still_wait_for() {
    let mut g = world(vec![
        flagged("a", "2026-01-01T00:00:00Z", &[]),
        flagged("b", "2026-01-02T00:00:00Z", &[]),
    ]);
    g.cluster.pods = vec![pod("backup-1", "a", "backup")];
    g.cluster.lock = Some(lease(
        "rollboot-pause/alice",
        &[],
        &[
            (crate::lock::PAUSED_BY, "alice"),
            (crate::lock::PAUSED_AT, "2026-01-04T12:00:00Z"),
            (crate::lock::PAUSE_REASON, "change freeze"),
        ],
    ));
    g.cluster.alerts = Some(("http://prom".into(), Ok(vec!["NodeDown".into()])));
    g.alertmanager = Some(("http://am".into(), Err("connection refused".into())));
    let c = cfg("windows: [{schedule: '0 2 * * *', duration: 1h}]\n\
         blockers: {podSelectors: ['app=backup'], prometheus: {url: 'http://prom'}, \
         alertmanager: {url: 'http://am'}}\nconcurrency: {maxNodes: 1}");
    let e = agrees(&g, &c);
    assert_eq!(
        codes(&e["a"]),
        [
            ReasonCode::WindowClosed,
            ReasonCode::Paused,
            ReasonCode::Blocked,
            ReasonCode::Blocked
        ]
    );
    let a = &e["a"].reasons;
    assert_eq!(a[0].until, Some(t("2026-01-05T02:00:00Z")));
    assert!(a[1].message.contains("alice") && a[1].message.contains("change freeze"));
    assert_eq!(a[1].since, Some(t("2026-01-04T12:00:00Z")));
    assert!(a[2].message.contains("ns/backup-1"), "{a:?}");
    assert!(a[3].message.contains("NodeDown"), "{a:?}");
    assert_eq!(
        e["a"].not_checked.len(),
        1,
        "Alertmanager out of reach is no reason"
    );
    // b would still wait for a's slot once they clear.
    assert_eq!(
        codes(&e["b"])[..],
        [
            ReasonCode::WindowClosed,
            ReasonCode::Paused,
            ReasonCode::Blocked,
            ReasonCode::Blocked,
            ReasonCode::MaxNodesReached
        ]
    );
    // Plan's prediction: the next opening.
    assert_eq!(e["a"].starts_at, Some(t("2026-01-05T02:00:00Z")));
}

#[test]
fn another_holder_of_the_lock_holds_the_waiting_and_the_in_flight() {
    let g = Gathered {
        cluster: Cluster {
            nodes: vec![
                flagged("a", "2026-01-01T00:00:00Z", &[]),
                flagged("x", "2026-01-01T00:00:00Z", &[]),
            ],
            lock: Some(lease("kured", &[("x", "2026-01-04T00:00:00Z")], &[])),
            ..Cluster::default()
        },
        alertmanager: None,
    };
    let e = agrees(&g, &cfg("concurrency: {maxNodes: 2}"));
    assert_eq!(codes(&e["a"]), [ReasonCode::LockHeldByOther]);
    assert!(e["a"].reasons[0].message.contains("`kured`"));
    assert_eq!(
        codes(&e["x"]),
        [ReasonCode::InFlight, ReasonCode::LockHeldByOther]
    );
}

#[test]
fn a_node_whose_budget_has_no_room_is_passed_over_for_the_next() {
    let mut g = world(vec![
        flagged("a", "2026-01-01T00:00:00Z", &[]),
        flagged("b", "2026-01-02T00:00:00Z", &[]),
    ]);
    g.cluster.pods = vec![pod("web-a", "a", "web"), pod("db-b", "b", "db")];
    g.cluster.budgets = vec![budget("web", "web", 0), budget("db", "db", 1)];
    let e = agrees(&g, &cfg("concurrency: {maxNodes: 1, passOverFor: 30m}"));
    assert!(e["b"].eligible);
    assert_eq!(codes(&e["a"]), [ReasonCode::PassedOver]);
    let r = &e["a"].reasons[0];
    assert!(r.message.contains("budget ns/web allows 0"), "{r:?}");
    assert_eq!(r.until, Some(now() + chrono::TimeDelta::minutes(30)));
}

#[test]
fn a_node_in_flight_waiting_for_its_gate_annotation_says_the_hook() {
    let c = cfg("hooks: {beforeDrain: {gates: ['example.com/ready'], timeout: 1h}}");
    let mut n = annotate(
        annotate(
            annotate(
                node("x", &[]),
                proto::REBOOT_REQUIRED,
                "2026-01-01T00:00:00Z",
            ),
            proto::STATE,
            "cordoning",
        ),
        proto::STATE_SINCE,
        "2026-01-04T23:59:00Z",
    );
    n = annotate(n, proto::CORDONED_BY, "c-0");
    n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
    n.spec.as_mut().unwrap().taints = Some(vec![k8s_openapi::api::core::v1::Taint {
        key: proto::TAINT_UNSCHEDULABLE.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    }]);
    let v = NodeView::from_node(&n);
    let begun = crate::hooks::decide::begin_patch(
        crate::config::Phase::BeforeDrain,
        &c,
        &v,
        t("2026-01-04T23:59:00Z"),
    );
    let hooks = begun["metadata"]["annotations"][proto::HOOKS]
        .as_str()
        .unwrap();
    let v = NodeView::from_node(&annotate(n, proto::HOOKS, hooks));
    let g = Gathered {
        cluster: Cluster {
            nodes: vec![v],
            lock: Some(lease(
                &crate::lock::lock_owner(&c),
                &[("x", "2026-01-04T23:59:00Z")],
                &[],
            )),
            ..Cluster::default()
        },
        alertmanager: None,
    };
    let e = agrees(&g, &c);
    assert_eq!(
        codes(&e["x"]),
        [ReasonCode::InFlight, ReasonCode::WaitingForHook]
    );
    assert!(e["x"].reasons[0].message.contains("cordoning since"));
    assert!(
        e["x"].reasons[1].message.contains("example.com/ready"),
        "{:?}",
        e["x"]
    );
    assert!(e["x"].reasons[1].until.is_some());
}

#[test]
fn no_such_node_is_an_error_naming_it() {
    let g = world(vec![view("a", &[], &[])]);
    let e = explain(&g, &Config::default(), "zz", now()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no node named `zz` in the cluster (1 node(s) read)"
    );
}

#[test]
fn the_codes_are_camel_case_and_the_json_omits_what_is_unknown() {
    let g = world(vec![view("a", &[], &[])]);
    let e = explain(&g, &Config::default(), "a", now()).unwrap();
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(
        v,
        json!({"node": "a", "eligible": false, "startsAt": null,
            "reasons": [{"code": "notFlagged", "message": e.reasons[0].message}]})
    );
    for (code, text) in [
        (ReasonCode::RestingUntil, "restingUntil"),
        (ReasonCode::LockHeldByOther, "lockHeldByOther"),
        (ReasonCode::MaxNodesReached, "maxNodesReached"),
        (ReasonCode::WaitingForHook, "waitingForHook"),
    ] {
        assert_eq!(code.code(), text);
    }
}

#[test]
fn explain_agrees_with_the_pick_and_the_blockers_over_random_worlds() {
    use rand::{Rng, SeedableRng};
    let configs = [
        cfg(
            "concurrency: {maxNodes: 3, groupBy: zone, maxNodesPerGroup: 1}\n\
             failures: {maxFailures: 2}\nblockers: {maxUnreadyNodes: 2}",
        ),
        cfg(
            "concurrency: {maxNodes: 3, passOverFor: 10m}\nnodes: {minRebootInterval: 2d}\n\
             failures: {maxFailures: 3}\nblockers: {maxUnreadyNodes: 2}",
        ),
        cfg(
            "concurrency: {maxNodes: 2}\nblockers: {maxUnreadyNodes: 1}\n\
             nodes: {selector: 'pool!=gpu', order: name}\nfailures: {maxFailures: 1}",
        ),
    ];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(50);
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..90 {
        let config = &configs[round % configs.len()];
        let mut nodes = Vec::new();
        let mut pods = Vec::new();
        let mut in_flight = Vec::new();
        for i in 0..12 {
            let name = format!("n-{i:02}");
            let zone = ["a", "b"][rng.random_range(0..2)];
            let pool = if rng.random_bool(0.2) { "gpu" } else { "web" };
            let mut n = node(&name, &[("zone", zone), ("pool", pool)]);
            if rng.random_bool(0.6) {
                let at = format!("2026-01-0{}T00:00:00Z", rng.random_range(1..4));
                n = annotate(n, proto::REBOOT_REQUIRED, &at);
            }
            if rng.random_bool(0.1) {
                n = annotate(n, proto::EXCLUDE, "true");
            }
            if rng.random_bool(0.05) {
                n = annotate(n, proto::STATE, "failed");
                n = annotate(n, proto::CORDONED_BY, "c-0");
                n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
            }
            if rng.random_bool(0.15) {
                n = annotate(n, proto::LAST_REBOOT, "2026-01-04T00:00:00Z");
            }
            if rng.random_bool(0.05) {
                let s = n.status.as_mut().unwrap();
                s.conditions.as_mut().unwrap()[0].status = "False".into();
            }
            if rng.random_bool(0.1) {
                in_flight.push(name.clone());
            }
            pods.push(pod(&format!("p-{i}"), &name, ["web", "db", "cache"][i % 3]));
            nodes.push(NodeView::from_node(&n));
        }
        let entries: Vec<(&str, &str)> = in_flight
            .iter()
            .map(|n| (n.as_str(), "2026-01-04T00:00:00Z"))
            .collect();
        let g = Gathered {
            cluster: Cluster {
                nodes,
                pods,
                budgets: vec![
                    budget("web", "web", rng.random_range(0..2)),
                    budget("db", "db", rng.random_range(0..3)),
                ],
                lock: Some(lease(&crate::lock::lock_owner(config), &entries, &[])),
                ..Cluster::default()
            },
            alertmanager: None,
        };
        for e in agrees(&g, config).values() {
            seen.extend(e.reasons.iter().map(|r| r.code.code()));
            if e.eligible {
                seen.insert("eligible".into());
            }
        }
    }
    // The worlds hold every case the agreement is about.
    for want in [
        "eligible",
        "blocked",
        "maxNodesReached",
        "groupFull",
        "passedOver",
        "restingUntil",
    ] {
        assert!(seen.contains(want), "no world had {want}: {seen:?}");
    }
}
