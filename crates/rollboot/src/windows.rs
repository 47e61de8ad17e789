//! Maintenance windows: *when* new maintenance (a node reboot) may start.
//!
//! This module owns the calendar side of rollboot: parsing window schedules
//! (POSIX 5-field cron + duration + IANA time zone), blackouts, and answering
//! "may maintenance start at instant `now`?", "until when?" and "when next?".
//!
//! It must never do I/O, talk to Kubernetes or read the clock: `now` is always
//! a parameter, so every answer is a pure function of configuration and `now`
//! and can be tested with literal instants.
//!
//! # Model
//!
//! The set of allowed instants is the union of all window occurrences
//! `[start, start + duration)` minus the union of all blackouts `[from, to)`.
//! Overlapping or touching occurrences (of the same or of different windows)
//! merge into one [`Opening`]; a blackout inside an occurrence splits it.
//!
//! # Time zones and DST
//!
//! Schedules are matched against the wall clock of the window's zone, and the
//! duration is always real elapsed time. A wall-clock start that does not exist
//! (spring-forward gap) opens at the first instant after the gap; a wall-clock
//! start that happens twice (fall-back fold) opens once, at its first
//! occurrence. croner 4.0.3 only does this for "fixed time" patterns (single
//! minute and hour); for lists/steps/ranges it skips gap starts and fires in
//! both halves of a fold. So this module asks croner only for *wall-clock*
//! (naive) occurrences and maps them to instants itself.
//!
//! # Bounds
//!
//! Every search is bounded by [`LOOK_AHEAD`] (about 5 years) from the question's
//! instant: no opening starting later is reported, and a chain of merged
//! occurrences is followed at most that far in either direction (an opening
//! longer than that reports the clipped bound). Unbounded openings (always-open
//! schedules) use [`DateTime::<Utc>::MIN_UTC`] / [`DateTime::<Utc>::MAX_UTC`].

use std::cmp::{max, min};

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// How far ahead (and behind, for merging) any question looks: 5 × 366 days.
///
/// A schedule whose next opening lies further away (e.g. blacked out for
/// years) answers `None`; a window that matches at all matches at least once
/// every 8 years (29 February), so this only cuts off genuinely remote times.
pub const LOOK_AHEAD: TimeDelta = TimeDelta::days(5 * 366);

/// What a window schedule may contain, quoted in parse errors so the operator
/// knows how to fix the configuration.
const ALLOWED: &str = "a window schedule is exactly 5 fields \
    (minute hour day-of-month month day-of-week) made of numbers, `*`, \
    ranges `a-b`, lists `a,b`, steps `*/n` or `a-b/n`, month names jan-dec \
    and weekday names sun-sat (Sunday is 0 or 7); no seconds, years, \
    `@` nicknames or L/W/#/? extensions";

const FIELD_NAMES: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];
const MONTH_NAMES: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAY_NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// Configuration errors of windows, schedules and blackouts.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum WindowError {
    /// The cron text is not an accepted 5-field schedule.
    #[error("invalid window schedule `{schedule}`: {reason}; {ALLOWED}")]
    InvalidSchedule {
        /// The schedule text as configured.
        schedule: String,
        /// Why it was rejected (croner's message or our own check).
        reason: String,
    },
    /// The schedule is valid cron but no calendar date ever matches it.
    #[error("window schedule `{schedule}` never fires: no date matches its day-of-month, month and day-of-week fields")]
    NeverFires {
        /// The schedule text as configured.
        schedule: String,
    },
    /// Window durations must be strictly positive.
    #[error("window duration must be positive, got {duration}")]
    NonPositiveDuration {
        /// The rejected duration.
        duration: TimeDelta,
    },
    /// A blackout must have `from < to`.
    #[error("blackout must end after it starts, got from {from} to {to}")]
    InvalidBlackout {
        /// Start of the rejected blackout.
        from: DateTime<Utc>,
        /// End of the rejected blackout.
        to: DateTime<Utc>,
    },
    /// A windowed schedule needs at least one window (use
    /// [`Schedule::always_open`] for "no windows configured").
    #[error("a schedule needs at least one maintenance window")]
    NoWindows,
}

