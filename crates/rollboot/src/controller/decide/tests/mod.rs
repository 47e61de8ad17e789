//! The decisions' tests, beside what they test: one file per module of `decide`; here, what
//! they share and the tests of what the facade itself holds.

mod blockers;
mod others;
mod pick;
mod rebuild;
mod shutdown;
mod start;
mod step;
mod warnings;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};

use super::*;
use crate::config::{parse_str, Config, Phase};
use crate::hooks::decide as hooks;
use crate::lock::LockEntry;
use crate::node::fixtures::{annotate, node};
use crate::node::{self as proto, NodeState, NodeView, Token};

fn t(s: &str) -> DateTime<Utc> {
    crate::time::parse_annotation(s).unwrap()
}

fn cfg(yaml: &str) -> Config {
    parse_str(yaml).unwrap()
}

fn flagged(name: &str, at: &str, labels: &[(&str, &str)]) -> NodeView {
    NodeView::from_node(&annotate(node(name, labels), proto::REBOOT_REQUIRED, at))
}

fn entry(since: &str) -> LockEntry {
    LockEntry {
        group: None,
        state: NodeState::Cordoning,
        since: t(since),
        leader: "c-0".into(),
    }
}

fn names(v: Vec<&NodeView>) -> Vec<&str> {
    v.into_iter().map(|n| n.name.as_str()).collect()
}

fn snapshot<'a>(nodes: &'a [NodeView], in_flight: &'a BTreeMap<String, LockEntry>) -> Snapshot<'a> {
    // A test's few views, by reference as a pass hands them over (leaked: a test's worth).
    let nodes: &'a [&'a NodeView] = Vec::leak(nodes.iter().collect());
    Snapshot {
        maintained: &super::NOT_MAINTAINED,
        headroom: None,
        nodes,
        in_flight,
        foreign_holder: None,
        blocking_pods: &[],
        now: t("2026-01-05T00:00:00Z"),
    }
}

/// A reboot token issued at `at`.
fn token(at: &str) -> String {
    Token::new(t(at), 0xabc).text
}

fn in_state(n: NodeView, state: NodeState, since: &str) -> NodeView {
    NodeView {
        state: Some(state),
        state_since: Some(t(since)),
        ..n
    }
}

/// A node in the lock since `e`, cordoned by rollboot, asked to reboot at 00:01 (token,
/// boot ID `boot-1` before), its agent having acknowledged the token.
fn rebooting(ack: bool) -> NodeView {
    let tok = token("2026-01-01T00:01:00Z");
    NodeView {
        unschedulable: true,
        cordoned_by: Some("c-0".into()),
        boot_id_before: Some("boot-1".into()),
        reboot_ack: ack.then(|| tok.clone()),
        reboot_token: Some(tok),
        reboot_attempt: Some(1),
        ..in_state(
            flagged("n", "2026-01-01T00:00:00Z", &[]),
            NodeState::Rebooting,
            "2026-01-01T00:01:00Z",
        )
    }
}

