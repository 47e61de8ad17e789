//! Unit tests of the planner: pure inputs, no cluster.

use super::*;
use crate::budgets::never_allows;
use crate::node::fixtures::{annotate, node};
use crate::node::{REBOOT_REQUIRED, STATE};
use serde_json::json;

fn t(s: &str) -> DateTime<Utc> {
    crate::time::parse_annotation(s).unwrap()
}

fn cfg(yaml: &str) -> Config {
    crate::config::parse_str(yaml).unwrap()
}

fn flagged(name: &str, at: &str) -> NodeView {
    NodeView::from_node(&annotate(node(name, &[]), REBOOT_REQUIRED, at))
}

/// A running, ready pod on `node` in namespace `ns`, owned by `owner` (kind) when given.
fn pod(ns: &str, name: &str, node: &str, owner: Option<&str>, labels: serde_json::Value) -> Pod {
    let mut v = json!({
        "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}"), "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    });
    if let Some(kind) = owner {
        v["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": kind, "name": format!("{name}-owner"),
            "uid": "o", "controller": true,
        }]);
    }
    serde_json::from_value(v).unwrap()
}

fn budget(
    ns: &str,
    name: &str,
    app: &str,
    spec: serde_json::Value,
    allowed: i32,
) -> PodDisruptionBudget {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": app}});
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name},
        "spec": spec,
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0},
    }))
    .unwrap()
}

fn kinds(p: &Plan) -> Vec<(ProblemKind, Option<&str>, Option<&str>)> {
    p.problems
        .iter()
        .map(|x| (x.kind, x.node.as_deref(), x.pod.as_deref()))
        .collect()
}

#[test]
fn a_clean_node_is_planned_with_its_longest_grace_period_and_proceeds() {
    let mut web = pod(
        "app",
        "web-1",
        "a",
        Some("ReplicaSet"),
        json!({"app": "web"}),
    );
    web.spec.as_mut().unwrap().termination_grace_period_seconds = Some(90);
    let other = pod(
        "app",
        "web-2",
        "a",
        Some("ReplicaSet"),
        json!({"app": "web"}),
    );
    let cluster = Cluster {
        nodes: vec![flagged("a", "2026-01-01T00:00:00Z")],
        pods: vec![web, other],
        budgets: vec![budget("app", "web", "web", json!({"maxUnavailable": 1}), 1)],
        ..Default::default()
    };
    let now = t("2026-01-02T00:00:00Z");
    let p = build(&cluster, &cfg("{}"), &Options::default(), now);
    assert!(p.proceeds, "{:?}", p.problems);
    let n = &p.nodes[0];
    assert_eq!(n.estimate.drain_seconds, 90);
    assert_eq!(n.estimate.reboot_seconds, 300);
    assert_eq!(n.estimate.gate_seconds, 60);
    assert_eq!(n.estimate.total_seconds, 450);
    assert!(
        n.estimate.drain_basis.contains("app/web-1"),
        "{}",
        n.estimate.drain_basis
    );
    assert_eq!(n.evict[0].budgets, ["app/web"]);
    assert_eq!(n.start, Some(now));
    assert_eq!(p.rollout.end, Some(now + TimeDelta::seconds(450)));
}