/// One configured maintenance window: a cron schedule of start times in a
/// time zone, each start opening the window for `duration` of real time.
#[derive(Clone, Debug)]
pub struct Window {
    cron: Cron,
    schedule: String,
    duration: TimeDelta,
    timezone: Tz,
}

impl Window {
    /// Parses and validates a window.
    ///
    /// `schedule` is strict POSIX 5-field cron (see [`WindowError::InvalidSchedule`]);
    /// when both day-of-month and day-of-week are restricted (neither is
    /// exactly `*`) a day matches if EITHER matches, as in Vixie cron.
    pub fn new(schedule: &str, duration: TimeDelta, timezone: Tz) -> Result<Window, WindowError> {
        let invalid = |reason: String| WindowError::InvalidSchedule {
            schedule: schedule.to_string(),
            reason,
        };
        check_posix_fields(schedule).map_err(invalid)?;
        // Disallowing seconds/years makes croner itself refuse anything but 5
        // fields, and `dom_and_dow(false)` keeps the POSIX OR rule.
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .dom_and_dow(false)
            .build()
            .parse(schedule)
            .map_err(|e| invalid(e.to_string()))?;
        if !fires_ever(&cron) {
            return Err(WindowError::NeverFires {
                schedule: schedule.to_string(),
            });
        }
        if duration <= TimeDelta::zero() {
            return Err(WindowError::NonPositiveDuration { duration });
        }
        Ok(Window {
            cron,
            schedule: schedule.to_string(),
            duration,
            timezone,
        })
    }

    /// The schedule text as configured.
    pub fn schedule(&self) -> &str {
        &self.schedule
    }

    /// How long each occurrence stays open, in real elapsed time.
    pub fn duration(&self) -> TimeDelta {
        self.duration
    }

    /// The zone whose wall clock the schedule is read in.
    pub fn timezone(&self) -> Tz {
        self.timezone
    }

    fn local(&self, t: DateTime<Utc>) -> NaiveDateTime {
        t.with_timezone(&self.timezone).naive_local()
    }

    /// Maps a wall-clock start to the instant the window opens. The map is
    /// non-decreasing, which is what lets every search below reason on
    /// "latest start" / "earliest start" alone.
    fn to_instant(&self, n: NaiveDateTime) -> Option<DateTime<Utc>> {
        match self.timezone.from_local_datetime(&n) {
            LocalResult::Single(d) => Some(d.with_timezone(&Utc)),
            // Fold: open once, at the first occurrence of that wall time.
            LocalResult::Ambiguous(earlier, _) => Some(earlier.with_timezone(&Utc)),
            LocalResult::None => self.gap_end(n),
        }
    }

    /// The first instant whose wall clock is at or after `n`, for `n` inside a
    /// spring-forward gap. Offsets lie within [-12h, +14h], so that instant is
    /// within `n` read as UTC -15h..+13h; wall time rises monotonically there
    /// unless a fold sits within a day of the gap, which no zone has.
    fn gap_end(&self, n: NaiveDateTime) -> Option<DateTime<Utc>> {
        let as_utc = n.and_utc();
        let mut lo = as_utc.checked_sub_signed(TimeDelta::hours(15))?.timestamp();
        let mut hi = as_utc.checked_add_signed(TimeDelta::hours(13))?.timestamp();
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let wall = self.local(DateTime::from_timestamp(mid, 0)?);
            if wall >= n {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        DateTime::from_timestamp(lo, 0)
    }

    fn next_wall(&self, n: NaiveDateTime) -> Option<NaiveDateTime> {
        self.cron.find_next_occurrence(&n, false).ok()
    }

    /// Latest occurrence start `<= t`.
    fn latest_start_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let wall = self.local(t);
        let mut n = self.cron.find_previous_occurrence(&wall, true).ok()?;
        let mut start = self.to_instant(n)?;
        // In the second half of a fold, wall times after `wall` that lie in the
        // fold opened (at their first occurrence) before `t`.
        if let LocalResult::Ambiguous(earlier, _) = self.timezone.from_local_datetime(&wall) {
            if earlier.with_timezone(&Utc) < t {
                while let Some(next) = self.next_wall(n) {
                    match self.to_instant(next) {
                        Some(s) if s <= t => {
                            n = next;
                            start = s;
                        }
                        _ => break,
                    }
                }
            }
        }
        Some(start)
    }

