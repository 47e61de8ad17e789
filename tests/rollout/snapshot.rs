//! `rollboot simulate --from-cluster` / `--snapshot FILE`: a snapshot taken from one simulated
//! cluster (budgets, an unreplicated pod, a StatefulSet, a DaemonSet, a mirror pod), read with
//! gets and lists only, and rehearsed on another simulated cluster with the user's config as
//! written (durations scaled); and the config part of every `simulate` report.

use std::path::Path;
use std::process::Command;

use rollboot_sim::sim::{Cluster, Scenario};
use serde_json::Value;

const IDENTITY: &str = "snapshot-cli";

/// Runs the binary (off the runtime's threads: the source cluster serves on them).
async fn rollboot(kubeconfig: Option<&Path>, args: &[&str]) -> (i32, Value, String) {
    let kubeconfig = kubeconfig.map(Path::to_path_buf);
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rollboot"));
        c.args(&args)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("RUST_LOG");
        match &kubeconfig {
            Some(k) => c.env("KUBECONFIG", k),
            None => c.env("KUBECONFIG", "/nonexistent"),
        };
        let out = c.output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        let v = serde_json::from_str(&stdout).unwrap_or(Value::Null);
        (out.status.code().unwrap(), v, stderr)
    })
    .await
    .unwrap()
}

/// The user's config: the defaults (no evictUnreplicated), nodes by name, a 6-minute drain
/// timeout (3.6 s at the time factor 0.01: room for a loaded machine), and a window the rehearsal cannot honour.
const USER_CONFIG: &str = "\
windows: [{schedule: '0 2 * * *', duration: 4h}]
nodes: {order: name}
drain: {timeout: 6m}
";

fn source() -> Scenario {
    // 3 nodes; 3 Deployments of 4 pods under budgets of maxUnavailable 1 (laid out round
    // robin, two pods of one Deployment share node-0000, so its drain waits on a budget); a
    // StatefulSet of 4; a DaemonSet; a mirror pod on node-0000; the unreplicated pod `bare-0`
    // on node-0002.
    Scenario {
        nodes: 3,
        pods_per_node: 4,
        replicas: 4,
        placement: rollboot_sim::sim::Placement::RoundRobin,
        pdb_share: 1.0,
        pdb_max_unavailable: 1,
        daemon_sets: 1,
        stateful_sets: 1,
        bare_pods: 1,
        empty_dir_pods: 0,
        mirror_pods: 1,
        ..Scenario::default()
    }
}

