//! Durations in Go's form (`5m`, `1h30m`, `10m0s`, `1.5s`, `300ms`).
//!
//! Parsing accepts what Go's `time.ParseDuration` accepts for non-negative durations: a
//! sequence of decimal numbers with units `ns`, `us` (`µs`), `ms`, `s`, `m`, `h`, or a bare
//! `0`. That covers the CRD pattern of spec fields (`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`)
//! and what Go writes in status fields such as `lastAttemptedReleaseActionDuration`
//! (`1.5µs`). Formatting follows Go's `time.Duration.String`,
//! which is what Flux writes back (`5m0s`) and what it prints in messages
//! (`retrying after 5m0s`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string does not match `([0-9]+(\.[0-9]+)?(ms|s|m|h))+`.
    #[error(
        "invalid duration {0:?}: expected a Go duration such as \"5m\", \"1h30m\" or \"300ms\""
    )]
    Syntax(String),
    /// The duration does not fit Go's `time.Duration` (about 292 years).
    #[error("invalid duration {0:?}: out of range")]
    Overflow(String),
}

/// A non-negative duration written the Go way.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct GoDuration(Duration);

/// Units in match order (longer spellings first where they share a prefix).
const UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3_600 * 1_000_000_000),
];

/// Go's `time.Duration` holds at most `i64::MAX` nanoseconds.
const MAX_NANOS: u128 = i64::MAX as u128;

impl GoDuration {
    /// Wraps a std duration.
    pub const fn new(d: Duration) -> Self {
        Self(d)
    }

    /// A duration of whole seconds.
    pub const fn from_secs(secs: u64) -> Self {
        Self(Duration::from_secs(secs))
    }

    /// A duration of whole minutes.
    pub const fn from_mins(mins: u64) -> Self {
        Self(Duration::from_secs(mins * 60))
    }

    /// The std duration.
    pub const fn get(self) -> Duration {
        self.0
    }

    /// Parses a non-negative Go duration string.
    pub fn parse(s: &str) -> Result<Self, DurationError> {
        let syntax = || DurationError::Syntax(s.to_owned());
        let b = s.as_bytes();
        if b.is_empty() {
            return Err(syntax());
        }
        if s == "0" {
            return Ok(Self(Duration::ZERO));
        }
        let mut i = 0;
        let mut total: u128 = 0;
        while i < b.len() {
            let int_start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i == int_start {
                return Err(syntax());
            }
            let int_part = &s[int_start..i];
            let mut frac_part = "";
            if i < b.len() && b[i] == b'.' {
                i += 1;
                let frac_start = i;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                if i == frac_start {
                    return Err(syntax());
                }
                frac_part = &s[frac_start..i];
            }
            let rest = &s[i..];
            let Some(&(unit, scale)) = UNITS.iter().find(|(u, _)| rest.starts_with(u)) else {
                return Err(syntax());
            };
            i += unit.len();
            let overflow = || DurationError::Overflow(s.to_owned());
            let whole: u128 = int_part.parse().map_err(|_| overflow())?;
            let mut nanos = whole.checked_mul(scale).ok_or_else(overflow)?;
            // Fractions: Go keeps as many digits as fit and truncates the rest.
            let mut frac_scale = scale;
            for d in frac_part.bytes() {
                frac_scale /= 10;
                if frac_scale == 0 {
                    break;
                }
                nanos += u128::from(d - b'0') * frac_scale;
            }
            total = total.checked_add(nanos).ok_or_else(overflow)?;
            if total > MAX_NANOS {
                return Err(overflow());
            }
        }
        let secs = (total / 1_000_000_000) as u64;
        let sub = (total % 1_000_000_000) as u32;
        Ok(Self(Duration::new(secs, sub)))
    }
}

/// The pattern the Flux CRDs give duration fields of a spec: `^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// A spec duration: a string matching [`DURATION_PATTERN`]. Status fields written in Go's
/// own form (`1.5µs`) override this with a plain string.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for GoDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GoDuration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": DURATION_PATTERN})
    }
}

