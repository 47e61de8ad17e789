//! `rollboot migrate kured` (issue 25): the windows of a migrated config open exactly when
//! kured's would. kured's rule is its `timewindow` package's ([`KuredWindow::contains`]: the
//! weekday of the instant in the window's zone, both ends included, a start after the end
//! wrapping midnight); rollboot's is the migrated config's schedule. They are compared at every
//! instant that matters (each start and end, a second either side, midnight, the middle of each
//! piece) for every one of the 127 weekday combinations, for a window within a day and one
//! across midnight; then, through the binary, a manifest with a dozen flags: its config passes
//! `check-config`, and the openings `check-config --next` prints are kured's, found by
//! stepping its rule second by second.

use std::collections::BTreeSet;
use std::process::Command;

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use rollboot::migrate::kured::{migrate_inputs, KuredWindow};
use serde_json::Value;

fn rollboot(args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_rollboot"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The migrated config of `flags`, loaded.
fn migrated(flags: &str) -> (rollboot::config::Config, KuredWindow) {
    let m = migrate_inputs(None, Some(flags)).unwrap();
    let config = rollboot::config::parse_str(&m.yaml()).unwrap_or_else(|p| panic!("{p:?}"));
    let (parsed, _) = rollboot::migrate::kured::parse_flags(
        &rollboot::migrate::kured::shell_words(flags).unwrap(),
    )
    .unwrap();
    (config, KuredWindow::of(&parsed).unwrap())
}

/// Whether the zone's offset changes between the local day's start and its end.
fn clock_change_on(tz: Tz, day: NaiveDate) -> bool {
    use chrono::Offset;
    let at = |h: u32| {
        let utc =
            Utc.from_utc_datetime(&(day.and_hms_opt(0, 0, 0).unwrap() + Duration::hours(h.into())));
        tz.offset_from_utc_datetime(&utc.naive_utc())
            .fix()
            .local_minus_utc()
    };
    (0..=26).step_by(2).map(at).collect::<BTreeSet<_>>().len() > 1
}

/// The instants where the two rules could part, over `days` days from 2026-11-23 (a Monday)
/// and over a spring and an autumn clock change, in `w`'s zone; days the clocks change on are
/// left out where `skip_changes`.
fn probes(w: &KuredWindow, days: i64, skip_changes: bool) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let firsts = [
        NaiveDate::from_ymd_opt(2026, 11, 23).unwrap(),
        NaiveDate::from_ymd_opt(2027, 3, 22).unwrap(),
        NaiveDate::from_ymd_opt(2027, 10, 25).unwrap(),
    ];
    for first in firsts {
        for d in 0..days {
            let day = first + Duration::days(d);
            if skip_changes
                && (clock_change_on(w.tz, day) || clock_change_on(w.tz, day.pred_opt().unwrap()))
            {
                continue;
            }
            let mut secs = vec![0i64, 1, 43_200, 86_399];
            for edge in [w.start as i64, w.end as i64 + 1] {
                secs.extend([edge - 1, edge, edge + 1]);
            }
            secs.push((w.start as i64 + w.end as i64) / 2);
            for s in secs.into_iter().filter(|s| (0..86_400).contains(s)) {
                let naive = day.and_hms_opt(0, 0, 0).unwrap() + Duration::seconds(s);
                if let Some(t) = w.tz.from_local_datetime(&naive).earliest() {
                    let t = t.with_timezone(&Utc);
                    out.extend([t, t + Duration::milliseconds(999)]);
                }
            }
        }
    }
    out
}

fn compare(flags: &str, skip_changes: bool) {
    let (config, kured) = migrated(flags);
    let schedule = config.schedule();
    for t in probes(&kured, 16, skip_changes) {
        assert_eq!(
            schedule.is_allowed(t),
            kured.contains(t),
            "{flags}: at {t} ({}) rollboot says {}, kured {}",
            t.with_timezone(&kured.tz),
            schedule.is_allowed(t),
            kured.contains(t)
        );
    }
}

#[test]
fn every_weekday_combination_opens_as_kured_does_within_a_day_and_across_midnight() {
    let names = ["su", "mo", "tu", "we", "th", "fr", "sa"];
    for mask in 1u32..128 {
        let days: Vec<&str> = (0..7)
            .filter(|d| mask & (1 << d) != 0)
            .map(|d| names[d])
            .collect();
        let days = days.join(",");
        compare(
            &format!("--reboot-days={days} --start-time=2:30 --end-time=5:45"),
            false,
        );
        compare(
            &format!("--reboot-days={days} --start-time=22:00 --end-time=04:00:30"),
            false,
        );
    }
}

