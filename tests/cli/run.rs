//! Shared by the test files that run the `rollboot` binary against a simulated cluster
//! (`status`, `plan`, the operator's controls).

use std::path::Path;
use std::process::Command;

/// Runs the binary with `KUBECONFIG` set, off the runtime's threads (the simulator serves on
/// them): (exit code, stdout, stderr).
pub async fn rollboot(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let kubeconfig = kubeconfig.to_path_buf();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        rollboot_blocking(&kubeconfig, &args)
    })
    .await
    .unwrap()
}

/// [`rollboot`], on the calling thread (for tests without a simulator in the process).
pub fn rollboot_blocking(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rollboot"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Writes, in `dir`, a kubeconfig for an API server at http://127.0.0.1:9, where nothing
/// listens, and returns its path.
#[allow(dead_code)] // Not every file that runs the binary needs an unreachable cluster.
pub fn unreachable_kubeconfig(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:9\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n",
    )
    .unwrap();
    path
}
