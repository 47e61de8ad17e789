//! `rollboot status` against the simulated cluster: nodes in every state, the two Leases, the
//! fields a script reads, the lines a person reads, the exit codes, and that it only reads.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, PostParams};
use rollboot::lock::{LockEntry, IN_FLIGHT};
use rollboot::node::{self as proto, NodeState};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};
use serde_json::{json, Value};

use crate::run as cli;
use cli::rollboot;

const IDENTITY: &str = "status-cli";

fn instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

async fn put_lease(h: &Harness, name: &str, lease: Lease) {
    let api: Api<Lease> = Api::namespaced(h.client.clone(), "rollboot-system");
    let mut lease = lease;
    lease.metadata.name = Some(name.into());
    api.create(&PostParams::default(), &lease).await.unwrap();
}

fn lease(
    holder: &str,
    renewed: DateTime<Utc>,
    in_flight: Option<&BTreeMap<String, LockEntry>>,
) -> Lease {
    let mut l = Lease {
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(rollboot::time::micro(renewed)),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
        ..Default::default()
    };
    if let Some(e) = in_flight {
        l.metadata.annotations = Some(BTreeMap::from([(
            IN_FLIGHT.to_string(),
            serde_json::to_string(e).unwrap(),
        )]));
    }
    l
}

/// Seven nodes: flagged by the agent, draining (cordoned by rollboot), failed with a reason,
/// excluded, requested and cordoned by an operator, done, and one untouched.
async fn world(h: &Harness, now: DateTime<Utc>) {
    let since = instant(now - TimeDelta::minutes(5));
    let flag = instant(now - TimeDelta::hours(1));
    let patches = [
        (
            "node-0000",
            json!({"metadata": {"annotations": {
                proto::REBOOT_REQUIRED: flag,
                proto::REBOOT_REQUIRED_REASON: "/var/run/reboot-required"}}}),
        ),
        (
            "node-0001",
            json!({"metadata": {"annotations": {
                proto::REBOOT_REQUIRED: flag,
                proto::STATE: "draining", proto::STATE_SINCE: since,
                proto::CORDONED_BY: "controller-0"}},
                "spec": {"unschedulable": true}}),
        ),
        (
            "node-0002",
            json!({"metadata": {"annotations": {
                proto::STATE: "failed", proto::STATE_SINCE: since,
                proto::FAILURE_REASON: "drain timed out after 15m",
                proto::CORDONED_BY: "controller-0"}},
                "spec": {"unschedulable": true}}),
        ),
        (
            "node-0003",
            json!({"metadata": {"labels": {proto::EXCLUDE: "true"},
                "annotations": {proto::REBOOT_REQUESTED: flag}}}),
        ),
        (
            "node-0004",
            json!({"metadata": {"annotations": {proto::REBOOT_REQUESTED: flag}},
                "spec": {"unschedulable": true}}),
        ),
        (
            "node-0005",
            json!({"metadata": {"annotations": {proto::STATE: "done", proto::STATE_SINCE: since}}}),
        ),
    ];
    for (name, p) in patches {
        h.patch_node(name, p).await.unwrap();
    }
}

fn in_flight(now: DateTime<Utc>) -> BTreeMap<String, LockEntry> {
    BTreeMap::from([(
        "node-0001".to_string(),
        LockEntry {
            // As the controller writes it: the entry keeps this state while the Node moves on.
            state: NodeState::Cordoning,
            since: now - TimeDelta::minutes(6),
            leader: "controller-0".into(),
            group: None,
        },
    )])
}

