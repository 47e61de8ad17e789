//! `rollboot check-config`'s report: a valid file's effective settings and next maintenance
//! openings ([`Checked`]), or every problem of an invalid one ([`Invalid`]), each one value
//! with a text form ([`Render`]) and a JSON form (its serialization).
//!
//! Owns what check-config says and how it lays it out. It is pure: the caller loads the file
//! and passes the instant to look from; it must never read a file or the clock, nor print.
//! Its JSON keys are in alphabetical order, as check-config has always printed them (the
//! object was a `serde_json::Value`, whose maps are sorted): the fields of its types are
//! declared in that order, and the nested config and problems are written with
//! [`sorted_keys`].

use std::fmt::Write as _;
use std::path::Path;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Serialize, Serializer};

use super::{BlockCause, BlockPolicy, Config, Duration, NodeOrder, Problem, RebootMethod};
use crate::render::{instant, sorted_keys, Render};
use crate::windows;

/// A valid config file: its settings and its next maintenance openings from an instant.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Checked<'a> {
    /// Maintenance may start at `from`.
    pub allowed_now: bool,
    /// The effective config, every default filled in.
    #[serde(serialize_with = "sorted_keys")]
    pub config: &'a Config,
    /// The file, as given.
    pub file: &'a Path,
    /// The instant the openings are looked for from.
    pub from: DateTime<Utc>,
    /// The next openings from `from`.
    pub openings: Vec<LocalOpening>,
    /// Always true.
    pub valid: bool,
}

/// One maintenance opening, with its window's local times.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalOpening {
    /// Its end; `None` when unbounded (always-open schedules).
    #[serde(serialize_with = "whole_seconds")]
    pub end: Option<DateTime<Utc>>,
    /// Its end in its window's zone (RFC 3339 with offset), when both are known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_local: Option<String>,
    /// Its first instant; `None` when unbounded.
    #[serde(serialize_with = "whole_seconds")]
    pub start: Option<DateTime<Utc>>,
    /// Its first instant in its window's zone, when both are known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_local: Option<String>,
    /// The zone of its window; `None` without windows.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "zone_name")]
    pub timezone: Option<Tz>,
    /// Index of the configured window that opens it (0 without windows).
    pub window: usize,
}

/// An invalid config file: every problem found in it.
#[derive(Debug, Serialize)]
pub struct Invalid<'a> {
    /// The problems, in file order.
    #[serde(serialize_with = "sorted_keys")]
    pub errors: &'a [Problem],
    /// The file, as given.
    pub file: &'a Path,
    /// Always false.
    pub valid: bool,
}

impl<'a> Checked<'a> {
    /// The report on `config`, read from `file`: the next `next` openings from `from`.
    pub fn new(file: &'a Path, config: &'a Config, from: DateTime<Utc>, next: usize) -> Self {
        let schedule = config.schedule();
        Checked {
            allowed_now: schedule.is_allowed(from),
            config,
            file,
            from,
            openings: schedule
                .openings(from, next)
                .iter()
                .map(|o| LocalOpening::new(config, o))
                .collect(),
            valid: true,
        }
    }
}

impl<'a> Invalid<'a> {
    /// The report on `file`, whose content has these `problems`.
    pub fn new(file: &'a Path, problems: &'a [Problem]) -> Self {
        Invalid {
            errors: problems,
            file,
            valid: false,
        }
    }
}

impl LocalOpening {
    fn new(config: &Config, o: &windows::Opening) -> LocalOpening {
        let bounded = |t: DateTime<Utc>| (!is_unbounded(t)).then_some(t);
        let (start, end) = (bounded(o.start), bounded(o.end));
        let timezone = config
            .windows
            .as_ref()
            .and_then(|ws| ws.get(o.window))
            .and_then(|w| w.timezone.parse::<Tz>().ok());
        let local = |t: Option<DateTime<Utc>>| Some(t?.with_timezone(&timezone?).to_rfc3339());
        LocalOpening {
            end,
            end_local: local(end),
            start,
            start_local: local(start),
            timezone,
            window: o.window,
        }
    }

