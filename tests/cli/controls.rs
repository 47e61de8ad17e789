//! The operator's controls (`rollboot pause`, `resume`, `retry`, `request`) run as the binary
//! against the simulated cluster while the real controller (2 replicas) and agents run there:
//! a pause lets the node in flight finish and starts nothing new, `status` shows who paused
//! and why, `resume` lets the rollout finish; `resume` refuses a lock that is not a pause;
//! `retry` clears a failed node so it is rebooted once more; `request` orders by request time,
//! a hand-written `now` included; the reboot history counts each cycle.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, PostParams};
use rollboot::lock::LockRecord;
use rollboot::node::{self as proto, NodeState, NodeView};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};
use serde_json::Value;

use crate::run as cli;
use cli::rollboot;

const IDENTITY: &str = "operator-cli";

fn log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("TLOG").unwrap_or("rollboot=warn".into()))
        .with_test_writer()
        .try_init();
}

struct Setup {
    h: Harness,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    config: String,
}

/// A cluster of `sc`, rollboot's config `overrides` (on the simulator's) also written to a file
/// for the CLI and, as an install keeps it, to the ConfigMap `rollboot-system/rollboot-config`
/// (the commands given no `--config` read it), and a kubeconfig for the CLI (identity
/// `operator-cli`).
async fn setup(sc: Scenario, overrides: &str) -> Setup {
    log();
    let h = Harness::start(sc, sim_config(overrides).unwrap())
        .await
        .unwrap();
    let config_map = serde_json::json!({
        "metadata": {"name": "rollboot-config"},
        "data": {"rollboot.yaml": overrides},
    });
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(h.client.clone(), "rollboot-system")
        .create(
            &Default::default(),
            &serde_json::from_value(config_map).unwrap(),
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    h.cluster.write_kubeconfig(&kubeconfig, IDENTITY).unwrap();
    let file = dir.path().join("rollboot.yaml");
    std::fs::write(&file, overrides).unwrap();
    Setup {
        h,
        config: file.to_str().unwrap().to_string(),
        _dir: dir,
        kubeconfig,
    }
}

impl Setup {
    async fn run(&self, args: &[&str]) -> (i32, String, String) {
        rollboot(&self.kubeconfig, args).await
    }

    async fn status_json(&self) -> Value {
        let (code, out, err) = self
            .run(&["status", "--config", &self.config, "--output", "json"])
            .await;
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    }

    async fn lock(&self) -> LockRecord {
        let api: Api<Lease> = Api::namespaced(self.h.client.clone(), "rollboot-system");
        LockRecord::from_lease(api.get_opt("rollboot-lock").await.unwrap())
    }

    /// Every request the CLI made carried the operator's User-Agent.
    fn assert_operator_user_agent(&self) {
        let stats = self.h.cluster.stats();
        let mine: Vec<_> = stats
            .requests
            .iter()
            .filter(|(k, _)| k.identity == IDENTITY)
            .collect();
        assert!(!mine.is_empty());
        let agents: BTreeSet<String> = stats
            .user_agents
            .iter()
            .filter(|(id, _)| id.as_str() == IDENTITY)
            .flat_map(|(_, uas)| uas.iter().cloned())
            .collect();
        let want = format!("rollboot/{} (operator)", env!("CARGO_PKG_VERSION"));
        assert!(agents.contains(&want), "{agents:?}");
    }
}

/// Waits (at most `within`) until `cond` holds on the nodes; panics naming `what` otherwise.
async fn until(h: &Harness, within: Duration, what: &str, cond: impl FnMut(&[NodeView]) -> bool) {
    assert!(h.wait_for(within, cond).await.unwrap(), "{what}: {:?}", {
        h.nodes()
            .await
            .unwrap()
            .into_iter()
            .map(|n| (n.name, n.state, n.unschedulable, n.failure_reason))
            .collect::<Vec<_>>()
    });
}

fn done(ns: &[NodeView], names: &BTreeSet<String>) -> bool {
    Harness::finished(ns, names)
        && ns
            .iter()
            .filter(|n| names.contains(&n.name))
            .all(|n| n.state == Some(NodeState::Done))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_lets_the_node_in_flight_finish_and_starts_nothing_until_resumed() {
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 4,
        grace_seconds: 80,
        reboot_time: 150.0,
        ..Scenario::default()
    };
    let mut s = setup(sc, "nodes: {order: name}\n").await;
    s.h.start_rollout().await.unwrap();
    let names = s.h.node_names().await.unwrap();
    let all: BTreeSet<String> = names.iter().cloned().collect();
    s.h.flag(&names);
    // The first node (whichever the agents flagged first) is rebooting: pause now.
    let mut first = String::new();
    until(
        &s.h,
        Duration::from_secs(30),
        "no node ever rebooted",
        |ns| match ns.iter().find(|n| n.state == Some(NodeState::Rebooting)) {
            Some(n) => {
                first = n.name.clone();
                true
            }
            None => false,
        },
    )
    .await;
    let (code, out, err) = s
        .run(&[
            "pause",
            "--config",
            &s.config,
            "--reason",
            "kernel CVE review",
            "--by",
            "alice",
        ])
        .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("paused by alice") && out.contains("(kernel CVE review)"),
        "{out}"
    );
    // Only if it was still in flight when the pause was taken (a cycle ends ~1 s after its
    // reboot starts here; the pause takes a fraction of that).
    let lock = s.lock().await;
    assert_eq!(lock.holder.as_deref(), Some("rollboot-pause/alice"));
    assert!(
        lock.entries.contains_key(&first),
        "{first}, rebooting, is kept in the lock: {lock:?}"
    );
    assert!(
        out.contains(&format!("{first} is rebooting: it finishes its cycle"))
            || out.contains(&format!(
                "{first} is back and being verified: it finishes its cycle"
            )),
        "{out}"
    );
    assert!(out.contains("nothing new starts"), "{out}");
    // A second pause writes nothing and says who holds it.
    let (code, out, _) = s.run(&["pause", "--config", &s.config]).await;
    assert_eq!(code, 0);
    assert!(out.contains("already paused by alice"), "{out}");

    // The node in flight finishes, and is freed from the lock under the pause.
    let one = BTreeSet::from([first.clone()]);
    until(
        &s.h,
        Duration::from_secs(30),
        "the node in flight never finished",
        |ns| done(ns, &one),
    )
    .await;
    let mut freed = false;
    for _ in 0..50 {
        let l = s.lock().await;
        if l.entries.is_empty() {
            assert_eq!(l.holder.as_deref(), Some("rollboot-pause/alice"));
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(freed, "{first} never left the lock under the pause");
    // Nothing new starts while paused (the others stay flagged, untouched, not rebooted).
    tokio::time::sleep(Duration::from_secs(3)).await;
    for n in names.iter().filter(|n| **n != first) {
        let v = s.h.node(n).await.unwrap();
        assert!(v.flagged(), "{n}: {v:?}, reboots {}", s.h.reboots(n));
        assert_eq!(v.state, None, "{n} started while paused");
        assert!(!v.unschedulable, "{n} cordoned while paused");
        assert_eq!(s.h.reboots(n), 0, "{n} rebooted while paused");
    }

    // status shows the pause: holder, who, when, why.
    let doc = s.status_json().await;
    assert_eq!(doc["lock"]["holder"], "rollboot-pause/alice");
    assert_eq!(doc["lock"]["foreign"], true);
    assert_eq!(doc["lock"]["pause"]["by"], "alice");
    assert_eq!(doc["lock"]["pause"]["reason"], "kernel CVE review");
    assert!(doc["lock"]["pause"]["at"].is_string());
    let (code, text, _) = s.run(&["status", "--config", &s.config]).await;
    assert_eq!(code, 0);
    let line = text.lines().find(|l| l.starts_with("lock:")).unwrap();
    assert!(
        line.contains("PAUSED by alice since") && line.contains(": kernel CVE review"),
        "{text}"
    );

    let (code, out, err) = s.run(&["resume", "--config", &s.config]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("resumed") && out.contains("paused by alice"),
        "{out}"
    );
    assert!(s.lock().await.pause.is_none());
    until(
        &s.h,
        Duration::from_secs(60),
        "the rollout never finished",
        |ns| done(ns, &all),
    )
    .await;
    let inv = s.h.cluster.invariants();
    assert!(inv.pdb_violations.is_empty(), "{:?}", inv.pdb_violations);
    assert!(inv.max_nodes_unavailable <= 1);
    for n in &names {
        assert_eq!(s.h.reboots(n), 1, "{n} was not rebooted exactly once");
    }

    // The history: one reboot each, from one boot to another, shown by status.
    let mut after = Vec::new();
    for n in &names {
        let h = s.h.node(n).await.unwrap().history;
        assert_eq!(h.count, Some(1), "{n}: {h:?}");
        let (b, a) = (h.boot_id_before.unwrap(), h.boot_id_after.unwrap());
        assert_ne!(b, a, "{n}");
        assert!(h.last_reboot.is_some());
        after.push(a);
    }
    let doc = s.status_json().await;
    let history = doc["history"].as_array().unwrap();
    assert_eq!(history.len(), 3, "{history:?}");
    for (row, n) in history.iter().zip(&names) {
        assert_eq!(row["node"], n.as_str());
        assert_eq!(row["count"], 1);
    }
    let (_, text, _) = s.run(&["status", "--config", &s.config]).await;
    assert!(text.contains("reboot history:"), "{text}");
    // A second rollout counts 2, and its "before" is the first one's "after".
    s.h.flag(&names);
    until(
        &s.h,
        Duration::from_secs(5),
        "the agents never flagged again",
        |ns| ns.iter().all(|n| n.flagged()),
    )
    .await;
    until(
        &s.h,
        Duration::from_secs(60),
        "the second rollout never finished",
        |ns| done(ns, &all) && ns.iter().all(|n| n.history.count == Some(2)),
    )
    .await;
    for (n, first_after) in names.iter().zip(&after) {
        let h = s.h.node(n).await.unwrap().history;
        assert_eq!(h.boot_id_before.as_ref(), Some(first_after), "{n}");
        assert_eq!(s.h.reboots(n), 2);
    }
    s.assert_operator_user_agent();
    s.h.shutdown().await;
}

async fn put_lock(h: &Harness, holder: &str) {
    let api: Api<Lease> = Api::namespaced(h.client.clone(), "rollboot-system");
    let mut l = Lease {
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    l.metadata.name = Some("rollboot-lock".into());
    api.create(&PostParams::default(), &l).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_refuses_a_lock_that_is_not_a_pause_unless_forced() {
    let s = setup(Scenario::default(), "{}\n").await;
    // Free and absent: nothing to resume.
    let (code, out, err) = s.run(&["resume", "--config", &s.config]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("not paused"), "{out}");

    put_lock(&s.h, "ops-team").await;
    let (code, out, err) = s.run(&["resume", "--config", &s.config]).await;
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("held by `ops-team`") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(s.lock().await.holder.as_deref(), Some("ops-team"));
    // A pause does not take another tool's lock either.
    let (code, _, err) = s.run(&["pause", "--config", &s.config]).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("`ops-team`"), "{err}");
    let (code, out, err) = s
        .run(&[
            "resume", "--config", &s.config, "--force", "--output", "json",
        ])
        .await;
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["outcome"], "resumed");
    assert_eq!(s.lock().await.holder, None);

    // rollboot's own lock: refused too, JSON says so.
    let ours = rollboot::lock::lock_owner(&s.h.config);
    let api: Api<Lease> = Api::namespaced(s.h.client.clone(), "rollboot-system");
    api.delete("rollboot-lock", &Default::default())
        .await
        .unwrap();
    put_lock(&s.h, &ours).await;
    let (code, out, _) = s
        .run(&["resume", "--config", &s.config, "--output", "json"])
        .await;
    assert_eq!(code, 3);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["outcome"], "refused");
    assert!(
        doc["message"]
            .as_str()
            .unwrap()
            .contains("rollboot's controller"),
        "{doc}"
    );
    s.h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_clears_a_failed_node_which_is_then_rebooted_once() {
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 2,
        ..Scenario::default()
    };
    let mut s = setup(sc, "reboot: {timeout: 3s}\n").await;
    s.h.start_rollout().await.unwrap();
    let node = "node-0001".to_string();
    s.h.host.broken.lock().unwrap().insert(node.clone());
    s.h.flag(std::slice::from_ref(&node));
    until(
        &s.h,
        Duration::from_secs(30),
        "node-0001 never failed",
        |ns| {
            ns.iter()
                .any(|n| n.name == node && n.state == Some(NodeState::Failed))
        },
    )
    .await;
    assert_eq!(s.h.reboots(&node), 1);
    let doc = s.status_json().await;
    assert_eq!(doc["failures"]["failed"][0], node.as_str());

    // Not failed: refused, naming the state.
    let (code, out, err) = s.run(&["retry", "node-0000"]).await;
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("node node-0000 is not failed (it has no rollboot state)"),
        "{err}"
    );
    let (code, _, err) = s.run(&["retry", "node-9999"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("Node node-9999") && err.contains("127.0.0.1"),
        "{err}"
    );

    let (code, out, err) = s.run(&["retry", &node]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("cleared the failure of node-0001"), "{out}");
    assert!(
        out.contains("rollboot had cordoned node-0001: it is uncordoned"),
        "{out}"
    );
    let v = s.h.node(&node).await.unwrap();
    assert_eq!(v.state, None);
    assert_eq!(v.failure_reason, None);
    assert_eq!(v.state_since, None);
    assert!(v.reboot_token.is_none() && v.boot_id_before.is_none() && v.reboot_attempt.is_none());
    assert!(!v.unschedulable && v.cordoned_by.is_none());
    let doc = s.status_json().await;
    assert_eq!(doc["failures"]["failed"], Value::Array(vec![]));
    assert_eq!(doc["counts"]["failed"], 0);
    let (_, text, _) = s.run(&["status", "--config", &s.config]).await;
    assert!(!text.contains("failure:"), "{text}");
    // A second retry: it is no longer failed.
    let (code, _, err) = s.run(&["retry", &node]).await;
    assert_eq!(code, 3);
    assert!(err.contains("not failed"), "{err}");

    // The host is fixed; the agent's flag went with the first reboot, so ask for one.
    s.h.fix_host(&node);
    let (code, out, err) = s.run(&["request", &node, "--reason", "after repair"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let one = BTreeSet::from([node.clone()]);
    until(
        &s.h,
        Duration::from_secs(30),
        "the retried node never finished",
        |ns| done(ns, &one),
    )
    .await;
    assert_eq!(s.h.reboots(&node), 2, "rebooted once more after the retry");
    assert_eq!(s.h.node(&node).await.unwrap().history.count, Some(1));
    for other in ["node-0000", "node-0002"] {
        assert_eq!(s.h.reboots(other), 0);
    }
    s.assert_operator_user_agent();
    s.h.shutdown().await;
}

fn requested_at(v: &NodeView) -> DateTime<Utc> {
    v.requested_at
        .unwrap_or_else(|| panic!("{} has no dated request", v.name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_in_request_order_and_a_hand_written_now_takes_its_turn_when_seen() {
    let sc = Scenario {
        nodes: 4,
        pods_per_node: 2,
        ..Scenario::default()
    };
    let mut s = setup(sc, "{}\n").await;
    s.h.start_rollout().await.unwrap();
    let (code, _, err) = s
        .run(&["pause", "--config", &s.config, "--by", "test"])
        .await;
    assert_eq!(code, 0, "{err}");
    let gap = || tokio::time::sleep(Duration::from_millis(300));
    let (code, out, err) = s
        .run(&["request", "node-0002", "--reason", "new kernel"])
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("requested a reboot of node-0002 at"), "{out}");
    gap().await;
    s.run(&["request", "node-0000"]).await;
    gap().await;
    // By hand, as docs/operating.md says: `kubectl annotate node N rollboot.dev/reboot-requested=now`.
    s.h.patch_node(
        "node-0001",
        serde_json::json!({"metadata": {"annotations": {proto::REBOOT_REQUESTED: "now"}}}),
    )
    .await
    .unwrap();
    until(
        &s.h,
        Duration::from_secs(10),
        "the controller never dated `now`",
        |ns| {
            ns.iter()
                .any(|n| n.name == "node-0001" && n.requested_at.is_some())
        },
    )
    .await;
    gap().await;
    s.run(&["request", "node-0003"]).await;
    // Requested again: keeps its turn.
    let (code, out, _) = s.run(&["request", "node-0002", "--output", "json"]).await;
    assert_eq!(code, 0);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["outcome"], "alreadyRequested", "{doc}");

    let nodes = s.h.nodes().await.unwrap();
    let at = |name: &str| requested_at(nodes.iter().find(|n| n.name == name).unwrap());
    assert!(at("node-0002") < at("node-0000"));
    assert!(at("node-0000") < at("node-0001") && at("node-0001") < at("node-0003"));
    let doc = s.status_json().await;
    let reason = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "node-0002")
        .unwrap()["flagReason"]
        .clone();
    assert_eq!(reason, "requested: new kernel");

    let (code, _, err) = s.run(&["resume", "--config", &s.config]).await;
    assert_eq!(code, 0, "{err}");
    let all: BTreeSet<String> = s.h.node_names().await.unwrap().into_iter().collect();
    until(
        &s.h,
        Duration::from_secs(60),
        "the rollout never finished",
        |ns| done(ns, &all),
    )
    .await;
    // Taken one at a time: the order of their ends is the order they were taken in.
    let mut ends: Vec<(DateTime<Utc>, String)> =
        s.h.nodes()
            .await
            .unwrap()
            .into_iter()
            .map(|n| (n.history.last_reboot.unwrap(), n.name))
            .collect();
    ends.sort();
    let order: Vec<&str> = ends.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(order, ["node-0002", "node-0000", "node-0001", "node-0003"]);
    let v = s.h.node("node-0002").await.unwrap();
    assert!(!v.reboot_requested && v.reboot_requested_reason.is_none());
    s.h.shutdown().await;
}
