//! Sprig's date functions (`now`, `date`, `dateInZone`, `dateModify`, `ago`, `duration`,
//! `durationRound`, `htmlDate`, `toDate`, `unixEpoch` …) over a model of Go's `time.Time`:
//! Unix seconds and nanoseconds, a location, and the optional monotonic reading that `now`
//! carries (printed as ` m=+0.000123456`).
//!
//! Go's layout language (`2006-01-02 15:04:05.999999999 -0700 MST`) is implemented here for
//! both formatting and parsing, with Go's exact parse errors. Time zones come from the IANA
//! database compiled into `chrono-tz`; `Local` is the zone named by `TZ`, or UTC.

use std::sync::{Arc, LazyLock, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use chrono::{Offset, TimeZone};
use chrono_tz::{OffsetName, Tz};
use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Function, GoKind, Object, Signature, Value};

const NANOS_PER_SEC: i64 = 1_000_000_000;
/// Unix seconds of Go's zero time, January 1, year 1, 00:00:00 UTC.
const ZERO_TIME_UNIX: i64 = -62_135_596_800;

/// A time zone.
#[derive(Clone, Debug, PartialEq)]
pub enum Location {
    /// `time.UTC`.
    Utc,
    /// `time.Local`: the `TZ` zone, or UTC.
    Local,
    /// An IANA zone.
    Zone(Tz),
    /// A fixed offset with a name (from parsing).
    Fixed(String, i32),
}

static LOCAL: LazyLock<Option<Tz>> = LazyLock::new(|| {
    let tz = std::env::var("TZ").ok()?;
    let tz = tz.strip_prefix(':').unwrap_or(&tz);
    if tz.is_empty() || tz == "UTC" {
        return None;
    }
    tz.parse::<Tz>().ok()
});

fn zone_lookup_table(tz: Tz, unix: i64) -> (String, i32) {
    let Some(dt) = chrono::DateTime::from_timestamp(unix, 0) else {
        return ("UTC".into(), 0);
    };
    let off = tz.offset_from_utc_datetime(&dt.naive_utc());
    let secs = off.fix().local_minus_utc();
    let name = match off.abbreviation() {
        Some(name) => name.to_string(),
        // tzdata's numeric abbreviations (`+11`, `-03`, `+0545`), which chrono-tz omits.
        None => {
            let sign = if secs < 0 { '-' } else { '+' };
            let (h, m) = (secs.abs() / 3600, secs.abs() / 60 % 60);
            if m == 0 {
                format!("{sign}{h:02}")
            } else {
                format!("{sign}{h:02}{m:02}")
            }
        }
    };
    (name, secs)
}

fn zone_lookup(tz: Tz, unix: i64) -> (String, i32) {
    extended_lookup(tz, unix).unwrap_or_else(|| zone_lookup_table(tz, unix))
}

