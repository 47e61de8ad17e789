//! What a drain does about evictions it cannot get, by cause (issue 24, `drain.whenBlocked`):
//! an eviction the Eviction API denies with the same answer again and again (here a
//! ValidatingAdmissionPolicy on `pods/eviction`, as a drain-cleaner webhook would) fails the
//! node at once, naming the answer, instead of asking until `drain.timeout`; `denied: wait`
//! keeps today's wait. Played on the simulator, which enforces the policy as kube-apiserver
//! does (422), with the real controller and agents.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::api::{Api, PostParams};
use rollboot::node::{NodeState, NodeView};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};
use serde_json::json;

use rollboot_testkit::log::log;

const GUARD: &str = "guarded: move the partition leader off this pod first";

/// Three nodes, every eviction denied by a policy, rollboot running with `drain` keys added to
/// its drain section and `rest` (YAML) beside it, the first node flagged.
async fn guarded(drain: &str, rest: &str) -> (Harness, String) {
    log();
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 2,
        ..Scenario::default()
    };
    let config = sim_config(&format!(
        "drain: {{evictionRetryInterval: 100ms{drain}}}\nnodes: {{order: name}}\n{rest}"
    ))
    .unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": "guard-evictions"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods/eviction"],
            }]},
            "validations": [{"expression": "false", "message": GUARD}],
        },
    }))
    .unwrap();
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": "guard-evictions"},
        "spec": {"policyName": "guard-evictions", "validationActions": ["Deny"]},
    }))
    .unwrap();
    let pp = PostParams::default();
    Api::<ValidatingAdmissionPolicy>::all(h.client.clone())
        .create(&pp, &policy)
        .await
        .unwrap();
    Api::<ValidatingAdmissionPolicyBinding>::all(h.client.clone())
        .create(&pp, &binding)
        .await
        .unwrap();
    let names = h.node_names().await.unwrap();
    let first = names[0].clone();
    h.start_rollout_flagged(std::slice::from_ref(&first))
        .await
        .unwrap();
    (h, first)
}

