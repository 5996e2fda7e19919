//! UTC instants as epoch milliseconds ([`now_ms`], [`to_ms`], [`from_ms`]) and as RFC 3339
//! text, to the second: [`format()`] writes `YYYY-MM-DDTHH:MM:SSZ` and
//! [`parse`], its inverse, reads that shape back (with optional fractional seconds and `Z` or
//! `+00:00`; other offsets are refused).
//!
//! The two are the proleptic Gregorian calendar conversions of Howard Hinnant
//! (`civil_from_days` and `days_from_civil`), kept side by side so they stay each other's
//! inverse; a test checks the round trip.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    to_ms(SystemTime::now())
}

/// An instant as milliseconds since the Unix epoch (0 before it).
pub fn to_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// An epoch-ms time (read from a file: any u64) as an instant. Cannot overflow: u64::MAX ms is
/// about 1.8e16 s, far below the i64 seconds a `SystemTime` holds.
pub fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Formats an instant as `YYYY-MM-DDTHH:MM:SSZ` (UTC; instants before 1970 show the epoch,
/// sub-second parts are dropped).
pub fn format(t: SystemTime) -> String {
    let epoch = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((epoch / 86_400) as i64);
    let secs = epoch % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff](Z|+00:00)` (UTC only), to the second; `None` for any other
/// shape or an instant before 1970.
pub fn parse(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let n = |a: usize, z: usize| s.get(a..z)?.parse::<i64>().ok();
    let (y, m, d) = (n(0, 4)?, n(5, 7)?, n(8, 10)?);
    let (hh, mm, ss) = (n(11, 13)?, n(14, 16)?, n(17, 19)?);
    let fields = [
        (m, 1, 12),
        (d, 1, 31),
        (hh, 0, 23),
        (mm, 0, 59),
        (ss, 0, 60),
    ];
    if y < 0 || fields.iter().any(|&(v, lo, hi)| v < lo || v > hi) {
        return None;
    }
    let rest = &s[19..];
    let rest = rest.trim_start_matches(|c: char| c == '.' || c.is_ascii_digit());
    if !(rest.is_empty() || rest == "Z" || rest == "+00:00") {
        return None;
    }
    let secs = u64::try_from(days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60 + ss).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Parses an HTTP date in its preferred form (IMF-fixdate, RFC 9110 5.6.7:
/// `Sun, 06 Nov 1994 08:49:37 GMT`), what `retry-after` may carry instead of seconds; `None`
/// for any other shape or an instant before 1970.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let (_weekday, rest) = s.split_once(", ")?;
    let mut parts = rest.split(' ');
    let (d, mon, y, time, zone) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if parts.next().is_some() || zone != "GMT" || d.len() != 2 || y.len() != 4 {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let m = MONTHS.iter().position(|n| *n == mon)? + 1;
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if !digits(y) || !digits(d) || time.len() != 8 {
        return None;
    }
    let text = format!("{y}-{m:02}-{d}T{time}Z");
    parse(&text)
}

/// The UTC day of an instant in epoch ms, `YYYY-MM-DD`.
pub fn day(ms: u64) -> String {
    let (y, m, d) = civil_from_days((ms / 86_400_000) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The start (epoch ms) of the UTC day and of the UTC month holding `ms`, and the starts of
/// the next day and month: the budget windows and when they reset.
pub fn day_and_month_bounds(ms: u64) -> [(u64, u64); 2] {
    let days = (ms / 86_400_000) as i64;
    let (y, m, _) = civil_from_days(days);
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    // `ms` may be any u64 (a time read from a file): the next day past the largest ms is
    // held at u64::MAX rather than overflowing.
    let at = |d: i64| (d.max(0) as u64).saturating_mul(86_400_000);
    [
        (at(days), at(days + 1)),
        (at(days_from_civil(y, m, 1)), at(days_from_civil(ny, nm, 1))),
    ]
}

/// Year, month (1-12) and day (1-31) of a day counted from 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Days from 1970-01-01 to a date; the inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn utc_formatting() {
        assert_eq!(format(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(format(at(1_893_456_000)), "2030-01-01T00:00:00Z");
        assert_eq!(format(at(1_709_251_199)), "2024-02-29T23:59:59Z");
        assert_eq!(
            format(UNIX_EPOCH - Duration::from_secs(1)),
            "1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn utc_parsing() {
        assert_eq!(parse("2024-02-29T23:59:59.123Z"), Some(at(1_709_251_199)));
        assert_eq!(
            parse(" 2030-01-01T00:00:00+00:00 "),
            Some(at(1_893_456_000))
        );
        assert_eq!(parse("2030-01-01T00:00:00"), Some(at(1_893_456_000)));
        assert_eq!(parse("nope"), None);
        assert_eq!(parse("2030-01-01T00:00:00+02:00"), None);
        assert_eq!(parse("2030-01-01 00:00:00Z"), None);
        assert_eq!(parse("1969-12-31T23:59:59Z"), None);
    }

    #[test]
    fn http_dates_and_nonsense_fields() {
        assert_eq!(
            parse_http_date("Tue, 01 Jan 2030 00:00:00 GMT"),
            Some(at(1_893_456_000))
        );
        assert_eq!(parse_http_date("Tue, 01 Jan 2030 00:00:00 UTC"), None);
        assert_eq!(parse_http_date("Tue, 1 Jan 2030 00:00:00 GMT"), None);
        assert_eq!(parse_http_date("Tue, 01 Foo 2030 00:00:00 GMT"), None);
        assert_eq!(parse_http_date("Tue, 01 Jan +030 00:00:00 GMT"), None);
        assert_eq!(parse_http_date("18446744073709551615"), None);
        // Fields out of their range are no date, not an overflow or a wrapped date.
        assert_eq!(parse("2030-13-01T00:00:00Z"), None);
        assert_eq!(parse("2030-01-01T99:99:99Z"), None);
        assert_eq!(parse("+999-01-01T00:00:00Z"), None);
        assert_eq!(parse("9999-12-31T23:59:59Z"), Some(at(253_402_300_799)));
        // The day bounds of the largest ms a file could hold.
        let [(_, next_day), (_, next_month)] = day_and_month_bounds(u64::MAX);
        assert_eq!(next_day, u64::MAX);
        assert_eq!(next_month, u64::MAX);
        assert!(day(u64::MAX).contains('-'));
    }

    #[test]
    fn parse_is_the_inverse_of_format() {
        // Every day boundary across four centuries (leap years, the 100/400 rules) and a
        // spread of times within days.
        let mut secs = 0u64;
        while secs < 13_000_000_000 {
            let t = at(secs);
            let text = format(t);
            assert_eq!(parse(&text), Some(t), "{text}");
            assert_eq!(format(parse(&text).unwrap()), text);
            secs += 86_400 * 7 + 3_661;
        }
        for day in 0..(366 * 410) {
            let d = day as i64;
            let (y, m, dd) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, dd), d, "{y}-{m}-{dd}");
        }
        // A fractional part is dropped, not rounded.
        let t = at(1_709_251_199) + Duration::from_millis(999);
        assert_eq!(parse(&format(t)), Some(at(1_709_251_199)));
    }
}
