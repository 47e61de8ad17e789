//! Conversions between the Kubernetes API's timestamps (k8s-openapi's `jiff` types) and `chrono`,
//! the annotation form of an instant, and the median of measured durations.
//!
//! Owns the one place where the two time libraries meet, so the rest of rollboot speaks chrono
//! only. It must never read a clock: callers pass the instants in.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;

/// A chrono instant from a jiff timestamp (nanosecond precision kept).
pub fn from_jiff(t: Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp(t.as_second(), t.subsec_nanosecond().max(0) as u32)
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// A jiff timestamp from a chrono instant (saturating at jiff's range).
pub fn to_jiff(t: DateTime<Utc>) -> Timestamp {
    Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32).unwrap_or(
        if t.timestamp() < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        },
    )
}

/// A chrono instant from an API `Time`.
pub fn from_time(t: &Time) -> DateTime<Utc> {
    from_jiff(t.0)
}

/// A chrono instant from an API `MicroTime`.
pub fn from_micro(t: &MicroTime) -> DateTime<Utc> {
    from_jiff(t.0)
}

/// An API `MicroTime` (Lease and Event timestamps) from a chrono instant.
pub fn micro(t: DateTime<Utc>) -> MicroTime {
    MicroTime(to_jiff(t))
}

/// An instant as the annotation text rollboot writes: RFC 3339, UTC, milliseconds.
pub fn annotation(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Parses an instant written by [`annotation`] (or any RFC 3339 instant).
pub fn parse_annotation(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s.trim())
        .ok()
        .map(|d| d.to_utc())
}

/// The median of `values` (the mean of the two middle ones for an even count), `None` for
/// none; NaNs are ignored. Sorts `values`.
pub fn median(values: &mut Vec<f64>) -> Option<f64> {
    values.retain(|v| !v.is_nan());
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_no_values() {
        assert_eq!(median(&mut vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut vec![f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median(&mut Vec::new()), None);
    }

    #[test]
    fn chrono_and_jiff_round_trip_to_the_nanosecond() {
        let t = DateTime::from_timestamp(1_790_000_000, 123_456_789).unwrap();
        assert_eq!(from_jiff(to_jiff(t)), t);
    }

    #[test]
    fn annotation_text_parses_back() {
        let t = DateTime::from_timestamp(1_790_000_000, 5_000_000).unwrap();
        assert_eq!(parse_annotation(&annotation(t)), Some(t));
        assert_eq!(parse_annotation("yes"), None);
    }
}
