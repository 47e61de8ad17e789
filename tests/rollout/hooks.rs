//! Hooks (config `hooks`, `drain.settle`) on the simulator, with the real controller and agents
//! and a local HTTP receiver (axum on 127.0.0.1) that answers yes, no or nothing as told and
//! records every body: a blocking webhook's no holds the node and nothing reboots; one that
//! never answers fails the node at its phase's timeout; a new leader never asks again for a
//! recorded yes nor sends one attempt twice; gate annotations hold and release; labels and
//! taints follow the phases; `drain.settle` waits between the drain and the reboot, while a
//! hanging fire-and-forget webhook slows nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::watcher;
use rollboot::config::Phase;
use rollboot::hooks::Record;
use rollboot::node::{NodeState, NodeView, Token};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};
use serde_json::{json, Value};

use rollboot_testkit::log::log;

/// How the receiver answers one hook.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Yes,
    No,
    /// Never answers.
    Hang,
}

#[derive(Clone, Default)]
struct Receiver {
    /// Bodies received, by hook path.
    got: Arc<Mutex<Vec<(String, Value)>>>,
    /// Answer by hook path (default yes).
    modes: Arc<Mutex<BTreeMap<String, Mode>>>,
}

impl Receiver {
    fn set(&self, hook: &str, mode: Mode) {
        self.modes.lock().unwrap().insert(hook.into(), mode);
    }

    fn got(&self, hook: &str) -> Vec<Value> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(h, _)| h == hook)
            .map(|(_, b)| b.clone())
            .collect()
    }
}

