//! The health gate's tests: its pure state, and a gate joining a workload watch (the watch's
//! replay forwarded), all without an API server. The watches' own tests are
//! [`crate::budgets::watches`]'.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::record::{GateRecord, GateState, Update};
use super::waiting::Forwarder;
use crate::budgets::watches::tests::obj;
use crate::budgets::watches::{FeedEvent, FeedState, Health, Obj, Stream, Wanted, WorkloadKind};

fn record() -> GateRecord {
    GateRecord {
        budgets: vec!["a/web".into()],
        owners: vec![
            ("ReplicaSet".into(), "a".into(), "web-1".into()),
            ("DaemonSet".into(), "kube-system".into(), "ds".into()),
        ],
        ..GateRecord::default()
    }
}

#[test]
fn budgets_are_chosen_by_the_evicted_pods_labels() {
    let app = |v: &str| BTreeMap::from([("app".to_string(), v.to_string())]);
    let record = GateRecord {
        pods: vec![("a".into(), app("web"))],
        ..GateRecord::default()
    };
    let g = GateState::new(&record);
    assert_eq!(g.streams(), vec![pdb()]);
    let selecting = |v: &str| LabelSelector {
        match_labels: Some(app(v)),
        ..Default::default()
    };
    let w = &g.wanted[&pdb()];
    assert!(w.wants("web-pdb", Some(&selecting("web"))));
    assert!(!w.wants("db-pdb", Some(&selecting("db"))));
    assert!(!w.wants("no-selector", None));
    assert!(g.verdict().unwrap().contains("listing"));
}

#[test]
fn a_forged_record_never_chooses_the_api_s_path() {
    // The record as a Node could carry it after someone rewrote it: every namespace, name and
    // label that is no Kubernetes one is left out as it is read, whoever reads it.
    let text = serde_json::json!({
        "budgets": ["a/web", "../../api/v1/secrets/x", "a/web?watch=0", "a"],
        "pods": [["a", {"app": "web"}], ["a/../kube-system", {}], ["default?x=1", {}]],
        "owners": [
            ["ReplicaSet", "a", "web-1"],
            ["ReplicaSet", "a/replicasets/web-1/..", "x"],
            ["StatefulSet", "a", "db/../../x"],
        ],
        "reattach": [
            {"pv": "pv-1", "unique": "u", "namespace": "a", "claim": "c", "pod": "p",
             "labels": {"app": "web"}},
            {"pv": "pv-2", "unique": "u", "namespace": "../..", "claim": "c", "pod": "p"},
            {"pv": "pv-3", "unique": "u", "namespace": "a", "claim": "c", "pod": "p",
             "labels": {"app": "web,tier!=x"}},
        ],
    })
    .to_string();
    let r: GateRecord = serde_json::from_str(&text).unwrap();
    assert_eq!(r.budgets, ["a/web"]);
    assert_eq!(r.pods.len(), 1);
    assert_eq!(
        r.owners,
        [("ReplicaSet".into(), "a".into(), "web-1".into())]
    );
    assert_eq!(r.reattach.len(), 1);
    assert_eq!(r.reattach[0].pv, "pv-1");
    assert_eq!(GateRecord::read(Some(&text)), Some(r.clone()));
    assert_eq!(GateState::new(&r).streams(), vec![pdb(), rs()]);
}

fn pdb() -> Stream {
    (WorkloadKind::Budget, "a".into())
}
fn rs() -> Stream {
    (WorkloadKind::ReplicaSet, "a".into())
}

#[test]
fn waits_until_every_stream_is_listed_then_for_each_object() {
    let mut g = GateState::new(&record());
    assert_eq!(g.streams(), vec![pdb(), rs()], "no watch for the DaemonSet");
    assert!(g.verdict().unwrap().contains("listing"));
    g.apply(Update::Seen(
        pdb(),
        "web".into(),
        Health::Budget {
            healthy: 2,
            desired: 3,
        },
    ));
    g.apply(Update::Listed(pdb()));
    assert!(g.verdict().unwrap().contains("listing the ReplicaSets"));
    g.apply(Update::Seen(
        rs(),
        "web-1".into(),
        Health::Replicas { ready: 3, want: 3 },
    ));
    g.apply(Update::Listed(rs()));
    assert_eq!(
        g.verdict().unwrap(),
        "PodDisruptionBudget a/web has 2 healthy of 3 desired"
    );
    g.apply(Update::Seen(
        pdb(),
        "web".into(),
        Health::Budget {
            healthy: 3,
            desired: 3,
        },
    ));
    assert_eq!(g.verdict(), None);
}