/// chrono-tz knows explicit transitions only up to 2037; Go goes on with the zone's POSIX
/// rule. For a zone that still switched in 2037 and has no table data for the asked year,
/// derive the rule (month, week, weekday, local time) from 2037's two transitions and apply
/// it to that year.
fn extended_lookup(tz: Tz, unix: i64) -> Option<(String, i32)> {
    const JAN_2037: i64 = 2_114_380_800;
    const JAN_2038: i64 = 2_145_916_800;
    const HALF_YEAR: i64 = 181 * 86_400;
    if unix < JAN_2038 {
        return None;
    }
    let at = |t: i64| zone_lookup_table(tz, t);
    if at(JAN_2037).1 == at(JAN_2037 + HALF_YEAR).1 {
        return None;
    }
    let (year, _, _) = civil_from_days(unix.div_euclid(86_400));
    if year > 1_000_000 {
        return None;
    }
    let jan = days_from_civil(year, 1, 1) * 86_400;
    if at(jan).1 != at(jan + HALF_YEAR).1 {
        return None;
    }
    let find = |mut lo: i64, mut hi: i64| {
        let start = at(lo).1;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if at(mid).1 == start {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        hi
    };
    let t1 = find(JAN_2037, JAN_2037 + HALF_YEAR);
    let t2 = find(JAN_2037 + HALF_YEAR, JAN_2038 - 1);
    let first = at(t1 - 1);
    let second = at(t1);
    let third = at(t2);
    let rule = |t: i64, off_before: i32| {
        let wall = t + i64::from(off_before);
        let days = wall.div_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        let weekday = (4 + days).rem_euclid(7);
        let week = if d + 7 > days_in(m, y) {
            5
        } else {
            (d - 1) / 7 + 1
        };
        (m, week, weekday, wall.rem_euclid(86_400))
    };
    let apply = |(m, week, weekday, sod): (i64, i64, i64, i64), off_before: i32| {
        let first_day = days_from_civil(year, m, 1);
        let mut day = 1 + (weekday - (4 + first_day).rem_euclid(7)).rem_euclid(7) + (week - 1) * 7;
        while day > days_in(m, year) {
            day -= 7;
        }
        days_from_civil(year, m, day) * 86_400 + sod - i64::from(off_before)
    };
    let y1 = apply(rule(t1, first.1), first.1);
    let y2 = apply(rule(t2, second.1), second.1);
    Some(if unix < y1 {
        first
    } else if unix < y2 {
        second
    } else {
        third
    })
}

impl Location {
    /// `time.LoadLocation`.
    pub fn load(name: &str) -> Option<Location> {
        match name {
            "" | "UTC" => Some(Location::Utc),
            "Local" => Some(Location::Local),
            _ => name.parse::<Tz>().ok().map(Location::Zone),
        }
    }

    /// The zone abbreviation and offset (seconds east of UTC) in effect at `unix`.
    fn lookup(&self, unix: i64) -> (String, i32) {
        match self {
            Location::Utc => ("UTC".into(), 0),
            Location::Local => match *LOCAL {
                Some(tz) => zone_lookup(tz, unix),
                None => ("UTC".into(), 0),
            },
            Location::Zone(tz) => zone_lookup(*tz, unix),
            Location::Fixed(name, off) => (name.clone(), *off),
        }
    }
}

/// Go's `time.Time`.
#[derive(Clone, Debug, PartialEq)]
pub struct Time {
    unix: i64,
    nsec: u32,
    loc: Location,
    /// Monotonic clock reading in nanoseconds, as `time.Now` records it.
    mono: Option<i64>,
}

static PROCESS_START: OnceLock<Instant> = OnceLock::new();

/// Go's monotonic clock: nanoseconds since the process (this library) started, plus one.
fn mono_now() -> i64 {
    let start = PROCESS_START.get_or_init(Instant::now);
    i64::try_from(start.elapsed().as_nanos())
        .unwrap_or(i64::MAX)
        .saturating_add(1)
}

/// Go's `time.Duration`: nanoseconds.
pub type Duration = i64;

impl Time {
    /// `time.Now()`: local, with a monotonic reading.
    pub fn now() -> Time {
        let mono = mono_now();
        let (unix, nsec) = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => (
                i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                d.subsec_nanos(),
            ),
            Err(e) => {
                let d = e.duration();
                let secs = -i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                if d.subsec_nanos() == 0 {
                    (secs, 0)
                } else {
                    (secs - 1, 1_000_000_000 - d.subsec_nanos())
                }
            }
        };
        Time {
            unix,
            nsec,
            loc: Location::Local,
            mono: Some(mono),
        }
    }

    /// `time.Unix(sec, 0)` (local).
    pub fn from_unix(unix: i64) -> Time {
        Time {
            unix,
            nsec: 0,
            loc: Location::Local,
            mono: None,
        }
    }

    /// Go's zero `time.Time{}`.
    pub fn zero() -> Time {
        Time {
            unix: ZERO_TIME_UNIX,
            nsec: 0,
            loc: Location::Utc,
            mono: None,
        }
    }

    /// Seconds since the Unix epoch.
    pub fn unix(&self) -> i64 {
        self.unix
    }

    /// Nanoseconds within the second.
    pub fn nanosecond(&self) -> u32 {
        self.nsec
    }

    /// `t.In(loc)` (drops the monotonic reading).
    pub fn in_location(&self, loc: Location) -> Time {
        Time {
            loc,
            mono: None,
            ..self.clone()
        }
    }

    /// `t.Add(d)`.
    pub fn add(&self, d: Duration) -> Time {
        let mut unix = self.unix.wrapping_add(d / NANOS_PER_SEC);
        let mut nsec = i64::from(self.nsec) + d % NANOS_PER_SEC;
        if nsec >= NANOS_PER_SEC {
            unix = unix.wrapping_add(1);
            nsec -= NANOS_PER_SEC;
        } else if nsec < 0 {
            unix = unix.wrapping_sub(1);
            nsec += NANOS_PER_SEC;
        }
        let mono = self.mono.and_then(|m| m.checked_add(d));
        Time {
            unix,
            nsec: u32::try_from(nsec).unwrap_or(0),
            loc: self.loc.clone(),
            mono,
        }
    }

    /// `t.Sub(u)`, saturating like Go.
    pub fn sub(&self, u: &Time) -> Duration {
        if let (Some(a), Some(b)) = (self.mono, u.mono) {
            return a.saturating_sub(b);
        }
        let secs = i128::from(self.unix) - i128::from(u.unix);
        let ns = secs * i128::from(NANOS_PER_SEC) + i128::from(self.nsec) - i128::from(u.nsec);
        i64::try_from(ns).unwrap_or(if ns < 0 { i64::MIN } else { i64::MAX })
    }

    /// `t.Format(layout)`.
    pub fn format(&self, layout: &str) -> String {
        let (name, offset) = self.loc.lookup(self.unix);
        let local = self.unix.wrapping_add(i64::from(offset));
        let days = local.div_euclid(86_400);
        let secs_of_day = local.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        let yday = days - days_from_civil(year, 1, 1) + 1;
        let weekday = (4 + days).rem_euclid(7) as usize;
        let (hour, min, sec) = (secs_of_day / 3600, secs_of_day / 60 % 60, secs_of_day % 60);
        let mut b = String::new();
        let mut layout = layout.as_bytes();
        loop {
            let (prefix, std, suffix) = next_std_chunk(layout);
            b.push_str(&String::from_utf8_lossy(prefix));
            let Some(std) = std else { break };
            layout = suffix;
            match std {
                Std::Year => append_int(&mut b, year.abs() % 100, 2),
                Std::LongYear => append_int(&mut b, year, 4),
                Std::Month => b.push_str(&MONTHS[(month - 1) as usize][..3]),
                Std::LongMonth => b.push_str(MONTHS[(month - 1) as usize]),
                Std::NumMonth => append_int(&mut b, month, 0),
                Std::ZeroMonth => append_int(&mut b, month, 2),
                Std::WeekDay => b.push_str(&DAYS[weekday][..3]),
                Std::LongWeekDay => b.push_str(DAYS[weekday]),
                Std::Day => append_int(&mut b, day, 0),
                Std::UnderDay => {
                    if day < 10 {
                        b.push(' ');
                    }
                    append_int(&mut b, day, 0);
                }
                Std::ZeroDay => append_int(&mut b, day, 2),
                Std::UnderYearDay => {
                    if yday < 100 {
                        b.push(' ');
                        if yday < 10 {
                            b.push(' ');
                        }
                    }
                    append_int(&mut b, yday, 0);
                }
                Std::ZeroYearDay => append_int(&mut b, yday, 3),
                Std::Hour => append_int(&mut b, hour, 2),
                Std::Hour12 | Std::ZeroHour12 => {
                    let hr = if hour % 12 == 0 { 12 } else { hour % 12 };
                    append_int(&mut b, hr, if std == Std::Hour12 { 0 } else { 2 });
                }
                Std::Minute => append_int(&mut b, min, 0),
                Std::ZeroMinute => append_int(&mut b, min, 2),
                Std::Second => append_int(&mut b, sec, 0),
                Std::ZeroSecond => append_int(&mut b, sec, 2),
                Std::PM => b.push_str(if hour >= 12 { "PM" } else { "AM" }),
                Std::Pm => b.push_str(if hour >= 12 { "pm" } else { "am" }),
                Std::Tz(kind) => {
                    if offset == 0 && kind.iso {
                        b.push('Z');
                        continue;
                    }
                    let mut zone = offset / 60;
                    let mut absoffset = offset;
                    if zone < 0 {
                        b.push('-');
                        zone = -zone;
                        absoffset = -absoffset;
                    } else {
                        b.push('+');
                    }
                    append_int(&mut b, i64::from(zone / 60), 2);
                    if kind.colon {
                        b.push(':');
                    }
                    if !kind.short {
                        append_int(&mut b, i64::from(zone % 60), 2);
                    }
                    if kind.seconds {
                        if kind.colon {
                            b.push(':');
                        }
                        append_int(&mut b, i64::from(absoffset % 60), 2);
                    }
                }
                Std::TzName => {
                    if !name.is_empty() {
                        b.push_str(&name);
                        continue;
                    }
                    let mut zone = offset / 60;
                    if zone < 0 {
                        b.push('-');
                        zone = -zone;
                    } else {
                        b.push('+');
                    }
                    append_int(&mut b, i64::from(zone / 60), 2);
                    append_int(&mut b, i64::from(zone % 60), 2);
                }
                Std::Frac { digits, trim, sep } => {
                    if trim && (digits == 0 || self.nsec == 0) {
                        continue;
                    }
                    let mut s = format!("{:09}", self.nsec);
                    s.truncate(digits.min(9));
                    if trim {
                        let t = s.trim_end_matches('0').len();
                        s.truncate(t);
                        if s.is_empty() {
                            continue;
                        }
                    }
                    b.push(char::from(sep));
                    b.push_str(&s);
                }
            }
        }
        b
    }

    /// `t.String()`: `2006-01-02 15:04:05.999999999 -0700 MST` plus ` m=±s.nnnnnnnnn` when
    /// the time has a monotonic reading.
    pub fn go_string(&self) -> String {
        let mut s = self.format("2006-01-02 15:04:05.999999999 -0700 MST");
        if let Some(m) = self.mono {
            let sign = if m < 0 { '-' } else { '+' };
            let u = m.unsigned_abs();
            let (secs, frac) = (u / 1_000_000_000, u % 1_000_000_000);
            s.push_str(&format!(" m={sign}{secs}.{frac:09}"));
        }
        s
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// Proleptic Gregorian date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Day count since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in(month: i64, year: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Go's `appendInt` with zero padding to `width`.
fn append_int(b: &mut String, x: i64, width: usize) {
    if x < 0 {
        b.push('-');
    }
    let digits = x.unsigned_abs().to_string();
    for _ in digits.len()..width {
        b.push('0');
    }
    b.push_str(&digits);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TzKind {
    iso: bool,
    colon: bool,
    short: bool,
    seconds: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Std {
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    PM,
    Pm,
    Tz(TzKind),
    TzName,
    Frac { digits: usize, trim: bool, sep: u8 },
}

const fn tzk(iso: bool, colon: bool, short: bool, seconds: bool) -> Std {
    Std::Tz(TzKind {
        iso,
        colon,
        short,
        seconds,
    })
}

fn starts_with_lower(s: &[u8]) -> bool {
    s.first().is_some_and(|c| c.is_ascii_lowercase())
}

fn is_digit(s: &[u8], i: usize) -> bool {
    s.get(i).is_some_and(u8::is_ascii_digit)
}

/// Go's `nextStdChunk`: the text before the first layout element, the element, the rest.
fn next_std_chunk(layout: &[u8]) -> (&[u8], Option<Std>, &[u8]) {
    let at = |i: usize, s: &[u8]| layout.get(i..i + s.len()) == Some(s);
    for i in 0..layout.len() {
        let hit = |std: Std, len: usize| Some((&layout[..i], Some(std), &layout[i + len..]));
        let found = match layout[i] {
            b'J' if at(i, b"Jan") => {
                if at(i, b"January") {
                    hit(Std::LongMonth, 7)
                } else if !starts_with_lower(&layout[i + 3..]) {
                    hit(Std::Month, 3)
                } else {
                    None
                }
            }
            b'M' if layout.len() >= i + 3 => {
                if at(i, b"Mon") {
                    if at(i, b"Monday") {
                        hit(Std::LongWeekDay, 6)
                    } else if !starts_with_lower(&layout[i + 3..]) {
                        hit(Std::WeekDay, 3)
                    } else if at(i, b"MST") {
                        hit(Std::TzName, 3)
                    } else {
                        None
                    }
                } else if at(i, b"MST") {
                    hit(Std::TzName, 3)
                } else {
                    None
                }
            }
            b'0' => match layout.get(i + 1) {
                Some(c @ b'1'..=b'6') => hit(
                    [
                        Std::ZeroMonth,
                        Std::ZeroDay,
                        Std::ZeroHour12,
                        Std::ZeroMinute,
                        Std::ZeroSecond,
                        Std::Year,
                    ][usize::from(c - b'1')],
                    2,
                ),
                Some(b'0') if layout.get(i + 2) == Some(&b'2') => hit(Std::ZeroYearDay, 3),
                _ => None,
            },
            b'1' => {
                if layout.get(i + 1) == Some(&b'5') {
                    hit(Std::Hour, 2)
                } else {
                    hit(Std::NumMonth, 1)
                }
            }
            b'2' => {
                if at(i, b"2006") {
                    hit(Std::LongYear, 4)
                } else {
                    hit(Std::Day, 1)
                }
            }
            b'_' => {
                if layout.get(i + 1) == Some(&b'2') {
                    if at(i + 1, b"2006") {
                        Some((&layout[..i + 1], Some(Std::LongYear), &layout[i + 5..]))
                    } else {
                        hit(Std::UnderDay, 2)
                    }
                } else if at(i, b"__2") {
                    hit(Std::UnderYearDay, 3)
                } else {
                    None
                }
            }
            b'3' => hit(Std::Hour12, 1),
            b'4' => hit(Std::Minute, 1),
            b'5' => hit(Std::Second, 1),
            b'P' if layout.get(i + 1) == Some(&b'M') => hit(Std::PM, 2),
            b'p' if layout.get(i + 1) == Some(&b'm') => hit(Std::Pm, 2),
            b'-' => {
                if at(i, b"-070000") {
                    hit(tzk(false, false, false, true), 7)
                } else if at(i, b"-07:00:00") {
                    hit(tzk(false, true, false, true), 9)
                } else if at(i, b"-0700") {
                    hit(tzk(false, false, false, false), 5)
                } else if at(i, b"-07:00") {
                    hit(tzk(false, true, false, false), 6)
                } else if at(i, b"-07") {
                    hit(tzk(false, false, true, false), 3)
                } else {
                    None
                }
            }
            b'Z' => {
                if at(i, b"Z070000") {
                    hit(tzk(true, false, false, true), 7)
                } else if at(i, b"Z07:00:00") {
                    hit(tzk(true, true, false, true), 9)
                } else if at(i, b"Z0700") {
                    hit(tzk(true, false, false, false), 5)
                } else if at(i, b"Z07:00") {
                    hit(tzk(true, true, false, false), 6)
                } else if at(i, b"Z07") {
                    hit(tzk(true, false, true, false), 3)
                } else {
                    None
                }
            }
            c @ (b'.' | b',') => match layout.get(i + 1) {
                Some(&ch @ (b'0' | b'9')) => {
                    let mut j = i + 1;
                    while layout.get(j) == Some(&ch) {
                        j += 1;
                    }
                    if !is_digit(layout, j) {
                        Some((
                            &layout[..i],
                            Some(Std::Frac {
                                digits: j - (i + 1),
                                trim: ch == b'9',
                                sep: c,
                            }),
                            &layout[j..],
                        ))
                    } else {
                        None
                    }
                }
                _ => None,
            },
            _ => None,
        };
        if let Some(f) = found {
            return f;
        }
    }
    (layout, None, &[])
}

/// Go's `time.quote` (non-ASCII and control bytes as `\xNN`).
fn quote(s: &[u8]) -> String {
    let mut out = String::from("\"");
    for &c in s {
        if !(b' '..0x80).contains(&c) {
            out.push_str(&format!("\\x{c:02x}"));
        } else {
            if c == b'"' || c == b'\\' {
                out.push('\\');
            }
            out.push(char::from(c));
        }
    }
    out.push('"');
    out
}

fn leading_int(s: &[u8]) -> Result<(u64, &[u8]), ()> {
    let mut i = 0;
    let mut x: u64 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if x > (1 << 63) / 10 {
            return Err(());
        }
        x = x * 10 + u64::from(s[i] - b'0');
        if x > 1 << 63 {
            return Err(());
        }
        i += 1;
    }
    Ok((x, &s[i..]))
}

/// Go's `time.atoi`.
fn atoi(s: &[u8]) -> Result<i64, ()> {
    let (neg, s) = match s.first() {
        Some(&c @ (b'-' | b'+')) => (c == b'-', &s[1..]),
        _ => (false, s),
    };
    let (q, rem) = leading_int(s)?;
    if !rem.is_empty() || q > i64::MAX as u64 {
        return Err(());
    }
    let x = q as i64;
    Ok(if neg { -x } else { x })
}

fn getnum(s: &[u8], fixed: bool) -> Result<(i64, &[u8]), ()> {
    if !is_digit(s, 0) {
        return Err(());
    }
    if !is_digit(s, 1) {
        if fixed {
            return Err(());
        }
        return Ok((i64::from(s[0] - b'0'), &s[1..]));
    }
    Ok((
        i64::from(s[0] - b'0') * 10 + i64::from(s[1] - b'0'),
        &s[2..],
    ))
}

fn getnum3(s: &[u8], fixed: bool) -> Result<(i64, &[u8]), ()> {
    let mut n = 0;
    let mut i = 0;
    while i < 3 && is_digit(s, i) {
        n = n * 10 + i64::from(s[i] - b'0');
        i += 1;
    }
    if i == 0 || (fixed && i != 3) {
        return Err(());
    }
    Ok((n, &s[i..]))
}

fn ascii_match(a: &[u8], b: &[u8]) -> bool {
    a.iter().zip(b).all(|(&c1, &c2)| {
        c1 == c2 || {
            let (l1, l2) = (c1 | 0x20, c2 | 0x20);
            l1 == l2 && l1.is_ascii_lowercase()
        }
    })
}

fn lookup<'a>(tab: &[&str], val: &'a [u8]) -> Result<(usize, &'a [u8]), ()> {
    for (i, v) in tab.iter().enumerate() {
        let v = v.as_bytes();
        if val.len() >= v.len() && ascii_match(&val[..v.len()], v) {
            return Ok((i, &val[v.len()..]));
        }
    }
    Err(())
}

fn cutspace(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&c| c == b' ').count();
    &s[n..]
}

fn skip<'a>(mut value: &'a [u8], mut prefix: &[u8]) -> Result<&'a [u8], &'a [u8]> {
    while let Some(&p) = prefix.first() {
        if p == b' ' {
            if value.first().is_some_and(|&c| c != b' ') {
                return Err(value);
            }
            prefix = cutspace(prefix);
            value = cutspace(value);
            continue;
        }
        if value.first() != Some(&p) {
            return Err(value);
        }
        prefix = &prefix[1..];
        value = &value[1..];
    }
    Ok(value)
}

