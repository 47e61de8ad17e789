//! The release archive of the command line (`scripts/build-release.sh`), here around the test
//! build of the binary (`BINARY`): it unpacks into a prefix with the binary, its kubectl plugin
//! name, a man page per subcommand, the three shells' completions and the reference config with
//! its schema, each where man, the shells and kubectl look; the plugin link runs as `kubectl
//! rollboot`; and the example krew manifest (deploy/krew/rollboot.yaml) names its paths.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_release_archive_carries_the_binary_its_plugin_name_man_pages_and_completions() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let o = Command::new(root().join("scripts/build-release.sh"))
        .env("BINARY", env!("CARGO_BIN_EXE_rollboot"))
        .env("OUT", &out)
        .env("GZIP_LEVEL", "1")
        .current_dir(root())
        .output()
        .expect("running scripts/build-release.sh");
    assert!(
        o.status.success(),
        "build-release.sh failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let line = String::from_utf8(o.stdout).unwrap();
    let (archive, sha) = line.trim().split_once('\t').expect("path and digest");
    assert_eq!(sha.len(), 64, "{line}");
    let name = Path::new(archive)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .trim_end_matches(".tar.gz")
        .to_string();
    assert!(
        name.starts_with(&format!("rollboot-{}-linux-", env!("CARGO_PKG_VERSION"))),
        "{name}"
    );
    let prefix = work.path().join("prefix");
    std::fs::create_dir_all(&prefix).unwrap();
    let ok = Command::new("tar")
        .args(["-xzf", archive, "--strip-components=1", "-C"])
        .arg(&prefix)
        .status()
        .unwrap()
        .success();
    assert!(ok, "unpacking {archive}");
    for file in [
        "bin/rollboot",
        "share/man/man1/rollboot.1",
        "share/man/man1/rollboot-status.1",
        "share/man/man1/rollboot-config-schema.1",
        "share/bash-completion/completions/rollboot",
        "share/zsh/site-functions/_rollboot",
        "share/fish/vendor_completions.d/rollboot.fish",
        "share/rollboot/rollboot.yaml",
        "share/rollboot/rollboot.schema.json",
    ] {
        let meta = std::fs::metadata(prefix.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(meta.len() > 0, "{file} is empty");
    }
    let link = prefix.join("bin/kubectl-rollboot");
    assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("rollboot"));
    let o = Command::new(&link).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && help.contains("Usage: kubectl rollboot"),
        "{help}"
    );
    // The example krew manifest names this archive, and the binary at its path in it.
    let krew: serde_json::Value = yaml_serde::from_str(
        &std::fs::read_to_string(root().join("deploy/krew/rollboot.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        krew["spec"]["version"],
        format!("v{}", env!("CARGO_PKG_VERSION"))
    );
    let arch = name.rsplit('-').next().unwrap();
    let platform = krew["spec"]["platforms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["selector"]["matchLabels"]["arch"] == arch)
        .unwrap_or_else(|| panic!("deploy/krew/rollboot.yaml: no platform for {arch}"));
    assert!(
        platform["uri"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/{name}.tar.gz")),
        "{platform}"
    );
    let from = platform["files"][0]["from"].as_str().unwrap();
    let inside = from
        .strip_prefix(&format!("{name}/"))
        .unwrap_or_else(|| panic!("{from} is not in {name}/"));
    assert!(
        prefix.join(inside).is_file(),
        "{from} is not in the archive"
    );
    assert_eq!(
        Path::new(inside).file_name().unwrap().to_str(),
        platform["bin"].as_str()
    );
    // The schema beside the reference config is the one its first line names.
    let yaml = std::fs::read_to_string(prefix.join("share/rollboot/rollboot.yaml")).unwrap();
    assert!(
        yaml.starts_with("# yaml-language-server: $schema=./rollboot.schema.json\n"),
        "{}",
        yaml.lines().next().unwrap_or_default()
    );
}
