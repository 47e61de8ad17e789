//! One command line (issue 25): every subcommand's `--help` walked from `rollboot --help`, each
//! cluster subcommand offering `--kubeconfig` and `--context`, each report `-o`/`--output`,
//! each `--config` (but `migrate`, which writes one, and the offline ones, which print what the
//! binary knows: completions, man pages, the config's schema), and the operator's commands
//! without one, from the cluster's ConfigMap (`--config-map`); the exit codes docs/operating.md's
//! table gives (64 a usage error, 2 an invalid config, 3 refused, 1 a cluster error); and the
//! operator controls' JSON with the same keys in
//! every outcome, run against a simulated cluster named only by `--kubeconfig` and `--context`
//! (its file's current context points where nothing listens, and `KUBECONFIG` at no file).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::run as cli;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use rollboot_sim::sim::{Cluster, Scenario};
use serde_json::Value;

/// Subcommands that talk to a cluster.
const CLUSTER: &[&str] = &[
    "controller",
    "agent",
    "status",
    "plan",
    "explain",
    "simulate",
    "pause",
    "resume",
    "retry",
    "request",
];
/// Subcommands whose `--config` is optional: without it they read the controller's config from
/// the cluster's ConfigMap (`--config-map NAMESPACE/NAME`, default the controller's).
const FROM_CLUSTER: &[&str] = &[
    "status", "plan", "explain", "pause", "resume", "retry", "request",
];
/// Subcommands that print a report.
const REPORTS: &[&str] = &[
    "check-config",
    "status",
    "plan",
    "explain",
    "simulate",
    "pause",
    "resume",
    "retry",
    "request",
];
/// Subcommands that read neither a cluster nor a config: what they print comes from the binary
/// itself (completion scripts, man pages, the config's schema).
const OFFLINE: &[&str] = &["completions", "man", "config"];
/// The keys of every operator control's JSON, whatever its outcome.
const CONTROL_KEYS: &[&str] = &["command", "message", "notes", "object", "outcome"];

/// `KUBECONFIG` for every run: a file that does not exist, so only `--kubeconfig` names a
/// cluster.
const NO_KUBECONFIG: &str = "/nonexistent/kubeconfig";

/// Runs the binary with `KUBECONFIG` naming no file: (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    cli::rollboot_blocking(Path::new(NO_KUBECONFIG), args)
}

/// [`run`] off the runtime's threads (the simulated cluster serves on them).
async fn run_async(args: Vec<String>) -> (i32, String, String) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cli::rollboot(Path::new(NO_KUBECONFIG), &args).await
}

/// The subcommands `rollboot --help` lists.
fn subcommands() -> Vec<String> {
    let (code, out, err) = run(&["--help"]);
    assert_eq!(code, 0, "{err}");
    let mut in_list = false;
    let mut subs = Vec::new();
    for line in out.lines() {
        if line.starts_with("Commands:") {
            in_list = true;
            continue;
        }
        if in_list {
            let Some(name) = line
                .strip_prefix("  ")
                .and_then(|l| l.split_whitespace().next())
            else {
                break;
            };
            if name != "help" {
                subs.push(name.to_string());
            }
        }
    }
    subs
}

#[test]
fn every_subcommand_offers_the_same_options() {
    let subs = subcommands();
    for want in CLUSTER.iter().chain(REPORTS).chain(OFFLINE) {
        assert!(subs.iter().any(|s| s == want), "{want} not in {subs:?}");
    }
    for sub in &subs {
        let (code, help, err) = run(&[sub, "--help"]);
        assert_eq!(code, 0, "{sub} --help: {err}");
        if sub == "migrate" {
            // It writes a config rather than reading one; its tool's subcommand reports.
            let (code, help, err) = run(&["migrate", "kured", "--help"]);
            assert_eq!(code, 0, "{err}");
            assert!(
                help.contains("-o, --output <OUTPUT>") && help.contains("--flags"),
                "{help}"
            );
            continue;
        }
        if OFFLINE.contains(&sub.as_str()) {
            for opt in ["--config", "--kubeconfig", "--context"] {
                assert!(!help.contains(opt), "{sub} offers {opt}:\n{help}");
            }
            continue;
        }
        assert!(help.contains("--config"), "{sub} has no --config:\n{help}");
        let usage = help
            .lines()
            .find(|l| l.starts_with("Usage:"))
            .unwrap_or_default();
        if FROM_CLUSTER.contains(&sub.as_str()) {
            assert!(
                help.contains("--config <FILE>")
                    && help.contains("--config-map <NAMESPACE/NAME>")
                    && help.contains("[default: rollboot-system/rollboot-config]")
                    && !usage.contains("--config"),
                "{sub}: --config optional, else --config-map:\n{help}"
            );
        } else {
            assert!(
                !help.contains("--config-map"),
                "{sub} has --config-map: add it to FROM_CLUSTER\n{help}"
            );
        }
        if CLUSTER.contains(&sub.as_str()) {
            for opt in ["--kubeconfig <FILE>", "--context <NAME>"] {
                assert!(help.contains(opt), "{sub} has no {opt}:\n{help}");
            }
        }
        if REPORTS.contains(&sub.as_str()) {
            assert!(
                help.contains("-o, --output <OUTPUT>"),
                "{sub} has no -o/--output:\n{help}"
            );
        }
    }
    let (code, out, _) = run(&["--version"]);
    assert_eq!(
        (code, out.trim()),
        (0, concat!("rollboot ", env!("CARGO_PKG_VERSION")))
    );
}