#[test]
fn with_other_nodes_in_flight_a_controller_restored_once_is_not_waited_on_again() {
    let play = |mut g: GateState| {
        for s in [pdb(), rs()] {
            g.apply(Update::Listed(s));
        }
        let budget = |healthy| Health::Budget {
            healthy,
            desired: 2,
        };
        let web = |ready| Health::Replicas { ready, want: 3 };
        // The node's evicted pod replaced: every replica Ready...
        g.apply(Update::Seen(rs(), "web-1".into(), web(3)));
        g.apply(Update::Seen(pdb(), "web".into(), budget(3)));
        assert_eq!(g.verdict(), None);
        // ...then another node's drain takes a sibling: the budget still has what it needs.
        g.apply(Update::Seen(rs(), "web-1".into(), web(2)));
        g.apply(Update::Seen(pdb(), "web".into(), budget(2)));
        let dip = g.verdict();
        // A budget short now is waited on in both cases.
        g.apply(Update::Seen(pdb(), "web".into(), budget(1)));
        let short = g.verdict();
        (dip, short)
    };
    let (dip, short) = play(GateState::new(&record()));
    assert_eq!(
        dip.as_deref(),
        Some("ReplicaSet a/web-1 has 2 of 3 replicas Ready")
    );
    assert!(short.is_some());
    let (dip, short) = play(GateState::new(&record()).restored_once_is_enough());
    assert_eq!(dip, None);
    assert_eq!(
        short.as_deref(),
        Some("PodDisruptionBudget a/web has 1 healthy of 2 desired")
    );
    // Never restored since the gate began: waited on.
    let mut g = GateState::new(&record()).restored_once_is_enough();
    for s in [pdb(), rs()] {
        g.apply(Update::Listed(s));
    }
    g.apply(Update::Seen(
        rs(),
        "web-1".into(),
        Health::Replicas { ready: 2, want: 3 },
    ));
    assert!(g.verdict().is_some());
}

#[test]
fn a_relist_forgets_what_the_stream_said_and_waits_again() {
    let mut g = GateState::new(&record());
    for s in [pdb(), rs()] {
        g.apply(Update::Listed(s));
    }
    assert_eq!(
        g.verdict(),
        None,
        "objects that do not exist wait for nothing"
    );
    g.apply(Update::Seen(
        rs(),
        "web-1".into(),
        Health::Replicas { ready: 1, want: 3 },
    ));
    assert_eq!(
        g.verdict().unwrap(),
        "ReplicaSet a/web-1 has 1 of 3 replicas Ready"
    );
    g.apply(Update::Listing(rs()));
    assert!(g.verdict().unwrap().contains("listing"));
    g.apply(Update::Listed(rs()));
    assert_eq!(g.verdict(), None, "the relist did not see it: deleted");
    g.apply(Update::Seen(
        rs(),
        "web-1".into(),
        Health::Replicas { ready: 1, want: 3 },
    ));
    g.apply(Update::Gone(rs(), "web-1".into()));
    assert_eq!(g.verdict(), None);
}

#[test]
fn a_budget_whose_selector_cannot_be_read_is_waited_for_and_said_once() {
    let app = BTreeMap::from([("app".to_string(), "web".to_string())]);
    let record = GateRecord {
        pods: vec![("a".into(), app)],
        ..GateRecord::default()
    };
    let mut g = GateState::new(&record);
    let bad = LabelSelector {
        match_expressions: Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                key: "app".into(),
                operator: "Matches".into(),
                values: Some(vec!["web".into()]),
            },
        ]),
        ..Default::default()
    };
    let why = crate::selector::selector_problem(&bad).unwrap();
    assert!(why.contains("`app`") && why.contains("`Matches`"), "{why}");
    // Selecting nothing by the rules it can read, it is still waited for.
    assert!(!crate::selector::selector_matches(
        Some(&bad),
        &record.pods[0].1
    ));
    assert!(g.wanted[&pdb()].wants("odd", Some(&bad)));
    for _ in 0..2 {
        g.apply(Update::Unreadable(pdb(), "odd".into(), why.clone()));
    }
    g.apply(Update::Seen(
        pdb(),
        "odd".into(),
        Health::Budget {
            healthy: 1,
            desired: 2,
        },
    ));
    g.apply(Update::Listed(pdb()));
    assert_eq!(
        g.verdict().unwrap(),
        "PodDisruptionBudget a/odd has 1 healthy of 2 desired"
    );
    let notes = g.take_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].0, "a/odd");
    assert!(
        notes[0]
            .1
            .starts_with("PodDisruptionBudget a/odd: its selector cannot be evaluated")
            && notes[0].1.contains("waits for it"),
        "{}",
        notes[0].1
    );
    assert!(g.take_notes().is_empty());
}

#[test]
fn objects_not_waited_on_are_ignored() {
    let mut g = GateState::new(&record());
    g.apply(Update::Seen(
        rs(),
        "other".into(),
        Health::Replicas { ready: 0, want: 3 },
    ));
    for s in [pdb(), rs()] {
        g.apply(Update::Listed(s));
    }
    assert_eq!(g.verdict(), None);
}

