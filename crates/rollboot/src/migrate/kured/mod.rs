//! `rollboot migrate kured`: a kured DaemonSet manifest or flag list, as a rollboot config.
//!
//! Owns reading kured's settings as kured reads them (its flags, `--flag=value` or
//! `--flag value`, booleans bare; slices comma-separated and repeatable; the `KURED_<FLAG>`
//! environment of its container; commands split as a shell does), its time window rule
//! ([`KuredWindow`]), and the translation of each setting into rollboot's config
//! ([`migrate`]), with a [`Note`] for every flag not carried over, or carried with a
//! difference, saying why. Pure: no file, cluster or clock.
//!
//! kured's window, as its `timewindow` package decides it: an instant is inside when its
//! weekday *in the window's zone* is one of `--reboot-days` and its wall-clock time is within
//! `[--start-time, --end-time]`, both ends included (the end to its last nanosecond). When the
//! start is after the end, the window wraps midnight and each listed day owns two pieces: from
//! its midnight to the end, and from the start to its next midnight; two listed days in a row
//! thus join. rollboot's windows are a cron start and a real duration, merged where they
//! touch: the same openings, one or two windows per kured window. Where the zone changes its
//! clocks, a rollboot window lasts its real duration on that day, so its end moves by the
//! shift while kured's stays at the same wall-clock time (said in a note).
//!
//! - [`flags`]: kured's flags as its parser reads them, from a flag list or a manifest;
//! - [`window`]: kured's time window rule and its rollboot windows;
//! - [`sections`]: each group of kured's flags as one section of the rollboot config.

mod flags;
mod sections;
mod window;

pub use flags::{
    flags_of_manifest, go_duration, parse_day, parse_flags, parse_time, shell_words, Flags,
};
pub use window::{FlagNote, KuredWindow};

use serde::Serialize;
use serde_json::{Map, Value};

/// What cannot be migrated at all: input that kured itself would refuse, or no kured in it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MigrateError {
    /// The manifest is not YAML.
    #[error("{file}: not a YAML manifest: {reason}")]
    Yaml {
        /// The file (`-` for standard input).
        file: String,
        /// Why.
        reason: String,
    },
    /// No DaemonSet runs kured.
    #[error("{0}: no kured DaemonSet in it (a DaemonSet with a container named kured, or running a kured image)")]
    NoKured(String),
    /// A flag kured would refuse.
    #[error("--{flag}: {reason}")]
    Flag {
        /// The flag, without its dashes.
        flag: String,
        /// Why.
        reason: String,
    },
    /// A flag list that does not split into words (an unclosed quote).
    #[error("the flag list does not split into words: {0}")]
    Words(String),
}

fn flag_err(flag: &str, reason: impl Into<String>) -> MigrateError {
    MigrateError::Flag {
        flag: flag.into(),
        reason: reason.into(),
    }
}

/// A kured flag not carried over, or carried with a difference, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Note {
    /// The flag (`--reboot-days`), or `drain` for what kured's drain does without a flag.
    pub flag: String,
    /// Why, in a sentence or two.
    pub note: String,
}

/// The config and its notes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Migration {
    /// The rollboot config document (only the keys kured's settings decide).
    pub config: Value,
    /// Every flag not carried over or carried with a difference.
    pub notes: Vec<Note>,
}

impl Migration {
    /// The config as YAML, which `rollboot check-config` accepts as it is.
    pub fn yaml(&self) -> String {
        yaml_serde::to_string(&self.config).expect("a JSON document is YAML")
    }
}

/// The rollboot config of kured's `flags`, with the notes of what was not carried over: each
/// group of flags is one section of the config, in the order of kured's documentation.
pub fn migrate(flags: &Flags) -> Result<Migration, MigrateError> {
    let mut notes = sections::Notes::default();
    let mut config = Map::new();
    let mut put = |key: &str, section: Option<Value>| {
        if let Some(value) = section {
            config.insert(key.into(), value);
        }
    };
    put("windows", sections::windows(flags, &mut notes)?);
    put("concurrency", sections::concurrency(flags)?);
    put("drain", sections::drain(flags, &mut notes)?);
    put("reboot", sections::reboot(flags, &mut notes)?);
    put("blockers", sections::blockers(flags, &mut notes)?);
    put("hooks", sections::hooks(flags)?);
    put("notifications", sections::notifications(flags, &mut notes));
    sections::not_needed(flags, &mut notes);
    Ok(Migration {
        config: Value::Object(config),
        notes: notes.into_vec(),
    })
}