#[test]
fn every_pod_that_would_stop_a_drain_is_named_with_its_node_and_why() {
    let mut scratch = pod(
        "app",
        "scratch",
        "a",
        Some("ReplicaSet"),
        json!({"app": "s"}),
    );
    scratch.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(
        json!({"name": "tmp", "emptyDir": {}}),
    )
    .unwrap()]);
    let cluster = Cluster {
        nodes: vec![
            flagged("a", "2026-01-01T00:00:00Z"),
            flagged("b", "2026-01-01T00:00:01Z"),
        ],
        pods: vec![
            pod("app", "bare", "a", None, json!({"app": "bare"})),
            scratch,
            pod(
                "app",
                "db-0",
                "b",
                Some("StatefulSet"),
                json!({"app": "db"}),
            ),
            pod(
                "app",
                "db-1",
                "b",
                Some("StatefulSet"),
                json!({"app": "db"}),
            ),
            pod("app", "q-0", "b", Some("ReplicaSet"), json!({"app": "q"})),
            pod(
                "app",
                "both",
                "b",
                Some("ReplicaSet"),
                json!({"app": "both", "tier": "x"}),
            ),
            pod(
                "app",
                "frozen",
                "b",
                Some("ReplicaSet"),
                json!({"app": "frozen"}),
            ),
            pod(
                "other",
                "side",
                "b",
                Some("ReplicaSet"),
                json!({"app": "side"}),
            ),
        ],
        budgets: vec![
            // minAvailable equal to the pods it selects: never.
            budget("app", "db", "db", json!({"minAvailable": 2}), 0),
            budget("app", "q", "q", json!({"maxUnavailable": "0%"}), 0),
            budget("app", "both-1", "both", json!({"maxUnavailable": 1}), 1),
            budget("app", "both-2", "both", json!({"maxUnavailable": 1}), 1),
            // Could allow one, allows none now.
            budget("app", "frozen", "frozen", json!({"maxUnavailable": 1}), 0),
        ],
        ..Default::default()
    };
    // The failures tolerated and returned to service: each node is planned, none holding the
    // one slot after it failed.
    let c = cfg("drain: {podSelector: 'app notin (side)'}\nfailures: {maxFailures: 5, returnToService: true}\nnodes: {order: name}");
    let p = build(&cluster, &c, &Options::default(), t("2026-01-02T00:00:00Z"));
    assert!(!p.proceeds);
    let k = kinds(&p);
    for want in [
        (ProblemKind::Unreplicated, Some("a"), Some("app/bare")),
        (ProblemKind::EmptyDir, Some("a"), Some("app/scratch")),
        (ProblemKind::BudgetNeverAllows, Some("b"), Some("app/db-0")),
        (ProblemKind::BudgetNeverAllows, Some("b"), Some("app/db-1")),
        (ProblemKind::BudgetNeverAllows, Some("b"), Some("app/q-0")),
        (ProblemKind::OverlappingBudgets, Some("b"), Some("app/both")),
        (
            ProblemKind::BudgetAllowsNoneNow,
            Some("b"),
            Some("app/frozen"),
        ),
        (
            ProblemKind::OutsidePodSelector,
            Some("b"),
            Some("other/side"),
        ),
    ] {
        assert!(k.contains(&want), "{want:?} missing from {k:?}");
    }
    assert_eq!(k.len(), 8, "{k:?}");
    let both = p
        .problems
        .iter()
        .find(|x| x.kind == ProblemKind::OverlappingBudgets)
        .unwrap();
    assert_eq!(both.budgets, ["app/both-1", "app/both-2"]);
    let never = p
        .problems
        .iter()
        .find(|x| x.pod.as_deref() == Some("app/q-0"))
        .unwrap();
    assert!(
        never.message.contains("maxUnavailable is 0%"),
        "{}",
        never.message
    );
    let side = p
        .problems
        .iter()
        .find(|x| x.kind == ProblemKind::OutsidePodSelector)
        .unwrap();
    assert_eq!(side.severity, Severity::Warns);
    // a fails at once; b's budgets hold it until drain.timeout.
    assert_eq!(p.nodes[0].outcome, PredictedOutcome::Fails);
    assert_eq!(p.nodes[0].estimate.total_seconds, 0);
    let refused: Vec<(&str, Reason)> = p.nodes[0]
        .refuse
        .iter()
        .map(|s| (s.pod.as_str(), s.reason))
        .collect();
    assert_eq!(
        refused,
        [
            ("app/bare", Reason::Unreplicated),
            ("app/scratch", Reason::EmptyDir)
        ]
    );
    assert_eq!(p.nodes[1].outcome, PredictedOutcome::Fails);
    assert_eq!(p.nodes[1].estimate.drain_seconds, 900);
    assert_eq!(p.nodes[1].estimate.reboot_seconds, 0);
}

#[test]
fn force_delete_after_timeout_turns_a_held_budget_into_a_warning_and_a_timeout_long_drain() {
    let cluster = Cluster {
        nodes: vec![flagged("a", "2026-01-01T00:00:00Z")],
        pods: vec![pod(
            "app",
            "q-0",
            "a",
            Some("ReplicaSet"),
            json!({"app": "q"}),
        )],
        budgets: vec![budget("app", "q", "q", json!({"maxUnavailable": 0}), 0)],
        ..Default::default()
    };
    let c = cfg("drain: {forceDeleteAfterTimeout: true, timeout: 10m}");
    let p = build(&cluster, &c, &Options::default(), t("2026-01-02T00:00:00Z"));
    assert!(p.proceeds, "{:?}", p.problems);
    assert_eq!(p.problems[0].kind, ProblemKind::ForceDelete);
    assert_eq!(p.nodes[0].outcome, PredictedOutcome::Reboots);
    assert_eq!(p.nodes[0].estimate.drain_seconds, 600);
}