    /// Earliest occurrence start `>= t`.
    fn earliest_start_at_or_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Every wall time up to that of `t - 1s` opens strictly before `t`;
        // starting there (rather than at `t`'s wall time) catches gap starts
        // that open exactly at `t`.
        let mut n = self.next_wall(self.local(t.checked_sub_signed(TimeDelta::seconds(1))?))?;
        // Only a fold can make this loop run more than twice; it is bounded by
        // the fold's length.
        loop {
            let s = self.to_instant(n)?;
            if s >= t {
                return Some(s);
            }
            n = self.next_wall(n)?;
        }
    }
}

/// Rejects anything croner would accept beyond strict POSIX 5-field cron:
/// other field counts, `@nicknames`, L/W/#/?/+ extensions and unknown names
/// (croner substitutes names by substring, so `june` or `monday` would slip
/// through as garbage).
fn check_posix_fields(schedule: &str) -> Result<(), String> {
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!("expected exactly 5 fields, found {}", fields.len()));
    }
    for (i, field) in fields.iter().enumerate() {
        let names: &[&str] = match i {
            3 => &MONTH_NAMES,
            4 => &DAY_NAMES,
            _ => &[],
        };
        if let Some(c) = field
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '*' | ',' | '-' | '/')))
        {
            return Err(format!(
                "illegal character `{c}` in {} field `{field}`",
                FIELD_NAMES[i]
            ));
        }
        for word in field
            .split(|c: char| !c.is_ascii_alphabetic())
            .filter(|w| !w.is_empty())
        {
            if !names.iter().any(|n| n.eq_ignore_ascii_case(word)) {
                return Err(format!(
                    "unknown name `{word}` in {} field `{field}`",
                    FIELD_NAMES[i]
                ));
            }
        }
    }
    Ok(())
}

/// Whether any calendar date matches. Exact for the POSIX subset we accept:
/// weekday matching does not depend on the day's position in the month, so a
/// month matches iff some (day, weekday) pair matches in a leap year (which
/// has every day-of-month, 29 Feb included).
fn fires_ever(cron: &Cron) -> bool {
    (1..=12u32).any(|month| {
        cron.pattern.month_match(month).unwrap_or(false)
            && (1..=croner::time::days_in_month(2024, month)).any(|day| {
                (0..7).any(|wd| {
                    cron.pattern
                        .day_match(
                            2024,
                            month,
                            day,
                            croner::time::Weekday::from_days_from_sunday(wd),
                        )
                        .unwrap_or(false)
                })
            })
    })
}

/// A period during which no maintenance may start: half-open `[from, to)`, in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Blackout {
    /// First blacked-out instant.
    pub from: DateTime<Utc>,
    /// First instant no longer blacked out.
    pub to: DateTime<Utc>,
}

impl Blackout {
    /// A validated blackout (`from < to`).
    pub fn new(from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Blackout, WindowError> {
        if from >= to {
            return Err(WindowError::InvalidBlackout { from, to });
        }
        Ok(Blackout { from, to })
    }
}

/// One continuous span when new maintenance may start: `[start, end)`.
///
/// `window` is the lowest index (in the configured list) of the windows that
/// have an occurrence overlapping this span; always-open schedules use 0.
/// An unbounded side is `DateTime::<Utc>::MIN_UTC` / `MAX_UTC`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Opening {
    /// First allowed instant.
    pub start: DateTime<Utc>,
    /// First instant after the span (not allowed).
    pub end: DateTime<Utc>,
    /// Index of the first configured window that produced it.
    pub window: usize,
}