fn parse_signed_offset(value: &[u8]) -> usize {
    match value.first() {
        Some(b'-' | b'+') => {}
        _ => return 0,
    }
    match leading_int(&value[1..]) {
        Ok((x, rem)) if rem.len() != value.len() - 1 && x <= 23 => value.len() - rem.len(),
        _ => 0,
    }
}

fn parse_time_zone(value: &[u8]) -> Option<usize> {
    if value.len() < 3 {
        return None;
    }
    if value.starts_with(b"ChST") || value.starts_with(b"MeST") {
        return Some(4);
    }
    if value.starts_with(b"GMT") {
        let rest = &value[3..];
        return Some(if rest.is_empty() {
            3
        } else {
            3 + parse_signed_offset(rest)
        });
    }
    if value[0] == b'+' || value[0] == b'-' {
        let n = parse_signed_offset(value);
        return (n > 0).then_some(n);
    }
    let upper = value
        .iter()
        .take(6)
        .take_while(|c| c.is_ascii_uppercase())
        .count();
    match upper {
        5 if value[4] == b'T' => Some(5),
        4 if value[3] == b'T' || value.starts_with(b"WITA") => Some(4),
        3 => Some(3),
        _ => None,
    }
}

fn parse_nanoseconds(value: &[u8], nbytes: usize) -> Result<(i64, &'static str), ()> {
    if !matches!(value.first(), Some(b'.' | b',')) {
        return Err(());
    }
    let nbytes = nbytes.min(10).min(value.len());
    let ns = atoi(&value[1..nbytes])?;
    if ns < 0 {
        return Ok((0, "fractional second"));
    }
    let mut ns = ns;
    for _ in 0..10usize.saturating_sub(nbytes) {
        ns *= 10;
    }
    Ok((ns, ""))
}