    /// One line: UTC start and end, length, and the window with its local times.
    fn text(&self) -> String {
        let utc = |t: Option<DateTime<Utc>>| match t {
            None => "(unbounded)".to_string(),
            Some(t) => t.format("%Y-%m-%d %H:%M UTC").to_string(),
        };
        let (Some(start), Some(end)) = (self.start, self.end) else {
            return format!(
                "{} -> {}  (no window configured: open at any time outside blackouts)",
                utc(self.start),
                utc(self.end)
            );
        };
        let mut s = format!(
            "{} -> {}  ({})",
            utc(self.start),
            utc(self.end),
            Duration::from_millis((end - start).num_milliseconds())
        );
        match self.timezone {
            // Local times only where they differ from the UTC ones just printed.
            Some(tz) if tz != chrono_tz::UTC => {
                let local =
                    |t: DateTime<Utc>| t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string();
                let _ = write!(
                    s,
                    "  window {} ({}): {} -> {}",
                    self.window,
                    tz.name(),
                    local(start),
                    local(end)
                );
            }
            _ => {
                let _ = write!(s, "  window {}", self.window);
            }
        }
        s
    }
}

impl Render for Checked<'_> {
    fn text(&self) -> String {
        let mut out = format!("{}: valid\n", self.file.display());
        summary(&mut out, self.config);
        let _ = writeln!(
            out,
            "\nmaintenance {} at {}",
            if self.allowed_now {
                "allowed"
            } else {
                "not allowed"
            },
            instant(self.from)
        );
        let _ = match self.openings.len() {
            1 => writeln!(out, "next opening:"),
            n => writeln!(out, "next {n} openings:"),
        };
        for o in &self.openings {
            let _ = writeln!(out, "  {}", o.text());
        }
        if self.openings.is_empty() {
            let _ = writeln!(out, "  (none in the look-ahead horizon)");
        }
        out
    }
}

impl Render for Invalid<'_> {
    /// What the loader says of the file (see [`super::ConfigError::Invalid`]).
    fn text(&self) -> String {
        format!(
            "{}\n",
            super::load::invalid(self.file.display(), self.errors)
        )
    }
}

/// The effective settings, one line per section.
fn summary(out: &mut String, c: &Config) {
    match &c.windows {
        None => {
            let _ = writeln!(out, "windows:      none (maintenance allowed at any time)");
        }
        Some(ws) => {
            for (i, w) in ws.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "window {i}:     `{}` for {} ({})",
                    w.schedule, w.duration, w.timezone
                );
            }
        }
    }
    let _ = writeln!(out, "blackouts:    {}", c.blackouts.len());
    let _ = write!(
        out,
        "concurrency:  {} node(s) at once",
        c.concurrency.max_nodes
    );
    if let Some((key, n)) = c.group_limit() {
        let _ = write!(out, ", {n} per `{key}`");
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "nodes:        {} ({})",
        if c.nodes.selector.is_empty() {
            "all"
        } else {
            &c.nodes.selector
        },
        match c.nodes.order {
            NodeOrder::OldestFlag => "oldest flag first",
            NodeOrder::Name => "by name",
        }
    );
    drain_and_reboot(out, c);
    let _ = writeln!(
        out,
        "leases:       lock {}/{}, leader {}/{} ({} lease, {} renew deadline)",
        c.lock.namespace,
        c.lock.name,
        c.leader.namespace,
        c.leader.name,
        c.leader.lease_duration,
        c.leader.renew_deadline
    );
    let _ = writeln!(
        out,
        "failures:     rollout halts after {} failed node(s)",
        c.failures.max_failures + 1
    );
}