#[test]
fn zones_with_and_without_clock_changes_open_as_kured_does() {
    for zone in [
        "Asia/Kolkata",
        "America/New_York",
        "Europe/Berlin",
        "Australia/Sydney",
    ] {
        // Zones that change their clocks: every day but those of a change (where the end
        // moves, as the migration's note says).
        let dst = zone != "Asia/Kolkata";
        compare(
            &format!(
                "--reboot-days=mon,wed,sat,sun --start-time=11pm --end-time=3am --time-zone={zone}"
            ),
            dst,
        );
        compare(
            &format!(
                "--reboot-days=tue,thu --start-time=01:00 --end-time=23:59:59 --time-zone={zone}"
            ),
            dst,
        );
    }
}

/// kured's openings from `from`, stepping its rule second by second: [first second in, last
/// second in + 1 s).
fn kured_openings(
    w: &KuredWindow,
    from: DateTime<Utc>,
    n: usize,
) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    let mut out = Vec::new();
    let mut t = from;
    let mut open: Option<DateTime<Utc>> = None;
    let limit = from + Duration::days(30);
    while out.len() < n && t < limit {
        match (open, w.contains(t)) {
            (None, true) => open = Some(t),
            (Some(s), false) => {
                out.push((s, t));
                open = None;
            }
            _ => {}
        }
        t += Duration::seconds(1);
    }
    out
}

const MANIFEST: &str = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kured
  namespace: kube-system
spec:
  selector: {matchLabels: {name: kured}}
  template:
    metadata: {labels: {name: kured}}
    spec:
      serviceAccountName: kured
      hostPID: true
      containers:
        - name: kured
          image: ghcr.io/kubereboot/kured:1.17.1
          securityContext: {privileged: true}
          command:
            - /usr/bin/kured
            - --reboot-days=fri,sat,sun
            - --start-time=21:30
            - --end-time=03:00
            - --time-zone=America/New_York
            - --period=30m
            - --concurrency=2
            - --drain-grace-period=120
            - --drain-timeout=30m
            - --reboot-delay=1m
            - --blocking-pod-selector=app=backup
            - --prometheus-url=http://prometheus.monitoring:9090
            - --alert-filter-regexp=^(Watchdog|RebootRequired)$
            - --prefer-no-schedule-taint=weave.works/kured-node-reboot
            - --pre-reboot-node-labels=zalando=notready
            - --post-reboot-node-labels=zalando=ready
            - --lock-ttl=30m
            - --lock-release-delay=5m
          env:
            - name: KURED_NODE_ID
              valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
"#;

#[test]
fn a_manifest_with_a_dozen_flags_converts_to_a_config_whose_openings_are_kured_s() {
    let dir = tempfile::tempdir().unwrap();
    let (code, yaml, notes) = rollboot(&["migrate", "kured", "-"], Some(MANIFEST));
    assert_eq!(code, 0, "{notes}");
    for flag in ["--lock-ttl", "--lock-release-delay", "--time-zone", "drain"] {
        assert!(
            notes.contains(&format!("note: {flag}: ")),
            "{flag}: {notes}"
        );
    }
    let file = dir.path().join("rollboot.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let from = "2026-11-26T00:00:00Z";
    let (code, out, err) = rollboot(
        &[
            "check-config",
            file.to_str().unwrap(),
            "--from",
            from,
            "--next",
            "6",
            "-o",
            "json",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}\n{yaml}");
    let checked: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(checked["valid"], true);
    let got: Vec<(DateTime<Utc>, DateTime<Utc>)> = checked["openings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let t = |k: &str| {
                DateTime::parse_from_rfc3339(o[k].as_str().unwrap())
                    .unwrap()
                    .to_utc()
            };
            (t("start"), t("end"))
        })
        .collect();
    let config = rollboot::config::parse_str(&yaml).unwrap();
    assert_eq!(config.concurrency.max_nodes, 2);
    assert_eq!(
        config.hooks.prefer_no_schedule_taint.as_deref(),
        Some("weave.works/kured-node-reboot")
    );
    let (flags, _) = rollboot::migrate::kured::parse_flags(
        &rollboot::migrate::kured::flags_of_manifest(MANIFEST, "m").unwrap(),
    )
    .unwrap();
    let kured = KuredWindow::of(&flags).unwrap();
    let want = kured_openings(
        &kured,
        DateTime::parse_from_rfc3339(from).unwrap().to_utc(),
        6,
    );
    assert_eq!(
        got, want,
        "openings of check-config --next against kured's rule"
    );
    // JSON: {config, notes}.
    let (code, out, _) = rollboot(&["migrate", "kured", "-", "-o", "json"], Some(MANIFEST));
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["config"]["concurrency"]["maxNodes"], 2);
    assert!(v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["flag"] == "--lock-ttl"));
    // What kured would refuse is refused, naming the flag.
    let (code, _, err) = rollboot(
        &["migrate", "kured", "--flags", "--reboot-days=funday"],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--reboot-days") && err.contains("funday"),
        "{err}"
    );
}
