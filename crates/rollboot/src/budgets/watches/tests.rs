//! The workload watches' tests: the budget index, what a watch keeps of each object, and the
//! wait for a first list, all without an API server.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;

use super::follow::FeedShared;
use super::keep::{
    budget_disrupted, budget_health, budget_never, budget_selector, replicas, SlimBudget,
    SlimReplicas,
};
use super::state::{FeedEvent, FeedState, Health, Obj, Wanted};

fn budget(name: &str, selector: LabelSelector) -> FeedEvent {
    FeedEvent::Apply(Arc::new(Obj {
        name: name.into(),
        health: Health::Budget {
            healthy: 2,
            desired: 1,
        },
        selector: Some(selector),
        disrupted: Default::default(),
        never: None,
        allowed: 0,
    }))
}

/// The budget index gives exactly what matching every budget would: budgets found by a
/// label of the pods, budgets any pod may match (no label pair, an unreadable selector),
/// after changes, deletions and a relist; a budget without a selector only by name.
#[test]
fn the_budget_index_finds_what_a_scan_of_every_budget_finds() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let by_labels = |pairs: &[(&str, &str)]| LabelSelector {
        match_labels: Some(labels(pairs)),
        ..Default::default()
    };
    let expr = |key: &str, op: &str| LabelSelector {
        match_expressions: Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: None,
            },
        ]),
        ..Default::default()
    };
    let mut st = FeedState::default();
    for ev in [
        FeedEvent::Init,
        budget("web", by_labels(&[("app", "web"), ("tier", "front")])),
        budget("db", by_labels(&[("app", "db")])),
        budget("any-with-tier", expr("tier", "Exists")),
        budget("everything", LabelSelector::default()),
        budget("garbled", expr("app", "Near")),
        obj("rs-1", 1),
        FeedEvent::InitDone,
    ] {
        st.apply(&ev);
    }
    let want = |names: &[&str], pods: &[BTreeMap<String, String>]| Wanted {
        names: names.iter().map(|n| n.to_string()).collect(),
        selecting: pods.to_vec(),
    };
    let kept = |st: &FeedState, w: &Wanted| -> Vec<String> {
        let got: Vec<String> = st.kept(w).iter().map(|o| o.name.clone()).collect();
        // The same as a look at every object.
        let all: Vec<String> = st
            .objects
            .values()
            .filter(|o| w.wants(&o.name, o.selector.as_ref()))
            .map(|o| o.name.clone())
            .collect();
        assert_eq!(got, all);
        got
    };
    let web = labels(&[("app", "web"), ("tier", "front")]);
    assert_eq!(
        kept(&st, &want(&[], std::slice::from_ref(&web))),
        ["any-with-tier", "everything", "garbled", "web"]
    );
    assert_eq!(
        kept(&st, &want(&["rs-1"], &[labels(&[("app", "db")])])),
        ["db", "everything", "garbled", "rs-1"]
    );
    assert_eq!(kept(&st, &want(&["rs-1"], &[])), ["rs-1"]);
    // A budget's selector changes: it is found under its new label only.
    st.apply(&budget("db", by_labels(&[("app", "cache")])));
    assert_eq!(
        kept(&st, &want(&[], &[labels(&[("app", "db")])])),
        ["everything", "garbled"]
    );
    assert_eq!(
        kept(&st, &want(&[], &[labels(&[("app", "cache")])])),
        ["db", "everything", "garbled"]
    );
    // Deleted, then a relist that brings back only some.
    st.apply(&FeedEvent::Delete("everything".into()));
    assert_eq!(
        kept(&st, &want(&[], std::slice::from_ref(&web))),
        ["any-with-tier", "garbled", "web"]
    );
    for ev in [
        FeedEvent::Init,
        budget("web", by_labels(&[("app", "web")])),
        FeedEvent::InitDone,
    ] {
        st.apply(&ev);
    }
    assert_eq!(kept(&st, &want(&[], &[web])), ["web"]);
    assert!(st.unindexed.is_empty() && st.by_label.len() == 1);
}

pub(crate) fn obj(name: &str, ready: i32) -> FeedEvent {
    FeedEvent::Apply(Arc::new(Obj {
        name: name.into(),
        health: Health::Replicas { ready, want: 2 },
        selector: None,
        disrupted: Default::default(),
        never: None,
        allowed: 0,
    }))
}