#[test]
fn daemon_set_mirror_and_completed_pods_follow_the_drains_rules() {
    let mut done = pod("app", "job-1", "a", None, json!({}));
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let ds = pod("kube-system", "agent", "a", Some("DaemonSet"), json!({}));
    let orphan = pod("kube-system", "gone", "a", Some("DaemonSet"), json!({}));
    let mut mirror = pod("kube-system", "etcd-a", "a", None, json!({}));
    mirror.metadata.annotations = Some(BTreeMap::from([(
        crate::node::MIRROR_POD.to_string(),
        "x".to_string(),
    )]));
    let cluster = Cluster {
        nodes: vec![flagged("a", "2026-01-01T00:00:00Z")],
        pods: vec![done, ds, orphan, mirror],
        daemon_sets: BTreeSet::from([("kube-system".into(), "agent-owner".into())]),
        ..Default::default()
    };
    let p = build(
        &cluster,
        &cfg("drain: {evictUnreplicated: false}"),
        &Options::default(),
        t("2026-01-02T00:00:00Z"),
    );
    assert!(p.proceeds, "{:?}", p.problems);
    let evict: Vec<&str> = p.nodes[0].evict.iter().map(|e| e.pod.as_str()).collect();
    // A completed pod is evicted whatever its owner; a DaemonSet pod whose DaemonSet is gone too.
    assert_eq!(evict, ["app/job-1", "kube-system/gone"]);
    let skip: Vec<(&str, Reason)> = p.nodes[0]
        .skip
        .iter()
        .map(|s| (s.pod.as_str(), s.reason))
        .collect();
    assert_eq!(
        skip,
        [
            ("kube-system/agent", Reason::DaemonSet),
            ("kube-system/etcd-a", Reason::MirrorPod)
        ]
    );
    let p = build(
        &cluster,
        &cfg("drain: {ignoreDaemonSets: false}"),
        &Options::default(),
        t("2026-01-02T00:00:00Z"),
    );
    assert_eq!(
        kinds(&p),
        [(ProblemKind::DaemonSet, Some("a"), Some("kube-system/agent"))]
    );
}

#[test]
fn cluster_wide_blockers_come_from_the_controllers_rules_and_name_their_objects() {
    let mut unready = node("sick", &[]);
    unready
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()[0]
        .status = "False".into();
    let failed = annotate(node("broken", &[]), STATE, "failed");
    let lock: Lease = serde_json::from_value(json!({
        "metadata": {"name": "rollboot-lock", "namespace": "rollboot-system"},
        "spec": {"holderIdentity": "ops-team"},
    }))
    .unwrap();
    let cluster = Cluster {
        lock: Some(lock),
        nodes: vec![
            flagged("a", "2026-01-01T00:00:00Z"),
            NodeView::from_node(&unready),
            NodeView::from_node(&failed),
        ],
        pods: vec![pod(
            "ops",
            "backup-1",
            "sick",
            Some("Job"),
            json!({"backup": "running"}),
        )],
        ..Default::default()
    };
    let c = cfg(
        "blockers: {podSelectors: ['backup=running'], prometheus: {url: 'http://127.0.0.1:9090'}}",
    );
    let p = build(&cluster, &c, &Options::default(), t("2026-01-02T00:00:00Z"));
    assert!(!p.proceeds);
    let by = |k: ProblemKind| {
        p.problems
            .iter()
            .find(|x| x.kind == k)
            .unwrap_or_else(|| panic!("{k:?}: {:?}", p.problems))
    };
    assert!(by(ProblemKind::LockHeld).message.contains("`ops-team`"));
    assert_eq!(by(ProblemKind::UnreadyNodes).nodes, ["sick"]);
    assert_eq!(by(ProblemKind::FailedNodes).nodes, ["broken"]);
    assert_eq!(by(ProblemKind::BlockingPods).pods, ["ops/backup-1"]);
    assert!(p.problems.iter().all(|x| x.severity == Severity::Blocks));
    assert!(p.rollout.assumes_blockers_cleared);
    assert!(
        p.not_checked[0].starts_with("blockers.prometheus"),
        "{:?}",
        p.not_checked
    );
}

