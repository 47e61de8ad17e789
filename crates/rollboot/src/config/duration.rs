//! Human durations in the config file: `90m`, `4h`, `1h30m`, `30s`, `500ms`, `2d`.
//!
//! Owns the text form and its parsing. A leading `-` is accepted by the parser so that the
//! validator can say "must be positive" rather than "bad syntax"; every field in the config
//! is then checked to be strictly positive.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A signed span of time with millisecond resolution, written with units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration {
    millis: i64,
}

/// Why a duration string does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration `{text}`: {reason}; write a number with a unit, like `30s`, `90m`, `4h`, `1h30m` (units: ms, s, m, h, d)")]
pub struct DurationError {
    text: String,
    reason: &'static str,
}

impl Duration {
    /// From whole seconds.
    pub const fn from_secs(secs: i64) -> Duration {
        Duration {
            millis: secs * 1000,
        }
    }

    /// From milliseconds.
    pub const fn from_millis(millis: i64) -> Duration {
        Duration { millis }
    }

    /// From whole minutes.
    pub const fn from_mins(mins: i64) -> Duration {
        Duration::from_secs(mins * 60)
    }

    /// Milliseconds, signed.
    pub const fn as_millis(self) -> i64 {
        self.millis
    }

    /// Strictly greater than zero.
    pub const fn is_positive(self) -> bool {
        self.millis > 0
    }

    /// As a std duration (negative clamps to zero: only validated, positive values reach I/O).
    pub fn to_std(self) -> std::time::Duration {
        std::time::Duration::from_millis(self.millis.max(0) as u64)
    }

    /// As a chrono duration.
    pub fn to_chrono(self) -> chrono::Duration {
        chrono::Duration::milliseconds(self.millis)
    }
}

impl FromStr for Duration {
    type Err = DurationError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |reason| DurationError {
            text: text.to_string(),
            reason,
        };
        let s = text.trim();
        let (negative, mut rest) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s),
        };
        if rest.is_empty() {
            return Err(err("it is empty"));
        }
        let mut total: i64 = 0;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(err("expected a number"));
            }
            let n: i64 = rest[..digits]
                .parse()
                .map_err(|_| err("number too large"))?;
            rest = &rest[digits..];
            let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            let unit_ms: i64 = match &rest[..unit_len] {
                "ms" => 1,
                "s" => 1000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                "" => return Err(err("a number without a unit")),
                _ => return Err(err("unknown unit")),
            };
            rest = &rest[unit_len..];
            total = n
                .checked_mul(unit_ms)
                .and_then(|v| total.checked_add(v))
                .ok_or_else(|| err("too large"))?;
        }
        Ok(Duration {
            millis: if negative { -total } else { total },
        })
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.millis == 0 {
            return f.write_str("0s");
        }
        if self.millis < 0 {
            f.write_str("-")?;
        }
        let mut ms = self.millis.unsigned_abs();
        for (unit, size) in [("h", 3_600_000u64), ("m", 60_000), ("s", 1000), ("ms", 1)] {
            if ms >= size {
                write!(f, "{}{}", ms / size, unit)?;
                ms %= size;
            }
        }
        Ok(())
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration with a unit, like `30s`, `90m` or `4h`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// A string of numbers with units, never negative: the validator rejects a negative
/// duration in every key, so an editor may as well.
impl schemars::JsonSchema for Duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^\\s*([0-9]+(ms|s|m|h|d))+\\s*$",
            "description": "A duration: a number with a unit (ms, s, m, h, d), or several combined: `30s`, `90m`, `4h`, `1h30m`.",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_combinations_parse() {
        assert_eq!("90m".parse::<Duration>().unwrap(), Duration::from_mins(90));
        assert_eq!("4h".parse::<Duration>().unwrap(), Duration::from_mins(240));
        assert_eq!(
            "1h30m".parse::<Duration>().unwrap(),
            Duration::from_mins(90)
        );
        assert_eq!(
            "500ms".parse::<Duration>().unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(
            "2d".parse::<Duration>().unwrap(),
            Duration::from_secs(172_800)
        );
        assert_eq!("-5m".parse::<Duration>().unwrap(), Duration::from_mins(-5));
    }

    #[test]
    fn malformed_durations_say_why() {
        for (bad, why) in [
            ("", "empty"),
            ("10", "without a unit"),
            ("10x", "unknown unit"),
            ("h", "expected a number"),
            ("99999999999999999999s", "too large"),
        ] {
            let e = bad.parse::<Duration>().unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn display_is_parseable_and_canonical() {
        for d in ["1h30m", "45s", "1500ms", "0s", "-2m"] {
            let parsed: Duration = d.parse().unwrap();
            assert_eq!(parsed.to_string().parse::<Duration>().unwrap(), parsed);
        }
        assert_eq!(Duration::from_millis(1500).to_string(), "1s500ms");
    }
}