/// A FleetLock host's node in flight since `since`, drained and past its afterDrain
/// hooks' start (none configured), with `extra` annotations.
fn fleetlock_drained(since: &str, extra: &[(&str, &str)]) -> NodeView {
    let mut n = node("fl", &[]);
    n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
    for (k, v) in [
        (proto::STATE, "draining"),
        (proto::STATE_SINCE, since),
        (proto::CORDONED_BY, "c-0"),
        (proto::REBOOT_REQUESTED, since),
        (proto::REBOOT_REQUESTED_REASON, proto::FLEETLOCK_REASON),
        (proto::FLEETLOCK, r#"{"id":"abc","group":"default"}"#),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    {
        n = annotate(n, k, v);
    }
    let view = NodeView::from_node(&n);
    let p = crate::hooks::decide::begin_patch(Phase::AfterDrain, &cfg("{}"), &view, t(since));
    let hooks = p["metadata"]["annotations"][proto::HOOKS].as_str().unwrap();
    NodeView::from_node(&annotate(n, proto::HOOKS, hooks))
}

/// Headroom where each node's pods fall under the budgets given (one pod per budget), and
/// the budgets allow what is given, with those pods already counted as disrupted.
fn headroom(
    nodes: &[(&str, &[&str])],
    budgets: &[(&str, i32)],
    disrupted: &[&str],
) -> crate::budgets::Headroom {
    use crate::budgets::{BudgetNow, Headroom};
    Headroom {
        nodes: nodes
            .iter()
            .map(|(n, bs)| {
                let m = bs
                    .iter()
                    .map(|b| (format!("ns/{b}"), vec![format!("ns/{b}-{n}")]))
                    .collect();
                (n.to_string(), m)
            })
            .collect(),
        budgets: budgets
            .iter()
            .map(|(b, allowed)| {
                let disrupted = disrupted.iter().map(|p| p.to_string()).collect();
                let now = BudgetNow {
                    allowed: *allowed,
                    disrupted,
                };
                (format!("ns/{b}"), now)
            })
            .collect(),
    }
}

/// a, b and c wait, in that order; x drains, in the lock.
fn three_waiting_and_x_draining() -> (Vec<NodeView>, BTreeMap<String, LockEntry>) {
    let nodes = vec![
        flagged("a", "2026-01-01T00:00:00Z", &[]),
        flagged("b", "2026-01-02T00:00:00Z", &[]),
        flagged("c", "2026-01-03T00:00:00Z", &[]),
        in_state(
            flagged("x", "2025-12-31T00:00:00Z", &[]),
            NodeState::Draining,
            "2026-01-04T00:00:00Z",
        ),
    ];
    let lock = BTreeMap::from([("x".to_string(), entry("2026-01-04T00:00:00Z"))]);
    (nodes, lock)
}

#[test]
fn a_pass_over_the_nodes_that_need_a_look_and_those_in_the_lock_decides_as_over_every_node() {
    use k8s_openapi::api::core::v1::Taint;
    use rand::{Rng, SeedableRng};
    let config = cfg(
        "concurrency: {maxNodes: 4, groupBy: zone, maxNodesPerGroup: 2}\n\
         blockers: {maxUnreadyNodes: 2}\nfailures: {maxFailures: 1}\n\
         nodes: {selector: 'pool!=gpu'}\n\
         hooks: {preferNoScheduleTaint: rollboot.dev/reboot-pending}\n",
    );
    let mut rng = rand::rngs::SmallRng::seed_from_u64(14);
    for round in 0..200 {
        let mut views = Vec::new();
        for i in 0..30 {
            let zone = ["a", "b", "c"][rng.random_range(0..3)];
            let pool = if rng.random_bool(0.2) { "gpu" } else { "web" };
            let mut n = node(&format!("n-{i:02}"), &[("zone", zone), ("pool", pool)]);
            let add = |n, key, value: &str| annotate(n, key, value);
            if rng.random_bool(0.4) {
                let at = format!("2026-01-0{}T00:00:00Z", rng.random_range(1..4));
                n = add(n, proto::REBOOT_REQUIRED, &at);
            }
            if rng.random_bool(0.1) {
                n = add(n, proto::REBOOT_REQUESTED, "now");
            }
            let state = ["", "done", "failed", "draining", "bogus"][rng.random_range(0..5)];
            if !state.is_empty() {
                n = add(n, proto::STATE, state);
            }
            if rng.random_bool(0.05) {
                n = add(n, proto::HOOKS, "{not json");
            }
            if rng.random_bool(0.1) {
                n = add(n, proto::EXCLUDE, "true");
            }
            if rng.random_bool(0.15) {
                let status = n.status.as_mut().unwrap();
                status.conditions.as_mut().unwrap()[0].status = "False".into();
            }
            if rng.random_bool(0.2) {
                n.spec.as_mut().unwrap().taints = Some(vec![Taint {
                    key: "rollboot.dev/reboot-pending".into(),
                    effect: "PreferNoSchedule".into(),
                    ..Default::default()
                }]);
            }
            if rng.random_bool(0.05) {
                n.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ));
            }
            views.push(NodeView::from_node(&n));
        }
        let mut in_flight = BTreeMap::new();
        for v in views.iter().filter(|_| rng.random_bool(0.1)) {
            let mut e = entry("2026-01-01T00:00:00Z");
            e.group = v.labels.get("zone").cloned();
            in_flight.insert(v.name.clone(), e);
        }
        let every: Vec<&NodeView> = views.iter().collect();
        let looked: Vec<&NodeView> = views
            .iter()
            .filter(|v| needs_a_look(v, &config) || in_flight.contains_key(&v.name))
            .collect();
        let snap = |nodes| Snapshot {
            maintained: &super::NOT_MAINTAINED,
            headroom: None,
            nodes,
            in_flight: &in_flight,
            foreign_holder: None,
            blocking_pods: &[],
            now: t("2026-01-05T00:00:00Z"),
        };
        let (all, some) = (snap(&every), snap(&looked));
        let now = t("2026-01-05T00:00:00Z");
        assert_eq!(
            blockers(&all, &config, now),
            blockers(&some, &config, now),
            "round {round}"
        );
        assert_eq!(names(pick(&all, &config)), names(pick(&some, &config)));
        assert_eq!(
            names(undated_requests(every.iter().copied())),
            names(undated_requests(looked.iter().copied()))
        );
        let taints = |nodes: &[&NodeView]| {
            hooks::prefer_no_schedule_changes(nodes.iter().copied(), &config)
                .into_iter()
                .map(|(n, t)| (n.name.clone(), t))
                .collect::<Vec<_>>()
        };
        assert_eq!(taints(&every), taints(&looked), "round {round}");
        for v in &views {
            if !annotation_warnings(v, in_flight.get(&v.name)).is_empty() {
                assert!(looked.iter().any(|l| l.name == v.name), "{}", v.name);
            }
        }
        let mut states = HashMap::new();
        for s in views.iter().filter_map(|v| v.state) {
            *states.entry(s).or_default() += 1;
        }
        let mut record = crate::lock::LockRecord::default();
        record.entries = in_flight.clone();
        let gauges = |nodes: &[&NodeView]| {
            let g = super::super::observe::gauges(nodes, &states, &record, &[], &config, "x");
            (g.nodes_by_state, g.node_state_since, g.halted)
        };
        assert_eq!(gauges(&every), gauges(&looked), "round {round}");
    }
}