#[test]
fn with_all_every_selected_node_is_planned_in_the_controllers_order() {
    let cluster = Cluster {
        nodes: vec![
            NodeView::from_node(&node("c", &[("pool", "web")])),
            flagged("b", "2026-01-01T00:00:00Z"),
            NodeView::from_node(&node("a", &[("pool", "web")])),
            NodeView::from_node(&node("gpu", &[("pool", "gpu")])),
        ],
        ..Default::default()
    };
    let c = cfg("nodes: {selector: 'pool in (web)'}");
    let p = build(
        &cluster,
        &c,
        &Options {
            all: true,
            ..Default::default()
        },
        t("2026-01-02T00:00:00Z"),
    );
    let names: Vec<&str> = p.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["a", "c"], "b is not selected, gpu neither");
    assert!(!p.nodes[0].flagged);
    let c = cfg("{}");
    let p = build(
        &cluster,
        &c,
        &Options {
            all: true,
            ..Default::default()
        },
        t("2026-01-02T00:00:00Z"),
    );
    let names: Vec<&str> = p.nodes.iter().map(|n| n.name.as_str()).collect();
    // Oldest flag first; the unflagged ones after, by name.
    assert_eq!(names, ["b", "a", "c", "gpu"]);
    assert_eq!(
        p.nodes.iter().map(|n| n.order).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    let p = build(&cluster, &c, &Options::default(), t("2026-01-02T00:00:00Z"));
    assert_eq!(p.nodes.len(), 1);
}

#[test]
fn never_allows_reads_percentages_rounded_up() {
    let b = |spec| budget("n", "b", "x", spec, 0);
    assert!(never_allows(&b(json!({"minAvailable": "100%"})), 3).is_some());
    assert!(
        never_allows(&b(json!({"minAvailable": "67%"})), 3).is_some(),
        "67% of 3 is 2.01, up to 3"
    );
    assert!(never_allows(&b(json!({"minAvailable": "66%"})), 3).is_none());
    assert!(never_allows(&b(json!({"minAvailable": 3})), 2).is_some());
    assert!(never_allows(&b(json!({"maxUnavailable": 0})), 2).is_some());
    assert!(never_allows(&b(json!({"maxUnavailable": "1%"})), 2).is_none());
}

