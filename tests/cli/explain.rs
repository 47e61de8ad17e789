//! `rollboot explain NODE` against the simulated cluster: each reason code in the JSON where its
//! situation holds (set up with the labels, annotations and Leases the controller and the
//! operator's controls write), the exit codes, the text a person reads, that it only reads; and
//! that it agrees with what the real controller then does on the same cluster.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{SecondsFormat, TimeDelta, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, PostParams};
use rollboot::lock::{LockEntry, LockRecord, IN_FLIGHT};
use rollboot::node::{self as proto, NodeState};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};
use serde_json::{json, Value};

use crate::run as cli;
use cli::rollboot;

const IDENTITY: &str = "explain-cli";

/// A simulated cluster of nodes `node-0000`... (no pods), the config the controller would run
/// with written for `--config`.
struct World {
    h: Harness,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    config: PathBuf,
}

impl World {
    async fn start(nodes: usize, overrides: &str) -> World {
        let h = Harness::start(Scenario::nodes_only(nodes), sim_config(overrides).unwrap())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        h.cluster.write_kubeconfig(&kubeconfig, IDENTITY).unwrap();
        let config = dir.path().join("rollboot.yaml");
        std::fs::write(&config, yaml_serde::to_string(&*h.config).unwrap()).unwrap();
        World {
            h,
            _dir: dir,
            kubeconfig,
            config,
        }
    }

    /// `rollboot explain NODE -o json`: (exit code, the JSON, stderr).
    async fn explain(&self, node: &str) -> (i32, Value, String) {
        let (code, out, err) = self.run(node, "json").await;
        let v = serde_json::from_str(&out).unwrap_or(Value::Null);
        (code, v, err)
    }

    async fn run(&self, node: &str, output: &str) -> (i32, String, String) {
        let config = self.config.to_str().unwrap();
        let args = ["explain", node, "--config", config, "-o", output];
        rollboot(&self.kubeconfig, &args).await
    }

    /// Explains `node`, which something holds: exit 3, its codes.
    async fn held(&self, node: &str) -> (Vec<String>, Value) {
        let (code, v, err) = self.explain(node).await;
        assert_eq!(code, 3, "{v:#}{err}");
        assert_eq!(v["eligible"], false, "{v:#}");
        (codes(&v), v)
    }

    async fn patch(&self, node: &str, patch: Value) {
        self.h.patch_node(node, patch).await.unwrap();
    }

    async fn flag(&self, node: &str, at: &str) {
        self.patch(
            node,
            json!({"metadata": {"annotations": {proto::REBOOT_REQUIRED: at}}}),
        )
        .await;
    }

    /// The lock Lease held by `holder`, with `entries` in flight and `annotations`.
    async fn lock(&self, holder: &str, entries: &[(&str, LockEntry)]) {
        let entries: std::collections::BTreeMap<&str, &LockEntry> =
            entries.iter().map(|(n, e)| (*n, e)).collect();
        let mut l = Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                acquire_time: Some(rollboot::time::micro(Utc::now())),
                ..Default::default()
            }),
            ..Default::default()
        };
        l.metadata.name = Some("rollboot-lock".into());
        l.metadata.annotations = Some(
            [(
                IN_FLIGHT.to_string(),
                serde_json::to_string(&entries).unwrap(),
            )]
            .into(),
        );
        Api::<Lease>::namespaced(self.h.client.clone(), "rollboot-system")
            .create(&PostParams::default(), &l)
            .await
            .unwrap();
    }

    /// The lock's record as the cluster has it now.
    async fn lock_now(&self) -> LockRecord {
        let api = Api::<Lease>::namespaced(self.h.client.clone(), "rollboot-system");
        LockRecord::from_lease(api.get_opt("rollboot-lock").await.unwrap())
    }

    async fn shutdown(self) {
        self.h.shutdown().await;
    }
}

fn codes(v: &Value) -> Vec<String> {
    v["reasons"]
        .as_array()
        .unwrap_or_else(|| panic!("no reasons: {v:#}"))
        .iter()
        .map(|r| r["code"].as_str().unwrap().to_string())
        .collect()
}

/// The reason with `code`.
fn reason<'a>(v: &'a Value, code: &str) -> &'a Value {
    v["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["code"] == code)
        .unwrap_or_else(|| panic!("no {code}: {v:#}"))
}

