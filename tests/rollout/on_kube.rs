//! What a real control plane does around a rollout, and what rollboot must do about it. Each
//! behaviour was seen on kube-apiserver / kube-controller-manager v1.36 (issue "Works on a real
//! Kubernetes control plane") and is played by the simulator:
//! - the node-lifecycle controller copies a cordon into the `unschedulable` taint a few
//!   milliseconds later, and keeps `not-ready` taints on a rebooted node for seconds after it is
//!   Ready again;
//! - kube-apiserver keeps an Event about a Node in namespace `default`;
//! - an eviction whose client is killed mid-request leaves the pod in its budget's
//!   `status.disruptedPods` for two minutes;
//! - the audit log shows each client's User-Agent.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::runtime::{watcher, WatchStreamExt};
use rollboot::node::{NodeState, NodeView};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};

fn log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("TLOG").unwrap_or("rollboot=warn".into()))
        .with_test_writer()
        .try_init();
}

/// Every version of every Node the watch saw, in order, as views.
type History = Arc<Mutex<BTreeMap<String, Vec<NodeView>>>>;

/// Records every Node version from now on.
fn record_nodes(h: &Harness) -> (History, tokio::task::JoinHandle<()>) {
    let history: History = Arc::default();
    let api: kube::Api<Node> = kube::Api::all(h.client.clone());
    let stream = watcher(api, watcher::Config::default()).applied_objects();
    let out = history.clone();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(Ok(n)) = stream.next().await {
            let v = NodeView::from_node(&n);
            out.lock()
                .unwrap()
                .entry(v.name.clone())
                .or_default()
                .push(v);
        }
    });
    (history, task)
}

/// Starts a rollout of every node of `sc` and waits until it is done.
async fn rollout_all(sc: Scenario, overrides: &str) -> (Harness, Vec<String>) {
    log();
    let mut h = Harness::start(sc, sim_config(overrides).unwrap())
        .await
        .unwrap();
    h.start_rollout().await.unwrap();
    let names = h.node_names().await.unwrap();
    (h, names)
}

async fn finish(h: &Harness, names: &[String]) {
    let flagged: BTreeSet<String> = names.iter().cloned().collect();
    let done = h
        .wait_for(Duration::from_secs(60), |ns| {
            Harness::finished(ns, &flagged)
        })
        .await
        .unwrap();
    assert!(done, "the rollout did not finish: {:?}", h.nodes().await);
}

/// A finished rollout of every node of `sc`, with every version of every Node seen during it.
async fn rolled_out_watched(
    sc: Scenario,
) -> (Harness, Vec<String>, BTreeMap<String, Vec<NodeView>>) {
    let (h, names) = rollout_all(sc, "").await;
    let (history, watch) = record_nodes(&h);
    h.flag(&names);
    finish(&h, &names).await;
    watch.abort();
    let history = history.lock().unwrap().clone();
    (h, names, history)
}

