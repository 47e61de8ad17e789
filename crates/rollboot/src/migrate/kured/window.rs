//! kured's time window (`--reboot-days`, `--start-time`, `--end-time`, `--time-zone`) as its
//! `timewindow` package decides it, and the rollboot windows that open at the same instants.
//! Pure: no file, cluster or clock (an instant is a parameter).

use std::collections::BTreeSet;

use chrono::{Datelike, NaiveDate, NaiveTime, TimeZone, Timelike};
use chrono_tz::Tz;
use serde_json::{json, Value};

use super::flags::{parse_day, parse_time, Flags};
use super::{flag_err, MigrateError};

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
