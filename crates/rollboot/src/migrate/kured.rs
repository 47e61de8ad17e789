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

use std::collections::{BTreeMap, BTreeSet};

use chrono::{Datelike, NaiveDate, NaiveTime, TimeZone, Timelike};
use chrono_tz::Tz;
use serde::Serialize;
use serde_json::{json, Map, Value};

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

/// Where the agent sees the host's file `path`, when it is under the host's `/var/run` (or
/// `/run`, which `/var/run` leads to on every systemd host): under `/host/var/run`, where the
/// agent's DaemonSet mounts it.
fn host_run_path(path: &str) -> Option<String> {
    let rest = path
        .strip_prefix("/var/run/")
        .or_else(|| path.strip_prefix("/run/"))?;
    (!rest.is_empty() && !rest.split('/').any(|p| p == ".."))
        .then(|| format!("/host/var/run/{rest}"))
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Str,
    Bool,
    Int,
    Dur,
    /// pflag's StringSlice: comma-separated, repeatable.
    Slice,
    /// pflag's StringArray: repeatable, taken whole.
    Array,
}

/// kured's flags (cmd/kured/main.go).
const FLAGS: &[(&str, Kind)] = &[
    ("node-id", Kind::Str),
    ("force-reboot", Kind::Bool),
    ("metrics-host", Kind::Str),
    ("metrics-port", Kind::Int),
    ("drain-grace-period", Kind::Int),
    ("drain-pod-selector", Kind::Str),
    ("skip-wait-for-delete-timeout", Kind::Int),
    ("drain-delay", Kind::Dur),
    ("drain-timeout", Kind::Dur),
    ("reboot-delay", Kind::Dur),
    ("reboot-method", Kind::Str),
    ("period", Kind::Dur),
    ("ds-namespace", Kind::Str),
    ("ds-name", Kind::Str),
    ("lock-annotation", Kind::Str),
    ("lock-ttl", Kind::Dur),
    ("lock-release-delay", Kind::Dur),
    ("prometheus-url", Kind::Str),
    ("alert-filter-regexp", Kind::Str),
    ("alert-filter-match-only", Kind::Bool),
    ("alert-firing-only", Kind::Bool),
    ("reboot-sentinel", Kind::Str),
    ("prefer-no-schedule-taint", Kind::Str),
    ("reboot-sentinel-command", Kind::Str),
    ("reboot-command", Kind::Str),
    ("concurrency", Kind::Int),
    ("reboot-signal", Kind::Int),
    ("slack-hook-url", Kind::Str),
    ("slack-username", Kind::Str),
    ("slack-channel", Kind::Str),
    ("notify-url", Kind::Str),
    ("message-template-uncordon", Kind::Str),
    ("message-template-drain", Kind::Str),
    ("message-template-reboot", Kind::Str),
    ("blocking-pod-selector", Kind::Array),
    ("reboot-days", Kind::Slice),
    ("start-time", Kind::Str),
    ("end-time", Kind::Str),
    ("time-zone", Kind::Str),
    ("annotate-nodes", Kind::Bool),
    ("log-format", Kind::Str),
    ("pre-reboot-node-labels", Kind::Slice),
    ("post-reboot-node-labels", Kind::Slice),
];

fn kind_of(flag: &str) -> Option<Kind> {
    FLAGS.iter().find(|(f, _)| *f == flag).map(|(_, k)| *k)
}

/// kured's settings as given (flags not given are absent; kured's defaults apply).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    values: BTreeMap<String, Vec<String>>,
}