const SHORT_MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const SHORT_DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

/// `time.ParseInLocation(layout, value, Local)` with Go's error messages.
pub fn parse_in_local(layout_str: &str, value_str: &str) -> Result<Time, String> {
    let alayout = layout_str.as_bytes();
    let avalue = value_str.as_bytes();
    let err_elem = |layout_elem: &[u8], value_elem: &[u8]| {
        format!(
            "parsing time {} as {}: cannot parse {} as {}",
            quote(avalue),
            quote(alayout),
            quote(value_elem),
            quote(layout_elem)
        )
    };
    let err_msg = |msg: &str| format!("parsing time {}{}", quote(avalue), msg);
    let mut layout = alayout;
    let mut value = avalue;
    let (mut am_set, mut pm_set) = (false, false);
    let (mut year, mut month, mut day, mut yday) = (0i64, -1i64, -1i64, -1i64);
    let (mut hour, mut min, mut sec, mut nsec) = (0i64, 0i64, 0i64, 0i64);
    let mut utc = false;
    let mut zone_offset: Option<i64> = None;
    let mut zone_name: Vec<u8> = Vec::new();
    loop {
        let (prefix, std, suffix) = next_std_chunk(layout);
        let stdstr = &layout[prefix.len()..layout.len() - suffix.len()];
        value = match skip(value, prefix) {
            Ok(v) => v,
            Err(v) => return Err(err_elem(prefix, v)),
        };
        let Some(std) = std else {
            if !value.is_empty() {
                return Err(err_msg(&format!(": extra text: {}", quote(value))));
            }
            break;
        };
        layout = suffix;
        let hold = value;
        let mut range_err = "";
        let res: Result<(), ()> = (|| {
            match std {
                Std::Year => {
                    if value.len() < 2 {
                        return Err(());
                    }
                    let p = &value[..2];
                    value = &value[2..];
                    year = atoi(p)?;
                    year += if year >= 69 { 1900 } else { 2000 };
                }
                Std::LongYear => {
                    if value.len() < 4 || !is_digit(value, 0) {
                        return Err(());
                    }
                    let p = &value[..4];
                    value = &value[4..];
                    year = atoi(p)?;
                }
                Std::Month | Std::LongMonth => {
                    let (m, rest) = if std == Std::Month {
                        lookup(&SHORT_MONTHS, value)?
                    } else {
                        lookup(&MONTHS, value)?
                    };
                    month = m as i64 + 1;
                    value = rest;
                }
                Std::NumMonth | Std::ZeroMonth => {
                    let (m, rest) = getnum(value, std == Std::ZeroMonth)?;
                    month = m;
                    value = rest;
                    if !(1..=12).contains(&month) {
                        range_err = "month";
                    }
                }
                Std::WeekDay | Std::LongWeekDay => {
                    let (_, rest) = if std == Std::WeekDay {
                        lookup(&SHORT_DAYS, value)?
                    } else {
                        lookup(&DAYS, value)?
                    };
                    value = rest;
                }
                Std::Day | Std::UnderDay | Std::ZeroDay => {
                    if std == Std::UnderDay && value.first() == Some(&b' ') {
                        value = &value[1..];
                    }
                    let (d, rest) = getnum(value, std == Std::ZeroDay)?;
                    day = d;
                    value = rest;
                }
                Std::UnderYearDay | Std::ZeroYearDay => {
                    for _ in 0..2 {
                        if std == Std::UnderYearDay && value.first() == Some(&b' ') {
                            value = &value[1..];
                        }
                    }
                    let (d, rest) = getnum3(value, std == Std::ZeroYearDay)?;
                    yday = d;
                    value = rest;
                }
                Std::Hour => {
                    let (h, rest) = getnum(value, false)?;
                    hour = h;
                    value = rest;
                    if !(0..24).contains(&hour) {
                        range_err = "hour";
                    }
                }
                Std::Hour12 | Std::ZeroHour12 => {
                    let (h, rest) = getnum(value, std == Std::ZeroHour12)?;
                    hour = h;
                    value = rest;
                    if !(0..=12).contains(&hour) {
                        range_err = "hour";
                    }
                }
                Std::Minute | Std::ZeroMinute => {
                    let (m, rest) = getnum(value, std == Std::ZeroMinute)?;
                    min = m;
                    value = rest;
                    if !(0..60).contains(&min) {
                        range_err = "minute";
                    }
                }
                Std::Second | Std::ZeroSecond => {
                    let (s, rest) = getnum(value, std == Std::ZeroSecond)?;
                    sec = s;
                    value = rest;
                    if !(0..60).contains(&sec) {
                        range_err = "second";
                        return Ok(());
                    }
                    if value.len() >= 2 && matches!(value[0], b'.' | b',') && is_digit(value, 1) {
                        if let (_, Some(Std::Frac { .. }), _) = next_std_chunk(layout) {
                            return Ok(());
                        }
                        let mut n = 2;
                        while n < value.len() && is_digit(value, n) {
                            n += 1;
                        }
                        let (ns, r) = parse_nanoseconds(value, n)?;
                        nsec = ns;
                        range_err = r;
                        value = &value[n..];
                    }
                }
                Std::PM | Std::Pm => {
                    if value.len() < 2 {
                        return Err(());
                    }
                    let p = &value[..2];
                    value = &value[2..];
                    let (pm, am): (&[u8], &[u8]) = if std == Std::PM {
                        (b"PM", b"AM")
                    } else {
                        (b"pm", b"am")
                    };
                    if p == pm {
                        pm_set = true;
                    } else if p == am {
                        am_set = true;
                    } else {
                        return Err(());
                    }
                }
                Std::Tz(kind) => {
                    if kind.iso && value.first() == Some(&b'Z') {
                        value = &value[1..];
                        utc = true;
                        return Ok(());
                    }
                    let (sign, h, m, s, rest): (u8, &[u8], &[u8], &[u8], &[u8]);
                    if kind.colon && !kind.seconds {
                        if value.len() < 6 || value[3] != b':' {
                            return Err(());
                        }
                        (sign, h, m, s, rest) =
                            (value[0], &value[1..3], &value[4..6], b"00", &value[6..]);
                    } else if kind.short {
                        if value.len() < 3 {
                            return Err(());
                        }
                        (sign, h, m, s, rest) = (value[0], &value[1..3], b"00", b"00", &value[3..]);
                    } else if kind.colon && kind.seconds {
                        if value.len() < 9 || value[3] != b':' || value[6] != b':' {
                            return Err(());
                        }
                        (sign, h, m, s, rest) = (
                            value[0],
                            &value[1..3],
                            &value[4..6],
                            &value[7..9],
                            &value[9..],
                        );
                    } else if kind.seconds {
                        if value.len() < 7 {
                            return Err(());
                        }
                        (sign, h, m, s, rest) = (
                            value[0],
                            &value[1..3],
                            &value[3..5],
                            &value[5..7],
                            &value[7..],
                        );
                    } else {
                        if value.len() < 5 {
                            return Err(());
                        }
                        (sign, h, m, s, rest) =
                            (value[0], &value[1..3], &value[3..5], b"00", &value[5..]);
                    }
                    value = rest;
                    let hr = getnum(h, true)?.0;
                    let mm = getnum(m, true)?.0;
                    let ss = getnum(s, true)?.0;
                    if hr > 24 {
                        range_err = "time zone offset hour";
                    }
                    if mm > 60 {
                        range_err = "time zone offset minute";
                    }
                    if ss > 60 {
                        range_err = "time zone offset second";
                    }
                    let off = (hr * 60 + mm) * 60 + ss;
                    zone_offset = Some(match sign {
                        b'+' => off,
                        b'-' => -off,
                        _ => return Err(()),
                    });
                }
                Std::TzName => {
                    if value.starts_with(b"UTC") {
                        utc = true;
                        value = &value[3..];
                        return Ok(());
                    }
                    let n = parse_time_zone(value).ok_or(())?;
                    zone_name = value[..n].to_vec();
                    value = &value[n..];
                }
                Std::Frac { digits, trim, .. } => {
                    if !trim {
                        let ndigit = 1 + digits;
                        if value.len() < ndigit {
                            return Err(());
                        }
                        let (ns, r) = parse_nanoseconds(value, ndigit)?;
                        nsec = ns;
                        range_err = r;
                        value = &value[ndigit..];
                    } else {
                        if value.len() < 2
                            || !matches!(value[0], b'.' | b',')
                            || !value[1].is_ascii_digit()
                        {
                            return Ok(());
                        }
                        let mut i = 0;
                        while i + 1 < value.len() && value[i + 1].is_ascii_digit() {
                            i += 1;
                        }
                        let (ns, r) = parse_nanoseconds(value, 1 + i)?;
                        nsec = ns;
                        range_err = r;
                        value = &value[1 + i..];
                    }
                }
            }
            Ok(())
        })();
        if !range_err.is_empty() {
            return Err(err_msg(&format!(": {range_err} out of range")));
        }
        if res.is_err() {
            return Err(err_elem(stdstr, hold));
        }
    }
    if pm_set && hour < 12 {
        hour += 12;
    } else if am_set && hour == 12 {
        hour = 0;
    }
    if yday >= 0 {
        let mut m = 0;
        let mut d = 0;
        if is_leap(year) {
            if yday == 31 + 29 {
                m = 2;
                d = 29;
            } else if yday > 31 + 29 {
                yday -= 1;
            }
        }
        if !(1..=365).contains(&yday) {
            return Err(err_msg(": day-of-year out of range"));
        }
        if m == 0 {
            let before = |mo: i64| -> i64 { (1..mo).map(|k| days_in(k, 2001)).sum() };
            m = (yday - 1) / 31 + 1;
            if before(m + 1) < yday {
                m += 1;
            }
            d = yday - before(m);
        }
        if month >= 0 && month != m {
            return Err(err_msg(": day-of-year does not match month"));
        }
        month = m;
        if day >= 0 && day != d {
            return Err(err_msg(": day-of-year does not match day"));
        }
        day = d;
    } else {
        if month < 0 {
            month = 1;
        }
        if day < 0 {
            day = 1;
        }
    }
    if day < 1 || day > days_in(month, year) {
        return Err(err_msg(": day out of range"));
    }
    let wall = days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec;
    let nsec = u32::try_from(nsec).unwrap_or(0);
    let mk = |unix: i64, loc: Location| Time {
        unix,
        nsec,
        loc,
        mono: None,
    };
    if utc {
        return Ok(mk(wall, Location::Utc));
    }
    if let Some(off) = zone_offset {
        let unix = wall - off;
        let (name, loff) = Location::Local.lookup(unix);
        if i64::from(loff) == off && (zone_name.is_empty() || name.as_bytes() == zone_name) {
            return Ok(mk(unix, Location::Local));
        }
        let name = String::from_utf8_lossy(&zone_name).into_owned();
        return Ok(mk(unix, Location::Fixed(name, off as i32)));
    }
    if !zone_name.is_empty() {
        let name = String::from_utf8_lossy(&zone_name).into_owned();
        // Is it the local zone's abbreviation at that time?
        for probe in [wall, wall - i64::from(Location::Local.lookup(wall).1)] {
            let (n, off) = Location::Local.lookup(probe);
            if n == name {
                return Ok(mk(wall - i64::from(off), Location::Local));
            }
        }
        let mut offset = 0;
        if name.len() > 3 && name.starts_with("GMT") {
            offset = atoi(&zone_name[3..]).unwrap_or(0) * 3600;
        }
        return Ok(mk(wall, Location::Fixed(name, offset as i32)));
    }
    // Local wall clock: find the offset in effect.
    let (_, off1) = Location::Local.lookup(wall);
    let unix = wall - i64::from(off1);
    let (_, off2) = Location::Local.lookup(unix);
    let unix = if off2 != off1 {
        wall - i64::from(off2)
    } else {
        unix
    };
    Ok(mk(unix, Location::Local))
}