/// The full answer to "when may maintenance start": windows (or always open)
/// minus blackouts.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// `None` = always open.
    windows: Option<Vec<Window>>,
    /// Sorted, merged, non-empty, so lookups are binary searches.
    blackouts: Vec<Blackout>,
}

const MIN_T: DateTime<Utc> = DateTime::<Utc>::MIN_UTC;
const MAX_T: DateTime<Utc> = DateTime::<Utc>::MAX_UTC;

fn sat_add(t: DateTime<Utc>, d: TimeDelta) -> DateTime<Utc> {
    t.checked_add_signed(d)
        .unwrap_or(if d < TimeDelta::zero() { MIN_T } else { MAX_T })
}

fn sat_sub(t: DateTime<Utc>, d: TimeDelta) -> DateTime<Utc> {
    t.checked_sub_signed(d)
        .unwrap_or(if d < TimeDelta::zero() { MAX_T } else { MIN_T })
}

/// Sorts and merges blackouts; empty ones (`from >= to`, which a caller can
/// build through the public fields) contain no instant and are dropped.
fn normalize(mut blackouts: Vec<Blackout>) -> Vec<Blackout> {
    blackouts.retain(|b| b.from < b.to);
    blackouts.sort_by_key(|b| b.from);
    let mut merged: Vec<Blackout> = Vec::with_capacity(blackouts.len());
    for b in blackouts {
        match merged.last_mut() {
            Some(last) if b.from <= last.to => last.to = max(last.to, b.to),
            _ => merged.push(b),
        }
    }
    merged
}

/// `(floor, earliest start at or after floor)`.
type Memo = (DateTime<Utc>, Option<DateTime<Utc>>);

/// Per-window memo of "earliest start at or after `floor`", reused while a
/// question moves forward in time so that each window is searched again only
/// once the cursor has passed its cached start.
struct NextStarts<'a> {
    ws: &'a [Window],
    memo: Vec<Option<Memo>>,
}

impl<'a> NextStarts<'a> {
    fn new(ws: &'a [Window]) -> Self {
        NextStarts {
            ws,
            memo: vec![None; ws.len()],
        }
    }

    /// Earliest start of window `i` at or after `t`; `t` must not decrease
    /// between calls for the same window except to re-ask, which recomputes.
    fn get(&mut self, i: usize, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if let Some((floor, value)) = self.memo[i] {
            // The earliest start at or after `floor` is also the earliest at
            // or after any `t` between `floor` and it.
            if floor <= t && value.is_none_or(|v| v >= t) {
                return value;
            }
        }
        let value = self.ws[i].earliest_start_at_or_after(t);
        self.memo[i] = Some((t, value));
        value
    }
}

/// Merged span of window occurrences around a covered instant, before
/// blackouts are cut out.
struct Span {
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    /// Lowest index of the windows covering the probed instant.
    window: usize,
}

impl Schedule {
    /// No windows: maintenance may start at any instant outside `blackouts`.
    /// Empty blackouts (`from >= to`) are ignored.
    pub fn always_open(blackouts: Vec<Blackout>) -> Schedule {
        Schedule {
            windows: None,
            blackouts: normalize(blackouts),
        }
    }

    /// Maintenance may start inside any of `windows` and outside `blackouts`.
    /// Empty blackouts (`from >= to`) are ignored.
    ///
    /// # Panics
    ///
    /// If `windows` is empty (a configuration error the caller must report;
    /// [`Schedule::try_new`] returns it as an error instead).
    pub fn new(windows: Vec<Window>, blackouts: Vec<Blackout>) -> Schedule {
        Schedule::try_new(windows, blackouts).expect("Schedule::new needs at least one window")
    }

    /// Like [`Schedule::new`], but an empty window list is
    /// [`WindowError::NoWindows`] instead of a panic.
    pub fn try_new(
        windows: Vec<Window>,
        blackouts: Vec<Blackout>,
    ) -> Result<Schedule, WindowError> {
        if windows.is_empty() {
            return Err(WindowError::NoWindows);
        }
        Ok(Schedule {
            windows: Some(windows),
            blackouts: normalize(blackouts),
        })
    }