impl Flags {
    fn set(&mut self, flag: &str, kind: Kind, value: &str) {
        let slot = self.values.entry(flag.to_string()).or_default();
        match kind {
            Kind::Slice => slot.extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
                    .map(String::from),
            ),
            Kind::Array => slot.push(value.to_string()),
            _ => *slot = vec![value.to_string()],
        }
    }

    fn given(&self, flag: &str) -> bool {
        self.values.contains_key(flag)
    }

    fn str(&self, flag: &str) -> Option<&str> {
        self.values
            .get(flag)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    fn list(&self, flag: &str) -> Option<&[String]> {
        self.values.get(flag).map(Vec::as_slice)
    }

    fn bool(&self, flag: &str) -> Result<bool, MigrateError> {
        match self.str(flag) {
            None => Ok(false),
            Some(v) => {
                parse_bool(v).ok_or_else(|| flag_err(flag, format!("`{v}` is not a boolean")))
            }
        }
    }

    fn int(&self, flag: &str) -> Result<Option<i64>, MigrateError> {
        self.str(flag)
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| flag_err(flag, format!("`{v}` is not a whole number")))
            })
            .transpose()
    }

    fn millis(&self, flag: &str) -> Result<Option<i64>, MigrateError> {
        self.str(flag)
            .map(|v| go_duration(v).map_err(|why| flag_err(flag, why)))
            .transpose()
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Splits a command or flag list into words as a POSIX shell does: blanks separate, single
/// quotes keep everything, double quotes keep all but `\"` and `\\`, a backslash outside
/// quotes escapes the next character.
pub fn shell_words(text: &str) -> Result<Vec<String>, MigrateError> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err(MigrateError::Words(format!("unclosed ' in `{text}`"))),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => {
                                return Err(MigrateError::Words(format!("unclosed \" in `{text}`")))
                            }
                        },
                        Some(c) => cur.push(c),
                        None => {
                            return Err(MigrateError::Words(format!("unclosed \" in `{text}`")))
                        }
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    cur.push(c);
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// The flags of the kured container in a manifest (one or more YAML documents, a `List`'s
/// items included): its command after the program, its args, and each `KURED_<FLAG>`
/// environment variable with a value (kured reads them after its flags). `file` names the
/// input in errors.
pub fn flags_of_manifest(text: &str, file: &str) -> Result<Vec<String>, MigrateError> {
    let mut docs = Vec::new();
    for doc in yaml_serde::Deserializer::from_str(text) {
        let v =
            <Value as serde::Deserialize>::deserialize(doc).map_err(|e| MigrateError::Yaml {
                file: file.into(),
                reason: e.to_string(),
            })?;
        match v["items"].as_array() {
            Some(items) if v["kind"] == "List" => docs.extend(items.iter().cloned()),
            _ => docs.push(v),
        }
    }
    for d in &docs {
        if d["kind"] != "DaemonSet" {
            continue;
        }
        let containers = d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let Some(c) = containers.iter().find(|c| {
            c["name"] == "kured" || c["image"].as_str().is_some_and(|i| i.contains("kured"))
        }) else {
            continue;
        };
        let words = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|w| w.as_str().map(String::from))
                .collect()
        };
        let mut flags: Vec<String> = words(&c["command"])
            .into_iter()
            .skip_while(|w| !w.starts_with('-'))
            .collect();
        flags.extend(words(&c["args"]));
        for e in c["env"].as_array().into_iter().flatten() {
            let (Some(name), Some(value)) = (e["name"].as_str(), e["value"].as_str()) else {
                continue;
            };
            if let Some(flag) = name.strip_prefix("KURED_") {
                let flag = flag.to_ascii_lowercase().replace('_', "-");
                if kind_of(&flag).is_some() && flag != "node-id" {
                    flags.push(format!("--{flag}={value}"));
                }
            }
        }
        return Ok(flags);
    }
    Err(MigrateError::NoKured(file.into()))
}