#[test]
fn a_command_line_that_does_not_parse_exits_64_and_an_invalid_config_2() {
    for args in [
        &["status", "--no-such-option"][..],
        &["retry"],
        &["explain", "--config", "x.yaml"],
        &["check-config"],
        &["nonsense"],
        &[],
        &["plan", "--config", "x.yaml", "--output", "yaml"],
        &["completions"],
        &["completions", "tcsh"],
        &["config"],
        &["config", "nonsense"],
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(
            err.contains("--help") || err.contains("Usage"),
            "{args:?}: {err}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "drain:\n  timeout: soon\n").unwrap();
    let bad = bad.to_str().unwrap();
    for args in [
        &["check-config", bad][..],
        &["check-config", "--config", bad],
        &["status", "--config", bad],
        &["plan", "--config", bad],
        &["explain", "node-0000", "--config", bad],
        &["pause", "--config", bad],
        &["resume", "--config", bad],
        &["retry", "node-0000", "--config", bad],
        &["request", "node-0000", "--config", bad],
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("drain.timeout"), "{args:?}: {err}");
    }
}

/// A kubeconfig whose current context points where nothing listens and whose context `sim`
/// is `cluster`'s.
fn kubeconfig(cluster: &Cluster, dir: &Path) -> PathBuf {
    let path = dir.join("kubeconfig");
    let sim = cluster.kubeconfig("operator-cli");
    let mut doc: Value = yaml_serde::from_str(&sim).unwrap();
    doc["clusters"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}}));
    doc["contexts"][0]["name"] = "sim".into();
    doc["contexts"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "nowhere", "context": {"cluster": "nowhere", "user": "operator-cli"}}));
    doc["current-context"] = "nowhere".into();
    std::fs::write(&path, yaml_serde::to_string(&doc).unwrap()).unwrap();
    path
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controls_json_has_the_same_keys_in_every_outcome_on_the_named_cluster() {
    let sc = Scenario {
        nodes: 2,
        pods_per_node: 1,
        time_factor: 0.01,
        ..Scenario::default()
    };
    let cluster = Cluster::start(sc).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(&cluster, dir.path());
    let config = dir.path().join("rollboot.yaml");
    std::fs::write(&config, "concurrency: {maxNodes: 1}\n").unwrap();
    let target = [
        "--kubeconfig".to_string(),
        kc.display().to_string(),
        "--context".into(),
        "sim".into(),
    ];
    let cfg = ["--config".to_string(), config.display().to_string()];
    let call = |args: &[&str], with_config: bool| {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.extend(target.iter().cloned());
        if with_config {
            a.extend(cfg.iter().cloned());
        }
        a.extend(["-o".into(), "json".into()]);
        run_async(a)
    };
    let want: BTreeSet<String> = CONTROL_KEYS.iter().map(|k| k.to_string()).collect();
    let json = |out: &str| -> Value { serde_json::from_str(out).unwrap() };

    // Without --context the file's current context (nowhere) is used: a cluster error.
    let (code, _, err) = run_async(vec![
        "status".into(),
        "--kubeconfig".into(),
        kc.display().to_string(),
        "--config".into(),
        config.display().to_string(),
    ])
    .await;
    assert_eq!(code, 1, "{err}");

    // status and plan read the named cluster.
    let (code, out, err) = call(&["status"], true).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["counts"]["nodes"], 2, "{out}");
    let (code, out, err) = call(&["plan"], true).await;
    assert!(code == 0 || code == 3, "{code}: {err}");
    assert!(json(&out).is_object());

    // The lock's namespace does not exist yet: pause says so (the API server's 404), not
    // "kept changing".
    let (code, out, err) = call(&["pause"], true).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("not found") && !err.contains("kept changing"),
        "{err}"
    );
    assert_eq!(keys(&json(&out)), want, "{out}");
    let client = kube::Client::try_from(cluster.kube_config_as("harness").await.unwrap()).unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "rollboot-system"}}))
                .unwrap(),
        )
        .await
        .unwrap();

    // Without --config, the controls read the controller's ConfigMap.
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "rollboot-system");
    config_maps
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "rollboot-config"},
                "data": {"rollboot.yaml": "concurrency: {maxNodes: 1}\n"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    // Each control: done, then refused or failed, the same keys.
    let mut outcomes = BTreeSet::new();
    for (args, with_config, want_code) in [
        (&["request", "node-0000"][..], true, 0),
        (&["request", "node-0000"], false, 0),
        (&["request", "no-such-node"], false, 1),
        (&["retry", "node-0000"], true, 3),
        (&["pause", "--reason", "test"], true, 0),
        (&["resume"], true, 0),
        (&["resume"], true, 0),
    ] {
        let (code, out, err) = call(args, with_config).await;
        assert_eq!(code, want_code, "{args:?}: {out}{err}");
        let v = json(&out);
        assert_eq!(keys(&v), want, "{args:?}: {out}");
        outcomes.insert(v["outcome"].as_str().unwrap().to_string());
    }
    for o in [
        "requested",
        "alreadyRequested",
        "error",
        "refused",
        "paused",
        "resumed",
        "notPaused",
    ] {
        assert!(outcomes.contains(o), "{o} not among {outcomes:?}");
    }

    // A retried node: the notes say no controller leads (none runs here), from the config's
    // leader Lease.
    let nodes: Api<Node> = Api::all(client);
    nodes
        .patch(
            "node-0001",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                "rollboot.dev/state": "failed",
                "rollboot.dev/state-since": "2026-01-01T00:00:00Z",
                "rollboot.dev/failure-reason": "test",
            }}})),
        )
        .await
        .unwrap();
    let (code, out, err) = call(&["retry", "node-0001"], true).await;
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    assert_eq!(keys(&v), want, "{out}");
    assert_eq!(v["outcome"], "retried");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("no controller holds the leader Lease rollboot-system/rollboot-leader"),
        "{notes}"
    );
    cluster.shutdown().await;
}
