//! `rollboot status --watch` against the simulated cluster, its output a pipe (not a terminal):
//! a node the real controller and agent take from flagged to done, seen as one line per change
//! in that order, the watch ending by itself with `--until-done`; and only reads (list, watch,
//! get) made.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};

const IDENTITY: &str = "status-watch-cli";

/// The watch's process, killed when the test ends, whatever its outcome: a failed assertion
/// must leave no process running, nor the runtime waiting on a read of its output.
struct Watching(std::process::Child);

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_going_from_flagged_to_done_is_one_line_per_change() {
    let sc = Scenario {
        nodes: 2,
        pods_per_node: 1,
        ..Scenario::default()
    };
    let mut h = Harness::start(sc, sim_config("").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    h.cluster.write_kubeconfig(&kubeconfig, IDENTITY).unwrap();
    // The Lease names are the defaults, as the harness's controllers use them.
    let file = dir.path().join("rollboot.yaml");
    std::fs::write(&file, "{}\n").unwrap();

    h.start_all_agents().await.unwrap();
    let flagged = vec!["node-0000".to_string()];
    h.flag(&flagged);
    assert!(h
        .wait_for(Duration::from_secs(20), |ns| ns
            .iter()
            .any(|n| n.name == "node-0000" && n.flagged()))
        .await
        .unwrap());

    let mut child = Watching(
        Command::new(env!("CARGO_BIN_EXE_rollboot"))
            .args(["status", "--watch", "--until-done", "--config"])
            .arg(&file)
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let mut stderr = child.0.stderr.take().unwrap();
    // The first line: the watch has listed everything; only then does the rollout start.
    let (mut reader, first) = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::task::spawn_blocking(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            (r, line)
        }),
    )
    .await
    .expect("no first line from status --watch within 30 s")
    .unwrap();
    assert!(
        first.ends_with(
            " node-0000 flagged, waiting  [0/1 done, 0 in flight, 1 waiting, 0 failed]\n"
        ),
        "{first}"
    );
    h.start_controller(0).await.unwrap();

    let (rest, err) = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::task::spawn_blocking(move || {
            let (mut rest, mut err) = (String::new(), String::new());
            reader.read_to_string(&mut rest).unwrap();
            stderr.read_to_string(&mut err).unwrap();
            (rest, err)
        }),
    )
    .await
    .expect("status --watch --until-done did not end within 90 s of the rollout's start")
    .unwrap();
    let code = child.0.wait().unwrap().code();
    let out = format!("{first}{rest}");
    assert_eq!(code, Some(0), "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    let at = |what: &str| lines.iter().position(|l| l.contains(what));
    let in_flight = ["cordoning", "draining", "rebooting", "verifying"]
        .iter()
        .filter_map(|s| at(&format!(" node-0000 {s}  [0/1 done, 1 in flight,")))
        .min()
        .unwrap_or_else(|| panic!("no line of node-0000 in flight:\n{out}"));
    let done = " node-0000 done  [1/1 done, 0 in flight, 0 waiting, 0 failed]";
    let first_done = at(done).unwrap_or_else(|| panic!("no line of node-0000 done:\n{out}"));
    assert!(0 < in_flight && in_flight < first_done, "{out}");
    assert!(
        lines[lines.len() - 1].ends_with(done),
        "the watch ends at done:\n{out}"
    );
    // Every line is one change: an instant, the node, where it is, the counts; never the same
    // twice in a row.
    let said = |l: &str| l.split_once(' ').map(|(_, rest)| rest.to_string());
    for pair in lines.windows(2) {
        assert_ne!(said(pair[0]), said(pair[1]), "{out}");
    }
    for l in &lines {
        let (instant, _) = l.split_once(' ').unwrap();
        assert!(
            chrono::DateTime::parse_from_rfc3339(instant).is_ok() && l.ends_with(" failed]"),
            "{l}"
        );
    }
    assert!(
        !out.contains('\x1b'),
        "no terminal control on a pipe:\n{out:?}"
    );

    // It only read, and through a watch.
    let verbs: std::collections::BTreeSet<String> = h
        .cluster
        .stats()
        .requests
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.identity == IDENTITY)
        .map(|k| format!("{} {}", k.verb, k.resource))
        .collect();
    for want in ["list nodes", "watch nodes", "watch leases"] {
        assert!(verbs.contains(want), "{want} not among {verbs:?}");
    }
    assert!(
        verbs
            .iter()
            .all(|v| v.starts_with("get ") || v.starts_with("list ") || v.starts_with("watch ")),
        "{verbs:?}"
    );
    h.shutdown().await;
}
