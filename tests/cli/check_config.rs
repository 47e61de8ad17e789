//! `rollboot check-config`: what a person or a script sees, and the exit codes.

use std::process::Command;

fn rollboot(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rollboot"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn the_reference_config_is_valid_and_lists_the_next_openings() {
    // 2026-11-23 is a Monday; Berlin is on CET (UTC+1): window 0 opens 02:00 local = 01:00Z.
    let (code, out, err) = rollboot(&[
        "check-config",
        "config/rollboot.yaml",
        "--from",
        "2026-11-23T00:00:00Z",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("config/rollboot.yaml: valid"), "{out}");
    assert!(
        out.contains("2026-11-23 01:00 UTC -> 2026-11-23 05:00 UTC"),
        "{out}"
    );
    assert!(
        out.contains("window 0 (Europe/Berlin): 2026-11-23 02:00 CET -> 2026-11-23 06:00 CET"),
        "{out}"
    );
    assert!(out.contains("next 5 openings"), "{out}");
}

#[test]
fn a_utc_window_is_not_printed_twice_and_one_opening_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("utc.yaml");
    std::fs::write(
        &file,
        "windows:\n  - schedule: \"0 3 * * *\"\n    duration: 2h\n    timezone: UTC\n",
    )
    .unwrap();
    let (code, out, err) = rollboot(&[
        "check-config",
        file.to_str().unwrap(),
        "--from",
        "2026-11-23T00:00:00Z",
        "--next",
        "1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("next opening:\n"), "{out}");
    assert!(
        out.contains("  2026-11-23 03:00 UTC -> 2026-11-23 05:00 UTC  (2h)  window 0\n"),
        "{out}"
    );
    assert!(!out.contains("UTC UTC"), "{out}");
}

#[test]
fn json_output_is_one_object_with_the_openings() {
    let (code, out, _) = rollboot(&[
        "check-config",
        "config/rollboot.yaml",
        "--from",
        "2026-11-23T00:00:00Z",
        "--next",
        "6",
        "--output",
        "json",
    ]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["valid"], true);
    let openings = doc["openings"].as_array().unwrap();
    assert_eq!(openings.len(), 6);
    // Mon-Fri 01:00Z-05:00Z from window 0, then Saturday 10:00Z-16:00Z from window 1 (UTC).
    for (i, day) in (23..=27).enumerate() {
        assert_eq!(openings[i]["start"], format!("2026-11-{day}T01:00:00Z"));
        assert_eq!(openings[i]["end"], format!("2026-11-{day}T05:00:00Z"));
        assert_eq!(openings[i]["window"], 0);
        assert_eq!(openings[i]["timezone"], "Europe/Berlin");
    }
    assert_eq!(openings[5]["start"], "2026-11-28T10:00:00Z");
    assert_eq!(openings[5]["end"], "2026-11-28T16:00:00Z");
    assert_eq!(openings[5]["window"], 1);
    assert_eq!(doc["config"]["concurrency"]["maxNodes"], 1);
}

#[test]
fn an_invalid_config_exits_2_with_every_error_located() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "windows:\n  - schedule: \"0 2 * * *\"\n    duration: 0s\n    timezone: Mars/Olympus\n",
    )
    .unwrap();
    let (code, out, _) = rollboot(&["check-config", file.to_str().unwrap(), "--output", "json"]);
    assert_eq!(code, 2);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["valid"], false);
    let errors = doc["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(errors[0]["path"], "windows[0].duration");
    assert_eq!(errors[0]["line"], 3);
    assert_eq!(errors[1]["path"], "windows[0].timezone");
    assert_eq!(errors[1]["line"], 4);
    assert_eq!(errors[1]["column"], 15);

    let (code, _, err) = rollboot(&["check-config", file.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("bad.yaml"), "names the file: {err}");
    assert!(err.contains("4:15: windows[0].timezone"), "{err}");
}

#[test]
fn a_missing_file_exits_1_and_names_it() {
    let (code, _, err) = rollboot(&["check-config", "/nonexistent/rollboot.yaml"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/rollboot.yaml"), "{err}");
}

#[test]
fn version_and_help_work() {
    let (code, out, _) = rollboot(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("rollboot "), "{out}");
    let (code, out, _) = rollboot(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("check-config"), "{out}");
}
