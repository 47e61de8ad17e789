//! `rollboot controller` and `rollboot agent` as processes: how they start and what they write
//! to their logs, without a cluster (the API server they are given does not answer).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