/// The gate's watches read of each object what the gate keeps, the rest of it skipped:
/// a ReplicaSet's replicas (1 when unset) and Ready replicas, a budget's selector, health
/// and disrupted pods, and the metadata a watch resumes from.
#[test]
fn a_watched_object_is_read_for_what_the_gate_keeps() {
    let rs: SlimReplicas<ReplicaSet> = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-1", "namespace": "a", "uid": "u1", "resourceVersion": "7",
            "labels": {"app": "web"}, "managedFields": [{"manager": "x"}]},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {"replicas": 3, "readyReplicas": 2}
    }))
    .unwrap();
    assert_eq!(rs.name_any(), "web-1");
    assert_eq!(rs.resource_version().as_deref(), Some("7"));
    assert!(rs.metadata.labels.is_none());
    assert_eq!(replicas(&rs), Health::Replicas { ready: 2, want: 3 });
    let bare: SlimReplicas<ReplicaSet> =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}})).unwrap();
    assert_eq!(replicas(&bare), Health::Replicas { ready: 0, want: 1 });
    let pdb: SlimBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "a", "resourceVersion": "9"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"currentHealthy": 2, "desiredHealthy": 2, "disruptionsAllowed": 0,
            "expectedPods": 3, "disruptedPods": {"web-x": "2026-01-01T00:00:00Z"}}
    }))
    .unwrap();
    assert_eq!(
        budget_health(&pdb),
        Health::Budget {
            healthy: 2,
            desired: 2
        }
    );
    let sel = budget_selector(&pdb).and_then(|s| s.match_labels.clone());
    assert_eq!(sel.unwrap()["app"], "web");
    assert_eq!(budget_disrupted(&pdb).len(), 1);
    // At 0 now with one pod down: it may allow one later, nothing kept.
    assert!(budget_never(&pdb).is_none());
    // maxUnavailable 0 is kept with what says so, and a budget rebuilt for the drain from
    // the watch says it the same way; minAvailable at its pods only with its spec seen.
    let slim = |v: serde_json::Value| -> SlimBudget { serde_json::from_value(v).unwrap() };
    let zero = slim(serde_json::json!({
        "metadata": {"name": "z", "namespace": "a", "generation": 1},
        "spec": {"maxUnavailable": 0}
    }));
    assert!(budget_never(&zero).is_some());
    let all = |observed: i64| {
        slim(serde_json::json!({
            "metadata": {"name": "m", "namespace": "a", "generation": 2},
            "spec": {"minAvailable": 3},
            "status": {"observedGeneration": observed, "expectedPods": 3, "currentHealthy": 3,
                "desiredHealthy": 3, "disruptionsAllowed": 0}
        }))
    };
    assert!(budget_never(&all(2)).is_some());
    assert!(
        budget_never(&all(1)).is_none(),
        "a status of an older spec is not judged"
    );
    assert_eq!(
        <SlimBudget as kube::Resource>::plural(&()),
        "poddisruptionbudgets"
    );
}

/// Whoever waits for a namespace's first list (the budget-aware pick, a drain naming the
/// budgets that refuse it) goes on the moment the list completes, not at a poll's next turn;
/// and gives up at the end of its wait when no list completes. Virtual time: the instants
/// are exact.
#[tokio::test(start_paused = true)]
async fn a_first_list_is_waited_for_until_it_completes_and_no_longer() {
    use std::time::Duration;
    use tokio::time::Instant;
    let shared = Arc::new(FeedShared::new());
    let t0 = Instant::now();
    let lister = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(7)).await;
        lister.publish(FeedEvent::Init);
        lister.publish(obj("web-1", 1));
        lister.publish(FeedEvent::InitDone);
    });
    assert!(shared.first_list(Duration::from_secs(2)).await);
    assert_eq!(t0.elapsed(), Duration::from_millis(7));
    // Listed once, it is not waited for again (a relist keeps the last list).
    shared.publish(FeedEvent::Init);
    let t1 = Instant::now();
    assert!(shared.first_list(Duration::from_secs(2)).await);
    assert_eq!(t1.elapsed(), Duration::ZERO);

    let never = FeedShared::new();
    let t2 = Instant::now();
    assert!(!never.first_list(Duration::from_secs(2)).await);
    assert_eq!(t2.elapsed(), Duration::from_secs(2));
}