#[test]
fn measured_cycles_give_each_node_its_own_figures_and_the_rest_their_median() {
    use crate::node::{LAST_CYCLE, LAST_REBOOT};
    let measured = |name: &str, cycle: &str| {
        let n = annotate(node(name, &[]), LAST_REBOOT, "2026-01-01T03:00:00.000Z");
        NodeView::from_node(&annotate(n, LAST_CYCLE, cycle))
    };
    let cluster = Cluster {
        nodes: vec![
            measured(
                "a",
                r#"{"drainSeconds":12.4,"rebootSeconds":40,"gateSeconds":4}"#,
            ),
            measured("b", r#"{"rebootSeconds":60,"gateSeconds":6}"#),
            NodeView::from_node(&node("c", &[])),
        ],
        pods: vec![pod(
            "app",
            "web-1",
            "b",
            Some("ReplicaSet"),
            json!({"app": "web"}),
        )],
        ..Default::default()
    };
    let c = cfg("{}");
    let all = Options {
        all: true,
        ..Default::default()
    };
    let p = build(&cluster, &c, &all, t("2026-01-02T00:00:00Z"));
    let est = |name: &str| {
        p.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap()
            .estimate
            .clone()
    };
    let a = est("a");
    assert_eq!(
        (a.drain_seconds, a.reboot_seconds, a.gate_seconds),
        (12, 40, 4)
    );
    assert!(a
        .drain_basis
        .starts_with("measured on its last cycle (2026-01-01T03:00:00Z)"));
    assert!(a.reboot_basis.starts_with("measured on its last cycle"));
    // b measured no drain: the grace rule (its pod's default 30 s).
    let b = est("b");
    assert_eq!((b.drain_seconds, b.reboot_seconds), (30, 60));
    assert!(
        b.drain_basis.contains("longest grace period"),
        "{}",
        b.drain_basis
    );
    // c has no cycle of its own: the median of a's and b's.
    let cn = est("c");
    assert_eq!((cn.reboot_seconds, cn.gate_seconds), (50, 5));
    assert_eq!(cn.reboot_basis, "the median of 2 node(s)' last cycles");
    assert_eq!(p.estimate.measured_nodes, 2);
    assert_eq!(p.estimate.reboot_seconds, 50);
    // A flag wins over every measurement.
    let flagged = Options {
        reboot_time: Some(Duration::from_mins(2)),
        ..all
    };
    let p = build(&cluster, &c, &flagged, t("2026-01-02T00:00:00Z"));
    assert!(p.nodes.iter().all(|n| n.estimate.reboot_seconds == 120));
    assert_eq!(p.nodes[0].estimate.reboot_basis, "--reboot-time 2m");
    // Nothing measured and no flag: the defaults, said as such.
    let bare = Cluster {
        nodes: vec![NodeView::from_node(&node("c", &[]))],
        ..Default::default()
    };
    let p = build(&bare, &c, &all, t("2026-01-02T00:00:00Z"));
    assert_eq!(
        (p.estimate.reboot_seconds, p.estimate.gate_seconds),
        (300, 60)
    );
    assert!(p.estimate.reboot_basis.starts_with("the default 5m"));
}

#[test]
fn a_failed_node_rollboot_left_cordoned_is_named_as_holding_a_slot() {
    let failed = NodeView {
        unschedulable: true,
        cordoned_by: Some("controller-0".into()),
        state: Some(NodeState::Failed),
        state_since: Some(t("2026-01-01T00:00:00Z")),
        failure_reason: Some("the drain did not finish within 15m".into()),
        ..NodeView::from_node(&node("z", &[]))
    };
    let cluster = Cluster {
        nodes: vec![flagged("a", "2026-01-01T00:00:00Z"), failed],
        ..Default::default()
    };
    let now = t("2026-01-02T00:00:00Z");
    // Tolerated, but its slot is the only one: a gets none, and the plan says why.
    let p = build(
        &cluster,
        &cfg("failures: {maxFailures: 1}"),
        &Options::default(),
        now,
    );
    assert!(!p.proceeds);
    let held = p
        .problems
        .iter()
        .find(|x| x.kind == ProblemKind::FailedHoldsSlot)
        .expect("named");
    assert_eq!(
        (held.severity, held.node.as_deref(), held.nodes.clone()),
        (Severity::Blocks, Some("z"), vec!["a".to_string()])
    );
    assert!(
        held.message.contains("holds one of maxNodes' 1 slot(s)")
            && held.message.contains("drain did not finish"),
        "{}",
        held.message
    );
    assert_eq!(p.nodes[0].start, None);
    // Two slots: a starts now, and the held one is only a warning.
    let p = build(
        &cluster,
        &cfg("failures: {maxFailures: 1}\nconcurrency: {maxNodes: 2}"),
        &Options::default(),
        now,
    );
    assert!(p.proceeds, "{:?}", p.problems);
    assert_eq!(p.nodes[0].start, Some(now));
    let held = p
        .problems
        .iter()
        .find(|x| x.kind == ProblemKind::FailedHoldsSlot)
        .expect("named");
    assert_eq!(held.severity, Severity::Warns);
}

#[test]
fn nodes_other_actors_take_out_and_nodes_cordoned_by_others_are_said() {
    let taken = NodeView {
        other_actor: Some("cluster-autoscaler (taint ToBeDeletedByClusterAutoscaler)".into()),
        ..flagged("t", "2026-01-01T00:00:00Z")
    };
    let by_hand = NodeView {
        unschedulable: true,
        ..NodeView::from_node(&node("h", &[]))
    };
    let cluster = Cluster {
        nodes: vec![flagged("a", "2026-01-01T00:00:00Z"), taken, by_hand],
        ..Default::default()
    };
    let now = t("2026-01-02T00:00:00Z");
    let kinds = |p: &Plan| -> Vec<(ProblemKind, Severity, Option<String>)> {
        p.problems
            .iter()
            .filter(|x| {
                matches!(
                    x.kind,
                    ProblemKind::OtherMaintenance | ProblemKind::CordonedByOthers
                )
            })
            .map(|x| (x.kind, x.severity, x.node.clone()))
            .collect()
    };
    let p = build(
        &cluster,
        &cfg("concurrency: {maxNodes: 2}"),
        &Options::default(),
        now,
    );
    assert_eq!(
        kinds(&p),
        [
            (
                ProblemKind::OtherMaintenance,
                Severity::Warns,
                Some("t".into())
            ),
            (ProblemKind::CordonedByOthers, Severity::Warns, None),
        ]
    );
    let other = &p
        .problems
        .iter()
        .find(|x| x.kind == ProblemKind::OtherMaintenance)
        .unwrap();
    assert!(
        other
            .message
            .contains("otherMaintenance: cluster-autoscaler"),
        "{}",
        other.message
    );
    // t is never planned; a takes the slot t leaves.
    assert_eq!(
        p.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    // Counted, the cordon is no news: no warning about it.
    let p = build(
        &cluster,
        &cfg("concurrency: {maxNodes: 3, countCordoned: true}"),
        &Options::default(),
        now,
    );
    assert_eq!(
        kinds(&p),
        [(
            ProblemKind::OtherMaintenance,
            Severity::Warns,
            Some("t".into())
        )]
    );
}

/// `pod` with a claim `data-NAME`.
fn stateful_pod(name: &str, node: &str) -> Pod {
    let mut p = pod("db", name, node, Some("StatefulSet"), json!({"app": "db"}));
    p.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(json!({
        "name": "data", "persistentVolumeClaim": {"claimName": format!("data-{name}")}
    }))
    .unwrap()]);
    p
}

