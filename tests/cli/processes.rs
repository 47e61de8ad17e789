//! `rollboot controller` and `rollboot agent` as processes: how they start and what they write
//! to their logs: without a cluster (the API server they are given does not answer), and the
//! agent's JSON log against the simulated cluster.

use std::io::Read;
use std::os::fd::FromRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rollboot_sim::sim::{Cluster, Scenario};
use serde_json::Value;

/// A kubeconfig for an API server on a loopback port where nothing listens.
fn unreachable_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .unwrap();
    path
}

fn rollboot(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_rollboot"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KUBECONFIG", kubeconfig)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .env_remove("ROLLBOOT_LOG_FORMAT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_controller_whose_metrics_address_is_taken_stops_at_once_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut child = rollboot(
        &kubeconfig,
        &[
            "controller",
            "--config",
            "config/rollboot.yaml",
            "--identity",
            "c-0",
            "--metrics-addr",
            &addr,
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the controller ran on without its /metrics, /healthz and /readyz on {addr}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success());
    assert!(
        err.contains(&addr) && err.contains("--metrics-addr"),
        "{err}"
    );
}

#[test]
fn logs_that_go_to_a_file_or_a_pipe_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let mut child = rollboot(
        &kubeconfig,
        &[
            "agent",
            "--config",
            "config/rollboot.yaml",
            "--node-name",
            "node-1",
        ],
    );
    // The agent logs its failed watch of the unreachable API server within a second or two.
    std::thread::sleep(Duration::from_secs(3));
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("WARN"), "the agent logged nothing: {err:?}");
    assert!(
        !err.contains('\u{1b}'),
        "ANSI escape codes in a piped log: {err:?}"
    );
}

/// What an agent given an unreachable API server writes to stderr in its first 3 seconds, its
/// stderr set up by `stderr` and its environment by `env`.
fn agent_log_of_unreachable_cluster(
    args: &[&str],
    env: &[(&str, &str)],
    stderr: Stdio,
    read: impl FnOnce() -> String + Send + 'static,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rollboot"));
    cmd.args(args)
        .args([
            "agent",
            "--config",
            "config/rollboot.yaml",
            "--node-name",
            "node-1",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .env_remove("ROLLBOOT_LOG_FORMAT")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(stderr);
    let mut child = cmd.spawn().unwrap();
    // The parent's copy of the child's stderr goes with the Command, so the reader sees the
    // end once the child is gone.
    drop(cmd);
    let reader = std::thread::spawn(read);
    // The agent logs its failed watch of the unreachable API server within a second or two.
    std::thread::sleep(Duration::from_secs(3));
    let _ = child.kill();
    let _ = child.wait();
    reader.join().unwrap()
}

/// A pseudo-terminal: (the side a terminal emulator reads, the side a program writes to).
fn pty() -> (std::fs::File, std::fs::File) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two file descriptors into the integers given; the name, termios
    // and window size are optional and passed as null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened by openpty and are owned by nothing else.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::fs::File::from_raw_fd(slave),
        )
    }
}

/// Everything a program writes to a pseudo-terminal, read until its last writer is gone (Linux
/// then answers EIO).
fn terminal_log(env: &[(&str, &str)]) -> String {
    let (mut master, slave) = pty();
    agent_log_of_unreachable_cluster(&[], env, Stdio::from(slave), move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match master.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    })
}

#[test]
fn a_person_at_a_terminal_gets_colour_unless_they_ask_for_none() {
    let log = terminal_log(&[]);
    assert!(log.contains("WARN"), "the agent logged nothing: {log:?}");
    assert!(log.contains("\u{1b}["), "no colour on a terminal: {log:?}");
    let log = terminal_log(&[("NO_COLOR", "1")]);
    assert!(log.contains("WARN"), "the agent logged nothing: {log:?}");
    assert!(!log.contains('\u{1b}'), "colour despite NO_COLOR: {log:?}");
}