    /// Whether new maintenance may start at `now`: inside some window
    /// occurrence and outside every blackout.
    pub fn is_allowed(&self, now: DateTime<Utc>) -> bool {
        if self.blackout_at(now).is_some() {
            return false;
        }
        match &self.windows {
            None => true,
            Some(ws) => ws.iter().any(|w| covers(w, now)),
        }
    }

    /// The opening containing `now` (`start <= now < end`), with its real
    /// start, or `None` if maintenance may not start at `now`.
    pub fn opening_at(&self, now: DateTime<Utc>) -> Option<Opening> {
        self.opening_containing(now, sat_sub(now, LOOK_AHEAD), sat_add(now, LOOK_AHEAD))
    }

    /// When the opening containing `now` ends (`opening_at(now).end`), without
    /// the cost of finding its start.
    pub fn current_window_end(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.opening_containing(now, now, sat_add(now, LOOK_AHEAD))
            .map(|o| o.end)
    }

    /// The first opening that starts strictly after `now`, within
    /// [`LOOK_AHEAD`]; never one already under way.
    pub fn next_opening(&self, now: DateTime<Utc>) -> Option<Opening> {
        let mut found = None;
        // Skipping the backward merge is safe: the current opening, if any,
        // is only used for its end.
        self.scan(now, false, |o| {
            if o.start > now {
                found = Some(o);
                false
            } else {
                true
            }
        });
        found
    }

    /// The next `n` openings whose end is after `from`, in order: the one
    /// containing `from` (with its real start) comes first. Only openings
    /// starting within [`LOOK_AHEAD`] of `from` are listed.
    pub fn openings(&self, from: DateTime<Utc>, n: usize) -> Vec<Opening> {
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return out;
        }
        self.scan(from, true, |o| {
            out.push(o);
            out.len() < n
        });
        out
    }

    fn blackout_at(&self, t: DateTime<Utc>) -> Option<&Blackout> {
        let i = self.blackouts.partition_point(|b| b.to <= t);
        self.blackouts.get(i).filter(|b| b.from <= t)
    }

    /// For an instant outside every blackout: the end of the blackout before
    /// it and the start of the one after it (unbounded if none).
    fn blackout_bounds(&self, t: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let i = self.blackouts.partition_point(|b| b.to <= t);
        let lo = if i > 0 {
            self.blackouts[i - 1].to
        } else {
            MIN_T
        };
        let hi = self.blackouts.get(i).map_or(MAX_T, |b| b.from);
        (lo, hi)
    }

    /// The opening containing `t`, merging occurrences back to `back_limit`
    /// and forward to `fwd_limit` at most.
    fn opening_containing(
        &self,
        t: DateTime<Utc>,
        back_limit: DateTime<Utc>,
        fwd_limit: DateTime<Utc>,
    ) -> Option<Opening> {
        if self.blackout_at(t).is_some() {
            return None;
        }
        let (lo, hi) = self.blackout_bounds(t);
        let Some(ws) = &self.windows else {
            return Some(Opening {
                start: lo,
                end: hi,
                window: 0,
            });
        };
        let mut next = NextStarts::new(ws);
        let span = raw_span(&mut next, t, max(lo, back_limit), min(hi, fwd_limit))?;
        Some(cut(ws, span, lo, hi))
    }

    /// Walks openings forward from `from`, handing each to `f` until it
    /// returns false. Bounded: the cursor only moves forward, each step emits
    /// an opening or passes a blackout, and nothing past [`LOOK_AHEAD`] is
    /// looked at.
    fn scan(&self, from: DateTime<Utc>, real_start: bool, mut f: impl FnMut(Opening) -> bool) {
        let fwd_limit = sat_add(from, LOOK_AHEAD);
        let mut back_limit = if real_start {
            sat_sub(from, LOOK_AHEAD)
        } else {
            from
        };
        let mut cursor = from;
        let mut next = self.windows.as_deref().map(NextStarts::new);
        while cursor < MAX_T {
            if let Some(b) = self.blackout_at(cursor) {
                cursor = b.to;
                continue;
            }
            let (lo, hi) = self.blackout_bounds(cursor);
            let opening = match (&self.windows, next.as_mut()) {
                (Some(ws), Some(next)) => {
                    if cursor >= fwd_limit {
                        return;
                    }
                    let span = match raw_span(next, cursor, max(lo, back_limit), min(hi, fwd_limit))
                    {
                        Some(span) => span,
                        None => {
                            let Some(start) =
                                (0..ws.len()).filter_map(|i| next.get(i, cursor)).min()
                            else {
                                return;
                            };
                            if start >= fwd_limit {
                                return;
                            }
                            // Nothing covers [cursor, start), so nothing before
                            // `start` can merge into its span: no backward walk.
                            back_limit = start;
                            cursor = start;
                            continue;
                        }
                    };
                    cut(ws, span, lo, hi)
                }
                _ => Opening {
                    start: lo,
                    end: hi,
                    window: 0,
                },
            };
            if !f(opening) {
                return;
            }
            cursor = opening.end;
            back_limit = cursor;
        }
    }
}