/// Go's `Duration.String()`.
pub fn duration_string(d: Duration) -> String {
    let neg = d < 0;
    let mut u = d.unsigned_abs();
    let frac = |u: u64, prec: u32| -> (String, u64) {
        let p = 10u64.pow(prec);
        let f = u % p;
        if f == 0 {
            return (String::new(), u / p);
        }
        let s = format!("{:0width$}", f, width = prec as usize);
        (format!(".{}", s.trim_end_matches('0')), u / p)
    };
    let mut out = String::new();
    if u < 1_000_000_000 {
        if u == 0 {
            return "0s".into();
        }
        let (prec, unit) = if u < 1_000 {
            (0, "ns")
        } else if u < 1_000_000 {
            (3, "µs")
        } else {
            (6, "ms")
        };
        let (f, int) = if prec == 0 {
            (String::new(), u)
        } else {
            frac(u, prec)
        };
        out.push_str(&format!("{int}{f}{unit}"));
    } else {
        let (f, secs) = frac(u, 9);
        u = secs / 60;
        let s = format!("{}{f}s", secs % 60);
        if u > 0 {
            let m = u % 60;
            u /= 60;
            if u > 0 {
                out.push_str(&format!("{u}h"));
            }
            out.push_str(&format!("{m}m"));
        }
        out.push_str(&s);
    }
    if neg {
        out.insert(0, '-');
    }
    out
}