fn message<'a>(v: &'a Value, code: &str) -> &'a str {
    reason(v, code)["message"].as_str().unwrap()
}

fn instant(t: chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

const FLAG_1: &str = "2026-01-01T00:00:00Z";
const FLAG_2: &str = "2026-01-02T00:00:00Z";

/// As the controller writes a node's entry in the lock when its cycle starts.
fn entry(since: chrono::DateTime<Utc>) -> LockEntry {
    LockEntry {
        state: NodeState::Cordoning,
        since,
        leader: "controller-0".into(),
        group: None,
    }
}

/// A pod of a ReplicaSet on `node`, labelled `app` (a drain evicts it).
async fn pod(h: &Harness, ns: &str, name: &str, node: &str, app: &str) {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("{name}-rs"), "uid": "00000000-0000-0000-0000-000000000050",
                "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(h.client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
}

async fn namespace(h: &Harness, name: &str) {
    let mut n = Namespace::default();
    n.metadata.name = Some(name.into());
    Api::<Namespace>::all(h.client.clone())
        .create(&PostParams::default(), &n)
        .await
        .unwrap();
}

/// A budget over `app`'s one pod that allows no disruption (`minAvailable: 1`), once the
/// simulated disruption controller counts the pod healthy.
async fn budget_at_zero(h: &Harness, ns: &str, app: &str) {
    let b: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": app},
        "spec": {"selector": {"matchLabels": {"app": app}}, "minAvailable": 1},
    }))
    .unwrap();
    let api = Api::<PodDisruptionBudget>::namespaced(h.client.clone(), ns);
    api.create(&PostParams::default(), &b).await.unwrap();
    for _ in 0..200 {
        let b = serde_json::to_value(api.get(app).await.unwrap()).unwrap();
        if b["status"]["currentHealthy"].as_i64() == Some(1) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("budget {ns}/{app}: its pod was never counted healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_flagged_and_eligible_exit_3_and_0_and_say_so_in_text() {
    let w = World::start(2, "").await;
    w.flag("node-0001", FLAG_1).await;
    let (codes, v) = w.held("node-0000").await;
    assert_eq!(codes, ["notFlagged"]);
    assert_eq!(v["startsAt"], Value::Null);
    assert!(message(&v, "notFlagged").contains("`rollboot request node-0000`"));
    let (code, v, err) = w.explain("node-0001").await;
    assert_eq!(code, 0, "{v:#}{err}");
    assert_eq!(v["eligible"], true);
    assert_eq!(v["reasons"], json!([]));
    assert!(v["startsAt"].is_string(), "{v:#}");
    let keys: BTreeSet<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    assert_eq!(
        keys,
        BTreeSet::from(["eligible", "node", "reasons", "startsAt"])
    );

    let (code, out, _) = w.run("node-0000", "text").await;
    assert_eq!(code, 3);
    assert!(
        out.starts_with("node node-0000: HELD by 1 reason(s)\n  notFlagged: "),
        "{out}"
    );
    assert!(out.contains("starts: not predicted"), "{out}");
    let (code, out, _) = w.run("node-0001", "text").await;
    assert_eq!(code, 0);
    assert!(out.starts_with("node node-0001: ELIGIBLE now"), "{out}");
    assert!(out.contains("\nstarts: now ("), "{out}");
    // Only gets and lists.
    let mine: Vec<_> =
        w.h.cluster
            .stats()
            .requests
            .into_iter()
            .filter(|(k, _)| k.identity == IDENTITY)
            .collect();
    assert!(!mine.is_empty());
    assert!(
        mine.iter()
            .all(|(k, _)| k.verb == "get" || k.verb == "list"),
        "explain did more than read: {mine:?}"
    );
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_such_node_and_no_cluster_exit_1_naming_the_cause() {
    let w = World::start(1, "").await;
    let (code, v, err) = w.explain("node-9999").await;
    assert_eq!((code, v), (1, Value::Null), "{err}");
    assert!(err.contains("no node named `node-9999`"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let nowhere = cli::unreachable_kubeconfig(dir.path());
    let config = w.config.to_str().unwrap();
    let (code, _, err) = rollboot(&nowhere, &["explain", "node-0000", "--config", config]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("127.0.0.1:9"), "{err}");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excluded_names_the_label() {
    let w = World::start(1, "").await;
    w.patch(
        "node-0000",
        json!({"metadata": {"labels": {proto::EXCLUDE: "true"},
            "annotations": {proto::REBOOT_REQUIRED: FLAG_1}}}),
    )
    .await;
    let (codes, v) = w.held("node-0000").await;
    assert_eq!(codes, ["excluded"]);
    assert!(message(&v, "excluded").contains("rollboot.dev/exclude=true"));
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_maintenance_names_the_actor() {
    let w = World::start(2, "").await;
    w.patch(
        "node-0000",
        json!({"spec": {"taints": [{"key": proto::TAINT_KARPENTER_DISRUPTED, "effect": "NoSchedule"}]},
            "metadata": {"annotations": {proto::REBOOT_REQUIRED: FLAG_1}}}),
    )
    .await;
    let (codes, v) = w.held("node-0000").await;
    assert!(codes.contains(&"otherMaintenance".to_string()), "{codes:?}");
    assert!(
        message(&v, "otherMaintenance").contains("karpenter.sh/disrupted"),
        "{v}"
    );
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_closed_says_the_next_opening() {
    let (from, to) = (
        Utc::now() - TimeDelta::hours(1),
        Utc::now() + TimeDelta::hours(1),
    );
    let w = World::start(
        1,
        &format!(
            "blackouts: [{{from: '{}', to: '{}'}}]",
            instant(from),
            instant(to)
        ),
    )
    .await;
    w.flag("node-0000", FLAG_1).await;
    let (codes, v) = w.held("node-0000").await;
    assert_eq!(codes, ["windowClosed"]);
    let until = reason(&v, "windowClosed")["until"].as_str().unwrap();
    let until = chrono::DateTime::parse_from_rfc3339(until)
        .unwrap()
        .to_utc();
    // The blackout's end, as written (to the millisecond).
    assert_eq!(instant(until), instant(to), "{v:#}");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_says_by_whom_and_why() {
    let w = World::start(1, "").await;
    w.flag("node-0000", FLAG_1).await;
    let config = w.config.to_str().unwrap();
    let args = [
        "pause",
        "--config",
        config,
        "--by",
        "alice",
        "--reason",
        "change freeze",
    ];
    let (code, _, err) = rollboot(&w.kubeconfig, &args).await;
    assert_eq!(code, 0, "{err}");
    let (codes, v) = w.held("node-0000").await;
    assert_eq!(codes, ["paused"]);
    let m = message(&v, "paused");
    assert!(
        m.contains("alice") && m.contains("change freeze") && m.contains("`rollboot resume`"),
        "{m}"
    );
    assert!(reason(&v, "paused")["since"].is_string(), "{v:#}");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_held_by_other_names_the_holder() {
    let w = World::start(1, "").await;
    w.flag("node-0000", FLAG_1).await;
    w.lock("kured-node-7", &[]).await;
    let (codes, v) = w.held("node-0000").await;
    assert_eq!(codes, ["lockHeldByOther"]);
    assert!(message(&v, "lockHeldByOther").contains("`kured-node-7`"));
    assert!(reason(&v, "lockHeldByOther")["since"].is_string(), "{v:#}");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_nodes_reached_names_the_nodes_in_the_slots() {
    let w = World::start(3, "concurrency: {maxNodes: 1}").await;
    w.flag("node-0001", FLAG_1).await;
    w.flag("node-0002", FLAG_2).await;
    let (codes, v) = w.held("node-0002").await;
    assert_eq!(codes, ["maxNodesReached"]);
    assert!(message(&v, "maxNodesReached").contains("node-0001 (ahead of it in order)"));
    // Once node-0001 is in flight, it holds the slot.
    let ours = rollboot::lock::lock_owner(&w.h.config);
    w.lock(&ours, &[("node-0001", entry(Utc::now()))]).await;
    let (codes, v) = w.held("node-0002").await;
    assert_eq!(codes, ["maxNodesReached"]);
    assert!(
        message(&v, "maxNodesReached").contains("node-0001 (in flight"),
        "{v:#}"
    );
    assert!(
        v["startsAt"].is_string(),
        "plan predicts when the slot frees: {v:#}"
    );
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_full_names_the_group() {
    let w = World::start(
        2,
        "concurrency: {maxNodes: 2, groupBy: zone, maxNodesPerGroup: 1}",
    )
    .await;
    for (n, at) in [("node-0000", FLAG_1), ("node-0001", FLAG_2)] {
        w.patch(
            n,
            json!({"metadata": {"labels": {"zone": "eu-1"},
                "annotations": {proto::REBOOT_REQUIRED: at}}}),
        )
        .await;
    }
    let (codes, v) = w.held("node-0001").await;
    assert_eq!(codes, ["groupFull"]);
    let m = message(&v, "groupFull");
    assert!(m.contains("zone=eu-1") && m.contains("node-0000"), "{m}");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_names_the_blocking_pod() {
    let w = World::start(1, "blockers: {podSelectors: ['app=backup']}").await;
    namespace(&w.h, "jobs").await;
    pod(&w.h, "jobs", "nightly-backup", "node-0000", "backup").await;
    w.flag("node-0000", FLAG_1).await;
    let (codes, v) = w.held("node-0000").await;
    assert_eq!(codes, ["blocked"]);
    let m = message(&v, "blocked");
    assert!(
        m.contains("jobs/nightly-backup") && m.contains("`app=backup`"),
        "{m}"
    );
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resting_until_says_until_when() {
    let w = World::start(1, "nodes: {minRebootInterval: 1d}").await;
    let last = Utc::now() - TimeDelta::hours(1);
    w.patch(
        "node-0000",
        json!({"metadata": {"annotations": {proto::REBOOT_REQUIRED: FLAG_1,
            proto::LAST_REBOOT: instant(last)}}}),
    )
    .await;
    let (codes, v) = w.held("node-0000").await;
    assert_eq!(codes, ["restingUntil"]);
    let until = reason(&v, "restingUntil")["until"].as_str().unwrap();
    let until = chrono::DateTime::parse_from_rfc3339(until)
        .unwrap()
        .to_utc();
    assert!(
        (until - (last + TimeDelta::days(1))).abs() < TimeDelta::seconds(1),
        "{v:#}"
    );
    assert_eq!(
        v["startsAt"],
        reason(&v, "restingUntil")["until"],
        "plan waits for it"
    );
    w.shutdown().await;
}

/// A node that failed its drain, as the controller leaves it with `drain.whenBlocked:
/// quarantine`: failed, its reason, cordoned by rollboot, labelled quarantined.
async fn failed_node(w: &World, quarantined: bool) {
    let mut labels = serde_json::Map::new();
    if quarantined {
        labels.insert(proto::QUARANTINED.into(), "budget".into());
    }
    w.patch(
        "node-0000",
        json!({"metadata": {"labels": labels, "annotations": {
            proto::REBOOT_REQUIRED: FLAG_1,
            proto::STATE: "failed",
            proto::STATE_SINCE: instant(Utc::now() - TimeDelta::minutes(3)),
            proto::FAILURE_REASON: "the drain did not finish within 15m",
            proto::CORDONED_BY: "controller-0"}},
            "spec": {"unschedulable": true}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_says_the_reason_and_rollboot_retry() {
    let w = World::start(1, "failures: {maxFailures: 1}").await;
    failed_node(&w, false).await;
    let (codes, v) = w.held("node-0000").await;
    assert_eq!(codes, ["failed"]);
    let m = message(&v, "failed");
    assert!(
        m.contains("the drain did not finish within 15m")
            && m.contains("`rollboot retry node-0000`"),
        "{m}"
    );
    assert!(reason(&v, "failed")["since"].is_string());
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantined_says_the_cause() {
    let w = World::start(1, "failures: {maxFailures: 1}").await;
    failed_node(&w, true).await;
    let (codes, v) = w.held("node-0000").await;
    assert_eq!(codes, ["failed", "quarantined"]);
    assert!(message(&v, "quarantined").contains("(budget)"), "{v:#}");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passed_over_names_the_budget() {
    let w = World::start(2, "concurrency: {maxNodes: 1, passOverFor: 30m}").await;
    namespace(&w.h, "web").await;
    pod(&w.h, "web", "web-0", "node-0000", "web").await;
    budget_at_zero(&w.h, "web", "web").await;
    w.flag("node-0000", FLAG_1).await;
    w.flag("node-0001", FLAG_2).await;
    let (codes, v) = w.held("node-0000").await;
    assert_eq!(codes, ["passedOver"]);
    assert!(
        message(&v, "passedOver").contains("budget web/web allows 0"),
        "{v:#}"
    );
    assert!(reason(&v, "passedOver")["until"].is_string());
    let (code, v, _) = w.explain("node-0001").await;
    assert_eq!((code, &v["eligible"]), (0, &json!(true)), "{v:#}");
    w.shutdown().await;
}

/// node-0000 in flight since a minute ago, cordoned by rollboot, at `state` (with `extra`
/// annotations), as the controller writes it.
async fn in_flight(w: &World, state: &str, extra: Value) -> chrono::DateTime<Utc> {
    let since = chrono::SubsecRound::trunc_subsecs(Utc::now() - TimeDelta::minutes(1), 3);
    let mut ann = json!({proto::REBOOT_REQUIRED: FLAG_1, proto::STATE: state,
        proto::STATE_SINCE: instant(since), proto::CORDONED_BY: "controller-0"});
    ann.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    w.patch(
        "node-0000",
        json!({"metadata": {"annotations": ann}, "spec": {"unschedulable": true}}),
    )
    .await;
    let ours = rollboot::lock::lock_owner(&w.h.config);
    w.lock(&ours, &[("node-0000", entry(since))]).await;
    since
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_says_its_state_and_since_when_and_exits_0() {
    let w = World::start(1, "").await;
    let since = in_flight(&w, "draining", json!({})).await;
    let (code, v, err) = w.explain("node-0000").await;
    assert_eq!(code, 0, "{v:#}{err}");
    assert_eq!(codes(&v), ["inFlight"]);
    assert!(message(&v, "inFlight").contains("draining since"), "{v:#}");
    let at = reason(&v, "inFlight")["since"].as_str().unwrap();
    assert_eq!(
        chrono::DateTime::parse_from_rfc3339(at).unwrap().to_utc(),
        since
    );
    let (code, out, _) = w.run("node-0000", "text").await;
    assert_eq!(code, 0);
    assert!(out.starts_with("node node-0000: IN FLIGHT"), "{out}");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_hook_names_the_gate() {
    let w = World::start(
        1,
        "hooks: {beforeDrain: {gates: ['example.com/approved'], timeout: 1h}}",
    )
    .await;
    // The beforeDrain phase's record, as the controller begins it.
    let view = w.h.node("node-0000").await.unwrap();
    let since = chrono::SubsecRound::trunc_subsecs(Utc::now() - TimeDelta::minutes(1), 3);
    let begun = rollboot::hooks::decide::begin_patch(
        rollboot::config::Phase::BeforeDrain,
        &w.h.config,
        &view,
        since,
    );
    let hooks = begun["metadata"]["annotations"][proto::HOOKS].clone();
    in_flight(&w, "cordoning", json!({proto::HOOKS: hooks})).await;
    // The node-lifecycle controller's taint follows the cordon.
    for _ in 0..100 {
        if w.h.node("node-0000").await.unwrap().unschedulable_taint {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (code, v, err) = w.explain("node-0000").await;
    assert_eq!(code, 0, "{v:#}{err}");
    assert_eq!(codes(&v), ["inFlight", "waitingForHook"]);
    assert!(
        message(&v, "waitingForHook").contains("example.com/approved"),
        "{v:#}"
    );
    assert!(reason(&v, "waitingForHook")["until"].is_string());
    w.shutdown().await;
}

/// The controller's gauge of active blockers of `kind`, as its last pass saw them.
fn blockers_active(h: &Harness, kind: &str) -> Option<f64> {
    let series = format!("rollboot_blockers_active{{kind=\"{kind}\"}} ");
    h.metrics[0]
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
}

/// What explain says and what the real controller then does agree: while a pod blocks, every
/// node is `blocked` and the controller's pass starts none, its gauge naming the same blocker;
/// once it is gone, the nodes explain calls eligible are exactly those the controller starts,
/// the one it says is passed over gets the controller's passed-over record for the same budget,
/// and those held for a group or the slots stay out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_agrees_with_what_the_controller_then_does() {
    let mut w = World::start(
        5,
        "concurrency: {maxNodes: 2, groupBy: zone, maxNodesPerGroup: 1, passOverFor: 30m}\n\
         blockers: {podSelectors: ['app=backup']}",
    )
    .await;
    namespace(&w.h, "app").await;
    pod(&w.h, "app", "web-2", "node-0002", "web").await;
    budget_at_zero(&w.h, "app", "web").await;
    pod(&w.h, "app", "backup", "node-0004", "backup").await;
    let zones = ["z1", "z1", "z2", "z3", "z4"];
    for (i, zone) in zones.iter().enumerate() {
        w.patch(
            &format!("node-{i:04}"),
            json!({"metadata": {"labels": {"zone": zone},
                "annotations": {proto::REBOOT_REQUIRED: format!("2026-01-0{}T00:00:00Z", i + 1)}}}),
        )
        .await;
    }
    let names: Vec<String> = (0..5).map(|i| format!("node-{i:04}")).collect();
    for n in &names {
        let (codes, _) = w.held(n).await;
        assert!(codes.contains(&"blocked".to_string()), "{n}: {codes:?}");
    }
    w.h.start_controller(0).await.unwrap();
    let t0 = std::time::Instant::now();
    while blockers_active(&w.h, "blocking_pods") != Some(1.0) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the controller never saw the pod"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        w.lock_now().await.entries.is_empty(),
        "started while blocked"
    );

    // The pod goes (pods are not watched: no pass until a Node changes).
    let pods = Api::<Pod>::namespaced(w.h.client.clone(), "app");
    pods.delete("backup", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    while pods.get_opt("backup").await.unwrap().is_some() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut eligible = BTreeSet::new();
    let mut said = Vec::new();
    for n in &names {
        let (code, v, err) = w.explain(n).await;
        assert!(code == 0 || code == 3, "{err}");
        if v["eligible"] == true {
            eligible.insert(n.clone());
        }
        said.push((n.clone(), codes(&v), v));
    }
    assert!(
        w.lock_now().await.entries.is_empty(),
        "the controller looked again before explain was done: no agreement shown"
    );
    assert_eq!(
        eligible,
        BTreeSet::from(["node-0000".to_string(), "node-0003".to_string()]),
        "{said:#?}"
    );
    assert_eq!(said[1].1, ["maxNodesReached", "groupFull"], "{said:#?}");
    assert_eq!(said[2].1, ["passedOver"], "{said:#?}");
    assert!(message(&said[2].2, "passedOver").contains("app/web"));
    assert_eq!(said[4].1, ["maxNodesReached"], "{said:#?}");
    // A Node change wakes a pass.
    w.patch("node-0004", json!({"metadata": {"labels": {"poke": "1"}}}))
        .await;
    let t1 = std::time::Instant::now();
    let passed_over = loop {
        let v = w.h.node("node-0002").await.unwrap();
        if let Some(p) = v.passed_over {
            break p;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(20),
            "the controller never passed node-0002 over"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(passed_over.budget, "app/web");
    let started: BTreeSet<String> = w.lock_now().await.entries.keys().cloned().collect();
    assert_eq!(
        started, eligible,
        "the controller started what explain called eligible"
    );

    // And now: the two in flight, the others held by them.
    for n in ["node-0000", "node-0003"] {
        let (code, v, _) = w.explain(n).await;
        assert_eq!((code, codes(&v)[0].as_str()), (0, "inFlight"), "{v:#}");
    }
    let (codes4, v) = w.held("node-0004").await;
    assert_eq!(codes4, ["maxNodesReached"]);
    let m = message(&v, "maxNodesReached");
    assert!(
        m.contains("node-0000 (in flight") && m.contains("node-0003 (in flight"),
        "{m}"
    );
    // With no slot free the pick looks at no node: no slot, whatever its budget says.
    let (codes2, _) = w.held("node-0002").await;
    assert_eq!(codes2, ["maxNodesReached"]);
    w.h.stop_controller(0).await;
    w.shutdown().await;
}