/// `--flags` text, a manifest, or both (the manifest's first, then the list's), migrated; the
/// notes of unknown flags first.
pub fn migrate_inputs(
    manifest: Option<(&str, &str)>,
    flag_list: Option<&str>,
) -> Result<Migration, MigrateError> {
    let mut args = Vec::new();
    if let Some((text, file)) = manifest {
        args.extend(flags_of_manifest(text, file)?);
    }
    if let Some(list) = flag_list {
        args.extend(shell_words(list)?);
    }
    let (flags, mut notes) = parse_flags(&args)?;
    let mut m = migrate(&flags)?;
    notes.append(&mut m.notes);
    m.notes = notes;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::sections::host_run_path;
    use super::*;

    fn flags(list: &str) -> Flags {
        parse_flags(&shell_words(list).unwrap()).unwrap().0
    }

    #[test]
    fn words_split_as_a_shell_splits_them() {
        assert_eq!(
            shell_words(r#"--a=1 --b "x y" --c='p q' --d=\" e\ f"#).unwrap(),
            vec!["--a=1", "--b", "x y", "--c=p q", "--d=\"", "e f"]
        );
        assert!(shell_words("--a 'x").is_err());
    }

    #[test]
    fn times_and_days_read_as_kured_reads_them() {
        assert_eq!(parse_time("0:00"), Ok(0));
        assert_eq!(parse_time("23:59:59"), Ok(86_399));
        assert_eq!(parse_time("2"), Ok(7200));
        assert_eq!(parse_time("03pm"), Ok(15 * 3600));
        assert_eq!(parse_time("3pm"), Ok(15 * 3600));
        assert_eq!(parse_time("12am"), Ok(0));
        assert_eq!(parse_time("10:30pm"), Ok(22 * 3600 + 1800));
        assert!(parse_time("24:00").is_err());
        assert!(parse_time("9:5").is_err());
        assert_eq!(parse_day("Mon"), Ok(1));
        assert_eq!(parse_day("sunday"), Ok(0));
        assert_eq!(parse_day("6"), Ok(6));
        assert!(parse_day("7").is_err() && parse_day("funday").is_err());
        assert_eq!(go_duration("1h30m"), Ok(5_400_000));
        assert_eq!(go_duration("1.5s"), Ok(1500));
        assert_eq!(go_duration("0"), Ok(0));
        assert!(go_duration("5").is_err());
    }

    #[test]
    fn flags_take_values_inline_or_next_and_slices_add_up() {
        let (f, notes) = parse_flags(
            &shell_words(
                "--reboot-days=mo,tu --reboot-days we --force-reboot --concurrency 2 --bogus=1",
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(f.list("reboot-days").unwrap(), ["mo", "tu", "we"]);
        assert!(f.bool("force-reboot").unwrap());
        assert_eq!(f.int("concurrency").unwrap(), Some(2));
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].flag, "--bogus");
        assert_eq!(
            parse_flags(&["--period".to_string()]),
            Err(flag_err("period", "needs a value"))
        );
    }

    #[test]
    fn a_window_across_midnight_is_two_windows_that_join_on_consecutive_days() {
        let w = KuredWindow::of(&flags(
            "--reboot-days=mon,tue --start-time=22:00 --end-time=04:00 --time-zone=UTC",
        ))
        .unwrap();
        let (windows, notes) = w.to_rollboot().unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(
            windows,
            vec![
                json!({"schedule": "0 22 * * mon,tue", "duration": "2h", "timezone": "UTC"}),
                json!({"schedule": "0 0 * * mon,tue", "duration": "4h1s", "timezone": "UTC"}),
            ]
        );
        let t = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        // 2026-11-30 is a Monday.
        assert!(
            w.contains(t("2026-11-30T01:00:00Z")),
            "Monday's early piece"
        );
        assert!(w.contains(t("2026-11-30T23:00:00Z")));
        assert!(
            w.contains(t("2026-12-01T04:00:00.999Z")),
            "the end's last instant"
        );
        assert!(!w.contains(t("2026-12-01T04:00:01Z")));
        assert!(
            !w.contains(t("2026-12-02T01:00:00Z")),
            "Wednesday is not listed"
        );
    }

    #[test]
    fn the_default_window_is_no_window_and_every_day_all_day_stays_open() {
        let (windows, _) = KuredWindow::of(&Flags::default())
            .unwrap()
            .to_rollboot()
            .unwrap();
        assert!(windows.is_empty());
    }

    #[test]
    fn a_manifest_gives_its_container_s_command_args_and_environment() {
        let text = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: kured}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kured, namespace: kube-system}
spec:
  template:
    spec:
      containers:
        - name: kured
          image: ghcr.io/kubereboot/kured:1.17.1
          command: [/usr/bin/kured, --period=30m]
          args: [--reboot-days=sat]
          env:
            - name: KURED_NODE_ID
              valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
            - name: KURED_CONCURRENCY
              value: "3"
"#;
        assert_eq!(
            flags_of_manifest(text, "kured-ds.yaml").unwrap(),
            vec!["--period=30m", "--reboot-days=sat", "--concurrency=3"]
        );
        assert_eq!(
            flags_of_manifest("kind: ConfigMap\n", "x.yaml"),
            Err(MigrateError::NoKured("x.yaml".into()))
        );
    }

    #[test]
    fn kureds_host_sentinel_path_becomes_where_the_agent_sees_it() {
        let sentinel = |flag: &str| {
            let m = migrate_inputs(None, Some(flag)).unwrap();
            let yaml = yaml_serde::to_string(&m.config).unwrap();
            let c = crate::config::parse_str(&yaml).unwrap_or_else(|p| panic!("{p:?}\n{yaml}"));
            let noted = m.notes.iter().any(|n| n.flag.contains("reboot-sentinel"));
            (c.reboot.sentinel_file, c.reboot.sentinel_command, noted)
        };
        // Under the host's /var/run (= /run): the agent's mount of it.
        let (file, cmd, noted) = sentinel("--reboot-sentinel=/var/run/reboot-required");
        assert_eq!(
            (file.as_str(), cmd, noted),
            ("/host/var/run/reboot-required", None, false)
        );
        let (file, _, _) = sentinel("--reboot-sentinel=/run/upgrades/reboot-needed");
        assert_eq!(file, "/host/var/run/upgrades/reboot-needed");
        // Anywhere else on the host: tested there, in its mount namespace, and said.
        let (_, cmd, noted) = sentinel("--reboot-sentinel=/etc/needs-reboot");
        assert_eq!(
            cmd,
            Some(vec![
                "test".to_string(),
                "-e".into(),
                "/etc/needs-reboot".into()
            ])
        );
        assert!(noted);
        assert_eq!(host_run_path("/var/run/../etc/x"), None);
    }

    #[test]
    fn the_migration_loads_as_a_rollboot_config_and_notes_what_it_left() {
        let m = migrate_inputs(
            None,
            Some(
                "--reboot-days=mon,tue,wed --start-time=22:00 --end-time=04:00 --time-zone=Europe/Berlin \
                 --period=30m --concurrency=2 --drain-grace-period=60 --drain-timeout=20m \
                 --blocking-pod-selector=app=backup --blocking-pod-selector=job=etl \
                 --prometheus-url=http://prom:9090 --alert-filter-regexp=^Watchdog$ --alert-firing-only \
                 --pre-reboot-node-labels=maint=true --post-reboot-node-labels=maint=false \
                 --prefer-no-schedule-taint=example.com/reboot --reboot-sentinel-command='test -f /run/x' \
                 --reboot-delay=90s --slack-hook-url=https://hooks.slack.com/services/T/B/X \
                 --message-template-uncordon='%s is back' --lock-ttl=30m --force-reboot",
            ),
        )
        .unwrap();
        let yaml = yaml_serde::to_string(&m.config).unwrap();
        let c = crate::config::parse_str(&yaml).unwrap_or_else(|p| panic!("{p:?}\n{yaml}"));
        assert_eq!(c.concurrency.max_nodes, 2);
        assert_eq!(c.windows.as_ref().map(|w| w.len()), Some(2));
        assert_eq!(c.reboot.check_period.to_string(), "30m");
        assert_eq!(c.drain.timeout.to_string(), "20m");
        assert_eq!(c.drain.settle.map(|d| d.to_string()), Some("1m30s".into()));
        assert!(c.drain.evict_unreplicated && c.drain.delete_empty_dir_data);
        assert_eq!(c.blockers.pod_selectors, ["app=backup", "job=etl"]);
        assert_eq!(
            c.reboot.sentinel_command,
            Some(vec!["test".to_string(), "-f".into(), "/run/x".into()])
        );
        let noted: BTreeSet<&str> = m.notes.iter().map(|n| n.flag.as_str()).collect();
        for f in [
            "--lock-ttl",
            "--force-reboot",
            "--slack-hook-url",
            "--time-zone",
            "drain",
        ] {
            assert!(noted.contains(f), "{f} not noted: {noted:?}");
        }
        // The Slack URL is not in the config.
        assert!(!yaml.contains("hooks.slack.com"), "{yaml}");
    }
}