/// Go's `time.ParseDuration`.
pub fn parse_duration(orig: &str) -> Result<Duration, String> {
    let invalid = || format!("time: invalid duration {}", quote(orig.as_bytes()));
    let mut s = orig.as_bytes();
    let mut neg = false;
    if let Some(&c @ (b'-' | b'+')) = s.first() {
        neg = c == b'-';
        s = &s[1..];
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut d: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(invalid());
        }
        let pl = s.len();
        let (v, rest) = leading_int(s).map_err(|_| invalid())?;
        s = rest;
        let pre = pl != s.len();
        let mut post = false;
        let (mut f, mut scale) = (0u64, 1f64);
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let pl = s.len();
            let mut overflow = false;
            let mut i = 0;
            while i < s.len() && s[i].is_ascii_digit() {
                if !overflow {
                    if f > (i64::MAX as u64) / 10 {
                        overflow = true;
                    } else {
                        let y = f * 10 + u64::from(s[i] - b'0');
                        if y > 1 << 63 {
                            overflow = true;
                        } else {
                            f = y;
                            scale *= 10.0;
                        }
                    }
                }
                i += 1;
            }
            s = &s[i..];
            post = pl != s.len();
        }
        if !pre && !post {
            return Err(invalid());
        }
        let i = s
            .iter()
            .position(|&c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if i == 0 {
            return Err(format!(
                "time: missing unit in duration {}",
                quote(orig.as_bytes())
            ));
        }
        let u = &s[..i];
        s = &s[i..];
        let unit: u64 = match u {
            b"ns" => 1,
            b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => {
                return Err(format!(
                    "time: unknown unit {} in duration {}",
                    quote(u),
                    quote(orig.as_bytes())
                ));
            }
        };
        if v > (1 << 63) / unit {
            return Err(invalid());
        }
        let mut v = v * unit;
        if f > 0 {
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > 1 << 63 {
                return Err(invalid());
            }
        }
        d += v;
        if d > 1 << 63 {
            return Err(invalid());
        }
    }
    if neg {
        return Ok((d as i64).wrapping_neg());
    }
    if d > i64::MAX as u64 {
        return Err(invalid());
    }
    Ok(d as i64)
}

/// `Duration.Round(m)`.
fn round_duration(d: Duration, m: Duration) -> Duration {
    if m <= 0 {
        return d;
    }
    let mut r = d % m;
    let less_than_half = |x: i64, y: i64| (x as u64).wrapping_add(x as u64) < y as u64;
    if d < 0 {
        r = -r;
        if less_than_half(r, m) {
            return d + r;
        }
        let d1 = d.wrapping_sub(m).wrapping_add(r);
        return if d1 < d { d1 } else { i64::MIN };
    }
    if less_than_half(r, m) {
        return d - r;
    }
    let d1 = d.wrapping_add(m - r);
    if d1 > d { d1 } else { i64::MAX }
}

/// The Go type name of time objects.
pub const TIME_TYPE: &str = "time.Time";

impl Object for Time {
    fn type_name(&self) -> String {
        TIME_TYPE.to_string()
    }

    fn kind(&self) -> GoKind {
        GoKind::Struct
    }

