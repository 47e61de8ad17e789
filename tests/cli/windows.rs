//! Behaviour of maintenance windows. Expected instants are worked out from the
//! calendar (weekdays, DST transition dates of the zones) by hand and written
//! as literals; the comment next to each says why.

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;
use rollboot::windows::*;

fn t(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn tz(name: &str) -> Tz {
    name.parse().unwrap()
}

fn mins(m: i64) -> TimeDelta {
    TimeDelta::minutes(m)
}

fn hours(h: i64) -> TimeDelta {
    TimeDelta::hours(h)
}

fn win(schedule: &str, duration: TimeDelta, zone: &str) -> Window {
    Window::new(schedule, duration, tz(zone)).unwrap()
}

fn one(schedule: &str, duration: TimeDelta, zone: &str) -> Schedule {
    Schedule::new(vec![win(schedule, duration, zone)], vec![])
}

fn blackout(from: &str, to: &str) -> Blackout {
    Blackout::new(t(from), t(to)).unwrap()
}

fn opening(start: &str, end: &str, window: usize) -> Opening {
    Opening {
        start: t(start),
        end: t(end),
        window,
    }
}

// ---------------------------------------------------------------- cron syntax

#[test]
fn month_and_weekday_names_restrict_to_january_weekdays() {
    let s = one("0 3 * jan mon-fri", hours(1), "UTC");
    // 2026-01-05 is a Monday in January.
    assert!(s.is_allowed(t("2026-01-05T03:30:00Z")));
    // 2026-01-03 is a Saturday.
    assert!(!s.is_allowed(t("2026-01-03T03:30:00Z")));
    // 2026-02-02 is a Monday, but in February.
    assert!(!s.is_allowed(t("2026-02-02T03:30:00Z")));
    // After Friday 2026-01-30 the next January weekday is Friday 2027-01-01.
    assert_eq!(
        s.next_opening(t("2026-01-30T04:00:00Z")),
        Some(opening("2027-01-01T03:00:00Z", "2027-01-01T04:00:00Z", 0))
    );
}

#[test]
fn names_are_case_insensitive() {
    let s = one("0 3 * JAN Mon-Fri", hours(1), "UTC");
    assert!(s.is_allowed(t("2026-01-05T03:30:00Z")));
}

#[test]
fn step_every_fifteen_minutes_opens_four_times_an_hour() {
    let s = one("*/15 * * * *", mins(5), "UTC");
    assert!(s.is_allowed(t("2026-07-01T10:15:00Z")));
    assert!(s.is_allowed(t("2026-07-01T10:19:59Z")));
    assert!(!s.is_allowed(t("2026-07-01T10:20:00Z")));
    // 10:16 is inside the 10:15 opening, then :30 and :45 follow.
    assert_eq!(
        s.openings(t("2026-07-01T10:16:00Z"), 3),
        vec![
            opening("2026-07-01T10:15:00Z", "2026-07-01T10:20:00Z", 0),
            opening("2026-07-01T10:30:00Z", "2026-07-01T10:35:00Z", 0),
            opening("2026-07-01T10:45:00Z", "2026-07-01T10:50:00Z", 0),
        ]
    );
}

#[test]
fn ranges_and_lists_in_hour_field() {
    let s = one("0 1-3,22 * * *", mins(30), "UTC");
    // Hours 1, 2, 3 and 22 of 2026-01-05, then hour 1 of the next day.
    assert_eq!(
        s.openings(t("2026-01-05T00:00:00Z"), 5),
        vec![
            opening("2026-01-05T01:00:00Z", "2026-01-05T01:30:00Z", 0),
            opening("2026-01-05T02:00:00Z", "2026-01-05T02:30:00Z", 0),
            opening("2026-01-05T03:00:00Z", "2026-01-05T03:30:00Z", 0),
            opening("2026-01-05T22:00:00Z", "2026-01-05T22:30:00Z", 0),
            opening("2026-01-06T01:00:00Z", "2026-01-06T01:30:00Z", 0),
        ]
    );
}

#[test]
fn day_of_month_and_day_of_week_both_restricted_fires_when_either_matches() {
    let s = one("0 12 1 * mon", hours(1), "UTC");
    // 2026-07-01 is a Wednesday (day 1 matches), then Mondays 6 and 13 July.
    assert_eq!(
        s.openings(t("2026-07-01T00:00:00Z"), 3),
        vec![
            opening("2026-07-01T12:00:00Z", "2026-07-01T13:00:00Z", 0),
            opening("2026-07-06T12:00:00Z", "2026-07-06T13:00:00Z", 0),
            opening("2026-07-13T12:00:00Z", "2026-07-13T13:00:00Z", 0),
        ]
    );
}

#[test]
fn day_of_week_alone_does_not_fire_on_other_weekdays() {
    let s = one("0 12 * * mon", hours(1), "UTC");
    // Wednesday 2026-07-01 is not a Monday and day-of-month is `*`.
    assert!(!s.is_allowed(t("2026-07-01T12:30:00Z")));
    assert!(s.is_allowed(t("2026-07-06T12:30:00Z")));
}

#[test]
fn sunday_is_both_zero_and_seven() {
    for schedule in ["0 12 * * 0", "0 12 * * 7", "0 12 * * sun"] {
        let s = one(schedule, hours(1), "UTC");
        // The first Sunday after Wednesday 2026-07-01 is 2026-07-05.
        assert_eq!(
            s.next_opening(t("2026-07-01T00:00:00Z")),
            Some(opening("2026-07-05T12:00:00Z", "2026-07-05T13:00:00Z", 0)),
            "{schedule}"
        );
    }
    // 5-7 is Friday, Saturday, Sunday: Fri 2026-07-03 .. Sun 2026-07-05.
    let s = one("0 12 * * 5-7", hours(1), "UTC");
    let starts: Vec<_> = s
        .openings(t("2026-07-01T00:00:00Z"), 4)
        .iter()
        .map(|o| o.start)
        .collect();
    assert_eq!(
        starts,
        vec![
            t("2026-07-03T12:00:00Z"),
            t("2026-07-04T12:00:00Z"),
            t("2026-07-05T12:00:00Z"),
            t("2026-07-10T12:00:00Z"),
        ]
    );
}

#[test]
fn six_and_seven_field_expressions_are_rejected() {
    for schedule in ["0 0 12 * * *", "0 0 12 * * * 2026"] {
        let err = Window::new(schedule, hours(1), Tz::UTC).unwrap_err();
        assert!(
            matches!(err, WindowError::InvalidSchedule { .. }),
            "{schedule}: {err:?}"
        );
        assert!(err.to_string().contains("exactly 5 fields"), "{err}");
    }
}

#[test]
fn non_posix_syntax_is_rejected() {
    for schedule in [
        "",
        "0 12 * *",
        "@daily",
        "0 12 L * *",
        "0 12 15W * *",
        "0 12 * * 5#2",
        "0 12 ? * mon",
        "0 12 * * +mon",
        "0 12 * * monday",
        "0 12 * june *",
        "0 mon * * *",
        "60 12 * * *",
        "0 24 * * *",
        "0 12 32 * *",
        "0 12 * 13 *",
    ] {
        let err = Window::new(schedule, hours(1), Tz::UTC).unwrap_err();
        assert!(
            matches!(err, WindowError::InvalidSchedule { .. }),
            "{schedule:?}: {err:?}"
        );
    }
}

#[test]
fn schedule_that_never_fires_is_rejected() {
    for schedule in ["0 0 30 2 *", "0 0 31 4,6,9,11 *"] {
        let err = Window::new(schedule, hours(1), Tz::UTC).unwrap_err();
        assert!(
            matches!(err, WindowError::NeverFires { .. }),
            "{schedule}: {err:?}"
        );
        assert!(err.to_string().contains("never fires"));
    }
}

#[test]
fn leap_day_schedule_is_accepted_and_fires_on_next_leap_day() {
    let s = one("0 0 29 2 *", hours(1), "UTC");
    // 2028 is the next leap year after 2026.
    assert_eq!(
        s.next_opening(t("2026-07-01T00:00:00Z")).map(|o| o.start),
        Some(t("2028-02-29T00:00:00Z"))
    );
}

#[test]
fn non_positive_duration_is_rejected() {
    for d in [TimeDelta::zero(), mins(-5)] {
        assert!(matches!(
            Window::new("0 1 * * *", d, Tz::UTC),
            Err(WindowError::NonPositiveDuration { .. })
        ));
    }
}

#[test]
fn blackout_must_end_after_it_starts() {
    assert!(matches!(
        Blackout::new(t("2026-07-01T00:00:00Z"), t("2026-07-01T00:00:00Z")),
        Err(WindowError::InvalidBlackout { .. })
    ));
}

#[test]
fn window_accessors_return_configuration() {
    let w = win("0 1 * * *", hours(2), "Asia/Tokyo");
    assert_eq!(w.schedule(), "0 1 * * *");
    assert_eq!(w.duration(), hours(2));
    assert_eq!(w.timezone(), tz("Asia/Tokyo"));
}

#[test]
fn empty_window_list_is_an_error() {
    assert!(matches!(
        Schedule::try_new(vec![], vec![]),
        Err(WindowError::NoWindows)
    ));
}

// ---------------------------------------------------------------- time zones

#[test]
fn window_in_tokyo_opens_at_tokyo_wall_time_not_utc() {
    // Tokyo is UTC+9 all year: 09:00 JST = 00:00Z.
    let tokyo = one("0 9 * * *", hours(1), "Asia/Tokyo");
    let utc = one("0 9 * * *", hours(1), "UTC");
    assert!(tokyo.is_allowed(t("2026-07-01T00:30:00Z")));
    assert!(!tokyo.is_allowed(t("2026-07-01T09:30:00Z")));
    assert!(utc.is_allowed(t("2026-07-01T09:30:00Z")));
    assert!(!utc.is_allowed(t("2026-07-01T00:30:00Z")));
    assert_eq!(
        tokyo.next_opening(t("2026-07-01T12:00:00Z")),
        Some(opening("2026-07-02T00:00:00Z", "2026-07-02T01:00:00Z", 0))
    );
}

// ---------------------------------------------------------------- DST

#[test]
fn spring_forward_start_in_gap_opens_at_first_instant_after_gap() {
    // Berlin 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00Z); 02:30 does
    // not exist, so the window opens at 03:00 CEST = 01:00Z for one real hour.
    let s = one("30 2 * * *", hours(1), "Europe/Berlin");
    assert_eq!(
        s.openings(t("2026-03-28T12:00:00Z"), 2),
        vec![
            opening("2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z", 0),
            // Next day 02:30 CEST = 00:30Z.
            opening("2026-03-30T00:30:00Z", "2026-03-30T01:30:00Z", 0),
        ]
    );
    // The day before: 02:30 CET = 01:30Z.
    assert_eq!(
        s.opening_at(t("2026-03-28T02:00:00Z")),
        Some(opening("2026-03-28T01:30:00Z", "2026-03-28T02:30:00Z", 0))
    );
}

#[test]
fn spring_forward_list_of_starts_in_gap_opens_once_after_gap() {
    // croner alone skips 02:00 and 02:30 on the gap day for list patterns;
    // both must open at 03:00 CEST = 01:00Z (and merge into one opening).
    let s = one("0,30 2 * * *", mins(15), "Europe/Berlin");
    assert_eq!(
        s.openings(t("2026-03-28T23:00:00Z"), 2),
        vec![
            opening("2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z", 0),
            // 2026-03-30 02:00 CEST = 00:00Z.
            opening("2026-03-30T00:00:00Z", "2026-03-30T00:15:00Z", 0),
        ]
    );
}

#[test]
fn spring_forward_start_in_gap_new_york() {
    // New York 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00Z).
    let s = one("30 2 * * *", hours(1), "America/New_York");
    assert_eq!(
        s.next_opening(t("2026-03-08T00:00:00Z")),
        Some(opening("2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z", 0))
    );
    // 2026-03-07 02:30 EST = 07:30Z.
    assert!(s.is_allowed(t("2026-03-07T08:00:00Z")));
}

#[test]
fn fall_back_repeated_start_opens_once_at_first_occurrence() {
    // Berlin 2026-10-25: 03:00 CEST falls back to 02:00 CET at 01:00Z, so
    // 02:30 happens at 00:30Z (CEST) and again at 01:30Z (CET).
    let s = one("30 2 * * *", mins(30), "Europe/Berlin");
    assert_eq!(
        s.openings(t("2026-10-24T12:00:00Z"), 2),
        vec![
            opening("2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", 0),
            // 2026-10-26 02:30 CET = 01:30Z.
            opening("2026-10-26T01:30:00Z", "2026-10-26T02:00:00Z", 0),
        ]
    );
    assert!(!s.is_allowed(t("2026-10-25T01:45:00Z")));
    assert_eq!(s.opening_at(t("2026-10-25T01:45:00Z")), None);
}

#[test]
fn fall_back_step_starts_in_repeated_hour_open_only_first_time() {
    // 02:00 and 02:30 CEST (00:00Z, 00:30Z) open; their CET repeats at
    // 01:00Z and 01:30Z must not (croner alone fires them twice).
    let s = one("*/30 2 * * *", mins(30), "Europe/Berlin");
    assert_eq!(
        s.opening_at(t("2026-10-25T00:10:00Z")),
        Some(opening("2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", 0))
    );
    assert!(!s.is_allowed(t("2026-10-25T01:15:00Z")));
    assert!(!s.is_allowed(t("2026-10-25T01:45:00Z")));
    // Asked from inside the repeated (CET) hour, the next start is the next
    // day's 02:00 CET = 01:00Z.
    assert_eq!(
        s.next_opening(t("2026-10-25T01:10:00Z")).map(|o| o.start),
        Some(t("2026-10-26T01:00:00Z"))
    );
}

#[test]
fn fall_back_repeated_start_new_york() {
    // New York 2026-11-01: 02:00 EDT falls back to 01:00 EST at 06:00Z, so
    // 01:30 happens at 05:30Z (EDT) and 06:30Z (EST).
    let s = one("30 1 * * *", mins(30), "America/New_York");
    assert_eq!(
        s.opening_at(t("2026-11-01T05:45:00Z")),
        Some(opening("2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z", 0))
    );
    assert!(!s.is_allowed(t("2026-11-01T06:45:00Z")));
    // Next: 2026-11-02 01:30 EST = 06:30Z.
    assert_eq!(
        s.next_opening(t("2026-11-01T06:10:00Z")).map(|o| o.start),
        Some(t("2026-11-02T06:30:00Z"))
    );
}

#[test]
fn duration_across_fall_back_is_real_elapsed_time() {
    // Berlin 00:00 CEST on 2026-10-25 = 2026-10-24T22:00Z; four real hours
    // later is 02:00Z (03:00 CET on the wall, 5 wall-clock hours).
    let s = one("0 0 * * *", hours(4), "Europe/Berlin");
    assert_eq!(
        s.opening_at(t("2026-10-25T01:30:00Z")),
        Some(opening("2026-10-24T22:00:00Z", "2026-10-25T02:00:00Z", 0))
    );
    // New York 00:00 EDT on 2026-11-01 = 04:00Z, ends 08:00Z.
    let s = one("0 0 * * *", hours(4), "America/New_York");
    assert_eq!(
        s.current_window_end(t("2026-11-01T07:00:00Z")),
        Some(t("2026-11-01T08:00:00Z"))
    );
}

#[test]
fn duration_across_spring_forward_is_real_elapsed_time() {
    // Berlin 00:00 CET on 2026-03-29 = 2026-03-28T23:00Z; +4h = 03:00Z.
    let s = one("0 0 * * *", hours(4), "Europe/Berlin");
    assert_eq!(
        s.opening_at(t("2026-03-29T02:30:00Z")),
        Some(opening("2026-03-28T23:00:00Z", "2026-03-29T03:00:00Z", 0))
    );
    // New York 00:00 EST on 2026-03-08 = 05:00Z; +4h = 09:00Z.
    let s = one("0 0 * * *", hours(4), "America/New_York");
    assert_eq!(
        s.opening_at(t("2026-03-08T08:59:00Z")),
        Some(opening("2026-03-08T05:00:00Z", "2026-03-08T09:00:00Z", 0))
    );
}

// ---------------------------------------------------------------- merging

#[test]
fn window_across_midnight_is_one_opening() {
    let s = one("0 22 * * *", hours(4), "UTC");
    assert_eq!(
        s.opening_at(t("2026-07-02T01:00:00Z")),
        Some(opening("2026-07-01T22:00:00Z", "2026-07-02T02:00:00Z", 0))
    );
    assert_eq!(
        s.current_window_end(t("2026-07-01T23:00:00Z")),
        Some(t("2026-07-02T02:00:00Z"))
    );
}

#[test]
fn overlapping_windows_merge_into_one_opening() {
    let s = Schedule::new(
        vec![
            win("0 1 * * *", hours(2), "UTC"),
            win("0 2 * * *", hours(2), "UTC"),
        ],
        vec![],
    );
    // 01:00-03:00 and 02:00-04:00 overlap: one opening 01:00-04:00.
    assert_eq!(
        s.opening_at(t("2026-07-01T03:30:00Z")),
        Some(opening("2026-07-01T01:00:00Z", "2026-07-01T04:00:00Z", 0))
    );
}

#[test]
fn touching_windows_merge_into_one_opening() {
    let s = Schedule::new(
        vec![
            win("0 2 * * *", hours(1), "UTC"),
            win("0 1 * * *", hours(1), "UTC"),
        ],
        vec![],
    );
    // 01:00-02:00 (window 1) touches 02:00-03:00 (window 0): one opening,
    // reported under the lower index 0.
    assert_eq!(
        s.openings(t("2026-07-01T00:00:00Z"), 2),
        vec![
            opening("2026-07-01T01:00:00Z", "2026-07-01T03:00:00Z", 0),
            opening("2026-07-02T01:00:00Z", "2026-07-02T03:00:00Z", 0),
        ]
    );
}

#[test]
fn opening_reports_the_window_that_produced_it() {
    let s = Schedule::new(
        vec![
            win("0 1 * * *", hours(1), "UTC"),
            win("0 12 * * *", hours(1), "UTC"),
        ],
        vec![],
    );
    assert_eq!(s.opening_at(t("2026-07-01T12:30:00Z")).unwrap().window, 1);
    assert_eq!(s.opening_at(t("2026-07-01T01:30:00Z")).unwrap().window, 0);
}

#[test]
fn self_overlapping_occurrences_merge_into_long_opening() {
    // Every 2 hours for 3 hours: occurrences chain Monday 00:00 .. Friday
    // 22:00 + 3h = Saturday 01:00. 2026-07-06 is a Monday.
    let s = one("0 */2 * * mon-fri", hours(3), "UTC");
    assert_eq!(
        s.opening_at(t("2026-07-08T12:34:00Z")),
        Some(opening("2026-07-06T00:00:00Z", "2026-07-11T01:00:00Z", 0))
    );
}

// ---------------------------------------------------------------- blackouts

#[test]
fn blackout_inside_a_window_splits_it() {
    let s = Schedule::new(
        vec![win("0 1 * * *", hours(4), "UTC")],
        vec![blackout("2026-07-01T02:00:00Z", "2026-07-01T03:00:00Z")],
    );
    assert_eq!(
        s.openings(t("2026-07-01T00:00:00Z"), 2),
        vec![
            opening("2026-07-01T01:00:00Z", "2026-07-01T02:00:00Z", 0),
            opening("2026-07-01T03:00:00Z", "2026-07-01T05:00:00Z", 0),
        ]
    );
    assert!(!s.is_allowed(t("2026-07-01T02:30:00Z")));
    assert_eq!(s.opening_at(t("2026-07-01T02:30:00Z")), None);
    // Half-open: the blackout's `to` is allowed again.
    assert!(s.is_allowed(t("2026-07-01T03:00:00Z")));
    assert_eq!(
        s.current_window_end(t("2026-07-01T01:30:00Z")),
        Some(t("2026-07-01T02:00:00Z"))
    );
}

#[test]
fn blackout_covering_a_whole_occurrence_removes_it() {
    let s = Schedule::new(
        vec![win("0 1 * * *", hours(1), "UTC")],
        vec![blackout("2026-07-02T00:00:00Z", "2026-07-03T00:00:00Z")],
    );
    // 2026-07-02 01:00 is blacked out; next is 2026-07-03 01:00.
    assert_eq!(
        s.openings(t("2026-07-01T12:00:00Z"), 1),
        vec![opening("2026-07-03T01:00:00Z", "2026-07-03T02:00:00Z", 0)]
    );
    assert_eq!(
        s.next_opening(t("2026-07-02T00:30:00Z")).map(|o| o.start),
        Some(t("2026-07-03T01:00:00Z"))
    );
}

#[test]
fn next_opening_from_inside_an_opening_skips_to_the_following_one() {
    let s = one("0 1 * * *", hours(1), "UTC");
    assert_eq!(
        s.next_opening(t("2026-07-01T01:30:00Z")),
        Some(opening("2026-07-02T01:00:00Z", "2026-07-02T02:00:00Z", 0))
    );
    // Exactly at a start, that opening is under way, not next.
    assert_eq!(
        s.next_opening(t("2026-07-01T01:00:00Z")).map(|o| o.start),
        Some(t("2026-07-02T01:00:00Z"))
    );
}

#[test]
fn schedule_blacked_out_beyond_look_ahead_has_no_next_opening() {
    let w = || vec![win("0 1 * * *", hours(1), "UTC")];
    // Six years of blackout exceed the ~5 year look-ahead.
    let s = Schedule::new(
        w(),
        vec![blackout("2026-01-01T00:00:00Z", "2032-01-01T00:00:00Z")],
    );
    assert_eq!(s.next_opening(t("2026-06-01T00:00:00Z")), None);
    assert!(s.openings(t("2026-06-01T00:00:00Z"), 3).is_empty());
    // Three years are within it: first opening 2029-01-01 01:00.
    let s = Schedule::new(
        w(),
        vec![blackout("2026-01-01T00:00:00Z", "2029-01-01T00:00:00Z")],
    );
    assert_eq!(
        s.next_opening(t("2026-06-01T00:00:00Z")).map(|o| o.start),
        Some(t("2029-01-01T01:00:00Z"))
    );
}

// ---------------------------------------------------------------- always open

#[test]
fn always_open_without_blackouts_is_one_unbounded_opening() {
    let s = Schedule::always_open(vec![]);
    let now = t("2026-07-01T12:00:00Z");
    assert!(s.is_allowed(now));
    let all = opening("2026-07-01T00:00:00Z", "2026-07-01T00:00:00Z", 0);
    let all = Opening {
        start: DateTime::<Utc>::MIN_UTC,
        end: DateTime::<Utc>::MAX_UTC,
        ..all
    };
    assert_eq!(s.opening_at(now), Some(all));
    assert_eq!(s.next_opening(now), None);
    assert_eq!(s.openings(now, 3), vec![all]);
}

#[test]
fn always_open_with_blackouts_opens_between_them() {
    let s = Schedule::always_open(vec![
        // Given out of order and overlapping: they merge to 10:00-12:00.
        blackout("2026-07-01T11:00:00Z", "2026-07-01T12:00:00Z"),
        blackout("2026-07-01T10:00:00Z", "2026-07-01T11:30:00Z"),
        blackout("2026-07-02T00:00:00Z", "2026-07-02T06:00:00Z"),
    ]);
    assert!(!s.is_allowed(t("2026-07-01T11:45:00Z")));
    assert!(s.is_allowed(t("2026-07-01T12:00:00Z")));
    assert_eq!(
        s.next_opening(t("2026-07-01T10:30:00Z")),
        Some(opening("2026-07-01T12:00:00Z", "2026-07-02T00:00:00Z", 0))
    );
    let list = s.openings(t("2026-07-01T09:00:00Z"), 5);
    assert_eq!(list.len(), 3);
    assert_eq!(list[0].start, DateTime::<Utc>::MIN_UTC);
    assert_eq!(list[0].end, t("2026-07-01T10:00:00Z"));
    assert_eq!(
        list[1],
        opening("2026-07-01T12:00:00Z", "2026-07-02T00:00:00Z", 0)
    );
    assert_eq!(list[2].start, t("2026-07-02T06:00:00Z"));
    assert_eq!(list[2].end, DateTime::<Utc>::MAX_UTC);
}

// ---------------------------------------------------------------- properties

const PATTERNS: &[&str] = &[
    "0 3 * * *",
    "30 2 * * *",
    "0,30 1-3 * * *",
    "15 */6 * * mon-fri",
    "0 22 * * sun",
    "0 12 1 * mon",
    "*/20 2 * * *",
    "45 0 * * 6,0",
];
const ZONES: &[&str] = &[
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Tokyo",
    // Half-hour DST shift: gaps and folds of 30 minutes.
    "Australia/Lord_Howe",
];

fn arb_window() -> impl Strategy<Value = Window> {
    (
        0..PATTERNS.len(),
        0..ZONES.len(),
        prop::sample::select(vec![30i64, 45, 60, 90, 120, 240, 480]),
    )
        .prop_map(|(p, z, d)| win(PATTERNS[p], mins(d), ZONES[z]))
}

/// Instants in 2026, which holds both DST transitions of every zone above;
/// half of them are drawn within a day of one of those transitions, where
/// gaps and folds make mistakes likely.
fn arb_instant() -> impl Strategy<Value = DateTime<Utc>> {
    let base = t("2026-01-01T00:00:00Z").timestamp();
    let transitions: Vec<i64> = [
        "2026-03-29T01:00:00Z", // Berlin spring forward
        "2026-10-25T01:00:00Z", // Berlin fall back
        "2026-03-08T07:00:00Z", // New York spring forward
        "2026-11-01T06:00:00Z", // New York fall back
        "2026-04-04T15:00:00Z", // Lord Howe fall back (02:00 LHDT)
        "2026-10-03T15:30:00Z", // Lord Howe spring forward (02:00 LHST)
    ]
    .iter()
    .map(|s| t(s).timestamp())
    .collect();
    prop_oneof![
        (0i64..365 * 86_400).prop_map(move |s| DateTime::from_timestamp(base + s, 0).unwrap()),
        (prop::sample::select(transitions), -86_400i64..86_400)
            .prop_map(|(tr, d)| DateTime::from_timestamp(tr + d, 0).unwrap()),
    ]
}

fn arb_blackout() -> impl Strategy<Value = Blackout> {
    (arb_instant(), 1i64..3 * 86_400).prop_map(|(from, len)| Blackout {
        from,
        to: from + TimeDelta::seconds(len),
    })
}

fn arb_schedule() -> impl Strategy<Value = Schedule> {
    (
        prop::collection::vec(arb_window(), 0..4),
        prop::collection::vec(arb_blackout(), 0..4),
    )
        .prop_map(|(ws, bs)| {
            if ws.is_empty() {
                Schedule::always_open(bs)
            } else {
                Schedule::new(ws, bs)
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn next_opening_is_never_in_the_past(s in arb_schedule(), now in arb_instant()) {
        if let Some(o) = s.next_opening(now) {
            prop_assert!(o.start > now, "{o:?} at {now}");
            prop_assert!(s.is_allowed(o.start));
        }
    }

    #[test]
    fn is_allowed_agrees_with_openings(s in arb_schedule(), now in arb_instant()) {
        let list = s.openings(now - TimeDelta::days(2), 200);
        let in_list = list.iter().find(|o| o.start <= now && now < o.end).copied();
        prop_assert_eq!(s.is_allowed(now), in_list.is_some());
        prop_assert_eq!(s.opening_at(now), in_list);
        prop_assert_eq!(s.current_window_end(now), in_list.map(|o| o.end));
    }

    #[test]
    fn openings_are_sorted_disjoint_non_empty_and_maximal(
        s in arb_schedule(),
        from in arb_instant(),
    ) {
        let list = s.openings(from, 12);
        for o in &list {
            prop_assert!(o.start < o.end, "{o:?}");
            prop_assert!(o.end > from, "{o:?}");
            prop_assert!(s.is_allowed(o.start), "{o:?}");
            prop_assert!(s.is_allowed(o.end - TimeDelta::seconds(1)), "{o:?}");
            if o.end < DateTime::<Utc>::MAX_UTC {
                prop_assert!(!s.is_allowed(o.end), "{o:?}");
            }
            if o.start > DateTime::<Utc>::MIN_UTC {
                prop_assert!(!s.is_allowed(o.start - TimeDelta::seconds(1)), "{o:?}");
            }
        }
        for pair in list.windows(2) {
            prop_assert!(pair[0].end < pair[1].start, "{pair:?}");
        }
    }
}
