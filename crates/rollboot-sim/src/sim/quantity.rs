//! `resource.Quantity` as apimachinery parses, compares and prints it: the storage sizes of
//! PersistentVolumes and their claims. kube-apiserver decodes a quantity when it decodes the
//! object (a malformed one is a 400, before any validation) and serves it in canonical form
//! (`1024Mi` is served as `1Gi`, `1.5Gi` as `1536Mi`, `1000` as `1k`), except that a string
//! its fast parser finds canonical already is kept as written (`+1Gi` stays `+1Gi`).
//!
//! Owns that arithmetic and wording only: it names no kind and never touches the store. Which
//! fields of which kinds are quantities is `kinds.rs`'s. Values are exact as an `i128`
//! mantissa and a power of ten; the real one falls back to arbitrary precision beyond `int64`,
//! so a quantity past about 10^38 is refused here where kube-apiserver would take it.

use std::cmp::Ordering;

/// A quantity that does not parse, worded as apimachinery's errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// `ErrFormatWrong`
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Format,
    /// `ErrSuffix`
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// `ErrNumeric`
    #[error("unable to parse numeric part of quantity")]
    Numeric,
}

/// How a quantity is printed: with the kind of suffix it was written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// `e3`
    DecimalExponent,
    /// `Ki`, `Mi`...
    BinarySi,
    /// `m`, `k`, `M`... or none
    DecimalSi,
}

/// The smallest step: values are rounded up to nano units (`Nano`).
const NANO: i32 = -9;

/// A parsed quantity: `mantissa * 10^scale`, its format, and the string it is served as.
#[derive(Clone, Debug)]
pub struct Quantity {
    mantissa: i128,
    scale: i32,
    format: Format,
    /// Kept from the input when the fast parser found it canonical (apimachinery's `q.s`).
    cached: Option<String>,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Quantity) -> bool {
        self.cmp_value(other) == Ordering::Equal
    }
}

fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