/// The `drain:` and `reboot:` lines of the summary.
fn drain_and_reboot(out: &mut String, c: &Config) {
    let _ = writeln!(
        out,
        "drain:        timeout {}, retry every {}, {} evictions at once{}{}",
        c.drain.timeout,
        c.drain.eviction_retry_interval,
        c.drain.concurrent_evictions,
        if c.drain.force_delete_after_timeout {
            ", FORCE-DELETES after timeout"
        } else {
            ""
        },
        if c.drain.evict_unreplicated {
            ", evicts unreplicated pods"
        } else {
            ""
        }
    );
    let when = |cause| match c
        .drain
        .when_blocked
        .policy(cause, c.drain.force_delete_after_timeout)
    {
        BlockPolicy::Wait => "waits",
        BlockPolicy::Fail => "fails at once",
        BlockPolicy::Quarantine => "quarantines at once",
    };
    let _ = writeln!(
        out,
        "blocked:      a budget at 0 now {}; a budget that never allows {}; an eviction denied 3 times {}; a pod terminating past its grace + {} {}",
        when(BlockCause::Budget),
        when(BlockCause::Never),
        when(BlockCause::Denied),
        c.drain.stuck_after,
        when(BlockCause::Stuck)
    );
    let _ = writeln!(
        out,
        "reboot:       {} method, timeout {}, sentinel {}",
        match c.reboot.method {
            RebootMethod::Command => "command",
            RebootMethod::Signal => "signal",
        },
        c.reboot.timeout,
        match &c.reboot.sentinel_command {
            Some(cmd) => format!("command `{}`", cmd.join(" ")),
            None => format!("file {}", c.reboot.sentinel_file),
        }
    );
}

/// Always-open schedules have openings without a start or an end (chrono's extreme instants).
fn is_unbounded(t: DateTime<Utc>) -> bool {
    t == DateTime::<Utc>::MAX_UTC || t == DateTime::<Utc>::MIN_UTC
}

/// An instant of an opening in whole seconds (`null` when unbounded).
fn whole_seconds<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&instant(*t)),
        None => s.serialize_none(),
    }
}

/// A zone by its IANA name.
fn zone_name<S: Serializer>(tz: &Option<Tz>, s: S) -> Result<S::Ok, S::Error> {
    match tz {
        Some(tz) => s.serialize_str(tz.name()),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{render, Output};

    fn t(s: &str) -> DateTime<Utc> {
        crate::time::parse_annotation(s).unwrap()
    }

    #[test]
    fn an_opening_of_a_zoned_window_has_its_local_times_and_keys_in_order() {
        let c = super::super::parse_str(
            "windows: [{schedule: '0 2 * * *', duration: 4h, timezone: Europe/Berlin}]",
        )
        .unwrap();
        let r = Checked::new(Path::new("c.yaml"), &c, t("2026-11-20T00:30:00Z"), 1);
        let json = serde_json::to_string(&r.openings).unwrap();
        assert_eq!(
            json,
            r#"[{"end":"2026-11-20T05:00:00Z","endLocal":"2026-11-20T06:00:00+01:00","start":"2026-11-20T01:00:00Z","startLocal":"2026-11-20T02:00:00+01:00","timezone":"Europe/Berlin","window":0}]"#
        );
        assert!(render(&r, Output::Text).ends_with(
            "next opening:\n  2026-11-20 01:00 UTC -> 2026-11-20 05:00 UTC  (4h)  window 0 (Europe/Berlin): 2026-11-20 02:00 CET -> 2026-11-20 06:00 CET\n"
        ));
    }

    #[test]
    fn without_windows_the_one_opening_is_unbounded() {
        let c = super::super::parse_str("{}").unwrap();
        let r = Checked::new(Path::new("c.yaml"), &c, t("2026-11-20T00:30:00Z"), 5);
        let json = serde_json::to_string(&r.openings).unwrap();
        assert_eq!(json, r#"[{"end":null,"start":null,"window":0}]"#);
        let text = render(&r, Output::Text);
        assert!(
            text.starts_with("c.yaml: valid\nwindows:      none"),
            "{text}"
        );
        assert!(text.ends_with(
            "maintenance allowed at 2026-11-20T00:30:00Z\nnext opening:\n  (unbounded) -> (unbounded)  (no window configured: open at any time outside blackouts)\n"
        ), "{text}");
    }
}