async fn start(
    config: &str,
) -> (
    Harness,
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let sc = Scenario {
        nodes: 7,
        pods_per_node: 1,
        ..Scenario::default()
    };
    let h = Harness::start(sc, sim_config("").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    h.cluster.write_kubeconfig(&kubeconfig, IDENTITY).unwrap();
    let file = dir.path().join("rollboot.yaml");
    std::fs::write(&file, config).unwrap();
    (h, dir, kubeconfig, file)
}

/// Every request the status command made was a get or a list.
fn assert_read_only(h: &Harness) {
    let mine: Vec<_> = h
        .cluster
        .stats()
        .requests
        .into_iter()
        .filter(|(k, _)| k.identity == IDENTITY)
        .collect();
    assert!(!mine.is_empty(), "status made no request at all");
    let writes: Vec<_> = mine
        .iter()
        .filter(|(k, _)| k.verb != "get" && k.verb != "list")
        .collect();
    assert!(writes.is_empty(), "status wrote: {writes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_reports_the_leader_the_lock_and_every_node_that_matters() {
    let (h, _dir, kubeconfig, file) = start("failures:\n  maxFailures: 0\n").await;
    let now = Utc::now();
    world(&h, now).await;
    put_lease(&h, "rollboot-leader", lease("controller-1", now, None)).await;
    let ours = rollboot::lock::lock_owner(&h.config);
    put_lease(
        &h,
        "rollboot-lock",
        lease(&ours, now, Some(&in_flight(now))),
    )
    .await;

    let (code, out, err) = rollboot(
        &kubeconfig,
        &[
            "status",
            "--config",
            file.to_str().unwrap(),
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();

    assert_eq!(doc["leader"]["lease"], "rollboot-system/rollboot-leader");
    assert_eq!(doc["leader"]["holder"], "controller-1");
    assert_eq!(doc["leader"]["expired"], false);
    assert_eq!(doc["leader"]["leaseDurationSeconds"], 15);

    assert_eq!(doc["lock"]["holder"], ours.as_str());
    assert_eq!(doc["lock"]["foreign"], false);
    let lock_nodes = doc["lock"]["inFlight"].as_array().unwrap();
    assert_eq!(lock_nodes.len(), 1);
    assert_eq!(lock_nodes[0]["node"], "node-0001");
    // The Node's own state and since, not the lock entry's `cordoning` (a real run showed
    // "cordoning since 10:57:40" for a node that was draining).
    assert_eq!(lock_nodes[0]["state"], "draining");
    let at = |v: &Value| {
        DateTime::parse_from_rfc3339(v.as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{v}: {e}"))
            .to_utc()
    };
    let close = |a: DateTime<Utc>, b: DateTime<Utc>| (a - b).abs() < TimeDelta::milliseconds(1);
    assert!(close(
        at(&lock_nodes[0]["since"]),
        now - TimeDelta::minutes(5)
    ));
    assert!(close(
        at(&lock_nodes[0]["started"]),
        now - TimeDelta::minutes(6)
    ));
    assert_eq!(lock_nodes[0]["leader"], "controller-0");

    let nodes: BTreeMap<String, Value> = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap().to_string(), n.clone()))
        .collect();
    assert_eq!(
        nodes.keys().collect::<Vec<_>>(),
        [
            "node-0000",
            "node-0001",
            "node-0002",
            "node-0003",
            "node-0004"
        ],
        "done and untouched nodes are not listed"
    );
    let n = &nodes["node-0000"];
    assert_eq!(n["state"], Value::Null);
    assert_eq!(n["flagged"], true);
    assert_eq!(n["flagReason"], "/var/run/reboot-required");
    assert_eq!(n["cordonedBy"], Value::Null);
    let n = &nodes["node-0001"];
    assert_eq!(n["state"], "draining");
    assert!(n["stateSince"].is_string());
    assert_eq!(n["cordonedBy"], "rollboot");
    assert_eq!(n["cordonedByIdentity"], "controller-0");
    assert_eq!(n["inLock"], true);
    let n = &nodes["node-0002"];
    assert_eq!(n["state"], "failed");
    assert_eq!(n["failureReason"], "drain timed out after 15m");
    assert_eq!(n["flagged"], false);
    let n = &nodes["node-0003"];
    assert_eq!(n["excluded"], true);
    assert_eq!(n["flagReason"], "requested");
    let n = &nodes["node-0004"];
    assert_eq!(n["cordonedBy"], "operator");
    assert_eq!(n["cordoned"], true);

    let c = &doc["counts"];
    assert_eq!(c["nodes"], 7);
    assert_eq!(c["flagged"], 4);
    assert_eq!(c["inFlight"], 1);
    assert_eq!(c["done"], 1);
    assert_eq!(c["failed"], 1);
    assert_eq!(c["excluded"], 1);

    assert_eq!(doc["maintenance"]["allowedNow"], true);
    assert_eq!(doc["failures"]["failed"], json!(["node-0002"]));
    assert_eq!(doc["failures"]["maxFailures"], 0);
    assert_eq!(doc["failures"]["halted"], true);
    assert!(
        doc["blockers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b.as_str().unwrap().contains("failed node")),
        "{}",
        doc["blockers"]
    );

    assert_read_only(&h);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_lock_holder_an_expired_leader_and_a_blackout_read_as_such() {
    let now = Utc::now();
    let until = (now + TimeDelta::hours(2)).to_rfc3339_opts(SecondsFormat::Secs, true);
    let config = format!(
        "blackouts:\n  - from: {}\n    to: {until}\nfailures:\n  maxFailures: 1\n",
        (now - TimeDelta::hours(1)).to_rfc3339_opts(SecondsFormat::Secs, true)
    );
    let (h, _dir, kubeconfig, file) = start(&config).await;
    world(&h, now).await;
    let stale = now - TimeDelta::minutes(10);
    put_lease(&h, "rollboot-leader", lease("controller-0", stale, None)).await;
    put_lease(
        &h,
        "rollboot-lock",
        lease("ops-team", now, Some(&in_flight(now))),
    )
    .await;
    let config = file.to_str().unwrap();

    let (code, out, err) = rollboot(
        &kubeconfig,
        &["status", "--config", config, "--output", "json"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["leader"]["holder"], "controller-0");
    assert_eq!(doc["leader"]["expired"], true);
    assert_eq!(doc["lock"]["holder"], "ops-team");
    assert_eq!(doc["lock"]["foreign"], true);
    assert_eq!(doc["lock"]["inFlight"][0]["node"], "node-0001");
    assert_eq!(doc["maintenance"]["allowedNow"], false);
    assert_eq!(doc["maintenance"]["nextOpening"]["start"], until);
    assert_eq!(doc["failures"]["halted"], false);
    let blockers: Vec<&str> = doc["blockers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap())
        .collect();
    assert!(
        blockers.iter().any(|b| b.contains("held by `ops-team`")),
        "{blockers:?}"
    );
    assert!(
        blockers.iter().any(|b| b.contains("no maintenance window")),
        "{blockers:?}"
    );

    let (code, out, err) = rollboot(&kubeconfig, &["status", "--config", config]).await;
    assert_eq!(code, 0, "{err}");
    let line = |prefix: &str| {
        out.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line `{prefix}`:\n{out}"))
            .to_string()
    };
    let row = |node: &str| {
        line(node)
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert!(line("leader:").contains("controller-0"), "{out}");
    assert!(line("leader:").contains("EXPIRED"), "{out}");
    assert!(
        line("lock:").contains("held by `ops-team`, not rollboot: PAUSED"),
        "{out}"
    );
    assert!(line("in flight:").contains("1 node(s)"), "{out}");
    let in_flight = line("  node-0001  draining  since");
    assert!(
        in_flight.contains("started ") && in_flight.ends_with(" by controller-0"),
        "{out}"
    );
    assert!(
        line("maintenance:").contains(&format!("not allowed now; next opening {until}")),
        "{out}"
    );
    assert_eq!(
        line("failures:"),
        "failures:     1 failed node(s), 1 tolerated"
    );
    assert_eq!(
        line("nodes:"),
        "nodes:        4 flagged, 1 in flight, 1 done, 1 failed, 1 excluded (of 7)"
    );
    assert!(
        line("NODE")
            .split_whitespace()
            .eq(["NODE", "STATE", "SINCE", "FLAGGED", "CORDONED", "NOTE"]),
        "{out}"
    );
    assert_eq!(row("node-0000")[1..2], ["-"]);
    assert_eq!(row("node-0000")[3], "/var/run/reboot-required");
    assert_eq!(row("node-0001")[1], "draining");
    assert_eq!(row("node-0001")[4], "rollboot");
    assert!(
        line("node-0002").ends_with("failure: drain timed out after 15m"),
        "{out}"
    );
    assert_eq!(row("node-0002")[1], "failed");
    assert!(line("node-0003").contains("excluded"), "{out}");
    assert_eq!(row("node-0004")[3..5], ["requested", "operator"]);
    assert!(
        !out.contains("node-0005") && !out.contains("node-0006"),
        "{out}"
    );

    assert_read_only(&h);
    h.shutdown().await;
}

#[tokio::test]
async fn an_unreachable_cluster_exits_1_naming_the_server_and_an_invalid_config_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cli::unreachable_kubeconfig(dir.path());
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "failures:\n  maxFailures: 0\n").unwrap();
    let (code, out, err) =
        rollboot(&kubeconfig, &["status", "--config", good.to_str().unwrap()]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("http://127.0.0.1:9"),
        "names the API server: {err}"
    );
    assert!(
        err.contains("Lease rollboot-system/rollboot-leader"),
        "names the object: {err}"
    );

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "failures:\n  maxFailures: -1\n").unwrap();
    let (code, _, err) =
        rollboot(&kubeconfig, &["status", "--config", bad.to_str().unwrap()]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.yaml"), "{err}");
}