impl Quantity {
    /// `resource.ParseQuantity`.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        if s.is_empty() {
            return Err(QuantityError::Format);
        }
        if s == "0" {
            return Ok(Quantity {
                mantissa: 0,
                scale: 0,
                format: Format::DecimalSi,
                cached: Some(s.to_string()),
            });
        }
        let p = split(s)?;
        let (base, exponent, format) = interpret(p.suffix).ok_or(QuantityError::Suffix)?;
        if let Some(q) = fast(s, &p, exponent, format) {
            return Ok(q);
        }
        slow(&p, base, exponent, format)
    }

    /// `Quantity.RoundUp`: rounded away from zero to `scale` (a power of ten) when finer,
    /// which drops the string kept from the input.
    pub fn round_up(&mut self, scale: i32) {
        if self.scale >= scale {
            return;
        }
        self.cached = None;
        self.mantissa = match pow10((scale - self.scale) as u32) {
            Some(p) => {
                self.mantissa / p + self.mantissa.signum() * i128::from(self.mantissa % p != 0)
            }
            None => self.mantissa.signum(),
        };
        self.scale = scale;
    }

    /// Whether it is above zero.
    pub fn is_positive(&self) -> bool {
        self.mantissa > 0
    }

    /// Whether it is below zero.
    pub fn is_negative(&self) -> bool {
        self.mantissa < 0
    }

    /// Compares the values (`Quantity.Cmp`).
    pub fn cmp_value(&self, other: &Quantity) -> Ordering {
        let s = self.scale.min(other.scale);
        let at = |q: &Quantity| {
            let shift = u32::try_from(q.scale - s).unwrap_or(0);
            pow10(shift).and_then(|p| q.mantissa.checked_mul(p))
        };
        match (at(self), at(other)) {
            (Some(a), Some(b)) => a.cmp(&b),
            // Beyond i128 at a common scale: the larger scale holds the larger magnitude.
            _ => (self.mantissa.signum(), self.scale).cmp(&(other.mantissa.signum(), other.scale)),
        }
    }

    /// The value as a whole number, rounded up, when it fits (`Quantity.Value`).
    pub fn value(&self) -> Option<i128> {
        if self.scale >= 0 {
            return pow10(self.scale as u32).and_then(|p| self.mantissa.checked_mul(p));
        }
        let p = pow10((-self.scale) as u32)?;
        let q = self.mantissa / p;
        Some(if self.mantissa % p == 0 {
            q
        } else {
            q + self.mantissa.signum()
        })
    }

    /// The string kube-apiserver serves it as (`Quantity.String`).
    pub fn canonical(&self) -> String {
        if let Some(s) = &self.cached {
            return s.clone();
        }
        if self.mantissa == 0 {
            return "0".into();
        }
        let mut format = self.format;
        let mut whole = None;
        if format == Format::BinarySi {
            let small = self.cmp_value(&Quantity::int(-1024)) == Ordering::Greater
                && self.cmp_value(&Quantity::int(1024)) == Ordering::Less;
            match self.exact_whole() {
                Some(w) if !small => whole = Some(w),
                _ => format = Format::DecimalSi,
            }
        }
        match (format, whole) {
            (Format::BinarySi, Some(w)) => {
                let (amount, times) = remove_factors(w, 1024);
                let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
                    .get(times as usize)
                    .copied()
                    .unwrap_or("");
                format!("{amount}{suffix}")
            }
            _ => {
                let (mut amount, times) = remove_factors(self.mantissa, 10);
                let mut exponent = self.scale + times as i32;
                while exponent.rem_euclid(3) != 0 {
                    amount *= 10;
                    exponent -= 1;
                }
                let suffix = if format == Format::DecimalExponent {
                    if exponent == 0 {
                        String::new()
                    } else {
                        format!("e{exponent}")
                    }
                } else {
                    // apimachinery prints no suffix for an exponent its table lacks.
                    match exponent {
                        -9 => "n",
                        -6 => "u",
                        -3 => "m",
                        3 => "k",
                        6 => "M",
                        9 => "G",
                        12 => "T",
                        15 => "P",
                        18 => "E",
                        _ => "",
                    }
                    .to_string()
                };
                format!("{amount}{suffix}")
            }
        }
    }

    fn int(v: i128) -> Quantity {
        Quantity {
            mantissa: v,
            scale: 0,
            format: Format::DecimalSi,
            cached: None,
        }
    }

    /// The value as a whole number if it is one.
    fn exact_whole(&self) -> Option<i128> {
        if self.scale >= 0 {
            return self.value();
        }
        let p = pow10((-self.scale) as u32)?;
        (self.mantissa % p == 0).then(|| self.mantissa / p)
    }
}

/// `removeInt64Factors`: `value` without its factors of `base`, and how many there were.
fn remove_factors(value: i128, base: i128) -> (i128, u32) {
    let mut r = value.abs();
    let mut times = 0;
    while r >= base && r % base == 0 {
        r /= base;
        times += 1;
    }
    (if value < 0 { -r } else { r }, times)
}

/// The parts `parseQuantityString` finds.
struct Parts<'a> {
    positive: bool,
    /// The number as written, sign included (`-01.50`).
    value: &'a str,
    /// Integer digits without leading zeros.
    num: &'a str,
    /// Fraction digits.
    denom: &'a str,
    suffix: &'a str,
}

