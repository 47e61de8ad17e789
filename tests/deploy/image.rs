//! The container images (issue 25): `scripts/build-image.sh` builds both OCI archives offline,
//! here from the `image-test` profile (unoptimized, no debug info). Each archive is read as a
//! runtime reads it: `index.json`, the manifest and config it names, every blob's digest and
//! size checked, the image config's entrypoint, user and labels; then its one layer is
//! unpacked and the binary run in a chroot of it (`rollboot --version`, `rollboot agent
//! --help`; the agent's `nsenter --version`), so a library the image lacks fails here. Each
//! carries the man pages of its binary; each archive must stay under 25 MB.
//!
//! Needs root for chroot(2); elsewhere it says so in one line and checks the rest.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const LIMIT: u64 = 25_000_000;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Builds both archives into `out`; the script's lines (path, name, digest, size).
fn build(out: &Path) -> Vec<String> {
    let o = Command::new(root().join("scripts/build-image.sh"))
        .env("PROFILE", "image-test")
        .env("OUT", out)
        .current_dir(root())
        .output()
        .expect("running scripts/build-image.sh");
    assert!(
        o.status.success(),
        "build-image.sh failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

fn sha256(path: &Path) -> String {
    let o = Command::new("sha256sum").arg(path).output().unwrap();
    let text = String::from_utf8(o.stdout).unwrap();
    format!("sha256:{}", text.split_whitespace().next().unwrap())
}

/// The blob `digest` of the layout in `dir`, checked against its digest and `size`.
fn blob(dir: &Path, descriptor: &Value) -> PathBuf {
    let digest = descriptor["digest"].as_str().unwrap();
    let path = dir
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"));
    assert_eq!(sha256(&path), digest, "{}", path.display());
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        descriptor["size"].as_u64().unwrap(),
        "size of {digest}"
    );
    path
}

fn read(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn run(rootfs: &Path, argv: &[&str]) -> String {
    let o = Command::new("chroot")
        .arg(rootfs)
        .args(argv)
        .output()
        .expect("chroot");
    assert!(
        o.status.success(),
        "chroot {} {argv:?}: {}{}",
        rootfs.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Checks one archive; returns its unpacked root filesystem.
fn check(archive: &Path, name: &str, role: &str, user: &str, work: &Path) -> PathBuf {
    let size = std::fs::metadata(archive).unwrap().len();
    assert!(size < LIMIT, "{} is {size} bytes", archive.display());
    let dir = work.join(role);
    std::fs::create_dir_all(&dir).unwrap();
    let ok = Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(&dir)
        .status()
        .unwrap()
        .success();
    assert!(ok, "untar {}", archive.display());
    assert_eq!(read(&dir.join("oci-layout"))["imageLayoutVersion"], "1.0.0");
    let index = read(&dir.join("index.json"));
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1);
    let version = env!("CARGO_PKG_VERSION");
    let ann = &manifests[0]["annotations"];
    assert_eq!(ann["org.opencontainers.image.ref.name"], version);
    assert_eq!(
        ann["io.containerd.image.name"],
        format!("docker.io/library/{name}:{version}")
    );
    let manifest = read(&blob(&dir, &manifests[0]));
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let config = read(&blob(&dir, &manifest["config"]));
    let c = &config["config"];
    assert_eq!(
        c["Entrypoint"],
        serde_json::json!(["/usr/local/bin/rollboot"])
    );
    assert_eq!(c["User"], user);
    assert_eq!(c["Cmd"][0], role);
    assert_eq!(c["Labels"]["org.opencontainers.image.version"], version);
    assert_eq!(c["Labels"]["org.opencontainers.image.title"], name);
    assert_eq!(c["Labels"]["dev.rollboot.role"], role);
    assert_eq!(config["os"], "linux");
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(
        layers.len(),
        config["rootfs"]["diff_ids"].as_array().unwrap().len()
    );
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    for l in layers {
        assert_eq!(
            l["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        let ok = Command::new("tar")
            .arg("-xzf")
            .arg(blob(&dir, l))
            .arg("-C")
            .arg(&rootfs)
            .status()
            .unwrap()
            .success();
        assert!(ok, "unpacking a layer of {}", archive.display());
    }
    // The user the image runs as exists in it; the CA certificates are there.
    let uid = user.split(':').next().unwrap();
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(
        passwd.lines().any(|l| l.split(':').nth(2) == Some(uid)),
        "{passwd}"
    );
    assert!(
        std::fs::metadata(rootfs.join("etc/ssl/certs/ca-certificates.crt"))
            .unwrap()
            .len()
            > 1000
    );
    // The man pages of the binary in it: a page per subcommand, none for the simulator.
    let man = rootfs.join("usr/share/man/man1");
    for page in [
        "rollboot.1",
        "rollboot-agent.1",
        "rollboot-controller.1",
        "rollboot-status.1",
    ] {
        let roff =
            std::fs::read_to_string(man.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(roff.contains(".SH SYNOPSIS"), "{page}");
    }
    assert!(!man.join("rollboot-simulate.1").exists());
    rootfs
}

#[test]
fn both_images_build_offline_and_run_in_a_chroot_of_their_own_root_filesystem() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let lines = build(&out);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for l in &lines {
        // path, name:version, digest, size.
        let digest = l.split('\t').nth(2).unwrap_or_default();
        assert!(digest.starts_with("sha256:") && digest.len() == 71, "{l}");
        eprintln!("image: {l}");
    }
    let controller = check(
        &out.join("rollboot-controller.tar"),
        "rollboot",
        "controller",
        "65532:65532",
        work.path(),
    );
    let agent = check(
        &out.join("rollboot-agent.tar"),
        "rollboot-agent",
        "agent",
        "0:0",
        work.path(),
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("image test: not root, so the binaries were not run in a chroot of the images (chroot(2) needs root)");
        return;
    }
    let version = format!("rollboot {}", env!("CARGO_PKG_VERSION"));
    for rootfs in [&controller, &agent] {
        let v = run(rootfs, &["/usr/local/bin/rollboot", "--version"]);
        assert_eq!(v.trim(), version);
        let help = run(rootfs, &["/usr/local/bin/rollboot", "agent", "--help"]);
        assert!(help.contains("--config"), "{help}");
    }
    let help = run(
        &controller,
        &["/usr/local/bin/rollboot", "controller", "--help"],
    );
    assert!(help.contains("--config"), "{help}");
    // The images are built without the simulator.
    let o = Command::new("chroot")
        .arg(&controller)
        .args(["/usr/local/bin/rollboot", "simulate", "--help"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "the image's binary has `simulate`");
    // The agent's default reboot command runs nsenter from the image.
    let v = run(&agent, &["/usr/bin/nsenter", "--version"]);
    assert!(v.contains("util-linux"), "{v}");
}