/// A receiver on 127.0.0.1: `POST /{hook}` answers as its mode says. Returns it and its base URL.
async fn receiver() -> (Receiver, String) {
    async fn take(State(r): State<Receiver>, Path(hook): Path<String>, body: String) -> StatusCode {
        r.got
            .lock()
            .unwrap()
            .push((hook.clone(), serde_json::from_str(&body).unwrap()));
        let mode = r.modes.lock().unwrap().get(&hook).copied();
        match mode.unwrap_or(Mode::Yes) {
            Mode::Yes => StatusCode::OK,
            Mode::No => StatusCode::SERVICE_UNAVAILABLE,
            Mode::Hang => std::future::pending().await,
        }
    }
    let r = Receiver::default();
    let app = Router::new()
        .route("/{hook}", post(take))
        .with_state(r.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (r, format!("http://{addr}"))
}

/// A cluster of `nodes` with both controller replicas and every agent running `overrides`.
async fn running(nodes: usize, overrides: &str) -> Harness {
    log();
    let sc = Scenario {
        nodes,
        pods_per_node: 2,
        ..Scenario::default()
    };
    let config = sim_config(&format!("nodes: {{order: name}}\n{overrides}")).unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    h.start_rollout().await.unwrap();
    h
}

fn record(v: &NodeView) -> Option<Record> {
    Record::parse(v.hooks.as_deref()).unwrap()
}

/// Waits up to `secs` for `cond` on node `name`; panics with its view otherwise.
async fn until(h: &Harness, name: &str, secs: u64, what: &str, cond: impl Fn(&NodeView) -> bool) {
    let ok = h
        .wait_for(Duration::from_secs(secs), |ns| {
            ns.iter().any(|n| n.name == name && cond(n))
        })
        .await
        .unwrap();
    let v = h.node(name).await.unwrap();
    assert!(
        ok,
        "{name}: {what} within {secs}s; state {:?}, failure {:?}, hooks {:?}",
        v.state, v.failure_reason, v.hooks
    );
}

/// No (token, attempt) sent twice, one token per hook, attempts counted up from 1.
fn one_token_attempts_counted(bodies: &[Value]) -> Vec<u64> {
    let tokens: BTreeSet<&str> = bodies
        .iter()
        .map(|b| b["token"].as_str().unwrap())
        .collect();
    assert_eq!(tokens.len(), 1, "one token per hook and phase: {bodies:?}");
    let attempts: Vec<u64> = bodies
        .iter()
        .map(|b| b["attempt"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (1..=attempts.len() as u64).collect();
    assert_eq!(attempts, expected, "each attempt sent once, in order");
    attempts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_webhook_that_says_no_holds_the_drained_node_and_nothing_is_rebooted() {
    let (r, url) = receiver().await;
    r.set("approve", Mode::No);
    let h = running(
        2,
        &format!(
            "hooks: {{afterDrain: {{webhooks: [{{name: approve, url: '{url}/approve', blocking: true, backoff: 200ms, requestTimeout: 2s}}], timeout: 5m}}}}"
        ),
    )
    .await;
    let node = h.node_names().await.unwrap()[0].clone();
    h.flag(std::slice::from_ref(&node));
    // Drained, and held there: the hook says no and is asked again with backoff.
    until(&h, &node, 30, "drained and asked", |_| {
        r.got("approve").len() >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let v = h.node(&node).await.unwrap();
    assert_eq!(v.state, Some(NodeState::Draining), "{:?}", v.failure_reason);
    assert!(v.unschedulable && v.reboot_token.is_none());
    assert_eq!(h.reboots(&node), 0, "rebooted without the hook's yes");
    let rec = record(&v).unwrap();
    let call = &rec.phases[&Phase::AfterDrain].webhooks["approve"];
    assert!(!call.answer.as_ref().unwrap().yes);
    assert_eq!(call.answer.as_ref().unwrap().detail, "HTTP 503");
    // The body says who, where and why.
    let first = &r.got("approve")[0];
    assert_eq!(first["node"], node);
    assert_eq!(first["phase"], "afterDrain");
    assert_eq!(first["hook"], "approve");
    assert_eq!(first["blocking"], true);
    assert_eq!(first["rolloutId"], rec.rollout.as_str());
    assert_eq!(first["reason"], "simulated sentinel");
    // Yes: the node goes on, is rebooted once, and the hook is not asked again.
    r.set("approve", Mode::Yes);
    until(&h, &node, 60, "done", |n| {
        n.state == Some(NodeState::Done) && !n.unschedulable
    })
    .await;
    assert_eq!(h.reboots(&node), 1);
    let asked = r.got("approve");
    one_token_attempts_counted(&asked);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        r.got("approve").len(),
        asked.len(),
        "asked again after its yes"
    );
    // The other node was never touched.
    assert_eq!(
        h.node(&h.node_names().await.unwrap()[1])
            .await
            .unwrap()
            .state,
        None
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_never_answers_fails_the_node_at_its_timeout_without_a_reboot() {
    let (r, url) = receiver().await;
    r.set("approve", Mode::Hang);
    let h = running(
        2,
        &format!(
            "hooks: {{afterDrain: {{webhooks: [{{name: approve, url: '{url}/approve', blocking: true, requestTimeout: 300ms, backoff: 100ms}}], timeout: 3s}}}}"
        ),
    )
    .await;
    let node = h.node_names().await.unwrap()[0].clone();
    h.flag(std::slice::from_ref(&node));
    until(&h, &node, 40, "failed", |n| {
        n.state == Some(NodeState::Failed)
    })
    .await;
    let v = h.node(&node).await.unwrap();
    let why = v.failure_reason.unwrap();
    assert!(
        why.contains("hooks.afterDrain: blocking webhook approve did not say yes within 3s")
            && why.contains("no answer within 300ms")
            && why.contains("not rebooted"),
        "{why}"
    );
    assert_eq!(h.reboots(&node), 0);
    assert!(v.reboot_token.is_none(), "a reboot was asked for");
    // Asked more than once in the 3 s, each attempt once.
    let asked = r.got("approve");
    assert!(asked.len() >= 2, "{asked:?}");
    one_token_attempts_counted(&asked);
    // Said as a hook's failure.
    let start = Instant::now();
    while h.events("HookFailed").await.unwrap().is_empty()
        && start.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let notes = h.events("HookFailed").await.unwrap();
    assert!(notes.iter().any(|n| n.contains("approve")), "{notes:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_never_asks_again_for_a_recorded_yes_nor_sends_an_attempt_twice() {
    let (r, url) = receiver().await;
    r.set("hold", Mode::No);
    let mut h = running(
        2,
        &format!(
            "hooks: {{beforeDrain: {{webhooks: [{{name: ticket, url: '{url}/ticket', blocking: true}}, {{name: hold, url: '{url}/hold', blocking: true, backoff: 300ms, requestTimeout: 2s}}], timeout: 5m}}}}"
        ),
    )
    .await;
    let node = h.node_names().await.unwrap()[0].clone();
    h.flag(std::slice::from_ref(&node));
    // `ticket` said yes (recorded), `hold` holds the node.
    until(
        &h,
        &node,
        30,
        "ticket's yes recorded, hold asked twice",
        |n| {
            record(n).is_some_and(|r| {
                let p = &r.phases.get(&Phase::BeforeDrain);
                p.is_some_and(|p| {
                    p.webhooks
                        .get("ticket")
                        .and_then(|c| c.answer.as_ref())
                        .is_some_and(|a| a.yes)
                        && p.webhooks.get("hold").is_some_and(|c| c.attempt >= 2)
                })
            })
        },
    )
    .await;
    let leader = h.leader().expect("a leader");
    let before = r.got("hold").len();
    h.kill_controller(leader);
    // The other replica takes over and goes on asking `hold`, from the next attempt.
    let start = Instant::now();
    while r.got("hold").len() < before + 2 && start.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        r.got("hold").len() >= before + 2,
        "the new leader did not go on"
    );
    assert_eq!(h.reboots(&node), 0);
    assert_eq!(
        h.node(&node).await.unwrap().state,
        Some(NodeState::Cordoning)
    );
    r.set("hold", Mode::Yes);
    until(&h, &node, 60, "done", |n| {
        n.state == Some(NodeState::Done) && !n.unschedulable
    })
    .await;
    assert_eq!(h.reboots(&node), 1);
    // `ticket` was asked once, for its one token; `hold` never got one attempt twice, across
    // two leaders.
    assert_eq!(r.got("ticket").len(), 1, "{:?}", r.got("ticket"));
    // One token, and attempts strictly increasing: none sent twice. An attempt may be missing:
    // the killed leader records an attempt before it sends it, and one it recorded but had not
    // sent yet is never sent (the new leader cannot tell it from one sent and unanswered).
    let hold = r.got("hold");
    let tokens: BTreeSet<&str> = hold.iter().map(|b| b["token"].as_str().unwrap()).collect();
    assert_eq!(tokens.len(), 1, "one token for the hook: {hold:?}");
    let attempts: Vec<u64> = hold
        .iter()
        .map(|b| b["attempt"].as_u64().unwrap())
        .collect();
    assert!(
        attempts[0] == 1 && attempts.windows(2).all(|w| w[0] < w[1]),
        "an attempt sent twice or out of order: {attempts:?}"
    );
    h.shutdown().await;
}

const GATE: &str = "hooks-test.example.com/storage-ok";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_annotations_hold_a_node_back_from_its_uncordon_until_given() {
    let h = running(
        2,
        &format!("hooks: {{afterReboot: {{gates: ['{GATE}'], labels: {{hooks-test.example.com/phase: after-reboot}}}}}}"),
    )
    .await;
    let node = h.node_names().await.unwrap()[0].clone();
    h.flag(std::slice::from_ref(&node));
    // Rebooted, back, and held cordoned by the missing gate.
    until(&h, &node, 60, "back and held", |n| {
        n.state == Some(NodeState::Verifying)
            && n.labels.contains_key("hooks-test.example.com/phase")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let v = h.node(&node).await.unwrap();
    assert_eq!(v.state, Some(NodeState::Verifying));
    assert!(v.unschedulable, "uncordoned without its gate");
    assert_eq!(h.reboots(&node), 1);
    // `false` does not open it either.
    h.patch_node(&node, json!({"metadata": {"annotations": {GATE: "false"}}}))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(h.node(&node).await.unwrap().unschedulable);
    h.patch_node(&node, json!({"metadata": {"annotations": {GATE: "true"}}}))
        .await
        .unwrap();
    until(&h, &node, 30, "done", |n| {
        n.state == Some(NodeState::Done) && !n.unschedulable
    })
    .await;
    // Removed when the phase passed: the next cycle waits for a fresh yes.
    let v = h.node(&node).await.unwrap();
    assert!(
        !v.other_annotations.contains_key(GATE),
        "{:?}",
        v.other_annotations
    );
    assert_eq!(h.reboots(&node), 1);
    // The wait was said when it began and when it ended (Normal Events on the Node).
    let waiting = h.events("HookWaiting").await.unwrap();
    assert!(
        waiting
            .iter()
            .any(|n| n.contains("hooks.afterReboot") && n.contains(GATE)),
        "{waiting:?}"
    );
    let passed = h.events("HookPassed").await.unwrap();
    assert!(
        passed
            .iter()
            .any(|n| n.contains("hooks.afterReboot passed after")),
        "{passed:?}"
    );
    h.shutdown().await;
}

/// One observation of a Node by a watch.
#[derive(Clone, Debug)]
struct Seen {
    state: Option<NodeState>,
    flagged: bool,
    label: Option<String>,
    maint_taint: bool,
    pending_taint: bool,
}

const MAINT: &str = "hooks-test.example.com/maintenance";
const PENDING: &str = "hooks-test.example.com/reboot-pending";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_and_taints_are_put_and_taken_off_at_their_phases() {
    let h = running(
        3,
        &format!(
            "
hooks:
  preferNoScheduleTaint: {PENDING}
  beforeDrain:
    labels: {{{MAINT}: in-progress}}
    taints: [{{key: {MAINT}, effect: NoSchedule}}]
  afterReboot:
    labels: {{{MAINT}: rebooted}}
    removeTaints: [{MAINT}]
  afterDone:
    removeLabels: [{MAINT}]
"
        ),
    )
    .await;
    let seen: Arc<Mutex<BTreeMap<String, Vec<Seen>>>> = Default::default();
    let api: Api<Node> = Api::all(h.client.clone());
    let s2 = seen.clone();
    let watch = tokio::spawn(async move {
        let s = watcher(api, watcher::Config::default());
        futures::pin_mut!(s);
        while let Some(ev) = s.next().await {
            if let Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = ev {
                let v = NodeView::from_node(&n);
                let has = |k: &str, e: &str| v.taints.iter().any(|t| t.key == k && t.effect == e);
                s2.lock()
                    .unwrap()
                    .entry(v.name.clone())
                    .or_default()
                    .push(Seen {
                        state: v.state,
                        flagged: v.flagged(),
                        label: v.labels.get(MAINT).cloned(),
                        maint_taint: has(MAINT, "NoSchedule"),
                        pending_taint: has(PENDING, "PreferNoSchedule"),
                    });
            }
        }
    });
    let names = h.node_names().await.unwrap();
    let flagged = vec![names[0].clone(), names[1].clone()];
    h.flag(&flagged);
    let set: BTreeSet<String> = flagged.iter().cloned().collect();
    let done = h
        .wait_for(Duration::from_secs(120), |ns| {
            Harness::finished(ns, &set)
                && ns.iter().filter(|n| set.contains(&n.name)).all(|n| {
                    !n.labels.contains_key(MAINT)
                        && !n.taints.iter().any(|t| t.key == PENDING || t.key == MAINT)
                })
        })
        .await
        .unwrap();
    let views = h.nodes().await.unwrap();
    assert!(
        done,
        "{:?}",
        views
            .iter()
            .map(|n| (&n.name, n.state, n.labels.get(MAINT), &n.taints))
            .collect::<Vec<_>>()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    watch.abort();
    let seen = seen.lock().unwrap().clone();
    for name in &flagged {
        let s = &seen[name];
        assert_eq!(h.reboots(name), 1);
        // Flagged: the PreferNoSchedule taint (the first node is started at once, the second
        // waits its turn with it).
        assert!(
            s.iter().any(|o| o.flagged && o.pending_taint),
            "{name}: never carried the PreferNoSchedule taint while flagged: {s:?}"
        );
        if *name == flagged[1] {
            assert!(
                s.iter()
                    .any(|o| o.flagged && o.state.is_none() && o.pending_taint),
                "{name}: waited its turn without the PreferNoSchedule taint: {s:?}"
            );
        }
        // Taken off once the flag is gone (the agent clears it when the host is back), before
        // the node is done.
        assert!(
            s.iter().any(|o| !o.flagged
                && !o.pending_taint
                && matches!(o.state, Some(NodeState::Rebooting | NodeState::Verifying))),
            "{name}: {s:?}"
        );
        // Drained and rebooted under the beforeDrain label and taint.
        for o in s
            .iter()
            .filter(|o| matches!(o.state, Some(NodeState::Draining | NodeState::Rebooting)))
        {
            assert!(
                o.label.as_deref() == Some("in-progress") && o.maint_taint,
                "{name}: {o:?}"
            );
        }
        assert!(s.iter().any(|o| o.state == Some(NodeState::Rebooting)));
        // After the reboot: relabelled, the taint off, before the node is done.
        assert!(
            s.iter().any(|o| o.state == Some(NodeState::Verifying)
                && o.label.as_deref() == Some("rebooted")
                && !o.maint_taint),
            "{name}: {s:?}"
        );
        // Done: the label goes (afterDone), and the PreferNoSchedule taint with the flag.
        let last = s.last().unwrap();
        assert!(
            last.state == Some(NodeState::Done) && last.label.is_none() && !last.pending_taint,
            "{name}: {last:?}"
        );
    }
    // The node never flagged never got any of it.
    assert!(seen[&names[2]]
        .iter()
        .all(|o| o.label.is_none() && !o.maint_taint && !o.pending_taint));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_settle_waits_before_the_reboot_and_a_hanging_fire_and_forget_hook_slows_nothing() {
    let (r, url) = receiver().await;
    r.set("tell", Mode::Hang);
    let h = running(
        2,
        &format!(
            "drain: {{settle: 2s}}\nhooks: {{beforeDrain: {{webhooks: [{{name: tell, url: '{url}/tell', requestTimeout: 1m, retries: 0}}]}}}}"
        ),
    )
    .await;
    let node = h.node_names().await.unwrap()[0].clone();
    h.flag(std::slice::from_ref(&node));
    let start = Instant::now();
    until(&h, &node, 60, "done", |n| {
        n.state == Some(NodeState::Done) && !n.unschedulable
    })
    .await;
    // The hanging hook (a minute's timeout) held nothing: the cycle took far less.
    assert!(
        start.elapsed() < Duration::from_secs(40),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(r.got("tell").len(), 1, "fired once");
    assert_eq!(r.got("tell")[0]["blocking"], false);
    let v = h.node(&node).await.unwrap();
    let rec = record(&v).unwrap();
    let drained = rec.phases[&Phase::AfterDrain].since;
    let passed = rec.phases[&Phase::AfterDrain].passed.unwrap();
    // The reboot token was issued after the settle (the cycle's record keeps it once done).
    let ended_on = v.history.last_cycle.as_ref().and_then(|c| c.token.clone());
    let token = Token::parse(ended_on.as_deref().unwrap()).unwrap();
    assert!(
        passed - drained >= chrono::Duration::seconds(2),
        "{drained} .. {passed}"
    );
    assert!(
        token.issued - drained >= chrono::Duration::seconds(2),
        "{drained} .. {}",
        token.issued
    );
    assert_eq!(h.reboots(&node), 1);
    h.shutdown().await;
}

/// The taint and label writes the hooks send, as kube-apiserver v1.36.2 answered them on
/// node-1 of the real control plane (merge patches with `hooks-test` keys, then undone): a
/// fenced patch of the whole taint list is stored as sent (an empty value is no `value` key),
/// the same patch on a stale resourceVersion is 409, and `taints: null` leaves no `taints` key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_stores_hook_taint_and_label_patches_as_the_real_server_does() {
    log();
    let h = Harness::start(Scenario::default(), sim_config("").unwrap())
        .await
        .unwrap();
    let api: Api<Node> = Api::all(h.client.clone());
    let name = h.node_names().await.unwrap()[0].clone();
    let rv = api
        .get(&name)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let add = json!({
        "metadata": {"resourceVersion": rv, "labels": {"hooks-test.example.com/maint": "in-progress"}},
        "spec": {"taints": [
            {"key": "hooks-test.example.com/maint", "effect": "NoSchedule"},
            {"key": "hooks-test.example.com/pending", "effect": "PreferNoSchedule"}
        ]}
    });
    let pp = kube::api::PatchParams::default();
    let n = api
        .patch(&name, &pp, &kube::api::Patch::Merge(&add))
        .await
        .unwrap();
    let stored = serde_json::to_value(&n).unwrap();
    assert_eq!(
        stored["spec"]["taints"],
        json!([
            {"key": "hooks-test.example.com/maint", "effect": "NoSchedule"},
            {"key": "hooks-test.example.com/pending", "effect": "PreferNoSchedule"}
        ])
    );
    assert_eq!(
        stored["metadata"]["labels"]["hooks-test.example.com/maint"],
        "in-progress"
    );
    let stale = json!({"metadata": {"resourceVersion": rv}, "spec": {"taints": null}});
    match api
        .patch(&name, &pp, &kube::api::Patch::Merge(&stale))
        .await
    {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 409, "{e:?}"),
        other => panic!("a stale write was not refused: {other:?}"),
    }
    let remove = json!({"metadata": {"labels": {"hooks-test.example.com/maint": null}}, "spec": {"taints": null}});
    let n = api
        .patch(&name, &pp, &kube::api::Patch::Merge(&remove))
        .await
        .unwrap();
    let stored = serde_json::to_value(&n).unwrap();
    assert!(stored["spec"].get("taints").is_none(), "{}", stored["spec"]);
    assert!(stored["metadata"]["labels"]
        .get("hooks-test.example.com/maint")
        .is_none());
    h.shutdown().await;
}