/// `parseQuantityString`.
fn split(s: &str) -> Result<Parts<'_>, QuantityError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    match b[0] {
        b'-' => {
            positive = false;
            pos += 1;
        }
        b'+' => pos += 1,
        _ => {}
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok(Parts {
            positive,
            value: "0",
            num: "0",
            denom: "",
            suffix: "",
        });
    }
    let digits_from = |at: usize| (at..end).find(|&i| !b[i].is_ascii_digit()).unwrap_or(end);
    let num_end = digits_from(pos);
    let num = if num_end == pos {
        "0"
    } else {
        &s[pos..num_end]
    };
    pos = num_end;
    let mut denom = "";
    if pos < end && b[pos] == b'.' {
        let d_end = digits_from(pos + 1);
        denom = &s[pos + 1..d_end];
        pos = d_end;
    }
    let value = &s[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    if digits_from(pos) != end {
        return Err(QuantityError::Format);
    }
    Ok(Parts {
        positive,
        value,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// `suffixHandler.interpret`: base, exponent and format of a suffix.
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let dec = |e| Some((10, e, Format::DecimalSi));
    let bin = |e| Some((2, e, Format::BinarySi));
    match suffix {
        "" => dec(0),
        "n" => dec(-9),
        "u" => dec(-6),
        "m" => dec(-3),
        "k" => dec(3),
        "M" => dec(6),
        "G" => dec(9),
        "T" => dec(12),
        "P" => dec(15),
        "E" => dec(18),
        "Ki" => bin(10),
        "Mi" => bin(20),
        "Gi" => bin(30),
        "Ti" => bin(40),
        "Pi" => bin(50),
        "Ei" => bin(60),
        _ if suffix.len() > 1 && suffix.starts_with(['e', 'E']) => suffix[1..]
            .parse::<i64>()
            .ok()
            .map(|e| (10, e as i32, Format::DecimalExponent)),
        _ => None,
    }
}

/// The fast path of `ParseQuantity` (an `int64Amount`), with its cache of a canonical input;
/// `None` where the real one takes the slow path.
fn fast(s: &str, p: &Parts<'_>, exponent: i32, format: Format) -> Option<Quantity> {
    let digits = (p.num.len() + p.denom.len()) as i32;
    let (mut scale, mantissa, precision) = match format {
        Format::DecimalExponent | Format::DecimalSi => (exponent, 1i64, 18 - digits),
        Format::BinarySi if exponent >= 0 && p.denom.is_empty() => (
            0,
            1i64.checked_shl(exponent as u32)?,
            15 - p.num.len() as i32 - (exponent as f32 * 3.0 / 10.0) as i32 - 1,
        ),
        Format::BinarySi => (0, 1, -1),
    };
    if precision < 0 {
        return None;
    }
    scale -= p.denom.len() as i32;
    if scale < NANO {
        return None;
    }
    let shifted = format!("{}{}", p.num, p.denom);
    let value: i64 = shifted.parse().ok()?;
    let mut result = value.checked_mul(mantissa)?;
    if !p.positive {
        result = -result;
    }
    let canonical = match format {
        Format::BinarySi => exponent % 10 == 0 && value & 0x07 != 0,
        _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
    };
    Some(Quantity {
        mantissa: i128::from(result),
        scale,
        format,
        cached: canonical.then(|| s.to_string()),
    })
}

/// The slow path of `ParseQuantity` (an `inf.Dec`): the suffix applied, rounded up to nano
/// units, a binary quantity below one printed as a decimal one.
fn slow(
    p: &Parts<'_>,
    base: u32,
    exponent: i32,
    format: Format,
) -> Result<Quantity, QuantityError> {
    let digits: String = p.value.chars().filter(char::is_ascii_digit).collect();
    let digits = if digits.is_empty() {
        "0".into()
    } else {
        digits
    };
    let frac = p.value.split_once('.').map_or(0, |(_, f)| f.len() as i32);
    let mut mantissa: i128 = digits.parse().map_err(|_| QuantityError::Numeric)?;
    let mut scale = -frac;
    if base == 10 {
        scale += exponent;
    } else {
        let m = 1i128
            .checked_shl(exponent as u32)
            .ok_or(QuantityError::Numeric)?;
        mantissa = mantissa.checked_mul(m).ok_or(QuantityError::Numeric)?;
    }
    if mantissa != 0 && scale < NANO {
        // Rounded up: anything asked for is at least one nano unit.
        mantissa = match pow10((NANO - scale) as u32) {
            Some(p) => mantissa / p + i128::from(mantissa % p != 0),
            None => 1,
        };
        scale = NANO;
    }
    let mut format = format;
    if format == Format::BinarySi {
        let q = Quantity {
            mantissa,
            scale,
            format,
            cached: None,
        };
        let max = Quantity::int(i128::from(i64::MAX));
        if q.cmp_value(&max) == Ordering::Greater {
            mantissa = i128::from(i64::MAX);
            scale = 0;
        } else if mantissa > 0 && q.cmp_value(&Quantity::int(1)) == Ordering::Less {
            format = Format::DecimalSi;
        }
    }
    if !p.positive {
        mantissa = -mantissa;
    }
    Ok(Quantity {
        mantissa,
        scale,
        format,
        cached: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(s: &str) -> String {
        Quantity::parse(s).unwrap().canonical()
    }

    /// What kube-apiserver v1.36 served for each as a claim's storage limit (all of them are at
    /// milli units or coarser, so the defaulting's rounding leaves them be).
    #[test]
    fn quantities_are_served_in_kubes_canonical_form() {
        for (input, want) in [
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("1.5Ki", "1536"),
            ("1000", "1k"),
            ("1000M", "1G"),
            ("1500M", "1500M"),
            ("1.5G", "1500M"),
            ("0.5", "500m"),
            ("100m", "100m"),
            ("1e3", "1e3"),
            ("1E3", "1E3"),
            ("0", "0"),
            ("000", "0"),
            ("+1Gi", "+1Gi"),
            ("-1Gi", "-1Gi"),
            ("8Gi", "8Gi"),
            ("01Gi", "01Gi"),
            ("0.5Ki", "512"),
            ("1.G", "1.G"),
        ] {
            assert_eq!(served(input), want, "{input}");
        }
    }

    /// The scheme's defaulting of a ResourceList (a volume's capacity, a claim's requests)
    /// rounds each quantity up to milli units, as kube-apiserver v1.36 serves them.
    #[test]
    fn resource_lists_are_rounded_up_to_milli_units() {
        for (input, want) in [
            ("1n", "1m"),
            ("0.0001", "1m"),
            ("1500u", "2m"),
            ("2.5m", "3m"),
            ("0.0000000001", "1m"),
            ("1e-10", "1e-3"),
            ("-1", "-1"),
            ("+1Gi", "+1Gi"),
            ("100m", "100m"),
        ] {
            let mut q = Quantity::parse(input).unwrap();
            q.round_up(-3);
            assert_eq!(q.canonical(), want, "{input}");
        }
    }

    #[test]
    fn malformed_quantities_fail_as_apimachinery_words_it() {
        assert_eq!(Quantity::parse("1Gx").unwrap_err(), QuantityError::Format);
        assert_eq!(Quantity::parse("").unwrap_err(), QuantityError::Format);
        assert_eq!(Quantity::parse("abc").unwrap_err(), QuantityError::Format);
        assert_eq!(Quantity::parse("1GG").unwrap_err(), QuantityError::Suffix);
        assert_eq!(Quantity::parse("1ki").unwrap_err(), QuantityError::Suffix);
        assert_eq!(
            QuantityError::Format.to_string(),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
    }

    #[test]
    fn quantities_compare_by_value() {
        let q = |s| Quantity::parse(s).unwrap();
        assert_eq!(q("1Gi").cmp_value(&q("1024Mi")), Ordering::Equal);
        assert_eq!(q("1G").cmp_value(&q("1Gi")), Ordering::Less);
        assert_eq!(q("2Gi").cmp_value(&q("1.5Gi")), Ordering::Greater);
        assert!(!q("0").is_positive());
        assert!(q("-1").is_negative());
        assert_eq!(q("1.5").value(), Some(2));
    }
}