/// A gate's quick turn-down of a budget by its label pair says what matching the budget
/// against every evicted pod says: over random budgets (label pairs, expressions, an
/// unreadable operator, an empty selector, none) and random pods, waited on by name or not.
#[test]
fn a_gate_turns_down_budgets_as_the_full_match_does() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let keys = ["app", "tier", "team"];
    let vals = ["web", "db", "cache"];
    let labels = |rng: &mut rand::rngs::SmallRng, n: usize| -> BTreeMap<String, String> {
        (0..n)
            .map(|_| {
                let k = keys[rng.random_range(0..3)];
                (k.to_string(), vals[rng.random_range(0..3)].to_string())
            })
            .collect()
    };
    let (mut turned_down, mut kept) = (0, 0);
    for _ in 0..400 {
        let pods: Vec<_> = (0..rng.random_range(0..4))
            .map(|_| {
                let n = rng.random_range(0..3);
                labels(&mut rng, n)
            })
            .collect();
        let names: BTreeSet<String> = (0..rng.random_range(0..3))
            .map(|i| format!("b{i}"))
            .collect();
        let fwd = Forwarder::new(
            pdb(),
            Wanted {
                names,
                selecting: pods,
            },
        );
        for i in 0..20 {
            let selector = match rng.random_range(0..5) {
                0 => None,
                1 => Some(LabelSelector::default()),
                n => Some(LabelSelector {
                    match_labels: (n != 4).then(|| {
                        let count = rng.random_range(1..3);
                        labels(&mut rng, count)
                    }),
                    match_expressions: (n >= 3).then(|| {
                        let op = ["In", "NotIn", "Exists", "Near"][rng.random_range(0..4)];
                        vec![LabelSelectorRequirement {
                            key: keys[rng.random_range(0..3)].into(),
                            operator: op.into(),
                            values: (op.ends_with("In")).then(|| vec!["web".into()]),
                        }]
                    }),
                }),
            };
            let o = Obj {
                name: format!("b{}", i % 4),
                health: Health::Budget {
                    healthy: 1,
                    desired: 1,
                },
                selector,
                disrupted: Default::default(),
                never: None,
                allowed: 0,
            };
            let full = fwd.wanted.wants(&o.name, o.selector.as_ref());
            assert_eq!(fwd.wants(&o), full, "{o:?} for {:?}", fwd.wanted);
            if full {
                kept += 1;
            } else {
                turned_down += 1;
            }
        }
    }
    assert!(turned_down > 500 && kept > 500, "{turned_down} {kept}");
}

/// A gate that joins a watch other gates started is told what the watch knows of the
/// objects it waits for, as if it had listed them itself, and then their changes only.
#[test]
fn a_gate_joining_a_shared_watch_sees_its_objects_as_listed_then_their_changes() {
    let mut feed = FeedState::default();
    for ev in [
        FeedEvent::Init,
        obj("web-1", 2),
        obj("other", 0),
        FeedEvent::InitDone,
    ] {
        feed.apply(&ev);
    }
    let mut g = GateState::new(&record());
    let streams = g.streams();
    let s = streams
        .iter()
        .find(|s| s.0 == WorkloadKind::ReplicaSet)
        .unwrap();
    let mut fwd = Forwarder::new(s.clone(), g.wanted[s].clone());
    let replay = feed.replay(&fwd.wanted);
    assert_eq!(replay.len(), 3, "{replay:?}");
    let updates: Vec<Update> = replay.into_iter().flat_map(|e| fwd.updates(e)).collect();
    assert_eq!(
        updates,
        vec![
            Update::Listing(rs()),
            Update::Seen(rs(), "web-1".into(), Health::Replicas { ready: 2, want: 2 }),
            Update::Listed(rs()),
        ]
    );
    for u in updates {
        g.apply(u);
    }
    // Objects it does not wait for are not forwarded; its own are, down to a deletion.
    assert!(fwd.updates(obj("other", 1)).is_empty());
    let down = fwd.updates(obj("web-1", 1));
    assert_eq!(
        down,
        vec![Update::Seen(
            rs(),
            "web-1".into(),
            Health::Replicas { ready: 1, want: 2 }
        )]
    );
    for u in down {
        g.apply(u);
    }
    g.apply(Update::Listing(pdb()));
    g.apply(Update::Listed(pdb()));
    assert!(g.verdict().unwrap().contains("web-1"), "{:?}", g.verdict());
    assert!(fwd.updates(FeedEvent::Delete("other".into())).is_empty());
    assert_eq!(
        fwd.updates(FeedEvent::Delete("web-1".into())),
        vec![Update::Gone(rs(), "web-1".into())]
    );
}

/// Joining while the watch relists: the last complete list, then the relist so far (which
/// forgets it), so the gate waits for the relist to complete as the other gates do.
#[test]
fn a_gate_joining_during_a_relist_waits_for_it_to_complete() {
    let mut feed = FeedState::default();
    for ev in [
        FeedEvent::Init,
        obj("web-1", 2),
        FeedEvent::InitDone,
        FeedEvent::Init,
        obj("web-1", 1),
    ] {
        feed.apply(&ev);
    }
    let mut g = GateState::new(&record());
    let wanted = g.wanted[&rs()].clone();
    let mut fwd = Forwarder::new(rs(), wanted);
    for u in feed
        .replay(&fwd.wanted)
        .into_iter()
        .flat_map(|e| fwd.updates(e))
    {
        g.apply(u);
    }
    assert!(!g.listed.contains(&rs()), "the relist is not complete yet");
    feed.apply(&FeedEvent::InitDone);
    assert_eq!(feed.objects.len(), 1);
    assert!(feed.pending.is_none());
}
