//! `rollboot plan` against the simulated cluster: a world with every cause that blocks a rollout
//! or fails a drain, each named with its node and pod in the JSON; the predicted schedule of a
//! windowed config against openings computed by hand; the exit codes; and that it only reads.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rollboot::node as proto;
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};
use serde_json::{json, Value};

use crate::run as cli;
use cli::rollboot;

const IDENTITY: &str = "plan-cli";

/// A Prometheus stand-in on loopback whose `/api/v1/alerts` says `names` fire; its URL.
async fn prometheus_firing(names: &[&str]) -> String {
    let body = json!({"status": "success", "data": {"alerts": names.iter().map(|n|
        json!({"labels": {"alertname": n}, "state": "firing"})
    ).collect::<Vec<_>>()}})
    .to_string();
    let app = axum::Router::new().route(
        "/api/v1/alerts",
        axum::routing::get(move || std::future::ready(body.clone())),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A cluster of `nodes` nodes and no pods of its own; the test adds what it needs.
async fn start(nodes: usize, config: &str) -> (Harness, tempfile::TempDir, PathBuf, PathBuf) {
    let sc = Scenario::nodes_only(nodes);
    let h = Harness::start(sc, sim_config("").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    h.cluster.write_kubeconfig(&kubeconfig, IDENTITY).unwrap();
    let file = dir.path().join("rollboot.yaml");
    std::fs::write(&file, config).unwrap();
    (h, dir, kubeconfig, file)
}

async fn namespace(h: &Harness, name: &str) {
    let api: Api<Namespace> = Api::all(h.client.clone());
    let mut n = Namespace::default();
    n.metadata.name = Some(name.into());
    api.create(&PostParams::default(), &n).await.unwrap();
}

/// A pod bound to `node`, owned by a `owner` controller when given, with its grace period.
async fn pod(
    h: &Harness,
    ns: &str,
    name: &str,
    node: &str,
    owner: Option<&str>,
    labels: Value,
    extra_spec: Value,
) {
    let mut v = json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    });
    if let Some(kind) = owner {
        v["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": kind, "name": format!("{name}-owner"),
            "uid": format!("00000000-0000-0000-0000-{:012}", name.len()), "controller": true,
        }]);
    }
    if let (Some(spec), Some(extra)) = (v["spec"].as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    let p: Pod = serde_json::from_value(v).unwrap();
    Api::<Pod>::namespaced(h.client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
}

async fn budget(h: &Harness, ns: &str, name: &str, app: &str, spec: Value) {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": app}});
    let b: PodDisruptionBudget =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    Api::<PodDisruptionBudget>::namespaced(h.client.clone(), ns)
        .create(&PostParams::default(), &b)
        .await
        .unwrap();
}

/// Waits until the budget's status says `key` is `want` (the simulated disruption controller
/// computes it once the pods have started).
async fn budget_settles(h: &Harness, ns: &str, name: &str, key: &str, want: i64) {
    let api: Api<PodDisruptionBudget> = Api::namespaced(h.client.clone(), ns);
    for _ in 0..200 {
        let b = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
        if b["status"][key].as_i64() == Some(want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("budget {ns}/{name}: status.{key} never became {want}");
}

async fn put_lease(h: &Harness, name: &str, holder: &str) {
    let api: Api<Lease> = Api::namespaced(h.client.clone(), "rollboot-system");
    let mut lease = Lease {
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(rollboot::time::micro(Utc::now())),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
        ..Default::default()
    };
    lease.metadata.name = Some(name.into());
    api.create(&PostParams::default(), &lease).await.unwrap();
}

fn flag_at(t: &str) -> Value {
    json!({"metadata": {"annotations": {proto::REBOOT_REQUIRED: t}}})
}

/// Every request the plan command made was a get or a list.
fn assert_read_only(h: &Harness) {
    let mine: Vec<_> = h
        .cluster
        .stats()
        .requests
        .into_iter()
        .filter(|(k, _)| k.identity == IDENTITY)
        .collect();
    assert!(!mine.is_empty(), "plan made no request at all");
    let verbs: std::collections::BTreeSet<&str> =
        mine.iter().map(|(k, _)| k.verb.as_str()).collect();
    assert!(
        verbs.iter().all(|v| *v == "get" || *v == "list"),
        "plan did more than read: {mine:?}"
    );
    assert!(verbs.contains("list"), "{mine:?}");
}

/// A Prometheus out of reach from where plan runs (an in-cluster address, say) is a warning
/// that says how to ask it anyway, not a blocker; `--prometheus-url` asks another address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_out_of_reach_warns_and_prometheus_url_asks_elsewhere() {
    let config = "blockers:\n  prometheus:\n    url: http://127.0.0.1:9\n";
    let (h, _dir, kubeconfig, file) = start(2, config).await;
    h.patch_node("node-0000", flag_at("2026-01-01T00:00:00Z"))
        .await
        .unwrap();
    let plan = |extra: Vec<String>| {
        let mut args = vec![
            "plan".to_string(),
            "--config".into(),
            file.to_str().unwrap().into(),
            "--output".into(),
            "json".into(),
        ];
        args.extend(extra);
        let kubeconfig = kubeconfig.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            rollboot(&kubeconfig, &args).await
        }
    };
    let (code, out, err) = plan(vec![]).await;
    assert_eq!(code, 0, "{out}{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["problems"][0]["kind"], "alertsUnknown", "{doc}");
    assert_eq!(doc["problems"][0]["severity"], "warns");
    let msg = doc["problems"][0]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Prometheus at http://127.0.0.1:9 could not be asked from here")
            && msg.contains("--prometheus-url"),
        "{msg}"
    );
    let firing = prometheus_firing(&["EtcdDown"]).await;
    let (code, out, err) = plan(vec!["--prometheus-url".into(), firing]).await;
    assert_eq!(code, 3, "{out}{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["problems"][0]["kind"], "alerts", "{doc}");
    assert_eq!(doc["rollout"]["assumesBlockersCleared"], true);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cause_that_would_block_the_rollout_or_fail_a_drain_is_named_with_node_and_pod() {
    let prometheus = prometheus_firing(&["NodeDown", "Watchdog"]).await;
    let config = format!("drain:\n  podSelector: 'app notin (side)'\nblockers:\n  podSelectors: ['backup=running']\n  prometheus:\n    url: {prometheus}\n    alertFilter: Watchdog\nnodes:\n  order: name\n");
    let (h, _dir, kubeconfig, file) = start(4, &config).await;
    for ns in ["plan-a", "plan-b"] {
        namespace(&h, ns).await;
    }
    // node-0000: an unreplicated pod and an emptyDir pod.
    h.patch_node("node-0000", flag_at("2026-01-01T00:00:00Z"))
        .await
        .unwrap();
    pod(
        &h,
        "plan-a",
        "bare",
        "node-0000",
        None,
        json!({"app": "bare"}),
        json!({}),
    )
    .await;
    pod(
        &h,
        "plan-a",
        "scratch",
        "node-0000",
        Some("ReplicaSet"),
        json!({"app": "scratch"}),
        json!({"volumes": [{"name": "tmp", "emptyDir": {}}]}),
    )
    .await;
    // node-0001: budgets that never allow (minAvailable = pods; maxUnavailable 0), two budgets
    // over one pod, a budget that allows none now, a pod outside drain.podSelector.
    h.patch_node("node-0001", flag_at("2026-01-01T00:00:01Z"))
        .await
        .unwrap();
    for name in ["db-0", "db-1"] {
        pod(
            &h,
            "plan-a",
            name,
            "node-0001",
            Some("StatefulSet"),
            json!({"app": "db"}),
            json!({}),
        )
        .await;
    }
    budget(&h, "plan-a", "db", "db", json!({"minAvailable": 2})).await;
    pod(
        &h,
        "plan-a",
        "queue-0",
        "node-0001",
        Some("ReplicaSet"),
        json!({"app": "queue"}),
        json!({}),
    )
    .await;
    budget(&h, "plan-a", "queue", "queue", json!({"maxUnavailable": 0})).await;
    pod(
        &h,
        "plan-a",
        "both",
        "node-0001",
        Some("ReplicaSet"),
        json!({"app": "both"}),
        json!({}),
    )
    .await;
    budget(&h, "plan-a", "both-1", "both", json!({"minAvailable": 0})).await;
    budget(&h, "plan-a", "both-2", "both", json!({"minAvailable": 0})).await;
    // `frozen` selects three pods and needs two: one is Pending on a node that does not exist,
    // so it allows no disruption now, though it could.
    pod(
        &h,
        "plan-b",
        "frozen-0",
        "node-0001",
        Some("ReplicaSet"),
        json!({"app": "frozen"}),
        json!({}),
    )
    .await;
    pod(
        &h,
        "plan-b",
        "frozen-1",
        "node-0003",
        Some("ReplicaSet"),
        json!({"app": "frozen"}),
        json!({}),
    )
    .await;
    pod(
        &h,
        "plan-b",
        "frozen-2",
        "nowhere",
        Some("ReplicaSet"),
        json!({"app": "frozen"}),
        json!({}),
    )
    .await;
    budget(&h, "plan-b", "frozen", "frozen", json!({"minAvailable": 2})).await;
    pod(
        &h,
        "plan-b",
        "side",
        "node-0001",
        Some("ReplicaSet"),
        json!({"app": "side"}),
        json!({}),
    )
    .await;
    // Cluster-wide: node-0002 not Ready, node-0003 failed, a pod matching the blocking
    // selector, and the lock held by someone else.
    let nodes: Api<Node> = Api::all(h.client.clone());
    nodes
        .patch_status(
            "node-0002",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}})),
        )
        .await
        .unwrap();
    h.patch_node(
        "node-0003",
        json!({"metadata": {"annotations": {proto::STATE: "failed", proto::FAILURE_REASON: "drain timed out"}}}),
    )
    .await
    .unwrap();
    pod(
        &h,
        "plan-b",
        "backup",
        "node-0003",
        Some("Job"),
        json!({"backup": "running"}),
        json!({}),
    )
    .await;
    put_lease(&h, "rollboot-lock", "ops-team").await;
    budget_settles(&h, "plan-b", "frozen", "currentHealthy", 2).await;
    budget_settles(&h, "plan-a", "db", "currentHealthy", 2).await;
    assert!(
        !h.node("node-0002").await.unwrap().ready,
        "node-0002 stays NotReady"
    );

    let (code, out, err) = rollboot(
        &kubeconfig,
        &[
            "plan",
            "--config",
            file.to_str().unwrap(),
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(code, 3, "{out}{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["proceeds"], false);
    assert_eq!(doc["all"], false);

    let problems = doc["problems"].as_array().unwrap();
    let find = |kind: &str, pod: Option<&str>| {
        problems
            .iter()
            .find(|p| p["kind"] == kind && pod.is_none_or(|x| p["pod"] == x))
            .unwrap_or_else(|| panic!("no {kind} {pod:?} in {problems:#?}"))
    };
    let check = |kind: &str, severity: &str, node: &str, pod: &str, budgets: Value| {
        let p = find(kind, Some(pod));
        assert_eq!(p["severity"], severity, "{p}");
        assert_eq!(p["node"], node, "{p}");
        assert_eq!(p["budgets"], budgets, "{p}");
        let msg = p["message"].as_str().unwrap();
        assert!(msg.contains(node) && msg.contains(pod), "{msg}");
        msg.to_string()
    };
    let m = check(
        "unreplicated",
        "fails",
        "node-0000",
        "plan-a/bare",
        json!([]),
    );
    assert!(m.contains("drain.evictUnreplicated"), "{m}");
    let m = check(
        "emptyDir",
        "fails",
        "node-0000",
        "plan-a/scratch",
        json!([]),
    );
    assert!(m.contains("drain.deleteEmptyDirData"), "{m}");
    for pod in ["plan-a/db-0", "plan-a/db-1"] {
        let m = check(
            "budgetNeverAllows",
            "fails",
            "node-0001",
            pod,
            json!(["plan-a/db"]),
        );
        assert!(
            m.contains("minAvailable 2 is at or above the 2 pod(s)"),
            "{m}"
        );
    }
    let m = check(
        "budgetNeverAllows",
        "fails",
        "node-0001",
        "plan-a/queue-0",
        json!(["plan-a/queue"]),
    );
    assert!(m.contains("maxUnavailable is 0"), "{m}");
    let m = check(
        "overlappingBudgets",
        "fails",
        "node-0001",
        "plan-a/both",
        json!(["plan-a/both-1", "plan-a/both-2"]),
    );
    assert!(m.contains("answers 500"), "{m}");
    let m = check(
        "budgetAllowsNoneNow",
        "fails",
        "node-0001",
        "plan-b/frozen-0",
        json!(["plan-b/frozen"]),
    );
    assert!(m.contains("disruptionsAllowed 0"), "{m}");
    let m = check(
        "outsidePodSelector",
        "warns",
        "node-0001",
        "plan-b/side",
        json!([]),
    );
    assert!(m.contains("drain.podSelector"), "{m}");

    // The controller's own Prometheus query: NodeDown fires, Watchdog is filtered out.
    let alerts = find("alerts", None);
    assert_eq!(alerts["severity"], "blocks");
    assert_eq!(
        alerts["message"],
        "1 alert(s) firing in Prometheus: NodeDown"
    );
    let lock = find("lockHeld", None);
    assert_eq!(lock["severity"], "blocks");
    assert_eq!(lock["node"], Value::Null);
    assert!(lock["message"].as_str().unwrap().contains("`ops-team`"));
    let unready = find("unreadyNodes", None);
    assert_eq!(unready["nodes"], json!(["node-0002"]));
    let failed = find("failedNodes", None);
    assert_eq!(failed["nodes"], json!(["node-0003"]));
    let blocking = find("blockingPods", None);
    assert_eq!(blocking["pods"], json!(["plan-b/backup"]));
    assert!(blocking["message"]
        .as_str()
        .unwrap()
        .contains("backup=running"));
    assert_eq!(problems.len(), 13, "{problems:#?}");
    // Blockers first, then failures, then warnings.
    let severities: Vec<&str> = problems
        .iter()
        .map(|p| p["severity"].as_str().unwrap())
        .collect();
    let mut sorted = severities.clone();
    sorted.sort_by_key(|s| ["blocks", "fails", "warns"].iter().position(|x| x == s));
    assert_eq!(severities, sorted);

    let nodes = doc["nodes"].as_array().unwrap();
    let names: Vec<&str> = nodes.iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["node-0000", "node-0001"]);
    let n0 = &nodes[0];
    assert_eq!(n0["order"], 1);
    assert_eq!(n0["flagged"], true);
    assert_eq!(n0["outcome"], "fails");
    assert_eq!(
        n0["refuse"],
        json!([
            {"pod": "plan-a/bare", "reason": "unreplicated"},
            {"pod": "plan-a/scratch", "reason": "emptyDir"},
        ])
    );
    assert_eq!(n0["evict"], json!([]));
    assert_eq!(n0["estimate"]["drainSeconds"], 0);
    assert_eq!(n0["estimate"]["totalSeconds"], 0);
    // The first failure halts the rollout (maxFailures 0): node-0001 never starts.
    assert_eq!(nodes[1]["outcome"], "notStarted");
    assert_eq!(nodes[1]["start"], Value::Null);
    assert_eq!(doc["rollout"]["haltedBy"]["node"], "node-0000");
    assert_eq!(doc["rollout"]["assumesBlockersCleared"], true);
    let evict1: Vec<&str> = nodes[1]["evict"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pod"].as_str().unwrap())
        .collect();
    assert_eq!(
        evict1,
        [
            "plan-a/both",
            "plan-a/db-0",
            "plan-a/db-1",
            "plan-a/queue-0",
            "plan-b/frozen-0"
        ]
    );
    assert_eq!(
        nodes[1]["skip"],
        json!([{"pod": "plan-b/side", "reason": "outsidePodSelector"}])
    );
    assert_eq!(
        nodes[1]["estimate"]["drainSeconds"], 900,
        "a held budget: drain.timeout"
    );
    assert_eq!(nodes[1]["refuse"], json!([]));
    assert_eq!(doc["notChecked"], json!([]));

    // The text names the same things.
    let (code, text, err) =
        rollboot(&kubeconfig, &["plan", "--config", file.to_str().unwrap()]).await;
    assert_eq!(code, 3, "{err}");
    for needle in [
        "BLOCKS [lockHeld]",
        "FAILS [unreplicated] node node-0000: pod plan-a/bare",
        "FAILS [overlappingBudgets] node node-0001: pod plan-a/both",
        "[outsidePodSelector] node node-0001: pod plan-b/side",
        "halts:        node node-0000 fails",
        "BLOCKS [alerts] 1 alert(s) firing in Prometheus: NodeDown",
    ] {
        assert!(text.contains(needle), "`{needle}` missing:\n{text}");
    }

    assert_read_only(&h);
    h.shutdown().await;
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_schedule_starts_each_node_at_the_openings_computed_by_hand() {
    // A daily 02:00 UTC window of 1h, one node at a time.
    let config =
        "windows:\n  - schedule: '0 2 * * *'\n    duration: 1h\nconcurrency:\n  maxNodes: 1\n";
    let (h, _dir, kubeconfig, file) = start(3, config).await;
    namespace(&h, "plan-w").await;
    // Flag order (oldest first): node-0002, node-0000, node-0001.
    for (node, flagged) in [
        ("node-0002", "2026-03-01T00:00:00Z"),
        ("node-0000", "2026-03-02T00:00:00Z"),
        ("node-0001", "2026-03-03T00:00:00Z"),
    ] {
        h.patch_node(node, flag_at(flagged)).await.unwrap();
        // Each node's drain: the longest grace period, 60 s (the 10 s pod does not count).
        pod(
            &h,
            "plan-w",
            &format!("slow-{node}"),
            node,
            Some("ReplicaSet"),
            json!({"app": "w"}),
            json!({"terminationGracePeriodSeconds": 60}),
        )
        .await;
        pod(
            &h,
            "plan-w",
            &format!("fast-{node}"),
            node,
            Some("ReplicaSet"),
            json!({"app": "w"}),
            json!({"terminationGracePeriodSeconds": 10}),
        )
        .await;
    }
    // Per node: 60 s + 30 m reboot + 2 m gate = 33 m.
    let per_node = TimeDelta::minutes(33);
    let now = at("2026-03-10T12:00:00Z");
    let (code, out, err) = rollboot(
        &kubeconfig,
        &[
            "plan",
            "--config",
            file.to_str().unwrap(),
            "--output",
            "json",
            "--at",
            &rfc(now),
            "--reboot-time",
            "30m",
            "--gate-time",
            "2m",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["proceeds"], true);
    assert_eq!(doc["problems"], json!([]));
    assert_eq!(doc["estimate"]["rebootSeconds"], 1800);
    assert_eq!(doc["estimate"]["gateSeconds"], 120);
    assert_eq!(doc["estimate"]["drainTimeoutSeconds"], 900);

    // By hand: the next opening after 2026-03-10 12:00 is 2026-03-11 02:00-03:00. The first
    // node starts at 02:00, the second when the first ends (02:33); the third's turn comes at
    // 03:06, after the window closed, so it waits for 2026-03-12 02:00.
    let day1 = at("2026-03-11T02:00:00Z");
    let day2 = at("2026-03-12T02:00:00Z");
    let want = [
        ("node-0002", day1, day1, false),
        ("node-0000", day1 + per_node, day1, true),
        ("node-0001", day2, day2, false),
    ];
    let nodes = doc["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for (i, (name, start, opening, overruns)) in want.iter().enumerate() {
        let n = &nodes[i];
        assert_eq!(n["name"], *name, "{n}");
        assert_eq!(n["order"], i + 1);
        assert_eq!(n["start"], rfc(*start), "{n}");
        assert_eq!(n["end"], rfc(*start + per_node), "{n}");
        assert_eq!(n["window"]["start"], rfc(*opening), "{n}");
        assert_eq!(
            n["window"]["end"],
            rfc(*opening + TimeDelta::hours(1)),
            "{n}"
        );
        assert_eq!(n["window"]["index"], 0);
        assert_eq!(n["overrunsWindow"], *overruns, "{n}");
        assert_eq!(n["outcome"], "reboots");
        let e = &n["estimate"];
        assert_eq!(e["drainSeconds"], 60);
        assert_eq!(e["rebootSeconds"], 1800);
        assert_eq!(e["gateSeconds"], 120);
        assert_eq!(e["totalSeconds"], 33 * 60);
        assert!(
            e["drainBasis"]
                .as_str()
                .unwrap()
                .contains(&format!("plan-w/slow-{name}")),
            "{e}"
        );
        assert_eq!(n["evict"].as_array().unwrap().len(), 2);
    }
    assert_eq!(doc["rollout"]["start"], rfc(day1));
    assert_eq!(doc["rollout"]["end"], rfc(day2 + per_node));
    assert_eq!(
        doc["rollout"]["makespanSeconds"],
        (day2 + per_node - now).num_seconds()
    );
    assert_eq!(doc["rollout"]["haltedBy"], Value::Null);

    let (code, text, err) = rollboot(
        &kubeconfig,
        &[
            "plan",
            "--config",
            file.to_str().unwrap(),
            "--at",
            &rfc(now),
            "--reboot-time",
            "30m",
            "--gate-time",
            "2m",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("the rollout would PROCEED"), "{text}");
    assert!(
        text.contains(&format!(
            "rollout:      starts {}, ends {}",
            rfc(day1),
            rfc(day2 + per_node)
        )),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("2  node-0000"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.ends_with("reboots, runs past its window"), "{row}");
    assert_read_only(&h);
    h.shutdown().await;
}

#[tokio::test]
async fn an_unreachable_cluster_exits_1_naming_the_server_and_an_invalid_config_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cli::unreachable_kubeconfig(dir.path());
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "{}\n").unwrap();
    let (code, out, err) =
        rollboot(&kubeconfig, &["plan", "--config", good.to_str().unwrap()]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("http://127.0.0.1:9"),
        "names the API server: {err}"
    );
    assert!(
        err.contains("cannot read Lease rollboot-system/rollboot-leader"),
        "names the object: {err}"
    );

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "drain:\n  timeout: 5m\nfailures:\n  maxFailures: -1\n",
    )
    .unwrap();
    let (code, out, err) =
        rollboot(&kubeconfig, &["plan", "--config", bad.to_str().unwrap()]).await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("bad.yaml"), "names the file: {err}");
    assert!(
        err.contains("4:16: failures.maxFailures"),
        "names the line and key: {err}"
    );
}