fn assert_rehearsal(v: &Value, stderr: &str) {
    assert_eq!(v["nodes"], 3, "{stderr}");
    assert_eq!(v["flagged"], 3);
    assert_eq!(v["snapshot"]["nodes"], 3);
    assert_eq!(
        v["failed"],
        serde_json::json!(["node-0002"]),
        "the node of the unreplicated pod fails its drain: {v:#}"
    );
    let reason = v["failures"][0]["reason"].as_str().unwrap();
    assert_eq!(v["failures"][0]["node"], "node-0002");
    assert!(
        reason.contains("default/bare-0") && reason.contains("evictUnreplicated"),
        "the failure names the pod and the setting: {reason}"
    );
    assert_eq!(v["rebootedOnce"], 2, "{v:#}");
    assert_eq!(v["pdbViolations"], 0);
    assert_eq!(v["rebootedTwice"], serde_json::json!([]));
    // The budget of the Deployment with two pods on node-0000 held that drain.
    let holds = v["budgetHolds"].as_array().unwrap();
    assert!(
        holds.iter().any(|h| h["podsHeld"].as_u64() >= Some(1)
            && h["longestSeconds"].as_f64() > Some(0.0)
            && h["stillHolding"] == serde_json::json!([])),
        "{holds:?}"
    );
    // The user's config as written, its durations scaled.
    let scaled = v["configScaled"].as_array().unwrap();
    let drain = scaled.iter().find(|r| r["key"] == "drain.timeout").unwrap();
    assert_eq!(
        (&drain["asWritten"], &drain["asRun"]),
        (&"6m".into(), &"3s600ms".into())
    );
    assert!(v["configIgnored"][0]
        .as_str()
        .unwrap()
        .starts_with("windows (`0 2 * * *` for 4h (UTC))"));
    // The makespan for real is the measured one divided by the time factor.
    let real = v["makespanRealSeconds"].as_f64().unwrap();
    let measured = v["makespanSeconds"].as_f64().unwrap();
    assert!((real - measured / 0.01).abs() < 1e-6, "{real} {measured}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_taken_read_only_and_rehearsed_elsewhere_names_the_failing_drain() {
    let cluster = Cluster::start(source()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig, IDENTITY).unwrap();
    let config = dir.path().join("rollboot.yaml");
    std::fs::write(&config, USER_CONFIG).unwrap();
    let snap = dir.path().join("snap.json");
    let common = [
        "--config",
        config.to_str().unwrap(),
        "--reboot-time",
        "10",
        "--time-factor",
        "0.01",
        "--report",
        "json",
    ];
    let mut args = vec![
        "simulate",
        "--from-cluster",
        "--snapshot-out",
        snap.to_str().unwrap(),
    ];
    args.extend(common);
    let (code, v, stderr) = rollboot(Some(&kubeconfig), &args).await;
    assert_eq!(
        code, 3,
        "a rehearsal that finds a failure exits 3: {stderr}"
    );
    assert_rehearsal(&v, &stderr);

    // Read-only: every request of the snapshot's identity was a list, of each kind it reads.
    let mine: Vec<_> = cluster
        .stats()
        .requests
        .into_iter()
        .filter(|(k, _)| k.identity == IDENTITY)
        .collect();
    let writes: Vec<_> = mine
        .iter()
        .filter(|(k, _)| k.verb != "get" && k.verb != "list")
        .collect();
    assert!(writes.is_empty(), "--from-cluster wrote: {writes:?}");
    let read: std::collections::BTreeSet<&str> =
        mine.iter().map(|(k, _)| k.resource.as_str()).collect();
    for r in [
        "nodes",
        "pods",
        "poddisruptionbudgets",
        "deployments",
        "replicasets",
        "statefulsets",
        "daemonsets",
    ] {
        assert!(read.contains(r), "{r} not read: {read:?}");
    }
    // Nothing of the source cluster changed: no node cordoned, no pod evicted.
    assert_eq!(cluster.invariants().reboots, 0);

    // The file holds what the rollout depends on.
    let file: Value = serde_json::from_slice(&std::fs::read(&snap).unwrap()).unwrap();
    assert_eq!(file["format"], "rollboot.dev/snapshot/v1");
    assert_eq!(file["statefulSets"].as_array().unwrap().len(), 1);
    assert_eq!(file["daemonSets"].as_array().unwrap().len(), 1);
    assert_eq!(file["budgets"].as_array().unwrap().len(), 3);
    let pods = file["pods"].as_array().unwrap();
    assert_eq!(pods.len(), cluster.world().pod_count());
    let bare = pods.iter().find(|p| p["name"] == "bare-0").unwrap();
    assert_eq!(
        (&bare["owner"], &bare["nodeName"]),
        (&Value::Null, &"node-0002".into())
    );
    assert!(pods.iter().any(|p| p["mirror"] == true));
    cluster.shutdown().await;

    // The same snapshot rehearsed from the file, with no cluster at all.
    let mut args = vec!["simulate", "--snapshot", snap.to_str().unwrap()];
    args.extend(common);
    let (code, v, stderr) = rollboot(None, &args).await;
    assert_eq!(code, 3, "{stderr}");
    assert_rehearsal(&v, &stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_snapshot_file_is_named_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"format": "rollboot.dev/snapshot/v1", "takenAt": "", "source": "x",
            "nodes": [{"name": "n1", "ready": true}],
            "pods": [{"namespace": "a", "name": "p", "uid": "u", "nodeName": "n2",
                      "phase": "Running", "ready": true, "graceSeconds": 30}],
            "budgets": []}"#,
    )
    .unwrap();
    let (code, _, stderr) =
        rollboot(None, &["simulate", "--snapshot", bad.to_str().unwrap()]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "snapshot {}: pod a/p runs on node n2, which is not in the snapshot",
            bad.display()
        )),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_says_which_config_ran_and_what_was_scaled() {
    let (code, v, stderr) = rollboot(
        None,
        &[
            "simulate",
            "--nodes",
            "1",
            "--pods-per-node",
            "1",
            "--report",
            "json",
        ],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(v["config"]["source"]
        .as_str()
        .unwrap()
        .starts_with("built-in simulation config (no --config)"));
    assert!(v["config"]["builtIn"]
        .as_str()
        .unwrap()
        .contains("evictUnreplicated: true"));
    assert!(v.get("configScaled").is_none());

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rollboot.yaml");
    // Unreplicated and emptyDir pods may go: the generated world has both.
    std::fs::write(
        &config,
        "drain: {evictUnreplicated: true, deleteEmptyDirData: true}\n",
    )
    .unwrap();
    let (code, v, stderr) = rollboot(
        None,
        &[
            "simulate",
            "--nodes",
            "1",
            "--pods-per-node",
            "1",
            "--config",
            config.to_str().unwrap(),
            "--report",
            "json",
        ],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let scaled = v["configScaled"].as_array().unwrap();
    let row = |k: &str| scaled.iter().find(|r| r["key"] == k).unwrap().clone();
    assert_eq!(row("drain.timeout")["asRun"], "9s");
    assert_eq!(row("reboot.timeout")["asRun"], "9s");
    assert_eq!(row("leader.leaseDuration")["asRun"], "3s");
    assert!(row("leader.leaseDuration")["floor"]
        .as_str()
        .unwrap()
        .starts_with("floor 3s"));
    assert_eq!(v["configIgnored"], serde_json::json!([]));
}
