//! Go `time.Time` as Helm stores it in JSON: RFC 3339 with nanoseconds, trailing fractional
//! zeros trimmed, `Z` for UTC or a `±hh:mm` offset.

use std::fmt;

/// An instant with the UTC offset it is shown in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GoTime {
    /// Seconds since the Unix epoch.
    pub unix_secs: i64,
    /// Nanoseconds within the second.
    pub nanos: u32,
    /// Offset from UTC in seconds (0 prints as `Z`).
    pub offset_secs: i32,
}

/// A time that did not parse as RFC 3339.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parsing time {0:?} as RFC 3339")]
pub struct TimeError(pub String);

/// Seconds from 0001-01-01T00:00:00Z (Go's zero time) to the Unix epoch.
const ZERO_UNIX: i64 = -62_135_596_800;

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

impl GoTime {
    /// Go's zero `time.Time` (`0001-01-01T00:00:00Z`).
    pub const ZERO: GoTime = GoTime {
        unix_secs: ZERO_UNIX,
        nanos: 0,
        offset_secs: 0,
    };

    /// A UTC time from Unix seconds and nanoseconds.
    pub fn from_unix(unix_secs: i64, nanos: u32) -> Self {
        GoTime {
            unix_secs,
            nanos,
            offset_secs: 0,
        }
    }

    /// The current time (UTC).
    pub fn now() -> Self {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        GoTime::from_unix(i64::try_from(d.as_secs()).unwrap_or(0), d.subsec_nanos())
    }

    /// From a file modification time (UTC).
    pub fn from_system(t: std::time::SystemTime) -> Self {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => GoTime::from_unix(i64::try_from(d.as_secs()).unwrap_or(0), d.subsec_nanos()),
            Err(e) => {
                let d = e.duration();
                let secs = -i64::try_from(d.as_secs()).unwrap_or(0);
                if d.subsec_nanos() == 0 {
                    GoTime::from_unix(secs, 0)
                } else {
                    GoTime::from_unix(secs - 1, 1_000_000_000 - d.subsec_nanos())
                }
            }
        }
    }

    /// Go's `IsZero`.
    pub fn is_zero(&self) -> bool {
        self.unix_secs == ZERO_UNIX && self.nanos == 0
    }

    /// `time.RFC3339Nano` formatting.
    pub fn to_rfc3339_nano(&self) -> String {
        let local = self.unix_secs + i64::from(self.offset_secs);
        let days = local.div_euclid(86_400);
        let sod = local.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        let mut s = format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            y,
            m,
            d,
            sod / 3600,
            (sod / 60) % 60,
            sod % 60
        );
        if self.nanos != 0 {
            let frac = format!("{:09}", self.nanos);
            s.push('.');
            s.push_str(frac.trim_end_matches('0'));
        }
        if self.offset_secs == 0 {
            s.push('Z');
        } else {
            let sign = if self.offset_secs < 0 { '-' } else { '+' };
            let o = self.offset_secs.unsigned_abs();
            s.push_str(&format!("{sign}{:02}:{:02}", o / 3600, (o / 60) % 60));
        }
        s
    }

    /// Parses RFC 3339 (with or without a fraction), as Go's `time.Time.UnmarshalJSON`.
    pub fn parse_rfc3339(s: &str) -> Result<Self, TimeError> {
        let err = || TimeError(s.to_owned());
        let b = s.as_bytes();
        if b.len() < 20
            || b[4] != b'-'
            || b[7] != b'-'
            || !matches!(b[10], b'T' | b't')
            || b[13] != b':'
            || b[16] != b':'
        {
            return Err(err());
        }
        let num = |r: std::ops::Range<usize>| -> Result<i64, TimeError> {
            let part = s.get(r).ok_or_else(err)?;
            if !part.bytes().all(|c| c.is_ascii_digit()) {
                return Err(err());
            }
            part.parse::<i64>().map_err(|_| err())
        };
        let (y, mo, d, h, mi, se) = (
            num(0..4)?,
            num(5..7)?,
            num(8..10)?,
            num(11..13)?,
            num(14..16)?,
            num(17..19)?,
        );
        if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
            return Err(err());
        }
        let mut i = 19;
        let mut nanos: u32 = 0;
        if b.get(i) == Some(&b'.') || b.get(i) == Some(&b',') {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i == start {
                return Err(err());
            }
            let digits = &s[start..i.min(start + 9)];
            let mut padded = digits.to_owned();
            while padded.len() < 9 {
                padded.push('0');
            }
            nanos = padded.parse().map_err(|_| err())?;
        }
        let offset_secs: i32 = match b.get(i) {
            Some(b'Z' | b'z') if i + 1 == b.len() => 0,
            Some(c @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
                let oh = num(i + 1..i + 3)?;
                let om = num(i + 4..i + 6)?;
                let o = i32::try_from(oh * 3600 + om * 60).map_err(|_| err())?;
                if *c == b'-' { -o } else { o }
            }
            _ => return Err(err()),
        };
        let local = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se;
        Ok(GoTime {
            unix_secs: local - i64::from(offset_secs),
            nanos,
            offset_secs,
        })
    }
}

impl Default for GoTime {
    /// Go's zero time.
    fn default() -> Self {
        GoTime::ZERO
    }
}

impl fmt::Display for GoTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339_nano())
    }
}

impl serde::Serialize for GoTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339_nano())
    }
}

impl<'de> serde::Deserialize<'de> for GoTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() {
            // Helm v3 wrote zero times as "".
            return Ok(GoTime::ZERO);
        }
        GoTime::parse_rfc3339(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_rfc3339_nano() {
        for s in [
            "2026-01-02T03:04:05.123456789Z",
            "2026-01-02T03:04:05.1Z",
            "2026-01-02T03:04:05Z",
            "0001-01-01T00:00:00Z",
            "2024-02-29T23:59:59.5+02:00",
            "1969-12-31T23:59:59.999Z",
        ] {
            assert_eq!(GoTime::parse_rfc3339(s).unwrap().to_rfc3339_nano(), s);
        }
        assert!(
            GoTime::parse_rfc3339("0001-01-01T00:00:00Z")
                .unwrap()
                .is_zero()
        );
        assert_eq!(
            GoTime::from_unix(0, 0).to_rfc3339_nano(),
            "1970-01-01T00:00:00Z"
        );
        assert!(GoTime::parse_rfc3339("2026-01-02 03:04:05").is_err());
        assert!(GoTime::parse_rfc3339("").is_err());
    }
}