#[test]
fn the_plan_shows_the_drains_steps_its_volumes_and_the_predicted_detach_wait() {
    let cluster = Cluster {
        nodes: vec![flagged("a", "2026-01-01T00:00:00Z")],
        pods: vec![
            stateful_pod("db-0", "a"),
            pod(
                "app",
                "web-1",
                "a",
                Some("ReplicaSet"),
                json!({"app": "web"}),
            ),
            // A shared volume: not waited for.
            stateful_pod("files-0", "a"),
        ],
        claims: BTreeMap::from([
            (("db".into(), "data-db-0".into()), Ok("pvc-1".into())),
            (
                ("db".into(), "data-files-0".into()),
                Err(crate::drain::volumes::NotWaited::Shared),
            ),
        ]),
        ..Default::default()
    };
    let now = t("2026-01-02T00:00:00Z");
    let p = build(&cluster, &cfg("{}"), &Options::default(), now);
    let n = &p.nodes[0];
    let steps: Vec<(&str, Vec<&str>)> = n
        .steps
        .iter()
        .map(|s| {
            (
                s.label.as_str(),
                s.evict.iter().map(|x| x.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("priority 0", vec!["app/web-1", "db/files-0"]),
            ("volumes: db/db-0", vec!["db/db-0"])
        ]
    );
    assert_eq!(n.volumes.len(), 1);
    assert_eq!(
        (n.volumes[0].pod.as_str(), n.volumes[0].pv.as_str()),
        ("db/db-0", "pvc-1")
    );
    assert_eq!(n.estimate.detach_seconds, DEFAULT_DETACH_SECONDS);
    // Two steps of 30 s grace each, and the detach wait.
    assert_eq!(n.estimate.drain_seconds, 30 + 30 + DEFAULT_DETACH_SECONDS);
    let text = crate::render::Render::text(&p);
    assert!(
        text.contains("step 2 (volumes: db/db-0): db/db-0"),
        "{text}"
    );
    assert!(text.contains("volume pvc-1 of db/db-0"), "{text}");

    // Without waitForDetach, no wait is predicted.
    let p = build(
        &cluster,
        &cfg("drain: {volumes: {waitForDetach: false}}"),
        &Options::default(),
        now,
    );
    assert_eq!(p.nodes[0].estimate.detach_seconds, 0);
}

#[test]
fn a_pod_an_order_rule_skips_is_left_with_a_warning_and_not_evicted() {
    let cluster = Cluster {
        nodes: vec![flagged("a", "2026-01-01T00:00:00Z")],
        pods: vec![
            pod(
                "app",
                "web-1",
                "a",
                Some("ReplicaSet"),
                json!({"app": "web"}),
            ),
            pod(
                "mon",
                "agent-1",
                "a",
                Some("ReplicaSet"),
                json!({"app": "agent"}),
            ),
        ],
        ..Default::default()
    };
    let c = cfg("drain: {order: [{podSelector: app=agent, behavior: skip}]}");
    let p = build(&cluster, &c, &Options::default(), t("2026-01-02T00:00:00Z"));
    let n = &p.nodes[0];
    assert_eq!(n.evict.len(), 1);
    assert_eq!(n.evict[0].pod, "app/web-1");
    assert_eq!(n.skip.len(), 1);
    assert_eq!(n.skip[0].reason, Reason::OrderSkip);
    assert!(kinds(&p).contains(&(ProblemKind::OrderSkip, Some("a"), Some("mon/agent-1"))));
}

#[test]
fn a_node_rebooted_within_min_reboot_interval_is_planned_from_when_it_has_rested() {
    let recent = NodeView::from_node(&annotate(
        annotate(node("a", &[]), REBOOT_REQUIRED, "2026-01-01T00:00:00Z"),
        crate::node::LAST_REBOOT,
        "2026-01-01T20:00:00Z",
    ));
    let cluster = Cluster {
        nodes: vec![recent, flagged("b", "2026-01-01T06:00:00Z")],
        ..Default::default()
    };
    let now = t("2026-01-02T00:00:00Z");
    let c = cfg("nodes: {minRebootInterval: 12h}");
    let p = build(&cluster, &c, &Options::default(), now);
    let a = p.nodes.iter().find(|n| n.name == "a").unwrap();
    let b = p.nodes.iter().find(|n| n.name == "b").unwrap();
    // `a`, flagged first, waits until 08:00; `b` goes first.
    assert_eq!(a.resting_until, Some(t("2026-01-02T08:00:00Z")));
    assert_eq!(a.start, Some(t("2026-01-02T08:00:00Z")));
    assert_eq!(b.start, Some(now));
    assert_eq!(b.resting_until, None);
    let text = crate::render::Render::text(&p);
    assert!(text.contains("rested from"), "{text}");
    // Without the key, `a` (flagged first) starts now.
    let p = build(&cluster, &cfg("{}"), &Options::default(), now);
    assert_eq!(p.nodes[0].name, "a");
    assert_eq!(p.nodes[0].start, Some(now));
}

#[test]
fn a_node_the_controller_passed_over_says_for_which_budget() {
    let record = r#"{"since":"2026-01-01T23:50:00Z","budget":"apps/web","why":"budget apps/web allows 0 disruption(s) now"}"#;
    let passed = NodeView::from_node(&annotate(
        annotate(node("a", &[]), REBOOT_REQUIRED, "2026-01-01T00:00:00Z"),
        crate::node::PASSED_OVER,
        record,
    ));
    let cluster = Cluster {
        nodes: vec![passed, flagged("b", "2026-01-01T06:00:00Z")],
        ..Default::default()
    };
    let p = build(
        &cluster,
        &cfg("concurrency: {maxNodes: 2}"),
        &Options::default(),
        t("2026-01-02T00:00:00Z"),
    );
    let a = p.nodes.iter().find(|n| n.name == "a").unwrap();
    let rec = a.passed_over.as_ref().expect("the record");
    assert_eq!(rec.budget, "apps/web");
    assert_eq!(rec.since, t("2026-01-01T23:50:00Z"));
    assert!(p
        .nodes
        .iter()
        .find(|n| n.name == "b")
        .unwrap()
        .passed_over
        .is_none());
    let text = crate::render::Render::text(&p);
    assert!(text.contains("passed over since"), "{text}");
    assert!(text.contains("for budget apps/web"), "{text}");
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["nodes"][0]["passedOver"]["budget"], "apps/web");
}

#[test]
fn a_fleetlock_host_is_named_with_its_last_request() {
    let rec = r#"{"id":"abc","group":"default","last":{"endpoint":"pre-reboot","at":"2026-01-01T23:00:00Z","answer":"waiting_window"}}"#;
    let mut n = annotate(
        node("a", &[]),
        crate::node::REBOOT_REQUESTED,
        "2026-01-01T00:00:00Z",
    );
    n = annotate(
        n,
        crate::node::REBOOT_REQUESTED_REASON,
        crate::node::FLEETLOCK_REASON,
    );
    n = annotate(n, crate::node::FLEETLOCK, rec);
    let cluster = Cluster {
        nodes: vec![NodeView::from_node(&n)],
        ..Default::default()
    };
    let p = build(
        &cluster,
        &cfg("{}"),
        &Options::default(),
        t("2026-01-02T00:00:00Z"),
    );
    let text = crate::render::Render::text(&p);
    assert!(
        text.contains("FleetLock host abc reboots itself (last pre-reboot 2026-01-01T23:00:00Z: waiting_window)"),
        "{text}"
    );
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["nodes"][0]["fleetlock"]["id"], "abc");
}