async fn failed(h: &Harness, node: &str, within: Duration) -> NodeView {
    let (done, view) = h
        .wait_for_state(node, NodeState::Failed, within)
        .await
        .unwrap();
    assert!(done, "{node} did not fail within {within:?}: {view:?}");
    view
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_denied_every_time_fails_the_node_at_once_naming_the_answer() {
    // drain.timeout 10m as run: the node must fail long before it.
    let (h, node) = guarded("", "").await;
    let started = std::time::Instant::now();
    let view = failed(&h, &node, Duration::from_secs(30)).await;
    let reason = view.failure_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("the Eviction API denied it 3 times in a row with the same answer")
            && reason.contains(GUARD)
            && reason.contains("drain.whenBlocked.denied is fail"),
        "{reason}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "failed after {:?}",
        started.elapsed()
    );
    // Failed, not rebooted: no reboot token was ever issued.
    assert!(view.reboot_token.is_none(), "{view:?}");
    let events = h.events("EvictionDenied").await.unwrap();
    assert!(events.iter().any(|e| e.contains(GUARD)), "{events:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_denied_wait_the_drain_asks_until_its_timeout() {
    let (h, node) = guarded(", timeout: 4s, whenBlocked: {denied: wait}", "").await;
    let view = failed(&h, &node, Duration::from_secs(30)).await;
    let reason = view.failure_reason.clone().unwrap_or_default();
    assert!(reason.contains("drain timed out"), "{reason}");
    h.shutdown().await;
}

/// A pod whose deletion a finalizer holds: evicted, it stays terminating. With
/// `whenBlocked.stuck: fail` the node fails once it is past its grace period and
/// `drain.stuckAfter`, naming the pod; by default (`wait`) the drain waits until its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_stuck_terminating_fails_the_node_once_past_its_grace_and_stuck_after() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{ListParams, Patch, PatchParams};
    log();
    let sc = Scenario {
        nodes: 2,
        pods_per_node: 2,
        ..Scenario::default()
    };
    let config = sim_config(
        "drain: {gracePeriod: 1s, stuckAfter: 2s, whenBlocked: {stuck: fail}}\nnodes: {order: name}\n",
    )
    .unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    let names = h.node_names().await.unwrap();
    let node = names[0].clone();
    let pods: Api<Pod> = Api::all(h.client.clone());
    let on_node = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .unwrap();
    let held = on_node
        .items
        .iter()
        .find(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "ReplicaSet")
        })
        .expect("a ReplicaSet pod on the node");
    let (ns, name) = (
        held.metadata.namespace.clone().unwrap(),
        held.metadata.name.clone().unwrap(),
    );
    let api: Api<Pod> = Api::namespaced(h.client.clone(), &ns);
    let hold = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .unwrap();
    h.start_rollout_flagged(std::slice::from_ref(&node))
        .await
        .unwrap();
    let view = failed(&h, &node, Duration::from_secs(40)).await;
    let reason = view.failure_reason.clone().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "pod {ns}/{name} cannot be drained: it is still terminating"
        )) && reason.contains("past its grace period and drain.stuckAfter 2s")
            && reason.contains("drain.whenBlocked.stuck is fail"),
        "{reason}"
    );
    assert!(view.reboot_token.is_none(), "{view:?}");
    let release = json!({"metadata": {"finalizers": null}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    h.shutdown().await;
}

/// `denied: quarantine`: the node fails at once and is labelled
/// `rollboot.dev/quarantined=denied`; it stays cordoned with its pods although
/// `failures.returnToService` uncordons other failed nodes whose host is up, and `status`
/// says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_node_stays_cordoned_with_its_label_and_is_not_returned_to_service() {
    let (h, node) = guarded(
        ", whenBlocked: {denied: quarantine}",
        "failures: {maxFailures: 1, returnToService: true}\n",
    )
    .await;
    let view = failed(&h, &node, Duration::from_secs(30)).await;
    let reason = view.failure_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("drain.whenBlocked.denied is quarantine"),
        "{reason}"
    );
    assert_eq!(view.quarantined.as_deref(), Some("denied"), "{view:?}");
    assert!(view.unschedulable, "a quarantined node stays cordoned");
    // Its host is up and Ready all along: returnToService would have uncordoned a failed
    // node within a pass or two.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = h.node(&node).await.unwrap();
    assert!(
        later.unschedulable && later.quarantined.as_deref() == Some("denied") && later.ready,
        "{later:?}"
    );
    h.shutdown().await;
    // The control: `denied: fail` with the same config, and the failed node is back in
    // service well within those 3 s.
    let (h, node) = guarded(
        ", whenBlocked: {denied: fail}",
        "failures: {maxFailures: 1, returnToService: true}\n",
    )
    .await;
    failed(&h, &node, Duration::from_secs(30)).await;
    let started = std::time::Instant::now();
    let back = h
        .wait_for(Duration::from_secs(10), |ns| {
            ns.iter().any(|n| n.name == node && !n.unschedulable)
        })
        .await
        .unwrap();
    assert!(
        back && started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    h.shutdown().await;
}

/// A drain's wait for its evicted pods to go whose deadline comes before the node's pods could
/// be listed (a busy API server) leaves every pod it waited for: a pod it has not seen go is not
/// gone. (It once left none: a drain whose pod was stuck terminating ended as done in CI.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_pods_to_go_that_ends_before_its_first_list_leaves_every_pod() {
    use chrono::{TimeDelta, Utc};
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ListParams;
    use rollboot::drain::{DrainApi, KubeDrain, PodRef};
    log();
    let sc = Scenario {
        nodes: 1,
        pods_per_node: 2,
        ..Scenario::default()
    };
    let cluster = rollboot_sim::sim::Cluster::start(sc).await.unwrap();
    let client = cluster.kube_client().await.unwrap();
    let node = "node-0000";
    let on_node = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .unwrap();
    let mut pods: Vec<PodRef> = on_node.items.iter().map(PodRef::of).collect();
    pods.sort();
    assert!(!pods.is_empty());
    let drain = |client: kube::Client| KubeDrain {
        client: client.clone(),
        evict_client: client.clone(),
        events: rollboot::events::Recorder::new(
            client,
            "default",
            "rollboot.dev/controller",
            "test",
        ),
        node: node.into(),
        metrics: None,
        budgets_from: None,
    };
    // The API server answers this client 2 s late: the wait's 300 ms end before its list.
    let slow = cluster.kube_client_as("slow").await.unwrap();
    cluster.hold("slow", Duration::from_secs(2), None);
    let gone = drain(slow)
        .wait_gone(node, &pods, Utc::now() + TimeDelta::milliseconds(300))
        .await
        .unwrap();
    assert_eq!(gone.left, pods);
    assert!(gone.seen_going.is_empty());
    // Answered in time: the pods are there, so they are left all the same.
    let gone = drain(client)
        .wait_gone(node, &pods, Utc::now() + TimeDelta::milliseconds(500))
        .await
        .unwrap();
    assert_eq!(gone.left, pods);
}
