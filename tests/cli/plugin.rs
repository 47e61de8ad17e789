//! The binary as a kubectl plugin: kubectl runs `kubectl-rollboot` from the PATH for `kubectl
//! rollboot ...`, with that path as argv[0]. A symbolic link of that name to the binary answers
//! as rollboot, its usage saying `kubectl rollboot`, and reads a simulated cluster as
//! `rollboot status` does.

use std::path::{Path, PathBuf};
use std::process::Command;

use rollboot_sim::sim::{Cluster, Scenario};
use serde_json::Value;

/// `kubectl-rollboot`, a symbolic link to the binary in `dir`, as an install puts it on the PATH.
fn plugin(dir: &Path) -> PathBuf {
    let link = dir.join("kubectl-rollboot");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_rollboot"), &link).unwrap();
    link
}

fn run(program: &Path, kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(program)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        o.status.code().unwrap(),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_kubectl_rollboot_it_answers_as_rollboot_and_says_kubectl_rollboot() {
    let dir = tempfile::tempdir().unwrap();
    let link = plugin(dir.path());
    let nowhere = Path::new("/nonexistent/kubeconfig");

    let (code, help, err) = run(&link, nowhere, &["--help"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        help.contains("Usage: kubectl rollboot [OPTIONS] <COMMAND>"),
        "{help}"
    );
    assert!(help.contains("status") && help.contains("plan"), "{help}");
    let (code, help, err) = run(&link, nowhere, &["status", "--help"]);
    assert_eq!(code, 0, "{err}");
    assert!(help.contains("Usage: kubectl rollboot status"), "{help}");
    let (code, _, err) = run(&link, nowhere, &["stauts"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("Usage: kubectl rollboot"), "{err}");
    let (code, out, _) = run(&link, nowhere, &["--version"]);
    assert_eq!(
        (code, out.trim()),
        (0, concat!("rollboot ", env!("CARGO_PKG_VERSION")))
    );
    // Under its own name, it says rollboot.
    let (_, help, _) = run(
        Path::new(env!("CARGO_BIN_EXE_rollboot")),
        nowhere,
        &["status", "--help"],
    );
    assert!(help.contains("Usage: rollboot status"), "{help}");

    let cluster = Cluster::start(Scenario {
        nodes: 3,
        pods_per_node: 1,
        time_factor: 0.01,
        ..Scenario::default()
    })
    .await
    .unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, cluster.kubeconfig("operator-plugin")).unwrap();
    let config = dir.path().join("rollboot.yaml");
    std::fs::write(&config, "concurrency: {maxNodes: 1}\n").unwrap();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        run(
            &link,
            &kubeconfig,
            &["status", "--config", config.to_str().unwrap(), "-o", "json"],
        )
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["counts"]["nodes"], 3, "{out}");
    cluster.shutdown().await;
}