impl fmt::Display for GoDuration {
    /// Go's `time.Duration.String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let u = self.0.as_nanos();
        if u == 0 {
            return f.write_str("0s");
        }
        if u < 1_000_000_000 {
            // Sub-second: ns, µs or ms with a fraction.
            let (unit, prec) = if u < 1_000 {
                ("ns", 0)
            } else if u < 1_000_000 {
                ("µs", 3)
            } else {
                ("ms", 6)
            };
            return write!(f, "{}{unit}", frac(u, prec));
        }
        let mut out = String::new();
        let secs_with_frac = frac(u % 60_000_000_000, 9);
        let total_mins = u / 60_000_000_000;
        if total_mins > 0 {
            let hours = total_mins / 60;
            if hours > 0 {
                out.push_str(&format!("{hours}h"));
            }
            out.push_str(&format!("{}m", total_mins % 60));
        }
        out.push_str(&secs_with_frac);
        out.push('s');
        f.write_str(&out)
    }
}

/// `v / 10^prec` printed with the fraction's trailing zeros (and a bare `.`) removed.
fn frac(v: u128, prec: u32) -> String {
    let p = 10u128.pow(prec);
    let whole = v / p;
    let fr = v % p;
    if prec == 0 || fr == 0 {
        return whole.to_string();
    }
    let digits = format!("{fr:0width$}", width = prec as usize);
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

impl FromStr for GoDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<String> for GoDuration {
    type Error = DurationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<GoDuration> for String {
    fn from(d: GoDuration) -> String {
        d.to_string()
    }
}

impl From<Duration> for GoDuration {
    fn from(d: Duration) -> Self {
        Self(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_and_print_like_go() {
        for (input, secs, nanos, printed) in [
            ("5m", 300, 0, "5m0s"),
            ("1h30m", 5400, 0, "1h30m0s"),
            ("10m0s", 600, 0, "10m0s"),
            ("1.5h", 5400, 0, "1h30m0s"),
            ("300ms", 0, 300_000_000, "300ms"),
            ("1.5s", 1, 500_000_000, "1.5s"),
            ("90s", 90, 0, "1m30s"),
            ("0s", 0, 0, "0s"),
            ("1h", 3600, 0, "1h0m0s"),
            ("2h0m5s", 7205, 0, "2h0m5s"),
            ("1.25ms", 0, 1_250_000, "1.25ms"),
        ] {
            let d = GoDuration::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(d.get(), Duration::new(secs, nanos), "{input}");
            assert_eq!(d.to_string(), printed, "{input}");
        }
    }

    #[test]
    fn durations_outside_the_crd_pattern_are_refused() {
        for bad in [
            "", "5", "m", "5d", "-5m", "1.m", "5 m", "5m ", ".5s", "1u", "00",
        ] {
            assert!(
                matches!(GoDuration::parse(bad), Err(DurationError::Syntax(_))),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn durations_beyond_go_range_are_refused() {
        assert!(matches!(
            GoDuration::parse("3000000h"),
            Err(DurationError::Overflow(_))
        ));
    }

    #[test]
    fn go_status_durations_with_micro_and_nano_units_parse() {
        for (input, nanos) in [
            ("1.5µs", 1500u64),
            ("2us", 2000),
            ("3μs", 3000),
            ("15ns", 15),
            ("0", 0),
        ] {
            let d = GoDuration::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(d.get(), Duration::from_nanos(nanos), "{input}");
        }
    }

    #[test]
    fn printed_durations_parse_back_to_the_same_value() {
        // A deterministic sweep over magnitudes from nanoseconds to thousands of hours.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let nanos = x % 10u64.pow((x % 17) as u32 + 1);
            let d = GoDuration::new(Duration::from_nanos(nanos));
            assert_eq!(GoDuration::parse(&d.to_string()).unwrap(), d, "{d}");
        }
    }

    #[test]
    fn sub_microsecond_durations_print_in_nanoseconds() {
        assert_eq!(
            GoDuration::new(Duration::from_nanos(15)).to_string(),
            "15ns"
        );
        assert_eq!(
            GoDuration::new(Duration::from_nanos(1500)).to_string(),
            "1.5µs"
        );
    }
}