/// Whether an occurrence of `w` contains `t`. The latest start is enough:
/// all occurrences of a window last equally long, so it also ends last.
fn covers(w: &Window, t: DateTime<Utc>) -> bool {
    w.latest_start_at_or_before(t)
        .is_some_and(|s| sat_add(s, w.duration) > t)
}

/// The merged span of occurrences (all windows, no blackouts) containing `t`,
/// followed backwards while its start is above `back_limit` and forwards while
/// its end is below `fwd_limit`. Touching occurrences merge.
fn raw_span(
    next: &mut NextStarts<'_>,
    t: DateTime<Utc>,
    back_limit: DateTime<Utc>,
    fwd_limit: DateTime<Utc>,
) -> Option<Span> {
    let ws = next.ws;
    let mut window = None;
    let mut start = MAX_T;
    let mut end = MIN_T;
    for (i, w) in ws.iter().enumerate() {
        if let Some(s) = w.latest_start_at_or_before(t) {
            let e = sat_add(s, w.duration);
            if e > t {
                window.get_or_insert(i);
                start = min(start, s);
                end = max(end, e);
            }
        }
    }
    let window = window?;
    // Each round jumps back by up to a whole duration per window, so a chain
    // costs (length / duration) rounds, not a scan by minutes.
    while start > back_limit {
        let earlier = ws
            .iter()
            .filter_map(|w| w.earliest_start_at_or_after(sat_sub(start, w.duration)))
            .min()
            .filter(|s| *s < start);
        match earlier {
            Some(s) => start = s,
            None => break,
        }
    }
    while end < fwd_limit {
        // Starts up to `t` were weighed above (the latest one ends last), so
        // only a window with a start in (t, end] can extend the span.
        let later = (0..ws.len())
            .filter(|&i| next.get(i, t).is_some_and(|s| s <= end))
            .filter_map(|i| {
                ws[i]
                    .latest_start_at_or_before(end)
                    .map(|s| sat_add(s, ws[i].duration))
            })
            .max()
            .filter(|e| *e > end);
        match later {
            Some(e) => end = e,
            None => break,
        }
    }
    Some(Span { start, end, window })
}

/// Cuts the blackouts around a span (`lo`/`hi` are the ends of the blackouts
/// enclosing the probed instant) and names the lowest window overlapping the
/// piece that is left.
fn cut(ws: &[Window], span: Span, lo: DateTime<Utc>, hi: DateTime<Utc>) -> Opening {
    let start = max(span.start, lo);
    let end = min(span.end, hi);
    let last = sat_sub(end, TimeDelta::nanoseconds(1));
    let window = (0..span.window)
        .find(|&i| {
            ws[i]
                .latest_start_at_or_before(last)
                .is_some_and(|s| sat_add(s, ws[i].duration) > start)
        })
        .unwrap_or(span.window);
    Opening { start, end, window }
}