    fn method(&self, name: &str) -> Option<Signature> {
        match name {
            "Year" | "YearDay" | "Day" | "Hour" | "Minute" | "Second" | "Nanosecond" | "Unix"
            | "UnixMilli" | "UnixMicro" | "UnixNano" | "String" | "UTC" | "Local" | "IsZero" => {
                Some(Signature::fixed([]))
            }
            "Format" => Some(Signature::fixed([ArgType::String])),
            "Before" | "After" | "Equal" | "Compare" => {
                Some(Signature::fixed([ArgType::Object(TIME_TYPE)]))
            }
            "AddDate" => Some(Signature::fixed([ArgType::Int, ArgType::Int, ArgType::Int])),
            _ => None,
        }
    }

    fn call_method(&self, name: &str, args: &[Value]) -> Result<Value, FuncError> {
        let (_, offset) = self.loc.lookup(self.unix);
        let local = self.unix.wrapping_add(i64::from(offset));
        let days = local.div_euclid(86_400);
        let sod = local.rem_euclid(86_400);
        let (year, _, day) = civil_from_days(days);
        let wide = i128::from(self.unix) * 1_000_000_000 + i128::from(self.nsec);
        Ok(match name {
            "Year" => Value::Int(year),
            "YearDay" => Value::Int(days - days_from_civil(year, 1, 1) + 1),
            "Day" => Value::Int(day),
            "Hour" => Value::Int(sod / 3600),
            "Minute" => Value::Int(sod / 60 % 60),
            "Second" => Value::Int(sod % 60),
            "Nanosecond" => Value::Int(i64::from(self.nanosecond())),
            "Unix" => Value::Int64(self.unix),
            "UnixMilli" => Value::Int64((wide / 1_000_000) as i64),
            "UnixMicro" => Value::Int64((wide / 1_000) as i64),
            "UnixNano" => Value::Int64(wide as i64),
            "String" => Value::string(self.go_string()),
            "UTC" => Value::Object(Arc::new(self.in_location(Location::Utc))),
            "Local" => Value::Object(Arc::new(self.in_location(Location::Local))),
            "IsZero" => Value::Bool(self.unix == ZERO_TIME_UNIX && self.nsec == 0),
            "Format" => Value::string(self.format(args[0].as_str().unwrap_or_default())),
            "Before" | "After" | "Equal" | "Compare" => {
                let u = args.first().and_then(as_time).unwrap_or_else(Time::zero);
                let ord = (self.unix, self.nsec).cmp(&(u.unix, u.nsec));
                match name {
                    "Before" => Value::Bool(ord.is_lt()),
                    "After" => Value::Bool(ord.is_gt()),
                    "Equal" => Value::Bool(ord.is_eq()),
                    _ => Value::Int(ord as i64),
                }
            }
            "AddDate" => {
                let n = |i: usize| match args.get(i) {
                    Some(Value::Int(v)) => *v,
                    _ => 0,
                };
                let (y, m, d) = civil_from_days(days);
                let months = (m - 1).saturating_add(n(1));
                let year = y
                    .saturating_add(n(0))
                    .saturating_add(months.div_euclid(12))
                    .clamp(-1_000_000_000, 1_000_000_000);
                let month = months.rem_euclid(12) + 1;
                let day_count = days_from_civil(year, month, 1)
                    .saturating_add(d - 1)
                    .saturating_add(n(2).clamp(-1 << 40, 1 << 40));
                let wall = day_count.saturating_mul(86_400).saturating_add(sod);
                let (_, off1) = self.loc.lookup(wall);
                let utc = wall - i64::from(off1);
                let (_, off2) = self.loc.lookup(utc);
                Value::Object(Arc::new(Time {
                    unix: wall - i64::from(off2),
                    nsec: self.nsec,
                    loc: self.loc.clone(),
                    mono: None,
                }))
            }
            _ => return Err(FuncError::new(format!("method {name} not implemented"))),
        })
    }

    fn field(&self, name: &str) -> Option<Value> {
        (name == EXACT_FIELD).then(|| Value::string(self.encode()))
    }

    fn display(&self) -> String {
        self.go_string()
    }

    fn marshal(&self) -> Option<Value> {
        Some(Value::string(
            self.format("2006-01-02T15:04:05.999999999Z07:00"),
        ))
    }
}

fn time_value(t: Time) -> Value {
    Value::Object(Arc::new(t))
}

/// A field name no template can spell (identifiers cannot contain `:`): through it, functions
/// of this module recover the exact time from a `time.Time` object.
const EXACT_FIELD: &str = ":flotilla-exact-time";

impl Time {
    fn encode(&self) -> String {
        let mono = self
            .mono
            .map(|m| m.to_string())
            .unwrap_or_else(|| "-".into());
        let loc = match &self.loc {
            Location::Utc => "U".to_string(),
            Location::Local => "L".to_string(),
            Location::Zone(tz) => format!("Z{}", tz.name()),
            Location::Fixed(name, off) => format!("F{off}:{name}"),
        };
        format!("{} {} {} {}", self.unix, self.nsec, mono, loc)
    }

    fn decode(s: &str) -> Option<Time> {
        let mut parts = s.splitn(4, ' ');
        let unix = parts.next()?.parse().ok()?;
        let nsec = parts.next()?.parse().ok()?;
        let mono = match parts.next()? {
            "-" => None,
            m => Some(m.parse().ok()?),
        };
        let loc = parts.next()?;
        let loc = match loc.split_at(1) {
            ("U", _) => Location::Utc,
            ("L", _) => Location::Local,
            ("Z", name) => Location::Zone(name.parse().ok()?),
            ("F", rest) => {
                let (off, name) = rest.split_once(':')?;
                Location::Fixed(name.to_string(), off.parse().ok()?)
            }
            _ => return None,
        };
        Some(Time {
            unix,
            nsec,
            loc,
            mono,
        })
    }
}

/// The time a `time.Time` object holds.
fn as_time(v: &Value) -> Option<Time> {
    let Value::Object(o) = v else { return None };
    if o.type_name() != TIME_TYPE {
        return None;
    }
    match o.field(EXACT_FIELD) {
        Some(Value::String(s)) => Time::decode(&s),
        _ => None,
    }
}

/// Sprig's `dateInZone` argument rule: times, or `int`/`int64` Unix seconds; anything else
/// means now.
fn date_arg(v: &Value) -> Time {
    match v {
        Value::Int(i) | Value::Int64(i) => Time::from_unix(*i),
        Value::Object(_) => as_time(v).unwrap_or_else(Time::now),
        _ => Time::now(),
    }
}

