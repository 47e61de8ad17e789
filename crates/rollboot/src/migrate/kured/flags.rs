//! kured's flags as its flag parser reads them: `--flag=value` or `--flag value`, booleans
//! bare, slices comma-separated and repeatable; from a flag list split as a shell splits it, or
//! from a manifest's kured container (its command, args and `KURED_<FLAG>` environment); and
//! kured's value formats (Go durations, times of day, weekdays). Pure: no file, cluster or
//! clock.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{flag_err, MigrateError, Note};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FlagKind {
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
const FLAGS: &[(&str, FlagKind)] = &[
    ("node-id", FlagKind::Str),
    ("force-reboot", FlagKind::Bool),
    ("metrics-host", FlagKind::Str),
    ("metrics-port", FlagKind::Int),
    ("drain-grace-period", FlagKind::Int),
    ("drain-pod-selector", FlagKind::Str),
    ("skip-wait-for-delete-timeout", FlagKind::Int),
    ("drain-delay", FlagKind::Dur),
    ("drain-timeout", FlagKind::Dur),
    ("reboot-delay", FlagKind::Dur),
    ("reboot-method", FlagKind::Str),
    ("period", FlagKind::Dur),
    ("ds-namespace", FlagKind::Str),
    ("ds-name", FlagKind::Str),
    ("lock-annotation", FlagKind::Str),
    ("lock-ttl", FlagKind::Dur),
    ("lock-release-delay", FlagKind::Dur),
    ("prometheus-url", FlagKind::Str),
    ("alert-filter-regexp", FlagKind::Str),
    ("alert-filter-match-only", FlagKind::Bool),
    ("alert-firing-only", FlagKind::Bool),
    ("reboot-sentinel", FlagKind::Str),
    ("prefer-no-schedule-taint", FlagKind::Str),
    ("reboot-sentinel-command", FlagKind::Str),
    ("reboot-command", FlagKind::Str),
    ("concurrency", FlagKind::Int),
    ("reboot-signal", FlagKind::Int),
    ("slack-hook-url", FlagKind::Str),
    ("slack-username", FlagKind::Str),
    ("slack-channel", FlagKind::Str),
    ("notify-url", FlagKind::Str),
    ("message-template-uncordon", FlagKind::Str),
    ("message-template-drain", FlagKind::Str),
    ("message-template-reboot", FlagKind::Str),
    ("blocking-pod-selector", FlagKind::Array),
    ("reboot-days", FlagKind::Slice),
    ("start-time", FlagKind::Str),
    ("end-time", FlagKind::Str),
    ("time-zone", FlagKind::Str),
    ("annotate-nodes", FlagKind::Bool),
    ("log-format", FlagKind::Str),
    ("pre-reboot-node-labels", FlagKind::Slice),
    ("post-reboot-node-labels", FlagKind::Slice),
];

pub(super) fn kind_of(flag: &str) -> Option<FlagKind> {
    FLAGS.iter().find(|(f, _)| *f == flag).map(|(_, k)| *k)
}

/// kured's settings as given (flags not given are absent; kured's defaults apply).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    values: BTreeMap<String, Vec<String>>,
}

impl Flags {
    fn set(&mut self, flag: &str, kind: FlagKind, value: &str) {
        let slot = self.values.entry(flag.to_string()).or_default();
        match kind {
            FlagKind::Slice => slot.extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
                    .map(String::from),
            ),
            FlagKind::Array => slot.push(value.to_string()),
            _ => *slot = vec![value.to_string()],
        }
    }

    pub(super) fn given(&self, flag: &str) -> bool {
        self.values.contains_key(flag)
    }

    pub(super) fn str(&self, flag: &str) -> Option<&str> {
        self.values
            .get(flag)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    pub(super) fn list(&self, flag: &str) -> Option<&[String]> {
        self.values.get(flag).map(Vec::as_slice)
    }

    pub(super) fn bool(&self, flag: &str) -> Result<bool, MigrateError> {
        match self.str(flag) {
            None => Ok(false),
            Some(v) => {
                parse_bool(v).ok_or_else(|| flag_err(flag, format!("`{v}` is not a boolean")))
            }
        }
    }

    pub(super) fn int(&self, flag: &str) -> Result<Option<i64>, MigrateError> {
        self.str(flag)
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| flag_err(flag, format!("`{v}` is not a whole number")))
            })
            .transpose()
    }

    pub(super) fn millis(&self, flag: &str) -> Result<Option<i64>, MigrateError> {
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
            (FlagKind::Bool, None) => "true".into(),
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