/// A finished rollout of two nodes with two pods each.
async fn two_nodes_rolled_out() -> (Harness, Vec<String>) {
    let sc = Scenario {
        nodes: 2,
        pods_per_node: 2,
        ..Scenario::default()
    };
    let (h, names) = rollout_all(sc, "").await;
    h.flag(&names);
    finish(&h, &names).await;
    (h, names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_back_only_once_the_node_lifecycle_controller_took_its_not_ready_taint_off() {
    // The NoExecute not-ready taint stays 2 s (real time) after the node is Ready again.
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 3,
        taint_removal_delay: 200.0,
        ..Scenario::default()
    };
    let (h, names, history) = rolled_out_watched(sc).await;
    let inv = h.cluster.invariants();
    assert!(
        inv.uncordoned_while_not_ready.is_empty(),
        "uncordoned while the not-ready taint was on (pods landing there can be evicted by it): {:?}",
        inv.uncordoned_while_not_ready
    );
    for n in &names {
        let versions = &history[n];
        let before = versions
            .iter()
            .find_map(|v| v.boot_id_before.clone())
            .unwrap_or_else(|| panic!("{n}: no reboot seen"));
        // The gap was there to be waited out: Ready with a new boot ID, still tainted.
        assert!(
            versions
                .iter()
                .any(|v| v.state == Some(NodeState::Rebooting)
                    && v.ready
                    && v.boot_id != before
                    && v.not_ready_taint),
            "{n}: the simulator never showed a Ready node still tainted not-ready"
        );
        let verifying = versions
            .iter()
            .find(|v| v.state == Some(NodeState::Verifying))
            .unwrap_or_else(|| panic!("{n}: never verifying"));
        assert!(
            !verifying.not_ready_taint && verifying.ready && verifying.boot_id != before,
            "{n} counted as back while tainted not-ready: {verifying:?}"
        );
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_cordon_or_uncordon_rollboot_waits_for_the_lifecycle_taint_instead_of_conflicting()
{
    let sc = Scenario {
        nodes: 5,
        pods_per_node: 3,
        ..Scenario::default()
    };
    let (h, names, history) = rolled_out_watched(sc).await;
    // The node-lifecycle controller (played by the world) did write its taint after the
    // cordon, each a write of its own that moved the resourceVersion.
    for n in &names {
        assert!(
            history[n]
                .iter()
                .any(|v| v.unschedulable && v.unschedulable_taint),
            "{n}: no unschedulable taint after the cordon"
        );
    }
    let stats = h.cluster.stats();
    let conflicts: u64 = ["controller-0", "controller-1"]
        .iter()
        .map(|c| stats.answered(c, "patch", "nodes", 409))
        .sum();
    assert_eq!(
        conflicts, 0,
        "Node patches refused with 409: each a predictable conflict with the node-lifecycle controller"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollboot_names_itself_and_its_part_in_every_request() {
    let (h, _) = two_nodes_rolled_out().await;
    let agents = h.cluster.stats().user_agents;
    let version = env!("CARGO_PKG_VERSION");
    for (identity, part) in [
        ("controller-0", "controller"),
        ("controller-1", "controller"),
        ("agent", "agent"),
    ] {
        let seen = agents.get(identity).cloned().unwrap_or_default();
        assert_eq!(
            seen,
            BTreeSet::from([format!("rollboot/{version} ({part})")]),
            "{identity}"
        );
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_about_nodes_are_in_default_and_events_about_the_lock_in_its_namespace() {
    let (h, names) = two_nodes_rolled_out().await;
    // Written in the background: wait for the last of them.
    let api: kube::Api<Event> = kube::Api::namespaced(h.client.clone(), "default");
    let mut events = Vec::new();
    for _ in 0..50 {
        events = api.list(&Default::default()).await.unwrap().items;
        if names.iter().all(|n| {
            events.iter().any(|e| {
                e.reason.as_deref() == Some("RebootDone")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(n.as_str())
            })
        }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for n in &names {
        let about: Vec<&Event> = events
            .iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(n.as_str()))
            .collect();
        let reasons: BTreeSet<&str> = about.iter().filter_map(|e| e.reason.as_deref()).collect();
        for want in ["Cordoned", "RebootRequested", "Rebooting", "RebootDone"] {
            assert!(
                reasons.contains(want),
                "{n}: no {want} Event in default: {reasons:?}"
            );
        }
        for e in about {
            let r = e.regarding.as_ref().unwrap();
            assert_eq!(r.kind.as_deref(), Some("Node"));
            assert_eq!(r.namespace, None, "a Node is cluster-scoped");
            let name = e.metadata.name.as_deref().unwrap();
            assert!(
                name.starts_with(&format!("{n}.")) && !name.ends_with('.'),
                "{name}"
            );
            let by = e.reporting_controller.as_deref().unwrap_or("");
            assert!(
                by == "rollboot.dev/controller" || by == "rollboot.dev/agent",
                "{by}"
            );
        }
    }
    let lock_ns: kube::Api<Event> =
        kube::Api::namespaced(h.client.clone(), &h.config.lock.namespace);
    let misplaced: Vec<String> = lock_ns
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Node"))
        .filter_map(|e| e.metadata.name)
        .collect();
    assert!(
        misplaced.is_empty(),
        "Node Events outside default: {misplaced:?}"
    );
    h.shutdown().await;
}

/// Replicas running on two nodes, `per_node` per node in Deployments of as many replicas,
/// every Deployment under a budget of `max_unavailable`; the rollout runs, nothing flagged.
async fn budgeted_rollout(per_node: usize, max_unavailable: i64) -> (Harness, Vec<String>) {
    let sc = Scenario {
        nodes: 2,
        pods_per_node: per_node,
        replicas: per_node,
        pdb_share: 1.0,
        pdb_max_unavailable: max_unavailable,
        bare_pods: 0,
        empty_dir_pods: 0,
        ..Scenario::default()
    };
    // `maxUnavailable: 0` is waited for (as an operator holding drains for a while), not
    // failed at the first refusal as `drain.whenBlocked.never` does by default: these tests
    // look at every refused eviction.
    rollout_all(sc, "drain: {timeout: 10m, whenBlocked: {never: wait}}").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_holding_a_phantom_disruption_is_explained_and_never_bypassed() {
    // One Deployment of 3 replicas per node, every one under a budget of maxUnavailable 1.
    let (h, names) = budgeted_rollout(3, 1).await;
    // The first eviction is admitted, recorded in its budget, and its deletion never happens:
    // the evicting client was killed mid-request and the API server answered 504.
    h.cluster.abandon_evictions(1);
    h.flag(&names[..1]);
    let mut blocked = Vec::new();
    for _ in 0..100 {
        blocked = h.events("EvictionBlocked").await.unwrap();
        if blocked.iter().any(|b| b.contains("counts pod")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let note = blocked
        .iter()
        .find(|b| b.contains("counts pod"))
        .unwrap_or_else(|| panic!("no EvictionBlocked Event explains the phantom: {blocked:?}"));
    assert!(
        note.contains("not being deleted") && note.contains("Kubernetes stops counting it at"),
        "{note}"
    );
    let failed = h.events("EvictionFailed").await.unwrap();
    assert!(
        failed
            .iter()
            .any(|f| f.contains("Timeout") && !f.contains("overlapping")),
        "{failed:?}"
    );
    // Nothing was deleted around the budget meanwhile, and the node still drains.
    let inv = h.cluster.invariants();
    assert!(inv.pdb_violations.is_empty(), "{:?}", inv.pdb_violations);
    let draining = h.nodes().await.unwrap();
    assert_eq!(
        draining.iter().find(|n| n.name == names[0]).unwrap().state,
        Some(NodeState::Draining)
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pod_a_budget_refuses_to_evict_keeps_an_event_of_its_own() {
    // Budgets that allow no disruption at all: every eviction from the node is refused.
    let (h, names) = budgeted_rollout(4, 0).await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(h.client.clone());
    let on_node: BTreeSet<String> = pods
        .list(&kube::api::ListParams::default().fields(&format!("spec.nodeName={}", names[0])))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "ReplicaSet")
        })
        .map(|p| p.metadata.name.unwrap_or_default())
        .collect();
    assert!(on_node.len() >= 2, "{on_node:?}");
    h.flag(&names[..1]);
    // kube's recorder counts a same-reason Event about the same objects as a repeat of the
    // first and keeps the first's note; the pod as the related object keeps them apart.
    let api: kube::Api<Event> = kube::Api::namespaced(h.client.clone(), "default");
    let mut about: BTreeMap<String, String> = BTreeMap::new();
    for _ in 0..100 {
        about = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("EvictionBlocked"))
            .filter_map(|e| {
                let pod = e.related.as_ref()?;
                assert_eq!(pod.kind.as_deref(), Some("Pod"));
                Some((pod.name.clone()?, e.note.unwrap_or_default()))
            })
            .collect();
        if about.len() == on_node.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        about.keys().cloned().collect::<BTreeSet<_>>(),
        on_node,
        "one EvictionBlocked Event per refused pod"
    );
    for (pod, note) in &about {
        assert!(
            note.contains(&format!("/{pod} is blocked")),
            "{pod}: {note}"
        );
    }
    h.shutdown().await;
}