fn date_in_zone(layout: &str, date: &Value, zone: &str) -> String {
    let t = date_arg(date);
    let loc = Location::load(zone).unwrap_or(Location::Utc);
    t.in_location(loc).format(layout)
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

pub(crate) fn register(map: &mut FuncMap) {
    use ArgType::{Any, Object as Obj, String as Str};
    map.insert(
        "now",
        Function::new(Signature::fixed([]), |_| Ok(time_value(Time::now()))),
    );
    map.insert(
        "date",
        Function::new(Signature::fixed([Str, Any]), |a| {
            Ok(Value::string(date_in_zone(s(&a[0]), &a[1], "Local")))
        }),
    );
    for name in ["dateInZone", "date_in_zone"] {
        map.insert(
            name,
            Function::new(Signature::fixed([Str, Any, Str]), |a| {
                Ok(Value::string(date_in_zone(s(&a[0]), &a[1], s(&a[2]))))
            }),
        );
    }
    map.insert(
        "htmlDate",
        Function::new(Signature::fixed([Any]), |a| {
            Ok(Value::string(date_in_zone("2006-01-02", &a[0], "Local")))
        }),
    );
    map.insert(
        "htmlDateInZone",
        Function::new(Signature::fixed([Any, Str]), |a| {
            Ok(Value::string(date_in_zone("2006-01-02", &a[0], s(&a[1]))))
        }),
    );
    for name in ["dateModify", "date_modify"] {
        map.insert(
            name,
            Function::new(Signature::fixed([Str, Obj(TIME_TYPE)]), |a| {
                let t = as_time(&a[1]).unwrap_or_else(Time::zero);
                Ok(time_value(match parse_duration(s(&a[0])) {
                    Ok(d) => t.add(d),
                    Err(_) => t,
                }))
            }),
        );
    }
    for name in ["mustDateModify", "must_date_modify"] {
        map.insert(
            name,
            Function::new(Signature::fixed([Str, Obj(TIME_TYPE)]), |a| {
                let t = as_time(&a[1]).unwrap_or_else(Time::zero);
                let d = parse_duration(s(&a[0])).map_err(FuncError::new)?;
                Ok(time_value(t.add(d)))
            }),
        );
    }
    map.insert(
        "ago",
        Function::new(Signature::fixed([Any]), |a| {
            let t = match &a[0] {
                Value::Int(i) | Value::Int64(i) => Time::from_unix(*i),
                v @ Value::Object(_) => as_time(v).unwrap_or_else(Time::now),
                _ => Time::now(),
            };
            let since = Time::now().sub(&t);
            Ok(Value::string(duration_string(round_duration(
                since,
                NANOS_PER_SEC,
            ))))
        }),
    );
    map.insert(
        "duration",
        Function::new(Signature::fixed([Any]), |a| {
            let n = match &a[0] {
                Value::String(s) => s.parse::<i64>().unwrap_or(0),
                Value::Int64(i) => *i,
                _ => 0,
            };
            Ok(Value::string(duration_string(
                n.wrapping_mul(NANOS_PER_SEC),
            )))
        }),
    );
    map.insert(
        "durationRound",
        Function::new(Signature::fixed([Any]), |a| {
            let d = match &a[0] {
                Value::String(s) => parse_duration(s).unwrap_or(0),
                Value::Int64(i) => *i,
                v @ Value::Object(_) => match as_time(v) {
                    Some(t) => Time::now().sub(&t),
                    None => 0,
                },
                _ => 0,
            };
            Ok(Value::string(duration_round(d)))
        }),
    );
    map.insert(
        "toDate",
        Function::new(Signature::fixed([Str, Str]), |a| {
            Ok(time_value(
                parse_in_local(s(&a[0]), s(&a[1])).unwrap_or_else(|_| Time::zero()),
            ))
        }),
    );
    map.insert(
        "mustToDate",
        Function::new(Signature::fixed([Str, Str]), |a| {
            parse_in_local(s(&a[0]), s(&a[1]))
                .map(time_value)
                .map_err(FuncError::new)
        }),
    );
    map.insert(
        "unixEpoch",
        Function::new(Signature::fixed([Obj(TIME_TYPE)]), |a| {
            let t = as_time(&a[0]).unwrap_or_else(Time::zero);
            Ok(Value::string(t.unix().to_string()))
        }),
    );
}

/// Sprig's `durationRound` buckets (thresholds compare with `>`).
fn duration_round(d: Duration) -> String {
    let u = d.unsigned_abs();
    const SECOND: u64 = 1_000_000_000;
    const MINUTE: u64 = 60 * SECOND;
    const HOUR: u64 = 60 * MINUTE;
    const DAY: u64 = 24 * HOUR;
    const MONTH: u64 = 30 * DAY;
    const YEAR: u64 = 365 * DAY;
    for (size, suffix) in [
        (YEAR, "y"),
        (MONTH, "mo"),
        (DAY, "d"),
        (HOUR, "h"),
        (MINUTE, "m"),
        (SECOND, "s"),
    ] {
        if u > size {
            return format!("{}{suffix}", u / size);
        }
    }
    "0s".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(unix: i64, nsec: u32, loc: Location) -> Time {
        Time {
            unix,
            nsec,
            loc,
            mono: None,
        }
    }

    #[test]
    fn formats_go_layouts() {
        let x = t(1_136_239_445, 123_456_789, Location::Utc);
        assert_eq!(
            x.format("2006-01-02T15:04:05.999999999Z07:00"),
            "2006-01-02T22:04:05.123456789Z"
        );
        assert_eq!(
            x.format("Mon Jan _2 3:4:5 PM 06"),
            "Mon Jan  2 10:4:5 PM 06"
        );
        assert_eq!(x.format(".000 ,00 002 __2"), ".123 ,12 002   2");
        assert_eq!(Time::zero().go_string(), "0001-01-01 00:00:00 +0000 UTC");
        let ny = x.in_location(Location::load("America/New_York").expect("zone"));
        assert_eq!(
            ny.format("2006-01-02 15:04:05 -07:00 MST"),
            "2006-01-02 17:04:05 -05:00 EST"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(duration_string(0), "0s");
        assert_eq!(duration_string(1_500), "1.5µs");
        assert_eq!(duration_string(3_723_000_000_000), "1h2m3s");
        assert_eq!(duration_string(-90_000_000_000), "-1m30s");
        assert_eq!(parse_duration("1.5h"), Ok(5_400_000_000_000));
        assert_eq!(
            parse_duration("1"),
            Err("time: missing unit in duration \"1\"".into())
        );
        assert_eq!(
            parse_duration("3x"),
            Err("time: unknown unit \"x\" in duration \"3x\"".into())
        );
        assert_eq!(duration_round(3 * 3_600_000_000_000 + 1), "3h");
    }

    #[test]
    fn parses_go_layouts() {
        let p = parse_in_local("2006-01-02", "2024-02-29").expect("parse");
        assert_eq!(p.unix(), 1_709_164_800);
        assert_eq!(
            parse_in_local("2006-01-02", "2023-02-29").map(|t| t.unix()),
            Err("parsing time \"2023-02-29\": day out of range".into())
        );
        assert_eq!(
            parse_in_local("2006-01-02", "x").map(|t| t.unix()),
            Err("parsing time \"x\" as \"2006-01-02\": cannot parse \"x\" as \"2006\"".into())
        );
    }
}