/// Every line of `log` is one JSON object with a level, a target and the event's fields.
fn assert_json_lines(log: &str) -> Vec<Value> {
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}")))
        .collect();
    assert!(!lines.is_empty(), "nothing logged");
    for l in &lines {
        assert!(
            l["level"].is_string() && l["target"].is_string() && l["fields"].is_object(),
            "{l}"
        );
    }
    lines
}

fn piped_log(args: &[&str], env: &[(&str, &str)]) -> String {
    let (read_end, write_end) = std::io::pipe().unwrap();
    let mut read_end = read_end;
    agent_log_of_unreachable_cluster(args, env, Stdio::from(write_end), move || {
        let mut s = String::new();
        read_end.read_to_string(&mut s).unwrap();
        s
    })
}

#[test]
fn logs_are_json_lines_when_asked_by_flag_or_by_environment() {
    for (args, env) in [
        (&["--log-format", "json"][..], &[][..]),
        (&[][..], &[("ROLLBOOT_LOG_FORMAT", "json")][..]),
    ] {
        let lines = assert_json_lines(&piped_log(args, env));
        assert!(
            lines.iter().any(|l| l["level"] == "WARN"),
            "{args:?} {env:?}: {lines:?}"
        );
    }
    // And text otherwise: the same run's first line is not JSON.
    let text = piped_log(&[], &[]);
    assert!(
        text.contains("WARN")
            && serde_json::from_str::<Value>(text.lines().next().unwrap()).is_err(),
        "{text:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_json_log_gives_the_sentinels_reason_as_plain_text() {
    let cluster = Cluster::start(Scenario {
        nodes: 1,
        pods_per_node: 0,
        ..Scenario::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig, "agent").unwrap();
    let sentinel = dir.path().join("reboot-required");
    std::fs::write(&sentinel, "").unwrap();
    let config = dir.path().join("rollboot.yaml");
    std::fs::write(
        &config,
        format!(
            "reboot:\n  sentinelFile: {}\n  checkPeriod: 200ms\n",
            sentinel.display()
        ),
    )
    .unwrap();
    let node = "node-0000";
    // Off the runtime's threads: the simulator serves on them.
    let log = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rollboot"))
            .args(["--log-format", "json", "agent", "--config"])
            .arg(&config)
            .args(["--node-name", node])
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        // The first check is at start, then every 200 ms.
        std::thread::sleep(Duration::from_secs(3));
        let _ = child.kill();
        let _ = child.wait();
        reader.join().unwrap()
    })
    .await
    .unwrap();
    let lines = assert_json_lines(&log);
    // One line at start says what it runs with.
    let start = lines
        .iter()
        .find(|l| l["fields"]["message"] == "agent starting")
        .unwrap_or_else(|| panic!("no start line: {log}"));
    let f = &start["fields"];
    assert_eq!(f["node"], node, "{start}");
    assert_eq!(
        f["sentinel"],
        format!("file {}", sentinel.display()).as_str(),
        "{start}"
    );
    assert!(
        f["method"]
            .as_str()
            .is_some_and(|m| m.contains("systemctl reboot") && m.contains("boot_id")),
        "{start}"
    );
    assert!(
        f["config"]
            .as_str()
            .is_some_and(|c| c.ends_with("rollboot.yaml")),
        "{start}"
    );
    assert!(f["host_boot_id"].is_string(), "{start}");
    let changed = lines
        .iter()
        .find(|l| l["fields"]["message"] == "reboot-required changed")
        .unwrap_or_else(|| panic!("the agent never flagged its node: {log}"));
    let expected = format!("sentinel file {} exists", sentinel.display());
    assert_eq!(changed["fields"]["reason"], expected.as_str(), "{changed}");
    assert_eq!(changed["fields"]["needed"], true, "{changed}");
    assert_eq!(changed["fields"]["node"], node, "{changed}");
    // The Node carries the same words.
    let client = kube::Client::try_from(cluster.kube_config_as("test").await.unwrap()).unwrap();
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    let n = api.get(node).await.unwrap();
    let ann = n.metadata.annotations.unwrap_or_default();
    assert_eq!(
        ann.get(rollboot::node::REBOOT_REQUIRED_REASON),
        Some(&expected),
        "{ann:?}"
    );
}