/// Reads kured's flags as its flag parser does; an unknown flag is a note, not an error
/// (kured would refuse it, but what it was meant to do is the operator's to say).
pub fn parse_flags(args: &[String]) -> Result<(Flags, Vec<Note>), MigrateError> {
    let mut flags = Flags::default();
    let mut notes = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            notes.push(Note {
                flag: arg.clone(),
                note: "not a flag (kured takes no positional argument): ignored".into(),
            });
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let Some(kind) = kind_of(name) else {
            notes.push(Note {
                flag: format!("--{name}"),
                note: "not a flag of kured: not carried over".into(),
            });
            continue;
        };
        let value = match (kind, inline) {
            (_, Some(v)) => v,
            (Kind::Bool, None) => "true".into(),
            (_, None) => {
                let Some(v) = args.get(i) else {
                    return Err(flag_err(name, "needs a value"));
                };
                i += 1;
                v.clone()
            }
        };
        flags.set(name, kind, &value);
    }
    Ok((flags, notes))
}

/// A Go duration (`time.ParseDuration`: `1h30m`, `1.5h`, `300ms`, `0`), in milliseconds.
pub fn go_duration(text: &str) -> Result<i64, String> {
    let s = text.trim();
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(format!("`{text}` is not a duration"));
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..n]
            .parse()
            .map_err(|_| format!("`{text}` is not a duration (such as 90s, 1h30m)"))?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let ms = match &rest[..u] {
            "ns" => 1e-6,
            "us" | "µs" | "μs" => 1e-3,
            "ms" => 1.0,
            "s" => 1e3,
            "m" => 6e4,
            "h" => 3.6e6,
            "" => return Err(format!("`{text}`: a number without a unit")),
            other => return Err(format!("`{text}`: unknown unit `{other}`")),
        };
        rest = &rest[u..];
        total += number * ms;
    }
    let ms = total.round() as i64;
    Ok(if neg { -ms } else { ms })
}

