//! Where the suite finds what it runs: the control plane binaries, the recipe, the suite's own
//! copies of two recipe scripts (`tests/real/control_plane/`), `deploy/` and the rollboot binary under test,
//! from environment variables.
//!
//! Owns the decision to skip: without `ROLLBOOT_REALCLUSTER_BIN` the suite prints one line and
//! passes (CI on a fresh machine has no control plane). Once that variable is set, anything
//! missing is an error that names what and where: a half-configured run must never pass silently.

use std::path::{Path, PathBuf};

/// The directory holding rc-etcd, rc-kube-apiserver, rc-kube-controller-manager and
/// rc-kube-scheduler (the recipe's build.sh output).
pub const BIN_VAR: &str = "ROLLBOOT_REALCLUSTER_BIN";
/// The recipe directory (up.sh, down.sh, fake-kubelet.py, ...). Default: `shared/realcluster`
/// in the nearest ancestor of the repository that has one (`../shared/realcluster` next to a
/// checkout, `../../shared/realcluster` next to a worktree folder).
pub const RECIPE_VAR: &str = "ROLLBOOT_REALCLUSTER_RECIPE";
/// For experiments only: apply this directory instead of the repository's `deploy/` (for
/// example a scratch copy with a fix being tried). The report says so loudly.
pub const DEPLOY_VAR: &str = "ROLLBOOT_E2E_DEPLOY";
/// `1`: keep the run directory (logs, audit log, etcd data) even when every check passed.
pub const KEEP_VAR: &str = "ROLLBOOT_E2E_KEEP";

/// The four control plane binaries up.sh starts.
pub const BINARIES: [&str; 4] = [
    "rc-etcd",
    "rc-kube-apiserver",
    "rc-kube-controller-manager",
    "rc-kube-scheduler",
];

/// The recipe files the suite runs or reads.
pub const RECIPE_FILES: [&str; 5] = [
    "up.sh",
    "down.sh",
    "tokens.sh",
    "reboot.sh",
    "workload.yaml",
];

/// The suite's own copies of recipe scripts, in `tests/real/control_plane/`, run instead of the recipe's: the
/// fake kubelet also keeps each fake host's machine ID where an agent can read it, and the
/// configs point each agent at its fake host's identity files (see each file's header).
pub const SUITE_FILES: [&str; 2] = ["fake-kubelet.py", "rollboot-config.sh"];

/// Everything a run needs, checked to exist.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Control plane binaries.
    pub bin: PathBuf,
    /// The recipe.
    pub recipe: PathBuf,
    /// `tests/real/control_plane/`: the suite's copies of [`SUITE_FILES`].
    pub suite: PathBuf,
    /// The manifests applied with `kubectl apply -k`.
    pub deploy: PathBuf,
    /// `deploy` is not the repository's own `deploy/`.
    pub deploy_overridden: bool,
    /// The rollboot binary cargo built for this test.
    pub rollboot: PathBuf,
    /// Keep the run directory after a passing run.
    pub keep: bool,
}

fn var(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The line printed when the suite skips.
pub fn skip_line() -> String {
    format!(
        "e2e_realcluster: skipped, no control plane: set {BIN_VAR} to the directory of {} \
         (built by ../shared/realcluster/build.sh) and run `{BIN_VAR}=DIR cargo test --test \
         real control_plane:: -- --nocapture` (or scripts/e2e-realcluster.sh)",
        BINARIES.join(", ")
    )
}

/// Reads the environment. `None` (after printing [`skip_line`]) when there is no control plane;
/// `Err` naming what is missing when the suite was asked to run but cannot.
pub fn from_environment(manifest_dir: &Path, rollboot: &Path) -> Result<Option<Setup>, String> {
    let Some(bin) = var(BIN_VAR) else {
        println!("{}", skip_line());
        return Ok(None);
    };
    for b in BINARIES {
        let p = bin.join(b);
        if !p.is_file() {
            return Err(format!(
                "{BIN_VAR}={}: {b} is missing there ({} does not exist); build the control \
                 plane with the recipe's build.sh",
                bin.display(),
                p.display()
            ));
        }
    }
    let recipe = match var(RECIPE_VAR) {
        Some(r) => r,
        None => manifest_dir
            .ancestors()
            .skip(1)
            .map(|d| d.join("shared").join("realcluster"))
            .find(|d| d.join("up.sh").is_file())
            .ok_or_else(|| {
                format!(
                    "no realcluster recipe found: set {RECIPE_VAR} to the directory holding \
                     up.sh (none of the ancestors of {} has shared/realcluster/up.sh)",
                    manifest_dir.display()
                )
            })?,
    };
    for f in RECIPE_FILES {
        if !recipe.join(f).is_file() {
            return Err(format!(
                "{RECIPE_VAR}={}: the recipe has no {f}",
                recipe.display()
            ));
        }
    }
    let suite = manifest_dir.join("tests/real/control_plane");
    for f in SUITE_FILES {
        if !suite.join(f).is_file() {
            return Err(format!("{}: the suite has no {f}", suite.display()));
        }
    }
    let (deploy, deploy_overridden) = match var(DEPLOY_VAR) {
        Some(d) => (d, true),
        None => (manifest_dir.join("deploy"), false),
    };
    if !deploy.join("kustomization.yaml").is_file() {
        return Err(format!(
            "{}: no kustomization.yaml to apply",
            deploy.display()
        ));
    }
    for tool in ["kubectl", "python3", "openssl", "curl", "bash"] {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
            .unwrap_or(false);
        if !found {
            return Err(format!(
                "`{tool}` is not on PATH; the recipe's scripts need it"
            ));
        }
    }
    Ok(Some(Setup {
        bin: std::fs::canonicalize(&bin).map_err(|e| format!("{}: {e}", bin.display()))?,
        recipe: std::fs::canonicalize(&recipe).map_err(|e| format!("{}: {e}", recipe.display()))?,
        suite,
        deploy,
        deploy_overridden,
        rollboot: rollboot.to_path_buf(),
        keep: std::env::var(KEEP_VAR).is_ok_and(|v| v == "1"),
    }))
}