/// A time of day as kured reads `--start-time`/`--end-time` (Go layouts `15:04`, `15:04:05`,
/// `03:04pm`, `15`, `03pm`, `3pm`), in seconds after midnight.
pub fn parse_time(text: &str) -> Result<u32, String> {
    let t = text.trim();
    let bad = || {
        format!(
            "`{text}` is not a time of day kured reads (15:04, 15:04:05, 03:04pm, 15, 03pm, 3pm)"
        )
    };
    let num = |s: &str, min_len: usize, max_len: usize, max: u32| -> Option<u32> {
        (s.len() >= min_len && s.len() <= max_len && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
            .filter(|n| *n <= max)
    };
    let (body, pm) = match (t.strip_suffix("pm"), t.strip_suffix("am")) {
        (Some(b), _) => (b, Some(true)),
        (_, Some(b)) => (b, Some(false)),
        _ => (t, None),
    };
    let parts: Vec<&str> = body.split(':').collect();
    let (h, m, s) = match (pm, parts.as_slice()) {
        (None, [h]) => (num(h, 1, 2, 23).ok_or_else(bad)?, 0, 0),
        (None, [h, m]) => (
            num(h, 1, 2, 23).ok_or_else(bad)?,
            num(m, 2, 2, 59).ok_or_else(bad)?,
            0,
        ),
        (None, [h, m, s]) => (
            num(h, 1, 2, 23).ok_or_else(bad)?,
            num(m, 2, 2, 59).ok_or_else(bad)?,
            num(s, 2, 2, 59).ok_or_else(bad)?,
        ),
        (Some(pm), [h]) => (hour12(num(h, 1, 2, 12).ok_or_else(bad)?, pm), 0, 0),
        (Some(pm), [h, m]) => (
            hour12(num(h, 2, 2, 12).ok_or_else(bad)?, pm),
            num(m, 2, 2, 59).ok_or_else(bad)?,
            0,
        ),
        _ => return Err(bad()),
    };
    Ok(h * 3600 + m * 60 + s)
}

fn hour12(h: u32, pm: bool) -> u32 {
    match (pm, h) {
        (true, h) if h < 12 => h + 12,
        (false, 12) => 0,
        (_, h) => h,
    }
}

/// A weekday as kured reads `--reboot-days` (`su`, `sun`, `sunday`... any case, or 0-6 from
/// Sunday), 0 for Sunday.
pub fn parse_day(text: &str) -> Result<u32, String> {
    let t = text.trim().to_ascii_lowercase();
    if let Ok(n) = t.parse::<u32>() {
        return if n < 7 {
            Ok(n)
        } else {
            Err(format!("`{text}`: a day number is 0 (Sunday) to 6"))
        };
    }
    const NAMES: [[&str; 3]; 7] = [
        ["su", "sun", "sunday"],
        ["mo", "mon", "monday"],
        ["tu", "tue", "tuesday"],
        ["we", "wed", "wednesday"],
        ["th", "thu", "thursday"],
        ["fr", "fri", "friday"],
        ["sa", "sat", "saturday"],
    ];
    NAMES
        .iter()
        .position(|names| names.contains(&t.as_str()))
        .map(|i| i as u32)
        .ok_or_else(|| format!("`{text}` is not a weekday kured reads (su, mon, tuesday, 0-6...)"))
}

/// A note about a flag, before it becomes a [`Note`]: (flag without dashes, text).
pub type FlagNote = (&'static str, String);

/// kured's time window: days (0 = Sunday), start and end in seconds after midnight, zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KuredWindow {
    /// The weekdays, 0 for Sunday.
    pub days: BTreeSet<u32>,
    /// Start, seconds after midnight (included).
    pub start: u32,
    /// End, seconds after midnight (included to its last nanosecond).
    pub end: u32,
    /// The zone.
    pub tz: Tz,
}

impl KuredWindow {
    /// The window of kured's four flags (their defaults where absent).
    pub fn of(flags: &Flags) -> Result<KuredWindow, MigrateError> {
        let days = match flags.list("reboot-days") {
            Some(list) => list
                .iter()
                .map(|d| parse_day(d).map_err(|why| flag_err("reboot-days", why)))
                .collect::<Result<BTreeSet<u32>, _>>()?,
            None => (0..7).collect(),
        };
        if days.is_empty() {
            return Err(flag_err("reboot-days", "no day: kured would never reboot"));
        }
        let start = parse_time(flags.str("start-time").unwrap_or("0:00"))
            .map_err(|why| flag_err("start-time", why))?;
        let end = parse_time(flags.str("end-time").unwrap_or("23:59:59"))
            .map_err(|why| flag_err("end-time", why))?;
        let zone = flags.str("time-zone").unwrap_or("UTC");
        let tz: Tz = zone.parse().map_err(|_| {
            flag_err(
                "time-zone",
                format!("`{zone}` is not an IANA time zone rollboot knows (kured's `Local` is the host's zone: name it)"),
            )
        })?;
        Ok(KuredWindow {
            days,
            start,
            end,
            tz,
        })
    }

    /// Whether kured's rule lets a reboot start at `t` (its `timewindow.Contains`).
    pub fn contains(&self, t: chrono::DateTime<chrono::Utc>) -> bool {
        let local = t.with_timezone(&self.tz);
        if !self.days.contains(&local.weekday().num_days_from_sunday()) {
            return false;
        }
        // Seconds (and nanoseconds) into the local day's wall clock; the ends are wall-clock
        // times of that day, or of the day before when the window wraps.
        let now = local.time().num_seconds_from_midnight();
        let (start, end) = (self.start, self.end);
        if start > end {
            // Wraps midnight: before the end, the piece that began the day before; else the
            // piece that ends the next day.
            now <= end || now >= start
        } else {
            now >= start && now <= end
        }
    }

    /// rollboot windows with the same openings, and the notes (flag, text) of what differs.
    pub fn to_rollboot(&self) -> Result<(Vec<Value>, Vec<FlagNote>), MigrateError> {
        let mut notes = Vec::new();
        let day_names = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
        let days: Vec<&str> = self.days.iter().map(|d| day_names[*d as usize]).collect();
        let dow = if self.days.len() == 7 {
            "*".to_string()
        } else {
            days.join(",")
        };
        // A cron start is a minute: a start with seconds opens at the next minute.
        let start = self.start.div_ceil(60) * 60;
        if start != self.start {
            notes.push((
                "start-time",
                format!(
                    "rollboot windows start on a minute: {} opens at {} (kured: {})",
                    hms(self.start),
                    hms(start),
                    hms(self.start)
                ),
            ));
        }
        let end = self.end + 1;
        let zone = self.tz.name();
        let window = |at: u32, seconds: u32| {
            json!({
                "schedule": format!("{} {} * * {dow}", at / 60 % 60, at / 3600),
                "duration": crate::config::Duration::from_secs(seconds.into()).to_string(),
                "timezone": zone,
            })
        };
        let windows = if self.start <= self.end {
            if start >= end {
                return Err(flag_err(
                    "end-time",
                    "the window is shorter than a minute once its start is on a minute",
                ));
            }
            if self.days.len() == 7 && start == 0 && end == 86_400 {
                return Ok((Vec::new(), notes));
            }
            vec![window(start, end - start)]
        } else {
            if start >= 86_400 {
                return Err(flag_err(
                    "start-time",
                    "starts in the last minute of the day",
                ));
            }
            vec![window(start, 86_400 - start), window(0, end)]
        };
        if has_dst(self.tz) {
            notes.push(("time-zone", format!(
                "{zone} changes its clocks: on those days a rollboot window lasts its real duration, so it ends an hour later or earlier on the wall clock than kured's window would"
            )));
        }
        Ok((windows, notes))
    }
}

fn hms(s: u32) -> String {
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Whether `tz` has more than one UTC offset over the coming years.
fn has_dst(tz: Tz) -> bool {
    use chrono::Offset;
    let offsets: BTreeSet<i32> = (2026..2029)
        .flat_map(|y| (1..=12).map(move |m| (y, m)))
        .filter_map(|(y, m)| NaiveDate::from_ymd_opt(y, m, 15))
        .map(|d| {
            tz.offset_from_utc_datetime(&d.and_time(NaiveTime::MIN))
                .fix()
                .local_minus_utc()
        })
        .collect();
    offsets.len() > 1
}

/// The label `k=v` of a `--pre-/--post-reboot-node-labels` item.
fn label(flag: &str, item: &str) -> Result<(String, String), MigrateError> {
    item.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| flag_err(flag, format!("`{item}` is not KEY=VALUE")))
}

/// kured's `%s` (the node) as rollboot's `{node}`.
fn template(text: &str) -> String {
    text.replacen("%s", "{node}", 1).replace("%s", "")
}

/// The rollboot config of kured's `flags`, with the notes of what was not carried over.
pub fn migrate(flags: &Flags) -> Result<Migration, MigrateError> {
    let mut notes: Vec<Note> = Vec::new();
    // A kured flag is named with its dashes; what kured does without a flag is not.
    let mut note = |flag: &str, text: String| {
        notes.push(Note {
            flag: if kind_of(flag).is_some() {
                format!("--{flag}")
            } else {
                flag.into()
            },
            note: text,
        })
    };
    let mut config = Map::new();

    // Windows.
    let window = KuredWindow::of(flags)?;
    let (windows, window_notes) = window.to_rollboot()?;
    for (flag, n) in window_notes {
        note(flag, n);
    }
    if !windows.is_empty() {
        config.insert("windows".into(), Value::Array(windows));
    }

    // Concurrency.
    if let Some(n) = flags.int("concurrency")? {
        if n < 1 {
            return Err(flag_err("concurrency", format!("{n}: at least 1")));
        }
        config.insert("concurrency".into(), json!({"maxNodes": n}));
    }

    // Drain: kured drains as `kubectl drain --ignore-daemonsets --delete-emptydir-data --force`.
    let mut drain = Map::new();
    drain.insert("evictUnreplicated".into(), json!(true));
    drain.insert("deleteEmptyDirData".into(), json!(true));
    note(
        "drain",
        "kured drains as kubectl drain --force --delete-emptydir-data: kept (evictUnreplicated, deleteEmptyDirData); set them false to have rollboot refuse such nodes instead of losing those pods".into(),
    );
    if let Some(g) = flags.int("drain-grace-period")? {
        if g >= 0 {
            drain.insert("gracePeriod".into(), json!(format!("{g}s")));
        }
    }
    if let Some(sel) = flags.str("drain-pod-selector").filter(|s| !s.is_empty()) {
        drain.insert("podSelector".into(), json!(sel));
    }
    match flags.millis("drain-timeout")? {
        Some(ms) if ms > 0 => {
            drain.insert(
                "timeout".into(),
                json!(crate::config::Duration::from_millis(ms).to_string()),
            );
        }
        _ => note(
            "drain-timeout",
            "kured's drain has no time limit unless given one; rollboot's drain fails the node after drain.timeout (default 15m, kept), so a drain that cannot finish is said rather than waited on forever".into(),
        ),
    }
    if let Some(ms) = flags.millis("reboot-delay")?.filter(|ms| *ms > 0) {
        drain.insert(
            "settle".into(),
            json!(crate::config::Duration::from_millis(ms).to_string()),
        );
    }
    if flags.given("drain-delay") && flags.millis("drain-delay")?.unwrap_or(0) > 0 {
        note(
            "drain-delay",
            "not carried over: rollboot has no fixed wait before a drain; a beforeDrain gate or blocking webhook (hooks) holds the drain until something is ready".into(),
        );
    }
    if flags.int("skip-wait-for-delete-timeout")?.unwrap_or(0) > 0 {
        note(
            "skip-wait-for-delete-timeout",
            "not carried over: rollboot does not stop waiting for a pod stuck terminating; it names it as `stuck` after drain.stuckAfter (2m) and drain.whenBlocked.stuck decides (wait, fail or quarantine)".into(),
        );
    }
    if flags.bool("force-reboot")? {
        note(
            "force-reboot",
            "not carried over: rollboot never reboots a node whose drain failed. drain.forceDeleteAfterTimeout deletes the pods a budget still protects at drain.timeout, if you must".into(),
        );
    }
    config.insert("drain".into(), Value::Object(drain));

    // Reboot: sentinel, period, method.
    let mut reboot = Map::new();
    let period = flags.millis("period")?.unwrap_or(3_600_000);
    if period <= 0 {
        return Err(flag_err("period", "must be positive"));
    }
    reboot.insert(
        "checkPeriod".into(),
        json!(crate::config::Duration::from_millis(period).to_string()),
    );
    if let Some(f) = flags.str("reboot-sentinel") {
        // kured's sentinel is a path on the host; rollboot's agent sees the host's /var/run
        // (= /run) at /host/var/run, and any other host path through a command run in the
        // host's mount namespace.
        match host_run_path(f) {
            Some(seen) => {
                reboot.insert("sentinelFile".into(), json!(seen));
            }
            None => {
                reboot.insert("sentinelCommand".into(), json!(["test", "-e", f]));
                note(
                    "reboot-sentinel",
                    format!("{f} is outside the host's /var/run, which the agent mounts: checked as `test -e {f}` in the host's mount namespace (reboot.sentinelCommand)"),
                );
            }
        }
    }
    if let Some(c) = flags
        .str("reboot-sentinel-command")
        .filter(|c| !c.is_empty())
    {
        let argv = shell_words(c)?;
        reboot.insert("sentinelCommand".into(), json!(argv));
    }
    match flags.str("reboot-method") {
        None | Some("command") => {}
        Some("signal") => {
            reboot.insert("method".into(), json!("signal"));
        }
        Some(m) => {
            return Err(flag_err(
                "reboot-method",
                format!("`{m}`: kured knows command and signal"),
            ))
        }
    }
    if let Some(s) = flags.int("reboot-signal")? {
        reboot.insert("signal".into(), json!(s));
    }
    if let Some(c) = flags.str("reboot-command") {
        let words = shell_words(c)?;
        if words.is_empty() {
            return Err(flag_err("reboot-command", "empty"));
        }
        if words != ["/bin/systemctl", "reboot"] {
            // kured runs it in PID 1's mount namespace, as rollboot's default command does.
            let mut argv: Vec<String> = ["/usr/bin/nsenter", "-m/proc/1/ns/mnt", "--"]
                .map(String::from)
                .to_vec();
            argv.extend(words);
            reboot.insert("command".into(), json!(argv));
        }
    }
    config.insert("reboot".into(), Value::Object(reboot));

    // Blockers.
    let mut blockers = Map::new();
    if let Some(sel) = flags.list("blocking-pod-selector") {
        blockers.insert("podSelectors".into(), json!(sel));
    }
    if let Some(url) = flags.str("prometheus-url").filter(|u| !u.is_empty()) {
        let mut p = Map::new();
        p.insert("url".into(), json!(url));
        if let Some(f) = flags.str("alert-filter-regexp").filter(|f| !f.is_empty()) {
            p.insert("alertFilter".into(), json!(f));
        }
        p.insert("firingOnly".into(), json!(flags.bool("alert-firing-only")?));
        blockers.insert("prometheus".into(), Value::Object(p));
        if flags.bool("alert-filter-match-only")? {
            note(
                "alert-filter-match-only",
                "not carried over: rollboot blocks on every alert its filter does not ignore; to block only on some alerts, write a filter that ignores the others".into(),
            );
        }
    }
    if !blockers.is_empty() {
        config.insert("blockers".into(), Value::Object(blockers));
    }

    // Hooks: labels and the PreferNoSchedule taint.
    let mut hooks = Map::new();
    if let Some(t) = flags
        .str("prefer-no-schedule-taint")
        .filter(|t| !t.is_empty())
    {
        hooks.insert("preferNoScheduleTaint".into(), json!(t));
    }
    for (flag, phase) in [
        ("pre-reboot-node-labels", "beforeDrain"),
        ("post-reboot-node-labels", "afterDone"),
    ] {
        if let Some(items) = flags.list(flag).filter(|l| !l.is_empty()) {
            let labels: Map<String, Value> = items
                .iter()
                .map(|i| label(flag, i).map(|(k, v)| (k, Value::String(v))))
                .collect::<Result<_, _>>()?;
            hooks.insert(phase.into(), json!({"labels": labels}));
        }
    }
    if !hooks.is_empty() {
        config.insert("hooks".into(), Value::Object(hooks));
    }

    // Notifications: a sink where a type fits; the URL stays a secret.
    let mut sinks = Vec::new();
    if let Some(u) = flags.str("slack-hook-url").filter(|u| !u.is_empty()) {
        sinks.push(
            json!({"name": "slack", "type": "slack", "urlFrom": {"env": "SLACK_WEBHOOK_URL"}}),
        );
        note(
            "slack-hook-url",
            format!("carried as the sink `slack`, whose URL is read from the environment variable SLACK_WEBHOOK_URL (a Secret): put {} there; a URL is never written into rollboot's config", redact(u)),
        );
    }
    if let Some(u) = flags.str("notify-url").filter(|u| !u.is_empty()) {
        let scheme = u.split("://").next().unwrap_or_default();
        let (ty, env) = match scheme {
            "slack" => (Some("slack"), "SLACK_WEBHOOK_URL"),
            "teams" => (Some("teams"), "TEAMS_WEBHOOK_URL"),
            "generic" | "generic+https" | "generic+http" => (Some("webhook"), "WEBHOOK_URL"),
            _ => (None, ""),
        };
        match ty {
            Some(ty) if !sinks.iter().any(|s| s["type"] == ty) => {
                sinks.push(json!({"name": ty, "type": ty, "urlFrom": {"env": env}}));
                note(
                    "notify-url",
                    format!("carried as the sink `{ty}`: rollboot posts to the service's own incoming-webhook URL (https://...), not a shoutrrr `{scheme}://` URL; put that URL in the environment variable {env} (a Secret)"),
                );
            }
            Some(_) => {}
            None => note(
                "notify-url",
                format!("not carried over: rollboot's sinks are Slack, Teams and a JSON webhook; shoutrrr's `{scheme}://` has no equivalent"),
            ),
        }
    }
    let mut templates = Map::new();
    if let Some(t) = flags.str("message-template-uncordon") {
        templates.insert("nodeDone".into(), json!(template(t)));
    }
    for flag in ["message-template-drain", "message-template-reboot"] {
        if flags.given(flag) {
            note(
                flag,
                "not carried over: rollboot tells of a node when its cycle is done or failed, not at its drain or reboot (events rolloutStarted, nodeDone, nodeFailed, rolloutHalted, blocked, windowOpened)".into(),
            );
        }
    }
    if !sinks.is_empty() {
        let mut n = Map::new();
        n.insert("sinks".into(), Value::Array(sinks));
        if !templates.is_empty() {
            n.insert("templates".into(), Value::Object(templates));
        }
        config.insert("notifications".into(), Value::Object(n));
    } else if !templates.is_empty() {
        note(
            "message-template-uncordon",
            "not carried over: no notification sink was configured".into(),
        );
    }
    for flag in ["slack-username", "slack-channel"] {
        if flags.given(flag) {
            note(
                flag,
                "not carried over: a Slack incoming webhook posts as the name and into the channel it was created for".into(),
            );
        }
    }

    // Settings rollboot does not need, each with why.
    let not_needed: &[(&str, &str)] = &[
        ("lock-ttl", "not needed: rollboot's lock is a Lease listing the nodes in flight; a new leader resumes each from what its Node says, so no lock is left held by a dead node and none needs to expire (an expiring lock could let a second node start while the first is still down)"),
        ("lock-release-delay", "not needed: rollboot frees a node's slot only once its health gate passed (its evicted pods' budgets healthy and their controllers' replicas Ready, healthGate.timeout), a measured wait rather than a fixed delay"),
        ("ds-name", "not needed: rollboot's lock is the Lease lock.namespace/lock.name, not an annotation on the DaemonSet"),
        ("ds-namespace", "not needed: rollboot's lock is the Lease lock.namespace/lock.name, not an annotation on the DaemonSet"),
        ("lock-annotation", "not needed: rollboot's lock is the Lease lock.namespace/lock.name, not an annotation on the DaemonSet"),
        ("annotate-nodes", "not needed: rollboot always records a node's state and last reboot on it (rollboot.dev/state, rollboot.dev/last-reboot)"),
        ("log-format", "a command-line option of rollboot, not config: --log-format json (or ROLLBOOT_LOG_FORMAT=json)"),
        ("metrics-host", "a command-line option of rollboot, not config: the controller's --metrics-addr, the agent's --metrics-addr"),
        ("metrics-port", "a command-line option of rollboot, not config: the controller's --metrics-addr, the agent's --metrics-addr"),
        ("node-id", "a command-line option of rollboot's agent, not config: --node-name (or NODE_NAME from spec.nodeName, as deploy/agent.yaml does)"),
    ];
    for (flag, why) in not_needed {
        if flags.given(flag) {
            note(flag, (*why).into());
        }
    }
    Ok(Migration {
        config: Value::Object(config),
        notes,
    })
}

/// A URL without its path and query (those carry the token): scheme and host only.
fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => format!(
            "the URL of {scheme}://{}/...",
            rest.split('/').next().unwrap_or_default()
        ),
        None => "the URL".into(),
    }
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
